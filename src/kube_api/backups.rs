//! The newest verified backup a recovery from backup restores (`spec.recovery.backup`):
//! looked up in the store with the restore's own rules, and kept for a while so that a
//! cluster without quorum does not list its bucket on every tick.

use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::{Api, Client};
use tokio::time::Instant;

use etcd_operator_actors::lifecycle::SnapshotSource;
use etcd_operator_actors::ports::ApiError;

use super::error::api_error;
use crate::api::RecoveryBackup;
use crate::backup::store::StoreTimeouts;
use crate::restore::plan::Refusal;
use crate::restore::run::store_for;
use crate::restore::source::{self, Lookup};

/// How long a lookup's answer is used before the store is read again.
pub(crate) const LOOKUP_TTL: Duration = Duration::from_secs(30);

/// The last lookup of one cluster: when, for which store, and its answer.
type Looked = (Instant, RecoveryBackup, Result<SnapshotSource, ApiError>);

/// Lookups of one cluster's newest backup, with the last answer kept for [`LOOKUP_TTL`].
#[derive(Default)]
pub(crate) struct BackupLookups {
    last: Mutex<Option<Looked>>,
}

impl BackupLookups {
    /// The newest backup in `backup`'s store (the Secret read from `namespace`); the last
    /// answer while it is recent and the store the same.
    pub(crate) async fn newest(
        &self,
        client: &Client,
        namespace: &str,
        backup: &RecoveryBackup,
    ) -> Result<SnapshotSource, ApiError> {
        if let Some((at, store, answer)) =
            self.last.lock().unwrap_or_else(|p| p.into_inner()).as_ref()
            && at.elapsed() < LOOKUP_TTL
            && store == backup
        {
            return answer.clone();
        }
        let answer = lookup(client, namespace, backup).await;
        *self.last.lock().unwrap_or_else(|p| p.into_inner()) =
            Some((Instant::now(), backup.clone(), answer.clone()));
        answer
    }
}

fn refused(refusal: Refusal) -> ApiError {
    ApiError::Other(format!("{} ({})", refusal.message, refusal.reason))
}

/// Reads the store's Secret, then the newest snapshot under the path whose metadata
/// verifies (the seed's pod checks the bytes' sha256 and etcd's checksum as it fetches
/// them, before etcd ever reads them).
async fn lookup(
    client: &Client,
    namespace: &str,
    backup: &RecoveryBackup,
) -> Result<SnapshotSource, ApiError> {
    let s3 = &backup.s3;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let secret = secrets
        .get_opt(&s3.aws_secret)
        .await
        .map_err(|e| api_error(&format!("reading secret {}", s3.aws_secret), &e))?
        .ok_or_else(|| ApiError::NotFound(format!("secret {} does not exist", s3.aws_secret)))?;
    let data = secret
        .data
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.0))
        .collect();
    let lookup = Lookup::of(&s3.path);
    let store = store_for(s3, &lookup, &data, StoreTimeouts::default()).map_err(refused)?;
    let metadata = source::resolve(&store, &lookup)
        .await
        .map_err(|e| ApiError::Other(format!("{e} ({})", e.reason())))?;
    Ok(SnapshotSource {
        bucket: lookup.bucket().to_string(),
        key: metadata.key,
        endpoint: s3.endpoint.clone().filter(|e| !e.is_empty()),
        force_path_style: s3.force_path_style,
        secret: s3.aws_secret.clone(),
        sha256: metadata.sha256,
        size: metadata.size,
        etcd_version: metadata.etcd_version,
        revision: metadata.revision,
    })
}
