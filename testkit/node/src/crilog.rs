//! Container logs in the kubelet's on-disk format (the CRI log format: one record per line,
//! `<RFC 3339 time> <stdout|stderr> <F|P> <content>`, `P` for a piece of a longer line),
//! and the log endpoint's query (`follow`, `tailLines`, `sinceSeconds`/`sinceTime`,
//! `timestamps`, `previous`, `limitBytes`, `stream`) applied to them. Pure.

use jiff::Timestamp;

/// Longest piece of a line in one record; longer lines are split into `P` records.
pub const MAX_RECORD: usize = 16 * 1024;

/// Which output stream a record came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    /// stdout
    Stdout,
    /// stderr
    Stderr,
}

impl Stream {
    fn name(self) -> &'static str {
        match self {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        }
    }
}

/// One record of a log file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// When the node read it.
    pub time: Timestamp,
    /// Where it came from.
    pub stream: Stream,
    /// A piece of a line that goes on in the next record.
    pub partial: bool,
    /// The content, without the line's newline.
    pub content: Vec<u8>,
}

impl Record {
    /// The record as a line of the log file.
    pub fn encode(&self) -> Vec<u8> {
        let mut line = format!(
            "{} {} {} ",
            self.time,
            self.stream.name(),
            if self.partial { "P" } else { "F" }
        )
        .into_bytes();
        line.extend_from_slice(&self.content);
        line.push(b'\n');
        line
    }

    /// Parses a line of the log file (without its newline).
    pub fn decode(line: &[u8]) -> Option<Record> {
        let mut parts = line.splitn(4, |b| *b == b' ');
        let time = std::str::from_utf8(parts.next()?).ok()?.parse().ok()?;
        let stream = match parts.next()? {
            b"stdout" => Stream::Stdout,
            b"stderr" => Stream::Stderr,
            _ => return None,
        };
        let partial = match parts.next()? {
            b"P" => true,
            b"F" => false,
            _ => return None,
        };
        Some(Record {
            time,
            stream,
            partial,
            content: parts.next().unwrap_or_default().to_vec(),
        })
    }
}

/// The complete records of a file's bytes, and how many bytes they took (a last line
/// without its newline is still being written).
pub fn decode_all(bytes: &[u8]) -> (Vec<Record>, usize) {
    let mut records = Vec::new();
    let mut used = 0;
    while let Some(end) = bytes[used..].iter().position(|b| *b == b'\n') {
        if let Some(r) = Record::decode(&bytes[used..used + end]) {
            records.push(r);
        }
        used += end + 1;
    }
    (records, used)
}

/// Most lines of a container's log its termination message takes
/// (`terminationMessagePolicy: FallbackToLogsOnError`), as the kubelet.
pub const TERMINATION_LINES: usize = 80;
/// Most bytes of it.
pub const TERMINATION_BYTES: usize = 2048;

/// The end of a log file as a termination message: the last [`TERMINATION_LINES`]
/// lines (pieces of a long line joined), then at most their last [`TERMINATION_BYTES`]
/// bytes; `None` when the log is empty.
pub fn termination_message(bytes: &[u8]) -> Option<String> {
    let (records, _) = decode_all(bytes);
    let mut lines: Vec<Vec<u8>> = Vec::new();
    let mut open = false;
    for r in records {
        match lines.last_mut() {
            Some(line) if open => line.extend_from_slice(&r.content),
            _ => lines.push(r.content.clone()),
        }
        open = r.partial;
    }
    let start = lines.len().saturating_sub(TERMINATION_LINES);
    let text = String::from_utf8_lossy(&lines[start..].join(&b'\n')).into_owned();
    let mut cut = text.len().saturating_sub(TERMINATION_BYTES);
    while !text.is_char_boundary(cut) {
        cut += 1;
    }
    let tail = text[cut..].to_string();
    (!tail.is_empty()).then_some(tail)
}

/// Which streams a query wants.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Streams {
    /// Both.
    #[default]
    All,
    /// Only this one.
    Only(Stream),
}

/// A log request's options.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LogQuery {
    /// Keep streaming while the container runs.
    pub follow: bool,
    /// Only the last N lines.
    pub tail_lines: Option<usize>,
    /// Only lines logged at or after this time.
    pub since: Option<Timestamp>,
    /// Prefix every line with its time.
    pub timestamps: bool,
    /// The previous process of the container instead of the current one.
    pub previous: bool,
    /// Stop after this many bytes.
    pub limit_bytes: Option<usize>,
    /// Which streams.
    pub streams: Streams,
}

fn flag(value: &str) -> Result<bool, String> {
    match value {
        "" | "true" | "1" => Ok(true),
        "false" | "0" => Ok(false),
        other => Err(format!("{other:?} is not a boolean")),
    }
}

fn number(name: &str, value: &str) -> Result<i64, String> {
    value
        .parse()
        .map_err(|_| format!("{name}: {value:?} is not a number"))
}

/// Decodes a query value (`%XX` and `+`).
fn unescape(value: &str) -> String {
    let bytes = value.as_bytes();
    let hex = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match (
            bytes[i],
            bytes.get(i + 1).copied().and_then(hex),
            bytes.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(high), Some(low)) => {
                out.push(high * 16 + low);
                i += 3;
            }
            (b'+', _, _) => {
                out.push(b' ');
                i += 1;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

impl LogQuery {
    /// Parses a query string as the API server sends it; `now` anchors `sinceSeconds`.
    /// Unknown parameters are ignored, as the kubelet does.
    pub fn parse(query: &str, now: Timestamp) -> Result<LogQuery, String> {
        let mut q = LogQuery::default();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            let value = unescape(value);
            match name {
                "follow" => q.follow = flag(&value)?,
                "timestamps" => q.timestamps = flag(&value)?,
                "previous" => q.previous = flag(&value)?,
                "tailLines" => q.tail_lines = Some(number(name, &value)?.max(0) as usize),
                "limitBytes" => match number(name, &value)? {
                    n if n > 0 => q.limit_bytes = Some(n as usize),
                    _ => return Err("limitBytes must be greater than zero".into()),
                },
                "sinceSeconds" => match number(name, &value)? {
                    n if n > 0 => q.since = Some(now - jiff::SignedDuration::from_secs(n)),
                    _ => return Err("sinceSeconds must be greater than zero".into()),
                },
                "sinceTime" => {
                    q.since = Some(value.parse().map_err(|e| format!("sinceTime: {e}"))?)
                }
                "stream" => {
                    q.streams = match value.as_str() {
                        "" | "All" => Streams::All,
                        "Stdout" => Streams::Only(Stream::Stdout),
                        "Stderr" => Streams::Only(Stream::Stderr),
                        other => {
                            return Err(format!("stream: {other:?} is not All, Stdout or Stderr"));
                        }
                    }
                }
                _ => {}
            }
        }
        Ok(q)
    }

    /// Whether a record is one the query wants (stream and time).
    pub fn wants(&self, r: &Record) -> bool {
        let stream_ok = match self.streams {
            Streams::All => true,
            Streams::Only(s) => r.stream == s,
        };
        stream_ok && self.since.is_none_or(|since| r.time >= since)
    }

    /// The records of a file to show first: those of the wanted streams, the last
    /// `tailLines` lines of them (a line being its records up to a full one), then those
    /// since the asked time.
    pub fn select<'a>(&self, records: &'a [Record]) -> Vec<&'a Record> {
        let streamed: Vec<&Record> = records
            .iter()
            .filter(|r| match self.streams {
                Streams::All => true,
                Streams::Only(s) => r.stream == s,
            })
            .collect();
        let start = match self.tail_lines {
            None => 0,
            Some(n) => tail_start(&streamed, n),
        };
        streamed[start..]
            .iter()
            .copied()
            .filter(|r| self.wants(r))
            .collect()
    }

    /// A record as the endpoint writes it: the time first when asked, the newline back
    /// unless the line goes on.
    pub fn render(&self, r: &Record) -> Vec<u8> {
        let mut out = if self.timestamps {
            format!("{} ", r.time).into_bytes()
        } else {
            Vec::new()
        };
        out.extend_from_slice(&r.content);
        if !r.partial {
            out.push(b'\n');
        }
        out
    }
}

/// Where the last `n` lines start (a line ends with a full record).
fn tail_start(records: &[&Record], n: usize) -> usize {
    if n == 0 {
        return records.len();
    }
    let mut full_seen = 0;
    for (i, r) in records.iter().enumerate().rev() {
        if !r.partial {
            full_seen += 1;
            if full_seen > n {
                return i + 1;
            }
        }
    }
    0
}

/// Counts the bytes written against `limitBytes`.
#[derive(Clone, Debug)]
pub struct Limit {
    left: Option<usize>,
}

impl Limit {
    /// A limit of `limit_bytes`, or none.
    pub fn new(limit_bytes: Option<usize>) -> Limit {
        Limit { left: limit_bytes }
    }

    /// `bytes`, cut to what the limit still allows.
    pub fn take(&mut self, mut bytes: Vec<u8>) -> Vec<u8> {
        if let Some(left) = &mut self.left {
            bytes.truncate(*left);
            *left -= bytes.len();
        }
        bytes
    }

    /// Whether nothing more may be written.
    pub fn reached(&self) -> bool {
        self.left == Some(0)
    }
}

/// Splits what a stream wrote into records: complete lines, and pieces of at most
/// [`MAX_RECORD`] bytes of a line still going on; what is left waits for more (or the end).
pub fn split_records(
    pending: &mut Vec<u8>,
    stream: Stream,
    time: Timestamp,
    eof: bool,
) -> Vec<Record> {
    let mut records = Vec::new();
    loop {
        let newline = pending.iter().position(|b| *b == b'\n');
        let (take, partial) = match newline {
            Some(i) if i <= MAX_RECORD => (i, false),
            _ if pending.len() > MAX_RECORD => (MAX_RECORD, true),
            None if eof && !pending.is_empty() => (pending.len(), false),
            _ => break,
        };
        let content: Vec<u8> = pending.drain(..take).collect();
        if !partial && pending.first() == Some(&b'\n') {
            pending.remove(0);
        }
        records.push(Record {
            time,
            stream,
            partial,
            content,
        });
    }
    records
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_termination_message_is_the_last_lines_joined_and_bounded() {
        let line = |content: &str, partial: bool| Record {
            time: Timestamp::UNIX_EPOCH,
            stream: Stream::Stderr,
            partial,
            content: content.as_bytes().to_vec(),
        };
        let mut log = Vec::new();
        for i in 0..100 {
            log.extend(line(&format!("line {i}"), false).encode());
        }
        log.extend(line("a long ", true).encode());
        log.extend(line("last line", false).encode());
        let message = termination_message(&log).unwrap();
        assert!(message.ends_with("line 99\na long last line"), "{message}");
        assert_eq!(message.lines().count(), TERMINATION_LINES);
        assert!(message.starts_with("line 21\n"), "{message}");
        let big: Vec<u8> = line(&"x".repeat(5000), false).encode();
        assert_eq!(termination_message(&big).unwrap().len(), TERMINATION_BYTES);
        assert_eq!(termination_message(b""), None);
    }

    use super::*;

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + second).unwrap()
    }

    fn rec(second: i64, stream: Stream, partial: bool, content: &str) -> Record {
        Record {
            time: at(second),
            stream,
            partial,
            content: content.as_bytes().to_vec(),
        }
    }

    #[test]
    fn records_round_trip_through_the_file_format() {
        let r = Record {
            time: "2024-05-01T10:00:00.123456789Z".parse().unwrap(),
            ..rec(0, Stream::Stderr, true, "a b  c")
        };
        let line = r.encode();
        assert_eq!(line, b"2024-05-01T10:00:00.123456789Z stderr P a b  c\n");
        assert_eq!(Record::decode(&line[..line.len() - 1]), Some(r));
        assert_eq!(Record::decode(b"garbage"), None);
    }

    #[test]
    fn only_complete_lines_are_decoded() {
        let mut bytes = rec(1, Stream::Stdout, false, "one").encode();
        bytes.extend_from_slice(b"2024-05-01T10:00:00Z stdout F tw");
        let (records, used) = decode_all(&bytes);
        assert_eq!(records.len(), 1);
        assert_eq!(used, rec(1, Stream::Stdout, false, "one").encode().len());
    }

    #[test]
    fn query_parses_the_api_servers_parameters() {
        let now = at(100);
        let q = LogQuery::parse(
            "follow=true&tailLines=2&sinceSeconds=10&timestamps=true&previous=false&limitBytes=5&stream=Stderr&insecureSkipTLSVerifyBackend=true",
            now,
        )
        .unwrap();
        assert!(q.follow && q.timestamps && !q.previous);
        assert_eq!(q.tail_lines, Some(2));
        assert_eq!(q.since, Some(at(90)));
        assert_eq!(q.limit_bytes, Some(5));
        assert_eq!(q.streams, Streams::Only(Stream::Stderr));
        let q = LogQuery::parse("sinceTime=2024-05-01T10%3A00%3A00Z", now).unwrap();
        assert_eq!(q.since, Some("2024-05-01T10:00:00Z".parse().unwrap()));
        assert!(LogQuery::parse("limitBytes=0", now).is_err());
        assert!(LogQuery::parse("tailLines=x", now).is_err());
    }

    #[test]
    fn tail_counts_lines_not_pieces() {
        let records = vec![
            rec(1, Stream::Stdout, false, "a"),
            rec(2, Stream::Stdout, true, "b1"),
            rec(2, Stream::Stdout, false, "b2"),
            rec(3, Stream::Stderr, false, "c"),
        ];
        let q = LogQuery {
            tail_lines: Some(2),
            ..Default::default()
        };
        let shown: Vec<&str> = q
            .select(&records)
            .iter()
            .map(|r| std::str::from_utf8(&r.content).unwrap())
            .collect();
        assert_eq!(shown, ["b1", "b2", "c"]);
        let none = LogQuery {
            tail_lines: Some(0),
            ..Default::default()
        };
        assert!(none.select(&records).is_empty());
    }

    #[test]
    fn since_and_stream_filter_after_the_tail() {
        let records = vec![
            rec(1, Stream::Stdout, false, "old"),
            rec(5, Stream::Stderr, false, "err"),
            rec(6, Stream::Stdout, false, "new"),
        ];
        let q = LogQuery {
            since: Some(at(4)),
            streams: Streams::Only(Stream::Stdout),
            ..Default::default()
        };
        let shown: Vec<&[u8]> = q
            .select(&records)
            .iter()
            .map(|r| r.content.as_slice())
            .collect();
        assert_eq!(shown, [b"new".as_slice()]);
    }

    #[test]
    fn rendering_adds_timestamps_and_newlines_and_the_limit_cuts() {
        let q = LogQuery {
            timestamps: true,
            ..Default::default()
        };
        let full = rec(0, Stream::Stdout, false, "hello");
        assert_eq!(q.render(&full), format!("{} hello\n", at(0)).into_bytes());
        let plain = LogQuery::default();
        assert_eq!(plain.render(&rec(0, Stream::Stdout, true, "pi")), b"pi");
        let mut limit = Limit::new(Some(4));
        assert_eq!(limit.take(b"hel".to_vec()), b"hel");
        assert!(!limit.reached());
        assert_eq!(limit.take(b"lo\n".to_vec()), b"l");
        assert!(limit.reached());
        assert_eq!(Limit::new(None).take(b"all".to_vec()), b"all");
    }

    #[test]
    fn stream_output_splits_into_lines_and_long_pieces() {
        let mut pending = b"one\ntwo\nthr".to_vec();
        let records = split_records(&mut pending, Stream::Stdout, at(0), false);
        let contents: Vec<&[u8]> = records.iter().map(|r| r.content.as_slice()).collect();
        assert_eq!(contents, [b"one".as_slice(), b"two".as_slice()]);
        assert_eq!(pending, b"thr");
        let last = split_records(&mut pending, Stream::Stdout, at(0), true);
        assert_eq!(last[0].content, b"thr");
        assert!(!last[0].partial && pending.is_empty());
        let mut long = vec![b'x'; MAX_RECORD + 10];
        long.push(b'\n');
        let pieces = split_records(&mut long, Stream::Stderr, at(0), false);
        assert_eq!(pieces.len(), 2);
        assert!(pieces[0].partial && !pieces[1].partial);
        assert_eq!(pieces[1].content.len(), 10);
    }
}
