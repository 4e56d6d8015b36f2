//! Routes: the full mesh between the servers of a cluster, speaking
//! nats-server's route protocol (`protocol::route`). This is the registry
//! every task shares; the connections themselves run in `conn::route`,
//! listening and dialing in `conn::routes`.
//!
//! - One route per pair of servers. When both dial at once, each side
//!   keeps the connection dialed by the server with the smaller id (and of
//!   two dialed by the same server, the one from the lower source port),
//!   so both keep the same one (nats-server keeps whichever registered
//!   first on each side, which can drop both; incident 4 saw routes
//!   multiply).
//! - A new route's INFO is forwarded to the other routes (gossip); a
//!   server that hears of one it is not connected to dials it, so servers
//!   that only name a seed still form a full mesh.
//! - Local interest (client subscriptions, not the server's own) is
//!   advertised with `RS+`/`RS-`, queue groups with their member count as
//!   weight; remote interest lives in the trie as subscriptions owned by
//!   the route's connection (`Client::is_route`), so delivery picks routes
//!   the way it picks clients (`conn::delivery`).
//! - Messages from a route go to local subscribers only: the mesh is one
//!   hop.
//!
//! Lock order: `Routes::inner` may be held while pushing into a route's
//! outbound buffer; it is never held with the trie lock.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;
use protocol::route::{self as rp, RouteInfo};
use tracing::{debug, info};

use crate::client::Subscription;
use crate::client::{Client, ClosedState};

/// A registered route: one per remote server.
pub struct Route {
    pub client: Arc<Client>,
    pub remote_id: String,
    pub remote_name: String,
    pub did_solicit: bool,
    pub configured: bool,
    /// The source port of the connection on the dialing server's side;
    /// both ends see the same value.
    pub dialer_port: u16,
    /// The remote is in lame duck mode: its client URLs are withdrawn.
    pub lame_duck: std::sync::atomic::AtomicBool,
    /// Where the remote accepts routes (`nats-route://host:port/`), as
    /// passed on to other servers.
    pub url: String,
    pub info: RouteInfo,
    /// The remote's JetStream cluster state, as its latest INFO said.
    pub hello: Mutex<Option<protocol::route::FlotillaHello>>,
    /// Interest the remote advertised: (account, subject, queue) -> its
    /// subscription in that account's trie.
    pub subs: Mutex<BTreeMap<InterestKey, Arc<Subscription>>>,
}

/// (account, subject, queue group).
pub type InterestKey = (Bytes, Bytes, Option<Bytes>);

#[derive(Default)]
struct Inner {
    /// Registered routes by remote server id.
    by_id: BTreeMap<String, Arc<Route>>,
    /// Every route connection, registered or not, by cid (for shutdown).
    conns: BTreeMap<u64, Arc<Client>>,
    /// Local interest as advertised: (account, subject, queue) -> members.
    interest: BTreeMap<InterestKey, u32>,
    /// Route URLs being dialed because of gossip.
    dialing: BTreeSet<String>,
}

pub struct Routes {
    inner: Mutex<Inner>,
    /// The bound cluster port; 0 when clustering is off.
    pub port: AtomicU64,
    /// The cluster name, and whether it was generated (a generated name
    /// gives way to a configured one met on a route).
    cluster: Mutex<(String, bool)>,
    /// A route has been up at some point: from then on clients get this
    /// server's URLs even while no route is.
    seen_route: std::sync::atomic::AtomicBool,
    /// The `connect_urls` clients were last told: plain clients, and
    /// WebSocket clients (theirs are the WebSocket URLs).
    told_urls: Mutex<Vec<String>>,
    told_ws_urls: Mutex<Vec<String>>,
    /// What each configured route URL turned out to be: this server
    /// (`None`) or another (its server id).
    resolved: Mutex<BTreeMap<String, Option<String>>>,
}

impl Routes {
    pub fn new(name: Option<&str>) -> Routes {
        let cluster = match name {
            Some(n) => (n.to_string(), false),
            None => (dynamic_name(), true),
        };
        Routes {
            inner: Mutex::new(Inner::default()),
            port: AtomicU64::new(0),
            cluster: Mutex::new(cluster),
            seen_route: std::sync::atomic::AtomicBool::new(false),
            told_urls: Mutex::new(Vec::new()),
            told_ws_urls: Mutex::new(Vec::new()),
            resolved: Mutex::new(BTreeMap::new()),
        }
    }

    /// Marks a gossiped route URL as being dialed; false if it already
    /// is.
    pub fn start_dialing(&self, url: &str) -> bool {
        self.inner.lock().dialing.insert(url.to_string())
    }

    /// A gossiped route URL is no longer dialed.
    pub fn stop_dialing(&self, url: &str) {
        self.inner.lock().dialing.remove(url);
    }

    /// Records the `connect_urls` clients are told (WebSocket clients
    /// when `websocket`); false if they were told these already.
    pub fn tell_urls(&self, urls: &[String], websocket: bool) -> bool {
        let mut told = match websocket {
            true => self.told_ws_urls.lock(),
            false => self.told_urls.lock(),
        };
        if *told == urls {
            return false;
        }
        told.clear();
        told.extend_from_slice(urls);
        true
    }

    pub fn enabled(&self) -> bool {
        self.port.load(Ordering::Relaxed) != 0
    }

    pub fn cluster_name(&self) -> (String, bool) {
        self.cluster.lock().clone()
    }

    /// Takes `theirs` as the cluster name if ours was generated, as
    /// nats-server does: a configured name wins, and of two generated ones
    /// the larger. Returns whether the names now agree, and whether ours
    /// changed (then routes made under the old name must go).
    pub fn reconcile_name(&self, theirs: &str, theirs_dynamic: bool) -> (bool, bool) {
        let mut c = self.cluster.lock();
        if c.0 == theirs || theirs.is_empty() {
            return (true, false);
        }
        if c.1 && (!theirs_dynamic || c.0.as_str() < theirs) {
            info!("Cluster name updated to {theirs}");
            *c = (theirs.to_string(), theirs_dynamic);
            return (true, true);
        }
        (false, false)
    }

    /// After the cluster name changed: closes every route but `keep`'s
    /// connection, so they are made again under the new name.
    pub fn close_all_except(&self, keep: u64) {
        let conns: Vec<Arc<Client>> = self.inner.lock().conns.values().cloned().collect();
        for c in conns.into_iter().filter(|c| c.cid != keep) {
            c.close(ClosedState::ClusterNameConflict);
        }
    }

    /// A configured route URL answered: with this server (`None`) or
    /// another.
    pub fn resolve(&self, url: &str, id: Option<String>) {
        self.resolved.lock().insert(url.to_string(), id);
    }

    /// Whether every configured route has answered, and how many servers
    /// the configuration implies (this one included; an unanswered URL
    /// counts as another server).
    pub fn configured_view(&self, configured: &[String]) -> (bool, usize) {
        let resolved = self.resolved.lock();
        let mut others = BTreeSet::new();
        let mut all = true;
        for (i, url) in configured.iter().enumerate() {
            match resolved.get(url) {
                Some(None) => {}
                Some(Some(id)) => {
                    others.insert(id.clone());
                }
                None => {
                    all = false;
                    others.insert(format!("unanswered {i}"));
                }
            }
        }
        (all, others.len() + 1)
    }

    /// Sends this server's current route INFO to every route (its
    /// JetStream cluster state changed).
    pub fn broadcast_info(&self, json: &[u8]) {
        for r in self.inner.lock().by_id.values() {
            r.client
                .out
                .push(usize::MAX, None, |b| protocol::encode::info(b, json));
            r.client.out.flush();
        }
    }

    pub fn routes(&self) -> Vec<Arc<Route>> {
        self.inner.lock().by_id.values().cloned().collect()
    }

    pub fn has(&self, id: &str) -> bool {
        self.inner.lock().by_id.contains_key(id)
    }

    pub fn track(&self, c: &Arc<Client>) {
        self.inner.lock().conns.insert(c.cid, c.clone());
    }

    pub fn untrack(&self, cid: u64) {
        self.inner.lock().conns.remove(&cid);
    }

    /// Closes every route connection (shutdown).
    pub fn close_all(&self) {
        let conns: Vec<Arc<Client>> = self.inner.lock().conns.values().cloned().collect();
        for c in conns {
            c.close(ClosedState::ServerShutdown);
        }
    }

    /// Registers `r`, unless the route already kept to the same server
    /// wins the tie-break; then `r` must be closed as a duplicate (false).
    /// A newly kept route gets all local interest.
    pub fn register(&self, own_id: &str, r: &Arc<Route>) -> bool {
        let mut inner = self.inner.lock();
        if let Some(old) = inner.by_id.get(&r.remote_id) {
            // The connection dialed by the smaller id is the one both keep;
            // of two dialed by the same server, the one from the lower
            // source port. Both ends compute the same answer.
            let preferred = own_id.min(r.remote_id.as_str());
            let rank = |x: &Route| {
                let dialer = if x.did_solicit {
                    own_id
                } else {
                    x.remote_id.as_str()
                };
                (dialer != preferred, x.dialer_port)
            };
            if rank(r) >= rank(old) {
                return false;
            }
            debug!(
                "{} - Replacing route to {:?} with the one dialed by {preferred}",
                old.client.log_prefix(),
                r.remote_id
            );
            old.client.close(ClosedState::DuplicateRoute);
            // Delivery must stop picking it now, not once its task ends.
            for s in old.subs.lock().values() {
                s.mark_closed();
            }
        }
        self.seen_route.store(true, Ordering::Relaxed);
        inner.by_id.insert(r.remote_id.clone(), r.clone());
        let mut b = BytesMut::new();
        for ((account, subject, queue), &n) in &inner.interest {
            rp::sub(
                &mut b,
                Some(account),
                subject,
                queue.as_deref().map(|q| (q, n)),
            );
        }
        if !b.is_empty() {
            r.client
                .out
                .push(usize::MAX, None, |out| out.extend_from_slice(&b));
            r.client.out.flush();
        }
        debug!(
            "{} - Sent local subscriptions to route",
            r.client.log_prefix()
        );
        true
    }

    /// Forgets `r` if it is the route registered for its server.
    pub fn deregister(&self, r: &Arc<Route>) -> bool {
        let mut inner = self.inner.lock();
        match inner.by_id.get(&r.remote_id) {
            Some(cur) if Arc::ptr_eq(cur, r) => {
                inner.by_id.remove(&r.remote_id);
                true
            }
            _ => false,
        }
    }

    /// A local subscription came (`+1`) or went (`-1`): tells every route
    /// when the advertised interest changes.
    pub fn local_interest(&self, sub: &Subscription, delta: i32) {
        if !self.enabled() {
            return;
        }
        let mut inner = self.inner.lock();
        let account = Bytes::copy_from_slice(sub.account.name.as_bytes());
        let key = (account.clone(), sub.subject.clone(), sub.queue.clone());
        let n = inner.interest.get(&key).copied().unwrap_or(0);
        let n = if delta > 0 {
            n + 1
        } else {
            n.saturating_sub(1)
        };
        if n == 0 {
            inner.interest.remove(&key);
        } else {
            inner.interest.insert(key, n);
        }
        let mut b = BytesMut::new();
        match (&sub.queue, n) {
            (None, 1) if delta > 0 => rp::sub(&mut b, Some(&account), &sub.subject, None),
            (None, 0) => rp::unsub(&mut b, Some(&account), &sub.subject, None),
            (None, _) => return,
            (Some(q), 0) => rp::unsub(&mut b, Some(&account), &sub.subject, Some(q)),
            (Some(q), n) => rp::sub(&mut b, Some(&account), &sub.subject, Some((q, n))),
        }
        for r in inner.by_id.values() {
            r.client
                .out
                .push(usize::MAX, None, |out| out.extend_from_slice(&b));
            r.client.out.flush();
        }
    }

    /// The client URLs of every remote server, for clients' INFO.
    pub fn remote_connect_urls(&self) -> Vec<String> {
        self.remote_urls(|info| &info.connect_urls)
    }

    /// The WebSocket URLs of every remote server, for WebSocket
    /// clients' INFO.
    pub fn remote_ws_connect_urls(&self) -> Vec<String> {
        self.remote_urls(|info| &info.ws_connect_urls)
    }

    fn remote_urls(&self, urls_of: impl Fn(&RouteInfo) -> &Vec<String>) -> Vec<String> {
        let inner = self.inner.lock();
        let mut urls = Vec::new();
        for r in inner.by_id.values() {
            if r.lame_duck.load(Ordering::Relaxed) {
                continue;
            }
            for u in urls_of(&r.info) {
                if !urls.contains(u) {
                    urls.push(u.clone());
                }
            }
        }
        urls
    }

    /// Whether clients should be given `connect_urls` at all.
    pub fn seen_route(&self) -> bool {
        self.seen_route.load(Ordering::Relaxed)
    }

    /// Tells the other routes about a newly registered one, so they dial it.
    pub fn gossip(&self, new: &Route) {
        let mut info = new.info.clone();
        info.nonce.clear();
        info.ip = new.url.clone();
        let json = serde_json::to_vec(&info).expect("info serializes");
        let inner = self.inner.lock();
        for r in inner.by_id.values() {
            if r.remote_id != new.remote_id {
                r.client
                    .out
                    .push(usize::MAX, None, |b| protocol::encode::info(b, &json));
                r.client.out.flush();
            }
        }
    }
}

/// A generated cluster name, as nats-server makes one when none is set.
fn dynamic_name() -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    (0..22)
        .map(|_| ALPHABET[fastrand::usize(..ALPHABET.len())] as char)
        .collect()
}

/// The user and password in a route URL, if any.
pub fn creds(url: &str) -> Option<(String, String)> {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let (userinfo, _) = rest.split('/').next()?.rsplit_once('@')?;
    let (u, p) = userinfo.split_once(':').unwrap_or((userinfo, ""));
    Some((u.to_string(), p.to_string()))
}

/// `host:port` of a route URL (`nats-route://user:pass@host:port/`).
pub fn host_port(url: &str) -> Option<String> {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
    let hp = rest.split('/').next()?;
    hp.rsplit_once(':')?.1.parse::<u16>().ok()?;
    Some(hp.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn route_urls() {
        assert_eq!(
            host_port("nats-route://127.0.0.1:6222").as_deref(),
            Some("127.0.0.1:6222")
        );
        assert_eq!(host_port("nats://u:p@h:1/").as_deref(), Some("h:1"));
        assert_eq!(host_port("nats://h"), None);
        assert_eq!(
            creds("nats-route://ruser:T0p$ecret@127.0.0.1:6222"),
            Some(("ruser".into(), "T0p$ecret".into()))
        );
        assert_eq!(creds("nats-route://127.0.0.1:6222"), None);
    }
}
