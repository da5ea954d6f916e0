//! A cluster bootstrapped from a snapshot: where the snapshot is, and which etcd may read it.
//!
//! An EtcdCluster made by an EtcdRestore carries its [`SnapshotSource`] in its spec. The
//! seed decision takes it as data: the seed's pod then restores the snapshot into its data
//! directory before etcd starts (a new cluster ID, the seed's own name and peer URL); the
//! other members join as for any cluster and receive the data from the seed through raft.
//! Only the seed of a cluster that never bootstrapped ever reads it.

use serde::Serialize;

use super::Version;

/// A verified snapshot in an object store, as the seed's pod fetches it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotSource {
    /// Bucket of the store.
    pub bucket: String,
    /// The snapshot's key in the bucket.
    pub key: String,
    /// URL of an S3-compatible store; `None`: AWS.
    pub endpoint: Option<String>,
    /// Path-style addressing of buckets.
    pub force_path_style: bool,
    /// The Secret (in the cluster's namespace) with the store's credentials.
    pub secret: String,
    /// sha256 (hex) of the stored object, checked while it is fetched.
    pub sha256: String,
    /// Bytes of the stored object.
    pub size: u64,
    /// etcd version the snapshot was taken from.
    pub etcd_version: String,
    /// The snapshot's revision.
    pub revision: i64,
    /// The etcd cluster ID of the cluster the snapshot was taken from (its metadata's
    /// `clusterID`); `None` when not known (a spec written before it was recorded, or
    /// metadata whose ID is not hexadecimal).
    pub cluster_id: Option<u64>,
}

impl SnapshotSource {
    /// `<bucket>/<key>`, as status and Events name it.
    pub fn path(&self) -> String {
        format!("{}/{}", self.bucket, self.key)
    }
}

/// Why a snapshot cannot be restored with an etcd version.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unreadable {
    /// The snapshot's version is not a release version.
    #[error("the snapshot's etcd version {0:?} is not a release version")]
    BadVersion(String),
    /// The snapshot comes from a newer etcd than the one that would restore it.
    #[error(
        "the snapshot was taken by etcd {snapshot}, newer than etcd {target}: an older etcd \
         cannot be trusted to read a newer one's data"
    )]
    Newer {
        /// The snapshot's version.
        snapshot: Version,
        /// The version that would restore it.
        target: Version,
    },
    /// More than one minor version apart (etcd upgrades one minor at a time).
    #[error(
        "the snapshot was taken by etcd {snapshot} and etcd {target} would restore it: \
         more than one minor version apart (etcd moves one minor version at a time)"
    )]
    TooFarApart {
        /// The snapshot's version.
        snapshot: Version,
        /// The version that would restore it.
        target: Version,
    },
}

/// Whether etcd `target` may restore a snapshot taken by etcd `snapshot`: the same minor
/// version (any patch: a patch release keeps the storage format) or the next one; never
/// an older minor than the snapshot's, never across a major version.
pub fn check_readable(snapshot: &str, target: &Version) -> Result<(), Unreadable> {
    let snapshot: Version = snapshot
        .parse()
        .map_err(|_| Unreadable::BadVersion(snapshot.to_string()))?;
    let (s, t) = (
        (snapshot.major, snapshot.minor),
        (target.major, target.minor),
    );
    if s > t {
        return Err(Unreadable::Newer {
            snapshot,
            target: target.clone(),
        });
    }
    if s.0 != t.0 || t.1 - s.1 > 1 {
        return Err(Unreadable::TooFarApart {
            snapshot,
            target: target.clone(),
        });
    }
    Ok(())
}

/// Whether `version` restores snapshots with `etcdutl` (3.5 and later) rather than with
/// `etcdctl` (3.4, where `etcdutl` does not exist yet).
pub fn restores_with_etcdutl(version: &Version) -> bool {
    (version.major, version.minor) >= (3, 5)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(text: &str) -> Version {
        text.parse().unwrap()
    }

    #[test]
    fn the_same_minor_or_the_next_reads_a_snapshot() {
        for (snapshot, target) in [
            ("3.5.35", "3.5.35"),
            ("3.5.35", "3.5.10"),
            ("3.5.10", "3.5.35"),
            ("3.4.23", "3.5.35"),
            ("3.5.35", "3.6.16"),
        ] {
            assert_eq!(check_readable(snapshot, &v(target)), Ok(()), "{snapshot}");
        }
    }

    #[test]
    fn a_snapshot_of_a_newer_minor_is_refused() {
        let err = check_readable("3.6.16", &v("3.5.35")).unwrap_err();
        assert!(matches!(err, Unreadable::Newer { .. }), "{err}");
        assert!(err.to_string().contains("3.6.16"), "{err}");
    }

    #[test]
    fn a_snapshot_two_minors_older_or_of_another_major_is_refused() {
        let err = check_readable("3.4.23", &v("3.6.16")).unwrap_err();
        assert!(matches!(err, Unreadable::TooFarApart { .. }), "{err}");
        let err = check_readable("2.3.8", &v("3.0.0")).unwrap_err();
        assert!(matches!(err, Unreadable::TooFarApart { .. }), "{err}");
    }

    #[test]
    fn a_snapshot_version_that_is_no_release_is_refused() {
        assert_eq!(
            check_readable("unknown", &v("3.5.35")),
            Err(Unreadable::BadVersion("unknown".into()))
        );
    }

    #[test]
    fn etcd_3_5_and_later_restore_with_etcdutl_and_3_4_with_etcdctl() {
        assert!(!restores_with_etcdutl(&v("3.4.23")));
        assert!(restores_with_etcdutl(&v("3.5.0")));
        assert!(restores_with_etcdutl(&v("3.6.16")));
    }
}
