//! Prometheus metrics of the actors. Labels are bounded: action kinds, outcomes, phase
//! names and error kinds, never cluster names.

use std::sync::Arc;

use async_trait::async_trait;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use tokio::time::Instant;

use crate::ports::{
    AddedMember, ApiError, ClusterApi, Defragmented, EtcdApi, EtcdError, EventRecord, KubeView,
    MemberList, MemberPod, NewMember, ServiceKind, VersionChange,
};
use etcd_operator_core::lifecycle::{
    Alarm, BootstrapRecord, CaRotationStep, KvHash, MemberHealth, RecoveryRecord, SnapshotSource,
};
use etcd_operator_core::report::StatusReport;

/// Labels of an executed action.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ActionLabels {
    /// [`etcd_operator_core::lifecycle::Action::kind`].
    pub action: &'static str,
    /// `ok` or `error`.
    pub outcome: &'static str,
}

/// Labels of a phase transition.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PhaseLabels {
    /// The phase entered.
    pub phase: &'static str,
}

/// Labels of a `Storage` condition's state.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StorageLabels {
    /// `Healthy`, `NearQuota`, `NoSpace` or `Corrupt`.
    pub state: &'static str,
}

/// Labels of a failed call to a port.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    /// [`ApiError::metric_label`] or [`crate::ports::EtcdErrorKind::metric_label`].
    pub kind: &'static str,
}

/// Labels of a call to a port.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CallLabels {
    /// The port method called (`list`, `status`, `observe`, `publish_status`, ...).
    pub call: &'static str,
}

/// The actors' metrics, registered in one registry.
#[derive(Clone)]
pub struct Metrics {
    /// Ticks completed.
    pub ticks: Counter,
    /// Time one tick takes: observe, decide, act, report.
    pub tick_seconds: Histogram,
    /// Actions executed, by kind and outcome.
    pub actions: Family<ActionLabels, Counter>,
    /// Phase transitions, by phase entered.
    pub transitions: Family<PhaseLabels, Counter>,
    /// Cluster actors alive.
    pub clusters: Gauge,
    /// Cluster actors restarted after a crash.
    pub restarts: Counter,
    /// 1 while this replica leads (holds the leader Lease, or leader election is off).
    pub leader: Gauge,
    /// Failed Kubernetes API calls of the Cluster actors, by [`ApiError::metric_label`].
    pub api_errors: Family<ErrorLabels, Counter>,
    /// Failed etcd calls of the Cluster actors, by
    /// [`crate::ports::EtcdErrorKind::metric_label`].
    pub etcd_errors: Family<ErrorLabels, Counter>,
    /// Calls of the Cluster actors to the Kubernetes port, failed or not, by method
    /// (one `observe` reads the informer caches and a few objects).
    pub api_calls: Family<CallLabels, Counter>,
    /// Calls of the Cluster actors to etcd, failed or not, by method: what a cluster
    /// costs etcd (and the operator) while nothing happens.
    pub etcd_calls: Family<CallLabels, Counter>,
    /// Cluster actors by the phase of their last decision.
    pub clusters_by_phase: Family<PhaseLabels, Gauge>,
    /// Cluster actors by the state of the `Storage` condition they last reported (none
    /// before a member reported its backend).
    pub clusters_by_storage: Family<StorageLabels, Gauge>,
    /// Time one member's defragmentation took (those that succeeded).
    pub defragmentation_seconds: Histogram,
    /// Bytes the members' defragmentations freed.
    pub defragmentation_freed_bytes: Counter,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            ticks: Counter::default(),
            tick_seconds: Histogram::new(exponential_buckets(0.001, 2.0, 14)),
            actions: Family::default(),
            transitions: Family::default(),
            clusters: Gauge::default(),
            restarts: Counter::default(),
            leader: Gauge::default(),
            api_errors: Family::default(),
            etcd_errors: Family::default(),
            api_calls: Family::default(),
            etcd_calls: Family::default(),
            clusters_by_phase: Family::default(),
            clusters_by_storage: Family::default(),
            defragmentation_seconds: Histogram::new(exponential_buckets(0.05, 2.0, 12)),
            defragmentation_freed_bytes: Counter::default(),
        }
    }
}

impl Metrics {
    /// Registers every metric under the `etcd_operator` prefix.
    pub fn register(&self, registry: &mut Registry) {
        let r = registry.sub_registry_with_prefix("etcd_operator");
        r.register("ticks", "Cluster ticks completed", self.ticks.clone());
        r.register(
            "tick_seconds",
            "Duration of one cluster tick",
            self.tick_seconds.clone(),
        );
        r.register(
            "actions",
            "Actions executed by kind and outcome",
            self.actions.clone(),
        );
        r.register(
            "transitions",
            "Lifecycle phase transitions by phase entered",
            self.transitions.clone(),
        );
        r.register("clusters", "Cluster actors alive", self.clusters.clone());
        r.register(
            "cluster_restarts",
            "Cluster actors restarted after a crash",
            self.restarts.clone(),
        );
        r.register(
            "leader",
            "1 while this replica leads (holds the leader Lease), else 0",
            self.leader.clone(),
        );
        r.register(
            "api_errors",
            "Failed Kubernetes API calls of the cluster actors by kind",
            self.api_errors.clone(),
        );
        r.register(
            "etcd_errors",
            "Failed etcd calls of the cluster actors by kind",
            self.etcd_errors.clone(),
        );
        r.register(
            "api_calls",
            "Kubernetes port calls of the cluster actors by method",
            self.api_calls.clone(),
        );
        r.register(
            "etcd_calls",
            "etcd calls of the cluster actors by method",
            self.etcd_calls.clone(),
        );
        r.register(
            "clusters_by_phase",
            "Cluster actors by the phase of their last decision",
            self.clusters_by_phase.clone(),
        );
        r.register(
            "clusters_by_storage",
            "Cluster actors by the state of the Storage condition they last reported",
            self.clusters_by_storage.clone(),
        );
        r.register(
            "defragmentation_seconds",
            "Duration of one member's defragmentation by the operator",
            self.defragmentation_seconds.clone(),
        );
        r.register(
            "defragmentation_freed_bytes",
            "Bytes freed by the operator's defragmentations",
            self.defragmentation_freed_bytes.clone(),
        );
    }

    /// Moves one cluster from phase `from` to phase `to` in `clusters_by_phase` (`None`:
    /// the actor starts or stops).
    pub fn move_phase(&self, from: Option<&'static str>, to: Option<&'static str>) {
        if from == to {
            return;
        }
        if let Some(phase) = from {
            self.clusters_by_phase
                .get_or_create(&PhaseLabels { phase })
                .dec();
        }
        if let Some(phase) = to {
            self.clusters_by_phase
                .get_or_create(&PhaseLabels { phase })
                .inc();
        }
    }

    /// Moves one cluster from `Storage` state `from` to `to` in `clusters_by_storage`
    /// (`None`: none reported, or the actor stops); a state it does not know is left out.
    pub fn move_storage(&self, from: Option<&str>, to: Option<&str>) {
        if from == to {
            return;
        }
        let known = |state: Option<&str>| {
            ["Healthy", "NearQuota", "NoSpace", "Corrupt"]
                .into_iter()
                .find(|s| Some(*s) == state)
        };
        if let Some(state) = known(from) {
            self.clusters_by_storage
                .get_or_create(&StorageLabels { state })
                .dec();
        }
        if let Some(state) = known(to) {
            self.clusters_by_storage
                .get_or_create(&StorageLabels { state })
                .inc();
        }
    }

    /// Counts a failed Kubernetes API call.
    pub fn count_api_error(&self, error: &ApiError) {
        let kind = error.metric_label();
        self.api_errors.get_or_create(&ErrorLabels { kind }).inc();
    }

    /// Counts a failed etcd call.
    pub fn count_etcd_error(&self, error: &EtcdError) {
        let kind = error.kind.metric_label();
        self.etcd_errors.get_or_create(&ErrorLabels { kind }).inc();
    }
}

/// The debug view and metrics, shared by every actor.
#[derive(Clone, Default)]
pub struct Telemetry {
    /// Actor states and the transition stream.
    pub hub: crate::debug::DebugHub,
    /// Prometheus metrics.
    pub metrics: Metrics,
}

/// A cluster's Kubernetes port that counts every call in `api_calls`, by method, and
/// every failed one in `api_errors`, by kind.
pub struct CountedClusterApi {
    inner: Arc<dyn ClusterApi>,
    metrics: Metrics,
}

impl CountedClusterApi {
    /// Counts the failures of `inner` in `metrics`.
    pub fn new(inner: Arc<dyn ClusterApi>, metrics: Metrics) -> Self {
        CountedClusterApi { inner, metrics }
    }

    fn counted<T>(&self, call: &'static str, result: Result<T, ApiError>) -> Result<T, ApiError> {
        self.metrics
            .api_calls
            .get_or_create(&CallLabels { call })
            .inc();
        if let Err(error) = &result {
            self.metrics.count_api_error(error);
        }
        result
    }
}

#[async_trait]
impl ClusterApi for CountedClusterApi {
    async fn observe(&self) -> Result<KubeView, ApiError> {
        self.counted("observe", self.inner.observe().await)
    }

    async fn issue_certificates(&self) -> Result<String, ApiError> {
        self.counted("issue_certificates", self.inner.issue_certificates().await)
    }

    async fn advance_ca_rotation(
        &self,
        from: Option<CaRotationStep>,
        to: Option<CaRotationStep>,
    ) -> Result<String, ApiError> {
        self.counted(
            "advance_ca_rotation",
            self.inner.advance_ca_rotation(from, to).await,
        )
    }

    async fn ensure_service(&self, service: ServiceKind) -> Result<(), ApiError> {
        let call = match service {
            ServiceKind::Headless => "ensure_headless_service",
            ServiceKind::Client => "ensure_client_service",
        };
        self.counted(call, self.inner.ensure_service(service).await)
    }

    async fn set_disruption_budget(&self, min_available: u32) -> Result<(), ApiError> {
        self.counted(
            "set_disruption_budget",
            self.inner.set_disruption_budget(min_available).await,
        )
    }

    async fn expand_claim(&self, name: &str, quantity: &str) -> Result<(), ApiError> {
        self.counted(
            "expand_claim",
            self.inner.expand_claim(name, quantity).await,
        )
    }

    async fn create_member_pod(&self, pod: &MemberPod) -> Result<(), ApiError> {
        self.counted("create_member_pod", self.inner.create_member_pod(pod).await)
    }

    async fn delete_pod(&self, name: &str) -> Result<(), ApiError> {
        self.counted("delete_pod", self.inner.delete_pod(name).await)
    }

    async fn recreate_pod(&self, name: &str) -> Result<(), ApiError> {
        self.counted("recreate_pod", self.inner.recreate_pod(name).await)
    }

    async fn set_pod_version(&self, name: &str, change: &VersionChange) -> Result<(), ApiError> {
        self.counted(
            "set_pod_version",
            self.inner.set_pod_version(name, change).await,
        )
    }

    async fn label_voter(&self, name: &str) -> Result<(), ApiError> {
        self.counted("label_voter", self.inner.label_voter(name).await)
    }

    async fn publish_status(&self, report: &StatusReport) -> Result<(), ApiError> {
        self.counted("publish_status", self.inner.publish_status(report).await)
    }

    async fn record_bootstrap(&self, record: &BootstrapRecord) -> Result<(), ApiError> {
        self.counted(
            "record_bootstrap",
            self.inner.record_bootstrap(record).await,
        )
    }

    async fn record_event(&self, event: &EventRecord) -> Result<(), ApiError> {
        self.counted("record_event", self.inner.record_event(event).await)
    }

    async fn record_recovery(&self, record: &RecoveryRecord) -> Result<(), ApiError> {
        self.counted("record_recovery", self.inner.record_recovery(record).await)
    }

    async fn newest_backup(
        &self,
        read_since: Option<Instant>,
    ) -> Result<Option<SnapshotSource>, ApiError> {
        let answer = self.inner.newest_backup(read_since).await;
        self.counted("newest_backup", answer)
    }
}

/// A cluster's etcd port that counts every call in `etcd_calls`, by method, and every
/// failed one in `etcd_errors`, by kind.
pub struct CountedEtcdApi {
    inner: Arc<dyn EtcdApi>,
    metrics: Metrics,
}

impl CountedEtcdApi {
    /// Counts the failures of `inner` in `metrics`.
    pub fn new(inner: Arc<dyn EtcdApi>, metrics: Metrics) -> Self {
        CountedEtcdApi { inner, metrics }
    }

    fn counted<T>(&self, call: &'static str, result: Result<T, EtcdError>) -> Result<T, EtcdError> {
        self.metrics
            .etcd_calls
            .get_or_create(&CallLabels { call })
            .inc();
        if let Err(error) = &result {
            self.metrics.count_etcd_error(error);
        }
        result
    }
}

#[async_trait]
impl EtcdApi for CountedEtcdApi {
    async fn list(&self, endpoints: &[String]) -> Result<MemberList, EtcdError> {
        self.counted("list", self.inner.list(endpoints).await)
    }

    async fn add(&self, endpoints: &[String], new: &NewMember) -> Result<AddedMember, EtcdError> {
        self.counted("add", self.inner.add(endpoints, new).await)
    }

    async fn remove(&self, endpoints: &[String], id: u64) -> Result<(), EtcdError> {
        self.counted("remove", self.inner.remove(endpoints, id).await)
    }

    async fn promote(&self, endpoints: &[String], id: u64) -> Result<(), EtcdError> {
        self.counted("promote", self.inner.promote(endpoints, id).await)
    }

    async fn status(&self, endpoint: &str) -> Result<MemberHealth, EtcdError> {
        self.counted("status", self.inner.status(endpoint).await)
    }

    async fn move_leader(&self, leader: &str, to: u64) -> Result<(), EtcdError> {
        self.counted("move_leader", self.inner.move_leader(leader, to).await)
    }

    async fn disarm_alarm(&self, endpoints: &[String], alarm: Alarm) -> Result<(), EtcdError> {
        let answer = self.inner.disarm_alarm(endpoints, alarm).await;
        self.counted("disarm_alarm", answer)
    }

    async fn compact(&self, endpoints: &[String], revision: i64) -> Result<(), EtcdError> {
        self.counted("compact", self.inner.compact(endpoints, revision).await)
    }

    async fn hash_kv(&self, endpoint: &str, revision: i64) -> Result<KvHash, EtcdError> {
        self.counted("hash_kv", self.inner.hash_kv(endpoint, revision).await)
    }

    async fn defragment(&self, endpoint: &str) -> Result<Defragmented, EtcdError> {
        let started = Instant::now();
        let answer = self.inner.defragment(endpoint).await;
        if let Ok(done) = &answer {
            let metrics = &self.metrics;
            metrics
                .defragmentation_seconds
                .observe(started.elapsed().as_secs_f64());
            metrics
                .defragmentation_freed_bytes
                .inc_by(done.freed().unwrap_or_default());
        }
        self.counted("defragment", answer)
    }
}
