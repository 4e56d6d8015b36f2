//! One route connection, from TCP connect (or accept) to close: the
//! handshake, the remote's interest, messages it forwards, pings.
//!
//! Handshake, as nats-server: the accepting side sends INFO at once and
//! takes nothing before the dialer's CONNECT; the dialer sends CONNECT and
//! its INFO. A route is registered when the peer's INFO arrives.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use parking_lot::Mutex;
use protocol::encode;
use protocol::route::{self as rp, RouteConnect, RouteInfo, RouteOp, RoutedMsg};
use subjects::MatchCache;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};
use tokio::net::TcpStream;
use tracing::{debug, error, info};

use flotilla_core::account::stats::Peer;
use flotilla_core::client::{Client, ClosedState, Message, Subscription};
use flotilla_core::conn::delivery::{self, Delivery};
use flotilla_core::conn::writer;
use flotilla_core::route::{InterestKey, Route};
use flotilla_core::server::Server;

/// Routes ping this often, and two unanswered pings end a route. nats-server
/// pings routes every 30 s at most; flotilla pings more, so a route that
/// died silently (a partition) is found and made again within seconds
/// instead of holding interest, and messages, for a dead link.
const ROUTE_PING: Duration = Duration::from_secs(2);
const STALE_PINGS: u32 = 2;
/// A route whose sent data stays unacknowledged this long is closed and
/// made again (after a partition heals, rather than after TCP's backoff).
const UNACKED_LIMIT: Duration = Duration::from_secs(5);
/// Longest control line a peer may send.
const MAX_CONTROL_LINE: usize = 64 * 1024;

/// The dialing side's view of what it dialed.
pub struct Dialed {
    pub url: String,
    pub configured: bool,
    /// What to send in CONNECT: the route URL's user and password, or
    /// this server's cluster credentials.
    pub creds: Option<(String, String)>,
}

/// How a connection ended, for the dial loop.
pub enum Outcome {
    /// The peer is this server.
    ToSelf,
    /// The peer identified itself (whether or not this connection was the
    /// one kept).
    Remote(String),
    /// It ended before the peer said who it is.
    NoRoute,
}

/// A route port connection: plain, or TLS when `cluster { tls {} }` is
/// set (handshaken by whoever accepted or dialed it).
pub enum RouteStream {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::TlsStream<TcpStream>>),
}

impl RouteStream {
    fn tcp(&self) -> &TcpStream {
        match self {
            RouteStream::Plain(s) => s,
            RouteStream::Tls(s) => s.get_ref().0,
        }
    }
}

pub async fn serve(
    server: Arc<Server>,
    stream: RouteStream,
    addr: SocketAddr,
    dialed: Option<Dialed>,
) -> Outcome {
    let tcp = stream.tcp();
    let _ = tcp.set_nodelay(true);
    cluster::transport::bound_unacked(tcp, UNACKED_LIMIT);
    let local_port = tcp.local_addr().map_or(0, |a| a.port());
    match stream {
        RouteStream::Plain(s) => {
            let (rd, wr) = s.into_split();
            serve_split(server, rd, wr, addr, local_port, dialed).await
        }
        RouteStream::Tls(s) => {
            let (rd, wr) = tokio::io::split(*s);
            serve_split(server, rd, wr, addr, local_port, dialed).await
        }
    }
}

async fn serve_split<R, W>(
    server: Arc<Server>,
    rd: R,
    wr: W,
    addr: SocketAddr,
    local_port: u16,
    dialed: Option<Dialed>,
) -> Outcome
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let opts = server.opts();
    let client = Arc::new(Client::new_route(server.next_cid(), addr));
    let info = serde_json::to_vec(&server.route_info()).expect("info serializes");
    // A dialer opens with CONNECT, then both sides send INFO.
    let connect = dialed.as_ref().map(|d| {
        let (cluster, dynamic) = server.routes.cluster_name();
        let (user, pass) = match &d.creds {
            Some((u, p)) => (Some(u.clone()), Some(p.clone())),
            None => (None, None),
        };
        let connect = RouteConnect {
            user,
            pass,
            echo: true,
            tls_required: opts.cluster.tls.is_some(),
            headers: true,
            name: server.id.clone(),
            cluster,
            cluster_dynamic: dynamic,
            ..Default::default()
        };
        serde_json::to_vec(&connect).expect("connect serializes")
    });
    let writer = writer::start(
        server.clone(),
        client.clone(),
        wr,
        opts.write_deadline,
        |b| {
            if let Some(json) = &connect {
                b.extend_from_slice(b"CONNECT ");
                b.extend_from_slice(json);
                b.extend_from_slice(b"\r\n");
            }
            encode::info(b, &info);
        },
    );
    server.routes.track(&client);
    if server.is_shutting_down() {
        client.close(ClosedState::ServerShutdown);
    }
    if dialed.is_some() {
        info!("{} - Route connection created", route_prefix(&client));
    }

    let ping = opts.ping_interval.min(ROUTE_PING);
    let mut conn = RouteConn {
        delivery: Delivery::for_peer(server.clone(), &client, opts.max_pending),
        cache: MatchCache::new(server.accounts.global().sublist.read().generation()),
        server: server.clone(),
        client: client.clone(),
        got_connect: dialed.is_some(),
        dialed,
        local_port,
        route: None,
        remote: None,
        to_self: false,
        pings_out: 0,
        handoff: None,
        rest: BytesMut::new(),
    };
    let (reason, handoff) = conn.run(rd, ping).await;
    if let Some((rd, json, rest)) = handoff {
        // A Raft transport connection: not a route.
        client.close(ClosedState::ClientClosed);
        server.routes.untrack(client.cid);
        let _ = writer.await;
        match server.raft.get() {
            Some(port) => port.accept(Box::new(rd), json, rest).await,
            None => debug!("{addr} - Raft connection refused: JetStream is not clustered here"),
        }
        return Outcome::NoRoute;
    }
    client.close(reason);
    let reason = client.closed_reason().unwrap_or(reason);
    let remote_name = conn
        .route
        .as_ref()
        .map(|r| r.remote_name.clone())
        .or_else(|| conn.remote.as_ref().map(|r| r.1.clone()));
    if let Some(r) = conn.route.take() {
        let subs: Vec<Arc<Subscription>> =
            std::mem::take(&mut *r.subs.lock()).into_values().collect();
        for s in &subs {
            server.remove_remote_interest(s);
        }
        if server.routes.deregister(&r) {
            crate::send_info_to_clients(&server);
            server.routes_changed();
        }
    }
    server.routes.untrack(client.cid);
    let tag = remote_name
        .map(|n| format!(" - Remote: {n}"))
        .unwrap_or_default();
    info!(
        "{} - Router connection closed: {}{tag}",
        route_prefix(&client),
        reason.as_str()
    );
    let _ = writer.await;
    if conn.to_self {
        Outcome::ToSelf
    } else {
        match conn.remote {
            Some((id, _)) => Outcome::Remote(id),
            None => Outcome::NoRoute,
        }
    }
}

/// A Raft connection handed over: its read half, preface and the bytes
/// read past the preface.
type Handoff<R> = (R, Vec<u8>, BytesMut);

/// `ip:port - rid:N`, nats-server's prefix for route log lines.
fn route_prefix(c: &Client) -> String {
    format!("{} - rid:{}", c.addr, c.cid)
}

struct RouteConn {
    server: Arc<Server>,
    client: Arc<Client>,
    dialed: Option<Dialed>,
    local_port: u16,
    /// The accepting side takes nothing before CONNECT.
    got_connect: bool,
    route: Option<Arc<Route>>,
    /// The peer's id and name, once its INFO came.
    remote: Option<(String, String)>,
    to_self: bool,
    pings_out: u32,
    /// A Raft transport connection's preface, seen as the first line.
    handoff: Option<Vec<u8>>,
    rest: BytesMut,
    delivery: Delivery,
    cache: MatchCache<Arc<Subscription>>,
}

impl RouteConn {
    async fn run<R: AsyncRead + Unpin>(
        &mut self,
        mut rd: R,
        ping: Duration,
    ) -> (ClosedState, Option<Handoff<R>>) {
        let reason = self.read_loop(&mut rd, ping).await;
        match self.handoff.take() {
            Some(json) => (reason, Some((rd, json, std::mem::take(&mut self.rest)))),
            None => (reason, None),
        }
    }

    async fn read_loop<R: AsyncRead + Unpin>(&mut self, rd: &mut R, ping: Duration) -> ClosedState {
        let mut buf = BytesMut::with_capacity(64 * 1024);
        let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + ping, ping);
        let client = self.client.clone();
        loop {
            tokio::select! {
                read = rd.read_buf(&mut buf) => match read {
                    Ok(0) => return ClosedState::ClientClosed,
                    Ok(_) => {}
                    Err(_) => return ClosedState::ReadError,
                },
                _ = client.killed() => return ClosedState::ClientClosed,
                _ = ticker.tick() => {
                    if self.pings_out >= STALE_PINGS {
                        return ClosedState::StaleConnection;
                    }
                    self.pings_out += 1;
                    self.send(|b| b.extend_from_slice(encode::PING));
                    continue;
                }
            }
            let r = self.process(&mut buf);
            self.delivery.finish();
            if let Err(reason) = r {
                if self.handoff.is_some() {
                    self.rest = buf;
                }
                return reason;
            }
            if buf.capacity() - buf.len() < 4096 {
                buf.reserve(64 * 1024);
            }
        }
    }

    fn process(&mut self, buf: &mut BytesMut) -> Result<(), ClosedState> {
        loop {
            let (result, used) = match rp::parse(&buf[..], MAX_CONTROL_LINE) {
                Ok(None) => return Ok(()),
                Ok(Some((op, n))) => (self.handle(op), n),
                Err(e) => {
                    error!("{} - Route protocol error: {e}", route_prefix(&self.client));
                    self.send(|b| encode::err(b, "Unknown Protocol Operation"));
                    return Err(ClosedState::ParseError);
                }
            };
            buf.advance(used);
            result?;
        }
    }

    fn send(&self, f: impl FnOnce(&mut BytesMut)) {
        self.client.out.push(usize::MAX, None, f);
        self.client.out.flush();
    }

    fn handle(&mut self, op: RouteOp<'_>) -> Result<(), ClosedState> {
        if let RouteOp::Raft(json) = op {
            if self.got_connect || self.dialed.is_some() {
                return Err(ClosedState::ProtocolViolation);
            }
            self.handoff = Some(json.to_vec());
            return Err(ClosedState::ClientClosed);
        }
        if !self.got_connect && !matches!(op, RouteOp::Connect(_)) {
            self.send(|b| encode::err(b, "Authorization Violation"));
            return Err(ClosedState::AuthenticationViolation);
        }
        match op {
            RouteOp::Connect(json) => self.connect(json),
            RouteOp::Info(json) => self.info(json),
            RouteOp::Ping => {
                self.send(|b| b.extend_from_slice(encode::PONG));
                Ok(())
            }
            RouteOp::Pong => {
                self.pings_out = 0;
                Ok(())
            }
            RouteOp::Ok | RouteOp::Ignored | RouteOp::Raft(_) => Ok(()),
            RouteOp::Err(text) => {
                error!(
                    "{} - Route Error {}",
                    route_prefix(&self.client),
                    String::from_utf8_lossy(text)
                );
                Err(ClosedState::ParseError)
            }
            RouteOp::Sub {
                account,
                subject,
                queue,
                weight,
            } => {
                self.remote_sub(account, subject, queue, weight);
                Ok(())
            }
            RouteOp::Unsub {
                account,
                subject,
                queue,
            } => {
                self.remote_unsub(account, subject, queue);
                Ok(())
            }
            RouteOp::Msg(m) => {
                self.routed(&m);
                Ok(())
            }
        }
    }

    /// Whether the peer's cluster name is ours, after a generated name of
    /// ours gave way to it (then routes made under the old name go).
    fn cluster_name_agrees(&self, theirs: &str, theirs_dynamic: bool) -> bool {
        let (agree, changed) = self.server.routes.reconcile_name(theirs, theirs_dynamic);
        if changed {
            self.server.routes.close_all_except(self.client.cid);
        }
        agree
    }

    fn connect(&mut self, json: &[u8]) -> Result<(), ClosedState> {
        let ci: RouteConnect = match serde_json::from_slice(json) {
            Ok(c) => c,
            Err(e) => {
                error!(
                    "{} - invalid route CONNECT: {e}",
                    route_prefix(&self.client)
                );
                self.send(|b| encode::err(b, "invalid CONNECT"));
                return Err(ClosedState::ProtocolViolation);
            }
        };
        if ci.lang.is_some() {
            self.send(|b| encode::err(b, "attempted to connect to route port"));
            return Err(ClosedState::ProtocolViolation);
        }
        let opts = self.server.opts();
        if let Some(user) = &opts.cluster.user {
            let ok = ci.user.as_deref() == Some(user.as_str())
                && ci.pass.as_deref() == opts.cluster.password.as_deref();
            if !ok {
                error!(
                    "{} - Router authentication error",
                    route_prefix(&self.client)
                );
                self.send(|b| encode::err(b, "Authorization Violation"));
                return Err(ClosedState::AuthenticationViolation);
            }
        }
        if !self.cluster_name_agrees(&ci.cluster, ci.cluster_dynamic) {
            let (ours, _) = self.server.routes.cluster_name();
            let text = format!(
                "Rejecting connection, cluster name {:?} does not match {ours:?}",
                ci.cluster
            );
            error!("{} - {text}", route_prefix(&self.client));
            self.send(|b| encode::err(b, &text));
            return Err(ClosedState::ClusterNameConflict);
        }
        self.got_connect = true;
        info!("{} - Route connection created", route_prefix(&self.client));
        Ok(())
    }

    fn info(&mut self, json: &[u8]) -> Result<(), ClosedState> {
        let info: RouteInfo = match serde_json::from_slice(json) {
            Ok(i) => i,
            Err(e) => {
                error!("{} - invalid route INFO: {e}", route_prefix(&self.client));
                return Err(ClosedState::ProtocolViolation);
            }
        };
        if let Some((id, _)) = &self.remote {
            if info.server_id == *id {
                if let Some(r) = &self.route {
                    if *r.hello.lock() != info.flotilla {
                        *r.hello.lock() = info.flotilla.clone();
                        self.server.routes_changed();
                    }
                    // The peer entering lame duck mode: clients stop
                    // being sent to it.
                    if info.ldm && !r.lame_duck.swap(true, Ordering::Relaxed) {
                        crate::send_info_to_clients(&self.server);
                    }
                }
                return Ok(());
            }
            // A later INFO about another server is gossip: connect to it.
            if info.server_id != *id
                && info.server_id != self.server.id
                && !self.server.routes.has(&info.server_id)
                && !info.ip.is_empty()
            {
                debug!(
                    "{} - Learned of route {:?} at {}",
                    route_prefix(&self.client),
                    info.server_id,
                    info.ip
                );
                crate::solicit(self.server.clone(), info.ip.clone(), false);
            }
            return Ok(());
        }
        self.remote = Some((info.server_id.clone(), info.server_name.clone()));
        // Message traces name a route by its server.
        self.client.meta.lock().name = info.server_name.clone();
        if let Some(d) = self.dialed.as_ref().filter(|d| d.configured) {
            let id = (info.server_id != self.server.id).then(|| info.server_id.clone());
            self.server.routes.resolve(&d.url, id);
        }
        if info.server_id == self.server.id {
            self.to_self = true;
            return Err(ClosedState::DuplicateRoute);
        }
        if !self.cluster_name_agrees(&info.cluster, info.cluster_dynamic) {
            return Err(ClosedState::ClusterNameConflict);
        }
        if !info.route_account.is_empty() {
            // A pooled nats-server's connection pinned to one account;
            // flotilla keeps one connection per pair.
            return Ok(());
        }
        // What others are told: where the peer said it is, or the
        // address it came from with its route port (never a configured
        // URL, which may hold credentials or a name only we resolve).
        let url = if info.ip.is_empty() {
            let at = SocketAddr::new(self.client.addr.ip(), info.port);
            format!("nats-route://{at}/")
        } else {
            info.ip.clone()
        };
        let (did_solicit, configured) = match &self.dialed {
            Some(d) => (true, d.configured),
            None => (false, false),
        };
        let dialer_port = if did_solicit {
            self.local_port
        } else {
            self.client.addr.port()
        };
        let route = Arc::new(Route {
            client: self.client.clone(),
            remote_id: info.server_id.clone(),
            remote_name: info.server_name.clone(),
            did_solicit,
            configured,
            dialer_port,
            lame_duck: Default::default(),
            url,
            hello: Mutex::new(info.flotilla.clone()),
            info,
            subs: Default::default(),
        });
        if !self.server.routes.register(&self.server.id, &route) {
            debug!(
                "{} - Detected duplicate remote route {:?}",
                route_prefix(&self.client),
                route.remote_id
            );
            return Err(ClosedState::DuplicateRoute);
        }
        debug!(
            "{} - Registering remote route {:?}",
            route_prefix(&self.client),
            route.remote_id
        );
        // A route dialed because of gossip is not gossiped again (as
        // nats-server): whoever told us has told the others.
        if !did_solicit || configured {
            self.server.routes.gossip(&route);
        }
        self.route = Some(route);
        crate::send_info_to_clients(&self.server);
        self.server.routes_changed();
        Ok(())
    }

    /// The registered route and the interest key an `RS+`/`RS-` names;
    /// `None` before registration. Interest in an account this server
    /// does not have is kept too (no local client can publish there, so
    /// it is never used until a reload makes the account).
    fn remote_interest(
        &self,
        account: &[u8],
        subject: &[u8],
        queue: Option<&[u8]>,
    ) -> Option<(Arc<Route>, InterestKey)> {
        let route = self.route.clone()?;
        let key = (
            Bytes::copy_from_slice(account),
            Bytes::copy_from_slice(subject),
            queue.map(Bytes::copy_from_slice),
        );
        Some((route, key))
    }

    fn remote_sub(&mut self, account: &[u8], subject: &[u8], queue: Option<&[u8]>, weight: u32) {
        let Some((route, key)) = self.remote_interest(account, subject, queue) else {
            return;
        };
        let mut subs = route.subs.lock();
        if let Some(existing) = subs.get(&key) {
            // A queue group's new member count.
            existing.weight.store(weight.max(1), Ordering::Relaxed);
            return;
        }
        let Ok(name) = std::str::from_utf8(account) else {
            return;
        };
        let account = self.server.accounts.ensure(name);
        match self
            .server
            .add_remote_interest(&self.client, account, subject, queue, weight)
        {
            Some(sub) => {
                subs.insert(key, sub);
            }
            None => debug!(
                "{} - ignoring interest in invalid subject {:?}",
                route_prefix(&self.client),
                String::from_utf8_lossy(subject)
            ),
        }
    }

    fn remote_unsub(&mut self, account: &[u8], subject: &[u8], queue: Option<&[u8]>) {
        let Some((route, key)) = self.remote_interest(account, subject, queue) else {
            return;
        };
        let removed = route.subs.lock().remove(&key);
        if let Some(sub) = removed {
            self.server.remove_remote_interest(&sub);
        }
    }

    fn routed(&mut self, m: &RoutedMsg<'_>) {
        if self.route.is_none() {
            return;
        }
        let Some(account) = self.server.accounts.get(m.account) else {
            debug!(
                "{} - dropping a message for unknown account {:?}",
                route_prefix(&self.client),
                String::from_utf8_lossy(m.account)
            );
            return;
        };
        let c = &self.client;
        c.in_msgs.fetch_add(1, Ordering::Relaxed);
        c.in_bytes
            .fetch_add(m.message.len() as u64, Ordering::Relaxed);
        let server = &self.server;
        server.stats.in_msgs.fetch_add(1, Ordering::Relaxed);
        server
            .stats
            .in_bytes
            .fetch_add(m.message.len() as u64, Ordering::Relaxed);
        account
            .stats
            .received
            .add(Peer::Route, 1, m.message.len() as u64);
        // The cache is for `$G`'s trie, where most messages are.
        let uncached;
        let result = if account.is_global() {
            self.cache
                .get_or_insert(m.subject, || account.sublist.read().matches(m.subject))
        } else {
            uncached = account.sublist.read().matches(m.subject);
            &*uncached
        };
        let (subject, reply) = delivery::from_route(m.subject, m.reply);
        let msg = Message {
            subject,
            routed: m.subject,
            reply,
            headers: m.headers(),
            payload: m.payload(),
        };
        let traced = flotilla_core::trace::asked(msg.headers).and_then(|asked| {
            let dest = asked.dest.clone()?;
            let size = m.message.len();
            let route = &self.client;
            let trace = flotilla_core::trace::Trace::new(
                asked,
                dest,
                flotilla_core::trace::ROUTER,
                route,
                &account.name,
                m.subject,
                size,
            );
            Some(trace)
        });
        let is_traced = traced.is_some();
        self.delivery.trace = traced;
        self.delivery.route_from_peer(result, msg, &m.queues);
        if is_traced {
            self.delivery.send_trace(&account);
        }
    }
}
