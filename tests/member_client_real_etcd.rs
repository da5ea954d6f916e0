//! The MemberClient actor over [`EtcdClientApi`] against real etcd 3.4 processes.
//!
//! Each test runs its own members on its own loopback network (see `support::etcd_process`)
//! and kills them when it ends, pass or fail.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use etcd_operator::etcd_api::EtcdClientApi;
use etcd_operator_actors::lifecycle::{MemberHealth, MemberView, Version};
use etcd_operator_actors::member_client::{
    AddMember, ListMembers, MemberClient, MemberStatus, PromoteMember, RemoveMember,
};
use etcd_operator_actors::ports::{AddedMember, EtcdError, EtcdErrorKind, MemberList, NewMember};
use support::etcd_process::{EtcdProcess, Loopback};

/// The deadline `EtcdClientApi` gives each call (the MemberClient sets none of its own).
const CALL_TIMEOUT: Duration = Duration::from_secs(2);
/// What a call may take past its deadline: scheduling, and the error coming back.
const SLACK: Duration = Duration::from_millis(500);
/// How long a cluster may take to show a member as started.
const SETTLE: Duration = Duration::from_secs(15);

fn member_client() -> Addr<MemberClient> {
    MemberClient::new(Arc::new(EtcdClientApi::new(CALL_TIMEOUT))).start()
}

/// Sends one call to the MemberClient actor.
async fn ask<M>(client: &Addr<MemberClient>, msg: M) -> M::Result
where
    M: actix::Message + Send + 'static,
    M::Result: Send,
    MemberClient: actix::Handler<M>,
{
    client.send(msg).await.expect("MemberClient is running")
}

async fn list(client: &Addr<MemberClient>, endpoints: &[String]) -> Vec<MemberView> {
    list_with_id(client, endpoints).await.members
}

async fn list_with_id(client: &Addr<MemberClient>, endpoints: &[String]) -> MemberList {
    ask(
        client,
        ListMembers {
            endpoints: endpoints.to_vec(),
        },
    )
    .await
    .expect("member list succeeds")
}

async fn status(client: &Addr<MemberClient>, endpoint: &str) -> MemberHealth {
    ask(
        client,
        MemberStatus {
            endpoint: endpoint.to_string(),
        },
    )
    .await
    .expect("endpoint status succeeds")
}

async fn add(
    client: &Addr<MemberClient>,
    endpoints: &[String],
    peer_url: &str,
    learner: bool,
) -> Result<AddedMember, EtcdError> {
    ask(
        client,
        AddMember {
            endpoints: endpoints.to_vec(),
            member: NewMember {
                peer_url: peer_url.to_string(),
                learner,
            },
        },
    )
    .await
}

/// Polls the member list until `count` members have started.
async fn wait_started(
    client: &Addr<MemberClient>,
    endpoints: &[String],
    count: usize,
) -> Vec<MemberView> {
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

fn named<'a>(members: &'a [MemberView], name: &str) -> &'a MemberView {
    members
        .iter()
        .find(|m| m.name == name)
        .unwrap_or_else(|| panic!("no member {name} in {members:?}"))
}

#[actix_rt::test]
async fn a_seed_lists_itself_as_its_only_started_member() {
    let net = Loopback::new();
    let seed = EtcdProcess::start_seed(&net, 1, "seed").await;
    let client = member_client();

    let members = list(&client, &[seed.client_url()]).await;

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
    let net = Loopback::new();
    let seed = EtcdProcess::start_seed(&net, 1, "seed").await;
    let client = member_client();
    let listed = list_with_id(&client, &[seed.client_url()]).await;
    let health = status(&client, &seed.client_url()).await;
    assert_ne!(listed.cluster_id, 0);
    assert_eq!(health.cluster_id, Some(listed.cluster_id));
}

#[actix_rt::test]
async fn status_reports_the_running_version_and_the_seed_as_leader() {
    let net = Loopback::new();
    let seed = EtcdProcess::start_seed(&net, 1, "seed").await;
    let client = member_client();
    let seed_id = list(&client, &[seed.client_url()]).await[0].id;

    let health = status(&client, &seed.client_url()).await;

    assert!(health.reachable);
    assert!(health.is_healthy(), "{health:?}");
    assert_eq!(health.version, Some("3.4.23".parse::<Version>().unwrap()));
    assert_eq!(health.leader, Some(seed_id));
}

#[actix_rt::test]
async fn a_voting_member_added_then_started_is_listed_as_a_second_started_member() {
    let net = Loopback::new();
    let seed = EtcdProcess::start_seed(&net, 1, "seed").await;
    let client = member_client();
    let endpoints = vec![seed.client_url()];

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

    let initial_cluster = format!(
        "{},{}",
        net.cluster_entry("seed", 1),
        net.cluster_entry("m2", 2)
    );
    let m2 = EtcdProcess::join(&net, 2, "m2", &initial_cluster).await;
    let members = wait_started(&client, &endpoints, 2).await;

    assert_eq!(members.len(), 2);
    let joined = named(&members, "m2");
    assert_eq!(joined.id, added.id);
    assert_eq!(joined.client_urls, vec![m2.client_url()]);
    assert!(members.iter().all(|m| !m.is_learner));
}

#[actix_rt::test]
async fn a_learner_is_promoted_to_a_voting_member_once_it_has_caught_up() {
    let net = Loopback::new();
    let seed = EtcdProcess::start_seed(&net, 1, "seed").await;
    let client = member_client();
    let endpoints = vec![seed.client_url()];

    let added = add(&client, &endpoints, &net.peer_url(2), true)
        .await
        .expect("member add --learner succeeds");
    let learner = added.members.iter().find(|m| m.id == added.id).unwrap();
    assert!(learner.is_learner);

    // Before the learner runs, it cannot have caught up.
    let early = ask(
        &client,
        PromoteMember {
            endpoints: endpoints.clone(),
            id: added.id,
        },
    )
    .await
    .expect_err("a learner that never started cannot be promoted");
    eprintln!("promote before start: {early:?}");
    assert_eq!(early.kind, EtcdErrorKind::LearnerNotReady);

    let initial_cluster = format!(
        "{},{}",
        net.cluster_entry("seed", 1),
        net.cluster_entry("learner", 2)
    );
    let _learner = EtcdProcess::join(&net, 2, "learner", &initial_cluster).await;
    let members = wait_started(&client, &endpoints, 2).await;
    assert!(named(&members, "learner").is_learner);

    let mut attempts = 0;
    loop {
        attempts += 1;
        let promoted = ask(
            &client,
            PromoteMember {
                endpoints: endpoints.clone(),
                id: added.id,
            },
        )
        .await;
        match promoted {
            Ok(()) => break,
            Err(e) if e.kind == EtcdErrorKind::LearnerNotReady && attempts < 20 => {
                eprintln!("promote attempt {attempts}: {e:?}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("member promote failed after {attempts} attempts: {e:?}"),
        }
    }

    let members = list(&client, &endpoints).await;
    assert_eq!(members.len(), 2);
    assert!(!named(&members, "learner").is_learner, "{members:?}");
}

#[actix_rt::test]
async fn a_member_add_right_after_a_join_is_refused_as_unhealthy_until_about_five_seconds_pass() {
    let net = Loopback::new();
    let seed = EtcdProcess::start_seed(&net, 1, "seed").await;
    let client = member_client();
    let endpoints = vec![seed.client_url()];

    add(&client, &endpoints, &net.peer_url(2), false)
        .await
        .expect("member add succeeds");
    let initial_cluster = format!(
        "{},{}",
        net.cluster_entry("seed", 1),
        net.cluster_entry("m2", 2)
    );
    let _m2 = EtcdProcess::join(&net, 2, "m2", &initial_cluster).await;
    let joined = Instant::now();
    wait_started(&client, &endpoints, 2).await;

    let refused = add(&client, &endpoints, &net.peer_url(3), false)
        .await
        .expect_err("etcd refuses a member add right after a join");
    eprintln!(
        "member add {:?} after the join: {refused:?}",
        joined.elapsed()
    );
    assert_eq!(refused.kind, EtcdErrorKind::UnhealthyCluster);
    assert!(refused.message.contains("etcdserver: unhealthy cluster"));

    tokio::time::sleep(Duration::from_secs(5).saturating_sub(joined.elapsed())).await;
    let mut attempts = 0;
    let added = loop {
        attempts += 1;
        match add(&client, &endpoints, &net.peer_url(3), false).await {
            Ok(added) => break added,
            Err(e) if e.kind == EtcdErrorKind::UnhealthyCluster && attempts < 20 => {
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            Err(e) => panic!("member add failed after {attempts} attempts: {e:?}"),
        }
    };
    eprintln!(
        "member add succeeded {:?} after the join, attempt {attempts}",
        joined.elapsed()
    );
    assert_eq!(added.members.len(), 3);
}

#[actix_rt::test]
async fn a_removed_member_is_gone_from_the_list() {
    let net = Loopback::new();
    let seed = EtcdProcess::start_seed(&net, 1, "seed").await;
    let client = member_client();
    let endpoints = vec![seed.client_url()];

    let added = add(&client, &endpoints, &net.peer_url(2), true)
        .await
        .expect("member add --learner succeeds");
    let initial_cluster = format!(
        "{},{}",
        net.cluster_entry("seed", 1),
        net.cluster_entry("m2", 2)
    );
    let _m2 = EtcdProcess::join(&net, 2, "m2", &initial_cluster).await;
    wait_started(&client, &endpoints, 2).await;

    ask(
        &client,
        RemoveMember {
            endpoints: endpoints.clone(),
            id: added.id,
        },
    )
    .await
    .expect("member remove succeeds");

    let members = list(&client, &endpoints).await;
    assert_eq!(members.len(), 1, "{members:?}");
    assert_eq!(members[0].name, "seed");

    let again = ask(
        &client,
        RemoveMember {
            endpoints: endpoints.clone(),
            id: added.id,
        },
    )
    .await
    .expect_err("a removed member cannot be removed twice");
    eprintln!("second remove: {again:?}");
    assert_eq!(again.kind, EtcdErrorKind::MemberNotFound);
}

#[actix_rt::test]
async fn calls_to_a_stopped_member_fail_within_the_timeout_and_recover_when_it_is_back() {
    let net = Loopback::new();
    let mut seed = EtcdProcess::start_seed(&net, 1, "seed").await;
    let client = member_client();
    let endpoints = vec![seed.client_url()];
    // Connect (and cache the connection) while the member is up.
    list(&client, &endpoints).await;

    seed.stop();

    let started = Instant::now();
    let status = ask(
        &client,
        MemberStatus {
            endpoint: seed.client_url(),
        },
    )
    .await
    .expect_err("a stopped member has no status");
    let status_took = started.elapsed();
    eprintln!("status of a stopped member after {status_took:?}: {status:?}");

    let started = Instant::now();
    let listed = ask(
        &client,
        ListMembers {
            endpoints: endpoints.clone(),
        },
    )
    .await
    .expect_err("a stopped member lists nothing");
    let list_took = started.elapsed();
    eprintln!("member list of a stopped member after {list_took:?}: {listed:?}");

    for (err, took) in [(&status, status_took), (&listed, list_took)] {
        assert!(
            matches!(
                err.kind,
                EtcdErrorKind::Timeout | EtcdErrorKind::Unavailable
            ),
            "{err:?}"
        );
        assert!(took <= CALL_TIMEOUT + SLACK, "{took:?}");
    }

    seed.restart().await;
    let members = list(&client, &endpoints).await;
    assert_eq!(members.len(), 1);
    let health = ask(
        &client,
        MemberStatus {
            endpoint: seed.client_url(),
        },
    )
    .await
    .expect("a member that is back answers its status");
    assert!(health.reachable);
}

#[actix_rt::test]
async fn a_second_learner_while_one_is_pending_is_refused_as_too_many_learners() {
    let net = Loopback::new();
    let seed = EtcdProcess::start_seed(&net, 1, "seed").await;
    let client = member_client();
    let endpoints = vec![seed.client_url()];

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
    let net = Loopback::new();
    let seed = EtcdProcess::start_seed(&net, 1, "seed").await;
    let client = member_client();
    let endpoints = vec![seed.client_url()];
    list(&client, &endpoints).await;

    seed.freeze();

    let started = Instant::now();
    let status = ask(
        &client,
        MemberStatus {
            endpoint: seed.client_url(),
        },
    )
    .await
    .expect_err("a frozen member answers nothing");
    let took = started.elapsed();
    eprintln!("status of a frozen member after {took:?}: {status:?}");
    assert_eq!(status.kind, EtcdErrorKind::Timeout, "{status:?}");
    assert!(
        took >= CALL_TIMEOUT - Duration::from_millis(100),
        "{took:?}"
    );
    assert!(took <= CALL_TIMEOUT + SLACK, "{took:?}");

    // A fresh connection to the frozen member (the failed one was dropped) times out too.
    let started = Instant::now();
    let listed = ask(
        &client,
        ListMembers {
            endpoints: endpoints.clone(),
        },
    )
    .await
    .expect_err("a frozen member lists nothing");
    let took = started.elapsed();
    eprintln!("member list of a frozen member after {took:?}: {listed:?}");
    assert_eq!(listed.kind, EtcdErrorKind::Timeout, "{listed:?}");
    assert!(took <= CALL_TIMEOUT + SLACK, "{took:?}");

    seed.thaw();
    let started = Instant::now();
    loop {
        let again = ask(
            &client,
            ListMembers {
                endpoints: endpoints.clone(),
            },
        )
        .await;
        match again {
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
