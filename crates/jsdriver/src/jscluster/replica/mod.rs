//! One stream's replica on this server: a task that owns the stream's
//! state machine (`StreamMachine` over its store, `storage`) and applies
//! its group's committed entries in log order, as the engine's thread
//! hands them over (`applier`). The Raft log makes an entry durable; the
//! store is synced and marked when the log is compacted behind it
//! (`take_snapshot`), and catches up from the leader's store when a state
//! snapshot comes (`fetch`).
//!
//! Every replica applies the same entries to the same state machine;
//! only a replica that led the group when an entry was handed out sends
//! what the entry answers (`jsservice::reply::answers`): the PubAck
//! (after a majority has the entry on disk), an API answer, deliveries.
//! A leader that lost its place mid-way leaves its requesters to retry;
//! publishes with a `Nats-Msg-Id` are not stored twice.
//!
//! While this server leads the group and has applied what was committed
//! when it took over, the replica serves: it subscribes, advertised to
//! routes, to the stream's subjects (publishes and acks are proposed
//! straight from those subscriptions), its API subjects (requests come
//! here: reads are answered from this replica, changes admitted against
//! it and proposed), and its sources' inbox. It proposes clock ticks when
//! the stream has a deadline, push consumers' interest, and the config
//! the meta group assigned.
//!
//! Reads and snapshots are taken on this task, never on the engine's
//! thread, so a large read holds up this stream alone.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use jetstream::api::advisory::{self, Action};
use jetstream::api::{StreamConfig, E};
use jetstream::output::Output;
use jetstream::stream::PubAck;
use jsservice::replica::{Clock, Event, Replica, Timing};
use jsservice::reply::{self, Answer, Kind, Success, What};
use jsservice::request::{classify, Inbound, Mode, Read, Request, StreamRequest};
use jsservice::sourcing::Inboxed;
use jsservice::stream_api::{self, Admitted};
use jsservice::stream_sm::{Applied, Entry, Op, Outcome, StreamMachine};
use store::MsgStore;
use tokio::sync::mpsc;
use tracing::{debug, error, info, warn};

use super::storage::{ReplicaStore, ServerHome};

use super::JsCluster;
use crate::js::sinks::inbound;
use crate::js::stream::PublishOut;
use crate::js::stream::{self, Cmd, PushWatch, RaftEvent, SourceLinks, StreamHandle};
use crate::js::{new_consumer_name, wall_clock, JetStream};
use flotilla_core::bus::Publisher as InternalPublisher;
use flotilla_core::bus::Subscription;
use flotilla_core::bus::{Message, Reach, Sink as InternalSink};

/// How often a leader looks at its duties: ticks, sources, config,
/// a new stream's create.
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
/// A leader proposes the assigned config, or a push consumer's interest
/// again, at most this often.
const RECONCILE_EVERY: Duration = Duration::from_millis(500);
/// How often an assigned config the stream has not taken is proposed again.
const CONFIG_RETRY: Duration = Duration::from_secs(10);
/// A new stream's first leader answers its create only this soon after.
const CREATE_ANSWER_WITHIN: Duration = Duration::from_secs(30);
/// Commands applied before the actor looks at its other work.
const MAX_BATCH: usize = 1024;
/// How long a fetch waits, in milliseconds: an ask with no reply goes out
/// again after 2 s (a lost message, or a leader that changed); a leader
/// that answered "later" is asked again after 100 ms; a failed fetch
/// starts again after 1 s.
const TIMING: Timing = Timing {
    ask_again: 2_000,
    wait: 100,
    retry: 1_000,
};

mod fetch;
mod repair;

/// A replica as `applier` opened it.
pub struct Opened {
    pub machine: StreamMachine,
    /// Where a file stream's store lives (`None`: memory).
    pub file: Option<ReplicaStore>,
    /// The mark the store was opened at.
    pub mark: u64,
    /// A state snapshot whose messages the store lacks: (index, state,
    /// store), fetched first; `machine` is a placeholder until then.
    pub fetch: Option<(u64, Bytes, Box<dyn MsgStore>)>,
}

/// The subscriptions of a replica that serves.
struct Serving {
    /// The stream's subjects, each subscribed (an update may change them).
    subjects: BTreeMap<String, Arc<Subscription>>,
    /// Acks, flow control and the stream's API subjects.
    others: Vec<Arc<Subscription>>,
}

pub struct Actor {
    jc: Arc<JsCluster>,
    js: Arc<JetStream>,
    group: u64,
    /// The stream machine over its store, and what keeps the store: the
    /// replica core this task drives (`jsservice::replica`).
    core: Replica,
    /// Where `core`'s clock starts.
    epoch: Instant,
    /// A file stream's store directory.
    path: Option<PathBuf>,
    /// Where the replies to the fetch under way come, if one is.
    inbox: Option<fetch::Inbox>,
    /// A repair of a damaged store is under way (counted and logged).
    repairing: bool,
    handle: Arc<StreamHandle>,
    publisher: InternalPublisher,
    /// This server leads the group (and has applied what was committed
    /// when it took over).
    leading: bool,
    serving: Option<Serving>,
    /// Where the create is answered, by the first replica to lead it.
    create: Option<(String, Instant)>,
    push: PushWatch,
    /// The push interest last proposed, and when, by consumer.
    push_proposed: BTreeMap<String, (bool, Instant)>,
    sources: SourceLinks,
    /// A copy was applied while leading since the links last followed:
    /// its ack is due.
    sourced: bool,
    /// Reply subjects of the changes proposed lately, oldest first.
    proposed: BTreeSet<String>,
    proposed_order: VecDeque<String>,
    /// Requests forwarded after a failed proposal, by reply subject.
    forwarded: BTreeMap<String, u32>,
    last_tick: Option<Instant>,
    last_reconcile: Option<Instant>,
    /// Reads waiting for this leader's barrier to be applied, so they see
    /// everything proposed before them: (barrier token, the request, its
    /// requester, the request as it arrived).
    reads: VecDeque<(u64, Read, String, Inbound)>,
    next_barrier: u64,
    /// The config the meta group assigned, as text and parsed.
    assigned: Option<(String, Box<StreamConfig>)>,
    /// When the assigned config was last proposed: one the stream refuses
    /// (a consumer made since the meta leader checked the limits) is
    /// proposed again only every CONFIG_RETRY, not at every reconcile.
    config_proposed: Option<Instant>,
}

impl Actor {
    pub fn new(
        jc: Arc<JsCluster>,
        js: Arc<JetStream>,
        group: u64,
        opened: Opened,
        handle: Arc<StreamHandle>,
        create: Option<(String, Instant)>,
    ) -> Actor {
        let Opened {
            machine,
            file,
            mark,
            fetch,
        } = opened;
        let name = machine.stream().config.name.clone();
        let path = file.as_ref().map(|f| f.path.clone());
        let home = ServerHome::new(file, jc.meta.clone(), name.clone(), group);
        let epoch = Instant::now();
        let clock = Clock {
            now: 0,
            wall: wall_clock(),
        };
        // Its events wait for `run`: this runs on the node's thread,
        // which a hold would call back into.
        let core = Replica::new((machine, mark, fetch), Box::new(home), TIMING, clock);
        Actor {
            publisher: js.bus.publisher(),
            push: PushWatch::new(&js),
            sources: SourceLinks::new(&js.account, &name, true),
            sourced: false,
            jc,
            js,
            group,
            core,
            epoch,
            path,
            inbox: None,
            repairing: false,
            handle,
            leading: false,
            serving: None,
            create,
            push_proposed: BTreeMap::new(),
            proposed: BTreeSet::new(),
            proposed_order: VecDeque::new(),
            forwarded: BTreeMap::new(),
            last_tick: None,
            last_reconcile: None,
            reads: VecDeque::new(),
            next_barrier: 0,
            assigned: None,
            config_proposed: None,
        }
    }

    pub async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Cmd>) {
        let mut last_duties = Instant::now();
        let duties = tokio::time::sleep(FOLLOW_EVERY);
        tokio::pin!(duties);
        let interest_changed = self.push.watcher.notify();
        self.drain();
        loop {
            let due = self.duties_at(last_duties);
            if let Some(at) = due {
                let at = tokio::time::Instant::from_std(at);
                if duties.deadline() != at {
                    duties.as_mut().reset(at);
                }
            }
            tokio::select! {
                cmd = rx.recv() => {
                    let Some(cmd) = cmd else { break };
                    if !self.take_batch(cmd, &mut rx) {
                        break;
                    }
                }
                _ = interest_changed.notified(), if self.serving.is_some() => {
                    self.reconcile_push(true);
                }
                _ = &mut duties, if due.is_some() => {
                    last_duties = Instant::now();
                    match self.core.is_fetching() {
                        true => {
                            self.core.handle_timeout(self.clock());
                            self.drain();
                        }
                        false => self.leader_duties(),
                    }
                }
            }
            self.repair_if_damaged();
            self.publisher.flush();
        }
        self.unserve();
        self.publisher.flush();
    }

    /// When the periodic duties are next due, the last having run at
    /// `last`: a fetch's and a busy leader's every FOLLOW_EVERY; a leader
    /// with nothing pending (serving, no create to answer, no deadline, no
    /// sources) only every RECONCILE_EVERY, so thousands of idle streams
    /// do not wake their tasks twenty times a second. None: no duties.
    fn duties_at(&self, last: Instant) -> Option<Instant> {
        if self.core.is_fetching() || self.repairing {
            return Some(last + FOLLOW_EVERY);
        }
        if !self.leading {
            return None;
        }
        let stream = self.core.machine().stream();
        let busy = self.serving.is_none()
            || self.create.is_some()
            || stream.next_deadline().is_some()
            || self.sources.next_wake().is_some()
            || !stream.source_specs().is_empty();
        Some(last + if busy { FOLLOW_EVERY } else { RECONCILE_EVERY })
    }

    /// Handles `first` and whatever else is queued, up to a batch. False
    /// once the replica is to stop.
    fn take_batch(&mut self, first: Cmd, rx: &mut mpsc::UnboundedReceiver<Cmd>) -> bool {
        let mut next = Some(first);
        let mut n = 0;
        while let Some(cmd) = next.take() {
            self.handle.received();
            if matches!(cmd, Cmd::Raft(RaftEvent::Stop)) {
                self.stop();
                return false;
            }
            self.handle_cmd(cmd);
            self.repair_if_damaged();
            n += 1;
            if n < MAX_BATCH {
                next = rx.try_recv().ok();
            }
        }
        for run in self.sources.take_runs() {
            self.submit(run);
        }
        let delivered = self.sources.take_delivered();
        let sourced = std::mem::take(&mut self.sourced);
        if (delivered || sourced) && self.serving.is_some() {
            self.follow_sources();
        }
        true
    }

    fn handle_cmd(&mut self, cmd: Cmd) {
        match cmd {
            Cmd::Raft(RaftEvent::Committed {
                index,
                data,
                leader,
            }) => {
                self.core
                    .handle_committed(index, data, leader, self.clock());
                self.drain();
            }
            Cmd::Raft(RaftEvent::Snapshot { index, data }) => {
                self.core.handle_snapshot(index, data, self.clock());
                self.drain();
            }
            Cmd::Raft(RaftEvent::TakeSnapshot { index, stored }) => {
                self.core.handle_take_snapshot(index, stored, self.clock());
                self.drain();
            }
            Cmd::Catchup(m) => self.fetch_message(m),
            Cmd::Raft(RaftEvent::Leading(leading)) => {
                self.leading = leading;
                self.config_proposed = None;
                match leading {
                    true => {
                        self.tell_leading();
                        self.try_serve();
                    }
                    false => self.unserve(),
                }
            }
            Cmd::Raft(RaftEvent::Assigned { config, reply }) => {
                if self.serving.is_some() {
                    info!(
                        "JetStream cluster stream {}: applying its new config",
                        self.js.label(&self.handle.name)
                    );
                    let reply = Some(reply.as_str()).filter(|r| !r.is_empty());
                    let config = Bytes::from(config.into_bytes());
                    self.submit(Op::UpdateConfig { config }.replied(reply));
                }
            }
            Cmd::Raft(RaftEvent::Dropped(data)) => self.dropped(&data),
            Cmd::Raft(RaftEvent::Stop) => {}
            Cmd::Api(m) => self.request(m),
            Cmd::Answer(a) => self.send(a),
            Cmd::Inbox { routed, msg } => self.inbox(&routed, msg),
            Cmd::Info { consumers, done } => {
                let stream = self.core.machine().stream();
                let _ = done.send(stream::info(stream, consumers, wall_clock()));
            }
            // One server's alone.
            Cmd::Publish(_) | Cmd::Request { .. } | Cmd::Update { .. } | Cmd::Delete { .. } => {}
        }
    }

    /// Inputs submitted here and never proposed: whoever waits on them
    /// hears so at once, rather than at their timeout, unless another
    /// server listens on the input's subject. Leadership moved: while
    /// this server's subscriptions go and the new leader's come, a
    /// publish can reach both, and the new leader stores and answers it
    /// ("no responders" from here would have its client send it again).
    fn dropped(&mut self, data: &[Bytes]) {
        let mine: Vec<&Subscription> = self
            .serving
            .iter()
            .flat_map(|s| s.subjects.values().chain(s.others.iter()))
            .map(|s| s.as_ref())
            .collect();
        let mut answers = Vec::new();
        for d in data {
            let Ok(entry) = Entry::decode_shared(d) else {
                continue;
            };
            if let Some((subject, a)) = reply::dropped(&entry.op) {
                if !self.js.bus.others_listen(subject.as_bytes(), &mine) {
                    answers.push(a);
                }
            }
        }
        let answered = answers.len();
        for a in answers {
            self.send(a);
        }
        debug!(
            "JetStream cluster stream {}: {} inputs not proposed, {answered} answered",
            self.js.label(&self.handle.name),
            data.len()
        );
    }

    /// The stream is gone from this server: its store goes. Its leader
    /// tells its consumers' waiting requests, as one server's stream does
    /// when it is deleted.
    fn stop(&mut self) {
        self.core.stop();
        self.drain();
        if self.serving.is_some() {
            let stream = self.core.machine_mut().stream_mut();
            let _ = stream.delete();
            for out in stream.take_outputs() {
                match out {
                    Output::Publish(m) => self.js.answer(&mut self.publisher, &Answer::out(m)),
                    Output::Event(e) => self.js.answer(&mut self.publisher, &Answer::event(e)),
                    Output::ConsumerDeleted(_) => {}
                }
            }
        }
        if let Some(path) = &self.path {
            let _ = self
                .core
                .machine_mut()
                .stream_mut()
                .store_mut()
                .delete_all();
            if let Err(e) = std::fs::remove_dir_all(path) {
                if e.kind() != std::io::ErrorKind::NotFound {
                    warn!("{}: {e}", path.display());
                }
            }
        }
    }

    /// The driver's clocks, for the replica core.
    fn clock(&self) -> Clock {
        Clock {
            now: self.epoch.elapsed().as_millis() as u64,
            wall: wall_clock(),
        }
    }

    /// Does what the replica core asks for, in order (its driver
    /// contract: after every call into it).
    fn drain(&mut self) {
        while let Some(event) = self.core.poll_event() {
            match event {
                Event::Applied {
                    leader, applied, ..
                } => self.applied(leader, *applied),
                Event::Snapshot { index, data, sync } => self.snapshot_taken(index, data, sync),
                Event::FetchBegun { index } => self.fetch_begun(index),
                Event::Ask(ask) => self.send_ask(ask),
                Event::FetchEnded => self.fetch_ended(),
                Event::Fetched {
                    index,
                    messages,
                    took,
                    sync,
                } => {
                    info!(
                        "JetStream cluster stream {} caught up to index {index} from the leader: {messages} messages fetched in {:.1?}",
                        self.js.label(&self.handle.name),
                        Duration::from_millis(took)
                    );
                    self.record_usage();
                    self.sync_fetched(sync);
                }
                Event::Hold(hold) => {
                    let group = self.group;
                    let _ = self.jc.node.call(move |e| e.hold(group, hold));
                    if !hold {
                        self.try_serve();
                    }
                }
                Event::StepDown => {
                    if self.leading {
                        // Fails only with no member to take over: the
                        // replica waits for one, as the stream does.
                        let _ = self.jc.step_down(self.group, None);
                    }
                    self.unserve();
                }
                Event::Restored { index } => {
                    info!(
                        "JetStream cluster stream {} caught up from the leader's snapshot at index {index}",
                        self.js.label(&self.handle.name)
                    );
                    self.record_usage();
                }
                Event::Repaired => {
                    self.record_usage();
                    self.repaired();
                }
                Event::Note(what) | Event::Diverged(what) => {
                    warn!(
                        "JetStream cluster stream {}: {what}",
                        self.js.label(&self.handle.name)
                    )
                }
                Event::Halted(why) => self.halted(&why),
            }
        }
    }

    /// Tells the rest of the server what the stream now holds: after each
    /// entry applied, and when a fetch, a leader's snapshot or a repair
    /// replaced the machine (a fetch's placeholder is never told).
    fn record_usage(&mut self) {
        if self.core.is_fetching() {
            return;
        }
        let grew = self.handle.record(self.core.machine_mut().stream_mut());
        self.js.add_usage(self.handle.storage, grew);
    }

    /// A snapshot for the node to compact its log behind: once the store
    /// is synced (off this task), so the log is compacted only behind a
    /// durable store.
    fn snapshot_taken(&mut self, index: u64, data: Vec<u8>, sync: Option<store::SyncHandle>) {
        let (jc, group) = (self.jc.clone(), self.group);
        let Some(sync) = sync else {
            jc.node.snapshot_taken(group, index, data);
            return;
        };
        let path = self.path.clone().unwrap_or_default();
        tokio::task::spawn_blocking(move || match sync.sync() {
            Ok(()) => jc.node.snapshot_taken(group, index, data),
            // The log is not compacted: it still holds what the store
            // may have lost, and a restart replays it.
            Err(e) => error!("replica store {}: sync failed: {e}", path.display()),
        });
    }

    /// Makes a fetched store durable, off the actor's loop. A failure
    /// costs only a fetch again at the next restart.
    fn sync_fetched(&self, sync: Option<store::SyncHandle>) {
        let Some(sync) = sync else { return };
        let path = self.path.clone().unwrap_or_default();
        tokio::task::spawn_blocking(move || {
            if let Err(e) = sync.sync() {
                error!(
                    "replica store {}: sync after a fetch failed: {e}",
                    path.display()
                );
            }
        });
    }

    /// This replica can go on no more: it stops applying and serving, and
    /// its node is removed (its log and store stay for a restart).
    fn halted(&mut self, why: &str) {
        error!(
            "JetStream cluster stream {}: {why}; this replica stops",
            self.js.label(&self.handle.name)
        );
        self.unserve();
        let group = self.group;
        let _ = self.jc.node.call(move |e| e.remove_group(group));
    }

    /// An entry applied: what it answers is sent if this server led the
    /// group when it was handed out.
    fn applied(&mut self, leader: bool, applied: Applied) {
        let config_changed = self.core.machine().stream().config_changed();
        self.record_usage();
        if let Outcome::Barrier { peer, token } = applied.outcome {
            if leader && peer == self.jc.me.id {
                self.serve_reads(token);
            }
        }
        if leader && matches!(applied.outcome, Outcome::Sourced(Ok(true))) {
            self.sourced = true;
        }
        // Subscriptions first: an update's answer must not reach its
        // requester before the interest in the new subjects reaches the
        // routes (the RS+ and the answer share the route, in order).
        let changed = self
            .core
            .machine_mut()
            .stream_mut()
            .take_consumers_changed();
        if self.serving.is_some() {
            if changed {
                let _ = self
                    .push
                    .refresh(self.core.machine().stream(), &mut self.publisher);
                self.reconcile_push(true);
            }
            if config_changed {
                self.follow_subjects();
            }
        }
        if leader && (applied.reply.is_some() || !applied.outputs.is_empty()) {
            let (jc, group) = (&self.jc, self.group);
            let stream = self.core.machine().stream();
            let answers = reply::answers(stream, applied, || {
                Some(jc.cluster_info(group, &stream.config))
            });
            for a in answers {
                self.send(a);
            }
        }
    }

    fn send(&mut self, a: Answer) {
        // A replicated stream's new consumer has its first leader (its
        // stream's), told as nats-server tells a consumer group's.
        if let What::Event(e) = &a.what {
            if let advisory::Event::Consumer {
                stream,
                consumer,
                action: Action::Create,
            } = e.as_ref()
            {
                if self.handle.config.read().num_replicas > 1 {
                    self.jc
                        .tell_leader(&self.js, stream, Some(consumer), self.group);
                }
            }
        }
        // A create or update, proposed by the meta leader that took the
        // request, is answered (and audited) here.
        let asked = match a.what {
            What::Api {
                kind: Kind::StreamCreate,
                ..
            } => "CREATE",
            What::Api {
                kind: Kind::StreamUpdate,
                ..
            } => "UPDATE",
            _ => return self.js.answer(&mut self.publisher, &a),
        };
        let asked = format!("$JS.API.STREAM.{asked}.{}", self.handle.name);
        self.js.answer_for(&mut self.publisher, &asked, &a);
    }

    /// A replicated stream's new leader says so (one replica has no
    /// leader to elect, as nats-server's R1 has no Raft group).
    fn tell_leading(&self) {
        let stream = self.core.machine().stream();
        if stream.config.num_replicas <= 1 {
            return;
        }
        let name = &stream.config.name;
        self.jc.tell_leader(&self.js, name, None, self.group);
        for consumer in stream.consumer_names() {
            self.jc
                .tell_leader(&self.js, name, Some(&consumer), self.group);
        }
    }

    /// Starts serving while this server leads.
    fn try_serve(&mut self) {
        if !self.leading || self.serving.is_some() || self.core.current().is_none() {
            return;
        }
        info!(
            "JetStream cluster new stream leader for {}",
            self.js.label(&self.handle.name)
        );
        let subjects = self.core.machine().stream().config.subjects.clone();
        let subjects = self.subscribe_subjects(&subjects);
        let mut others = self.subscribe_acks();
        others.extend(self.subscribe_api());
        others.extend(self.subscribe_fetches());
        self.serving = Some(Serving { subjects, others });
        self.push_proposed.clear();
        let _ = self
            .push
            .refresh(self.core.machine().stream(), &mut self.publisher);
        self.reconcile_push(true);
        self.leader_duties();
    }

    /// Stops serving: the subscriptions go (a new leader takes them up).
    fn unserve(&mut self) {
        if let Some(s) = self.serving.take() {
            for sub in s.subjects.into_values().chain(s.others) {
                self.js.bus.unsubscribe(&sub);
            }
        }
        self.push.clear();
        self.sources.close(&self.js);
        self.sources = SourceLinks::new(&self.js.account, &self.handle.name, true);
        self.forwarded.clear();
        // Reads waiting for a barrier that may never apply here: the new
        // leader answers them.
        for (_, _, _, original) in std::mem::take(&mut self.reads) {
            self.forward_later(&original);
        }
        self.last_tick = None;
        self.last_reconcile = None;
    }

    /// After an update changed the stream's subjects: subscribes the new
    /// ones and drops the old, leaving the ones that stay subscribed (a
    /// publish to them never meets a moment without interest).
    fn follow_subjects(&mut self) {
        let wanted: BTreeSet<String> = self
            .core
            .machine()
            .stream()
            .config
            .subjects
            .iter()
            .cloned()
            .collect();
        let Some(serving) = &mut self.serving else {
            return;
        };
        let gone: Vec<String> = serving
            .subjects
            .keys()
            .filter(|s| !wanted.contains(*s))
            .cloned()
            .collect();
        let added: Vec<String> = wanted
            .into_iter()
            .filter(|s| !serving.subjects.contains_key(s))
            .collect();
        if gone.is_empty() && added.is_empty() {
            return;
        }
        let dropped: Vec<Arc<Subscription>> = gone
            .iter()
            .filter_map(|s| serving.subjects.remove(s))
            .collect();
        let new = self.subscribe_subjects(&added);
        let Some(serving) = &mut self.serving else {
            return;
        };
        serving.subjects.extend(new);
        for sub in dropped {
            self.js.bus.unsubscribe(&sub);
        }
    }

    /// The stream's subjects: publishes are proposed straight from the
    /// subscriptions, which hear what the account imports on them too
    /// (nats-server's stream subscriptions take stream imports).
    fn subscribe_subjects(&self, subjects: &[String]) -> BTreeMap<String, Arc<Subscription>> {
        let publish: Arc<dyn InternalSink> = Arc::new(PublishSink {
            jc: self.jc.clone(),
            js: self.js.clone(),
            handle: self.handle.clone(),
            group: self.group,
        });
        let bus = &self.js.bus;
        subjects
            .iter()
            .filter_map(|subject| {
                match bus.subscribe_imported(subject, Reach::Cluster, publish.clone()) {
                    Ok(sub) => Some((subject.clone(), sub)),
                    Err(e) => {
                        let name = &self.handle.name;
                        error!("Stream '{name}': could not subscribe to {subject}: {e}");
                        None
                    }
                }
            })
            .collect()
    }

    /// Its consumers' ack and flow-control subjects: proposed straight
    /// from the subscriptions.
    fn subscribe_acks(&self) -> Vec<Arc<Subscription>> {
        let name = &self.handle.name;
        let acks: Arc<dyn InternalSink> = Arc::new(AckSink {
            jc: self.jc.clone(),
            group: self.group,
        });
        let wanted = ["$JS.ACK", "$JS.FC"]
            .into_iter()
            .map(|prefix| (format!("{prefix}.{name}.>"), acks.clone()))
            .collect();
        self.subscribe_all(wanted)
    }

    /// The stream's API subjects: requests come to this actor.
    fn subscribe_api(&self) -> Vec<Arc<Subscription>> {
        let sink: Arc<dyn InternalSink> = Arc::new(ApiSink {
            jc: self.jc.clone(),
            js: self.js.clone(),
            handle: self.handle.clone(),
            group: self.group,
        });
        let wanted = api_subjects(&self.handle.name)
            .into_iter()
            .map(|s| (s, sink.clone()))
            .collect();
        self.subscribe_all(wanted)
    }

    /// Fetches from replicas catching up: answered from this store.
    fn subscribe_fetches(&self) -> Vec<Arc<Subscription>> {
        let sink: Arc<dyn InternalSink> = Arc::new(fetch::FetchSink {
            handle: self.handle.clone(),
        });
        self.subscribe_all(vec![(fetch::ask_subject(self.group), sink)])
    }

    fn subscribe_all(
        &self,
        wanted: Vec<(String, Arc<dyn InternalSink>)>,
    ) -> Vec<Arc<Subscription>> {
        let mut subs = Vec::new();
        for (subject, sink) in wanted {
            match self.js.bus.subscribe(&subject, Reach::Cluster, sink) {
                Ok(s) => subs.push(s),
                Err(e) => error!(
                    "Stream '{}': could not subscribe to {subject}: {e}",
                    self.handle.name
                ),
            }
        }
        subs
    }

    /// What a serving leader looks after: a new stream's create, clock
    /// ticks, its sources, the config the meta group assigned.
    fn leader_duties(&mut self) {
        if self.serving.is_none() {
            return self.try_serve();
        }
        if let Some((reply, at)) = self.create.take() {
            if at.elapsed() < CREATE_ANSWER_WITHIN {
                self.answer_create(&reply);
            }
        }
        let due = self
            .core
            .machine()
            .stream()
            .next_deadline()
            .is_some_and(|d| d <= wall_clock());
        if due && self.last_tick.is_none_or(|t| t.elapsed() >= TICK_EVERY) {
            self.last_tick = Some(Instant::now());
            self.submit(Op::Tick);
        }
        self.follow_sources();
        if self
            .last_reconcile
            .is_none_or(|t| t.elapsed() >= RECONCILE_EVERY)
        {
            self.last_reconcile = Some(Instant::now());
            self.reconcile_config();
            self.reconcile_push(false);
            for op in crate::js::stream::deaf_pulls(&self.js.bus, self.core.machine().stream()) {
                self.submit(op);
            }
        }
    }

    /// Sends the acks the applied copies allow, and the source links'
    /// requests due now: lookups, resets, pulls.
    fn follow_sources(&mut self) {
        let stream = self.core.machine().stream();
        // Applied means committed: a quorum holds the copies.
        let acks = self.sources.durable(&stream.source_positions());
        let requests = self.sources.follow(&self.js, &self.handle, stream);
        for m in acks.iter().chain(&requests) {
            self.publisher.publish_out(m);
        }
    }

    fn answer_create(&mut self, reply: &str) {
        let stream = self.core.machine().stream();
        let mut info = stream.info(wall_clock(), false, "");
        info.cluster = Some(self.jc.cluster_info(self.group, &stream.config));
        let name = info.config.name.clone();
        self.send(reply::created(reply, info));
        self.send(Answer::event(advisory::Event::Stream {
            stream: name,
            action: Action::Create,
        }));
    }

    /// Brings the stream to the config the meta group assigned: through
    /// the log, so every replica changes at the same point.
    fn reconcile_config(&mut self) {
        let meta = self.jc.meta.lock();
        let Some(config) = meta.stream_of_group(self.group).map(|a| &a.config) else {
            return;
        };
        // Parsed once per assigned config, not at every look.
        if self
            .assigned
            .as_ref()
            .is_none_or(|(text, _)| text != config)
        {
            let Ok(want) = serde_json::from_str::<StreamConfig>(config) else {
                return;
            };
            self.assigned = Some((config.clone(), Box::new(want)));
            self.config_proposed = None;
        }
        drop(meta);
        let Some((config, want)) = &self.assigned else {
            return;
        };
        let recently = self
            .config_proposed
            .is_some_and(|at| at.elapsed() < CONFIG_RETRY);
        if self.core.machine().stream().config != **want && !recently {
            self.config_proposed = Some(Instant::now());
            let config = config.clone();
            info!(
                "JetStream cluster stream {}: applying its new config",
                self.js.label(&self.handle.name)
            );
            let config = Bytes::from(config.into_bytes());
            self.submit(Op::UpdateConfig { config });
        }
    }

    /// Proposes a push consumer's interest where it differs from the
    /// replicated state (again if that has not changed a moment later:
    /// the proposal may have been lost; at once when `now`, on a change
    /// of interest).
    fn reconcile_push(&mut self, now: bool) {
        let interest = self.push.interest(&mut self.publisher);
        for (consumer, active) in interest {
            let on = self
                .core
                .machine()
                .stream()
                .consumer(&consumer)
                .is_some_and(|c| c.push_active());
            if active == on {
                continue;
            }
            let recent = self
                .push_proposed
                .get(&consumer)
                .is_some_and(|(v, at)| *v == active && at.elapsed() < RECONCILE_EVERY);
            if recent && !now {
                continue;
            }
            self.push_proposed
                .insert(consumer.clone(), (active, Instant::now()));
            self.submit(Op::PushInterest { consumer, active });
        }
    }

    /// Proposes an input (non-blocking; dropped unless this server leads
    /// the group).
    fn submit(&self, op: Op) {
        self.jc.node.submit(self.group, entry(op));
    }

    fn inbox(&mut self, routed: &str, m: Inbound) {
        if self.serving.is_none() {
            return;
        }
        match self.sources.inbox(routed, m) {
            Inboxed::Nothing => {}
            Inboxed::Send(m) => {
                self.publisher.publish_out(&m);
            }
            Inboxed::Copy(op, ack) => self.submit(op.replied(Some(&ack))),
            Inboxed::Input(op) => self.submit(op),
        }
    }

    /// An API request to this stream.
    fn request(&mut self, m: Inbound) {
        let original = m.clone();
        let (reply, request) = match classify(m, Mode::Clustered, &mut new_consumer_name) {
            Request::Answer(a) => return self.send(a),
            Request::Stream { reply, request, .. } => (reply, request),
            _ => return,
        };
        if self.serving.is_none() {
            // Leadership moved after the request was queued here: it goes
            // to the new leader.
            self.forward_later(&original);
            return;
        }
        let Some(to) = reply else { return };
        match request {
            // Direct gets are answered from this replica as it is, as
            // nats-server's replicas answer them.
            StreamRequest::Read(read @ Read::Direct { .. }) => self.read(read, &to),
            // The others see everything proposed before them (a pull, an
            // ack): answered once this leader's barrier behind those is
            // applied.
            StreamRequest::Read(read) => {
                self.next_barrier += 1;
                let token = self.next_barrier;
                let barrier = Op::Barrier {
                    peer: self.jc.me.id,
                    token,
                };
                if self.jc.node.propose(self.group, entry(barrier)).is_err() {
                    self.forward_later(&original);
                    return;
                }
                self.reads.push_back((token, read, to, original));
            }
            StreamRequest::Change(op) => self.change(&to, op, &original),
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
                let missing =
                    consumer.is_some_and(|c| self.core.machine().stream().consumer(&c).is_none());
                let r = match missing {
                    true => Err(E::CONSUMER_NOT_FOUND.err()),
                    false => self.jc.step_down(self.group, preferred.as_deref()),
                };
                let a = match r {
                    Ok(()) => Answer::ok(&to, kind, &Success { success: true }),
                    Err(e) => Answer::refused(&to, kind, &e),
                };
                self.send(a);
            }
        }
    }

    /// Answers the reads waiting for barriers up to `token`.
    fn serve_reads(&mut self, token: u64) {
        while self.reads.front().is_some_and(|(t, ..)| *t <= token) {
            let (_, read, to, _) = self.reads.pop_front().expect("looked");
            self.read(read, &to);
        }
    }

    /// Answers a read from this replica.
    fn read(&mut self, read: Read, to: &str) {
        let cluster = self
            .jc
            .cluster_info(self.group, &self.core.machine().stream().config);
        let server = self.js.bus.server_name().to_string();
        let answers = stream::read(
            self.core.machine().stream(),
            read,
            to,
            wall_clock(),
            Some(&cluster),
            &server,
        );
        for a in answers {
            self.send(a);
        }
    }

    /// A change, admitted against this replica and proposed; the answer
    /// leaves once the entry is applied. The same request twice (this
    /// server got the original while another leader forwarded its copy)
    /// is proposed once. Pull requests are not API requests: their
    /// inboxes are reused.
    fn change(&mut self, to: &str, op: Op, original: &Inbound) {
        let once = !matches!(op, Op::Pull { .. });
        if once && self.proposed.contains(to) {
            return;
        }
        let op = match stream_api::admit(
            self.core.machine().stream(),
            &self.js.account_limits,
            Some(to),
            op,
        ) {
            Admitted::Answer(a) => return self.send(a),
            Admitted::Nothing => return,
            Admitted::Input(op) => op,
        };
        if self.jc.node.propose(self.group, entry(op)).is_err() {
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
        let bus = self.js.bus.clone();
        let m = m.clone();
        tokio::spawn(async move {
            tokio::time::sleep(FORWARD_AFTER).await;
            let mut p = bus.publisher();
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

/// Publishes to a stream's subjects, while this server leads it:
/// proposed from the publisher's task, unless the server's storage limit
/// would be passed.
struct PublishSink {
    jc: Arc<JsCluster>,
    js: Arc<JetStream>,
    handle: Arc<StreamHandle>,
    group: u64,
}

impl InternalSink for PublishSink {
    fn deliver(&self, msg: Message<'_>) {
        let reply = msg
            .reply
            .filter(|r| !r.is_empty())
            .map(String::from_utf8_lossy);
        let size = msg.subject.len() + msg.headers.map_or(0, <[u8]>::len) + msg.payload.len();
        if let Some(e) = self.js.would_exceed(&self.handle, size as u64) {
            if let Some(reply) = reply {
                let ack = PubAck::Error(e);
                self.js
                    .bounce(Answer::puback(&reply, &self.handle.name, &ack).msg);
            }
            return;
        }
        let subject = String::from_utf8_lossy(msg.subject);
        let entry = jsservice::stream_sm::encode_publish(
            wall_clock(),
            reply.as_deref(),
            &subject,
            msg.headers,
            msg.payload,
        );
        self.jc.node.submit(self.group, entry);
    }

    fn traced_stream(&self) -> Option<&str> {
        Some(&self.handle.name)
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
            self.jc
                .node
                .submit(self.group, entry(op.replied(reply.as_deref())));
        }
    }
}

/// A led stream's API requests, to its actor; pulls are proposed as they
/// come, in order with the publishes and acks from the same connection
/// (the state machine answers one for a missing consumer).
struct ApiSink {
    jc: Arc<JsCluster>,
    /// The stream's account's JetStream.
    js: Arc<JetStream>,
    handle: Arc<StreamHandle>,
    group: u64,
}

impl InternalSink for ApiSink {
    fn deliver_from(&self, msg: Message<'_>, publisher: u64) {
        self.js.note_request(&msg, publisher);
        self.deliver(msg);
    }

    fn deliver(&self, msg: Message<'_>) {
        if !msg.subject.starts_with(b"$JS.API.CONSUMER.MSG.NEXT.") {
            self.handle.send(Cmd::Api(inbound(msg)));
            return;
        }
        if !self.js.bus.pull_has_listener(msg.subject, msg.reply) {
            return;
        }
        match classify(inbound(msg), Mode::Clustered, &mut String::new) {
            Request::Stream {
                request: StreamRequest::Change(op @ Op::Pull { .. }),
                ..
            } => self.jc.node.submit(self.group, entry(op)),
            Request::Answer(a) => {
                self.handle.send(Cmd::Answer(a));
            }
            _ => {}
        }
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
        "CONSUMER.UNPIN.{}.*",
        "CONSUMER.RESET.{}.*",
    ]
    .iter()
    .map(|t| format!("$JS.API.{}", t.replace("{}", name)))
    .collect()
}
