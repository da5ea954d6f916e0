//! etcd's own corruption checks, switched on in every member pod: the initial check (a
//! member compares its data with its peers' before it serves anything, and does not start
//! when they differ; etcd 3.3 and later) and the compaction hash check (after each
//! compaction the leader compares the followers' hashes of the compacted history and
//! raises CORRUPT on a mismatch; 3.5.5 and later). Both are cheap: the first runs once
//! per start, the second reuses the hash each compaction computes.
//!
//! They are set as variables, not flags: a pod's command cannot change when its image is
//! upgraded or rolled back in place, and etcd stops on a flag it does not know but only
//! warns of a variable it does not know (3.4 of the hash check's; a release that drops
//! the experimental names). A user's `etcdEnv` that sets either (or 3.6's feature gates)
//! decides alone.

use k8s_openapi::api::core::v1::EnvVar;

/// The checks, as etcd's variables.
const CHECKS: &[&str] = &[
    "ETCD_EXPERIMENTAL_INITIAL_CORRUPT_CHECK",
    "ETCD_EXPERIMENTAL_COMPACT_HASH_CHECK_ENABLED",
];

/// etcd 3.6's feature gates, which can set the same checks.
const FEATURE_GATES: &str = "ETCD_FEATURE_GATES";

/// The variables that switch the checks on, unless `env` (the user's) sets them.
pub(crate) fn corruption_check_env(env: &[EnvVar]) -> Vec<EnvVar> {
    let set = |name: &str| env.iter().any(|e| e.name == name);
    if set(FEATURE_GATES) || CHECKS.iter().any(|c| set(c)) {
        return Vec::new();
    }
    CHECKS
        .iter()
        .map(|name| EnvVar {
            name: (*name).into(),
            value: Some("true".into()),
            value_from: None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn var(name: &str, value: &str) -> EnvVar {
        EnvVar {
            name: name.into(),
            value: Some(value.into()),
            value_from: None,
        }
    }

    #[test]
    fn every_member_runs_both_checks() {
        let names: Vec<String> = corruption_check_env(&[])
            .into_iter()
            .map(|e| e.name)
            .collect();
        assert_eq!(names, CHECKS);
    }

    #[test]
    fn a_user_who_sets_a_check_or_the_feature_gates_decides_alone() {
        let gates = [var(FEATURE_GATES, "StopGRPCServiceOnDefrag=true")];
        assert!(corruption_check_env(&gates).is_empty());
        let off = [var("ETCD_EXPERIMENTAL_INITIAL_CORRUPT_CHECK", "false")];
        assert!(corruption_check_env(&off).is_empty());
    }
}
