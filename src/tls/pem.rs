//! PEM in, facts out: certificates and private keys parsed with rustls' PEM reader and
//! x509-parser, reduced to what the checks need.

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use x509_parser::certificate::X509Certificate;
use x509_parser::extensions::GeneralName;

use super::error::PemError;

/// What the checks need of one certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CertFacts {
    /// Its DER.
    pub der: Vec<u8>,
    /// Start of validity (Unix seconds).
    pub not_before: i64,
    /// End of validity (Unix seconds).
    pub not_after: i64,
    /// DNS names of its subject alternative names.
    pub dns_names: Vec<String>,
    /// Its SubjectPublicKeyInfo (DER).
    pub spki: Vec<u8>,
    /// Extended key usage: `(serverAuth, clientAuth)`, both true when the certificate
    /// does not restrict it (no extension, or `anyExtendedKeyUsage`).
    pub usage: (bool, bool),
    /// Basic constraints' CA flag, when the extension is there.
    pub ca: Option<bool>,
}

/// Every certificate of a PEM bundle, in order.
pub(crate) fn certificates(pem: &[u8]) -> Result<Vec<CertFacts>, PemError> {
    let ders: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<_, _>>()
        .map_err(armour)?;
    if ders.is_empty() {
        return Err(PemError::NoCertificate);
    }
    ders.iter().map(|der| facts(der)).collect()
}

/// A PEM armour error, kept as its message.
fn armour(e: rustls_pki_types::pem::Error) -> PemError {
    PemError::Armour(e.to_string())
}

/// An X.509 parse error, kept as its message.
fn x509(e: impl std::fmt::Display) -> PemError {
    PemError::X509(e.to_string())
}

fn parse(der: &[u8]) -> Result<X509Certificate<'_>, PemError> {
    x509_parser::parse_x509_certificate(der)
        .map(|(_, cert)| cert)
        .map_err(x509)
}

fn facts(der: &[u8]) -> Result<CertFacts, PemError> {
    let cert = parse(der)?;
    let dns_names = match cert.subject_alternative_name().map_err(x509)? {
        Some(san) => san
            .value
            .general_names
            .iter()
            .filter_map(|n| match n {
                GeneralName::DNSName(name) => Some(name.to_string()),
                _ => None,
            })
            .collect(),
        None => Vec::new(),
    };
    let usage = match cert.extended_key_usage().map_err(x509)? {
        Some(eku) if !eku.value.any => (eku.value.server_auth, eku.value.client_auth),
        _ => (true, true),
    };
    let ca = cert
        .basic_constraints()
        .map_err(x509)?
        .map(|bc| bc.value.ca);
    Ok(CertFacts {
        der: der.to_vec(),
        not_before: cert.validity().not_before.timestamp(),
        not_after: cert.validity().not_after.timestamp(),
        dns_names,
        spki: cert.public_key().raw.to_vec(),
        usage,
        ca,
    })
}

/// Whether `ca` signed `cert`: `cert`'s issuer is `ca`'s subject and its signature
/// verifies with `ca`'s key.
pub(crate) fn signed_by(cert: &CertFacts, ca: &CertFacts) -> bool {
    let (Ok(cert), Ok(ca)) = (parse(&cert.der), parse(&ca.der)) else {
        return false;
    };
    cert.issuer() == ca.subject() && cert.verify_signature(Some(ca.public_key())).is_ok()
}

/// The SubjectPublicKeyInfo (DER) of the private key in `pem` (PKCS #8, PKCS #1 or SEC1;
/// RSA, ECDSA or Ed25519).
pub(crate) fn key_spki(pem: &[u8]) -> Result<Vec<u8>, PemError> {
    let key = PrivateKeyDer::from_pem_slice(pem).map_err(armour)?;
    let signing = rustls::crypto::ring::sign::any_supported_type(&key)
        .map_err(|e| PemError::UnsupportedKey(e.to_string()))?;
    signing
        .public_key()
        .map(|spki| spki.to_vec())
        .ok_or(PemError::NoPublicKey)
}

/// Unix seconds as RFC 3339 (UTC).
pub(crate) fn rfc3339(unix: i64) -> String {
    jiff::Timestamp::from_second(unix)
        .map(|t| t.to_string())
        .unwrap_or_else(|_| format!("{unix} (Unix seconds)"))
}
