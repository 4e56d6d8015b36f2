//! The inputs of a stream's state machine, and the entries that carry
//! them through its Raft log. `codec` writes and reads them; `decide`
//! (in `mod.rs`) applies them.

use bytes::Bytes;
use jetstream::consumer::AccountConsumerLimits;

/// One input to a replicated stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    Publish {
        subject: String,
        headers: Option<Bytes>,
        payload: Bytes,
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
    /// A run of copies of one source, in the order delivered, each an
    /// `Op::Sourced` naming the one before it: applied one after another,
    /// as that many entries would be. One Raft entry carries a run, so
    /// a copy costs a share of an entry's work, not a whole one. Runs
    /// answer nobody: their acks follow the durable position
    /// (`sourcing::Links::durable`).
    Copies {
        copies: Vec<Op>,
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

impl Op {
    /// The input with its result going back to `reply`, if any.
    pub fn replied(self, reply: Option<&str>) -> Op {
        let Some(reply) = reply else {
            return self;
        };
        // One level only: the codec refuses a reply within a reply.
        assert!(
            !matches!(self, Op::Replied { .. }),
            "an input is replied to once"
        );
        Op::Replied {
            reply: reply.to_string(),
            op: Box::new(self),
        }
    }
}

/// An entry: what happened and when, by the leader's clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub ts: i64,
    pub op: Op,
}

/// What a codec or a decision does with another kind of op than its
/// own: never happens, as `codec::encode_op` and `decide` give each its
/// own kind.
pub(super) fn not_mine(op: &Op) -> ! {
    unreachable!("{op:?} went to another kind's codec or decision")
}
