//! Requests a server sends inside the cluster and waits on: the meta
//! leader's STREAM.LIST gathers each stream's info from its leader, as
//! nats-server's does. Answers come back on this server's inbox,
//! `_FLOTILLA.<peer id>.R.<n>`, told to routes.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use parking_lot::Mutex;
use tokio::sync::oneshot;
use tracing::error;

use flotilla_core::bus::{Bus, Message, Reach, Sink as InternalSink};

pub struct Requests {
    bus: Bus,
    inbox: String,
    next: AtomicU64,
    waiting: Arc<Mutex<BTreeMap<u64, oneshot::Sender<Bytes>>>>,
}

/// Hands an answer to whoever waits on its request number.
struct Answers {
    prefix: String,
    waiting: Arc<Mutex<BTreeMap<u64, oneshot::Sender<Bytes>>>>,
}

impl InternalSink for Answers {
    fn deliver(&self, msg: Message<'_>) {
        let routed = String::from_utf8_lossy(msg.routed);
        let n = routed
            .strip_prefix(self.prefix.as_str())
            .and_then(|n| n.parse::<u64>().ok());
        if let Some(tx) = n.and_then(|n| self.waiting.lock().remove(&n)) {
            let _ = tx.send(Bytes::copy_from_slice(msg.payload));
        }
    }
}

impl Requests {
    pub fn start(bus: Bus, peer: u64) -> Requests {
        let inbox = format!("_FLOTILLA.{peer:x}.R");
        let waiting: Arc<Mutex<BTreeMap<u64, oneshot::Sender<Bytes>>>> = Default::default();
        let sink = Arc::new(Answers {
            prefix: format!("{inbox}."),
            waiting: waiting.clone(),
        });
        if let Err(e) = bus.subscribe(&format!("{inbox}.*"), Reach::Cluster, sink) {
            error!("JetStream cluster: could not subscribe to {inbox}.*: {e}");
        }
        Requests {
            bus,
            inbox,
            next: AtomicU64::new(0),
            waiting,
        }
    }

    /// Sends `body` (with `headers`) to `subject` and waits up to `within`
    /// for the answer.
    pub async fn request(
        &self,
        subject: &str,
        headers: Option<&[u8]>,
        body: &[u8],
        within: Duration,
    ) -> Option<Bytes> {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.waiting.lock().insert(n, tx);
        let reply = format!("{}.{n}", self.inbox);
        let mut p = self.bus.publisher();
        p.publish(subject, subject, Some(&reply), headers, body);
        p.flush();
        let answer = tokio::time::timeout(within, rx).await.ok()?.ok();
        self.waiting.lock().remove(&n);
        answer
    }
}
