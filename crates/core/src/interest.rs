//! Interest notifications: wakes whoever watches a literal subject as soon
//! as a subscription on exactly that subject is added or removed, so a push
//! consumer starts delivering the moment its subscriber arrives (and stops
//! when it leaves) rather than at its next poll. nats-server does the same
//! with its sublist's insert and remove notifications; as there, wildcard
//! subscriptions are not reported, and they do not count as interest for
//! push delivery either (`InternalPublisher::has_interest`).
//!
//! Every place that inserts into or removes from the server's sublist calls
//! [`InterestWatch::changed`] after the change, so a watcher that wakes and
//! matches again sees it.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::Mutex;
use tokio::sync::Notify;

#[derive(Default)]
pub struct InterestWatch {
    /// Subjects being watched; a change to any other costs one atomic load.
    watched: AtomicUsize,
    by_subject: Mutex<BTreeMap<Bytes, BTreeMap<u64, Arc<Notify>>>>,
    next_id: AtomicU64,
}

impl InterestWatch {
    /// Reports that a subscription on `subject` came or went.
    pub fn changed(&self, subject: &[u8]) {
        if self.watched.load(Ordering::Acquire) == 0 {
            return;
        }
        if let Some(watchers) = self.by_subject.lock().get(subject) {
            for n in watchers.values() {
                // A stored permit: a watcher that is busy now still wakes.
                n.notify_one();
            }
        }
    }

    /// A watcher with its own wake-up; it watches nothing until
    /// [`Watcher::watch`] names subjects.
    pub fn watcher(self: &Arc<Self>) -> Watcher {
        Watcher {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            watch: self.clone(),
            notify: Arc::new(Notify::new()),
            subjects: Vec::new(),
        }
    }

    fn set(&self, id: u64, old: &[Bytes], new: &[Bytes], notify: &Arc<Notify>) {
        let mut map = self.by_subject.lock();
        for s in old {
            if let Some(w) = map.get_mut(s) {
                if w.remove(&id).is_some() {
                    self.watched.fetch_sub(1, Ordering::AcqRel);
                }
                if w.is_empty() {
                    map.remove(s);
                }
            }
        }
        for s in new {
            if map
                .entry(s.clone())
                .or_default()
                .insert(id, notify.clone())
                .is_none()
            {
                self.watched.fetch_add(1, Ordering::AcqRel);
            }
        }
    }
}

/// One watcher's registration; dropping it stops the watch.
pub struct Watcher {
    id: u64,
    watch: Arc<InterestWatch>,
    notify: Arc<Notify>,
    subjects: Vec<Bytes>,
}

impl Watcher {
    /// Watches exactly `subjects` from now on (duplicates are one).
    pub fn watch<I: IntoIterator<Item = S>, S: AsRef<str>>(&mut self, subjects: I) {
        let mut new: Vec<Bytes> = subjects
            .into_iter()
            .map(|s| Bytes::copy_from_slice(s.as_ref().as_bytes()))
            .collect();
        new.sort();
        new.dedup();
        if new != self.subjects {
            self.watch.set(self.id, &self.subjects, &new, &self.notify);
            self.subjects = new;
        }
    }

    /// The wake-up: resolves once a watched subject's interest changed
    /// since it was last taken.
    pub fn notify(&self) -> Arc<Notify> {
        self.notify.clone()
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.watch.set(self.id, &self.subjects, &[], &self.notify);
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::pin::pin;
    use std::task::{Context, Poll, Waker};

    use super::*;

    fn woken(n: &Notify) -> bool {
        let mut f = pin!(n.notified());
        matches!(
            f.as_mut().poll(&mut Context::from_waker(Waker::noop())),
            Poll::Ready(())
        )
    }

    #[test]
    fn a_change_on_a_watched_subject_wakes_its_watchers_only() {
        let watch = Arc::new(InterestWatch::default());
        let mut a = watch.watcher();
        let mut b = watch.watcher();
        a.watch(["deliver.a", "deliver.both"]);
        b.watch(["deliver.both"]);
        let (na, nb) = (a.notify(), b.notify());

        watch.changed(b"deliver.a");
        assert!(woken(&na));
        assert!(!woken(&nb));
        // The permit was taken.
        assert!(!woken(&na));

        watch.changed(b"deliver.both");
        assert!(woken(&na) && woken(&nb));

        watch.changed(b"deliver.other");
        watch.changed(b"deliver.>");
        assert!(!woken(&na) && !woken(&nb));
    }

    #[test]
    fn rewatching_and_dropping_unregister() {
        let watch = Arc::new(InterestWatch::default());
        let mut a = watch.watcher();
        a.watch(["x", "y", "x"]);
        assert_eq!(watch.watched.load(Ordering::Acquire), 2);
        a.watch(["y", "z"]);
        assert_eq!(watch.watched.load(Ordering::Acquire), 2);
        let na = a.notify();
        watch.changed(b"x");
        assert!(!woken(&na));
        watch.changed(b"z");
        assert!(woken(&na));

        let mut b = watch.watcher();
        b.watch(["y"]);
        drop(a);
        assert_eq!(watch.watched.load(Ordering::Acquire), 1);
        assert_eq!(
            watch.by_subject.lock().keys().cloned().collect::<Vec<_>>(),
            vec![Bytes::from_static(b"y")]
        );
        drop(b);
        assert_eq!(watch.watched.load(Ordering::Acquire), 0);
        assert!(watch.by_subject.lock().is_empty());
    }
}
