//! slog setup: JSON lines in a cluster, readable lines on a terminal.

use std::io::IsTerminal;

use slog::{Drain, Level, Logger, o};

/// Output format of the logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// One JSON object per line.
    Json,
    /// Human-readable, for terminals.
    Term,
}

type BoxedDrain = Box<dyn Drain<Ok = (), Err = slog::Never> + Send>;

/// The root logger. Without an explicit format: terminal output when stderr is a terminal
/// and the process is not in a pod, JSON otherwise.
pub fn logger(format: Option<LogFormat>, level: Level) -> Logger {
    let in_pod = std::env::var_os("KUBERNETES_SERVICE_HOST").is_some();
    let format = format.unwrap_or(if std::io::stderr().is_terminal() && !in_pod {
        LogFormat::Term
    } else {
        LogFormat::Json
    });
    let inner: BoxedDrain = match format {
        LogFormat::Json => Box::new(
            slog_json::Json::new(std::io::stderr())
                .add_default_keys()
                .build()
                .fuse(),
        ),
        LogFormat::Term => {
            let decorator = slog_term::TermDecorator::new().stderr().build();
            Box::new(slog_term::FullFormat::new(decorator).build().fuse())
        }
    };
    let filtered = inner.filter_level(level).fuse();
    let drain = slog_async::Async::new(filtered)
        .chan_size(4096)
        .build()
        .fuse();
    Logger::root(drain, o!("app" => "etcd-operator"))
}
