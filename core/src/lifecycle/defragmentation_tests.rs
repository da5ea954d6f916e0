//! Defragmentation by rule: one member a tick, followers first, the leader after handing
//! leadership over, only on a healthy converged cluster, never twice in a row.

use std::time::Duration;

use tokio::time::Instant;

use super::fixtures::{World, running_state};
use super::*;

const VERSION: &str = "3.5.21";
const MIB: u64 = 1024 * 1024;

/// Three healthy members led by m1, member `i` with a backend of `sizes[i].0` bytes of
/// which `sizes[i].1` are in use, seen at `now`.
fn members(now: Instant, sizes: [(u64, u64); 3]) -> World {
    World::healthy(now, 3, VERSION).health(|id, h| {
        let (size, in_use) = sizes[id as usize - 1];
        h.db_size = Some(size);
        h.db_size_in_use = Some(in_use);
        h.raft_index = Some(100);
    })
}

fn spec() -> DesiredCluster {
    let mut spec = DesiredCluster::new(3, VERSION);
    spec.quota_backend_bytes = 1024 * MIB;
    spec
}

fn health(size: u64, in_use: u64) -> MemberHealth {
    let mut h = MemberHealth::healthy(VERSION);
    h.db_size = Some(size);
    h.db_size_in_use = Some(in_use);
    h
}

fn decide_on(state: State, world: World, spec: &DesiredCluster) -> Decision {
    decide(state, &world.build(), spec, &Deadlines::default())
}

#[test]
fn a_member_is_due_when_much_would_be_freed_or_it_is_near_its_quota_and_enough_would_be() {
    let rule = DefragRule::default();
    let quota = 1000 * MIB;
    assert!(
        is_due(&health(300 * MIB, 50 * MIB), quota, &rule),
        "250 MiB freeable"
    );
    assert!(
        !is_due(&health(300 * MIB, 150 * MIB), quota, &rule),
        "150 MiB"
    );
    assert!(
        is_due(&health(850 * MIB, 700 * MIB), quota, &rule),
        "near, 17% freeable"
    );
    assert!(
        !is_due(&health(850 * MIB, 800 * MIB), quota, &rule),
        "near, but only 6% would be freed: live data is not rewritten over and over"
    );
    let mut unknown = health(900 * MIB, 0);
    unknown.db_size_in_use = None;
    assert!(!is_due(&unknown, quota, &rule), "no size in use reported");
}

#[test]
fn a_due_follower_is_defragmented_before_the_leader() {
    let world = members(
        Instant::now(),
        [
            (500 * MIB, 10 * MIB),
            (10 * MIB, 9 * MIB),
            (500 * MIB, 10 * MIB),
        ],
    );
    let d = decide_on(running_state(), world, &spec());
    assert_eq!(d.why.reason, Reason::Defragmenting, "{}", d.why.message);
    assert_eq!(
        d.actions,
        [Action::Defragment {
            name: "m3".into(),
            id: 3,
            db_size: 500 * MIB
        }]
    );
    assert_eq!(d.state.phase, Phase::Running);
    assert!(d.state.defragmented.contains_key(&3));
}

#[test]
fn a_due_leader_hands_leadership_over_first() {
    let world = members(
        Instant::now(),
        [
            (500 * MIB, 10 * MIB),
            (10 * MIB, 9 * MIB),
            (10 * MIB, 9 * MIB),
        ],
    );
    let d = decide_on(running_state(), world, &spec());
    assert_eq!(d.why.reason, Reason::MovingLeader, "{}", d.why.message);
    assert!(
        matches!(&d.actions[..], [Action::MoveLeader { from, .. }] if from == "m1"),
        "{:?}",
        d.actions
    );
}

#[test]
fn the_only_member_is_defragmented_although_it_leads() {
    let world = World::healthy(Instant::now(), 1, VERSION).health(|_, h| {
        h.db_size = Some(500 * MIB);
        h.db_size_in_use = Some(MIB);
    });
    let mut spec = spec();
    spec.size = 1;
    let d = decide_on(running_state(), world, &spec);
    assert!(
        matches!(&d.actions[..], [Action::Defragment { name, .. }] if name == "m1"),
        "{:?}",
        d.actions
    );
}

#[test]
fn a_member_just_defragmented_is_not_defragmented_again_within_the_interval() {
    let now = Instant::now();
    let sizes = [
        (10 * MIB, 9 * MIB),
        (500 * MIB, 10 * MIB),
        (10 * MIB, 9 * MIB),
    ];
    let mut state = running_state();
    state.defragmented.insert(2, now);
    let soon = now + Duration::from_secs(60);
    let d = decide_on(state.clone(), members(soon, sizes), &spec());
    assert_eq!(d.why.reason, Reason::Converged, "{}", d.why.message);
    let later = now + DEFRAG_MIN_INTERVAL;
    let d = decide_on(state, members(later, sizes), &spec());
    assert_eq!(d.why.reason, Reason::Defragmenting, "{}", d.why.message);
}

#[test]
fn nothing_is_defragmented_while_a_member_is_unhealthy_or_its_pod_not_ready() {
    let sizes = [
        (10 * MIB, 9 * MIB),
        (500 * MIB, 10 * MIB),
        (10 * MIB, 9 * MIB),
    ];
    let world = members(Instant::now(), sizes).not_ready(3);
    let d = decide_on(running_state(), world, &spec());
    assert!(
        !d.actions
            .iter()
            .any(|a| matches!(a, Action::Defragment { .. })),
        "{:?}",
        d.actions
    );
}

#[test]
fn nothing_is_defragmented_while_the_cluster_changes_or_when_turned_off() {
    let sizes = [
        (10 * MIB, 9 * MIB),
        (500 * MIB, 10 * MIB),
        (10 * MIB, 9 * MIB),
    ];
    let mut bigger = spec();
    bigger.size = 5;
    let d = decide_on(running_state(), members(Instant::now(), sizes), &bigger);
    assert_ne!(d.why.reason, Reason::Defragmenting, "{}", d.why.message);
    let mut off = spec();
    off.defragmentation = Defragmentation::Off;
    let d = decide_on(running_state(), members(Instant::now(), sizes), &off);
    assert_eq!(d.why.reason, Reason::Converged, "{}", d.why.message);
}

#[test]
fn a_full_member_under_nospace_is_compacted_and_defragmented_before_the_alarm_is_disarmed() {
    let quota = 100 * MIB;
    let mut spec = spec();
    spec.quota_backend_bytes = quota;
    spec.compaction = Compaction::Revision { retention: 100 };
    let alarm = Alarm {
        member: 2,
        kind: AlarmKind::NoSpace,
    };
    let mut state = running_state();
    state.compaction.sample = Some(RevisionSample {
        revision: 100,
        at: Instant::now(),
    });
    let world = members(
        Instant::now(),
        [
            (60 * MIB, 50 * MIB),
            (100 * MIB, 40 * MIB),
            (60 * MIB, 50 * MIB),
        ],
    )
    .health(|_, h| {
        h.alarms = vec![alarm];
        h.revision = Some(5000);
    });
    let d = decide_on(state, world, &spec);
    assert_eq!(d.why.reason, Reason::Defragmenting, "{}", d.why.message);
    assert_eq!(
        d.actions,
        [
            Action::Compact { revision: 4900 },
            Action::Defragment {
                name: "m2".into(),
                id: 2,
                db_size: 100 * MIB
            }
        ],
        "compacted at once under NOSPACE, then the full member defragmented"
    );
}
