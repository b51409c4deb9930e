//! Encryption at rest (`--encryption-provider-config`), as kube-apiserver does it: an
//! EncryptionConfiguration ([`config`]) names, per resource, the providers that turn objects into
//! what the store keeps ([`providers`]), and [`EncryptedStore`] applies them around any
//! keel-store, so the watch cache, the handlers and every controller inside keel-apiserver see
//! plain objects while the store (embedded or etcd) holds upstream's `k8s:enc:...` values.
//!
//! Resources are found from their store keys: `/registry/<plural>/...` (with upstream's historical
//! names: `services/specs`, `minions`, `controllers`) for built-in resources, and
//! `/registry/<group>/<plural>/...` for custom ones, so `*.*` and `*.<group>` cover custom
//! resources created after start, as upstream's do. A resource no rule names is stored as it is,
//! and reading an encrypted value for it fails (upstream's identity EncryptCheck).
//!
//! Rotation is upstream's: list the new key first (keeping the old one after it), restart, rewrite
//! every object (`kubectl get secrets -A -o json | kubectl replace -f -`: an update that changes
//! nothing still writes a value read with an old key, see [`keel_store::Store::is_stale`]), then
//! drop the old key.

pub mod config;
pub mod providers;
mod store;

use std::collections::HashMap;
use std::sync::Arc;

use keel_api::resources::RESOURCES;

pub use config::EncryptionConfiguration;
pub use providers::Transformer;
pub use store::EncryptedStore;

/// The transformer of each resource a configuration names.
#[derive(Debug, Default)]
pub struct Transformers {
    /// By group and resource as configured (`*` for either when the rule says so).
    rules: HashMap<(String, String), Arc<Transformer>>,
    /// Built-in resources by their store key prefix (`/registry/secrets/`), resolved at start.
    builtin: HashMap<String, Option<Arc<Transformer>>>,
}

impl Transformers {
    /// The transformers of a validated configuration: upstream's
    /// getTransformerOverridesAndKMSPluginProbes (a rule masked by an earlier `*.<group>` or `*.*`
    /// is an error; a resource in several lists gets every list's providers in turn).
    pub fn new(config: &EncryptionConfiguration) -> Result<Transformers, String> {
        let mut lists: HashMap<(String, String), Transformer> = HashMap::new();
        for resource_config in &config.resources {
            for resource in &resource_config.resources {
                let (group, name) = config::parse_group_resource(resource);
                for mask in [(group, "*"), ("*", "*")] {
                    if lists.contains_key(&(mask.0.to_owned(), mask.1.to_owned())) {
                        return Err(format!(
                            "error while building transformers: resource {:?} is masked by earlier rule {:?}",
                            yaml_name(group, name),
                            yaml_name(mask.0, mask.1)
                        ));
                    }
                }
                let transformer = Transformer::new(&resource_config.providers)
                    .map_err(|e| format!("error while building transformers: {e}"))?;
                match lists.entry((group.to_owned(), name.to_owned())) {
                    std::collections::hash_map::Entry::Occupied(mut listed) => {
                        listed.get_mut().extend(transformer);
                    }
                    std::collections::hash_map::Entry::Vacant(slot) => {
                        slot.insert(transformer);
                    }
                }
            }
        }
        let rules: HashMap<_, _> = lists.into_iter().map(|(gr, t)| (gr, Arc::new(t))).collect();
        let mut transformers = Transformers { rules, builtin: HashMap::new() };
        // Built-in resources sharing keys (events and events.k8s.io events) are stored as the
        // core group's, and configured as it (validation refuses `*.events.k8s.io`).
        for resource in RESOURCES.iter().filter(|r| !r.custom) {
            let prefix = resource.key_prefix();
            let found = transformers.lookup(resource.group, resource.plural);
            match transformers.builtin.get(&prefix) {
                Some(_) if !resource.group.is_empty() => {}
                _ => {
                    transformers.builtin.insert(prefix, found);
                }
            }
        }
        Ok(transformers)
    }

    /// Reads and checks `--encryption-provider-config`.
    pub fn load(path: &std::path::Path) -> Result<Transformers, String> {
        Transformers::new(&EncryptionConfiguration::load(path)?)
    }

    /// The transformer of a group and resource: its own rule, else its group's `*.<group>`, else `*.*`.
    fn lookup(&self, group: &str, resource: &str) -> Option<Arc<Transformer>> {
        [(group, resource), (group, "*"), ("*", "*")]
            .into_iter()
            .find_map(|(g, r)| self.rules.get(&(g.to_owned(), r.to_owned())).cloned())
    }

    /// The transformer for the object at a store key; `None` for keys stored as they are.
    pub fn for_key(&self, key: &str) -> Option<Arc<Transformer>> {
        let rest = key.strip_prefix("/registry/")?;
        let mut segments = rest.splitn(3, '/');
        let first = segments.next()?;
        let second = segments.next()?;
        if first.contains('.') {
            // `/registry/<group>/<plural>/`: a custom resource (or the CRDs themselves).
            return self.lookup(first, second);
        }
        let one = format!("/registry/{first}/");
        if let Some(found) = self.builtin.get(&one) {
            return found.clone();
        }
        self.builtin.get(&format!("{one}{second}/")).cloned().flatten()
    }
}

/// A group resource as upstream's grYAMLString shows it in a masking error.
fn yaml_name(group: &str, resource: &str) -> String {
    match (group, resource) {
        ("", "*") => "*.".into(),
        ("", resource) => resource.into(),
        (group, resource) => format!("{resource}.{group}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const K32: &str = "MTIzNDU2Nzg5MDEyMzQ1Njc4OTAxMjM0NTY3ODkwMTI=";

    fn transformers(lists: &str) -> Result<Transformers, String> {
        let yaml = format!(
            "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n{lists}"
        );
        let config = EncryptionConfiguration::parse(yaml.as_bytes()).unwrap();
        assert!(config.validate().is_empty(), "{:?}", config.validate());
        Transformers::new(&config)
    }

    fn aesgcm(resources: &str) -> String {
        format!(
            "- resources: [{resources}]\n  providers: [{{aesgcm: {{keys: [{{name: k, secret: {K32}}}]}}}}]\n"
        )
    }

    #[test]
    fn keys_find_their_resources() {
        let t = transformers(&format!(
            "{}{}",
            aesgcm("secrets, services, nodes"),
            aesgcm("'*.apps', '*.example.com'")
        ))
        .unwrap();
        for key in [
            "/registry/secrets/default/s",
            "/registry/services/specs/default/web",
            "/registry/minions/n1",
            "/registry/deployments/default/d",
            "/registry/example.com/widgets/default/w",
        ] {
            assert!(t.for_key(key).is_some(), "{key} is encrypted");
        }
        for key in [
            "/registry/configmaps/default/c",
            "/registry/services/endpoints/default/web",
            "/registry/other.io/widgets/default/w",
            "/registry/apiextensions.k8s.io/customresourcedefinitions/widgets.example.com",
            "/elsewhere/secrets/x",
        ] {
            assert!(t.for_key(key).is_none(), "{key} is not");
        }
        let events = transformers(&aesgcm("events")).unwrap();
        assert!(
            events.for_key("/registry/events/default/e").is_some(),
            "events.k8s.io shares core events' keys"
        );
        let all = transformers(&aesgcm("'*.*'")).unwrap();
        assert!(
            all.for_key("/registry/apiextensions.k8s.io/customresourcedefinitions/w.example.com").is_some()
        );
        assert!(all.for_key("/registry/other.io/widgets/default/w").is_some());
    }

    #[test]
    fn masked_rules_are_refused() {
        assert_eq!(
            transformers(&format!("{}{}", aesgcm("'*.'"), aesgcm("secrets"))).unwrap_err(),
            r#"error while building transformers: resource "secrets" is masked by earlier rule "*.""#
        );
        assert_eq!(
            transformers(&format!("{}{}", aesgcm("'*.*'"), aesgcm("deployments.apps"))).unwrap_err(),
            r#"error while building transformers: resource "deployments.apps" is masked by earlier rule "*.*""#
        );
        // A later wildcard does not mask an earlier rule: secrets keep their own.
        assert!(transformers(&format!("{}{}", aesgcm("secrets"), aesgcm("'*.*'"))).is_ok());
    }
}
