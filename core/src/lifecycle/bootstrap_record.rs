//! What the EtcdCluster's status remembers of earlier ticks: the bootstrap record, written
//! before the seed exists and never cleared, and the rest of [`Recorded`]. A leaf of the
//! lifecycle's vocabulary; the bootstrap rule is in `bootstrap.rs`.

use serde::Serialize;

use super::RecoveryRecord;

/// The durable record of a cluster's birth (`status.bootstrap`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BootstrapRecord {
    /// Name of the seed member (and its pod), when this operator created the seed.
    pub seed: Option<String>,
    /// The seed's `--initial-cluster-token`.
    pub token: Option<String>,
    /// etcd's cluster ID, once a member has answered. Set once, never cleared: from then
    /// on the cluster exists and holds data, whatever happens to its pods.
    pub cluster_id: Option<u64>,
}

impl BootstrapRecord {
    /// The record written right before the seed pod `seed` is created.
    pub fn seed(seed: &str, token: &str) -> Self {
        BootstrapRecord {
            seed: Some(seed.to_string()),
            token: Some(token.to_string()),
            cluster_id: None,
        }
    }

    /// The record with the cluster ID a member answered with, when it had none. A record
    /// that already names a cluster keeps it.
    pub(crate) fn with_cluster_id(&self, cluster_id: u64) -> Self {
        BootstrapRecord {
            cluster_id: self.cluster_id.or(Some(cluster_id)),
            ..self.clone()
        }
    }
}

/// What the EtcdCluster's status remembers from earlier ticks (and earlier operators).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct Recorded {
    /// `status.bootstrap`.
    pub bootstrap: Option<BootstrapRecord>,
    /// Member names the status listed (ready and unready). Clusters created by operator
    /// versions without a bootstrap record are known to exist by these.
    pub members: Vec<String>,
    /// `status.reason`: the reason last published, so a refusal's Event is raised once
    /// even across operator restarts.
    pub reason: String,
    /// `status.failedVersion`: a version an upgraded member could not run.
    pub failed_version: Option<String>,
    /// `status.recovery`: the last recovery from a loss of quorum, finished or not.
    pub recovery: Option<RecoveryRecord>,
    /// `status.revision`: the newest revision a member reported, as last published.
    pub revision: Option<i64>,
    /// The reason of `status.conditions`' `Storage` condition, as last published, so
    /// that its change's Event is raised once even across operator restarts.
    pub storage: Option<String>,
    /// `status.compaction.revision`: the revision the operator last compacted the
    /// cluster's history to.
    pub compacted: Option<i64>,
}
