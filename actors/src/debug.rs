//! The debug view: every actor's current state, and a live stream of state transitions.
//!
//! The operator serves both over HTTP (`/debug/actors` and `/debug/stream`); this module
//! holds them and knows nothing of HTTP.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;
use tokio::sync::broadcast;

/// Capacity of the transition stream; a subscriber that falls further behind skips records.
const STREAM_CAPACITY: usize = 1024;

/// What kind of actor a snapshot describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ActorKind {
    /// The one Supervisor.
    Supervisor,
    /// A Cluster actor.
    Cluster,
}

/// The latest state one actor published.
#[derive(Debug, Clone, Serialize)]
pub struct ActorSnapshot {
    /// Kind of actor.
    pub kind: ActorKind,
    /// `namespace/name` for a Cluster actor, `supervisor` for the Supervisor.
    pub key: String,
    /// When this snapshot was taken, in milliseconds since the Unix epoch.
    pub updated_unix_ms: u128,
    /// The actor's own description of its state.
    pub state: serde_json::Value,
}

/// One state transition, as streamed to `/debug/stream` subscribers.
#[derive(Debug, Clone, Serialize)]
pub struct TransitionRecord {
    /// Milliseconds since the Unix epoch.
    pub time_unix_ms: u128,
    /// Kind of actor.
    pub kind: ActorKind,
    /// Actor key.
    pub key: String,
    /// Phase before.
    pub from: String,
    /// Phase after.
    pub to: String,
    /// Reason of the decision.
    pub reason: String,
    /// Message of the decision.
    pub message: String,
}

/// Shared, cloneable handle to the debug view.
#[derive(Clone)]
pub struct DebugHub {
    actors: Arc<Mutex<BTreeMap<(ActorKind, String), ActorSnapshot>>>,
    stream: broadcast::Sender<TransitionRecord>,
    synced: Arc<AtomicBool>,
}

impl Default for DebugHub {
    fn default() -> Self {
        DebugHub {
            actors: Arc::default(),
            stream: broadcast::channel(STREAM_CAPACITY).0,
            synced: Arc::default(),
        }
    }
}

/// Milliseconds since the Unix epoch, now.
pub fn unix_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or_default()
}

impl DebugHub {
    /// Records an actor's current state.
    pub fn set_state(&self, kind: ActorKind, key: &str, state: serde_json::Value) {
        let snapshot = ActorSnapshot {
            kind,
            key: key.to_string(),
            updated_unix_ms: unix_ms(),
            state,
        };
        self.lock().insert((kind, key.to_string()), snapshot);
    }

    /// Forgets an actor that stopped.
    pub fn remove(&self, kind: ActorKind, key: &str) {
        self.lock().remove(&(kind, key.to_string()));
    }

    /// Every actor's latest state, ordered by kind and key.
    pub fn snapshot(&self) -> Vec<ActorSnapshot> {
        self.lock().values().cloned().collect()
    }

    /// Publishes a transition to live subscribers (none listening is fine).
    pub fn publish(&self, record: TransitionRecord) {
        let _ = self.stream.send(record);
    }

    /// Subscribes to transitions from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<TransitionRecord> {
        self.stream.subscribe()
    }

    /// Marks that the first full list of EtcdClusters has been processed.
    pub fn set_synced(&self) {
        self.synced.store(true, Ordering::SeqCst);
    }

    /// Whether the first full list has been processed (readiness).
    pub fn is_synced(&self) -> bool {
        self.synced.load(Ordering::SeqCst)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<(ActorKind, String), ActorSnapshot>> {
        self.actors
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_holds_the_latest_state_per_actor_until_removed() {
        let hub = DebugHub::default();
        hub.set_state(
            ActorKind::Cluster,
            "ns/a",
            serde_json::json!({"phase": "Bootstrapping"}),
        );
        hub.set_state(
            ActorKind::Cluster,
            "ns/a",
            serde_json::json!({"phase": "Running"}),
        );
        hub.set_state(ActorKind::Supervisor, "supervisor", serde_json::json!({}));
        let snap = hub.snapshot();
        assert_eq!(snap.len(), 2);
        assert_eq!(snap[1].state["phase"], "Running");
        hub.remove(ActorKind::Cluster, "ns/a");
        assert_eq!(hub.snapshot().len(), 1);
    }

    #[test]
    fn subscribers_receive_transitions_published_after_they_subscribed() {
        let hub = DebugHub::default();
        let mut rx = hub.subscribe();
        hub.publish(TransitionRecord {
            time_unix_ms: 0,
            kind: ActorKind::Cluster,
            key: "ns/a".into(),
            from: "Bootstrapping".into(),
            to: "Running".into(),
            reason: "Converged".into(),
            message: String::new(),
        });
        assert_eq!(rx.try_recv().unwrap().to, "Running");
    }
}
