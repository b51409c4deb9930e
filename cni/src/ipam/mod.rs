//! Address management: keel-cni's built-in IPAM ([`HostLocal`]: host-local's configuration keys,
//! semantics and on-disk layout, without a process spawn) or a delegated IPAM plugin ([`Delegated`])
//! when `ipam.type` names one. [`for_conf`] picks between them.
//!
//! - `range`: range sets, requested addresses and the round-robin choice (pure).
//! - `store`: allocations on disk under `ipam.dataDir/<network>/`, flock'ed.
//! - `delegate`: executing an IPAM plugin found in `CNI_PATH`.
//! - `dns`: host-local's `resolvConf` key.

pub mod delegate;
pub mod dns;
pub mod range;
pub mod store;

use std::collections::HashSet;
use std::net::IpAddr;

use ipnet::IpNet;

pub use delegate::Delegated;
use range::{Range, RangeSet};
use store::{Holder, Store};

use crate::plugin::Ipam;
use crate::skel::CmdArgs;
use crate::spec::error::{self, Error};
use crate::spec::{Attachment, CniResult, IpConfig, NetConf, Route};

/// The IPAM for `conf`: the plugin `ipam.type` names, else the built-in one.
pub fn for_conf(conf: &NetConf) -> Box<dyn Ipam> {
    match &conf.ipam.plugin_type {
        Some(plugin) => Box::new(Delegated::new(plugin)),
        None => Box::new(HostLocal),
    }
}

/// keel-cni's built-in IPAM. Stateless: every call opens and locks the network's store.
///
/// Unlike host-local, ADD for an attachment that already holds addresses returns them (host-local
/// refuses a duplicate allocation), so a runtime retrying ADD gets the same answer. (An attachment
/// host-local allocated for — no index link — is not looked for on ADD: that would read every file.)
#[derive(Debug, Default, Clone, Copy)]
pub struct HostLocal;

fn attachment(args: &CmdArgs) -> Attachment {
    Attachment { container_id: args.container_id.trim().to_owned(), ifname: args.ifname.clone() }
}

fn drift(msg: String) -> Error {
    Error::new(error::DRIFT, msg)
}

/// What an allocation knows of the directory: nothing yet (the fast path of a new attachment), or
/// a listing.
#[derive(Debug)]
struct Known {
    /// Addresses known to be taken: all of them once listed, else those found taken on the way.
    taken: HashSet<IpAddr>,
    listed: bool,
}

/// After this many addresses found taken without a listing, list the directory: the search then
/// skips every taken address at once and knows when the set is exhausted.
const MISSES_BEFORE_LISTING: usize = 3;

/// One range set's address for `owner`: the one it holds, the requested one, or the next free one.
/// Returns the address, its range and whether it was reserved now.
fn allocate_from<'a>(
    store: &Store,
    set: &'a RangeSet,
    requested: Option<IpAddr>,
    held: &[IpAddr],
    known: &mut Known,
    owner: &Attachment,
) -> Result<(IpAddr, &'a Range, bool), Error> {
    if let Some((address, range)) = held.iter().find_map(|a| set.range_for(*a).map(|range| (*a, range))) {
        return match requested {
            Some(requested) if requested != address => Err(Error::config(format!(
                "container {} interface {} already holds {address} in range set {set}, not the requested {requested}",
                owner.container_id, owner.ifname
            ))),
            _ => Ok((address, range, false)),
        };
    }
    if let Some(address) = requested {
        let range = set.check_requested(address, &known.taken)?;
        if !store.reserve(owner, address, set.index)? {
            return Err(Error::config(format!(
                "requested IP address {address} is not available in range set {set}"
            )));
        }
        known.taken.insert(address);
        return Ok((address, range, true));
    }
    let last = store.last_reserved(set.index);
    let mut misses = 0;
    loop {
        let Some((address, range)) = set.next_free(last, &known.taken) else { return Err(set.exhausted()) };
        known.taken.insert(address);
        if store.reserve(owner, address, set.index)? {
            return Ok((address, range, true));
        }
        misses += 1;
        if misses == MISSES_BEFORE_LISTING && !known.listed {
            known.taken.extend(Store::taken(&store.list()?));
            known.listed = true;
        }
    }
}

/// How many range sets' index links a DEL looks for at least: one per family (a lookup that finds
/// no link is one failed `getxattr`). More sets than that, configured at ADD and gone by DEL, are found
/// by GC.
const RELEASE_PROBED_SETS: usize = 2;

impl Ipam for HostLocal {
    fn allocate(&mut self, args: &CmdArgs, conf: &NetConf) -> Result<CniResult, Error> {
        let sets = range::range_sets(conf)?;
        let requested = range::requested_addresses(args, conf)?;
        let assigned = range::assign_requested(&sets, &requested)?;
        let dns = dns::from_conf(conf)?.unwrap_or_default();
        let owner = attachment(args);
        let store = Store::open(&conf.ipam.data_dir, &conf.name)?;
        // What the attachment holds comes from its index links without a listing (for a new
        // attachment, the common case: one failed lookup per set); an address file taken meanwhile is
        // found by its exclusive create. Only links without a readable address need a listing.
        let (mut known, held) = match store.indexed(&owner, sets.len()) {
            Some(found) => {
                let held = found.into_iter().map(|(_, address)| address).collect();
                (Known { taken: HashSet::new(), listed: false }, held)
            }
            None => {
                let listing = store.list()?;
                let held = store.held_by(&listing, &owner);
                (Known { taken: Store::taken(&listing), listed: true }, held)
            }
        };
        let mut reserved = Vec::new();
        let allocate_all = || -> Result<Vec<IpConfig>, Error> {
            let mut ips = Vec::new();
            for (set, requested) in sets.iter().zip(assigned) {
                let (address, range, new) = allocate_from(&store, set, requested, &held, &mut known, &owner)?;
                if new {
                    reserved.push((set.index, address));
                }
                let address = IpNet::new(address, range.subnet.prefix_len())
                    .map_err(|err| Error::config(format!("invalid subnet {}: {err}", range.subnet)))?;
                ips.push(IpConfig { address, gateway: Some(range.gateway), interface: None });
            }
            Ok(ips)
        };
        let ips = match allocate_all() {
            Ok(ips) => ips,
            Err(err) => {
                // Nothing left behind: what this call reserved from the earlier sets goes back.
                for (set, address) in reserved {
                    let _ = store.unreserve(&owner, set, address);
                }
                return Err(err);
            }
        };
        let routes = conf.ipam.routes.iter().map(|route| Route::new(route.dst, route.gw)).collect();
        Ok(CniResult { ips, routes, dns, ..CniResult::default() })
    }

    fn release(&mut self, args: &CmdArgs, conf: &NetConf) -> Result<(), Error> {
        let Some(store) = Store::open_existing(&conf.ipam.data_dir, &conf.name)? else { return Ok(()) };
        let owner = attachment(args);
        // The index names the attachment's addresses: no listing. Else (an attachment host-local
        // allocated, a DEL repeated, links without xattrs) the listing finds them.
        // Every set an ADD may have used, not only the configuration's: like host-local's, a DEL
        // releases all the attachment holds, and the conflist may have lost a family since the ADD.
        let sets = conf.range_sets().len().max(RELEASE_PROBED_SETS);
        if let Some(found) = store.indexed(&owner, sets)
            && !found.is_empty()
        {
            for (set, address) in found {
                store.free(Some(&store::index_name(&owner, set)), address)?;
            }
            return Ok(());
        }
        let listing = store.list()?;
        store.release(&listing, &owner).map(drop)
    }

    fn check(&mut self, args: &CmdArgs, conf: &NetConf, addresses: &[IpAddr]) -> Result<(), Error> {
        let owner = attachment(args);
        let held = match Store::open_existing(&conf.ipam.data_dir, &conf.name)? {
            None => Vec::new(),
            Some(store) => store.held_by(&store.list()?, &owner),
        };
        if held.is_empty() {
            return Err(drift(format!(
                "no address is allocated to container {} interface {} in network {}",
                owner.container_id, owner.ifname, conf.name
            )));
        }
        match addresses.iter().find(|address| !held.contains(address)) {
            Some(address) => Err(drift(format!(
                "address {address} is not allocated to container {} interface {} in network {}",
                owner.container_id, owner.ifname, conf.name
            ))),
            None => Ok(()),
        }
    }

    fn gc(&mut self, _args: &CmdArgs, conf: &NetConf, valid: &[Attachment]) -> Result<(), Error> {
        let Some(store) = Store::open_existing(&conf.ipam.data_dir, &conf.name)? else { return Ok(()) };
        let listing = store.list()?;
        let is_valid = |id: &str, ifname: Option<&str>| {
            valid
                .iter()
                .any(|v| v.container_id.trim() == id && ifname.is_none_or(|ifname| ifname == v.ifname))
        };
        for (address, holder) in &listing.addresses {
            match holder {
                Holder::Indexed(link) => {
                    if let Some((owner, _)) = store::parse_index_name(link)
                        && !is_valid(owner.container_id.trim(), Some(&owner.ifname))
                    {
                        store.free(Some(link), *address)?;
                    }
                }
                // A file naming no holder is not ours to judge: left alone.
                Holder::Unindexed => {
                    if let Some((id, ifname)) = store.read_owner(*address)
                        && !is_valid(&id, ifname.as_deref())
                    {
                        store.free(None, *address)?;
                    }
                }
            }
        }
        store.remove_stale_links(&listing)
    }

    fn status(&mut self, _args: &CmdArgs, conf: &NetConf) -> Result<(), Error> {
        // No configured range: they come with each ADD (the runtime's ipRanges), nothing to judge here.
        let sets = if conf.range_sets().is_empty() { Vec::new() } else { range::range_sets(conf)? };
        let unavailable = |err: Error| {
            Error::new(
                error::PLUGIN_NOT_AVAILABLE,
                format!("the IPAM data directory is unusable: {}", err.msg),
            )
            .with_details(err.details)
        };
        let store = Store::open(&conf.ipam.data_dir, &conf.name).map_err(unavailable)?;
        let taken = Store::taken(&store.list().map_err(unavailable)?);
        // ADD needs an address from every set: one exhausted set is enough to refuse every ADD.
        match sets.iter().find(|set| !set.has_free(&taken)) {
            Some(set) => Err(Error::new(
                error::PLUGIN_NOT_AVAILABLE,
                format!("no IP addresses available in range set {}: {set}", set.index),
            )),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests;
