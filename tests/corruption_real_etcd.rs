//! etcd's own corruption checks, as the operator switches them on in member pods, against
//! real etcd 3.5 processes whose data is made to differ: a member whose data differs from
//! its peers' does not start with the initial check, and one that runs anyway is found
//! by the compaction hash check after the next compaction, whose CORRUPT alarm the
//! operator reads as an alarm (not as a lost member), and by the operator's own
//! comparison of the members' hashes, which names it.

mod support;

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use etcd_operator::etcd_api::EtcdClientApi;
use etcd_operator_actors::ports::EtcdApi;
use etcd_operator_core::lifecycle::{
    Alarm, AlarmKind, Consistency, Divergence, HashCheck, compare,
};
use support::etcd_process::{EtcdProcess, Loopback, cached_etcd};

/// The test rig's tool that changes a stopped member's stored value.
fn corrupt_bin() -> PathBuf {
    support::cached_tool("corrupt/bin/corrupt", "corrupt")
}

/// `args` with the initial check on or off (the operator's pods run it: as a variable,
/// the same setting as this flag).
fn with_initial_check(args: &[String], on: bool) -> Vec<String> {
    let mut args = args.to_vec();
    args.push(format!("--experimental-initial-corrupt-check={on}"));
    args
}

/// A three-member etcd 3.5 cluster on its own network. Every member runs the compaction
/// hash check (the operator's pods do), looking every second so that whichever leads
/// checks soon after a compaction, and snapshots its membership often (etcd 3.5 knows its
/// peers at start only from such a snapshot: before one, its initial check has no one to
/// compare with).
async fn three_members(net: &Loopback) -> Vec<EtcdProcess> {
    let bin = cached_etcd("v3.5", "etcd");
    let mut members = vec![EtcdProcess::start_seed_with(&bin, net, 1, "m1").await];
    let mut initial = net.cluster_entry("m1", 1);
    for m in 2..=3u8 {
        let name = format!("m{m}");
        let mut client = etcd_client::Client::connect([members[0].client_url()], None)
            .await
            .expect("connect");
        // etcd refuses a member add for 5 s after the last one joined ("unhealthy
        // cluster").
        let started = Instant::now();
        while let Err(e) = client.member_add([net.peer_url(m)], None).await {
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "member add: {e}"
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        initial = format!("{initial},{}", net.cluster_entry(&name, m));
        members.push(EtcdProcess::join_with(&bin, net, m, &name, &initial).await);
    }
    for member in &mut members {
        let mut args = member.args().to_vec();
        args.extend([
            "--experimental-compact-hash-check-enabled=true".to_string(),
            "--experimental-compact-hash-check-time=1s".to_string(),
            "--snapshot-count=10".to_string(),
        ]);
        member.relaunch_with(args).await;
    }
    members
}

#[tokio::test]
async fn a_member_whose_data_differs_does_not_start_and_one_that_runs_raises_corrupt() {
    let net = Loopback::new();
    let mut members = three_members(&net).await;
    let mut client = etcd_client::Client::connect([members[0].client_url()], None)
        .await
        .expect("connect");
    for i in 0..20 {
        client
            .put(format!("k{i:02}"), format!("v{i:02}"), None)
            .await
            .expect("put");
    }
    let revision = client
        .get("k00", None)
        .await
        .expect("get")
        .header()
        .unwrap()
        .revision();
    // Every member has applied the last put before m3 stops.
    tokio::time::sleep(Duration::from_millis(500)).await;

    let m3 = &mut members[2];
    let base = m3.args().to_vec();
    m3.stop();
    let db = m3.data_dir().join("member/snap/db");
    let out = Command::new(corrupt_bin())
        .arg(&db)
        .output()
        .expect("run corrupt");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // With the initial check, the member refuses to serve data that differs.
    m3.relaunch_without_waiting(with_initial_check(&base, true));
    let started = Instant::now();
    while m3.is_running() {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "a member whose data differs kept running: {}",
            m3.log_tail(20)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        m3.log_tail(40).contains("data inconsistency"),
        "{}",
        m3.log_tail(40)
    );

    // Started without it (a pod made before the check was on), it serves, until a
    // compaction's hash shows its data differs.
    m3.relaunch_with(with_initial_check(&base, false)).await;
    client.compact(revision, None).await.expect("compact");
    let api = EtcdClientApi::new(Duration::from_secs(2));
    let started = Instant::now();
    let health = loop {
        let health = api.status(&members[0].client_url()).await.expect("status");
        if !health.alarms.is_empty() {
            break health;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no alarm after the compaction: {health:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    // etcd 3.5 raises it for no member in particular: it cannot tell which side
    // differs.
    assert_eq!(
        health.alarms,
        [Alarm {
            member: 0,
            kind: AlarmKind::Corrupt
        }],
    );
    assert!(
        health.is_healthy(),
        "an alarm is not a lost member: {health:?}"
    );

    // The operator's own comparison names the member: each member's HashKV at a
    // revision every one of them has.
    let ids = member_ids(&mut client).await;
    let newest = health.revision.expect("a revision");
    let mut hashes = std::collections::BTreeMap::new();
    for member in &members {
        let hash = api
            .hash_kv(&member.client_url(), newest)
            .await
            .expect("hash kv");
        hashes.insert(ids[member.name()], hash);
    }
    let found = compare(&HashCheck {
        revision: newest,
        hashes,
    });
    assert_eq!(
        found,
        Consistency::Differs(Divergence {
            members: vec![ids["m3"]],
            revision: newest
        })
    );
}

/// Member IDs by name.
async fn member_ids(client: &mut etcd_client::Client) -> std::collections::BTreeMap<String, u64> {
    let list = client.member_list().await.expect("member list");
    list.members()
        .iter()
        .map(|m| (m.name().to_string(), m.id()))
        .collect()
}
