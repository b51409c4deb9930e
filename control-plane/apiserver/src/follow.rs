//! Following watch caches from inside the server, as an informer follows a list and watch: a
//! snapshot of each cache, then every change, applied in bursts. The RBAC authorizer and the Node
//! authorizer's graph keep themselves current this way, eventually current as upstream's
//! informer-fed authorizers are.

use std::sync::Arc;

use futures::{FutureExt, StreamExt};
use keel_store::Revision;
use tokio::task::JoinHandle;

use crate::cache::{Cache, Change, Entry, Item};

/// What follows a set of caches.
pub trait Follower: Send + 'static {
    /// Every object cache `cache` holds now: a fresh start (also after falling behind a cache,
    /// when everything held before is to be forgotten).
    fn reset(&mut self, cache: usize, snapshot: &[Arc<Entry>]);
    /// One change of cache `cache`, after its snapshot.
    fn change(&mut self, cache: usize, change: &Change);
    /// After a snapshot, or after a burst of changes: every change already queued has been given.
    fn settled(&mut self) -> impl Future<Output = ()> + Send;
}

/// A running follower; stops when dropped.
#[derive(Debug)]
pub struct Following {
    task: JoinHandle<()>,
}

impl Drop for Following {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Following {
    /// Starts `follower` on `caches`; returns once it has settled on a snapshot holding every
    /// write up to store revision `after`, so nothing is decided on an older state.
    pub async fn start(caches: Vec<Arc<Cache>>, after: Revision, follower: impl Follower) -> Following {
        for cache in &caches {
            if !cache.wait_for(after).await {
                tracing::warn!(
                    prefix = cache.prefix(),
                    "a followed cache is behind the store: following it as it is"
                );
            }
        }
        let (ready, first) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(follow(caches, follower, ready));
        let _ended_before_ready = first.await;
        Following { task }
    }
}

async fn follow(
    caches: Vec<Arc<Cache>>,
    mut follower: impl Follower,
    ready: tokio::sync::oneshot::Sender<()>,
) {
    let mut ready = Some(ready);
    loop {
        let subscriptions: Option<Vec<_>> = caches.iter().map(|c| c.subscribe(c.prefix(), None)).collect();
        let Some(subscriptions) = subscriptions else {
            // A cache not serving yet (or listing again).
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            continue;
        };
        let mut feeds = futures::stream::SelectAll::new();
        for (i, subscription) in subscriptions.into_iter().enumerate() {
            follower.reset(i, &subscription.snapshot);
            for change in &subscription.replay {
                follower.change(i, change);
            }
            let live = futures::stream::unfold(subscription.live, |mut live| async move {
                let item = live.recv().await;
                Some((item, live))
            });
            feeds.push(live.map(move |item| (i, item)).boxed());
        }
        follower.settled().await;
        if let Some(ready) = ready.take() {
            let _ = ready.send(());
        }
        // Changes, in bursts: everything already queued is taken before settling.
        'following: while let Some(first) = feeds.next().await {
            let mut changed = false;
            let mut next = Some(first);
            while let Some((i, item)) = next.take() {
                match item {
                    Ok(Item::Change(change)) => {
                        follower.change(i, &change);
                        changed = true;
                    }
                    Ok(Item::Progress(_)) => {}
                    // Fell behind: start again from a snapshot.
                    Err(_) => break 'following,
                }
                next = feeds.next().now_or_never().flatten();
            }
            if changed {
                follower.settled().await;
            }
        }
    }
}
