//! The EtcdBackup CRD generated from the Rust types, with the cross-field rules (CEL) the
//! types cannot say.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, ValidationRule,
};
use kube::CustomResourceExt;
use serde_json::json;

use super::EtcdBackup;

/// The CRD of `EtcdBackup`: the schema of the types (patterns, enums, minimums) plus rules
/// refusing a spec that names no cluster or two, a storage type without its store, and a
/// schedule given twice.
pub fn backup_crd() -> CustomResourceDefinition {
    let mut crd = EtcdBackup::crd();
    for version in &mut crd.spec.versions {
        let Some(spec) = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
            .and_then(|s| s.properties.as_mut())
            .and_then(|p| p.get_mut("spec"))
        else {
            continue;
        };
        spec.x_kubernetes_validations = Some(spec_rules());
    }
    crd
}

fn rule(rule: &str, message: &str) -> ValidationRule {
    serde_json::from_value(json!({
        "rule": rule,
        "message": message,
        "reason": "FieldValueInvalid",
    }))
    .expect("a well-formed validation rule")
}

fn spec_rules() -> Vec<ValidationRule> {
    vec![
        rule(
            "has(self.clusterName) != has(self.etcdEndpoints)",
            "set exactly one of clusterName (an EtcdCluster in this namespace) \
             and etcdEndpoints (client URLs)",
        ),
        rule(
            "(self.storageType == 'S3' && has(self.s3)) || \
             (self.storageType == 'GCS' && has(self.gcs)) || \
             (self.storageType == 'ABS' && has(self.abs))",
            "storageType S3 needs s3, GCS needs gcs, ABS needs abs",
        ),
        rule(
            "!has(self.schedule) || !has(self.backupPolicy) || \
             !has(self.backupPolicy.backupIntervalInSecond) || \
             self.backupPolicy.backupIntervalInSecond == 0",
            "schedule and backupPolicy.backupIntervalInSecond are alternatives: set one",
        ),
    ]
}
