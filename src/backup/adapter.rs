//! [`BackupKube`](super::port::BackupKube) over kube-rs, with every write (status,
//! Events) and every store change behind the leader's fence.

use std::sync::Arc;

use async_trait::async_trait;
use etcd_operator_actors::ports::ApiError;
use k8s_openapi::api::core::v1::{Pod, Secret, Service};
use kube::Client;
use kube::api::{Api, ListParams};
use kube::runtime::events::Recorder;
use kube::runtime::reflector::Store;

use super::port::BackupKube;
use super::scope::{NamespaceView, PodFacts, ServiceFacts};
use crate::api::EtcdCluster;
use crate::api::backup::EtcdBackup;
use crate::controller::fence::Fence;
use crate::etcd_api::AddressSource;
use crate::kube_api::error::api_error;
use crate::kube_api::own_objects::{KubeOwnObjects, OwnObjectWrites};
use crate::kube_api::{member_address, member_hosts};
use crate::secret_data::SecretData;

/// [`BackupKube`] over kube-rs.
pub struct KubeBackupApi {
    client: Client,
    writes: KubeOwnObjects,
    pods: Option<Store<Pod>>,
}

impl KubeBackupApi {
    /// Calls through `client`, Events through `recorder`, writes behind `fence`.
    pub fn new(client: Client, recorder: Recorder, fence: Fence) -> Self {
        KubeBackupApi {
            writes: KubeOwnObjects::new(client.clone(), recorder, fence),
            client,
            pods: None,
        }
    }

    /// The same, dialing members at their pods' addresses from the operator's pod cache
    /// (as the cluster side does).
    pub fn with_pods(mut self, pods: Store<Pod>) -> Self {
        self.pods = Some(pods);
        self
    }
}

/// What dialing `pod` needs to know of it.
fn pod_facts(pod: Pod) -> PodFacts {
    let spec = pod.spec.unwrap_or_default();
    let status = pod.status.unwrap_or_default();
    let mut ips: Vec<_> = status
        .pod_ips
        .unwrap_or_default()
        .iter()
        .filter_map(|ip| ip.ip.parse().ok())
        .collect();
    if let Some(ip) = status.pod_ip.and_then(|ip| ip.parse().ok())
        && !ips.contains(&ip)
    {
        ips.push(ip);
    }
    PodFacts {
        name: pod.metadata.name.unwrap_or_default(),
        hostname: spec.hostname,
        subdomain: spec.subdomain,
        labels: pod.metadata.labels.unwrap_or_default(),
        ips,
        host_network: spec.host_network.unwrap_or(false),
        finished: matches!(status.phase.as_deref(), Some("Succeeded" | "Failed")),
    }
}

/// What dialing `service` needs to know of it.
fn service_facts(service: Service) -> ServiceFacts {
    let spec = service.spec.unwrap_or_default();
    let external = spec.type_.as_deref() == Some("ExternalName");
    ServiceFacts {
        name: service.metadata.name.unwrap_or_default(),
        selector: spec.selector,
        external_name: external.then(|| spec.external_name.unwrap_or_default()),
        cluster_ips: spec
            .cluster_ips
            .unwrap_or_default()
            .iter()
            .chain(spec.cluster_ip.iter())
            .filter_map(|ip| ip.parse().ok())
            .collect(),
    }
}

#[async_trait]
impl BackupKube for KubeBackupApi {
    async fn secret(&self, namespace: &str, name: &str) -> Result<Option<SecretData>, ApiError> {
        let api: Api<Secret> = Api::namespaced(self.client.clone(), namespace);
        let secret = api
            .get_opt(name)
            .await
            .map_err(|e| api_error(&format!("reading secret {name}"), &e))?;
        Ok(secret.map(|s| {
            let mut data: SecretData = s
                .data
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| (k, v.0))
                .collect();
            for (k, v) in s.string_data.unwrap_or_default() {
                data.insert(k, v.into_bytes());
            }
            data
        }))
    }

    async fn cluster(&self, namespace: &str, name: &str) -> Result<Option<EtcdCluster>, ApiError> {
        let api: Api<EtcdCluster> = Api::namespaced(self.client.clone(), namespace);
        api.get_opt(name)
            .await
            .map_err(|e| api_error(&format!("reading EtcdCluster {name}"), &e))
    }

    fn addresses(&self) -> Option<AddressSource> {
        let pods = self.pods.clone()?;
        Some(Arc::new(move |host: &str| member_address(&pods, host)))
    }

    fn member_hosts(&self, namespace: &str, cluster: &str) -> Vec<String> {
        self.pods
            .as_ref()
            .map(|pods| member_hosts(pods, namespace, cluster))
            .unwrap_or_default()
    }

    async fn namespace_view(&self, namespace: &str) -> Result<NamespaceView, ApiError> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let services: Api<Service> = Api::namespaced(self.client.clone(), namespace);
        let all = ListParams::default();
        let (pods, services) =
            futures::try_join!(pods.list(&all), services.list(&all)).map_err(|e| {
                let what = format!("reading the pods and Services of namespace {namespace}");
                api_error(&what, &e)
            })?;
        Ok(NamespaceView {
            namespace: namespace.to_string(),
            pods: pods.items.into_iter().map(pod_facts).collect(),
            services: services.items.into_iter().map(service_facts).collect(),
        })
    }

    fn writes(&self) -> &dyn OwnObjectWrites<EtcdBackup> {
        &self.writes
    }

    fn may_act(&self, what: &str) -> Result<(), ApiError> {
        self.writes.may_act(what)
    }
}
