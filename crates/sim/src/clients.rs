//! The workload: clients that propose values, publish to and consume
//! from streams (with message ids, counters, schedules, a source), and
//! register peers in the meta state; what they see of what was applied;
//! and the streams each mode replicates.

use bytes::Bytes;
use jsservice::meta_sm::MetaOp;
use jsservice::stream_sm::{Applied, Entry as StreamEntry, Op, Outcome, StreamMachine};
use replication::engine::Committed;
use replication::node::Input;

use crate::{Config, Sim, Violation, GROUP, SOURCING_GROUP};

/// The source key of the sourcing stream's one source (origin `WQ`, no
/// filter, no transform).
const SOURCE_KEY: &str = "WQ > >";

impl Sim {
    pub(crate) fn client(&mut self) {
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
        // Some proposals carry several entries: submits the node takes
        // in one cycle, which it proposes together (`Engine::propose_all`).
        // A submit to a server that no longer leads by then is dropped,
        // and the value is never acknowledged.
        let n = match self.rng.chance(self.cfg.batch_rate) {
            true => 2 + self.rng.below(3),
            false => 1,
        };
        let first = self.next_value;
        let leader = self.servers[li].id;
        for v in first..first + n {
            let mut data = v.to_be_bytes().to_vec();
            data.resize(self.cfg.payload_size.max(8), b'x');
            let node = self.servers[li].node();
            node.handle(Input::Submit { group: GROUP, data });
            self.in_flight.insert(v, leader);
            self.report.proposed += 1;
            self.event(5000 + v);
        }
        self.next_value = first + n;
    }

    /// The simulated wall clock: 10 ms a step, in Unix nanoseconds.
    pub(crate) fn now(&self) -> i64 {
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
        let node = self.servers[li].node();
        node.propose(group, e.encode()).is_ok()
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
            self.propose_op(Op::ConsumerCreate {
                request: Bytes::from_static(req),
                subject_name: Some("C".into()),
                filter: None,
                durable_api: false,
                generated: "C".into(),
                identity: None,
                limits: Default::default(),
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
                let e = self.servers[li].node().call();
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
    pub(crate) fn apply_stream(
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
    pub(crate) fn tick(&mut self) {
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
    pub(crate) fn published(
        &mut self,
        ack: &jetstream::stream::PubAck,
        op: &Op,
    ) -> Result<(), Violation> {
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

    /// In value mode, a leader that sees a value it proposed committed
    /// acknowledges it, at the index it committed at.
    pub(crate) fn ack_values(&mut self, leader: bool, c: &Committed) -> Result<(), Violation> {
        if c.data.len() < 8 {
            return Ok(());
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
        Ok(())
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
                // Two accounts, each with the same stream names.
                MetaOp::AssignStream {
                    account: format!("A{}", v % 2),
                    name: format!("S{}", v / 2),
                    config: "{}".into(),
                    peers,
                    created: 0,
                    reply: String::new(),
                }
            }
        };
        let node = self.servers[li].node();
        if node.propose(GROUP, op.encode()).is_ok() {
            self.report.proposed += 1;
        }
    }
}

/// The stream group `group` replicates, over `store`.
pub(crate) fn stream_of(
    cfg: &Config,
    group: u64,
    store: Box<dyn store::MsgStore>,
) -> Option<StreamMachine> {
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

pub(crate) fn live_seqs(wq: &StreamMachine) -> Vec<u64> {
    let store = wq.stream().store();
    let mut out = Vec::new();
    let mut at = 1;
    while let Ok(Some(m)) = store.next_matching(at, &store::Filter::all()) {
        out.push(m.seq);
        at = m.seq + 1;
    }
    out
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
