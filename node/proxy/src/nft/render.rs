//! The render: proxy state (and the changed Service ports) in, one nftables transaction out. No IO.
//!
//! ```text
//! table ip keel-proxy {
//!   map service-ips           { ipv4_addr . inet_proto . inet_service : verdict }  ClusterIP, externalIPs, LB
//!   map service-nodeports     { inet_proto . inet_service : verdict }
//!   map no-endpoint-services  { ipv4_addr . inet_proto . inet_service : verdict }  → goto reject-chain | drop
//!   map no-endpoint-nodeports { inet_proto . inet_service : verdict }
//!   map endpoints-<n>         { numgen interval : ipv4_addr . inet_service }       64 selections each
//!   set hairpin               { ipv4_addr . ipv4_addr }                            each endpoint . itself
//!   chain filter-{input,forward,output} (filter, -110): ct state new jump service-endpoints-check
//!   chain nat-{prerouting,output} (nat, -100): jump services;  nat-postrouting (nat, 100): jump masquerading
//!   chain services: ip daddr . meta l4proto . th dport vmap @service-ips
//!                   fib daddr type local ip daddr != 127.0.0.0/8 meta l4proto . th dport vmap @service-nodeports
//!                   (with --nodeport-addresses: one `ip daddr <prefix> meta l4proto . th dport vmap …` each)
//!   chain masquerading: ip saddr . ip daddr @hairpin jump mark-for-masquerade;  mark 0x4000 → masquerade
//!   chain service-<HASH>-<ns>/<name>/<proto>/<port>:
//!       ip saddr != <cluster-cidr> jump mark-for-masquerade
//!       meta l4proto tcp dnat ip to numgen random mod 65536 offset <slot × 65536> map @endpoints-<slot / 64>
//!   chain external-<HASH>-…: (node port, external and LB IPs) mark and goto service-…, or under
//!       externalTrafficPolicy Local: pods and the node itself to service-…, others to local endpoints
//!       (a selection of their own)
//!   under ClientIP affinity instead: [ip saddr @affinity-<endpoint> goto endpoint-<endpoint>]…, then
//!       numgen random mod N 0 goto endpoint-… … goto endpoint-… (more than 16 endpoints: a vmap of
//!       its own), and chain endpoint-<HASH>-…__<ip>/<port>: update @affinity-… { ip saddr }; dnat to …
//! }
//! ```
//!
//! Dispatch is data: per Service port only elements of the shared maps and its own chains, no
//! anonymous set (an anonymous vmap per service made loads quadratic through nft: MACHINE.md).
//!
//! **Endpoints are data too.** Each endpoint selection (a Service port's cluster endpoints; its
//! local ones under externalTrafficPolicy Local) owns a slot: 65536 consecutive `numgen` values
//! (`offset` = slot × 65536), split among its endpoints in intervals as equal as integers allow,
//! each mapped to the endpoint's address . port. A Service's rules name only its slot, so an
//! endpoint added, replaced or removed changes map elements and no rule. That matters because of
//! how the kernel validates a transaction: any new rule with a verdict, nat, lookup, fib or meta
//! expression (nearly all of them) makes the commit walk the whole table from its base chains
//! (nft_table_validate). With a chain per endpoint, as kube-proxy has, that walk was ≈90% of an
//! endpoint change at 10k Services (23 ms); with elements alone there is no walk (≈0.7 ms). The
//! slots are spread over maps of 64: the kernel checks each element added to a map against every
//! rule that looks it up, and one map for all made the full sync 4.4 s. Hairpin traffic (a pod
//! reaching itself) is found in postrouting by the `hairpin` set instead of a rule per endpoint.
//!
//! Under ClientIP affinity the selection must remember a client per endpoint, so those Services
//! keep kube-proxy's endpoint chains and affinity sets (their endpoint changes rewrite rules).
//!
//! A [`Renderer`] keeps a mirror of what each Service port put in the kernel, so a partial sync
//! diffs old against new and touches only the chains, sets and elements that differ; and the slots
//! it gave out, so a Service keeps its slot for as long as it exists.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use ipnet::IpNet;

use super::transaction::{
    BaseChain, ChainType, Family, Hook, Key, KeyType, Op, Rule, SLOT_SIZE, SetData, SetSpec, Stmt,
    Transaction, Value, Verdict,
};
use crate::model::{self, Endpoint, ServicePortInfo, ServicePortName};
use crate::tracker::ProxyState;

/// The ClusterIP, externalIP and LoadBalancer IP dispatch map.
pub const SERVICE_IPS: &str = "service-ips";
/// The node port dispatch map.
pub const SERVICE_NODEPORTS: &str = "service-nodeports";
/// Addresses of Service ports without endpoints.
pub const NO_ENDPOINT_SERVICES: &str = "no-endpoint-services";
/// Node ports without endpoints.
pub const NO_ENDPOINT_NODEPORTS: &str = "no-endpoint-nodeports";
/// The endpoint selection maps' names, `endpoints-<n>`: intervals of `numgen` values → endpoint
/// address . port, [`SLOTS_PER_MAP`] selections each.
pub const ENDPOINTS: &str = "endpoints";
/// Selections per endpoint map. The kernel checks each element added to a map against every rule
/// looking it up (nft_add_set_elem walks the set's bindings): one map for 10k Services made a full
/// sync 4.4 s and an endpoint change 3.8 ms, nearly all in that walk.
pub const SLOTS_PER_MAP: u32 = 64;
/// The hairpin set: endpoint . endpoint, for each endpoint address of any Service.
pub const HAIRPIN: &str = "hairpin";
/// The chain rejecting traffic to Service ports without endpoints.
pub const REJECT_CHAIN: &str = "reject-chain";
/// The chain marking a connection for masquerade.
pub const MARK_FOR_MASQUERADE: &str = "mark-for-masquerade";
const SERVICES: &str = "services";
const MASQUERADING: &str = "masquerading";
const ENDPOINTS_CHECK: &str = "service-endpoints-check";
/// Up to this many endpoints are chosen among by rules (`numgen random mod k 0 goto …`), more
/// through a map of the chain's own.
pub const RULE_DISPATCH_MAX: usize = 16;
/// kube-proxy's masquerade bit.
pub const MASQUERADE_MARK: u32 = 0x4000;

/// What the render needs besides the state.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RenderConfig {
    /// `--cluster-cidr`: traffic to a ClusterIP from outside these is masqueraded (one per family;
    /// none: only hairpin and external traffic is).
    pub cluster_cidrs: Vec<IpNet>,
    /// `--nodeport-addresses`: node ports answer on these prefixes (empty: every local address).
    pub nodeport_addresses: Vec<IpNet>,
}

/// Everything one Service port puts in the kernel.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct ServiceRules {
    chains: BTreeMap<String, Vec<Rule>>,
    sets: BTreeMap<String, SetSpec>,
    /// (map, key) → value, in the shared maps.
    elements: BTreeMap<(String, Key), Value>,
    /// Its endpoint addresses (the hairpin set holds the union over all Service ports).
    hairpin: BTreeSet<IpAddr>,
    /// The endpoint selections it owns.
    slots: BTreeSet<Selection>,
}

impl ServiceRules {
    fn is_empty(&self) -> bool {
        self.chains.is_empty() && self.elements.is_empty()
    }
}

/// One endpoint selection of a Service port: among its cluster endpoints, or among the endpoints
/// external traffic may use when those differ (externalTrafficPolicy Local).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct Selection {
    slot: u32,
}

/// The render of one family, with its mirror of the kernel's state.
#[derive(Debug)]
pub struct Renderer {
    family: Family,
    config: RenderConfig,
    mirror: BTreeMap<ServicePortName, ServiceRules>,
    /// Which selection slot each (Service port, external) owns, for as long as it exists: the slot
    /// is in the Service's rules, which must not change when only its endpoints do.
    slots: BTreeMap<(ServicePortName, bool), u32>,
    /// Slots given back, reused first (the lowest: selections stay packed into few maps).
    free_slots: BTreeSet<u32>,
    /// Slots taken per endpoint map (a map exists while it has one).
    map_slots: BTreeMap<u32, usize>,
    /// How many Service ports have each endpoint address (the hairpin set's elements).
    hairpin: BTreeMap<IpAddr, usize>,
}

impl Renderer {
    /// A renderer for `family` that has written nothing yet.
    pub fn new(family: Family, config: RenderConfig) -> Renderer {
        Renderer {
            family,
            config,
            mirror: BTreeMap::new(),
            slots: BTreeMap::new(),
            free_slots: BTreeSet::new(),
            map_slots: BTreeMap::new(),
            hairpin: BTreeMap::new(),
        }
    }

    /// Forgets the mirror: the next render must be full (after a failed apply).
    pub fn reset(&mut self) {
        self.mirror.clear();
        self.slots.clear();
        self.free_slots.clear();
        self.map_slots.clear();
        self.hairpin.clear();
    }

    /// The selection slot of (`name`, `external`), allocated when it has none. `None` when all
    /// 65536 slots of the family are taken.
    fn slot(&mut self, name: &ServicePortName, external: bool) -> Option<u32> {
        let key = (name.clone(), external);
        if let Some(slot) = self.slots.get(&key) {
            return Some(*slot);
        }
        let slot = match self.free_slots.pop_first() {
            Some(slot) => slot,
            None => u32::try_from(self.slots.len()).ok().filter(|next| *next < u32::MAX / SLOT_SIZE + 1)?,
        };
        self.slots.insert(key, slot);
        *self.map_slots.entry(slot / SLOTS_PER_MAP).or_default() += 1;
        Some(slot)
    }

    /// Gives back the slots of `name` that `rules` no longer use.
    fn release_slots(&mut self, name: &ServicePortName, rules: Option<&ServiceRules>) {
        for external in [false, true] {
            let key = (name.clone(), external);
            if let Some(slot) = self.slots.get(&key).copied()
                && !rules.is_some_and(|rules| rules.slots.contains(&Selection { slot }))
            {
                self.slots.remove(&key);
                self.free_slots.insert(slot);
                if let Some(count) = self.map_slots.get_mut(&(slot / SLOTS_PER_MAP)) {
                    *count -= 1;
                    if *count == 0 {
                        self.map_slots.remove(&(slot / SLOTS_PER_MAP));
                    }
                }
            }
        }
    }

    /// The endpoint maps to add and delete: those that exist now and not `before`, and the other
    /// way round. They go in the set phases, so a map is there before the rules and elements
    /// naming it, and goes after them.
    fn endpoint_map_changes(&self, before: &BTreeSet<u32>, phases: &mut Phases) {
        let family = self.family;
        let spec = SetSpec { key: KeyType::Slot, data: SetData::Endpoint, timeout: None };
        for map in self.map_slots.keys().filter(|map| !before.contains(map)) {
            let name = format!("{ENDPOINTS}-{map}");
            phases.add_sets.push(Op::AddSet { family, name, spec: spec.clone() });
        }
        for map in before.iter().filter(|map| !self.map_slots.contains_key(map)) {
            let name = format!("{ENDPOINTS}-{map}");
            phases.delete_sets.push(Op::DeleteSet { family, name, spec: spec.clone() });
        }
    }

    /// Counts `old`'s endpoint addresses out of the hairpin set and `new`'s in; records the
    /// addresses whose count went to or from zero in `touched`.
    fn count_hairpin(
        &mut self,
        old: Option<&ServiceRules>,
        new: Option<&ServiceRules>,
        touched: &mut BTreeMap<IpAddr, bool>,
    ) {
        for address in old.iter().flat_map(|rules| &rules.hairpin) {
            let count = self.hairpin.entry(*address).or_default();
            touched.entry(*address).or_insert(*count > 0);
            *count = count.saturating_sub(1);
        }
        for address in new.iter().flat_map(|rules| &rules.hairpin) {
            let count = self.hairpin.entry(*address).or_default();
            touched.entry(*address).or_insert(*count > 0);
            *count += 1;
        }
    }

    /// The hairpin set's element changes for the addresses in `touched` (address → whether it
    /// was in the set before).
    fn hairpin_changes(&mut self, touched: BTreeMap<IpAddr, bool>, phases: &mut Phases) {
        let family = self.family;
        for (address, before) in touched {
            let now = self.hairpin.get(&address).is_some_and(|count| *count > 0);
            if !now {
                self.hairpin.remove(&address);
            }
            let key = Key::AddressPair(address);
            match (before, now) {
                (false, true) => phases.add_elements.push(Op::AddElement {
                    family,
                    set: HAIRPIN.to_owned(),
                    key,
                    value: None,
                }),
                (true, false) => {
                    phases.delete_elements.push(Op::DeleteElement { family, set: HAIRPIN.to_owned(), key });
                }
                _ => {}
            }
        }
    }

    /// The whole table, replacing whatever is there (table deleted and made again in the same
    /// transaction).
    pub fn full(&mut self, state: &ProxyState, transaction: &mut Transaction) {
        self.reset();
        let family = self.family;
        transaction.ops.push(Op::AddTable(family));
        transaction.ops.push(Op::DeleteTable(family));
        transaction.ops.push(Op::AddTable(family));
        transaction.ops.extend(self.base());
        let mut phases = Phases::default();
        let mut touched = BTreeMap::new();
        for (name, service) in &state.services {
            let rules = self.service(name, service, state.endpoints_of(name));
            diff(family, None, Some(&rules), &mut phases);
            self.count_hairpin(None, Some(&rules), &mut touched);
            self.release_slots(name, Some(&rules));
            if !rules.is_empty() {
                self.mirror.insert(name.clone(), rules);
            }
        }
        self.hairpin_changes(touched, &mut phases);
        self.endpoint_map_changes(&BTreeSet::new(), &mut phases);
        phases.append_to(transaction);
    }

    /// The changed Service ports only: their chains, sets and elements, diffed against the mirror.
    pub fn partial(
        &mut self,
        state: &ProxyState,
        changed: &BTreeSet<ServicePortName>,
        transaction: &mut Transaction,
    ) {
        let family = self.family;
        let mut phases = Phases::default();
        let mut touched = BTreeMap::new();
        let maps_before: BTreeSet<u32> = self.map_slots.keys().copied().collect();
        for name in changed {
            let old = self.mirror.remove(name);
            let new =
                state.services.get(name).map(|service| self.service(name, service, state.endpoints_of(name)));
            diff(family, old.as_ref(), new.as_ref(), &mut phases);
            self.count_hairpin(old.as_ref(), new.as_ref(), &mut touched);
            self.release_slots(name, new.as_ref());
            if let Some(new) = new.filter(|new| !new.is_empty()) {
                self.mirror.insert(name.clone(), new);
            }
        }
        self.hairpin_changes(touched, &mut phases);
        self.endpoint_map_changes(&maps_before, &mut phases);
        phases.append_to(transaction);
    }

    /// The table's maps, sets and fixed chains.
    fn base(&self) -> Vec<Op> {
        let family = self.family;
        let map = |name: &str, key, data| Op::AddSet {
            family,
            name: name.to_owned(),
            spec: SetSpec { key, data, timeout: None },
        };
        let mut ops = vec![
            map(SERVICE_IPS, KeyType::ServiceIp, SetData::Verdict),
            map(SERVICE_NODEPORTS, KeyType::NodePort, SetData::Verdict),
            map(NO_ENDPOINT_SERVICES, KeyType::ServiceIp, SetData::Verdict),
            map(NO_ENDPOINT_NODEPORTS, KeyType::NodePort, SetData::Verdict),
            map(HAIRPIN, KeyType::AddressPair, SetData::None),
        ];
        let chain =
            |name: &str, base: Option<BaseChain>| Op::AddChain { family, name: name.to_owned(), base };
        let rule = |chain: &str, rule: Rule| Op::AddRule { family, chain: chain.to_owned(), rule };
        let jump = |chain: &str| Stmt::Verdict(Verdict::Jump(chain.to_owned()));
        let base = |kind, hook, priority| Some(BaseChain { kind, hook, priority });
        ops.push(chain(REJECT_CHAIN, None));
        ops.push(rule(REJECT_CHAIN, vec![Stmt::Reject]));
        ops.push(chain(ENDPOINTS_CHECK, None));
        ops.push(rule(ENDPOINTS_CHECK, vec![Stmt::DispatchServiceIp(NO_ENDPOINT_SERVICES.into())]));
        for matching in self.nodeport_matches(&Stmt::DispatchNodePort(NO_ENDPOINT_NODEPORTS.into())) {
            ops.push(rule(ENDPOINTS_CHECK, matching));
        }
        for (name, hook) in [
            ("filter-input", Hook::Input),
            ("filter-forward", Hook::Forward),
            ("filter-output", Hook::Output),
        ] {
            ops.push(chain(name, base(ChainType::Filter, hook, -110)));
            ops.push(rule(name, vec![Stmt::CtStateNew, jump(ENDPOINTS_CHECK)]));
        }
        ops.push(chain(MARK_FOR_MASQUERADE, None));
        ops.push(rule(MARK_FOR_MASQUERADE, vec![Stmt::MarkSet(MASQUERADE_MARK)]));
        ops.push(chain(MASQUERADING, None));
        // Hairpin: a pod DNATed back to itself is masqueraded, so its answer goes back through the
        // node (from itself to itself unmasqueraded, the reply would skip the un-DNAT).
        ops.push(rule(MASQUERADING, vec![Stmt::AddressPairInSet(HAIRPIN.into()), jump(MARK_FOR_MASQUERADE)]));
        ops.push(rule(MASQUERADING, vec![Stmt::MarkClear(MASQUERADE_MARK), Stmt::Verdict(Verdict::Return)]));
        ops.push(rule(MASQUERADING, vec![Stmt::MarkToggle(MASQUERADE_MARK), Stmt::Masquerade]));
        ops.push(chain(SERVICES, None));
        ops.push(rule(SERVICES, vec![Stmt::DispatchServiceIp(SERVICE_IPS.into())]));
        for matching in self.nodeport_matches(&Stmt::DispatchNodePort(SERVICE_NODEPORTS.into())) {
            ops.push(rule(SERVICES, matching));
        }
        ops.push(chain("nat-prerouting", base(ChainType::Nat, Hook::Prerouting, -100)));
        ops.push(rule("nat-prerouting", vec![jump(SERVICES)]));
        ops.push(chain("nat-output", base(ChainType::Nat, Hook::Output, -100)));
        ops.push(rule("nat-output", vec![jump(SERVICES)]));
        ops.push(chain("nat-postrouting", base(ChainType::Nat, Hook::Postrouting, 100)));
        ops.push(rule("nat-postrouting", vec![jump(MASQUERADING)]));
        ops
    }

    /// The rules matching traffic to a node port: one per `--nodeport-addresses` prefix of the
    /// family, or one for any local address but loopback (loopback traffic cannot be DNATed away
    /// without route_localnet). Rules, not an interval set: a few prefixes need no set machinery.
    fn nodeport_matches(&self, dispatch: &Stmt) -> Vec<Rule> {
        let prefixes: Vec<IpNet> = self
            .config
            .nodeport_addresses
            .iter()
            .filter(|net| self.family.holds(net.addr()))
            .copied()
            .collect();
        if prefixes.is_empty() {
            let loopback: IpNet = match self.family {
                Family::Ip => IpNet::V4(ipnet::Ipv4Net::new_assert(std::net::Ipv4Addr::LOCALHOST, 8)),
                Family::Ip6 => IpNet::V6(ipnet::Ipv6Net::new_assert(std::net::Ipv6Addr::LOCALHOST, 128)),
            };
            vec![vec![Stmt::FibDaddrLocal, Stmt::DaddrNotIn(loopback), dispatch.clone()]]
        } else {
            prefixes.into_iter().map(|prefix| vec![Stmt::DaddrIn(prefix.trunc()), dispatch.clone()]).collect()
        }
    }

    fn cluster_cidr(&self) -> Option<IpNet> {
        self.config.cluster_cidrs.iter().find(|net| self.family.holds(net.addr())).copied()
    }

    /// What one Service port needs in this family.
    fn service(
        &mut self,
        name: &ServicePortName,
        service: &ServicePortInfo,
        endpoints: &BTreeSet<Endpoint>,
    ) -> ServiceRules {
        let family = self.family;
        let mut rules = ServiceRules::default();
        let cluster_ips: Vec<IpAddr> =
            service.cluster_ips.iter().copied().filter(|ip| family.holds(*ip)).collect();
        if cluster_ips.is_empty() {
            return rules;
        }
        let endpoints: BTreeSet<Endpoint> =
            endpoints.iter().filter(|e| family.holds(e.ip)).cloned().collect();
        let cluster = model::cluster_endpoints(service, &endpoints);
        let external =
            if service.has_external() { model::external_endpoints(service, &endpoints) } else { Vec::new() };
        let base = chain_base(name);
        let service_chain = format!("service-{base}");
        let external_chain = format!("external-{base}");
        let protocol = service.protocol;
        let reject = Verdict::Goto(REJECT_CHAIN.to_owned());

        // Cluster traffic.
        for ip in &cluster_ips {
            let key = Key::ServiceIp(*ip, protocol, service.port);
            if cluster.is_empty() {
                rules.elements.insert((NO_ENDPOINT_SERVICES.into(), key), Value::Verdict(reject.clone()));
            } else {
                rules
                    .elements
                    .insert((SERVICE_IPS.into(), key), Value::Verdict(Verdict::Goto(service_chain.clone())));
            }
        }
        if !cluster.is_empty() {
            let mut chain = Vec::new();
            if let Some(cidr) = self.cluster_cidr() {
                chain.push(vec![Stmt::SaddrNotIn(cidr), jump(MARK_FOR_MASQUERADE)]);
            }
            self.dispatch(&service_chain, &cluster, (name, false), service, &mut chain, &mut rules);
            rules.chains.insert(service_chain.clone(), chain);
        }

        // External traffic: node port, external IPs, LoadBalancer ingress IPs.
        if service.has_external() {
            let addresses: Vec<IpAddr> = service
                .external_ips
                .iter()
                .chain(&service.load_balancer_ips)
                .copied()
                .filter(|ip| family.holds(*ip))
                .collect();
            let mut keys: Vec<(&str, &str, Key)> = addresses
                .iter()
                .map(|ip| (SERVICE_IPS, NO_ENDPOINT_SERVICES, Key::ServiceIp(*ip, protocol, service.port)))
                .collect();
            if let Some(node_port) = service.node_port {
                keys.push((SERVICE_NODEPORTS, NO_ENDPOINT_NODEPORTS, Key::NodePort(protocol, node_port)));
            }
            if external.is_empty() {
                // Nowhere to send it: refused when the Service has no endpoints at all, dropped
                // when it has some but none on this node (externalTrafficPolicy Local).
                let verdict =
                    if model::usable(&endpoints, false).is_empty() { reject } else { Verdict::Drop };
                for (_, no_endpoint_map, key) in keys {
                    rules.elements.insert((no_endpoint_map.into(), key), Value::Verdict(verdict.clone()));
                }
            } else {
                let mut chain = Vec::new();
                if service.external_policy_local {
                    // Pods and the node itself reach the Service as cluster traffic would.
                    if !cluster.is_empty() {
                        if let Some(cidr) = self.cluster_cidr() {
                            chain.push(vec![Stmt::SaddrIn(cidr), goto(&service_chain)]);
                        }
                        chain.push(vec![Stmt::FibSaddrLocal, jump(MARK_FOR_MASQUERADE)]);
                        chain.push(vec![Stmt::FibSaddrLocal, goto(&service_chain)]);
                    }
                    self.dispatch(&external_chain, &external, (name, true), service, &mut chain, &mut rules);
                } else {
                    chain.push(vec![jump(MARK_FOR_MASQUERADE)]);
                    if service.internal_policy_local || cluster.is_empty() {
                        self.dispatch(
                            &external_chain,
                            &external,
                            (name, true),
                            service,
                            &mut chain,
                            &mut rules,
                        );
                    } else {
                        chain.push(vec![goto(&service_chain)]);
                    }
                }
                rules.chains.insert(external_chain.clone(), chain);
                for (map, _, key) in keys {
                    rules
                        .elements
                        .insert((map.into(), key), Value::Verdict(Verdict::Goto(external_chain.clone())));
                }
            }
        }
        rules
    }

    /// Appends to `chain` the selection among `endpoints` and adds what it needs to `rules`:
    /// intervals of the shared endpoint map, or under ClientIP affinity endpoint chains and sets.
    fn dispatch(
        &mut self,
        chain_name: &str,
        endpoints: &[Endpoint],
        (name, external): (&ServicePortName, bool),
        service: &ServicePortInfo,
        chain: &mut Vec<Rule>,
        rules: &mut ServiceRules,
    ) {
        rules.hairpin.extend(endpoints.iter().map(|endpoint| endpoint.ip));
        if service.affinity_seconds.is_some() {
            self.dispatch_by_rules(chain_name, endpoints, name, service, chain, rules);
            return;
        }
        let Some(slot) = self.slot(name, external) else {
            // All slots taken (65536 selections in one family): refused as without endpoints.
            chain.push(vec![goto(REJECT_CHAIN)]);
            return;
        };
        rules.slots.insert(Selection { slot });
        let offset = slot * SLOT_SIZE;
        let map = endpoint_map(slot);
        chain.push(vec![Stmt::DnatSlot { protocol: service.protocol, offset, map: map.clone() }]);
        for (endpoint, (first, last)) in endpoints.iter().zip(slot_ranges(endpoints.len())) {
            rules.elements.insert(
                (map.clone(), Key::Slots(offset + first, offset + last)),
                Value::Endpoint(endpoint.ip, endpoint.port),
            );
        }
    }

    /// kube-proxy's selection under ClientIP affinity: an endpoint chain per endpoint records the
    /// client in the endpoint's affinity set, and the Service's chain sends a client found in one
    /// of them back to that endpoint. Its rules name the endpoints: an endpoint change rewrites
    /// them (the kernel then validates the table), which Services without affinity never do.
    fn dispatch_by_rules(
        &mut self,
        chain_name: &str,
        endpoints: &[Endpoint],
        name: &ServicePortName,
        service: &ServicePortInfo,
        chain: &mut Vec<Rule>,
        rules: &mut ServiceRules,
    ) {
        let mut targets = Vec::with_capacity(endpoints.len());
        for endpoint in endpoints {
            // nft's identifiers hold no colon: an IPv6 address's colons are written as dashes.
            let address = endpoint.ip.to_string().replace(':', "-");
            let base = format!("{}__{address}/{}", chain_base(name), endpoint.port);
            let endpoint_chain = format!("endpoint-{base}");
            let affinity_set = format!("affinity-{base}");
            if !rules.chains.contains_key(&endpoint_chain) {
                let mut rules_of_endpoint = Vec::new();
                if let Some(timeout) = service.affinity_seconds {
                    rules.sets.insert(
                        affinity_set.clone(),
                        SetSpec { key: KeyType::Address, data: SetData::None, timeout: Some(timeout) },
                    );
                    rules_of_endpoint.push(vec![Stmt::UpdateSaddr(affinity_set.clone())]);
                }
                rules_of_endpoint.push(vec![Stmt::Dnat(service.protocol, endpoint.ip, endpoint.port)]);
                rules.chains.insert(endpoint_chain.clone(), rules_of_endpoint);
            }
            chain.push(vec![Stmt::SaddrInSet(affinity_set), goto(&endpoint_chain)]);
            targets.push(endpoint_chain);
        }
        match targets.as_slice() {
            [] => {}
            [only] => chain.push(vec![goto(only)]),
            _ if targets.len() <= RULE_DISPATCH_MAX => {
                // Endpoint i of N is taken with probability 1/(N-i) when none before it was:
                // 1/N each, as iptables' statistic rules, without a set to look up.
                let count = targets.len();
                for (index, target) in targets.iter().enumerate() {
                    let left = (count - index) as u32;
                    if left > 1 {
                        chain.push(vec![Stmt::NumgenIsZero(left), goto(target)]);
                    } else {
                        chain.push(vec![goto(target)]);
                    }
                }
            }
            _ => {
                let map = format!("{chain_name}__endpoints");
                rules.sets.insert(
                    map.clone(),
                    SetSpec { key: KeyType::Numgen, data: SetData::Verdict, timeout: None },
                );
                chain.push(vec![Stmt::Numgen { modulus: targets.len() as u32, map: map.clone() }]);
                for (index, target) in targets.iter().enumerate() {
                    rules.elements.insert(
                        (map.clone(), Key::Numgen(index as u32)),
                        Value::Verdict(Verdict::Goto(target.clone())),
                    );
                }
            }
        }
    }
}

/// The intervals of `0..SLOT_SIZE` that `count` endpoints own, in order: as equal as integers
/// allow (sizes differ by at most one, so each endpoint is chosen with probability within
/// 1/65536 of 1/count).
fn slot_ranges(count: usize) -> impl Iterator<Item = (u32, u32)> {
    let count = u32::try_from(count).unwrap_or(SLOT_SIZE).clamp(1, SLOT_SIZE);
    let (size, larger) = (SLOT_SIZE / count, SLOT_SIZE % count);
    (0..count).scan(0u32, move |start, index| {
        let first = *start;
        let length = size + u32::from(index < larger);
        *start += length;
        Some((first, first + length - 1))
    })
}

/// The endpoint map holding selection `slot`.
pub fn endpoint_map(slot: u32) -> String {
    format!("{ENDPOINTS}-{}", slot / SLOTS_PER_MAP)
}

fn jump(chain: &str) -> Stmt {
    Stmt::Verdict(Verdict::Jump(chain.to_owned()))
}

fn goto(chain: &str) -> Stmt {
    Stmt::Verdict(Verdict::Goto(chain.to_owned()))
}

/// `<HASH>-<ns>/<name>/<proto>/<port>`: the stable name part of a Service port's chains, as
/// kube-proxy forms it: 8 base32 characters of a hash of the key, then the key for readers.
pub fn chain_base(name: &ServicePortName) -> String {
    let key = name.to_string();
    format!("{}-{key}", hash8(&key))
}

/// 8 characters of RFC 4648 base32 of FNV-1a 64 (std's hashers may change between releases; these
/// names must not).
fn hash8(text: &str) -> String {
    const ALPHABET: &[u8; 32] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in text.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    (0..8).map(|i| char::from(ALPHABET[((hash >> (59 - 5 * i)) & 31) as usize])).collect()
}

/// The operations of a transaction, by phase, so every reference exists when it is made and is
/// gone before what it names is deleted.
#[derive(Debug, Default)]
struct Phases {
    delete_elements: Vec<Op>,
    flush_chains: Vec<Op>,
    delete_chains: Vec<Op>,
    delete_sets: Vec<Op>,
    add_sets: Vec<Op>,
    add_chains: Vec<Op>,
    add_rules: Vec<Op>,
    add_elements: Vec<Op>,
}

impl Phases {
    fn append_to(self, transaction: &mut Transaction) {
        let Phases {
            mut delete_elements,
            flush_chains,
            delete_chains,
            delete_sets,
            add_sets,
            add_chains,
            add_rules,
            mut add_elements,
        } = self;
        // Grouped by set (stable: each set's elements keep their order), so the netlink edge sends
        // a run of one set's elements as one message.
        let set_of = |op: &Op| match op {
            Op::AddElement { set, .. } | Op::DeleteElement { set, .. } => set.clone(),
            _ => String::new(),
        };
        delete_elements.sort_by_cached_key(set_of);
        add_elements.sort_by_cached_key(set_of);
        transaction.ops.extend(
            // A map goes before the chains its elements name (they hold references to them).
            [
                delete_elements,
                flush_chains,
                delete_sets,
                delete_chains,
                add_sets,
                add_chains,
                add_rules,
                add_elements,
            ]
            .into_iter()
            .flatten(),
        );
    }
}

/// The operations turning `old` into `new` (either may be absent).
fn diff(family: Family, old: Option<&ServiceRules>, new: Option<&ServiceRules>, phases: &mut Phases) {
    let empty = ServiceRules::default();
    let old = old.unwrap_or(&empty);
    let new = new.unwrap_or(&empty);
    for (key, value) in &old.elements {
        // Elements of a set that goes go with it.
        let set_goes = old.sets.contains_key(&key.0) && new.sets.get(&key.0) != old.sets.get(&key.0);
        if !set_goes && new.elements.get(key) != Some(value) {
            phases.delete_elements.push(Op::DeleteElement { family, set: key.0.clone(), key: key.1.clone() });
        }
    }
    for (name, rules) in &old.chains {
        match new.chains.get(name) {
            Some(new_rules) if new_rules == rules => {}
            Some(_) => phases.flush_chains.push(Op::FlushChain { family, name: name.clone() }),
            None => {
                phases.flush_chains.push(Op::FlushChain { family, name: name.clone() });
                phases.delete_chains.push(Op::DeleteChain { family, name: name.clone() });
            }
        }
    }
    for (name, spec) in &old.sets {
        if new.sets.get(name) != Some(spec) {
            phases.delete_sets.push(Op::DeleteSet { family, name: name.clone(), spec: spec.clone() });
        }
    }
    for (name, spec) in &new.sets {
        if old.sets.get(name) != Some(spec) {
            phases.add_sets.push(Op::AddSet { family, name: name.clone(), spec: spec.clone() });
        }
    }
    for (name, rules) in &new.chains {
        let old_rules = old.chains.get(name);
        if old_rules == Some(rules) {
            continue;
        }
        if old_rules.is_none() {
            phases.add_chains.push(Op::AddChain { family, name: name.clone(), base: None });
        }
        for rule in rules {
            phases.add_rules.push(Op::AddRule { family, chain: name.clone(), rule: rule.clone() });
        }
    }
    for (key, value) in &new.elements {
        if old.elements.get(key) != Some(value) {
            phases.add_elements.push(Op::AddElement {
                family,
                set: key.0.clone(),
                key: key.1.clone(),
                value: Some(value.clone()),
            });
        }
    }
}

#[cfg(test)]
#[path = "render_tests.rs"]
mod tests;
