//! Which backups to delete to keep the `maxBackups` newest.
//!
//! Only backups the same EtcdBackup wrote are ever chosen: their metadata objects name the
//! writer's UID ([`BackupMetadata::etcd_backup_uid`]). A backup whose metadata could not be
//! read, does not describe it, or names another writer (a one-shot EtcdBackup, one in
//! another namespace, one made before writers were recorded) stays; so does the newest
//! backup of every cluster ID other than the one just backed up (the data of a cluster
//! that was deleted and made again under the same name).

use std::collections::BTreeSet;

use super::metadata::BackupMetadata;
use super::naming::BackupName;

/// A backup found in the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredBackup {
    /// Its key in the bucket.
    pub key: String,
    /// What its name says.
    pub name: BackupName,
}

/// A backup found in the store, with its metadata object when that could be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Described {
    /// The backup.
    pub backup: StoredBackup,
    /// Its metadata; `None`: missing or not a backup's metadata.
    pub metadata: Option<BackupMetadata>,
}

impl Described {
    /// Whether the writer of `made` wrote this backup, of the same cluster, and its
    /// metadata describes it.
    fn written_like(&self, made: &BackupMetadata) -> bool {
        let Some(writer) = made.etcd_backup_uid.as_deref() else {
            return false;
        };
        self.backup.name.cluster == made.cluster
            && self.metadata.as_ref().is_some_and(|m| {
                m.key == self.backup.key
                    && m.cluster == made.cluster
                    && m.etcd_backup_uid.as_deref() == Some(writer)
            })
    }

    fn cluster_id(&self) -> Option<&str> {
        self.metadata.as_ref().map(|m| m.cluster_id.as_str())
    }
}

/// The keys to delete so that only the `max` newest backups written like `made` (the
/// backup just made and verified: same writer, same cluster) stay, never `made` itself nor
/// the newest backup of another cluster ID. `max == 0` keeps everything.
pub fn to_delete(backups: &[Described], made: &BackupMetadata, max: usize) -> Vec<String> {
    if max == 0 {
        return Vec::new();
    }
    let mut ours: Vec<&Described> = backups.iter().filter(|b| b.written_like(made)).collect();
    // Newest first; the key breaks ties so that the choice is the same on every run.
    ours.sort_by(|a, b| {
        (b.backup.name.time, &b.backup.key).cmp(&(a.backup.name.time, &a.backup.key))
    });
    let mut seen_ids = BTreeSet::new();
    let newest_of_other_ids: BTreeSet<&str> = ours
        .iter()
        .filter(|b| b.cluster_id() != Some(made.cluster_id.as_str()))
        .filter(|b| seen_ids.insert(b.cluster_id()))
        .map(|b| b.backup.key.as_str())
        .collect();
    // The backup just made always counts among the kept, whatever the clocks say.
    let kept_others = max.saturating_sub(1);
    ours.iter()
        .filter(|b| b.backup.key != made.key)
        .skip(kept_others)
        .filter(|b| !newest_of_other_ids.contains(b.backup.key.as_str()))
        .map(|b| b.backup.key.clone())
        .collect()
}

/// How many backups written like `made` there are among `backups`.
pub fn count_written_like(backups: &[Described], made: &BackupMetadata) -> usize {
    backups.iter().filter(|b| b.written_like(made)).count()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backup::metadata::example;

    const UID: &str = "uid-nightly";

    fn written(cluster: &str, second: i64, uid: Option<&str>, cluster_id: &str) -> Described {
        let name = BackupName::new(
            cluster,
            jiff::Timestamp::from_second(second).unwrap(),
            second,
        );
        let key = name.key("p");
        let metadata = BackupMetadata {
            cluster_id: cluster_id.into(),
            revision: second,
            time: name.time.to_string(),
            etcd_backup_uid: uid.map(str::to_string),
            ..example(cluster, &key)
        };
        Described {
            backup: StoredBackup { key, name },
            metadata: Some(metadata),
        }
    }

    fn backup(cluster: &str, second: i64) -> Described {
        written(cluster, second, Some(UID), "1a")
    }

    fn made(just: &Described) -> BackupMetadata {
        just.metadata.clone().unwrap()
    }

    fn keys(of: &[&Described]) -> Vec<String> {
        of.iter().map(|b| b.backup.key.clone()).collect()
    }

    #[test]
    fn the_newest_max_are_kept_and_the_rest_deleted_oldest_included() {
        let all: Vec<_> = (1..=5).map(|s| backup("c", s * 10)).collect();
        let deleted = to_delete(&all, &made(&all[4]), 3);
        assert_eq!(deleted, keys(&[&all[1], &all[0]]));
    }

    #[test]
    fn zero_keeps_everything() {
        let all: Vec<_> = (1..=5).map(|s| backup("c", s)).collect();
        assert!(to_delete(&all, &made(&all[4]), 0).is_empty());
    }

    #[test]
    fn other_clusters_are_never_touched() {
        let mut all: Vec<_> = (1..=3).map(|s| backup("c", s)).collect();
        all.push(backup("other", 0));
        let deleted = to_delete(&all, &made(&all[2]), 1);
        assert_eq!(deleted, keys(&[&all[1], &all[0]]));
    }

    #[test]
    fn the_backup_just_made_is_kept_even_when_its_clock_is_behind() {
        let all: Vec<_> = [50, 40, 10].iter().map(|s| backup("c", *s)).collect();
        // The new one (10) is older by name than the others (a clock went back).
        let deleted = to_delete(&all, &made(&all[2]), 2);
        assert_eq!(deleted, keys(&[&all[1]]));
    }

    #[test]
    fn fewer_backups_than_max_deletes_nothing() {
        let all: Vec<_> = (1..=2).map(|s| backup("c", s)).collect();
        assert!(to_delete(&all, &made(&all[1]), 3).is_empty());
    }

    #[test]
    fn retention_never_deletes_a_backup_written_by_another_etcdbackup() {
        let all = vec![
            written("c", 1, Some("uid-one-shot"), "1a"),
            written("c", 2, None, "1a"),
            backup("c", 3),
            backup("c", 4),
        ];
        let deleted = to_delete(&all, &made(&all[3]), 1);
        assert_eq!(deleted, keys(&[&all[2]]));
    }

    #[test]
    fn retention_never_deletes_a_backup_whose_metadata_cannot_be_read() {
        let mut unread = backup("c", 1);
        unread.metadata = None;
        let mut other_key = backup("c", 2);
        other_key.metadata.as_mut().unwrap().key = "p/elsewhere.db".into();
        let all = vec![unread, other_key, backup("c", 3)];
        assert!(to_delete(&all, &made(&all[2]), 1).is_empty());
    }

    #[test]
    fn retention_never_deletes_the_newest_backup_of_another_cluster_id() {
        // The cluster was deleted and made again under its name: a new cluster ID.
        let all = vec![
            written("c", 1, Some(UID), "old"),
            written("c", 2, Some(UID), "old"),
            backup("c", 3),
            backup("c", 4),
        ];
        let deleted = to_delete(&all, &made(&all[3]), 1);
        assert_eq!(deleted, keys(&[&all[2], &all[0]]));
    }

    #[test]
    fn a_backup_made_without_a_writer_deletes_nothing() {
        let all: Vec<_> = (1..=3).map(|s| written("c", s, None, "1a")).collect();
        assert!(to_delete(&all, &made(&all[2]), 1).is_empty());
    }
}
