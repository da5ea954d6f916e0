//! A container's security context as the kubelet and its runtime apply it: the pod's and
//! the container's settings merged (the container's win), the user resolved against the
//! image's `USER` and `/etc/passwd`, `runAsNonRoot` verified with the kubelet's messages,
//! and the capability set computed from the runtime's defaults, `add` and `drop`. Pure.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{Container, Pod};

/// The capabilities a container runtime gives a container unless told otherwise
/// (containerd's and CRI-O's default set).
pub const DEFAULT_CAPABILITIES: [&str; 14] = [
    "CHOWN",
    "DAC_OVERRIDE",
    "FSETID",
    "FOWNER",
    "MKNOD",
    "NET_RAW",
    "SETGID",
    "SETUID",
    "SETFCAP",
    "SETPCAP",
    "NET_BIND_SERVICE",
    "SYS_CHROOT",
    "KILL",
    "AUDIT_WRITE",
];

/// The settings that decide who a container runs as and what it may do.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Effective {
    /// `runAsUser`, container over pod.
    pub run_as_user: Option<i64>,
    /// `runAsGroup`, container over pod.
    pub run_as_group: Option<i64>,
    /// `runAsNonRoot`, container over pod.
    pub run_as_non_root: Option<bool>,
    /// The pod's `supplementalGroups` and `fsGroup`.
    pub supplemental_groups: Vec<i64>,
    /// `readOnlyRootFilesystem`.
    pub read_only_root: bool,
    /// `allowPrivilegeEscalation` (unset means allowed).
    pub allow_privilege_escalation: Option<bool>,
    /// `capabilities.add`.
    pub cap_add: Vec<String>,
    /// `capabilities.drop`.
    pub cap_drop: Vec<String>,
    /// `privileged`.
    pub privileged: bool,
}

/// Merges the pod's and the container's security contexts as the kubelet does
/// (`DetermineEffectiveSecurityContext`): container fields override pod fields.
pub fn effective(pod: &Pod, container: &Container) -> Effective {
    let psc = pod.spec.as_ref().and_then(|s| s.security_context.as_ref());
    let csc = container.security_context.as_ref();
    let caps = csc.and_then(|c| c.capabilities.as_ref());
    let mut supplemental_groups = psc
        .and_then(|p| p.supplemental_groups.clone())
        .unwrap_or_default();
    if let Some(fs_group) = psc.and_then(|p| p.fs_group) {
        supplemental_groups.push(fs_group);
    }
    Effective {
        run_as_user: csc
            .and_then(|c| c.run_as_user)
            .or(psc.and_then(|p| p.run_as_user)),
        run_as_group: csc
            .and_then(|c| c.run_as_group)
            .or(psc.and_then(|p| p.run_as_group)),
        run_as_non_root: csc
            .and_then(|c| c.run_as_non_root)
            .or(psc.and_then(|p| p.run_as_non_root)),
        supplemental_groups,
        read_only_root: csc.and_then(|c| c.read_only_root_filesystem) == Some(true),
        allow_privilege_escalation: csc.and_then(|c| c.allow_privilege_escalation),
        cap_add: caps.and_then(|c| c.add.clone()).unwrap_or_default(),
        cap_drop: caps.and_then(|c| c.drop.clone()).unwrap_or_default(),
        privileged: csc.and_then(|c| c.privileged) == Some(true),
    }
}

/// The image's `USER`, split: a numeric uid, or a user name; and the group part, if any.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ImageUser {
    /// The numeric uid, when the user part is a number.
    pub uid: Option<u32>,
    /// The user name, when the user part is not a number.
    pub name: Option<String>,
    /// The group part after `:`, as written.
    pub group: Option<String>,
}

impl ImageUser {
    /// Parses `USER` (`""`, `65532`, `65532:65532`, `nonroot`, `nonroot:nonroot`).
    pub fn parse(user: &str) -> ImageUser {
        let (user, group) = match user.split_once(':') {
            Some((u, g)) => (u, Some(g.to_string())),
            None => (user, None),
        };
        if user.is_empty() {
            return ImageUser {
                group,
                ..Default::default()
            };
        }
        match user.parse() {
            Ok(uid) => ImageUser {
                uid: Some(uid),
                name: None,
                group,
            },
            Err(_) => ImageUser {
                uid: None,
                name: Some(user.to_string()),
                group,
            },
        }
    }

    /// The uid the kubelet checks `runAsNonRoot` against: numeric users as written, no
    /// user at all as root, a user name not at all.
    fn verifiable_uid(&self) -> Option<u32> {
        match (&self.uid, &self.name) {
            (Some(uid), _) => Some(*uid),
            (None, None) => Some(0),
            (None, Some(_)) => None,
        }
    }
}

/// How the kubelet names a pod in messages (`format.Pod`): `name_namespace(uid)`.
pub fn pod_label(pod: &Pod) -> String {
    format!(
        "{}_{}({})",
        pod.metadata.name.as_deref().unwrap_or_default(),
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.uid.as_deref().unwrap_or_default()
    )
}

/// The kubelet's `runAsNonRoot` check; the error is the `CreateContainerConfigError`
/// message it gives.
pub fn verify_run_as_non_root(
    sc: &Effective,
    image_user: &ImageUser,
    pod_label: &str,
    container: &str,
) -> Result<(), String> {
    if sc.run_as_non_root != Some(true) {
        return Ok(());
    }
    if let Some(uid) = sc.run_as_user {
        if uid == 0 {
            return Err(format!(
                "container's runAsUser breaks non-root policy (pod: {pod_label:?}, container: {container})"
            ));
        }
        return Ok(());
    }
    match (image_user.verifiable_uid(), &image_user.name) {
        (Some(0), _) => Err(format!(
            "container has runAsNonRoot and image will run as root (pod: {pod_label:?}, container: {container})"
        )),
        (None, Some(name)) => Err(format!(
            "container has runAsNonRoot and image has non-numeric user ({name}), cannot verify user is non-root (pod: {pod_label:?}, container: {container})"
        )),
        _ => Ok(()),
    }
}

/// One `/etc/passwd` or `/etc/group` entry: name, id, and (passwd) primary group and home.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Entry {
    name: String,
    id: u32,
    gid: Option<u32>,
    home: Option<String>,
}

fn entries(text: &str, passwd: bool) -> Vec<Entry> {
    text.lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .filter_map(|line| {
            let fields: Vec<&str> = line.split(':').collect();
            let id = fields.get(2)?.parse().ok()?;
            Some(Entry {
                name: fields[0].to_string(),
                id,
                gid: passwd.then(|| fields.get(3)?.parse().ok()).flatten(),
                home: passwd
                    .then(|| fields.get(5).map(|h| h.to_string()))
                    .flatten(),
            })
        })
        .collect()
}

/// The identity a container process gets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    /// User id.
    pub uid: u32,
    /// Primary group id.
    pub gid: u32,
    /// Supplementary groups.
    pub groups: Vec<u32>,
    /// The user's home directory from the image's passwd (`/` when unknown).
    pub home: String,
}

/// Resolves the identity as containerd does: `runAsUser`, else the image's `USER` (a name
/// looked up in the image's `/etc/passwd`), else root; `runAsGroup`, else the image's
/// group part (when the image's user is used), else the user's primary group, else 0.
pub fn resolve_identity(
    sc: &Effective,
    image_user: &ImageUser,
    passwd: &str,
    group: &str,
) -> Result<Identity, String> {
    let users = entries(passwd, true);
    let groups = entries(group, false);
    let uid = match (sc.run_as_user, image_user.uid, &image_user.name) {
        (Some(uid), _, _) => to_id(uid, "runAsUser")?,
        (None, Some(uid), _) => uid,
        (None, None, Some(name)) => users
            .iter()
            .find(|e| &e.name == name)
            .map(|e| e.id)
            .ok_or_else(|| {
                format!("unable to find user {name}: no matching entries in passwd file")
            })?,
        (None, None, None) => 0,
    };
    let user_entry = users.iter().find(|e| e.id == uid);
    let image_group = match (&image_user.group, sc.run_as_user) {
        (Some(g), None) if !g.is_empty() => Some(match g.parse() {
            Ok(gid) => gid,
            Err(_) => groups
                .iter()
                .find(|e| &e.name == g)
                .map(|e| e.id)
                .ok_or_else(|| {
                    format!("unable to find group {g}: no matching entries in group file")
                })?,
        }),
        _ => None,
    };
    let gid = match sc.run_as_group {
        Some(gid) => to_id(gid, "runAsGroup")?,
        None => image_group
            .or_else(|| user_entry.and_then(|e| e.gid))
            .unwrap_or(0),
    };
    let mut extra = BTreeSet::new();
    for g in &sc.supplemental_groups {
        extra.insert(to_id(*g, "supplementalGroups")?);
    }
    extra.remove(&gid);
    Ok(Identity {
        uid,
        gid,
        groups: std::iter::once(gid).chain(extra).collect(),
        home: user_entry
            .and_then(|e| e.home.clone())
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| "/".to_string()),
    })
}

fn to_id(value: i64, what: &str) -> Result<u32, String> {
    u32::try_from(value).map_err(|_| format!("{what} {value} is not a valid id"))
}

/// The capability names (without `CAP_`, upper case) a container keeps, in containerd's
/// order: the runtime's defaults (every capability in `all` when privileged); `ALL` in
/// `add` makes it every capability, then `ALL` in `drop` none; then each named `add` is
/// added and each named `drop` removed.
pub fn capabilities(sc: &Effective, all: &[String]) -> BTreeSet<String> {
    let canon = |c: &String| {
        let upper = c.to_ascii_uppercase();
        upper.strip_prefix("CAP_").unwrap_or(&upper).to_string()
    };
    let every: BTreeSet<String> = all.iter().map(canon).collect();
    if sc.privileged {
        return every;
    }
    let drop: BTreeSet<String> = sc.cap_drop.iter().map(canon).collect();
    let add: BTreeSet<String> = sc.cap_add.iter().map(canon).collect();
    let mut kept: BTreeSet<String> = DEFAULT_CAPABILITIES.iter().map(|c| c.to_string()).collect();
    if add.contains("ALL") {
        kept = every;
    }
    if drop.contains("ALL") {
        kept.clear();
    }
    kept.extend(add.into_iter().filter(|c| c != "ALL"));
    kept.retain(|c| !drop.contains(c));
    kept
}

/// Whether the process gets `no_new_privs`: when privilege escalation is not allowed
/// (and the container is not privileged).
pub fn no_new_privs(sc: &Effective) -> bool {
    !sc.privileged && sc.allow_privilege_escalation == Some(false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Capabilities, PodSecurityContext, PodSpec, SecurityContext};

    fn pod(psc: PodSecurityContext) -> Pod {
        let mut pod = Pod::default();
        pod.metadata.name = Some("op".into());
        pod.metadata.namespace = Some("ns".into());
        pod.metadata.uid = Some("u-1".into());
        pod.spec = Some(PodSpec {
            security_context: Some(psc),
            ..Default::default()
        });
        pod
    }

    fn container(sc: SecurityContext) -> Container {
        Container {
            name: "c".into(),
            security_context: Some(sc),
            ..Default::default()
        }
    }

    const PASSWD: &str = "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/nonexistent:/sbin/nologin\n";
    const GROUP: &str = "root:x:0:\nnonroot:x:65532:\n";

    #[test]
    fn container_settings_override_pod_settings() {
        let p = pod(PodSecurityContext {
            run_as_user: Some(1000),
            run_as_group: Some(1000),
            run_as_non_root: Some(true),
            supplemental_groups: Some(vec![5]),
            fs_group: Some(7),
            ..Default::default()
        });
        let c = container(SecurityContext {
            run_as_user: Some(2000),
            run_as_non_root: Some(false),
            read_only_root_filesystem: Some(true),
            ..Default::default()
        });
        let sc = effective(&p, &c);
        assert_eq!(sc.run_as_user, Some(2000));
        assert_eq!(sc.run_as_group, Some(1000));
        assert_eq!(sc.run_as_non_root, Some(false));
        assert_eq!(sc.supplemental_groups, vec![5, 7]);
        assert!(sc.read_only_root);
    }

    #[test]
    fn run_as_non_root_refuses_uid_zero_with_the_kubelet_message() {
        let p = pod(PodSecurityContext {
            run_as_non_root: Some(true),
            run_as_user: Some(0),
            ..Default::default()
        });
        let sc = effective(&p, &Container::default());
        let err = verify_run_as_non_root(&sc, &ImageUser::parse("65532"), &pod_label(&p), "c")
            .unwrap_err();
        assert_eq!(
            err,
            "container's runAsUser breaks non-root policy (pod: \"op_ns(u-1)\", container: c)"
        );
    }

    #[test]
    fn run_as_non_root_checks_the_image_user_when_no_run_as_user() {
        let sc = Effective {
            run_as_non_root: Some(true),
            ..Default::default()
        };
        for root in ["", "0", "0:0"] {
            let err = verify_run_as_non_root(&sc, &ImageUser::parse(root), "p", "c").unwrap_err();
            assert!(err.contains("image will run as root"), "{root:?}: {err}");
        }
        let err = verify_run_as_non_root(&sc, &ImageUser::parse("nonroot"), "p", "c").unwrap_err();
        assert!(err.contains("non-numeric user (nonroot)"), "{err}");
        assert!(verify_run_as_non_root(&sc, &ImageUser::parse("65532:65532"), "p", "c").is_ok());
        let allowed = Effective::default();
        assert!(verify_run_as_non_root(&allowed, &ImageUser::parse(""), "p", "c").is_ok());
    }

    #[test]
    fn identity_comes_from_run_as_user_then_image_user() {
        let sc = Effective {
            run_as_user: Some(65532),
            run_as_group: Some(65532),
            ..Default::default()
        };
        let id = resolve_identity(&sc, &ImageUser::parse(""), PASSWD, GROUP).unwrap();
        assert_eq!(
            (id.uid, id.gid, id.groups.clone()),
            (65532, 65532, vec![65532])
        );
        assert_eq!(id.home, "/nonexistent");
        let image = ImageUser::parse("nonroot:nonroot");
        let id = resolve_identity(&Effective::default(), &image, PASSWD, GROUP).unwrap();
        assert_eq!((id.uid, id.gid), (65532, 65532));
        let id =
            resolve_identity(&Effective::default(), &ImageUser::parse(""), PASSWD, GROUP).unwrap();
        assert_eq!((id.uid, id.gid, id.home.as_str()), (0, 0, "/root"));
    }

    #[test]
    fn run_as_user_without_group_takes_the_passwd_group_else_zero() {
        let sc = Effective {
            run_as_user: Some(65532),
            supplemental_groups: vec![10, 65532],
            ..Default::default()
        };
        let id = resolve_identity(&sc, &ImageUser::parse("0:5"), PASSWD, GROUP).unwrap();
        assert_eq!((id.gid, id.groups.clone()), (65532, vec![65532, 10]));
        let sc = Effective {
            run_as_user: Some(4242),
            ..Default::default()
        };
        let id = resolve_identity(&sc, &ImageUser::parse(""), PASSWD, GROUP).unwrap();
        assert_eq!((id.uid, id.gid, id.home.as_str()), (4242, 0, "/"));
    }

    #[test]
    fn unknown_image_user_name_is_an_error() {
        let err = resolve_identity(
            &Effective::default(),
            &ImageUser::parse("ghost"),
            PASSWD,
            GROUP,
        )
        .unwrap_err();
        assert!(err.contains("unable to find user ghost"), "{err}");
    }

    #[test]
    fn capabilities_start_from_the_runtime_defaults() {
        let all: Vec<String> = ["CHOWN", "SYS_ADMIN", "NET_ADMIN"]
            .map(String::from)
            .to_vec();
        let drop_all = Effective {
            cap_drop: vec!["ALL".into()],
            ..Default::default()
        };
        assert!(capabilities(&drop_all, &all).is_empty());
        let drop_all_add_one = Effective {
            cap_drop: vec!["ALL".into()],
            cap_add: vec!["NET_BIND_SERVICE".into()],
            ..Default::default()
        };
        assert_eq!(
            capabilities(&drop_all_add_one, &all),
            BTreeSet::from(["NET_BIND_SERVICE".to_string()])
        );
        let defaults = capabilities(&Effective::default(), &all);
        assert_eq!(defaults.len(), DEFAULT_CAPABILITIES.len());
        assert!(!defaults.contains("SYS_ADMIN"));
        let mut sc = Effective {
            cap_drop: vec!["cap_chown".into()],
            cap_add: vec!["SYS_ADMIN".into()],
            ..Default::default()
        };
        let caps = capabilities(&sc, &all);
        assert!(!caps.contains("CHOWN") && caps.contains("SYS_ADMIN"));
        sc.privileged = true;
        assert_eq!(capabilities(&sc, &all).len(), 3);
    }

    #[test]
    fn no_new_privs_only_when_escalation_is_forbidden() {
        let c = container(SecurityContext {
            allow_privilege_escalation: Some(false),
            capabilities: Some(Capabilities {
                drop: Some(vec!["ALL".into()]),
                add: None,
            }),
            ..Default::default()
        });
        let sc = effective(&Pod::default(), &c);
        assert!(no_new_privs(&sc));
        assert!(!no_new_privs(&Effective::default()));
    }
}
