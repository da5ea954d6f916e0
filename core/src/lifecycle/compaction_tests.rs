//! History compaction: a converged cluster is compacted as `spec.compaction` says, never
//! past a revision it has, never while it is corrupt, and not at all when etcd does it.

use std::time::Duration;

use tokio::time::Instant;

use super::fixtures::{World, running_state};
use super::*;

const VERSION: &str = "3.5.21";
const HOUR: Duration = Duration::from_secs(3600);

/// Three healthy members at `revision`, seen at `now`.
fn at(now: Instant, revision: i64) -> Observation {
    World::healthy(now, 3, VERSION)
        .health(|_, h| h.revision = Some(revision))
        .build()
}

fn spec(compaction: Compaction) -> DesiredCluster {
    let mut spec = DesiredCluster::new(3, VERSION);
    spec.compaction = compaction;
    spec
}

/// Decides on `obs` from `state`; returns the new state and the compactions asked for.
fn tick(state: State, obs: &Observation, spec: &DesiredCluster) -> (State, Vec<i64>) {
    let d = decide(state, obs, spec, &Deadlines::default());
    let compactions = d
        .actions
        .iter()
        .filter_map(|a| match a {
            Action::Compact { revision } => Some(*revision),
            _ => None,
        })
        .collect();
    (d.state, compactions)
}

#[test]
fn periodic_compaction_compacts_to_the_revision_sampled_one_retention_earlier() {
    let spec = spec(Compaction::default());
    let t0 = Instant::now();
    let (state, first) = tick(running_state(), &at(t0, 100), &spec);
    assert!(first.is_empty(), "the first tick only samples: {first:?}");
    let (state, early) = tick(state, &at(t0 + HOUR / 2, 500), &spec);
    assert!(early.is_empty(), "half a retention is not due: {early:?}");
    let (state, due) = tick(state, &at(t0 + HOUR, 900), &spec);
    assert_eq!(due, [100], "compacts to what was newest an hour ago");
    assert_eq!(state.compaction.compacted, Some(100));
    let (state, after) = tick(state, &at(t0 + HOUR + HOUR / 2, 1000), &spec);
    assert!(after.is_empty(), "the next is a retention later: {after:?}");
    let (_, next) = tick(state, &at(t0 + 2 * HOUR, 1200), &spec);
    assert_eq!(next, [900], "the sample taken at the last compaction");
}

#[test]
fn revision_compaction_keeps_the_newest_revisions_at_most_every_five_minutes() {
    let spec = spec(Compaction::Revision { retention: 1000 });
    let t0 = Instant::now();
    let (state, first) = tick(running_state(), &at(t0, 5000), &spec);
    assert_eq!(first, [4000]);
    let (state, soon) = tick(state, &at(t0 + Duration::from_secs(60), 9000), &spec);
    assert!(soon.is_empty(), "within the interval: {soon:?}");
    let (state, later) = tick(state, &at(t0 + REVISION_COMPACTION_INTERVAL, 9000), &spec);
    assert_eq!(later, [8000]);
    let idle = t0 + 2 * REVISION_COMPACTION_INTERVAL;
    let (state, unchanged) = tick(state, &at(idle, 8500), &spec);
    assert!(unchanged.is_empty(), "nothing new to drop: {unchanged:?}");
    let (_, grown) = tick(state, &at(idle + Duration::from_secs(1), 9200), &spec);
    assert_eq!(grown, [8200], "a look that dropped nothing does not wait");
}

#[test]
fn a_young_cluster_is_not_compacted_below_its_first_revision() {
    let spec = spec(Compaction::Revision { retention: 1000 });
    let (_, none) = tick(running_state(), &at(Instant::now(), 400), &spec);
    assert!(none.is_empty(), "{none:?}");
}

#[test]
fn the_operator_leaves_compaction_to_etcd_when_the_etcd_env_sets_it() {
    let spec = spec(Compaction::ByEtcd);
    let t0 = Instant::now();
    let (state, _) = tick(running_state(), &at(t0, 100), &spec);
    let (state, none) = tick(state, &at(t0 + 3 * HOUR, 900), &spec);
    assert!(none.is_empty(), "{none:?}");
    assert_eq!(state.compaction.sample, None);
}

#[test]
fn a_revision_already_compacted_by_an_earlier_operator_is_not_compacted_again() {
    let spec = spec(Compaction::Revision { retention: 1000 });
    let mut obs = at(Instant::now(), 5000);
    obs.recorded.compacted = Some(4500);
    let (state, none) = tick(running_state(), &obs, &spec);
    assert!(none.is_empty(), "{none:?}");
    assert_eq!(state.compaction.compacted, Some(4500));
}

#[test]
fn a_history_that_went_back_below_the_last_compaction_is_compacted_from_its_own_revisions() {
    let spec = spec(Compaction::Revision { retention: 1000 });
    let mut obs = at(Instant::now(), 3000);
    obs.recorded.compacted = Some(9000);
    let (state, again) = tick(running_state(), &obs, &spec);
    assert_eq!(again, [2000], "recovered from an older backup");
    assert_eq!(state.compaction.compacted, Some(2000));
}

#[test]
fn a_sample_newer_than_the_history_is_dropped_not_compacted_to() {
    let spec = spec(Compaction::default());
    let t0 = Instant::now();
    let (state, _) = tick(running_state(), &at(t0, 9000), &spec);
    let (state, none) = tick(state, &at(t0 + HOUR, 3000), &spec);
    assert!(none.is_empty(), "9000 is a future revision now: {none:?}");
    let (_, due) = tick(state, &at(t0 + 2 * HOUR, 3500), &spec);
    assert_eq!(due, [3000]);
}

#[test]
fn a_corrupt_cluster_is_not_compacted() {
    let spec = spec(Compaction::Revision { retention: 10 });
    let obs = World::healthy(Instant::now(), 3, VERSION)
        .health(|_, h| {
            h.revision = Some(500);
            h.alarms = vec![Alarm {
                member: 2,
                kind: AlarmKind::Corrupt,
            }];
        })
        .build();
    let (_, none) = tick(running_state(), &obs, &spec);
    assert!(none.is_empty(), "{none:?}");
}

#[test]
fn a_cluster_that_is_changing_is_compacted_only_once_it_has_converged() {
    let spec = spec(Compaction::Revision { retention: 10 });
    let obs = World::healthy(Instant::now(), 2, VERSION)
        .health(|_, h| h.revision = Some(500))
        .build();
    let d = decide(running_state(), &obs, &spec, &Deadlines::default());
    assert!(
        !d.actions
            .iter()
            .any(|a| matches!(a, Action::Compact { .. })),
        "{:?}",
        d.actions
    );
}
