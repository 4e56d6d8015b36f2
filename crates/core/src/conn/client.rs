//! One client connection's reader: reads, parses, and acts on each
//! operation. Publishes are routed here, on the publisher's task: the
//! message is appended to every matching subscriber's outbound buffer and
//! the writers are woken once per read, not once per message.

use std::net::SocketAddr;
use std::pin::pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use protocol::{encode, ClientOp, ClientOptions, ConnectInfo, ParseError, Parsed, Parser, Publish};
use subjects::MatchCache;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tracing::{debug, error};

use super::delivery::{self, Delivery};
use super::writer;
use crate::account::mappings::Mapped;
use crate::account::stats::Peer;
use crate::client::outbound::Push;
use crate::client::Account;
use crate::client::{Client, ClosedState, Message, Subscription};
use crate::server::Server;
use auth::permissions::Permits;
use auth::tls::CertIdentity;
use auth::{self, Credentials};
use config::options::{Options, Permissions};

/// Read sizes adapt between these: small for idle connections, large for
/// busy ones (nats-server does the same).
const MIN_READ: usize = 512;
const MAX_READ: usize = 64 * 1024;
/// Publish permission answers a connection remembers, by subject (as
/// nats-server's `maxPermCacheSize`).
const MAX_PERMIT_CACHE: usize = 128;
/// After CONNECT the first PING goes out this soon (or at the ping
/// interval if that is shorter), to measure the round trip early.
const FIRST_PING: Duration = Duration::from_secs(2);
/// A measured round trip is refreshed this often.
const RTT_REFRESH: Duration = Duration::from_secs(3600);

/// Runs a connection from accept to close: over TLS when the server
/// requires it, the handshake coming after the plain-text INFO, or
/// before it with `handshake_first`.
pub async fn serve(server: Arc<Server>, mut stream: TcpStream, addr: SocketAddr, cid: u64) {
    let _ = stream.set_nodelay(true);
    let opts = server.opts();
    let (mut greeting, nonce) = info_for(&server, server.info(), cid, addr);

    let (Some(tls), Some(config)) = (&opts.tls, server.tls()) else {
        let (rd, wr) = stream.into_split();
        let greet = Greeting {
            nonce,
            cert: None,
            bytes: greeting,
            cookies: None,
            websocket: false,
        };
        run(server, cid, addr, greet, rd, wr).await;
        return;
    };
    if !tls.handshake_first || silent_for(&stream, tls.handshake_first_fallback).await {
        // The client reads INFO, sees tls_required, and starts the
        // handshake; what follows is encrypted.
        if stream.write_all(&greeting).await.is_err() {
            return;
        }
        greeting.clear();
    }
    match auth::tls::accept(config, stream, tls).await {
        Ok(stream) => {
            let cert = tls.map.then(|| CertIdentity::of(&stream)).flatten();
            let (rd, wr) = tokio::io::split(stream);
            let greet = Greeting {
                nonce,
                cert,
                bytes: greeting,
                cookies: None,
                websocket: false,
            };
            run(server, cid, addr, greet, rd, wr).await;
        }
        // Nothing can be said to a client that does not speak TLS: the
        // log says why it was closed.
        Err(reason) => error!("{addr} - cid:{cid} - {reason}"),
    }
}

/// INFO's bytes for connection `cid` from `addr`, made from `info` (the
/// client port's, or the WebSocket listener's), with a nonce to sign
/// when nkey or JWT users may connect; and that nonce.
pub fn info_for(
    server: &Server,
    mut info: protocol::ServerInfo,
    cid: u64,
    addr: SocketAddr,
) -> (BytesMut, Option<String>) {
    let opts = server.opts();
    info.client_id = Some(cid);
    info.client_ip = Some(addr.ip().to_string());
    if !opts.authorization.nkeys.is_empty() || opts.authorization.operator.is_some() {
        info.nonce = Some(auth::nonce());
    }
    let mut bytes = BytesMut::new();
    encode::info(
        &mut bytes,
        &serde_json::to_vec(&info).expect("info serializes"),
    );
    (bytes, info.nonce)
}

/// Whether a client sends nothing for `fallback` (TLS first with a
/// fallback): it waits for INFO, so it gets INFO first. Without a
/// fallback, TLS first waits for the client however long it takes (up to
/// the TLS timeout).
async fn silent_for(stream: &TcpStream, fallback: Option<Duration>) -> bool {
    let Some(delay) = fallback else {
        return false;
    };
    let mut first = [0u8; 1];
    tokio::time::timeout(delay, stream.peek(&mut first))
        .await
        .is_err()
}

/// What a connection starts with: INFO's bytes (unless they went out
/// before a TLS handshake), its nonce, and its TLS certificate's names.
pub struct Greeting {
    pub bytes: BytesMut,
    pub nonce: Option<String>,
    pub cert: Option<CertIdentity>,
    /// A WebSocket client's upgrade cookies named in the config.
    pub cookies: Option<CookieValues>,
    /// It came in over WebSocket.
    pub websocket: bool,
}

/// The connection proper, on whatever stream it has, greeting first.
/// Returns why it closed, once its writer has written all it will (a
/// WebSocket connection then sends the matching close frame).
pub async fn run<R, W>(
    server: Arc<Server>,
    cid: u64,
    addr: SocketAddr,
    greeting: Greeting,
    rd: R,
    wr: W,
) -> ClosedState
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let opts = server.opts();
    let mut client = Client::new(cid, addr);
    client.websocket = greeting.websocket;
    let client = Arc::new(client);
    let writer = writer::start(
        server.clone(),
        client.clone(),
        wr,
        opts.write_deadline,
        |b| b.extend_from_slice(&greeting.bytes),
    );

    if let Err(reason) = server.register(&client, opts.max_connections) {
        if reason == ClosedState::MaxConnectionsExceeded {
            error!("{} - maximum connections exceeded", client.log_prefix());
            client.out.push(usize::MAX, None, |b| {
                encode::err(b, "maximum connections exceeded")
            });
        }
        client.close(reason);
        let _ = writer.await;
        return reason;
    }
    debug!("{} - Client connection created", client.log_prefix());

    let mut conn = Conn::new(server.clone(), client.clone(), &opts);
    conn.nonce = greeting.nonce;
    conn.cert = greeting.cert;
    conn.cookies = greeting.cookies;
    let reason = conn.run(rd).await;
    client.close(reason);
    let reason = client.closed_reason().unwrap_or(reason);
    debug!(
        "{} - Client connection closed: {}",
        client.log_prefix(),
        reason.as_str()
    );
    server.deregister(&client);
    let _ = writer.await;
    reason
}

struct Conn {
    server: Arc<Server>,
    client: Arc<Client>,
    /// Kept whole because auth checks and reload-sensitive values come from
    /// the options in force when the connection started.
    config: Arc<Options>,
    parser: Parser,
    opts: ClientOptions,
    connected: bool,
    auth_required: bool,
    pings_out: u32,
    rtt_start: Option<Instant>,
    last_in: Instant,
    first_pong_sent: bool,
    /// Whose subjects this client publishes and subscribes to: `$G`
    /// until CONNECT names a user of another account.
    account: Arc<Account>,
    /// Matches in `account`'s trie.
    cache: MatchCache<Arc<Subscription>>,
    delivery: Delivery,
    batch: Batch,
    /// The ping timer should fire early (CONNECT was just processed).
    rearm_ping: Option<Duration>,
    /// What the user may publish and subscribe to; `None` is everything.
    /// A copy of the client's, taken again when its version moves (a
    /// reload).
    permits: Option<Arc<Permits>>,
    permits_version: u64,
    /// The challenge in this connection's INFO, for nkey users to sign.
    nonce: Option<String>,
    /// What a user JWT limits, in operator mode.
    jwt: Option<JwtSession>,
    /// Subscriptions it may hold, the least of its user's and its
    /// account's limits; -1: no limit.
    max_subs: i64,
    /// The largest payload it may publish: the least of the server's,
    /// its user's and its account's.
    max_payload: usize,
    /// Who the TLS client certificate names (`verify_and_map`).
    cert: Option<CertIdentity>,
    /// A WebSocket client's upgrade cookies named in the config.
    cookies: Option<CookieValues>,
    /// `permits`' publish answers by subject, at most
    /// [`MAX_PERMIT_CACHE`].
    publish_permitted: hashbrown::HashMap<Box<[u8]>, bool>,
}

/// A JWT user's session limits.
struct JwtSession {
    /// Unix seconds when its user (or account) JWT expires.
    expires: Option<i64>,
}

/// Counters gathered over one read and published at its end, so shared
/// atomics are touched once per read instead of once per message.
#[derive(Default)]
struct Batch {
    in_msgs: u64,
    in_bytes: u64,
    /// A PUB, SUB or UNSUB was seen: counts as activity for the ping timer
    /// and for `last_activity`.
    active: bool,
}

impl Conn {
    fn new(server: Arc<Server>, client: Arc<Client>, config: &Arc<Options>) -> Self {
        let account = server.accounts.global().clone();
        let joined = client.set_account(account.clone(), -1);
        debug_assert!(joined, "no limit refuses nobody");
        let generation = account.sublist.read().generation();
        let delivery = Delivery::new(server.clone(), client.cid, config.max_pending);
        Conn {
            account,
            parser: Parser::new(config.max_control_line, config.max_payload),
            auth_required: config.client_authorization(client.websocket).required(),
            config: config.clone(),
            server,
            client,
            opts: ClientOptions::default(),
            connected: false,
            pings_out: 0,
            rtt_start: None,
            last_in: Instant::now(),
            first_pong_sent: false,
            cache: MatchCache::new(generation),
            delivery,
            batch: Batch::default(),
            rearm_ping: None,
            permits: None,
            permits_version: 0,
            nonce: None,
            jwt: None,
            max_subs: -1,
            max_payload: config.max_payload,
            cert: None,
            cookies: None,
            publish_permitted: hashbrown::HashMap::new(),
        }
    }

    /// Operator mode's CONNECT: the user JWT and the nonce's signature
    /// (`operator::Trust::authenticate`), then the user's permissions,
    /// account and limits. Returns the user's public key.
    fn operator_connect(
        &mut self,
        trust: &auth::operator::Trust,
        creds: &Credentials,
    ) -> Result<String, ClosedState> {
        let prefix = self.client.log_prefix();
        let now = auth::operator::unix_now();
        let user = match trust.authenticate(
            creds.jwt.as_deref(),
            creds.sig.as_deref(),
            creds.nonce.as_deref(),
            now,
        ) {
            Ok(user) => user,
            Err(why) => {
                error!("{prefix} - authentication error: {why}");
                self.send_err("Authorization Violation");
                return Err(ClosedState::AuthenticationViolation);
            }
        };
        self.set_permits(user.permissions.as_ref());
        let account = self.server.accounts.ensure(&user.account);
        self.join_account(account, user.limits.account_conns)?;
        self.jwt = Some(JwtSession {
            expires: user.expires,
        });
        self.apply_limits(user.limits.subs, user.limits.payload);
        Ok(user.key)
    }

    /// Moves this client into `account` at CONNECT (it holds no
    /// subscriptions yet: with users configured, nothing comes before
    /// CONNECT), unless the account holds `limit` clients already, or as
    /// many as its `limits` block allows.
    fn join_account(&mut self, account: Arc<Account>, limit: i64) -> Result<(), ClosedState> {
        debug_assert!(self.client.subs.lock().is_empty());
        let own = account.limits().max_connections;
        let limit = least(limit, own);
        if !self.client.set_account(account.clone(), limit) {
            let prefix = self.client.log_prefix();
            error!("{prefix} - maximum account active connections exceeded");
            self.send_err("maximum account active connections exceeded");
            return Err(ClosedState::MaxAccountConnectionsExceeded);
        }
        self.cache = MatchCache::new(account.sublist.read().generation());
        self.account = account;
        self.apply_limits(-1, -1);
        Ok(())
    }

    /// The subscription and payload limits of this connection: the least
    /// of the server's, its user's (`subs`, `payload`; -1: none) and its
    /// account's (nats-server's `applyAccountLimits`).
    fn apply_limits(&mut self, subs: i64, payload: i64) {
        let account = self.account.limits();
        self.max_subs = least(least(self.max_subs, subs), account.max_subscriptions);
        let payload = least(payload, account.max_payload);
        if payload >= 0 {
            self.max_payload = (payload as usize).min(self.max_payload);
            self.parser.set_max_payload(self.max_payload);
        }
    }

    async fn run<R: AsyncRead + Unpin>(&mut self, mut rd: R) -> ClosedState {
        let mut buf = BytesMut::with_capacity(MIN_READ);
        let mut read_size = MIN_READ;
        let ping_interval = self.config.client_ping_interval(self.client.websocket);
        let mut ping = pin!(tokio::time::sleep(ping_interval));
        let auth_timer = tokio::time::sleep(self.config.client_auth_timeout(self.client.websocket));
        let mut auth_timer = pin!(auth_timer);
        let client = self.client.clone();
        loop {
            if buf.capacity() - buf.len() < read_size {
                buf.reserve(read_size);
            }
            tokio::select! {
                biased;
                _ = client.killed() => {
                    return client.closed_reason().unwrap_or(ClosedState::ServerShutdown);
                }
                // Reads are capped, not just sized: one read is one batch of
                // deliveries between stall checks, so it bounds how far a
                // subscriber can overshoot before its publisher pauses.
                r = async { rd.read_buf(&mut (&mut buf).limit(read_size)).await } => match r {
                    Ok(0) => return ClosedState::ClientClosed,
                    Ok(n) => {
                        if n >= read_size && read_size < MAX_READ {
                            read_size *= 2;
                        } else if n < read_size / 4 && read_size > MIN_READ {
                            read_size /= 2;
                        }
                        let result = self.process(&mut buf);
                        if buf.is_empty() && buf.capacity() > 2 * read_size {
                            buf = BytesMut::with_capacity(read_size);
                        }
                        if let Err(reason) = result {
                            return reason;
                        }
                        self.delivery.stall().await;
                        if let Some(d) = self.rearm_ping.take() {
                            ping.as_mut().reset(tokio::time::Instant::now() + d);
                        }
                    }
                    Err(_) => return ClosedState::ReadError,
                },
                _ = &mut ping => {
                    if let Err(reason) = self.ping_timer() {
                        return reason;
                    }
                    ping.as_mut().reset(tokio::time::Instant::now() + ping_interval);
                }
                _ = &mut auth_timer, if self.auth_required && !self.connected => {
                    debug!("{} - Authentication Timeout", self.client.log_prefix());
                    self.send_err("Authentication Timeout");
                    return ClosedState::AuthenticationTimeout;
                }
            }
        }
    }

    /// Handles every complete operation in `buf` and drops them from it.
    fn process(&mut self, buf: &mut BytesMut) -> Result<(), ClosedState> {
        let mut pos = 0;
        let result = loop {
            match self.parser.parse(&buf[pos..]) {
                Ok(Parsed::Op(op, n)) => {
                    pos += n;
                    if let Err(reason) = self.handle(op) {
                        break Err(reason);
                    }
                }
                Ok(Parsed::Skipped(n)) => pos += n,
                // The buffer grows as bytes arrive, not by the declared
                // size: a client may declare max_payload and send nothing.
                Ok(Parsed::Incomplete { .. }) => break Ok(()),
                Err(e) => break Err(self.parse_error(e, &buf[pos..])),
            }
        };
        buf.advance(pos);
        self.end_batch();
        result
    }

    /// Publishes what one read produced: counters, wake-ups, removals.
    fn end_batch(&mut self) {
        let b = std::mem::take(&mut self.batch);
        if b.in_msgs > 0 {
            let stats = &self.server.stats;
            self.client.in_msgs.fetch_add(b.in_msgs, Ordering::Relaxed);
            self.client
                .in_bytes
                .fetch_add(b.in_bytes, Ordering::Relaxed);
            stats.in_msgs.fetch_add(b.in_msgs, Ordering::Relaxed);
            stats.in_bytes.fetch_add(b.in_bytes, Ordering::Relaxed);
            self.account
                .stats
                .received
                .add(Peer::Client, b.in_msgs, b.in_bytes);
        }
        if b.active {
            self.client.touch(SystemTime::now());
            self.last_in = Instant::now();
        }
        self.delivery.finish();
    }

    /// Queues a protocol line for this client itself. Replies count
    /// against max_pending like messages do, so a client that sends PINGs
    /// and never reads is cut off as a slow consumer.
    fn send(&mut self, write: impl FnOnce(&mut BytesMut)) {
        match self.client.out.push(self.config.max_pending, None, write) {
            Push::SlowConsumer => {
                delivery::slow_consumer(&self.server, &self.client, self.config.max_pending)
            }
            Push::Closed => {}
            Push::Queued | Push::QueuedNearLimit => self.delivery.mark_flush(&self.client),
        }
    }

    fn send_err(&mut self, text: &str) {
        self.send(|b| encode::err(b, text));
    }

    fn send_ok(&mut self) {
        if self.opts.verbose {
            self.send(|b| b.extend_from_slice(encode::OK));
        }
    }

    fn parse_error(&mut self, e: ParseError, rest: &[u8]) -> ClosedState {
        let prefix = self.client.log_prefix();
        match e {
            ParseError::UnknownOp => {
                let snip = &rest[..rest.len().min(32)];
                error!(
                    "{prefix} - Client parser ERROR, state=0, i=0: proto='{:?}...'",
                    String::from_utf8_lossy(snip)
                );
                self.send_err("Unknown Protocol Operation");
                ClosedState::ProtocolViolation
            }
            ParseError::ControlLineTooLong { .. } => {
                error!("{prefix} - maximum control line exceeded");
                self.send_err("maximum control line exceeded");
                ClosedState::MaxControlLineExceeded
            }
            ParseError::PayloadTooLarge { size, max } => {
                error!("{prefix} - maximum payload exceeded: {size} vs {max}");
                self.send_err("Maximum Payload Violation");
                ClosedState::MaxPayloadExceeded
            }
            ParseError::HeadersNotSupported => {
                error!("{prefix} - message headers not supported");
                // nats-server closes without a word here; saying why costs
                // nothing and saves a user a packet capture.
                self.send_err("message headers not supported");
                ClosedState::ProtocolViolation
            }
            ParseError::BadArgs { verb, reason, arg } => {
                error!("{prefix} - {verb} {reason}: {arg:?}");
                self.send_err(&format!("{verb} {reason}"));
                ClosedState::ProtocolViolation
            }
        }
    }

    fn handle(&mut self, op: ClientOp<'_>) -> Result<(), ClosedState> {
        if tracing::enabled!(tracing::Level::TRACE) {
            self.trace_op(&op);
        }
        if self.auth_required && !self.connected && !matches!(op, ClientOp::Connect(_)) {
            error!("{} - authentication error", self.client.log_prefix());
            self.send_err("Authorization Violation");
            return Err(ClosedState::AuthenticationViolation);
        }
        match op {
            ClientOp::Pub(p) => {
                self.process_pub(&p);
                Ok(())
            }
            ClientOp::Sub {
                subject,
                queue,
                sid,
            } => {
                self.process_sub(subject, queue, sid);
                Ok(())
            }
            ClientOp::Unsub { sid, max } => {
                self.process_unsub(sid, max);
                Ok(())
            }
            ClientOp::Ping => {
                self.process_ping();
                Ok(())
            }
            ClientOp::Pong => {
                self.pings_out = 0;
                if let Some(t) = self.rtt_start {
                    let rtt = t.elapsed().as_nanos().max(1) as u64;
                    self.client.rtt.store(rtt, Ordering::Relaxed);
                }
                Ok(())
            }
            ClientOp::Connect(json) => self.process_connect(json),
            ClientOp::Info(json) => {
                if serde_json::from_slice::<serde_json::Value>(json).is_err() {
                    error!("{} - invalid INFO from client", self.client.log_prefix());
                    return Err(ClosedState::ProtocolViolation);
                }
                Ok(())
            }
            ClientOp::Ok => Ok(()),
            ClientOp::Err(text) => {
                error!(
                    "{} - Client Error {}",
                    self.client.log_prefix(),
                    String::from_utf8_lossy(text)
                );
                Err(ClosedState::ParseError)
            }
        }
    }

    /// `-V`: each operation as nats-server traces it, `<<- [OP args]`.
    fn trace_op(&self, op: &ClientOp<'_>) {
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        let line = match op {
            ClientOp::Pub(p) => {
                let verb = if p.header_len.is_some() {
                    "HPUB"
                } else {
                    "PUB"
                };
                let reply = p.reply.map(|r| format!(" {}", text(r))).unwrap_or_default();
                format!("{verb} {}{reply} {}", text(p.subject), p.message.len())
            }
            ClientOp::Sub {
                subject,
                queue,
                sid,
            } => {
                let q = queue.map(|q| format!(" {}", text(q))).unwrap_or_default();
                format!("SUB {}{q} {}", text(subject), text(sid))
            }
            ClientOp::Unsub { sid, max } => {
                let m = max.map(|m| format!(" {m}")).unwrap_or_default();
                format!("UNSUB {}{m}", text(sid))
            }
            ClientOp::Ping => "PING".into(),
            ClientOp::Pong => "PONG".into(),
            // CONNECT may carry secrets; nats-server redacts them too.
            ClientOp::Connect(_) => "CONNECT [REDACTED]".into(),
            ClientOp::Info(_) => "INFO".into(),
            ClientOp::Ok => "+OK".into(),
            ClientOp::Err(e) => format!("-ERR {}", text(e)),
        };
        tracing::trace!("{} - <<- [{line}]", self.client.log_prefix());
    }

    fn process_connect(&mut self, json: &[u8]) -> Result<(), ClosedState> {
        let prefix = self.client.log_prefix();
        let mut ci: ConnectInfo = match serde_json::from_slice(json) {
            Ok(ci) => ci,
            Err(e) => {
                error!("{prefix} - invalid CONNECT: {e}");
                self.send_err("invalid CONNECT");
                return Err(ClosedState::ProtocolViolation);
            }
        };
        let first = !self.connected;
        self.connected = true;
        if first {
            let interval = self
                .config
                .client_ping_interval(self.client.websocket)
                .min(FIRST_PING);
            let jitter = interval.mul_f64(fastrand::f64() * 0.2);
            self.rearm_ping = Some(interval + jitter);
        }
        if let Some(cookies) = &self.cookies {
            cookies.fill(&mut ci);
        }
        ci.apply(&mut self.opts);
        let creds = Credentials::new(&ci, self.nonce.as_deref(), self.cert.as_ref());
        let mut user_name = None;
        if self.auth_required {
            // The options in force now, not at accept: a reload may have
            // changed who is allowed in.
            if let Some(trust) = self.server.trust() {
                let user = self.operator_connect(&trust, &creds);
                if user == Err(ClosedState::AuthenticationViolation) {
                    self.auth_failed();
                }
                user_name = Some(user?);
            } else {
                let opts = self.server.opts();
                let auth = opts.client_authorization(self.client.websocket);
                match auth::check(&auth, &creds) {
                    Ok(user) => {
                        user_name = user.map(|u| u.name.to_string());
                        self.set_permits(user.and_then(|u| u.permissions));
                        if let Some(name) = user.and_then(|u| u.account) {
                            self.join_account(self.server.accounts.ensure(name), -1)?;
                        }
                    }
                    Err(who) => {
                        error!("{prefix} - authentication error{who}");
                        self.send_err("Authorization Violation");
                        self.auth_failed();
                        return Err(ClosedState::AuthenticationViolation);
                    }
                }
            }
        }
        *self.client.creds.lock() = Some(creds);
        {
            let mut meta = self.client.meta.lock();
            meta.name = self.opts.name.clone();
            meta.lang = self.opts.lang.clone();
            meta.version = self.opts.version.clone();
            meta.user = if self.auth_required {
                user_name.or_else(|| ci.user.clone())
            } else {
                None
            };
        }
        if !(0..=1).contains(&self.opts.protocol) {
            self.send_err("invalid client protocol");
            return Err(ClosedState::BadClientProtocolVersion);
        }
        if self.opts.no_responders && !self.opts.headers {
            self.send_err("no responders requires headers support");
            return Err(ClosedState::NoRespondersRequiresHeaders);
        }
        self.parser.set_headers(self.opts.headers);
        self.client
            .headers
            .store(self.opts.headers, Ordering::Relaxed);
        self.delivery.echo = self.opts.echo;
        self.send_ok();
        if let Some(events) = self.server.events.get().filter(|_| first) {
            events.connected(&self.client);
        }
        Ok(())
    }

    /// Tells the system account this client failed to authenticate.
    fn auth_failed(&self) {
        if let Some(events) = self.server.events.get() {
            events.auth_failed(&self.client);
        }
    }

    fn set_permits(&mut self, permissions: Option<&Permissions>) {
        self.client
            .set_permits(permissions.map(|p| Arc::new(Permits::new(p))));
        self.follow_permits();
    }

    /// Takes the client's permits again if they changed since last
    /// looked at (set at CONNECT, or by a reload).
    fn follow_permits(&mut self) {
        let version = self.client.permits_version();
        if version != self.permits_version {
            self.permits = self.client.permits();
            self.permits_version = version;
            self.publish_permitted.clear();
        }
    }

    /// Whether this client may publish to `subject` (nats-server's
    /// `pubAllowedFullCheck`).
    fn may_publish(&mut self, subject: &[u8]) -> bool {
        self.follow_permits();
        let Some(permits) = &self.permits else {
            return true;
        };
        let allowed = match self.publish_permitted.get(subject) {
            Some(&allowed) => allowed,
            None => {
                let allowed = permits.publish_allowed(subject);
                if self.publish_permitted.len() >= MAX_PERMIT_CACHE {
                    self.publish_permitted.clear();
                }
                self.publish_permitted.insert(subject.into(), allowed);
                allowed
            }
        };
        allowed || permits.reply_allowed(subject, Instant::now())
    }

    fn process_ping(&mut self) {
        self.send(|b| b.extend_from_slice(encode::PONG));
        self.last_in = Instant::now();
        if self.connected && !self.first_pong_sent {
            self.first_pong_sent = true;
            // Only clients that speak protocol 1 take asynchronous INFO.
            if self.opts.protocol >= 1 {
                self.client.async_info.store(true, Ordering::Relaxed);
                let mut info = self.server.client_info(&self.client);
                // Its own limit, which its user or account may lower.
                info.max_payload = self.max_payload as i64;
                info.connect_info = true;
                info.remote_account = Some(self.account.name.clone());
                let json = serde_json::to_vec(&info).expect("info serializes");
                self.send(|b| encode::info(b, &json));
            }
        }
    }

    fn ping_timer(&mut self) -> Result<(), ClosedState> {
        let expires = self.jwt.as_ref().and_then(|j| j.expires);
        if expires.is_some_and(|at| auth::operator::unix_now() > at) {
            debug!("{} - User JWT expired", self.client.log_prefix());
            self.send_err("User Authentication Expired");
            self.end_batch();
            return Err(ClosedState::AuthenticationExpired);
        }
        let now = Instant::now();
        let need_rtt = self.client.rtt.load(Ordering::Relaxed) == 0
            || self.rtt_start.is_none_or(|t| now - t > RTT_REFRESH);
        if !need_rtt && now - self.last_in < self.config.client_ping_interval(self.client.websocket)
        {
            return Ok(());
        }
        if self.pings_out + 1 > self.config.ping_max {
            debug!(
                "{} - Stale Client Connection - Closing",
                self.client.log_prefix()
            );
            self.server
                .stats
                .stale_connections
                .fetch_add(1, Ordering::Relaxed);
            self.send_err("Stale Connection");
            self.end_batch();
            return Err(ClosedState::StaleConnection);
        }
        self.send(|b| b.extend_from_slice(encode::PING));
        self.pings_out += 1;
        self.rtt_start = Some(now);
        self.end_batch();
        Ok(())
    }

    fn process_sub(&mut self, subject: &[u8], queue: Option<&[u8]>, sid: &[u8]) {
        self.batch.active = true;
        self.follow_permits();
        let permitted = self
            .permits
            .as_ref()
            .is_none_or(|p| p.subscribe_allowed(subject, queue));
        if !permitted || queue == Some(b"_sys_") {
            self.subscribe_violation(subject, queue, sid);
            return;
        }
        if self.client.subs.lock().contains_key(sid) {
            // A repeated sid keeps the first subscription, as in nats-server.
            self.send_ok();
            return;
        }
        if self.max_subs >= 0 && self.client.subs.lock().len() as i64 >= self.max_subs {
            error!(
                "{} - maximum subscriptions exceeded",
                self.client.log_prefix()
            );
            self.send_err("maximum subscriptions exceeded");
            return;
        }
        let key = self.server.next_sub_key();
        let sub = Arc::new(Subscription::new(
            key,
            self.client.clone(),
            self.account.clone(),
            Bytes::copy_from_slice(subject),
            queue.map(Bytes::copy_from_slice),
            Bytes::copy_from_slice(sid),
        ));
        let inserted = self
            .account
            .sublist
            .write()
            .insert(subject, queue, key, sub.clone());
        if inserted.is_err() {
            self.send_err("Invalid Subject");
            return;
        }
        self.server.interest.changed(subject);
        self.server.interest_changed(&sub, true);
        crate::imports::add_shadows(&self.server, &sub);
        self.client.subs.lock().insert(sub.sid.clone(), sub);
        self.send_ok();
    }

    /// nats-server's `subPermissionViolation`: the client is told, the
    /// connection stays.
    fn subscribe_violation(&mut self, subject: &[u8], queue: Option<&[u8]>, sid: &[u8]) {
        let subject = String::from_utf8_lossy(subject);
        let sid = String::from_utf8_lossy(sid);
        let prefix = self.client.log_prefix();
        let text = match queue {
            Some(queue) => {
                let queue = String::from_utf8_lossy(queue);
                error!("{prefix} - Subscription Violation - Subject {subject:?}, Queue: {queue:?}, SID {sid}");
                format!(
                    "Permissions Violation for Subscription to {subject:?} using queue {queue:?}"
                )
            }
            None => {
                error!("{prefix} - Subscription Violation - Subject {subject:?}, SID {sid}");
                format!("Permissions Violation for Subscription to {subject:?}")
            }
        };
        self.send_err(&text);
    }

    fn process_unsub(&mut self, sid: &[u8], max: Option<u64>) {
        self.batch.active = true;
        let sub = self.client.subs.lock().get(sid).cloned();
        if let Some(sub) = sub {
            match max {
                Some(m) if m > sub.delivered.load(Ordering::Relaxed) => {
                    sub.max.store(m, Ordering::Relaxed)
                }
                _ => self.server.unsubscribe(&sub),
            }
        }
        self.send_ok();
    }

    fn process_pub(&mut self, p: &Publish<'_>) {
        self.batch.in_msgs += 1;
        self.batch.in_bytes += p.message.len() as u64;
        self.batch.active = true;
        if self.opts.pedantic && !subjects::is_valid_literal_subject(p.subject) {
            // nats-server still delivers the message after this error.
            self.send_err("Invalid Publish Subject");
        }
        // The account's mappings come first: permissions and routing see
        // the mapped subject (nats-server maps in its parser).
        let mapped = crate::imports::mapped(&self.server, &self.account, p.subject);
        let subject = match &mapped {
            None => p.subject,
            Some(Mapped::To(to)) => to.as_bytes(),
            Some(Mapped::Dropped) => {
                self.send_ok();
                return;
            }
        };
        if !self.admit(subject, p.subject, p.reply) || !self.start_trace(p) {
            return;
        }
        if let (Some(trace), Some(Mapped::To(to))) = (self.delivery.trace.as_mut(), &mapped) {
            trace.mapped_to(to);
        }
        self.route_pub(subject, p);
    }

    /// A publish's permission on `subject` (mapped already), and its
    /// reply's: `false` refuses it, the client told why (naming the
    /// subject as `published`).
    fn admit(&mut self, subject: &[u8], published: &[u8], reply: Option<&[u8]>) -> bool {
        if !self.may_publish(subject) {
            let subject = String::from_utf8_lossy(published);
            error!(
                "{} - Publish Violation - Subject {subject:?}",
                self.client.log_prefix()
            );
            self.send_err(&format!("Permissions Violation for Publish to {subject:?}"));
            return false;
        }
        // Replies in these spaces are the server's to make: a client's
        // could answer someone else's request (nats-server's
        // `isReservedReply`).
        if let Some(reply) = reply.filter(|r| reserved_reply(r)) {
            let reply = String::from_utf8_lossy(reply);
            error!(
                "{} - Publish Violation - Reply {reply:?}",
                self.client.log_prefix()
            );
            self.send_err(&format!(
                "Permissions Violation for Publish with Reply of {reply:?}"
            ));
            return false;
        }
        self.send_ok();
        true
    }

    /// Starts the trace a publish asks for (`Nats-Trace-Dest`); `false`:
    /// the message goes nowhere.
    fn start_trace(&mut self, p: &Publish<'_>) -> bool {
        let Some(asked) = crate::trace::asked(p.headers()) else {
            return true;
        };
        match asked.dest.clone() {
            Some(dest) if self.may_publish(dest.as_bytes()) => {
                let (client, account) = (&self.client, &self.account.name);
                let size = p.message.len();
                let trace = crate::trace::Trace::new(
                    asked,
                    dest,
                    crate::trace::CLIENT,
                    client,
                    account,
                    p.subject,
                    size,
                );
                self.delivery.trace = Some(trace);
                true
            }
            // As nats-server: a destination it may not publish to is a
            // permissions violation, and the message goes nowhere.
            Some(dest) => {
                self.send_err(&format!("Permissions Violation for Publish to {dest:?}"));
                false
            }
            // No valid destination: nothing to trace, and a trace-only
            // message goes nowhere.
            None => !asked.only,
        }
    }

    /// Routes an admitted publish on `subject` (mapped already): to the
    /// account's subscribers, through its service imports, and tells the
    /// requester when nobody got it.
    fn route_pub(&mut self, subject: &[u8], p: &Publish<'_>) {
        if let Some(start) = self.client.answers_remote(subject) {
            self.send_responder_half(subject, &start);
        }
        let domain_mapped = self.account.map(subject);
        let subject = domain_mapped.as_deref().unwrap_or(subject);
        let sublist = &self.account.sublist;
        let uncached;
        let result = if subject.starts_with(b"$JS.ACK.") {
            // Unique per message: caching it would only evict others.
            uncached = sublist.read().matches_uncached(subject);
            &*uncached
        } else {
            self.cache
                .get_or_insert(subject, || sublist.read().matches(subject))
        };
        let msg = Message {
            subject,
            routed: subject,
            reply: p.reply,
            headers: p.headers(),
            payload: p.payload(),
        };
        // Service imports first: nats-server's are subscriptions its trie
        // lists ahead of the clients' (a trace shows them in that order).
        let mut delivered = false;
        let system_request = || subject.starts_with(b"$SYS.REQ.") && self.account.imports_system();
        if self.account.imports_services() || system_request() {
            let (server, account) = (&self.server, &self.account);
            delivered =
                crate::imports::request(&mut self.delivery, server, account, &self.client, msg);
        }
        delivered |= self.delivery.route(result, msg);
        if self.delivery.trace.is_some() {
            let account = self.account.clone();
            self.delivery.send_trace(&account);
        }
        if !delivered && self.opts.no_responders {
            if let Some(reply) = p.reply {
                self.no_responders(subject, reply);
            }
        }
    }

    /// This client answered a timed request another server sent: that
    /// server gets the responder's half of the measurement, through the
    /// system account.
    fn send_responder_half(&mut self, reply: &[u8], start: &crate::latency::RemoteStart) {
        let server = self.server.clone();
        let Some(system) = server.opts().system_account().map(str::to_string) else {
            return;
        };
        let Some(account) = server.accounts.get(system.as_bytes()) else {
            return;
        };
        let Some((subject, json)) =
            crate::latency::responder_half(&server, &self.client, reply, start)
        else {
            return;
        };
        let result = account.sublist.read().matches(subject.as_bytes());
        let msg = Message {
            subject: subject.as_bytes(),
            routed: subject.as_bytes(),
            reply: None,
            headers: None,
            payload: &json,
        };
        self.delivery.route_imported(&result, msg, false);
    }

    /// Tells a requester nobody is listening, on its own subscription to
    /// the reply subject.
    fn no_responders(&mut self, subject: &[u8], reply: &[u8]) {
        let sublist = &self.account.sublist;
        let result = self
            .cache
            .get_or_insert(reply, || sublist.read().matches(reply));
        let own = result
            .psubs
            .iter()
            .find(|s| Arc::ptr_eq(&s.client, &self.client) && !s.is_closed())
            .cloned();
        if let Some(sub) = own {
            self.send(|b| encode::no_responders(b, reply, &sub.sid, subject));
        }
    }
}

/// The lower of two limits where -1 is none (nats-server's `minLimit`).
fn least(a: i64, b: i64) -> i64 {
    match (a, b) {
        (-1, b) => b,
        (a, -1) => a,
        (a, b) => a.min(b),
    }
}

/// nats-server's `isReservedReply`: service import replies, JetStream
/// acks, gateway replies.
fn reserved_reply(reply: &[u8]) -> bool {
    reply.starts_with(crate::account::imports::REPLY_PREFIX.as_bytes())
        || reply.starts_with(b"$JS.ACK.")
        || reply.starts_with(b"_GR_.")
}

/// The values of the upgrade request's cookies that the config names,
/// for what CONNECT leaves out (nats-server's `cookieJwt` and the rest).
#[derive(Debug, Default, PartialEq)]
pub struct CookieValues {
    pub jwt: Option<String>,
    pub user: Option<String>,
    pub pass: Option<String>,
    pub token: Option<String>,
}

impl CookieValues {
    /// Fills what CONNECT left out.
    pub fn fill(&self, ci: &mut ConnectInfo) {
        let fill = |field: &mut Option<String>, cookie: &Option<String>| {
            if field.as_deref().is_none_or(str::is_empty) && cookie.is_some() {
                field.clone_from(cookie);
            }
        };
        fill(&mut ci.jwt, &self.jwt);
        fill(&mut ci.user, &self.user);
        fill(&mut ci.pass, &self.pass);
        fill(&mut ci.auth_token, &self.token);
    }
}
