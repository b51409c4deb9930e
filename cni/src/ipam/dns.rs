//! host-local's `ipam.resolvConf`: the DNS of an ADD result read from a resolv.conf-format file.

use std::path::Path;

use serde_json::Value;

use crate::spec::error::Error;
use crate::spec::{Dns, NetConf};

/// Reads resolv.conf text as host-local does: `nameserver` (each line one), `domain` (the last one),
/// `search` and `options` (their words, line after line); comments (`#`, `;`) and other keys skipped.
pub fn parse_resolv_conf(text: &str) -> Dns {
    let mut dns = Dns::default();
    for line in text.lines().map(str::trim) {
        if line.starts_with(['#', ';']) {
            continue;
        }
        let mut fields = line.split_whitespace();
        let (Some(key), Some(first)) = (fields.next(), fields.next()) else { continue };
        let words = || std::iter::once(first.to_owned()).chain(fields.clone().map(str::to_owned));
        match key {
            "nameserver" => dns.nameservers.push(first.to_owned()),
            "domain" => first.clone_into(&mut dns.domain),
            "search" => dns.search.extend(words()),
            "options" => dns.options.extend(words()),
            _ => {}
        }
    }
    dns
}

/// The DNS `ipam.resolvConf` names, if it names a file: unreadable is code 5, not a string code 7.
pub fn from_conf(conf: &NetConf) -> Result<Option<Dns>, Error> {
    match conf.raw.pointer("/ipam/resolvConf") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(path)) if path.is_empty() => Ok(None),
        Some(Value::String(path)) => std::fs::read_to_string(Path::new(path))
            .map(|text| Some(parse_resolv_conf(&text)))
            .map_err(|err| Error::io(format!("failed to read ipam.resolvConf {path}"), &err)),
        Some(other) => Err(Error::config(format!("invalid ipam.resolvConf {other}: not a path"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_resolv_conf_as_host_local_does() {
        let dns = parse_resolv_conf(
            "# generated\n; too\nnameserver 10.96.0.10\nnameserver fd00::a\ndomain a.local\ndomain b.local\n\
             search svc.cluster.local cluster.local\nsearch example.com\noptions ndots:5 edns0\nsortlist x y\nnameserver\n",
        );
        assert_eq!(dns.nameservers, ["10.96.0.10", "fd00::a"]);
        assert_eq!(dns.domain, "b.local");
        assert_eq!(dns.search, ["svc.cluster.local", "cluster.local", "example.com"]);
        assert_eq!(dns.options, ["ndots:5", "edns0"]);
        assert!(parse_resolv_conf("").is_empty());
    }
}
