//! The JetStream API requests the meta leader answers for the account, as
//! nats-server's meta leader does: account info, stream create and
//! delete, stream names and lists, and "not found" for requests about
//! streams that do not exist (an existing stream's own leader answers
//! those; see `streams`).
//!
//! A create is decided here — the config checked as on a single server,
//! subjects against every stream's, peers placed — and becomes a
//! `MetaOp::AssignStream`. The stream's first leader answers it once the
//! stream is up, so a client that has its answer can publish at once.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use jetstream::api::{ApiError, ConsumerConfig, StreamConfig, StreamInfo, E};
use jsservice::account::{self, Decision, Usage};
use jsservice::meta_sm::{MetaOp, StreamAssignment, META_GROUP};
use jsservice::placement::{self, Candidate};
use jsservice::reply::{Answer, Consumers, Kind, Paged};
use jsservice::request::{classify, stream_of, AccountRequest, Inbound, Mode, Request};
use jsservice::stream_api;
use parking_lot::Mutex;
use tokio::sync::mpsc;

use super::requests::Requests;
use super::JsCluster;
use crate::js::{new_consumer_name, wall_clock, JetStream};
use flotilla_core::bus::Publisher as InternalPublisher;
use flotilla_core::bus::Subscription;
use jsservice::request::RESPONSE_TYPE;
/// How long a create is given to be applied before the next request.
const CREATE_SETTLE: Duration = Duration::from_secs(2);
/// How long a delete waits for the meta group to apply it.
const DELETE_WAIT: Duration = Duration::from_secs(10);
/// How long a list waits for each stream's leader to tell its info.
const LIST_WAIT: Duration = Duration::from_secs(2);
/// How long a create of a stream that exists waits for its leader.
const EXISTS_WAIT: Duration = Duration::from_secs(8);
/// How long the meta leader waits before it answers for a stream with no
/// leader (nats-server's `errRespDelay`).
const LEADERLESS_ANSWER_AFTER: Duration = Duration::from_millis(500);
/// How long a create of an existing stream waits before asking its
/// leader again, when the group had none yet.
const LEADER_RETRY: Duration = Duration::from_millis(100);

/// Whether an API answer is nats-server's 10008 "JetStream system
/// temporarily unavailable", as a leaderless group is answered.
fn unavailable(body: &[u8]) -> bool {
    serde_json::from_slice::<serde_json::Value>(body).is_ok_and(|v| {
        v["error"]["err_code"].as_u64() == Some(u64::from(E::CLUSTER_NOT_AVAIL.err_code))
    })
}

const SUBJECTS: &[&str] = &[
    "$JS.API.INFO",
    "$JS.API.STREAM.CREATE.*",
    "$JS.API.STREAM.UPDATE.*",
    "$JS.API.STREAM.DELETE.*",
    "$JS.API.STREAM.NAMES",
    "$JS.API.STREAM.LIST",
    // For streams that do not exist.
    "$JS.API.STREAM.INFO.*",
    "$JS.API.STREAM.PURGE.*",
    "$JS.API.STREAM.MSG.GET.*",
    "$JS.API.STREAM.MSG.DELETE.*",
    "$JS.API.STREAM.LEADER.STEPDOWN.*",
    "$JS.API.STREAM.PEER.REMOVE.*",
    "$JS.API.CONSUMER.CREATE.*",
    "$JS.API.CONSUMER.CREATE.*.>",
    "$JS.API.CONSUMER.DURABLE.CREATE.*.*",
    "$JS.API.CONSUMER.INFO.*.*",
    "$JS.API.CONSUMER.DELETE.*.*",
    "$JS.API.CONSUMER.NAMES.*",
    "$JS.API.CONSUMER.LIST.*",
    "$JS.API.CONSUMER.LEADER.STEPDOWN.*.*",
    "$JS.API.CONSUMER.PAUSE.*.*",
];

/// One account's subscriptions, held while this server leads the meta
/// group: each account's requests are decided by its own task, against
/// its own streams and limits.
pub struct AccountApi {
    js: Arc<JetStream>,
    subs: Arc<Mutex<Vec<Arc<Subscription>>>>,
    tx: mpsc::UnboundedSender<Inbound>,
}

impl AccountApi {
    pub fn start(jc: Arc<JsCluster>, js: Arc<JetStream>) -> Arc<AccountApi> {
        let (tx, rx) = mpsc::unbounded_channel();
        let subs = Arc::new(Mutex::new(Vec::new()));
        let api = Arc::new(AccountApi {
            js: js.clone(),
            subs: subs.clone(),
            tx,
        });
        tokio::spawn(serve(jc, js, subs, rx));
        api
    }

    pub fn follow_leadership(&self, leading: bool) {
        let js = Some(&self.js);
        super::leading::follow(&self.js.bus, &self.subs, SUBJECTS, &self.tx, leading, js);
    }
}

struct Api {
    jc: Arc<JsCluster>,
    js: Arc<JetStream>,
    /// The meta leader's own subscriptions (`AccountApi`'s).
    own: Arc<Mutex<Vec<Arc<Subscription>>>>,
    publisher: InternalPublisher,
    requests: Arc<Requests>,
}

async fn serve(
    jc: Arc<JsCluster>,
    js: Arc<JetStream>,
    own: Arc<Mutex<Vec<Arc<Subscription>>>>,
    mut rx: mpsc::UnboundedReceiver<Inbound>,
) {
    let mut api = Api {
        own,
        publisher: js.bus.publisher(),
        requests: Arc::new(Requests::start(js.bus.clone(), jc.me.id)),
        js,
        jc,
    };
    while let Some(m) = rx.recv().await {
        // The subscriptions follow leadership a moment late; a server
        // that no longer leads stays silent.
        if !api.jc.meta_status().is_some_and(|g| g.is_leader) {
            continue;
        }
        let settle = api.request(m).await;
        api.publisher.flush();
        // A create is applied before the next request is decided, so two
        // creates in a row are checked against each other (names,
        // subjects).
        if let Some(name) = settle {
            let start = tokio::time::Instant::now();
            while api.jc.meta.lock().stream(&api.js.account, &name).is_none()
                && start.elapsed() < CREATE_SETTLE
            {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        }
    }
}

/// A stream's peers without `peer`, with a server that is up and holds
/// none of it in its place if there is one (`placement::remap`).
pub fn remap(jc: &JsCluster, a: &StreamAssignment, peer: u64, require: bool) -> Option<Vec<u64>> {
    let tags = jc.live_tags();
    let meta = jc.meta.lock();
    let ids: Vec<u64> = meta.peers().map(|p| p.id).collect();
    let candidates = candidates(&ids, &tags, &meta);
    placement::remap(&a.peers, peer, &candidates, require)
}

/// The servers `ids` as placement candidates: their tags if up, and the
/// streams each holds.
fn candidates<'a>(
    ids: &[u64],
    tags: &'a BTreeMap<u64, Vec<String>>,
    meta: &jsservice::meta_sm::Meta,
) -> Vec<Candidate<'a>> {
    ids.iter()
        .map(|&id| Candidate {
            id,
            tags: tags.get(&id).map(Vec::as_slice),
            load: meta.streams().filter(|s| s.peers.contains(&id)).count(),
        })
        .collect()
}

/// What the meta leader answers about a stream that does not exist:
/// "stream not found", except that nats-server's lists its consumers as
/// none.
fn not_found(to: &str, kind: Kind) -> Answer {
    if kind == Kind::ConsumerList {
        let body = Paged {
            total: 0,
            offset: 0,
            limit: 256,
            rest: Consumers {
                consumers: Vec::<()>::new(),
            },
        };
        return Answer::ok(to, kind, &body);
    }
    Answer::refused(to, kind, &E::STREAM_NOT_FOUND.err())
}

/// Every server's catch-all for the JetStream API (`$JS.API.>`, local):
/// as on nats-server, where every server listens there, a request to a
/// subject nobody answers gets no reply rather than no-responders; a
/// pull or direct get for a stream that does not exist still hears that
/// nothing is subscribed.
pub struct CatchAll {
    pub jc: std::sync::Weak<JsCluster>,
    pub js: Arc<JetStream>,
    /// Its own subscription, once made.
    pub me: std::sync::OnceLock<Arc<flotilla_core::bus::Subscription>>,
}

/// Every API request delivered on this server (its clients', or one
/// routed here) comes here too. One that found nobody else listening is
/// answered at once (`request::unserved`),
/// where it would otherwise wait out the client's timeout: a pull or a
/// direct get (no server leads its stream) with no responders, as
/// nats-server's core answers; an API request with 10008 only when this
/// server sees no meta leader it can reach, as nats-server's servers
/// answer while the meta group is leaderless (with one, its interest
/// may not have arrived here yet: the request waits, as before).
impl flotilla_core::bus::Sink for CatchAll {
    fn deliver(&self, msg: flotilla_core::bus::Message<'_>) {
        let (Some(jc), Some(me)) = (self.jc.upgrade(), self.me.get()) else {
            return;
        };
        let Some(reply) = msg.reply.filter(|r| !r.is_empty()) else {
            return;
        };
        if self.js.bus.others_listen(msg.subject, &[me.as_ref()]) {
            return;
        }
        let subject = String::from_utf8_lossy(msg.subject);
        let reply = String::from_utf8_lossy(reply);
        let Some(a) = jsservice::request::unserved(&subject, &reply) else {
            return;
        };
        // Before the cluster's first meta leader, requests wait for it.
        let answer = match a.count() {
            jsservice::reply::Count::No => true,
            _ => {
                jc.meta_was_led.load(std::sync::atomic::Ordering::Relaxed)
                    && !jc
                        .meta_status()
                        .is_some_and(|g| jc.reaches_leader(g.leader))
            }
        };
        if answer {
            self.js.count(a.count());
            self.js.bounce(a.msg);
        }
    }
}

/// What a task answering later needs.
#[derive(Clone)]
struct Detached {
    jc: Arc<JsCluster>,
    js: Arc<JetStream>,
}

impl Detached {
    fn send(&self, a: Answer) {
        let mut p = self.js.bus.publisher();
        self.js.answer(&mut p, &a);
        p.flush();
    }
}

impl Api {
    fn detached(&self) -> Detached {
        Detached {
            jc: self.jc.clone(),
            js: self.js.clone(),
        }
    }

    fn send(&mut self, a: Answer) {
        self.js.answer(&mut self.publisher, &a);
    }

    /// The assignment of this account's stream `name`.
    fn assigned(&self, name: &str) -> Option<StreamAssignment> {
        self.jc.meta.lock().stream(&self.js.account, name).cloned()
    }

    /// Answers (or starts answering) one request. Returns the name of a
    /// stream whose creation was proposed.
    async fn request(&mut self, m: Inbound) -> Option<String> {
        // About one stream: its leader answers if it exists, and nats-
        // server's meta leader says it does not before reading the body.
        if let Some((stream, kind)) = stream_of(&m.subject) {
            let group = self.assigned(stream).map(|a| a.group);
            if let Some(group) = group {
                self.answer_if_leaderless(group, &m.subject, m.reply.as_deref(), kind);
                return None;
            }
            if let Some(to) = m.reply.as_deref() {
                self.send(not_found(to, kind));
            }
            return None;
        }
        let subject = m.subject.clone();
        match classify(m, Mode::Clustered, &mut new_consumer_name) {
            Request::Answer(a) => self.send(a),
            Request::Account { reply, request } => return self.account(&reply, request).await,
            // A consumer create, its body read: answered by the stream's
            // leader if the stream exists.
            Request::Stream {
                stream,
                reply,
                request,
            } => {
                let group = self.assigned(&stream).map(|a| a.group);
                match group {
                    Some(group) => {
                        self.answer_if_leaderless(group, &subject, reply.as_deref(), request.kind())
                    }
                    None => {
                        if let Some(a) = stream_api::missing(&stream, reply.as_deref(), &request) {
                            self.send(a);
                        }
                    }
                }
            }
            Request::Ignore | Request::Operator { .. } => {}
        }
        None
    }

    /// A request about an existing stream, which its leader answers: if
    /// its group has no leader that serves it, nats-server's 503
    /// "JetStream system temporarily unavailable" (10008), as its servers
    /// answer for a leaderless group. A leader that does not serve is one
    /// none elected, one whose route is gone, or one elected that has not
    /// yet subscribed (still applying what was committed before it took
    /// over): none of them got the request, and nats-server would leave
    /// it unanswered. After `LEADERLESS_ANSWER_AFTER`, as nats-server
    /// delays it, so a leader that did get the request answers first.
    fn answer_if_leaderless(&self, group: u64, subject: &str, reply: Option<&str>, kind: Kind) {
        let Some(to) = reply else { return };
        let leader = self.jc.node.status().group(group).map(|g| g.leader);
        // Not a member: it cannot say (nor can nats-server's).
        let Some(leader) = leader else { return };
        if self.jc.reaches_leader(leader) && self.served(subject) {
            return;
        }
        let (api, to) = (self.detached(), to.to_string());
        tokio::spawn(async move {
            tokio::time::sleep(LEADERLESS_ANSWER_AFTER).await;
            api.send(Answer::refused(&to, kind, &E::CLUSTER_NOT_AVAIL.err()));
        });
    }

    /// Whether anyone but this meta leader (its own subscriptions and the
    /// account's catch-all) listens on `subject`, here or over a route:
    /// the stream's leader, once it serves.
    fn served(&self, subject: &str) -> bool {
        let own = self.own.lock();
        let catch_all = self.jc.catch_all(&self.js.account);
        let mine: Vec<&Subscription> = own
            .iter()
            .map(|s| s.as_ref())
            .chain(catch_all.as_deref())
            .collect();
        self.js.bus.others_listen(subject.as_bytes(), &mine)
    }

    async fn account(&mut self, to: &str, request: AccountRequest) -> Option<String> {
        let kind = request.kind();
        let decision = {
            let meta = self.jc.meta.lock();
            let streams = meta.account(&self.js.account);
            account::decide(&streams, self.js.limits(), Mode::Clustered, to, request)
        };
        let answer = match decision {
            Decision::Answer(a) => a,
            Decision::Create(config) => {
                let name = config.name.clone();
                return match self.create(*config, to) {
                    // Answered by the stream's first leader.
                    Ok(()) => Some(name),
                    Err(e) => {
                        self.send(Answer::refused(to, kind, &e));
                        None
                    }
                };
            }
            // The same config again: the stream's leader answers with its
            // info, as a create's answer (nats-server forwards it so); a
            // stream just created may not have one serving yet.
            Decision::Exists(name) => {
                let (requests, api, to) = (self.requests.clone(), self.detached(), to.to_string());
                tokio::spawn(async move {
                    let headers = jetstream::headers::build(None, &[(RESPONSE_TYPE, "create")]);
                    let subject = format!("$JS.API.STREAM.INFO.{name}");
                    let deadline = tokio::time::Instant::now() + EXISTS_WAIT;
                    while tokio::time::Instant::now() < deadline {
                        let asked = requests.request(&subject, Some(&headers), b"", LIST_WAIT);
                        let Some(body) = asked.await else { continue };
                        // The group's leader not elected yet: this server's
                        // own "unavailable" for the info ask, not an answer
                        // to the create while there is time to wait.
                        let last = tokio::time::Instant::now() + LEADER_RETRY >= deadline;
                        if unavailable(&body) && !last {
                            tokio::time::sleep(LEADER_RETRY).await;
                            continue;
                        }
                        let kind = Kind::StreamCreate;
                        api.send(Answer::api(&to, kind, body, jsservice::reply::Count::Call));
                        return;
                    }
                });
                return None;
            }
            Decision::Update(config) => match self.consumers_allow(&config).await {
                Err(e) => Answer::refused(to, kind, &e),
                Ok(()) => match self.update(*config, to) {
                    Ok(()) => return None,
                    Err(e) => Answer::refused(to, kind, &e),
                },
            },
            Decision::Delete(name) => match self.delete(&name, to) {
                Ok(()) => return None,
                Err(e) => Answer::refused(to, kind, &e),
            },
            Decision::List {
                names,
                total,
                offset,
            } => {
                // Each stream's info from its leader, as nats-server
                // gathers them; a stream whose leader does not answer in
                // time is left out.
                let asks = names.iter().map(|name| {
                    let subject = format!("$JS.API.STREAM.INFO.{name}");
                    let requests = &self.requests;
                    async move { requests.request(&subject, None, b"", LIST_WAIT).await }
                });
                let infos = futures_util::future::join_all(asks)
                    .await
                    .into_iter()
                    .flatten()
                    .filter_map(|b| serde_json::from_slice::<StreamInfo>(&b).ok())
                    .map(|mut info| {
                        jsservice::reply::unstamp_stream(&mut info);
                        info
                    })
                    .collect();
                account::list(to, total, offset, infos)
            }
            Decision::Info => {
                let meta = self.jc.meta.lock().clone();
                account::info(
                    to,
                    &meta.account(&self.js.account),
                    self.usage(&meta),
                    &self.js.account_limits,
                    self.js.domain.as_deref(),
                )
            }
            Decision::PeerRemove { name, peer } => match self.peer_remove(&name, &peer) {
                Ok(()) => Answer::ok(to, kind, &jsservice::reply::Success { success: true }),
                Err(e) => Answer::refused(to, kind, &e),
            },
        };
        self.send(answer);
        None
    }

    /// Counted from the meta state (streams) and this server's replicas
    /// (consumers and usage of the streams it holds).
    fn usage(&self, meta: &jsservice::meta_sm::Meta) -> Usage {
        use std::sync::atomic::Ordering;
        let (memory, storage) = self.js.usage();
        let streams = meta.account(&self.js.account);
        let mut usage = Usage {
            memory,
            storage,
            streams: streams.count() as u64,
            consumers: self
                .js
                .streams()
                .iter()
                .map(|h| h.consumers.load(Ordering::Relaxed))
                .sum(),
            total: self.js.api_total.load(Ordering::Relaxed),
            errors: self.js.api_errors.load(Ordering::Relaxed),
            tiers: Default::default(),
        };
        // Streams from the meta state (every one, held here or not);
        // bytes and consumers from this server's replicas.
        self.js.tier_usage(&mut usage, false);
        for c in account::Streams::configs(&meta.account(&self.js.account)).values() {
            usage.tier(c.num_replicas).streams += 1;
        }
        usage
    }

    /// Whether the stream's consumers fit new consumer limits, asked of
    /// the stream's leader (the consumers live in the stream's group) only
    /// when the limits tighten. The stream machine checks again when it
    /// applies the config; this keeps a refused config out of the meta
    /// state.
    async fn consumers_allow(&self, new: &StreamConfig) -> Result<(), ApiError> {
        let old = self.assigned(&new.name).map(|a| a.config);
        let Some(old) = old.and_then(|c| serde_json::from_str::<StreamConfig>(&c).ok()) else {
            return Ok(());
        };
        if !jetstream::stream::config::tightens_consumer_limits(&old, new) {
            return Ok(());
        }
        let unchecked = || {
            E::STREAM_UPDATE.with(
                "err",
                "the stream's consumers could not be checked against the new limits",
            )
        };
        let subject = format!("$JS.API.CONSUMER.LIST.{}", new.name);
        let mut consumers: Vec<(String, ConsumerConfig)> = Vec::new();
        loop {
            let body = serde_json::json!({ "offset": consumers.len() }).to_string();
            let page = self
                .requests
                .request(&subject, None, body.as_bytes(), LIST_WAIT)
                .await
                .and_then(|b| consumer_page(&b))
                .ok_or_else(unchecked)?;
            let more = !page.consumers.is_empty();
            consumers.extend(page.consumers.into_iter().map(|c| (c.name, c.config)));
            if !more || consumers.len() >= page.total {
                break;
            }
        }
        jetstream::stream::config::check_consumer_limits(
            &old,
            new,
            consumers
                .iter()
                .map(|(name, config)| (name.as_str(), config)),
        )
    }

    /// Places a new stream's peers and proposes its assignment.
    fn create(&mut self, cfg: StreamConfig, reply: &str) -> Result<(), ApiError> {
        let n = cfg.num_replicas.max(1) as usize;
        let peers = self.place(&cfg, &[], n)?;
        let op = MetaOp::AssignStream {
            account: self.js.account.clone(),
            name: cfg.name.clone(),
            config: serde_json::to_string(&cfg).expect("config serializes"),
            peers,
            created: wall_clock(),
            reply: reply.to_string(),
        };
        self.jc
            .node
            .propose(META_GROUP, op.encode())
            .map_err(|_| E::CLUSTER_NOT_LEADER.err())
    }

    /// `n` peers for a stream, none of `except`: among the JetStream
    /// servers that are up, those holding the fewest streams first
    /// (`placement::place`).
    fn place(
        &self,
        cfg: &StreamConfig,
        except: &[u64],
        n: usize,
    ) -> Result<Vec<u64>, jetstream::api::ApiError> {
        let cluster = self.jc.server.cluster_name();
        let tags = self.jc.live_tags();
        // A just-founded meta group has voters before the leader's next
        // pass names them; naming them here, ahead of the assignment in
        // the log, lets a stream go to a cluster the moment it has a
        // leader, as with nats-server.
        let voters = self.jc.meta_status().map(|g| g.voters).unwrap_or_default();
        let naming = self.jc.name_voters(&voters);
        let meta = self.jc.meta.lock();
        // A name proposed earlier (by the leader's pass) may have applied
        // since `name_voters` looked: each peer counts once.
        let mut all: Vec<u64> = meta.peers().map(|p| p.id).collect();
        for id in naming {
            if !all.contains(&id) {
                all.push(id);
            }
        }
        let candidates = candidates(&all, &tags, &meta);
        placement::place(cfg, &cluster, &candidates, except, n)
    }

    /// A new config, and new peers when the replica count changes: more
    /// are placed like a create's; fewer keep the stream's leader where
    /// this server knows it. The stream's leader then brings its group
    /// there (`streams`). Answered once the meta group has it.
    fn update(&mut self, cfg: StreamConfig, reply: &str) -> Result<(), ApiError> {
        let name = cfg.name.clone();
        let a = self
            .assigned(&name)
            .ok_or_else(|| E::STREAM_NOT_FOUND.err())?;
        let n = cfg.num_replicas.max(1) as usize;
        let mut peers = a.peers.clone();
        if n > peers.len() {
            let more = self.place(&cfg, &peers, n - peers.len())?;
            peers.extend(more);
        } else if n < peers.len() {
            let status = self.jc.node.status();
            let leader = status.group(a.group).map_or(0, |g| g.leader);
            // Keep the leader, then the first named.
            peers.sort_by_key(|p| *p != leader);
            peers.truncate(n);
        }
        let op = MetaOp::UpdateStream {
            account: a.account.clone(),
            name: name.clone(),
            config: serde_json::to_string(&cfg).expect("config serializes"),
            peers,
            // Answered by the stream's leader once it applies the config.
            reply: reply.to_string(),
        };
        self.jc
            .node
            .propose(META_GROUP, op.encode())
            .map_err(|_| E::CLUSTER_NOT_LEADER.err())
    }

    /// Takes a server off a stream, placing another in its stead (the
    /// replica count stays; without a server to take its place the
    /// request fails, as nats-server's does).
    fn peer_remove(&mut self, name: &str, peer: &str) -> Result<(), ApiError> {
        let a = self
            .assigned(name)
            .ok_or_else(|| E::STREAM_NOT_FOUND.err())?;
        // A server's name, or nats-server's hash of it.
        let id = a
            .peers
            .iter()
            .copied()
            .find(|&p| {
                let n = self.jc.peer_name(p).unwrap_or_default();
                n == peer || super::peer_hash(&n) == peer
            })
            .ok_or_else(|| E::CLUSTER_PEER_NOT_MEMBER.err())?;
        let peers = remap(&self.jc, &a, id, true).ok_or_else(|| E::PEER_REMAP.err())?;
        let op = MetaOp::UpdateStream {
            account: a.account.clone(),
            name: name.to_string(),
            config: a.config.clone(),
            peers,
            reply: String::new(),
        };
        self.jc
            .node
            .propose(META_GROUP, op.encode())
            .map_err(|_| E::CLUSTER_NOT_LEADER.err())
    }

    fn delete(&mut self, name: &str, reply: &str) -> Result<(), ApiError> {
        let op = MetaOp::RemoveStream {
            account: self.js.account.clone(),
            name: name.to_string(),
        };
        self.jc
            .node
            .propose(META_GROUP, op.encode())
            .map_err(|_| E::CLUSTER_NOT_LEADER.err())?;
        // Answered once the removal is applied here.
        let api = self.detached();
        let (name, reply) = (name.to_string(), reply.to_string());
        tokio::spawn(async move {
            let start = tokio::time::Instant::now();
            while api.jc.meta.lock().stream(&api.js.account, &name).is_some() {
                if start.elapsed() > DELETE_WAIT {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            api.send(account::deleted(&reply));
        });
        Ok(())
    }
}

/// A consumer list's page, unless the answer is an error.
fn consumer_page(body: &[u8]) -> Option<ConsumerPage> {
    serde_json::from_slice::<ConsumerPage>(body)
        .ok()
        .filter(|page| page.error.is_none())
}

/// One page of a consumer list, as much of it as the limits check reads.
#[derive(serde::Deserialize)]
struct ConsumerPage {
    /// An answer with an error (a leaderless group's 10008) lists
    /// nothing: the check cannot pass on it.
    #[serde(default)]
    error: Option<serde_json::Value>,
    #[serde(default)]
    total: usize,
    #[serde(default)]
    consumers: Vec<ListedConsumer>,
}

#[derive(serde::Deserialize)]
struct ListedConsumer {
    name: String,
    config: ConsumerConfig,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A create of an existing stream waits out only a leaderless group's
    /// 10008; anything else the leader says is the create's answer, and a
    /// consumer page that is an error never passes the limits check.
    #[test]
    fn what_a_leader_answer_counts_as() {
        let rows: &[(&str, bool, bool)] = &[
            // body, unavailable, a page that lists consumers
            (r#"{"error":{"code":503,"err_code":10008}}"#, true, false),
            (r#"{"error":{"code":404,"err_code":10059}}"#, false, false),
            (
                r#"{"config":{"name":"S"},"total":0,"consumers":[]}"#,
                false,
                true,
            ),
            ("not json", false, false),
        ];
        for &(body, down, listed) in rows {
            assert_eq!(unavailable(body.as_bytes()), down, "{body}");
            let page = consumer_page(body.as_bytes());
            assert_eq!(page.is_some(), listed, "{body}");
        }
    }
}
