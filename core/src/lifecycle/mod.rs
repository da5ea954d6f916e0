//! The cluster lifecycle as data: states, observations, actions, and the pure decision
//! function that moves one to the next. No I/O happens here.

mod action;
mod alarm;
mod bootstrap;
mod bootstrap_record;
mod certificates;
mod compaction;
mod consistency;
mod crash;
mod decide;
mod decision;
mod defrag_rule;
mod defragmentation;
mod evidence;
mod hashes;
mod leadership;
mod observation;
mod orphans;
mod pace;
mod preconditions;
mod reason;
mod recorded_recovery;
mod recovery;
mod recovery_record;
mod recovery_refusal;
mod replacement;
mod restore;
mod rollout;
mod scaling;
mod seeding;
mod space;
mod spec;
mod state;
mod tls;
mod transition;
mod unstarted;
mod upgrade;
mod upkeep;
mod version;
mod view;
mod volumes;

#[cfg(test)]
mod claim_tests;
#[cfg(test)]
mod compaction_tests;
#[cfg(test)]
mod decide_tests;
#[cfg(test)]
mod defragmentation_tests;
#[cfg(test)]
mod deletion_tests;
#[cfg(any(test, feature = "fixtures"))]
pub mod fixtures;
#[cfg(test)]
mod joiner_tests;
#[cfg(test)]
mod recovery_tests;
#[cfg(test)]
mod rollout_tests;
#[cfg(test)]
mod rotation_tests;
#[cfg(test)]
mod space_tests;

pub use action::Action;
pub use alarm::{Alarm, AlarmKind, DEFAULT_QUOTA_BACKEND_BYTES, NEAR_QUOTA_PERCENT};
pub(crate) use bootstrap::BootstrapStage;
pub use bootstrap_record::{BootstrapRecord, Recorded};
pub use certificates::{CaRotationStep, CaRotationView, CertificateInfo, TlsMode, TlsObservation};
pub use compaction::{
    Compaction, CompactionProgress, DEFAULT_COMPACTION_RETENTION, REVISION_COMPACTION_INTERVAL,
    RevisionSample, newest_revision,
};
pub use consistency::{RECHECK_INTERVAL, check_due};
pub use decide::decide;
pub use decision::Decision;
pub use defrag_rule::{
    DEFAULT_DEFRAG_QUOTA_PERCENT, DEFAULT_FREEABLE_BYTES, DEFRAG_MIN_INTERVAL, DefragRule,
    Defragmentation, MIN_FREEABLE_PERCENT, is_due,
};
pub use hashes::{Consistency, Divergence, HASH_CHECK_INTERVAL, HashCheck, KvHash, compare};
pub use observation::{
    Claim, ClaimClass, ClaimPhase, MemberHealth, MemberView, Membership, Observation, PodPhase,
    PodView,
};
pub use pace::{Pace, next_deadline, pace};
pub use reason::{Reason, Why};
pub use recovery_record::{
    ABANDON_RECOVERY_ANNOTATION, DEFAULT_QUORUM_LOSS, DEFAULT_RECOVERY_DEADLINE,
    FORCE_NEW_CLUSTER_VERIFIED, FenceRefusal, RECOVER_ANNOTATION, RecoveryPolicy, RecoveryRecord,
    RecoverySpec, check_fence, force_new_cluster_is_safe,
};
pub use restore::{SnapshotSource, Unreadable, check_readable, restores_with_etcdutl};
pub use space::{Fullest, StorageState, alarms, fullest, is_near_quota, percent_of, storage};
pub use spec::{DesiredCluster, Requests, Storage};
pub use state::{Deadlines, Phase, State};
pub use tls::{is_stale, template_with_trust};
pub(crate) use version::UpgradePath;
pub use version::{Version, VersionError};
