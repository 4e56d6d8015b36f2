//! The file store: a stream's messages in append-only segment files of
//! checksummed records (see `record.rs`), with an index whose memory does
//! not grow with the stream.
//!
//! The index: each segment keeps what is not live as ranges (`gone`), so
//! liveness, counts and deleted ranges need nothing per sequence. Where
//! each record is (its slot: offset, length, subject, time) is kept for
//! the active segment and for the few sealed segments used last; the
//! others' slots are read back from their files when needed.
//!
//! Writes go to a buffer that is written to the active segment when it
//! fills or when a sync handle is taken; the group-commit thread runs that
//! handle, and only then are acknowledgements released. Deletes and purges
//! are tombstone records, so a segment is never rewritten except to erase
//! a message's bytes.
//!
//! Removals are written twice. A message is live only while its own
//! record is whole and no whole removal (tombstone, compaction, removed
//! range) covers it, so damage can make a message lost but never bring a
//! removed one back, as long as one copy of its removal is whole: the two
//! copies are written back to back, and one damaged place (a flipped
//! bit, a length that no longer reads, a record the scan resyncs past)
//! takes at most one of them.
//!
//! Recovery reads every segment and checks every checksum. A cut-off
//! final record is truncated; anything else that fails is skipped, and
//! the sequences nothing accounts for are reported as lost
//! (`StoreState::lost`). Every sequence between the first and the last
//! must be accounted for by a message, an erased message, a skip, a
//! tombstone, a compaction or a removed range, which is how a damaged
//! record is told apart from one that was deleted.
//!
//! Segment removal: a segment whose messages are all deleted is removed,
//! but only after the records that make the removal safe (a removed-range
//! marker, and tombstones it held for older segments) are durable in the
//! active segment: the unlink runs inside the sync handle, after the sync.
//!
//! Marks (a replica's store, [`FileStore::open_at`]): a `Mark` record says
//! the state so far is the state after a Raft log index. Opening at a mark
//! drops every record after it, so a replica restarts from exactly the
//! state its snapshot describes and replays the log from there. For that,
//! what cannot be taken back by dropping records (unlinking a segment,
//! overwriting an erased message) is held until [`MsgStore::release`]
//! promises the store will not be opened at an older mark.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::Arc;

use bytes::Bytes;

use crate::dir::Dir;
use crate::mem::purge_selection;
use crate::ranges::SeqRanges;
use crate::record::{self, Kind};
use crate::subject_index::SubjectIndex;
use crate::sync::SyncHandle;
use crate::{Filter, MsgStore, Purge, Result, StoreError, StoreState, StoredMsg, SubjectState};

const NONE: u32 = u32::MAX;
/// Bytes buffered before they are written even without a sync.
const WRITE_BUFFER: usize = 256 * 1024;
/// How many copies of each removal record (a tombstone, a compaction, a
/// removed range) are written, back to back in one write: the damage of
/// one is outvoted by the other ([`FileStore::append_removal`]).
const REMOVAL_COPIES: usize = 2;

#[derive(Debug, Clone, Copy)]
pub struct FileStoreConfig {
    /// A segment rolls over once it holds this many bytes.
    pub segment_size: u64,
}

impl Default for FileStoreConfig {
    fn default() -> Self {
        FileStoreConfig {
            segment_size: 8 * 1024 * 1024,
        }
    }
}

/// Bytes read ahead from a segment file at a time.
const READ_BLOCK: u64 = 64 * 1024;

/// A block of a segment file as it was read.
struct ReadBlock {
    seg: u32,
    start: u64,
    data: Vec<u8>,
}

/// Sealed segments whose slots stay in memory once read; older ones are
/// read back from their files when needed.
const RESIDENT_SEGMENTS: usize = 4;

/// Subject id of a live message whose record did not read back when its
/// segment's slots were read again: reading it reports the damage.
const DAMAGED: u32 = u32::MAX - 1;

/// The per-sequence index of one segment, slot 0 being its base: record
/// offset and length (length 0: no record), whether the record has a
/// header block (nats-server's file store counts 4 more bytes for one),
/// subject id (`NONE` when not a live message) and timestamp.
#[derive(Clone, Default)]
struct Slots {
    offs: Vec<u32>,
    lens: Vec<u32>,
    hdrs: Vec<bool>,
    sids: Vec<u32>,
    tss: Vec<i64>,
}

impl Slots {
    fn grow_to(&mut self, len: usize) {
        self.offs.resize(len, 0);
        self.lens.resize(len, 0);
        self.hdrs.resize(len, false);
        self.sids.resize(len, NONE);
        self.tss.resize(len, 0);
    }

    fn set(&mut self, i: usize, off: u64, len: u32, ts: i64) {
        self.offs[i] = off as u32;
        self.lens[i] = len;
        self.tss[i] = ts;
    }

    /// Drops spare capacity once the segment is sealed: the vectors grow
    /// by doubling.
    fn shrink(&mut self) {
        self.offs.shrink_to_fit();
        self.lens.shrink_to_fit();
        self.hdrs.shrink_to_fit();
        self.sids.shrink_to_fit();
        self.tss.shrink_to_fit();
    }
}

/// What recovery found across segments that accounts for sequences no
/// segment holds, to tell deleted from lost.
#[derive(Default)]
struct Recovery {
    deleted: BTreeSet<u64>,
    /// Removed segments' ranges (`DeleteRange`).
    ranges: Vec<(u64, u64)>,
    compact: u64,
    /// Above the first segment's Start record.
    lower: Option<u64>,
    lost_bytes: u64,
    /// Tombstones of secure deletes, whose erasure may be unfinished.
    erased: Vec<u64>,
    /// Slots skipped over inside segments: sequences with no record.
    recordless_slots: Vec<(u64, u64)>,
    /// The newest segment (after a cut, the mark's).
    last_id: Option<u32>,
    /// Where the mark was found: (segment id, end of its record).
    cut: Option<(u32, u64)>,
}

/// One segment file: what it holds, and its slots while in memory.
struct Seg {
    id: u32,
    /// Sequence of slot 0.
    base: u64,
    /// Slots from `base`.
    count: u64,
    /// Bytes in the segment, including any not yet written.
    len: u64,
    /// Bytes written to the file.
    written: u64,
    /// Bytes of the file made room for (`Dir::reserve`).
    reserved: u64,
    live: u64,
    /// Greatest timestamp of its records.
    max_ts: i64,
    /// Sequences of its slots that are not live messages (removed,
    /// skipped, erased or without a record): with `count` this says what
    /// is live without the slots. `live + gone.total() == count`.
    gone: SeqRanges,
    /// The slots; `None` while paged out (sealed segments only).
    slots: RefCell<Option<Arc<Slots>>>,
    /// Tombstones written here for sequences in older segments; copied
    /// forward if this segment is removed while those are not.
    foreign: Vec<u64>,
    /// Removed-range markers written here; copied forward likewise.
    ranges: Vec<(u64, u64)>,
}

fn seg_name(id: u32) -> String {
    format!("{id:08}.blk")
}

fn parse_seg_name(name: &str) -> Option<u32> {
    name.strip_suffix(".blk")?.parse().ok()
}

impl Seg {
    fn new(id: u32, base: u64) -> Self {
        Seg {
            id,
            base,
            count: 0,
            len: 0,
            written: 0,
            reserved: 0,
            live: 0,
            max_ts: i64::MIN,
            gone: SeqRanges::default(),
            slots: RefCell::new(Some(Arc::default())),
            foreign: Vec::new(),
            ranges: Vec::new(),
        }
    }

    fn end(&self) -> u64 {
        self.base + self.count
    }

    fn contains(&self, seq: u64) -> bool {
        seq >= self.base && seq < self.end()
    }

    fn is_live(&self, seq: u64) -> bool {
        self.contains(seq) && !self.gone.contains(seq)
    }

    fn is_resident(&self) -> bool {
        self.slots.borrow().is_some()
    }

    /// The slots, to change; only a segment whose slots are in memory.
    fn slots_mut(&mut self) -> &mut Slots {
        let slots = self.slots.get_mut().as_mut().expect("slots in memory");
        Arc::make_mut(slots)
    }

    /// Makes a slot for `seq` (at or after the end) and returns its index.
    /// Slots skipped over have no record and are gone; the new one is
    /// live until the caller says otherwise.
    fn slot(&mut self, seq: u64) -> usize {
        debug_assert!(seq >= self.end(), "slots are made in order");
        if seq > self.end() {
            self.gone.insert_range(self.end(), seq - 1);
        }
        let i = (seq - self.base) as usize;
        self.slots_mut().grow_to(i + 1);
        self.count = i as u64 + 1;
        i
    }

    /// Marks the slot of `seq` not live.
    fn set_gone(&mut self, seq: u64) {
        self.gone.insert(seq);
        let i = (seq - self.base) as usize;
        if let Some(slots) = self.slots.get_mut() {
            Arc::make_mut(slots).sids[i] = NONE;
        }
    }

    /// Half-open spans of live sequences at or after `from`, in order.
    fn live_spans(&self, from: u64) -> impl Iterator<Item = (u64, u64)> + '_ {
        let end = self.end();
        let mut cursor = from.max(self.base);
        let mut gone = self.gone.iter_from(cursor);
        std::iter::from_fn(move || {
            while cursor < end {
                let Some((a, b)) = gone.next() else {
                    let span = (cursor, end);
                    cursor = end;
                    return Some(span);
                };
                if a > cursor {
                    let span = (cursor, a.min(end));
                    cursor = b + 1;
                    return Some(span);
                }
                cursor = cursor.max(b + 1);
            }
            None
        })
    }

    fn check(&self) {
        debug_assert_eq!(
            self.live + self.gone.total(),
            self.count,
            "segment {}: every slot is live or gone",
            self.id
        );
    }
}

/// Subject names interned to small ids for the per-message index.
#[derive(Default)]
struct Names {
    ids: HashMap<Arc<str>, u32>,
    names: Vec<Option<Arc<str>>>,
    refs: Vec<u64>,
    free: Vec<u32>,
}

impl Names {
    fn acquire(&mut self, subject: &str) -> u32 {
        if let Some(&id) = self.ids.get(subject) {
            self.refs[id as usize] += 1;
            return id;
        }
        let name: Arc<str> = Arc::from(subject);
        let id = match self.free.pop() {
            Some(id) => {
                self.names[id as usize] = Some(name.clone());
                self.refs[id as usize] = 1;
                id
            }
            None => {
                self.names.push(Some(name.clone()));
                self.refs.push(1);
                (self.names.len() - 1) as u32
            }
        };
        self.ids.insert(name, id);
        id
    }

    fn release(&mut self, id: u32) {
        let r = &mut self.refs[id as usize];
        *r -= 1;
        if *r == 0 {
            if let Some(name) = self.names[id as usize].take() {
                self.ids.remove(&name);
            }
            self.free.push(id);
        }
    }

    fn name(&self, id: u32) -> &str {
        let name = self.names.get(id as usize).and_then(|n| n.as_deref());
        name.unwrap_or("")
    }

    fn id(&self, subject: &str) -> Option<u32> {
        self.ids.get(subject).copied()
    }
}

pub struct FileStore {
    dir: Arc<dyn Dir>,
    cfg: FileStoreConfig,
    segs: Vec<Seg>,
    /// Bytes of the active (last) segment not yet written.
    pending: Vec<u8>,
    first_seq: u64,
    last_seq: u64,
    last_ts: i64,
    msgs: u64,
    bytes: u64,
    subjects: SubjectIndex,
    names: Names,
    lost: Vec<u64>,
    lost_bytes: u64,
    /// A write failed (with this error); the in-memory state is ahead of
    /// the files.
    failed: Option<String>,
    /// The last block read from a segment file: consumers read messages
    /// in order, so one read serves many. Cleared by anything that
    /// rewrites written bytes (erasure, purge, removal).
    read_cache: RefCell<Option<ReadBlock>>,
    /// The first damage a read found ([`MsgStore::damage`]).
    damage: RefCell<Option<String>>,
    /// Sealed segments with their slots in memory, least recently used
    /// first; at most [`RESIDENT_SEGMENTS`].
    resident: RefCell<VecDeque<u32>>,
    /// Older segments written (erasures) since the last sync handle.
    touched: BTreeSet<u32>,
    /// Segments created since the last sync handle.
    created: BTreeSet<u32>,
    /// Segments to unlink once the active segment is synced.
    doomed: Vec<u32>,
    dirty: bool,
    /// Opened at a mark: the last mark, and what waits for a release.
    marks: Option<Marks>,
}

/// A replica's store: the last mark written, and the irreversible steps
/// held back since older marks.
#[derive(Debug, Default)]
struct Marks {
    last: u64,
    /// The log index being applied ([`MsgStore::applying`]).
    index: u64,
    held: Vec<Held>,
    /// Messages removed since the oldest mark not released, by sequence:
    /// their records stay on disk until then (unlinks and erasures are
    /// held), so they can still be read as of a mark before their
    /// removal ([`MsgStore::next_as_of`]).
    removed: BTreeMap<u64, Removed>,
}

/// Where a removed message's record is, the last mark before its
/// removal (what a release goes by) and the log index that removed it
/// (what reads as of an index go by: marks differ from replica to
/// replica, indexes do not).
#[derive(Debug, Clone, Copy)]
struct Removed {
    seg: u32,
    off: u64,
    len: u32,
    after: u64,
    at: u64,
}

/// An irreversible step, held until no mark at or before `after` (the
/// last mark when it was asked for) can be opened again.
#[derive(Debug)]
struct Held {
    after: u64,
    step: Step,
}

#[derive(Debug)]
enum Step {
    /// Unlink a segment nothing live is in.
    Unlink(u32),
    /// Overwrite an erased message's record with `blank`.
    Erase { seg: u32, off: u64, blank: Vec<u8> },
}

/// Record size → the size nats-server's file store counts for the
/// message (see [`crate::file_msg_size`]).
fn size_of_record(len: u32, has_headers: bool) -> u64 {
    let body = (len as u64).saturating_sub(record::HEADER as u64 + record::MSG_PREFIX as u64);
    body + crate::FILE_MSG_OVERHEAD + if has_headers { 4 } else { 0 }
}

impl FileStore {
    /// Opens (recovering) or creates the store in `dir`.
    pub fn open(dir: Arc<dyn Dir>, cfg: FileStoreConfig) -> Result<Self> {
        Self::open_inner(dir, cfg, None)
    }

    /// Opens a replica's store at the state after log index `mark`:
    /// records after that mark are dropped (from the files too), and
    /// from now on irreversible steps wait for [`MsgStore::release`].
    /// Mark 0 is the empty store. [`StoreError::NoMark`] if the store
    /// holds no such mark (it is behind, or damaged). Opening at a mark
    /// releases the ones before it (held erasures are taken).
    pub fn open_at(dir: Arc<dyn Dir>, cfg: FileStoreConfig, mark: u64) -> Result<Self> {
        if mark == 0 {
            for name in dir.list()? {
                dir.remove(&name)?;
            }
            dir.sync_dir()?;
        }
        Self::open_inner(dir, cfg, Some(mark))
    }

    /// [`FileStore::open_at`] the greatest mark at or below `index` that
    /// the store holds (0, the empty store, if none), and that mark: a
    /// replica whose catch-up to a snapshot at `index` was cut short
    /// starts again from what it had. Reads the segments twice; a normal
    /// restart opens at its snapshot's exact mark.
    pub fn open_at_or_before(
        dir: Arc<dyn Dir>,
        cfg: FileStoreConfig,
        index: u64,
    ) -> Result<(Self, u64)> {
        let mut best = 0;
        for name in dir.list()? {
            if parse_seg_name(&name).is_none() {
                continue;
            }
            let data = dir.read_all(&name)?;
            for (_, r) in record::scan(&data).records {
                if r.kind == Kind::Mark && r.seq <= index {
                    best = best.max(r.seq);
                }
            }
        }
        Ok((Self::open_at(dir, cfg, best)?, best))
    }

    fn open_inner(dir: Arc<dyn Dir>, cfg: FileStoreConfig, mark: Option<u64>) -> Result<Self> {
        let mut fs = FileStore {
            dir,
            cfg,
            segs: Vec::new(),
            pending: Vec::new(),
            first_seq: 0,
            last_seq: 0,
            last_ts: 0,
            msgs: 0,
            bytes: 0,
            subjects: SubjectIndex::default(),
            names: Names::default(),
            lost: Vec::new(),
            lost_bytes: 0,
            failed: None,
            read_cache: RefCell::new(None),
            damage: RefCell::new(None),
            resident: RefCell::new(VecDeque::new()),
            touched: BTreeSet::new(),
            created: BTreeSet::new(),
            doomed: Vec::new(),
            dirty: false,
            marks: None,
        };
        fs.recover(mark)?;
        fs.marks = mark.map(|last| Marks {
            last,
            index: last,
            ..Marks::default()
        });
        // What recovery read may include writes that were never synced (a
        // process crash leaves them in the page cache). Make them durable
        // now, so nothing acknowledged later stands on state a power loss
        // could still take back.
        for seg in &fs.segs {
            fs.dir.sync_handle(&seg_name(seg.id), false)?.sync()?;
        }
        if fs.segs.is_empty() {
            fs.new_segment(1)?;
        }
        Ok(fs)
    }

    /// (id, first seq, end seq, live) per segment, for test traces.
    #[doc(hidden)]
    pub fn debug_segments(&self) -> Vec<(u32, u64, u64, u64)> {
        self.segs
            .iter()
            .map(|s| (s.id, s.base, s.end(), s.live))
            .collect()
    }

    /// Segments whose slots are in memory, for tests of the bound.
    #[doc(hidden)]
    pub fn debug_resident(&self) -> usize {
        self.segs.iter().filter(|s| s.is_resident()).count()
    }

    fn active(&mut self) -> &mut Seg {
        let active = self.segs.last_mut().expect("a store always has a segment");
        debug_assert!(
            active.is_resident(),
            "the active segment's slots stay in memory"
        );
        active
    }

    /// The slots of segment `si`, read back from its file if they were
    /// paged out; the least recently used sealed segment's slots go if
    /// more than [`RESIDENT_SEGMENTS`] are in memory.
    fn slots(&self, si: usize) -> Arc<Slots> {
        let seg = &self.segs[si];
        let sealed = si + 1 < self.segs.len();
        if let Some(slots) = seg.slots.borrow().as_ref() {
            if sealed {
                self.note_resident(seg.id);
            }
            return slots.clone();
        }
        debug_assert!(sealed, "only sealed segments are paged out");
        let slots = Arc::new(self.read_slots(seg));
        *seg.slots.borrow_mut() = Some(slots.clone());
        self.note_resident(seg.id);
        slots
    }

    /// Moves (or adds) sealed segment `id` to the back of the resident
    /// list, and pages out the front beyond the bound.
    fn note_resident(&self, id: u32) {
        let mut resident = self.resident.borrow_mut();
        if resident.back() == Some(&id) {
            return;
        }
        resident.retain(|&r| r != id);
        resident.push_back(id);
        while resident.len() > RESIDENT_SEGMENTS {
            let out = resident.pop_front().expect("over the bound");
            let at = self.segs.binary_search_by_key(&out, |s| s.id);
            if let Ok(si) = at {
                debug_assert!(si + 1 < self.segs.len(), "the active segment stays");
                self.segs[si].slots.borrow_mut().take();
            }
        }
    }

    /// Reads a sealed segment's slots back from its file: its records
    /// give offsets, lengths and times, `gone` says which are live, and
    /// the subject ids are the ones still held for them. A live message
    /// whose record does not read back is marked [`DAMAGED`].
    fn read_slots(&self, seg: &Seg) -> Slots {
        let mut slots = Slots::default();
        slots.grow_to(seg.count as usize);
        let data = self.dir.read_all(&seg_name(seg.id)).unwrap_or_default();
        for (off, r) in record::scan(&data).records {
            if !matches!(r.kind, Kind::Msg | Kind::Erased | Kind::Skip) || !seg.contains(r.seq) {
                continue;
            }
            let i = (r.seq - seg.base) as usize;
            slots.set(i, off, record_len(&r), r.ts);
            slots.hdrs[i] = r.headers.is_some_and(|h| !h.is_empty());
            if r.kind == Kind::Msg && !seg.gone.contains(r.seq) {
                slots.sids[i] = self.names.id(r.subject).unwrap_or(DAMAGED);
            }
        }
        for (a, b) in seg.live_spans(seg.base) {
            for seq in a..b {
                let i = (seq - seg.base) as usize;
                if slots.sids[i] == NONE {
                    slots.sids[i] = DAMAGED;
                }
            }
        }
        slots.shrink();
        slots
    }

    fn seg_index(&self, seq: u64) -> Option<usize> {
        let i = self.segs.partition_point(|s| s.end() <= seq);
        (i < self.segs.len() && self.segs[i].contains(seq)).then_some(i)
    }

    fn new_segment(&mut self, id: u32) -> Result<()> {
        self.flush()?;
        // The segment being closed still has unsynced writes.
        if let Some(prev) = self.segs.last_mut() {
            prev.slots_mut().shrink();
            let id = prev.id;
            self.touched.insert(id);
            self.note_resident(id);
            let prev = self.segs.last_mut().expect("the segment being closed");
            // Its reserved tail would only be read again at every start
            // (the trim is made durable with the segment's sync; a crash
            // before that leaves zeros, which reopening skips).
            if prev.reserved > prev.written {
                if let Err(e) = self.dir.truncate(&seg_name(prev.id), prev.written) {
                    self.failed = Some(e.to_string());
                    return Err(e.into());
                }
                prev.reserved = prev.written;
            }
        }
        let mut seg = Seg::new(id, self.last_seq + 1);
        let mut buf = Vec::new();
        record::encode_marker(&mut buf, Kind::Start, self.last_seq, self.last_ts);
        seg.len = buf.len() as u64;
        self.segs.push(seg);
        self.pending = buf;
        self.created.insert(id);
        self.dirty = true;
        Ok(())
    }

    /// Ends what the next sync makes durable with a `Synced` record in
    /// the active segment. Damage to the last record before it then reads
    /// as damage and is reported (`recover`), where at the very end of the
    /// newest segment it would read as a write torn by a crash and be
    /// dropped, its sequence used again.
    fn end_batch(&mut self) {
        let before = self.pending.len();
        record::encode_marker(&mut self.pending, Kind::Synced, self.last_seq, self.last_ts);
        let added = (self.pending.len() - before) as u64;
        self.active().len += added;
    }

    /// Writes the buffered bytes of the active segment.
    fn flush(&mut self) -> Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let seg = self.segs.last_mut().expect("segment");
        let name = seg_name(seg.id);
        let end = seg.written + self.pending.len() as u64;
        let written = self.dir.reserve(&name, end, seg.reserved).and_then(|r| {
            seg.reserved = r;
            self.dir.write_at(&name, seg.written, &self.pending)
        });
        if let Err(e) = written {
            // The index already counts what the buffer holds: only a
            // reload from disk makes the two agree again.
            self.failed = Some(e.to_string());
            return Err(e.into());
        }
        seg.written += self.pending.len() as u64;
        self.pending.clear();
        Ok(())
    }

    fn append(&mut self, write: impl FnOnce(&mut Vec<u8>)) -> Result<(u64, u32)> {
        if self.active().len >= self.cfg.segment_size {
            let id = self.active().id + 1;
            self.new_segment(id)?;
        }
        let before = self.pending.len();
        write(&mut self.pending);
        let len = (self.pending.len() - before) as u32;
        let seg = self.active();
        let off = seg.len;
        seg.len += len as u64;
        self.dirty = true;
        if self.pending.len() >= WRITE_BUFFER {
            self.flush()?;
        }
        Ok((off, len))
    }

    /// Appends a record that removes messages, [`REMOVAL_COPIES`] times
    /// in one write. A message is live only while its own record is whole
    /// and no whole removal covers it, so a single damaged place (a
    /// flipped bit, a record whose length no longer reads) can take one
    /// copy but not the removal: recovery applies each removal once,
    /// from whichever copy survives (`recover_record`).
    fn append_removal(&mut self, kind: Kind, seq: u64, ts: i64) -> Result<()> {
        assert!(
            matches!(kind, Kind::Delete | Kind::Compact | Kind::DeleteRange),
            "{kind:?} removes nothing"
        );
        let (_, len) = self.append(|b| {
            for _ in 0..REMOVAL_COPIES {
                record::encode_marker(b, kind, seq, ts);
            }
        })?;
        debug_assert_eq!(len as usize, REMOVAL_COPIES * record::HEADER);
        Ok(())
    }

    fn read_record(&self, seg: &Seg, off: u64, len: u32) -> Result<Vec<u8>> {
        let mut buf = vec![0u8; len as usize];
        if off >= seg.written {
            // Still in the write buffer (only the active segment has one).
            let start = (off - seg.written) as usize;
            buf.copy_from_slice(&self.pending[start..start + len as usize]);
            return Ok(buf);
        }
        let end = off + len as u64;
        let mut cache = self.read_cache.borrow_mut();
        if let Some(b) = cache.as_ref() {
            if b.seg == seg.id && off >= b.start && end <= b.start + b.data.len() as u64 {
                let at = (off - b.start) as usize;
                buf.copy_from_slice(&b.data[at..at + len as usize]);
                return Ok(buf);
            }
        }
        if (len as u64) >= READ_BLOCK {
            self.dir.read_at(&seg_name(seg.id), off, &mut buf)?;
            return Ok(buf);
        }
        let block_len = READ_BLOCK.min(seg.written - off) as usize;
        let mut data = vec![0u8; block_len];
        self.dir.read_at(&seg_name(seg.id), off, &mut data)?;
        buf.copy_from_slice(&data[..len as usize]);
        *cache = Some(ReadBlock {
            seg: seg.id,
            start: off,
            data,
        });
        Ok(buf)
    }

    fn forget_reads(&self) {
        self.read_cache.borrow_mut().take();
    }

    /// Remembers the first damage a read found ([`MsgStore::damage`]).
    fn note_damage<T>(&self, read: Result<T>) -> Result<T> {
        if let Err(StoreError::Corrupt(why)) = &read {
            self.damage.borrow_mut().get_or_insert_with(|| why.clone());
        }
        read
    }

    fn load(&self, si: usize, seq: u64) -> Result<Option<StoredMsg>> {
        self.note_damage(self.read_msg(si, seq))
    }

    fn read_msg(&self, si: usize, seq: u64) -> Result<Option<StoredMsg>> {
        let seg = &self.segs[si];
        if !seg.is_live(seq) {
            return Ok(None);
        }
        let slots = self.slots(si);
        let i = (seq - seg.base) as usize;
        if slots.sids[i] == DAMAGED {
            return Err(StoreError::Corrupt(format!(
                "record for sequence {seq} no longer reads back"
            )));
        }
        let raw = self.read_record(seg, slots.offs[i] as u64, slots.lens[i])?;
        let (r, _) = record::decode(&raw).map_err(|_| {
            StoreError::Corrupt(format!(
                "record for sequence {seq} failed its checksum on read"
            ))
        })?;
        if r.seq != seq || r.kind != Kind::Msg {
            return Err(StoreError::Corrupt(format!(
                "index for sequence {seq} points at sequence {}",
                r.seq
            )));
        }
        Ok(Some(StoredMsg {
            seq,
            ts: r.ts,
            subject: r.subject.to_string(),
            headers: r.headers.map(Bytes::copy_from_slice),
            payload: Bytes::copy_from_slice(r.payload),
        }))
    }

    /// Live sequences `>= start` in order; reads no slots.
    fn live_seqs(&self, start: u64) -> impl Iterator<Item = u64> + '_ {
        let first_seg = self.segs.partition_point(|s| s.end() <= start);
        self.segs[first_seg..]
            .iter()
            .flat_map(move |seg| seg.live_spans(start))
            .flat_map(|(a, b)| a..b)
    }

    /// How many sequences `>= start` are live; reads no slots.
    fn live_count_from(&self, start: u64) -> u64 {
        let first_seg = self.segs.partition_point(|s| s.end() <= start);
        self.segs[first_seg..]
            .iter()
            .flat_map(|seg| seg.live_spans(start))
            .map(|(a, b)| b - a)
            .sum()
    }

    /// Live sequences `>= start` in order, with their subject ids.
    fn live_from(&self, start: u64) -> impl Iterator<Item = (u64, u32)> + '_ {
        let first_seg = self.segs.partition_point(|s| s.end() <= start);
        let with_live = move |si: &usize| self.segs[*si].live > 0;
        (first_seg..self.segs.len())
            .filter(with_live)
            .flat_map(move |si| {
                let seg = &self.segs[si];
                let slots = self.slots(si);
                let base = seg.base;
                seg.live_spans(start)
                    .flat_map(|(a, b)| a..b)
                    .map(move |seq| (seq, slots.sids[(seq - base) as usize]))
            })
    }

    /// The first live sequence `>= start` for which `pick` (given the
    /// segment's slots and the slot) says yes.
    fn find_live(
        &self,
        start: u64,
        mut pick: impl FnMut(u64, &Slots, usize) -> bool,
    ) -> Option<u64> {
        let first_seg = self.segs.partition_point(|s| s.end() <= start);
        for si in first_seg..self.segs.len() {
            let seg = &self.segs[si];
            if seg.live == 0 {
                continue;
            }
            let slots = self.slots(si);
            for (a, b) in seg.live_spans(start) {
                let found = (a..b).find(|&seq| pick(seq, &slots, (seq - seg.base) as usize));
                if found.is_some() {
                    return found;
                }
            }
        }
        None
    }

    /// Live sequences `<= end` in reverse order, with their subject ids.
    fn live_back_from(&self, end: u64) -> impl Iterator<Item = (u64, u32)> + '_ {
        let last_seg = self.segs.partition_point(|s| s.base <= end);
        let with_live = move |si: &usize| self.segs[*si].live > 0;
        (0..last_seg).rev().filter(with_live).flat_map(move |si| {
            let seg = &self.segs[si];
            let slots = self.slots(si);
            let base = seg.base;
            let spans: Vec<(u64, u64)> = seg.live_spans(base).collect();
            spans
                .into_iter()
                .rev()
                .flat_map(|(a, b)| (a..b).rev())
                .filter(move |&seq| seq <= end)
                .map(move |seq| (seq, slots.sids[(seq - base) as usize]))
        })
    }

    fn fix_first(&mut self) {
        let from = self.first_seq.max(self.segs.first().map_or(0, |s| s.base));
        let next = self.live_seqs(from).next();
        self.first_seq = next.unwrap_or(self.last_seq + 1);
    }

    /// Marks `seq` gone in the index and the counters. Returns its subject.
    fn unindex(&mut self, si: usize, seq: u64) -> Option<u32> {
        if !self.segs[si].is_live(seq) {
            return None;
        }
        let slots = self.slots(si);
        let seg = &mut self.segs[si];
        let i = (seq - seg.base) as usize;
        let (sid, off, len, hdrs) = (slots.sids[i], slots.offs[i], slots.lens[i], slots.hdrs[i]);
        drop(slots);
        seg.set_gone(seq);
        seg.live -= 1;
        seg.check();
        self.msgs -= 1;
        if sid == DAMAGED {
            // Its record is gone, and with it its size and subject.
            return None;
        }
        if let Some(marks) = &mut self.marks {
            let removed = Removed {
                seg: seg.id,
                off: off as u64,
                len,
                after: marks.last,
                at: marks.index,
            };
            marks.removed.insert(seq, removed);
        }
        self.bytes -= size_of_record(len, hdrs);
        let name = self.names.name(sid).to_string();
        self.subjects.remove(&name, seq);
        self.names.release(sid);
        Some(sid)
    }

    /// Schedules removal of segments with nothing live in them. A segment
    /// in the middle leaves behind (in the active segment) a marker that
    /// its sequences are gone on purpose, plus whatever it said about older
    /// segments that still exist. Segments holding only such markers are
    /// left until they reach the front, so markers are not copied around.
    fn reclaim(&mut self) -> Result<()> {
        let last = self.segs.len() - 1;
        let doomed: Vec<bool> = self
            .segs
            .iter()
            .enumerate()
            .map(|(i, s)| i < last && s.live == 0 && (i == 0 || s.count > 0))
            .collect();
        if !doomed.iter().any(|&d| d) {
            return Ok(());
        }
        let mut ranges: Vec<(u64, u64)> = Vec::new();
        let mut tombstones: Vec<u64> = Vec::new();
        let mut older_survives = false;
        let mut kept = Vec::with_capacity(self.segs.len());
        for (seg, gone) in std::mem::take(&mut self.segs).into_iter().zip(doomed) {
            if !gone {
                older_survives = true;
                kept.push(seg);
                continue;
            }
            if older_survives {
                ranges.extend(seg.ranges.iter().copied());
                if seg.end() > seg.base {
                    ranges.push((seg.base, seg.end() - 1));
                }
                tombstones.extend(seg.foreign.iter().copied());
            }
            if self.marks.is_none() {
                // Its unlink follows the next sync; a held one stays on
                // disk meanwhile and is synced like any other.
                self.touched.remove(&seg.id);
            }
            self.hold_or_do(Step::Unlink(seg.id))?;
        }
        self.segs = kept;
        let segs = &self.segs;
        let kept_id = |id: &u32| segs.binary_search_by_key(id, |s| s.id).is_ok();
        self.resident.get_mut().retain(kept_id);
        let floor = self.segs[0].base;
        ranges.retain(|&(_, b)| b >= floor);
        ranges.sort_unstable();
        let mut merged: Vec<(u64, u64)> = Vec::new();
        for (a, b) in ranges {
            match merged.last_mut() {
                Some(m) if a <= m.1 + 1 => m.1 = m.1.max(b),
                _ => merged.push((a, b)),
            }
        }
        tombstones.retain(|&s| self.seg_index(s).is_some());
        for (a, b) in merged {
            self.append_removal(Kind::DeleteRange, a, b as i64)?;
            self.active().ranges.push((a, b));
        }
        for s in tombstones {
            self.append_removal(Kind::Delete, s, 0)?;
            self.active().foreign.push(s);
        }
        Ok(())
    }

    /// A removed message's record, still on disk while its removal is
    /// held.
    fn read_removed(&self, seq: u64, r: Removed) -> Result<StoredMsg> {
        let mut raw = vec![0u8; r.len as usize];
        let in_buffer = self
            .segs
            .last()
            .filter(|active| active.id == r.seg && r.off >= active.written);
        match in_buffer {
            Some(active) => {
                let start = (r.off - active.written) as usize;
                raw.copy_from_slice(&self.pending[start..start + r.len as usize]);
            }
            None => self.dir.read_at(&seg_name(r.seg), r.off, &mut raw)?,
        }
        let corrupt = || StoreError::Corrupt(format!("removed sequence {seq} does not read back"));
        let (record, _) = record::decode(&raw).map_err(|_| corrupt())?;
        if record.seq != seq || record.kind != Kind::Msg {
            return Err(corrupt());
        }
        Ok(StoredMsg {
            seq,
            ts: record.ts,
            subject: record.subject.to_string(),
            headers: record.headers.map(Bytes::copy_from_slice),
            payload: Bytes::copy_from_slice(record.payload),
        })
    }

    /// Takes an irreversible step now, or, in a replica's store, once
    /// the marks before it are released.
    fn hold_or_do(&mut self, step: Step) -> Result<()> {
        match &mut self.marks {
            Some(marks) => {
                let after = marks.last;
                marks.held.push(Held { after, step });
                Ok(())
            }
            None => self.take_step(step),
        }
    }

    fn take_step(&mut self, step: Step) -> Result<()> {
        match step {
            // After the next sync, with what justifies it.
            Step::Unlink(id) => {
                self.doomed.push(id);
                self.dirty = true;
            }
            Step::Erase { seg, off, blank } => {
                self.forget_reads();
                let Some(si) = self.segs.iter().position(|s| s.id == seg) else {
                    return Ok(()); // The segment went first.
                };
                let written = self.segs[si].written;
                if off >= written {
                    let start = (off - written) as usize;
                    self.pending[start..start + blank.len()].copy_from_slice(&blank);
                } else {
                    self.dir.write_at(&seg_name(seg), off, &blank)?;
                    if si + 1 != self.segs.len() {
                        self.touched.insert(seg);
                    }
                }
                self.dirty = true;
            }
        }
        Ok(())
    }

    /// Overwrites the records of erased messages that are still whole:
    /// an erasure held back when the process stopped. Recovery runs it,
    /// at a mark no older one will be opened before.
    fn finish_erasures(&mut self, erased: &[u64]) -> Result<()> {
        for &seq in erased {
            let Some(si) = self.seg_index(seq) else {
                continue;
            };
            let slots = self.slots(si);
            let seg = &self.segs[si];
            let i = (seq - seg.base) as usize;
            if slots.lens[i] == 0 {
                continue;
            }
            let (off, len) = (slots.offs[i] as u64, slots.lens[i]);
            let raw = self.read_record(seg, off, len)?;
            let Ok((r, _)) = record::decode(&raw) else {
                continue;
            };
            if r.kind != Kind::Msg {
                continue;
            }
            let blank = erased_record(&r);
            let seg = seg.id;
            self.take_step(Step::Erase { seg, off, blank })?;
        }
        Ok(())
    }

    /// Reads every segment back into the index. With `mark`, stops at
    /// that mark and drops what follows it.
    fn recover(&mut self, mark: Option<u64>) -> Result<()> {
        let mut ids: Vec<u32> = self
            .dir
            .list()?
            .iter()
            .filter_map(|n| parse_seg_name(n))
            .collect();
        ids.sort_unstable();
        let mut found = Recovery {
            last_id: ids.last().copied(),
            ..Recovery::default()
        };
        for id in ids {
            if found.cut.is_some() {
                // After the mark: as if never written.
                self.dir.remove(&seg_name(id))?;
                continue;
            }
            self.recover_segment(id, mark, &mut found)?;
        }
        if let Some(active) = self.segs.last() {
            let active = active.id;
            self.resident.get_mut().retain(|&id| id != active);
        }
        match (mark, found.cut) {
            (Some(m), None) if m > 0 => return Err(StoreError::NoMark(m)),
            (Some(_), Some(_)) => self.dir.sync_dir()?,
            _ => {}
        }
        self.apply_removals(&found);
        self.lost = self.unaccounted(&found);
        self.lost_bytes = found.lost_bytes;
        self.finish_erasures(&found.erased)?;
        let next = self.live_seqs(0).next();
        self.first_seq = next.unwrap_or(self.last_seq + 1);
        if self.first_seq < found.compact {
            self.first_seq = found.compact;
        }
        self.assert_recovered();
        Ok(())
    }

    /// What recovery promises the rest of the store: segments in sequence
    /// order that never overlap, each with `live + gone == count`, and
    /// counters that agree with them.
    fn assert_recovered(&self) {
        let mut end = 0;
        let mut live = 0;
        for seg in &self.segs {
            assert!(
                seg.count == 0 || seg.base >= end,
                "segment {} starts at {} inside the one before (to {end})",
                seg.id,
                seg.base
            );
            assert_eq!(
                seg.live + seg.gone.total(),
                seg.count,
                "segment {}: live + gone == count",
                seg.id
            );
            end = end.max(seg.end());
            live += seg.live;
        }
        assert_eq!(live, self.msgs, "the message count is the segments' live");
        assert!(
            self.first_seq <= self.last_seq + 1,
            "first {} past last {} + 1",
            self.first_seq,
            self.last_seq
        );
    }

    /// Reads segment `id` into the index, noting in `found` what accounts
    /// for sequences it does not hold; stops at `mark`'s record, cutting
    /// the segment there, and drops a torn tail of the newest segment.
    fn recover_segment(&mut self, id: u32, mark: Option<u64>, found: &mut Recovery) -> Result<()> {
        let name = seg_name(id);
        let data = self.dir.read_all(&name)?;
        let scan = record::scan(&data);
        let mut seg: Option<Seg> = None;
        for (off, r) in &scan.records {
            let last_seq = self.last_seq;
            let s = seg.get_or_insert_with(|| {
                let base = match r.kind {
                    Kind::Start => r.seq + 1,
                    // A log index, not a sequence.
                    Kind::Mark => last_seq + 1,
                    // What came before it in the segment is gone.
                    Kind::Synced => r.seq.max(last_seq) + 1,
                    // Its Start record was lost. A message's sequence
                    // starts it, but a marker's may be an earlier one
                    // (a compaction, a tombstone): segments never
                    // overlap, so it starts after what came before.
                    _ => r.seq.max(last_seq + 1),
                };
                Seg::new(id, base)
            });
            if r.kind == Kind::Mark {
                match mark {
                    Some(m) if r.seq == m => {
                        found.cut = Some((id, *off + record::HEADER as u64));
                        break;
                    }
                    Some(m) if r.seq > m => return Err(StoreError::NoMark(m)),
                    _ => continue,
                }
            }
            self.recover_record(s, *off, r, found);
        }
        let mut seg = seg.unwrap_or_else(|| Seg::new(id, self.last_seq + 1));
        let mut valid_len = scan.torn_at.unwrap_or(data.len() as u64);
        if let Some((_, end)) = found.cut {
            // The mark's segment is now the last, cut after the mark.
            debug_assert!(end <= valid_len, "the mark was read, so it is whole");
            valid_len = end;
            found.last_id = Some(id);
        }
        for &(a, b) in &scan.corrupt {
            found.lost_bytes += b.min(valid_len).saturating_sub(a);
        }
        if Some(id) == found.last_id && valid_len < data.len() as u64 {
            // A cut-off write at the very end: drop it.
            self.dir.truncate(&name, valid_len)?;
        }
        seg.len = valid_len;
        seg.written = valid_len;
        seg.reserved = valid_len;
        seg.slots_mut().shrink();
        seg.check();
        debug_assert!(
            self.segs.last().is_none_or(|prev| prev.end() <= seg.base),
            "segments are in sequence order and never overlap (seg_index)"
        );
        self.segs.push(seg);
        // Recovery holds the slots of a few segments at a time too.
        self.note_resident(id);
        Ok(())
    }

    /// One record of the segment `s` being recovered (any kind but a
    /// mark), at `off`.
    fn recover_record(
        &mut self,
        s: &mut Seg,
        off: u64,
        r: &record::Record<'_>,
        found: &mut Recovery,
    ) {
        match r.kind {
            Kind::Start => {
                if found.lower.is_none() {
                    found.lower = Some(r.seq + 1);
                }
                // The stream's last sequence and time when the segment
                // opened (its messages may all be gone).
                if r.seq >= self.last_seq {
                    self.last_seq = r.seq;
                    self.last_ts = r.ts;
                }
            }
            Kind::Synced => {
                // Sequences up to it were used: any it does not account
                // for were lost, and are not used again.
                if r.seq >= self.last_seq {
                    self.last_seq = r.seq;
                    self.last_ts = r.ts;
                }
            }
            Kind::Msg | Kind::Erased | Kind::Skip => {
                if r.seq < s.base {
                    return;
                }
                if r.seq > s.end() {
                    found.recordless_slots.push((s.end(), r.seq - 1));
                }
                let i = s.slot(r.seq);
                let len = record_len(r);
                let hdrs = r.headers.is_some_and(|h| !h.is_empty());
                s.max_ts = s.max_ts.max(r.ts);
                let slots = s.slots_mut();
                slots.set(i, off, len, r.ts);
                slots.hdrs[i] = hdrs;
                if r.kind == Kind::Msg {
                    slots.sids[i] = self.names.acquire(r.subject);
                    s.live += 1;
                    self.msgs += 1;
                    self.bytes += size_of_record(len, hdrs);
                    self.subjects.add(r.subject, r.seq);
                } else {
                    s.gone.insert(r.seq);
                }
                if r.seq >= self.last_seq {
                    self.last_seq = r.seq;
                    self.last_ts = r.ts;
                }
            }
            Kind::Delete => {
                // Each tombstone is written twice (`append_removal`):
                // applied once, from whichever copy is read first.
                if !found.deleted.insert(r.seq) {
                    return;
                }
                if r.ts == 1 {
                    found.erased.push(r.seq);
                }
                if !s.contains(r.seq) {
                    s.foreign.push(r.seq);
                }
            }
            Kind::Compact => {
                found.compact = found.compact.max(r.seq);
                self.last_seq = self.last_seq.max(r.seq.saturating_sub(1));
            }
            Kind::DeleteRange => {
                let range = (r.seq, r.ts as u64);
                if s.ranges.last() != Some(&range) {
                    found.ranges.push(range);
                    s.ranges.push(range);
                }
            }
            Kind::Mark => unreachable!("marks are read by recover_segment"),
        }
    }

    /// Applies the tombstones and the compaction recovery found to the
    /// index.
    fn apply_removals(&mut self, found: &Recovery) {
        for &seq in &found.deleted {
            if let Some(si) = self.seg_index(seq) {
                self.unindex(si, seq);
            }
        }
        if found.compact > 0 {
            let below: Vec<u64> = self
                .live_seqs(0)
                .take_while(|&s| s < found.compact)
                .collect();
            for seq in below {
                if let Some(si) = self.seg_index(seq) {
                    self.unindex(si, seq);
                }
            }
        }
    }

    /// Whatever nothing accounts for was lost to damage: of the sequences
    /// with no record (skipped slots, and those outside every segment),
    /// those no tombstone or removed range covers.
    fn unaccounted(&self, found: &Recovery) -> Vec<u64> {
        let lower = found.lower.unwrap_or(1).max(found.compact).max(1);
        let mut recordless = SeqRanges::default();
        let slots = found.recordless_slots.iter().copied();
        for (a, b) in self.outside_segments(lower).into_iter().chain(slots) {
            recordless.insert_range(a, b);
        }
        let mut lost = Vec::new();
        for (a, b) in recordless.iter_from(lower) {
            for seq in a.max(lower)..=b.min(self.last_seq) {
                let accounted = found.deleted.contains(&seq)
                    || found.ranges.iter().any(|&(a, b)| seq >= a && seq <= b);
                if !accounted {
                    lost.push(seq);
                }
            }
        }
        lost
    }
}

impl FileStore {
    /// Inclusive ranges of sequences from `lower` to the last that no
    /// segment has a slot for.
    fn outside_segments(&self, lower: u64) -> Vec<(u64, u64)> {
        let mut outside = Vec::new();
        let mut cursor = lower;
        for seg in &self.segs {
            if seg.base > cursor && seg.count > 0 {
                outside.push((cursor, seg.base - 1));
            }
            if seg.count > 0 {
                cursor = cursor.max(seg.end());
            }
        }
        if cursor <= self.last_seq {
            outside.push((cursor, self.last_seq));
        }
        outside
    }
}

/// A record's length as the slots hold it.
fn record_len(r: &record::Record<'_>) -> u32 {
    record::msg_len(r.subject, r.headers, r.payload).max(record::HEADER) as u32
}

impl MsgStore for FileStore {
    fn msg_size(&self, subject: &str, headers: Option<&[u8]>, payload: &[u8]) -> u64 {
        crate::file_msg_size(subject, headers, payload)
    }

    fn store(
        &mut self,
        subject: &str,
        headers: Option<&[u8]>,
        payload: &[u8],
        ts: i64,
    ) -> Result<u64> {
        let len = record::msg_len(subject, headers, payload);
        if len > record::MAX_RECORD || subject.len() > u16::MAX as usize {
            return Err(StoreError::TooLarge(len));
        }
        let seq = self.last_seq + 1;
        let (off, len) =
            self.append(|b| record::encode_msg(b, Kind::Msg, seq, ts, subject, headers, payload))?;
        let sid = self.names.acquire(subject);
        let has_headers = headers.is_some_and(|h| !h.is_empty());
        let seg = self.active();
        let i = seg.slot(seq);
        seg.max_ts = seg.max_ts.max(ts);
        let slots = seg.slots_mut();
        slots.set(i, off, len, ts);
        slots.hdrs[i] = has_headers;
        slots.sids[i] = sid;
        seg.live += 1;
        seg.check();
        self.msgs += 1;
        self.bytes += size_of_record(len, has_headers);
        self.subjects.add(subject, seq);
        self.last_seq = seq;
        self.last_ts = ts;
        if self.msgs == 1 {
            self.first_seq = seq;
        }
        Ok(seq)
    }

    fn skip(&mut self, ts: i64) -> Result<u64> {
        let seq = self.last_seq + 1;
        let (off, len) = self.append(|b| record::encode_marker(b, Kind::Skip, seq, ts))?;
        let seg = self.active();
        let i = seg.slot(seq);
        seg.max_ts = seg.max_ts.max(ts);
        seg.slots_mut().set(i, off, len, ts);
        seg.gone.insert(seq);
        seg.check();
        self.last_seq = seq;
        self.last_ts = ts;
        if self.msgs == 0 {
            self.first_seq = seq + 1;
        }
        Ok(seq)
    }

    fn get(&self, seq: u64) -> Result<Option<StoredMsg>> {
        match self.seg_index(seq) {
            Some(si) => self.load(si, seq),
            None => Ok(None),
        }
    }

    fn next_matching(&self, start: u64, filter: &Filter) -> Result<Option<StoredMsg>> {
        let start = start.max(self.first_seq);
        let found = if let Some(subject) = filter.literal() {
            let Some(st) = self.subject_state(subject) else {
                return Ok(None);
            };
            if start > st.last {
                return Ok(None);
            }
            let sid = self.names.id(subject);
            self.live_from(start.max(st.first))
                .find(|(_, s)| Some(*s) == sid)
                .map(|(seq, _)| seq)
        } else if filter.is_all() {
            self.live_seqs(start).next()
        } else {
            self.live_from(start)
                .find(|(_, sid)| filter.matches(self.names.name(*sid)))
                .map(|(s, _)| s)
        };
        match found {
            Some(seq) => self.get(seq),
            None => Ok(None),
        }
    }

    fn next_with_headers(&self, start: u64) -> Result<Option<StoredMsg>> {
        let found = self.find_live(start.max(self.first_seq), |_, slots, i| slots.hdrs[i]);
        match found {
            Some(seq) => self.get(seq),
            None => Ok(None),
        }
    }

    fn last_matching(&self, filter: &Filter) -> Result<Option<StoredMsg>> {
        let found = if let Some(subject) = filter.literal() {
            self.subject_state(subject).map(|st| st.last)
        } else {
            self.live_back_from(self.last_seq)
                .find(|(_, sid)| filter.matches(self.names.name(*sid)))
                .map(|(s, _)| s)
        };
        match found {
            Some(seq) => self.get(seq),
            None => Ok(None),
        }
    }

    fn remove(&mut self, seq: u64, erase: bool) -> Result<bool> {
        self.forget_reads();
        let Some(si) = self.seg_index(seq) else {
            return Ok(false);
        };
        if !self.segs[si].is_live(seq) {
            return Ok(false);
        }
        if erase {
            let slots = self.slots(si);
            let seg = &self.segs[si];
            let i = (seq - seg.base) as usize;
            let (off, len) = (slots.offs[i] as u64, slots.lens[i]);
            let raw = self.read_record(seg, off, len)?;
            self.dirty = true;
            if let Ok((r, _)) = record::decode(&raw) {
                let blank = erased_record(&r);
                let seg = seg.id;
                self.hold_or_do(Step::Erase { seg, off, blank })?;
            }
        }
        self.unindex(si, seq);
        // An erasure's tombstone says so (ts 1): one held back when the
        // process stopped is taken at the next open.
        let flag = i64::from(erase);
        self.append_removal(Kind::Delete, seq, flag)?;
        // Compared after the append, which may have rolled a new segment.
        if si != self.segs.len() - 1 {
            self.active().foreign.push(seq);
        }
        if seq == self.first_seq {
            self.fix_first();
        }
        self.reclaim()?;
        Ok(true)
    }

    fn purge(&mut self, p: &Purge) -> Result<u64> {
        self.forget_reads();
        let filter = Filter::new(p.filter.iter().cloned());
        if filter.is_all() && p.keep.unwrap_or(0) == 0 {
            let upto = match p.seq {
                Some(s) if s <= 1 => return Ok(0),
                Some(s) => s,
                None => self.last_seq + 1,
            };
            let gone: Vec<u64> = self.live_seqs(0).take_while(|&s| s < upto).collect();
            for &seq in &gone {
                let si = self.seg_index(seq).expect("live seq has a segment");
                self.unindex(si, seq);
            }
            self.append_removal(Kind::Compact, upto, 0)?;
            if upto > self.last_seq + 1 {
                self.last_seq = upto - 1;
            }
            self.first_seq = upto.max(self.first_seq);
            self.fix_first();
            self.reclaim()?;
            return Ok(gone.len() as u64);
        }
        if p.seq == Some(1) {
            return Ok(0);
        }
        let doomed = {
            let names = &self.names;
            let mut live = self
                .live_from(0)
                .map(|(s, sid)| (s, filter.matches(names.name(sid))));
            purge_selection(p, self.last_seq, &mut live)
        };
        for s in &doomed {
            self.remove(*s, false)?;
        }
        Ok(doomed.len() as u64)
    }

    fn state(&self) -> StoreState {
        let first_ts = self
            .seg_index(self.first_seq)
            .map(|si| self.slots(si).tss[(self.first_seq - self.segs[si].base) as usize])
            .unwrap_or(0);
        StoreState {
            msgs: self.msgs,
            bytes: self.bytes,
            first_seq: self.first_seq,
            first_ts: if self.msgs == 0 { 0 } else { first_ts },
            last_seq: self.last_seq,
            last_ts: if self.last_seq == 0 { 0 } else { self.last_ts },
            num_subjects: self.subjects.len() as u64,
            num_deleted: if self.msgs == 0 || self.last_seq < self.first_seq {
                0
            } else {
                (self.last_seq - self.first_seq + 1) - self.msgs
            },
            lost: self.lost.clone(),
            lost_bytes: self.lost_bytes,
        }
    }

    fn deleted(&self) -> Vec<u64> {
        if self.msgs == 0 {
            return Vec::new();
        }
        let ranges = self.deleted_ranges();
        ranges.into_iter().flat_map(|(a, b)| a..=b).collect()
    }

    /// From the segments' live spans: no slots read, no sequence visited.
    fn deleted_ranges(&self) -> Vec<(u64, u64)> {
        if self.msgs == 0 {
            return Vec::new();
        }
        let first_seg = self.segs.partition_point(|s| s.end() <= self.first_seq);
        let spans = self.segs[first_seg..]
            .iter()
            .flat_map(|seg| seg.live_spans(self.first_seq));
        crate::gaps(spans, self.last_seq)
    }

    fn subject_state(&self, subject: &str) -> Option<SubjectState> {
        let sid = self.names.id(subject)?;
        self.subjects.state(
            subject,
            |from| {
                self.live_from(from)
                    .find(|(_, s)| *s == sid)
                    .map_or(0, |(seq, _)| seq)
            },
            |to| {
                self.live_back_from(to)
                    .find(|(_, s)| *s == sid)
                    .map_or(0, |(seq, _)| seq)
            },
        )
    }

    fn subjects_totals(&self, filter: &Filter) -> BTreeMap<String, u64> {
        self.subjects
            .iter()
            .filter(|(s, _)| filter.matches(s))
            .map(|(s, n)| (s.to_string(), n))
            .collect()
    }

    fn num_pending(&self, start: u64, filter: &Filter, last_per_subject: bool) -> u64 {
        if last_per_subject {
            return self
                .subjects
                .subjects()
                .filter(|s| filter.matches(s))
                .filter_map(|s| self.subject_state(s))
                .filter(|st| st.last >= start)
                .count() as u64;
        }
        if filter.is_all() {
            if start <= self.first_seq {
                return self.msgs;
            }
            return self.live_count_from(start);
        }
        if let Some(subject) = filter.literal() {
            let Some(st) = self.subject_state(subject) else {
                return 0;
            };
            if start <= st.first {
                return st.msgs;
            }
        }
        self.live_from(start)
            .filter(|(_, sid)| filter.matches(self.names.name(*sid)))
            .count() as u64
    }

    fn multi_last_seqs(&self, filter: &Filter) -> Vec<u64> {
        let mut seqs: Vec<u64> = self
            .subjects
            .subjects()
            .filter(|s| filter.matches(s))
            .filter_map(|s| self.subject_state(s))
            .map(|st| st.last)
            .collect();
        seqs.sort_unstable();
        seqs
    }

    fn seq_for_time(&self, ts: i64) -> u64 {
        // Segments whose records are all older need no slots.
        let Some(seg) = self.segs.iter().find(|s| s.live > 0 && s.max_ts >= ts) else {
            return self.last_seq + 1;
        };
        self.find_live(seg.base, |_, slots, i| slots.tss[i] >= ts)
            .unwrap_or(self.last_seq + 1)
    }

    fn expired(&self, cutoff: i64, limit: usize) -> Vec<u64> {
        let mut out = Vec::new();
        self.find_live(self.first_seq, |seq, slots, i| {
            if slots.tss[i] > cutoff || out.len() >= limit {
                return true;
            }
            out.push(seq);
            false
        });
        out
    }

    fn reset_to(&mut self, seq: u64) -> Result<()> {
        self.forget_reads();
        if seq <= 1 {
            // Nothing is below sequence 1.
            return Ok(());
        }
        self.purge(&Purge {
            seq: Some(seq),
            ..Purge::default()
        })?;
        self.last_seq = self.last_seq.max(seq - 1);
        self.first_seq = seq;
        Ok(())
    }

    fn dirty(&self) -> bool {
        self.dirty
    }

    fn failed(&self) -> Option<&str> {
        self.failed.as_deref()
    }

    fn damage(&self) -> Option<String> {
        self.damage.borrow().clone()
    }

    fn sync_handle(&mut self) -> Option<SyncHandle> {
        if !self.dirty {
            return None;
        }
        self.dirty = false;
        self.end_batch();
        if let Err(e) = self.flush() {
            // The handle reports it, so the batch fails as a whole.
            return Some(SyncHandle::new(move || Err(e_into_io(e))));
        }
        let mut handles: Vec<SyncHandle> = Vec::new();
        for id in std::mem::take(&mut self.touched) {
            match self.dir.sync_handle(&seg_name(id), false) {
                Ok(h) => handles.push(h),
                Err(e) => return Some(SyncHandle::new(move || Err(e))),
            }
        }
        let active = self.segs.last().expect("segment").id;
        let created = std::mem::take(&mut self.created);
        // Every segment created since the last handle needs its directory
        // entry synced too.
        for id in created {
            match self.dir.sync_handle(&seg_name(id), true) {
                Ok(h) => handles.push(h),
                Err(e) => return Some(SyncHandle::new(move || Err(e))),
            }
        }
        match self.dir.sync_handle(&seg_name(active), false) {
            Ok(h) => handles.push(h),
            Err(e) => return Some(SyncHandle::new(move || Err(e))),
        }
        // Removals go last, once what justifies them is durable.
        let doomed = std::mem::take(&mut self.doomed);
        if !doomed.is_empty() {
            let dir = self.dir.clone();
            handles.push(SyncHandle::new(move || {
                for id in doomed {
                    dir.remove(&seg_name(id))?;
                }
                Ok(())
            }));
        }
        let mut all = handles.into_iter();
        let first = all.next().expect("active segment handle");
        Some(all.fold(first, SyncHandle::and))
    }

    fn delete_all(&mut self) -> Result<()> {
        self.forget_reads();
        self.pending.clear();
        self.segs.clear();
        self.dir.remove_all()?;
        Ok(())
    }

    fn next_as_of(&self, start: u64, index: u64) -> Result<Option<StoredMsg>> {
        let live = self.next_matching(start, &Filter::all())?;
        let Some(marks) = &self.marks else {
            return Ok(live);
        };
        let before = live.as_ref().map_or(u64::MAX, |m| m.seq);
        let removed = marks
            .removed
            .range(start..before)
            .find(|(_, r)| r.at > index);
        let Some((&seq, &r)) = removed else {
            return Ok(live);
        };
        self.note_damage(self.read_removed(seq, r)).map(Some)
    }

    fn applying(&mut self, index: u64) {
        if let Some(marks) = &mut self.marks {
            debug_assert!(index >= marks.index, "log indexes only grow");
            marks.index = index;
        }
    }

    fn mark(&mut self, index: u64) -> Result<()> {
        let Some(marks) = &mut self.marks else {
            return Ok(());
        };
        marks.index = marks.index.max(index);
        assert!(
            index > marks.last,
            "marks only grow: {index} after {}",
            marks.last
        );
        marks.last = index;
        self.append(|b| record::encode_marker(b, Kind::Mark, index, 0))?;
        Ok(())
    }

    fn release(&mut self, index: u64) -> Result<()> {
        let Some(marks) = &mut self.marks else {
            return Ok(());
        };
        debug_assert!(index <= marks.last, "released past the last mark");
        let (ready, held): (Vec<Held>, Vec<Held>) = std::mem::take(&mut marks.held)
            .into_iter()
            .partition(|h| h.after < index);
        marks.held = held;
        marks.removed.retain(|_, r| r.after >= index);
        // Erasures before unlinks: an erased record in a segment that
        // goes anyway needs no overwrite.
        let (erase, unlink): (Vec<Held>, Vec<Held>) = ready
            .into_iter()
            .partition(|h| matches!(h.step, Step::Erase { .. }));
        for h in erase.into_iter().chain(unlink) {
            self.take_step(h.step)?;
        }
        Ok(())
    }
}

/// The record that replaces an erased message's: the same length, its
/// subject, headers and payload overwritten.
fn erased_record(r: &record::Record<'_>) -> Vec<u8> {
    let mut blank = Vec::new();
    let zeros = vec![0u8; r.payload.len()];
    let header_zeros = r.headers.map(|h| vec![0u8; h.len()]);
    let subject = "x".repeat(r.subject.len());
    record::encode_msg(
        &mut blank,
        Kind::Erased,
        r.seq,
        r.ts,
        &subject,
        header_zeros.as_deref(),
        &zeros,
    );
    blank
}

fn e_into_io(e: StoreError) -> std::io::Error {
    match e {
        StoreError::Io(e) => e,
        other => std::io::Error::other(other.to_string()),
    }
}
