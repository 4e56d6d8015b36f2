//! One leaf node connection, from accept (this server is the hub) or dial
//! (a `leafnodes.remotes` entry: this server is the spoke) to close, and
//! the loop that dials a remote again whenever its connection ends.
//!
//! Handshake, as nats-server's leafnode.go: the hub sends INFO at once and
//! takes nothing before the leaf's CONNECT (within the auth timeout); the
//! leaf sends CONNECT when the hub's INFO arrives. Flotilla never
//! compresses: its INFO says `"compression":"off"` and its CONNECT
//! `"compress_mode":"off"`, which a nats-server peer accepts without the
//! extra INFO exchange compression needs. Once both are through, the
//! connection is registered (`leaf::Leafs::register`) and each side tells
//! the other its interest; messages then flow as `LMSG`/`HMSG`.

//!
//! The registry every task shares (which interest each connection is
//! told, loop detection) is `flotilla_core::leaf`, which delivery
//! consults; this crate is the connection and its protocol.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use protocol::encode;
use protocol::leaf::{LeafConnect, LeafInfo};
use protocol::route::{self as rp, Dialect, RouteOp, RoutedMsg};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tracing::{debug, error, info, warn};

use auth::tls::DialTls;
use auth::{self, Credentials};
use config::options::RemoteLeaf;
use flotilla_core::account::mappings::Mapped;
use flotilla_core::account::stats::Peer;
use flotilla_core::client::Account;
use flotilla_core::client::{Client, ClosedState, LeafRole, Message, Subscription};
use flotilla_core::conn::delivery::{self, Delivery};
use flotilla_core::conn::writer;
use flotilla_core::imports;
use flotilla_core::leaf::{self, Leaf};
use flotilla_core::server::Server;

/// Leaf connections ping this often, and two unanswered pings end one,
/// so a dead link is found (and dialed again) within seconds.
const LEAF_PING: Duration = Duration::from_secs(2);
const STALE_PINGS: u32 = 2;
/// Longest control line a peer may send.
const MAX_CONTROL_LINE: usize = 64 * 1024;
/// How long a dialing leaf waits for the hub's INFO.
const FIRST_INFO_WAIT: Duration = Duration::from_secs(5);
/// How long a remote waits before dialing again after a loop was found
/// (nats-server's `leafNodeReconnectDelayAfterLoopDetected`).
const LOOP_DELAY: Duration = Duration::from_secs(30);
/// What `-ERR` text reports a loop (nats-server's `leafProcessErr`).
const LOOP_DETECTED: &str = "Loop detected";

/// The dialing side's view of what it dialed.
struct Dial {
    /// The local account the connection is bound to.
    account: Arc<Account>,
    /// From the URL's user info.
    user: Option<String>,
    pass: Option<String>,
    /// The remote's `credentials` file and `nkey` seed.
    credentials: Option<std::path::PathBuf>,
    nkey: Option<String>,
}

impl Dial {
    /// Dialing `url` of `remote`, bound to `account`.
    fn new(remote: &RemoteLeaf, url: &str, account: &Arc<Account>) -> Dial {
        let (user, pass) = match flotilla_core::route::creds(url) {
            Some((u, p)) => (Some(u), Some(p).filter(|p| !p.is_empty())),
            None => (None, None),
        };
        Dial {
            account: account.clone(),
            user,
            pass,
            credentials: remote.credentials.clone(),
            nkey: remote.nkey.clone(),
        }
    }

    /// The JWT, nkey and signature of `nonce` its CONNECT carries, from
    /// the credentials file (read now: it may have been renewed) or the
    /// seed; none without either.
    fn prove(&self, nonce: &str) -> Result<auth::Proof, String> {
        if let Some(path) = &self.credentials {
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("credentials file {}: {e}", path.display()))?;
            return auth::prove_with_creds(&text, nonce);
        }
        match &self.nkey {
            Some(seed) => auth::prove_with_nkey(seed, nonce),
            None => Ok(auth::Proof::default()),
        }
    }
}

/// How a connection ended, for the dial loop.
#[derive(Debug, PartialEq, Eq)]
enum Ended {
    /// Either side found a cycle: wait longer before dialing again.
    Loop,
    Closed,
}

/// Dials `remote`'s URLs in turn for as long as the server runs, serving
/// each connection made, and waiting `leafnodes.reconnect` in between.
pub async fn solicit(server: Arc<Server>, remote: RemoteLeaf) {
    let account = match &remote.account {
        Some(name) => server.accounts.ensure(name),
        None => server.accounts.global().clone(),
    };
    // Checked when the options were (`Server::load_tls`).
    let tls = match remote.tls.as_ref().map(DialTls::new).transpose() {
        Ok(tls) => tls,
        Err(e) => return error!("leafnode remote {:?}: {e}", remote.urls),
    };
    let mut shutdown = server.shutdown_signal();
    let mut next = 0;
    loop {
        if server.is_shutting_down() {
            return;
        }
        let url = &remote.urls[next % remote.urls.len()];
        next += 1;
        let wait = match dial_once(&server, &remote, url, &account, tls.as_ref()).await {
            Some(Ended::Loop) => LOOP_DELAY,
            _ => server.opts().leafnodes.reconnect,
        };
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = shutdown.changed() => return,
        }
    }
}

/// One connection to `url`; `None` if it could not be made. The hub's
/// INFO is read first, in the clear; then, with a `tls` block, the TLS
/// handshake, as nats-server's leaf does (a hub that asks for TLS from
/// a remote without one is left).
async fn dial_once(
    server: &Arc<Server>,
    remote: &RemoteLeaf,
    url: &str,
    account: &Arc<Account>,
    tls: Option<&DialTls>,
) -> Option<Ended> {
    let hostport = flotilla_core::route::host_port(url)?;
    let mut stream = match TcpStream::connect(&hostport).await {
        Ok(s) => s,
        Err(e) => {
            debug!("Error trying to connect as leafnode to remote server {hostport:?}: {e}");
            return None;
        }
    };
    let _ = stream.set_nodelay(true);
    let addr = stream.peer_addr().ok()?;
    let client = Client::new_leaf(server.next_cid(), addr, LeafRole::Solicited);
    if !remote.deny_imports.is_empty() || !remote.deny_exports.is_empty() {
        let deny = leaf::Deny::new(&remote.deny_imports, &remote.deny_exports);
        let _ = client.leaf_deny.set(deny);
    }
    let client = Arc::new(client);
    let prefix = leaf_prefix(&client);
    let first = tokio::time::timeout(FIRST_INFO_WAIT, first_line(&mut stream))
        .await
        .unwrap_or_else(|_| Err("no INFO from the hub in time".to_string()));
    let first = match first {
        Ok(line) => line,
        Err(why) => {
            error!("{prefix} - leafnode handshake error: {why}");
            return Some(Ended::Closed);
        }
    };
    let start = Start {
        dial: Some(Dial::new(remote, url, account)),
        nonce: None,
        greeting: None,
        read: first,
    };
    info!("Leafnode connection created for account: {}", account.name);
    match (tls, tls_required(&start.read)) {
        (None, false) => {
            let (rd, wr) = stream.into_split();
            Some(serve(server.clone(), client, rd, wr, start).await)
        }
        (None, true) => {
            error!("{prefix} - the hub requires TLS, and this remote has no tls block");
            Some(Ended::Closed)
        }
        (Some(tls), _) => match tls.connect(stream, &hostport).await {
            Ok(stream) => {
                let (rd, wr) = tokio::io::split(stream);
                Some(serve(server.clone(), client, rd, wr, start).await)
            }
            Err(e) => {
                error!("{prefix} - TLS leafnode handshake error: {e}");
                Some(Ended::Closed)
            }
        },
    }
}

/// The first line the hub sends (its INFO), read byte by byte so that
/// nothing after it (the TLS handshake) is taken from the socket.
async fn first_line(stream: &mut TcpStream) -> Result<BytesMut, String> {
    let mut line = BytesMut::with_capacity(1024);
    let mut byte = [0u8; 1];
    while !line.ends_with(b"\r\n") {
        if line.len() >= MAX_CONTROL_LINE {
            return Err("the hub's first line is too long".into());
        }
        match stream.read(&mut byte).await {
            Ok(1) => line.extend_from_slice(&byte),
            Ok(_) => return Err("the hub closed the connection".into()),
            Err(e) => return Err(e.to_string()),
        }
    }
    Ok(line)
}

/// Whether the hub's first line is an INFO that asks for TLS.
fn tls_required(line: &[u8]) -> bool {
    let json = line
        .get(..5)
        .filter(|verb| verb.eq_ignore_ascii_case(b"INFO "))
        .and_then(|_| line.get(5..));
    json.and_then(|json| serde_json::from_slice::<LeafInfo>(json.trim_ascii()).ok())
        .is_some_and(|info| info.tls_required)
}

/// Serves one connection accepted on the leaf node port: INFO goes out
/// in the clear, then, with `tls {}`, the handshake comes before the
/// leaf's CONNECT (nats-server's order without `handshake_first`).
/// Accepts leaf node connections on `listener` until the server stops
/// accepting.
pub async fn accept_all(server: Arc<Server>, listener: tokio::net::TcpListener) {
    let stop = server.accepting_stopped();
    flotilla_core::conn::accept_until(listener, stop, "Leafnode", |stream, addr| {
        tokio::spawn(accept(server.clone(), stream, addr));
    })
    .await;
}

pub async fn accept(server: Arc<Server>, mut stream: TcpStream, addr: SocketAddr) {
    let _ = stream.set_nodelay(true);
    let opts = server.opts();
    let client = Arc::new(Client::new_leaf(
        server.next_cid(),
        addr,
        LeafRole::Accepted,
    ));
    let nonce = auth::nonce();
    let info = hub_info(&server, &client, &nonce);
    let mut greeting = BytesMut::new();
    encode::info(
        &mut greeting,
        &serde_json::to_vec(&info).expect("info serializes"),
    );
    let mut start = Start {
        dial: None,
        nonce: Some(nonce),
        greeting: None,
        read: BytesMut::new(),
    };
    let (Some(tls), Some(config)) = (&opts.leafnodes.tls, server.leaf_tls()) else {
        start.greeting = Some(greeting);
        let (rd, wr) = stream.into_split();
        serve(server, client, rd, wr, start).await;
        return;
    };
    if stream.write_all(&greeting).await.is_err() {
        return;
    }
    match auth::tls::accept(config, stream, tls).await {
        Ok(stream) => {
            let (rd, wr) = tokio::io::split(stream);
            serve(server, client, rd, wr, start).await;
        }
        Err(e) => error!(
            "{} - TLS leafnode handshake error: {e}",
            leaf_prefix(&client)
        ),
    }
}

/// How a connection starts, by side.
struct Start {
    /// Set on the dialing side.
    dial: Option<Dial>,
    /// The accepting side's INFO nonce.
    nonce: Option<String>,
    /// What to send first, if not sent already (the hub's INFO).
    greeting: Option<BytesMut>,
    /// What was read already (the hub's INFO, on the dialing side).
    read: BytesMut,
}

async fn serve<R, W>(server: Arc<Server>, client: Arc<Client>, rd: R, wr: W, start: Start) -> Ended
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let opts = server.opts();
    let writer = writer::start(
        server.clone(),
        client.clone(),
        wr,
        opts.write_deadline,
        |b| {
            if let Some(greeting) = &start.greeting {
                b.extend_from_slice(greeting);
            }
        },
    );
    let mut conn = LeafConn {
        delivery: Delivery::for_peer(server.clone(), &client, opts.max_pending),
        server: server.clone(),
        client: client.clone(),
        dial: start.dial,
        nonce: start.nonce,
        leaf: None,
        pings_out: 0,
        ping_sent: None,
        loop_found: false,
    };
    let reason = conn.read_loop(rd, start.read).await;
    client.close(reason);
    let reason = client.closed_reason().unwrap_or(reason);
    let name = conn.leaf.as_ref().map(|l| l.remote_name.clone());
    if let Some(leaf) = conn.leaf.take() {
        forget(&server, &leaf);
    }
    info!(
        "{} - Leafnode connection closed: {}{}",
        leaf_prefix(&client),
        reason.as_str(),
        name.map(|n| format!(" - Remote: {n}")).unwrap_or_default()
    );
    let _ = writer.await;
    match conn.loop_found {
        true => Ended::Loop,
        false => Ended::Closed,
    }
}

/// Deregisters a closed connection and withdraws the interest it told.
fn forget(server: &Server, leaf: &Leaf) {
    server.leafs.deregister(leaf);
    if let Some(events) = server.events.get() {
        events.leaf_closed(&leaf.client, &leaf.account.name);
    }
    let subs: Vec<Arc<Subscription>> = std::mem::take(&mut *leaf.subs.lock())
        .into_values()
        .collect();
    for sub in &subs {
        server.remove_remote_interest(sub);
    }
}

/// The INFO a hub sends a leaf node that has just connected.
fn hub_info(server: &Server, client: &Client, nonce: &str) -> LeafInfo {
    let opts = server.opts();
    let leafnodes = &opts.leafnodes;
    let host = leafnodes.host.clone().unwrap_or_else(|| "0.0.0.0".into());
    let port = server.leafs.port.load(Ordering::Relaxed) as u16;
    let advertised = leafnodes
        .advertise
        .clone()
        .unwrap_or_else(|| format!("{host}:{port}"));
    LeafInfo {
        server_id: server.id.clone(),
        server_name: server.name.clone(),
        version: protocol::NATS_VERSION.to_string(),
        proto: 1,
        host,
        port,
        headers: true,
        auth_required: true,
        tls_required: leafnodes.tls.is_some(),
        max_payload: opts.max_payload as i64,
        info_on_connect: true,
        leafnode_urls: vec![advertised],
        client_id: client.cid,
        nonce: nonce.to_string(),
        compression: "off".into(),
        cluster: cluster_name(server),
        domain: opts.jetstream.domain.clone().unwrap_or_default(),
        ..Default::default()
    }
}

/// The cluster name this server gives a leaf node peer: its cluster's,
/// when it has routes; none otherwise (nats-server refuses a leaf node
/// of its own cluster, and two standalone servers are not one).
fn cluster_name(server: &Server) -> String {
    match server.opts().cluster.enabled() {
        true => server.routes.cluster_name().0,
        false => String::new(),
    }
}

/// `ip:port - lid:N`, nats-server's prefix for leaf node log lines.
fn leaf_prefix(c: &Client) -> String {
    format!("{} - lid:{}", c.addr, c.cid)
}

struct LeafConn {
    server: Arc<Server>,
    client: Arc<Client>,
    /// Set on the dialing side.
    dial: Option<Dial>,
    /// The accepting side's INFO nonce.
    nonce: Option<String>,
    /// Once the handshake is through.
    leaf: Option<Arc<Leaf>>,
    pings_out: u32,
    /// When the oldest unanswered PING went out, for the round trip.
    ping_sent: Option<std::time::Instant>,
    loop_found: bool,
    delivery: Delivery,
}

impl LeafConn {
    /// Reads and handles what the peer sends, `buf` first (what was
    /// read before the connection was handed over).
    async fn read_loop<R: AsyncRead + Unpin>(
        &mut self,
        mut rd: R,
        mut buf: BytesMut,
    ) -> ClosedState {
        buf.reserve(64 * 1024);
        let ping = self.server.opts().ping_interval.min(LEAF_PING);
        let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + ping, ping);
        let handshake = match &self.dial {
            Some(_) => FIRST_INFO_WAIT,
            None => {
                let opts = self.server.opts();
                opts.leafnodes
                    .auth_timeout
                    .unwrap_or_else(|| opts.auth_timeout())
            }
        };
        let deadline = tokio::time::sleep(handshake);
        tokio::pin!(deadline);
        let mut shutdown = self.server.shutdown_signal();
        let client = self.client.clone();
        if let Err(reason) = self.process(&mut buf) {
            return reason;
        }
        loop {
            tokio::select! {
                read = rd.read_buf(&mut buf) => match read {
                    Ok(0) => return ClosedState::ClientClosed,
                    Ok(_) => {}
                    Err(_) => return ClosedState::ReadError,
                },
                _ = client.killed() => return ClosedState::ClientClosed,
                _ = shutdown.changed() => return ClosedState::ServerShutdown,
                _ = &mut deadline, if self.leaf.is_none() => {
                    if self.dial.is_none() {
                        self.send(|b| encode::err(b, "Authentication Timeout"));
                    }
                    return ClosedState::AuthenticationTimeout;
                }
                _ = ticker.tick(), if self.leaf.is_some() => {
                    if self.pings_out >= STALE_PINGS {
                        return ClosedState::StaleConnection;
                    }
                    self.ping();
                    continue;
                }
            }
            let r = self.process(&mut buf);
            self.delivery.finish();
            if let Err(reason) = r {
                return reason;
            }
            if buf.capacity() - buf.len() < 4096 {
                buf.reserve(64 * 1024);
            }
        }
    }

    fn process(&mut self, buf: &mut BytesMut) -> Result<(), ClosedState> {
        loop {
            let (result, used) = match rp::parse_as(Dialect::Leaf, &buf[..], MAX_CONTROL_LINE) {
                Ok(None) => return Ok(()),
                Ok(Some((op, n))) => (self.handle(op), n),
                Err(e) => {
                    error!(
                        "{} - Leafnode protocol error: {e}",
                        leaf_prefix(&self.client)
                    );
                    self.send(|b| encode::err(b, "Unknown Protocol Operation"));
                    return Err(ClosedState::ParseError);
                }
            };
            buf.advance(used);
            result?;
        }
    }

    fn ping(&mut self) {
        self.pings_out += 1;
        self.ping_sent.get_or_insert_with(std::time::Instant::now);
        self.send(|b| b.extend_from_slice(encode::PING));
    }

    fn send(&self, f: impl FnOnce(&mut BytesMut)) {
        self.client.out.push(usize::MAX, None, f);
        self.client.out.flush();
    }

    fn handle(&mut self, op: RouteOp<'_>) -> Result<(), ClosedState> {
        if self.leaf.is_none() {
            return self.handshake(op);
        }
        match op {
            RouteOp::Ping => self.send(|b| b.extend_from_slice(encode::PONG)),
            RouteOp::Pong => {
                self.pings_out = 0;
                if let Some(sent) = self.ping_sent.take() {
                    let nanos = sent.elapsed().as_nanos().min(u64::MAX as u128) as u64;
                    self.client.rtt.store(nanos.max(1), Ordering::Relaxed);
                }
            }
            // The hub's INFO after CONNECT, and later updates.
            RouteOp::Info(_) | RouteOp::Ok | RouteOp::Ignored => {}
            RouteOp::Err(text) => return Err(self.peer_error(text)),
            RouteOp::Sub {
                subject,
                queue,
                weight,
                ..
            } => return self.remote_sub(subject, queue, weight),
            RouteOp::Unsub { subject, queue, .. } => self.remote_unsub(subject, queue),
            RouteOp::Msg(m) => self.routed(&m),
            RouteOp::Connect(_) | RouteOp::Raft(_) => return Err(ClosedState::ProtocolViolation),
        }
        Ok(())
    }

    /// Before registration: the hub takes only CONNECT, the leaf waits for
    /// the hub's INFO.
    fn handshake(&mut self, op: RouteOp<'_>) -> Result<(), ClosedState> {
        match (op, self.dial.is_some()) {
            (RouteOp::Connect(json), false) => self.connect(json),
            (RouteOp::Info(json), true) => self.hub_said_hello(json),
            (RouteOp::Err(text), _) => Err(self.peer_error(text)),
            (RouteOp::Ping, true) => {
                self.send(|b| b.extend_from_slice(encode::PONG));
                Ok(())
            }
            (_, true) => Ok(()),
            (_, false) => {
                self.send(|b| encode::err(b, "Authorization Violation"));
                Err(ClosedState::AuthenticationViolation)
            }
        }
    }

    fn peer_error(&mut self, text: &[u8]) -> ClosedState {
        let text = String::from_utf8_lossy(text);
        if text.contains(LOOP_DETECTED) {
            self.loop_found = true;
        }
        error!("{} - Leafnode Error {text}", leaf_prefix(&self.client));
        ClosedState::ParseError
    }

    /// The hub's side of CONNECT: who the leaf is, and which account it
    /// is bound to.
    fn connect(&mut self, json: &[u8]) -> Result<(), ClosedState> {
        let prefix = leaf_prefix(&self.client);
        let connect: LeafConnect = match serde_json::from_slice(json) {
            Ok(c) => c,
            Err(e) => {
                error!("{prefix} - invalid leafnode CONNECT: {e}");
                self.send(|b| encode::err(b, "invalid CONNECT"));
                return Err(ClosedState::ProtocolViolation);
            }
        };
        if connect.lang.is_some() || connect.gateway.is_some() {
            self.send(|b| encode::err(b, "attempted to connect to leaf node port"));
            return Err(ClosedState::ProtocolViolation);
        }
        let Some(account) = self.authorize(&connect) else {
            error!("{prefix} - authentication error");
            self.send(|b| encode::err(b, "Authorization Violation"));
            return Err(ClosedState::AuthenticationViolation);
        };
        // The account's `limits { max_leafnodes }`, on this server.
        let limit = account.limits().max_leafnodes;
        let bound = || {
            let leafs = self.server.leafs.all();
            leafs
                .iter()
                .filter(|l| Arc::ptr_eq(&l.account, &account))
                .count() as i64
        };
        if limit >= 0 && bound() >= limit {
            error!("{prefix} - maximum account active connections exceeded");
            self.send(|b| encode::err(b, "maximum account active connections exceeded"));
            return Err(ClosedState::MaxAccountConnectionsExceeded);
        }
        let ours = cluster_name(&self.server);
        if !ours.is_empty() && connect.cluster == ours {
            self.send(|b| encode::err(b, "remote leafnode has same cluster name"));
            return Err(ClosedState::ProtocolViolation);
        }
        self.client
            .headers
            .store(connect.headers, Ordering::Relaxed);
        if !connect.deny_pub.is_empty() {
            // Before registration: nothing has gone out to it yet.
            let deny = leaf::Deny::new(&[], &connect.deny_pub);
            let _ = self.client.leaf_deny.set(deny);
        }
        let info = LeafInfo {
            server_id: self.server.id.clone(),
            connect_info: true,
            remote_account: account.name.clone(),
            client_id: self.client.cid,
            ..Default::default()
        };
        let json = serde_json::to_vec(&info).expect("info serializes");
        self.send(|b| encode::info(b, &json));
        let name = if connect.name.is_empty() {
            connect.id.clone()
        } else {
            connect.name.clone()
        };
        self.register(account, name);
        Ok(())
    }

    /// The account a leaf's credentials bind it to, as nats-server's
    /// `isLeafNodeAuthorized`: the leaf node block's user or users when
    /// set, else the client authorization; `None` refuses it.
    fn authorize(&self, connect: &LeafConnect) -> Option<Arc<Account>> {
        let opts = self.server.opts();
        let leafnodes = &opts.leafnodes;
        let accounts = &self.server.accounts;
        let bound = |name: Option<&String>| match name {
            Some(name) => accounts.ensure(name),
            None => accounts.global().clone(),
        };
        let presented_pass = connect.pass.as_deref().unwrap_or("");
        if let Some(user) = &leafnodes.user {
            let pass = leafnodes.password.as_deref().unwrap_or("");
            let ok = connect.user.as_deref() == Some(user.as_str())
                && auth::secret_matches(pass, presented_pass);
            return ok.then(|| bound(leafnodes.account.as_ref()));
        }
        if let Some(key) = &leafnodes.nkey {
            let nonce = self.nonce.as_deref().unwrap_or("");
            let ok = connect.nkey.as_deref() == Some(key.as_str())
                && auth::signed(key, nonce, connect.sig.as_deref().unwrap_or(""));
            return ok.then(|| bound(leafnodes.account.as_ref()));
        }
        if !leafnodes.users.is_empty() {
            let user = leafnodes
                .users
                .iter()
                .find(|u| connect.user.as_deref() == Some(u.user.as_str()))?;
            return auth::secret_matches(&user.password, presented_pass)
                .then(|| bound(user.account.as_ref()));
        }
        if let Some(trust) = self.server.trust() {
            return self.authorize_jwt(&trust, connect);
        }
        if !opts.authorization.required() {
            return Some(accounts.global().clone());
        }
        let creds = Credentials {
            user: connect.user.clone(),
            pass: connect.pass.clone(),
            auth_token: connect.auth_token.clone(),
            nkey: connect.nkey.clone(),
            sig: connect.sig.clone(),
            nonce: self.nonce.clone(),
            ..Default::default()
        };
        let identity = auth::check(&opts.authorization, &creds).ok()?;
        Some(bound(
            identity
                .and_then(|i| i.account.map(str::to_string))
                .as_ref(),
        ))
    }

    /// Operator mode: the leaf's user JWT, signed by a trusted account,
    /// and its signature of the nonce bind it to that account. A user
    /// with permissions is refused: flotilla does not hold leaf
    /// connections to them yet, and would let through what they deny.
    fn authorize_jwt(
        &self,
        trust: &auth::operator::Trust,
        connect: &LeafConnect,
    ) -> Option<Arc<Account>> {
        let prefix = leaf_prefix(&self.client);
        let now = auth::operator::unix_now();
        let nonce = self.nonce.as_deref();
        match trust.authenticate(connect.jwt.as_deref(), connect.sig.as_deref(), nonce, now) {
            Ok(user) if user.permissions.is_some() => {
                error!("{prefix} - leafnode user {} has permissions, which flotilla does not apply to leaf connections; refused", user.key);
                None
            }
            Ok(user) => {
                let leafs = self.server.leafs.all();
                let held = leafs
                    .iter()
                    .filter(|l| l.account.name == user.account)
                    .count();
                let limit = user.limits.account_leafs;
                if limit >= 0 && held as i64 >= limit {
                    // nats-server's words (its JWT's `leaf` limit, 0 when
                    // absent).
                    error!("{prefix} - maximum account active connections exceeded");
                    return None;
                }
                Some(self.server.accounts.ensure(&user.account))
            }
            Err(why) => {
                error!("{prefix} - leafnode authentication error: {why}");
                None
            }
        }
    }

    /// The leaf's side: the hub's first INFO, answered with CONNECT.
    fn hub_said_hello(&mut self, json: &[u8]) -> Result<(), ClosedState> {
        let prefix = leaf_prefix(&self.client);
        let info: LeafInfo = match serde_json::from_slice(json) {
            Ok(i) => i,
            Err(e) => {
                error!("{prefix} - invalid leafnode INFO: {e}");
                return Err(ClosedState::ProtocolViolation);
            }
        };
        if info.client_id == 0 || info.leafnode_urls.is_empty() {
            // A client or route port: nats-server's ErrConnectedToWrongPort.
            error!("{prefix} - attempted to connect to a port that is not for leaf nodes");
            return Err(ClosedState::ProtocolViolation);
        }
        let dial = self.dial.as_ref().expect("the dialing side");
        let proof = match dial.prove(&info.nonce) {
            Ok(proof) => proof,
            Err(why) => {
                error!("{prefix} - {why}");
                return Err(ClosedState::AuthenticationViolation);
            }
        };
        let account = dial.account.clone();
        let connect = self.leaf_connect(dial, proof);
        let json = serde_json::to_vec(&connect).expect("connect serializes");
        self.send(|b| {
            b.extend_from_slice(b"CONNECT ");
            b.extend_from_slice(&json);
            b.extend_from_slice(b"\r\n");
        });
        self.client.headers.store(info.headers, Ordering::Relaxed);
        let name = if info.server_name.is_empty() {
            info.server_id.clone()
        } else {
            info.server_name.clone()
        };
        self.register(account, name);
        Ok(())
    }

    /// The leaf's CONNECT: who this server is, how it proved itself,
    /// and what it will not take.
    fn leaf_connect(&self, dial: &Dial, proof: auth::Proof) -> LeafConnect {
        let opts = self.server.opts();
        // The hub holds back what this side will not take.
        let deny_pub = self.client.leaf_deny.get().map(|d| {
            d.imports
                .iter()
                .map(|s| String::from_utf8_lossy(s).into_owned())
                .collect()
        });
        LeafConnect {
            version: protocol::NATS_VERSION.to_string(),
            user: dial.user.clone(),
            pass: dial.pass.clone(),
            jwt: proof.jwt,
            nkey: proof.nkey,
            sig: proof.sig,
            deny_pub: deny_pub.unwrap_or_default(),
            id: self.server.id.clone(),
            name: self.server.name.clone(),
            cluster: cluster_name(&self.server),
            headers: true,
            compression: "off".into(),
            remote_account: dial.account.name.clone(),
            domain: opts.jetstream.domain.clone().unwrap_or_default(),
            proto: 1,
            ..Default::default()
        }
    }

    fn register(&mut self, account: Arc<Account>, name: String) {
        let role = self.client.leaf.expect("a leaf connection");
        let leaf = Arc::new(Leaf::new(self.client.clone(), role, account, name));
        info!(
            "{} - Leafnode connection registered: {} (account {})",
            leaf_prefix(&self.client),
            leaf.remote_name,
            leaf.account.name
        );
        self.server.leafs.register(leaf.clone());
        if let Some(events) = self.server.events.get() {
            events.leaf_connected(&self.client, &leaf.account.name);
        }
        self.leaf = Some(leaf);
        self.ping();
    }

    fn remote_sub(
        &mut self,
        subject: &[u8],
        queue: Option<&[u8]>,
        weight: u32,
    ) -> Result<(), ClosedState> {
        let leaf = self.leaf.clone().expect("registered");
        if subject == &self.server.leafs.loop_subject(&leaf.account)[..] {
            let text = format!(
                "{LOOP_DETECTED} for leafnode account=\"{}\". Delaying attempt to reconnect for {}s",
                leaf.account.name,
                LOOP_DELAY.as_secs()
            );
            warn!("{} - {text}", leaf_prefix(&self.client));
            self.send(|b| encode::err(b, &text));
            self.loop_found = true;
            return Err(ClosedState::ProtocolViolation);
        }
        if leaf::denied(subject) {
            debug!(
                "{} - not taking interest in {:?} (JetStream API)",
                leaf_prefix(&self.client),
                String::from_utf8_lossy(subject)
            );
            return Ok(());
        }
        let key = (
            Bytes::copy_from_slice(subject),
            queue.map(Bytes::copy_from_slice),
        );
        // Only this connection's task changes its map: no lock is held
        // while the interest is told.
        if let Some(existing) = leaf.subs.lock().get(&key) {
            // A queue group's new member count.
            existing.weight.store(weight.max(1), Ordering::Relaxed);
            return Ok(());
        }
        let added = self.server.add_remote_interest(
            &self.client,
            leaf.account.clone(),
            subject,
            queue,
            weight,
        );
        match added {
            Some(sub) => {
                leaf.subs.lock().insert(key, sub);
            }
            None => debug!(
                "{} - ignoring interest in invalid subject {:?}",
                leaf_prefix(&self.client),
                String::from_utf8_lossy(subject)
            ),
        }
        Ok(())
    }

    fn remote_unsub(&mut self, subject: &[u8], queue: Option<&[u8]>) {
        let leaf = self.leaf.clone().expect("registered");
        let key = (
            Bytes::copy_from_slice(subject),
            queue.map(Bytes::copy_from_slice),
        );
        let removed = leaf.subs.lock().remove(&key);
        if let Some(sub) = removed {
            self.server.remove_remote_interest(&sub);
        }
    }

    /// A message the other side sent: delivered in the connection's
    /// account, on to wherever `Delivery::forwards_to` lets it go.
    fn routed(&mut self, m: &RoutedMsg<'_>) {
        let leaf = self.leaf.clone().expect("registered");
        let c = &self.client;
        c.in_msgs.fetch_add(1, Ordering::Relaxed);
        c.in_bytes
            .fetch_add(m.message.len() as u64, Ordering::Relaxed);
        let stats = &self.server.stats;
        stats.in_msgs.fetch_add(1, Ordering::Relaxed);
        stats
            .in_bytes
            .fetch_add(m.message.len() as u64, Ordering::Relaxed);
        leaf.account
            .stats
            .received
            .add(Peer::Leaf, 1, m.message.len() as u64);
        if leaf::denied(m.subject) || leaf::import_denied(c, m.subject) {
            return;
        }
        // A request to this server's JetStream domain.
        // The account's subject mappings apply to what a leaf node sends
        // as to a client's publish (nats-server's parser maps CLIENT and
        // LEAF messages alike); then the JetStream domain's.
        let remapped = match imports::mapped(&self.server, &leaf.account, m.subject) {
            None => None,
            Some(Mapped::To(to)) => Some(to.into_bytes()),
            Some(Mapped::Dropped) => return,
        };
        let wire = remapped.as_deref().unwrap_or(m.subject);
        let mapped = leaf.account.map(wire);
        let routed = mapped.as_deref().unwrap_or(wire);
        let result = leaf.account.sublist.read().matches(routed);
        let (subject, reply) = match (&remapped, &mapped) {
            (None, None) => delivery::from_route(m.subject, m.reply),
            _ => (routed, m.reply),
        };
        let msg = Message {
            subject,
            routed,
            reply,
            headers: m.headers(),
            payload: m.payload(),
        };
        self.delivery.route_from_peer(&result, msg, &m.queues);
        // A request to a service the account imports goes on to its
        // exporter, as a client's does: the leaf node is the requester.
        // Matched on the subject it was routed on, not one shown after
        // an ack reply's `@` (`delivery::from_route`).
        if leaf.account.imports_services() {
            let server = self.server.clone();
            let asked = Message {
                subject: routed,
                ..msg
            };
            imports::request(&mut self.delivery, &server, &leaf.account, c, asked);
        }
    }
}
