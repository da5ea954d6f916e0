//! `EtcdCluster.spec`: the CoreOS v1beta2 fields, unchanged in name and meaning.

use std::collections::BTreeMap;

use etcd_operator_core::lifecycle::TlsMode;
use k8s_openapi::api::core::v1::{
    Affinity, EnvVar, PersistentVolumeClaimSpec, PodSecurityContext, ResourceRequirements,
    Toleration,
};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::status::EtcdClusterStatus;

/// Image repository used when `spec.repository` is empty (as in the CoreOS operator).
pub(crate) const DEFAULT_REPOSITORY: &str = "quay.io/coreos/etcd";
/// Version used when `spec.version` is empty.
pub(crate) const DEFAULT_VERSION: &str = "3.5.35";

/// The desired state of an etcd cluster.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "etcd.database.coreos.com",
    version = "v1beta2",
    kind = "EtcdCluster",
    plural = "etcdclusters",
    shortname = "etcd",
    namespaced,
    status = "EtcdClusterStatus",
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Size","type":"integer","jsonPath":".spec.size"}"#,
    printcolumn = r#"{"name":"Ready","type":"integer","jsonPath":".status.readyMembers"}"#,
    printcolumn = r#"{"name":"Version","type":"string","jsonPath":".status.currentVersion"}"#,
    printcolumn = r#"{"name":"Quota%","type":"integer","priority":1,"description":"The fullest member's backend, in percent of its quota","jsonPath":".status.quotaUsedPercent"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct EtcdClusterSpec {
    /// Number of voting members, 1 to 7.
    #[schemars(range(min = 1, max = 7))]
    pub size: i32,
    /// Image repository of etcd; the image is `<repository>:v<version>`.
    /// Default `quay.io/coreos/etcd`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repository: Option<String>,
    /// etcd version, `X.Y.Z` with an optional pre-release (`3.6.0-rc.1`). Default 3.5.35.
    /// Upgrades move one minor version at a time; downgrades are refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Stop changing the cluster: the operator only observes and reports.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub paused: bool,
    /// Policy for the member pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<PodPolicy>,
    /// TLS for peer and client traffic (CoreOS's `static` Secrets, or operator-made
    /// certificates with `auto`). It cannot be turned on or off once members exist.
    #[serde(rename = "TLS", default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsPolicy>,
    /// The snapshot the cluster is born from, written by the EtcdRestore that creates it:
    /// its seed restores it before etcd starts. Read only before the cluster's one
    /// bootstrap; it cannot change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-validations" = [{
        "rule": "self == oldSelf",
        "message": "spec.restore cannot change: it is what the cluster was born from",
        "reason": "FieldValueForbidden",
    }]))]
    pub restore: Option<super::restore::ClusterRestore>,
    /// What the operator does when a majority of the voting members is gone with its
    /// data: `Manual` (default: report, and wait for the annotation
    /// `etcd.database.coreos.com/recover`), `FromSurvivor` or `FromBackup`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovery: Option<super::recovery::ClusterRecovery>,
    /// How the operator compacts the cluster's history: `Periodic` (default, keeping 1h)
    /// or `Revision`. Not with `ETCD_AUTO_COMPACTION_*` in `pod.etcdEnv` (then etcd
    /// compacts by itself and the operator does not).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compaction: Option<super::maintenance::CompactionPolicy>,
    /// Each member's backend quota in bytes (etcd's `--quota-backend-bytes`; default
    /// etcd's 2 GiB). Once reached, etcd raises NOSPACE and refuses writes that add data.
    /// A change restarts the members one by one. Not with `ETCD_QUOTA_BACKEND_BYTES` in
    /// `pod.etcdEnv`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub quota_backend_bytes: Option<i64>,
    /// When the operator defragments members: `Auto` (default) when a defragmentation
    /// would free 200 MiB, or a member uses 80% of its quota and would shrink by a tenth;
    /// or `Off`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub defragmentation: Option<super::maintenance::DefragmentationPolicy>,
}

/// How member pods are built.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodPolicy {
    /// Extra labels on member pods (the operator's own labels win on conflict).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<BTreeMap<String, String>>,
    /// Annotations on member pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, String>>,
    /// Node selector of member pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<BTreeMap<String, String>>,
    /// Require members on distinct nodes (required pod anti-affinity on the hostname).
    /// Unset or false: members prefer distinct nodes (preferred anti-affinity). Ignored
    /// when `affinity` is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub anti_affinity: Option<bool>,
    /// Affinity of member pods (takes precedence over `antiAffinity`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,
    /// Tolerations of member pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerations: Option<Vec<Toleration>>,
    /// Resources of the etcd container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// Extra environment of the etcd container (e.g. `ETCD_QUOTA_BACKEND_BYTES`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etcd_env: Option<Vec<EnvVar>>,
    /// Security context of member pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security_context: Option<PodSecurityContext>,
    /// Keep member data on a PersistentVolumeClaim instead of an emptyDir.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persistent_volume_claim_spec: Option<PersistentVolumeClaimSpec>,
    /// Accepted for CoreOS manifests and unused: CoreOS ran an init container in this
    /// image that waited for the member's DNS name; members here start at once (etcd 3.4
    /// and later do not resolve their own name to start, and asking for it before it is
    /// published made the cluster DNS cache the miss for its negative TTL).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub busybox_image: Option<String>,
    /// DNS domain of the cluster, in the full names the TLS certificates cover
    /// (`*.<cluster>.<ns>.svc.<domain>`; default `cluster.local`). Member URLs use the short
    /// names (`<member>.<cluster>.<ns>.svc`) either way.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_domain: Option<String>,
    /// Accepted for CoreOS manifests and unused (see `busyboxImage`): no member waits
    /// for its DNS name.
    #[serde(
        rename = "DNSTimeoutInSecond",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub dns_timeout_in_second: Option<i64>,
}

/// TLS for peer and client traffic: exactly one of `static` (the CoreOS form, Secrets the
/// user makes) or `auto` (certificates the operator makes and renews).
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "has(self.static) != has(self.auto)",
    "message": "set exactly one of TLS.static (your own Secrets) or TLS.auto (certificates made by the operator)",
    "reason": "FieldValueInvalid",
}]))]
pub struct TlsPolicy {
    /// Certificates from Secrets the user makes, with CoreOS's key names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub r#static: Option<StaticTls>,
    /// Certificates the operator makes (a CA per cluster, or the CA of a Secret the user
    /// names) and renews before they expire.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto: Option<AutoTls>,
}

/// TLS from static Secrets (CoreOS): `member.peerSecret` (`peer.crt`, `peer.key`,
/// `peer-ca.crt`), `member.serverSecret` (`server.crt`, `server.key`, `server-ca.crt`) and
/// `operatorSecret` (`etcd-client.crt`, `etcd-client.key`, `etcd-client-ca.crt`).
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "has(self.member) && has(self.member.peerSecret) && has(self.member.serverSecret) && has(self.operatorSecret)",
    "message": "static TLS needs member.peerSecret, member.serverSecret and operatorSecret",
    "reason": "FieldValueRequired",
}]))]
pub struct StaticTls {
    /// Secrets of the members.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub member: Option<MemberSecret>,
    /// Secret with the operator's client certificate (`etcd-client.crt`,
    /// `etcd-client.key`, and `etcd-client-ca.crt`, the CA of the members' server
    /// certificates).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub operator_secret: Option<String>,
}

/// Member certificate Secrets.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MemberSecret {
    /// Secret with the peer certificate (`peer.crt`, `peer.key`, `peer-ca.crt`); it must
    /// cover `*.<cluster>.<namespace>.svc` and `*.<cluster>.<namespace>.svc.cluster.local`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub peer_secret: Option<String>,
    /// Secret with the client-facing server certificate (`server.crt`, `server.key`,
    /// `server-ca.crt`); it must cover `*.<cluster>.<namespace>.svc` and `localhost`
    /// (and, for clients of the client Service, `<cluster>-client.<namespace>.svc`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub server_secret: Option<String>,
}

/// Certificates the operator makes: a CA (its own, in Secret `<cluster>-ca`, or the one
/// in `caSecret`), and peer, server and client certificates issued from it into Secrets
/// `<cluster>-peer-tls`, `<cluster>-server-tls` and `<cluster>-client-tls` (CoreOS key
/// names), owned by the EtcdCluster. Each is renewed when `renewAtPercent` of its
/// lifetime has passed.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AutoTls {
    /// Lifetime of the peer, server and client certificates, as hours, minutes and seconds
    /// (`2160h`, `90m`, `1h30m`). Default `2160h` (90 days); at least `1m`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^([0-9]+h)?([0-9]+m)?([0-9]+s)?$"), length(min = 2))]
    pub validity: Option<String>,
    /// How far into its lifetime a certificate is renewed, in percent. Default: two
    /// thirds (66.7 %).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 10, max = 90))]
    pub renew_at_percent: Option<i32>,
    /// Lifetime of a CA the operator makes, in the same form as `validity`. Default
    /// `87600h` (ten years); at least `1m`. The CA is rotated (a new one made, trusted,
    /// then issuing, then the old one dropped) when `renewAtPercent` of it has passed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^([0-9]+h)?([0-9]+m)?([0-9]+s)?$"), length(min = 2))]
    pub ca_validity: Option<String>,
    /// Key algorithm of the certificates the operator makes. Default `ECDSAP256`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_type: Option<KeyType>,
    /// A Secret (`kubernetes.io/tls`: `tls.crt`, `tls.key`) holding the CA to issue from;
    /// the operator never changes it (nor rotates it). Unset: the operator makes a CA in
    /// `<cluster>-ca` (valid `caValidity`) and rotates it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub ca_secret: Option<String>,
}

/// Key algorithms of operator-made certificates.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum KeyType {
    /// ECDSA on the NIST P-256 curve, signed with SHA-256.
    #[default]
    #[serde(rename = "ECDSAP256")]
    EcdsaP256,
    /// ECDSA on the NIST P-384 curve, signed with SHA-384.
    #[serde(rename = "ECDSAP384")]
    EcdsaP384,
    /// Ed25519.
    Ed25519,
}

impl EtcdClusterSpec {
    /// The version to run, defaulted.
    pub(crate) fn version_or_default(&self) -> &str {
        self.version
            .as_deref()
            .filter(|v| !v.is_empty())
            .unwrap_or(DEFAULT_VERSION)
    }

    /// The TLS mode `spec.TLS` asks for (`static` wins over `auto` on an object the
    /// schema would refuse today).
    pub(crate) fn tls_mode(&self) -> TlsMode {
        match &self.tls {
            Some(TlsPolicy {
                r#static: Some(_), ..
            }) => TlsMode::Static,
            Some(TlsPolicy { auto: Some(_), .. }) => TlsMode::Auto,
            _ => TlsMode::Off,
        }
    }

    /// The image repository, defaulted.
    pub(crate) fn repository_or_default(&self) -> &str {
        self.repository
            .as_deref()
            .filter(|r| !r.is_empty())
            .unwrap_or(DEFAULT_REPOSITORY)
    }

    /// The `spec.pod.etcdEnv` entries (none without a pod policy).
    pub(crate) fn etcd_env(&self) -> &[EnvVar] {
        self.pod
            .as_ref()
            .and_then(|p| p.etcd_env.as_deref())
            .unwrap_or_default()
    }

    /// A digest of what member pods are built from besides the version (the repository,
    /// the pod policy, the TLS Secrets and `quotaBackendBytes`): pods carry the digest they were made with, so
    /// a change the operator does not apply to running members is reported, never
    /// silently ignored.
    /// The claims' storage request is left out: it is applied to the claims in place.
    pub(crate) fn pod_template_digest(&self) -> String {
        let mut pod = self.pod.clone();
        if let Some(claim) = pod
            .as_mut()
            .and_then(|p| p.persistent_volume_claim_spec.as_mut())
        {
            claim.resources = None;
        }
        let mut template = serde_json::json!({
            "repository": self.repository_or_default(),
            "pod": pod,
        });
        // The Secrets pods mount; left out without TLS, so that digests of pods made
        // before TLS existed stay the same.
        if let Some(tls) = &self.tls {
            template["tls"] = serde_json::json!(tls);
        }
        // Left out when unset, for the same reason.
        if let Some(quota) = self.quota_backend_bytes {
            template["quotaBackendBytes"] = serde_json::json!(quota);
        }
        format!("{:016x}", fnv1a(template.to_string().as_bytes()))
    }
}

/// 64-bit FNV-1a: a digest that stays the same across builds and Rust releases (the
/// standard library's hasher may change), so pods keep matching the spec they were made
/// from when the operator is upgraded.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, b| {
        (hash ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod digest_tests {
    #[test]
    fn fnv1a_gives_the_published_test_vectors() {
        assert_eq!(super::fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(super::fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(super::fnv1a(b"foobar"), 0x8594_4171_f739_67e8);
    }
}
