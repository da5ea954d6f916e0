//! The newest verified backup a recovery from backup restores (`spec.recovery.backup`):
//! looked up in the store with the restore's own rules, and kept for a while so that a
//! cluster without quorum does not list its bucket on every tick.

use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::{Api, Client};
use tokio::time::Instant;

use etcd_operator_actors::ports::ApiError;
use etcd_operator_core::lifecycle::SnapshotSource;

use super::error::api_error;
use crate::api::RecoveryBackup;
use crate::api::s3::S3Store;
use crate::backup::metadata::BackupMetadata;
use crate::backup::store::StoreTimeouts;
use crate::restore::plan::Refusal;
use crate::restore::run::store_for;
use crate::restore::source::{self, Lookup, Owner};

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
    /// The newest backup of cluster `owner` in `backup`'s store (the Secret read from the
    /// owner's namespace); the last answer while it is recent, of the same store, and read
    /// at or after `read_since`.
    pub(crate) async fn newest(
        &self,
        client: &Client,
        owner: &Owner,
        backup: &RecoveryBackup,
        read_since: Option<Instant>,
    ) -> Result<SnapshotSource, ApiError> {
        if let Some(answer) = self.kept(backup, read_since, Instant::now()) {
            return answer;
        }
        let answer = lookup(client, owner, backup).await;
        self.keep(Instant::now(), backup, answer.clone());
        answer
    }

    fn keep(&self, at: Instant, backup: &RecoveryBackup, answer: Result<SnapshotSource, ApiError>) {
        *self.last.lock().unwrap_or_else(|p| p.into_inner()) = Some((at, backup.clone(), answer));
    }

    /// The kept answer, if it may be given at `now`.
    fn kept(
        &self,
        backup: &RecoveryBackup,
        read_since: Option<Instant>,
        now: Instant,
    ) -> Option<Result<SnapshotSource, ApiError>> {
        let last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        let (at, store, answer) = last.as_ref()?;
        let recent = now.saturating_duration_since(*at) < LOOKUP_TTL;
        let since = read_since.is_none_or(|since| *at >= since);
        (recent && since && store == backup).then(|| answer.clone())
    }
}

fn refused(refusal: Refusal) -> ApiError {
    ApiError::Other(format!("{} ({})", refusal.message, refusal.reason))
}

/// Reads the store's Secret, then the newest snapshot of `owner` directly under the path
/// whose metadata verifies (the seed's pod checks the bytes' sha256 and etcd's checksum as
/// it fetches them, before etcd ever reads them); a path naming one snapshot names it.
async fn lookup(
    client: &Client,
    owner: &Owner,
    backup: &RecoveryBackup,
) -> Result<SnapshotSource, ApiError> {
    let s3 = &backup.s3;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &owner.namespace);
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
    let metadata = source::resolve_for(&store, &lookup, Some(owner))
        .await
        .map_err(|e| ApiError::Other(format!("{e} ({})", e.reason())))?;
    Ok(snapshot_source(s3, lookup.bucket(), metadata))
}

/// The source of the snapshot `metadata` describes, in `bucket` of the store `s3` names;
/// with the snapshot's etcd cluster ID (`None` when its metadata's is not hexadecimal).
fn snapshot_source(s3: &S3Store, bucket: &str, metadata: BackupMetadata) -> SnapshotSource {
    SnapshotSource {
        bucket: bucket.to_string(),
        cluster_id: metadata.cluster_id_number(),
        key: metadata.key,
        endpoint: s3.endpoint.clone().filter(|e| !e.is_empty()),
        force_path_style: s3.force_path_style,
        secret: s3.aws_secret.clone(),
        sha256: metadata.sha256,
        size: metadata.size,
        etcd_version: metadata.etcd_version,
        revision: metadata.revision,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backup::metadata::example;

    fn not_found() -> Result<SnapshotSource, ApiError> {
        Err(ApiError::NotFound("no snapshot under backups/demo".into()))
    }

    #[test]
    fn a_recovery_source_carries_the_snapshots_etcd_cluster_id() {
        let metadata = example("demo", "p/demo_20261130T103300.000Z_r7.db");
        let s3 = S3Store {
            path: "bucket/p".into(),
            aws_secret: "aws".into(),
            ..S3Store::default()
        };
        let source = snapshot_source(&s3, "bucket", metadata.clone());
        assert_eq!(source.cluster_id, Some(0x1a2b));
        assert_eq!(source.path(), "bucket/p/demo_20261130T103300.000Z_r7.db");
        let unreadable = BackupMetadata {
            cluster_id: "not hex".into(),
            ..metadata
        };
        assert_eq!(snapshot_source(&s3, "bucket", unreadable).cluster_id, None);
    }

    #[test]
    fn an_answer_read_before_the_loss_began_is_not_given_for_it() {
        let lookups = BackupLookups::default();
        let store = RecoveryBackup::default();
        let read = Instant::now();
        lookups.keep(read, &store, not_found());
        let loss = read + Duration::from_secs(1);
        let now = loss + Duration::from_secs(1);
        assert!(lookups.kept(&store, Some(loss), now).is_none());
        assert!(lookups.kept(&store, Some(read), now).is_some());
        assert!(lookups.kept(&store, None, now).is_some());
    }

    #[test]
    fn an_answer_is_given_again_only_while_recent_and_for_the_same_store() {
        let lookups = BackupLookups::default();
        let store = RecoveryBackup::default();
        let read = Instant::now();
        lookups.keep(read, &store, not_found());
        assert!(lookups.kept(&store, None, read + LOOKUP_TTL).is_none());
        let mut other = store.clone();
        other.s3.path = "backups/other".into();
        assert!(lookups.kept(&other, None, read).is_none());
    }
}
