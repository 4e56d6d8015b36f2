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

use store::{SyncHandle, SyncRound};
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
}

impl Committer {
    pub fn start() -> Self {
        let (tx, rx) = mpsc::channel::<Request>();
        let queued = Arc::new(AtomicUsize::new(0));
        let left = queued.clone();
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
                        let result = run(&mut round, req.handles, &req.poison);
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
        }
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
        let result = run(&mut SyncRound::default(), handles, poison);
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
