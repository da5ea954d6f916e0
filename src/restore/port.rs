//! What the Restore actors need from Kubernetes, as a port: Secrets, EtcdClusters, the
//! new cluster's creation, status and Events. The implementation is [`super::adapter`].

use async_trait::async_trait;
use etcd_operator_actors::ports::ApiError;

use crate::api::EtcdCluster;
use crate::api::restore::EtcdRestore;
use crate::kube_api::own_objects::OwnObjectWrites;
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
