//! The background tasks of a pod's processes: a waiter per process that reports its exit
//! (and takes the rest of its process group down with it), and a loop per probe.

use std::os::unix::process::ExitStatusExt;

use nix::sys::signal::Signal;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::probe::{self, Check, ProbeTiming};
use crate::signals;

/// Something that happened to one of the pod's processes.
#[derive(Debug)]
pub enum Event {
    /// A container process ended.
    Exited {
        /// Which process.
        generation: u64,
        /// Its exit code, if it exited.
        code: Option<i32>,
        /// The signal that killed it, if any.
        signal: Option<i32>,
    },
    /// A readiness or liveness check finished.
    Probe {
        /// Which process was probed.
        generation: u64,
        /// A liveness (not readiness) check.
        liveness: bool,
        /// Whether it passed.
        ok: bool,
    },
}

/// Aborts a task when dropped.
pub struct TaskGuard(JoinHandle<()>);

impl TaskGuard {
    /// Runs `task` until it ends or the guard is dropped.
    pub fn spawn(task: impl std::future::Future<Output = ()> + Send + 'static) -> TaskGuard {
        TaskGuard(tokio::spawn(task))
    }
}

impl Drop for TaskGuard {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Waits for a container process and reports its exit as [`Event::Exited`].
pub fn spawn_waiter(
    mut child: tokio::process::Child,
    pid: i32,
    generation: u64,
    events: mpsc::UnboundedSender<Event>,
) {
    tokio::spawn(async move {
        let status = child.wait().await;
        // Like a container runtime, take the container's other processes down with it.
        let _ = signals::send_group(pid, Signal::SIGKILL);
        let (code, signal) = match status {
            Ok(s) => (s.code(), s.signal()),
            Err(_) => (None, Some(9)),
        };
        let _ = events.send(Event::Exited {
            generation,
            code,
            signal,
        });
    });
}

/// Runs a probe every period (after the initial delay) and reports each result.
pub fn spawn_probe(
    check: Check,
    timing: ProbeTiming,
    pid: i32,
    env: Vec<(String, String)>,
    generation: u64,
    liveness: bool,
    events: mpsc::UnboundedSender<Event>,
) -> TaskGuard {
    TaskGuard(tokio::spawn(async move {
        tokio::time::sleep(timing.initial_delay).await;
        loop {
            let ok = probe::run_check(&check, timing.timeout, pid, &env).await;
            let event = Event::Probe {
                generation,
                liveness,
                ok,
            };
            if events.send(event).is_err() {
                return;
            }
            tokio::time::sleep(timing.period).await;
        }
    }))
}
