//! The kernel's dataplane: every operation of [`Dataplane`] as route-netlink requests, with one socket
//! in the caller's namespace and one created inside each pod namespace touched.
//!
//! Round trips are kept few: the veth pair is one request (its pod end born inside the pod's
//! namespace, since moving a device between namespaces costs the kernel ≈20 ms; the answer, asked
//! with NLM_F_ECHO, names both ends' indexes), and everything inside the pod (addresses, links up,
//! routes) is one datagram of requests the kernel runs in order.

use std::fs::File;
use std::io;
use std::net::IpAddr;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use ipnet::IpNet;
use netlink_packet_core::{NLM_F_APPEND, NLM_F_CREATE, NLM_F_ECHO};
use netlink_packet_route::address::{AddressAttribute, AddressFlags, AddressHeaderFlags, AddressMessage};
use netlink_packet_route::link::{
    AfSpecInet6, AfSpecUnspec, In6AddrGenMode, InfoBridgePort, InfoData, InfoKind, InfoPortData,
    InfoPortKind, InfoVeth, LinkAttribute, LinkFlags, LinkInfo, LinkMessage,
};
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteHeader, RouteMessage, RouteProtocol, RouteScope, RouteType,
};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};

use crate::dataplane::{
    Bridge, BridgeSpec, Dataplane, DataplaneError, HostLink, Mac, PodConfig, PodLink, PodRoute,
    TOMBSTONE_PREFIX, Veth, VethSpec,
};
use crate::netlink::{CREATE, NetlinkError, Socket};

/// The filesystem type of a namespace file (`NSFS_MAGIC`).
const NSFS_MAGIC: i64 = 0x6e73_6673;

/// The loopback interface's index in every network namespace.
const LOOPBACK_INDEX: u32 = 1;

/// A pod namespace this invocation talks to.
#[derive(Debug)]
struct Pod {
    path: PathBuf,
    file: File,
    socket: Socket,
}

/// The kernel's dataplane, for one invocation.
#[derive(Debug, Default)]
pub struct Kernel {
    host: Option<Socket>,
    pods: Vec<Pod>,
    /// Host ends (tombstone names) retired by this DEL, destroyed by `finish`.
    retired: Vec<String>,
}

fn io_error(what: impl Into<String>) -> impl FnOnce(io::Error) -> DataplaneError {
    move |source| DataplaneError::Io { what: what.into(), source }
}

impl Kernel {
    pub fn new() -> Kernel {
        Kernel::default()
    }

    fn host(&mut self) -> Result<&mut Socket, DataplaneError> {
        if self.host.is_none() {
            self.host = Some(Socket::open().map_err(io_error("open a route netlink socket"))?);
        }
        self.host.as_mut().ok_or_else(|| DataplaneError::Conflict("no host socket".into()))
    }

    fn pod(&mut self, netns: &Path) -> Result<&mut Pod, DataplaneError> {
        if let Some(position) = self.pods.iter().position(|pod| pod.path == netns) {
            return Ok(&mut self.pods[position]);
        }
        let file = open_netns(netns)?;
        let socket = Socket::open_in(&file)
            .map_err(|err| DataplaneError::NetnsInvalid(netns.to_owned(), err.to_string()))?;
        self.pods.push(Pod { path: netns.to_owned(), file, socket });
        let last = self.pods.len() - 1;
        Ok(&mut self.pods[last])
    }
}

/// Opens a network namespace file: it must exist, be a namespace (nsfs) and not be our own.
fn open_netns(path: &Path) -> Result<File, DataplaneError> {
    let file = File::open(path).map_err(|err| {
        if err.kind() == io::ErrorKind::NotFound {
            DataplaneError::NetnsMissing(path.to_owned())
        } else {
            DataplaneError::NetnsInvalid(path.to_owned(), err.to_string())
        }
    })?;
    let statfs = nix::sys::statfs::fstatfs(&file)
        .map_err(|err| DataplaneError::NetnsInvalid(path.to_owned(), err.to_string()))?;
    if statfs.filesystem_type().0 != NSFS_MAGIC {
        return Err(DataplaneError::NetnsInvalid(path.to_owned(), "not a namespace file".into()));
    }
    let ours =
        std::fs::metadata("/proc/thread-self/ns/net").map_err(io_error("read /proc/thread-self/ns/net"))?;
    let theirs = file.metadata().map_err(io_error(format!("stat {}", path.display())))?;
    if (ours.dev(), ours.ino()) == (theirs.dev(), theirs.ino()) {
        return Err(DataplaneError::NetnsInvalid(
            path.to_owned(),
            "it is the plugin's own network namespace".into(),
        ));
    }
    Ok(file)
}

fn link_request(index: u32) -> LinkMessage {
    let mut message = LinkMessage::default();
    message.header.index = index;
    message
}

fn link_by_name_request(name: &str) -> LinkMessage {
    let mut message = LinkMessage::default();
    message.attributes.push(LinkAttribute::IfName(name.to_owned()));
    message
}

/// The link named `name`, if any.
fn get_link(socket: &mut Socket, name: &str) -> Result<Option<LinkMessage>, DataplaneError> {
    let answers = socket.request(
        || format!("look up link {name}"),
        RouteNetlinkMessage::GetLink(link_by_name_request(name)),
        0,
    );
    match answers {
        Ok(answers) => Ok(answers.into_iter().find_map(|answer| match answer {
            RouteNetlinkMessage::NewLink(link) => Some(link),
            _ => None,
        })),
        Err(err) if err.is_not_found() => Ok(None),
        Err(err) => Err(err.into()),
    }
}

fn link_mac(link: &LinkMessage) -> Mac {
    link.attributes
        .iter()
        .find_map(|attribute| match attribute {
            LinkAttribute::Address(bytes) => <[u8; 6]>::try_from(bytes.as_slice()).ok().map(Mac),
            _ => None,
        })
        .unwrap_or(Mac([0; 6]))
}

fn link_u32(link: &LinkMessage, pick: fn(&LinkAttribute) -> Option<u32>) -> Option<u32> {
    link.attributes.iter().find_map(pick)
}

fn link_mtu(link: &LinkMessage) -> u32 {
    link_u32(link, |a| if let LinkAttribute::Mtu(mtu) = a { Some(*mtu) } else { None }).unwrap_or(1500)
}

fn link_kind(link: &LinkMessage) -> Option<&InfoKind> {
    link.attributes.iter().find_map(|attribute| match attribute {
        LinkAttribute::LinkInfo(infos) => infos.iter().find_map(|info| match info {
            LinkInfo::Kind(kind) => Some(kind),
            _ => None,
        }),
        _ => None,
    })
}

fn link_name(link: &LinkMessage) -> Option<&str> {
    link.attributes.iter().find_map(|attribute| match attribute {
        LinkAttribute::IfName(name) => Some(name.as_str()),
        _ => None,
    })
}

fn family(address: IpAddr) -> AddressFamily {
    if address.is_ipv4() { AddressFamily::Inet } else { AddressFamily::Inet6 }
}

/// An address request: IPv6 without duplicate address detection, so it is usable at once (a fresh
/// veth in a fresh namespace has nothing to collide with; the IPAM guarantees uniqueness).
fn address_message(index: u32, address: IpNet) -> AddressMessage {
    let mut message = AddressMessage::default();
    message.header.family = family(address.addr());
    message.header.prefix_len = address.prefix_len();
    message.header.index = index;
    match address {
        IpNet::V4(v4) => {
            message.attributes.push(AddressAttribute::Local(address.addr()));
            message.attributes.push(AddressAttribute::Address(address.addr()));
            if v4.prefix_len() < 31 {
                message.attributes.push(AddressAttribute::Broadcast(v4.broadcast()));
            }
        }
        IpNet::V6(_) => {
            message.header.flags = AddressHeaderFlags::Nodad;
            message.attributes.push(AddressAttribute::Address(address.addr()));
            message.attributes.push(AddressAttribute::Flags(AddressFlags::Nodad));
        }
    }
    message
}

fn address_of(message: &AddressMessage) -> Option<IpNet> {
    let local = message.attributes.iter().find_map(|a| match a {
        AddressAttribute::Local(ip) => Some(*ip),
        _ => None,
    });
    let address = message.attributes.iter().find_map(|a| match a {
        AddressAttribute::Address(ip) => Some(*ip),
        _ => None,
    });
    IpNet::new(local.or(address)?, message.header.prefix_len).ok()
}

fn addresses_of(socket: &mut Socket, index: u32, v6: Option<bool>) -> Result<Vec<IpNet>, DataplaneError> {
    let mut request = AddressMessage::default();
    request.header.index = index;
    request.header.family = match v6 {
        Some(false) => AddressFamily::Inet,
        Some(true) => AddressFamily::Inet6,
        None => AddressFamily::Unspec,
    };
    let answers = socket
        .dump(|| format!("list addresses of link {index}"), RouteNetlinkMessage::GetAddress(request))?;
    Ok(answers
        .iter()
        .filter_map(|answer| match answer {
            RouteNetlinkMessage::NewAddress(message) if message.header.index == index => address_of(message),
            _ => None,
        })
        .collect())
}

fn route_message(index: u32, route: &PodRoute) -> RouteMessage {
    let mut message = RouteMessage::default();
    message.header.address_family = family(route.dst.addr());
    message.header.destination_prefix_length = route.dst.prefix_len();
    message.header.table = RouteHeader::RT_TABLE_MAIN;
    message.header.protocol = RouteProtocol::Boot;
    message.header.kind = RouteType::Unicast;
    message.header.scope = if route.gw.is_some() { RouteScope::Universe } else { RouteScope::Link };
    if route.dst.prefix_len() > 0 {
        message.attributes.push(RouteAttribute::Destination(RouteAddress::from(route.dst.network())));
    }
    if let Some(gw) = route.gw {
        message.attributes.push(RouteAttribute::Gateway(RouteAddress::from(gw)));
    }
    message.attributes.push(RouteAttribute::Oif(index));
    message
}

fn route_address(address: &RouteAddress) -> Option<IpAddr> {
    match address {
        RouteAddress::Inet(v4) => Some(IpAddr::V4(*v4)),
        RouteAddress::Inet6(v6) => Some(IpAddr::V6(*v6)),
        _ => None,
    }
}

fn routes_of(socket: &mut Socket, index: u32) -> Result<Vec<PodRoute>, DataplaneError> {
    let mut routes = Vec::new();
    for v6 in [false, true] {
        let mut request = RouteMessage::default();
        request.header.address_family = if v6 { AddressFamily::Inet6 } else { AddressFamily::Inet };
        request.header.table = RouteHeader::RT_TABLE_MAIN;
        let answers = socket.dump(|| "list routes".to_owned(), RouteNetlinkMessage::GetRoute(request))?;
        for answer in answers {
            let RouteNetlinkMessage::NewRoute(message) = answer else { continue };
            let mut oif = None;
            let mut dst = None;
            let mut gw = None;
            for attribute in &message.attributes {
                match attribute {
                    RouteAttribute::Oif(value) => oif = Some(*value),
                    RouteAttribute::Destination(address) => dst = route_address(address),
                    RouteAttribute::Gateway(address) => gw = route_address(address),
                    _ => {}
                }
            }
            if oif != Some(index) || message.header.table != RouteHeader::RT_TABLE_MAIN {
                continue;
            }
            let unspecified = if v6 {
                IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED)
            } else {
                IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED)
            };
            let Ok(dst) = IpNet::new(dst.unwrap_or(unspecified), message.header.destination_prefix_length)
            else {
                continue;
            };
            routes.push(PodRoute { dst, gw });
        }
    }
    Ok(routes)
}

fn set_flags(index: u32, flags: LinkFlags, on: bool) -> LinkMessage {
    let mut message = link_request(index);
    if on {
        message.header.flags = flags;
    }
    message.header.change_mask = flags;
    message
}

fn refused(op: String, source: io::Error) -> DataplaneError {
    DataplaneError::Netlink(NetlinkError::new(op, source))
}

impl Dataplane for Kernel {
    fn pod_link(&mut self, netns: &Path, ifname: &str) -> Result<Option<PodLink>, DataplaneError> {
        let socket = &mut self.pod(netns)?.socket;
        let Some(link) = get_link(socket, ifname)? else { return Ok(None) };
        let index = link.header.index;
        let addresses = addresses_of(socket, index, None)?
            .into_iter()
            .filter(|address| !matches!(address, IpNet::V6(v6) if v6.addr().is_unicast_link_local()))
            .collect();
        let routes = routes_of(socket, index)?;
        Ok(Some(PodLink {
            index,
            mac: link_mac(&link),
            up: link.header.flags.contains(LinkFlags::Up),
            addresses,
            routes,
        }))
    }

    fn ensure_bridge(&mut self, spec: &BridgeSpec) -> Result<Bridge, DataplaneError> {
        let socket = self.host()?;
        let mut flags = LinkFlags::Up;
        if spec.promisc {
            flags |= LinkFlags::Promisc;
        }
        let link = match get_link(socket, &spec.name)? {
            Some(link) => link,
            None => {
                let mut message = LinkMessage::default();
                message.header.flags = flags;
                message.header.change_mask = flags;
                message.attributes.push(LinkAttribute::IfName(spec.name.clone()));
                // A fixed address: a bridge without one takes its lowest port's, so its MAC (the pods'
                // gateway's) would change as pods come and go.
                message.attributes.push(LinkAttribute::Address(Mac::random().0.to_vec()));
                if let Some(mtu) = spec.mtu {
                    message.attributes.push(LinkAttribute::Mtu(mtu));
                }
                message.attributes.push(LinkAttribute::LinkInfo(vec![LinkInfo::Kind(InfoKind::Bridge)]));
                let created = socket.request(
                    || format!("create bridge {}", spec.name),
                    RouteNetlinkMessage::NewLink(message),
                    CREATE | NLM_F_ECHO,
                );
                let echoed = match created {
                    Ok(answers) => answers.into_iter().find_map(|answer| match answer {
                        RouteNetlinkMessage::NewLink(link) => Some(link),
                        _ => None,
                    }),
                    // Another ADD made it first.
                    Err(err) if err.is_exists() => None,
                    Err(err) => return Err(err.into()),
                };
                match echoed {
                    Some(link) => link,
                    None => get_link(socket, &spec.name)?.ok_or_else(|| {
                        DataplaneError::Conflict(format!("bridge {} vanished after its creation", spec.name))
                    })?,
                }
            }
        };
        if link_kind(&link) != Some(&InfoKind::Bridge) {
            return Err(DataplaneError::Conflict(format!(
                "{:?} already exists but is not a bridge",
                spec.name
            )));
        }
        let index = link.header.index;
        if !link.header.flags.contains(flags) {
            socket.request(
                || format!("set bridge {} up", spec.name),
                RouteNetlinkMessage::NewLink(set_flags(index, flags, true)),
                0,
            )?;
        }
        Ok(Bridge { name: spec.name.clone(), index, mac: link_mac(&link), mtu: link_mtu(&link) })
    }

    fn bridge(&mut self, name: &str) -> Result<Option<Bridge>, DataplaneError> {
        let socket = self.host()?;
        Ok(get_link(socket, name)?.filter(|link| link_kind(link) == Some(&InfoKind::Bridge)).map(|link| {
            Bridge {
                name: name.to_owned(),
                index: link.header.index,
                mac: link_mac(&link),
                mtu: link_mtu(&link),
            }
        }))
    }

    fn ensure_bridge_address(
        &mut self,
        bridge: &Bridge,
        address: IpNet,
        force: bool,
    ) -> Result<(), DataplaneError> {
        let socket = self.host()?;
        let v6 = address.addr().is_ipv6();
        // Added first: on every ADD but a node's first the address is there, and EEXIST says so in
        // one round trip. Only a new address is compared with the others, as the reference does.
        let added = socket.request(
            || format!("add address {address} to bridge {}", bridge.name),
            RouteNetlinkMessage::NewAddress(address_message(bridge.index, address)),
            CREATE,
        );
        match added {
            Err(err) if err.is_exists() => return Ok(()),
            Err(err) => return Err(err.into()),
            Ok(_) => {}
        }
        let conflicting =
            crate::dataplane::conflicting_addresses(&addresses_of(socket, bridge.index, Some(v6))?, address);
        let Some(first) = conflicting.first().copied() else { return Ok(()) };
        let doomed = if force { conflicting } else { vec![address] };
        for remove in doomed {
            let result = socket.request(
                || format!("remove address {remove} from bridge {}", bridge.name),
                RouteNetlinkMessage::DelAddress(address_message(bridge.index, remove)),
                0,
            );
            match result {
                Err(err) if !err.is_not_found() => return Err(err.into()),
                _ => {}
            }
        }
        if force {
            Ok(())
        } else {
            Err(DataplaneError::Conflict(format!(
                "bridge {} already has address {first}, different from {address} (set forceAddress to replace it)",
                bridge.name
            )))
        }
    }

    fn enable_forwarding(&mut self, ipv6: bool) -> Result<(), DataplaneError> {
        let path =
            if ipv6 { "/proc/sys/net/ipv6/conf/all/forwarding" } else { "/proc/sys/net/ipv4/ip_forward" };
        let current = std::fs::read_to_string(path).map_err(io_error(format!("read {path}")))?;
        if current.trim() == "1" {
            return Ok(());
        }
        std::fs::write(path, "1").map_err(io_error(format!("write 1 to {path}")))
    }

    fn add_veth(&mut self, spec: &VethSpec) -> Result<Veth, DataplaneError> {
        let pod_fd = self.pod(&spec.pod_netns)?.file.as_raw_fd();
        let mut peer = LinkMessage::default();
        peer.attributes.push(LinkAttribute::IfName(spec.pod_ifname.clone()));
        peer.attributes.push(LinkAttribute::Address(spec.pod_mac.0.to_vec()));
        if let Some(mtu) = spec.mtu {
            peer.attributes.push(LinkAttribute::Mtu(mtu));
        }
        peer.attributes.push(LinkAttribute::NetNsFd(pod_fd));
        // The host end is created down and brought up by the last request of the datagram, after its
        // options: it is a bridge port, which needs no IPv6 link-local address, so when the node has
        // IPv6 its address generation is turned off first (addrconf, DAD and MLD for that address were
        // ≈0.15–0.3 ms of every ADD here, measured with IPv6 off in the node namespace). The pod end keeps its link-local address, as with the
        // reference plugin.
        let mut host = LinkMessage::default();
        host.attributes.push(LinkAttribute::IfName(spec.host_name.clone()));
        host.attributes.push(LinkAttribute::Address(spec.host_mac.0.to_vec()));
        if let Some(mtu) = spec.mtu {
            host.attributes.push(LinkAttribute::Mtu(mtu));
        }
        host.attributes.push(LinkAttribute::Controller(spec.bridge_index));
        host.attributes.push(LinkAttribute::LinkInfo(vec![
            LinkInfo::Kind(InfoKind::Veth),
            LinkInfo::Data(InfoData::Veth(InfoVeth::Peer(peer))),
        ]));
        let mut requests = vec![(RouteNetlinkMessage::NewLink(host), CREATE | NLM_F_ECHO)];
        let mut options = link_by_name_request(&spec.host_name);
        if Path::new("/proc/sys/net/ipv6").exists() {
            options.attributes.push(LinkAttribute::AfSpecUnspec(vec![AfSpecUnspec::Inet6(vec![
                AfSpecInet6::AddrGenMode(In6AddrGenMode::None),
            ])]));
        }
        if spec.hairpin {
            // Bridge port options are not taken at creation: they go with the request after it.
            options.attributes.push(LinkAttribute::LinkInfo(vec![
                LinkInfo::PortKind(InfoPortKind::Bridge),
                LinkInfo::PortData(InfoPortData::BridgePort(vec![InfoBridgePort::HairpinMode(true)])),
            ]));
        }
        if options.attributes.len() > 1 {
            requests.push((RouteNetlinkMessage::NewLink(options), 0));
        }
        let mut up = link_by_name_request(&spec.host_name);
        up.header.flags = LinkFlags::Up;
        up.header.change_mask = LinkFlags::Up;
        requests.push((RouteNetlinkMessage::NewLink(up), 0));
        let socket = self.host()?;
        let answers = match socket.batch(requests) {
            Ok(answers) => answers,
            Err((0, err)) => {
                let netns = spec.pod_netns.display();
                let op = format!("create veth pair {} / {} (in {netns})", spec.host_name, spec.pod_ifname);
                return Err(refused(op, err));
            }
            Err((_, err)) => {
                // The pair exists but is not what was asked: this step leaves nothing behind.
                let _ = socket.request(
                    String::new,
                    RouteNetlinkMessage::DelLink(link_by_name_request(&spec.host_name)),
                    0,
                );
                let op = format!("set the options of bridge port {} and bring it up", spec.host_name);
                return Err(refused(op, err));
            }
        };
        let echoed = answers.into_iter().find_map(|answer| match answer {
            RouteNetlinkMessage::NewLink(link) => Some(link),
            _ => None,
        });
        let host_link = match echoed {
            Some(link) => link,
            // Kernels before 6.3 do not echo a created link.
            None => get_link(socket, &spec.host_name)?
                .ok_or_else(|| DataplaneError::Conflict(format!("veth {} vanished", spec.host_name)))?,
        };
        let host_index = host_link.header.index;
        let peer_index =
            link_u32(&host_link, |a| if let LinkAttribute::Link(index) = a { Some(*index) } else { None });
        let mtu = link_mtu(&host_link);
        let pod_index = match peer_index {
            Some(index) => index,
            None => {
                let socket = &mut self.pod(&spec.pod_netns)?.socket;
                get_link(socket, &spec.pod_ifname)?
                    .ok_or_else(|| {
                        DataplaneError::Conflict(format!("{} vanished from the pod", spec.pod_ifname))
                    })?
                    .header
                    .index
            }
        };
        Ok(Veth { host_index, pod_index, mtu })
    }

    fn configure_pod(&mut self, config: &PodConfig) -> Result<(), DataplaneError> {
        let socket = &mut self.pod(&config.netns)?.socket;
        let mut requests = Vec::new();
        let mut ops = Vec::new();
        for address in &config.addresses {
            requests.push((RouteNetlinkMessage::NewAddress(address_message(config.index, *address)), CREATE));
            ops.push(format!("add address {address} to {}", config.ifname));
        }
        requests.push((RouteNetlinkMessage::NewLink(set_flags(config.index, LinkFlags::Up, true)), 0));
        ops.push(format!("set {} up", config.ifname));
        requests.push((RouteNetlinkMessage::NewLink(set_flags(LOOPBACK_INDEX, LinkFlags::Up, true)), 0));
        ops.push("set lo up".to_owned());
        for route in &config.routes {
            // APPEND: another interface of the pod (a second network) may route the same destination;
            // this route joins it rather than failing or replacing it, as the reference adds routes.
            requests.push((
                RouteNetlinkMessage::NewRoute(route_message(config.index, route)),
                NLM_F_CREATE | NLM_F_APPEND,
            ));
            let via = route.gw.map(|gw| format!(" via {gw}")).unwrap_or_default();
            ops.push(format!("add route {}{via} dev {}", route.dst, config.ifname));
        }
        socket.batch(requests).map(drop).map_err(|(index, err)| {
            let op = ops.get(index).cloned().unwrap_or_else(|| "configure the pod interface".to_owned());
            refused(format!("{op} (in {})", config.netns.display()), err)
        })
    }

    fn delete_veth(&mut self, host_name: &str) -> Result<(), DataplaneError> {
        let socket = self.host()?;
        let result = socket.request(
            || format!("delete veth {host_name}"),
            RouteNetlinkMessage::DelLink(link_by_name_request(host_name)),
            0,
        );
        match result {
            Err(err) if !err.is_not_found() => Err(err.into()),
            _ => Ok(()),
        }
    }

    fn host_link(&mut self, host_name: &str) -> Result<Option<HostLink>, DataplaneError> {
        let socket = self.host()?;
        Ok(get_link(socket, host_name)?.map(|link| HostLink {
            index: link.header.index,
            mac: link_mac(&link),
            controller: link_u32(&link, |a| {
                if let LinkAttribute::Controller(index) = a { Some(*index) } else { None }
            }),
        }))
    }

    fn retire_veth(
        &mut self,
        netns: Option<&Path>,
        ifname: &str,
        host_name: &str,
    ) -> Result<(), DataplaneError> {
        let socket = self.host()?;
        let Some(host) = get_link(socket, host_name)? else {
            // The pair is gone (with its namespace, or by an earlier DEL).
            return Ok(());
        };
        let index = host.header.index;
        let tombstone = format!("{TOMBSTONE_PREFIX}{index:x}");
        let mut down = set_flags(index, LinkFlags::Up, false);
        down.attributes.push(LinkAttribute::Controller(0));
        let mut rename = link_request(index);
        rename.attributes.push(LinkAttribute::IfName(tombstone.clone()));
        // A name can only change while the link is down: two requests, one datagram.
        socket
            .batch(vec![(RouteNetlinkMessage::NewLink(down), 0), (RouteNetlinkMessage::NewLink(rename), 0)])
            .map_err(|(_, err)| refused(format!("retire veth {host_name} as {tombstone}"), err))?;
        self.retired.push(tombstone.clone());
        let Some(netns) = netns else { return Ok(()) };
        let pod = match self.pod(netns) {
            Ok(pod) => pod,
            // The namespace is gone or unusable: the pod end goes with the pair.
            Err(DataplaneError::NetnsMissing(_) | DataplaneError::NetnsInvalid(..)) => return Ok(()),
            Err(err) => return Err(err),
        };
        // CNI_IFNAME there is ours only if its peer is our host end (indexes are per namespace: the
        // host end's IFLA_LINK alone could name another pod's interface in a wrong CNI_NETNS).
        let Some(pod_end) = get_link(&mut pod.socket, ifname)? else { return Ok(()) };
        let peer_of_pod_end =
            link_u32(&pod_end, |a| if let LinkAttribute::Link(index) = a { Some(*index) } else { None });
        if peer_of_pod_end != Some(index) {
            return Ok(());
        }
        let peer = pod_end.header.index;
        let mut rename = link_request(peer);
        rename.attributes.push(LinkAttribute::IfName(tombstone));
        let requests = vec![
            (RouteNetlinkMessage::NewLink(set_flags(peer, LinkFlags::Up, false)), 0),
            (RouteNetlinkMessage::NewLink(rename), 0),
        ];
        match pod.socket.batch(requests) {
            Ok(_) => Ok(()),
            // Gone meanwhile (the pair destroyed by a concurrent DEL's child).
            Err((_, err)) if err.raw_os_error() == Some(libc::ENODEV) => Ok(()),
            Err((_, err)) => Err(refused(format!("retire {ifname} in {}", netns.display()), err)),
        }
    }

    fn delete_tombstones(&mut self) -> Result<(), DataplaneError> {
        let socket = self.host()?;
        for name in tombstones(socket)? {
            let result = socket.request(
                || format!("delete retired veth {name}"),
                RouteNetlinkMessage::DelLink(link_by_name_request(&name)),
                0,
            );
            match result {
                Err(err) if !err.is_not_found() => return Err(err.into()),
                _ => {}
            }
        }
        Ok(())
    }

    fn finish(&mut self) {
        if self.retired.is_empty() {
            return;
        }
        destroy_detached(std::mem::take(&mut self.retired));
    }
}

/// The names of the tombstones in the caller's namespace.
fn tombstones(socket: &mut Socket) -> Result<Vec<String>, DataplaneError> {
    let answers =
        socket.dump(|| "list links".to_owned(), RouteNetlinkMessage::GetLink(LinkMessage::default()))?;
    Ok(answers
        .iter()
        .filter_map(|answer| match answer {
            RouteNetlinkMessage::NewLink(link) => {
                link_name(link).filter(|name| name.starts_with(TOMBSTONE_PREFIX))
            }
            _ => None,
        })
        .map(str::to_owned)
        .collect())
}

/// Destroys the retired veth pairs (and any tombstone a crashed earlier child left) in a child process
/// of its own session with stdio on /dev/null, so the runtime, which waits for our exit and for EOF on
/// our stdout, is not held by the kernel's ≈20 ms per deleted veth. Called after the answer is written.
fn destroy_detached(names: Vec<String>) {
    // The answer is written: stdio goes to /dev/null before the fork, so the runtime sees EOF on our
    // stdout as soon as this process exits, whenever the child gets to run.
    if let Ok(null) = File::options().read(true).write(true).open("/dev/null") {
        for fd in 0..3 {
            // SAFETY: dup2 onto the standard descriptors, which this process owns.
            unsafe { libc::dup2(null.as_raw_fd(), fd) };
        }
    }
    // SAFETY: keel-cni is single-threaded when it calls this (main, after the answer is written), so
    // the child starts with a consistent copy of the whole process.
    let fork = unsafe { nix::unistd::fork() };
    match fork {
        Ok(nix::unistd::ForkResult::Child) => {
            let _ = nix::unistd::setsid();
            if let Ok(mut socket) = Socket::open() {
                let mut all = names;
                if let Ok(left) = tombstones(&mut socket) {
                    all.extend(left);
                }
                all.sort();
                all.dedup();
                for name in all {
                    let _ = socket.request(
                        String::new,
                        RouteNetlinkMessage::DelLink(link_by_name_request(&name)),
                        0,
                    );
                }
            }
            // SAFETY: _exit ends the child without running the parent's exit handlers twice.
            unsafe { libc::_exit(0) };
        }
        Ok(nix::unistd::ForkResult::Parent { .. }) => {}
        Err(err) => {
            // No child: destroy them now rather than leave them (stderr is /dev/null by now).
            let _ = err;
            if let Ok(mut socket) = Socket::open() {
                for name in names {
                    let _ = socket.request(
                        String::new,
                        RouteNetlinkMessage::DelLink(link_by_name_request(&name)),
                        0,
                    );
                }
            }
        }
    }
}
