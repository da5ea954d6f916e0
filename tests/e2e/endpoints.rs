//! The operator's HTTPS endpoints as an anonymous client, a ServiceAccount without rights
//! and the chart's readers meet them: TLS only, a bearer token reviewed by the API server
//! for every path but the probes, and the debug stream bounded per identity.

use std::time::Duration;

use crate::operator::{DebugStream, leader, reader_token, service_account_token};
use crate::support::*;

/// ServiceAccount `name` in the operator's namespace, bound to the chart's ClusterRole
/// `role` (none: no rights at all).
fn account(name: &str, role: Option<&str>) -> String {
    let mut yaml = format!(
        "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: {name}\n  namespace: etcd-operator\n"
    );
    if let Some(role) = role {
        yaml.push_str(&format!(
            "---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n  \
             name: {name}\nroleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: ClusterRole\n  \
             name: {role}\nsubjects:\n- kind: ServiceAccount\n  name: {name}\n  namespace: etcd-operator\n"
        ));
    }
    apply(&yaml);
    service_account_token(name)
}

#[tokio::test]
async fn anonymous_and_unauthorized_requests_are_refused_and_a_reader_is_served() {
    let pod = leader().await;
    let stranger = account("e2e-no-rights", None);
    let metrics_only = account("e2e-metrics-reader", Some("etcd-operator-metrics-reader"));

    for open in ["/healthz", "/readyz"] {
        let (code, body) = pod.get_as(open, None, "https");
        assert_eq!(code, "200", "{open} stays open for the kubelet: {body}");
    }
    let (code, _) = pod.get_as("/healthz", None, "http");
    assert_ne!(code, "200", "plain HTTP is not served");

    for path in ["/metrics", "/debug/actors", "/debug/trace"] {
        let (code, body) = pod.get_as(path, None, "https");
        assert_eq!(code, "401", "anonymous {path}: {body}");
        let (code, body) = pod.get_as(path, Some("not-a-token"), "https");
        assert_eq!(code, "401", "a forged token on {path}: {body}");
        let (code, body) = pod.get_as(path, Some(&stranger), "https");
        assert_eq!(
            code, "403",
            "a ServiceAccount without rights on {path}: {body}"
        );
        assert!(body.contains("e2e-no-rights"), "{body}");
    }

    let (code, body) = pod.get_as("/metrics", Some(&metrics_only), "https");
    assert_eq!(code, "200", "{body}");
    assert!(body.contains("etcd_operator_"), "{body}");
    let (code, body) = pod.get_as("/debug/actors", Some(&metrics_only), "https");
    assert_eq!(code, "403", "metrics-reader does not grant /debug/: {body}");

    let (code, body) = pod.get_as("/debug/actors", Some(&reader_token()), "https");
    assert_eq!(code, "200", "{body}");
    assert!(body.contains("leader-election"), "{body}");
}

#[tokio::test]
async fn one_identity_cannot_hold_every_debug_stream_subscription() {
    let token = account("e2e-stream-reader", Some("etcd-operator-debug-reader"));
    // The chart's default: two subscriptions per identity.
    let first = DebugStream::follow_as(&token).await;
    let second = DebugStream::follow_as(&token).await;
    let pod = leader().await;
    let (code, body) = pod.get_as("/debug/stream", Some(&token), "https");
    assert_eq!(code, "429", "a third subscription of one identity: {body}");
    assert!(body.contains("e2e-stream-reader"), "{body}");
    // Another identity still gets one (curl gives up after its 5 s, having had a 200).
    let (code, _) = pod.get_as("/debug/stream", Some(&reader_token()), "https");
    assert_eq!(code, "200", "another reader is not locked out");
    drop((first, second));
    // A closed subscription gives its slot back once the operator next writes to it.
    let freed = wait_for(
        "a slot of e2e-stream-reader to be free",
        Duration::from_secs(60),
        || {
            let (code, body) = pod.get_as("/debug/stream", Some(&token), "https");
            async move {
                if code == "200" {
                    Ok(())
                } else {
                    Err(format!("{code}: {body}"))
                }
            }
        },
    );
    freed.await;
}
