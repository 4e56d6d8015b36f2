//! Replicated streams on this server: one Raft group per stream, on the
//! peers the meta group assigned, each replica a
//! `jsservice::stream_sm::StreamMachine` applied on the engine's
//! thread (so a snapshot taken there is exactly as of the applied index).
//!
//! How a stream is served:
//! - The meta group's `StreamAssigned` starts the group on every assigned
//!   peer, in the same apply that records the assignment (the engine's
//!   registry refuses a second node for a group, incident 5). The first
//!   peer named campaigns at once, so a new stream has a leader in a round
//!   trip rather than an election timeout.
//! - The leader subscribes, advertised to routes, to the stream's
//!   subjects, its API subjects and its ack subjects; it drops them when
//!   it stops leading. Every input that changes the stream becomes a log
//!   entry stamped with the leader's clock.
//! - Every replica applies the same entries to the same state machine;
//!   only a replica that leads when it applies an entry sends what it
//!   produced: the PubAck (after a majority has the entry on disk), an API
//!   answer, deliveries. A leader that lost its place mid-way leaves its
//!   requesters to retry; publishes with a `Nats-Msg-Id` are not stored
//!   twice.
//! - Requests that only read are answered from the leader's replica.
//!
//! Messages live in memory on every replica (`store::MemStore`); their
//! durability is the Raft log's, which is fsynced before any entry counts
//! towards a commit, and compacted behind snapshots of the whole stream.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use cluster::node::Event;
use jetstream::api::{ClusterInfo, StreamConfig, E};
use jsservice::meta_sm::{Meta, StreamAssignment};
use jsservice::reply::{self, Answer, Kind, Success};
use jsservice::request::{classify, Inbound, Mode, Request, StreamRequest};
use jsservice::sourcing::{Inboxed, Links};
use jsservice::stream_api::{self, Admitted};
use jsservice::stream_sm::{Applied, Entry, Op, StreamMachine};
use parking_lot::Mutex;
use replication::engine::{ConfChange, ConfChangeType, Engine};
use tokio::sync::mpsc;
use tracing::{error, info, warn};

use super::JsCluster;
use crate::client::delivery::{InternalSink, Message};
use crate::interest::Watcher;
use crate::internal::InternalPublisher;
use crate::js::sinks::inbound;
use crate::js::{mono_ms, new_consumer_name, wall_clock, JetStream};
use crate::server::Server;
use crate::subscription::Subscription;

/// How often leadership is checked, subscriptions follow it, and clock
/// ticks are proposed.
const FOLLOW_EVERY: Duration = Duration::from_millis(50);
/// Ticks (ack timeouts, expiry) are proposed at most this often.
const TICK_EVERY: Duration = Duration::from_millis(250);
/// A request that could not be proposed goes out again after this long
/// (the new leader subscribes within a follow period or two), this many
/// times at most.
const FORWARD_AFTER: Duration = Duration::from_millis(150);
const FORWARD_TRIES: u32 = 3;
/// How many proposed requests are remembered, to propose a forwarded copy
/// of one only once.
const PROPOSED_REMEMBERED: usize = 4096;
/// A leader proposes a config or membership change for its group at most
/// this often (raft-rs takes one conf change at a time).
const RECONCILE_EVERY: Duration = Duration::from_millis(500);
/// A new stream's first leader answers its create only this soon after.
const CREATE_ANSWER_WITHIN: Duration = Duration::from_secs(30);

/// One stream's replica on this server.
pub struct Replica {
    pub name: String,
    pub group: u64,
    pub rs: StreamMachine,
    /// Where the create is answered, by the first replica to lead it.
    pub create_reply: Option<(String, Instant)>,
    /// The meta group took this server off the stream: the replica stays
    /// (it may still count towards the group's quorum) until the group's
    /// own membership no longer has it.
    pub leaving: Option<Instant>,
}

#[derive(Default)]
pub struct Replicas {
    pub by_group: BTreeMap<u64, Replica>,
}

pub type Shared = Arc<Mutex<Replicas>>;

/// What a leader sends once it has applied an entry.
pub struct LeaderOut {
    pub group: u64,
    pub applied: Applied,
}

/// The engine-thread half: follows the meta group's assignments with
/// stream groups, and applies stream entries.
pub struct Applier {
    pub me: u64,
    pub meta: Arc<Mutex<Meta>>,
    pub replicas: Shared,
    pub out: mpsc::UnboundedSender<LeaderOut>,
}

impl Applier {
    pub fn apply(&mut self, ev: &Event, engine: &mut Engine) {
        let group = match ev {
            Event::Committed(c) | Event::Snapshot(c) => c.group,
        };
        if group == jsservice::meta_sm::META_GROUP {
            use jsservice::meta_sm::MetaEvent;
            let change = super::apply_meta_event(&self.meta, ev);
            let change = match change {
                super::MetaChange::Event(e) => Some(*e),
                super::MetaChange::Restored => {
                    self.reconcile(engine);
                    return;
                }
                super::MetaChange::None => None,
            };
            match change {
                Some(MetaEvent::StreamAssigned(a, reply)) if a.peers.contains(&self.me) => {
                    self.start(engine, &a, Some(reply));
                }
                Some(MetaEvent::StreamUpdated(before, after)) => {
                    let was = before.peers.contains(&self.me);
                    let is = after.peers.contains(&self.me);
                    if is && !was {
                        // Added: joins, and the leader's snapshot brings
                        // the stream.
                        self.start(engine, &after, None);
                    } else if was && !is {
                        if let Some(r) = self.replicas.lock().by_group.get_mut(&after.group) {
                            info!(
                                "JetStream cluster stream '$G > {}' moving off this server",
                                r.name
                            );
                            r.leaving = Some(Instant::now());
                        }
                    }
                }
                Some(MetaEvent::StreamRemoved(a)) => self.stop(engine, a.group),
                _ => {}
            }
            return;
        }
        let mut reps = self.replicas.lock();
        let Some(r) = reps.by_group.get_mut(&group) else {
            return;
        };
        match ev {
            Event::Snapshot(c) => {
                if c.data.is_empty() {
                    return;
                }
                match StreamMachine::restore(&c.data, Box::new(store::MemStore::new())) {
                    Ok(rs) => {
                        r.rs = rs;
                        info!(
                            "JetStream cluster stream '$G > {}' caught up from the leader's snapshot at index {}",
                            r.name, c.index
                        );
                    }
                    Err(e) => {
                        // Going on from the old state would diverge from
                        // the other replicas: this one stops, neither
                        // voting nor serving, and /healthz reports it.
                        error!(
                            "JetStream cluster stream '$G > {}': the leader's snapshot at {} does not decode ({e}); this replica stops",
                            r.name, c.index
                        );
                        reps.by_group.remove(&group);
                        drop(reps);
                        let _ = engine.remove_group(group);
                    }
                }
            }
            Event::Committed(c) => {
                let applied = r.rs.apply(c.index, &c.data);
                if engine.is_leader(group)
                    && (applied.reply.is_some() || !applied.outputs.is_empty())
                {
                    let _ = self.out.send(LeaderOut { group, applied });
                }
            }
        }
    }

    /// Starts this server's replica of an assigned stream (a new one, or
    /// one whose log is here from before a restart).
    fn start(&mut self, engine: &mut Engine, a: &StreamAssignment, reply: Option<String>) {
        if let Some(r) = self.replicas.lock().by_group.get_mut(&a.group) {
            // Assigned here again while on its way out: it stays.
            r.leaving = None;
            return;
        }
        // Entries replay from the start under the config the stream was
        // created with; a snapshot, if any, brings its own.
        let initial = if a.initial.is_empty() {
            &a.config
        } else {
            &a.initial
        };
        let cfg: StreamConfig = match serde_json::from_str(initial) {
            Ok(c) => c,
            Err(e) => {
                error!("Stream '{}': assigned config does not decode: {e}", a.name);
                return;
            }
        };
        // A new stream's members bootstrap its group together; a server
        // added later (or whose log is gone) joins, and the leader adds it
        // and sends it a snapshot.
        let original = reply.is_some();
        let started = if original || engine.has_log(a.group) {
            engine.create_group(a.group, &a.peers)
        } else {
            engine.join_group(a.group, &a.peers)
        };
        if let Err(e) = started {
            error!(
                "Stream '{}': raft group {} not started: {e}",
                a.name, a.group
            );
            return;
        }
        let fresh = engine.raft_info(a.group).is_some_and(|i| i.last_index <= 1);
        let mut rs = match StreamMachine::new(cfg, a.created, Box::new(store::MemStore::new())) {
            Ok(rs) => rs,
            Err(e) => {
                error!("Stream '{}' could not be started: {e}", a.name);
                let _ = engine.remove_group(a.group);
                return;
            }
        };
        if let Some((index, data)) = engine.snapshot(a.group) {
            if !data.is_empty() {
                match StreamMachine::restore(&data, Box::new(store::MemStore::new())) {
                    Ok(restored) => rs = restored,
                    Err(e) => {
                        error!(
                            "Stream '{}': its stored snapshot at {index} does not decode ({e}); the replica is not started",
                            a.name
                        );
                        let _ = engine.remove_group(a.group);
                        return;
                    }
                }
            }
        }
        if original && fresh && a.peers.first() == Some(&self.me) {
            let _ = engine.campaign(a.group);
        }
        info!(
            "JetStream cluster stream '$G > {}' on raft group {} with peers {:x?}",
            a.name, a.group, a.peers
        );
        self.replicas.lock().by_group.insert(
            a.group,
            Replica {
                name: a.name.clone(),
                group: a.group,
                rs,
                create_reply: reply
                    .filter(|r| fresh && !r.is_empty())
                    .map(|r| (r, Instant::now())),
                leaving: None,
            },
        );
    }

    fn stop(&mut self, engine: &mut Engine, group: u64) {
        if let Some(r) = self.replicas.lock().by_group.remove(&group) {
            info!("JetStream cluster stream '$G > {}' removed", r.name);
        }
        if let Err(e) = engine.delete_group(group) {
            warn!("raft group {group}: {e}");
        }
    }

    /// After the meta state was replaced by a snapshot: start what is
    /// assigned here and not running, stop what is running and no longer
    /// assigned.
    fn reconcile(&mut self, engine: &mut Engine) {
        let assigned: Vec<StreamAssignment> = self
            .meta
            .lock()
            .streams()
            .filter(|a| a.peers.contains(&self.me))
            .cloned()
            .collect();
        let running: Vec<u64> = self.replicas.lock().by_group.keys().copied().collect();
        for g in running {
            if assigned.iter().any(|a| a.group == g) {
                continue;
            }
            let exists = self.meta.lock().streams().any(|a| a.group == g);
            if exists {
                // Moved off this server: the replica may still count
                // towards its group's quorum until the group lets it go.
                if let Some(r) = self.replicas.lock().by_group.get_mut(&g) {
                    r.leaving.get_or_insert_with(Instant::now);
                }
            } else {
                self.stop(engine, g);
            }
        }
        for a in &assigned {
            self.start(engine, a, None);
        }
    }
}

/// A snapshot of a stream group's state machine, on the engine's thread.
pub fn snapshot(replicas: &Shared, group: u64) -> Option<Vec<u8>> {
    replicas
        .lock()
        .by_group
        .get(&group)
        .map(|r| r.rs.snapshot(wall_clock()))
}

/// Compact a stream's log once it holds more entries than the stream
/// holds messages (and at least a few thousand): a snapshot costs the
/// whole stream, so it is paid for by as many entries.
pub fn should_compact(replicas: &Shared, group: u64, since: u64) -> bool {
    replicas.lock().by_group.get(&group).is_some_and(|r| {
        let msgs = r.rs.stream().store().state().msgs;
        since >= msgs.max(8192)
    })
}

/// A stream input as a log entry, stamped with this (the leader's)
/// clock.
fn entry(op: Op) -> Vec<u8> {
    Entry {
        ts: wall_clock(),
        op,
    }
    .encode()
}

/// Proposes a stream input (non-blocking; dropped unless this server leads
/// the group).
fn submit(jc: &JsCluster, group: u64, op: Op) {
    jc.node.submit(group, entry(op));
}

/// Publishes to a stream's subjects, while this server leads it.
struct PublishSink {
    jc: Arc<JsCluster>,
    group: u64,
}

impl InternalSink for PublishSink {
    fn deliver(&self, msg: Message<'_>) {
        let subject = String::from_utf8_lossy(msg.subject);
        let reply = msg
            .reply
            .filter(|r| !r.is_empty())
            .map(String::from_utf8_lossy);
        let entry = jsservice::stream_sm::encode_publish(
            wall_clock(),
            reply.as_deref(),
            &subject,
            msg.headers,
            msg.payload,
        );
        self.jc.node.submit(self.group, entry);
    }
}

/// Acks for a stream's consumers (`$JS.ACK.<stream>.<consumer>.…`), and
/// their flow-control responses (`$JS.FC.<stream>.<consumer>.…`):
/// proposed as they come (whether a consumer takes them is the state
/// machine's to decide, on every replica alike).
struct AckSink {
    jc: Arc<JsCluster>,
    group: u64,
}

impl InternalSink for AckSink {
    fn deliver(&self, msg: Message<'_>) {
        let request = classify(inbound(msg), Mode::Clustered, &mut String::new);
        if let Request::Stream {
            reply,
            request: StreamRequest::Change(op),
            ..
        } = request
        {
            submit(&self.jc, self.group, op.replied(reply.as_deref()));
        }
    }
}

/// Answers and deliveries for the source links of streams led here, with
/// the subject each was routed on.
struct InboxSink {
    tx: mpsc::UnboundedSender<(String, Inbound)>,
}

impl InternalSink for InboxSink {
    fn deliver(&self, msg: Message<'_>) {
        let routed = String::from_utf8_lossy(msg.routed).into_owned();
        let _ = self.tx.send((routed, inbound(msg)));
    }
}

/// A led stream's API requests, to the API task.
struct ApiSink {
    group: u64,
    tx: mpsc::UnboundedSender<(u64, Inbound)>,
}

impl InternalSink for ApiSink {
    fn deliver(&self, msg: Message<'_>) {
        let _ = self.tx.send((self.group, inbound(msg)));
    }
}

/// The stream API subjects its leader answers.
fn api_subjects(name: &str) -> Vec<String> {
    [
        "STREAM.INFO.{}",
        "STREAM.PURGE.{}",
        "STREAM.MSG.GET.{}",
        "STREAM.MSG.DELETE.{}",
        "STREAM.LEADER.STEPDOWN.{}",
        "DIRECT.GET.{}",
        "DIRECT.GET.{}.>",
        "CONSUMER.CREATE.{}",
        "CONSUMER.CREATE.{}.>",
        "CONSUMER.DURABLE.CREATE.{}.*",
        "CONSUMER.INFO.{}.*",
        "CONSUMER.DELETE.{}.*",
        "CONSUMER.NAMES.{}",
        "CONSUMER.LIST.{}",
        "CONSUMER.MSG.NEXT.{}.*",
        "CONSUMER.LEADER.STEPDOWN.{}.*",
        "CONSUMER.PAUSE.{}.*",
    ]
    .iter()
    .map(|t| format!("$JS.API.{}", t.replace("{}", name)))
    .collect()
}

/// A stream this server leads and serves.
struct Led {
    /// The stream subjects subscribed (an update may change them).
    subjects: Vec<String>,
    subs: Vec<Arc<Subscription>>,
}

/// The tokio half: subscriptions that follow leadership, the stream API,
/// and what leaders send.
pub struct Driver {
    server: Arc<Server>,
    jc: Arc<JsCluster>,
    js: Arc<JetStream>,
    /// Subscriptions of the streams this server leads, by group.
    led: BTreeMap<u64, Led>,
    api_tx: mpsc::UnboundedSender<(u64, Inbound)>,
    last_tick: BTreeMap<u64, Instant>,
    publisher: InternalPublisher,
    /// Requests forwarded after a failed proposal, by reply subject.
    forwarded: BTreeMap<String, u32>,
    /// When each led group last had a config or membership change
    /// proposed.
    last_reconcile: BTreeMap<u64, Instant>,
    /// Reply subjects of the changes proposed lately, oldest first.
    proposed: BTreeSet<String>,
    proposed_order: std::collections::VecDeque<String>,
    /// Where the source links of the streams led here are answered:
    /// `<inbox>.<group>.…`.
    inbox: String,
    /// The source links of the streams led here, by group.
    links: BTreeMap<u64, Links>,
    /// The push interest last proposed, and when, by (group, consumer).
    push_seen: BTreeMap<(u64, String), (bool, Instant)>,
    /// Wakes the driver when a subscription on a deliver subject of a push
    /// consumer of a stream it leads comes or goes.
    interest: Watcher,
}

impl Driver {
    pub fn start(
        server: Arc<Server>,
        jc: Arc<JsCluster>,
        js: Arc<JetStream>,
        out: mpsc::UnboundedReceiver<LeaderOut>,
    ) {
        let (api_tx, api_rx) = mpsc::unbounded_channel();
        let (inbox_tx, inbox_rx) = mpsc::unbounded_channel();
        let inbox = format!("_FLOTILLA.{:x}", jc.me.id);
        let sink = Arc::new(InboxSink { tx: inbox_tx });
        if let Err(e) = server.subscribe_internal_cluster(&format!("{inbox}.>"), sink) {
            error!("JetStream cluster: could not subscribe to {inbox}.>: {e}");
        }
        let d = Driver {
            links: BTreeMap::new(),
            inbox,
            publisher: InternalPublisher::new(server.clone()),
            interest: server.interest.watcher(),
            server,
            jc,
            js,
            led: BTreeMap::new(),
            api_tx,
            last_tick: BTreeMap::new(),
            forwarded: BTreeMap::new(),
            last_reconcile: BTreeMap::new(),
            push_seen: BTreeMap::new(),
            proposed: BTreeSet::new(),
            proposed_order: std::collections::VecDeque::new(),
        };
        tokio::spawn(d.run(out, api_rx, inbox_rx));
    }

    async fn run(
        mut self,
        mut out: mpsc::UnboundedReceiver<LeaderOut>,
        mut api: mpsc::UnboundedReceiver<(u64, Inbound)>,
        mut inbox: mpsc::UnboundedReceiver<(String, Inbound)>,
    ) {
        let mut shutdown = self.server.shutdown_signal();
        let mut follow = tokio::time::interval(FOLLOW_EVERY);
        follow.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let interest_changed = self.interest.notify();
        loop {
            tokio::select! {
                o = out.recv() => {
                    let Some(o) = o else { return };
                    self.send(o);
                    while let Ok(o) = out.try_recv() {
                        self.send(o);
                    }
                }
                r = api.recv() => {
                    let Some((group, m)) = r else { return };
                    self.request(group, m);
                }
                r = inbox.recv() => {
                    let Some((routed, m)) = r else { return };
                    self.on_inbox(&routed, m);
                }
                _ = follow.tick() => self.follow(),
                _ = interest_changed.notified() => {
                    for group in self.led.keys().copied().collect::<Vec<_>>() {
                        self.follow_interest(group);
                    }
                }
                _ = shutdown.changed() => return,
            }
            self.publisher.flush();
        }
    }

    /// Subscribes for the streams this server now leads and drops what it
    /// no longer does; answers a new stream's create; proposes clock ticks.
    fn follow(&mut self) {
        let status = self.jc.node.status();
        let leading: BTreeSet<u64> = status
            .groups
            .iter()
            .filter(|g| g.is_leader)
            .map(|g| g.group)
            .collect();
        // A new leader serves once it has applied everything committed,
        // so its first answers are not from behind its predecessor's.
        let caught_up: BTreeSet<u64> = status
            .groups
            .iter()
            .filter(|g| g.is_leader && g.applied >= g.committed)
            .map(|g| g.group)
            .collect();
        let mut creates = Vec::new();
        let mut due_ticks = Vec::new();
        let now = wall_clock();
        let mut want: BTreeMap<u64, (String, Vec<String>)> = BTreeMap::new();
        {
            let mut reps = self.jc.replicas.lock();
            for r in reps.by_group.values_mut() {
                if !leading.contains(&r.group) {
                    continue;
                }
                if !caught_up.contains(&r.group) && !self.led.contains_key(&r.group) {
                    continue;
                }
                want.insert(
                    r.group,
                    (r.name.clone(), r.rs.stream().config.subjects.clone()),
                );
                if let Some((reply, at)) = r.create_reply.take() {
                    if at.elapsed() < CREATE_ANSWER_WITHIN {
                        creates.push((r.group, reply));
                    }
                }
                let due = r.rs.stream().next_deadline().is_some_and(|d| d <= now);
                let recent = self
                    .last_tick
                    .get(&r.group)
                    .is_some_and(|t| t.elapsed() < TICK_EVERY);
                if due && !recent {
                    due_ticks.push(r.group);
                }
            }
        }
        let gone: Vec<u64> = self
            .led
            .keys()
            .filter(|g| !want.contains_key(g))
            .copied()
            .collect();
        for g in gone {
            for s in self.led.remove(&g).map(|l| l.subs).unwrap_or_default() {
                self.server.unsubscribe(&s);
            }
            self.last_tick.remove(&g);
        }
        for (group, (name, subjects)) in want {
            match self.led.get(&group) {
                Some(l) if l.subjects == subjects => continue,
                Some(_) => {
                    // An update changed the stream's subjects.
                    for s in self.led.remove(&group).map(|l| l.subs).unwrap_or_default() {
                        self.server.unsubscribe(&s);
                    }
                }
                None => info!("JetStream cluster new stream leader for '$G > {name}'"),
            }
            let subs = self.subscribe(group, &name, &subjects);
            self.led.insert(group, Led { subjects, subs });
        }
        for (group, reply) in creates {
            self.answer_create(group, &reply);
        }
        for group in due_ticks {
            self.last_tick.insert(group, Instant::now());
            submit(&self.jc, group, Op::Tick);
        }
        let mut deliver_subjects = Vec::new();
        for g in status.groups.iter().filter(|g| g.is_leader) {
            self.reconcile(g);
            deliver_subjects.extend(self.follow_interest(g.group));
        }
        self.interest.watch(deliver_subjects);
        self.follow_sources(&leading);
        self.push_seen.retain(|(g, _), _| leading.contains(g));
        self.last_reconcile.retain(|g, _| leading.contains(g));
        self.retire_left(&status);
    }

    /// Keeps the source links of the streams led here and sends what they
    /// ask for.
    fn follow_sources(&mut self, leading: &BTreeSet<u64>) {
        let sourcing: Vec<_> = {
            let reps = self.jc.replicas.lock();
            reps.by_group
                .values()
                .filter(|r| leading.contains(&r.group))
                .map(|r| (r.group, r.name.clone(), r.rs.stream().source_specs()))
                .collect()
        };
        let now = mono_ms();
        self.links
            .retain(|g, _| sourcing.iter().any(|(led, _, _)| led == g));
        for (group, name, specs) in sourcing {
            if specs.is_empty() && !self.links.contains_key(&group) {
                continue;
            }
            let inbox = format!("{}.{group}", self.inbox);
            let links = self
                .links
                .entry(group)
                .or_insert_with(|| Links::new(&name, inbox));
            for m in links.follow(&specs, now) {
                self.publisher.publish_out(&m);
            }
        }
    }

    fn on_inbox(&mut self, routed: &str, m: Inbound) {
        let group = routed
            .strip_prefix(self.inbox.as_str())
            .and_then(|r| r.strip_prefix('.'))
            .and_then(|r| r.split('.').next())
            .and_then(|g| g.parse::<u64>().ok());
        let Some(links) = group.and_then(|g| self.links.get_mut(&g)) else {
            return;
        };
        match links.inbox(routed, m, mono_ms()) {
            Inboxed::Nothing => {}
            Inboxed::Send(m) => {
                self.publisher.publish_out(&m);
            }
            Inboxed::Copy(op, ack) => {
                submit(&self.jc, group.expect("found"), op.replied(Some(&ack)));
            }
        }
    }

    /// As a stream's leader, brings its group to what the meta group
    /// assigned: its config (through the log, so every replica changes at
    /// the same point) and its members (one conf change at a time, added
    /// before removed; a leader that is to go hands leadership over
    /// first).
    fn reconcile(&mut self, g: &cluster::node::GroupStatus) {
        if self
            .last_reconcile
            .get(&g.group)
            .is_some_and(|t| t.elapsed() < RECONCILE_EVERY)
        {
            return;
        }
        let Some(a) = self
            .jc
            .meta
            .lock()
            .streams()
            .find(|a| a.group == g.group)
            .cloned()
        else {
            return;
        };
        let Ok(want) = serde_json::from_str::<StreamConfig>(&a.config) else {
            return;
        };
        let differs = self
            .jc
            .replicas
            .lock()
            .by_group
            .get(&g.group)
            .is_some_and(|r| r.rs.stream().config != want);
        let group = g.group;
        if differs {
            info!(
                "JetStream cluster stream '$G > {}': applying its new config",
                a.name
            );
            self.last_reconcile.insert(group, Instant::now());
            let config = Bytes::from(a.config.clone().into_bytes());
            submit(&self.jc, group, Op::UpdateConfig { config });
            return;
        }
        let add = a.peers.iter().find(|p| !g.voters.contains(p)).copied();
        let remove = g.voters.iter().find(|v| !a.peers.contains(v)).copied();
        let change = match (add, remove) {
            (Some(id), _) => Some((ConfChangeType::AddNode, id)),
            (None, Some(id)) if id == self.jc.me.id => {
                // Hand over to a member that stays and is caught up.
                let to = g
                    .progress
                    .iter()
                    .find(|(p, m)| a.peers.contains(p) && *m >= g.committed)
                    .map(|(p, _)| *p);
                if let Some(to) = to {
                    self.last_reconcile.insert(group, Instant::now());
                    let _ = self.jc.node.call(move |e| e.transfer_leader(group, to));
                }
                None
            }
            (None, Some(id)) => Some((ConfChangeType::RemoveNode, id)),
            (None, None) => None,
        };
        if let Some((kind, id)) = change {
            self.last_reconcile.insert(group, Instant::now());
            info!(
                "JetStream cluster stream '$G > {}': {} peer {}",
                a.name,
                if kind == ConfChangeType::AddNode {
                    "adding"
                } else {
                    "removing"
                },
                self.jc.peer_name(&self.server, id).unwrap_or_default()
            );
            let mut cc = ConfChange::default();
            cc.set_change_type(kind);
            cc.node_id = id;
            let _ = self.jc.node.call(move |e| e.propose_conf_change(group, cc));
        }
    }

    /// As a stream's leader, proposes a push consumer's interest when it
    /// differs from the replicated state (again if that has not changed
    /// a moment later: the proposal may have been lost). Returns the
    /// deliver subjects it looked at.
    fn follow_interest(&mut self, group: u64) -> Vec<String> {
        let targets: Vec<(String, String, String, bool)> = self
            .jc
            .replicas
            .lock()
            .by_group
            .get(&group)
            .map(|r| {
                let s = r.rs.stream();
                s.push_targets()
                    .into_iter()
                    .map(|(c, subject, queue)| {
                        let on = s.consumer(&c).is_some_and(|c| c.push_active());
                        (c, subject, queue, on)
                    })
                    .collect()
            })
            .unwrap_or_default();
        let mut subjects = Vec::with_capacity(targets.len());
        for (consumer, subject, queue, on) in targets {
            let active = self.publisher.has_interest(&subject, &queue);
            let key = (group, consumer.clone());
            let recent = self
                .push_seen
                .get(&key)
                .is_some_and(|(v, at)| *v == active && at.elapsed() < RECONCILE_EVERY);
            if active != on && !recent {
                self.push_seen.insert(key, (active, Instant::now()));
                submit(&self.jc, group, Op::PushInterest { consumer, active });
            }
            subjects.push(subject);
        }
        subjects
    }

    /// Replicas this server was taken off are removed once their group's
    /// membership no longer names this server.
    fn retire_left(&mut self, status: &cluster::node::Status) {
        let me = self.jc.me.id;
        let done: Vec<u64> = self
            .jc
            .replicas
            .lock()
            .by_group
            .values()
            .filter(|r| r.leaving.is_some())
            .filter(|r| {
                status
                    .groups
                    .iter()
                    .find(|g| g.group == r.group)
                    .is_none_or(|g| !g.voters.contains(&me))
            })
            .map(|r| r.group)
            .collect();
        for group in done {
            // Checked again on the engine's thread, where assignments are
            // applied, so a re-assignment cannot slip in between.
            let (meta, replicas) = (self.jc.meta.clone(), self.jc.replicas.clone());
            let _ = self.jc.node.call(move |e| {
                let assigned = meta
                    .lock()
                    .streams()
                    .any(|a| a.group == group && a.peers.contains(&me));
                let member = e.voters(group).is_some_and(|v| v.contains(&me));
                let mut reps = replicas.lock();
                let leaving = reps
                    .by_group
                    .get(&group)
                    .is_some_and(|r| r.leaving.is_some());
                if assigned || member || !leaving {
                    return;
                }
                if let Some(r) = reps.by_group.remove(&group) {
                    info!(
                        "JetStream cluster stream '$G > {}' left this server",
                        r.name
                    );
                }
                drop(reps);
                let _ = e.delete_group(group);
            });
        }
    }

    fn subscribe(&self, group: u64, name: &str, subjects: &[String]) -> Vec<Arc<Subscription>> {
        let mut subs = Vec::new();
        let mut add = |subject: &str, sink: Arc<dyn InternalSink>| match self
            .server
            .subscribe_internal_cluster(subject, sink)
        {
            Ok(s) => subs.push(s),
            Err(e) => error!("Stream '{name}': could not subscribe to {subject}: {e}"),
        };
        for subject in subjects {
            add(
                subject,
                Arc::new(PublishSink {
                    jc: self.jc.clone(),
                    group,
                }),
            );
        }
        for prefix in ["$JS.ACK", "$JS.FC"] {
            add(
                &format!("{prefix}.{name}.>"),
                Arc::new(AckSink {
                    jc: self.jc.clone(),
                    group,
                }),
            );
        }
        for subject in api_subjects(name) {
            add(
                &subject,
                Arc::new(ApiSink {
                    group,
                    tx: self.api_tx.clone(),
                }),
            );
        }
        subs
    }

    /// The `cluster` block of a stream's (or its consumers') info, as its
    /// leader reports it.
    fn cluster_info(&self, group: u64) -> ClusterInfo {
        let g = self
            .jc
            .node
            .status()
            .groups
            .into_iter()
            .find(|g| g.group == group)
            .unwrap_or_default();
        let raft_group = self.jc.group_names().remove(&group).unwrap_or_default();
        ClusterInfo {
            name: self.server.routes.cluster_name().0,
            raft_group,
            leader: if g.leader == 0 {
                String::new()
            } else {
                self.jc
                    .peer_name(&self.server, g.leader)
                    .unwrap_or_default()
            },
            replicas: self.jc.replicas(&self.server, &g),
        }
    }

    fn send_answer(&mut self, a: Answer) {
        self.js.count(a.count());
        self.publisher.publish_out(&a.msg);
    }

    fn answer_create(&mut self, group: u64, reply: &str) {
        let cluster = self.cluster_info(group);
        let info = {
            let reps = self.jc.replicas.lock();
            let Some(r) = reps.by_group.get(&group) else {
                return;
            };
            let mut info = r.rs.stream().info(wall_clock(), false, "");
            info.cluster = Some(cluster);
            info
        };
        self.send_answer(jsservice::account::created(reply, info));
    }

    /// Sends what a leader produced by applying an entry.
    fn send(&mut self, o: LeaderOut) {
        let cluster = self.cluster_info(o.group);
        let answers = {
            let reps = self.jc.replicas.lock();
            let Some(r) = reps.by_group.get(&o.group) else {
                return;
            };
            reply::answers(r.rs.stream(), o.applied, Some(&cluster))
        };
        for a in answers {
            self.send_answer(a);
        }
    }

    /// A request to a stream this server leads.
    fn request(&mut self, group: u64, m: Inbound) {
        let original = m.clone();
        let (reply, request) = match classify(m, Mode::Clustered, &mut new_consumer_name) {
            Request::Answer(a) => return self.send_answer(a),
            Request::Stream { reply, request, .. } => (reply, request),
            _ => return,
        };
        if !self.led.contains_key(&group) {
            // Leadership moved after the request was queued here: it goes
            // to the new leader.
            self.forward_later(&original);
            return;
        }
        let Some(to) = reply else { return };
        match request {
            StreamRequest::Read(read) => {
                let cluster = self.cluster_info(group);
                let answers = {
                    let reps = self.jc.replicas.lock();
                    let Some(r) = reps.by_group.get(&group) else {
                        return;
                    };
                    let server = &self.server.name;
                    stream_api::read(
                        r.rs.stream(),
                        read,
                        &to,
                        wall_clock(),
                        Some(&cluster),
                        server,
                    )
                };
                for a in answers {
                    self.send_answer(a);
                }
            }
            StreamRequest::Change(op) => self.change(group, &to, op, &original),
            StreamRequest::StepDown {
                consumer,
                preferred,
            } => {
                let kind = match consumer {
                    Some(_) => Kind::ConsumerLeaderStepdown,
                    None => Kind::StreamLeaderStepdown,
                };
                // A consumer lives in its stream's group: its leader is
                // the stream's.
                let missing = consumer.is_some_and(|c| !self.has_consumer(group, &c));
                let r = match missing {
                    true => Err(E::CONSUMER_NOT_FOUND.err()),
                    false => self.step_down(group, preferred.as_deref()),
                };
                let a = match r {
                    Ok(()) => Answer::ok(&to, kind, &Success { success: true }),
                    Err(e) => Answer::refused(&to, kind, &e),
                };
                self.send_answer(a);
            }
        }
    }

    fn has_consumer(&self, group: u64, consumer: &str) -> bool {
        self.jc
            .replicas
            .lock()
            .by_group
            .get(&group)
            .is_some_and(|r| r.rs.stream().consumer(consumer).is_some())
    }

    /// A change, admitted against this leader's replica and proposed; the
    /// answer leaves once the entry is applied. The same request twice
    /// (this server got the original while another leader forwarded its
    /// copy) is proposed once. Pull requests are not API requests: their
    /// inboxes are reused.
    fn change(&mut self, group: u64, to: &str, op: Op, original: &Inbound) {
        let once = !matches!(op, Op::Pull { .. });
        if once && self.proposed.contains(to) {
            return;
        }
        let admitted = {
            let reps = self.jc.replicas.lock();
            let Some(r) = reps.by_group.get(&group) else {
                return;
            };
            stream_api::admit(r.rs.stream(), Some(to), op)
        };
        let op = match admitted {
            Admitted::Answer(a) => return self.send_answer(a),
            Admitted::Nothing => return,
            Admitted::Input(op) => op,
        };
        if self.jc.node.propose(group, entry(op)).is_err() {
            self.forward_later(original);
            return;
        }
        self.forwarded.remove(to);
        if once {
            self.proposed.insert(to.to_string());
            self.proposed_order.push_back(to.to_string());
            if self.proposed_order.len() > PROPOSED_REMEMBERED {
                if let Some(old) = self.proposed_order.pop_front() {
                    self.proposed.remove(&old);
                }
            }
        }
    }

    /// A request this server could not propose goes out again a moment
    /// later, when the new leader has subscribed (a few times at most), so
    /// a leadership change does not leave its requester waiting out a
    /// timeout.
    fn forward_later(&mut self, m: &Inbound) {
        let Some(reply) = m.reply.clone() else { return };
        let tries = self.forwarded.entry(reply.clone()).or_insert(0);
        *tries += 1;
        if *tries > FORWARD_TRIES {
            self.forwarded.remove(&reply);
            return;
        }
        if self.forwarded.len() > 10_000 {
            self.forwarded.clear();
        }
        let server = self.server.clone();
        let m = m.clone();
        tokio::spawn(async move {
            tokio::time::sleep(FORWARD_AFTER).await;
            let mut p = InternalPublisher::new(server);
            p.publish(
                &m.subject,
                &m.subject,
                m.reply.as_deref(),
                m.headers.as_deref(),
                &m.payload,
            );
            p.flush();
        });
    }

    /// Hands the group's leadership to another member that is caught up
    /// (raft-rs sends it a TimeoutNow once its log matches), or to the
    /// server named `preferred`.
    fn step_down(
        &self,
        group: u64,
        preferred: Option<&str>,
    ) -> Result<(), jetstream::api::ApiError> {
        let status = self.jc.node.status();
        let g = status
            .groups
            .iter()
            .find(|g| g.group == group)
            .ok_or_else(|| E::STREAM_NOT_FOUND.err())?;
        let routed = self.jc.routed_ids(&self.server);
        let mut candidates = g
            .progress
            .iter()
            .filter(|(id, m)| *id != self.jc.me.id && routed.contains(id) && *m >= g.committed)
            .map(|(id, _)| *id);
        let target = match preferred {
            None => candidates
                .next()
                .ok_or_else(|| E::CLUSTER_NO_PEERS.with("err", "no replacement peer connected"))?,
            Some(p) if p == self.server.name => {
                return Err(E::CLUSTER_NO_PEERS
                    .with("err", format!("preferred server {p:?} is already leader")))
            }
            Some(p) => candidates
                .find(|&id| self.jc.peer_name(&self.server, id).as_deref() == Some(p))
                .ok_or_else(|| {
                    E::CLUSTER_NO_PEERS.with("err", format!("preferred server {p:?} not known"))
                })?,
        };
        self.jc
            .node
            .call(move |e| e.transfer_leader(group, target))
            .ok_or_else(|| E::CLUSTER_NOT_AVAIL.err())?
            .map_err(|_| E::CLUSTER_NOT_LEADER.err())
    }
}
