//! Routing one published message to the subscriptions that match it, on
//! the publisher's task. Everything a publisher accumulates over one read
//! lives here (who to wake, who to pause for, counters), so that shared
//! state is touched once per read rather than once per message.
//!
//! A client connection owns one; internal publishers (JetStream replies
//! and deliveries) will own theirs.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use protocol::encode;
use subjects::SubResult;
use tracing::info;

use crate::account::stats::{Peer, Tally};
use crate::client::outbound::Push;
use crate::client::{Client, ClosedState, LeafRole, Message, Quota, Subscription};
use crate::server::Server;

/// Longest a publisher is paused, per read, for subscribers whose
/// outbound buffers are nearly full (nats-server stalls fast producers
/// similarly). Bounded, so a subscriber that has stopped reading still
/// reaches max_pending and is cut off instead of holding publishers.
const MAX_STALL: Duration = Duration::from_millis(10);

/// Past this many distinct targets in one read, duplicates are found with
/// a set instead of a scan.
const SCAN_LIMIT: usize = 16;

pub struct Delivery {
    server: Arc<Server>,
    /// The publishing client, whose own subscriptions are skipped when
    /// `echo` is off. 0 for internal publishers, and while a message
    /// crosses an import.
    pub publisher: u64,
    /// The connection whose publish this is, across imports too: what
    /// internal subscribers are told (`InternalSink::deliver_from`).
    asker: u64,
    pub echo: bool,
    max_pending: usize,
    to_flush: Vec<Arc<Client>>,
    flush_set: hashbrown::HashSet<u64>,
    stalled_on: Vec<Arc<Client>>,
    to_unsubscribe: Vec<Arc<Subscription>>,
    out_msgs: u64,
    out_bytes: u64,
    /// Where the messages routed come from.
    origin: Hop,
    /// Routes and leaf nodes this message goes to, with the queue groups
    /// each was chosen for: one `RMSG` (`LMSG`) per connection, however
    /// many of its subscriptions match.
    remote_targets: Vec<(Arc<Client>, Vec<Bytes>)>,
    /// The account of the message `remote_targets` are for.
    remote_account: Option<Arc<crate::client::Account>>,
    /// Where a routed delivery's reply is put together.
    reply_buf: Vec<u8>,
    /// The message being routed is traced: where it goes is recorded (and
    /// with trace only, nothing is delivered).
    pub trace: Option<crate::trace::Trace>,
    /// The message came in through a service import: stream import
    /// shadows do not take it (nats-server's `pmrMsgImportedFromService`).
    imported: bool,
    /// Deliveries not yet added to their account's `sent`.
    sent: Option<(Arc<crate::client::Account>, Tally)>,
    /// The stream import shadow the next [`Delivery::deliver`] serves:
    /// its account's `sent` counts the delivery, and a trace names its
    /// subject, as nats-server, whose shadow is the delivering
    /// subscription, does.
    pub(crate) shadowing: Option<Arc<Subscription>>,
}

/// Where the messages a [`Delivery`] routes came from, which decides
/// where they may go on ([`Delivery::forwards_to`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hop {
    /// A client of this server, or the server itself.
    Client,
    Route,
    Leaf(LeafRole),
}

impl Delivery {
    /// For what a route or leaf node connection, `peer`, brings.
    pub fn for_peer(server: Arc<Server>, peer: &Client, max_pending: usize) -> Self {
        debug_assert!(peer.is_server());
        let origin = match peer.leaf {
            Some(role) => Hop::Leaf(role),
            None => Hop::Route,
        };
        Delivery {
            origin,
            ..Delivery::new(server, peer.cid, max_pending)
        }
    }

    /// The server it routes in.
    pub(crate) fn server(&self) -> &Arc<Server> {
        &self.server
    }

    pub fn new(server: Arc<Server>, publisher: u64, max_pending: usize) -> Self {
        Delivery {
            server,
            publisher,
            asker: publisher,
            echo: true,
            max_pending,
            to_flush: Vec::new(),
            flush_set: hashbrown::HashSet::new(),
            stalled_on: Vec::new(),
            to_unsubscribe: Vec::new(),
            out_msgs: 0,
            out_bytes: 0,
            origin: Hop::Client,
            remote_targets: Vec::new(),
            remote_account: None,
            reply_buf: Vec::new(),
            trace: None,
            imported: false,
            sent: None,
            shadowing: None,
        }
    }

    /// Routes a message this server publishes into another account on an
    /// import's behalf (`crate::imports`), in the middle of routing the
    /// one that caused it: as this server's own message (a reply that
    /// came over a route may go on over another), with the routing of
    /// the first message put aside meanwhile. `imported`: a request
    /// through a service import, which no stream import shadow takes.
    pub(crate) fn route_imported(
        &mut self,
        result: &SubResult<Arc<Subscription>>,
        msg: Message<'_>,
        imported: bool,
    ) -> bool {
        let targets = std::mem::take(&mut self.remote_targets);
        let account = self.remote_account.take();
        let came = (self.origin, self.publisher, self.imported);
        (self.origin, self.publisher, self.imported) = (Hop::Client, 0, imported);
        let delivered = self.route(result, msg);
        (self.origin, self.publisher, self.imported) = came;
        debug_assert!(self.remote_targets.is_empty(), "sent by the inner route");
        self.remote_targets = targets;
        self.remote_account = account;
        delivered
    }

    /// Delivers to every plain subscriber and one member of each queue
    /// group, cluster-wide and across leaf nodes: a route or a leaf node
    /// counts as a subscriber, and a queue member behind one is picked by
    /// its member count. Returns whether anyone (a route or leaf node
    /// included) got the message.
    pub fn route(&mut self, result: &SubResult<Arc<Subscription>>, msg: Message<'_>) -> bool {
        let mut delivered = false;
        for sub in &result.psubs {
            delivered |= self.deliver_plain(sub, msg);
        }
        for (name, group) in &result.qsubs {
            delivered |= self.deliver_to_group(name, group, msg);
        }
        self.send_to_remotes(msg);
        delivered
    }

    /// Delivers a message another server brought (over a route or a leaf
    /// node connection): to plain subscribers it may go on to (see
    /// [`Delivery::forwards_to`]), and to one member of each queue group
    /// the sending server chose this one for, a local member if there is
    /// one.
    pub fn route_from_peer(
        &mut self,
        result: &SubResult<Arc<Subscription>>,
        msg: Message<'_>,
        queues: &[&[u8]],
    ) {
        debug_assert!(self.origin != Hop::Client, "a peer's message");
        for sub in &result.psubs {
            self.deliver_plain(sub, msg);
        }
        for (name, group) in &result.qsubs {
            if queues.contains(&&name[..]) {
                self.deliver_to_group(name, group, msg);
            }
        }
        self.send_to_remotes(msg);
    }

    /// Whether a message this delivery routes may go on to `target`,
    /// another server's connection, as nats-server's `processMsgResults`
    /// decides: never back where it came from; to routes only from this
    /// server's clients or from a leaf node this server is the hub of
    /// (the mesh is one hop, and a spoke does not feed the hub's interest
    /// to its own cluster); to a leaf node from anywhere but a route,
    /// unless this server is that leaf node's hub, and never the
    /// JetStream API (`leaf::DENIED`).
    fn forwards_to(&self, target: &Client, subject: &[u8]) -> bool {
        forwards(self.origin, self.publisher, target, subject)
    }

    /// One plain subscription: a local one gets the message, another
    /// server's (a route or leaf node) gets it once per message.
    fn deliver_plain(&mut self, sub: &Arc<Subscription>, msg: Message<'_>) -> bool {
        if !sub.client.is_server() {
            return self.deliver(sub, msg);
        }
        if self.forwards_to(&sub.client, msg.routed) && remote_usable(sub) {
            self.add_remote_target(sub, None);
            return true;
        }
        false
    }

    /// One member of a queue group, picked at random with each route or
    /// leaf node weighted by its member count. A message another server
    /// brought goes to a local member if there is one. Members that
    /// cannot take it (gone, echo-suppressed, closing) pass it on, so the
    /// group gets it exactly once.
    fn deliver_to_group(
        &mut self,
        name: &Bytes,
        group: &[Arc<Subscription>],
        msg: Message<'_>,
    ) -> bool {
        let local_first = self.origin != Hop::Client && group.iter().any(|s| !s.client.is_server());
        let (origin, publisher) = (self.origin, self.publisher);
        let weight = |s: &Arc<Subscription>| -> usize {
            match s.client.is_server() {
                false => 1,
                true if local_first || !forwards(origin, publisher, &s.client, msg.routed) => 0,
                true => s.weight.load(Ordering::Relaxed) as usize,
            }
        };
        let total: usize = group.iter().map(weight).sum();
        if total == 0 {
            return false;
        }
        let mut pick = fastrand::usize(..total);
        let mut start = 0;
        for (i, s) in group.iter().enumerate() {
            let w = weight(s);
            if pick < w {
                start = i;
                break;
            }
            pick -= w;
        }
        let n = group.len();
        for i in 0..n {
            let sub = &group[(start + i) % n];
            if sub.client.is_server() {
                if weight(sub) > 0 && remote_usable(sub) {
                    self.add_remote_target(sub, Some(name));
                    return true;
                }
                continue;
            }
            if self.deliver(sub, msg) {
                return true;
            }
        }
        false
    }

    /// `sub`, a route's or a leaf node's, gets the message (for `queue`).
    /// Every target of one message is in the publisher's account, which
    /// an `RMSG` names.
    fn add_remote_target(&mut self, sub: &Arc<Subscription>, queue: Option<&Bytes>) {
        let remote = &sub.client;
        if self.remote_targets.is_empty() {
            self.remote_account = Some(sub.account.clone());
        }
        debug_assert!(self
            .remote_account
            .as_ref()
            .is_some_and(|a| Arc::ptr_eq(a, &sub.account)));
        let at = match self
            .remote_targets
            .iter()
            .position(|(c, _)| Arc::ptr_eq(c, remote))
        {
            Some(i) => i,
            None => {
                self.remote_targets.push((remote.clone(), Vec::new()));
                self.remote_targets.len() - 1
            }
        };
        if let Some(q) = queue {
            self.remote_targets[at].1.push(q.clone());
        }
    }

    fn send_to_remotes(&mut self, msg: Message<'_>) {
        if self.remote_targets.is_empty() {
            return;
        }
        // Taken out and put back drained, so its allocation serves every
        // message of the read.
        let mut targets = std::mem::take(&mut self.remote_targets);
        let account = self
            .remote_account
            .take()
            .expect("remote targets name an account");
        for (remote, queues) in targets.drain(..) {
            let qs: Vec<&[u8]> = queues.iter().map(|q| &q[..]).collect();
            // A traced message names its hop to the next server.
            let hopped = self.trace.as_mut().map(|trace| {
                let hop = trace.goes_over_route(&remote);
                protocol::headers::set(msg.headers, crate::trace::HOP, &hop)
            });
            // A leaf node that did not ask for headers gets none.
            let headers = hopped.as_deref().or(msg.headers).filter(|h| {
                !h.is_empty() && (remote.is_route || remote.headers.load(Ordering::Relaxed))
            });
            let size = headers.map_or(0, |h| h.len()) + msg.payload.len();
            let (subject, reply) = for_route(&msg, &mut self.reply_buf);
            // A leaf node connection is bound to one account, never named.
            let named = remote.is_route.then_some(account.name.as_bytes());
            debug_assert!(
                remote.is_route || !crate::leaf::denied(subject),
                "the JetStream API never goes to a leaf node"
            );
            let pushed = remote.out.push(self.max_pending, Some(size), |b| {
                protocol::route::msg(b, named, subject, reply, &qs, headers, msg.payload)
            });
            match pushed {
                Push::Queued | Push::QueuedNearLimit => {
                    self.out_msgs += 1;
                    self.out_bytes += size as u64;
                    let peer = if remote.is_route {
                        Peer::Route
                    } else {
                        Peer::Leaf
                    };
                    self.count_sent(&account, peer, &msg);
                    self.mark_flush(&remote);
                }
                Push::SlowConsumer => slow_consumer(&self.server, &remote, self.max_pending),
                Push::Closed => {}
            }
        }
        self.remote_targets = targets;
    }

    /// Queues one message for one subscription. Returns whether it was
    /// queued.
    pub fn deliver(&mut self, sub: &Arc<Subscription>, msg: Message<'_>) -> bool {
        let shadowing = self.shadowing.take();
        let via = shadowing.as_ref().unwrap_or(sub);
        let counted_in = &via.account;
        let target = &sub.client;
        if !self.echo && target.cid == self.publisher {
            return false;
        }
        // A result computed before an unsubscribe may still name it.
        if sub.is_closed() {
            return false;
        }
        match &sub.via {
            None => {}
            Some(crate::client::Via::Shadow { .. }) if self.imported => return false,
            // A trace-only message goes through (`Delivery::shadow`).
            Some(crate::client::Via::Shadow { .. }) => return self.shadow(sub, msg),
            Some(_) if self.trace.as_ref().is_some_and(|t| t.only) => return false,
            Some(crate::client::Via::Replies) => return self.reply(sub, msg),
        }
        if target.delivery_denied(msg.routed, sub.queue.as_deref()) {
            return false;
        }
        if let Some(trace) = self.trace.as_mut() {
            match &sub.sink {
                Some(sink) => {
                    if let Some(stream) = sink.traced_stream() {
                        trace.went_to_stream(stream, msg.subject);
                    }
                }
                None => trace.went_to_client(sub, &via.subject),
            }
            if trace.only {
                return true;
            }
        }
        if let Some(sink) = &sub.sink {
            if sub.take_quota() == Quota::Exhausted {
                return false;
            }
            // Not in `sent`: nats-server counts no delivery to an
            // internal subscription (JetStream's among them).
            sink.deliver_from(msg, self.asker);
            return true;
        }
        match sub.take_quota() {
            Quota::Deliver => {}
            Quota::DeliverLast => self.to_unsubscribe.push(sub.clone()),
            Quota::Exhausted => {
                self.to_unsubscribe.push(sub.clone());
                return false;
            }
        }
        // A subscriber that did not ask for headers gets the payload alone,
        // and an empty header block is no header block (as nats-server).
        let headers = msg
            .headers
            .filter(|h| !h.is_empty() && target.headers.load(Ordering::Relaxed));
        let size = headers.map_or(0, |h| h.len()) + msg.payload.len();
        let pushed = target.out.push(self.max_pending, Some(size), |b| {
            encode::msg_parts(b, msg.subject, &sub.sid, msg.reply, headers, msg.payload)
        });
        match pushed {
            Push::Queued | Push::QueuedNearLimit => {
                self.out_msgs += 1;
                self.out_bytes += size as u64;
                self.count_sent(counted_in, Peer::Client, &msg);
                if pushed == Push::QueuedNearLimit
                    && !self.stalled_on.iter().any(|c| Arc::ptr_eq(c, target))
                {
                    self.stalled_on.push(target.clone());
                }
                self.mark_flush(target);
                if let Some(reply) = msg.reply {
                    target.received_request(reply);
                    // A timed request another server sent: its responder
                    // is timed here (nats-server's `trackRemoteReply`).
                    if self.origin != Hop::Client
                        && crate::latency::is_tracked_reply(reply)
                        && sub.account.tracks(msg.routed)
                    {
                        let start = crate::latency::RemoteStart {
                            at: std::time::Instant::now(),
                            at_unix: crate::latency::unix_now(),
                            account: sub.account.name.clone(),
                        };
                        target.track_remote(reply, start);
                    }
                }
                true
            }
            Push::SlowConsumer => {
                slow_consumer(&self.server, target, self.max_pending);
                false
            }
            Push::Closed => false,
        }
    }

    /// Sends the event of a traced message to its destination, in the
    /// message's account, as any message is routed. The event is this
    /// server's own message, whatever brought the traced one: it goes
    /// where a client's would (back over the route it came by, say).
    pub fn send_trace(&mut self, account: &crate::client::Account) {
        let Some(trace) = self.trace.take() else {
            return;
        };
        let dest = trace.dest.clone();
        let event = trace.event(&self.server);
        let result = account.sublist.read().matches(dest.as_bytes());
        let msg = Message {
            subject: dest.as_bytes(),
            routed: dest.as_bytes(),
            reply: None,
            headers: None,
            payload: &event,
        };
        let came_from = (self.origin, self.publisher);
        (self.origin, self.publisher) = (Hop::Client, 0);
        self.route(&result, msg);
        (self.origin, self.publisher) = came_from;
    }

    /// Counts a delivery of `msg` (its headers and payload, as received)
    /// in `account`'s `sent`: added up per account, and added to it when
    /// another account's delivery comes or the read ends.
    fn count_sent(&mut self, account: &Arc<crate::client::Account>, peer: Peer, msg: &Message<'_>) {
        let size = msg.headers.map_or(0, |h| h.len()) + msg.payload.len();
        let same = matches!(&self.sent, Some((a, _)) if Arc::ptr_eq(a, account));
        if !same {
            if let Some((previous, mut tally)) = self.sent.take() {
                tally.flush(&previous.stats.sent);
            }
            self.sent = Some((account.clone(), Tally::default()));
        }
        let (_, tally) = self.sent.as_mut().expect("set just now");
        tally.add(peer, size as u64);
    }

    /// Remembers to wake `target`'s writer at the end of the read.
    pub fn mark_flush(&mut self, target: &Arc<Client>) {
        if self.to_flush.len() < SCAN_LIMIT {
            if !self.to_flush.iter().any(|c| Arc::ptr_eq(c, target)) {
                self.to_flush.push(target.clone());
            }
            return;
        }
        if self.flush_set.is_empty() {
            self.flush_set.extend(self.to_flush.iter().map(|c| c.cid));
        }
        if self.flush_set.insert(target.cid) {
            self.to_flush.push(target.clone());
        }
    }

    /// Ends a read: wakes writers, removes exhausted subscriptions, and
    /// adds the read's deliveries to the server's counters.
    pub fn finish(&mut self) {
        for c in self.to_flush.drain(..) {
            c.out.flush();
        }
        self.flush_set.clear();
        for s in std::mem::take(&mut self.to_unsubscribe) {
            self.server.unsubscribe(&s);
        }
        if let Some((account, mut tally)) = self.sent.take() {
            tally.flush(&account.stats.sent);
        }
        if self.out_msgs > 0 {
            let stats = &self.server.stats;
            stats.out_msgs.fetch_add(self.out_msgs, Ordering::Relaxed);
            stats.out_bytes.fetch_add(self.out_bytes, Ordering::Relaxed);
            self.out_msgs = 0;
            self.out_bytes = 0;
        }
    }

    /// Gives nearly-full subscribers a moment to drain before the
    /// publisher reads more.
    pub async fn stall(&mut self) {
        if self.stalled_on.is_empty() {
            return;
        }
        let threshold = self.max_pending / 2;
        // All at once: a subscriber that has stopped reading must not use
        // up the pause that a merely busy one needed.
        let targets = std::mem::take(&mut self.stalled_on);
        futures_util::future::join_all(
            targets
                .iter()
                .map(|t| t.out.wait_drained(threshold, MAX_STALL)),
        )
        .await;
    }
}

/// [`Delivery::forwards_to`] for a delivery from `origin`, whose
/// publisher is `publisher`, of a message on `subject`.
fn forwards(origin: Hop, publisher: u64, target: &Client, subject: &[u8]) -> bool {
    debug_assert!(target.is_server());
    if target.cid == publisher {
        return false;
    }
    if target.is_route {
        return matches!(origin, Hop::Client | Hop::Leaf(LeafRole::Accepted));
    }
    (origin != Hop::Route || target.leaf == Some(LeafRole::Accepted))
        && !crate::leaf::denied(subject)
        && !crate::leaf::export_denied(target, subject)
}

/// A route's or leaf node's subscription can take a message: neither it
/// nor its connection is closing (a replaced route's interest lingers in
/// the trie until its task ends; picking it would lose a queue message).
fn remote_usable(sub: &Subscription) -> bool {
    !sub.is_closed() && sub.client.closed_reason().is_none()
}

/// Cuts off a client whose outbound buffer went past `max_pending`,
/// counting and logging it once.
pub fn slow_consumer(server: &Server, target: &Client, max_pending: usize) {
    if target.close(ClosedState::SlowConsumerPendingBytes) {
        server.stats.slow_consumers.fetch_add(1, Ordering::Relaxed);
        if let Some(account) = target.account() {
            account.stats.slow_consumer();
        }
        info!(
            "{} - Slow Consumer Detected: MaxPending of {max_pending} Exceeded",
            target.log_prefix(),
        );
    }
}

/// A route carries one subject: a message shown under another subject
/// than it was matched on goes out under the matched one, with the shown
/// one after an `@` at the end of its ack reply, as nats-server sends it;
/// the receiving server splits them again ([`from_route`]).
fn for_route<'a>(msg: &Message<'a>, buf: &'a mut Vec<u8>) -> (&'a [u8], Option<&'a [u8]>) {
    match msg.reply {
        Some(reply) if msg.routed != msg.subject && ack_deliver_at(reply).is_none() => {
            buf.clear();
            buf.extend_from_slice(reply);
            buf.push(b'@');
            buf.extend_from_slice(msg.subject);
            (msg.routed, Some(&buf[..]))
        }
        _ => (msg.routed, msg.reply),
    }
}

/// Where the `@` of a routed JetStream delivery sits in its ack reply:
/// after at least 8 dots of a `$JS.ACK.` subject (nats-server's rule).
pub fn ack_deliver_at(reply: &[u8]) -> Option<usize> {
    if !reply.starts_with(b"$JS.ACK.") {
        return None;
    }
    let mut dots = 0;
    for (i, &b) in reply.iter().enumerate() {
        match b {
            b'.' => dots += 1,
            b'@' if dots >= 8 => return Some(i),
            _ => {}
        }
    }
    None
}

/// A message from a route: (shown subject, reply) once the delivery
/// subject is taken back out of the reply.
pub fn from_route<'a>(subject: &'a [u8], reply: Option<&'a [u8]>) -> (&'a [u8], Option<&'a [u8]>) {
    match reply.and_then(|r| ack_deliver_at(r).map(|at| (r, at))) {
        Some((r, at)) if at + 1 < r.len() => (&r[at + 1..], Some(&r[..at])),
        _ => (subject, reply),
    }
}

#[cfg(test)]
mod routed_tests {
    use super::*;

    #[test]
    fn deliveries_keep_their_subject_across_a_route() {
        let reply = b"$JS.ACK.S.C.1.2.3.1700000000.0";
        let m = Message {
            subject: b"orders.1",
            routed: b"_INBOX.abc",
            reply: Some(reply),
            headers: None,
            payload: b"",
        };
        let mut buf = Vec::new();
        let (subj, r) = for_route(&m, &mut buf);
        assert_eq!(subj, b"_INBOX.abc");
        let r = r.unwrap().to_vec();
        assert_eq!(r, b"$JS.ACK.S.C.1.2.3.1700000000.0@orders.1");
        assert_eq!(
            from_route(subj, Some(&r)),
            (&b"orders.1"[..], Some(&reply[..]))
        );
        // Plain messages pass as they are.
        assert_eq!(
            from_route(b"a.b", Some(b"_INBOX.x@y")),
            (&b"a.b"[..], Some(&b"_INBOX.x@y"[..]))
        );
    }
}
