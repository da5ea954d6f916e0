//! The node's own log: one line per event on stderr, prefixed with the time.

use std::fmt;

/// Writes one event line.
pub fn emit(args: fmt::Arguments<'_>) {
    let now = jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%S%.3fZ");
    eprintln!("{now} {args}");
}

/// Logs one event line, `format!`-style.
macro_rules! event {
    ($($arg:tt)*) => {
        $crate::log::emit(format_args!($($arg)*))
    };
}

pub(crate) use event;
