//! Decisions on publishes: a message for the stream, plain or part of a
//! fast batch.

use jetstream::stream::{fast_batch, Incoming, PubAck, Stream};

use super::op::{not_mine, Op};
use super::outcome::Outcome;

/// `Op::Publish`: stored (or refused) with its PubAck; a message of a
/// fast batch (its reply says so) with what its publisher is sent.
pub(super) fn publish(stream: &mut Stream, op: Op, reply: Option<&str>, now: i64) -> Outcome {
    let Op::Publish {
        subject,
        headers,
        payload,
    } = &op
    else {
        not_mine(&op)
    };
    let msg = Incoming {
        subject,
        headers: headers.as_deref(),
        payload,
    };
    if let Some(fast) = reply.filter(|r| fast_batch::is_fast(r)) {
        return Outcome::FastBatch(stream.fast_publish(msg, fast, now));
    }
    let ack = stream.publish(msg, now);
    if let PubAck::Stored(seq) | PubAck::Counted(seq, _) | PubAck::Batched { seq, .. } = &ack {
        assert!(
            *seq <= stream.store().state().last_seq,
            "a PubAck's sequence is one the store has given"
        );
    }
    Outcome::Published(ack)
}
