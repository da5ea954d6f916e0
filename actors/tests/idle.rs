//! What a healthy cluster costs while nothing happens, and how fast its actor still
//! reacts: the back-off against the simulated cluster of `fakes`, in paused (virtual) time.

use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use etcd_operator_actors::cluster::{ClusterActor, ClusterConfig, ClusterDeps, Nudge, SpecChanged};
use etcd_operator_actors::metrics::{CallLabels, Telemetry};
use etcd_operator_core::lifecycle::{DesiredCluster, RecoveryPolicy, RecoverySpec};
use etcd_operator_core::topology::Topology;
use etcd_operator_fakes::FakeCluster;
use slog::{Logger, o};
use tokio::time::{Instant, sleep};

const V: &str = "3.5.35";

fn start(fake: &FakeCluster, spec: DesiredCluster, telemetry: &Telemetry) -> Addr<ClusterActor> {
    let deps = ClusterDeps {
        kube: Arc::new(fake.clone()),
        etcd: Arc::new(fake.clone()),
        telemetry: telemetry.clone(),
        logger: Logger::root(slog::Discard, o!()),
    };
    let topology = fake.topology().clone();
    ClusterActor::new(topology, spec, ClusterConfig::default(), deps).start()
}

/// etcd calls the actor made, as its metrics count them.
fn etcd_calls(telemetry: &Telemetry) -> u64 {
    ["list", "status", "add", "remove", "promote"]
        .into_iter()
        .map(|call| {
            let labels = CallLabels { call };
            telemetry.metrics.etcd_calls.get_or_create(&labels).get()
        })
        .sum()
}

/// Sleeps in virtual time until `done` holds (checking every 50 ms), at most `limit`.
async fn within(limit: Duration, what: &str, done: impl Fn() -> bool) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < deadline, "not within {limit:?}: {what}");
        sleep(Duration::from_millis(50)).await;
    }
}

/// A healthy 3-member cluster whose actor has seen it settled for `idle`.
async fn idle_for(idle: Duration, spec: DesiredCluster) -> (FakeCluster, Addr<ClusterActor>) {
    tokio::time::pause();
    let fake = FakeCluster::running(Topology::new("default", "demo"), 3, V);
    let actor = start(&fake, spec, &Telemetry::default());
    within(Duration::from_secs(60), "converged", || {
        fake.is_converged(3, V)
    })
    .await;
    sleep(idle).await;
    (fake, actor)
}

#[actix_rt::test]
async fn an_idle_healthy_three_member_cluster_makes_at_most_twelve_etcd_calls_a_minute() {
    tokio::time::pause();
    let fake = FakeCluster::running(Topology::new("default", "demo"), 3, V);
    let telemetry = Telemetry::default();
    let _actor = start(&fake, DesiredCluster::new(3, V), &telemetry);
    within(Duration::from_secs(60), "converged", || {
        fake.is_converged(3, V)
    })
    .await;
    sleep(Duration::from_secs(120)).await;

    let (before, counted_before) = (fake.calls(), etcd_calls(&telemetry));
    sleep(Duration::from_secs(600)).await;
    let (after, counted_after) = (fake.calls(), etcd_calls(&telemetry));

    let made = (after.list + after.status) - (before.list + before.status);
    assert_eq!(
        counted_after - counted_before,
        made,
        "the metric counts every call"
    );
    assert!(made <= 12 * 10, "{made} etcd calls in 10 idle minutes");
    assert!(made > 0, "an idle cluster is still looked at");
    assert_eq!(after.membership_changes(), before.membership_changes());
}

#[actix_rt::test]
async fn a_pod_event_after_a_long_idle_period_is_seen_at_once() {
    let (fake, actor) = idle_for(Duration::from_secs(600), DesiredCluster::new(3, V)).await;
    let observed = fake.calls().observe;

    assert!(fake.kill_member("demo-m2"));
    actor.do_send(Nudge);

    within(Duration::from_millis(500), "the nudge made a tick", || {
        fake.calls().observe > observed
            && fake
                .last_status()
                .is_some_and(|s| s.ready.len() == 2 && !s.ready.iter().any(|r| r == "demo-m2"))
    })
    .await;
}

#[actix_rt::test]
async fn a_spec_change_after_a_long_idle_period_is_acted_on_at_once() {
    let (fake, actor) = idle_for(Duration::from_secs(600), DesiredCluster::new(3, V)).await;
    let adds = fake.calls().add;

    actor.do_send(SpecChanged(DesiredCluster::new(4, V)));

    within(Duration::from_millis(500), "a member added", || {
        fake.calls().add > adds
    })
    .await;
}

#[actix_rt::test]
async fn a_new_rotate_ca_annotation_after_a_long_idle_period_makes_a_tick_at_once() {
    let (fake, actor) = idle_for(Duration::from_secs(600), DesiredCluster::new(3, V)).await;
    let observed = fake.calls().observe;
    let mut spec = DesiredCluster::new(3, V);
    spec.requests.rotate_ca = Some("2026-12-01".into());

    actor.do_send(SpecChanged(spec));

    within(Duration::from_millis(100), "a tick", || {
        fake.calls().observe > observed
    })
    .await;
}

#[actix_rt::test]
async fn a_certificate_renewal_inside_the_idle_interval_wakes_the_actor_at_its_time() {
    let (fake, _actor) = idle_for(Duration::from_secs(600), DesiredCluster::new(3, V)).await;
    // Announced long before it is due (the adapter knows a leaf's renewal time from its
    // issue), and neither on the idle grid nor after an event.
    let renewal = Instant::now() + Duration::from_millis(47_300);
    fake.announce_certificate_event(renewal);

    sleep(Duration::from_secs(60)).await;

    let seen = fake.observed_at();
    assert!(
        seen.iter()
            .any(|t| *t >= renewal && *t <= renewal + Duration::from_millis(300)),
        "no observation right at the renewal time {renewal:?}: {seen:?}"
    );
}

#[actix_rt::test]
async fn a_quorum_loss_deadline_wakes_the_actor_at_its_time() {
    let mut spec = DesiredCluster::new(3, V);
    spec.recovery = RecoverySpec {
        policy: RecoveryPolicy::FromSurvivor,
        requested: None,
        quorum_loss: Duration::from_millis(7_300),
        ..RecoverySpec::default()
    };
    let (fake, _actor) = idle_for(Duration::from_secs(600), spec).await;
    let fake = fake.on_claims();
    // A power cut: two members gone with their data, and no pod event reaches the actor.
    fake.lose_member_data("demo-m1");
    fake.lose_member_data("demo-m2");
    let lost = Instant::now();

    within(Duration::from_secs(60), "a recovery recorded", || {
        fake.recovery().is_some()
    })
    .await;
    let recorded = Instant::now();

    // The loss is seen by the next idle tick (the first observation after it); the
    // recovery starts when it has lasted quorumLossSeconds from there, not at the next
    // regular tick after that (ticks 2 s apart would start it 0.7 s late).
    let seen = fake
        .observed_at()
        .into_iter()
        .find(|t| *t >= lost)
        .expect("the loss was observed");
    let due = seen + Duration::from_millis(7_300);
    assert!(
        recorded >= due && recorded <= due + Duration::from_millis(400),
        "recovery recorded {:?} after it was due",
        recorded.saturating_duration_since(due)
    );
    assert!(seen - lost <= ClusterConfig::default().idle_interval);
}
