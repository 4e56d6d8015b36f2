//! The driver of one server's Raft node: a thread that owns the
//! `replication::node::NodeCore` (the engine of every group of this
//! server, and the node's policy around it) and runs its cycle — inputs
//! (peer frames, commands, finished syncs and rewrites), a tick, the
//! Ready — handing frames to the [`Transport`], events to the application,
//! and sync jobs to the node's sync thread. Everything decided here is
//! the core's (its module documents the cycle); this file keeps the
//! threads and the channels.
//!
//! The sync thread runs every job queued while it was busy as one group
//! commit (one fsync per log file; a large round spread over a few
//! threads, [`run_round`]), then reports the last epoch it covered; the
//! engine then releases what waited for it (votes, append
//! acknowledgements). The engine's thread never waits on the disk: a
//! leader proposes, sends appends and commits on its followers'
//! acknowledgements while its own flush runs, so the next flush carries
//! everything that came meanwhile.
//!
//! Compacting a group's log can rewrite its file, whose bulk is the
//! group's snapshot (a whole stream). The node's rewrite thread writes and
//! syncs that, and frees the replaced file's blocks, so every group on the
//! server goes on meanwhile (heartbeats included); the engine's thread
//! only swaps the finished file in.
//!
//! The core is built on the thread and never leaves it; everything else
//! talks to it through messages. A failed sync stops the node: nothing
//! that depended on the write (votes, append acknowledgements) may leave,
//! and the log's state after a failed fsync cannot be trusted.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use replication::engine::{Engine, EngineError};
use replication::node::{Actions, Input as CoreInput, NodeCore, Rewrite};
use serde::Serialize;
use store::{Dir, Rewritten, SyncHandle, SyncLatency, SyncRound};
use tracing::{error, info};

use crate::transport::Transport;

pub use replication::node::{CompactPolicy, Event, GroupStatus, Snapshot};

/// Answers the need for a snapshot of a group's state machine as of its
/// applied index (to compact its log, or to catch a follower up): called
/// with the group, that index, and the index of the snapshot the log holds
/// now (what a restart would start from). It runs on the engine's thread,
/// after every entry up to the index went through the `apply` hook (and
/// was handed on from there, for a state machine applied elsewhere). A
/// state machine applied elsewhere answers `Snapshot::Asked`, and its
/// owner hands the bytes over with [`Node::snapshot_taken`].
pub type Snapshotter = Box<dyn FnMut(u64, u64, u64) -> Snapshot + Send>;

/// Applies an event on the engine's thread, before it is also sent to the
/// receiver. A state machine that must be snapshotted lives here. It gets
/// the engine too: applying one group's entry may start or end another
/// group (the meta group assigns streams), and the engine tells whether
/// this server leads the group, so only a leader sends a state machine's
/// outputs.
pub type Apply = Box<dyn FnMut(&Event, &mut Engine) + Send>;

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
    /// How long each round of log syncs took.
    pub sync_latency: Arc<SyncLatency>,
    /// A log sync failed for want of disk space (set once, never
    /// cleared: what is told of it is told once).
    pub disk_full: Arc<AtomicBool>,
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
        let sync_latency = Arc::new(SyncLatency::default());
        let disk_full = Arc::new(AtomicBool::new(false));
        let syncs = SyncWatch {
            latency: sync_latency.clone(),
            disk_full: disk_full.clone(),
        };
        let thread = std::thread::Builder::new()
            .name(format!("raft-{}", cfg.id))
            .spawn(move || run(cfg, rx, synced, ctx, t, st, syncs))
            .expect("spawn the raft thread");
        (
            Node {
                tx,
                status,
                thread: Some(thread),
                transport,
                sync_latency,
                disk_full,
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
    /// client's reader): if it does not, the entry comes back to the
    /// apply hook as an `Event::Dropped`, whose owner answers its
    /// requester.
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

/// What the sync thread tells of its rounds: how long each took, and
/// whether one failed for want of space.
struct SyncWatch {
    latency: Arc<SyncLatency>,
    disk_full: Arc<AtomicBool>,
}

/// Runs sync handles queued by the engine's thread: all that are waiting
/// as one round, then reports the last epoch done, or that the round
/// failed. Ends when the engine's thread drops its sender.
fn syncer(
    id: u64,
    rx: std::sync::mpsc::Receiver<(u64, Vec<SyncHandle>)>,
    report: std::sync::mpsc::Sender<Input>,
    watch: &SyncWatch,
) {
    let mut failures = 0u64;
    let mut logged: Option<Instant> = None;
    while let Ok(first) = rx.recv() {
        let mut batch = vec![first];
        while let Ok(more) = rx.try_recv() {
            batch.push(more);
        }
        let last = batch.iter().map(|(epoch, _)| *epoch).max().unwrap_or(0);
        debug_assert!(
            batch.windows(2).all(|w| w[0].0 < w[1].0),
            "epochs come in order"
        );
        let handles: Vec<SyncHandle> = batch.into_iter().flat_map(|(_, h)| h).collect();
        let since = Instant::now();
        let ran = run_round(handles);
        watch.latency.record(since);
        if let Err(e) = ran {
            if e.kind() == std::io::ErrorKind::StorageFull {
                watch.disk_full.store(true, Ordering::Relaxed);
            }
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

/// Handles in a round from which it is spread over threads.
const PARALLEL_FROM: usize = 32;
/// Threads a large round is spread over. A failover makes every group
/// with a dead member elect at once: each vote is a log write to sync
/// before it may be sent. 2,000 groups' syncs one after another took
/// longer than an election timeout here (0.6 ms each), so every
/// candidate timed out before its votes came and none was elected;
/// fsyncs of different files run together are committed by the file
/// system in fewer journal writes (a quarter of the time with 8).
const SYNC_THREADS: usize = 8;

/// Runs one round's handles: all of them, or an error if any failed
/// (what waited on the round is then written again, whichever it was).
/// A handle's own parts run in order; handles are independent (each is
/// one group's log). A small round runs here, deduplicating files; a
/// large one is dealt round-robin to [`SYNC_THREADS`] threads, each its
/// own round (a file twice in the batch may then be synced twice).
fn run_round(handles: Vec<SyncHandle>) -> std::io::Result<()> {
    if handles.len() < PARALLEL_FROM {
        let mut round = SyncRound::default();
        return handles.into_iter().try_for_each(|h| round.sync(h));
    }
    let threads = SYNC_THREADS.min(handles.len() / (PARALLEL_FROM / SYNC_THREADS));
    let mut shares: Vec<Vec<SyncHandle>> = (0..threads).map(|_| Vec::new()).collect();
    for (i, h) in handles.into_iter().enumerate() {
        shares[i % threads].push(h);
    }
    std::thread::scope(|scope| {
        let running: Vec<_> = shares
            .into_iter()
            .map(|share| {
                scope.spawn(move || {
                    let mut round = SyncRound::default();
                    share.into_iter().try_for_each(|h| round.sync(h))
                })
            })
            .collect();
        // Every thread is joined, failed or not, before the round ends.
        let results: Vec<std::io::Result<()>> = running
            .into_iter()
            .map(|t| {
                t.join()
                    .unwrap_or_else(|_| Err(std::io::Error::other("a sync thread panicked")))
            })
            .collect();
        results.into_iter().collect()
    })
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

/// What carries out a core's [`Actions`] on the engine's thread: the
/// transport, the apply hook and the event channel, the rewrite thread.
/// The sync job goes to the sync thread first, in the loop itself.
struct Carry {
    transport: Arc<Transport>,
    events: std::sync::mpsc::Sender<Event>,
    apply: Option<Apply>,
    to_rewrite: std::sync::mpsc::Sender<Rewrite>,
}

impl Carry {
    fn out(&mut self, core: &mut NodeCore, a: Actions) {
        debug_assert!(a.sync.is_none(), "the loop sends the sync job itself");
        for r in a.rewrites {
            let _ = self.to_rewrite.send(r);
        }
        for (to, f) in a.frames {
            self.transport.send(to, f);
        }
        // A restart's snapshot is for the state machines applied here.
        for ev in a.restored {
            if let Some(f) = self.apply.as_mut() {
                f(&ev, core.engine_mut());
            }
        }
        for ev in a.events {
            if let Some(f) = self.apply.as_mut() {
                f(&ev, core.engine_mut());
            }
            let _ = self.events.send(ev);
        }
        for n in a.notes.iter().filter(|n| n.is_failure()) {
            error!("{n}");
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
    syncs: SyncWatch,
) {
    // The core's clock: time since the thread started.
    let start = Instant::now();
    let engine = Engine::new(cfg.id, cfg.dir, cfg.seed);
    let core_cfg = replication::node::Config {
        tick: cfg.tick,
        compact: cfg.compact,
    };
    let mut core = NodeCore::new(engine, core_cfg, Duration::ZERO);
    let mut snapshotter = cfg.snapshotter;
    let (to_sync, sync_rx) = std::sync::mpsc::channel();
    let id = cfg.id;
    let rewritten = synced.clone();
    let sync_thread = std::thread::Builder::new()
        .name(format!("raft-sync-{}", cfg.id))
        .spawn(move || syncer(id, sync_rx, synced, &syncs))
        .expect("spawn the raft sync thread");
    let (to_rewrite, rewrite_rx) = std::sync::mpsc::channel();
    let stopping = Arc::new(AtomicBool::new(false));
    let rewriter_stopping = stopping.clone();
    let rewrite_thread = std::thread::Builder::new()
        .name(format!("raft-rewrite-{}", cfg.id))
        .spawn(move || rewriter(rewrite_rx, rewritten, rewriter_stopping))
        .expect("spawn the raft rewrite thread");
    let mut carry = Carry {
        transport,
        events: committed,
        apply: cfg.apply,
        to_rewrite,
    };
    'run: loop {
        let wait = core.poll_timeout().saturating_sub(start.elapsed());
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
        // Each input's actions are carried out before the next input.
        for i in inputs {
            if !take_input(&mut core, &mut carry, i) {
                break 'run;
            }
        }
        let now = start.elapsed();
        if !end_cycle(&mut core, &mut carry, &to_sync, &mut snapshotter, now) {
            break 'run;
        }
        if let Some(update) = core.poll_status(now, unix_nanos_now()) {
            publish_status(&status, update);
        }
    }
    // The sync thread finishes what it was given (nothing waits for it);
    // the rewrite thread frees what it holds and skips the rewrites still
    // queued (their files are removed at the next start).
    drop(to_sync);
    let _ = sync_thread.join();
    stopping.store(true, Ordering::Relaxed);
    drop(core.take_replaced());
    drop(carry.to_rewrite);
    let _ = rewrite_thread.join();
    status.lock().running = false;
    info!("raft node {} stopped", cfg.id);
}

/// One input to the core, its actions carried out at once. `false`:
/// the node is asked to stop.
fn take_input(core: &mut NodeCore, carry: &mut Carry, input: Input) -> bool {
    match input {
        Input::Frame(peer, frame) => core.handle(CoreInput::Frame { peer, frame }),
        Input::Call(f) => f(core.call()),
        Input::Create {
            group,
            voters,
            reply,
        } => {
            let _ = reply.send(core.create_group(group, &voters));
        }
        Input::Propose { group, data, reply } => {
            let _ = reply.send(core.propose(group, data));
        }
        Input::Submit { group, data } => core.handle(CoreInput::Submit { group, data }),
        Input::Restart { group, reply } => {
            let r = core.restart_group(group, &[]);
            let a = core.poll();
            carry.out(core, a);
            let _ = reply.send(r);
        }
        Input::Synced(epoch) => core.handle(CoreInput::Synced(epoch)),
        Input::Rewritten(group, done) => core.handle(CoreInput::Rewritten { group, done }),
        Input::Snapshot(group, index, data) => {
            core.handle(CoreInput::SnapshotTaken { group, index, data });
        }
        Input::SyncFailed => core.handle(CoreInput::SyncFailed),
        Input::Stop => return false,
    }
    let a = core.poll();
    carry.out(core, a);
    true
}

/// The end of a cycle, in `NodeCore`'s order: timers, the Ready (its
/// sync job to the sync thread first), then the snapshots the logs want.
/// `false`: the sync thread is gone.
fn end_cycle(
    core: &mut NodeCore,
    carry: &mut Carry,
    to_sync: &std::sync::mpsc::Sender<(u64, Vec<SyncHandle>)>,
    snapshotter: &mut Snapshotter,
    now: Duration,
) -> bool {
    core.handle_timeout(now);
    let mut ready = core.ready();
    if let Some(job) = ready.sync.take() {
        if to_sync.send((job.epoch, job.handles)).is_err() {
            return false;
        }
    }
    carry.out(core, ready);
    // Now the applied index covers every entry handed out, so a state
    // machine applied here is exactly as of it.
    for want in core.poll_snapshots() {
        let answer = snapshotter(want.group, want.index, want.stored);
        core.handle_snapshot(want, answer);
    }
    let a = core.poll();
    carry.out(core, a);
    true
}

/// Monitoring's copy of the node's status.
fn publish_status(status: &Mutex<Status>, update: replication::node::StatusUpdate) {
    let mut s = status.lock();
    s.groups = update.groups;
    s.version += 1;
    s.refused_foreign = update.refused.foreign;
    s.refused_unknown_group = update.refused.unknown_group;
    s.refused_undecodable = update.refused.undecodable;
    s.votes_withheld = update.refused.votes_withheld;
}

/// The wall clock in Unix nanoseconds, for monitoring only.
fn unix_nanos_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use store::SyncHandle;

    use super::{run_round, PARALLEL_FROM};

    /// Handles that count their runs; the one at `fail`, if any, fails.
    fn handles(n: usize, fail: Option<usize>, runs: &Arc<AtomicUsize>) -> Vec<SyncHandle> {
        (0..n)
            .map(|i| {
                let runs = runs.clone();
                SyncHandle::new(move || {
                    runs.fetch_add(1, Ordering::Relaxed);
                    match Some(i) == fail {
                        true => Err(std::io::Error::other("disk on fire")),
                        false => Ok(()),
                    }
                })
            })
            .collect()
    }

    /// Small or spread over threads, a round runs every handle once and
    /// succeeds, or fails if any handle failed.
    #[test]
    fn a_round_runs_every_handle_or_fails() {
        for n in [1, PARALLEL_FROM - 1, PARALLEL_FROM, 2_000] {
            let runs = Arc::new(AtomicUsize::new(0));
            assert!(run_round(handles(n, None, &runs)).is_ok(), "{n}");
            assert_eq!(runs.load(Ordering::Relaxed), n, "{n}");
            let runs = Arc::new(AtomicUsize::new(0));
            assert!(run_round(handles(n, Some(n / 2), &runs)).is_err(), "{n}");
        }
    }
}
