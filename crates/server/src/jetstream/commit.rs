//! Group commit: one thread runs every stream's pending fsyncs. Each
//! request is a set of sync handles and a channel to answer on; the thread
//! takes everything queued, syncs it, and answers all, so many publishes
//! across many streams share each fsync round.

use std::sync::mpsc;

use store::SyncHandle;
use tokio::sync::oneshot;

pub struct Request {
    pub handles: Vec<SyncHandle>,
    pub done: oneshot::Sender<std::io::Result<()>>,
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
                    for req in batch {
                        let mut result = Ok(());
                        for h in req.handles {
                            if let Err(e) = h.sync() {
                                result = Err(e);
                                break;
                            }
                        }
                        let _ = req.done.send(result);
                    }
                }
            })
            .expect("spawn commit thread");
        Committer { tx }
    }

    /// Queues `handles`; the receiver resolves once they are all synced.
    pub fn commit(&self, handles: Vec<SyncHandle>) -> oneshot::Receiver<std::io::Result<()>> {
        let (done, rx) = oneshot::channel();
        let _ = self.tx.send(Request { handles, done });
        rx
    }
}
