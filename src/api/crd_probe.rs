//! What the CRD tests read out of a generated CRD: its schema as JSON, its printer
//! columns and its CEL rules. Test-only.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::Value;

/// The whole OpenAPI schema of the CRD's only version.
pub(crate) fn root_schema(crd: &CustomResourceDefinition) -> Value {
    let schema = crd.spec.versions[0].schema.clone().expect("a schema");
    serde_json::to_value(schema.open_api_v3_schema.expect("an OpenAPI schema")).expect("JSON")
}

/// The schema of `spec`.
pub(crate) fn spec_schema(crd: &CustomResourceDefinition) -> Value {
    root_schema(crd)["properties"]["spec"].clone()
}

/// The printer columns of the CRD's version, after checking that it is the CoreOS
/// version with a status subresource.
pub(crate) fn v1beta2_columns(crd: &CustomResourceDefinition) -> Vec<String> {
    let version = &crd.spec.versions[0];
    assert_eq!(version.name, "v1beta2");
    assert!(
        version
            .subresources
            .as_ref()
            .expect("subresources")
            .status
            .is_some()
    );
    version
        .additional_printer_columns
        .iter()
        .flatten()
        .map(|c| c.name.clone())
        .collect()
}

/// The CEL rules of `schema`, in order.
pub(crate) fn rules(schema: &Value) -> Vec<String> {
    schema["x-kubernetes-validations"]
        .as_array()
        .expect("CEL rules")
        .iter()
        .map(|r| r["rule"].as_str().expect("a rule").to_string())
        .collect()
}
