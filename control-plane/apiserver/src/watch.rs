//! Serving one watch: its initial objects, the changes that follow (from the watch cache, or from a
//! store watch when the cache cannot serve it) as the watch event lines kube-apiserver sends, and
//! bookmarks.
//!
//! A watcher with a selector sees an object that starts to match as ADDED and one that stops
//! matching as DELETED (the old content at the change's revision), as upstream's cacher sends them.
//! Objects go out as stored, their resourceVersion spliced in, without being parsed.
//!
//! Bookmarks (`allowWatchBookmarks=true`) carry the revision the watcher has seen up to: after the
//! initial events of `sendInitialEvents=true` (annotated `k8s.io/initial-events-end`), then, as
//! upstream's cacher, about every minute and 2 s before the watch's timeout.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::{Stream, StreamExt};
use keel_api::resources::Resource;
use keel_api::status::ApiError;
use keel_store::{ProgressStream, Revision, WatchItem};
use serde_json::{Value, json};
use tokio::sync::broadcast::{self, error::RecvError};
use tokio::time::Instant;

use crate::cache::{Change, Entry, Item};
use crate::filter::Filter;
use crate::objects;

/// How often a watcher that allows them gets a bookmark (upstream's bookmark frequency).
pub const BOOKMARK_EVERY: Duration = Duration::from_secs(60);
/// How long before its timeout a watcher gets its last bookmark.
const BOOKMARK_BEFORE_TIMEOUT: Duration = Duration::from_secs(2);

/// The annotation of the bookmark that ends a watch's initial events.
pub const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";

/// Where a watch's changes come from.
pub enum Feed {
    Cache(broadcast::Receiver<Item>),
    Store(ProgressStream),
}

impl std::fmt::Debug for Feed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Feed::Cache(_) => "Feed::Cache",
            Feed::Store(_) => "Feed::Store",
        })
    }
}

/// What one watch selects and how it is served.
#[derive(Debug)]
pub struct Watcher {
    pub resource: &'static Resource,
    /// The collection's key prefix (a namespace's, or the resource's).
    pub prefix: String,
    /// One object's name, for a watch of one object.
    pub name: Option<String>,
    pub filter: Filter,
    /// Every selectable field of the resource ([`crate::cache::fields_for`]).
    pub fields: Arc<[&'static str]>,
    pub bookmarks: bool,
    /// When the watch ends (`timeoutSeconds`).
    pub deadline: Option<Instant>,
}

/// The start of a watch: objects sent first as ADDED (then, if `initial_end` says at which revision,
/// the bookmark ending them), changes already known after `after`, and where later ones come from.
#[derive(Debug)]
pub struct Start {
    pub initial: Vec<Arc<Entry>>,
    pub initial_end: Option<Revision>,
    pub replay: Vec<Arc<Change>>,
    pub after: Revision,
    pub feed: Feed,
}

impl Watcher {
    fn wants(&self, entry: &Entry) -> bool {
        entry.key.starts_with(&self.prefix)
            && self.name.as_deref().is_none_or(|name| entry.key.rsplit('/').next() == Some(name))
            && entry.passes(&self.filter, &self.fields)
    }

    /// The event line for `change`, if this watcher sees it.
    fn change_line(&self, change: &Change) -> Option<Bytes> {
        let old = change.old.as_ref().filter(|old| self.wants(old));
        let new = change.new.as_ref().filter(|new| self.wants(new));
        match (old, new) {
            (Some(_), Some(new)) => Some(event_line(self.resource, "MODIFIED", new, change.revision)),
            (None, Some(new)) => Some(event_line(self.resource, "ADDED", new, change.revision)),
            (Some(old), None) => Some(event_line(self.resource, "DELETED", old, change.revision)),
            (None, None) => None,
        }
    }

    fn bookmark(&self, revision: Revision, initial_end: bool) -> Bytes {
        let mut metadata = json!({"resourceVersion": revision.to_string()});
        if initial_end {
            metadata["annotations"] = json!({INITIAL_EVENTS_END: "true"});
        }
        let object = json!({
            "kind": self.resource.kind,
            "apiVersion": self.resource.api_version(),
            "metadata": metadata,
        });
        line("BOOKMARK", object)
    }

    /// The next bookmark's time: a minute from `now`, or just before the deadline if that is sooner;
    /// none once that moment has passed.
    fn next_bookmark(&self, now: Instant) -> Option<Instant> {
        if !self.bookmarks {
            return None;
        }
        let mut at = now + BOOKMARK_EVERY;
        if let Some(deadline) = self.deadline
            && let Some(before) = deadline.checked_sub(BOOKMARK_BEFORE_TIMEOUT)
        {
            at = at.min(before);
        }
        (at > now).then_some(at)
    }

    /// The watch's event lines, ending at the deadline, when the feed ends or when the watcher fell
    /// too far behind the cache.
    pub fn stream(self, start: Start) -> Pin<Box<dyn Stream<Item = Bytes> + Send>> {
        let mut pending: VecDeque<Bytes> = start
            .initial
            .iter()
            .filter(|entry| self.wants(entry))
            .map(|entry| event_line(self.resource, "ADDED", entry, entry.revision))
            .collect();
        if let Some(revision) = start.initial_end
            && self.bookmarks
        {
            pending.push_back(self.bookmark(revision, true));
        }
        let after = start.after;
        pending
            .extend(start.replay.iter().filter(|c| c.revision > after).filter_map(|c| self.change_line(c)));
        let seen = start.replay.last().map_or(after, |change| change.revision.max(after));
        let next_bookmark = self.next_bookmark(Instant::now());
        let deadline = self.deadline;
        let running =
            Running { watcher: self, pending, feed: start.feed, after, seen, next_bookmark, done: false };
        let stream = futures::stream::unfold(running, |mut running| async move {
            let line = running.next().await?;
            Some((line, running))
        });
        match deadline {
            Some(deadline) => Box::pin(stream.take_until(tokio::time::sleep_until(deadline))),
            None => Box::pin(stream),
        }
    }
}

struct Running {
    watcher: Watcher,
    pending: VecDeque<Bytes>,
    feed: Feed,
    /// The revision the watch starts after.
    after: Revision,
    /// The revision every change up to which has been sent (or did not concern this watcher).
    seen: Revision,
    next_bookmark: Option<Instant>,
    done: bool,
}

/// One item of a feed, whichever it is.
enum Fed {
    Change(Arc<Change>),
    Progress(Revision),
    Error(ApiError),
    End,
}

impl Running {
    async fn next(&mut self) -> Option<Bytes> {
        loop {
            if let Some(line) = self.pending.pop_front() {
                return Some(line);
            }
            if self.done {
                return None;
            }
            let bookmark = self.next_bookmark;
            let fed = tokio::select! {
                fed = next_fed(&mut self.feed) => fed,
                () = sleep_until(bookmark), if bookmark.is_some() => {
                    let now = Instant::now();
                    self.next_bookmark = self.watcher.next_bookmark(now);
                    self.pending.push_back(self.watcher.bookmark(self.seen, false));
                    continue;
                }
            };
            match fed {
                // Feeds never repeat a change, and a revision may hold several: only what the
                // watch starts after is left out (a live feed may begin before it).
                Fed::Change(change) if change.revision > self.after => {
                    self.seen = self.seen.max(change.revision);
                    if let Some(line) = self.watcher.change_line(&change) {
                        self.pending.push_back(line);
                    }
                }
                Fed::Change(_) => {}
                Fed::Progress(revision) => self.seen = self.seen.max(revision),
                Fed::Error(error) => {
                    self.pending.push_back(line("ERROR", error.to_json()));
                    self.done = true;
                }
                Fed::End => self.done = true,
            }
        }
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

async fn next_fed(feed: &mut Feed) -> Fed {
    match feed {
        Feed::Cache(live) => match live.recv().await {
            Ok(Item::Change(change)) => Fed::Change(change),
            Ok(Item::Progress(revision)) => Fed::Progress(revision),
            // Too slow for the cache, or the cache stopped: the watch ends, and the client watches
            // again from the last resourceVersion it got.
            Err(RecvError::Lagged(_) | RecvError::Closed) => Fed::End,
        },
        Feed::Store(items) => match items.next().await {
            Some(Ok(WatchItem::Event(event))) => Fed::Change(Arc::new(Change::from_event(event))),
            Some(Ok(WatchItem::Progress(revision))) => Fed::Progress(revision),
            Some(Err(error)) => Fed::Error(crate::handlers::store_error(error)),
            None => Fed::End,
        },
    }
}

/// `{"type":KIND,"object":OBJECT}` and a newline, the object as `resource` serves it at `revision`.
fn event_line(resource: &Resource, kind: &str, entry: &Entry, revision: Revision) -> Bytes {
    let object = match objects::served_json(resource, &entry.value, revision) {
        Ok(object) => object,
        Err(error) => return line("ERROR", error.to_json()),
    };
    let mut line = Vec::with_capacity(object.len() + 32);
    line.extend_from_slice(b"{\"type\":\"");
    line.extend_from_slice(kind.as_bytes());
    line.extend_from_slice(b"\",\"object\":");
    line.extend_from_slice(&object);
    line.extend_from_slice(b"}\n");
    Bytes::from(line)
}

/// A watch event line of a parsed object.
pub fn line(kind: &str, object: Value) -> Bytes {
    let mut event = serde_json::Map::new();
    event.insert("type".into(), kind.into());
    event.insert("object".into(), object);
    let mut line = serde_json::to_vec(&event).unwrap_or_default();
    line.push(b'\n');
    Bytes::from(line)
}

#[cfg(test)]
mod tests {
    use keel_api::resources;

    use super::*;

    fn watcher(labels: Option<&str>) -> Watcher {
        let configmaps = resources::find("", "v1", "configmaps").unwrap();
        Watcher {
            resource: configmaps,
            prefix: "/registry/configmaps/d/".into(),
            name: None,
            filter: Filter::parse(configmaps, labels, None).unwrap(),
            fields: crate::cache::fields_for(configmaps),
            bookmarks: true,
            deadline: None,
        }
    }

    fn entry(labels: &Value, revision: Revision) -> Arc<Entry> {
        let object =
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "labels": labels}});
        Entry::new("/registry/configmaps/d/a".into(), objects::for_storage(&object).unwrap().into(), revision)
    }

    fn seen(watcher: &Watcher, new: Option<Value>, old: Option<Value>) -> Option<(String, Value)> {
        let change = Change {
            revision: 7,
            key: "/registry/configmaps/d/a".into(),
            new: new.map(|labels| entry(&labels, 7)),
            old: old.map(|labels| entry(&labels, 6)),
        };
        let line: Value = serde_json::from_slice(&watcher.change_line(&change)?).unwrap();
        Some((line["type"].as_str().unwrap().to_owned(), line["object"].clone()))
    }

    #[test]
    fn changes_follow_the_selector() {
        let web = watcher(Some("tier=web"));
        let kind = |new, old| seen(&web, new, old).map(|(kind, _)| kind);
        assert_eq!(kind(Some(json!({"tier": "web"})), None).as_deref(), Some("ADDED"));
        assert_eq!(kind(Some(json!({"tier": "web"})), Some(json!({}))).as_deref(), Some("ADDED"));
        assert_eq!(
            kind(Some(json!({"tier": "web"})), Some(json!({"tier": "web"}))).as_deref(),
            Some("MODIFIED")
        );
        assert_eq!(kind(None, Some(json!({"tier": "web"}))).as_deref(), Some("DELETED"));
        assert_eq!(kind(Some(json!({})), Some(json!({}))), None);
        let (kind, object) = seen(&web, Some(json!({})), Some(json!({"tier": "web"}))).unwrap();
        assert_eq!(
            (kind.as_str(), &object["metadata"]["labels"]["tier"], &object["metadata"]["resourceVersion"]),
            ("DELETED", &json!("web"), &json!("7")),
            "an object leaving the selection goes as its old content at the change's revision"
        );
        let everything = watcher(None);
        let (kind, object) = seen(&everything, Some(json!({})), Some(json!({}))).unwrap();
        assert_eq!((kind.as_str(), &object["kind"]), ("MODIFIED", &json!("ConfigMap")));
        let mut other_namespace = watcher(None);
        other_namespace.prefix = "/registry/configmaps/e/".into();
        assert!(seen(&other_namespace, Some(json!({})), None).is_none());
    }

    #[tokio::test]
    async fn every_change_of_a_revision_is_sent() {
        let (sender, receiver) = broadcast::channel(16);
        let start = Start {
            initial: vec![],
            initial_end: None,
            replay: vec![],
            after: 6,
            feed: Feed::Cache(receiver),
        };
        let mut lines = watcher(None).stream(start);
        for (name, revision) in [("old", 6), ("a", 7), ("b", 7), ("c", 8)] {
            let key = format!("/registry/configmaps/d/{name}");
            let new = Some(Entry::new(
                key.clone(),
                objects::for_storage(&json!({"metadata": {"name": name}})).unwrap().into(),
                revision,
            ));
            sender.send(Item::Change(Arc::new(Change { revision, key, new, old: None }))).unwrap();
        }
        let mut names = Vec::new();
        for _ in 0..3 {
            let line = tokio::time::timeout(Duration::from_secs(5), lines.next()).await.unwrap().unwrap();
            let event: Value = serde_json::from_slice(&line).unwrap();
            names.push(event["object"]["metadata"]["name"].as_str().unwrap().to_owned());
        }
        assert_eq!(names, ["a", "b", "c"], "a change at the start revision is left out, the others all sent");
    }

    #[test]
    fn bookmarks() {
        let mut watcher = watcher(None);
        let bookmark: Value = serde_json::from_slice(&watcher.bookmark(42, true)).unwrap();
        assert_eq!(
            bookmark,
            json!({"type": "BOOKMARK", "object": {"kind": "ConfigMap", "apiVersion": "v1",
                   "metadata": {"resourceVersion": "42", "annotations": {INITIAL_EVENTS_END: "true"}}}})
        );
        let now = Instant::now();
        assert_eq!(watcher.next_bookmark(now), Some(now + BOOKMARK_EVERY));
        watcher.deadline = Some(now + Duration::from_secs(10));
        assert_eq!(watcher.next_bookmark(now), Some(now + Duration::from_secs(8)));
        assert_eq!(
            watcher.next_bookmark(now + Duration::from_secs(9)),
            None,
            "past the pre-timeout bookmark"
        );
        watcher.bookmarks = false;
        assert_eq!(watcher.next_bookmark(now), None);
    }
}
