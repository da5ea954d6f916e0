//! The security of member pods: the `restricted` Pod Security Standard by default. The
//! pod runs as a non-root user (65532, with that group owning its volumes), under the
//! runtime's default seccomp profile; every container drops all capabilities, cannot
//! gain privileges and has a read-only root. `spec.pod.securityContext` may set any field
//! of the pod's context (its own win); the CRD refuses the values that would weaken the
//! standard (`api::pod_security`).

use k8s_openapi::api::core::v1::{
    Capabilities, PodSecurityContext, SeccompProfile, SecurityContext,
};

/// The user and group member pods run as unless the spec says otherwise: the
/// conventional non-root user of minimal images (the operator's image runs as it too).
pub(crate) const MEMBER_USER: i64 = 65532;

/// The context of every container of a member pod: no privileges, no capabilities, a
/// read-only root, never root.
pub(crate) fn restricted() -> SecurityContext {
    SecurityContext {
        allow_privilege_escalation: Some(false),
        read_only_root_filesystem: Some(true),
        run_as_non_root: Some(true),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".into()]),
            ..Capabilities::default()
        }),
        ..SecurityContext::default()
    }
}

/// The operator's defaults for a member pod's context.
fn defaults() -> PodSecurityContext {
    PodSecurityContext {
        run_as_non_root: Some(true),
        run_as_user: Some(MEMBER_USER),
        run_as_group: Some(MEMBER_USER),
        fs_group: Some(MEMBER_USER),
        // Volumes whose root already has the group are not walked again at each start.
        fs_group_change_policy: Some("OnRootMismatch".into()),
        seccomp_profile: Some(SeccompProfile {
            type_: "RuntimeDefault".into(),
            localhost_profile: None,
        }),
        ..PodSecurityContext::default()
    }
}

/// A member pod's context: the spec's fields over the operator's defaults.
pub(crate) fn pod_security_context(spec: Option<&PodSecurityContext>) -> PodSecurityContext {
    let mut merged = serde_json::to_value(defaults()).expect("a context serializes");
    if let (Some(fields), Some(spec)) = (
        merged.as_object_mut(),
        spec.and_then(|s| serde_json::to_value(s).ok()),
    ) && let Some(given) = spec.as_object()
    {
        for (key, value) in given {
            if !value.is_null() {
                fields.insert(key.clone(), value.clone());
            }
        }
    }
    serde_json::from_value(merged).expect("the merged context is a context")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_spec_member_pods_get_the_restricted_defaults() {
        let sc = pod_security_context(None);
        assert_eq!(sc.run_as_non_root, Some(true));
        assert_eq!(sc.run_as_user, Some(MEMBER_USER));
        assert_eq!(sc.fs_group, Some(MEMBER_USER));
        assert_eq!(sc.seccomp_profile.unwrap().type_, "RuntimeDefault");
    }

    #[test]
    fn the_specs_fields_win_and_the_rest_stay_the_defaults() {
        let spec = PodSecurityContext {
            run_as_user: Some(9000),
            fs_group: Some(9000),
            ..PodSecurityContext::default()
        };
        let sc = pod_security_context(Some(&spec));
        assert_eq!(sc.run_as_user, Some(9000));
        assert_eq!(sc.fs_group, Some(9000));
        assert_eq!(sc.run_as_non_root, Some(true));
        assert_eq!(sc.run_as_group, Some(MEMBER_USER));
        assert_eq!(sc.seccomp_profile.unwrap().type_, "RuntimeDefault");
    }
}
