//! Atomic batch publish (ADR-50, `allow_atomic`): messages carrying
//! `Nats-Batch-Id` and `Nats-Batch-Sequence` are staged, each answered
//! with an empty reply, until one carries `Nats-Batch-Commit` (`1`: store
//! it too; `eob`: it only ends the batch). Then every staged message is
//! checked, each seeing the ones before it, and all are stored, or none.
//!
//! Staging is part of the stream's state: a replica applies the same
//! entries, so it stages the same messages and commits the same batch at
//! the same entry; the commit is that one entry. A batch without a message
//! for ten seconds (by the entries' clock) is abandoned, as nats-server
//! abandons it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::publish::BatchDiff;
use super::{Incoming, PubAck, Stream};
use crate::api::{ApiError, E};
use crate::headers;

pub const BATCH_ID: &str = "Nats-Batch-Id";
pub const BATCH_SEQUENCE: &str = "Nats-Batch-Sequence";
pub const BATCH_COMMIT: &str = "Nats-Batch-Commit";
const REQUIRED_API_LEVEL: &str = "Nats-Required-Api-Level";
/// nats-server's limits: the longest id, the most messages in a batch,
/// the most batches open on a stream, and how long one may sit idle.
const MAX_ID: usize = 64;
pub const MAX_SIZE: u64 = 1000;
const MAX_OPEN: usize = 50;
const IDLE: i64 = 10_000_000_000;

/// The batches open on a stream: atomic ones being staged, and fast ones
/// (`fast_batch.rs`) under way.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Batches {
    open: BTreeMap<String, Staged>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(super) fast: BTreeMap<String, super::fast_batch::FastBatch>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Staged {
    messages: Vec<StagedMsg>,
    /// When its last message came.
    last: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct StagedMsg {
    subject: String,
    headers: Option<Vec<u8>>,
    payload: Vec<u8>,
}

impl Batches {
    pub fn is_empty(&self) -> bool {
        self.open.is_empty() && self.fast.is_empty()
    }

    /// Abandons batches idle since before `now - IDLE`.
    pub fn expire(&mut self, now: i64) {
        self.open.retain(|_, b| b.last + IDLE > now);
        self.fast.retain(|_, b| b.last() + IDLE > now);
    }

    /// When the next idle batch is abandoned, for the driver's timer.
    pub fn next_deadline(&self) -> Option<i64> {
        let atomic = self.open.values().map(|b| b.last);
        let fast = self.fast.values().map(|b| b.last());
        atomic.chain(fast).map(|last| last + IDLE).min()
    }

    /// Drops the atomic batches being staged.
    pub fn clear(&mut self) {
        self.open.clear();
    }

    /// Drops the fast batches under way.
    pub fn clear_fast(&mut self) {
        self.fast.clear();
    }
}

/// How a batch message ends its batch.
#[derive(PartialEq, Eq)]
enum Commit {
    No,
    /// Store this message too.
    Store,
    /// This message only ends the batch.
    EndOfBatch,
}

impl Stream {
    /// A message of the batch `id`, as nats-server's
    /// `processJetStreamAtomicBatchMsg` takes it.
    pub(super) fn batch_publish(&mut self, id: &str, msg: Incoming<'_>, now: i64) -> PubAck {
        match self.try_batch_publish(id, msg, now) {
            Ok(ack) => ack,
            Err(e) => PubAck::Error(e),
        }
    }

    /// What nats-server checks of any batch message (atomic or fast)
    /// before its batch: a sealed stream, and the message's size.
    pub(super) fn check_batch_message(&self, msg: Incoming<'_>) -> Result<(), ApiError> {
        let h = msg.headers.unwrap_or_default();
        if self.config.sealed {
            return Err(E::STREAM_SEALED.err());
        }
        if self.config.max_msg_size >= 0 {
            let max = self.config.max_msg_size as usize;
            if h.len() > max || msg.payload.len() > max - h.len() {
                return Err(E::STREAM_MESSAGE_EXCEEDS_MAXIMUM.err());
            }
        }
        Ok(())
    }

    fn try_batch_publish(
        &mut self,
        id: &str,
        msg: Incoming<'_>,
        now: i64,
    ) -> Result<PubAck, ApiError> {
        let h = msg.headers.unwrap_or_default();
        self.check_batch_message(msg)?;
        if !self.config.allow_atomic {
            return Err(E::ATOMIC_PUBLISH_DISABLED.err());
        }
        if id.len() > MAX_ID {
            return Err(E::ATOMIC_PUBLISH_INVALID_BATCH_ID.err());
        }
        let seq = headers::get(h, BATCH_SEQUENCE)
            .and_then(headers::parse_u64)
            .ok_or_else(|| E::ATOMIC_PUBLISH_MISSING_SEQ.err())?;
        let commit = match headers::get(h, BATCH_COMMIT) {
            None => Some(Commit::No),
            Some("1") => Some(Commit::Store),
            Some("eob") => Some(Commit::EndOfBatch),
            Some(_) => None,
        };
        // Without the end-of-batch marker (sequence 0 with one wraps, as
        // nats-server's unsigned arithmetic does, and is too large).
        let size = seq.wrapping_sub(u64::from(commit == Some(Commit::EndOfBatch)));
        let too_large = || E::ATOMIC_PUBLISH_TOO_LARGE_BATCH.with("size", MAX_SIZE);
        self.batches.expire(now);
        if !self.batches.open.contains_key(id) {
            if seq != 1 {
                return Err(match size > MAX_SIZE {
                    true => too_large(),
                    false => E::ATOMIC_PUBLISH_INCOMPLETE_BATCH.err(),
                });
            }
            if self.batches.open.len() >= MAX_OPEN {
                return Err(E::ATOMIC_PUBLISH_TOO_MANY_INFLIGHT.err());
            }
            let staged = Staged {
                messages: Vec::new(),
                last: now,
            };
            self.batches.open.insert(id.to_string(), staged);
        }
        let abandon = |stream: &mut Stream, e: ApiError| {
            stream.batches.open.remove(id);
            Err(e)
        };
        let Some(commit) = commit else {
            return abandon(self, E::ATOMIC_PUBLISH_INVALID_BATCH_COMMIT.err());
        };
        let mut kept = msg.headers.map(<[u8]>::to_vec);
        if let Some(level) = headers::get(h, REQUIRED_API_LEVEL) {
            if level
                .parse::<i64>()
                .map_or(true, |l| l > crate::api::API_LEVEL)
            {
                return abandon(self, E::REQUIRED_API_LEVEL.err());
            }
            kept = headers::without(h, &[REQUIRED_API_LEVEL]).map(|b| b.to_vec());
        }
        let staged = self.batches.open.get_mut(id).expect("opened above");
        if staged.messages.len() as u64 + 1 != seq || (seq == 1 && commit == Commit::EndOfBatch) {
            return abandon(self, E::ATOMIC_PUBLISH_INCOMPLETE_BATCH.err());
        }
        if size > MAX_SIZE {
            return abandon(self, too_large());
        }
        staged.last = now;
        if commit != Commit::EndOfBatch {
            staged.messages.push(StagedMsg {
                subject: msg.subject.to_string(),
                headers: kept,
                payload: msg.payload.to_vec(),
            });
        }
        if commit == Commit::No {
            return Ok(PubAck::Staged);
        }
        let mut batch = self.batches.open.remove(id).expect("opened above");
        if commit == Commit::EndOfBatch {
            // The last stored message says it committed the batch.
            let last = batch.messages.last_mut().expect("seq > 1");
            last.headers =
                Some(headers::append(last.headers.as_deref(), &[(BATCH_COMMIT, "1")]).to_vec());
        }
        self.commit(id, &batch.messages, now)
    }

    /// Checks every message of a batch, then stores them all.
    fn commit(&mut self, id: &str, messages: &[StagedMsg], now: i64) -> Result<PubAck, ApiError> {
        let mut diff = BatchDiff::default();
        let mut checked = Vec::with_capacity(messages.len());
        for m in messages {
            let h = m.headers.as_deref();
            if h.and_then(|h| headers::get(h, headers::EXPECTED_LAST_MSG_ID))
                .is_some_and(|v| !v.is_empty())
            {
                return Err(E::ATOMIC_PUBLISH_UNSUPPORTED_HEADER_BATCH
                    .with("header", headers::EXPECTED_LAST_MSG_ID));
            }
            let incoming = Incoming {
                subject: &m.subject,
                headers: h,
                payload: &m.payload,
            };
            match self.check(incoming, false, Some(&mut diff), now)? {
                Ok(c) => checked.push(c),
                // A batch refuses duplicates when checking.
                Err(_) => return Err(E::ATOMIC_PUBLISH_CONTAINS_DUPLICATE_MESSAGE.err()),
            }
        }
        let count = checked.len() as u64;
        let before = self.store.state().last_seq;
        let mut last = 0;
        for c in checked {
            last = match self.store_checked(c, now)? {
                PubAck::Stored(seq) | PubAck::Counted(seq, _) => seq,
                other => unreachable!("stored: {other:?}"),
            };
        }
        // Whole and contiguous: the batch took the sequences after the
        // stream's last, one each.
        debug_assert_eq!(last, before + count, "batch {id} stored out of line");
        Ok(PubAck::Batched {
            seq: last,
            batch: id.to_string(),
            count,
        })
    }
}
