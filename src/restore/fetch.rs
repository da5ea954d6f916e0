//! What a restoring seed's first init container runs (`etcd-operator snapshot-fetch`):
//! the snapshot streamed from the store into a file in the member's data volume, its
//! sha256 and size checked against what the restore verified, and etcd's own trailing
//! checksum checked too, all while it streams (never the whole snapshot in memory). The
//! file appears under its name only once every check passed.

use std::path::{Path, PathBuf};

use futures::StreamExt;
use tokio::io::AsyncWriteExt;

use crate::backup::credentials::{CredentialsError, S3Credentials};
use crate::backup::integrity::{IntegrityError, SnapshotVerifier};
use crate::backup::store::{BackupStore, Location, StoreConfig, StoreError, StoreTimeouts};
use crate::secret_data::SecretData;

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

/// The snapshot of an empty etcd (3.4.23, restorable by `etcdctl` 3.4 and `etcdutl` 3.5 and
/// 3.6), written instead of a fetch when the member's data directory exists already.
///
/// The steps of a restoring seed run again whenever its pod sandbox is made anew (a node
/// reboot), and etcd images have no shell: the restore step always runs etcd's tool on
/// the fetched file. Over data in place, the tool restores this placeholder (20 KB, in
/// milliseconds) and [`place`] throws its output away, instead of the real snapshot being
/// fetched again (from a store, with a Secret, that may be gone by then).
pub const PLACEHOLDER: &[u8] = include_bytes!("placeholder.db");

/// What [`prepare`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Prepared {
    /// No data directory: the snapshot is to be fetched.
    Fetch,
    /// The member's data directory exists (an earlier run of these steps placed it, and
    /// etcd may have written to it since): [`PLACEHOLDER`] was written instead.
    DataInPlace,
}

/// The fetch step's start: an interrupted earlier run's leftovers beside the data
/// directory are removed (the restored directory, which only etcd's tool ever wrote and
/// etcd never ran on, and a partial download), then, when `data_dir` holds the member's
/// data already, [`PLACEHOLDER`] is written to `out` and nothing is fetched.
pub fn prepare(restored: &Path, data_dir: &Path, out: &Path) -> std::io::Result<Prepared> {
    remove_dir_if_present(restored)?;
    remove_file_if_present(&out.with_extension("partial"))?;
    if data_dir.exists() {
        std::fs::write(out, PLACEHOLDER)?;
        return Ok(Prepared::DataInPlace);
    }
    Ok(Prepared::Fetch)
}

/// The last step before etcd starts (`etcd-operator snapshot-place`): the restored data
/// directory becomes the member's, unless the member has one already (an earlier run of
/// these steps placed it): then it stays, and the restored copy is removed. The fetched
/// file is removed either way. A restore of [`PLACEHOLDER`] is never placed: the data
/// directory it stood in for has gone since the fetch step, and an empty member must not
/// start under the restored cluster's name.
pub fn place(restored: &Path, data_dir: &Path, snapshot: &Path) -> Result<Placed, PlaceError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| PlaceError::Io { path, source }
    };
    let placed = if data_dir.exists() {
        remove_dir_if_present(restored).map_err(io(restored))?;
        Placed::Kept
    } else if std::fs::read(snapshot).is_ok_and(|bytes| bytes == PLACEHOLDER) {
        return Err(PlaceError::DataVanished {
            data_dir: data_dir.to_path_buf(),
        });
    } else {
        std::fs::rename(restored, data_dir).map_err(io(restored))?;
        Placed::Moved
    };
    remove_file_if_present(snapshot).map_err(io(snapshot))?;
    Ok(placed)
}

/// What [`place`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placed {
    /// The restored directory is now the data directory.
    Moved,
    /// A data directory was there already and stays; the restored copy was removed.
    Kept,
}

/// Why [`place`] failed.
#[derive(Debug, thiserror::Error)]
pub enum PlaceError {
    /// A file or directory could not be moved or removed.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The data directory existed when the fetch step ran and is gone now.
    #[error(
        "{data_dir} held the member's data when this pod's restore steps began and is \
         gone now; an empty member is not started in its place"
    )]
    DataVanished {
        /// The member's data directory.
        data_dir: PathBuf,
    },
}

fn remove_dir_if_present(dir: &Path) -> std::io::Result<()> {
    match std::fs::remove_dir_all(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

fn remove_file_if_present(file: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(file) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
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

    /// A directory of this test with `restored/member`, `restore.db` and no data.
    fn volume(label: &str) -> (PathBuf, PathBuf, PathBuf, PathBuf) {
        let dir = std::env::temp_dir().join(format!("eo-{label}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("restored/member")).unwrap();
        std::fs::write(dir.join("restore.db"), b"x").unwrap();
        let paths = (
            dir.join("restored"),
            dir.join("data"),
            dir.join("restore.db"),
        );
        (dir, paths.0, paths.1, paths.2)
    }

    fn entries(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn placing_moves_the_restored_directory_and_removes_the_snapshot() {
        let (dir, restored, data, file) = volume("place");
        assert_eq!(place(&restored, &data, &file).unwrap(), Placed::Moved);
        assert!(data.join("member").is_dir());
        assert_eq!(entries(&dir), ["data"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn steps_run_again_over_data_in_place_fetch_nothing_keep_the_data_and_leave_nothing_beside_it()
    {
        let (dir, restored, data, file) = volume("again");
        place(&restored, &data, &file).unwrap();
        std::fs::write(data.join("member/written-by-etcd"), b"y").unwrap();
        // A new sandbox: an interrupted download and restore are there too.
        std::fs::write(file.with_extension("partial"), b"part").unwrap();
        std::fs::create_dir_all(restored.join("member")).unwrap();
        assert_eq!(
            prepare(&restored, &data, &file).unwrap(),
            Prepared::DataInPlace
        );
        assert_eq!(std::fs::read(&file).unwrap(), PLACEHOLDER);
        assert!(!restored.exists());
        // etcd's tool restores the placeholder; placing throws the copy away.
        std::fs::create_dir_all(restored.join("member")).unwrap();
        assert_eq!(place(&restored, &data, &file).unwrap(), Placed::Kept);
        assert!(data.join("member/written-by-etcd").exists());
        assert_eq!(entries(&dir), ["data"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_interrupted_first_restore_is_cleared_and_fetched_again() {
        let (dir, restored, data, file) = volume("interrupted");
        assert_eq!(prepare(&restored, &data, &file).unwrap(), Prepared::Fetch);
        assert!(!restored.exists() && !data.exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_restore_of_the_placeholder_is_never_placed_where_the_data_vanished() {
        let (dir, restored, data, file) = volume("vanished");
        std::fs::write(&file, PLACEHOLDER).unwrap();
        let err = place(&restored, &data, &file).unwrap_err();
        assert!(matches!(err, PlaceError::DataVanished { .. }), "{err}");
        assert!(!data.exists(), "no empty member is placed");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_placeholder_is_an_etcd_snapshot_whose_checksum_holds() {
        assert!(verifier(PLACEHOLDER).finish().is_ok());
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
