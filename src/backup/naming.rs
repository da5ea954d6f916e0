//! Names of backups in a store: `<prefix>/<cluster>_<time>_r<revision>.db`, with the
//! metadata object `<same>.db.json` beside it.
//!
//! The time is UTC with milliseconds in a fixed-width form (`20261130T103300.123Z`), so
//! names sort by time; cluster names (DNS names) never hold `_`, so a name splits back into
//! its parts. Only names that parse are ever counted or deleted as backups.

use jiff::Timestamp;

/// Suffix of a snapshot object.
pub const SNAPSHOT_SUFFIX: &str = ".db";
/// Suffix appended to a snapshot's key for its metadata object.
pub const METADATA_SUFFIX: &str = ".json";
/// The fixed-width UTC time in names.
const TIME_FORMAT: &str = "%Y%m%dT%H%M%S%.3fZ";

/// What a backup's name says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackupName {
    /// The cluster backed up (an EtcdCluster's name, or the EtcdBackup's name when the
    /// cluster is given by endpoints).
    pub cluster: String,
    /// When the snapshot was taken (milliseconds).
    pub time: Timestamp,
    /// The etcd revision of the snapshot.
    pub revision: i64,
}

impl BackupName {
    /// The name of a backup of `cluster` at `revision` taken at `time` (truncated to
    /// milliseconds, as names carry it).
    pub fn new(cluster: &str, time: Timestamp, revision: i64) -> Self {
        let millis = time.as_millisecond();
        BackupName {
            cluster: cluster.to_string(),
            time: Timestamp::from_millisecond(millis).unwrap_or(time),
            revision,
        }
    }

    /// The object name, without prefix.
    pub fn file_name(&self) -> String {
        format!(
            "{}_{}_r{}{SNAPSHOT_SUFFIX}",
            self.cluster,
            self.time.strftime(TIME_FORMAT),
            self.revision
        )
    }

    /// The snapshot's key under `prefix` (empty: at the root of the bucket).
    pub fn key(&self, prefix: &str) -> String {
        join(prefix, &self.file_name())
    }

    /// Parses the last segment of `key` as a backup name; `None` for any other object.
    pub fn parse(key: &str) -> Option<Self> {
        let file = key.rsplit('/').next()?;
        let stem = file.strip_suffix(SNAPSHOT_SUFFIX)?;
        let mut parts = stem.rsplitn(3, '_');
        let revision = parts.next()?.strip_prefix('r')?.parse().ok()?;
        let time = parts.next()?;
        let cluster = parts.next()?;
        if cluster.is_empty() || cluster.contains('_') {
            return None;
        }
        let time = jiff::fmt::strtime::parse(TIME_FORMAT, time)
            .ok()?
            .to_datetime()
            .ok()?
            .to_zoned(jiff::tz::TimeZone::UTC)
            .ok()?
            .timestamp();
        Some(BackupName {
            cluster: cluster.to_string(),
            time,
            revision,
        })
    }
}

/// The metadata object's key beside the snapshot `key`.
pub fn metadata_key(key: &str) -> String {
    format!("{key}{METADATA_SUFFIX}")
}

/// `prefix/name`, with no empty segment when the prefix is empty or ends with `/`.
pub fn join(prefix: &str, name: &str) -> String {
    let prefix = prefix.trim_matches('/');
    if prefix.is_empty() {
        name.to_string()
    } else {
        format!("{prefix}/{name}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    #[test]
    fn a_name_carries_cluster_time_and_revision_and_parses_back() {
        let name = BackupName::new("example", at("2026-11-30T10:33:00.123456Z"), 4021);
        assert_eq!(name.file_name(), "example_20261130T103300.123Z_r4021.db");
        assert_eq!(
            name.key("backups/prod/"),
            "backups/prod/example_20261130T103300.123Z_r4021.db"
        );
        let parsed = BackupName::parse(&name.key("backups/prod")).unwrap();
        assert_eq!(parsed, name);
        assert_eq!(parsed.time, at("2026-11-30T10:33:00.123Z"));
    }

    #[test]
    fn names_sort_by_time() {
        let earlier = BackupName::new("c", at("2026-01-02T03:04:05Z"), 900).file_name();
        let later = BackupName::new("c", at("2026-01-02T03:04:06Z"), 10).file_name();
        assert!(earlier < later);
    }

    #[test]
    fn other_objects_are_not_backups() {
        for key in [
            "p/example_20261130T103300.123Z_r4021.db.json",
            "p/notes.txt",
            "p/example_yesterday_r1.db",
            "p/example_20261130T103300.123Z_4021.db",
            "p/_20261130T103300.123Z_r1.db",
            "p/etcd.backup",
        ] {
            assert_eq!(BackupName::parse(key), None, "{key}");
        }
    }

    #[test]
    fn a_cluster_name_with_dots_and_dashes_parses() {
        let name = BackupName::new("my-backup.v2", at("2026-01-02T03:04:05Z"), 7);
        assert_eq!(BackupName::parse(&name.key("")), Some(name));
    }

    #[test]
    fn keys_join_a_prefix_and_metadata_sits_beside_its_snapshot() {
        assert_eq!(join("", "x.db"), "x.db");
        assert_eq!(metadata_key("a/x.db"), "a/x.db.json");
    }
}
