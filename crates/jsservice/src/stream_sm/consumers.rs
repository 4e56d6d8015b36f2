//! Decisions on consumers: creates, pulls, acks, deletes, and what
//! changes one consumer's delivery (interest, flow control, pauses,
//! dropped pulls, resets, unpins).

use jetstream::api::{stream_identity, CreateConsumerRequest, PullRequest, E};
use jetstream::consumer::{self, Via};
use jetstream::output::Output;
use jetstream::stream::Stream;

use super::op::{not_mine, Op};
use super::outcome::{Acked, Outcome};
use crate::status;

/// `Op::ConsumerCreate`: a create or update as the API received it.
pub(super) fn create(stream: &mut Stream, op: Op, now: i64) -> Outcome {
    let Op::ConsumerCreate {
        request,
        subject_name,
        filter,
        durable_api,
        generated,
        identity,
        limits,
    } = op
    else {
        not_mine(&op)
    };
    let ours = stream_identity(stream.created);
    let created = CreateConsumerRequest::parse(&request)
        .map_err(|e| E::INVALID_JSON.with("err", e))
        .and_then(|mut req| {
            // A direct consumer's create names the stream it expects:
            // one made again since is refused.
            let expected = identity.filter(|_| req.config.direct);
            if expected.is_some_and(|id| id != ours) {
                return Err(E::CONSUMER_STREAM_IDENTITY_MISMATCH.with("msg", &ours));
            }
            consumer::stamp_required_level(&mut req.config);
            let via = Via {
                name: subject_name.as_deref(),
                filter: filter.as_deref(),
                durable_api,
            };
            stream.add_consumer(req, via, || generated, limits, now)
        });
    if let Ok(info) = &created {
        assert!(
            stream.consumer(&info.name).is_some(),
            "a consumer created is there"
        );
    }
    Outcome::ConsumerCreated(created)
}

/// `Op::Pull`: the request waits (or is served), or is answered at once
/// with a status in `outputs`: nothing subscribes to a consumer that does
/// not exist (no responders), and a body that does not read is a bad
/// request.
pub(super) fn pull(stream: &mut Stream, op: Op, now: i64, outputs: &mut Vec<Output>) -> Outcome {
    let Op::Pull {
        consumer,
        request,
        reply,
    } = &op
    else {
        not_mine(&op)
    };
    if stream.consumer(consumer).is_none() {
        let subject = format!(
            "$JS.API.CONSUMER.MSG.NEXT.{}.{consumer}",
            stream.config.name
        );
        outputs.push(Output::Publish(status::no_responders(reply, &subject)));
        return Outcome::None;
    }
    match PullRequest::parse(request) {
        Ok(req) => {
            let _ = stream.pull(consumer, req, reply, now);
        }
        Err(e) => outputs.push(Output::Publish(status::status_msg(
            reply,
            400,
            &format!("Bad Request - {e}"),
        ))),
    }
    Outcome::None
}

/// `Op::Ack`: what its requester hears.
pub(super) fn ack(stream: &mut Stream, op: Op, reply: Option<&str>, now: i64) -> Outcome {
    let Op::Ack {
        consumer,
        subject,
        body,
    } = &op
    else {
        not_mine(&op)
    };
    let listens = stream.consumer(consumer).is_some_and(|c| c.takes_acks());
    if !listens {
        return Outcome::Acked(Acked::NoListener);
    }
    Outcome::Acked(match stream.ack(consumer, subject, body, reply, now) {
        Ok(true) => Acked::Confirmed,
        // A failed removal (a store error) is the store's to report.
        Ok(false) | Err(_) => Acked::Silent,
    })
}

/// `Op::DeleteConsumer`.
pub(super) fn delete(stream: &mut Stream, op: Op) -> Outcome {
    let Op::DeleteConsumer { name } = &op else {
        not_mine(&op)
    };
    let deleted = stream.delete_consumer(name);
    if deleted.is_ok() {
        assert!(
            stream.consumer(name).is_none(),
            "a consumer deleted is gone"
        );
    }
    Outcome::ConsumerDeleted(deleted)
}

/// `Op::PushInterest`: a push consumer's deliveries start or stop.
pub(super) fn push_interest(stream: &mut Stream, op: Op, now: i64) -> Outcome {
    let Op::PushInterest { consumer, active } = &op else {
        not_mine(&op)
    };
    stream.set_push_interest(consumer, *active, now);
    Outcome::None
}

/// `Op::FlowControl`: a push consumer's flow-control response.
pub(super) fn flow_control(stream: &mut Stream, op: Op) -> Outcome {
    let Op::FlowControl {
        consumer,
        subject,
        last,
    } = &op
    else {
        not_mine(&op)
    };
    let _ = stream.flow_control_reply(consumer, subject, *last);
    Outcome::None
}

/// `Op::PauseConsumer`: paused until a time, or resumed.
pub(super) fn pause(stream: &mut Stream, op: Op, now: i64) -> Outcome {
    let Op::PauseConsumer { name, until } = &op else {
        not_mine(&op)
    };
    let paused = stream.pause_consumer(name, *until, now);
    if let Ok(info) = &paused {
        assert_eq!(&info.name, name, "the consumer paused is the one named");
    }
    Outcome::ConsumerPaused(paused)
}

/// `Op::DropPulls`: pull requests nobody listens for any more.
pub(super) fn drop_pulls(stream: &mut Stream, op: Op) -> Outcome {
    let Op::DropPulls { consumer, replies } = &op else {
        not_mine(&op)
    };
    stream.drop_pulls(consumer, replies);
    Outcome::None
}

/// `Op::ResetConsumer`: where the consumer starts again, with the
/// stream's identity when the request asked for it.
pub(super) fn reset(stream: &mut Stream, op: Op, now: i64) -> Outcome {
    let Op::ResetConsumer {
        name,
        seq,
        identity,
    } = &op
    else {
        not_mine(&op)
    };
    let identity = identity.then(|| stream_identity(stream.created));
    Outcome::ConsumerReset(stream.reset_consumer(name, *seq, now), identity)
}

/// `Op::UnpinConsumer`: a priority group's pinned client loses its pin.
pub(super) fn unpin(stream: &mut Stream, op: Op) -> Outcome {
    let Op::UnpinConsumer { name, group } = &op else {
        not_mine(&op)
    };
    Outcome::ConsumerUnpinned(stream.unpin_consumer(name, group))
}
