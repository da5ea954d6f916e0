//! `spec.compaction` and `spec.quotaBackendBytes`: how much history the members keep and
//! how large their backends may grow, as first-class fields. Each has an `etcdEnv`
//! variable that sets the same thing (`ETCD_AUTO_COMPACTION_*`, `ETCD_QUOTA_BACKEND_BYTES`);
//! a spec may use one or the other, never both (the CRD refuses both; an object stored
//! before it did is blocked as `InvalidSpec`).

use std::time::Duration;

use etcd_operator_core::lifecycle::{
    Compaction, DEFAULT_COMPACTION_RETENTION, DEFAULT_QUOTA_BACKEND_BYTES, DefragRule,
    Defragmentation,
};
use k8s_openapi::api::core::v1::EnvVar;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Revisions a `Revision` compaction keeps when the spec gives no retention.
pub(crate) const DEFAULT_REVISION_RETENTION: u64 = 10_000;

/// The prefix of etcd's own auto-compaction variables.
const AUTO_COMPACTION_ENV_PREFIX: &str = "ETCD_AUTO_COMPACTION_";
/// etcd's backend quota variable.
const QUOTA_ENV: &str = "ETCD_QUOTA_BACKEND_BYTES";

/// How the operator compacts the cluster's history (`spec.compaction`).
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "!has(self.retention) || (has(self.mode) && self.mode == 'Revision' \
             ? self.retention.matches('^[1-9][0-9]{0,17}$') \
             : (self.retention.matches('^([0-9]+h)?([0-9]+m)?([0-9]+s)?$') \
                && duration(self.retention) >= duration('1m')))",
    "message": "spec.compaction.retention is a duration of at least 1m such as 1h or \
                30m for mode Periodic, a positive number of revisions for mode Revision",
    "fieldPath": ".retention",
    "reason": "FieldValueInvalid",
}]))]
pub struct CompactionPolicy {
    /// `Periodic` (default): keep `retention` of history (at most twice that before the
    /// next compaction). `Revision`: keep the newest `retention` revisions, checked every
    /// five minutes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<CompactionMode>,
    /// `Periodic`: hours, minutes and seconds (`1h`, `30m`, `1h30m`), at least 1m;
    /// default 1h. `Revision`: a number of revisions; default 10000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 24))]
    pub retention: Option<String>,
}

/// How `spec.compaction.retention` is read.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum CompactionMode {
    /// A span of time.
    #[default]
    Periodic,
    /// A number of revisions.
    Revision,
}

/// When the operator defragments members (`spec.defragmentation`): one at a time,
/// followers first, the leader after handing leadership over, only while every member is
/// healthy and nothing else changes.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DefragmentationPolicy {
    /// `Auto` (default): defragment a member when its sizes say so; `Off`: never.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<DefragmentationMode>,
    /// Defragment a member when that would free at least this many bytes (its backend's
    /// size minus its size in use). Default 209715200 (200 MiB).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub freeable_bytes: Option<i64>,
    /// Defragment a member, too, when its backend takes at least this percent of its
    /// quota and a defragmentation would free at least a tenth of it. Default 80.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub quota_used_percent: Option<i32>,
}

/// Whether the operator defragments members.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum DefragmentationMode {
    /// By the rule of `freeableBytes` and `quotaUsedPercent`.
    #[default]
    Auto,
    /// Never.
    Off,
}

/// The lifecycle's defragmentation rule for `spec.defragmentation` (`policy`).
pub(crate) fn defragmentation(policy: Option<&DefragmentationPolicy>) -> Defragmentation {
    let policy = policy.cloned().unwrap_or_default();
    if policy.mode == Some(DefragmentationMode::Off) {
        return Defragmentation::Off;
    }
    let positive = |n: Option<i64>| n.and_then(|n| u64::try_from(n).ok()).filter(|n| *n > 0);
    let defaults = DefragRule::default();
    Defragmentation::Auto(DefragRule {
        freeable_bytes: positive(policy.freeable_bytes).unwrap_or(defaults.freeable_bytes),
        quota_used_percent: positive(policy.quota_used_percent.map(i64::from))
            .filter(|p| *p <= 100)
            .unwrap_or(defaults.quota_used_percent),
    })
}

/// The CEL rules of `spec` that keep each first-class field apart from its `etcdEnv`
/// variable, with their messages.
pub(crate) fn exclusive_rules() -> [(String, String); 2] {
    let env_has = |cel: &str| {
        format!("has(self.pod) && has(self.pod.etcdEnv) && self.pod.etcdEnv.exists(e, {cel})")
    };
    [
        (
            format!(
                "!has(self.compaction) || !({})",
                env_has(&format!(
                    "e.name.startsWith('{AUTO_COMPACTION_ENV_PREFIX}')"
                ))
            ),
            compaction_conflict(),
        ),
        (
            format!(
                "!has(self.quotaBackendBytes) || !({})",
                env_has(&format!("e.name == '{QUOTA_ENV}'"))
            ),
            quota_conflict(),
        ),
    ]
}

fn compaction_conflict() -> String {
    format!(
        "spec.compaction and spec.pod.etcdEnv {AUTO_COMPACTION_ENV_PREFIX}* set the same \
         thing: keep one"
    )
}

fn quota_conflict() -> String {
    format!("spec.quotaBackendBytes and spec.pod.etcdEnv {QUOTA_ENV} set the same thing: keep one")
}

/// Why the spec cannot be used, when a first-class field and its `etcdEnv` variable are
/// both set (the CRD refuses this; it catches objects stored before it did).
pub(crate) fn conflict(
    compaction: Option<&CompactionPolicy>,
    quota: Option<i64>,
    env: &[EnvVar],
) -> Option<String> {
    let env_has = |f: &dyn Fn(&str) -> bool| env.iter().any(|e| f(&e.name));
    if compaction.is_some() && env_has(&|n| n.starts_with(AUTO_COMPACTION_ENV_PREFIX)) {
        return Some(compaction_conflict());
    }
    if quota.is_some() && env_has(&|n| n == QUOTA_ENV) {
        return Some(quota_conflict());
    }
    None
}

/// Each member's backend quota: `spec.quotaBackendBytes` (`quota`), else
/// `ETCD_QUOTA_BACKEND_BYTES` in `etcdEnv` when it is a positive number of bytes, else
/// etcd's default (etcd reads 0 as its default too).
pub(crate) fn quota_backend_bytes(quota: Option<i64>, env: &[EnvVar]) -> u64 {
    let from_env = || {
        env.iter()
            .find(|e| e.name == QUOTA_ENV)
            .and_then(|e| e.value.as_deref()?.trim().parse::<u64>().ok())
    };
    quota
        .and_then(|b| u64::try_from(b).ok())
        .or_else(from_env)
        .filter(|bytes| *bytes > 0)
        .unwrap_or(DEFAULT_QUOTA_BACKEND_BYTES)
}

/// The `etcdEnv` entry a member pod gets for `spec.quotaBackendBytes`, when it is set.
pub(crate) fn quota_env(quota: Option<i64>) -> Option<EnvVar> {
    quota.map(|bytes| EnvVar {
        name: QUOTA_ENV.into(),
        value: Some(bytes.to_string()),
        value_from: None,
    })
}

/// How the cluster's history is compacted: by etcd when `etcdEnv` sets its
/// auto-compaction, else by the operator as `spec.compaction` (`policy`) says (default
/// periodic, one hour). A retention the CRD would refuse falls back to the mode's default.
pub(crate) fn compaction(policy: Option<&CompactionPolicy>, env: &[EnvVar]) -> Compaction {
    if env
        .iter()
        .any(|e| e.name.starts_with(AUTO_COMPACTION_ENV_PREFIX))
    {
        return Compaction::ByEtcd;
    }
    let policy = policy.cloned().unwrap_or_default();
    let retention = policy.retention.as_deref();
    match policy.mode.unwrap_or_default() {
        CompactionMode::Periodic => Compaction::Periodic {
            retention: retention
                .and_then(parse_duration)
                .filter(|d| *d >= Duration::from_secs(60))
                .unwrap_or(DEFAULT_COMPACTION_RETENTION),
        },
        CompactionMode::Revision => Compaction::Revision {
            retention: retention
                .and_then(|r| r.parse().ok())
                .filter(|r| *r > 0)
                .unwrap_or(DEFAULT_REVISION_RETENTION),
        },
    }
}

/// `1h30m`, `45m`, `90s` (each unit at most once, in that order) as a duration.
pub(crate) fn parse_duration(text: &str) -> Option<Duration> {
    let mut rest = text;
    let mut total = 0u64;
    let mut seen = false;
    for (unit, seconds) in [('h', 3600), ('m', 60), ('s', 1)] {
        if let Some((number, after)) = rest.split_once(unit)
            && !number.is_empty()
            && number.bytes().all(|b| b.is_ascii_digit())
        {
            total = total.checked_add(number.parse::<u64>().ok()?.checked_mul(seconds)?)?;
            rest = after;
            seen = true;
        }
    }
    (seen && rest.is_empty()).then(|| Duration::from_secs(total))
}

/// A duration as `parse_duration` reads it: `1h`, `1h30m`, `90s` shown as `1m30s`.
pub(crate) fn duration_text(duration: Duration) -> String {
    let secs = duration.as_secs();
    let parts = [(secs / 3600, 'h'), (secs / 60 % 60, 'm'), (secs % 60, 's')];
    let text: String = parts
        .iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, unit)| format!("{n}{unit}"))
        .collect();
    if text.is_empty() { "0s".into() } else { text }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::EnvVar;

    use super::*;

    fn env(name: &str, value: &str) -> Vec<EnvVar> {
        vec![EnvVar {
            name: name.into(),
            value: Some(value.into()),
            value_from: None,
        }]
    }

    fn policy(mode: Option<CompactionMode>, retention: &str) -> CompactionPolicy {
        CompactionPolicy {
            mode,
            retention: Some(retention.into()),
        }
    }

    #[test]
    fn defragmentation_is_by_rule_unless_turned_off_with_the_specs_thresholds() {
        assert_eq!(
            defragmentation(None),
            Defragmentation::Auto(DefragRule::default())
        );
        let off = DefragmentationPolicy {
            mode: Some(DefragmentationMode::Off),
            ..DefragmentationPolicy::default()
        };
        assert_eq!(defragmentation(Some(&off)), Defragmentation::Off);
        let tuned = DefragmentationPolicy {
            mode: None,
            freeable_bytes: Some(1024),
            quota_used_percent: Some(50),
        };
        assert_eq!(
            defragmentation(Some(&tuned)),
            Defragmentation::Auto(DefragRule {
                freeable_bytes: 1024,
                quota_used_percent: 50
            })
        );
    }

    #[test]
    fn durations_read_as_hours_minutes_and_seconds_and_nothing_else() {
        assert_eq!(parse_duration("1h"), Some(Duration::from_secs(3600)));
        assert_eq!(parse_duration("1h30m"), Some(Duration::from_secs(5400)));
        assert_eq!(parse_duration("90s"), Some(Duration::from_secs(90)));
        assert_eq!(parse_duration("2h0m5s"), Some(Duration::from_secs(7205)));
        for bad in ["", "h", "1d", "30m1h", "1.5h", "1h ", "-1h", "10"] {
            assert_eq!(parse_duration(bad), None, "{bad:?}");
        }
        assert_eq!(duration_text(Duration::from_secs(5400)), "1h30m");
        assert_eq!(duration_text(Duration::from_secs(90)), "1m30s");
    }

    #[test]
    fn a_spec_without_compaction_is_compacted_by_the_operator_every_hour() {
        assert_eq!(
            compaction(None, &[]),
            Compaction::Periodic {
                retention: Duration::from_secs(3600)
            }
        );
    }

    #[test]
    fn the_spec_compaction_is_read_by_its_mode() {
        let revision = policy(Some(CompactionMode::Revision), "500");
        assert_eq!(
            compaction(Some(&revision), &[]),
            Compaction::Revision { retention: 500 }
        );
        let periodic = policy(None, "30m");
        assert_eq!(
            compaction(Some(&periodic), &[]),
            Compaction::Periodic {
                retention: Duration::from_secs(1800)
            }
        );
    }

    #[test]
    fn an_etcd_env_auto_compaction_leaves_compaction_to_etcd() {
        let env = env("ETCD_AUTO_COMPACTION_RETENTION", "2");
        assert_eq!(compaction(None, &env), Compaction::ByEtcd);
    }

    #[test]
    fn the_quota_comes_from_the_spec_field_else_the_etcd_env_else_etcds_default() {
        let env = env(QUOTA_ENV, "4096");
        assert_eq!(quota_backend_bytes(None, &env), 4096);
        assert_eq!(quota_backend_bytes(None, &[]), DEFAULT_QUOTA_BACKEND_BYTES);
        assert_eq!(quota_backend_bytes(Some(8192), &[]), 8192);
        assert_eq!(
            quota_env(Some(8192)).and_then(|e| e.value),
            Some("8192".into())
        );
    }

    #[test]
    fn a_field_and_its_etcd_env_variable_together_are_a_conflict_with_both_named() {
        let quota = env(QUOTA_ENV, "4096");
        assert_eq!(conflict(None, None, &quota), None);
        let problem = conflict(None, Some(8192), &quota).expect("a conflict");
        assert!(problem.contains("spec.quotaBackendBytes") && problem.contains(QUOTA_ENV));
        let auto = env("ETCD_AUTO_COMPACTION_MODE", "revision");
        let problem =
            conflict(Some(&CompactionPolicy::default()), None, &auto).expect("a conflict");
        assert!(problem.contains("spec.compaction"), "{problem}");
    }
}
