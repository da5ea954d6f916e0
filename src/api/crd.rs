//! The CRD generated from the Rust types, with the validation rules the types cannot say.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps, JSONSchemaPropsOrArray, ValidationRule,
};
use kube::CustomResourceExt;
use serde_json::json;

use super::EtcdCluster;
use super::maintenance;
use super::names;
use super::pod_security;
use super::reserved;

/// Pattern every `spec.version` must match: `X.Y.Z` with an optional pre-release.
pub(crate) const VERSION_PATTERN: &str = r"^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$";

/// The CRD of `EtcdCluster`, with CEL rules giving `spec.version` a clear message and
/// refusing names from which a Service, pod or DNS name could not be made.
pub fn crd() -> CustomResourceDefinition {
    let mut crd = EtcdCluster::crd();
    for version in &mut crd.spec.versions {
        let Some(schema) = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
        else {
            continue;
        };
        schema.x_kubernetes_validations = Some(vec![name_rule()]);
        if let Some(spec) = schema.properties.as_mut().and_then(|p| p.get_mut("spec")) {
            let exclusive = maintenance::exclusive_rules()
                .into_iter()
                .map(|(cel, message)| forbidden(&cel, &message));
            let rules = std::iter::once(version_rule()).chain(exclusive);
            spec.x_kubernetes_validations = Some(rules.collect());
            if let Some(pod) = spec.properties.as_mut().and_then(|p| p.get_mut("pod")) {
                add_pod_policy_rules(pod);
            }
        }
    }
    crd
}

/// A CEL rule that refuses, with `message`, an object for which `cel` is false: two
/// fields that may not be set together.
fn forbidden(cel: &str, message: &str) -> ValidationRule {
    rule(json!({
        "rule": cel,
        "message": message,
        "reason": "FieldValueForbidden",
    }))
}

fn rule(value: serde_json::Value) -> ValidationRule {
    serde_json::from_value(value).expect("a well-formed validation rule")
}

/// A CEL rule that refuses, with `message`, an object for which `cel` is false.
pub(crate) fn refusal(cel: &str, message: &str) -> ValidationRule {
    rule(json!({
        "rule": cel,
        "message": message,
        "reason": "FieldValueInvalid",
    }))
}

/// The `spec` schema of each version of `crd`: where the rules the types cannot say go.
pub(crate) fn spec_schemas(
    crd: &mut CustomResourceDefinition,
) -> impl Iterator<Item = &mut JSONSchemaProps> {
    crd.spec.versions.iter_mut().filter_map(|version| {
        version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
            .and_then(|s| s.properties.as_mut())
            .and_then(|p| p.get_mut("spec"))
    })
}

fn version_rule() -> ValidationRule {
    rule(json!({
        "rule": format!("!has(self.version) || self.version.matches(r'{VERSION_PATTERN}')"),
        "message": "must be a release version like 3.5.35 \
                    (X.Y.Z, optionally with a pre-release such as 3.6.0-rc.1)",
        "fieldPath": ".version",
        "reason": "FieldValueInvalid",
    }))
}

/// The rule on `metadata.name`, checked when an object is created only: a name never
/// changes, and an object created before the rule existed must keep a writable status
/// (the operator reports it `Blocked` with reason `InvalidName`).
fn name_rule() -> ValidationRule {
    rule(json!({
        "rule": format!("oldSelf.hasValue() || ({})", names::name_cel_rule()),
        "optionalOldSelf": true,
        "message": names::name_rule_message(),
        "reason": "FieldValueInvalid",
    }))
}

/// Most `etcdEnv` entries a spec may hold; bounds the CEL rule's cost (the API server
/// refuses a CRD whose rules' estimated cost is unbounded).
const MAX_ETCD_ENV: i64 = 128;
/// Longest `etcdEnv` name (etcd's longest variable is under 60 characters).
const MAX_ENV_NAME: i64 = 256;

/// The rules of `spec.pod` ([`reserved`], [`pod_security`]): no `etcdEnv` variable the
/// operator owns and no `valueFrom`, no label or annotation key of the operator's, nothing
/// that weakens the restricted Pod Security Standard. The rules name no `oldSelf`, so the API
/// server's validation ratcheting lets an object stored before them keep its unchanged
/// values (and a writable status); the operator blocks such an object with reason
/// `InvalidSpec`.
pub(crate) fn add_pod_policy_rules(pod: &mut JSONSchemaProps) {
    let Some(fields) = pod.properties.as_mut() else {
        return;
    };
    let forbid = |cel: String, message: String| {
        rule(json!({
            "rule": cel,
            "message": message,
            "reason": "FieldValueForbidden",
        }))
    };
    if let Some(env) = fields.get_mut("etcdEnv") {
        env.max_items = Some(MAX_ETCD_ENV);
        if let Some(JSONSchemaPropsOrArray::Schema(item)) = env.items.as_mut()
            && let Some(name) = item.properties.as_mut().and_then(|p| p.get_mut("name"))
        {
            name.max_length = Some(MAX_ENV_NAME);
        }
        env.x_kubernetes_validations = Some(vec![forbid(
            reserved::env_cel_rule(),
            reserved::env_rule_message(),
        )]);
    }
    for field in ["labels", "annotations"] {
        if let Some(map) = fields.get_mut(field) {
            map.x_kubernetes_validations = Some(vec![forbid(
                reserved::keys_cel_rule(),
                reserved::keys_rule_message(field),
            )]);
        }
    }
    if let Some(sysctls) = fields
        .get_mut("securityContext")
        .and_then(|sc| sc.properties.as_mut())
        .and_then(|p| p.get_mut("sysctls"))
    {
        sysctls.max_items = Some(pod_security::MAX_SYSCTLS);
    }
    for rule in pod_security::rules() {
        if let Some(field) = fields.get_mut(rule.field) {
            field
                .x_kubernetes_validations
                .get_or_insert_with(Vec::new)
                .push(forbid(rule.cel, rule.message));
        }
    }
}
