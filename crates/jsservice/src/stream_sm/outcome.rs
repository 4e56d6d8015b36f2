//! What applying an input gives: its outcome for the requester, and
//! the deliveries and statuses it made.

use bytes::Bytes;
use jetstream::api::{ApiError, ConsumerInfo};
use jetstream::output::Output;
use jetstream::stream::PubAck;

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
