//! Each live server's Raft node: the core `cluster::node` runs
//! (`replication::node::NodeCore`), driven by its contract on the
//! simulator's thread, with the node's threads as seeded choices. The
//! sync thread runs a server's queued jobs now or in a later step (a slow
//! disk) while its node goes on; the rewrite thread writes and hands
//! back log rewrites now or later; a crash can land between a write and
//! its sync. What the node's events carry goes through the server's state
//! machines (its meta state, its stream replicas, the value client's
//! acknowledgements), as the server's apply hook and replica tasks take
//! them.

use std::sync::Arc;
use std::time::Duration;

use replication::engine::Engine;
use replication::frame::Frame;
use replication::node::{Actions, Event, Input, Note, Rewrite, Snapshot};
use store::MemDir;

use super::{restore_state, state_snapshot};
use crate::{mix, Config, Faults, Sim, Violation, GROUP, SOURCING_GROUP, STEP_MS};

/// Applied entries between snapshots in the stream and meta modes.
const COMPACT_EVERY: u64 = 150;

/// The nodes' clock at the start of `step`: a step is one tick. A node
/// made in a step starts at its start; the step's cycles run at its end,
/// so a node ticks in every step it runs, the first one included.
pub(crate) fn node_clock(step: u64) -> Duration {
    Duration::from_millis(step * STEP_MS)
}

/// What a replica sends its node (as the server's replica task does,
/// through the node's channel): kept while the node is in a cycle.
pub(crate) enum Deferred {
    /// A snapshot the node asked for (`Node::snapshot_taken`).
    SnapshotTaken {
        group: u64,
        index: u64,
        data: Vec<u8>,
    },
    /// Hold the group from leading, or let it lead again.
    Hold(u64, bool),
    /// Hand the group's leadership on.
    StepDown(u64),
}

impl Config {
    /// A server's engine, with this run's test-only settings.
    pub(crate) fn engine(&self, id: u64, dir: &MemDir, seed: u64) -> Engine {
        let mut e = Engine::new(id, Arc::new(dir.clone()), seed);
        e.unsafe_ack_before_sync = self.unsafe_ack_before_sync;
        e.unsafe_no_pre_vote = self.unsafe_no_pre_vote;
        e.unsafe_skip_frame_checksum = self.unsafe_skip_frame_checksum;
        e.unsafe_no_registry = self.unsafe_no_registry;
        if let Some(c) = self.chunk_size {
            e.chunk_size = c;
        }
        e
    }

    /// A server's node: a tick a step; in the stream and meta modes a
    /// server bounds its logs, snapshotting every `COMPACT_EVERY` entries.
    pub(crate) fn node(&self) -> replication::node::Config {
        let compacts = self.work_queue || self.publish_ids || self.meta;
        replication::node::Config {
            tick: Duration::from_millis(STEP_MS),
            compact: compacts.then(|| {
                Box::new(|_, since| since >= COMPACT_EVERY) as replication::node::CompactPolicy
            }),
        }
    }
}

impl Sim {
    /// Every live node's tick, once a step, after the step's inputs.
    pub(crate) fn tick_nodes(&mut self) {
        let now = node_clock(self.step + 1);
        for s in self.servers.iter_mut().filter(|s| s.is_up()) {
            s.node().handle_timeout(now);
            self.report.quiet_steps += s.engine().expect("up").quiet_groups() as u64;
        }
    }

    /// Runs every live node's cycle.
    pub(crate) fn drive(&mut self, f: &Faults) -> Result<(), Violation> {
        for i in 0..self.servers.len() {
            if self.servers[i].is_up() {
                self.drive_one(i, f)?;
            }
        }
        Ok(())
    }

    /// One server's turn: a cycle, maybe a crash before its sync, maybe
    /// the sync (its report and the cycle after it), its rewrites, the
    /// snapshots its replicas were asked for; then its frames leave.
    fn drive_one(&mut self, i: usize, f: &Faults) -> Result<(), Violation> {
        let id = self.servers[i].id;
        let ready = self.ready(i);
        // A crash can land between the write and its sync.
        if !self.servers[i].syncing.is_empty() && self.rng.chance(f.crash / 2) {
            let s = &mut self.servers[i];
            s.crash(self.rng.below(64) as usize);
            s.down_for = 1 + self.rng.below(40);
            self.report.crashes += 1;
            self.event(6000 + id);
            // Frames already handed out may still leave.
            self.send(id, ready.frames, f);
            return Ok(());
        }
        let mut frames = Vec::new();
        self.end_cycle(i, ready, &mut frames)?;
        // The sync thread finishes now or in a later step; the node goes
        // on meanwhile, and what waits for the disk waits.
        if !self.servers[i].syncing.is_empty() && !self.rng.chance(f.slow_sync) {
            self.sync_now(i, &mut frames)?;
        }
        self.rewrite_some(i)?;
        for want in std::mem::take(&mut self.servers[i].snapshots_asked) {
            self.with_replica(i, want.group, |r, clock| {
                r.handle_take_snapshot(want.index, want.stored, clock)
            })?;
        }
        self.send(id, frames, f);
        Ok(())
    }

    /// A cycle's Ready, its sync job queued for the sync thread.
    fn ready(&mut self, i: usize) -> Actions {
        let now = node_clock(self.step + 1);
        let s = &mut self.servers[i];
        s.node().handle_timeout(now);
        let mut ready = s.node().ready();
        s.syncing.extend(ready.sync.take());
        s.cycling = true;
        ready
    }

    /// The rest of a cycle: the Ready carried out, the snapshot wants
    /// answered (a stream replica's later, as `Snapshot::Asked`), the
    /// status published; then what replicas sent meanwhile.
    fn end_cycle(
        &mut self,
        i: usize,
        ready: Actions,
        frames: &mut Vec<(u64, Frame)>,
    ) -> Result<(), Violation> {
        self.carry_out(i, ready, frames)?;
        let s = &mut self.servers[i];
        for want in s.node().poll_snapshots() {
            let answer = match s.stores.contains_key(&want.group) {
                true => {
                    s.snapshots_asked.push(want);
                    Snapshot::Asked
                }
                false => Snapshot::Now(state_snapshot(&self.cfg, s, want.group)),
            };
            s.node().handle_snapshot(want, answer);
        }
        let a = s.node().poll();
        self.carry_out(i, a, frames)?;
        let (now, wall) = (node_clock(self.step + 1), self.now());
        let s = &mut self.servers[i];
        s.cycling = false;
        // What monitoring would show; its making runs here as on a server.
        let _ = s.node().poll_status(now, wall);
        self.deliver_inbox(i)
    }

    /// Server `i`'s sync thread runs every job queued and reports the
    /// last epoch; a cycle follows.
    fn sync_now(&mut self, i: usize, frames: &mut Vec<(u64, Frame)>) -> Result<(), Violation> {
        let queued = std::mem::take(&mut self.servers[i].syncing);
        let last = queued.last().map(|job| job.epoch).expect("not empty");
        for h in queued.into_iter().flat_map(|job| job.handles) {
            h.sync().expect("memory dir syncs");
        }
        self.input(i, Input::Synced(last), frames)?;
        let ready = self.ready(i);
        self.end_cycle(i, ready, frames)
    }

    /// Feeds server `i`'s node an input and carries out what it asks.
    fn input(
        &mut self,
        i: usize,
        input: Input,
        frames: &mut Vec<(u64, Frame)>,
    ) -> Result<(), Violation> {
        let node = self.servers[i].node();
        node.handle(input);
        let a = node.poll();
        self.carry_out(i, a, frames)
    }

    /// Does what a node's actions ask (but for a Ready's sync job, queued
    /// by `ready`): rewrites to the rewrite thread, replaced files
    /// dropped, frames gathered to send, events through the state
    /// machines, confirmed reads queued.
    pub(crate) fn carry_out(
        &mut self,
        i: usize,
        a: Actions,
        frames: &mut Vec<(u64, Frame)>,
    ) -> Result<(), Violation> {
        debug_assert!(a.sync.is_none(), "queued by `ready`");
        for r in a.rewrites {
            match r {
                Rewrite::Run(g, job) => self.servers[i].rewrites.push((g, job)),
                Rewrite::Free(old) => drop(old),
            }
        }
        frames.extend(a.frames);
        let applies = !(a.restored.is_empty() && a.events.is_empty() && a.reads.is_empty());
        for ev in a.restored.into_iter().chain(a.events) {
            self.apply_event(i, ev)?;
        }
        for (_, _, index) in a.reads.iter().filter(|r| r.0 == GROUP) {
            self.reads_waiting.push((i, *index));
        }
        for note in a.notes {
            match note {
                Note::Compacted { .. } => self.report.compactions += 1,
                Note::Swapped { group } => {
                    self.report.rewrites += 1;
                    // A crash now must find in the new file every entry
                    // the engine counts as persisted.
                    self.check_durable(i, group)?;
                }
                Note::CompactFailed { .. } | Note::RewriteFailed { .. } => {}
            }
        }
        match applies {
            true => self.serve_reads(i),
            false => Ok(()),
        }
    }

    /// One event through server `i`'s state machines: its meta state, a
    /// stream replica, or (value mode) the client's acknowledgements.
    fn apply_event(&mut self, i: usize, ev: Event) -> Result<(), Violation> {
        let c = match ev {
            // The simulated clients time their requests out and retry,
            // whether a submit was dropped here or lost later.
            Event::Dropped { .. } => return Ok(()),
            Event::Snapshot(c) => {
                if !self.servers[i].stores.contains_key(&c.group) {
                    restore_state(&self.cfg, &mut self.servers[i], c.group, &c.data);
                    return Ok(());
                }
                return match c.data.is_empty() {
                    // A new group's bootstrap: a new replica.
                    true => self.open_replica(i, c.group, None),
                    // A stream's snapshot is its state: the messages are
                    // fetched.
                    false => self.with_replica(i, c.group, |r, clock| {
                        r.handle_snapshot(c.index, c.data, clock)
                    }),
                };
            }
            Event::Committed(c) => c,
        };
        if self.cfg.meta {
            let _ = self.servers[i].meta.apply(c.index, &c.data);
        }
        let e = self.servers[i].engine().expect("up");
        let leader = e.is_leader(GROUP);
        let led = match c.group == SOURCING_GROUP {
            true => e.is_leader(SOURCING_GROUP),
            false => leader,
        };
        if self.cfg.work_queue || self.cfg.publish_ids {
            self.apply_stream(i, c.group, led, c.index, &c.data)?;
        }
        self.ack_values(leader, &c)
    }

    /// What a replica sends server `i`'s node: now, or once its cycle is
    /// over.
    pub(crate) fn send_to_node(&mut self, i: usize, d: Deferred) -> Result<(), Violation> {
        let s = &mut self.servers[i];
        if !s.is_up() {
            return Ok(());
        }
        s.inbox.push(d);
        match s.cycling {
            true => Ok(()),
            false => self.deliver_inbox(i),
        }
    }

    /// Feeds server `i`'s node what its replicas sent, in order.
    fn deliver_inbox(&mut self, i: usize) -> Result<(), Violation> {
        let mut frames = Vec::new();
        while !self.servers[i].inbox.is_empty() && self.servers[i].is_up() {
            let d = self.servers[i].inbox.remove(0);
            match d {
                Deferred::SnapshotTaken { group, index, data } => {
                    let input = Input::SnapshotTaken { group, index, data };
                    self.input(i, input, &mut frames)?;
                }
                Deferred::Hold(group, hold) => {
                    let s = &mut self.servers[i];
                    s.node()
                        .call()
                        .hold(group, hold)
                        .expect("the group is here");
                }
                Deferred::StepDown(group) => {
                    let n = self.servers.len() as u64;
                    let s = &mut self.servers[i];
                    let id = s.id;
                    crate::repair::step_down(s.node().call(), group, id, n, &mut self.rng);
                }
            }
        }
        debug_assert!(frames.is_empty(), "a replica's inputs send nothing");
        Ok(())
    }

    /// A live server's rewrite thread: now or in a later step, it writes
    /// the files of the rewrites queued, and now or later the node swaps
    /// the written ones in, while entries go on being appended and synced
    /// (and crashes land) in between. The rng is drawn only while there is
    /// a rewrite, so runs that have none are as they were.
    fn rewrite_some(&mut self, i: usize) -> Result<(), Violation> {
        let s = &mut self.servers[i];
        if !s.rewritten.is_empty() && self.rng.chance(500) {
            let mut frames = Vec::new();
            for (group, done) in std::mem::take(&mut self.servers[i].rewritten) {
                self.input(i, Input::Rewritten { group, done }, &mut frames)?;
            }
            debug_assert!(frames.is_empty(), "a rewrite sends nothing");
            let id = self.servers[i].id;
            self.report.trace = mix(self.report.trace, 7000 + id);
        }
        let s = &mut self.servers[i];
        if !s.rewrites.is_empty() && self.rng.chance(500) {
            for (g, job) in std::mem::take(&mut s.rewrites) {
                s.rewritten.push((g, job.run()));
            }
        }
        Ok(())
    }
}
