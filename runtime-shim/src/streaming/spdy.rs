//! The server side of SPDY/3.1 as Kubernetes uses it (moby/spdystream under apimachinery's
//! httpstream/spdy): after an HTTP/1.1 `Upgrade: SPDY/3.1`, the client opens streams with SYN_STREAM
//! frames whose headers (`streamType`, `port`, `requestID`) say what each stream is; the server answers
//! each with SYN_REPLY (or RST_STREAM to refuse it), data flows in DATA frames, FIN half-closes a
//! stream, PING is echoed and GOAWAY ends the session.
//!
//! Hand-written because no maintained Rust SPDY crate exists (SPDY was superseded by HTTP/2 and the
//! old crates are abandoned); Kubernetes clients still speak it for exec, attach and port-forward.
//! Only what those clients use is implemented: no flow control (spdystream neither sends nor needs
//! WINDOW_UPDATE), no server-initiated streams, no server push.
//!
//! Header blocks are compressed with one zlib stream per direction for the whole session, primed with
//! SPDY/3's dictionary (draft-mbelshe-httpbis-spdy-00 §2.6.10.1) and flushed with Z_SYNC_FLUSH after
//! each block.

use std::collections::HashMap;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::OnceLock;
use std::task::{Context, Poll};
use std::time::Duration;

use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::sync::mpsc;

use super::idle::Idle;

/// The protocol version in every control frame.
const VERSION: u16 = 3;
const SYN_STREAM: u16 = 1;
const SYN_REPLY: u16 = 2;
const RST_STREAM: u16 = 3;
const PING: u16 = 6;
const GOAWAY: u16 = 7;
const HEADERS: u16 = 8;
const FLAG_FIN: u8 = 0x01;
/// RST_STREAM status of a stream the server refuses.
pub const REFUSED_STREAM: u32 = 3;
/// The largest frame accepted (spdystream never sends frames near it).
const MAX_FRAME: usize = 16 << 20;
/// The largest decompressed header block accepted.
const MAX_HEADER_BLOCK: usize = 1 << 20;
/// DATA frames sent carry at most this many bytes.
const MAX_DATA: usize = 32 << 10;

/// SPDY/3's zlib dictionary: the length-prefixed words, then the raw tail, as the draft lists them.
fn dictionary() -> &'static [u8] {
    static DICTIONARY: OnceLock<Vec<u8>> = OnceLock::new();
    DICTIONARY.get_or_init(|| {
        const WORDS: &[&str] = &[
            "options",
            "head",
            "post",
            "put",
            "delete",
            "trace",
            "accept",
            "accept-charset",
            "accept-encoding",
            "accept-language",
            "accept-ranges",
            "age",
            "allow",
            "authorization",
            "cache-control",
            "connection",
            "content-base",
            "content-encoding",
            "content-language",
            "content-length",
            "content-location",
            "content-md5",
            "content-range",
            "content-type",
            "date",
            "etag",
            "expect",
            "expires",
            "from",
            "host",
            "if-match",
            "if-modified-since",
            "if-none-match",
            "if-range",
            "if-unmodified-since",
            "last-modified",
            "location",
            "max-forwards",
            "pragma",
            "proxy-authenticate",
            "proxy-authorization",
            "range",
            "referer",
            "retry-after",
            "server",
            "te",
            "trailer",
            "transfer-encoding",
            "upgrade",
            "user-agent",
            "vary",
            "via",
            "warning",
            "www-authenticate",
            "method",
            "get",
            "status",
            "200 OK",
            "version",
            "HTTP/1.1",
            "url",
            "public",
            "set-cookie",
            "keep-alive",
            "origin",
        ];
        const TAIL: &str = concat!(
            "100101201202205206300302303304305306307402405406407408409410411412413414415416417502504505",
            "203 Non-Authoritative Information204 No Content301 Moved Permanently400 Bad Request",
            "401 Unauthorized403 Forbidden404 Not Found500 Internal Server Error501 Not Implemented",
            "503 Service UnavailableJan Feb Mar Apr May Jun Jul Aug Sept Oct Nov Dec 00:00:00 ",
            "Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMTchunked,text/html,image/png,image/jpg,image/gif,",
            "application/xml,application/xhtml+xml,text/plain,text/javascript,publicprivatemax-age=",
            "gzip,deflate,sdchcharset=utf-8charset=iso-8859-1,utf-,*,enq=0.",
        );
        let mut dictionary = Vec::with_capacity(1423);
        for word in WORDS {
            dictionary.extend_from_slice(&u32::try_from(word.len()).unwrap_or(0).to_be_bytes());
            dictionary.extend_from_slice(word.as_bytes());
        }
        dictionary.extend_from_slice(TAIL.as_bytes());
        dictionary
    })
}

/// A stream the client opened, handed to the protocol handler, which replies to or refuses it.
#[derive(Debug)]
pub struct SpdyStream {
    /// The stream id the client chose (odd).
    pub id: u32,
    /// Its headers, names lowercase as SPDY sends them.
    pub headers: Vec<(String, String)>,
    /// What the client sends on it; EOF at its FIN or reset, or when the session ends.
    pub reader: ChannelReader,
    /// Frames to the client.
    pub out: Outgoing,
}

impl SpdyStream {
    /// The value of header `name` (case-insensitive), as Go's `http.Header.Get`.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(key, _)| key.eq_ignore_ascii_case(name)).map(|(_, value)| value.as_str())
    }
}

/// What the client sends on one stream, as an [`AsyncRead`].
#[derive(Debug)]
pub struct ChannelReader {
    rx: mpsc::UnboundedReceiver<Vec<u8>>,
    pending: Vec<u8>,
    offset: usize,
}

impl ChannelReader {
    /// A reader fed by the returned sender; EOF once the sender is dropped and everything is read.
    pub fn new() -> (mpsc::UnboundedSender<Vec<u8>>, ChannelReader) {
        let (tx, rx) = mpsc::unbounded_channel();
        (tx, ChannelReader { rx, pending: Vec::new(), offset: 0 })
    }
}

impl AsyncRead for ChannelReader {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        while self.offset >= self.pending.len() {
            match self.rx.poll_recv(cx) {
                Poll::Ready(Some(data)) => {
                    self.pending = data;
                    self.offset = 0;
                }
                Poll::Ready(None) => return Poll::Ready(Ok(())),
                Poll::Pending => return Poll::Pending,
            }
        }
        let n = buf.remaining().min(self.pending.len() - self.offset);
        let start = self.offset;
        buf.put_slice(&self.pending[start..start + n]);
        self.offset += n;
        Poll::Ready(Ok(()))
    }
}

/// A frame for the writer task.
#[derive(Debug)]
enum Frame {
    Reply(u32),
    Data {
        id: u32,
        data: Vec<u8>,
        fin: bool,
    },
    Reset {
        id: u32,
        status: u32,
    },
    Ping(u32),
    /// The session's end: GOAWAY, then the write side is shut down.
    GoAway,
}

/// The sending side of one stream (cheap to clone).
#[derive(Debug, Clone)]
pub struct Outgoing {
    id: u32,
    frames: mpsc::Sender<Frame>,
}

impl Outgoing {
    /// Accepts the stream (SYN_REPLY with no headers).
    pub async fn reply(&self) {
        let _ = self.frames.send(Frame::Reply(self.id)).await;
    }

    /// Refuses the stream (RST_STREAM REFUSED_STREAM), as spdystream's `Refuse`.
    pub async fn refuse(&self) {
        let _ = self.frames.send(Frame::Reset { id: self.id, status: REFUSED_STREAM }).await;
    }

    /// Sends `data` (in frames of at most 32 KiB); false once the session is gone.
    pub async fn write(&self, data: &[u8]) -> bool {
        for chunk in data.chunks(MAX_DATA) {
            let frame = Frame::Data { id: self.id, data: chunk.to_vec(), fin: false };
            if self.frames.send(frame).await.is_err() {
                return false;
            }
        }
        true
    }

    /// Half-closes the stream (an empty DATA frame with FIN).
    pub async fn close(&self) {
        let _ = self.frames.send(Frame::Data { id: self.id, data: Vec::new(), fin: true }).await;
    }

    /// Copies `source` to the stream until EOF, then half-closes it.
    pub async fn pump(self, mut source: impl AsyncRead + Unpin) {
        let mut buf = vec![0u8; MAX_DATA];
        loop {
            match source.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if !self.write(&buf[..n]).await {
                        return;
                    }
                }
            }
        }
        self.close().await;
    }
}

/// An upgraded connection speaking SPDY/3.1: the streams the client opens, in order.
#[derive(Debug)]
pub struct Session {
    /// New streams; None once the client went away (GOAWAY, EOF, a protocol error).
    pub streams: mpsc::UnboundedReceiver<SpdyStream>,
    frames: mpsc::Sender<Frame>,
    writer: tokio::task::JoinHandle<()>,
}

impl Session {
    /// Serves SPDY/3.1 on `io` (the upgraded connection): a reader task and a writer task; the
    /// connection closes after `idle_timeout` without a frame either way.
    pub fn start<IO>(io: IO, idle_timeout: Duration) -> Session
    where
        IO: AsyncRead + AsyncWrite + Send + 'static,
    {
        let (read, write) = tokio::io::split(io);
        let (frames_tx, frames_rx) = mpsc::channel(64);
        let (streams_tx, streams) = mpsc::unbounded_channel();
        let idle = Idle::start(idle_timeout);
        let writer = tokio::spawn(write_frames(write, frames_rx, idle.clone()));
        tokio::spawn(read_frames(read, streams_tx, frames_tx.clone(), idle));
        Session { streams, frames: frames_tx, writer }
    }

    /// Accepts every stream opened from now on without using it, as spdystream replies to each
    /// stream whether or not the kubelet's handler waits for it (an extra stream must not stall the
    /// client, which waits for each reply before opening the next).
    pub fn accept_rest(&mut self) {
        let (_, empty) = mpsc::unbounded_channel();
        let mut streams = std::mem::replace(&mut self.streams, empty);
        tokio::spawn(async move {
            while let Some(stream) = streams.recv().await {
                stream.out.reply().await;
            }
        });
    }

    /// Ends the session after the frames queued so far: GOAWAY and the write side shut down, as
    /// spdystream's `Close` (the client's streams still open then see EOF). Reading goes on until
    /// the client closes, so nothing it sends late resets the connection.
    pub async fn close(self) {
        drop(self.streams);
        let _ = self.frames.send(Frame::GoAway).await;
        drop(self.frames);
        let _ = self.writer.await;
    }
}

fn header(kind: u16, flags: u8, length: usize) -> [u8; 8] {
    let mut header = [0u8; 8];
    header[..2].copy_from_slice(&(0x8000 | VERSION).to_be_bytes());
    header[2..4].copy_from_slice(&kind.to_be_bytes());
    let length = u32::try_from(length).unwrap_or(0) & 0x00ff_ffff;
    header[4..].copy_from_slice(&length.to_be_bytes());
    header[4] = flags;
    header
}

/// Compresses header blocks for one direction of the session.
struct Deflater(Compress);

impl Deflater {
    fn new() -> io::Result<Deflater> {
        let mut compress = Compress::new(Compression::default(), true);
        compress.set_dictionary(dictionary()).map_err(io::Error::other)?;
        Ok(Deflater(compress))
    }

    fn block(&mut self, headers: &[(&str, &str)]) -> io::Result<Vec<u8>> {
        let mut raw = Vec::new();
        raw.extend_from_slice(&u32::try_from(headers.len()).unwrap_or(0).to_be_bytes());
        for (name, value) in headers {
            for part in [name, value] {
                raw.extend_from_slice(&u32::try_from(part.len()).unwrap_or(0).to_be_bytes());
                raw.extend_from_slice(part.as_bytes());
            }
        }
        let mut out = Vec::with_capacity(raw.len() + 64);
        let mut consumed = 0usize;
        loop {
            let before = self.0.total_in();
            self.0.compress_vec(&raw[consumed..], &mut out, FlushCompress::Sync).map_err(io::Error::other)?;
            consumed += usize::try_from(self.0.total_in() - before).unwrap_or(0);
            if consumed >= raw.len() && out.len() < out.capacity() {
                return Ok(out);
            }
            out.reserve(256);
        }
    }
}

async fn write_frames<W: AsyncWrite + Unpin>(
    mut write: W,
    mut frames: mpsc::Receiver<Frame>,
    idle: Arc<Idle>,
) {
    let Ok(mut deflater) = Deflater::new() else { return };
    loop {
        let frame = tokio::select! {
            frame = frames.recv() => match frame { Some(frame) => frame, None => break },
            () = idle.expired.cancelled() => break,
        };
        idle.touch();
        let mut bytes = Vec::new();
        match frame {
            Frame::Reply(id) => {
                let Ok(block) = deflater.block(&[]) else { break };
                bytes.extend_from_slice(&header(SYN_REPLY, 0, 4 + block.len()));
                bytes.extend_from_slice(&id.to_be_bytes());
                bytes.extend_from_slice(&block);
            }
            Frame::Data { id, data, fin } => {
                let length = u32::try_from(data.len()).unwrap_or(0);
                bytes.extend_from_slice(&(id & 0x7fff_ffff).to_be_bytes());
                bytes.extend_from_slice(&length.to_be_bytes());
                bytes[4] = if fin { FLAG_FIN } else { 0 };
                bytes.extend_from_slice(&data);
            }
            Frame::Reset { id, status } => {
                bytes.extend_from_slice(&header(RST_STREAM, 0, 8));
                bytes.extend_from_slice(&id.to_be_bytes());
                bytes.extend_from_slice(&status.to_be_bytes());
            }
            Frame::Ping(id) => {
                bytes.extend_from_slice(&header(PING, 0, 4));
                bytes.extend_from_slice(&id.to_be_bytes());
            }
            Frame::GoAway => {
                bytes.extend_from_slice(&header(GOAWAY, 0, 8));
                bytes.extend_from_slice(&[0u8; 8]);
                let _ = write.write_all(&bytes).await;
                break;
            }
        }
        if write.write_all(&bytes).await.is_err() {
            return;
        }
    }
    let _ = write.flush().await;
    let _ = write.shutdown().await;
}

/// Decompresses header blocks for one direction of the session.
struct Inflater(Decompress);

impl Inflater {
    fn block(&mut self, input: &[u8]) -> io::Result<Vec<(String, String)>> {
        let mut out = Vec::with_capacity(input.len() * 4 + 64);
        let mut consumed = 0usize;
        loop {
            let (before_in, before_out) = (self.0.total_in(), self.0.total_out());
            match self.0.decompress_vec(&input[consumed..], &mut out, FlushDecompress::Sync) {
                Ok(_) => {}
                Err(err) if err.needs_dictionary().is_some() => {
                    self.0.set_dictionary(dictionary()).map_err(io::Error::other)?;
                }
                Err(err) => return Err(io::Error::new(io::ErrorKind::InvalidData, err)),
            }
            consumed += usize::try_from(self.0.total_in() - before_in).unwrap_or(0);
            if consumed >= input.len() && out.len() < out.capacity() {
                break;
            }
            if out.len() > MAX_HEADER_BLOCK {
                return Err(io::Error::new(io::ErrorKind::InvalidData, "header block too large"));
            }
            if self.0.total_in() == before_in
                && self.0.total_out() == before_out
                && out.len() < out.capacity()
            {
                break;
            }
            out.reserve(1024);
        }
        parse_block(&out)
    }
}

fn parse_block(block: &[u8]) -> io::Result<Vec<(String, String)>> {
    fn take<'a>(rest: &mut &'a [u8], n: usize) -> io::Result<&'a [u8]> {
        if rest.len() < n {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "malformed SPDY header block"));
        }
        let (head, tail) = rest.split_at(n);
        *rest = tail;
        Ok(head)
    }
    fn length(rest: &mut &[u8]) -> io::Result<usize> {
        let bytes = take(rest, 4)?;
        Ok(usize::try_from(u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
            .unwrap_or(usize::MAX))
    }
    let mut rest = block;
    let count = length(&mut rest)?;
    let mut headers = Vec::new();
    for _ in 0..count {
        let len = length(&mut rest)?;
        let name = String::from_utf8_lossy(take(&mut rest, len)?).to_ascii_lowercase();
        let len = length(&mut rest)?;
        let value = String::from_utf8_lossy(take(&mut rest, len)?).into_owned();
        for value in value.split('\0') {
            headers.push((name.clone(), value.to_owned()));
        }
    }
    Ok(headers)
}

async fn read_frames<R: AsyncRead + Unpin>(
    read: R,
    streams: mpsc::UnboundedSender<SpdyStream>,
    frames: mpsc::Sender<Frame>,
    idle: Arc<Idle>,
) {
    tokio::select! {
        () = read_loop(read, streams, frames, &idle) => {}
        () = idle.expired.cancelled() => {}
    }
    idle.finish();
}

async fn read_loop<R: AsyncRead + Unpin>(
    mut read: R,
    streams: mpsc::UnboundedSender<SpdyStream>,
    frames: mpsc::Sender<Frame>,
    idle: &Idle,
) {
    let mut inflater = Inflater(Decompress::new(true));
    let mut open: HashMap<u32, mpsc::UnboundedSender<Vec<u8>>> = HashMap::new();
    loop {
        let mut head = [0u8; 8];
        if read.read_exact(&mut head).await.is_err() {
            break;
        }
        let flags = head[4];
        let length = usize::try_from(u32::from_be_bytes([0, head[5], head[6], head[7]])).unwrap_or(MAX_FRAME);
        if length > MAX_FRAME {
            break;
        }
        let mut payload = vec![0u8; length];
        if read.read_exact(&mut payload).await.is_err() {
            break;
        }
        idle.touch();
        let fin = flags & FLAG_FIN != 0;
        if head[0] & 0x80 == 0 {
            let id = u32::from_be_bytes([head[0], head[1], head[2], head[3]]);
            if let Some(tx) = open.get(&id) {
                if !payload.is_empty() {
                    let _ = tx.send(payload);
                }
                if fin {
                    open.remove(&id);
                }
            }
            continue;
        }
        let kind = u16::from_be_bytes([head[2], head[3]]);
        let word = |at: usize| {
            payload.get(at..at + 4).map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]) & 0x7fff_ffff)
        };
        match kind {
            SYN_STREAM => {
                let Some(id) = word(0) else { break };
                let Some(block) = payload.get(10..) else { break };
                let Ok(headers) = inflater.block(block) else { break };
                let (tx, reader) = ChannelReader::new();
                if !fin {
                    open.insert(id, tx);
                }
                let out = Outgoing { id, frames: frames.clone() };
                if streams.send(SpdyStream { id, headers, reader, out }).is_err() {
                    break;
                }
            }
            HEADERS | SYN_REPLY => {
                // Keeps the shared zlib stream in step; their headers mean nothing here.
                let Some(block) = payload.get(4..) else { break };
                if inflater.block(block).is_err() {
                    break;
                }
                if fin && let Some(id) = word(0) {
                    open.remove(&id);
                }
            }
            RST_STREAM => {
                if let Some(id) = word(0) {
                    open.remove(&id);
                }
            }
            PING => {
                if let Some(id) = word(0)
                    && frames.send(Frame::Ping(id)).await.is_err()
                {
                    break;
                }
            }
            GOAWAY => break,
            // SETTINGS, WINDOW_UPDATE, NOOP, CREDENTIAL: nothing to do without flow control.
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dictionary_is_spdy3s() {
        let dictionary = dictionary();
        assert_eq!(dictionary.len(), 1423);
        assert_eq!(&dictionary[..11], b"\0\0\0\x07options");
        assert!(dictionary.ends_with(b"utf-,*,enq=0."));
    }

    #[test]
    fn header_blocks_round_trip_through_the_shared_zlib_streams() {
        let mut deflater = Deflater::new().unwrap();
        let mut inflater = Inflater(Decompress::new(true));
        for port in ["8080", "9090"] {
            let block =
                deflater.block(&[("streamtype", "data"), ("port", port), ("requestid", "0")]).unwrap();
            let headers = inflater.block(&block).unwrap();
            assert_eq!(headers[1], ("port".to_owned(), port.to_owned()));
            assert_eq!(headers.len(), 3);
        }
        assert!(inflater.block(b"\x00\x01garbage").is_err() || inflater.block(b"garbage").is_err());
    }

    fn syn_stream(deflater: &mut Deflater, id: u32, headers: &[(&str, &str)], fin: bool) -> Vec<u8> {
        let block = deflater.block(headers).unwrap();
        let mut frame = header(SYN_STREAM, if fin { FLAG_FIN } else { 0 }, 10 + block.len()).to_vec();
        frame.extend_from_slice(&id.to_be_bytes());
        frame.extend_from_slice(&[0, 0, 0, 0, 0, 0]);
        frame.extend_from_slice(&block);
        frame
    }

    fn data(id: u32, payload: &[u8], fin: bool) -> Vec<u8> {
        let mut frame = id.to_be_bytes().to_vec();
        frame.extend_from_slice(&u32::try_from(payload.len()).unwrap().to_be_bytes());
        frame[4] = if fin { FLAG_FIN } else { 0 };
        frame.extend_from_slice(payload);
        frame
    }

    async fn read_frame(client: &mut (impl AsyncRead + Unpin)) -> ([u8; 8], Vec<u8>) {
        let mut head = [0u8; 8];
        client.read_exact(&mut head).await.unwrap();
        let mut payload = vec![0u8; u32::from_be_bytes([0, head[5], head[6], head[7]]) as usize];
        client.read_exact(&mut payload).await.unwrap();
        (head, payload)
    }

    #[tokio::test]
    async fn a_session_replies_echoes_pings_and_ends_streams() {
        let (mut client, server) = tokio::io::duplex(1 << 16);
        let mut session = Session::start(server, Duration::from_secs(3600));
        let mut deflater = Deflater::new().unwrap();
        let mut bytes = syn_stream(&mut deflater, 1, &[("streamType", "stdin")], false);
        bytes.extend(data(1, b"hello", false));
        bytes.extend(data(1, b" world", true));
        bytes.extend(syn_stream(&mut deflater, 3, &[("streamType", "error")], false));
        bytes.extend(&header(PING, 0, 4));
        bytes.extend(7u32.to_be_bytes());
        client.write_all(&bytes).await.unwrap();

        let mut stdin = session.streams.recv().await.unwrap();
        assert_eq!((stdin.id, stdin.header("STREAMTYPE")), (1, Some("stdin")));
        let mut read = String::new();
        stdin.reader.read_to_string(&mut read).await.unwrap();
        assert_eq!(read, "hello world");
        let error = session.streams.recv().await.unwrap();
        // The PING comes back first: nothing else was queued before it.
        let (head, payload) = read_frame(&mut client).await;
        assert_eq!((u16::from_be_bytes([head[2], head[3]]), payload), (PING, 7u32.to_be_bytes().to_vec()));
        error.out.reply().await;
        error.out.write(b"status").await;
        error.out.close().await;
        let (head, payload) = read_frame(&mut client).await;
        assert_eq!(u16::from_be_bytes([head[2], head[3]]), SYN_REPLY);
        assert_eq!(&payload[..4], &3u32.to_be_bytes());
        let (head, payload) = read_frame(&mut client).await;
        assert_eq!((&head[..4], head[4], payload.as_slice()), (&3u32.to_be_bytes()[..], 0, &b"status"[..]));
        let (head, payload) = read_frame(&mut client).await;
        assert_eq!((head[4], payload.len()), (FLAG_FIN, 0));
        session.close().await;
        let (head, _) = read_frame(&mut client).await;
        assert_eq!(u16::from_be_bytes([head[2], head[3]]), GOAWAY);
        let mut rest = Vec::new();
        client.read_to_end(&mut rest).await.unwrap();
        assert!(rest.is_empty());
    }

    #[tokio::test]
    async fn garbage_ends_the_session_without_panicking() {
        for garbage in [
            &b"\x80\x03\x00\x01\x00\x00\x00\x0anot zlib!!"[..],
            b"\x80\x03\x00\x01\x00\x00\x00\x02ab",
            b"GET / HTTP/1.1\r\n\r\n",
        ] {
            let (mut client, server) = tokio::io::duplex(1 << 16);
            let mut session = Session::start(server, Duration::from_secs(3600));
            client.write_all(garbage).await.unwrap();
            drop(client);
            assert!(session.streams.recv().await.is_none());
        }
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_session_is_closed_and_a_pinged_one_is_not() {
        let (mut client, server) = tokio::io::duplex(1 << 16);
        let mut session = Session::start(server, Duration::from_secs(60));
        for id in 0..5u32 {
            tokio::time::sleep(Duration::from_secs(50)).await;
            let mut ping = header(PING, 0, 4).to_vec();
            ping.extend(id.to_be_bytes());
            client.write_all(&ping).await.unwrap();
            let (_, payload) = read_frame(&mut client).await;
            assert_eq!(payload, id.to_be_bytes());
        }
        assert!(session.streams.recv().await.is_none());
        let mut rest = Vec::new();
        client.read_to_end(&mut rest).await.unwrap();
        assert!(rest.is_empty());
    }
}
