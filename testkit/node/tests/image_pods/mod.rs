//! Part of the `process_node` test binary (so `make test` runs it): the process node runs
//! pods from images built here, as a kubelet would: the operator
//! image (built by `testkit/env/build-image.sh`, cached) runs rooted in its own file
//! system as the user its security context names, with a read-only root, no capabilities,
//! its pod's network namespace, /etc/hosts and /etc/resolv.conf, and a service-account
//! token it uses to take its leader Lease through the `kubernetes` Service's ClusterIP;
//! `runAsNonRoot` refuses uid 0; and `kubectl logs` (plain, `--tail`, `--timestamps`, `--limit-bytes`,
//! `--previous`, `-f`) returns containers' lines through the node's kubelet API.
//!
//! Needs what `process_node.rs` needs (a running control plane in `KUBECONFIG`, root,
//! Debian's etcd) plus kubectl and buildah (testkit/env/install-deps.sh). Never skips.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::Api;
use kube::api::PostParams;
use serde_json::json;

use crate::support::*;

/// The operator image of this tree, built (or found cached) by build-image.sh.
fn operator_image() -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = Command::new("bash")
        .arg("testkit/env/build-image.sh")
        .current_dir(&root)
        .stderr(Stdio::inherit())
        .output()
        .expect("running testkit/env/build-image.sh");
    assert!(out.status.success(), "testkit/env/build-image.sh failed");
    format!("localhost/etcd-operator:{}", env!("CARGO_PKG_VERSION"))
}

/// The EtcdCluster CRD from manifests/ (the operator is ready once it has listed
/// EtcdClusters); applied, so an environment that has it keeps it unchanged.
fn apply_crd(env: &Env) {
    let crd = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../manifests/10-crd.yaml");
    kubectl(env, &["apply", "-f", &crd.display().to_string()]);
    kubectl(
        env,
        &[
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "crd/etcdclusters.etcd.database.coreos.com",
        ],
    );
}

/// A ServiceAccount `op` with what the operator needs in the namespace: its caches (pods,
/// services, PersistentVolumeClaims, PodDisruptionBudgets), EtcdClusters, Events and its
/// leader Lease.
async fn operator_account(env: &Env) {
    let objects = [
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "op"}}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
               "metadata": {"name": "op"},
               "rules": [
                   {"apiGroups": [""], "resources": ["pods", "services", "persistentvolumeclaims"],
                    "verbs": ["get", "list", "watch"]},
                   {"apiGroups": ["policy"], "resources": ["poddisruptionbudgets"], "verbs": ["get", "list", "watch"]},
                   // The operator is ready once its caches are: EndpointSlices too (it adds a
                   // member only once the others' addresses are published there).
                   {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["get", "list", "watch"]},
                   {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]},
                   {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]},
                   {"apiGroups": ["etcd.database.coreos.com"], "resources": ["etcdclusters"], "verbs": ["get", "list", "watch"]},
                   {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                    "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]}]}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": {"name": "op"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "op"},
               "subjects": [{"kind": "ServiceAccount", "name": "op", "namespace": env.ns}]}),
    ];
    let [account, role, binding] = objects;
    let post = PostParams::default();
    let ns = &env.ns;
    Api::<ServiceAccount>::namespaced(env.client.clone(), ns)
        .create(&post, &serde_json::from_value(account).unwrap())
        .await
        .unwrap();
    Api::<Role>::namespaced(env.client.clone(), ns)
        .create(&post, &serde_json::from_value(role).unwrap())
        .await
        .unwrap();
    Api::<RoleBinding>::namespaced(env.client.clone(), ns)
        .create(&post, &serde_json::from_value(binding).unwrap())
        .await
        .unwrap();
}

/// The operator as its Deployment runs it (non-root, read-only root, no capabilities, no
/// privilege escalation), leader election on, listening on the pod's address; an emptyDir
/// at /tmp.
fn operator_pod(env: &Env, name: &str, image: &str) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": env.node_name},
            "schedulerName": scheduler_for(&env.node_name),
            "serviceAccountName": "op",
            "terminationGracePeriodSeconds": 5,
            "securityContext": {"runAsNonRoot": true, "runAsUser": 65532, "runAsGroup": 65532},
            "containers": [{
                "name": "operator",
                "image": image,
                "args": ["run", "--leader-elect=true", "--namespace=$(POD_NAMESPACE)",
                         "--lease-namespace=$(POD_NAMESPACE)", "--lease-name=it-leader",
                         "--listen=$(POD_IP):8443"],
                "env": [
                    {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                    {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                    {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                    {"name": "LOG_FORMAT", "value": "json"},
                ],
                "ports": [{"name": "https", "containerPort": 8443}],
                "readinessProbe": {"httpGet": {"path": "/readyz", "port": "https", "scheme": "HTTPS"}, "periodSeconds": 1},
                "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
                "securityContext": {
                    "allowPrivilegeEscalation": false,
                    "readOnlyRootFilesystem": true,
                    "capabilities": {"drop": ["ALL"]},
                },
            }],
            "volumes": [{"name": "tmp", "emptyDir": {}}],
        },
    }))
    .unwrap()
}

/// The value of a `/proc/<pid>/status` field.
fn proc_status(pid: i32, field: &str) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// The process runs as 65532:65532 with no capability in any set and `no_new_privs`.
fn assert_dropped_to_nonroot(pid: i32) {
    assert_eq!(proc_status(pid, "Uid"), "65532 65532 65532 65532");
    assert_eq!(proc_status(pid, "Gid"), "65532 65532 65532 65532");
    assert_eq!(proc_status(pid, "Groups"), "65532");
    for set in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
        assert_eq!(proc_status(pid, set), "0000000000000000", "{set}");
    }
    assert_eq!(proc_status(pid, "NoNewPrivs"), "1");
}

/// The process's root is the image's file system, not the host's, and is read-only while
/// its emptyDir is writable.
fn assert_rooted_read_only(pid: i32) {
    let root = PathBuf::from(format!("/proc/{pid}/root"));
    assert!(
        root.join("usr/local/bin/etcd-operator").is_file(),
        "the image's binary"
    );
    assert!(
        !root.join(ETCD.trim_start_matches('/')).exists(),
        "the host's etcd is visible"
    );
    let (theirs, ours) = (
        std::fs::metadata(&root).unwrap(),
        std::fs::metadata("/").unwrap(),
    );
    assert_ne!(
        (theirs.dev(), theirs.ino()),
        (ours.dev(), ours.ino()),
        "same root as the host"
    );
    let err = std::fs::write(root.join("written-by-the-test"), b"x").unwrap_err();
    assert_eq!(err.raw_os_error(), Some(nix::libc::EROFS), "{err}");
    std::fs::write(root.join("tmp/written-by-the-test"), b"x").expect("the emptyDir is writable");
}

/// The projected service-account token, CA and namespace are mounted where kube-rs reads
/// them.
fn assert_service_account_files(pid: i32, ns: &str) {
    let dir = PathBuf::from(format!(
        "/proc/{pid}/root/var/run/secrets/kubernetes.io/serviceaccount"
    ));
    let token = std::fs::read_to_string(dir.join("token")).unwrap();
    assert_eq!(token.split('.').count(), 3, "a JWT: {token}");
    assert!(
        std::fs::read_to_string(dir.join("ca.crt"))
            .unwrap()
            .contains("BEGIN CERTIFICATE")
    );
    assert_eq!(std::fs::read_to_string(dir.join("namespace")).unwrap(), ns);
}

/// The container is in its pod's network namespace (eth0 with the pod's address), with
/// the kubelet's /etc/hosts and /etc/resolv.conf, and the `kubernetes` Service's
/// ClusterIP in its environment (kube-rs's in-cluster configuration goes there).
fn assert_pod_network_and_files(pid: i32, ip: &str, ns: &str) {
    let root = PathBuf::from(format!("/proc/{pid}/root"));
    let hosts = std::fs::read_to_string(root.join("etc/hosts")).unwrap();
    assert!(
        hosts.starts_with("# Kubernetes-managed hosts file.\n"),
        "{hosts}"
    );
    assert!(hosts.ends_with(&format!("\n{ip}\top-1\n")), "{hosts}");
    let resolv = std::fs::read_to_string(root.join("etc/resolv.conf")).unwrap();
    assert!(
        resolv.contains(&format!("search {ns}.svc.cluster.local ")),
        "{resolv}"
    );
    assert!(resolv.contains("nameserver 10.96.0.10\n"), "{resolv}");
    let theirs = std::fs::read_link(format!("/proc/{pid}/ns/net")).unwrap();
    assert_ne!(theirs, std::fs::read_link("/proc/self/ns/net").unwrap());
    let netns = netns_path_of(pid).display().to_string();
    assert!(
        netns.starts_with("/run/netns/eo-"),
        "{netns} is not the pod network's"
    );
    let addresses = std::fs::read_to_string(format!("/proc/{pid}/net/fib_trie")).unwrap();
    assert!(
        addresses.contains(&format!("|-- {ip}\n")),
        "{ip} is not the pod's: {addresses}"
    );
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    let environ = String::from_utf8_lossy(&environ);
    assert!(
        environ
            .split('\0')
            .any(|v| v == "KUBERNETES_SERVICE_HOST=10.96.0.1"),
        "{environ}"
    );
    assert!(
        environ
            .split('\0')
            .any(|v| v == "KUBERNETES_SERVICE_PORT=443"),
        "{environ}"
    );
}

/// The operator, talking to the API server with its token, holds its Lease.
async fn wait_lease_held_by(env: &Env, holder: &str) {
    let leases: Api<Lease> = Api::namespaced(env.client.clone(), &env.ns);
    wait_for(
        "the operator's leader Lease",
        Duration::from_secs(90),
        || async {
            let lease = leases.get_opt("it-leader").await.ok().flatten()?;
            (lease.spec?.holder_identity.as_deref() == Some(holder)).then_some(())
        },
    )
    .await;
}

/// `kubectl logs -f`: the first line arrives while the stream stays open.
fn follow_first_line(env: &Env, pod: &str) -> String {
    let mut child = Command::new("kubectl")
        .env("KUBECONFIG", &env.kubeconfig)
        .args(["--namespace", &env.ns, "logs", "-f", pod])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = lines_of(child.stdout.take().unwrap());
    let first = lines.recv_timeout(Duration::from_secs(20));
    let still_following = child.try_wait().unwrap().is_none();
    let _ = child.kill();
    let _ = child.wait();
    assert!(still_following, "kubectl logs -f ended");
    first.expect("a first line from kubectl logs -f")
}

/// The lines of a reader, as they come.
fn lines_of(reader: impl std::io::Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(reader).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    rx
}

#[tokio::test(flavor = "multi_thread")]
async fn operator_image_runs_rooted_non_root_read_only_and_takes_its_lease_with_its_token() {
    let image = operator_image();
    let env = Env::new("img-a", 10261).await;
    env.run(|env| {
        Box::pin(async move {
            apply_crd(env);
            operator_account(env).await;
            env.create_pod(operator_pod(env, "op-1", &image)).await;
            let ready = wait_pod(&env.pods(), "op-1", "Running and Ready", 90, is_ready).await;
            let status = container_status(&ready);
            assert!(
                status
                    .image_id
                    .starts_with("localhost/etcd-operator@sha256:"),
                "{}",
                status.image_id
            );
            let pid = container_pid(&status);
            assert_dropped_to_nonroot(pid);
            assert_rooted_read_only(pid);
            assert_service_account_files(pid, &env.ns);
            let ip = ready
                .status
                .as_ref()
                .and_then(|s| s.pod_ip.clone())
                .unwrap();
            assert!(ip.starts_with(&pod_range_prefix(env).await), "{ip}");
            assert_pod_network_and_files(pid, &ip, &env.ns);
            wait_lease_held_by(env, "op-1").await;
            let logs = kubectl(env, &["logs", "op-1"]);
            assert!(logs.contains("serving HTTP"), "{logs}");
            assert_eq!(
                kubectl(env, &["logs", "op-1", "--tail=2"]).lines().count(),
                2
            );
            let first = follow_first_line(env, "op-1");
            assert!(
                logs.starts_with(&first),
                "{first:?} is not the log's first line"
            );
        })
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn run_as_non_root_with_uid_zero_is_refused_with_create_container_config_error() {
    let image = operator_image();
    let env = Env::new("img-b", 10262).await;
    env.run(|env| {
        Box::pin(async move {
            let mut pod = operator_pod(env, "as-root", &image);
            pod.spec.as_mut().unwrap().service_account_name = None;
            let psc = pod.spec.as_mut().unwrap().security_context.as_mut().unwrap();
            psc.run_as_user = Some(0);
            env.create_pod(pod).await;
            let refused = wait_pod(&env.pods(), "as-root", "CreateContainerConfigError", 30, |p| {
                p.status.as_ref().and_then(|s| s.container_statuses.as_ref()).is_some()
                    && container_status(p).state.and_then(|s| s.waiting).and_then(|w| w.reason).as_deref()
                        == Some("CreateContainerConfigError")
            })
            .await;
            let waiting = container_status(&refused).state.unwrap().waiting.unwrap();
            let uid = refused.metadata.uid.clone().unwrap();
            assert_eq!(
                waiting.message.as_deref(),
                Some(format!(
                    "container's runAsUser breaks non-root policy (pod: \"as-root_{}({uid})\", container: operator)",
                    env.ns
                ).as_str())
            );
            assert_eq!(phase(&refused), "Pending");
        })
    })
    .await;
}

/// A busybox pod running `script` with an emptyDir at `mount` (and restartPolicy `restart`).
fn shell_pod(env: &Env, name: &str, script: &str, restart: &str, mount: &str) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": env.node_name},
            "schedulerName": scheduler_for(&env.node_name),
            "automountServiceAccountToken": false,
            "restartPolicy": restart,
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "sh", "image": "busybox:1.36", "command": ["sh", "-c", script],
                            "volumeMounts": [{"name": "trigger", "mountPath": mount}]}],
            "volumes": [{"name": "trigger", "emptyDir": {}}],
        },
    }))
    .unwrap()
}

/// The host directory of a pod's volume.
fn volume_dir(env: &Env, pod: &Pod, volume: &str) -> PathBuf {
    let name = pod.metadata.name.as_deref().unwrap();
    let uid = pod.metadata.uid.as_deref().unwrap();
    env.state_dir()
        .join(format!("pods/{}_{name}_{uid}/volumes/{volume}", env.ns))
}

/// Plain, tail, timestamps, limit and since of a pod that wrote five lines.
async fn kubectl_logs_select_lines(env: &Env, mount: &str) {
    let script = "for i in 1 2 3 4 5; do echo line $i; done; sleep 1000";
    env.create_pod(shell_pod(env, "lines", script, "Never", mount))
        .await;
    wait_pod(&env.pods(), "lines", "Running", 30, |p| {
        phase(p) == "Running"
    })
    .await;
    let all = wait_for("five lines", Duration::from_secs(20), || async {
        let all = kubectl(env, &["logs", "lines"]);
        (all.lines().count() == 5).then_some(all)
    })
    .await;
    assert_eq!(all, "line 1\nline 2\nline 3\nline 4\nline 5\n");
    assert_eq!(
        kubectl(env, &["logs", "lines", "--tail=2"]),
        "line 4\nline 5\n"
    );
    assert_eq!(
        kubectl(env, &["logs", "lines", "--limit-bytes=8"]),
        "line 1\nl"
    );
    assert_eq!(kubectl(env, &["logs", "lines", "--since=1h"]), all);
    let stamped = kubectl(env, &["logs", "lines", "--timestamps", "--tail=1"]);
    let (time, rest) = stamped.trim_end().split_once(' ').unwrap();
    assert!(time.parse::<jiff::Timestamp>().is_ok(), "{stamped}");
    assert_eq!(rest, "line 5");
}

/// `-f` shows a line written after it started.
async fn kubectl_logs_follow_sees_new_lines(env: &Env, mount: &str) {
    let script =
        format!("echo before; until [ -e {mount}/go ]; do sleep 0.2; done; echo after; sleep 1000");
    env.create_pod(shell_pod(env, "follow", &script, "Never", mount))
        .await;
    let running = wait_pod(&env.pods(), "follow", "Running", 30, |p| {
        phase(p) == "Running"
    })
    .await;
    let mut child = Command::new("kubectl")
        .env("KUBECONFIG", &env.kubeconfig)
        .args(["--namespace", &env.ns, "logs", "-f", "follow"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = lines_of(child.stdout.take().unwrap());
    let first = lines.recv_timeout(Duration::from_secs(20));
    std::fs::write(volume_dir(env, &running, "trigger").join("go"), b"").unwrap();
    let second = lines.recv_timeout(Duration::from_secs(20));
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(first.as_deref(), Ok("before"));
    assert_eq!(
        second.as_deref(),
        Ok("after"),
        "kubectl logs -f missed the new line"
    );
}

/// `--previous` shows the process before the current one: a first run that fails, a
/// second that stays (the emptyDir remembers the first).
async fn kubectl_logs_previous_shows_the_last_run(env: &Env, mount: &str) {
    let script = format!(
        "if [ -e {mount}/ran ]; then echo second; sleep 1000; else touch {mount}/ran; echo first; exit 1; fi"
    );
    env.create_pod(shell_pod(env, "crash", &script, "Always", mount))
        .await;
    wait_pod(
        &env.pods(),
        "crash",
        "running again after a restart",
        60,
        |p| {
            p.status
                .as_ref()
                .and_then(|s| s.container_statuses.as_ref())
                .is_some()
                && container_status(p).restart_count == 1
                && container_status(p).state.and_then(|s| s.running).is_some()
        },
    )
    .await;
    let current = wait_for("the second run's line", Duration::from_secs(20), || async {
        let current = kubectl(env, &["logs", "crash"]);
        (!current.is_empty()).then_some(current)
    })
    .await;
    assert_eq!(current, "second\n");
    assert_eq!(kubectl(env, &["logs", "crash", "--previous"]), "first\n");
}

#[tokio::test(flavor = "multi_thread")]
async fn kubectl_logs_tail_follow_and_previous_return_the_containers_lines() {
    let env = Env::new("logs", 10263).await;
    env.run(|env| {
        Box::pin(async move {
            let mount = format!("/tmp/node-it-{}", env.ns);
            kubectl_logs_select_lines(env, &mount).await;
            kubectl_logs_follow_sees_new_lines(env, &mount).await;
            kubectl_logs_previous_shows_the_last_run(env, &mount).await;
            env.delete_pods(&["lines", "follow", "crash"]).await;
            let _ = std::fs::remove_dir(&mount);
        })
    })
    .await;
}
