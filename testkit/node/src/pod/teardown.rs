//! Stopping a pod's processes and removing a deleted pod: SIGTERM, SIGKILL to the process
//! groups once the grace period ran out; then (its network namespace removed by the
//! worker) the pod object deleted (grace 0, uid precondition) and its state directory
//! removed.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, Preconditions};
use kube::{Api, Client};
use nix::sys::signal::Signal;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::lifecycle::Containers;
use super::slot::StopWhy;
use crate::ctx::NodeCtx;
use crate::log::event;
use crate::signals;
use crate::statedir::PodDir;

/// How long processes may take to go away after SIGKILL before the node gives up on them.
const AFTER_KILL: Duration = Duration::from_secs(10);

/// Sends SIGTERM to every running process and stops all probes; the number of processes.
pub fn terminate_all(containers: &mut Containers) -> usize {
    let mut running = 0;
    for slot in containers.all_mut() {
        slot.stop_probes();
        if let Some(proc) = &slot.proc {
            slot.stopping = Some(StopWhy::Pod);
            let _ = signals::send(proc.pid, Signal::SIGTERM);
            running += 1;
        }
    }
    running
}

/// Sends SIGKILL to the process group of every running process.
pub fn kill_all(containers: &Containers) {
    for slot in containers.all() {
        if let Some(proc) = &slot.proc {
            let _ = signals::send_group(proc.pid, Signal::SIGKILL);
        }
    }
}

/// What to do next while processes stop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopAction {
    /// The grace period ran out: SIGKILL the process groups.
    Kill,
    /// They did not exit even after SIGKILL: stop waiting for them.
    GiveUp,
}

/// The timers of a stop: the grace period (cut short to the node's shutdown grace when the
/// node shuts down meanwhile), then a last wait after SIGKILL.
pub struct StopClock {
    deadline: Instant,
    shutdown_grace: Duration,
    give_up: Option<Instant>,
}

impl StopClock {
    /// A stop that began now with `grace` until SIGKILL.
    pub fn new(grace: Duration, shutdown_grace: Duration) -> StopClock {
        StopClock {
            deadline: Instant::now() + grace,
            shutdown_grace,
            give_up: None,
        }
    }

    /// Waits until there is something to do. Cancel-safe: the clock keeps its state.
    pub async fn next(&mut self, shutdown: &CancellationToken) -> StopAction {
        loop {
            let killed = self.give_up.is_some();
            let shorten = self.deadline > Instant::now() + self.shutdown_grace;
            tokio::select! {
                _ = tokio::time::sleep_until(self.deadline), if !killed => {
                    self.give_up = Some(Instant::now() + AFTER_KILL);
                    return StopAction::Kill;
                }
                _ = shutdown.cancelled(), if shorten => {
                    self.deadline = Instant::now() + self.shutdown_grace;
                }
                _ = tokio::time::sleep_until(self.give_up.unwrap_or(self.deadline)), if killed => {
                    return StopAction::GiveUp;
                }
            }
        }
    }
}

/// Deletes the pod object with grace 0, only if it is still the pod with `uid`.
pub async fn delete_pod(client: &Client, pod: &Pod, id: &str) {
    let meta = &pod.metadata;
    let api: Api<Pod> = Api::namespaced(
        client.clone(),
        meta.namespace.as_deref().unwrap_or_default(),
    );
    let dp = DeleteParams {
        grace_period_seconds: Some(0),
        preconditions: Some(Preconditions {
            uid: Some(meta.uid.clone().unwrap_or_default()),
            resource_version: None,
        }),
        ..Default::default()
    };
    match api
        .delete(meta.name.as_deref().unwrap_or_default(), &dp)
        .await
    {
        Ok(_) => event!("pod {id} deleted"),
        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {
            event!("pod {id} already gone")
        }
        Err(e) => event!("pod {id}: delete failed: {e}"),
    }
}

/// Removes the pod's state directory and stops refreshing its tokens.
pub fn remove_state(ctx: &NodeCtx, dir: &PodDir, uid: &str, id: &str) {
    if let Err(e) = dir.remove() {
        event!("pod {id}: cannot remove {}: {e}", dir.path().display());
    }
    ctx.forget_tokens(uid);
}
