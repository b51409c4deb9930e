//! The paths and operations of served resources, as kube-apiserver's route builder documents them:
//! one path for a collection (list, create, deletecollection), one for an object (read, replace,
//! patch, delete), one per subresource, and `…ForAllNamespaces` lists of namespaced resources;
//! operation ids (`listCoreV1NamespacedPod`, `patchAppsV1NamespacedDeploymentScale`), parameters,
//! request bodies and responses, `x-kubernetes-action` and the `x-kubernetes-group-version-kind`
//! of the object each operation takes. Only what Keel serves is listed (no watch/ paths, no
//! proxy), and no connect subresources (exec, attach, portforward, pods' and nodes' proxy),
//! which relay to the kubelet or the pod rather than take objects. One neutral form renders to
//! both the v3 and the v2 documents.

mod render;

use super::{BuildError, SchemaSource};
use crate::resources::Resource;

const STATUS: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.Status";
const DELETE_OPTIONS: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions";
const PATCH: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.Patch";
/// A parameter: where it goes, its name, JSON type and description.
#[derive(Debug, Clone)]
struct Param {
    path: bool,
    name: &'static str,
    kind: &'static str,
    description: String,
}

fn query(name: &'static str, kind: &'static str, description: &str) -> Param {
    Param { path: false, name, kind, description: description.to_owned() }
}

fn pretty() -> Param {
    query("pretty", "string", "If 'true', the output is pretty printed.")
}
fn namespace() -> Param {
    Param {
        path: true,
        name: "namespace",
        kind: "string",
        description: "object name and auth scope, such as for teams and projects".into(),
    }
}
fn name_of(kind: &str) -> Param {
    Param { path: true, name: "name", kind: "string", description: format!("name of the {kind}") }
}

fn list_params() -> Vec<Param> {
    vec![
        query(
            "allowWatchBookmarks",
            "boolean",
            "allowWatchBookmarks requests watch events with type \"BOOKMARK\".",
        ),
        query("continue", "string", "The continue token of the previous page of a chunked list."),
        query(
            "fieldSelector",
            "string",
            "A selector to restrict the list of returned objects by their fields. Defaults to everything.",
        ),
        query(
            "labelSelector",
            "string",
            "A selector to restrict the list of returned objects by their labels. Defaults to everything.",
        ),
        query(
            "limit",
            "integer",
            "The maximum number of objects a list returns; the list metadata carries a continue token when more exist.",
        ),
        query(
            "resourceVersion",
            "string",
            "resourceVersion sets a constraint on what resource versions a request may be served from.",
        ),
        query(
            "resourceVersionMatch",
            "string",
            "resourceVersionMatch determines how resourceVersion is applied to list calls.",
        ),
        query(
            "sendInitialEvents",
            "boolean",
            "With watch=true, start the watch stream with the current objects and a bookmark marking their end.",
        ),
        query("timeoutSeconds", "integer", "Timeout for the list/watch call."),
        query(
            "watch",
            "boolean",
            "Watch for changes to the described resources and return them as a stream of add, update, and remove notifications.",
        ),
    ]
}

fn write_params(patch: bool) -> Vec<Param> {
    let mut params = vec![
        query(
            "dryRun",
            "string",
            "When present, indicates that modifications should not be persisted. Valid values are: - All: all dry run stages will be processed",
        ),
        query(
            "fieldManager",
            "string",
            if patch {
                "fieldManager is a name associated with the actor or entity that is making these changes; required for apply requests (application/apply-patch)."
            } else {
                "fieldManager is a name associated with the actor or entity that is making these changes."
            },
        ),
        query(
            "fieldValidation",
            "string",
            "How the server handles unknown or duplicate fields in the request body: Ignore, Warn (the default) or Strict.",
        ),
    ];
    if patch {
        params.push(query("force", "boolean", "Force apply requests: re-acquire fields other managers own. Must be unset for non-apply patches."));
    }
    params
}

fn delete_params() -> Vec<Param> {
    vec![
        query(
            "dryRun",
            "string",
            "When present, indicates that modifications should not be persisted. Valid values are: - All: all dry run stages will be processed",
        ),
        query(
            "gracePeriodSeconds",
            "integer",
            "The duration in seconds before the object should be deleted; zero means delete immediately.",
        ),
        query(
            "orphanDependents",
            "boolean",
            "Deprecated: please use the PropagationPolicy. Should the dependent objects be orphaned.",
        ),
        query(
            "propagationPolicy",
            "string",
            "Whether and how garbage collection will be performed: Orphan, Background or Foreground.",
        ),
    ]
}

/// What an operation takes as its body.
#[derive(Debug, Clone)]
enum Body {
    None,
    /// An object of this definition (required).
    Object(String),
    /// A patch of any of the patch types; strategic merge patch only for built-in kinds (custom
    /// resources have no patch strategies: kubectl apply reads this to choose a merge patch).
    Patch {
        strategic: bool,
    },
    /// DeleteOptions (optional).
    DeleteOptions,
}

#[derive(Debug, Clone)]
struct Operation {
    method: &'static str,
    id: String,
    description: String,
    action: &'static str,
    gvk: (String, String, String),
    params: Vec<Param>,
    body: Body,
    /// Status codes with their description, all answering `response`.
    codes: &'static [(u16, &'static str)],
    response: String,
    list: bool,
    tag: String,
}

/// One path with its path-level parameters and operations.
#[derive(Debug, Clone)]
pub struct PathItem {
    pub path: String,
    params: Vec<Param>,
    operations: Vec<Operation>,
}

const OK: &[(u16, &str)] = &[(200, "OK")];
const OK_CREATED: &[(u16, &str)] = &[(200, "OK"), (201, "Created")];
const CREATED_ACCEPTED: &[(u16, &str)] = &[(200, "OK"), (201, "Created"), (202, "Accepted")];
const OK_ACCEPTED: &[(u16, &str)] = &[(200, "OK"), (202, "Accepted")];

/// `rbac.authorization.k8s.io` → `RbacAuthorization`, `` → `Core`.
fn group_camel(group: &str) -> String {
    if group.is_empty() {
        return "Core".into();
    }
    group.trim_end_matches(".k8s.io").split(['.', '-']).map(capitalize).collect()
}

fn capitalize(word: &str) -> String {
    let mut chars = word.chars();
    chars.next().map(|c| c.to_ascii_uppercase().to_string() + chars.as_str()).unwrap_or_default()
}

/// The tag upstream files operations under: `core_v1`, `apps_v1`, `rbacAuthorization_v1`.
fn tag(group: &str, version: &str) -> String {
    let camel = group_camel(group);
    let mut chars = camel.chars();
    let lower = chars.next().map(|c| c.to_ascii_lowercase().to_string() + chars.as_str()).unwrap_or_default();
    format!("{lower}_{version}")
}

/// Every path of one resource, or the schema it lacks.
pub fn resource_paths(r: &Resource, schemas: &dyn SchemaSource) -> Result<Vec<PathItem>, BuildError> {
    let mut items = Vec::new();
    add_resource_paths(r, schemas, &mut items)?;
    Ok(items)
}

fn definition(
    schemas: &dyn SchemaSource,
    group: &str,
    version: &str,
    kind: &str,
) -> Result<String, BuildError> {
    schemas.definition_of(group, version, kind).map(str::to_owned).ok_or_else(|| {
        BuildError::MissingSchema(format!("{}/{kind}", super::group_version_path(group, version)))
    })
}

fn add_resource_paths(
    r: &Resource,
    schemas: &dyn SchemaSource,
    items: &mut Vec<PathItem>,
) -> Result<(), BuildError> {
    let (group, version, kind) = (r.group, r.version, r.kind);
    let object = definition(schemas, group, version, kind)?;
    // Reviews are only created: no list.
    let list = if r.verbs.contains(&"list") {
        definition(schemas, group, version, &format!("{kind}List"))?
    } else {
        String::new()
    };
    let prefix = format!("/{}", super::group_version_path(group, version));
    let scope = if r.namespaced { "Namespaced" } else { "" };
    let id = |verb: &str, sub: &str| {
        format!("{verb}{}{}{scope}{kind}{sub}", group_camel(group), capitalize(version))
    };
    let collection = if r.namespaced {
        format!("{prefix}/namespaces/{{namespace}}/{}", r.plural)
    } else {
        format!("{prefix}/{}", r.plural)
    };
    let scope_params = || if r.namespaced { vec![namespace()] } else { Vec::new() };
    let gvk = (group.to_owned(), version.to_owned(), kind.to_owned());
    let tag = tag(group, version);
    let op =
        |method, id: String, description: String, action, params, body, codes, response: &str| Operation {
            method,
            id,
            description,
            action,
            gvk: gvk.clone(),
            params,
            body,
            codes,
            response: response.to_owned(),
            list: action == "list",
            tag: tag.clone(),
        };
    let has = |verb: &str| r.verbs.contains(&verb);

    let mut operations = Vec::new();
    if has("list") {
        operations.push(op(
            "get",
            id("list", ""),
            format!("list or watch objects of kind {kind}"),
            "list",
            list_params(),
            Body::None,
            OK,
            &list,
        ));
    }
    if has("create") {
        operations.push(op(
            "post",
            id("create", ""),
            format!("create a{} {kind}", article(kind)),
            "post",
            write_params(false),
            Body::Object(object.clone()),
            CREATED_ACCEPTED,
            &object,
        ));
    }
    if has("deletecollection") {
        let mut params = list_params();
        params.retain(|p| !matches!(p.name, "allowWatchBookmarks" | "watch"));
        params.extend(delete_params());
        let collection_id =
            format!("delete{}{}Collection{scope}{kind}", group_camel(group), capitalize(version));
        operations.push(op(
            "delete",
            collection_id,
            format!("delete collection of {kind}"),
            "deletecollection",
            params,
            Body::DeleteOptions,
            OK,
            STATUS,
        ));
    }
    if !operations.is_empty() {
        let mut params = scope_params();
        params.push(pretty());
        items.push(PathItem { path: collection.clone(), params, operations });
    }

    let named = format!("{collection}/{{name}}");
    let mut operations = Vec::new();
    if has("get") {
        operations.push(op(
            "get",
            id("read", ""),
            format!("read the specified {kind}"),
            "get",
            Vec::new(),
            Body::None,
            OK,
            &object,
        ));
    }
    if has("update") {
        operations.push(op(
            "put",
            id("replace", ""),
            format!("replace the specified {kind}"),
            "put",
            write_params(false),
            Body::Object(object.clone()),
            OK_CREATED,
            &object,
        ));
    }
    if has("patch") {
        operations.push(op(
            "patch",
            id("patch", ""),
            format!("partially update the specified {kind}"),
            "patch",
            write_params(true),
            Body::Patch { strategic: !r.custom },
            OK_CREATED,
            &object,
        ));
    }
    if has("delete") {
        operations.push(op(
            "delete",
            id("delete", ""),
            format!("delete a{} {kind}", article(kind)),
            "delete",
            delete_params(),
            Body::DeleteOptions,
            OK_ACCEPTED,
            &object,
        ));
    }
    if !operations.is_empty() {
        let mut params = vec![name_of(kind)];
        params.extend(scope_params());
        params.push(pretty());
        items.push(PathItem { path: named.clone(), params, operations });
    }

    // Connect subresources (exec, attach, portforward, proxy) relay, take no object: left out.
    for sub in r.subresources.iter().filter(|sub| !sub.is_connect()) {
        let (g, v) = if sub.group.is_empty() { (group, version) } else { (sub.group, sub.version) };
        let sub_definition = definition(schemas, g, v, sub.kind)?;
        let sub_gvk = (g.to_owned(), v.to_owned(), sub.kind.to_owned());
        let suffix = capitalize(sub.name);
        let mut params = vec![name_of(sub.kind)];
        params.extend(scope_params());
        params.push(pretty());
        let mut operations = Vec::new();
        let sub_op = |method, verb: &str, description: String, action, params, body, codes| Operation {
            gvk: sub_gvk.clone(),
            ..op(method, id(verb, &suffix), description, action, params, body, codes, &sub_definition)
        };
        let of = |what: &str| format!("{what} {} of the specified {kind}", sub.name);
        for verb in sub.verbs {
            match *verb {
                "get" => {
                    operations.push(sub_op("get", "read", of("read"), "get", Vec::new(), Body::None, OK));
                }
                "update" if sub.verbs.len() == 1 => {
                    // A subresource with a single write (namespaces/finalize) takes its
                    // parameters at the path, as upstream lists them.
                    params.splice(0..0, write_params(false));
                    operations.push(sub_op(
                        "put",
                        "replace",
                        of("replace"),
                        "put",
                        Vec::new(),
                        Body::Object(sub_definition.clone()),
                        OK_CREATED,
                    ));
                }
                "update" => operations.push(sub_op(
                    "put",
                    "replace",
                    of("replace"),
                    "put",
                    write_params(false),
                    Body::Object(sub_definition.clone()),
                    OK_CREATED,
                )),
                "patch" => operations.push(sub_op(
                    "patch",
                    "patch",
                    of("partially update"),
                    "patch",
                    write_params(true),
                    Body::Patch { strategic: !r.custom },
                    OK_CREATED,
                )),
                "create" => {
                    params.splice(0..0, write_params(false));
                    let description = format!("create {} of a{} {kind}", sub.name, article(kind));
                    operations.push(sub_op(
                        "post",
                        "create",
                        description,
                        "post",
                        Vec::new(),
                        Body::Object(sub_definition.clone()),
                        CREATED_ACCEPTED,
                    ));
                }
                _ => {}
            }
        }
        items.push(PathItem { path: format!("{named}/{}", sub.name), params, operations });
    }

    if r.namespaced && has("list") {
        let all = op(
            "get",
            format!("list{}{}{kind}ForAllNamespaces", group_camel(group), capitalize(version)),
            format!("list or watch objects of kind {kind}"),
            "list",
            Vec::new(),
            Body::None,
            OK,
            &list,
        );
        let mut params = list_params();
        params.push(pretty());
        items.push(PathItem { path: format!("{prefix}/{}", r.plural), params, operations: vec![all] });
    }
    Ok(())
}

/// `an` before a vowel, as upstream's descriptions ("create an Endpoints", "delete a Pod").
fn article(kind: &str) -> &'static str {
    if kind.starts_with(['A', 'E', 'I', 'O', 'U']) { "n" } else { "" }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_as_upstream() {
        assert_eq!(group_camel("rbac.authorization.k8s.io"), "RbacAuthorization");
        assert_eq!(group_camel("events.k8s.io"), "Events");
        assert_eq!(group_camel("apps"), "Apps");
        assert_eq!(tag("", "v1"), "core_v1");
        assert_eq!(tag("rbac.authorization.k8s.io", "v1"), "rbacAuthorization_v1");
        let schemas = super::super::Schemas::builtin();
        let deployments = crate::resources::find("apps", "v1", "deployments").unwrap();
        let items = resource_paths(deployments, schemas).unwrap();
        let ids: Vec<String> = items.iter().flat_map(|i| i.operations.iter().map(|o| o.id.clone())).collect();
        for id in [
            "listAppsV1NamespacedDeployment",
            "createAppsV1NamespacedDeployment",
            "deleteAppsV1CollectionNamespacedDeployment",
            "readAppsV1NamespacedDeployment",
            "patchAppsV1NamespacedDeploymentScale",
            "replaceAppsV1NamespacedDeploymentStatus",
            "listAppsV1DeploymentForAllNamespaces",
        ] {
            assert!(ids.iter().any(|i| i == id), "{id} not in {ids:?}");
        }
    }
}
