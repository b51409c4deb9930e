//! A synchronous route-netlink socket: requests with acknowledgements, dumps and batches, over
//! netlink-sys and netlink-packet-route's messages.
//!
//! Synchronous on purpose: keel-cni runs once per ADD or DEL, and a blocking socket costs nothing to
//! set up, where an async runtime (rtnetlink) would be started for a handful of round trips. A netlink
//! socket acts in the network namespace it was created in, so [`Socket::open_in`] enters the pod's
//! namespace on this thread just long enough to create its socket and comes back.

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd};

use netlink_packet_core::{
    NLM_F_ACK, NLM_F_DUMP, NLM_F_REQUEST, NetlinkHeader, NetlinkMessage, NetlinkPayload,
};
use netlink_packet_route::RouteNetlinkMessage;
use netlink_sys::protocols::NETLINK_ROUTE;
use nix::sched::CloneFlags;

/// A request the kernel refused, or a socket that failed.
#[derive(Debug, thiserror::Error)]
#[error("{op}: {source}")]
pub struct NetlinkError {
    /// What was asked, e.g. "create veth pair veth1a2b3c4d / eth0".
    pub op: String,
    #[source]
    pub source: io::Error,
}

impl NetlinkError {
    pub fn new(op: impl Into<String>, source: io::Error) -> NetlinkError {
        NetlinkError { op: op.into(), source }
    }

    /// The kernel's errno, when the kernel answered.
    pub fn errno(&self) -> Option<i32> {
        self.source.raw_os_error()
    }

    /// Whether the object asked about does not exist (ENODEV for links, ESRCH/EADDRNOTAVAIL for
    /// routes and addresses).
    pub fn is_not_found(&self) -> bool {
        matches!(self.errno(), Some(libc::ENODEV | libc::ESRCH | libc::EADDRNOTAVAIL | libc::ENOENT))
    }

    /// Whether the object to create already exists.
    pub fn is_exists(&self) -> bool {
        self.errno() == Some(libc::EEXIST)
    }
}

/// One route-netlink socket in one network namespace.
#[derive(Debug)]
pub struct Socket {
    socket: netlink_sys::Socket,
    sequence: u32,
    buffer: Vec<u8>,
}

/// Flags of a request that creates something and must not replace what exists.
pub const CREATE: u16 = netlink_packet_core::NLM_F_CREATE | netlink_packet_core::NLM_F_EXCL;

impl Socket {
    /// A socket in the calling thread's network namespace.
    pub fn open() -> io::Result<Socket> {
        let mut socket = netlink_sys::Socket::new(NETLINK_ROUTE)?;
        socket.bind_auto()?;
        // Dumps filtered by the kernel (addresses of one link, routes of one table).
        socket.set_netlink_get_strict_chk(true)?;
        socket.set_ext_ack(true)?;
        // A kernel that never answers is an error, not a hung ADD.
        let timeout = libc::timeval { tv_sec: 10, tv_usec: 0 };
        // SAFETY: the option value is a timeval that lives across the call, with its size.
        let set = unsafe {
            libc::setsockopt(
                socket.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                std::ptr::from_ref(&timeout).cast(),
                std::mem::size_of::<libc::timeval>() as libc::socklen_t,
            )
        };
        if set != 0 {
            return Err(io::Error::last_os_error());
        }
        // Dump datagrams are at most 32 KiB (the kernel sizes them from our receive buffer, capped there).
        // Capacity only: the kernel writes into it, so no page of it is zeroed or touched in advance.
        Ok(Socket { socket, sequence: 0, buffer: Vec::with_capacity(64 * 1024) })
    }

    /// A socket in the network namespace `netns` (an open nsfs file): this thread enters it, creates
    /// the socket and returns to its own namespace. The socket keeps acting in `netns`.
    pub fn open_in(netns: &File) -> io::Result<Socket> {
        let own = File::open("/proc/thread-self/ns/net")?;
        nix::sched::setns(netns.as_fd(), CloneFlags::CLONE_NEWNET).map_err(io::Error::from)?;
        let socket = Socket::open();
        // Returning can only fail if the kernel forgot our own namespace; staying in the pod's would
        // make every later host-side request act on the pod, so that is fatal.
        if let Err(err) = nix::sched::setns(own.as_fd(), CloneFlags::CLONE_NEWNET) {
            eprintln!("keel-cni: cannot return to the caller's network namespace: {err}");
            std::process::abort();
        }
        socket
    }

    fn send(&mut self, messages: Vec<(RouteNetlinkMessage, u16)>) -> io::Result<(u32, usize)> {
        let first = self.sequence.wrapping_add(1);
        let mut bytes = Vec::with_capacity(512);
        let count = messages.len();
        for (message, flags) in messages {
            self.sequence = self.sequence.wrapping_add(1);
            let mut header = NetlinkHeader::default();
            header.flags = NLM_F_REQUEST | flags;
            header.sequence_number = self.sequence;
            let mut packet = NetlinkMessage::new(header, NetlinkPayload::from(message));
            packet.finalize();
            let start = bytes.len();
            bytes.resize(start + packet.buffer_len(), 0);
            packet.serialize(&mut bytes[start..]);
        }
        self.socket.send(&bytes, 0)?;
        Ok((first, count))
    }

    /// Reads datagrams until `handle` says it has everything; each netlink message of our
    /// sequence numbers is passed on.
    fn receive(
        &mut self,
        mut handle: impl FnMut(u32, NetlinkPayload<RouteNetlinkMessage>) -> io::Result<bool>,
    ) -> io::Result<()> {
        loop {
            self.buffer.clear();
            let length = self.socket.recv(&mut self.buffer, 0)?;
            let mut offset = 0;
            while offset < length {
                let bytes = &self.buffer[offset..length];
                let message = NetlinkMessage::<RouteNetlinkMessage>::deserialize(bytes)
                    .map_err(|err| io::Error::new(io::ErrorKind::InvalidData, err.to_string()))?;
                let size = message.header.length as usize;
                if size == 0 {
                    return Err(io::Error::new(io::ErrorKind::InvalidData, "empty netlink message"));
                }
                offset += size.next_multiple_of(4);
                if handle(message.header.sequence_number, message.payload)? {
                    return Ok(());
                }
            }
        }
    }

    /// Sends one request and waits for its acknowledgement; answers it carries (NLM_F_ECHO) are
    /// returned.
    pub fn request(
        &mut self,
        op: impl FnOnce() -> String,
        message: RouteNetlinkMessage,
        flags: u16,
    ) -> Result<Vec<RouteNetlinkMessage>, NetlinkError> {
        let mut answers = Vec::new();
        let result = self.send(vec![(message, flags | NLM_F_ACK)]).and_then(|(sequence, _)| {
            self.receive(|seq, payload| {
                if seq != sequence {
                    return Ok(false);
                }
                match payload {
                    NetlinkPayload::Error(err) if err.code.is_some() => Err(err.to_io()),
                    NetlinkPayload::Error(_) => Ok(true),
                    NetlinkPayload::InnerMessage(message) => {
                        answers.push(message);
                        Ok(false)
                    }
                    _ => Ok(false),
                }
            })
        });
        result.map(|()| answers).map_err(|err| NetlinkError::new(op(), err))
    }

    /// Sends several requests in one datagram (the kernel runs them in order) and waits for every
    /// acknowledgement; answers they carry (NLM_F_ECHO) are returned. The first refusal is returned
    /// with the index of the request refused; the requests after it have run as well.
    pub fn batch(
        &mut self,
        messages: Vec<(RouteNetlinkMessage, u16)>,
    ) -> Result<Vec<RouteNetlinkMessage>, (usize, io::Error)> {
        if messages.is_empty() {
            return Ok(Vec::new());
        }
        let messages = messages.into_iter().map(|(message, flags)| (message, flags | NLM_F_ACK)).collect();
        let (first, count) = self.send(messages).map_err(|err| (0, err))?;
        let mut acknowledged = 0;
        let mut refused: Option<(usize, io::Error)> = None;
        let mut answers = Vec::new();
        self.receive(|seq, payload| {
            let index = seq.wrapping_sub(first) as usize;
            if index >= count {
                return Ok(false);
            }
            match payload {
                NetlinkPayload::Error(err) => {
                    acknowledged += 1;
                    if err.code.is_some() && refused.is_none() {
                        refused = Some((index, err.to_io()));
                    }
                }
                NetlinkPayload::InnerMessage(message) => answers.push(message),
                _ => {}
            }
            Ok(acknowledged == count)
        })
        .map_err(|err| (0, err))?;
        refused.map_or(Ok(answers), Err)
    }

    /// Runs a dump request and returns every message of the answer.
    pub fn dump(
        &mut self,
        op: impl FnOnce() -> String,
        message: RouteNetlinkMessage,
    ) -> Result<Vec<RouteNetlinkMessage>, NetlinkError> {
        let mut answers = Vec::new();
        let result = self.send(vec![(message, NLM_F_DUMP)]).and_then(|(sequence, _)| {
            self.receive(|seq, payload| {
                if seq != sequence {
                    return Ok(false);
                }
                match payload {
                    NetlinkPayload::Done(_) => Ok(true),
                    NetlinkPayload::Error(err) if err.code.is_some() => Err(err.to_io()),
                    NetlinkPayload::InnerMessage(message) => {
                        answers.push(message);
                        Ok(false)
                    }
                    _ => Ok(false),
                }
            })
        });
        result.map(|()| answers).map_err(|err| NetlinkError::new(op(), err))
    }
}
