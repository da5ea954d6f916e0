//! Binding pending pods to this node through the `pods/binding` subresource, since no
//! scheduler runs; a pod with claims only once its claims allow it, as the scheduler's
//! volume binding decides ([`volbind`]).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Binding, ObjectReference, PersistentVolumeClaim, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

use crate::log::event;
use crate::storage::volbind::{self, VolumeBinding};
use crate::storage::{ANN_SELECTED_NODE, Storage, StorageView};

/// How often a pending pod's claims are looked at again without a change.
const RECHECK: Duration = Duration::from_secs(5);

/// Whether this node should bind `pod`: unbound, not deleting, not finished, and its
/// `nodeSelector` (if any) matches the node's labels.
pub fn wants_binding(pod: &Pod, node_labels: &std::collections::BTreeMap<String, String>) -> bool {
    let Some(spec) = &pod.spec else {
        return false;
    };
    if spec.node_name.as_deref().is_some_and(|n| !n.is_empty())
        || pod.metadata.deletion_timestamp.is_some()
    {
        return false;
    }
    if matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    ) {
        return false;
    }
    spec.node_selector
        .iter()
        .flatten()
        .all(|(k, v)| node_labels.get(k) == Some(v))
}

/// Binds the pod to `node`, retrying transient errors a few times. A conflict (already
/// bound) or a missing pod ends it quietly.
pub async fn bind(client: Client, namespace: String, name: String, uid: String, node: String) {
    let api: Api<Pod> = Api::namespaced(client, &namespace);
    let binding = Binding {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(namespace.clone()),
            uid: Some(uid),
            ..Default::default()
        },
        target: ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: Some(node.clone()),
            ..Default::default()
        },
    };
    for attempt in 0..5u32 {
        match api
            .create_subresource::<_, serde_json::Value>(
                "binding",
                &name,
                &PostParams::default(),
                &binding,
            )
            .await
        {
            Ok(_) => {
                event!("pod {namespace}/{name} bound to node {node}");
                return;
            }
            Err(kube::Error::Api(e)) if e.code == 409 || e.code == 404 => {
                event!("pod {namespace}/{name} not bound: {}", e.message);
                return;
            }
            Err(e) => {
                event!(
                    "binding pod {namespace}/{name} failed (attempt {}): {e}",
                    attempt + 1
                );
                tokio::time::sleep(Duration::from_secs(1 << attempt)).await;
            }
        }
    }
}

/// What binding needs: the API, this node and its labels, and the watched storage.
pub struct BindSite {
    /// API client.
    pub client: Client,
    /// This node.
    pub node: String,
    /// Its labels.
    pub labels: BTreeMap<String, String>,
    /// Claims, volumes and classes.
    pub storage: Arc<Storage>,
}

/// Binds `pod` once its claims allow: claims waiting for a node are given this node
/// (`volume.kubernetes.io/selected-node`, as the scheduler's volume binder writes it);
/// while a claim is missing, unbound or another node's, the pod stays pending (logged, and
/// its `PodScheduled` condition says why), looked at again on every storage change.
pub async fn bind_when_ready(site: Arc<BindSite>, pod: Pod) {
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    let name = pod.metadata.name.clone().unwrap_or_default();
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let client = site.client.clone();
    if volbind::claim_names(&pod).is_empty() {
        return bind(client, namespace, name, uid, site.node.clone()).await;
    }
    let mut changed = site.storage.subscribe();
    if !site.storage.ready().await {
        return;
    }
    let mut reported: Option<String> = None;
    loop {
        match volbind::decide(&pod, &site.node, &site.labels, &*site.storage) {
            VolumeBinding::Ready => {
                return bind(client, namespace, name, uid, site.node.clone()).await;
            }
            VolumeBinding::SelectNode(claims) => {
                for claim in &claims {
                    select_node(&site, &namespace, claim).await;
                }
            }
            VolumeBinding::Wait(why) if reported.as_ref() != Some(&why) => {
                report_pending(&client, &namespace, &name, &why).await;
                reported = Some(why);
            }
            VolumeBinding::Wait(_) => {}
        }
        tokio::select! {
            r = changed.changed() => if r.is_err() { return },
            _ = tokio::time::sleep(RECHECK) => {}
        }
    }
}

/// Gives the claim this node to be provisioned on (guarded by its resourceVersion, so a
/// claim another node took meanwhile is left to it).
async fn select_node(site: &BindSite, namespace: &str, claim: &str) {
    let Some(current) = site.storage.claim(namespace, claim) else {
        return;
    };
    let patch = json!({"metadata": {
        "resourceVersion": current.metadata.resource_version,
        "annotations": {ANN_SELECTED_NODE: site.node},
    }});
    let api: Api<PersistentVolumeClaim> = Api::namespaced(site.client.clone(), namespace);
    match api
        .patch(claim, &PatchParams::default(), &Patch::Merge(patch))
        .await
    {
        Ok(_) => event!(
            "claim {namespace}/{claim}: selected node {} (WaitForFirstConsumer)",
            site.node
        ),
        Err(kube::Error::Api(e)) if e.code == 409 || e.code == 404 => {}
        Err(e) => event!("claim {namespace}/{claim}: selecting node failed: {e}"),
    }
}

/// Logs why a pod stays pending and says so in its `PodScheduled` condition, as the
/// scheduler does.
async fn report_pending(client: &Client, namespace: &str, name: &str, why: &str) {
    event!("pod {namespace}/{name} pending: {why}");
    let patch = json!({"status": {"conditions": [{
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": why,
        "lastTransitionTime": jiff::Timestamp::now().to_string(),
    }]}});
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    if let Err(e) = api
        .patch_status(name, &PatchParams::default(), &Patch::Strategic(patch))
        .await
    {
        event!("pod {namespace}/{name}: reporting it pending failed: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodSpec, PodStatus};
    use std::collections::BTreeMap;

    fn labels() -> BTreeMap<String, String> {
        [("kubernetes.io/hostname".to_string(), "n1".to_string())].into()
    }

    fn pending() -> Pod {
        Pod {
            spec: Some(PodSpec::default()),
            ..Default::default()
        }
    }

    #[test]
    fn unbound_pending_pod_is_bound() {
        assert!(wants_binding(&pending(), &labels()));
    }

    #[test]
    fn bound_deleting_or_finished_pods_are_not() {
        let mut p = pending();
        p.spec.as_mut().unwrap().node_name = Some("other".into());
        assert!(!wants_binding(&p, &labels()));
        let mut p = pending();
        p.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            jiff::Timestamp::UNIX_EPOCH,
        ));
        assert!(!wants_binding(&p, &labels()));
        let mut p = pending();
        p.status = Some(PodStatus {
            phase: Some("Failed".into()),
            ..Default::default()
        });
        assert!(!wants_binding(&p, &labels()));
    }

    #[test]
    fn node_selector_must_match_node_labels() {
        let mut p = pending();
        p.spec.as_mut().unwrap().node_selector =
            Some([("kubernetes.io/hostname".to_string(), "n2".to_string())].into());
        assert!(!wants_binding(&p, &labels()));
        p.spec.as_mut().unwrap().node_selector = Some(labels());
        assert!(wants_binding(&p, &labels()));
    }
}
