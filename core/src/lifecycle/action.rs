//! The side effects a decision asks for; the Cluster actor performs them in order.

use serde::Serialize;

use super::{Alarm, CaRotationStep, RecoveryRecord, SnapshotSource, Version};

/// One step the Cluster actor must perform. A decision returns a short list of these;
/// the actor executes them in order and stops at the first failure.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "action", rename_all = "camelCase")]
pub enum Action {
    /// Make the operator-managed certificates that are missing, invalid or due for
    /// renewal (`spec.TLS.auto`), from the cluster's CA (idempotent).
    IssueCertificates,
    /// Move the CA rotation of an operator-managed cluster to its next step, recorded in
    /// the CA Secret: refused unless the Secret records `from` (so a step is never
    /// skipped, nor taken twice).
    AdvanceCaRotation {
        /// The step the CA Secret records now (`None`: no rotation).
        from: Option<CaRotationStep>,
        /// The step to record (`None`: the rotation is complete).
        to: Option<CaRotationStep>,
    },
    /// Create the headless and client Services if they are missing (idempotent).
    EnsureServices,
    /// Start a brand-new cluster: record a new seed name and `--initial-cluster-token` in
    /// the status (before anything runs), then create the seed pod with
    /// `--initial-cluster-state=new`.
    CreateSeed {
        /// etcd version of the seed.
        version: Version,
        /// The snapshot the seed's pod restores into its data directory before etcd
        /// starts; `None`: an empty cluster.
        restore: Option<SnapshotSource>,
    },
    /// Create the pod of the seed already recorded in the status, under its recorded name
    /// and token (its pod is missing: never created, or deleted because it never started
    /// or died before any member answered). Creating a pod that exists is a no-op.
    StartSeed {
        /// Recorded seed (and pod) name.
        name: String,
        /// Recorded `--initial-cluster-token`.
        token: String,
        /// etcd version of the seed.
        version: Version,
        /// The snapshot the seed's pod restores first, as for `CreateSeed`.
        restore: Option<SnapshotSource>,
    },
    /// Make the pod of the next member before its `member add`, under a new name: its etcd
    /// waits in an init container until etcd's member list holds its peer URL, then joins
    /// with `--initial-cluster` = `peers` plus itself. The pod is no member yet: it is
    /// published in the cluster DNS before any member asks for its name (a name asked for
    /// too early is cached as unknown for the DNS's negative TTL).
    PrepareJoiner {
        /// etcd version of the new member.
        version: Version,
        /// The members now, by name: the membership the joiner is built to join.
        peers: Vec<String>,
    },
    /// `member add` a new member (as a learner when `learner`): the prepared joiner
    /// `prepared`, whose pod exists and waits; or, when no joiner can be prepared (the
    /// operator's image is unknown), a new name, and then its pod with `--initial-cluster`
    /// built from the member list etcd returned.
    AddMember {
        /// Add as a non-voting learner (etcd 3.4+), to be promoted once caught up.
        learner: bool,
        /// etcd version of the new member.
        version: Version,
        /// The prepared joiner to add (its pod exists); `None`: add, then make the pod.
        prepared: Option<String>,
    },
    /// Start the pod of a member that was added but whose pod does not exist (the
    /// operator stopped between `member add` and pod creation).
    ResumeJoin {
        /// etcd member ID.
        id: u64,
        /// Member (and pod) name.
        name: String,
        /// etcd version of the member.
        version: Version,
    },
    /// Create the pod of a member whose pod is gone while its PersistentVolumeClaim keeps
    /// its data: the same name, on the same volume, joining with that data
    /// (`--initial-cluster-state=existing`). No membership change: etcd sees the same
    /// member come back.
    RestartMember {
        /// Member (and pod) name.
        name: String,
        /// etcd version to run.
        version: Version,
        /// Every member's name, for `--initial-cluster` (which etcd reads only when its
        /// data directory is empty).
        peers: Vec<String>,
        /// A voting member (its pod serves clients at once).
        voter: bool,
    },
    /// Ask for more storage on a member's PersistentVolumeClaim (its StorageClass allows
    /// expansion); the volume grows in place, the data stays.
    ExpandClaim {
        /// Member name (its claim is the member's).
        name: String,
        /// The storage to request, as the spec writes it.
        quantity: String,
    },
    /// `member promote` a learner.
    PromoteLearner {
        /// etcd member ID.
        id: u64,
        /// Member name.
        name: String,
    },
    /// `move-leader`: the leader hands leadership over to another voting member, before
    /// its own pod goes. The other members then never go without a leader: nothing waits
    /// for etcd's own hand-over on SIGTERM, and an election leaves every member without a
    /// leader (and unhealthy) for an election timeout or more.
    MoveLeader {
        /// The leader's name (only the leader may be asked).
        from: String,
        /// Member ID of the new leader.
        to: u64,
        /// Its name (for logs and events).
        name: String,
    },
    /// `alarm disarm` of one alarm (only NOSPACE, once its cause is gone; see
    /// [`space`](super::space)).
    DisarmAlarm {
        /// The alarm.
        alarm: Alarm,
    },
    /// `compact`: drop the history before `revision` (every key keeps its value at it;
    /// older versions and the watches that start before it are gone). See
    /// [`compaction`](super::compaction).
    Compact {
        /// The revision to compact to.
        revision: i64,
    },
    /// `defrag` of one member's backend: it serves nothing until it is done. See
    /// [`defragmentation`](super::defragmentation).
    Defragment {
        /// Member (and pod) name.
        name: String,
        /// etcd member ID.
        id: u64,
        /// Its backend's size before, in bytes.
        db_size: u64,
    },
    /// `member remove`.
    RemoveMember {
        /// etcd member ID.
        id: u64,
        /// Member name (for logs and events).
        name: String,
    },
    /// Delete a pod (always after its member has left etcd, or when it never had one),
    /// and its claim with it.
    DeletePod {
        /// Pod name.
        name: String,
    },
    /// Delete a member's pod so that it gets a new one from the current pod template: a
    /// member on a claim comes back on it (its claim is kept), a member on an emptyDir is
    /// replaced.
    RecreatePod {
        /// Pod name.
        name: String,
    },
    /// Change the etcd image of a member's pod in place; its data stays. The pod is marked
    /// with the version it ran (`from`) until the member is healthy on `to`.
    UpgradeMember {
        /// Member (and pod) name.
        name: String,
        /// Version it runs now.
        from: Version,
        /// Version to run.
        to: Version,
    },
    /// Put a member's pod back on an older version: after its upgrade failed, or because
    /// the spec went back while etcd still allows it.
    RollBackMember {
        /// Member (and pod) name.
        name: String,
        /// Version to run again.
        to: Version,
    },
    /// Label a voting member's pod so the client Service routes to it (a promoted learner,
    /// or a pod made by an older operator).
    LabelVoter {
        /// Pod name.
        name: String,
    },
    /// Keep voluntary disruptions (evictions, `kubectl drain`) from taking the cluster
    /// below quorum: its PodDisruptionBudget over the voting members' pods gets
    /// `minAvailable` = the quorum of the voting members.
    SetDisruptionBudget {
        /// The quorum of the voting members.
        min_available: u32,
    },
    /// Record a recovery from a loss of quorum in the status (`status.recovery`) and raise
    /// its Event, before anything is touched: refused when the status holds a recovery
    /// that has not finished. A restore from a backup gets its new seed's name and token
    /// here, as a bootstrap does.
    BeginRecovery {
        /// The recovery.
        record: RecoveryRecord,
    },
    /// Create the pod of a surviving member (on its own volume) that restarts it alone
    /// with `--force-new-cluster`: etcd drops every other member and keeps the data.
    ForceNewCluster {
        /// Member (and pod) name.
        name: String,
        /// etcd version it ran.
        version: Version,
    },
    /// Create the pod of the seed a recovery from a backup recorded: it restores the
    /// backup into its data directory, then starts a new one-member cluster
    /// (`--initial-cluster-state=new` under the recorded token).
    StartRecoverySeed {
        /// Recorded seed (and pod) name.
        name: String,
        /// Recorded `--initial-cluster-token`.
        token: String,
        /// etcd version to run.
        version: Version,
        /// The backup restored (`None`: an empty seed, a `Reseed`).
        restore: Option<SnapshotSource>,
    },
    /// Record in the status that a recovery finished (with the revision the cluster came
    /// back at), and raise its Event.
    FinishRecovery {
        /// The finished record.
        record: RecoveryRecord,
    },
    /// The member is healthy on its new version: drop its pod's upgrade mark.
    ConfirmUpgrade {
        /// Member (and pod) name.
        name: String,
        /// The version it runs.
        version: Version,
    },
}

impl Action {
    /// Whether the action starts together with the others of its tick instead of in its
    /// turn: it touches no member and no data, and only a member's pod waits for it. The
    /// Services are such: a seed is recorded while they are made, its pod waits for the
    /// headless Service its name lives under (a failure there keeps every pod of the tick
    /// from being made), and not for the client Service.
    pub fn runs_alongside(&self) -> bool {
        matches!(self, Action::EnsureServices)
    }

    /// A short, bounded label for metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            Action::IssueCertificates => "issue_certificates",
            Action::AdvanceCaRotation { .. } => "advance_ca_rotation",
            Action::EnsureServices => "ensure_services",
            Action::CreateSeed { .. } => "create_seed",
            Action::StartSeed { .. } => "start_seed",
            Action::PrepareJoiner { .. } => "prepare_joiner",
            Action::AddMember { .. } => "add_member",
            Action::ResumeJoin { .. } => "resume_join",
            Action::RestartMember { .. } => "restart_member",
            Action::ExpandClaim { .. } => "expand_claim",
            Action::PromoteLearner { .. } => "promote_learner",
            Action::MoveLeader { .. } => "move_leader",
            Action::DisarmAlarm { .. } => "disarm_alarm",
            Action::Compact { .. } => "compact",
            Action::Defragment { .. } => "defragment",
            Action::RemoveMember { .. } => "remove_member",
            Action::DeletePod { .. } => "delete_pod",
            Action::RecreatePod { .. } => "recreate_pod",
            Action::UpgradeMember { .. } => "upgrade_member",
            Action::RollBackMember { .. } => "roll_back_member",
            Action::ConfirmUpgrade { .. } => "confirm_upgrade",
            Action::LabelVoter { .. } => "label_voter",
            Action::SetDisruptionBudget { .. } => "set_disruption_budget",
            Action::BeginRecovery { .. } => "begin_recovery",
            Action::ForceNewCluster { .. } => "force_new_cluster",
            Action::StartRecoverySeed { .. } => "start_recovery_seed",
            Action::FinishRecovery { .. } => "finish_recovery",
        }
    }
}
