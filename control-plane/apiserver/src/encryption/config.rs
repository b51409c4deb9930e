//! `--encryption-provider-config`: an apiserver.config.k8s.io/v1 EncryptionConfiguration read and
//! checked as upstream's encryptionconfig.LoadEncryptionConfig does, with its messages
//! (k8s.io/apiserver/pkg/apis/apiserver/validation/validation_encryption.go).

use base64::Engine;
use keel_api::status::{FieldError, FieldErrorKind};
use serde::Deserialize;
use serde_json::Value;

/// The one version and kind upstream's decoder registers for this file.
const API_VERSION: &str = "apiserver.config.k8s.io/v1";
const KIND: &str = "EncryptionConfiguration";
/// The scheme upstream's encryptionconfig package decodes with, as its errors name it.
const SCHEME: &str = "pkg/runtime/scheme.go:110";

const AES_KEY_SIZES: &[usize] = &[16, 24, 32];
const SECRETBOX_KEY_SIZES: &[usize] = &[32];

/// The file as written (`resources[].resources` and `resources[].providers`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EncryptionConfiguration {
    #[serde(default)]
    pub api_version: String,
    #[serde(default)]
    pub kind: String,
    #[serde(default, deserialize_with = "null_as_empty")]
    pub resources: Vec<ResourceConfiguration>,
}

/// Which resources one list of providers applies to; the first provider writes.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct ResourceConfiguration {
    #[serde(default, deserialize_with = "null_as_empty")]
    pub resources: Vec<String>,
    #[serde(default, deserialize_with = "null_as_empty")]
    pub providers: Vec<ProviderConfiguration>,
}

/// Exactly one of its fields is set.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct ProviderConfiguration {
    pub aesgcm: Option<KeysConfiguration>,
    pub aescbc: Option<KeysConfiguration>,
    pub secretbox: Option<KeysConfiguration>,
    pub identity: Option<Value>,
    /// Envelope encryption through a KMS plugin: parsed only to be refused (Keel has no KMS client).
    pub kms: Option<Value>,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct KeysConfiguration {
    #[serde(default, deserialize_with = "null_as_empty")]
    pub keys: Vec<Key>,
}

/// A list that is `null` (or absent) is empty, as a nil Go slice.
fn null_as_empty<'de, D, T>(deserializer: D) -> Result<Vec<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Ok(Option::<Vec<T>>::deserialize(deserializer)?.unwrap_or_default())
}

/// A named key; `secret` is its bytes in standard base64.
#[derive(Clone, Default, Deserialize)]
pub struct Key {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub secret: String,
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Key").field("name", &self.name).field("secret", &"REDACTED").finish()
    }
}

impl EncryptionConfiguration {
    /// Reads, decodes and validates the file: upstream's loadConfig, errors worded as its
    /// (`error while parsing file: ...`).
    pub fn load(path: &std::path::Path) -> Result<EncryptionConfiguration, String> {
        let shown = path.display();
        let bytes = std::fs::read(path).map_err(|e| {
            format!(
                "error while parsing file: error while loading file: error reading encryption provider configuration file {:?}: open {shown}: {}",
                shown.to_string(),
                crate::audit::policy::io_error(&e)
            )
        })?;
        if bytes.is_empty() {
            return Err(format!(
                "error while parsing file: error while loading file: encryption provider configuration file {:?} is empty",
                shown.to_string()
            ));
        }
        let config = EncryptionConfiguration::parse(&bytes).map_err(|e| {
            format!(
                "error while parsing file: error decoding encryption provider configuration file {:?}: {e}",
                shown.to_string()
            )
        })?;
        let errors = config.validate();
        if !errors.is_empty() {
            return Err(format!("error while parsing file: {}", aggregate(&errors)));
        }
        Ok(config)
    }

    /// YAML or JSON, with its apiVersion and kind checked as the scheme's decoder checks them.
    /// Unlike upstream, a refusal never quotes the file: it holds keys.
    pub fn parse(bytes: &[u8]) -> Result<EncryptionConfiguration, String> {
        let document: Value = serde_yaml_ng::from_slice(bytes).map_err(|e| format!("yaml: {e}"))?;
        let text = |key: &str| document.get(key).and_then(Value::as_str).unwrap_or_default().to_owned();
        let (api_version, kind) = (text("apiVersion"), text("kind"));
        if kind.is_empty() {
            return Err("Object 'Kind' is missing".into());
        }
        if api_version != API_VERSION || kind != KIND {
            return Err(format!(
                "no kind {kind:?} is registered for version {api_version:?} in scheme {SCHEME:?}"
            ));
        }
        serde_json::from_value(document).map_err(|e| format!("json: {e}"))
    }

    /// upstream's ValidateEncryptionConfiguration (reload false).
    pub fn validate(&self) -> Vec<FieldError> {
        let mut errors = Vec::new();
        if self.resources.is_empty() {
            errors.push(FieldError::required("resources", "at least one resources is required"));
            return errors;
        }
        for (i, conf) in self.resources.iter().enumerate() {
            let resources_path = format!("resources[{i}].resources");
            let providers_path = format!("resources[{i}].providers");
            if conf.resources.is_empty() {
                errors.push(FieldError::required(
                    &resources_path,
                    &format!("at least one {resources_path} is required"),
                ));
            }
            validate_overlap(&conf.resources, &resources_path, &mut errors);
            validate_names(&conf.resources, &resources_path, &mut errors);
            if conf.providers.is_empty() {
                errors.push(FieldError::required(
                    &providers_path,
                    &format!("at least one {providers_path} is required"),
                ));
            }
            for (j, provider) in conf.providers.iter().enumerate() {
                let path = format!("{providers_path}[{j}]");
                let set = provider.set();
                if set.is_empty() {
                    errors.push(invalid(
                        &path,
                        &go_provider(provider),
                        "provider does not contain any of the expected providers: KMS, AESGCM, AESCBC, Secretbox, Identity",
                    ));
                    continue;
                }
                if set.len() > 1 {
                    errors.push(invalid(
                        &path,
                        &go_provider(provider),
                        "more than one provider specified in a single element, should split into different list elements",
                    ));
                    continue;
                }
                let (keys, name, sizes) = match (&provider.aesgcm, &provider.aescbc, &provider.secretbox) {
                    (Some(keys), _, _) => (keys, "aesgcm", AES_KEY_SIZES),
                    (_, Some(keys), _) => (keys, "aescbc", AES_KEY_SIZES),
                    (_, _, Some(keys)) => (keys, "secretbox", SECRETBOX_KEY_SIZES),
                    _ => continue,
                };
                validate_keys(&keys.keys, &format!("{path}.{name}.keys"), sizes, &mut errors);
            }
        }
        errors
    }
}

impl ProviderConfiguration {
    /// The names of the providers this element sets.
    fn set(&self) -> Vec<&'static str> {
        [
            ("kms", self.kms.is_some()),
            ("aesgcm", self.aesgcm.is_some()),
            ("aescbc", self.aescbc.is_some()),
            ("secretbox", self.secretbox.is_some()),
            ("identity", self.identity.is_some()),
        ]
        .into_iter()
        .filter_map(|(name, set)| set.then_some(name))
        .collect()
    }
}

/// A group and resource as schema.ParseGroupResource reads `resource.group` (the first dot splits).
pub fn parse_group_resource(text: &str) -> (&str, &str) {
    match text.split_once('.') {
        Some((resource, group)) => (group, resource),
        None => ("", text),
    }
}

fn validate_overlap(resources: &[String], path: &str, errors: &mut Vec<FieldError>) {
    if resources.len() < 2 {
        return;
    }
    let parsed: Vec<(&str, &str)> = resources.iter().map(|r| parse_group_resource(r)).collect();
    let (mut overlap, mut duplicate) = (false, false);
    for (i, r1) in parsed.iter().enumerate() {
        for (j, r2) in parsed.iter().enumerate() {
            if i == j {
                continue;
            }
            if r1 == r2 && !duplicate {
                duplicate = true;
                continue;
            }
            if overlap {
                continue;
            }
            if *r1 == ("*", "*") {
                overlap = true;
                continue;
            }
            if r1.0 != r2.0 {
                continue;
            }
            if r1.1 == "*" || r2.1 == "*" {
                overlap = true;
            }
        }
    }
    // Upstream's field errors show a slice as JSON.
    let shown = serde_json::to_string(resources).unwrap_or_default();
    if duplicate {
        errors.push(invalid(path, &shown, "the same resource cannot be specified multiple times"));
    }
    if overlap {
        errors.push(invalid(
            path,
            &shown,
            "using overlapping resources such as 'secrets' and '*.' in the same resource list is not allowed as they will be masked",
        ));
    }
}

fn validate_names(resources: &[String], path: &str, errors: &mut Vec<FieldError>) {
    for (j, resource) in resources.iter().enumerate() {
        let field = format!("{path}[{j}]");
        let (group, name) = parse_group_resource(resource);
        let detail = if resource.chars().any(char::is_uppercase) {
            "resource name should not contain capital letters"
        } else if resource == "*" {
            "use '*.' to encrypt all the resources from core API group or *.* to encrypt all resources"
        } else if matches!(
            resource.as_str(),
            "apiserveripinfo" | "serviceipallocations" | "servicenodeportallocations"
        ) {
            "resources which do not have REST API/s cannot be encrypted"
        } else if group == "events.k8s.io" {
            "'*.events.k8s.io' objects are stored using the 'events' API group in etcd. Use 'events' instead in the config file"
        } else if group == "extensions" {
            "'extensions' group has been removed and cannot be used for encryption"
        } else if group == "*" && name != "*" {
            "encrypting the same resource across groups is not supported"
        } else {
            continue;
        };
        errors.push(invalid(&field, &format!("{resource:?}"), detail));
    }
}

fn validate_keys(keys: &[Key], path: &str, sizes: &[usize], errors: &mut Vec<FieldError>) {
    if keys.is_empty() {
        errors.push(FieldError::required(path, "at least one keys is required"));
        return;
    }
    for (i, key) in keys.iter().enumerate() {
        let path = format!("{path}[{i}]");
        if key.name.is_empty() {
            errors.push(FieldError::required(&format!("{path}.name"), "name is a mandatory field for a key"));
        }
        if key.secret.is_empty() {
            errors.push(FieldError::required(
                &format!("{path}.secret"),
                "secret is a mandatory field for a key",
            ));
            continue;
        }
        let field = format!("{path}.secret");
        match base64::engine::general_purpose::STANDARD.decode(&key.secret) {
            Err(_) => errors.push(invalid(&field, "\"REDACTED\"", "secrets must be base64 encoded")),
            Ok(secret) if !sizes.contains(&secret.len()) => errors.push(invalid(
                &field,
                "\"REDACTED\"",
                &format!(
                    "secret is not of the expected length, got {}, expected one of [{}]",
                    secret.len(),
                    sizes.iter().map(ToString::to_string).collect::<Vec<_>>().join(" ")
                ),
            )),
            Ok(_) => {}
        }
    }
}

/// An Invalid error whose value is already shown as Go shows it.
fn invalid(field: &str, shown: &str, detail: &str) -> FieldError {
    FieldError {
        field: field.to_owned(),
        kind: FieldErrorKind::Invalid,
        detail: format!("{shown}: {detail}"),
    }
}

/// A ProviderConfiguration as upstream's field errors show a struct: JSON of the internal type
/// (Go's field names). Unlike upstream, key secrets are shown as `[REDACTED]`, never as given.
fn go_provider(provider: &ProviderConfiguration) -> String {
    let keys = |config: &Option<KeysConfiguration>| match config {
        None => Value::Null,
        Some(config) => serde_json::json!({"Keys": config.keys.iter()
            .map(|k| serde_json::json!({"Name": k.name, "Secret": "[REDACTED]"}))
            .collect::<Vec<_>>()}),
    };
    let present = |set: bool| if set { serde_json::json!({}) } else { Value::Null };
    // Written out in Go's field order (serde_json's maps sort their keys).
    format!(
        r#"{{"AESGCM":{},"AESCBC":{},"Secretbox":{},"Identity":{},"KMS":{}}}"#,
        keys(&provider.aesgcm),
        keys(&provider.aescbc),
        keys(&provider.secretbox),
        present(provider.identity.is_some()),
        present(provider.kms.is_some())
    )
}

/// utilerrors.NewAggregate(...).Error(): one message alone, several as `[a, b]`, repeats once.
pub fn aggregate(errors: &[FieldError]) -> String {
    let mut seen = std::collections::HashSet::new();
    let messages: Vec<String> =
        errors.iter().map(ToString::to_string).filter(|m| seen.insert(m.clone())).collect();
    match messages.as_slice() {
        [one] => one.clone(),
        many => format!("[{}]", many.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errors(yaml: &str) -> String {
        let config = EncryptionConfiguration::parse(yaml.as_bytes()).unwrap();
        aggregate(&config.validate())
    }

    const HEADER: &str = "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\n";

    #[test]
    fn a_good_file_validates() {
        let config = EncryptionConfiguration::parse(
            format!("{HEADER}resources:\n- resources: [secrets, '*.apps']\n  providers:\n  - aesgcm: {{keys: [{{name: k1, secret: MTIzNDU2Nzg5MDEyMzQ1Ng==}}]}}\n  - identity: {{}}\n").as_bytes(),
        )
        .unwrap();
        assert!(config.validate().is_empty(), "{:?}", config.validate());
        assert_eq!(config.resources[0].providers.len(), 2);
        assert!(!format!("{config:?}").contains("MTIz"), "Debug never shows a key");
    }

    #[test]
    fn upstream_messages() {
        assert_eq!(
            errors(&format!("{HEADER}resources: []\n")),
            "resources: Required value: at least one resources is required"
        );
        assert_eq!(
            errors(&format!(
                "{HEADER}resources:\n- resources: [secrets, secrets, '*.']\n  providers: [{{identity: {{}}}}]\n"
            )),
            r#"[resources[0].resources: Invalid value: ["secrets","secrets","*."]: the same resource cannot be specified multiple times, resources[0].resources: Invalid value: ["secrets","secrets","*."]: using overlapping resources such as 'secrets' and '*.' in the same resource list is not allowed as they will be masked]"#
        );
        assert_eq!(
            errors(&format!(
                "{HEADER}resources:\n- resources: ['*', Secrets, events.events.k8s.io, x.extensions, secrets.*, serviceipallocations]\n  providers: [{{identity: {{}}}}]\n"
            )),
            "[resources[0].resources: Invalid value: [\"*\",\"Secrets\",\"events.events.k8s.io\",\"x.extensions\",\"secrets.*\",\"serviceipallocations\"]: \
             using overlapping resources such as 'secrets' and '*.' in the same resource list is not allowed as they will be masked, \
             resources[0].resources[0]: Invalid value: \"*\": use '*.' to encrypt all the resources from core API group or *.* to encrypt all resources, \
             resources[0].resources[1]: Invalid value: \"Secrets\": resource name should not contain capital letters, \
             resources[0].resources[2]: Invalid value: \"events.events.k8s.io\": '*.events.k8s.io' objects are stored using the 'events' API group in etcd. Use 'events' instead in the config file, \
             resources[0].resources[3]: Invalid value: \"x.extensions\": 'extensions' group has been removed and cannot be used for encryption, \
             resources[0].resources[4]: Invalid value: \"secrets.*\": encrypting the same resource across groups is not supported, \
             resources[0].resources[5]: Invalid value: \"serviceipallocations\": resources which do not have REST API/s cannot be encrypted]"
        );
        assert_eq!(
            errors(&format!(
                "{HEADER}resources:\n- resources: [secrets]\n  providers:\n  - aesgcm: {{keys: [{{name: k, secret: c2hvcnQ=}}, {{secret: '!!'}}]}}\n  - secretbox: {{keys: []}}\n"
            )),
            "[resources[0].providers[0].aesgcm.keys[0].secret: Invalid value: \"REDACTED\": secret is not of the expected length, got 5, expected one of [16 24 32], \
             resources[0].providers[0].aesgcm.keys[1].name: Required value: name is a mandatory field for a key, \
             resources[0].providers[0].aesgcm.keys[1].secret: Invalid value: \"REDACTED\": secrets must be base64 encoded, \
             resources[0].providers[1].secretbox.keys: Required value: at least one keys is required]"
        );
        assert_eq!(
            errors(&format!("{HEADER}resources:\n- resources: [secrets]\n  providers:\n  - {{}}\n")),
            r#"resources[0].providers[0]: Invalid value: {"AESGCM":null,"AESCBC":null,"Secretbox":null,"Identity":null,"KMS":null}: provider"#.to_owned() + " does not contain any of the expected providers: KMS, AESGCM, AESCBC, Secretbox, Identity"
        );
    }

    #[test]
    fn version_and_kind_are_checked() {
        assert_eq!(
            EncryptionConfiguration::parse(b"resources: []\n").unwrap_err(),
            "Object 'Kind' is missing"
        );
        assert_eq!(
            EncryptionConfiguration::parse(
                b"apiVersion: apiserver.config.k8s.io/v1beta1\nkind: EncryptionConfiguration\n"
            )
            .unwrap_err(),
            r#"no kind "EncryptionConfiguration" is registered for version "apiserver.config.k8s.io/v1beta1" in scheme "pkg/runtime/scheme.go:110""#
        );
    }

    #[test]
    fn group_resources_parse_as_upstream() {
        assert_eq!(parse_group_resource("secrets"), ("", "secrets"));
        assert_eq!(parse_group_resource("*."), ("", "*"));
        assert_eq!(parse_group_resource("*.*"), ("*", "*"));
        assert_eq!(parse_group_resource("widgets.example.com"), ("example.com", "widgets"));
    }
}
