//! A Kubernetes Event as the operator words it, before the adapter writes it: a leaf the
//! report (which words Events) and the ports (which write them) both use.

use serde::Serialize;

/// Severity of a Kubernetes Event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum EventType {
    /// Something happened as intended.
    Normal,
    /// Something failed or was refused.
    Warning,
}

/// A Kubernetes Event about the EtcdCluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EventRecord {
    /// Normal or Warning.
    pub kind: EventType,
    /// CamelCase reason.
    pub reason: String,
    /// What the operator did: `AddMember`, `RemoveMember`, ...
    pub action: String,
    /// For people.
    pub note: String,
    /// The member (pod) the event is about, if one: Events about different members are
    /// kept apart rather than folded into one series.
    pub member: Option<String>,
}
