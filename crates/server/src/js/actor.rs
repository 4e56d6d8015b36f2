//! One task per stream. It owns the `Stream` state machine and its
//! storage, takes commands in batches, and for each batch:
//!
//! 1. applies every command, collecting replies in order;
//! 2. persists what consumers changed and collects the store's writes;
//! 3. hands the sync handles to the group committer, without waiting;
//! 4. releases the batch's replies and deliveries once its commit (and
//!    every earlier one) is done.
//!
//! Batches are pipelined: while one is being synced the next is built.
//! If a write or sync fails, that batch and every later one in flight are
//! answered with errors, and the stream is reloaded from disk, so memory
//! never runs ahead of what the disk holds.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use jetstream::api::{
    ApiError, ConsumerAction, ConsumerConfig, ConsumerInfo, CreateConsumerRequest, StreamConfig,
    StreamInfo, E,
};
use jetstream::output::{OutMsg, Output};
use jetstream::stream::{Incoming, PubAck, Stream};
use store::SyncHandle;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tracing::{error, warn};

use super::commit::Done;
use super::persist::{self, ConsumerJournal, Loaded, StreamDirs};
use super::response::{self, Kind};
use super::sinks::status_msg;
use super::sources::Sources;
use super::stream_api::{self, Op, Reply};
use super::{wall_clock, Inbound, JetStream, StreamHandle, SyncPolicy};
use crate::interest::Watcher;
use crate::internal::InternalPublisher;

/// Commands taken into one batch at most.
const MAX_BATCH: usize = 4096;
/// Batches being synced at once, at most.
const MAX_INFLIGHT: usize = 8;
/// A batch of at most this many commands, with nothing else in flight,
/// may be synced without the commit thread (see `Committer::try_here`).
/// Under load batches grow past it and keep their pipelining.
const SYNC_HERE_MAX: usize = 4;

pub enum Cmd {
    /// A message on one of the stream's subjects.
    Publish(Inbound),
    Ack {
        consumer: String,
        msg: Inbound,
    },
    FlowControl {
        consumer: String,
        subject: String,
    },
    /// A request for this stream from the API dispatcher.
    Api {
        op: Op,
        reply: String,
    },
    Update {
        config: Box<StreamConfig>,
        done: oneshot::Sender<Result<StreamInfo, ApiError>>,
    },
    /// The stream's info, and its consumers' when asked for.
    Info {
        consumers: bool,
        done: oneshot::Sender<(StreamInfo, Vec<ConsumerInfo>)>,
    },
    Delete {
        done: oneshot::Sender<Result<(), ApiError>>,
    },
    /// From a stream sourcing from this one: run this internal consumer.
    CreateSourceConsumer {
        config: Box<ConsumerConfig>,
        done: oneshot::Sender<Result<(), ApiError>>,
    },
    DropSourceConsumer {
        name: String,
    },
    /// A delivery from a source's consumer on its origin.
    Sourced {
        key: String,
        generation: u64,
        msg: Inbound,
    },
    SourceAttached {
        key: String,
        generation: u64,
        result: Result<(), ApiError>,
    },
}

/// Something a batch releases once durable.
enum Item {
    Out(OutMsg),
    Ack {
        reply: String,
        ack: PubAck,
    },
    Api {
        reply: String,
        kind: Kind,
        body: Bytes,
    },
    Done(Box<dyn FnOnce(bool) + Send>),
}

struct Batch {
    commit: Option<Done>,
    items: Vec<Item>,
    /// Source positions to journal once this batch is durable.
    positions: Option<BTreeMap<String, u64>>,
}

struct PushTarget {
    consumer: String,
    subject: String,
    group: String,
    active: bool,
}

pub(super) struct Actor {
    js: Arc<JetStream>,
    handle: Arc<StreamHandle>,
    stream: Stream,
    journals: BTreeMap<String, ConsumerJournal>,
    dirs: StreamDirs,
    publisher: InternalPublisher,
    inflight: VecDeque<Batch>,
    items: Vec<Item>,
    handles: Vec<SyncHandle>,
    /// Writes waiting for the next interval sync (`sync_interval`).
    deferred: Vec<SyncHandle>,
    next_interval_sync: Option<Instant>,
    poison: Arc<AtomicBool>,
    /// A write failed in this batch (with this error): it cannot be
    /// committed.
    failed: Option<String>,
    clock: i64,
    push: Vec<PushTarget>,
    /// Wakes the actor when a subscription on a push target's deliver
    /// subject comes or goes.
    interest: Watcher,
    last_bytes: u64,
    sources: Sources,
    /// The current batch stored sourced messages.
    sourced: bool,
    /// Commands applied in the current batch.
    applied: usize,
}

async fn front(q: &mut VecDeque<Batch>) -> std::io::Result<()> {
    match q.front_mut().and_then(|b| b.commit.as_mut()) {
        Some(rx) => rx
            .await
            .unwrap_or_else(|_| Err(std::io::Error::other("commit thread stopped"))),
        None => Ok(()),
    }
}

pub(super) async fn run(
    js: Arc<JetStream>,
    handle: Arc<StreamHandle>,
    loaded: Loaded,
    mut rx: mpsc::UnboundedReceiver<Cmd>,
) {
    let last_bytes = loaded.stream.store().state().bytes;
    let interest = js.server.interest.watcher();
    let mut a = Actor {
        publisher: InternalPublisher::new(js.server.clone()),
        js,
        handle,
        stream: loaded.stream,
        journals: loaded.journals,
        dirs: loaded.dirs,
        inflight: VecDeque::new(),
        items: Vec::new(),
        handles: Vec::new(),
        deferred: Vec::new(),
        next_interval_sync: None,
        poison: Arc::new(AtomicBool::new(false)),
        failed: None,
        clock: 0,
        push: Vec::new(),
        interest,
        last_bytes,
        sources: Sources::new(loaded.sources),
        sourced: false,
        applied: 0,
    };
    a.refresh_push();
    a.sources.refresh(&a.js, a.stream.source_specs());
    // Restored consumers may have work at once.
    a.on_timer();
    a.finish();
    let interest_changed = a.interest.notify();
    loop {
        let wake = a.next_wake();
        tokio::select! {
            biased;
            r = front(&mut a.inflight), if !a.inflight.is_empty() => {
                a.release(r).await;
            }
            cmd = rx.recv(), if a.inflight.len() < MAX_INFLIGHT => {
                let Some(cmd) = cmd else { break };
                let mut next = Some(cmd);
                let mut n = 0;
                while let Some(cmd) = next.take() {
                    a.handle.received();
                    if let Cmd::Delete { done } = cmd {
                        a.finish();
                        a.drain().await;
                        let result = a.delete();
                        let _ = done.send(result);
                        return;
                    }
                    a.apply(cmd);
                    n += 1;
                    if n < MAX_BATCH {
                        next = rx.try_recv().ok();
                    }
                }
                a.finish();
            }
            _ = interest_changed.notified() => {
                // `finish` delivers what the interest let through.
                a.poll_interest();
                a.finish();
            }
            _ = tokio::time::sleep_until(wake.unwrap_or_else(far_future)), if wake.is_some() => {
                a.on_timer();
                a.finish();
            }
        }
    }
    a.finish();
    a.drain().await;
}

fn far_future() -> Instant {
    Instant::now() + Duration::from_secs(86_400)
}

impl Actor {
    /// Wall-clock nanoseconds, never going backwards for this stream.
    fn now(&mut self) -> i64 {
        self.clock = self.clock.max(wall_clock());
        self.clock
    }

    fn next_wake(&mut self) -> Option<Instant> {
        let mut wake: Option<Instant> = None;
        let mut at = |t: Instant| wake = Some(wake.map_or(t, |w| w.min(t)));
        if let Some(d) = self.stream.next_deadline() {
            let now = self.now();
            // At least a millisecond apart, so a deadline in the past
            // cannot spin.
            let wait = Duration::from_nanos((d - now).max(1_000_000) as u64);
            at(Instant::now() + wait);
        }
        if let Some(s) = self.next_interval_sync {
            at(s);
        }
        if let Some(s) = self.sources.next_wake() {
            at(s);
        }
        wake
    }

    fn apply(&mut self, cmd: Cmd) {
        self.applied += 1;
        let now = self.now();
        match cmd {
            Cmd::Publish(m) => self.publish(m, now),
            Cmd::Ack { consumer, msg } => {
                // nats-server subscribes to a consumer's ack subjects only
                // while it exists and takes acks: otherwise nobody answers.
                let listens = self
                    .stream
                    .consumer(&consumer)
                    .is_some_and(|c| c.takes_acks());
                if !listens {
                    if let Some(reply) = msg.reply.filter(|r| !r.is_empty()) {
                        self.items.push(Item::Out(status_msg(&reply, 503, "")));
                    }
                    return;
                }
                match self.stream.ack(
                    &consumer,
                    &msg.subject,
                    &msg.payload,
                    msg.reply.as_deref(),
                    now,
                ) {
                    Ok(true) => {
                        if let Some(reply) = msg.reply {
                            self.items.push(Item::Out(OutMsg {
                                subject: reply,
                                route: None,
                                reply: None,
                                headers: None,
                                payload: Bytes::new(),
                            }));
                        }
                    }
                    Ok(false) => {}
                    Err(e) => warn!("Stream '{}': ack failed: {e}", self.handle.name),
                }
            }
            Cmd::FlowControl { consumer, subject } => {
                self.stream.flow_control_reply(&consumer, &subject)
            }
            Cmd::Api { op, reply } => {
                let r = stream_api::handle(&self.js, &mut self.stream, op, &reply, now, None);
                self.drain_outputs();
                match r {
                    Reply::Api { kind, body } => self.items.push(Item::Api { reply, kind, body }),
                    Reply::Msgs(msgs) => self.items.extend(msgs.into_iter().map(Item::Out)),
                    Reply::None => {}
                }
            }
            Cmd::Update { config, done } => {
                let r = self.update(*config, now);
                self.items.push(Item::Done(Box::new(move |ok| {
                    let _ = done.send(if ok {
                        r
                    } else {
                        Err(E::STREAM_UPDATE.with("err", "stream storage failed"))
                    });
                })));
            }
            Cmd::Info { consumers, done } => {
                let info = self.stream.info(now, false, "");
                let cs = if consumers {
                    self.stream
                        .consumer_names()
                        .iter()
                        .filter_map(|n| self.stream.consumer_info(n, now).ok())
                        .collect()
                } else {
                    Vec::new()
                };
                self.items.push(Item::Done(Box::new(move |_| {
                    let _ = done.send((info, cs));
                })));
            }
            Cmd::Delete { .. } => unreachable!("handled by the loop"),
            Cmd::CreateSourceConsumer { config, done } => {
                let name = config.name.clone();
                let req = CreateConsumerRequest {
                    stream_name: self.stream.config.name.clone(),
                    config: *config,
                    action: ConsumerAction::Create,
                    pedantic: false,
                };
                let r = self
                    .stream
                    .add_consumer(req, Some(&name), None, false, || name.clone(), now)
                    .map(|_| ());
                self.items.push(Item::Done(Box::new(move |ok| {
                    let _ = done.send(if ok {
                        r
                    } else {
                        Err(E::STREAM_STORE_FAILED.with("err", "storage failed"))
                    });
                })));
            }
            Cmd::DropSourceConsumer { name } => {
                let _ = self.stream.delete_consumer(&name);
            }
            Cmd::Sourced {
                key,
                generation,
                msg,
            } => {
                let (advanced, out) =
                    self.sources
                        .deliver(&self.js, &key, generation, msg, &mut self.stream, now);
                self.sourced |= advanced;
                self.note_store_failure();
                self.items.extend(out.into_iter().map(Item::Out));
            }
            Cmd::SourceAttached {
                key,
                generation,
                result,
            } => {
                self.sources.attached(&self.js, &key, generation, result);
            }
        }
        self.drain_outputs();
    }

    fn publish(&mut self, m: Inbound, now: i64) {
        let size = m.subject.len() + m.headers.as_ref().map_or(0, |h| h.len()) + m.payload.len();
        let ack = if self.js.would_exceed(self.handle.storage, size as u64) {
            PubAck::Error(E::INSUFFICIENT_RESOURCES.err())
        } else {
            self.stream.publish(
                Incoming {
                    subject: &m.subject,
                    headers: m.headers.as_deref(),
                    payload: &m.payload,
                },
                now,
            )
        };
        self.note_store_failure();
        if let Some(reply) = m.reply {
            if !self.stream.config.no_ack {
                self.items.push(Item::Ack { reply, ack });
            }
        }
    }

    fn update(&mut self, mut config: StreamConfig, now: i64) -> Result<StreamInfo, ApiError> {
        jetstream::stream::config::check_update(&self.stream.config, &mut config)?;
        let old = self.stream.config.clone();
        tokio::task::block_in_place(|| {
            persist::write_stream_meta(self.dirs.root.as_ref(), &config, self.stream.created)
        })
        .map_err(|e| E::STREAM_UPDATE.with("err", e))?;
        if let Err(e) = self.stream.update(config.clone()) {
            // Back to the old configuration, on disk as in memory.
            let _ = tokio::task::block_in_place(|| {
                persist::write_stream_meta(self.dirs.root.as_ref(), &old, self.stream.created)
            });
            self.stream.config = old;
            return Err(e);
        }
        *self.handle.config.write() = config;
        self.sources.refresh(&self.js, self.stream.source_specs());
        Ok(self.stream.info(now, false, ""))
    }

    fn on_timer(&mut self) {
        let now = self.now();
        let mono = Instant::now();
        if self.next_interval_sync.is_some_and(|t| t <= mono) {
            self.next_interval_sync = None;
            let handles = std::mem::take(&mut self.deferred);
            if !handles.is_empty() {
                // Nobody waits on it; a failure is logged by the reload.
                let rx = self.js.committer.commit(handles, self.poison.clone());
                self.inflight.push_back(Batch {
                    commit: Some(rx),
                    items: Vec::new(),
                    positions: None,
                });
            }
        }
        if !self.sources.is_empty() {
            self.sources.on_timer(&self.js, &self.handle, &self.stream);
        }
        if self.stream.next_deadline().is_some_and(|d| d <= now) {
            if let Err(e) = self.stream.tick(now) {
                warn!("Stream '{}': {e}", self.handle.name);
            }
        }
        self.drain_outputs();
    }

    fn poll_interest(&mut self) {
        let now = self.now();
        for t in &mut self.push {
            let active = self.publisher.has_interest(&t.subject, &t.group);
            if active != t.active {
                t.active = active;
                self.stream.set_push_interest(&t.consumer, active, now);
            }
        }
    }

    fn refresh_push(&mut self) {
        let old: BTreeMap<String, bool> = self
            .push
            .drain(..)
            .map(|t| (t.consumer, t.active))
            .collect();
        self.push = self
            .stream
            .push_targets()
            .into_iter()
            .map(|(consumer, subject, group)| PushTarget {
                active: old.get(&consumer).copied().unwrap_or(false),
                consumer,
                subject,
                group,
            })
            .collect();
        self.interest
            .watch(self.push.iter().map(|t| t.subject.as_str()));
        self.poll_interest();
    }

    fn note_store_failure(&mut self) {
        if self.failed.is_none() {
            self.failed = self.stream.store().failed().map(str::to_string);
        }
    }

    fn drain_outputs(&mut self) {
        for o in self.stream.take_outputs() {
            match o {
                Output::Publish(m) => self.items.push(Item::Out(m)),
                Output::ConsumerDeleted(_) => {}
            }
        }
    }

    /// Ends the current batch: consumer state and store writes go to the
    /// committer, and the batch joins the queue of releases.
    fn finish(&mut self) {
        let now = self.now();
        if let Err(e) = self.stream.pump(now) {
            warn!("Stream '{}': {e}", self.handle.name);
        }
        self.drain_outputs();
        if self.stream.take_consumers_changed() {
            self.sync_journals();
            // A new push consumer may have its subscriber already.
            self.refresh_push();
            if let Err(e) = self.stream.pump(now) {
                warn!("Stream '{}': {e}", self.handle.name);
            }
            self.drain_outputs();
            self.handle
                .consumers
                .store(self.stream.consumer_names().len() as u64, Ordering::Relaxed);
        }
        for (name, state) in self.stream.dirty_consumers() {
            let Some(j) = self.journals.get_mut(&name) else {
                continue;
            };
            let Some(c) = self.stream.consumer(&name) else {
                continue;
            };
            let config = c.config.clone();
            match tokio::task::block_in_place(|| j.record(&config, state)) {
                Ok(Some(h)) => self.handles.push(h),
                Ok(None) => {}
                Err(e) => {
                    error!(
                        "Stream '{}': consumer '{name}' state could not be written: {e}",
                        self.handle.name
                    );
                    self.failed = Some(e.to_string());
                }
            }
        }
        if let Some(h) = self.stream.store_mut().sync_handle() {
            self.handles.push(h);
        }
        self.note_store_failure();
        let st = self.stream.store().state();
        self.handle.msgs.store(st.msgs, Ordering::Relaxed);
        self.handle.bytes.store(st.bytes, Ordering::Relaxed);
        self.js.add_usage(
            self.handle.storage,
            st.bytes as i64 - self.last_bytes as i64,
        );
        self.last_bytes = st.bytes;

        let items = std::mem::take(&mut self.items);
        let handles = std::mem::take(&mut self.handles);
        let small = std::mem::take(&mut self.applied) <= SYNC_HERE_MAX;
        let positions = std::mem::take(&mut self.sourced).then(|| self.stream.source_positions());
        if items.is_empty() && handles.is_empty() && positions.is_none() && self.failed.is_none() {
            return;
        }
        let commit = if let Some(e) = &self.failed {
            self.poison.store(true, Ordering::Release);
            let (tx, rx) = oneshot::channel();
            let _ = tx.send(Err(std::io::Error::other(e.clone())));
            Some(rx)
        } else if handles.is_empty() {
            None
        } else {
            match self.js.sync {
                SyncPolicy::Always => {
                    let alone = small && self.inflight.is_empty();
                    let here = match alone {
                        true => self.js.committer.try_here(handles, &self.poison),
                        false => Err(handles),
                    };
                    Some(here.unwrap_or_else(|handles| {
                        self.js.committer.commit(handles, self.poison.clone())
                    }))
                }
                SyncPolicy::Interval(d) => {
                    self.deferred.extend(handles);
                    if self.next_interval_sync.is_none() {
                        self.next_interval_sync = Some(Instant::now() + d);
                    }
                    None
                }
            }
        };
        self.inflight.push_back(Batch {
            commit,
            items,
            positions,
        });
    }

    /// Creates journals for new persistent consumers and removes those of
    /// deleted ones.
    fn sync_journals(&mut self) {
        let Some(obs) = self.dirs.obs.clone() else {
            return;
        };
        let names = self.stream.consumer_names();
        let gone: Vec<String> = self
            .journals
            .keys()
            .filter(|n| self.stream.consumer(n).is_none())
            .cloned()
            .collect();
        for name in gone {
            if let Some(j) = self.journals.remove(&name) {
                if let Err(e) = tokio::task::block_in_place(|| j.remove(obs.as_ref())) {
                    error!(
                        "Stream '{}': consumer '{name}' journal could not be removed: {e}",
                        self.handle.name
                    );
                    self.failed = Some(e.to_string());
                }
            }
        }
        for name in names {
            if self.journals.contains_key(&name) {
                continue;
            }
            let Some(c) = self.stream.consumer(&name) else {
                continue;
            };
            if c.config.mem_storage {
                continue;
            }
            let (config, created, state) = (c.config.clone(), c.created, c.state());
            match tokio::task::block_in_place(|| {
                ConsumerJournal::create(obs.clone(), &config, created, state)
            }) {
                Ok((j, h)) => {
                    self.journals.insert(name, j);
                    self.handles.extend(h);
                }
                Err(e) => {
                    error!(
                        "Stream '{}': consumer '{name}' journal could not be created: {e}",
                        self.handle.name
                    );
                    self.failed = Some(e.to_string());
                }
            }
        }
    }

    /// The front batch's commit finished: send what it holds, or fail it
    /// and everything after it.
    async fn release(&mut self, result: std::io::Result<()>) {
        let batch = self.inflight.pop_front().expect("a batch in flight");
        let result = result.and_then(|()| match &batch.positions {
            // Journaled once the copies are durable, before any ack lets
            // an origin drop what was copied.
            Some(p) => tokio::task::block_in_place(|| self.sources.record(p))
                .map_err(std::io::Error::other),
            None => Ok(()),
        });
        match result {
            Ok(()) => {
                self.send(batch.items);
                self.publisher.flush();
                self.publisher.stall().await;
            }
            Err(e) => {
                error!(
                    "Stream '{}': storage write failed, reloading from disk: {e}",
                    self.handle.name
                );
                self.fail(batch.items, &e);
                // Later batches were built on the failed writes.
                while let Some(mut b) = self.inflight.pop_front() {
                    if let Some(rx) = b.commit.take() {
                        let _ = rx.await;
                    }
                    self.fail(b.items, &e);
                }
                let current = std::mem::take(&mut self.items);
                self.fail(current, &e);
                self.handles.clear();
                self.deferred.clear();
                self.publisher.flush();
                self.reload().await;
            }
        }
    }

    fn send(&mut self, items: Vec<Item>) {
        let name = self.handle.name.clone();
        for item in items {
            match item {
                Item::Out(m) => {
                    self.publisher.publish_out(&m);
                }
                Item::Ack { reply, ack } => {
                    self.publisher
                        .publish(&reply, &reply, None, None, &ack.encode(&name));
                }
                Item::Api { reply, body, .. } => {
                    self.publisher.publish(&reply, &reply, None, None, &body);
                }
                Item::Done(f) => f(true),
            }
        }
    }

    fn fail(&mut self, items: Vec<Item>, e: &std::io::Error) {
        let name = self.handle.name.clone();
        let err = E::STREAM_STORE_FAILED.with("err", format!("storage write failed: {e}"));
        for item in items {
            match item {
                // Deliveries of state that is being rolled back.
                Item::Out(_) => {}
                Item::Ack { reply, ack } => {
                    let ack = match ack {
                        PubAck::Error(e) => PubAck::Error(e),
                        _ => PubAck::Error(err.clone()),
                    };
                    self.publisher
                        .publish(&reply, &reply, None, None, &ack.encode(&name));
                }
                Item::Api { reply, kind, .. } => {
                    self.js.api_errors.fetch_add(1, Ordering::Relaxed);
                    self.publisher.publish(
                        &reply,
                        &reply,
                        None,
                        None,
                        &response::error(kind, &err),
                    );
                }
                Item::Done(f) => f(false),
            }
        }
    }

    /// Waits out every batch in flight.
    async fn drain(&mut self) {
        if !self.deferred.is_empty() {
            let handles = std::mem::take(&mut self.deferred);
            let rx = self.js.committer.commit(handles, self.poison.clone());
            self.inflight.push_back(Batch {
                commit: Some(rx),
                items: Vec::new(),
                positions: None,
            });
        }
        while !self.inflight.is_empty() {
            let r = front(&mut self.inflight).await;
            self.release(r).await;
        }
    }

    /// Rebuilds the stream from what is on disk.
    async fn reload(&mut self) {
        let mut delay = Duration::from_millis(50);
        loop {
            let now = self.now();
            let path = self.dirs.path.clone();
            let r = tokio::task::block_in_place(|| persist::open_stream(&path, now));
            match r {
                Ok(Some(loaded)) => {
                    self.sources.detach_all(&self.js);
                    self.sources = Sources::new(loaded.sources);
                    self.stream = loaded.stream;
                    self.journals = loaded.journals;
                    self.dirs = loaded.dirs;
                    self.failed = None;
                    self.poison.store(false, Ordering::Release);
                    self.refresh_push();
                    self.sources.refresh(&self.js, self.stream.source_specs());
                    return;
                }
                Ok(None) => {
                    error!(
                        "Stream '{}': its metadata is gone from disk",
                        self.handle.name
                    );
                }
                Err(e) => error!("Stream '{}': reload failed: {e}", self.handle.name),
            }
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_secs(5));
        }
    }

    fn delete(&mut self) -> Result<(), ApiError> {
        self.sources.detach_all(&self.js);
        let _ = self.stream.delete();
        self.drain_outputs();
        let items = std::mem::take(&mut self.items);
        self.send(items);
        self.publisher.flush();
        tokio::task::block_in_place(|| persist::remove_stream(&self.dirs))
            .map_err(|e| E::STREAM_DELETE.with("err", e))
    }
}
