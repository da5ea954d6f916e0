//! Named reasons for decisions: used in conditions, Events, logs and the debug stream.

use serde::Serialize;

/// Why the lifecycle did (or refused to do) what it did on a tick.
///
/// The variant name is the machine-readable reason (CamelCase, as Kubernetes condition
/// reasons are); [`Why::message`] carries the human-readable detail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[allow(missing_docs)] // the variant names are the documentation
pub enum Reason {
    // Progress.
    CreatingSeed,
    WaitingForSeed,
    RestartingFailedSeed,
    AddingMember,
    ResumingJoin,
    WaitingForJoin,
    PromotingLearner,
    RemovingMember,
    ReplacingDeadMember,
    RemovingUnstartedMember,
    ReplacingUnhealthyMember,
    DeletingOrphanPod,
    CreatingServices,
    UpgradingMember,
    WaitingForUpgradedMember,
    WaitingForHealthyMembers,
    Converged,
    // Refusals and blocks.
    Paused,
    TlsNotSupported,
    InvalidSpec,
    QuorumLost,
    EtcdUnreachable,
    AllMembersLost,
    ScaleDownFromTwoRefused,
    DowngradeRefused,
    VersionSkipRefused,
}

impl Reason {
    /// The reason as it appears in conditions and Events.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::CreatingSeed => "CreatingSeed",
            Reason::WaitingForSeed => "WaitingForSeed",
            Reason::RestartingFailedSeed => "RestartingFailedSeed",
            Reason::AddingMember => "AddingMember",
            Reason::ResumingJoin => "ResumingJoin",
            Reason::WaitingForJoin => "WaitingForJoin",
            Reason::PromotingLearner => "PromotingLearner",
            Reason::RemovingMember => "RemovingMember",
            Reason::ReplacingDeadMember => "ReplacingDeadMember",
            Reason::RemovingUnstartedMember => "RemovingUnstartedMember",
            Reason::ReplacingUnhealthyMember => "ReplacingUnhealthyMember",
            Reason::DeletingOrphanPod => "DeletingOrphanPod",
            Reason::CreatingServices => "CreatingServices",
            Reason::UpgradingMember => "UpgradingMember",
            Reason::WaitingForUpgradedMember => "WaitingForUpgradedMember",
            Reason::WaitingForHealthyMembers => "WaitingForHealthyMembers",
            Reason::Converged => "Converged",
            Reason::Paused => "Paused",
            Reason::TlsNotSupported => "TLSNotSupported",
            Reason::InvalidSpec => "InvalidSpec",
            Reason::QuorumLost => "QuorumLost",
            Reason::EtcdUnreachable => "EtcdUnreachable",
            Reason::AllMembersLost => "AllMembersLost",
            Reason::ScaleDownFromTwoRefused => "ScaleDownFromTwoRefused",
            Reason::DowngradeRefused => "DowngradeRefused",
            Reason::VersionSkipRefused => "VersionSkipRefused",
        }
    }

    /// Whether this reason means the operator refuses or cannot proceed (a warning).
    pub fn is_refusal(self) -> bool {
        matches!(
            self,
            Reason::TlsNotSupported
                | Reason::InvalidSpec
                | Reason::QuorumLost
                | Reason::EtcdUnreachable
                | Reason::AllMembersLost
                | Reason::ScaleDownFromTwoRefused
                | Reason::DowngradeRefused
                | Reason::VersionSkipRefused
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
