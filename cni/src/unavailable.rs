//! Placeholders for the edges not wired yet: each refuses, with an error naming what is missing,
//! whatever would need it — never a silent success.

use std::net::IpAddr;

use ipnet::IpNet;
use keel_cni::plugin;
use keel_cni::skel::CmdArgs;
use keel_cni::spec::error::UNSUPPORTED_FIELD;
use keel_cni::spec::{Attachment, CniResult, Error, NetConf, PortMapping};

fn unavailable(what: &str) -> Error {
    Error::new(UNSUPPORTED_FIELD, format!("{what} is not available in this build of keel-cni"))
}

/// No IPAM yet.
pub struct Ipam;

impl plugin::Ipam for Ipam {
    fn allocate(&mut self, _: &CmdArgs, _: &NetConf) -> Result<CniResult, Error> {
        Err(unavailable("IPAM"))
    }
    fn release(&mut self, _: &CmdArgs, _: &NetConf) -> Result<(), Error> {
        Ok(())
    }
    fn check(&mut self, _: &CmdArgs, _: &NetConf, _: &[IpAddr]) -> Result<(), Error> {
        Err(unavailable("IPAM"))
    }
    fn gc(&mut self, _: &CmdArgs, _: &NetConf, _: &[Attachment]) -> Result<(), Error> {
        Ok(())
    }
    fn status(&mut self, _: &CmdArgs, _: &NetConf) -> Result<(), Error> {
        Err(Error::new(
            keel_cni::spec::error::PLUGIN_NOT_AVAILABLE,
            "IPAM is not available in this build of keel-cni",
        ))
    }
}

/// No nftables firewall yet: ipMasq and hostPorts are refused.
pub struct Firewall;

impl plugin::Firewall for Firewall {
    fn ensure_masquerade(&mut self, _: &str, _: &[IpNet], _: &[IpNet]) -> Result<(), Error> {
        Err(unavailable("ipMasq (masquerade)"))
    }
    fn add_port_mappings(
        &mut self,
        _: &Attachment,
        _: &str,
        _: &[IpAddr],
        _: &[PortMapping],
    ) -> Result<(), Error> {
        Err(unavailable("portMappings (hostPorts)"))
    }
    fn remove_port_mappings(&mut self, _: &Attachment) -> Result<(), Error> {
        Ok(())
    }
    fn check_port_mappings(&mut self, _: &Attachment, _: &[PortMapping]) -> Result<(), Error> {
        Err(unavailable("portMappings (hostPorts)"))
    }
    fn gc(&mut self, _: &[Attachment]) -> Result<(), Error> {
        Ok(())
    }
}
