//! The system account's server side (nats-server's `events.go`): the
//! requests every server answers on `$SYS.REQ.SERVER.>`, and the
//! statistics it broadcasts on `$SYS.SERVER.<id>.STATSZ`, in
//! nats-server's JSON, so that `nats server list` and the other tools
//! that read them see flotilla as they see nats-server.
//!
//! # Contract
//!
//! - [`start`] is called once, at start, after monitoring's services are
//!   installed and before clients are accepted. It subscribes in the
//!   system account (told to routes, so a request reaches every server
//!   of the cluster) and spawns two tasks on the current runtime; both
//!   end when the server shuts down.
//! - Requests are answered one at a time, in the order they came, on the
//!   answering task: a subscription's sink only queues them, on the
//!   publisher's task. The same task hears other servers' statsz and
//!   the responders' halves of latency measurements this server
//!   started (`$SYS.LATENCY.M2.<hash>`, merged by the core).
//! - Every message carrying the `server` object is stamped by one
//!   [`info::Identity`], so their `seq` counts up by one each, across
//!   answers and broadcasts.

mod accounts;
pub mod events;
pub mod info;
pub mod requests;
pub mod statsz;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use flotilla_core::bus::{Bus, Message, Publisher, Reach, Sink, Subscription};
use flotilla_core::server::Server;
use monitor::query::Query;
use monitor::{Endpoints, Reply};
use parking_lot::Mutex;
use tokio::sync::mpsc;
use tracing::{debug, error};

use info::Identity;
use requests::{Answer, ApiError, Me, Service};

/// A request as it came, owned, for the answering task.
struct Request {
    subject: String,
    reply: Option<String>,
    /// Its `Nats-Request-Info`, when it came through an import.
    info: Option<String>,
    body: Vec<u8>,
    /// The connection that published it (0: the server, or unknown).
    publisher: u64,
}

struct Queue(mpsc::UnboundedSender<Request>);

impl Sink for Queue {
    fn deliver(&self, msg: Message<'_>) {
        self.deliver_from(msg, 0);
    }

    fn deliver_from(&self, msg: Message<'_>, publisher: u64) {
        let request = Request {
            subject: String::from_utf8_lossy(msg.routed).into_owned(),
            reply: msg.reply.map(|r| String::from_utf8_lossy(r).into_owned()),
            info: msg
                .headers
                .and_then(|h| protocol::headers::get(h, protocol::headers::REQUEST_INFO))
                .map(str::to_string),
            body: msg.payload.to_vec(),
            publisher,
        };
        let _ = self.0.send(request);
    }
}

/// nats-server's steady statsz interval (`statsHBInterval`).
const STATSZ_EVERY: Duration = Duration::from_secs(10);
/// The first broadcast's delay; each next one doubles it up to
/// [`STATSZ_EVERY`] (nats-server's `startStatszTimer`).
const STATSZ_FIRST: Duration = Duration::from_millis(250);
/// At most one broadcast a second (`defaultStatszRateLimit`).
const STATSZ_LIMIT: Duration = Duration::from_secs(1);
/// A server not heard from for this long is no longer counted active
/// (nats-server's `orphMax`, five heartbeat intervals).
const SERVER_GONE: Duration = Duration::from_secs(150);
/// How often an account's connection count is repeated while it has
/// connections (nats-server's `eventsHBInterval`).
const CONNS_EVERY: Duration = Duration::from_secs(30);

/// How many subscriptions match, asked of every server.
const NSUBS: &str = "$SYS.REQ.ACCOUNT.NSUBS";

/// The system account's side of this server.
pub struct System {
    server: Arc<Server>,
    endpoints: Endpoints,
    identity: Identity,
    bus: Bus,
    /// Other servers' ids, with when their statsz was last heard.
    peers: Mutex<HashMap<String, Instant>>,
    /// When this server last broadcast its statsz.
    last_statsz: Mutex<Option<Instant>>,
    /// This server's own subscription to everyone's statsz, which does
    /// not count as interest in its own.
    statsz_sub: Mutex<Option<Arc<Subscription>>>,
    /// It told the cluster it is leaving: it sends nothing more.
    /// Held while anything is published: `leaving` sets it under the
    /// lock, so nothing goes out after the last message.
    gone: Mutex<bool>,
}

/// Serves the system account, if the server has one (see the module's
/// contract).
pub fn start(server: &Arc<Server>, services: &Arc<monitor::Services>) -> Option<Arc<System>> {
    let opts = server.opts();
    let account = opts.system_account()?;
    let bus = Bus::named(server.clone(), account);
    let system = Arc::new(System {
        server: server.clone(),
        endpoints: Endpoints::new(server.clone(), services.clone()),
        identity: Identity::new(server.clone()),
        bus,
        peers: Mutex::new(HashMap::new()),
        last_statsz: Mutex::new(None),
        statsz_sub: Mutex::new(None),
        gone: Mutex::new(false),
    });
    let (tx, rx) = mpsc::unbounded_channel();
    let queue: Arc<dyn Sink> = Arc::new(Queue(tx));
    let id = &server.id;
    let mut subjects = vec!["$SYS.REQ.SERVER.PING".to_string()];
    for s in requests::SERVICES {
        if !s.answer.one_server() {
            subjects.push(format!("$SYS.REQ.SERVER.PING.{}", s.name));
        }
        subjects.push(format!("$SYS.REQ.SERVER.{id}.{}", s.name));
    }
    for subject in &subjects {
        if let Err(e) = system.bus.subscribe(subject, Reach::Cluster, queue.clone()) {
            error!("system account: could not subscribe to {subject}: {e}");
        }
    }
    // Responders' halves of latency measurements this server started.
    let halves = format!(
        "{}{}",
        flotilla_core::latency::REMOTE_PREFIX,
        flotilla_core::latency::node_hash(server)
    );
    if let Err(e) = system.bus.subscribe(&halves, Reach::Cluster, queue.clone()) {
        error!("system account: could not subscribe to {halves}: {e}");
    }
    // Account requests, from the system account or through every
    // account's imports from it; who a user is, answered where it is.
    for s in requests::ACCOUNT_SERVICES {
        let subject = format!("$SYS.REQ.ACCOUNT.*.{}", s.name);
        if let Err(e) = system
            .bus
            .subscribe(&subject, Reach::Cluster, queue.clone())
        {
            error!("system account: could not subscribe to {subject}: {e}");
        }
    }
    if let Err(e) = system.bus.subscribe(NSUBS, Reach::Cluster, queue.clone()) {
        error!("system account: could not subscribe to {NSUBS}: {e}");
    }
    if let Err(e) = system
        .bus
        .subscribe("$SYS.REQ.USER.*.INFO", Reach::Local, queue.clone())
    {
        error!("system account: could not subscribe to user info: {e}");
    }
    // Other servers leaving.
    for subject in ["$SYS.SERVER.*.SHUTDOWN", "$SYS.SERVER.*.LAMEDUCK"] {
        if let Err(e) = system.bus.subscribe(subject, Reach::Cluster, queue.clone()) {
            error!("system account: could not subscribe to {subject}: {e}");
        }
    }
    match system
        .bus
        .subscribe("$SYS.SERVER.*.STATSZ", Reach::Cluster, queue)
    {
        Ok(sub) => *system.statsz_sub.lock() = Some(sub),
        Err(e) => error!("system account: could not subscribe to statsz: {e}"),
    }
    let (events_tx, events_rx) = mpsc::unbounded_channel();
    let _ = server.events.set(Arc::new(events::Events {
        tx: events_tx,
        system: Arc::downgrade(&system),
    }));
    tokio::spawn(answer_all(system.clone(), rx, events_rx));
    tokio::spawn(broadcast_statsz(system.clone()));
    Some(system)
}

/// The answering task: each request in turn, until shutdown.
async fn answer_all(
    system: Arc<System>,
    mut rx: mpsc::UnboundedReceiver<Request>,
    mut events: mpsc::UnboundedReceiver<events::Event>,
) {
    let mut shutdown = system.server.shutdown_signal();
    let mut publisher = system.bus.publisher();
    let mut conns = tokio::time::interval(CONNS_EVERY);
    conns.tick().await;
    loop {
        let request = tokio::select! {
            _ = shutdown.changed() => return,
            e = events.recv() => {
                if let Some(e) = e {
                    system.send_event(&e);
                }
                continue;
            }
            _ = conns.tick() => {
                system.repeat_conns();
                continue;
            }
            r = rx.recv() => match r {
                Some(r) => r,
                None => return,
            },
        };
        if let Some(from) = statsz_from(&request.subject) {
            system.heard(from);
            continue;
        }
        if let Some(from) = left_from(&request.subject) {
            system.peers.lock().remove(from);
            continue;
        }
        if request
            .subject
            .starts_with(flotilla_core::latency::REMOTE_PREFIX)
        {
            flotilla_core::latency::remote_half(&system.server, &request.body);
            continue;
        }
        let Some((to, body)) = system.answer(&request).await else {
            continue;
        };
        system.send(&mut publisher, &to, &body);
    }
}

/// `$G`, the account of clients no account names.
const GLOBAL: &str = "$G";

/// The account of a `$SYS.REQ.USER.<acc>.INFO` subject.
fn user_info_of(subject: &str) -> Option<&str> {
    subject
        .strip_prefix("$SYS.REQ.USER.")?
        .strip_suffix(".INFO")
        .filter(|a| !a.contains('.'))
}

/// The server id of a SHUTDOWN or LAMEDUCK event's subject.
fn left_from(subject: &str) -> Option<&str> {
    let rest = subject.strip_prefix("$SYS.SERVER.")?;
    rest.strip_suffix(".SHUTDOWN")
        .or_else(|| rest.strip_suffix(".LAMEDUCK"))
        .filter(|id| !id.contains('.'))
}

/// The server id of a statsz broadcast's subject.
fn statsz_from(subject: &str) -> Option<&str> {
    subject
        .strip_prefix("$SYS.SERVER.")?
        .strip_suffix(".STATSZ")
        .filter(|id| !id.contains('.'))
}

impl System {
    /// Publishes a client event's messages, each stamped in turn.
    fn send_event(&self, event: &events::Event) {
        if self.is_gone() {
            return;
        }
        if let events::Event::Conns { account } = event {
            // Never for the global account (nats-server's `accConnsUpdate`).
            if account == GLOBAL || account == "N/A" {
                return;
            }
        }
        let mut stamp = || self.identity.stamp();
        for (account, subject, body) in event.messages(&self.server, &mut stamp) {
            let mut publisher = match account {
                None => self.bus.publisher(),
                Some(name) => Bus::named(self.server.clone(), &name).publisher(),
            };
            self.send(&mut publisher, &subject, &body);
        }
    }

    /// Publishes `body` on `subject`, unless this server told the
    /// cluster it is leaving; `leaving` waits for it, so nothing follows
    /// its last message (a statsz computed meanwhile would bring it back
    /// into the others' count).
    fn send(&self, publisher: &mut Publisher, subject: &str, body: &[u8]) -> bool {
        let gone = self.gone.lock();
        if *gone {
            return false;
        }
        publisher.publish(subject, subject, None, None, body);
        publisher.flush();
        true
    }

    /// Tells the cluster this server is going (nats-server's
    /// `sendLDMShutdownEventLocked` and `shutdownEventing`): its bare
    /// `ServerInfo` on `$SYS.SERVER.<id>.LAMEDUCK` or `.SHUTDOWN`. The
    /// first is the last system message it sends, as nats-server's send
    /// loop ends there.
    fn leaving(&self, lame_duck: bool) {
        let mut gone = self.gone.lock();
        if *gone {
            return;
        }
        *gone = true;
        let what = if lame_duck { "LAMEDUCK" } else { "SHUTDOWN" };
        let subject = format!("$SYS.SERVER.{}.{what}", self.server.id);
        let body = serde_json::to_vec(&self.identity.stamp()).expect("json");
        let mut publisher = self.bus.publisher();
        publisher.publish(&subject, &subject, None, None, &body);
        publisher.flush();
    }

    /// Whether it told the cluster it is leaving.
    fn is_gone(&self) -> bool {
        *self.gone.lock()
    }

    /// Repeats the connection count of every account with connections.
    fn repeat_conns(&self) {
        for account in self.server.accounts.all() {
            if account.clients() > 0 {
                let name = account.name.clone();
                self.send_event(&events::Event::Conns { account: name });
            }
        }
    }

    /// Another server's statsz was heard: it counts as active.
    fn heard(&self, id: &str) {
        if id != self.server.id {
            self.peers.lock().insert(id.to_string(), Instant::now());
        }
    }

    /// This server and the others heard from lately.
    fn active_servers(&self) -> usize {
        let mut peers = self.peers.lock();
        peers.retain(|_, at| at.elapsed() < SERVER_GONE);
        peers.len() + 1
    }

    /// The answer to a request, and where it goes; `None` when this
    /// server stays silent.
    async fn answer(&self, request: &Request) -> Option<(String, Vec<u8>)> {
        if let Some((account, service)) = requests::account_service(&request.subject) {
            let reply = request.reply.clone()?;
            let body = self.answer_account(account, service, &request.body).await?;
            return Some((reply, body));
        }
        if request.subject == NSUBS {
            return Some((request.reply.clone()?, self.nsubs(&request.body)?));
        }
        if let Some(account) = user_info_of(&request.subject) {
            let reply = request.reply.clone()?;
            let info = request.info.as_deref();
            return Some((reply, self.user_info(account, info, request.publisher)));
        }
        let service = requests::service(&request.subject, &self.server.id)?;
        match &service.answer {
            // No reply: the statsz is broadcast instead, at once.
            Answer::Statsz if request.reply.is_none() => {
                let filter = requests::read_body(&request.body, &[]).ok()?.filter;
                if filter.excludes(&self.me()) {
                    return None;
                }
                *self.last_statsz.lock() = None;
                let _ = self.broadcast_statsz().await;
                None
            }
            Answer::Idz => {
                let reply = request.reply.clone()?;
                let id = self.identity.server_id();
                Some((reply, serde_json::to_vec(&id).expect("json")))
            }
            Answer::Kick | Answer::Ldm => {
                let reply = request.reply.clone()?;
                let body = self.client_action(&service.answer, &request.body)?;
                Some((reply, body))
            }
            Answer::Reload => {
                let reply = request.reply.clone()?;
                let done = match self.server.reloader.get() {
                    Some(reload) => reload(),
                    None => Err("reload not available".into()),
                };
                let body = match done {
                    Ok(()) => requests::response_done(&self.identity.stamp()),
                    Err(description) => self.refused(500, description),
                };
                Some((reply, body))
            }
            _ => {
                let reply = request.reply.clone()?;
                let body = self.answer_service(service, &request.body).await?;
                Some((reply, body))
            }
        }
    }

    /// A filtered service's answer: the statsz, or a monitoring
    /// endpoint's JSON in a `ServerAPIResponse`.
    async fn answer_service(&self, service: &Service, body: &[u8]) -> Option<Vec<u8>> {
        let options = match &service.answer {
            Answer::Monitor { options, .. } => options,
            _ => &[][..],
        };
        let read = match requests::read_body(body, options) {
            Ok(read) => read,
            Err(description) => return Some(self.refused(400, description)),
        };
        if read.filter.excludes(&self.me()) {
            return None;
        }
        let path = match &service.answer {
            Answer::Monitor { path, .. } => path,
            _ => return Some(self.statsz().await),
        };
        let query = Query::from_pairs(read.query);
        let data = match self.endpoints.reply(path, &query, false).await? {
            Reply::Json { status, body } if *path == "/healthz" => {
                Ok(requests::with_status_code(&body, status))
            }
            Reply::Json { body, .. } => Ok(body),
            // Filtered out (`leader_only` on a follower): no answer.
            Reply::BadRequest(description) if description == monitor::jsz::NOT_LEADER => {
                return None
            }
            // nats-server answers an endpoint's own error with a 500.
            Reply::BadRequest(description) => Err(ApiError {
                code: 500,
                description,
            }),
            // `/raftz` without Raft groups: nothing to show.
            Reply::NotFound(_) => Ok(b"{}".to_vec()),
        };
        let stamp = self.identity.stamp();
        Some(match data {
            Ok(json) => requests::response(&stamp, Ok(&json)),
            Err(e) => requests::response(&stamp, Err(e)),
        })
    }

    /// `KICK` or `LDM` of the client the body's `cid` names
    /// (nats-server's `kickClient` and `ldmClient`): a body that does not
    /// decode is not answered.
    fn client_action(&self, action: &Answer, body: &[u8]) -> Option<Vec<u8>> {
        let req: serde_json::Value = serde_json::from_slice(body).ok()?;
        let cid = req["cid"].as_u64().unwrap_or(0);
        let client = self.server.clients.lock().get(&cid).cloned();
        let done = match (action, client) {
            (Answer::Kick, Some(c)) => {
                c.close(flotilla_core::client::ClosedState::Kicked);
                Ok(())
            }
            (Answer::Kick, None) => Err("no such client or leafnode id"),
            (_, Some(c)) => {
                self.server.tell_lame_duck(&c);
                Ok(())
            }
            (_, None) => Err("no such client id"),
        };
        Some(match done {
            Ok(()) => requests::response_done(&self.identity.stamp()),
            Err(why) => self.refused(500, why.to_string()),
        })
    }

    /// A monitoring endpoint's answer as `data`, or its error (500).
    async fn monitor_data(&self, path: &str, query: Query) -> Result<Vec<u8>, ApiError> {
        match self.endpoints.reply(path, &query, false).await {
            Some(Reply::Json { body, .. }) => Ok(body),
            Some(Reply::BadRequest(description)) | Some(Reply::NotFound(description)) => {
                Err(ApiError {
                    code: 500,
                    description,
                })
            }
            None => Err(ApiError {
                code: 500,
                description: format!("no endpoint {path}"),
            }),
        }
    }

    async fn monitor_json(&self, path: &str, query: Query) -> serde_json::Value {
        match self.monitor_data(path, query).await {
            Ok(json) => serde_json::from_slice(&json).unwrap_or_default(),
            Err(_) => serde_json::Value::Null,
        }
    }

    /// A `ServerAPIResponse` carrying nats-server's error `code`.
    fn refused(&self, code: u16, description: String) -> Vec<u8> {
        let e = ApiError { code, description };
        requests::response(&self.identity.stamp(), Err(e))
    }

    /// What a request's filter is checked against.
    fn me(&self) -> Me {
        let opts = self.server.opts();
        Me {
            name: self.server.name.clone(),
            cluster: self.identity.cluster(),
            host: opts.host.clone(),
            tags: opts.server_tags.clone(),
            domain: opts.jetstream.domain.clone().unwrap_or_default(),
        }
    }

    /// This server's `ServerStatsMsg`.
    async fn statsz(&self) -> Vec<u8> {
        let json = |r: Option<Reply>| match r {
            Some(Reply::Json { body, .. }) => serde_json::from_slice(&body).unwrap_or_default(),
            _ => serde_json::Value::Null,
        };
        let empty = Query::from_pairs([]);
        let varz = json(self.endpoints.reply("/varz", &empty, false).await);
        let routez = json(self.endpoints.reply("/routez", &empty, false).await);
        let counts = statsz::Counts {
            active_accounts: self.active_accounts(),
            active_servers: self.active_servers(),
            jetstream: self.server.opts().jetstream.enabled,
        };
        let msg = statsz::StatsMsg {
            server: self.identity.stamp(),
            statsz: statsz::ServerStats::from_monitoring(&varz, &routez, counts),
        };
        serde_json::to_vec(&msg).expect("statsz serializes")
    }

    /// Accounts with a client here; the system account always, as
    /// nats-server's internal client is one of its clients.
    fn active_accounts(&self) -> usize {
        let system = self.server.opts().system_account().map(str::to_string);
        self.server
            .accounts
            .all()
            .iter()
            .filter(|a| a.clients() > 0 || Some(&a.name) == system.as_ref())
            .count()
    }

    /// Sends this server's statsz on `$SYS.SERVER.<id>.STATSZ`, at most
    /// once a second; a server without routes or leaf nodes sends it
    /// only when someone listens (nats-server's `sendStatsz`). Returns,
    /// when it was too soon, how long until it may.
    async fn broadcast_statsz(&self) -> Option<Duration> {
        if self.is_gone() {
            return None;
        }
        {
            let mut last = self.last_statsz.lock();
            if let Some(since) = last.map(|t| t.elapsed()).filter(|e| *e < STATSZ_LIMIT) {
                return Some(STATSZ_LIMIT - since);
            }
            *last = Some(Instant::now());
        }
        let subject = format!("$SYS.SERVER.{}.STATSZ", self.server.id);
        let opts = self.server.opts();
        let alone = !opts.cluster.enabled()
            && !opts.leafnodes.accepts()
            && opts.leafnodes.remotes.is_empty();
        if alone {
            let mine = self.statsz_sub.lock().clone();
            let mine: Vec<&Subscription> = mine.iter().map(|s| s.as_ref()).collect();
            if !self.bus.others_listen(subject.as_bytes(), &mine) {
                return None;
            }
        }
        let body = self.statsz().await;
        let mut publisher = self.bus.publisher();
        if self.send(&mut publisher, &subject, &body) {
            debug!("system account: statsz sent");
        }
        None
    }
}

/// The statsz heartbeat: after 250 ms, then at doubling intervals up to
/// every 10 s, until shutdown; one held back by the rate limit goes out
/// as soon as the limit allows (nats-server's `heartbeatStatsz` and
/// `limitStatsz`: at about 0.25, 1.25, 3.25, 7.25, 15.25 and 25.25 s,
/// then every 10 s).
async fn broadcast_statsz(system: Arc<System>) {
    let mut shutdown = system.server.shutdown_signal();
    let (mut every, mut next) = (STATSZ_FIRST, STATSZ_FIRST);
    loop {
        tokio::select! {
            _ = shutdown.changed() => return,
            _ = tokio::time::sleep(next) => {}
        }
        every = (every * 2).min(STATSZ_EVERY);
        next = system.broadcast_statsz().await.unwrap_or(every);
    }
}
