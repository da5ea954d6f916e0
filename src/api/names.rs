//! The names a cluster's `metadata.name` gives its objects, and the rules Kubernetes holds
//! them to. One function, [`derived_names`], lists them; the operator's check
//! ([`name_problem`]) and the CRD's CEL rule ([`max_name_len`], [`NAME_PATTERN`],
//! [`name_rule_message`]) are both derived from it.

use etcd_operator_core::topology::Topology;

/// Length of the random suffix of a member name (`<name>-xxxxx`, see
/// `Topology::new_member_name`).
pub(crate) const MEMBER_SUFFIX_LEN: usize = 5;

/// Longest DNS label (RFC 1035 / RFC 1123).
const MAX_LABEL: usize = 63;

/// Longest DNS name (and DNS-1123 subdomain).
const MAX_DNS_NAME: usize = 253;

/// Longest namespace name: a namespace is a DNS-1123 label.
const MAX_NAMESPACE: usize = MAX_LABEL;

/// The characters a cluster name may use, as the CRD's CEL rule checks them: a DNS-1035
/// label, because the headless Service is named exactly like the cluster.
pub(crate) const NAME_PATTERN: &str = "^[a-z]([-a-z0-9]*[a-z0-9])?$";

/// What Kubernetes requires of one derived name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NameRule {
    /// A Service name: at most 63 characters of `a-z`, `0-9` and `-`, starting with a
    /// letter and ending with a letter or digit.
    Dns1035Label,
    /// A hostname or a pod's subdomain: at most 63 characters of `a-z`, `0-9` and `-`,
    /// starting and ending with a letter or digit.
    Dns1123Label,
    /// A pod or PVC name: at most 253 characters of dot-separated parts made like
    /// DNS-1123 labels (Kubernetes bounds only the whole).
    Dns1123Subdomain,
    /// A label value: at most 63 characters of letters, digits, `-`, `_` and `.`,
    /// starting and ending with a letter or digit.
    LabelValue,
    /// A DNS name: at most 253 characters, every dot-separated part a DNS-1123 label.
    DnsName,
}

impl NameRule {
    /// The rule for people.
    pub fn describe(self) -> &'static str {
        match self {
            NameRule::Dns1035Label => {
                "a DNS-1035 label: at most 63 characters of lowercase letters, digits and \
                 '-', starting with a letter and ending with a letter or digit"
            }
            NameRule::Dns1123Label => {
                "a DNS-1123 label: at most 63 characters of lowercase letters, digits and \
                 '-', starting and ending with a letter or digit"
            }
            NameRule::Dns1123Subdomain => {
                "a DNS-1123 subdomain: at most 253 characters of lowercase letters, digits, '-' \
                 and '.', each dot-separated part starting and ending with a letter or digit"
            }
            NameRule::LabelValue => {
                "a label value: at most 63 characters of letters, digits, '-', '_' and '.', \
                 starting and ending with a letter or digit"
            }
            NameRule::DnsName => {
                "a DNS name: at most 253 characters, every dot-separated part a DNS-1123 label"
            }
        }
    }

    /// Whether `value` follows the rule.
    pub fn allows(self, value: &str) -> bool {
        match self {
            NameRule::Dns1035Label => {
                dns1123_label(value) && value.starts_with(|c: char| c.is_ascii_lowercase())
            }
            NameRule::Dns1123Label => dns1123_label(value),
            // Kubernetes bounds the whole subdomain, not each of its parts.
            NameRule::Dns1123Subdomain => {
                value.len() <= MAX_DNS_NAME && value.split('.').all(dns1123_chars)
            }
            NameRule::DnsName => value.len() <= MAX_DNS_NAME && value.split('.').all(dns1123_label),
            NameRule::LabelValue => label_value(value),
        }
    }
}

fn dns1123_label(value: &str) -> bool {
    value.len() <= MAX_LABEL && dns1123_chars(value)
}

fn dns1123_chars(value: &str) -> bool {
    let edge = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    !value.is_empty()
        && value.chars().all(|c| edge(c) || c == '-')
        && value.starts_with(edge)
        && value.ends_with(edge)
}

fn label_value(value: &str) -> bool {
    let edge = |c: char| c.is_ascii_alphanumeric();
    value.is_empty()
        || (value.len() <= MAX_LABEL
            && value
                .chars()
                .all(|c| edge(c) || matches!(c, '-' | '_' | '.'))
            && value.starts_with(edge)
            && value.ends_with(edge))
}

/// One name made from the cluster's name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DerivedName {
    /// What it names, for people.
    pub what: &'static str,
    /// The name.
    pub value: String,
    /// What Kubernetes requires of it.
    pub rule: NameRule,
}

/// Every name the operator makes from cluster `name` in `namespace`, with the rule each
/// must follow. Member names are shown with a placeholder suffix of the real length.
pub(crate) fn derived_names(namespace: &str, name: &str) -> Vec<DerivedName> {
    let topology = Topology::new(namespace, name);
    let member = format!("{name}-{}", "x".repeat(MEMBER_SUFFIX_LEN));
    let derived = |what, value: String, rule| DerivedName { what, value, rule };
    vec![
        derived(
            "the headless Service",
            name.to_string(),
            NameRule::Dns1035Label,
        ),
        derived(
            "the client Service",
            topology.client_service(),
            NameRule::Dns1035Label,
        ),
        derived("a member pod", member.clone(), NameRule::Dns1123Subdomain),
        derived(
            "a member's hostname",
            member.clone(),
            NameRule::Dns1123Label,
        ),
        derived(
            "the pods' subdomain",
            name.to_string(),
            NameRule::Dns1123Label,
        ),
        derived(
            "a member's PVC",
            pvc_name(&member),
            NameRule::Dns1123Subdomain,
        ),
        derived(
            "the etcd_cluster label",
            name.to_string(),
            NameRule::LabelValue,
        ),
        derived(
            "a member's DNS name",
            topology.member_host(&member),
            NameRule::DnsName,
        ),
    ]
}

/// Why cluster `name` in `namespace` cannot name its objects, or `None` when every
/// derived name is valid. The message names the first invalid name and the limit.
pub fn name_problem(namespace: &str, name: &str) -> Option<String> {
    let bad = first_invalid(namespace, name)?;
    Some(format!(
        "metadata.name {name:?} cannot be used: {} would be {:?} ({} characters), which is \
         not {}. {}",
        bad.what,
        bad.value,
        bad.value.len(),
        bad.rule.describe(),
        name_rule_message()
    ))
}

fn first_invalid(namespace: &str, name: &str) -> Option<DerivedName> {
    derived_names(namespace, name)
        .into_iter()
        .find(|d| !d.rule.allows(&d.value))
}

/// The longest cluster name whose derived names are all valid in any namespace.
pub fn max_name_len() -> usize {
    let namespace = "n".repeat(MAX_NAMESPACE);
    (1..=MAX_DNS_NAME)
        .take_while(|&n| first_invalid(&namespace, &"a".repeat(n)).is_none())
        .last()
        .unwrap_or(0)
}

/// The rule on cluster names, for people: the message of the CRD's CEL rule and the end
/// of the operator's `InvalidName` message.
pub(crate) fn name_rule_message() -> String {
    format!(
        "metadata.name must be at most {} characters of lowercase letters, digits and '-', \
         starting with a letter and ending with a letter or digit (no dots): the cluster's \
         Services <name> and <name>-client, its member pods <name>-{} and their DNS names \
         <member>.<name>.<namespace>.svc are made from it",
        max_name_len(),
        "x".repeat(MEMBER_SUFFIX_LEN)
    )
}

/// The CEL rule on `self.metadata.name` that refuses, at `kubectl apply`, every name
/// [`name_problem`] refuses.
pub(crate) fn name_cel_rule() -> String {
    format!(
        "self.metadata.name.size() <= {} && self.metadata.name.matches('{NAME_PATTERN}')",
        max_name_len()
    )
}

/// Suffix of a member's PersistentVolumeClaim name.
const PVC_SUFFIX: &str = "-data";

/// Name of the PersistentVolumeClaim of a member when the pod policy asks for one.
pub(crate) fn pvc_name(member: &str) -> String {
    format!("{member}{PVC_SUFFIX}")
}

/// The member a PersistentVolumeClaim named by [`pvc_name`] belongs to.
pub(crate) fn member_of_claim(claim: &str) -> Option<&str> {
    claim.strip_suffix(PVC_SUFFIX).filter(|m| !m.is_empty())
}
