//! What `spec.pod` may not say: the etcd variables whose flags the operator owns or that
//! defeat its safety, and the label and annotation keys it keeps for itself.
//!
//! One list feeds both the CRD's CEL rules ([`env_cel_rule`], [`keys_cel_rule`]), which
//! refuse such a spec at `kubectl apply`, and [`pod_policy_problem`], which blocks an
//! object stored before the rules existed with the same reason.

use std::collections::BTreeMap;

use super::spec::PodPolicy;

/// Variables etcd reads as a flag the operator sets itself, or whose effect breaks a
/// stated rule: etcd refuses a variable whose flag is also given (the member never
/// starts), and one the operator does not give (`ETCD_FORCE_NEW_CLUSTER`,
/// `ETCD_WAL_DIR`) would act behind its back.
pub(crate) const RESERVED_ENV_NAMES: &[&str] = &[
    // Identity and storage: the operator names the member and keeps WAL and data on the
    // member's volume.
    "ETCD_NAME",
    "ETCD_DATA_DIR",
    "ETCD_WAL_DIR",
    // Only the operator's recovery may force a new cluster.
    "ETCD_FORCE_NEW_CLUSTER",
    // Membership changes are checked against quorum.
    "ETCD_STRICT_RECONFIG_CHECK",
    // Client TLS (peer TLS is every `ETCD_PEER_` variable).
    "ETCD_CERT_FILE",
    "ETCD_KEY_FILE",
    "ETCD_TRUSTED_CA_FILE",
    "ETCD_CLIENT_CERT_AUTH",
    "ETCD_CLIENT_CRL_FILE",
    "ETCD_CLIENT_CERT_FILE",
    "ETCD_CLIENT_KEY_FILE",
    "ETCD_AUTO_TLS",
];

/// Prefixes of reserved variables: listeners and advertised URLs (a plaintext listener
/// on a TLS cluster), the bootstrap (`INITIAL_*`, discovery), peer TLS, and every
/// `UNSAFE_` switch (`ETCD_UNSAFE_NO_FSYNC`).
pub(crate) const RESERVED_ENV_PREFIXES: &[&str] = &[
    "ETCD_LISTEN_",
    "ETCD_ADVERTISE_",
    "ETCD_INITIAL_",
    "ETCD_DISCOVERY",
    "ETCD_PEER_",
    "ETCD_UNSAFE_",
];

/// The prefix of the label and annotation keys the operator reads and writes on member
/// pods (voter, pod template, force-new-cluster, ...).
pub(crate) const OPERATOR_KEY_PREFIX: &str = "etcd.database.coreos.com/";

/// Whether `name` is a variable `spec.pod.etcdEnv` may not set.
pub(crate) fn is_reserved_env(name: &str) -> bool {
    RESERVED_ENV_NAMES.contains(&name) || RESERVED_ENV_PREFIXES.iter().any(|p| name.starts_with(p))
}

/// The message with which a reserved variable is refused.
pub(crate) fn env_rule_message() -> String {
    format!(
        "spec.pod.etcdEnv cannot set a variable the operator owns or that defeats its \
         safety: {} or any name starting with {}",
        RESERVED_ENV_NAMES.join(", "),
        RESERVED_ENV_PREFIXES.join(", ")
    )
}

/// The message with which an operator-owned label or annotation key is refused.
pub(crate) fn keys_rule_message(field: &str) -> String {
    format!("spec.pod.{field} cannot use the operator's own keys ({OPERATOR_KEY_PREFIX}*)")
}

/// CEL over the `etcdEnv` list: no entry names a reserved variable.
pub(crate) fn env_cel_rule() -> String {
    let quoted = |names: &[&str]| {
        names
            .iter()
            .map(|n| format!("'{n}'"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    format!(
        "self.all(e, !(e.name in [{}]) && ![{}].exists(p, e.name.startsWith(p)))",
        quoted(RESERVED_ENV_NAMES),
        quoted(RESERVED_ENV_PREFIXES)
    )
}

/// CEL over a labels or annotations map: no key has the operator's prefix.
pub(crate) fn keys_cel_rule() -> String {
    format!("self.all(k, !k.startsWith('{OPERATOR_KEY_PREFIX}'))")
}

/// Why `policy` cannot be used, when it cannot: the CRD refuses such a spec, this
/// catches objects stored before it did.
pub(crate) fn pod_policy_problem(policy: &PodPolicy) -> Option<String> {
    let reserved: Vec<&str> = (policy.etcd_env.iter().flatten())
        .map(|e| e.name.as_str())
        .filter(|n| is_reserved_env(n))
        .collect();
    if !reserved.is_empty() {
        return Some(format!(
            "{} (found {}); remove it from the spec",
            env_rule_message(),
            reserved.join(", ")
        ));
    }
    let owned = |field: &str, map: &Option<BTreeMap<String, String>>| {
        let keys: Vec<&str> = (map.iter().flatten())
            .map(|(k, _)| k.as_str())
            .filter(|k| k.starts_with(OPERATOR_KEY_PREFIX))
            .collect();
        (!keys.is_empty()).then(|| {
            format!(
                "{} (found {}); remove it from the spec",
                keys_rule_message(field),
                keys.join(", ")
            )
        })
    };
    owned("labels", &policy.labels).or_else(|| owned("annotations", &policy.annotations))
}
