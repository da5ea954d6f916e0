//! A cluster being deleted (`metadata.deletionTimestamp` set while a finalizer or a
//! foreground deletion keeps the object) gets no new pods, claims or recoveries: the
//! garbage collector is removing what it owns.

use std::time::Duration;

use tokio::time::Instant;

use super::fixtures::{World, assert_idle, running_state};
use super::*;

const VERSION: &str = "3.5.35";

fn deleting(size: u32) -> DesiredCluster {
    let mut spec = DesiredCluster::new(size, VERSION);
    spec.deleting = true;
    spec
}

fn run(state: State, obs: &Observation, spec: &DesiredCluster) -> Decision {
    decide(state, obs, spec, &Deadlines::default())
}

#[test]
fn a_cluster_being_deleted_gets_no_pod_for_a_member_the_garbage_collector_deleted() {
    let obs = World::healthy(Instant::now(), 3, VERSION)
        .bootstrapped()
        .without_pod("m3")
        .build();
    let d = run(running_state(), &obs, &deleting(3));
    assert_idle(&d, Reason::Deleting);
    assert!(
        d.why.message.contains("deletionTimestamp"),
        "{}",
        d.why.message
    );
}

#[test]
fn a_cluster_being_deleted_gets_no_seed_no_services_and_no_scale_up() {
    let now = Instant::now();
    let empty = World::empty(now).without_services().build();
    assert_idle(
        &run(State::default(), &empty, &deleting(3)),
        Reason::Deleting,
    );
    let small = World::healthy(now, 1, VERSION).bootstrapped().build();
    assert_idle(
        &run(running_state(), &small, &deleting(3)),
        Reason::Deleting,
    );
}

#[test]
fn a_cluster_being_deleted_starts_no_recovery_whatever_its_policy() {
    let now = Instant::now();
    let lost = |now| {
        let mut obs = World::empty(now).bootstrapped().build();
        obs.recorded.members = vec!["m1".into(), "m2".into(), "m3".into()];
        obs
    };
    let mut spec = deleting(3);
    spec.recovery = RecoverySpec {
        policy: RecoveryPolicy::FromBackup,
        requested: None,
        quorum_loss: Duration::ZERO,
        ..RecoverySpec::default()
    };
    let first = run(running_state(), &lost(now), &spec);
    let later = run(first.state, &lost(now + Duration::from_secs(120)), &spec);
    assert_idle(&later, Reason::Deleting);
}
