//! The conntrack table over ctnetlink (`NFNL_SUBSYS_CTNETLINK`), used synchronously like keel-nft's
//! nftables connection: one `IPCTNL_MSG_CT_GET` dump per address family, filtered to UDP in the
//! kernel (`CTA_FILTER`, Linux 5.9+; an older kernel refuses it and is dumped whole), and one
//! `IPCTNL_MSG_CT_DELETE` per stale entry, by its original tuple and zone.
//!
//! netlink-packet-netfilter 0.4 types the conntrack messages, tuples and their addresses and ports,
//! and is used for them. It lacks `CTA_FILTER` and `CTA_ZONE`, which are built here as plain
//! attributes (the dump request wholly so: the kernel wants `CTA_FILTER` flagged nested, which the
//! crate's catch-all conntrack attribute cannot say). Entries are read attribute by attribute rather than with the crate's whole-message
//! parse, so an attribute it cannot parse (or one added by a later kernel) skips nothing but itself;
//! an entry without a readable original and reply tuple is skipped, never a panic.

use std::io;

use keel_nft::netlink::{NetlinkError, emit, netfilter_socket};
use netlink_packet_core::{
    DefaultNla, Emitable, NLA_F_NESTED, NLM_F_ACK, NLM_F_DUMP, NLM_F_REQUEST, NLMSG_DONE, NLMSG_ERROR,
    NetlinkBuffer, NlasIterator, Parseable, parse_u16_be,
};
use netlink_packet_netfilter::conntrack::{
    ConntrackAttribute, ConntrackMessage, IPTuple, ProtoTuple, Protocol as ProtoNumber, Tuple,
};
use netlink_packet_netfilter::{
    NetfilterHeader, NetfilterMessage, NetfilterMessageInner, NetfilterProtoFamily, NetfilterSubsystem,
};
use netlink_sys::Socket;

use super::{ConntrackTable, Flow, FlowTuple};

/// `NFNL_SUBSYS_CTNETLINK`, the high byte of a conntrack message's netlink type.
const NFNL_SUBSYS_CTNETLINK: u16 = 1;
/// `IPCTNL_MSG_CT_NEW` and `IPCTNL_MSG_CT_GET`: the types a dumped entry comes back as.
const CT_NEW: u16 = NFNL_SUBSYS_CTNETLINK << 8;
const CT_GET: u16 = NFNL_SUBSYS_CTNETLINK << 8 | IPCTNL_MSG_CT_GET as u16;
/// `IPCTNL_MSG_CT_GET`.
const IPCTNL_MSG_CT_GET: u8 = 1;
/// `enum ctattr_type` members, for attributes read or built by number.
const CTA_TUPLE_ORIG: u16 = 1;
const CTA_TUPLE_REPLY: u16 = 2;
const CTA_ZONE: u16 = 18;
const CTA_FILTER: u16 = 25;
/// `enum ctattr_filter`.
const CTA_FILTER_ORIG_FLAGS: u16 = 1;
const CTA_FILTER_REPLY_FLAGS: u16 = 2;
/// `CTA_FILTER_F_CTA_PROTO_NUM` (net/netfilter/nf_internals.h; ABI, though not in the uapi headers).
const CTA_FILTER_F_CTA_PROTO_NUM: u32 = 1 << 3;
/// `struct nfgenmsg` before a netfilter message's attributes.
const NFGENMSG_LEN: usize = 4;
/// `struct nlmsghdr`.
const NLMSG_HEADER_LEN: usize = 16;
/// Larger than any dump datagram the kernel sends.
const RECEIVE_BUFFER: usize = 128 * 1024;

/// The families listed, as nfgenmsg names them.
const FAMILIES: [NetfilterProtoFamily; 2] = [NetfilterProtoFamily::IPv4, NetfilterProtoFamily::IPv6];

/// The conntrack table of the network namespace the socket was opened in (at first use, in the
/// calling thread's namespace).
#[derive(Debug, Default)]
pub struct ConntrackNetlink {
    socket: Option<Socket>,
    sequence: u32,
    buffer: Vec<u8>,
    /// The kernel refused `CTA_FILTER` once: dump whole tables from then on.
    unfiltered: bool,
}

impl ConntrackNetlink {
    /// An edge that opens its socket at first use.
    pub fn new() -> ConntrackNetlink {
        // A seed unlikely to match a late reply to an earlier socket that had the same port.
        ConntrackNetlink { sequence: std::process::id().wrapping_mul(7919), ..ConntrackNetlink::default() }
    }

    /// The socket, opened at first use.
    fn socket(&mut self) -> Result<&Socket, NetlinkError> {
        if self.socket.is_none() {
            let socket = netfilter_socket("ctnetlink")?;
            self.buffer = Vec::with_capacity(RECEIVE_BUFFER);
            self.socket = Some(socket);
        }
        self.socket.as_ref().ok_or_else(|| NetlinkError::Io {
            what: "open a ctnetlink socket".into(),
            source: io::Error::other("no socket"),
        })
    }

    /// Sends `request` (built for `sequence`) and hands every reply to it to `each` until the dump
    /// ends or the request is acknowledged or refused. A failed socket is dropped: the next call opens
    /// a fresh one.
    fn exchange(
        &mut self,
        request: &[u8],
        sequence: u32,
        what: &str,
        mut each: impl FnMut(Reply),
    ) -> Result<(), NetlinkError> {
        let result = self.exchange_inner(request, sequence, what, &mut each);
        if result.as_ref().is_err_and(|err| err.errno().is_none()) {
            self.socket = None;
        }
        result
    }

    fn exchange_inner(
        &mut self,
        request: &[u8],
        sequence: u32,
        what: &str,
        each: &mut impl FnMut(Reply),
    ) -> Result<(), NetlinkError> {
        let io_error = |source| NetlinkError::Io { what: what.to_owned(), source };
        self.socket()?.send(request, 0).map_err(io_error)?;
        loop {
            self.buffer.clear();
            let Some(socket) = self.socket.as_ref() else {
                return Err(io_error(io::Error::other("the socket went")));
            };
            match socket.recv(&mut self.buffer, 0) {
                Ok(_) => {}
                Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
                Err(source) => return Err(io_error(source)),
            }
            for (reply_sequence, reply) in parse_replies(&self.buffer).map_err(io_error)? {
                if reply_sequence != sequence {
                    continue; // a late reply to an earlier request
                }
                match reply {
                    Reply::Done | Reply::Ack => return Ok(()),
                    Reply::Refused(errno) => {
                        return Err(NetlinkError::Refused { what: what.to_owned(), errno });
                    }
                    reply => each(reply),
                }
            }
        }
    }

    fn next_sequence(&mut self) -> u32 {
        self.sequence = self.sequence.wrapping_add(1);
        self.sequence
    }

    /// Every entry of both families, whatever its protocol (for inspection).
    pub fn all_flows(&mut self) -> Result<Vec<Flow>, NetlinkError> {
        let mut all = Vec::new();
        for family in FAMILIES {
            self.dump(family, false, &mut all)?;
        }
        Ok(all)
    }

    /// Appends `family`'s entries to `flows` (only UDP ones when `udp_only` and the kernel filters).
    fn dump(
        &mut self,
        family: NetfilterProtoFamily,
        udp_only: bool,
        flows: &mut Vec<Flow>,
    ) -> Result<(), NetlinkError> {
        let what = format!("dump the {family:?} conntrack table");
        let sequence = self.next_sequence();
        let filtered = udp_only && !self.unfiltered;
        let start = flows.len();
        let request = dump_request(family, filtered, sequence);
        let result = self.exchange(&request, sequence, &what, |reply| {
            if let Reply::Entry(Some(flow)) = reply {
                flows.push(flow);
            }
        });
        match result {
            Err(NetlinkError::Refused { errno, .. })
                if filtered && (errno == libc_errno::EINVAL || errno == libc_errno::EOPNOTSUPP) =>
            {
                // A kernel before CTA_FILTER: everything, filtered by the caller.
                self.unfiltered = true;
                flows.truncate(start);
                self.dump(family, false, flows)
            }
            result => result,
        }
    }
}

/// The errnos this edge tells apart.
mod libc_errno {
    pub const ENOENT: i32 = nix::errno::Errno::ENOENT as i32;
    pub const EINVAL: i32 = nix::errno::Errno::EINVAL as i32;
    pub const EOPNOTSUPP: i32 = nix::errno::Errno::EOPNOTSUPP as i32;
}

impl ConntrackTable for ConntrackNetlink {
    type Error = NetlinkError;

    fn udp_flows(&mut self) -> Result<Vec<Flow>, NetlinkError> {
        let mut all = Vec::new();
        for family in FAMILIES {
            self.dump(family, true, &mut all)?;
        }
        Ok(all)
    }

    fn delete(&mut self, flow: &Flow) -> Result<bool, NetlinkError> {
        let what = format!(
            "delete the conntrack entry {} -> {} (protocol {})",
            flow.original.source, flow.original.destination, flow.protocol
        );
        let sequence = self.next_sequence();
        let request = delete_request(flow, sequence);
        match self.exchange(&request, sequence, &what, drop) {
            Ok(()) => Ok(true),
            Err(NetlinkError::Refused { errno: libc_errno::ENOENT, .. }) => Ok(false),
            Err(err) => Err(err),
        }
    }
}

/// One reply to a request, as far as this edge reads it.
#[derive(Debug, PartialEq, Eq)]
pub enum Reply {
    /// A dumped entry (None: unreadable, skipped).
    Entry(Option<Flow>),
    /// The request was done (`NLMSG_ERROR` with code 0).
    Ack,
    /// The kernel refused the request with this errno (positive).
    Refused(i32),
    /// The dump ended.
    Done,
    /// Anything else.
    Other,
}

fn header(family: NetfilterProtoFamily) -> NetfilterHeader {
    NetfilterHeader::new(family, 0, 0)
}

/// The request dumping `family`'s conntrack table, only its UDP entries when `udp_only`.
pub fn dump_request(family: NetfilterProtoFamily, udp_only: bool, sequence: u32) -> Vec<u8> {
    let mut attributes = Vec::new();
    if udp_only {
        // The kernel parses CTA_FILTER strictly: it must carry NLA_F_NESTED, which the crate's
        // ConntrackAttribute::Other drops, so the message is built from plain attributes.
        let protocol = Tuple::Proto(vec![ProtoTuple::Protocol(ProtoNumber::Udp)]);
        attributes.push(DefaultNla::new(CTA_TUPLE_ORIG | NLA_F_NESTED, emitted(&[protocol])));
        // NLA_U32: host byte order.
        let flags = [
            DefaultNla::new(CTA_FILTER_ORIG_FLAGS, CTA_FILTER_F_CTA_PROTO_NUM.to_ne_bytes().to_vec()),
            DefaultNla::new(CTA_FILTER_REPLY_FLAGS, 0u32.to_ne_bytes().to_vec()),
        ];
        attributes.push(DefaultNla::new(CTA_FILTER | NLA_F_NESTED, emitted(&flags)));
    }
    let inner = NetfilterMessageInner::Other {
        subsys: NetfilterSubsystem::Conntrack,
        message_type: IPCTNL_MSG_CT_GET,
        attributes,
    };
    let mut request = Vec::new();
    emit(&mut request, NetfilterMessage::new(header(family), inner), NLM_F_REQUEST | NLM_F_DUMP, sequence);
    request
}

/// Attributes as bytes, to nest in another.
fn emitted<T: Emitable>(attributes: &[T]) -> Vec<u8> {
    let mut bytes = Vec::new();
    for attribute in attributes {
        let start = bytes.len();
        bytes.resize(start + attribute.buffer_len(), 0);
        attribute.emit(&mut bytes[start..]);
    }
    bytes
}

/// The request deleting the entry with `flow`'s original tuple in its zone.
pub fn delete_request(flow: &Flow, sequence: u32) -> Vec<u8> {
    let family =
        if flow.original.source.is_ipv4() { NetfilterProtoFamily::IPv4 } else { NetfilterProtoFamily::IPv6 };
    let tuple = vec![
        Tuple::Ip(vec![
            IPTuple::SourceAddress(flow.original.source.ip()),
            IPTuple::DestinationAddress(flow.original.destination.ip()),
        ]),
        Tuple::Proto(vec![
            ProtoTuple::Protocol(ProtoNumber::from(flow.protocol)),
            ProtoTuple::SourcePort(flow.original.source.port()),
            ProtoTuple::DestinationPort(flow.original.destination.port()),
        ]),
    ];
    let mut attributes = vec![ConntrackAttribute::CtaTupleOrig(tuple)];
    if flow.zone != 0 {
        attributes
            .push(ConntrackAttribute::Other(DefaultNla::new(CTA_ZONE, flow.zone.to_be_bytes().to_vec())));
    }
    let mut request = Vec::new();
    let message = NetfilterMessage::new(header(family), ConntrackMessage::Delete(attributes));
    emit(&mut request, message, NLM_F_REQUEST | NLM_F_ACK, sequence);
    request
}

/// Splits a datagram into its netlink messages: (sequence number, reply). Only a datagram whose
/// netlink framing is broken is an error; an unreadable entry is `Entry(None)`.
pub fn parse_replies(datagram: &[u8]) -> Result<Vec<(u32, Reply)>, io::Error> {
    let mut replies = Vec::new();
    let mut offset = 0;
    while offset < datagram.len() {
        let rest = &datagram[offset..];
        let buffer = NetlinkBuffer::new_checked(rest)
            .map_err(|err| io::Error::new(io::ErrorKind::InvalidData, format!("a ctnetlink reply: {err}")))?;
        let length = buffer.length() as usize;
        let payload = rest.get(NLMSG_HEADER_LEN..length).unwrap_or_default();
        let reply = match buffer.message_type() {
            NLMSG_DONE => Reply::Done,
            NLMSG_ERROR => {
                match payload.get(..4).map(|code| i32::from_ne_bytes([code[0], code[1], code[2], code[3]])) {
                    Some(0) => Reply::Ack,
                    Some(code) => Reply::Refused(code.saturating_neg()),
                    None => Reply::Refused(libc_errno::EINVAL),
                }
            }
            CT_NEW | CT_GET => Reply::Entry(parse_entry(payload)),
            _ => Reply::Other,
        };
        replies.push((buffer.sequence_number(), reply));
        // new_checked guarantees a length of at least the header's.
        offset += length.next_multiple_of(4).max(NLMSG_HEADER_LEN);
    }
    Ok(replies)
}

/// A dumped entry's original and reply tuples and its zone, from a message's payload (nfgenmsg and
/// attributes).
pub fn parse_entry(payload: &[u8]) -> Option<Flow> {
    let attributes = payload.get(NFGENMSG_LEN..)?;
    let (mut original, mut reply, mut zone) = (None, None, 0);
    for nla in NlasIterator::new(attributes) {
        let Ok(nla) = nla else { break };
        match nla.kind() {
            CTA_TUPLE_ORIG | CTA_TUPLE_REPLY => match ConntrackAttribute::parse(&nla) {
                Ok(ConntrackAttribute::CtaTupleOrig(tuple)) => original = read_tuple(&tuple),
                Ok(ConntrackAttribute::CtaTupleReply(tuple)) => reply = read_tuple(&tuple),
                _ => return None,
            },
            CTA_ZONE => zone = parse_u16_be(nla.value()).ok()?,
            _ => {}
        }
    }
    let (protocol, original) = original?;
    let (_, reply) = reply?;
    Some(Flow { protocol, original, reply, zone })
}

/// A tuple's protocol, addresses and ports (0 for a protocol without ports).
fn read_tuple(tuple: &[Tuple]) -> Option<(u8, FlowTuple)> {
    let (mut source, mut destination, mut protocol) = (None, None, None);
    let (mut source_port, mut destination_port) = (0, 0);
    for part in tuple {
        match part {
            Tuple::Ip(addresses) => {
                for address in addresses {
                    match address {
                        IPTuple::SourceAddress(ip) => source = Some(*ip),
                        IPTuple::DestinationAddress(ip) => destination = Some(*ip),
                        _ => {}
                    }
                }
            }
            Tuple::Proto(fields) => {
                for field in fields {
                    match field {
                        ProtoTuple::Protocol(number) => protocol = Some(u8::from(*number)),
                        ProtoTuple::SourcePort(port) => source_port = *port,
                        ProtoTuple::DestinationPort(port) => destination_port = *port,
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    let flow = FlowTuple {
        source: std::net::SocketAddr::new(source?, source_port),
        destination: std::net::SocketAddr::new(destination?, destination_port),
    };
    Some((protocol?, flow))
}

#[cfg(test)]
#[path = "netlink_tests.rs"]
mod tests;
