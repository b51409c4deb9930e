//! Following watch caches from inside the server, as an informer follows a list and watch: a
//! snapshot of each cache, then every change, applied in bursts. The RBAC authorizer and the Node
//! authorizer's graph keep themselves current this way, eventually current as upstream's
//! informer-fed authorizers are; the built-in controllers (CSR approving and signing, ClusterRole
//! aggregation) act on what they follow, and what they failed to do they do again later
//! ([`Retries`], upstream's rate-limited requeue), not only when the object changes next.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::{FutureExt, StreamExt};
use keel_store::Revision;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::cache::{Cache, Change, Entry, Item};

/// What follows a set of caches.
pub trait Follower: Send + 'static {
    /// Every object cache `cache` holds now: a fresh start (also after falling behind a cache,
    /// when everything held before is to be forgotten).
    fn reset(&mut self, cache: usize, snapshot: &[Arc<Entry>]);
    /// One change of cache `cache`, after its snapshot.
    fn change(&mut self, cache: usize, change: &Change);
    /// After a snapshot, after a burst of changes (every change already queued has been given), or
    /// once [`Follower::retry_at`] has come.
    fn settled(&mut self) -> impl Future<Output = ()> + Send;
    /// When to be settled again without a change: work that failed, to try again (its
    /// [`Retries::next`]). None by default: a follower that only mirrors never retries.
    fn retry_at(&self) -> Option<Instant> {
        None
    }
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
        // Changes, in bursts: everything already queued is taken before settling; and failed work
        // retried when it is due, changes or not.
        'following: loop {
            let first = match follower.retry_at() {
                None => feeds.next().await,
                Some(at) => tokio::select! {
                    item = feeds.next() => item,
                    () = tokio::time::sleep_until(at) => {
                        follower.settled().await;
                        continue;
                    }
                },
            };
            let Some(first) = first else { break };
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

/// Keys whose work failed, each due again after a pause that doubles with its failures, from
/// `base` up to `max` (upstream's workqueue `ItemExponentialFailureRateLimiter`, which its
/// controllers' `AddRateLimited` goes through). A key's failures count until it is forgotten.
#[derive(Debug)]
pub struct Retries<K> {
    base: Duration,
    max: Duration,
    /// Each failed key: its failures, and when it is due (none once [`Retries::due`] took it).
    keys: BTreeMap<K, (u32, Option<Instant>)>,
}

impl<K: Ord + Clone> Retries<K> {
    pub fn new(base: Duration, max: Duration) -> Retries<K> {
        Retries { base, max, keys: BTreeMap::new() }
    }

    /// `key` failed (again) at `now`: due after `base` doubled once per earlier failure, at most
    /// `max`. Answers the pause.
    pub fn failed(&mut self, key: K, now: Instant) -> Duration {
        let (failures, due) = self.keys.entry(key).or_insert((0, None));
        let pause = self.base.saturating_mul(2u32.saturating_pow(*failures)).min(self.max);
        *failures = failures.saturating_add(1);
        *due = Some(now + pause);
        pause
    }

    /// `key` succeeded, or is gone: its failures are forgotten.
    pub fn forget(&mut self, key: &K) {
        self.keys.remove(key);
    }

    /// The keys due at `now`, taken: each is due again only if it fails again.
    pub fn due(&mut self, now: Instant) -> Vec<K> {
        let mut taken = Vec::new();
        for (key, (_, due)) in &mut self.keys {
            if due.is_some_and(|at| at <= now) {
                *due = None;
                taken.push(key.clone());
            }
        }
        taken
    }

    /// When the next key is due.
    pub fn next(&self) -> Option<Instant> {
        self.keys.values().filter_map(|(_, due)| *due).min()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    #[test]
    fn retries_double_from_the_base_up_to_the_max_until_forgotten() {
        let start = Instant::now();
        let mut retries = Retries::new(Duration::from_millis(200), Duration::from_secs(1));
        assert_eq!(retries.next(), None);
        let pauses: Vec<Duration> = (0..5).map(|_| retries.failed("a", start)).collect();
        let ms = |ms| Duration::from_millis(ms);
        assert_eq!(pauses, [ms(200), ms(400), ms(800), ms(1000), ms(1000)]);
        assert_eq!(retries.next(), Some(start + ms(1000)));
        // Not due before its time; taken once when due; due again only after failing again.
        assert!(retries.due(start + ms(999)).is_empty());
        assert_eq!(retries.due(start + ms(1000)), ["a"]);
        assert_eq!(retries.next(), None);
        assert!(retries.due(start + ms(5000)).is_empty());
        // Its failures still count until it is forgotten.
        assert_eq!(retries.failed("a", start), ms(1000));
        retries.forget(&"a");
        assert_eq!(retries.next(), None);
        assert_eq!(retries.failed("a", start), ms(200));
        // Keys count apart; the earliest is next.
        assert_eq!(retries.failed("b", start + ms(10)), ms(200));
        assert_eq!(retries.next(), Some(start + ms(200)));
        assert_eq!(retries.due(start + ms(210)), ["a", "b"]);
    }

    /// A follower whose work fails its first `failures` passes, recording when each pass ran.
    struct Failing {
        failures: u32,
        passes: Arc<Mutex<Vec<Instant>>>,
        retries: Retries<()>,
    }

    impl Follower for Failing {
        fn reset(&mut self, _cache: usize, _snapshot: &[Arc<Entry>]) {}

        fn change(&mut self, _cache: usize, _change: &Change) {}

        async fn settled(&mut self) {
            let now = Instant::now();
            let _due = self.retries.due(now);
            self.passes.lock().unwrap().push(now);
            if self.failures > 0 {
                self.failures -= 1;
                self.retries.failed((), now);
            } else {
                self.retries.forget(&());
            }
        }

        fn retry_at(&self) -> Option<Instant> {
            self.retries.next()
        }
    }

    #[tokio::test]
    async fn failed_work_is_settled_again_without_a_change() {
        let cache = Arc::new(Cache::serving_for_tests("/registry/configmaps/"));
        let passes = Arc::new(Mutex::new(Vec::new()));
        let base = Duration::from_millis(5);
        let follower = Failing {
            failures: 3,
            passes: passes.clone(),
            retries: Retries::new(base, Duration::from_secs(1)),
        };
        let _following = Following::start(vec![cache], 1, follower).await;
        // Nothing changes in the cache: every pass after the first is a retry, until one succeeds.
        let deadline = Instant::now() + Duration::from_secs(30);
        while passes.lock().unwrap().len() < 4 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        let passes = passes.lock().unwrap().clone();
        assert_eq!(passes.len(), 4, "the first pass and three retries, no more once one succeeds");
        // Each retry waited at least its pause: 5, 10, 20 ms.
        for (i, pair) in passes.windows(2).enumerate() {
            assert!(pair[1] - pair[0] >= base * 2u32.pow(u32::try_from(i).unwrap()), "{passes:?}");
        }
    }
}
