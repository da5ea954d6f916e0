//! Part of the `process_node` test binary (so `make test` runs it): the local environment's
//! pod network as pods and the cluster see it, with pods of the test's node and of the
//! environment's first node (`local-node-0`), each in its node's pod range:
//!
//! - pod to pod, from one node's range to the other's, the server seeing the client's own
//!   address;
//! - pod to a ClusterIP, and to the Service's DNS name, through kube-proxy, to the ready
//!   pods the real controller-manager put in the Service's EndpointSlice, again without
//!   address translation of the client;
//! - a headless Service with `publishNotReadyAddresses` resolving, in CoreDNS, to pods that
//!   are not ready, by Service name and by `<hostname>.<subdomain>` name, while a Service
//!   without it resolves to nothing;
//! - the controller-manager's log without the Endpoints/EndpointSlice errors about
//!   loopback addresses it wrote when pods had 127.x addresses.
//!
//! Servers and clients are `python3` on the host's tools (busybox-image pods); commands run
//! inside pods as `kubectl exec` would run them (`nsenter` into a container's namespaces).
//! Needs what `process_node.rs` needs: the local environment up.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Api;
use kube::api::{ListParams, PostParams};
use serde_json::json;

use crate::support::*;

/// The environment's own node, which runs pods alongside the test's.
const ENV_NODE: &str = "local-node-0";
/// Where echo servers listen inside their pods.
const ECHO_PORT: u16 = 7000;

/// Answers every connection with "<its hostname> saw <the client's address>".
const ECHO_SERVER: &str = r#"
import socket
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 7000))
s.listen()
while True:
    c, a = s.accept()
    c.sendall(("%s saw %s\n" % (socket.gethostname(), a[0])).encode())
    c.close()
"#;

/// Connects to argv[1]:argv[2] and prints the first line it gets.
const ECHO_CLIENT: &str = r#"
import socket, sys
c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5)
print(c.makefile().readline().strip())
"#;

/// A busybox-image pod on `node` running `command`, labelled `app`, with the subdomain
/// `members` (the headless Service of the DNS test); `probe` its readiness probe, if any.
fn pod_on(node: &str, name: &str, app: &str, command: &[&str], probe: serde_json::Value) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": app}},
        "spec": {
            "hostname": name,
            "subdomain": "members",
            "nodeSelector": {"kubernetes.io/hostname": node},
            "schedulerName": scheduler_for(node),
            "automountServiceAccountToken": false,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "main", "image": "busybox:1.36", "command": command,
                            "readinessProbe": probe}],
        },
    }))
    .unwrap()
}

fn echo_server(node: &str, name: &str) -> Pod {
    let probe = json!({"tcpSocket": {"port": ECHO_PORT}, "periodSeconds": 1});
    pod_on(node, name, "echo", &["python3", "-c", ECHO_SERVER], probe)
}

fn sleeper(node: &str, name: &str, app: &str, probe: serde_json::Value) -> Pod {
    pod_on(node, name, app, &["sleep", "3600"], probe)
}

async fn create_service(env: &Env, spec: serde_json::Value) -> Service {
    let service = serde_json::from_value(spec).unwrap();
    Api::<Service>::namespaced(env.client.clone(), &env.ns)
        .create(&PostParams::default(), &service)
        .await
        .unwrap()
}

/// The pod's address and the pid of its container, once it is Running (and Ready when
/// `ready`).
async fn running(env: &Env, name: &str, ready: bool) -> (String, i32) {
    let pod = wait_pod(&env.pods(), name, "Running", 60, |p| {
        phase(p) == "Running" && (!ready || is_ready(p))
    })
    .await;
    let ip = pod.status.as_ref().and_then(|s| s.pod_ip.clone()).unwrap();
    (ip, container_pid(&container_status(&pod)))
}

/// What the echo server at `host:port` answers the client pod `pid`, retried while the
/// path is being programmed.
async fn ask(pid: i32, host: &str, port: u16) -> String {
    let port = port.to_string();
    wait_for(
        &format!("an answer from {host}:{port}"),
        Duration::from_secs(30),
        || async { try_exec_in(pid, &["python3", "-c", ECHO_CLIENT, host, &port]).ok() },
    )
    .await
    .trim()
    .to_string()
}

/// The addresses of the ready endpoints in the EndpointSlices the controller-manager wrote
/// for `service`, sorted.
async fn ready_slice_addresses(env: &Env, service: &str) -> Vec<String> {
    let slices = Api::<EndpointSlice>::namespaced(env.client.clone(), &env.ns);
    let selector = format!(
        "kubernetes.io/service-name={service},\
         endpointslice.kubernetes.io/managed-by=endpointslice-controller.k8s.io"
    );
    let list = slices
        .list(&ListParams::default().labels(&selector))
        .await
        .unwrap();
    let mut addresses: Vec<String> = list
        .items
        .into_iter()
        .flat_map(|s| s.endpoints)
        .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) == Some(true))
        .flat_map(|e| e.addresses)
        .collect();
    addresses.sort();
    addresses
}

async fn wait_slice_addresses(env: &Env, service: &str, want: &[&str]) {
    let mut want: Vec<String> = want.iter().map(|s| s.to_string()).collect();
    want.sort();
    wait_for(
        &format!("EndpointSlices of {service} to list {want:?} as ready"),
        Duration::from_secs(30),
        || async { (ready_slice_addresses(env, service).await == want).then_some(()) },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn pods_reach_each_other_and_services_through_kube_proxy_and_cluster_dns() {
    let env = Env::new("net-a", 10271).await;
    env.run(|env| {
        Box::pin(async move {
            let prefix = pod_range_prefix(env).await;
            env.create_pod(echo_server(&env.node_name, "echo-1")).await;
            env.create_pod(sleeper(ENV_NODE, "client", "client", json!(null)))
                .await;
            let (server_ip, _) = running(env, "echo-1", true).await;
            let (client_ip, client) = running(env, "client", false).await;
            assert!(
                server_ip.starts_with(&prefix),
                "{server_ip} not in {prefix}0/24"
            );
            assert!(client_ip.starts_with("10.244."), "{client_ip}");
            assert!(
                !client_ip.starts_with(&prefix),
                "the client is on the other node"
            );
            let answer = ask(client, &server_ip, ECHO_PORT).await;
            assert_eq!(answer, format!("echo-1 saw {client_ip}"));

            let service = create_service(
                env,
                json!({
                    "apiVersion": "v1", "kind": "Service", "metadata": {"name": "echo"},
                    "spec": {"selector": {"app": "echo"},
                             "ports": [{"port": 80, "targetPort": ECHO_PORT}]},
                }),
            )
            .await;
            let cluster_ip = service.spec.unwrap().cluster_ip.unwrap();
            let octets = cluster_ip.parse::<std::net::Ipv4Addr>().unwrap().octets();
            assert!(
                octets[0] == 10 && (96..112).contains(&octets[1]),
                "{cluster_ip}"
            );
            wait_slice_addresses(env, "echo", &[&server_ip]).await;
            assert_eq!(
                ask(client, &cluster_ip, 80).await,
                format!("echo-1 saw {client_ip}")
            );
            let name = format!("echo.{}.svc", env.ns);
            assert_eq!(
                ask(client, &name, 80).await,
                format!("echo-1 saw {client_ip}")
            );
        })
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_headless_service_resolves_not_ready_pods_only_with_publish_not_ready_addresses() {
    let env = Env::new("net-b", 10272).await;
    env.run(|env| {
        Box::pin(async move {
            let never_ready = json!({"exec": {"command": ["false"]}, "periodSeconds": 1});
            for name in ["m0", "m1"] {
                env.create_pod(sleeper(
                    &env.node_name,
                    name,
                    "members",
                    never_ready.clone(),
                ))
                .await;
            }
            env.create_pod(sleeper(&env.node_name, "asker", "asker", json!(null)))
                .await;
            for (name, publish) in [("members", true), ("strict", false)] {
                create_service(
                    env,
                    json!({
                        "apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
                        "spec": {"clusterIP": "None", "publishNotReadyAddresses": publish,
                                 "selector": {"app": "members"}, "ports": [{"port": 2380}]},
                    }),
                )
                .await;
            }
            let (m0, _) = running(env, "m0", false).await;
            let (m1, _) = running(env, "m1", false).await;
            let (_, asker) = running(env, "asker", false).await;
            let pods = env.pods();
            for name in ["m0", "m1"] {
                assert!(!is_ready(&pods.get(name).await.unwrap()), "{name} is ready");
            }
            wait_slice_addresses(env, "members", &[&m0, &m1]).await;
            assert_eq!(
                ready_slice_addresses(env, "strict").await,
                Vec::<String>::new()
            );

            let ns = &env.ns;
            let resolve = |name: String| async move {
                wait_for(
                    &format!("{name} to resolve"),
                    Duration::from_secs(20),
                    || async { try_exec_in(asker, &["getent", "ahostsv4", &name]).ok() },
                )
                .await
            };
            let m0_name = resolve(format!("m0.members.{ns}.svc")).await;
            assert!(m0_name.starts_with(&format!("{m0} ")), "{m0_name}");
            let service = resolve(format!("members.{ns}.svc")).await;
            for ip in [&m0, &m1] {
                assert!(
                    service.lines().any(|l| l.starts_with(&format!("{ip} "))),
                    "{service}"
                );
            }
            let strict = try_exec_in(asker, &["getent", "ahostsv4", &format!("strict.{ns}.svc")]);
            assert!(
                strict.is_err(),
                "strict resolves without ready pods: {strict:?}"
            );
        })
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn endpoint_slices_carry_pod_addresses_and_the_controller_manager_logs_no_loopback_errors() {
    let env = Env::new("net-c", 10273).await;
    env.run(|env| {
        Box::pin(async move {
            env.create_pod(echo_server(&env.node_name, "echo-2")).await;
            create_service(
                env,
                json!({
                    "apiVersion": "v1", "kind": "Service", "metadata": {"name": "echo"},
                    "spec": {"selector": {"app": "echo"},
                             "ports": [{"port": 80, "targetPort": ECHO_PORT}]},
                }),
            )
            .await;
            let (ip, _) = running(env, "echo-2", true).await;
            wait_slice_addresses(env, "echo", &[&ip]).await;
            let log_path = std::env::var_os("LOCAL_ENV_DIR")
                .map(std::path::PathBuf::from)
                .unwrap_or_else(|| "/tmp/etcd-operator-local".into())
                .join("logs/kube-controller-manager.log");
            let log = std::fs::read_to_string(&log_path)
                .unwrap_or_else(|e| panic!("{}: {e}", log_path.display()));
            let loopback: Vec<&str> = log.lines().filter(|l| l.contains("loopback")).collect();
            assert!(loopback.is_empty(), "{}", loopback.join("\n"));
        })
    })
    .await;
}
