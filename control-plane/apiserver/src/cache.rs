//! The watch cache, as kube-apiserver's cacher: every resource's objects in memory, fed by one store
//! watch per key prefix, so that lists and watches are served without reading the store.
//!
//! A cache lists its prefix, then follows a watch with progress from the list's revision. It keeps
//! the current objects, a window of the latest [`WINDOW`] changes (a watch from a resourceVersion in
//! the window is served from memory; an older one goes to the store, which still has the history
//! until compaction) and a broadcast of each change to the live watches. Its revision is the last
//! one it holds completely; with a store that reports progress promptly (the embedded one) it follows
//! the store's revision even when nothing under its prefix changes, so a consistent read waits for the
//! store's current revision and is then served from memory. If the store watch fails, the cache stops
//! serving (requests go to the store), its watches end (clients watch again, as after an apiserver
//! restart) and it lists again.
//!
//! Objects are kept as the store's bytes (shared with the embedded store's index, not copied); what
//! selectors read of them is parsed once per version, when a selector first asks.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, OnceLock, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use keel_api::resources::{RESOURCES, Resource};
use keel_store::{Event, EventKind, RangeRequest, Revision, Store, StoreError, WatchItem};
use tokio::sync::{broadcast, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::filter::{Attrs, Filter};

/// Changes kept per cache for watches from a resourceVersion.
pub const WINDOW: usize = 10_000;
/// Changes a live watch may fall behind by before it is closed (upstream closes unresponsive
/// watchers too; the client watches again from its last resourceVersion, served from the window).
const LIVE_CAPACITY: usize = 2048;
/// Store watch items applied under one lock: well under [`LIVE_CAPACITY`], and the feeder yields
/// between chunks, so a burst of changes does not by itself leave a reading watcher behind.
const CHUNK: usize = 256;
/// How often, at most, a cache tells its watches that its revision moved without a change of its
/// own (for their bookmarks).
const PROGRESS_EVERY: Duration = Duration::from_secs(1);
/// How long a read waits for the cache to reach the revision it needs before going to the store,
/// as upstream's cacher waits (3 s).
pub const FRESHNESS_TIMEOUT: Duration = Duration::from_secs(3);
/// Pause before listing again after the store watch failed, doubling up to [`MAX_RELIST_PAUSE`].
const RELIST_PAUSE: Duration = Duration::from_millis(100);
const MAX_RELIST_PAUSE: Duration = Duration::from_secs(5);

/// One version of one object: the store's bytes and the revision that wrote them.
#[derive(Debug)]
pub struct Entry {
    pub key: String,
    pub value: Bytes,
    pub revision: Revision,
    attrs: OnceLock<Attrs<'static>>,
}

impl Entry {
    pub fn new(key: String, value: Bytes, revision: Revision) -> Arc<Entry> {
        Arc::new(Entry { key, value, revision, attrs: OnceLock::new() })
    }

    /// Whether the object passes `filter`, `fields` being every selectable field of its resource.
    pub fn passes(&self, filter: &Filter, fields: &[&'static str]) -> bool {
        filter.is_everything()
            || filter.matches_attrs(self.attrs.get_or_init(|| Attrs::of_bytes(&self.value, fields)))
    }
}

/// One change of one key: what it holds after (`None`: deleted) and before (`None`: created).
#[derive(Debug)]
pub struct Change {
    pub revision: Revision,
    pub key: String,
    pub new: Option<Arc<Entry>>,
    pub old: Option<Arc<Entry>>,
}

impl Change {
    /// A store event as a change.
    pub fn from_event(event: Event) -> Change {
        let revision = event.revision();
        let old = event.prev_kv.map(|kv| Entry::new(kv.key, kv.value, kv.mod_revision));
        let new = match event.kind {
            EventKind::Put => Some(Entry::new(event.kv.key.clone(), event.kv.value, revision)),
            EventKind::Delete => None,
        };
        Change { revision, key: event.kv.key, new, old }
    }
}

/// What live watches receive: a change, or the news that the cache reached a revision.
#[derive(Debug, Clone)]
pub enum Item {
    Change(Arc<Change>),
    Progress(Revision),
}

/// One page of a list served from memory.
#[derive(Debug)]
pub struct Listed {
    pub revision: Revision,
    pub entries: Vec<Arc<Entry>>,
    /// When the page is not the last: the last key read and how many keys follow it.
    pub more: Option<(String, usize)>,
}

/// A watch's start, taken atomically: the objects at `revision` (when asked for), the window's
/// changes after the watch's start, and the live changes that follow.
#[derive(Debug)]
pub struct Subscription {
    pub revision: Revision,
    pub snapshot: Vec<Arc<Entry>>,
    pub replay: Vec<Arc<Change>>,
    pub live: broadcast::Receiver<Item>,
}

/// Every selectable field of the resources stored under `resource`'s key prefix (core and
/// events.k8s.io events share theirs), the fields selectors may read from a cached object.
pub fn fields_for(resource: &Resource) -> Arc<[&'static str]> {
    let prefix = resource.key_prefix();
    let mut fields = vec!["metadata.name", "metadata.namespace"];
    let custom = std::iter::once(resource).filter(|r| r.custom);
    for other in RESOURCES.iter().chain(custom).filter(|r| r.key_prefix() == prefix) {
        for field in other.selectable_fields() {
            if !fields.contains(field) {
                fields.push(field);
            }
        }
    }
    fields.into()
}

/// The caches of every resource, one per key prefix, and their feeding tasks (stopped when this is
/// dropped). Built-in resources' caches start with the server; custom resources' start and stop
/// with the CustomResourceDefinitions that serve them ([`WatchCache::start_custom`]).
#[derive(Debug)]
pub struct WatchCache {
    caches: HashMap<String, Arc<Cache>>,
    tasks: Vec<JoinHandle<()>>,
    store: Arc<dyn Store>,
    /// Custom resources' caches by key prefix (`/registry/<group>/<plural>/`), with their feeders.
    custom: RwLock<HashMap<String, Fed>>,
}

/// A cache and the task feeding it.
type Fed = (Arc<Cache>, JoinHandle<()>);

impl WatchCache {
    /// Starts a cache for every watchable resource of `store`.
    pub fn start(store: &Arc<dyn Store>) -> WatchCache {
        let mut caches = HashMap::new();
        let mut tasks = Vec::new();
        for resource in RESOURCES.iter().filter(|r| r.verbs.contains(&"watch")) {
            let prefix = resource.key_prefix();
            if caches.contains_key(&prefix) {
                continue;
            }
            let cache = Arc::new(Cache::new(prefix.clone(), fields_for(resource)));
            tasks.push(tokio::spawn(feed(cache.clone(), store.clone())));
            caches.insert(prefix, cache);
        }
        WatchCache { caches, tasks, store: store.clone(), custom: RwLock::default() }
    }

    /// The cache holding `resource`.
    pub fn of(&self, resource: &Resource) -> Option<Arc<Cache>> {
        if resource.custom {
            let custom = self.custom.read().unwrap_or_else(std::sync::PoisonError::into_inner);
            return custom.get(&resource.key_prefix()).map(|(cache, _)| cache.clone());
        }
        self.caches.get(&resource.key_prefix()).cloned()
    }

    /// Starts the cache of a custom resource's key prefix, unless it runs already with the same
    /// selectable fields (a CRD whose selectableFields changed gets a fresh cache that reads them).
    pub fn start_custom(&self, resource: &Resource) {
        let prefix = resource.key_prefix();
        let fields = fields_for(resource);
        let mut custom = self.custom.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        if custom.get(&prefix).is_some_and(|(cache, _)| *cache.fields() == fields) {
            return;
        }
        if let Some((_, task)) = custom.remove(&prefix) {
            task.abort();
        }
        let cache = Arc::new(Cache::new(prefix.clone(), fields));
        let task = tokio::spawn(feed(cache.clone(), self.store.clone()));
        custom.insert(prefix, (cache, task));
    }

    /// Stops the cache of a custom resource's key prefix (its CRD is gone): its watches end.
    pub fn stop_custom(&self, prefix: &str) {
        let mut custom = self.custom.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((_, task)) = custom.remove(prefix) {
            task.abort();
        }
    }

    /// Whether every cache has listed its prefix and follows the store.
    pub fn ready(&self) -> bool {
        self.caches.values().all(|cache| cache.revision().is_some())
    }
}

impl Drop for WatchCache {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
        let custom = self.custom.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        for (_, task) in custom.values() {
            task.abort();
        }
    }
}

/// The cache of one key prefix.
#[derive(Debug)]
pub struct Cache {
    prefix: String,
    fields: Arc<[&'static str]>,
    state: RwLock<State>,
    /// The revision reached, for readers waiting on it (0 while not serving).
    reached: watch::Sender<Revision>,
}

#[derive(Debug)]
struct State {
    ready: bool,
    revision: Revision,
    objects: BTreeMap<String, Arc<Entry>>,
    window: VecDeque<Arc<Change>>,
    /// A watch from after a revision at or above this one finds every later change in the window.
    floor: Revision,
    live: broadcast::Sender<Item>,
    progress_sent: Instant,
}

impl Cache {
    fn new(prefix: String, fields: Arc<[&'static str]>) -> Cache {
        let state = State {
            ready: false,
            revision: 0,
            objects: BTreeMap::new(),
            window: VecDeque::new(),
            floor: 0,
            live: broadcast::channel(1).0,
            progress_sent: Instant::now(),
        };
        Cache { prefix, fields, state: RwLock::new(state), reached: watch::Sender::new(0) }
    }

    /// The key prefix this cache holds.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The selectable fields of the objects held here.
    pub fn fields(&self) -> &Arc<[&'static str]> {
        &self.fields
    }

    fn read(&self) -> RwLockReadGuard<'_, State> {
        self.state.read().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn write(&self) -> RwLockWriteGuard<'_, State> {
        self.state.write().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The revision held, `None` while the cache is not serving.
    pub fn revision(&self) -> Option<Revision> {
        let state = self.read();
        state.ready.then_some(state.revision)
    }

    /// The object at `key`: `Some(None)` when the cache holds none, `None` while it is not serving.
    pub fn get(&self, key: &str) -> Option<Option<Arc<Entry>>> {
        let state = self.read();
        state.ready.then(|| state.objects.get(key).cloned())
    }

    /// Waits until the cache holds every change up to `revision`; false if it is not serving or does
    /// not get there within [`FRESHNESS_TIMEOUT`].
    pub async fn wait_for(&self, revision: Revision) -> bool {
        let mut reached = self.reached.subscribe();
        let wait = reached.wait_for(|&at| at >= revision && at > 0);
        matches!(tokio::time::timeout(FRESHNESS_TIMEOUT, wait).await, Ok(Ok(_))) && self.revision().is_some()
    }

    /// Up to `limit` objects under `prefix` (a collection within the cache's prefix) passing
    /// `filter`, from key `from` on; `None` while the cache is not serving. The objects are taken
    /// under the lock and filtered after it (a selector may parse each object once), so the feeder
    /// is never held up by a list.
    pub fn list(
        &self,
        prefix: &str,
        from: Option<&str>,
        filter: &Filter,
        limit: Option<usize>,
    ) -> Option<Listed> {
        let (revision, candidates, total) = {
            let state = self.read();
            if !state.ready {
                return None;
            }
            let start = from.unwrap_or(prefix).to_owned();
            let under = state.objects.range(start..).take_while(|(key, _)| key.starts_with(prefix));
            // Without a selector, one more than the page tells whether more follow.
            let wanted = limit.filter(|_| filter.is_everything()).map(|l| l + 1);
            let candidates: Vec<Arc<Entry>> =
                under.clone().take(wanted.unwrap_or(usize::MAX)).map(|(_, e)| e.clone()).collect();
            let total = if wanted.is_some() { under.count() } else { candidates.len() };
            (state.revision, candidates, total)
        };
        let mut entries = Vec::new();
        let mut read: usize = 0;
        for entry in &candidates {
            if limit.is_some_and(|limit| entries.len() >= limit) {
                break;
            }
            read += 1;
            if entry.passes(filter, &self.fields) {
                entries.push(entry.clone());
            }
        }
        let more = match read.checked_sub(1).and_then(|last| candidates.get(last)) {
            Some(last) if total > read => Some((last.key.clone(), total - read)),
            _ => None,
        };
        Some(Listed { revision, entries, more })
    }

    /// Starts a watch of `prefix` after revision `after` (`None`: after the cache's current revision,
    /// with the objects at that revision as `snapshot`). `None` when the cache is not serving or its
    /// window no longer holds every change after `after`.
    pub fn subscribe(&self, prefix: &str, after: Option<Revision>) -> Option<Subscription> {
        let state = self.read();
        if !state.ready {
            return None;
        }
        let live = state.live.subscribe();
        Some(match after {
            None => Subscription {
                revision: state.revision,
                snapshot: state
                    .objects
                    .range(prefix.to_owned()..)
                    .take_while(|(key, _)| key.starts_with(prefix))
                    .map(|(_, entry)| entry.clone())
                    .collect(),
                replay: Vec::new(),
                live,
            },
            Some(after) if after >= state.floor => {
                let first = state.window.partition_point(|change| change.revision <= after);
                Subscription {
                    revision: after,
                    snapshot: Vec::new(),
                    replay: state
                        .window
                        .range(first..)
                        .filter(|change| change.key.starts_with(prefix))
                        .cloned()
                        .collect(),
                    live,
                }
            }
            Some(_) => return None,
        })
    }

    /// Lists the prefix and follows the store from there until the watch fails.
    async fn run(&self, store: &dyn Store) -> Result<(), StoreError> {
        let listed = store.range(RangeRequest::prefix(self.prefix.clone())).await?;
        let items = store.watch_with_progress(&self.prefix, Some(listed.revision + 1)).await?;
        {
            let mut state = self.write();
            state.objects = listed
                .kvs
                .into_iter()
                .map(|kv| (kv.key.clone(), Entry::new(kv.key, kv.value, kv.mod_revision)))
                .collect();
            state.revision = listed.revision;
            state.floor = listed.revision;
            state.window.clear();
            state.live = broadcast::channel(LIVE_CAPACITY).0;
            state.ready = true;
        }
        self.reached.send_replace(listed.revision);
        let mut chunks = items.ready_chunks(CHUNK);
        let mut carried = Vec::new();
        while let Some(chunk) = chunks.next().await {
            // The events of one revision are queued together by both backends, so a chunk ends
            // between revisions — unless it is full: then the events of its last revision wait for
            // the next chunk, so that a revision is never seen half applied.
            let mut items = std::mem::take(&mut carried);
            let full = chunk.len() == CHUNK;
            items.extend(chunk);
            if full {
                carried = split_last_revision(&mut items);
            }
            let (revision, failed) = self.write().apply(items);
            self.reached.send_replace(revision);
            if let Some(error) = failed {
                return Err(error);
            }
            tokio::task::yield_now().await;
        }
        Err(StoreError::Closed)
    }

    /// A cache serving nothing at revision 1, fed by no store (for followers' tests).
    #[cfg(test)]
    pub(crate) fn serving_for_tests(prefix: &str) -> Cache {
        let cache = Cache::new(prefix.to_owned(), Arc::from(Vec::new()));
        {
            let mut state = cache.write();
            state.ready = true;
            state.revision = 1;
            state.live = broadcast::channel(16).0;
        }
        cache.reached.send_replace(1);
        cache
    }

    /// Stops serving: readers go to the store and live watches end.
    fn stop(&self) {
        let mut state = self.write();
        state.ready = false;
        state.live = broadcast::channel(1).0;
        state.window.clear();
        self.reached.send_replace(0);
    }
}

impl State {
    /// Applies one chunk of store watch items; answers the revision now held completely and the
    /// error that ended the watch, if one did.
    fn apply(&mut self, items: Vec<keel_store::Result<WatchItem>>) -> (Revision, Option<StoreError>) {
        let mut reached = self.revision;
        let mut changed = false;
        let mut failed = None;
        for item in items {
            match item {
                Ok(WatchItem::Event(event)) => {
                    reached = reached.max(event.revision());
                    self.change(event);
                    changed = true;
                }
                Ok(WatchItem::Progress(revision)) => reached = reached.max(revision),
                Err(error) => {
                    failed = Some(error);
                    break;
                }
            }
        }
        if reached > self.revision {
            self.revision = reached;
            if !changed && self.progress_sent.elapsed() >= PROGRESS_EVERY {
                self.progress_sent = Instant::now();
                let _ = self.live.send(Item::Progress(reached));
            }
        }
        (self.revision, failed)
    }

    fn change(&mut self, event: Event) {
        let revision = event.revision();
        let key = event.kv.key;
        let new = match event.kind {
            EventKind::Put => Some(Entry::new(key.clone(), event.kv.value, revision)),
            EventKind::Delete => None,
        };
        let old = match &new {
            Some(entry) => self.objects.insert(key.clone(), entry.clone()),
            None => self.objects.remove(&key),
        };
        let change = Arc::new(Change { revision, key, new, old });
        self.window.push_back(change.clone());
        if self.window.len() > WINDOW
            && let Some(evicted) = self.window.pop_front()
        {
            self.floor = evicted.revision;
        }
        // No receiver is no error: nobody watches.
        let _ = self.live.send(Item::Change(change));
    }
}

/// Takes the events of the last revision of a full chunk off its end (unless the chunk is nothing
/// else: then it is applied whole — a revision of more changes than a chunk holds).
fn split_last_revision(items: &mut Vec<keel_store::Result<WatchItem>>) -> Vec<keel_store::Result<WatchItem>> {
    let revision_of = |item: &keel_store::Result<WatchItem>| match item {
        Ok(WatchItem::Event(event)) => Some(event.revision()),
        _ => None,
    };
    let Some(last) = items.last().and_then(revision_of) else { return Vec::new() };
    let keep = items.iter().rposition(|item| revision_of(item) != Some(last)).map_or(0, |i| i + 1);
    if keep == 0 {
        return Vec::new();
    }
    items.split_off(keep)
}

/// Keeps `cache` fed: lists and watches, and after a failure stops serving, pauses and lists again.
async fn feed(cache: Arc<Cache>, store: Arc<dyn Store>) {
    let mut pause = RELIST_PAUSE;
    loop {
        let started = Instant::now();
        let error = match cache.run(&*store).await {
            Ok(()) => StoreError::Closed,
            Err(error) => error,
        };
        cache.stop();
        if matches!(error, StoreError::Closed) {
            tracing::debug!(prefix = %cache.prefix, "the store closed; the watch cache stops");
            return;
        }
        tracing::warn!(prefix = %cache.prefix, %error, "watch cache lost its store watch; listing again");
        if started.elapsed() > MAX_RELIST_PAUSE * 6 {
            pause = RELIST_PAUSE;
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(MAX_RELIST_PAUSE);
    }
}

#[cfg(test)]
mod tests {
    use keel_store::KeyValue;

    use super::*;

    fn put(
        key: &str,
        value: &str,
        revision: Revision,
        prev: Option<Revision>,
    ) -> keel_store::Result<WatchItem> {
        let kv = |revision| KeyValue {
            key: key.into(),
            value: Bytes::from(value.to_owned()),
            create_revision: 1,
            mod_revision: revision,
            version: 1,
            lease: 0,
        };
        Ok(WatchItem::Event(Event { kind: EventKind::Put, kv: kv(revision), prev_kv: prev.map(kv) }))
    }

    fn cache() -> Cache {
        let cache = Cache::new(
            "/registry/configmaps/".into(),
            fields_for(keel_api::resources::find("", "v1", "configmaps").unwrap()),
        );
        {
            let mut state = cache.write();
            state.ready = true;
            state.live = broadcast::channel(16).0;
        }
        cache
    }

    #[test]
    fn changes_progress_and_the_window() {
        let cache = cache();
        let (revision, failed) = cache.write().apply(vec![
            put("/registry/configmaps/a/x", r#"{"metadata":{"labels":{"t":"1"}}}"#, 3, None),
            put("/registry/configmaps/b/y", "{}", 4, None),
            Ok(WatchItem::Progress(9)),
        ]);
        assert_eq!((revision, failed.is_none()), (9, true));
        let everything = Filter::default();
        let listed = cache.list("/registry/configmaps/", None, &everything, Some(1)).unwrap();
        assert_eq!(listed.revision, 9);
        assert_eq!(listed.entries[0].key, "/registry/configmaps/a/x");
        assert_eq!(listed.more, Some(("/registry/configmaps/a/x".into(), 1)));
        let resource = keel_api::resources::find("", "v1", "configmaps").unwrap();
        let labelled = Filter::parse(resource, Some("t=1"), None).unwrap();
        let listed = cache.list("/registry/configmaps/", None, &labelled, None).unwrap();
        assert_eq!(listed.entries.len(), 1);
        assert!(listed.more.is_none());
        let namespaced = cache.list("/registry/configmaps/b/", None, &everything, None).unwrap();
        assert_eq!(namespaced.entries.len(), 1);

        let sub = cache.subscribe("/registry/configmaps/", Some(3)).unwrap();
        assert_eq!(sub.replay.iter().map(|c| c.revision).collect::<Vec<_>>(), [4]);
        let sub = cache.subscribe("/registry/configmaps/a/", None).unwrap();
        assert_eq!((sub.revision, sub.snapshot.len()), (9, 1));

        // An update keeps the old version for its watchers.
        let (revision, _) = cache.write().apply(vec![put("/registry/configmaps/a/x", "{}", 10, Some(3))]);
        assert_eq!(revision, 10);
        let sub = cache.subscribe("/registry/configmaps/", Some(9)).unwrap();
        assert_eq!(sub.replay[0].old.as_ref().unwrap().revision, 3);
    }

    #[test]
    fn a_full_chunk_keeps_its_last_revision_for_the_next() {
        let key = |n: i64| format!("/registry/configmaps/a/{n}");
        let mut items =
            vec![put(&key(1), "{}", 5, None), put(&key(2), "{}", 6, None), put(&key(3), "{}", 6, None)];
        let carried = split_last_revision(&mut items);
        assert_eq!((items.len(), carried.len()), (1, 2));
        let mut one_revision = vec![put(&key(1), "{}", 6, None), put(&key(2), "{}", 6, None)];
        assert!(split_last_revision(&mut one_revision).is_empty());
        assert_eq!(one_revision.len(), 2);
        let mut ends_in_progress = vec![put(&key(1), "{}", 6, None), Ok(WatchItem::Progress(6))];
        assert!(split_last_revision(&mut ends_in_progress).is_empty());
    }

    #[test]
    fn the_window_forgets_the_oldest_changes() {
        let cache = cache();
        let items = (1..=WINDOW as Revision + 5)
            .map(|r| put(&format!("/registry/configmaps/a/{r}"), "{}", r, None))
            .collect();
        cache.write().apply(items);
        assert!(cache.subscribe("/registry/configmaps/", Some(4)).is_none(), "revision 5 is gone");
        let sub = cache.subscribe("/registry/configmaps/", Some(5)).unwrap();
        assert_eq!(sub.replay.len(), WINDOW);
        cache.stop();
        assert!(cache.subscribe("/registry/configmaps/", None).is_none());
        assert!(cache.revision().is_none());
    }
}
