//! One nftables transaction as data: the operations the render emits, in order. Each operation
//! prints as one line of an `nft -f` script (the golden files are such scripts, and the bench loads
//! the same text through `nft -f`); the netlink edge encodes the same operations as messages.

use std::fmt;
use std::net::IpAddr;

use ipnet::IpNet;

use crate::model::Protocol;

/// keel-proxy's table (one per family: `ip keel-proxy` and `ip6 keel-proxy`).
pub const TABLE: &str = "keel-proxy";

/// How many `numgen` values each endpoint selection spans: selection `n` owns the values
/// `n * SLOT_SIZE ..= n * SLOT_SIZE + SLOT_SIZE - 1` of the endpoint selection map.
pub const SLOT_SIZE: u32 = 65_536;

/// The address family of a table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Family {
    /// `ip`: IPv4.
    Ip,
    /// `ip6`: IPv6.
    Ip6,
}

impl Family {
    /// The family of an address.
    pub fn of(address: IpAddr) -> Family {
        if address.is_ipv4() { Family::Ip } else { Family::Ip6 }
    }

    /// Whether `address` is of this family.
    pub fn holds(self, address: IpAddr) -> bool {
        Family::of(address) == self
    }

    fn name(self) -> &'static str {
        match self {
            Family::Ip => "ip",
            Family::Ip6 => "ip6",
        }
    }

    fn address_type(self) -> &'static str {
        match self {
            Family::Ip => "ipv4_addr",
            Family::Ip6 => "ipv6_addr",
        }
    }
}

impl fmt::Display for Family {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A netfilter hook of a base chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hook {
    /// `prerouting`.
    Prerouting,
    /// `input`.
    Input,
    /// `forward`.
    Forward,
    /// `output`.
    Output,
    /// `postrouting`.
    Postrouting,
}

/// The type of a base chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChainType {
    /// `filter`.
    Filter,
    /// `nat`.
    Nat,
}

/// What makes a chain a base chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BaseChain {
    /// Its type.
    pub kind: ChainType,
    /// Its hook.
    pub hook: Hook,
    /// Its priority (numeric: `dstnat` is refused on the output hook).
    pub priority: i32,
}

/// The key of a map or set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum KeyType {
    /// destination address . protocol . port.
    ServiceIp,
    /// protocol . port.
    NodePort,
    /// A `numgen random` value (an affinity Service's endpoint selection map).
    Numgen,
    /// An address.
    Address,
    /// Intervals of `numgen random mod 65536 offset <slot>` values, mapped to endpoints (the
    /// shared endpoint selection map).
    Slot,
    /// address . address (the hairpin set: an endpoint reaching itself).
    AddressPair,
}

/// What a map's elements map to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SetData {
    /// Nothing: a plain set.
    None,
    /// A verdict (a verdict map).
    Verdict,
    /// An endpoint, address . port (a DNAT map).
    Endpoint,
}

/// A named set or map.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SetSpec {
    /// Its key.
    pub key: KeyType,
    /// What its elements map to.
    pub data: SetData,
    /// Elements added by the data path expire after this many seconds (affinity sets).
    pub timeout: Option<u32>,
}

/// A map or set element's key.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Key {
    /// destination address . protocol . port.
    ServiceIp(IpAddr, Protocol, u16),
    /// protocol . port.
    NodePort(Protocol, u16),
    /// A `numgen` value.
    Numgen(u32),
    /// The `numgen` values `first` to `last`, both included (an interval).
    Slots(u32, u32),
    /// address . address, the same address twice.
    AddressPair(IpAddr),
}

/// What an element maps its key to.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Value {
    /// A verdict (verdict maps).
    Verdict(Verdict),
    /// An endpoint: address . port (the endpoint selection map).
    Endpoint(IpAddr, u16),
}

/// What a rule or verdict-map element does with the packet.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Verdict {
    /// `jump <chain>`.
    Jump(String),
    /// `goto <chain>`.
    Goto(String),
    /// `return`.
    Return,
    /// `drop`.
    Drop,
}

/// One statement (match or action) of a rule.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Stmt {
    /// `ip saddr <address>`.
    SaddrIs(IpAddr),
    /// `ip saddr != <prefix>`.
    SaddrNotIn(IpNet),
    /// `ip saddr <prefix>`.
    SaddrIn(IpNet),
    /// `ip daddr != <prefix>`.
    DaddrNotIn(IpNet),
    /// `ip daddr <prefix>`.
    DaddrIn(IpNet),
    /// `ip saddr @<set>`.
    SaddrInSet(String),
    /// `fib daddr type local`.
    FibDaddrLocal,
    /// `fib saddr type local`.
    FibSaddrLocal,
    /// `ct state new`.
    CtStateNew,
    /// `meta mark & <bits> == 0`.
    MarkClear(u32),
    /// `meta mark set meta mark | <bits>`.
    MarkSet(u32),
    /// `meta mark set meta mark ^ <bits>` (clears bits known to be set).
    MarkToggle(u32),
    /// `ip daddr . meta l4proto . th dport vmap @<map>`.
    DispatchServiceIp(String),
    /// `meta l4proto . th dport vmap @<map>`.
    DispatchNodePort(String),
    /// `numgen random mod <modulus> 0`: true with probability 1/modulus.
    NumgenIsZero(u32),
    /// `numgen random mod <modulus> vmap @<map>`.
    Numgen { modulus: u32, map: String },
    /// `meta l4proto <protocol> dnat ip to numgen random mod 65536 offset <offset> map @<map>`:
    /// DNAT to the endpoint whose interval of the map holds the random number.
    DnatSlot { protocol: Protocol, offset: u32, map: String },
    /// `ip saddr . ip daddr @<set>`.
    AddressPairInSet(String),
    /// `update @<set> { ip saddr }`.
    UpdateSaddr(String),
    /// `meta l4proto <protocol> dnat to <address>:<port>`.
    Dnat(Protocol, IpAddr, u16),
    /// `masquerade fully-random`.
    Masquerade,
    /// `reject` (ICMP port unreachable).
    Reject,
    /// A verdict.
    Verdict(Verdict),
}

/// A rule: its statements in order.
pub type Rule = Vec<Stmt>;

/// One operation of a transaction. Every one names its table's family.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// `add table`.
    AddTable(Family),
    /// `delete table`.
    DeleteTable(Family),
    /// `add chain`.
    AddChain { family: Family, name: String, base: Option<BaseChain> },
    /// `flush chain`.
    FlushChain { family: Family, name: String },
    /// `delete chain`.
    DeleteChain { family: Family, name: String },
    /// `add rule`.
    AddRule { family: Family, chain: String, rule: Rule },
    /// `add set` / `add map`.
    AddSet { family: Family, name: String, spec: SetSpec },
    /// `delete set` / `delete map`.
    DeleteSet { family: Family, name: String, spec: SetSpec },
    /// `add element` (with what it maps to, for maps).
    AddElement { family: Family, set: String, key: Key, value: Option<Value> },
    /// `delete element`.
    DeleteElement { family: Family, set: String, key: Key },
}

/// The operations of one atomic sync.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Transaction {
    /// In order.
    pub ops: Vec<Op>,
}

impl Transaction {
    /// Rules added.
    pub fn rules(&self) -> usize {
        self.ops.iter().filter(|op| matches!(op, Op::AddRule { .. })).count()
    }

    /// Elements added or deleted.
    pub fn elements(&self) -> usize {
        self.ops.iter().filter(|op| matches!(op, Op::AddElement { .. } | Op::DeleteElement { .. })).count()
    }
}

impl fmt::Display for Transaction {
    /// The transaction as an `nft -f` script, one operation per line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for op in &self.ops {
            writeln!(f, "{op}")?;
        }
        Ok(())
    }
}

/// A chain or set name as nft reads it. The render makes only names nft's scanner takes as one
/// identifier (letters, digits, `/`, `-`, `_`, `.`): nft 1.0.6 takes no quoted chain names.
struct Name<'a>(&'a str);

impl fmt::Display for Name<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Op::AddTable(family) => write!(f, "add table {family} {TABLE}"),
            Op::DeleteTable(family) => write!(f, "delete table {family} {TABLE}"),
            Op::AddChain { family, name, base: None } => {
                write!(f, "add chain {family} {TABLE} {}", Name(name))
            }
            Op::AddChain { family, name, base: Some(base) } => {
                let kind = match base.kind {
                    ChainType::Filter => "filter",
                    ChainType::Nat => "nat",
                };
                let hook = match base.hook {
                    Hook::Prerouting => "prerouting",
                    Hook::Input => "input",
                    Hook::Forward => "forward",
                    Hook::Output => "output",
                    Hook::Postrouting => "postrouting",
                };
                write!(
                    f,
                    "add chain {family} {TABLE} {} {{ type {kind} hook {hook} priority {}; policy accept; }}",
                    Name(name),
                    base.priority
                )
            }
            Op::FlushChain { family, name } => write!(f, "flush chain {family} {TABLE} {}", Name(name)),
            Op::DeleteChain { family, name } => write!(f, "delete chain {family} {TABLE} {}", Name(name)),
            Op::AddRule { family, chain, rule } => {
                write!(f, "add rule {family} {TABLE} {}", Name(chain))?;
                for stmt in rule {
                    write!(f, " ")?;
                    write_stmt(f, *family, stmt)?;
                }
                Ok(())
            }
            Op::AddSet { family, name, spec } => {
                let kind = if spec.data == SetData::None { "set" } else { "map" };
                write!(f, "add {kind} {family} {TABLE} {} {{ ", Name(name))?;
                let key = match spec.key {
                    KeyType::ServiceIp => {
                        format!("type {} . inet_proto . inet_service", family.address_type())
                    }
                    KeyType::NodePort => "type inet_proto . inet_service".to_owned(),
                    KeyType::Numgen => "typeof numgen random mod 1".to_owned(),
                    KeyType::Address => format!("type {}", family.address_type()),
                    KeyType::Slot => format!("typeof numgen random mod {SLOT_SIZE}"),
                    KeyType::AddressPair => {
                        format!("type {} . {}", family.address_type(), family.address_type())
                    }
                };
                write!(f, "{key}")?;
                match spec.data {
                    SetData::None => {}
                    SetData::Verdict => write!(f, " : verdict")?,
                    // typeof, as the key: nft cannot mix `typeof` and `type`.
                    SetData::Endpoint => write!(f, " : {family} daddr . tcp dport")?,
                }
                write!(f, "; ")?;
                if spec.key == KeyType::Slot {
                    write!(f, "flags interval; ")?;
                }
                if let Some(timeout) = spec.timeout {
                    write!(f, "flags dynamic,timeout; timeout {timeout}s; ")?;
                }
                write!(f, "}}")
            }
            Op::DeleteSet { family, name, spec } => {
                let kind = if spec.data == SetData::None { "set" } else { "map" };
                write!(f, "delete {kind} {family} {TABLE} {}", Name(name))
            }
            Op::AddElement { family, set, key, value } => {
                write!(f, "add element {family} {TABLE} {} {{ {}", Name(set), KeyText(key))?;
                match value {
                    None => {}
                    Some(Value::Verdict(verdict)) => write!(f, " : {}", VerdictText(verdict))?,
                    Some(Value::Endpoint(address, port)) => write!(f, " : {address} . {port}")?,
                }
                write!(f, " }}")
            }
            Op::DeleteElement { family, set, key } => {
                write!(f, "delete element {family} {TABLE} {} {{ {} }}", Name(set), KeyText(key))
            }
        }
    }
}

struct KeyText<'a>(&'a Key);

impl fmt::Display for KeyText<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Key::ServiceIp(address, protocol, port) => write!(f, "{address} . {} . {port}", protocol.name()),
            Key::NodePort(protocol, port) => write!(f, "{} . {port}", protocol.name()),
            Key::Numgen(value) => write!(f, "{value}"),
            Key::Slots(first, last) => write!(f, "{first}-{last}"),
            Key::AddressPair(address) => write!(f, "{address} . {address}"),
        }
    }
}

struct VerdictText<'a>(&'a Verdict);

impl fmt::Display for VerdictText<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Verdict::Jump(chain) => write!(f, "jump {}", Name(chain)),
            Verdict::Goto(chain) => write!(f, "goto {}", Name(chain)),
            Verdict::Return => f.write_str("return"),
            Verdict::Drop => f.write_str("drop"),
        }
    }
}

fn write_stmt(f: &mut fmt::Formatter<'_>, family: Family, stmt: &Stmt) -> fmt::Result {
    let ip = family.name();
    match stmt {
        Stmt::SaddrIs(address) => write!(f, "{ip} saddr {address}"),
        Stmt::SaddrNotIn(prefix) => write!(f, "{ip} saddr != {}", prefix.trunc()),
        Stmt::SaddrIn(prefix) => write!(f, "{ip} saddr {}", prefix.trunc()),
        Stmt::DaddrNotIn(prefix) => write!(f, "{ip} daddr != {}", prefix.trunc()),
        Stmt::DaddrIn(prefix) => write!(f, "{ip} daddr {}", prefix.trunc()),
        Stmt::SaddrInSet(set) => write!(f, "{ip} saddr @{}", Name(set)),
        Stmt::FibDaddrLocal => f.write_str("fib daddr type local"),
        Stmt::FibSaddrLocal => f.write_str("fib saddr type local"),
        Stmt::CtStateNew => f.write_str("ct state new"),
        Stmt::MarkClear(bits) => write!(f, "meta mark & {bits:#010x} == 0x00000000"),
        Stmt::MarkSet(bits) => write!(f, "meta mark set meta mark | {bits:#010x}"),
        Stmt::MarkToggle(bits) => write!(f, "meta mark set meta mark ^ {bits:#010x}"),
        Stmt::DispatchServiceIp(map) => write!(f, "{ip} daddr . meta l4proto . th dport vmap @{}", Name(map)),
        Stmt::DispatchNodePort(map) => write!(f, "meta l4proto . th dport vmap @{}", Name(map)),
        Stmt::NumgenIsZero(modulus) => write!(f, "numgen random mod {modulus} 0"),
        Stmt::Numgen { modulus, map } => write!(f, "numgen random mod {modulus} vmap @{}", Name(map)),
        Stmt::DnatSlot { protocol, offset, map } => write!(
            f,
            "meta l4proto {} dnat {ip} to numgen random mod {SLOT_SIZE} offset {offset} map @{}",
            protocol.name(),
            Name(map)
        ),
        Stmt::AddressPairInSet(set) => write!(f, "{ip} saddr . {ip} daddr @{}", Name(set)),
        Stmt::UpdateSaddr(set) => write!(f, "update @{} {{ {ip} saddr }}", Name(set)),
        Stmt::Dnat(protocol, address, port) => match address {
            IpAddr::V4(address) => write!(f, "meta l4proto {} dnat to {address}:{port}", protocol.name()),
            IpAddr::V6(address) => write!(f, "meta l4proto {} dnat to [{address}]:{port}", protocol.name()),
        },
        Stmt::Masquerade => f.write_str("masquerade fully-random"),
        Stmt::Reject => f.write_str("reject"),
        Stmt::Verdict(verdict) => write!(f, "{}", VerdictText(verdict)),
    }
}
