//! networking.k8s.io/v1's ServiceCIDRs and IPAddresses (upstream's `pkg/apis/networking/validation`,
//! 1.34) and apimachinery's strict IP and CIDR rules (`IsValidIP`, `IsValidCIDR`) they use.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use serde_json::{Value, json};

use super::{FieldError, child, index, invalid, invalid_str, list, names, required, str_at};

/// apimachinery's FieldImmutableErrorMsg.
const IMMUTABLE: &str = "field is immutable";

/// What Go's `netutils.ParseIPSloppy` reads but `netip.ParseAddr` refuses: dotted IPv4 with
/// leading zeros (`010.0.0.1`), which the sloppy parser reads as decimal.
fn sloppy_ipv4(value: &str) -> Option<Ipv4Addr> {
    let parts: Vec<&str> = value.split('.').collect();
    if parts.len() != 4 {
        return None;
    }
    let mut octets = [0u8; 4];
    for (octet, part) in octets.iter_mut().zip(&parts) {
        if part.is_empty() || part.len() > 3 || !part.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        *octet = part.parse().ok()?;
    }
    Some(Ipv4Addr::from(octets))
}

/// Go's `net.IP.String()`: IPv4 (also an IPv4-mapped IPv6 address) dotted, IPv6 in RFC 5952 form.
fn go_string(ip: IpAddr) -> String {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or_else(|| v6.to_string(), |v4| v4.to_string()),
        IpAddr::V4(v4) => v4.to_string(),
    }
}

/// apimachinery's `IsValidIP`: an IP address in canonical form, no leading zeros, not
/// IPv4-mapped IPv6. The messages, as upstream words them.
pub fn ip_errors(value: &str) -> Vec<String> {
    let ip = match value.parse::<IpAddr>() {
        Ok(ip) => ip,
        Err(_) if sloppy_ipv4(value).is_some() => return vec!["must not have leading 0s".to_owned()],
        Err(_) => return vec!["must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)".to_owned()],
    };
    if let IpAddr::V6(v6) = ip
        && v6.to_ipv4_mapped().is_some()
    {
        return vec!["must not be an IPv4-mapped IPv6 address".to_owned()];
    }
    let canonical = go_string(ip);
    if value == canonical { Vec::new() } else { vec![format!("must be in canonical form (\"{canonical}\")")] }
}

/// A CIDR as Go's sloppy parser reads it: the address (leading zeros allowed in IPv4) and the
/// prefix length (leading zeros allowed), or `None` for what `ParseCIDRSloppy` refuses.
fn sloppy_cidr(value: &str) -> Option<(IpAddr, u8, bool)> {
    let (address, bits) = value.split_once('/')?;
    if bits.is_empty() || bits.len() > 3 || !bits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let prefix: u8 = bits.parse().ok()?;
    let (ip, mut strict) = match address.parse::<IpAddr>() {
        Ok(ip) => (ip, true),
        Err(_) => (IpAddr::V4(sloppy_ipv4(address)?), false),
    };
    let max = if ip.is_ipv4() { 32 } else { 128 };
    if prefix > max {
        return None;
    }
    strict &= !(bits.len() > 1 && bits.starts_with('0'));
    Some((ip, prefix, strict))
}

/// The network of `ip`/`prefix`.
fn masked(ip: IpAddr, prefix: u8) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
            IpAddr::V4(Ipv4Addr::from(u32::from(v4) & mask))
        }
        IpAddr::V6(v6) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
            IpAddr::V6(Ipv6Addr::from(u128::from(v6) & mask))
        }
    }
}

/// apimachinery's `IsValidCIDR`: a subnet (no bits set beyond the prefix length) in canonical
/// form, no leading zeros, not IPv4-mapped IPv6.
pub fn cidr_errors(value: &str) -> Vec<String> {
    let Some((ip, prefix, strict)) = sloppy_cidr(value) else {
        return vec!["must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)".to_owned()];
    };
    if !strict {
        return vec!["must not have leading 0s in IP or prefix length".to_owned()];
    }
    if let IpAddr::V6(v6) = ip
        && v6.to_ipv4_mapped().is_some()
    {
        return vec!["must not have an IPv4-mapped IPv6 address".to_owned()];
    }
    let network = masked(ip, prefix);
    if network != ip {
        return vec!["must not have bits set beyond the prefix length".to_owned()];
    }
    let canonical = format!("{}/{prefix}", go_string(network));
    if value == canonical { Vec::new() } else { vec![format!("must be in canonical form (\"{canonical}\")")] }
}

/// netutils' `IPFamilyOfCIDRString`: 4, 6, or `None` for what does not parse.
fn family(cidr: &str) -> Option<u8> {
    sloppy_cidr(cidr).map(|(ip, _, _)| match ip {
        IpAddr::V6(v6) if v6.to_ipv4_mapped().is_none() => 6,
        _ => 4,
    })
}

fn cidrs(object: &Value) -> &[Value] {
    list(object.get("spec").unwrap_or(&Value::Null), "cidrs")
}

/// validateServiceCIDRSpec: one or two CIDRs, each valid, at most one per IP family.
fn service_cidr_spec(cidrs: &[Value]) -> Vec<FieldError> {
    const PATH: &str = "spec.cidrs";
    if cidrs.is_empty() {
        return vec![required(PATH, "at least one CIDR required")];
    }
    // Upstream shows the internal ServiceCIDRSpec as its JSON (no tags: `CIDRs`).
    if cidrs.len() > 2 {
        return vec![invalid(PATH, &json!({"CIDRs": cidrs}), "may only hold up to 2 values")];
    }
    let mut errors = Vec::new();
    for (i, cidr) in cidrs.iter().enumerate() {
        let value = cidr.as_str().unwrap_or_default();
        errors.extend(cidr_errors(value).iter().map(|m| invalid_str(&index(PATH, i), value, m)));
    }
    if let [first, second] = cidrs {
        let (a, b) =
            (family(first.as_str().unwrap_or_default()), family(second.as_str().unwrap_or_default()));
        if a.is_some() && a == b {
            errors.push(invalid(
                PATH,
                &Value::Array(cidrs.to_vec()),
                "may specify no more than one IP for each IP family, i.e 192.168.0.0/24 and 2001:db8::/64",
            ));
        }
    }
    errors
}

/// ValidateServiceCIDR (beyond metadata).
pub(super) fn service_cidr(object: &Value) -> Vec<FieldError> {
    service_cidr_spec(cidrs(object))
}

/// ValidateServiceCIDRUpdate: the CIDRs are immutable, but a single-stack ServiceCIDR may gain a
/// second CIDR of the other family (kubernetes#131261).
pub(super) fn service_cidr_update(old: &Value, new: &Value) -> Vec<FieldError> {
    let (before, after) = (cidrs(old), cidrs(new));
    let immutable_at = |i: usize| invalid(&index("spec.cidrs", i), &after[i], IMMUTABLE);
    match (before.len(), after.len()) {
        (b, a) if b == a => (0..a).filter(|&i| before[i] != after[i]).map(immutable_at).collect(),
        (1, 2) => {
            let mut errors: Vec<FieldError> =
                if before[0] == after[0] { Vec::new() } else { vec![immutable_at(0)] };
            errors.extend(service_cidr_spec(after));
            errors
        }
        _ => vec![invalid("spec.cidrs", &Value::Array(after.to_vec()), IMMUTABLE)],
    }
}

/// ValidateIPAddressName: the name is an IP address in canonical form.
pub fn ip_address_name(name: &str) -> Vec<String> {
    ip_errors(name)
}

/// apimachinery's `IsValidPathSegmentName`.
fn path_segment(value: &str) -> Vec<String> {
    if value == "." || value == ".." {
        return vec![format!("may not be '{value}'")];
    }
    ["/", "%"].iter().filter(|c| value.contains(*c)).map(|c| format!("may not contain '{c}'")).collect()
}

/// validateIPAddressParentReference: a parent is required, with a resource and a name.
fn parent_ref(spec: &Value) -> Vec<FieldError> {
    let Some(parent) = spec.get("parentRef").filter(|p| !p.is_null()) else {
        return vec![required("spec.parentRef", "")];
    };
    let path = "spec.parentRef";
    let mut errors = Vec::new();
    // The core group (Services') is the empty string, so a group cannot be required.
    if let Some(group) = str_at(parent, "group").filter(|g| !g.is_empty()) {
        errors.extend(
            names::dns1123_subdomain(group).iter().map(|m| invalid_str(&child(path, "group"), group, m)),
        );
    }
    for field in ["resource", "name"] {
        match str_at(parent, field).unwrap_or_default() {
            "" => errors.push(required(&child(path, field), "")),
            value => {
                errors.extend(path_segment(value).iter().map(|m| invalid_str(&child(path, field), value, m)));
            }
        }
    }
    if let Some(namespace) = str_at(parent, "namespace").filter(|n| !n.is_empty()) {
        errors.extend(
            path_segment(namespace).iter().map(|m| invalid_str(&child(path, "namespace"), namespace, m)),
        );
    }
    errors
}

/// ValidateIPAddress (beyond metadata).
pub(super) fn ip_address(object: &Value) -> Vec<FieldError> {
    parent_ref(object.get("spec").unwrap_or(&Value::Null))
}

/// ValidateIPAddress and ValidateIPAddressUpdate: the parent reference is immutable.
pub(super) fn ip_address_update(old: &Value, new: &Value) -> Vec<FieldError> {
    let mut errors = ip_address(new);
    let parent = |object: &Value| object.pointer("/spec/parentRef").filter(|p| !p.is_null()).map(go_parent);
    let after = parent(new);
    if parent(old) != after {
        errors.push(invalid("spec.parentRef", after.as_ref().unwrap_or(&Value::Null), IMMUTABLE));
    }
    errors
}

/// The internal ParentReference as upstream shows it in a message (its JSON, no tags).
fn go_parent(parent: &Value) -> Value {
    let field = |name: &str| str_at(parent, name).unwrap_or_default();
    json!({"Group": field("group"), "Resource": field("resource"), "Namespace": field("namespace"), "Name": field("name")})
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::find;
    use crate::validation::{validate_create, validate_update};

    fn create(plural: &str, object: &Value) -> Vec<String> {
        let resource = find("networking.k8s.io", "v1", plural).unwrap();
        validate_create(resource, object).iter().map(ToString::to_string).collect()
    }

    fn update(plural: &str, old: &Value, new: &Value) -> Vec<String> {
        let resource = find("networking.k8s.io", "v1", plural).unwrap();
        validate_update(resource, old, new).iter().map(ToString::to_string).collect()
    }

    fn service_cidr(cidrs: &[&str]) -> Value {
        json!({"metadata": {"name": "kubernetes"}, "spec": {"cidrs": cidrs}})
    }

    #[test]
    fn service_cidrs() {
        assert!(create("servicecidrs", &service_cidr(&["10.96.0.0/16"])).is_empty());
        assert!(create("servicecidrs", &service_cidr(&["10.96.0.0/16", "fd00:10:96::/112"])).is_empty());
        assert_eq!(
            create("servicecidrs", &json!({"metadata": {"name": "x"}, "spec": {}})),
            ["spec.cidrs: Required value: at least one CIDR required"]
        );
        assert_eq!(
            create("servicecidrs", &service_cidr(&["10.0.0.0/24", "10.0.1.0/24", "fd00::/64"])),
            [
                "spec.cidrs: Invalid value: {\"CIDRs\":[\"10.0.0.0/24\",\"10.0.1.0/24\",\"fd00::/64\"]}: may only hold up to 2 values"
            ]
        );
        assert_eq!(
            create("servicecidrs", &service_cidr(&["10.0.0.0/24", "10.0.1.0/24"])),
            [
                "spec.cidrs: Invalid value: [\"10.0.0.0/24\",\"10.0.1.0/24\"]: may specify no more than one IP for each IP family, i.e 192.168.0.0/24 and 2001:db8::/64"
            ]
        );
        assert_eq!(
            create("servicecidrs", &service_cidr(&["10.96.0.1/16", "nope"])),
            [
                "spec.cidrs[0]: Invalid value: \"10.96.0.1/16\": must not have bits set beyond the prefix length",
                "spec.cidrs[1]: Invalid value: \"nope\": must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)",
            ]
        );
    }

    #[test]
    fn service_cidrs_are_immutable_but_may_become_dual_stack() {
        let old = service_cidr(&["10.96.0.0/16"]);
        assert!(update("servicecidrs", &old, &old).is_empty());
        assert_eq!(
            update("servicecidrs", &old, &service_cidr(&["10.97.0.0/16"])),
            ["spec.cidrs[0]: Invalid value: \"10.97.0.0/16\": field is immutable"]
        );
        assert!(update("servicecidrs", &old, &service_cidr(&["10.96.0.0/16", "fd00::/108"])).is_empty());
        assert_eq!(
            update("servicecidrs", &old, &service_cidr(&["10.96.0.0/16", "10.97.0.0/16"])),
            [
                "spec.cidrs: Invalid value: [\"10.96.0.0/16\",\"10.97.0.0/16\"]: may specify no more than one IP for each IP family, i.e 192.168.0.0/24 and 2001:db8::/64"
            ]
        );
        let dual = service_cidr(&["10.96.0.0/16", "fd00::/108"]);
        assert_eq!(
            update("servicecidrs", &dual, &old),
            ["spec.cidrs: Invalid value: [\"10.96.0.0/16\"]: field is immutable"]
        );
    }

    #[test]
    fn ip_addresses() {
        let ip = |parent: Value| json!({"metadata": {"name": "10.96.0.10"}, "spec": {"parentRef": parent}});
        let dns =
            json!({"group": "", "resource": "services", "namespace": "kube-system", "name": "kube-dns"});
        assert!(create("ipaddresses", &ip(dns.clone())).is_empty());
        assert_eq!(
            create("ipaddresses", &json!({"metadata": {"name": "10.96.0.10"}, "spec": {}})),
            ["spec.parentRef: Required value"]
        );
        assert_eq!(
            create("ipaddresses", &ip(json!({"group": "Bad_Group", "resource": "a/b", "namespace": ".."}))),
            [
                "spec.parentRef.group: Invalid value: \"Bad_Group\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
                "spec.parentRef.resource: Invalid value: \"a/b\": may not contain '/'",
                "spec.parentRef.name: Required value",
                "spec.parentRef.namespace: Invalid value: \"..\": may not be '..'",
            ]
        );
        let moved = json!({"group": "", "resource": "services", "namespace": "default", "name": "web"});
        assert_eq!(
            update("ipaddresses", &ip(dns.clone()), &ip(moved)),
            [
                "spec.parentRef: Invalid value: {\"Group\":\"\",\"Name\":\"web\",\"Namespace\":\"default\",\"Resource\":\"services\"}: field is immutable"
            ]
        );
        let mut relabelled = ip(dns.clone());
        relabelled["metadata"]["labels"] = json!({"a": "b"});
        assert!(update("ipaddresses", &ip(dns), &relabelled).is_empty());
        assert_eq!(ip_address_name("10.96.0.010"), ["must not have leading 0s"]);
    }

    #[test]
    fn ips_as_apimachinery_checks_them() {
        for ok in ["10.96.0.1", "2001:db8::1", "::1", "fd00:10:96::a"] {
            assert!(ip_errors(ok).is_empty(), "{ok}");
        }
        assert_eq!(ip_errors("010.0.0.1"), ["must not have leading 0s"]);
        assert_eq!(ip_errors("::ffff:10.0.0.1"), ["must not be an IPv4-mapped IPv6 address"]);
        assert_eq!(ip_errors("2001:DB8:0:0::1"), ["must be in canonical form (\"2001:db8::1\")"]);
        assert_eq!(
            ip_errors("10.0.0.256"),
            ["must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)"]
        );
        assert_eq!(
            ip_errors("kubernetes"),
            ["must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)"]
        );
    }

    #[test]
    fn cidrs_as_apimachinery_checks_them() {
        for ok in ["10.96.0.0/16", "2001:db8::/64", "0.0.0.0/0", "10.0.0.1/32"] {
            assert!(cidr_errors(ok).is_empty(), "{ok}");
        }
        assert_eq!(cidr_errors("10.96.0.1/16"), ["must not have bits set beyond the prefix length"]);
        assert_eq!(cidr_errors("10.96.0.0/016"), ["must not have leading 0s in IP or prefix length"]);
        assert_eq!(cidr_errors("010.96.0.0/16"), ["must not have leading 0s in IP or prefix length"]);
        assert_eq!(cidr_errors("::ffff:10.0.0.0/104"), ["must not have an IPv4-mapped IPv6 address"]);
        assert_eq!(cidr_errors("2001:DB8::/64"), ["must be in canonical form (\"2001:db8::/64\")"]);
        for bad in ["10.96.0.0", "10.96.0.0/33", "10.96.0.0/x", "fd00::/129", "/8"] {
            assert_eq!(
                cidr_errors(bad),
                ["must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)"],
                "{bad}"
            );
        }
    }
}
