//! Leaf nodes: connections to servers outside this cluster, speaking
//! nats-server's leaf node protocol (`protocol::route`'s leaf dialect).
//! This is the registry every task shares; the connections themselves
//! run in `conn::leaf`.
//!
//! A leaf node connection is bound to one account on each side. What a
//! side tells the other is the interest in that account, as nats-server's
//! `initLeafNodeSmapAndSendSubs` and `updateLeafNodes` decide it
//! ([`shares`]):
//! - a hub (the side that accepted) tells everything: its clients', its
//!   own, its routes' and its other leaf nodes';
//! - a spoke (the side that dialed) tells its clients', its own and its
//!   accepted leaf nodes', never its routes' or another hub's (its
//!   cluster's servers each dial the hub themselves);
//! - nobody is told its own interest back, and no side tells the
//!   JetStream API (`$JS.API.>`, `$KV.>`, `$OBJ.>`: nats-server's
//!   `denyAllClientJs`, both ways), which only JetStream domains extend.
//!
//! A side whose JetStream has a domain tells `$JS.<domain>.API.>` too,
//! which it maps onto its API, so clients across the connection reach it
//! by the domain's name.
//!
//! Each side also subscribes a loop detection subject (`$LDS.` and a
//! random token, one per account). Interest in it travels like any other;
//! a server that is told its own has been reached by a cycle, and drops
//! the connection.
//!
//! Lock order: `Leafs::inner` may be held while taking a leaf's `told`
//! and the trie's read lock (to list an account's interest), and while
//! pushing into a leaf's outbound buffer.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;
use protocol::route as rp;
use subjects::subject_matches_filter;

use crate::client::Account;
pub use crate::client::Deny;
use crate::client::{Client, ClosedState, LeafRole, Subscription};

/// Subjects never shared over a leaf node connection, either way.
pub const DENIED: &[&[u8]] = &[b"$JS.API.>", b"$KV.>", b"$OBJ.>"];

/// The prefix of loop detection subjects.
pub const LOOP_PREFIX: &[u8] = b"$LDS.";

/// Whether `subject` (or a subscription's filter) is one no leaf node
/// connection carries.
pub fn denied(subject: &[u8]) -> bool {
    DENIED.iter().any(|d| subject_matches_filter(subject, d))
}

/// (subject, queue group): one line of interest on a leaf connection.
pub type InterestKey = (Bytes, Option<Bytes>);

/// The deny lists of leaf connection `client` (none for anything else).
fn deny_of(client: &Client) -> Option<&Deny> {
    client.leaf_deny.get()
}

/// Whether a message on `subject` may not go out on `client`.
pub fn export_denied(client: &Client, subject: &[u8]) -> bool {
    deny_of(client).is_some_and(|d| d.denies_export(subject))
}

/// Whether a message on `subject` from `client` is not taken.
pub fn import_denied(client: &Client, subject: &[u8]) -> bool {
    deny_of(client).is_some_and(|d| d.denies_import(subject))
}

/// A registered leaf node connection.
pub struct Leaf {
    pub client: Arc<Client>,
    pub role: LeafRole,
    /// The account it is bound to on this side.
    pub account: Arc<Account>,
    /// The other server's name (its id if it has none), from its CONNECT
    /// or INFO.
    pub remote_name: String,
    /// Interest told to it: for each line, the keys of the
    /// subscriptions behind it, so that a change seen twice (while the
    /// connection was being registered) counts once.
    told: Mutex<BTreeMap<InterestKey, BTreeSet<u64>>>,
    /// Interest it told: its subscription in the account's trie, by line.
    pub subs: Mutex<BTreeMap<InterestKey, Arc<Subscription>>>,
}

impl Leaf {
    pub fn new(
        client: Arc<Client>,
        role: LeafRole,
        account: Arc<Account>,
        remote_name: String,
    ) -> Leaf {
        debug_assert_eq!(client.leaf, Some(role));
        Leaf {
            client,
            role,
            account,
            remote_name,
            told: Mutex::new(BTreeMap::new()),
            subs: Mutex::new(BTreeMap::new()),
        }
    }

    /// Counts `sub` in (or out of) what this connection was told, and
    /// sends the line that changed: `LS+` when a subject gains its first
    /// subscription and whenever a queue group's size changes, `LS-` when
    /// the last one goes.
    fn tell(&self, sub: &Subscription, add: bool, out: &mut BytesMut) {
        debug_assert!(
            !denied(&sub.subject),
            "JetStream API interest is never told"
        );
        let key = (sub.subject.clone(), sub.queue.clone());
        let mut told = self.told.lock();
        let keys = told.entry(key.clone()).or_default();
        let changed = if add {
            keys.insert(sub.key)
        } else {
            keys.remove(&sub.key)
        };
        if !changed {
            return;
        }
        let n = keys.len() as u32;
        if n == 0 {
            told.remove(&key);
        }
        match (&sub.queue, n) {
            (None, 1) if add => rp::sub(out, None, &sub.subject, None),
            (None, 0) => rp::unsub(out, None, &sub.subject, None),
            (None, _) => {}
            (Some(q), 0) => rp::unsub(out, None, &sub.subject, Some(q)),
            (Some(q), n) => rp::sub(out, None, &sub.subject, Some((q, n))),
        }
    }

    /// Tells `subject` as interest that stays while the connection
    /// does, whatever subscriptions come and go on it ([`STANDING`]).
    fn stand(&self, subject: &str, out: &mut BytesMut) {
        let key = (Bytes::copy_from_slice(subject.as_bytes()), None);
        let mut told = self.told.lock();
        let keys = told.entry(key).or_default();
        if keys.insert(STANDING) && keys.len() == 1 {
            rp::sub(out, None, subject.as_bytes(), None);
        }
    }

    /// Tells the account's standing interest as it is now (a reload
    /// changed its imports or mappings): subjects new to it as interest,
    /// subjects it no longer has withdrawn unless subscriptions still
    /// hold them.
    fn restand(&self, now: &[String], out: &mut BytesMut) {
        let wanted: BTreeSet<&[u8]> = now.iter().map(|s| s.as_bytes()).collect();
        let mut told = self.told.lock();
        let gone: Vec<InterestKey> = told
            .iter()
            .filter(|((subject, queue), keys)| {
                queue.is_none() && keys.contains(&STANDING) && !wanted.contains(subject.as_ref())
            })
            .map(|(key, _)| key.clone())
            .collect();
        for key in gone {
            let keys = told.get_mut(&key).expect("listed above");
            keys.remove(&STANDING);
            if keys.is_empty() {
                told.remove(&key);
                rp::unsub(out, None, &key.0, None);
            }
        }
        drop(told);
        for subject in now {
            self.stand(subject, out);
        }
    }

    /// Subscriptions it told, with the number of lines (for `/leafz`).
    pub fn subscriptions(&self) -> Vec<Bytes> {
        self.subs
            .lock()
            .keys()
            .map(|(subject, _)| subject.clone())
            .collect()
    }

    fn send(&self, b: &BytesMut) {
        if b.is_empty() {
            return;
        }
        self.client
            .out
            .push(usize::MAX, None, |out| out.extend_from_slice(b));
        self.client.out.flush();
    }
}

/// The key in `Leaf::told` of interest told for the account itself, not
/// a subscription (subscription keys count up from 1, never this far).
const STANDING: u64 = u64::MAX;

/// Subjects a connection's account wants to hear whoever subscribes: its
/// imported services' (requests go on to the exporter) and its mappings'
/// sources (publishes are mapped here), as nats-server's
/// `initLeafNodeSmapAndSendSubs` tells them.
fn standing_interest(account: &Account) -> Vec<String> {
    let mut subjects: Vec<String> = account
        .imports()
        .services
        .iter()
        .map(|s| s.local.clone())
        .collect();
    if let Some(mappings) = account.mappings() {
        subjects.extend(mappings.shown().into_iter().map(|(source, _)| source));
    }
    subjects
}

/// The standing interest `leaf` is told: its account's, less what the
/// connection may not carry.
fn standing_for(leaf: &Leaf) -> Vec<String> {
    standing_interest(&leaf.account)
        .into_iter()
        .filter(|s| !denied(s.as_bytes()) && !import_denied(&leaf.client, s.as_bytes()))
        .collect()
}

/// Whether `leaf` is told of `sub` (see the module's rules).
pub fn shares(leaf: &Leaf, sub: &Subscription) -> bool {
    let origin = &sub.client;
    if origin.cid == leaf.client.cid || !Arc::ptr_eq(&leaf.account, &sub.account) {
        return false;
    }
    if denied(&sub.subject) || import_denied(&leaf.client, &sub.subject) {
        return false;
    }
    if sub.subject.starts_with(LOOP_PREFIX) {
        // Loop detection interest goes everywhere it can close a cycle.
        return true;
    }
    match (origin.is_route, origin.leaf) {
        (true, _) | (_, Some(LeafRole::Solicited)) => leaf.role == LeafRole::Accepted,
        _ => true,
    }
}

#[derive(Default)]
pub struct Leafs {
    /// Registered connections by cid.
    inner: Mutex<BTreeMap<u64, Arc<Leaf>>>,
    /// How many `inner` holds: every subscription change asks, and a
    /// server without leaf nodes answers without taking the lock.
    registered: AtomicUsize,
    /// This server's loop detection subject in each account, by name.
    loop_subjects: Mutex<BTreeMap<String, Bytes>>,
    /// The bound leaf node port; 0 when none.
    pub port: AtomicU64,
}

impl Leafs {
    /// Registers `leaf` and tells it the interest it shares, with this
    /// server's loop detection subject first.
    pub fn register(&self, leaf: Arc<Leaf>) {
        let mut inner = self.inner.lock();
        inner.insert(leaf.client.cid, leaf.clone());
        self.registered.store(inner.len(), Ordering::Release);
        let mut out = BytesMut::new();
        rp::sub(&mut out, None, &self.loop_subject(&leaf.account), None);
        if let Some(api) = leaf.account.domain_api_interest() {
            rp::sub(&mut out, None, &api, None);
        }
        for subject in standing_for(&leaf) {
            leaf.stand(&subject, &mut out);
        }
        // Under `inner`: a change made meanwhile waits, and then counts
        // once (`Leaf::tell`).
        leaf.account.sublist.read().for_each(|sub| {
            if shares(&leaf, sub) {
                leaf.tell(sub, true, &mut out);
            }
        });
        drop(inner);
        leaf.send(&out);
    }

    /// Tells every connection its account's standing interest as it is
    /// now (after a reload of imports or mappings).
    pub fn restand(&self) {
        if self.registered.load(Ordering::Acquire) == 0 {
            return;
        }
        let inner = self.inner.lock();
        for leaf in inner.values() {
            let mut out = BytesMut::new();
            leaf.restand(&standing_for(leaf), &mut out);
            leaf.send(&out);
        }
    }

    /// Forgets `leaf`.
    pub fn deregister(&self, leaf: &Leaf) {
        let mut inner = self.inner.lock();
        inner.remove(&leaf.client.cid);
        self.registered.store(inner.len(), Ordering::Release);
    }

    /// A subscription came (`add`) or went: tells every leaf node
    /// connection that shares it.
    pub fn interest(&self, sub: &Subscription, add: bool) {
        // A connection registered after this load lists the trie itself,
        // under `inner`, so it misses nothing this skips.
        if self.registered.load(Ordering::Acquire) == 0 {
            return;
        }
        let inner = self.inner.lock();
        for leaf in inner.values() {
            if shares(leaf, sub) {
                let mut out = BytesMut::new();
                leaf.tell(sub, add, &mut out);
                leaf.send(&out);
            }
        }
    }

    /// This server's loop detection subject in `account`.
    pub fn loop_subject(&self, account: &Account) -> Bytes {
        self.loop_subjects
            .lock()
            .entry(account.name.clone())
            .or_insert_with(|| {
                let token = auth::nonce();
                Bytes::from(format!("$LDS.{token}"))
            })
            .clone()
    }

    /// Every registered connection, oldest first.
    pub fn all(&self) -> Vec<Arc<Leaf>> {
        self.inner.lock().values().cloned().collect()
    }

    pub fn count(&self) -> usize {
        self.registered.load(Ordering::Acquire)
    }

    /// Closes every connection (shutdown).
    pub fn close_all(&self) {
        for leaf in self.all() {
            leaf.client.close(ClosedState::ServerShutdown);
        }
    }
}
