//! From an EtcdBackup's spec to what one backup needs: the store (with the credentials of
//! its Secret) and the cluster's endpoints.

use std::sync::Arc;
use std::time::Duration;

use etcd_operator_actors::topology::Topology;

use crate::api::backup::{BackupStorageType, EtcdBackupSpec};

use super::credentials::{
    AbsCredentials, CredentialsError, GcsCredentials, S3Credentials, SecretData,
};
use super::kube::BackupKube;
use super::naming::split_path;
use super::store::{BackupStore, Location, StoreConfig, StoreError, StoreTimeouts};

/// Deadline of a whole backup when `backupPolicy.timeoutInSecond` is unset or 0.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

/// Why a spec cannot be backed up as it is.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    /// `clientTLSSecret` is set; client TLS is not implemented.
    #[error(
        "clientTLSSecret {0} is set, but client TLS to etcd is not implemented yet: \
         no backup is taken without it"
    )]
    TlsUnsupported(String),
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
    /// Kubernetes could not be asked.
    #[error("reading {what}: {message}")]
    Kube {
        /// What was read.
        what: String,
        /// What the API said.
        message: String,
    },
    /// The store could not be opened.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl TargetError {
    /// CamelCase reason for status and Events.
    pub fn reason(&self) -> &'static str {
        match self {
            TargetError::TlsUnsupported(_) => "TLSUnsupported",
            TargetError::Incomplete(_) => "InvalidSpec",
            TargetError::SecretNotFound(_) => "SecretNotFound",
            TargetError::InvalidSecret { .. } => "InvalidSecret",
            TargetError::ClusterNotFound(_) => "ClusterNotFound",
            TargetError::Kube { .. } => "KubernetesUnavailable",
            TargetError::Store(e) => e.reason(),
        }
    }

    /// Whether the spec itself must change before a backup can run (no retries).
    pub fn is_spec_problem(&self) -> bool {
        matches!(
            self,
            TargetError::TlsUnsupported(_) | TargetError::Incomplete(_)
        )
    }
}

/// What `spec` is refused for before anything is read; `None` when it may run.
pub fn spec_problem(spec: &EtcdBackupSpec) -> Option<TargetError> {
    if let Some(secret) = spec.client_tls_secret.as_deref().filter(|s| !s.is_empty()) {
        return Some(TargetError::TlsUnsupported(secret.to_string()));
    }
    let has_store = match spec.storage_type {
        BackupStorageType::S3 => spec.s3.is_some(),
        BackupStorageType::Gcs => spec.gcs.is_some(),
        BackupStorageType::Abs => spec.abs.is_some(),
    };
    if !has_store {
        return Some(TargetError::Incomplete(
            "storageType S3 needs s3, GCS needs gcs, ABS needs abs",
        ));
    }
    let endpoints = spec.etcd_endpoints.as_ref().is_some_and(|e| !e.is_empty());
    if spec.cluster_name.is_some() == endpoints {
        return Some(TargetError::Incomplete(
            "set exactly one of clusterName and etcdEndpoints",
        ));
    }
    None
}

async fn secret(
    kube: &dyn BackupKube,
    namespace: &str,
    name: &str,
) -> Result<SecretData, TargetError> {
    kube.secret(namespace, name)
        .await
        .map_err(|message| TargetError::Kube {
            what: format!("secret {name}"),
            message,
        })?
        .ok_or_else(|| TargetError::SecretNotFound(name.to_string()))
}

fn location(path: &str) -> Location {
    let (bucket, prefix) = split_path(path);
    Location {
        bucket: bucket.to_string(),
        prefix: prefix.to_string(),
    }
}

/// The store `spec` names, opened with the credentials of its Secret.
pub async fn store(
    kube: &dyn BackupKube,
    namespace: &str,
    spec: &EtcdBackupSpec,
    timeouts: StoreTimeouts,
) -> Result<BackupStore, TargetError> {
    let invalid = |secret: &str| {
        let secret = secret.to_string();
        move |source| TargetError::InvalidSecret { secret, source }
    };
    let config = match (spec.storage_type, &spec.s3, &spec.gcs, &spec.abs) {
        (BackupStorageType::S3, Some(s3), _, _) => {
            let data = secret(kube, namespace, &s3.aws_secret).await?;
            StoreConfig::S3 {
                location: location(&s3.path),
                endpoint: s3.endpoint.clone().filter(|e| !e.is_empty()),
                force_path_style: s3.force_path_style,
                credentials: S3Credentials::from_secret(&data).map_err(invalid(&s3.aws_secret))?,
            }
        }
        (BackupStorageType::Gcs, _, Some(gcs), _) => {
            let name = gcs.gcp_secret.as_deref().ok_or(TargetError::Incomplete(
                "gcs.gcpSecret is needed: the operator has no default Google credentials",
            ))?;
            let data = secret(kube, namespace, name).await?;
            StoreConfig::Gcs {
                location: location(&gcs.path),
                credentials: Arc::new(GcsCredentials::from_secret(&data).map_err(invalid(name))?),
            }
        }
        (BackupStorageType::Abs, _, _, Some(abs)) => {
            let data = secret(kube, namespace, &abs.abs_secret).await?;
            StoreConfig::Abs {
                location: location(&abs.path),
                credentials: Arc::new(
                    AbsCredentials::from_secret(&data).map_err(invalid(&abs.abs_secret))?,
                ),
            }
        }
        _ => {
            return Err(TargetError::Incomplete(
                "storageType S3 needs s3, GCS needs gcs, ABS needs abs",
            ));
        }
    };
    Ok(BackupStore::open(&config, timeouts)?)
}

/// The cluster's name in backup names and its client URLs: a named EtcdCluster's client
/// Service, or the endpoints given (named after the EtcdBackup).
pub async fn cluster(
    kube: &dyn BackupKube,
    namespace: &str,
    backup_name: &str,
    spec: &EtcdBackupSpec,
) -> Result<(String, Vec<String>), TargetError> {
    let Some(name) = &spec.cluster_name else {
        let endpoints = spec.etcd_endpoints.clone().unwrap_or_default();
        return Ok((backup_name.to_string(), endpoints));
    };
    let exists = kube
        .cluster_exists(namespace, name)
        .await
        .map_err(|message| TargetError::Kube {
            what: format!("EtcdCluster {name}"),
            message,
        })?;
    if !exists {
        return Err(TargetError::ClusterNotFound(name.clone()));
    }
    let topology = Topology::new(namespace, name);
    let service = format!(
        "http://{}.{namespace}.svc:{}",
        topology.client_service(),
        etcd_operator_actors::topology::CLIENT_PORT
    );
    Ok((name.clone(), vec![service]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::backup::S3BackupSource;

    fn s3_spec() -> EtcdBackupSpec {
        EtcdBackupSpec {
            cluster_name: Some("c".into()),
            s3: Some(S3BackupSource {
                path: "b/p".into(),
                aws_secret: "aws".into(),
                ..S3BackupSource::default()
            }),
            ..EtcdBackupSpec::default()
        }
    }

    #[test]
    fn a_client_tls_secret_is_refused_clearly_never_ignored() {
        let spec = EtcdBackupSpec {
            client_tls_secret: Some("etcd-client-tls".into()),
            ..s3_spec()
        };
        let problem = spec_problem(&spec).unwrap();
        assert_eq!(problem.reason(), "TLSUnsupported");
        assert!(problem.to_string().contains("etcd-client-tls"), "{problem}");
        assert!(problem.is_spec_problem());
    }

    #[test]
    fn a_spec_without_its_store_or_with_two_clusters_is_refused() {
        assert!(spec_problem(&s3_spec()).is_none());
        let no_store = EtcdBackupSpec {
            storage_type: BackupStorageType::Gcs,
            ..s3_spec()
        };
        assert_eq!(spec_problem(&no_store).unwrap().reason(), "InvalidSpec");
        let both = EtcdBackupSpec {
            etcd_endpoints: Some(vec!["http://x:2379".into()]),
            ..s3_spec()
        };
        assert_eq!(spec_problem(&both).unwrap().reason(), "InvalidSpec");
    }
}
