//! Publishing from inside the server (JetStream replies, deliveries,
//! advisories): the same routing as a client publish, with its own match
//! cache and per-batch bookkeeping.

use std::sync::Arc;

use subjects::MatchCache;

use crate::client::{Account, Message, Subscription};
use crate::conn::delivery::Delivery;
use crate::server::Server;

pub struct InternalPublisher {
    server: Arc<Server>,
    /// Where it publishes.
    account: Arc<Account>,
    cache: MatchCache<Arc<Subscription>>,
    delivery: Delivery,
}

impl InternalPublisher {
    pub fn new(server: Arc<Server>, account: Arc<Account>) -> Self {
        let generation = account.sublist.read().generation();
        let max_pending = server.opts().max_pending;
        InternalPublisher {
            cache: MatchCache::new(generation),
            delivery: Delivery::new(server.clone(), 0, max_pending),
            server,
            account,
        }
    }

    /// Routes a message to subscribers of `route`, shown to them as
    /// `subject`, and through the account's service imports of it, as a
    /// client's publish goes (nats-server's internal clients are
    /// clients: a stream sourcing another account asks its API so).
    /// Returns whether anyone received it.
    pub fn publish(
        &mut self,
        route: &str,
        subject: &str,
        reply: Option<&str>,
        headers: Option<&[u8]>,
        payload: &[u8],
    ) -> bool {
        let account = &self.account;
        let result = self.cache.get_or_insert(route.as_bytes(), || {
            account.sublist.read().matches(route.as_bytes())
        });
        let msg = Message {
            subject: subject.as_bytes(),
            routed: route.as_bytes(),
            reply: reply.map(str::as_bytes),
            headers,
            payload,
        };
        // Service imports first, as for a client (`conn::client`); a
        // message shown under another subject than it is routed on (a
        // JetStream delivery) is not a request.
        let mut delivered = false;
        if route == subject && account.imports_services() {
            let client = &self.server.system_client;
            delivered =
                crate::imports::request(&mut self.delivery, &self.server, account, client, msg);
        }
        delivered | self.delivery.route(result, msg)
    }

    /// Whether `subject` has a plain subscriber (or one in `queue`) on
    /// exactly that subject, which is what push consumers need before
    /// delivering: as nats-server's interest notifications, wildcard
    /// subscriptions do not count.
    pub fn has_interest(&mut self, subject: &str, queue: &str) -> bool {
        let account = &self.account;
        let result = self.cache.get_or_insert(subject.as_bytes(), || {
            account.sublist.read().matches(subject.as_bytes())
        });
        let exact =
            |s: &Arc<Subscription>| !s.is_closed() && s.subject.as_ref() == subject.as_bytes();
        if queue.is_empty() {
            result.psubs.iter().any(exact)
        } else {
            result
                .qsubs
                .iter()
                .any(|(q, m)| q.as_ref() == queue.as_bytes() && m.iter().any(exact))
        }
    }

    /// Wakes the writers of everyone published to since the last call.
    pub fn flush(&mut self) {
        self.delivery.finish();
    }

    /// Gives subscribers that are nearly full a moment to drain.
    pub async fn stall(&mut self) {
        self.delivery.stall().await;
    }
}
