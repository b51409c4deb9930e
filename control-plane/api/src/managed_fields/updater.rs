//! Ownership bookkeeping of one write, as structured-merge-diff's `merge.Updater` does it: an
//! update takes the fields it changed from every other manager; an apply merges the applied
//! configuration, removes the fields its manager applied last time and applies no more (unless
//! someone else owns them), and fails with conflicts where it would change fields other managers
//! own, unless forced.

use std::collections::BTreeMap;

use serde_json::Value;

use super::ManagerId;
use super::fieldpath::{Path, Set};
use super::schema::TypeDef;
use super::typed::{Comparison, Typed, TypedError};

/// The fields one manager owns.
#[derive(Clone, Debug, PartialEq)]
pub struct VersionedSet {
    pub set: Set,
    pub api_version: String,
    /// Owned by applying (not by updating).
    pub applied: bool,
}

/// Every manager's fields.
pub type ManagedSets = BTreeMap<ManagerId, VersionedSet>;

/// A field an apply would change that another manager owns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Conflict {
    pub manager: ManagerId,
    pub path: Path,
}

/// Why an update or apply failed.
#[derive(Debug, Clone, PartialEq)]
pub enum UpdateError {
    Conflicts(Vec<Conflict>),
    /// An object that does not fit its schema.
    Typed(TypedError),
}

impl From<TypedError> for UpdateError {
    fn from(e: TypedError) -> Self {
        UpdateError::Typed(e)
    }
}

/// Ownership updates for objects of one type.
#[derive(Debug)]
pub struct Updater<'s> {
    pub typed: Typed<'s>,
    pub root: &'s TypeDef,
    /// Fields nobody owns through this endpoint (the strategy's reset fields: `status` on the main
    /// resource, `spec` on the status subresource).
    pub ignored: &'s Set,
}

impl Updater<'_> {
    fn update_others(
        &self,
        live: &Value,
        new: &Value,
        managers: &mut ManagedSets,
        workflow: &ManagerId,
        force: bool,
    ) -> Result<Comparison, UpdateError> {
        let mut compare = self.typed.compare(self.root, live, new)?;
        compare.exclude(self.ignored);
        if managers.keys().all(|manager| manager == workflow) {
            return Ok(compare);
        }
        let changed = compare.modified.union(&compare.added);
        let mut conflicts = Vec::new();
        for (manager, owned) in managers.iter() {
            if manager == workflow {
                continue;
            }
            let conflict = owned.set.intersection(&changed);
            conflicts
                .extend(conflict.paths().into_iter().map(|path| Conflict { manager: manager.clone(), path }));
        }
        if !force && !conflicts.is_empty() {
            return Err(UpdateError::Conflicts(conflicts));
        }
        for (manager, owned) in managers.iter_mut() {
            if manager == workflow {
                continue;
            }
            owned.set.remove_all(&changed);
            owned.set.remove_all(&compare.removed);
        }
        managers.retain(|_, owned| !owned.set.is_empty());
        Ok(compare)
    }

    /// `manager` changed `live` into `new`: it owns what it changed, the others lose it.
    pub fn update(
        &self,
        live: &Value,
        new: &Value,
        api_version: &str,
        managers: &mut ManagedSets,
        manager: &ManagerId,
    ) -> Result<(), UpdateError> {
        let compare = self.update_others(live, new, managers, manager, true)?;
        let mut set = managers.remove(manager).map(|owned| owned.set).unwrap_or_default();
        set.remove_all(&compare.removed);
        set.merge(compare.modified);
        set.merge(compare.added);
        if !self.ignored.is_empty() {
            set = set.recursive_difference(self.ignored);
        }
        if !set.is_empty() {
            managers.insert(
                manager.clone(),
                VersionedSet { set, api_version: api_version.to_owned(), applied: false },
            );
        }
        Ok(())
    }

    /// `manager` applies `config` to `live`: the object it leaves (`None` when nothing changes).
    pub fn apply(
        &self,
        live: &Value,
        config: &Value,
        api_version: &str,
        managers: &mut ManagedSets,
        manager: &ManagerId,
        force: bool,
    ) -> Result<Option<Value>, UpdateError> {
        let merged = self.typed.merge(self.root, live, config)?;
        let last = managers.remove(manager).map(|owned| owned.set).unwrap_or_default();
        let set = self.typed.to_field_set(self.root, config)?.recursive_difference(self.ignored);
        // Nothing to prune when every field applied last time is applied again (each one, and the
        // structs above it, stays owned).
        let pruning = !last.difference(&set).is_empty();
        managers.insert(
            manager.clone(),
            VersionedSet { set, api_version: api_version.to_owned(), applied: true },
        );
        let new = if pruning { self.prune(&merged, managers, &last)? } else { merged };
        self.update_others(live, &new, managers, manager, force)?;
        managers.retain(|_, owned| !owned.set.is_empty());
        Ok((new != *live).then_some(new))
    }

    /// Removes from `merged` what the manager applied last time and no manager owns now, keeping
    /// what was not in its last set (upstream's prune, addBackOwnedItems, addBackDanglingItems).
    fn prune(&self, merged: &Value, managers: &ManagedSets, last: &Set) -> Result<Value, TypedError> {
        let (typed, root) = (self.typed, self.root);
        let named = |set: &Set| typed.ensure_named_fields_are_members(root, set);
        let last = named(last);
        let pruned = typed.remove(root, merged, &last);
        let mut owned = Set::new();
        for versioned in managers.values() {
            owned.union_with(&versioned.set);
        }
        let merged_set = named(&typed.to_field_set(root, merged)?);
        let pruned_set = named(&typed.to_field_set(root, &pruned)?);
        let pruned = typed.remove(root, merged, &merged_set.difference(&pruned_set.union(&named(&owned))));
        let pruned_set = named(&typed.to_field_set(root, &pruned)?);
        Ok(typed.remove(root, merged, &merged_set.difference(&pruned_set).intersection(&last)))
    }
}
