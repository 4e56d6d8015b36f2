//! Each live server's engine cycle: poll, sync (now or later), the
//! rewrites beside it, then what the outputs carry applied and sent.

use replication::engine::Output;
use store::Swap;

use super::{restore_state, state_snapshot, state_snapshot_index};
use crate::{groups, mix, Faults, Sim, Violation, GROUP, SOURCING_GROUP};

impl Sim {
    /// What a poll hands server `i` besides frames and entries:
    /// installed snapshots replace its state, wanted ones are taken, and
    /// sync handles queue for its sync thread.
    pub(crate) fn absorb(&mut self, i: usize, out: &mut Output) -> Result<(), Violation> {
        for c in &out.snapshots {
            if !self.servers[i].stores.contains_key(&c.group) {
                restore_state(&self.cfg, &mut self.servers[i], c.group, &c.data);
                continue;
            }
            self.servers[i].compacted_at.remove(&c.group);
            match c.data.is_empty() {
                // A new group's bootstrap: a new replica.
                true => self.open_replica(i, c.group, None)?,
                // A stream's snapshot is its state: the messages are
                // fetched.
                false => {
                    let (index, data) = (c.index, c.data.clone());
                    self.with_replica(i, c.group, |r, clock| {
                        r.handle_snapshot(index, data, clock)
                    })?;
                }
            }
        }
        for &g in &out.snapshot_wanted {
            let s = &mut self.servers[i];
            if s.stores.contains_key(&g) {
                let e = s.engine.as_ref().expect("up");
                let asked = (
                    g,
                    e.applied(g).unwrap_or(0),
                    e.snapshot_index(g).unwrap_or(0),
                );
                s.snapshots_asked.push(asked);
                continue;
            }
            let (index, data) = state_snapshot(s, g);
            let e = s.engine.as_mut().expect("up");
            let at = index.unwrap_or_else(|| e.applied(g).unwrap_or(0));
            s.compact(g, at, data);
        }
        if let Some(epoch) = out.epoch {
            let s = &mut self.servers[i];
            s.syncing.push((epoch, std::mem::take(&mut out.sync)));
        }
        Ok(())
    }

    /// A live server's rewrite thread: now or in a later step, it writes
    /// the files of the rewrites queued, and now or later the engine swaps
    /// the written ones in, while entries go on being appended and synced
    /// (and crashes land) in between. The rng is drawn only while there is
    /// a rewrite, so runs that have none are as they were.
    ///
    /// After a swap, a crash must find in the new file every entry the
    /// engine counts as persisted.
    fn rewrite_some(&mut self, i: usize) -> Result<(), Violation> {
        let s = &mut self.servers[i];
        if !s.rewritten.is_empty() && self.rng.chance(500) {
            let e = s.engine.as_mut().expect("still up");
            let mut swapped = Vec::new();
            for (g, done) in std::mem::take(&mut s.rewritten) {
                match e.rewritten(g, done) {
                    Ok(Swap::Done(_old)) => {
                        self.report.rewrites += 1;
                        swapped.push(g);
                    }
                    Ok(Swap::More(job)) => s.rewrites.push((g, job)),
                    Ok(Swap::Dropped) | Err(_) => {}
                }
            }
            self.report.trace = mix(self.report.trace, 7000 + s.id);
            for g in swapped {
                self.check_durable(i, g)?;
            }
        }
        let s = &mut self.servers[i];
        if !s.rewrites.is_empty() && self.rng.chance(500) {
            for (g, job) in std::mem::take(&mut s.rewrites) {
                s.rewritten.push((g, job.run()));
            }
        }
        Ok(())
    }

    /// Runs every live engine's poll → sync → persisted cycle.
    pub(crate) fn drive(&mut self, f: &Faults) -> Result<(), Violation> {
        for i in 0..self.servers.len() {
            if self.servers[i].engine.is_some() {
                self.drive_one(i, f)?;
            }
        }
        Ok(())
    }

    /// One server's cycle: poll, maybe a crash before the sync, maybe the
    /// sync (and a poll after it), its rewrites, then what the outputs
    /// carry is applied and sent.
    fn drive_one(&mut self, i: usize, f: &Faults) -> Result<(), Violation> {
        let e = self.servers[i].engine.as_mut().expect("up");
        let id = e.id();
        let mut out = e.poll();
        self.absorb(i, &mut out)?;
        let mut outputs = vec![out];
        // A crash can land between the write and its sync.
        if !self.servers[i].syncing.is_empty() && self.rng.chance(f.crash / 2) {
            let s = &mut self.servers[i];
            s.crash(self.rng.below(64) as usize);
            s.down_for = 1 + self.rng.below(40);
            self.report.crashes += 1;
            self.event(6000 + id);
            // Frames already handed out by poll may still leave.
            for o in outputs {
                self.send(id, o.frames, f);
            }
            return Ok(());
        }
        // The sync thread finishes now or in a later step; the engine
        // goes on meanwhile, and what waits for the disk waits.
        if !self.servers[i].syncing.is_empty() && !self.rng.chance(f.slow_sync) {
            outputs.extend(self.sync_now(i)?);
        }
        self.rewrite_some(i)?;
        let e = self.servers[i].engine.as_ref().expect("still up");
        let leader = e.is_leader(GROUP);
        self.apply_outputs(i, &outputs)?;
        for (g, index, stored) in std::mem::take(&mut self.servers[i].snapshots_asked) {
            self.with_replica(i, g, |r, clock| {
                r.handle_take_snapshot(index, stored, clock)
            })?;
        }
        self.compact_states(i)?;
        for o in outputs {
            self.ack_values(leader, &o)?;
            self.send(id, o.frames, f);
        }
        Ok(())
    }

    /// Server `i`'s sync thread runs every handle queued: the engine
    /// hears the last epoch, and polls again.
    fn sync_now(&mut self, i: usize) -> Result<[Output; 2], Violation> {
        let queued = std::mem::take(&mut self.servers[i].syncing);
        let last = queued.last().map(|(epoch, _)| *epoch).expect("not empty");
        for h in queued.into_iter().flat_map(|(_, hs)| hs) {
            h.sync().expect("memory dir syncs");
        }
        let e = self.servers[i].engine.as_mut().expect("still up");
        let synced = e.synced(last);
        let mut more = e.poll();
        self.absorb(i, &mut more)?;
        Ok([synced, more])
    }

    /// The committed entries of `outputs` applied to server `i`'s meta
    /// state or stream replicas, and its confirmed reads queued.
    fn apply_outputs(&mut self, i: usize, outputs: &[Output]) -> Result<(), Violation> {
        if self.cfg.meta {
            for c in outputs.iter().flat_map(|o| &o.committed) {
                let _ = self.servers[i].meta.apply(c.index, &c.data);
            }
        }
        if !(self.cfg.work_queue || self.cfg.publish_ids) {
            return Ok(());
        }
        let e = self.servers[i].engine.as_ref().expect("still up");
        let leader = e.is_leader(GROUP);
        let agg_leader = e.is_leader(SOURCING_GROUP);
        for o in outputs {
            for c in &o.committed {
                let led = match c.group == SOURCING_GROUP {
                    true => agg_leader,
                    false => leader,
                };
                self.apply_stream(i, c.group, led, c.index, &c.data)?;
            }
            for (_, _, index) in o.reads.iter().filter(|r| r.0 == GROUP) {
                self.reads_waiting.push((i, *index));
            }
        }
        self.serve_reads(i)
    }

    /// Stream and meta state is snapshotted now and then and the log
    /// compacted behind it, as a server bounds its logs.
    fn compact_states(&mut self, i: usize) -> Result<(), Violation> {
        if !(self.cfg.work_queue || self.cfg.publish_ids || self.cfg.meta) {
            return Ok(());
        }
        for &g in groups(&self.cfg) {
            let s = &mut self.servers[i];
            let index = state_snapshot_index(s, g);
            let since = index.saturating_sub(s.compacted_at.get(&g).copied().unwrap_or(0));
            if since < COMPACT_EVERY {
                continue;
            }
            if s.stores.contains_key(&g) {
                // Compacted when the replica's snapshot comes.
                self.snapshot_replica(i, g)?;
                continue;
            }
            if let (Some(index), data) = state_snapshot(s, g) {
                if s.compact(g, index, data) {
                    s.compacted_at.insert(g, index);
                    self.report.compactions += 1;
                }
            }
        }
        Ok(())
    }
}

/// Applied entries between snapshots in the stream and meta modes.
const COMPACT_EVERY: u64 = 150;
