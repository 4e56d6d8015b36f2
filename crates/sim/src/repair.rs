//! Bits flipped under running stream replicas, and the repair that
//! follows, as the server's replica task does it
//! (`server::jscluster::replica::repair`): a replica whose store a read
//! found damaged (`MsgStore::damage`) is held from leading, hands its
//! leadership on, opens its store again at its log's snapshot, fetches
//! what that lacks from the leader (`replica`), and applies its log's
//! entries since the snapshot again, unanswered.

use crate::replica::{machine, reopen};
use crate::{stream_of, Sim, Violation};
use replication::engine::Engine;
use replication::rng::Rng;

impl Sim {
    /// Flips one bit in the newest segment of one of server `i`'s replica
    /// stores, while the replica runs. The newest messages are the ones
    /// still to be read, so a read is likely to find it.
    pub(crate) fn flip_bit_in_store(&mut self, i: usize) {
        let s = &mut self.servers[i];
        if s.engine.is_none() || s.stores.is_empty() {
            return;
        }
        let pick = self.rng.below(s.stores.len() as u64) as usize;
        let group = *s.stores.keys().nth(pick).expect("picked");
        if machine(s, group).is_none() {
            // Fetching: the fetch checks its store whole when done.
            return;
        }
        let rs = s.stores.get_mut(&group).expect("picked");
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
            s.engine.is_some()
                && [&s.wq, &s.agg]
                    .into_iter()
                    .flatten()
                    .any(|m| m.stream().store().damage().is_some())
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
                .any(|s| s.stores.values().any(|rs| rs.fetching.is_some()));
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
        let n = self.servers.len() as u64;
        let s = &mut self.servers[i];
        let damaged = machine(s, group)
            .as_ref()
            .is_some_and(|m| m.stream().store().damage().is_some());
        if !damaged {
            return Ok(());
        }
        let Some(mut engine) = s.engine.take() else {
            return Ok(());
        };
        let applied = machine(s, group).as_ref().expect("damaged").applied();
        engine.hold(group, true).expect("the group is here");
        // The log goes on after its snapshot, an empty one too: a new
        // group's bootstrap, its membership at index 1.
        let after = engine.snapshot(group).map_or(0, |(index, _)| index);
        let log = engine
            .handed_out_after(group, after)
            .filter(|(reaches, _)| *reaches >= applied);
        let Some((_, entries)) = log else {
            s.engine = Some(engine);
            let id = s.id;
            return Err(self.violation(format!(
                "server {id}: group {group}'s store is damaged and its log no longer holds what it applied ({applied})"
            )));
        };
        step_down(&mut engine, group, s.id, n, &mut self.rng);
        *machine(s, group) = None;
        let cfg = &self.cfg;
        reopen(s, &mut engine, group, |store| stream_of(cfg, group, store));
        s.engine = Some(engine);
        self.report.store_repairs += 1;
        let id = s.id;
        self.event(4700 + id * 100 + group);
        for (index, data) in entries.into_iter().filter(|(index, _)| *index <= applied) {
            // A fetch keeps them until it is done (`apply_stream`).
            self.apply_stream(i, group, false, index, &data)?;
        }
        let s = &mut self.servers[i];
        let fetching = s.stores.get(&group).is_some_and(|rs| rs.fetching.is_some());
        if !fetching {
            debug_assert!(
                machine(s, group)
                    .as_ref()
                    .is_some_and(|m| m.applied() >= applied),
                "a repaired replica is where it was"
            );
            let engine = s.engine.as_mut().expect("running");
            engine.hold(group, false).expect("the group is here");
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
