//! Server-wide state shared by every connection task, and its life cycle:
//! listening, accepting, lame duck, shutdown.
//!
//! Lock order, where two are ever needed: a client's `subs` map and the
//! trie are never held together; the `clients` map is taken alone.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use parking_lot::{Mutex, RwLock};
use protocol::ServerInfo;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tracing::info;

use crate::account::GLOBAL;
use crate::client::{Client, ClosedState, InternalSink, LeafRole, Subscription};
use auth::permissions::Permits;
use config::options::Options;
use protocol::NATS_VERSION;

/// Server-wide message counters.
#[derive(Default)]
pub struct Stats {
    pub in_msgs: AtomicU64,
    pub in_bytes: AtomicU64,
    pub out_msgs: AtomicU64,
    pub out_bytes: AtomicU64,
    pub slow_consumers: AtomicU64,
    pub stale_connections: AtomicU64,
    pub total_connections: AtomicU64,
}

/// The Raft transport's side of the route port, set when JetStream is
/// clustered: a connection that opens with a Raft preface instead of a
/// route's CONNECT is handed to it.
pub trait RaftPort: Send + Sync {
    /// Serves a Raft connection whose preface (`json`) the route's reader
    /// read, with the bytes it read past it (`rest`). Called once per
    /// such connection, on its task; returns when the connection ends.
    fn accept(
        &self,
        rd: Box<dyn tokio::io::AsyncRead + Unpin + Send>,
        json: Vec<u8>,
        rest: bytes::BytesMut,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;
}

/// What the system account is told of clients (`Server::events`), on
/// the client's own task: each call must only take a snapshot and queue
/// it, never block; and of this server leaving.
pub trait ServerEvents: Send + Sync {
    /// A client's CONNECT was accepted: it is in its account now.
    fn connected(&self, client: &Arc<Client>);
    /// A client failed to authenticate (before it is closed).
    fn auth_failed(&self, client: &Arc<Client>);
    /// A client's connection closed (`Client::closed_reason` says why).
    fn closed(&self, client: &Arc<Client>);
    /// A leaf node connection was registered, bound to `account`.
    fn leaf_connected(&self, client: &Arc<Client>, account: &str);
    /// A registered leaf node connection closed.
    fn leaf_closed(&self, client: &Arc<Client>, account: &str);
    /// This server enters lame duck mode, or shuts down: called before
    /// routes and clients close, so what it publishes still goes out.
    fn leaving(&self, lame_duck: bool);
}

/// Reloads the config file; `Err` says why it was refused.
pub type Reloader = Box<dyn Fn() -> Result<(), String> + Send + Sync>;

/// What is told of a closing connection (`Server::on_close`).
pub type ClosedHook = Box<dyn Fn(&Client, &[Arc<Subscription>]) + Send + Sync>;

pub struct Server {
    pub id: String,
    pub name: String,
    opts: RwLock<Arc<Options>>,
    /// Every account, each with its trie of subscriptions.
    pub accounts: crate::client::Accounts,
    /// The accounts JetStream serves, set once as it starts.
    js_accounts: std::sync::OnceLock<Vec<Arc<crate::client::Account>>>,
    /// Told of every insert into and removal from `sublist`.
    pub interest: Arc<crate::interest::InterestWatch>,
    pub clients: Mutex<BTreeMap<u64, Arc<Client>>>,
    /// Told of every connection that closes, with what it had subscribed
    /// (monitoring keeps them for `/connz?state=closed`).
    pub on_close: std::sync::OnceLock<ClosedHook>,
    /// Told of clients coming and going (the system account's events).
    pub events: std::sync::OnceLock<Arc<dyn ServerEvents>>,
    /// Reloads the config file, as SIGHUP does (set by the binary, which
    /// owns the file and the log; the system account's `RELOAD`).
    pub reloader: std::sync::OnceLock<Reloader>,
    next_cid: AtomicU64,
    next_sub_key: AtomicU64,
    pub stats: Stats,
    pub start: SystemTime,
    pub config_load_time: Mutex<SystemTime>,
    pub http_req_stats: Mutex<BTreeMap<String, u64>>,
    /// The client port actually bound (differs from options with `-p -1`).
    pub client_port: AtomicU64,
    /// The WebSocket listener's port, once bound (0: none).
    pub websocket_port: AtomicU64,
    pub lame_duck: AtomicBool,
    shutdown_tx: watch::Sender<bool>,
    /// The client listener is told to stop through this (lame duck).
    stop_accepting: watch::Sender<bool>,
    /// Owner of the server's own subscriptions (cid 0, never connected).
    pub system_client: Arc<Client>,
    /// Routes to the other servers of the cluster.
    pub routes: crate::route::Routes,
    /// Leaf node connections, either way.
    pub leafs: crate::leaf::Leafs,
    /// The Raft transport, when JetStream is clustered: Raft connections
    /// arriving on the route port are handed to it.
    pub raft: std::sync::OnceLock<Arc<dyn RaftPort>>,
    /// Told when a route comes or goes, or a peer's state changes (the
    /// JetStream cluster looks again).
    pub on_routes_changed: std::sync::OnceLock<Box<dyn Fn() + Send + Sync>>,
    /// This server's JetStream cluster state, sent in route INFO.
    hello: Mutex<Option<protocol::route::FlotillaHello>>,
    /// Client TLS, built from `opts.tls` at start and by each reload, and
    /// the same without client certificates, for `https_port`.
    tls: RwLock<Option<Arc<rustls::ServerConfig>>>,
    websocket_tls: RwLock<Option<Arc<rustls::ServerConfig>>>,
    /// The leaf node port's, built from `opts.leafnodes.tls`.
    leaf_tls: RwLock<Option<Arc<rustls::ServerConfig>>>,
    monitor_tls: RwLock<Option<Arc<rustls::ServerConfig>>>,
    /// Route port TLS, built from `opts.cluster.tls` at start and by each
    /// reload.
    route_tls: RwLock<Option<Arc<auth::tls::RouteTls>>>,
    /// Operator mode's trusted keys and accounts, built from
    /// `opts.authorization.operator` at start and by each reload.
    trust: RwLock<Option<Arc<auth::operator::Trust>>>,
}

/// Link-local addresses are not offered to clients (nats-server lists
/// global unicast addresses only).
fn is_link_local(ip: std::net::IpAddr) -> bool {
    match ip {
        std::net::IpAddr::V4(a) => a.is_link_local(),
        std::net::IpAddr::V6(a) => (a.segments()[0] & 0xffc0) == 0xfe80,
    }
}

/// A 56-character id in the shape of nats-server's (an nkey public key:
/// `N` and base32). Clients treat it as opaque.
fn new_server_id() -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
    let mut id = String::with_capacity(56);
    id.push('N');
    for _ in 0..55 {
        id.push(ALPHABET[fastrand::usize(..ALPHABET.len())] as char);
    }
    id
}

/// What a server subscription hears beyond this server's own publishes
/// in its account.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reached {
    /// Told to routes: published on any server of the cluster.
    pub advertised: bool,
    /// Given its account's stream-import shadows: published in an
    /// account it imports from.
    pub imports: bool,
}

impl Reached {
    pub const LOCAL: Reached = Reached {
        advertised: false,
        imports: false,
    };
    pub const CLUSTER: Reached = Reached {
        advertised: true,
        imports: false,
    };
}

impl Server {
    pub fn new(opts: Options) -> Arc<Self> {
        let id = new_server_id();
        let name = opts.server_name.clone().unwrap_or_else(|| id.clone());
        let now = SystemTime::now();
        let opts_cluster_name = opts.cluster.name.clone();
        let accounts = crate::client::Accounts::new();
        let server = Arc::new(Server {
            id,
            name,
            opts: RwLock::new(Arc::new(opts)),
            accounts,
            js_accounts: std::sync::OnceLock::new(),
            interest: Arc::default(),
            clients: Mutex::new(BTreeMap::new()),
            on_close: std::sync::OnceLock::new(),
            events: std::sync::OnceLock::new(),
            reloader: std::sync::OnceLock::new(),
            next_cid: AtomicU64::new(1),
            next_sub_key: AtomicU64::new(1),
            stats: Stats::default(),
            start: now,
            config_load_time: Mutex::new(now),
            http_req_stats: Mutex::new(BTreeMap::new()),
            client_port: AtomicU64::new(0),
            websocket_port: AtomicU64::new(0),
            lame_duck: AtomicBool::new(false),
            shutdown_tx: watch::channel(false).0,
            stop_accepting: watch::channel(false).0,
            system_client: Arc::new(Client::new(0, SocketAddr::from(([0, 0, 0, 0], 0)))),
            routes: crate::route::Routes::new(opts_cluster_name.as_deref()),
            leafs: crate::leaf::Leafs::default(),
            raft: std::sync::OnceLock::new(),
            on_routes_changed: std::sync::OnceLock::new(),
            hello: Mutex::new(None),
            tls: RwLock::new(None),
            websocket_tls: RwLock::new(None),
            leaf_tls: RwLock::new(None),
            monitor_tls: RwLock::new(None),
            route_tls: RwLock::new(None),
            trust: RwLock::new(None),
        });
        server.configure_accounts();
        server
    }

    /// What the accounts export, import and map: the config's, and in
    /// operator mode the account JWTs'.
    pub fn account_links(&self) -> auth::links::Links {
        let opts = self.opts();
        let jwt = self.trust().map(|t| t.links().clone()).unwrap_or_default();
        auth::links::Links {
            exports: [opts.exports.as_slice(), &jwt.exports].concat(),
            imports: [opts.imports.as_slice(), &jwt.imports].concat(),
            mappings: [opts.mappings.as_slice(), &jwt.mappings].concat(),
        }
    }

    /// Gives every account its imports, mappings and limits from the
    /// options in force (at start and by each reload), then every live
    /// subscription the shadows its account's imports call for.
    pub fn configure_accounts(&self) {
        let opts = self.opts();
        let auth::links::Links {
            exports,
            imports,
            mappings,
        } = self.account_links();
        let named = imports.iter().map(|i| &i.account);
        let named = named.chain(mappings.iter().map(|m| &m.account));
        // Every configured or resolved account exists from the start:
        // each gets the system account's imports here, not only those
        // named by links.
        let resolved = self.trust().map(|t| t.account_keys()).unwrap_or_default();
        let named = named
            .chain(opts.account_limits.keys())
            .chain(&opts.accounts)
            .chain(&resolved);
        for name in named {
            self.accounts.ensure(name);
        }
        // The system account exists whether or not anyone uses it, as
        // nats-server makes it (`$SYS` unless another is named).
        if let Some(system) = opts.system_account() {
            self.accounts.ensure(system);
        }
        // Each account's own, once: not every import looked at for each.
        let mut theirs: std::collections::HashMap<&str, Vec<config::options::Import>> =
            std::collections::HashMap::new();
        for i in &imports {
            theirs
                .entry(i.account.as_str())
                .or_default()
                .push(i.clone());
        }
        let system = opts.system_account().map(|s| self.accounts.ensure(s));
        for account in self.accounts.all() {
            let mut built = crate::account::imports::Imports::build(
                &account.name,
                theirs
                    .get(account.name.as_str())
                    .map_or(&[][..], |v| &v[..]),
                &exports,
                |name| self.accounts.ensure(name),
            );
            if let Some(system) = &system {
                let theirs = crate::account::imports::system_imports(&account.name, system);
                built.services.extend(theirs);
            }
            account.set_imports(built);
            let mapped = crate::account::mappings::Mappings::build(&account.name, &mappings);
            account.set_mappings(mapped);
            let limits = opts.account_limits.get(&account.name).copied();
            account.set_limits(limits.unwrap_or_default());
            let tracked = exports.iter().filter(|e| {
                e.account == account.name
                    && e.kind == config::options::LinkKind::Service
                    && e.latency.is_some()
            });
            account.set_tracked(tracked.map(|e| e.subject.clone()).collect());
        }
        crate::imports::reshadow(self);
        // Leaf nodes hear of the imports and mappings as they are now.
        self.leafs.restand();
    }

    /// Builds the client TLS configuration from the options in force;
    /// the options were validated, so an error here is one the files
    /// gained since (a reload reports it and keeps the old one).
    pub fn load_tls(&self) -> Result<(), String> {
        let (tls, monitor) = match &self.opts().tls {
            Some(o) => {
                let monitor = config::options::TlsOptions {
                    verify: false,
                    ..o.clone()
                };
                (
                    Some(auth::tls::server_config(o)?),
                    Some(auth::tls::server_config(&monitor)?),
                )
            }
            None => (None, None),
        };
        let route = match &self.opts().cluster.tls {
            Some(o) => Some(Arc::new(auth::tls::RouteTls::new(o)?)),
            None => None,
        };
        let websocket = match &self.opts().websocket.tls {
            Some(o) => Some(auth::tls::server_config(o)?),
            None => None,
        };
        let leaf = match &self.opts().leafnodes.tls {
            Some(o) => Some(auth::tls::server_config(o)?),
            None => None,
        };
        // Each remote builds its own when it dials; built here too, so a
        // bad file stops the start.
        for remote in &self.opts().leafnodes.remotes {
            if let Some(o) = &remote.tls {
                auth::tls::DialTls::new(o)
                    .map_err(|e| format!("leafnode remote {:?}: {e}", remote.urls))?;
            }
        }
        *self.tls.write() = tls;
        *self.websocket_tls.write() = websocket;
        *self.leaf_tls.write() = leaf;
        *self.monitor_tls.write() = monitor;
        *self.route_tls.write() = route;
        Ok(())
    }

    /// Builds operator mode's trust from the options (checked when they
    /// were validated).
    pub fn load_trust(&self) -> Result<(), String> {
        let trust = match &self.opts().authorization.operator {
            Some(op) => Some(Arc::new(auth::operator::Trust::new(&op.jwts, &op.preload)?)),
            None => None,
        };
        *self.trust.write() = trust;
        // Account JWTs bring their own imports, exports and mappings.
        self.configure_accounts();
        Ok(())
    }

    /// Operator mode's trust, when it is on.
    pub fn trust(&self) -> Option<Arc<auth::operator::Trust>> {
        self.trust.read().clone()
    }

    /// TLS on the route port, when `cluster { tls {} }` is set.
    pub fn route_tls(&self) -> Option<Arc<auth::tls::RouteTls>> {
        self.route_tls.read().clone()
    }

    /// The TLS configuration for `https_port`: the client certificate,
    /// no client certificate asked for.
    pub fn monitor_tls(&self) -> Option<Arc<rustls::ServerConfig>> {
        self.monitor_tls.read().clone()
    }

    /// The client TLS configuration, when TLS is on.
    pub fn tls(&self) -> Option<Arc<rustls::ServerConfig>> {
        self.tls.read().clone()
    }

    /// The WebSocket listener's TLS configuration (`websocket { tls {} }`).
    pub fn websocket_tls(&self) -> Option<Arc<rustls::ServerConfig>> {
        self.websocket_tls.read().clone()
    }

    pub fn leaf_tls(&self) -> Option<Arc<rustls::ServerConfig>> {
        self.leaf_tls.read().clone()
    }

    pub fn hello(&self) -> Option<protocol::route::FlotillaHello> {
        self.hello.lock().clone()
    }

    /// Updates what routes are told of this server's JetStream cluster
    /// state, and tells them.
    pub fn set_hello(&self, h: Option<protocol::route::FlotillaHello>) {
        *self.hello.lock() = h;
        if self.routes.enabled() {
            let info = self.route_info();
            let json = serde_json::to_vec(&info).expect("info serializes");
            self.routes.broadcast_info(&json);
        }
    }

    /// The INFO this server sends on routes.
    pub fn route_info(&self) -> protocol::route::RouteInfo {
        let opts = self.opts();
        let (cluster, cluster_dynamic) = self.routes.cluster_name();
        protocol::route::RouteInfo {
            server_id: self.id.clone(),
            server_name: self.name.clone(),
            version: NATS_VERSION.to_string(),
            proto: 1,
            go: concat!("flotilla ", env!("CARGO_PKG_VERSION")).to_string(),
            host: opts
                .cluster
                .host
                .clone()
                .unwrap_or_else(|| "0.0.0.0".into()),
            port: self.routes.port.load(Ordering::Relaxed) as u16,
            headers: true,
            auth_required: opts.cluster.user.is_some(),
            tls_required: opts.cluster.tls.is_some(),
            tls_verify: opts.cluster.tls.is_some(),
            max_payload: opts.max_payload as i64,
            jetstream: opts.jetstream.enabled,
            ip: opts
                .cluster
                .advertise
                .as_ref()
                .map(|a| format!("nats-route://{a}/"))
                .unwrap_or_default(),
            cluster,
            cluster_dynamic,
            flotilla: self.hello(),
            connect_urls: if opts.cluster.no_advertise {
                Vec::new()
            } else {
                self.own_connect_urls()
            },
            ws_connect_urls: if opts.cluster.no_advertise {
                Vec::new()
            } else {
                self.own_ws_connect_urls()
            },
            ..Default::default()
        }
    }

    /// A route or a peer's state changed: whoever follows routes looks
    /// again.
    pub fn routes_changed(&self) {
        if let Some(f) = self.on_routes_changed.get() {
            f();
        }
    }

    pub fn next_cid(&self) -> u64 {
        self.next_cid.fetch_add(1, Ordering::Relaxed)
    }

    /// The URLs clients reach this server on: the bound host and port, or
    /// with a wildcard host every non-loopback interface address (as
    /// nats-server lists them).
    pub fn own_connect_urls(&self) -> Vec<String> {
        let opts = self.opts();
        Server::urls_of(&opts.host, self.client_port.load(Ordering::Relaxed))
    }

    /// The URLs WebSocket clients reach this server on: `advertise`
    /// (with the listener's port when it names none), or as for
    /// [`Server::own_connect_urls`] on the WebSocket listener
    /// (nats-server's `getConnectURLs` for `websocket {}`). None when
    /// WebSocket is off.
    pub fn own_ws_connect_urls(&self) -> Vec<String> {
        let opts = self.opts();
        let ws = &opts.websocket;
        let port = self.websocket_port.load(Ordering::Relaxed);
        if port == 0 {
            return Vec::new();
        }
        match &ws.advertise {
            Some(a) if a.contains(':') => vec![a.clone()],
            Some(a) => vec![format!("{a}:{port}")],
            None => {
                let host = ws.host.as_deref().unwrap_or(config::options::DEFAULT_HOST);
                Server::urls_of(host, port)
            }
        }
    }

    /// `host:port` for `host`, or with a wildcard host every
    /// non-loopback interface address.
    fn urls_of(host: &str, port: impl std::fmt::Display) -> Vec<String> {
        match host {
            "0.0.0.0" | "::" | "" => {
                let mut urls: Vec<String> = if_addrs::get_if_addrs()
                    .unwrap_or_default()
                    .into_iter()
                    .filter(|i| !i.is_loopback() && !is_link_local(i.ip()))
                    .map(|i| match i.ip() {
                        std::net::IpAddr::V4(a) => format!("{a}:{port}"),
                        std::net::IpAddr::V6(a) => format!("[{a}]:{port}"),
                    })
                    .collect();
                urls.dedup();
                urls
            }
            h => vec![format!("{h}:{port}")],
        }
    }

    /// The accounts JetStream serves (none when it is off), each told
    /// the JetStream domain. Set once, as JetStream starts; returns
    /// whether it was.
    pub fn set_js_accounts(&self, names: &[String]) -> bool {
        let accounts: Vec<_> = names.iter().map(|n| self.accounts.ensure(n)).collect();
        if let Some(domain) = self.opts().jetstream.domain.as_deref() {
            for account in &accounts {
                account.set_js_domain(domain);
            }
        }
        self.js_accounts.set(accounts).is_ok()
    }

    /// The accounts JetStream serves: `$G`, each account whose block
    /// enables JetStream, or each account JWT that does; none when
    /// JetStream is off.
    pub fn js_accounts(&self) -> &[Arc<crate::client::Account>] {
        self.js_accounts.get().map_or(&[], Vec::as_slice)
    }

    /// Whether JetStream serves `account`.
    pub fn js_enabled_for(&self, account: &str) -> bool {
        self.js_accounts().iter().any(|a| a.name == account)
    }

    /// Subscribes the server itself in `account`: messages matching
    /// `subject` go to `sink` on the publisher's task. Only what is
    /// published in `account` reaches it: the server's services (the
    /// JetStream API) never hear another account's messages through a
    /// stream import (nats-server keeps them in the system account).
    pub fn subscribe_internal(
        &self,
        account: &Arc<crate::client::Account>,
        subject: &str,
        queue: Option<&str>,
        sink: Arc<dyn InternalSink>,
    ) -> Result<Arc<Subscription>, subjects::SublistError> {
        self.subscribe_server(account, subject, queue, sink, Reached::LOCAL)
    }

    /// [`Server::subscribe_internal`], told to routes if `reached` says,
    /// and with its account's stream-import shadows if it says so, as a
    /// client's subscription has them (a stream sourcing another account
    /// hears its deliveries through them; the shadows are told to
    /// routes as the subscription is).
    pub fn subscribe_server(
        &self,
        account: &Arc<crate::client::Account>,
        subject: &str,
        queue: Option<&str>,
        sink: Arc<dyn InternalSink>,
        reached: Reached,
    ) -> Result<Arc<Subscription>, subjects::SublistError> {
        let advertised = reached.advertised;
        let key = self.next_sub_key();
        let mut sub = Subscription::new(
            key,
            self.system_client.clone(),
            account.clone(),
            Bytes::copy_from_slice(subject.as_bytes()),
            queue.map(|q| Bytes::copy_from_slice(q.as_bytes())),
            Bytes::from(format!("_sys.{key}")),
        );
        sub.sink = Some(sink);
        sub.advertised = std::sync::atomic::AtomicBool::new(advertised);
        sub.takes_imports = reached.imports;
        let sub = Arc::new(sub);
        sub.account.sublist.write().insert(
            subject.as_bytes(),
            queue.map(str::as_bytes),
            key,
            sub.clone(),
        )?;
        self.interest.changed(subject.as_bytes());
        self.interest_changed(&sub, true);
        self.system_client
            .subs
            .lock()
            .insert(sub.sid.clone(), sub.clone());
        crate::imports::add_shadows(self, &sub);
        Ok(sub)
    }

    /// Like [`Server::subscribe_internal`], and the interest is advertised
    /// to routes: the cluster's own services (the meta group's API) are
    /// reached from any server.
    pub fn subscribe_internal_cluster(
        &self,
        account: &Arc<crate::client::Account>,
        subject: &str,
        sink: Arc<dyn InternalSink>,
    ) -> Result<Arc<Subscription>, subjects::SublistError> {
        self.subscribe_server(account, subject, None, sink, Reached::CLUSTER)
    }

    /// The options in force. Connections copy what they need at start;
    /// a reload swaps the whole set.
    pub fn opts(&self) -> Arc<Options> {
        self.opts.read().clone()
    }

    pub fn set_opts(&self, opts: Options) {
        *self.opts.write() = Arc::new(opts);
        *self.config_load_time.lock() = SystemTime::now();
    }

    pub fn next_sub_key(&self) -> u64 {
        self.next_sub_key.fetch_add(1, Ordering::Relaxed)
    }

    /// The INFO a new client gets, before its own fields are filled in.
    pub fn info(&self) -> ServerInfo {
        let opts = self.opts();
        ServerInfo {
            server_id: self.id.clone(),
            server_name: self.name.clone(),
            version: NATS_VERSION.to_string(),
            proto: 1,
            git_commit: String::new(),
            go: concat!("flotilla ", env!("CARGO_PKG_VERSION")).to_string(),
            host: opts.host.clone(),
            port: self.client_port.load(Ordering::Relaxed) as u16,
            headers: true,
            auth_required: opts.authorization.required(),
            tls_required: opts.tls.is_some(),
            tls_verify: opts.tls.as_ref().is_some_and(|t| t.verify),
            max_payload: opts.max_payload as i64,
            jetstream: opts.jetstream.enabled,
            // Once a route is up: this server's URLs, then the others'.
            connect_urls: {
                let remote = self.routes.remote_connect_urls();
                if !self.routes.seen_route() || opts.cluster.no_advertise {
                    Vec::new()
                } else {
                    own_then_remote(self.own_connect_urls(), remote)
                }
            },
            ..Default::default()
        }
    }

    /// The INFO for one client: the server's, plus who the client is.
    pub fn client_info(&self, client: &Client) -> ServerInfo {
        let mut info = if client.websocket {
            self.websocket_info()
        } else {
            self.info()
        };
        info.client_id = Some(client.cid);
        info.client_ip = Some(client.addr.ip().to_string());
        info
    }

    /// INFO for a WebSocket client, as nats-server's: the WebSocket
    /// listener's host, port and TLS, and for `connect_urls` the
    /// cluster's WebSocket URLs, not its client ones.
    pub fn websocket_info(&self) -> ServerInfo {
        let opts = self.opts();
        let ws = &opts.websocket;
        let mut info = self.info();
        info.host = ws
            .host
            .clone()
            .unwrap_or_else(|| config::options::DEFAULT_HOST.into());
        info.port = self.websocket_port.load(Ordering::Relaxed) as u16;
        info.tls_required = ws.tls.is_some();
        info.tls_verify = ws.tls.as_ref().is_some_and(|t| t.verify);
        info.auth_required = opts.client_authorization(true).required();
        // nats-server's WSConnectURLs: none until a route brings some,
        // then this server's first.
        let remote = self.routes.remote_ws_connect_urls();
        info.connect_urls = if remote.is_empty() || opts.cluster.no_advertise {
            Vec::new()
        } else {
            own_then_remote(self.own_ws_connect_urls(), remote)
        };
        info
    }

    pub fn shutdown_signal(&self) -> watch::Receiver<bool> {
        self.shutdown_tx.subscribe()
    }

    pub fn is_shutting_down(&self) -> bool {
        *self.shutdown_tx.borrow()
    }

    /// Registers a new connection, unless the server is full or stopping.
    pub fn register(
        &self,
        client: &Arc<Client>,
        max_connections: usize,
    ) -> Result<(), ClosedState> {
        let mut clients = self.clients.lock();
        if self.is_shutting_down() || self.lame_duck.load(Ordering::Relaxed) {
            return Err(ClosedState::ServerShutdown);
        }
        if clients.len() >= max_connections {
            return Err(ClosedState::MaxConnectionsExceeded);
        }
        clients.insert(client.cid, client.clone());
        self.stats.total_connections.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Removes a finished connection and everything it subscribed, and
    /// remembers it for `/connz?state=closed`.
    pub fn deregister(&self, client: &Arc<Client>) {
        let subs: Vec<Arc<Subscription>> = client.subs.lock().drain().map(|(_, s)| s).collect();
        if let Some(f) = self.on_close.get() {
            f(client, &subs);
        }
        if let Some(events) = self.events.get().filter(|_| !client.is_server()) {
            events.closed(client);
        }
        client.leave_account();
        let mut removed = Vec::new();
        // A client's subscriptions are all in its account: one lock.
        if let Some(account) = subs.first().map(|s| s.account.clone()) {
            let mut sl = account.sublist.write();
            for s in &subs {
                debug_assert!(Arc::ptr_eq(&s.account, &account));
                s.mark_closed();
                if sl.remove(&s.subject, s.queue.as_deref(), s.key).is_ok() {
                    removed.push(s);
                }
            }
        }
        for s in removed {
            self.interest.changed(&s.subject);
            self.interest_changed(s, false);
        }
        for s in &subs {
            crate::imports::remove_shadows(self, s);
        }
        self.clients.lock().remove(&client.cid);
    }

    /// After a reload: closes clients whose credentials the new settings
    /// no longer accept, and gives the others their user's permissions
    /// as they are now, removing subscriptions those no longer allow, as
    /// nats-server does.
    pub fn recheck_auth(&self) {
        let opts = self.opts();
        let clients: Vec<Arc<Client>> = self.clients.lock().values().cloned().collect();
        for c in clients {
            let creds = c.creds.lock().clone();
            // Clients that have not sent CONNECT yet are checked when they do.
            let Some(creds) = creds else { continue };
            let auth = opts.client_authorization(c.websocket);
            if !auth.required() {
                continue;
            }
            if let Some(trust) = self.trust() {
                self.recheck_jwt(&c, &trust, &creds);
                continue;
            }
            match auth::check(&auth, &creds) {
                Ok(user) => {
                    let account = user.and_then(|u| u.account).unwrap_or(GLOBAL);
                    if c.account().is_some_and(|a| a.name != account) {
                        // As nats-server: it reconnects into its new
                        // account.
                        info!("{} - moved to account {account:?}; closing", c.log_prefix());
                        c.close(ClosedState::ClientClosed);
                        continue;
                    }
                    let permissions = user.and_then(|u| u.permissions);
                    c.set_permits(permissions.map(|p| Arc::new(Permits::new(p))));
                    self.drop_unpermitted_subs(&c);
                }
                Err(who) => {
                    tracing::error!("{} - authentication error{who}", c.log_prefix());
                    c.out.push(usize::MAX, None, |b| {
                        protocol::encode::err(b, "Authorization Violation")
                    });
                    c.close(ClosedState::AuthenticationViolation);
                }
            }
        }
    }

    /// A reload in operator mode: the client's user JWT is checked
    /// against the new trust, as at CONNECT.
    fn recheck_jwt(
        &self,
        c: &Arc<Client>,
        trust: &auth::operator::Trust,
        creds: &auth::Credentials,
    ) {
        let now = auth::operator::unix_now();
        match trust.authenticate(
            creds.jwt.as_deref(),
            creds.sig.as_deref(),
            creds.nonce.as_deref(),
            now,
        ) {
            Ok(user) if c.account().is_some_and(|a| a.name != user.account) => {
                info!(
                    "{} - moved to account {:?}; closing",
                    c.log_prefix(),
                    user.account
                );
                c.close(ClosedState::ClientClosed);
            }
            Ok(user) => {
                c.set_permits(user.permissions.map(|p| Arc::new(Permits::new(&p))));
                self.drop_unpermitted_subs(c);
            }
            Err(why) => {
                tracing::error!("{} - authentication error: {why}", c.log_prefix());
                c.out.push(usize::MAX, None, |b| {
                    protocol::encode::err(b, "Authorization Violation")
                });
                c.close(ClosedState::AuthenticationViolation);
            }
        }
    }

    /// Removes the subscriptions of `client` its permits no longer allow,
    /// telling it of each (nats-server's `processSubsOnConfigReload`).
    fn drop_unpermitted_subs(&self, client: &Arc<Client>) {
        let Some(permits) = client.permits() else {
            return;
        };
        let prefix = client.log_prefix();
        let subs: Vec<Arc<Subscription>> = client.subs.lock().values().cloned().collect();
        for sub in subs {
            if permits.subscribe_allowed(&sub.subject, sub.queue.as_deref()) {
                continue;
            }
            self.unsubscribe(&sub);
            let subject = String::from_utf8_lossy(&sub.subject);
            let sid = String::from_utf8_lossy(&sub.sid);
            let text = match &sub.queue {
                Some(q) => {
                    let queue = String::from_utf8_lossy(q);
                    info!("{prefix} - Removed sub {subject:?} using queue {queue:?} (sid {sid:?}) - not authorized");
                    format!("Permissions Violation for Subscription to {subject:?} using queue {queue:?} (sid {sid:?})")
                }
                None => {
                    info!("{prefix} - Removed sub {subject:?} (sid {sid:?}) - not authorized");
                    format!("Permissions Violation for Subscription to {subject:?} (sid {sid:?})")
                }
            };
            client
                .out
                .push(usize::MAX, None, |b| protocol::encode::err(b, &text));
            client.out.flush();
        }
    }

    /// Another server's interest: a subscription owned by `peer` (a route
    /// or leaf node connection) in `account`'s trie, standing for `weight`
    /// queue members, told to whoever should hear of it. `None` for a
    /// subject the trie refuses.
    pub fn add_remote_interest(
        &self,
        peer: &Arc<Client>,
        account: Arc<crate::client::Account>,
        subject: &[u8],
        queue: Option<&[u8]>,
        weight: u32,
    ) -> Option<Arc<Subscription>> {
        debug_assert!(peer.is_server(), "a route's or leaf node's");
        let sub = Arc::new(Subscription::new(
            self.next_sub_key(),
            peer.clone(),
            account,
            Bytes::copy_from_slice(subject),
            queue.map(Bytes::copy_from_slice),
            Bytes::new(),
        ));
        sub.weight.store(weight.max(1), Ordering::Relaxed);
        sub.account
            .sublist
            .write()
            .insert(subject, queue, sub.key, sub.clone())
            .ok()?;
        self.interest.changed(subject);
        self.interest_changed(&sub, true);
        Some(sub)
    }

    /// Withdraws another server's interest (see
    /// [`Server::add_remote_interest`]).
    pub fn remove_remote_interest(&self, sub: &Subscription) {
        debug_assert!(sub.client.is_server(), "a route's or leaf node's");
        if self.remove_from_trie(sub) {
            self.interest_changed(sub, false);
        }
    }

    /// Takes `sub` out of its account's trie, marked closed for
    /// publishers holding an older match; whether this call removed it
    /// (only the first removal counts: an auto-unsubscribe can race a
    /// close).
    pub(crate) fn remove_from_trie(&self, sub: &Subscription) -> bool {
        // Closed first: a publisher holding a cached match skips it from
        // now on, as a fresh match (`Bus::others_listen`) already does.
        sub.mark_closed();
        let removed = sub
            .account
            .sublist
            .write()
            .remove(&sub.subject, sub.queue.as_deref(), sub.key)
            .is_ok();
        if removed {
            self.interest.changed(&sub.subject);
        }
        removed
    }

    /// Removes one subscription from the trie and from its client's map.
    pub fn unsubscribe(&self, sub: &Arc<Subscription>) {
        let removed = self.remove_from_trie(sub);
        crate::imports::remove_shadows(self, sub);
        let mut subs = sub.client.subs.lock();
        if subs.get(&sub.sid).is_some_and(|s| Arc::ptr_eq(s, sub)) {
            subs.remove(&sub.sid);
        }
        drop(subs);
        if removed {
            self.interest_changed(sub, false);
        }
    }

    /// A subscription was added to (`add`) or removed from its account's
    /// trie: tells the routes and leaf nodes that should hear of it.
    /// Routes hear of this server's clients, its cluster services and the
    /// leaf nodes it is the hub of (loop detection from any leaf node);
    /// which leaf nodes hear of what is the leaf registry's rule.
    pub fn interest_changed(&self, sub: &Subscription, add: bool) {
        let origin = &sub.client;
        let to_routes = match (origin.is_route, origin.leaf) {
            (true, _) => false,
            (_, Some(LeafRole::Solicited)) => sub.subject.starts_with(crate::leaf::LOOP_PREFIX),
            (_, Some(LeafRole::Accepted)) => true,
            (false, None) => origin.cid != 0 || sub.advertised.load(Ordering::Relaxed),
        };
        if to_routes {
            self.routes.local_interest(sub, if add { 1 } else { -1 });
        }
        self.leafs.interest(sub, add);
    }

    /// Binds the client port. Split from `conn::accept_clients` so the
    /// caller can log and write the ports file before serving.
    pub async fn bind(&self) -> std::io::Result<TcpListener> {
        let opts = self.opts();
        let port = if opts.port == config::options::RANDOM_PORT {
            0
        } else {
            opts.port as u16
        };
        let listener = TcpListener::bind((opts.host.as_str(), port)).await?;
        self.client_port
            .store(listener.local_addr()?.port() as u64, Ordering::Relaxed);
        Ok(listener)
    }

    /// Changes to true when the client listener should stop (lame duck,
    /// shutdown).
    pub fn accepting_stopped(&self) -> watch::Receiver<bool> {
        self.stop_accepting.subscribe()
    }

    /// Closes every client and tells all tasks to stop.
    pub fn shutdown(&self) {
        if self.shutdown_tx.send_replace(true) {
            return;
        }
        info!("Initiating Shutdown...");
        if let Some(events) = self.events.get() {
            events.leaving(false);
        }
        let _ = self.stop_accepting.send(true);
        self.routes.close_all();
        self.leafs.close_all();
        let clients: Vec<Arc<Client>> = self.clients.lock().values().cloned().collect();
        for c in clients {
            c.close(ClosedState::ServerShutdown);
        }
    }

    /// Tells `client` this server is going (an INFO with `ldm`), if it
    /// takes INFO after CONNECT; returns whether it was told.
    pub fn tell_lame_duck(&self, client: &Client) -> bool {
        if !client.async_info.load(Ordering::Relaxed) {
            return false;
        }
        let mut info = self.client_info(client);
        info.ldm = true;
        let json = serde_json::to_vec(&info).expect("info serializes");
        let max_pending = self.opts().max_pending;
        client
            .out
            .push(max_pending, None, |b| protocol::encode::info(b, &json));
        client.out.flush();
        true
    }

    /// Lame duck: stop accepting, tell clients (INFO with `ldm`), wait the
    /// grace period, then close clients spread over the rest of the
    /// lame-duck duration, then shut down.
    pub async fn lame_duck(self: Arc<Self>) {
        if self.lame_duck.swap(true, Ordering::SeqCst) || self.is_shutting_down() {
            return;
        }
        info!("Entering lame duck mode, stop accepting new clients");
        if let Some(events) = self.events.get() {
            events.leaving(true);
        }
        let _ = self.stop_accepting.send(true);
        let opts = self.opts();
        let clients: Vec<Arc<Client>> = self.clients.lock().values().cloned().collect();
        if clients.is_empty() {
            self.shutdown();
            return;
        }
        for c in &clients {
            self.tell_lame_duck(c);
        }
        let mut shutdown = self.shutdown_signal();
        tokio::select! {
            _ = tokio::time::sleep(opts.lame_duck_grace_period) => {}
            _ = shutdown.changed() => return,
        }
        info!("Closing existing clients");
        let spread = opts
            .lame_duck_duration
            .saturating_sub(opts.lame_duck_grace_period)
            .max(Duration::from_secs(1));
        let clients: Vec<Arc<Client>> = self.clients.lock().values().cloned().collect();
        let interval = (spread / clients.len().max(1) as u32).min(Duration::from_secs(1));
        for c in clients {
            c.close(ClosedState::ServerShutdown);
            if interval >= Duration::from_micros(1) {
                // Sleep a random share of the interval, as nats-server does,
                // so reconnects do not arrive in lock step.
                let nanos = interval.as_nanos() as u64;
                let jitter = Duration::from_nanos(nanos / 2 + fastrand::u64(0..nanos / 2 + 1));
                tokio::select! {
                    _ = tokio::time::sleep(jitter) => {}
                    _ = shutdown.changed() => return,
                }
            }
        }
        self.shutdown();
    }
}

/// A server's `connect_urls`: its own first, then the other servers'
/// that it does not list already.
fn own_then_remote(mut urls: Vec<String>, remote: Vec<String>) -> Vec<String> {
    for u in remote {
        if !urls.contains(&u) {
            urls.push(u);
        }
    }
    urls
}
