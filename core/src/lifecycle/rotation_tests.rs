//! CA rotation and trust-bundle restarts: each step of a rotation begins only when every
//! member runs with what the previous one gave it, steps go strictly in order, and a
//! rotation resumes from what the CA Secret records.

use tokio::time::Instant;

use super::fixtures::{World, running_state, unsettled_deadlines};
use super::tls::{RotationStep, rotation};
use super::*;

const VERSION: &str = "3.5.21";
const TEMPLATE: &str = "tmpl";

fn spec(mode: TlsMode) -> DesiredCluster {
    let mut spec = DesiredCluster::new(3, VERSION);
    spec.tls = mode;
    spec.pod_template = TEMPLATE.into();
    spec
}

/// A healthy 3-member TLS cluster on claims whose pods started trusting the bundles
/// `trusts` (m1, m2, m3; m1 leads), the Secrets now holding `current`, with `rotation`.
fn world(trusts: [&str; 3], current: &str, rotation: CaRotationView) -> World {
    let mut world = World::healthy(Instant::now(), 3, VERSION)
        .pods_tls(TlsMode::Auto)
        .on_volumes();
    for (i, trust) in trusts.iter().enumerate() {
        let annotation = template_with_trust(TEMPLATE, Some(trust));
        world = world.pod(&format!("m{}", i + 1), |p| {
            p.pod_template = Some(annotation)
        });
    }
    world.certificates(TlsObservation {
        trust: Some(current.into()),
        rotation,
        ..TlsObservation::default()
    })
}

fn at(step: Option<CaRotationStep>) -> CaRotationView {
    CaRotationView {
        step,
        due: step
            .is_none()
            .then(|| "annotation rotate-ca is \"1\"".into()),
        propagated: false,
    }
}

fn decide_on(state: State, world: World, mode: TlsMode) -> Decision {
    decide(state, &world.build(), &spec(mode), &unsettled_deadlines())
}

fn advances(d: &Decision, from: Option<CaRotationStep>, to: Option<CaRotationStep>) {
    assert_eq!(d.why.reason, Reason::RotatingCa, "{}", d.why.message);
    assert_eq!(
        d.actions,
        vec![Action::AdvanceCaRotation { from, to }],
        "{}",
        d.why.message
    );
}

fn never_advances(d: &Decision) {
    assert!(
        !d.actions
            .iter()
            .any(|a| matches!(a, Action::AdvanceCaRotation { .. })),
        "{:?}: {}",
        d.actions,
        d.why.message
    );
}

use CaRotationStep::{DropOldCa, ReissueLeaves, TrustNewCa};

#[test]
fn steps_follow_each_other_in_order_and_none_is_skipped() {
    assert_eq!(CaRotationStep::after(None), Some(TrustNewCa));
    assert_eq!(CaRotationStep::after(Some(TrustNewCa)), Some(ReissueLeaves));
    assert_eq!(CaRotationStep::after(Some(ReissueLeaves)), Some(DropOldCa));
    assert_eq!(CaRotationStep::after(Some(DropOldCa)), None);
    for step in [TrustNewCa, ReissueLeaves, DropOldCa] {
        assert_eq!(CaRotationStep::parse(step.as_str()), Some(step));
    }
}

#[test]
fn a_due_rotation_starts_with_the_new_ca_trusted_on_a_settled_cluster() {
    let d = decide_on(
        running_state(),
        world(["t1", "t1", "t1"], "t1", at(None)),
        TlsMode::Auto,
    );
    advances(&d, None, Some(TrustNewCa));
    assert_eq!(d.state.phase, Phase::Restarting);
}

#[test]
fn a_rotation_waits_for_every_member_to_be_healthy_before_it_starts() {
    let w = world(["t1", "t1", "t1"], "t1", at(None)).unreachable(2);
    let d = decide_on(running_state(), w, TlsMode::Auto);
    never_advances(&d);
    assert!(d.actions.is_empty(), "{:?}", d.actions);
}

#[test]
fn no_step_begins_while_the_certificates_of_the_last_one_are_being_written() {
    // Just after TrustNewCA was recorded: the leaf Secrets still hold the old bundle.
    let mut w = world(["t1", "t1", "t1"], "t1", at(Some(TrustNewCa)));
    w.obs.tls.to_issue = vec!["Secret demo-peer-tls: its CA bundle is not the one".into()];
    let d = decide_on(running_state(), w, TlsMode::Auto);
    assert_eq!(
        d.actions,
        vec![Action::IssueCertificates],
        "{}",
        d.why.message
    );
}

#[test]
fn members_restart_onto_the_new_bundle_one_at_a_time_before_leaves_are_reissued() {
    let trusting = at(Some(TrustNewCa));
    let d = decide_on(
        running_state(),
        world(["t1", "t1", "t1"], "t2", trusting.clone()),
        TlsMode::Auto,
    );
    assert_eq!(
        d.actions,
        vec![Action::RecreatePod { name: "m2".into() }],
        "{}",
        d.why.message
    );
    assert_eq!(d.why.reason, Reason::RestartingMember);
    assert!(d.why.message.contains("CA bundle"), "{}", d.why.message);

    // m2 and m3 done, the leader m1 still on the old bundle: restarted last, once it
    // handed leadership over.
    let d = decide_on(
        d.state,
        world(["t1", "t2", "t2"], "t2", trusting.clone()),
        TlsMode::Auto,
    );
    assert_eq!(d.why.reason, Reason::MovingLeader, "{}", d.why.message);
    let d = decide_on(
        d.state,
        world(["t1", "t2", "t2"], "t2", trusting.clone()).led_by(2),
        TlsMode::Auto,
    );
    assert_eq!(d.actions, vec![Action::RecreatePod { name: "m1".into() }]);

    let d = decide_on(
        d.state,
        world(["t2", "t2", "t2"], "t2", trusting),
        TlsMode::Auto,
    );
    advances(&d, Some(TrustNewCa), Some(ReissueLeaves));
}

#[test]
fn the_old_ca_is_dropped_only_once_the_reissued_certificates_reached_every_member() {
    let mut reissued = at(Some(ReissueLeaves));
    let d = decide_on(
        running_state(),
        world(["t2", "t2", "t2"], "t2", reissued.clone()),
        TlsMode::Auto,
    );
    never_advances(&d);
    assert!(d.actions.is_empty(), "{:?}", d.actions);
    assert_eq!(d.why.reason, Reason::RotatingCa);

    reissued.propagated = true;
    let d = decide_on(
        d.state,
        world(["t2", "t2", "t2"], "t2", reissued),
        TlsMode::Auto,
    );
    advances(&d, Some(ReissueLeaves), Some(DropOldCa));
}

#[test]
fn the_old_ca_is_never_dropped_while_a_pod_runs_another_bundle() {
    let reissued = CaRotationView {
        propagated: true,
        ..at(Some(ReissueLeaves))
    };
    // A member still on the bundle of before the rotation: restarted first, no advance.
    let d = decide_on(
        running_state(),
        world(["t2", "t1", "t2"], "t2", reissued.clone()),
        TlsMode::Auto,
    );
    never_advances(&d);
    assert_eq!(d.actions, vec![Action::RecreatePod { name: "m2".into() }]);

    // A pod that did not record its trust, or a pod without a member: the decision itself
    // refuses, whatever the rolling restart made of them.
    for unknown in [None, Some(TEMPLATE.to_string())] {
        let w = world(["t2", "t2", "t2"], "t2", reissued.clone())
            .pod("m3", |p| p.pod_template = unknown);
        let step = rotation(&w.build(), &spec(TlsMode::Auto));
        assert!(
            matches!(&step, Some(RotationStep::Wait(why)) if why.message.contains("m3")),
            "{step:?}"
        );
    }
}

#[test]
fn an_operator_restarted_mid_rotation_resumes_at_the_recorded_step() {
    // A fresh actor state knows nothing: the step comes from the CA Secret.
    let reissued = CaRotationView {
        propagated: true,
        ..at(Some(ReissueLeaves))
    };
    let d = decide_on(
        State::default(),
        world(["t2", "t2", "t2"], "t2", reissued),
        TlsMode::Auto,
    );
    advances(&d, Some(ReissueLeaves), Some(DropOldCa));
    // After DropOldCA was recorded, members restart onto the new bundle first.
    let d = decide_on(
        State::default(),
        world(["t2", "t2", "t2"], "t3", at(Some(DropOldCa))),
        TlsMode::Auto,
    );
    never_advances(&d);
    assert!(matches!(d.actions.as_slice(), [Action::RecreatePod { .. }]));
}

#[test]
fn the_rotation_completes_when_every_member_trusts_the_new_ca_only() {
    let d = decide_on(
        running_state(),
        world(["t3", "t3", "t3"], "t3", at(Some(DropOldCa))),
        TlsMode::Auto,
    );
    advances(&d, Some(DropOldCa), None);
    assert_eq!(d.state.phase, Phase::Running);
}

#[test]
fn without_a_rotation_a_settled_tls_cluster_converges() {
    let d = decide_on(
        running_state(),
        world(["t1", "t1", "t1"], "t1", CaRotationView::default()),
        TlsMode::Auto,
    );
    assert_eq!(d.why.reason, Reason::Converged, "{}", d.why.message);
    assert!(d.actions.is_empty());
}

#[test]
fn a_static_cluster_restarts_members_when_the_user_changes_the_trusted_ca() {
    let w = world(["t1", "t1", "t1"], "t2", CaRotationView::default()).pods_tls(TlsMode::Static);
    let d = decide_on(running_state(), w, TlsMode::Static);
    assert_eq!(d.actions, vec![Action::RecreatePod { name: "m2".into() }]);
    assert!(d.why.message.contains("CA bundle"), "{}", d.why.message);
    // A static cluster never rotates a CA itself.
    let w = world(["t1", "t1", "t1"], "t1", at(None)).pods_tls(TlsMode::Static);
    let d = decide_on(running_state(), w, TlsMode::Static);
    assert_eq!(d.why.reason, Reason::Converged, "{}", d.why.message);
}

#[test]
fn the_trust_recorded_in_a_pod_is_compared_only_with_tls_and_when_known() {
    let tls = spec(TlsMode::Auto);
    let w = world(["t1", "t1", "t1"], "t2", CaRotationView::default());
    let obs = w.build();
    assert!(is_stale(&obs.pods[0], &tls, &obs));
    let mut unknown = obs.clone();
    unknown.tls.trust = None;
    assert!(!is_stale(&unknown.pods[0], &tls, &unknown));
    let mut plain = DesiredCluster::new(3, VERSION);
    plain.pod_template = TEMPLATE.into();
    let mut pod = obs.pods[0].clone();
    pod.pod_template = Some(TEMPLATE.into());
    assert!(!is_stale(&pod, &plain, &obs));
    assert_eq!(template_with_trust("abc", None), "abc");
}
