//! Invalid specs are refused by `kubectl apply` with a clear message.

use etcd_operator::api::names::{max_name_len, name_problem};

use crate::support::{Namespace, cluster_yaml, kubectl};

fn apply_spec(ns: &str, spec: &str) -> (bool, String) {
    let yaml = format!(
        "apiVersion: etcd.database.coreos.com/v1beta2\nkind: EtcdCluster\nmetadata:\n  \
         name: invalid\n  namespace: {ns}\nspec:\n{spec}"
    );
    kubectl(&["apply", "-f", "-"], Some(&yaml))
}

#[test]
fn invalid_specs_are_refused_at_kubectl_apply_with_the_field_named() {
    let ns = Namespace::create("validation");
    let cases = [
        ("  size: 0\n", "spec.size", "greater than or equal to 1"),
        ("  size: -1\n", "spec.size", "greater than or equal to 1"),
        ("  size: 100\n", "spec.size", "less than or equal to 7"),
        ("  size: 3\n  version: latest\n", "spec.version", "3.5.35"),
        ("  size: 3\n  sise: 3\n", "spec.sise", "unknown field"),
        ("  version: 3.5.35\n", "spec.size", "Required"),
        (
            "  size: 3\n  compaction:\n    retention: 10s\n",
            "spec.compaction.retention",
            "at least 1m",
        ),
        (
            "  size: 3\n  compaction:\n    mode: Revision\n    retention: 1h\n",
            "spec.compaction.retention",
            "number of revisions",
        ),
        (
            "  size: 3\n  compaction:\n    mode: Hourly\n",
            "spec.compaction.mode",
            "Unsupported value",
        ),
        (
            "  size: 3\n  quotaBackendBytes: 0\n",
            "spec.quotaBackendBytes",
            "greater than or equal to 1",
        ),
        (
            "  size: 3\n  quotaBackendBytes: 1024\n  pod:\n    etcdEnv:\n    - name: \
             ETCD_QUOTA_BACKEND_BYTES\n      value: \"2048\"\n",
            "spec",
            "spec.quotaBackendBytes and spec.pod.etcdEnv ETCD_QUOTA_BACKEND_BYTES",
        ),
        (
            "  size: 3\n  compaction:\n    mode: Periodic\n  pod:\n    etcdEnv:\n    - name: \
             ETCD_AUTO_COMPACTION_RETENTION\n      value: \"1\"\n",
            "spec",
            "spec.compaction and spec.pod.etcdEnv ETCD_AUTO_COMPACTION_",
        ),
    ];
    for (spec, field, words) in cases {
        let (ok, out) = apply_spec(&ns.0, spec);
        assert!(!ok, "accepted {spec:?}: {out}");
        assert!(
            out.contains(field) && out.contains(words),
            "{spec:?}: message does not name {field} / {words}: {out}"
        );
    }
    let (_, listed) = kubectl(&["get", "etcd", "-n", &ns.0, "-o", "name"], None);
    assert!(
        listed.trim().is_empty() || listed.contains("No resources"),
        "{listed}"
    );
}

#[test]
fn every_example_is_accepted_by_the_api_server() {
    let ns = Namespace::create("examples");
    let examples = crate::support::root().join("examples");
    let path = examples.to_str().unwrap();
    let (ok, out) = kubectl(
        &["apply", "--dry-run=server", "-n", &ns.0, "-f", path],
        None,
    );
    assert!(ok, "an example was refused: {out}");
    assert!(out.contains("example-etcd-cluster"), "{out}");
}

/// `kubectl apply` of a one-member cluster named `name`, for real or as a server dry run.
fn apply_named(ns: &str, name: &str, dry_run: bool) -> (bool, String) {
    let yaml = cluster_yaml(ns, name, 1, "3.5.35", false);
    let mut args = vec!["apply", "-f", "-"];
    if dry_run {
        args.push("--dry-run=server");
    }
    kubectl(&args, Some(&yaml))
}

#[test]
fn names_that_cannot_name_services_pods_and_hostnames_are_refused_with_the_limit_named() {
    let ns = Namespace::create("names-refused");
    let limit = max_name_len();
    assert_eq!(limit, 56);
    for name in ["a".repeat(60), "my.etcd".to_string()] {
        let (ok, out) = apply_named(&ns.0, &name, false);
        assert!(!ok, "accepted {name}: {out}");
        assert!(
            out.contains(&format!("metadata.name must be at most {limit} characters")),
            "{name}: the message does not name the limit: {out}"
        );
    }
    let (ok, out) = apply_named(&ns.0, &"a".repeat(limit), true);
    assert!(
        ok,
        "a name of exactly {limit} characters was refused: {out}"
    );
}

#[test]
fn the_api_server_refuses_exactly_the_names_the_operator_refuses() {
    let ns = Namespace::create("names-agree");
    let limit = max_name_len();
    let names = [
        "a".repeat(limit),
        "a".repeat(limit + 1),
        "a".repeat(63),
        "x".to_string(),
        "a--b".to_string(),
        "etcd-7".to_string(),
        "my.etcd".to_string(),
        "7etcd".to_string(),
        "etcd.".to_string(),
    ];
    for name in names {
        let (accepted, out) = apply_named(&ns.0, &name, true);
        let operator = name_problem(&ns.0, &name);
        assert_eq!(
            accepted,
            operator.is_none(),
            "{name}: the API server says {out}; the operator says {operator:?}"
        );
    }
}

#[test]
fn etcd_variables_and_label_keys_the_operator_owns_are_refused_at_kubectl_apply() {
    let ns = Namespace::create("reserved");
    let env = |name: &str| {
        format!("  size: 1\n  pod:\n    etcdEnv:\n    - name: {name}\n      value: \"x\"\n")
    };
    for name in [
        "ETCD_INITIAL_CLUSTER_STATE",
        "ETCD_INITIAL_CLUSTER_TOKEN",
        "ETCD_DATA_DIR",
        "ETCD_FORCE_NEW_CLUSTER",
        "ETCD_WAL_DIR",
        "ETCD_UNSAFE_NO_FSYNC",
        "ETCD_LISTEN_CLIENT_HTTP_URLS",
        "ETCD_PEER_CERT_FILE",
        "ETCD_NAME",
    ] {
        let (ok, out) = apply_spec(&ns.0, &env(name));
        assert!(!ok, "accepted {name}: {out}");
        assert!(
            out.contains("spec.pod.etcdEnv") && out.contains("ETCD_FORCE_NEW_CLUSTER"),
            "{name}: the message does not name the field and the list: {out}"
        );
    }
    for (field, key) in [
        ("labels", "etcd.database.coreos.com/voter"),
        ("annotations", "etcd.database.coreos.com/force-new-cluster"),
    ] {
        let spec = format!("  size: 1\n  pod:\n    {field}:\n      {key}: \"true\"\n");
        let (ok, out) = apply_spec(&ns.0, &spec);
        assert!(!ok, "accepted {field} {key}: {out}");
        assert!(out.contains("etcd.database.coreos.com/*"), "{out}");
    }
    // What users do set stays accepted.
    let fine = "  size: 1\n  pod:\n    labels:\n      team: a\n    etcdEnv:\n    \
                - name: ETCD_QUOTA_BACKEND_BYTES\n      value: \"4294967296\"\n";
    let yaml = format!(
        "apiVersion: etcd.database.coreos.com/v1beta2\nkind: EtcdCluster\nmetadata:\n  \
         name: fine\n  namespace: {}\nspec:\n{fine}",
        ns.0
    );
    let (ok, out) = kubectl(&["apply", "--dry-run=server", "-f", "-"], Some(&yaml));
    assert!(ok, "a plain variable was refused: {out}");
}
