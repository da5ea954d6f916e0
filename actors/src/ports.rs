//! The traits through which actors reach the outside world: etcd's membership API and the
//! Kubernetes objects of one cluster. The values they take and give are in
//! `etcd_operator_core::ports`; real implementations live in the operator crate; tests and
//! benchmarks use fakes.

use async_trait::async_trait;
use tokio::time::Instant;

use etcd_operator_core::lifecycle::{
    Alarm, BootstrapRecord, CaRotationStep, KvHash, MemberHealth, RecoveryRecord, SnapshotSource,
};
use etcd_operator_core::report::StatusReport;

pub use etcd_operator_core::event::{EventRecord, EventType};
pub use etcd_operator_core::ports::{
    AddedMember, ApiError, Defragmented, EtcdError, EtcdErrorKind, InitialState, KubeView,
    MemberList, MemberPod, NewMember, ServiceKind, VersionChange,
};

/// etcd's membership API (the calls `etcdctl member ...` makes), per cluster.
///
/// `endpoints` are client URLs; an implementation may use any that answers.
///
/// Every call ends within the implementation's own per-call deadline (connecting, trying
/// other endpoints and the request itself all count against it), with an
/// [`EtcdErrorKind::Timeout`] error when it runs out. Callers add no timeout of their own;
/// the Cluster actor's tick timeout is only a backstop.
#[async_trait]
pub trait EtcdApi: Send + Sync + 'static {
    /// `member list`.
    async fn list(&self, endpoints: &[String]) -> Result<MemberList, EtcdError>;
    /// `member add`.
    async fn add(&self, endpoints: &[String], new: &NewMember) -> Result<AddedMember, EtcdError>;
    /// `member remove`.
    async fn remove(&self, endpoints: &[String], id: u64) -> Result<(), EtcdError>;
    /// `member promote`.
    async fn promote(&self, endpoints: &[String], id: u64) -> Result<(), EtcdError>;
    /// `endpoint status` of one member.
    async fn status(&self, endpoint: &str) -> Result<MemberHealth, EtcdError>;
    /// `move-leader`: the leader, reached at its client URL `leader` (only the leader
    /// may hand leadership over), makes voting member `to` the leader; returns once it is.
    async fn move_leader(&self, leader: &str, to: u64) -> Result<(), EtcdError>;
    /// `alarm disarm` of one alarm (an alarm no longer raised is not an error).
    async fn disarm_alarm(&self, endpoints: &[String], alarm: Alarm) -> Result<(), EtcdError>;
    /// `compact` of the cluster's history to `revision` (a revision already compacted is
    /// not an error).
    async fn compact(&self, endpoints: &[String], revision: i64) -> Result<(), EtcdError>;
    /// `defrag` of the member at client URL `endpoint`, with its backend's size before
    /// and after. Its deadline is the implementation's own for defragmentations, longer
    /// than other calls': the member rewrites its whole backend.
    async fn defragment(&self, endpoint: &str) -> Result<Defragmented, EtcdError>;
    /// `HashKV` of the member at client URL `endpoint` at `revision`: the hash of its
    /// key-value store, and the revision its history is compacted to.
    async fn hash_kv(&self, endpoint: &str, revision: i64) -> Result<KvHash, EtcdError>;
}

/// The Kubernetes objects of one cluster.
#[async_trait]
pub trait ClusterApi: Send + Sync + 'static {
    /// The cluster's pods and Services, and what its status remembers.
    async fn observe(&self) -> Result<KubeView, ApiError>;
    /// Makes the operator-managed certificates (`spec.TLS.auto`) that are missing,
    /// invalid or due for renewal, from the cluster's CA (made first when it is the
    /// operator's own and missing); says what it issued, for people. Idempotent.
    async fn issue_certificates(&self) -> Result<String, ApiError>;
    /// Moves the CA rotation of an operator-managed cluster from step `from` to step `to`
    /// (`None`: no rotation), recorded in the CA Secret; refused when the Secret records
    /// another step than `from`. Says what it did, for people.
    async fn advance_ca_rotation(
        &self,
        from: Option<CaRotationStep>,
        to: Option<CaRotationStep>,
    ) -> Result<String, ApiError>;
    /// Creates the cluster's `service` if missing (and corrects an older client
    /// Service's selector); a conflict when its name belongs to someone else.
    async fn ensure_service(&self, service: ServiceKind) -> Result<(), ApiError>;
    /// Creates the cluster's PodDisruptionBudget over its voting members' pods, or sets
    /// its `minAvailable` (idempotent).
    async fn set_disruption_budget(&self, min_available: u32) -> Result<(), ApiError>;
    /// Sets the storage request of member `name`'s PersistentVolumeClaim.
    async fn expand_claim(&self, name: &str, quantity: &str) -> Result<(), ApiError>;
    /// Creates a member's pod.
    async fn create_member_pod(&self, pod: &MemberPod) -> Result<(), ApiError>;
    /// Deletes a pod, and the member's PersistentVolumeClaim with it (its member has left
    /// etcd, or never was one); a pod or claim already gone is not an error.
    async fn delete_pod(&self, name: &str) -> Result<(), ApiError>;
    /// Deletes a member's pod and nothing else, so that it gets a new one: its claim keeps
    /// the member's data for it. A pod already gone is not an error.
    async fn recreate_pod(&self, name: &str) -> Result<(), ApiError>;
    /// Changes the etcd image of a pod in place, with its upgrade marks.
    async fn set_pod_version(&self, name: &str, change: &VersionChange) -> Result<(), ApiError>;
    /// Labels a pod as a voting member's, putting it behind the client Service.
    async fn label_voter(&self, name: &str) -> Result<(), ApiError>;
    /// Writes the EtcdCluster's status.
    async fn publish_status(&self, report: &StatusReport) -> Result<(), ApiError>;
    /// Writes a new bootstrap record into the status, before the seed it names exists.
    /// Refused when the status (read fresh, not from a cache) already holds a record: a
    /// cluster is bootstrapped once. Later observations show the record even while a
    /// cache lags behind this write.
    async fn record_bootstrap(&self, record: &BootstrapRecord) -> Result<(), ApiError>;
    /// Records an Event on the EtcdCluster.
    async fn record_event(&self, event: &EventRecord) -> Result<(), ApiError>;
    /// Writes a recovery record into the status (`status.recovery`). An unfinished record
    /// is written before the recovery acts, and refused when the status (read fresh) holds
    /// an unfinished one already, or a record of the same incident; a finished record
    /// replaces the unfinished one of its incident. Starting a recovery also removes the
    /// recovery annotation, which asks for one recovery only.
    async fn record_recovery(&self, record: &RecoveryRecord) -> Result<(), ApiError>;
    /// The newest verified backup in `spec.recovery.backup`'s store (its metadata checked;
    /// the seed's pod checks the bytes while fetching them); `None` when the spec names no
    /// store. An answer kept from an earlier lookup is given only when it was read at or
    /// after `read_since` (a recovery acts only on what the store held once the loss
    /// began).
    async fn newest_backup(
        &self,
        read_since: Option<Instant>,
    ) -> Result<Option<SnapshotSource>, ApiError>;
}
