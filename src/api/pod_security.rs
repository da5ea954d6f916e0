//! What `spec.pod` may not weaken: member pods meet the `restricted` Pod Security
//! Standard (the operator's defaults in `resources::security`), and a spec may tighten
//! them, never loosen them. `etcdEnv` takes values only: `valueFrom` would have the
//! kubelet read the namespace's Secrets and ConfigMaps for whoever wrote the spec.
//!
//! Each rule is one [`Rule`]: its CEL for the CRD (refused at `kubectl apply`, with the
//! message naming the rule) and the same test in Rust for [`problem`], which blocks an
//! object stored before the rule existed with the same message.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::PodSecurityContext;

use super::spec::PodPolicy;

/// The standard every refusal names.
const STANDARD: &str = "member pods meet the restricted Pod Security Standard";

/// seLinuxOptions types the baseline (and so the restricted) standard allows.
pub(crate) const SELINUX_TYPES: &[&str] = &[
    "container_t",
    "container_init_t",
    "container_kvm_t",
    "container_engine_t",
];

/// Sysctls the baseline (and so the restricted) standard allows: namespaced, and
/// isolated from the node and other pods.
pub(crate) const SAFE_SYSCTLS: &[&str] = &[
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
];

/// The annotation prefix of per-container AppArmor profiles (before `appArmorProfile`).
pub(crate) const APPARMOR_PREFIX: &str = "container.apparmor.security.beta.kubernetes.io/";

/// Most sysctls a spec may list (bounds the CEL rule's cost).
pub(crate) const MAX_SYSCTLS: i64 = 16;

/// One rule: where its CEL sits, the CEL, the message, and the same test in Rust
/// (`true`: the policy keeps the rule).
pub(crate) struct Rule {
    /// The field of `spec.pod` whose schema carries the CEL.
    pub field: &'static str,
    /// The CEL, over that field's value.
    pub cel: String,
    /// What a refusal says.
    pub message: String,
    /// The test in Rust.
    pub keeps: fn(&PodPolicy) -> bool,
}

fn quoted(items: &[&str]) -> String {
    items
        .iter()
        .map(|i| format!("'{i}'"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn security_context(policy: &PodPolicy) -> PodSecurityContext {
    policy.security_context.clone().unwrap_or_default()
}

/// Every rule of `spec.pod`'s security.
pub(crate) fn rules() -> Vec<Rule> {
    [
        identity_rules(),
        seccomp_and_selinux_rules(),
        host_isolation_rules(),
        apparmor_rules(),
        vec![etcd_env_rule()],
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// The refusal of a `securityContext` that sets `what`, naming the standard.
fn security_context_refusal(what: &str) -> String {
    format!("spec.pod.securityContext: {what} is refused: {STANDARD}")
}

/// Who member containers run as: never root, never with `runAsNonRoot` turned off.
fn identity_rules() -> Vec<Rule> {
    vec![
        Rule {
            field: "securityContext",
            cel: "!has(self.runAsUser) || self.runAsUser != 0".into(),
            message: security_context_refusal("runAsUser 0 (root)"),
            keeps: |p| security_context(p).run_as_user != Some(0),
        },
        Rule {
            field: "securityContext",
            cel: "!has(self.runAsNonRoot) || self.runAsNonRoot".into(),
            message: security_context_refusal("runAsNonRoot: false"),
            keeps: |p| security_context(p).run_as_non_root != Some(false),
        },
    ]
}

/// The seccomp profile and SELinux options: only those the standard allows.
fn seccomp_and_selinux_rules() -> Vec<Rule> {
    vec![
        Rule {
            field: "securityContext",
            cel: "!has(self.seccompProfile) || \
                  self.seccompProfile.type in ['RuntimeDefault', 'Localhost']"
                .into(),
            message: security_context_refusal(
                "a seccompProfile other than RuntimeDefault or Localhost",
            ),
            keeps: |p| {
                security_context(p)
                    .seccomp_profile
                    .is_none_or(|s| matches!(s.type_.as_str(), "RuntimeDefault" | "Localhost"))
            },
        },
        Rule {
            field: "securityContext",
            cel: format!(
                "!has(self.seLinuxOptions) || \
                 ((!has(self.seLinuxOptions.type) || self.seLinuxOptions.type in ['', {}]) && \
                 (!has(self.seLinuxOptions.user) || self.seLinuxOptions.user == '') && \
                 (!has(self.seLinuxOptions.role) || self.seLinuxOptions.role == ''))",
                quoted(SELINUX_TYPES)
            ),
            message: security_context_refusal(&format!(
                "seLinuxOptions with a user, a role or a type other than {}",
                SELINUX_TYPES.join(", ")
            )),
            keeps: |p| {
                security_context(p).se_linux_options.is_none_or(|o| {
                    o.type_
                        .as_deref()
                        .is_none_or(|t| t.is_empty() || SELINUX_TYPES.contains(&t))
                        && o.user.as_deref().unwrap_or_default().is_empty()
                        && o.role.as_deref().unwrap_or_default().is_empty()
                })
            },
        },
    ]
}

/// What would reach past the pod into the node: unsafe sysctls, a Windows host process.
fn host_isolation_rules() -> Vec<Rule> {
    vec![
        Rule {
            field: "securityContext",
            cel: format!(
                "!has(self.sysctls) || self.sysctls.all(s, s.name in [{}])",
                quoted(SAFE_SYSCTLS)
            ),
            message: security_context_refusal(&format!(
                "sysctls other than {}",
                SAFE_SYSCTLS.join(", ")
            )),
            keeps: |p| {
                (security_context(p).sysctls.iter().flatten())
                    .all(|s| SAFE_SYSCTLS.contains(&s.name.as_str()))
            },
        },
        Rule {
            field: "securityContext",
            cel: "!has(self.windowsOptions) || !has(self.windowsOptions.hostProcess) || \
                  !self.windowsOptions.hostProcess"
                .into(),
            message: security_context_refusal("windowsOptions.hostProcess: true"),
            keeps: |p| {
                security_context(p)
                    .windows_options
                    .and_then(|w| w.host_process)
                    != Some(true)
            },
        },
    ]
}

/// AppArmor, as the `securityContext` field and as the per-container annotations set it.
fn apparmor_rules() -> Vec<Rule> {
    vec![
        Rule {
            field: "securityContext",
            cel: "!has(self.appArmorProfile) || self.appArmorProfile.type != 'Unconfined'".into(),
            message: security_context_refusal("appArmorProfile Unconfined"),
            keeps: |p| {
                security_context(p)
                    .app_armor_profile
                    .is_none_or(|a| a.type_ != "Unconfined")
            },
        },
        Rule {
            field: "annotations",
            cel: format!(
                "self.all(k, !k.startsWith('{APPARMOR_PREFIX}') || \
                 self[k] == 'runtime/default' || self[k].startsWith('localhost/'))"
            ),
            message: format!(
                "spec.pod.annotations: an AppArmor profile ({APPARMOR_PREFIX}*) other than \
                 runtime/default or localhost/* is refused: {STANDARD}"
            ),
            keeps: |p| apparmor_kept(p.annotations.as_ref()),
        },
    ]
}

/// `etcdEnv` takes values only, never `valueFrom` the namespace's Secrets and ConfigMaps.
fn etcd_env_rule() -> Rule {
    Rule {
        field: "etcdEnv",
        cel: "self.all(e, !has(e.valueFrom))".into(),
        message: "spec.pod.etcdEnv takes values only: valueFrom would have member pods \
                  read Secrets and ConfigMaps of the namespace for whoever writes the spec"
            .into(),
        keeps: |p| (p.etcd_env.iter().flatten()).all(|e| e.value_from.is_none()),
    }
}

fn apparmor_kept(annotations: Option<&BTreeMap<String, String>>) -> bool {
    (annotations.into_iter().flatten())
        .filter(|(k, _)| k.starts_with(APPARMOR_PREFIX))
        .all(|(_, v)| v == "runtime/default" || v.starts_with("localhost/"))
}

/// Why `policy` would weaken member pods, when it would: the messages of every rule it
/// breaks. The CRD refuses such a spec; this catches objects stored before it did.
pub(crate) fn problem(policy: &PodPolicy) -> Option<String> {
    let broken: Vec<String> = rules()
        .into_iter()
        .filter(|rule| !(rule.keeps)(policy))
        .map(|rule| rule.message)
        .collect();
    (!broken.is_empty()).then(|| format!("{}; change the spec", broken.join("; ")))
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{
        AppArmorProfile, EnvVar, EnvVarSource, SELinuxOptions, SeccompProfile, SecretKeySelector,
        Sysctl,
    };

    use super::*;

    fn with_context(sc: PodSecurityContext) -> PodPolicy {
        PodPolicy {
            security_context: Some(sc),
            ..PodPolicy::default()
        }
    }

    #[test]
    fn a_policy_that_tightens_or_keeps_the_standard_has_no_problem() {
        assert_eq!(problem(&PodPolicy::default()), None);
        let tighter = with_context(PodSecurityContext {
            run_as_user: Some(9000),
            run_as_non_root: Some(true),
            fs_group: Some(9000),
            seccomp_profile: Some(SeccompProfile {
                type_: "Localhost".into(),
                localhost_profile: Some("etcd.json".into()),
            }),
            se_linux_options: Some(SELinuxOptions {
                type_: Some("container_t".into()),
                level: Some("s0:c1,c2".into()),
                ..SELinuxOptions::default()
            }),
            sysctls: Some(vec![Sysctl {
                name: "net.ipv4.tcp_keepalive_time".into(),
                value: "60".into(),
            }]),
            ..PodSecurityContext::default()
        });
        assert_eq!(problem(&tighter), None);
    }

    #[test]
    fn each_weakening_field_is_named_with_the_standard() {
        let cases = [
            (
                with_context(PodSecurityContext {
                    run_as_user: Some(0),
                    ..PodSecurityContext::default()
                }),
                "runAsUser 0",
            ),
            (
                with_context(PodSecurityContext {
                    run_as_non_root: Some(false),
                    ..PodSecurityContext::default()
                }),
                "runAsNonRoot: false",
            ),
            (
                with_context(PodSecurityContext {
                    seccomp_profile: Some(SeccompProfile {
                        type_: "Unconfined".into(),
                        localhost_profile: None,
                    }),
                    ..PodSecurityContext::default()
                }),
                "seccompProfile",
            ),
            (
                with_context(PodSecurityContext {
                    se_linux_options: Some(SELinuxOptions {
                        type_: Some("spc_t".into()),
                        ..SELinuxOptions::default()
                    }),
                    ..PodSecurityContext::default()
                }),
                "seLinuxOptions",
            ),
            (
                with_context(PodSecurityContext {
                    sysctls: Some(vec![Sysctl {
                        name: "kernel.msgmax".into(),
                        value: "1".into(),
                    }]),
                    ..PodSecurityContext::default()
                }),
                "sysctls",
            ),
            (
                with_context(PodSecurityContext {
                    app_armor_profile: Some(AppArmorProfile {
                        type_: "Unconfined".into(),
                        localhost_profile: None,
                    }),
                    ..PodSecurityContext::default()
                }),
                "appArmorProfile",
            ),
            (
                PodPolicy {
                    annotations: Some(BTreeMap::from([(
                        format!("{APPARMOR_PREFIX}etcd"),
                        "unconfined".to_string(),
                    )])),
                    ..PodPolicy::default()
                },
                "AppArmor",
            ),
        ];
        for (policy, named) in cases {
            let problem = problem(&policy).unwrap_or_else(|| panic!("{named} was let through"));
            assert!(problem.contains(named), "{named}: {problem}");
            assert!(
                problem.contains("restricted Pod Security Standard"),
                "{problem}"
            );
        }
    }

    #[test]
    fn an_etcd_env_value_from_a_secret_is_refused() {
        let policy = PodPolicy {
            etcd_env: Some(vec![EnvVar {
                name: "STOLEN".into(),
                value_from: Some(EnvVarSource {
                    secret_key_ref: Some(SecretKeySelector {
                        name: "other".into(),
                        key: "password".into(),
                        optional: None,
                    }),
                    ..EnvVarSource::default()
                }),
                value: None,
            }]),
            ..PodPolicy::default()
        };
        let problem = problem(&policy).expect("refused");
        assert!(problem.contains("values only"), "{problem}");
    }
}
