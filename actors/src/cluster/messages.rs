//! Messages a Cluster actor handles.

use actix::Message;

use etcd_operator_core::lifecycle::DesiredCluster;

/// Run one observe–decide–act round now. The actor sends this to itself on its interval.
#[derive(Debug, Clone, Copy, Message)]
#[rtype(result = "()")]
pub(crate) struct Tick;

/// The EtcdCluster's spec changed: remember it and tick at once.
#[derive(Debug, Clone, Message)]
#[rtype(result = "()")]
pub struct SpecChanged(pub DesiredCluster);

/// Something the cluster is made of changed (one of its pods): tick at once rather than
/// at the next interval.
#[derive(Debug, Clone, Copy, Message)]
#[rtype(result = "()")]
pub struct Nudge;

/// Stop for good (the EtcdCluster is gone). The Supervisor drops its address right after,
/// so the actor is not restarted.
#[derive(Debug, Clone, Copy, Message)]
#[rtype(result = "()")]
pub struct Retire;

/// Returns the actor's current debug view (used by tests and benchmarks).
#[derive(Debug, Clone, Copy, Message)]
#[rtype(result = "serde_json::Value")]
pub struct Inspect;
