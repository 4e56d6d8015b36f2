//! One server's Raft node as policy, sans IO: the [`Engine`] and what a
//! driver must decide around it — which submits are proposed together,
//! when a replaced log file may be freed, when to snapshot and compact a
//! group's log, in what order the state machines hear events, and when
//! monitoring gets a fresh status. `cluster::node` drives it with real
//! threads and channels (an engine thread, a sync thread, a rewrite
//! thread); the simulator drives it on one seeded thread. Nothing here
//! reads a clock, spawns a thread or draws an unseeded number: time and
//! the wall clock come in as arguments.
//!
//! # The driver contract
//!
//! A driver runs cycles. Each cycle, in order:
//!
//! 1. **Inputs**, in the order they came: [`NodeCore::handle`] (peer
//!    frames, submits, a finished sync or failed one, a finished log
//!    rewrite, a snapshot a state machine took when asked),
//!    [`NodeCore::create_group`], [`NodeCore::propose`],
//!    [`NodeCore::restart_group`] (each answers at once), and
//!    [`NodeCore::call`] (any other work on the engine). After each, the
//!    driver calls [`NodeCore::poll`] and carries out its [`Actions`]
//!    before the next input (below).
//! 2. [`NodeCore::handle_timeout`] with the driver's monotonic time:
//!    a tick, if one is due ([`NodeCore::poll_timeout`] says when).
//! 3. [`NodeCore::ready`]: the engine's new work as [`Actions`], carried
//!    out at once: the sync job first (to the sync thread), then the rest.
//! 4. [`NodeCore::poll_snapshots`]: the snapshots wanted now, each as of
//!    its group's applied index, which the state machines reached in 3.
//!    The driver answers every one, in order, with
//!    [`NodeCore::handle_snapshot`] (what [`Snapshot`] says), then calls
//!    [`NodeCore::poll`] and carries out the compactions' rewrites.
//! 5. [`NodeCore::poll_status`] with the time and the wall clock: a
//!    [`StatusUpdate`] to publish, when one is due.
//!
//! Carrying out [`Actions`], in field order:
//! - `sync`: run every handle (one group commit; the jobs in the order
//!   handed out), then hand back [`Input::Synced`] with its epoch, or
//!   [`Input::SyncFailed`]. A later job may be reported with an earlier
//!   one: an epoch covers every epoch before it.
//! - `rewrites`: in order, off the engine's thread. [`Rewrite::Run`]
//!   writes a group's new log file and comes back as
//!   [`Input::Rewritten`]; [`Rewrite::Free`] drops a replaced file (freeing
//!   its blocks costs about what writing them did).
//! - `frames`: to each peer, as they come.
//! - `restored`, then `events`: through the state machines, in order
//!   (a snapshot before the entries that follow it); an
//!   [`Event::Dropped`] goes to the owner of the submits it hands back. `restored` holds a
//!   restarted group's stored snapshot, for the state machines applied on
//!   the driver's thread only; a state machine applied elsewhere reopens
//!   from its own store.
//! - `reads`: confirmed current reads, to serve once the group's state
//!   machine has applied their index.
//! - `notes`: what happened (a compaction, a rewrite swapped in) and what
//!   failed, for logs and tests.
//!
//! [`NodeCore::engine_mut`] lends the engine to what carries out events
//! (an apply hook that starts or ends groups); that is not an input.
//!
//! Checked at each entry (a broken contract panics): no input while a
//! Ready's snapshot wants are unanswered, nor before the last input's
//! actions were polled; an epoch synced was handed out, and is never
//! synced twice or out of order; a failed sync had an epoch outstanding;
//! answers match the wants in order; time never goes backwards.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde::Serialize;
use store::{Replaced, RewriteJob, Rewritten, Swap, SyncHandle};

use crate::engine::{Committed, Engine, EngineError, NotProposed, Output, Refused};
use crate::frame::Frame;

/// How stale a published [`StatusUpdate`] may be, for each
/// [`STATUS_STEP`] groups the last one had to look at: rebuilding
/// thousands of awake groups' status every 10 ms took a server's Raft
/// thread a tenth of its time, and elections starved of it.
pub const STATUS_EVERY: Duration = Duration::from_millis(10);
pub const STATUS_STEP: usize = 250;

/// How long a snapshot asked for ([`Snapshot::Asked`]) is awaited before
/// the group may be asked again.
pub const ASK_AGAIN: Duration = Duration::from_secs(30);

/// What the state machines hear, in order per group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// An entry to apply.
    Committed(Committed),
    /// A leader's snapshot replaced this replica's log (or a restart
    /// found one in it): the state machine is replaced by this data, as
    /// of this index, before later entries.
    Snapshot(Committed),
    /// Submits this server did not propose ([`NotProposed`]: it no longer
    /// leads the group, or raft-rs dropped the proposal), in the order
    /// they came. Never applied: their owner answers whoever waits on
    /// them, so a leadership change leaves no requester waiting in
    /// silence.
    Dropped { group: u64, data: Vec<Bytes> },
}

/// A state machine's answer to a [`Want`].
pub enum Snapshot {
    /// Its bytes, as of the want's index: the state machine is applied on
    /// the driver's thread.
    Now(Vec<u8>),
    /// Asked for: the state machine is applied elsewhere, and its owner
    /// hands the bytes over as [`Input::SnapshotTaken`], as of the index
    /// asked for (or a later one already handed out, if it could not take
    /// one then). Not asked again for the group until then, or until
    /// [`ASK_AGAIN`] has passed: an answer may never come (its store's
    /// sync failed, or its owner was replaced).
    Asked,
    /// None to be had.
    None,
}

/// Whether to snapshot a group and compact its log, given the entries
/// applied since its last snapshot: (group, entries).
pub type CompactPolicy = Box<dyn Fn(u64, u64) -> bool + Send>;

pub struct Config {
    /// Raft's clock: elections take 10 to 20 ticks, heartbeats every 2
    /// (`crate::timing`).
    pub tick: Duration,
    /// Without one, logs are compacted only when a follower needs a
    /// snapshot.
    pub compact: Option<CompactPolicy>,
}

/// What comes into the node without an answer.
pub enum Input {
    /// A peer frame the transport checked, from the peer it came from.
    Frame { peer: u64, frame: Frame },
    /// A frame's bytes from `peer`, checked here (the simulator's wire).
    Bytes { peer: u64, bytes: Vec<u8> },
    /// An entry to propose if this server leads the group, with the
    /// submits next to it; handed back otherwise ([`Event::Dropped`]).
    Submit { group: u64, data: Vec<u8> },
    /// Every sync job up to this epoch ran.
    Synced(u64),
    /// A sync job failed; those after it in its round were not run.
    SyncFailed,
    /// A [`Rewrite::Run`] finished.
    Rewritten { group: u64, done: Rewritten },
    /// A snapshot asked for ([`Snapshot::Asked`]): the group's state as of
    /// `index`, which its state machine applied.
    SnapshotTaken {
        group: u64,
        index: u64,
        data: Vec<u8>,
    },
}

/// Sync handles of one epoch, to run together.
pub struct SyncJob {
    pub epoch: u64,
    pub handles: Vec<SyncHandle>,
}

/// Work for the rewrite thread, in order.
pub enum Rewrite {
    /// Write a group's new log file, then hand back [`Input::Rewritten`].
    Run(u64, RewriteJob),
    /// Drop a replaced log file: no sync job handed out can hold it.
    Free(Replaced),
}

/// What happened, for logs and tests.
#[derive(Debug)]
pub enum Note {
    /// A group's log was compacted behind a snapshot at `index`.
    Compacted { group: u64, index: u64 },
    /// A group's rewritten log file was swapped in.
    Swapped { group: u64 },
    /// A snapshot could not be taken into the log.
    CompactFailed {
        group: u64,
        index: u64,
        error: EngineError,
    },
    /// A rewritten file could not be swapped in: the log goes on in its
    /// old file.
    RewriteFailed { group: u64, error: EngineError },
}

impl Note {
    pub fn is_failure(&self) -> bool {
        matches!(
            self,
            Note::CompactFailed { .. } | Note::RewriteFailed { .. }
        )
    }
}

impl fmt::Display for Note {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Note::Compacted { group, index } => {
                write!(f, "raft group {group}: compacted behind {index}")
            }
            Note::Swapped { group } => write!(f, "raft group {group}: its log was rewritten"),
            Note::CompactFailed {
                group,
                index,
                error,
            } => write!(
                f,
                "raft group {group}: could not snapshot at {index}: {error}"
            ),
            Note::RewriteFailed { group, error } => {
                write!(f, "raft group {group}: could not rewrite its log: {error}")
            }
        }
    }
}

/// What the driver carries out (see the module's contract for how).
#[derive(Default)]
#[must_use = "a node's actions are carried out before its next input"]
pub struct Actions {
    pub sync: Option<SyncJob>,
    pub rewrites: Vec<Rewrite>,
    pub frames: Vec<(u64, Frame)>,
    pub restored: Vec<Event>,
    pub events: Vec<Event>,
    /// Confirmed reads: (group, request context, index).
    pub reads: Vec<(u64, Vec<u8>, u64)>,
    pub notes: Vec<Note>,
}

impl Actions {
    pub fn is_empty(&self) -> bool {
        self.sync.is_none()
            && self.rewrites.is_empty()
            && self.frames.is_empty()
            && self.restored.is_empty()
            && self.events.is_empty()
            && self.reads.is_empty()
            && self.notes.is_empty()
    }

    /// An engine output's frames, events (snapshots before entries) and
    /// reads.
    fn take(&mut self, out: Output) {
        self.frames.extend(out.frames);
        self.events
            .extend(out.snapshots.into_iter().map(Event::Snapshot));
        self.events
            .extend(out.committed.into_iter().map(Event::Committed));
        self.reads.extend(out.reads);
    }
}

/// A snapshot the node wants of a group's state machine, as of its
/// applied `index` (to compact its log, or to catch a follower up);
/// `stored` is the index of the snapshot a restart would start its log
/// from: journaled and synced, which may lag the last compaction
/// (`Engine::durable_snapshot_index`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Want {
    pub group: u64,
    pub index: u64,
    pub stored: u64,
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
    /// Members being caught up before they vote ([`Engine::learners`]).
    pub learners: Vec<u64>,
    pub damaged: bool,
    pub vote: u64,
    pub last_index: u64,
    pub last_term: u64,
    /// On the leader: (member, replicated index).
    pub progress: Vec<(u64, u64)>,
    /// On the leader: the members heard from within the last election
    /// timeout.
    pub active: Vec<u64>,
    /// On the leader: when (Unix nanoseconds, the driver's wall clock)
    /// this server took the lead in the current term, as the node first
    /// saw it.
    pub leader_since: Option<i64>,
    /// How often this server saw the group's leader change (to another
    /// known leader) since it started.
    pub leader_changes: u64,
}

/// A status to publish: every group, in id order, and what the engine
/// refused from peers.
pub struct StatusUpdate {
    pub groups: Arc<Vec<GroupStatus>>,
    pub refused: Refused,
}

/// Where the driver is in its cycle, for the contract's checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Taking inputs (and between cycles).
    Inputs,
    /// A Ready was handed out: its snapshot wants come next.
    Ready,
    /// Wants handed out and not all answered.
    Answering,
}

pub struct NodeCore {
    engine: Engine,
    tick: Duration,
    compact: Option<CompactPolicy>,
    /// When the next tick is due, and the last time the driver gave.
    next_tick: Duration,
    now: Duration,
    phase: Phase,
    /// Submits not yet proposed, by group, in order.
    submitted: BTreeMap<u64, Vec<Vec<u8>>>,
    /// Submits not taken ([`Event::Dropped`]), for the next actions
    /// handed out (a poll's or a Ready's).
    dropped: Vec<Event>,
    /// What the inputs so far asked for, until [`NodeCore::poll`].
    pending: Actions,
    /// From the last Ready: the groups the engine wants a snapshot of,
    /// and those that applied something (only they can have come due for
    /// compaction).
    wanted: Vec<u64>,
    active: BTreeSet<u64>,
    /// Wants handed out and not yet answered, in order.
    open: VecDeque<Want>,
    /// Groups whose snapshot was asked for and has not come yet, with
    /// when they were asked.
    asked: BTreeMap<u64, Duration>,
    /// The last sync epoch handed out, and the last one synced.
    handed_out: u64,
    synced: u64,
    /// Replaced log files, each with the last epoch handed out when it was
    /// replaced: sync jobs of those epochs may hold the file, and the last
    /// holder to drop it frees its blocks, so it is freed only once they
    /// have run.
    replaced: Vec<(u64, Replaced)>,
    published: Published,
}

impl NodeCore {
    /// A node over `engine` (its groups created since or to come), its
    /// first tick due one tick after `now`.
    pub fn new(engine: Engine, cfg: Config, now: Duration) -> NodeCore {
        NodeCore {
            engine,
            tick: cfg.tick,
            compact: cfg.compact,
            next_tick: now + cfg.tick,
            now,
            phase: Phase::Inputs,
            submitted: BTreeMap::new(),
            dropped: Vec::new(),
            pending: Actions::default(),
            wanted: Vec::new(),
            active: BTreeSet::new(),
            open: VecDeque::new(),
            asked: BTreeMap::new(),
            handed_out: 0,
            synced: 0,
            replaced: Vec::new(),
            published: Published::default(),
        }
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The engine, for what carries out [`Actions`] (an apply hook may
    /// start or end groups). Not an input: for one, [`NodeCore::call`].
    pub fn engine_mut(&mut self) -> &mut Engine {
        &mut self.engine
    }

    /// The checks at every input's entry.
    fn input(&mut self) {
        assert!(
            self.phase == Phase::Inputs,
            "an input in the middle of a cycle ({:?}): a Ready's snapshot wants are answered first",
            self.phase
        );
        assert!(
            self.pending.is_empty(),
            "an input before the last one's actions were polled"
        );
    }

    /// Proposes what was submitted, one proposal per group
    /// (`Engine::propose_all`): any input but a submit comes after the
    /// submits before it. What a group does not take (this server does
    /// not lead it, or raft-rs dropped the proposal) goes back to its
    /// owner as [`Event::Dropped`].
    fn propose_submitted(&mut self) {
        for (group, data) in std::mem::take(&mut self.submitted) {
            let submitted = data.len();
            if let Err(NotProposed { data, .. }) = self.engine.propose_all(group, data) {
                assert!(
                    !data.is_empty() && data.len() <= submitted,
                    "handed back {} of {submitted} submits",
                    data.len()
                );
                self.dropped.push(Event::Dropped { group, data });
            }
        }
    }

    /// An input without an answer (see [`Input`]).
    pub fn handle(&mut self, input: Input) {
        self.input();
        if let Input::Submit { group, data } = input {
            self.submitted.entry(group).or_default().push(data);
            return;
        }
        self.propose_submitted();
        match input {
            Input::Frame { peer, frame } => self.engine.receive_frame(peer, frame),
            Input::Bytes { peer, bytes } => self.engine.receive(peer, &bytes),
            Input::Submit { .. } => unreachable!("taken above"),
            Input::Synced(epoch) => self.handle_synced(epoch),
            Input::SyncFailed => {
                assert!(
                    self.synced < self.handed_out,
                    "a sync failed with none outstanding (synced {}, handed out {})",
                    self.synced,
                    self.handed_out
                );
                self.engine.sync_failed();
            }
            Input::Rewritten { group, done } => match self.engine.rewritten(group, done) {
                Ok(Swap::Done(old)) => {
                    self.replaced.push((self.handed_out, old));
                    self.pending.notes.push(Note::Swapped { group });
                }
                Ok(Swap::More(job)) => self.pending.rewrites.push(Rewrite::Run(group, job)),
                Ok(Swap::Dropped) => {}
                Err(error) => self
                    .pending
                    .notes
                    .push(Note::RewriteFailed { group, error }),
            },
            Input::SnapshotTaken { group, index, data } => {
                self.asked.remove(&group);
                self.compact(group, index, data);
            }
        }
    }

    fn handle_synced(&mut self, epoch: u64) {
        assert!(
            epoch <= self.handed_out,
            "epoch {epoch} synced, but only {} handed out",
            self.handed_out
        );
        assert!(
            epoch > self.synced,
            "epoch {epoch} synced after {}: twice, or out of order",
            self.synced
        );
        self.synced = epoch;
        for (_, old) in self.replaced.extract_if(.., |(at, _)| *at <= epoch) {
            self.pending.rewrites.push(Rewrite::Free(old));
        }
        let out = self.engine.synced(epoch);
        debug_assert!(
            out.sync.is_empty() && out.epoch.is_none(),
            "a sync hands out none"
        );
        self.pending.take(out);
    }

    /// Starts this server's node of `group` (`Engine::create_group`).
    pub fn create_group(&mut self, group: u64, voters: &[u64]) -> Result<(), EngineError> {
        self.input();
        self.propose_submitted();
        self.engine.create_group(group, voters).map(|_| ())
    }

    /// Proposes an entry; `Ok` means this server leads and appended it.
    pub fn propose(&mut self, group: u64, data: Vec<u8>) -> Result<(), EngineError> {
        self.input();
        self.propose_submitted();
        self.engine.propose(group, data)
    }

    /// Restarts this server's node of a group from its log (a new log is
    /// bootstrapped with `voters`), its stored snapshot, if it holds
    /// state, in the next [`Actions::restored`]: the state machine is
    /// rebuilt from it, then from the entries after it, which follow.
    /// Returns the group's voters.
    pub fn restart_group(&mut self, group: u64, voters: &[u64]) -> Result<Vec<u64>, EngineError> {
        self.input();
        self.propose_submitted();
        self.engine.create_group(group, voters)?;
        let stored = self.engine.snapshot(group).filter(|(_, d)| !d.is_empty());
        if let Some((index, data)) = stored {
            let c = Committed { group, index, data };
            self.pending.restored.push(Event::Snapshot(c));
        }
        Ok(self.engine.voters(group).unwrap_or_default())
    }

    /// Any other input: the engine, for one piece of work (after the
    /// submits before it).
    pub fn call(&mut self) -> &mut Engine {
        self.input();
        self.propose_submitted();
        &mut self.engine
    }

    /// What the inputs since the last poll asked for.
    pub fn poll(&mut self) -> Actions {
        let mut actions = std::mem::take(&mut self.pending);
        actions.events.append(&mut self.dropped);
        actions
    }

    /// When [`NodeCore::handle_timeout`] next has a tick to give.
    pub fn poll_timeout(&self) -> Duration {
        self.next_tick
    }

    /// The time, once the cycle's inputs are in: the submits go, and the
    /// engine ticks if a tick is due. Far behind (a stall), it ticks once
    /// and the next is a whole tick away, never a burst.
    pub fn handle_timeout(&mut self, now: Duration) {
        self.input();
        assert!(
            now >= self.now,
            "time went back from {:?} to {now:?}",
            self.now
        );
        self.now = now;
        self.propose_submitted();
        if now >= self.next_tick {
            self.engine.tick();
            self.next_tick += self.tick;
            if self.next_tick < now {
                self.next_tick = now + self.tick;
            }
        }
    }

    /// The engine's new work: a sync job with its epoch, frames, events,
    /// confirmed reads. Carried out before anything else but
    /// [`NodeCore::poll_snapshots`], which comes next.
    pub fn ready(&mut self) -> Actions {
        self.input();
        self.propose_submitted();
        let mut out = self.engine.poll();
        let mut actions = Actions::default();
        if let Some(epoch) = out.epoch {
            assert!(
                epoch > self.handed_out,
                "epoch {epoch} handed out after {}",
                self.handed_out
            );
            self.handed_out = epoch;
            let handles = std::mem::take(&mut out.sync);
            actions.sync = Some(SyncJob { epoch, handles });
        }
        debug_assert!(out.sync.is_empty(), "sync handles come with an epoch");
        self.wanted = std::mem::take(&mut out.snapshot_wanted);
        self.active = out.committed.iter().map(|c| c.group).collect();
        actions.events.append(&mut self.dropped);
        actions.take(out);
        self.phase = Phase::Ready;
        actions
    }

    /// The snapshots wanted now, once the Ready's events went through the
    /// state machines, so each is as of its group's applied index: those
    /// the engine asked for (to catch a follower up) and those the
    /// compaction policy says are due, among the groups that applied
    /// something (with thousands of quiet groups, looking at each one
    /// every cycle would cost more than the work itself). A group already
    /// asked is not asked again. Answer each, in order, with
    /// [`NodeCore::handle_snapshot`].
    pub fn poll_snapshots(&mut self) -> Vec<Want> {
        assert!(
            self.phase == Phase::Ready,
            "snapshot wants come after a Ready ({:?})",
            self.phase
        );
        // Snapshots that came ahead of their log's commit index, now
        // committed.
        for (group, index, data) in self.engine.due_compactions() {
            self.compact(group, index, data);
        }
        let mut wanted = std::mem::take(&mut self.wanted);
        if let Some(policy) = self.compact.as_ref() {
            for &g in &self.active {
                let applied = self.engine.applied(g).unwrap_or(0);
                let snap = self.engine.snapshot_index(g).unwrap_or(0);
                if applied > snap && policy(g, applied - snap) && !wanted.contains(&g) {
                    wanted.push(g);
                }
            }
        }
        self.active.clear();
        let (engine, now) = (&self.engine, self.now);
        self.asked
            .retain(|g, at| engine.applied(*g).is_some() && now.saturating_sub(*at) < ASK_AGAIN);
        let wants: Vec<Want> = wanted
            .into_iter()
            .filter(|g| !self.asked.contains_key(g))
            .filter_map(|group| {
                let index = self.engine.applied(group)?;
                let stored = self.engine.durable_snapshot_index(group).unwrap_or(0);
                Some(Want {
                    group,
                    index,
                    stored,
                })
            })
            .collect();
        self.open = wants.iter().copied().collect();
        self.phase = match self.open.is_empty() {
            true => Phase::Inputs,
            false => Phase::Answering,
        };
        wants
    }

    /// A state machine's answer to `want`: taken now (the log is
    /// compacted behind it; its rewrite comes out of the next poll),
    /// asked for, or none.
    pub fn handle_snapshot(&mut self, want: Want, answer: Snapshot) {
        assert!(
            self.phase == Phase::Answering,
            "an answer with no want open ({:?})",
            self.phase
        );
        let expected = self.open.pop_front();
        assert_eq!(expected, Some(want), "answers come for the wants, in order");
        match answer {
            Snapshot::Now(data) => self.compact(want.group, want.index, data),
            Snapshot::Asked => {
                let fresh = self.asked.insert(want.group, self.now).is_none();
                assert!(fresh, "group {} asked twice", want.group);
            }
            Snapshot::None => {}
        }
        if self.open.is_empty() {
            self.phase = Phase::Inputs;
        }
    }

    /// Compacts a group's log behind a snapshot; its rewrite (if any) for
    /// the rewrite thread.
    fn compact(&mut self, group: u64, index: u64, data: Vec<u8>) {
        match self.engine.compact(group, index, data) {
            Ok(job) => {
                self.pending
                    .rewrites
                    .extend(job.map(|j| Rewrite::Run(group, j)));
                self.pending.notes.push(Note::Compacted { group, index });
            }
            Err(error) => self.pending.notes.push(Note::CompactFailed {
                group,
                index,
                error,
            }),
        }
    }

    /// A status to publish, if the engine's state may have changed (its
    /// activity count moved) and [`STATUS_EVERY`] (a step more for every
    /// [`STATUS_STEP`] groups awake) has passed since the
    /// last, or groups came or went. `wall` (Unix nanoseconds) stamps a
    /// leader's `leader_since`.
    pub fn poll_status(&mut self, now: Duration, wall: i64) -> Option<StatusUpdate> {
        assert!(
            self.phase == Phase::Inputs,
            "the status comes at a cycle's end ({:?})",
            self.phase
        );
        assert!(
            now >= self.now,
            "time went back from {:?} to {now:?}",
            self.now
        );
        self.now = now;
        self.published.publish(&self.engine, now, wall)
    }

    /// Once the sync thread has stopped: every replaced file still held
    /// here, to drop.
    pub fn take_replaced(&mut self) -> Vec<Replaced> {
        self.replaced.drain(..).map(|(_, r)| r).collect()
    }
}

/// What was last published, to publish only what changed.
#[derive(Default)]
struct Published {
    at: Option<Duration>,
    /// The engine's activity count and refusal counts when last published.
    activity: u64,
    /// Groups looked at (not quiet) by the last publish.
    looked: usize,
    refused: Refused,
    /// Each group's status, and whether it was quiet when taken: a quiet
    /// group's state does not change until it wakes.
    groups: BTreeMap<u64, (bool, GroupStatus)>,
}

impl Published {
    /// Quiet groups already taken quiet are not looked at again.
    fn publish(&mut self, engine: &Engine, now: Duration, wall: i64) -> Option<StatusUpdate> {
        let count_changed = engine.group_count() != self.groups.len();
        let every = STATUS_EVERY * (1 + self.looked / STATUS_STEP) as u32;
        let stale = self.at.is_none_or(|at| now.saturating_sub(at) >= every);
        let moved = engine.activity() != self.activity || engine.refused != self.refused;
        if !count_changed && (!stale || !moved) {
            return None;
        }
        self.at = Some(now);
        self.activity = engine.activity();
        self.refused = engine.refused;
        self.groups.retain(|&g, _| engine.has_group(g));
        self.looked = 0;
        for g in engine.groups() {
            let quiet = engine.is_quiet(g);
            if quiet && self.groups.get(&g).is_some_and(|(was_quiet, _)| *was_quiet) {
                continue;
            }
            self.looked += 1;
            let mut st = group_status(engine, g);
            st.leader_since = match self.groups.get(&g) {
                Some((_, was)) if was.is_leader && was.term == st.term => was.leader_since,
                _ => None,
            };
            let was = self
                .groups
                .get(&g)
                .map(|(_, was)| (was.leader, was.leader_changes));
            st.leader_changes = match was {
                Some((leader, n)) => n + u64::from(st.leader != 0 && st.leader != leader),
                None => u64::from(st.leader != 0),
            };
            if st.is_leader && st.leader_since.is_none() {
                st.leader_since = Some(wall);
            }
            self.groups.insert(g, (quiet, st));
        }
        let groups: Vec<GroupStatus> = self.groups.values().map(|(_, st)| st.clone()).collect();
        Some(StatusUpdate {
            groups: Arc::new(groups),
            refused: engine.refused,
        })
    }
}

fn group_status(engine: &Engine, g: u64) -> GroupStatus {
    let (term, leader) = engine.leader(g).unwrap_or((0, 0));
    let ri = engine.raft_info(g).unwrap_or_default();
    GroupStatus {
        vote: ri.vote,
        last_index: ri.last_index,
        last_term: ri.last_term,
        progress: ri.progress,
        active: ri.active,
        group: g,
        leader,
        term,
        is_leader: engine.is_leader(g),
        committed: engine.committed(g).unwrap_or(0),
        applied: engine.applied(g).unwrap_or(0),
        voters: engine.voters(g).unwrap_or_default(),
        learners: engine.learners(g).unwrap_or_default(),
        damaged: engine.is_damaged(g),
        leader_since: None,
        leader_changes: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use store::MemDir;

    const TICK: Duration = Duration::from_millis(10);
    const G: u64 = 7;

    /// One single-voter node driven on this thread as `cluster::node`
    /// drives it, its sync and rewrite threads run by hand.
    struct Driver {
        core: NodeCore,
        now: Duration,
        /// What the state machine heard, restored snapshots included.
        heard: Vec<Event>,
        jobs: Vec<SyncJob>,
        runs: Vec<(u64, RewriteJob)>,
        freed: usize,
        notes: Vec<String>,
        wants: Vec<Want>,
        answer: fn(&Want) -> Snapshot,
    }

    impl Driver {
        fn new(dir: &MemDir, compact: Option<CompactPolicy>) -> Driver {
            let engine = Engine::new(1, Arc::new(dir.clone()), 1);
            let cfg = Config {
                tick: TICK,
                compact,
            };
            Driver {
                core: NodeCore::new(engine, cfg, Duration::ZERO),
                now: Duration::ZERO,
                heard: Vec::new(),
                jobs: Vec::new(),
                runs: Vec::new(),
                freed: 0,
                notes: Vec::new(),
                wants: Vec::new(),
                answer: |w| Snapshot::Now(w.index.to_le_bytes().to_vec()),
            }
        }

        fn carry(&mut self, a: Actions) {
            self.jobs.extend(a.sync);
            for r in a.rewrites {
                match r {
                    Rewrite::Run(g, job) => self.runs.push((g, job)),
                    Rewrite::Free(old) => {
                        drop(old);
                        self.freed += 1;
                    }
                }
            }
            self.heard.extend(a.restored);
            self.heard.extend(a.events);
            self.notes.extend(a.notes.iter().map(Note::to_string));
        }

        fn input(&mut self, i: Input) {
            self.core.handle(i);
            let a = self.core.poll();
            self.carry(a);
        }

        /// One cycle after the inputs: a tick, the Ready, the wants.
        fn cycle(&mut self) {
            self.now += TICK;
            self.core.handle_timeout(self.now);
            let a = self.core.ready();
            self.carry(a);
            for w in self.core.poll_snapshots() {
                self.wants.push(w);
                let answer = (self.answer)(&w);
                self.core.handle_snapshot(w, answer);
            }
            let a = self.core.poll();
            self.carry(a);
        }

        /// The sync thread runs every job queued and reports the last.
        fn sync(&mut self) {
            let Some(last) = self.jobs.last().map(|j| j.epoch) else {
                return;
            };
            for h in std::mem::take(&mut self.jobs)
                .into_iter()
                .flat_map(|j| j.handles)
            {
                h.sync().unwrap();
            }
            self.input(Input::Synced(last));
        }

        /// The rewrite thread runs every job queued.
        fn rewrite(&mut self) {
            for (group, job) in std::mem::take(&mut self.runs) {
                let done = job.run();
                self.input(Input::Rewritten { group, done });
            }
        }

        fn cycles(&mut self, n: usize) {
            for _ in 0..n {
                self.cycle();
                self.sync();
                self.rewrite();
            }
        }

        /// A node over a new directory that leads group `G`.
        fn leading(compact: Option<CompactPolicy>) -> (MemDir, Driver) {
            let dir = MemDir::new();
            let mut d = Driver::new(&dir, compact);
            d.lead();
            (dir, d)
        }

        fn lead(&mut self) {
            self.core.create_group(G, &[1]).unwrap();
            for _ in 0..100 {
                if self.core.engine().is_leader(G) {
                    return;
                }
                self.cycles(1);
            }
            panic!("no leader");
        }

        /// The entries the state machine applied, as their first byte.
        fn applied(&self) -> Vec<u8> {
            self.heard
                .iter()
                .filter_map(|e| match e {
                    Event::Committed(c) => Some(c.data[0]),
                    Event::Snapshot(_) | Event::Dropped { .. } => None,
                })
                .collect()
        }

        fn last_index(&self) -> u64 {
            self.core.engine().raft_info(G).unwrap().last_index
        }
    }

    /// An entry big enough that a compacted journal is rewritten.
    fn big(v: u8) -> Vec<u8> {
        let mut e = vec![v];
        e.resize(16 * 1024, 0);
        e
    }

    /// Submits a group does not take go back to their owner, in order,
    /// never applied: here a group this server does not run, then an
    /// entry over the log's limit next to one that fits.
    #[test]
    fn submits_not_proposed_come_back_as_dropped() {
        let (_dir, mut d) = Driver::leading(None);
        for v in [5u8, 6] {
            d.input(Input::Submit {
                group: G + 1,
                data: vec![v],
            });
        }
        let big = vec![9u8; crate::engine::MAX_ENTRY_DATA + 1];
        d.input(Input::Submit {
            group: G,
            data: big.clone(),
        });
        d.input(Input::Submit {
            group: G,
            data: vec![7],
        });
        d.cycles(3);
        let dropped: Vec<(u64, Vec<Bytes>)> = d
            .heard
            .iter()
            .filter_map(|e| match e {
                Event::Dropped { group, data } => Some((*group, data.clone())),
                _ => None,
            })
            .collect();
        assert_eq!(
            dropped,
            [
                (G, vec![Bytes::from(big)]),
                (G + 1, vec![Bytes::from(vec![5u8]), Bytes::from(vec![6u8])]),
            ]
        );
        assert_eq!(d.applied(), vec![7], "what fits is proposed");
    }

    #[test]
    fn submits_wait_for_the_next_input_and_keep_their_place() {
        let (_dir, mut d) = Driver::leading(None);
        let before = d.last_index();
        d.input(Input::Submit {
            group: G,
            data: vec![1],
        });
        d.input(Input::Submit {
            group: G,
            data: vec![2],
        });
        assert_eq!(d.last_index(), before, "submits wait");
        d.core.propose(G, vec![3]).unwrap();
        assert_eq!(d.last_index(), before + 3, "submitted first, then proposed");
        d.input(Input::Submit {
            group: G,
            data: vec![4],
        });
        d.cycles(3);
        assert_eq!(d.applied(), vec![1, 2, 3, 4]);
    }

    #[test]
    fn a_replaced_file_is_freed_once_the_syncs_that_may_hold_it_ran() {
        let (_dir, mut d) = Driver::leading(Some(Box::new(|_, since| since >= 10)));
        for v in 1..=25u8 {
            d.core.propose(G, big(v)).unwrap();
            d.cycle();
            d.sync();
        }
        assert!(!d.runs.is_empty(), "a compaction asked for a rewrite");
        assert!(d.wants.iter().all(|w| w.group == G && w.index > w.stored));
        // A sync job handed out, not yet run, when the rewrite is swapped
        // in: the old file waits for it.
        d.core.propose(G, vec![99]).unwrap();
        d.cycle();
        assert!(!d.jobs.is_empty());
        d.rewrite();
        assert!(
            d.notes.iter().any(|n| n.contains("rewritten")),
            "{:?}",
            d.notes
        );
        assert_eq!(d.freed, 0, "freed before its epochs synced");
        d.sync();
        assert!(d.freed > 0, "freed once they did");
    }

    #[test]
    fn a_restart_hands_the_snapshot_before_the_entries_after_it() {
        let (dir, mut d) = Driver::leading(Some(Box::new(|_, since| since >= 10)));
        // Entries big enough that the compacted journal is rewritten, so
        // the snapshot is what the log holds of them.
        for v in 1..=30u8 {
            d.core.propose(G, big(v)).unwrap();
            d.cycles(1);
        }
        d.cycles(3);
        let at = d.core.engine().snapshot_index(G).unwrap();
        assert!(at > 1, "compacted: {at}");
        drop(d);
        let mut d = Driver::new(&dir, None);
        assert_eq!(d.core.restart_group(G, &[]).unwrap(), vec![1]);
        let a = d.core.poll();
        assert!(a.events.is_empty() && a.restored.len() == 1);
        d.carry(a);
        for _ in 0..100 {
            d.cycles(1);
            if d.applied().last() == Some(&30) {
                break;
            }
        }
        let Event::Snapshot(s) = &d.heard[0] else {
            panic!("{:?}", d.heard[0]);
        };
        assert_eq!(s.data.as_ref(), &s.index.to_le_bytes());
        let indexes: Vec<u64> = d.heard[1..]
            .iter()
            .map(|e| match e {
                Event::Committed(c) => c.index,
                Event::Snapshot(s) => panic!("a second snapshot at {}", s.index),
                Event::Dropped { .. } => panic!("nothing was submitted"),
            })
            .collect();
        let want: Vec<u64> = (s.index + 1..s.index + 1 + indexes.len() as u64).collect();
        assert_eq!(indexes, want, "every entry after the snapshot, in order");
        assert_eq!(d.applied().last(), Some(&30));
    }

    #[test]
    fn a_snapshot_asked_for_is_not_asked_again_until_taken() {
        let dir = MemDir::new();
        let mut d = Driver::new(&dir, Some(Box::new(|_, since| since >= 5)));
        d.answer = |_| Snapshot::Asked;
        d.lead();
        for v in 1..=20u8 {
            d.core.propose(G, vec![v]).unwrap();
            d.cycles(1);
        }
        assert_eq!(d.wants.len(), 1, "{:?}", d.wants);
        let w = d.wants[0];
        d.input(Input::SnapshotTaken {
            group: G,
            index: w.index,
            data: vec![],
        });
        assert_eq!(d.core.engine().snapshot_index(G), Some(w.index));
        for v in 21..=40u8 {
            d.core.propose(G, vec![v]).unwrap();
            d.cycles(1);
        }
        assert_eq!(d.wants.len(), 2, "asked again once taken: {:?}", d.wants);
    }

    /// An answer that never comes (the store's sync failed, the replica
    /// was replaced) does not stop the group's compaction for good: it is
    /// asked again once [`ASK_AGAIN`] has passed.
    #[test]
    fn a_snapshot_never_taken_is_asked_for_again() {
        let dir = MemDir::new();
        let mut d = Driver::new(&dir, Some(Box::new(|_, since| since >= 5)));
        d.answer = |_| Snapshot::Asked;
        d.lead();
        for v in 1..=20u8 {
            d.core.propose(G, vec![v]).unwrap();
            d.cycles(1);
        }
        assert_eq!(d.wants.len(), 1, "{:?}", d.wants);
        d.now += ASK_AGAIN;
        for v in 21..=22u8 {
            d.core.propose(G, vec![v]).unwrap();
            d.cycles(1);
        }
        assert_eq!(d.wants.len(), 2, "asked again: {:?}", d.wants);
        assert!(d.wants[1].index > d.wants[0].index);
    }

    /// A state machine keeps, for a restart, what it needs to reopen at
    /// the snapshot a want names as stored. That is where the log reopens:
    /// a compaction behind small entries (no rewrite due) is journaled,
    /// and named once synced.
    #[test]
    fn a_want_names_the_snapshot_a_restart_opens_at() {
        let (dir, mut d) = Driver::leading(Some(Box::new(|_, since| since >= 5)));
        for v in 1..=20u8 {
            d.core.propose(G, vec![v]).unwrap();
            d.cycles(1);
        }
        assert!(d.runs.is_empty(), "no rewrite: the journal is small");
        assert!(d.wants.len() >= 3, "{:?}", d.wants);
        for pair in d.wants.windows(2) {
            assert_eq!(pair[1].stored, pair[0].index, "{:?}", d.wants);
        }
        let last = d.core.engine().snapshot_index(G).unwrap();
        let previous = d.wants[d.wants.len() - 2].index;
        assert_eq!(
            d.core.engine().durable_snapshot_index(G),
            Some(previous),
            "not named before a sync covers it"
        );
        d.core.propose(G, vec![21]).unwrap();
        d.cycles(1);
        assert_eq!(d.core.engine().durable_snapshot_index(G), Some(last));
        drop(d);
        dir.crash(0);
        let mut d = Driver::new(&dir, None);
        d.core.restart_group(G, &[]).unwrap();
        let a = d.core.poll();
        let [Event::Snapshot(s)] = &a.restored[..] else {
            panic!("{:?}", a.restored);
        };
        assert_eq!(s.index, last, "reopened at the last compaction");
    }

    /// A snapshot ahead of the log's commit index (a replica retargeted
    /// while catching up) is not dropped: the log is compacted behind it
    /// once it commits that far, so a restart opens at it.
    #[test]
    fn a_snapshot_past_what_was_handed_out_is_taken_later() {
        let (_dir, mut d) = Driver::leading(None);
        for v in 1..=5u8 {
            d.core.propose(G, vec![v]).unwrap();
            d.cycles(1);
        }
        let commit = d.core.engine().applied(G).unwrap();
        let ahead = commit + 3;
        d.input(Input::SnapshotTaken {
            group: G,
            index: ahead,
            data: b"ahead".to_vec(),
        });
        assert!(d.core.engine().snapshot_index(G).unwrap() < ahead);
        for v in 6..=10u8 {
            d.core.propose(G, vec![v]).unwrap();
            d.cycles(1);
        }
        let (index, data) = d.core.engine().snapshot(G).unwrap();
        assert_eq!(index, ahead, "compacted once committed that far");
        assert_eq!(&data[..], b"ahead");
    }

    #[test]
    fn the_status_is_published_when_something_moved_and_not_more_often() {
        let (_dir, mut d) = Driver::leading(None);
        let now = d.now;
        let first = d.core.poll_status(now, 1_000).expect("a first status");
        let g = &first.groups[0];
        assert!(g.is_leader);
        assert_eq!(g.leader_since, Some(1_000));
        assert!(d.core.poll_status(now, 2_000).is_none(), "not stale yet");
        d.core.propose(G, vec![1]).unwrap();
        d.cycles(2);
        let later = d.now.max(now + STATUS_EVERY);
        let again = d.core.poll_status(later, 3_000).expect("moved and stale");
        assert_eq!(again.groups[0].leader_since, Some(1_000), "the same term");
        assert!(again.groups[0].applied > g.applied);
        assert!(
            d.core.poll_status(later + STATUS_EVERY, 4_000).is_none(),
            "nothing moved"
        );
    }

    #[test]
    #[should_panic(expected = "twice, or out of order")]
    fn an_epoch_is_synced_once() {
        let (_dir, mut d) = Driver::leading(None);
        d.core.propose(G, vec![1]).unwrap();
        d.cycle();
        let epoch = d.jobs.last().unwrap().epoch;
        d.sync();
        d.input(Input::Synced(epoch));
    }

    #[test]
    #[should_panic(expected = "only")]
    fn an_epoch_synced_was_handed_out() {
        let (_dir, mut d) = Driver::leading(None);
        let epoch = d.core.handed_out;
        d.input(Input::Synced(epoch + 1));
    }

    #[test]
    #[should_panic(expected = "in the middle of a cycle")]
    fn a_ready_is_carried_out_before_the_next_input() {
        let (_dir, mut d) = Driver::leading(None);
        let a = d.core.ready();
        d.carry(a);
        d.input(Input::SyncFailed);
    }

    #[test]
    #[should_panic(expected = "actions were polled")]
    fn an_inputs_actions_are_polled_before_the_next() {
        let (_dir, mut d) = Driver::leading(None);
        d.core.propose(G, vec![1]).unwrap();
        d.cycles(2);
        let index = d.core.engine().applied(G).unwrap();
        d.core.handle(Input::SnapshotTaken {
            group: G,
            index,
            data: vec![],
        });
        d.core.handle(Input::SyncFailed);
    }
}
