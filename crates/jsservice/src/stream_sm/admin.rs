//! Decisions on the stream as a whole: time passing, purges, message
//! deletes, a new configuration, and a leader's barrier.

use jetstream::api::{PurgeRequest, StreamConfig, E};
use jetstream::stream::Stream;

use super::op::{not_mine, Op};
use super::outcome::Outcome;

/// `Op::Tick`: ack timeouts, expiry, schedules, batches timing out.
pub(super) fn tick(stream: &mut Stream, now: i64) -> Outcome {
    let _ = stream.tick(now);
    Outcome::None
}

/// `Op::Purge`: the request as JSON (checked when it was classified;
/// one that does not read purges everything).
pub(super) fn purge(stream: &mut Stream, op: Op) -> Outcome {
    let Op::Purge { request } = &op else {
        not_mine(&op)
    };
    let req = serde_json::from_slice::<PurgeRequest>(request).unwrap_or_default();
    let before = stream.store().state().msgs;
    let purged = stream.purge(&req);
    if let Ok(n) = purged {
        let after = stream.store().state().msgs;
        assert!(
            after <= before && n <= before,
            "a purge removes what the store held"
        );
        debug_assert_eq!(before - n, after, "a purge removes what it counts");
    }
    Outcome::Purged(purged)
}

/// `Op::DeleteMsg`.
pub(super) fn delete_msg(stream: &mut Stream, op: Op) -> Outcome {
    let Op::DeleteMsg { seq, erase } = op else {
        not_mine(&op)
    };
    let deleted = stream.delete_msg(seq, erase);
    if deleted.is_ok() {
        debug_assert!(
            !matches!(stream.store().get(seq), Ok(Some(_))),
            "a deleted message is gone"
        );
    }
    Outcome::MsgDeleted(deleted)
}

/// `Op::UpdateConfig`: the new configuration as JSON (checked against
/// the old by the meta leader).
pub(super) fn update_config(stream: &mut Stream, op: Op) -> Outcome {
    let Op::UpdateConfig { config } = &op else {
        not_mine(&op)
    };
    let updated = serde_json::from_slice::<StreamConfig>(config)
        .map_err(|e| E::STREAM_UPDATE.with("err", e))
        .and_then(|cfg| stream.update(cfg));
    Outcome::Configured(updated)
}

/// `Op::Barrier`: changes nothing; the leader's mark comes back.
pub(super) fn barrier(op: Op) -> Outcome {
    let Op::Barrier { peer, token } = op else {
        not_mine(&op)
    };
    Outcome::Barrier { peer, token }
}
