//! One tick as a self-contained job: observe, decide, act, report. It owns clones of
//! everything it needs, so the actor stays free to take messages while it runs.

use std::sync::Arc;
use std::time::Duration;

use actix::Addr;
use tokio::time::Instant;

use crate::member_client::MemberClient;
use crate::ports::ClusterApi;
use etcd_operator_core::lifecycle::{
    Deadlines, Decision, DesiredCluster, Pace, Phase, State, decide, next_deadline, pace,
};
use etcd_operator_core::report::{Previous, Report, StatusReport, report};
use etcd_operator_core::topology::Topology;

use super::execute::{ActionEnv, execute};
use super::observe::{HealthProbe, observe};
use super::publish::{LastWrite, StatusWrite, write_due};
use super::services_gate::ServicesGate;
use super::steps::Snapshot;
use etcd_operator_core::outcome::ActionOutcome;

/// Inputs of one tick.
pub(crate) struct TickJob {
    pub kube: Arc<dyn ClusterApi>,
    pub members: Addr<MemberClient>,
    pub probe: HealthProbe,
    pub topology: Topology,
    pub spec: Arc<DesiredCluster>,
    pub state: State,
    pub deadlines: Deadlines,
    /// The status written last, and when: to skip writes that change nothing, and to
    /// hold back those that only reword it (`publish`).
    pub last_written: Option<LastWrite>,
    /// How long a status that only rewords the last one waits to be written.
    pub rewording: Duration,
    /// What this actor reported last, to raise a refusal's Event, and a change of the
    /// Storage condition's, once (a fresh actor compares with the object's status).
    pub previous: Previous,
}

/// What a tick did.
#[derive(Debug)]
pub(crate) enum TickOutcome {
    /// Kubernetes could not be read, or the tick ran out of time: nothing was decided.
    Blind { error: String, elapsed: Duration },
    /// A decision was taken and carried out.
    Decided(Box<Decided>),
}

/// How long each stage of a tick took (logged with the tick at debug level).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Stages {
    /// Reading the caches, etcd's member list and every member's status.
    pub observe: Duration,
    /// Deciding and carrying out the actions.
    pub act: Duration,
    /// Raising the Events and writing the status.
    pub report: Duration,
}

/// A tick that decided something.
#[derive(Debug)]
pub(crate) struct Decided {
    pub decision: Decision,
    pub outcomes: Vec<ActionOutcome>,
    pub status: StatusReport,
    pub status_error: Option<String>,
    /// When the status was written, if this tick wrote it (not when it was unchanged,
    /// held back, or its write failed).
    pub written_at: Option<Instant>,
    pub members: usize,
    pub elapsed: Duration,
    /// How long each stage of the tick took.
    pub stages: Stages,
    /// What the tick saw and decided, for the step trace.
    pub sight: Snapshot,
    /// When it observed the world.
    pub observed: Instant,
    /// How closely the cluster needs watching after this tick.
    pub pace: Pace,
    /// The lifecycle's next time-based event, if one is known.
    pub deadline: Option<Instant>,
}

impl TickJob {
    /// Runs the tick to completion: observe → decide → execute → report → publish.
    pub(crate) async fn run(self) -> TickOutcome {
        let started = Instant::now();
        let kube = self.kube.as_ref();
        let obs = match observe(
            kube,
            &self.members,
            &self.probe,
            (&self.topology, self.spec.tls),
            &self.state,
        )
        .await
        {
            Ok(obs) => obs,
            Err(e) => {
                return TickOutcome::Blind {
                    error: e.to_string(),
                    elapsed: started.elapsed(),
                };
            }
        };
        let seen = Instant::now();
        let decision = decide(self.state, &obs, &self.spec, &self.deadlines);
        let pace = pace(&decision, &obs, &self.spec);
        let mut deadline = next_deadline(&decision, &obs, &self.spec, &self.deadlines);
        let env = ActionEnv {
            kube,
            members: &self.members,
            topology: &self.topology,
            tls: self.spec.tls,
            endpoints: obs.endpoints.clone(),
            services: ServicesGate::default(),
        };
        let outcomes = execute(&env, &decision.actions).await;
        let acted = Instant::now();
        let Report { status, events } =
            report(&decision, &obs, &self.spec, &outcomes, &self.previous);
        // Every Event at once (one POST each, created in the order the tick acted), all
        // before the status. An Event that cannot be written must not stop the lifecycle.
        futures::future::join_all(events.iter().map(|event| kube.record_event(event))).await;
        let now = Instant::now();
        let (status_error, written_at) =
            match write_due(self.last_written.as_ref(), &status, now, self.rewording) {
                StatusWrite::Unchanged => (None, None),
                StatusWrite::StepTime(due) => {
                    deadline = Some(deadline.map_or(due, |d| d.min(due)));
                    (None, None)
                }
                StatusWrite::Now => match kube.publish_status(&status).await {
                    Ok(()) => (None, Some(now)),
                    Err(e) => (Some(e.to_string()), None),
                },
            };
        let members = status.size;
        let published = status_error
            .is_none()
            .then_some(status.phase == Phase::Running);
        let sight = Snapshot::of(&obs, &decision.state.phase, published);
        TickOutcome::Decided(Box::new(Decided {
            decision,
            outcomes,
            status,
            status_error,
            written_at,
            members,
            elapsed: started.elapsed(),
            stages: Stages {
                observe: seen - started,
                act: acted - seen,
                report: acted.elapsed(),
            },
            sight,
            observed: obs.now,
            pace,
            deadline,
        }))
    }
}
