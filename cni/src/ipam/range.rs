//! Range sets as host-local reads them (pure): defaults, validation, which set a requested address
//! belongs to, and the round-robin choice of the next free address.
//!
//! host-local's semantics, kept so a node moving from bridge+host-local to keel-cni allocates alike:
//! - a range defaults to the whole subnet minus its network address and, for IPv4, its broadcast
//!   address; the gateway defaults to the subnet's first address and is never handed out;
//! - one address is allocated from each range set (one set per family for dual-stack);
//! - the search starts after the set's last reserved address and wraps around the set's ranges, so a
//!   released address is not handed out again until the whole set has been gone through.

use std::collections::HashSet;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;

use crate::skel::CmdArgs;
use crate::spec::NetConf;
use crate::spec::config::{RangeConf, parse_address};
use crate::spec::error::{self, Error};

/// One range of a set, with host-local's defaults filled in. Start and end are inclusive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Range {
    /// The subnet (its prefix length goes with each address handed out).
    pub subnet: IpNet,
    /// `rangeStart`, default the subnet's first address.
    pub start: IpAddr,
    /// `rangeEnd`, default the subnet's last address (for IPv4 the one before the broadcast address).
    pub end: IpAddr,
    /// `gateway`, default the subnet's first address; never handed out.
    pub gateway: IpAddr,
}

/// A range set: one address is allocated from it per attachment. `index` is its position in the
/// configuration, which names host-local's `last_reserved_ip.<index>` file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RangeSet {
    /// The set's position in the configuration.
    pub index: usize,
    /// Its ranges, one family, not overlapping.
    pub ranges: Vec<Range>,
}

fn to_u128(address: IpAddr) -> u128 {
    match address {
        IpAddr::V4(v4) => u128::from(u32::from(v4)),
        IpAddr::V6(v6) => u128::from(v6),
    }
}

fn from_u128(value: u128, ipv4: bool) -> IpAddr {
    if ipv4 {
        // Values of an IPv4 range never exceed u32::MAX: they come from IPv4 addresses.
        IpAddr::V4(Ipv4Addr::from(u32::try_from(value).unwrap_or(u32::MAX)))
    } else {
        IpAddr::V6(Ipv6Addr::from(value))
    }
}

impl Range {
    /// Fills in host-local's defaults and refuses what host-local refuses (code 7).
    pub fn from_conf(conf: &RangeConf) -> Result<Range, Error> {
        let subnet = conf.subnet;
        let network = subnet.network();
        if subnet.addr() != network {
            return Err(Error::config(format!(
                "network {subnet} has host bits set: for a prefix length of {} the network address is {network}",
                subnet.prefix_len()
            )));
        }
        if subnet.max_prefix_len() - subnet.prefix_len() < 2 {
            return Err(Error::config(format!("network {subnet} is too small to allocate from")));
        }
        let ipv4 = network.is_ipv4();
        let first = from_u128(to_u128(network) + 1, ipv4);
        let last = if ipv4 { from_u128(to_u128(subnet.broadcast()) - 1, ipv4) } else { subnet.broadcast() };
        let inside = |key: &str, address: IpAddr| {
            if address.is_ipv4() == ipv4 && subnet.contains(&address) {
                Ok(address)
            } else {
                Err(Error::config(format!("{key} {address} is not in network {subnet}")))
            }
        };
        let start = conf.range_start.map(|a| inside("rangeStart", a)).transpose()?.unwrap_or(first);
        let end = conf.range_end.map(|a| inside("rangeEnd", a)).transpose()?.unwrap_or(last);
        let gateway = conf.gateway.map(|a| inside("gateway", a)).transpose()?.unwrap_or(first);
        if to_u128(start) > to_u128(end) {
            return Err(Error::config(format!("rangeStart {start} is after rangeEnd {end}")));
        }
        Ok(Range { subnet, start, end, gateway })
    }

    /// Whether `address` lies between the range's start and end (inclusive), in the same family.
    pub fn contains(&self, address: IpAddr) -> bool {
        address.is_ipv4() == self.start.is_ipv4()
            && (to_u128(self.start)..=to_u128(self.end)).contains(&to_u128(address))
    }

    /// How many addresses the range hands out: start to end, less the gateway when inside.
    fn capacity(&self) -> u128 {
        let span = (to_u128(self.end) - to_u128(self.start)).saturating_add(1);
        span - u128::from(self.contains(self.gateway))
    }

    fn overlaps(&self, other: &Range) -> bool {
        self.start.is_ipv4() == other.start.is_ipv4()
            && to_u128(self.start) <= to_u128(other.end)
            && to_u128(other.start) <= to_u128(self.end)
    }
}

impl fmt::Display for Range {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.start, self.end)
    }
}

impl RangeSet {
    /// Builds set `index`; its ranges must share a family and not overlap (code 7).
    pub fn from_conf(index: usize, confs: &[RangeConf]) -> Result<RangeSet, Error> {
        let wrap = |err: Error| Error { msg: format!("invalid range set {index}: {}", err.msg), ..err };
        if confs.is_empty() {
            return Err(wrap(Error::config("empty range set")));
        }
        let ranges = confs.iter().map(Range::from_conf).collect::<Result<Vec<_>, _>>().map_err(wrap)?;
        if ranges.iter().any(|range| range.start.is_ipv4() != ranges[0].start.is_ipv4()) {
            return Err(wrap(Error::config("mixed address families")));
        }
        for (i, first) in ranges.iter().enumerate() {
            if let Some(second) = ranges[i + 1..].iter().find(|second| first.overlaps(second)) {
                return Err(wrap(Error::config(format!("subnets {first} and {second} overlap"))));
            }
        }
        Ok(RangeSet { index, ranges })
    }

    /// Whether the set hands out IPv4 addresses.
    pub fn is_ipv4(&self) -> bool {
        self.ranges.first().is_some_and(|range| range.start.is_ipv4())
    }

    /// The range holding `address`, if any.
    pub fn range_for(&self, address: IpAddr) -> Option<&Range> {
        self.ranges.iter().find(|range| range.contains(address))
    }

    /// How many addresses the set hands out in all (saturating at u128::MAX).
    pub fn capacity(&self) -> u128 {
        self.ranges.iter().fold(0u128, |sum, range| sum.saturating_add(range.capacity()))
    }

    /// Whether some address of the set is neither a gateway nor in `taken`.
    pub fn has_free(&self, taken: &HashSet<IpAddr>) -> bool {
        let held = taken.iter().filter(|address| self.is_allocatable(**address)).count();
        self.capacity() > held as u128
    }

    fn is_allocatable(&self, address: IpAddr) -> bool {
        self.range_for(address).is_some_and(|range| range.gateway != address)
    }

    /// The next free address, round robin: after `last_reserved` when it lies in the set (host-local's
    /// `last_reserved_ip.<index>`), else from the first range's start; wrapping through the set's
    /// ranges; skipping each range's gateway and `taken`. `None` when the set is exhausted.
    ///
    /// Every address is visited at most once, and only `taken` and the gateways are skipped, so the
    /// search ends after at most `taken.len() + ranges + 1` steps however large the set is (an IPv6
    /// /64 included).
    pub fn next_free(
        &self,
        last_reserved: Option<IpAddr>,
        taken: &HashSet<IpAddr>,
    ) -> Option<(IpAddr, &Range)> {
        let ipv4 = self.is_ipv4();
        let count = self.ranges.len();
        let advance = |(index, value): (usize, u128)| {
            if value == to_u128(self.ranges[index].end) {
                let next = (index + 1) % count;
                (next, to_u128(self.ranges[next].start))
            } else {
                (index, value + 1)
            }
        };
        let mut position = match last_reserved.and_then(|last| {
            self.ranges.iter().position(|range| range.contains(last)).map(|index| (index, last))
        }) {
            Some((index, last)) => advance((index, to_u128(last))),
            None => (0, to_u128(self.ranges.first()?.start)),
        };
        let steps = self.capacity().saturating_add(count as u128).min((taken.len() + count + 1) as u128);
        for _ in 0..steps {
            let range = &self.ranges[position.0];
            let address = from_u128(position.1, ipv4);
            if address != range.gateway && !taken.contains(&address) {
                return Some((address, range));
            }
            position = advance(position);
        }
        None
    }

    /// Checks a requested address: in one of the set's ranges, not its gateway, not taken (code 7,
    /// worded as host-local words it).
    pub fn check_requested(&self, address: IpAddr, taken: &HashSet<IpAddr>) -> Result<&Range, Error> {
        let range = self
            .range_for(address)
            .ok_or_else(|| Error::config(format!("{address} not in range set {self}")))?;
        if range.gateway == address {
            return Err(Error::config(format!("requested ip {address} is subnet's gateway")));
        }
        if taken.contains(&address) {
            return Err(Error::config(format!(
                "requested IP address {address} is not available in range set {self}"
            )));
        }
        Ok(range)
    }

    /// The error for an exhausted set (code 100), naming it as host-local does.
    pub fn exhausted(&self) -> Error {
        Error::new(
            error::RANGE_EXHAUSTED,
            format!(
                "failed to allocate for range {}: no IP addresses available in range set: {self}",
                self.index
            ),
        )
    }
}

impl fmt::Display for RangeSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, range) in self.ranges.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{range}")?;
        }
        Ok(())
    }
}

/// The configuration's range sets (`NetConf::range_sets`), checked: at least one, none overlapping
/// another (code 7).
pub fn range_sets(conf: &NetConf) -> Result<Vec<RangeSet>, Error> {
    let sets = conf
        .range_sets()
        .iter()
        .enumerate()
        .map(|(index, confs)| RangeSet::from_conf(index, confs))
        .collect::<Result<Vec<_>, _>>()?;
    if sets.is_empty() {
        return Err(Error::config("no IP ranges specified"));
    }
    for (i, first) in sets.iter().enumerate() {
        for (j, second) in sets.iter().enumerate().skip(i + 1) {
            if first.ranges.iter().any(|a| second.ranges.iter().any(|b| a.overlaps(b))) {
                return Err(Error::config(format!("range set {i} overlaps with {j}")));
            }
        }
    }
    Ok(sets)
}

/// The addresses the runtime asks for, in host-local's order: `CNI_ARGS` `IP=` (comma-separated),
/// `args.cni.ips`, `runtimeConfig.ips`; duplicates once. An unreadable `IP=` is code 4.
pub fn requested_addresses(args: &CmdArgs, conf: &NetConf) -> Result<Vec<IpAddr>, Error> {
    let mut addresses = Vec::new();
    if let Some(text) = args.arg("IP") {
        for item in text.split(',').map(str::trim).filter(|item| !item.is_empty()) {
            let address = parse_address(item).ok_or_else(|| {
                Error::new(error::INVALID_ENVIRONMENT, format!("invalid IP {item:?} in CNI_ARGS"))
            })?;
            addresses.push(address);
        }
    }
    addresses.extend(&conf.args_ips);
    addresses.extend(&conf.runtime_config.ips);
    let mut seen = HashSet::new();
    addresses.retain(|address| seen.insert(*address));
    Ok(addresses)
}

/// Gives each set the first requested address it holds. An address no set holds is code 7 (as
/// host-local's "failed to allocate all requested IPs"), found before anything is written.
pub fn assign_requested(sets: &[RangeSet], requested: &[IpAddr]) -> Result<Vec<Option<IpAddr>>, Error> {
    let mut left: Vec<IpAddr> = requested.to_vec();
    let assigned = sets
        .iter()
        .map(|set| {
            let position = left.iter().position(|address| set.range_for(*address).is_some())?;
            Some(left.remove(position))
        })
        .collect();
    if left.is_empty() {
        Ok(assigned)
    } else {
        let list = left.iter().map(ToString::to_string).collect::<Vec<_>>().join(" ");
        Err(Error::config(format!("failed to allocate all requested IPs: {list}"))
            .with_details(format!("the range sets are {}", describe(sets))))
    }
}

fn describe(sets: &[RangeSet]) -> String {
    sets.iter().map(|set| format!("[{set}]")).collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    fn range(subnet: &str, start: Option<&str>, end: Option<&str>, gateway: Option<&str>) -> RangeConf {
        RangeConf {
            subnet: subnet.parse().unwrap(),
            range_start: start.map(ip),
            range_end: end.map(ip),
            gateway: gateway.map(ip),
        }
    }

    fn set(confs: &[RangeConf]) -> RangeSet {
        RangeSet::from_conf(0, confs).unwrap()
    }

    fn taken(addresses: &[&str]) -> HashSet<IpAddr> {
        addresses.iter().map(|a| ip(a)).collect()
    }

    /// Every address the set hands out, allocating one after another until it is exhausted.
    fn drain(set: &RangeSet) -> Vec<IpAddr> {
        let mut held = HashSet::new();
        let mut order = Vec::new();
        let mut last = None;
        while let Some((address, _)) = set.next_free(last, &held) {
            held.insert(address);
            order.push(address);
            last = Some(address);
        }
        order
    }

    #[test]
    fn v4_slash_30_hands_out_the_one_address_left_after_network_broadcast_and_gateway() {
        let set = set(&[range("10.0.0.0/30", None, None, None)]);
        let only = &set.ranges[0];
        assert_eq!((only.start, only.end, only.gateway), (ip("10.0.0.1"), ip("10.0.0.2"), ip("10.0.0.1")));
        assert_eq!(set.capacity(), 1);
        assert_eq!(drain(&set), vec![ip("10.0.0.2")]);
        assert!(!set.has_free(&taken(&["10.0.0.2"])));
        let err = set.exhausted();
        assert_eq!(err.code, error::RANGE_EXHAUSTED);
        assert_eq!(
            err.msg,
            "failed to allocate for range 0: no IP addresses available in range set: 10.0.0.1-10.0.0.2"
        );
        // A gateway elsewhere leaves both host addresses.
        let set =
            super::RangeSet::from_conf(0, &[range("10.0.0.0/30", None, None, Some("10.0.0.2"))]).unwrap();
        assert_eq!(drain(&set), vec![ip("10.0.0.1")]);
    }

    #[test]
    fn v4_slash_24_with_range_start_and_end_keeps_to_them_and_skips_an_inner_gateway() {
        let outside = set(&[range("10.1.2.0/24", Some("10.1.2.10"), Some("10.1.2.14"), None)]);
        assert_eq!(outside.ranges[0].gateway, ip("10.1.2.1"));
        assert_eq!(outside.capacity(), 5);
        let all: Vec<IpAddr> = (10..=14).map(|i| ip(&format!("10.1.2.{i}"))).collect();
        assert_eq!(drain(&outside), all);

        let inside = set(&[range("10.1.2.0/24", Some("10.1.2.10"), Some("10.1.2.14"), Some("10.1.2.12"))]);
        assert_eq!(inside.capacity(), 4);
        let order: Vec<IpAddr> = [10, 11, 13, 14].iter().map(|i| ip(&format!("10.1.2.{i}"))).collect();
        assert_eq!(drain(&inside), order);

        let whole = set(&[range("10.1.2.0/24", None, None, None)]);
        let handed = drain(&whole);
        assert_eq!(handed.len(), 253);
        assert_eq!((handed[0], handed[252]), (ip("10.1.2.2"), ip("10.1.2.254")));
        assert!(!handed.contains(&ip("10.1.2.0")) && !handed.contains(&ip("10.1.2.255")));
    }

    #[test]
    fn v6_slash_64_and_slash_126_keep_the_last_address_and_skip_the_gateway() {
        let small = set(&[range("fd00::/126", None, None, None)]);
        assert_eq!((small.ranges[0].start, small.ranges[0].end), (ip("fd00::1"), ip("fd00::3")));
        assert_eq!(drain(&small), vec![ip("fd00::2"), ip("fd00::3")]);

        let big = set(&[range("fd00:1:2:3::/64", None, None, None)]);
        assert_eq!(big.ranges[0].end, ip("fd00:1:2:3:ffff:ffff:ffff:ffff"));
        assert_eq!(big.capacity(), (1u128 << 64) - 2);
        assert_eq!(big.next_free(None, &HashSet::new()).map(|f| f.0), Some(ip("fd00:1:2:3::2")));
        // Wraps from the end to the start without walking 2^64 addresses.
        let last = ip("fd00:1:2:3:ffff:ffff:ffff:ffff");
        assert_eq!(
            big.next_free(Some(last), &taken(&["fd00:1:2:3::2"])).map(|f| f.0),
            Some(ip("fd00:1:2:3::3"))
        );
        assert!(big.has_free(&taken(&["fd00:1:2:3::2", "fd00:1:2:3::3"])));
    }

    #[test]
    fn the_search_starts_after_the_last_reserved_address_and_wraps_through_the_ranges() {
        let two = set(&[
            range("10.0.0.0/24", Some("10.0.0.10"), Some("10.0.0.12"), None),
            range("10.0.1.0/24", Some("10.0.1.10"), Some("10.0.1.11"), Some("10.0.1.11")),
        ]);
        let next = |last: Option<&str>, held: &[&str]| two.next_free(last.map(ip), &taken(held)).map(|f| f.0);
        assert_eq!(next(None, &[]), Some(ip("10.0.0.10")));
        // A released address is not handed out again at once: the search goes on after the last one.
        assert_eq!(next(Some("10.0.0.10"), &[]), Some(ip("10.0.0.11")));
        assert_eq!(next(Some("10.0.0.12"), &[]), Some(ip("10.0.1.10")));
        // From the second range's end (its gateway skipped) back to the first range.
        assert_eq!(next(Some("10.0.1.10"), &[]), Some(ip("10.0.0.10")));
        assert_eq!(next(Some("10.0.1.10"), &["10.0.0.10", "10.0.0.11"]), Some(ip("10.0.0.12")));
        // The last reserved address itself is the last one tried.
        assert_eq!(next(Some("10.0.0.11"), &["10.0.0.10", "10.0.0.12", "10.0.1.10"]), Some(ip("10.0.0.11")));
        assert_eq!(next(Some("10.0.0.11"), &["10.0.0.10", "10.0.0.11", "10.0.0.12", "10.0.1.10"]), None);
        // A last reserved address outside the set (the configuration changed) starts from the beginning.
        assert_eq!(next(Some("192.168.0.1"), &[]), Some(ip("10.0.0.10")));
        assert_eq!(two.to_string(), "10.0.0.10-10.0.0.12,10.0.1.10-10.0.1.11");
    }

    #[test]
    fn requested_addresses_must_be_in_a_range_free_and_not_the_gateway() {
        let set = set(&[range("10.1.2.0/24", Some("10.1.2.10"), Some("10.1.2.20"), None)]);
        assert_eq!(set.check_requested(ip("10.1.2.15"), &HashSet::new()).unwrap().start, ip("10.1.2.10"));
        let err = set.check_requested(ip("10.1.2.15"), &taken(&["10.1.2.15"])).unwrap_err();
        assert_eq!(err.code, error::INVALID_NETWORK_CONFIG);
        assert_eq!(
            err.msg,
            "requested IP address 10.1.2.15 is not available in range set 10.1.2.10-10.1.2.20"
        );
        let err = set.check_requested(ip("10.1.2.5"), &HashSet::new()).unwrap_err();
        assert_eq!(err.msg, "10.1.2.5 not in range set 10.1.2.10-10.1.2.20");
        let gateway = super::RangeSet::from_conf(0, &[range("10.1.2.0/24", None, None, None)]).unwrap();
        let err = gateway.check_requested(ip("10.1.2.1"), &HashSet::new()).unwrap_err();
        assert_eq!(err.msg, "requested ip 10.1.2.1 is subnet's gateway");
    }

    #[test]
    fn invalid_ranges_are_refused_as_host_local_refuses_them() {
        let cases = [
            (vec![range("10.0.0.1/24", None, None, None)], "host bits set"),
            (vec![range("10.0.0.0/31", None, None, None)], "too small"),
            (
                vec![range("10.0.0.0/24", Some("10.0.1.1"), None, None)],
                "rangeStart 10.0.1.1 is not in network",
            ),
            (vec![range("10.0.0.0/24", None, None, Some("fd00::1"))], "gateway fd00::1 is not in network"),
            (vec![range("10.0.0.0/24", Some("10.0.0.9"), Some("10.0.0.5"), None)], "after rangeEnd"),
            (vec![range("10.0.0.0/24", None, None, None), range("fd00::/64", None, None, None)], "mixed"),
            (vec![range("10.0.0.0/24", None, None, None), range("10.0.0.0/25", None, None, None)], "overlap"),
            (vec![], "empty range set"),
        ];
        for (confs, words) in cases {
            let err = RangeSet::from_conf(2, &confs).unwrap_err();
            assert_eq!(err.code, error::INVALID_NETWORK_CONFIG, "{confs:?}");
            assert!(err.msg.starts_with("invalid range set 2: ") && err.msg.contains(words), "{}", err.msg);
        }
    }

    fn conf(value: &serde_json::Value) -> NetConf {
        NetConf::parse(value.to_string().as_bytes()).unwrap()
    }

    #[test]
    fn dual_stack_sets_come_from_the_configuration_or_the_runtime_and_must_not_overlap() {
        let dual = conf(&json!({"cniVersion": "1.0.0", "name": "kube", "type": "keel-cni", "ipam": {
            "ranges": [[{"subnet": "10.244.1.0/24"}], [{"subnet": "fd00:244:1::/64"}]]}}));
        let sets = range_sets(&dual).unwrap();
        assert_eq!((sets.len(), sets[0].is_ipv4(), sets[1].is_ipv4(), sets[1].index), (2, true, false, 1));

        let runtime = conf(&json!({"cniVersion": "1.0.0", "name": "kube", "type": "keel-cni",
            "ipam": {"subnet": "10.244.1.0/24"},
            "runtimeConfig": {"ipRanges": [[{"subnet": "10.9.0.0/16"}]]}}));
        assert_eq!(
            range_sets(&runtime).unwrap()[0].ranges[0].subnet,
            "10.9.0.0/16".parse::<IpNet>().unwrap()
        );

        let overlapping = conf(&json!({"cniVersion": "1.0.0", "name": "kube", "type": "keel-cni", "ipam": {
            "ranges": [[{"subnet": "10.244.0.0/16"}], [{"subnet": "10.244.1.0/24"}]]}}));
        assert_eq!(range_sets(&overlapping).unwrap_err().msg, "range set 0 overlaps with 1");
        let none = conf(&json!({"cniVersion": "1.0.0", "name": "kube", "type": "keel-cni"}));
        assert_eq!(range_sets(&none).unwrap_err().code, error::INVALID_NETWORK_CONFIG);
    }

    #[test]
    fn requested_addresses_come_from_cni_args_args_and_runtime_config_and_go_to_their_set() {
        let dual = conf(&json!({"cniVersion": "1.0.0", "name": "kube", "type": "keel-cni",
            "ipam": {"ranges": [[{"subnet": "10.244.1.0/24"}], [{"subnet": "fd00::/64"}]]},
            "args": {"cni": {"ips": ["fd00::9"]}},
            "runtimeConfig": {"ips": ["10.244.1.7/24", "fd00::9"]}}));
        let args =
            CmdArgs { args: vec![("IP".into(), "10.244.1.5, 10.244.1.6".into())], ..CmdArgs::default() };
        let requested = requested_addresses(&args, &dual).unwrap();
        assert_eq!(requested, vec![ip("10.244.1.5"), ip("10.244.1.6"), ip("fd00::9"), ip("10.244.1.7")]);
        let sets = range_sets(&dual).unwrap();
        let err = assign_requested(&sets, &requested).unwrap_err();
        assert_eq!(err.code, error::INVALID_NETWORK_CONFIG);
        assert_eq!(err.msg, "failed to allocate all requested IPs: 10.244.1.6 10.244.1.7");
        assert_eq!(
            assign_requested(&sets, &[ip("fd00::9"), ip("10.244.1.5")]).unwrap(),
            vec![Some(ip("10.244.1.5")), Some(ip("fd00::9"))]
        );
        assert_eq!(assign_requested(&sets, &[]).unwrap(), vec![None, None]);
        let err = assign_requested(&sets, &[ip("192.168.0.1")]).unwrap_err();
        assert!(err.msg.ends_with("192.168.0.1"), "{}", err.msg);

        let bad = CmdArgs { args: vec![("IP".into(), "10.244.1.300".into())], ..CmdArgs::default() };
        assert_eq!(requested_addresses(&bad, &dual).unwrap_err().code, error::INVALID_ENVIRONMENT);
    }
}
