//! Prometheus metrics of the actors. Labels are bounded: action kinds, outcomes and phase
//! names, never cluster names.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Labels of an executed action.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ActionLabels {
    /// [`crate::lifecycle::Action::kind`].
    pub action: &'static str,
    /// `ok` or `error`.
    pub outcome: &'static str,
}

/// Labels of a phase transition.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PhaseLabels {
    /// The phase entered.
    pub phase: &'static str,
}

/// The actors' metrics, registered in one registry.
#[derive(Clone)]
pub struct Metrics {
    /// Ticks completed.
    pub ticks: Counter,
    /// Time one tick takes: observe, decide, act, report.
    pub tick_seconds: Histogram,
    /// Actions executed, by kind and outcome.
    pub actions: Family<ActionLabels, Counter>,
    /// Phase transitions, by phase entered.
    pub transitions: Family<PhaseLabels, Counter>,
    /// Cluster actors alive.
    pub clusters: Gauge,
    /// Cluster actors restarted after a crash.
    pub restarts: Counter,
    /// 1 while this replica leads (holds the leader Lease, or leader election is off).
    pub leader: Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            ticks: Counter::default(),
            tick_seconds: Histogram::new(exponential_buckets(0.001, 2.0, 14)),
            actions: Family::default(),
            transitions: Family::default(),
            clusters: Gauge::default(),
            restarts: Counter::default(),
            leader: Gauge::default(),
        }
    }
}

impl Metrics {
    /// Registers every metric under the `etcd_operator` prefix.
    pub fn register(&self, registry: &mut Registry) {
        let r = registry.sub_registry_with_prefix("etcd_operator");
        r.register("ticks", "Cluster ticks completed", self.ticks.clone());
        r.register(
            "tick_seconds",
            "Duration of one cluster tick",
            self.tick_seconds.clone(),
        );
        r.register(
            "actions",
            "Actions executed by kind and outcome",
            self.actions.clone(),
        );
        r.register(
            "transitions",
            "Lifecycle phase transitions by phase entered",
            self.transitions.clone(),
        );
        r.register("clusters", "Cluster actors alive", self.clusters.clone());
        r.register(
            "cluster_restarts",
            "Cluster actors restarted after a crash",
            self.restarts.clone(),
        );
        r.register(
            "leader",
            "1 while this replica leads (holds the leader Lease), else 0",
            self.leader.clone(),
        );
    }
}

/// The debug view and metrics, shared by every actor.
#[derive(Clone, Default)]
pub struct Telemetry {
    /// Actor states and the transition stream.
    pub hub: crate::debug::DebugHub,
    /// Prometheus metrics.
    pub metrics: Metrics,
}
