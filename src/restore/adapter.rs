//! [`RestoreKube`](super::port::RestoreKube) over kube-rs, with every write (the new
//! cluster, status, Events) behind the leader's fence.

use async_trait::async_trait;
use etcd_operator_actors::ports::ApiError;
use kube::Client;
use kube::api::{Api, PostParams};
use kube::runtime::events::Recorder;

use super::port::{Created, RestoreKube};
use crate::api::EtcdCluster;
use crate::api::restore::EtcdRestore;
use crate::backup::adapter::KubeBackupApi;
use crate::backup::port::BackupKube;
use crate::controller::fence::Fence;
use crate::kube_api::error::api_error;
use crate::kube_api::own_objects::{KubeOwnObjects, OwnObjectWrites};
use crate::secret_data::SecretData;

/// [`RestoreKube`] over kube-rs.
pub struct KubeRestoreApi {
    client: Client,
    writes: KubeOwnObjects,
    /// The reads the backup side makes too (Secrets, EtcdClusters).
    reads: KubeBackupApi,
}

impl KubeRestoreApi {
    /// Calls through `client`, Events through `recorder`, writes behind `fence`.
    pub fn new(client: Client, recorder: Recorder, fence: Fence) -> Self {
        KubeRestoreApi {
            reads: KubeBackupApi::new(client.clone(), recorder.clone(), fence.clone()),
            writes: KubeOwnObjects::new(client.clone(), recorder, fence),
            client,
        }
    }
}

#[async_trait]
impl RestoreKube for KubeRestoreApi {
    async fn secret(&self, namespace: &str, name: &str) -> Result<Option<SecretData>, ApiError> {
        self.reads.secret(namespace, name).await
    }

    async fn cluster(&self, namespace: &str, name: &str) -> Result<Option<EtcdCluster>, ApiError> {
        self.reads.cluster(namespace, name).await
    }

    async fn create_cluster(&self, cluster: &EtcdCluster) -> Result<Created, ApiError> {
        self.writes.may_act("create an EtcdCluster")?;
        let namespace = cluster.metadata.namespace.as_deref().unwrap_or_default();
        let name = cluster.metadata.name.as_deref().unwrap_or_default();
        let api: Api<EtcdCluster> = Api::namespaced(self.client.clone(), namespace);
        let created = api.create(&PostParams::default(), cluster).await;
        match created.map_err(|e| api_error(&format!("creating EtcdCluster {name}"), &e)) {
            Ok(_) => Ok(Created::New),
            Err(ApiError::Conflict(_)) => Ok(Created::Exists),
            Err(e) => Err(e),
        }
    }

    fn writes(&self) -> &dyn OwnObjectWrites<EtcdRestore> {
        &self.writes
    }
}
