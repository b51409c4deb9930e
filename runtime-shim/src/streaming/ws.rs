//! Channels over a websocket, as apimachinery's `wsstream.Conn` serves them: every message carries one
//! channel's bytes, prefixed by the channel number — a byte in binary protocols (`channel.k8s.io`,
//! `v4.channel.k8s.io`, `v5.channel.k8s.io`), an ASCII digit followed by base64 text in the base64
//! ones (`base64.channel.k8s.io`, `v4.base64.channel.k8s.io`). In v5 a message on channel 255 whose
//! payload is a channel number half-closes that channel (the client's end of stdin).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use futures::{SinkExt, StreamExt};
use hyper::upgrade::Upgraded;
use hyper_util::rt::TokioIo;
use tokio::sync::mpsc;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::Role;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

use super::idle::Idle;
use super::spdy::ChannelReader;

/// The v5 channel whose messages half-close another channel.
const CLOSE_CHANNEL: u8 = 255;

/// How a negotiated subprotocol frames its channels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Framing {
    /// Base64 text messages instead of binary ones.
    pub base64: bool,
    /// v5: channel 255 closes channels.
    pub close_channel: bool,
}

/// The framing of a subprotocol name (binary for "" and the plain and v4/v5 binary names).
pub fn framing(protocol: &str) -> Framing {
    Framing { base64: protocol.contains("base64."), close_channel: protocol.starts_with("v5.") }
}

/// Picks the first of the client's protocols (in its order) that the server supports, as wsstream's
/// handshake; a client that names none gets "" when "" is supported.
pub fn negotiate<'a>(offered: &[&str], supported: &[&'a str]) -> Option<&'a str> {
    if offered.is_empty() {
        return supported.iter().copied().find(|protocol| protocol.is_empty());
    }
    offered.iter().find_map(|wanted| supported.iter().copied().find(|protocol| protocol == wanted))
}

/// Writes one channel's bytes to the client (cheap to clone).
#[derive(Debug, Clone)]
pub struct ChannelWriter {
    channel: u8,
    framing: Framing,
    messages: mpsc::Sender<Message>,
}

impl ChannelWriter {
    /// Sends `data` as one message; false once the connection is gone.
    pub async fn write(&self, data: &[u8]) -> bool {
        let message = if self.framing.base64 {
            // '0' + channel, as wsstream writes it (past 9 the "digit" is just the next character).
            let mut text = String::from(char::from(b'0'.wrapping_add(self.channel)));
            base64::engine::general_purpose::STANDARD.encode_string(data, &mut text);
            Message::text(text)
        } else {
            let mut bytes = Vec::with_capacity(data.len() + 1);
            bytes.push(self.channel);
            bytes.extend_from_slice(data);
            Message::binary(bytes)
        };
        self.messages.send(message).await.is_ok()
    }
}

/// An upgraded websocket connection split into channels.
#[derive(Debug)]
pub struct Channels {
    /// The readers of the readable channels, by channel number.
    pub readers: HashMap<u8, ChannelReader>,
    /// The writers of the writable channels, by channel number.
    pub writers: HashMap<u8, ChannelWriter>,
    messages: mpsc::Sender<Message>,
    writer: tokio::task::JoinHandle<()>,
}

impl Channels {
    /// Serves `readable` and `writable` channels on the upgraded connection with `framing`; the
    /// connection closes after `idle_timeout` without a message either way.
    pub async fn start(
        upgraded: Upgraded,
        framing: Framing,
        readable: &[u8],
        writable: &[u8],
        idle_timeout: Duration,
    ) -> Channels {
        let ws = WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, None).await;
        Self::start_on(ws, framing, readable, writable, idle_timeout)
    }

    fn start_on<S>(
        ws: WebSocketStream<S>,
        framing: Framing,
        readable: &[u8],
        writable: &[u8],
        idle_timeout: Duration,
    ) -> Channels
    where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let (sink, stream) = ws.split();
        let (messages, rx) = mpsc::channel(64);
        let mut senders = HashMap::new();
        let mut readers = HashMap::new();
        for &channel in readable {
            let (tx, reader) = ChannelReader::new();
            senders.insert(channel, tx);
            readers.insert(channel, reader);
        }
        let writers = writable
            .iter()
            .map(|&channel| (channel, ChannelWriter { channel, framing, messages: messages.clone() }))
            .collect();
        let idle = Idle::start(idle_timeout);
        let writer = tokio::spawn(write_messages(sink, rx, idle.clone()));
        tokio::spawn(async move {
            tokio::select! {
                () = read_messages(stream, framing, senders, &idle) => {}
                () = idle.expired.cancelled() => {}
            }
            idle.finish();
        });
        Channels { readers, writers, messages, writer }
    }

    /// Closes the connection (a close frame) once every writer's messages are sent.
    pub async fn close(self) {
        drop(self.writers);
        drop(self.messages);
        let _ = self.writer.await;
    }
}

async fn write_messages<S>(mut sink: S, mut messages: mpsc::Receiver<Message>, idle: Arc<Idle>)
where
    S: futures::Sink<Message> + Unpin,
{
    loop {
        let message = tokio::select! {
            message = messages.recv() => match message { Some(message) => message, None => break },
            () = idle.expired.cancelled() => {
                let _ = sink.close().await;
                return;
            }
        };
        idle.touch();
        if sink.send(message).await.is_err() {
            return;
        }
    }
    // A normal closure (1000): client-go's websocket reader takes only that as the streams' EOF.
    let close = CloseFrame { code: CloseCode::Normal, reason: "".into() };
    let _ = sink.send(Message::Close(Some(close))).await;
    let _ = sink.close().await;
}

async fn read_messages<S>(
    mut stream: S,
    framing: Framing,
    mut senders: HashMap<u8, mpsc::UnboundedSender<Vec<u8>>>,
    idle: &Idle,
) where
    S: futures::Stream<Item = Result<Message, tokio_tungstenite::tungstenite::Error>> + Unpin,
{
    while let Some(Ok(message)) = stream.next().await {
        idle.touch();
        let (channel, data) = match message {
            // x/net/websocket's Message.Receive takes text frames as bytes too.
            Message::Binary(bytes) if !framing.base64 => match bytes.split_first() {
                Some((&channel, data)) => (channel, data.to_vec()),
                None => continue,
            },
            Message::Text(text) if !framing.base64 => match text.as_bytes().split_first() {
                Some((&channel, data)) => (channel, data.to_vec()),
                None => continue,
            },
            Message::Text(text) if framing.base64 => {
                let text = text.as_str();
                let Some((&first, rest)) = text.as_bytes().split_first() else { continue };
                let Ok(data) = base64::engine::general_purpose::STANDARD.decode(rest) else { continue };
                (first.wrapping_sub(b'0'), data)
            }
            Message::Close(_) => break,
            _ => continue,
        };
        if channel == CLOSE_CHANNEL && framing.close_channel {
            if let Some(closed) = data.first() {
                senders.remove(closed);
            }
            continue;
        }
        if let Some(tx) = senders.get(&channel)
            && !data.is_empty()
        {
            let _ = tx.send(data);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negotiation_follows_the_clients_order() {
        let supported = ["", "channel.k8s.io", "v4.channel.k8s.io", "v5.channel.k8s.io"];
        assert_eq!(
            negotiate(&["v5.channel.k8s.io", "v4.channel.k8s.io"], &supported),
            Some("v5.channel.k8s.io")
        );
        assert_eq!(negotiate(&["x", "v4.channel.k8s.io"], &supported), Some("v4.channel.k8s.io"));
        assert_eq!(negotiate(&[], &supported), Some(""));
        assert_eq!(negotiate(&["x"], &supported), None);
        assert_eq!(negotiate(&[], &["v4.channel.k8s.io"]), None);
    }

    #[test]
    fn framing_of_each_protocol() {
        assert_eq!(framing("v5.channel.k8s.io"), Framing { base64: false, close_channel: true });
        assert_eq!(framing("v4.base64.channel.k8s.io"), Framing { base64: true, close_channel: false });
        assert_eq!(framing(""), Framing { base64: false, close_channel: false });
    }

    async fn pair(protocol: &str) -> (Channels, WebSocketStream<tokio::io::DuplexStream>) {
        let (client, server) = tokio::io::duplex(1 << 16);
        let server = WebSocketStream::from_raw_socket(server, Role::Server, None).await;
        let client = WebSocketStream::from_raw_socket(client, Role::Client, None).await;
        (Channels::start_on(server, framing(protocol), &[0, 4], &[1, 3], Duration::from_secs(3600)), client)
    }

    #[tokio::test]
    async fn base64_channels_are_digits_and_base64_text() {
        use tokio::io::AsyncReadExt;
        let (mut channels, mut client) = pair("v4.base64.channel.k8s.io").await;
        client.send(Message::text("0aGVsbG8=")).await.unwrap();
        let mut stdin = channels.readers.remove(&0).unwrap();
        let mut buf = [0u8; 5];
        stdin.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"hello");
        assert!(channels.writers[&1].write(b"hi").await);
        assert_eq!(client.next().await.unwrap().unwrap(), Message::text("1aGk="));
        channels.close().await;
        assert!(matches!(client.next().await.unwrap().unwrap(), Message::Close(Some(_))));
    }

    #[tokio::test]
    async fn v5_close_channel_ends_stdin_only() {
        use tokio::io::AsyncReadExt;
        let (mut channels, mut client) = pair("v5.channel.k8s.io").await;
        client.send(Message::binary(b"\x00abc".to_vec())).await.unwrap();
        client.send(Message::binary(vec![CLOSE_CHANNEL, 0])).await.unwrap();
        client.send(Message::binary(b"\x04{}".to_vec())).await.unwrap();
        let mut stdin = channels.readers.remove(&0).unwrap();
        let mut read = Vec::new();
        stdin.read_to_end(&mut read).await.unwrap();
        assert_eq!(read, b"abc");
        let mut resize = channels.readers.remove(&4).unwrap();
        let mut buf = [0u8; 2];
        resize.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"{}");
        assert!(channels.writers[&3].write(b"x").await);
        assert_eq!(client.next().await.unwrap().unwrap(), Message::binary(b"\x03x".to_vec()));
    }
}
