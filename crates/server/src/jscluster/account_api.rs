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

use std::sync::Arc;
use std::time::Duration;

use jetstream::api::{
    AccountInfo, AccountLimits, ApiStats, StreamConfig, StreamInfo, StreamNamesRequest, E,
};
use jsservice::meta_sm::{MetaOp, StreamAssignment, META_GROUP};
use parking_lot::Mutex;
use tokio::sync::mpsc;

use super::JsCluster;
use crate::internal::InternalPublisher;
use crate::js::api::{api_level_ok, endpoint, is_empty_request, optional, Dispatcher, Refusal};
use crate::js::response::{self, Created, Kind, Paged, Streams, Success};
use crate::js::{wall_clock, Inbound, JetStream};
use crate::server::Server;
use crate::subscription::Subscription;

const NAMES_LIMIT: usize = 1024;
const LIST_LIMIT: usize = 256;
/// How long a create is given to be applied before the next request.
const CREATE_SETTLE: Duration = Duration::from_secs(2);
/// How long a delete or update waits for the meta group to apply it.
const DELETE_WAIT: Duration = Duration::from_secs(10);

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

/// The subscriptions, held while this server leads the meta group.
pub struct AccountApi {
    subs: Mutex<Vec<Arc<Subscription>>>,
    tx: mpsc::UnboundedSender<Inbound>,
}

impl AccountApi {
    pub fn start(server: Arc<Server>, jc: Arc<JsCluster>, js: Arc<JetStream>) -> Arc<AccountApi> {
        let (tx, rx) = mpsc::unbounded_channel();
        let api = Arc::new(AccountApi {
            subs: Mutex::new(Vec::new()),
            tx,
        });
        tokio::spawn(serve(server, jc, js, rx));
        api
    }

    pub fn follow_leadership(&self, server: &Arc<Server>, leading: bool) {
        super::api::follow(server, &self.subs, SUBJECTS, &self.tx, leading);
    }
}

struct Api {
    server: Arc<Server>,
    jc: Arc<JsCluster>,
    js: Arc<JetStream>,
    publisher: InternalPublisher,
}

async fn serve(
    server: Arc<Server>,
    jc: Arc<JsCluster>,
    js: Arc<JetStream>,
    mut rx: mpsc::UnboundedReceiver<Inbound>,
) {
    let mut api = Api {
        publisher: InternalPublisher::new(server.clone()),
        server,
        jc,
        js,
    };
    while let Some(m) = rx.recv().await {
        // The subscriptions follow leadership a moment late; a server
        // that no longer leads stays silent.
        if !api.jc.meta_status().is_some_and(|g| g.is_leader) {
            continue;
        }
        let settle = api.request(m);
        api.publisher.flush();
        // A create is applied before the next request is decided, so two
        // creates in a row are checked against each other (names,
        // subjects).
        if let Some(name) = settle {
            let start = tokio::time::Instant::now();
            while api.jc.meta.lock().stream(&name).is_none() && start.elapsed() < CREATE_SETTLE {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        }
    }
}

/// A stream's peers without `peer`, with a server that is up and holds
/// none of it in its place if there is one (the least loaded). None if
/// `require`d and there is none, or if no peer would be left.
pub fn remap(
    server: &Server,
    jc: &JsCluster,
    a: &StreamAssignment,
    peer: u64,
    require: bool,
) -> Option<Vec<u64>> {
    let routed = jc.routed_ids(server);
    let meta = jc.meta.lock();
    let load = |id: u64| meta.streams().filter(|s| s.peers.contains(&id)).count();
    let spare = meta
        .peers()
        .map(|p| p.id)
        .filter(|id| *id != peer && !a.peers.contains(id))
        .filter(|id| *id == jc.me.id || routed.contains(id))
        .min_by_key(|&id| (load(id), id));
    if spare.is_none() && require {
        return None;
    }
    let peers: Vec<u64> = a
        .peers
        .iter()
        .map(|&p| if p == peer { spare.unwrap_or(0) } else { p })
        .filter(|&p| p != 0)
        .collect();
    (!peers.is_empty()).then_some(peers)
}

/// Why peers were passed over, worded as nats-server's
/// `selectPeerError`.
#[derive(Default)]
struct SelectError {
    offline: bool,
    exclude_tag: bool,
    missing: std::collections::BTreeSet<String>,
    excluded: std::collections::BTreeSet<String>,
}

impl SelectError {
    fn text(&self) -> String {
        let mut b = String::from("no suitable peers for placement");
        if self.offline {
            b.push_str(", peer offline");
        }
        if self.exclude_tag {
            b.push_str(", exclude tag set");
        }
        let list = |s: &std::collections::BTreeSet<String>| {
            s.iter()
                .map(|t| format!("'{t}'"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        if !self.missing.is_empty() {
            b.push_str(&format!(", tags not matched [{}]", list(&self.missing)));
        }
        if !self.excluded.is_empty() {
            b.push_str(&format!(", tags excluded [{}]", list(&self.excluded)));
        }
        b
    }
}

/// What a task answering later needs.
#[derive(Clone)]
struct Detached {
    server: Arc<Server>,
    jc: Arc<JsCluster>,
    js: Arc<JetStream>,
}

impl Detached {
    fn info_of(&self, a: &StreamAssignment) -> StreamInfo {
        info_of(&self.server, &self.jc, a)
    }

    fn send(&self, to: &str, kind: Kind, r: Result<bytes::Bytes, Refusal>) {
        let mut p = InternalPublisher::new(self.server.clone());
        answer(&self.js, &mut p, to, kind, r);
        p.flush();
    }
}

/// Counts the call (and error) and sends the response.
fn answer(
    js: &JetStream,
    p: &mut InternalPublisher,
    to: &str,
    kind: Kind,
    r: Result<bytes::Bytes, Refusal>,
) {
    use std::sync::atomic::Ordering;
    js.api_total.fetch_add(1, Ordering::Relaxed);
    let body = match r {
        Ok(b) => b,
        Err((kind, e)) => {
            js.api_errors.fetch_add(1, Ordering::Relaxed);
            response::error(kind, &e)
        }
    };
    let _ = kind;
    p.publish(to, to, None, None, &body);
}

/// A stream's info from this server's replica of it, if it has one;
/// otherwise its config with the state unknown here.
fn info_of(server: &Server, jc: &JsCluster, a: &StreamAssignment) -> StreamInfo {
    let now = wall_clock();
    let mut info = match jc.replicas.lock().by_group.get(&a.group) {
        Some(r) => r.rs.stream().info(now, false, ""),
        None => StreamInfo {
            config: serde_json::from_str(&a.config).unwrap_or_default(),
            created: a.created,
            state: Default::default(),
            cluster: None,
            mirror: None,
            sources: Vec::new(),
            ts: now,
        },
    };
    info.cluster = Some(jetstream::api::ClusterInfo {
        name: server.routes.cluster_name().0,
        ..Default::default()
    });
    response::stamp_stream(&mut info);
    info
}

impl Api {
    fn detached(&self) -> Detached {
        Detached {
            server: self.server.clone(),
            jc: self.jc.clone(),
            js: self.js.clone(),
        }
    }

    fn reply(&mut self, to: &str, kind: Kind, r: Result<bytes::Bytes, Refusal>) {
        answer(&self.js, &mut self.publisher, to, kind, r);
    }

    /// Answers (or starts answering) one request. Returns the name of a
    /// stream whose creation was proposed.
    fn request(&mut self, m: Inbound) -> Option<String> {
        let rest = m.subject.strip_prefix("$JS.API.")?;
        let tokens: Vec<&str> = rest.split('.').collect();
        let reply = m.reply.clone()?;
        let kind = endpoint(&tokens)?;
        if !api_level_ok(&m) {
            self.reply(&reply, kind, Err((kind, E::REQUIRED_API_LEVEL.err())));
            return None;
        }
        let r = match tokens.as_slice() {
            ["INFO"] => Ok(self.account_info()),
            ["STREAM", "CREATE", name] => match self.create(name, &m, &reply) {
                // Answered by the stream's first leader.
                Ok(()) => return Some(name.to_string()),
                Err(e) => Err(e),
            },
            ["STREAM", "UPDATE", name] => match self.update(name, &m, &reply) {
                Ok(()) => return None,
                Err(e) => Err(e),
            },
            ["STREAM", "DELETE", name] => match self.delete(name, &m, &reply) {
                Ok(()) => return None,
                Err(e) => Err(e),
            },
            ["STREAM", "PEER", "REMOVE", name] => self.peer_remove(name, &m),
            ["STREAM", "NAMES"] => self.names(&m),
            ["STREAM", "LIST"] => self.list(&m),
            // About one stream: its leader answers if it exists.
            [_, _, stream, ..] => {
                let name = match tokens.as_slice() {
                    ["STREAM", "MSG", _, s]
                    | ["STREAM", "LEADER", "STEPDOWN", s]
                    | ["STREAM", "PEER", "REMOVE", s]
                    | ["CONSUMER", "DURABLE", "CREATE", s, _]
                    | ["CONSUMER", "LEADER", "STEPDOWN", s, _] => *s,
                    _ => *stream,
                };
                if self.jc.meta.lock().stream(name).is_some() {
                    return None;
                }
                Err((kind, E::STREAM_NOT_FOUND.err()))
            }
            _ => return None,
        };
        self.reply(&reply, kind, r);
        None
    }

    /// Counted from the meta state (streams) and this server's replicas
    /// (consumers and usage of the streams it holds).
    fn account_info(&self) -> bytes::Bytes {
        use std::sync::atomic::Ordering;
        let streams = self.jc.meta.lock().streams().count() as u64;
        let (mut consumers, mut memory, mut storage) = (0u64, 0u64, 0u64);
        for r in self.jc.replicas.lock().by_group.values() {
            let s = r.rs.stream();
            consumers += s.consumer_names().len() as u64;
            let bytes = s.store().state().bytes;
            match s.config.storage {
                jetstream::api::Storage::Memory => memory += bytes,
                jetstream::api::Storage::File => storage += bytes,
            }
        }
        let info = AccountInfo {
            memory,
            storage,
            reserved_memory: 0,
            reserved_storage: 0,
            streams,
            consumers,
            limits: AccountLimits::default(),
            api: ApiStats {
                level: jetstream::api::API_LEVEL,
                total: self.js.api_total.load(Ordering::Relaxed),
                errors: self.js.api_errors.load(Ordering::Relaxed),
            },
        };
        response::ok(Kind::AccountInfo, &info)
    }

    fn create(&mut self, name: &str, m: &Inbound, reply: &str) -> Result<(), Refusal> {
        let kind = Kind::StreamCreate;
        let cfg = Dispatcher::stream_config(kind, name, &m.payload, true)?;
        let existing = self.jc.meta.lock().stream(name).cloned();
        if let Some(a) = existing {
            let same = serde_json::from_str::<StreamConfig>(&a.config).is_ok_and(|c| c == cfg);
            if !same {
                return Err((kind, E::STREAM_NAME_EXIST.err()));
            }
            // The same config again: the stream as it is.
            let info = self.info_of(&a);
            let body = response::ok(
                kind,
                &Created {
                    info,
                    did_create: true,
                },
            );
            self.reply(reply, kind, Ok(body));
            return Ok(());
        }
        if self.overlaps(name, &cfg.subjects) {
            return Err((kind, E::STREAM_SUBJECT_OVERLAP.err()));
        }
        let n = cfg.num_replicas.max(1) as usize;
        let peers = self.place(&cfg, &[], n).map_err(|e| (kind, e))?;
        let op = MetaOp::AssignStream {
            name: name.to_string(),
            config: serde_json::to_string(&cfg).expect("config serializes"),
            peers,
            created: wall_clock(),
            reply: reply.to_string(),
        };
        self.jc
            .node
            .propose(META_GROUP, op.encode())
            .map_err(|_| (kind, E::CLUSTER_NOT_LEADER.err()))
    }

    /// Whether another stream's subjects meet `subjects`.
    fn overlaps(&self, name: &str, subjects: &[String]) -> bool {
        self.jc.meta.lock().streams().any(|a| {
            a.name != name
                && serde_json::from_str::<StreamConfig>(&a.config).is_ok_and(|c| {
                    c.subjects.iter().any(|s| {
                        subjects
                            .iter()
                            .any(|t| subjects::subjects_collide(s.as_bytes(), t.as_bytes()))
                    })
                })
        })
    }

    /// `n` peers for a stream, none of `except`: among the JetStream
    /// servers that are up, those holding the fewest streams first.
    fn place(
        &self,
        cfg: &StreamConfig,
        except: &[u64],
        n: usize,
    ) -> Result<Vec<u64>, jetstream::api::ApiError> {
        let cluster = self.server.routes.cluster_name().0;
        let wrong_cluster = cfg
            .placement
            .as_ref()
            .is_some_and(|p| !p.cluster.is_empty() && p.cluster != cluster);
        // Placement tags, lowercase as nats-server compares them; `!tag`
        // excludes servers with the tag.
        let wanted: Vec<(String, bool)> = cfg
            .placement
            .iter()
            .flat_map(|p| p.tags.iter())
            .map(|t| {
                let t = t.trim().to_lowercase();
                match t.strip_prefix('!') {
                    Some(x) => (x.to_string(), true),
                    None => (t, false),
                }
            })
            .collect();
        let tags = self.jc.live_tags(&self.server);
        // A just-founded meta group has voters before the leader's next
        // pass names them; naming them here, ahead of the assignment in
        // the log, lets a stream go to a cluster the moment it has a
        // leader, as with nats-server.
        let voters = self.jc.meta_status().map(|g| g.voters).unwrap_or_default();
        let naming = self.jc.name_voters(&self.server, &voters);
        let meta = self.jc.meta.lock();
        // A name proposed earlier (by the leader's pass) may have applied
        // since `name_voters` looked: each peer counts once.
        let mut all: Vec<u64> = meta.peers().map(|p| p.id).collect();
        for id in naming {
            if !all.contains(&id) {
                all.push(id);
            }
        }
        let mut why = SelectError::default();
        let mut up: Vec<u64> = Vec::new();
        for &id in &all {
            if except.contains(&id) || wrong_cluster {
                continue;
            }
            let Some(have) = tags.get(&id) else {
                why.offline = true;
                continue;
            };
            // nats-server's marker for a server that takes no assets.
            if have.iter().any(|t| t == "!jetstream") {
                why.exclude_tag = true;
                continue;
            }
            let mut fits = true;
            for (t, exclude) in &wanted {
                let has = have.contains(t);
                if *exclude && has {
                    why.excluded.insert(t.clone());
                    fits = false;
                    break;
                }
                if !*exclude && !has {
                    why.missing.insert(t.clone());
                    fits = false;
                    break;
                }
            }
            if fits {
                up.push(id);
            }
        }
        if up.len() < n {
            return Err(E::CLUSTER_NO_PEERS.with("err", why.text()));
        }
        let load = |id: u64| meta.streams().filter(|a| a.peers.contains(&id)).count();
        // Ties broken by a hash of the stream's name, so streams spread.
        let salt = cfg.name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        });
        up.sort_by_key(|&id| (load(id), id.wrapping_mul(salt | 1)));
        up.truncate(n);
        Ok(up)
    }

    fn info_of(&self, a: &StreamAssignment) -> StreamInfo {
        info_of(&self.server, &self.jc, a)
    }

    /// A new config, and new peers when the replica count changes: more
    /// are placed like a create's; fewer keep the stream's leader where
    /// this server knows it. The stream's leader then brings its group
    /// there (`streams`). Answered once the meta group has it.
    fn update(&mut self, name: &str, m: &Inbound, reply: &str) -> Result<(), Refusal> {
        let kind = Kind::StreamUpdate;
        let mut cfg = Dispatcher::stream_config(kind, name, &m.payload, true)?;
        let a = self
            .jc
            .meta
            .lock()
            .stream(name)
            .cloned()
            .ok_or((kind, E::STREAM_NOT_FOUND.err()))?;
        let current: StreamConfig = serde_json::from_str(&a.config).unwrap_or_default();
        jetstream::stream::config::check_update(&current, &mut cfg).map_err(|e| (kind, e))?;
        if self.overlaps(name, &cfg.subjects) {
            return Err((kind, E::STREAM_SUBJECT_OVERLAP.err()));
        }
        let n = cfg.num_replicas.max(1) as usize;
        let mut peers = a.peers.clone();
        if n > peers.len() {
            let more = self
                .place(&cfg, &peers, n - peers.len())
                .map_err(|e| (kind, e))?;
            peers.extend(more);
        } else if n < peers.len() {
            let leader = self
                .jc
                .node
                .status()
                .groups
                .into_iter()
                .find(|g| g.group == a.group)
                .map(|g| g.leader)
                .unwrap_or(0);
            // Keep the leader, then the first named.
            peers.sort_by_key(|p| *p != leader);
            peers.truncate(n);
        }
        let config = serde_json::to_string(&cfg).expect("config serializes");
        let op = MetaOp::UpdateStream {
            name: name.to_string(),
            config: config.clone(),
            peers,
        };
        self.jc
            .node
            .propose(META_GROUP, op.encode())
            .map_err(|_| (kind, E::CLUSTER_NOT_LEADER.err()))?;
        let api = self.detached();
        let (name, reply) = (name.to_string(), reply.to_string());
        tokio::spawn(async move {
            let start = tokio::time::Instant::now();
            loop {
                let a = api.jc.meta.lock().stream(&name).cloned();
                match a {
                    Some(a) if a.config == config => {
                        let mut info = api.info_of(&a);
                        info.config = cfg;
                        response::stamp_stream(&mut info);
                        let body = response::ok(kind, &info);
                        api.send(&reply, kind, Ok(body));
                        return;
                    }
                    _ if start.elapsed() > DELETE_WAIT => return,
                    _ => tokio::time::sleep(Duration::from_millis(10)).await,
                }
            }
        });
        Ok(())
    }

    /// Takes a server off a stream, placing another in its stead (the
    /// replica count stays; without a server to take its place the
    /// request fails, as nats-server's does).
    fn peer_remove(&mut self, name: &str, m: &Inbound) -> Result<bytes::Bytes, Refusal> {
        let kind = Kind::StreamRemovePeer;
        if is_empty_request(&m.payload) {
            return Err((kind, E::BAD_REQUEST.err()));
        }
        #[derive(serde::Deserialize)]
        struct Request {
            #[serde(default)]
            peer: String,
        }
        let req: Request = serde_json::from_slice(&m.payload)
            .map_err(|e| (kind, E::INVALID_JSON.with("err", e)))?;
        if req.peer.is_empty() {
            return Err((kind, E::BAD_REQUEST.err()));
        }
        let a = self
            .jc
            .meta
            .lock()
            .stream(name)
            .cloned()
            .ok_or((kind, E::STREAM_NOT_FOUND.err()))?;
        // A server's name, or nats-server's hash of it.
        let peer = a
            .peers
            .iter()
            .copied()
            .find(|&p| {
                let n = self.jc.peer_name(&self.server, p).unwrap_or_default();
                n == req.peer || super::peer_hash(&n) == req.peer
            })
            .ok_or((kind, E::CLUSTER_PEER_NOT_MEMBER.err()))?;
        let peers =
            remap(&self.server, &self.jc, &a, peer, true).ok_or((kind, E::PEER_REMAP.err()))?;
        let op = MetaOp::UpdateStream {
            name: name.to_string(),
            config: a.config.clone(),
            peers,
        };
        self.jc
            .node
            .propose(META_GROUP, op.encode())
            .map_err(|_| (kind, E::CLUSTER_NOT_LEADER.err()))?;
        Ok(response::ok(kind, &Success { success: true }))
    }

    fn delete(&mut self, name: &str, m: &Inbound, reply: &str) -> Result<(), Refusal> {
        let kind = Kind::StreamDelete;
        if !is_empty_request(&m.payload) {
            return Err((kind, E::NOT_EMPTY_REQUEST.err()));
        }
        if self.jc.meta.lock().stream(name).is_none() {
            return Err((kind, E::STREAM_NOT_FOUND.err()));
        }
        let op = MetaOp::RemoveStream {
            name: name.to_string(),
        };
        self.jc
            .node
            .propose(META_GROUP, op.encode())
            .map_err(|_| (kind, E::CLUSTER_NOT_LEADER.err()))?;
        // Answered once the removal is applied here.
        let api = self.detached();
        let (name, reply) = (name.to_string(), reply.to_string());
        tokio::spawn(async move {
            let start = tokio::time::Instant::now();
            while api.jc.meta.lock().stream(&name).is_some() {
                if start.elapsed() > DELETE_WAIT {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            let body = response::ok(kind, &Success { success: true });
            api.send(&reply, kind, Ok(body));
        });
        Ok(())
    }

    /// Streams in name order whose subjects could meet `filter`.
    fn matching(&self, filter: &str) -> Vec<StreamAssignment> {
        self.jc
            .meta
            .lock()
            .streams()
            .filter(|a| {
                filter.is_empty()
                    || serde_json::from_str::<StreamConfig>(&a.config).is_ok_and(|c| {
                        c.subjects
                            .iter()
                            .any(|s| subjects::subjects_collide(s.as_bytes(), filter.as_bytes()))
                    })
            })
            .cloned()
            .collect()
    }

    fn names(&mut self, m: &Inbound) -> Result<bytes::Bytes, Refusal> {
        let kind = Kind::StreamNames;
        let req = optional::<StreamNamesRequest>(&m.payload).map_err(|e| (kind, e))?;
        let all = self.matching(&req.subject);
        let total = all.len();
        let offset = (req.offset.max(0) as usize).min(total);
        let names: Vec<String> = all
            .into_iter()
            .skip(offset)
            .take(NAMES_LIMIT)
            .map(|a| a.name)
            .collect();
        Ok(response::ok(
            kind,
            &Paged {
                total,
                offset,
                limit: NAMES_LIMIT,
                rest: Streams {
                    streams: (!names.is_empty()).then_some(names),
                },
            },
        ))
    }

    fn list(&mut self, m: &Inbound) -> Result<bytes::Bytes, Refusal> {
        let kind = Kind::StreamList;
        let req = optional::<StreamNamesRequest>(&m.payload).map_err(|e| (kind, e))?;
        let all = self.matching(&req.subject);
        let total = all.len();
        let offset = (req.offset.max(0) as usize).min(total);
        let infos: Vec<StreamInfo> = all
            .iter()
            .skip(offset)
            .take(LIST_LIMIT)
            .map(|a| self.info_of(a))
            .collect();
        Ok(response::ok(
            kind,
            &Paged {
                total,
                offset,
                limit: LIST_LIMIT,
                rest: Streams { streams: infos },
            },
        ))
    }
}
