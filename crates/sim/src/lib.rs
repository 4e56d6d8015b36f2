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

use jsservice::meta_sm::Meta;
use jsservice::stream_sm::Op;
use replication::identity;
use replication::node::NodeCore;
use replication::rng::Rng;
use store::MemDir;

mod checks;
mod clients;
mod faults;
mod repair;
mod replica;
mod world;

pub use faults::Faults;

pub(crate) use clients::{counter_increment, counter_subject, live_seqs, stream_of};
pub(crate) use world::{node_clock, stream_groups, Link, Packet, Server};

/// The Raft group the simulation replicates: values, the work-queue
/// stream, or the meta state.
pub const GROUP: u64 = 1;

/// In sourced mode, the group of the stream that sources the work queue.
pub const SOURCING_GROUP: u64 = 2;

/// Milliseconds a step stands for ([`Sim::clock`]).
pub(crate) const STEP_MS: u64 = 10;

/// Extra quiet steps in sourced mode, without publishing, for the work
/// queue to drain into the sourcing stream.
const DRAIN_STEPS: u64 = 600;

/// Quiet steps without any client activity at the end of a run on
/// bandwidth-limited links.
const SETTLE_STEPS: u64 = 100;

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
    /// A whole fetch that does not match its snapshot (`Event::Diverged`)
    /// is a violation (on by default; `tests/seeds.rs` keeps seed 5016,
    /// which met it before fetched stores stopped serving older states).
    /// Off, it is counted in `Report::divergences` instead.
    pub strict_fetches: bool,
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
            strict_fetches: true,
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
    /// Whole fetches that did not match their snapshot.
    pub divergences: u64,
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

pub(crate) fn mix(h: u64, v: u64) -> u64 {
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
                let e = cfg.engine(me.id, &dir, rng.next_u64());
                let mut node = NodeCore::new(e, cfg.node(), node_clock(0));
                for &g in groups(&cfg) {
                    node.create_group(g, &voters).expect("fresh group");
                }
                let stores: BTreeMap<u64, replica::ReplicaStore> = stream_groups(&cfg)
                    .map(|g| (g, replica::ReplicaStore::new()))
                    .collect();
                Server {
                    id,
                    dir,
                    node: Some(node),
                    down_for: 0,
                    flipped: false,
                    meta: Meta::new(),
                    stores,
                    syncing: Vec::new(),
                    rewrites: Vec::new(),
                    rewritten: Vec::new(),
                    snapshots_asked: Vec::new(),
                    inbox: Vec::new(),
                    cycling: false,
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

    /// The current leader's id and term, if any server leads.
    pub fn leader(&self) -> Option<(u64, u64)> {
        self.leader_of(GROUP)
    }

    /// The current leader of `group` and its term.
    pub fn leader_of(&self, group: u64) -> Option<(u64, u64)> {
        let i = self.leader_index_of(group)?;
        let e = self.servers[i].engine()?;
        Some((e.id(), e.leader(group)?.0))
    }

    /// The highest term any live server is in.
    pub fn max_term(&self) -> u64 {
        self.servers
            .iter()
            .filter_map(|s| s.engine()?.leader(GROUP))
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
        self.tick_nodes();
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

    fn leader_index(&self) -> Option<usize> {
        self.leader_index_of(GROUP)
    }

    fn leader_index_of(&self, group: u64) -> Option<usize> {
        self.servers
            .iter()
            .position(|s| s.engine().is_some_and(|e| e.is_leader(group)))
    }
}

/// The groups a configuration replicates.
pub(crate) fn groups(cfg: &Config) -> &'static [u64] {
    if cfg.sourced {
        &[GROUP, SOURCING_GROUP]
    } else {
        &[GROUP]
    }
}

/// Runs one seed with the default configuration.
pub fn run_seed(seed: u64) -> Result<Report, Violation> {
    Sim::new(Config::new(seed)).run()
}
