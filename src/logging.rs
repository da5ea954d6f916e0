//! slog setup: JSON lines in a cluster, readable lines on a terminal; the libraries' own
//! `tracing` warnings forwarded into the same log.

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

/// Keeps the log's writer thread; dropping it writes every line logged so far and waits
/// for that. The process drops it last, so the line saying why it stopped is never lost
/// (clones of the logger live on in the `tracing` forwarder and in actors, so the logger
/// itself is never dropped before the process exits).
pub struct LogFlush {
    _writer: slog_async::AsyncGuard,
}

/// The root logger and its flush guard. Without an explicit format: terminal output when
/// stderr is a terminal and the process is not in a pod, JSON otherwise.
pub fn logger(format: Option<LogFormat>, level: Level) -> (Logger, LogFlush) {
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
    let (drain, guard) = slog_async::Async::new(filtered)
        .chan_size(4096)
        .build_with_guard();
    // A line logged by another thread after the guard is gone is dropped, not a panic.
    let root = Logger::root(drain.ignore_res(), o!("app" => "etcd-operator"));
    (root, LogFlush { _writer: guard })
}

/// Forwards the `tracing` events of the libraries the operator runs on (kube-rs, tonic,
/// hyper, tower) into `log` as slog lines, warnings and errors only, so that a failing
/// watch or connection reaches `kubectl logs` in the operator's own format, with the
/// library's module as `target`. Installed once for the process; a second call is a no-op.
pub fn forward_library_events(log: &Logger) {
    use tracing_subscriber::layer::SubscriberExt;
    let subscriber = tracing_subscriber::registry().with(LibraryEvents { log: log.clone() });
    // Already set (a test, or a second call): the first one stays.
    let _ = tracing::subscriber::set_global_default(subscriber);
}

/// A `tracing` layer writing each warning and error event into a slog logger.
struct LibraryEvents {
    log: Logger,
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for LibraryEvents {
    fn enabled(
        &self,
        metadata: &tracing::Metadata<'_>,
        _: tracing_subscriber::layer::Context<'_, S>,
    ) -> bool {
        // Less verbose is smaller: ERROR < WARN < INFO.
        *metadata.level() <= tracing::Level::WARN
    }

    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        let mut fields = EventFields::default();
        event.record(&mut fields);
        let target = event.metadata().target();
        let message = fields.message;
        let rest = fields.rest.join(" ");
        if *event.metadata().level() == tracing::Level::ERROR {
            slog::error!(self.log, "{}", message; "target" => target, "fields" => rest);
        } else {
            slog::warn!(self.log, "{}", message; "target" => target, "fields" => rest);
        }
    }
}

/// An event's message, and its other fields as `name=value`.
#[derive(Default)]
struct EventFields {
    message: String,
    rest: Vec<String>,
}

impl tracing::field::Visit for EventFields {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.message = format!("{value:?}");
        } else {
            self.rest.push(format!("{}={value:?}", field.name()));
        }
    }

    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        if field.name() == "message" {
            self.message = value.to_string();
        } else {
            self.rest.push(format!("{}={value}", field.name()));
        }
    }
}

/// A test drain: the lines logged, for tests that check what the operator says.
#[cfg(test)]
pub(crate) mod kept {
    use std::sync::{Arc, Mutex};

    use slog::Drain;

    /// A drain keeping each record's level, message and key-value pairs.
    #[derive(Clone, Default)]
    pub(crate) struct Kept(Arc<Mutex<Vec<String>>>);

    impl Kept {
        /// Every line so far, as `LEVEL message key=value…`.
        pub(crate) fn lines(&self) -> Vec<String> {
            self.0.lock().unwrap().clone()
        }
    }

    impl Drain for Kept {
        type Ok = ();
        type Err = slog::Never;

        fn log(
            &self,
            record: &slog::Record<'_>,
            values: &slog::OwnedKVList,
        ) -> Result<(), slog::Never> {
            use slog::KV;
            let mut line = format!("{} {}", record.level().as_short_str(), record.msg());
            let mut pairs = Pairs(String::new());
            record.kv().serialize(record, &mut pairs).ok();
            values.serialize(record, &mut pairs).ok();
            line.push_str(&pairs.0);
            self.0.lock().unwrap().push(line);
            Ok(())
        }
    }

    struct Pairs(String);

    impl slog::Serializer for Pairs {
        fn emit_arguments(
            &mut self,
            key: slog::Key,
            value: &std::fmt::Arguments<'_>,
        ) -> slog::Result {
            self.0.push_str(&format!(" {key}={value}"));
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::kept::Kept;
    use super::*;

    #[test]
    fn a_library_warning_reaches_the_slog_log_with_its_target_and_info_does_not() {
        use tracing_subscriber::layer::SubscriberExt;
        let kept = Kept::default();
        let log = Logger::root(kept.clone(), o!());
        let subscriber = tracing_subscriber::registry().with(LibraryEvents { log });
        tracing::subscriber::with_default(subscriber, || {
            tracing::warn!(target: "kube_runtime::watcher", error = "connection reset", "watch failed");
            tracing::error!(target: "tonic::transport", "channel closed");
            tracing::info!(target: "kube_client", "request sent");
        });
        let lines = kept.lines();
        assert_eq!(
            lines,
            [
                // slog hands the pairs over last first.
                "WARN watch failed fields=error=connection reset target=kube_runtime::watcher",
                "ERRO channel closed fields= target=tonic::transport",
            ]
        );
    }
}
