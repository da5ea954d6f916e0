//! What the Restore actors need from Kubernetes, as a port, and its implementation over
//! kube-rs with every write (the new cluster, status, Events) behind the leader's fence.

use async_trait::async_trait;
use etcd_operator_actors::ports::ApiError;
use kube::Client;
use kube::api::{Api, PostParams};
use kube::runtime::events::Recorder;

use crate::api::EtcdCluster;
use crate::api::restore::EtcdRestore;
use crate::backup::kube::{BackupKube, KubeBackupApi};
use crate::controller::fence::Fence;
use crate::kube_api::error::api_error;
use crate::kube_api::own_objects::{KubeOwnObjects, OwnObjectWrites};
use crate::secret_data::SecretData;

/// What creating the new EtcdCluster did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Created {
    /// It was created.
    New,
    /// One of that name exists already (created meanwhile by someone else): nothing
    /// was changed.
    Exists,
}

/// The Restore actors' port to Kubernetes. Errors are typed as the cluster side's are, in
/// the API's words.
#[async_trait]
pub trait RestoreKube: Send + Sync + 'static {
    /// The data of a Secret; `None` when it does not exist.
    async fn secret(&self, namespace: &str, name: &str) -> Result<Option<SecretData>, ApiError>;
    /// An EtcdCluster, read fresh.
    async fn cluster(&self, namespace: &str, name: &str) -> Result<Option<EtcdCluster>, ApiError>;
    /// Creates an EtcdCluster; one of the same name that exists is left alone.
    async fn create_cluster(&self, cluster: &EtcdCluster) -> Result<Created, ApiError>;
    /// An EtcdRestore's status and Events.
    fn writes(&self) -> &dyn OwnObjectWrites<EtcdRestore>;
}

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
