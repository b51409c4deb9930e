//! The kubelet's list flags in upstream's forms: `--node-labels k=v,k2=v2` and
//! `--register-with-taints key=value:Effect,key:Effect`, refused with upstream's words.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Taint;

/// `--node-labels`: `key=value` pairs, comma-separated.
pub fn node_labels(text: &str) -> Result<BTreeMap<String, String>, String> {
    let mut labels = BTreeMap::new();
    for pair in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let Some((key, value)) = pair.split_once('=') else {
            return Err(format!("invalid label {pair:?}: must be formatted as key=value"));
        };
        if key.is_empty() {
            return Err(format!("invalid label {pair:?}: the key must not be empty"));
        }
        labels.insert(key.to_owned(), value.to_owned());
    }
    Ok(labels)
}

/// `--register-with-taints`: `key=value:Effect` or `key:Effect`, comma-separated (upstream's
/// ParseTaints).
pub fn taints(text: &str) -> Result<Vec<Taint>, String> {
    let mut taints = Vec::new();
    for spec in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let Some((key_value, effect)) = spec.rsplit_once(':') else {
            return Err(format!("invalid taint spec: {spec}"));
        };
        if !matches!(effect, "NoSchedule" | "PreferNoSchedule" | "NoExecute") {
            return Err(format!("invalid taint effect: {effect}, unsupported taint effect"));
        }
        let (key, value) = match key_value.split_once('=') {
            Some((key, value)) => (key, Some(value.to_owned())),
            None => (key_value, None),
        };
        if key.is_empty() {
            return Err(format!("invalid taint spec: {spec}"));
        }
        taints.push(Taint { key: key.to_owned(), value, effect: effect.to_owned(), ..Taint::default() });
    }
    Ok(taints)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_and_taints_parse_as_upstream_writes_them() {
        let labels = node_labels("a=1, zone=b,empty=").unwrap();
        assert_eq!(labels.len(), 3);
        assert_eq!(labels["empty"], "");
        assert!(node_labels("novalue").unwrap_err().contains("key=value"));
        let taints = taints("dedicated=infra:NoSchedule,gpu:NoExecute").unwrap();
        assert_eq!(taints[0].value.as_deref(), Some("infra"));
        assert_eq!((taints[1].key.as_str(), taints[1].value.as_deref()), ("gpu", None));
        assert_eq!(
            super::taints("a=b:Sometimes").unwrap_err(),
            "invalid taint effect: Sometimes, unsupported taint effect"
        );
        assert_eq!(super::taints("nothing").unwrap_err(), "invalid taint spec: nothing");
    }
}
