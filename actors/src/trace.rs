//! The step trace: when each lifecycle step of each cluster happened, by the operator's own
//! clock, so that the time a cluster takes can be split into named steps.
//!
//! Bounded: each cluster keeps its last [`STEPS_PER_CLUSTER`] steps, and at most
//! [`CLUSTERS`] clusters are kept (the one whose newest step is oldest goes first). The
//! operator serves it as `/debug/trace`; this module knows nothing of HTTP.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};

use serde::Serialize;

/// Steps kept per cluster.
pub const STEPS_PER_CLUSTER: usize = 256;
/// Clusters kept.
pub const CLUSTERS: usize = 64;

/// One lifecycle step, named as the trace and its JSON name it (snake_case, stable).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Step {
    /// The actor got the cluster's spec: the origin of every other step's time.
    SpecSeen,
    /// The seed's pod was created.
    SeedPodCreated,
    /// A joiner's pod was created (for the cluster's first members).
    JoinerPodCreated,
    /// A member's pod was seen in phase Running.
    PodRunning,
    /// A member answered its first status call: its etcd serves.
    MemberServing,
    /// `member add` of a new member succeeded.
    MemberAdded,
    /// A member was seen healthy.
    MemberHealthy,
    /// A learner was promoted to a voting member.
    LearnerPromoted,
    /// The cluster reached phase Running.
    Ready,
    /// A status saying Running was written to the EtcdCluster.
    StatusPublished,
    /// A member's pod that was alive is gone or dead, and the operator did not delete it.
    MemberLost,
    /// A pod was created to replace a lost member.
    ReplacementPodCreated,
    /// The member that replaces a lost one was seen healthy.
    ReplacementHealthy,
    /// A member's etcd container was restarted in place by the kubelet.
    PodRestarted,
}

impl Step {
    /// The step's stable name.
    pub fn as_str(self) -> &'static str {
        match self {
            Step::SpecSeen => "spec_seen",
            Step::SeedPodCreated => "seed_pod_created",
            Step::JoinerPodCreated => "joiner_pod_created",
            Step::PodRunning => "pod_running",
            Step::MemberServing => "member_serving",
            Step::MemberAdded => "member_added",
            Step::MemberHealthy => "member_healthy",
            Step::LearnerPromoted => "learner_promoted",
            Step::Ready => "ready",
            Step::StatusPublished => "status_published",
            Step::MemberLost => "member_lost",
            Step::ReplacementPodCreated => "replacement_pod_created",
            Step::ReplacementHealthy => "replacement_healthy",
            Step::PodRestarted => "pod_restarted",
        }
    }
}

/// One step of one cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StepRecord {
    /// The cluster, `namespace/name`.
    pub cluster: String,
    /// The step.
    pub step: Step,
    /// The member it concerns, if one.
    pub member: Option<String>,
    /// When it happened, in milliseconds since the Unix epoch.
    pub time_unix_ms: u128,
    /// Milliseconds since the cluster's spec was seen (`None`: not seen by this operator).
    pub since_spec_ms: Option<u128>,
}

/// One step's times in a cluster's summary: the first and the last time it happened
/// (e.g. the first and the last member healthy), since the spec was seen.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StepSummary {
    /// The step.
    pub step: Step,
    /// How many times it happened.
    pub count: usize,
    /// Milliseconds from the spec seen to its first time.
    pub first_ms: Option<u128>,
    /// Milliseconds from the spec seen to its last time.
    pub last_ms: Option<u128>,
}

/// The steps of one cluster.
#[derive(Debug, Default)]
struct ClusterTrace {
    spec_seen_ms: Option<u128>,
    steps: VecDeque<StepRecord>,
    /// Order of the newest step, for evicting the stalest cluster.
    touched: u64,
}

#[derive(Debug)]
struct Traces {
    clusters: BTreeMap<String, ClusterTrace>,
    steps_per_cluster: usize,
    max_clusters: usize,
    clock: u64,
}

/// Shared, cloneable, bounded recorder of every cluster's steps.
#[derive(Debug, Clone)]
pub struct Trace {
    inner: Arc<Mutex<Traces>>,
}

impl Default for Trace {
    fn default() -> Self {
        Trace::with_limits(STEPS_PER_CLUSTER, CLUSTERS)
    }
}

impl Trace {
    /// A recorder keeping `steps_per_cluster` steps of at most `max_clusters` clusters.
    pub fn with_limits(steps_per_cluster: usize, max_clusters: usize) -> Self {
        Trace {
            inner: Arc::new(Mutex::new(Traces {
                clusters: BTreeMap::new(),
                steps_per_cluster: steps_per_cluster.max(1),
                max_clusters: max_clusters.max(1),
                clock: 0,
            })),
        }
    }

    /// Records `step` of `cluster` at `time_unix_ms` and returns the record. A
    /// [`Step::SpecSeen`] starts the cluster's trace afresh (a new cluster under the name).
    pub fn record(
        &self,
        cluster: &str,
        step: Step,
        member: Option<String>,
        time_unix_ms: u128,
    ) -> StepRecord {
        let mut traces = self.lock();
        traces.clock += 1;
        let touched = traces.clock;
        let limit = traces.steps_per_cluster;
        if !traces.clusters.contains_key(cluster) {
            let keep = traces.max_clusters - 1;
            traces.evict_beyond(keep);
        }
        let trace = traces.clusters.entry(cluster.to_string()).or_default();
        if step == Step::SpecSeen {
            trace.steps.clear();
            trace.spec_seen_ms = Some(time_unix_ms);
        }
        trace.touched = touched;
        let record = StepRecord {
            cluster: cluster.to_string(),
            step,
            member,
            time_unix_ms,
            since_spec_ms: trace
                .spec_seen_ms
                .map(|seen| time_unix_ms.saturating_sub(seen)),
        };
        if trace.steps.len() == limit {
            trace.steps.pop_front();
        }
        trace.steps.push_back(record.clone());
        record
    }

    /// Every record of `cluster` (`None`: of every cluster), oldest first per cluster.
    pub fn records(&self, cluster: Option<&str>) -> Vec<StepRecord> {
        let traces = self.lock();
        traces
            .clusters
            .iter()
            .filter(|(key, _)| cluster.is_none_or(|c| c == key.as_str()))
            .flat_map(|(_, trace)| trace.steps.iter().cloned())
            .collect()
    }

    /// The clusters traced, by key.
    pub fn clusters(&self) -> Vec<String> {
        self.lock().clusters.keys().cloned().collect()
    }

    /// Each step of `cluster` once, in the order it first happened, with its first and
    /// last time since the spec was seen.
    pub fn summary(&self, cluster: &str) -> Vec<StepSummary> {
        let mut rows: Vec<StepSummary> = Vec::new();
        for record in self.records(Some(cluster)) {
            match rows.iter_mut().find(|row| row.step == record.step) {
                Some(row) => {
                    row.count += 1;
                    row.last_ms = record.since_spec_ms;
                }
                None => rows.push(StepSummary {
                    step: record.step,
                    count: 1,
                    first_ms: record.since_spec_ms,
                    last_ms: record.since_spec_ms,
                }),
            }
        }
        rows
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Traces> {
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Traces {
    /// Drops the stalest clusters until at most `keep` remain.
    fn evict_beyond(&mut self, keep: usize) {
        while self.clusters.len() > keep {
            let stalest = self
                .clusters
                .iter()
                .min_by_key(|(_, trace)| trace.touched)
                .map(|(key, _)| key.clone());
            match stalest {
                Some(key) => self.clusters.remove(&key),
                None => return,
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_are_timed_from_the_spec_seen() {
        let trace = Trace::default();
        trace.record("ns/a", Step::SpecSeen, None, 1_000);
        let healthy = trace.record("ns/a", Step::MemberHealthy, Some("a-1".into()), 1_750);
        assert_eq!(healthy.since_spec_ms, Some(750));
        assert_eq!(trace.records(Some("ns/a")).len(), 2);
    }

    #[test]
    fn a_step_before_any_spec_seen_has_no_time_since_it() {
        let trace = Trace::default();
        let record = trace.record("ns/a", Step::Ready, None, 5);
        assert_eq!(record.since_spec_ms, None);
    }

    #[test]
    fn a_new_spec_seen_starts_the_cluster_trace_afresh() {
        let trace = Trace::default();
        trace.record("ns/a", Step::SpecSeen, None, 0);
        trace.record("ns/a", Step::Ready, None, 10);
        trace.record("ns/a", Step::SpecSeen, None, 100);
        let ready = trace.record("ns/a", Step::Ready, None, 130);
        assert_eq!(ready.since_spec_ms, Some(30));
        assert_eq!(trace.records(Some("ns/a")).len(), 2);
    }

    #[test]
    fn each_cluster_keeps_only_its_newest_steps() {
        let trace = Trace::with_limits(3, 8);
        trace.record("ns/a", Step::SpecSeen, None, 0);
        for t in 1..=5 {
            trace.record("ns/a", Step::PodRestarted, Some("a-1".into()), t);
        }
        let times: Vec<u128> = trace
            .records(Some("ns/a"))
            .iter()
            .map(|r| r.time_unix_ms)
            .collect();
        assert_eq!(times, vec![3, 4, 5]);
    }

    #[test]
    fn beyond_the_cluster_limit_the_stalest_cluster_is_dropped() {
        let trace = Trace::with_limits(8, 2);
        trace.record("ns/a", Step::SpecSeen, None, 0);
        trace.record("ns/b", Step::SpecSeen, None, 1);
        trace.record("ns/a", Step::Ready, None, 2);
        trace.record("ns/c", Step::SpecSeen, None, 3);
        assert!(trace.records(Some("ns/b")).is_empty());
        assert_eq!(trace.records(Some("ns/a")).len(), 2);
        assert_eq!(trace.records(None).len(), 3);
        assert_eq!(trace.clusters(), ["ns/a", "ns/c"]);
    }

    #[test]
    fn the_summary_gives_each_step_once_with_its_first_and_last_time() {
        let trace = Trace::default();
        trace.record("ns/a", Step::SpecSeen, None, 100);
        for (member, t) in [("a-0", 300), ("a-1", 700), ("a-2", 900)] {
            trace.record("ns/a", Step::MemberHealthy, Some(member.into()), t);
        }
        trace.record("ns/a", Step::Ready, None, 950);
        trace.record("ns/b", Step::SpecSeen, None, 0);
        let summary = trace.summary("ns/a");
        let rows: Vec<(&str, usize, Option<u128>, Option<u128>)> = summary
            .iter()
            .map(|r| (r.step.as_str(), r.count, r.first_ms, r.last_ms))
            .collect();
        assert_eq!(
            rows,
            vec![
                ("spec_seen", 1, Some(0), Some(0)),
                ("member_healthy", 3, Some(200), Some(800)),
                ("ready", 1, Some(850), Some(850)),
            ]
        );
    }

    #[test]
    fn step_names_in_json_are_their_stable_names() {
        for step in [
            Step::SpecSeen,
            Step::ReplacementPodCreated,
            Step::PodRunning,
        ] {
            assert_eq!(
                serde_json::to_value(step).unwrap(),
                serde_json::Value::from(step.as_str())
            );
        }
    }
}
