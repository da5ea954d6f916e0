//! The node's state directory: one directory per pod (`pods/<ns>_<name>_<uid>/`) holding
//! its volumes, container logs and the pid files that `kill` uses; the persistent volumes
//! the node provisions (`volumes/<pv>/`).

use std::path::{Path, PathBuf};

use nix::sys::signal::Signal;

use crate::signals;

/// The root of the node's state.
#[derive(Clone, Debug)]
pub struct StateDir {
    root: PathBuf,
}

impl StateDir {
    /// The state rooted at `root` (created on demand).
    pub fn new(root: impl Into<PathBuf>) -> StateDir {
        StateDir { root: root.into() }
    }

    /// Where pod directories live.
    pub fn pods(&self) -> PathBuf {
        self.root.join("pods")
    }

    /// Where the node's persistent volumes live, one directory each, named after the
    /// volume; they outlive the pods that mount them.
    pub fn volumes(&self) -> PathBuf {
        self.root.join("volumes")
    }

    /// Where per-image program directories live.
    pub fn images(&self) -> PathBuf {
        self.root.join("images")
    }

    /// The directory of one pod.
    pub fn pod(&self, namespace: &str, name: &str, uid: &str) -> PodDir {
        PodDir {
            path: self.pods().join(format!("{namespace}_{name}_{uid}")),
        }
    }

    /// Every pod directory, with its `(namespace, name, uid)`.
    pub fn all_pods(&self) -> Vec<(PodDir, String, String, String)> {
        let Ok(entries) = std::fs::read_dir(self.pods()) else {
            return Vec::new();
        };
        let mut pods: Vec<_> = entries
            .flatten()
            .filter_map(|e| {
                let file_name = e.file_name().to_string_lossy().into_owned();
                let (ns, name, uid) = parse_pod_dir_name(&file_name)?;
                Some((PodDir { path: e.path() }, ns, name, uid))
            })
            .collect();
        pods.sort_by(|a, b| a.0.path.cmp(&b.0.path));
        pods
    }
}

/// Splits `<ns>_<name>_<uid>` (namespaces and names never contain `_`).
pub fn parse_pod_dir_name(file_name: &str) -> Option<(String, String, String)> {
    let mut parts = file_name.splitn(3, '_');
    let ns = parts.next()?;
    let name = parts.next()?;
    let uid = parts.next()?;
    if ns.is_empty() || name.is_empty() || uid.is_empty() {
        return None;
    }
    Some((ns.to_string(), name.to_string(), uid.to_string()))
}

/// A container's pid file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PidRecord {
    /// The container.
    pub container: String,
    /// Its process.
    pub pid: i32,
    /// When the pid file was written.
    pub written: std::time::SystemTime,
}

/// The state of one pod.
#[derive(Clone, Debug)]
pub struct PodDir {
    path: PathBuf,
}

impl PodDir {
    /// The directory itself.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The host directory backing a volume.
    pub fn volume(&self, name: &str) -> PathBuf {
        self.path.join("volumes").join(name)
    }

    /// The log file of a container (stdout and stderr, appended across restarts).
    pub fn log(&self, container: &str) -> PathBuf {
        self.path.join("logs").join(format!("{container}.log"))
    }

    /// The directory of a container's logs in the kubelet's (CRI) format, one file per
    /// process: `<restartCount>.log`.
    pub fn attempt_logs(&self, container: &str) -> PathBuf {
        self.path.join("logs").join(container)
    }

    /// The directory of a container rooted in its image: its writable layer, the overlay's
    /// work directory, the mount point of its root and its spec.
    pub fn container(&self, container: &str) -> PathBuf {
        self.path.join("containers").join(container)
    }

    /// The pid file of a container's running process.
    pub fn pid_file(&self, container: &str) -> PathBuf {
        self.path.join("pids").join(format!("{container}.pid"))
    }

    /// The pid files present.
    pub fn pids(&self) -> Vec<PidRecord> {
        let Ok(entries) = std::fs::read_dir(self.path.join("pids")) else {
            return Vec::new();
        };
        let mut pids: Vec<_> = entries
            .flatten()
            .filter_map(|e| {
                let file_name = e.file_name().to_string_lossy().into_owned();
                let container = file_name.strip_suffix(".pid")?.to_string();
                let pid = std::fs::read_to_string(e.path())
                    .ok()?
                    .trim()
                    .parse()
                    .ok()?;
                let written = e.metadata().ok()?.modified().ok()?;
                Some(PidRecord {
                    container,
                    pid,
                    written,
                })
            })
            .collect();
        pids.sort_by(|a, b| a.container.cmp(&b.container));
        pids
    }

    /// The recorded processes that still run (not pids reused by other processes).
    pub fn live_processes(&self) -> Vec<PidRecord> {
        self.pids()
            .into_iter()
            .filter(|r| crate::procinfo::is_recorded_process(r.pid, r.written))
            .collect()
    }

    /// Kills the recorded processes that still run (left by an earlier node run), their
    /// process groups first; the records of those it killed.
    pub fn kill_live_processes(&self) -> Vec<PidRecord> {
        let live = self.live_processes();
        for record in &live {
            let _ = signals::send_group(record.pid, Signal::SIGKILL);
            let _ = signals::send(record.pid, Signal::SIGKILL);
        }
        live
    }

    /// Records a container's running pid.
    pub fn write_pid(&self, container: &str, pid: i32) -> std::io::Result<()> {
        let path = self.pid_file(container);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(path, format!("{pid}\n"))
    }

    /// Forgets a container's pid.
    pub fn remove_pid(&self, container: &str) {
        let _ = std::fs::remove_file(self.pid_file(container));
    }

    /// Removes everything of the pod.
    pub fn remove(&self) -> std::io::Result<()> {
        match std::fs::remove_dir_all(&self.path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_dir_name_round_trips() {
        let dir = StateDir::new("/s").pod("ns", "m-1", "abc-def");
        let name = dir
            .path()
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        assert_eq!(
            parse_pod_dir_name(&name),
            Some(("ns".into(), "m-1".into(), "abc-def".into()))
        );
        assert_eq!(parse_pod_dir_name("nope"), None);
    }

    #[test]
    fn only_the_recorded_process_is_live() {
        let tmp = tempfile::tempdir().unwrap();
        let pod = StateDir::new(tmp.path()).pod("ns", "p", "u1");
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        pod.write_pid("c", child.id() as i32).unwrap();
        // A pid file written an hour after this process started: a reused pid.
        pod.write_pid("stale", std::process::id() as i32).unwrap();
        std::fs::File::options()
            .write(true)
            .open(pod.pid_file("stale"))
            .unwrap()
            .set_modified(std::time::SystemTime::now() + std::time::Duration::from_secs(3600))
            .unwrap();
        let live: Vec<String> = pod
            .live_processes()
            .into_iter()
            .map(|r| r.container)
            .collect();
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(live, vec!["c".to_string()]);
    }

    #[test]
    fn pid_files_are_listed_and_removed() {
        let tmp = tempfile::tempdir().unwrap();
        let state = StateDir::new(tmp.path());
        let pod = state.pod("ns", "p", "u1");
        pod.write_pid("etcd", 123).unwrap();
        pod.write_pid("init", 7).unwrap();
        let listed = |pod: &PodDir| -> Vec<(String, i32)> {
            pod.pids()
                .into_iter()
                .map(|r| (r.container, r.pid))
                .collect()
        };
        assert_eq!(listed(&pod), vec![("etcd".into(), 123), ("init".into(), 7)]);
        pod.remove_pid("init");
        assert_eq!(listed(&pod), vec![("etcd".into(), 123)]);
        assert_eq!(state.all_pods().len(), 1);
        pod.remove().unwrap();
        assert!(state.all_pods().is_empty());
    }
}
