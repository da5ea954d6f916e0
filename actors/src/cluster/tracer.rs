//! The Cluster actor's side of the step trace: the spec seen, and the steps each tick
//! shows (found by `steps.rs`), recorded in the debug hub with their times.

use tokio::time::Instant;

use crate::debug::unix_ms;
use crate::trace::Step;

use super::ActionOutcome;
use super::ClusterActor;
use super::steps::{Snapshot, StepHistory, StepTime, steps};

impl ClusterActor {
    /// Starts the cluster's trace: its spec is seen now.
    pub(super) fn trace_spec_seen(&mut self) {
        self.trail = StepHistory::default();
        self.telemetry
            .hub
            .step(&self.key, Step::SpecSeen, None, unix_ms());
    }

    /// Records the steps a tick shows: what it saw at `observed`, and did.
    pub(super) fn trace_tick(
        &mut self,
        sight: Snapshot,
        observed: Instant,
        outcomes: &[ActionOutcome],
    ) {
        let (found, trail) = steps(&self.trail, sight, outcomes);
        self.trail = trail;
        let now = unix_ms();
        let observed_ms = now.saturating_sub(observed.elapsed().as_millis());
        for f in found {
            let at = match f.at {
                StepTime::Observed => observed_ms,
                StepTime::Acted => now,
            };
            self.telemetry.hub.step(&self.key, f.step, f.member, at);
        }
    }
}
