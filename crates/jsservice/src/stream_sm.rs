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

use bytes::{Buf, BufMut, Bytes, BytesMut};
use jetstream::api::{
    ApiError, ConsumerConfig, ConsumerInfo, CreateConsumerRequest, PullRequest, StreamConfig,
};
use jetstream::consumer::state::ConsumerState;
use jetstream::consumer::AccountConsumerLimits;
use jetstream::output::Output;
use jetstream::stream::{fast_batch, Incoming, PubAck, Stream};
use store::MsgStore;

pub use crate::codec::DecodeError;
use crate::codec::{
    get_bytes, get_msg, get_msg_in, get_opt, get_string, put_bytes, put_msg, put_opt,
};
use crate::status;
use crate::summary::StoreSummary;

/// Version 2 added source positions; 3 each consumer's runtime state and
/// the duplicate window, so a restored replica is exactly one that
/// applied every entry.
const SNAPSHOT_VERSION: u32 = 3;

/// [`StreamMachine::snapshot_state`]: version 3's state with a store
/// summary in place of the messages.
const STATE_SNAPSHOT_VERSION: u32 = 4;

/// What every snapshot starts with.
struct Head {
    version: u32,
    applied: u64,
    now: i64,
    created: i64,
    config: StreamConfig,
}

impl Head {
    fn decode(b: &mut &[u8]) -> Result<Head, DecodeError> {
        if b.remaining() < 4 + 8 + 8 + 8 {
            return Err(DecodeError::Short);
        }
        let version = b.get_u32_le();
        let applied = b.get_u64_le();
        let now = b.get_i64_le();
        let created = b.get_i64_le();
        let config = serde_json::from_slice(&get_bytes(b)?).map_err(|_| DecodeError::Kind(0))?;
        Ok(Head {
            version,
            applied,
            now,
            created,
            config,
        })
    }
}

/// Why a state snapshot could not be restored over a store.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RestoreError {
    #[error(transparent)]
    Decode(#[from] DecodeError),
    /// The store does not hold what the snapshot says: catch it up first.
    #[error("{0}")]
    Store(String),
}

/// One input to a replicated stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    Publish {
        subject: String,
        headers: Option<Bytes>,
        payload: Bytes,
    },
    /// A consumer create request (its JSON, as the API received it).
    CreateConsumer {
        name: String,
        request: Bytes,
    },
    /// A pull request (its JSON body) and the inbox to deliver to.
    Pull {
        consumer: String,
        request: Bytes,
        reply: String,
    },
    /// An ack: the subject it was sent to and its body.
    Ack {
        consumer: String,
        subject: String,
        body: Bytes,
    },
    /// Time passes: ack timeouts, expiry.
    Tick,
    /// A purge (its JSON request).
    Purge {
        request: Bytes,
    },
    /// A message delete; `erase` overwrites it.
    DeleteMsg {
        seq: u64,
        erase: bool,
    },
    DeleteConsumer {
        name: String,
    },
    /// A message a source's consumer delivered from an origin stream
    /// (see `jetstream::stream::Sourced`). Through the log, so every
    /// replica stores it, and advances the source's position, alike.
    Sourced {
        key: String,
        origin_seq: u64,
        origin_ts: i64,
        pending: u64,
        /// Stored only if the source's position is this (the copy before
        /// it was stored): a durable source's copies are proposed without
        /// waiting for each other.
        after: Option<u64>,
        subject: String,
        headers: Option<Bytes>,
        payload: Bytes,
    },
    /// A consumer create or update as the API received it: the request
    /// body, the name and filter the subject gave, whether it came by the
    /// durable endpoint, and the name the leader generated in case the
    /// request names none (generated once, so every replica uses it).
    ConsumerCreate {
        request: Bytes,
        subject_name: Option<String>,
        filter: Option<String>,
        durable_api: bool,
        generated: String,
        /// The stream identity the request expects
        /// (`Nats-Stream-Identity`): a `direct` consumer's create is
        /// refused on a mismatch (the stream was made again).
        identity: Option<String>,
        /// The account's consumer limits, as the leader's config has them
        /// (`stream_api::admit`).
        limits: AccountConsumerLimits,
    },
    /// An input whose result goes back to a requester: the leader sends
    /// the result of `op` to `reply` (a PubAck, an API response, a
    /// double-ack's confirmation). Replicated with the op so whichever
    /// replica leads when it is applied can answer.
    Replied {
        reply: String,
        op: Box<Op>,
    },
    /// A new configuration (JSON, checked against the old by the meta
    /// leader): every replica changes at the same point in the log.
    UpdateConfig {
        config: Bytes,
    },
    /// Whether a push consumer's deliver subject has interest, as the
    /// leader saw it change: deliveries start and stop at the same point
    /// on every replica.
    PushInterest {
        consumer: String,
        active: bool,
    },
    /// A push consumer's flow-control response arrived; `last` is what it
    /// said was received (`Nats-Last-Stream`, `Nats-Last-Consumer`), which
    /// acks under the `flow_control` ack policy.
    FlowControl {
        consumer: String,
        subject: String,
        last: Option<(u64, u64)>,
    },
    /// Pause a consumer until a time (Unix ns), or resume it (None).
    PauseConsumer {
        name: String,
        until: Option<i64>,
    },
    /// A consumer's pull requests whose requesters stopped listening (the
    /// leader saw their reply subjects lose interest): dropped, silently.
    DropPulls {
        consumer: String,
        replies: Vec<String>,
    },
    /// A durable source's answer to its origin consumer's flow-control
    /// request, replied to the request: the last copy proposed (origin
    /// and consumer sequences), which the answer acks if it was stored.
    /// Through the log, so the answer leaves once the copies before it
    /// are durable.
    SourceFlowControl {
        key: String,
        stream_seq: u64,
        consumer_seq: u64,
    },
    /// A source's origin was deleted and made again (its identity
    /// changed): the source starts over.
    ResetSource {
        key: String,
    },
    /// `CONSUMER.RESET`: a consumer starts again from `seq` (0: its ack
    /// floor).
    ResetConsumer {
        name: String,
        seq: u64,
        /// The request asked for the stream's identity in the answer.
        identity: bool,
    },
    /// `CONSUMER.UNPIN`: a priority group's pinned client loses its pin.
    UnpinConsumer {
        name: String,
        group: String,
    },
    /// Changes nothing: a leader's mark in the log, so what it answers
    /// once the mark is applied sees everything proposed before it (reads
    /// that must see the writes ahead of them).
    Barrier {
        peer: u64,
        token: u64,
    },
}

/// The store a replica keeps a stream's messages in (its durability is
/// the Raft log's): memory, counting sizes as the stream's storage type
/// does, so limits and reported bytes are the same as one server's.
pub fn replica_store(config: &StreamConfig) -> Box<dyn MsgStore> {
    match config.storage {
        jetstream::api::Storage::Memory => Box::new(store::MemStore::new()),
        jetstream::api::Storage::File => Box::new(store::MemStore::sized_as_file()),
    }
}

impl Op {
    /// The input with its result going back to `reply`, if any.
    pub fn replied(self, reply: Option<&str>) -> Op {
        match reply {
            Some(reply) => Op::Replied {
                reply: reply.to_string(),
                op: Box::new(self),
            },
            None => self,
        }
    }
}

/// An entry: what happened and when, by the leader's clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub ts: i64,
    pub op: Op,
}

impl Entry {
    pub fn encode(&self) -> Vec<u8> {
        let mut b = BytesMut::with_capacity(64);
        b.put_i64_le(self.ts);
        encode_op(&mut b, &self.op);
        b.into()
    }

    /// Decodes an entry, copying its messages out of `b`.
    pub fn decode(b: &[u8]) -> Result<Entry, DecodeError> {
        Self::decode_in(b, None)
    }

    /// Decodes an entry whose messages stay in `data`: a message's
    /// headers and payload are slices of it, not copies. A Raft entry's
    /// data is a buffer of its own (`replication::Engine` copies it out
    /// of the frame it came in), so this pins nothing larger.
    pub fn decode_shared(data: &Bytes) -> Result<Entry, DecodeError> {
        Self::decode_in(data, Some(data))
    }

    fn decode_in(mut b: &[u8], owner: Option<&Bytes>) -> Result<Entry, DecodeError> {
        if b.remaining() < 9 {
            return Err(DecodeError::Short);
        }
        let ts = b.get_i64_le();
        let op = decode_op(&mut b, owner, 0)?;
        Ok(Entry { ts, op })
    }
}

fn encode_op(b: &mut BytesMut, op: &Op) {
    match op {
        Op::Publish {
            subject,
            headers,
            payload,
        } => {
            b.put_u8(1);
            put_msg(b, subject, headers.as_deref(), payload);
        }
        Op::CreateConsumer { name, request } => {
            b.put_u8(2);
            put_bytes(b, name.as_bytes());
            put_bytes(b, request);
        }
        Op::Pull {
            consumer,
            request,
            reply,
        } => {
            b.put_u8(3);
            put_bytes(b, consumer.as_bytes());
            put_bytes(b, request);
            put_bytes(b, reply.as_bytes());
        }
        Op::Ack {
            consumer,
            subject,
            body,
        } => {
            b.put_u8(4);
            put_bytes(b, consumer.as_bytes());
            put_bytes(b, subject.as_bytes());
            put_bytes(b, body);
        }
        Op::Tick => b.put_u8(5),
        Op::Purge { request } => {
            b.put_u8(6);
            put_bytes(b, request);
        }
        Op::DeleteMsg { seq, erase } => {
            b.put_u8(7);
            b.put_u64_le(*seq);
            b.put_u8(u8::from(*erase));
        }
        Op::DeleteConsumer { name } => {
            b.put_u8(8);
            put_bytes(b, name.as_bytes());
        }
        Op::Sourced {
            key,
            origin_seq,
            origin_ts,
            pending,
            after,
            subject,
            headers,
            payload,
        } => {
            // Code 21 carries the position the copy must follow.
            b.put_u8(if after.is_some() { 21 } else { 9 });
            put_bytes(b, key.as_bytes());
            b.put_u64_le(*origin_seq);
            b.put_i64_le(*origin_ts);
            b.put_u64_le(*pending);
            if let Some(after) = after {
                b.put_u64_le(*after);
            }
            put_msg(b, subject, headers.as_deref(), payload);
        }
        Op::ConsumerCreate {
            request,
            subject_name,
            filter,
            durable_api,
            generated,
            identity,
            limits,
        } => {
            // Code 23 carries the identity expected; code 26 the account's
            // limits, and the identity if any.
            let code = match (limits.is_none(), identity.is_some()) {
                (false, _) => 26,
                (true, true) => 23,
                (true, false) => 10,
            };
            b.put_u8(code);
            put_bytes(b, request);
            put_opt(b, subject_name);
            put_opt(b, filter);
            b.put_u8(u8::from(*durable_api));
            put_bytes(b, generated.as_bytes());
            match code {
                23 => put_bytes(b, identity.as_deref().unwrap_or_default().as_bytes()),
                26 => {
                    put_opt(b, identity);
                    b.put_i64_le(limits.max_consumers);
                    b.put_i64_le(limits.max_ack_pending);
                }
                _ => {}
            }
        }
        Op::Replied { reply, op } => {
            b.put_u8(11);
            put_bytes(b, reply.as_bytes());
            encode_op(b, op);
        }
        Op::UpdateConfig { config } => {
            b.put_u8(12);
            put_bytes(b, config);
        }
        Op::PushInterest { consumer, active } => {
            b.put_u8(13);
            put_bytes(b, consumer.as_bytes());
            b.put_u8(u8::from(*active));
        }
        Op::FlowControl {
            consumer,
            subject,
            last,
        } => {
            // Code 20 carries what the reply said was received.
            b.put_u8(if last.is_some() { 20 } else { 14 });
            put_bytes(b, consumer.as_bytes());
            put_bytes(b, subject.as_bytes());
            if let Some((stream_seq, consumer_seq)) = last {
                b.put_u64_le(*stream_seq);
                b.put_u64_le(*consumer_seq);
            }
        }
        Op::PauseConsumer { name, until } => {
            b.put_u8(15);
            put_bytes(b, name.as_bytes());
            b.put_u8(u8::from(until.is_some()));
            b.put_i64_le(until.unwrap_or(0));
        }
        Op::Barrier { peer, token } => {
            b.put_u8(16);
            b.put_u64_le(*peer);
            b.put_u64_le(*token);
        }
        Op::SourceFlowControl {
            key,
            stream_seq,
            consumer_seq,
        } => {
            b.put_u8(22);
            put_bytes(b, key.as_bytes());
            b.put_u64_le(*stream_seq);
            b.put_u64_le(*consumer_seq);
        }
        Op::ResetSource { key } => {
            b.put_u8(25);
            put_bytes(b, key.as_bytes());
        }
        Op::DropPulls { consumer, replies } => {
            b.put_u8(19);
            put_bytes(b, consumer.as_bytes());
            b.put_u32_le(replies.len() as u32);
            for reply in replies {
                put_bytes(b, reply.as_bytes());
            }
        }
        Op::ResetConsumer {
            name,
            seq,
            identity,
        } => {
            // Code 24 asks for the stream's identity in the answer.
            b.put_u8(if *identity { 24 } else { 18 });
            put_bytes(b, name.as_bytes());
            b.put_u64_le(*seq);
        }
        Op::UnpinConsumer { name, group } => {
            b.put_u8(17);
            put_bytes(b, name.as_bytes());
            put_bytes(b, group.as_bytes());
        }
    }
}

/// The entry of a publish (with the requester to send its PubAck to),
/// written straight from the message as received: the same bytes as
/// `Entry { ts, op: Op::Replied { reply, op: Op::Publish {..} } }`
/// encodes, without copying the message into an `Op` first (it is the
/// publish path).
pub fn encode_publish(
    ts: i64,
    reply: Option<&str>,
    subject: &str,
    headers: Option<&[u8]>,
    payload: &[u8],
) -> Vec<u8> {
    let mut b = BytesMut::with_capacity(
        32 + subject.len()
            + reply.map_or(0, str::len)
            + headers.map_or(0, <[u8]>::len)
            + payload.len(),
    );
    b.put_i64_le(ts);
    if let Some(reply) = reply {
        b.put_u8(11);
        put_bytes(&mut b, reply.as_bytes());
    }
    b.put_u8(1);
    put_msg(&mut b, subject, headers, payload);
    // The buffer itself, not a copy of it (this is the publish path).
    b.into()
}

/// `depth` bounds nesting: a `Replied` holds one plain op. Messages are
/// slices of `owner` when given (see [`get_bytes_in`]).
fn decode_op(b: &mut &[u8], owner: Option<&Bytes>, depth: u8) -> Result<Op, DecodeError> {
    if b.remaining() < 1 {
        return Err(DecodeError::Short);
    }
    let op = match b.get_u8() {
        1 => {
            let (subject, headers, payload) = get_msg_in(b, owner)?;
            Op::Publish {
                subject,
                headers,
                payload,
            }
        }
        2 => Op::CreateConsumer {
            name: get_string(b)?,
            request: get_bytes(b)?,
        },
        3 => Op::Pull {
            consumer: get_string(b)?,
            request: get_bytes(b)?,
            reply: get_string(b)?,
        },
        4 => Op::Ack {
            consumer: get_string(b)?,
            subject: get_string(b)?,
            body: get_bytes(b)?,
        },
        5 => Op::Tick,
        6 => Op::Purge {
            request: get_bytes(b)?,
        },
        7 => {
            if b.remaining() < 9 {
                return Err(DecodeError::Short);
            }
            Op::DeleteMsg {
                seq: b.get_u64_le(),
                erase: b.get_u8() != 0,
            }
        }
        8 => Op::DeleteConsumer {
            name: get_string(b)?,
        },
        code @ (9 | 21) => {
            let key = get_string(b)?;
            let need = if code == 21 { 32 } else { 24 };
            if b.remaining() < need {
                return Err(DecodeError::Short);
            }
            let origin_seq = b.get_u64_le();
            let origin_ts = b.get_i64_le();
            let pending = b.get_u64_le();
            let after = (code == 21).then(|| b.get_u64_le());
            let (subject, headers, payload) = get_msg_in(b, owner)?;
            Op::Sourced {
                key,
                origin_seq,
                origin_ts,
                pending,
                after,
                subject,
                headers,
                payload,
            }
        }
        code @ (10 | 23 | 26) => {
            let request = get_bytes(b)?;
            let subject_name = get_opt(b)?;
            let filter = get_opt(b)?;
            if b.remaining() < 1 {
                return Err(DecodeError::Short);
            }
            let durable_api = b.get_u8() != 0;
            let generated = get_string(b)?;
            let mut limits = AccountConsumerLimits::default();
            let identity = match code {
                23 => Some(get_string(b)?),
                26 => {
                    let identity = get_opt(b)?;
                    if b.remaining() < 16 {
                        return Err(DecodeError::Short);
                    }
                    limits.max_consumers = b.get_i64_le();
                    limits.max_ack_pending = b.get_i64_le();
                    identity
                }
                _ => None,
            };
            Op::ConsumerCreate {
                request,
                subject_name,
                filter,
                durable_api,
                generated,
                identity,
                limits,
            }
        }
        12 => Op::UpdateConfig {
            config: get_bytes(b)?,
        },
        13 => {
            let consumer = get_string(b)?;
            if b.remaining() < 1 {
                return Err(DecodeError::Short);
            }
            Op::PushInterest {
                consumer,
                active: b.get_u8() != 0,
            }
        }
        14 => Op::FlowControl {
            consumer: get_string(b)?,
            subject: get_string(b)?,
            last: None,
        },
        20 => {
            let consumer = get_string(b)?;
            let subject = get_string(b)?;
            if b.remaining() < 16 {
                return Err(DecodeError::Short);
            }
            let last = Some((b.get_u64_le(), b.get_u64_le()));
            Op::FlowControl {
                consumer,
                subject,
                last,
            }
        }
        15 => {
            let name = get_string(b)?;
            if b.remaining() < 9 {
                return Err(DecodeError::Short);
            }
            let some = b.get_u8() != 0;
            let until = b.get_i64_le();
            Op::PauseConsumer {
                name,
                until: some.then_some(until),
            }
        }
        16 => {
            if b.remaining() < 16 {
                return Err(DecodeError::Short);
            }
            Op::Barrier {
                peer: b.get_u64_le(),
                token: b.get_u64_le(),
            }
        }
        19 => {
            let consumer = get_string(b)?;
            if b.remaining() < 4 {
                return Err(DecodeError::Short);
            }
            let n = b.get_u32_le();
            // Each reply takes at least its length prefix.
            if n as usize > b.remaining() / 4 {
                return Err(DecodeError::Short);
            }
            let replies = (0..n).map(|_| get_string(b)).collect::<Result<_, _>>()?;
            Op::DropPulls { consumer, replies }
        }
        25 => Op::ResetSource {
            key: get_string(b)?,
        },
        22 => {
            let key = get_string(b)?;
            if b.remaining() < 16 {
                return Err(DecodeError::Short);
            }
            Op::SourceFlowControl {
                key,
                stream_seq: b.get_u64_le(),
                consumer_seq: b.get_u64_le(),
            }
        }
        code @ (18 | 24) => {
            let name = get_string(b)?;
            if b.remaining() < 8 {
                return Err(DecodeError::Short);
            }
            Op::ResetConsumer {
                name,
                seq: b.get_u64_le(),
                identity: code == 24,
            }
        }
        17 => Op::UnpinConsumer {
            name: get_string(b)?,
            group: get_string(b)?,
        },
        11 if depth == 0 => Op::Replied {
            reply: get_string(b)?,
            op: Box::new(decode_op(b, owner, depth + 1)?),
        },
        k => return Err(DecodeError::Kind(k)),
    };
    Ok(op)
}

/// What applying an input decided for its requester.
#[derive(Debug, Default)]
pub enum Outcome {
    /// Nothing to answer (a tick, interest, a pull: pulls answer through
    /// their outputs), or an entry that did not decode.
    #[default]
    None,
    /// A publish: its PubAck, encoded only by whoever sends it
    /// (`PubAck::encode`): followers would only throw the JSON away.
    Published(PubAck),
    /// A durable source's flow-control answer: the copy it acks (origin
    /// and consumer sequences), if it was stored.
    SourceFlowControl(Option<(u64, u64)>),
    /// A message of a fast batch: what its publisher is sent, in order
    /// (flow acks, gap and error reports, the batch's PubAck).
    FastBatch(Vec<Bytes>),
    /// A consumer create: the consumer made or updated.
    ConsumerCreated(Result<ConsumerInfo, ApiError>),
    /// A consumer pause or resume: the consumer after it.
    ConsumerPaused(Result<ConsumerInfo, ApiError>),
    ConsumerUnpinned(Result<(), ApiError>),
    /// A consumer reset: the consumer and where it starts, and the
    /// stream's identity when the request asked for it.
    ConsumerReset(Result<(ConsumerInfo, u64), ApiError>, Option<String>),
    /// A purge: how many messages went.
    Purged(Result<u64, ApiError>),
    /// A message delete.
    MsgDeleted(Result<(), ApiError>),
    /// A consumer delete.
    ConsumerDeleted(Result<(), ApiError>),
    /// An ack.
    Acked(Acked),
    /// A copy from a source: stored (true), or had already (false).
    Sourced(Result<bool, ApiError>),
    /// A new configuration.
    Configured(Result<(), ApiError>),
    /// A leader's mark (`Op::Barrier`).
    Barrier {
        peer: u64,
        token: u64,
    },
}

/// What an ack's requester hears.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acked {
    /// Nothing (a plain ack, or one that changed nothing).
    Silent,
    /// The empty reply of a double ack: the ack is applied (and durable
    /// once the reply is released).
    Confirmed,
    /// No consumer of that name takes acks: what a requester sees when
    /// nobody listens on an ack subject (nats-server subscribes to a
    /// consumer's acks only while it exists and its ack policy is not
    /// `none`).
    NoListener,
}

/// What applying one input produced.
#[derive(Debug, Default)]
pub struct Applied {
    pub outcome: Outcome,
    /// Deliveries and statuses.
    pub outputs: Vec<Output>,
    /// Where the result goes (`Op::Replied`).
    pub reply: Option<String>,
    /// When it was applied (the entry's time).
    pub ts: i64,
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
        // Sized for the messages up front: a stream of many megabytes
        // would otherwise be copied again at every doubling.
        let st = self.stream.store().state();
        let mut b = BytesMut::with_capacity(4096 + st.bytes as usize + 32 * st.msgs as usize);
        self.put_head(&mut b, SNAPSHOT_VERSION, now);
        let store = self.stream.store();
        b.put_u64_le(st.last_seq);
        b.put_i64_le(st.last_ts);
        let mut at = 1;
        let mut msgs = Vec::new();
        while let Ok(Some(m)) = store.next_matching(at, &store::Filter::all()) {
            at = m.seq + 1;
            msgs.push(m);
        }
        b.put_u64_le(msgs.len() as u64);
        for m in msgs {
            b.put_u64_le(m.seq);
            b.put_i64_le(m.ts);
            put_msg(&mut b, &m.subject, m.headers.as_deref(), &m.payload);
        }
        self.put_tail(&mut b);
        // The buffer itself: a copy would be the whole stream again.
        b.into()
    }

    /// The state as of the last applied entry without the messages: what
    /// the store holds is summarized ([`StoreSummary`]: sequences and
    /// deleted ranges), so the size does not depend on how many messages
    /// the stream holds. A replica restores it over a store that matches
    /// the summary ([`StreamMachine::restore_state`]): its own, opened at
    /// the snapshot's mark, or one caught up from a peer (`catchup`).
    pub fn snapshot_state(&self, now: i64) -> Vec<u8> {
        let mut b = BytesMut::with_capacity(4096);
        self.put_head(&mut b, STATE_SNAPSHOT_VERSION, now);
        StoreSummary::of(self.stream.store()).encode(&mut b);
        self.put_tail(&mut b);
        b.into()
    }

    /// Version, applied index, time, created, config.
    fn put_head(&self, b: &mut BytesMut, version: u32, now: i64) {
        b.put_u32_le(version);
        b.put_u64_le(self.applied);
        b.put_i64_le(if self.applied > 0 { self.last_ts } else { now });
        b.put_i64_le(self.stream.created);
        put_bytes(
            b,
            &serde_json::to_vec(&self.stream.config).expect("config serializes"),
        );
    }

    /// Consumers, source positions, the duplicate window.
    fn put_tail(&self, b: &mut BytesMut) {
        let names = self.stream.all_consumer_names();
        b.put_u32_le(names.len() as u32);
        for name in names {
            let c = self.stream.consumer(&name).expect("listed");
            put_bytes(
                b,
                &serde_json::to_vec(&c.config).expect("config serializes"),
            );
            b.put_i64_le(c.created);
            put_bytes(b, &c.state().encode());
            put_bytes(b, &c.runtime());
        }
        // Positions, because a work-queue origin's messages are gone once
        // acked: they cannot be recovered by looking at the origin again.
        put_bytes(
            b,
            &serde_json::to_vec(&self.stream.source_positions()).expect("positions serialize"),
        );
        put_bytes(
            b,
            &serde_json::to_vec(&self.stream.dedupe_entries()).expect("ids serialize"),
        );
        // Atomic batches being staged, when there are any: a replica
        // restored from this commits them as the others do.
        // Then, where schedules are allowed, the live schedules: the
        // messages alone may not say when each is due (a fired copy that
        // said so may be gone), and every replica must fire alike.
        let batches = self.stream.batches();
        let schedules = self.stream.config.allow_msg_schedules;
        if !batches.is_empty() || schedules {
            put_bytes(b, &serde_json::to_vec(batches).expect("batches serialize"));
        }
        if schedules {
            let index = self.stream.schedules();
            put_bytes(b, &serde_json::to_vec(index).expect("schedules serialize"));
        }
    }

    /// A replica rebuilt from [`StreamMachine::snapshot`] bytes, over
    /// the empty store `store` makes for its config.
    pub fn restore(
        data: &[u8],
        store: impl FnOnce(&StreamConfig) -> Box<dyn MsgStore>,
    ) -> Result<Self, DecodeError> {
        let mut b = data;
        let head = Head::decode(&mut b)?;
        if !(2..=SNAPSHOT_VERSION).contains(&head.version) {
            return Err(DecodeError::Short);
        }
        let mut store = store(&head.config);
        if b.remaining() < 24 {
            return Err(DecodeError::Short);
        }
        let last_seq = b.get_u64_le();
        let last_ts = b.get_i64_le();
        let n = b.get_u64_le();
        let store_err = |_| DecodeError::Kind(0);
        for i in 0..n {
            if b.remaining() < 16 {
                return Err(DecodeError::Short);
            }
            let seq = b.get_u64_le();
            let ts = b.get_i64_le();
            let (subject, headers, payload) = get_msg(&mut b)?;
            if i == 0 {
                store.reset_to(seq).map_err(store_err)?;
            }
            while store.state().last_seq + 1 < seq {
                store.skip(ts).map_err(store_err)?;
            }
            store
                .store(&subject, headers.as_deref(), &payload, ts)
                .map_err(store_err)?;
        }
        if n == 0 {
            store.reset_to(last_seq + 1).map_err(store_err)?;
        }
        while store.state().last_seq < last_seq {
            store.skip(last_ts).map_err(store_err)?;
        }
        Self::restore_tail(head, store, b)
    }

    /// The store summary of [`StreamMachine::snapshot_state`] bytes: what
    /// a replica's store must hold before [`StreamMachine::restore_state`].
    pub fn snapshot_summary(data: &[u8]) -> Result<(StreamConfig, StoreSummary), DecodeError> {
        let mut b = data;
        let head = Head::decode(&mut b)?;
        if head.version != STATE_SNAPSHOT_VERSION {
            return Err(DecodeError::Short);
        }
        Ok((head.config, StoreSummary::decode(&mut b)?))
    }

    /// A replica rebuilt from [`StreamMachine::snapshot_state`] bytes over
    /// `store`, which must already hold what the snapshot's summary says.
    pub fn restore_state(data: &[u8], store: Box<dyn MsgStore>) -> Result<Self, RestoreError> {
        let mut b = data;
        let head = Head::decode(&mut b)?;
        if head.version != STATE_SNAPSHOT_VERSION {
            return Err(DecodeError::Short.into());
        }
        let summary = StoreSummary::decode(&mut b)?;
        if let Some(why) = summary.mismatch(store.as_ref()) {
            return Err(RestoreError::Store(why));
        }
        Ok(Self::restore_tail(head, store, b)?)
    }

    /// The stream over its restored store, with consumers, positions and
    /// the duplicate window from the rest of the snapshot.
    fn restore_tail(
        head: Head,
        store: Box<dyn MsgStore>,
        mut b: &[u8],
    ) -> Result<Self, DecodeError> {
        let Head {
            version,
            applied,
            now,
            created,
            config,
        } = head;
        let mut stream = Stream::recover(config, created, store, now);
        if b.remaining() < 4 {
            return Err(DecodeError::Short);
        }
        let consumers = b.get_u32_le();
        for _ in 0..consumers {
            let cfg: ConsumerConfig =
                serde_json::from_slice(&get_bytes(&mut b)?).map_err(|_| DecodeError::Kind(0))?;
            if b.remaining() < 8 {
                return Err(DecodeError::Short);
            }
            let created = b.get_i64_le();
            let state = ConsumerState::decode(&get_bytes(&mut b)?).ok_or(DecodeError::Kind(0))?;
            let name = cfg.name.clone();
            stream.restore_consumer(cfg, created, &state, now);
            if version >= 3 {
                let runtime = get_bytes(&mut b)?;
                if !stream.restore_consumer_runtime(&name, &runtime) {
                    return Err(DecodeError::Kind(0));
                }
            }
        }
        let positions: std::collections::BTreeMap<String, u64> =
            serde_json::from_slice(&get_bytes(&mut b)?).map_err(|_| DecodeError::Kind(0))?;
        stream.restore_source_positions(&positions);
        if version >= 3 {
            let ids: Vec<(i64, String, u64)> =
                serde_json::from_slice(&get_bytes(&mut b)?).map_err(|_| DecodeError::Kind(0))?;
            stream.restore_dedupe(ids);
        }
        if b.has_remaining() {
            let batches =
                serde_json::from_slice(&get_bytes(&mut b)?).map_err(|_| DecodeError::Kind(0))?;
            stream.restore_batches(batches);
        }
        if stream.config.allow_msg_schedules {
            let schedules = match b.has_remaining() {
                true => {
                    serde_json::from_slice(&get_bytes(&mut b)?).map_err(|_| DecodeError::Kind(0))?
                }
                false => Default::default(),
            };
            stream.restore_schedules(schedules);
        }
        let _ = stream.take_outputs();
        Ok(StreamMachine {
            stream,
            applied,
            last_ts: now,
        })
    }

    /// The store, the machine given up (a replica catching up to a state
    /// snapshot keeps its store and builds the machine again over it).
    pub fn into_store(self) -> Box<dyn MsgStore> {
        self.stream.into_store()
    }

    /// Whether `data` is a state snapshot ([`StreamMachine::snapshot_state`]:
    /// messages to be fetched) rather than one that carries its messages.
    pub fn is_state_snapshot(data: &[u8]) -> bool {
        let mut b = data;
        Head::decode(&mut b).is_ok_and(|h| h.version == STATE_SNAPSHOT_VERSION)
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
    /// what its requester is told.
    fn decide(&mut self, e: Entry) -> Applied {
        let now = e.ts;
        let mut statuses = Vec::new();
        self.last_ts = now;
        let (reply, op) = match e.op {
            Op::Replied { reply, op } => (Some(reply), *op),
            op => (None, op),
        };
        let outcome = match op {
            Op::Publish {
                subject,
                headers,
                payload,
            } => {
                let msg = Incoming {
                    subject: &subject,
                    headers: headers.as_deref(),
                    payload: &payload,
                };
                match reply.as_deref().filter(|r| fast_batch::is_fast(r)) {
                    Some(fast) => Outcome::FastBatch(self.stream.fast_publish(msg, fast, now)),
                    None => Outcome::Published(self.stream.publish(msg, now)),
                }
            }
            Op::CreateConsumer { name, request } => {
                if let Ok(req) = CreateConsumerRequest::parse(&request) {
                    let via = jetstream::consumer::Via {
                        name: Some(&name),
                        ..Default::default()
                    };
                    let _ = self.stream.add_consumer(
                        req,
                        via,
                        || name.clone(),
                        AccountConsumerLimits::default(),
                        now,
                    );
                }
                Outcome::None
            }
            Op::Pull {
                consumer,
                request,
                reply,
            } => {
                statuses.extend(self.pull(&consumer, &request, &reply, now));
                Outcome::None
            }
            Op::Ack {
                consumer,
                subject,
                body,
            } => Outcome::Acked(self.ack(&consumer, &subject, &body, reply.as_deref(), now)),
            Op::Tick => {
                let _ = self.stream.tick(now);
                Outcome::None
            }
            Op::Purge { request } => {
                let req = serde_json::from_slice::<jetstream::api::PurgeRequest>(&request)
                    .unwrap_or_default();
                Outcome::Purged(self.stream.purge(&req))
            }
            Op::DeleteMsg { seq, erase } => Outcome::MsgDeleted(self.stream.delete_msg(seq, erase)),
            Op::DeleteConsumer { name } => {
                Outcome::ConsumerDeleted(self.stream.delete_consumer(&name))
            }
            Op::Sourced {
                key,
                origin_seq,
                origin_ts,
                pending,
                after,
                subject,
                headers,
                payload,
            } => {
                let m = jetstream::stream::Sourced {
                    key: &key,
                    origin_seq,
                    origin_ts,
                    pending,
                    after,
                    subject: &subject,
                    headers: headers.as_deref(),
                    payload: &payload,
                };
                Outcome::Sourced(self.stream.sourced(m, now))
            }
            Op::ConsumerCreate {
                request,
                subject_name,
                filter,
                durable_api,
                generated,
                identity,
                limits,
            } => {
                let ours = jetstream::api::stream_identity(self.stream.created);
                let created = CreateConsumerRequest::parse(&request)
                    .map_err(|e| jetstream::api::E::INVALID_JSON.with("err", e))
                    .and_then(|mut req| {
                        // A direct consumer's create names the stream it
                        // expects: one made again since is refused.
                        let expected = identity.filter(|_| req.config.direct);
                        if expected.is_some_and(|id| id != ours) {
                            let e = jetstream::api::E::CONSUMER_STREAM_IDENTITY_MISMATCH;
                            return Err(e.with("msg", &ours));
                        }
                        jetstream::consumer::stamp_required_level(&mut req.config);
                        let via = jetstream::consumer::Via {
                            name: subject_name.as_deref(),
                            filter: filter.as_deref(),
                            durable_api,
                        };
                        self.stream
                            .add_consumer(req, via, || generated, limits, now)
                    });
                Outcome::ConsumerCreated(created)
            }
            Op::UpdateConfig { config } => Outcome::Configured(
                serde_json::from_slice::<StreamConfig>(&config)
                    .map_err(|e| jetstream::api::E::STREAM_UPDATE.with("err", e))
                    .and_then(|cfg| self.stream.update(cfg)),
            ),
            Op::PushInterest { consumer, active } => {
                self.stream.set_push_interest(&consumer, active, now);
                Outcome::None
            }
            Op::FlowControl {
                consumer,
                subject,
                last,
            } => {
                let _ = self.stream.flow_control_reply(&consumer, &subject, last);
                Outcome::None
            }
            Op::PauseConsumer { name, until } => {
                Outcome::ConsumerPaused(self.stream.pause_consumer(&name, until, now))
            }
            Op::DropPulls { consumer, replies } => {
                self.stream.drop_pulls(&consumer, &replies);
                Outcome::None
            }
            Op::ResetSource { key } => {
                self.stream.reset_source(&key);
                Outcome::None
            }
            Op::SourceFlowControl {
                key,
                stream_seq,
                consumer_seq,
            } => {
                let stored = self
                    .stream
                    .source_positions()
                    .get(&key)
                    .is_some_and(|&position| position >= stream_seq);
                Outcome::SourceFlowControl(stored.then_some((stream_seq, consumer_seq)))
            }
            Op::ResetConsumer {
                name,
                seq,
                identity,
            } => {
                let identity =
                    identity.then(|| jetstream::api::stream_identity(self.stream.created));
                Outcome::ConsumerReset(self.stream.reset_consumer(&name, seq, now), identity)
            }
            Op::UnpinConsumer { name, group } => {
                Outcome::ConsumerUnpinned(self.stream.unpin_consumer(&name, &group))
            }
            Op::Barrier { peer, token } => Outcome::Barrier { peer, token },
            // Nested replies are refused when decoding.
            Op::Replied { .. } => Outcome::None,
        };
        Applied {
            outcome,
            outputs: statuses,
            reply,
            ts: now,
        }
    }

    /// A pull request, or the status it is answered with at once: nothing
    /// subscribes to a consumer that does not exist (no responders), and
    /// a body that does not read is a bad request.
    fn pull(&mut self, consumer: &str, request: &[u8], reply: &str, now: i64) -> Option<Output> {
        if self.stream.consumer(consumer).is_none() {
            let subject = format!(
                "$JS.API.CONSUMER.MSG.NEXT.{}.{consumer}",
                self.stream.config.name
            );
            return Some(Output::Publish(status::no_responders(reply, &subject)));
        }
        match PullRequest::parse(request) {
            Ok(req) => {
                let _ = self.stream.pull(consumer, req, reply, now);
                None
            }
            Err(e) => Some(Output::Publish(status::status_msg(
                reply,
                400,
                &format!("Bad Request - {e}"),
            ))),
        }
    }

    fn ack(
        &mut self,
        consumer: &str,
        subject: &str,
        body: &[u8],
        reply: Option<&str>,
        now: i64,
    ) -> Acked {
        let listens = self
            .stream
            .consumer(consumer)
            .is_some_and(|c| c.takes_acks());
        if !listens {
            return Acked::NoListener;
        }
        match self.stream.ack(consumer, subject, body, reply, now) {
            Ok(true) => Acked::Confirmed,
            // A failed removal (a store error) is the store's to report.
            Ok(false) | Err(_) => Acked::Silent,
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
        feed(
            &mut a,
            &mut i,
            vec![Op::CreateConsumer {
                name: "C".into(),
                request: Bytes::from_static(req),
            }],
        );
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
        feed(
            &mut a,
            &mut i,
            vec![Op::CreateConsumer {
                name: "C".into(),
                request: Bytes::from_static(req),
            }],
        );
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

    /// A sourcing stream's position is replicated state: a replica
    /// restored from a snapshot refuses what the source already
    /// delivered, even though a work-queue origin no longer has it.
    #[test]
    fn source_positions_survive_a_snapshot() {
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
        let mut a = StreamMachine::new(cfg, 1, Box::new(store::MemStore::new())).unwrap();
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

    #[test]
    fn publishes_encode_straight_as_entries_do() {
        for reply in [None, Some("_INBOX.x")] {
            for headers in [None, Some(&b"NATS/1.0\r\nA: b\r\n\r\n"[..])] {
                let op = Op::Publish {
                    subject: "s.1".into(),
                    headers: headers.map(Bytes::copy_from_slice),
                    payload: Bytes::from_static(b"data"),
                };
                let op = match reply {
                    Some(r) => Op::Replied {
                        reply: r.into(),
                        op: Box::new(op),
                    },
                    None => op,
                };
                let want = Entry { ts: 7, op }.encode();
                assert_eq!(encode_publish(7, reply, "s.1", headers, b"data"), want);
            }
        }
    }

    #[test]
    fn entries_round_trip_and_refuse_garbage() {
        let entries = [
            Entry {
                ts: 5,
                op: Op::Publish {
                    subject: "wq.a".into(),
                    headers: Some(Bytes::from_static(b"NATS/1.0\r\nA: b\r\n\r\n")),
                    payload: Bytes::from_static(b"x"),
                },
            },
            Entry {
                ts: 6,
                op: Op::Ack {
                    consumer: "C".into(),
                    subject: "$JS.ACK.S.C.1.1.1.5.0".into(),
                    body: Bytes::from_static(b"+ACK"),
                },
            },
            Entry {
                ts: 7,
                op: Op::Tick,
            },
            Entry {
                ts: 8,
                op: Op::Purge {
                    request: Bytes::from_static(br#"{"filter":"wq.a"}"#),
                },
            },
            Entry {
                ts: 9,
                op: Op::DeleteMsg {
                    seq: 12,
                    erase: true,
                },
            },
            Entry {
                ts: 10,
                op: Op::DeleteConsumer { name: "C".into() },
            },
            Entry {
                ts: 10,
                op: Op::Barrier {
                    peer: 0xfeed,
                    token: 7,
                },
            },
            Entry {
                ts: 11,
                op: sourced(7),
            },
            Entry {
                ts: 12,
                op: Op::UnpinConsumer {
                    name: "C".into(),
                    group: "A".into(),
                },
            },
            Entry {
                ts: 12,
                op: Op::FlowControl {
                    consumer: "C".into(),
                    subject: "$JS.FC.S.C.x".into(),
                    last: None,
                },
            },
            Entry {
                ts: 12,
                op: Op::FlowControl {
                    consumer: "C".into(),
                    subject: "$JS.FC.S.C.y".into(),
                    last: Some((9, 4)),
                },
            },
            Entry {
                ts: 13,
                op: Op::ResetConsumer {
                    name: "C".into(),
                    seq: 9,
                    identity: false,
                },
            },
            Entry {
                ts: 13,
                op: Op::ResetConsumer {
                    name: "C".into(),
                    seq: 0,
                    identity: true,
                },
            },
            Entry {
                ts: 13,
                op: Op::ResetSource {
                    key: "O > >".into(),
                },
            },
            Entry {
                ts: 13,
                op: Op::ConsumerCreate {
                    request: Bytes::from_static(b"{}"),
                    subject_name: Some("C".into()),
                    filter: None,
                    durable_api: false,
                    generated: "G".into(),
                    identity: Some("abcdefgh".into()),
                    limits: AccountConsumerLimits::default(),
                },
            },
            Entry {
                ts: 13,
                op: Op::ConsumerCreate {
                    request: Bytes::from_static(b"{}"),
                    subject_name: None,
                    filter: Some("f".into()),
                    durable_api: true,
                    generated: "G".into(),
                    identity: None,
                    limits: AccountConsumerLimits {
                        max_consumers: 3,
                        max_ack_pending: 100,
                    },
                },
            },
            Entry {
                ts: 14,
                op: Op::DropPulls {
                    consumer: "C".into(),
                    replies: vec!["_INBOX.a".into(), "_INBOX.b".into()],
                },
            },
        ];
        for e in &entries {
            let b = e.encode();
            assert_eq!(&Entry::decode(&b).unwrap(), e);
            let shared = Bytes::from(b.clone());
            assert_eq!(&Entry::decode_shared(&shared).unwrap(), e);
            for cut in 0..b.len() {
                assert!(Entry::decode(&b[..cut]).is_err() || cut == b.len());
                let short = shared.slice(..cut);
                assert!(Entry::decode_shared(&short).is_err() || cut == b.len());
            }
        }
        assert_eq!(Entry::decode(&[0; 8]), Err(DecodeError::Short));
    }

    /// A shared decode leaves a message's headers and payload in the
    /// entry's buffer; a plain one copies them.
    #[test]
    fn a_shared_decode_slices_messages_out_of_the_entry() {
        let entry = Entry {
            ts: 1,
            op: Op::Publish {
                subject: "s".into(),
                headers: Some(Bytes::from_static(b"NATS/1.0\r\n\r\n")),
                payload: Bytes::from_static(b"payload"),
            }
            .replied(Some("r")),
        };
        let data = Bytes::from(entry.encode());
        let within = |field: &Bytes| data.as_ptr_range().contains(&field.as_ptr());
        let decoded = |e: Entry| match e.op {
            Op::Replied { op, .. } => match *op {
                Op::Publish {
                    headers, payload, ..
                } => (headers.unwrap(), payload),
                other => panic!("not a publish: {other:?}"),
            },
            other => panic!("not replied: {other:?}"),
        };
        let (headers, payload) = decoded(Entry::decode_shared(&data).unwrap());
        assert!(within(&headers) && within(&payload));
        assert_eq!(&payload[..], b"payload");
        let (headers, payload) = decoded(Entry::decode(&data).unwrap());
        assert!(!within(&headers) && !within(&payload));
    }
}
