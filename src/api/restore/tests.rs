//! The EtcdRestore CRD, its CoreOS-compatible shape, and `EtcdCluster.spec.restore`.

use super::*;
use crate::api::{CrdSelection, crd_yaml};

fn spec_schema() -> serde_json::Value {
    crate::api::crd_probe::spec_schema(&restore_crd())
}

/// A restore in the layout of the CoreOS operator's example manifest.
const COREOS_RESTORE: &str = r#"
apiVersion: "etcd.database.coreos.com/v1beta2"
kind: "EtcdRestore"
metadata:
  name: example-etcd-cluster
spec:
  etcdCluster:
    name: example-etcd-cluster
  backupStorageType: S3
  s3:
    path: mybucket/etcd.backup
    awsSecret: aws
    endpoint: http://10.255.0.1:7480
    forcePathStyle: true
"#;

#[test]
fn the_coreos_restore_manifest_deserializes_with_every_field() {
    let restore: EtcdRestore = serde_yaml_ng::from_str(COREOS_RESTORE).unwrap();
    assert_eq!(restore.spec.etcd_cluster.name, "example-etcd-cluster");
    assert_eq!(restore.spec.backup_storage_type, RestoreStorageType::S3);
    let s3 = restore.spec.s3.unwrap();
    assert_eq!(s3.path, "mybucket/etcd.backup");
    assert_eq!(s3.aws_secret, "aws");
    assert!(s3.force_path_style);
    assert_eq!(restore.spec.cluster_spec, None);
}

#[test]
fn crd_is_the_coreos_group_version_kind_with_status_and_columns() {
    let crd = restore_crd();
    assert_eq!(crd.spec.group, "etcd.database.coreos.com");
    assert_eq!(crd.spec.names.kind, "EtcdRestore");
    assert_eq!(crd.spec.names.plural, "etcdrestores");
    assert_eq!(
        crate::api::crd_probe::v1beta2_columns(&crd),
        [
            "Succeeded",
            "Cluster",
            "Revision",
            "Reason",
            "Snapshot",
            "Cluster ID",
            "Age"
        ]
    );
}

#[test]
fn schema_accepts_s3_only_and_requires_the_cluster_and_its_name_rule() {
    let schema = spec_schema();
    assert_eq!(
        schema["properties"]["backupStorageType"]["enum"],
        serde_json::json!(["S3"])
    );
    let required = schema["required"].as_array().unwrap();
    assert!(required.contains(&"etcdCluster".into()), "{required:?}");
    let name = &schema["properties"]["etcdCluster"]["properties"]["name"];
    assert_eq!(name["maxLength"], 56);
    assert!(name["pattern"].as_str().unwrap().starts_with("^[a-z]"));
    // The new cluster's spec is the EtcdCluster's own schema (size bounds included).
    let size = &schema["properties"]["clusterSpec"]["properties"]["size"];
    assert_eq!(
        (size["minimum"].as_f64(), size["maximum"].as_f64()),
        (Some(1.0), Some(7.0))
    );
}

#[test]
fn schema_rules_need_the_store_and_keep_restore_the_operators() {
    let rules = crate::api::crd_probe::rules(&spec_schema());
    assert!(rules[0].contains("has(self.s3)"));
    assert!(rules[1].contains("!has(self.clusterSpec.restore)"));
    assert!(rules[2].contains("self.clusterSpec.version.matches"));
}

#[test]
fn an_etcd_clusters_restore_cannot_change_once_set() {
    let spec = crate::api::crd_probe::spec_schema(&crate::api::crd());
    let restore = &spec["properties"]["restore"];
    assert_eq!(
        restore["x-kubernetes-validations"][0]["rule"],
        "self == oldSelf"
    );
    assert_eq!(restore["properties"]["sha256"]["pattern"], "^[0-9a-f]{64}$");
}

#[test]
fn the_charts_restore_crd_matches_the_code() {
    let chart = include_str!(
        "../../../charts/etcd-operator/crds/etcdrestores.etcd.database.coreos.com.yaml"
    );
    assert!(
        chart == crd_yaml(CrdSelection::Etcdrestores),
        "charts/etcd-operator/crds/ drifted from the Rust types: run `make manifests` \
         (or `make crd` for the CRDs alone) and commit the result"
    );
}
