//! Alarms and backend space: an alarm never counts as a lost member, NOSPACE is disarmed
//! only once its cause is gone, CORRUPT never by the operator.

use tokio::time::Instant;

use super::fixtures::{World, assert_idle, assert_idle_saying, running_state};
use super::*;
use crate::report::{Previous, report};

const VERSION: &str = "3.5.21";
const MIB: u64 = 1024 * 1024;

/// A spec of 3 members with an 8 MiB quota, its pods built from the template "t".
fn spec() -> DesiredCluster {
    let mut spec = DesiredCluster::new(3, VERSION);
    spec.quota_backend_bytes = 8 * MIB;
    spec.pod_template = "t".into();
    spec
}

/// Three healthy members built from template "t", each with a backend of `sizes[i]`
/// bytes, and etcd's alarm list `alarms`.
fn members(sizes: [u64; 3], alarms: &[Alarm]) -> World {
    let mut world = World::healthy(Instant::now(), 3, VERSION);
    for i in 1..=3 {
        let name = format!("m{i}");
        world = world.pod(&name, |p| p.pod_template = Some("t".into()));
    }
    world.health(|id, h| {
        h.db_size = Some(sizes[id as usize - 1]);
        h.alarms = alarms.to_vec();
    })
}

fn nospace(member: u64) -> Alarm {
    Alarm {
        member,
        kind: AlarmKind::NoSpace,
    }
}

fn decide_on(world: World) -> (Decision, Observation) {
    let obs = world.build();
    let d = decide(running_state(), &obs, &spec(), &Deadlines::default());
    (d, obs)
}

#[test]
fn members_that_answer_with_nospace_count_toward_quorum_and_the_cluster_says_why_it_refuses_writes()
{
    let (d, _) = decide_on(members([8 * MIB, 8 * MIB, 8 * MIB], &[nospace(1)]));
    assert_eq!(d.state.phase, Phase::Running);
    assert_idle_saying(&d, Reason::NoSpace, "etcd raised NOSPACE for m1");
    assert!(
        d.why
            .message
            .contains("raise the quota (ETCD_QUOTA_BACKEND_BYTES"),
        "{}",
        d.why.message
    );
}

#[test]
fn nospace_is_disarmed_once_every_member_is_below_the_near_quota_mark() {
    let (d, _) = decide_on(members([2 * MIB, 3 * MIB, 6 * MIB], &[nospace(1)]));
    assert_eq!(d.why.reason, Reason::DisarmingNoSpace, "{}", d.why.message);
    assert_eq!(d.actions, [Action::DisarmAlarm { alarm: nospace(1) }]);
}

#[test]
fn nospace_stays_while_one_member_is_at_the_near_quota_mark() {
    // 80% of 8 MiB: at the mark is not below it.
    let at_mark = (8 * MIB * NEAR_QUOTA_PERCENT).div_ceil(100);
    let (d, _) = decide_on(members([2 * MIB, at_mark, 2 * MIB], &[nospace(2)]));
    assert_idle(&d, Reason::NoSpace);
}

#[test]
fn nospace_is_not_disarmed_while_a_member_runs_an_older_pod_template() {
    // A raised quota reaches members by a rolling restart: m3 still runs the old one.
    let world = members([2 * MIB, 2 * MIB, 2 * MIB], &[nospace(3)])
        .pod("m3", |p| p.pod_template = Some("old".into()));
    let (d, _) = decide_on(world);
    assert!(
        !d.actions
            .iter()
            .any(|a| matches!(a, Action::DisarmAlarm { .. })),
        "{:?}",
        d.actions
    );
    assert_ne!(d.why.reason, Reason::QuorumLost, "{}", d.why.message);
}

#[test]
fn corrupt_is_reported_and_never_disarmed_by_the_operator() {
    let corrupt = Alarm {
        member: 2,
        kind: AlarmKind::Corrupt,
    };
    let (d, _) = decide_on(members([MIB, MIB, MIB], &[corrupt, nospace(1)]));
    assert_idle_saying(&d, Reason::Corrupt, "etcd raised CORRUPT for m2");
}

#[test]
fn the_storage_condition_names_the_fullest_member_and_each_member_shows_its_sizes() {
    let spec = spec();
    let condition = |world: World| {
        let obs = world.build();
        let d = decide(running_state(), &obs, &spec, &Deadlines::default());
        let r = report(&d, &obs, &spec, &[], &Previous::default());
        let c = r
            .status
            .conditions
            .iter()
            .find(|c| c.kind == "Storage")
            .cloned();
        (c.expect("a Storage condition"), r.status.details)
    };
    let (healthy, details) = condition(members([MIB, 2 * MIB, MIB], &[]));
    assert!(healthy.status, "{healthy:?}");
    assert_eq!(healthy.reason, "Healthy");
    assert!(
        healthy.message.contains("m2, uses 25%"),
        "{}",
        healthy.message
    );
    assert_eq!(details[1].db_size, Some(2 * MIB));
    assert_eq!(details[1].quota, 8 * MIB);

    let (near, _) = condition(members([MIB, 7 * MIB, MIB], &[]));
    assert!(!near.status);
    assert_eq!(near.reason, "NearQuota");
    assert!(
        near.message.contains("member m2 uses 87%"),
        "{}",
        near.message
    );

    let (full, details) = condition(members([8 * MIB, MIB, MIB], &[nospace(1)]));
    assert_eq!(full.reason, "NoSpace");
    assert_eq!(details[0].alarms, [AlarmKind::NoSpace]);
    assert!(details[1].alarms.is_empty());
}

#[test]
fn a_cluster_whose_members_report_no_size_has_no_storage_condition() {
    let obs = World::healthy(Instant::now(), 3, VERSION).build();
    let d = decide(running_state(), &obs, &spec(), &Deadlines::default());
    let r = report(&d, &obs, &spec(), &[], &Previous::default());
    assert!(r.status.conditions.iter().all(|c| c.kind != "Storage"));
}

#[test]
fn each_change_of_the_storage_condition_raises_one_event_and_a_first_healthy_sight_none() {
    let spec = spec();
    let tick = |world: World, previous: &Previous| {
        let obs = world.build();
        let d = decide(running_state(), &obs, &spec, &Deadlines::default());
        let r = report(&d, &obs, &spec, &[], previous);
        let storage: Vec<_> = r
            .events
            .iter()
            .filter(|e| e.reason.starts_with("Storage"))
            .cloned()
            .collect();
        (previous.after(&d, &r.status), storage)
    };
    let (seen, events) = tick(members([MIB, MIB, MIB], &[]), &Previous::default());
    assert!(events.is_empty(), "first seen healthy: {events:?}");

    let (near, events) = tick(members([MIB, 7 * MIB, MIB], &[]), &seen);
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].reason, "StorageNearQuota");
    assert_eq!(events[0].kind, crate::event::EventType::Warning);
    assert!(
        events[0].note.contains("member m2 uses 87%"),
        "{}",
        events[0].note
    );

    let (still, events) = tick(members([MIB, 7 * MIB, MIB], &[]), &near);
    assert!(events.is_empty(), "no change, no Event: {events:?}");

    let (_, events) = tick(members([MIB, MIB, MIB], &[]), &still);
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].reason, "StorageHealthy");
    assert_eq!(events[0].kind, crate::event::EventType::Normal);
}

#[test]
fn a_fresh_actor_compares_the_storage_condition_with_the_one_the_status_records() {
    let spec = spec();
    let mut obs = members([8 * MIB, MIB, MIB], &[nospace(1)]).build();
    obs.recorded.storage = Some("NoSpace".into());
    let d = decide(running_state(), &obs, &spec, &Deadlines::default());
    let r = report(&d, &obs, &spec, &[], &Previous::default());
    assert!(
        r.events.iter().all(|e| !e.reason.starts_with("Storage")),
        "{:?}",
        r.events
    );
    obs.recorded.storage = Some("Healthy".into());
    let r = report(&d, &obs, &spec, &[], &Previous::default());
    assert!(
        r.events.iter().any(|e| e.reason == "StorageNoSpace"),
        "{:?}",
        r.events
    );
}

#[test]
fn a_corrupt_cluster_is_not_scaled_or_healed_only_reported() {
    let corrupt = Alarm {
        member: 2,
        kind: AlarmKind::Corrupt,
    };
    let mut bigger = spec();
    bigger.size = 5;
    let obs = members([MIB, MIB, MIB], &[corrupt]).build();
    let d = decide(running_state(), &obs, &bigger, &Deadlines::default());
    assert_idle_saying(&d, Reason::Corrupt, "etcd raised CORRUPT for m2");
    let obs = members([MIB, MIB, MIB], &[corrupt]).pod_failed(3).build();
    let d = decide(running_state(), &obs, &spec(), &Deadlines::default());
    assert_eq!(d.why.reason, Reason::Corrupt, "{}", d.why.message);
    assert!(
        d.actions.iter().all(|a| matches!(
            a,
            Action::LabelVoter { .. } | Action::SetDisruptionBudget { .. }
        )),
        "a dead member is not replaced while CORRUPT holds: {:?}",
        d.actions
    );
}

#[test]
fn members_whose_hashes_differ_are_named_and_nothing_changes_until_they_agree() {
    let hashes = |h3: u32| HashCheck {
        revision: 40,
        hashes: [(1, 7), (2, 7), (3, h3)]
            .into_iter()
            .map(|(id, hash)| {
                (
                    id,
                    KvHash {
                        hash,
                        compact_revision: 30,
                    },
                )
            })
            .collect(),
    };
    let mut bigger = spec();
    bigger.size = 5;
    let mut obs = members([MIB, MIB, MIB], &[]).build();
    obs.hashes = Some(hashes(9));
    let d = decide(running_state(), &obs, &bigger, &Deadlines::default());
    assert_idle_saying(&d, Reason::Corrupt, "hashes at revision 40 differ: m3");
    assert!(d.state.divergence.is_some());
    let report = report(&d, &obs, &bigger, &[], &Previous::default());
    let storage = report
        .status
        .conditions
        .iter()
        .find(|c| c.kind == "Storage")
        .expect("a Storage condition");
    assert_eq!(storage.reason, "Corrupt", "{}", storage.message);

    let mut later = members([MIB, MIB, MIB], &[]).build();
    later.hashes = None;
    let d = decide(d.state, &later, &bigger, &Deadlines::default());
    assert_eq!(
        d.why.reason,
        Reason::Corrupt,
        "kept until a comparison agrees"
    );
    later.hashes = Some(hashes(7));
    let d = decide(d.state, &later, &bigger, &Deadlines::default());
    assert_ne!(d.why.reason, Reason::Corrupt, "{}", d.why.message);
    assert!(d.state.divergence.is_none());
}
