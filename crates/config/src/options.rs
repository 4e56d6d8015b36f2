//! The server's settings, with nats-server's defaults. Filled from the
//! config file (see `config.rs`) and then the command line (see `cli.rs`),
//! in that order, so flags win.

use std::borrow::Cow;
use std::path::PathBuf;
use std::time::Duration;

pub const DEFAULT_PORT: u16 = 4222;
/// The account of clients that name none (nats-server's `$G`).
pub const GLOBAL_ACCOUNT: &str = "$G";
/// The system account's name when the config names none (nats-server's
/// `DEFAULT_SYSTEM_ACCOUNT`).
pub const SYSTEM_ACCOUNT: &str = "$SYS";
pub const DEFAULT_HOST: &str = "0.0.0.0";
/// `-p -1` / `port: -1`: let the OS pick.
pub const RANDOM_PORT: i64 = -1;

#[derive(Debug, Clone, PartialEq)]
pub struct User {
    pub user: String,
    pub password: String,
    /// What this user may publish and subscribe to; `None` is everything.
    pub permissions: Option<Permissions>,
    /// The account it belongs to (`accounts { A { users } }`); `None` is
    /// `$G`.
    pub account: Option<String>,
}

/// A user known by its public nkey (`users: [{ nkey: U... }]`): it
/// proves who it is by signing the nonce of its INFO.
#[derive(Debug, Clone, PartialEq)]
pub struct NkeyUser {
    pub nkey: String,
    pub permissions: Option<Permissions>,
    /// As [`User::account`].
    pub account: Option<String>,
}

/// A user's `permissions` block, as nats-server's `Permissions`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Permissions {
    pub publish: Option<SubjectPermission>,
    pub subscribe: Option<SubjectPermission>,
    /// `allow_responses`: may publish to the reply subject of a request
    /// it received, though `publish` would refuse it.
    pub response: Option<ResponsePermission>,
}

/// `allow` and `deny` subjects. An `allow` of `None` allows every
/// subject `deny` does not name; `Some` of an empty list allows none.
/// Subscribe entries may carry a queue group: `"subject queue"`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SubjectPermission {
    pub allow: Option<Vec<String>>,
    pub deny: Vec<String>,
}

/// How many replies an `allow_responses` grant allows per request, and
/// for how long. Zero or less means no limit, as in nats-server.
#[derive(Debug, Clone, PartialEq)]
pub struct ResponsePermission {
    pub max_msgs: i64,
    pub expires: Option<Duration>,
}

impl Default for ResponsePermission {
    /// nats-server's `DEFAULT_ALLOW_RESPONSE_MAX_MSGS` and
    /// `DEFAULT_ALLOW_RESPONSE_EXPIRATION`.
    fn default() -> Self {
        ResponsePermission {
            max_msgs: 1,
            expires: Some(Duration::from_secs(120)),
        }
    }
}

/// Client authentication. At most one of token, single user, or users list
/// is set; `config.rs` rejects combinations nats-server rejects.
/// Whether an export or import is of a stream (messages flow from the
/// exporter to the importer's subscribers) or a service (requests from
/// the importer to the exporter's responders, replies back).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkKind {
    Stream,
    Service,
}

impl LinkKind {
    pub fn as_str(self) -> &'static str {
        match self {
            LinkKind::Stream => "stream",
            LinkKind::Service => "service",
        }
    }
}

/// How many replies a service request gets: one (the reply path closes
/// after it), or any number until the exporter's response threshold
/// passes without one (nats-server's `ServiceRespType`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ResponseType {
    #[default]
    Singleton,
    Stream,
    Chunked,
}

/// nats-server's `DEFAULT_SERVICE_EXPORT_RESPONSE_THRESHOLD`.
pub const DEFAULT_RESPONSE_THRESHOLD: Duration = Duration::from_secs(120);

/// An account's `limits` block (nats-server's account `limits`); -1 is
/// no limit. Connections and leaf nodes count per server: nats-server
/// adds up other servers' counts through the system account.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Client connections in the account.
    pub max_connections: i64,
    /// Subscriptions per connection of the account.
    pub max_subscriptions: i64,
    /// Largest message a connection of the account may publish.
    pub max_payload: i64,
    /// Leaf node connections bound to the account.
    pub max_leafnodes: i64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: -1,
            max_subscriptions: -1,
            max_payload: -1,
            max_leafnodes: -1,
        }
    }
}

/// A subject mapping (`mappings`, top level for `$G`, or in an account
/// block): a publish on a subject `src` matches goes to one of `dests`,
/// drawn by weight.
#[derive(Debug, Clone, PartialEq)]
pub struct Mapping {
    pub account: String,
    /// May hold wildcards.
    pub src: String,
    pub dests: Vec<MapDest>,
}

/// One destination of a [`Mapping`].
#[derive(Debug, Clone, PartialEq)]
pub struct MapDest {
    /// A transform destination of `src` (`$1`, `{{partition(3,1)}}`, ...).
    pub subject: String,
    /// Percent, 0 to 100.
    pub weight: u8,
    /// Used only on servers of this cluster; `None`: any.
    pub cluster: Option<String>,
}

/// One entry of an account's `exports`.
#[derive(Debug, Clone, PartialEq)]
pub struct Export {
    /// The exporting account.
    pub account: String,
    pub kind: LinkKind,
    /// In the exporter's subject space; may hold wildcards.
    pub subject: String,
    /// The accounts that may import it; empty: every account.
    pub accounts: Vec<String>,
    /// Services only.
    pub response: ResponseType,
    /// Services only: how long a reply path stays open without a reply.
    pub response_threshold: Duration,
    /// The 1-based token of an imported subject that must be the
    /// importer's account name.
    pub account_token_position: Option<usize>,
    /// Only importers with an activation token may import it (account
    /// JWTs' `token_req`).
    pub token_req: bool,
    /// Services only: a traced message goes on being traced in the
    /// exporter (`allow_trace`); without it, tracing stops at the import.
    pub allow_trace: bool,
    /// Services only: requests through it are timed, and the results
    /// published in the exporter (`latency`).
    pub latency: Option<ServiceLatency>,
}

/// A service export's latency tracking (`latency`; account JWTs'
/// `service_latency`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceLatency {
    /// 1 to 100: the percentage of requests measured, besides those whose
    /// tracing headers ask; 0: only those (`sampling: headers`).
    pub sampling: u8,
    /// Where the measurements are published, in the exporter's account.
    pub results: String,
}

/// nats-server's `DEFAULT_SERVICE_LATENCY_SAMPLING`.
pub const DEFAULT_LATENCY_SAMPLING: u8 = 100;

/// One entry of an account's `imports`.
#[derive(Debug, Clone, PartialEq)]
pub struct Import {
    /// The importing account.
    pub account: String,
    pub kind: LinkKind,
    /// The exporting account.
    pub from: String,
    /// In the exporter's subject space.
    pub subject: String,
    /// The importer's subject for it (nats-server's `to`, or a stream's
    /// `prefix` put before `subject`); `None`: `subject` itself. A `*`
    /// here stands for the subject's wildcard at the same position.
    pub to: Option<String>,
    /// Services only: requests carry the requester's full client info
    /// (server, cluster, name, user, ...), not just its account.
    pub share: bool,
    /// It carried an activation token the exporter signed for it (account
    /// JWTs only), which a `token_req` export asks for.
    pub activated: bool,
    /// Streams only: a traced message goes on being traced into the
    /// importer (`allow_trace`); without it, tracing stops at the export.
    pub allow_trace: bool,
}

impl Import {
    /// The subject the importer sees: its subscribers (stream) or its
    /// requesters (service) use this.
    pub fn local_subject(&self) -> &str {
        self.to.as_deref().unwrap_or(&self.subject)
    }
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Authorization {
    pub token: Option<String>,
    pub user: Option<String>,
    pub password: Option<String>,
    pub users: Vec<User>,
    pub nkeys: Vec<NkeyUser>,
    /// How long a client has to send CONNECT when auth is required.
    pub timeout: Option<Duration>,
    /// `no_auth_user`: the user a client that presents no credentials
    /// connects as. Always one of `users` or `nkeys`.
    pub no_auth_user: Option<String>,
    /// Operator mode: clients authenticate with user JWTs.
    pub operator: Option<OperatorOptions>,
}

/// `operator`, `resolver: MEMORY` and `resolver_preload`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OperatorOptions {
    /// The operator JWTs (read from their files).
    pub jwts: Vec<String>,
    /// A `resolver` was given (only `MEMORY` is accepted).
    pub resolver: bool,
    /// Account public key → account JWT.
    pub preload: std::collections::BTreeMap<String, String>,
    /// `system_account`, or the operator's.
    pub system_account: Option<String>,
}

impl Authorization {
    pub fn required(&self) -> bool {
        self.token.is_some()
            || self.user.is_some()
            || !self.users.is_empty()
            || !self.nkeys.is_empty()
            || self.operator.is_some()
    }
}

/// Where JetStream keeps its data when no `store_dir` is given: a folder
/// under the working directory. nats-server's default is under the system
/// temporary directory, which many systems empty at boot.
pub const DEFAULT_STORE_DIR: &str = "flotilla-data";

/// `jetstream` settings.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct JetStreamOptions {
    pub enabled: bool,
    pub store_dir: Option<PathBuf>,
    pub max_memory: Option<i64>,
    pub max_file: Option<i64>,
    /// `sync_interval`: `None` (or `always`) syncs before every ack;
    /// a duration syncs on that period and acks before.
    pub sync_interval: Option<Duration>,
    /// `domain`: the JetStream domain this server's JetStream answers
    /// for, also as `$JS.<domain>.API`.
    pub domain: Option<String>,
}

/// nats-server's `TLS_TIMEOUT`: how long a TLS handshake may take.
pub const DEFAULT_TLS_TIMEOUT: Duration = Duration::from_secs(2);

/// Client TLS: the `tls {}` block, or `--tls`, `--tlscert`, `--tlskey`,
/// `--tlscacert` and `--tlsverify`.
#[derive(Debug, Clone, PartialEq)]
pub struct TlsOptions {
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
    /// Roots that client certificates must chain to.
    pub ca_file: Option<PathBuf>,
    /// Every client must present a certificate that `ca_file` verifies.
    pub verify: bool,
    /// `verify_and_map`: `verify`, and the certificate names the user
    /// (an e-mail, DNS name or URI in its alternative names, or its
    /// subject as a distinguished name); no password is asked for.
    pub map: bool,
    /// How long the handshake may take before the connection is closed.
    pub timeout: Duration,
    /// The handshake comes before INFO, which then goes out encrypted.
    pub handshake_first: bool,
    /// With `handshake_first`: a client that has sent nothing after this
    /// long gets INFO first after all (`handshake_first: auto` or a
    /// duration), so clients of both kinds connect.
    pub handshake_first_fallback: Option<Duration>,
    /// `min_version: "1.3"`: TLS 1.3 only (1.2 is the floor anyway).
    pub min_tls13: bool,
    /// `cipher_suites`: the TLS 1.2 suites allowed, by name, in order of
    /// preference; TLS 1.3's are always on, as in Go. Empty: rustls's.
    pub cipher_suites: Vec<String>,
    /// `curve_preferences`, by Go's names, in order. Empty: rustls's.
    pub curve_preferences: Vec<String>,
    /// `pinned_certs`: lowercase hex SHA-256 of the DER
    /// SubjectPublicKeyInfo of each certificate a peer may present; a
    /// peer presenting another, or none, is refused. Empty: no pinning.
    pub pinned_certs: std::collections::BTreeSet<String>,
}

/// nats-server's `DEFAULT_TLS_HANDSHAKE_FIRST_FALLBACK_DELAY`: the delay
/// `handshake_first: auto` means.
pub const DEFAULT_HANDSHAKE_FIRST_FALLBACK: Duration = Duration::from_millis(50);

impl Default for TlsOptions {
    fn default() -> Self {
        TlsOptions {
            cert_file: None,
            key_file: None,
            ca_file: None,
            verify: false,
            map: false,
            timeout: DEFAULT_TLS_TIMEOUT,
            handshake_first: false,
            handshake_first_fallback: None,
            min_tls13: false,
            cipher_suites: Vec::new(),
            curve_preferences: Vec::new(),
            pinned_certs: Default::default(),
        }
    }
}

/// `cluster` settings: where routes listen and whom they dial.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ClusterOptions {
    pub name: Option<String>,
    pub host: Option<String>,
    pub port: Option<i64>,
    pub routes: Vec<String>,
    /// `authorization { user, password }`: what a route's CONNECT must
    /// carry, and what this server sends on routes whose URL has none.
    pub user: Option<String>,
    pub password: Option<String>,
    /// `host:port` other servers are told to dial for this one.
    pub advertise: Option<String>,
    /// Neither advertise this server's client URLs to other servers nor
    /// pass theirs on to clients.
    pub no_advertise: bool,
    /// Extra attempts for a route learned through gossip.
    pub connect_retries: u32,
    /// `tls {}`: every route and Raft connection is TLS from its first
    /// byte, both ways; dialers verify the peer's certificate against
    /// `ca_file`, and with `verify` so does the accepting side.
    pub tls: Option<TlsOptions>,
}

impl ClusterOptions {
    /// Routes are on once there is a cluster port to listen on.
    pub fn enabled(&self) -> bool {
        self.port.is_some_and(|p| p != 0)
    }
}

/// `websocket {}`: a second client port that speaks the same protocol
/// inside WebSocket frames (nats.ws, browsers).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WebsocketOptions {
    /// Empty: [`DEFAULT_HOST`].
    pub host: Option<String>,
    /// -1 picks a free port; 0 turns WebSocket off.
    pub port: i64,
    /// `host:port` given to clients instead of the listener's.
    pub advertise: Option<String>,
    /// Plain text was asked for explicitly; without it `tls` is required.
    pub no_tls: bool,
    pub tls: Option<TlsOptions>,
    /// An `Origin` must name this server (scheme, host and port).
    pub same_origin: bool,
    /// Origins accepted, as (scheme, lowercase host, port); empty: any.
    pub allowed_origins: Vec<Origin>,
    /// permessage-deflate, when a client offers it.
    pub compression: bool,
    /// How long the HTTP upgrade may take; `None`: nats-server's (none),
    /// which flotilla bounds by the TLS or auth timeout.
    pub handshake_timeout: Option<Duration>,
    /// Extra headers for the 101 response, in config order.
    pub headers: Vec<(String, String)>,
    /// `authorization { user, password, token }` and `no_auth_user`:
    /// with any of user, token or no_auth_user set, they stand in for
    /// the top-level ones for WebSocket clients (nats-server's
    /// `authOverride`); the top-level users and nkeys still apply.
    pub user: Option<String>,
    pub password: Option<String>,
    pub token: Option<String>,
    pub no_auth_user: Option<String>,
    /// `authorization { timeout }`: WebSocket clients' auth timeout.
    pub auth_timeout: Option<Duration>,
    /// Cookies whose values stand in for what CONNECT leaves out.
    pub cookies: WsCookies,
    /// `ping_interval`: WebSocket clients' instead of the top-level one.
    pub ping_interval: Option<Duration>,
}

/// `jwt_cookie`, `user_cookie`, `pass_cookie`, `token_cookie`: the
/// names of the upgrade request's cookies that fill CONNECT's `jwt`,
/// `user`, `pass` and `auth_token` when CONNECT has none.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WsCookies {
    pub jwt: Option<String>,
    pub user: Option<String>,
    pub pass: Option<String>,
    pub token: Option<String>,
}

impl WebsocketOptions {
    pub fn enabled(&self) -> bool {
        self.port != 0
    }

    /// Whether the block's authorization replaces the top-level one.
    pub fn auth_override(&self) -> bool {
        self.user.is_some() || self.token.is_some() || self.no_auth_user.is_some()
    }
}

/// `leafnodes {}`: a port other servers join as leaf nodes (this server
/// their hub), and `remotes` this server joins as a leaf node.
#[derive(Debug, Clone, PartialEq)]
pub struct LeafnodeOptions {
    /// Empty: [`DEFAULT_HOST`].
    pub host: Option<String>,
    /// -1 picks a free port; 0: no leaf node port.
    pub port: i64,
    /// `host:port` leaf nodes are told to dial for this one.
    pub advertise: Option<String>,
    pub no_advertise: bool,
    /// `authorization { user, password }`: what a leaf node's CONNECT
    /// must carry; it is then bound to `account`.
    pub user: Option<String>,
    pub password: Option<String>,
    /// `authorization { account }`: the account a leaf node
    /// authenticated by `user` is bound to; `None`: the global one.
    pub account: Option<String>,
    /// `authorization { nkey }`: a leaf proves itself with this user
    /// key's signature of the nonce instead (bound to `account`).
    pub nkey: Option<String>,
    /// `authorization { users [...] }`: each with its own account.
    pub users: Vec<LeafUser>,
    pub auth_timeout: Option<Duration>,
    /// How long a remote waits before dialing again (`reconnect`).
    pub reconnect: Duration,
    pub remotes: Vec<RemoteLeaf>,
    /// `tls {}`: the hub sends INFO in the clear, then leaf nodes must
    /// shake hands before CONNECT (`verify`: with a certificate).
    pub tls: Option<TlsOptions>,
}

impl Default for LeafnodeOptions {
    fn default() -> Self {
        LeafnodeOptions {
            host: None,
            port: 0,
            advertise: None,
            no_advertise: false,
            user: None,
            password: None,
            account: None,
            nkey: None,
            users: Vec::new(),
            auth_timeout: None,
            reconnect: Duration::from_secs(1),
            remotes: Vec::new(),
            tls: None,
        }
    }
}

impl LeafnodeOptions {
    /// Whether other servers may join this one as leaf nodes.
    pub fn accepts(&self) -> bool {
        self.port != 0
    }
}

/// One of `leafnodes.authorization.users`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeafUser {
    pub user: String,
    pub password: String,
    pub account: Option<String>,
}

/// One of `leafnodes.remotes`: a hub this server joins as a leaf node.
#[derive(Debug, Clone, PartialEq)]
pub struct RemoteLeaf {
    /// Tried in turn: `nats-leaf://[user:password@]host[:port]`.
    pub urls: Vec<String>,
    /// The local account the connection is bound to; `None`: global.
    pub account: Option<String>,
    /// `tls {}` (or a `tls://` URL, which needs it): the connection is
    /// upgraded after the hub's INFO, the hub verified against
    /// `ca_file`; a certificate is presented when the block has one.
    pub tls: Option<TlsOptions>,
    /// `credentials`: a `.creds` file (user JWT and seed), read at each
    /// dial; CONNECT carries the JWT and the seed's signature of the
    /// hub's nonce.
    pub credentials: Option<PathBuf>,
    /// `nkey`: a user seed; CONNECT carries its public key and its
    /// signature of the hub's nonce.
    pub nkey: Option<String>,
    /// `deny_imports`: subjects taken from the hub never (nor is
    /// interest in them told); `deny_exports`: subjects never sent to it.
    pub deny_imports: Vec<String>,
    pub deny_exports: Vec<String>,
}

/// An allowed WebSocket origin: what a browser's `Origin` must match.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    pub scheme: String,
    pub host: String,
    pub port: u16,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    pub host: String,
    pub port: i64,
    pub server_name: Option<String>,
    /// `server_tags`, for JetStream placement (lowercase, as nats-server
    /// compares them).
    pub server_tags: Vec<String>,
    pub http_host: Option<String>,
    /// 0 disables monitoring; -1 picks a free port.
    pub http_port: i64,
    /// Monitoring over TLS (`https_port`, `-ms`); excludes `http_port`.
    pub https_port: i64,
    /// A prefix for every monitoring path (`http_base_path`), as given.
    pub http_base_path: String,
    pub max_payload: usize,
    pub max_pending: usize,
    pub max_control_line: usize,
    pub max_connections: usize,
    pub ping_interval: Duration,
    pub ping_max: u32,
    pub write_deadline: Duration,
    pub authorization: Authorization,
    /// The accounts `accounts {}` names, besides `$G`; their users are in
    /// `authorization`, each naming its account.
    pub accounts: Vec<String>,
    /// The system account named: by `system_account` (alias `system`),
    /// by the operator JWT, or by an account block called `$SYS`. See
    /// [`Options::system_account`] for the one in force.
    pub system_account: Option<String>,
    /// `no_system_account` (aliases `no_system`, `no_sys_acc`): no
    /// `$SYS` is made when none is named.
    pub no_system_account: bool,
    /// Subject mappings, in the order written (top-level ones in `$G`).
    pub mappings: Vec<Mapping>,
    /// The accounts whose block has `limits`, with them.
    pub account_limits: std::collections::BTreeMap<String, Limits>,
    /// What the accounts export (`accounts { A { exports } }`), in the
    /// order written.
    pub exports: Vec<Export>,
    /// What the accounts import, in the order written; each was checked
    /// against `exports` at load.
    pub imports: Vec<Import>,
    /// The accounts whose block enables JetStream (`jetstream: enabled`,
    /// or a map of limits), with their limits (-1: none).
    pub account_jetstream: std::collections::BTreeMap<String, jsapi::AccountLimits>,
    pub debug: bool,
    pub trace: bool,
    pub logtime: bool,
    pub logfile: Option<PathBuf>,
    pub pid_file: Option<PathBuf>,
    pub ports_file_dir: Option<PathBuf>,
    /// Config blocks for features flotilla lacks, ignored with a warning
    /// (`gateway`, `mqtt`); `/varz` lists them.
    pub ignored_config: Vec<String>,
    pub lame_duck_duration: Duration,
    pub lame_duck_grace_period: Duration,
    pub jetstream: JetStreamOptions,
    pub cluster: ClusterOptions,
    /// Client connections must use TLS.
    pub tls: Option<TlsOptions>,
    pub websocket: WebsocketOptions,
    pub leafnodes: LeafnodeOptions,
    pub config_file: Option<PathBuf>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            host: DEFAULT_HOST.to_string(),
            port: DEFAULT_PORT as i64,
            server_name: None,
            server_tags: Vec::new(),
            http_host: None,
            http_port: 0,
            https_port: 0,
            http_base_path: String::new(),
            max_payload: 1024 * 1024,
            max_pending: 64 * 1024 * 1024,
            max_control_line: 4096,
            max_connections: 64 * 1024,
            ping_interval: Duration::from_secs(120),
            ping_max: 2,
            write_deadline: Duration::from_secs(10),
            authorization: Authorization::default(),
            accounts: Vec::new(),
            system_account: None,
            no_system_account: false,
            mappings: Vec::new(),
            account_limits: Default::default(),
            exports: Vec::new(),
            imports: Vec::new(),
            account_jetstream: Default::default(),
            debug: false,
            trace: false,
            logtime: true,
            logfile: None,
            pid_file: None,
            ports_file_dir: None,
            ignored_config: Vec::new(),
            lame_duck_duration: Duration::from_secs(120),
            lame_duck_grace_period: Duration::from_secs(10),
            jetstream: JetStreamOptions::default(),
            cluster: ClusterOptions::default(),
            tls: None,
            websocket: WebsocketOptions::default(),
            leafnodes: LeafnodeOptions::default(),
            config_file: None,
        }
    }
}

/// The account nats-server makes to be the system account when none is
/// named (`DEFAULT_SYSTEM_ACCOUNT`).
pub const DEFAULT_SYSTEM_ACCOUNT: &str = "$SYS";

impl Options {
    /// The system account in force: the one named, or else `$SYS`, made
    /// by the server, unless `no_system_account` (nats-server's
    /// `SetSystemAccount` and `SetDefaultSystemAccount`).
    pub fn system_account(&self) -> Option<&str> {
        match &self.system_account {
            Some(name) => Some(name),
            None if self.no_system_account => None,
            None => Some(DEFAULT_SYSTEM_ACCOUNT),
        }
    }

    /// Default auth timeout: 2 s, as nats-server; with TLS, at least the
    /// TLS timeout and a second more (its `getDefaultAuthTimeout`).
    pub fn auth_timeout(&self) -> Duration {
        let plain = Duration::from_secs(2);
        let default = match &self.tls {
            Some(tls) => plain.max(tls.timeout + Duration::from_secs(1)),
            None => plain,
        };
        self.authorization.timeout.unwrap_or(default)
    }

    /// What a client is checked against: the top-level authorization,
    /// or for a WebSocket client the websocket block's where it
    /// overrides it (user, password, token and no_auth_user; the users
    /// and nkeys are the top-level ones), as nats-server's
    /// `processClientOrLeafAuthentication`.
    pub fn client_authorization(&self, websocket: bool) -> Cow<'_, Authorization> {
        let ws = &self.websocket;
        if !websocket || !ws.auth_override() {
            return Cow::Borrowed(&self.authorization);
        }
        Cow::Owned(Authorization {
            token: ws.token.clone(),
            user: ws.user.clone(),
            password: ws.password.clone(),
            no_auth_user: ws.no_auth_user.clone(),
            ..self.authorization.clone()
        })
    }

    /// How often a quiet client is pinged: a WebSocket client's may be
    /// the websocket block's (nats-server's `Websocket.PingInterval`).
    pub fn client_ping_interval(&self, websocket: bool) -> Duration {
        match self
            .websocket
            .ping_interval
            .filter(|d| websocket && !d.is_zero())
        {
            Some(interval) => interval,
            None => self.ping_interval,
        }
    }

    /// How long a client has to authenticate: a WebSocket client's may
    /// be the websocket block's.
    pub fn client_auth_timeout(&self, websocket: bool) -> Duration {
        match self.websocket.auth_timeout.filter(|_| websocket) {
            Some(timeout) => timeout,
            None => self.auth_timeout(),
        }
    }

    /// Zero means "the default" for these, as in nats-server (a zero ping
    /// interval would otherwise declare every client stale at once).
    pub fn apply_baseline(&mut self) {
        let d = Options::default();
        if self.ping_interval.is_zero() {
            self.ping_interval = d.ping_interval;
        }
        if self.ping_max == 0 {
            self.ping_max = d.ping_max;
        }
        if self.write_deadline.is_zero() {
            self.write_deadline = d.write_deadline;
        }
        if self.lame_duck_duration.is_zero() {
            self.lame_duck_duration = d.lame_duck_duration;
        }
    }

    /// Checks the cross-field rules nats-server enforces at start. What
    /// needs the runtime to check (TLS files, operator JWTs) is checked
    /// where the runtime builds it: `auth::check`.
    pub fn validate(&self) -> Result<(), String> {
        if self.cluster.user.is_some() && self.cluster.password.is_none() {
            return Err("expected cluster password to be set".into());
        }
        if !self.cluster.routes.is_empty() && !self.cluster.enabled() {
            return Err("solicited routes require cluster capabilities, e.g. --cluster".into());
        }
        if self.jetstream.enabled && self.cluster.enabled() {
            if self.server_name.is_none() {
                return Err("jetstream cluster requires `server_name` to be set".into());
            }
            if self.cluster.name.is_none() {
                return Err("jetstream cluster requires `cluster.name` to be set".into());
            }
        }
        if self.max_payload > self.max_pending {
            return Err(format!(
                "max_payload ({}) cannot be higher than max_pending ({})",
                self.max_payload, self.max_pending
            ));
        }
        if self.lame_duck_grace_period >= self.lame_duck_duration {
            return Err(format!(
                "lame duck grace period ({:?}) should be strictly lower than lame duck duration ({:?})",
                self.lame_duck_grace_period, self.lame_duck_duration
            ));
        }
        if !(RANDOM_PORT..=65535).contains(&self.port) {
            return Err(format!("invalid port {}", self.port));
        }
        if !(RANDOM_PORT..=65535).contains(&self.http_port) {
            return Err(format!("invalid http port {}", self.http_port));
        }
        if !(RANDOM_PORT..=65535).contains(&self.https_port) {
            return Err(format!("invalid https port {}", self.https_port));
        }
        if self.http_port != 0 && self.https_port != 0 {
            return Err(format!(
                "can't specify both HTTP ({}) and HTTPs ({}) ports",
                self.http_port, self.https_port
            ));
        }
        if self.https_port != 0 && self.tls.is_none() {
            return Err("TLS cert and key required for HTTPS".into());
        }
        if let Some(op) = &self.authorization.operator {
            self.check_operator_mode(op)?;
        }
        if self.jetstream.enabled {
            self.jetstream_accounts()?;
        }
        if let Some(domain) = &self.jetstream.domain {
            check_domain(domain)?;
        }
        Ok(())
    }
}

/// nats-server's checks of `jetstream { domain }`.
fn check_domain(domain: &str) -> Result<(), String> {
    let api = format!("$JS.{domain}.API.>");
    if !subjects::is_valid_subject(api.as_bytes()) {
        return Err(format!(
            "invalid domain name: derived {api:?} is not a valid subject"
        ));
    }
    if domain.contains(['.', '*', '>']) {
        return Err("invalid domain name: may not contain ., * or >".into());
    }
    Ok(())
}

impl Options {
    /// The accounts JetStream serves, with their limits, by name. In
    /// operator mode, none here: the account JWTs say. Without
    /// `accounts`, `$G`, unlimited. With them, as nats-server,
    /// every account whose block enables it and no other; a config that
    /// enables it in none is refused (nats-server would start with
    /// JetStream answering "not enabled" everywhere).
    pub fn jetstream_accounts(&self) -> Result<Vec<(String, jsapi::AccountLimits)>, String> {
        if self.authorization.operator.is_some() {
            // Each account JWT says (`auth::operator::jetstream_of`).
            return Ok(Vec::new());
        }
        // No account but the global and the system account: the global
        // account's (nats-server's `globalAccountOnly`).
        let system = self.system_account();
        let others = self
            .accounts
            .iter()
            .any(|a| a != GLOBAL_ACCOUNT && Some(a.as_str()) != system);
        if !others {
            return Ok(vec![(GLOBAL_ACCOUNT.to_string(), Default::default())]);
        }
        let enabled: Vec<(String, jsapi::AccountLimits)> = self
            .account_jetstream
            .iter()
            .map(|(name, limits)| (name.clone(), *limits))
            .collect();
        if enabled.is_empty() {
            return Err("JetStream is enabled but no account enables it: with \
                 accounts, JetStream serves only an account whose block has \
                 `jetstream: enabled` (or its limits)"
                .into());
        }
        Ok(enabled)
    }

    /// nats-server's `validateTrustedOperators`, and what flotilla does
    /// not implement in operator mode.
    fn check_operator_mode(&self, op: &OperatorOptions) -> Result<(), String> {
        if !op.resolver {
            return Err("operators require an account resolver to be configured".into());
        }
        if !self.accounts.is_empty() {
            return Err("operators do not allow Accounts to be configured directly".into());
        }
        let a = &self.authorization;
        if !a.users.is_empty() || !a.nkeys.is_empty() {
            return Err("operators do not allow users to be configured directly".into());
        }
        Ok(())
    }
}
