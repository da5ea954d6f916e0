//! The Cluster actor against the simulated cluster of `fakes`, in paused (virtual) time.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix::prelude::*;
use etcd_operator_actors::cluster::{
    ClusterActor, ClusterConfig, ClusterDeps, Inspect, Nudge, Retire, SpecChanged,
};
use etcd_operator_actors::debug::Received;
use etcd_operator_actors::metrics::{ErrorLabels, PhaseLabels, Telemetry};
use etcd_operator_actors::ports::{ApiError, EtcdErrorKind, InitialState, ServiceKind};
use etcd_operator_actors::trace::{Step, StepRecord};
use etcd_operator_core::lifecycle::{DesiredCluster, Phase};
use etcd_operator_core::topology::Topology;
use etcd_operator_fakes::FakeCluster;
use serde_json::Value;
use slog::{Logger, o};
use tokio::time::Instant;

const V: &str = "3.5.21";

fn logger() -> Logger {
    Logger::root(slog::Discard, o!())
}

fn demo() -> Topology {
    Topology::new("default", "demo")
}

/// A log drain that keeps each record's level and message.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<(slog::Level, String)>>>);

impl slog::Drain for Captured {
    type Ok = ();
    type Err = slog::Never;

    fn log(&self, record: &slog::Record, _: &slog::OwnedKVList) -> Result<(), slog::Never> {
        let line = (record.level(), record.msg().to_string());
        self.0.lock().unwrap().push(line);
        Ok(())
    }
}

impl Captured {
    /// How many records at `level` say `msg`.
    fn count(&self, level: slog::Level, msg: &str) -> usize {
        let lines = self.0.lock().unwrap();
        lines
            .iter()
            .filter(|(l, m)| *l == level && m == msg)
            .count()
    }
}

fn start(fake: &FakeCluster, spec: DesiredCluster, config: ClusterConfig) -> Addr<ClusterActor> {
    start_with(fake, spec, config, Telemetry::default())
}

fn start_with(
    fake: &FakeCluster,
    spec: DesiredCluster,
    config: ClusterConfig,
    telemetry: Telemetry,
) -> Addr<ClusterActor> {
    start_logging(fake, spec, config, telemetry, logger())
}

fn start_logging(
    fake: &FakeCluster,
    spec: DesiredCluster,
    config: ClusterConfig,
    telemetry: Telemetry,
    logger: Logger,
) -> Addr<ClusterActor> {
    let deps = ClusterDeps {
        kube: Arc::new(fake.clone()),
        etcd: Arc::new(fake.clone()),
        telemetry,
        logger,
    };
    ClusterActor::new(fake.topology().clone(), spec, config, deps).start()
}

/// How many failed etcd calls of `kind` the actors counted.
fn etcd_errors(telemetry: &Telemetry, kind: &'static str) -> u64 {
    let labels = ErrorLabels { kind };
    telemetry.metrics.etcd_errors.get_or_create(&labels).get()
}

/// Waits, in virtual time, until `done` holds for the actor's debug view and the fake;
/// gives up after ten virtual minutes.
async fn until(
    actor: &Addr<ClusterActor>,
    fake: &FakeCluster,
    what: &str,
    done: impl Fn(&Value, &FakeCluster) -> bool,
) -> Value {
    for _ in 0..6_000 {
        let view = actor.send(Inspect).await.expect("cluster actor alive");
        if done(&view, fake) {
            return view;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let view = actor.send(Inspect).await.expect("cluster actor alive");
    panic!(
        "never reached: {what}\nview: {view:#}\nmembers: {:#?}\npods: {:#?}",
        fake.members(),
        fake.pods()
    );
}

/// Converged in the fake, and the actor's last status says Running with `size` ready.
fn running_with(size: usize) -> impl Fn(&Value, &FakeCluster) -> bool {
    move |view, fake| {
        fake.is_converged(size, V)
            && view["status"]["phase"] == "Running"
            && view["status"]["ready"].as_array().map(Vec::len) == Some(size)
    }
}

fn event_reasons(fake: &FakeCluster) -> Vec<String> {
    fake.events().into_iter().map(|e| e.reason).collect()
}

/// Starts an actor asked for `size` members on `V` and waits until they run.
async fn start_running(fake: &FakeCluster, size: usize) -> Addr<ClusterActor> {
    let spec = DesiredCluster::new(size as u32, V);
    let actor = start(fake, spec, ClusterConfig::default());
    let what = format!("{size} running members");
    until(&actor, fake, &what, running_with(size)).await;
    actor
}

/// Starts an actor asked for one member on `V`, and lets half a second of virtual time
/// pass.
async fn start_one_for_half_a_second(fake: &FakeCluster) -> Addr<ClusterActor> {
    let actor = start(fake, DesiredCluster::new(1, V), ClusterConfig::default());
    tokio::time::sleep(Duration::from_millis(500)).await;
    actor
}

/// Starts an actor asked for `size` members on `V`, and the telemetry it reports to.
fn start_measured(fake: &FakeCluster, size: u32) -> (Addr<ClusterActor>, Telemetry) {
    let telemetry = Telemetry::default();
    let spec = DesiredCluster::new(size, V);
    let actor = start_with(fake, spec, ClusterConfig::default(), telemetry.clone());
    (actor, telemetry)
}

/// Kills member `name` and waits until three members run again, none of them `name`.
async fn kill_and_wait_replaced(actor: &Addr<ClusterActor>, fake: &FakeCluster, name: &str) {
    assert!(fake.kill_member(name));
    until(actor, fake, "3 running members again", |view, fake| {
        running_with(3)(view, fake) && fake.members().iter().all(|m| m.name != name)
    })
    .await;
}

/// How many pods were made to seed a new etcd cluster.
fn seeds_made(fake: &FakeCluster) -> usize {
    fake.created_pods()
        .into_iter()
        .filter(|p| matches!(p.state, InitialState::New { .. }))
        .count()
}

/// A running one-member cluster whose next `times` member adds etcd refuses as unhealthy.
fn one_member_refusing_adds(times: usize) -> FakeCluster {
    let fake = FakeCluster::running(demo(), 1, V);
    for _ in 0..times {
        fake.fail_next_add(EtcdErrorKind::UnhealthyCluster);
    }
    fake
}

/// A world without a cluster yet, whose joiners' pods are made before their member add.
fn empty_preparing_joiners() -> FakeCluster {
    let fake = FakeCluster::new(demo());
    fake.set_prepares_joiners(true);
    fake
}

/// The Events of a seed, then of two joins each made of the Events `join`.
fn seed_then_two_joins(join: &[&'static str]) -> Vec<&'static str> {
    [&["SeedCreated"][..], join, join].concat()
}

/// From one member, two learners were added and promoted, one membership change at a
/// time, and nothing removed; the second one's --initial-cluster names the two members
/// before it and itself; they joined without the client Service's label and every pod
/// has it now.
fn assert_grew_by_two_learners_one_at_a_time(fake: &FakeCluster) {
    let calls = fake.calls();
    assert_eq!((calls.add, calls.promote, calls.remove), (2, 2, 0));
    assert_eq!(calls.max_membership_in_flight, 1);
    let created = fake.created_pods();
    assert_eq!(created[2].initial_cluster.matches('=').count(), 3);
    assert!(!created[1].voter && !created[2].voter);
    assert!(fake.pods().iter().all(|p| p.voter), "{:#?}", fake.pods());
}

#[actix_rt::test]
async fn a_three_member_cluster_converges_from_nothing_through_seed_learner_adds_and_promotions() {
    tokio::time::pause();
    let fake = FakeCluster::new(demo());
    let actor = start(&fake, DesiredCluster::new(3, V), ClusterConfig::default());

    let view = until(&actor, &fake, "3 running members", running_with(3)).await;

    assert_eq!(view["phase"], "Running");
    assert_eq!(view["reason"], "Converged");
    assert!(fake.services_present());
    assert_eq!(fake.disruption_budget(), Some(2), "quorum of 3 voters");
    let status = fake.last_status().expect("a status was published");
    assert_eq!(status.phase, Phase::Running);
    assert_eq!(status.ready.len(), 3);
    assert_eq!(status.current_version.as_deref(), Some(V));
    let join = ["MemberAdded", "LearnerPromoted"];
    assert_eq!(event_reasons(&fake), seed_then_two_joins(&join));
    let created = fake.created_pods();
    assert!(matches!(created[0].state, InitialState::New { .. }));
    assert!(
        created[1..]
            .iter()
            .all(|p| p.state == InitialState::Existing)
    );
    assert_grew_by_two_learners_one_at_a_time(&fake);
    assert_eq!(fake.calls().max_etcd_in_flight, 1);
}

#[actix_rt::test]
async fn with_prepared_joiners_each_joiners_pod_exists_before_its_member_add() {
    tokio::time::pause();
    let fake = empty_preparing_joiners();
    start_running(&fake, 3).await;

    let join = ["JoinerPrepared", "MemberAdded", "LearnerPromoted"];
    assert_eq!(event_reasons(&fake), seed_then_two_joins(&join));
    let created = fake.created_pods();
    assert_eq!(created.len(), 3, "no pod made twice: {created:#?}");
    assert_eq!(fake.calls().delete_pod, 0);
    assert_eq!(created[0].prepared_with, None, "the seed is made as before");
    // Each joiner was built to join the members there were.
    assert_eq!(created[1].prepared_with.as_ref().map(Vec::len), Some(1));
    assert_eq!(created[2].prepared_with.as_ref().map(Vec::len), Some(2));
    assert_grew_by_two_learners_one_at_a_time(&fake);
}

#[actix_rt::test]
async fn creating_three_members_traces_each_step_once_and_in_order() {
    tokio::time::pause();
    let fake = empty_preparing_joiners();
    let (actor, telemetry) = start_measured(&fake, 3);
    until(&actor, &fake, "3 running members", running_with(3)).await;

    let records = telemetry.hub.trace().records(Some("default/demo"));
    let key = |r: &StepRecord| (r.step, r.member.clone());
    let mut seen = std::collections::BTreeSet::new();
    assert!(
        records.iter().all(|r| seen.insert(key(r))),
        "a step recorded twice: {records:#?}"
    );
    let created: Vec<String> = fake.created_pods().into_iter().map(|p| p.name).collect();
    let [seed, first, second] = &created[..] else {
        panic!("three pods made: {created:?}");
    };
    let path: Vec<(Step, Option<&str>)> = records
        .iter()
        .filter(|r| {
            use Step::*;
            matches!(
                r.step,
                SpecSeen | SeedPodCreated | JoinerPodCreated | MemberHealthy | Ready
            )
        })
        .map(|r| (r.step, r.member.as_deref()))
        .collect();
    assert_eq!(
        path,
        [
            (Step::SpecSeen, None),
            (Step::SeedPodCreated, Some(seed.as_str())),
            (Step::MemberHealthy, Some(seed.as_str())),
            (Step::JoinerPodCreated, Some(first.as_str())),
            (Step::MemberHealthy, Some(first.as_str())),
            (Step::JoinerPodCreated, Some(second.as_str())),
            (Step::MemberHealthy, Some(second.as_str())),
            (Step::Ready, None),
        ]
    );
    let count = |step: Step| records.iter().filter(|r| r.step == step).count();
    assert_eq!(count(Step::MemberAdded), 2);
    assert_eq!(count(Step::LearnerPromoted), 2);
    assert_eq!(count(Step::StatusPublished), 1);
    assert_eq!(records[0].since_spec_ms, Some(0));
}

#[actix_rt::test]
async fn an_adopted_running_cluster_starts_as_starting_and_moves_straight_to_running() {
    tokio::time::pause();
    let fake = FakeCluster::running(demo(), 3, V);
    let telemetry = Telemetry::default();
    let mut stream = telemetry.hub.subscribe().expect("a subscriber slot");
    let actor = start_with(
        &fake,
        DesiredCluster::new(3, V),
        ClusterConfig::default(),
        telemetry,
    );
    until(&actor, &fake, "3 running members", running_with(3)).await;

    let first = loop {
        match stream.next().await {
            Received::Transition(first) => break first,
            Received::Step(_) => continue,
            other => panic!("no transition published: {other:?}"),
        }
    };
    assert_eq!(
        (first.from.as_str(), first.to.as_str()),
        ("Starting", "Running")
    );
    assert_eq!(fake.calls().add, 0);
    assert!(fake.created_pods().is_empty());
}

#[actix_rt::test]
async fn scaling_three_to_two_removes_one_member_but_never_the_leader() {
    tokio::time::pause();
    let fake = FakeCluster::running(demo(), 3, V);
    let leader = fake.leader().unwrap();
    let actor = start_running(&fake, 3).await;

    actor.do_send(SpecChanged(DesiredCluster::new(2, V)));
    until(&actor, &fake, "2 running members", running_with(2)).await;

    assert!(fake.members().iter().any(|m| m.id == leader));
    assert_eq!(fake.calls().remove, 1);
    assert_eq!(fake.calls().add, 0);
}

#[actix_rt::test]
async fn scaling_three_to_one_ends_with_one_member_and_says_running_only_then() {
    tokio::time::pause();
    let fake = FakeCluster::running(demo(), 3, V);
    let leader = fake.leader().unwrap();
    let actor = start(&fake, DesiredCluster::new(1, V), ClusterConfig::default());

    let view = until(&actor, &fake, "1 running member", running_with(1)).await;

    assert_eq!(view["phase"], "Running");
    assert_eq!(fake.members()[0].id, leader, "the leader is kept");
    assert_eq!(fake.calls().remove, 2);
    // Some more virtual time changes nothing.
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert!(fake.is_converged(1, V));
    assert_eq!(fake.calls().remove, 2);
}

/// A converged 3-member cluster whose actor's next tick is an hour away.
async fn converged_with_hourly_ticks() -> (FakeCluster, Addr<ClusterActor>) {
    tokio::time::pause();
    let fake = FakeCluster::running(demo(), 3, V);
    let config = ClusterConfig {
        tick_interval: Duration::from_secs(3600),
        ..ClusterConfig::default()
    };
    let actor = start(&fake, DesiredCluster::new(3, V), config);
    until(&actor, &fake, "3 running members", running_with(3)).await;
    (fake, actor)
}

/// Less than a minute of virtual time passed since `asked`, against an hourly interval.
fn assert_woke_early(asked: Instant) {
    let took = asked.elapsed();
    assert!(
        took < Duration::from_secs(60),
        "took {took:?} of virtual time; the interval is an hour"
    );
}

#[actix_rt::test]
async fn a_spec_change_wakes_the_actor_at_once_instead_of_at_the_next_interval() {
    let (fake, actor) = converged_with_hourly_ticks().await;
    // The next tick is now an hour away.

    let asked = Instant::now();
    actor.do_send(SpecChanged(DesiredCluster::new(5, V)));
    until(&actor, &fake, "5 running members", running_with(5)).await;

    assert_woke_early(asked);
}

#[actix_rt::test]
async fn a_nudge_about_a_changed_pod_makes_the_actor_look_at_once() {
    let (fake, actor) = converged_with_hourly_ticks().await;

    let asked = Instant::now();
    assert!(fake.kill_member("demo-m2"));
    actor.do_send(Nudge);
    until(&actor, &fake, "the dead member replaced", |view, fake| {
        running_with(3)(view, fake) && fake.members().iter().all(|m| m.name != "demo-m2")
    })
    .await;
    assert_woke_early(asked);
}

#[actix_rt::test]
async fn a_seed_failing_in_changing_words_rewrites_the_status_only_at_the_rewording_interval() {
    tokio::time::pause();
    let fake = FakeCluster::new(demo());
    fake.make_unrunnable(V);
    let config = ClusterConfig::default();
    let actor = start(&fake, DesiredCluster::new(1, V), config);
    until(&actor, &fake, "waiting for the seed", |view, _| {
        view["status"]["reason"] == "WaitingForSeed"
    })
    .await;
    let seed = fake.pods()[0].name.clone();
    let writes_before = fake.calls().publish_status;

    // Thirty ticks a second apart, each seeing the seed's pod fail in other words.
    let attempts = 30;
    for attempt in 1..=attempts {
        let problem = format!("CrashLoopBackOff: back-off restarting, attempt {attempt}");
        assert!(fake.set_pod_problem(&seed, Some(problem)));
        actor.do_send(Nudge);
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let writes = fake.calls().publish_status - writes_before;
    let interval = config.status_rewording.as_secs();
    assert!(
        writes <= attempts / interval + 1,
        "{writes} status writes in {attempts} s of rewording, at most one per {interval} s expected"
    );
    assert!(
        writes >= attempts / interval - 1,
        "{writes} writes: the wording is held back for good"
    );
    // The newest wording is written within the interval, though no event comes.
    tokio::time::sleep(config.status_rewording).await;
    let status = fake.last_status().expect("a status was written");
    assert!(
        status.message.contains(&format!("attempt {attempts}")),
        "{}",
        status.message
    );
}

#[actix_rt::test]
async fn a_new_clusters_seed_is_recorded_while_its_headless_service_is_made_and_its_pod_follows_it()
{
    tokio::time::pause();
    let fake = FakeCluster::new(demo());
    // A loaded API server: the Services' POSTs take two seconds to answer.
    let takes = Duration::from_secs(2);
    fake.set_service_latency(ServiceKind::Headless, takes);
    fake.set_service_latency(ServiceKind::Client, takes);
    let started = Instant::now();
    let actor = start_one_for_half_a_second(&fake).await;
    assert!(!fake.service_present(ServiceKind::Headless));
    assert!(
        fake.bootstrap().is_some(),
        "the seed's record waits for the Services"
    );
    assert!(
        fake.created_pods().is_empty(),
        "a pod before its headless Service"
    );
    until(&actor, &fake, "the seed's pod", |_, fake| {
        !fake.created_pods().is_empty()
    })
    .await;
    assert!(fake.service_present(ServiceKind::Headless));
    assert!(
        started.elapsed() < takes + Duration::from_millis(200),
        "the seed's pod came {:?} after the start, not right after its Service",
        started.elapsed()
    );
    until(&actor, &fake, "1 running member", running_with(1)).await;
}

#[actix_rt::test]
async fn a_new_clusters_seed_pod_does_not_wait_for_its_client_service() {
    tokio::time::pause();
    let fake = FakeCluster::new(demo());
    // The client Service's cluster IP takes the API server seconds under load.
    fake.set_service_latency(ServiceKind::Client, Duration::from_secs(3));
    let actor = start_one_for_half_a_second(&fake).await;
    assert!(!fake.service_present(ServiceKind::Client));
    assert_eq!(
        fake.created_pods().len(),
        1,
        "the seed's pod waited for the client Service"
    );
    until(&actor, &fake, "1 running member", running_with(1)).await;
    assert!(fake.services_present());
}

#[actix_rt::test]
async fn no_pod_is_made_while_the_clusters_headless_service_cannot_be() {
    tokio::time::pause();
    let fake = FakeCluster::new(demo());
    // Another object's Service holds the name, found only when the POST is refused.
    fake.refuse_service(
        ServiceKind::Headless,
        Some(ApiError::Conflict(
            "Service demo exists and belongs to someone else".into(),
        )),
    );
    fake.set_service_latency(ServiceKind::Headless, Duration::from_secs(1));
    let actor = start(&fake, DesiredCluster::new(1, V), ClusterConfig::default());
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert!(
        fake.created_pods().is_empty(),
        "a pod was made without its headless Service: {:?}",
        fake.created_pods()
    );
    let status = fake.last_status().expect("a status was written");
    assert!(
        status.message.contains("belongs to someone else"),
        "{}",
        status.message
    );
    // Once the name is free, the seed recorded meanwhile starts.
    fake.refuse_service(ServiceKind::Headless, None);
    until(&actor, &fake, "1 running member", running_with(1)).await;
    assert_eq!(fake.created_pods().len(), 1);
}

#[actix_rt::test]
async fn a_dead_member_is_removed_and_replaced_by_a_member_with_a_new_name() {
    tokio::time::pause();
    let fake = FakeCluster::running(demo(), 3, V);
    let actor = start_running(&fake, 3).await;
    let before: Vec<String> = fake.members().into_iter().map(|m| m.name).collect();

    kill_and_wait_replaced(&actor, &fake, "demo-m1").await;

    let after: Vec<String> = fake.members().into_iter().map(|m| m.name).collect();
    let new: Vec<&String> = after.iter().filter(|n| !before.contains(n)).collect();
    assert_eq!(new.len(), 1, "exactly one replacement: {after:?}");
    assert!(new[0].starts_with("demo-"));
    assert!(fake.pods().iter().all(|p| p.name != "demo-m1"));
    let reasons = event_reasons(&fake);
    let removed = reasons.iter().position(|r| r == "MemberRemoved").unwrap();
    let added = reasons.iter().position(|r| r == "MemberAdded").unwrap();
    assert!(removed < added, "removed before replaced: {reasons:?}");
    assert_eq!(fake.calls().max_membership_in_flight, 1);
}

#[actix_rt::test]
async fn with_prepared_joiners_a_dead_members_replacement_pod_is_made_by_the_tick_that_removes_it()
{
    tokio::time::pause();
    let fake = FakeCluster::running(demo(), 3, V);
    fake.set_prepares_joiners(true);
    let actor = start_running(&fake, 3).await;
    let pods_before = fake.created_pods().len();

    kill_and_wait_replaced(&actor, &fake, "demo-m1").await;

    // The tick that removed the member prepared its replacement's pod too.
    let by_tick = fake.events_by_tick();
    let tick_of = |reason: &str| {
        by_tick
            .iter()
            .find(|(_, r)| r == reason)
            .map(|(tick, _)| *tick)
            .unwrap_or_else(|| panic!("no {reason} Event: {by_tick:?}"))
    };
    assert_eq!(
        tick_of("MemberRemoved"),
        tick_of("JoinerPrepared"),
        "{by_tick:?}"
    );
    assert!(
        tick_of("MemberAdded") > tick_of("MemberRemoved"),
        "{by_tick:?}"
    );
    let made = &fake.created_pods()[pods_before..];
    assert_eq!(made.len(), 1, "one replacement pod: {made:?}");
    let survivors: Vec<String> = fake
        .members()
        .into_iter()
        .map(|m| m.name)
        .filter(|n| *n != made[0].name)
        .collect();
    let mut peers = made[0].prepared_with.clone().expect("a prepared joiner");
    peers.sort();
    assert_eq!(peers, survivors, "built to join the survivors");
    assert_eq!(fake.calls().max_membership_in_flight, 1);
}

#[actix_rt::test]
async fn a_dead_member_traces_its_loss_then_its_replacement_pod_and_the_replacement_healthy() {
    tokio::time::pause();
    let fake = FakeCluster::running(demo(), 3, V);
    let (actor, telemetry) = start_measured(&fake, 3);
    until(&actor, &fake, "3 running members", running_with(3)).await;
    let before: Vec<String> = fake.members().into_iter().map(|m| m.name).collect();

    kill_and_wait_replaced(&actor, &fake, "demo-m1").await;

    let replacement = fake
        .members()
        .into_iter()
        .map(|m| m.name)
        .find(|n| !before.contains(n))
        .expect("a replacement");
    let records = telemetry.hub.trace().records(Some("default/demo"));
    let path: Vec<(Step, Option<&str>)> = records
        .iter()
        .filter(|r| {
            use Step::*;
            matches!(
                r.step,
                MemberLost | ReplacementPodCreated | ReplacementHealthy
            )
        })
        .map(|r| (r.step, r.member.as_deref()))
        .collect();
    assert_eq!(
        path,
        [
            (Step::MemberLost, Some("demo-m1")),
            (Step::ReplacementPodCreated, Some(replacement.as_str())),
            (Step::ReplacementHealthy, Some(replacement.as_str())),
        ]
    );
    let ready = records.iter().filter(|r| r.step == Step::Ready).count();
    assert_eq!(ready, 2, "ready when adopted, and again once replaced");
}

#[actix_rt::test]
async fn an_unhealthy_cluster_refusal_of_member_add_is_retried_on_a_later_tick_without_a_warning() {
    tokio::time::pause();
    let fake = one_member_refusing_adds(2);
    let actor = start(&fake, DesiredCluster::new(3, V), ClusterConfig::default());

    until(&actor, &fake, "3 running members", running_with(3)).await;

    assert_eq!(
        fake.calls().add,
        4,
        "two refused adds, then two that worked"
    );
    let failures: Vec<_> = fake
        .events()
        .into_iter()
        .filter(|e| e.reason == "ActionFailed")
        .collect();
    assert!(
        failures.is_empty(),
        "etcd's 5-second gate is expected, not a failure: {failures:?}"
    );
    assert_eq!(
        fake.events()
            .iter()
            .filter(|e| e.reason == "MemberAdded")
            .count(),
        2
    );
}

#[actix_rt::test]
async fn a_member_add_etcd_refuses_for_now_logs_the_refusal_once_not_at_every_retry() {
    tokio::time::pause();
    let fake = one_member_refusing_adds(5);
    let log = Captured::default();
    let logger = Logger::root(log.clone(), o!());
    let spec = DesiredCluster::new(2, V);
    let config = ClusterConfig::default();
    let actor = start_logging(&fake, spec, config, Telemetry::default(), logger);

    until(&actor, &fake, "2 running members", running_with(2)).await;

    assert_eq!(
        fake.calls().add,
        6,
        "five refused adds, then one that worked"
    );
    let first = "etcd is not ready for this step yet; retrying";
    assert_eq!(log.count(slog::Level::Info, first), 1, "one line at info");
    assert_eq!(log.count(slog::Level::Warning, "action failed"), 0);
}

#[actix_rt::test]
async fn refused_etcd_calls_are_counted_by_kind() {
    tokio::time::pause();
    let fake = one_member_refusing_adds(2);
    let (actor, telemetry) = start_measured(&fake, 3);

    until(&actor, &fake, "3 running members", running_with(3)).await;

    assert_eq!(etcd_errors(&telemetry, "unhealthy_cluster"), 2);
    assert_eq!(etcd_errors(&telemetry, "rejected"), 0);
}

#[actix_rt::test]
async fn a_hung_etcd_costs_each_call_its_deadline_and_the_actor_keeps_ticking() {
    tokio::time::pause();
    let fake = FakeCluster::running(demo(), 3, V);
    let telemetry = Telemetry::default();
    let config = ClusterConfig::default();
    let actor = start_with(&fake, DesiredCluster::new(3, V), config, telemetry.clone());
    until(&actor, &fake, "3 running members", running_with(3)).await;
    let ticks = |view: &Value| view["ticks"].as_u64().unwrap();
    let before = ticks(&actor.send(Inspect).await.unwrap());

    fake.set_hang(true);
    // Well within one tick timeout: only the port's deadline can end these ticks.
    tokio::time::sleep(config.tick_timeout / 2).await;
    let while_hung = ticks(&actor.send(Inspect).await.unwrap());
    assert!(
        while_hung >= before + 3,
        "ticks went on while etcd hung: {before} -> {while_hung}"
    );
    assert!(etcd_errors(&telemetry, "timeout") >= 3);
    assert_eq!(fake.calls().membership_changes(), 0);

    fake.set_hang(false);
    actor.do_send(SpecChanged(DesiredCluster::new(4, V)));
    until(&actor, &fake, "4 running members", running_with(4)).await;
}

#[actix_rt::test]
async fn a_version_change_upgrades_every_member_in_place_keeping_the_membership() {
    tokio::time::pause();
    let fake = FakeCluster::running(demo(), 3, V);
    let members_before = fake.members();
    let actor = start_running(&fake, 3).await;

    actor.do_send(SpecChanged(DesiredCluster::new(3, "3.5.30")));
    let view = until(&actor, &fake, "3 members on 3.5.30", |view, fake| {
        fake.is_converged(3, "3.5.30") && view["status"]["current_version"] == "3.5.30"
    })
    .await;

    assert_eq!(view["status"]["phase"], "Running");
    assert_eq!(
        fake.members(),
        members_before,
        "same members, upgraded in place"
    );
    let reasons = event_reasons(&fake);
    let count = |r: &str| reasons.iter().filter(|x| *x == r).count();
    assert_eq!(count("MemberUpgraded"), 3, "{reasons:?}");
    assert_eq!(count("UpgradeConfirmed"), 3, "{reasons:?}");
    assert!(fake.pods().iter().all(|p| p.upgrade_from.is_none()));
    assert_eq!(fake.calls().membership_changes(), 0);
}

#[actix_rt::test]
async fn an_upgrade_to_an_image_that_never_runs_halts_and_rolls_the_member_back() {
    tokio::time::pause();
    let fake = FakeCluster::running(demo(), 3, V);
    let members_before = fake.members();
    fake.make_unrunnable("3.5.30");
    let actor = start_running(&fake, 3).await;

    actor.do_send(SpecChanged(DesiredCluster::new(3, "3.5.30")));
    let view = until(&actor, &fake, "the upgrade halted", |view, _| {
        view["status"]["reason"] == "UpgradeFailed"
    })
    .await;
    assert_eq!(view["status"]["phase"], "Blocked");
    until(
        &actor,
        &fake,
        "the member back on the old version",
        |_, fake| fake.is_converged(3, V),
    )
    .await;
    // Long after: no member removed or re-added, no second attempt, one Warning.
    tokio::time::sleep(Duration::from_secs(600)).await;
    assert_eq!(fake.members(), members_before);
    assert_eq!(fake.calls().membership_changes(), 0);
    let reasons = event_reasons(&fake);
    let count = |r: &str| reasons.iter().filter(|x| *x == r).count();
    assert_eq!(count("MemberUpgraded"), 1, "{reasons:?}");
    assert_eq!(count("MemberRolledBack"), 1, "{reasons:?}");
    assert_eq!(count("UpgradeFailed"), 1, "{reasons:?}");

    // Going back to the running version clears the block.
    actor.do_send(SpecChanged(DesiredCluster::new(3, V)));
    until(&actor, &fake, "3 running members", running_with(3)).await;
}

#[actix_rt::test]
async fn a_paused_cluster_that_lost_every_pod_is_never_seeded_again_by_a_restarted_actor() {
    tokio::time::pause();
    let fake = FakeCluster::new(demo());
    let actor = start_running(&fake, 3).await;
    let mut paused = DesiredCluster::new(3, V);
    paused.paused = true;
    actor.do_send(SpecChanged(paused.clone()));
    until(&actor, &fake, "paused", |view, _| view["phase"] == "Paused").await;
    for m in fake.members() {
        fake.kill_member(&m.name);
    }
    tokio::time::sleep(Duration::from_secs(10)).await;
    actor.do_send(Retire);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!actor.connected(), "the first actor stopped");

    // A new actor (as after an operator restart) knows only what the status recorded.
    let restarted = start(&fake, paused, ClusterConfig::default());
    tokio::time::sleep(Duration::from_secs(10)).await;
    restarted.do_send(SpecChanged(DesiredCluster::new(3, V)));
    let view = until(&restarted, &fake, "the loss reported", |view, _| {
        view["reason"] == "AllMembersLost"
    })
    .await;
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(view["status"]["phase"], "Blocked");
    assert_eq!(fake.calls().delete_pod, 0, "a failed pod was deleted");
    let seeds = seeds_made(&fake);
    assert_eq!(seeds, 1, "a second seed was created");
}

#[actix_rt::test]
async fn a_member_only_the_operator_cannot_reach_is_never_removed() {
    tokio::time::pause();
    let fake = FakeCluster::running(demo(), 3, V);
    let leader = fake.leader().unwrap();
    let victim = fake
        .members()
        .into_iter()
        .find(|m| m.id != leader)
        .unwrap()
        .name;
    let actor = start_running(&fake, 3).await;

    fake.cut_off_from_operator(&victim, true);
    let view = until(&actor, &fake, "the member reported unready", |view, _| {
        view["status"]["unready"]
            .as_array()
            .is_some_and(|u| u.iter().any(|n| n == victim.as_str()))
    })
    .await;
    assert_eq!(view["status"]["ready"].as_array().map(Vec::len), Some(2));
    // Far past the unhealthy deadline (120 s): its pod is ready, the cluster has it.
    tokio::time::sleep(Duration::from_secs(600)).await;
    assert_eq!(
        fake.calls().remove,
        0,
        "removed a member only the operator lost"
    );
    assert!(fake.members().iter().any(|m| m.name == victim));

    fake.cut_off_from_operator(&victim, false);
    until(&actor, &fake, "3 running members again", running_with(3)).await;
}

#[actix_rt::test]
async fn frozen_members_are_removed_and_replaced_without_a_removal_during_a_join() {
    tokio::time::pause();
    let fake = FakeCluster::running(demo(), 5, V);
    let leader = fake.leader().unwrap();
    let victims: Vec<String> = fake
        .members()
        .into_iter()
        .filter(|m| m.id != leader)
        .take(2)
        .map(|m| m.name)
        .collect();
    let actor = start_running(&fake, 5).await;

    for v in &victims {
        fake.freeze_member(v);
    }
    until(
        &actor,
        &fake,
        "both frozen members replaced",
        |view, fake| {
            running_with(5)(view, fake) && !fake.members().iter().any(|m| victims.contains(&m.name))
        },
    )
    .await;
    // No removal ever happened between a learner's add and its promotion.
    let reasons = event_reasons(&fake);
    let mut joining = false;
    for r in &reasons {
        match r.as_str() {
            "MemberAdded" => joining = true,
            "LearnerPromoted" => joining = false,
            "MemberRemoved" => assert!(!joining, "removed during a join: {reasons:?}"),
            _ => {}
        }
    }
    assert_eq!(
        reasons.iter().filter(|r| *r == "MemberRemoved").count(),
        2,
        "{reasons:?}"
    );
}

#[actix_rt::test]
async fn a_hung_kubernetes_call_costs_one_tick_not_the_cluster() {
    tokio::time::pause();
    let fake = FakeCluster::running(demo(), 3, V);
    let config = ClusterConfig::default();
    let actor = start(&fake, DesiredCluster::new(3, V), config);
    until(&actor, &fake, "3 running members", running_with(3)).await;

    fake.set_kube_hang(true);
    tokio::time::sleep(config.tick_timeout * 3).await;
    let ticks_while_hung = actor.send(Inspect).await.unwrap()["ticks"]
        .as_u64()
        .unwrap();
    fake.set_kube_hang(false);
    actor.do_send(SpecChanged(DesiredCluster::new(4, V)));
    until(&actor, &fake, "4 running members", running_with(4)).await;
    let ticks_after = actor.send(Inspect).await.unwrap()["ticks"]
        .as_u64()
        .unwrap();
    assert!(
        ticks_after > ticks_while_hung,
        "the actor froze with the hung call"
    );
}

#[actix_rt::test]
async fn an_object_replaced_under_the_same_name_inherits_nothing_from_the_old_one() {
    tokio::time::pause();
    let fake = FakeCluster::running(demo(), 1, V);
    let mut first = DesiredCluster::new(1, V);
    first.uid = "uid-1".into();
    let actor = start(&fake, first, ClusterConfig::default());
    until(&actor, &fake, "1 running member", running_with(1)).await;
    let before = actor.send(Inspect).await.unwrap();
    assert!(before["state"]["cluster_id"].is_u64(), "{before:#}");

    // The same name, a new object: its own world, still empty.
    fake.replace_world();
    let mut second = DesiredCluster::new(1, V);
    second.uid = "uid-2".into();
    actor.do_send(SpecChanged(second));
    until(&actor, &fake, "the new cluster running", running_with(1)).await;
    let seeds = seeds_made(&fake);
    assert_eq!(seeds, 1, "the new object was seeded");
}

#[actix_rt::test]
async fn two_members_lost_with_their_claims_are_recovered_from_the_survivor_once_and_grown_back() {
    use etcd_operator_core::lifecycle::{RecoveryPolicy, RecoverySpec};
    tokio::time::pause();
    const SAFE: &str = "3.5.35";
    let fake = FakeCluster::running(demo(), 3, SAFE).on_claims();
    let mut spec = DesiredCluster::new(3, SAFE);
    spec.recovery = RecoverySpec {
        policy: RecoveryPolicy::FromSurvivor,
        requested: None,
        quorum_loss: Duration::from_secs(30),
        ..RecoverySpec::default()
    };
    let actor = start(&fake, spec, ClusterConfig::default());
    until(&actor, &fake, "running", |_, f| f.is_converged(3, SAFE)).await;
    fake.lose_member_data("demo-m1");
    fake.lose_member_data("demo-m2");

    let recovered = |_: &Value, f: &FakeCluster| {
        f.recovery().is_some_and(|r| r.finished) && f.is_converged(3, SAFE)
    };
    until(&actor, &fake, "recovered and grown back to 3", recovered).await;

    let record = fake.recovery().unwrap();
    assert_eq!(record.survivor.as_deref(), Some("demo-m0"));
    assert_eq!(record.lost, ["demo-m1", "demo-m2"]);
    assert_eq!(record.restored_revision, Some(50));
    let members = fake.members();
    assert!(members.iter().any(|m| m.name == "demo-m0"), "{members:?}");
    let reasons = event_reasons(&fake);
    let started = reasons.iter().position(|r| r == "RecoveryStarted");
    let stopped = reasons.iter().position(|r| r == "PodRecreated");
    assert!(started.is_some() && started < stopped, "{reasons:?}");
    assert_eq!(
        reasons.iter().filter(|r| *r == "RecoveryStarted").count(),
        1,
        "{reasons:?}"
    );
    let forced: Vec<_> = fake
        .created_pods()
        .into_iter()
        .filter(|p| p.state == InitialState::ForceNewCluster)
        .collect();
    assert_eq!(forced.len(), 1, "{forced:?}");
    assert_eq!(forced[0].name, "demo-m0");
    // The survivor runs again without the flag.
    assert!(fake.pods().iter().all(|p| !p.force_new_cluster));
}

/// Starts a cluster of one whose pod creation fails with `error`, and counts the tries of
/// its first minute; then lifts the failure and checks that an event brings a try at once.
async fn tries_in_a_minute_of(error: ApiError) -> u64 {
    tokio::time::pause();
    let fake = FakeCluster::new(demo());
    fake.refuse_pod_creation(Some(error));
    let config = ClusterConfig::default();
    let actor = start(&fake, DesiredCluster::new(1, V), config);
    tokio::time::sleep(Duration::from_secs(60)).await;
    let refused = fake.calls().create_member_pod;

    // The cause goes away; an event (here a pod's) brings the next try at once.
    fake.refuse_pod_creation(None);
    actor.send(Nudge).await.expect("cluster actor alive");
    tokio::time::sleep(config.follow_up).await;
    assert_eq!(fake.calls().create_member_pod, refused + 1);
    until(&actor, &fake, "1 running member", running_with(1)).await;
    refused
}

#[actix_rt::test]
async fn a_failing_action_is_retried_less_and_less_often_and_at_once_after_a_change() {
    let refused = tries_in_a_minute_of(ApiError::Unavailable(
        "the API server did not answer".into(),
    ))
    .await;
    // Doubling from the follow-up (0.2, 0.4 .. 12.8 s) up to the idle interval: 10 tries
    // in the first minute, where every follow-up would have been 600.
    assert!((5..=12).contains(&refused), "{refused} tries in a minute");
}

#[actix_rt::test]
async fn a_refusal_that_retrying_does_not_mend_waits_the_idle_interval_at_once() {
    // Seen on the local environment: a cluster whose namespace was being deleted retried
    // its refused pod calls every follow-up (100 ms), 135 refusals in a few seconds.
    let refused = tries_in_a_minute_of(ApiError::Forbidden(
        "pods \"demo-0\" is forbidden: unable to create new content in namespace default \
         because it is being terminated"
            .into(),
    ))
    .await;
    // At 0, 20, 40 and 60 s: the idle interval from the first refusal on.
    assert!((2..=4).contains(&refused), "{refused} tries in a minute");
}

/// How many clusters the gauges count in `phase`.
fn in_phase(telemetry: &Telemetry, phase: &'static str) -> i64 {
    let labels = PhaseLabels { phase };
    telemetry
        .metrics
        .clusters_by_phase
        .get_or_create(&labels)
        .get()
}

#[actix_rt::test]
async fn the_phase_gauges_count_each_cluster_once_in_its_current_phase_until_it_stops() {
    tokio::time::pause();
    let fake = FakeCluster::new(demo());
    let (actor, telemetry) = start_measured(&fake, 3);
    until(&actor, &fake, "3 running members", running_with(3)).await;
    assert_eq!(in_phase(&telemetry, "Running"), 1);
    for phase in ["Starting", "Bootstrapping", "Scaling"] {
        assert_eq!(in_phase(&telemetry, phase), 0, "{phase}");
    }
    actor.do_send(SpecChanged(DesiredCluster::new(4, V)));
    until(&actor, &fake, "4 running members", running_with(4)).await;
    assert_eq!(in_phase(&telemetry, "Running"), 1);
    assert_eq!(in_phase(&telemetry, "Scaling"), 0);
    actor.do_send(Retire);
    for _ in 0..100 {
        if in_phase(&telemetry, "Running") == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        in_phase(&telemetry, "Running"),
        0,
        "a stopped actor counts nowhere"
    );
}
