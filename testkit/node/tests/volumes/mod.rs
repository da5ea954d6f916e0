//! Part of the `process_node` test binary: persistent volumes on the process node, with the
//! real API server and controller-manager. A claim of the default class (`local-path`,
//! `testkit/env/storage-class.yaml`, applied here too) is given the node of the first pod
//! that uses it, provisioned as a directory of the node's state, bound by the
//! controller-manager, mounted into the pod and kept after it; expanded on request; and
//! removed with its volume when the claim goes. Pods wait for missing or unbound claims.
//!
//! Needs what `process_node.rs` needs (a running control plane in `KUBECONFIG`, root) and
//! kubectl. Never skips.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::support::*;

/// Where the test pods mount their claim.
const MOUNT: &str = "/var/etcd-operator-it-claim";
const PROVISIONER: &str = "etcd-operator.test/local-path";

/// The local environment's StorageClass, applied (unchanged where it exists).
fn apply_storage_class(env: &Env) {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("../env/storage-class.yaml");
    kubectl(env, &["apply", "-f", &file.display().to_string()]);
}

fn claims(env: &Env) -> Api<PersistentVolumeClaim> {
    Api::namespaced(env.client.clone(), &env.ns)
}

fn volumes(env: &Env) -> Api<PersistentVolume> {
    Api::all(env.client.clone())
}

/// A claim of `size` that names no class (the default class is filled in).
async fn create_claim(env: &Env, name: &str, size: &str) -> PersistentVolumeClaim {
    let claim = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}}},
    }))
    .unwrap();
    claims(env)
        .create(&PostParams::default(), &claim)
        .await
        .unwrap()
}

/// A busybox pod on the test's node running `script` with `claim` mounted at [`MOUNT`].
fn claim_pod(env: &Env, name: &str, claim: &str, restart: &str, script: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": env.node_name},
            "schedulerName": scheduler_for(&env.node_name),
            "restartPolicy": restart,
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "main",
                "image": "busybox:1.36",
                "command": ["/bin/sh", "-c", script],
                "volumeMounts": [{"name": "data", "mountPath": MOUNT}],
            }],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}],
        },
    }))
    .unwrap()
}

fn annotation<'a>(meta: &'a kube::api::ObjectMeta, key: &str) -> Option<&'a str> {
    meta.annotations.as_ref()?.get(key).map(String::as_str)
}

fn storage(
    map: Option<
        &std::collections::BTreeMap<
            String,
            k8s_openapi::apimachinery::pkg::api::resource::Quantity,
        >,
    >,
) -> Option<String> {
    map?.get("storage").map(|q| q.0.clone())
}

async fn wait_claim(
    env: &Env,
    name: &str,
    what: &str,
    ok: impl Fn(&PersistentVolumeClaim) -> bool,
) -> PersistentVolumeClaim {
    let api = claims(env);
    wait_for(
        &format!("claim {name}: {what}"),
        Duration::from_secs(60),
        || async { api.get_opt(name).await.ok().flatten().filter(|c| ok(c)) },
    )
    .await
}

fn claim_phase(c: &PersistentVolumeClaim) -> &str {
    c.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

/// A claim with no pod yet is Pending, of the default class, given no node.
async fn unused_claim_waits_for_a_consumer(env: &Env, name: &str) {
    let claim = create_claim(env, name, "1Gi").await;
    let class = claim.spec.as_ref().unwrap().storage_class_name.as_deref();
    assert_eq!(class, Some("local-path"), "the default class is filled in");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let claim = claims(env).get(name).await.unwrap();
    assert_eq!(claim_phase(&claim), "Pending");
    assert_eq!(
        annotation(&claim.metadata, "volume.kubernetes.io/selected-node"),
        None
    );
    assert!(
        volumes(env)
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .iter()
            .all(|pv| {
                pv.spec
                    .as_ref()
                    .and_then(|s| s.claim_ref.as_ref())
                    .and_then(|r| r.uid.as_deref())
                    != claim.metadata.uid.as_deref()
            })
    );
}

/// The volume bound to the claim: provisioned by this node, pinned to it, its directory in
/// the node's state, bound back to the claim. Its directory.
async fn assert_provisioned_here(env: &Env, claim: &PersistentVolumeClaim) -> (String, PathBuf) {
    let node = env.node_name.as_str();
    assert_eq!(
        annotation(&claim.metadata, "volume.kubernetes.io/selected-node"),
        Some(node)
    );
    assert_eq!(
        annotation(&claim.metadata, "volume.kubernetes.io/storage-provisioner"),
        Some(PROVISIONER),
        "the PersistentVolume controller asked for our provisioner"
    );
    let name = claim.spec.as_ref().unwrap().volume_name.clone().unwrap();
    let pv = volumes(env).get(&name).await.unwrap();
    assert_eq!(
        annotation(&pv.metadata, "pv.kubernetes.io/provisioned-by"),
        Some(PROVISIONER)
    );
    let spec = pv.spec.clone().unwrap();
    let dir = env.state_dir().join("volumes").join(&name);
    assert_eq!(
        spec.local.as_ref().map(|l| PathBuf::from(&l.path)),
        Some(dir.clone())
    );
    assert_eq!(storage(spec.capacity.as_ref()).as_deref(), Some("1Gi"));
    assert_eq!(
        spec.persistent_volume_reclaim_policy.as_deref(),
        Some("Delete")
    );
    assert_eq!(spec.storage_class_name.as_deref(), Some("local-path"));
    let affinity = serde_json::to_value(&spec.node_affinity).unwrap();
    assert_eq!(
        affinity["required"]["nodeSelectorTerms"][0]["matchExpressions"][0],
        json!({"key": "kubernetes.io/hostname", "operator": "In", "values": [node]})
    );
    let claim_ref = spec.claim_ref.unwrap();
    assert_eq!(claim_ref.uid, claim.metadata.uid);
    assert_eq!(pv.status.and_then(|s| s.phase).as_deref(), Some("Bound"));
    let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o777, "any uid can write into the volume");
    (name, dir)
}

/// A first pod writes into the claim: the claim is provisioned here and bound; the file is
/// in the volume's directory on the node, and stays there when the pod is deleted.
async fn writer_provisions_and_leaves_its_file(env: &Env, claim: &str) -> (String, PathBuf) {
    let script = format!("echo hello > {MOUNT}/greeting");
    env.create_pod(claim_pod(env, "writer", claim, "Never", &script))
        .await;
    wait_pod(&env.pods(), "writer", "Succeeded", 90, |p| {
        phase(p) == "Succeeded"
    })
    .await;
    let bound = wait_claim(env, claim, "Bound", |c| claim_phase(c) == "Bound").await;
    let (pv, dir) = assert_provisioned_here(env, &bound).await;
    assert_eq!(
        std::fs::read_to_string(dir.join("greeting")).unwrap(),
        "hello\n"
    );
    env.delete_pods(&["writer"]).await;
    assert_eq!(
        std::fs::read_to_string(dir.join("greeting")).unwrap(),
        "hello\n",
        "the volume's directory outlives the pod"
    );
    (pv, dir)
}

/// A new pod on the same claim reads what the first one wrote.
async fn reader_sees_the_file(env: &Env, claim: &str) {
    let script = format!("test \"$(cat {MOUNT}/greeting)\" = hello");
    env.create_pod(claim_pod(env, "reader", claim, "Never", &script))
        .await;
    let done = wait_pod(&env.pods(), "reader", "finished", 90, |p| {
        matches!(phase(p), "Succeeded" | "Failed")
    })
    .await;
    assert_eq!(
        phase(&done),
        "Succeeded",
        "the reader found the writer's file"
    );
    env.delete_pods(&["reader"]).await;
}

/// 1Gi → 2Gi while a pod uses the claim: the volume and the claim's status say 2Gi, the
/// resize marks are gone as an external resizer leaves them, the pod was not restarted;
/// a request below the new capacity is refused by the API server.
async fn expansion_reports_2gi_and_shrinking_is_refused(env: &Env, claim: &str, pv: &str) {
    env.create_pod(claim_pod(env, "user", claim, "Always", "sleep 3600"))
        .await;
    wait_pod(&env.pods(), "user", "Running", 60, |p| {
        phase(p) == "Running"
    })
    .await;
    let grow = json!({"spec": {"resources": {"requests": {"storage": "2Gi"}}}});
    claims(env)
        .patch(claim, &PatchParams::default(), &Patch::Merge(grow))
        .await
        .unwrap();
    let grown = wait_claim(env, claim, "status.capacity 2Gi", |c| {
        storage(c.status.as_ref().and_then(|s| s.capacity.as_ref())).as_deref() == Some("2Gi")
    })
    .await;
    let status = grown.status.unwrap();
    assert_eq!(
        storage(status.allocated_resources.as_ref()).as_deref(),
        Some("2Gi")
    );
    assert!(
        !status
            .allocated_resource_statuses
            .unwrap_or_default()
            .contains_key("storage")
    );
    let resizing = status
        .conditions
        .iter()
        .flatten()
        .any(|c| c.type_ == "Resizing");
    assert!(!resizing, "no Resizing condition left");
    let volume = volumes(env).get(pv).await.unwrap();
    assert_eq!(
        storage(volume.spec.unwrap().capacity.as_ref()).as_deref(),
        Some("2Gi")
    );
    let shrink = json!({"spec": {"resources": {"requests": {"storage": "1Gi"}}}});
    match claims(env)
        .patch(claim, &PatchParams::default(), &Patch::Merge(shrink))
        .await
    {
        Err(kube::Error::Api(e)) => {
            assert_eq!(e.code, 422, "{e:?}");
            assert!(
                e.message.contains("can not be less than status.capacity"),
                "{}",
                e.message
            );
        }
        other => panic!("shrinking the claim was not refused: {other:?}"),
    }
    let user = env.pods().get("user").await.unwrap();
    assert_eq!(container_status(&user).restart_count, 0);
    env.delete_pods(&["user"]).await;
}

/// The claim deleted: its volume is released, then the node removes the directory and
/// the volume.
async fn deleting_the_claim_removes_volume_and_directory(
    env: &Env,
    claim: &str,
    pv: &str,
    dir: &Path,
) {
    claims(env)
        .delete(claim, &DeleteParams::default())
        .await
        .unwrap();
    let api = volumes(env);
    wait_for(
        &format!("volume {pv} to be deleted"),
        Duration::from_secs(60),
        || async { matches!(api.get_opt(pv).await, Ok(None)).then_some(()) },
    )
    .await;
    assert!(
        !dir.exists(),
        "{} is removed with its volume",
        dir.display()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn claim_is_provisioned_on_first_use_kept_after_its_pod_expanded_and_reclaimed() {
    let env = Env::new("pv-a", 10264).await;
    env.run(|env| {
        Box::pin(async move {
            apply_storage_class(env);
            unused_claim_waits_for_a_consumer(env, "data").await;
            let (pv, dir) = writer_provisions_and_leaves_its_file(env, "data").await;
            reader_sees_the_file(env, "data").await;
            expansion_reports_2gi_and_shrinking_is_refused(env, "data", &pv).await;
            deleting_the_claim_removes_volume_and_directory(env, "data", &pv, &dir).await;
        })
    })
    .await;
}

fn pod_scheduled(p: &Pod) -> Option<(String, String)> {
    let conditions = p.status.as_ref()?.conditions.as_ref()?;
    let c = conditions.iter().find(|c| c.type_ == "PodScheduled")?;
    Some((c.status.clone(), c.message.clone().unwrap_or_default()))
}

fn waiting_message(p: &Pod) -> String {
    let statuses = p
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref());
    statuses
        .and_then(|cs| cs.first())
        .and_then(|c| c.state.as_ref()?.waiting.as_ref()?.message.clone())
        .unwrap_or_default()
}

fn node_of(p: &Pod) -> Option<&str> {
    p.spec.as_ref()?.node_name.as_deref()
}

/// A pod whose claim does not exist stays unbound, and says why as the scheduler does;
/// once the claim exists it is provisioned, and the pod bound and started.
async fn missing_claim_keeps_the_pod_pending(env: &Env) {
    env.create_pod(claim_pod(env, "early", "later", "Always", "sleep 3600"))
        .await;
    let pending = wait_pod(&env.pods(), "early", "PodScheduled False", 30, |p| {
        pod_scheduled(p).is_some_and(|(status, _)| status == "False")
    })
    .await;
    let (_, message) = pod_scheduled(&pending).unwrap();
    assert!(
        message.contains("persistentvolumeclaim \"later\" not found"),
        "{message}"
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        node_of(&env.pods().get("early").await.unwrap()),
        None,
        "still unbound"
    );
    create_claim(env, "later", "1Gi").await;
    let running = wait_pod(&env.pods(), "early", "Running", 90, |p| {
        phase(p) == "Running"
    })
    .await;
    assert_eq!(node_of(&running), Some(env.node_name.as_str()));
}

/// A pod placed on the node by hand (`spec.nodeName`, no binding) with a claim nobody gave
/// a node: its container waits, never starting without its volume; once the claim is
/// given this node (as the scheduler would), it is provisioned and the container starts.
async fn unbound_claim_keeps_the_container_waiting(env: &Env) {
    create_claim(env, "unselected", "1Gi").await;
    let mut pod = claim_pod(
        env,
        "direct",
        "unselected",
        "Always",
        &format!("touch {MOUNT}/ran; sleep 3600"),
    );
    let spec = pod.spec.as_mut().unwrap();
    spec.node_selector = None;
    spec.node_name = Some(env.node_name.clone());
    env.create_pod(pod).await;
    let waiting = wait_pod(&env.pods(), "direct", "waiting for its claim", 30, |p| {
        waiting_message(p).contains("persistentvolumeclaim \"unselected\" is not bound")
    })
    .await;
    let state = container_status(&waiting).state.unwrap();
    assert_eq!(
        state.waiting.unwrap().reason.as_deref(),
        Some("ContainerCreating")
    );
    tokio::time::sleep(Duration::from_secs(6)).await;
    let still = env.pods().get("direct").await.unwrap();
    assert!(
        container_status(&still).state.unwrap().running.is_none(),
        "never started without its volume"
    );
    let select =
        json!({"metadata": {"annotations": {"volume.kubernetes.io/selected-node": env.node_name}}});
    claims(env)
        .patch("unselected", &PatchParams::default(), &Patch::Merge(select))
        .await
        .unwrap();
    wait_pod(&env.pods(), "direct", "Running", 60, |p| {
        phase(p) == "Running"
    })
    .await;
    let claim = claims(env).get("unselected").await.unwrap();
    let (_, dir) = assert_provisioned_here(env, &claim).await;
    wait_for(
        "the container's file in the volume",
        Duration::from_secs(10),
        || async { dir.join("ran").exists().then_some(()) },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn pods_wait_for_missing_or_unbound_claims_and_start_once_they_are_bound() {
    let env = Env::new("pv-b", 10265).await;
    env.run(|env| {
        Box::pin(async move {
            apply_storage_class(env);
            missing_claim_keeps_the_pod_pending(env).await;
            unbound_claim_keeps_the_container_waiting(env).await;
            env.delete_pods(&["early", "direct"]).await;
            for claim in ["later", "unselected"] {
                let bound = claims(env).get(claim).await.unwrap();
                let pv = bound.spec.unwrap().volume_name.unwrap();
                let dir = env.state_dir().join("volumes").join(&pv);
                deleting_the_claim_removes_volume_and_directory(env, claim, &pv, &dir).await;
            }
        })
    })
    .await;
}
