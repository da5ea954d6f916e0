//! What the process-node tests share: the environment check, a node process of the test's
//! own (its namespace, node name, pod range and kubelet API port), waiting for pods, going
//! into a pod's namespaces, and clean-up whatever the outcome. Each test binary uses a part
//! of it.
#![allow(dead_code)]

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use futures::FutureExt;
use k8s_openapi::api::core::v1::{Namespace, Node, PersistentVolume, Pod};
use kube::api::{DeleteParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

pub const ETCD: &str = "/usr/bin/etcd";
pub const ETCDCTL: &str = "/usr/bin/etcdctl";
pub const NODE_BIN: &str = env!("CARGO_BIN_EXE_etcd-operator-node");
/// The pod network's script; its records are the local environment's ($LOCAL_ENV_DIR).
pub const PODNET: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../env/podnet.sh");

/// The scheduler a test pod bound to `node` names: the environment's nodes
/// (`local-node-N`) are placed by its kube-scheduler; a test's own node binds its pods
/// itself, so they name a scheduler that does not exist and kube-scheduler leaves them be.
pub fn scheduler_for(node: &str) -> &'static str {
    if node.starts_with("local-node-") {
        "default-scheduler"
    } else {
        "etcd-operator-node"
    }
}

pub fn require_environment() -> PathBuf {
    let how = "start one with `EXAMPLE= bash testkit/env/local-up.sh && \
               export KUBECONFIG=/tmp/etcd-operator-local/kubeconfig`";
    let Some(path) = std::env::var_os("KUBECONFIG") else {
        panic!("KUBECONFIG is not set: this test needs a running control plane; {how}");
    };
    let path = PathBuf::from(path);
    assert!(
        path.is_file(),
        "KUBECONFIG={} does not exist: {how}",
        path.display()
    );
    for bin in [ETCD, ETCDCTL] {
        assert!(
            Path::new(bin).is_file(),
            "{bin} is missing: apt-get install etcd-server etcd-client"
        );
    }
    path
}

pub async fn client(kubeconfig: &Path) -> Client {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig).expect("reading kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .expect("kubeconfig");
    let client = Client::try_from(config).expect("client");
    client.apiserver_version().await.unwrap_or_else(|e| {
        panic!(
            "the apiserver of {} does not answer ({e}); start it with \
             `bash testkit/env/control-plane.sh up`",
            kubeconfig.display()
        )
    });
    client
}

/// A running node process; stopped (SIGTERM, then SIGKILL) when dropped.
pub struct NodeProcess {
    child: Option<Child>,
    log: PathBuf,
}

impl NodeProcess {
    pub fn start(
        kubeconfig: &Path,
        node: &str,
        state: &Path,
        flags: &[&str],
        log: PathBuf,
    ) -> Self {
        let log_file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .unwrap();
        let child = Command::new(NODE_BIN)
            .args(["run", "--node-name", node])
            .args(flags)
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .arg("--state-dir")
            .arg(state)
            .args(["--etcd-binary", &format!("3.4.23={ETCD}")])
            .args(["--podnet", PODNET])
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().unwrap())
            .stderr(log_file)
            .spawn()
            .expect("starting the node");
        NodeProcess {
            child: Some(child),
            log,
        }
    }

    pub fn stop(&mut self) -> Option<std::process::ExitStatus> {
        let mut child = self.child.take()?;
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = child.kill();
        child.wait().ok()
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for NodeProcess {
    fn drop(&mut self) {
        self.stop();
    }
}

pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = probe().await {
            return v;
        }
        if Instant::now() > deadline {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

pub async fn wait_pod(
    api: &Api<Pod>,
    name: &str,
    what: &str,
    secs: u64,
    ok: impl Fn(&Pod) -> bool,
) -> Pod {
    wait_for(
        &format!("pod {name}: {what}"),
        Duration::from_secs(secs),
        || async { api.get_opt(name).await.ok().flatten().filter(|p| ok(p)) },
    )
    .await
}

pub async fn wait_gone(api: &Api<Pod>, name: &str, secs: u64) {
    wait_for(
        &format!("pod {name} to be deleted"),
        Duration::from_secs(secs),
        || async { matches!(api.get_opt(name).await, Ok(None)).then_some(()) },
    )
    .await
}

pub fn phase(p: &Pod) -> &str {
    p.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

pub fn is_ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

pub fn container_status(p: &Pod) -> k8s_openapi::api::core::v1::ContainerStatus {
    p.status
        .as_ref()
        .unwrap()
        .container_statuses
        .as_ref()
        .unwrap()[0]
        .clone()
}

pub fn kill_pod(state: &Path, ns: &str, pod: &str) {
    let out = Command::new(NODE_BIN)
        .args(["kill", "--namespace", ns, "--pod", pod])
        .arg("--state-dir")
        .arg(state)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "kill failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A namespace, a node and a state dir for one test; everything is removed afterwards,
/// whatever the outcome.
pub struct Env {
    /// API client (admin).
    pub client: Client,
    /// The admin kubeconfig.
    pub kubeconfig: PathBuf,
    /// The test's namespace.
    pub ns: String,
    /// The test's node.
    pub node_name: String,
    /// The port of its kubelet API.
    pub kubelet_port: u16,
    /// Its state directory and log.
    pub state: tempfile::TempDir,
    /// The node process, while it runs.
    pub node: Option<NodeProcess>,
}

impl Env {
    pub async fn new(tag: &str, kubelet_port: u16) -> Env {
        let kubeconfig = require_environment();
        let client = client(&kubeconfig).await;
        let suffix = format!(
            "{}-{}",
            std::process::id(),
            jiff::Timestamp::now().as_second() % 100_000
        );
        let ns = format!("node-it-{tag}-{suffix}");
        let namespaces: Api<Namespace> = Api::all(client.clone());
        namespaces
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({ "metadata": { "name": ns } })).unwrap(),
            )
            .await
            .unwrap();
        let mut env = Env {
            client,
            kubeconfig,
            ns,
            node_name: format!("it-{tag}-{suffix}"),
            kubelet_port,
            state: tempfile::tempdir().unwrap(),
            node: None,
        };
        env.start_node();
        env.wait_node_ready().await;
        env
    }

    pub fn start_node(&mut self) {
        let log = self.state.path().join("node.log");
        self.node = Some(NodeProcess::start(
            &self.kubeconfig,
            &self.node_name,
            &self.state.path().join("state"),
            &["--kubelet-port", &self.kubelet_port.to_string()],
            log,
        ));
    }

    pub fn stop_node(&mut self) -> Option<std::process::ExitStatus> {
        self.node.as_mut().and_then(|n| n.stop())
    }

    pub fn state_dir(&self) -> PathBuf {
        self.state.path().join("state")
    }

    pub async fn wait_node_ready(&self) {
        let nodes: Api<Node> = Api::all(self.client.clone());
        wait_for("node Ready", Duration::from_secs(30), || async {
            let node = nodes.get_opt(&self.node_name).await.ok().flatten()?;
            let ready = node
                .status?
                .conditions?
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True");
            ready.then_some(())
        })
        .await;
    }

    pub fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    /// Deletes the test's pods (grace 0), stops its node and removes whatever network
    /// namespace of its pods the node did not remove before it stopped.
    pub async fn cleanup(&mut self) {
        let pods = self.pods();
        let mut uids = Vec::new();
        if let Ok(list) = pods.list(&Default::default()).await {
            for p in list.items {
                uids.extend(p.metadata.uid.clone());
                let _ = pods
                    .delete(
                        p.metadata.name.as_deref().unwrap(),
                        &DeleteParams {
                            grace_period_seconds: Some(0),
                            ..Default::default()
                        },
                    )
                    .await;
            }
        }
        self.stop_node();
        for uid in uids {
            let _ = Command::new("bash")
                .args([PODNET, "del-pod", &uid])
                .status();
        }
        let _ = Api::<Namespace>::all(self.client.clone())
            .delete(&self.ns, &DeleteParams::default())
            .await;
        self.delete_volumes().await;
        let _ = Api::<Node>::all(self.client.clone())
            .delete(&self.node_name, &DeleteParams::default())
            .await;
        let _ = Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(
            self.client.clone(),
            "kube-node-lease",
        )
        .delete(&self.node_name, &DeleteParams::default())
        .await;
    }

    /// Deletes the persistent volumes of the test's claims: with the node stopped, nothing
    /// else would (their directories go with the state directory).
    async fn delete_volumes(&self) {
        let volumes: Api<PersistentVolume> = Api::all(self.client.clone());
        let Ok(list) = volumes.list(&Default::default()).await else {
            return;
        };
        for pv in list.items {
            let claim_ns = pv
                .spec
                .as_ref()
                .and_then(|s| s.claim_ref.as_ref()?.namespace.clone());
            if claim_ns.as_deref() == Some(self.ns.as_str()) {
                let name = pv.metadata.name.unwrap_or_default();
                let _ = volumes.delete(&name, &DeleteParams::default()).await;
            }
        }
    }

    /// Runs the scenario, cleans up, and on failure shows the node's log.
    pub async fn run<F>(mut self, scenario: F)
    where
        F: for<'a> FnOnce(&'a mut Env) -> Pin<Box<dyn Future<Output = ()> + 'a>>,
    {
        let outcome = std::panic::AssertUnwindSafe(scenario(&mut self))
            .catch_unwind()
            .await;
        let log = self.node.as_ref().map(|n| n.log()).unwrap_or_default();
        self.cleanup().await;
        if let Err(panic) = outcome {
            eprintln!("---- node log ----\n{log}\n---- end of node log ----");
            std::panic::resume_unwind(panic);
        }
    }

    pub async fn create_pod(&self, pod: Pod) {
        self.pods()
            .create(&PostParams::default(), &pod)
            .await
            .unwrap();
    }

    /// Deletes the pods and waits until the node removed each of them.
    pub async fn delete_pods(&self, names: &[&str]) {
        let pods = self.pods();
        for name in names {
            pods.delete(name, &DeleteParams::default()).await.unwrap();
        }
        for name in names {
            wait_gone(&pods, name, 30).await;
        }
    }

    /// Stops the node and checks that it exited cleanly.
    pub fn stop_node_cleanly(&mut self) {
        let status = self.stop_node().expect("node was running");
        assert!(status.success(), "node exit status {status}");
    }
}

/// Runs kubectl with the test's kubeconfig; its stdout, or a panic with its stderr.
pub fn kubectl(env: &Env, args: &[&str]) -> String {
    let out = Command::new("kubectl")
        .env("KUBECONFIG", &env.kubeconfig)
        .args(["--namespace", &env.ns])
        .args(args)
        .output()
        .expect("running kubectl");
    assert!(
        out.status.success(),
        "kubectl {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The pid of a running container, from its `process://<pid>` container ID.
pub fn container_pid(status: &k8s_openapi::api::core::v1::ContainerStatus) -> i32 {
    let id = status.container_id.as_deref().expect("a container ID");
    id.strip_prefix("process://")
        .and_then(|pid| pid.parse().ok())
        .unwrap_or_else(|| panic!("container ID {id} is not process://<pid>"))
}

/// The test node's pod range (`spec.podCIDR`), as `10.244.N.`: the prefix of its pods'
/// addresses.
pub async fn pod_range_prefix(env: &Env) -> String {
    let node = Api::<Node>::all(env.client.clone())
        .get(&env.node_name)
        .await
        .unwrap();
    let cidr = node.spec.and_then(|s| s.pod_cidr).expect("a podCIDR");
    let prefix = cidr.strip_suffix(".0/24").expect("a /24 podCIDR");
    format!("{prefix}.")
}

/// Runs `argv` in the namespaces (mount, UTS, network) of process `pid`, as `kubectl exec`
/// runs a command in a container; its stdout, or its exit status and output.
pub fn try_exec_in(pid: i32, argv: &[&str]) -> Result<String, String> {
    let out = Command::new("nsenter")
        .arg(format!("--target={pid}"))
        .args(["--mount", "--uts", "--net", "--"])
        .args(argv)
        .output()
        .expect("running nsenter");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if out.status.success() {
        Ok(stdout)
    } else {
        let stderr = String::from_utf8_lossy(&out.stderr);
        Err(format!(
            "{argv:?} in the namespaces of {pid}: {}: {stdout}{stderr}",
            out.status
        ))
    }
}

/// [`try_exec_in`], panicking when the command fails.
pub fn exec_in(pid: i32, argv: &[&str]) -> String {
    try_exec_in(pid, argv).unwrap_or_else(|e| panic!("{e}"))
}

/// The path under /run/netns of the network namespace process `pid` is in.
pub fn netns_path_of(pid: i32) -> PathBuf {
    use std::os::unix::fs::MetadataExt;
    let theirs = std::fs::metadata(format!("/proc/{pid}/ns/net")).unwrap();
    std::fs::read_dir("/run/netns")
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.ino() == theirs.ino() && m.dev() == theirs.dev())
        })
        .unwrap_or_else(|| panic!("process {pid} is in no namespace under /run/netns"))
}
