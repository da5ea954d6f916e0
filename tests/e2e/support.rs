//! What every end-to-end scenario needs: the local environment, kubectl, waiting, and etcd.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use etcd_client::{Client as Etcd, ConnectOptions, GetOptions};
use etcd_operator::api::{EtcdCluster, EtcdClusterStatus};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use tokio::time::{Instant, sleep};

/// The repository root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The local environment directory (see testkit/env/local-up.sh).
pub fn env_dir() -> PathBuf {
    std::env::var_os("LOCAL_ENV_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/tmp/etcd-operator-local"))
}

/// The admin kubeconfig; panics with instructions when the environment is not up.
pub fn kubeconfig() -> PathBuf {
    let path = env_dir().join("kubeconfig");
    assert!(
        path.exists() && env_dir().join("run/kube-apiserver.pid").exists(),
        "the local environment is not up ({} missing): run `EXAMPLE= testkit/env/local-up.sh` \
         first, or use `make e2e`, which does",
        path.display()
    );
    path
}

/// A client with the admin kubeconfig.
pub async fn client() -> Client {
    let kc = Kubeconfig::read_from(kubeconfig()).expect("readable kubeconfig");
    let config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .expect("valid kubeconfig");
    Client::try_from(config).expect("client")
}

/// The EndpointSlices in `ns` with the labels `selector`, printed as `output` (a kubectl
/// `-o` value); fails the test when kubectl does.
pub fn endpoint_slices(ns: &str, selector: &str, output: &str) -> String {
    let (ok, out) = kubectl(
        &[
            "get",
            "endpointslices",
            "-n",
            ns,
            "-l",
            selector,
            "-o",
            output,
        ],
        None,
    );
    assert!(ok, "{out}");
    out
}

/// Runs kubectl with the admin kubeconfig; returns (success, stdout + stderr).
pub fn kubectl(args: &[&str], stdin: Option<&str>) -> (bool, String) {
    use std::io::Write;
    let mut cmd = Command::new("kubectl");
    cmd.args(args)
        .env("KUBECONFIG", kubeconfig())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().expect("kubectl runs");
    if let Some(input) = stdin {
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
    }
    let out = child.wait_with_output().expect("kubectl finishes");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// Applies YAML, panicking on failure.
pub fn apply(yaml: &str) {
    let (ok, out) = kubectl(&["apply", "-f", "-"], Some(yaml));
    assert!(ok, "kubectl apply failed: {out}");
}

/// An EtcdCluster manifest.
pub fn cluster_yaml(ns: &str, name: &str, size: u32, version: &str, paused: bool) -> String {
    format!(
        "apiVersion: etcd.database.coreos.com/v1beta2\nkind: EtcdCluster\nmetadata:\n  \
         name: {name}\n  namespace: {ns}\nspec:\n  size: {size}\n  version: \"{version}\"\n  \
         paused: {paused}\n"
    )
}

/// A namespace for one scenario, deleted (with everything in it) when dropped.
pub struct Namespace(pub String);

impl Namespace {
    /// Creates `e2e-<name>`.
    pub fn create(name: &str) -> Self {
        let ns = format!("e2e-{name}");
        let _ = kubectl(
            &["delete", "namespace", &ns, "--wait=true", "--timeout=60s"],
            None,
        );
        let (ok, out) = kubectl(&["create", "namespace", &ns], None);
        assert!(ok, "{out}");
        Namespace(ns)
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        let _ = kubectl(&["delete", "namespace", &self.0, "--wait=false"], None);
    }
}

/// Polls `probe` every 200 ms until it returns `Some`, or panics after `timeout` with
/// `what` and the last state `describe` returns.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        match probe().await {
            Ok(value) => return value,
            Err(state) if Instant::now() >= deadline => {
                panic!("timed out after {timeout:?} waiting for {what}; last state: {state}")
            }
            Err(_) => sleep(Duration::from_millis(200)).await,
        }
    }
}

/// The EtcdCluster API of a namespace.
pub async fn clusters(ns: &str) -> Api<EtcdCluster> {
    Api::namespaced(client().await, ns)
}

/// Waits until the cluster is Running with `size` ready members, its status answering the
/// current generation; returns the ready member names.
pub async fn wait_running(ns: &str, name: &str, size: usize, timeout: Duration) -> Vec<String> {
    let api = clusters(ns).await;
    wait_for(
        &format!("{ns}/{name} Running with {size} ready"),
        timeout,
        || {
            let api = api.clone();
            async move {
                let c = api.get(name).await.map_err(|e| e.to_string())?;
                let generation = c.metadata.generation;
                let s = c.status.unwrap_or_default();
                let settled = s.phase == "Running"
                    && s.members.ready.len() == size
                    && s.members.unready.is_empty()
                    && s.observed_generation == generation;
                if settled {
                    Ok(s.members.ready)
                } else {
                    Err(format!(
                        "phase {} reason {} ready {:?} unready {:?}: {}",
                        s.phase, s.reason, s.members.ready, s.members.unready, s.message
                    ))
                }
            }
        },
    )
    .await
}

/// Waits until the cluster's status passes `check`; returns it.
pub async fn wait_status(
    ns: &str,
    name: &str,
    what: &str,
    timeout: Duration,
    check: impl Fn(&EtcdClusterStatus) -> bool,
) -> EtcdClusterStatus {
    let api = clusters(ns).await;
    let check = &check;
    wait_for(what, timeout, || {
        let api = api.clone();
        async move {
            let c = api.get(name).await.map_err(|e| e.to_string())?;
            let s = c.status.unwrap_or_default();
            if check(&s) {
                Ok(s)
            } else {
                Err(format!(
                    "phase {} reason {} version {} ready {:?} unready {:?}: {}",
                    s.phase,
                    s.reason,
                    s.current_version,
                    s.members.ready,
                    s.members.unready,
                    s.message
                ))
            }
        }
    })
    .await
}

/// One word per pod of a namespace (`field` is a jsonpath within an item), sorted.
fn pod_words(ns: &str, field: &str) -> Vec<String> {
    let path = format!("jsonpath={{range .items[*]}}{field} {{end}}");
    let (ok, out) = kubectl(&["get", "pods", "-n", ns, "-o", &path], None);
    assert!(ok, "{out}");
    let mut words: Vec<String> = out.split_whitespace().map(str::to_string).collect();
    words.sort();
    words
}

/// Names and uids of the pods of a namespace, sorted.
pub fn pod_uids(ns: &str) -> Vec<String> {
    pod_words(ns, "{.metadata.name}={.metadata.uid}")
}

/// Waits (up to 15 s) until an Event in `ns` matches `selector`; its names. For an Event
/// the operator raises after the status write a test waited for.
pub async fn wait_event(ns: &str, selector: &str) -> Vec<String> {
    let what = format!("an Event with {selector}");
    wait_for(&what, Duration::from_secs(15), || async {
        let names = event_names(ns, selector);
        if names.is_empty() {
            Err("none yet".to_string())
        } else {
            Ok(names)
        }
    })
    .await
}

/// Names of the Events in `ns` matching a field selector (e.g. `reason=MemberRemoved`).
pub fn event_names(ns: &str, selector: &str) -> Vec<String> {
    let args = [
        "get",
        "events",
        "-n",
        ns,
        "--field-selector",
        selector,
        "-o",
        "name",
    ];
    let (ok, out) = kubectl(&args, None);
    assert!(ok, "{out}");
    out.lines()
        .filter(|l| l.starts_with("event"))
        .map(str::to_string)
        .collect()
}

/// Patches the spec of a cluster.
pub async fn patch_spec(ns: &str, name: &str, spec: serde_json::Value) {
    clusters(ns)
        .await
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({ "spec": spec })),
        )
        .await
        .expect("patch the spec");
}

/// Client URLs of members, by their pods' addresses: the cluster's DNS names resolve in
/// pods (through CoreDNS), not on the host where the tests run. Members without a pod
/// address are left out; at least one must have one.
pub async fn member_urls(ns: &str, members: &[String]) -> Vec<String> {
    let urls = pod_urls(ns, members).await;
    assert!(
        !urls.is_empty(),
        "no pod address for any of {members:?} in {ns}"
    );
    urls
}

/// Client URLs of the members whose pods have an address now (none may have one yet, as
/// right after their node restarted).
pub async fn pod_urls(ns: &str, members: &[String]) -> Vec<String> {
    let pods: Api<Pod> = Api::namespaced(client().await, ns);
    let mut urls = Vec::new();
    for member in members {
        let pod = pods.get_opt(member).await.expect("reading a member's pod");
        if let Some(ip) = pod
            .and_then(|p| p.status?.pod_ip)
            .filter(|ip| !ip.is_empty())
        {
            urls.push(format!("http://{ip}:2379"));
        }
    }
    urls
}

/// An etcd client over the given members (reached at their pods' addresses).
pub async fn etcd(ns: &str, members: &[String]) -> Etcd {
    let endpoints = member_urls(ns, members).await;
    let options = ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(3))
        .with_timeout(Duration::from_secs(5));
    Etcd::connect(endpoints, Some(options))
        .await
        .expect("connect to etcd")
}

/// Writes `count` keys `prefix/i = value-i`.
pub async fn write_keys(etcd: &mut Etcd, prefix: &str, count: usize) {
    for i in 0..count {
        etcd.put(format!("{prefix}/{i}"), format!("value-{i}"), None)
            .await
            .expect("put");
    }
}

/// Asserts every key `prefix/i` (i < count) reads back `value-i`.
pub async fn assert_keys(etcd: &mut Etcd, prefix: &str, count: usize) {
    let resp = etcd
        .get(prefix.to_string(), Some(GetOptions::new().with_prefix()))
        .await
        .expect("get");
    let found: std::collections::BTreeMap<String, String> = resp
        .kvs()
        .iter()
        .map(|kv| {
            (
                kv.key_str().unwrap().to_string(),
                kv.value_str().unwrap().to_string(),
            )
        })
        .collect();
    for i in 0..count {
        assert_eq!(
            found.get(&format!("{prefix}/{i}")).map(String::as_str),
            Some(format!("value-{i}").as_str()),
            "key {prefix}/{i} lost"
        );
    }
}

/// (id, name, is_learner) of every member, read from etcd.
pub async fn member_list(etcd: &mut Etcd) -> Vec<(u64, String, bool)> {
    etcd.member_list()
        .await
        .expect("member list")
        .members()
        .iter()
        .map(|m| (m.id(), m.name().to_string(), m.is_learner()))
        .collect()
}

/// Asserts that `members` (a member list) are `count` started voting members.
pub fn assert_voters(members: &[(u64, String, bool)], count: usize) {
    assert_eq!(members.len(), count, "{members:?}");
    assert!(
        members
            .iter()
            .all(|(_, name, learner)| !name.is_empty() && !learner),
        "not all started voters: {members:?}"
    );
}

/// The etcd cluster ID the members answer with.
pub async fn cluster_id(etcd: &mut Etcd) -> u64 {
    etcd.member_list()
        .await
        .expect("member list")
        .header()
        .expect("a response header")
        .cluster_id()
}

/// Deletes the pods `names` at once and waits until they are gone (with an emptyDir,
/// their members' data goes with them).
pub fn delete_pods(ns: &str, names: &[String]) {
    let mut args = vec!["delete", "pod", "-n", ns, "--wait=true", "--timeout=60s"];
    args.extend(names.iter().map(String::as_str));
    let (ok, out) = kubectl(&args, None);
    assert!(ok, "kubectl delete pod: {out}");
}

/// `kubectl get KIND NAME -n NS -o jsonpath=PATH`, trimmed; panics when kubectl fails.
pub fn jsonpath(kind: &str, name: &str, ns: &str, path: &str) -> String {
    let path = format!("jsonpath={path}");
    let (ok, out) = kubectl(&["get", kind, name, "-n", ns, "-o", &path], None);
    assert!(ok, "kubectl get {kind} {name} -n {ns}: {out}");
    out.trim().to_string()
}

/// The restart count of pod `name`'s etcd container (0 when unknown).
pub fn restart_count(ns: &str, name: &str) -> u32 {
    container_state(ns, name).0
}

/// Pod `name`'s etcd container: its restart count (0 when unknown) and whether it is
/// Ready.
pub fn container_state(ns: &str, name: &str) -> (u32, bool) {
    let path = "jsonpath={.status.containerStatuses[0].restartCount} \
                {.status.containerStatuses[0].ready}";
    let (_, out) = kubectl(&["get", "pod", name, "-n", ns, "-o", path], None);
    let mut words = out.split_whitespace();
    let restarts = words.next().and_then(|w| w.parse().ok()).unwrap_or(0);
    (restarts, words.next() == Some("true"))
}

/// Kills a member's etcd process on its node (`nodes.sh kill`), as a crash would.
pub fn kill_member(ns: &str, pod: &str) {
    nodes_sh(&["kill", ns, pod, "etcd"]);
}

/// Kills pod `ns/pod`'s sandbox (`nodes.sh kill-sandbox`): its kubelet makes a new one
/// and runs the pod's init containers and containers again in it. Real nodes only.
pub fn kill_sandbox(ns: &str, pod: &str) {
    nodes_sh(&["kill-sandbox", ns, pod]);
}

/// The host pid of container `container` of pod `ns/pod` (`nodes.sh pid`).
pub fn container_pid(ns: &str, pod: &str, container: &str) -> i32 {
    let out = nodes_sh(&["pid", ns, pod, container]);
    out.trim()
        .parse()
        .unwrap_or_else(|_| panic!("nodes.sh pid {ns} {pod} {container}: {out:?}"))
}

/// The etcd images of the pods of a namespace, sorted.
pub fn pod_images(ns: &str) -> Vec<String> {
    pod_words(ns, "{.spec.containers[0].image}")
}

/// Whether process `pid` runs (a zombie does not).
pub fn process_alive(pid: i32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .unwrap_or_default()
            .contains(") Z ")
}

/// Sends signal `name` (`STOP`, `CONT`, `TERM`, ...) to process `pid`.
pub fn signal(pid: i32, name: &str) {
    let status = Command::new("kill")
        .arg(format!("-{name}"))
        .arg(pid.to_string())
        .status()
        .expect("kill runs");
    assert!(
        status.success() || std::thread::panicking(),
        "kill -{name} {pid} failed"
    );
}

/// Blocks until `check` holds or `timeout` passes; whether it held (usable in `Drop`).
pub fn block_until(timeout: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + timeout;
    while std::time::Instant::now() < deadline {
        if check() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    check()
}

/// Pid of a control-plane component (`kube-apiserver`, `etcd`, ...)
/// testkit/env/control-plane/control-plane.sh started.
pub fn control_plane_pid(name: &str) -> i32 {
    let path = env_dir().join(format!("run/{name}.pid"));
    std::fs::read_to_string(&path)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or_else(|| panic!("no pid in {}", path.display()))
}

/// The node pod `name` runs on.
pub fn node_of(ns: &str, name: &str) -> String {
    let (ok, node) = kubectl(
        &[
            "get",
            "pod",
            name,
            "-n",
            ns,
            "-o",
            "jsonpath={.spec.nodeName}",
        ],
        None,
    );
    assert!(
        ok && !node.trim().is_empty(),
        "pod {ns}/{name} has no node: {node}"
    );
    node.trim().to_string()
}

/// The local environment's nodes (testkit/env/node/nodes.sh).
pub const NODES: [&str; 3] = ["local-node-0", "local-node-1", "local-node-2"];

/// Runs `testkit/env/node/nodes.sh ARGS` against the local environment; its standard output.
fn nodes_sh(args: &[&str]) -> String {
    let out = Command::new("bash")
        .arg(root().join("testkit/env/node/nodes.sh"))
        .args(args)
        .env("LOCAL_ENV_DIR", env_dir())
        .output()
        .expect("nodes.sh runs");
    assert!(
        out.status.success(),
        "nodes.sh {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A process stopped with SIGSTOP; continued when dropped, unless it was already.
pub struct Stopped {
    pid: i32,
    continued: bool,
}

impl Stopped {
    /// Stops process `pid`.
    pub fn new(pid: i32) -> Self {
        signal(pid, "STOP");
        Stopped {
            pid,
            continued: false,
        }
    }

    /// Continues it now.
    pub fn resume(&mut self) {
        signal(self.pid, "CONT");
        self.continued = true;
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        if !self.continued {
            let _ = Command::new("kill")
                .args(["-CONT", &self.pid.to_string()])
                .status();
        }
    }
}

/// A node of the local environment cut from power (its kubelet and its pods' processes
/// killed); started again when dropped, so a failing test leaves every node up.
pub struct PowerCut(pub String);

impl PowerCut {
    /// Cuts the power of `node`.
    pub fn of(node: &str) -> Self {
        nodes_sh(&["stop", node]);
        PowerCut(node.to_string())
    }

    /// Shuts `node` down gracefully (logind's PrepareForShutdown: the kubelet terminates
    /// its pods within its shutdownGracePeriod), then cuts its power. Real nodes only.
    pub fn shutdown(node: &str) -> Self {
        nodes_sh(&["shutdown", node]);
        PowerCut(node.to_string())
    }

    /// Starts the node again: its pods restart as after a reboot.
    pub fn restore(self) {
        drop(self);
    }
}

impl Drop for PowerCut {
    fn drop(&mut self) {
        nodes_sh(&["start", &self.0]);
    }
}

/// Uncordons `node` when dropped (after a drain, whatever the outcome).
pub struct Cordoned(pub String);

impl Drop for Cordoned {
    fn drop(&mut self) {
        let _ = kubectl(&["uncordon", &self.0], None);
    }
}

// The local environment's object store (versitygw at the host's pod-network address,
// started by `make up`), shared by the backup and restore scenarios.

/// The bucket `make up` makes.
pub const BUCKET: &str = "etcd-backups";

/// A file of the S3 server's settings (`access-key`, `secret-key`, `endpoint`).
pub fn s3_file(name: &str) -> String {
    std::fs::read_to_string(env_dir().join("s3").join(name))
        .unwrap_or_else(|e| panic!("reading s3/{name} of the local environment: {e}"))
        .trim()
        .to_string()
}

/// `<ns>/<name>`, a prefix of the bucket emptied of what earlier runs stored there (the
/// bucket outlives the namespaces, and a scenario counts the objects under its prefix).
pub fn empty_prefix(ns: &str, name: &str) -> String {
    let prefix = format!("{ns}/{name}");
    let dir = env_dir().join("s3/root").join(BUCKET).join(&prefix);
    if let Err(e) = std::fs::remove_dir_all(&dir)
        && e.kind() != std::io::ErrorKind::NotFound
    {
        panic!("emptying {}: {e}", dir.display());
    }
    prefix
}

/// The Secret `aws` with the S3 server's keys, in the `accessKey`/`secretKey` layout.
pub fn create_secret(ns: &str) {
    let (ok, out) = kubectl(
        &[
            "create",
            "secret",
            "generic",
            "aws",
            "-n",
            ns,
            &format!("--from-literal=accessKey={}", s3_file("access-key")),
            &format!("--from-literal=secretKey={}", s3_file("secret-key")),
        ],
        None,
    );
    assert!(ok, "{out}");
}

/// An EtcdBackup laid out as the CoreOS operator's examples are, plus `extra` spec lines.
pub fn backup_yaml(ns: &str, name: &str, target: &str, path: &str, extra: &str) -> String {
    format!(
        "apiVersion: \"etcd.database.coreos.com/v1beta2\"\nkind: \"EtcdBackup\"\nmetadata:\n  \
         name: {name}\n  namespace: {ns}\nspec:\n  {target}\n  storageType: S3\n{extra}  s3:\n    \
         path: {path}\n    awsSecret: aws\n    endpoint: {}\n    forcePathStyle: true\n",
        s3_file("endpoint")
    )
}

/// An object as `kubectl get -o json` prints it.
pub fn object_json(kind: &str, ns: &str, name: &str) -> serde_json::Value {
    let (ok, out) = kubectl(&["get", kind, name, "-n", ns, "-o", "json"], None);
    assert!(ok, "{out}");
    serde_json::from_str(&out).expect("kubectl prints JSON")
}
