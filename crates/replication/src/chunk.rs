//! Raft messages larger than one frame — snapshots, big appends — travel
//! as a run of chunks, so no frame exceeds `frame::MAX_PAYLOAD` and a
//! large snapshot never blocks the control class: votes and heartbeats
//! go out between its chunks.
//!
//! Every frame payload starts with one byte:
//! - `0`: a whole message follows;
//! - `1`: the first chunk: `u32` total length, then bytes;
//! - `2`: a later chunk: `u32` offset, then bytes.
//!
//! The receiver keeps one message in assembly per (peer, group) and
//! accepts a chunk only at the offset it expects; whole messages may
//! arrive between its chunks (control frames overtake bulk ones). A lost, repeated or
//! reordered chunk discards the message (Raft resends), and a first chunk
//! always starts afresh, so bytes of two messages are never joined.

use std::collections::BTreeMap;

use bytes::{BufMut, Bytes, BytesMut};

use crate::frame;

const WHOLE: u8 = 0;
const FIRST: u8 = 1;
const NEXT: u8 = 2;
const CHUNK_HEADER: usize = 5;

/// Chunk size when the driver does not choose one.
pub const DEFAULT_CHUNK: usize = 1 << 20;
/// The largest message reassembled: a peer cannot make us hold more.
pub const MAX_MESSAGE: usize = 1 << 30;

/// Frame payloads for one encoded message, each at most `chunk` bytes of
/// it plus a header.
pub fn split(msg: &[u8], chunk: usize) -> Vec<Bytes> {
    let chunk = chunk.clamp(1, frame::MAX_PAYLOAD - CHUNK_HEADER);
    if msg.len() <= chunk {
        let mut b = BytesMut::with_capacity(1 + msg.len());
        b.put_u8(WHOLE);
        b.put_slice(msg);
        return vec![b.freeze()];
    }
    msg.chunks(chunk)
        .enumerate()
        .map(|(i, part)| {
            let mut b = BytesMut::with_capacity(CHUNK_HEADER + part.len());
            if i == 0 {
                b.put_u8(FIRST);
                b.put_u32_le(msg.len() as u32);
            } else {
                b.put_u8(NEXT);
                b.put_u32_le((i * chunk) as u32);
            }
            b.put_slice(part);
            b.freeze()
        })
        .collect()
}

/// Frame payloads for a message of `len` encoded bytes, which `encode`
/// appends to a buffer. One that fits a chunk is encoded straight after
/// its header: one buffer, no copy.
pub fn payloads(len: usize, chunk: usize, encode: impl FnOnce(&mut Vec<u8>)) -> Vec<Bytes> {
    let fits = len <= chunk.clamp(1, frame::MAX_PAYLOAD - CHUNK_HEADER);
    // One byte more than the message: protobuf's encoder reserves one
    // byte past what it wrote when it finishes, and at exactly full it
    // would double the buffer, copying the whole message (perf: a fifth
    // of an R3 leader's page faults).
    let mut buf = Vec::with_capacity(usize::from(fits) + len + 1);
    if fits {
        buf.push(WHOLE);
    }
    let capacity = buf.capacity();
    encode(&mut buf);
    debug_assert_eq!(
        buf.len(),
        usize::from(fits) + len,
        "the encoded length was given"
    );
    debug_assert_eq!(buf.capacity(), capacity, "encoding did not grow the buffer");
    match fits {
        true => vec![Bytes::from(buf)],
        false => split(&buf, chunk),
    }
}

/// Whether a payload continues a message whose first chunk came earlier
/// (an outbox that dropped the first drops the rest).
pub fn is_continuation(payload: &[u8]) -> bool {
    payload.first() == Some(&NEXT)
}

/// What one payload gave.
#[derive(Debug, PartialEq, Eq)]
pub enum Piece {
    /// A whole message.
    Complete(Bytes),
    /// A chunk, kept until the rest arrives.
    Pending,
    /// Malformed, out of place, or too large: dropped (and any message in
    /// assembly with it).
    Refused,
}

#[derive(Debug, Default)]
pub struct Reassembly {
    /// (peer, group) -> (total length, bytes so far).
    partial: BTreeMap<(u64, u64), (usize, Vec<u8>)>,
}

impl Reassembly {
    /// Takes one frame payload. A whole message is a slice of it, not a
    /// copy (decoding it copies the entries' data out).
    pub fn take(&mut self, peer: u64, group: u64, payload: &Bytes) -> Piece {
        let key = (peer, group);
        let Some((&kind, rest)) = payload.split_first() else {
            return Piece::Refused;
        };
        match kind {
            // A whole message (a heartbeat, a vote) may come between the
            // chunks of another: the class queues interleave.
            WHOLE => Piece::Complete(payload.slice(1..)),
            FIRST | NEXT if rest.len() >= 4 => {
                let n = u32::from_le_bytes(rest[..4].try_into().expect("4 bytes")) as usize;
                let part = &rest[4..];
                if kind == FIRST {
                    if n > MAX_MESSAGE || part.len() >= n {
                        self.partial.remove(&key);
                        return Piece::Refused;
                    }
                    let mut buf = Vec::with_capacity(n.min(64 << 20));
                    buf.extend_from_slice(part);
                    self.partial.insert(key, (n, buf));
                    return Piece::Pending;
                }
                let Some((total, buf)) = self.partial.get_mut(&key) else {
                    return Piece::Refused;
                };
                if n != buf.len() || buf.len() + part.len() > *total {
                    self.partial.remove(&key);
                    return Piece::Refused;
                }
                buf.extend_from_slice(part);
                if buf.len() < *total {
                    return Piece::Pending;
                }
                let (_, buf) = self.partial.remove(&key).expect("present");
                Piece::Complete(Bytes::from(buf))
            }
            _ => {
                self.partial.remove(&key);
                Piece::Refused
            }
        }
    }

    /// Messages in assembly (for tests and monitoring).
    pub fn pending(&self) -> usize {
        self.partial.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 7 % 251) as u8).collect()
    }

    #[test]
    fn small_messages_are_whole_and_large_ones_come_back_in_order() {
        let mut r = Reassembly::default();
        let small = msg(10);
        let p = split(&small, 100);
        assert_eq!(p.len(), 1);
        assert_eq!(r.take(1, 2, &p[0]), Piece::Complete(Bytes::from(small)));
        let big = msg(1000);
        let p = split(&big, 64);
        assert_eq!(p.len(), 16);
        for c in &p[..15] {
            assert_eq!(r.take(1, 2, c), Piece::Pending);
        }
        assert_eq!(r.take(1, 2, &p[15]), Piece::Complete(Bytes::from(big)));
        assert_eq!(r.pending(), 0);
    }

    #[test]
    fn a_lost_or_reordered_chunk_discards_the_message_never_joins_two() {
        let a = msg(300);
        let b: Vec<u8> = msg(300).into_iter().map(|x| x ^ 0xff).collect();
        let (pa, pb) = (split(&a, 100), split(&b, 100));
        let mut r = Reassembly::default();
        // a's second chunk is lost: its third is refused.
        assert_eq!(r.take(1, 2, &pa[0]), Piece::Pending);
        assert_eq!(r.take(1, 2, &pa[2]), Piece::Refused);
        // A whole message between chunks does not disturb them.
        assert_eq!(r.take(1, 2, &pb[0]), Piece::Pending);
        let small = split(&[1, 2, 3], 100);
        assert_eq!(
            r.take(1, 2, &small[0]),
            Piece::Complete(Bytes::from_static(&[1, 2, 3]))
        );
        assert_eq!(r.take(1, 2, &pb[1]), Piece::Pending);
        assert_eq!(
            r.take(1, 2, &pb[2]),
            Piece::Complete(Bytes::from(b.clone()))
        );
        // b arrives whole again afterwards, untouched by a's leftovers.
        for c in &pb[..2] {
            assert_eq!(r.take(1, 2, c), Piece::Pending);
        }
        assert_eq!(
            r.take(1, 2, &pb[2]),
            Piece::Complete(Bytes::from(b.clone()))
        );
        // A new first chunk starts afresh.
        assert_eq!(r.take(1, 2, &pa[0]), Piece::Pending);
        assert_eq!(r.take(1, 2, &pb[0]), Piece::Pending);
        assert_eq!(r.take(1, 2, &pb[1]), Piece::Pending);
        assert_eq!(r.take(1, 2, &pb[2]), Piece::Complete(Bytes::from(b)));
        // Other peers and groups assemble apart.
        assert_eq!(r.take(1, 2, &pa[0]), Piece::Pending);
        assert_eq!(r.take(3, 2, &pa[1]), Piece::Refused);
        assert_eq!(r.take(1, 9, &pa[1]), Piece::Refused);
        assert_eq!(r.take(1, 2, &pa[1]), Piece::Pending);
    }

    #[test]
    fn payloads_match_split() {
        for (n, chunk) in [(0, 8), (7, 8), (8, 8), (9, 8), (1000, 64)] {
            let m = msg(n);
            let made = payloads(n, chunk, |b| b.extend_from_slice(&m));
            assert_eq!(made, split(&m, chunk), "{n} bytes in chunks of {chunk}");
        }
    }

    #[test]
    fn garbage_and_oversized_claims_are_refused() {
        let mut r = Reassembly::default();
        assert_eq!(r.take(1, 1, &Bytes::new()), Piece::Refused);
        assert_eq!(
            r.take(1, 1, &Bytes::from_static(&[9, 1, 2])),
            Piece::Refused
        );
        assert_eq!(
            r.take(1, 1, &Bytes::from_static(&[1, 0, 0])),
            Piece::Refused
        );
        let mut huge = vec![1u8];
        huge.extend_from_slice(&u32::MAX.to_le_bytes());
        huge.push(0);
        assert_eq!(r.take(1, 1, &Bytes::from(huge)), Piece::Refused);
        assert_eq!(r.pending(), 0);
    }
}
