//! Telling a recorded container process from an unrelated one that reused its pid: a
//! process is the recorded one only if it started shortly before its pid file was written.

use std::time::{Duration, SystemTime};

/// Clock ticks per second of `/proc/<pid>/stat` times (USER_HZ, 100 on Linux).
const TICKS_PER_SECOND: u64 = 100;

/// The start time field (22nd) of `/proc/<pid>/stat`, in ticks since boot.
pub fn parse_start_ticks(stat: &str) -> Option<u64> {
    let after_name = &stat[stat.rfind(')')? + 1..];
    after_name.split_whitespace().nth(19)?.parse().ok()
}

/// The boot time (`btime`) of `/proc/stat`, in seconds since the epoch.
pub fn parse_boot_time(proc_stat: &str) -> Option<u64> {
    proc_stat
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()
}

/// When process `pid` started, if it exists.
pub fn started_at(pid: i32) -> Option<SystemTime> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let ticks = parse_start_ticks(&stat)?;
    let boot = parse_boot_time(&std::fs::read_to_string("/proc/stat").ok()?)?;
    let millis = boot * 1000 + ticks * 1000 / TICKS_PER_SECOND;
    Some(SystemTime::UNIX_EPOCH + Duration::from_millis(millis))
}

/// Whether a process that started at `started` is the one recorded at `recorded`.
pub fn matches_record(started: SystemTime, recorded: SystemTime) -> bool {
    // Boot time has a one-second resolution; the pid file follows the spawn at once.
    started <= recorded + Duration::from_secs(2) && recorded <= started + Duration::from_secs(60)
}

/// Whether process `pid` exists and is the one whose pid file was written at `recorded`.
pub fn is_recorded_process(pid: i32, recorded: SystemTime) -> bool {
    pid > 1 && started_at(pid).is_some_and(|started| matches_record(started, recorded))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_ticks_are_read_past_a_command_name_with_spaces() {
        let stat = "42 (my cmd) S 1 42 42 0 -1 4194304 126 0 0 0 0 0 0 0 20 0 1 0 175632 3133440";
        assert_eq!(parse_start_ticks(stat), Some(175632));
    }

    #[test]
    fn boot_time_is_read() {
        assert_eq!(
            parse_boot_time("cpu 1 2\nbtime 1795960631\n"),
            Some(1795960631)
        );
    }

    #[test]
    fn only_a_process_started_just_before_its_record_matches() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        assert!(matches_record(t, t + Duration::from_millis(5)));
        assert!(matches_record(t + Duration::from_millis(900), t));
        assert!(!matches_record(t + Duration::from_secs(30), t));
        assert!(!matches_record(t, t + Duration::from_secs(3600)));
    }

    #[test]
    fn this_process_started_in_the_past() {
        let started = started_at(std::process::id() as i32).unwrap();
        assert!(started <= SystemTime::now() + Duration::from_secs(2));
        assert!(!is_recorded_process(1, SystemTime::now()));
    }
}
