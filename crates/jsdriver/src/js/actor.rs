//! One task per stream on one server. It owns the stream's state machine
//! (`jsservice::stream_sm::StreamMachine`) and its storage, takes commands
//! in batches, and for each batch:
//!
//! 1. turns every command into inputs and applies them in order
//!    (`StreamMachine::apply_input`), collecting what each answers
//!    (`jsservice::reply::answers`);
//! 2. persists what consumers changed and collects the store's writes;
//! 3. hands the sync handles to the group committer, without waiting;
//! 4. releases the batch's answers and deliveries once its commit (and
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
use jetstream::api::{ApiError, StreamConfig, E};
use jetstream::stream::config::ASYNC_PERSIST;
use jetstream::stream::PubAck;
use jsservice::reply::{self, Answer, Kind};
use jsservice::request::{Inbound, StreamRequest};
use jsservice::sourcing::Inboxed;
use jsservice::stream_api::{self, Admitted};
use jsservice::stream_sm::{Applied, Entry, Op, Outcome, StreamMachine};
use store::SyncHandle;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tracing::{error, warn};

use super::commit::Done;
use super::persist::{self, ConsumerJournal, Loaded, StreamDirs};
use super::stream::{self, Cmd, PushWatch, SourceLinks, StreamHandle};
use super::{mono_ms, sinks, wall_clock, JetStream, SyncPolicy};
use crate::js::stream::PublishOut;
use flotilla_core::bus::Publisher as InternalPublisher;

/// Commands taken into one batch at most.
const MAX_BATCH: usize = 4096;
/// How often waiting pull requests are checked for a requester that
/// stopped listening.
const PULL_INTEREST_EVERY: Duration = Duration::from_secs(1);
/// How often a `persist_mode: async` stream syncs on a server that
/// otherwise syncs always: nats-server's default `sync_interval`.
const ASYNC_PERSIST_INTERVAL: Duration = Duration::from_secs(120);
/// Batches being synced at once, at most.
const MAX_INFLIGHT: usize = 8;
/// A batch of at most this many commands, with nothing else in flight,
/// may be synced without the commit thread (see `Committer::try_here`).
/// Under load batches grow past it and keep their pipelining.
const SYNC_HERE_MAX: usize = 4;
/// Past this size the positions journal is rewritten as one entry.
const POSITIONS_COMPACT_AT: u64 = 256 * 1024;

/// Something a batch releases once durable.
enum Item {
    Answer(Answer),
    Done(Box<dyn FnOnce(bool) + Send>),
}

struct Batch {
    commit: Option<Done>,
    items: Vec<Item>,
    /// Source positions to journal once this batch is durable.
    positions: Option<BTreeMap<String, u64>>,
    /// The positions journaled, which ack the copies once synced.
    journaled: Option<BTreeMap<String, u64>>,
}

pub(super) struct Actor {
    js: Arc<JetStream>,
    handle: Arc<StreamHandle>,
    machine: StreamMachine,
    journals: BTreeMap<String, ConsumerJournal>,
    dirs: StreamDirs,
    publisher: InternalPublisher,
    inflight: VecDeque<Batch>,
    items: Vec<Item>,
    handles: Vec<SyncHandle>,
    /// Writes waiting for the next interval sync (`sync_interval`).
    deferred: Vec<SyncHandle>,
    next_interval_sync: Option<Instant>,
    /// When waiting pull requests were last checked for interest.
    pulls_checked: Instant,
    poison: Arc<AtomicBool>,
    /// A write failed in this batch (with this error): it cannot be
    /// committed.
    failed: Option<String>,
    clock: i64,
    push: PushWatch,
    sources: SourceLinks,
    /// Where source positions are journaled (file streams).
    positions: Option<store::Journal>,
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
    let mut a = Actor::new(js, handle, loaded);
    // What was read from disk is durable (no link yet: nothing to ack).
    let on_disk = a.machine.stream().source_positions();
    a.ack_copies(&on_disk);
    a.refresh_push();
    // Restored consumers may have work at once.
    a.on_timer();
    a.finish();
    let interest_changed = a.push.watcher.notify();
    loop {
        a.reload_if_damaged().await;
        let wake = a.next_wake();
        tokio::select! {
            biased;
            r = front(&mut a.inflight), if !a.inflight.is_empty() => {
                a.release(r).await;
            }
            cmd = rx.recv(), if a.inflight.len() < MAX_INFLIGHT => {
                let Some(cmd) = cmd else { break };
                if let Some(done) = a.take_batch(cmd, &mut rx) {
                    a.finish();
                    a.drain().await;
                    let result = a.delete();
                    let _ = done.send(result);
                    return;
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
    fn new(js: Arc<JetStream>, handle: Arc<StreamHandle>, loaded: Loaded) -> Actor {
        let name = loaded.stream.config.name.clone();
        Actor {
            push: PushWatch::new(&js),
            publisher: js.bus.publisher(),
            sources: SourceLinks::new(&js.account, &name, false),
            js,
            handle,
            machine: StreamMachine::over(loaded.stream),
            journals: loaded.journals,
            dirs: loaded.dirs,
            inflight: VecDeque::new(),
            items: Vec::new(),
            handles: Vec::new(),
            deferred: Vec::new(),
            next_interval_sync: None,
            pulls_checked: Instant::now(),
            poison: Arc::new(AtomicBool::new(false)),
            failed: None,
            clock: 0,
            positions: loaded.sources,
            sourced: false,
            applied: 0,
        }
    }

    /// Applies `first` and whatever else is queued, up to a batch. Returns
    /// the delete's sender if a delete came: the batch ends there.
    fn take_batch(
        &mut self,
        first: Cmd,
        rx: &mut mpsc::UnboundedReceiver<Cmd>,
    ) -> Option<oneshot::Sender<Result<(), ApiError>>> {
        let mut next = Some(first);
        let mut n = 0;
        while let Some(cmd) = next.take() {
            self.handle.received();
            if let Cmd::Delete { done } = cmd {
                return Some(done);
            }
            self.apply(cmd);
            n += 1;
            if n < MAX_BATCH {
                next = rx.try_recv().ok();
            }
        }
        for run in self.sources.take_runs() {
            self.input(run);
        }
        if self.sources.take_delivered() {
            self.follow_sources();
        }
        None
    }

    /// Wall-clock nanoseconds, never going backwards for this stream.
    fn now(&mut self) -> i64 {
        self.clock = self.clock.max(wall_clock());
        self.clock
    }

    fn next_wake(&mut self) -> Option<Instant> {
        let mut wake: Option<Instant> = None;
        let mut at = |t: Instant| wake = Some(wake.map_or(t, |w| w.min(t)));
        if let Some(d) = self.machine.stream().next_deadline() {
            let now = self.now();
            // At least a millisecond apart, so a deadline in the past
            // cannot spin.
            let wait = Duration::from_nanos((d - now).max(1_000_000) as u64);
            at(Instant::now() + wait);
        }
        if let Some(s) = self.next_interval_sync {
            at(s);
        }
        if self.machine.stream().has_waiting_pulls() {
            at(self.pulls_checked + PULL_INTEREST_EVERY);
        }
        if let Some(due) = self.sources.next_wake() {
            let wait = due.saturating_sub(mono_ms()).max(1);
            at(Instant::now() + Duration::from_millis(wait));
        }
        wake
    }

    fn apply(&mut self, cmd: Cmd) {
        self.applied += 1;
        match cmd {
            Cmd::Publish(m) => self.publish(m),
            Cmd::Request { reply, request } => self.request(reply, request),
            Cmd::Update {
                config,
                reply,
                done,
            } => {
                self.update(*config, &reply);
                let _ = done.send(());
            }
            Cmd::Info { consumers, done } => {
                let info = self.info(consumers);
                self.items.push(Item::Done(Box::new(move |_| {
                    let _ = done.send(info);
                })));
            }
            Cmd::Delete { .. } => unreachable!("handled by the loop"),
            Cmd::Answer(a) => self.items.push(Item::Answer(a)),
            // A cluster's alone.
            Cmd::Api(_) | Cmd::Raft(_) | Cmd::Catchup(_) => {}
            Cmd::Inbox { routed, msg } => match self.sources.inbox(&routed, msg) {
                Inboxed::Nothing => {}
                Inboxed::Send(m) => self.items.push(Item::Answer(Answer::out(m))),
                Inboxed::Copy(op, ack) => self.input(op.replied(Some(&ack))),
                Inboxed::Input(op) => self.input(op),
            },
        }
    }

    fn info(
        &mut self,
        consumers: bool,
    ) -> (
        jetstream::api::StreamInfo,
        Vec<jetstream::api::ConsumerInfo>,
    ) {
        let now = self.now();
        stream::info(self.machine.stream(), consumers, now)
    }

    /// Applies one input, collecting what it answers.
    fn input(&mut self, op: Op) {
        let now = self.now();
        let applied = self.machine.apply_input(Entry { ts: now, op });
        self.take_answers(applied);
    }

    fn take_answers(&mut self, applied: Applied) {
        if matches!(applied.outcome, Outcome::Sourced(Ok(true))) {
            self.sourced = true;
        }
        self.note_store_failure();
        let answers = reply::answers(self.machine.stream(), applied, || None);
        self.items.extend(answers.into_iter().map(Item::Answer));
    }

    fn publish(&mut self, m: Inbound) {
        let size = m.subject.len() + m.headers.as_ref().map_or(0, |h| h.len()) + m.payload.len();
        if let Some(e) = self.js.would_exceed(&self.handle, size as u64) {
            if let Some(reply) = m.reply {
                let ack = PubAck::Error(e);
                let answer = Answer::puback(&reply, &self.handle.name, &ack);
                self.items.push(Item::Answer(answer));
            }
            return;
        }
        let op = Op::Publish {
            subject: m.subject,
            headers: m.headers,
            payload: m.payload,
        };
        self.input(op.replied(m.reply.as_deref()));
    }

    fn request(&mut self, reply: Option<String>, request: StreamRequest) {
        let now = self.now();
        match request {
            StreamRequest::Read(read) => {
                let Some(to) = reply else { return };
                let server = self.js.bus.server_name().to_string();
                let answers = stream::read(self.machine.stream(), read, &to, now, None, &server);
                self.items.extend(answers.into_iter().map(Item::Answer));
            }
            StreamRequest::Change(op) => {
                match stream_api::admit(
                    self.machine.stream(),
                    &self.js.account_limits,
                    reply.as_deref(),
                    op,
                ) {
                    Admitted::Answer(a) => self.items.push(Item::Answer(a)),
                    Admitted::Input(op) => self.input(op),
                    Admitted::Nothing => {}
                }
            }
            // Refused by the classifier on one server.
            StreamRequest::StepDown { .. } => {}
        }
    }

    /// A new config (checked by the account against the one in force),
    /// on disk before it applies; answered at `reply` once durable.
    fn update(&mut self, config: StreamConfig, reply: &str) {
        let created = self.machine.stream().created;
        let old = self.machine.stream().config.clone();
        // On disk first: a crash after the change must not lose it.
        let written = tokio::task::block_in_place(|| {
            persist::write_stream_meta(self.dirs.root.as_ref(), &config, created)
        });
        if let Err(e) = written {
            let refused =
                Answer::refused(reply, Kind::StreamUpdate, &E::STREAM_UPDATE.with("err", e));
            self.items.push(Item::Answer(refused));
            return;
        }
        let json = serde_json::to_vec(&config).expect("config serializes");
        let now = self.now();
        let applied = self.machine.apply_input(Entry {
            ts: now,
            op: Op::UpdateConfig {
                config: Bytes::from(json),
            }
            .replied(Some(reply)),
        });
        match &applied.outcome {
            Outcome::Configured(Err(_)) => {
                // Back to the old configuration on disk; memory never
                // changed.
                let _ = tokio::task::block_in_place(|| {
                    persist::write_stream_meta(self.dirs.root.as_ref(), &old, created)
                });
            }
            _ => {
                *self.handle.config.write() = config.clone();
                if old.subjects != config.subjects {
                    if let Err(e) =
                        sinks::subscribe_stream(&self.js, &self.handle, &config.subjects)
                    {
                        error!(
                            "Stream '{}': subjects could not be subscribed: {e}",
                            self.handle.name
                        );
                    }
                }
                self.follow_sources();
            }
        }
        self.take_answers(applied);
    }

    fn on_timer(&mut self) {
        let now = self.now();
        let mono = Instant::now();
        if self.next_interval_sync.is_some_and(|t| t <= mono) {
            self.next_interval_sync = None;
            let handles = std::mem::take(&mut self.deferred);
            if !handles.is_empty() {
                // Nobody waits on it; a failure is logged by the reload.
                let rx = self.js.committer().commit(handles, self.poison.clone());
                self.inflight.push_back(Batch {
                    commit: Some(rx),
                    items: Vec::new(),
                    positions: None,
                    journaled: None,
                });
            }
        }
        self.follow_sources();
        if self
            .machine
            .stream()
            .next_deadline()
            .is_some_and(|d| d <= now)
        {
            self.input(Op::Tick);
        }
        if self.pulls_checked.elapsed() >= PULL_INTEREST_EVERY {
            self.pulls_checked = mono;
            for op in super::stream::deaf_pulls(&self.js.bus, self.machine.stream()) {
                self.input(op);
            }
        }
    }

    /// The links' requests (lookups, creates, resets, pulls) leave at
    /// once, as a replica sends them: none answers anything, so none waits
    /// behind the batches still being made durable. A pull held there kept
    /// the origin idle for a commit or more each time.
    fn follow_sources(&mut self) {
        let requests = self
            .sources
            .follow(&self.js, &self.handle, self.machine.stream());
        if requests.is_empty() {
            return;
        }
        for m in requests {
            self.publisher.publish_out(&m);
        }
        self.publisher.flush();
    }

    fn poll_interest(&mut self) {
        let changed = self.push.poll(&mut self.publisher);
        self.push_interest(changed);
    }

    fn refresh_push(&mut self) {
        let changed = self
            .push
            .refresh(self.machine.stream(), &mut self.publisher);
        self.push_interest(changed);
    }

    fn push_interest(&mut self, changed: Vec<(String, bool)>) {
        for (consumer, active) in changed {
            self.input(Op::PushInterest { consumer, active });
        }
    }

    fn note_store_failure(&mut self) {
        if self.failed.is_none() {
            self.failed = self.machine.stream().store().failed().map(str::to_string);
            if let Some(e) = &self.failed {
                self.js.note_write_error(&self.handle.name, e);
            }
        }
    }

    /// Lets consumers deliver what the batch brought.
    fn pump(&mut self) {
        let now = self.now();
        match self.machine.pump(now) {
            Ok(outputs) => {
                let applied = Applied {
                    outputs,
                    ..Default::default()
                };
                self.take_answers(applied);
            }
            Err(e) => warn!("Stream '{}': {e}", self.handle.name),
        }
    }

    /// Ends the current batch: consumer state and store writes go to the
    /// committer, and the batch joins the queue of releases.
    fn finish(&mut self) {
        self.pump();
        if self.machine.stream_mut().take_consumers_changed() {
            self.sync_journals();
            // A new push consumer may have its subscriber already.
            self.refresh_push();
            self.pump();
        }
        self.record_consumers();
        if let Some(h) = self.machine.stream_mut().store_mut().sync_handle() {
            self.handles.push(h);
        }
        self.note_store_failure();
        let grew = self.handle.record(self.machine.stream_mut());
        self.js.add_usage(self.handle.storage, grew);
        let items = std::mem::take(&mut self.items);
        let handles = std::mem::take(&mut self.handles);
        let small = std::mem::take(&mut self.applied) <= SYNC_HERE_MAX;
        let positions =
            std::mem::take(&mut self.sourced).then(|| self.machine.stream().source_positions());
        if items.is_empty() && handles.is_empty() && positions.is_none() && self.failed.is_none() {
            return;
        }
        let commit = self.commit(handles, small);
        self.inflight.push_back(Batch {
            commit,
            items,
            positions,
            journaled: None,
        });
    }

    /// Journals the consumers whose state the batch changed.
    fn record_consumers(&mut self) {
        for (name, state) in self.machine.stream_mut().dirty_consumers() {
            let Some(j) = self.journals.get_mut(&name) else {
                continue;
            };
            let Some(c) = self.machine.stream().consumer(&name) else {
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
    }

    /// Starts the batch's commit: at once on this task when it is small
    /// and alone, otherwise on the commit thread; nothing for an interval
    /// sync until the interval ends. A batch whose writes failed has a
    /// failed commit.
    fn commit(&mut self, handles: Vec<SyncHandle>, small: bool) -> Option<Done> {
        if let Some(e) = &self.failed {
            self.poison.store(true, Ordering::Release);
            let (tx, rx) = oneshot::channel();
            let _ = tx.send(Err(std::io::Error::other(e.clone())));
            return Some(rx);
        }
        if handles.is_empty() {
            return None;
        }
        match self.sync_policy() {
            SyncPolicy::Always => {
                let alone = small && self.inflight.is_empty();
                let here = match alone {
                    true => self.js.committer().try_here(handles, &self.poison),
                    false => Err(handles),
                };
                Some(here.unwrap_or_else(|handles| {
                    self.js.committer().commit(handles, self.poison.clone())
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
    }

    /// The server's sync policy, unless the stream chose `persist_mode:
    /// async`: then syncs every `sync_interval`, or every two minutes
    /// (nats-server's default) where the server syncs always.
    fn sync_policy(&self) -> SyncPolicy {
        if self.machine.stream().config.persist_mode != ASYNC_PERSIST {
            return self.js.sync;
        }
        match self.js.sync {
            SyncPolicy::Always => SyncPolicy::Interval(ASYNC_PERSIST_INTERVAL),
            interval => interval,
        }
    }

    /// Creates journals for new persistent consumers and removes those of
    /// deleted ones.
    fn sync_journals(&mut self) {
        let Some(obs) = self.dirs.obs.clone() else {
            return;
        };
        let stream = self.machine.stream();
        let names = stream.all_consumer_names();
        let gone: Vec<String> = self
            .journals
            .keys()
            .filter(|n| stream.consumer(n).is_none())
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
            let Some(c) = self.machine.stream().consumer(&name) else {
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
        let mut batch = self.inflight.pop_front().expect("a batch in flight");
        // Source positions are journaled once the copies are durable,
        // before any ack lets an origin drop what was copied: their sync is
        // the batch's second commit, on the commit thread, and the batch
        // stays in front until it ends.
        let result = match (result, batch.positions.take()) {
            (Ok(()), Some(p)) => {
                let journaled = self.journal_positions(&p);
                batch.journaled = Some(p);
                match journaled {
                    Ok(Some(second)) => {
                        batch.commit = Some(second);
                        self.inflight.push_front(batch);
                        return;
                    }
                    Ok(None) => Ok(()),
                    Err(e) => Err(std::io::Error::other(e)),
                }
            }
            (result, _) => result,
        };
        match result {
            Ok(()) => {
                self.send(batch.items);
                if let Some(p) = batch.journaled.take() {
                    self.ack_copies(&p);
                }
                self.publisher.flush();
                self.publisher.stall().await;
            }
            Err(e) => {
                error!(
                    "Stream '{}': storage write failed, reloading from disk: {e}",
                    self.handle.name
                );
                self.js.note_write_error(&self.handle.name, &e.to_string());
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

    /// Acks what the durable source positions `p` cover (the positions
    /// read from disk, or journaled and synced).
    fn ack_copies(&mut self, p: &BTreeMap<String, u64>) {
        for ack in self.sources.durable(p) {
            self.publisher.publish_out(&ack);
        }
    }

    /// Writes the source positions to their journal and starts their
    /// sync; `None` when there is nothing to wait for (no journal, or a
    /// compaction, which is durable when it returns).
    fn journal_positions(&mut self, p: &BTreeMap<String, u64>) -> store::Result<Option<Done>> {
        let Some(j) = self.positions.as_mut() else {
            return Ok(None);
        };
        let entry = serde_json::to_vec(p).expect("positions serialize");
        if j.len() > POSITIONS_COMPACT_AT {
            tokio::task::block_in_place(|| j.rewrite(&[&entry]))?;
            return Ok(None);
        }
        j.append(&entry);
        let handle = tokio::task::block_in_place(|| j.sync_handle())?;
        Ok(handle.map(|h| self.js.committer().commit(vec![h], self.poison.clone())))
    }

    fn send(&mut self, items: Vec<Item>) {
        for item in items {
            match item {
                Item::Answer(a) => self.js.answer(&mut self.publisher, &a),
                Item::Done(f) => f(true),
            }
        }
    }

    fn fail(&mut self, items: Vec<Item>, e: &std::io::Error) {
        let err = E::STREAM_STORE_FAILED.with("err", format!("storage write failed: {e}"));
        for item in items {
            match item {
                Item::Answer(a) => {
                    if let Some(a) = a.write_failed(&self.handle.name, &err) {
                        self.js.answer(&mut self.publisher, &a);
                    }
                }
                Item::Done(f) => f(false),
            }
        }
    }

    /// Waits out every batch in flight.
    async fn drain(&mut self) {
        if !self.deferred.is_empty() {
            let handles = std::mem::take(&mut self.deferred);
            let rx = self.js.committer().commit(handles, self.poison.clone());
            self.inflight.push_back(Batch {
                commit: Some(rx),
                items: Vec::new(),
                positions: None,
                journaled: None,
            });
        }
        while !self.inflight.is_empty() {
            let r = front(&mut self.inflight).await;
            self.release(r).await;
        }
    }

    /// A read found a damaged record: what is in flight completes, and
    /// the stream is rebuilt from disk, where recovery counts the damaged
    /// record as lost (`StoreState::lost`) rather than letting consumers
    /// wait on it. One server has no peer to fetch it from again.
    async fn reload_if_damaged(&mut self) {
        let Some(why) = self.machine.stream().store().damage() else {
            return;
        };
        error!(
            "Stream '{}': a read found damage ({why}); reloading it from disk",
            self.handle.name
        );
        self.js.damage_found.fetch_add(1, Ordering::Relaxed);
        self.drain().await;
        self.reload().await;
        self.js.damage_repaired.fetch_add(1, Ordering::Relaxed);
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
                    self.positions = loaded.sources;
                    self.machine = StreamMachine::over(loaded.stream);
                    let on_disk = self.machine.stream().source_positions();
                    self.ack_copies(&on_disk);
                    self.journals = loaded.journals;
                    self.dirs = loaded.dirs;
                    self.failed = None;
                    self.poison.store(false, Ordering::Release);
                    self.refresh_push();
                    self.follow_sources();
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
        self.sources.close(&self.js);
        let _ = self.machine.stream_mut().delete();
        let outputs = self.machine.stream_mut().take_outputs();
        self.take_answers(Applied {
            outputs,
            ..Default::default()
        });
        let items = std::mem::take(&mut self.items);
        self.send(items);
        self.publisher.flush();
        tokio::task::block_in_place(|| persist::remove_stream(&self.dirs))
            .map_err(|e| E::STREAM_DELETE.with("err", e))
    }
}
