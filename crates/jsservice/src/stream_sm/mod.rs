//! A stream as a replicated state machine. Every input that changes a
//! stream — publishes, consumer creation, pull requests, acks, and the
//! clock ticks that drive ack timeouts and expiry — is an entry in the
//! stream's Raft log, stamped with the leader's time. Every replica
//! applies the same entries in the same order to the same pure
//! `jetstream::Stream`, so work-queue and interest removals, deliveries and
//! redeliveries are identical everywhere (incident 2: acks applied on the
//! leader alone let consumed messages come back after a leader change).
//!
//! Every replica computes the outputs (PubAcks, deliveries); only the
//! leader encodes a PubAck's JSON and sends them.
//!
//! - `op`: the inputs ([`Op`]) and the entries ([`Entry`]) that carry
//!   them; `codec`: their bytes, one codec per kind of op.
//! - `decide` (below) dispatches each input to its decision, by area:
//!   `publish`, `consumers`, `admin` (the stream as a whole), `sources`
//!   (mirrors and sources); `outcome`: what a decision gives.
//! - `snapshot`: the machine's state as bytes, and back.

mod admin;
mod codec;
mod consumers;
mod op;
mod outcome;
mod publish;
mod snapshot;
mod sources;

use bytes::Bytes;
use jetstream::api::{ApiError, StreamConfig};
use jetstream::output::Output;
use jetstream::stream::Stream;
use store::MsgStore;

pub use self::codec::encode_publish;
pub use self::op::{Entry, Op};
pub use self::outcome::{Acked, Applied, Outcome};
pub use self::snapshot::RestoreError;
pub use crate::codec::DecodeError;
use crate::summary::StoreSummary;

/// The store a replica keeps a stream's messages in (its durability is
/// the Raft log's): memory, counting sizes as the stream's storage type
/// does, so limits and reported bytes are the same as one server's.
pub fn replica_store(config: &StreamConfig) -> Box<dyn MsgStore> {
    match config.storage {
        jetstream::api::Storage::Memory => Box::new(store::MemStore::new()),
        jetstream::api::Storage::File => Box::new(store::MemStore::sized_as_file()),
    }
}

pub struct StreamMachine {
    stream: Stream,
    applied: u64,
    /// The time of the last entry applied (the leader's clock): what a
    /// snapshot is as of.
    last_ts: i64,
}

impl StreamMachine {
    /// A replica of a new stream; `config` must have been checked.
    pub fn new(
        config: StreamConfig,
        created: i64,
        store: Box<dyn MsgStore>,
    ) -> Result<Self, jetstream::api::ApiError> {
        Ok(StreamMachine {
            stream: Stream::create(config, created, store)?,
            applied: 0,
            last_ts: created,
        })
    }

    /// The machine over a stream read back from its own storage (one
    /// server: messages in its store, consumers from their journals).
    pub fn over(stream: Stream) -> Self {
        let last_ts = stream.created;
        StreamMachine {
            stream,
            applied: 0,
            last_ts,
        }
    }

    pub fn stream(&self) -> &Stream {
        &self.stream
    }

    /// The stream, for what its driver does beside inputs: making its
    /// writes durable (store sync handles, consumer states), and removing
    /// it. Inputs go through [`StreamMachine::apply`] or
    /// [`StreamMachine::apply_input`].
    pub fn stream_mut(&mut self) -> &mut Stream {
        &mut self.stream
    }

    /// The whole state as of the last applied entry, for a Raft snapshot:
    /// config, messages (with their sequences and times), where the
    /// sequence stands, each consumer's config, durable and runtime state
    /// (waiting pull requests included), source positions and the
    /// duplicate window. It is as of the last entry's time; `now` is used
    /// only before any entry was applied.
    pub fn snapshot(&self, now: i64) -> Vec<u8> {
        snapshot::whole(&self.of(), now)
    }

    /// The state as of the last applied entry without the messages: what
    /// the store holds is summarized ([`StoreSummary`]: sequences and
    /// deleted ranges), so the size does not depend on how many messages
    /// the stream holds. A replica restores it over a store that matches
    /// the summary ([`StreamMachine::restore_state`]): its own, opened at
    /// the snapshot's mark, or one caught up from a peer (`catchup`).
    pub fn snapshot_state(&self, now: i64) -> Vec<u8> {
        snapshot::state(&self.of(), now)
    }

    fn of(&self) -> snapshot::Of<'_> {
        snapshot::Of {
            stream: &self.stream,
            applied: self.applied,
            last_ts: self.last_ts,
        }
    }

    /// A replica rebuilt from [`StreamMachine::snapshot`] bytes, over
    /// the empty store `store` makes for its config.
    pub fn restore(
        data: &[u8],
        store: impl FnOnce(&StreamConfig) -> Box<dyn MsgStore>,
    ) -> Result<Self, DecodeError> {
        snapshot::restore(data, store).map(Self::restored)
    }

    /// The store summary of [`StreamMachine::snapshot_state`] bytes: what
    /// a replica's store must hold before [`StreamMachine::restore_state`].
    pub fn snapshot_summary(data: &[u8]) -> Result<(StreamConfig, StoreSummary), DecodeError> {
        snapshot::summary(data)
    }

    /// A replica rebuilt from [`StreamMachine::snapshot_state`] bytes over
    /// `store`, which must already hold what the snapshot's summary says.
    pub fn restore_state(data: &[u8], store: Box<dyn MsgStore>) -> Result<Self, RestoreError> {
        snapshot::restore_state(data, store).map(Self::restored)
    }

    fn restored(r: snapshot::Restored) -> Self {
        StreamMachine {
            stream: r.stream,
            applied: r.applied,
            last_ts: r.last_ts,
        }
    }

    /// The store, the machine given up (a replica catching up to a state
    /// snapshot keeps its store and builds the machine again over it).
    pub fn into_store(self) -> Box<dyn MsgStore> {
        self.stream.into_store()
    }

    /// Whether `data` is a state snapshot ([`StreamMachine::snapshot_state`]:
    /// messages to be fetched) rather than one that carries its messages.
    pub fn is_state_snapshot(data: &[u8]) -> bool {
        snapshot::is_state(data)
    }

    /// The last log index applied.
    pub fn applied(&self) -> u64 {
        self.applied
    }

    /// Applies the committed entry at `index`. Entries at or below the
    /// last applied index are skipped (a replay after restart); an entry
    /// that does not decode is skipped on every replica alike.
    ///
    /// Indexes may skip (Raft's own empty and configuration entries are
    /// not the stream's) but never go back.
    pub fn apply(&mut self, index: u64, data: &Bytes) -> Applied {
        if index <= self.applied {
            return Applied::default();
        }
        self.applied = index;
        let Ok(e) = Entry::decode_shared(data) else {
            return Applied::default();
        };
        self.apply_entry(e)
    }

    /// Test-only: applies an input on this replica alone, outside the
    /// log, as a server that handles acks on the leader only would. The
    /// simulator uses it to show the divergence that causes.
    #[doc(hidden)]
    pub fn apply_unreplicated(&mut self, e: Entry) -> Applied {
        self.apply_entry(e)
    }

    fn apply_entry(&mut self, e: Entry) -> Applied {
        let now = e.ts;
        let mut out = self.decide(e);
        let _ = self.stream.pump(now);
        out.outputs.extend(self.stream.take_outputs());
        out
    }

    /// Applies an input outside any log, as one server does: the same
    /// decision as [`StreamMachine::apply`], with no pump after it (the
    /// driver pumps once per batch, [`StreamMachine::pump`]).
    pub fn apply_input(&mut self, e: Entry) -> Applied {
        let mut out = self.decide(e);
        out.outputs.extend(self.stream.take_outputs());
        out
    }

    /// Lets consumers deliver what arrived since the last pump.
    pub fn pump(&mut self, now: i64) -> Result<Vec<Output>, ApiError> {
        let r = self.stream.pump(now);
        let outputs = self.stream.take_outputs();
        r.map(|()| outputs)
    }

    /// The state machine's one step: what `e` does to the stream and
    /// what its requester is told. Each kind of input's decision is in
    /// the module of its area: `publish`, `consumers`, `admin`, `sources`.
    fn decide(&mut self, e: Entry) -> Applied {
        let now = e.ts;
        self.last_ts = now;
        let (reply, op) = match e.op {
            Op::Replied { reply, op } => (Some(reply), *op),
            op => (None, op),
        };
        let (s, to) = (&mut self.stream, reply.as_deref());
        let mut outputs = Vec::new();
        let outcome = match op {
            Op::Publish { .. } => publish::publish(s, op, to, now),
            Op::ConsumerCreate { .. } => consumers::create(s, op, now),
            Op::Pull { .. } => consumers::pull(s, op, now, &mut outputs),
            Op::Ack { .. } => consumers::ack(s, op, to, now),
            Op::DeleteConsumer { .. } => consumers::delete(s, op),
            Op::PushInterest { .. } => consumers::push_interest(s, op, now),
            Op::FlowControl { .. } => consumers::flow_control(s, op),
            Op::PauseConsumer { .. } => consumers::pause(s, op, now),
            Op::DropPulls { .. } => consumers::drop_pulls(s, op),
            Op::ResetConsumer { .. } => consumers::reset(s, op, now),
            Op::UnpinConsumer { .. } => consumers::unpin(s, op),
            Op::Tick => admin::tick(s, now),
            Op::Purge { .. } => admin::purge(s, op),
            Op::DeleteMsg { .. } => admin::delete_msg(s, op),
            Op::UpdateConfig { .. } => admin::update_config(s, op),
            Op::Barrier { .. } => admin::barrier(op),
            Op::Sourced { .. } => sources::sourced(s, op, now),
            Op::Copies { .. } => sources::copies(s, op, now),
            Op::SourceFlowControl { .. } => sources::source_flow_control(s, op),
            Op::ResetSource { .. } => sources::reset_source(s, op),
            // Nested replies are refused when decoding.
            Op::Replied { .. } => Outcome::None,
        };
        Applied {
            outcome,
            outputs,
            reply,
            ts: now,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catchup;

    fn wq() -> StreamMachine {
        let mut cfg = StreamConfig {
            name: "WQ".into(),
            subjects: vec!["wq.>".into()],
            retention: jetstream::api::Retention::WorkQueue,
            storage: jetstream::api::Storage::Memory,
            ..Default::default()
        };
        jetstream::stream::config::check(&mut cfg, false, false).unwrap();
        StreamMachine::new(cfg, 1, Box::new(store::MemStore::new())).unwrap()
    }

    /// Applies `ops` from `index` on, returning the ack subjects delivered.
    fn feed(rs: &mut StreamMachine, index: &mut u64, ops: Vec<Op>) -> Vec<String> {
        let mut acks = Vec::new();
        for op in ops {
            *index += 1;
            let e = Entry {
                ts: 1_000_000_000 * *index as i64,
                op,
            };
            for o in rs.apply(*index, &e.encode().into()).outputs {
                if let Output::Publish(m) = o {
                    acks.extend(m.reply.filter(|r| r.starts_with("$JS.ACK.")));
                }
            }
        }
        acks
    }

    fn publishes(from: u64, n: u64) -> Vec<Op> {
        (from..from + n)
            .map(|i| Op::Publish {
                subject: format!("wq.{}", i % 3),
                headers: Some(jetstream::headers::build(
                    None,
                    &[("Nats-Msg-Id", &format!("id{i}"))],
                )),
                payload: Bytes::from(format!("m{i}")),
            })
            .collect()
    }

    fn create_consumer(request: &'static [u8]) -> Op {
        Op::ConsumerCreate {
            request: Bytes::from_static(request),
            subject_name: Some("C".into()),
            filter: None,
            durable_api: false,
            generated: "G".into(),
            identity: None,
            limits: Default::default(),
        }
    }

    fn pull() -> Op {
        Op::Pull {
            consumer: "C".into(),
            request: Bytes::from_static(br#"{"batch":7,"no_wait":true}"#),
            reply: "inbox".into(),
        }
    }

    fn acks(subjects: &[String]) -> Vec<Op> {
        subjects
            .iter()
            .map(|s| Op::Ack {
                consumer: "C".into(),
                subject: s.clone(),
                body: Bytes::from_static(b"+ACK"),
            })
            .collect()
    }

    fn view(rs: &StreamMachine) -> (Vec<u64>, String) {
        let store = rs.stream().store();
        let mut seqs = Vec::new();
        let mut at = 1;
        while let Ok(Some(m)) = store.next_matching(at, &store::Filter::all()) {
            seqs.push(m.seq);
            at = m.seq + 1;
        }
        let c = rs.stream().consumer_info("C", 0).unwrap();
        // Last-activity times are informational and not in snapshots.
        let c = format!(
            "{} {} {} {} {} {} {}",
            c.delivered.consumer_seq,
            c.delivered.stream_seq,
            c.ack_floor.consumer_seq,
            c.ack_floor.stream_seq,
            c.num_ack_pending,
            c.num_pending,
            c.num_redelivered
        );
        (seqs, c)
    }

    /// A replica restored from a snapshot and one that applied the whole
    /// log agree, before and after the entries that follow.
    #[test]
    fn a_restored_replica_matches_one_that_replayed_everything() {
        for restore in [Restore::Whole, Restore::StateAndCatchUp] {
            restored_replica_matches(restore);
        }
    }

    #[derive(Debug, Clone, Copy)]
    enum Restore {
        /// From a snapshot with the messages in it.
        Whole,
        /// From a state snapshot, over a store caught up from `a`'s.
        StateAndCatchUp,
    }

    fn restored(a: &StreamMachine, how: Restore, now: i64) -> StreamMachine {
        match how {
            Restore::Whole => {
                let snap = a.snapshot(now);
                StreamMachine::restore(&snap, |_| Box::new(store::MemStore::new())).unwrap()
            }
            Restore::StateAndCatchUp => {
                let snap = a.snapshot_state(now);
                let (_, target) = StreamMachine::snapshot_summary(&snap).unwrap();
                let mut store: Box<dyn MsgStore> = Box::new(store::MemStore::new());
                let fresh = Box::new(store::MemStore::new());
                assert!(
                    matches!(
                        StreamMachine::restore_state(&snap, fresh),
                        Err(RestoreError::Store(_))
                    ),
                    "an empty store does not match a stream with messages"
                );
                let mut next = catchup::prepare(store.as_mut(), &target).unwrap();
                while let Some(asked) = next {
                    let chunk = catchup::serve(a.stream().store(), asked, a.applied()).unwrap();
                    next = catchup::fill(store.as_mut(), &target, asked, chunk).unwrap();
                }
                catchup::finish(store.as_mut(), &target).unwrap();
                StreamMachine::restore_state(&snap, store).unwrap()
            }
        }
    }

    fn restored_replica_matches(how: Restore) {
        let mut a = wq();
        let mut i = 0;
        let req = br#"{"stream_name":"WQ","config":{"durable_name":"C","ack_policy":"explicit"}}"#;
        feed(&mut a, &mut i, vec![create_consumer(req)]);
        feed(&mut a, &mut i, publishes(1, 20));
        let delivered = feed(&mut a, &mut i, vec![pull()]);
        assert_eq!(delivered.len(), 7);
        feed(&mut a, &mut i, acks(&delivered[..4]));
        let mut b = restored(&a, how, 1_000_000_000 * i as i64);
        assert_eq!(b.applied(), a.applied());
        assert_eq!(view(&a), view(&b));
        // The same later entries on both: acks of what was delivered
        // before the snapshot, a duplicate publish, new ones, a pull.
        let mut ib = i;
        let mut later = acks(&delivered[4..]);
        later.extend(publishes(15, 10));
        later.push(pull());
        let da = feed(&mut a, &mut i, later.clone());
        let db = feed(&mut b, &mut ib, later);
        assert_eq!(da, db);
        assert_eq!(view(&a), view(&b));
        // 20, then 21-24 (15-20 were duplicates by message id), less the 7
        // acked: the window survived the snapshot.
        assert_eq!(view(&a).0.len(), 24 - 7);
        // Deletes and purges go through the log too, alike on both.
        let ops = vec![
            Op::DeleteMsg {
                seq: 20,
                erase: false,
            },
            Op::Purge {
                request: Bytes::from_static(br#"{"filter":"wq.1"}"#),
            },
        ];
        feed(&mut a, &mut i, ops.clone());
        feed(&mut b, &mut ib, ops);
        assert_eq!(view(&a), view(&b));
        assert!(!view(&a).0.contains(&20));
    }

    /// What a snapshot must carry beyond messages and durable consumer
    /// state: a pull request still waiting (the next publish is delivered
    /// to it on every replica alike) and the ids of messages already
    /// consumed and removed (a retried publish is still a duplicate).
    #[test]
    fn a_restored_replica_keeps_waiting_pulls_and_removed_ids() {
        let mut a = wq();
        let mut i = 0;
        let req = br#"{"stream_name":"WQ","config":{"durable_name":"C","ack_policy":"explicit"}}"#;
        feed(&mut a, &mut i, vec![create_consumer(req)]);
        feed(&mut a, &mut i, publishes(1, 3));
        let waiting = Op::Pull {
            consumer: "C".into(),
            request: Bytes::from_static(br#"{"batch":7,"expires":3600000000000}"#),
            reply: "inbox".into(),
        };
        let delivered = feed(&mut a, &mut i, vec![waiting]);
        assert_eq!(delivered.len(), 3, "the pull waits for more");
        feed(&mut a, &mut i, acks(&delivered));
        assert!(view(&a).0.is_empty(), "consumed and removed");
        let snap = a.snapshot(0);
        let mut b = StreamMachine::restore(&snap, |_| Box::new(store::MemStore::new())).unwrap();
        let mut ib = i;
        let mut later = publishes(4, 1);
        later.extend(publishes(1, 1));
        let da = feed(&mut a, &mut i, later.clone());
        let db = feed(&mut b, &mut ib, later);
        assert_eq!(da.len(), 1, "delivered to the waiting pull");
        assert_eq!(da, db);
        assert_eq!(view(&a), view(&b));
        assert_eq!(view(&a).0, vec![4], "the retried id1 is a duplicate");
    }

    fn sourced(seq: u64) -> Op {
        Op::Sourced {
            key: "WQ > >".into(),
            origin_seq: seq,
            origin_ts: seq as i64,
            pending: 0,
            after: seq.is_multiple_of(2).then(|| seq - 1),
            subject: format!("wq.{seq}"),
            headers: None,
            payload: Bytes::from(format!("m{seq}")),
        }
    }

    /// A memory stream `AGG` that sources `WQ`.
    fn sourcing_wq() -> StreamMachine {
        let mut cfg = StreamConfig {
            name: "AGG".into(),
            sources: vec![jetstream::api::StreamSource {
                name: "WQ".into(),
                ..Default::default()
            }],
            storage: jetstream::api::Storage::Memory,
            ..Default::default()
        };
        jetstream::stream::config::check(&mut cfg, false, false).unwrap();
        StreamMachine::new(cfg, 1, Box::new(store::MemStore::new())).unwrap()
    }

    /// A run of copies applies as its copies would one by one: each
    /// stored only right after the one it names, so a run with a gap
    /// stores up to the gap, and a run of duplicates stores nothing.
    #[test]
    fn a_run_of_copies_applies_in_order_up_to_a_gap() {
        let mut a = sourcing_wq();
        let copy = |seq: u64, names: Option<u64>| {
            let mut op = sourced(seq);
            if let Op::Sourced { after, .. } = &mut op {
                *after = names;
            }
            op
        };
        let mut run = |index: u64, copies: Vec<Op>| {
            let e = Entry {
                ts: index as i64,
                op: Op::Copies { copies },
            };
            a.apply(index, &e.encode().into()).outcome
        };
        // 4 names 3, which never came: refused, as is 5 after it.
        let outcome = run(
            1,
            vec![
                copy(1, None),
                copy(2, Some(1)),
                copy(4, Some(3)),
                copy(5, Some(4)),
            ],
        );
        assert!(matches!(outcome, Outcome::Sourced(Ok(true))), "{outcome:?}");
        let outcome = run(2, vec![copy(1, None), copy(2, None)]);
        assert!(
            matches!(outcome, Outcome::Sourced(Ok(false))),
            "{outcome:?}"
        );
        assert_eq!(a.stream().source_positions().get("WQ > >"), Some(&2));
        assert_eq!(a.stream().store().state().msgs, 2);
    }

    /// A sourcing stream's position is replicated state: a replica
    /// restored from a snapshot refuses what the source already
    /// delivered, even though a work-queue origin no longer has it.
    #[test]
    fn source_positions_survive_a_snapshot() {
        let mut a = sourcing_wq();
        let stored = |rs: &mut StreamMachine, index: u64, seq: u64| {
            let e = Entry {
                ts: index as i64,
                op: sourced(seq),
            };
            match rs.apply(index, &e.encode().into()).outcome {
                Outcome::Sourced(Ok(stored)) => stored,
                other => panic!("{other:?}"),
            }
        };
        for i in 1..=3 {
            assert!(stored(&mut a, i, i));
        }
        assert!(!stored(&mut a, 4, 2), "already had");
        let snap = a.snapshot(5);
        let mut b = StreamMachine::restore(&snap, |_| Box::new(store::MemStore::new())).unwrap();
        assert!(!stored(&mut b, 5, 3), "position restored");
        assert!(stored(&mut b, 6, 4));
        assert_eq!(b.stream().store().state().msgs, 4);
        let m = b.stream().store().get(4).unwrap().unwrap();
        assert_eq!(
            jetstream::headers::get(m.headers.as_deref().unwrap(), "Nats-Stream-Source"),
            Some("WQ 4 > > wq.4")
        );
    }
}
