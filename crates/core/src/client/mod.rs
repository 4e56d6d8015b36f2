//! A connection's shared state, which other tasks may touch: the
//! connection ([`Client`], clients and routes alike), its outbound buffer
//! (`outbound`), its subscriptions ([`Subscription`]), and the reasons a
//! connection ends ([`ClosedState`]). The tasks that run connections are
//! in `conn`; nothing here names the server.

mod deny;
pub mod outbound;
mod subscription;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::SystemTime;

use bytes::Bytes;
use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;

use auth::permissions::Permits;
pub use deny::Deny;
use outbound::Outbound;
pub use subscription::{Account, Accounts, InternalSink, Message, Quota, Subscription, Via};

/// Why a connection ended, with nats-server's wording (shown in `/connz`
/// `reason` and in the close log line).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClosedState {
    ClientClosed,
    AuthenticationTimeout,
    AuthenticationViolation,
    AuthenticationExpired,
    SlowConsumerPendingBytes,
    SlowConsumerWriteDeadline,
    WriteError,
    ReadError,
    ParseError,
    StaleConnection,
    ProtocolViolation,
    BadClientProtocolVersion,
    MaxConnectionsExceeded,
    MaxAccountConnectionsExceeded,
    MaxPayloadExceeded,
    MaxControlLineExceeded,
    ServerShutdown,
    NoRespondersRequiresHeaders,
    DuplicateRoute,
    ClusterNameConflict,
    /// Closed by the system account's `KICK` request.
    Kicked,
}

impl ClosedState {
    pub fn as_str(self) -> &'static str {
        match self {
            ClosedState::ClientClosed => "Client Closed",
            ClosedState::AuthenticationTimeout => "Authentication Timeout",
            ClosedState::AuthenticationViolation => "Authentication Failure",
            ClosedState::AuthenticationExpired => "Authentication Expired",
            ClosedState::SlowConsumerPendingBytes => "Slow Consumer (Pending Bytes)",
            ClosedState::SlowConsumerWriteDeadline => "Slow Consumer (Write Deadline)",
            ClosedState::WriteError => "Write Error",
            ClosedState::ReadError => "Read Error",
            ClosedState::ParseError => "Parse Error",
            ClosedState::StaleConnection => "Stale Connection",
            ClosedState::ProtocolViolation => "Protocol Violation",
            ClosedState::BadClientProtocolVersion => "Bad Client Protocol Version",
            ClosedState::MaxConnectionsExceeded => "Maximum Connections Exceeded",
            ClosedState::MaxAccountConnectionsExceeded => "Maximum Account Connections Exceeded",
            ClosedState::MaxPayloadExceeded => "Maximum Message Payload Exceeded",
            ClosedState::MaxControlLineExceeded => "Maximum Control Line Exceeded",
            ClosedState::ServerShutdown => "Server Shutdown",
            ClosedState::NoRespondersRequiresHeaders => "No Responders Requires Headers",
            ClosedState::DuplicateRoute => "Duplicate Route",
            ClosedState::ClusterNameConflict => "Cluster Name Conflict",
            ClosedState::Kicked => "Kicked",
        }
    }

    /// Whether queued output (typically an `-ERR`) is written before the
    /// socket closes. nats-server skips the flush when writing is what
    /// failed.
    pub fn flushes(self) -> bool {
        !matches!(
            self,
            ClosedState::ReadError
                | ClosedState::WriteError
                | ClosedState::SlowConsumerPendingBytes
                | ClosedState::SlowConsumerWriteDeadline
        )
    }
}

/// Which side of a leaf node connection this server is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeafRole {
    /// The other server dialed this one's leaf node port: this server is
    /// its hub.
    Accepted,
    /// This server dialed it (a `leafnodes.remotes` entry): this server
    /// is the spoke (nats-server's `isSpokeLeafNode`).
    Solicited,
}

/// Identity a client gave in CONNECT, for monitoring and logs.
#[derive(Debug, Clone, Default)]
pub struct ClientMeta {
    pub name: String,
    pub lang: String,
    pub version: String,
    pub user: Option<String>,
}

/// The parts of a connection that other tasks use: publishers deliver into
/// `out`, monitoring reads counters, shutdown calls `close`.
pub struct Client {
    pub cid: u64,
    pub addr: SocketAddr,
    /// A route to another server: its subscriptions stand for that
    /// server's interest, and messages to it go out as `RMSG`.
    pub is_route: bool,
    /// A leaf node connection, and which side dialed: its subscriptions
    /// stand for the other side's interest, and messages to it go out as
    /// `LMSG`.
    pub leaf: Option<LeafRole>,
    /// A leaf node connection's deny lists: a remote's own, or on the
    /// hub what the leaf's CONNECT asked (`deny_pub`). Set once, by the
    /// connection's handshake.
    pub leaf_deny: std::sync::OnceLock<Deny>,
    /// A client that came in over WebSocket (`/connz` type `websocket`).
    pub websocket: bool,
    pub start: SystemTime,
    pub out: Outbound,
    /// Whether this client accepts `HMSG`; read by publishers.
    pub headers: AtomicBool,
    /// Subscriptions by sid.
    pub subs: Mutex<hashbrown::HashMap<Bytes, Arc<Subscription>>>,
    pub meta: Mutex<ClientMeta>,
    pub in_msgs: AtomicU64,
    pub in_bytes: AtomicU64,
    /// Unix nanoseconds of the last inbound message or subscription change,
    /// or outbound flush.
    pub last_activity: AtomicU64,
    /// Last measured round trip, nanoseconds; 0 until measured.
    pub rtt: AtomicU64,
    /// Set once a protocol-1 client has been answered its first PING; only
    /// then does it get asynchronous INFO (lame duck).
    pub async_info: AtomicBool,
    /// What the client authenticated with, so a reload can check it again.
    pub creds: Mutex<Option<auth::Credentials>>,
    /// Its user's permissions, set at CONNECT and by a reload; `None`
    /// allows everything.
    permits: Mutex<Option<Arc<Permits>>>,
    /// Bumped whenever `permits` is set, so the reader sees a reload.
    permits_version: AtomicU64,
    /// Its permits grant replies to requests it receives, so publishers
    /// delivering a request to it must record the reply subject.
    grants_replies: AtomicBool,
    /// Its permits deny some subscriptions, so publishers must check each
    /// delivery to it (a wildcard subscription may overlap a deny).
    filters_deliveries: AtomicBool,
    closed: Mutex<Option<ClosedState>>,
    /// Cancelled by `close`, waking the reader and the writer.
    kill: CancellationToken,
    /// A client's account, once its CONNECT said who it is (none for a
    /// route: its subscriptions name theirs).
    account: Mutex<Option<Arc<Account>>>,
    /// Timed requests another server sent it, by reply subject: its
    /// reply ends the responder's half of the measurement
    /// (`crate::latency::responder_half`).
    remote_tracking: Mutex<hashbrown::HashMap<Bytes, crate::latency::RemoteStart>>,
    /// `remote_tracking` is not empty (read on every publish).
    tracks_remote: AtomicBool,
}

/// How long a timed request waits for its responder's reply before it
/// is forgotten (nats-server prunes them after the response threshold).
const REMOTE_TRACKING_KEPT: std::time::Duration = std::time::Duration::from_secs(120);

pub fn unix_nanos(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

impl Client {
    pub fn new(cid: u64, addr: SocketAddr) -> Self {
        let start = SystemTime::now();
        Client {
            cid,
            addr,
            is_route: false,
            leaf: None,
            leaf_deny: std::sync::OnceLock::new(),
            websocket: false,
            start,
            out: Outbound::new(),
            headers: AtomicBool::new(false),
            subs: Mutex::new(hashbrown::HashMap::new()),
            meta: Mutex::new(ClientMeta::default()),
            in_msgs: AtomicU64::new(0),
            in_bytes: AtomicU64::new(0),
            last_activity: AtomicU64::new(unix_nanos(start)),
            rtt: AtomicU64::new(0),
            async_info: AtomicBool::new(false),
            creds: Mutex::new(None),
            permits: Mutex::new(None),
            permits_version: AtomicU64::new(0),
            grants_replies: AtomicBool::new(false),
            filters_deliveries: AtomicBool::new(false),
            closed: Mutex::new(None),
            kill: CancellationToken::new(),
            account: Mutex::new(None),
            remote_tracking: Mutex::new(hashbrown::HashMap::new()),
            tracks_remote: AtomicBool::new(false),
        }
    }

    /// A route connection's state (see the route registry).
    pub fn new_route(cid: u64, addr: SocketAddr) -> Self {
        Client {
            is_route: true,
            ..Client::new(cid, addr)
        }
    }

    /// A leaf node connection's state (see the leaf node registry).
    pub fn new_leaf(cid: u64, addr: SocketAddr, role: LeafRole) -> Self {
        Client {
            leaf: Some(role),
            ..Client::new(cid, addr)
        }
    }

    /// Another server's connection (a route or a leaf node): its
    /// subscriptions are that server's interest, not a client's.
    pub fn is_server(&self) -> bool {
        self.is_route || self.leaf.is_some()
    }

    /// Ends the connection. The first reason given is the one kept; later
    /// calls do nothing. Returns whether this call closed it.
    pub fn close(&self, reason: ClosedState) -> bool {
        {
            let mut closed = self.closed.lock();
            if closed.is_some() {
                return false;
            }
            *closed = Some(reason);
        }
        self.out.close(reason.flushes());
        self.kill.cancel();
        true
    }

    /// Its account, once set.
    pub fn account(&self) -> Option<Arc<Account>> {
        self.account.lock().clone()
    }

    /// Puts this client in `account`, counted there and no longer in
    /// the one it was in, unless `account` already holds `limit` clients
    /// (-1: no limit); then it stays where it was and this is false.
    pub fn set_account(&self, account: Arc<Account>, limit: i64) -> bool {
        if !account.enter(limit) {
            return false;
        }
        if let Some(old) = self.account.lock().replace(account) {
            old.leave();
        }
        true
    }

    /// Leaves its account, at the end of the connection.
    pub fn leave_account(&self) {
        if let Some(old) = self.account.lock().take() {
            old.leave();
        }
    }

    pub fn closed_reason(&self) -> Option<ClosedState> {
        *self.closed.lock()
    }

    /// Resolves once `close` has been called.
    pub async fn killed(&self) {
        self.kill.cancelled().await
    }

    pub fn touch(&self, now: SystemTime) {
        self.last_activity.store(unix_nanos(now), Ordering::Relaxed);
    }

    /// Sets what this client may do (at CONNECT, and on a reload).
    pub fn set_permits(&self, permits: Option<Arc<Permits>>) {
        let grants = permits.as_ref().is_some_and(|p| p.grants_replies());
        let filters = permits.as_ref().is_some_and(|p| p.filters_deliveries());
        *self.permits.lock() = permits;
        self.grants_replies.store(grants, Ordering::Release);
        self.filters_deliveries.store(filters, Ordering::Release);
        self.permits_version.fetch_add(1, Ordering::AcqRel);
    }

    /// What this client may do now; `None` is everything.
    pub fn permits(&self) -> Option<Arc<Permits>> {
        self.permits.lock().clone()
    }

    /// Changes with every `set_permits`.
    pub fn permits_version(&self) -> u64 {
        self.permits_version.load(Ordering::Acquire)
    }

    /// Whether a message on `subject` must not reach this client's
    /// subscription in `queue`: its permits deny it.
    pub fn delivery_denied(&self, subject: &[u8], queue: Option<&[u8]>) -> bool {
        self.filters_deliveries.load(Ordering::Acquire)
            && self
                .permits()
                .is_some_and(|p| p.denies_delivery(subject, queue))
    }

    /// A request with reply subject `reply` was delivered to this client;
    /// under `allow_responses` it may now answer it.
    pub fn received_request(&self, reply: &[u8]) {
        if !self.grants_replies.load(Ordering::Acquire) {
            return;
        }
        if let Some(permits) = self.permits() {
            permits.grant_reply(reply, std::time::Instant::now());
        }
    }

    /// A timed request from another server was delivered to it on
    /// `reply`.
    pub fn track_remote(&self, reply: &[u8], start: crate::latency::RemoteStart) {
        let mut map = self.remote_tracking.lock();
        if map.len() >= 64 {
            map.retain(|_, s| s.at.elapsed() < REMOTE_TRACKING_KEPT);
        }
        map.insert(Bytes::copy_from_slice(reply), start);
        self.tracks_remote.store(true, Ordering::Release);
    }

    /// Its publish on `subject` answers a timed request from another
    /// server: when that request came.
    pub fn answers_remote(&self, subject: &[u8]) -> Option<crate::latency::RemoteStart> {
        if !self.tracks_remote.load(Ordering::Acquire) {
            return None;
        }
        let mut map = self.remote_tracking.lock();
        let found = map.remove(subject);
        if map.is_empty() {
            self.tracks_remote.store(false, Ordering::Release);
        }
        found
    }

    /// `ip:port - cid:N`, the prefix of every log line about this client.
    pub fn log_prefix(&self) -> String {
        format!("{} - cid:{}", self.addr, self.cid)
    }
}
