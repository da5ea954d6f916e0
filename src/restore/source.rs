//! Which snapshot a restore uses, and whether it is sound: the path names one snapshot,
//! or a prefix (then the newest snapshot under it whose metadata object verifies); the
//! metadata must describe that snapshot, and the stored bytes must have its size and
//! sha256 and end with etcd's own checksum. Read by streaming, never held whole.

use futures::StreamExt;

use super::reason::RestoreReason;
use crate::api::s3::split_path;
use crate::backup::integrity::SnapshotVerifier;
use crate::backup::metadata::BackupMetadata;
use crate::backup::naming::{SNAPSHOT_SUFFIX, metadata_key};
use crate::backup::retention::StoredBackup;
use crate::backup::store::{BackupStore, StoreError};

/// What a restore's `path` names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup {
    /// One snapshot: `<bucket>/<key>` with a key ending in `.db`.
    Exact {
        /// Bucket.
        bucket: String,
        /// The snapshot's key.
        key: String,
    },
    /// Every snapshot under `<bucket>/<prefix>`: the newest whose metadata verifies.
    Prefix {
        /// Bucket.
        bucket: String,
        /// Prefix (may be empty).
        prefix: String,
    },
}

impl Lookup {
    /// What `path` names: a key ending in `.db` is one snapshot, anything else a prefix.
    pub fn of(path: &str) -> Self {
        let (bucket, rest) = split_path(path);
        let (bucket, rest) = (bucket.to_string(), rest.to_string());
        if rest.ends_with(SNAPSHOT_SUFFIX) {
            Lookup::Exact { bucket, key: rest }
        } else {
            Lookup::Prefix {
                bucket,
                prefix: rest,
            }
        }
    }

    /// The bucket.
    pub fn bucket(&self) -> &str {
        match self {
            Lookup::Exact { bucket, .. } | Lookup::Prefix { bucket, .. } => bucket,
        }
    }

    /// The prefix a store for this lookup lists (empty for one snapshot).
    pub fn prefix(&self) -> &str {
        match self {
            Lookup::Exact { .. } => "",
            Lookup::Prefix { prefix, .. } => prefix,
        }
    }
}

/// Why no sound snapshot was found.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// Nothing to restore at the path.
    #[error("{0}")]
    NotFound(String),
    /// The metadata object beside the snapshot is missing or does not describe it.
    #[error(transparent)]
    InvalidMetadata(#[from] MetadataError),
    /// The stored bytes are not what the metadata says, or not a sound etcd snapshot.
    #[error("{0}")]
    ChecksumMismatch(String),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl SourceError {
    /// The reason status and Events give.
    pub fn reason(&self) -> RestoreReason {
        match self {
            SourceError::NotFound(_) => RestoreReason::BackupNotFound,
            SourceError::InvalidMetadata(_) => RestoreReason::InvalidMetadata,
            SourceError::ChecksumMismatch(_) => RestoreReason::ChecksumMismatch,
            SourceError::Store(e) => RestoreReason::from(e),
        }
    }
}

/// The snapshots under a prefix, newest first (by the time in their names, then by
/// revision).
pub fn newest_first(mut backups: Vec<StoredBackup>) -> Vec<StoredBackup> {
    backups.sort_by(|a, b| {
        (b.name.time, b.name.revision, &b.key).cmp(&(a.name.time, a.name.revision, &a.key))
    });
    backups
}

/// Why a snapshot's metadata object cannot be used (the snapshot then is not used).
#[derive(Debug, thiserror::Error)]
pub enum MetadataError {
    /// There is none beside the snapshot.
    #[error(
        "snapshot {snapshot} has no metadata object beside it ({metadata}): its checksum \
         cannot be known, it is not used"
    )]
    Missing {
        /// Where the snapshot is (`<bucket>/<key>`).
        snapshot: String,
        /// The key the metadata object would have.
        metadata: String,
    },
    /// The object is not a backup's metadata.
    #[error("the metadata of {key} is not a backup's metadata: {source}")]
    NotMetadata {
        /// The snapshot's key.
        key: String,
        /// Why it does not parse.
        source: serde_json::Error,
    },
    /// It describes another snapshot.
    #[error("the metadata beside {key} describes another snapshot ({described})")]
    OtherSnapshot {
        /// The snapshot's key.
        key: String,
        /// The key it names.
        described: String,
    },
    /// It gives no sha256 and size to check the bytes against.
    #[error("the metadata of {key} has no usable sha256 and size ({sha256:?}, {size})")]
    NoChecksum {
        /// The snapshot's key.
        key: String,
        /// The sha256 it gives.
        sha256: String,
        /// The size it gives.
        size: u64,
    },
    /// It names no etcd version, so the version rule cannot be applied.
    #[error("the metadata of {key} names no etcd version ({version:?})")]
    NoVersion {
        /// The snapshot's key.
        key: String,
        /// The version it gives.
        version: String,
    },
}

/// The metadata object of snapshot `key`, checked: it parses, names `key`, and gives a
/// size, a sha256 and an etcd version.
pub fn check_metadata(key: &str, bytes: &[u8]) -> Result<BackupMetadata, MetadataError> {
    let metadata: BackupMetadata =
        serde_json::from_slice(bytes).map_err(|source| MetadataError::NotMetadata {
            key: key.to_string(),
            source,
        })?;
    if metadata.key != key {
        return Err(MetadataError::OtherSnapshot {
            key: key.to_string(),
            described: metadata.key,
        });
    }
    let hex = metadata.sha256.len() == 64 && metadata.sha256.bytes().all(|b| b.is_ascii_hexdigit());
    if !hex || metadata.size == 0 {
        return Err(MetadataError::NoChecksum {
            key: key.to_string(),
            sha256: metadata.sha256,
            size: metadata.size,
        });
    }
    if metadata
        .etcd_version
        .parse::<etcd_operator_core::lifecycle::Version>()
        .is_err()
    {
        return Err(MetadataError::NoVersion {
            key: key.to_string(),
            version: metadata.etcd_version,
        });
    }
    Ok(metadata)
}

/// The metadata of snapshot `key` in `store`, checked.
async fn metadata_of(store: &BackupStore, key: &str) -> Result<BackupMetadata, SourceError> {
    match store.get_small(&metadata_key(key)).await {
        Ok(bytes) => Ok(check_metadata(key, &bytes)?),
        Err(StoreError::ObjectNotFound(_)) => {
            // Tell a missing snapshot from one without metadata.
            match store.exists(key).await {
                Ok(()) => Err(MetadataError::Missing {
                    snapshot: store.path_of(key),
                    metadata: metadata_key(key),
                }
                .into()),
                Err(StoreError::ObjectNotFound(_)) => Err(SourceError::NotFound(format!(
                    "no snapshot {} in the store",
                    store.path_of(key)
                ))),
                Err(e) => Err(e.into()),
            }
        }
        Err(e) => Err(e.into()),
    }
}

/// The cluster whose own snapshots a lookup under a prefix takes (a recovery's): its name
/// and namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    /// The EtcdCluster's name (the cluster in backup names and metadata).
    pub cluster: String,
    /// Its namespace (the metadata's `namespace`, which the EtcdBackup that wrote it
    /// records).
    pub namespace: String,
}

impl Owner {
    /// Whether `metadata` is of this cluster: its name and namespace both. Metadata that
    /// records no namespace (written before it was recorded) is never this cluster's.
    pub fn owns(&self, metadata: &BackupMetadata) -> bool {
        metadata.cluster == self.cluster
            && metadata.namespace.as_deref() == Some(self.namespace.as_str())
    }
}

/// The snapshot `lookup` names, with its checked metadata: the one named, or the newest
/// directly under the prefix whose metadata verifies, of any cluster.
pub async fn resolve(store: &BackupStore, lookup: &Lookup) -> Result<BackupMetadata, SourceError> {
    resolve_for(store, lookup, None).await
}

/// [`resolve`], and under a prefix only `owner`'s snapshots when one is given (a
/// recovery's lookup: another cluster's data is never restored into it); the snapshot a
/// path names exactly is used as named.
pub async fn resolve_for(
    store: &BackupStore,
    lookup: &Lookup,
    owner: Option<&Owner>,
) -> Result<BackupMetadata, SourceError> {
    let prefix = match lookup {
        Lookup::Exact { key, .. } => return metadata_of(store, key).await,
        Lookup::Prefix { prefix, .. } => prefix,
    };
    let mut skipped = Vec::new();
    let mut others = 0;
    let named = |b: &StoredBackup| owner.is_none_or(|o| b.name.cluster == o.cluster);
    for backup in newest_first(store.list_backups().await?)
        .into_iter()
        .filter(named)
    {
        match metadata_of(store, &backup.key).await {
            Ok(metadata) if owner.is_none_or(|o| o.owns(&metadata)) => return Ok(metadata),
            Ok(_) => others += 1,
            Err(SourceError::Store(e)) => return Err(SourceError::Store(e)),
            Err(e) => skipped.push(e.to_string()),
        }
    }
    if let (Some(owner), true) = (owner, others > 0) {
        skipped.push(format!(
            "{others} snapshot(s) named {} are of another namespace than {} or record none \
             (written before backups recorded it)",
            owner.cluster, owner.namespace
        ));
    }
    let place = format!("{}/{prefix}", lookup.bucket());
    Err(SourceError::NotFound(if skipped.is_empty() {
        format!("no snapshot under {place}")
    } else {
        format!(
            "no snapshot under {place} has metadata that verifies: {}",
            skipped.join("; ")
        )
    }))
}

/// Reads the snapshot through and checks its size and sha256 against `metadata`, and
/// etcd's own checksum at its end.
pub async fn verify(store: &BackupStore, metadata: &BackupMetadata) -> Result<(), SourceError> {
    let mut stream = std::pin::pin!(store.get_stream(&metadata.key).await?);
    let mut verifier = SnapshotVerifier::new();
    while let Some(chunk) = stream.next().await {
        verifier.update(&chunk?);
    }
    let path = store.path_of(&metadata.key);
    let size = verifier.size();
    let verified = verifier
        .finish()
        .map_err(|e| SourceError::ChecksumMismatch(format!("snapshot {path} is not sound: {e}")))?;
    if size != metadata.size || verified.sha256 != metadata.sha256 {
        return Err(SourceError::ChecksumMismatch(format!(
            "snapshot {path} is {size} bytes with sha256 {}, but its metadata says {} bytes \
             with sha256 {}",
            verified.sha256, metadata.size, metadata.sha256
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backup::metadata::example;
    use crate::backup::naming::BackupName;

    fn stored(cluster: &str, time: &str, revision: i64) -> StoredBackup {
        let name = BackupName::new(cluster, time.parse().unwrap(), revision);
        StoredBackup {
            key: name.key("p"),
            name,
        }
    }

    fn metadata(key: &str) -> BackupMetadata {
        BackupMetadata {
            etcd_backup_uid: Some("uid".into()),
            ..example("c", key)
        }
    }

    /// Stores a snapshot of `cluster` in `namespace` at `second` under `prefix`, with its
    /// metadata; returns its key.
    async fn put(
        store: &BackupStore,
        prefix: &str,
        cluster: &str,
        namespace: Option<&str>,
        second: i64,
    ) -> String {
        let name = BackupName::new(cluster, jiff::Timestamp::from_second(second).unwrap(), 7);
        let key = name.key(prefix);
        let described = BackupMetadata {
            cluster: cluster.into(),
            namespace: namespace.map(str::to_string),
            ..metadata(&key)
        };
        store.put_small(&key, b"x".to_vec()).await.unwrap();
        store
            .put_small(&metadata_key(&key), described.to_json())
            .await
            .unwrap();
        key
    }

    fn demo_in_prod() -> Owner {
        Owner {
            cluster: "demo".into(),
            namespace: "prod".into(),
        }
    }

    #[tokio::test]
    async fn a_recovery_lookup_takes_only_its_own_clusters_snapshots_by_name_and_namespace() {
        let store = crate::backup::store::memory("backups");
        let ours = put(&store, "backups", "demo", Some("prod"), 10).await;
        // Each newer, none of them this cluster's own.
        put(&store, "backups", "demo", Some("staging"), 20).await;
        put(&store, "backups", "other", Some("prod"), 30).await;
        put(&store, "backups", "demo", None, 40).await;
        put(&store, "backups/deeper", "demo", Some("prod"), 50).await;
        let lookup = Lookup::of("bucket/backups");
        let found = resolve_for(&store, &lookup, Some(&demo_in_prod()))
            .await
            .unwrap();
        assert_eq!(found.key, ours);
    }

    #[tokio::test]
    async fn a_recovery_lookup_with_only_other_clusters_snapshots_finds_none_and_says_why() {
        let store = crate::backup::store::memory("backups");
        put(&store, "backups", "demo", Some("staging"), 20).await;
        put(&store, "backups", "demo", None, 40).await;
        let lookup = Lookup::of("bucket/backups");
        let err = resolve_for(&store, &lookup, Some(&demo_in_prod()))
            .await
            .unwrap_err();
        assert_eq!(err.reason(), RestoreReason::BackupNotFound);
        assert!(err.to_string().contains("another namespace"), "{err}");
    }

    #[tokio::test]
    async fn a_restore_lookup_under_a_prefix_never_takes_a_snapshot_under_a_deeper_one() {
        let store = crate::backup::store::memory("backups");
        let direct = put(&store, "backups", "demo", Some("prod"), 10).await;
        put(&store, "backups/deeper", "other", Some("prod"), 50).await;
        let found = resolve(&store, &Lookup::of("bucket/backups"))
            .await
            .unwrap();
        assert_eq!(found.key, direct);
    }

    #[tokio::test]
    async fn an_exact_path_names_its_snapshot_whatever_its_cluster() {
        let store = crate::backup::store::memory("");
        let key = put(&store, "backups/deeper", "other", None, 50).await;
        let lookup = Lookup::of(&format!("bucket/{key}"));
        let found = resolve_for(&store, &lookup, Some(&demo_in_prod()))
            .await
            .unwrap();
        assert_eq!(found.key, key);
    }

    #[test]
    fn a_path_ending_in_db_names_one_snapshot_and_any_other_a_prefix() {
        assert_eq!(
            Lookup::of("etcd-backups/ns/c_20261130T103300.123Z_r7.db"),
            Lookup::Exact {
                bucket: "etcd-backups".into(),
                key: "ns/c_20261130T103300.123Z_r7.db".into()
            }
        );
        assert_eq!(
            Lookup::of("etcd-backups/ns/prod/"),
            Lookup::Prefix {
                bucket: "etcd-backups".into(),
                prefix: "ns/prod".into()
            }
        );
        assert_eq!(Lookup::of("etcd-backups").prefix(), "");
    }

    #[test]
    fn snapshots_under_a_prefix_are_tried_newest_first() {
        let order = newest_first(vec![
            stored("a", "2026-01-01T00:00:01Z", 50),
            stored("b", "2026-01-01T00:00:03Z", 10),
            stored("a", "2026-01-01T00:00:02Z", 90),
        ]);
        let revisions: Vec<i64> = order.iter().map(|b| b.name.revision).collect();
        assert_eq!(revisions, [10, 90, 50]);
    }

    #[test]
    fn metadata_that_describes_its_snapshot_verifies() {
        let key = "p/c_20261130T103300.123Z_r7.db";
        let bytes = metadata(key).to_json();
        assert_eq!(check_metadata(key, &bytes).unwrap(), metadata(key));
    }

    #[test]
    fn metadata_of_another_snapshot_or_without_a_sum_or_version_is_refused() {
        let key = "p/c_20261130T103300.123Z_r7.db";
        let other = metadata("p/other.db").to_json();
        let refusal = check_metadata(key, &other).unwrap_err();
        assert!(
            matches!(refusal, MetadataError::OtherSnapshot { .. }),
            "{refusal}"
        );
        assert!(
            refusal.to_string().contains("another snapshot"),
            "{refusal}"
        );
        let no_sum = BackupMetadata {
            sha256: "x".into(),
            ..metadata(key)
        };
        let refusal = check_metadata(key, &no_sum.to_json()).unwrap_err();
        assert!(
            matches!(refusal, MetadataError::NoChecksum { .. }),
            "{refusal}"
        );
        let no_version = BackupMetadata {
            etcd_version: "latest".into(),
            ..metadata(key)
        };
        let refusal = check_metadata(key, &no_version.to_json()).unwrap_err();
        assert!(
            matches!(refusal, MetadataError::NoVersion { .. }),
            "{refusal}"
        );
        let refusal = check_metadata(key, b"{not json").unwrap_err();
        assert!(
            matches!(refusal, MetadataError::NotMetadata { .. }),
            "{refusal}"
        );
    }
}
