//! Peer frames: every message between servers travels as
//!
//! ```text
//! u32 length | u32 CRC32C | u8 class | u64 sender | u64 group | payload
//! ```
//!
//! little-endian, where `length` counts everything after itself and the
//! checksum covers everything after itself. The length is bounded and the
//! checksum verified before any byte of the payload is looked at, so a
//! mangled frame (including a mangled sender or group id) is dropped and
//! counted, never decoded and never acted on.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use thiserror::Error;

/// Bytes before the payload.
pub const HEADER_LEN: usize = 4 + 4 + 1 + 8 + 8;
/// The largest payload a frame carries. Raft appends are batched below
/// it; anything larger is a sender bug or corruption.
pub const MAX_PAYLOAD: usize = 16 << 20;
/// Smallest and largest valid `length` field.
const MIN_LEN: u32 = (HEADER_LEN - 4) as u32;
const MAX_LEN: u32 = (HEADER_LEN - 4 + MAX_PAYLOAD) as u32;

/// Traffic class. Control frames (votes, heartbeats and their answers)
/// are sent ahead of any queued bulk frame (appends, snapshots), so
/// replication load cannot starve elections.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Class {
    Control = 0,
    Bulk = 1,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub class: Class,
    pub sender: u64,
    pub group: u64,
    pub payload: Bytes,
}

/// Why a frame was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum Reject {
    #[error("frame length {0} out of bounds")]
    Length(u32),
    #[error("frame checksum mismatch")]
    Checksum,
    #[error("unknown frame class {0}")]
    Class(u8),
    #[error("frame cut short: {0} of {1} bytes")]
    Short(usize, usize),
}

/// Counts of refused frames, by reason, for monitoring.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Rejections {
    pub length: u64,
    pub checksum: u64,
    pub class: u64,
    pub short: u64,
}

impl Rejections {
    pub fn count(&mut self, r: Reject) {
        match r {
            Reject::Length(_) => self.length += 1,
            Reject::Checksum => self.checksum += 1,
            Reject::Class(_) => self.class += 1,
            Reject::Short(..) => self.short += 1,
        }
    }

    pub fn total(&self) -> u64 {
        self.length + self.checksum + self.class + self.short
    }
}

/// Appends the encoded frame to `out`.
///
/// # Panics
/// If the payload is larger than [`MAX_PAYLOAD`]: callers batch below it,
/// so a larger one is a bug to find, not a frame to send.
pub fn encode(frame: &Frame, out: &mut BytesMut) {
    assert!(
        frame.payload.len() <= MAX_PAYLOAD,
        "frame payload {} over {MAX_PAYLOAD}",
        frame.payload.len()
    );
    out.reserve(HEADER_LEN + frame.payload.len());
    let len = (HEADER_LEN - 4 + frame.payload.len()) as u32;
    out.put_u32_le(len);
    let at = out.len();
    out.put_u32_le(0);
    out.put_u8(frame.class as u8);
    out.put_u64_le(frame.sender);
    out.put_u64_le(frame.group);
    out.put_slice(&frame.payload);
    let crc = crc32c::crc32c(&out[at + 4..]);
    out[at..at + 4].copy_from_slice(&crc.to_le_bytes());
}

/// Checks and decodes exactly one frame (a datagram, as the simulator
/// delivers them).
pub fn decode(bytes: &[u8]) -> Result<Frame, Reject> {
    match decode_prefix(bytes)? {
        Some((frame, used)) if used == bytes.len() => Ok(frame),
        Some((_, used)) => Err(Reject::Length(used as u32)),
        None => Err(Reject::Short(bytes.len(), frame_len(bytes))),
    }
}

fn frame_len(bytes: &[u8]) -> usize {
    if bytes.len() < 4 {
        return 4;
    }
    4 + u32::from_le_bytes(bytes[..4].try_into().expect("4 bytes")) as usize
}

/// The frame at the start of `bytes` and the bytes it took, or `None` if
/// more bytes are needed. The length is checked as soon as it is known,
/// so a mangled length is refused before anything waits on it.
pub fn decode_prefix(bytes: &[u8]) -> Result<Option<(Frame, usize)>, Reject> {
    Ok(check_prefix(bytes)?.map(|(mut frame, used)| {
        frame.payload = Bytes::copy_from_slice(&bytes[HEADER_LEN..used]);
        (frame, used)
    }))
}

/// [`decode_prefix`] without the payload: the frame's header (its
/// payload left empty) and the bytes the whole frame took, the payload
/// being `bytes[HEADER_LEN..used]`. Every check is made here.
fn check_prefix(bytes: &[u8]) -> Result<Option<(Frame, usize)>, Reject> {
    if bytes.len() < 4 {
        return Ok(None);
    }
    let len = u32::from_le_bytes(bytes[..4].try_into().expect("4 bytes"));
    if !(MIN_LEN..=MAX_LEN).contains(&len) {
        return Err(Reject::Length(len));
    }
    let total = 4 + len as usize;
    if bytes.len() < total {
        return Ok(None);
    }
    let body = &bytes[4..total];
    let crc = u32::from_le_bytes(body[..4].try_into().expect("4 bytes"));
    if crc32c::crc32c(&body[4..]) != crc {
        return Err(Reject::Checksum);
    }
    let mut b = &body[4..];
    let class = match b.get_u8() {
        0 => Class::Control,
        1 => Class::Bulk,
        c => return Err(Reject::Class(c)),
    };
    let sender = b.get_u64_le();
    let group = b.get_u64_le();
    debug_assert_eq!(
        b.len(),
        total - HEADER_LEN,
        "the payload follows the header"
    );
    let frame = Frame {
        class,
        sender,
        group,
        payload: Bytes::new(),
    };
    Ok(Some((frame, total)))
}

/// Test-only: [`decode`] without the checksum, as a transport without one
/// would read. The simulator uses it to show what the checksum prevents.
#[doc(hidden)]
pub fn decode_unchecked(bytes: &[u8]) -> Result<Frame, Reject> {
    if bytes.len() < HEADER_LEN {
        return Err(Reject::Short(bytes.len(), HEADER_LEN));
    }
    let mut fixed = bytes.to_vec();
    let crc = crc32c::crc32c(&fixed[8..]);
    fixed[4..8].copy_from_slice(&crc.to_le_bytes());
    let len = (fixed.len() - 4) as u32;
    fixed[..4].copy_from_slice(&len.to_le_bytes());
    decode(&fixed)
}

/// Frames at least this large are split off the stream's buffer; smaller
/// ones are copied out. A split frame keeps the buffer it was read into
/// alive until it is decoded (the engine copies entries out of it), so a
/// small one would hold a whole read buffer for a moment; copying a frame
/// this small costs little, and a frame this large is most of the buffer
/// it was read into (at most twice its size, as the buffer grows to take
/// it).
pub const SPLIT_AT: usize = 32 << 10;

/// Frames out of a byte stream (a TCP connection). Any refusal is fatal
/// for the stream: once a length or checksum is wrong, nothing after it
/// can be trusted to be a frame boundary, so the driver closes the
/// connection and the peer reconnects; Raft resends what was lost.
#[derive(Debug, Default)]
pub struct StreamDecoder {
    buf: BytesMut,
    failed: bool,
}

impl StreamDecoder {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn feed(&mut self, bytes: &[u8]) {
        if !self.failed {
            self.buf.extend_from_slice(bytes);
        }
    }

    /// The buffer the next bytes of the stream go into, with room for at
    /// least `room` more: a driver reads into it directly instead of
    /// through [`StreamDecoder::feed`], so bytes are not copied on the way.
    pub fn unfilled(&mut self, room: usize) -> &mut BytesMut {
        if self.failed {
            self.buf.clear();
        }
        self.buf.reserve(room);
        &mut self.buf
    }

    /// The next whole frame, if one has arrived. A frame of at least
    /// [`SPLIT_AT`] bytes is split off the stream's buffer, not copied:
    /// it keeps the buffer it was read into alive until it is dropped. A
    /// smaller one is copied out (see `SPLIT_AT`).
    pub fn next_frame(&mut self) -> Result<Option<Frame>, Reject> {
        if self.failed {
            return Ok(None);
        }
        match check_prefix(&self.buf) {
            Ok(Some((mut frame, used))) => {
                frame.payload = match used >= SPLIT_AT {
                    true => self.buf.split_to(used).freeze().slice(HEADER_LEN..),
                    false => {
                        let payload = Bytes::copy_from_slice(&self.buf[HEADER_LEN..used]);
                        self.buf.advance(used);
                        payload
                    }
                };
                Ok(Some(frame))
            }
            Ok(None) => Ok(None),
            Err(r) => {
                self.failed = true;
                self.buf.clear();
                Err(r)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn frame(payload: &[u8]) -> Frame {
        Frame {
            class: Class::Bulk,
            sender: 0x1122_3344_5566_7788,
            group: 42,
            payload: Bytes::copy_from_slice(payload),
        }
    }

    fn bytes_of(f: &Frame) -> Vec<u8> {
        let mut out = BytesMut::new();
        encode(f, &mut out);
        out.to_vec()
    }

    #[test]
    fn round_trip() {
        let f = frame(b"append entries");
        assert_eq!(decode(&bytes_of(&f)), Ok(f));
        let empty = Frame {
            class: Class::Control,
            ..frame(b"")
        };
        assert_eq!(decode(&bytes_of(&empty)), Ok(empty));
    }

    /// CRC32C catches every single-bit error, so no flipped bit anywhere
    /// in a frame, ids and length included, yields a frame.
    #[test]
    fn every_single_bit_flip_is_refused() {
        let good = bytes_of(&frame(b"vote for 7 in term 12"));
        for bit in 0..good.len() * 8 {
            let mut b = good.clone();
            b[bit / 8] ^= 1 << (bit % 8);
            assert!(decode(&b).is_err(), "bit {bit} flipped went unnoticed");
        }
    }

    #[test]
    fn lengths_are_bounded_before_waiting() {
        let mut d = StreamDecoder::new();
        d.feed(&u32::MAX.to_le_bytes());
        assert_eq!(d.next_frame(), Err(Reject::Length(u32::MAX)));
        // The stream is done for: nothing after a bad frame is trusted.
        d.feed(&bytes_of(&frame(b"x")));
        assert_eq!(d.next_frame(), Ok(None));
        assert!(matches!(decode(&[1, 0, 0, 0, 9]), Err(Reject::Length(1))));
    }

    #[test]
    fn stream_reassembles_frames_split_anywhere() {
        let frames: Vec<Frame> = (0..5u8).map(|i| frame(&vec![i; i as usize * 7])).collect();
        let mut all = Vec::new();
        for f in &frames {
            all.extend(bytes_of(f));
        }
        for cut in 1..all.len() {
            let mut d = StreamDecoder::new();
            let mut got = Vec::new();
            for piece in [&all[..cut], &all[cut..]] {
                d.feed(piece);
                while let Some(f) = d.next_frame().unwrap() {
                    got.push(f);
                }
            }
            assert_eq!(got, frames, "cut at {cut}");
        }
    }

    /// Frames are split off the buffer the stream is read into, so one
    /// taken earlier must keep its bytes while later reads land beside
    /// them, in pieces of every size.
    #[test]
    fn frames_read_in_place_keep_their_bytes() {
        // Small frames are copied out and large ones split off: both kinds,
        // interleaved.
        let size = |i: usize| match i % 5 {
            0 => SPLIT_AT + i * 13,
            _ => (i * 37) % 300,
        };
        let frames: Vec<Frame> = (0..40u8)
            .map(|i| frame(&vec![i; size(i as usize)]))
            .collect();
        let all: Vec<u8> = frames.iter().flat_map(bytes_of).collect();
        for piece in [1, 7, 64, 1000, all.len()] {
            let mut d = StreamDecoder::new();
            let mut got = Vec::new();
            for bytes in all.chunks(piece) {
                d.unfilled(piece).put_slice(bytes);
                while let Some(f) = d.next_frame().unwrap() {
                    got.push(f);
                }
            }
            assert_eq!(got, frames, "read {piece} bytes at a time");
        }
    }

    #[test]
    fn rejections_are_counted() {
        let mut r = Rejections::default();
        let mut b = bytes_of(&frame(b"abc"));
        b[10] ^= 0xff;
        r.count(decode(&b).unwrap_err());
        r.count(decode(&b[..5]).unwrap_err());
        assert_eq!((r.checksum, r.short, r.total()), (1, 1, 2));
    }

    proptest! {
        /// Random damage (several bytes overwritten) is refused, or by
        /// chance leaves the frame as it was; it never yields another frame.
        #[test]
        fn random_damage_never_yields_a_different_frame(
            payload in proptest::collection::vec(any::<u8>(), 0..200),
            hits in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..6),
        ) {
            let f = frame(&payload);
            let mut b = bytes_of(&f);
            for (at, v) in hits {
                let i = at % b.len();
                b[i] = v;
            }
            if let Ok(got) = decode(&b) {
                prop_assert_eq!(got, f);
            }
        }
    }
}
