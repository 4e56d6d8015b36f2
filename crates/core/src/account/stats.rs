//! What an account's traffic adds up to on this server, as nats-server's
//! account statistics count it (`/accstatz`, and `STATZ` to come):
//! - **received**: messages (headers and payload) that connections of
//!   the account published here: its clients, its leaf node connections
//!   (also under `leafs`), and routes bringing its messages (also under
//!   `routes`);
//! - **sent**: deliveries the account's subject space made, one per
//!   subscriber, route or leaf node connection a message went to, with
//!   the message's size each time;
//! - **slow consumers**: its clients cut off for falling behind.
//!
//! Counters are relaxed atomics, added once per read (a client's batch)
//! or per message (routes, leaf nodes), never read for a decision.

use std::sync::atomic::{AtomicU64, Ordering};

/// Where a message came from or went to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Peer {
    Client,
    Route,
    Leaf,
}

#[derive(Debug, Default)]
struct Counter {
    msgs: AtomicU64,
    bytes: AtomicU64,
}

impl Counter {
    fn add(&self, msgs: u64, bytes: u64) {
        self.msgs.fetch_add(msgs, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    fn read(&self) -> Count {
        Count {
            msgs: self.msgs.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
        }
    }
}

/// Messages and bytes, read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Count {
    pub msgs: u64,
    pub bytes: u64,
}

/// One direction's counters: every message, and those of routes and leaf
/// nodes again on their own.
#[derive(Debug, Default)]
pub struct Traffic {
    total: Counter,
    routes: Counter,
    leafs: Counter,
}

/// One direction, read: `total` includes `routes` and `leafs`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TrafficCount {
    pub total: Count,
    pub routes: Count,
    pub leafs: Count,
}

impl Traffic {
    pub fn add(&self, peer: Peer, msgs: u64, bytes: u64) {
        self.total.add(msgs, bytes);
        match peer {
            Peer::Client => {}
            Peer::Route => self.routes.add(msgs, bytes),
            Peer::Leaf => self.leafs.add(msgs, bytes),
        }
    }

    pub fn read(&self) -> TrafficCount {
        TrafficCount {
            total: self.total.read(),
            routes: self.routes.read(),
            leafs: self.leafs.read(),
        }
    }
}

#[derive(Debug, Default)]
pub struct Stats {
    pub received: Traffic,
    pub sent: Traffic,
    slow_consumers: AtomicU64,
}

impl Stats {
    pub fn slow_consumer(&self) {
        self.slow_consumers.fetch_add(1, Ordering::Relaxed);
    }

    pub fn slow_consumers(&self) -> u64 {
        self.slow_consumers.load(Ordering::Relaxed)
    }
}

/// Deliveries counted while one read is routed, added to an account's
/// `sent` when the account changes or the read ends: one set of atomic
/// adds per account and read, not per delivery.
#[derive(Debug, Default)]
pub struct Tally {
    total: Count,
    routes: Count,
    leafs: Count,
}

impl Tally {
    pub fn add(&mut self, peer: Peer, bytes: u64) {
        let part = match peer {
            Peer::Client => None,
            Peer::Route => Some(&mut self.routes),
            Peer::Leaf => Some(&mut self.leafs),
        };
        for c in std::iter::once(&mut self.total).chain(part) {
            c.msgs += 1;
            c.bytes += bytes;
        }
    }

    /// Adds what was counted to `to`, and starts again from nothing.
    pub fn flush(&mut self, to: &Traffic) {
        let t = std::mem::take(self);
        debug_assert!(t.routes.msgs + t.leafs.msgs <= t.total.msgs);
        to.total.add(t.total.msgs, t.total.bytes);
        to.routes.add(t.routes.msgs, t.routes.bytes);
        to.leafs.add(t.leafs.msgs, t.leafs.bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tally_adds_to_the_total_and_to_its_peers_part() {
        let sent = Traffic::default();
        let mut t = Tally::default();
        t.add(Peer::Client, 5);
        t.add(Peer::Route, 7);
        t.add(Peer::Leaf, 11);
        t.flush(&sent);
        t.flush(&sent); // nothing left to add
        let c = sent.read();
        assert_eq!(c.total, Count { msgs: 3, bytes: 23 });
        assert_eq!(c.routes, Count { msgs: 1, bytes: 7 });
        assert_eq!(c.leafs, Count { msgs: 1, bytes: 11 });
    }
}
