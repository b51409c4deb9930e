//! What a pod's volumes hold (upstream's volume plugins' payloads): the files of configMap,
//! secret, downwardAPI and projected volumes (service account token, ConfigMap, Secret, downward
//! API) with their modes, from the objects the kubelet read for the pod ([`Sources`]); and the
//! hostPath type checks (persistentVolumeClaim volumes: [`crate::claims`]). Pure: the IO edge
//! fetches the sources and writes the payload with the [`crate::atomic_writer`].

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{
    ConfigMap, DownwardAPIVolumeFile, KeyToPath, PersistentVolume, PersistentVolumeClaim, Pod, Secret,
    ServiceAccountTokenProjection, Volume,
};

use crate::claims::Fetched;

use crate::pod_config::{PodFacts, field_value};

/// upstream's default file mode of configMap, secret, downwardAPI and projected volumes (0644).
pub const DEFAULT_MODE: i32 = 0o644;

/// The objects a pod's volumes and environment refer to, as read for one sync: `None` where the
/// API said not found. Tokens by [`token_key`].
#[derive(Debug, Clone, Default)]
pub struct Sources {
    pub config_maps: BTreeMap<String, Option<ConfigMap>>,
    pub secrets: BTreeMap<String, Option<Secret>>,
    pub tokens: BTreeMap<String, String>,
    /// The Service environment variables of the pod ([`crate::pod_config::service_environment`]);
    /// none until the kubelet has read the Services once (a static pod needs none).
    pub service_env: Option<BTreeMap<String, String>>,
    /// The claims of the persistentVolumeClaim volumes the containers use, by name, and the
    /// PersistentVolumes bound ones name, by name ([`crate::claims`]).
    pub claims: BTreeMap<String, Fetched<PersistentVolumeClaim>>,
    pub persistent_volumes: BTreeMap<String, Fetched<PersistentVolume>>,
    /// The Node's labels, read when one of those volumes has a node affinity.
    pub node_labels: Option<Fetched<BTreeMap<String, String>>>,
}

impl Sources {
    pub fn config_map(&self, name: &str) -> Option<&ConfigMap> {
        self.config_maps.get(name).and_then(Option::as_ref)
    }

    pub fn secret(&self, name: &str) -> Option<&Secret> {
        self.secrets.get(name).and_then(Option::as_ref)
    }
}

/// One file of a volume: its bytes and its mode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct File {
    pub data: Vec<u8>,
    pub mode: u32,
}

/// A volume's files by relative path.
pub type Payload = BTreeMap<String, File>;

/// The ConfigMaps and Secrets a pod refers to — through its volumes and its containers' env — and
/// its service account token projections: what a sync reads before it starts containers.
pub fn references(pod: &Pod) -> (BTreeSet<String>, BTreeSet<String>, Vec<ServiceAccountTokenProjection>) {
    let (mut config_maps, mut secrets, mut tokens) = (BTreeSet::new(), BTreeSet::new(), Vec::new());
    let Some(spec) = &pod.spec else { return (config_maps, secrets, tokens) };
    for volume in spec.volumes.iter().flatten() {
        if let Some(source) = &volume.config_map {
            config_maps.insert(source.name.clone());
        }
        if let Some(source) = &volume.secret {
            secrets.extend(source.secret_name.clone());
        }
        for projection in volume.projected.iter().flat_map(|p| p.sources.iter().flatten()) {
            if let Some(source) = &projection.config_map {
                config_maps.insert(source.name.clone());
            }
            if let Some(source) = &projection.secret {
                secrets.insert(source.name.clone());
            }
            if let Some(token) = &projection.service_account_token {
                tokens.push(token.clone());
            }
        }
    }
    for container in spec.init_containers.iter().flatten().chain(&spec.containers) {
        for from in container.env_from.iter().flatten() {
            config_maps.extend(from.config_map_ref.as_ref().map(|r| r.name.clone()));
            secrets.extend(from.secret_ref.as_ref().map(|r| r.name.clone()));
        }
        for env in container.env.iter().flatten() {
            let Some(from) = &env.value_from else { continue };
            config_maps.extend(from.config_map_key_ref.as_ref().map(|r| r.name.clone()));
            secrets.extend(from.secret_key_ref.as_ref().map(|r| r.name.clone()));
        }
    }
    (config_maps, secrets, tokens)
}

/// The key of a token in [`Sources::tokens`]: its audience and lifetime.
pub fn token_key(token: &ServiceAccountTokenProjection) -> String {
    format!("{}/{}", token.audience.as_deref().unwrap_or_default(), token.expiration_seconds.unwrap_or(3600))
}

fn mode(item: Option<i32>, default: Option<i32>) -> u32 {
    u32::try_from(item.or(default).unwrap_or(DEFAULT_MODE)).unwrap_or(0o644) & 0o777
}

/// Keys to files (upstream's MakePayload of configMap and secret volumes): every key, or the
/// items asked for — a missing key is an error unless the source is optional.
fn key_payload(
    data: BTreeMap<String, Vec<u8>>,
    items: Option<&Vec<KeyToPath>>,
    default_mode: Option<i32>,
    optional: bool,
    what: &str,
) -> Result<Payload, String> {
    let mut payload = Payload::new();
    match items.filter(|i| !i.is_empty()) {
        None => {
            for (key, bytes) in data {
                payload.insert(key, File { data: bytes, mode: mode(None, default_mode) });
            }
        }
        Some(items) => {
            for item in items {
                match data.get(&item.key) {
                    Some(bytes) => {
                        payload.insert(
                            item.path.clone(),
                            File { data: bytes.clone(), mode: mode(item.mode, default_mode) },
                        );
                    }
                    None if optional => {}
                    None if what == "configMap" => {
                        return Err(format!("configmap references non-existent config key: {}", item.key));
                    }
                    None => return Err(format!("references non-existent secret key: {}", item.key)),
                }
            }
        }
    }
    Ok(payload)
}

fn config_map_data(map: &ConfigMap) -> BTreeMap<String, Vec<u8>> {
    let mut data: BTreeMap<String, Vec<u8>> =
        map.data.clone().unwrap_or_default().into_iter().map(|(k, v)| (k, v.into_bytes())).collect();
    data.extend(map.binary_data.clone().unwrap_or_default().into_iter().map(|(k, v)| (k, v.0)));
    data
}

fn secret_data(secret: &Secret) -> BTreeMap<String, Vec<u8>> {
    let mut data: BTreeMap<String, Vec<u8>> =
        secret.data.clone().unwrap_or_default().into_iter().map(|(k, v)| (k, v.0)).collect();
    data.extend(secret.string_data.clone().unwrap_or_default().into_iter().map(|(k, v)| (k, v.into_bytes())));
    data
}

fn downward_payload(
    pod: &Pod,
    facts: &PodFacts,
    items: &[DownwardAPIVolumeFile],
    default_mode: Option<i32>,
) -> Result<Payload, String> {
    let mut payload = Payload::new();
    for item in items {
        let value = match (&item.field_ref, &item.resource_field_ref) {
            (Some(field), _) => field_value(pod, facts, &field.field_path)?,
            (None, Some(_)) => {
                return Err(format!("{}: resourceFieldRef is not supported by keel-kubelet yet", item.path));
            }
            (None, None) => continue,
        };
        payload.insert(
            item.path.clone(),
            File { data: value.into_bytes(), mode: mode(item.mode, default_mode) },
        );
    }
    Ok(payload)
}

/// The files of a ConfigMap or Secret (`kind` "configMap" or "secret") read as `data` (`None`:
/// not found) for a volume or projection: `None` items are all keys.
fn object_files(
    data: Option<BTreeMap<String, Vec<u8>>>,
    (kind, name): (&str, &str),
    items: Option<&Vec<KeyToPath>>,
    default_mode: Option<i32>,
    optional: Option<bool>,
) -> Result<Payload, String> {
    let optional = optional == Some(true);
    match data {
        Some(data) => key_payload(data, items, default_mode, optional, kind),
        None if optional => Ok(Payload::new()),
        None => Err(format!("{} {name:?} not found", kind.to_lowercase())),
    }
}

fn config_map_files(
    sources: &Sources,
    name: &str,
    items: Option<&Vec<KeyToPath>>,
    default_mode: Option<i32>,
    optional: Option<bool>,
) -> Result<Payload, String> {
    let data = sources.config_map(name).map(config_map_data);
    object_files(data, ("configMap", name), items, default_mode, optional)
}

fn secret_files(
    sources: &Sources,
    name: &str,
    items: Option<&Vec<KeyToPath>>,
    default_mode: Option<i32>,
    optional: Option<bool>,
) -> Result<Payload, String> {
    object_files(sources.secret(name).map(secret_data), ("secret", name), items, default_mode, optional)
}

/// The files of a configMap, secret, downwardAPI or projected volume; `None` for other volume
/// types (which are not files the kubelet writes). Errors in upstream's words: the
/// `MountVolume.SetUp failed for volume "x" : <this>` part.
pub fn payload(
    pod: &Pod,
    volume: &Volume,
    facts: &PodFacts,
    sources: &Sources,
) -> Option<Result<Payload, String>> {
    if let Some(source) = &volume.config_map {
        let items = source.items.as_ref();
        return Some(config_map_files(sources, &source.name, items, source.default_mode, source.optional));
    }
    if let Some(source) = &volume.secret {
        let name = source.secret_name.clone().unwrap_or_default();
        let items = source.items.as_ref();
        return Some(secret_files(sources, &name, items, source.default_mode, source.optional));
    }
    if let Some(source) = &volume.downward_api {
        let items = source.items.as_deref().unwrap_or_default();
        return Some(downward_payload(pod, facts, items, source.default_mode));
    }
    let projected = volume.projected.as_ref()?;
    let default_mode = projected.default_mode;
    let mut payload = Payload::new();
    for projection in projected.sources.iter().flatten() {
        let part = if let Some(source) = &projection.config_map {
            config_map_files(sources, &source.name, source.items.as_ref(), default_mode, source.optional)
        } else if let Some(source) = &projection.secret {
            secret_files(sources, &source.name, source.items.as_ref(), default_mode, source.optional)
        } else if let Some(source) = &projection.downward_api {
            downward_payload(pod, facts, source.items.as_deref().unwrap_or_default(), default_mode)
        } else if let Some(token) = &projection.service_account_token {
            match sources.tokens.get(&token_key(token)) {
                Some(jwt) => Ok(Payload::from([(
                    token.path.clone(),
                    File { data: jwt.clone().into_bytes(), mode: mode(None, default_mode) },
                )])),
                None => Err("failed to fetch token: the service account token was not issued".to_owned()),
            }
        } else {
            Err("this projected volume source is not supported by keel-kubelet yet".to_owned())
        };
        match part {
            Ok(part) => payload.extend(part),
            Err(error) => return Some(Err(error)),
        }
    }
    Some(Ok(payload))
}

/// What a hostPath's type asks of the path (upstream's hostPathTypeChecker).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostPathCheck {
    None,
    DirectoryOrCreate,
    Directory,
    FileOrCreate,
    File,
    Socket,
    CharDevice,
    BlockDevice,
}

/// The check of a hostPath `type`, or upstream's error for an unknown one.
pub fn host_path_check(kind: Option<&str>) -> Result<HostPathCheck, String> {
    Ok(match kind.unwrap_or_default() {
        "" => HostPathCheck::None,
        "DirectoryOrCreate" => HostPathCheck::DirectoryOrCreate,
        "Directory" => HostPathCheck::Directory,
        "FileOrCreate" => HostPathCheck::FileOrCreate,
        "File" => HostPathCheck::File,
        "Socket" => HostPathCheck::Socket,
        "CharDevice" => HostPathCheck::CharDevice,
        "BlockDevice" => HostPathCheck::BlockDevice,
        other => return Err(format!("invalid HostPathType {other}")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;
    use k8s_openapi::api::core::v1::{
        ConfigMapProjection, ConfigMapVolumeSource, DownwardAPIProjection, ObjectFieldSelector, PodSpec,
        ProjectedVolumeSource, SecretVolumeSource, VolumeProjection,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn pod() -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some("p".into()),
                namespace: Some("shop".into()),
                ..ObjectMeta::default()
            },
            spec: Some(PodSpec::default()),
            ..Pod::default()
        }
    }

    fn sources() -> Sources {
        let map = ConfigMap {
            data: Some(BTreeMap::from([("a".to_owned(), "1".to_owned()), ("b".to_owned(), "2".to_owned())])),
            ..ConfigMap::default()
        };
        let secret = Secret {
            data: Some(BTreeMap::from([("pw".to_owned(), ByteString(b"s3".to_vec()))])),
            ..Secret::default()
        };
        let ca = ConfigMap {
            data: Some(BTreeMap::from([("ca.crt".to_owned(), "PEM".to_owned())])),
            ..ConfigMap::default()
        };
        Sources {
            config_maps: BTreeMap::from([
                ("settings".to_owned(), Some(map)),
                ("kube-root-ca.crt".to_owned(), Some(ca)),
                ("gone".to_owned(), None),
            ]),
            secrets: BTreeMap::from([("db".to_owned(), Some(secret))]),
            tokens: BTreeMap::from([("/3607".to_owned(), "jwt".to_owned())]),
            ..Sources::default()
        }
    }

    fn volume(f: impl FnOnce(&mut Volume)) -> Volume {
        let mut volume = Volume { name: "v".into(), ..Volume::default() };
        f(&mut volume);
        volume
    }

    #[test]
    fn config_maps_and_secrets_as_upstream_lays_them_out() {
        let facts = PodFacts::default();
        let all = volume(|v| {
            v.config_map = Some(ConfigMapVolumeSource { name: "settings".into(), ..Default::default() });
        });
        let files = payload(&pod(), &all, &facts, &sources()).unwrap().unwrap();
        assert_eq!(files.keys().collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(files["a"], File { data: b"1".to_vec(), mode: 0o644 });
        let items = volume(|v| {
            v.config_map = Some(ConfigMapVolumeSource {
                name: "settings".into(),
                items: Some(vec![KeyToPath {
                    key: "b".into(),
                    path: "conf/b.txt".into(),
                    mode: Some(0o600),
                }]),
                default_mode: Some(0o640),
                ..Default::default()
            });
        });
        let files = payload(&pod(), &items, &facts, &sources()).unwrap().unwrap();
        assert_eq!(files["conf/b.txt"].mode, 0o600);
        let missing = volume(|v| {
            v.config_map = Some(ConfigMapVolumeSource { name: "gone".into(), ..Default::default() });
        });
        assert_eq!(
            payload(&pod(), &missing, &facts, &sources()).unwrap().unwrap_err(),
            "configmap \"gone\" not found"
        );
        let optional = volume(|v| {
            v.config_map = Some(ConfigMapVolumeSource {
                name: "gone".into(),
                optional: Some(true),
                ..Default::default()
            });
        });
        assert!(payload(&pod(), &optional, &facts, &sources()).unwrap().unwrap().is_empty());
        let bad_key = volume(|v| {
            v.secret = Some(SecretVolumeSource {
                secret_name: Some("db".into()),
                items: Some(vec![KeyToPath { key: "nope".into(), path: "x".into(), mode: None }]),
                ..Default::default()
            });
        });
        assert_eq!(
            payload(&pod(), &bad_key, &facts, &sources()).unwrap().unwrap_err(),
            "references non-existent secret key: nope"
        );
    }

    #[test]
    fn the_kube_api_access_volume() {
        let facts = PodFacts::default();
        let access = volume(|v| {
            v.projected = Some(ProjectedVolumeSource {
                default_mode: Some(0o644),
                sources: Some(vec![
                    VolumeProjection {
                        service_account_token: Some(ServiceAccountTokenProjection {
                            path: "token".into(),
                            expiration_seconds: Some(3607),
                            audience: None,
                        }),
                        ..Default::default()
                    },
                    VolumeProjection {
                        config_map: Some(ConfigMapProjection {
                            name: "kube-root-ca.crt".into(),
                            items: Some(vec![KeyToPath {
                                key: "ca.crt".into(),
                                path: "ca.crt".into(),
                                mode: None,
                            }]),
                            optional: None,
                        }),
                        ..Default::default()
                    },
                    VolumeProjection {
                        downward_api: Some(DownwardAPIProjection {
                            items: Some(vec![DownwardAPIVolumeFile {
                                path: "namespace".into(),
                                field_ref: Some(ObjectFieldSelector {
                                    field_path: "metadata.namespace".into(),
                                    ..Default::default()
                                }),
                                ..Default::default()
                            }]),
                        }),
                        ..Default::default()
                    },
                ]),
            });
        });
        let files = payload(&pod(), &access, &facts, &sources()).unwrap().unwrap();
        let text: BTreeMap<&str, &[u8]> =
            files.iter().map(|(k, f)| (k.as_str(), f.data.as_slice())).collect();
        assert_eq!(
            text,
            BTreeMap::from([("ca.crt", &b"PEM"[..]), ("namespace", b"shop"), ("token", b"jwt")])
        );
        let (config_maps, _, tokens) = references(&Pod {
            spec: Some(PodSpec { volumes: Some(vec![access]), ..PodSpec::default() }),
            ..pod()
        });
        assert_eq!(
            (config_maps.into_iter().collect::<Vec<_>>(), tokens.len()),
            (vec!["kube-root-ca.crt".to_owned()], 1)
        );
    }
}
