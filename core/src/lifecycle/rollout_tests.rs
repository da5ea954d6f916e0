//! Rolling restarts onto a changed pod template, and crash loops fixed by the spec.

use std::time::Duration;

use tokio::time::Instant;

use super::fixtures::{World, assert_idle, running_state, unsettled_deadlines};
use super::*;

const VERSION: &str = "3.5.21";

/// A spec of `size` members whose pod template is "new".
fn new_template(size: u32) -> DesiredCluster {
    let mut spec = DesiredCluster::new(size, VERSION);
    spec.pod_template = "new".into();
    spec
}

/// Members `names` run pods built from the template `template`.
fn built_from(mut world: World, names: &[&str], template: &str) -> World {
    for name in names {
        let t = template.to_string();
        world = world.pod(name, move |p| p.pod_template = Some(t));
    }
    world
}

fn decide_on(state: State, world: World, size: u32) -> Decision {
    decide(
        state,
        &world.build(),
        &new_template(size),
        &unsettled_deadlines(),
    )
}

fn deletes(d: &Decision, name: &str, reason: Reason) {
    assert_eq!(d.why.reason, reason, "{}", d.why.message);
    assert_eq!(
        d.actions,
        vec![Action::RecreatePod { name: name.into() }],
        "{}",
        d.why.message
    );
}

fn crash_looping(world: World, name: &str) -> World {
    world.pod(name, |p| {
        p.ready = false;
        p.restarts = 4;
        p.crash = Some("exited with code 1 (Error): etcd: unknown flag: --bad".into());
    })
}

#[test]
fn a_changed_pod_template_restarts_followers_one_at_a_time_on_their_volumes_and_the_leader_last() {
    let now = Instant::now();
    let world = built_from(World::healthy(now, 3, VERSION), &["m1", "m2", "m3"], "old");
    let d = decide_on(running_state(), world.on_volumes(), 3);
    deletes(&d, "m2", Reason::RestartingMember);
    assert_eq!(d.state.phase, Phase::Restarting);
    assert!(d.why.message.contains("same member"), "{}", d.why.message);

    let world = built_from(World::healthy(now, 3, VERSION), &["m1"], "old");
    let world = built_from(world, &["m2", "m3"], "new");
    let d = decide_on(d.state, world.clone().on_volumes(), 3);
    assert_eq!(d.why.reason, Reason::MovingLeader, "{}", d.why.message);

    let d = decide_on(d.state, world.led_by(2).on_volumes(), 3);
    deletes(&d, "m1", Reason::RestartingMember);

    let world = built_from(World::healthy(now, 3, VERSION), &["m1", "m2", "m3"], "new");
    let d = decide_on(d.state, world.on_volumes(), 3);
    assert_eq!(d.why.reason, Reason::Converged, "{}", d.why.message);
    assert_eq!(d.state.phase, Phase::Running);
}

#[test]
fn a_restarted_member_is_waited_for_and_comes_back_on_its_volume_while_restarting() {
    let now = Instant::now();
    let restarting = State {
        phase: Phase::Restarting,
        ..running_state()
    };
    let world = built_from(World::healthy(now, 3, VERSION), &["m1", "m3"], "old")
        .on_volumes()
        .unreachable(2)
        .pod("m2", |p| p.terminating = true);
    let d = decide_on(restarting.clone(), world, 3);
    assert!(d.actions.is_empty(), "{:?}", d.actions);
    assert_eq!(d.state.phase, Phase::Restarting);

    let world = built_from(World::healthy(now, 3, VERSION), &["m1", "m3"], "old")
        .on_volumes()
        .unreachable(2)
        .without_pod("m2");
    let d = decide_on(restarting, world, 3);
    assert_eq!(d.state.phase, Phase::Restarting);
    assert!(
        matches!(d.actions.as_slice(), [Action::RestartMember { name, .. }] if name == "m2"),
        "{:?}",
        d.actions
    );
}

#[test]
fn the_next_member_is_restarted_only_once_every_members_pod_is_ready_again() {
    // Seen in the e2e rollout on claims: a restarted member answered etcd's status (healthy)
    // before its pod was Ready, the next member went, and fewer than a quorum were ready.
    let now = Instant::now();
    let world = built_from(World::healthy(now, 3, VERSION), &["m1", "m3"], "old");
    let world = built_from(world, &["m2"], "new").pod("m2", |p| p.ready = false);
    let d = decide_on(running_state(), world.on_volumes(), 3);
    assert!(d.actions.is_empty(), "{:?}", d.actions);
    assert_eq!(d.state.phase, Phase::Restarting, "{}", d.why.message);
    assert!(d.why.message.contains("m2"), "{}", d.why.message);
}

/// m2 runs the new template, m1 and m3 the old; every pod Ready and published.
fn halfway(now: Instant) -> World {
    let world = built_from(World::healthy(now, 3, VERSION), &["m1", "m3"], "old");
    built_from(world, &["m2"], "new").on_volumes()
}

/// The decision on [`halfway`] at `now`, with the default settle time.
fn halfway_at(state: State, now: Instant) -> Decision {
    decide(
        state,
        &halfway(now).build(),
        &new_template(3),
        &Deadlines::default(),
    )
}

/// From `state` at `t0`, nothing is restarted until the settle time has passed, then m3
/// is; the decision that restarts it.
fn waits_the_settle_then_restarts_m3(state: State, t0: Instant) -> Decision {
    let settle = Deadlines::default().restart_settle;
    let first = halfway_at(state, t0);
    assert!(first.actions.is_empty(), "{:?}", first.actions);
    assert_eq!(first.why.reason, Reason::WaitingForHealthyMembers);
    assert_eq!(first.state.phase, Phase::Restarting);
    let early = halfway_at(first.state, t0 + settle - Duration::from_millis(1));
    assert!(early.actions.is_empty(), "{:?}", early.actions);
    let d = halfway_at(early.state, t0 + settle);
    deletes(&d, "m3", Reason::RestartingMember);
    d
}

#[test]
fn the_next_member_goes_only_once_every_pod_has_been_ready_and_published_for_the_settle_time() {
    // Seen in the e2e rollout on claims (etcd logs): a member restarted on a new pod (a
    // new address) was Ready through the leader it dialed, but another member still
    // dialed its old address (the cluster DNS's cache), and when the next member went,
    // the two left could not form a quorum.
    let t0 = Instant::now();
    let settle = Deadlines::default().restart_settle;
    // m2 was restarted by this rollout (the phase says so).
    let restarting = State {
        phase: Phase::Restarting,
        ..running_state()
    };
    let d = waits_the_settle_then_restarts_m3(restarting, t0);
    // The tick after a restart may still see every pod Ready (its cache lags): it waits.
    let d = halfway_at(d.state, t0 + settle + Duration::from_secs(1));
    assert!(d.actions.is_empty(), "{:?}", d.actions);

    let unpublished = halfway(t0).pod("m2", |p| p.published = false).build();
    let d = decide(
        running_state(),
        &unpublished,
        &new_template(3),
        &Deadlines::default(),
    );
    assert!(d.why.message.contains("m2"), "{}", d.why.message);
}

#[test]
fn an_operator_restarted_in_the_middle_of_a_rolling_restart_waits_the_settle_before_its_first_restart()
 {
    // A new leader (or a restarted operator) starts from a fresh state: it cannot know that
    // m2 was restarted a moment ago, and the cluster DNS may still answer m2's name with
    // its old address. Every pod Ready and published counts only from its own first sight.
    waits_the_settle_then_restarts_m3(State::default(), Instant::now());
}

#[test]
fn a_rolling_restart_of_a_cluster_seen_settled_for_the_settle_time_begins_at_once() {
    let t0 = Instant::now();
    let settle = Deadlines::default().restart_settle;
    let world = |now| built_from(World::healthy(now, 3, VERSION), &["m1", "m2", "m3"], "old");
    let mut old_template = new_template(3);
    old_template.pod_template = "old".into();
    let running = decide(
        running_state(),
        &world(t0).on_volumes().build(),
        &old_template,
        &Deadlines::default(),
    );
    assert_eq!(
        running.why.reason,
        Reason::Converged,
        "{}",
        running.why.message
    );
    // The pod template changes once the pods have been seen Ready for the settle time.
    let d = decide(
        running.state,
        &world(t0 + settle).on_volumes().build(),
        &new_template(3),
        &Deadlines::default(),
    );
    deletes(&d, "m2", Reason::RestartingMember);
}

#[test]
fn the_leader_hands_leadership_to_the_member_furthest_along_before_its_own_restart() {
    // Seen in the e2e rollout on claims: the leader's pod went as a leader, and for about
    // two seconds the other members answered "no leader" (fewer than a quorum ready).
    let now = Instant::now();
    let world = built_from(World::healthy(now, 3, VERSION), &["m1"], "old");
    let mut world = built_from(world, &["m2", "m3"], "new");
    for (id, index) in [(1, 90), (2, 80), (3, 85)] {
        world = world.raft_index(id, index);
    }
    let d = decide_on(running_state(), world.on_volumes(), 3);
    assert_eq!(d.why.reason, Reason::MovingLeader, "{}", d.why.message);
    assert!(!d.why.message.contains("  "), "{}", d.why.message);
    assert_eq!(
        d.actions,
        vec![Action::MoveLeader {
            from: "m1".into(),
            to: 3,
            name: "m3".into()
        }]
    );
    assert_eq!(d.state.phase, Phase::Restarting);
}

#[test]
fn no_member_is_restarted_for_a_pod_template_while_another_is_unhealthy() {
    let now = Instant::now();
    let world = built_from(World::healthy(now, 3, VERSION), &["m1", "m2", "m3"], "old")
        .on_volumes()
        .unreachable(3);
    let d = decide_on(running_state(), world, 3);
    assert!(
        !d.actions
            .iter()
            .any(|a| matches!(a, Action::RecreatePod { .. })),
        "{:?}",
        d.actions
    );
    assert_eq!(d.why.reason, Reason::WaitingForHealthyMembers);
}

#[test]
fn emptydir_members_are_replaced_for_a_pod_template_only_while_the_others_keep_a_quorum() {
    let now = Instant::now();
    let names = ["m1", "m2", "m3"];
    let d = decide_on(
        running_state(),
        built_from(World::healthy(now, 3, VERSION), &names, "old"),
        3,
    );
    deletes(&d, "m2", Reason::RestartingMember);
    assert!(d.why.message.contains("replaced"), "{}", d.why.message);

    for size in [1, 2] {
        let world = built_from(
            World::healthy(now, size, VERSION),
            &names[..size as usize],
            "old",
        );
        let d = decide_on(running_state(), world, size as u32);
        assert_idle(&d, Reason::RestartRefused);
        assert_eq!(d.state.phase, Phase::Running);
    }
}

#[test]
fn a_single_member_on_a_volume_is_restarted_onto_a_changed_pod_template() {
    let now = Instant::now();
    let world = built_from(World::healthy(now, 1, VERSION), &["m1"], "old").on_volumes();
    let d = decide_on(running_state(), world, 1);
    deletes(&d, "m1", Reason::RestartingMember);
}

#[test]
fn pods_of_older_operators_without_a_recorded_template_are_not_restarted() {
    let now = Instant::now();
    let d = decide_on(
        running_state(),
        World::healthy(now, 3, VERSION).on_volumes(),
        3,
    );
    assert_eq!(d.why.reason, Reason::Converged, "{}", d.why.message);
    assert!(d.actions.is_empty(), "{:?}", d.actions);
}

#[test]
fn a_crash_looping_member_on_an_older_pod_template_gets_a_pod_from_the_corrected_spec() {
    let now = Instant::now();
    let names = ["m1", "m2", "m3"];
    for on_volumes in [true, false] {
        let mut world = built_from(World::healthy(now, 3, VERSION), &names, "old").unreachable(3);
        if on_volumes {
            world = world.on_volumes();
        }
        let d = decide_on(running_state(), crash_looping(world, "m3"), 3);
        deletes(&d, "m3", Reason::RecreatingCrashLoopingMember);
    }
}

#[test]
fn a_crash_looping_member_on_the_current_pod_template_is_only_reported() {
    let now = Instant::now();
    let world = built_from(World::healthy(now, 3, VERSION), &["m1", "m2", "m3"], "new")
        .on_volumes()
        .unreachable(3);
    let d = decide_on(running_state(), crash_looping(world, "m3"), 3);
    assert_idle(&d, Reason::CrashLooping);
}

#[test]
fn a_lone_crash_looping_member_on_a_volume_gets_a_pod_from_the_corrected_spec_though_nothing_answers()
 {
    let now = Instant::now();
    let world = built_from(World::healthy(now, 1, VERSION), &["m1"], "old")
        .on_volumes()
        .bootstrapped()
        .etcd_down();
    let d = decide_on(running_state(), crash_looping(world, "m1"), 1);
    deletes(&d, "m1", Reason::RecreatingCrashLoopingMember);
}

#[test]
fn an_emptydir_member_crash_looping_on_an_older_template_is_kept_without_a_quorum_of_the_others() {
    let now = Instant::now();
    let world = built_from(World::healthy(now, 2, VERSION), &["m1", "m2"], "old").unreachable(2);
    let d = decide_on(running_state(), crash_looping(world, "m2"), 2);
    assert_idle(&d, Reason::QuorumLost);
}
