//! Binding pending pods to this node through the `pods/binding` subresource, since no
//! scheduler runs.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Binding, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::PostParams;
use kube::{Api, Client};

use crate::log::event;

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
