//! The log backend (upstream's plugin/pkg/audit/log behind its buffered backend): events go
//! through a bounded queue (`--audit-log-batch-buffer-size`, 10,000) to one writer thread that
//! encodes them (JSON lines, or `legacy` text) and writes them to the file (rotated as
//! [`super::rotate`] says) or to standard output, flushing whenever it has caught up. The request
//! path only clones the event into the queue.
//!
//! `--audit-log-mode` as upstream names it: `batch` drops an event when the queue is full (counted
//! and reported, as upstream's buffered backend does); `blocking` (upstream's default for the log)
//! makes the request wait for room instead, so no event is lost — upstream writes the line on the
//! request's goroutine, Keel only waits when the writer is a whole queue behind; `blocking-strict`
//! also fails the request (500) when its RequestReceived event cannot be queued.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::{mpsc, oneshot};

use super::event::Event;
use super::rotate::{RotatingFile, Rotation};

/// `--audit-log-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Format {
    #[default]
    Json,
    Legacy,
}

/// `--audit-log-mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    Batch,
    #[default]
    Blocking,
    BlockingStrict,
}

impl Mode {
    pub fn parse(text: &str) -> Result<Mode, String> {
        match text {
            "batch" => Ok(Mode::Batch),
            "blocking" => Ok(Mode::Blocking),
            "blocking-strict" => Ok(Mode::BlockingStrict),
            other => Err(format!(
                "invalid audit log mode {other}, allowed modes are \"batch,blocking,blocking-strict\""
            )),
        }
    }
}

impl Format {
    pub fn parse(text: &str) -> Result<Format, String> {
        match text {
            "json" => Ok(Format::Json),
            "legacy" => Ok(Format::Legacy),
            other => Err(format!("invalid audit log format {other}, allowed formats are \"legacy,json\"")),
        }
    }
}

/// Where the lines go.
pub enum Destination {
    /// `--audit-log-path -`.
    Stdout,
    File(PathBuf),
    /// Any writer (tests).
    Writer(Box<dyn Write + Send>),
}

impl std::fmt::Debug for Destination {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Destination::Stdout => f.write_str("Stdout"),
            Destination::File(path) => write!(f, "File({})", path.display()),
            Destination::Writer(_) => f.write_str("Writer"),
        }
    }
}

/// The log backend's settings (the `--audit-log-*` flags).
#[derive(Debug)]
pub struct LogOptions {
    pub destination: Destination,
    pub format: Format,
    pub mode: Mode,
    /// `--audit-log-batch-buffer-size`: events queued at most.
    pub buffer_size: usize,
    pub rotation: Rotation,
}

/// How long the writer lets events gather once it has found more than one waiting.
const LINGER: std::time::Duration = std::time::Duration::from_millis(2);

/// upstream's defaultBatchBufferSize.
pub const DEFAULT_BUFFER_SIZE: usize = 10_000;

impl LogOptions {
    pub fn new(destination: Destination) -> LogOptions {
        LogOptions {
            destination,
            format: Format::Json,
            mode: Mode::Blocking,
            buffer_size: DEFAULT_BUFFER_SIZE,
            rotation: Rotation::default(),
        }
    }
}

enum Message {
    Event(Box<Event>),
    /// Answered once everything queued before it is written and flushed.
    Flush(oneshot::Sender<()>),
}

/// The running backend: the queue's sending side.
#[derive(Debug)]
pub struct LogBackend {
    sender: mpsc::Sender<Message>,
    mode: Mode,
    /// Events dropped because the queue was full (batch mode) or the writer had stopped.
    dropped: AtomicU64,
}

/// What the writer thread writes to.
enum Output {
    File(RotatingFile),
    Stream(Box<dyn Write + Send>),
}

impl Output {
    fn write_line(&mut self, line: &[u8]) -> std::io::Result<()> {
        match self {
            Output::File(file) => file.write_line(line),
            Output::Stream(stream) => stream.write_all(line),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Output::File(file) => file.flush(),
            Output::Stream(stream) => stream.flush(),
        }
    }
}

impl LogBackend {
    /// Opens the destination (a file is made at once, 0600 in a 0700 directory, as kube-apiserver
    /// does) and starts the writer thread.
    pub fn start(options: LogOptions) -> std::io::Result<Arc<LogBackend>> {
        let mut output = match options.destination {
            Destination::Stdout => Output::Stream(Box::new(std::io::BufWriter::new(std::io::stdout()))),
            Destination::File(path) => Output::File(RotatingFile::create(&path, options.rotation)?),
            Destination::Writer(writer) => Output::Stream(writer),
        };
        let (sender, mut receiver) = mpsc::channel::<Message>(options.buffer_size.max(1));
        let format = options.format;
        std::thread::Builder::new().name("audit-log".into()).spawn(move || {
            while let Some(message) = receiver.blocking_recv() {
                let mut flushed = Vec::new();
                let mut next = Some(message);
                let mut batch = 0;
                while let Some(message) = next.take() {
                    match message {
                        Message::Event(event) => {
                            batch += 1;
                            let line = match format {
                                Format::Json => event.to_json_line(),
                                Format::Legacy => event.to_legacy_line(),
                            };
                            if let Err(error) = output.write_line(&line) {
                                tracing::error!(%error, audit_id = %event.audit_id, "Error in audit plugin 'log' affecting 1 audit events");
                            }
                        }
                        Message::Flush(done) => flushed.push(done),
                    }
                    next = receiver.try_recv().ok();
                }
                if let Err(error) = output.flush() {
                    tracing::error!(%error, "Error in audit plugin 'log': flushing");
                }
                let waiting = !flushed.is_empty();
                for done in flushed {
                    let _ = done.send(());
                }
                // Under load, let events gather for a moment rather than wake for each one (a
                // wake and a write(2) per event cost the requests' cores more than the encoding).
                if batch > 1 && !waiting {
                    std::thread::sleep(LINGER);
                }
            }
            let _ = output.flush();
        })?;
        Ok(Arc::new(LogBackend { sender, mode: options.mode, dropped: AtomicU64::new(0) }))
    }

    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Queues `event`; `false` when it could not be (the queue full in batch mode, or the writer
    /// gone).
    pub async fn process(&self, event: Event) -> bool {
        let message = Message::Event(Box::new(event));
        let sent = match self.mode {
            Mode::Batch => self.sender.try_send(message).is_ok(),
            Mode::Blocking | Mode::BlockingStrict => self.sender.send(message).await.is_ok(),
        };
        if !sent {
            self.count_drop();
        }
        sent
    }

    /// Queues `event` from where nothing can wait (a response body dropped): in the blocking modes
    /// a full queue hands it to a task that waits for room.
    pub fn process_now(&self, event: Event) {
        match self.sender.try_send(Message::Event(Box::new(event))) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(message)) if self.mode != Mode::Batch => {
                let sender = self.sender.clone();
                match tokio::runtime::Handle::try_current() {
                    Ok(runtime) => {
                        runtime.spawn(async move {
                            let _ = sender.send(message).await;
                        });
                    }
                    Err(_) => self.count_drop(),
                }
            }
            Err(_) => self.count_drop(),
        }
    }

    fn count_drop(&self) {
        let dropped = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
        if dropped == 1 || dropped.is_multiple_of(1000) {
            tracing::error!(
                dropped,
                "Error in audit plugin 'log': audit buffer queue blocked; events dropped"
            );
        }
    }

    /// How many events were dropped.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Waits until every event queued so far is written and flushed (upstream's Shutdown drains the
    /// buffer the same way).
    pub async fn flush(&self) {
        let (done, written) = oneshot::channel();
        if self.sender.send(Message::Flush(done)).await.is_ok() {
            let _ = written.await;
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::audit::policy::Level;
    use std::sync::Mutex;

    /// A writer into shared memory (the audit module's tests use it too).
    #[derive(Clone, Default)]
    pub(crate) struct Shared(pub(crate) Arc<Mutex<Vec<u8>>>);

    impl Write for Shared {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn event(id: &str) -> Event {
        Event::new(Level::Metadata, id.into(), "2026-12-02T11:02:28Z".parse().unwrap())
    }

    #[tokio::test]
    async fn events_written_in_order_as_json_lines() {
        let shared = Shared::default();
        let backend =
            LogBackend::start(LogOptions::new(Destination::Writer(Box::new(shared.clone())))).unwrap();
        for i in 0..100 {
            assert!(backend.process(event(&i.to_string())).await);
        }
        backend.flush().await;
        let text = String::from_utf8(shared.0.lock().unwrap().clone()).unwrap();
        let ids: Vec<String> = text
            .lines()
            .map(|l| {
                serde_json::from_str::<serde_json::Value>(l).unwrap()["auditID"].as_str().unwrap().to_owned()
            })
            .collect();
        assert_eq!(ids, (0..100).map(|i| i.to_string()).collect::<Vec<_>>());
        assert_eq!(backend.dropped(), 0);
    }

    /// A writer that waits until it is let go.
    struct Gate(Arc<std::sync::Barrier>, Shared);

    impl Write for Gate {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.wait();
            self.1.write(bytes)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[tokio::test]
    async fn batch_mode_drops_when_full_blocking_waits() {
        let gate = Arc::new(std::sync::Barrier::new(2));
        let mut options =
            LogOptions::new(Destination::Writer(Box::new(Gate(gate.clone(), Shared::default()))));
        options.mode = Mode::Batch;
        options.buffer_size = 2;
        let backend = LogBackend::start(options).unwrap();
        // The writer takes the first event and waits at the gate; two more fill the queue.
        assert!(backend.process(event("held")).await);
        let mut queued = 0;
        while backend.dropped() == 0 {
            if backend.process(event("more")).await {
                queued += 1;
            }
            tokio::task::yield_now().await;
        }
        assert!(queued <= 3, "{queued}");
        let gate_opener = std::thread::spawn(move || {
            for _ in 0..=queued {
                gate.wait();
            }
        });
        backend.flush().await;
        gate_opener.join().unwrap();

        let shared = Shared::default();
        let gate = Arc::new(std::sync::Barrier::new(2));
        let mut options = LogOptions::new(Destination::Writer(Box::new(Gate(gate.clone(), shared.clone()))));
        options.buffer_size = 1;
        let backend = LogBackend::start(options).unwrap();
        let opener = std::thread::spawn(move || {
            for _ in 0..5 {
                gate.wait();
            }
        });
        for i in 0..5 {
            assert!(backend.process(event(&i.to_string())).await, "blocking mode waits for room");
        }
        backend.flush().await;
        opener.join().unwrap();
        assert_eq!(String::from_utf8(shared.0.lock().unwrap().clone()).unwrap().lines().count(), 5);
        assert_eq!(backend.dropped(), 0);
    }

    #[test]
    fn flag_values_as_upstream() {
        assert_eq!(Format::parse("legacy"), Ok(Format::Legacy));
        assert_eq!(
            Format::parse("xml").unwrap_err(),
            "invalid audit log format xml, allowed formats are \"legacy,json\""
        );
        assert_eq!(Mode::parse("blocking-strict"), Ok(Mode::BlockingStrict));
        assert_eq!(
            Mode::parse("sync").unwrap_err(),
            "invalid audit log mode sync, allowed modes are \"batch,blocking,blocking-strict\""
        );
    }
}
