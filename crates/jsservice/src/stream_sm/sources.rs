//! Decisions on mirrors and sources: a copy from an origin, a durable
//! source's flow-control answer, a source starting over.

use jetstream::stream::{Sourced, Stream};

use super::op::{not_mine, Op};
use super::outcome::Outcome;

/// `Op::Sourced`: a copy of an origin's message, as a source's consumer
/// delivered it: stored, or already had.
pub(super) fn sourced(stream: &mut Stream, op: Op, now: i64) -> Outcome {
    let Op::Sourced {
        key,
        origin_seq,
        origin_ts,
        pending,
        after,
        subject,
        headers,
        payload,
    } = &op
    else {
        not_mine(&op)
    };
    let copy = Sourced {
        key,
        origin_seq: *origin_seq,
        origin_ts: *origin_ts,
        pending: *pending,
        after: *after,
        subject,
        headers: headers.as_deref(),
        payload,
    };
    let stored = stream.sourced(copy, now);
    if let Ok(true) = stored {
        // What `source_flow_control` and snapshots read.
        debug_assert_eq!(
            stream.source_positions().get(key.as_str()),
            Some(origin_seq),
            "a stored copy moves its source's position to it"
        );
    }
    Outcome::Sourced(stored)
}

/// `Op::Copies`: each copy as `Op::Sourced` applies it, in order. Stored
/// if any was (their acks are due); else the first refusal, if any.
pub(super) fn copies(stream: &mut Stream, op: Op, now: i64) -> Outcome {
    let Op::Copies { copies } = op else {
        not_mine(&op)
    };
    let mut first_err = None;
    let mut stored = false;
    for copy in copies {
        match sourced(stream, copy, now) {
            Outcome::Sourced(Ok(s)) => stored |= s,
            Outcome::Sourced(Err(e)) => {
                first_err.get_or_insert(e);
            }
            other => unreachable!("a copy's outcome: {other:?}"),
        }
    }
    match (stored, first_err) {
        (false, Some(e)) => Outcome::Sourced(Err(e)),
        _ => Outcome::Sourced(Ok(stored)),
    }
}

/// `Op::SourceFlowControl`: acks the last copy proposed if it was stored
/// (the source's position is at or past it).
pub(super) fn source_flow_control(stream: &Stream, op: Op) -> Outcome {
    let Op::SourceFlowControl {
        key,
        stream_seq,
        consumer_seq,
    } = &op
    else {
        not_mine(&op)
    };
    let stored = stream
        .source_positions()
        .get(key)
        .is_some_and(|position| position >= stream_seq);
    Outcome::SourceFlowControl(stored.then_some((*stream_seq, *consumer_seq)))
}

/// `Op::ResetSource`: the origin was made again; the source starts over.
pub(super) fn reset_source(stream: &mut Stream, op: Op) -> Outcome {
    let Op::ResetSource { key } = &op else {
        not_mine(&op)
    };
    stream.reset_source(key);
    Outcome::None
}
