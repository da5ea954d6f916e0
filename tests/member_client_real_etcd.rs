//! The MemberClient actor over [`EtcdClientApi`] against real etcd 3.4 processes.
//!
//! Each test runs its own members on its own loopback network (see `support::etcd_process`)
//! and kills them when it ends, pass or fail.

mod support;

use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use etcd_operator::etcd_api::EtcdClientApi;
use etcd_operator_actors::member_client::{
    AddMember, Compact, Defragment, DisarmAlarm, ListMembers, MemberClient, MoveLeader,
    ProbeMember, PromoteMember, RemoveMember,
};
use etcd_operator_actors::ports::{AddedMember, EtcdError, EtcdErrorKind, MemberList, NewMember};
use etcd_operator_core::lifecycle::{Alarm, AlarmKind, MemberHealth, MemberView, Version};
use support::etcd_process::{EtcdProcess, Loopback};

/// The deadline `EtcdClientApi` gives each call (the MemberClient sets none of its own).
const CALL_TIMEOUT: Duration = Duration::from_secs(2);
/// What a call may take past its deadline: scheduling, and the error coming back.
const SLACK: Duration = Duration::from_millis(500);
/// How long a cluster may take to show a member as started.
const SETTLE: Duration = Duration::from_secs(15);
/// How many times a call etcd refuses for now is tried before the test gives up.
const ATTEMPTS: u32 = 20;

/// The MemberClient actor under test.
type Client = Addr<MemberClient>;

/// Starts a one-member cluster on a network of its own and a MemberClient to call it with:
/// the network, its seed (member 1, named `seed`), the client, and the seed's client URL as
/// the endpoints to call.
async fn start_seed_cluster() -> (Loopback, EtcdProcess, Client, Vec<String>) {
    let net = Loopback::new();
    let seed = EtcdProcess::start_seed(&net, 1, "seed").await;
    let client = MemberClient::new(Arc::new(EtcdClientApi::new(CALL_TIMEOUT))).start();
    let endpoints = vec![seed.client_url()];
    (net, seed, client, endpoints)
}

/// Sends one call to the MemberClient actor.
async fn ask<M>(client: &Client, msg: M) -> M::Result
where
    M: actix::Message + Send + 'static,
    M::Result: Send,
    MemberClient: actix::Handler<M>,
{
    client.send(msg).await.expect("MemberClient is running")
}

async fn try_list(client: &Client, endpoints: &[String]) -> Result<MemberList, EtcdError> {
    let endpoints = endpoints.to_vec();
    ask(client, ListMembers { endpoints }).await
}

async fn try_status(client: &Client, endpoint: &str) -> Result<MemberHealth, EtcdError> {
    let endpoint = endpoint.to_string();
    ask(client, ProbeMember { endpoint }).await
}

async fn list(client: &Client, endpoints: &[String]) -> Vec<MemberView> {
    list_with_id(client, endpoints).await.members
}

async fn list_with_id(client: &Client, endpoints: &[String]) -> MemberList {
    try_list(client, endpoints)
        .await
        .expect("member list succeeds")
}

async fn status(client: &Client, endpoint: &str) -> MemberHealth {
    try_status(client, endpoint)
        .await
        .expect("endpoint status succeeds")
}

async fn add(
    client: &Client,
    endpoints: &[String],
    peer_url: &str,
    learner: bool,
) -> Result<AddedMember, EtcdError> {
    let member = NewMember {
        peer_url: peer_url.to_string(),
        learner,
    };
    let endpoints = endpoints.to_vec();
    ask(client, AddMember { endpoints, member }).await
}

async fn promote(client: &Client, endpoints: &[String], id: u64) -> Result<(), EtcdError> {
    let endpoints = endpoints.to_vec();
    ask(client, PromoteMember { endpoints, id }).await
}

async fn remove(client: &Client, endpoints: &[String], id: u64) -> Result<(), EtcdError> {
    let endpoints = endpoints.to_vec();
    ask(client, RemoveMember { endpoints, id }).await
}

/// Starts member 2, named `name`, joining the cluster of the seed (member 1, `seed`).
async fn join_the_seed(net: &Loopback, name: &str) -> EtcdProcess {
    let initial_cluster = format!(
        "{},{}",
        net.cluster_entry("seed", 1),
        net.cluster_entry(name, 2)
    );
    EtcdProcess::join(net, 2, name, &initial_cluster).await
}

/// Adds member 2 (`m2`, a learner when `learner`), starts it and waits until both members
/// have started: what it was added as, and its process.
async fn add_and_start_m2(
    net: &Loopback,
    client: &Client,
    endpoints: &[String],
    learner: bool,
) -> (AddedMember, EtcdProcess) {
    let added = add(client, endpoints, &net.peer_url(2), learner)
        .await
        .expect("member add succeeds");
    let m2 = join_the_seed(net, "m2").await;
    wait_started(client, endpoints, 2).await;
    (added, m2)
}

/// Polls the member list until `count` members have started.
async fn wait_started(client: &Client, endpoints: &[String], count: usize) -> Vec<MemberView> {
    let started = Instant::now();
    loop {
        let members = list(client, endpoints).await;
        if members.iter().filter(|m| m.started()).count() == count {
            return members;
        }
        assert!(
            started.elapsed() < SETTLE,
            "{count} members not started after {SETTLE:?}: {members:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Calls until etcd stops refusing with `refusal`, pausing between attempts; returns the
/// answer and the attempt it came on. Any other error, or too many refusals, fails the test.
async fn retry_while_refused<T, C, F>(
    refusal: EtcdErrorKind,
    pause: Duration,
    mut call: C,
) -> (T, u32)
where
    C: FnMut() -> F,
    F: Future<Output = Result<T, EtcdError>>,
{
    let mut attempts = 0;
    loop {
        attempts += 1;
        match call().await {
            Ok(answer) => return (answer, attempts),
            Err(e) if e.kind == refusal && attempts < ATTEMPTS => {
                eprintln!("attempt {attempts}: {e:?}");
                tokio::time::sleep(pause).await;
            }
            Err(e) => panic!("failed after {attempts} attempts: {e:?}"),
        }
    }
}

/// Awaits `call`; returns what it gave and how long it took.
async fn timed<F: Future>(call: F) -> (F::Output, Duration) {
    let started = Instant::now();
    let output = call.await;
    (output, started.elapsed())
}

/// Awaits a call that must fail (`why` says why); returns its error and how long it took.
async fn failure<T: Debug>(
    call: impl Future<Output = Result<T, EtcdError>>,
    why: &str,
) -> (EtcdError, Duration) {
    let (result, took) = timed(call).await;
    let err = result.expect_err(why);
    eprintln!("{why}: failed after {took:?}: {err:?}");
    (err, took)
}

/// The call failed by its deadline, not after it.
fn assert_failed_within_deadline(err: &EtcdError, took: Duration) {
    assert!(took <= CALL_TIMEOUT + SLACK, "{took:?}: {err:?}");
}

fn named<'a>(members: &'a [MemberView], name: &str) -> &'a MemberView {
    members
        .iter()
        .find(|m| m.name == name)
        .unwrap_or_else(|| panic!("no member {name} in {members:?}"))
}

#[actix_rt::test]
async fn a_seed_lists_itself_as_its_only_started_member() {
    let (_net, seed, client, endpoints) = start_seed_cluster().await;

    let members = list(&client, &endpoints).await;

    assert_eq!(members.len(), 1, "{members:?}");
    let only = &members[0];
    assert!(only.started());
    assert_eq!(only.name, "seed");
    assert_ne!(only.id, 0);
    assert_eq!(only.peer_urls, vec![seed.peer_url()]);
    assert_eq!(only.client_urls, vec![seed.client_url()]);
    assert!(!only.is_learner);
}

#[actix_rt::test]
async fn member_list_and_status_both_carry_the_clusters_id() {
    let (_net, seed, client, endpoints) = start_seed_cluster().await;
    let listed = list_with_id(&client, &endpoints).await;
    let health = status(&client, &seed.client_url()).await;
    assert_ne!(listed.cluster_id, 0);
    assert_eq!(health.cluster_id, Some(listed.cluster_id));
}

#[actix_rt::test]
async fn status_reports_the_running_version_and_the_seed_as_leader() {
    let (_net, seed, client, endpoints) = start_seed_cluster().await;
    let seed_id = list(&client, &endpoints).await[0].id;

    let health = status(&client, &seed.client_url()).await;

    assert!(health.reachable);
    assert!(health.is_healthy(), "{health:?}");
    assert_eq!(health.version, Some("3.4.23".parse::<Version>().unwrap()));
    assert_eq!(health.leader, Some(seed_id));
}

#[actix_rt::test]
async fn a_voting_member_added_then_started_is_listed_as_a_second_started_member() {
    let (net, _seed, client, endpoints) = start_seed_cluster().await;

    let added = add(&client, &endpoints, &net.peer_url(2), false)
        .await
        .expect("member add succeeds");

    assert_eq!(added.members.len(), 2, "{added:?}");
    let new = added.members.iter().find(|m| m.id == added.id).unwrap();
    assert!(
        !new.started(),
        "an added member has no name until it starts"
    );
    assert!(new.client_urls.is_empty());
    assert_eq!(new.peer_urls, vec![net.peer_url(2)]);
    assert!(!new.is_learner);

    let m2 = join_the_seed(&net, "m2").await;
    let members = wait_started(&client, &endpoints, 2).await;

    assert_eq!(members.len(), 2);
    let joined = named(&members, "m2");
    assert_eq!(joined.id, added.id);
    assert_eq!(joined.client_urls, vec![m2.client_url()]);
    assert!(members.iter().all(|m| !m.is_learner));
}

#[actix_rt::test]
async fn the_leader_hands_leadership_to_the_member_named_and_a_follower_cannot() {
    let (net, seed, client, endpoints) = start_seed_cluster().await;
    let (added, m2) = add_and_start_m2(&net, &client, &endpoints, false).await;
    let seed_id = status(&client, &seed.client_url()).await.leader;
    assert_ne!(seed_id, Some(added.id), "the seed leads first");

    let from_follower = MoveLeader {
        leader: m2.client_url(),
        to: added.id,
    };
    let refused = ask(&client, from_follower).await;
    eprintln!("move-leader asked of a follower: {refused:?}");
    assert!(refused.is_err());

    let from_leader = MoveLeader {
        leader: seed.client_url(),
        to: added.id,
    };
    ask(&client, from_leader)
        .await
        .expect("the leader hands over");
    for member in [&seed, &m2] {
        let health = status(&client, &member.client_url()).await;
        assert_eq!(health.leader, Some(added.id), "{health:?}");
    }
}

#[actix_rt::test]
async fn a_learner_is_promoted_to_a_voting_member_once_it_has_caught_up() {
    let (net, _seed, client, endpoints) = start_seed_cluster().await;

    let added = add(&client, &endpoints, &net.peer_url(2), true)
        .await
        .expect("member add --learner succeeds");
    let learner = added.members.iter().find(|m| m.id == added.id).unwrap();
    assert!(learner.is_learner);

    // Before the learner runs, it cannot have caught up.
    let early = promote(&client, &endpoints, added.id)
        .await
        .expect_err("a learner that never started cannot be promoted");
    eprintln!("promote before start: {early:?}");
    assert_eq!(early.kind, EtcdErrorKind::LearnerNotReady);

    let _learner = join_the_seed(&net, "learner").await;
    let members = wait_started(&client, &endpoints, 2).await;
    assert!(named(&members, "learner").is_learner);

    retry_while_refused(
        EtcdErrorKind::LearnerNotReady,
        Duration::from_millis(200),
        || promote(&client, &endpoints, added.id),
    )
    .await;

    let members = list(&client, &endpoints).await;
    assert_eq!(members.len(), 2);
    assert!(!named(&members, "learner").is_learner, "{members:?}");
}

#[actix_rt::test]
async fn a_member_add_right_after_a_join_is_refused_as_unhealthy_until_about_five_seconds_pass() {
    let (net, _seed, client, endpoints) = start_seed_cluster().await;

    add(&client, &endpoints, &net.peer_url(2), false)
        .await
        .expect("member add succeeds");
    let _m2 = join_the_seed(&net, "m2").await;
    let joined = Instant::now();
    wait_started(&client, &endpoints, 2).await;

    let m3 = net.peer_url(3);
    let refused = add(&client, &endpoints, &m3, false)
        .await
        .expect_err("etcd refuses a member add right after a join");
    eprintln!(
        "member add {:?} after the join: {refused:?}",
        joined.elapsed()
    );
    assert_eq!(refused.kind, EtcdErrorKind::UnhealthyCluster);
    assert!(refused.message.contains("etcdserver: unhealthy cluster"));

    tokio::time::sleep(Duration::from_secs(5).saturating_sub(joined.elapsed())).await;
    let (added, attempts) = retry_while_refused(
        EtcdErrorKind::UnhealthyCluster,
        Duration::from_millis(250),
        || add(&client, &endpoints, &m3, false),
    )
    .await;
    eprintln!(
        "member add succeeded {:?} after the join, attempt {attempts}",
        joined.elapsed()
    );
    assert_eq!(added.members.len(), 3);
}

#[actix_rt::test]
async fn a_removed_member_is_gone_from_the_list() {
    let (net, _seed, client, endpoints) = start_seed_cluster().await;

    let (added, _m2) = add_and_start_m2(&net, &client, &endpoints, true).await;

    remove(&client, &endpoints, added.id)
        .await
        .expect("member remove succeeds");

    let members = list(&client, &endpoints).await;
    assert_eq!(members.len(), 1, "{members:?}");
    assert_eq!(members[0].name, "seed");

    let again = remove(&client, &endpoints, added.id)
        .await
        .expect_err("a removed member cannot be removed twice");
    eprintln!("second remove: {again:?}");
    assert_eq!(again.kind, EtcdErrorKind::MemberNotFound);
}

#[actix_rt::test]
async fn calls_to_a_stopped_member_fail_within_the_timeout_and_recover_when_it_is_back() {
    let (_net, mut seed, client, endpoints) = start_seed_cluster().await;
    // Connect (and cache the connection) while the member is up.
    list(&client, &endpoints).await;

    seed.stop();

    let status = failure(
        try_status(&client, &seed.client_url()),
        "a stopped member has no status",
    )
    .await;
    let listed = failure(
        try_list(&client, &endpoints),
        "a stopped member lists nothing",
    )
    .await;
    for (err, took) in [status, listed] {
        assert!(
            matches!(
                err.kind,
                EtcdErrorKind::Timeout | EtcdErrorKind::Unavailable
            ),
            "{err:?}"
        );
        assert_failed_within_deadline(&err, took);
    }

    seed.restart().await;
    let members = list(&client, &endpoints).await;
    assert_eq!(members.len(), 1);
    let health = try_status(&client, &seed.client_url())
        .await
        .expect("a member that is back answers its status");
    assert!(health.reachable);
}

#[actix_rt::test]
async fn a_second_learner_while_one_is_pending_is_refused_as_too_many_learners() {
    let (net, _seed, client, endpoints) = start_seed_cluster().await;

    add(&client, &endpoints, &net.peer_url(2), true)
        .await
        .expect("the first learner is accepted");

    let refused = add(&client, &endpoints, &net.peer_url(3), true)
        .await
        .expect_err("etcd 3.4 allows one learner at a time");
    eprintln!("second learner: {refused:?}");
    assert_eq!(refused.kind, EtcdErrorKind::TooManyLearners);
    assert!(!refused.message.is_empty());

    let members = list(&client, &endpoints).await;
    assert_eq!(
        members.len(),
        2,
        "the refused learner was not added: {members:?}"
    );
}

#[actix_rt::test]
async fn calls_to_a_frozen_member_time_out_instead_of_hanging() {
    let (_net, seed, client, endpoints) = start_seed_cluster().await;
    list(&client, &endpoints).await;

    seed.freeze();

    let (status, took) = failure(
        try_status(&client, &seed.client_url()),
        "a frozen member answers nothing",
    )
    .await;
    assert_eq!(status.kind, EtcdErrorKind::Timeout, "{status:?}");
    assert!(
        took >= CALL_TIMEOUT - Duration::from_millis(100),
        "{took:?}"
    );
    assert_failed_within_deadline(&status, took);

    // A fresh connection to the frozen member (the failed one was dropped) times out too.
    let (listed, took) = failure(
        try_list(&client, &endpoints),
        "a frozen member lists nothing",
    )
    .await;
    assert_eq!(listed.kind, EtcdErrorKind::Timeout, "{listed:?}");
    assert_failed_within_deadline(&listed, took);

    seed.thaw();
    let started = Instant::now();
    loop {
        match try_list(&client, &endpoints).await {
            Ok(list) => {
                assert_eq!(list.members.len(), 1);
                break;
            }
            Err(e) => {
                assert!(
                    started.elapsed() < SETTLE,
                    "still failing after thaw: {e:?}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// Puts 256 KiB values through `endpoint` until etcd refuses one for want of space;
/// returns the refusal.
async fn fill_until_refused(endpoint: &str) -> etcd_client::Error {
    let mut client = etcd_client::Client::connect([endpoint], None)
        .await
        .expect("connect to the member");
    let value = vec![b'x'; 256 * 1024];
    for i in 0..200 {
        if let Err(e) = client
            .put(format!("fill-{i:03}"), value.clone(), None)
            .await
        {
            return e;
        }
    }
    panic!("200 puts of 256 KiB fit in the quota");
}

#[actix_rt::test]
async fn a_member_whose_backend_is_full_answers_healthy_with_its_nospace_alarm_until_disarmed() {
    let (_net, mut seed, client, endpoints) = start_seed_cluster().await;
    let mut args = seed.args().to_vec();
    args.extend(["--quota-backend-bytes".to_string(), (4 << 20).to_string()]);
    seed.relaunch_with(args).await;
    let refused = fill_until_refused(&seed.client_url()).await;
    assert!(
        refused.to_string().contains("database space exceeded"),
        "{refused}"
    );

    let full = status(&client, &seed.client_url()).await;
    assert!(
        full.is_healthy(),
        "an alarm is not a lost member: it counts toward quorum: {full:?}"
    );
    let id = list(&client, &endpoints).await[0].id;
    assert_eq!(
        full.alarms,
        [Alarm {
            member: id,
            kind: AlarmKind::NoSpace
        }]
    );
    let size = full.db_size.expect("etcd reports its backend's size");
    assert!(size >= 3 << 20, "a full 4 MiB backend reports {size} bytes");
    assert!(full.db_size_in_use.is_some_and(|in_use| in_use <= size));

    let alarm = full.alarms[0];
    let disarm = DisarmAlarm {
        endpoints: endpoints.clone(),
        alarm,
    };
    ask(&client, disarm.clone()).await.expect("alarm disarm");
    let disarmed = status(&client, &seed.client_url()).await;
    assert!(disarmed.alarms.is_empty(), "{disarmed:?}");
    assert!(disarmed.is_healthy());
    ask(&client, disarm)
        .await
        .expect("disarming an alarm no longer raised is not an error");
}

#[actix_rt::test]
async fn compaction_drops_old_revisions_and_a_revision_compacted_twice_is_not_an_error() {
    let (_net, seed, client, endpoints) = start_seed_cluster().await;
    let mut etcd = etcd_client::Client::connect([seed.client_url()], None)
        .await
        .expect("connect to the member");
    for i in 0..10 {
        etcd.put("key", format!("v{i}"), None).await.expect("put");
    }
    let newest = status(&client, &seed.client_url())
        .await
        .revision
        .expect("etcd reports its revision");
    let old = etcd_client::GetOptions::new().with_revision(newest - 5);
    assert!(etcd.get("key", Some(old.clone())).await.is_ok());

    let compact = Compact {
        endpoints: endpoints.clone(),
        revision: newest - 2,
    };
    ask(&client, compact.clone()).await.expect("compact");
    let gone = etcd
        .get("key", Some(old))
        .await
        .expect_err("a compacted revision");
    assert!(gone.to_string().contains("compacted"), "{gone}");
    let kept = etcd_client::GetOptions::new().with_revision(newest - 1);
    assert!(
        etcd.get("key", Some(kept)).await.is_ok(),
        "newer revisions stay"
    );
    ask(&client, compact)
        .await
        .expect("compacting to a revision already compacted is not an error");
    let behind = Compact {
        endpoints: endpoints.clone(),
        revision: newest - 4,
    };
    ask(&client, behind)
        .await
        .expect("nor is compacting to one the history is past");
    let future = Compact {
        endpoints,
        revision: newest + 100,
    };
    let refused = ask(&client, future).await.expect_err("a future revision");
    assert_eq!(refused.kind, EtcdErrorKind::Rejected, "{refused:?}");
}

#[actix_rt::test]
async fn defragmentation_returns_the_pages_a_compaction_freed_and_reports_both_sizes() {
    let (_net, seed, client, endpoints) = start_seed_cluster().await;
    let mut etcd = etcd_client::Client::connect([seed.client_url()], None)
        .await
        .expect("connect to the member");
    let value = vec![b'x'; 256 * 1024];
    for _ in 0..24 {
        etcd.put("big", value.clone(), None).await.expect("put");
    }
    let full = status(&client, &seed.client_url()).await;
    let newest = full.revision.expect("a revision");
    ask(
        &client,
        Compact {
            endpoints,
            revision: newest,
        },
    )
    .await
    .expect("compact");
    let done = ask(
        &client,
        Defragment {
            endpoint: seed.client_url(),
        },
    )
    .await
    .expect("defrag");
    let (before, after) = (
        done.before.expect("size before"),
        done.after.expect("size after"),
    );
    assert!(before >= 5 << 20, "24 values of 256 KiB: {before} bytes");
    assert!(
        after < before / 2,
        "the history compacted away is given back: {before} -> {after}"
    );
    assert_eq!(done.freed(), Some(before - after));
    let kept = etcd.get("big", None).await.expect("get");
    assert_eq!(
        kept.kvs()[0].value().len(),
        value.len(),
        "the newest value stays"
    );
}
