//! Serving a container's log as the kubelet's `containerLogs` endpoint does: the current
//! (or, with `previous`, the one before) process's log file, selected and rendered by the
//! query (see [`crate::crilog`]), then, with `follow`, what that process writes next until
//! its output ends.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use futures::SinkExt;
use futures::channel::mpsc;

use crate::crilog::{Limit, LogQuery, decode_all};
use crate::logcap::LogBook;
use crate::statedir::StateDir;

/// Why no log can be served; the status code and message the endpoint answers with.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum LogError {
    /// Nothing by that name on this node (404).
    #[error("{0}")]
    NotFound(String),
    /// The request cannot be served (400).
    #[error("{0}")]
    BadRequest(String),
}

/// The numbered log files of a container (`<n>.log`), in order.
pub fn attempts(dir: &Path) -> Vec<(i64, PathBuf)> {
    let mut found: Vec<(i64, PathBuf)> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let n = name.strip_suffix(".log")?.parse().ok()?;
            Some((n, e.path()))
        })
        .collect();
    found.sort();
    found
}

/// The file a query reads, as the kubelet picks the container: with the container's
/// restart count (from its status) the current process's file is the one of that number,
/// else (its next start has not happened yet) the last one; `previous` is the last file
/// before that number. Without a status, the last file and the one before it.
pub fn choose(
    attempts: &[(i64, PathBuf)],
    previous: bool,
    restart_count: Option<i64>,
    pod: &str,
    container: &str,
) -> Result<PathBuf, LogError> {
    let last = attempts.last().map(|(n, _)| *n);
    let current = restart_count.or(last).unwrap_or(0);
    let found = if previous {
        attempts.iter().rev().find(|(n, _)| *n < current)
    } else {
        attempts.iter().rev().find(|(n, _)| *n <= current)
    };
    match found {
        Some((_, path)) => Ok(path.clone()),
        None if previous => Err(LogError::BadRequest(format!(
            "previous terminated container {container:?} in pod {pod:?} not found"
        ))),
        None => Err(LogError::BadRequest(format!(
            "container {container:?} in pod {pod:?} has no logs yet"
        ))),
    }
}

/// Finds the log file for a request.
pub fn locate(
    state: &StateDir,
    namespace: &str,
    pod: &str,
    container: &str,
    previous: bool,
    restart_count: Option<i64>,
) -> Result<PathBuf, LogError> {
    let dir = state
        .all_pods()
        .into_iter()
        .filter(|(_, ns, name, _)| ns == namespace && name == pod)
        .max_by_key(|(dir, ..)| {
            std::fs::metadata(dir.path())
                .and_then(|m| m.modified())
                .ok()
        })
        .map(|(dir, ..)| dir)
        .ok_or_else(|| LogError::NotFound(format!("pod {namespace}/{pod} is not on this node")))?;
    let logs = dir.attempt_logs(container);
    if !logs.is_dir() {
        return Err(LogError::NotFound(format!(
            "container {container:?} in pod {pod:?} is not available"
        )));
    }
    choose(&attempts(&logs), previous, restart_count, pod, container)
}

/// Reads `path` from `offset`: the complete records' bytes and where the next read starts.
fn read_from(path: &Path, offset: u64) -> std::io::Result<(Vec<u8>, u64)> {
    let mut file = std::fs::File::open(path)?;
    file.seek(SeekFrom::Start(offset))?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    let (_, used) = decode_all(&bytes);
    bytes.truncate(used);
    Ok((bytes, offset + used as u64))
}

/// Streams the log at `path` as `query` asks into `out`, until done or the reader leaves.
pub async fn stream(
    path: PathBuf,
    query: LogQuery,
    book: Arc<LogBook>,
    mut out: mpsc::Sender<Bytes>,
) {
    // Watch before reading, so that no write between the read and the wait is missed.
    let mut watch = if query.follow {
        book.watch(&path)
    } else {
        None
    };
    let mut limit = Limit::new(query.limit_bytes);
    let Ok((bytes, mut offset)) = read_from(&path, 0) else {
        return;
    };
    let (records, _) = decode_all(&bytes);
    let first: Vec<u8> = query
        .select(&records)
        .iter()
        .flat_map(|r| query.render(r))
        .collect();
    let first = limit.take(first);
    if !first.is_empty() && out.send(Bytes::from(first)).await.is_err() {
        return;
    }
    while !limit.reached() {
        let Some(rx) = watch.as_mut() else {
            return;
        };
        let ended = rx.changed().await.is_err();
        let Ok((bytes, next)) = read_from(&path, offset) else {
            return;
        };
        offset = next;
        let (records, _) = decode_all(&bytes);
        let more: Vec<u8> = records
            .iter()
            .filter(|r| query.wants(r))
            .flat_map(|r| query.render(r))
            .collect();
        let more = limit.take(more);
        if !more.is_empty() && out.send(Bytes::from(more)).await.is_err() {
            return;
        }
        if ended {
            watch = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_file_is_current_and_the_one_before_is_previous() {
        let tmp = tempfile::tempdir().unwrap();
        for n in [0, 1, 10] {
            std::fs::write(tmp.path().join(format!("{n}.log")), b"").unwrap();
        }
        std::fs::write(tmp.path().join("notes.txt"), b"").unwrap();
        let found = attempts(tmp.path());
        assert_eq!(
            found.iter().map(|(n, _)| *n).collect::<Vec<_>>(),
            [0, 1, 10]
        );
        assert_eq!(
            choose(&found, false, None, "p", "c").unwrap(),
            tmp.path().join("10.log")
        );
        assert_eq!(
            choose(&found, true, None, "p", "c").unwrap(),
            tmp.path().join("1.log")
        );
        let only = &found[..1];
        assert_eq!(
            choose(only, true, None, "p", "c").unwrap_err(),
            LogError::BadRequest(
                "previous terminated container \"c\" in pod \"p\" not found".into()
            )
        );
    }

    #[test]
    fn a_container_backing_off_shows_its_last_run_as_current_and_previous() {
        let runs = vec![(0, PathBuf::from("0.log"))];
        // Restarted once, the new process not started yet: both are the first run.
        assert_eq!(
            choose(&runs, false, Some(1), "p", "c").unwrap(),
            PathBuf::from("0.log")
        );
        assert_eq!(
            choose(&runs, true, Some(1), "p", "c").unwrap(),
            PathBuf::from("0.log")
        );
        // Never restarted: no previous one.
        assert!(choose(&runs, true, Some(0), "p", "c").is_err());
        let two = vec![(0, PathBuf::from("0.log")), (1, PathBuf::from("1.log"))];
        assert_eq!(
            choose(&two, false, Some(1), "p", "c").unwrap(),
            PathBuf::from("1.log")
        );
        assert_eq!(
            choose(&two, true, Some(1), "p", "c").unwrap(),
            PathBuf::from("0.log")
        );
    }

    #[tokio::test]
    async fn a_closed_log_is_served_once_with_tail_and_limit() {
        use crate::crilog::{Record, Stream};
        use futures::StreamExt;
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("0.log");
        let mut text = Vec::new();
        for (i, line) in ["one", "two", "three"].iter().enumerate() {
            let r = Record {
                time: jiff::Timestamp::from_second(1_700_000_000 + i as i64).unwrap(),
                stream: Stream::Stdout,
                partial: false,
                content: line.as_bytes().to_vec(),
            };
            text.extend(r.encode());
        }
        std::fs::write(&path, text).unwrap();
        let query = LogQuery {
            follow: true,
            tail_lines: Some(2),
            limit_bytes: Some(6),
            ..Default::default()
        };
        let (tx, rx) = mpsc::channel(4);
        stream(path, query, Arc::new(LogBook::default()), tx).await;
        let got: Vec<Bytes> = rx.collect().await;
        assert_eq!(got.concat(), b"two\nth");
    }
}
