//! The CRD schema and the CoreOS-compatible shape of the API.

use super::*;

fn spec_schema() -> serde_json::Value {
    let crd = crd();
    let schema = crd.spec.versions[0].schema.clone().unwrap();
    serde_json::to_value(schema.open_api_v3_schema.unwrap()).unwrap()["properties"]["spec"].clone()
}

#[test]
fn crd_is_the_coreos_group_version_kind_with_short_name_and_status() {
    let crd = crd();
    assert_eq!(
        crd.metadata.name.as_deref(),
        Some("etcdclusters.etcd.database.coreos.com")
    );
    assert_eq!(crd.spec.scope, "Namespaced");
    assert_eq!(crd.spec.names.short_names, Some(vec!["etcd".to_string()]));
    let v = &crd.spec.versions[0];
    assert_eq!(v.name, "v1beta2");
    assert!(v.subresources.as_ref().unwrap().status.is_some());
    let columns: Vec<_> = v
        .additional_printer_columns
        .as_ref()
        .unwrap()
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(columns, ["Phase", "Size", "Ready", "Version", "Age"]);
}

#[test]
fn schema_bounds_size_between_one_and_seven() {
    let size = &spec_schema()["properties"]["size"];
    assert_eq!(size["minimum"], 1.0);
    assert_eq!(size["maximum"], 7.0);
    assert!(
        spec_schema()["required"]
            .as_array()
            .unwrap()
            .contains(&"size".into())
    );
}

#[test]
fn schema_checks_the_version_with_a_clear_message() {
    let rules = &spec_schema()["x-kubernetes-validations"];
    let rule = rules[0]["rule"].as_str().unwrap();
    assert!(rule.contains("self.version.matches"), "{rule}");
    assert!(rules[0]["message"].as_str().unwrap().contains("3.5.35"));
}

#[test]
fn coreos_field_names_are_kept() {
    let props = spec_schema()["properties"].clone();
    for field in ["size", "version", "repository", "paused", "pod", "TLS"] {
        assert!(props.get(field).is_some(), "missing spec.{field}");
    }
    let pod = &props["pod"]["properties"];
    for field in [
        "labels",
        "annotations",
        "nodeSelector",
        "affinity",
        "tolerations",
        "resources",
        "etcdEnv",
        "securityContext",
        "persistentVolumeClaimSpec",
    ] {
        assert!(pod.get(field).is_some(), "missing spec.pod.{field}");
    }
}

#[test]
fn the_seed_documents_example_is_accepted_as_is() {
    let yaml = include_str!("../../examples/example-etcd-cluster.yaml");
    let cluster: EtcdCluster = serde_yaml_ng::from_str(yaml).unwrap();
    assert_eq!(
        cluster.metadata.name.as_deref(),
        Some("example-etcd-cluster")
    );
    assert_eq!(cluster.spec.size, 3);
    assert_eq!(cluster.spec.version.as_deref(), Some("3.2.13"));
    let desired = desired_cluster(&cluster);
    assert_eq!((desired.size, desired.version.as_str()), (3, "3.2.13"));
}

#[test]
fn tls_settings_are_read_and_flagged_for_the_lifecycle() {
    let yaml = r#"
apiVersion: etcd.database.coreos.com/v1beta2
kind: EtcdCluster
metadata: {name: secure}
spec:
  size: 3
  TLS:
    static:
      member: {peerSecret: p, serverSecret: s}
      operatorSecret: o
"#;
    let cluster: EtcdCluster = serde_yaml_ng::from_str(yaml).unwrap();
    assert!(desired_cluster(&cluster).tls_requested);
}

#[test]
fn committed_crd_yaml_matches_the_code() {
    let committed = include_str!("../../manifests/10-crd.yaml");
    assert!(
        committed == crd_yaml(),
        "manifests/10-crd.yaml drifted from the Rust types: run \
         `cargo run -- crd > manifests/10-crd.yaml` and commit the result"
    );
}
