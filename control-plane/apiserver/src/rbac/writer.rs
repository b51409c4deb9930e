//! The RBAC objects the server writes itself: the default policy at start ([`bootstrap`],
//! reconciled as [`reconcile`] says) and the aggregated ClusterRoles' rules as the roles they
//! aggregate change. Written through the handlers as the server's own writes (never refused for
//! escalation: the server is system:masters).

use futures::StreamExt;
use keel_api::resources;
use keel_api::status::ApiError;
use serde_json::{Value, json};

use super::bootstrap;
use super::reconcile::{self, Reconciled};
use crate::context::Context;
use crate::handlers::{Handlers, store_error};
use crate::objects;
use crate::request::{ResourceRequest, Verb};

const GROUP: &str = "rbac.authorization.k8s.io";

fn request(plural: &str, namespace: Option<&str>, verb: Verb) -> Result<ResourceRequest, ApiError> {
    let resource = resources::find(GROUP, "v1", plural)
        .ok_or_else(|| ApiError::Internal(format!("{plural} is not served")))?;
    Ok(ResourceRequest {
        resource,
        namespace: namespace.map(str::to_owned),
        name: None,
        subresource: None,
        verb,
    })
}

impl Handlers {
    /// Creates the default roles and bindings that are missing and reconciles those that exist
    /// (kube-apiserver's rbac/bootstrap-roles post-start hook).
    pub async fn ensure_bootstrap_policy(&self) -> Result<(), ApiError> {
        let ctx = Context::internal("kube-apiserver");
        let kinds: [(&str, Vec<Value>); 4] = [
            ("clusterroles", bootstrap::cluster_roles()),
            ("clusterrolebindings", bootstrap::cluster_role_bindings()),
            ("roles", bootstrap::roles()),
            ("rolebindings", bootstrap::role_bindings()),
        ];
        // Many at once: the store commits concurrent writes together (one sync for a group).
        let writes =
            kinds.into_iter().flat_map(|(plural, objects)| objects.into_iter().map(move |o| (plural, o)));
        let mut done = futures::stream::iter(writes)
            .map(|(plural, expected)| self.reconcile_default(&ctx, plural, expected))
            .buffer_unordered(32);
        while let Some(result) = done.next().await {
            result?;
        }
        Ok(())
    }

    async fn reconcile_default(&self, ctx: &Context, plural: &str, expected: Value) -> Result<(), ApiError> {
        let namespace = expected["metadata"]["namespace"].as_str().map(str::to_owned);
        let name = expected["metadata"]["name"].as_str().unwrap_or_default().to_owned();
        let create = request(plural, namespace.as_deref(), Verb::Create)?;
        let key = objects::key(create.resource, namespace.as_deref(), &name);
        let Some(current) = self.store.get(&key).await.map_err(store_error)? else {
            if let Some(namespace) = &namespace {
                self.ensure_namespace(namespace).await?;
            }
            return match self.create(ctx, &create, expected, false).await {
                Ok(_) | Err(ApiError::AlreadyExists { .. }) => Ok(()),
                Err(error) => Err(error),
            };
        };
        let existing = objects::served(create.resource, &current.value, current.mod_revision)?;
        let outcome = if plural.ends_with("bindings") {
            reconcile::binding(&existing, &expected)
        } else {
            reconcile::role(&existing, &expected)
        };
        let update = request(plural, namespace.as_deref(), Verb::Update)?;
        match outcome {
            Reconciled::Unchanged => Ok(()),
            Reconciled::Update(object) => {
                self.guarded_update(&update, &name, false, |_| Ok((object.clone(), None))).await.map(|_| ())
            }
            Reconciled::Recreate(object) => {
                let delete = request(plural, namespace.as_deref(), Verb::Delete)?;
                let options = crate::writes::DeleteOptions::default();
                match self.delete(&delete, &name, &options).await {
                    Ok(_) | Err(ApiError::NotFound { .. }) => {}
                    Err(error) => return Err(error),
                }
                self.create(ctx, &create, object, false).await.map(|_| ())
            }
        }
    }

    /// kube-system and kube-public hold default roles: they exist before them.
    async fn ensure_namespace(&self, namespace: &str) -> Result<(), ApiError> {
        let namespaces = resources::find("", "v1", "namespaces")
            .ok_or_else(|| ApiError::Internal("namespaces are not served".into()))?;
        let create = ResourceRequest {
            resource: namespaces,
            namespace: None,
            name: None,
            subresource: None,
            verb: Verb::Create,
        };
        let ctx = Context::internal("kube-apiserver");
        match self.create(&ctx, &create, json!({"metadata": {"name": namespace}}), false).await {
            Ok(_) | Err(ApiError::AlreadyExists { .. }) => Ok(()),
            Err(error) => Err(error),
        }
    }

    /// The clusterrole-aggregation controller's pass over the ClusterRoles as they are now.
    pub(crate) async fn aggregate_cluster_roles(&self, cluster_roles: &[Value]) -> Result<(), ApiError> {
        let ctx = Context::internal("clusterrole-aggregation-controller");
        let update = request("clusterroles", None, Verb::Update)?;
        for (name, rules) in reconcile::aggregate(cluster_roles) {
            self.guarded_update(&update, &name, false, |existing| {
                let mut role = existing.clone();
                role["rules"] = Value::Array(rules.clone());
                crate::field_manager::track(&ctx, &update, Some(existing), &mut role);
                Ok((role, None))
            })
            .await?;
        }
        Ok(())
    }
}
