//! What one tick saw: the cluster's pods, etcd's member list, and each member's health.

use std::collections::BTreeMap;

use serde::Serialize;
use tokio::time::Instant;

use super::{Alarm, HashCheck, Recorded, SnapshotSource, TlsMode, TlsObservation, Version};
use crate::api_error::ApiError;

/// Lifecycle phase of a pod as Kubernetes reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum PodPhase {
    /// Accepted, not all containers running yet.
    Pending,
    /// Bound and running.
    Running,
    /// All containers exited successfully; for an etcd member this means dead.
    Succeeded,
    /// A container failed; the member is dead.
    Failed,
    /// The kubelet stopped reporting.
    Unknown,
}

/// One pod of the cluster (pods are named after their member).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PodView {
    /// Pod name, equal to the etcd member name.
    pub name: String,
    /// Kubernetes phase.
    pub phase: PodPhase,
    /// The pod's Ready condition.
    pub ready: bool,
    /// A deletion has been requested.
    pub terminating: bool,
    /// etcd version of the pod's image (what it runs or is about to run).
    pub version: Option<String>,
    /// Why a container is waiting or failing, as the kubelet says (e.g. `ErrImagePull: ...`).
    pub problem: Option<String>,
    /// The etcd container has run at some point (running now, or exited). A pod whose etcd
    /// never ran holds no data.
    pub started: bool,
    /// The version this pod ran before its image was last upgraded, while the member has
    /// not yet been seen healthy on the new one (the pod's upgrade mark).
    pub upgrade_from: Option<String>,
    /// The pod is labelled a voting member, which puts it behind the client Service
    /// (learners refuse client requests, so they are kept out of it).
    pub voter: bool,
    /// Digest of the repository and pod policy the pod was built from (absent on pods
    /// made by older operators).
    pub pod_template: Option<String>,
    /// How many times the etcd container was restarted in place.
    pub restarts: u32,
    /// The TLS mode the pod was built with (pods made before TLS existed: `Off`).
    pub tls: TlsMode,
    /// How the etcd container last failed (exit code, reason, and the end of its log),
    /// once it has: it is restarted in place with its data, so this stays as the
    /// evidence of a crash loop.
    pub crash: Option<String>,
    /// The pod's current address is in its cluster's headless Service's EndpointSlices:
    /// the cluster DNS answers for the member's name. A member that joins resolves the
    /// others' names at once, and a name asked for before it is published is cached by the
    /// DNS as unknown for its negative TTL (5 to 30 s).
    pub published: bool,
    /// A joiner's pod made before its `member add` (a prepared joiner): the members it
    /// was built to join, by name (its `--initial-cluster` without itself). Its etcd is
    /// held back by an init container until etcd's member list holds its peer URL.
    /// `None` for every other pod.
    pub prepared_with: Option<Vec<String>>,
    /// The pod restarts its member alone with `--force-new-cluster` (a recovery from a
    /// survivor); such a pod is made again without the flag once the member runs alone.
    pub force_new_cluster: bool,
    /// The pod keeps the member's data on its PersistentVolumeClaim (not an emptyDir).
    pub on_claim: bool,
}

impl PodView {
    /// A Running, ready voting member's pod at `version` that has run, with no marks.
    pub fn running(name: &str, version: &str) -> Self {
        PodView {
            name: name.to_string(),
            phase: PodPhase::Running,
            ready: true,
            terminating: false,
            version: Some(version.to_string()),
            problem: None,
            started: true,
            upgrade_from: None,
            voter: true,
            pod_template: None,
            restarts: 0,
            crash: None,
            tls: TlsMode::Off,
            published: true,
            prepared_with: None,
            force_new_cluster: false,
            on_claim: false,
        }
    }

    /// A prepared joiner's pod whose etcd has never run: it holds no data, and no etcd
    /// answers in it (its etcd waits until its member is added). Never a member's running
    /// pod, never a voter, never ready.
    pub fn awaits_membership(&self) -> bool {
        self.prepared_with.is_some() && !self.started
    }

    /// A pod that runs, or may run, a member: not dead and not a prepared joiner still
    /// waiting for its member add.
    pub fn may_run_a_member(&self) -> bool {
        !self.is_dead() && !self.awaits_membership()
    }

    /// A pod whose etcd may answer: not exited and not a prepared joiner still waiting for
    /// its member add. A pod being deleted may: a stopped kubelet never ends its etcd.
    pub fn may_answer(&self) -> bool {
        !matches!(self.phase, PodPhase::Failed | PodPhase::Succeeded) && !self.awaits_membership()
    }

    /// Ready, with its current address published in the cluster's headless Service: a
    /// member that clients and peers can reach where its name points.
    pub fn ready_and_published(&self) -> bool {
        self.ready && self.published
    }

    /// A pod whose member will not serve again from it: failed, succeeded, or being
    /// deleted. Not evidence that the member's data is gone (`evidence::member_data`).
    pub fn is_dead(&self) -> bool {
        matches!(self.phase, PodPhase::Failed | PodPhase::Succeeded) || self.terminating
    }
}

/// Where a member's PersistentVolumeClaim stands (`spec.pod.persistentVolumeClaimSpec`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum ClaimPhase {
    /// Waiting for a volume.
    Pending,
    /// On its volume: the member's data is there.
    Bound,
    /// Its volume is gone: so is the member's data.
    Lost,
    /// Being deleted (by someone else: the operator deletes a claim only with its
    /// member): the data goes with it.
    Deleting,
}

impl ClaimPhase {
    /// Whether the claim may hold the member's data (its volume is neither lost nor
    /// being deleted).
    pub fn holds_data(self) -> bool {
        matches!(self, ClaimPhase::Pending | ClaimPhase::Bound)
    }
}

/// A member's PersistentVolumeClaim.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Claim {
    /// Where it stands.
    pub phase: ClaimPhase,
    /// The storage it requests, in bytes (`spec.resources.requests.storage`).
    pub requested_bytes: Option<u128>,
    /// The storage its volume has, in bytes (`status.capacity.storage`).
    pub capacity_bytes: Option<u128>,
}

impl Claim {
    /// A claim in `phase` with no sizes known.
    pub fn new(phase: ClaimPhase) -> Self {
        Claim {
            phase,
            requested_bytes: None,
            capacity_bytes: None,
        }
    }
}

/// The StorageClass of the members' claims, as far as growing them goes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ClaimClass {
    /// Its name (empty: the cluster's default class).
    pub name: String,
    /// `allowVolumeExpansion`.
    pub allows_expansion: bool,
}

/// One entry of etcd's member list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MemberView {
    /// etcd member ID.
    pub id: u64,
    /// Member name; empty while a member that was added has not started yet.
    pub name: String,
    /// Peer URLs registered with `member add`.
    pub peer_urls: Vec<String>,
    /// Client URLs; empty until the member starts.
    pub client_urls: Vec<String>,
    /// A non-voting learner.
    pub is_learner: bool,
}

impl MemberView {
    /// Whether the member has started and published its name.
    pub fn started(&self) -> bool {
        !self.name.is_empty()
    }

    /// The member's name, or for a member that has not started yet the name the operator
    /// gave it, read back from the first label of its peer URL's host.
    pub fn pod_name(&self) -> Option<String> {
        if self.started() {
            return Some(self.name.clone());
        }
        let url = self.peer_urls.first()?;
        let host = url.split("://").nth(1).unwrap_or(url);
        let name = host.split(['.', ':', '/']).next()?;
        (!name.is_empty()).then(|| name.to_string())
    }
}

/// What a member's own status endpoint answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MemberHealth {
    /// The member answered its status call.
    pub reachable: bool,
    /// Server version the member reports.
    pub version: Option<Version>,
    /// ID of the leader in the member's view.
    pub leader: Option<u64>,
    /// Errors the member itself reports (no leader, for one), or why it did not answer.
    /// Alarms are not errors: they are in `alarms`.
    pub errors: Vec<String>,
    /// The alarms the member reports: etcd's alarm list, the same on every member.
    pub alarms: Vec<Alarm>,
    /// The size of its backend database file, in bytes.
    pub db_size: Option<u64>,
    /// The part of it in use, in bytes (what is left once a defragmentation frees the
    /// rest); `None` from an etcd that does not report it.
    pub db_size_in_use: Option<u64>,
    /// The etcd cluster the answer came from (the response header's cluster ID).
    pub cluster_id: Option<u64>,
    /// The member's raft index: how far its log goes (the survivor with the highest one
    /// has every committed entry any survivor has).
    pub raft_index: Option<u64>,
    /// The revision of the member's key-value store.
    pub revision: Option<i64>,
}

impl MemberHealth {
    /// A healthy answer from a member at `version`.
    pub fn healthy(version: &str) -> Self {
        MemberHealth {
            reachable: true,
            version: version.parse().ok(),
            leader: None,
            errors: Vec::new(),
            alarms: Vec::new(),
            db_size: None,
            db_size_in_use: None,
            cluster_id: None,
            raft_index: None,
            revision: None,
        }
    }

    /// A member that did not answer.
    pub fn unreachable(why: &str) -> Self {
        MemberHealth {
            reachable: false,
            version: None,
            leader: None,
            errors: vec![why.to_string()],
            alarms: Vec::new(),
            db_size: None,
            db_size_in_use: None,
            cluster_id: None,
            raft_index: None,
            revision: None,
        }
    }

    /// Reachable and reporting no error. An alarm does not make a member unhealthy: it
    /// still counts toward quorum (see [`space`](super::space)).
    pub fn is_healthy(&self) -> bool {
        self.reachable && self.errors.is_empty()
    }
}

/// etcd's member list as seen this tick, or why it could not be read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum Membership {
    /// No member answered.
    Unreachable {
        /// The last error.
        error: String,
    },
    /// The member list.
    Listed {
        /// The etcd cluster that answered (the response header's cluster ID).
        cluster_id: u64,
        /// Every member, voting or learner, started or not.
        members: Vec<MemberView>,
    },
}

/// Everything the decision function knows about the world at one tick.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Observation {
    /// When the observation was taken (monotonic; used only for deadlines).
    #[serde(skip)]
    pub now: Instant,
    /// The cluster's pods.
    pub pods: Vec<PodView>,
    /// The headless and client Services both exist.
    pub services_present: bool,
    /// `minAvailable` of the cluster's PodDisruptionBudget, when it exists.
    pub disruption_budget: Option<u32>,
    /// The members' PersistentVolumeClaims, by member name (none with emptyDir members).
    pub claims: BTreeMap<String, Claim>,
    /// Their StorageClass, when there are claims and it could be read.
    pub claim_class: Option<ClaimClass>,
    /// What the object's status remembers (survives operator restarts).
    pub recorded: Recorded,
    /// An object this cluster needs belongs to someone else (see `KubeView`).
    pub name_conflict: Option<String>,
    /// Why `spec.restore` is not honoured, when it is not (see `KubeView`).
    pub restore_problem: Option<String>,
    /// Client URLs of the live member pods: where the tick's etcd calls go.
    pub endpoints: Vec<String>,
    /// etcd's member list.
    pub membership: Membership,
    /// Health of started members, by member ID.
    pub health: BTreeMap<u64, MemberHealth>,
    /// The cluster's certificates, when the spec asks for TLS.
    pub tls: TlsObservation,
    /// A joiner's pod may be made before its `member add` (the Kubernetes side knows the
    /// operator's own image, which the pod's gate runs). Without it a member is added
    /// first and its pod made after.
    pub prepares_joiners: bool,
    /// The newest verified backup of `spec.recovery.backup`, looked up only while the
    /// quorum is lost (`None`: not looked up, or no store is named), or why there is none.
    pub newest_backup: Option<Result<SnapshotSource, ApiError>>,
    /// The members' hashes at a common revision, when this tick compared them
    /// ([`check_due`](super::check_due)).
    pub hashes: Option<HashCheck>,
}

impl Observation {
    /// The pod named `name`, if any.
    pub fn pod(&self, name: &str) -> Option<&PodView> {
        self.pods.iter().find(|p| p.name == name)
    }
}
