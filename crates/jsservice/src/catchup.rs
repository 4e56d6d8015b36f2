//! Catching a replica's store up to a stream's state from a peer's
//! store. A Raft snapshot of a stream carries its state, not its
//! messages; [`StoreSummary`] is the store's part of that state, and its
//! size does not depend on how many messages the stream holds. A replica
//! whose store is behind a snapshot it installs fetches what it lacks
//! from the leader's store in bounded chunks.
//!
//! The driver contract, for a replica installing a snapshot whose store
//! summary is `target`:
//!
//! 1. [`prepare`] over its store: removes what `target` no longer holds
//!    and returns the first [`ChunkRequest`], or `None` when nothing is
//!    to be fetched. [`CatchupError::Diverged`]: the store is not a
//!    prefix of `target`; the driver empties it and prepares again.
//! 2. The driver sends the request to the leader, whose driver answers
//!    it with [`serve`] over its own store; [`Chunk`]s travel encoded,
//!    checksummed end to end.
//! 3. [`fill`] stores a chunk and returns the next request, until `None`.
//!    One request is outstanding at a time: that is the flow control.
//! 4. [`finish`] checks that the store holds exactly what `target`
//!    says. Only then does the driver mark the store at the snapshot's
//!    index and restore the rest of the state over it.
//!
//! Sequences travel with their messages, so a message lands at the same
//! sequence on every replica; sequences `target` has no message for are
//! stored as skips.

use bytes::{Buf, BufMut, BytesMut};
use store::{MsgStore, Purge, StoredMsg};

use crate::codec::{get_msg, put_msg, DecodeError};
pub use crate::summary::StoreSummary;

/// Bytes of messages a chunk carries, at most (one message more, if a
/// single message is larger).
pub const CHUNK_BYTES: u64 = 1024 * 1024;

/// Messages from `from` to `to` (inclusive), asked of a peer's store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkRequest {
    pub from: u64,
    pub to: u64,
}

impl ChunkRequest {
    pub fn encode(&self) -> Vec<u8> {
        let mut b = BytesMut::with_capacity(16);
        b.put_u64_le(self.from);
        b.put_u64_le(self.to);
        b.to_vec()
    }

    pub fn decode(mut b: &[u8]) -> Result<ChunkRequest, DecodeError> {
        if b.remaining() != 16 {
            return Err(DecodeError::Short);
        }
        let request = ChunkRequest {
            from: b.get_u64_le(),
            to: b.get_u64_le(),
        };
        match request.from <= request.to {
            true => Ok(request),
            false => Err(DecodeError::Kind(0)),
        }
    }
}

/// A peer's answer: the messages it holds from `from` up to (not
/// including) `next`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    pub from: u64,
    pub next: u64,
    pub msgs: Vec<StoredMsg>,
}

impl Chunk {
    /// `crc32c | from | next | count | messages`.
    pub fn encode(&self) -> Vec<u8> {
        let size: usize = self
            .msgs
            .iter()
            .map(|m| 32 + m.subject.len() + m.headers.as_ref().map_or(0, |h| h.len()))
            .sum::<usize>()
            + self.msgs.iter().map(|m| m.payload.len()).sum::<usize>();
        let mut b = BytesMut::with_capacity(28 + size);
        b.put_u32_le(0);
        b.put_u64_le(self.from);
        b.put_u64_le(self.next);
        b.put_u64_le(self.msgs.len() as u64);
        for m in &self.msgs {
            b.put_u64_le(m.seq);
            b.put_i64_le(m.ts);
            put_msg(&mut b, &m.subject, m.headers.as_deref(), &m.payload);
        }
        let crc = crc32c::crc32c(&b[4..]);
        b[..4].copy_from_slice(&crc.to_le_bytes());
        b.to_vec()
    }

    /// Refuses a chunk whose checksum fails, or that is cut short.
    pub fn decode(data: &[u8]) -> Result<Chunk, DecodeError> {
        if data.len() < 28 {
            return Err(DecodeError::Short);
        }
        let crc = u32::from_le_bytes(data[..4].try_into().expect("4 bytes"));
        if crc32c::crc32c(&data[4..]) != crc {
            return Err(DecodeError::Kind(0));
        }
        let mut b = &data[4..];
        let from = b.get_u64_le();
        let next = b.get_u64_le();
        let count = b.get_u64_le();
        let mut msgs = Vec::new();
        for _ in 0..count {
            if b.remaining() < 16 {
                return Err(DecodeError::Short);
            }
            let seq = b.get_u64_le();
            let ts = b.get_i64_le();
            let (subject, headers, payload) = get_msg(&mut b)?;
            msgs.push(StoredMsg {
                seq,
                ts,
                subject,
                headers,
                payload,
            });
        }
        if b.has_remaining() {
            return Err(DecodeError::Kind(0));
        }
        Ok(Chunk { from, next, msgs })
    }
}

/// A catch-up request on the wire: messages as the peer's store held
/// them once log index `mark` was applied (the snapshot being installed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ask {
    pub mark: u64,
    pub range: ChunkRequest,
}

impl Ask {
    /// `mark | from | to`.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = self.mark.to_le_bytes().to_vec();
        b.extend_from_slice(&self.range.encode());
        b
    }

    pub fn decode(b: &[u8]) -> Result<Ask, DecodeError> {
        if b.len() != 24 {
            return Err(DecodeError::Short);
        }
        let mark = u64::from_le_bytes(b[..8].try_into().expect("8 bytes"));
        Ok(Ask {
            mark,
            range: ChunkRequest::decode(&b[8..])?,
        })
    }
}

/// A peer's answer to an [`Ask`], on the wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    Chunk(Chunk),
    /// Not now (the peer does not lead, or has not applied that far):
    /// ask again a moment later.
    Later,
    /// The peer no longer keeps its store as of that index: catch up to
    /// this state snapshot instead, the peer's as of `index` (a later
    /// one; the entries in between are already in it).
    Retarget {
        index: u64,
        state: Vec<u8>,
    },
}

impl Reply {
    /// A tag byte, then the chunk (checksummed on its own), nothing, or
    /// `index | state`.
    pub fn encode(&self) -> Vec<u8> {
        match self {
            Reply::Chunk(chunk) => {
                let mut b = vec![0];
                b.extend_from_slice(&chunk.encode());
                b
            }
            Reply::Later => vec![1],
            Reply::Retarget { index, state } => {
                let mut b = vec![2];
                b.extend_from_slice(&index.to_le_bytes());
                b.extend_from_slice(state);
                b
            }
        }
    }

    pub fn decode(b: &[u8]) -> Result<Reply, DecodeError> {
        match b.split_first() {
            Some((0, chunk)) => Ok(Reply::Chunk(Chunk::decode(chunk)?)),
            Some((1, [])) => Ok(Reply::Later),
            Some((2, rest)) if rest.len() >= 8 => Ok(Reply::Retarget {
                index: u64::from_le_bytes(rest[..8].try_into().expect("8 bytes")),
                state: rest[8..].to_vec(),
            }),
            Some(_) => Err(DecodeError::Kind(0)),
            None => Err(DecodeError::Short),
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CatchupError {
    /// The store holds sequences past the target's: it is not behind
    /// the target but elsewhere (damage). Empty it and start again.
    #[error("the store is not a prefix of the snapshot: {0}")]
    Diverged(String),
    /// A chunk does not fit the request or the target.
    #[error("a catch-up chunk does not fit: {0}")]
    BadChunk(String),
    #[error("store: {0}")]
    Store(String),
}

fn store_err(e: store::StoreError) -> CatchupError {
    CatchupError::Store(e.to_string())
}

/// Step 1: brings `store` down to what `target` holds of what it has,
/// and says what to fetch.
pub fn prepare(
    store: &mut dyn MsgStore,
    target: &StoreSummary,
) -> Result<Option<ChunkRequest>, CatchupError> {
    let local = store.state();
    if local.last_seq > target.last_seq {
        return Err(CatchupError::Diverged(format!(
            "it holds up to {}, the snapshot {}",
            local.last_seq, target.last_seq
        )));
    }
    if target.msgs == 0 {
        // Nothing to hold: only where the sequence stands, and its time.
        store.purge(&Purge::default()).map_err(store_err)?;
        if local.last_seq < target.last_seq {
            store.reset_to(target.last_seq).map_err(store_err)?;
            store.skip(target.last_ts).map_err(store_err)?;
        }
        return Ok(None);
    }
    if local.msgs == 0 || target.first_seq > local.last_seq {
        store.reset_to(target.first_seq).map_err(store_err)?;
    } else if local.first_seq < target.first_seq {
        store
            .purge(&Purge {
                seq: Some(target.first_seq),
                ..Purge::default()
            })
            .map_err(store_err)?;
    }
    // What the target deleted among what this store has.
    let held_to = store.state().last_seq;
    for &(first, last) in &target.deleted {
        if first > held_to {
            break;
        }
        for seq in first..=last.min(held_to) {
            store.remove(seq, false).map_err(store_err)?;
        }
    }
    let from = store.state().last_seq + 1;
    Ok((from <= target.last_seq).then_some(ChunkRequest {
        from,
        to: target.last_seq,
    }))
}

/// Step 2, on the peer: the messages `store` held at log index `mark`
/// (the snapshot the requester installs) from `request.from`, up to
/// [`CHUNK_BYTES`] and never past `request.to`. A store that keeps what
/// it removed since its marks (`MsgStore::next_as_of`) serves those too;
/// any other serves what it holds now, which [`finish`] finds short if
/// the stream removed a message since.
pub fn serve(
    store: &dyn MsgStore,
    request: ChunkRequest,
    mark: u64,
) -> Result<Chunk, CatchupError> {
    serve_up_to(store, request, mark, CHUNK_BYTES)
}

/// [`serve`], with chunks of at most `limit` bytes of messages (the
/// simulator's are small, so its fetches take many).
pub fn serve_up_to(
    store: &dyn MsgStore,
    request: ChunkRequest,
    mark: u64,
    limit: u64,
) -> Result<Chunk, CatchupError> {
    let mut msgs = Vec::new();
    let mut bytes = 0u64;
    let mut next = request.from;
    while next <= request.to && (bytes < limit || msgs.is_empty()) {
        match store.next_as_of(next, mark).map_err(store_err)? {
            Some(m) if m.seq <= request.to => {
                next = m.seq + 1;
                bytes += store.msg_size(&m.subject, m.headers.as_deref(), &m.payload);
                msgs.push(m);
            }
            _ => next = request.to + 1,
        }
    }
    Ok(Chunk {
        from: request.from,
        next,
        msgs,
    })
}

/// Step 3: stores `chunk`, the answer to `asked`; returns what to ask
/// next, or `None` once the target's last sequence is covered.
pub fn fill(
    store: &mut dyn MsgStore,
    target: &StoreSummary,
    asked: ChunkRequest,
    chunk: Chunk,
) -> Result<Option<ChunkRequest>, CatchupError> {
    let bad = |why: String| Err(CatchupError::BadChunk(why));
    if chunk.from != asked.from || chunk.next <= asked.from || chunk.next > asked.to + 1 {
        return bad(format!(
            "{asked:?} answered from {} to {}",
            chunk.from, chunk.next
        ));
    }
    for m in chunk.msgs {
        if m.seq < asked.from || m.seq <= store.state().last_seq || m.seq >= chunk.next {
            return bad(format!("sequence {} out of order", m.seq));
        }
        if !target.holds(m.seq) {
            return bad(format!("sequence {} is deleted in the snapshot", m.seq));
        }
        while store.state().last_seq + 1 < m.seq {
            store.skip(m.ts).map_err(store_err)?;
        }
        let seq = store
            .store(&m.subject, m.headers.as_deref(), &m.payload, m.ts)
            .map_err(store_err)?;
        debug_assert_eq!(seq, m.seq, "a fetched message keeps its sequence");
    }
    Ok((chunk.next <= target.last_seq).then_some(ChunkRequest {
        from: chunk.next,
        to: target.last_seq,
    }))
}

/// Step 4: the sequences after the last message fetched, then the check
/// that `store` is what `target` says.
pub fn finish(store: &mut dyn MsgStore, target: &StoreSummary) -> Result<(), CatchupError> {
    while store.state().last_seq < target.last_seq {
        store.skip(target.last_ts).map_err(store_err)?;
    }
    match target.mismatch(store) {
        None => Ok(()),
        Some(why) => Err(CatchupError::Diverged(why)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use store::{Filter, MemStore};

    /// The snapshot's index, for stores without marks.
    const MARK: u64 = 1;

    fn put(store: &mut dyn MsgStore, n: u64, size: usize) {
        for i in 0..n {
            store
                .store(
                    &format!("s.{}", i % 3),
                    (i % 4 == 0).then_some(&b"NATS/1.0\r\n\r\n"[..]),
                    &vec![b'x'; size],
                    1_000 + i as i64,
                )
                .unwrap();
        }
    }

    fn contents(store: &dyn MsgStore) -> Vec<StoredMsg> {
        let mut out = Vec::new();
        let mut at = 0;
        while let Some(m) = store.next_matching(at, &Filter::all()).unwrap() {
            at = m.seq + 1;
            out.push(m);
        }
        out
    }

    /// Runs the whole exchange between `follower` and `leader`; returns
    /// how many chunks it took.
    fn catch_up(
        follower: &mut dyn MsgStore,
        leader: &dyn MsgStore,
        target: &StoreSummary,
    ) -> Result<usize, CatchupError> {
        let mut chunks = 0;
        let mut next = prepare(follower, target)?;
        while let Some(asked) = next {
            let wire = serve(leader, asked, MARK)?.encode();
            let chunk = Chunk::decode(&wire).expect("decodes");
            next = fill(follower, target, asked, chunk)?;
            chunks += 1;
        }
        finish(follower, target)?;
        Ok(chunks)
    }

    /// The leader's stream, with deletes in the middle, a purge at the
    /// front and skips at the end.
    fn leader() -> MemStore {
        let mut leader = MemStore::sized_as_file();
        put(&mut leader, 3_000, 900);
        for seq in (200..2_000).step_by(7) {
            leader.remove(seq, false).unwrap();
        }
        leader
            .purge(&Purge {
                seq: Some(120),
                ..Purge::default()
            })
            .unwrap();
        leader.skip(9_000).unwrap();
        leader
    }

    #[test]
    fn an_empty_store_catches_up_in_bounded_chunks() {
        let leader = leader();
        let target = StoreSummary::of(&leader);
        let mut follower = MemStore::sized_as_file();
        let chunks = catch_up(&mut follower, &leader, &target).unwrap();
        assert_eq!(contents(&follower), contents(&leader));
        assert_eq!(follower.state(), leader.state());
        // 2.6 MB of messages in chunks of at most 1 MiB (one over).
        assert!((3..=4).contains(&chunks), "{chunks} chunks");
    }

    #[test]
    fn a_store_behind_keeps_its_prefix_and_drops_what_the_target_deleted() {
        let mut follower = MemStore::sized_as_file();
        put(&mut follower, 1_500, 900);
        let leader = leader();
        let target = StoreSummary::of(&leader);
        catch_up(&mut follower, &leader, &target).unwrap();
        assert_eq!(contents(&follower), contents(&leader));
        assert_eq!(follower.state(), leader.state());
    }

    /// A replica's file store, from empty (a stream that still holds
    /// sequence 1) and from a prefix.
    #[test]
    fn a_file_store_catches_up_from_empty_and_from_a_prefix() {
        let open = || {
            let dir = Arc::new(store::MemDir::new());
            store::FileStore::open_at(dir, store::FileStoreConfig::default(), 0).unwrap()
        };
        let mut leader = MemStore::sized_as_file();
        put(&mut leader, 500, 300);
        leader.remove(7, false).unwrap();
        let target = StoreSummary::of(&leader);
        assert_eq!(target.first_seq, 1);
        let mut empty = open();
        catch_up(&mut empty, &leader, &target).unwrap();
        assert_eq!(contents(&empty), contents(&leader));
        let mut prefix = open();
        put(&mut prefix, 200, 300);
        let mut more = leader;
        put(&mut more, 100, 300);
        for seq in 150..260 {
            more.remove(seq, false).unwrap();
        }
        let target = StoreSummary::of(&more);
        catch_up(&mut prefix, &more, &target).unwrap();
        assert_eq!(contents(&prefix), contents(&more));
        assert_eq!(StoreSummary::of(&prefix), target);
    }

    #[test]
    fn a_target_with_nothing_left_only_moves_the_sequence() {
        let mut leader = MemStore::new();
        put(&mut leader, 10, 10);
        leader.purge(&Purge::default()).unwrap();
        let target = StoreSummary::of(&leader);
        let mut follower = MemStore::new();
        put(&mut follower, 4, 10);
        assert_eq!(catch_up(&mut follower, &leader, &target), Ok(0));
        assert_eq!(follower.state(), leader.state());
    }

    #[test]
    fn a_store_ahead_of_the_target_has_diverged() {
        let mut follower = MemStore::new();
        put(&mut follower, 10, 10);
        let mut leader = MemStore::new();
        put(&mut leader, 5, 10);
        let target = StoreSummary::of(&leader);
        assert!(matches!(
            prepare(&mut follower, &target),
            Err(CatchupError::Diverged(_))
        ));
    }

    /// A leader that removed a message after the snapshot cannot serve
    /// it: the check at the end says so rather than accept a store that
    /// differs from the snapshot.
    #[test]
    fn a_message_the_peer_no_longer_has_fails_the_check() {
        let mut leader = MemStore::new();
        put(&mut leader, 50, 10);
        let target = StoreSummary::of(&leader);
        leader.remove(20, false).unwrap();
        let mut follower = MemStore::new();
        assert!(matches!(
            catch_up(&mut follower, &leader, &target),
            Err(CatchupError::Diverged(_))
        ));
    }

    /// A leader's file store opened at marks keeps what it removed since
    /// its last mark: a follower still gets the stream as of the snapshot.
    #[test]
    fn a_store_with_marks_serves_what_it_removed_since_the_snapshot() {
        let dir = Arc::new(store::MemDir::new());
        let cfg = store::FileStoreConfig { segment_size: 4096 };
        let mut leader = store::FileStore::open_at(dir, cfg, 0).unwrap();
        put(&mut leader, 200, 100);
        // This replica's own last mark is 4; the snapshot being installed
        // is another replica's, at index 10.
        leader.mark(4).unwrap();
        // Removed at index 10: part of the snapshot, so not served.
        leader.applying(10);
        leader.remove(200, false).unwrap();
        let target = StoreSummary::of(&leader);
        let wanted = contents(&leader);
        // After the snapshot: work-queue style removals and erasures that
        // empty whole segments, and more messages.
        for seq in 1..150 {
            leader.applying(10 + seq);
            leader.remove(seq, seq % 5 == 0).unwrap();
        }
        put(&mut leader, 50, 100);
        let mut follower = MemStore::sized_as_file();
        let mut next = prepare(&mut follower, &target).unwrap();
        while let Some(asked) = next {
            let chunk = serve(&leader, asked, 10).unwrap();
            next = fill(&mut follower, &target, asked, chunk).unwrap();
        }
        finish(&mut follower, &target).unwrap();
        assert_eq!(contents(&follower), wanted);
        // Released: those records may go, and are no longer served.
        leader.mark(200).unwrap();
        leader.release(200).unwrap();
        let chunk = serve(&leader, ChunkRequest { from: 1, to: 200 }, 10).unwrap();
        assert_eq!(chunk.msgs.first().map(|m| m.seq), Some(150));
    }

    #[test]
    fn chunks_that_do_not_fit_are_refused() {
        let leader = leader();
        let target = StoreSummary::of(&leader);
        let mut follower = MemStore::sized_as_file();
        let asked = prepare(&mut follower, &target).unwrap().unwrap();
        let chunk = serve(&leader, asked, MARK).unwrap();
        let wrong_start = Chunk {
            from: asked.from + 1,
            ..chunk.clone()
        };
        assert!(fill(&mut follower, &target, asked, wrong_start).is_err());
        let mut deleted = chunk.clone();
        let gone = target.deleted.iter().find(|r| r.0 > asked.from).unwrap().0;
        deleted.msgs[0].seq = gone;
        deleted.next = gone + 1;
        assert!(fill(&mut follower, &target, asked, deleted).is_err());
        // A flipped bit anywhere is caught by the checksum.
        let mut wire = chunk.encode();
        let at = wire.len() / 2;
        wire[at] ^= 0x10;
        assert!(Chunk::decode(&wire).is_err());
        assert!(Chunk::decode(&wire[..wire.len() - 1]).is_err());
    }

    #[test]
    fn a_summary_does_not_grow_with_the_messages() {
        let mut small = MemStore::new();
        put(&mut small, 100, 10);
        let mut large = MemStore::new();
        put(&mut large, 100_000, 10);
        let encoded = |s: &StoreSummary| {
            let mut b = BytesMut::new();
            s.encode(&mut b);
            b.len()
        };
        let (a, b) = (StoreSummary::of(&small), StoreSummary::of(&large));
        assert_eq!(encoded(&a), encoded(&b));
        let mut bytes = BytesMut::new();
        b.encode(&mut bytes);
        assert_eq!(StoreSummary::decode(&mut &bytes[..]), Ok(b));
    }

    #[test]
    fn holds_reads_the_deleted_ranges() {
        let summary = StoreSummary {
            first_seq: 5,
            last_seq: 20,
            last_ts: 0,
            msgs: 10,
            bytes: 0,
            deleted: vec![(7, 9), (12, 14)],
        };
        let held: Vec<u64> = (0..25).filter(|&s| summary.holds(s)).collect();
        assert_eq!(held, vec![5, 6, 10, 11, 15, 16, 17, 18, 19, 20]);
    }

    #[test]
    fn asks_and_replies_round_trip_and_refuse_damage() {
        let ask = Ask {
            mark: 77,
            range: ChunkRequest { from: 3, to: 9 },
        };
        assert_eq!(Ask::decode(&ask.encode()), Ok(ask));
        assert!(Ask::decode(&ask.encode()[..23]).is_err());
        let mut store = MemStore::new();
        put(&mut store, 5, 10);
        let chunk = serve(&store, ChunkRequest { from: 1, to: 5 }, MARK).unwrap();
        for reply in [
            Reply::Chunk(chunk),
            Reply::Later,
            Reply::Retarget {
                index: 12,
                state: vec![1, 2, 3],
            },
        ] {
            let bytes = reply.encode();
            assert_eq!(Reply::decode(&bytes), Ok(reply));
            let mut flipped = bytes.clone();
            let last = flipped.len() - 1;
            flipped[last] ^= 1;
            if bytes[0] == 0 {
                assert!(Reply::decode(&flipped).is_err(), "a flipped chunk");
            }
        }
        assert!(Reply::decode(&[]).is_err());
        assert!(Reply::decode(&[1, 0]).is_err());
        assert!(Reply::decode(&[9]).is_err());
    }
}
