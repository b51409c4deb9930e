//! Container logs as the kubelet serves them (upstream's cri-client pkg/logs, pure): the
//! PodLogOptions of a `/containerLogs` query, the CRI log line format the runtime writes
//! (`<RFC 3339 time> <stdout|stderr> <P|F> <text>`, and Docker's JSON lines), where a tail of
//! N lines starts, and what each line sends under `sinceSeconds`/`sinceTime`, `timestamps` and
//! `limitBytes`.

use std::io::{Read, Seek, SeekFrom};

use k8s_openapi::api::core::v1::PodStatus;
use k8s_openapi::jiff::{Timestamp, tz::TimeZone};

/// What a `/containerLogs` request asks for (v1.PodLogOptions, as the kubelet decodes its query).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogOptions {
    pub follow: bool,
    pub previous: bool,
    pub timestamps: bool,
    pub since_seconds: Option<i64>,
    pub since_time: Option<Timestamp>,
    pub tail_lines: Option<i64>,
    pub limit_bytes: Option<i64>,
    /// `stream=` other than All: refused (the PodLogsQuerySplitStreams gate is off, as upstream's
    /// default in 1.34).
    pub stream: Option<String>,
}

/// Why a query was refused, with the status code and body the kubelet answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub code: u16,
    pub message: String,
}

/// The query parameter codec's bool: absent is false, `0` or `false` (any case) false, any other
/// value — an empty one too — true.
fn query_bool(value: &str) -> bool {
    !(value == "0" || value.eq_ignore_ascii_case("false"))
}

impl LogOptions {
    /// Decodes the query as upstream's getContainerLogs: `tail` stands for `tailLines` (`all` for
    /// none), a value that does not decode is 400 "Unable to decode query.", and options that do
    /// not validate (ValidatePodLogOptions) are 422 "Invalid request.".
    pub fn from_query(query: &str) -> Result<LogOptions, Refused> {
        let undecodable =
            || Refused { code: 400, message: r#"{"message": "Unable to decode query."}"#.to_owned() };
        let number = |value: &str| value.parse::<i64>().map_err(|_| undecodable());
        let mut options = LogOptions::default();
        let mut tail = None;
        for (key, value) in form_urlencoded::parse(query.as_bytes()) {
            match &*key {
                "follow" => options.follow = query_bool(&value),
                "previous" => options.previous = query_bool(&value),
                "timestamps" => options.timestamps = query_bool(&value),
                "sinceSeconds" => options.since_seconds = Some(number(&value)?),
                "sinceTime" => {
                    options.since_time = Some(value.parse::<Timestamp>().map_err(|_| undecodable())?);
                }
                "tailLines" => options.tail_lines = Some(number(&value)?),
                "limitBytes" => options.limit_bytes = Some(number(&value)?),
                "tail" => tail = Some(value.into_owned()),
                "stream" => options.stream = Some(value.into_owned()),
                _ => {}
            }
        }
        match tail.as_deref() {
            Some("all") => options.tail_lines = None,
            Some(value) if !value.is_empty() => options.tail_lines = Some(number(value)?),
            _ => {}
        }
        let invalid = options.tail_lines.is_some_and(|n| n < 0)
            || options.limit_bytes.is_some_and(|n| n < 1)
            || options.since_seconds.is_some_and(|n| n < 1)
            || (options.since_seconds.is_some() && options.since_time.is_some());
        if invalid {
            return Err(Refused { code: 422, message: r#"{"message": "Invalid request."}"#.to_owned() });
        }
        if let Some(stream) = options.stream.as_deref().filter(|s| *s != "All") {
            return Err(Refused {
                code: 400,
                message: format!(
                    "unable to return the given log stream: {stream:?}. Please enable PodLogsQuerySplitStreams feature gate in kubelet"
                ),
            });
        }
        Ok(options)
    }

    /// The earliest time a line may have to be sent: the later of `now - sinceSeconds` and
    /// `sinceTime`.
    pub fn since(&self, now: Timestamp) -> Option<Timestamp> {
        let by_seconds = self
            .since_seconds
            .and_then(|s| now.checked_sub(k8s_openapi::jiff::SignedDuration::from_secs(s)).ok());
        match (by_seconds, self.since_time) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        }
    }
}

/// One line of a container's log file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub timestamp: Timestamp,
    /// `stdout` or `stderr`.
    pub stream: String,
    /// The text, with its newline unless the runtime split a long line (tag `P`).
    pub log: Vec<u8>,
}

/// Parses a CRI log line (`2016-10-06T00:17:09.669794202Z stdout F log content\n`); a partial
/// line (`P`) loses its newline, so the parts join into the line the container wrote.
pub fn parse_cri(line: &[u8]) -> Result<Message, String> {
    let split = |rest: &[u8], what: &str| -> Result<(usize, usize), String> {
        let at = rest.iter().position(|&b| b == b' ').ok_or_else(|| format!("{what} is not found"))?;
        Ok((at, at + 1))
    };
    let (end, next) = split(line, "timestamp")?;
    let text = std::str::from_utf8(&line[..end]).map_err(|e| e.to_string())?;
    let timestamp = text.parse::<Timestamp>().map_err(|e| format!("unexpected timestamp format: {e}"))?;
    let rest = &line[next..];
    let (end, next) = split(rest, "stream type")?;
    let stream = String::from_utf8_lossy(&rest[..end]).into_owned();
    if stream != "stdout" && stream != "stderr" {
        return Err(format!("unexpected stream type {stream:?}"));
    }
    let rest = &rest[next..];
    let (end, next) = split(rest, "log tag")?;
    let partial = rest[..end].split(|&b| b == b':').next() == Some(b"P");
    let mut log = rest[next..].to_vec();
    if partial && log.last() == Some(&b'\n') {
        log.pop();
    }
    Ok(Message { timestamp, stream, log })
}

/// Parses a Docker JSON log line (`{"log":"…","stream":"stdout","time":"…"}`).
pub fn parse_docker_json(line: &[u8]) -> Result<Message, String> {
    let value: serde_json::Value = serde_json::from_slice(line).map_err(|e| e.to_string())?;
    let field = |name: &str| value.get(name).and_then(serde_json::Value::as_str).unwrap_or_default();
    let timestamp = field("time").parse::<Timestamp>().map_err(|e| e.to_string())?;
    Ok(Message { timestamp, stream: field("stream").to_owned(), log: field("log").as_bytes().to_vec() })
}

/// A log file's format, told by its first line as upstream's getParseFunc does (CRI first).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Cri,
    DockerJson,
}

impl Format {
    pub fn of(line: &[u8]) -> Option<Format> {
        if parse_cri(line).is_ok() {
            Some(Format::Cri)
        } else if parse_docker_json(line).is_ok() {
            Some(Format::DockerJson)
        } else {
            None
        }
    }

    pub fn parse(self, line: &[u8]) -> Result<Message, String> {
        match self {
            Format::Cri => parse_cri(line),
            Format::DockerJson => parse_docker_json(line),
        }
    }
}

/// How far into the file the last `n` lines start (upstream's findTailLineStartIndex): the start
/// for a negative `n`; an incomplete last line is not counted.
pub fn tail_start<F: Read + Seek>(file: &mut F, n: i64) -> std::io::Result<u64> {
    const BLOCK: u64 = 1024;
    let Ok(n) = u64::try_from(n) else { return Ok(0) };
    let size = file.seek(SeekFrom::End(0))?;
    let (mut left, mut count) = (size, 0u64);
    let mut buf = Vec::new();
    while left > 0 && count <= n {
        let right = left;
        left = right.saturating_sub(BLOCK);
        buf.resize(usize::try_from(right - left).unwrap_or(0), 0);
        file.seek(SeekFrom::Start(left))?;
        file.read_exact(&mut buf)?;
        count += u64::try_from(buf.iter().filter(|&&b| b == b'\n').count()).unwrap_or(0);
    }
    // `buf` is the first block read past the line wanted: drop lines until `n` are left.
    let mut skip = 0usize;
    while count > n {
        let at = buf[skip..].iter().position(|&b| b == b'\n').map_or(buf.len() - skip, |p| p + 1);
        skip += at;
        count -= 1;
    }
    Ok(left + u64::try_from(skip).unwrap_or(0))
}

/// What one message sends (upstream's logWriter): nothing before `since`; the timestamp in front
/// of a line's first part when asked; no more than `limitBytes` in all.
#[derive(Debug)]
pub struct LogWriter {
    since: Option<Timestamp>,
    timestamps: bool,
    remain: i64,
    new_line: bool,
}

/// The bytes for one message, and whether the byte limit is now reached (the answer ends).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    pub bytes: Vec<u8>,
    pub done: bool,
}

impl LogWriter {
    pub fn new(options: &LogOptions, now: Timestamp) -> LogWriter {
        LogWriter {
            since: options.since(now),
            timestamps: options.timestamps,
            remain: options.limit_bytes.unwrap_or(i64::MAX),
            new_line: true,
        }
    }

    pub fn write(&mut self, message: &Message) -> Written {
        let prefix = self.new_line;
        self.new_line = message.log.last().is_none_or(|&b| b == b'\n');
        if self.since.is_some_and(|since| message.timestamp < since) {
            return Written { bytes: Vec::new(), done: false };
        }
        let mut bytes = Vec::with_capacity(message.log.len() + 31);
        if self.timestamps && prefix {
            bytes.extend_from_slice(format_timestamp(message.timestamp).as_bytes());
            bytes.push(b' ');
        }
        bytes.extend_from_slice(&message.log);
        let remain = usize::try_from(self.remain).unwrap_or(usize::MAX);
        bytes.truncate(remain);
        self.remain -= i64::try_from(bytes.len()).unwrap_or(i64::MAX);
        Written { bytes, done: self.remain <= 0 }
    }
}

/// The container whose log a request reads (upstream's validateContainerLogStatus), or the
/// message it is refused with.
pub fn log_container_id(pod: &str, status: &PodStatus, name: &str, previous: bool) -> Result<String, String> {
    let all = status
        .container_statuses
        .iter()
        .flatten()
        .chain(status.init_container_statuses.iter().flatten())
        .chain(status.ephemeral_container_statuses.iter().flatten());
    let Some(container) = all.into_iter().find(|c| c.name == name) else {
        return Err(format!("container {name:?} in pod {pod:?} is not available"));
    };
    let last = container.last_state.as_ref().and_then(|s| s.terminated.as_ref());
    let last_id = last.and_then(|t| t.container_id.clone()).filter(|id| !id.is_empty());
    let state = container.state.clone().unwrap_or_default();
    let terminated = || Err(format!("container {name:?} in pod {pod:?} is terminated"));
    if previous {
        return last_id
            .ok_or_else(|| format!("previous terminated container {name:?} in pod {pod:?} not found"));
    }
    if state.running.is_some() {
        return Ok(container.container_id.clone().unwrap_or_default());
    }
    if let Some(done) = &state.terminated {
        return match done.container_id.clone().filter(|id| !id.is_empty()).or(last_id) {
            Some(id) => Ok(id),
            None => terminated(),
        };
    }
    if last.is_some() {
        return last_id.map_or_else(terminated, Ok);
    }
    match state.waiting.and_then(|w| w.reason) {
        Some(reason) if reason == "ErrImagePull" => {
            Err(format!("container {name:?} in pod {pod:?} is waiting to start: image can't be pulled"))
        }
        Some(reason) if reason == "ImagePullBackOff" => Err(format!(
            "container {name:?} in pod {pod:?} is waiting to start: trying and failing to pull image"
        )),
        Some(reason) => Err(format!("container {name:?} in pod {pod:?} is waiting to start: {reason}")),
        None => Err(format!("container {name:?} in pod {pod:?} is waiting to start - no logs yet")),
    }
}

/// Go's RFC3339NanoFixed (`2006-01-02T15:04:05.000000000Z07:00`), in UTC: nine fraction digits
/// always. (Go keeps the offset the line was written with; runtimes here write UTC.)
pub fn format_timestamp(at: Timestamp) -> String {
    at.to_zoned(TimeZone::UTC).strftime("%Y-%m-%dT%H:%M:%S.%9fZ").to_string()
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting,
        ContainerStatus,
    };

    use super::*;

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    #[test]
    fn query_decodes_and_validates_as_the_kubelet() {
        let options = LogOptions::from_query("follow=true&timestamps=1&tail=5&limitBytes=10&previous=false")
            .unwrap_or_default();
        assert_eq!(
            options,
            LogOptions {
                follow: true,
                timestamps: true,
                tail_lines: Some(5),
                limit_bytes: Some(10),
                ..Default::default()
            }
        );
        assert_eq!(LogOptions::from_query("tail=all&tailLines=3").map(|o| o.tail_lines), Ok(None));
        assert_eq!(
            LogOptions::from_query("sinceTime=2026-12-03T10:00:00Z").map(|o| o.since_time),
            Ok(Some(at("2026-12-03T10:00:00Z")))
        );
        for (query, code) in [
            ("tailLines=x", 400),
            ("sinceTime=yesterday", 400),
            ("tailLines=-1", 422),
            ("limitBytes=0", 422),
            ("sinceSeconds=0", 422),
            ("sinceSeconds=5&sinceTime=2026-12-03T10:00:00Z", 422),
            ("stream=Stdout", 400),
        ] {
            assert_eq!(LogOptions::from_query(query).map_err(|r| r.code), Err(code), "{query}");
        }
        assert_eq!(LogOptions::from_query("stream=All").map(|o| o.stream), Ok(Some("All".into())));
    }

    #[test]
    fn cri_lines_parse_and_partial_lines_lose_their_newline() {
        let full = parse_cri(b"2026-12-03T18:59:59.008639941Z stdout F hello\n");
        assert_eq!(
            full,
            Ok(Message {
                timestamp: at("2026-12-03T18:59:59.008639941Z"),
                stream: "stdout".into(),
                log: b"hello\n".to_vec()
            })
        );
        let partial = parse_cri(b"2026-12-03T18:59:59Z stderr P hel\n").map(|m| m.log);
        assert_eq!(partial, Ok(b"hel".to_vec()));
        assert_eq!(parse_cri(b"2026-12-03T18:59:59Z stdout F:x \n").map(|m| m.log), Ok(b"\n".to_vec()));
        assert!(parse_cri(b"nonsense").is_err());
        assert!(parse_cri(b"2026-12-03T18:59:59Z stdin F x\n").is_err());
        assert_eq!(Format::of(b"2026-12-03T18:59:59Z stdout F x\n"), Some(Format::Cri));
        let json = br#"{"log":"hi\n","stream":"stderr","time":"2026-12-03T18:59:59.5Z"}"#;
        assert_eq!(Format::of(json), Some(Format::DockerJson));
        assert_eq!(
            parse_docker_json(json).map(|m| (m.stream, m.log)),
            Ok(("stderr".into(), b"hi\n".to_vec()))
        );
        assert_eq!(Format::of(b"plain text\n"), None);
    }

    #[test]
    fn tail_starts_at_the_last_complete_lines() {
        let start = |content: &str, n: i64| {
            let mut file = std::io::Cursor::new(content.as_bytes().to_vec());
            let at = usize::try_from(tail_start(&mut file, n).unwrap_or(u64::MAX)).unwrap_or(usize::MAX);
            content.get(at..).unwrap_or("<out of range>").to_owned()
        };
        assert_eq!(start("a\nb\nc\n", 1), "c\n");
        assert_eq!(start("a\nb\nc\n", 2), "b\nc\n");
        assert_eq!(start("a\nb\nc\n", 5), "a\nb\nc\n");
        assert_eq!(start("a\nb\nc\n", 0), "");
        assert_eq!(start("a\nb\nc\n", -1), "a\nb\nc\n");
        assert_eq!(start("a\nb\nc", 1), "b\nc");
        assert_eq!(start("", 3), "");
        // Across blocks of 1024 bytes.
        let long: String = (0..600).map(|i| format!("line {i:04}\n")).collect();
        assert_eq!(start(&long, 2), "line 0598\nline 0599\n");
        assert_eq!(start(&long, 600), long);
        assert_eq!(start(&long, 599).lines().next(), Some("line 0001"));
    }

    #[test]
    fn the_writer_filters_prefixes_and_limits() {
        let message =
            |time: &str, log: &str| Message { timestamp: at(time), stream: "stdout".into(), log: log.into() };
        let options = LogOptions { timestamps: true, limit_bytes: Some(71), ..Default::default() };
        let mut writer = LogWriter::new(&options, at("2026-12-03T19:00:00Z"));
        let first = writer.write(&message("2026-12-03T18:00:00.5Z", "par"));
        assert_eq!(first, Written { bytes: b"2026-12-03T18:00:00.500000000Z par".to_vec(), done: false });
        // The rest of a partial line gets no timestamp of its own.
        assert_eq!(writer.write(&message("2026-12-03T18:00:01Z", "tial\n")).bytes, b"tial\n".to_vec());
        let last = writer.write(&message("2026-12-03T18:00:02Z", "a line longer than the limit\n"));
        assert_eq!(last.bytes, b"2026-12-03T18:00:02.000000000Z a".to_vec());
        assert!(last.done);

        let since = LogOptions { since_seconds: Some(60), ..Default::default() };
        let mut writer = LogWriter::new(&since, at("2026-12-03T19:00:00Z"));
        assert!(writer.write(&message("2026-12-03T18:58:59Z", "old\n")).bytes.is_empty());
        assert_eq!(writer.write(&message("2026-12-03T18:59:30Z", "new\n")).bytes, b"new\n".to_vec());
    }

    #[test]
    fn the_log_read_is_the_container_upstream_picks() {
        let status = |state: ContainerState, last: Option<ContainerState>| PodStatus {
            container_statuses: Some(vec![ContainerStatus {
                name: "c".into(),
                container_id: Some("keel-shim://now".into()),
                state: Some(state),
                last_state: last,
                ..ContainerStatus::default()
            }]),
            ..PodStatus::default()
        };
        let running =
            ContainerState { running: Some(ContainerStateRunning::default()), ..Default::default() };
        let ended = |id: &str| ContainerState {
            terminated: Some(ContainerStateTerminated {
                container_id: Some(id.into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let waiting = |reason: &str| ContainerState {
            waiting: Some(ContainerStateWaiting { reason: Some(reason.into()), ..Default::default() }),
            ..Default::default()
        };
        assert_eq!(
            log_container_id("p", &status(running.clone(), None), "c", false),
            Ok("keel-shim://now".into())
        );
        assert_eq!(
            log_container_id("p", &status(running.clone(), None), "c", true),
            Err(r#"previous terminated container "c" in pod "p" not found"#.into())
        );
        let restarted = status(running, Some(ended("keel-shim://before")));
        assert_eq!(log_container_id("p", &restarted, "c", true), Ok("keel-shim://before".into()));
        assert_eq!(
            log_container_id(
                "p",
                &status(waiting("CrashLoopBackOff"), Some(ended("keel-shim://before"))),
                "c",
                false
            ),
            Ok("keel-shim://before".into())
        );
        assert_eq!(
            log_container_id("p", &status(waiting("ContainerCreating"), None), "c", false),
            Err(r#"container "c" in pod "p" is waiting to start: ContainerCreating"#.into())
        );
        assert_eq!(
            log_container_id("p", &status(waiting("ErrImagePull"), None), "c", false),
            Err(r#"container "c" in pod "p" is waiting to start: image can't be pulled"#.into())
        );
        assert_eq!(
            log_container_id("p", &PodStatus::default(), "c", false),
            Err(r#"container "c" in pod "p" is not available"#.into())
        );
    }
}
