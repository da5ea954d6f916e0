//! Certificates the operator makes (`spec.TLS.auto`), with rcgen: a CA per cluster, and
//! peer, server and client certificates issued from a CA with the names each role needs.

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SignatureAlgorithm,
};

use super::error::IssueError;
use super::layout::Role;
use super::names::ClusterNames;
use crate::api::KeyType;

/// A CA to issue from: its certificate and private key (PKCS #8), PEM.
#[derive(Clone, PartialEq, Eq)]
pub struct Ca {
    /// The CA certificate.
    pub cert_pem: String,
    /// Its private key.
    pub key_pem: String,
}

impl std::fmt::Debug for Ca {
    // Never print the key.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ca").finish_non_exhaustive()
    }
}

/// An issued certificate and its private key, PEM.
#[derive(Clone, PartialEq, Eq)]
pub struct Leaf {
    /// The certificate.
    pub cert_pem: String,
    /// Its private key (PKCS #8).
    pub key_pem: String,
}

impl std::fmt::Debug for Leaf {
    // Never print the key.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leaf").finish_non_exhaustive()
    }
}

/// When a certificate is valid, in Unix seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lifetime {
    /// Start.
    pub not_before: i64,
    /// End.
    pub not_after: i64,
}

impl Lifetime {
    /// Valid from `now` for `seconds`.
    pub fn starting(now: i64, seconds: i64) -> Self {
        Lifetime {
            not_before: now,
            not_after: now.saturating_add(seconds),
        }
    }
}

fn algorithm(key: KeyType) -> &'static SignatureAlgorithm {
    match key {
        KeyType::EcdsaP256 => &rcgen::PKCS_ECDSA_P256_SHA256,
        KeyType::EcdsaP384 => &rcgen::PKCS_ECDSA_P384_SHA384,
        KeyType::Ed25519 => &rcgen::PKCS_ED25519,
    }
}

fn at(unix: i64) -> Result<time::OffsetDateTime, IssueError> {
    time::OffsetDateTime::from_unix_timestamp(unix).map_err(|e| IssueError::Time(e.to_string()))
}

fn params(
    sans: Vec<String>,
    common_name: &str,
    lifetime: Lifetime,
) -> Result<CertificateParams, IssueError> {
    let mut params = CertificateParams::new(sans)?;
    params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    params.not_before = at(lifetime.not_before)?;
    params.not_after = at(lifetime.not_after)?;
    Ok(params)
}

/// A new self-signed CA for the cluster `names`.
pub fn new_ca(names: &ClusterNames, key: KeyType, lifetime: Lifetime) -> Result<Ca, IssueError> {
    let cn = format!("etcd-operator CA {}/{}", names.namespace, names.name);
    let mut params = params(Vec::new(), &cn, lifetime)?;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let key = KeyPair::generate_for(algorithm(key))?;
    let cert = params.self_signed(&key)?;
    Ok(Ca {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

/// A certificate for `role` of the cluster `names`, issued by `ca`: peers and servers get
/// the names [`ClusterNames::peer_sans`] and [`ClusterNames::server_sans`]; the operator's
/// client certificate gets none (etcd checks a client certificate's names against the
/// client's address when it has any).
pub fn issue_leaf(
    ca: &Ca,
    role: Role,
    names: &ClusterNames,
    key: KeyType,
    lifetime: Lifetime,
) -> Result<Leaf, IssueError> {
    let ca_key = KeyPair::from_pem(&ca.key_pem).map_err(IssueError::CaKey)?;
    let issuer = Issuer::from_ca_cert_pem(&ca.cert_pem, ca_key).map_err(IssueError::CaKey)?;
    let (sans, cn, usages) = match role {
        Role::Peer => (
            names.peer_sans(),
            "etcd peer",
            vec![
                ExtendedKeyUsagePurpose::ServerAuth,
                ExtendedKeyUsagePurpose::ClientAuth,
            ],
        ),
        Role::Server => (
            names.server_sans(),
            "etcd server",
            vec![ExtendedKeyUsagePurpose::ServerAuth],
        ),
        Role::Client => (
            Vec::new(),
            "etcd-operator",
            vec![ExtendedKeyUsagePurpose::ClientAuth],
        ),
    };
    let mut params = params(sans, cn, lifetime)?;
    params.extended_key_usages = usages;
    // Every key type offered is a signing key (ECDSA, Ed25519): no key encipherment.
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.use_authority_key_identifier_extension = true;
    let leaf_key = KeyPair::generate_for(algorithm(key))?;
    let cert = params.signed_by(&leaf_key, &issuer)?;
    Ok(Leaf {
        cert_pem: cert.pem(),
        key_pem: leaf_key.serialize_pem(),
    })
}
