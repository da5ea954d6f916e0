//! The MemberClient actor: serialization, and calls that time out at the port's deadline,
//! against the fake etcd.

use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use etcd_operator_actors::member_client::{
    AddMember, ListMembers, MemberClient, ProbeMember, PromoteMember, RemoveMember,
};
use etcd_operator_actors::ports::{EtcdApi, EtcdErrorKind, NewMember};
use etcd_operator_core::lifecycle::TlsMode;
use etcd_operator_core::topology::Topology;
use etcd_operator_fakes::FakeCluster;
use futures::future::join_all;
use tokio::time::Instant;

/// The fake etcd's deadline of one call (the port owns it; the MemberClient sets none).
const TIMEOUT: Duration = Duration::from_secs(3);

fn demo() -> Topology {
    Topology::new("default", "demo")
}

fn endpoints(fake: &FakeCluster) -> Vec<String> {
    fake.members()
        .iter()
        .map(|m| fake.topology().client_url(&m.name, TlsMode::Off))
        .collect()
}

fn client(fake: &FakeCluster) -> Addr<MemberClient> {
    fake.set_call_timeout(TIMEOUT);
    MemberClient::new(Arc::new(fake.clone())).start()
}

#[actix_rt::test]
async fn the_fake_sees_overlapping_calls_when_nothing_serializes_them() {
    tokio::time::pause();
    let fake = FakeCluster::running(demo(), 3, "3.5.21");
    fake.set_latency(Duration::from_millis(10));
    let eps = endpoints(&fake);

    let calls = (0..5).map(|_| fake.list(&eps));
    let results = join_all(calls).await;

    assert!(results.iter().all(Result::is_ok));
    assert_eq!(fake.calls().max_etcd_in_flight, 5);
}

#[actix_rt::test]
async fn calls_sent_all_at_once_run_one_at_a_time() {
    tokio::time::pause();
    let fake = FakeCluster::running(demo(), 3, "3.5.21");
    fake.set_latency(Duration::from_millis(10));
    let eps = endpoints(&fake);
    let client = client(&fake);

    let lists = (0..10).map(|_| {
        client.send(ListMembers {
            endpoints: eps.clone(),
        })
    });
    let statuses = fake.members().into_iter().map(|m| {
        client.send(ProbeMember {
            endpoint: m.client_urls[0].clone(),
        })
    });
    let adds = (0..3).map(|i| {
        client.send(AddMember {
            endpoints: eps.clone(),
            member: NewMember {
                peer_url: demo().peer_url(&format!("demo-new{i}"), TlsMode::Off),
                learner: false,
            },
        })
    });
    let (lists, statuses, adds) =
        futures::join!(join_all(lists), join_all(statuses), join_all(adds));

    assert!(lists.into_iter().all(|r| r.unwrap().is_ok()));
    assert!(statuses.into_iter().all(|r| r.unwrap().is_ok()));
    assert!(adds.into_iter().all(|r| r.unwrap().is_ok()));
    let calls = fake.calls();
    assert_eq!((calls.list, calls.status, calls.add), (10, 3, 3));
    assert_eq!(calls.max_etcd_in_flight, 1);
    assert_eq!(calls.max_membership_in_flight, 1);
}

#[actix_rt::test]
async fn a_hung_call_returns_the_ports_timeout_error_and_the_client_goes_on() {
    tokio::time::pause();
    let fake = FakeCluster::running(demo(), 3, "3.5.21");
    let client = client(&fake);
    fake.set_hang(true);

    let started = Instant::now();
    let result = client
        .send(ListMembers {
            endpoints: endpoints(&fake),
        })
        .await
        .unwrap();

    let error = result.unwrap_err();
    assert_eq!(error.kind, EtcdErrorKind::Timeout);
    let waited = started.elapsed();
    assert!(
        waited >= TIMEOUT && waited < TIMEOUT + Duration::from_millis(100),
        "{waited:?}"
    );
    // The client is not stuck behind the abandoned call.
    fake.set_hang(false);
    let members = client
        .send(ListMembers {
            endpoints: endpoints(&fake),
        })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(members.members.len(), 3);
}

#[actix_rt::test]
async fn calls_queued_behind_a_hung_call_wait_for_it_then_get_their_own_deadline() {
    tokio::time::pause();
    let fake = FakeCluster::running(demo(), 3, "3.5.21");
    let client = client(&fake);
    fake.set_hang(true);
    let eps = endpoints(&fake);
    let started = Instant::now();

    let first = async {
        let r = client
            .send(ListMembers {
                endpoints: eps.clone(),
            })
            .await
            .unwrap();
        (r.unwrap_err().kind, started.elapsed())
    };
    let second = async {
        let r = client
            .send(RemoveMember {
                endpoints: eps.clone(),
                id: 1,
            })
            .await
            .unwrap();
        (r.unwrap_err().kind, started.elapsed())
    };
    let ((k1, t1), (k2, t2)) = futures::join!(first, second);

    assert_eq!((k1, k2), (EtcdErrorKind::Timeout, EtcdErrorKind::Timeout));
    assert!(t1 >= TIMEOUT && t1 < 2 * TIMEOUT, "{t1:?}");
    assert!(
        t2 >= 2 * TIMEOUT,
        "the second started after the first gave up: {t2:?}"
    );
    assert_eq!(fake.calls().max_etcd_in_flight, 1);
    assert_eq!(
        fake.members().len(),
        3,
        "the timed-out remove changed nothing"
    );
}

#[actix_rt::test]
async fn etcd_refusals_come_back_as_classified_values() {
    let fake = FakeCluster::running(demo(), 3, "3.5.21");
    let client = client(&fake);
    let eps = endpoints(&fake);

    let missing = client
        .send(RemoveMember {
            endpoints: eps.clone(),
            id: 999,
        })
        .await
        .unwrap();
    let voter = client
        .send(PromoteMember {
            endpoints: eps.clone(),
            id: fake.members()[0].id,
        })
        .await
        .unwrap();
    let unreachable = client
        .send(ListMembers {
            endpoints: vec![demo().client_url("demo-nobody", TlsMode::Off)],
        })
        .await
        .unwrap();

    assert_eq!(missing.unwrap_err().kind, EtcdErrorKind::MemberNotFound);
    assert_eq!(voter.unwrap_err().kind, EtcdErrorKind::Rejected);
    assert_eq!(unreachable.unwrap_err().kind, EtcdErrorKind::Unavailable);
}

#[actix_rt::test]
async fn a_membership_call_whose_caller_gave_up_still_ends_and_the_next_waits_behind_it() {
    // Why the MemberClient is an actor and not a lock around the port: a tick that is
    // abandoned drops its future, and its `member add` must not be cut off mid-request.
    tokio::time::pause();
    let fake = FakeCluster::running(demo(), 3, "3.5.21");
    let client = client(&fake);
    fake.set_latency(Duration::from_secs(2));
    let add = client.send(AddMember {
        endpoints: endpoints(&fake),
        member: NewMember {
            peer_url: demo().peer_url("demo-new", TlsMode::Off),
            learner: true,
        },
    });
    let started = Instant::now();
    // The caller gives up after half a second, as an abandoned tick would.
    assert!(
        tokio::time::timeout(Duration::from_millis(500), add)
            .await
            .is_err()
    );

    let list = client
        .send(ListMembers {
            endpoints: endpoints(&fake),
        })
        .await
        .unwrap()
        .unwrap();
    // The add ran to its end: the list that waited behind it shows the new member.
    assert_eq!(list.members.len(), 4);
    assert!(
        started.elapsed() >= Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
    let calls = fake.calls();
    assert_eq!((calls.add, calls.max_membership_in_flight), (1, 1));
}
