//! A deterministic cluster simulator. It runs the real replication engine
//! of 3 or 5 servers on one thread, moving their frames through a seeded
//! network that drops, delays, reorders, duplicates and corrupts them and
//! partitions servers; it crashes and restarts servers at any point,
//! losing unsynced writes, tearing the last write, and flipping bits in
//! their logs. A client proposes uniquely numbered entries to whoever
//! leads, recording each as acknowledged (committed at an index, seen by
//! the leader) or not.
//!
//! Checkers run every step and at the end (`checks`, one file each):
//! - at most one leader per term;
//! - committed prefixes agree on every replica;
//! - every acknowledged entry is committed exactly once, at the index its
//!   acknowledgement named, on every caught-up replica;
//! - one live Raft node per group per server;
//! - the cluster converges (a leader, everyone caught up) once faults stop.
//!
//! Everything random comes from the seed, and nothing iterates a hash
//! map, so a seed replays the same run: [`Report::trace`] is a hash of
//! every event, and a failing run prints its seed and the command that
//! replays it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use jsservice::meta_sm::{Meta, MetaOp};
use jsservice::stream_sm::{Applied, Entry as StreamEntry, Op, Outcome, StreamMachine};
use replication::engine::{Engine, EngineError, Output};
use replication::outbox::Outbox;
use replication::rng::Rng;
use replication::{frame, identity};
use store::{MemDir, RewriteJob, Rewritten, Swap};

mod checks;
mod repair;
mod replica;

/// The Raft group the simulation replicates: values, the work-queue
/// stream, or the meta state.
pub const GROUP: u64 = 1;
/// In sourced mode, the group of the stream that sources the work queue.
pub const SOURCING_GROUP: u64 = 2;
/// The source key of the sourcing stream's one source (origin `WQ`, no
/// filter, no transform).
const SOURCE_KEY: &str = "WQ > >";
/// Extra quiet steps in sourced mode, without publishing, for the work
/// queue to drain into the sourcing stream.
const DRAIN_STEPS: u64 = 600;
/// Quiet steps without any client activity at the end of a run on
/// bandwidth-limited links.
const SETTLE_STEPS: u64 = 100;

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

#[derive(Debug, Clone)]
pub struct Config {
    pub seed: u64,
    pub servers: usize,
    /// Steps with faults, then quiet steps to converge.
    pub steps: u64,
    pub quiet_steps: u64,
    pub faults: Faults,
    /// Proposals per thousand steps.
    pub propose_rate: u64,
    /// Of a thousand proposals, how many carry two to four entries at
    /// once (`Engine::propose_all`, as a node proposes the submits of one
    /// cycle).
    pub batch_rate: u64,
    /// Servers acknowledge before their log is synced (test-only: shows
    /// the checkers catch what that loses).
    pub unsafe_ack_before_sync: bool,
    /// Test-only: servers run without pre-vote.
    pub unsafe_no_pre_vote: bool,
    /// Test-only: servers do not check frame checksums.
    pub unsafe_skip_frame_checksum: bool,
    /// Test-only: servers have no group registry.
    pub unsafe_no_registry: bool,
    /// Test-only: a replica whose store a read found damaged goes on
    /// with it, unrepaired.
    pub unsafe_no_store_repair: bool,
    /// Bytes each directed link carries per step; `None` is unlimited
    /// (frames then only suffer the seeded delay).
    pub bandwidth: Option<usize>,
    /// Whether a link sends control frames (votes, heartbeats) ahead of
    /// queued bulk frames, as the real driver's outbox does. Off is a
    /// single FIFO (incident 4's cause).
    pub prioritize_control: bool,
    /// Bytes per client proposal (at least 8: the value's number).
    pub payload_size: usize,
    /// Raft messages above this many bytes travel as chunks (the engine's
    /// default when `None`); small values exercise reassembly.
    pub chunk_size: Option<usize>,
    /// Replicate a work-queue stream (jetstream's state machine) instead
    /// of plain values: the client publishes, pulls and acks through it.
    pub work_queue: bool,
    /// Test-only: the leader applies acks itself, outside the log.
    pub unsafe_local_acks: bool,
    /// With `work_queue`: a second stream, in its own group, sources the
    /// work queue (incident 2 as reported). The work queue's consumer is
    /// the source's: each message it delivers is proposed to the sourcing
    /// stream, and acked only once stored there, as the server's source
    /// driver does. At the end, publishing stops, the work queue must
    /// drain, and every acknowledged publish must be in the sourcing
    /// stream exactly once, on every replica.
    pub sourced: bool,
    /// Replicate a limits stream that clients publish to with message
    /// ids, retrying unanswered publishes (to whoever leads then).
    pub publish_ids: bool,
    /// With `publish_ids`: the stream counts (`allow_msg_counter`) and
    /// takes atomic batches (`allow_atomic`); the client publishes
    /// increments, alone or in batches of two or three, and retries them
    /// (a batch whole) until answered.
    pub counters: bool,
    /// With `publish_ids`: the stream takes message schedules
    /// (`allow_msg_schedules`); the client also publishes schedules, some
    /// repeating, some firing once, and time passes through `Tick`s in
    /// the log. Every replica must fire the same copies, a one-shot
    /// schedule at most once and a repeating one never twice for a time.
    pub schedules: bool,
    /// Test-only: the leader applies `Tick`s itself, outside the log.
    pub unsafe_local_ticks: bool,
    /// Replicate the meta state machine: servers register as peers (and
    /// some registrations arrive with a mangled id), streams get assigned.
    pub meta: bool,
}

impl Config {
    pub fn new(seed: u64) -> Config {
        Config {
            seed,
            servers: 3,
            steps: 600,
            quiet_steps: 300,
            faults: Faults::random(),
            propose_rate: 300,
            batch_rate: 250,
            unsafe_ack_before_sync: false,
            unsafe_no_pre_vote: false,
            unsafe_skip_frame_checksum: false,
            unsafe_no_registry: false,
            unsafe_no_store_repair: false,
            bandwidth: None,
            prioritize_control: true,
            payload_size: 8,
            chunk_size: None,
            work_queue: false,
            unsafe_local_acks: false,
            sourced: false,
            publish_ids: false,
            counters: false,
            schedules: false,
            unsafe_local_ticks: false,
            meta: false,
        }
    }
}

/// What a run saw.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// Operations by outcome, as a client would record them: invoked
    /// (proposed), ok (acked), failed (refused: no leader to take them),
    /// unknown (no answer by the end: maybe applied, maybe not).
    pub proposed: u64,
    pub acked: u64,
    pub failed: u64,
    pub unknown: u64,
    pub crashes: u64,
    pub bit_flips: u64,
    pub frames_refused: u64,
    /// Log compactions behind state snapshots.
    pub compactions: u64,
    /// Log files rewritten behind compactions (swapped in; a crash can
    /// land before), which run beside the engine as a rewrite thread's do.
    pub rewrites: u64,
    /// Stream replicas caught up by fetching a snapshot's messages from
    /// the leader's store.
    pub fetches: u64,
    /// Bits flipped under running replicas (`Faults::store_flip`), and
    /// stores a read found damaged and that were repaired in place.
    pub store_flips: u64,
    pub store_repairs: u64,
    /// Current reads (ReadIndex) confirmed and served from a leader.
    pub reads: u64,
    /// Steps each group's node spent quiet, summed over servers.
    pub quiet_steps: u64,
    pub leaders: BTreeMap<u64, u64>,
    /// Schedules mode: copies the schedules fired (on the first replica).
    pub schedules_fired: u64,
    /// A hash of every event: equal seeds give equal traces.
    pub trace: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub seed: u64,
    pub step: u64,
    pub what: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "seed {} step {}: {}\nreplay: cargo run -p flotilla-sim --release -- --seed {} (add the run's mode flag: --work-queue, --sourced, --publish-ids, --counters, --schedules or --meta)",
            self.seed, self.step, self.what, self.seed
        )
    }
}

struct Server {
    id: u64,
    dir: MemDir,
    engine: Option<Engine>,
    /// Steps until a crashed server comes back.
    down_for: u64,
    /// Its log took a bit flip while it was down.
    flipped: bool,
    /// The replicated meta state, rebuilt from the log on restart.
    meta: Meta,
    /// The stream replicas' stores, by group (`replica`).
    stores: BTreeMap<u64, replica::ReplicaStore>,
    /// Applied index of the last compaction, by group.
    compacted_at: BTreeMap<u64, u64>,
    /// Sync handles handed out and not yet run, by epoch, as a sync
    /// thread holds them while the engine goes on.
    syncing: Vec<(u64, Vec<store::SyncHandle>)>,
    /// Log rewrites asked for and not yet run, by group, as a rewrite
    /// thread holds them.
    rewrites: Vec<(u64, RewriteJob)>,
    /// Log rewrites run (their files written) and not yet swapped in.
    rewritten: Vec<(u64, Rewritten)>,
    /// Stream replicas' snapshots the engine asked for, as (group, its
    /// applied index, its log's snapshot index): taken once the entries
    /// handed out before the ask are applied, as a replica task takes
    /// them in the order they came.
    snapshots_asked: Vec<(u64, u64, u64)>,
}

impl Server {
    /// The replicated work-queue stream (the publish-ids stream), unless
    /// it is fetching; rebuilt from the log on restart.
    fn wq(&self) -> Option<&StreamMachine> {
        self.stores
            .get(&GROUP)
            .and_then(replica::ReplicaStore::current)
    }

    /// In sourced mode, the stream sourcing it.
    fn agg(&self) -> Option<&StreamMachine> {
        self.stores
            .get(&SOURCING_GROUP)
            .and_then(replica::ReplicaStore::current)
    }

    /// Power loss: the engine stops, and every file of the server (its
    /// logs and its replicas' stores) goes back to what was synced, with
    /// `torn` bytes of the unsynced tail kept.
    fn crash(&mut self, torn: usize) {
        self.engine = None;
        self.dir.crash(torn);
        for rs in self.stores.values() {
            rs.dir.crash(torn);
        }
    }

    /// Compacts a group's log; a rewrite it asks for waits for a later
    /// step, as it would for a rewrite thread.
    fn compact(&mut self, g: u64, index: u64, data: Vec<u8>) -> bool {
        let e = self.engine.as_mut().expect("up");
        match e.compact(g, index, data) {
            Ok(job) => {
                self.rewrites.extend(job.map(|j| (g, j)));
                true
            }
            Err(_) => false,
        }
    }
}

/// A directed link with limited bandwidth. Prioritized, it queues in
/// the real per-peer outbox (control first, bulk bounded); otherwise in one
/// FIFO (incident 4's cause).
struct Link {
    queue: LinkQueue,
    /// Bytes the link may still send this step.
    credit: usize,
}

enum LinkQueue {
    Prioritized(Outbox),
    Fifo(std::collections::VecDeque<frame::Frame>),
}

/// Bulk bytes a prioritized link queues before dropping (Raft resends).
const BULK_LIMIT: usize = 4 << 20;

impl Link {
    fn new(prioritize: bool) -> Link {
        Link {
            queue: if prioritize {
                LinkQueue::Prioritized(Outbox::new(BULK_LIMIT))
            } else {
                LinkQueue::Fifo(Default::default())
            },
            credit: 0,
        }
    }

    fn push(&mut self, f: frame::Frame) {
        match &mut self.queue {
            LinkQueue::Prioritized(o) => {
                o.push(f);
            }
            LinkQueue::Fifo(q) => q.push_back(f),
        }
    }

    fn encoded(f: &frame::Frame) -> usize {
        frame::HEADER_LEN + f.payload.len()
    }

    /// Credit may build up to the largest head, so a frame bigger than a
    /// step's bandwidth still goes in time.
    fn largest_head(&self) -> usize {
        match &self.queue {
            LinkQueue::Prioritized(o) => o.largest_head(),
            LinkQueue::Fifo(q) => q.front().map_or(0, Self::encoded),
        }
    }

    fn next_len(&self) -> Option<usize> {
        match &self.queue {
            LinkQueue::Prioritized(o) => o.next_len(),
            LinkQueue::Fifo(q) => q.front().map(Self::encoded),
        }
    }

    fn pop(&mut self) -> Option<frame::Frame> {
        match &mut self.queue {
            LinkQueue::Prioritized(o) => o.pop(),
            LinkQueue::Fifo(q) => q.pop_front(),
        }
    }
}

struct Packet {
    at: u64,
    from: u64,
    to: u64,
    bytes: Vec<u8>,
}

pub struct Sim {
    cfg: Config,
    rng: Rng,
    servers: Vec<Server>,
    net: Vec<Packet>,
    links: BTreeMap<(u64, u64), Link>,
    /// Directed links that are cut: (from, to).
    cut: BTreeSet<(u64, u64)>,
    step: u64,
    next_value: u64,
    /// Proposals not yet seen committed: value -> proposing leader id.
    in_flight: BTreeMap<u64, u64>,
    /// Acknowledged values: value -> index.
    acked: BTreeMap<u64, u64>,
    /// Work-queue mode: deliveries waiting to be acked (ack subjects);
    /// stream sequences whose ack is done.
    wq_delivered: Vec<String>,
    /// Consumed stream sequence -> the log index of its ack (0 for an ack
    /// outside the log).
    wq_consumed: BTreeMap<u64, u64>,
    /// Publish-id mode: unanswered publishes (value -> step last sent),
    /// and acknowledged ones (message id -> PubAck sequence).
    id_pending: BTreeMap<u64, u64>,
    id_acked: BTreeMap<String, u64>,
    /// Counters mode: the batches sent, by their last value, and their
    /// sizes (a value alone is not here).
    batch_sizes: BTreeMap<u64, u64>,
    /// Schedules mode: the schedule subjects sent, and whether each
    /// repeats.
    schedules_sent: BTreeMap<String, bool>,
    /// Confirmed current reads waiting for their server to apply up to
    /// the read index: (server index, read index).
    reads_waiting: Vec<(usize, u64)>,
    /// Sourced mode: deliveries to propose to the sourcing stream; the ack
    /// subject of each origin sequence on its way there; publishes
    /// acknowledged to the client (value -> PubAck sequence); whether
    /// publishing has stopped for the end.
    src_queue: Vec<Op>,
    src_acks: BTreeMap<u64, String>,
    src_published: BTreeMap<u64, u64>,
    draining: bool,
    /// At the end with limited links: the client has stopped.
    settling: bool,
    /// The sourcing group's leaders by term (the main group's are in the
    /// report).
    agg_leaders: BTreeMap<u64, u64>,
    report: Report,
}

fn mix(h: u64, v: u64) -> u64 {
    (h ^ v)
        .wrapping_mul(0x100_0000_01B3)
        .rotate_left(17)
        .wrapping_add(0x9E37_79B9)
}

impl Sim {
    pub fn new(cfg: Config) -> Sim {
        let mut rng = Rng::new(cfg.seed);
        let voters: Vec<u64> = (1..=cfg.servers as u64).collect();
        let servers = voters
            .iter()
            .map(|&id| {
                let dir = MemDir::new();
                let (me, _) = identity::load_or_create(&dir, &format!("s{id}"), || id)
                    .expect("a new store takes an identity");
                let mut e = Engine::new(me.id, Arc::new(dir.clone()), rng.next_u64());
                e.unsafe_ack_before_sync = cfg.unsafe_ack_before_sync;
                e.unsafe_no_pre_vote = cfg.unsafe_no_pre_vote;
                e.unsafe_skip_frame_checksum = cfg.unsafe_skip_frame_checksum;
                e.unsafe_no_registry = cfg.unsafe_no_registry;
                if let Some(c) = cfg.chunk_size {
                    e.chunk_size = c;
                }
                for &g in groups(&cfg) {
                    e.create_group(g, &voters).expect("fresh group");
                }
                let stores: BTreeMap<u64, replica::ReplicaStore> = stream_groups(&cfg)
                    .map(|g| (g, replica::ReplicaStore::new()))
                    .collect();
                Server {
                    id,
                    dir,
                    engine: Some(e),
                    down_for: 0,
                    flipped: false,
                    meta: Meta::new(),
                    stores,
                    compacted_at: BTreeMap::new(),
                    syncing: Vec::new(),
                    rewrites: Vec::new(),
                    rewritten: Vec::new(),
                    snapshots_asked: Vec::new(),
                }
            })
            .collect();
        let mut sim = Sim {
            cfg,
            rng,
            servers,
            net: Vec::new(),
            links: BTreeMap::new(),
            cut: BTreeSet::new(),
            step: 0,
            next_value: 1,
            in_flight: BTreeMap::new(),
            acked: BTreeMap::new(),
            wq_delivered: Vec::new(),
            wq_consumed: BTreeMap::new(),
            id_pending: BTreeMap::new(),
            id_acked: BTreeMap::new(),
            batch_sizes: BTreeMap::new(),
            schedules_sent: BTreeMap::new(),
            reads_waiting: Vec::new(),
            src_queue: Vec::new(),
            src_acks: BTreeMap::new(),
            src_published: BTreeMap::new(),
            draining: false,
            settling: false,
            agg_leaders: BTreeMap::new(),
            report: Report::default(),
        };
        for i in 0..sim.servers.len() {
            for g in stream_groups(&sim.cfg) {
                sim.open_replica(i, g, None).expect("a new replica opens");
            }
        }
        sim
    }

    /// What a poll hands server `i` besides frames and entries:
    /// installed snapshots replace its state, wanted ones are taken, and
    /// sync handles queue for its sync thread.
    fn absorb(&mut self, i: usize, out: &mut Output) -> Result<(), Violation> {
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

    fn violation(&self, what: String) -> Violation {
        Violation {
            seed: self.cfg.seed,
            step: self.step,
            what,
        }
    }

    fn event(&mut self, v: u64) {
        self.report.trace = mix(self.report.trace, v);
    }

    pub fn run(mut self) -> Result<Report, Violation> {
        while self.step < self.cfg.steps {
            self.one_step(true)?;
            self.step += 1;
        }
        self.finish()
    }

    /// Runs `n` steps, with the configured random faults or without.
    pub fn steps(&mut self, n: u64, faulty: bool) -> Result<(), Violation> {
        for _ in 0..n {
            self.one_step(faulty)?;
            self.step += 1;
        }
        Ok(())
    }

    /// Quiet steps (faults off, partitions healed), then the end checks.
    pub fn finish(mut self) -> Result<Report, Violation> {
        self.cut.clear();
        self.steps(self.cfg.quiet_steps, false)?;
        if self.cfg.sourced {
            self.draining = true;
            self.steps(DRAIN_STEPS, false)?;
        }
        if self.cfg.bandwidth.is_some() {
            // A limited link delivers commit news a step late: the client
            // stops so the end state is settled, not in flight.
            self.settling = true;
            self.steps(SETTLE_STEPS, false)?;
        }
        // The end checks read every store whole. A bit flipped under a
        // running replica that no read met before is met there, as a
        // client reading the stream would meet it: that replica repairs
        // its store from the leader, and the checks run again, up to three
        // times. A failure while no read found damage stands at once, and
        // one that outlasts the repairs stands too.
        let mut checked = self.check_converged();
        for _ in 0..3 {
            if checked.is_ok() || !self.damage_found() {
                break;
            }
            self.repair_and_settle(self.cfg.quiet_steps)?;
            checked = self.check_converged();
        }
        checked?;
        self.report.unknown = (self.in_flight.len() + self.id_pending.len()) as u64;
        Ok(self.report)
    }

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
        assert!(s.engine.is_none(), "flip bits in a stopped server's files");
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
        let Some(e) = self.servers[id as usize - 1].engine.as_mut() else {
            return;
        };
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

    /// The current leader's id and term, if any server leads.
    pub fn leader(&self) -> Option<(u64, u64)> {
        self.leader_of(GROUP)
    }

    /// The current leader of `group` and its term.
    pub fn leader_of(&self, group: u64) -> Option<(u64, u64)> {
        let i = self.leader_index_of(group)?;
        let e = self.servers[i].engine.as_ref()?;
        Some((e.id(), e.leader(group)?.0))
    }

    /// The highest term any live server is in.
    pub fn max_term(&self) -> u64 {
        self.servers
            .iter()
            .filter_map(|s| s.engine.as_ref()?.leader(GROUP))
            .map(|(t, _)| t)
            .max()
            .unwrap_or(0)
    }

    pub fn report(&self) -> &Report {
        &self.report
    }

    fn one_step(&mut self, faulty: bool) -> Result<(), Violation> {
        let f = if faulty {
            self.cfg.faults
        } else {
            Faults::none()
        };
        self.process_faults(&f)?;
        self.client();
        for i in 0..self.servers.len() {
            if let Some(e) = self.servers[i].engine.as_mut() {
                e.tick();
                self.report.quiet_steps += e.quiet_groups() as u64;
            }
        }
        // Let the cluster react within the step: several delivery rounds;
        // limited links carry their bandwidth once per step.
        for round in 0..4 {
            self.drive(&f)?;
            if round == 0 {
                self.transmit(&f);
            }
            self.deliver(&f);
        }
        self.fetch_round(&f)?;
        self.repair_round()?;
        self.check_step()
    }

    /// This step's faults: partitions, then each server's restart, crash
    /// or flip, in server order.
    fn process_faults(&mut self, f: &Faults) -> Result<(), Violation> {
        self.partition_faults(f);
        // Storage faults stay within what Raft can survive: at most a
        // minority of replicas damaged at once (as TigerBeetle's simulator
        // bounds its faults). A damaged majority cannot tell which entries
        // were committed; that is a loss no protocol recovers from.
        let f_max = (self.servers.len() - 1) / 2;
        for i in 0..self.servers.len() {
            let damaged = self.damaged_servers();
            let s = &mut self.servers[i];
            if s.engine.as_ref().is_some_and(|e| !is_damaged(&self.cfg, e)) {
                s.flipped = false;
            }
            if s.engine.is_none() {
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
                    || s.engine.as_ref().is_some_and(|e| is_damaged(&self.cfg, e))
                    || s.stores.values().any(|rs| rs.is_fetching() || rs.flipped)
            })
            .count()
    }

    /// Brings crashed server `i` back: a new engine over its files, its
    /// groups created again, its replicas reopened from their stores.
    fn restart(&mut self, i: usize) -> Result<(), Violation> {
        let n = self.servers.len() as u64;
        let s = &mut self.servers[i];
        // The id comes back from the store, never anew.
        let (me, new) =
            identity::load_or_create(&s.dir, "", || 0).expect("the identity survives crashes");
        assert!(!new && me.id == s.id, "server {} came back as {me:?}", s.id);
        let mut e = Engine::new(me.id, Arc::new(s.dir.clone()), self.rng.next_u64());
        e.unsafe_ack_before_sync = self.cfg.unsafe_ack_before_sync;
        e.unsafe_no_pre_vote = self.cfg.unsafe_no_pre_vote;
        e.unsafe_skip_frame_checksum = self.cfg.unsafe_skip_frame_checksum;
        e.unsafe_no_registry = self.cfg.unsafe_no_registry;
        if let Some(c) = self.cfg.chunk_size {
            e.chunk_size = c;
        }
        let voters: Vec<u64> = (1..=n).collect();
        for &g in groups(&self.cfg) {
            e.create_group(g, &voters)
                .expect("one node per group: the old one is gone");
            s.compacted_at.remove(&g);
            if s.stores.contains_key(&g) {
                continue;
            }
            let data = e.snapshot(g).map(|(_, d)| d).unwrap_or_default();
            restore_state(&self.cfg, s, g, &data);
        }
        let stored: Vec<(u64, Option<(u64, Bytes)>)> = s
            .stores
            .keys()
            .map(|&g| (g, e.snapshot(g).filter(|(_, d)| !d.is_empty())))
            .collect();
        s.engine = Some(e);
        // What the crashed engine had not synced is gone, and so are its
        // rewrites (the new engine removed their files).
        s.syncing.clear();
        s.rewrites.clear();
        s.rewritten.clear();
        s.snapshots_asked.clear();
        self.report.trace = mix(self.report.trace, 3000 + s.id);
        for (g, stored) in stored {
            self.open_replica(i, g, stored)?;
        }
        Ok(())
    }

    /// Crashes server `i` (tearing its last writes) for a while, and,
    /// when `may_damage`, maybe flips a bit in its files while it is down.
    fn crash(&mut self, i: usize, f: &Faults, may_damage: bool) {
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

    fn leader_index(&self) -> Option<usize> {
        self.leader_index_of(GROUP)
    }

    fn leader_index_of(&self, group: u64) -> Option<usize> {
        self.servers
            .iter()
            .position(|s| s.engine.as_ref().is_some_and(|e| e.is_leader(group)))
    }

    fn client(&mut self) {
        if self.settling {
            return;
        }
        if self.cfg.work_queue {
            self.wq_client();
            return;
        }
        if self.cfg.publish_ids {
            self.id_client();
            if self.cfg.schedules {
                self.schedule_client();
            }
            return;
        }
        if self.cfg.meta {
            self.meta_client();
            return;
        }
        if !self.rng.chance(self.cfg.propose_rate) {
            return;
        }
        let Some(li) = self.leader_index() else {
            return;
        };
        // Some proposals carry several entries, as a node proposes the
        // submits it took in one cycle (`Engine::propose_all`).
        let n = match self.rng.chance(self.cfg.batch_rate) {
            true => 2 + self.rng.below(3),
            false => 1,
        };
        let first = self.next_value;
        let leader = self.servers[li].id;
        let e = self.servers[li].engine.as_mut().expect("leader is up");
        let entries = (first..first + n)
            .map(|v| {
                let mut data = v.to_be_bytes().to_vec();
                data.resize(self.cfg.payload_size.max(8), b'x');
                data
            })
            .collect::<Vec<_>>();
        match e.propose_all(GROUP, entries) {
            Ok(()) => {
                self.next_value = first + n;
                for v in first..first + n {
                    self.in_flight.insert(v, leader);
                    self.report.proposed += 1;
                    self.event(5000 + v);
                }
            }
            Err(EngineError::NotLeader(_)) => self.report.failed += 1,
            Err(e) => panic!("propose: {e}"),
        }
    }

    /// The simulated wall clock: 10 ms a step, in Unix nanoseconds.
    fn now(&self) -> i64 {
        1_700_000_000_000_000_000 + self.step as i64 * 10_000_000
    }

    fn propose_op(&mut self, op: Op) -> bool {
        self.propose_op_to(GROUP, op)
    }

    fn propose_op_to(&mut self, group: u64, op: Op) -> bool {
        let Some(li) = self.leader_index_of(group) else {
            self.report.failed += 1;
            return false;
        };
        let e = StreamEntry { ts: self.now(), op };
        let engine = self.servers[li].engine.as_mut().expect("leader is up");
        engine.propose(group, e.encode()).is_ok()
    }

    /// Work-queue client: create the consumer, publish, pull, ack.
    fn wq_client(&mut self) {
        // Until the leader has the consumer (a create proposed to a leader
        // that lost its place may never commit), ask again now and then.
        let has_consumer = self
            .leader_index()
            .and_then(|li| self.servers[li].wq())
            .is_some_and(|w| w.stream().consumer("C").is_some());
        if !has_consumer {
            if !self.step.is_multiple_of(10) {
                return;
            }
            let req: &'static [u8] = if self.cfg.sourced {
                // The source's consumer: one message outstanding at a
                // time, so the source sees the origin in order and its
                // position never skips a message still to come; a lost
                // delivery comes again after the ack wait.
                br#"{"stream_name":"WQ","config":{"durable_name":"C","ack_policy":"explicit","ack_wait":1000000000,"max_ack_pending":1}}"#
            } else {
                br#"{"stream_name":"WQ","config":{"durable_name":"C","ack_policy":"explicit","ack_wait":600000000000}}"#
            };
            self.propose_op(Op::CreateConsumer {
                name: "C".into(),
                request: Bytes::from_static(req),
            });
            return;
        }
        if self.cfg.sourced {
            self.source_driver();
        }
        if !self.draining && self.rng.chance(self.cfg.propose_rate) {
            let v = self.next_value;
            if self.propose_op(Op::Publish {
                subject: format!("wq.{}", v % 4),
                headers: None,
                payload: Bytes::from(v.to_be_bytes().to_vec()),
            }) {
                self.next_value += 1;
                self.report.proposed += 1;
                self.event(5000 + v);
            }
        }
        // A read that must be current (as stream info is): asked of the
        // leader, answered only once a quorum confirms it still leads.
        if self.rng.chance(100) {
            if let Some(li) = self.leader_index() {
                let e = self.servers[li].engine.as_mut().expect("leader is up");
                let _ = e.read_index(GROUP, self.step.to_be_bytes().to_vec());
            }
        }
        let pull_rate = if self.cfg.sourced { 300 } else { 150 };
        if self.rng.chance(pull_rate) {
            self.propose_op(Op::Pull {
                consumer: "C".into(),
                request: Bytes::from_static(br#"{"batch":5,"no_wait":true}"#),
                reply: "inbox".into(),
            });
        }
        // Ack what was delivered.
        for subject in std::mem::take(&mut self.wq_delivered) {
            if self.cfg.unsafe_local_acks {
                let ack = Op::Ack {
                    consumer: "C".into(),
                    subject: subject.clone(),
                    body: Bytes::from_static(b"+ACK"),
                };
                if self.apply_on_leader_alone(ack) {
                    if let Some(seq) = ack_stream_seq(&subject) {
                        self.wq_consumed.insert(seq, 0);
                    }
                }
                continue;
            }
            self.propose_op(Op::Ack {
                consumer: "C".into(),
                subject,
                body: Bytes::from_static(b"+ACK"),
            });
        }
    }

    /// The sourcing stream's side: what the work queue delivered is
    /// proposed to the sourcing stream's leader (dropped if there is
    /// none: the delivery comes again); time passes on the work queue, so
    /// deliveries not acked in time come again.
    fn source_driver(&mut self) {
        if self.step.is_multiple_of(10) {
            self.propose_op(Op::Tick);
        }
        for op in std::mem::take(&mut self.src_queue) {
            self.propose_op_to(SOURCING_GROUP, op);
        }
    }

    /// Hands a committed entry of stream group `g` to server `i`'s
    /// replica, which applies it (or keeps it while it fetches a
    /// snapshot's messages).
    fn apply_stream(
        &mut self,
        i: usize,
        g: u64,
        leader: bool,
        index: u64,
        data: &Bytes,
    ) -> Result<(), Violation> {
        self.with_replica(i, g, |r, clock| {
            r.handle_committed(index, data.clone(), leader, clock)
        })
    }

    /// What a stream replica applied, as the client and the checkers see
    /// it.
    pub(crate) fn stream_applied(
        &mut self,
        i: usize,
        g: u64,
        leader: bool,
        index: u64,
        data: &[u8],
        applied: Applied,
    ) -> Result<(), Violation> {
        match g == SOURCING_GROUP {
            true => {
                self.agg_applied(leader, data, applied);
                Ok(())
            }
            false => self.wq_applied(i, leader, index, data, applied),
        }
    }

    /// An entry applied to a sourcing stream. Once its leader has stored
    /// a delivered message (or had it already), the work-queue message is
    /// acked: never before the copy is committed.
    fn agg_applied(&mut self, leader: bool, data: &[u8], applied: Applied) {
        if !leader || !matches!(applied.outcome, Outcome::Sourced(Ok(_))) {
            return;
        }
        if let Ok(StreamEntry {
            op: Op::Sourced { origin_seq, .. },
            ..
        }) = StreamEntry::decode(data)
        {
            if let Some(ack) = self.src_acks.remove(&origin_seq) {
                self.wq_delivered.push(ack);
            }
        }
    }

    /// Publishes with message ids; an unanswered one is sent again after
    /// a while, to whoever leads then, as a client library retries.
    fn id_client(&mut self) {
        const RETRY_AFTER: u64 = 30;
        let due: Vec<u64> = self
            .id_pending
            .iter()
            .filter(|(_, &at)| self.step >= at + RETRY_AFTER)
            .map(|(&v, _)| v)
            .collect();
        let mut sends = due;
        if self.rng.chance(self.cfg.propose_rate) {
            // In counters mode a third of the publishes are batches.
            let size = match self.cfg.counters && self.rng.below(3) == 0 {
                true => 2 + self.rng.below(2),
                false => 1,
            };
            let last = self.next_value + size - 1;
            if size > 1 {
                self.batch_sizes.insert(last, size);
            }
            sends.push(last);
            self.next_value += size;
            self.report.proposed += size;
        }
        if self.cfg.counters {
            for v in sends {
                self.send_counted(v);
            }
            return;
        }
        for v in sends {
            let headers = jetstream::headers::build(None, &[("Nats-Msg-Id", &format!("m{v}"))]);
            let sent = self.propose_op(Op::Publish {
                subject: format!("wq.{}", v % 4),
                headers: Some(headers),
                payload: Bytes::from(v.to_be_bytes().to_vec()),
            });
            // Unsent (no leader) counts as sent now: retried later.
            let _ = sent;
            self.id_pending.insert(v, self.step);
            self.event(8000 + v);
        }
    }

    /// Schedules mode: now and then a new schedule (every second, or once
    /// a little later), and time passing every ten steps.
    fn schedule_client(&mut self) {
        if self.step.is_multiple_of(10) {
            self.tick();
        }
        if !self.rng.chance(20) {
            return;
        }
        let repeat = self.rng.below(2) == 0;
        let subject = format!("wq.sched.{}", self.schedules_sent.len());
        let pattern = match repeat {
            true => "@every 1s".to_string(),
            false => {
                let at = self.now() + self.rng.below(300) as i64 * 10_000_000;
                format!("@at {}", jetstream::api::time::rfc3339(at))
            }
        };
        let headers = jetstream::headers::build(
            None,
            &[
                ("Nats-Schedule", &pattern),
                ("Nats-Schedule-Target", "wq.fired"),
            ],
        );
        self.propose_op(Op::Publish {
            subject: subject.clone(),
            headers: Some(headers),
            payload: Bytes::from_static(b"scheduled"),
        });
        self.schedules_sent.insert(subject, repeat);
    }

    /// Time passes on the stream: through the log, or (unsafely) on the
    /// leader alone.
    fn tick(&mut self) {
        if !self.cfg.unsafe_local_ticks {
            self.propose_op(Op::Tick);
            return;
        }
        self.apply_on_leader_alone(Op::Tick);
    }

    /// Test-only faults: the leader applies `op` itself, outside the log.
    /// Whether it did (there is a leader, and it is not fetching).
    fn apply_on_leader_alone(&mut self, op: Op) -> bool {
        let Some(li) = self.leader_index() else {
            return false;
        };
        let e = StreamEntry { ts: self.now(), op };
        let rs = self.servers[li].stores.get_mut(&GROUP);
        let current = rs
            .and_then(|rs| rs.replica.as_mut())
            .filter(|r| r.current().is_some());
        match current {
            Some(replica) => {
                replica.machine_mut().apply_unreplicated(e);
                true
            }
            None => false,
        }
    }

    /// Counters mode: the increment of value `v`, or the batch it ends,
    /// each message with its own id.
    fn send_counted(&mut self, v: u64) {
        let size = self.batch_sizes.get(&v).copied().unwrap_or(1);
        for (k, value) in (v + 1 - size..=v).enumerate() {
            let id = format!("m{value}");
            let incr = counter_increment(value);
            let (batch, seq) = (format!("b{v}"), (k + 1).to_string());
            let mut pairs = vec![("Nats-Msg-Id", id.as_str()), ("Nats-Incr", incr.as_str())];
            if size > 1 {
                pairs.push(("Nats-Batch-Id", &batch));
                pairs.push(("Nats-Batch-Sequence", &seq));
                if value == v {
                    pairs.push(("Nats-Batch-Commit", "1"));
                }
            }
            let _ = self.propose_op(Op::Publish {
                subject: counter_subject(value),
                headers: Some(jetstream::headers::build(None, &pairs)),
                payload: Bytes::new(),
            });
        }
        self.id_pending.insert(v, self.step);
        self.event(8000 + v);
    }

    /// An entry applied to server `i`'s work-queue (or publish-ids)
    /// stream; the leader's outputs are what the client sees.
    fn wq_applied(
        &mut self,
        i: usize,
        leader: bool,
        index: u64,
        data: &[u8],
        applied: Applied,
    ) -> Result<(), Violation> {
        if !leader {
            return Ok(());
        }
        let entry = StreamEntry::decode(data).ok();
        if let (Outcome::Published(ack), Some(e)) = (&applied.outcome, &entry) {
            self.published(ack, &e.op)?;
        }
        let id = self.servers[i].id;
        for o in applied.outputs {
            if let jetstream::output::Output::Publish(m) = o {
                self.delivered(id, index, m)?;
            }
        }
        if let Some(Op::Ack { subject, .. }) = entry.map(|e| e.op) {
            if let Some(seq) = ack_stream_seq(&subject) {
                self.wq_consumed.entry(seq).or_insert(index);
                self.report.acked += 1;
            }
        }
        Ok(())
    }

    /// A publish the leader acknowledged: with a message id, never at two
    /// sequences; in sourced mode, remembered to check the copy against.
    fn published(&mut self, ack: &jetstream::stream::PubAck, op: &Op) -> Result<(), Violation> {
        let Op::Publish {
            headers, payload, ..
        } = op
        else {
            return Ok(());
        };
        let seq = acked_seq(ack);
        let msg_id = headers
            .as_deref()
            .and_then(|h| jetstream::headers::get(h, "Nats-Msg-Id"))
            .map(str::to_string);
        if let (Some(msg_id), Some(seq)) = (msg_id, seq) {
            if let Some(v) = msg_id.strip_prefix('m').and_then(|n| n.parse::<u64>().ok()) {
                self.id_pending.remove(&v);
            }
            match self.id_acked.get(&msg_id) {
                Some(&prev) if prev != seq => {
                    return Err(self.violation(format!(
                        "publish {msg_id} acknowledged at {prev} and again at {seq}"
                    )));
                }
                Some(_) => {}
                None => {
                    self.id_acked.insert(msg_id, seq);
                    self.report.acked += 1;
                }
            }
        }
        if let (true, Some(seq)) = (self.cfg.sourced, seq) {
            let v = u64::from_be_bytes(payload[..8].try_into().expect("8 bytes"));
            self.src_published.insert(v, seq);
        }
        Ok(())
    }

    /// A message leader `id` delivered at log index `index`: never one
    /// whose ack it has applied, before or after a leader change. In
    /// sourced mode the delivery goes to the sourcing stream; otherwise
    /// the client acks it.
    fn delivered(
        &mut self,
        id: u64,
        index: u64,
        m: jetstream::output::OutMsg,
    ) -> Result<(), Violation> {
        let Some(reply) = m.reply.clone().filter(|r| r.starts_with("$JS.ACK.")) else {
            return Ok(());
        };
        if let Some(seq) = ack_stream_seq(&reply) {
            // What the leader has applied: this entry.
            if self.wq_consumed.get(&seq).is_some_and(|&at| at <= index) {
                return Err(self.violation(format!(
                    "acked message {seq} delivered again by leader {id}"
                )));
            }
        }
        if !self.cfg.sourced {
            self.wq_delivered.push(reply);
            return Ok(());
        }
        let f: Vec<&str> = reply.split('.').collect();
        let num = |k: usize| f.get(k).and_then(|n| n.parse::<u64>().ok());
        if let (Some(seq), Some(ts), Some(pending)) = (num(5), num(7), num(8)) {
            self.src_acks.insert(seq, reply.clone());
            self.src_queue.push(Op::Sourced {
                key: SOURCE_KEY.into(),
                origin_seq: seq,
                origin_ts: ts as i64,
                pending,
                after: None,
                subject: m.subject,
                headers: m.headers,
                payload: m.payload,
            });
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
    fn drive(&mut self, f: &Faults) -> Result<(), Violation> {
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

    /// In value mode, a leader that sees a value it proposed committed
    /// acknowledges it, at the index it committed at.
    fn ack_values(&mut self, leader: bool, o: &Output) -> Result<(), Violation> {
        for c in &o.committed {
            if c.data.len() < 8 {
                continue;
            }
            let v = u64::from_be_bytes(c.data[..8].try_into().expect("8 bytes"));
            if leader && self.in_flight.remove(&v).is_some() {
                if let Some(prev) = self.acked.insert(v, c.index) {
                    return Err(self.violation(format!(
                        "value {v} acknowledged twice, at {prev} and {}",
                        c.index
                    )));
                }
                self.report.acked += 1;
                self.event(7000 + c.index);
            }
        }
        Ok(())
    }

    fn send(&mut self, from: u64, frames: Vec<(u64, frame::Frame)>, f: &Faults) {
        for (to, fr) in frames {
            if self.cfg.bandwidth.is_some() {
                // Faults apply when the link carries it (`transmit`).
                self.links
                    .entry((from, to))
                    .or_insert_with(|| Link::new(self.cfg.prioritize_control))
                    .push(fr);
                continue;
            }
            let mut b = BytesMut::new();
            frame::encode(&fr, &mut b);
            let mut bytes = b.to_vec();
            if self.rng.chance(f.drop) {
                continue;
            }
            if self.rng.chance(f.corrupt) {
                let at = self.rng.below(bytes.len() as u64) as usize;
                bytes[at] ^= 1 << self.rng.below(8);
            }
            let at = self.step + self.rng.below(f.max_delay + 1);
            if self.rng.chance(f.duplicate) {
                self.net.push(Packet {
                    at: at + self.rng.below(f.max_delay + 1),
                    from,
                    to,
                    bytes: bytes.clone(),
                });
            }
            self.net.push(Packet {
                at,
                from,
                to,
                bytes,
            });
        }
    }

    /// Moves frames off bandwidth-limited links onto the network.
    fn transmit(&mut self, f: &Faults) {
        let Some(bw) = self.cfg.bandwidth else {
            return;
        };
        for (&(from, to), link) in self.links.iter_mut() {
            // A limited link is a stream (TCP): it does not lose single
            // frames, its connection breaks, and what was queued is lost
            // (as the real transport drops its queue).
            if self.rng.chance(f.drop) {
                while link.pop().is_some() {}
                link.credit = 0;
                continue;
            }
            link.credit = (link.credit + bw).min(bw.max(link.largest_head()));
            while let Some(n) = link.next_len().filter(|&n| n <= link.credit) {
                link.credit -= n;
                let fr = link.pop().expect("head exists");
                let mut b = BytesMut::new();
                frame::encode(&fr, &mut b);
                let mut bytes = b.to_vec();
                if self.rng.chance(f.corrupt) {
                    let at = self.rng.below(bytes.len() as u64) as usize;
                    bytes[at] ^= 1 << self.rng.below(8);
                }
                self.net.push(Packet {
                    at: self.step,
                    from,
                    to,
                    bytes,
                });
            }
        }
    }

    fn deliver(&mut self, f: &Faults) {
        let _ = f;
        let now = self.step;
        let (due, later): (Vec<Packet>, Vec<Packet>) = std::mem::take(&mut self.net)
            .into_iter()
            .partition(|p| p.at <= now);
        self.net = later;
        for p in due {
            if self.cut.contains(&(p.from, p.to)) {
                continue;
            }
            let Some(s) = self.servers.iter_mut().find(|s| s.id == p.to) else {
                continue;
            };
            let Some(e) = s.engine.as_mut() else {
                continue;
            };
            let before = e.refused.frames.total() + e.refused.foreign;
            e.receive(p.from, &p.bytes);
            let after = e.refused.frames.total() + e.refused.foreign;
            self.report.frames_refused += after - before;
            self.report.trace = mix(self.report.trace, p.bytes.len() as u64);
        }
    }

    /// Registers every server as a peer (again and again, as servers do
    /// on start), sometimes with a mangled id, and assigns streams.
    fn meta_client(&mut self) {
        if !self.rng.chance(self.cfg.propose_rate) {
            return;
        }
        let n = self.servers.len() as u64;
        let id = 1 + self.rng.below(n);
        let Some(li) = self.leader_index() else {
            self.report.failed += 1;
            return;
        };
        let known = self.servers[li].meta.peers().any(|p| p.id == id);
        let op = match self.rng.below(4) {
            // A registration whose id was mangled after the server was
            // known by its name: the meta rules refuse it everywhere.
            2 if known => MetaOp::AddPeer {
                id: id ^ (1 << (8 + self.rng.below(40))),
                name: format!("s{id}"),
            },
            0..=2 => MetaOp::AddPeer {
                id,
                name: format!("s{id}"),
            },
            _ => {
                let mut peers: Vec<u64> = (1..=n).collect();
                peers.truncate(1 + self.rng.below(n) as usize);
                let v = self.next_value;
                self.next_value += 1;
                MetaOp::AssignStream {
                    name: format!("S{v}"),
                    config: "{}".into(),
                    peers,
                    created: 0,
                    reply: String::new(),
                }
            }
        };
        let e = self.servers[li].engine.as_mut().expect("leader is up");
        if e.propose(GROUP, op.encode()).is_ok() {
            self.report.proposed += 1;
        }
    }
}

/// Applied entries between snapshots in the stream and meta modes.
const COMPACT_EVERY: u64 = 150;

/// A server's files other than its identity: the bit-flip faults hit
/// these. (One damaged copy of the identity is repaired from the other;
/// both damaged stop a server for good, with an error:
/// `replication::identity`'s tests show both.)
fn log_files(dir: &MemDir) -> Vec<String> {
    let mut names = dir.names();
    names.retain(|n| n != identity::FILE && n != identity::COPY);
    names
}

/// The groups a configuration replicates.
fn groups(cfg: &Config) -> &'static [u64] {
    if cfg.sourced {
        &[GROUP, SOURCING_GROUP]
    } else {
        &[GROUP]
    }
}

fn is_damaged(cfg: &Config, e: &Engine) -> bool {
    groups(cfg).iter().any(|&g| e.is_damaged(g))
}

/// The applied index of a server's replicated state of `group` (0 in
/// value mode).
fn state_snapshot_index(s: &Server, group: u64) -> u64 {
    let stream = match group == SOURCING_GROUP {
        true => s.agg(),
        false => s.wq(),
    };
    match stream {
        Some(w) => w.applied(),
        None => s.meta.applied(),
    }
}

/// A snapshot of a server's meta state: (its applied index, data); in
/// value mode there is no state (index from the engine). Streams take
/// theirs in `replica::snapshot`.
fn state_snapshot(s: &Server, group: u64) -> (Option<u64>, Vec<u8>) {
    debug_assert!(!s.stores.contains_key(&group));
    if s.meta.applied() > 0 {
        return (Some(s.meta.applied()), s.meta.snapshot());
    }
    (None, Vec::new())
}

/// Replaces a server's replicated state of `group` with a snapshot's
/// (empty data: the state a new group starts with). Streams' replicas
/// take theirs (`Sim::absorb`).
fn restore_state(cfg: &Config, s: &mut Server, group: u64, data: &[u8]) {
    debug_assert!(!s.stores.contains_key(&group), "replicas take their own");
    s.compacted_at.remove(&group);
    if cfg.meta {
        s.meta = if data.is_empty() {
            Meta::new()
        } else {
            Meta::restore(data).expect("meta snapshots decode")
        };
    }
}

/// The groups that replicate a stream, each kept in a file store.
fn stream_groups(cfg: &Config) -> impl Iterator<Item = u64> {
    let wq = cfg.work_queue || cfg.publish_ids;
    let groups: &'static [u64] = match (wq, cfg.sourced) {
        (true, true) => &[GROUP, SOURCING_GROUP],
        (true, false) => &[GROUP],
        _ => &[],
    };
    groups.iter().copied()
}

/// The stream group `group` replicates, over `store`.
fn stream_of(cfg: &Config, group: u64, store: Box<dyn store::MsgStore>) -> Option<StreamMachine> {
    match group == SOURCING_GROUP {
        true => sourcing_stream(cfg, store),
        false => replicated_stream(cfg, store),
    }
}

/// In sourced mode, the stream every replica keeps that sources `WQ`.
fn sourcing_stream(cfg: &Config, store: Box<dyn store::MsgStore>) -> Option<StreamMachine> {
    if !cfg.sourced {
        return None;
    }
    let mut cfg = jetstream::api::StreamConfig {
        name: "AGG".into(),
        sources: vec![jetstream::api::StreamSource {
            name: "WQ".into(),
            ..Default::default()
        }],
        storage: jetstream::api::Storage::File,
        ..Default::default()
    };
    jetstream::stream::config::check(&mut cfg, false, false).expect("valid config");
    Some(StreamMachine::new(cfg, 1, store).expect("stream"))
}

/// The stream every replica keeps, in the modes that replicate one.
fn replicated_stream(cfg: &Config, store: Box<dyn store::MsgStore>) -> Option<StreamMachine> {
    if !(cfg.work_queue || cfg.publish_ids) {
        return None;
    }
    let retention = if cfg.work_queue {
        jetstream::api::Retention::WorkQueue
    } else {
        jetstream::api::Retention::Limits
    };
    let counters = cfg.counters;
    let mut stream_cfg = jetstream::api::StreamConfig {
        name: "WQ".into(),
        subjects: vec!["wq.>".into()],
        retention,
        storage: jetstream::api::Storage::File,
        allow_msg_counter: counters,
        allow_atomic: counters,
        allow_msg_schedules: cfg.schedules,
        ..Default::default()
    };
    jetstream::stream::config::check(&mut stream_cfg, false, false).expect("valid config");
    Some(StreamMachine::new(stream_cfg, 1, store).expect("stream"))
}

/// Counters mode: the subject value `v` counts on, and by how much.
pub(crate) fn counter_subject(v: u64) -> String {
    format!("wq.{}", v % 3)
}

pub(crate) fn counter_increment(v: u64) -> String {
    format!("+{}", v % 5 + 1)
}

/// The stream sequence an ack subject names:
/// `$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>`.
fn ack_stream_seq(subject: &str) -> Option<u64> {
    subject.split('.').nth(5)?.parse().ok()
}

fn live_seqs(wq: &StreamMachine) -> Vec<u64> {
    let store = wq.stream().store();
    let mut out = Vec::new();
    let mut at = 1;
    while let Ok(Some(m)) = store.next_matching(at, &store::Filter::all()) {
        out.push(m.seq);
        at = m.seq + 1;
    }
    out
}

/// Runs one seed with the default configuration.
pub fn run_seed(seed: u64) -> Result<Report, Violation> {
    Sim::new(Config::new(seed)).run()
}

/// The sequence a PubAck reports (as its JSON's `seq`), if it stored
/// anything.
fn acked_seq(ack: &jetstream::stream::PubAck) -> Option<u64> {
    match ack {
        jetstream::stream::PubAck::Stored(seq)
        | jetstream::stream::PubAck::Counted(seq, _)
        | jetstream::stream::PubAck::Duplicate(seq)
        | jetstream::stream::PubAck::Batched { seq, .. } => Some(*seq).filter(|&s| s > 0),
        jetstream::stream::PubAck::Error(_) | jetstream::stream::PubAck::Staged => None,
    }
}
