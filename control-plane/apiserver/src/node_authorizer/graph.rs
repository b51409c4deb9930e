//! The Node authorizer's graph (upstream's plugin/pkg/auth/authorizer/node graph): which objects
//! lead to which node. A pod bound to a node leads there, and so do the secrets, configmaps,
//! claims and service account it uses; a PersistentVolume leads to its claim and its
//! kubelet-visible secrets to it; a VolumeAttachment and a ResourceSlice to their node.
//!
//! Upstream keeps a general graph and walks it; here a pod's edges are folded into edges from each
//! object it uses straight to its node (counted, as several pods may use one object), so a lookup
//! is a hash probe, and only PersistentVolumes add a step (secret → PV → PVC → node).

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use k8s_openapi::api::core::v1::{PersistentVolume, Pod, PodSpec, SecretReference};
use k8s_openapi::api::resource::v1::ResourceSlice;
use k8s_openapi::api::storage::v1::VolumeAttachment;
use serde::de::DeserializeOwned;

use crate::cache::{Change, Entry};

/// The kinds of object the graph knows (upstream's vertex types).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    ConfigMap,
    Pod,
    PersistentVolumeClaim,
    PersistentVolume,
    ResourceClaim,
    ResourceSlice,
    Secret,
    ServiceAccount,
    VolumeAttachment,
}

/// One object of the graph.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Vertex {
    pub kind: Kind,
    pub namespace: String,
    pub name: String,
}

impl Vertex {
    pub fn new(kind: Kind, namespace: &str, name: &str) -> Vertex {
        Vertex { kind, namespace: namespace.to_owned(), name: name.to_owned() }
    }
}

/// Where an edge leads.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum To {
    Node(String),
    Vertex(Vertex),
}

/// The edges one source object (a pod, PV, attachment or slice) put in the graph, so that its
/// next version or its deletion takes exactly them out again.
type Edges = Vec<(Vertex, To)>;

#[derive(Debug, Default)]
pub struct Graph {
    /// By source: the store key of the object that added them.
    sources: HashMap<String, Edges>,
    /// Outgoing edges of each vertex, each with the number of sources that added it.
    edges: HashMap<Vertex, HashMap<To, u32>>,
    /// Nodes some edge leads to (upstream's node vertices): a node the graph does not know is
    /// refused outright.
    nodes: HashMap<String, u32>,
}

impl Graph {
    /// Whether `vertex` leads to node `node` (never, for a node no edge leads to).
    pub fn has_path(&self, node: &str, vertex: &Vertex) -> bool {
        if !self.nodes.contains_key(node) {
            return false;
        }
        let mut stack = vec![vertex];
        let mut seen = std::collections::HashSet::new();
        while let Some(current) = stack.pop() {
            if !seen.insert(current) {
                continue;
            }
            let Some(out) = self.edges.get(current) else { continue };
            for to in out.keys() {
                match to {
                    To::Node(name) if name == node => return true,
                    To::Node(_) => {}
                    To::Vertex(next) => stack.push(next),
                }
            }
        }
        false
    }

    /// The source object at store key `key` is now `edges` (none: deleted or leading nowhere).
    fn set(&mut self, key: &str, edges: Edges) {
        if let Some(old) = self.sources.remove(key) {
            for (from, to) in &old {
                self.remove_edge(from, to);
            }
        }
        if edges.is_empty() {
            return;
        }
        for (from, to) in &edges {
            if let To::Node(node) = to {
                *self.nodes.entry(node.clone()).or_default() += 1;
            }
            *self.edges.entry(from.clone()).or_default().entry(to.clone()).or_default() += 1;
        }
        self.sources.insert(key.to_owned(), edges);
    }

    fn remove_edge(&mut self, from: &Vertex, to: &To) {
        if let To::Node(node) = to
            && let Some(count) = self.nodes.get_mut(node)
        {
            *count -= 1;
            if *count == 0 {
                self.nodes.remove(node);
            }
        }
        if let Some(out) = self.edges.get_mut(from) {
            if let Some(count) = out.get_mut(to) {
                *count -= 1;
                if *count == 0 {
                    out.remove(to);
                }
            }
            if out.is_empty() {
                self.edges.remove(from);
            }
        }
    }

    /// Everything `source` says about the graph now (`None`: deleted), from its store bytes.
    pub fn apply(&mut self, source: Source, key: &str, bytes: Option<&[u8]>) {
        let edges = bytes.map(|bytes| source.edges(bytes)).unwrap_or_default();
        self.set(key, edges);
    }

    /// Forgets every object stored under `prefix` (a cache starting again from a snapshot).
    pub fn forget(&mut self, prefix: &str) {
        let keys: Vec<String> = self.sources.keys().filter(|k| k.starts_with(prefix)).cloned().collect();
        for key in keys {
            self.set(&key, Vec::new());
        }
    }
}

/// The resources whose objects add edges, in the order their caches are followed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Pods,
    PersistentVolumes,
    VolumeAttachments,
    ResourceSlices,
}

impl Source {
    pub const ALL: [Source; 4] =
        [Source::Pods, Source::PersistentVolumes, Source::VolumeAttachments, Source::ResourceSlices];

    /// (group, version, plural) of the resource.
    pub fn resource(self) -> (&'static str, &'static str, &'static str) {
        match self {
            Source::Pods => ("", "v1", "pods"),
            Source::PersistentVolumes => ("", "v1", "persistentvolumes"),
            Source::VolumeAttachments => ("storage.k8s.io", "v1", "volumeattachments"),
            Source::ResourceSlices => ("resource.k8s.io", "v1", "resourceslices"),
        }
    }

    fn edges(self, bytes: &[u8]) -> Edges {
        match self {
            // Most pod writes before scheduling (and every create) leave a pod without a node, and
            // such a pod adds no edge: read only its node name first, not the whole Pod.
            Source::Pods if parse::<Scheduled>(bytes).is_none_or(|pod| pod.spec.node_name.is_none()) => {
                Vec::new()
            }
            Source::Pods => parse::<Pod>(bytes).map(|pod| pod_edges(&pod)).unwrap_or_default(),
            Source::PersistentVolumes => {
                parse::<PersistentVolume>(bytes).map(|pv| pv_edges(&pv)).unwrap_or_default()
            }
            Source::VolumeAttachments => parse::<VolumeAttachment>(bytes)
                .map(|va| {
                    let name = va.metadata.name.unwrap_or_default();
                    to_node(Vertex::new(Kind::VolumeAttachment, "", &name), &va.spec.node_name)
                })
                .unwrap_or_default(),
            Source::ResourceSlices => parse::<ResourceSlice>(bytes)
                .map(|slice| {
                    let name = slice.metadata.name.unwrap_or_default();
                    to_node(
                        Vertex::new(Kind::ResourceSlice, "", &name),
                        &slice.spec.node_name.unwrap_or_default(),
                    )
                })
                .unwrap_or_default(),
        }
    }
}

/// A pod read only as far as its node (every other field skipped unread).
#[derive(Debug, serde::Deserialize)]
struct Scheduled {
    #[serde(default)]
    spec: ScheduledSpec,
}

#[derive(Debug, Default, serde::Deserialize)]
struct ScheduledSpec {
    #[serde(rename = "nodeName", default)]
    node_name: Option<serde::de::IgnoredAny>,
}

fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Option<T> {
    serde_json::from_slice(bytes).ok()
}

fn to_node(vertex: Vertex, node: &str) -> Edges {
    if node.is_empty() { Vec::new() } else { vec![(vertex, To::Node(node.to_owned()))] }
}

/// upstream's Graph.AddPod: a pod bound to a node leads there; unless it is a mirror pod, so do its
/// service account, secrets, configmaps, volume claims and resource claims.
fn pod_edges(pod: &Pod) -> Edges {
    let spec = pod.spec.clone().unwrap_or_default();
    let node = spec.node_name.clone().unwrap_or_default();
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    let pod_name = pod.metadata.name.clone().unwrap_or_default();
    let mut edges = to_node(Vertex::new(Kind::Pod, &namespace, &pod_name), &node);
    let mirror = pod
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(crate::admission::MIRROR_POD_ANNOTATION));
    if edges.is_empty() || mirror {
        return edges;
    }
    let mut uses = Vec::new();
    if let Some(account) = spec.service_account_name.as_deref().filter(|a| !a.is_empty()) {
        uses.push((Kind::ServiceAccount, account.to_owned()));
    }
    uses.extend(pod_secret_names(&spec).into_iter().map(|n| (Kind::Secret, n)));
    uses.extend(pod_configmap_names(&spec).into_iter().map(|n| (Kind::ConfigMap, n)));
    for volume in spec.volumes.iter().flatten() {
        if let Some(claim) = &volume.persistent_volume_claim {
            uses.push((Kind::PersistentVolumeClaim, claim.claim_name.clone()));
        } else if volume.ephemeral.is_some() {
            // upstream's ephemeral.VolumeClaimName: <pod>-<volume>.
            uses.push((Kind::PersistentVolumeClaim, format!("{pod_name}-{}", volume.name)));
        }
    }
    let statuses = pod.status.as_ref().and_then(|s| s.resource_claim_statuses.clone()).unwrap_or_default();
    for claim in spec.resource_claims.iter().flatten() {
        // upstream's resourceclaim.Name: the claim named, else the one made from the template.
        let name = match &claim.resource_claim_name {
            Some(name) => Some(name.clone()),
            None => {
                statuses.iter().find(|s| s.name == claim.name).and_then(|s| s.resource_claim_name.clone())
            }
        };
        uses.extend(name.map(|n| (Kind::ResourceClaim, n)));
    }
    if let Some(name) = pod
        .status
        .as_ref()
        .and_then(|s| s.extended_resource_claim_status.as_ref())
        .map(|s| s.resource_claim_name.clone())
    {
        uses.push((Kind::ResourceClaim, name));
    }
    for (kind, name) in uses {
        if !name.is_empty() {
            edges.push((Vertex::new(kind, &namespace, &name), To::Node(node.clone())));
        }
    }
    edges
}

/// Every container of a pod: init, regular and ephemeral (upstream's AllContainers), by the
/// fields the graph reads.
fn containers(
    spec: &PodSpec,
) -> impl Iterator<Item = (&[k8s_openapi::api::core::v1::EnvFromSource], &[k8s_openapi::api::core::v1::EnvVar])>
{
    let init = spec.init_containers.iter().flatten().map(|c| (c.env_from.as_deref(), c.env.as_deref()));
    let regular = spec.containers.iter().map(|c| (c.env_from.as_deref(), c.env.as_deref()));
    let ephemeral =
        spec.ephemeral_containers.iter().flatten().map(|c| (c.env_from.as_deref(), c.env.as_deref()));
    init.chain(regular)
        .chain(ephemeral)
        .map(|(from, env)| (from.unwrap_or_default(), env.unwrap_or_default()))
}

/// upstream's podutil.VisitPodSecretNames.
pub(crate) fn pod_secret_names(spec: &PodSpec) -> Vec<String> {
    let mut names: Vec<String> = spec.image_pull_secrets.iter().flatten().map(|r| r.name.clone()).collect();
    for (env_from, env) in containers(spec) {
        names.extend(env_from.iter().filter_map(|e| e.secret_ref.as_ref()).map(|r| r.name.clone()));
        names.extend(
            env.iter().filter_map(|e| e.value_from.as_ref()?.secret_key_ref.as_ref()).map(|r| r.name.clone()),
        );
    }
    for volume in spec.volumes.iter().flatten() {
        let name =
            |r: &Option<k8s_openapi::api::core::v1::LocalObjectReference>| r.as_ref().map(|r| r.name.clone());
        let found: Vec<String> = if let Some(v) = &volume.azure_file {
            vec![v.secret_name.clone()]
        } else if let Some(v) = &volume.cephfs {
            name(&v.secret_ref).into_iter().collect()
        } else if let Some(v) = &volume.cinder {
            name(&v.secret_ref).into_iter().collect()
        } else if let Some(v) = &volume.flex_volume {
            name(&v.secret_ref).into_iter().collect()
        } else if let Some(v) = &volume.projected {
            v.sources.iter().flatten().filter_map(|s| s.secret.as_ref()).map(|s| s.name.clone()).collect()
        } else if let Some(v) = &volume.rbd {
            name(&v.secret_ref).into_iter().collect()
        } else if let Some(v) = &volume.secret {
            v.secret_name.clone().into_iter().collect()
        } else if let Some(v) = &volume.scale_io {
            vec![v.secret_ref.name.clone()]
        } else if let Some(v) = &volume.iscsi {
            name(&v.secret_ref).into_iter().collect()
        } else if let Some(v) = &volume.storageos {
            name(&v.secret_ref).into_iter().collect()
        } else if let Some(v) = &volume.csi {
            name(&v.node_publish_secret_ref).into_iter().collect()
        } else {
            Vec::new()
        };
        names.extend(found);
    }
    names.retain(|n| !n.is_empty());
    names
}

/// upstream's podutil.VisitPodConfigmapNames.
pub(crate) fn pod_configmap_names(spec: &PodSpec) -> Vec<String> {
    let mut names = Vec::new();
    for (env_from, env) in containers(spec) {
        names.extend(env_from.iter().filter_map(|e| e.config_map_ref.as_ref()).map(|r| r.name.clone()));
        names.extend(
            env.iter()
                .filter_map(|e| e.value_from.as_ref()?.config_map_key_ref.as_ref())
                .map(|r| r.name.clone()),
        );
    }
    for volume in spec.volumes.iter().flatten() {
        if let Some(v) = &volume.projected {
            names.extend(
                v.sources.iter().flatten().filter_map(|s| s.config_map.as_ref()).map(|c| c.name.clone()),
            );
        } else if let Some(v) = &volume.config_map {
            names.push(v.name.clone());
        }
    }
    names.retain(|n| !n.is_empty());
    names
}

/// upstream's Graph.AddPV: a claimed PV leads to its claim, and its kubelet-visible secrets to it.
fn pv_edges(pv: &PersistentVolume) -> Edges {
    let spec = pv.spec.clone().unwrap_or_default();
    let Some(claim) = &spec.claim_ref else { return Vec::new() };
    let claim_namespace = claim.namespace.clone().unwrap_or_default();
    let pv_vertex = Vertex::new(Kind::PersistentVolume, "", pv.metadata.name.as_deref().unwrap_or_default());
    let claim_vertex =
        Vertex::new(Kind::PersistentVolumeClaim, &claim_namespace, claim.name.as_deref().unwrap_or_default());
    let mut edges = vec![(pv_vertex.clone(), To::Vertex(claim_vertex))];
    // upstream's pvutil.VisitPVSecretNames, kubelet-visible ones: a reference without a namespace
    // means the claim's (for the sources persisted before they had one).
    let or_claims = |namespace: &Option<String>| {
        namespace.clone().filter(|n| !n.is_empty()).unwrap_or_else(|| claim_namespace.clone())
    };
    let reference = |r: &Option<SecretReference>, default_to_claim: bool| -> Option<(String, String)> {
        let r = r.as_ref()?;
        let namespace =
            if default_to_claim { or_claims(&r.namespace) } else { r.namespace.clone().unwrap_or_default() };
        Some((namespace, r.name.clone().unwrap_or_default()))
    };
    let mut secrets: Vec<(String, String)> = Vec::new();
    if let Some(v) = &spec.azure_file {
        secrets.push((or_claims(&v.secret_namespace), v.secret_name.clone()));
    } else if let Some(v) = &spec.cephfs {
        secrets.extend(reference(&v.secret_ref, true));
    } else if let Some(v) = &spec.cinder {
        secrets.extend(reference(&v.secret_ref, false));
    } else if let Some(v) = &spec.flex_volume {
        secrets.extend(reference(&v.secret_ref, true));
    } else if let Some(v) = &spec.rbd {
        secrets.extend(reference(&v.secret_ref, true));
    } else if let Some(v) = &spec.scale_io {
        secrets.push((or_claims(&v.secret_ref.namespace), v.secret_ref.name.clone().unwrap_or_default()));
    } else if let Some(v) = &spec.iscsi {
        secrets.extend(reference(&v.secret_ref, true));
    } else if let Some(v) = &spec.storageos {
        let r = v.secret_ref.as_ref();
        secrets
            .extend(r.map(|r| (r.namespace.clone().unwrap_or_default(), r.name.clone().unwrap_or_default())));
    } else if let Some(v) = &spec.csi {
        for r in [&v.node_publish_secret_ref, &v.node_stage_secret_ref, &v.node_expand_secret_ref] {
            secrets.extend(reference(r, false));
        }
    }
    for (namespace, name) in secrets {
        if !name.is_empty() {
            edges.push((Vertex::new(Kind::Secret, &namespace, &name), To::Vertex(pv_vertex.clone())));
        }
    }
    edges
}

/// The graph as the authorizer reads it, kept current by [`Populator`].
#[derive(Debug, Default)]
pub struct SharedGraph {
    graph: RwLock<Graph>,
}

impl SharedGraph {
    pub fn has_path(&self, node: &str, vertex: &Vertex) -> bool {
        self.graph.read().unwrap_or_else(std::sync::PoisonError::into_inner).has_path(node, vertex)
    }

    pub(crate) fn write(&self) -> std::sync::RwLockWriteGuard<'_, Graph> {
        self.graph.write().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// upstream's graphPopulator: the graph follows the pods, PVs, attachments and slices in the
/// watch cache ([`crate::follow`]), one change at a time.
#[derive(Debug)]
pub struct Populator {
    pub graph: Arc<SharedGraph>,
    /// The source of each followed cache, by index, and the cache's key prefix.
    pub sources: Vec<(Source, String)>,
}

impl crate::follow::Follower for Populator {
    fn reset(&mut self, cache: usize, snapshot: &[Arc<Entry>]) {
        let Some((source, prefix)) = self.sources.get(cache) else { return };
        let mut graph = self.graph.write();
        graph.forget(prefix);
        for entry in snapshot {
            graph.apply(*source, &entry.key, Some(&entry.value));
        }
    }

    fn change(&mut self, cache: usize, change: &Change) {
        let Some(&(source, _)) = self.sources.get(cache) else { return };
        self.graph.write().apply(source, &change.key, change.new.as_deref().map(|e| &e.value[..]));
    }

    async fn settled(&mut self) {}
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn put(graph: &mut Graph, source: Source, key: &str, object: &serde_json::Value) {
        graph.apply(source, key, Some(&serde_json::to_vec(object).unwrap()));
    }

    fn secret(namespace: &str, name: &str) -> Vertex {
        Vertex::new(Kind::Secret, namespace, name)
    }

    fn pod(name: &str, node: Option<&str>, spec: serde_json::Value) -> serde_json::Value {
        let mut spec = spec;
        if let Some(node) = node {
            spec["nodeName"] = json!(node);
        }
        if spec.get("containers").is_none() {
            spec["containers"] = json!([{"name": "c", "image": "i"}]);
        }
        json!({"metadata": {"name": name, "namespace": "ns"}, "spec": spec})
    }

    #[test]
    fn a_bound_pod_leads_its_node_to_what_it_uses_and_no_other_node() {
        let mut graph = Graph::default();
        let spec = json!({
            "serviceAccountName": "sa",
            "imagePullSecrets": [{"name": "pull"}],
            "containers": [{"name": "c", "image": "i",
                "envFrom": [{"secretRef": {"name": "env-secret"}}, {"configMapRef": {"name": "env-cm"}}],
                "env": [{"name": "A", "valueFrom": {"secretKeyRef": {"name": "key-secret", "key": "k"}}}]}],
            "initContainers": [{"name": "i", "image": "i",
                "env": [{"name": "B", "valueFrom": {"configMapKeyRef": {"name": "init-cm", "key": "k"}}}]}],
            "volumes": [
                {"name": "s", "secret": {"secretName": "vol-secret"}},
                {"name": "p", "projected": {"sources": [{"secret": {"name": "proj-secret"}}, {"configMap": {"name": "proj-cm"}}]}},
                {"name": "claim", "persistentVolumeClaim": {"claimName": "data"}},
                {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
                {"name": "csi", "csi": {"driver": "d", "nodePublishSecretRef": {"name": "csi-secret"}}}
            ]
        });
        put(&mut graph, Source::Pods, "/registry/pods/ns/web", &pod("web", Some("n1"), spec));
        for name in ["pull", "env-secret", "key-secret", "vol-secret", "proj-secret", "csi-secret"] {
            assert!(graph.has_path("n1", &secret("ns", name)), "{name}");
            assert!(!graph.has_path("n2", &secret("ns", name)), "{name} on n2");
            assert!(!graph.has_path("n1", &secret("other", name)), "{name} in another namespace");
        }
        for name in ["env-cm", "init-cm", "proj-cm"] {
            assert!(graph.has_path("n1", &Vertex::new(Kind::ConfigMap, "ns", name)), "{name}");
        }
        assert!(graph.has_path("n1", &Vertex::new(Kind::ServiceAccount, "ns", "sa")));
        assert!(graph.has_path("n1", &Vertex::new(Kind::PersistentVolumeClaim, "ns", "data")));
        assert!(graph.has_path("n1", &Vertex::new(Kind::PersistentVolumeClaim, "ns", "web-scratch")));
        assert!(graph.has_path("n1", &Vertex::new(Kind::Pod, "ns", "web")));
        assert!(!graph.has_path("n1", &secret("ns", "unused")));
    }

    #[test]
    fn moving_or_deleting_a_pod_takes_its_edges_away_but_not_another_pods() {
        let mut graph = Graph::default();
        let uses = json!({"volumes": [{"name": "s", "secret": {"secretName": "shared"}}]});
        put(&mut graph, Source::Pods, "/registry/pods/ns/a", &pod("a", Some("n1"), uses.clone()));
        put(&mut graph, Source::Pods, "/registry/pods/ns/b", &pod("b", Some("n1"), uses.clone()));
        graph.apply(Source::Pods, "/registry/pods/ns/a", None);
        assert!(graph.has_path("n1", &secret("ns", "shared")), "b still uses it");
        put(&mut graph, Source::Pods, "/registry/pods/ns/b", &pod("b", Some("n2"), uses));
        assert!(!graph.has_path("n1", &secret("ns", "shared")));
        assert!(graph.has_path("n2", &secret("ns", "shared")));
        graph.forget("/registry/pods/");
        assert!(!graph.has_path("n2", &secret("ns", "shared")));
        assert!(graph.edges.is_empty() && graph.nodes.is_empty() && graph.sources.is_empty());
    }

    #[test]
    fn unbound_and_mirror_pods_lead_no_secret_anywhere() {
        let mut graph = Graph::default();
        let uses = json!({"volumes": [{"name": "s", "secret": {"secretName": "s"}}]});
        put(&mut graph, Source::Pods, "/registry/pods/ns/pending", &pod("pending", None, uses.clone()));
        let mut mirror = pod("mirror", Some("n1"), uses);
        mirror["metadata"]["annotations"] = json!({"kubernetes.io/config.mirror": "x"});
        put(&mut graph, Source::Pods, "/registry/pods/ns/mirror", &mirror);
        assert!(!graph.has_path("n1", &secret("ns", "s")));
        assert!(graph.has_path("n1", &Vertex::new(Kind::Pod, "ns", "mirror")));
        // Bound later (the binding's write), the pending pod's secret leads to its node.
        let uses = json!({"volumes": [{"name": "s", "secret": {"secretName": "s"}}]});
        put(&mut graph, Source::Pods, "/registry/pods/ns/pending", &pod("pending", Some("n1"), uses));
        assert!(graph.has_path("n1", &secret("ns", "s")));
    }

    #[test]
    fn a_persistent_volume_leads_through_its_claim_and_its_secrets_through_it() {
        let mut graph = Graph::default();
        let pv = json!({"metadata": {"name": "pv1"}, "spec": {
            "claimRef": {"namespace": "ns", "name": "data"},
            "csi": {"driver": "d", "volumeHandle": "h",
                    "nodeStageSecretRef": {"name": "stage", "namespace": "vault"},
                    "controllerPublishSecretRef": {"name": "controller", "namespace": "vault"}}}});
        put(&mut graph, Source::PersistentVolumes, "/registry/persistentvolumes/pv1", &pv);
        let pv1 = Vertex::new(Kind::PersistentVolume, "", "pv1");
        assert!(!graph.has_path("n1", &pv1), "no pod uses the claim yet");
        let uses = json!({"volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": "data"}}]});
        put(&mut graph, Source::Pods, "/registry/pods/ns/db", &pod("db", Some("n1"), uses));
        assert!(graph.has_path("n1", &pv1));
        assert!(graph.has_path("n1", &secret("vault", "stage")));
        assert!(!graph.has_path("n1", &secret("vault", "controller")), "not kubelet-visible");
        assert!(!graph.has_path("n2", &pv1));
    }

    #[test]
    fn attachments_and_slices_lead_to_their_node() {
        let mut graph = Graph::default();
        let va =
            json!({"metadata": {"name": "va1"}, "spec": {"attacher": "a", "nodeName": "n1", "source": {}}});
        put(&mut graph, Source::VolumeAttachments, "/registry/volumeattachments/va1", &va);
        let slice = json!({"metadata": {"name": "s1"}, "spec": {"driver": "d", "nodeName": "n2", "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1}}});
        put(&mut graph, Source::ResourceSlices, "/registry/resourceslices/s1", &slice);
        assert!(graph.has_path("n1", &Vertex::new(Kind::VolumeAttachment, "", "va1")));
        assert!(graph.has_path("n2", &Vertex::new(Kind::ResourceSlice, "", "s1")));
        assert!(!graph.has_path("n2", &Vertex::new(Kind::VolumeAttachment, "", "va1")));
    }
}
