use netlink_packet_core::{NetlinkMessage, NetlinkPayload};
use netlink_packet_netfilter::conntrack::Status;

use super::*;

fn flow(protocol: u8, client: &str, frontend: &str, endpoint: &str, zone: u16) -> Flow {
    let (client, frontend, endpoint): (std::net::SocketAddr, std::net::SocketAddr, std::net::SocketAddr) =
        (client.parse().unwrap(), frontend.parse().unwrap(), endpoint.parse().unwrap());
    Flow {
        protocol,
        original: FlowTuple { source: client, destination: frontend },
        reply: FlowTuple { source: endpoint, destination: client },
        zone,
    }
}

#[test]
fn a_delete_is_the_original_tuple_as_conntrack_tools_sends_it() {
    let stale = flow(17, "10.244.1.1:40000", "10.96.0.53:53", "10.244.1.2:5353", 0);
    #[rustfmt::skip]
    let expected: [u8; 72] = [
        // nlmsghdr: length 72, IPCTNL_MSG_CT_DELETE of ctnetlink, REQUEST|ACK, sequence 7, port 0.
        72, 0, 0, 0, 0x02, 0x01, 0x05, 0x00, 7, 0, 0, 0, 0, 0, 0, 0,
        // nfgenmsg: AF_INET, version 0, res_id 0.
        2, 0, 0, 0,
        // CTA_TUPLE_ORIG (nested), 52 bytes.
        52, 0, 0x01, 0x80,
        //   CTA_TUPLE_IP (nested): CTA_IP_V4_SRC, CTA_IP_V4_DST.
        20, 0, 0x01, 0x80,
        8, 0, 1, 0, 10, 244, 1, 1,
        8, 0, 2, 0, 10, 96, 0, 53,
        //   CTA_TUPLE_PROTO (nested): CTA_PROTO_NUM 17, ports in network order.
        28, 0, 0x02, 0x80,
        5, 0, 1, 0, 17, 0, 0, 0,
        6, 0, 2, 0, 0x9c, 0x40, 0, 0,
        6, 0, 3, 0, 0, 53, 0, 0,
    ];
    assert_eq!(delete_request(&stale, 7), expected);
}

#[test]
fn a_delete_names_the_family_and_the_zone() {
    let stale = flow(17, "[fd00::1]:40000", "[fd00:96::53]:53", "[fd00:10:244::2]:5353", 3);
    let request = delete_request(&stale, 1);
    let message = NetlinkMessage::<NetfilterMessage>::deserialize(&request).unwrap();
    let NetlinkPayload::InnerMessage(message) = message.payload else { panic!("{message:?}") };
    assert_eq!(message.header.family, NetfilterProtoFamily::IPv6);
    let NetfilterMessageInner::Conntrack(ConntrackMessage::Delete(attributes)) = message.inner else {
        panic!("{message:?}")
    };
    assert!(matches!(&attributes[0], ConntrackAttribute::CtaTupleOrig(tuple)
        if read_tuple(tuple) == Some((17, stale.original))));
    assert_eq!(attributes[1], ConntrackAttribute::Other(DefaultNla::new(CTA_ZONE, vec![0, 3])));
}

#[test]
fn a_dump_asks_for_udp_only_unless_told_otherwise() {
    let filtered = dump_request(NetfilterProtoFamily::IPv4, true, 5);
    // Type IPCTNL_MSG_CT_GET, flags REQUEST|DUMP, family AF_INET.
    assert_eq!(&filtered[4..8], &[0x01, 0x01, 0x01, 0x03]);
    assert_eq!(filtered[16], 2);
    let attributes = &filtered[20..];
    #[rustfmt::skip]
    let expected: [u8; 36] = [
        // CTA_TUPLE_ORIG { CTA_TUPLE_PROTO { CTA_PROTO_NUM 17 } }
        16, 0, 0x01, 0x80, 12, 0, 0x02, 0x80, 5, 0, 1, 0, 17, 0, 0, 0,
        // CTA_FILTER (nested) { ORIG_FLAGS CTA_FILTER_F_CTA_PROTO_NUM, REPLY_FLAGS 0 } (host order)
        20, 0, 25, 0x80, 8, 0, 1, 0, 0, 0, 0, 0, 8, 0, 2, 0, 0, 0, 0, 0,
    ];
    let mut expected = expected;
    expected[24..28].copy_from_slice(&CTA_FILTER_F_CTA_PROTO_NUM.to_ne_bytes());
    assert_eq!(attributes, expected);

    let whole = dump_request(NetfilterProtoFamily::IPv6, false, 5);
    assert_eq!(whole.len(), 20, "no attributes");
    assert_eq!(whole[16], 10);
}

/// A dumped entry as the kernel sends it: tuples, status, and attributes nobody here reads.
fn entry(flow: &Flow, sequence: u32) -> Vec<u8> {
    let tuple = |protocol: u8, tuple: &FlowTuple| {
        vec![
            Tuple::Ip(vec![
                IPTuple::SourceAddress(tuple.source.ip()),
                IPTuple::DestinationAddress(tuple.destination.ip()),
            ]),
            Tuple::Proto(vec![
                ProtoTuple::Protocol(ProtoNumber::from(protocol)),
                ProtoTuple::SourcePort(tuple.source.port()),
                ProtoTuple::DestinationPort(tuple.destination.port()),
            ]),
        ]
    };
    let mut attributes = vec![
        ConntrackAttribute::CtaTupleOrig(tuple(flow.protocol, &flow.original)),
        ConntrackAttribute::CtaTupleReply(tuple(flow.protocol, &flow.reply)),
        ConntrackAttribute::CtaStatus(Status::from_bits_retain(0x1ba)),
        ConntrackAttribute::CtaTimeout(29),
        // CTA_TIMESTAMP (nested, unknown here) and an attribute of a kernel from the future.
        ConntrackAttribute::Other(DefaultNla::new(
            20 | NLA_F_NESTED,
            vec![12, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1],
        )),
        ConntrackAttribute::Other(DefaultNla::new(99, vec![1, 2, 3])),
    ];
    if flow.zone != 0 {
        attributes
            .push(ConntrackAttribute::Other(DefaultNla::new(CTA_ZONE, flow.zone.to_be_bytes().to_vec())));
    }
    let mut bytes = Vec::new();
    let family =
        if flow.original.source.is_ipv4() { NetfilterProtoFamily::IPv4 } else { NetfilterProtoFamily::IPv6 };
    emit(&mut bytes, NetfilterMessage::new(header(family), ConntrackMessage::New(attributes)), 2, sequence);
    bytes
}

fn done(sequence: u32) -> Vec<u8> {
    let mut done = vec![0u8; 20];
    done[..4].copy_from_slice(&20u32.to_ne_bytes());
    done[4..6].copy_from_slice(&NLMSG_DONE.to_ne_bytes());
    done[8..12].copy_from_slice(&sequence.to_ne_bytes());
    done
}

fn error(sequence: u32, code: i32) -> Vec<u8> {
    let mut error = vec![0u8; 36];
    error[..4].copy_from_slice(&36u32.to_ne_bytes());
    error[4..6].copy_from_slice(&NLMSG_ERROR.to_ne_bytes());
    error[8..12].copy_from_slice(&sequence.to_ne_bytes());
    error[16..20].copy_from_slice(&code.to_ne_bytes());
    error
}

#[test]
fn dumped_entries_are_read_past_unknown_attributes_in_both_families() {
    let v4 = flow(17, "10.244.1.1:40000", "10.96.0.53:53", "10.244.1.2:5353", 0);
    let v6 = flow(17, "[fd00::1]:40000", "[fd00:96::53]:53", "[fd00:10:244::2]:5353", 7);
    let tcp = flow(6, "10.244.1.1:40001", "10.96.0.10:80", "10.244.1.5:8080", 0);
    let mut datagram = entry(&v4, 9);
    datagram.extend(entry(&v6, 9));
    datagram.extend(entry(&tcp, 9));
    datagram.extend(done(9));
    let replies = parse_replies(&datagram).unwrap();
    assert_eq!(
        replies,
        vec![
            (9, Reply::Entry(Some(v4))),
            (9, Reply::Entry(Some(v6))),
            (9, Reply::Entry(Some(tcp))),
            (9, Reply::Done)
        ]
    );
}

#[test]
fn acknowledgements_and_refusals_are_told_apart() {
    let mut datagram = error(3, 0);
    datagram.extend(error(4, -libc_errno::ENOENT));
    let replies = parse_replies(&datagram).unwrap();
    assert_eq!(replies, vec![(3, Reply::Ack), (4, Reply::Refused(libc_errno::ENOENT))]);
}

#[test]
fn an_unreadable_entry_is_skipped_and_a_broken_datagram_never_panics() {
    let good = flow(17, "10.244.1.1:40000", "10.96.0.53:53", "10.244.1.2:5353", 0);
    // An entry whose original tuple holds a 3-byte address, then a good one.
    let mut bad = entry(&good, 1);
    let at = bad.windows(8).position(|window| window == [8, 0, 1, 0, 10, 244, 1, 1]).unwrap();
    bad[at] = 7;
    let mut datagram = bad;
    datagram.extend(entry(&good, 1));
    let replies = parse_replies(&datagram).unwrap();
    assert_eq!(replies, vec![(1, Reply::Entry(None)), (1, Reply::Entry(Some(good)))]);

    // Every truncation, and every byte flipped, of a valid datagram: an error or replies, no panic.
    let mut datagram = entry(&good, 1);
    datagram.extend(done(1));
    for len in 0..datagram.len() {
        let _ = parse_replies(&datagram[..len]);
    }
    for at in 0..datagram.len() {
        for value in [0, 1, 0x7f, 0x80, 0xff] {
            let mut changed = datagram.clone();
            changed[at] = value;
            let _ = parse_replies(&changed);
        }
    }
}
