//! Named reasons for decisions: used in conditions, Events, logs and the debug stream.

use serde::Serialize;

/// Declares [`Reason`] and its wire names in one place, so the two cannot drift apart.
macro_rules! reasons {
    ($( $(#[$doc:meta])* $variant:ident $(= $wire:literal)? ),* $(,)?) => {
        /// Why the lifecycle did (or refused to do) what it did on a tick.
        ///
        /// The variant name is the machine-readable reason (CamelCase, as Kubernetes
        /// condition reasons are); [`Why::message`] carries the human-readable detail.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Reason {
            $( $(#[$doc])* $variant, )*
        }

        impl Reason {
            /// Every reason, in declaration order (the runbook has an entry for each).
            pub const ALL: &'static [Reason] = &[ $( Reason::$variant, )* ];

            /// The reason as it appears in conditions and Events.
            pub fn as_str(self) -> &'static str {
                match self {
                    $( Reason::$variant => reasons!(@wire $variant $($wire)?), )*
                }
            }
        }
    };
    (@wire $variant:ident $wire:literal) => { $wire };
    (@wire $variant:ident) => { stringify!($variant) };
}

reasons! {
    // Progress.
    /// The seed pod is being created.
    CreatingSeed,
    /// The seed pod exists and its member has not answered yet.
    WaitingForSeed,
    /// The seed died before the cluster formed (it holds no data); it is started anew.
    RestartingFailedSeed,
    /// The seed never started and the spec changed; it is recreated from the current spec.
    RecreatingSeed,
    /// Operator-managed certificates are being made or renewed.
    IssuingCertificates,
    /// The next member's pod is being made before its `member add` (a prepared joiner).
    PreparingJoiner,
    /// A prepared joiner's pod is deleted: it was built for another membership, version
    /// or pod template, or no member is wanted any more (it holds no data).
    DeletingPreparedJoiner,
    /// A member is being added.
    AddingMember,
    /// A member was added to etcd but has no pod; its pod is being created.
    ResumingJoin,
    /// A new member's pod is starting.
    WaitingForJoin,
    /// A learner is being promoted.
    PromotingLearner,
    /// A member is being removed to scale down.
    RemovingMember,
    /// A member whose pod is gone or dead is being removed.
    ReplacingDeadMember,
    /// Members whose pods are gone get new pods on their volumes, which hold their data.
    RestartingMembers,
    /// A member that never started is being removed.
    RemovingUnstartedMember,
    /// A member unhealthy past its deadline is being removed.
    ReplacingUnhealthyMember,
    /// A member whose etcd keeps failing on its own data is being removed.
    ReplacingBrokenMember,
    /// A member gets a pod built from a changed pod template (a rolling restart).
    RestartingMember,
    /// The leader hands leadership over to another member before its own restart.
    MovingLeader,
    /// A CA rotation moves to its next step, or waits for the members to reach the
    /// current one.
    RotatingCa = "RotatingCA",
    /// A crash-looping member built from an older pod template gets a pod from the
    /// current one.
    RecreatingCrashLoopingMember,
    /// A pod without an etcd member is being deleted.
    DeletingOrphanPod,
    /// The cluster's Services are being created.
    CreatingServices,
    /// A member's image is being changed.
    UpgradingMember,
    /// An upgraded member is coming back.
    WaitingForUpgradedMember,
    /// A member whose upgrade failed is being put back on its previous version.
    RollingBackMember,
    /// Waiting for every member to be healthy before the next step.
    WaitingForHealthyMembers,
    /// Waiting until the cluster DNS publishes every member's address before a member
    /// joins (it resolves the others' names at once).
    WaitingForMemberAddresses,
    /// The cluster matches its spec.
    Converged,
    /// The cluster matches its spec, and etcd raised NOSPACE: writes that add data are
    /// refused until the alarm is disarmed, once every member is below its quota's
    /// near-full mark.
    NoSpace,
    /// Every member is back below its quota's near-full mark: NOSPACE is being disarmed.
    DisarmingNoSpace,
    /// A member's backend is being defragmented (`spec.defragmentation`), or the leader
    /// hands leadership over before its own.
    Defragmenting,
    /// etcd raised CORRUPT: a member's data differs; the operator changes nothing.
    Corrupt,
    /// A recorded recovery restarts the surviving member with the highest raft index
    /// alone (`--force-new-cluster`).
    RecoveringFromSurvivor,
    /// A recorded recovery restores the newest verified backup into a new seed.
    RecoveringFromBackup,
    /// A recorded `Reseed` starts a new, empty seed: the user accepted that the data is
    /// gone.
    Reseeding,
    /// A recovery finished: the cluster runs again (and grows back with learners).
    Recovered,
    /// A pod started with `--force-new-cluster` outside an unfinished recovery is made
    /// again without the flag.
    StaleForceNewCluster,
    /// The user gave an unfinished recovery up (`abandon-recovery` annotation).
    RecoveryAbandoned,
    // Refusals and blocks.
    /// `spec.paused`.
    Paused,
    /// The object is being deleted: no pod, claim or recovery is made for it.
    Deleting,
    /// A TLS Secret is missing, lacks a key, or holds a certificate that cannot serve
    /// (names not covered, expired, key not matching, not signed by its CA).
    TlsSecretInvalid = "TLSSecretInvalid",
    /// `spec.TLS` asks for another mode than the member pods run (TLS turned on or off,
    /// or static and auto swapped): that needs a migration the operator does not do.
    TlsChangeRefused = "TLSChangeRefused",
    /// The spec cannot be acted on.
    InvalidSpec,
    /// The cluster's name cannot make valid object names.
    InvalidName,
    /// The cluster's image repository is not one the operator is allowed to run.
    ImageNotAllowed,
    /// `spec.restore` was not written by an EtcdRestore of the cluster's namespace.
    RestoreNotAllowed,
    /// An object the cluster needs belongs to someone else.
    NameConflict,
    /// Too few healthy voting members.
    QuorumLost,
    /// A member's etcd keeps exiting; it is restarted in place with its data.
    CrashLooping,
    /// A changed pod template cannot reach a member without losing quorum.
    RestartRefused,
    /// No member answers.
    EtcdUnreachable,
    /// Every member pod is gone.
    AllMembersLost,
    /// A member answered for another etcd cluster than the one recorded.
    ClusterIdMismatch = "ClusterIDMismatch",
    /// A joining member cannot start and etcd (before 3.4) has no learners to fall back on.
    JoinStuck,
    /// A downgrade was asked for.
    DowngradeRefused,
    /// An upgrade of more than one minor version was asked for.
    VersionSkipRefused,
    /// An upgrade to the next minor from a patch release that cannot make that step
    /// safely (3.5 below 3.5.26 to 3.6); the message names the patch to go through first.
    UpgradePathRefused,
    /// An upgraded member did not become healthy by its deadline.
    UpgradeFailed,
    /// `spec.restore` names a snapshot the cluster's etcd version cannot read.
    RestoreRefused,
    /// A recovery from a loss of quorum cannot proceed (no survivor, no backup, data on
    /// emptyDir, already done for this incident); the message says why.
    RecoveryRefused,
    /// A recorded recovery did not complete by `spec.recovery.deadlineSeconds`; the
    /// message says what it waits for and how to give it up.
    RecoveryFailed,
    /// The decision broke the state machine's rules (a bug); nothing was done.
    IllegalTransition,
}

impl Serialize for Reason {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl Reason {
    /// Whether this reason means the operator refuses or cannot proceed (a warning).
    pub fn is_refusal(self) -> bool {
        matches!(
            self,
            Reason::TlsSecretInvalid
                | Reason::TlsChangeRefused
                | Reason::InvalidSpec
                | Reason::InvalidName
                | Reason::ImageNotAllowed
                | Reason::RestoreNotAllowed
                | Reason::NameConflict
                | Reason::QuorumLost
                | Reason::CrashLooping
                | Reason::RestartRefused
                | Reason::EtcdUnreachable
                | Reason::AllMembersLost
                | Reason::ClusterIdMismatch
                | Reason::JoinStuck
                | Reason::DowngradeRefused
                | Reason::VersionSkipRefused
                | Reason::UpgradePathRefused
                | Reason::UpgradeFailed
                | Reason::RestoreRefused
                | Reason::RecoveryRefused
                | Reason::RecoveryFailed
                | Reason::IllegalTransition
        )
    }
}

/// A reason with its human-readable message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Why {
    /// Machine-readable reason.
    pub reason: Reason,
    /// What happened, for people.
    pub message: String,
}

impl Why {
    /// Builds a reason with a message.
    pub fn new(reason: Reason, message: impl Into<String>) -> Self {
        Why {
            reason,
            message: message.into(),
        }
    }
}
