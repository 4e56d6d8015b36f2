//! Group commit: one thread runs every stream's pending fsyncs. Each
//! request is a set of sync handles and a channel to answer on; the thread
//! takes everything queued, syncs it in one `SyncRound` (each file once),
//! and answers all, so many publishes across many streams, and the many
//! batches one busy stream has queued, share each fsync.
//!
//! A stream whose commit fails is poisoned: its later requests, already
//! queued, are failed without running, because their writes were laid on
//! top of ones that may not be on disk. The stream clears the flag once it
//! has reloaded from disk.

use std::sync::atomic::{AtomicBool, Ordering};
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
}

impl Committer {
    pub fn start() -> Self {
        let (tx, rx) = mpsc::channel::<Request>();
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
                        let _ = req.done.send(result);
                    }
                }
            })
            .expect("spawn commit thread");
        Committer { tx }
    }

    /// Queues `handles`; the receiver resolves once they are all synced.
    pub fn commit(&self, handles: Vec<SyncHandle>, poison: Arc<AtomicBool>) -> Done {
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
