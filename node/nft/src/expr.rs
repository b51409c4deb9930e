//! The nftables expressions Keel's rules are made of, as netlink attributes.
//!
//! netlink-packet-netfilter types cmp, payload, meta, bitwise and immediate; it lacks `nat`, `masq` and
//! `fib`, so those are built here from their `NFTA_*` attributes (include/uapi/linux/netfilter/
//! nf_tables.h) through `Expressions::Other`. Every expression loads into or reads register 1 (the
//! 16-byte `NFT_REG_1`), except a DNAT's port, which goes through register 2, as nft does it.

use std::net::IpAddr;

use netlink_packet_core::DefaultNla;
use netlink_packet_netfilter::nftables::{
    Bitwise, Cmp, DataAttribute, Expressions, Immediate, Lookup, Meta, MetaKey, Operator, Payload, Register,
    Verdict, VerdictAttribute,
};

/// `NFPROTO_IPV4` / `NFPROTO_IPV6`: the family `meta nfproto` loads.
pub const NFPROTO_IPV4: u8 = 2;
/// `NFPROTO_IPV6`.
pub const NFPROTO_IPV6: u8 = 10;
/// `NF_ACCEPT` (a base chain's policy).
pub const NF_ACCEPT: u32 = 1;

/// `enum nft_payload_bases`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Header {
    /// The network header (IPv4, IPv6).
    Network = 1,
    /// The transport header (TCP, UDP, SCTP).
    Transport = 2,
}

// nat expression (enum nft_nat_attributes, enum nft_nat_types).
const NFTA_NAT_TYPE: u16 = 1;
const NFTA_NAT_FAMILY: u16 = 2;
const NFTA_NAT_REG_ADDR_MIN: u16 = 3;
const NFTA_NAT_REG_PROTO_MIN: u16 = 5;
const NFTA_NAT_FLAGS: u16 = 7;
const NFT_NAT_DNAT: u32 = 1;
/// `NF_NAT_RANGE_PROTO_SPECIFIED`: the port is given.
const NF_NAT_RANGE_PROTO_SPECIFIED: u32 = 2;
// fib expression (enum nft_fib_attributes, enum nft_fib_result, enum nft_fib_flags).
const NFTA_FIB_DREG: u16 = 1;
const NFTA_FIB_RESULT: u16 = 2;
const NFTA_FIB_FLAGS: u16 = 3;
const NFT_FIB_RESULT_ADDRTYPE: u32 = 3;
const NFTA_FIB_F_DADDR: u32 = 1 << 1;
/// `RTN_LOCAL`: the address type `fib daddr type local` compares with (host byte order).
pub const RTN_LOCAL: u32 = 2;
/// `IFNAMSIZ`: interface names are compared as 16 NUL-padded bytes.
const IFNAMSIZ: usize = 16;

/// `meta <key>` into register 1.
pub fn meta(key: MetaKey) -> Expressions {
    Expressions::Meta(vec![Meta::DestinationRegister(Register::Reg1), Meta::Key(key)])
}

/// `len` bytes of a header at `offset` into register 1.
pub fn payload(header: Header, offset: u32, len: u32) -> Expressions {
    Expressions::Payload(vec![
        Payload::DestinationRegister(Register::Reg1),
        Payload::Base(header as u32),
        Payload::Offset(offset),
        Payload::Len(len),
    ])
}

/// Register 1 compared with `data`.
pub fn cmp(op: Operator, data: Vec<u8>) -> Expressions {
    Expressions::Cmp(vec![
        Cmp::SourceRegister(Register::Reg1),
        Cmp::Op(op),
        Cmp::Data(DataAttribute::Value(data)),
    ])
}

/// Register 1 masked with `mask` (`reg1 = reg1 & mask ^ 0`).
pub fn mask(mask: Vec<u8>) -> Expressions {
    let zeros = vec![0; mask.len()];
    Expressions::Bitwise(vec![
        Bitwise::SourceRegister(Register::Reg1),
        Bitwise::DestinationRegister(Register::Reg1),
        Bitwise::Length(mask.len() as u32),
        Bitwise::Mask(DataAttribute::Value(mask)),
        Bitwise::Xor(DataAttribute::Value(zeros)),
    ])
}

/// `data` into `register`.
pub fn immediate(register: Register, data: Vec<u8>) -> Expressions {
    Expressions::Immediate(vec![
        Immediate::DestinationRegister(register),
        Immediate::Data(DataAttribute::Value(data)),
    ])
}

/// `jump <chain>`.
pub fn jump(chain: &str) -> Expressions {
    Expressions::Immediate(vec![
        Immediate::DestinationRegister(Register::Verdict),
        Immediate::Data(DataAttribute::Verdict(vec![
            VerdictAttribute::Code(Verdict::Jump),
            VerdictAttribute::Chain(chain.to_owned()),
        ])),
    ])
}

/// `masquerade`.
pub fn masquerade() -> Expressions {
    Expressions::Other { expression_type: "masq".to_owned(), attributes: Vec::new() }
}

/// `dnat <family> to <register 1>:<register 2>`: the address in register 1, the port in register 2.
pub fn dnat(family: u8) -> Expressions {
    dnat_registers(family, Register::Reg1, Register::Reg2)
}

/// `dnat <family> to <address>:<port>` from the registers `address` and `port`.
pub fn dnat_registers(family: u8, address: Register, port: Register) -> Expressions {
    Expressions::Other {
        expression_type: "nat".to_owned(),
        attributes: vec![
            u32_attribute(NFTA_NAT_TYPE, NFT_NAT_DNAT),
            u32_attribute(NFTA_NAT_FAMILY, u32::from(family)),
            u32_attribute(NFTA_NAT_REG_ADDR_MIN, u32::from(address)),
            u32_attribute(NFTA_NAT_REG_PROTO_MIN, u32::from(port)),
            u32_attribute(NFTA_NAT_FLAGS, NF_NAT_RANGE_PROTO_SPECIFIED),
        ],
    }
}

/// The 4-byte number in `register` turned from host to network byte order (`byteorder`), as nft
/// does before looking a host-order number up in an interval set.
pub fn hton32(register: Register) -> Expressions {
    Expressions::Other {
        expression_type: "byteorder".to_owned(),
        attributes: vec![
            u32_attribute(NFTA_BYTEORDER_SREG, u32::from(register)),
            u32_attribute(NFTA_BYTEORDER_DREG, u32::from(register)),
            u32_attribute(NFTA_BYTEORDER_OP, NFT_BYTEORDER_HTON),
            u32_attribute(NFTA_BYTEORDER_LEN, 4),
            u32_attribute(NFTA_BYTEORDER_SIZE, 4),
        ],
    }
}

/// `fib daddr type` into register 1 (an `RTN_*` address type, host byte order).
pub fn fib_daddr_type() -> Expressions {
    fib_address_type(NFTA_FIB_F_DADDR)
}

/// `fib saddr type` or `fib daddr type` (by `flag`) into register 1.
fn fib_address_type(flag: u32) -> Expressions {
    Expressions::Other {
        expression_type: "fib".to_owned(),
        attributes: vec![
            u32_attribute(NFTA_FIB_DREG, u32::from(Register::Reg1)),
            u32_attribute(NFTA_FIB_RESULT, NFT_FIB_RESULT_ADDRTYPE),
            u32_attribute(NFTA_FIB_FLAGS, flag),
        ],
    }
}

/// `meta nfproto ipv4|ipv6`: the dependency of every address match in an inet table.
pub fn match_family(address: IpAddr) -> [Expressions; 2] {
    [meta(MetaKey::Nfproto), cmp(Operator::Equal, vec![family(address)])]
}

/// The `NFPROTO_*` of an address.
pub fn family(address: IpAddr) -> u8 {
    if address.is_ipv4() { NFPROTO_IPV4 } else { NFPROTO_IPV6 }
}

/// Which address of the network header a match reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    /// The source address.
    Source,
    /// The destination address.
    Destination,
}

/// `ip[6] saddr|daddr [!=|==] <network>/<prefix>`, loading only the prefix's whole bytes (and masking
/// the last partial one), as nft does. A /0 matches everything and yields nothing.
pub fn match_prefix(field: Field, network: IpAddr, prefix_len: u8, op: Operator) -> Vec<Expressions> {
    let (octets, source_offset, destination_offset) = match network {
        IpAddr::V4(address) => (address.octets().to_vec(), 12, 16),
        IpAddr::V6(address) => (address.octets().to_vec(), 8, 24),
    };
    let offset = if field == Field::Source { source_offset } else { destination_offset };
    let prefix_len = usize::from(prefix_len).min(octets.len() * 8);
    if prefix_len == 0 {
        return Vec::new();
    }
    let bytes = prefix_len.div_ceil(8);
    let mut expressions = vec![payload(Header::Network, offset, bytes as u32)];
    let mut value = octets[..bytes].to_vec();
    if prefix_len % 8 != 0 {
        let mut bits = vec![0xffu8; bytes];
        bits[bytes - 1] = 0xffu8 << (8 - prefix_len % 8);
        for (byte, bit) in value.iter_mut().zip(&bits) {
            *byte &= bit;
        }
        expressions.push(mask(bits));
    }
    expressions.push(cmp(op, value));
    expressions
}

/// `meta oifname != <name>`.
pub fn oifname_not(name: &str) -> [Expressions; 2] {
    let mut padded = name.as_bytes().to_vec();
    padded.resize(IFNAMSIZ, 0);
    [meta(MetaKey::Oifname), cmp(Operator::NotEqual, padded)]
}

/// `meta l4proto <protocol> th dport <port>`.
pub fn match_destination_port(protocol: u8, port: u16) -> [Expressions; 4] {
    [
        meta(MetaKey::L4Proto),
        cmp(Operator::Equal, vec![protocol]),
        payload(Header::Transport, 2, 2),
        cmp(Operator::Equal, port.to_be_bytes().to_vec()),
    ]
}

/// The address's bytes in network order.
pub fn octets(address: IpAddr) -> Vec<u8> {
    match address {
        IpAddr::V4(address) => address.octets().to_vec(),
        IpAddr::V6(address) => address.octets().to_vec(),
    }
}

// Expressions keel-proxy's rules add (include/uapi/linux/netfilter/nf_tables.h), each with its
// registers given: a concatenation loads its parts into consecutive 32-bit registers.

// numgen (enum nft_ng_attributes, enum nft_ng_types).
const NFTA_NG_DREG: u16 = 1;
const NFTA_NG_MODULUS: u16 = 2;
const NFTA_NG_TYPE: u16 = 3;
const NFTA_NG_OFFSET: u16 = 4;
const NFT_NG_RANDOM: u32 = 1;
// ct (enum nft_ct_attributes, enum nft_ct_keys).
const NFTA_CT_DREG: u16 = 1;
const NFTA_CT_KEY: u16 = 2;
const NFT_CT_STATE: u32 = 0;
/// `ct state new`'s bit (`NF_CT_STATE_BIT(IP_CT_NEW)`), host byte order.
pub const CT_STATE_NEW: u32 = 1 << 3;
// dynset (enum nft_dynset_attributes, enum nft_dynset_ops).
const NFTA_DYNSET_SET_NAME: u16 = 1;
const NFTA_DYNSET_OP: u16 = 3;
const NFTA_DYNSET_SREG_KEY: u16 = 4;
const NFT_DYNSET_OP_UPDATE: u32 = 1;
// masq (enum nft_masq_attributes) and NF_NAT_RANGE_PROTO_RANDOM_FULLY.
const NFTA_MASQ_FLAGS: u16 = 1;
const NF_NAT_RANGE_PROTO_RANDOM_FULLY: u32 = 1 << 4;
// reject (enum nft_reject_attributes, enum nft_reject_types).
const NFTA_REJECT_TYPE: u16 = 1;
const NFTA_REJECT_ICMP_CODE: u16 = 2;
const NFT_REJECT_ICMP_UNREACH: u32 = 0;
/// `ICMP_PORT_UNREACH`: what `reject` sends in an `ip` table.
pub const ICMP_PORT_UNREACH: u8 = 3;
/// `ICMPV6_PORT_UNREACH`: what `reject` sends in an `ip6` table.
pub const ICMPV6_PORT_UNREACH: u8 = 4;
/// `NFTA_FIB_F_SADDR`.
const NFTA_FIB_F_SADDR: u32 = 1;
// byteorder expression (enum nft_byteorder_attributes, enum nft_byteorder_ops).
const NFTA_BYTEORDER_SREG: u16 = 1;
const NFTA_BYTEORDER_DREG: u16 = 2;
const NFTA_BYTEORDER_OP: u16 = 3;
const NFTA_BYTEORDER_LEN: u16 = 4;
const NFTA_BYTEORDER_SIZE: u16 = 5;
const NFT_BYTEORDER_HTON: u32 = 1;
/// `NFT_LOOKUP_F_INV`.
const NFT_LOOKUP_F_INV: u32 = 1;
/// `NF_DROP`: the verdict code of `drop`.
pub const NF_DROP: u32 = 0;

fn u32_attribute(kind: u16, value: u32) -> DefaultNla {
    DefaultNla::new(kind, value.to_be_bytes().to_vec())
}

/// `meta <key>` into `register`.
pub fn meta_into(key: MetaKey, register: Register) -> Expressions {
    Expressions::Meta(vec![Meta::DestinationRegister(register), Meta::Key(key)])
}

/// `meta <key> set <register>`.
pub fn meta_set(key: MetaKey, register: Register) -> Expressions {
    Expressions::Meta(vec![Meta::Key(key), Meta::SourceRegister(register)])
}

/// `len` bytes of a header at `offset` into `register`.
pub fn payload_into(header: Header, offset: u32, len: u32, register: Register) -> Expressions {
    Expressions::Payload(vec![
        Payload::DestinationRegister(register),
        Payload::Base(header as u32),
        Payload::Offset(offset),
        Payload::Len(len),
    ])
}

/// Register 1 as `(reg1 & mask) ^ xor` (both `len` bytes): nft's form of `&`, `|` and `^`.
pub fn bitwise(mask: Vec<u8>, xor: Vec<u8>) -> Expressions {
    Expressions::Bitwise(vec![
        Bitwise::SourceRegister(Register::Reg1),
        Bitwise::DestinationRegister(Register::Reg1),
        Bitwise::Length(mask.len() as u32),
        Bitwise::Mask(DataAttribute::Value(mask)),
        Bitwise::Xor(DataAttribute::Value(xor)),
    ])
}

/// A lookup of the key starting at `source` in set `set`: a match (`invert`: a miss), or with
/// `verdict_map` the element's verdict (`vmap @set`).
pub fn lookup(set: &str, source: Register, verdict_map: bool, invert: bool) -> Expressions {
    let mut attributes = vec![Lookup::Set(set.to_owned()), Lookup::SourceRegister(source)];
    if verdict_map {
        attributes.push(Lookup::DestinationRegister(Register::Verdict));
    }
    if invert {
        attributes.push(Lookup::Flags(NFT_LOOKUP_F_INV));
    }
    Expressions::Lookup(attributes)
}

/// A lookup of the key starting at `source` in map `set`, its data into `destination` (`map @set`).
pub fn lookup_map(set: &str, source: Register, destination: Register) -> Expressions {
    Expressions::Lookup(vec![
        Lookup::Set(set.to_owned()),
        Lookup::SourceRegister(source),
        Lookup::DestinationRegister(destination),
    ])
}

/// `numgen random mod <modulus> offset <offset>` into register 1 (host byte order).
pub fn numgen_random(modulus: u32, offset: u32) -> Expressions {
    Expressions::Other {
        expression_type: "numgen".to_owned(),
        attributes: vec![
            u32_attribute(NFTA_NG_DREG, u32::from(Register::Reg1)),
            u32_attribute(NFTA_NG_MODULUS, modulus),
            u32_attribute(NFTA_NG_TYPE, NFT_NG_RANDOM),
            u32_attribute(NFTA_NG_OFFSET, offset),
        ],
    }
}

/// `ct state` into register 1 (a bit mask, host byte order).
pub fn ct_state() -> Expressions {
    Expressions::Other {
        expression_type: "ct".to_owned(),
        attributes: vec![
            u32_attribute(NFTA_CT_DREG, u32::from(Register::Reg1)),
            u32_attribute(NFTA_CT_KEY, NFT_CT_STATE),
        ],
    }
}

/// `fib saddr type` into register 1.
pub fn fib_saddr_type() -> Expressions {
    fib_address_type(NFTA_FIB_F_SADDR)
}

/// `update @<set> { <register 1> }`: adds the key, or refreshes its timeout (the set's).
pub fn dynset_update(set: &str) -> Expressions {
    let mut name = set.as_bytes().to_vec();
    name.push(0);
    Expressions::Other {
        expression_type: "dynset".to_owned(),
        attributes: vec![
            DefaultNla::new(NFTA_DYNSET_SET_NAME, name),
            u32_attribute(NFTA_DYNSET_OP, NFT_DYNSET_OP_UPDATE),
            u32_attribute(NFTA_DYNSET_SREG_KEY, u32::from(Register::Reg1)),
        ],
    }
}

/// `masquerade fully-random`.
pub fn masquerade_fully_random() -> Expressions {
    Expressions::Other {
        expression_type: "masq".to_owned(),
        attributes: vec![u32_attribute(NFTA_MASQ_FLAGS, NF_NAT_RANGE_PROTO_RANDOM_FULLY)],
    }
}

/// `reject` with ICMP(v6) destination unreachable of `code`.
pub fn reject_icmp(code: u8) -> Expressions {
    Expressions::Other {
        expression_type: "reject".to_owned(),
        attributes: vec![
            u32_attribute(NFTA_REJECT_TYPE, NFT_REJECT_ICMP_UNREACH),
            DefaultNla::new(NFTA_REJECT_ICMP_CODE, vec![code]),
        ],
    }
}

/// A verdict (`jump`/`goto` name a chain; `return`, `drop` do not).
pub fn verdict(code: Verdict, chain: Option<&str>) -> Expressions {
    let mut attributes = vec![VerdictAttribute::Code(code)];
    if let Some(chain) = chain {
        attributes.push(VerdictAttribute::Chain(chain.to_owned()));
    }
    Expressions::Immediate(vec![
        Immediate::DestinationRegister(Register::Verdict),
        Immediate::Data(DataAttribute::Verdict(attributes)),
    ])
}
