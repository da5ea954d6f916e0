//! Starting one container of a pod: prepared from its spec ([`crate::prepare`]), its
//! process started ([`crate::launch`], the one place that knows how), recorded running,
//! watched and probed; or, when it cannot start, left waiting with the reason a kubelet
//! gives.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Container, Pod};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::probing::{self, Target};
use super::slot::{Kind, Proc, Slot};
use crate::ctx::NodeCtx;
use crate::launch::{self, LaunchSpec};
use crate::log::event;
use crate::logcap;
use crate::prepare::{self, NotStartable, Prepared};
use crate::record::RunState;
use crate::restart;
use crate::statedir::PodDir;
use crate::tasks::{Event, spawn_waiter};

/// How long a container waits before retrying a start that failed for a passing reason.
const RETRY: Duration = Duration::from_secs(5);

/// The pod a container starts in.
pub struct PodSite<'a> {
    /// The node.
    pub ctx: &'a NodeCtx,
    /// The pod as last seen.
    pub pod: &'a Pod,
    /// Its state directory.
    pub dir: &'a PodDir,
    /// Its address.
    pub ip: &'a str,
    /// Its network namespace; `None` on the host's network.
    pub netns: Option<&'a std::path::Path>,
    /// `namespace/name`, for the log.
    pub id: &'a str,
    /// Where its processes' events go.
    pub events: &'a mpsc::UnboundedSender<Event>,
}

/// Tries to start a process for the container of `slot`; `generations` numbers the pod's
/// processes. On failure the container is left waiting with the reason a kubelet would
/// give, to be retried after a back-off (or, for an image that cannot be pulled, once the
/// spec names another).
pub async fn start(site: &PodSite<'_>, kind: Kind, slot: &mut Slot, generations: &mut u64) {
    let name = slot.record.name.clone();
    let Some(container) = kind.spec_container(site.pod.spec.as_ref(), &name) else {
        return;
    };
    let now = Instant::now();
    slot.record.image = container.image.clone().unwrap_or_default();
    let Some(Prepared { program, spec }) = prepared(site, &container, slot, now).await else {
        return;
    };
    let spawned = launch::spawn(&site.ctx.tools, &spec).and_then(|mut child| {
        let logs = site.ctx.logs.clone();
        match logcap::capture(&mut child, &spec.log_path, &spec.attempt_log, logs) {
            Ok(()) => Ok(child),
            Err(e) => {
                let _ = child.start_kill();
                Err(e)
            }
        }
    });
    let child = match spawned {
        Ok(child) => child,
        Err(e) => {
            let delay = restart::backoff(slot.record.restart_count);
            event!("pod {} container {name}: RunContainerError: {e}", site.id);
            slot.record.wait("RunContainerError", Some(e.to_string()));
            slot.retry_at = Some(now + delay);
            return;
        }
    };
    let pid = child.id().map(|p| p as i32).unwrap_or(0);
    let generation = *generations;
    *generations += 1;
    if let Err(e) = site.dir.write_pid(&name, pid) {
        event!(
            "pod {} container {name}: cannot write pid file: {e}",
            site.id
        );
    }
    spawn_waiter(child, pid, generation, site.events.clone());
    slot.record.image_id = program.image_id();
    running(slot, kind, pid, generation);
    if kind == Kind::Main {
        let target = Target {
            container: &container,
            pod_ip: site.ip,
            pid,
            env: &spec.env,
            generation,
            events: site.events,
        };
        probing::arm(slot, &target, site.id);
    }
    started(site.id, slot, &spec);
}

/// The container prepared for launch, or `None` when it cannot start now (then it waits).
async fn prepared(
    site: &PodSite<'_>,
    container: &Container,
    slot: &mut Slot,
    now: Instant,
) -> Option<Prepared> {
    let (id, name) = (site.id, &container.name);
    let attempt = slot.record.restart_count;
    let address = (site.ip, site.netns);
    match prepare::prepare(site.ctx, site.pod, site.dir, address, container, attempt).await {
        Ok(prepared) => Some(prepared),
        Err(NotStartable::Image(msg)) => {
            event!("pod {id} container {name}: ErrImagePull: {msg}");
            slot.record.wait("ErrImagePull", Some(msg));
            slot.blocked_image = Some(slot.record.image.clone());
            None
        }
        Err(NotStartable::Config { reason, message }) => {
            event!("pod {id} container {name}: {reason}: {message}");
            slot.record.wait(reason, Some(message));
            slot.retry_at = Some(now + RETRY);
            None
        }
    }
}

/// Records the new process; a regular container is ready unless a readiness probe says
/// otherwise.
fn running(slot: &mut Slot, kind: Kind, pid: i32, generation: u64) {
    slot.retry_at = None;
    slot.record.state = RunState::Running {
        started_at: Timestamp::now(),
        container_id: format!("process://{pid}"),
    };
    slot.record.ready = kind == Kind::Main;
    slot.proc = Some(Proc {
        pid,
        generation,
        image: slot.record.image.clone(),
        started_at: Timestamp::now(),
    });
}

fn started(id: &str, slot: &Slot, spec: &LaunchSpec) {
    let Some(proc) = &slot.proc else {
        return;
    };
    event!(
        "pod {id} container {} started: pid {}, image {}, restarts {}, log {}",
        slot.record.name,
        proc.pid,
        proc.image,
        slot.record.restart_count,
        spec.log_path.display()
    );
}
