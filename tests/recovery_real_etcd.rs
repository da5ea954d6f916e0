//! Recovery from a permanent loss of quorum against real etcd processes (loopback only):
//! a survivor restarted alone with the command line the operator gives its pod
//! (`--force-new-cluster` on its own data), then grown back with a learner, as the
//! lifecycle's `FromSurvivor` recovery does.
//!
//! The etcd binaries are the cached 3.5 and 3.6 (`testkit/env/build/build-binaries.sh etcd`):
//! the releases from which the operator uses `--force-new-cluster`
//! (`FORCE_NEW_CLUSTER_VERIFIED`). Debian's etcd 3.4.23 fails this test (a joining
//! member gets one key fewer than the survivor serves), and the operator refuses it.

mod support;

use std::time::{Duration, Instant};

use etcd_operator::etcd_api::EtcdClientApi;
use etcd_operator::etcd_flags;
use etcd_operator_actors::ports::{
    EtcdApi, EtcdError, EtcdErrorKind, InitialState, MemberPod, NewMember,
};
use etcd_operator_core::lifecycle::{MemberView, TlsMode, Version};
use etcd_operator_core::topology::Topology;
use std::path::{Path, PathBuf};

use etcd_operator_core::lifecycle::force_new_cluster_is_safe;
use support::etcd_process::{EtcdProcess, Loopback, cached_etcd, read_keys, write_keys};

/// The deadline of each etcd call.
const CALL_TIMEOUT: Duration = Duration::from_secs(2);
/// How long etcd may refuse a step "for now" (a join's 5-second gate, a learner catching
/// up) before the test gives up.
const PATIENCE: Duration = Duration::from_secs(30);
/// Keys written before the loss.
const KEYS: usize = 200;

/// Calls `call` until etcd stops refusing it for now (unhealthy cluster, learner not
/// ready, no leader yet); any other error fails the test.
async fn when_etcd_agrees<T, F, Fut>(what: &str, mut call: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, EtcdError>>,
{
    let started = Instant::now();
    loop {
        match call().await {
            Ok(answer) => return answer,
            Err(e)
                if matches!(
                    e.kind,
                    EtcdErrorKind::UnhealthyCluster
                        | EtcdErrorKind::LearnerNotReady
                        | EtcdErrorKind::Unavailable
                        | EtcdErrorKind::Timeout
                ) && started.elapsed() < PATIENCE =>
            {
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            Err(e) => panic!("{what}: {e:?}"),
        }
    }
}

/// `member add`s member `m` of `net` (named `name`) through `via`, then starts it with
/// the member list etcd returned.
/// An etcd binary and the version it reports.
struct Etcd {
    bin: PathBuf,
    version: Version,
}

impl Etcd {
    /// The cached etcd of `series` (`v3.5`, `v3.6`).
    fn cached(series: &str) -> Self {
        let bin = cached_etcd(series, "etcd");
        Etcd {
            version: version_of(&bin),
            bin,
        }
    }
}

/// What `etcd --version` says.
fn version_of(bin: &Path) -> Version {
    let out = std::process::Command::new(bin)
        .arg("--version")
        .output()
        .expect("run etcd --version");
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|l| l.strip_prefix("etcd Version: "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no version in {text:?}"))
}

async fn add_member(
    etcd: &Etcd,
    api: &EtcdClientApi,
    net: &Loopback,
    via: &str,
    (m, name): (u8, &str),
    learner: bool,
) -> (u64, EtcdProcess) {
    let new = NewMember {
        peer_url: net.peer_url(m),
        learner,
    };
    let endpoints = [via.to_string()];
    let added = when_etcd_agrees("member add", || api.add(&endpoints, &new)).await;
    let initial_cluster: Vec<String> = added
        .members
        .iter()
        .map(|member| {
            let who = if member.id == added.id {
                name
            } else {
                member.name.as_str()
            };
            format!("{who}={}", member.peer_urls[0])
        })
        .collect();
    let initial_cluster = initial_cluster.join(",");
    let process = EtcdProcess::join_with(&etcd.bin, net, m, name, &initial_cluster).await;
    (added.id, process)
}

/// The command line the operator gives the pod of member `name` (cluster `demo`), for
/// `state`, with what a pod has and a test process has not put in place: the pod's IP,
/// the member's DNS name (both member `m`'s loopback address here) and its data directory.
fn operator_command_line(
    etcd: &Etcd,
    net: &Loopback,
    (m, name): (u8, &str),
    member: &EtcdProcess,
    state: InitialState,
) -> Vec<String> {
    let topology = Topology::new("default", "demo");
    let pod = MemberPod {
        name: name.to_string(),
        version: etcd.version.clone(),
        initial_cluster: topology.initial_cluster(&[name.to_string()], TlsMode::Off),
        state,
        voter: true,
        restore: None,
        prepared_with: None,
    };
    let host = topology.member_host(name);
    let ip = net.ip(m).to_string();
    etcd_flags(&topology, &pod, TlsMode::Off)
        .into_iter()
        .map(|flag| match flag.strip_prefix("--data-dir=") {
            Some(_) => format!("--data-dir={}", member.data_dir().display()),
            None => flag.replace("$(POD_IP)", &ip).replace(&host, &ip),
        })
        .collect()
}

fn names(members: &[MemberView]) -> Vec<(String, bool)> {
    let mut names: Vec<(String, bool)> = members
        .iter()
        .map(|m| (m.name.clone(), m.is_learner))
        .collect();
    names.sort();
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_etcd_3_5_a_survivor_restarted_alone_keeps_every_key_and_grows_back_with_a_learner() {
    recover_from_a_survivor(&Etcd::cached("v3.5")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_etcd_3_6_a_survivor_restarted_alone_keeps_every_key_and_grows_back_with_a_learner() {
    recover_from_a_survivor(&Etcd::cached("v3.6")).await;
}

/// Three members, two gone with their data; the survivor restarted alone with the
/// operator's command line, then grown back with a learner that is promoted.
async fn recover_from_a_survivor(etcd: &Etcd) {
    assert!(
        force_new_cluster_is_safe(&etcd.version),
        "the operator would refuse etcd {}",
        etcd.version
    );
    let net = Loopback::new();
    let api = EtcdClientApi::new(CALL_TIMEOUT);
    let mut survivor = EtcdProcess::start_seed_with(&etcd.bin, &net, 1, "m1").await;
    let m1 = survivor.client_url();
    let (_, mut m2) = add_member(etcd, &api, &net, &m1, (2, "m2"), false).await;
    let (_, mut m3) = add_member(etcd, &api, &net, &m1, (3, "m3"), false).await;
    write_keys(&m1, KEYS).await;
    let before = api.status(&m1).await.unwrap();
    let cluster_id = before.cluster_id.expect("the status names the cluster");

    // Two of three gone with their data: the quorum cannot come back.
    for gone in [&mut m2, &mut m3] {
        gone.stop();
        std::fs::remove_dir_all(gone.data_dir()).unwrap();
    }
    // What the operator chooses the survivor by: its raft index, and its revision.
    let started = Instant::now();
    let alone = loop {
        let status = when_etcd_agrees("endpoint status", || api.status(&m1)).await;
        // A leader steps down once it has not heard from a quorum for an election timeout.
        if status.leader.is_none() {
            break status;
        }
        assert!(
            started.elapsed() < PATIENCE,
            "still a leader alone: {status:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let raft_index = alone.raft_index.expect("the status gives the raft index");
    assert!(raft_index >= before.raft_index.unwrap());
    assert_eq!(alone.revision, Some(i64::try_from(KEYS).unwrap() + 1));

    // The operator's pod for the survivor: --force-new-cluster on its own data.
    let forced = operator_command_line(
        etcd,
        &net,
        (1, "m1"),
        &survivor,
        InitialState::ForceNewCluster,
    );
    assert!(
        forced.contains(&"--force-new-cluster".to_string()),
        "{forced:?}"
    );
    survivor.relaunch_with(forced).await;
    let list = when_etcd_agrees("member list", || api.list(std::slice::from_ref(&m1))).await;
    assert_eq!(list.cluster_id, cluster_id, "the same etcd cluster");
    assert_eq!(names(&list.members), [("m1".to_string(), false)]);
    let (count, last, revision) = read_keys(&m1).await;
    assert_eq!((count, last.as_str()), (KEYS, "value-00199"));
    assert!(revision > i64::try_from(KEYS).unwrap());

    // Then without the flag (the operator makes the pod again), still alone.
    let plain = operator_command_line(etcd, &net, (1, "m1"), &survivor, InitialState::Existing);
    assert!(!plain.contains(&"--force-new-cluster".to_string()));
    survivor.relaunch_with(plain).await;
    let list = when_etcd_agrees("member list", || api.list(std::slice::from_ref(&m1))).await;
    assert_eq!(names(&list.members), [("m1".to_string(), false)]);

    // The scale-up path: a learner, caught up, then promoted.
    let (learner_id, m4) = add_member(etcd, &api, &net, &m1, (4, "m4"), true).await;
    let endpoints = [m1.clone()];
    when_etcd_agrees("member promote", || api.promote(&endpoints, learner_id)).await;
    let list = when_etcd_agrees("member list", || api.list(&endpoints)).await;
    assert_eq!(
        names(&list.members),
        [("m1".to_string(), false), ("m4".to_string(), false)]
    );
    // m4 serves clients once it has applied its own promotion.
    let m4_url = [m4.client_url()];
    let started = Instant::now();
    loop {
        // A learner refuses the call ("rpc not supported for learner").
        let own = api.list(&m4_url).await;
        if own
            .as_ref()
            .is_ok_and(|l| l.members.iter().all(|m| !m.is_learner))
        {
            break;
        }
        assert!(started.elapsed() < PATIENCE, "m4 still a learner: {own:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // A linearizable read through the new member: every key the survivor had.
    let (count, last, _) = read_keys(&m4.client_url()).await;
    assert_eq!((count, last.as_str()), (KEYS, "value-00199"));
}
