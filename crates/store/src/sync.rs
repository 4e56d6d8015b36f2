//! Making writes durable: sync handles, built where the writes are made
//! and run later by a group-commit thread, and the round in which that
//! thread runs many of them with one sync per file.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// Makes earlier writes durable when run. Built on the stream's task,
/// run by the group-commit thread, so the stream never waits on fsync.
///
/// A handle is a list of parts run in order. A part that syncs one open
/// file carries a [`SyncKey`], so that a commit round holding many
/// handles for the same file syncs it once: every handle in a round was
/// made after its writes, so one sync at the round's time covers them
/// all (each redundant `fdatasync` still costs a device cache flush).
pub struct SyncHandle(Vec<SyncPart>);

/// One step of a [`SyncHandle`].
pub struct SyncPart {
    pub key: Option<SyncKey>,
    run: Box<dyn FnOnce() -> io::Result<()> + Send>,
}

/// Which open file a part syncs, and whether its directory entry too. The
/// file is named by its open handle's address, which the part keeps
/// alive: a file removed and made again under the same name is another
/// file, with another key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct SyncKey {
    file: usize,
    dir_too: bool,
}

impl SyncKey {
    pub(crate) fn new(file: usize, dir_too: bool) -> Self {
        SyncKey { file, dir_too }
    }

    /// Whether a completed sync of `self` makes a sync of `other` redundant.
    pub fn covers(self, other: SyncKey) -> bool {
        self.file == other.file && (self.dir_too || !other.dir_too)
    }
}

impl SyncHandle {
    pub fn new(f: impl FnOnce() -> io::Result<()> + Send + 'static) -> Self {
        SyncHandle(vec![SyncPart {
            key: None,
            run: Box::new(f),
        }])
    }

    pub(crate) fn keyed(key: SyncKey, f: impl FnOnce() -> io::Result<()> + Send + 'static) -> Self {
        SyncHandle(vec![SyncPart {
            key: Some(key),
            run: Box::new(f),
        }])
    }

    pub fn sync(self) -> io::Result<()> {
        self.0.into_iter().try_for_each(SyncPart::run)
    }

    /// Both, in order.
    pub fn and(mut self, other: SyncHandle) -> SyncHandle {
        self.0.extend(other.0);
        self
    }

    pub fn into_parts(self) -> Vec<SyncPart> {
        self.0
    }
}

impl SyncPart {
    pub fn run(self) -> io::Result<()> {
        (self.run)()
    }
}

/// One group-commit round: the handles of every request taken from the
/// queue together, run in order. A file already synced in this round is
/// not synced again, since every handle in the round was made after its
/// writes; a file whose sync failed fails every later handle that needs
/// it.
#[derive(Default)]
pub struct SyncRound {
    synced: Vec<SyncKey>,
    failed: Vec<(SyncKey, String)>,
    /// Parts skipped as already covered, for tests and statistics.
    pub skipped: u64,
}

impl SyncRound {
    pub fn sync(&mut self, h: SyncHandle) -> io::Result<()> {
        for part in h.into_parts() {
            let Some(key) = part.key else {
                part.run()?;
                continue;
            };
            if let Some((_, e)) = self.failed.iter().find(|(k, _)| k.file == key.file) {
                return Err(io::Error::other(format!(
                    "an earlier sync of this file failed: {e}"
                )));
            }
            if self.synced.iter().any(|k| k.covers(key)) {
                self.skipped += 1;
                continue;
            }
            match part.run() {
                Ok(()) => self.synced.push(key),
                Err(e) => {
                    self.failed.push((key, e.to_string()));
                    return Err(e);
                }
            }
        }
        Ok(())
    }
}

/// Upper bounds (seconds) of the durable-write latency buckets.
pub const LATENCY_BOUNDS: [f64; 14] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
];

/// A histogram of how long durable writes (sync rounds) took, as
/// Prometheus counts one: a count per bucket (the last for everything
/// slower) and their total time. Timing is the driver's: the store's
/// logic never reads the clock.
#[derive(Default)]
pub struct SyncLatency {
    buckets: [AtomicU64; LATENCY_BOUNDS.len() + 1],
    sum_nanos: AtomicU64,
}

impl SyncLatency {
    /// Counts a sync that started at `since` and has just ended.
    pub fn record(&self, since: Instant) {
        let took = since.elapsed();
        let secs = took.as_secs_f64();
        let i = LATENCY_BOUNDS.partition_point(|&b| b < secs);
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
        self.sum_nanos
            .fetch_add(took.as_nanos() as u64, Ordering::Relaxed);
    }

    /// Each bucket's own count (not cumulative), and the total time.
    pub fn snapshot(&self) -> (Vec<u64>, f64) {
        let counts = self
            .buckets
            .iter()
            .map(|b| b.load(Ordering::Relaxed))
            .collect();
        let sum = self.sum_nanos.load(Ordering::Relaxed) as f64 / 1e9;
        (counts, sum)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use super::*;

    fn counted(runs: &Arc<AtomicUsize>, key: Option<SyncKey>, ok: bool) -> SyncHandle {
        let runs = runs.clone();
        let f = move || {
            runs.fetch_add(1, Ordering::Relaxed);
            if ok {
                Ok(())
            } else {
                Err(io::Error::other("disk on fire"))
            }
        };
        match key {
            Some(k) => SyncHandle::keyed(k, f),
            None => SyncHandle::new(f),
        }
    }

    #[test]
    fn one_sync_per_file_per_round() {
        let runs = Arc::new(AtomicUsize::new(0));
        let (a, b) = (SyncKey::new(1, false), SyncKey::new(2, false));
        let mut round = SyncRound::default();
        for _ in 0..5 {
            let h = counted(&runs, Some(a), true).and(counted(&runs, Some(b), true));
            round.sync(h).unwrap();
        }
        assert_eq!(runs.load(Ordering::Relaxed), 2);
        assert_eq!(round.skipped, 8);
        // Unkeyed parts (removals, directory syncs of other kinds) always run.
        round.sync(counted(&runs, None, true)).unwrap();
        round.sync(counted(&runs, None, true)).unwrap();
        assert_eq!(runs.load(Ordering::Relaxed), 4);
        // A new round syncs again.
        SyncRound::default()
            .sync(counted(&runs, Some(a), true))
            .unwrap();
        assert_eq!(runs.load(Ordering::Relaxed), 5);
    }

    #[test]
    fn a_file_sync_does_not_cover_its_directory_entry() {
        let runs = Arc::new(AtomicUsize::new(0));
        let mut round = SyncRound::default();
        for dir_too in [false, true, false, true] {
            round
                .sync(counted(&runs, Some(SyncKey::new(1, dir_too)), true))
                .unwrap();
        }
        assert_eq!(runs.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn a_failed_sync_fails_every_later_handle_of_that_file() {
        let runs = Arc::new(AtomicUsize::new(0));
        let (a, b) = (SyncKey::new(1, false), SyncKey::new(2, false));
        let mut round = SyncRound::default();
        assert!(round.sync(counted(&runs, Some(a), false)).is_err());
        assert!(round.sync(counted(&runs, Some(a), true)).is_err());
        assert!(round
            .sync(counted(&runs, Some(SyncKey::new(1, true)), true))
            .is_err());
        round.sync(counted(&runs, Some(b), true)).unwrap();
        // The failed file was tried once; the other file still synced.
        assert_eq!(runs.load(Ordering::Relaxed), 2);
    }
}
