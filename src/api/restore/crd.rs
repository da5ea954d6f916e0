//! The EtcdRestore CRD generated from the Rust types, with the rules (CEL) the types
//! cannot say.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, ValidationRule,
};
use kube::CustomResourceExt;

use crate::api::crd::{refusal, spec_schemas};

use super::EtcdRestore;

/// The CRD of `EtcdRestore`: the schema of the types plus rules refusing a storage type
/// without its store, a `clusterSpec` with a `restore` of its own, and a `clusterSpec`
/// version that is not a release.
pub fn restore_crd() -> CustomResourceDefinition {
    let mut crd = EtcdRestore::crd();
    for spec in spec_schemas(&mut crd) {
        spec.x_kubernetes_validations = Some(spec_rules());
        // The cluster it creates is held to the EtcdCluster's pod rules: refused here,
        // not later when the operator creates it.
        if let Some(pod) = spec
            .properties
            .as_mut()
            .and_then(|p| p.get_mut("clusterSpec"))
            .and_then(|c| c.properties.as_mut())
            .and_then(|p| p.get_mut("pod"))
        {
            crate::api::crd::add_pod_policy_rules(pod);
        }
    }
    crd
}

fn spec_rules() -> Vec<ValidationRule> {
    vec![
        refusal(
            "self.backupStorageType == 'S3' && has(self.s3)",
            "backupStorageType S3 needs s3",
        ),
        refusal(
            "!has(self.clusterSpec) || !has(self.clusterSpec.restore)",
            "clusterSpec.restore is the operator's: the restore writes it from the snapshot",
        ),
        refusal(
            &format!(
                "!has(self.clusterSpec) || !has(self.clusterSpec.version) || \
                 self.clusterSpec.version.matches(r'{}')",
                crate::api::crd::VERSION_PATTERN
            ),
            "clusterSpec.version must be a release version like 3.5.35",
        ),
    ]
}
