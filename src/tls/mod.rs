//! TLS for etcd members and the operator: the Secrets' layout (CoreOS's key names), the
//! DNS names each certificate must cover, the checks a Secret's certificates must pass
//! before any member uses them, and the certificates the operator makes itself
//! (`spec.TLS.auto`, with rcgen). Pure: Secrets come in as maps of keys to bytes, and the
//! time is a parameter.

mod ca_source;
mod error;
mod issue;
pub mod layout;
mod names;
mod pem;
pub mod rotation;
mod validate;
mod verdict;

pub use ca_source::{CaSource, Renewal};
pub(crate) use error::joined;
pub use error::{IssueError, PemError, Problem, SecretProblem};
pub use issue::{Ca, Leaf, Lifetime, issue_leaf, new_ca};
pub use layout::{CaSecret, Role, SecretNames, secret_names};
pub use names::{ClusterNames, covers};
pub use rotation::{CaRecord, CaWrite, NewCaError, ca_record, rotation_view, trust_digest};
pub use validate::{Bundle, CheckedBundle, CheckedCa, check_bundle, check_ca, check_trust};
pub use verdict::{
    CaState, LeafState, ReadSecret, Verdict, auto_verdict, ca_state, leaf_state, members_trust,
    static_verdict,
};

/// The client side of TLS to etcd: what the operator presents (its certificate and key)
/// and which CAs it trusts for the members' server certificates, all PEM.
#[derive(Clone, PartialEq, Eq)]
pub struct ClientIdentity {
    /// The CA certificates the members' server certificates must chain to.
    pub ca_pem: Vec<u8>,
    /// The operator's client certificate.
    pub cert_pem: Vec<u8>,
    /// Its private key.
    pub key_pem: Vec<u8>,
}

impl ClientIdentity {
    /// A short digest of the three, so clients made with other credentials are told apart
    /// (a renewed certificate gets a new connection).
    pub fn fingerprint(&self) -> u64 {
        [&self.ca_pem, &self.cert_pem, &self.key_pem]
            .iter()
            .flat_map(|part| part.iter().chain(std::iter::once(&0xff)))
            .fold(0xcbf2_9ce4_8422_2325, |hash, b| {
                (hash ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
            })
    }
}

impl std::fmt::Debug for ClientIdentity {
    // Never print the key.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientIdentity")
            .field("fingerprint", &format_args!("{:016x}", self.fingerprint()))
            .finish()
    }
}

#[cfg(test)]
mod tests;
