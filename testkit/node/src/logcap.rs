//! A container process's output, read by the node from its stdout and stderr pipes and
//! written twice: appended as it came to the container's log (`logs/<container>.log`, as
//! before), and as timestamped records in the kubelet's format to the file of this process
//! (`logs/<container>/<restartCount>.log`, see [`crate::crilog`]), which the log endpoint
//! serves. The [`LogBook`] knows which of those files are still being written, so that a
//! follower is woken by new records and stops when the process's output ends.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use jiff::Timestamp;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::watch;

use crate::crilog::{Stream, split_records};

/// The log files still being written, each with a counter bumped on every write.
#[derive(Default)]
pub struct LogBook {
    open: Mutex<HashMap<PathBuf, watch::Receiver<u64>>>,
}

impl LogBook {
    fn opened(&self, path: &Path) -> watch::Sender<u64> {
        let (tx, rx) = watch::channel(0);
        self.lock().insert(path.to_path_buf(), rx);
        tx
    }

    fn closed(&self, path: &Path) {
        self.lock().remove(path);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<PathBuf, watch::Receiver<u64>>> {
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A receiver that changes whenever `path` grows and ends when its writer is done;
    /// `None` when nothing writes it any more.
    pub fn watch(&self, path: &Path) -> Option<watch::Receiver<u64>> {
        self.lock().get(path).cloned()
    }
}

/// Both log files of one process, shared by its two stream readers.
struct Sink {
    raw: std::fs::File,
    records: std::fs::File,
    written: watch::Sender<u64>,
}

impl Sink {
    fn write(&mut self, raw: &[u8], records: &[u8]) {
        // A full disk loses log lines, not the container.
        let _ = self.raw.write_all(raw);
        let _ = self.records.write_all(records);
        self.written.send_modify(|n| *n += 1);
    }
}

fn append(path: &Path) -> std::io::Result<std::fs::File> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
}

/// Starts reading the process's stdout and stderr into `raw` and `records`.
pub fn capture(
    child: &mut tokio::process::Child,
    raw: &Path,
    records: &Path,
    book: Arc<LogBook>,
) -> std::io::Result<()> {
    let sink = Arc::new(Mutex::new(Sink {
        raw: append(raw)?,
        records: append(records)?,
        written: book.opened(records),
    }));
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let records = records.to_path_buf();
    tokio::spawn(async move {
        tokio::join!(
            pump(stdout, Stream::Stdout, sink.clone()),
            pump(stderr, Stream::Stderr, sink.clone()),
        );
        book.closed(&records);
    });
    Ok(())
}

/// Copies one stream into the sink until it ends: the raw log gets each chunk as read,
/// the record file each line once complete.
async fn pump(reader: Option<impl AsyncRead + Unpin>, stream: Stream, sink: Arc<Mutex<Sink>>) {
    let Some(mut reader) = reader else {
        return;
    };
    let mut buf = vec![0u8; 8192];
    let mut pending = Vec::new();
    loop {
        let n = reader.read(&mut buf).await.unwrap_or(0);
        let eof = n == 0;
        pending.extend_from_slice(&buf[..n]);
        let records = split_records(&mut pending, stream, Timestamp::now(), eof);
        let encoded: Vec<u8> = records.iter().flat_map(|r| r.encode()).collect();
        if n > 0 || !encoded.is_empty() {
            sink.lock()
                .unwrap_or_else(|e| e.into_inner())
                .write(&buf[..n], &encoded);
        }
        if eof {
            return;
        }
    }
}
