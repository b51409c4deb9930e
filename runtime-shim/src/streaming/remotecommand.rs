//! Exec and attach sessions, as the kubelet's `cri/streaming/remotecommand` serves them: the streams
//! the client opens (SPDY: one stream per `streamType`; websocket: channels 0 stdin, 1 stdout,
//! 2 stderr, 3 error, 4 resize), the backend's run, then the outcome on the error stream — in v4 and
//! v5 a JSON `metav1.Status` (Success; Failure with reason NonZeroExitCode and an ExitCode cause;
//! InternalError), in older versions the error's text only.

use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use k8s_cri::v1 as api;
use serde_json::json;
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::mpsc;

use super::http::{self, Body};
use super::spdy::{ChannelReader, Outgoing, Session};
use super::ws::{self, ChannelWriter, Channels};
use super::{Shared, Streams, TerminalSize};

/// SPDY versions served, newest first (apimachinery's `SupportedStreamingProtocols`).
const SPDY_PROTOCOLS: &[&str] =
    &["v4.channel.k8s.io", "v3.channel.k8s.io", "v2.channel.k8s.io", "channel.k8s.io"];
/// Websocket subprotocols served ("" = a client naming none: binary channels).
const WS_PROTOCOLS: &[&str] = &[
    "v5.channel.k8s.io",
    "v4.channel.k8s.io",
    "v4.base64.channel.k8s.io",
    "channel.k8s.io",
    "base64.channel.k8s.io",
    "",
];
/// Bytes buffered between the backend and a client stream.
const PIPE: usize = 64 << 10;

const STDIN: u8 = 0;
const STDOUT: u8 = 1;
const STDERR: u8 = 2;
const ERROR: u8 = 3;
const RESIZE: u8 = 4;

/// What the session runs.
enum Target {
    Exec { container_id: String, cmd: Vec<String> },
    Attach { container_id: String },
}

/// Which streams the client asked for.
#[derive(Clone, Copy)]
struct Options {
    stdin: bool,
    stdout: bool,
    stderr: bool,
    tty: bool,
}

pub(super) fn serve_exec(
    shared: &Arc<Shared>,
    req: Request<Incoming>,
    exec: api::ExecRequest,
) -> Response<Body> {
    let options = Options { stdin: exec.stdin, stdout: exec.stdout, stderr: exec.stderr, tty: exec.tty };
    serve(shared, req, Target::Exec { container_id: exec.container_id, cmd: exec.cmd }, options)
}

pub(super) fn serve_attach(
    shared: &Arc<Shared>,
    req: Request<Incoming>,
    attach: api::AttachRequest,
) -> Response<Body> {
    let options =
        Options { stdin: attach.stdin, stdout: attach.stdout, stderr: attach.stderr, tty: attach.tty };
    serve(shared, req, Target::Attach { container_id: attach.container_id }, options)
}

/// A stream the server writes to, over either protocol.
#[derive(Clone)]
pub(super) enum Sink {
    Spdy(Outgoing),
    Ws(ChannelWriter),
}

impl Sink {
    pub(super) async fn write(&self, data: &[u8]) -> bool {
        match self {
            Sink::Spdy(out) => out.write(data).await,
            Sink::Ws(out) => out.write(data).await,
        }
    }

    pub(super) async fn close(&self) {
        if let Sink::Spdy(out) = self {
            out.close().await;
        }
    }

    /// Copies `source` to the client until EOF, then half-closes the stream.
    pub(super) async fn pump(self, mut source: impl AsyncRead + Unpin) {
        let mut buf = vec![0u8; 32 << 10];
        while let Ok(n) = source.read(&mut buf).await {
            if n == 0 || !self.write(&buf[..n]).await {
                break;
            }
        }
        self.close().await;
    }
}

/// The client's streams once opened.
#[derive(Default)]
struct Opened {
    stdin: Option<ChannelReader>,
    stdout: Option<Sink>,
    stderr: Option<Sink>,
    error: Option<Sink>,
    resize: Option<ChannelReader>,
    /// v4/v5: the status as JSON; older: the error's text.
    json_status: bool,
}

fn serve(
    shared: &Arc<Shared>,
    mut req: Request<Incoming>,
    target: Target,
    options: Options,
) -> Response<Body> {
    let shared = shared.clone();
    if http::is_websocket(&req) {
        let (response, protocol) = match http::websocket_upgrade(&req, WS_PROTOCOLS) {
            Ok(ok) => ok,
            Err(response) => return *response,
        };
        let upgrade = hyper::upgrade::on(&mut req);
        tokio::spawn(async move {
            let Ok(upgraded) = upgrade.await else { return };
            let mut readable = vec![RESIZE];
            if options.stdin {
                readable.push(STDIN);
            }
            let mut writable = vec![ERROR];
            if options.stdout {
                writable.push(STDOUT);
            }
            if options.stderr {
                writable.push(STDERR);
            }
            let mut channels = Channels::start(
                upgraded,
                ws::framing(protocol),
                &readable,
                &writable,
                shared.config.idle_timeout,
            )
            .await;
            let take = |channel| channels.writers.get(&channel).cloned().map(Sink::Ws);
            let (stdout, stderr, error) = (take(STDOUT), take(STDERR), take(ERROR));
            let opened = Opened {
                stdout,
                stderr,
                error,
                stdin: channels.readers.remove(&STDIN),
                resize: channels.readers.remove(&RESIZE),
                json_status: protocol.starts_with("v4.") || protocol.starts_with("v5."),
            };
            // wsstream's signal that the session is open: an empty message on the lowest writable channel.
            if let Some(first) = opened.stdout.as_ref().or(opened.stderr.as_ref()).or(opened.error.as_ref()) {
                first.write(&[]).await;
            }
            run(&shared, target, options, opened).await;
            channels.close().await;
        });
        return response;
    }
    let (response, protocol) = match http::spdy_upgrade(&req, SPDY_PROTOCOLS) {
        Ok(ok) => ok,
        Err(response) => return *response,
    };
    let upgrade = hyper::upgrade::on(&mut req);
    tokio::spawn(async move {
        let Ok(upgraded) = upgrade.await else { return };
        let mut session = Session::start(TokioIo::new(upgraded), shared.config.idle_timeout);
        let resize = options.tty && protocol != "v2.channel.k8s.io" && protocol != "channel.k8s.io";
        let expected =
            1 + [options.stdin, options.stdout, options.stderr, resize].iter().filter(|b| **b).count();
        let opened =
            tokio::time::timeout(shared.config.stream_creation_timeout, spdy_streams(&mut session, expected))
                .await;
        if let Ok(Some(mut opened)) = opened {
            session.accept_rest();
            opened.json_status = protocol == "v4.channel.k8s.io";
            run(&shared, target, options, opened).await;
        }
        session.close().await;
    });
    response
}

/// Waits for `expected` streams, replying to each (the kubelet's `waitForStreams`); None when the
/// client leaves first.
async fn spdy_streams(session: &mut Session, expected: usize) -> Option<Opened> {
    let mut opened = Opened::default();
    for _ in 0..expected {
        let stream = session.streams.recv().await?;
        stream.out.reply().await;
        let kind = stream.header("streamtype").unwrap_or_default().to_owned();
        let out = Some(Sink::Spdy(stream.out));
        match kind.as_str() {
            "error" => opened.error = out,
            "stdin" => opened.stdin = Some(stream.reader),
            "stdout" => opened.stdout = out,
            "stderr" => opened.stderr = out,
            "resize" => opened.resize = Some(stream.reader),
            _ => {}
        }
    }
    Some(opened)
}

/// Feeds the terminal sizes decoded from `reader` (a stream of JSON objects) to `sizes`.
async fn decode_sizes(mut reader: ChannelReader, sizes: mpsc::Sender<TerminalSize>) {
    let mut pending = Vec::new();
    let mut buf = [0u8; 1024];
    while let Ok(n) = reader.read(&mut buf).await {
        if n == 0 {
            return;
        }
        pending.extend_from_slice(&buf[..n]);
        let mut values = serde_json::Deserializer::from_slice(&pending).into_iter::<TerminalSize>();
        let mut used = 0;
        loop {
            match values.next() {
                Some(Ok(size)) => {
                    used = values.byte_offset();
                    if sizes.send(size).await.is_err() {
                        return;
                    }
                }
                Some(Err(err)) if err.is_eof() => break,
                // The kubelet stops reading sizes at the first undecodable one.
                Some(Err(_)) => return,
                None => {
                    used = pending.len();
                    break;
                }
            }
        }
        pending.drain(..used);
    }
}

async fn run(shared: &Arc<Shared>, target: Target, options: Options, opened: Opened) {
    let mut pumps = Vec::new();
    let mut writer = |sink: Option<Sink>| {
        sink.map(|sink| {
            let (ours, theirs) = tokio::io::duplex(PIPE);
            pumps.push(tokio::spawn(sink.pump(ours)));
            Box::new(theirs) as Box<dyn tokio::io::AsyncWrite + Send + Unpin>
        })
    };
    let stdout = writer(opened.stdout);
    let stderr = writer(opened.stderr);
    let resize = opened.resize.map(|reader| {
        let (tx, rx) = mpsc::channel(8);
        tokio::spawn(decode_sizes(reader, tx));
        rx
    });
    let streams = Streams {
        stdin: opened.stdin.map(|reader| Box::new(reader) as Box<dyn AsyncRead + Send + Unpin>),
        stdout,
        stderr,
        resize,
    };
    let backend = shared.backend.clone();
    let status = match target {
        Target::Exec { container_id, cmd } => {
            let shown = cmd.join(" ");
            match backend.exec(container_id, cmd, options.tty, streams).await {
                Ok(0) => success(),
                Ok(code) => non_zero_exit(&shown, code),
                Err(err) => internal_error(&format!("error executing command in container: {err}")),
            }
        }
        Target::Attach { container_id } => match backend.attach(container_id, options.tty, streams).await {
            Ok(()) => success(),
            Err(err) => internal_error(&format!("error attaching to container: {err}")),
        },
    };
    for pump in pumps {
        let _ = pump.await;
    }
    if let Some(error) = opened.error {
        let failed = status["status"] != "Success";
        if opened.json_status {
            error.write(status.to_string().as_bytes()).await;
        } else if failed && let Some(message) = status["message"].as_str() {
            error.write(message.as_bytes()).await;
        }
        error.close().await;
    }
}

fn success() -> serde_json::Value {
    json!({"metadata": {}, "status": "Success"})
}

/// The status of a command that exited non-zero, as the kubelet's ServeExec writes it.
fn non_zero_exit(cmd: &str, code: i32) -> serde_json::Value {
    json!({
        "metadata": {},
        "status": "Failure",
        "message": format!("command terminated with non-zero exit code: command '{cmd}' exited with {code}"),
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": code.to_string()}]},
    })
}

/// `apierrors.NewInternalError`.
fn internal_error(message: &str) -> serde_json::Value {
    json!({
        "metadata": {},
        "status": "Failure",
        "message": format!("Internal error occurred: {message}"),
        "reason": "InternalError",
        "details": {"causes": [{"message": message}]},
        "code": 500,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_as_the_kubelet_writes_them() {
        assert_eq!(success().to_string(), r#"{"metadata":{},"status":"Success"}"#);
        let status = non_zero_exit("sh -c exit 3", 3);
        assert_eq!(status["reason"], "NonZeroExitCode");
        assert_eq!(status["details"]["causes"][0], json!({"reason": "ExitCode", "message": "3"}));
        assert_eq!(internal_error("boom")["code"], 500);
    }

    #[tokio::test]
    async fn sizes_are_decoded_across_reads() {
        let (tx, reader) = ChannelReader::new();
        let (sizes_tx, mut sizes) = mpsc::channel(8);
        tokio::spawn(decode_sizes(reader, sizes_tx));
        tx.send(br#"{"Width":80,"Hei"#.to_vec()).unwrap();
        tx.send(br#"ght":24}{"Width":100,"Height":30}"#.to_vec()).unwrap();
        drop(tx);
        assert_eq!(sizes.recv().await, Some(TerminalSize { width: 80, height: 24 }));
        assert_eq!(sizes.recv().await, Some(TerminalSize { width: 100, height: 30 }));
        assert_eq!(sizes.recv().await, None);
    }
}
