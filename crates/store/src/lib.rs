//! Message stores for JetStream streams.
//!
//! A store keeps messages by sequence and answers the lookups a stream
//! needs (by sequence, next or last matching a filter, per-subject
//! counts). It does not decide anything: limits, retention and discard
//! policy live in the stream state machine, which calls `remove` and
//! `purge` here. Two implementations share [`MsgStore`]: [`MemStore`] and
//! [`FileStore`], the latter over a [`Dir`] so tests and the simulator can
//! inject disk faults.
//!
//! Invariants every store keeps:
//! - Sequences are assigned in order; `last_seq` only grows (a purge may
//!   move `first_seq` past it, never move `last_seq` back).
//! - `messages`, `bytes` and the per-subject index always agree with the
//!   set of live messages.
//! - No wall clock: timestamps come in with each message.

mod dir;
mod file;
mod filter;
mod journal;
mod mem;
mod ranges;
mod record;
mod subject_index;
mod sync;

use std::collections::BTreeMap;

use bytes::Bytes;

pub use dir::{set_open_file_limit, Dir, FsDir, MemDir, RESERVE_MAX, RESERVE_MIN};
pub use file::{FileStore, FileStoreConfig};
pub use filter::Filter;
pub use journal::{Journal, Replaced, Replay, RewriteJob, Rewritten, Swap, MAX_ENTRY};
pub use mem::MemStore;
pub use sync::{SyncHandle, SyncKey, SyncLatency, SyncPart, SyncRound, LATENCY_BOUNDS};

/// A stored message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredMsg {
    pub seq: u64,
    /// Unix nanoseconds when stored.
    pub ts: i64,
    pub subject: String,
    /// The raw header block (`NATS/1.0\r\n...\r\n\r\n`), if any.
    pub headers: Option<Bytes>,
    pub payload: Bytes,
}

impl StoredMsg {
    /// Size as nats-server's memory store counts it, used for `bytes`
    /// and `max_bytes` so limits match what users configure.
    pub fn size(&self) -> u64 {
        msg_size(&self.subject, self.headers.as_deref(), &self.payload)
    }
}

/// nats-server's memory store count:
/// `len(subject) + len(headers) + len(payload) + 16`.
pub fn msg_size(subject: &str, headers: Option<&[u8]>, payload: &[u8]) -> u64 {
    (subject.len() + headers.map_or(0, |h| h.len()) + payload.len() + 16) as u64
}

/// What nats-server's file store adds to subject and payload: a 22-byte
/// record header and an 8-byte checksum.
pub const FILE_MSG_OVERHEAD: u64 = 22 + 8;

/// nats-server's file store count: `22 + len(subject) + len(payload) + 8`,
/// plus `4 + len(headers)` when there are headers. `bytes` and
/// `max_bytes` use it for file streams, so limits and reported sizes
/// match nats-server's.
pub fn file_msg_size(subject: &str, headers: Option<&[u8]>, payload: &[u8]) -> u64 {
    let h = headers.map_or(0, |h| h.len());
    let h = if h > 0 { 4 + h } else { 0 };
    (subject.len() + h + payload.len()) as u64 + FILE_MSG_OVERHEAD
}

/// Counts for one subject.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SubjectState {
    pub first: u64,
    pub last: u64,
    pub msgs: u64,
}

/// What `state` reports.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StoreState {
    pub msgs: u64,
    pub bytes: u64,
    pub first_seq: u64,
    /// Unix nanoseconds of the first live message; 0 when none.
    pub first_ts: i64,
    pub last_seq: u64,
    pub last_ts: i64,
    pub num_subjects: u64,
    /// Sequences between first and last that are gone.
    pub num_deleted: u64,
    /// Records found corrupt on recovery and skipped.
    pub lost: Vec<u64>,
    pub lost_bytes: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
    #[error("stream store is closed")]
    Closed,
    #[error("record of {0} bytes is too large")]
    TooLarge(usize),
    #[error("corrupt store: {0}")]
    Corrupt(String),
    /// `FileStore::open_at` found no mark for this log index: the store
    /// is behind it, or damaged, and must be caught up from a peer.
    #[error("the store holds no mark for log index {0}")]
    NoMark(u64),
}

pub type Result<T> = std::result::Result<T, StoreError>;

/// The deleted ranges of a store whose live sequences come as half-open
/// spans `live` (in order) and whose last sequence is `last_seq`: the gaps
/// between them, and after the last one. None while nothing is live, as
/// [`MsgStore::deleted`].
pub(crate) fn gaps(live: impl Iterator<Item = (u64, u64)>, last_seq: u64) -> Vec<(u64, u64)> {
    let mut ranges = Vec::new();
    let mut cursor: Option<u64> = None;
    for (a, b) in live {
        if let Some(c) = cursor.filter(|&c| a > c) {
            ranges.push((c, a - 1));
        }
        cursor = Some(b);
    }
    if let Some(c) = cursor.filter(|&c| c <= last_seq) {
        ranges.push((c, last_seq));
    }
    ranges
}

/// What a purge removes: matching messages below `seq` (if set), keeping
/// the newest `keep` (if set). nats-server's PurgeEx.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Purge {
    pub filter: Option<String>,
    pub seq: Option<u64>,
    pub keep: Option<u64>,
}

/// The storage behind a stream.
pub trait MsgStore: Send {
    /// Stores a message at `last_seq + 1` and returns that sequence.
    fn store(
        &mut self,
        subject: &str,
        headers: Option<&[u8]>,
        payload: &[u8],
        ts: i64,
    ) -> Result<u64>;
    /// Uses up the next sequence without storing anything (interest
    /// retention with no interest).
    fn skip(&mut self, ts: i64) -> Result<u64>;
    /// The size this store counts for a message, in `bytes` and against
    /// `max_bytes`.
    fn msg_size(&self, subject: &str, headers: Option<&[u8]>, payload: &[u8]) -> u64 {
        msg_size(subject, headers, payload)
    }
    fn get(&self, seq: u64) -> Result<Option<StoredMsg>>;
    /// The first live message with sequence `>= start` matching `filter`.
    fn next_matching(&self, start: u64, filter: &Filter) -> Result<Option<StoredMsg>>;
    /// The first live message with sequence `>= start` that has headers
    /// (a stream reopening rebuilds its duplicate window and TTLs from
    /// them). A store that knows which messages have headers passes over
    /// the others without reading them.
    fn next_with_headers(&self, start: u64) -> Result<Option<StoredMsg>> {
        let mut at = start;
        while let Some(m) = self.next_matching(at, &Filter::all())? {
            if m.headers.as_ref().is_some_and(|h| !h.is_empty()) {
                return Ok(Some(m));
            }
            at = m.seq + 1;
        }
        Ok(None)
    }
    /// The newest live message matching `filter`.
    fn last_matching(&self, filter: &Filter) -> Result<Option<StoredMsg>>;
    /// Removes one message. `erase` overwrites its bytes on disk as well.
    /// Returns whether it was there.
    fn remove(&mut self, seq: u64, erase: bool) -> Result<bool>;
    /// Returns how many messages went.
    fn purge(&mut self, p: &Purge) -> Result<u64>;
    fn state(&self) -> StoreState;
    /// Sequences between first and last that are not live.
    fn deleted(&self) -> Vec<u64>;
    /// [`MsgStore::deleted`] as inclusive ranges, in order: what a state
    /// snapshot carries, without a word per deleted sequence.
    fn deleted_ranges(&self) -> Vec<(u64, u64)> {
        let mut ranges: Vec<(u64, u64)> = Vec::new();
        for seq in self.deleted() {
            match ranges.last_mut() {
                Some((_, last)) if *last + 1 == seq => *last = seq,
                _ => ranges.push((seq, seq)),
            }
        }
        ranges
    }
    fn subject_state(&self, subject: &str) -> Option<SubjectState>;
    /// Live message counts per subject matching `filter`.
    fn subjects_totals(&self, filter: &Filter) -> BTreeMap<String, u64>;
    /// Live messages with sequence `>= start` matching `filter`; with
    /// `last_per_subject`, one per subject whose newest message is there.
    fn num_pending(&self, start: u64, filter: &Filter, last_per_subject: bool) -> u64;
    /// The newest sequence of each subject matching `filter`, ascending.
    fn multi_last_seqs(&self, filter: &Filter) -> Vec<u64>;
    /// The first sequence stored at or after `ts`, or `last_seq + 1`.
    fn seq_for_time(&self, ts: i64) -> u64;
    /// Sequences whose timestamp is `<= cutoff`, oldest first, at most
    /// `limit` of them (for max_age expiry).
    fn expired(&self, cutoff: i64, limit: usize) -> Vec<u64>;
    /// Makes the next sequence `seq` (an empty store created with
    /// `first_seq`, or a purge past the end).
    fn reset_to(&mut self, seq: u64) -> Result<()>;
    /// Whether writes are waiting for [`MsgStore::sync_handle`].
    fn dirty(&self) -> bool;
    /// Something that makes the writes so far durable when called, to be
    /// run off the stream's task (group commit). `None` when nothing needs
    /// syncing (memory store, or no writes since the last handle).
    fn sync_handle(&mut self) -> Option<SyncHandle>;
    /// The error of a write that failed, leaving memory ahead of storage:
    /// the owner must reopen the store before trusting it again.
    fn failed(&self) -> Option<&str> {
        None
    }
    /// The first damage a read found since the store was opened (a record
    /// that failed its checksum, or no longer reads back), for the log. A
    /// replica's driver fetches the store again from a peer.
    fn damage(&self) -> Option<String> {
        None
    }
    /// Removes the stream's data from storage.
    fn delete_all(&mut self) -> Result<()>;
    /// The first message at or after `start` that the store held once
    /// log index `index` was applied: a live one, or one a later index
    /// removed while its record is still kept (`FileStore::open_at`'s
    /// stores keep them until a release). Other stores hold only what is
    /// live. Callers bound it by the last sequence at `index`.
    fn next_as_of(&self, start: u64, _index: u64) -> Result<Option<StoredMsg>> {
        self.next_matching(start, &Filter::all())
    }
    /// The changes that follow come from applying log index `index`
    /// (a replica's store records which index removed what).
    fn applying(&mut self, _index: u64) {}
    /// Records that the state so far is the state after log index
    /// `index`, so that the store can be opened at exactly that state
    /// again (`FileStore::open_at`). Indexes only grow. A store that
    /// keeps nothing across a restart ignores it.
    fn mark(&mut self, _index: u64) -> Result<()> {
        Ok(())
    }
    /// The store will never be opened at a mark below `index` again:
    /// what removals and erasures since older marks held back may go.
    fn release(&mut self, _index: u64) -> Result<()> {
        Ok(())
    }
}
