//! The process node against a real control plane: a node process binds and runs real etcd
//! pods, makes their DNS names resolve, reports crashes, restarts, image changes, image
//! pull failures and node restarts like a kubelet, and removes deleted pods.
//!
//! Needs `KUBECONFIG` pointing at a running control plane (`bash testkit/env/control-plane.sh up`),
//! root (mount namespaces, /etc/hosts) and Debian's etcd 3.4.23 (`apt-get install
//! etcd-server etcd-client`). Without them it fails and says so; it never skips.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use futures::FutureExt;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, Service};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

const ETCD: &str = "/usr/bin/etcd";
const ETCDCTL: &str = "/usr/bin/etcdctl";
const NODE_BIN: &str = env!("CARGO_BIN_EXE_etcd-operator-node");

fn require_environment() -> PathBuf {
    let how = "start one with `bash testkit/env/control-plane.sh up && \
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

async fn client(kubeconfig: &Path) -> Client {
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
struct NodeProcess {
    child: Option<Child>,
    log: PathBuf,
}

impl NodeProcess {
    fn start(kubeconfig: &Path, node: &str, state: &Path, ip_range: &str, log: PathBuf) -> Self {
        let log_file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .unwrap();
        let child = Command::new(NODE_BIN)
            .args(["run", "--node-name", node, "--pod-ip-range", ip_range])
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .arg("--state-dir")
            .arg(state)
            .args(["--etcd-binary", &format!("3.4.23={ETCD}")])
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

    fn stop(&mut self) -> Option<std::process::ExitStatus> {
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

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for NodeProcess {
    fn drop(&mut self) {
        self.stop();
    }
}

async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut probe: F) -> T
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

async fn wait_pod(
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

async fn wait_gone(api: &Api<Pod>, name: &str, secs: u64) {
    wait_for(
        &format!("pod {name} to be deleted"),
        Duration::from_secs(secs),
        || async { matches!(api.get_opt(name).await, Ok(None)).then_some(()) },
    )
    .await
}

fn phase(p: &Pod) -> &str {
    p.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

fn is_ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn container_status(p: &Pod) -> k8s_openapi::api::core::v1::ContainerStatus {
    p.status
        .as_ref()
        .unwrap()
        .container_statuses
        .as_ref()
        .unwrap()[0]
        .clone()
}

fn hosts_block(node: &str) -> String {
    let text = std::fs::read_to_string("/etc/hosts").unwrap();
    let begin = format!("# BEGIN etcd-operator-node {node}");
    let end = format!("# END etcd-operator-node {node}");
    match (text.find(&begin), text.find(&end)) {
        (Some(a), Some(b)) => text[a..b].to_string(),
        _ => String::new(),
    }
}

fn etcd_args(name: &str, host: &str) -> serde_json::Value {
    json!([
        format!("--name={name}"),
        "--data-dir=/var/etcd/data",
        "--listen-client-urls=http://$(POD_IP):2379",
        format!("--advertise-client-urls=http://{host}:2379"),
        "--listen-peer-urls=http://$(POD_IP):2380",
        format!("--initial-advertise-peer-urls=http://{host}:2380"),
        format!("--initial-cluster={name}=http://{host}:2380"),
        "--initial-cluster-state=new",
    ])
}

fn etcd_pod(name: &str, ns: &str, node: &str, app: &str, restart: &str, image: &str) -> Pod {
    let host = format!("{name}.peers.{ns}.svc");
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": { "name": name, "labels": { "app": app } },
        "spec": {
            "hostname": name,
            "subdomain": "peers",
            "nodeSelector": { "kubernetes.io/hostname": node },
            "restartPolicy": restart,
            "terminationGracePeriodSeconds": 5,
            "initContainers": [{
                "name": "check-dns",
                "image": "busybox:1.36",
                "command": ["/bin/sh", "-c",
                    format!("until getent hosts {host}; do sleep 0.2; done")],
            }],
            "containers": [{
                "name": "etcd",
                "image": image,
                "env": [{ "name": "POD_IP",
                          "valueFrom": { "fieldRef": { "fieldPath": "status.podIP" } } }],
                "args": etcd_args(name, &host),
                "ports": [{ "name": "client", "containerPort": 2379 }],
                "volumeMounts": [{ "name": "data", "mountPath": "/var/etcd" }],
                "readinessProbe": {
                    "httpGet": { "path": "/health", "port": "client" },
                    "periodSeconds": 1,
                },
            }],
            "volumes": [{ "name": "data", "emptyDir": {} }],
        },
    }))
    .unwrap()
}

fn peers_service(app: &str) -> Service {
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": { "name": "peers" },
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": true,
            "selector": { "app": app },
            "ports": [{ "name": "client", "port": 2379 }, { "name": "peer", "port": 2380 }],
        },
    }))
    .unwrap()
}

fn etcdctl(endpoint: &str, args: &[&str]) -> String {
    let out = Command::new(ETCDCTL)
        .env("ETCDCTL_API", "3")
        .arg(format!("--endpoints=http://{endpoint}:2379"))
        .arg("--command-timeout=5s")
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "etcdctl {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn kill_pod(state: &Path, ns: &str, pod: &str) {
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
struct Env {
    client: Client,
    kubeconfig: PathBuf,
    ns: String,
    node_name: String,
    ip_range: String,
    state: tempfile::TempDir,
    node: Option<NodeProcess>,
}

impl Env {
    async fn new(tag: &str, ip_range: &str) -> Env {
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
            ip_range: ip_range.to_string(),
            state: tempfile::tempdir().unwrap(),
            node: None,
        };
        env.start_node();
        env.wait_node_ready().await;
        env
    }

    fn start_node(&mut self) {
        let log = self.state.path().join("node.log");
        self.node = Some(NodeProcess::start(
            &self.kubeconfig,
            &self.node_name,
            &self.state.path().join("state"),
            &self.ip_range,
            log,
        ));
    }

    fn stop_node(&mut self) -> Option<std::process::ExitStatus> {
        self.node.as_mut().and_then(|n| n.stop())
    }

    fn state_dir(&self) -> PathBuf {
        self.state.path().join("state")
    }

    async fn wait_node_ready(&self) {
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

    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    async fn cleanup(&mut self) {
        let pods = self.pods();
        if let Ok(list) = pods.list(&Default::default()).await {
            for p in list.items {
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
        let _ = Api::<Namespace>::all(self.client.clone())
            .delete(&self.ns, &DeleteParams::default())
            .await;
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

    /// Runs the scenario, cleans up, and on failure shows the node's log.
    async fn run<F>(mut self, scenario: F)
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
}

#[tokio::test(flavor = "multi_thread")]
async fn etcd_pod_resolves_serves_crashes_and_is_deleted() {
    let env = Env::new("a", "127.0.231.1-127.0.231.254").await;
    env.run(|env| {
        Box::pin(async move {
            let ns = env.ns.clone();
            let pods = env.pods();
            Api::<Service>::namespaced(env.client.clone(), &ns)
                .create(&PostParams::default(), &peers_service("itest-a"))
                .await
                .unwrap();
            let pod = etcd_pod(
                "m1",
                &ns,
                &env.node_name,
                "itest-a",
                "Never",
                "quay.io/coreos/etcd:v3.4.23",
            );
            pods.create(&PostParams::default(), &pod).await.unwrap();

            let ready = wait_pod(&pods, "m1", "Running and Ready", 90, |p| {
                phase(p) == "Running" && is_ready(p)
            })
            .await;
            let status = ready.status.clone().unwrap();
            let ip = status.pod_ip.clone().unwrap();
            assert!(ip.starts_with("127.0.231."), "pod IP {ip}");
            assert_eq!(status.host_ip.as_deref(), Some("127.0.0.1"));
            assert_eq!(
                ready.spec.as_ref().unwrap().node_name.as_deref(),
                Some(env.node_name.as_str())
            );
            let init = &status.init_container_statuses.as_ref().unwrap()[0];
            let init_done = init.state.as_ref().unwrap().terminated.as_ref().unwrap();
            assert_eq!(
                (init_done.exit_code, init_done.reason.as_deref()),
                (0, Some("Completed"))
            );
            let etcd = container_status(&ready);
            assert!(etcd.ready);
            assert!(
                etcd.container_id
                    .as_deref()
                    .unwrap()
                    .starts_with("process://")
            );
            assert!(etcd.state.as_ref().unwrap().running.is_some());

            let host = format!("m1.peers.{ns}.svc");
            let block = hosts_block(&env.node_name);
            assert!(
                block.contains(&format!("{ip} {host} {host}.cluster.local")),
                "{block}"
            );
            assert!(block.contains(&format!("peers.{ns}.svc")), "{block}");

            etcdctl(&host, &["put", "greeting", "hello from a process node"]);
            let got = etcdctl(&host, &["get", "greeting", "--print-value-only"]);
            assert_eq!(got.trim(), "hello from a process node");

            let uid = ready.metadata.uid.clone().unwrap();
            let pod_dir = env.state_dir().join("pods").join(format!("{ns}_m1_{uid}"));
            assert!(
                pod_dir.join("volumes/data/data/member").is_dir(),
                "etcd's /var/etcd/data is not in the emptyDir {}",
                pod_dir.display()
            );
            assert!(pod_dir.join("logs/etcd.log").is_file());

            kill_pod(&env.state_dir(), &ns, "m1");
            let failed = wait_pod(&pods, "m1", "Failed after kill", 30, |p| {
                phase(p) == "Failed"
            })
            .await;
            let term = container_status(&failed).state.unwrap().terminated.unwrap();
            assert_eq!(term.exit_code, 137);
            assert_eq!(term.signal, Some(9));
            assert!(!is_ready(&failed));

            pods.delete("m1", &DeleteParams::default()).await.unwrap();
            wait_gone(&pods, "m1", 30).await;
            wait_for("state dir removal", Duration::from_secs(10), || async {
                (!pod_dir.exists()).then_some(())
            })
            .await;
            wait_for("hosts entry removal", Duration::from_secs(10), || async {
                (!hosts_block(&env.node_name).contains(&host)).then_some(())
            })
            .await;

            let status = env.stop_node().expect("node was running");
            assert!(status.success(), "node exit status {status}");
            assert!(
                !std::fs::read_to_string("/etc/hosts")
                    .unwrap()
                    .contains(&format!("# BEGIN etcd-operator-node {}", env.node_name)),
                "hosts block left behind after node shutdown"
            );
        })
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn image_changes_pull_failures_restarts_and_node_restart_are_reported() {
    let env = Env::new("b", "127.0.232.1-127.0.232.254").await;
    env.run(|env| Box::pin(async move {
        let ns = env.ns.clone();
        let pods = env.pods();
        Api::<Service>::namespaced(env.client.clone(), &ns)
            .create(&PostParams::default(), &peers_service("itest-b"))
            .await
            .unwrap();
        let pod = etcd_pod("u1", &ns, &env.node_name, "itest-b", "Always", "quay.io/coreos/etcd:v3.4.23");
        pods.create(&PostParams::default(), &pod).await.unwrap();
        wait_pod(&pods, "u1", "Ready", 90, is_ready).await;

        // An image nobody can run: the old process is stopped, the new one cannot start.
        let patch = |image: &str| {
            json!({ "spec": { "containers": [{ "name": "etcd", "image": image }] } })
        };
        pods.patch("u1", &PatchParams::default(), &Patch::Strategic(patch("quay.io/coreos/etcd:v3.99.0")))
            .await
            .unwrap();
        let pulled = wait_pod(&pods, "u1", "ErrImagePull", 30, |p| {
            container_status(p)
                .state
                .and_then(|s| s.waiting)
                .is_some_and(|w| w.reason.as_deref() == Some("ErrImagePull"))
        })
        .await;
        let cs = container_status(&pulled);
        let message = cs.state.unwrap().waiting.unwrap().message.unwrap();
        assert!(message.contains("no local binary for image quay.io/coreos/etcd:v3.99.0"), "{message}");
        assert!(message.contains("known etcd versions: 3.4.23"), "{message}");
        assert_eq!(cs.restart_count, 1);
        assert!(cs.last_state.unwrap().terminated.is_some());
        assert!(!is_ready(&pulled));

        // Back to a known version: the same data dir, a new process.
        pods.patch("u1", &PatchParams::default(), &Patch::Strategic(patch("gcr.io/etcd-development/etcd:v3.4.23")))
            .await
            .unwrap();
        let back = wait_pod(&pods, "u1", "Ready again", 60, is_ready).await;
        let first_id = container_status(&back).container_id.unwrap();

        // A crash under restartPolicy Always: restarted with a new process.
        kill_pod(&env.state_dir(), &ns, "u1");
        let restarted = wait_pod(&pods, "u1", "restarted after kill", 60, |p| {
            let cs = container_status(p);
            cs.restart_count == 2 && cs.container_id.as_deref() != Some(first_id.as_str()) && cs.ready
        })
        .await;
        let last = container_status(&restarted).last_state.unwrap().terminated.unwrap();
        assert_eq!(last.exit_code, 137);

        // Unknown image from the start: Pending with ErrImagePull.
        let mut nginx = etcd_pod("x1", &ns, &env.node_name, "other", "Never", "nginx:1.25");
        nginx.spec.as_mut().unwrap().init_containers = None;
        pods.create(&PostParams::default(), &nginx).await.unwrap();
        let pending = wait_pod(&pods, "x1", "ErrImagePull", 30, |p| {
            p.status.as_ref().and_then(|s| s.container_statuses.as_ref()).is_some()
                && container_status(p)
                    .state
                    .and_then(|s| s.waiting)
                    .is_some_and(|w| w.reason.as_deref() == Some("ErrImagePull"))
        })
        .await;
        assert_eq!(phase(&pending), "Pending");

        // A failing init container under restartPolicy Never fails the pod.
        let mut bad_init = etcd_pod("f1", &ns, &env.node_name, "other", "Never", "quay.io/coreos/etcd:v3.4.23");
        bad_init.spec.as_mut().unwrap().init_containers.as_mut().unwrap()[0].command =
            Some(vec!["sh".into(), "-c".into(), "exit 3".into()]);
        pods.create(&PostParams::default(), &bad_init).await.unwrap();
        let failed = wait_pod(&pods, "f1", "Failed", 30, |p| phase(p) == "Failed").await;
        let init = &failed.status.unwrap().init_container_statuses.unwrap()[0];
        assert_eq!(init.state.as_ref().unwrap().terminated.as_ref().unwrap().exit_code, 3);

        // A node restart: a running Never pod is reported as exited, hence Failed.
        let mut sleeper = etcd_pod("r1", &ns, &env.node_name, "other", "Never", "busybox:1.36");
        {
            let spec = sleeper.spec.as_mut().unwrap();
            spec.init_containers = None;
            let c = &mut spec.containers[0];
            c.command = Some(vec!["sleep".into(), "1000".into()]);
            c.args = None;
            c.readiness_probe = None;
        }
        pods.create(&PostParams::default(), &sleeper).await.unwrap();
        wait_pod(&pods, "r1", "Running", 30, |p| phase(p) == "Running").await;
        let status = env.stop_node().expect("node was running");
        assert!(status.success(), "node exit status {status}");
        env.start_node();
        let after = wait_pod(&pods, "r1", "Failed after node restart", 30, |p| phase(p) == "Failed").await;
        let term = container_status(&after).state.unwrap().terminated.unwrap();
        assert_eq!(term.reason.as_deref(), Some("Unknown"));
        // The Always pod came back by itself.
        wait_pod(&pods, "u1", "Ready after node restart", 60, is_ready).await;

        for name in ["u1", "x1", "f1", "r1"] {
            pods.delete(name, &DeleteParams::default()).await.unwrap();
        }
        for name in ["u1", "x1", "f1", "r1"] {
            wait_gone(&pods, name, 30).await;
        }
    }))
    .await;
}
