//! A request's context, as upstream's request context carries it through the handler chain: who is
//! asking (set by authentication and impersonation), the manager its writes are recorded under in
//! managedFields, what a patch asked for unknown fields, and the warnings the request collects for
//! its `Warning` headers, and its audit record (annotations and bodies for its audit event). The chain ([`crate::chain`]) makes one per request and passes it to every
//! handler that writes; the server's own writes (objects it makes at start, the work of controllers
//! that run inside it) have one of their own ([`Context::internal`]).

use std::sync::Mutex;

use crate::auth::User;
use crate::validation::FieldValidation;

/// What the chain knows about the request being served.
#[derive(Debug)]
pub struct Context {
    /// The user the request acts as (the impersonated one when it impersonates).
    pub user: User,
    /// upstream's managerOrUserAgent: the `fieldManager`, else the User-Agent up to its first `/`.
    manager: String,
    /// The request's `fieldValidation` (for a patch, read where the patched object is typed, so
    /// retries on a conflict see it too).
    pub field_validation: FieldValidation,
    warnings: Mutex<Vec<String>>,
    /// The request's audit event in the making (disabled when it is not audited).
    pub audit: crate::audit::Record,
}

impl Context {
    /// A client's request as `user`, from its User-Agent and `fieldManager` query parameter.
    pub fn new(
        user: User,
        user_agent: Option<&str>,
        field_manager: Option<String>,
        field_validation: FieldValidation,
        audit: crate::audit::Record,
    ) -> Context {
        let manager = match field_manager {
            Some(manager) if !manager.is_empty() => manager,
            _ => user_agent.unwrap_or_default().split('/').next().unwrap_or_default().to_owned(),
        };
        Context { user, manager, field_validation, warnings: Mutex::new(Vec::new()), audit }
    }

    /// The server's own write, recorded under `manager` (`kube-apiserver` for what it makes at
    /// start, `kube-controller-manager` for the controllers' work it does until that runs).
    pub fn internal(manager: &str) -> Context {
        Context {
            user: User::apiserver(),
            manager: manager.to_owned(),
            field_validation: FieldValidation::default(),
            warnings: Mutex::new(Vec::new()),
            audit: crate::audit::Record::default(),
        }
    }

    /// The field manager of this request's writes.
    pub fn manager(&self) -> &str {
        &self.manager
    }

    /// Adds a warning to the response, once per text (as upstream's warning recorder: a patch
    /// retried on a conflict checks again).
    pub fn warn(&self, message: String) {
        let mut warnings = self.warnings.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if !warnings.contains(&message) {
            warnings.push(message);
        }
    }

    /// The warnings collected, in the order they were made.
    pub fn take_warnings(&self) -> Vec<String> {
        std::mem::take(&mut *self.warnings.lock().unwrap_or_else(std::sync::PoisonError::into_inner))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manager_and_warnings() {
        let user = User::apiserver();
        let ctx = Context::new(
            user.clone(),
            Some("kubectl/v1.33.0 (linux/amd64)"),
            None,
            FieldValidation::Warn,
            Default::default(),
        );
        assert_eq!(ctx.manager(), "kubectl");
        let ctx = Context::new(
            user.clone(),
            Some("kubectl/v1.33"),
            Some("mine".into()),
            FieldValidation::Warn,
            Default::default(),
        );
        assert_eq!(ctx.manager(), "mine");
        let ctx = Context::new(user, None, Some(String::new()), FieldValidation::Warn, Default::default());
        assert_eq!(ctx.manager(), "");
        ctx.warn("a".into());
        ctx.warn("b".into());
        ctx.warn("a".into());
        assert_eq!(ctx.take_warnings(), ["a", "b"]);
        assert!(ctx.take_warnings().is_empty());
        assert_eq!(Context::internal("kube-apiserver").manager(), "kube-apiserver");
    }
}
