//! Why a recovery that `spec.recovery.policy` (or the recovery annotation) asks for cannot
//! start, as data: each refusal is one variant, and its wording (what is wrong and what
//! to do instead) is the variant's `Display`, written once here.

use super::{FORCE_NEW_CLUSTER_VERIFIED, RECOVER_ANNOTATION, RecoveryPolicy};
use crate::api_error::ApiError;
use crate::lifecycle::restore::Unreadable;

/// Why the recovery asked for cannot start. The decision reports it as
/// `RecoveryRefused`; the operator changes nothing while it holds.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(super) enum RecoveryRefusal {
    /// A `Reseed` or `FromBackup` would throw away the data that `survivors` keep.
    #[error(
        "{policy} cannot proceed: member(s) {} keep their data, which {} would throw away \
         (set {RECOVER_ANNOTATION}=FromSurvivor to recover from them)",
        survivors.join(", "),
        what_replaces_the_data(*policy)
    )]
    SurvivorsKeepData {
        /// The policy refused.
        policy: RecoveryPolicy,
        /// The members that keep data.
        survivors: Vec<String>,
    },
    /// `FromSurvivor` with no member left that keeps data.
    #[error(
        "FromSurvivor cannot proceed: no member survives with data (set \
         {RECOVER_ANNOTATION}=FromBackup to restore the newest backup)"
    )]
    NoSurvivor,
    /// Survivors that do not (yet) report their raft index, so the most advanced one
    /// cannot be chosen.
    #[error(
        "FromSurvivor cannot proceed: survivor(s) {} do not report their raft index, so \
         the most up-to-date one cannot be chosen; waiting for them to answer",
        .0.join(", ")
    )]
    SilentSurvivors(Vec<String>),
    /// The most advanced survivor keeps its data on an emptyDir: a new pod loses it.
    #[error(
        "FromSurvivor cannot proceed: survivor {0} (the most advanced) keeps its data on \
         an emptyDir volume, and restarting it in a new pod would lose it (members need \
         spec.pod.persistentVolumeClaimSpec for this recovery)"
    )]
    SurvivorOnEmptyDir(String),
    /// The most advanced survivor runs an etcd whose `--force-new-cluster` is not known to
    /// keep every committed key.
    #[error(
        "FromSurvivor cannot proceed: survivor {survivor} runs etcd {}, whose \
         --force-new-cluster is not known to keep every committed key for the members that \
         join after it (etcd-io/etcd#14009, #20009); it is used from etcd {} on. Restore \
         from a backup ({RECOVER_ANNOTATION}=FromBackup) or recover by hand",
        version.as_deref().unwrap_or("(unknown)"),
        verified_force_new_cluster()
    )]
    UnsafeForceNewCluster {
        /// The survivor chosen.
        survivor: String,
        /// The etcd version it reports, if any.
        version: Option<String>,
    },
    /// The backup store named could not give a verified backup.
    #[error("FromBackup cannot proceed: no verified backup: {0}")]
    NoVerifiedBackup(ApiError),
    /// `FromBackup` with no store named in `spec.recovery.backup`.
    #[error("FromBackup cannot proceed: spec.recovery.backup names no store to restore from")]
    NoStoreNamed,
    /// The newest backup cannot be read by the etcd version the cluster runs.
    #[error("FromBackup cannot proceed: backup {path}: {problem}")]
    UnreadableBackup {
        /// Where the backup is.
        path: String,
        /// Why the target version cannot read it (boxed: it holds two versions).
        problem: Box<Unreadable>,
    },
    /// The newest backup was taken from another etcd cluster than the one recorded.
    #[error(
        "FromBackup cannot proceed: backup {path} was taken from etcd cluster {taken:x}, not \
         from this cluster's {recorded:x} (status records it): restoring it would replace \
         this cluster's data with another cluster's; restore it explicitly with an \
         EtcdRestore if that is meant"
    )]
    OtherCluster {
        /// Where the backup is.
        path: String,
        /// The cluster ID the backup was taken from.
        taken: u64,
        /// The cluster ID the status records.
        recorded: u64,
    },
}

/// What a recovery by `policy` puts in the place of the survivors' data, for people.
fn what_replaces_the_data(policy: RecoveryPolicy) -> &'static str {
    match policy {
        RecoveryPolicy::Reseed => "a new seed",
        _ => "a restore",
    }
}

/// The etcd versions from which `--force-new-cluster` is used, for people.
fn verified_force_new_cluster() -> String {
    FORCE_NEW_CLUSTER_VERIFIED
        .iter()
        .map(|(a, b, c)| format!("{a}.{b}.{c}"))
        .collect::<Vec<_>>()
        .join(" and ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_reseed_and_a_refused_restore_name_what_would_replace_the_survivors_data() {
        let refusal = |policy| RecoveryRefusal::SurvivorsKeepData {
            policy,
            survivors: vec!["m1".into(), "m2".into()],
        };
        let reseed = refusal(RecoveryPolicy::Reseed).to_string();
        assert!(
            reseed.starts_with("Reseed cannot proceed: member(s) m1, m2 keep their data")
                && reseed.contains("which a new seed would throw away"),
            "{reseed}"
        );
        let restore = refusal(RecoveryPolicy::FromBackup).to_string();
        assert!(
            restore.starts_with("FromBackup cannot proceed")
                && restore.contains("which a restore would throw away"),
            "{restore}"
        );
    }

    #[test]
    fn an_unsafe_force_new_cluster_names_the_version_and_the_versions_it_is_used_from() {
        let said = RecoveryRefusal::UnsafeForceNewCluster {
            survivor: "m2".into(),
            version: None,
        }
        .to_string();
        assert!(said.contains("survivor m2 runs etcd (unknown)"), "{said}");
        for (a, b, c) in FORCE_NEW_CLUSTER_VERIFIED {
            assert!(said.contains(&format!("{a}.{b}.{c}")), "{said}");
        }
    }
}
