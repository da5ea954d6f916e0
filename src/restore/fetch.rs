//! What a restoring seed's first init container runs (`etcd-operator snapshot-fetch`):
//! the snapshot streamed from the store into a file in the member's data volume, its
//! sha256 and size checked against what the restore verified, and etcd's own trailing
//! checksum checked too, all while it streams (never the whole snapshot in memory). The
//! file appears under its name only once every check passed.

use std::path::{Path, PathBuf};

use futures::StreamExt;
use tokio::io::AsyncWriteExt;

use crate::backup::credentials::{CredentialsError, S3Credentials, SecretData};
use crate::backup::integrity::{IntegrityError, SnapshotVerifier};
use crate::backup::store::{BackupStore, Location, StoreConfig, StoreError, StoreTimeouts};

/// The snapshot to fetch and what it must be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expected {
    /// The object's key.
    pub key: String,
    /// sha256 (hex) of the stored bytes.
    pub sha256: String,
    /// Bytes stored.
    pub size: u64,
}

/// Why a fetch failed.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The credentials directory could not be read or holds no usable credentials.
    #[error("credentials in {dir}: {message}")]
    Credentials {
        /// The directory (the mounted Secret).
        dir: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The local file could not be written.
    #[error("writing {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The bytes are not the ones the restore verified.
    #[error(
        "snapshot {key} is {size} bytes with sha256 {sha256}, but the restore verified \
         {expected_size} bytes with sha256 {expected_sha256}: it changed or is corrupt"
    )]
    Mismatch {
        /// The object.
        key: String,
        /// Bytes read.
        size: u64,
        /// Their sha256.
        sha256: String,
        /// Bytes expected.
        expected_size: u64,
        /// sha256 expected.
        expected_sha256: String,
    },
    /// etcd's own checksum at the end of the snapshot does not match.
    #[error("snapshot {key}: {source}")]
    Integrity {
        /// The object.
        key: String,
        /// What is wrong.
        source: IntegrityError,
    },
}

/// A Secret mounted as a directory, read back as its data (one file per key; the
/// kubelet's hidden `..data` entries skipped).
pub fn secret_from_dir(dir: &Path) -> Result<SecretData, FetchError> {
    let err = |e: std::io::Error| FetchError::Credentials {
        dir: dir.to_path_buf(),
        message: e.to_string(),
    };
    let mut data = SecretData::new();
    for entry in std::fs::read_dir(dir).map_err(err)? {
        let entry = entry.map_err(err)?;
        let name = entry.file_name().to_string_lossy().to_string();
        if name.starts_with('.') || !entry.path().is_file() {
            continue;
        }
        data.insert(name, std::fs::read(entry.path()).map_err(err)?);
    }
    Ok(data)
}

/// S3 credentials from a mounted Secret.
pub fn s3_credentials(dir: &Path) -> Result<S3Credentials, FetchError> {
    let data = secret_from_dir(dir)?;
    S3Credentials::from_secret(&data).map_err(|e: CredentialsError| FetchError::Credentials {
        dir: dir.to_path_buf(),
        message: e.to_string(),
    })
}

/// The store of a bucket (no prefix: keys are whole).
pub fn s3_store(
    bucket: &str,
    endpoint: Option<&str>,
    force_path_style: bool,
    credentials: S3Credentials,
) -> Result<BackupStore, StoreError> {
    let config = StoreConfig::S3 {
        location: Location {
            bucket: bucket.to_string(),
            prefix: String::new(),
        },
        endpoint: endpoint.map(str::to_string),
        force_path_style,
        credentials,
    };
    BackupStore::open(&config, StoreTimeouts::default())
}

/// Streams `expected` from `store` into `out` (through `out.partial`, renamed into place
/// only when the size, the sha256 and etcd's own checksum all match).
pub async fn fetch_snapshot(
    store: &BackupStore,
    expected: &Expected,
    out: &Path,
) -> Result<(), FetchError> {
    let partial = out.with_extension("partial");
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| FetchError::Io { path, source }
    };
    let mut file = tokio::fs::File::create(&partial)
        .await
        .map_err(io(&partial))?;
    let mut verifier = SnapshotVerifier::new();
    let mut stream = std::pin::pin!(store.get_stream(&expected.key).await?);
    while let Some(chunk) = stream.next().await {
        let chunk = chunk?;
        verifier.update(&chunk);
        file.write_all(&chunk).await.map_err(io(&partial))?;
    }
    file.sync_all().await.map_err(io(&partial))?;
    drop(file);
    let checked = check(expected, verifier);
    if let Err(e) = checked {
        let _ = tokio::fs::remove_file(&partial).await;
        return Err(e);
    }
    tokio::fs::rename(&partial, out).await.map_err(io(out))
}

/// The stream's size and sha256 against `expected`, then etcd's own checksum.
fn check(expected: &Expected, verifier: SnapshotVerifier) -> Result<(), FetchError> {
    let size = verifier.size();
    let whole = verifier.clone().finish();
    let sha256 = match &whole {
        Ok(v) => v.sha256.clone(),
        Err(_) => String::from("(not an etcd snapshot)"),
    };
    if size != expected.size || (whole.is_ok() && sha256 != expected.sha256) {
        return Err(FetchError::Mismatch {
            key: expected.key.clone(),
            size,
            sha256,
            expected_size: expected.size,
            expected_sha256: expected.sha256.clone(),
        });
    }
    whole.map(drop).map_err(|source| FetchError::Integrity {
        key: expected.key.clone(),
        source,
    })
}

/// Moves a data directory left by an earlier, interrupted restore out of the way (a
/// rename beside it, never a deletion), so that etcd's tool finds no directory there.
pub fn set_aside(restored: &Path) -> std::io::Result<Option<PathBuf>> {
    if !restored.exists() {
        return Ok(None);
    }
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or_default();
    let mut aside = restored.as_os_str().to_owned();
    aside.push(format!(".unused-{stamp}"));
    let aside = PathBuf::from(aside);
    std::fs::rename(restored, &aside)?;
    Ok(Some(aside))
}

/// The last step before etcd starts (`etcd-operator snapshot-place`): the restored data
/// directory becomes the member's, unless the member has one already (an earlier run of
/// these steps placed it, and etcd may have written to it since): then it stays, and the
/// new one is set aside. The fetched snapshot file is removed.
pub fn place(restored: &Path, data_dir: &Path, snapshot: &Path) -> std::io::Result<Placed> {
    let placed = if data_dir.exists() {
        Placed::Kept(set_aside(restored)?)
    } else {
        std::fs::rename(restored, data_dir)?;
        Placed::Moved
    };
    match std::fs::remove_file(snapshot) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    Ok(placed)
}

/// What [`place`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placed {
    /// The restored directory is now the data directory.
    Moved,
    /// A data directory was there already and stays; the restored one (if any) was set
    /// aside there.
    Kept(Option<PathBuf>),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backup::integrity::sha256_hex;
    use sha2::{Digest, Sha256};

    fn snapshot(pages: usize) -> Vec<u8> {
        let mut db: Vec<u8> = (0..pages * 512).map(|i| (i % 253) as u8).collect();
        let sum = Sha256::digest(&db);
        db.extend_from_slice(&sum);
        db
    }

    fn verifier(bytes: &[u8]) -> SnapshotVerifier {
        let mut v = SnapshotVerifier::new();
        for chunk in bytes.chunks(100) {
            v.update(chunk);
        }
        v
    }

    fn expected(bytes: &[u8]) -> Expected {
        Expected {
            key: "p/c_20261130T103300.123Z_r7.db".into(),
            sha256: sha256_hex(bytes),
            size: bytes.len() as u64,
        }
    }

    #[test]
    fn the_snapshot_the_restore_verified_passes() {
        let bytes = snapshot(3);
        assert!(check(&expected(&bytes), verifier(&bytes)).is_ok());
    }

    #[test]
    fn another_object_under_the_same_key_is_refused() {
        let bytes = snapshot(3);
        let other = snapshot(4);
        let err = check(&expected(&bytes), verifier(&other)).unwrap_err();
        assert!(matches!(err, FetchError::Mismatch { .. }), "{err}");
    }

    #[test]
    fn a_flipped_byte_is_refused_even_when_the_expected_sum_was_of_the_flipped_bytes() {
        let mut bytes = snapshot(3);
        bytes[600] ^= 0x40;
        let err = check(&expected(&bytes), verifier(&bytes)).unwrap_err();
        assert!(matches!(err, FetchError::Integrity { .. }), "{err}");
        let good = snapshot(3);
        assert!(check(&expected(&good), verifier(&bytes)).is_err());
    }

    #[test]
    fn placing_moves_the_restored_directory_unless_data_is_there_already() {
        let dir = std::env::temp_dir().join(format!("eo-place-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("restored/member")).unwrap();
        std::fs::write(dir.join("restore.db"), b"x").unwrap();
        let (restored, data, file) = (
            dir.join("restored"),
            dir.join("data"),
            dir.join("restore.db"),
        );
        assert_eq!(place(&restored, &data, &file).unwrap(), Placed::Moved);
        assert!(data.join("member").is_dir() && !restored.exists() && !file.exists());
        // Run again (a new sandbox): the data in place stays, the new copy is set aside.
        std::fs::create_dir_all(restored.join("member")).unwrap();
        std::fs::write(data.join("member/written-by-etcd"), b"y").unwrap();
        let Placed::Kept(Some(aside)) = place(&restored, &data, &file).unwrap() else {
            panic!("the data in place must be kept");
        };
        assert!(aside.join("member").is_dir());
        assert!(data.join("member/written-by-etcd").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_mounted_secret_reads_back_as_its_keys() {
        let dir = std::env::temp_dir().join(format!("eo-secret-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("..2026_data")).unwrap();
        std::fs::write(dir.join("accessKey"), b"AK\n").unwrap();
        std::fs::write(dir.join("secretKey"), b"SK").unwrap();
        let credentials = s3_credentials(&dir).unwrap();
        assert_eq!(
            (
                credentials.access_key.as_str(),
                credentials.secret_key.as_str()
            ),
            ("AK", "SK")
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
