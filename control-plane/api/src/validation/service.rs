//! Services (core's ValidateService): ports, type, externalName, session affinity and selector.
//! ClusterIPs and node ports as allocated are the Service registry's to check.

use std::collections::BTreeSet;

use serde_json::Value;

use super::{
    FieldError, child, duplicate, forbidden, index, invalid, invalid_str, list, meta, names, not_supported,
    required, str_at,
};

fn headless(spec: &Value) -> bool {
    let first_ip = list(spec, "clusterIPs").first().and_then(Value::as_str);
    first_ip.or_else(|| str_at(spec, "clusterIP")) == Some("None")
}

/// ValidateService.
pub(super) fn service(object: &Value) -> Vec<FieldError> {
    let spec = object.get("spec").unwrap_or(&Value::Null);
    let kind = str_at(spec, "type").unwrap_or("ClusterIP");
    let ports = list(spec, "ports");
    let mut errors = Vec::new();
    if ports.is_empty() && !headless(spec) && kind != "ExternalName" {
        errors.push(required("spec.ports", ""));
    }
    if kind == "ExternalName" {
        let name = str_at(spec, "externalName").unwrap_or_default();
        let cname = name.strip_suffix('.').unwrap_or(name);
        if cname.is_empty() {
            errors.push(required("spec.externalName", ""));
        } else {
            errors.extend(
                names::dns1123_subdomain(cname).iter().map(|m| invalid_str("spec.externalName", cname, m)),
            );
        }
    }
    let mut port_names = BTreeSet::new();
    for (i, port) in ports.iter().enumerate() {
        errors.extend(service_port(port, ports.len() > 1, &mut port_names, &index("spec.ports", i)));
    }
    if spec.get("selector").is_some_and(|s| !s.is_null()) {
        errors.extend(meta::labels(spec.get("selector"), "spec.selector"));
    }
    if let Some(affinity) = str_at(spec, "sessionAffinity")
        && !["ClientIP", "None"].contains(&affinity)
    {
        errors.push(not_supported("spec.sessionAffinity", affinity, &["ClientIP", "None"]));
    }
    if str_at(spec, "sessionAffinity") == Some("None")
        && spec.get("sessionAffinityConfig").is_some_and(|c| !c.is_null())
    {
        errors.push(forbidden("spec.sessionAffinityConfig", "must not be set when session affinity is None"));
    }
    if !["ClusterIP", "ExternalName", "LoadBalancer", "NodePort"].contains(&kind) {
        errors.push(not_supported(
            "spec.type",
            kind,
            &["ClusterIP", "ExternalName", "LoadBalancer", "NodePort"],
        ));
    }
    if kind == "ClusterIP" {
        for (i, port) in ports.iter().enumerate() {
            if port.get("nodePort").and_then(Value::as_i64).is_some_and(|p| p != 0) {
                errors.push(forbidden(
                    &child(&index("spec.ports", i), "nodePort"),
                    "may not be used when `type` is 'ClusterIP'",
                ));
            }
        }
    }
    let mut node_ports = BTreeSet::new();
    for (i, port) in ports.iter().enumerate() {
        let Some(node_port) = port.get("nodePort").and_then(Value::as_i64).filter(|p| *p != 0) else {
            continue;
        };
        if !node_ports.insert((str_at(port, "protocol").unwrap_or("TCP"), node_port)) {
            errors
                .push(FieldError::duplicate(&child(&index("spec.ports", i), "nodePort"), &node_port.into()));
        }
    }
    let mut seen = BTreeSet::new();
    for (i, port) in ports.iter().enumerate() {
        let protocol = str_at(port, "protocol").unwrap_or("TCP");
        let number = port.get("port").and_then(Value::as_i64).unwrap_or(0);
        if !seen.insert((protocol, number)) {
            // Upstream shows the (protocol, port) key as Go's encoding/json writes a core.ServicePort.
            errors.push(FieldError {
                field: index("spec.ports", i),
                kind: super::FieldErrorKind::Duplicate,
                detail: format!(
                    "{{\"Name\":\"\",\"Protocol\":{},\"AppProtocol\":null,\"Port\":{number},\"TargetPort\":0,\"NodePort\":0}}",
                    Value::String(protocol.to_owned())
                ),
            });
        }
    }
    if let Some(ranges) = spec.get("loadBalancerSourceRanges").and_then(Value::as_array)
        && !ranges.is_empty()
        && kind != "LoadBalancer"
    {
        errors.push(forbidden(
            "spec.LoadBalancerSourceRanges",
            "may only be used when `type` is 'LoadBalancer'",
        ));
    }
    errors
}

/// validateServicePort.
fn service_port(
    port: &Value,
    require_name: bool,
    names_seen: &mut BTreeSet<String>,
    path: &str,
) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let name = str_at(port, "name").unwrap_or_default();
    if require_name && name.is_empty() {
        errors.push(required(&child(path, "name"), ""));
    } else if !name.is_empty() {
        errors.extend(names::dns1123_label(name).iter().map(|m| invalid_str(&child(path, "name"), name, m)));
        if !names_seen.insert(name.to_owned()) {
            errors.push(duplicate(&child(path, "name"), name));
        }
    }
    let number = port.get("port").and_then(Value::as_i64).unwrap_or(0);
    errors.extend(names::port_num(number).iter().map(|m| invalid(&child(path, "port"), &number.into(), m)));
    if let Some(protocol) = str_at(port, "protocol")
        && !["SCTP", "TCP", "UDP"].contains(&protocol)
    {
        errors.push(not_supported(&child(path, "protocol"), protocol, &["SCTP", "TCP", "UDP"]));
    }
    match port.get("targetPort") {
        Some(Value::Number(n)) => {
            let target = n.as_i64().unwrap_or(0);
            errors.extend(
                names::port_num(target)
                    .iter()
                    .map(|m| invalid(&child(path, "targetPort"), &target.into(), m)),
            );
        }
        Some(Value::String(target)) => {
            errors.extend(
                names::port_name(target).iter().map(|m| invalid_str(&child(path, "targetPort"), target, m)),
            );
        }
        _ => {}
    }
    if let Some(app_protocol) = str_at(port, "appProtocol") {
        errors.extend(
            names::qualified_name(app_protocol)
                .iter()
                .map(|m| invalid_str(&child(path, "appProtocol"), app_protocol, m)),
        );
    }
    errors
}
