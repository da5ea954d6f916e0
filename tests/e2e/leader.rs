//! Leader election among the operator's two replicas (its Deployment): the standby is
//! ready to take over but never acts while the leader holds the Lease; a leader frozen
//! past its Lease, or cut off from the API server, writes nothing more; and a rolling
//! update of the Deployment, or the leader's pod deleted, during a scale-up hands over
//! without losing anything.

use std::time::Duration;

use serde_json::json;

use crate::operator::*;
use crate::support::*;

/// Log lines that report an action carried out (not one that failed or was refused).
fn actions_done(lines: &[serde_json::Value]) -> Vec<&serde_json::Value> {
    lines
        .iter()
        .filter(|l| l.get("action").is_some())
        .filter(|l| {
            let msg = l["msg"].as_str().unwrap_or_default();
            msg != "action failed" && !msg.starts_with("etcd is not ready")
        })
        .collect()
}

/// Events (events.k8s.io) in `ns` reported by `identity`, with the time each was last
/// observed.
fn events_of(ns: &str, identity: &str) -> Vec<(jiff::Timestamp, String)> {
    let (ok, out) = kubectl(
        &["get", "events.events.k8s.io", "-n", ns, "-o", "json"],
        None,
    );
    assert!(ok, "{out}");
    let list: serde_json::Value = serde_json::from_str(&out).expect("event list");
    let items = list["items"].as_array().cloned().unwrap_or_default();
    items
        .iter()
        .filter(|e| e["reportingInstance"] == identity)
        .filter_map(|e| {
            let last = e["series"]["lastObservedTime"]
                .as_str()
                .or(e["eventTime"].as_str())?;
            let time: jiff::Timestamp = last.parse().ok()?;
            Some((time, format!("{} {}", e["reason"], e["note"])))
        })
        .collect()
}

fn leader_metric(pod: &OperatorPod) -> String {
    let (_, body) = pod.get_http("/metrics");
    body.lines()
        .find(|l| l.starts_with("etcd_operator_leader "))
        .unwrap_or_default()
        .to_string()
}

#[tokio::test]
async fn the_standby_replica_stays_standby_while_the_leader_holds_the_lease() {
    let ns = Namespace::create("standby");
    apply(&cluster_yaml(&ns.0, "watched", 1, "3.5.35", false));
    wait_running(&ns.0, "watched", 1, Duration::from_secs(120)).await;
    let (leader, standbys) = standbys().await;
    assert_eq!(standbys.len(), REPLICAS - 1, "{standbys:?}");
    let standby = &standbys[0];
    // Ready means able to take over, so a rolling update of two replicas can proceed.
    assert!(standby.ready, "{standby:?}");
    patch_spec(&ns.0, "watched", json!({"size": 2})).await;
    // Several lease renewal periods, and a change to act on: it must stay standby.
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(
            standby.get_http("/readyz").0,
            "200",
            "the standby stopped being ready"
        );
        assert_eq!(lease_holder(), leader.name, "the standby took the lease");
    }
    wait_running(&ns.0, "watched", 2, Duration::from_secs(120)).await;
    assert_eq!(leader_metric(standby), "etcd_operator_leader 0");
    assert_eq!(leader_metric(&leader), "etcd_operator_leader 1");
    let (_, actors) = standby.get_http("/debug/actors");
    let actors: serde_json::Value = serde_json::from_str(&actors).expect("JSON");
    let election = actors
        .as_array()
        .and_then(|a| a.iter().find(|s| s["kind"] == "leader-election"))
        .unwrap_or_else(|| panic!("no leader-election entry: {actors}"));
    assert_eq!(election["state"]["leading"], false, "{election}");
    assert_eq!(
        election["state"]["holder"],
        leader.name.as_str(),
        "{election}"
    );
    assert!(
        actors.as_array().unwrap().len() == 1,
        "the standby runs actors: {actors}"
    );
    assert_eq!(events_of(&ns.0, &standby.name), vec![]);
    assert_eq!(
        actions_done(&standby.log()),
        Vec::<&serde_json::Value>::new()
    );
}

async fn wait_exit(what: &str, pid: i32, timeout: Duration) {
    wait_for(what, timeout, || async move {
        if process_alive(pid) {
            Err(format!("pid {pid} alive"))
        } else {
            Ok(())
        }
    })
    .await;
}

/// The log lines of `pod`'s container run that `restarts` counted, from line `from` on,
/// once the node has started the next run (so the exited one is `--previous`).
async fn log_after_exit(pod: &OperatorPod, from: usize) -> Vec<serde_json::Value> {
    let name = pod.name.clone();
    let restarts = pod.restarts;
    wait_for(
        "the exited operator container to be restarted",
        Duration::from_secs(90),
        || {
            let name = name.clone();
            async move {
                let now = OperatorPod::get(&name);
                if now.restarts > restarts && now.running {
                    Ok(())
                } else {
                    Err(format!("{now:?}"))
                }
            }
        },
    )
    .await;
    pod.log_of_run(restarts).split_off(from)
}

#[tokio::test]
async fn a_leader_frozen_past_its_lease_writes_nothing_after_it_resumes() {
    let ns = Namespace::create("frozen-leader");
    apply(&cluster_yaml(&ns.0, "frozen", 1, "3.5.35", false));
    wait_running(&ns.0, "frozen", 1, Duration::from_secs(120)).await;
    let _restored = OperatorRestored;
    let (leader, standbys) = standbys().await;
    let successor = &standbys[0];
    // Frozen for the Lease's hand-over and the start of the successor's work (about 20 s):
    // well inside the liveness probe's minute (3 × 20 s), so the node does not restart it
    // meanwhile.
    let pid = leader.pid();
    let mut frozen = Stopped::new(pid);
    wait_for(
        "the standby to take the Lease of the frozen leader",
        Duration::from_secs(60),
        || async {
            match lease_holder() {
                h if h == successor.name => Ok(()),
                h => Err(format!("held by {h:?}")),
            }
        },
    )
    .await;
    // The successor acts: the frozen leader's caches still say size 1. It is resumed as
    // soon as the successor has made the second member's pod, so that the freeze stays
    // short of the liveness probe's minute however slow the scale-up is.
    patch_spec(&ns.0, "frozen", json!({"size": 2})).await;
    wait_for(
        "the successor to make the second member's pod",
        Duration::from_secs(60),
        || async {
            match pod_uids(&ns.0) {
                pods if pods.len() >= 2 => Ok(()),
                pods => Err(format!("pods {pods:?}")),
            }
        },
    )
    .await;
    let log_offset = leader.log_of_run(leader.restarts).len();
    let resumed_at = jiff::Timestamp::now();

    frozen.resume();
    wait_exit("the resumed leader to exit", pid, Duration::from_secs(30)).await;
    let after = log_after_exit(&leader, log_offset).await;
    eprintln!("the resumed leader's log: {after:#?}");
    assert_eq!(
        actions_done(&after),
        Vec::<&serde_json::Value>::new(),
        "the resumed leader acted"
    );
    // It stopped on its own clock (its renew deadline had passed), not because an API call
    // happened to tell it another replica holds the Lease.
    assert!(
        after.iter().any(|l| l["msg"] == "stopped leading"
            && l["reason"]
                .as_str()
                .is_some_and(|r| r.contains("renew deadline"))),
        "{after:#?}"
    );
    let late: Vec<_> = events_of(&ns.0, &leader.name)
        .into_iter()
        .filter(|(time, _)| *time >= resumed_at)
        .collect();
    assert_eq!(late, vec![], "the resumed leader recorded Events");
    // The successor finishes the scale-up and keeps the cluster as it is: nothing to
    // repair.
    let ready = wait_running(&ns.0, "frozen", 2, Duration::from_secs(120)).await;
    let mut client = etcd(&ns.0, &ready).await;
    let members = member_list(&mut client).await;
    let pods = pod_uids(&ns.0);
    tokio::time::sleep(Duration::from_secs(3)).await;
    wait_running(&ns.0, "frozen", 2, Duration::from_secs(30)).await;
    assert_eq!(
        member_list(&mut client).await,
        members,
        "membership changed"
    );
    assert_eq!(pod_uids(&ns.0), pods, "a pod was created or deleted");
}

#[tokio::test]
async fn a_leader_cut_off_from_the_api_server_stops_before_its_lease_could_expire() {
    let _restored = OperatorRestored;
    let leader = leader().await;
    let log_offset = leader.log().len();
    // Its process, found before the API server (which names its container) is stopped.
    let pid = leader.pid();
    // Every API call of the leader hangs from now on (connections are accepted by the
    // kernel, never answered). Its last renewal was at most a retry period ago, so its
    // Lease, as another replica sees it, expires at the earliest 15 s from now.
    let mut api_server = Stopped::new(control_plane_pid("kube-apiserver"));
    wait_exit(
        "the leader to stop before its Lease could expire",
        pid,
        Duration::from_secs(15),
    )
    .await;
    api_server.resume();
    let after = log_after_exit(&leader, log_offset).await;
    assert!(
        after.iter().any(|l| l["msg"] == "stopped leading"),
        "{after:#?}"
    );
}

/// Applies a size-1 cluster, waits until it runs and writes keys; its member list and
/// cluster ID.
async fn running_single(ns: &str, name: &str) -> (Vec<(u64, String, bool)>, u64) {
    apply(&cluster_yaml(ns, name, 1, "3.5.35", false));
    let ready = wait_running(ns, name, 1, Duration::from_secs(120)).await;
    let mut client = etcd(ns, &ready).await;
    write_keys(&mut client, name, 30).await;
    (
        member_list(&mut client).await,
        cluster_id(&mut client).await,
    )
}

/// After a scale-up from one member to three that a hand-over interrupted: three voting
/// members, the first one among them, the same cluster, every key, and no member
/// removed or replaced on the way.
async fn assert_scaled_up_intact(ns: &str, name: &str, before: &[(u64, String, bool)], id: u64) {
    let ready = wait_running(ns, name, 3, Duration::from_secs(180)).await;
    let mut client = etcd(ns, &ready).await;
    let members = member_list(&mut client).await;
    assert_voters(&members, 3);
    assert!(
        members.contains(&before[0]),
        "{before:?} not in {members:?}"
    );
    assert_eq!(cluster_id(&mut client).await, id, "another cluster");
    assert_keys(&mut client, name, 30).await;
    let events = event_names(ns, "reason=MemberRemoved");
    assert_eq!(events, Vec::<String>::new(), "a member was removed");
}

/// Asks for three members and waits until the cluster is scaling.
async fn start_scale_up(ns: &str, name: &str) {
    patch_spec(ns, name, json!({"size": 3})).await;
    let what = "the scale-up to start";
    wait_status(ns, name, what, Duration::from_secs(60), |s| {
        s.phase == "Scaling"
    })
    .await;
}

#[tokio::test]
async fn a_rolling_update_of_the_operator_during_a_scale_up_hands_over_and_loses_nothing() {
    let ns = Namespace::create("operator-rollout");
    let (before, id) = running_single(&ns.0, "rolled").await;
    let old_leader = leader().await;
    let _restored = RolloutReverted;
    start_scale_up(&ns.0, "rolled").await;
    // A changed env var: a new ReplicaSet, pods replaced one at a time.
    let (ok, out) = set_operator_env(ROLLOUT_ENV_SET);
    assert!(ok, "kubectl set env: {out}");
    let (ok, out) = rollout_complete("180s");
    assert!(ok, "the rollout did not complete: {out}");
    let new_leader = leader().await;
    assert_ne!(
        new_leader.name, old_leader.name,
        "the old leader's pod still leads"
    );
    assert_scaled_up_intact(&ns.0, "rolled", &before, id).await;
}

/// The env var the rollout test sets, and how it is removed again.
const ROLLOUT_ENV_SET: &str = "E2E_ROLLOUT=1";
const ROLLOUT_ENV_UNSET: &str = "E2E_ROLLOUT-";

/// Removes the rollout test's env var (another rollout) and waits until the Deployment
/// is settled, when dropped.
struct RolloutReverted;

impl Drop for RolloutReverted {
    fn drop(&mut self) {
        let _ = set_operator_env(ROLLOUT_ENV_UNSET);
        restore_operator();
    }
}

#[tokio::test]
async fn the_leaders_pod_deleted_during_a_scale_up_hands_over_and_the_scale_up_completes() {
    let ns = Namespace::create("leader-deleted");
    let (before, id) = running_single(&ns.0, "handed").await;
    let _restored = OperatorRestored;
    let old_leader = leader().await;
    start_scale_up(&ns.0, "handed").await;
    let (ok, out) = kubectl_operator(&["delete", "pod", &old_leader.name, "--wait=false"]);
    assert!(ok, "kubectl delete pod: {out}");
    wait_for(
        "another pod to take the Lease",
        Duration::from_secs(60),
        || async {
            match lease_holder() {
                h if !h.is_empty() && h != old_leader.name => Ok(()),
                h => Err(format!("held by {h:?}")),
            }
        },
    )
    .await;
    assert_scaled_up_intact(&ns.0, "handed", &before, id).await;
}
