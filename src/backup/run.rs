//! One backup, start to end: a member chosen, its snapshot streamed into a multipart
//! upload while etcd's checksum is checked, the stored object read back and hashed, the
//! metadata written beside it; and then, separately ([`retain`], called only after a
//! backup was verified), older backups deleted.
//!
//! Nothing is left counted as a backup when a step fails: a stream that fails or does not
//! verify aborts the upload (no object appears); an object whose read-back differs, or
//! whose metadata cannot be written, is deleted again.

use std::time::Duration;

use jiff::Timestamp;
use tokio::time::Instant;

use super::dial::Dialer;
use super::integrity::{IntegrityError, SnapshotVerifier, Verified};
use super::metadata::BackupMetadata;
use super::naming::{BackupName, metadata_key};
use super::retention::{Described, StoredBackup, count_written_like, to_delete};
use super::snapshot::{self, ChosenMember, SnapshotError};
use super::store::{BackupStore, StoreError, Upload};

/// The EtcdBackup a backup is taken for, as the backup's metadata records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Writer {
    /// Its namespace (a cluster it names is in the same one).
    pub namespace: String,
    /// Its UID: retention deletes only what the same EtcdBackup wrote.
    pub uid: String,
}

/// What to back up.
#[derive(Debug, Clone)]
pub struct BackupRequest {
    /// The EtcdBackup it is taken for; `None`: none recorded (retention then deletes
    /// nothing after it).
    pub writer: Option<Writer>,
    /// The cluster's name in backup names.
    pub cluster: String,
    /// Client URLs of the cluster.
    pub endpoints: Vec<String>,
    /// How they and the members are dialed (plain, or TLS with a client certificate).
    pub dialer: Dialer,
    /// The cluster ID recorded for the cluster (its EtcdCluster's status): a member
    /// answering with another one refuses the backup. `None`: not known, not checked.
    pub cluster_id: Option<u64>,
    /// Deadline of each etcd call before the stream (connect, member list, status).
    pub etcd_timeout: Duration,
    /// Deadline of the whole backup.
    pub timeout: Duration,
}

/// A backup stored and verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackupOutcome {
    /// The snapshot's key in the bucket.
    pub key: String,
    /// `<bucket>/<key>`.
    pub path: String,
    /// What was stored beside it.
    pub metadata: BackupMetadata,
}

/// What retention did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Retention {
    /// The backups deleted (snapshot keys; each one's metadata went with it).
    pub deleted: Vec<String>,
    /// Backups of the cluster the same EtcdBackup wrote, directly under the prefix,
    /// afterwards (with `maxBackups` 0: every backup of the cluster's name there).
    pub kept: usize,
    /// Why retention stopped early, if it did (the new backup itself is good).
    pub error: Option<String>,
}

/// Why a backup failed.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    /// No snapshot stream.
    #[error(transparent)]
    Snapshot(#[from] SnapshotError),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The stream is not a complete etcd snapshot.
    #[error("the snapshot from {endpoint} failed etcd's integrity check: {source}")]
    Integrity {
        /// The member it came from.
        endpoint: String,
        /// What is wrong.
        source: IntegrityError,
    },
    /// What the store holds is not what was sent.
    #[error(
        "the stored object {path} is not what was sent: {stored_size} bytes with sha256 \
         {stored_sha256}, sent {sent_size} bytes with sha256 {sent_sha256}; it was deleted"
    )]
    Mismatch {
        /// The object.
        path: String,
        /// Bytes read back.
        stored_size: u64,
        /// sha256 read back.
        stored_sha256: String,
        /// Bytes sent.
        sent_size: u64,
        /// sha256 sent.
        sent_sha256: String,
    },
    /// The whole backup took longer than its deadline.
    #[error("the backup did not finish within {0:?} (backupPolicy.timeoutInSecond)")]
    Timeout(Duration),
}

impl BackupError {
    /// CamelCase reason for status and Events.
    pub fn reason(&self) -> &'static str {
        match self {
            BackupError::Snapshot(e) => e.reason(),
            BackupError::Store(e) => e.reason(),
            BackupError::Integrity { .. } => "SnapshotCorrupt",
            BackupError::Mismatch { .. } => "VerificationFailed",
            BackupError::Timeout(_) => "Timeout",
        }
    }
}

/// Takes one backup of `request` into `store`.
pub async fn take_backup(
    store: &BackupStore,
    request: &BackupRequest,
) -> Result<BackupOutcome, BackupError> {
    let deadline = Instant::now() + request.timeout;
    let within = |d| BackupError::Timeout(d);
    let member = tokio::time::timeout_at(
        deadline,
        snapshot::choose_member(
            &request.dialer,
            &request.endpoints,
            request.etcd_timeout,
            request.cluster_id,
        ),
    )
    .await
    .map_err(|_| within(request.timeout))??;
    let (key, metadata) = stream_to_store(store, request, &member, deadline).await?;
    let stored = tokio::time::timeout_at(deadline, check_stored(store, &key, &metadata))
        .await
        .map_err(|_| within(request.timeout))
        .and_then(|r| r);
    if let Err(e) = stored {
        let _ = store.delete(&key).await;
        let _ = store.delete(&metadata_key(&key)).await;
        return Err(e);
    }
    Ok(BackupOutcome {
        path: store.path_of(&key),
        key,
        metadata,
    })
}

/// Streams the snapshot of `member` into the store under its backup name; returns the key
/// and the metadata (not stored yet).
async fn stream_to_store(
    store: &BackupStore,
    request: &BackupRequest,
    member: &ChosenMember,
    deadline: Instant,
) -> Result<(String, BackupMetadata), BackupError> {
    let timeout = BackupError::Timeout(request.timeout);
    let mut stream = tokio::time::timeout_at(
        deadline,
        snapshot::open(&request.dialer, member, request.etcd_timeout),
    )
    .await
    .map_err(|_| BackupError::Timeout(request.timeout))??;
    let failed = |e: etcd_client::Error| SnapshotError::Stream {
        endpoint: member.endpoint.clone(),
        message: crate::error::with_causes(&e.to_string(), &e),
    };
    // The first message fixes the name: its header has the snapshot's revision (etcd 3.6
    // sends one); else the member's revision read just before is used.
    let first = tokio::time::timeout_at(deadline, stream.message())
        .await
        .map_err(|_| BackupError::Timeout(request.timeout))?
        .map_err(failed)?;
    let revision = first
        .as_ref()
        .and_then(|m| m.header())
        .map(|h| h.revision())
        .filter(|r| *r > 0)
        .unwrap_or(member.revision);
    let time = Timestamp::now();
    let name = BackupName::new(&request.cluster, time, revision);
    let key = store.key_of(&name.file_name());
    let mut upload = store.start_upload(&key).await?;
    let mut verifier = SnapshotVerifier::new();
    let mut next = first;
    let streamed: Result<(), BackupError> = async {
        while let Some(message) = next {
            verifier.update(message.blob());
            upload.write(message.blob()).await?;
            next = tokio::time::timeout_at(deadline, stream.message())
                .await
                .map_err(|_| BackupError::Timeout(request.timeout))?
                .map_err(failed)?;
        }
        Ok(())
    }
    .await;
    let verified = match streamed.and_then(|()| verify(verifier, member)) {
        Ok(verified) => verified,
        Err(e) => {
            upload.abort().await;
            return Err(e);
        }
    };
    finish(upload, deadline, timeout).await?;
    let metadata = BackupMetadata {
        cluster: request.cluster.clone(),
        cluster_id: format!("{:x}", member.cluster_id),
        member_id: format!("{:x}", member.member_id),
        revision,
        etcd_version: member.version.clone(),
        size: verified.size,
        sha256: verified.sha256,
        time: name.time.to_string(),
        key: key.clone(),
        namespace: request.writer.as_ref().map(|w| w.namespace.clone()),
        etcd_backup_uid: request.writer.as_ref().map(|w| w.uid.clone()),
    };
    Ok((key, metadata))
}

fn verify(verifier: SnapshotVerifier, member: &ChosenMember) -> Result<Verified, BackupError> {
    verifier.finish().map_err(|source| BackupError::Integrity {
        endpoint: member.endpoint.clone(),
        source,
    })
}

async fn finish(
    upload: Upload,
    deadline: Instant,
    timeout: BackupError,
) -> Result<(), BackupError> {
    match tokio::time::timeout_at(deadline, upload.finish()).await {
        Ok(result) => result.map_err(BackupError::Store),
        Err(_) => Err(timeout),
    }
}

/// Reads the stored snapshot back: it must be byte for byte what was sent (size and
/// sha256); then writes the metadata beside it.
async fn check_stored(
    store: &BackupStore,
    key: &str,
    metadata: &BackupMetadata,
) -> Result<(), BackupError> {
    let stored = store.digest(key).await?;
    if stored.size != metadata.size || stored.sha256 != metadata.sha256 {
        return Err(BackupError::Mismatch {
            path: store.path_of(key),
            stored_size: stored.size,
            stored_sha256: stored.sha256,
            sent_size: metadata.size,
            sent_sha256: metadata.sha256.clone(),
        });
    }
    store
        .put_small(&metadata_key(key), metadata.to_json())
        .await?;
    Ok(())
}

/// Deletes the backups written like `made` (by the same EtcdBackup, of the same
/// cluster, directly under the prefix) beyond the `max` newest (snapshot, then its
/// metadata), never `made` itself nor the newest backup of another cluster ID (see
/// [`to_delete`]): call it only with a backup that [`take_backup`] verified. `max == 0`
/// keeps everything (and reads no metadata).
pub async fn retain(store: &BackupStore, made: &BackupMetadata, max: usize) -> Retention {
    let failed = |e: StoreError| Retention {
        error: Some(e.to_string()),
        ..Retention::default()
    };
    let backups = match store.list_backups().await {
        Ok(b) => b,
        Err(e) => return failed(e),
    };
    let named: Vec<StoredBackup> = backups
        .into_iter()
        .filter(|b| b.name.cluster == made.cluster)
        .collect();
    if max == 0 {
        return Retention {
            kept: named.len(),
            ..Retention::default()
        };
    }
    let described = match describe(store, named).await {
        Ok(d) => d,
        Err(e) => return failed(e),
    };
    let ours = count_written_like(&described, made);
    let mut retention = Retention::default();
    for key in to_delete(&described, made, max) {
        if let Err(e) = store.delete(&key).await {
            retention.error = Some(e.to_string());
            break;
        }
        let _ = store.delete(&metadata_key(&key)).await;
        retention.deleted.push(key);
    }
    retention.kept = ours - retention.deleted.len();
    retention
}

/// Each backup with its metadata object, `None` where that is missing or is no backup's
/// metadata; a store failure stops it (nothing is deleted on a partial reading).
async fn describe(
    store: &BackupStore,
    backups: Vec<StoredBackup>,
) -> Result<Vec<Described>, StoreError> {
    let mut described = Vec::with_capacity(backups.len());
    for backup in backups {
        let metadata = match store.get_small(&metadata_key(&backup.key)).await {
            Ok(bytes) => serde_json::from_slice(&bytes).ok(),
            Err(StoreError::ObjectNotFound(_)) => None,
            Err(e) => return Err(e),
        };
        described.push(Described { backup, metadata });
    }
    Ok(described)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backup::metadata::example;
    use crate::backup::store::memory;

    /// Stores a backup of `cluster` at `second` under `prefix` with its metadata, written
    /// by `uid` with `cluster_id`; returns the metadata.
    async fn put(
        store: &BackupStore,
        prefix: &str,
        cluster: &str,
        second: i64,
        uid: &str,
        cluster_id: &str,
    ) -> BackupMetadata {
        let name = BackupName::new(cluster, Timestamp::from_second(second).unwrap(), second);
        let key = name.key(prefix);
        let metadata = BackupMetadata {
            cluster_id: cluster_id.into(),
            revision: second,
            size: 1,
            time: name.time.to_string(),
            etcd_backup_uid: Some(uid.into()),
            ..example(cluster, &key)
        };
        store.put_small(&key, b"x".to_vec()).await.unwrap();
        store
            .put_small(&metadata_key(&key), metadata.to_json())
            .await
            .unwrap();
        metadata
    }

    async fn keys(store: &BackupStore) -> Vec<String> {
        store.backup_keys().await.unwrap()
    }

    #[tokio::test]
    async fn retention_deletes_only_what_this_etcdbackup_wrote_directly_under_its_prefix() {
        let store = memory("p");
        let old = put(&store, "p", "demo", 10, "nightly", "1a").await;
        let one_shot = put(&store, "p", "demo", 20, "one-shot", "1a").await;
        let nested = put(&store, "p/deeper", "demo", 25, "nightly", "1a").await;
        let earlier_cluster = put(&store, "p", "demo", 5, "nightly", "0e").await;
        let no_metadata = BackupName::new("demo", Timestamp::from_second(1).unwrap(), 1);
        store
            .put_small(&no_metadata.key("p"), b"x".to_vec())
            .await
            .unwrap();
        let made = put(&store, "p", "demo", 30, "nightly", "1a").await;

        let retention = retain(&store, &made, 1).await;
        assert_eq!(retention.error, None);
        assert_eq!(retention.deleted, vec![old.key.clone()]);
        // Kept: the new one, and the newest of the earlier cluster ID.
        assert_eq!(retention.kept, 2);
        let mut want = vec![
            made.key.clone(),
            one_shot.key.clone(),
            earlier_cluster.key.clone(),
            no_metadata.key("p"),
        ];
        want.sort();
        assert_eq!(keys(&store).await, want);
        assert!(store.exists(&metadata_key(&old.key)).await.is_err());
        assert!(store.exists(&nested.key).await.is_ok());
    }
}
