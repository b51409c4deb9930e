//! keel-cni's nftables table, computed apart from applying it: the table and chains, the masquerade
//! rules of a bridge, the hostPort DNAT and hairpin rules of an attachment, and the comments that tag
//! each rule with what made it (the bridge or the owning attachment), so later commands find them.
//!
//! ```text
//! table inet keel-cni {
//!   chain postrouting { type nat hook postrouting priority srcnat
//!     jump masquerade-cni0-<digest>      comment "keel-cni masquerade cni0 masquerade-cni0-<digest>"
//!     ip saddr P ip daddr P masquerade   comment "keel-cni hairpin <owner> P"   (a pod to its own hostPort)
//!   }
//!   chain masquerade-cni0-<digest> {      (one per bridge and configuration)
//!     ip saddr 10.244.1.0/24 ip daddr != 10.244.0.0/16 oifname != "cni0" masquerade
//!   }
//!   chain prerouting { type nat hook prerouting priority dstnat;  fib daddr type local jump hostports }
//!   chain output { type nat hook output priority -100;  fib daddr type local jump hostports }
//!   chain hostports {
//!     [ip daddr H] tcp dport 8080 dnat ip to P:80   comment "keel-cni hostport <owner> tcp 8080 80 [H]"
//!   }
//! }
//! ```
//!
//! The portmap plugin's nftables mode is the reference: DNAT from prerouting and output for local
//! destinations, the hostIP restriction, and masquerade of a pod reaching itself through its hostPort.

use std::net::IpAddr;

use ipnet::IpNet;
use netlink_packet_netfilter::nftables::{
    ChainAttribute, ChainMessage, Expressions, Hook, InetHookNumber, NfTablesMessage, Operator, Register,
    RuleAttribute, RuleMessage, TableAttribute, TableFlags, TableMessage,
};

use super::expr::{self, Field};
use super::netlink::{Change, DumpedRule};
use crate::spec::{Attachment, Error, PortMapping};

/// keel-cni's table (family inet: one table for IPv4 and IPv6).
pub const TABLE: &str = "keel-cni";
/// The source-NAT base chain: masquerade jumps per bridge, hairpin masquerade per attachment.
pub const POSTROUTING: &str = "postrouting";
/// The destination-NAT base chains, for traffic arriving and locally generated.
pub const PREROUTING: &str = "prerouting";
pub const OUTPUT: &str = "output";
/// The hostPort DNAT rules, one per mapping and pod address family.
pub const HOSTPORTS: &str = "hostports";
/// Every rule comment keel-cni writes starts with this word.
const TAG: &str = "keel-cni";
/// `NF_IP_PRI_NAT_SRC` (srcnat) and `NF_IP_PRI_NAT_DST` (dstnat).
const PRIORITY_SRCNAT: i32 = 100;
const PRIORITY_DSTNAT: i32 = -100;
/// nft's comment: type 0 (`NFTNL_UDATA_*_COMMENT`) in the user data's type-length-value list.
const UDATA_COMMENT: u8 = 0;
/// nft shows comments of at most 128 bytes (with the NUL).
const COMMENT_MAX: usize = 127;
/// Longer attachment names are hashed in the comments.
const OWNER_MAX: usize = 80;

// netlink-packet-core's NLM_F_* for new objects.
use netlink_packet_core::{NLM_F_APPEND, NLM_F_CREATE, NLM_F_EXCL};

/// What a keel-cni rule is for, read back from its comment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tag {
    /// The jump from postrouting to a bridge's masquerade chain.
    Masquerade { bridge: String, chain: String },
    /// A hostPort DNAT rule of an attachment; `mapping` is the mapping's description.
    HostPort { owner: String, mapping: String },
    /// The masquerade of a pod reaching itself through its hostPort.
    Hairpin { owner: String },
}

impl Tag {
    /// The comment written on the rule.
    pub fn comment(&self) -> String {
        match self {
            Tag::Masquerade { bridge, chain } => format!("{TAG} masquerade {bridge} {chain}"),
            Tag::HostPort { owner, mapping } => format!("{TAG} hostport {owner} {mapping}"),
            Tag::Hairpin { owner } => format!("{TAG} hairpin {owner}"),
        }
    }

    /// Reads a comment keel-cni wrote; None for anything else.
    pub fn parse(comment: &str) -> Option<Tag> {
        let mut words = comment.splitn(4, ' ');
        if words.next()? != TAG {
            return None;
        }
        let kind = words.next()?;
        let name = words.next()?.to_owned();
        let rest = words.next();
        match kind {
            "masquerade" => Some(Tag::Masquerade { bridge: name, chain: rest?.to_owned() }),
            "hostport" => Some(Tag::HostPort { owner: name, mapping: rest?.to_owned() }),
            "hairpin" => Some(Tag::Hairpin { owner: name }),
            _ => None,
        }
    }

    /// The tag as a dump reads it back: its comment is cut to nft's length when written (a 64-digit
    /// container ID and an IPv6 hostIP make it longer), so comparisons with dumped tags use this.
    pub fn as_stored(&self) -> Option<Tag> {
        userdata_comment(&comment_userdata(&self.comment())).and_then(Tag::parse)
    }

    /// The attachment owning the rule, for hostPort and hairpin rules.
    pub fn owner(&self) -> Option<&str> {
        match self {
            Tag::HostPort { owner, .. } | Tag::Hairpin { owner } => Some(owner),
            Tag::Masquerade { .. } => None,
        }
    }
}

/// How an attachment is named in comments: `<containerID>/<ifname>`, or a hash of both when that is
/// long or has characters a comment word cannot hold.
pub fn owner_tag(owner: &Attachment) -> String {
    let plain = format!("{}/{}", owner.container_id, owner.ifname);
    let simple = |text: &str| text.chars().all(|c| c.is_ascii_graphic() && c != '/' && c != '"');
    if plain.len() <= OWNER_MAX && simple(&owner.container_id) && simple(&owner.ifname) {
        plain
    } else {
        format!("fnv1a-{:016x}", fnv1a(&[owner.container_id.as_bytes(), b"\0", owner.ifname.as_bytes()]))
    }
}

/// The container ID of an owner tag written plain (`<containerID>/<ifname>`); `None` when hashed.
pub fn owner_container_id(tag: &str) -> Option<&str> {
    tag.split_once('/').map(|(container_id, _)| container_id)
}

/// FNV-1a 64: a stable hash (std's hashers may change between releases; these names are persistent).
fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for byte in *part {
            hash ^= u64::from(*byte);
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    hash
}

/// The protocol number of a mapping's protocol (the portmap plugin's: tcp, udp, sctp).
pub fn protocol_number(protocol: &str) -> Option<u8> {
    match protocol.to_ascii_lowercase().as_str() {
        "tcp" => Some(libc::IPPROTO_TCP as u8),
        "udp" => Some(libc::IPPROTO_UDP as u8),
        "sctp" => Some(libc::IPPROTO_SCTP as u8),
        _ => None,
    }
}

/// Fails with the spec's error (7, invalid configuration) on a mapping keel-cni cannot program.
pub fn validate_mapping(mapping: &PortMapping) -> Result<(), Error> {
    if protocol_number(&mapping.protocol).is_none() {
        return Err(Error::config(format!(
            "portMappings: unsupported protocol {:?} (tcp, udp or sctp)",
            mapping.protocol
        )));
    }
    if mapping.host_port == 0 || mapping.container_port == 0 {
        return Err(Error::config(format!(
            "portMappings: hostPort {} and containerPort {} must be 1-65535",
            mapping.host_port, mapping.container_port
        )));
    }
    Ok(())
}

/// Fails unless `bridge` is a valid interface name.
pub fn validate_bridge(bridge: &str) -> Result<(), Error> {
    if bridge.is_empty() || bridge.len() >= 16 || bridge.chars().any(|c| c == '/' || c.is_whitespace()) {
        return Err(Error::config(format!("invalid bridge name {bridge:?}")));
    }
    Ok(())
}

/// The host address a mapping is restricted to (none for an unset or unspecified hostIP).
fn host_ip(mapping: &PortMapping) -> Option<IpAddr> {
    mapping.host_ip.filter(|ip| !ip.is_unspecified())
}

/// A mapping as its comment describes it: `tcp 8080 80` or `tcp 8080 80 198.18.0.2`.
pub fn describe_mapping(mapping: &PortMapping) -> String {
    let protocol = mapping.protocol.to_ascii_lowercase();
    match host_ip(mapping) {
        Some(ip) => format!("{protocol} {} {} {ip}", mapping.host_port, mapping.container_port),
        None => format!("{protocol} {} {}", mapping.host_port, mapping.container_port),
    }
}

/// Whether a mapping applies to a pod address: the portmap plugin skips a hostIP of the other family.
pub fn mapping_applies(mapping: &PortMapping, pod_ip: IpAddr) -> bool {
    mapping.host_ip.is_none_or(|host| host.is_ipv4() == pod_ip.is_ipv4())
}

/// The name of a bridge's masquerade chain for one configuration: a new configuration gets a new
/// chain (swapped in atomically), so finding the chain by name proves the rules are the wanted ones.
pub fn masquerade_chain(bridge: &str, sources: &[IpNet], exclude: &[IpNet]) -> String {
    let config = format!("{sources:?} {exclude:?}");
    format!("masquerade-{bridge}-{:08x}", fnv1a(&[config.as_bytes()]) as u32)
}

/// The masquerade rules of a bridge: per source subnet, traffic to anything outside the excluded
/// CIDRs of its family that leaves through another interface than the bridge.
pub fn masquerade_rules(bridge: &str, sources: &[IpNet], exclude: &[IpNet]) -> Vec<Vec<Expressions>> {
    sources
        .iter()
        .map(|source| {
            let source = source.trunc();
            let mut rule = Vec::from(expr::match_family(source.addr()));
            rule.extend(expr::match_prefix(
                Field::Source,
                source.addr(),
                source.prefix_len(),
                Operator::Equal,
            ));
            for excluded in exclude.iter().filter(|e| e.addr().is_ipv4() == source.addr().is_ipv4()) {
                let excluded = excluded.trunc();
                rule.extend(expr::match_prefix(
                    Field::Destination,
                    excluded.addr(),
                    excluded.prefix_len(),
                    Operator::NotEqual,
                ));
            }
            rule.extend(expr::oifname_not(bridge));
            rule.push(expr::masquerade());
            rule
        })
        .collect()
}

/// A hostPort's DNAT rule for one pod address.
pub fn hostport_rule(pod_ip: IpAddr, mapping: &PortMapping, protocol: u8) -> Vec<Expressions> {
    let mut rule = Vec::from(expr::match_family(pod_ip));
    if let Some(host) = host_ip(mapping) {
        rule.extend(expr::match_prefix(Field::Destination, host, full_prefix(host), Operator::Equal));
    }
    rule.extend(expr::match_destination_port(protocol, mapping.host_port));
    rule.push(expr::immediate(Register::Reg1, expr::octets(pod_ip)));
    rule.push(expr::immediate(Register::Reg2, mapping.container_port.to_be_bytes().to_vec()));
    rule.push(expr::dnat(expr::family(pod_ip)));
    rule
}

/// The masquerade of a pod reaching itself through its hostPort (after DNAT, source and destination
/// are both the pod): its reply must come back through the node to be translated back.
pub fn hairpin_rule(pod_ip: IpAddr) -> Vec<Expressions> {
    let prefix = full_prefix(pod_ip);
    let mut rule = Vec::from(expr::match_family(pod_ip));
    rule.extend(expr::match_prefix(Field::Source, pod_ip, prefix, Operator::Equal));
    rule.extend(expr::match_prefix(Field::Destination, pod_ip, prefix, Operator::Equal));
    rule.push(expr::masquerade());
    rule
}

/// `fib daddr type local jump hostports`.
pub fn local_destination_jump() -> Vec<Expressions> {
    vec![
        expr::fib_daddr_type(),
        expr::cmp(Operator::Equal, expr::RTN_LOCAL.to_ne_bytes().to_vec()),
        expr::jump(HOSTPORTS),
    ]
}

fn full_prefix(ip: IpAddr) -> u8 {
    if ip.is_ipv4() { 32 } else { 128 }
}

/// nft's comment encoding of user data, so `nft list` shows keel-cni's comments.
pub fn comment_userdata(comment: &str) -> Vec<u8> {
    let mut text = comment.as_bytes().to_vec();
    text.truncate(COMMENT_MAX);
    let mut data = vec![UDATA_COMMENT, (text.len() + 1) as u8];
    data.extend(text);
    data.push(0);
    data
}

/// The comment in user data written by nft or keel-cni.
pub fn userdata_comment(data: &[u8]) -> Option<&str> {
    let mut rest = data;
    while let [kind, len, tail @ ..] = rest {
        let len = usize::from(*len);
        let value = tail.get(..len)?;
        if *kind == UDATA_COMMENT {
            let text = value.strip_suffix(&[0]).unwrap_or(value);
            return std::str::from_utf8(text).ok();
        }
        rest = &tail[len..];
    }
    None
}

/// A dumped rule's chain, handle and tag (None for rules keel-cni did not tag).
pub fn rule_tag(rule: &DumpedRule) -> Option<(String, u64, Tag)> {
    let tag = userdata_comment(&rule.userdata).and_then(Tag::parse)?;
    Some((rule.chain.clone(), rule.handle, tag))
}

// The messages of a transaction.

/// Creates the table unless it exists.
pub fn add_table() -> Change {
    let message = NfTablesMessage::NewTable(TableMessage {
        attributes: vec![
            TableAttribute::Name(TABLE.to_owned()),
            TableAttribute::Flags(TableFlags::empty()),
            TableAttribute::UserData(comment_userdata("keel-cni: pod masquerade and hostPorts")),
        ],
    });
    Change::inet(message, NLM_F_CREATE, format!("add table inet {TABLE}"))
}

/// Creates a nat base chain unless it exists.
pub fn add_nat_chain(name: &str) -> Change {
    let (hook, priority) = match name {
        PREROUTING => (InetHookNumber::PreRouting, PRIORITY_DSTNAT),
        OUTPUT => (InetHookNumber::LocalOut, PRIORITY_DSTNAT),
        _ => (InetHookNumber::PostRouting, PRIORITY_SRCNAT),
    };
    let message = NfTablesMessage::NewChain(ChainMessage {
        attributes: vec![
            ChainAttribute::Table(TABLE.to_owned()),
            ChainAttribute::Name(name.to_owned()),
            ChainAttribute::Hook(vec![Hook::Number(hook.into()), Hook::Priority(priority as u32)]),
            ChainAttribute::Policy(expr::NF_ACCEPT),
            ChainAttribute::Type("nat".to_owned()),
        ],
    });
    Change::inet(message, NLM_F_CREATE, format!("add chain {name}"))
}

/// Creates a regular chain; with `exclusive`, the whole transaction fails (EEXIST) if it exists,
/// which makes "create it with its rules" happen once even when two processes race.
pub fn add_chain(name: &str, comment: &str, exclusive: bool) -> Change {
    let message = NfTablesMessage::NewChain(ChainMessage {
        attributes: vec![
            ChainAttribute::Table(TABLE.to_owned()),
            ChainAttribute::Name(name.to_owned()),
            ChainAttribute::UserData(comment_userdata(comment)),
        ],
    });
    let flags = if exclusive { NLM_F_CREATE | NLM_F_EXCL } else { NLM_F_CREATE };
    Change::inet(message, flags, format!("add chain {name}"))
}

/// Deletes a chain and its rules (nothing may jump to it).
pub fn delete_chain(name: &str) -> Change {
    let message = NfTablesMessage::DeleteChain(ChainMessage {
        attributes: vec![ChainAttribute::Table(TABLE.to_owned()), ChainAttribute::Name(name.to_owned())],
    });
    Change::inet(message, 0, format!("delete chain {name}"))
}

/// Appends a rule to a chain.
pub fn add_rule(chain: &str, expressions: Vec<Expressions>, tag: Option<&Tag>) -> Change {
    let mut attributes = vec![
        RuleAttribute::Table(TABLE.to_owned()),
        RuleAttribute::Chain(chain.to_owned()),
        RuleAttribute::Expressions(expressions.into_iter().map(Into::into).collect()),
    ];
    let what = match tag {
        Some(tag) => {
            let comment = tag.comment();
            attributes.push(RuleAttribute::UserData(comment_userdata(&comment)));
            format!("add rule to {chain} ({comment})")
        }
        None => format!("add rule to {chain}"),
    };
    let message = NfTablesMessage::NewRule(RuleMessage { attributes });
    Change::inet(message, NLM_F_CREATE | NLM_F_APPEND, what)
}

/// Deletes a rule by handle.
pub fn delete_rule(chain: &str, handle: u64) -> Change {
    let message = NfTablesMessage::DeleteRule(RuleMessage {
        attributes: vec![
            RuleAttribute::Table(TABLE.to_owned()),
            RuleAttribute::Chain(chain.to_owned()),
            RuleAttribute::Handle(handle),
        ],
    });
    Change::inet(message, 0, format!("delete rule {handle} of {chain}"))
}

/// The table, its base chains and the hostports chain with the jumps to it. The hostports chain is
/// created exclusively: when it exists, all of this was done before (EEXIST, nothing changes). The
/// table and postrouting are left out when they exist (`have_postrouting`): updating them would make
/// the socket's close wait for the kernel to release the update's leftovers.
pub fn hostports_setup(have_postrouting: bool) -> Vec<Change> {
    let mut changes = Vec::new();
    if !have_postrouting {
        changes.extend([add_table(), add_nat_chain(POSTROUTING)]);
    }
    changes.extend([
        add_nat_chain(PREROUTING),
        add_nat_chain(OUTPUT),
        add_chain(HOSTPORTS, "hostPort DNAT, one rule per mapping and pod address family", true),
        add_rule(PREROUTING, local_destination_jump(), None),
        add_rule(OUTPUT, local_destination_jump(), None),
    ]);
    changes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attachment(id: &str, ifname: &str) -> Attachment {
        Attachment { container_id: id.to_owned(), ifname: ifname.to_owned() }
    }

    fn mapping(protocol: &str, host_port: u16, container_port: u16, host_ip: Option<&str>) -> PortMapping {
        PortMapping {
            host_port,
            container_port,
            protocol: protocol.to_owned(),
            host_ip: host_ip.map(|ip| ip.parse().unwrap()),
        }
    }

    #[test]
    fn tags_round_trip_through_comments_and_userdata() {
        let tags = [
            Tag::Masquerade { bridge: "cni0".into(), chain: "masquerade-cni0-0a0b0c0d".into() },
            Tag::HostPort { owner: "abc/eth0".into(), mapping: "tcp 8080 80 198.18.0.2".into() },
            Tag::Hairpin { owner: "abc/eth0".into() },
        ];
        for tag in tags {
            let data = comment_userdata(&tag.comment());
            assert_eq!(userdata_comment(&data).and_then(Tag::parse), Some(tag));
        }
        assert_eq!(Tag::parse("something else"), None);
        assert_eq!(userdata_comment(&[0, 200]), None, "a length past the end is not read");
    }

    #[test]
    fn userdata_is_nfts_comment_encoding() {
        // What `nft add rule ... comment "keel"` sends (nft --debug=netlink: userdata = { \x00\x05keel\x00 }).
        assert_eq!(comment_userdata("keel"), b"\x00\x05keel\x00");
    }

    #[test]
    fn owners_are_named_plainly_unless_long_or_odd() {
        assert_eq!(owner_tag(&attachment("abc123", "eth0")), "abc123/eth0");
        let long = owner_tag(&attachment(&"a".repeat(100), "eth0"));
        assert!(long.starts_with("fnv1a-") && long.len() == 22, "{long}");
        assert_ne!(owner_tag(&attachment("a b", "eth0")), "a b/eth0");
        assert_ne!(owner_tag(&attachment("a/b", "c")), owner_tag(&attachment("a", "b/c")));
    }

    #[test]
    fn mappings_are_validated_and_described() {
        assert!(validate_mapping(&mapping("tcp", 8080, 80, None)).is_ok());
        assert!(validate_mapping(&mapping("SCTP", 8080, 80, None)).is_ok());
        assert_eq!(validate_mapping(&mapping("icmp", 8080, 80, None)).unwrap_err().code, 7);
        assert_eq!(validate_mapping(&mapping("tcp", 0, 80, None)).unwrap_err().code, 7);
        assert_eq!(describe_mapping(&mapping("UDP", 53, 5353, Some("0.0.0.0"))), "udp 53 5353");
        assert_eq!(describe_mapping(&mapping("tcp", 1, 2, Some("198.18.0.2"))), "tcp 1 2 198.18.0.2");
        let v6 = mapping("tcp", 1, 2, Some("fd00::1"));
        assert!(!mapping_applies(&v6, "10.0.0.1".parse().unwrap()));
        assert!(mapping_applies(&v6, "fd00::5".parse().unwrap()));
    }

    #[test]
    fn a_new_masquerade_configuration_gets_a_new_chain() {
        let a: Vec<IpNet> = vec!["10.244.1.0/24".parse().unwrap()];
        let b: Vec<IpNet> = vec!["10.244.0.0/16".parse().unwrap()];
        assert_eq!(masquerade_chain("cni0", &a, &b), masquerade_chain("cni0", &a, &b));
        assert_ne!(masquerade_chain("cni0", &a, &b), masquerade_chain("cni0", &a, &a));
        assert!(masquerade_chain("cni0", &a, &b).starts_with("masquerade-cni0-"));
    }

    #[test]
    fn prefixes_load_whole_bytes_and_mask_the_last_partial_one() {
        // nft: ip saddr 10.244.1.0/24 → payload 3b @ network + 12, cmp eq 0a f4 01.
        let exprs = expr::match_prefix(Field::Source, "10.244.1.0".parse().unwrap(), 24, Operator::Equal);
        assert_eq!(
            exprs,
            vec![expr::payload(expr::Header::Network, 12, 3), expr::cmp(Operator::Equal, vec![10, 244, 1]),]
        );
        // ip daddr != 10.244.0.0/14 → 2 bytes, the second masked with 0xfc.
        let exprs =
            expr::match_prefix(Field::Destination, "10.247.0.0".parse().unwrap(), 14, Operator::NotEqual);
        assert_eq!(
            exprs,
            vec![
                expr::payload(expr::Header::Network, 16, 2),
                expr::mask(vec![0xff, 0xfc]),
                expr::cmp(Operator::NotEqual, vec![10, 244]),
            ]
        );
        // ip6 daddr fd00::/48 → offset 24, 6 bytes.
        let exprs = expr::match_prefix(Field::Destination, "fd00::".parse().unwrap(), 48, Operator::Equal);
        assert_eq!(exprs[0], expr::payload(expr::Header::Network, 24, 6));
        assert!(expr::match_prefix(Field::Source, "0.0.0.0".parse().unwrap(), 0, Operator::Equal).is_empty());
    }

    #[test]
    fn masquerade_rules_exclude_only_cidrs_of_their_family() {
        let sources: Vec<IpNet> = vec!["10.244.1.0/24".parse().unwrap(), "fd00:1::/64".parse().unwrap()];
        let exclude: Vec<IpNet> = vec!["10.244.0.0/16".parse().unwrap(), "fd00::/32".parse().unwrap()];
        let rules = masquerade_rules("cni0", &sources, &exclude);
        assert_eq!(rules.len(), 2);
        // nfproto (2) + saddr (2) + one exclusion (2) + oifname (2) + masq.
        assert_eq!(rules[0].len(), 9);
        assert_eq!(rules[0][7], expr::cmp(Operator::NotEqual, b"cni0\0\0\0\0\0\0\0\0\0\0\0\0".to_vec()));
        assert_eq!(rules[1][1], expr::cmp(Operator::Equal, vec![expr::NFPROTO_IPV6]));
    }

    #[test]
    fn a_dnat_rule_emits_the_bytes_nft_sends() {
        // nft --debug=netlink: [ nat dnat ip addr_min reg 1 proto_min reg 2 flags 0x2 ]
        use netlink_packet_core::Emitable;
        let nat = expr::dnat(expr::NFPROTO_IPV4);
        let mut bytes = vec![0; nat.buffer_len()];
        nat.emit(&mut bytes);
        #[rustfmt::skip]
        let golden: Vec<u8> = vec![
            8, 0, 1, 0, 0, 0, 0, 1, // NFTA_NAT_TYPE = NFT_NAT_DNAT
            8, 0, 2, 0, 0, 0, 0, 2, // NFTA_NAT_FAMILY = NFPROTO_IPV4
            8, 0, 3, 0, 0, 0, 0, 1, // NFTA_NAT_REG_ADDR_MIN = reg 1
            8, 0, 5, 0, 0, 0, 0, 2, // NFTA_NAT_REG_PROTO_MIN = reg 2
            8, 0, 7, 0, 0, 0, 0, 2, // NFTA_NAT_FLAGS = NF_NAT_RANGE_PROTO_SPECIFIED
        ];
        assert_eq!(bytes, golden);
        let fib = expr::fib_daddr_type();
        let mut bytes = vec![0; fib.buffer_len()];
        fib.emit(&mut bytes);
        #[rustfmt::skip]
        let golden: Vec<u8> = vec![
            8, 0, 1, 0, 0, 0, 0, 1, // NFTA_FIB_DREG = reg 1
            8, 0, 2, 0, 0, 0, 0, 3, // NFTA_FIB_RESULT = NFT_FIB_RESULT_ADDRTYPE
            8, 0, 3, 0, 0, 0, 0, 2, // NFTA_FIB_FLAGS = NFTA_FIB_F_DADDR
        ];
        assert_eq!(bytes, golden);
    }

    #[test]
    fn hostport_rules_restrict_to_the_host_ip_and_translate_to_the_pod() {
        let pod: IpAddr = "10.244.1.5".parse().unwrap();
        let open = hostport_rule(pod, &mapping("tcp", 8080, 80, None), 6);
        let restricted = hostport_rule(pod, &mapping("tcp", 8080, 80, Some("198.18.0.2")), 6);
        assert_eq!(restricted.len(), open.len() + 2);
        assert_eq!(restricted[3], expr::cmp(Operator::Equal, vec![198, 18, 0, 2]));
        assert!(open.contains(&expr::immediate(Register::Reg1, vec![10, 244, 1, 5])));
        assert!(open.contains(&expr::immediate(Register::Reg2, vec![0, 80])));
        assert!(open.contains(&expr::cmp(Operator::Equal, vec![0x1f, 0x90])));
    }
}
