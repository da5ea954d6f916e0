//! The local environment itself, as pods and the cluster see it: what every other test
//! here takes for granted, proved on its own so that a broken environment fails here with
//! a plain message rather than as a timeout in an etcd scenario.
//!
//! - pod to pod, from one node's pod range to another's, the server seeing the client's
//!   own address (no address translation on the bridge);
//! - pod to a ClusterIP and to the Service's DNS name, through kube-proxy, to the ready
//!   pods the controller-manager put in the Service's EndpointSlice;
//! - a headless Service with `publishNotReadyAddresses` resolving in CoreDNS to pods that
//!   are not ready (by Service name and by `<hostname>.<subdomain>` name), while one
//!   without it resolves to nothing: members find each other this way before they serve.
//!
//! The pods run the environment's busybox image: busybox's httpd answers with a CGI
//! script that prints the caller's address, busybox's nc and nslookup ask.

use std::time::Duration;

use serde_json::json;

use crate::support::*;

/// Where the echo servers listen inside their pods.
const ECHO_PORT: u16 = 7000;

/// The echo server: busybox httpd on IPv4, whose CGI script `who` answers
/// "<pod hostname> saw <the caller's address>".
const ECHO_SERVER: &str = r#"mkdir -p /www/cgi-bin &&
printf '#!/bin/sh\necho Content-Type: text/plain\necho\necho "$(hostname) saw $REMOTE_ADDR"\n' >/www/cgi-bin/who &&
chmod +x /www/cgi-bin/who && exec httpd -f -p 0.0.0.0:7000 -h /www"#;

/// A busybox pod on `node` running `command`, labelled `app`, with hostname `name` and
/// subdomain `members` (the headless Service of the DNS test).
fn pod_yaml(
    ns: &str,
    node: &str,
    name: &str,
    app: &str,
    command: &[&str],
    probe: serde_json::Value,
) -> String {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": {"app": app}},
        "spec": {
            "hostname": name,
            "subdomain": "members",
            "nodeSelector": {"kubernetes.io/hostname": node},
            "automountServiceAccountToken": false,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "main", "image": "localhost/busybox:eo",
                            "command": command, "readinessProbe": probe}],
        },
    })
    .to_string()
}

fn echo_server(ns: &str, node: &str, name: &str) -> String {
    let probe = json!({"tcpSocket": {"port": ECHO_PORT}, "periodSeconds": 1});
    pod_yaml(ns, node, name, "echo", &["sh", "-c", ECHO_SERVER], probe)
}

fn sleeper(ns: &str, node: &str, name: &str, app: &str, probe: serde_json::Value) -> String {
    pod_yaml(ns, node, name, app, &["sleep", "3600"], probe)
}

/// The pod's address once it is Running (and Ready when `ready`).
async fn running(ns: &str, name: &str, ready: bool) -> String {
    let path = "jsonpath={.status.phase} {.status.conditions[?(@.type==\"Ready\")].status} \
                {.status.podIP}";
    wait_for(
        &format!("pod {ns}/{name} to run"),
        Duration::from_secs(60),
        || async {
            let (_, out) = kubectl(&["get", "pod", name, "-n", ns, "-o", path], None);
            let fields: Vec<&str> = out.split_whitespace().collect();
            match fields[..] {
                ["Running", is_ready, ip] if !ready || is_ready == "True" => Ok(ip.to_string()),
                _ => Err(out),
            }
        },
    )
    .await
}

/// `sh -c script` in pod `ns/pod` through `kubectl exec`: its output, or the error.
fn exec(ns: &str, pod: &str, script: &str) -> Result<String, String> {
    let (ok, out) = kubectl(&["exec", pod, "-n", ns, "--", "sh", "-c", script], None);
    if ok { Ok(out) } else { Err(out) }
}

/// What the echo server at `host:port` answers the client pod, retried while the path is
/// being programmed: the body's line.
async fn ask(ns: &str, client: &str, host: &str, port: u16) -> String {
    let script = format!("printf 'GET /cgi-bin/who HTTP/1.0\\r\\n\\r\\n' | nc -w 5 {host} {port}");
    wait_for(
        &format!("an answer from {host}:{port}"),
        Duration::from_secs(30),
        || async {
            let out = exec(ns, client, &script)?;
            match out.lines().rev().find(|l| !l.trim().is_empty()) {
                Some(line) if line.contains(" saw ") => Ok(line.trim().to_string()),
                _ => Err(out),
            }
        },
    )
    .await
}

/// The ready addresses in the EndpointSlices the controller-manager wrote for `service`,
/// sorted.
fn ready_slice_addresses(ns: &str, service: &str) -> Vec<String> {
    let selector = format!(
        "kubernetes.io/service-name={service},\
         endpointslice.kubernetes.io/managed-by=endpointslice-controller.k8s.io"
    );
    let out = endpoint_slices(ns, &selector, "json");
    let list: serde_json::Value = serde_json::from_str(&out).unwrap();
    let mut addresses: Vec<String> = list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|slice| slice["endpoints"].as_array().cloned().unwrap_or_default())
        .filter(|e| e["conditions"]["ready"] == json!(true))
        .flat_map(|e| e["addresses"].as_array().cloned().unwrap_or_default())
        .filter_map(|a| a.as_str().map(str::to_string))
        .collect();
    addresses.sort();
    addresses
}

async fn wait_slice_addresses(ns: &str, service: &str, want: &[&str]) {
    let mut want: Vec<String> = want.iter().map(|s| s.to_string()).collect();
    want.sort();
    wait_for(
        &format!("EndpointSlices of {service} to list {want:?} as ready"),
        Duration::from_secs(30),
        || async {
            let now = ready_slice_addresses(ns, service);
            if now == want {
                Ok(())
            } else {
                Err(format!("{now:?}"))
            }
        },
    )
    .await;
}

/// The IPv4 addresses busybox's nslookup gives for `name` in pod `ns/pod` (none when the
/// name does not resolve).
fn resolve(ns: &str, pod: &str, name: &str) -> Vec<String> {
    let out = exec(ns, pod, &format!("nslookup -type=a {name}")).unwrap_or_else(|e| e);
    // The answer's "Address: IP" lines; the server's own line is "Address:\tIP:53".
    let mut ips: Vec<String> = out
        .lines()
        .filter_map(|l| l.strip_prefix("Address: "))
        .map(|ip| ip.trim().to_string())
        .collect();
    ips.sort();
    ips
}

#[tokio::test]
async fn pods_reach_each_other_and_services_through_kube_proxy_and_cluster_dns() {
    let ns = Namespace::create("net-reach");
    apply(&echo_server(&ns.0, "local-node-0", "echo-1"));
    apply(&sleeper(
        &ns.0,
        "local-node-1",
        "client",
        "client",
        json!(null),
    ));
    let server_ip = running(&ns.0, "echo-1", true).await;
    let client_ip = running(&ns.0, "client", false).await;
    let range = |ip: &str| ip.rsplit_once('.').map(|(net, _)| net.to_string());
    assert!(server_ip.starts_with("10.244."), "{server_ip}");
    assert!(client_ip.starts_with("10.244."), "{client_ip}");
    assert_ne!(range(&server_ip), range(&client_ip), "one node's range");
    let want = format!("echo-1 saw {client_ip}");
    assert_eq!(ask(&ns.0, "client", &server_ip, ECHO_PORT).await, want);

    let service = json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "echo", "namespace": ns.0},
        "spec": {"selector": {"app": "echo"}, "ports": [{"port": 80, "targetPort": ECHO_PORT}]},
    });
    apply(&service.to_string());
    let cluster_ip = jsonpath("svc", "echo", &ns.0, "{.spec.clusterIP}");
    let octets = cluster_ip
        .trim()
        .parse::<std::net::Ipv4Addr>()
        .unwrap()
        .octets();
    assert!(
        octets[0] == 10 && (96..112).contains(&octets[1]),
        "{cluster_ip}"
    );
    wait_slice_addresses(&ns.0, "echo", &[&server_ip]).await;
    assert_eq!(ask(&ns.0, "client", cluster_ip.trim(), 80).await, want);
    let name = format!("echo.{}.svc.cluster.local", ns.0);
    assert_eq!(ask(&ns.0, "client", &name, 80).await, want);
}

#[tokio::test]
async fn a_headless_service_resolves_not_ready_pods_only_with_publish_not_ready_addresses() {
    let ns = Namespace::create("net-dns");
    let never_ready = json!({"exec": {"command": ["false"]}, "periodSeconds": 1});
    for (name, node) in [("m0", "local-node-0"), ("m1", "local-node-1")] {
        apply(&sleeper(&ns.0, node, name, "members", never_ready.clone()));
    }
    apply(&sleeper(
        &ns.0,
        "local-node-2",
        "asker",
        "asker",
        json!(null),
    ));
    for (name, publish) in [("members", true), ("strict", false)] {
        let service = json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "namespace": ns.0},
            "spec": {"clusterIP": "None", "publishNotReadyAddresses": publish,
                     "selector": {"app": "members"}, "ports": [{"port": 2380}]},
        });
        apply(&service.to_string());
    }
    let m0 = running(&ns.0, "m0", false).await;
    let m1 = running(&ns.0, "m1", false).await;
    running(&ns.0, "asker", false).await;
    for name in ["m0", "m1"] {
        let (_, ready) = container_state(&ns.0, name);
        assert!(!ready, "{name} is ready");
    }
    wait_slice_addresses(&ns.0, "members", &[&m0, &m1]).await;
    assert_eq!(ready_slice_addresses(&ns.0, "strict"), Vec::<String>::new());

    let domain = format!("{}.svc.cluster.local", ns.0);
    let by_name = |name: String, want: Vec<String>| {
        let ns = ns.0.clone();
        async move {
            wait_for(
                &format!("{name} to resolve to {want:?}"),
                Duration::from_secs(20),
                || async {
                    let got = resolve(&ns, "asker", &name);
                    if got == want {
                        Ok(())
                    } else {
                        Err(format!("{got:?}"))
                    }
                },
            )
            .await
        }
    };
    by_name(format!("m0.members.{domain}"), vec![m0.clone()]).await;
    let mut both = vec![m0.clone(), m1.clone()];
    both.sort();
    by_name(format!("members.{domain}"), both).await;
    assert_eq!(
        resolve(&ns.0, "asker", &format!("strict.{domain}")),
        Vec::<String>::new(),
        "strict resolves without ready pods"
    );
}
