//! Every state and transition of the decision function, including the refused ones.

use std::time::Duration;

use tokio::time::Instant;

use super::fixtures::{
    self, World, assert_actions, assert_idle, assert_idle_saying, assert_no_action, assert_reason,
    running_state,
};
use super::orphans::ORPHAN_POD_GRACE;
use super::*;

fn spec(size: u32, version: &str) -> DesiredCluster {
    DesiredCluster::new(size, version)
}

fn run(state: State, obs: &Observation, spec: &DesiredCluster) -> Decision {
    decide(state, obs, spec, &Deadlines::default())
}

/// The decision for a cluster this actor has seen running, on `world`'s observation.
fn on_running(world: World, size: u32, version: &str) -> Decision {
    run(running_state(), &world.build(), &spec(size, version))
}

/// The decision for `members` healthy members running `running`, asked for `size`
/// members on `wanted`.
fn on_healthy(members: u64, running: &str, size: u32, wanted: &str) -> Decision {
    on_running(
        World::healthy(Instant::now(), members, running),
        size,
        wanted,
    )
}

/// Whether an action changes etcd's membership (at most one may, per tick).
fn changes_membership(action: &Action) -> bool {
    matches!(
        action,
        Action::AddMember { .. } | Action::PromoteLearner { .. } | Action::RemoveMember { .. }
    )
}

/// The decision removes member `id` from etcd first, for `reason`.
fn assert_removes(d: &Decision, reason: Reason, id: u64) {
    assert_eq!(d.why.reason, reason, "{}", d.why.message);
    assert!(
        matches!(d.actions.first(), Some(Action::RemoveMember { id: removed, .. }) if *removed == id),
        "{:?}",
        d.actions
    );
}

/// Removing member `id`, named `name`, from etcd.
fn remove(id: u64, name: &str) -> Action {
    Action::RemoveMember {
        id,
        name: name.into(),
    }
}

/// Deleting the pod `name`.
fn delete_pod(name: &str) -> Action {
    Action::DeletePod { name: name.into() }
}

fn add(learner: bool, version: &str) -> Action {
    Action::AddMember {
        learner,
        version: version.parse().unwrap(),
        prepared: None,
    }
}

/// The decision's one action adds a learner on `version`.
fn assert_adds_learner(d: &Decision, version: &str) {
    assert_eq!(d.actions, vec![add(true, version)]);
}

const VERSION: &str = "3.5.21";

fn later(now: Instant, secs: u64) -> Instant {
    now + Duration::from_secs(secs)
}

/// The decisions of a running cluster asked for `spec` on `world` at first sight, and
/// `secs` seconds later from the state the first one left.
fn first_and_later(
    world: impl Fn() -> World,
    secs: u64,
    spec: &DesiredCluster,
) -> (Decision, Decision) {
    let seen = world().build();
    let first = run(running_state(), &seen, spec);
    let after = run(
        first.state.clone(),
        &world().at(later(seen.now, secs)).build(),
        spec,
    );
    (first, after)
}

/// The decision blocks the cluster for `reason`.
fn assert_blocked(d: &Decision, reason: Reason) {
    assert_eq!(d.state.phase, Phase::Blocked { reason });
}

#[test]
fn empty_cluster_creates_services_and_seed() {
    let now = Instant::now();
    let obs = World::empty(now).without_services().build();
    let d = run(State::default(), &obs, &spec(3, "3.5.21"));
    assert_eq!(
        d.actions,
        vec![
            Action::EnsureServices,
            Action::CreateSeed {
                version: "3.5.21".parse().unwrap(),
                restore: None,
            }
        ]
    );
    assert_eq!(d.state.phase, Phase::Bootstrapping);
    assert_eq!(d.why.reason, Reason::CreatingSeed);
}

#[test]
fn seed_pod_starting_is_waited_for_and_its_problem_reported() {
    let now = Instant::now();
    let obs = World::empty(now)
        .extra_pod("demo-seed", PodPhase::Pending)
        .pod("demo-seed", |p| {
            p.problem = Some("ErrImagePull: no binary".into())
        })
        .build();
    let d = run(State::default(), &obs, &spec(3, "3.2.13"));
    assert_idle_saying(&d, Reason::WaitingForSeed, "ErrImagePull");
}

#[test]
fn seed_that_died_before_the_cluster_formed_is_deleted_to_start_over() {
    let now = Instant::now();
    let obs = World::empty(now)
        .extra_pod("demo-seed", PodPhase::Failed)
        .build();
    let d = run(State::default(), &obs, &spec(3, "3.5.21"));
    assert_eq!(d.actions, vec![delete_pod("demo-seed")]);
    assert_eq!(d.why.reason, Reason::RestartingFailedSeed);
}

#[test]
fn cluster_whose_id_is_recorded_is_never_bootstrapped_again() {
    let now = Instant::now();
    let obs = World::empty(now).bootstrapped().build();
    let d = run(State::default(), &obs, &spec(3, "3.5.21"));
    assert!(d.actions.is_empty());
    assert_blocked(&d, Reason::AllMembersLost);
}

#[test]
fn failed_pods_of_a_cluster_that_exists_are_never_deleted_to_start_over() {
    let now = Instant::now();
    let obs = World::empty(now)
        .bootstrapped()
        .extra_pod("demo-a", PodPhase::Failed)
        .extra_pod("demo-b", PodPhase::Failed)
        .build();
    let d = run(State::default(), &obs, &spec(3, "3.5.21"));
    assert_idle(&d, Reason::AllMembersLost);
}

#[test]
fn members_listed_by_an_older_operators_status_mean_the_cluster_exists() {
    let now = Instant::now();
    let mut obs = World::empty(now).build();
    obs.recorded.members = vec!["demo-a".into()];
    let d = run(State::default(), &obs, &spec(3, "3.5.21"));
    assert_idle(&d, Reason::AllMembersLost);
}

#[test]
fn a_cluster_this_actor_saw_answer_is_never_seeded_even_before_its_status_says_so() {
    let now = Instant::now();
    let listed = World::healthy(now, 1, "3.5.21").build();
    let first = run(State::default(), &listed, &spec(1, "3.5.21"));
    let gone = World::empty(now).build();
    let d = run(first.state, &gone, &spec(1, "3.5.21"));
    assert_idle(&d, Reason::AllMembersLost);
}

#[test]
fn a_paused_cluster_still_learns_its_cluster_id() {
    let now = Instant::now();
    let obs = World::healthy(now, 3, "3.5.21").build();
    let mut paused = spec(3, "3.5.21");
    paused.paused = true;
    let d = run(State::default(), &obs, &paused);
    assert_eq!(d.state.phase, Phase::Paused);
    assert_eq!(d.state.cluster_id, Some(fixtures::CLUSTER_ID));
}

#[test]
fn a_recorded_seed_without_a_pod_is_started_under_its_recorded_name_and_token() {
    let now = Instant::now();
    let obs = World::empty(now).seeding("demo-seed").build();
    let d = run(State::default(), &obs, &spec(3, "3.5.21"));
    assert_eq!(
        d.actions,
        vec![Action::StartSeed {
            name: "demo-seed".into(),
            token: "demo-token".into(),
            version: VERSION.parse().unwrap(),
            restore: None,
        }]
    );
}

/// A recorded seed `demo-seed`, no member answered yet, its pod in `phase`.
fn recorded_seed(phase: PodPhase) -> World {
    World::empty(Instant::now())
        .seeding("demo-seed")
        .extra_pod("demo-seed", phase)
}

fn delete_seed_pod() -> Vec<Action> {
    vec![delete_pod("demo-seed")]
}

#[test]
fn a_recorded_seed_that_died_before_any_member_answered_is_restarted() {
    let obs = recorded_seed(PodPhase::Failed).build();
    let d = run(State::default(), &obs, &spec(3, "3.5.21"));
    assert_eq!(d.actions, delete_seed_pod());
    assert_eq!(d.why.reason, Reason::RestartingFailedSeed);
}

#[test]
fn a_seed_that_never_started_is_recreated_when_the_version_changes() {
    let obs = recorded_seed(PodPhase::Pending)
        .pod("demo-seed", |p| {
            p.started = false;
            p.version = Some("3.2.13".into());
            p.problem = Some("ErrImagePull: no binary".into());
        })
        .build();
    let same = run(State::default(), &obs, &spec(1, "3.2.13"));
    assert_idle(&same, Reason::WaitingForSeed);
    let changed = run(State::default(), &obs, &spec(1, "3.5.21"));
    assert_eq!(changed.actions, delete_seed_pod());
    assert_eq!(changed.why.reason, Reason::RecreatingSeed);
}

#[test]
fn a_seed_that_has_run_is_not_recreated_when_the_version_changes() {
    let obs = recorded_seed(PodPhase::Running).build();
    let d = run(State::default(), &obs, &spec(1, "3.5.35"));
    assert_idle(&d, Reason::WaitingForSeed);
}

#[test]
fn members_answering_for_another_cluster_block_every_action() {
    let now = Instant::now();
    let mut obs = World::healthy(now, 1, "3.5.21").bootstrapped().build();
    if let Membership::Listed { cluster_id, .. } = &mut obs.membership {
        *cluster_id = 0x1234;
    }
    let d = run(running_state(), &obs, &spec(3, "3.5.21"));
    assert_idle(&d, Reason::ClusterIdMismatch);
    assert_eq!(d.state.cluster_id, Some(fixtures::CLUSTER_ID));
}

#[test]
fn unreachable_etcd_with_live_pods_blocks_without_acting() {
    let now = Instant::now();
    let d = on_running(World::healthy(now, 3, "3.5.21").etcd_down(), 3, "3.5.21");
    assert_idle(&d, Reason::EtcdUnreachable);
}

#[test]
fn restarted_operator_with_running_pods_but_no_answer_yet_does_not_bootstrap() {
    let now = Instant::now();
    let obs = World::healthy(now, 1, "3.5.21").etcd_down().build();
    let d = run(State::default(), &obs, &spec(3, "3.5.21"));
    assert_no_action!(d, Action::CreateSeed { .. });
    assert_eq!(d.why.reason, Reason::WaitingForSeed);
}

#[test]
fn healthy_seed_grows_by_one_learner_when_version_supports_it() {
    let now = Instant::now();
    let obs = World::healthy(now, 1, "3.4.23").build();
    let d = run(State::default(), &obs, &spec(3, "3.4.23"));
    assert_adds_learner(&d, "3.4.23");
    assert_eq!(d.state.phase, Phase::Scaling { from: 1, to: 3 });
    assert_eq!(d.state.cluster_id, Some(fixtures::CLUSTER_ID));
}

#[test]
fn clusters_older_than_3_4_add_voting_members() {
    let d = on_healthy(1, "3.3.25", 3, "3.3.25");
    assert_eq!(d.actions, vec![add(false, "3.3.25")]);
}

#[test]
fn started_learner_is_promoted_before_anything_else() {
    let now = Instant::now();
    let d = on_running(World::healthy(now, 2, "3.5.21").learner(2), 3, "3.5.21");
    assert_eq!(
        d.actions,
        vec![Action::PromoteLearner {
            id: 2,
            name: "m2".into()
        }]
    );
    assert_eq!(d.why.reason, Reason::PromotingLearner);
}

#[test]
fn a_promoted_learners_pod_is_labelled_a_voter_by_the_tick_that_promotes_it() {
    let now = Instant::now();
    let world = World::healthy(now, 2, "3.5.21")
        .learner(2)
        .pod("m2", |p| p.voter = false);
    let d = on_running(world, 3, "3.5.21");
    assert_eq!(
        d.actions,
        vec![
            Action::PromoteLearner {
                id: 2,
                name: "m2".into()
            },
            Action::LabelVoter { name: "m2".into() },
        ]
    );
}

#[test]
fn unhealthy_member_blocks_scaling_until_it_recovers() {
    let now = Instant::now();
    let d = on_running(World::healthy(now, 3, "3.5.21").unreachable(3), 5, "3.5.21");
    assert_idle(&d, Reason::WaitingForHealthyMembers);
    assert_eq!(d.state.phase, Phase::Recovering);
}

#[test]
fn added_member_without_pod_gets_its_pod_after_an_operator_restart() {
    let now = Instant::now();
    let obs = World::healthy(now, 1, "3.5.21")
        .unstarted(7, "demo-abcde", true)
        .build();
    let d = run(State::default(), &obs, &spec(3, "3.5.21"));
    assert_eq!(
        d.actions,
        vec![Action::ResumeJoin {
            id: 7,
            name: "demo-abcde".into(),
            version: "3.5.21".parse().unwrap()
        }]
    );
}

/// One healthy member, and learner 7 (`demo-abcde`) added but not started, its pod in
/// `phase`.
fn joining(now: Instant, phase: PodPhase) -> World {
    World::healthy(now, 1, VERSION)
        .unstarted(7, "demo-abcde", true)
        .extra_pod("demo-abcde", phase)
}

#[test]
fn joining_member_with_a_pod_is_waited_for() {
    let now = Instant::now();
    let d = on_running(joining(now, PodPhase::Pending), 3, VERSION);
    assert_idle(&d, Reason::WaitingForJoin);
}

#[test]
fn member_that_never_starts_is_removed_after_the_deadline() {
    let now = Instant::now();
    let world = || joining(now, PodPhase::Pending);
    let (first, d) = first_and_later(world, 91, &spec(3, VERSION));
    assert!(first.actions.is_empty());
    assert_eq!(
        d.actions,
        vec![remove(7, "demo-abcde"), delete_pod("demo-abcde")]
    );
    assert_eq!(d.why.reason, Reason::RemovingUnstartedMember);
}

#[test]
fn joining_member_whose_pod_failed_is_removed_at_once() {
    let now = Instant::now();
    let d = on_running(joining(now, PodPhase::Failed), 3, VERSION);
    assert_eq!(d.why.reason, Reason::RemovingUnstartedMember);
    assert!(matches!(d.actions[0], Action::RemoveMember { id: 7, .. }));
}

#[test]
fn member_whose_pod_failed_is_removed_then_its_pod_deleted() {
    let now = Instant::now();
    let d = on_running(World::healthy(now, 3, "3.5.21").pod_failed(2), 3, "3.5.21");
    assert_eq!(d.actions, vec![remove(2, "m2"), delete_pod("m2")]);
    assert_eq!(d.state.phase, Phase::Recovering);
    assert_eq!(d.why.reason, Reason::ReplacingDeadMember);
}

#[test]
fn member_whose_pod_is_gone_is_removed() {
    let now = Instant::now();
    let d = on_running(World::healthy(now, 3, "3.5.21").pod_gone(3), 3, "3.5.21");
    assert_eq!(d.actions, vec![remove(3, "m3")]);
}

/// Member 3's etcd has crashed `restarts` times with `crash` and is down now.
fn crashing(now: Instant, restarts: u32, crash: &str) -> World {
    let crash = crash.to_string();
    World::healthy(now, 3, VERSION)
        .unreachable(3)
        .pod("m3", move |p| {
            p.ready = false;
            p.restarts = restarts;
            p.crash = Some(crash);
        })
}

/// The decisions on `world` at first sight and 121 s later (past the unhealthy deadline).
fn first_and_past_deadline(world: impl Fn() -> World) -> (Decision, Decision) {
    first_and_later(world, 121, &spec(3, VERSION))
}

#[test]
fn a_crash_looping_member_is_reported_with_its_last_words_and_never_replaced() {
    let now = Instant::now();
    let crash =
        "exited with code 1 (Error): {\"msg\":\"x\"}\netcd: unknown flag: --quota-backend-bytez";
    let (first, past) = first_and_past_deadline(|| crashing(now, 4, crash));
    for d in [&first, &past] {
        assert_idle(d, Reason::CrashLooping);
        assert!(
            d.why.message.contains("4 restarts")
                && d.why
                    .message
                    .ends_with("etcd: unknown flag: --quota-backend-bytez"),
            "{}",
            d.why.message
        );
        assert_eq!(d.state.phase, Phase::Recovering);
    }
}

#[test]
fn a_member_restarted_once_is_waited_for_not_reported_as_crash_looping() {
    let now = Instant::now();
    let d = on_running(crashing(now, 1, "exited with code 137 (Error)"), 3, VERSION);
    assert_idle(&d, Reason::WaitingForHealthyMembers);
}

#[test]
fn a_member_failing_on_its_own_data_is_replaced_past_the_deadline_but_not_before() {
    let now = Instant::now();
    let crash = "exited with code 2 (Error): panic: walpb: crc mismatch";
    let (first, past) = first_and_past_deadline(|| crashing(now, 5, crash));
    assert_idle(&first, Reason::CrashLooping);
    assert_removes(&past, Reason::ReplacingBrokenMember, 3);
    assert!(
        past.why.message.contains("crc mismatch"),
        "{}",
        past.why.message
    );
}

#[test]
fn a_member_failing_on_its_data_is_not_replaced_without_a_quorum_of_the_others() {
    let now = Instant::now();
    let crash = "exited with code 2 (Error): panic: walpb: crc mismatch";
    let world = || crashing(now, 5, crash).not_ready(2);
    let (_, past) = first_and_past_deadline(world);
    assert_idle(&past, Reason::QuorumLost);
}

/// The decision restarts members on their volumes with exactly `actions`, recovering.
fn assert_restarts(d: &Decision, actions: Vec<Action>) {
    assert_eq!(d.actions, actions);
    assert_eq!(d.why.reason, Reason::RestartingMembers);
    assert_eq!(d.state.phase, Phase::Recovering);
}

fn restart(name: &str, peers: &[&str], voter: bool) -> Action {
    Action::RestartMember {
        name: name.into(),
        version: VERSION.parse().unwrap(),
        peers: peers.iter().map(|p| p.to_string()).collect(),
        voter,
    }
}

#[test]
fn a_member_whose_pod_is_gone_gets_a_new_pod_on_its_volume_and_stays_the_same_member() {
    let now = Instant::now();
    let world = World::healthy(now, 3, VERSION)
        .on_volumes()
        .without_pod("m2");
    let d = on_running(world.unreachable(2), 3, VERSION);
    assert_restarts(&d, vec![restart("m2", &["m1", "m2", "m3"], true)]);
}

#[test]
fn a_members_old_pod_is_waited_for_before_its_volume_is_used_again() {
    let now = Instant::now();
    let world = World::healthy(now, 3, VERSION)
        .on_volumes()
        .pod("m2", |p| p.terminating = true);
    let d = on_running(world.unreachable(2), 3, VERSION);
    assert_idle_saying(&d, Reason::RestartingMembers, "m2");
}

#[test]
fn a_member_whose_volume_is_lost_or_being_deleted_is_removed_and_replaced() {
    let now = Instant::now();
    for phase in [ClaimPhase::Lost, ClaimPhase::Deleting] {
        let world = World::healthy(now, 3, VERSION)
            .on_volumes()
            .claim("m2", phase)
            .without_pod("m2");
        let d = on_running(world.unreachable(2), 3, VERSION);
        assert_removes(&d, Reason::ReplacingDeadMember, 2);
    }
}

const GI: u128 = 1 << 30;

fn with_storage(size: u32, quantity: &str, bytes: u128) -> DesiredCluster {
    let mut s = spec(size, VERSION);
    s.storage = Some(Storage {
        quantity: quantity.into(),
        bytes,
    });
    s
}

#[test]
fn claims_smaller_than_the_spec_asks_grow_where_the_class_allows_it() {
    let now = Instant::now();
    let world = || World::healthy(now, 3, VERSION).on_volumes();
    let grow = |expandable: bool| {
        let obs = world().claims_sized(GI, expandable).build();
        run(running_state(), &obs, &with_storage(3, "2Gi", 2 * GI)).actions
    };
    let expand = |name: &str| Action::ExpandClaim {
        name: name.into(),
        quantity: "2Gi".into(),
    };
    assert_eq!(grow(true), vec![expand("m1"), expand("m2"), expand("m3")]);
    assert_eq!(grow(false), vec![]);
    // At the size asked for, or above it (claims never shrink): nothing to do.
    for bytes in [2 * GI, 3 * GI] {
        let obs = world().claims_sized(bytes, true).build();
        let d = run(running_state(), &obs, &with_storage(3, "2Gi", 2 * GI));
        assert_no_action!(d, Action::ExpandClaim { .. });
    }
    // A claim whose volume is lost is not grown (its member is being replaced).
    let obs = world()
        .claims_sized(GI, true)
        .claim("m3", ClaimPhase::Lost)
        .build();
    let d = run(running_state(), &obs, &with_storage(3, "2Gi", 2 * GI));
    assert!(!d.actions.contains(&expand("m3")), "{:?}", d.actions);
}

/// The observation of the bootstrapped `world` once the pods of `m1..m3` are gone and
/// nothing answers.
fn every_pod_gone(world: World) -> Observation {
    world
        .without_pod("m1")
        .without_pod("m2")
        .without_pod("m3")
        .bootstrapped()
        .etcd_down()
        .build()
}

#[test]
fn every_pod_gone_with_volumes_brings_every_member_back_and_never_a_new_cluster() {
    let now = Instant::now();
    let obs = every_pod_gone(World::healthy(now, 3, VERSION).on_volumes());
    for state in [running_state(), State::default()] {
        let d = run(state, &obs, &spec(3, VERSION));
        let peers = ["m1", "m2", "m3"];
        let every = ["m1", "m2", "m3"].map(|m| restart(m, &peers, false));
        assert_restarts(&d, every.to_vec());
    }
}

#[test]
fn every_pod_gone_without_volumes_is_reported_lost_and_nothing_is_created() {
    let now = Instant::now();
    let obs = every_pod_gone(World::healthy(now, 3, VERSION));
    let d = run(running_state(), &obs, &spec(3, VERSION));
    assert_idle(&d, Reason::AllMembersLost);
}

#[test]
fn after_a_dead_member_is_removed_a_replacement_is_added() {
    assert_adds_learner(&on_healthy(2, VERSION, 3, VERSION), VERSION);
}

#[test]
fn member_unhealthy_past_the_deadline_is_replaced_but_not_before() {
    let now = Instant::now();
    let world = || World::healthy(now, 3, "3.5.21").not_ready(3);
    let (first, d) = first_and_past_deadline(world);
    assert!(first.actions.is_empty());
    assert_eq!(d.why.reason, Reason::ReplacingUnhealthyMember);
    assert!(matches!(d.actions[0], Action::RemoveMember { id: 3, .. }));
}

#[test]
fn member_healthy_again_resets_its_unhealthy_timer() {
    let now = Instant::now();
    let first = run(
        running_state(),
        &World::healthy(now, 3, "3.5.21").unreachable(3).build(),
        &spec(3, "3.5.21"),
    );
    let healthy = World::healthy(now, 3, "3.5.21").at(later(now, 60)).build();
    let second = run(first.state, &healthy, &spec(3, "3.5.21"));
    assert!(second.state.unhealthy_since.is_empty());
    let sick = World::healthy(now, 3, "3.5.21").unreachable(3);
    let third = run(
        second.state,
        &sick.at(later(now, 150)).build(),
        &spec(3, "3.5.21"),
    );
    assert!(third.actions.is_empty(), "{:?}", third.actions);
}

#[test]
fn lost_quorum_is_reported_and_nothing_is_removed() {
    let now = Instant::now();
    let world = World::healthy(now, 3, VERSION).pod_failed(2).unreachable(3);
    let d = on_running(world, 3, VERSION);
    assert!(d.actions.is_empty());
    assert_blocked(&d, Reason::QuorumLost);
}

#[test]
fn scale_down_removes_a_non_leader_member_first_from_etcd_then_its_pod() {
    let d = on_healthy(5, "3.5.21", 3, "3.5.21");
    assert_eq!(d.actions, vec![remove(5, "m5"), delete_pod("m5")]);
    assert_eq!(d.state.phase, Phase::Scaling { from: 5, to: 3 });
}

#[test]
fn scale_down_never_removes_the_leader() {
    let now = Instant::now();
    let d = on_running(World::healthy(now, 3, "3.5.21").led_by(3), 2, "3.5.21");
    assert!(matches!(d.actions[0], Action::RemoveMember { id: 2, .. }));
}

#[test]
fn a_healthy_two_member_cluster_scales_down_to_one_by_removing_the_follower() {
    let now = Instant::now();
    let d = on_running(World::healthy(now, 2, "3.5.21").led_by(1), 1, "3.5.21");
    assert!(
        matches!(d.actions[0], Action::RemoveMember { id: 2, .. }),
        "{:?}",
        d.actions
    );
    assert_eq!(d.state.phase, Phase::Scaling { from: 2, to: 1 });
}

#[test]
fn a_two_member_cluster_with_an_unhealthy_member_is_not_scaled_down() {
    let now = Instant::now();
    let d = on_running(World::healthy(now, 2, "3.5.21").unreachable(2), 1, "3.5.21");
    assert_no_action!(d, Action::RemoveMember { .. });
    assert_ne!(d.state.phase, Phase::Running);
}

#[test]
fn converged_cluster_is_running_and_does_nothing() {
    let d = on_healthy(3, "3.5.21", 3, "3.5.21");
    assert!(d.actions.is_empty());
    assert_eq!(d.state.phase, Phase::Running);
    assert_eq!(d.why.reason, Reason::Converged);
}

/// Member `m<id>` of `world` answers on `version`, and its pod was set to it.
fn runs_on(world: World, id: u64, version: &str) -> World {
    let version = version.to_string();
    world
        .runs(id, &version)
        .pod(&format!("m{id}"), |p| p.version = Some(version))
}

/// The operator set pod `name` of `world` from 3.4.23 to 3.5.21, marking it upgraded.
fn set_from_3_4_23_to_3_5_21(world: World, name: &str) -> World {
    world.pod(name, |p| {
        p.version = Some("3.5.21".into());
        p.upgrade_from = Some("3.4.23".into());
    })
}

#[test]
fn upgrade_moves_followers_first_and_the_leader_last() {
    let now = Instant::now();
    let obs = World::healthy(now, 3, "3.4.23").build();
    let d = run(running_state(), &obs, &spec(3, "3.5.21"));
    assert_eq!(
        d.actions,
        vec![Action::UpgradeMember {
            name: "m2".into(),
            from: "3.4.23".parse().unwrap(),
            to: "3.5.21".parse().unwrap()
        }]
    );
    assert!(matches!(d.state.phase, Phase::Upgrading { .. }));

    let followers_done = || {
        let world = World::healthy(now, 3, "3.4.23");
        runs_on(runs_on(world, 2, "3.5.21"), 3, "3.5.21")
    };
    let d = on_running(followers_done(), 3, "3.5.21");
    assert!(
        matches!(&d.actions[0], Action::MoveLeader { from, .. } if from == "m1"),
        "the leader hands leadership over first: {:?}",
        d.actions
    );
    let d = on_running(followers_done().led_by(2), 3, "3.5.21");
    assert!(matches!(&d.actions[0], Action::UpgradeMember { name, .. } if name == "m1"));
}

#[test]
fn upgrade_waits_for_the_restarted_member_to_run_the_new_version() {
    let now = Instant::now();
    let world = World::healthy(now, 3, "3.4.23").pod("m2", |p| p.version = Some("3.5.21".into()));
    assert_idle(
        &on_running(world, 3, "3.5.21"),
        Reason::WaitingForUpgradedMember,
    );
}

#[test]
fn downgrade_is_refused_and_nothing_changes() {
    let d = on_healthy(3, VERSION, 3, "3.4.23");
    assert_idle(&d, Reason::DowngradeRefused);
    assert_eq!(d.state.phase, Phase::Running);
}

#[test]
fn skipping_a_minor_version_is_refused() {
    assert_idle(
        &on_healthy(3, "3.4.23", 3, "3.6.5"),
        Reason::VersionSkipRefused,
    );
}

#[test]
fn upgrade_to_3_6_from_a_3_5_patch_below_3_5_26_is_refused_naming_3_5_26() {
    let d = on_healthy(3, "3.5.19", 3, "3.6.5");
    assert_idle(&d, Reason::UpgradePathRefused);
    assert_eq!(d.state.phase, Phase::Running);
    assert!(d.why.message.contains("3.5.19"), "{}", d.why.message);
    assert!(d.why.message.contains("3.5.26"), "{}", d.why.message);
    assert!(d.why.message.contains("learner"), "{}", d.why.message);
}

#[test]
fn upgrade_to_3_6_is_refused_while_any_member_runs_a_3_5_patch_below_3_5_26() {
    let now = Instant::now();
    let d = on_running(
        World::healthy(now, 3, "3.5.26").runs(2, "3.5.25"),
        3,
        "3.6.0",
    );
    assert_idle_saying(&d, Reason::UpgradePathRefused, "3.5.25");
}

/// The decision upgrades one member to `version`, and does nothing else.
fn assert_upgrades_one_member_to(d: &Decision, version: &str) {
    assert!(
        matches!(&d.actions[..], [Action::UpgradeMember { to, .. }] if to.to_string() == version),
        "{}: {:?}",
        d.why.message,
        d.actions
    );
}

#[test]
fn upgrade_to_3_6_from_3_5_26_is_allowed() {
    assert_upgrades_one_member_to(&on_healthy(3, "3.5.26", 3, "3.6.5"), "3.6.5");
}

#[test]
fn upgrade_from_3_5_25_to_the_safe_patch_3_5_26_is_allowed() {
    assert_upgrades_one_member_to(&on_healthy(3, "3.5.25", 3, "3.5.26"), "3.5.26");
}

#[test]
fn members_added_while_an_unsafe_upgrade_is_refused_join_on_the_running_version() {
    let d = on_healthy(3, "3.5.19", 4, "3.6.5");
    assert_adds_learner(&d, "3.5.19");
}

#[test]
fn scaling_comes_before_upgrading() {
    let d = on_healthy(3, "3.4.23", 4, "3.5.21");
    assert_adds_learner(&d, VERSION);
}

#[test]
fn paused_cluster_only_observes() {
    let now = Instant::now();
    let obs = World::healthy(now, 3, "3.5.21").pod_failed(3).build();
    let mut s = spec(3, "3.5.21");
    s.paused = true;
    let d = run(running_state(), &obs, &s);
    assert!(d.actions.is_empty());
    assert_eq!(d.state.phase, Phase::Paused);
}

fn tls_spec(mode: TlsMode) -> DesiredCluster {
    let mut s = spec(3, VERSION);
    s.tls = mode;
    s
}

fn invalid(problem: &str) -> TlsObservation {
    TlsObservation {
        problems: vec![problem.to_string()],
        ..TlsObservation::default()
    }
}

fn to_issue(what: &str, missing: bool) -> TlsObservation {
    TlsObservation {
        to_issue: vec![what.to_string()],
        missing,
        ..TlsObservation::default()
    }
}

/// The first decision of a new actor where nothing exists yet, asked for `spec`.
fn on_nothing_yet(spec: &DesiredCluster) -> Decision {
    run(
        State::default(),
        &World::empty(Instant::now()).build(),
        spec,
    )
}

/// The decision for a running cluster on `world`, asked for TLS `mode`.
fn on_running_tls(world: World, mode: TlsMode) -> Decision {
    run(running_state(), &world.build(), &tls_spec(mode))
}

/// Three members on operator-issued certificates, one of which is due for renewal.
fn auto_tls_renewal_due(now: Instant) -> World {
    World::healthy(now, 3, VERSION)
        .pods_tls(TlsMode::Auto)
        .certificates(to_issue("demo-peer-tls: renewal due", false))
}

#[test]
fn invalid_tls_secrets_block_before_any_member_is_created() {
    let now = Instant::now();
    let problem = "Secret peer-tls: key peer.crt: does not cover *.demo.default.svc";
    let world = World::empty(now).certificates(invalid(problem));
    let d = run(State::default(), &world.build(), &tls_spec(TlsMode::Static));
    assert_idle_saying(&d, Reason::TlsSecretInvalid, problem);
    assert!(matches!(d.state.phase, Phase::Blocked { .. }));
}

#[test]
fn invalid_tls_secrets_of_a_running_cluster_block_every_change() {
    let now = Instant::now();
    let world = World::healthy(now, 2, VERSION)
        .pods_tls(TlsMode::Static)
        .certificates(invalid("Secret server-tls: key server.crt: expired"));
    let d = on_running_tls(world, TlsMode::Static);
    assert_idle(&d, Reason::TlsSecretInvalid);
}

#[test]
fn valid_static_tls_seeds_the_cluster() {
    let d = on_nothing_yet(&tls_spec(TlsMode::Static));
    assert_actions!(d, [Action::CreateSeed { .. }]);
}

#[test]
fn turning_tls_on_for_an_existing_cluster_is_refused() {
    let now = Instant::now();
    let d = on_running_tls(World::healthy(now, 3, VERSION), TlsMode::Static);
    assert_idle_saying(&d, Reason::TlsChangeRefused, "m1 (Off)");
}

#[test]
fn turning_tls_off_or_swapping_its_mode_is_refused() {
    let now = Instant::now();
    for (pods, wanted) in [
        (TlsMode::Static, TlsMode::Off),
        (TlsMode::Static, TlsMode::Auto),
        (TlsMode::Auto, TlsMode::Static),
    ] {
        let d = on_running_tls(World::healthy(now, 3, VERSION).pods_tls(pods), wanted);
        assert_idle(&d, Reason::TlsChangeRefused);
    }
}

#[test]
fn missing_operator_certificates_are_issued_before_the_seed() {
    let now = Instant::now();
    let world = World::empty(now).certificates(to_issue("demo-peer-tls: missing", true));
    let d = run(State::default(), &world.build(), &tls_spec(TlsMode::Auto));
    assert_actions!(d, [Action::IssueCertificates, Action::CreateSeed { .. }]);
}

#[test]
fn due_certificates_of_a_converged_cluster_are_renewed_and_nothing_else() {
    let now = Instant::now();
    let d = on_running_tls(auto_tls_renewal_due(now), TlsMode::Auto);
    assert_eq!(d.actions, vec![Action::IssueCertificates]);
    assert_eq!(d.why.reason, Reason::IssuingCertificates);
    assert_eq!(d.state.phase, Phase::Running);
}

#[test]
fn a_paused_cluster_renews_nothing() {
    let now = Instant::now();
    let mut s = tls_spec(TlsMode::Auto);
    s.paused = true;
    let d = run(running_state(), &auto_tls_renewal_due(now).build(), &s);
    assert!(d.actions.is_empty(), "{:?}", d.actions);
}

#[test]
fn invalid_version_blocks_with_a_clear_message() {
    let d = on_nothing_yet(&spec(3, "latest"));
    assert_idle(&d, Reason::InvalidSpec);
    assert!(d.why.message.contains("latest"));
}

#[test]
fn missing_services_are_recreated_for_a_running_cluster() {
    let now = Instant::now();
    let d = on_running(
        World::healthy(now, 3, "3.5.21").without_services(),
        3,
        "3.5.21",
    );
    assert_eq!(d.actions, vec![Action::EnsureServices]);
}

#[test]
fn pod_without_member_is_deleted_only_after_the_grace_time() {
    let now = Instant::now();
    let world = || World::healthy(now, 3, "3.5.21").extra_pod("m9", PodPhase::Running);
    let grace = ORPHAN_POD_GRACE.as_secs();
    let (first, d) = first_and_later(world, grace, &spec(3, "3.5.21"));
    assert!(first.actions.is_empty());
    assert_eq!(d.actions, vec![delete_pod("m9")]);
    assert_eq!(d.why.reason, Reason::DeletingOrphanPod);
}

#[test]
fn at_most_one_membership_change_per_decision() {
    let now = Instant::now();
    let cases = [
        World::healthy(now, 1, "3.5.21").build(),
        World::healthy(now, 5, "3.5.21").build(),
        World::healthy(now, 3, "3.5.21").pod_failed(2).build(),
    ];
    for obs in cases {
        let d = run(running_state(), &obs, &spec(3, "3.5.21"));
        let changes = d.actions.iter().filter(|a| changes_membership(a)).count();
        assert!(changes <= 1, "{:?}", d.actions);
    }
}

#[test]
fn new_members_never_run_a_refused_target_version() {
    let now = Instant::now();
    let obs = World::healthy(now, 2, "3.5.21").build();
    let d = run(running_state(), &obs, &spec(3, "3.4.23"));
    assert_adds_learner(&d, "3.5.21");
    let d = run(running_state(), &obs, &spec(3, "3.7.0"));
    assert_adds_learner(&d, "3.5.21");
}

#[test]
fn a_member_whose_pod_is_ready_is_not_removed_however_long_the_operator_cannot_reach_it() {
    let now = Instant::now();
    let world = || World::healthy(now, 3, "3.5.21").unreachable(3);
    let (_, d) = first_and_later(world, 3_600, &spec(3, "3.5.21"));
    assert_idle(&d, Reason::WaitingForHealthyMembers);
}

#[test]
fn an_unhealthy_member_is_not_removed_while_a_replacement_is_joining() {
    let now = Instant::now();
    let world = || {
        World::healthy(now, 4, "3.5.21")
            .not_ready(4)
            .member(5, "3.5.21")
            .learner(5)
            .unreachable(5)
    };
    let (_, d) = first_and_later(world, 121, &spec(5, "3.5.21"));
    assert_no_action!(d, Action::RemoveMember { .. });
}

#[test]
fn unhealthy_timers_start_afresh_after_quorum_was_lost() {
    let now = Instant::now();
    let one_down = || World::healthy(now, 3, "3.5.21").not_ready(3);
    let first = run(running_state(), &one_down().build(), &spec(3, "3.5.21"));
    let at = |world: World, secs: u64| world.at(later(now, secs)).build();
    let during = run(
        first.state,
        &at(one_down().not_ready(2), 60),
        &spec(3, "3.5.21"),
    );
    assert_eq!(during.why.reason, Reason::QuorumLost);
    // Quorum is back at 100 s; member 3's timer started over then, not at 0 s.
    let regained = run(during.state, &at(one_down(), 100), &spec(3, "3.5.21"));
    let d = run(regained.state, &at(one_down(), 130), &spec(3, "3.5.21"));
    assert!(d.actions.is_empty(), "{:?}", d.actions);
    let d = run(d.state, &at(one_down(), 221), &spec(3, "3.5.21"));
    assert_eq!(d.why.reason, Reason::ReplacingUnhealthyMember);
}

#[test]
fn a_voting_joiner_that_cannot_start_without_quorum_is_reported_not_removed() {
    let now = Instant::now();
    let world = || {
        World::healthy(now, 1, "3.3.25")
            .unstarted(2, "m2", false)
            .extra_pod("m2", PodPhase::Pending)
            .pod("m2", |p| p.problem = Some("ErrImagePull: no binary".into()))
    };
    let (first, d) = first_and_later(world, 91, &spec(2, "3.3.25"));
    assert_eq!(first.why.reason, Reason::WaitingForJoin);
    assert_idle_saying(&d, Reason::JoinStuck, "ErrImagePull");
}

/// Rolling the pod `name` back to `version`.
fn roll_back(name: &str, version: &str) -> Action {
    Action::RollBackMember {
        name: name.into(),
        to: version.parse().unwrap(),
    }
}

/// Three members on 3.4.23 whose `m2` was set to 3.5.21 and does not come up on it.
fn upgraded_m2_down(now: Instant) -> World {
    set_from_3_4_23_to_3_5_21(World::healthy(now, 3, "3.4.23"), "m2")
        .unreachable(2)
        .pod("m2", |p| {
            p.ready = false;
            p.problem = Some("etcd: ErrImagePull".into());
        })
}

#[test]
fn an_upgraded_member_that_does_not_come_up_in_time_is_rolled_back() {
    let now = Instant::now();
    let (first, d) = first_and_later(|| upgraded_m2_down(now), 61, &spec(3, "3.5.21"));
    assert!(first.actions.is_empty(), "{:?}", first.actions);
    assert_eq!(d.actions, vec![roll_back("m2", "3.4.23")]);
    assert_eq!(d.state.failed_version, Some("3.5.21".parse().unwrap()));
    assert_eq!(d.why.reason, Reason::UpgradeFailed);
    assert_blocked(&d, Reason::UpgradeFailed);
}

#[test]
fn a_one_member_cluster_on_a_bad_image_is_rolled_back_though_nothing_answers() {
    let now = Instant::now();
    let world = || {
        set_from_3_4_23_to_3_5_21(World::healthy(now, 1, "3.4.23"), "m1")
            .pod("m1", |p| p.ready = false)
            .bootstrapped()
            .etcd_down()
    };
    let (first, d) = first_and_later(world, 61, &spec(1, "3.5.21"));
    assert_eq!(first.why.reason, Reason::EtcdUnreachable);
    let [Action::RollBackMember { name, .. }] = &d.actions[..] else {
        panic!("{:?}", d.actions);
    };
    assert_eq!(name, "m1");
}

#[test]
fn a_version_recorded_as_failed_is_not_tried_again_while_the_spec_asks_for_it() {
    let now = Instant::now();
    let mut obs = World::healthy(now, 3, "3.4.23").build();
    obs.recorded.failed_version = Some("3.5.21".into());
    let d = run(running_state(), &obs, &spec(3, "3.5.21"));
    assert!(d.actions.is_empty(), "{:?}", d.actions);
    assert_eq!(d.why.reason, Reason::UpgradeFailed);
    let other = run(running_state(), &obs, &spec(3, "3.5.35"));
    assert_actions!(other, [Action::UpgradeMember { .. }]);
    assert_eq!(other.state.failed_version, None);
}

#[test]
fn an_upgraded_member_whose_pod_died_is_replaced_on_its_old_version_and_the_upgrade_halts() {
    let now = Instant::now();
    let obs = set_from_3_4_23_to_3_5_21(World::healthy(now, 3, "3.4.23"), "m2")
        .pod_failed(2)
        .build();
    let d = run(running_state(), &obs, &spec(3, "3.5.21"));
    assert_eq!(d.why.reason, Reason::ReplacingDeadMember);
    assert_eq!(d.state.failed_version, Some("3.5.21".parse().unwrap()));
    let replaced = World::healthy(now, 2, "3.4.23").build();
    let d = run(d.state, &replaced, &spec(3, "3.5.21"));
    assert_adds_learner(&d, "3.4.23");
}

#[test]
fn going_back_mid_upgrade_moves_the_upgraded_members_back() {
    let now = Instant::now();
    let d = on_running(
        runs_on(World::healthy(now, 3, "3.4.23"), 2, "3.5.21"),
        3,
        "3.4.23",
    );
    assert_eq!(d.actions, vec![roll_back("m2", "3.4.23")]);
    assert_eq!(d.why.reason, Reason::RollingBackMember);
}

/// The revert lands after the operator set m2's pod to the new version but before the
/// kubelet restarted it: m2 still answers on the old version. The cluster is not
/// converged (m2 is about to come back on 3.5.21), so the phase must not say Running.
#[test]
fn going_back_before_the_upgraded_pod_restarted_waits_for_it_and_is_not_running() {
    let now = Instant::now();
    let world = set_from_3_4_23_to_3_5_21(World::healthy(now, 3, "3.4.23"), "m2");
    let d = on_running(world, 3, "3.4.23");
    assert_eq!(
        d.why.reason,
        Reason::WaitingForUpgradedMember,
        "{:?}",
        d.why
    );
    assert_ne!(d.state.phase, Phase::Running);
}

#[test]
fn a_member_healthy_on_its_new_version_loses_its_upgrade_mark() {
    let now = Instant::now();
    let world = set_from_3_4_23_to_3_5_21(World::healthy(now, 3, "3.4.23"), "m2");
    let d = on_running(world.runs(2, "3.5.21"), 3, "3.5.21");
    assert_eq!(
        d.actions[0],
        Action::ConfirmUpgrade {
            name: "m2".into(),
            version: "3.5.21".parse().unwrap(),
        }
    );
    assert!(
        matches!(&d.actions[1], Action::UpgradeMember { name, .. } if name == "m3"),
        "{:?}",
        d.actions
    );
}

#[test]
fn a_voting_member_whose_pod_is_not_behind_the_client_service_is_labelled() {
    let now = Instant::now();
    let d = on_running(
        World::healthy(now, 3, "3.5.21").pod("m3", |p| p.voter = false),
        3,
        "3.5.21",
    );
    assert_eq!(d.actions, vec![Action::LabelVoter { name: "m3".into() }]);
    assert_eq!(d.state.phase, Phase::Running);
}

#[test]
fn a_learner_is_never_put_behind_the_client_service() {
    let now = Instant::now();
    let d = on_running(
        World::healthy(now, 3, "3.5.21")
            .learner(3)
            .unreachable(3)
            .pod("m3", |p| p.voter = false),
        3,
        "3.5.21",
    );
    assert_no_action!(d, Action::LabelVoter { .. });
}

fn budget(min_available: u32) -> Action {
    Action::SetDisruptionBudget { min_available }
}

/// The decision for the bootstrapped `world` whose disruption budget has `min_available`
/// (`None`: there is none), asked for `size` members.
fn budgeted(world: World, min_available: Option<u32>, size: u32) -> Decision {
    on_running(world.bootstrapped().budget(min_available), size, VERSION)
}

#[test]
fn a_running_cluster_without_a_disruption_budget_gets_one_at_the_quorum_of_its_voters() {
    let now = Instant::now();
    for (voters, quorum) in [(1, 1), (3, 2), (5, 3)] {
        let d = budgeted(World::healthy(now, voters, VERSION), None, voters as u32);
        assert_eq!(d.actions, vec![budget(quorum)], "{voters} voters");
        assert_eq!(d.state.phase, Phase::Running);
    }
}

#[test]
fn the_disruption_budget_follows_the_voting_members_not_the_learners() {
    let now = Instant::now();
    // Scaling 3 → 5: a fourth voter has joined, the budget still says 2.
    let d = budgeted(World::healthy(now, 4, VERSION), Some(2), 5);
    assert!(d.actions.contains(&budget(3)), "{:?}", d.actions);
    // A learner does not count: 3 voters and a learner keep the quorum of 3.
    let d = budgeted(World::healthy(now, 4, VERSION).learner(4), Some(2), 4);
    assert_no_action!(d, Action::SetDisruptionBudget { .. });
}

#[test]
fn a_member_etcd_cannot_reach_while_its_pod_still_counts_ready_raises_the_budget() {
    let now = Instant::now();
    // A power cut: etcd no longer reaches m3, the node controller has not marked its pod
    // yet. Without the raise, one more eviction would be allowed and break quorum.
    let one_down = || World::healthy(now, 3, VERSION).unreachable(3);
    let d = budgeted(one_down(), Some(2), 3);
    assert!(d.actions.contains(&budget(3)), "{:?}", d.actions);
    // Once its pod is marked not ready, the quorum is enough again.
    let d = budgeted(one_down().pod("m3", |p| p.ready = false), Some(3), 3);
    assert!(d.actions.contains(&budget(2)), "{:?}", d.actions);
    // Five voters, two down but counted ready: every other one must stay.
    let two_down = World::healthy(now, 5, VERSION)
        .unreachable(4)
        .unreachable(5);
    let d = budgeted(two_down, Some(3), 5);
    assert!(d.actions.contains(&budget(5)), "{:?}", d.actions);
}

#[test]
fn a_disruption_budget_at_quorum_is_left_alone_and_a_paused_or_blocked_cluster_sets_none() {
    let now = Instant::now();
    let d = on_running(World::healthy(now, 3, VERSION).bootstrapped(), 3, VERSION);
    assert_no_action!(d, Action::SetDisruptionBudget { .. });
    let mut paused = spec(3, VERSION);
    paused.paused = true;
    let obs = World::healthy(now, 3, VERSION)
        .bootstrapped()
        .budget(None)
        .build();
    assert_idle(&run(running_state(), &obs, &paused), Reason::Paused);
    let mut other = obs.clone();
    other.name_conflict = Some("PodDisruptionBudget demo belongs to someone else".into());
    assert_idle(
        &run(running_state(), &other, &spec(3, VERSION)),
        Reason::NameConflict,
    );
}

#[test]
fn a_first_decision_that_only_repairs_services_leaves_starting_for_recovering() {
    let now = Instant::now();
    let obs = World::healthy(now, 3, VERSION).without_services().build();
    let d = run(State::default(), &obs, &spec(3, VERSION));
    assert_eq!(d.actions[0], Action::EnsureServices);
    assert_eq!(d.state.phase, Phase::Recovering);
}

/// Observations of every shape the fixtures can build, for the sweep below.
fn every_kind_of_observation(now: Instant) -> Vec<(&'static str, Observation)> {
    let three = || World::healthy(now, 3, VERSION);
    vec![
        ("empty", World::empty(now).build()),
        (
            "empty without services",
            World::empty(now).without_services().build(),
        ),
        (
            "seed pending",
            World::empty(now).extra_pod("m1", PodPhase::Pending).build(),
        ),
        (
            "seed failed",
            World::empty(now).extra_pod("m1", PodPhase::Failed).build(),
        ),
        (
            "recorded seed, no pod",
            World::empty(now).seeding("m1").build(),
        ),
        (
            "bootstrapped, no pods",
            World::empty(now).bootstrapped().build(),
        ),
        (
            "bootstrapped, etcd down",
            three().bootstrapped().etcd_down().build(),
        ),
        ("healthy", three().build()),
        ("healthy, bootstrapped", three().bootstrapped().build()),
        ("one unreachable", three().unreachable(3).build()),
        (
            "two unreachable",
            three().unreachable(2).unreachable(3).build(),
        ),
        (
            "dead pod",
            three().pod("m3", |p| p.phase = PodPhase::Failed).build(),
        ),
        ("missing pod", three().without_pod("m2").build()),
        ("learner", three().learner(3).build()),
        ("unstarted", three().unstarted(4, "m4", true).build()),
        (
            "orphan pod",
            three().extra_pod("m9", PodPhase::Running).build(),
        ),
        ("mixed versions", three().runs(1, "3.4.0").build()),
        ("no services", three().without_services().build()),
    ]
}

#[test]
fn no_decision_from_any_phase_on_any_observation_breaks_the_state_machine() {
    let now = Instant::now();
    let specs = [
        spec(1, VERSION),
        spec(3, VERSION),
        spec(5, VERSION),
        spec(3, "3.6.0"),
        spec(3, "3.4.0"),
    ];
    let never_seeded = [Phase::Starting, Phase::Bootstrapping, Phase::Paused];
    for (name, obs) in every_kind_of_observation(now) {
        for spec in &specs {
            let born_states = [
                Phase::Starting,
                Phase::Running,
                Phase::Scaling { from: 1, to: 3 },
                Phase::Recovering,
                Phase::Blocked {
                    reason: Reason::QuorumLost,
                },
            ]
            .map(|phase| State {
                phase,
                ..running_state()
            });
            let unborn_states = never_seeded.clone().map(|phase| State {
                phase,
                ..State::default()
            });
            for state in born_states.into_iter().chain(unborn_states) {
                let from = state.phase.clone();
                let d = run(state, &obs, spec);
                assert_ne!(
                    d.why.reason,
                    Reason::IllegalTransition,
                    "{name}, {from}, size {} v{}: {}",
                    spec.size,
                    spec.version,
                    d.why.message
                );
                assert_ne!(d.state.phase, Phase::Starting, "{name}, {from}");
            }
        }
    }
}

/// A spec whose seed restores a snapshot taken by etcd `snapshot_version`.
fn restoring(size: u32, version: &str, snapshot_version: &str) -> DesiredCluster {
    DesiredCluster {
        restore: Some(SnapshotSource {
            bucket: "etcd-backups".into(),
            key: "prod/prod_20261130T103300.123Z_r4021.db".into(),
            endpoint: Some("http://10.255.0.1:7480".into()),
            force_path_style: true,
            secret: "aws".into(),
            sha256: "ab".repeat(32),
            size: 4096,
            etcd_version: snapshot_version.into(),
            revision: 4021,
            cluster_id: None,
        }),
        ..spec(size, version)
    }
}

#[test]
fn a_cluster_made_from_a_snapshot_seeds_from_it() {
    let spec = restoring(3, "3.5.35", "3.5.35");
    let d = on_nothing_yet(&spec);
    assert_eq!(
        d.actions,
        vec![Action::CreateSeed {
            version: "3.5.35".parse().unwrap(),
            restore: spec.restore.clone(),
        }]
    );
    assert_eq!(d.why.reason, Reason::CreatingSeed);
    assert!(d.why.message.contains("revision 4021"), "{}", d.why.message);
}

#[test]
fn a_recorded_seed_of_a_restore_is_started_again_from_the_same_snapshot() {
    let obs = World::empty(Instant::now()).seeding("demo-seed").build();
    let spec = restoring(3, "3.5.35", "3.5.35");
    let d = run(State::default(), &obs, &spec);
    assert_actions!(d, [Action::StartSeed { restore, .. }] if *restore == spec.restore);
}

#[test]
fn a_snapshot_the_version_cannot_read_gets_no_seed() {
    for (target, snapshot) in [("3.5.35", "3.6.16"), ("3.6.16", "3.4.23")] {
        let d = on_nothing_yet(&restoring(3, target, snapshot));
        assert_idle(&d, Reason::RestoreRefused);
        assert!(matches!(d.state.phase, Phase::Blocked { .. }));
        assert!(d.why.message.contains(snapshot), "{}", d.why.message);
    }
}

#[test]
fn a_born_cluster_never_reads_its_snapshot_again() {
    // Every member's pod gone: a bootstrapped cluster is never seeded, with or without a snapshot.
    let obs = World::empty(Instant::now()).bootstrapped().build();
    let d = run(State::default(), &obs, &restoring(3, "3.5.35", "3.5.35"));
    assert_no_action!(d, Action::CreateSeed { .. } | Action::StartSeed { .. });
    assert_eq!(d.why.reason, Reason::AllMembersLost);
    // Nor is its snapshot's version checked any more: a later version change is an upgrade.
    let running = World::healthy(Instant::now(), 3, "3.5.35").build();
    let d = run(running_state(), &running, &restoring(3, "3.5.35", "3.4.23"));
    assert_ne!(d.why.reason, Reason::RestoreRefused);
}

#[test]
fn no_member_joins_until_the_cluster_dns_publishes_every_members_address() {
    let now = Instant::now();
    let world = || World::healthy(now, 2, VERSION);
    let seed_unpublished = world().pod("m1", |p| p.published = false);
    let d = on_running(seed_unpublished, 3, VERSION);
    assert_idle_saying(&d, Reason::WaitingForMemberAddresses, "m1");
    assert!(
        matches!(d.state.phase, Phase::Scaling { .. }),
        "{:?}",
        d.state.phase
    );

    let d = on_running(world(), 3, VERSION);
    assert_adds_learner(&d, VERSION);
}

#[test]
fn an_unpublished_address_never_holds_back_a_scale_down() {
    let now = Instant::now();
    let world = World::healthy(now, 3, VERSION).pod("m2", |p| p.published = false);
    let d = on_running(world, 1, VERSION);
    assert_reason(&d, Reason::RemovingMember);
}

#[test]
fn a_restore_not_written_by_an_etcd_restore_is_blocked_and_no_seed_is_made() {
    let now = Instant::now();
    let s = restoring(3, VERSION, VERSION);
    let mut world = World::empty(now);
    world.obs.restore_problem = Some("EtcdRestore again does not exist".into());
    let d = run(State::default(), &world.build(), &s);
    assert_idle_saying(&d, Reason::RestoreNotAllowed, "again");
}

#[test]
fn a_cluster_whose_image_is_not_allowed_is_blocked_and_no_pod_is_made() {
    let now = Instant::now();
    let mut s = spec(3, VERSION);
    s.image_problem = Some("repository evil.example/etcd is not allowed".into());
    // Nothing exists yet: without the problem, a seed would be made.
    let d = on_nothing_yet(&s);
    assert_idle_saying(&d, Reason::ImageNotAllowed, "evil.example/etcd");
    // A running cluster missing a member is not repaired either.
    let world = World::healthy(now, 3, VERSION).without_pod("demo-2");
    let d = run(running_state(), &world.build(), &s);
    assert_idle(&d, Reason::ImageNotAllowed);
}

#[test]
fn a_running_cluster_whose_pod_policy_sets_an_owned_etcd_variable_is_blocked_untouched() {
    let now = Instant::now();
    // One member gone: without the problem, a replacement would be made.
    let world = World::healthy(now, 3, VERSION).without_pod("demo-2");
    let mut s = spec(3, VERSION);
    s.pod_policy_problem = Some("spec.pod.etcdEnv cannot set ETCD_FORCE_NEW_CLUSTER".into());
    let d = run(running_state(), &world.build(), &s);
    assert_idle_saying(&d, Reason::InvalidSpec, "ETCD_FORCE_NEW_CLUSTER");
}
