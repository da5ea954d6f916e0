//! Why an EtcdBackup's spec cannot be turned into a backup target, with the reason each
//! refusal is reported under. A leaf: the target and the client certificate lookup both
//! return it.

use etcd_operator_actors::ports::ApiError;

use crate::tls::SecretProblem;

use super::credentials::CredentialsError;
use super::scope::OutsideNamespace;
use super::snapshot::OUTSIDE_NAMESPACE;
use super::store::StoreError;

/// Why a spec cannot be backed up as it is.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    /// `insecureSkipVerify` is set: members' certificates are always verified.
    #[error(
        "insecureSkipVerify is not supported: the members' server certificates are always \
         verified against the CA in the client Secret (etcd-client-ca.crt); remove it"
    )]
    InsecureSkipVerify,
    /// TLS and the cluster disagree: a client certificate for a cluster that serves plain
    /// HTTP, or `https` endpoints without one.
    #[error("{0}")]
    TlsMismatch(String),
    /// The client certificate's Secret is missing or unusable: each problem with its
    /// Secret and key.
    #[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    TlsSecretInvalid(Vec<SecretProblem>),
    /// The spec names no store of its `storageType`, or no cluster (the CRD refuses both).
    #[error("{0}")]
    Incomplete(&'static str),
    /// The credentials Secret does not exist.
    #[error("secret {0} does not exist")]
    SecretNotFound(String),
    /// The credentials Secret is unusable.
    #[error("secret {secret}: {source}")]
    InvalidSecret {
        /// The Secret.
        secret: String,
        /// What is wrong.
        source: CredentialsError,
    },
    /// The named EtcdCluster does not exist.
    #[error("EtcdCluster {0} does not exist in this namespace")]
    ClusterNotFound(String),
    /// Kubernetes could not be asked: what was read, in the API's words.
    #[error("{0}")]
    Kube(ApiError),
    /// An endpoint of `etcdEndpoints` is outside what the backup may dial.
    #[error(transparent)]
    OutsideNamespace(#[from] OutsideNamespace),
    /// The store could not be opened.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl TargetError {
    /// CamelCase reason for status and Events.
    pub fn reason(&self) -> &'static str {
        match self {
            TargetError::InsecureSkipVerify => "InsecureSkipVerifyUnsupported",
            TargetError::TlsMismatch(_) => "TLSMismatch",
            TargetError::TlsSecretInvalid(_) => "TLSSecretInvalid",
            TargetError::Incomplete(_) => "InvalidSpec",
            TargetError::SecretNotFound(_) => "SecretNotFound",
            TargetError::InvalidSecret { .. } => "InvalidSecret",
            TargetError::ClusterNotFound(_) => "ClusterNotFound",
            TargetError::Kube(_) => "KubernetesUnavailable",
            TargetError::OutsideNamespace(_) => OUTSIDE_NAMESPACE,
            TargetError::Store(e) => e.reason(),
        }
    }

    /// Whether the spec itself must change before a backup can run (no retries). A
    /// Secret's problems are not: a fixed Secret is used at the next retry.
    pub fn is_spec_problem(&self) -> bool {
        match self {
            TargetError::OutsideNamespace(e) => e.refusal.is_spec_problem(),
            _ => matches!(
                self,
                TargetError::InsecureSkipVerify
                    | TargetError::TlsMismatch(_)
                    | TargetError::Incomplete(_)
            ),
        }
    }
}
