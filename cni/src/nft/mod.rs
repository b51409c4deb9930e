//! The [`Firewall`] over nftables netlink: masquerade per bridge and hostPorts per attachment in
//! keel-cni's own table (`inet keel-cni`), nothing executed.
//!
//! Costs, in netlink round trips: `ensure_masquerade` when in place is one chain lookup; setting it up
//! is a rule dump and one transaction. `add_port_mappings` is one transaction (plus, on the node's
//! first hostPort, one more that creates the table and chains). `remove_port_mappings` and `gc` are a
//! rule dump and, when something is to delete, one transaction. Every change is one atomic
//! transaction; the kernel's refusal is the spec's error 104 with its errno text.

mod ruleset;

// The netlink connection and expressions live in keel-nft, shared with keel-proxy.
use keel_nft::{expr, netlink};

pub use self::ruleset::TABLE;

use std::collections::HashSet;
use std::net::IpAddr;

use ipnet::IpNet;

use self::netlink::{Change, Connection, NetlinkError};
use self::ruleset::{HOSTPORTS, POSTROUTING, Tag};
use crate::plugin::Firewall;
use crate::spec::error::{IO_FAILURE, KERNEL_REFUSED};
use crate::spec::{Attachment, Error, PortMapping};

/// How often a transaction that lost a race (another process changed the same objects between our
/// read and our write) is retried from the read.
const ATTEMPTS: usize = 3;

/// keel-cni's nftables table in the network namespace of the thread that first uses it (the socket
/// is opened then, and stays in that namespace).
#[derive(Debug, Default)]
pub struct NftFirewall {
    connection: Option<Connection>,
}

impl NftFirewall {
    /// A firewall that opens its netlink socket at first use.
    pub fn new() -> NftFirewall {
        NftFirewall { connection: None }
    }

    fn connection(&mut self) -> Result<&mut Connection, Error> {
        if self.connection.is_none() {
            self.connection = Some(Connection::open().map_err(to_error)?);
        }
        match self.connection.as_mut() {
            Some(connection) => Ok(connection),
            None => Err(Error::new(IO_FAILURE, "nftables: no netlink connection")),
        }
    }

    /// The keel-cni rules of the table, tagged; nothing when the table does not exist.
    fn tagged_rules(&mut self) -> Result<Vec<(String, u64, Tag)>, Error> {
        let rules = match self.connection()?.dump_rules(TABLE, None) {
            Ok(rules) => rules,
            Err(err) if err.errno() == Some(libc::ENOENT) => Vec::new(),
            Err(err) => return Err(to_error(err)),
        };
        Ok(rules.iter().filter_map(ruleset::rule_tag).collect())
    }

    /// Deletes the owned rules `doomed` selects, in one transaction, retrying when a rule vanished
    /// meanwhile (another DEL or GC of the same owner).
    fn delete_owned(&mut self, doomed: impl Fn(&str) -> bool) -> Result<(), Error> {
        for attempt in 1..=ATTEMPTS {
            let changes: Vec<Change> = self
                .tagged_rules()?
                .into_iter()
                .filter(|(_, _, tag)| tag.owner().is_some_and(&doomed))
                .map(|(chain, handle, _)| ruleset::delete_rule(&chain, handle))
                .collect();
            match self.connection()?.apply(&changes) {
                Ok(()) => return Ok(()),
                Err(err) if err.errno() == Some(libc::ENOENT) && attempt < ATTEMPTS => continue,
                Err(err) => return Err(to_error(err)),
            }
        }
        Ok(())
    }
}

impl Firewall for NftFirewall {
    fn ensure_masquerade(&mut self, bridge: &str, sources: &[IpNet], exclude: &[IpNet]) -> Result<(), Error> {
        ruleset::validate_bridge(bridge)?;
        if sources.is_empty() {
            return Ok(());
        }
        let chain = ruleset::masquerade_chain(bridge, sources, exclude);
        for attempt in 1..=ATTEMPTS {
            // The chain's name carries the configuration: present means in place.
            let connection = self.connection()?;
            if connection.get_chain(TABLE, &chain).map_err(to_error)?.is_some() {
                return Ok(());
            }
            // Set it up, swapping out an earlier configuration of the same bridge.
            // An update of an existing table or chain leaves kernel work to release after an RCU
            // grace period, which closing the socket then waits for: create them only when missing.
            let mut changes = Vec::new();
            if connection.get_chain(TABLE, POSTROUTING).map_err(to_error)?.is_none() {
                changes.extend([ruleset::add_table(), ruleset::add_nat_chain(POSTROUTING)]);
            }
            let present = match connection.dump_rules(TABLE, Some(POSTROUTING)) {
                Ok(rules) => rules,
                Err(err) if err.errno() == Some(libc::ENOENT) => Vec::new(),
                Err(err) => return Err(to_error(err)),
            };
            for (rule_chain, handle, tag) in present.iter().filter_map(ruleset::rule_tag) {
                if let Tag::Masquerade { bridge: old_bridge, chain: old_chain } = tag
                    && old_bridge == bridge
                {
                    changes.push(ruleset::delete_rule(&rule_chain, handle));
                    changes.push(ruleset::delete_chain(&old_chain));
                }
            }
            let description = format!("masquerade of {bridge}'s pods: {sources:?} except to {exclude:?}");
            changes.push(ruleset::add_chain(&chain, &description, true));
            for rule in ruleset::masquerade_rules(bridge, sources, exclude) {
                changes.push(ruleset::add_rule(&chain, rule, None));
            }
            let tag = Tag::Masquerade { bridge: bridge.to_owned(), chain: chain.clone() };
            changes.push(ruleset::add_rule(POSTROUTING, vec![expr::jump(&chain)], Some(&tag)));
            match self.connection()?.apply(&changes) {
                Ok(()) => return Ok(()),
                // Another process set it up (EEXIST) or swapped it (ENOENT) meanwhile: look again.
                Err(err)
                    if matches!(err.errno(), Some(libc::EEXIST | libc::ENOENT)) && attempt < ATTEMPTS => {}
                Err(err) => return Err(to_error(err)),
            }
        }
        Ok(())
    }

    fn add_port_mappings(
        &mut self,
        owner: &Attachment,
        _bridge: &str,
        pod_ips: &[IpAddr],
        mappings: &[PortMapping],
    ) -> Result<(), Error> {
        for mapping in mappings {
            ruleset::validate_mapping(mapping)?;
        }
        if mappings.is_empty() || pod_ips.is_empty() {
            return Ok(());
        }
        let owner_tag = ruleset::owner_tag(owner);
        let mut changes = Vec::new();
        for &pod_ip in pod_ips {
            let mut any = false;
            for mapping in mappings.iter().filter(|m| ruleset::mapping_applies(m, pod_ip)) {
                let protocol = ruleset::protocol_number(&mapping.protocol).unwrap_or(libc::IPPROTO_TCP as u8);
                let tag =
                    Tag::HostPort { owner: owner_tag.clone(), mapping: ruleset::describe_mapping(mapping) };
                changes.push(ruleset::add_rule(
                    HOSTPORTS,
                    ruleset::hostport_rule(pod_ip, mapping, protocol),
                    Some(&tag),
                ));
                any = true;
            }
            if any {
                let tag = Tag::Hairpin { owner: owner_tag.clone() };
                changes.push(ruleset::add_rule(POSTROUTING, ruleset::hairpin_rule(pod_ip), Some(&tag)));
            }
        }
        let connection = self.connection()?;
        match connection.apply(&changes) {
            Ok(()) => return Ok(()),
            // The node's first hostPort: no table or chain yet.
            Err(err) if err.errno() == Some(libc::ENOENT) => {}
            Err(err) => return Err(to_error(err)),
        }
        let have_postrouting = connection.get_chain(TABLE, POSTROUTING).map_err(to_error)?.is_some();
        match connection.apply(&ruleset::hostports_setup(have_postrouting)) {
            // EEXIST: another process set it up meanwhile, with the same transaction.
            Err(err) if err.errno() != Some(libc::EEXIST) => return Err(to_error(err)),
            _ => {}
        }
        connection.apply(&changes).map_err(to_error)
    }

    fn remove_port_mappings(&mut self, owner: &Attachment) -> Result<(), Error> {
        let owner_tag = ruleset::owner_tag(owner);
        self.delete_owned(|tag| tag == owner_tag)
    }

    fn check_port_mappings(&mut self, owner: &Attachment, mappings: &[PortMapping]) -> Result<(), Error> {
        let owner_tag = ruleset::owner_tag(owner);
        let present: HashSet<String> = self
            .tagged_rules()?
            .into_iter()
            .filter_map(|(_, _, tag)| match tag {
                Tag::HostPort { owner, mapping } if owner == owner_tag => Some(mapping),
                _ => None,
            })
            .collect();
        for mapping in mappings {
            let description = ruleset::describe_mapping(mapping);
            // Compared as stored: a long comment is cut to nft's length.
            let stored = Tag::HostPort { owner: owner_tag.clone(), mapping: description.clone() }.as_stored();
            let found = match stored {
                Some(Tag::HostPort { mapping, .. }) => present.contains(&mapping),
                _ => false,
            };
            if !found {
                return Err(Error::new(
                    crate::spec::error::DRIFT,
                    format!("hostPort rule missing: {description} of {owner_tag}"),
                ));
            }
        }
        Ok(())
    }

    fn gc(&mut self, valid: &[Attachment]) -> Result<(), Error> {
        // The table is shared by every network keel-cni serves, and the rules do not say which network
        // they belong to; a runtime GCs one network at a time, listing each live sandbox with that
        // network's ifname. So a rule of a container still listed is kept whatever its interface: the
        // GC of the eth0 network must not delete the hostPorts of the same pod's net1 network.
        let keep: HashSet<String> = valid.iter().map(ruleset::owner_tag).collect();
        let live: HashSet<&str> = valid.iter().map(|attachment| attachment.container_id.as_str()).collect();
        self.delete_owned(|tag| {
            !keep.contains(tag) && !ruleset::owner_container_id(tag).is_some_and(|id| live.contains(id))
        })
    }
}

/// The spec's error for a netlink failure: 104 with the kernel's errno text when it refused, 5 when
/// the socket failed.
#[expect(clippy::needless_pass_by_value, reason = "called as map_err(to_error)")]
fn to_error(err: NetlinkError) -> Error {
    let code = if err.errno().is_some() { KERNEL_REFUSED } else { IO_FAILURE };
    Error::new(code, format!("nftables: {err}"))
}
