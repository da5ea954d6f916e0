//! The `kill` subcommand: signals a pod's running container processes by the pid files the
//! node keeps, so failure tests can crash a member; the node then reports the exit.

use std::path::Path;

use nix::sys::signal::Signal;

use crate::statedir::StateDir;

/// Signals every running container process of pod `namespace/pod`; returns one line per
/// process signalled, or an error when there was none.
pub fn kill_pod(
    state_dir: &Path,
    namespace: &str,
    pod: &str,
    signal: Signal,
) -> Result<Vec<String>, String> {
    let done = signal_pods(state_dir, signal, |ns, name| ns == namespace && name == pod)?;
    if done.is_empty() {
        return Err(format!(
            "no running container process of pod {namespace}/{pod} under {}",
            state_dir.display()
        ));
    }
    Ok(done)
}

/// Signals every running container process of every pod in the state directory (none
/// running is no error: a node may have no pods).
pub fn kill_all(state_dir: &Path, signal: Signal) -> Result<Vec<String>, String> {
    signal_pods(state_dir, signal, |_, _| true)
}

fn signal_pods(
    state_dir: &Path,
    signal: Signal,
    wanted: impl Fn(&str, &str) -> bool,
) -> Result<Vec<String>, String> {
    let state = StateDir::new(state_dir);
    let mut done = Vec::new();
    for (dir, ns, name, uid) in state.all_pods() {
        if !wanted(&ns, &name) {
            continue;
        }
        for record in dir.live_processes() {
            let (container, pid) = (record.container, record.pid);
            match crate::signals::send(pid, signal) {
                Ok(true) => done.push(format!(
                    "sent {} to {ns}/{name} (uid {uid}) container {container} pid {pid}",
                    signal.as_str()
                )),
                Ok(false) => {}
                Err(e) => return Err(format!("signalling pid {pid} of {container}: {e}")),
            }
        }
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_without_processes_is_an_error_naming_it() {
        let tmp = tempfile::tempdir().unwrap();
        let err = kill_pod(tmp.path(), "ns", "m1", Signal::SIGKILL).unwrap_err();
        assert!(err.contains("ns/m1"), "{err}");
    }

    #[test]
    fn running_process_of_the_pod_is_signalled() {
        let tmp = tempfile::tempdir().unwrap();
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let state = StateDir::new(tmp.path());
        state
            .pod("ns", "m1", "u")
            .write_pid("c", child.id() as i32)
            .unwrap();
        state.pod("ns", "other", "u2").write_pid("c", 1).unwrap();
        let lines = kill_pod(tmp.path(), "ns", "m1", Signal::SIGKILL).unwrap();
        assert_eq!(lines.len(), 1, "{lines:?}");
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(child.wait().unwrap().signal(), Some(9));
    }

    #[test]
    fn every_pods_processes_are_signalled_by_kill_all_and_none_is_no_error() {
        let tmp = tempfile::tempdir().unwrap();
        assert_eq!(kill_all(tmp.path(), Signal::SIGKILL).unwrap().len(), 0);
        let state = StateDir::new(tmp.path());
        let mut children = Vec::new();
        for (ns, pod) in [("a", "m1"), ("b", "m2")] {
            let child = std::process::Command::new("sleep")
                .arg("30")
                .spawn()
                .unwrap();
            state
                .pod(ns, pod, "u")
                .write_pid("c", child.id() as i32)
                .unwrap();
            children.push(child);
        }
        let lines = kill_all(tmp.path(), Signal::SIGKILL).unwrap();
        assert_eq!(lines.len(), 2, "{lines:?}");
        use std::os::unix::process::ExitStatusExt;
        for mut child in children {
            assert_eq!(child.wait().unwrap().signal(), Some(9));
        }
    }
}
