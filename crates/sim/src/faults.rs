//! The seeded faults: partitions, crashes (unsynced writes lost, the
//! last write torn), bit flips in a stopped server's files, and the
//! scripted faults the incident tests call.

use crate::world::log_files;
use crate::{groups, Config, Sim, Violation, GROUP};
use replication::engine::Engine;

/// Fault rates, in parts per thousand per opportunity.
#[derive(Debug, Clone, Copy)]
pub struct Faults {
    pub drop: u64,
    pub duplicate: u64,
    pub corrupt: u64,
    /// Largest extra delay of a frame, in steps (reordering).
    pub max_delay: u64,
    /// Per step: start a partition (one server cut off, or a one-way cut).
    pub partition: u64,
    /// Per step: heal all partitions.
    pub heal: u64,
    /// Per server per step: crash.
    pub crash: u64,
    /// Per crash: flip a bit in the crashed server's log.
    pub bit_flip: u64,
    /// Per running server per step, in the stream modes: flip a bit in
    /// the newest segment of one of its replicas' stores, under the
    /// running replica. A read finds it, and the replica repairs its
    /// store from the leader (`repair.rs`, `Sim::repair_round`).
    pub store_flip: u64,
    /// Per server per step: the syncs it has queued wait for a later
    /// step (a slow disk), while its engine goes on.
    pub slow_sync: u64,
}

impl Faults {
    pub fn none() -> Faults {
        Faults {
            drop: 0,
            duplicate: 0,
            corrupt: 0,
            max_delay: 0,
            partition: 0,
            heal: 0,
            crash: 0,
            bit_flip: 0,
            store_flip: 0,
            slow_sync: 0,
        }
    }

    pub fn random() -> Faults {
        Faults {
            drop: 20,
            duplicate: 10,
            corrupt: 5,
            max_delay: 3,
            partition: 4,
            heal: 30,
            crash: 2,
            bit_flip: 100,
            store_flip: 2,
            slow_sync: 400,
        }
    }
}

impl Sim {
    /// Cuts server `id` off from every other, both ways.
    pub fn isolate(&mut self, id: u64) {
        for other in 1..=self.servers.len() as u64 {
            if other != id {
                self.cut.insert((id, other));
                self.cut.insert((other, id));
            }
        }
    }

    /// Crashes server `id` (unsynced bytes lost, `torn` bytes of them
    /// kept as a torn write); it restarts after a few steps.
    pub fn power_loss(&mut self, id: u64, torn: usize) {
        let s = &mut self.servers[id as usize - 1];
        s.crash(torn);
        s.down_for = 5;
        self.report.crashes += 1;
    }

    /// Flips one bit in the middle of the log of a server that is down.
    pub fn flip_bit_in_log(&mut self, id: u64) {
        let s = &mut self.servers[id as usize - 1];
        assert!(!s.is_up(), "flip bits in a stopped server's files");
        for name in log_files(&s.dir) {
            let len = s.dir.file_len(&name);
            if len > 0 {
                s.dir.flip_bit(&name, len / 2, 5);
                s.flipped = true;
                self.report.bit_flips += 1;
            }
        }
    }

    /// Two code paths restart server `id`'s node of the group at once, as
    /// an aborted catch-up and a meta snapshot did in incident 5: one
    /// (re)creates it, the other removes and creates it. With the registry
    /// the loser's create is refused; there is never a second node.
    pub fn restart_group_concurrently(&mut self, id: u64) {
        let voters: Vec<u64> = (1..=self.servers.len() as u64).collect();
        let Some(node) = self.servers[id as usize - 1].node.as_mut() else {
            return;
        };
        let e = node.call();
        // Path B: the meta snapshot wants the group to exist.
        let _ = e.create_group(GROUP, &voters);
        // Path A: the aborted catch-up restarts it.
        let _ = e.remove_group(GROUP);
        let _ = e.create_group(GROUP, &voters);
    }

    /// Cuts the link from server `from` to server `to`, one way.
    pub fn cut_one_way(&mut self, from: u64, to: u64) {
        self.cut.insert((from, to));
    }

    /// Heals every partition (scripted; random faults may cut again).
    pub fn heal(&mut self) {
        self.cut.clear();
    }

    /// This step's faults: partitions, then each server's restart, crash
    /// or flip, in server order.
    pub(crate) fn process_faults(&mut self, f: &Faults) -> Result<(), Violation> {
        self.partition_faults(f);
        // Storage faults stay within what Raft can survive: at most a
        // minority of replicas damaged at once (as TigerBeetle's simulator
        // bounds its faults). A damaged majority cannot tell which entries
        // were committed; that is a loss no protocol recovers from.
        let f_max = (self.servers.len() - 1) / 2;
        for i in 0..self.servers.len() {
            let damaged = self.damaged_servers();
            let s = &mut self.servers[i];
            if s.engine().is_some_and(|e| !is_damaged(&self.cfg, e)) {
                s.flipped = false;
            }
            if !s.is_up() {
                match s.down_for {
                    0 => self.restart(i)?,
                    _ => s.down_for -= 1,
                }
                continue;
            }
            if self.rng.chance(f.crash) {
                self.crash(i, f, damaged < f_max);
            } else if f.store_flip > 0
                && !s.stores.is_empty()
                && damaged < f_max
                && self.rng.chance(f.store_flip)
            {
                self.flip_bit_in_store(i);
            }
        }
        Ok(())
    }

    /// Maybe cuts a server off (both ways) or one link (one way), and
    /// maybe heals every cut.
    fn partition_faults(&mut self, f: &Faults) {
        let n = self.servers.len() as u64;
        if self.rng.chance(f.partition) {
            let a = 1 + self.rng.below(n);
            if self.rng.chance(500) {
                // Isolate one server both ways.
                for b in 1..=n {
                    if b != a {
                        self.cut.insert((a, b));
                        self.cut.insert((b, a));
                    }
                }
            } else {
                let b = 1 + self.rng.below(n);
                if a != b {
                    self.cut.insert((a, b));
                }
            }
            self.event(1000 + a);
        }
        if self.rng.chance(f.heal) && !self.cut.is_empty() {
            self.cut.clear();
            self.event(2000);
        }
    }

    /// Servers whose storage is damaged: a flipped log, a damaged engine,
    /// a replica fetching or holding a flip no read has met.
    fn damaged_servers(&self) -> usize {
        self.servers
            .iter()
            .filter(|s| {
                s.flipped
                    || s.engine().is_some_and(|e| is_damaged(&self.cfg, e))
                    || s.stores.values().any(|rs| rs.is_fetching() || rs.flipped)
            })
            .count()
    }

    /// Crashes server `i` (tearing its last writes) for a while, and,
    /// when `may_damage`, maybe flips a bit in its files while it is down.
    pub(crate) fn crash(&mut self, i: usize, f: &Faults, may_damage: bool) {
        let s = &mut self.servers[i];
        let torn = self.rng.below(64) as usize;
        s.crash(torn);
        s.down_for = 1 + self.rng.below(40);
        self.report.crashes += 1;
        if may_damage && self.rng.chance(f.bit_flip) {
            // In the stream modes, half the flips land in a replica's
            // store (repaired by a fetch from the leader), the others in
            // the Raft log.
            let in_store = !s.stores.is_empty() && self.rng.chance(500);
            let dir = match in_store {
                true => {
                    let pick = self.rng.below(s.stores.len() as u64) as usize;
                    s.stores.values().nth(pick).expect("picked").dir.clone()
                }
                false => s.dir.clone(),
            };
            let mut names = log_files(&dir);
            if in_store {
                names.retain(|n| dir.file_len(n) > 0);
            }
            if let Some(name) = names.first() {
                let len = dir.file_len(name);
                if len > 0 {
                    let at = self.rng.below(len as u64) as usize;
                    let bit = self.rng.below(8) as u8;
                    dir.flip_bit(name, at, bit);
                    s.flipped = true;
                    self.report.bit_flips += 1;
                }
            }
        }
        let id = s.id;
        self.event(4000 + id);
    }
}

pub(crate) fn is_damaged(cfg: &Config, e: &Engine) -> bool {
    groups(cfg).iter().any(|&g| e.is_damaged(g))
}
