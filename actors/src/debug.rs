//! The debug view: every actor's current state, a live stream of state transitions and
//! lifecycle steps, and the recorded [`Trace`] of those steps.
//!
//! The operator serves them over HTTP (`/debug/actors`, `/debug/stream` and
//! `/debug/trace`); this module holds them and knows nothing of HTTP. The stream is bounded: at most a fixed number of
//! subscribers at once, and a subscriber that falls further behind than the stream's
//! capacity is told so and dropped, rather than kept waiting on records it lost.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, broadcast};

use crate::trace::{Step, StepRecord, Trace};

/// Capacity of the transition stream; a subscriber that falls further behind is dropped.
pub(crate) const STREAM_CAPACITY: usize = 1024;
/// Most subscribers of the transition stream at once.
pub(crate) const MAX_SUBSCRIBERS: usize = 16;

/// What kind of actor a snapshot describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ActorKind {
    /// The one Supervisor.
    Supervisor,
    /// A Cluster actor.
    Cluster,
    /// The leader election of this replica (not an actor, shown with them).
    LeaderElection,
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

/// An actor's state as `/debug/actors` shows it, rendered to JSON only when read: the
/// Cluster actors publish theirs after every tick, and building a JSON tree each time cost
/// most of a tick's allocations and kilobytes per actor that nobody read.
pub trait StateView: Send + Sync + std::fmt::Debug {
    /// The state as JSON.
    fn to_json(&self) -> serde_json::Value;
}

impl StateView for serde_json::Value {
    fn to_json(&self) -> serde_json::Value {
        self.clone()
    }
}

/// The latest state one actor published, not rendered yet.
#[derive(Debug, Clone)]
struct Entry {
    updated_unix_ms: u128,
    view: Arc<dyn StateView>,
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

/// One line of the live stream: a transition or a step, told apart by its `record` field
/// (`"transition"` or `"step"`), beside the record's own fields.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "record", rename_all = "snake_case")]
pub enum StreamRecord {
    /// A phase transition.
    Transition(TransitionRecord),
    /// A lifecycle step.
    Step(StepRecord),
}

/// Every actor's latest entry, by kind, then key.
type ActorEntries = BTreeMap<ActorKind, BTreeMap<String, Entry>>;

/// Shared, cloneable handle to the debug view.
#[derive(Clone)]
pub struct DebugHub {
    /// Per kind, by key: an update looks its entry up by `&str` and allocates nothing.
    actors: Arc<Mutex<ActorEntries>>,
    stream: broadcast::Sender<StreamRecord>,
    trace: Trace,
    slots: Arc<Semaphore>,
    max_subscribers: usize,
    synced: Arc<AtomicBool>,
}

impl Default for DebugHub {
    fn default() -> Self {
        DebugHub::with_limits(STREAM_CAPACITY, MAX_SUBSCRIBERS)
    }
}

/// The stream already has as many subscribers as it accepts.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the transition stream already has its maximum of {0} subscribers")]
pub struct TooManySubscribers(pub usize);

/// What a subscriber gets next.
#[derive(Debug, Clone)]
pub enum Received {
    /// The next transition.
    Transition(TransitionRecord),
    /// The next step.
    Step(StepRecord),
    /// The subscriber fell this many records behind and lost them: it is dropped.
    Dropped(u64),
    /// The hub is gone.
    Closed,
}

/// One subscriber of the transition stream; holds one of the hub's subscriber slots until
/// it is dropped.
pub struct Subscription {
    receiver: broadcast::Receiver<StreamRecord>,
    _slot: OwnedSemaphorePermit,
}

impl Subscription {
    /// The next transition or step; after [`Received::Dropped`] or [`Received::Closed`]
    /// the subscription is over and should be dropped.
    pub async fn next(&mut self) -> Received {
        match self.receiver.recv().await {
            Ok(StreamRecord::Transition(record)) => Received::Transition(record),
            Ok(StreamRecord::Step(record)) => Received::Step(record),
            Err(broadcast::error::RecvError::Lagged(n)) => Received::Dropped(n),
            Err(broadcast::error::RecvError::Closed) => Received::Closed,
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
    /// A hub whose stream keeps `stream_capacity` records for slow subscribers and accepts
    /// at most `max_subscribers` of them at once.
    pub fn with_limits(stream_capacity: usize, max_subscribers: usize) -> Self {
        DebugHub {
            actors: Arc::default(),
            stream: broadcast::channel(stream_capacity.max(1)).0,
            slots: Arc::new(Semaphore::new(max_subscribers)),
            max_subscribers,
            synced: Arc::default(),
            trace: Trace::default(),
        }
    }

    /// The recorded steps of every cluster.
    pub fn trace(&self) -> &Trace {
        &self.trace
    }

    /// Records a step of `cluster` at `time_unix_ms` in the trace and publishes it to live
    /// subscribers.
    pub fn step(&self, cluster: &str, step: Step, member: Option<String>, time_unix_ms: u128) {
        let record = self.trace.record(cluster, step, member, time_unix_ms);
        let _ = self.stream.send(StreamRecord::Step(record));
    }

    /// Records an actor's current state.
    pub fn set_state(&self, kind: ActorKind, key: &str, state: serde_json::Value) {
        self.set_view(kind, key, Arc::new(state));
    }

    /// Records an actor's current state, rendered when read.
    pub fn set_view(&self, kind: ActorKind, key: &str, view: Arc<dyn StateView>) {
        let entry = Entry {
            updated_unix_ms: unix_ms(),
            view,
        };
        let mut actors = self.lock();
        let of_kind = actors.entry(kind).or_default();
        match of_kind.get_mut(key) {
            Some(existing) => *existing = entry,
            None => {
                of_kind.insert(key.to_string(), entry);
            }
        }
    }

    /// Forgets an actor that stopped.
    pub fn remove(&self, kind: ActorKind, key: &str) {
        if let Some(of_kind) = self.lock().get_mut(&kind) {
            of_kind.remove(key);
        }
    }

    /// Every actor's latest state, ordered by kind and key.
    pub fn snapshot(&self) -> Vec<ActorSnapshot> {
        let entries: Vec<((ActorKind, String), Entry)> = self
            .lock()
            .iter()
            .flat_map(|(kind, of_kind)| {
                of_kind
                    .iter()
                    .map(|(key, e)| ((*kind, key.clone()), e.clone()))
            })
            .collect();
        entries
            .into_iter()
            .map(|((kind, key), entry)| ActorSnapshot {
                kind,
                key,
                updated_unix_ms: entry.updated_unix_ms,
                state: entry.view.to_json(),
            })
            .collect()
    }

    /// Publishes a transition to live subscribers (none listening is fine).
    pub fn publish(&self, record: TransitionRecord) {
        let _ = self.stream.send(StreamRecord::Transition(record));
    }

    /// Subscribes to transitions from now on, unless the stream has its maximum of
    /// subscribers already.
    pub fn subscribe(&self) -> Result<Subscription, TooManySubscribers> {
        let slot = self
            .slots
            .clone()
            .try_acquire_owned()
            .map_err(|_| TooManySubscribers(self.max_subscribers))?;
        Ok(Subscription {
            receiver: self.stream.subscribe(),
            _slot: slot,
        })
    }

    /// Marks that the first full list of EtcdClusters has been processed.
    pub fn set_synced(&self) {
        self.synced.store(true, Ordering::SeqCst);
    }

    /// Whether the first full list has been processed (readiness).
    pub fn is_synced(&self) -> bool {
        self.synced.load(Ordering::SeqCst)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ActorEntries> {
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

    fn record(to: &str) -> TransitionRecord {
        TransitionRecord {
            time_unix_ms: 0,
            kind: ActorKind::Cluster,
            key: "ns/a".into(),
            from: "Bootstrapping".into(),
            to: to.into(),
            reason: "Converged".into(),
            message: String::new(),
        }
    }

    #[tokio::test]
    async fn subscribers_receive_transitions_published_after_they_subscribed() {
        let hub = DebugHub::default();
        let mut sub = hub.subscribe().unwrap();
        hub.publish(record("Running"));
        assert!(matches!(sub.next().await, Received::Transition(r) if r.to == "Running"));
    }

    #[tokio::test]
    async fn steps_are_traced_and_streamed_apart_from_transitions() {
        let hub = DebugHub::default();
        let mut sub = hub.subscribe().unwrap();
        hub.step("ns/a", Step::SpecSeen, None, 7);
        hub.publish(record("Running"));
        let Received::Step(step) = sub.next().await else {
            panic!("the step first");
        };
        assert_eq!(step.step, Step::SpecSeen);
        assert!(matches!(sub.next().await, Received::Transition(_)));
        assert_eq!(hub.trace().records(Some("ns/a")).len(), 1);
    }

    #[test]
    fn stream_lines_say_which_record_they_are_and_keep_the_transition_fields() {
        let line = serde_json::to_value(StreamRecord::Transition(record("Running"))).unwrap();
        assert_eq!(line["record"], "transition");
        assert_eq!(
            (&line["key"], &line["to"]),
            (&"ns/a".into(), &"Running".into())
        );
        let step = Trace::default().record("ns/a", Step::Ready, None, 1);
        let line = serde_json::to_value(StreamRecord::Step(step)).unwrap();
        assert_eq!(
            (&line["record"], &line["step"]),
            (&"step".into(), &"ready".into())
        );
    }

    #[test]
    fn subscribers_beyond_the_maximum_are_refused_until_one_leaves() {
        let hub = DebugHub::with_limits(8, 2);
        let first = hub.subscribe().unwrap();
        let _second = hub.subscribe().unwrap();
        assert_eq!(hub.subscribe().err(), Some(TooManySubscribers(2)));
        drop(first);
        assert!(hub.subscribe().is_ok());
    }

    #[tokio::test]
    async fn a_subscriber_that_falls_behind_the_stream_capacity_is_dropped() {
        let hub = DebugHub::with_limits(4, 2);
        let mut slow = hub.subscribe().unwrap();
        for i in 0..10 {
            hub.publish(record(&format!("phase-{i}")));
        }
        assert!(matches!(slow.next().await, Received::Dropped(6)));
    }
}
