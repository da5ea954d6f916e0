//! What only a real kubelet does to a member: a graceful node shutdown, a lost pod
//! sandbox, `kubectl exec`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::runtime::{WatchStreamExt, watcher};

use crate::support::*;
use crate::volumes::{assert_same_cluster, claimed_running};

/// A pod a watch saw terminal (phase Failed or Succeeded).
#[derive(Clone, Debug, PartialEq)]
struct Terminal {
    name: String,
    uid: String,
    phase: String,
    /// The reason of its `DisruptionTarget` condition, when it has one (the kubelet's
    /// `TerminationByKubelet` after a graceful node shutdown).
    disruption: Option<String>,
}

/// Every pod of `ns` a watch saw terminal, each state once, in the order seen.
struct TerminalPods {
    seen: Arc<Mutex<Vec<Terminal>>>,
    task: tokio::task::JoinHandle<()>,
}

impl TerminalPods {
    async fn watch(ns: &str) -> Self {
        let pods: Api<Pod> = Api::namespaced(client().await, ns);
        let seen = Arc::new(Mutex::new(Vec::new()));
        let record = seen.clone();
        let task = tokio::spawn(async move {
            // Backed off and resumed after an error: a broken watch must not end the record.
            let mut changes = watcher(pods, watcher::Config::default())
                .default_backoff()
                .applied_objects()
                .boxed();
            while let Some(change) = changes.next().await {
                let Ok(pod) = change else { continue };
                let status = pod.status.unwrap_or_default();
                let phase = status.phase.unwrap_or_default();
                if phase != "Failed" && phase != "Succeeded" {
                    continue;
                }
                let disruption = status
                    .conditions
                    .unwrap_or_default()
                    .into_iter()
                    .find(|c| c.type_ == "DisruptionTarget" && c.status == "True")
                    .map(|c| c.reason.unwrap_or_default());
                let entry = Terminal {
                    name: pod.metadata.name.unwrap_or_default(),
                    uid: pod.metadata.uid.unwrap_or_default(),
                    phase,
                    disruption,
                };
                let mut seen = record.lock().unwrap();
                if !seen.contains(&entry) {
                    seen.push(entry);
                }
            }
        });
        TerminalPods { seen, task }
    }

    fn seen(&self) -> Vec<Terminal> {
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for TerminalPods {
    fn drop(&mut self) {
        self.task.abort();
    }
}

// Two worker threads: the pod watch keeps reading while `nodes.sh shutdown` blocks the
// test's own thread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_shutdown_of_a_members_node_ends_its_pod_keeps_its_claim_and_member() {
    let ns = Namespace::create("shutdown");
    let (before, ready) = claimed_running(&ns.0, "graceful", 3).await;
    let victim = ready[0].clone();
    let node = node_of(&ns.0, &victim);
    let uid = jsonpath("pod", &victim, &ns.0, "{.metadata.uid}");
    let claim = format!("{victim}-data");
    let claim_uid = jsonpath("pvc", &claim, &ns.0, "{.metadata.uid}");
    let terminal = TerminalPods::watch(&ns.0).await;

    // The kubelet terminates the node's pods within its grace period and writes their
    // end, then lets the shutdown go on (the power cut). Kubernetes 1.35 writes the phase
    // from the containers' exit (Failed, or Succeeded when every container exited 0) and
    // marks the cause in a DisruptionTarget condition.
    let down = PowerCut::shutdown(&node);
    wait_for(
        "the kubelet to report the member's pod terminated by the shutdown",
        Duration::from_secs(30),
        || async {
            let seen = terminal.seen();
            let ended = seen.iter().find(|t| t.name == victim && t.uid == uid);
            match ended {
                Some(t) if t.disruption.as_deref() == Some("TerminationByKubelet") => Ok(()),
                Some(t) => Err(format!("terminal without the kubelet's condition: {t:?}")),
                None => Err(format!("terminal pods so far: {seen:?}")),
            }
        },
    )
    .await;
    // While the node is down the member is not replaced: its claim stays, bound, the same
    // claim; no member is removed.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let phase = "{.metadata.uid} {.status.phase}";
    assert_eq!(
        jsonpath("pvc", &claim, &ns.0, phase),
        format!("{claim_uid} Bound"),
        "the member's claim changed"
    );
    assert_eq!(
        event_names(&ns.0, "reason=MemberRemoved"),
        Vec::<String>::new()
    );

    // The node starts again: the member comes back on its claim, as the same member with
    // its data.
    down.restore();
    assert_same_cluster(&ns.0, "graceful", &before, 3).await;
    assert_eq!(jsonpath("pvc", &claim, &ns.0, "{.metadata.uid}"), claim_uid);
}

#[tokio::test]
async fn a_member_whose_sandbox_is_lost_runs_its_init_container_again_and_stays_the_member() {
    let ns = Namespace::create("sandbox");
    apply(&cluster_yaml(&ns.0, "boxed", 3, "3.5.35", false));
    let ready = wait_running(&ns.0, "boxed", 3, Duration::from_secs(120)).await;
    let mut client = etcd(&ns.0, &ready).await;
    write_keys(&mut client, "boxed", 100).await;
    let members = member_list(&mut client).await;
    drop(client);
    // A joiner: its pod has an init container (the membership gate), the seed's has none.
    let init_path = "{.status.initContainerStatuses[0].state.terminated.finishedAt}";
    let victim = ready
        .iter()
        .find(|pod| !jsonpath("pod", pod, &ns.0, init_path).is_empty())
        .unwrap_or_else(|| panic!("no member of {ready:?} has a finished init container"))
        .clone();
    let victim = &victim;
    let uid_and_ip = "{.metadata.uid} {.status.podIP}";
    let before = jsonpath("pod", victim, &ns.0, uid_and_ip);
    let init_before = jsonpath("pod", victim, &ns.0, init_path);
    let restarts = restart_count(&ns.0, victim);

    kill_sandbox(&ns.0, victim);
    // The kubelet makes a new sandbox (a new network namespace, so a new address), runs the
    // init container again in it and restarts etcd: the same pod, on its emptyDir, is
    // the same member.
    wait_for(
        "the pod to run again in a new sandbox",
        Duration::from_secs(120),
        || async {
            let now = jsonpath("pod", victim, &ns.0, uid_and_ip);
            let init = jsonpath("pod", victim, &ns.0, init_path);
            let (_, ready) = container_state(&ns.0, victim);
            let (uid, ip) = now.split_once(' ').unwrap_or((&now, ""));
            let (uid_before, ip_before) = before.split_once(' ').unwrap_or((&before, ""));
            assert_eq!(uid, uid_before, "the pod was replaced");
            if ip != ip_before && !ip.is_empty() && init != init_before && ready {
                Ok(())
            } else {
                Err(format!(
                    "pod {now}, init finished at {init:?}, ready {ready}"
                ))
            }
        },
    )
    .await;
    assert!(
        restart_count(&ns.0, victim) > restarts,
        "etcd was not restarted"
    );
    let ready = wait_running(&ns.0, "boxed", 3, Duration::from_secs(120)).await;
    let mut client = etcd(&ns.0, &ready).await;
    assert_eq!(
        member_list(&mut client).await,
        members,
        "membership changed"
    );
    assert_keys(&mut client, "boxed", 100).await;
    assert_eq!(
        event_names(&ns.0, "reason=MemberRemoved"),
        Vec::<String>::new()
    );
}

#[tokio::test]
async fn kubectl_exec_runs_etcdctl_inside_a_member_against_its_own_etcd() {
    let ns = Namespace::create("exec");
    apply(&cluster_yaml(&ns.0, "shell", 1, "3.5.35", false));
    let ready = wait_running(&ns.0, "shell", 1, Duration::from_secs(120)).await;
    let member = &ready[0];
    let ip = jsonpath("pod", member, &ns.0, "{.status.podIP}");
    let endpoint = format!("--endpoints=http://{ip}:2379");
    let exec = |args: &[&str]| {
        let mut all = vec!["exec", member.as_str(), "-n", &ns.0, "-c", "etcd", "--"];
        all.extend_from_slice(args);
        kubectl(&all, None)
    };
    let (ok, out) = exec(&[
        "/usr/local/bin/etcdctl",
        &endpoint,
        "put",
        "exec/key",
        "inside",
    ]);
    assert!(ok && out.contains("OK"), "{out}");
    // What was written from inside is what a client outside reads.
    let mut client = etcd(&ns.0, &ready).await;
    let got = client.get("exec/key", None).await.expect("get");
    assert_eq!(got.kvs()[0].value_str().unwrap(), "inside");
    let (ok, out) = exec(&["/usr/local/bin/etcdctl", &endpoint, "member", "list"]);
    assert!(ok && out.contains(member.as_str()), "{out}");
}
