//! Accepts the `:authority` every CRI client sends, as containerd (grpc-go) does.
//!
//! grpc's C core (grpcio, the Python and Ruby clients, and the C++ one) sends the percent-encoded socket
//! path as `:authority` on a `unix:` target (`%2Frun%2Fkeel%2Fshim.sock`); grpc-go sends `localhost`.
//! h2, under tonic, parses `:authority` as a URI authority and resets every such stream with
//! PROTOCOL_ERROR, and has no setting to relax it (hyperium/h2#487 is unmerged). So the bytes a client
//! sends pass through [`Transcoder`] before h2 reads them: every frame is passed on unchanged except
//! header blocks, which are decoded (HPACK, with the client's dynamic table), an `:authority` that is no
//! valid URI authority is replaced by `localhost`, and the block is encoded again as literals without
//! indexing, so h2's own HPACK table stays empty and can never disagree with the client's.
//!
//! The same pass renames `grpc-timeout` to [`super::deadline::HEADER`], which keel-shim's own deadline
//! layer enforces (see there why tonic's cannot be used).
//!
//! The framing follows RFC 9113 §4.1 and §6.2 and HPACK's literal representation RFC 7541 §6.2.2; h2
//! checks everything else about the frames itself.

use std::borrow::Cow;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The client connection preface (RFC 9113 §3.4).
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const FRAME_HEADER: usize = 9;
const HEADERS: u8 = 0x1;
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;
/// The largest frame payload every HTTP/2 peer accepts (SETTINGS_MAX_FRAME_SIZE's initial value).
const MAX_FRAME: usize = 16_384;
/// h2's SETTINGS_HEADER_TABLE_SIZE, which bounds the client's dynamic table.
const HEADER_TABLE_SIZE: usize = 4096;
/// A header block larger than this is refused (h2 allows 16 KiB of decoded headers by default).
const MAX_BLOCK: usize = 1 << 20;
/// What replaces an `:authority` that is no URI authority: what grpc-go sends on a unix socket.
pub const REPLACEMENT: &str = "localhost";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("the client did not start with the HTTP/2 connection preface")]
    Preface,
    #[error("HTTP/2 frame {0:#x} is malformed: {1}")]
    Frame(u8, &'static str),
    #[error("a header block of more than {MAX_BLOCK} bytes")]
    BlockTooLarge,
    #[error("the client's header block does not decode (HPACK): {0:?}")]
    Hpack(loona_hpack::decoder::DecoderError),
}

impl From<Error> for io::Error {
    fn from(err: Error) -> io::Error {
        io::Error::new(io::ErrorKind::InvalidData, err)
    }
}

/// Where the transcoder is in the client's byte stream.
#[derive(Debug)]
enum State {
    /// Passing the preface on; this many of its bytes seen.
    Preface(usize),
    /// Reading a frame header.
    Header,
    /// Passing on the payload of a frame that is not a header block: this many bytes left.
    Pass(usize),
    /// Reading the payload of a HEADERS or CONTINUATION frame.
    Block { kind: u8, flags: u8, stream: u32, left: usize },
}

/// The pure part: client bytes in, the bytes h2 reads out. Frames may arrive split anywhere.
pub struct Transcoder {
    state: State,
    /// Bytes of the frame header or block payload being read.
    pending: Vec<u8>,
    /// The header block being gathered across HEADERS and CONTINUATION frames: its stream, the HEADERS
    /// frame's END_STREAM and priority fields, and the fragments so far.
    block: Option<Block>,
    decoder: loona_hpack::Decoder<'static>,
}

struct Block {
    stream: u32,
    end_stream: bool,
    priority: Option<[u8; 5]>,
    fragments: Vec<u8>,
}

impl std::fmt::Debug for Transcoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transcoder").field("state", &self.state).finish_non_exhaustive()
    }
}

impl Default for Transcoder {
    fn default() -> Self {
        let mut decoder = loona_hpack::Decoder::new();
        decoder.set_max_allowed_table_size(HEADER_TABLE_SIZE);
        Transcoder { state: State::Preface(0), pending: Vec::new(), block: None, decoder }
    }
}

impl Transcoder {
    /// Consumes `input` (any amount), appending what h2 should read to `out`.
    pub fn feed(&mut self, mut input: &[u8], out: &mut Vec<u8>) -> Result<(), Error> {
        while !input.is_empty() {
            match self.state {
                State::Preface(seen) => {
                    let n = (PREFACE.len() - seen).min(input.len());
                    if input[..n] != PREFACE[seen..seen + n] {
                        return Err(Error::Preface);
                    }
                    out.extend_from_slice(&input[..n]);
                    input = &input[n..];
                    self.state =
                        if seen + n == PREFACE.len() { State::Header } else { State::Preface(seen + n) };
                }
                State::Header => {
                    let n = (FRAME_HEADER - self.pending.len()).min(input.len());
                    self.pending.extend_from_slice(&input[..n]);
                    input = &input[n..];
                    if self.pending.len() == FRAME_HEADER {
                        let header = std::mem::take(&mut self.pending);
                        self.start_frame(&header, out)?;
                    }
                }
                State::Pass(left) => {
                    let n = left.min(input.len());
                    out.extend_from_slice(&input[..n]);
                    input = &input[n..];
                    self.state = if n == left { State::Header } else { State::Pass(left - n) };
                }
                State::Block { kind, flags, stream, left } => {
                    let n = left.min(input.len());
                    self.pending.extend_from_slice(&input[..n]);
                    input = &input[n..];
                    if n == left {
                        let payload = std::mem::take(&mut self.pending);
                        self.state = State::Header;
                        self.block_frame(kind, flags, stream, &payload, out)?;
                    } else {
                        self.state = State::Block { kind, flags, stream, left: left - n };
                    }
                }
            }
        }
        Ok(())
    }

    fn start_frame(&mut self, header: &[u8], out: &mut Vec<u8>) -> Result<(), Error> {
        let length = usize::from(header[0]) << 16 | usize::from(header[1]) << 8 | usize::from(header[2]);
        let (kind, flags) = (header[3], header[4]);
        let stream = u32::from_be_bytes([header[5], header[6], header[7], header[8]]) & 0x7fff_ffff;
        if kind == HEADERS || kind == CONTINUATION || self.block.is_some() {
            // While a block is open only its CONTINUATION frames may come (RFC 9113 §6.10).
            if self.block.is_some() != (kind == CONTINUATION) {
                return Err(Error::Frame(kind, "a header block interrupted, or a CONTINUATION without one"));
            }
            if length > MAX_BLOCK {
                return Err(Error::BlockTooLarge);
            }
            self.state = State::Block { kind, flags, stream, left: length };
            if length == 0 {
                self.state = State::Header;
                self.block_frame(kind, flags, stream, &[], out)?;
            }
        } else {
            out.extend_from_slice(header);
            self.state = if length == 0 { State::Header } else { State::Pass(length) };
        }
        Ok(())
    }

    fn block_frame(
        &mut self,
        kind: u8,
        flags: u8,
        stream: u32,
        payload: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<(), Error> {
        if kind == HEADERS {
            let mut fragment = payload;
            let mut pad = 0;
            if flags & PADDED != 0 {
                let (&length, rest) = fragment.split_first().ok_or(Error::Frame(kind, "no pad length"))?;
                pad = usize::from(length);
                fragment = rest;
            }
            let priority = if flags & PRIORITY != 0 {
                let (fields, rest) =
                    fragment.split_first_chunk::<5>().ok_or(Error::Frame(kind, "no priority fields"))?;
                fragment = rest;
                Some(*fields)
            } else {
                None
            };
            let fragment = fragment
                .get(
                    ..fragment
                        .len()
                        .checked_sub(pad)
                        .ok_or(Error::Frame(kind, "more padding than payload"))?,
                )
                .unwrap_or_default();
            self.block = Some(Block {
                stream,
                end_stream: flags & END_STREAM != 0,
                priority,
                fragments: fragment.to_vec(),
            });
        } else {
            let block = self.block.as_mut().ok_or(Error::Frame(kind, "a CONTINUATION without HEADERS"))?;
            if block.stream != stream {
                return Err(Error::Frame(kind, "a CONTINUATION on another stream"));
            }
            block.fragments.extend_from_slice(payload);
            if block.fragments.len() > MAX_BLOCK {
                return Err(Error::BlockTooLarge);
            }
        }
        if flags & END_HEADERS != 0
            && let Some(block) = self.block.take()
        {
            self.emit(&block, out)?;
        }
        Ok(())
    }

    /// Decodes a whole header block and writes it again as HEADERS (and CONTINUATION) frames.
    fn emit(&mut self, block: &Block, out: &mut Vec<u8>) -> Result<(), Error> {
        let mut encoded = Vec::with_capacity(block.fragments.len() * 2);
        let decoded = self.decoder.decode_with_cb(&block.fragments, |name, value| {
            let name = if *name == *b"grpc-timeout" {
                Cow::Borrowed(super::deadline::HEADER.as_bytes())
            } else {
                name
            };
            let value = if *name == *b":authority" && !valid_authority(&value) {
                Cow::Borrowed(REPLACEMENT.as_bytes())
            } else {
                value
            };
            literal_without_indexing(&name, &value, &mut encoded);
        });
        decoded.map_err(Error::Hpack)?;

        let mut payload = Vec::with_capacity(encoded.len() + 5);
        if let Some(priority) = block.priority {
            payload.extend_from_slice(&priority);
        }
        payload.extend_from_slice(&encoded);
        let mut chunks = payload.chunks(MAX_FRAME).peekable();
        let mut kind = HEADERS;
        let mut flags =
            if block.end_stream { END_STREAM } else { 0 } | block.priority.map_or(0, |_| PRIORITY);
        if chunks.peek().is_none() {
            frame(HEADERS, flags | END_HEADERS, block.stream, &[], out);
        }
        while let Some(chunk) = chunks.next() {
            let last = chunks.peek().is_none();
            frame(kind, if last { flags | END_HEADERS } else { flags }, block.stream, chunk, out);
            kind = CONTINUATION;
            flags = 0;
        }
        Ok(())
    }
}

/// Whether h2 accepts `value` as `:authority` (it parses it as [`http::uri::Authority`]).
fn valid_authority(value: &[u8]) -> bool {
    http::uri::Authority::try_from(value).is_ok()
}

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8], out: &mut Vec<u8>) {
    let length = payload.len().to_be_bytes();
    out.extend_from_slice(&length[length.len() - 3..]);
    out.extend_from_slice(&[kind, flags]);
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
}

/// A literal header field without indexing, with a new name, no Huffman coding (RFC 7541 §6.2.2).
fn literal_without_indexing(name: &[u8], value: &[u8], out: &mut Vec<u8>) {
    out.push(0x00);
    for string in [name, value] {
        integer(string.len(), 7, out);
        out.extend_from_slice(string);
    }
}

/// An HPACK integer with an N-bit prefix, the bits above the prefix zero (RFC 7541 §5.1).
fn integer(mut value: usize, prefix: u32, out: &mut Vec<u8>) {
    let max = (1usize << prefix) - 1;
    if value < max {
        out.push(value as u8);
        return;
    }
    out.push(max as u8);
    value -= max;
    while value >= 0x80 {
        out.push((value & 0x7f) as u8 | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// A connection whose client bytes pass through a [`Transcoder`]; writes go straight through.
#[derive(Debug)]
pub struct AuthorityFix<S> {
    inner: S,
    transcoder: Transcoder,
    /// Transcoded bytes not yet read by h2.
    ready: Vec<u8>,
    /// How much of `ready` h2 has read.
    offset: usize,
    scratch: Box<[u8]>,
}

impl<S> AuthorityFix<S> {
    pub fn new(inner: S) -> Self {
        AuthorityFix {
            inner,
            transcoder: Transcoder::default(),
            ready: Vec::new(),
            offset: 0,
            scratch: vec![0; 16 * 1024].into_boxed_slice(),
        }
    }

    pub fn get_ref(&self) -> &S {
        &self.inner
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for AuthorityFix<S> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        // A read that consumes only part of a frame header yields nothing yet: read again.
        while this.offset == this.ready.len() {
            this.ready.clear();
            this.offset = 0;
            let mut read = ReadBuf::new(&mut this.scratch);
            ready!(Pin::new(&mut this.inner).poll_read(cx, &mut read))?;
            if read.filled().is_empty() {
                return Poll::Ready(Ok(()));
            }
            this.transcoder.feed(read.filled(), &mut this.ready)?;
        }
        let n = buf.remaining().min(this.ready.len() - this.offset);
        buf.put_slice(&this.ready[this.offset..this.offset + n]);
        this.offset += n;
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for AuthorityFix<S> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

impl<S: tonic::transport::server::Connected> tonic::transport::server::Connected for AuthorityFix<S> {
    type ConnectInfo = S::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encode(headers: &[(&[u8], &[u8])], encoder: &mut loona_hpack::Encoder<'_>) -> Vec<u8> {
        encoder.encode(headers.iter().copied())
    }

    fn decode_frames(mut bytes: &[u8]) -> Vec<(u8, u8, u32, Vec<u8>)> {
        let mut frames = Vec::new();
        while !bytes.is_empty() {
            let length = usize::from(bytes[0]) << 16 | usize::from(bytes[1]) << 8 | usize::from(bytes[2]);
            let stream = u32::from_be_bytes(bytes[5..9].try_into().unwrap());
            frames.push((bytes[3], bytes[4], stream, bytes[9..9 + length].to_vec()));
            bytes = &bytes[9 + length..];
        }
        frames
    }

    fn headers_frame(stream: u32, flags: u8, block: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        frame(HEADERS, flags, stream, block, &mut out);
        out
    }

    /// What h2 would decode from the transcoded header frames (one fresh decoder for the connection).
    fn h2_view(out: &[u8]) -> Vec<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut decoder = loona_hpack::Decoder::new();
        let mut blocks = Vec::new();
        let mut block = Vec::new();
        for (kind, flags, _, payload) in decode_frames(out) {
            if kind == HEADERS || kind == CONTINUATION {
                let skip = if kind == HEADERS && flags & PRIORITY != 0 { 5 } else { 0 };
                block.extend_from_slice(&payload[skip..]);
                if flags & END_HEADERS != 0 {
                    blocks.push(decoder.decode(&std::mem::take(&mut block)).unwrap());
                }
            }
        }
        blocks
    }

    fn grpc_headers(authority: &[u8]) -> Vec<(&[u8], &[u8])> {
        vec![
            (b":scheme", b"http"),
            (b":method", b"POST"),
            (b":authority", authority),
            (b":path", b"/runtime.v1.RuntimeService/Version"),
            (b"te", b"trailers"),
            (b"content-type", b"application/grpc"),
        ]
    }

    #[test]
    fn a_socket_path_authority_becomes_localhost_and_the_rest_is_kept() {
        let mut client = loona_hpack::Encoder::new();
        let mut input = PREFACE.to_vec();
        // A SETTINGS frame and a DATA frame pass through untouched.
        frame(0x4, 0, 0, &[0, 3, 0, 0, 0, 100], &mut input);
        let path = b"%2Frun%2Fkeel%2Fshim.sock".as_slice();
        for stream in [1, 3, 5] {
            input.extend(headers_frame(stream, END_HEADERS, &encode(&grpc_headers(path), &mut client)));
            frame(0x0, END_STREAM, stream, b"\0\0\0\0\x04\x0a\x02v1", &mut input);
        }
        // The same bytes fed one at a time give the same output as fed at once.
        let mut whole = Vec::new();
        Transcoder::default().feed(&input, &mut whole).unwrap();
        let mut bytewise = Vec::new();
        let mut transcoder = Transcoder::default();
        for byte in &input {
            transcoder.feed(std::slice::from_ref(byte), &mut bytewise).unwrap();
        }
        assert_eq!(whole, bytewise);
        assert!(whole.starts_with(PREFACE));

        let blocks = h2_view(&whole[PREFACE.len()..]);
        assert_eq!(blocks.len(), 3, "three requests, each with its headers");
        for block in blocks {
            let expected: Vec<(Vec<u8>, Vec<u8>)> =
                grpc_headers(b"localhost").into_iter().map(|(n, v)| (n.to_vec(), v.to_vec())).collect();
            assert_eq!(block, expected);
        }
        let frames = decode_frames(&whole[PREFACE.len()..]);
        assert_eq!(frames[0], (0x4, 0, 0, vec![0, 3, 0, 0, 0, 100]));
        assert_eq!(frames[2], (0x0, END_STREAM, 1, b"\0\0\0\0\x04\x0a\x02v1".to_vec()));
    }

    #[test]
    fn a_valid_authority_is_kept() {
        let mut client = loona_hpack::Encoder::new();
        let mut input = PREFACE.to_vec();
        input.extend(headers_frame(
            1,
            END_HEADERS | END_STREAM,
            &encode(&grpc_headers(b"localhost:10250"), &mut client),
        ));
        let mut out = Vec::new();
        Transcoder::default().feed(&input, &mut out).unwrap();
        let frames = decode_frames(&out[PREFACE.len()..]);
        assert_eq!(frames[0].1, END_HEADERS | END_STREAM);
        assert!(
            h2_view(&out[PREFACE.len()..])[0]
                .contains(&(b":authority".to_vec(), b"localhost:10250".to_vec()))
        );
    }

    #[test]
    fn padding_priority_and_continuations_are_read_and_large_blocks_split() {
        let mut client = loona_hpack::Encoder::new();
        let big = vec![b'x'; 40_000];
        let mut headers = grpc_headers(b"/run/keel/shim.sock");
        headers.push((b"x-big", &big));
        let block = encode(&headers, &mut client);
        // HEADERS with padding and priority carrying the first 100 bytes, then two CONTINUATIONs.
        let mut payload = vec![3];
        payload.extend_from_slice(&[0x80, 0, 0, 0, 15]);
        payload.extend_from_slice(&block[..100]);
        payload.extend_from_slice(&[0, 0, 0]);
        let mut input = PREFACE.to_vec();
        frame(HEADERS, PADDED | PRIORITY, 7, &payload, &mut input);
        frame(CONTINUATION, 0, 7, &block[100..200], &mut input);
        frame(CONTINUATION, END_HEADERS, 7, &block[200..], &mut input);
        let mut out = Vec::new();
        Transcoder::default().feed(&input, &mut out).unwrap();
        let frames = decode_frames(&out[PREFACE.len()..]);
        assert!(frames.len() >= 3, "40 kB of headers need three frames of 16 KiB");
        assert_eq!(frames[0].0, HEADERS);
        assert_eq!(frames[0].1, PRIORITY);
        assert_eq!(&frames[0].3[..5], &[0x80, 0, 0, 0, 15]);
        assert!(frames.iter().all(|f| f.3.len() <= MAX_FRAME && f.2 == 7));
        assert!(frames[1..].iter().all(|f| f.0 == CONTINUATION));
        assert_eq!(frames.last().unwrap().1, END_HEADERS);
        let view = &h2_view(&out[PREFACE.len()..])[0];
        assert!(view.contains(&(b":authority".to_vec(), b"localhost".to_vec())));
        assert!(view.contains(&(b"x-big".to_vec(), big.clone())));
    }

    #[test]
    fn grpc_timeout_is_handed_to_keel_shims_deadline_layer() {
        let mut client = loona_hpack::Encoder::new();
        let mut input = PREFACE.to_vec();
        let mut headers = grpc_headers(b"localhost");
        headers.push((b"grpc-timeout", b"999u"));
        input.extend(headers_frame(1, END_HEADERS, &encode(&headers, &mut client)));
        let mut out = Vec::new();
        Transcoder::default().feed(&input, &mut out).unwrap();
        let view = &h2_view(&out[PREFACE.len()..])[0];
        assert!(view.iter().all(|(name, _)| name.as_slice() != b"grpc-timeout"), "{view:?}");
        assert!(view.contains(&(super::super::deadline::HEADER.as_bytes().to_vec(), b"999u".to_vec())));
        assert!(view.contains(&(b":path".to_vec(), b"/runtime.v1.RuntimeService/Version".to_vec())));
    }

    #[test]
    fn bad_input_is_an_error_not_a_panic() {
        let mut out = Vec::new();
        assert!(matches!(Transcoder::default().feed(b"GET / HTTP/1.1\r\n", &mut out), Err(Error::Preface)));
        // A CONTINUATION with no HEADERS before it.
        let mut input = PREFACE.to_vec();
        frame(CONTINUATION, END_HEADERS, 1, b"\x82", &mut input);
        assert!(Transcoder::default().feed(&input, &mut out).is_err());
        // Padding longer than the frame.
        let mut input = PREFACE.to_vec();
        frame(HEADERS, PADDED | END_HEADERS, 1, &[200, 0x82], &mut input);
        assert!(Transcoder::default().feed(&input, &mut out).is_err());
        // An index the tables do not have.
        let mut input = PREFACE.to_vec();
        frame(HEADERS, END_HEADERS, 1, &[0xff, 0x7f], &mut input);
        assert!(matches!(Transcoder::default().feed(&input, &mut out), Err(Error::Hpack(_))));
        // A DATA frame in the middle of a header block.
        let mut input = PREFACE.to_vec();
        frame(HEADERS, 0, 1, b"\x82", &mut input);
        frame(0x0, 0, 1, b"x", &mut input);
        assert!(Transcoder::default().feed(&input, &mut out).is_err());
    }

    #[test]
    fn integers_use_the_continuation_bytes() {
        let mut out = Vec::new();
        integer(1337, 5, &mut out);
        assert_eq!(out, [31, 154, 10], "RFC 7541 C.1.2");
        out.clear();
        integer(10, 7, &mut out);
        assert_eq!(out, [10]);
    }
}
