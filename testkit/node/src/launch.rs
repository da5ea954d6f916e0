//! Starting a container process, the one place that knows how: [`spawn`] takes a
//! [`LaunchSpec`] (command, environment, working directory, mounts, hostname, log file).
//!
//! A container of an etcd or busybox image runs on the host's file system: `nsenter`
//! joins the pod's network namespace ([`LaunchSpec::netns`], `setns(2)` on its path),
//! `unshare` gives the process a private mount (and UTS) namespace, a small shell
//! prologue bind-mounts its volumes and the pod's `/etc/hosts` and `/etc/resolv.conf`
//! and sets its hostname, then execs the command. (util-linux does the `setns(2)`: the
//! workspace forbids the unsafe `pre_exec` that doing it in the node would need.)
//!
//! A container of an image built here ([`LaunchSpec::root`]) runs rooted in that image:
//! the node starts itself as `container-init` with the container's spec (see
//! [`crate::rooted`]), which joins the pod's network namespace, builds the root, drops
//! privileges and execs the program.
//!
//! stdout and stderr are pipes the node reads (see [`crate::logcap`]).

use std::path::{Path, PathBuf};
use std::process::Stdio;

use std::os::unix::fs::OpenOptionsExt;

use crate::images::EtcdRelease;
use crate::rooted::RootedSpec;
use crate::volumes::Mount;

/// The prologue run by `/bin/sh -c` inside the new namespaces. Arguments:
/// hostname, /usr/local/bin overlay (or empty), working dir, mount count, then
/// `source target ro|rw` per mount, then the command.
pub const PROLOGUE: &str = r#"h="$1"; ov="$2"; wd="$3"; n="$4"; shift 4
fail() { echo "etcd-operator-node: $*" >&2; exit 126; }
hostname "$h" 2>/dev/null || true
if [ -n "$ov" ]; then mount --bind "$ov" /usr/local/bin || fail "cannot mount $ov on /usr/local/bin"; fi
while [ "$n" -gt 0 ]; do
  mount --bind "$1" "$2" || fail "cannot bind-mount $1 at $2"
  if [ "$3" = ro ]; then mount -o remount,bind,ro "$2" || fail "cannot make $2 read-only"; fi
  shift 3; n=$((n - 1))
done
mkdir -p "$wd" && cd "$wd" || fail "cannot enter working directory $wd"
exec "$@""#;

/// The util-linux programs that put a process into namespaces.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostTools {
    /// `unshare`: new mount and UTS namespaces.
    pub unshare: PathBuf,
    /// `nsenter`: joins an existing (network) namespace.
    pub nsenter: PathBuf,
}

impl HostTools {
    /// Both, found in the node's PATH.
    pub fn find() -> Result<HostTools, String> {
        let find = |name: &str| {
            find_program(name).ok_or_else(|| {
                format!("util-linux `{name}` not found in PATH (apt-get install util-linux)")
            })
        };
        Ok(HostTools {
            unshare: find("unshare")?,
            nsenter: find("nsenter")?,
        })
    }
}

/// Everything needed to start one container process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LaunchSpec {
    /// The command and its arguments.
    pub argv: Vec<String>,
    /// The complete environment.
    pub env: Vec<(String, String)>,
    /// Bind mounts, made in order of target path.
    pub mounts: Vec<Mount>,
    /// A directory to mount over `/usr/local/bin` (an etcd image's programs).
    pub bin_overlay: Option<PathBuf>,
    /// The container's hostname.
    pub hostname: String,
    /// The working directory.
    pub working_dir: String,
    /// Where stdout and stderr go, appended across restarts.
    pub log_path: PathBuf,
    /// Where this process's output goes in the kubelet's log format.
    pub attempt_log: PathBuf,
    /// For a container of an image built here: its root and identity.
    pub root: Option<RootSetup>,
    /// The pod's network namespace (a path under /run/netns); `None` on the host's network.
    pub netns: Option<PathBuf>,
}

/// What a container rooted in its image needs beyond the common launch.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RootSetup {
    /// The image's unpacked root filesystem.
    pub lower: PathBuf,
    /// The container's directory (writable layer, work dir, root mount point, spec).
    pub dir: PathBuf,
    /// `readOnlyRootFilesystem`.
    pub read_only: bool,
    /// The pod's `/etc/hosts`, to mount.
    pub hosts: Option<PathBuf>,
    /// The pod's `/etc/resolv.conf`, to mount.
    pub resolv_conf: Option<PathBuf>,
    /// User id.
    pub uid: u32,
    /// Group id.
    pub gid: u32,
    /// Supplementary groups.
    pub groups: Vec<u32>,
    /// Capabilities kept.
    pub capabilities: Vec<String>,
    /// Set `no_new_privs`.
    pub no_new_privs: bool,
}

impl RootSetup {
    /// The spec `container-init` reads, for `spec`.
    pub fn rooted_spec(&self, spec: &LaunchSpec) -> RootedSpec {
        RootedSpec {
            lower: self.lower.clone(),
            upper: self.dir.join("upper"),
            work: self.dir.join("work"),
            root: self.dir.join("root"),
            read_only: self.read_only,
            mounts: spec.mounts.clone(),
            hosts: self.hosts.clone(),
            resolv_conf: self.resolv_conf.clone(),
            netns: spec.netns.clone(),
            hostname: spec.hostname.clone(),
            working_dir: spec.working_dir.clone(),
            uid: self.uid,
            gid: self.gid,
            groups: self.groups.clone(),
            capabilities: self.capabilities.clone(),
            no_new_privs: self.no_new_privs,
            argv: spec.argv.clone(),
            env: spec.env.clone(),
        }
    }

    /// A fresh writable layer and the spec file; the argv that starts `container-init`.
    fn prepare(&self, spec: &LaunchSpec) -> std::io::Result<Vec<String>> {
        let rooted = self.rooted_spec(spec);
        for dir in [&rooted.upper, &rooted.work] {
            match std::fs::remove_dir_all(dir) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
            std::fs::create_dir_all(dir)?;
        }
        std::fs::create_dir_all(&rooted.root)?;
        let path = self.dir.join("spec.json");
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .mode(0o600)
            .open(&path)?;
        serde_json::to_writer(&mut file, &rooted).map_err(std::io::Error::other)?;
        Ok(vec![
            "/proc/self/exe".to_string(),
            "container-init".to_string(),
            "--spec".to_string(),
            path.display().to_string(),
        ])
    }
}

/// The full argv: `[nsenter --net=NETNS --] unshare ... /bin/sh -c PROLOGUE sh <prologue
/// args> <command>`.
pub fn wrapper_argv(tools: &HostTools, spec: &LaunchSpec) -> Vec<String> {
    let mut mounts = spec.mounts.clone();
    mounts.sort_by(|a, b| a.target.cmp(&b.target));
    let mut argv = Vec::new();
    if let Some(netns) = &spec.netns {
        argv.push(tools.nsenter.display().to_string());
        argv.push(format!("--net={}", netns.display()));
        argv.push("--".into());
    }
    argv.extend([
        tools.unshare.display().to_string(),
        "--mount".into(),
        "--uts".into(),
        "--propagation".into(),
        "private".into(),
        "/bin/sh".into(),
        "-c".into(),
        PROLOGUE.into(),
        "sh".into(),
        spec.hostname.clone(),
        spec.bin_overlay
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_default(),
        spec.working_dir.clone(),
        mounts.len().to_string(),
    ]);
    for m in &mounts {
        argv.push(m.source.display().to_string());
        argv.push(m.target.clone());
        argv.push(if m.read_only { "ro" } else { "rw" }.into());
    }
    argv.extend(spec.argv.iter().cloned());
    argv
}

/// Creates what the mounts need on the host: the volume path (a directory unless it is an
/// existing file) and a mount point of the same kind.
pub fn prepare_mount_points(mounts: &[Mount]) -> std::io::Result<()> {
    for m in mounts {
        if m.source.is_file() {
            let target = Path::new(&m.target);
            if !target.exists() {
                if let Some(parent) = target.parent() {
                    std::fs::create_dir_all(parent)?;
                }
                std::fs::File::create(target)?;
            }
        } else {
            std::fs::create_dir_all(&m.source)?;
            std::fs::create_dir_all(&m.target)?;
        }
    }
    Ok(())
}

/// A directory with links to an etcd release's programs, to mount over `/usr/local/bin`
/// so that scripts calling `/usr/local/bin/etcd` find them; `None` when that cannot work
/// (the host lacks /usr/local/bin, or a program itself lives there).
pub fn etcd_overlay(images_dir: &Path, release: &EtcdRelease) -> Option<PathBuf> {
    if !Path::new("/usr/local/bin").is_dir()
        || release
            .tools
            .values()
            .any(|p| p.starts_with("/usr/local/bin"))
    {
        return None;
    }
    let dir = images_dir.join(format!("etcd-{}", release.version));
    std::fs::create_dir_all(&dir).ok()?;
    for (name, target) in &release.tools {
        let link = dir.join(name);
        let _ = std::fs::remove_file(&link);
        let target = std::fs::canonicalize(target).unwrap_or_else(|_| target.clone());
        std::os::unix::fs::symlink(&target, &link).ok()?;
    }
    Some(dir)
}

/// Finds a program in the node's PATH.
pub fn find_program(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

/// Starts the container process described by `spec`, in a process group of its own, its
/// stdout and stderr piped to the node.
pub fn spawn(tools: &HostTools, spec: &LaunchSpec) -> std::io::Result<tokio::process::Child> {
    let argv = match &spec.root {
        Some(root) => root.prepare(spec)?,
        None => {
            prepare_mount_points(&spec.mounts)?;
            wrapper_argv(tools, spec)
        }
    };
    let mut cmd = tokio::process::Command::new(&argv[0]);
    cmd.args(&argv[1..])
        .env_clear()
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(false);
    cmd.spawn()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::time::Duration;

    fn spec(dir: &Path, argv: &[&str], mounts: Vec<Mount>) -> LaunchSpec {
        LaunchSpec {
            argv: argv.iter().map(|s| s.to_string()).collect(),
            env: vec![
                ("PATH".into(), "/usr/sbin:/usr/bin:/sbin:/bin".into()),
                ("GREETING".into(), "hi".into()),
            ],
            mounts,
            bin_overlay: None,
            hostname: "m1".into(),
            working_dir: "/".into(),
            log_path: dir.join("logs/c.log"),
            attempt_log: dir.join("logs/c/0.log"),
            root: None,
            netns: None,
        }
    }

    fn tools() -> HostTools {
        HostTools::find().expect("util-linux unshare and nsenter (apt-get install util-linux)")
    }

    /// Runs `s` to its end; its log.
    async fn run_to_end(s: &LaunchSpec) -> String {
        let mut child = spawn(&tools(), s).unwrap();
        let book = std::sync::Arc::new(crate::logcap::LogBook::default());
        crate::logcap::capture(&mut child, &s.log_path, &s.attempt_log, book.clone()).unwrap();
        let status = tokio::time::timeout(Duration::from_secs(10), child.wait())
            .await
            .unwrap()
            .unwrap();
        while book.watch(&s.attempt_log).is_some() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let log = std::fs::read_to_string(&s.log_path).unwrap();
        assert!(status.success(), "{log}");
        log
    }

    #[test]
    fn wrapper_passes_mounts_sorted_then_command() {
        let s = LaunchSpec {
            mounts: vec![
                Mount {
                    source: "/v/b".into(),
                    target: "/data/sub".into(),
                    read_only: true,
                },
                Mount {
                    source: "/v/a".into(),
                    target: "/data".into(),
                    read_only: false,
                },
            ],
            ..spec(Path::new("/s"), &["etcd", "--name=m1"], vec![])
        };
        let tools = HostTools {
            unshare: "/usr/bin/unshare".into(),
            nsenter: "/usr/bin/nsenter".into(),
        };
        let argv = wrapper_argv(&tools, &s);
        let tail: Vec<&str> = argv[9..].iter().map(String::as_str).collect();
        assert_eq!(
            tail,
            [
                "m1",
                "",
                "/",
                "2",
                "/v/a",
                "/data",
                "rw",
                "/v/b",
                "/data/sub",
                "ro",
                "etcd",
                "--name=m1"
            ]
        );
        assert_eq!(argv[0], "/usr/bin/unshare");
        let joined = LaunchSpec {
            netns: Some("/run/netns/eo-1-abc".into()),
            ..s
        };
        let argv = wrapper_argv(&tools, &joined);
        assert_eq!(
            argv[..4],
            [
                "/usr/bin/nsenter",
                "--net=/run/netns/eo-1-abc",
                "--",
                "/usr/bin/unshare"
            ]
        );
        assert_eq!(argv[12..], tail);
    }

    /// Needs root, as the node does. The "pod" namespace is an anonymous one held by a
    /// sleeping process, joined by its /proc path as the node joins /run/netns paths.
    #[tokio::test]
    async fn a_process_joins_the_pods_network_namespace() {
        let mut holder = std::process::Command::new(&tools().unshare)
            .args(["--net", "sleep", "30"])
            .spawn()
            .unwrap();
        let netns = PathBuf::from(format!("/proc/{}/ns/net", holder.id()));
        let theirs = wait_for_other_netns(&netns);
        let tmp = tempfile::tempdir().unwrap();
        let mut s = spec(tmp.path(), &["readlink", "/proc/self/ns/net"], vec![]);
        s.netns = Some(netns);
        let log = run_to_end(&s).await;
        let _ = holder.kill();
        let _ = holder.wait();
        assert_eq!(log.trim(), theirs);
    }

    /// The namespace at `path` once `unshare` has made it (not the node's own any more).
    fn wait_for_other_netns(path: &Path) -> String {
        let ours = std::fs::read_link("/proc/self/ns/net").unwrap();
        for _ in 0..100 {
            match std::fs::read_link(path) {
                Ok(theirs) if theirs != ours => return theirs.display().to_string(),
                _ => {}
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("{} never left the node's network namespace", path.display());
    }

    #[test]
    fn overlay_links_etcd_programs() {
        let tmp = tempfile::tempdir().unwrap();
        let bin = tmp.path().join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::write(bin.join("etcd"), b"").unwrap();
        let release = EtcdRelease {
            version: crate::images::Version(3, 4, 23),
            tools: [("etcd".to_string(), bin.join("etcd"))]
                .into_iter()
                .collect::<BTreeMap<_, _>>(),
        };
        if let Some(dir) = etcd_overlay(&tmp.path().join("images"), &release) {
            assert_eq!(
                std::fs::read_link(dir.join("etcd")).unwrap(),
                std::fs::canonicalize(bin.join("etcd")).unwrap()
            );
        }
    }

    /// Needs root (CAP_SYS_ADMIN) for the mount namespace, as the node itself does.
    #[tokio::test]
    async fn process_sees_its_volume_at_mount_path_and_logs_output() {
        let tmp = tempfile::tempdir().unwrap();
        let volume = tmp.path().join("vol");
        std::fs::create_dir_all(&volume).unwrap();
        std::fs::write(volume.join("marker"), b"from-volume").unwrap();
        let target = tmp.path().join("mnt/data");
        let s = spec(
            tmp.path(),
            &[
                "sh",
                "-c",
                "cat \"$0\"/marker; echo \" $GREETING $(hostname)\"",
            ],
            vec![Mount {
                source: volume,
                target: target.display().to_string(),
                read_only: true,
            }],
        );
        let mut s = s;
        s.argv.push(target.display().to_string());
        let log = run_to_end(&s).await;
        let records = std::fs::read(&s.attempt_log).unwrap();
        assert!(
            records.ends_with(b" stdout F from-volume hi m1\n"),
            "{}",
            String::from_utf8_lossy(&records)
        );
        assert_eq!(log, "from-volume hi m1\n");
        assert!(
            !target.join("marker").exists(),
            "mount leaked to the host namespace"
        );
    }
}
