//! The process node against a real control plane: a node process binds and runs real etcd
//! pods in network namespaces of their own, where their DNS names resolve through the
//! cluster DNS, reports crashes, restarts, image changes, image pull failures and node
//! restarts like a kubelet, and removes deleted pods with their namespaces. Its modules:
//! `image_pods` (pods of images built here), `pod_network` (the pod network, kube-proxy and
//! CoreDNS as pods see them) and `volumes` (persistent volumes).
//!
//! Needs `KUBECONFIG` pointing at the local environment (`EXAMPLE= bash
//! testkit/env/local-up.sh`: the pod network, the control plane, kube-proxy and CoreDNS),
//! root (mount and network namespaces) and Debian's etcd 3.4.23 (`apt-get install
//! etcd-server etcd-client`). Without them it fails and says so; it never skips.

#[path = "image_pods/mod.rs"]
mod image_pods;
#[path = "pod_network/mod.rs"]
mod pod_network;
mod support;
#[path = "volumes/mod.rs"]
mod volumes;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, Service};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;

use support::*;

/// The host's /etc/hosts: its bytes and inode.
fn host_hosts_file() -> (Vec<u8>, u64) {
    use std::os::unix::fs::MetadataExt;
    let bytes = std::fs::read("/etc/hosts").unwrap();
    (bytes, std::fs::metadata("/etc/hosts").unwrap().ino())
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
            "schedulerName": scheduler_for(node),
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

/// The etcd image of Debian's etcd, the version the node is given.
const ETCD_IMAGE: &str = "quay.io/coreos/etcd:v3.4.23";

impl Env {
    async fn create_peers_service(&self, app: &str) {
        Api::<Service>::namespaced(self.client.clone(), &self.ns)
            .create(&PostParams::default(), &peers_service(app))
            .await
            .unwrap();
    }

    /// Creates a pod like [`etcd_pod`] in the test's namespace, bound by selector to its node.
    async fn create_etcd_pod(&self, name: &str, app: &str, restart: &str, image: &str) {
        let pod = etcd_pod(name, &self.ns, &self.node_name, app, restart, image);
        self.create_pod(pod).await;
    }
}

/// The pod runs on the test's node with an address of its pod range: the init container
/// (which waits until the pod's name resolves) completed, etcd is ready with a
/// `process://` container ID. Its address.
fn assert_running_after_init(env: &Env, ready: &Pod, ip_prefix: &str) -> String {
    let status = ready.status.clone().unwrap();
    let ip = status.pod_ip.clone().unwrap();
    assert!(ip.starts_with(ip_prefix), "pod IP {ip}");
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
    let etcd = container_status(ready);
    assert!(etcd.ready);
    assert!(
        etcd.container_id
            .as_deref()
            .unwrap()
            .starts_with("process://")
    );
    assert!(etcd.state.as_ref().unwrap().running.is_some());
    ip
}

/// Inside the pod (its namespaces), the pod's name and the headless Service's resolve to
/// its address through the cluster DNS, and its own /etc/hosts and /etc/resolv.conf are
/// the kubelet's.
fn assert_names_resolve_in_the_pod(env: &Env, pid: i32, ip: &str, host: &str) {
    let fqdn = format!("{host}.cluster.local");
    let got = exec_in(pid, &["getent", "hosts", host]);
    assert_eq!(
        got.split_whitespace().collect::<Vec<_>>(),
        [ip, fqdn.as_str()]
    );
    let service = exec_in(pid, &["getent", "hosts", &format!("peers.{}.svc", env.ns)]);
    assert!(service.starts_with(&format!("{ip} ")), "{service}");
    let hosts = exec_in(pid, &["cat", "/etc/hosts"]);
    assert!(hosts.contains(&format!("\n{ip}\t{fqdn}\tm1\n")), "{hosts}");
    let resolv = exec_in(pid, &["cat", "/etc/resolv.conf"]);
    let search = format!(
        "search {}.svc.cluster.local svc.cluster.local cluster.local\n",
        env.ns
    );
    assert_eq!(
        resolv,
        format!("{search}nameserver 10.96.0.10\noptions ndots:5\n")
    );
}

/// etcd answers at the pod's address: a key written is read back.
fn assert_etcd_serves(ip: &str) {
    etcdctl(ip, &["put", "greeting", "hello from a process node"]);
    let got = etcdctl(ip, &["get", "greeting", "--print-value-only"]);
    assert_eq!(got.trim(), "hello from a process node");
}

/// etcd's data is in the pod's emptyDir and its output in the container log; the pod's
/// state directory.
fn assert_data_and_log_in_pod_dir(env: &Env, pod: &Pod) -> PathBuf {
    let uid = pod.metadata.uid.clone().unwrap();
    let name = pod.metadata.name.as_deref().unwrap();
    let pod_dir = env
        .state_dir()
        .join("pods")
        .join(format!("{}_{name}_{uid}", env.ns));
    assert!(
        pod_dir.join("volumes/data/data/member").is_dir(),
        "etcd's /var/etcd/data is not in the emptyDir {}",
        pod_dir.display()
    );
    assert!(pod_dir.join("logs/etcd.log").is_file());
    pod_dir
}

/// `kubectl logs --tail=2` of a container returns its last two lines, as its log file has
/// them (through the API server and the node's kubelet API).
fn assert_kubectl_logs_tail(env: &Env, pod: &str, container: &str) {
    let tail = kubectl(env, &["logs", pod, "-c", container, "--tail=2"]);
    let lines: Vec<&str> = tail.lines().collect();
    assert_eq!(lines.len(), 2, "{tail}");
    let uid = env
        .state_dir()
        .join("pods")
        .read_dir()
        .unwrap()
        .flatten()
        .find(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with(&format!("{}_{pod}_", env.ns))
        })
        .expect("the pod's state dir");
    let raw = std::fs::read_to_string(uid.path().join(format!("logs/{container}.log"))).unwrap();
    for line in lines {
        assert!(raw.contains(line), "{line:?} is not in the container's log");
    }
}

/// A killed etcd of a `Never` pod: the pod Failed, exit code 137 by signal 9, not ready.
async fn kill_and_expect_failed(env: &Env, name: &str) {
    kill_pod(&env.state_dir(), &env.ns, name);
    let failed = wait_pod(&env.pods(), name, "Failed after kill", 30, |p| {
        phase(p) == "Failed"
    })
    .await;
    let term = container_status(&failed).state.unwrap().terminated.unwrap();
    assert_eq!(term.exit_code, 137);
    assert_eq!(term.signal, Some(9));
    assert!(!is_ready(&failed));
}

/// A deleted pod: the object goes, then its state directory and its network namespace.
async fn delete_and_expect_cleanup(env: &Env, name: &str, pod_dir: &Path, netns: &Path) {
    env.delete_pods(&[name]).await;
    wait_for("state dir removal", Duration::from_secs(10), || async {
        (!pod_dir.exists()).then_some(())
    })
    .await;
    wait_for(
        "network namespace removal",
        Duration::from_secs(10),
        || async { (!netns.exists()).then_some(()) },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn etcd_pod_resolves_serves_crashes_and_is_deleted() {
    let env = Env::new("a", 10251).await;
    let hosts_before = host_hosts_file();
    env.run(|env| {
        Box::pin(async move {
            env.create_peers_service("itest-a").await;
            env.create_etcd_pod("m1", "itest-a", "Never", ETCD_IMAGE)
                .await;
            let ready = wait_pod(&env.pods(), "m1", "Running and Ready", 90, |p| {
                phase(p) == "Running" && is_ready(p)
            })
            .await;
            let ip = assert_running_after_init(env, &ready, &pod_range_prefix(env).await);
            let pid = container_pid(&container_status(&ready));
            let netns = netns_path_of(pid);
            let host = format!("m1.peers.{}.svc", env.ns);
            assert_names_resolve_in_the_pod(env, pid, &ip, &host);
            assert_etcd_serves(&ip);
            let pod_dir = assert_data_and_log_in_pod_dir(env, &ready);
            assert_kubectl_logs_tail(env, "m1", "etcd");
            kill_and_expect_failed(env, "m1").await;
            delete_and_expect_cleanup(env, "m1", &pod_dir, &netns).await;
            env.stop_node_cleanly();
        })
    })
    .await;
    assert!(
        host_hosts_file() == hosts_before,
        "the host's /etc/hosts was written"
    );
}

fn waiting_reason(p: &Pod) -> Option<String> {
    container_status(p).state?.waiting?.reason
}

async fn set_etcd_image(env: &Env, pod: &str, image: &str) {
    let patch = json!({ "spec": { "containers": [{ "name": "etcd", "image": image }] } });
    env.pods()
        .patch(pod, &PatchParams::default(), &Patch::Strategic(patch))
        .await
        .unwrap();
}

/// An image nobody can run: the old process is stopped, the new one cannot start and the
/// message names the image and the known versions.
async fn unknown_version_is_err_image_pull(env: &Env, pod: &str) {
    set_etcd_image(env, pod, "quay.io/coreos/etcd:v3.99.0").await;
    let pulled = wait_pod(&env.pods(), pod, "ErrImagePull", 30, |p| {
        waiting_reason(p).as_deref() == Some("ErrImagePull")
    })
    .await;
    let cs = container_status(&pulled);
    let message = cs.state.unwrap().waiting.unwrap().message.unwrap();
    assert!(
        message.contains("no local binary for image quay.io/coreos/etcd:v3.99.0"),
        "{message}"
    );
    assert!(message.contains("known etcd versions: 3.4.23"), "{message}");
    assert_eq!(cs.restart_count, 1);
    assert!(cs.last_state.unwrap().terminated.is_some());
    assert!(!is_ready(&pulled));
}

/// Back to a known version (another registry): the same data dir, a new process. Its
/// container ID.
async fn known_version_runs_again(env: &Env, pod: &str) -> String {
    set_etcd_image(env, pod, "gcr.io/etcd-development/etcd:v3.4.23").await;
    let back = wait_pod(&env.pods(), pod, "Ready again", 60, is_ready).await;
    container_status(&back).container_id.unwrap()
}

/// A crash under restartPolicy Always: restarted with a new process.
async fn crash_is_restarted(env: &Env, pod: &str, first_id: &str) {
    kill_pod(&env.state_dir(), &env.ns, pod);
    let restarted = wait_pod(&env.pods(), pod, "restarted after kill", 60, |p| {
        let cs = container_status(p);
        cs.restart_count == 2 && cs.container_id.as_deref() != Some(first_id) && cs.ready
    })
    .await;
    let last = container_status(&restarted)
        .last_state
        .unwrap()
        .terminated
        .unwrap();
    assert_eq!(last.exit_code, 137);
}

/// Unknown image from the start: Pending with ErrImagePull.
async fn unknown_image_stays_pending(env: &Env, name: &str) {
    let mut nginx = etcd_pod(
        name,
        &env.ns,
        &env.node_name,
        "other",
        "Never",
        "nginx:1.25",
    );
    nginx.spec.as_mut().unwrap().init_containers = None;
    env.create_pod(nginx).await;
    let pending = wait_pod(&env.pods(), name, "ErrImagePull", 30, |p| {
        p.status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref())
            .is_some()
            && waiting_reason(p).as_deref() == Some("ErrImagePull")
    })
    .await;
    assert_eq!(phase(&pending), "Pending");
}

/// A failing init container under restartPolicy Never fails the pod.
async fn failing_init_container_fails_the_pod(env: &Env, name: &str) {
    let mut bad_init = etcd_pod(name, &env.ns, &env.node_name, "other", "Never", ETCD_IMAGE);
    bad_init
        .spec
        .as_mut()
        .unwrap()
        .init_containers
        .as_mut()
        .unwrap()[0]
        .command = Some(vec!["sh".into(), "-c".into(), "exit 3".into()]);
    env.create_pod(bad_init).await;
    let failed = wait_pod(&env.pods(), name, "Failed", 30, |p| phase(p) == "Failed").await;
    let init = &failed.status.unwrap().init_container_statuses.unwrap()[0];
    let exit_code = init
        .state
        .as_ref()
        .unwrap()
        .terminated
        .as_ref()
        .unwrap()
        .exit_code;
    assert_eq!(exit_code, 3);
}

/// A busybox pod that sleeps, without init container or probe.
fn sleeper_pod(env: &Env, name: &str) -> Pod {
    let mut sleeper = etcd_pod(
        name,
        &env.ns,
        &env.node_name,
        "other",
        "Never",
        "busybox:1.36",
    );
    let spec = sleeper.spec.as_mut().unwrap();
    spec.init_containers = None;
    let c = &mut spec.containers[0];
    c.command = Some(vec!["sleep".into(), "1000".into()]);
    c.args = None;
    c.readiness_probe = None;
    sleeper
}

/// A node restart: a running `Never` pod is reported as exited (`Unknown`), hence Failed;
/// the `Always` pod comes back by itself, with the address and network namespace it had.
async fn node_restart_reports_running_never_pod_exited(env: &mut Env, name: &str, always: &str) {
    env.create_pod(sleeper_pod(env, name)).await;
    let pods = env.pods();
    wait_pod(&pods, name, "Running", 30, |p| phase(p) == "Running").await;
    let before = pods.get(always).await.unwrap();
    let netns_before = netns_path_of(container_pid(&container_status(&before)));
    env.stop_node_cleanly();
    env.start_node();
    let after = wait_pod(&pods, name, "Failed after node restart", 30, |p| {
        phase(p) == "Failed"
    })
    .await;
    let term = container_status(&after).state.unwrap().terminated.unwrap();
    assert_eq!(term.reason.as_deref(), Some("Unknown"));
    let back = wait_pod(&pods, always, "Ready after node restart", 60, |p| {
        is_ready(p) && container_status(p).restart_count > container_status(&before).restart_count
    })
    .await;
    let ip = |p: &Pod| p.status.as_ref().and_then(|s| s.pod_ip.clone());
    assert_eq!(
        ip(&back),
        ip(&before),
        "the pod's address changed across a node restart"
    );
    let netns_after = netns_path_of(container_pid(&container_status(&back)));
    assert_eq!(netns_after, netns_before);
}

#[tokio::test(flavor = "multi_thread")]
async fn image_changes_pull_failures_restarts_and_node_restart_are_reported() {
    let env = Env::new("b", 10252).await;
    env.run(|env| {
        Box::pin(async move {
            env.create_peers_service("itest-b").await;
            env.create_etcd_pod("u1", "itest-b", "Always", ETCD_IMAGE)
                .await;
            wait_pod(&env.pods(), "u1", "Ready", 90, is_ready).await;
            unknown_version_is_err_image_pull(env, "u1").await;
            let first_id = known_version_runs_again(env, "u1").await;
            crash_is_restarted(env, "u1", &first_id).await;
            unknown_image_stays_pending(env, "x1").await;
            failing_init_container_fails_the_pod(env, "f1").await;
            node_restart_reports_running_never_pod_exited(env, "r1", "u1").await;
            env.delete_pods(&["u1", "x1", "f1", "r1"]).await;
        })
    })
    .await;
}
