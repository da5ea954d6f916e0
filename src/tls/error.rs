//! What can be wrong with a TLS Secret, and what can fail when making certificates.

/// Why PEM text gave no certificate or no key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PemError {
    /// The PEM armour does not parse.
    #[error("{0}")]
    Armour(String),
    /// The text holds no `CERTIFICATE` block.
    #[error("no CERTIFICATE block")]
    NoCertificate,
    /// A block, or one of its extensions, does not parse as X.509.
    #[error("{0}")]
    X509(String),
    /// A key of a type that cannot sign (not RSA, ECDSA or Ed25519).
    #[error("unsupported key: {0}")]
    UnsupportedKey(String),
    /// The key's public half cannot be derived.
    #[error("cannot derive the public key")]
    NoPublicKey,
}

/// What is wrong with one key of a Secret (or the Secret itself).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Problem {
    /// The spec names no Secret for this role.
    #[error("{0} is not set")]
    Unset(&'static str),
    /// The Secret does not exist.
    #[error("not found")]
    SecretMissing,
    /// The Secret exists under the operator's name for it but is not the cluster's own.
    #[error("exists and {0}")]
    NotOurs(String),
    /// The key is not in the Secret.
    #[error("missing")]
    KeyMissing,
    /// The value holds no PEM certificate that parses.
    #[error("not a PEM certificate ({0})")]
    NotACertificate(PemError),
    /// The value holds no PEM private key that parses.
    #[error("not a PEM private key ({0})")]
    NotAKey(PemError),
    /// The certificate expired.
    #[error("expired at {0}")]
    Expired(String),
    /// The certificate is not valid yet.
    #[error("not valid before {0}")]
    NotYetValid(String),
    /// The certificate does not cover a name it must.
    #[error("does not cover {name} ({why})")]
    NameNotCovered {
        /// The name.
        name: String,
        /// Who needs it.
        why: &'static str,
    },
    /// The private key is not the certificate's.
    #[error("does not match the certificate in {0}")]
    KeyMismatch(String),
    /// No CA of the named bundle signed the certificate.
    #[error("is not signed by a CA in {0}")]
    NotSignedBy(String),
    /// The certificate's extended key usage excludes the use it is needed for.
    #[error("is not allowed for {0} (extended key usage)")]
    WrongUsage(&'static str),
    /// A CA certificate that is not marked as a CA.
    #[error("is not a CA certificate (basic constraints)")]
    NotACa,
    /// An annotation of the CA Secret that records a CA rotation cannot be read.
    #[error("annotation {0}")]
    BadRotationRecord(String),
}

/// A problem, with the Secret and key it is in: what `TLSSecretInvalid` reports.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("Secret {secret}{}: {problem}", key.as_ref().map(|k| format!(" key {k}")).unwrap_or_default())]
pub struct SecretProblem {
    /// The Secret.
    pub secret: String,
    /// The key, when the problem is in one.
    pub key: Option<String>,
    /// What is wrong.
    pub problem: Problem,
}

impl SecretProblem {
    /// A problem of the whole Secret.
    pub fn secret(secret: &str, problem: Problem) -> Self {
        SecretProblem {
            secret: secret.to_string(),
            key: None,
            problem,
        }
    }

    /// A problem of one key.
    pub fn key(secret: &str, key: &str, problem: Problem) -> Self {
        SecretProblem {
            secret: secret.to_string(),
            key: Some(key.to_string()),
            problem,
        }
    }
}

/// `problems` in one line, for people.
pub(crate) fn joined(problems: &[SecretProblem]) -> String {
    let text: Vec<String> = problems.iter().map(ToString::to_string).collect();
    text.join("; ")
}

/// Why a certificate could not be made.
#[derive(Debug, thiserror::Error)]
pub enum IssueError {
    /// rcgen refused the parameters or the key.
    #[error("making a certificate: {0}")]
    Rcgen(#[from] rcgen::Error),
    /// The CA's private key is not a PKCS #8 key rcgen can sign with.
    #[error("the CA's private key cannot sign (it must be PKCS #8, \"PRIVATE KEY\"): {0}")]
    CaKey(rcgen::Error),
    /// A time outside what certificates can hold.
    #[error("validity period out of range: {0}")]
    Time(String),
}
