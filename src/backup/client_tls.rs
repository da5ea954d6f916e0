//! The client certificate a backup presents to etcd, and whether it needs one.
//!
//! - `clientTLSSecret` set: that Secret, with CoreOS's client keys (`etcd-client.crt`,
//!   `etcd-client.key`, `etcd-client-ca.crt`: the CA the members' server certificates are
//!   verified against).
//! - Unset, and `clusterName` names a cluster with TLS (`TLS.static` or `TLS.auto`): the
//!   operator's own client Secret of that cluster (`TLS.static.operatorSecret`, or the
//!   `<cluster>-client-tls` it made), which has the same keys.
//! - Otherwise: no certificate, plain HTTP.
//!
//! Whatever the source, TLS and the cluster must agree: a certificate for a cluster that
//! serves plain HTTP, or `https` endpoints without one, is refused with `TLSMismatch`
//! rather than dialed (nothing is ever sent to a TLS cluster in plaintext). The Secret is
//! checked before anything is dialed, as the cluster side checks the operator's Secret:
//! there, its three keys, a certificate and key that parse and match, within their
//! validity and allowed for client authentication, and a CA bundle that parses; each
//! problem is named with its Secret and key (`TLSSecretInvalid`).

use etcd_operator_core::lifecycle::TlsMode;

use crate::api::EtcdCluster;
use crate::api::backup::EtcdBackupSpec;
use crate::secret_data::SecretData;
use crate::tls::{
    Bundle, ClientIdentity, ClusterNames, Problem, Role, SecretProblem, check_bundle, secret_names,
};

use super::target_error::TargetError;

/// Refusals of `spec` that need nothing read: `insecureSkipVerify`, and `etcdEndpoints`
/// whose scheme disagrees with `clientTLSSecret`.
pub fn spec_problem(spec: &EtcdBackupSpec) -> Option<TargetError> {
    if spec.insecure_skip_verify == Some(true) {
        return Some(TargetError::InsecureSkipVerify);
    }
    let secret = named_secret(spec);
    let endpoints = spec.etcd_endpoints.as_deref().unwrap_or_default();
    let plain = endpoints.iter().find(|e| !e.starts_with("https://"));
    let secure = endpoints.iter().find(|e| e.starts_with("https://"));
    match (secret, plain, secure) {
        (Some(secret), Some(endpoint), _) => Some(TargetError::TlsMismatch(format!(
            "clientTLSSecret {secret} is set but etcdEndpoints has the plain http endpoint \
             {endpoint}: use https endpoints, or remove clientTLSSecret"
        ))),
        (None, _, Some(endpoint)) => Some(TargetError::TlsMismatch(format!(
            "etcdEndpoints has the https endpoint {endpoint}: set clientTLSSecret to the \
             Secret with the client certificate (etcd-client.crt, etcd-client.key and \
             etcd-client-ca.crt)"
        ))),
        _ => None,
    }
}

fn named_secret(spec: &EtcdBackupSpec) -> Option<&str> {
    spec.client_tls_secret.as_deref().filter(|s| !s.is_empty())
}

/// The Secret whose client certificate a backup of `spec` presents, `None` for plain
/// HTTP; `cluster` is the EtcdCluster `clusterName` names (`None` with `etcdEndpoints`).
pub fn certificate_secret(
    spec: &EtcdBackupSpec,
    cluster: Option<&EtcdCluster>,
) -> Result<Option<String>, TargetError> {
    let named = named_secret(spec).map(str::to_string);
    let Some(cluster) = cluster else {
        return Ok(named);
    };
    let name = spec.cluster_name.as_deref().unwrap_or_default();
    match (cluster.spec.tls_mode(), named) {
        (TlsMode::Off, Some(secret)) => Err(TargetError::TlsMismatch(format!(
            "clientTLSSecret {secret} is set but EtcdCluster {name} serves clients over \
             plain http (it has no spec.TLS): remove clientTLSSecret"
        ))),
        (TlsMode::Off, None) => Ok(None),
        (_, Some(secret)) => Ok(Some(secret)),
        (_, None) => {
            let names = secret_names(name, cluster.spec.tls.as_ref());
            let roles = names.as_ref().map(|n| &n.roles);
            match roles.and_then(|r| r.iter().find(|(role, _)| *role == Role::Client)) {
                Some((_, Ok(secret))) => Ok(Some(secret.clone())),
                Some((_, Err(field))) => {
                    Err(TargetError::TlsSecretInvalid(vec![SecretProblem::secret(
                        &format!("of EtcdCluster {name}"),
                        Problem::Unset(field),
                    )]))
                }
                None => Ok(None),
            }
        }
    }
}

/// The identity in the client Secret `secret` (its keys `data`, `None` when it does not
/// exist), checked at `now` (Unix seconds).
pub fn identity(
    secret: &str,
    data: Option<&SecretData>,
    now: i64,
) -> Result<ClientIdentity, TargetError> {
    let bundle = Bundle {
        role: Role::Client,
        secret,
        data,
    };
    // A client certificate needs no DNS name: the names are not looked at.
    let names = ClusterNames::new("", "", "");
    let checked = check_bundle(bundle, &names, now).map_err(TargetError::TlsSecretInvalid)?;
    Ok(ClientIdentity {
        ca_pem: checked.ca_pem,
        cert_pem: checked.cert_pem,
        key_pem: checked.key_pem,
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::api::KeyType;
    use crate::api::s3::S3Store;
    use crate::tls::{Ca, Lifetime, issue_leaf, new_ca};

    const NOW: i64 = 1_800_000_000;

    fn names() -> ClusterNames {
        ClusterNames::new("prod", "demo", "")
    }

    fn ca() -> Ca {
        new_ca(
            &names(),
            KeyType::EcdsaP256,
            Lifetime::starting(NOW - 60, 86_400),
        )
        .unwrap()
    }

    /// A client Secret in CoreOS's layout, from `ca`, valid from `start` for a day.
    fn client_secret(ca: &Ca, start: i64) -> SecretData {
        let leaf = issue_leaf(
            ca,
            Role::Client,
            &names(),
            KeyType::EcdsaP256,
            Lifetime::starting(start, 86_400),
        )
        .unwrap();
        BTreeMap::from([
            ("etcd-client.crt".to_string(), leaf.cert_pem.into_bytes()),
            ("etcd-client.key".to_string(), leaf.key_pem.into_bytes()),
            (
                "etcd-client-ca.crt".to_string(),
                ca.cert_pem.clone().into_bytes(),
            ),
        ])
    }

    /// The reason and message of the refusal of Secret `data`.
    fn refusal(data: Option<&SecretData>) -> (&'static str, String) {
        let err = identity("etcd-client-tls", data, NOW).unwrap_err();
        (err.reason(), err.to_string())
    }

    fn assert_names(message: &str, parts: &[&str]) {
        for part in parts {
            assert!(message.contains(part), "{part:?} not in {message:?}");
        }
    }

    #[test]
    fn a_valid_client_secret_gives_its_certificate_key_and_ca() {
        let ca = ca();
        let data = client_secret(&ca, NOW - 60);
        let id = identity("etcd-client-tls", Some(&data), NOW).unwrap();
        assert_eq!(id.ca_pem, ca.cert_pem.into_bytes());
        assert_eq!(id.cert_pem, data["etcd-client.crt"]);
        assert_eq!(id.key_pem, data["etcd-client.key"]);
    }

    #[test]
    fn a_missing_client_secret_is_tls_secret_invalid_naming_it() {
        let (reason, message) = refusal(None);
        assert_eq!(reason, "TLSSecretInvalid");
        assert_names(&message, &["Secret etcd-client-tls", "not found"]);
    }

    #[test]
    fn each_missing_key_of_the_client_secret_is_named() {
        for key in ["etcd-client.crt", "etcd-client.key", "etcd-client-ca.crt"] {
            let mut data = client_secret(&ca(), NOW - 60);
            data.remove(key);
            let (reason, message) = refusal(Some(&data));
            assert_eq!(reason, "TLSSecretInvalid");
            assert_names(
                &message,
                &["Secret etcd-client-tls", &format!("key {key}"), "missing"],
            );
        }
    }

    #[test]
    fn a_certificate_that_does_not_parse_is_named_with_its_key() {
        let mut data = client_secret(&ca(), NOW - 60);
        data.insert("etcd-client.crt".into(), b"not a certificate".to_vec());
        let (reason, message) = refusal(Some(&data));
        assert_eq!(reason, "TLSSecretInvalid");
        assert_names(&message, &["key etcd-client.crt", "not a PEM certificate"]);
    }

    #[test]
    fn a_ca_bundle_that_does_not_parse_is_named_with_its_key() {
        let mut data = client_secret(&ca(), NOW - 60);
        data.insert("etcd-client-ca.crt".into(), b"garbage".to_vec());
        let (_, message) = refusal(Some(&data));
        assert_names(
            &message,
            &["key etcd-client-ca.crt", "not a PEM certificate"],
        );
    }

    #[test]
    fn a_key_that_does_not_parse_is_named_with_its_key() {
        let mut data = client_secret(&ca(), NOW - 60);
        data.insert(
            "etcd-client.key".into(),
            b"-----BEGIN PRIVATE KEY-----\nx\n".to_vec(),
        );
        let (reason, message) = refusal(Some(&data));
        assert_eq!(reason, "TLSSecretInvalid");
        assert_names(&message, &["key etcd-client.key", "not a PEM private key"]);
    }

    #[test]
    fn a_key_that_is_not_the_certificates_is_refused() {
        let mut data = client_secret(&ca(), NOW - 60);
        let other = client_secret(&ca(), NOW - 60);
        data.insert("etcd-client.key".into(), other["etcd-client.key"].clone());
        let (reason, message) = refusal(Some(&data));
        assert_eq!(reason, "TLSSecretInvalid");
        assert_names(
            &message,
            &["key etcd-client.crt", "does not match the certificate"],
        );
    }

    #[test]
    fn an_expired_client_certificate_is_refused_with_when_it_expired() {
        let data = client_secret(&ca(), NOW - 2 * 86_400);
        let (reason, message) = refusal(Some(&data));
        assert_eq!(reason, "TLSSecretInvalid");
        assert_names(&message, &["key etcd-client.crt", "expired at"]);
    }

    #[test]
    fn a_server_only_certificate_is_refused_for_client_authentication() {
        let ca = ca();
        let server = issue_leaf(
            &ca,
            Role::Server,
            &names(),
            KeyType::EcdsaP256,
            Lifetime::starting(NOW - 60, 86_400),
        )
        .unwrap();
        let mut data = client_secret(&ca, NOW - 60);
        data.insert("etcd-client.crt".into(), server.cert_pem.into_bytes());
        data.insert("etcd-client.key".into(), server.key_pem.into_bytes());
        let (_, message) = refusal(Some(&data));
        assert_names(
            &message,
            &["key etcd-client.crt", "TLS client authentication"],
        );
    }

    fn spec(endpoints: &[&str], secret: Option<&str>) -> EtcdBackupSpec {
        EtcdBackupSpec {
            etcd_endpoints: Some(endpoints.iter().map(|e| e.to_string()).collect()),
            client_tls_secret: secret.map(str::to_string),
            s3: Some(S3Store::default()),
            ..EtcdBackupSpec::default()
        }
    }

    #[test]
    fn https_endpoints_need_a_client_tls_secret_and_http_ones_refuse_it() {
        let https = ["https://etcd-0.example:2379"];
        let http = ["http://etcd-0.example:2379"];
        assert!(spec_problem(&spec(&https, Some("tls"))).is_none());
        assert!(spec_problem(&spec(&http, None)).is_none());
        let missing = spec_problem(&spec(&https, None)).unwrap();
        assert_eq!(missing.reason(), "TLSMismatch");
        assert_names(
            &missing.to_string(),
            &["https://etcd-0.example:2379", "clientTLSSecret"],
        );
        let plaintext = spec_problem(&spec(&["https://a:2379", http[0]], Some("tls"))).unwrap();
        assert_eq!(plaintext.reason(), "TLSMismatch");
        assert_names(
            &plaintext.to_string(),
            &["http://etcd-0.example:2379", "tls"],
        );
        assert!(missing.is_spec_problem() && plaintext.is_spec_problem());
    }

    #[test]
    fn insecure_skip_verify_is_refused_because_members_are_always_verified() {
        let skip = EtcdBackupSpec {
            insecure_skip_verify: Some(true),
            ..spec(&["https://a:2379"], Some("tls"))
        };
        let problem = spec_problem(&skip).unwrap();
        assert_eq!(problem.reason(), "InsecureSkipVerifyUnsupported");
        assert!(problem.is_spec_problem());
        let verify = EtcdBackupSpec {
            insecure_skip_verify: Some(false),
            ..skip
        };
        assert!(spec_problem(&verify).is_none());
    }
}
