//! A placeholder for the IPAM until it is wired: it refuses, with an error naming what is missing,
//! whatever would need it — never a silent success.

use std::net::IpAddr;

use keel_cni::plugin;
use keel_cni::skel::CmdArgs;
use keel_cni::spec::error::UNSUPPORTED_FIELD;
use keel_cni::spec::{Attachment, CniResult, Error, NetConf};

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
