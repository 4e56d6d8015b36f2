//! The on-disk record format and the scan that recovery runs over a
//! segment's bytes. Pure functions over byte slices: no IO here.
//!
//! Every record is
//!
//! ```text
//! u32 len | u32 crc32c(bytes 8..len) | u8 kind | u64 seq | i64 ts | body
//! ```
//!
//! little-endian, where `len` counts the whole record. A message body is
//! `u16 subject_len | u32 headers_len + 1 (0 = no headers) | subject |
//! headers | payload`. Other kinds have no body; their meaning is in
//! `seq` and `ts` (see [`Kind`]).

pub const HEADER: usize = 4 + 4 + 1 + 8 + 8;
pub const MSG_PREFIX: usize = 2 + 4;
/// Largest record accepted on write and believed on read.
pub const MAX_RECORD: usize = 128 * 1024 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// A message at `seq`.
    Msg = 1,
    /// Message `seq` was deleted (a tombstone).
    Delete = 2,
    /// Sequence `seq` was used without storing a message.
    Skip = 3,
    /// Everything below `seq` is gone; the next stored seq is at least `seq`.
    Compact = 4,
    /// A message at `seq` whose contents were overwritten (secure delete).
    Erased = 5,
    /// Opens a segment: the stream's last sequence was `seq` when it was
    /// created, so it holds nothing at or below that.
    Start = 6,
    /// Sequences `seq..=ts` were in a segment that has been removed.
    DeleteRange = 7,
    /// The state so far is the state after applying log index `seq` (a
    /// replica's mark, `FileStore::mark`); it holds no sequence.
    Mark = 8,
    /// Ends a batch of writes made durable together: `seq` is the
    /// stream's last sequence then (in a journal, its count of entries).
    /// A write torn by a crash is never followed by one, so a bad record
    /// before it is damage, not a torn write.
    Synced = 9,
}

impl Kind {
    fn from_u8(b: u8) -> Option<Kind> {
        Some(match b {
            1 => Kind::Msg,
            2 => Kind::Delete,
            3 => Kind::Skip,
            4 => Kind::Compact,
            5 => Kind::Erased,
            6 => Kind::Start,
            7 => Kind::DeleteRange,
            8 => Kind::Mark,
            9 => Kind::Synced,
            _ => return None,
        })
    }
}

/// One decoded record; message fields borrow from the scanned bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record<'a> {
    pub kind: Kind,
    pub seq: u64,
    pub ts: i64,
    pub subject: &'a str,
    pub headers: Option<&'a [u8]>,
    pub payload: &'a [u8],
}

/// Bytes a message record takes.
pub fn msg_len(subject: &str, headers: Option<&[u8]>, payload: &[u8]) -> usize {
    HEADER + MSG_PREFIX + subject.len() + headers.map_or(0, |h| h.len()) + payload.len()
}

/// Appends a message (or erased-message) record.
pub fn encode_msg(
    out: &mut Vec<u8>,
    kind: Kind,
    seq: u64,
    ts: i64,
    subject: &str,
    headers: Option<&[u8]>,
    payload: &[u8],
) {
    let start = out.len();
    head(out, msg_len(subject, headers, payload), kind, seq, ts);
    out.extend_from_slice(&(subject.len() as u16).to_le_bytes());
    let hlen = headers.map_or(0, |h| h.len() as u32 + 1);
    out.extend_from_slice(&hlen.to_le_bytes());
    out.extend_from_slice(subject.as_bytes());
    if let Some(h) = headers {
        out.extend_from_slice(h);
    }
    out.extend_from_slice(payload);
    seal(&mut out[start..]);
}

/// Appends a message record with no subject or headers whose payload is
/// `parts` end to end: a large payload assembled from pieces is not
/// copied into one buffer first.
pub fn encode_parts<P: AsRef<[u8]>>(out: &mut Vec<u8>, kind: Kind, seq: u64, ts: i64, parts: &[P]) {
    let start = out.len();
    let len = HEADER + MSG_PREFIX + parts.iter().map(|p| p.as_ref().len()).sum::<usize>();
    head(out, len, kind, seq, ts);
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    for p in parts {
        out.extend_from_slice(p.as_ref());
    }
    seal(&mut out[start..]);
}

/// Appends a record with no body.
pub fn encode_marker(out: &mut Vec<u8>, kind: Kind, seq: u64, ts: i64) {
    let start = out.len();
    head(out, HEADER, kind, seq, ts);
    seal(&mut out[start..]);
}

/// A record's header, its checksum left for [`seal`], with room made for
/// the `len` bytes of the whole record.
fn head(out: &mut Vec<u8>, len: usize, kind: Kind, seq: u64, ts: i64) {
    out.reserve(len);
    out.extend_from_slice(&(len as u32).to_le_bytes());
    out.extend_from_slice(&[0; 4]);
    out.push(kind as u8);
    out.extend_from_slice(&seq.to_le_bytes());
    out.extend_from_slice(&ts.to_le_bytes());
}

fn seal(rec: &mut [u8]) {
    let crc = crc32c::crc32c(&rec[8..]);
    rec[4..8].copy_from_slice(&crc.to_le_bytes());
}

/// Why bytes at an offset are not a record.
#[derive(Debug, PartialEq, Eq)]
pub enum Bad {
    /// The bytes end before the record does: a write cut short.
    Short,
    /// Length, checksum or layout is wrong.
    Corrupt,
}

fn u32_at(b: &[u8], i: usize) -> u32 {
    u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], i: usize) -> u64 {
    u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"))
}

/// Decodes the record at the start of `buf`, returning it and its length.
pub fn decode(buf: &[u8]) -> Result<(Record<'_>, usize), Bad> {
    if buf.len() < 8 {
        return Err(Bad::Short);
    }
    let len = u32_at(buf, 0) as usize;
    if !(HEADER..=MAX_RECORD).contains(&len) {
        return Err(Bad::Corrupt);
    }
    // Cheap shape checks before the checksum, so scanning forward past
    // corruption rarely hashes.
    if buf.len() > 8 {
        match Kind::from_u8(buf[8]) {
            None => return Err(Bad::Corrupt),
            Some(Kind::Msg | Kind::Erased) if len < HEADER + MSG_PREFIX => {
                return Err(Bad::Corrupt)
            }
            Some(Kind::Msg | Kind::Erased) => {}
            Some(_) if len != HEADER => return Err(Bad::Corrupt),
            Some(_) => {}
        }
    }
    if buf.len() < len {
        return Err(Bad::Short);
    }
    let rec = &buf[..len];
    if crc32c::crc32c(&rec[8..]) != u32_at(rec, 4) {
        return Err(Bad::Corrupt);
    }
    let kind = Kind::from_u8(rec[8]).ok_or(Bad::Corrupt)?;
    let seq = u64_at(rec, 9);
    let ts = u64_at(rec, 17) as i64;
    let mut r = Record {
        kind,
        seq,
        ts,
        subject: "",
        headers: None,
        payload: &[],
    };
    if matches!(kind, Kind::Msg | Kind::Erased) {
        if len < HEADER + MSG_PREFIX {
            return Err(Bad::Corrupt);
        }
        let slen = u16::from_le_bytes([rec[HEADER], rec[HEADER + 1]]) as usize;
        let hlen = u32_at(rec, HEADER + 2) as usize;
        let body = &rec[HEADER + MSG_PREFIX..];
        let hbytes = hlen.saturating_sub(1);
        if slen + hbytes > body.len() {
            return Err(Bad::Corrupt);
        }
        r.subject = std::str::from_utf8(&body[..slen]).map_err(|_| Bad::Corrupt)?;
        r.headers = (hlen > 0).then(|| &body[slen..slen + hbytes]);
        r.payload = &body[slen + hbytes..];
    } else if len != HEADER {
        return Err(Bad::Corrupt);
    }
    Ok((r, len))
}

/// What a scan of one segment found.
#[derive(Debug, Default)]
pub struct Scan<'a> {
    /// Good records with their offsets.
    pub records: Vec<(u64, Record<'a>)>,
    /// Byte ranges that held no valid record, in order.
    pub corrupt: Vec<(u64, u64)>,
    /// Where valid data ends when the segment ends in a partial record.
    pub torn_at: Option<u64>,
    /// Whatever follows `torn_at` is zeros: space made room for
    /// (`Dir::reserve`) or allocated but never written, not a torn write.
    pub zero_tail: bool,
}

/// Reads every record in a segment. A partial record at the end is a
/// torn write and is left out (`torn_at`). A bad record elsewhere is
/// skipped by searching forward for the next valid one, and the bytes in
/// between are reported (`corrupt`), never silently dropped.
pub fn scan(buf: &[u8]) -> Scan<'_> {
    let mut out = Scan::default();
    let mut pos = 0usize;
    while pos < buf.len() {
        match decode(&buf[pos..]) {
            Ok((r, len)) => {
                out.records.push((pos as u64, r));
                pos += len;
            }
            // Only zeros left: space reserved ahead of appends, or
            // allocated and never written before a crash (what a file
            // system shows for it). Searching it byte by byte for a record
            // would cost every reopened file a megabyte of tries.
            Err(_) if buf[pos..].iter().all(|&b| b == 0) => {
                out.torn_at = Some(pos as u64);
                out.zero_tail = true;
                break;
            }
            // A record running past the end is a torn write only if
            // nothing valid follows; a damaged length field in the middle
            // also looks "short", and must not cost the records after it.
            Err(Bad::Short | Bad::Corrupt) => match resync(buf, pos + 1) {
                Some(next) => {
                    out.corrupt.push((pos as u64, next as u64));
                    pos = next;
                }
                None => {
                    // Nothing valid follows: the tail is cut off or damaged.
                    // A complete-length record that fails its checksum is
                    // also reported, so an acknowledged message that rotted
                    // is not forgotten quietly; a merely short one is a
                    // write that never finished. Space reserved ahead of
                    // appends reads as zeros, so a write cut off there ends
                    // in them: judge the record by its bytes up to the last
                    // non-zero one. (A rotted last record whose own bytes
                    // end in zeros is taken for a torn write; nothing tells
                    // them apart.)
                    let tail = &buf[pos..];
                    let written = tail.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
                    if decode(&tail[..written]) != Err(Bad::Short) {
                        out.corrupt.push((pos as u64, buf.len() as u64));
                    }
                    out.torn_at = Some(pos as u64);
                    break;
                }
            },
        }
    }
    out
}

/// The first offset at or after `from` where a valid record starts.
fn resync(buf: &[u8], from: usize) -> Option<usize> {
    (from..buf.len().saturating_sub(HEADER - 1)).find(|&p| decode(&buf[p..]).is_ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<u8> {
        let mut b = Vec::new();
        encode_marker(&mut b, Kind::Start, 0, 0);
        encode_msg(&mut b, Kind::Msg, 1, 10, "a.b", None, b"one");
        encode_msg(
            &mut b,
            Kind::Msg,
            2,
            20,
            "a.c",
            Some(b"NATS/1.0\r\nX: y\r\n\r\n"),
            b"two",
        );
        encode_marker(&mut b, Kind::Delete, 1, 30);
        encode_msg(&mut b, Kind::Msg, 3, 40, "a.d", None, b"");
        b
    }

    #[test]
    fn round_trip() {
        let b = sample();
        let s = scan(&b);
        assert!(s.corrupt.is_empty() && s.torn_at.is_none());
        let kinds: Vec<Kind> = s.records.iter().map(|(_, r)| r.kind).collect();
        assert_eq!(
            kinds,
            [Kind::Start, Kind::Msg, Kind::Msg, Kind::Delete, Kind::Msg]
        );
        let (_, two) = &s.records[2];
        assert_eq!((two.seq, two.ts, two.subject), (2, 20, "a.c"));
        assert_eq!(two.headers, Some(&b"NATS/1.0\r\nX: y\r\n\r\n"[..]));
        assert_eq!(two.payload, b"two");
        assert_eq!(s.records[4].1.payload, b"");
        assert_eq!(s.records[4].1.headers, None);
    }

    #[test]
    fn torn_tail_is_reported_not_corrupt() {
        let b = sample();
        for cut in 1..30 {
            let s = scan(&b[..b.len() - cut]);
            assert_eq!(s.records.len(), 4, "cut {cut}");
            assert!(s.torn_at.is_some());
        }
    }

    #[test]
    fn flipped_bit_in_middle_loses_one_record() {
        let b = sample();
        let s = scan(&b);
        let (off, _) = s.records[2];
        for bit in 0..8 {
            let mut bad = b.clone();
            bad[off as usize + 40] ^= 1 << bit;
            let s = scan(&bad);
            let seqs: Vec<u64> = s
                .records
                .iter()
                .filter(|(_, r)| r.kind == Kind::Msg)
                .map(|(_, r)| r.seq)
                .collect();
            assert_eq!(seqs, [1, 3]);
            assert_eq!(s.corrupt.len(), 1);
            assert!(s.torn_at.is_none());
        }
    }

    #[test]
    fn corrupt_length_resyncs() {
        let b = sample();
        let s = scan(&b);
        let (off, _) = s.records[1];
        let mut bad = b.clone();
        bad[off as usize] = 0xff;
        bad[off as usize + 1] = 0xff;
        let s = scan(&bad);
        let seqs: Vec<u64> = s.records.iter().map(|(_, r)| r.seq).collect();
        assert_eq!(seqs, [0, 2, 1, 3], "start, then msg 2, delete 1, msg 3");
        assert_eq!(s.corrupt.len(), 1);
    }

    #[test]
    fn damaged_length_in_the_middle_is_not_a_torn_tail() {
        let b = sample();
        let s = scan(&b);
        let (off, _) = s.records[2];
        let mut bad = b.clone();
        // A length bigger than what is left, as a bit flip might make it.
        bad[off as usize + 2] = 0x01;
        let s = scan(&bad);
        let seqs: Vec<u64> = s.records.iter().map(|(_, r)| r.seq).collect();
        assert_eq!(seqs, [0, 1, 1, 3], "records after the damage survive");
        assert_eq!(s.corrupt.len(), 1);
        assert!(s.torn_at.is_none());
    }

    #[test]
    fn zero_filled_tail_is_torn_not_corrupt() {
        let mut b = sample();
        b.extend_from_slice(&[0u8; 100]);
        let s = scan(&b);
        assert_eq!(s.records.len(), 5);
        assert!(s.corrupt.is_empty());
        assert!(s.torn_at.is_some());
    }

    #[test]
    fn garbage_never_panics() {
        let mut rng = 0x1234_5678u64;
        for _ in 0..2000 {
            let len = (rng % 300) as usize;
            let mut b = vec![0u8; len];
            for x in b.iter_mut() {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                *x = rng as u8;
            }
            let _ = scan(&b);
        }
    }
}
