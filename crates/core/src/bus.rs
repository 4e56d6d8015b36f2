//! The narrow interface between JetStream and the core server: publish
//! (`Publisher`), subscribe (`Bus::subscribe`, messages to a `Sink`), and
//! interest notifications (`Bus::watcher`). JetStream's drivers reach the
//! core through this alone (the cluster's driver also follows routes, to
//! find its peers); a driver runs over the bus of a `Server` made in the
//! test's own process, with no listener.
//!
//! A bus is bound to one account: everything it subscribes, publishes
//! and looks up is in that account's subject space, as each account's
//! JetStream is in nats-server.

use std::sync::Arc;

use crate::client::Account;
pub use crate::client::Subscription;
pub use crate::client::{InternalSink as Sink, Message};
pub use crate::interest::Watcher;
pub use crate::internal::InternalPublisher as Publisher;
use crate::server::Server;

/// How far a subscription's interest reaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    /// This server's clients and services only (one server's JetStream).
    Local,
    /// Told to routes too: a cluster's leaders are reached from any
    /// server.
    Cluster,
}

/// The subject prefix of pull requests.
const PULL_PREFIX: &[u8] = b"$JS.API.CONSUMER.MSG.NEXT.";

#[derive(Clone)]
pub struct Bus {
    server: Arc<Server>,
    account: Arc<Account>,
}

impl Bus {
    /// The bus of `account` on `server`.
    pub fn new(server: Arc<Server>, account: Arc<Account>) -> Bus {
        Bus { server, account }
    }

    /// The bus of the account named `account` (made if it is not yet).
    pub fn named(server: Arc<Server>, account: &str) -> Bus {
        let account = server.accounts.ensure(account);
        Bus::new(server, account)
    }

    /// The bus of this server's system account, if it has one.
    pub fn system(&self) -> Option<Bus> {
        let account = self.server.opts().system_account()?.to_string();
        Some(Bus::named(self.server.clone(), &account))
    }

    /// This server's id and its cluster's name (`""` without one), as
    /// server advisories name them.
    pub fn server_identity(&self) -> (&str, String) {
        let cluster = match self.server.routes.enabled() {
            true => self.server.routes.cluster_name().0,
            false => String::new(),
        };
        (&self.server.id, cluster)
    }

    /// Messages on `subject` go to `sink`, on the publisher's task.
    pub fn subscribe(
        &self,
        subject: &str,
        reach: Reach,
        sink: Arc<dyn Sink>,
    ) -> Result<Arc<Subscription>, subjects::SublistError> {
        match reach {
            Reach::Local => self
                .server
                .subscribe_internal(&self.account, subject, None, sink),
            Reach::Cluster => self
                .server
                .subscribe_internal_cluster(&self.account, subject, sink),
        }
    }

    /// [`Bus::subscribe`], hearing also what is published on `subject`
    /// in the accounts this bus's account imports it from (a stream
    /// import's shadows): where another account's exported deliveries
    /// arrive.
    pub fn subscribe_imported(
        &self,
        subject: &str,
        reach: Reach,
        sink: Arc<dyn Sink>,
    ) -> Result<Arc<Subscription>, subjects::SublistError> {
        let reached = crate::server::Reached {
            advertised: reach == Reach::Cluster,
            imports: true,
        };
        self.server
            .subscribe_server(&self.account, subject, None, sink, reached)
    }

    pub fn unsubscribe(&self, sub: &Arc<Subscription>) {
        self.server.unsubscribe(sub);
    }

    /// A publisher with its own match cache (one per task).
    pub fn publisher(&self) -> Publisher {
        Publisher::new(self.server.clone(), self.account.clone())
    }

    /// Tells of subscribers coming and going on the subjects it watches.
    pub fn watcher(&self) -> Watcher {
        self.server.interest.watcher()
    }

    /// Whether a pull request may be served: nats-server drops a waiting
    /// request whose reply subject nobody (here or over a route)
    /// subscribes to, so its messages stay pending rather than go
    /// nowhere. A request without a reply has nothing to check.
    pub fn pull_has_listener(&self, subject: &[u8], reply: Option<&[u8]>) -> bool {
        if !subject.starts_with(PULL_PREFIX) {
            return true;
        }
        match reply.filter(|r| !r.is_empty()) {
            Some(reply) => self.has_listener(reply),
            None => true,
        }
    }

    /// Whether anyone (here or over a route) subscribes to `subject` in
    /// the bus's account.
    pub fn has_listener(&self, subject: &[u8]) -> bool {
        self.others_listen(subject, &[])
    }

    /// Whether anyone but `mine` (here or over a route) subscribes to
    /// `subject` in the bus's account: asked on delivery, it tells a
    /// catch-all subscriber whether it alone got the message; asked
    /// later, whether another server may serve what it did not.
    pub fn others_listen(&self, subject: &[u8], mine: &[&Subscription]) -> bool {
        // Uncached: reply subjects are mostly used once.
        let found = self.account.sublist.read().matches_uncached(subject);
        let other = |s: &Arc<Subscription>| {
            !s.is_closed() && !mine.iter().any(|m| std::ptr::eq(s.as_ref(), *m))
        };
        found.psubs.iter().any(other) || found.qsubs.iter().any(|(_, m)| m.iter().any(other))
    }

    /// The full `ClientInfo` of connection `cid`, as an API audit tells
    /// its requester (`None` for a route or the server itself).
    pub fn requester_info(&self, cid: u64) -> Option<serde_json::Value> {
        crate::imports::requester_info(&self.server, cid)
    }

    /// The account it publishes and subscribes in.
    pub fn account_name(&self) -> &str {
        &self.account.name
    }

    /// This server's name (what one server reports as a stream's leader).
    pub fn server_name(&self) -> &str {
        &self.server.name
    }
}
