//! What the backup actors need from Kubernetes, as a port: Secrets, EtcdClusters, the
//! members' pod addresses, the pods and Services a backup may dial, status and Events.
//! Its errors are typed as the cluster side's are. The implementation is [`super::adapter`].

use async_trait::async_trait;
use etcd_operator_actors::ports::ApiError;

use super::scope::NamespaceView;
use crate::api::EtcdCluster;
use crate::api::backup::EtcdBackup;
use crate::etcd_api::AddressSource;
use crate::kube_api::own_objects::OwnObjectWrites;
use crate::secret_data::SecretData;

/// The backup actors' port to Kubernetes. Errors are typed as the cluster side's are, in
/// the API's words.
#[async_trait]
pub trait BackupKube: Send + Sync + 'static {
    /// The data of a Secret; `None` when it does not exist.
    async fn secret(&self, namespace: &str, name: &str) -> Result<Option<SecretData>, ApiError>;
    /// An EtcdCluster; `None` when it does not exist.
    async fn cluster(&self, namespace: &str, name: &str) -> Result<Option<EtcdCluster>, ApiError>;
    /// Where members are reached by their DNS names' hosts (`<member>.<cluster>.<ns>.svc`):
    /// their pods' addresses (see `Route`); `None` leaves every name to DNS.
    fn addresses(&self) -> Option<AddressSource> {
        None
    }
    /// The DNS names of cluster `cluster`'s member pods that have an address (empty when
    /// unknown).
    fn member_hosts(&self, _namespace: &str, _cluster: &str) -> Vec<String> {
        Vec::new()
    }
    /// The pods and Services of `namespace`, read now: what a backup there may dial.
    async fn namespace_view(&self, namespace: &str) -> Result<NamespaceView, ApiError>;
    /// An EtcdBackup's status and Events.
    fn writes(&self) -> &dyn OwnObjectWrites<EtcdBackup>;
    /// Whether this replica may act now (take a backup, delete old ones): the fence,
    /// whose refusal is `Forbidden`.
    fn may_act(&self, what: &str) -> Result<(), ApiError>;
}
