//! The Helm chart on the local environment: `helm install` of a release scoped to one
//! namespace runs a cluster to Ready, `helm upgrade` rolls the operator and the new pod
//! acts, `helm uninstall` removes the operator and leaves the CRD, the cluster, its pods
//! and its data.

use std::process::Command;
use std::time::Duration;

use serde_json::json;

use crate::operator::{DEPLOYMENT, OperatorStopped, kubectl_operator};
use crate::support::*;

/// The release, its namespace, and the namespace it watches.
const RELEASE: &str = "chart-e2e";
const RELEASE_NAMESPACE: &str = "e2e-chart-operator";

/// Runs helm (`testkit/env/chart.sh helm`) against the local environment; panics with its
/// output when it fails.
fn helm(args: &[&str]) -> String {
    let out = Command::new("bash")
        .arg(root().join("testkit/env/chart.sh"))
        .arg("helm")
        .args(args)
        .current_dir(root())
        .env("KUBECONFIG", kubeconfig())
        .output()
        .expect("helm runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "helm {}: {text}", args.join(" "));
    text
}

/// The image the manifests' Deployment runs (the local build), as (repository, tag).
fn local_image() -> (String, String) {
    let (ok, out) = kubectl_operator(&[
        "get",
        "deploy",
        DEPLOYMENT,
        "-o",
        "jsonpath={.spec.template.spec.containers[0].image}",
    ]);
    assert!(ok, "{out}");
    let (repository, tag) = out.trim().rsplit_once(':').expect("an image with a tag");
    (repository.to_string(), tag.to_string())
}

/// The release's operator pods (`pod/<name>`).
fn release_pods() -> Vec<String> {
    let selector = format!("app.kubernetes.io/instance={RELEASE}");
    let (ok, out) = kubectl(
        &[
            "get",
            "pods",
            "-n",
            RELEASE_NAMESPACE,
            "-l",
            &selector,
            "-o",
            "name",
        ],
        None,
    );
    assert!(ok, "{out}");
    out.lines().map(str::to_string).collect()
}

/// The holder of the release's Lease.
fn release_lease_holder() -> String {
    let (_, out) = kubectl(
        &[
            "get",
            "lease",
            "-n",
            RELEASE_NAMESPACE,
            "-o",
            "jsonpath={.items[0].spec.holderIdentity}",
        ],
        None,
    );
    out.trim().to_string()
}

/// Deletes the release (if a failing test left it) and its namespace when dropped.
struct ReleaseRemoved;

impl Drop for ReleaseRemoved {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(root().join("testkit/env/chart.sh"))
            .args([
                "helm",
                "uninstall",
                RELEASE,
                "-n",
                RELEASE_NAMESPACE,
                "--wait",
            ])
            .env("KUBECONFIG", kubeconfig())
            .output();
        let _ = kubectl(
            &["delete", "namespace", RELEASE_NAMESPACE, "--timeout=120s"],
            None,
        );
    }
}

#[tokio::test]
async fn the_chart_installs_upgrades_and_uninstalls_leaving_the_crd_and_the_clusters() {
    // The manifests' operator watches every namespace: stopped while the release runs,
    // so that exactly one operator acts on the cluster below.
    let _stopped = OperatorStopped::new().await;
    let ns = Namespace::create("chart-apps");
    let _removed = ReleaseRemoved;
    let (repository, tag) = local_image();
    let image = [
        format!("image.repository={repository}"),
        format!("image.tag={tag}"),
        format!("watchNamespace={}", ns.0),
    ];
    helm(&[
        "install",
        RELEASE,
        "charts/etcd-operator",
        "-n",
        RELEASE_NAMESPACE,
        "--create-namespace",
        "--set",
        &image[0],
        "--set",
        &image[1],
        "--set",
        &image[2],
        "--wait",
        "--timeout",
        "180s",
    ]);
    apply(&cluster_yaml(&ns.0, "charted", 1, "3.5.35", false));
    let ready = wait_running(&ns.0, "charted", 1, Duration::from_secs(120)).await;
    let mut client = etcd(&ns.0, &ready).await;
    write_keys(&mut client, "chart", 20).await;
    let first_pods = release_pods();

    // An upgrade changes the pod template: new pods, and the new leader acts.
    helm(&[
        "upgrade",
        RELEASE,
        "charts/etcd-operator",
        "-n",
        RELEASE_NAMESPACE,
        "--reuse-values",
        "--set",
        "operator.logLevel=debug",
        "--wait",
        "--timeout",
        "180s",
    ]);
    let upgraded = wait_for(
        "the upgraded release's pods to replace the first ones and lead",
        Duration::from_secs(120),
        || async {
            let pods = release_pods();
            let holder = format!("pod/{}", release_lease_holder());
            if pods.iter().all(|p| !first_pods.contains(p)) && pods.contains(&holder) {
                Ok(pods)
            } else {
                Err(format!("pods {pods:?}, Lease held by {holder}"))
            }
        },
    )
    .await;
    assert!(!upgraded.is_empty());
    patch_spec(&ns.0, "charted", json!({"size": 2})).await;
    let two = wait_running(&ns.0, "charted", 2, Duration::from_secs(120)).await;
    let pods = pod_uids(&ns.0);

    helm(&[
        "uninstall",
        RELEASE,
        "-n",
        RELEASE_NAMESPACE,
        "--wait",
        "--timeout",
        "120s",
    ]);
    let (gone, out) = kubectl(
        &["get", "deploy", "-n", RELEASE_NAMESPACE, "-o", "name"],
        None,
    );
    assert!(
        gone && out.trim().is_empty(),
        "the release's Deployment stays: {out}"
    );
    let (crd, out) = kubectl(
        &["get", "crd", "etcdclusters.etcd.database.coreos.com"],
        None,
    );
    assert!(crd, "helm uninstall removed the CRD: {out}");
    let (cluster, out) = kubectl(&["get", "etcd", "charted", "-n", &ns.0], None);
    assert!(cluster, "helm uninstall removed the cluster: {out}");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(pod_uids(&ns.0), pods, "a member pod was deleted");
    let mut client = etcd(&ns.0, &two).await;
    assert_voters(&member_list(&mut client).await, 2);
    assert_keys(&mut client, "chart", 20).await;
}
