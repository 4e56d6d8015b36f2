//! Bits flipped under running stream replicas, and the repair that
//! follows, as the server's replica task drives it
//! (`jsdriver::jscluster::replica::repair`; the replica core decides how,
//! `jsservice::replica`): a replica whose store a read found damaged
//! (`MsgStore::damage`) is held from leading, hands its leadership on,
//! opens its store again at its log's snapshot, fetches what that lacks
//! from the leader, and applies its log's entries since the snapshot
//! again, unanswered. While its log does not yet reach what it applied,
//! the repair waits (unheld) and is tried again the next step.

use crate::{Sim, Violation};
use jsservice::replica::LogTail;
use replication::engine::Engine;
use replication::rng::Rng;

impl Sim {
    /// Flips one bit in the newest segment of one of server `i`'s replica
    /// stores, while the replica runs. The newest messages are the ones
    /// still to be read, so a read is likely to find it.
    pub(crate) fn flip_bit_in_store(&mut self, i: usize) {
        let s = &mut self.servers[i];
        if !s.is_up() || s.stores.is_empty() {
            return;
        }
        let pick = self.rng.below(s.stores.len() as u64) as usize;
        let group = *s.stores.keys().nth(pick).expect("picked");
        let rs = s.stores.get_mut(&group).expect("picked");
        if rs.current().is_none() {
            // Fetching: the fetch checks its store whole when done.
            return;
        }
        let newest = rs
            .dir
            .names()
            .into_iter()
            .rfind(|n| n.ends_with(".blk") && rs.dir.file_len(n) > 0);
        let Some(name) = newest else {
            return;
        };
        let at = self.rng.below(rs.dir.file_len(&name) as u64) as usize;
        let bit = self.rng.below(8) as u8;
        rs.dir.flip_bit(&name, at, bit);
        rs.flipped = true;
        self.report.store_flips += 1;
        let id = self.servers[i].id;
        self.event(4500 + id * 100 + group);
    }

    /// Whether a running replica's store has damage a read found and no
    /// repair has taken yet.
    pub(crate) fn damage_found(&self) -> bool {
        self.servers.iter().any(|s| {
            s.is_up()
                && s.stores
                    .values()
                    .any(|rs| rs.replica.as_ref().is_some_and(|r| r.damage().is_some()))
        })
    }

    /// Repairs what reads found damaged, then runs quiet steps until every
    /// fetch this started is done (at most `steps`).
    pub(crate) fn repair_and_settle(&mut self, steps: u64) -> Result<(), Violation> {
        self.repair_round()?;
        for _ in 0..steps {
            let fetching = self
                .servers
                .iter()
                .any(|s| s.stores.values().any(|rs| rs.is_fetching()));
            if !fetching {
                break;
            }
            self.steps(1, false)?;
        }
        Ok(())
    }

    /// Repairs every running replica whose store a read found damaged.
    /// Called once per step, after the step's entries were applied: the
    /// damaged state is dropped whole, so what was applied over it in
    /// the meantime is applied again.
    pub(crate) fn repair_round(&mut self) -> Result<(), Violation> {
        if self.cfg.unsafe_no_store_repair {
            return Ok(());
        }
        for i in 0..self.servers.len() {
            let groups: Vec<u64> = self.servers[i].stores.keys().copied().collect();
            for group in groups {
                self.repair_one(i, group)?;
            }
        }
        Ok(())
    }

    fn repair_one(&mut self, i: usize, group: u64) -> Result<(), Violation> {
        let s = &mut self.servers[i];
        let rs = s.stores.get_mut(&group).expect("a store per stream group");
        let damaged = rs.replica.as_ref().is_some_and(|r| r.damage().is_some());
        let Some(node) = s.node.as_mut().filter(|_| damaged) else {
            return Ok(());
        };
        node.call().hold(group, true).expect("the group is here");
        let engine = node.engine();
        // The log goes on after its snapshot, an empty one too: a new
        // group's bootstrap, its membership at index 1.
        let snapshot = engine.snapshot(group);
        let after = snapshot.as_ref().map_or(0, |(index, _)| *index);
        let log = engine
            .handed_out_after(group, after)
            .map(|(reaches, entries)| LogTail {
                snapshot: snapshot.filter(|(_, d)| !d.is_empty()),
                reaches,
                entries,
            });
        let id = s.id;
        self.event(4700 + id * 100 + group);
        self.with_replica(i, group, |r, clock| r.repair(log, clock))?;
        // Still damaged: the repair waits for the log, and the flip still
        // counts toward the minority bound. Otherwise the store was
        // reopened (and a fetch counts while it runs).
        let rs = self.servers[i].stores.get_mut(&group).expect("a store");
        if rs.replica.as_ref().is_some_and(|r| r.damage().is_none()) {
            rs.flipped = false;
        }
        Ok(())
    }
}

/// A leader that cannot serve (its store is being repaired or fetched)
/// hands its leadership to another voter, picked at random; raft-rs gives
/// up a transfer to one that does not answer, and the caller tries again.
pub(crate) fn step_down(engine: &mut Engine, group: u64, me: u64, n: u64, rng: &mut Rng) {
    if !engine.is_leader(group) || n < 2 {
        return;
    }
    let mut to = 1 + rng.below(n - 1);
    if to >= me {
        to += 1;
    }
    let _ = engine.transfer_leader(group, to);
}
