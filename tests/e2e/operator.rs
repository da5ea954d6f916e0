//! The operator as the end-to-end tests meet it: its Deployment from `manifests/`
//! (testkit/env/local-up.sh installs it), two pods electing a leader through their Lease.
//! Here: which pod leads, each pod's process, HTTP endpoints and log, and stopping or
//! restarting the Deployment the way a user would (`kubectl scale`).

use std::process::Command;
use std::time::Duration;

use crate::support::{block_until, container_pid, kubectl, wait_for};

/// The namespace of the operator's Deployment, Lease and pods.
pub const NAMESPACE: &str = "etcd-operator";
/// The Deployment and its Lease.
pub const DEPLOYMENT: &str = "etcd-operator";
/// Replicas in `manifests/30-deployment.yaml`.
pub const REPLICAS: usize = 2;
/// The port the operator serves HTTPS on, at its pod's address.
pub const HTTP_PORT: u16 = 8443;

/// A token of the local environment's `operator-reader` ServiceAccount, bound to the
/// chart's metrics-reader and debug-reader ClusterRoles (testkit/env/operator-reader.yaml,
/// applied here too so the suite needs nothing beyond `make up`); made once per run.
pub fn reader_token() -> String {
    static TOKEN: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    TOKEN
        .get_or_init(|| {
            let (ok, out) = kubectl(&["apply", "-f", "testkit/env/operator-reader.yaml"], None);
            assert!(ok, "applying the operator reader: {out}");
            service_account_token("operator-reader")
        })
        .clone()
}

/// A fresh token of ServiceAccount `name` in the operator's namespace.
pub fn service_account_token(name: &str) -> String {
    let (ok, out) = kubectl_operator(&["create", "token", name, "--duration=2h"]);
    assert!(ok, "kubectl create token {name}: {out}");
    out.trim().to_string()
}

/// Runs kubectl in the operator's namespace; (success, stdout + stderr).
pub fn kubectl_operator(args: &[&str]) -> (bool, String) {
    let mut all = args.to_vec();
    all.extend(["-n", NAMESPACE]);
    kubectl(&all, None)
}

/// `kubectl rollout status` of the Deployment, waiting at most `timeout` (e.g. "1s").
pub fn rollout_complete(timeout: &str) -> (bool, String) {
    let timeout = format!("--timeout={timeout}");
    kubectl_operator(&["rollout", "status", "deploy", DEPLOYMENT, &timeout])
}

/// `kubectl set env` on the Deployment (`NAME=value` sets, `NAME-` removes).
pub fn set_operator_env(assignment: &str) -> (bool, String) {
    kubectl_operator(&["set", "env", "deploy", DEPLOYMENT, assignment])
}

/// The selector of the operator's pods.
const POD_SELECTOR: &str = "app.kubernetes.io/name=etcd-operator";

/// One pod of the operator's Deployment, as it was when read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OperatorPod {
    /// The pod's name, which is also its identity in the Lease.
    pub name: String,
    /// The pod's address.
    pub ip: String,
    /// Restarts of its container.
    pub restarts: u32,
    /// Whether its container is running.
    pub running: bool,
    /// Whether it is Ready.
    pub ready: bool,
}

impl OperatorPod {
    fn from_json(pod: &serde_json::Value) -> OperatorPod {
        let status = &pod["status"]["containerStatuses"][0];
        let running = status["state"]["running"].is_object();
        OperatorPod {
            name: pod["metadata"]["name"].as_str().unwrap_or_default().into(),
            ip: pod["status"]["podIP"].as_str().unwrap_or_default().into(),
            restarts: status["restartCount"].as_u64().unwrap_or(0) as u32,
            running,
            ready: status["ready"].as_bool().unwrap_or(false),
        }
    }

    /// The pod named `name`, now.
    pub fn get(name: &str) -> OperatorPod {
        let (ok, out) = kubectl_operator(&["get", "pod", name, "-o", "json"]);
        assert!(ok, "kubectl get pod {name}: {out}");
        OperatorPod::from_json(&serde_json::from_str(&out).expect("pod JSON"))
    }

    /// The host pid of its running container's process (from its node).
    pub fn pid(&self) -> i32 {
        container_pid(NAMESPACE, &self.name, "operator")
    }

    /// `GET https://<pod>:8443<path>` as the environment's operator reader: the status
    /// code ("000" when nothing answers) and the body.
    pub fn get_http(&self, path: &str) -> (String, String) {
        self.get_as(path, Some(&reader_token()), "https")
    }

    /// `GET <scheme>://<pod>:8443<path>` with `token` (none: anonymous), the certificate
    /// not verified (it is self-signed): the status code ("000" when nothing answers)
    /// and the body.
    pub fn get_as(&self, path: &str, token: Option<&str>, scheme: &str) -> (String, String) {
        let mut curl = Command::new("curl");
        curl.args(["-sk", "--max-time", "5", "-w", "\n%{http_code}"]);
        if let Some(token) = token {
            curl.args(["-H", &format!("Authorization: Bearer {token}")]);
        }
        let out = curl
            .arg(format!("{scheme}://{}:{HTTP_PORT}{path}", self.ip))
            .output()
            .expect("curl runs");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
        (code.to_string(), body.to_string())
    }

    /// The JSON lines of this pod's log (`kubectl logs`), of the container run that
    /// `restarts` counts (the current one, or the one before it: `--previous`).
    pub fn log_of_run(&self, restarts: u32) -> Vec<serde_json::Value> {
        let now = OperatorPod::get(&self.name);
        let mut args = vec!["logs", self.name.as_str()];
        if now.restarts == restarts + 1 {
            args.push("--previous");
        } else {
            assert_eq!(
                now.restarts, restarts,
                "pod {} restarted again: the run asked for is gone",
                self.name
            );
        }
        let (ok, out) = kubectl_operator(&args);
        assert!(ok, "kubectl {}: {out}", args.join(" "));
        out.lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// The JSON lines of the current run's log.
    pub fn log(&self) -> Vec<serde_json::Value> {
        self.log_of_run(OperatorPod::get(&self.name).restarts)
    }
}

/// Whether a pod ended (phase Succeeded or Failed): a kubelet leaves such a pod in the
/// API, its containers gone, after a graceful node shutdown or a power cut; the
/// ReplicaSet replaces it and the pod garbage collector removes it much later.
fn ended(pod: &serde_json::Value) -> bool {
    matches!(
        pod["status"]["phase"].as_str(),
        Some("Succeeded" | "Failed")
    )
}

/// The Deployment's pods that are not being deleted and have not ended.
pub fn operator_pods() -> Vec<OperatorPod> {
    let (ok, out) = kubectl_operator(&["get", "pods", "-l", POD_SELECTOR, "-o", "json"]);
    assert!(ok, "kubectl get pods: {out}");
    let list: serde_json::Value = serde_json::from_str(&out).expect("pod list");
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["metadata"]["deletionTimestamp"].is_null() && !ended(p))
        .map(OperatorPod::from_json)
        .collect()
}

/// The identity holding the operator's leader Lease (empty when none or unreadable).
pub fn lease_holder() -> String {
    let args = [
        "get",
        "lease",
        DEPLOYMENT,
        "-o",
        "jsonpath={.spec.holderIdentity}",
    ];
    match kubectl_operator(&args) {
        (true, holder) => holder.trim().to_string(),
        (false, _) => String::new(),
    }
}

/// The pod holding the Lease, waiting (up to a minute) until one of the Deployment's
/// running pods does.
pub async fn leader() -> OperatorPod {
    wait_for(
        "a pod of the operator to lead",
        Duration::from_secs(60),
        || async {
            let holder = lease_holder();
            operator_pods()
                .into_iter()
                .find(|p| p.name == holder && p.running)
                .ok_or_else(|| format!("the Lease is held by {holder:?}"))
        },
    )
    .await
}

/// The running pods other than the leader.
pub async fn standbys() -> (OperatorPod, Vec<OperatorPod>) {
    let leader = leader().await;
    let others = operator_pods()
        .into_iter()
        .filter(|p| p.name != leader.name)
        .collect();
    (leader, others)
}

/// Whether the Deployment is as local-up.sh leaves it: every replica updated, available
/// and Ready, and one of its pods holding the Lease.
fn operator_settled() -> bool {
    let pods = operator_pods();
    let holder = lease_holder();
    pods.len() == REPLICAS
        && pods.iter().all(|p| p.ready)
        && pods.iter().any(|p| p.name == holder)
        && rollout_complete("1s").0
}

/// Scales the Deployment to `replicas` (`kubectl scale`).
pub fn scale_operator(replicas: usize) {
    let count = format!("--replicas={replicas}");
    let (ok, out) = kubectl_operator(&["scale", "deploy", DEPLOYMENT, &count]);
    assert!(ok || std::thread::panicking(), "kubectl scale: {out}");
}

/// Brings the Deployment back to [`REPLICAS`] and waits (blocking, usable in `Drop`) until
/// it is settled; asserts it unless the thread is already panicking.
pub fn restore_operator() {
    scale_operator(REPLICAS);
    let settled = block_until(Duration::from_secs(180), operator_settled);
    assert!(
        settled || std::thread::panicking(),
        "the operator's Deployment did not come back: pods {:?}, Lease held by {:?}",
        operator_pods(),
        lease_holder()
    );
}

/// The operator scaled to zero; scaled back and settled when this is dropped (even by a
/// failing test, so later scenarios still have an operator).
pub struct OperatorStopped;

impl OperatorStopped {
    /// Scales the Deployment to zero and waits until none of its pods is left but ended
    /// ones (their processes are gone).
    pub async fn new() -> Self {
        scale_operator(0);
        let stopped = OperatorStopped;
        wait_for(
            "the operator's pods to be gone",
            Duration::from_secs(60),
            || async {
                let (ok, out) =
                    kubectl_operator(&["get", "pods", "-l", POD_SELECTOR, "-o", "json"]);
                let list: serde_json::Value = serde_json::from_str(&out).unwrap_or_default();
                let left: Vec<&str> = list["items"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|p| !ended(p))
                    .filter_map(|p| p["metadata"]["name"].as_str())
                    .collect();
                if ok && left.is_empty() {
                    Ok(())
                } else {
                    Err(format!("{left:?} {}", if ok { "" } else { &out }))
                }
            },
        )
        .await;
        stopped
    }
}

impl Drop for OperatorStopped {
    fn drop(&mut self) {
        restore_operator();
    }
}

/// Leaves the Deployment settled when dropped, after a test disturbed it (froze or
/// deleted a pod, rolled it out).
pub struct OperatorRestored;

impl Drop for OperatorRestored {
    fn drop(&mut self) {
        restore_operator();
    }
}

/// A `curl -sN` on the leader's `/debug/stream`, collecting lines until dropped.
pub struct DebugStream {
    child: std::process::Child,
    lines: std::sync::Arc<std::sync::Mutex<Vec<serde_json::Value>>>,
}

impl DebugStream {
    /// Starts following the stream of the operator's leader, as the operator reader.
    pub async fn follow() -> Self {
        Self::follow_as(&reader_token()).await
    }

    /// Starts following the stream of the operator's leader with `token`.
    pub async fn follow_as(token: &str) -> Self {
        use std::io::BufRead;
        let leader = leader().await;
        let mut child = Command::new("curl")
            .args(["-skN", "-H", &format!("Authorization: Bearer {token}")])
            .arg(format!("https://{}:{HTTP_PORT}/debug/stream", leader.ip))
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("curl runs");
        let stdout = child.stdout.take().unwrap();
        let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = lines.clone();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                if let Ok(value) = serde_json::from_str(&line) {
                    sink.lock().unwrap().push(value);
                }
            }
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        DebugStream { child, lines }
    }

    /// The transitions seen so far for cluster `key` (`namespace/name`); the stream's
    /// step records (`"record": "step"`) are left out.
    pub fn lines_for(&self, key: &str) -> Vec<serde_json::Value> {
        let lines = self.lines.lock().unwrap();
        lines
            .iter()
            .filter(|l| l["record"] == "transition" && l["key"] == key)
            .cloned()
            .collect()
    }
}

impl Drop for DebugStream {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
