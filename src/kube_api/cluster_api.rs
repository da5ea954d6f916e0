//! `ClusterApi` over the Kubernetes API: reads from the informer caches, writes through
//! the API server.

use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{ObjectReference, PersistentVolumeClaim, Pod, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::events::{Event, EventType as KubeEventType, Recorder};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, Resource, ResourceExt};
use serde_json::json;

use etcd_operator_actors::lifecycle::{BootstrapRecord, PodView, Recorded};
use etcd_operator_actors::ports::{
    ApiError, ClusterApi, EventRecord, EventType, KubeView, MemberPod, VersionChange,
};
use etcd_operator_actors::report::StatusReport;
use etcd_operator_actors::topology::Topology;

use super::expectations::Expectations;
use super::pod_view::pod_view;
use super::status_patch::status_from_report;
use crate::api::{BootstrapStatus, EtcdCluster, EtcdClusterStatus};
use crate::resources::labels::{
    CLUSTER_LABEL, UPGRADE_FROM_ANNOTATION, VOTER_LABEL, object_labels, owner_reference,
};
use crate::resources::{
    ETCD_CONTAINER, client_service, headless_service, image, member_pod, pvc_name,
};

/// The informer caches every cluster reads from.
#[derive(Clone)]
pub struct Caches {
    /// EtcdCluster objects.
    pub clusters: Store<EtcdCluster>,
    /// Member pods of every cluster.
    pub pods: Store<Pod>,
    /// Services made by the operator.
    pub services: Store<Service>,
}

/// The Kubernetes side of one cluster.
pub struct KubeClusterApi {
    client: Client,
    topology: Topology,
    caches: Caches,
    recorder: Recorder,
    expectations: Expectations,
    /// The bootstrap record this operator wrote, until the cache shows it.
    written_bootstrap: std::sync::Mutex<Option<BootstrapRecord>>,
}

fn api_error(what: &str, e: impl std::fmt::Display) -> ApiError {
    ApiError::new(format!("{what}: {e}"))
}

fn is_status(e: &kube::Error, code: u16) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == code)
}

impl KubeClusterApi {
    /// The Kubernetes side of `topology`.
    pub fn new(client: Client, topology: Topology, caches: Caches, recorder: Recorder) -> Self {
        KubeClusterApi {
            client,
            topology,
            caches,
            recorder,
            expectations: Expectations::default(),
            written_bootstrap: std::sync::Mutex::default(),
        }
    }

    /// What the cluster's status remembers, corrected by the bootstrap record this
    /// operator wrote and the cache does not show yet.
    fn recorded(&self, cluster: &EtcdCluster) -> Recorded {
        let mut recorded = cluster
            .status
            .as_ref()
            .map(EtcdClusterStatus::recorded)
            .unwrap_or_default();
        let mut written = self
            .written_bootstrap
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if recorded.bootstrap.is_some() {
            *written = None;
        } else {
            recorded.bootstrap = written.clone();
        }
        recorded
    }

    fn cluster(&self) -> Result<Arc<EtcdCluster>, ApiError> {
        let key = ObjectRef::new(&self.topology.name).within(&self.topology.namespace);
        self.caches.clusters.get(&key).ok_or_else(|| {
            ApiError::new(format!("EtcdCluster {} not in cache", self.topology.key()))
        })
    }

    fn pods_api(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), &self.topology.namespace)
    }

    fn cached_pods(&self) -> Vec<Arc<Pod>> {
        self.caches
            .pods
            .state()
            .into_iter()
            .filter(|p| {
                p.namespace().as_deref() == Some(self.topology.namespace.as_str())
                    && p.labels().get(CLUSTER_LABEL) == Some(&self.topology.name)
            })
            .collect()
    }

    async fn create_if_missing<K>(&self, api: Api<K>, object: &K) -> Result<(), ApiError>
    where
        K: Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
    {
        match api.create(&PostParams::default(), object).await {
            Ok(_) => Ok(()),
            Err(e) if is_status(&e, 409) => Ok(()),
            Err(e) => Err(api_error(&format!("creating {}", object.name_any()), e)),
        }
    }
}

#[async_trait]
impl ClusterApi for KubeClusterApi {
    async fn observe(&self) -> Result<KubeView, ApiError> {
        let cluster = self.cluster()?;
        let cached = self.cached_pods();
        let names: Vec<String> = cached.iter().map(|p| p.name_any()).collect();
        let (created, deleted) = self.expectations.reconcile(&names);
        let mut pods: Vec<PodView> = cached.iter().map(|p| pod_view(p)).collect();
        for pod in &mut pods {
            if deleted.contains(&pod.name) {
                pod.terminating = true;
            }
        }
        for name in created {
            pods.push(PodView {
                name,
                phase: etcd_operator_actors::lifecycle::PodPhase::Pending,
                ready: false,
                terminating: false,
                version: None,
                problem: None,
                started: false,
                upgrade_from: None,
                voter: false,
            });
        }
        self.expectations.correct_versions(&mut pods);
        pods.sort_by(|a, b| a.name.cmp(&b.name));
        let services = self.caches.services.state();
        let has = |name: &str| {
            services.iter().any(|s| {
                s.namespace().as_deref() == Some(self.topology.namespace.as_str())
                    && s.name_any() == name
            })
        };
        Ok(KubeView {
            pods,
            services_present: has(&self.topology.name) && has(&self.topology.client_service()),
            recorded: self.recorded(&cluster),
            name_conflict: None,
        })
    }

    async fn ensure_services(&self) -> Result<(), ApiError> {
        let cluster = self.cluster()?;
        let api: Api<Service> = Api::namespaced(self.client.clone(), &self.topology.namespace);
        self.create_if_missing(api.clone(), &headless_service(&cluster))
            .await?;
        self.create_if_missing(api, &client_service(&cluster)).await
    }

    async fn create_member_pod(&self, member: &MemberPod) -> Result<(), ApiError> {
        let cluster = self.cluster()?;
        let policy = cluster.spec.pod.clone().unwrap_or_default();
        if let Some(spec) = policy.persistent_volume_claim_spec {
            let pvc = PersistentVolumeClaim {
                metadata: ObjectMeta {
                    name: Some(pvc_name(&member.name)),
                    namespace: Some(self.topology.namespace.clone()),
                    labels: Some(object_labels(&self.topology.name)),
                    owner_references: Some(vec![owner_reference(&cluster)]),
                    ..ObjectMeta::default()
                },
                spec: Some(spec),
                status: None,
            };
            let api = Api::namespaced(self.client.clone(), &self.topology.namespace);
            self.create_if_missing(api, &pvc).await?;
        }
        let pod = member_pod(&cluster, member);
        match self.pods_api().create(&PostParams::default(), &pod).await {
            Ok(_) => {
                self.expectations.created(&member.name);
                Ok(())
            }
            Err(e) if is_status(&e, 409) => Ok(()),
            Err(e) => Err(api_error(&format!("creating pod {}", member.name), e)),
        }
    }

    async fn delete_pod(&self, name: &str) -> Result<(), ApiError> {
        match self.pods_api().delete(name, &DeleteParams::default()).await {
            Ok(_) => {
                self.expectations.deleted(name);
                Ok(())
            }
            Err(e) if is_status(&e, 404) => Ok(()),
            Err(e) => Err(api_error(&format!("deleting pod {name}"), e)),
        }
    }

    async fn set_pod_version(&self, name: &str, change: &VersionChange) -> Result<(), ApiError> {
        let cluster = self.cluster()?;
        let version = &change.to;
        let image = image(cluster.spec.repository_or_default(), &version.to_string());
        // A null annotation is removed by the strategic merge patch.
        let patch = json!({
            "metadata": {"annotations": {
                UPGRADE_FROM_ANNOTATION: change.upgrade_from.as_ref().map(ToString::to_string),
            }},
            "spec": {"containers": [{"name": ETCD_CONTAINER, "image": image}]},
        });
        self.pods_api()
            .patch(name, &PatchParams::default(), &Patch::Strategic(patch))
            .await
            .map_err(|e| api_error(&format!("changing the image of pod {name}"), e))?;
        self.expectations.version_set(name, &version.to_string());
        Ok(())
    }

    async fn label_voter(&self, name: &str) -> Result<(), ApiError> {
        let patch = json!({"metadata": {"labels": {VOTER_LABEL: "true"}}});
        self.pods_api()
            .patch(name, &PatchParams::default(), &Patch::Strategic(patch))
            .await
            .map(|_| ())
            .map_err(|e| api_error(&format!("labelling pod {name} a voting member"), e))
    }

    async fn publish_status(&self, report: &StatusReport) -> Result<(), ApiError> {
        let cluster = self.cluster()?;
        let now = jiff::Timestamp::now().to_string();
        let status = status_from_report(report, &self.topology, cluster.status.as_ref(), &now);
        let api: Api<EtcdCluster> = Api::namespaced(self.client.clone(), &self.topology.namespace);
        api.patch_status(
            &self.topology.name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": status })),
        )
        .await
        .map(|_| ())
        .map_err(|e| api_error("writing status", e))
    }

    async fn record_bootstrap(&self, record: &BootstrapRecord) -> Result<(), ApiError> {
        let api: Api<EtcdCluster> = Api::namespaced(self.client.clone(), &self.topology.namespace);
        // Read fresh, not from the cache: this is the one check before a cluster is born.
        let fresh = api
            .get_status(&self.topology.name)
            .await
            .map_err(|e| api_error("reading the EtcdCluster before recording its seed", e))?;
        let recorded = fresh
            .status
            .as_ref()
            .map(EtcdClusterStatus::recorded)
            .unwrap_or_default();
        if recorded.bootstrap.is_some() || !recorded.members.is_empty() {
            return Err(ApiError::new(format!(
                "refusing to record a new seed: the status already records this cluster's \
                 bootstrap ({:?}) or members ({:?})",
                recorded.bootstrap, recorded.members
            )));
        }
        // The resourceVersion makes this a compare-and-swap: a status written since the
        // read above (by anyone) fails the patch instead of being overwritten.
        let patch = json!({
            "metadata": {"resourceVersion": fresh.resource_version()},
            "status": {"bootstrap": BootstrapStatus::from_record(record)},
        });
        api.patch_status(
            &self.topology.name,
            &PatchParams::default(),
            &Patch::Merge(patch),
        )
        .await
        .map_err(|e| api_error("recording the seed in status", e))?;
        *self
            .written_bootstrap
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(record.clone());
        Ok(())
    }

    async fn record_event(&self, event: &EventRecord) -> Result<(), ApiError> {
        let cluster = self.cluster()?;
        let type_ = match event.kind {
            EventType::Normal => KubeEventType::Normal,
            EventType::Warning => KubeEventType::Warning,
        };
        let mut note = event.note.clone();
        note.truncate(1000);
        let ev = Event {
            type_,
            reason: event.reason.clone(),
            note: Some(note),
            action: event.action.clone(),
            secondary: event.member.as_ref().map(|name| ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                namespace: Some(self.topology.namespace.clone()),
                name: Some(name.clone()),
                ..ObjectReference::default()
            }),
        };
        self.recorder
            .publish(&ev, &cluster.object_ref(&()))
            .await
            .map_err(|e| api_error("recording event", e))
    }
}
