//! Every state and transition of the decision function, including the refused ones.

use std::time::Duration;

use tokio::time::Instant;

use super::fixtures::{World, running_state};
use super::*;

fn spec(size: u32, version: &str) -> DesiredCluster {
    DesiredCluster::new(size, version)
}

fn run(state: State, obs: &Observation, spec: &DesiredCluster) -> Decision {
    decide(state, obs, spec, &Deadlines::default())
}

fn add(learner: bool, version: &str) -> Action {
    Action::AddMember {
        learner,
        version: version.parse().unwrap(),
    }
}

const VERSION: &str = "3.5.21";

fn later(now: Instant, secs: u64) -> Instant {
    now + Duration::from_secs(secs)
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
                version: "3.5.21".parse().unwrap()
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
    assert!(d.actions.is_empty());
    assert_eq!(d.why.reason, Reason::WaitingForSeed);
    assert!(d.why.message.contains("ErrImagePull"), "{}", d.why.message);
}

#[test]
fn seed_that_died_before_the_cluster_formed_is_deleted_to_start_over() {
    let now = Instant::now();
    let obs = World::empty(now)
        .extra_pod("demo-seed", PodPhase::Failed)
        .build();
    let d = run(State::default(), &obs, &spec(3, "3.5.21"));
    assert_eq!(
        d.actions,
        vec![Action::DeletePod {
            name: "demo-seed".into()
        }]
    );
    assert_eq!(d.why.reason, Reason::RestartingFailedSeed);
}

#[test]
fn cluster_that_had_members_is_never_bootstrapped_again() {
    let now = Instant::now();
    let obs = World::empty(now).previously_bootstrapped().build();
    let d = run(State::default(), &obs, &spec(3, "3.5.21"));
    assert!(d.actions.is_empty());
    assert_eq!(
        d.state.phase,
        Phase::Blocked {
            reason: Reason::AllMembersLost
        }
    );
}

#[test]
fn unreachable_etcd_with_live_pods_blocks_without_acting() {
    let now = Instant::now();
    let obs = World::healthy(now, 3, "3.5.21").etcd_down().build();
    let d = run(running_state(), &obs, &spec(3, "3.5.21"));
    assert!(d.actions.is_empty());
    assert_eq!(d.why.reason, Reason::EtcdUnreachable);
}

#[test]
fn restarted_operator_with_running_pods_but_no_answer_yet_does_not_bootstrap() {
    let now = Instant::now();
    let obs = World::healthy(now, 1, "3.5.21").etcd_down().build();
    let d = run(State::default(), &obs, &spec(3, "3.5.21"));
    assert!(
        !d.actions
            .iter()
            .any(|a| matches!(a, Action::CreateSeed { .. }))
    );
    assert_eq!(d.why.reason, Reason::WaitingForSeed);
}

#[test]
fn healthy_seed_grows_by_one_learner_when_version_supports_it() {
    let now = Instant::now();
    let obs = World::healthy(now, 1, "3.4.23").build();
    let d = run(State::default(), &obs, &spec(3, "3.4.23"));
    assert_eq!(d.actions, vec![add(true, "3.4.23")]);
    assert_eq!(d.state.phase, Phase::Scaling { from: 1, to: 3 });
    assert!(d.state.bootstrapped);
}

#[test]
fn clusters_older_than_3_4_add_voting_members() {
    let now = Instant::now();
    let obs = World::healthy(now, 1, "3.3.25").build();
    let d = run(running_state(), &obs, &spec(3, "3.3.25"));
    assert_eq!(d.actions, vec![add(false, "3.3.25")]);
}

#[test]
fn started_learner_is_promoted_before_anything_else() {
    let now = Instant::now();
    let obs = World::healthy(now, 2, "3.5.21").learner(2).build();
    let d = run(running_state(), &obs, &spec(3, "3.5.21"));
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
fn unhealthy_member_blocks_scaling_until_it_recovers() {
    let now = Instant::now();
    let obs = World::healthy(now, 3, "3.5.21").unreachable(3).build();
    let d = run(running_state(), &obs, &spec(5, "3.5.21"));
    assert!(d.actions.is_empty());
    assert_eq!(d.why.reason, Reason::WaitingForHealthyMembers);
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

#[test]
fn joining_member_with_a_pod_is_waited_for() {
    let now = Instant::now();
    let obs = World::healthy(now, 1, "3.5.21")
        .unstarted(7, "demo-abcde", true)
        .extra_pod("demo-abcde", PodPhase::Pending)
        .build();
    let d = run(running_state(), &obs, &spec(3, "3.5.21"));
    assert!(d.actions.is_empty());
    assert_eq!(d.why.reason, Reason::WaitingForJoin);
}

#[test]
fn member_that_never_starts_is_removed_after_the_deadline() {
    let now = Instant::now();
    let world = || {
        World::healthy(now, 1, "3.5.21")
            .unstarted(7, "demo-abcde", true)
            .extra_pod("demo-abcde", PodPhase::Pending)
    };
    let first = run(running_state(), &world().build(), &spec(3, "3.5.21"));
    assert!(first.actions.is_empty());
    let mut obs = world().build();
    obs.now = later(now, 91);
    let d = run(first.state, &obs, &spec(3, "3.5.21"));
    assert_eq!(
        d.actions,
        vec![
            Action::RemoveMember {
                id: 7,
                name: "demo-abcde".into()
            },
            Action::DeletePod {
                name: "demo-abcde".into()
            }
        ]
    );
    assert_eq!(d.why.reason, Reason::RemovingUnstartedMember);
}

#[test]
fn joining_member_whose_pod_failed_is_removed_at_once() {
    let now = Instant::now();
    let obs = World::healthy(now, 1, "3.5.21")
        .unstarted(7, "demo-abcde", true)
        .extra_pod("demo-abcde", PodPhase::Failed)
        .build();
    let d = run(running_state(), &obs, &spec(3, "3.5.21"));
    assert_eq!(d.why.reason, Reason::RemovingUnstartedMember);
    assert!(matches!(d.actions[0], Action::RemoveMember { id: 7, .. }));
}

#[test]
fn member_whose_pod_failed_is_removed_then_its_pod_deleted() {
    let now = Instant::now();
    let obs = World::healthy(now, 3, "3.5.21")
        .unreachable(2)
        .pod("m2", |p| p.phase = PodPhase::Failed)
        .build();
    let d = run(running_state(), &obs, &spec(3, "3.5.21"));
    assert_eq!(
        d.actions,
        vec![
            Action::RemoveMember {
                id: 2,
                name: "m2".into()
            },
            Action::DeletePod { name: "m2".into() }
        ]
    );
    assert_eq!(d.state.phase, Phase::Recovering);
    assert_eq!(d.why.reason, Reason::ReplacingDeadMember);
}

#[test]
fn member_whose_pod_is_gone_is_removed() {
    let now = Instant::now();
    let obs = World::healthy(now, 3, "3.5.21")
        .unreachable(3)
        .without_pod("m3")
        .build();
    let d = run(running_state(), &obs, &spec(3, "3.5.21"));
    assert_eq!(
        d.actions,
        vec![Action::RemoveMember {
            id: 3,
            name: "m3".into()
        }]
    );
}

#[test]
fn after_a_dead_member_is_removed_a_replacement_is_added() {
    let now = Instant::now();
    let obs = World::healthy(now, 2, "3.5.21").build();
    let d = run(running_state(), &obs, &spec(3, "3.5.21"));
    assert_eq!(d.actions, vec![add(true, VERSION)]);
}

#[test]
fn member_unhealthy_past_the_deadline_is_replaced_but_not_before() {
    let now = Instant::now();
    let world = || World::healthy(now, 3, "3.5.21").unreachable(3);
    let first = run(running_state(), &world().build(), &spec(3, "3.5.21"));
    assert!(first.actions.is_empty());
    let mut obs = world().build();
    obs.now = later(now, 121);
    let d = run(first.state, &obs, &spec(3, "3.5.21"));
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
    let mut healthy = World::healthy(now, 3, "3.5.21").build();
    healthy.now = later(now, 60);
    let second = run(first.state, &healthy, &spec(3, "3.5.21"));
    assert!(second.state.unhealthy_since.is_empty());
    let mut sick = World::healthy(now, 3, "3.5.21").unreachable(3).build();
    sick.now = later(now, 150);
    let third = run(second.state, &sick, &spec(3, "3.5.21"));
    assert!(third.actions.is_empty(), "{:?}", third.actions);
}

#[test]
fn lost_quorum_is_reported_and_nothing_is_removed() {
    let now = Instant::now();
    let obs = World::healthy(now, 3, "3.5.21")
        .unreachable(2)
        .unreachable(3)
        .pod("m2", |p| p.phase = PodPhase::Failed)
        .build();
    let d = run(running_state(), &obs, &spec(3, "3.5.21"));
    assert!(d.actions.is_empty());
    assert_eq!(
        d.state.phase,
        Phase::Blocked {
            reason: Reason::QuorumLost
        }
    );
}

#[test]
fn scale_down_removes_a_non_leader_member_first_from_etcd_then_its_pod() {
    let now = Instant::now();
    let obs = World::healthy(now, 5, "3.5.21").build();
    let d = run(running_state(), &obs, &spec(3, "3.5.21"));
    assert_eq!(
        d.actions,
        vec![
            Action::RemoveMember {
                id: 5,
                name: "m5".into()
            },
            Action::DeletePod { name: "m5".into() }
        ]
    );
    assert_eq!(d.state.phase, Phase::Scaling { from: 5, to: 3 });
}

#[test]
fn scale_down_never_removes_the_leader() {
    let now = Instant::now();
    let mut w = World::healthy(now, 3, "3.5.21").build();
    for h in w.health.values_mut() {
        h.leader = Some(3);
    }
    let d = run(running_state(), &w, &spec(2, "3.5.21"));
    assert!(matches!(d.actions[0], Action::RemoveMember { id: 2, .. }));
}

#[test]
fn a_healthy_two_member_cluster_scales_down_to_one_by_removing_the_follower() {
    let now = Instant::now();
    let mut obs = World::healthy(now, 2, "3.5.21").build();
    for h in obs.health.values_mut() {
        h.leader = Some(1);
    }
    let d = run(running_state(), &obs, &spec(1, "3.5.21"));
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
    let obs = World::healthy(now, 2, "3.5.21").unreachable(2).build();
    let d = run(running_state(), &obs, &spec(1, "3.5.21"));
    assert!(
        !d.actions.iter().any(|a| matches!(a, Action::RemoveMember { .. })),
        "{:?}",
        d.actions
    );
    assert_ne!(d.state.phase, Phase::Running);
}

#[test]
fn converged_cluster_is_running_and_does_nothing() {
    let now = Instant::now();
    let obs = World::healthy(now, 3, "3.5.21").build();
    let d = run(running_state(), &obs, &spec(3, "3.5.21"));
    assert!(d.actions.is_empty());
    assert_eq!(d.state.phase, Phase::Running);
    assert_eq!(d.why.reason, Reason::Converged);
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
            to: "3.5.21".parse().unwrap()
        }]
    );
    assert!(matches!(d.state.phase, Phase::Upgrading { .. }));

    let obs = World::healthy(now, 3, "3.4.23")
        .runs(2, "3.5.21")
        .runs(3, "3.5.21")
        .pod("m2", |p| p.version = Some("3.5.21".into()))
        .pod("m3", |p| p.version = Some("3.5.21".into()))
        .build();
    let d = run(running_state(), &obs, &spec(3, "3.5.21"));
    assert!(matches!(&d.actions[0], Action::UpgradeMember { name, .. } if name == "m1"));
}

#[test]
fn upgrade_waits_for_the_restarted_member_to_run_the_new_version() {
    let now = Instant::now();
    let obs = World::healthy(now, 3, "3.4.23")
        .pod("m2", |p| p.version = Some("3.5.21".into()))
        .build();
    let d = run(running_state(), &obs, &spec(3, "3.5.21"));
    assert!(d.actions.is_empty());
    assert_eq!(d.why.reason, Reason::WaitingForUpgradedMember);
}

#[test]
fn downgrade_is_refused_and_nothing_changes() {
    let now = Instant::now();
    let obs = World::healthy(now, 3, "3.5.21").build();
    let d = run(running_state(), &obs, &spec(3, "3.4.23"));
    assert!(d.actions.is_empty());
    assert_eq!(d.why.reason, Reason::DowngradeRefused);
    assert_eq!(d.state.phase, Phase::Running);
}

#[test]
fn skipping_a_minor_version_is_refused() {
    let now = Instant::now();
    let obs = World::healthy(now, 3, "3.4.23").build();
    let d = run(running_state(), &obs, &spec(3, "3.6.5"));
    assert!(d.actions.is_empty());
    assert_eq!(d.why.reason, Reason::VersionSkipRefused);
}

#[test]
fn scaling_comes_before_upgrading() {
    let now = Instant::now();
    let obs = World::healthy(now, 3, "3.4.23").build();
    let d = run(running_state(), &obs, &spec(4, "3.5.21"));
    assert_eq!(d.actions, vec![add(true, VERSION)]);
}

#[test]
fn paused_cluster_only_observes() {
    let now = Instant::now();
    let obs = World::healthy(now, 3, "3.5.21")
        .unreachable(3)
        .pod("m3", |p| p.phase = PodPhase::Failed)
        .build();
    let mut s = spec(3, "3.5.21");
    s.paused = true;
    let d = run(running_state(), &obs, &s);
    assert!(d.actions.is_empty());
    assert_eq!(d.state.phase, Phase::Paused);
}

#[test]
fn tls_request_blocks_instead_of_running_unencrypted() {
    let now = Instant::now();
    let mut s = spec(3, "3.5.21");
    s.tls_requested = true;
    let d = run(State::default(), &World::empty(now).build(), &s);
    assert!(d.actions.is_empty());
    assert_eq!(d.why.reason, Reason::TlsNotSupported);
}

#[test]
fn invalid_version_blocks_with_a_clear_message() {
    let now = Instant::now();
    let d = run(
        State::default(),
        &World::empty(now).build(),
        &spec(3, "latest"),
    );
    assert!(d.actions.is_empty());
    assert_eq!(d.why.reason, Reason::InvalidSpec);
    assert!(d.why.message.contains("latest"));
}

#[test]
fn missing_services_are_recreated_for_a_running_cluster() {
    let now = Instant::now();
    let obs = World::healthy(now, 3, "3.5.21").without_services().build();
    let d = run(running_state(), &obs, &spec(3, "3.5.21"));
    assert_eq!(d.actions, vec![Action::EnsureServices]);
}

#[test]
fn pod_without_member_is_deleted_only_after_the_grace_time() {
    let now = Instant::now();
    let world = || World::healthy(now, 3, "3.5.21").extra_pod("m9", PodPhase::Running);
    let first = run(running_state(), &world().build(), &spec(3, "3.5.21"));
    assert!(first.actions.is_empty());
    let mut obs = world().build();
    obs.now = now + ORPHAN_POD_GRACE;
    let d = run(first.state, &obs, &spec(3, "3.5.21"));
    assert_eq!(d.actions, vec![Action::DeletePod { name: "m9".into() }]);
    assert_eq!(d.why.reason, Reason::DeletingOrphanPod);
}

#[test]
fn at_most_one_membership_change_per_decision() {
    let now = Instant::now();
    let cases = [
        World::healthy(now, 1, "3.5.21").build(),
        World::healthy(now, 5, "3.5.21").build(),
        World::healthy(now, 3, "3.5.21")
            .unreachable(2)
            .pod("m2", |p| p.phase = PodPhase::Failed)
            .build(),
    ];
    for obs in cases {
        let d = run(running_state(), &obs, &spec(3, "3.5.21"));
        let changes = d.actions.iter().filter(|a| a.changes_membership()).count();
        assert!(changes <= 1, "{:?}", d.actions);
    }
}

#[test]
fn new_members_never_run_a_refused_target_version() {
    let now = Instant::now();
    let obs = World::healthy(now, 2, "3.5.21").build();
    let d = run(running_state(), &obs, &spec(3, "3.4.23"));
    assert_eq!(d.actions, vec![add(true, "3.5.21")]);
    let d = run(running_state(), &obs, &spec(3, "3.7.0"));
    assert_eq!(d.actions, vec![add(true, "3.5.21")]);
}
