//! Whether a volume's node affinity lets a node use it: `required.nodeSelectorTerms`
//! (terms ORed, the expressions and fields of a term ANDed), as the scheduler checks it.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    NodeSelectorRequirement, NodeSelectorTerm, PersistentVolume, VolumeNodeAffinity,
};

/// Whether the node `name` with `labels` may use a volume with `affinity` (none: any node).
pub fn allows(
    affinity: Option<&VolumeNodeAffinity>,
    name: &str,
    labels: &BTreeMap<String, String>,
) -> bool {
    let Some(required) = affinity.and_then(|a| a.required.as_ref()) else {
        return true;
    };
    required
        .node_selector_terms
        .iter()
        .any(|term| term_matches(term, name, labels))
}

/// Whether a volume may be used on the node `name` with `labels`.
pub fn volume_allows(pv: &PersistentVolume, name: &str, labels: &BTreeMap<String, String>) -> bool {
    allows(
        pv.spec.as_ref().and_then(|s| s.node_affinity.as_ref()),
        name,
        labels,
    )
}

/// A term with no requirement matches no node, as in Kubernetes.
fn term_matches(term: &NodeSelectorTerm, name: &str, labels: &BTreeMap<String, String>) -> bool {
    let expressions = term.match_expressions.as_deref().unwrap_or_default();
    let fields = term.match_fields.as_deref().unwrap_or_default();
    if expressions.is_empty() && fields.is_empty() {
        return false;
    }
    let node_fields: BTreeMap<String, String> =
        [("metadata.name".to_string(), name.to_string())].into();
    expressions.iter().all(|r| requirement_matches(r, labels))
        && fields.iter().all(|r| requirement_matches(r, &node_fields))
}

fn requirement_matches(r: &NodeSelectorRequirement, labels: &BTreeMap<String, String>) -> bool {
    let value = labels.get(&r.key);
    let values = r.values.as_deref().unwrap_or_default();
    let number = |v: &str| v.parse::<i64>().ok();
    match r.operator.as_str() {
        "In" => value.is_some_and(|v| values.contains(v)),
        "NotIn" => value.is_none_or(|v| !values.contains(v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" | "Lt" => {
            let (Some(have), [bound]) = (value.and_then(|v| number(v)), values) else {
                return false;
            };
            let Some(bound) = number(bound) else {
                return false;
            };
            if r.operator == "Gt" {
                have > bound
            } else {
                have < bound
            }
        }
        _ => false,
    }
}

/// The node a volume is pinned to: the one value of a `kubernetes.io/hostname In [...]`
/// requirement, as this node's provisioner writes it.
pub fn pinned_node(pv: &PersistentVolume) -> Option<&str> {
    let required = pv
        .spec
        .as_ref()?
        .node_affinity
        .as_ref()?
        .required
        .as_ref()?;
    let [term] = required.node_selector_terms.as_slice() else {
        return None;
    };
    let [r] = term.match_expressions.as_deref()? else {
        return None;
    };
    match (r.key.as_str(), r.operator.as_str(), r.values.as_deref()) {
        (super::HOSTNAME_LABEL, "In", Some([node])) => Some(node.as_str()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::NodeSelector;

    fn labels() -> BTreeMap<String, String> {
        [
            ("kubernetes.io/hostname".to_string(), "n1".to_string()),
            ("zone".to_string(), "a".to_string()),
            ("cores".to_string(), "8".to_string()),
        ]
        .into()
    }

    fn req(key: &str, op: &str, values: &[&str]) -> NodeSelectorRequirement {
        NodeSelectorRequirement {
            key: key.into(),
            operator: op.into(),
            values: Some(values.iter().map(|v| v.to_string()).collect()),
        }
    }

    fn affinity(terms: Vec<Vec<NodeSelectorRequirement>>) -> VolumeNodeAffinity {
        VolumeNodeAffinity {
            required: Some(NodeSelector {
                node_selector_terms: terms
                    .into_iter()
                    .map(|e| NodeSelectorTerm {
                        match_expressions: Some(e),
                        match_fields: None,
                    })
                    .collect(),
            }),
        }
    }

    #[test]
    fn no_affinity_allows_every_node() {
        assert!(allows(None, "n1", &labels()));
        assert!(allows(
            Some(&VolumeNodeAffinity::default()),
            "n1",
            &labels()
        ));
    }

    #[test]
    fn hostname_in_allows_only_that_node() {
        let a = affinity(vec![vec![req("kubernetes.io/hostname", "In", &["n1"])]]);
        assert!(allows(Some(&a), "n1", &labels()));
        let a = affinity(vec![vec![req("kubernetes.io/hostname", "In", &["n2"])]]);
        assert!(!allows(Some(&a), "n1", &labels()));
    }

    #[test]
    fn terms_are_ored_and_expressions_anded() {
        let a = affinity(vec![
            vec![req("zone", "In", &["b"])],
            vec![req("zone", "In", &["a"]), req("cores", "Gt", &["4"])],
        ]);
        assert!(allows(Some(&a), "n1", &labels()));
        let a = affinity(vec![vec![
            req("zone", "In", &["a"]),
            req("cores", "Lt", &["4"]),
        ]]);
        assert!(!allows(Some(&a), "n1", &labels()));
    }

    #[test]
    fn not_in_exists_and_does_not_exist() {
        let ok = |r| allows(Some(&affinity(vec![vec![r]])), "n1", &labels());
        assert!(ok(req("zone", "NotIn", &["b"])));
        assert!(!ok(req("zone", "NotIn", &["a"])));
        assert!(ok(req("gpu", "NotIn", &["x"])));
        assert!(ok(req("zone", "Exists", &[])));
        assert!(!ok(req("gpu", "Exists", &[])));
        assert!(ok(req("gpu", "DoesNotExist", &[])));
        assert!(!ok(req("zone", "Bogus", &["a"])));
    }

    #[test]
    fn an_empty_term_matches_no_node_and_fields_match_the_name() {
        let empty = VolumeNodeAffinity {
            required: Some(NodeSelector {
                node_selector_terms: vec![NodeSelectorTerm::default()],
            }),
        };
        assert!(!allows(Some(&empty), "n1", &labels()));
        let by_name = VolumeNodeAffinity {
            required: Some(NodeSelector {
                node_selector_terms: vec![NodeSelectorTerm {
                    match_expressions: None,
                    match_fields: Some(vec![req("metadata.name", "In", &["n1"])]),
                }],
            }),
        };
        assert!(allows(Some(&by_name), "n1", &labels()));
        assert!(!allows(Some(&by_name), "n2", &labels()));
    }

    #[test]
    fn the_pinned_node_is_read_from_a_single_hostname_requirement() {
        let mut pv = PersistentVolume::default();
        assert_eq!(pinned_node(&pv), None);
        pv.spec = Some(k8s_openapi::api::core::v1::PersistentVolumeSpec {
            node_affinity: Some(affinity(vec![vec![req(
                "kubernetes.io/hostname",
                "In",
                &["n1"],
            )]])),
            ..Default::default()
        });
        assert_eq!(pinned_node(&pv), Some("n1"));
    }
}
