//! The Node object: registration (labels, capacity, address, Ready condition) and the
//! heartbeat (a Lease in `kube-node-lease` renewed every 10 s, and the Ready condition's
//! heartbeat time refreshed) that keeps the node lifecycle controller content.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{
    DaemonEndpoint, Node, NodeAddress, NodeCondition, NodeDaemonEndpoints, NodeStatus,
    NodeSystemInfo,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference, Time};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use tokio_util::sync::CancellationToken;

use crate::ctx::NodeCtx;
use crate::log::event;

/// The interval of lease renewals and status heartbeats.
pub const HEARTBEAT: Duration = Duration::from_secs(10);
/// The lease duration announced.
pub const LEASE_SECONDS: i32 = 40;
/// The namespace of node leases.
pub const LEASE_NAMESPACE: &str = "kube-node-lease";

/// The machine architecture as Kubernetes spells it.
pub fn arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

/// The labels a kubelet puts on its Node.
pub fn node_labels(node: &str) -> BTreeMap<String, String> {
    [
        ("kubernetes.io/hostname", node),
        ("kubernetes.io/os", "linux"),
        ("kubernetes.io/arch", arch()),
        ("etcd-operator.dev/process-node", "true"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

fn memory_kib() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or(1 << 20)
}

fn read_trimmed(path: &str) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// The Ready condition and the pressure conditions, all healthy.
pub fn healthy_conditions(now: Timestamp, ready_since: Timestamp) -> Vec<NodeCondition> {
    let cond = |type_: &str, status: &str, reason: &str, message: &str| NodeCondition {
        type_: type_.to_string(),
        status: status.to_string(),
        reason: Some(reason.to_string()),
        message: Some(message.to_string()),
        last_heartbeat_time: Some(Time(now)),
        last_transition_time: Some(Time(ready_since)),
    };
    vec![
        cond(
            "MemoryPressure",
            "False",
            "KubeletHasSufficientMemory",
            "process node has sufficient memory available",
        ),
        cond(
            "DiskPressure",
            "False",
            "KubeletHasNoDiskPressure",
            "process node has no disk pressure",
        ),
        cond(
            "PIDPressure",
            "False",
            "KubeletHasSufficientPID",
            "process node has sufficient PID available",
        ),
        cond(
            "Ready",
            "True",
            "KubeletReady",
            "process node is posting ready status",
        ),
    ]
}

/// The full node status.
pub fn node_status(
    ctx: &NodeCtx,
    version: &str,
    now: Timestamp,
    ready_since: Timestamp,
) -> NodeStatus {
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let resources: BTreeMap<String, Quantity> = [
        ("cpu".to_string(), Quantity(cpus.to_string())),
        (
            "memory".to_string(),
            Quantity(format!("{}Ki", memory_kib())),
        ),
        ("pods".to_string(), Quantity("110".to_string())),
    ]
    .into();
    let kernel = read_trimmed("/proc/sys/kernel/osrelease");
    NodeStatus {
        addresses: Some(vec![
            NodeAddress {
                type_: "InternalIP".into(),
                address: ctx.host_ip.clone(),
            },
            NodeAddress {
                type_: "Hostname".into(),
                address: ctx.node_name.clone(),
            },
        ]),
        capacity: Some(resources.clone()),
        allocatable: Some(resources),
        conditions: Some(healthy_conditions(now, ready_since)),
        daemon_endpoints: Some(NodeDaemonEndpoints {
            kubelet_endpoint: Some(DaemonEndpoint {
                port: i32::from(ctx.kubelet_port),
            }),
        }),
        node_info: Some(NodeSystemInfo {
            architecture: arch().to_string(),
            boot_id: read_trimmed("/proc/sys/kernel/random/boot_id"),
            container_runtime_version: format!(
                "process://etcd-operator-node-{}",
                env!("CARGO_PKG_VERSION")
            ),
            kernel_version: kernel,
            kube_proxy_version: String::new(),
            kubelet_version: version.to_string(),
            machine_id: read_trimmed("/etc/machine-id"),
            operating_system: "linux".into(),
            os_image: "etcd-operator process node".into(),
            system_uuid: read_trimmed("/etc/machine-id"),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Registers (or re-registers) the Node and reports it Ready; returns what the heartbeat
/// needs: the node's uid, the version reported and the time it became ready.
pub async fn register(ctx: &NodeCtx) -> anyhow::Result<Registration> {
    let api: Api<Node> = Api::all(ctx.client.clone());
    let version = ctx
        .client
        .apiserver_version()
        .await
        .map(|v| v.git_version)
        .unwrap_or_else(|_| "v0.0.0".to_string());
    let labels = node_labels(&ctx.node_name);
    let node = match api.get_opt(&ctx.node_name).await? {
        Some(node) => {
            let patch = serde_json::json!({ "metadata": { "labels": labels } });
            api.patch(
                &ctx.node_name,
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await?;
            node
        }
        None => {
            let node = Node {
                metadata: ObjectMeta {
                    name: Some(ctx.node_name.clone()),
                    labels: Some(labels),
                    ..Default::default()
                },
                ..Default::default()
            };
            api.create(&PostParams::default(), &node).await?
        }
    };
    let now = Timestamp::now();
    let ready_since = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready" && c.status == "True"))
        .and_then(|c| c.last_transition_time.as_ref().map(|t| t.0))
        .unwrap_or(now);
    let status = node_status(ctx, &version, now, ready_since);
    api.patch_status(
        &ctx.node_name,
        &PatchParams::default(),
        &Patch::Strategic(serde_json::json!({ "status": status })),
    )
    .await?;
    event!(
        "node {} registered (Ready, InternalIP {}, version {version})",
        ctx.node_name,
        ctx.host_ip
    );
    Ok(Registration {
        uid: node.metadata.uid.unwrap_or_default(),
        ready_since,
    })
}

/// The Node's `spec.podCIDR`, once the controller-manager's node IPAM has given it one;
/// an error after `timeout`.
pub async fn wait_pod_cidr(ctx: &NodeCtx, timeout: Duration) -> anyhow::Result<String> {
    let api: Api<Node> = Api::all(ctx.client.clone());
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let node = api.get(&ctx.node_name).await?;
        if let Some(cidr) = node.spec.and_then(|s| s.pod_cidr).filter(|c| !c.is_empty()) {
            return Ok(cidr);
        }
        if tokio::time::Instant::now() >= deadline {
            anyhow::bail!(
                "node {} got no spec.podCIDR within {}s: is the controller-manager allocating \
                 node CIDRs (--allocate-node-cidrs)?",
                ctx.node_name,
                timeout.as_secs()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// What registration learnt.
#[derive(Clone, Debug)]
pub struct Registration {
    /// The Node's uid (owner of the lease).
    pub uid: String,
    /// When the node became Ready.
    pub ready_since: Timestamp,
}

async fn renew_lease(ctx: &NodeCtx, reg: &Registration) -> Result<(), kube::Error> {
    let api: Api<Lease> = Api::namespaced(ctx.client.clone(), LEASE_NAMESPACE);
    let now = MicroTime(Timestamp::now());
    if api.get_opt(&ctx.node_name).await?.is_some() {
        let patch = serde_json::json!({ "spec": {
            "holderIdentity": ctx.node_name,
            "leaseDurationSeconds": LEASE_SECONDS,
            "renewTime": now,
        }});
        api.patch(
            &ctx.node_name,
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?;
    } else {
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(ctx.node_name.clone()),
                namespace: Some(LEASE_NAMESPACE.into()),
                owner_references: Some(vec![OwnerReference {
                    api_version: "v1".into(),
                    kind: "Node".into(),
                    name: ctx.node_name.clone(),
                    uid: reg.uid.clone(),
                    ..Default::default()
                }]),
                ..Default::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(ctx.node_name.clone()),
                lease_duration_seconds: Some(LEASE_SECONDS),
                renew_time: Some(now),
                ..Default::default()
            }),
        };
        api.create(&PostParams::default(), &lease).await?;
    }
    Ok(())
}

async fn refresh_ready(ctx: &NodeCtx, reg: &Registration) -> Result<(), kube::Error> {
    let api: Api<Node> = Api::all(ctx.client.clone());
    let patch = serde_json::json!({ "status": {
        "conditions": healthy_conditions(Timestamp::now(), reg.ready_since),
    }});
    api.patch_status(
        &ctx.node_name,
        &PatchParams::default(),
        &Patch::Strategic(patch),
    )
    .await?;
    Ok(())
}

/// Renews the lease and the Ready heartbeat every [`HEARTBEAT`] until shutdown.
/// When the Node object disappears (a recreated control plane), it is registered again.
pub async fn heartbeat(
    ctx: std::sync::Arc<NodeCtx>,
    mut reg: Registration,
    shutdown: CancellationToken,
) {
    let mut tick = tokio::time::interval(HEARTBEAT);
    let mut failing = false;
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        let mut result = refresh_ready(&ctx, &reg).await;
        if matches!(&result, Err(kube::Error::Api(e)) if e.code == 404) {
            event!(
                "node {} no longer exists; registering it again",
                ctx.node_name
            );
            match register(&ctx).await {
                Ok(r) => {
                    reg = r;
                    result = Ok(());
                }
                Err(e) => {
                    failing = true;
                    event!("node registration failed: {e:#}");
                    continue;
                }
            }
        }
        if result.is_ok() {
            result = renew_lease(&ctx, &reg).await;
        }
        match result {
            Ok(()) if failing => {
                failing = false;
                event!("node heartbeat recovered");
            }
            Ok(()) => {}
            Err(e) => {
                failing = true;
                event!("node heartbeat failed: {e}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_is_labelled_like_a_kubelet_node() {
        let labels = node_labels("local-node");
        assert_eq!(labels["kubernetes.io/hostname"], "local-node");
        assert_eq!(labels["kubernetes.io/os"], "linux");
    }

    #[test]
    fn heartbeat_conditions_report_ready_with_fresh_heartbeat() {
        let since = Timestamp::UNIX_EPOCH;
        let now = Timestamp::from_second(100).unwrap();
        let conds = healthy_conditions(now, since);
        let ready = conds.iter().find(|c| c.type_ == "Ready").unwrap();
        assert_eq!(ready.status, "True");
        assert_eq!(ready.last_heartbeat_time, Some(Time(now)));
        assert_eq!(ready.last_transition_time, Some(Time(since)));
    }
}
