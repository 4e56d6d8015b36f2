//! Routes: the full mesh between the servers of a cluster, speaking
//! nats-server's route protocol (`protocol::route`).
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
//!   the way it picks clients (`client::delivery`).
//! - Messages from a route go to local subscribers only: the mesh is one
//!   hop.
//!
//! Lock order: `Routes::inner` may be held while pushing into a route's
//! outbound buffer; it is never held with the trie lock.

pub mod conn;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;
use protocol::route::{self as rp, RouteInfo};
use tokio::net::{TcpListener, TcpStream};
use tracing::{debug, error, info, warn};

use crate::client::{Client, ClosedState};
use crate::server::Server;
use crate::subscription::Subscription;

/// Wait between dial attempts, and before redialing a dropped route
/// (nats-server's DEFAULT_ROUTE_CONNECT and DEFAULT_ROUTE_RECONNECT).
const RETRY: Duration = Duration::from_secs(1);
const DIAL_TIMEOUT: Duration = Duration::from_secs(1);
/// Random extra wait before a redial, so two servers that lost the same
/// route do not dial each other in lockstep.
const JITTER_MS: u64 = 100;
/// Attempts for a route learned through gossip before giving up on it
/// (the server it names dials its configured routes itself).
const IMPLICIT_ATTEMPTS: u32 = 3;

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
    /// Interest the remote advertised: (subject, queue) -> its
    /// subscription in the trie.
    pub subs: Mutex<BTreeMap<InterestKey, Arc<Subscription>>>,
}

/// (subject, queue group).
pub type InterestKey = (Bytes, Option<Bytes>);

#[derive(Default)]
struct Inner {
    /// Registered routes by remote server id.
    by_id: BTreeMap<String, Arc<Route>>,
    /// Every route connection, registered or not, by cid (for shutdown).
    conns: BTreeMap<u64, Arc<Client>>,
    /// Local interest as advertised: (subject, queue) -> members.
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
    /// The `connect_urls` clients were last told.
    told_urls: Mutex<Vec<String>>,
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
            resolved: Mutex::new(BTreeMap::new()),
        }
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
    fn reconcile_name(&self, theirs: &str, theirs_dynamic: bool) -> (bool, bool) {
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
    fn close_all_except(&self, keep: u64) {
        let conns: Vec<Arc<Client>> = self.inner.lock().conns.values().cloned().collect();
        for c in conns.into_iter().filter(|c| c.cid != keep) {
            c.close(ClosedState::ClusterNameConflict);
        }
    }

    /// A configured route URL answered: with this server (`None`) or
    /// another.
    fn resolve(&self, url: &str, id: Option<String>) {
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

    fn track(&self, c: &Arc<Client>) {
        self.inner.lock().conns.insert(c.cid, c.clone());
    }

    fn untrack(&self, cid: u64) {
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
    fn register(&self, own_id: &str, r: &Arc<Route>) -> bool {
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
        for ((subject, queue), &n) in &inner.interest {
            rp::sub(&mut b, subject, queue.as_deref().map(|q| (q, n)));
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
    fn deregister(&self, r: &Arc<Route>) -> bool {
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
        let key = (sub.subject.clone(), sub.queue.clone());
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
            (None, 1) if delta > 0 => rp::sub(&mut b, &sub.subject, None),
            (None, 0) => rp::unsub(&mut b, &sub.subject, None),
            (None, _) => return,
            (Some(q), 0) => rp::unsub(&mut b, &sub.subject, Some(q)),
            (Some(q), n) => rp::sub(&mut b, &sub.subject, Some((q, n))),
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
        let inner = self.inner.lock();
        let mut urls = Vec::new();
        for r in inner.by_id.values() {
            if r.lame_duck.load(Ordering::Relaxed) {
                continue;
            }
            for u in &r.info.connect_urls {
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
    fn gossip(&self, new: &Route) {
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
fn creds(url: &str) -> Option<(String, String)> {
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

/// Binds the cluster port and starts accepting routes and dialing the
/// configured ones.
pub async fn start(server: Arc<Server>) -> std::io::Result<()> {
    let opts = server.opts();
    let host = opts
        .cluster
        .host
        .clone()
        .unwrap_or_else(|| "0.0.0.0".into());
    let port = match opts.cluster.port {
        Some(p) if p > 0 => p as u16,
        _ => 0,
    };
    let listener = TcpListener::bind((host.as_str(), port)).await?;
    let bound = listener.local_addr()?.port();
    server.routes.port.store(bound as u64, Ordering::Relaxed);
    let (name, dynamic) = server.routes.cluster_name();
    info!("Cluster name is {name}");
    if dynamic {
        warn!("Cluster name was dynamically generated, consider setting one");
    }
    info!("Listening for route connections on {host}:{bound}");
    tokio::spawn(accept_loop(server.clone(), listener));
    for url in &opts.cluster.routes {
        solicit(server.clone(), url.clone(), true);
    }
    Ok(())
}

async fn accept_loop(server: Arc<Server>, listener: TcpListener) {
    let mut stop = server.shutdown_signal();
    loop {
        tokio::select! {
            _ = stop.changed() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, addr)) => {
                    tokio::spawn(conn::serve(server.clone(), stream, addr, None));
                }
                Err(e) => {
                    warn!("Temporary Route Accept Error ({e}), sleeping 10ms");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            },
        }
    }
}

/// Dials `url` and keeps a route to it: a configured route forever
/// (redialing whenever no route to its server is up), a gossiped one a
/// few times.
pub fn solicit(server: Arc<Server>, url: String, configured: bool) {
    if !configured && !server.routes.inner.lock().dialing.insert(url.clone()) {
        return;
    }
    tokio::spawn(async move {
        dial_loop(&server, &url, configured).await;
        if !configured {
            server.routes.inner.lock().dialing.remove(&url);
        }
    });
}

async fn dial_loop(server: &Arc<Server>, url: &str, configured: bool) {
    let Some(hp) = host_port(url) else {
        error!("error parsing route url [{url:?}]");
        return;
    };
    let mut attempt: u32 = 0;
    let mut reconnecting = false;
    // A gossiped route is not dialed if it is one this server is
    // configured to dial anyway.
    if !configured
        && server
            .opts()
            .cluster
            .routes
            .iter()
            .any(|r| host_port(r).as_deref() == Some(hp.as_str()))
    {
        return;
    }
    loop {
        if server.is_shutting_down() {
            return;
        }
        debug!("Trying to connect to route on {hp}");
        let dialed = tokio::time::timeout(DIAL_TIMEOUT, TcpStream::connect(&hp)).await;
        let stream = match dialed {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => {
                attempt += 1;
                dial_failed(attempt, reconnecting, &e.to_string());
                if !configured && attempt >= implicit_attempts(server) {
                    return;
                }
                tokio::time::sleep(RETRY).await;
                continue;
            }
            Err(_) => {
                attempt += 1;
                dial_failed(
                    attempt,
                    reconnecting,
                    &format!("dial tcp {hp}: i/o timeout"),
                );
                if !configured && attempt >= implicit_attempts(server) {
                    return;
                }
                continue;
            }
        };
        attempt = 0;
        let addr = match stream.peer_addr() {
            Ok(a) => a,
            Err(_) => continue,
        };
        let outcome = conn::serve(
            server.clone(),
            stream,
            addr,
            Some(conn::Dialed {
                url: url.to_string(),
                configured,
                creds: creds(url).or_else(|| {
                    let o = server.opts();
                    Some((o.cluster.user.clone()?, o.cluster.password.clone()?))
                }),
            }),
        )
        .await;
        match outcome {
            conn::Outcome::ToSelf => {
                debug!("Detected route to self, ignoring {url:?}");
                return;
            }
            conn::Outcome::Remote(id) => {
                if !configured {
                    // Kept by the other connection: nothing to do. Lost:
                    // dial again (a few times, as nats-server retries
                    // implicit routes), or a pair linked only through
                    // gossip would stay apart.
                    if server.routes.has(&id) {
                        return;
                    }
                } else {
                    // Another connection to the same server may be the
                    // one kept; dial again only once no route to it is up.
                    while server.routes.has(&id) && !server.is_shutting_down() {
                        tokio::time::sleep(RETRY).await;
                    }
                }
            }
            conn::Outcome::NoRoute => {
                if !configured {
                    attempt += 1;
                    if attempt >= implicit_attempts(server) {
                        return;
                    }
                }
            }
        }
        if server.is_shutting_down() {
            return;
        }
        reconnecting = true;
        debug!("Attempting reconnect for solicited route {url:?}");
        let jitter = Duration::from_millis(fastrand::u64(..JITTER_MS));
        tokio::time::sleep(RETRY + jitter).await;
    }
}

/// Attempts for a gossiped route: `connect_retries` + 1, and never fewer
/// than flotilla's floor (a pair linked only through gossip must find
/// each other again).
fn implicit_attempts(server: &Server) -> u32 {
    IMPLICIT_ATTEMPTS.max(server.opts().cluster.connect_retries.saturating_add(1))
}

/// nats-server logs the first failure of a first connect, and every
/// failure of a reconnect.
fn dial_failed(attempt: u32, reconnecting: bool, e: &str) {
    if attempt == 1 || reconnecting {
        error!("Error trying to connect to route (attempt {attempt}): {e}");
    } else {
        debug!("Error trying to connect to route (attempt {attempt}): {e}");
    }
}

/// Sends a fresh INFO to every client that takes asynchronous INFO, if
/// the `connect_urls` it carries changed.
pub fn send_info_to_clients(server: &Server) {
    let base = server.info();
    {
        let mut told = server.routes.told_urls.lock();
        if *told == base.connect_urls {
            return;
        }
        told.clone_from(&base.connect_urls);
    }
    let clients: Vec<Arc<Client>> = server.clients.lock().values().cloned().collect();
    let max_pending = server.opts().max_pending;
    for c in clients {
        if c.async_info.load(Ordering::Relaxed) {
            let mut info = base.clone();
            info.client_id = Some(c.cid);
            info.client_ip = Some(c.addr.ip().to_string());
            let json = serde_json::to_vec(&info).expect("info serializes");
            c.out
                .push(max_pending, None, |b| protocol::encode::info(b, &json));
            c.out.flush();
        }
    }
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
