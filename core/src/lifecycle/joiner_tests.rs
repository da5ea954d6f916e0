//! Prepared joiners: a new member's pod is made before its `member add`, added once the
//! cluster DNS publishes its address, and deleted (it holds no data) when it will not be.

use tokio::time::Instant;

use super::fixtures::{World, assert_idle, running_state};
use super::orphans::ORPHAN_POD_GRACE;
use super::*;

const VERSION: &str = "3.5.21";

fn spec(size: u32) -> DesiredCluster {
    DesiredCluster::new(size, VERSION)
}

fn run(state: State, obs: &Observation, size: u32) -> Decision {
    decide(state, obs, &spec(size), &Deadlines::default())
}

fn prepare(peers: &[&str]) -> Action {
    Action::PrepareJoiner {
        version: VERSION.parse().unwrap(),
        peers: peers.iter().map(ToString::to_string).collect(),
    }
}

fn add_prepared(name: &str) -> Action {
    Action::AddMember {
        learner: true,
        version: VERSION.parse().unwrap(),
        prepared: Some(name.to_string()),
    }
}

fn delete(name: &str) -> Action {
    Action::DeletePod {
        name: name.to_string(),
    }
}

/// Two decisions on the same world: at `now` (which starts the pods' timers), then once
/// the pods without a member are past their grace time. Returns both.
fn now_and_after_grace(world: impl Fn() -> World, size: u32) -> (Decision, Decision) {
    let first = run(running_state(), &world().build(), size);
    let mut later = world().build();
    later.now += ORPHAN_POD_GRACE;
    let second = run(first.state.clone(), &later, size);
    (first, second)
}

/// A world built anew on each call.
type WorldOf = Box<dyn Fn() -> World>;

fn adds(d: &Decision) -> bool {
    d.actions
        .iter()
        .any(|a| matches!(a, Action::AddMember { .. }))
}

fn deletes(d: &Decision, name: &str) -> bool {
    d.actions.contains(&delete(name))
}

#[test]
fn a_new_members_pod_is_prepared_before_its_member_add() {
    let world = World::healthy(Instant::now(), 2, VERSION).preparing_joiners();
    let d = run(running_state(), &world.build(), 3);
    assert_eq!(d.actions, vec![prepare(&["m1", "m2"])]);
    assert_eq!(d.why.reason, Reason::PreparingJoiner, "{}", d.why.message);
    assert!(matches!(d.state.phase, Phase::Scaling { from: 2, to: 3 }));
}

#[test]
fn without_the_operators_image_a_member_is_added_before_its_pod_as_before() {
    let world = World::healthy(Instant::now(), 2, VERSION);
    let d = run(running_state(), &world.build(), 3);
    assert_eq!(
        d.actions,
        vec![Action::AddMember {
            learner: true,
            version: VERSION.parse().unwrap(),
            prepared: None,
        }]
    );
}

#[test]
fn a_prepared_joiner_is_added_only_once_the_cluster_dns_publishes_its_address() {
    let now = Instant::now();
    let world = |published: bool| {
        World::healthy(now, 2, VERSION)
            .preparing_joiners()
            .prepared("m3", &["m1", "m2"])
            .pod("m3", |p| p.published = published)
    };
    let d = run(running_state(), &world(false).build(), 3);
    assert_idle(&d, Reason::WaitingForMemberAddresses);
    assert!(d.why.message.contains("m3"), "{}", d.why.message);

    let d = run(running_state(), &world(true).build(), 3);
    assert_eq!(d.actions, vec![add_prepared("m3")]);
    assert_eq!(d.why.reason, Reason::AddingMember);
    // Before etcd 3.4 (no learners) it is added as a voting member, still unlabelled: it
    // is labelled a voter only once it has started.
    let old = World::healthy(now, 2, "3.3.27")
        .preparing_joiners()
        .prepared("m3", &["m1", "m2"])
        .pod("m3", |p| p.version = Some("3.3.27".into()));
    let d = decide(
        running_state(),
        &old.build(),
        &DesiredCluster::new(3, "3.3.27"),
        &Deadlines::default(),
    );
    assert!(
        matches!(&d.actions[..], [Action::AddMember { learner: false, prepared: Some(n), .. }] if n == "m3"),
        "{:?}",
        d.actions
    );
}

#[test]
fn no_member_is_added_while_a_members_own_address_is_unpublished_even_with_a_prepared_joiner() {
    let world = World::healthy(Instant::now(), 2, VERSION)
        .preparing_joiners()
        .prepared("m3", &["m1", "m2"])
        .pod("m1", |p| p.published = false);
    let d = run(running_state(), &world.build(), 3);
    assert_idle(&d, Reason::WaitingForMemberAddresses);
    assert!(d.why.message.contains("m1"), "{}", d.why.message);
}

#[test]
fn a_member_added_from_a_prepared_pod_is_waited_for_with_its_pod_kept() {
    let world = || {
        World::healthy(Instant::now(), 2, VERSION)
            .preparing_joiners()
            .unstarted(3, "m3", true)
            .prepared("m3", &["m1", "m2"])
    };
    let (first, after_grace) = now_and_after_grace(world, 3);
    for d in [first, after_grace] {
        assert_idle(&d, Reason::WaitingForJoin);
    }
}

#[test]
fn a_leftover_prepared_joiner_is_added_or_deleted_never_both() {
    let now = Instant::now();
    // An operator that stopped between the two steps finds the joiner it prepared: still
    // wanted, it is added, before and after the grace of pods without a member.
    let wanted = move || {
        World::healthy(now, 2, VERSION)
            .preparing_joiners()
            .prepared("m3", &["m1", "m2"])
    };
    let (first, second) = now_and_after_grace(wanted, 3);
    for d in [&first, &second] {
        assert_eq!(d.actions, vec![add_prepared("m3")]);
    }
    // No longer wanted (the spec lowered to the members there are, built for another
    // membership, or for another version): deleted after the grace, never added, and no
    // other joiner is prepared meanwhile.
    let unwanted: [(&str, WorldOf, u32); 3] = [
        ("size lowered", Box::new(wanted), 2),
        (
            "another membership",
            Box::new(move || {
                World::healthy(now, 2, VERSION)
                    .preparing_joiners()
                    .prepared("m3", &["m1"])
            }),
            3,
        ),
        (
            "another version",
            Box::new(move || {
                World::healthy(now, 2, VERSION)
                    .preparing_joiners()
                    .prepared("m3", &["m1", "m2"])
                    .pod("m3", |p| p.version = Some("3.5.20".into()))
            }),
            3,
        ),
    ];
    for (case, world, size) in unwanted {
        let (first, second) = now_and_after_grace(&world, size);
        for d in [&first, &second] {
            assert!(!adds(d), "{case}: {:?}", d.actions);
            assert!(
                !d.actions
                    .iter()
                    .any(|a| matches!(a, Action::PrepareJoiner { .. })),
                "{case}: {:?}",
                d.actions
            );
        }
        assert!(!deletes(&first, "m3"), "{case}: {:?}", first.actions);
        assert_eq!(second.actions, vec![delete("m3")], "{case}");
        assert_eq!(second.why.reason, Reason::DeletingPreparedJoiner, "{case}");
    }
}

#[test]
fn a_prepared_joiner_whose_etcd_ran_is_no_longer_deleted_as_a_joiner() {
    // Its gate let etcd start: it was a member. If the list no longer shows it, it is a
    // pod without a member like any other (the orphan rule), never a "prepared" one.
    let world = || {
        World::healthy(Instant::now(), 3, VERSION)
            .preparing_joiners()
            .prepared("m4", &["m1"])
            .pod("m4", |p| p.started = true)
    };
    let (_, second) = now_and_after_grace(world, 3);
    assert_eq!(second.why.reason, Reason::DeletingOrphanPod);
}

#[test]
fn two_prepared_joiners_only_the_first_is_added_and_the_other_deleted_after_its_grace() {
    let world = || {
        World::healthy(Instant::now(), 2, VERSION)
            .preparing_joiners()
            .prepared("m4", &["m1", "m2"])
            .prepared("m3", &["m1", "m2"])
    };
    let (first, second) = now_and_after_grace(world, 3);
    assert_eq!(first.actions, vec![add_prepared("m3")]);
    assert_eq!(second.actions, vec![delete("m4")]);
}

#[test]
fn scaling_down_with_a_prepared_joiner_removes_members_never_the_joiner() {
    let world = || {
        World::healthy(Instant::now(), 3, VERSION)
            .preparing_joiners()
            .prepared("m4", &["m1", "m2", "m3"])
    };
    let (first, second) = now_and_after_grace(world, 2);
    // Within the grace the scale-down goes on: one member removed, the joiner untouched.
    assert_eq!(
        first.why.reason,
        Reason::RemovingMember,
        "{}",
        first.why.message
    );
    assert!(!deletes(&first, "m4"), "{:?}", first.actions);
    assert!(!adds(&first));
    // After it the joiner is deleted first (no membership change), alone.
    assert_eq!(second.actions, vec![delete("m4")]);
}

#[test]
fn a_prepared_joiner_counts_toward_no_quorum_vote_readiness_or_budget() {
    let now = Instant::now();
    // Two of three voters down: quorum is lost whatever prepared pods run and answer.
    let world = World::healthy(now, 3, VERSION)
        .unreachable(2)
        .unreachable(3)
        .preparing_joiners()
        .prepared("m4", &["m1", "m2", "m3"])
        .pod("m4", |p| p.ready = true);
    let d = run(running_state(), &world.build(), 4);
    assert_eq!(d.why.reason, Reason::QuorumLost, "{}", d.why.message);
    assert!(d.actions.is_empty(), "{:?}", d.actions);

    // Healthy members and a prepared joiner: it is never labelled a voter, and the
    // disruption budget stays the quorum of the three members.
    let world = World::healthy(now, 3, VERSION)
        .preparing_joiners()
        .prepared("m4", &["m1", "m2", "m3"]);
    let obs = world.build();
    assert_eq!(obs.disruption_budget, Some(2));
    let d = run(running_state(), &obs, 4);
    assert_eq!(d.actions, vec![add_prepared("m4")]);
}

#[test]
fn a_joiner_added_while_the_membership_differed_gets_a_new_pod() {
    // Added to m1..m3 while its pod was built to join m1 alone: its etcd would refuse the
    // cluster it finds. Its etcd never ran, so its pod goes and it is started anew.
    let world = World::healthy(Instant::now(), 3, VERSION)
        .preparing_joiners()
        .unstarted(4, "m4", true)
        .prepared("m4", &["m1"]);
    let d = run(running_state(), &world.build(), 4);
    assert_eq!(d.actions, vec![delete("m4")]);
    assert_eq!(d.why.reason, Reason::ResumingJoin);
    // Without its pod the member's join resumes as it always did.
    let world = World::healthy(Instant::now(), 3, VERSION)
        .preparing_joiners()
        .unstarted(4, "m4", true);
    let d = run(running_state(), &world.build(), 4);
    assert!(
        matches!(&d.actions[..], [Action::ResumeJoin { name, .. }] if name == "m4"),
        "{:?}",
        d.actions
    );
}

#[test]
fn a_prepared_joiner_that_cannot_run_is_not_added_and_says_why() {
    let world = World::healthy(Instant::now(), 2, VERSION)
        .preparing_joiners()
        .prepared("m3", &["m1", "m2"])
        .pod("m3", |p| {
            p.problem = Some("await-membership: ErrImagePull: not found".into())
        });
    let d = run(running_state(), &world.build(), 3);
    assert_idle(&d, Reason::WaitingForJoin);
    assert!(d.why.message.contains("ErrImagePull"), "{}", d.why.message);
}

#[test]
fn a_dead_members_replacement_is_prepared_in_the_tick_that_removes_it() {
    let world = World::healthy(Instant::now(), 3, VERSION)
        .preparing_joiners()
        .pod_gone(2);
    let d = run(running_state(), &world.build(), 3);
    assert_eq!(
        d.why.reason,
        Reason::ReplacingDeadMember,
        "{}",
        d.why.message
    );
    assert_eq!(
        d.actions,
        vec![
            Action::RemoveMember {
                id: 2,
                name: "m2".into()
            },
            prepare(&["m1", "m3"]),
        ]
    );
    // The next tick, the removal seen, adds that pod once it is published.
    let after = World::healthy(Instant::now(), 1, VERSION)
        .member(3, VERSION)
        .preparing_joiners()
        .prepared("m4", &["m1", "m3"]);
    let d = run(d.state, &after.build(), 3);
    assert_eq!(d.actions, vec![add_prepared("m4")]);
}

#[test]
fn no_replacement_is_prepared_with_a_removal_when_none_is_wanted_or_one_is_there() {
    let dead_m2 = || {
        World::healthy(Instant::now(), 3, VERSION)
            .preparing_joiners()
            .pod_failed(2)
    };
    let prepares = |d: &Decision| {
        d.actions
            .iter()
            .any(|a| matches!(a, Action::PrepareJoiner { .. }))
    };
    // Scaling down to 2: the removal is all that is needed.
    let d = run(running_state(), &dead_m2().build(), 2);
    assert!(!prepares(&d), "{:?}", d.actions);
    // A prepared joiner is there already.
    let d = run(
        running_state(),
        &dead_m2().prepared("m4", &["m1", "m3"]).build(),
        3,
    );
    assert!(!prepares(&d), "{:?}", d.actions);
    // A survivor's address is not published: the replacement waits, as any joiner does.
    let d = run(
        running_state(),
        &dead_m2().pod("m3", |p| p.published = false).build(),
        3,
    );
    assert!(!prepares(&d), "{:?}", d.actions);
    // Without the operator's image, members are added before their pods, as before.
    let plain = World::healthy(Instant::now(), 3, VERSION).pod_gone(2);
    let d = run(running_state(), &plain.build(), 3);
    assert!(!prepares(&d), "{:?}", d.actions);
}
