//! Invalid specs are refused by `kubectl apply` with a clear message.

use crate::support::{Namespace, kubectl};

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
