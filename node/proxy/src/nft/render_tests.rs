use super::*;
use crate::fixtures::{self, ready, slice};
use crate::tracker::{ChangeTracker, TrackerConfig};
use std::path::PathBuf;

/// Compares `text` with `tests/golden/<name>.nft`; `KEEL_UPDATE_GOLDEN=1` writes it instead.
fn golden(name: &str, text: &str) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden").join(format!("{name}.nft"));
    if std::env::var_os("KEEL_UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, text).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path)
        .unwrap_or_else(|err| panic!("{}: {err} (KEEL_UPDATE_GOLDEN=1 writes it)", path.display()));
    assert!(
        expected == text,
        "{} differs (KEEL_UPDATE_GOLDEN=1 rewrites it); rendered:\n{text}",
        path.display()
    );
}

use crate::fixtures::{golden_cluster as cluster, golden_config as config};

fn full(renderers: &mut [Renderer], state: &ProxyState) -> Transaction {
    let mut transaction = Transaction::default();
    for renderer in renderers {
        renderer.full(state, &mut transaction);
    }
    transaction
}

fn partial(
    renderers: &mut [Renderer],
    state: &ProxyState,
    changed: &BTreeSet<ServicePortName>,
) -> Transaction {
    let mut transaction = Transaction::default();
    for renderer in renderers {
        renderer.partial(state, changed, &mut transaction);
    }
    transaction
}

fn renderers(config: &RenderConfig) -> Vec<Renderer> {
    vec![Renderer::new(Family::Ip, config.clone()), Renderer::new(Family::Ip6, config.clone())]
}

#[test]
fn full_sync_of_every_kind_of_service() {
    let tracker = cluster();
    let mut renderers = renderers(&config());
    golden("full", &full(&mut renderers, tracker.state()).to_string());
    assert_eq!(crate::fixtures::golden_transactions()[0], full(&mut renderers, tracker.state()));
}

#[test]
fn nodeport_addresses_restrict_node_ports() {
    let tracker = cluster();
    let config = RenderConfig { nodeport_addresses: vec!["198.18.0.0/16".parse().unwrap()], ..config() };
    let text = full(&mut renderers(&config)[..1], tracker.state()).to_string();
    let services: Vec<&str> = text
        .lines()
        .filter(|line| line.starts_with("add rule ip keel-proxy services ip daddr 198"))
        .collect();
    assert_eq!(
        services,
        [
            "add rule ip keel-proxy services ip daddr 198.18.0.0/16 meta l4proto . th dport vmap @service-nodeports"
        ]
    );
    assert!(!text.contains("fib daddr type local"));
}

#[test]
fn partial_syncs_touch_only_the_changed_services() {
    let mut tracker = cluster();
    let mut renderers = renderers(&config());
    let before = full(&mut renderers, tracker.state()).to_string();
    let marks = ["/web/", "/dns/", "/sticky/", "10.96.0.53"];
    // The selection slots of the changed Services, from their DNAT rules.
    let slots: BTreeSet<(&str, u32)> = before
        .lines()
        .filter(|line| marks.iter().any(|mark| line.contains(mark)))
        .filter_map(|line| {
            let family = line.split(' ').nth(2)?;
            let offset = line.split(" offset ").nth(1)?.split(' ').next()?.parse::<u32>().ok()?;
            Some((family, offset / SLOT_SIZE))
        })
        .collect();

    let changes = crate::fixtures::golden_partial_changes(&mut tracker);
    let transaction = partial(&mut renderers, tracker.state(), &changes.ports);
    golden("partial", &transaction.to_string());
    for line in transaction.to_string().lines() {
        let family = line.split(' ').nth(2).unwrap_or_default();
        let in_a_changed_slot = line
            .split(&format!("{} {{ ", endpoint_map(0)))
            .nth(1)
            .and_then(|rest| rest.split('-').next()?.parse::<u32>().ok())
            .is_some_and(|first| slots.contains(&(family, first / SLOT_SIZE)));
        assert!(
            marks.iter().any(|mark| line.contains(mark)) || in_a_changed_slot || line.contains(HAIRPIN),
            "touches another service: {line}"
        );
    }

    // Nothing changed: nothing written.
    assert!(partial(&mut renderers, tracker.state(), &changes.ports).ops.is_empty());

    // A full sync now renders what partial syncs built up.
    let mut fresh = self::renderers(&config());
    let rebuilt = full(&mut fresh, tracker.state());
    let replayed = full(&mut renderers, tracker.state());
    assert_eq!(rebuilt, replayed);
}

#[test]
fn endpoints_of_a_service_coming_and_going() {
    let mut tracker = ChangeTracker::new(TrackerConfig { node_name: "node-a".into(), proxy_name: None });
    let mut renderer = vec![Renderer::new(Family::Ip, config())];
    let service = fixtures::service("web", "10.96.0.10", &[("", "TCP", 80, None)]);
    tracker.update_service(&service);
    tracker.checkout();
    let text = full(&mut renderer, tracker.state()).to_string();
    assert!(text.contains(
        "add element ip keel-proxy no-endpoint-services { 10.96.0.10 . tcp . 80 : goto reject-chain }"
    ));

    tracker.update_slice(&slice("web-1", "web", &[("", "TCP", 8080)], vec![ready("10.244.0.5", "node-a")]));
    let changes = tracker.checkout();
    let text = partial(&mut renderer, tracker.state(), &changes.ports).to_string();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "delete element ip keel-proxy no-endpoint-services { 10.96.0.10 . tcp . 80 }");
    assert!(
        lines
            .last()
            .unwrap()
            .starts_with("add element ip keel-proxy service-ips { 10.96.0.10 . tcp . 80 : goto service-")
    );
    assert!(text.contains("add element ip keel-proxy endpoints-0 { 0-65535 : 10.244.0.5 . 8080 }"), "{text}");
    assert!(text.contains("add element ip keel-proxy hairpin { 10.244.0.5 . 10.244.0.5 }"), "{text}");

    tracker.delete_service(&service);
    let changes = tracker.checkout();
    let text = partial(&mut renderer, tracker.state(), &changes.ports).to_string();
    assert!(text.contains("delete element ip keel-proxy service-ips { 10.96.0.10 . tcp . 80 }"));
    assert!(text.contains("delete element ip keel-proxy endpoints-0 { 0-65535 }"), "{text}");
    assert!(text.contains("delete element ip keel-proxy hairpin { 10.244.0.5 . 10.244.0.5 }"), "{text}");
    assert_eq!(text.lines().filter(|line| line.starts_with("delete chain")).count(), 1, "{text}");
}

/// An endpoint added, replaced or removed is a change of map elements alone: no rule is written,
/// so the kernel does not validate the table (which costs a walk of every chain).
#[test]
fn endpoint_changes_write_only_map_elements() {
    let mut tracker = ChangeTracker::new(TrackerConfig { node_name: "node-a".into(), proxy_name: None });
    let mut renderer = vec![Renderer::new(Family::Ip, config())];
    tracker.update_service(&fixtures::service("web", "10.96.0.10", &[("", "TCP", 80, None)]));
    tracker.update_service(&fixtures::service("api", "10.96.0.11", &[("", "TCP", 80, None)]));
    let web = |addresses: &[&str]| {
        let endpoints = addresses.iter().map(|address| ready(address, "node-a")).collect();
        slice("web-1", "web", &[("", "TCP", 8080)], endpoints)
    };
    tracker.update_slice(&web(&["10.244.0.5", "10.244.0.6"]));
    // api shares an endpoint address with web: the hairpin element stays while either has it.
    tracker.update_slice(&slice("api-1", "api", &[("", "TCP", 8081)], vec![ready("10.244.0.6", "node-a")]));
    tracker.checkout();
    full(&mut renderer, tracker.state());

    for (step, addresses) in
        [&["10.244.0.5", "10.244.0.7"][..], &["10.244.0.5", "10.244.0.7", "10.244.0.8"], &["10.244.0.8"]]
            .into_iter()
            .enumerate()
    {
        tracker.update_slice(&web(addresses));
        let changes = tracker.checkout();
        let transaction = partial(&mut renderer, tracker.state(), &changes.ports);
        let text = transaction.to_string();
        assert!(!transaction.ops.is_empty(), "step {step}");
        for op in &transaction.ops {
            assert!(
                matches!(op, Op::AddElement { set, .. } | Op::DeleteElement { set, .. } if set.starts_with(ENDPOINTS) || set == HAIRPIN),
                "step {step}: {op}\n{text}"
            );
        }
        if step == 0 {
            // 10.244.0.6 left web but api still has it.
            assert!(!text.contains("10.244.0.6 . 10.244.0.6"), "{text}");
            assert!(text.contains("add element ip keel-proxy hairpin { 10.244.0.7 . 10.244.0.7 }"), "{text}");
        }
        if step == 1 {
            let intervals: Vec<&str> =
                text.lines().filter(|line| line.starts_with("add element ip keel-proxy endpoints")).collect();
            assert_eq!(
                intervals,
                [
                    // web's slot is 1 (api, first by name, took 0).
                    "add element ip keel-proxy endpoints-0 { 65536-87381 : 10.244.0.5 . 8080 }",
                    "add element ip keel-proxy endpoints-0 { 87382-109226 : 10.244.0.7 . 8080 }",
                    "add element ip keel-proxy endpoints-0 { 109227-131071 : 10.244.0.8 . 8080 }",
                ]
            );
        }
    }
}

/// What [`Kernel::shape`] compares.
type Shape = (Vec<(String, Vec<(Key, Option<Value>)>)>, BTreeSet<Value>, BTreeSet<String>);
/// A named change to the tracker.
type Step<'a> = (&'static str, Box<dyn Fn(&mut ChangeTracker) + 'a>);

/// The kernel's view of one table, as far as the render's transactions change it: sets with their
/// elements, chains with their rules' text. Applying refuses what the kernel would (a rule naming a
/// missing set, a set deleted while a rule names it, overlapping intervals, a missing element).
#[derive(Debug, Default, PartialEq, Clone)]
struct Kernel {
    sets: BTreeMap<String, BTreeMap<Key, Option<Value>>>,
    chains: BTreeMap<String, Vec<String>>,
}

/// The sets a rule's text names (`@name`).
fn named_sets(rule: &str) -> Vec<&str> {
    rule.split('@').skip(1).filter_map(|rest| rest.split([' ', '}']).next()).collect()
}

impl Kernel {
    /// Applies the IPv4 operations of `transaction`.
    fn apply(&mut self, transaction: &Transaction) -> Result<(), String> {
        for op in &transaction.ops {
            let refused = |why: &str| Err(format!("{why}: {op}"));
            match op {
                Op::AddTable(Family::Ip) => {}
                Op::DeleteTable(Family::Ip) => *self = Kernel::default(),
                Op::AddSet { family: Family::Ip, name, .. } => {
                    self.sets.entry(name.clone()).or_default();
                }
                Op::DeleteSet { family: Family::Ip, name, .. } => {
                    if self.chains.values().flatten().any(|rule| named_sets(rule).contains(&name.as_str())) {
                        return refused("a rule names the set");
                    }
                    if self.sets.remove(name).is_none() {
                        return refused("no such set");
                    }
                }
                Op::AddChain { family: Family::Ip, name, .. } => {
                    self.chains.entry(name.clone()).or_default();
                }
                Op::FlushChain { family: Family::Ip, name } => match self.chains.get_mut(name) {
                    Some(rules) => rules.clear(),
                    None => return refused("no such chain"),
                },
                Op::DeleteChain { family: Family::Ip, name } => match self.chains.get(name) {
                    Some(rules) if rules.is_empty() => drop(self.chains.remove(name)),
                    _ => return refused("no such chain, or not flushed"),
                },
                Op::AddRule { family: Family::Ip, chain, .. } => {
                    let text = op.to_string();
                    if named_sets(&text).iter().any(|set| !self.sets.contains_key(*set)) {
                        return refused("the rule names a missing set");
                    }
                    match self.chains.get_mut(chain) {
                        Some(rules) => rules.push(text),
                        None => return refused("no such chain"),
                    }
                }
                Op::AddElement { family: Family::Ip, set, key, value } => {
                    let Some(elements) = self.sets.get_mut(set) else { return refused("no such set") };
                    if let Key::Slots(first, last) = key {
                        let overlaps = elements.keys().any(|other| {
                            matches!(other, Key::Slots(a, b) if other != key && !(last < a || b < first))
                        });
                        if overlaps {
                            return refused("overlapping intervals");
                        }
                    }
                    if elements.get(key).is_some_and(|old| old != value) {
                        return refused("the element exists with other data");
                    }
                    elements.insert(key.clone(), value.clone());
                }
                Op::DeleteElement { family: Family::Ip, set, key } => {
                    let Some(elements) = self.sets.get_mut(set) else { return refused("no such set") };
                    if elements.remove(key).is_none() {
                        return refused("no such element");
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// What must match a fresh full sync: every set but the endpoint maps (whose slot numbers may
    /// differ) with its elements, the endpoints each endpoint map holds, and the chains' names.
    fn shape(&self) -> Shape {
        let sets = self
            .sets
            .iter()
            .filter(|(name, _)| !name.starts_with(ENDPOINTS))
            .map(|(name, elements)| (name.clone(), elements.clone().into_iter().collect()))
            .collect();
        let targets = self
            .sets
            .iter()
            .filter(|(name, _)| name.starts_with(ENDPOINTS))
            .flat_map(|(_, elements)| elements.values().flatten().cloned())
            .collect();
        (sets, targets, self.chains.keys().cloned().collect())
    }
}

/// A Service through affinity on and off, externalTrafficPolicy Local on and off, endpoints coming
/// and going, deleted and back: after each partial sync, the kernel (a model of it) accepted every
/// operation and holds what a fresh full sync would write.
#[test]
fn partial_syncs_replayed_on_a_model_of_the_kernel_match_a_full_sync() {
    let mut tracker = ChangeTracker::new(TrackerConfig { node_name: "node-a".into(), proxy_name: None });
    let mut renderer = vec![Renderer::new(Family::Ip, config())];
    let web = || fixtures::node_port(fixtures::service("web", "10.96.0.10", &[("", "UDP", 80, None)]));
    let local = move || fixtures::local_load_balancer(web(), "192.0.2.4", "192.0.2.5");
    let endpoints = |addresses: &[&str]| {
        let endpoints = addresses.iter().map(|address| ready(address, "node-a")).collect();
        slice("web-1", "web", &[("", "UDP", 8080)], endpoints)
    };
    let api = fixtures::service("api", "10.96.0.11", &[("", "TCP", 80, None)]);
    tracker.update_service(&web());
    tracker.update_slice(&endpoints(&["10.244.0.5", "10.244.0.6"]));
    tracker.update_service(&api);
    tracker.update_slice(&slice("api-1", "api", &[("", "TCP", 8081)], vec![ready("10.244.0.6", "node-a")]));
    tracker.checkout();
    let mut kernel = Kernel::default();
    kernel.apply(&full(&mut renderer, tracker.state())).unwrap();
    let steps: Vec<Step<'_>> = vec![
        ("api gone", Box::new(move |t| t.delete_service(&api))),
        ("affinity on", Box::new(move |t| t.update_service(&fixtures::affinity(web(), 100)))),
        ("affinity off", Box::new(move |t| t.update_service(&web()))),
        ("externalTrafficPolicy Local", Box::new(move |t| t.update_service(&local()))),
        (
            "3 endpoints",
            Box::new(move |t| t.update_slice(&endpoints(&["10.244.0.5", "10.244.0.6", "10.244.0.7"]))),
        ),
        ("Local with affinity", Box::new(move |t| t.update_service(&fixtures::affinity(local(), 100)))),
        ("Cluster again", Box::new(move |t| t.update_service(&web()))),
        ("no endpoints", Box::new(move |t| t.update_slice(&endpoints(&[])))),
        ("one endpoint", Box::new(move |t| t.update_slice(&endpoints(&["10.244.0.6"])))),
        ("web gone", Box::new(move |t| t.delete_service(&web()))),
        ("web back", Box::new(move |t| t.update_service(&web()))),
    ];
    for (step, change) in steps {
        change(&mut tracker);
        let changes = tracker.checkout();
        let transaction = partial(&mut renderer, tracker.state(), &changes.ports);
        if let Err(err) = kernel.apply(&transaction) {
            panic!("{step}: the kernel refused {err}\n{transaction}");
        }
        let mut fresh = Kernel::default();
        fresh.apply(&full(&mut [Renderer::new(Family::Ip, config())], tracker.state())).unwrap();
        assert_eq!(kernel.shape(), fresh.shape(), "{step}");
    }
}

#[test]
fn slot_ranges_split_the_slot_evenly() {
    for count in [1usize, 2, 3, 7, 17, 1000, 65_536] {
        let ranges: Vec<(u32, u32)> = slot_ranges(count).collect();
        assert_eq!(ranges.len(), count);
        assert_eq!(ranges[0].0, 0);
        assert_eq!(ranges[count - 1].1, SLOT_SIZE - 1);
        for pair in ranges.windows(2) {
            assert_eq!(pair[0].1 + 1, pair[1].0);
        }
        let sizes: BTreeSet<u32> = ranges.iter().map(|(first, last)| last - first + 1).collect();
        assert!(sizes.len() <= 2 && sizes.last().unwrap() - sizes.first().unwrap() <= 1, "{sizes:?}");
    }
}

#[test]
fn chain_names_are_stable_and_distinct() {
    let a = ServicePortName::new("default", "web", "http", crate::model::Protocol::Tcp);
    let b = ServicePortName::new("default", "web", "http", crate::model::Protocol::Udp);
    assert_eq!(chain_base(&a), chain_base(&a.clone()));
    assert_ne!(chain_base(&a), chain_base(&b));
    assert!(chain_base(&a).ends_with("-default/web/tcp/http"), "{}", chain_base(&a));
    assert_eq!(chain_base(&a).find('-'), Some(8));
}

#[test]
fn internal_traffic_policy_local_keeps_cluster_traffic_on_the_node() {
    let mut tracker = ChangeTracker::new(TrackerConfig { node_name: "node-a".into(), proxy_name: None });
    let mut service = fixtures::service("web", "10.96.0.10", &[("", "TCP", 80, None)]);
    service.spec.as_mut().unwrap().internal_traffic_policy = Some("Local".into());
    tracker.update_service(&service);
    tracker.update_slice(&slice("web-1", "web", &[("", "TCP", 80)], vec![ready("10.244.1.5", "node-b")]));
    tracker.checkout();
    let text = full(&mut [Renderer::new(Family::Ip, config())], tracker.state()).to_string();
    assert!(text.contains("no-endpoint-services { 10.96.0.10 . tcp . 80 : goto reject-chain }"), "{text}");
    assert!(!text.contains("10.244.1.5"));
}

#[test]
fn many_endpoints_of_an_affinity_service_get_a_map_of_their_own_which_goes_when_they_are_few() {
    let mut tracker = cluster();
    let mut big = fixtures::service("big", "10.96.0.60", &[("", "TCP", 80, None)]);
    big.spec.as_mut().unwrap().session_affinity = Some("ClientIP".into());
    tracker.update_service(&big);
    tracker.checkout();
    let mut renderer = [Renderer::new(Family::Ip, config())];
    let text = full(&mut renderer, tracker.state()).to_string();
    let map = "service-S5RRK7ZH-default/big/tcp/__endpoints";
    assert!(
        text.contains(&format!("add map ip keel-proxy {map} {{ typeof numgen random mod 1 : verdict; }}")),
        "{text}"
    );
    assert!(text.contains(&format!("numgen random mod 17 vmap @{map}")));
    assert_eq!(
        text.lines().filter(|line| line.starts_with(&format!("add element ip keel-proxy {map} "))).count(),
        17
    );

    let few = (0..3).map(|n| ready(&format!("10.244.3.{n}"), "node-c")).collect();
    tracker.update_slice(&slice("big-1", "big", &[("", "TCP", 80)], few));
    let changes = tracker.checkout();
    let text = partial(&mut renderer, tracker.state(), &changes.ports).to_string();
    assert!(text.contains(&format!("delete map ip keel-proxy {map}")), "{text}");
    assert!(
        !text.contains(&format!("delete element ip keel-proxy {map}")),
        "the map's elements go with it: {text}"
    );
    assert!(text.contains("numgen random mod 3 0 goto endpoint-S5RRK7ZH-default/big/tcp/__10.244.3.0/80"));
}
