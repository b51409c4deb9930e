//! A synchronous nftables netlink connection: atomic batches with every refusal reported (each
//! change names its table's family), rule dumps and single-chain lookups in `inet` tables.
//!
//! netlink-packet-netfilter builds and parses the messages; netlink-sys gives the socket. The
//! request/reply loop is written here because the rust-netlink stack only offers it asynchronously
//! (netlink-proto on a tokio runtime), which a CNI plugin that lives for one command does not need,
//! nor keel-proxy's sync, which blocks on nothing but the kernel.

use std::io;

use netlink_packet_core::{
    DecodeError, NLM_F_ACK, NLM_F_DUMP, NLM_F_REQUEST, NetlinkBuffer, NetlinkHeader, NetlinkMessage,
    NetlinkPayload, NlasIterator, Parseable,
};
use netlink_packet_netfilter::nftables::{
    ChainAttribute, ChainMessage, NfTablesMessage, RuleAttribute, RuleMessage,
};
use netlink_packet_netfilter::none::ControlMessage;
use netlink_packet_netfilter::{
    NetfilterHeader, NetfilterMessage, NetfilterMessageInner, NetfilterProtoFamily,
};
use netlink_sys::{Socket, SocketAddr, protocols::NETLINK_NETFILTER};

/// `NFNL_SUBSYS_NFTABLES`: the subsystem a batch's begin and end messages name (in `res_id`).
const NFNL_SUBSYS_NFTABLES: u16 = 10;
/// `NFNL_SUBSYS_NFTABLES << 8 | NFT_MSG_NEWRULE`: the netlink type of a dumped rule.
const NEW_RULE: u16 = NFNL_SUBSYS_NFTABLES << 8 | 6;
/// `NFTA_RULE_EXPRESSIONS`.
const NFTA_RULE_EXPRESSIONS: u16 = 4;
/// `struct nfgenmsg` before a netfilter message's attributes.
const NFGENMSG_LEN: usize = 4;
/// How long a reply may take.
const REPLY_TIMEOUT: nix::sys::time::TimeVal = nix::sys::time::TimeVal::new(10, 0);
/// Large enough for any dump message the kernel sends (it sizes them to at most 32 KiB).
const RECEIVE_BUFFER: usize = 128 * 1024;

/// What the kernel answered, or why nothing usable came back.
#[derive(Debug, thiserror::Error)]
pub enum NetlinkError {
    /// The kernel refused a request with this errno (positive).
    #[error("{what}: {}", io::Error::from_raw_os_error(*.errno))]
    Refused {
        /// What was asked.
        what: String,
        /// The kernel's errno.
        errno: i32,
    },
    /// The socket failed, or a reply could not be read.
    #[error("{what}: {source}")]
    Io {
        /// What was asked.
        what: String,
        /// The socket's error.
        source: io::Error,
    },
}

impl NetlinkError {
    /// The kernel's errno, when the kernel refused.
    pub fn errno(&self) -> Option<i32> {
        match self {
            NetlinkError::Refused { errno, .. } => Some(*errno),
            NetlinkError::Io { .. } => None,
        }
    }
}

/// One change of a batch: an nftables message and the flags it needs beyond REQUEST
/// (`NLM_F_CREATE`, `NLM_F_EXCL`, `NLM_F_APPEND`).
#[derive(Debug, Clone)]
pub struct Change {
    /// The family of the table the message is about.
    pub family: NetfilterProtoFamily,
    /// The message.
    pub message: NfTablesMessage,
    /// Flags beyond `NLM_F_REQUEST`.
    pub flags: u16,
    /// What the change does, for error messages ("add rule to hostports").
    pub what: String,
}

impl Change {
    /// A change of an `inet` table.
    pub fn inet(message: NfTablesMessage, flags: u16, what: String) -> Change {
        Change { family: NetfilterProtoFamily::Inet, message, flags, what }
    }
}

/// A netfilter netlink socket in the network namespace it was opened in.
#[derive(Debug)]
pub struct Connection {
    socket: Socket,
    sequence: u32,
    buffer: Vec<u8>,
}

/// A netfilter netlink socket (nftables, ctnetlink: `what` names it in errors) in the calling
/// thread's network namespace: bound, connected to the kernel, NETLINK_CAP_ACK (errors without a
/// copy of the refused request: smaller replies, nothing we would read), and a receive timeout (a
/// kernel that never answers a dump or lookup is an error, not a hung command).
pub fn netfilter_socket(what: &str) -> Result<Socket, NetlinkError> {
    let io = |step: &str| {
        let what = format!("{step} the {what} netlink socket");
        move |source| NetlinkError::Io { what, source }
    };
    let mut socket = Socket::new(NETLINK_NETFILTER).map_err(io("open"))?;
    socket.bind_auto().map_err(io("bind"))?;
    socket.connect(&SocketAddr::new(0, 0)).map_err(io("connect"))?;
    socket.set_cap_ack(true).map_err(io("set NETLINK_CAP_ACK on"))?;
    nix::sys::socket::setsockopt(&socket, nix::sys::socket::sockopt::ReceiveTimeout, &REPLY_TIMEOUT)
        .map_err(|errno| io("set SO_RCVTIMEO on")(errno.into()))?;
    Ok(socket)
}

impl Connection {
    /// A socket in the calling thread's network namespace.
    pub fn open() -> Result<Connection, NetlinkError> {
        let socket = netfilter_socket("nftables")?;
        // A seed unlikely to match a stale reply of an earlier socket that had the same port.
        let sequence = std::process::id().wrapping_mul(7919);
        Ok(Connection { socket, sequence, buffer: Vec::with_capacity(RECEIVE_BUFFER) })
    }

    fn next_sequence(&mut self) -> u32 {
        self.sequence = self.sequence.wrapping_add(1);
        self.sequence
    }

    /// Applies `changes` atomically in one transaction (one `sendmsg`): all of them or none.
    /// Returns the first refusal, naming the change the kernel refused.
    pub fn apply(&mut self, changes: &[Change]) -> Result<(), NetlinkError> {
        if changes.is_empty() {
            return Ok(());
        }
        let begin_sequence = self.next_sequence();
        let mut request = Vec::new();
        emit(&mut request, control(ControlMessage::BatchBegin), NLM_F_REQUEST, begin_sequence);
        let first = begin_sequence.wrapping_add(1);
        // Errors come back for every refused message; an acknowledgement only for the last one, so a
        // transaction of a thousand deletions does not fill the socket's receive buffer with acks.
        for (index, change) in changes.iter().enumerate() {
            let sequence = self.next_sequence();
            let ack = if index + 1 == changes.len() { NLM_F_ACK } else { 0 };
            let flags = NLM_F_REQUEST | ack | change.flags;
            emit(&mut request, nftables_in(change.family, change.message.clone()), flags, sequence);
        }
        let end_sequence = self.next_sequence();
        emit(&mut request, control(ControlMessage::BatchEnd), NLM_F_REQUEST, end_sequence);
        self.fit_send_buffer(request.len())?;
        self.send(&request, "send an nftables batch")?;

        // The kernel handles a batch inside sendmsg: every acknowledgement and error is queued on the
        // socket when send returns, so the replies are read without waiting (as nft does).
        let mut acknowledged = 0usize;
        let mut refused: Option<NetlinkError> = None;
        loop {
            self.buffer.clear();
            match self.socket.recv(&mut self.buffer, libc::MSG_DONTWAIT) {
                Ok(_) => {}
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => break,
                Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
                // ENOBUFS: more errors than the buffer holds; the first one is what we report.
                Err(_) if refused.is_some() => break,
                Err(source) => {
                    return Err(NetlinkError::Io { what: "read the nftables batch replies".into(), source });
                }
            }
            for (sequence, reply) in parse_replies(&self.buffer)? {
                if sequence.wrapping_sub(begin_sequence) > end_sequence.wrapping_sub(begin_sequence) {
                    continue; // not ours (a late reply of an earlier request)
                }
                match reply {
                    Reply::Ack => acknowledged += 1,
                    Reply::Refused(errno) if refused.is_none() => {
                        let index = sequence.wrapping_sub(first) as usize;
                        let what = changes
                            .get(index)
                            .map_or_else(|| "commit the nftables batch".to_owned(), |c| c.what.clone());
                        refused = Some(NetlinkError::Refused { what, errno });
                    }
                    _ => {}
                }
            }
        }
        if let Some(refused) = refused {
            return Err(refused);
        }
        if acknowledged == 0 {
            return Err(NetlinkError::Io {
                what: "apply an nftables batch".into(),
                source: io::Error::other("the kernel neither acknowledged nor refused the transaction"),
            });
        }
        Ok(())
    }

    /// The rules of `table` (of one chain when `chain` is given), in chain order, without their
    /// expressions. A missing table or chain is `ENOENT`.
    pub fn dump_rules(&mut self, table: &str, chain: Option<&str>) -> Result<Vec<DumpedRule>, NetlinkError> {
        let what = "dump nftables rules";
        let mut attributes = vec![RuleAttribute::Table(table.to_owned())];
        if let Some(chain) = chain {
            attributes.push(RuleAttribute::Chain(chain.to_owned()));
        }
        let sequence = self.next_sequence();
        let mut request = Vec::new();
        let message = NfTablesMessage::GetRule(RuleMessage { attributes });
        emit(&mut request, nftables(message), NLM_F_REQUEST | NLM_F_DUMP, sequence);
        self.send(&request, what)?;
        let mut rules = Vec::new();
        loop {
            for reply in self.receive(sequence, what)? {
                match reply {
                    Reply::Done => return Ok(rules),
                    Reply::Refused(errno) => return Err(NetlinkError::Refused { what: what.into(), errno }),
                    Reply::Rule(rule) => rules.push(rule),
                    _ => {}
                }
            }
        }
    }

    /// The chain `name` of `table`, or None when the table or the chain does not exist.
    pub fn get_chain(&mut self, table: &str, name: &str) -> Result<Option<ChainMessage>, NetlinkError> {
        let what = format!("look up nftables chain {name}");
        let sequence = self.next_sequence();
        let mut request = Vec::new();
        let message = NfTablesMessage::GetChain(ChainMessage {
            attributes: vec![ChainAttribute::Table(table.to_owned()), ChainAttribute::Name(name.to_owned())],
        });
        emit(&mut request, nftables(message), NLM_F_REQUEST, sequence);
        self.send(&request, &what)?;
        loop {
            for reply in self.receive(sequence, &what)? {
                match reply {
                    Reply::Refused(libc::ENOENT) => return Ok(None),
                    Reply::Refused(errno) => return Err(NetlinkError::Refused { what, errno }),
                    Reply::Chain(chain) => return Ok(Some(chain)),
                    _ => {}
                }
            }
        }
    }

    /// Grows the socket's send buffer to hold a batch of `len` bytes: the kernel takes a batch only
    /// whole, in one datagram, and refuses one larger than the buffer (EMSGSIZE). As nft does, with
    /// SO_SNDBUFFORCE (root), else SO_SNDBUF within the system's limit.
    fn fit_send_buffer(&mut self, len: usize) -> Result<(), NetlinkError> {
        use nix::sys::socket::{getsockopt, setsockopt, sockopt};
        // The kernel doubles what is set and keeps some for its own bookkeeping.
        let wanted = len.saturating_add(64 * 1024);
        let current = getsockopt(&self.socket, sockopt::SndBuf).unwrap_or(0);
        if current >= wanted {
            return Ok(());
        }
        if setsockopt(&self.socket, sockopt::SndBufForce, &wanted).is_err() {
            setsockopt(&self.socket, sockopt::SndBuf, &wanted).map_err(|errno| NetlinkError::Io {
                what: format!("grow the netlink send buffer to {wanted} bytes"),
                source: errno.into(),
            })?;
        }
        Ok(())
    }

    fn send(&self, request: &[u8], what: &str) -> Result<(), NetlinkError> {
        self.socket
            .send(request, 0)
            .map(drop)
            .map_err(|source| NetlinkError::Io { what: what.to_owned(), source })
    }

    /// Reads one datagram (blocking) and returns the replies to `sequence`.
    fn receive(&mut self, sequence: u32, what: &str) -> Result<Vec<Reply>, NetlinkError> {
        loop {
            self.buffer.clear();
            match self.socket.recv(&mut self.buffer, 0) {
                Ok(_) => {}
                Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
                Err(source) => return Err(NetlinkError::Io { what: what.to_owned(), source }),
            }
            let replies = parse_replies(&self.buffer)?
                .into_iter()
                .filter(|(reply_sequence, _)| *reply_sequence == sequence)
                .map(|(_, reply)| reply)
                .collect();
            return Ok(replies);
        }
    }
}

/// A rule as a dump shows it, without its expressions: where it is and its user data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DumpedRule {
    /// The rule's chain.
    pub chain: String,
    /// The rule's handle.
    pub handle: u64,
    /// The rule's user data (nft keeps its comment there).
    pub userdata: Vec<u8>,
}

/// One netlink reply, decoded as far as its readers need.
#[derive(Debug)]
enum Reply {
    Ack,
    Refused(i32),
    Done,
    Rule(DumpedRule),
    Chain(ChainMessage),
    Other,
}

fn control(message: ControlMessage) -> NetfilterMessage {
    NetfilterMessage::new(
        NetfilterHeader::new(NetfilterProtoFamily::Unspec, 0, NFNL_SUBSYS_NFTABLES),
        message,
    )
}

fn nftables(message: NfTablesMessage) -> NetfilterMessage {
    nftables_in(NetfilterProtoFamily::Inet, message)
}

fn nftables_in(family: NetfilterProtoFamily, message: NfTablesMessage) -> NetfilterMessage {
    NetfilterMessage::new(NetfilterHeader::new(family, 0, 0), message)
}

/// Appends one netlink message to `buffer`.
pub fn emit(buffer: &mut Vec<u8>, message: NetfilterMessage, flags: u16, sequence: u32) {
    let mut header = NetlinkHeader::default();
    header.flags = flags;
    header.sequence_number = sequence;
    let mut message = NetlinkMessage::new(header, NetlinkPayload::InnerMessage(message));
    message.finalize();
    let start = buffer.len();
    buffer.resize(start + message.buffer_len(), 0);
    message.serialize(&mut buffer[start..]);
}

/// Splits a datagram into its netlink messages: (sequence number, reply).
fn parse_replies(datagram: &[u8]) -> Result<Vec<(u32, Reply)>, NetlinkError> {
    let invalid = |err: DecodeError| NetlinkError::Io {
        what: "decode an nftables reply".into(),
        source: io::Error::new(io::ErrorKind::InvalidData, err.to_string()),
    };
    let mut replies = Vec::new();
    let mut offset = 0;
    while offset < datagram.len() {
        let buffer = NetlinkBuffer::new_checked(&datagram[offset..]).map_err(invalid)?;
        let length = buffer.length() as usize;
        let sequence = buffer.sequence_number();
        let reply = if buffer.message_type() == NEW_RULE {
            parse_rule(buffer.payload()).map_or(Reply::Other, Reply::Rule)
        } else {
            let message = NetlinkMessage::<NetfilterMessage>::deserialize(&datagram[offset..offset + length])
                .map_err(invalid)?;
            match message.payload {
                NetlinkPayload::Error(error) => {
                    error.code.map_or(Reply::Ack, |code| Reply::Refused(-code.get()))
                }
                NetlinkPayload::Done(_) => Reply::Done,
                NetlinkPayload::InnerMessage(NetfilterMessage {
                    inner: NetfilterMessageInner::NfTables(NfTablesMessage::NewChain(chain)),
                    ..
                }) => Reply::Chain(chain),
                _ => Reply::Other,
            }
        };
        replies.push((sequence, reply));
        offset += length.next_multiple_of(4);
    }
    Ok(replies)
}

/// A dumped rule's chain, handle and user data. Its expressions are skipped on purpose:
/// netlink-packet-netfilter 0.4's expression parsers format the whole attribute buffer into an error
/// context eagerly for every attribute, which made a dump of a few hundred rules cost ≈25 ms of CPU.
fn parse_rule(payload: &[u8]) -> Option<DumpedRule> {
    let attributes = payload.get(NFGENMSG_LEN..)?;
    let (mut chain, mut handle, mut userdata) = (None, None, Vec::new());
    for nla in NlasIterator::new(attributes) {
        let nla = nla.ok()?;
        if nla.kind() == NFTA_RULE_EXPRESSIONS {
            continue;
        }
        match RuleAttribute::parse(&nla).ok()? {
            RuleAttribute::Chain(name) => chain = Some(name),
            RuleAttribute::Handle(value) => handle = Some(value),
            RuleAttribute::UserData(data) => userdata = data,
            _ => {}
        }
    }
    Some(DumpedRule { chain: chain?, handle: handle?, userdata })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expr;
    use netlink_packet_core::{ErrorMessage, NLMSG_DONE};
    use netlink_packet_netfilter::nftables::{Expressions, Operator};
    use std::num::NonZeroI32;

    #[test]
    fn a_batch_begins_as_nft_begins_it() {
        // nft's batch begin, captured with nlmon (netlink-packet-netfilter's test data), sequence 0.
        let mut bytes = Vec::new();
        emit(&mut bytes, control(ControlMessage::BatchBegin), NLM_F_REQUEST, 0);
        #[rustfmt::skip]
        let captured = [
            0x14, 0x00, 0x00, 0x00, 0x10, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00,
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x0a,
        ];
        assert_eq!(bytes, captured);
    }

    #[test]
    fn dumped_rules_are_read_without_their_expressions() {
        let expressions: Vec<Expressions> = vec![
            expr::meta(netlink_packet_netfilter::nftables::MetaKey::Nfproto),
            expr::cmp(Operator::Equal, vec![2]),
        ];
        let rule = NfTablesMessage::NewRule(RuleMessage {
            attributes: vec![
                RuleAttribute::Table("keel-cni".into()),
                RuleAttribute::Chain("hostports".into()),
                RuleAttribute::Handle(42),
                RuleAttribute::Expressions(expressions.into_iter().map(Into::into).collect()),
                RuleAttribute::UserData(b"\x00\x05keel\x00".to_vec()),
            ],
        });
        let mut datagram = Vec::new();
        emit(&mut datagram, nftables(rule), NLM_F_REQUEST, 7);
        // An acknowledgement, an error and the end of a dump after it, in the same datagram.
        for (sequence, code) in [(8, None), (9, NonZeroI32::new(-libc::EEXIST))] {
            let mut error = ErrorMessage::default();
            error.code = code;
            let mut message = NetlinkMessage::<NetfilterMessage>::new(
                NetlinkHeader::default(),
                NetlinkPayload::Error(error),
            );
            message.header.sequence_number = sequence;
            message.finalize();
            let start = datagram.len();
            datagram.resize(start + message.buffer_len(), 0);
            message.serialize(&mut datagram[start..]);
        }
        let mut done = vec![0u8; 20];
        done[..4].copy_from_slice(&20u32.to_ne_bytes());
        done[4..6].copy_from_slice(&NLMSG_DONE.to_ne_bytes());
        done[8..12].copy_from_slice(&10u32.to_ne_bytes());
        datagram.extend(done);

        let replies = parse_replies(&datagram).unwrap();
        assert_eq!(replies.len(), 4);
        match &replies[0] {
            (7, Reply::Rule(rule)) => {
                assert_eq!((rule.chain.as_str(), rule.handle), ("hostports", 42));
                assert_eq!(rule.userdata, b"\x00\x05keel\x00");
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(replies[1], (8, Reply::Ack)));
        assert!(matches!(replies[2], (9, Reply::Refused(libc::EEXIST))));
        assert!(matches!(replies[3], (10, Reply::Done)));
    }
}
