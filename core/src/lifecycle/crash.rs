//! What a crashing member's last words say: whether its own data is what it fails on.
//! Only then may it be replaced; any other crash loop (a bad flag, too little memory)
//! is restarted in place and reported, since replacing it would not help and would cost
//! a member's data.

use super::PodView;

/// Restarts after which a member that is still not healthy is reported as crash looping.
pub const CRASH_LOOP_RESTARTS: u32 = 2;

/// What etcd (3.4 to 3.6) says, fatally, when its data directory is damaged: a WAL or
/// snapshot record that fails its checksum, a snapshot the WAL refers to that is
/// missing, a backend that cannot be rebuilt from its snapshot.
const UNUSABLE_DATA: &[&str] = &[
    "crc mismatch",
    "snapshot file doesn't exist",
    "failed to find database snapshot file",
    "failed to recover v3 backend from snapshot",
];

/// The restarts and last failure of `pod` when its etcd is crash looping: restarted in
/// place at least [`CRASH_LOOP_RESTARTS`] times and not ready.
pub fn looping(pod: &PodView) -> Option<(u32, &str)> {
    let crash = pod.crash.as_deref()?;
    (pod.restarts >= CRASH_LOOP_RESTARTS && !pod.ready).then_some((pod.restarts, crash))
}

/// The words in `crash` (a pod's last failure, see `PodView::crash`) that show the
/// member's data is unusable, if any.
pub fn unusable_data(crash: &str) -> Option<&'static str> {
    UNUSABLE_DATA
        .iter()
        .copied()
        .find(|words| crash.contains(words))
}

/// The last non-empty line of a crash report, for a one-line status message.
pub fn last_words(crash: &str) -> &str {
    crash
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn damaged_wal_snapshot_or_backend_is_unusable_data_and_other_crashes_are_not() {
        for crash in [
            "exited with code 2 (Error): panic: walpb: crc mismatch",
            "exited with code 2: {\"msg\":\"failed to recover v3 backend from snapshot\",\"error\":\"failed to find database snapshot file (snap: snapshot file doesn't exist)\"}",
        ] {
            assert!(unusable_data(crash).is_some(), "{crash}");
        }
        for crash in [
            "exited with code 1 (Error): etcd: unknown flag: --quota-backend-bytez",
            "exited with code 137 (OOMKilled)",
            "exited with code 137 (Error)",
        ] {
            assert_eq!(unusable_data(crash), None, "{crash}");
        }
    }

    #[test]
    fn the_last_words_are_the_last_non_empty_line() {
        assert_eq!(last_words("a\nb: failed\n\n"), "b: failed");
        assert_eq!(last_words(""), "");
    }
}
