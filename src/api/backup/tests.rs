//! The EtcdBackup CRD and its CoreOS-compatible shape.

use super::*;
use crate::api::{CrdSelection, crd_yaml};

fn spec_schema() -> serde_json::Value {
    crate::api::crd_probe::spec_schema(&backup_crd())
}

/// A one-shot backup in the layout of the CoreOS operator's example manifest.
const COREOS_ONE_SHOT: &str = r#"
apiVersion: "etcd.database.coreos.com/v1beta2"
kind: "EtcdBackup"
metadata:
  name: example-etcd-cluster-backup
spec:
  etcdEndpoints: ["http://example-etcd-cluster-client:2379"]
  storageType: S3
  s3:
    path: mybucket/etcd.backup
    awsSecret: aws
"#;

/// A periodic backup in the layout of the CoreOS operator's example manifest, with every
/// field that operator's v1beta2 types had.
const COREOS_PERIODIC: &str = r#"
apiVersion: "etcd.database.coreos.com/v1beta2"
kind: "EtcdBackup"
metadata:
  name: example-etcd-cluster-periodic-backup
spec:
  etcdEndpoints: ["http://example-etcd-cluster-client:2379"]
  storageType: S3
  backupPolicy:
    backupIntervalInSecond: 125
    maxBackups: 4
    timeoutInSecond: 60
  s3:
    path: mybucket/etcd.backup
    awsSecret: aws
    endpoint: http://10.255.0.1:7480
    forcePathStyle: true
  clientTLSSecret: etcd-client-tls
  insecureSkipVerify: false
"#;

#[test]
fn coreos_backup_manifests_deserialize_with_every_field() {
    let one: EtcdBackup = serde_yaml_ng::from_str(COREOS_ONE_SHOT).unwrap();
    assert_eq!(one.spec.storage_type, BackupStorageType::S3);
    assert_eq!(one.spec.policy(), BackupPolicy::default());
    let periodic: EtcdBackup = serde_yaml_ng::from_str(COREOS_PERIODIC).unwrap();
    let policy = periodic.spec.policy();
    assert_eq!(policy.backup_interval_in_second, Some(125));
    assert_eq!(policy.max_backups, Some(4));
    assert_eq!(policy.timeout_in_second, Some(60));
    let s3 = periodic.spec.s3.unwrap();
    assert_eq!(s3.endpoint.as_deref(), Some("http://10.255.0.1:7480"));
    assert!(s3.force_path_style);
    assert_eq!(
        periodic.spec.client_tls_secret.as_deref(),
        Some("etcd-client-tls")
    );
}

#[test]
fn status_uses_the_coreos_names() {
    let status = EtcdBackupStatus {
        reason: "StoreUnreachable".into(),
        ..EtcdBackupStatus::default()
    };
    let json = serde_json::to_value(status).unwrap();
    for field in [
        "succeeded",
        "Reason",
        "etcdVersion",
        "etcdRevision",
        "lastSuccessDate",
    ] {
        assert!(json.get(field).is_some(), "missing status.{field}: {json}");
    }
}

#[test]
fn crd_is_the_coreos_group_version_kind_with_status_and_columns() {
    let crd = backup_crd();
    assert_eq!(
        crd.metadata.name.as_deref(),
        Some("etcdbackups.etcd.database.coreos.com")
    );
    assert_eq!(
        crate::api::crd_probe::v1beta2_columns(&crd),
        [
            "Succeeded",
            "Revision",
            "Last Success",
            "Next",
            "Reason",
            "Path",
            "Age"
        ]
    );
}

#[test]
fn schema_refuses_unknown_storage_types_and_negative_policy_values() {
    let schema = spec_schema();
    let types = &schema["properties"]["storageType"]["enum"];
    assert_eq!(types, &serde_json::json!(["S3", "GCS", "ABS"]));
    let policy = &schema["properties"]["backupPolicy"]["properties"];
    for field in ["backupIntervalInSecond", "maxBackups", "timeoutInSecond"] {
        assert_eq!(policy[field]["minimum"], 0.0, "{field}");
    }
    let path = schema["properties"]["s3"]["properties"]["path"]["pattern"]
        .as_str()
        .unwrap();
    assert!(path.starts_with("^[a-z0-9]"), "{path}");
}

#[test]
fn schema_rules_name_one_cluster_one_store_and_one_schedule() {
    let rules = crate::api::crd_probe::rules(&spec_schema());
    assert!(rules[0].contains("has(self.clusterName) != has(self.etcdEndpoints)"));
    assert!(rules[1].contains("has(self.s3)"));
    assert!(rules[2].contains("backupIntervalInSecond == 0"));
}

#[test]
fn the_charts_backup_crd_matches_the_code() {
    let chart = include_str!(
        "../../../charts/etcd-operator/crds/etcdbackups.etcd.database.coreos.com.yaml"
    );
    assert!(
        chart == crd_yaml(CrdSelection::Etcdbackups),
        "charts/etcd-operator/crds/ drifted from the Rust types: run `make manifests` \
         (or `make crd` for the CRDs alone) and commit the result"
    );
}
