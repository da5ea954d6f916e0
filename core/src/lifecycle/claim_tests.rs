//! Members on claims are never replaced, nor their claims deleted, on evidence that can
//! be wrong (issue 34): a member whose claim holds its data comes back on it.

use std::time::Duration;

use tokio::time::Instant;

use super::fixtures::{World, assert_no_action, running_state};
use super::*;

const VERSION: &str = "3.5.35";

fn spec() -> DesiredCluster {
    DesiredCluster::new(3, VERSION)
}

fn run(state: State, obs: &Observation) -> Decision {
    decide(state, obs, &spec(), &Deadlines::default())
}

/// Three healthy members on bound claims, the cluster recorded.
fn claimed(now: Instant) -> World {
    World::healthy(now, 3, VERSION).on_volumes().bootstrapped()
}

#[test]
fn a_failed_pod_on_a_claim_holding_data_is_recreated_on_its_claim_and_its_member_kept() {
    // A node-pressure eviction or a graceful node shutdown leaves the pod Failed.
    let obs = claimed(Instant::now())
        .unreachable(2)
        .pod("m2", |p| {
            p.phase = PodPhase::Failed;
            p.ready = false;
        })
        .build();
    let d = run(running_state(), &obs);
    assert_eq!(d.actions, [Action::RecreatePod { name: "m2".into() }]);
    assert_no_action!(d, Action::RemoveMember { .. } | Action::DeletePod { .. });
}

#[test]
fn after_every_node_shut_down_each_failed_pod_on_a_claim_is_recreated_without_quorum() {
    let mut world = claimed(Instant::now()).etcd_down();
    for name in ["m1", "m2", "m3"] {
        world = world.pod(name, |p| {
            p.phase = PodPhase::Failed;
            p.ready = false;
        });
    }
    let d = run(running_state(), &world.build());
    let recreated: Vec<Action> = ["m1", "m2", "m3"]
        .map(|name| Action::RecreatePod { name: name.into() })
        .to_vec();
    assert_eq!(d.actions, recreated, "{}", d.why.message);
}

#[test]
fn a_member_on_a_claim_unreachable_past_the_deadline_is_never_replaced() {
    // Its node stopped reporting: the pod is not ready and etcd does not answer.
    let now = Instant::now();
    let world = || claimed(now).unreachable(3).pod("m3", |p| p.ready = false);
    let first = run(running_state(), &world().build());
    let mut obs = world().build();
    obs.now = now + Duration::from_secs(600);
    let d = run(first.state, &obs);
    assert_no_action!(d, Action::RemoveMember { .. } | Action::DeletePod { .. });
    assert!(d.why.message.contains("m3"), "{}", d.why.message);
    assert!(d.why.message.contains("claim"), "{}", d.why.message);
}

#[test]
fn a_member_on_an_empty_dir_beside_claimed_ones_is_still_replaced_when_its_pod_failed() {
    // Mid-move onto claims: m3's pod is still on an emptyDir (no claim of its own).
    let obs = World::healthy(Instant::now(), 3, VERSION)
        .claim("m1", ClaimPhase::Bound)
        .claim("m2", ClaimPhase::Bound)
        .bootstrapped()
        .unreachable(3)
        .pod("m3", |p| p.phase = PodPhase::Failed)
        .build();
    let d = run(running_state(), &obs);
    assert!(
        matches!(d.actions.first(), Some(Action::RemoveMember { id: 3, .. })),
        "{:?}",
        d.actions
    );
}

#[test]
fn no_message_advises_deleting_the_cluster_while_pods_or_claims_may_hold_data() {
    let mut world = claimed(Instant::now()).etcd_down();
    for name in ["m1", "m2", "m3"] {
        world = world.pod(name, |p| p.terminating = true);
    }
    let every_pod_going = world.build();
    let failed_on_empty_dir = World::empty(Instant::now())
        .bootstrapped()
        .extra_pod("demo-a", PodPhase::Failed)
        .build();
    for obs in [every_pod_going, failed_on_empty_dir] {
        let d = run(running_state(), &obs);
        assert_no_action!(d, Action::DeletePod { .. } | Action::RemoveMember { .. });
        assert!(
            !d.why.message.contains("delete and recreate"),
            "{}",
            d.why.message
        );
    }
}
