//! The EtcdBackup CRD generated from the Rust types, with the cross-field rules (CEL) the
//! types cannot say.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, ValidationRule,
};
use kube::CustomResourceExt;

use crate::api::crd::{refusal, spec_schemas};

use super::EtcdBackup;

/// The CRD of `EtcdBackup`: the schema of the types (patterns, enums, minimums) plus rules
/// refusing a spec that names no cluster or two, a storage type without its store, and a
/// schedule given twice.
pub fn backup_crd() -> CustomResourceDefinition {
    let mut crd = EtcdBackup::crd();
    for spec in spec_schemas(&mut crd) {
        spec.x_kubernetes_validations = Some(spec_rules());
    }
    crd
}

fn spec_rules() -> Vec<ValidationRule> {
    vec![
        refusal(
            "has(self.clusterName) != has(self.etcdEndpoints)",
            "set exactly one of clusterName (an EtcdCluster in this namespace) \
             and etcdEndpoints (client URLs)",
        ),
        refusal(
            "(self.storageType == 'S3' && has(self.s3)) || \
             (self.storageType == 'GCS' && has(self.gcs)) || \
             (self.storageType == 'ABS' && has(self.abs))",
            "storageType S3 needs s3, GCS needs gcs, ABS needs abs",
        ),
        refusal(
            "!has(self.schedule) || !has(self.backupPolicy) || \
             !has(self.backupPolicy.backupIntervalInSecond) || \
             self.backupPolicy.backupIntervalInSecond == 0",
            "schedule and backupPolicy.backupIntervalInSecond are alternatives: set one",
        ),
    ]
}
