//! Sending signals to container processes and their process groups.

use nix::errno::Errno;
use nix::sys::signal::{self, Signal};
use nix::unistd::Pid;

/// Parses `KILL`, `SIGKILL`, `kill` or `9`.
pub fn parse_signal(text: &str) -> Result<Signal, String> {
    let upper = text.trim().to_ascii_uppercase();
    if let Ok(number) = upper.parse::<i32>() {
        return Signal::try_from(number).map_err(|_| format!("unknown signal {text:?}"));
    }
    let name = if upper.starts_with("SIG") {
        upper
    } else {
        format!("SIG{upper}")
    };
    name.parse::<Signal>()
        .map_err(|_| format!("unknown signal {text:?}"))
}

/// Sends `sig` to process `pid`; `Ok(false)` when no such process exists.
pub fn send(pid: i32, sig: Signal) -> Result<bool, Errno> {
    match signal::kill(Pid::from_raw(pid), sig) {
        Ok(()) => Ok(true),
        Err(Errno::ESRCH) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Sends `sig` to every process of the group led by `pgid`; `Ok(false)` when it is empty.
pub fn send_group(pgid: i32, sig: Signal) -> Result<bool, Errno> {
    match signal::killpg(Pid::from_raw(pgid), sig) {
        Ok(()) => Ok(true),
        Err(Errno::ESRCH) => Ok(false),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signal_names_and_numbers_parse() {
        assert_eq!(parse_signal("KILL"), Ok(Signal::SIGKILL));
        assert_eq!(parse_signal("sigterm"), Ok(Signal::SIGTERM));
        assert_eq!(parse_signal("9"), Ok(Signal::SIGKILL));
        assert!(parse_signal("NOPE").is_err());
    }

    #[test]
    fn signalling_a_missing_process_reports_false() {
        // Pids are below 2^22 on Linux.
        assert_eq!(send(i32::MAX - 1, Signal::SIGTERM), Ok(false));
    }
}
