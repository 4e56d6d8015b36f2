//! Group commit: one thread runs every stream's pending fsyncs. Each
//! request is a set of sync handles and a channel to answer on; the thread
//! takes everything queued, syncs it in one `SyncRound` (each file once),
//! and answers all, so many publishes across many streams, and the many
//! batches one busy stream has queued, share each fsync.
//!
//! A lone small batch is synced on its caller's thread instead
//! ([`Committer::try_here`]): when nothing else is waiting there is no
//! group to form, and the two thread handoffs (to this thread and back to
//! the runtime) cost a third of a synchronous publish's latency. Only one
//! caller at a time may do so, so at most one runtime worker is ever
//! blocked on a disk.
//!
//! A stream whose commit fails is poisoned: its later requests, already
//! queued, are failed without running, because their writes were laid on
//! top of ones that may not be on disk. The stream clears the flag once it
//! has reloaded from disk.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Instant;

use store::{SyncHandle, SyncLatency, SyncRound};
use tokio::sync::oneshot;

pub type Done = oneshot::Receiver<std::io::Result<()>>;

struct Request {
    handles: Vec<SyncHandle>,
    poison: Arc<AtomicBool>,
    done: oneshot::Sender<std::io::Result<()>>,
}

#[derive(Clone)]
pub struct Committer {
    tx: mpsc::Sender<Request>,
    /// Requests queued or being synced by the commit thread.
    queued: Arc<AtomicUsize>,
    /// A caller is syncing on its own thread.
    here: Arc<AtomicBool>,
    /// How long each commit took to be durable.
    latency: Arc<SyncLatency>,
}

impl Committer {
    pub fn start() -> Self {
        let (tx, rx) = mpsc::channel::<Request>();
        let queued = Arc::new(AtomicUsize::new(0));
        let left = queued.clone();
        let latency = Arc::new(SyncLatency::default());
        let timed = latency.clone();
        std::thread::Builder::new()
            .name("flotilla-commit".into())
            .spawn(move || {
                while let Ok(first) = rx.recv() {
                    let mut batch = vec![first];
                    while let Ok(more) = rx.try_recv() {
                        batch.push(more);
                    }
                    let mut round = SyncRound::default();
                    for req in batch {
                        let since = Instant::now();
                        let result = run(&mut round, req.handles, &req.poison);
                        timed.record(since);
                        left.fetch_sub(1, Ordering::AcqRel);
                        let _ = req.done.send(result);
                    }
                }
            })
            .expect("spawn commit thread");
        Committer {
            tx,
            queued,
            here: Arc::new(AtomicBool::new(false)),
            latency,
        }
    }

    /// Requests queued or being synced by the commit thread.
    pub fn queued(&self) -> usize {
        self.queued.load(Ordering::Acquire)
    }

    /// How long commits took.
    pub fn latency(&self) -> &SyncLatency {
        &self.latency
    }

    /// Syncs `handles` on the calling thread if the commit thread is idle
    /// and no other caller is doing the same; otherwise gives them back.
    /// The caller must have no earlier commit of its own still pending.
    pub fn try_here(
        &self,
        handles: Vec<SyncHandle>,
        poison: &AtomicBool,
    ) -> Result<Done, Vec<SyncHandle>> {
        if self.queued.load(Ordering::Acquire) != 0
            || self
                .here
                .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
        {
            return Err(handles);
        }
        let since = Instant::now();
        let result = run(&mut SyncRound::default(), handles, poison);
        self.latency.record(since);
        self.here.store(false, Ordering::Release);
        let (done, rx) = oneshot::channel();
        let _ = done.send(result);
        Ok(rx)
    }

    /// Queues `handles`; the receiver resolves once they are all synced.
    pub fn commit(&self, handles: Vec<SyncHandle>, poison: Arc<AtomicBool>) -> Done {
        self.queued.fetch_add(1, Ordering::AcqRel);
        let (done, rx) = oneshot::channel();
        let _ = self.tx.send(Request {
            handles,
            poison,
            done,
        });
        rx
    }
}

fn run(
    round: &mut SyncRound,
    handles: Vec<SyncHandle>,
    poison: &AtomicBool,
) -> std::io::Result<()> {
    if poison.load(Ordering::Acquire) {
        return Err(std::io::Error::other(
            "an earlier write of this stream failed",
        ));
    }
    for h in handles {
        if let Err(e) = round.sync(h) {
            poison.store(true, Ordering::Release);
            return Err(e);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;
    use std::sync::mpsc as std_mpsc;
    use std::time::Duration;

    use super::*;

    fn counted(runs: &Arc<AtomicUsize>, ok: bool) -> SyncHandle {
        let runs = runs.clone();
        SyncHandle::new(move || {
            runs.fetch_add(1, Ordering::Relaxed);
            match ok {
                true => Ok(()),
                false => Err(std::io::Error::other("disk on fire")),
            }
        })
    }

    #[test]
    fn an_idle_committer_lets_the_caller_sync_and_a_failure_poisons() {
        let c = Committer::start();
        let runs = Arc::new(AtomicUsize::new(0));
        let poison = Arc::new(AtomicBool::new(false));
        let mut done = c
            .try_here(vec![counted(&runs, true)], &poison)
            .unwrap_or_else(|_| panic!("the commit thread is idle"));
        assert_eq!(runs.load(Ordering::Relaxed), 1, "synced before returning");
        assert!(matches!(done.try_recv(), Ok(Ok(()))));

        let mut done = c
            .try_here(vec![counted(&runs, false)], &poison)
            .unwrap_or_else(|_| panic!("the commit thread is idle"));
        assert!(matches!(done.try_recv(), Ok(Err(_))));
        assert!(poison.load(Ordering::Acquire), "the stream is poisoned");
        let mut done = c
            .try_here(vec![counted(&runs, true)], &poison)
            .unwrap_or_else(|_| panic!("the commit thread is idle"));
        assert!(matches!(done.try_recv(), Ok(Err(_))), "later writes fail");
        assert_eq!(runs.load(Ordering::Relaxed), 2, "and are not synced");
    }

    #[test]
    fn a_busy_committer_gives_the_handles_back() {
        let c = Committer::start();
        let poison = Arc::new(AtomicBool::new(false));
        // Holds the commit thread inside a sync until released.
        let (entered, inside) = std_mpsc::channel();
        let (release, held) = std_mpsc::channel::<()>();
        let blocker = SyncHandle::new(move || {
            let _ = entered.send(());
            let _ = held.recv();
            Ok(())
        });
        let queued = c.commit(vec![blocker], poison.clone());
        inside.recv_timeout(Duration::from_secs(10)).unwrap();
        let runs = Arc::new(AtomicUsize::new(0));
        let back = c.try_here(vec![counted(&runs, true)], &poison);
        assert!(matches!(back, Err(ref h) if h.len() == 1), "given back");
        assert_eq!(runs.load(Ordering::Relaxed), 0);
        release.send(()).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        assert!(rt.block_on(queued).unwrap().is_ok());
        // Idle again once the thread has answered.
        assert!(c.try_here(vec![counted(&runs, true)], &poison).is_ok());
    }
}
