//! What both drivers' stream actors share: the handle the rest of the
//! server sees of a stream, the commands its actor takes, and the pieces
//! of an actor that do not depend on when data is durable (push
//! consumers' interest, source links, the stream's figures).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use jetstream::api::{ApiError, ConsumerInfo, Storage, StreamConfig, StreamInfo};
use jetstream::output::OutMsg;
use jetstream::stream::Stream;
use jsservice::request::{Inbound, StreamRequest};
use jsservice::sourcing::{Inboxed, Links};
use parking_lot::{Mutex, RwLock};
use tokio::sync::{mpsc, oneshot};
use tracing::error;

use super::{mono_ms, sinks, JetStream};
use flotilla_core::bus::Publisher as InternalPublisher;
use flotilla_core::bus::Subscription;
use flotilla_core::bus::Watcher;

/// Messages queued to one stream before publishers get `429 Too Many
/// Requests` instead.
const MAX_QUEUED: usize = 256 * 1024;

/// What a stream's actor is asked to do.
pub enum Cmd {
    /// A message on one of the stream's subjects (one server; a cluster's
    /// leader proposes publishes straight from its subscription).
    Publish(Inbound),
    /// A request about this stream, classified: from the API, or an ack
    /// or flow-control response to one of its consumers.
    Request {
        reply: Option<String>,
        request: StreamRequest,
    },
    /// An API request as it arrived (a cluster's leader: classified by
    /// the actor, and sent on to the new leader if leadership moved).
    Api(Inbound),
    /// Something to send from the actor's task (a refusal found where
    /// nothing can publish).
    Answer(jsservice::reply::Answer),
    /// A new config, checked against the account's other streams, and
    /// where to answer once it is durable; `done` once it is applied (one
    /// server; a cluster changes configs through the stream's log).
    Update {
        config: Box<StreamConfig>,
        reply: String,
        done: oneshot::Sender<()>,
    },
    /// The stream's info, and its consumers' when asked for.
    Info {
        consumers: bool,
        done: oneshot::Sender<(StreamInfo, Vec<ConsumerInfo>)>,
    },
    /// Remove the stream and its storage (one server).
    Delete {
        done: oneshot::Sender<Result<(), ApiError>>,
    },
    /// Something on the inbox of this stream's sources (the subject it
    /// was routed on, and the message).
    Inbox { routed: String, msg: Inbound },
    /// From the stream's Raft group (a cluster).
    Raft(RaftEvent),
    /// A fetch of messages from the leader's store: an ask (to a leader)
    /// or a reply (to a replica catching up) (a cluster).
    Catchup(Inbound),
}

/// What a replica hears from its Raft group, in order.
pub enum RaftEvent {
    /// A committed entry; `leader`: this server led the group when the
    /// entry was handed out, so it sends what the entry answers.
    Committed {
        index: u64,
        data: Bytes,
        leader: bool,
    },
    /// A leader's snapshot replaced the log: the state is this, as of
    /// `index`.
    Snapshot { index: u64, data: Bytes },
    /// The Raft node wants the state as of `index`, the last index it
    /// handed out (to compact the log, or to catch a follower up): every
    /// entry up to it came before this in the queue.
    /// `stored`: the index of the snapshot the log holds now.
    TakeSnapshot { index: u64, stored: u64 },
    /// Whether this server leads the group. `true` comes once the node
    /// has handed out every entry committed when it took over, and after
    /// them in this queue, so a replica serves only once its answers are
    /// not from behind its predecessor's.
    Leading(bool),
    /// The meta group assigned the stream this config (JSON); its leader
    /// proposes it, and answers `reply` (if any) once it is applied.
    Assigned { config: String, reply: String },
    /// Inputs submitted here that the group did not take (this server no
    /// longer led it, or raft-rs dropped the proposal): their requesters
    /// are answered (`jsservice::reply::dropped`).
    Dropped(Vec<Bytes>),
    /// The stream is no longer on this server.
    Stop,
}

/// What the rest of the server sees of one stream on this server (one
/// server's stream, or a cluster's replica).
pub struct StreamHandle {
    pub name: String,
    pub storage: Storage,
    tx: mpsc::UnboundedSender<Cmd>,
    /// The configuration in force, for cross-stream checks and listings.
    pub config: RwLock<StreamConfig>,
    pub(super) subs: Mutex<Vec<Arc<Subscription>>>,
    pub msgs: AtomicU64,
    pub bytes: AtomicU64,
    pub consumers: AtomicU64,
    queued: AtomicUsize,
}

impl StreamHandle {
    /// The handle of a stream whose actor takes from the receiver.
    pub fn new(stream: &Stream) -> (Arc<StreamHandle>, mpsc::UnboundedReceiver<Cmd>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let st = stream.store().state();
        let handle = Arc::new(StreamHandle {
            name: stream.config.name.clone(),
            storage: stream.config.storage,
            tx,
            config: RwLock::new(stream.config.clone()),
            subs: Mutex::new(Vec::new()),
            msgs: AtomicU64::new(st.msgs),
            bytes: AtomicU64::new(st.bytes),
            consumers: AtomicU64::new(stream.consumer_names().len() as u64),
            queued: AtomicUsize::new(0),
        });
        (handle, rx)
    }

    /// Queues a command; false if the actor has gone (stream deleted).
    pub fn send(&self, cmd: Cmd) -> bool {
        self.try_send(cmd).is_ok()
    }

    /// Queues a command, or hands it back if the actor has gone.
    pub fn try_send(&self, cmd: Cmd) -> Result<(), Box<Cmd>> {
        self.queued.fetch_add(1, Ordering::Relaxed);
        self.tx.send(cmd).map_err(|e| {
            self.queued.fetch_sub(1, Ordering::Relaxed);
            Box::new(e.0)
        })
    }

    /// Commands queued for the actor and not yet taken.
    pub fn queued(&self) -> usize {
        self.queued.load(Ordering::Relaxed)
    }

    pub(super) fn overloaded(&self) -> bool {
        self.queued.load(Ordering::Relaxed) >= MAX_QUEUED
    }

    /// The actor took a command.
    pub fn received(&self) {
        self.queued.fetch_sub(1, Ordering::Relaxed);
    }

    /// Records what `stream` holds now (its config only when it changed
    /// since the last record: this runs for every applied input); returns
    /// the change in bytes.
    pub fn record(&self, stream: &mut Stream) -> i64 {
        let st = stream.store().state();
        self.msgs.store(st.msgs, Ordering::Relaxed);
        let before = self.bytes.swap(st.bytes, Ordering::Relaxed);
        self.consumers
            .store(stream.consumer_count() as u64, Ordering::Relaxed);
        if stream.take_config_changed() {
            *self.config.write() = stream.config.clone();
        }
        debug_assert!(
            *self.config.read() == stream.config,
            "a config change went unseen"
        );
        st.bytes as i64 - before as i64
    }
}

/// A stream's info, and its consumers' when asked for.
pub fn info(stream: &Stream, consumers: bool, now: i64) -> (StreamInfo, Vec<ConsumerInfo>) {
    let info = stream.info(now, false, "");
    let cs = if consumers {
        stream
            .consumer_names()
            .iter()
            .filter_map(|n| stream.consumer_info(n, now).ok())
            .collect()
    } else {
        Vec::new()
    };
    (info, cs)
}

/// Answers a read from `stream`; one that may be large is computed with
/// the runtime told, so the tasks queued behind it move to another
/// worker.
pub fn read(
    stream: &jetstream::stream::Stream,
    read: jsservice::request::Read,
    to: &str,
    now: i64,
    cluster: Option<&jetstream::api::ClusterInfo>,
    server: &str,
) -> Vec<jsservice::reply::Answer> {
    match read.may_be_large() {
        true => tokio::task::block_in_place(|| {
            jsservice::stream_api::read(stream, read, to, now, cluster, server)
        }),
        false => jsservice::stream_api::read(stream, read, to, now, cluster, server),
    }
}

struct PushTarget {
    consumer: String,
    subject: String,
    group: String,
    active: bool,
}

/// Whether push consumers' deliver subjects have subscribers, followed as
/// subscriptions come and go (nats-server's sublist notifications).
pub struct PushWatch {
    targets: Vec<PushTarget>,
    /// Wakes the actor when a subscription on a watched subject comes or
    /// goes.
    pub watcher: Watcher,
}

impl PushWatch {
    pub fn new(js: &JetStream) -> PushWatch {
        PushWatch {
            targets: Vec::new(),
            watcher: js.bus.watcher(),
        }
    }

    /// Follows `stream`'s push consumers (after consumers changed), and
    /// returns the interest that changed, as `poll` does.
    pub fn refresh(
        &mut self,
        stream: &Stream,
        publisher: &mut InternalPublisher,
    ) -> Vec<(String, bool)> {
        let old: BTreeMap<String, bool> = self
            .targets
            .drain(..)
            .map(|t| (t.consumer, t.active))
            .collect();
        self.targets = stream
            .push_targets()
            .into_iter()
            .map(|(consumer, subject, group)| PushTarget {
                active: old.get(&consumer).copied().unwrap_or(false),
                consumer,
                subject,
                group,
            })
            .collect();
        self.watcher
            .watch(self.targets.iter().map(|t| t.subject.as_str()));
        self.poll(publisher)
    }

    /// The consumers whose deliver subject gained or lost its last
    /// subscriber since the last look: (consumer, active).
    pub fn poll(&mut self, publisher: &mut InternalPublisher) -> Vec<(String, bool)> {
        let mut changed = Vec::new();
        for t in &mut self.targets {
            let active = publisher.has_interest(&t.subject, &t.group);
            if active != t.active {
                t.active = active;
                changed.push((t.consumer.clone(), active));
            }
        }
        changed
    }

    /// Every push consumer's interest now: (consumer, active).
    pub fn interest(&self, publisher: &mut InternalPublisher) -> Vec<(String, bool)> {
        self.targets
            .iter()
            .map(|t| {
                (
                    t.consumer.clone(),
                    publisher.has_interest(&t.subject, &t.group),
                )
            })
            .collect()
    }

    /// Stops watching (a replica that no longer leads).
    pub fn clear(&mut self) {
        self.targets.clear();
        self.watcher.watch(std::iter::empty::<&str>());
    }
}

/// A stream's sources: the links to their origins
/// (`jsservice::sourcing`), and the inbox their answers come back on,
/// subscribed while the stream has sources.
pub struct SourceLinks {
    links: Links,
    inbox: Option<Arc<Subscription>>,
    /// Durable sources' deliver subjects, subscribed.
    delivers: BTreeMap<String, Arc<Subscription>>,
    /// In a cluster the inbox is advertised to routes: an origin may be
    /// led elsewhere.
    clustered: bool,
    /// Something came on the inbox since [`SourceLinks::take_delivered`].
    delivered: bool,
}

impl SourceLinks {
    pub fn new(account: &str, stream: &str, clustered: bool) -> SourceLinks {
        SourceLinks {
            links: Links::new(stream, sinks::source_inbox()).in_account(account),
            inbox: None,
            delivers: BTreeMap::new(),
            clustered,
            delivered: false,
        }
    }

    /// Subscribes the inbox while `stream` has sources, and returns the
    /// requests due now.
    pub fn follow(
        &mut self,
        js: &JetStream,
        handle: &Arc<StreamHandle>,
        stream: &Stream,
    ) -> Vec<OutMsg> {
        let specs = stream.source_specs();
        match (&self.inbox, specs.is_empty()) {
            (None, false) => {
                let inbox = self.links.inbox_subject().to_string();
                match sinks::subscribe_inbox(js, handle, &inbox, self.clustered) {
                    Ok(sub) => self.inbox = Some(sub),
                    Err(e) => error!("Stream '{}': sources inbox: {e}", handle.name),
                }
            }
            (Some(_), true) => self.close(js),
            _ => {}
        }
        if specs.is_empty() && self.links.is_empty() {
            return Vec::new();
        }
        let requests = self.links.follow(&specs, mono_ms());
        self.follow_delivers(js, handle);
        requests
    }

    /// Keeps one subscription per durable source's deliver subject.
    fn follow_delivers(&mut self, js: &JetStream, handle: &Arc<StreamHandle>) {
        let wanted = self.links.deliver_subjects();
        let gone: Vec<String> = self
            .delivers
            .keys()
            .filter(|s| !wanted.contains(s))
            .cloned()
            .collect();
        for subject in gone {
            if let Some(sub) = self.delivers.remove(&subject) {
                js.bus.unsubscribe(&sub);
            }
        }
        for subject in wanted {
            if self.delivers.contains_key(&subject) {
                continue;
            }
            match sinks::subscribe_routed(js, handle, &subject, self.clustered) {
                Ok(sub) => {
                    self.delivers.insert(subject, sub);
                }
                Err(e) => error!("Stream '{}': source deliver subject: {e}", handle.name),
            }
        }
    }

    /// The sources' positions, now durable: the acks they allow
    /// (`Links::durable`).
    pub fn durable(&mut self, positions: &BTreeMap<String, u64>) -> Vec<OutMsg> {
        self.links.durable(positions)
    }

    /// Something arrived on the inbox.
    pub fn inbox(&mut self, routed: &str, msg: Inbound) -> Inboxed {
        self.delivered = true;
        self.links.inbox(routed, msg, mono_ms())
    }

    /// The copies taken since the last call, a run per source
    /// (`Links::take_runs`): applied or proposed at the end of a batch.
    pub fn take_runs(&mut self) -> Vec<jsservice::stream_sm::Op> {
        self.links.take_runs()
    }

    /// Whether anything came on the inbox since the last call. Drivers
    /// follow the links after a batch that took deliveries: those used up
    /// pulls, and the next goes out now, not when the queue is next empty
    /// or the next duties come (the origin would sit idle until then).
    pub fn take_delivered(&mut self) -> bool {
        std::mem::take(&mut self.delivered)
    }

    /// When `follow` next has something to do (monotonic ms).
    pub fn next_wake(&self) -> Option<u64> {
        self.links.next_wake()
    }

    /// Lets go of the inbox.
    pub fn close(&mut self, js: &JetStream) {
        if let Some(sub) = self.inbox.take() {
            js.bus.unsubscribe(&sub);
        }
        for (_, sub) in std::mem::take(&mut self.delivers) {
            js.bus.unsubscribe(&sub);
        }
    }
}

/// Publishing what a state machine produced.
pub trait PublishOut {
    /// Publishes `m`; whether anyone received it.
    fn publish_out(&mut self, m: &jetstream::output::OutMsg) -> bool;
}

impl PublishOut for InternalPublisher {
    fn publish_out(&mut self, m: &jetstream::output::OutMsg) -> bool {
        self.publish(
            m.route_subject(),
            &m.subject,
            m.reply.as_deref(),
            m.headers.as_deref(),
            &m.payload,
        )
    }
}

/// A stream's waiting pull requests whose requesters stopped listening,
/// as inputs that drop them (one per consumer).
pub fn deaf_pulls(
    bus: &flotilla_core::bus::Bus,
    stream: &jetstream::stream::Stream,
) -> Vec<jsservice::stream_sm::Op> {
    let mut deaf: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for (consumer, reply) in stream.waiting_pulls() {
        if !bus.has_listener(reply.as_bytes()) {
            deaf.entry(consumer).or_default().push(reply);
        }
    }
    deaf.into_iter()
        .map(|(consumer, replies)| jsservice::stream_sm::Op::DropPulls { consumer, replies })
        .collect()
}
