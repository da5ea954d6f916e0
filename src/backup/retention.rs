//! Which backups to delete to keep the `maxBackups` newest.

use super::naming::BackupName;

/// A backup found in the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredBackup {
    /// Its key in the bucket.
    pub key: String,
    /// What its name says.
    pub name: BackupName,
}

/// The keys to delete so that only the `max` newest backups of `cluster` stay, never
/// `keep` (the backup just made and verified). `max == 0` keeps everything. Backups of
/// other clusters, and objects whose names do not parse, are never chosen.
pub fn to_delete(backups: &[StoredBackup], cluster: &str, max: usize, keep: &str) -> Vec<String> {
    if max == 0 {
        return Vec::new();
    }
    let mut ours: Vec<&StoredBackup> = backups
        .iter()
        .filter(|b| b.name.cluster == cluster)
        .collect();
    // Newest first; the key breaks ties so that the choice is the same on every run.
    ours.sort_by(|a, b| (b.name.time, &b.key).cmp(&(a.name.time, &a.key)));
    // The backup just made always counts among the kept, whatever the clocks say.
    let kept_others = max.saturating_sub(1);
    ours.iter()
        .filter(|b| b.key != keep)
        .skip(kept_others)
        .map(|b| b.key.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn backup(cluster: &str, second: i64) -> StoredBackup {
        let name = BackupName::new(
            cluster,
            jiff::Timestamp::from_second(second).unwrap(),
            second,
        );
        StoredBackup {
            key: name.key("p"),
            name,
        }
    }

    #[test]
    fn the_newest_max_are_kept_and_the_rest_deleted_oldest_included() {
        let all: Vec<_> = (1..=5).map(|s| backup("c", s * 10)).collect();
        let newest = all[4].key.clone();
        let deleted = to_delete(&all, "c", 3, &newest);
        assert_eq!(deleted, vec![all[1].key.clone(), all[0].key.clone()]);
    }

    #[test]
    fn zero_keeps_everything() {
        let all: Vec<_> = (1..=5).map(|s| backup("c", s)).collect();
        assert!(to_delete(&all, "c", 0, &all[4].key).is_empty());
    }

    #[test]
    fn other_clusters_are_never_touched() {
        let mut all: Vec<_> = (1..=3).map(|s| backup("c", s)).collect();
        all.push(backup("other", 0));
        let deleted = to_delete(&all, "c", 1, &all[2].key);
        assert_eq!(deleted, vec![all[1].key.clone(), all[0].key.clone()]);
    }

    #[test]
    fn the_backup_just_made_is_kept_even_when_its_clock_is_behind() {
        let all: Vec<_> = [50, 40, 10].iter().map(|s| backup("c", *s)).collect();
        // The new one (10) is older by name than the others (a clock went back).
        let deleted = to_delete(&all, "c", 2, &all[2].key);
        assert_eq!(deleted, vec![all[1].key.clone()]);
    }

    #[test]
    fn fewer_backups_than_max_deletes_nothing() {
        let all: Vec<_> = (1..=2).map(|s| backup("c", s)).collect();
        assert!(to_delete(&all, "c", 3, &all[1].key).is_empty());
    }
}
