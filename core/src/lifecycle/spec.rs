//! What the user asked for, reduced to what the lifecycle decides on.

use serde::Serialize;

use super::{Compaction, Defragmentation, RecoverySpec, SnapshotSource, TlsMode};

/// The desired shape of one etcd cluster, taken from its `EtcdCluster` spec.
///
/// The Kubernetes-specific parts of the spec (pod policy, repository) stay with the adapter
/// that builds pods; the lifecycle only needs these fields.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DesiredCluster {
    /// Number of voting members wanted.
    pub size: u32,
    /// etcd version wanted, as written by the user (validated when deciding).
    pub version: String,
    /// Observe and report only; take no action.
    pub paused: bool,
    /// The object is being deleted (`metadata.deletionTimestamp` is set, a finalizer or a
    /// foreground deletion keeping it): nothing new is made for it.
    pub deleting: bool,
    /// How peer and client traffic is secured (`spec.TLS`).
    pub tls: TlsMode,
    /// Why the cluster's name cannot make valid object names (Services, pods, DNS
    /// labels), when it cannot; the CRD refuses such names, this catches older objects.
    pub name_problem: Option<String>,
    /// Why the pod policy cannot be used, when it cannot (an `etcdEnv` variable whose
    /// flag the operator owns, a label or annotation key of the operator's); the CRD
    /// refuses such a spec, this catches older objects.
    pub pod_policy_problem: Option<String>,
    /// Why the cluster's image is not one the operator may run (its repository is not
    /// among the operator's allowed ones), when it is not.
    pub image_problem: Option<String>,
    /// `metadata.generation` of the object this was read from.
    pub generation: i64,
    /// `metadata.uid` of the object: a cluster deleted and created again under the same
    /// name is another cluster, and nothing an actor learned of the first carries over.
    pub uid: String,
    /// Digest of the repository and pod policy new member pods are built from.
    pub pod_template: String,
    /// The storage each member's claim asks for (`spec.pod.persistentVolumeClaimSpec`),
    /// when members are on claims.
    pub storage: Option<Storage>,
    /// Each member's backend quota in bytes (`ETCD_QUOTA_BACKEND_BYTES` in
    /// `spec.pod.etcdEnv`, else etcd's default).
    pub quota_backend_bytes: u64,
    /// How the cluster's history is compacted (`spec.compaction`, or etcd's own when
    /// `spec.pod.etcdEnv` sets it).
    pub compaction: Compaction,
    /// When members are defragmented (`spec.defragmentation`).
    pub defragmentation: Defragmentation,
    /// The snapshot the seed restores before it starts (`spec.restore`, written by an
    /// EtcdRestore): read only while the cluster has never bootstrapped.
    pub restore: Option<SnapshotSource>,
    /// What to do about a permanent loss of quorum (`spec.recovery` and the recovery
    /// annotation).
    pub recovery: RecoverySpec,
    /// The object's annotations that ask for something (`rotate-ca`, `recover`), as
    /// written. The lifecycle reads them elsewhere (the CA rotation from the adapter's
    /// view, the recovery from [`RecoverySpec::requested`]); they are kept here so that a
    /// change of one is a change of the desired cluster, which wakes its actor at once.
    pub requests: Requests,
}

/// The annotations of an EtcdCluster that ask the operator for something, as written.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct Requests {
    /// `etcd.database.coreos.com/rotate-ca`: a new value asks for a CA rotation.
    pub rotate_ca: Option<String>,
    /// `etcd.database.coreos.com/recover`: asks for a recovery from a loss of quorum.
    pub recover: Option<String>,
}

/// A storage request: as written, and in bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Storage {
    /// The quantity as the spec writes it (`2Gi`).
    pub quantity: String,
    /// The same in bytes.
    pub bytes: u128,
}

impl DesiredCluster {
    /// A plain desired cluster of `size` members at `version`, not paused, without TLS.
    pub fn new(size: u32, version: &str) -> Self {
        DesiredCluster {
            size,
            version: version.to_string(),
            paused: false,
            deleting: false,
            tls: TlsMode::Off,
            name_problem: None,
            pod_policy_problem: None,
            image_problem: None,
            generation: 1,
            uid: String::new(),
            pod_template: String::new(),
            storage: None,
            quota_backend_bytes: super::DEFAULT_QUOTA_BACKEND_BYTES,
            compaction: Compaction::default(),
            defragmentation: Defragmentation::default(),
            restore: None,
            recovery: RecoverySpec::default(),
            requests: Requests::default(),
        }
    }
}
