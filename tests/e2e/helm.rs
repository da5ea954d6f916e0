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

/// `helm install` of the release, with the local image, watching `watched` only.
fn install_release(watched: &str) {
    let (repository, tag) = local_image();
    let values = [
        format!("image.repository={repository}"),
        format!("image.tag={tag}"),
        format!("watchNamespace={watched}"),
    ];
    helm(&[
        "install",
        RELEASE,
        "charts/etcd-operator",
        "-n",
        RELEASE_NAMESPACE,
        "--create-namespace",
        "--set",
        &values[0],
        "--set",
        &values[1],
        "--set",
        &values[2],
        "--wait",
        "--timeout",
        "180s",
    ]);
}

/// The log lines of the release's operator pods that report a refusal by the API server.
fn release_refusals() -> Vec<String> {
    release_pods()
        .iter()
        .flat_map(|pod| {
            let (_, out) = kubectl(&["logs", "-n", RELEASE_NAMESPACE, pod.as_str()], None);
            out.lines()
                .filter(|l| l.contains("forbidden") || l.contains("Forbidden"))
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect()
}

#[tokio::test]
async fn the_chart_installs_upgrades_and_uninstalls_leaving_the_crd_and_the_clusters() {
    // The manifests' operator watches every namespace: stopped while the release runs,
    // so that exactly one operator acts on the cluster below.
    let _stopped = OperatorStopped::new().await;
    let ns = Namespace::create("chart-apps");
    let _removed = ReleaseRemoved;
    install_release(&ns.0);
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

#[tokio::test]
async fn a_namespaced_release_runs_tls_backup_and_restore_under_its_role_and_leaves_other_namespaces_alone()
 {
    let _stopped = OperatorStopped::new().await;
    let ns = Namespace::create("chart-scoped");
    let elsewhere = Namespace::create("chart-elsewhere");
    let _removed = ReleaseRemoved;
    install_release(&ns.0);
    // A cluster outside the watched namespace, for nobody while the release runs.
    apply(&cluster_yaml(&elsewhere.0, "outside", 1, "3.5.35", false));

    // TLS made by the operator, a backup with its client certificate, a restore: each
    // with only the Role in the watched namespace and the chart's ClusterRoles.
    let secure = format!(
        "{}  TLS:\n    auto:\n      validity: 2160h\n",
        cluster_yaml(&ns.0, "secure", 1, "3.5.35", false)
    );
    apply(&secure);
    wait_running(&ns.0, "secure", 1, Duration::from_secs(180)).await;
    let mut client = crate::tls::auto_client(&ns.0, "secure")
        .await
        .expect("the operator's client certificate works");
    write_keys(&mut client, "scoped", 50).await;
    create_secret(&ns.0);
    let prefix = empty_prefix(&ns.0, "scoped");
    let path = format!("{BUCKET}/{prefix}");
    apply(&backup_yaml(
        &ns.0,
        "once",
        "clusterName: secure",
        &path,
        "",
    ));
    wait_for(
        "the scoped backup to succeed",
        Duration::from_secs(120),
        || async {
            let status = object_json("etcdbackup", &ns.0, "once")["status"].clone();
            if status["succeeded"] == true {
                Ok(())
            } else {
                Err(status.to_string())
            }
        },
    )
    .await;
    let spec = "  clusterSpec:\n    size: 1\n    version: \"3.5.35\"\n";
    apply(&crate::restore::restore_yaml(
        &ns.0, "again", "restored", &path, spec,
    ));
    crate::restore::wait_phase(&ns.0, "again", "Succeeded", Duration::from_secs(240)).await;
    let ready = wait_running(&ns.0, "restored", 1, Duration::from_secs(60)).await;
    let mut restored = etcd(&ns.0, &ready).await;
    assert_keys(&mut restored, "scoped", 50).await;

    // The cluster elsewhere was left alone: no status, no pod, no Service.
    let outside = object_json("etcd", &elsewhere.0, "outside");
    assert!(
        outside["status"].is_null(),
        "the release wrote another namespace's status: {outside}"
    );
    let (ok, out) = kubectl(
        &["get", "pods,services", "-n", &elsewhere.0, "-o", "name"],
        None,
    );
    assert!(
        ok && out.trim().is_empty(),
        "the release made objects elsewhere: {out}"
    );
    let refusals = release_refusals();
    assert!(
        refusals.is_empty(),
        "the release asked for more than its Role: {refusals:#?}"
    );
}

/// Whether a RoleBinding or ClusterRoleBinding (JSON) names ServiceAccount `ns/name`, or a
/// group every ServiceAccount of `ns` is in.
fn binds_account(binding: &serde_json::Value, ns: &str, name: &str) -> bool {
    let groups = [
        "system:serviceaccounts".to_string(),
        format!("system:serviceaccounts:{ns}"),
    ];
    binding["subjects"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|s| {
            (s["kind"] == "ServiceAccount" && s["namespace"] == ns && s["name"] == name)
                || (s["kind"] == "Group" && groups.iter().any(|g| s["name"] == g.as_str()))
        })
}

/// `(binding kind, namespace, name, role kind, role name)` of a binding (JSON).
fn binding_key(binding: &serde_json::Value) -> (String, String, String, String, String) {
    let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_string();
    (
        text(&binding["kind"]),
        text(&binding["metadata"]["namespace"]),
        text(&binding["metadata"]["name"]),
        text(&binding["roleRef"]["kind"]),
        text(&binding["roleRef"]["name"]),
    )
}

#[tokio::test]
async fn the_operator_holds_exactly_the_charts_rights() {
    // What manifests/20-rbac.yaml (the chart's default render) grants, by object.
    let text = std::fs::read_to_string(root().join("manifests/20-rbac.yaml")).unwrap();
    let objects: Vec<serde_json::Value> = text
        .split("\n---\n")
        .filter_map(|doc| serde_yaml_ng::from_str::<serde_json::Value>(doc).ok())
        .filter(|o| o.is_object())
        .collect();
    let kind = |o: &serde_json::Value| o["kind"].as_str().unwrap_or_default().to_string();
    let mut granted: Vec<_> = objects
        .iter()
        .filter(|o| kind(o).ends_with("Binding"))
        .filter(|o| binds_account(o, "etcd-operator", "etcd-operator"))
        .map(|o| {
            let mut key = binding_key(o);
            if key.0 == "ClusterRoleBinding" {
                key.1.clear();
            }
            key
        })
        .collect();
    granted.sort();
    assert!(granted.len() >= 4, "{granted:?}");

    // What the API server holds for the operator's ServiceAccount (and its groups):
    // the suite's every scenario runs the operator with this.
    let (ok, out) = kubectl(
        &[
            "get",
            "clusterrolebindings,rolebindings",
            "-A",
            "-o",
            "json",
        ],
        None,
    );
    assert!(ok, "{out}");
    let live: serde_json::Value = serde_json::from_str(&out).unwrap();
    let mut held: Vec<_> = live["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|b| binds_account(b, "etcd-operator", "etcd-operator"))
        // The API server's own defaults, which every ServiceAccount has everywhere
        // (service-account issuer discovery).
        .filter(|b| b["metadata"]["labels"]["kubernetes.io/bootstrapping"] != "rbac-defaults")
        .map(binding_key)
        .collect();
    held.sort();
    assert_eq!(
        held, granted,
        "the operator is bound to exactly the chart's roles"
    );

    // And each of those roles holds exactly the chart's rules.
    for (_, ns, _, role_kind, role) in &granted {
        let chart = objects
            .iter()
            .find(|o| kind(o) == *role_kind && o["metadata"]["name"] == role.as_str())
            .unwrap_or_else(|| panic!("{role_kind} {role} is not in manifests/20-rbac.yaml"));
        let mut args = vec!["get", role_kind.as_str(), role.as_str(), "-o", "json"];
        if !ns.is_empty() {
            args.extend(["-n", ns.as_str()]);
        }
        let (ok, out) = kubectl(&args, None);
        assert!(ok, "{out}");
        let live: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(live["rules"], chart["rules"], "{role_kind} {role}");
    }
}
