//! The driver of one server's multi-raft engine: a thread that owns the
//! `replication::engine::Engine` (every group of this server) and runs
//! its cycle — inputs (ticks, peer frames, commands, finished syncs),
//! `poll` — handing frames to the [`Transport`], committed entries to the
//! application, and sync handles to the node's sync thread.
//!
//! The sync thread runs every handle queued while it was busy as one
//! group commit (one fsync per log file), then reports the last epoch it
//! covered; the engine's `synced` then releases what waited for it (votes,
//! append acknowledgements). The engine's thread never waits on the disk:
//! a leader proposes, sends appends and commits on its followers'
//! acknowledgements while its own flush runs, so the next flush carries
//! everything that came meanwhile.
//!
//! Compacting a group's log can rewrite its file, whose bulk is the
//! group's snapshot (a whole stream). The node's rewrite thread writes and
//! syncs that, and frees the replaced file's blocks, so every group on the
//! server goes on meanwhile (heartbeats included); the engine's thread
//! only swaps the finished file in.
//!
//! The engine is built on the thread and never leaves it; everything else
//! talks to it through messages. A failed sync stops the node: nothing
//! that depended on the write (votes, append acknowledgements) may leave,
//! and the log's state after a failed fsync cannot be trusted.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use replication::engine::{Committed, Engine, EngineError, Output};
use serde::Serialize;
use store::{Dir, Replaced, RewriteJob, Rewritten, Swap, SyncHandle, SyncRound};
use tracing::{error, info};

use crate::transport::Transport;

/// What the application hears from the node, in order per group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// An entry to apply.
    Committed(Committed),
    /// A leader's snapshot replaced this replica's log: the state machine
    /// is replaced by this data, as of this index, before later entries.
    Snapshot(Committed),
}

/// A state machine's snapshot, as the [`Snapshotter`] answers for it.
pub enum Snapshot {
    /// Its bytes, as of the group's applied index: the state machine is
    /// applied on the engine's thread (the `apply` hook).
    Now(Vec<u8>),
    /// Asked for: the state machine is applied elsewhere, and its owner
    /// hands the bytes over with [`Node::snapshot_taken`], as of the index
    /// asked for (or a later one already handed out, if it could not take
    /// one then). Not asked again for the group until then.
    Asked,
    /// None to be had.
    None,
}

/// Answers the need for a snapshot of a group's state machine as of its
/// applied index (to compact its log, or to catch a follower up): called
/// with the group, that index, and the index of the snapshot the log holds
/// now (what a restart would start from). It runs on the engine's thread, after
/// every entry up to the index went through the `apply` hook (and was
/// handed on from there, for a state machine applied elsewhere).
pub type Snapshotter = Box<dyn FnMut(u64, u64, u64) -> Snapshot + Send>;

/// Applies an event on the engine's thread, before it is also sent to the
/// receiver. A state machine that must be snapshotted lives here. It gets
/// the engine too: applying one group's entry may start or end another
/// group (the meta group assigns streams), and the engine tells whether
/// this server leads the group, so only a leader sends a state machine's
/// outputs.
pub type Apply = Box<dyn FnMut(&Event, &mut Engine) + Send>;

/// Whether to snapshot a group and compact its log, given the entries
/// applied since its last snapshot.
pub type CompactPolicy = Box<dyn Fn(u64, u64) -> bool + Send>;

pub struct Config {
    /// This server's peer id (`replication::identity`).
    pub id: u64,
    /// Where the Raft logs live.
    pub dir: Arc<dyn Dir>,
    /// Raft's clock: elections take 10 to 20 ticks, heartbeats every 2.
    pub tick: Duration,
    pub seed: u64,
    pub snapshotter: Snapshotter,
    pub apply: Option<Apply>,
    /// Without one, logs are compacted only when a follower needs a
    /// snapshot.
    pub compact: Option<CompactPolicy>,
}

/// One group as monitoring shows it.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct GroupStatus {
    pub group: u64,
    pub leader: u64,
    pub term: u64,
    pub is_leader: bool,
    pub committed: u64,
    pub applied: u64,
    pub voters: Vec<u64>,
    pub damaged: bool,
    pub vote: u64,
    pub last_index: u64,
    pub last_term: u64,
    /// On the leader: (member, replicated index).
    pub progress: Vec<(u64, u64)>,
    /// On the leader: when (Unix nanoseconds) this server took the lead
    /// in the current term, as the node loop first saw it.
    pub leader_since: Option<i64>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Status {
    pub id: u64,
    /// Shared: copying a status to look at it copies no group.
    #[serde(serialize_with = "serialize_shared")]
    pub groups: Arc<Vec<GroupStatus>>,
    /// Grows with every change published: a reader that saw this version
    /// has seen this status.
    pub version: u64,
    /// Frames the engine refused after the transport's checks: sender not
    /// a member, unknown group, undecodable.
    pub refused_foreign: u64,
    pub refused_unknown_group: u64,
    pub refused_undecodable: u64,
    pub votes_withheld: u64,
    pub running: bool,
}

impl Status {
    /// A group's status (the groups are in id order).
    pub fn group(&self, group: u64) -> Option<&GroupStatus> {
        let at = self.groups.binary_search_by_key(&group, |g| g.group).ok()?;
        Some(&self.groups[at])
    }
}

fn serialize_shared<S: serde::Serializer>(
    groups: &Arc<Vec<GroupStatus>>,
    out: S,
) -> Result<S::Ok, S::Error> {
    serde::Serialize::serialize(groups.as_slice(), out)
}

/// Work run on the engine's thread.
type Call = Box<dyn FnOnce(&mut Engine) + Send>;

enum Input {
    Frame(u64, replication::frame::Frame),
    Call(Call),
    Create {
        group: u64,
        voters: Vec<u64>,
        reply: std::sync::mpsc::Sender<Result<(), EngineError>>,
    },
    Propose {
        group: u64,
        data: Vec<u8>,
        reply: std::sync::mpsc::Sender<Result<(), EngineError>>,
    },
    Submit {
        group: u64,
        data: Vec<u8>,
    },
    Restart {
        group: u64,
        reply: std::sync::mpsc::Sender<Result<Vec<u64>, EngineError>>,
    },
    /// The sync thread ran every handle up to this epoch.
    Synced(u64),
    /// A sync failed (the sync thread logged why and goes on).
    SyncFailed,
    /// The rewrite thread wrote a group's new log file.
    Rewritten(u64, Rewritten),
    /// A snapshot asked for (`Snapshot::Asked`): (group, index, data).
    Snapshot(u64, u64, Vec<u8>),
    Stop,
}

/// A running node. Dropping it stops the thread.
pub struct Node {
    tx: std::sync::mpsc::Sender<Input>,
    status: Arc<Mutex<Status>>,
    thread: Option<JoinHandle<()>>,
    pub transport: Arc<Transport>,
}

impl Node {
    /// Starts the driver thread and the transport (which needs a tokio
    /// runtime). Committed entries and installed snapshots, in log order
    /// per group, arrive on the returned receiver.
    pub fn start(cfg: Config) -> (Node, std::sync::mpsc::Receiver<Event>) {
        let (tx, rx) = std::sync::mpsc::channel::<Input>();
        let (ctx, crx) = std::sync::mpsc::channel::<Event>();
        let frames = std::sync::Mutex::new(tx.clone());
        let transport = Transport::new(
            cfg.id,
            Box::new(move |peer, f| {
                frames
                    .lock()
                    .map(|t| t.send(Input::Frame(peer, f)).is_ok())
                    .unwrap_or(false)
            }),
        );
        let status = Arc::new(Mutex::new(Status {
            id: cfg.id,
            running: true,
            ..Default::default()
        }));
        let t = transport.clone();
        let st = status.clone();
        let synced = tx.clone();
        let thread = std::thread::Builder::new()
            .name(format!("raft-{}", cfg.id))
            .spawn(move || run(cfg, rx, synced, ctx, t, st))
            .expect("spawn the raft thread");
        (
            Node {
                tx,
                status,
                thread: Some(thread),
                transport,
            },
            crx,
        )
    }

    /// Starts this server's node of `group` (see `Engine::create_group`).
    pub fn create_group(&self, group: u64, voters: &[u64]) -> Result<(), EngineError> {
        let (reply, r) = std::sync::mpsc::channel();
        let _ = self.tx.send(Input::Create {
            group,
            voters: voters.to_vec(),
            reply,
        });
        r.recv().unwrap_or(Err(EngineError::NoGroup(group)))
    }

    /// Proposes an entry; `Ok` means the leader appended it, and it is
    /// acknowledged once it arrives committed.
    pub fn propose(&self, group: u64, data: Vec<u8>) -> Result<(), EngineError> {
        let (reply, r) = std::sync::mpsc::channel();
        let _ = self.tx.send(Input::Propose { group, data, reply });
        r.recv().unwrap_or(Err(EngineError::NoGroup(group)))
    }

    /// Proposes an entry without waiting to hear whether this server
    /// leads the group (for callers that must not block, such as a
    /// client's reader): if it does not, the entry is dropped, and the
    /// requester, who hears nothing, retries.
    pub fn submit(&self, group: u64, data: Vec<u8>) {
        let _ = self.tx.send(Input::Submit { group, data });
    }

    /// Restarts this server's node of a group from its log, handing the
    /// log's snapshot (if it holds state) to the apply hook first, as an
    /// `Event::Snapshot`: the state machine is rebuilt from it, then from
    /// the entries after it, which follow. Returns the group's voters.
    pub fn restart_group(&self, group: u64) -> Result<Vec<u64>, EngineError> {
        let (reply, r) = std::sync::mpsc::channel();
        let _ = self.tx.send(Input::Restart { group, reply });
        r.recv().unwrap_or(Err(EngineError::NoGroup(group)))
    }

    /// Hands over a snapshot the [`Snapshotter`] asked for: the state of
    /// `group`'s state machine as of `index`, which it has applied. The
    /// log is compacted behind it.
    pub fn snapshot_taken(&self, group: u64, index: u64, data: Vec<u8>) {
        let _ = self.tx.send(Input::Snapshot(group, index, data));
    }

    /// Runs `f` on the engine's thread and returns what it returns (None
    /// if the node has stopped).
    pub fn call<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Engine) -> R + Send + 'static,
    ) -> Option<R> {
        let (reply, r) = std::sync::mpsc::channel();
        let call: Call = Box::new(move |e| {
            let _ = reply.send(f(e));
        });
        self.tx.send(Input::Call(call)).ok()?;
        r.recv().ok()
    }

    pub fn status(&self) -> Status {
        self.status.lock().clone()
    }

    /// Stops the thread and the transport.
    pub fn stop(&mut self) {
        let _ = self.tx.send(Input::Stop);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.transport.shutdown();
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Runs sync handles queued by the engine's thread: all that are waiting
/// as one round, then reports the last epoch done, or that the round
/// failed. Ends when the engine's thread drops its sender.
fn syncer(
    id: u64,
    rx: std::sync::mpsc::Receiver<(u64, Vec<SyncHandle>)>,
    report: std::sync::mpsc::Sender<Input>,
) {
    let mut failures = 0u64;
    let mut logged: Option<Instant> = None;
    while let Ok(first) = rx.recv() {
        let mut batch = vec![first];
        while let Ok(more) = rx.try_recv() {
            batch.push(more);
        }
        let mut round = SyncRound::default();
        let mut last = 0;
        let mut failed = None;
        for (epoch, handles) in batch {
            for h in handles {
                if let Err(e) = round.sync(h) {
                    failed = Some(e);
                    break;
                }
            }
            if failed.is_some() {
                break;
            }
            last = epoch;
        }
        if let Some(e) = failed {
            // The rest of the round is not run: the engine rewrites every
            // log that waited on it (`Engine::sync_failed`). A full disk
            // fails every round: logged once every ten seconds.
            failures += 1;
            if logged.is_none_or(|at: Instant| at.elapsed() >= Duration::from_secs(10)) {
                error!(
                    "raft log sync failed on server {id} ({failures} so far): {e}; \
                     rewriting its logs until one takes"
                );
                logged = Some(Instant::now());
            }
            if report.send(Input::SyncFailed).is_err() {
                return;
            }
            continue;
        }
        if report.send(Input::Synced(last)).is_err() {
            return;
        }
    }
}

/// Work for the rewrite thread, in order.
enum Rewrite {
    /// Write a group's new log file, and report it.
    Run(u64, RewriteJob),
    /// Drop a replaced log file (its blocks are freed here).
    Free(Replaced),
}

/// Runs log rewrites, one at a time in the order asked (so a rewrite of a
/// group's log never runs beside another of the same log), until the
/// engine's thread drops its sender; once `stopping`, rewrites still
/// queued are skipped (their files are removed at the next start).
fn rewriter(
    rx: std::sync::mpsc::Receiver<Rewrite>,
    report: std::sync::mpsc::Sender<Input>,
    stopping: Arc<AtomicBool>,
) {
    while let Ok(work) = rx.recv() {
        match work {
            Rewrite::Run(..) if stopping.load(Ordering::Relaxed) => {}
            Rewrite::Run(group, job) => {
                // A send that fails: the node stopped, and the file is
                // removed when the next engine starts over this directory.
                let _ = report.send(Input::Rewritten(group, job.run()));
            }
            Rewrite::Free(old) => drop(old),
        }
    }
}

fn run(
    cfg: Config,
    rx: std::sync::mpsc::Receiver<Input>,
    synced: std::sync::mpsc::Sender<Input>,
    committed: std::sync::mpsc::Sender<Event>,
    transport: Arc<Transport>,
    status: Arc<Mutex<Status>>,
) {
    let mut engine = Engine::new(cfg.id, cfg.dir, cfg.seed);
    let mut snapshotter = cfg.snapshotter;
    // Groups whose snapshot was asked for and has not come yet.
    let mut asked: BTreeSet<u64> = BTreeSet::new();
    let mut apply = cfg.apply;
    let mut next_tick = Instant::now() + cfg.tick;
    let (to_sync, sync_rx) = std::sync::mpsc::channel();
    let id = cfg.id;
    let rewritten = synced.clone();
    let sync_thread = std::thread::Builder::new()
        .name(format!("raft-sync-{}", cfg.id))
        .spawn(move || syncer(id, sync_rx, synced))
        .expect("spawn the raft sync thread");
    let (to_rewrite, rewrite_rx) = std::sync::mpsc::channel();
    let stopping = Arc::new(AtomicBool::new(false));
    let rewriter_stopping = stopping.clone();
    let rewrite_thread = std::thread::Builder::new()
        .name(format!("raft-rewrite-{}", cfg.id))
        .spawn(move || rewriter(rewrite_rx, rewritten, rewriter_stopping))
        .expect("spawn the raft rewrite thread");
    // Replaced log files, each with the last epoch handed to the sync
    // thread when it was replaced: sync handles of those epochs may hold
    // the file, and the last holder to drop it frees its blocks, so it
    // goes to the rewrite thread only once they have run.
    let mut replaced: Vec<(u64, Replaced)> = Vec::new();
    let mut sent_epoch = 0;
    let mut published = Published::default();
    'run: loop {
        let wait = next_tick.saturating_duration_since(Instant::now());
        let first = match rx.recv_timeout(wait) {
            Ok(i) => Some(i),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => None,
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
        };
        // Everything already waiting is handled in this cycle: one sync
        // covers it all.
        let mut inputs: Vec<Input> = first.into_iter().collect();
        while inputs.len() < 4096 {
            match rx.try_recv() {
                Ok(i) => inputs.push(i),
                Err(_) => break,
            }
        }
        // Consecutive submits are proposed together, one proposal per
        // group (`Engine::propose_all`); any other input first proposes
        // what was submitted before it, so the engine sees the inputs in
        // the order they came.
        let mut submitted: BTreeMap<u64, Vec<Vec<u8>>> = BTreeMap::new();
        for i in inputs {
            if let Input::Submit { group, data } = i {
                submitted.entry(group).or_default().push(data);
                continue;
            }
            propose_submitted(&mut engine, &mut submitted);
            match i {
                Input::Frame(peer, f) => engine.receive_frame(peer, f),
                Input::Call(f) => f(&mut engine),
                Input::Create {
                    group,
                    voters,
                    reply,
                } => {
                    let _ = reply.send(engine.create_group(group, &voters).map(|_| ()));
                }
                Input::Propose { group, data, reply } => {
                    let _ = reply.send(engine.propose(group, data));
                }
                Input::Submit { .. } => unreachable!("taken above"),
                Input::Restart { group, reply } => {
                    let r = engine.create_group(group, &[]).map(|_| {
                        let stored = engine.snapshot(group).filter(|(_, d)| !d.is_empty());
                        if let (Some((index, data)), Some(f)) = (stored, apply.as_mut()) {
                            let ev = Event::Snapshot(replication::engine::Committed {
                                group,
                                index,
                                data,
                            });
                            f(&ev, &mut engine);
                        }
                        engine.voters(group).unwrap_or_default()
                    });
                    let _ = reply.send(r);
                }
                Input::Synced(epoch) => {
                    for (_, old) in replaced.extract_if(.., |(e, _)| *e <= epoch) {
                        let _ = to_rewrite.send(Rewrite::Free(old));
                    }
                    let out = engine.synced(epoch);
                    emit(&transport, &committed, &mut apply, out, &mut engine);
                }
                Input::Rewritten(group, done) => match engine.rewritten(group, done) {
                    Ok(Swap::Done(old)) => replaced.push((sent_epoch, old)),
                    Ok(Swap::More(job)) => {
                        let _ = to_rewrite.send(Rewrite::Run(group, job));
                    }
                    Ok(Swap::Dropped) => {}
                    // The log goes on in its old file.
                    Err(e) => error!("raft group {group}: could not rewrite its log: {e}"),
                },
                Input::Snapshot(group, index, data) => {
                    asked.remove(&group);
                    compact(&mut engine, &to_rewrite, group, index, data);
                }
                Input::SyncFailed => engine.sync_failed(),
                Input::Stop => break 'run,
            }
        }
        propose_submitted(&mut engine, &mut submitted);
        let now = Instant::now();
        if now >= next_tick {
            engine.tick();
            next_tick += cfg.tick;
            if next_tick < now {
                // Far behind (a stall): do not tick in a burst.
                next_tick = now + cfg.tick;
            }
        }
        let mut out = engine.poll();
        let mut wanted = std::mem::take(&mut out.snapshot_wanted);
        let sync = std::mem::take(&mut out.sync);
        if let Some(epoch) = out.epoch {
            if to_sync.send((epoch, sync)).is_err() {
                break 'run;
            }
            sent_epoch = epoch;
        }
        // Only groups that applied something can have come due for
        // compaction: with thousands of quiet groups, looking at each one
        // every cycle would cost more than the work itself.
        let active: BTreeSet<u64> = out.committed.iter().map(|c| c.group).collect();
        emit(&transport, &committed, &mut apply, out, &mut engine);
        if let Some(policy) = cfg.compact.as_ref() {
            for g in active {
                let applied = engine.applied(g).unwrap_or(0);
                let snap = engine.snapshot_index(g).unwrap_or(0);
                if applied > snap && policy(g, applied - snap) && !wanted.contains(&g) {
                    wanted.push(g);
                }
            }
        }
        // Now the applied index covers every entry handed out, so a state
        // machine applied here is exactly as of it.
        asked.retain(|g| engine.applied(*g).is_some());
        for g in wanted {
            let Some(index) = engine.applied(g) else {
                continue;
            };
            if asked.contains(&g) {
                continue;
            }
            let stored = engine.snapshot_index(g).unwrap_or(0);
            match snapshotter(g, index, stored) {
                Snapshot::Now(data) => compact(&mut engine, &to_rewrite, g, index, data),
                Snapshot::Asked => {
                    asked.insert(g);
                }
                Snapshot::None => {}
            }
        }
        published.publish(&engine, &status, now);
    }
    // The sync thread finishes what it was given (nothing waits for it);
    // the rewrite thread frees what it holds and skips the rewrites still
    // queued (their files are removed at the next start).
    drop(to_sync);
    let _ = sync_thread.join();
    stopping.store(true, Ordering::Relaxed);
    drop(replaced);
    drop(to_rewrite);
    let _ = rewrite_thread.join();
    status.lock().running = false;
    info!("raft node {} stopped", cfg.id);
}

/// Compacts a group's log behind a snapshot, its rewrite (if any) to the
/// rewrite thread.
fn compact(
    engine: &mut Engine,
    to_rewrite: &std::sync::mpsc::Sender<Rewrite>,
    group: u64,
    index: u64,
    data: Vec<u8>,
) {
    match engine.compact(group, index, data) {
        Ok(Some(job)) => {
            let _ = to_rewrite.send(Rewrite::Run(group, job));
        }
        Ok(None) => {}
        Err(e) => error!("raft group {group}: could not snapshot at {index}: {e}"),
    }
}

/// A group this server does not lead drops its submits: their requesters
/// hear nothing and retry.
fn propose_submitted(engine: &mut Engine, submitted: &mut BTreeMap<u64, Vec<Vec<u8>>>) {
    for (group, data) in std::mem::take(submitted) {
        let _ = engine.propose_all(group, data);
    }
}

fn emit(
    transport: &Transport,
    events: &std::sync::mpsc::Sender<Event>,
    apply: &mut Option<Apply>,
    out: Output,
    engine: &mut Engine,
) {
    for (to, f) in out.frames {
        transport.send(to, f);
    }
    // A snapshot comes before the entries that follow it.
    let evs = out
        .snapshots
        .into_iter()
        .map(Event::Snapshot)
        .chain(out.committed.into_iter().map(Event::Committed));
    for ev in evs {
        if let Some(f) = apply.as_mut() {
            f(&ev, engine);
        }
        let _ = events.send(ev);
    }
}

/// How stale the published [`Status`] may be.
const STATUS_EVERY: std::time::Duration = std::time::Duration::from_millis(10);

/// What the node loop last published, to publish only what changed.
#[derive(Default)]
struct Published {
    at: Option<Instant>,
    /// The engine's activity count and refusal counts when last published.
    activity: u64,
    refused: replication::engine::Refused,
    /// Each group's status, and whether it was quiet when taken: a quiet
    /// group's state does not change until it wakes.
    groups: BTreeMap<u64, (bool, GroupStatus)>,
}

impl Published {
    /// Publishes the engine's state if it may have changed (its activity
    /// count moved) and STATUS_EVERY has passed, or groups came or went.
    /// Quiet groups already taken quiet are not looked at again.
    fn publish(&mut self, engine: &Engine, status: &Mutex<Status>, now: Instant) {
        let count_changed = engine.group_count() != self.groups.len();
        let stale = self
            .at
            .is_none_or(|at| now.duration_since(at) >= STATUS_EVERY);
        let moved = engine.activity() != self.activity || engine.refused != self.refused;
        if !count_changed && (!stale || !moved) {
            return;
        }
        self.at = Some(now);
        self.activity = engine.activity();
        self.refused = engine.refused;
        self.groups.retain(|&g, _| engine.has_group(g));
        for g in engine.groups() {
            let quiet = engine.is_quiet(g);
            if quiet && self.groups.get(&g).is_some_and(|(was_quiet, _)| *was_quiet) {
                continue;
            }
            let mut st = group_status(engine, g);
            st.leader_since = match self.groups.get(&g) {
                Some((_, was)) if was.is_leader && was.term == st.term => was.leader_since,
                _ => None,
            };
            if st.is_leader && st.leader_since.is_none() {
                st.leader_since = Some(unix_nanos_now());
            }
            self.groups.insert(g, (quiet, st));
        }
        let groups: Vec<GroupStatus> = self.groups.values().map(|(_, st)| st.clone()).collect();
        let mut s = status.lock();
        s.groups = Arc::new(groups);
        s.version += 1;
        s.refused_foreign = engine.refused.foreign;
        s.refused_unknown_group = engine.refused.unknown_group;
        s.refused_undecodable = engine.refused.undecodable;
        s.votes_withheld = engine.refused.votes_withheld;
    }
}

/// The wall clock in Unix nanoseconds, for monitoring only.
fn unix_nanos_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}

fn group_status(engine: &Engine, g: u64) -> GroupStatus {
    let (term, leader) = engine.leader(g).unwrap_or((0, 0));
    let ri = engine.raft_info(g).unwrap_or_default();
    GroupStatus {
        vote: ri.vote,
        last_index: ri.last_index,
        last_term: ri.last_term,
        progress: ri.progress,
        group: g,
        leader,
        term,
        is_leader: engine.is_leader(g),
        committed: engine.committed(g).unwrap_or(0),
        applied: engine.applied(g).unwrap_or(0),
        voters: engine.voters(g).unwrap_or_default(),
        damaged: engine.is_damaged(g),
        leader_since: None,
    }
}
