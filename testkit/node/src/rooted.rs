//! A container rooted in its image: what the hidden `container-init` subcommand of this
//! binary does between the node's spawn and the container's program. It runs as root in
//! a fresh process and, with safe wrappers of the system calls (`nix`, `caps`):
//!
//! 1. joins the pod's network namespace (`setns(2)` on its /run/netns path), unshares a
//!    mount and a UTS namespace (mounts stay private), sets the hostname;
//! 2. mounts an overlay: the image's shared root filesystem read-only below, the
//!    container's own writable layer above;
//! 3. bind-mounts the pod's volumes at their paths inside it (resolved inside the root,
//!    symlinks included), a fresh `/proc`, a small `/dev` (null, zero, full, random,
//!    urandom, tty, shm), and the pod's `/etc/hosts` and `/etc/resolv.conf` (read-only,
//!    written by the node as a kubelet writes them, see [`crate::etcfiles`]);
//! 4. makes the root read-only when asked (`readOnlyRootFilesystem`), then `pivot_root`s
//!    into it and detaches the host's tree;
//! 5. empties the ambient and inheritable capability sets and cuts the bounding set down
//!    to what the container keeps, sets the groups, group and user, and `no_new_privs`
//!    when privilege escalation is not allowed;
//! 6. execs the container's program with its environment, in its working directory.
//!
//! Any failure before the exec ends the process with exit code 128 and a message on
//! stderr (the container's log), as a runtime's `StartError` does.

use std::os::unix::process::CommandExt;
use std::path::{Component, Path, PathBuf};
use std::str::FromStr;

use nix::mount::{MntFlags, MsFlags};
use nix::sched::CloneFlags;
use nix::unistd::{Gid, Uid};
use serde::{Deserialize, Serialize};

use crate::volumes::Mount;

/// The exit code of a container whose setup failed before its program ran.
pub const SETUP_FAILED: i32 = 128;

/// Everything `container-init` needs, written by the node as JSON.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RootedSpec {
    /// The image's unpacked root filesystem (read-only, shared).
    pub lower: PathBuf,
    /// The container's writable layer.
    pub upper: PathBuf,
    /// The overlay's work directory (same file system as `upper`).
    pub work: PathBuf,
    /// Where the container's root is assembled.
    pub root: PathBuf,
    /// `readOnlyRootFilesystem`.
    pub read_only: bool,
    /// The volumes, targets being paths inside the container.
    pub mounts: Vec<Mount>,
    /// The pod's `/etc/hosts`.
    pub hosts: Option<PathBuf>,
    /// The pod's `/etc/resolv.conf`.
    pub resolv_conf: Option<PathBuf>,
    /// The pod's network namespace; `None` on the host's network.
    pub netns: Option<PathBuf>,
    /// The container's hostname.
    pub hostname: String,
    /// The working directory inside the container.
    pub working_dir: String,
    /// User id.
    pub uid: u32,
    /// Group id.
    pub gid: u32,
    /// Supplementary groups.
    pub groups: Vec<u32>,
    /// Capability names kept (bounding set), without `CAP_`.
    pub capabilities: Vec<String>,
    /// Set `no_new_privs`.
    pub no_new_privs: bool,
    /// The program and its arguments.
    pub argv: Vec<String>,
    /// The complete environment.
    pub env: Vec<(String, String)>,
}

/// Why the container could not be set up.
#[derive(Debug, thiserror::Error)]
#[error("{step}: {detail}")]
pub struct SetupError {
    step: String,
    detail: String,
}

fn step<E: std::fmt::Display>(what: impl Into<String>) -> impl FnOnce(E) -> SetupError {
    let step = what.into();
    move |e| SetupError {
        step,
        detail: e.to_string(),
    }
}

/// `path` (absolute, as the container sees it) as a host path under `root`, following
/// symlinks the way the container would: an absolute link target starts again at `root`,
/// `..` never climbs above it. Parts that do not exist yet are taken as written.
pub fn resolve_in_root(root: &Path, path: &str) -> Result<PathBuf, String> {
    let mut pending: Vec<String> = components(path);
    pending.reverse();
    let mut current: Vec<String> = Vec::new();
    let mut links = 0;
    while let Some(part) = pending.pop() {
        if part == ".." {
            current.pop();
            continue;
        }
        current.push(part);
        let host = root.join(current.iter().collect::<PathBuf>());
        let Ok(target) = std::fs::read_link(&host) else {
            continue;
        };
        links += 1;
        if links > 40 {
            return Err(format!("{path}: too many levels of symbolic links"));
        }
        current.pop();
        let target = target.to_string_lossy().into_owned();
        if target.starts_with('/') {
            current.clear();
        }
        pending.extend(components(&target).into_iter().rev());
    }
    Ok(root.join(current.iter().collect::<PathBuf>()))
}

fn components(path: &str) -> Vec<String> {
    Path::new(path)
        .components()
        .filter_map(|c| match c {
            Component::Normal(p) => Some(p.to_string_lossy().into_owned()),
            Component::ParentDir => Some("..".to_string()),
            _ => None,
        })
        .collect()
}

/// The overlay mount's options; paths with characters the option syntax uses are refused.
pub fn overlay_options(spec: &RootedSpec) -> Result<String, String> {
    let paths = [&spec.lower, &spec.upper, &spec.work];
    if let Some(bad) = paths
        .iter()
        .find(|p| p.to_string_lossy().contains([',', ':', '\\']))
    {
        return Err(format!(
            "{}: path unusable in an overlay mount",
            bad.display()
        ));
    }
    Ok(format!(
        "lowerdir={},upperdir={},workdir={}",
        spec.lower.display(),
        spec.upper.display(),
        spec.work.display()
    ))
}

/// Reads the spec at `path` and becomes the container; returns only on failure.
pub fn enter(path: &Path) -> SetupError {
    let spec = match std::fs::read(path)
        .map_err(step(format!("reading {}", path.display())))
        .and_then(|bytes| {
            serde_json::from_slice::<RootedSpec>(&bytes).map_err(step("parsing the spec"))
        }) {
        Ok(spec) => spec,
        Err(e) => return e,
    };
    match setup(&spec) {
        Ok(()) => exec(&spec),
        Err(e) => e,
    }
}

fn setup(spec: &RootedSpec) -> Result<(), SetupError> {
    if let Some(netns) = &spec.netns {
        let file = std::fs::File::open(netns).map_err(step(format!(
            "opening network namespace {}",
            netns.display()
        )))?;
        nix::sched::setns(&file, CloneFlags::CLONE_NEWNET).map_err(step(format!(
            "joining network namespace {}",
            netns.display()
        )))?;
    }
    nix::sched::unshare(CloneFlags::CLONE_NEWNS | CloneFlags::CLONE_NEWUTS)
        .map_err(step("unshare"))?;
    mount(
        None,
        Path::new("/"),
        None,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None,
    )?;
    nix::unistd::sethostname(&spec.hostname).map_err(step("sethostname"))?;
    let options = overlay_options(spec).map_err(step("overlay"))?;
    mount(
        Some("overlay"),
        &spec.root,
        Some("overlay"),
        MsFlags::empty(),
        Some(&options),
    )?;
    mount_volumes(spec)?;
    mount_system(spec)?;
    let wd = resolve_in_root(&spec.root, &spec.working_dir).map_err(step("working dir"))?;
    std::fs::create_dir_all(&wd).map_err(step(format!("creating {}", spec.working_dir)))?;
    if spec.read_only {
        let flags = MsFlags::MS_REMOUNT | MsFlags::MS_BIND | MsFlags::MS_RDONLY;
        mount(None, &spec.root, None, flags, None)?;
    }
    switch_root(&spec.root)?;
    std::env::set_current_dir(&spec.working_dir)
        .map_err(step(format!("entering {}", spec.working_dir)))?;
    drop_privileges(spec)
}

fn mount(
    source: Option<&str>,
    target: &Path,
    fstype: Option<&str>,
    flags: MsFlags,
    data: Option<&str>,
) -> Result<(), SetupError> {
    nix::mount::mount(source, target, fstype, flags, data).map_err(step(format!(
        "mounting {} on {}",
        source.unwrap_or("-"),
        target.display()
    )))
}

/// A bind mount of `source` at `target` (a host path inside the root), the mount point made
/// as a file or a directory like the source; read-only when asked.
fn bind(source: &Path, target: &Path, read_only: bool) -> Result<(), SetupError> {
    let made = if source.is_dir() {
        std::fs::create_dir_all(target)
    } else {
        target
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| {
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(target)
                    .map(drop)
            })
    };
    made.map_err(step(format!("creating mount point {}", target.display())))?;
    let src = source.to_string_lossy();
    mount(
        Some(&src),
        target,
        None,
        MsFlags::MS_BIND | MsFlags::MS_REC,
        None,
    )?;
    if read_only {
        let flags = MsFlags::MS_REMOUNT | MsFlags::MS_BIND | MsFlags::MS_RDONLY;
        mount(None, target, None, flags, None)?;
    }
    Ok(())
}

fn mount_volumes(spec: &RootedSpec) -> Result<(), SetupError> {
    let mut mounts = spec.mounts.clone();
    mounts.sort_by(|a, b| a.target.cmp(&b.target));
    for m in &mounts {
        let target = resolve_in_root(&spec.root, &m.target).map_err(step("volume mount"))?;
        bind(&m.source, &target, m.read_only)?;
    }
    Ok(())
}

/// `/proc`, `/dev` and the resolver files.
fn mount_system(spec: &RootedSpec) -> Result<(), SetupError> {
    let at = |p: &str| resolve_in_root(&spec.root, p).map_err(step("system mount"));
    let proc = at("/proc")?;
    std::fs::create_dir_all(&proc).map_err(step("creating /proc"))?;
    let hardened = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
    mount(Some("proc"), &proc, Some("proc"), hardened, None)?;
    let dev = at("/dev")?;
    std::fs::create_dir_all(&dev).map_err(step("creating /dev"))?;
    let tmpfs = MsFlags::MS_NOSUID | MsFlags::MS_STRICTATIME;
    mount(
        Some("tmpfs"),
        &dev,
        Some("tmpfs"),
        tmpfs,
        Some("mode=755,size=65536k"),
    )?;
    for name in ["null", "zero", "full", "random", "urandom", "tty"] {
        let host = Path::new("/dev").join(name);
        if host.exists() {
            bind(&host, &dev.join(name), false)?;
        }
    }
    for (link, target) in [
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ] {
        std::os::unix::fs::symlink(target, dev.join(link)).map_err(step("linking /dev"))?;
    }
    let shm = dev.join("shm");
    std::fs::create_dir_all(&shm).map_err(step("creating /dev/shm"))?;
    mount(
        Some("shm"),
        &shm,
        Some("tmpfs"),
        hardened,
        Some("mode=1777,size=65536k"),
    )?;
    resolver_files(spec)
}

/// The pod's `/etc/hosts` and `/etc/resolv.conf`, bound read-only (a link in the image at
/// either path is replaced by a file to mount on, in the container's own layer).
fn resolver_files(spec: &RootedSpec) -> Result<(), SetupError> {
    let etc = resolve_in_root(&spec.root, "/etc").map_err(step("resolver files"))?;
    let files = [(&spec.hosts, "hosts"), (&spec.resolv_conf, "resolv.conf")];
    for (source, name) in files {
        let Some(source) = source else { continue };
        let (target, path) = (etc.join(name), format!("/etc/{name}"));
        if target.is_symlink() {
            std::fs::remove_file(&target).map_err(step(format!("replacing the link {path}")))?;
        }
        bind(source, &target, true)?;
    }
    Ok(())
}

/// Makes `root` the root of this mount namespace and detaches the old one.
fn switch_root(root: &Path) -> Result<(), SetupError> {
    std::env::set_current_dir(root).map_err(step("entering the root"))?;
    nix::unistd::pivot_root(".", ".").map_err(step("pivot_root"))?;
    nix::mount::umount2(".", MntFlags::MNT_DETACH).map_err(step("detaching the host root"))?;
    std::env::set_current_dir("/").map_err(step("chdir /"))
}

/// Capabilities, groups, user and `no_new_privs`, in the order that keeps each step
/// allowed: the capability sets first (still root), the ids last.
fn drop_privileges(spec: &RootedSpec) -> Result<(), SetupError> {
    use caps::CapSet;
    let kept: caps::CapsHashSet = spec
        .capabilities
        .iter()
        .filter_map(|name| caps::Capability::from_str(&format!("CAP_{name}")).ok())
        .collect();
    caps::clear(None, CapSet::Ambient).map_err(step("clearing ambient capabilities"))?;
    caps::clear(None, CapSet::Inheritable).map_err(step("clearing inheritable capabilities"))?;
    for cap in caps::read(None, CapSet::Bounding).map_err(step("reading the bounding set"))? {
        if !kept.contains(&cap) {
            caps::drop(None, CapSet::Bounding, cap).map_err(step(format!("dropping {cap}")))?;
        }
    }
    let groups: Vec<Gid> = spec.groups.iter().map(|g| Gid::from_raw(*g)).collect();
    nix::unistd::setgroups(&groups).map_err(step("setgroups"))?;
    let gid = Gid::from_raw(spec.gid);
    nix::unistd::setresgid(gid, gid, gid).map_err(step("setresgid"))?;
    let uid = Uid::from_raw(spec.uid);
    nix::unistd::setresuid(uid, uid, uid).map_err(step("setresuid"))?;
    if spec.uid == 0 {
        // Root keeps only what the bounding set allows, now and after the exec.
        for set in [CapSet::Effective, CapSet::Permitted] {
            let current = caps::read(None, set).map_err(step("reading capabilities"))?;
            let limited = current.intersection(&kept).copied().collect();
            caps::set(None, set, &limited).map_err(step("limiting capabilities"))?;
        }
    }
    if spec.no_new_privs {
        nix::sys::prctl::set_no_new_privs().map_err(step("no_new_privs"))?;
    }
    Ok(())
}

/// Execs the program; returns only when that failed.
fn exec(spec: &RootedSpec) -> SetupError {
    let Some((program, args)) = spec.argv.split_first() else {
        return step("exec")("empty command");
    };
    let err = std::process::Command::new(program)
        .args(args)
        .env_clear()
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .exec();
    step(format!("exec {program}"))(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_resolve_inside_the_root_following_links_there() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        std::fs::create_dir_all(root.join("run")).unwrap();
        std::fs::create_dir_all(root.join("var")).unwrap();
        std::os::unix::fs::symlink("/run", root.join("var/run")).unwrap();
        std::os::unix::fs::symlink("../../..", root.join("run/up")).unwrap();
        assert_eq!(
            resolve_in_root(root, "/var/run/secrets/kubernetes.io").unwrap(),
            root.join("run/secrets/kubernetes.io")
        );
        assert_eq!(
            resolve_in_root(root, "/run/up/etc").unwrap(),
            root.join("etc")
        );
        assert_eq!(
            resolve_in_root(root, "/../../etc/hosts").unwrap(),
            root.join("etc/hosts")
        );
    }

    #[test]
    fn link_loops_are_reported() {
        let tmp = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink("/b", tmp.path().join("a")).unwrap();
        std::os::unix::fs::symlink("/a", tmp.path().join("b")).unwrap();
        assert!(resolve_in_root(tmp.path(), "/a/x").is_err());
    }

    #[test]
    fn overlay_options_name_the_layers_and_refuse_commas() {
        let mut spec = RootedSpec {
            lower: "/i/rootfs".into(),
            upper: "/c/upper".into(),
            work: "/c/work".into(),
            ..Default::default()
        };
        assert_eq!(
            overlay_options(&spec).unwrap(),
            "lowerdir=/i/rootfs,upperdir=/c/upper,workdir=/c/work"
        );
        spec.upper = "/c/up,per".into();
        assert!(overlay_options(&spec).is_err());
    }
}
