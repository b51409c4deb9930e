//! The [`Apply`] edge over netlink (keel-nft): a [`Transaction`] encoded as nftables messages and
//! sent as one batch, which the kernel commits atomically — no process, no `nft` cache load.
//! [`encode`] is pure; [`NftNetlink`] holds the socket, opened in the network namespace of the
//! thread that first applies.

use std::net::IpAddr;

use keel_nft::expr::{self, Field, Header};
use keel_nft::netlink::{Change, Connection, NetlinkError};
use netlink_packet_core::{NLM_F_APPEND, NLM_F_CREATE};
use netlink_packet_netfilter::NetfilterProtoFamily;
use netlink_packet_netfilter::nftables::{
    ChainAttribute, ChainMessage, DataAttribute, Expressions, Hook as HookAttribute, InetHookNumber,
    ListAttribute, MetaKey, NfTablesMessage, Operator, Register, RuleAttribute, RuleMessage, SetAttribute,
    SetElementAttribute, SetElementFlags, SetElementList, SetElementMessage, SetFlags, SetMessage,
    TableAttribute, TableFlags, TableMessage, Verdict as VerdictCode, VerdictAttribute,
};

use super::Apply;
use super::transaction::{
    BaseChain, ChainType, Family, Hook, Key, KeyType, Op, SLOT_SIZE, SetData, SetSpec, Stmt, TABLE,
    Transaction, Value, Verdict,
};

/// nft's datatype numbers (`enum datatypes`), for `nft list` to show the sets' types.
const TYPE_INTEGER: u32 = 4;
const TYPE_IPADDR: u32 = 7;
const TYPE_IP6ADDR: u32 = 8;
const TYPE_INET_PROTOCOL: u32 = 12;
const TYPE_INET_SERVICE: u32 = 13;
/// Bits per datatype in a concatenation's type.
const TYPE_BITS: u32 = 6;
/// `NFT_DATA_VERDICT`: a verdict map's data type.
const NFT_DATA_VERDICT: u32 = 0xffff_ff00;
/// Elements per message: a message's element list is one attribute, at most 64 KiB long.
const ELEMENTS_PER_MESSAGE: usize = 256;

/// Applies transactions over a netfilter netlink socket.
#[derive(Debug, Default)]
pub struct NftNetlink {
    connection: Option<Connection>,
}

impl NftNetlink {
    /// An edge that opens its socket at first use (in the calling thread's network namespace).
    pub fn new() -> NftNetlink {
        NftNetlink::default()
    }
}

impl Apply for NftNetlink {
    type Error = NetlinkError;

    fn apply(&mut self, transaction: &Transaction) -> Result<(), NetlinkError> {
        let changes = encode(transaction);
        let connection = match &mut self.connection {
            Some(connection) => connection,
            None => self.connection.insert(Connection::open()?),
        };
        let result = connection.apply(&changes);
        if result.as_ref().is_err_and(|err| err.errno().is_none()) {
            // The socket itself failed: a fresh one next time.
            self.connection = None;
        }
        result
    }
}

/// The messages of a transaction, in its order; runs of element additions or deletions of one set
/// share messages.
pub fn encode(transaction: &Transaction) -> Vec<Change> {
    let mut changes = Vec::with_capacity(transaction.ops.len());
    let mut ops = transaction.ops.iter().peekable();
    while let Some(op) = ops.next() {
        let Some((family, set, adding, mut elements)) = elements_of(op) else {
            changes.push(encode_op(op));
            continue;
        };
        loop {
            match ops.peek().and_then(|next| elements_of(next)) {
                Some((f, s, a, next))
                    if f == family
                        && s == set
                        && a == adding
                        && elements.len() + next.len() <= ELEMENTS_PER_MESSAGE =>
                {
                    elements.extend(next);
                    ops.next();
                }
                _ => break,
            }
        }
        changes.push(element_change(family, set, adding, elements));
    }
    changes
}

/// An element operation's family, set, whether it adds, and the kernel's elements for it (two
/// for an interval: its start and its end).
fn elements_of(op: &Op) -> Option<(Family, &str, bool, Vec<ListAttribute<SetElementAttribute>>)> {
    match op {
        Op::AddElement { family, set, key, value } => {
            Some((*family, set, true, elements(*family, key, value.as_ref())))
        }
        Op::DeleteElement { family, set, key } => Some((*family, set, false, elements(*family, key, None))),
        _ => None,
    }
}

fn element_change(
    family: Family,
    set: &str,
    adding: bool,
    elements: Vec<ListAttribute<SetElementAttribute>>,
) -> Change {
    let count = elements.len();
    let message = SetElementMessage {
        attributes: vec![
            SetElementList::Table(TABLE.to_owned()),
            SetElementList::Set(set.to_owned()),
            SetElementList::Elements(elements),
        ],
    };
    if adding {
        change(family, NfTablesMessage::NewSetElement(message), NLM_F_CREATE, || {
            format!("add {count} elements to {family} {set}")
        })
    } else {
        change(family, NfTablesMessage::DeleteSetElement(message), 0, || {
            format!("delete {count} elements of {family} {set}")
        })
    }
}

fn change(family: Family, message: NfTablesMessage, flags: u16, what: impl FnOnce() -> String) -> Change {
    let family = match family {
        Family::Ip => NetfilterProtoFamily::IPv4,
        Family::Ip6 => NetfilterProtoFamily::IPv6,
    };
    Change { family, message, flags, what: what() }
}

fn encode_op(op: &Op) -> Change {
    let table = || TABLE.to_owned();
    match op {
        Op::AddTable(family) => change(
            *family,
            NfTablesMessage::NewTable(TableMessage {
                attributes: vec![TableAttribute::Name(table()), TableAttribute::Flags(TableFlags::empty())],
            }),
            NLM_F_CREATE,
            || format!("add table {family} {TABLE}"),
        ),
        Op::DeleteTable(family) => change(
            *family,
            NfTablesMessage::DeleteTable(TableMessage { attributes: vec![TableAttribute::Name(table())] }),
            0,
            || format!("delete table {family} {TABLE}"),
        ),
        Op::AddChain { family, name, base } => {
            let mut attributes = vec![ChainAttribute::Table(table()), ChainAttribute::Name(name.clone())];
            if let Some(base) = base {
                attributes.extend(base_chain(base));
            }
            change(*family, NfTablesMessage::NewChain(ChainMessage { attributes }), NLM_F_CREATE, || {
                format!("add chain {family} {name}")
            })
        }
        Op::FlushChain { family, name } => change(
            *family,
            NfTablesMessage::DeleteRule(RuleMessage {
                attributes: vec![RuleAttribute::Table(table()), RuleAttribute::Chain(name.clone())],
            }),
            0,
            || format!("flush chain {family} {name}"),
        ),
        Op::DeleteChain { family, name } => change(
            *family,
            NfTablesMessage::DeleteChain(ChainMessage {
                attributes: vec![ChainAttribute::Table(table()), ChainAttribute::Name(name.clone())],
            }),
            0,
            || format!("delete chain {family} {name}"),
        ),
        Op::AddRule { family, chain, rule } => {
            let expressions: Vec<Expressions> =
                rule.iter().flat_map(|stmt| statement(*family, stmt)).collect();
            change(
                *family,
                NfTablesMessage::NewRule(RuleMessage {
                    attributes: vec![
                        RuleAttribute::Table(table()),
                        RuleAttribute::Chain(chain.clone()),
                        RuleAttribute::Expressions(expressions.into_iter().map(Into::into).collect()),
                    ],
                }),
                NLM_F_CREATE | NLM_F_APPEND,
                || format!("add rule to {family} {chain}"),
            )
        }
        Op::AddSet { family, name, spec } => change(
            *family,
            NfTablesMessage::NewSet(SetMessage { attributes: set_attributes(*family, name, spec) }),
            NLM_F_CREATE,
            || format!("add set {family} {name}"),
        ),
        Op::DeleteSet { family, name, .. } => change(
            *family,
            NfTablesMessage::DeleteSet(SetMessage {
                attributes: vec![SetAttribute::Table(table()), SetAttribute::Name(name.clone())],
            }),
            0,
            || format!("delete set {family} {name}"),
        ),
        Op::AddElement { .. } | Op::DeleteElement { .. } => match elements_of(op) {
            Some((family, set, adding, elements)) => element_change(family, set, adding, elements),
            None => unreachable_change(),
        },
    }
}

/// Never reached (`elements_of` answers for every element operation); a no-op change if it were.
fn unreachable_change() -> Change {
    change(Family::Ip, NfTablesMessage::GetTable(TableMessage { attributes: Vec::new() }), 0, String::new)
}

fn base_chain(base: &BaseChain) -> Vec<ChainAttribute> {
    let hook = match base.hook {
        Hook::Prerouting => InetHookNumber::PreRouting,
        Hook::Input => InetHookNumber::LocalIn,
        Hook::Forward => InetHookNumber::Forward,
        Hook::Output => InetHookNumber::LocalOut,
        Hook::Postrouting => InetHookNumber::PostRouting,
    };
    let kind = match base.kind {
        ChainType::Filter => "filter",
        ChainType::Nat => "nat",
    };
    vec![
        // The priority is a signed 32-bit number sent as its bits.
        ChainAttribute::Hook(vec![
            HookAttribute::Number(hook.into()),
            HookAttribute::Priority(base.priority as u32),
        ]),
        ChainAttribute::Policy(expr::NF_ACCEPT),
        ChainAttribute::Type(kind.to_owned()),
    ]
}

fn set_attributes(family: Family, name: &str, spec: &SetSpec) -> Vec<SetAttribute> {
    let address_type = match family {
        Family::Ip => TYPE_IPADDR,
        Family::Ip6 => TYPE_IP6ADDR,
    };
    let address_len = address_len(family);
    let concat = |types: &[u32]| types.iter().fold(0, |acc, t| (acc << TYPE_BITS) | t);
    let (key_type, key_len) = match spec.key {
        KeyType::ServiceIp => {
            (concat(&[address_type, TYPE_INET_PROTOCOL, TYPE_INET_SERVICE]), address_len + 8)
        }
        KeyType::NodePort => (concat(&[TYPE_INET_PROTOCOL, TYPE_INET_SERVICE]), 8),
        KeyType::Numgen | KeyType::Slot => (TYPE_INTEGER, 4),
        KeyType::Address => (address_type, address_len),
        KeyType::AddressPair => (concat(&[address_type, address_type]), address_len * 2),
    };
    let mut flags = SetFlags::empty();
    if spec.data != SetData::None {
        flags |= SetFlags::Map;
    }
    if spec.key == KeyType::Slot {
        flags |= SetFlags::Interval;
    }
    if spec.timeout.is_some() {
        // `flags dynamic,timeout`: the data path adds elements that expire.
        flags |= SetFlags::Timeout | SetFlags::Eval;
    }
    let mut attributes = vec![
        SetAttribute::Table(TABLE.to_owned()),
        SetAttribute::Name(name.to_owned()),
        SetAttribute::Flags(flags),
        SetAttribute::KeyType(key_type),
        SetAttribute::KeyLen(key_len),
        // Required by the kernel; names the set within the batch (we refer to sets by name).
        SetAttribute::Id(set_id(name)),
    ];
    match spec.data {
        SetData::None => {}
        SetData::Verdict => attributes.push(SetAttribute::DataType(NFT_DATA_VERDICT)),
        SetData::Endpoint => {
            // address . port, the port padded to 4 bytes.
            attributes.push(SetAttribute::DataType(concat(&[address_type, TYPE_INET_SERVICE])));
            attributes.push(SetAttribute::DataLen(address_len + 4));
        }
    }
    if let Some(seconds) = spec.timeout {
        attributes.push(SetAttribute::Timeout(u64::from(seconds) * 1000));
    }
    match spec.key {
        KeyType::Numgen => attributes.push(SetAttribute::UserData(numgen_map_userdata())),
        KeyType::Slot => attributes.push(SetAttribute::UserData(slot_map_userdata(family))),
        _ => {}
    }
    attributes
}

/// One type-length-value entry of nft's set user data (libnftnl's NFTNL_UDATA_SET_*).
fn userdata_entry(kind: u8, value: &[u8]) -> Vec<u8> {
    let mut bytes = vec![kind, value.len() as u8];
    bytes.extend_from_slice(value);
    bytes
}

/// The user data nft 1.0.6 writes for `typeof numgen random mod 65536 : ip daddr . tcp dport;
/// flags interval` (captured with `nft --debug=mnl`), so that `nft list` shows the endpoint map
/// as it shows nft's own: the key's numgen expression, the data's concatenation of payload
/// expressions (nft's protocol description and field numbers: ip 12/12 or ip6 13/9, tcp 8/2).
fn slot_map_userdata(family: Family) -> Vec<u8> {
    let entry = userdata_entry;
    let word = |value: u32| value.to_ne_bytes();
    let numgen = [entry(0, &word(1)), entry(1, &word(SLOT_SIZE)), entry(2, &word(0))].concat();
    let key_typeof = [entry(0, &word(23)), entry(1, &numgen)].concat();
    let payload = |description: u32, field: u32| {
        let fields = [entry(0, &word(description)), entry(1, &word(field))].concat();
        [entry(0, &word(7)), entry(1, &fields)].concat()
    };
    let address = match family {
        Family::Ip => payload(12, 12),
        Family::Ip6 => payload(13, 9),
    };
    let parts = [entry(0, &address), entry(1, &payload(8, 2))].concat();
    typeof_userdata(&key_typeof, &[entry(0, &word(13)), entry(1, &parts)].concat())
}

/// Set user data for `typeof <key> : <data>`, given the two expressions' entries: the key in host
/// byte order, the data's none, and nft's closing entry.
fn typeof_userdata(key_typeof: &[u8], data_typeof: &[u8]) -> Vec<u8> {
    let word = |value: u32| value.to_ne_bytes();
    [
        userdata_entry(0, &word(1)), // key byte order: host
        userdata_entry(1, &word(0)), // data byte order: none
        userdata_entry(3, key_typeof),
        userdata_entry(4, data_typeof),
        userdata_entry(6, &word(0)),
    ]
    .concat()
}

/// The user data nft 1.0.6 writes for `typeof numgen random mod 1 : verdict` (captured with
/// `nft --debug=mnl`): without it `nft list` shows the map as `type 0` and its keys byte-swapped.
/// Type-length-value entries (libnftnl's NFTNL_UDATA_SET_*), values in host byte order.
fn numgen_map_userdata() -> Vec<u8> {
    let entry = userdata_entry;
    let word = |value: u32| value.to_ne_bytes();
    // The key's expression: numgen (23), random, modulus 1, offset 0.
    let numgen = [entry(0, &word(1)), entry(1, &word(1)), entry(2, &word(0))].concat();
    let key_typeof = [entry(0, &word(23)), entry(1, &numgen)].concat();
    // The data's expression: a verdict (1), no data.
    typeof_userdata(&key_typeof, &[entry(0, &word(1)), entry(1, &[])].concat())
}

/// A set's batch-local id: a hash of its name (ids only need to differ within one batch).
fn set_id(name: &str) -> u32 {
    name.bytes().fold(0x811c_9dc5u32, |hash, byte| (hash ^ u32::from(byte)).wrapping_mul(0x0100_0193))
}

fn address_len(family: Family) -> u32 {
    match family {
        Family::Ip => 4,
        Family::Ip6 => 16,
    }
}

/// The elements of an element message for one key: the key and what it maps to; an interval is
/// two elements, its first value (with the data) and the value after its last, flagged as an end
/// (how the kernel's rbtree set holds intervals; nft sends the same).
fn elements(family: Family, key: &Key, value: Option<&Value>) -> Vec<ListAttribute<SetElementAttribute>> {
    let data = value.map(|value| match value {
        Value::Verdict(verdict) => {
            SetElementAttribute::Data(DataAttribute::Verdict(verdict_attributes(verdict)))
        }
        Value::Endpoint(address, port) => {
            let mut bytes = expr::octets(*address);
            let [high, low] = port.to_be_bytes();
            bytes.extend([high, low, 0, 0]);
            debug_assert_eq!(bytes.len() as u32, address_len(family) + 4);
            SetElementAttribute::Data(DataAttribute::Value(bytes))
        }
    });
    if let Key::Slots(first, last) = key {
        // Interval keys in network byte order: the rbtree compares them with memcmp (the rule
        // turns numgen's host-order number around before its lookup).
        let mut start = vec![SetElementAttribute::Key(DataAttribute::Value(first.to_be_bytes().to_vec()))];
        start.extend(data);
        let mut elements = vec![ListAttribute::Element(start)];
        // The last interval of the number space has no value after it to end on.
        if let Some(end) = last.checked_add(1) {
            elements.push(ListAttribute::Element(vec![
                SetElementAttribute::Key(DataAttribute::Value(end.to_be_bytes().to_vec())),
                SetElementAttribute::Flags(SetElementFlags::IntervalEnd),
            ]));
        }
        return elements;
    }
    let mut attributes = vec![SetElementAttribute::Key(DataAttribute::Value(key_bytes(key)))];
    attributes.extend(data);
    vec![ListAttribute::Element(attributes)]
}

/// A key's bytes as the kernel compares them: each part of a concatenation padded to 4 bytes.
fn key_bytes(key: &Key) -> Vec<u8> {
    let protocol_and_port = |protocol: crate::model::Protocol, port: u16| {
        let [high, low] = port.to_be_bytes();
        [protocol.number(), 0, 0, 0, high, low, 0, 0]
    };
    match key {
        Key::ServiceIp(address, protocol, port) => {
            let mut bytes = expr::octets(*address);
            bytes.extend(protocol_and_port(*protocol, *port));
            bytes
        }
        Key::NodePort(protocol, port) => protocol_and_port(*protocol, *port).to_vec(),
        // numgen writes its number in host byte order.
        Key::Numgen(value) => value.to_ne_bytes().to_vec(),
        Key::Slots(first, _) => first.to_be_bytes().to_vec(),
        Key::AddressPair(address) => [expr::octets(*address), expr::octets(*address)].concat(),
    }
}

fn verdict_attributes(verdict: &Verdict) -> Vec<VerdictAttribute> {
    match verdict {
        Verdict::Jump(chain) => {
            vec![VerdictAttribute::Code(VerdictCode::Jump), VerdictAttribute::Chain(chain.clone())]
        }
        Verdict::Goto(chain) => {
            vec![VerdictAttribute::Code(VerdictCode::Goto), VerdictAttribute::Chain(chain.clone())]
        }
        Verdict::Return => vec![VerdictAttribute::Code(VerdictCode::Return)],
        Verdict::Drop => vec![VerdictAttribute::Code(VerdictCode::Other(expr::NF_DROP))],
    }
}

/// The network header offset of the source or destination address.
fn address_offset(family: Family, field: Field) -> u32 {
    match (family, field) {
        (Family::Ip, Field::Source) => 12,
        (Family::Ip, Field::Destination) => 16,
        (Family::Ip6, Field::Source) => 8,
        (Family::Ip6, Field::Destination) => 24,
    }
}

fn full_prefix(address: IpAddr) -> u8 {
    if address.is_ipv4() { 32 } else { 128 }
}

/// The 32-bit register `index` places after `NFT_REG32_00`.
fn register32(index: u32) -> Register {
    Register::Other(8 + index)
}

/// A statement's expressions.
fn statement(family: Family, stmt: &Stmt) -> Vec<Expressions> {
    let address = |field| {
        expr::payload_into(
            Header::Network,
            address_offset(family, field),
            address_len(family),
            Register::Reg1,
        )
    };
    let zero = || 0u32.to_ne_bytes().to_vec();
    match stmt {
        Stmt::SaddrIs(ip) => expr::match_prefix(Field::Source, *ip, full_prefix(*ip), Operator::Equal),
        Stmt::SaddrNotIn(net) => {
            expr::match_prefix(Field::Source, net.addr(), net.prefix_len(), Operator::NotEqual)
        }
        Stmt::SaddrIn(net) => {
            expr::match_prefix(Field::Source, net.addr(), net.prefix_len(), Operator::Equal)
        }
        Stmt::DaddrNotIn(net) => {
            expr::match_prefix(Field::Destination, net.addr(), net.prefix_len(), Operator::NotEqual)
        }
        Stmt::DaddrIn(net) => {
            expr::match_prefix(Field::Destination, net.addr(), net.prefix_len(), Operator::Equal)
        }
        Stmt::SaddrInSet(set) => {
            vec![address(Field::Source), expr::lookup(set, Register::Reg1, false, false)]
        }
        Stmt::FibDaddrLocal => {
            vec![expr::fib_daddr_type(), expr::cmp(Operator::Equal, expr::RTN_LOCAL.to_ne_bytes().to_vec())]
        }
        Stmt::FibSaddrLocal => {
            vec![expr::fib_saddr_type(), expr::cmp(Operator::Equal, expr::RTN_LOCAL.to_ne_bytes().to_vec())]
        }
        Stmt::CtStateNew => vec![
            expr::ct_state(),
            expr::bitwise(expr::CT_STATE_NEW.to_ne_bytes().to_vec(), zero()),
            expr::cmp(Operator::NotEqual, zero()),
        ],
        Stmt::MarkClear(bits) => vec![
            expr::meta_into(MetaKey::Mark, Register::Reg1),
            expr::bitwise(bits.to_ne_bytes().to_vec(), zero()),
            expr::cmp(Operator::Equal, zero()),
        ],
        Stmt::MarkSet(bits) => vec![
            expr::meta_into(MetaKey::Mark, Register::Reg1),
            expr::bitwise((!bits).to_ne_bytes().to_vec(), bits.to_ne_bytes().to_vec()),
            expr::meta_set(MetaKey::Mark, Register::Reg1),
        ],
        Stmt::MarkToggle(bits) => vec![
            expr::meta_into(MetaKey::Mark, Register::Reg1),
            expr::bitwise(u32::MAX.to_ne_bytes().to_vec(), bits.to_ne_bytes().to_vec()),
            expr::meta_set(MetaKey::Mark, Register::Reg1),
        ],
        Stmt::DispatchServiceIp(map) => {
            let words = address_len(family) / 4;
            vec![
                expr::payload_into(
                    Header::Network,
                    address_offset(family, Field::Destination),
                    address_len(family),
                    register32(0),
                ),
                expr::meta_into(MetaKey::L4Proto, register32(words)),
                expr::payload_into(Header::Transport, 2, 2, register32(words + 1)),
                expr::lookup(map, register32(0), true, false),
            ]
        }
        Stmt::DispatchNodePort(map) => vec![
            expr::meta_into(MetaKey::L4Proto, register32(0)),
            expr::payload_into(Header::Transport, 2, 2, register32(1)),
            expr::lookup(map, register32(0), true, false),
        ],
        Stmt::NumgenIsZero(modulus) => {
            vec![expr::numgen_random(*modulus, 0), expr::cmp(Operator::Equal, zero())]
        }
        Stmt::Numgen { modulus, map } => {
            vec![expr::numgen_random(*modulus, 0), expr::lookup(map, Register::Reg1, true, false)]
        }
        Stmt::DnatSlot { protocol, offset, map } => {
            // The map's data lands from register 1 on: the address, then the port in the 32-bit
            // register after it (register32(1) for IPv4, register32(4) for IPv6).
            let words = address_len(family) / 4;
            vec![
                expr::meta(MetaKey::L4Proto),
                expr::cmp(Operator::Equal, vec![protocol.number()]),
                expr::numgen_random(SLOT_SIZE, *offset),
                expr::hton32(Register::Reg1),
                expr::lookup_map(map, Register::Reg1, Register::Reg1),
                expr::dnat_registers(
                    match family {
                        Family::Ip => expr::NFPROTO_IPV4,
                        Family::Ip6 => expr::NFPROTO_IPV6,
                    },
                    Register::Reg1,
                    register32(words),
                ),
            ]
        }
        Stmt::AddressPairInSet(set) => {
            let words = address_len(family) / 4;
            vec![
                expr::payload_into(
                    Header::Network,
                    address_offset(family, Field::Source),
                    address_len(family),
                    register32(0),
                ),
                expr::payload_into(
                    Header::Network,
                    address_offset(family, Field::Destination),
                    address_len(family),
                    register32(words),
                ),
                expr::lookup(set, register32(0), false, false),
            ]
        }
        Stmt::UpdateSaddr(set) => vec![address(Field::Source), expr::dynset_update(set)],
        Stmt::Dnat(protocol, ip, port) => vec![
            expr::meta(MetaKey::L4Proto),
            expr::cmp(Operator::Equal, vec![protocol.number()]),
            expr::immediate(Register::Reg1, expr::octets(*ip)),
            expr::immediate(Register::Reg2, port.to_be_bytes().to_vec()),
            expr::dnat(expr::family(*ip)),
        ],
        Stmt::Masquerade => vec![expr::masquerade_fully_random()],
        Stmt::Reject => vec![expr::reject_icmp(match family {
            Family::Ip => expr::ICMP_PORT_UNREACH,
            Family::Ip6 => expr::ICMPV6_PORT_UNREACH,
        })],
        Stmt::Verdict(verdict) => vec![match verdict {
            Verdict::Jump(chain) => expr::verdict(VerdictCode::Jump, Some(chain)),
            Verdict::Goto(chain) => expr::verdict(VerdictCode::Goto, Some(chain)),
            Verdict::Return => expr::verdict(VerdictCode::Return, None),
            Verdict::Drop => expr::verdict(VerdictCode::Other(expr::NF_DROP), None),
        }],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_of_elements_share_messages_and_everything_else_is_one_message_each() {
        let [full, _] = crate::fixtures::golden_transactions();
        let changes = encode(&full);
        let elements = full.elements();
        let others = full.ops.len() - elements;
        let element_messages = changes.len() - others;
        assert!(element_messages < elements / 2, "{element_messages} messages for {elements} elements");
        let what: Vec<&str> = changes.iter().map(|change| change.what.as_str()).collect();
        assert_eq!(
            what[..3],
            ["add table ip keel-proxy", "delete table ip keel-proxy", "add table ip keel-proxy"]
        );
        assert!(what.contains(&"add 2 elements to ip service-nodeports"), "{what:?}");
    }

    #[test]
    fn keys_are_padded_per_part_and_numgen_keys_in_host_order() {
        use crate::model::Protocol;
        let key = Key::ServiceIp("10.96.0.10".parse().unwrap(), Protocol::Udp, 53);
        assert_eq!(key_bytes(&key), [10, 96, 0, 10, 17, 0, 0, 0, 0, 53, 0, 0]);
        assert_eq!(key_bytes(&Key::NodePort(Protocol::Tcp, 30080)), [6, 0, 0, 0, 0x75, 0x80, 0, 0]);
        assert_eq!(key_bytes(&Key::Numgen(65537)), 65537u32.to_ne_bytes());
    }
}
