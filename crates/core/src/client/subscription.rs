//! A client's subscription, as stored in the trie and in the client's sid
//! map. It holds its client strongly, for delivery without an upgrade per
//! message; the cycle (client → sid map → subscription → client) is broken
//! when the connection's cleanup empties the map.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;

use super::Client;

/// An account of this server: a trie of client subscriptions.
pub type Account = crate::account::Account<Subscription>;
/// Every account of this server.
pub type Accounts = crate::account::Accounts<Subscription>;

pub struct Subscription {
    /// Server-wide unique key in the trie.
    pub key: u64,
    pub client: Arc<Client>,
    /// Whose trie it is in: its client's account, or for a route's, the
    /// account the remote named.
    pub account: Arc<Account>,
    pub subject: Bytes,
    pub queue: Option<Bytes>,
    pub sid: Bytes,
    /// Auto-unsubscribe count; 0 means none.
    pub max: AtomicU64,
    /// Messages delivered so far.
    pub delivered: AtomicU64,
    /// Set once removed, so publishers holding an older match result skip it.
    closed: AtomicBool,
    /// For the server's own subscriptions: where messages go instead of
    /// an outbound buffer.
    pub sink: Option<Arc<dyn InternalSink>>,
    /// For a route's queue subscription: how many members the remote
    /// server has, so a queue member is picked fairly cluster-wide.
    pub weight: AtomicU32,
    /// Its interest is told to routes: every client subscription, and the
    /// server's own cluster services.
    pub advertised: AtomicBool,
    /// It stands for an import, not for its client's own interest
    /// (`crate::imports`).
    pub via: Option<Via>,
    /// It hears its account's stream imports (has shadows): every
    /// client's, and the server's own only where asked
    /// (`server::Reached::imports`).
    pub takes_imports: bool,
    /// For a client's subscription: its shadows in the accounts whose
    /// streams its account imports. Emptied when it is removed, which
    /// ends the shadow → subscription → shadow cycle.
    pub shadows: parking_lot::Mutex<Vec<Arc<Subscription>>>,
}

/// What a subscription that stands for an import does with a message.
pub enum Via {
    /// The shadow of `parent`, a subscription in an account that imports
    /// a stream, in the exporter's trie: a message here goes to
    /// `parent`'s client under the subject `import.shown` gives it.
    Shadow {
        parent: Arc<Subscription>,
        import: Arc<crate::account::imports::StreamImport<Subscription>>,
    },
    /// This server's subscription to the reply paths service requests
    /// opened in its account: a reply goes to the requester's account.
    Replies,
}

/// What one delivery attempt found out about the subscription's limit.
#[derive(Debug, PartialEq, Eq)]
pub enum Quota {
    /// Deliver; the subscription stays.
    Deliver,
    /// Deliver; this was the last message, remove the subscription.
    DeliverLast,
    /// Past its limit: drop the message and remove the subscription.
    Exhausted,
}

impl Subscription {
    pub fn new(
        key: u64,
        client: Arc<Client>,
        account: Arc<Account>,
        subject: Bytes,
        queue: Option<Bytes>,
        sid: Bytes,
    ) -> Self {
        Subscription {
            key,
            client,
            account,
            subject,
            queue,
            sid,
            max: AtomicU64::new(0),
            delivered: AtomicU64::new(0),
            closed: AtomicBool::new(false),
            sink: None,
            weight: AtomicU32::new(1),
            advertised: AtomicBool::new(false),
            via: None,
            takes_imports: true,
            shadows: parking_lot::Mutex::new(Vec::new()),
        }
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Relaxed)
    }

    pub fn mark_closed(&self) {
        self.closed.store(true, Ordering::Relaxed);
    }

    /// Counts one delivery against the auto-unsubscribe limit.
    pub fn take_quota(&self) -> Quota {
        let n = self.delivered.fetch_add(1, Ordering::Relaxed) + 1;
        let max = self.max.load(Ordering::Relaxed);
        match max {
            0 => Quota::Deliver,
            m if n < m => Quota::Deliver,
            m if n == m => Quota::DeliverLast,
            _ => {
                // Not delivered, so not counted.
                self.delivered.fetch_sub(1, Ordering::Relaxed);
                Quota::Exhausted
            }
        }
    }
}

/// One message as routed: the subject receivers see, optional reply,
/// header block and payload.
#[derive(Clone, Copy)]
pub struct Message<'a> {
    pub subject: &'a [u8],
    /// The subject it was matched on: `subject` except for JetStream
    /// deliveries, matched on a pull inbox or deliver subject but shown
    /// under the stored message's subject.
    pub routed: &'a [u8],
    pub reply: Option<&'a [u8]>,
    pub headers: Option<&'a [u8]>,
    pub payload: &'a [u8],
}

/// Receives messages for an internal subscription (JetStream's API,
/// streams, acks), on the publisher's task: implementations only copy and
/// queue.
pub trait InternalSink: Send + Sync {
    fn deliver(&self, msg: Message<'_>);

    /// `deliver`, told which connection published (its cid; 0 when the
    /// server did): a sink that reports who asked (JetStream's API
    /// audit) overrides this.
    fn deliver_from(&self, msg: Message<'_>, publisher: u64) {
        let _ = publisher;
        self.deliver(msg);
    }

    /// The stream this sink stores into, for message traces.
    fn traced_stream(&self) -> Option<&str> {
        None
    }
}
