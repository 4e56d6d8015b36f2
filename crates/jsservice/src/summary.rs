//! What a store holds, without its messages: the store's part of a
//! stream's state snapshot (`stream_sm`), and what a replica's store is
//! caught up to (`catchup`).

use bytes::{Buf, BufMut, BytesMut};
use store::MsgStore;

use crate::codec::DecodeError;

/// What a store holds, without its messages: the part of a stream's
/// state snapshot that a replica's store must match.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StoreSummary {
    pub first_seq: u64,
    pub last_seq: u64,
    pub last_ts: i64,
    pub msgs: u64,
    pub bytes: u64,
    /// Sequences between `first_seq` and `last_seq` that hold no
    /// message, as inclusive ranges in order.
    pub deleted: Vec<(u64, u64)>,
}

impl StoreSummary {
    pub fn of(store: &dyn MsgStore) -> StoreSummary {
        let state = store.state();
        let deleted = store.deleted_ranges();
        StoreSummary {
            first_seq: state.first_seq,
            last_seq: state.last_seq,
            last_ts: state.last_ts,
            msgs: state.msgs,
            bytes: state.bytes,
            deleted,
        }
    }

    /// Whether the store this describes holds a message at `seq`.
    pub fn holds(&self, seq: u64) -> bool {
        if self.msgs == 0 || seq < self.first_seq || seq > self.last_seq {
            return false;
        }
        let at = self.deleted.partition_point(|&(_, last)| last < seq);
        self.deleted.get(at).is_none_or(|&(first, _)| first > seq)
    }

    pub fn encode(&self, b: &mut BytesMut) {
        b.put_u64_le(self.first_seq);
        b.put_u64_le(self.last_seq);
        b.put_i64_le(self.last_ts);
        b.put_u64_le(self.msgs);
        b.put_u64_le(self.bytes);
        b.put_u64_le(self.deleted.len() as u64);
        for &(first, last) in &self.deleted {
            b.put_u64_le(first);
            b.put_u64_le(last);
        }
    }

    pub fn decode(b: &mut &[u8]) -> Result<StoreSummary, DecodeError> {
        if b.remaining() < 6 * 8 {
            return Err(DecodeError::Short);
        }
        let mut summary = StoreSummary {
            first_seq: b.get_u64_le(),
            last_seq: b.get_u64_le(),
            last_ts: b.get_i64_le(),
            msgs: b.get_u64_le(),
            bytes: b.get_u64_le(),
            deleted: Vec::new(),
        };
        let ranges = b.get_u64_le();
        if (b.remaining() as u64) < ranges.saturating_mul(16) {
            return Err(DecodeError::Short);
        }
        for _ in 0..ranges {
            summary.deleted.push((b.get_u64_le(), b.get_u64_le()));
        }
        Ok(summary)
    }

    /// Where `store` differs from this summary, if it does.
    pub fn mismatch(&self, store: &dyn MsgStore) -> Option<String> {
        let found = StoreSummary::of(store).normalized();
        let want = self.clone().normalized();
        (found != want).then(|| format!("store holds {found}, the snapshot says {want}"))
    }

    /// An empty store's first sequence is the one after its last,
    /// whatever a store reports.
    fn normalized(mut self) -> StoreSummary {
        if self.msgs == 0 {
            self.first_seq = self.last_seq + 1;
            self.deleted.clear();
        }
        self
    }
}

/// Short, for a log line: the deleted ranges are counted, not listed.
impl std::fmt::Display for StoreSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let deleted: u64 = self.deleted.iter().map(|(a, b)| b - a + 1).sum();
        write!(
            f,
            "sequences {}..={} ({} messages, {} bytes, {} deleted in {} ranges, last at {})",
            self.first_seq,
            self.last_seq,
            self.msgs,
            self.bytes,
            deleted,
            self.deleted.len(),
            self.last_ts
        )
    }
}
