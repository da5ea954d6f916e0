//! Probing a container: its readiness and liveness probes armed for each new process, and
//! what a result does to the container (ready, unready, or stopped for a restart).

use std::time::Duration;

use k8s_openapi::api::core::v1::Container;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::slot::{Probing, Slot};
use crate::log::event;
use crate::probe::{self, ProbeTiming, ProbeTracker};
use crate::tasks::{Event, spawn_probe};

/// The process the probes check.
pub struct Target<'a> {
    /// The container's spec (its probes and named ports).
    pub container: &'a Container,
    /// The pod's address (the default probe host).
    pub pod_ip: &'a str,
    /// The process (exec probes run in its mount, UTS and network namespaces).
    pub pid: i32,
    /// The container's environment (for exec probes).
    pub env: &'a [(String, String)],
    /// The process's generation, carried by the results.
    pub generation: u64,
    /// Where results go.
    pub events: &'a mpsc::UnboundedSender<Event>,
}

/// Starts the readiness and liveness probes of a new process; with a readiness probe the
/// container starts unready. A probe the node cannot run is logged (`id` names the pod)
/// and ignored.
pub fn arm(slot: &mut Slot, target: &Target<'_>, id: &str) {
    let container = target.container;
    for (liveness, spec) in [
        (false, &container.readiness_probe),
        (true, &container.liveness_probe),
    ] {
        let Some(spec) = spec else {
            continue;
        };
        let check = match probe::check_of(spec, container, target.pod_ip) {
            Ok(check) => check,
            Err(msg) => {
                let what = if liveness { "liveness" } else { "readiness" };
                event!(
                    "pod {id} container {}: {what} probe ignored: {msg}",
                    container.name
                );
                continue;
            }
        };
        let timing = ProbeTiming::of(spec);
        let task = spawn_probe(
            check,
            timing,
            target.pid,
            target.env.to_vec(),
            target.generation,
            liveness,
            target.events.clone(),
        );
        if liveness {
            let tracker = ProbeTracker::passing(&timing);
            slot.liveness = Some(Probing {
                _task: task,
                tracker,
            });
        } else {
            let tracker = ProbeTracker::new(&timing);
            slot.record.ready = false;
            slot.readiness = Some(Probing {
                _task: task,
                tracker,
            });
        }
    }
}

/// What a probe result changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The liveness probe failed: its process is to get SIGTERM (the container is already
    /// unready and due for SIGKILL after the grace period).
    Unhealthy {
        /// The process.
        pid: i32,
    },
    /// The readiness probe turned the container ready or unready.
    Ready(bool),
}

/// Counts a probe result of the container's current process; `grace` is the time between
/// SIGTERM and SIGKILL. `None` when nothing changed.
pub fn probed(
    slot: &mut Slot,
    liveness: bool,
    ok: bool,
    grace: Duration,
    now: Instant,
) -> Option<Verdict> {
    if liveness {
        let probing = slot.liveness.as_mut()?;
        if probing.tracker.record(ok) {
            return None;
        }
        let pid = slot.proc.as_ref()?.pid;
        slot.terminating(now + grace);
        return Some(Verdict::Unhealthy { pid });
    }
    let probing = slot.readiness.as_mut()?;
    let ready = probing.tracker.record(ok);
    if ready == slot.record.ready {
        return None;
    }
    slot.record.ready = ready;
    Some(Verdict::Ready(ready))
}
