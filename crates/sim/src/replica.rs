//! A server's stream replicas, run by the replica core the cluster driver
//! runs (`jsservice::replica`), each over a file store on a directory of
//! its own that crashes with its server. This module is the simulator's
//! driver of that core: it turns the core's events into inputs of its
//! server's node (`world::Deferred`) and into fetches from the leader's
//! store, one ask per replica per step, through the same faults as frames
//! (asks and replies are dropped, and replies corrupted, which loses only
//! time).

use std::sync::Arc;

use bytes::Bytes;
use jetstream::api::StreamConfig;
use jsservice::catchup::Ask;
use jsservice::fetch::{self, Reopened};
use jsservice::replica::{self, Clock, Event, Home, Replica, Start, Timing};
use jsservice::stream_sm::StreamMachine;
use store::{FileStore, FileStoreConfig, MemDir, MsgStore};

use crate::world::node::Deferred;
use crate::STEP_MS;
use crate::{stream_of, Config, Faults, Sim, Violation};

/// Small segments, so that removals empty and reclaim whole segments.
const SEGMENTS: FileStoreConfig = FileStoreConfig { segment_size: 4096 };
/// Bytes of messages a fetch's chunk carries: small, so a fetch takes
/// many steps and faults land in the middle of it.
const CHUNK: u64 = 200;
/// A fetch's waits, in steps: an ask without a reply goes out again after
/// five; "later", or a failed fetch, is tried again after three.
const TIMING: Timing = Timing {
    ask_again: 5 * STEP_MS,
    wait: 3 * STEP_MS,
    retry: 3 * STEP_MS,
};

/// One stream replica's store and what goes with it.
pub(crate) struct ReplicaStore {
    pub dir: MemDir,
    /// The replica, as its server last ran it (a crashed server's stays
    /// until the restart reopens it).
    pub replica: Option<Replica>,
    /// Asks sent and not yet carried: carried at the next fetch round.
    asks: Vec<Ask>,
    /// A bit was flipped under the running replica, and no repair has
    /// reopened its store since: counted among the damaged servers.
    pub flipped: bool,
}

impl ReplicaStore {
    pub fn new() -> ReplicaStore {
        ReplicaStore {
            dir: MemDir::new(),
            replica: None,
            asks: Vec::new(),
            flipped: false,
        }
    }

    /// The machine, unless the replica is fetching (or there is none).
    pub fn current(&self) -> Option<&StreamMachine> {
        self.replica.as_ref().and_then(Replica::current)
    }

    pub fn is_fetching(&self) -> bool {
        self.replica.as_ref().is_some_and(Replica::is_fetching)
    }
}

/// Where the simulator keeps a replica's store: a memory directory that
/// crashes with its server.
struct SimHome {
    dir: MemDir,
    cfg: Config,
    group: u64,
}

impl SimHome {
    fn empty_store(&self) -> Result<Box<dyn MsgStore>, String> {
        let dir = Arc::new(self.dir.clone());
        let store = FileStore::open_at(dir, SEGMENTS, 0).map_err(|e| e.to_string())?;
        Ok(Box::new(store))
    }
}

impl Home for SimHome {
    fn is_file(&self) -> bool {
        true
    }

    fn empty(&self, _config: &StreamConfig) -> Result<Box<dyn MsgStore>, String> {
        self.empty_store()
    }

    fn reopen(
        &self,
        _config: StreamConfig,
        _created: i64,
        stored: Option<(u64, Bytes)>,
    ) -> Result<Start, String> {
        let Some((index, state)) = stored else {
            let machine = stream_of(&self.cfg, self.group, self.empty_store()?)
                .ok_or("not a stream group")?;
            return Ok((machine, 0, None));
        };
        let dir = Arc::new(self.dir.clone());
        match fetch::reopen(dir, SEGMENTS, index, &state)? {
            Reopened::Ready { machine, mark } => Ok((*machine, mark, None)),
            Reopened::Fetch { store, mark, .. } => {
                let (config, _) =
                    StreamMachine::snapshot_summary(&state).map_err(|e| e.to_string())?;
                let created = 0;
                let machine =
                    replica::placeholder(config, created).ok_or("a placeholder machine")?;
                Ok((machine, mark, Some((index, state, store))))
            }
        }
    }

    fn restore_whole(&self, index: u64, data: &[u8]) -> Result<StreamMachine, String> {
        let mut emptied = Some(self.empty_store()?);
        let mut machine = StreamMachine::restore(data, |_| emptied.take().expect("once"))
            .map_err(|e| e.to_string())?;
        machine
            .stream_mut()
            .store_mut()
            .mark(index)
            .map_err(|e| e.to_string())?;
        Ok(machine)
    }
}

impl Sim {
    /// The clocks the replicas see: [`STEP_MS`] a step.
    pub(crate) fn clock(&self) -> Clock {
        Clock {
            now: self.step * STEP_MS,
            wall: self.now(),
        }
    }

    /// The replica of `group` on server `i`, as a (re)start opens it from
    /// its log's snapshot (`stored`) and its store; then its events.
    pub(crate) fn open_replica(
        &mut self,
        i: usize,
        group: u64,
        stored: Option<(u64, Bytes)>,
    ) -> Result<(), Violation> {
        let clock = self.clock();
        let rs = self.servers[i]
            .stores
            .get_mut(&group)
            .expect("a store per stream group");
        // The crashed replica's store goes before another opens the
        // directory.
        rs.replica = None;
        rs.asks.clear();
        rs.flipped = false;
        let home = SimHome {
            dir: rs.dir.clone(),
            cfg: self.cfg.clone(),
            group,
        };
        let (config, created) = (StreamConfig::default(), 0);
        let start = home
            .reopen(config, created, stored)
            .expect("stores this simulator made reopen");
        rs.replica = Some(Replica::new(start, Box::new(home), TIMING, clock));
        self.drain(i, group)
    }

    /// Runs `f` on the replica of `group` on server `i`, if it has one,
    /// then does what the replica asks (its driver contract).
    pub(crate) fn with_replica(
        &mut self,
        i: usize,
        group: u64,
        f: impl FnOnce(&mut Replica, Clock),
    ) -> Result<(), Violation> {
        let clock = self.clock();
        let rs = self.servers[i].stores.get_mut(&group);
        let Some(replica) = rs.and_then(|rs| rs.replica.as_mut()) else {
            return Ok(());
        };
        f(replica, clock);
        self.drain(i, group)
    }

    /// Does what the replica of `group` on server `i` asks, in order.
    fn drain(&mut self, i: usize, group: u64) -> Result<(), Violation> {
        let id = self.servers[i].id;
        loop {
            let rs = self.servers[i].stores.get_mut(&group).expect("a store");
            let Some(event) = rs.replica.as_mut().and_then(Replica::poll_event) else {
                return Ok(());
            };
            match event {
                Event::Applied {
                    index,
                    leader,
                    entry,
                    applied,
                } => self.stream_applied(i, group, leader, index, &entry, *applied)?,
                Event::Snapshot { index, data, sync } => {
                    if let Some(sync) = sync {
                        sync.sync().expect("memory dirs sync");
                    }
                    self.send_to_node(i, Deferred::SnapshotTaken { group, index, data })?;
                }
                Event::FetchBegun { .. } | Event::FetchEnded => rs.asks.clear(),
                Event::Ask(ask) => rs.asks.push(ask),
                Event::Fetched { sync, .. } => {
                    if let Some(sync) = sync {
                        sync.sync().expect("memory dirs sync");
                    }
                    self.report.fetches += 1;
                    self.event(9500 + id);
                }
                Event::Hold(hold) => self.send_to_node(i, Deferred::Hold(group, hold))?,
                Event::StepDown => self.send_to_node(i, Deferred::StepDown(group))?,
                Event::Repaired => self.report.store_repairs += 1,
                Event::Restored { .. } | Event::Note(_) => {}
                Event::Diverged(why) => {
                    if self.cfg.strict_fetches {
                        return Err(self.violation(format!(
                            "server {id}: the replica of group {group} fetched a state other than its snapshot's: {why}"
                        )));
                    }
                    self.report.divergences += 1;
                }
                Event::Halted(why) => {
                    return Err(self.violation(format!(
                        "server {id}: the replica of group {group} halted: {why}"
                    )));
                }
            }
        }
    }

    /// Moves every fetch along: its overdue ask sent again, and the asks
    /// sent before this round carried to the leader (if reachable) and
    /// answered.
    pub(crate) fn fetch_round(&mut self, f: &Faults) -> Result<(), Violation> {
        for i in 0..self.servers.len() {
            if !self.servers[i].is_up() {
                continue;
            }
            let groups: Vec<u64> = self.servers[i].stores.keys().copied().collect();
            for g in groups {
                let rs = self.servers[i].stores.get_mut(&g).expect("a store");
                let asks = std::mem::take(&mut rs.asks);
                for ask in asks {
                    self.carry(i, g, ask, f)?;
                }
                self.with_replica(i, g, |r, clock| r.handle_timeout(clock))?;
            }
        }
        Ok(())
    }

    /// One ask of server `i`'s replica of `g` to the group's leader, and
    /// the leader's reply back.
    fn carry(&mut self, i: usize, g: u64, ask: Ask, f: &Faults) -> Result<(), Violation> {
        let Some(li) = self.leader_index_of(g) else {
            return Ok(());
        };
        let (me, leader) = (self.servers[i].id, self.servers[li].id);
        if li == i {
            // It cannot fetch from itself: it hands its leadership on,
            // and asks whoever takes it.
            let n = self.servers.len() as u64;
            let engine = self.servers[i].node().call();
            crate::repair::step_down(engine, g, me, n, &mut self.rng);
            return Ok(());
        }
        if self.cut.contains(&(me, leader)) || self.cut.contains(&(leader, me)) {
            return Ok(());
        }
        if self.rng.chance(f.drop) {
            return Ok(());
        }
        let clock = self.clock();
        let lrs = self.servers[li].stores.get_mut(&g).expect("a store");
        let Some(lr) = lrs.replica.as_mut() else {
            return Ok(());
        };
        let mut bytes = lr.answer(ask, clock, CHUNK).encode();
        self.drain(li, g)?;
        if self.rng.chance(f.corrupt) && bytes.len() > 1 {
            let at = 1 + self.rng.below(bytes.len() as u64 - 1) as usize;
            bytes[at] ^= 1 << self.rng.below(8);
        }
        self.event(9000 + me * 100 + g);
        self.with_replica(i, g, |r, clock| r.handle_reply(&bytes, clock))
    }
}
