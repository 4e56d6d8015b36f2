//! One Raft group's durable log: entries, hard state, conf state and the
//! latest snapshot, kept in memory for raft-rs (this type is its
//! `Storage`) and written to a checksummed journal (the store crate's
//! record format, through the `Dir` seam, so the simulator can crash it,
//! tear it and flip its bits).
//!
//! Durability is the caller's to finish: writes are queued in the journal
//! and become durable when the handle from [`LogStore::sync_handle`] has
//! run. Raft must not send a vote or an append acknowledgement before
//! that (raft-rs's `persisted_messages`).
//!
//! A damaged log (a record failing its checksum, or entries out of order)
//! is kept only up to the damage, and the replica is marked damaged,
//! durably: its term and vote may have been in what was lost, so it must
//! not vote or campaign until it has caught up from a leader. That keeps
//! one bad disk from electing a leader without committed entries (the
//! corrupted-minority loss Jepsen found in NATS).

use std::collections::VecDeque;
use std::sync::Arc;

use bytes::Bytes;
use protobuf::Message as _;
use raft::prelude::{ConfState, Entry, HardState, Snapshot, SnapshotMetadata};
use raft::{GetEntriesContext, RaftState, Storage, StorageError};
use store::{Dir, Journal, RewriteJob, Rewritten, Swap, SyncHandle};

/// A snapshot's data is written in pieces of at most this many bytes: a
/// journal record is believed only up to 128 MiB (`store::MAX_ENTRY`),
/// and a stream can be larger. Every snapshot is written this way, so
/// every test and simulation run reads pieces back; this crate's own
/// tests use small pieces to have many.
const SNAPSHOT_PIECE: usize = if cfg!(test) { 1000 } else { 16 << 20 };

/// A compaction's snapshot up to this size is journaled at once, on the
/// caller's thread: a file stream's state, which holds no messages. A
/// larger one (a memory stream's, carrying its messages) is made durable
/// by the journal's rewrite, written off that thread.
pub const SNAPSHOT_INLINE: usize = if cfg!(test) { 3000 } else { 1 << 20 };

/// What a journal record holds: the first payload byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum Tag {
    Entry = 1,
    HardState = 2,
    ConfState = 3,
    /// Replaces everything before it: snapshot metadata and data, in one
    /// record. Read for logs written before [`Tag::SnapshotMeta`].
    Snapshot = 4,
    /// The log was found damaged; the replica must not vote.
    Damaged = 5,
    /// Caught up again after damage.
    Repaired = 6,
    /// A piece of the data of the snapshot that follows.
    SnapshotPiece = 7,
    /// Replaces everything before it: the data's length (u64, little
    /// endian), then the snapshot without its data, which is the pieces
    /// right before this record.
    SnapshotMeta = 8,
}

/// What opening a log found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Recovery {
    /// Records that failed their checksum (or could not be decoded).
    pub corrupt: usize,
    /// A cut-off last record was dropped (an unfinished write).
    pub torn: bool,
    /// The replica is (still) damaged and must not vote.
    pub damaged: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("raft log storage: {0}")]
    Store(#[from] store::StoreError),
}

pub struct LogStore {
    journal: Journal,
    hard: HardState,
    conf: ConfState,
    /// The snapshot everything before `entries` was compacted into.
    snap: Snapshot,
    /// Consecutive entries from `snap.index + 1`. A deque, so compaction
    /// drops its front in place and the capacity stays for the entries
    /// that follow; a `Vec` split at each compaction grew again by
    /// doubling, copying every entry it held (perf: a seventh of an R3
    /// replica's page faults).
    entries: VecDeque<Entry>,
    damaged: bool,
    /// Journal bytes at the last rewrite, to decide when to compact it.
    rewritten_at: u64,
    /// The snapshot a reopen would find if everything written so far
    /// were synced: the last one journaled (by a compaction, an install
    /// or a rewrite swapped in). It lags `snap` while a large snapshot's
    /// rewrite is written; what a state machine keeps for a restart is
    /// kept for this one once synced (`Engine::durable_snapshot_index`).
    journaled: u64,
    /// The snapshot's index in the rewrite in flight.
    rewriting: u64,
    /// raft-rs asked for a snapshot this log could not give (too old, or
    /// from before the receiver was a member): the owner should make one.
    snapshot_wanted: std::cell::Cell<bool>,
    /// While opening: the pieces of the snapshot whose metadata is next.
    pieces: Vec<u8>,
}

/// A snapshot as journal records: its data in pieces, then its metadata.
/// The pieces share the snapshot's buffer.
fn snapshot_records(s: &Snapshot) -> Vec<Vec<Bytes>> {
    let data = s.data.clone();
    let mut records: Vec<Vec<Bytes>> = (0..data.len())
        .step_by(SNAPSHOT_PIECE)
        .map(|at| {
            let end = (at + SNAPSHOT_PIECE).min(data.len());
            vec![
                Bytes::from_static(&[Tag::SnapshotPiece as u8]),
                data.slice(at..end),
            ]
        })
        .collect();
    let mut meta = Snapshot::default();
    meta.set_metadata(s.get_metadata().clone());
    let mut body = Vec::with_capacity(9 + meta.compute_size() as usize);
    body.push(Tag::SnapshotMeta as u8);
    body.extend_from_slice(&(data.len() as u64).to_le_bytes());
    meta.write_to_vec(&mut body)
        .expect("snapshot metadata encodes");
    records.push(vec![Bytes::from(body)]);
    records
}

impl LogStore {
    /// Opens (recovering) or creates the log `name` in `dir`.
    pub fn open(dir: Arc<dyn Dir>, name: &str) -> Result<(LogStore, Recovery), LogError> {
        let (journal, replay) = Journal::open(dir, name)?;
        let mut log = LogStore {
            journal,
            hard: HardState::default(),
            conf: ConfState::default(),
            snap: Snapshot::default(),
            entries: VecDeque::new(),
            damaged: false,
            rewritten_at: 0,
            journaled: 0,
            rewriting: 0,
            snapshot_wanted: std::cell::Cell::new(false),
            pieces: Vec::new(),
        };
        let mut rec = Recovery {
            corrupt: replay.damaged,
            torn: replay.torn,
            damaged: false,
        };
        let mut broken = replay.damaged > 0;
        for raw in &replay.entries {
            if broken {
                // Nothing after damage is trusted: order matters in a log.
                break;
            }
            if !log.replay(raw) {
                rec.corrupt += 1;
                broken = true;
            }
        }
        // Pieces with no metadata after them: a snapshot install cut off
        // by a crash, never synced, so never acknowledged. They go before
        // anything is appended after them, which would read as damage.
        let cut_off = !std::mem::take(&mut log.pieces).is_empty();
        if broken && !log.damaged {
            log.damaged = true;
            // Durably, before anything else is written: a crash before
            // repair must find the replica still barred from voting.
            log.rewrite()?;
        } else if cut_off {
            log.rewrite()?;
        }
        // A commit index past the log (its tail lost to damage) would make
        // raft-rs refuse the log; what is not here is not committed here.
        if log.hard.commit > log.last() {
            log.hard.commit = log.last();
        }
        rec.damaged = log.damaged;
        log.rewritten_at = log.journal.len();
        log.journaled = log.snap.get_metadata().index;
        Ok((log, rec))
    }

    /// Applies one journal record; false if it makes no sense.
    fn replay(&mut self, raw: &[u8]) -> bool {
        let Some((&tag, body)) = raw.split_first() else {
            return false;
        };
        if tag == Tag::SnapshotPiece as u8 {
            self.pieces.extend_from_slice(body);
            return true;
        }
        if tag == Tag::SnapshotMeta as u8 {
            let pieces = std::mem::take(&mut self.pieces);
            let Some((len, meta)) = body.split_first_chunk::<8>() else {
                return false;
            };
            if u64::from_le_bytes(*len) != pieces.len() as u64 {
                return false;
            }
            return match Snapshot::parse_from_bytes(meta) {
                Ok(mut s) => {
                    s.set_data(pieces.into());
                    self.install(s);
                    true
                }
                Err(_) => false,
            };
        }
        if !self.pieces.is_empty() {
            // Pieces are written right before their metadata.
            return false;
        }
        match tag {
            t if t == Tag::Entry as u8 => match Entry::parse_from_bytes(body) {
                Ok(e) => self.put(e),
                Err(_) => false,
            },
            t if t == Tag::HardState as u8 => match HardState::parse_from_bytes(body) {
                Ok(h) => {
                    self.hard = h;
                    true
                }
                Err(_) => false,
            },
            t if t == Tag::ConfState as u8 => match ConfState::parse_from_bytes(body) {
                Ok(c) => {
                    self.conf = c;
                    true
                }
                Err(_) => false,
            },
            t if t == Tag::Snapshot as u8 => match Snapshot::parse_from_bytes(body) {
                Ok(s) => {
                    self.install(s);
                    true
                }
                Err(_) => false,
            },
            t if t == Tag::Damaged as u8 => {
                self.damaged = true;
                true
            }
            t if t == Tag::Repaired as u8 => {
                self.damaged = false;
                true
            }
            _ => false,
        }
    }

    /// Puts an entry in memory, replacing any at or after its index.
    /// False if it would leave a gap.
    fn put(&mut self, e: Entry) -> bool {
        let first = self.snap.get_metadata().index + 1;
        if e.index < first {
            // Already compacted into the snapshot.
            return true;
        }
        let at = (e.index - first) as usize;
        if at > self.entries.len() {
            return false;
        }
        self.entries.truncate(at);
        self.entries.push_back(e);
        true
    }

    fn install(&mut self, s: Snapshot) {
        let meta = s.get_metadata();
        let (index, term) = (meta.index, meta.term);
        // Entries the snapshot covers go; later ones stay only if they
        // agree with it.
        match self
            .entries
            .iter()
            .position(|e| e.index == index && e.term == term)
        {
            Some(i) => drop(self.entries.drain(..=i)),
            None => self.entries.clear(),
        }
        self.conf = meta.get_conf_state().clone();
        if self.hard.commit < index {
            self.hard.commit = index;
        }
        self.snap = s;
    }

    /// Journals one record: its tag, then its body, as one entry written
    /// without joining them first.
    fn record(&mut self, tag: Tag, body: &[u8]) {
        self.journal.append_parts(&[&[tag as u8], body]);
    }

    fn record_snapshot(&mut self, s: &Snapshot) {
        for parts in snapshot_records(s) {
            self.journal.append_parts(&parts);
        }
    }

    /// Appends entries from raft-rs's `Ready`, replacing any conflicting
    /// suffix.
    ///
    /// # Panics
    /// If the entries would leave a gap: raft-rs never hands out such a
    /// batch, so it is a bug, not input to tolerate.
    pub fn append(&mut self, ents: &[Entry]) {
        for e in ents {
            let bytes = e.write_to_bytes().expect("entries encode");
            assert!(
                self.put(e.clone()),
                "raft log gap: entry {} after {}",
                e.index,
                self.last()
            );
            self.record(Tag::Entry, &bytes);
        }
    }

    /// A new term or vote is durable before raft-rs acts on it. A commit
    /// index alone is not synced (etcd's `MustSync` rule): a replica that
    /// loses it in a crash learns it again from the leader, and it only
    /// ever covers entries written, in order, before it. It saved an fsync
    /// per commit advance, about half of a busy replica's.
    pub fn set_hard_state(&mut self, hs: &HardState) {
        if *hs == self.hard {
            return;
        }
        let must_sync = hs.term != self.hard.term || hs.vote != self.hard.vote;
        self.hard = hs.clone();
        let bytes = hs.write_to_bytes().expect("hard state encodes");
        match must_sync {
            true => self.record(Tag::HardState, &bytes),
            false => self
                .journal
                .append_parts_unsynced(&[&[Tag::HardState as u8][..], &bytes]),
        }
    }

    /// Records a commit index learnt from raft-rs's `LightReady`.
    pub fn set_commit(&mut self, commit: u64) {
        if commit > self.hard.commit {
            let mut hs = self.hard.clone();
            hs.commit = commit;
            self.set_hard_state(&hs);
        }
    }

    pub fn set_conf_state(&mut self, cs: &ConfState) {
        self.conf = cs.clone();
        let bytes = cs.write_to_bytes().expect("conf state encodes");
        self.record(Tag::ConfState, &bytes);
    }

    /// Installs a snapshot received from the leader (raft-rs's `Ready`).
    pub fn apply_snapshot(&mut self, s: Snapshot) {
        self.record_snapshot(&s);
        self.journaled = s.get_metadata().index;
        self.install(s);
    }

    /// Starts a new group's log from a snapshot at index 1, term 1 that
    /// holds the initial membership. Real entries start at 2, so a server
    /// added later receives that snapshot first and learns who the group
    /// was before the entries that changed it.
    pub fn bootstrap(&mut self, voters: &[u64]) {
        let mut s = Snapshot::default();
        s.set_metadata(snapshot_meta(
            1,
            1,
            ConfState::from((voters.to_vec(), vec![])),
        ));
        self.apply_snapshot(s);
        self.set_hard_state(&HardState {
            term: 1,
            commit: 1,
            ..Default::default()
        });
    }

    /// Compacts the log behind `index`, whose state machine snapshot is
    /// `data`. A small snapshot ([`SNAPSHOT_INLINE`]) is journaled here,
    /// so a restart opens at it once the next sync ran; the journal is
    /// rewritten when the part that is now dead outweighs what is live.
    /// A large one is journaled only by a rewrite, begun now: returns the
    /// rewrite to run off this thread (its bulk is the snapshot, as large
    /// as the stream) and hand back to [`LogStore::rewritten`]. Until a
    /// snapshot is journaled a restart opens at the one before, and
    /// [`LogStore::journaled_snapshot_index`] says which.
    ///
    /// # Panics
    /// If `index` is past the commit index: only applied entries may be
    /// compacted.
    pub fn compact(&mut self, index: u64, data: Vec<u8>) -> Option<RewriteJob> {
        assert!(
            index <= self.hard.commit,
            "compact to {index} beyond commit {}",
            self.hard.commit
        );
        if index <= self.snap.get_metadata().index {
            return None;
        }
        let term = self
            .term_of(index)
            .expect("committed entries are in the log");
        let inline = data.len() <= SNAPSHOT_INLINE;
        let mut s = Snapshot::default();
        s.set_data(data.into());
        let meta = s.mut_metadata();
        meta.index = index;
        meta.term = term;
        meta.set_conf_state(self.conf.clone());
        if inline {
            self.record_snapshot(&s);
            self.journaled = index;
        }
        self.install(s);
        if !inline || self.journal.len() > 2 * self.rewritten_at + 64 * 1024 {
            let job = self.journal.begin_rewrite(self.live_records());
            if job.is_some() {
                self.rewriting = index;
            }
            return job;
        }
        None
    }

    /// The index of the snapshot a reopen would find, once what was
    /// written so far is synced (see [`LogStore::compact`]).
    pub fn journaled_snapshot_index(&self) -> u64 {
        debug_assert!(self.journaled <= self.snap.get_metadata().index);
        self.journaled
    }

    /// Swaps in a rewrite [`LogStore::compact`] asked for, or asks for one
    /// more job first (`store::Journal::finish_rewrite`). On an error the
    /// journal goes on as it was (and is rewritten at a later compaction).
    pub fn rewritten(&mut self, done: Rewritten) -> Result<Swap, LogError> {
        let swap = self.journal.finish_rewrite(done)?;
        if matches!(swap, Swap::Done(_)) {
            self.rewritten_at = self.journal.len();
            self.journaled = self.journaled.max(self.rewriting);
        }
        Ok(swap)
    }

    /// The live state as journal records, each as pieces end to end:
    /// what a rewrite replaces the journal with.
    fn live_records(&self) -> Vec<Vec<Bytes>> {
        let record = |tag: Tag, m: &dyn protobuf::Message| {
            let mut v = Vec::with_capacity(1 + m.compute_size() as usize);
            v.push(tag as u8);
            m.write_to_vec(&mut v).expect("encodes");
            vec![Bytes::from(v)]
        };
        let mut records = Vec::new();
        if self.snap.get_metadata().index > 0 {
            records = snapshot_records(&self.snap);
        }
        records.push(record(Tag::ConfState, &self.conf));
        records.push(record(Tag::HardState, &self.hard));
        for e in &self.entries {
            records.push(record(Tag::Entry, e));
        }
        if self.damaged {
            records.push(vec![Bytes::from_static(&[Tag::Damaged as u8])]);
        }
        records
    }

    /// Replaces the journal with the live state, atomically and durably,
    /// on this thread (opening a damaged log: nothing else is waiting).
    fn rewrite(&mut self) -> Result<(), LogError> {
        let raws: Vec<Vec<u8>> = self.live_records().iter().map(|r| r.concat()).collect();
        let refs: Vec<&[u8]> = raws.iter().map(Vec::as_slice).collect();
        self.journal.rewrite(&refs)?;
        self.rewritten_at = self.journal.len();
        self.journaled = self.snap.get_metadata().index;
        Ok(())
    }

    /// Replaces the journal with the live state (every entry, the hard
    /// state, the snapshot), durably, on this thread: after a sync of the
    /// journal failed, this makes what it holds durable without trusting
    /// the failed file. A compaction rewrite in flight is abandoned.
    pub fn rewrite_durably(&mut self) -> Result<(), LogError> {
        self.rewrite()
    }

    /// Writes what was queued; the handle makes it durable.
    pub fn sync_handle(&mut self) -> Result<Option<SyncHandle>, LogError> {
        Ok(self.journal.sync_handle()?)
    }

    /// Whether this replica's log was damaged and it has not caught up
    /// since: it must not vote or campaign.
    pub fn is_damaged(&self) -> bool {
        self.damaged
    }

    /// The replica has caught up from a leader: it may vote again.
    pub fn mark_repaired(&mut self) {
        if self.damaged {
            self.damaged = false;
            self.record(Tag::Repaired, &[]);
        }
    }

    pub fn hard_state(&self) -> &HardState {
        &self.hard
    }

    pub fn conf_state(&self) -> &ConfState {
        &self.conf
    }

    /// Asks the owner for a snapshot as of now (one it handed over could
    /// not be taken), as raft-rs does when a follower needs a newer one.
    pub fn want_snapshot(&self) {
        self.snapshot_wanted.set(true);
    }

    /// Whether raft-rs wanted a newer snapshot than this log has; reading
    /// it clears it.
    pub fn take_snapshot_wanted(&self) -> bool {
        self.snapshot_wanted.replace(false)
    }

    /// The latest snapshot (metadata and state machine data).
    pub fn latest_snapshot(&self) -> &Snapshot {
        &self.snap
    }

    fn first(&self) -> u64 {
        self.snap.get_metadata().index + 1
    }

    fn last(&self) -> u64 {
        self.snap.get_metadata().index + self.entries.len() as u64
    }

    /// The term of entry `idx`, if this log holds it (or its snapshot
    /// ends there).
    pub fn term_of(&self, idx: u64) -> Option<u64> {
        let meta = self.snap.get_metadata();
        if idx == meta.index {
            return Some(meta.term);
        }
        if idx < self.first() || idx > self.last() {
            return None;
        }
        Some(self.entries[(idx - self.first()) as usize].term)
    }
}

impl Storage for LogStore {
    fn initial_state(&self) -> raft::Result<RaftState> {
        Ok(RaftState::new(self.hard.clone(), self.conf.clone()))
    }

    fn entries(
        &self,
        low: u64,
        high: u64,
        max_size: impl Into<Option<u64>>,
        _context: GetEntriesContext,
    ) -> raft::Result<Vec<Entry>> {
        if low < self.first() {
            return Err(raft::Error::Store(StorageError::Compacted));
        }
        if high > self.last() + 1 {
            return Err(raft::Error::Store(StorageError::Unavailable));
        }
        let from = (low - self.first()) as usize;
        let to = (high - self.first()) as usize;
        let mut out: Vec<Entry> = self.entries.range(from..to).cloned().collect();
        raft::util::limit_size(&mut out, max_size.into());
        Ok(out)
    }

    fn term(&self, idx: u64) -> raft::Result<u64> {
        match self.term_of(idx) {
            Some(t) => Ok(t),
            None if idx < self.first() => Err(raft::Error::Store(StorageError::Compacted)),
            None => Err(raft::Error::Store(StorageError::Unavailable)),
        }
    }

    fn first_index(&self) -> raft::Result<u64> {
        Ok(self.first())
    }

    fn last_index(&self) -> raft::Result<u64> {
        Ok(self.last())
    }

    fn snapshot(&self, request_index: u64, to: u64) -> raft::Result<Snapshot> {
        let cs = self.snap.get_metadata().get_conf_state();
        let member = cs.voters.contains(&to) || cs.learners.contains(&to);
        // raft-rs refuses a snapshot that does not name the receiver: one
        // taken before it joined is of no use to it.
        if self.snap.get_metadata().index < request_index || !member {
            self.snapshot_wanted.set(true);
            return Err(raft::Error::Store(
                StorageError::SnapshotTemporarilyUnavailable,
            ));
        }
        Ok(self.snap.clone())
    }
}

/// Metadata of a snapshot, for callers that build one.
pub fn snapshot_meta(index: u64, term: u64, conf: ConfState) -> SnapshotMetadata {
    let mut m = SnapshotMetadata {
        index,
        term,
        ..Default::default()
    };
    m.set_conf_state(conf);
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tagged(tag: Tag, body: &[u8]) -> Vec<u8> {
        let mut raw = Vec::with_capacity(body.len() + 1);
        raw.push(tag as u8);
        raw.extend_from_slice(body);
        raw
    }
    use store::MemDir;

    fn entry(index: u64, term: u64) -> Entry {
        let mut e = Entry {
            index,
            term,
            ..Default::default()
        };
        e.set_data(format!("e{index}").into_bytes().into());
        e
    }

    fn sync(log: &mut LogStore) {
        if let Some(h) = log.sync_handle().unwrap() {
            h.sync().unwrap();
        }
    }

    fn open(dir: &MemDir) -> (LogStore, Recovery) {
        LogStore::open(Arc::new(dir.clone()), "g1.log").unwrap()
    }

    fn hs(term: u64, vote: u64, commit: u64) -> HardState {
        HardState {
            term,
            vote,
            commit,
            ..Default::default()
        }
    }

    #[test]
    fn synced_state_survives_a_crash_and_unsynced_does_not() {
        let dir = MemDir::new();
        let (mut log, rec) = open(&dir);
        assert_eq!(rec, Recovery::default());
        log.append(&[entry(1, 1), entry(2, 1), entry(3, 1)]);
        log.set_hard_state(&hs(1, 2, 2));
        sync(&mut log);
        log.append(&[entry(4, 1)]);
        let _ = log.sync_handle().unwrap(); // written, never synced
        dir.crash(0);
        let (log, rec) = open(&dir);
        assert!(!rec.damaged);
        assert_eq!(log.last_index().unwrap(), 3);
        assert_eq!(log.initial_state().unwrap().hard_state, hs(1, 2, 2));
        assert_eq!(
            log.entries(1, 4, None, GetEntriesContext::empty(false))
                .unwrap()
                .len(),
            3
        );
    }

    /// A commit index alone asks for no fsync, and what a crash loses
    /// of it is only ever an older commit over the same entries.
    #[test]
    fn a_commit_index_alone_is_not_synced() {
        let dir = MemDir::new();
        let (mut log, _) = open(&dir);
        log.append(&[entry(1, 1), entry(2, 1)]);
        log.set_hard_state(&hs(1, 2, 1));
        sync(&mut log);
        log.set_commit(2);
        assert!(log.sync_handle().unwrap().is_none(), "commit alone");
        log.set_hard_state(&hs(2, 0, 2));
        assert!(log.sync_handle().unwrap().is_some(), "a new term");
        dir.crash(0);
        let (log, _) = open(&dir);
        assert_eq!(log.initial_state().unwrap().hard_state, hs(1, 2, 1));
        let mut log = log;
        log.set_commit(2);
        log.append(&[entry(3, 1)]);
        sync(&mut log);
        dir.crash(0);
        let (log, _) = open(&dir);
        assert_eq!(log.initial_state().unwrap().hard_state, hs(1, 2, 2));
        assert_eq!(log.last_index().unwrap(), 3);
    }

    #[test]
    fn a_conflicting_suffix_is_replaced_and_stays_replaced() {
        let dir = MemDir::new();
        let (mut log, _) = open(&dir);
        log.append(&[entry(1, 1), entry(2, 1), entry(3, 1)]);
        log.append(&[entry(2, 2)]);
        sync(&mut log);
        assert_eq!(log.last_index().unwrap(), 2);
        dir.crash(0);
        let (log, _) = open(&dir);
        assert_eq!(log.last_index().unwrap(), 2);
        assert_eq!(log.term(2).unwrap(), 2);
    }

    #[test]
    fn compaction_keeps_terms_and_rewrites_the_journal() {
        let dir = MemDir::new();
        let (mut log, _) = open(&dir);
        log.set_conf_state(&ConfState::from((vec![1, 2, 3], vec![])));
        let ents: Vec<Entry> = (1..=2000).map(|i| entry(i, 1 + i / 1000)).collect();
        log.append(&ents);
        log.set_hard_state(&hs(3, 1, 1500));
        sync(&mut log);
        let before = dir.file_len("g1.log");
        // Several pieces' worth.
        let state: Vec<u8> = (0..3500u32).map(|i| (i % 251) as u8).collect();
        let job = log.compact(1500, state.clone()).expect("enough to rewrite");
        assert_eq!(log.first_index().unwrap(), 1501);
        assert_eq!(log.term(1500).unwrap(), 2);
        assert!(matches!(
            log.term(10),
            Err(raft::Error::Store(StorageError::Compacted))
        ));
        // The log goes on while the rewrite runs.
        log.append(&[entry(2001, 2)]);
        log.set_hard_state(&hs(3, 1, 1800));
        sync(&mut log);
        let done = job.run();
        log.append(&[entry(2002, 2)]);
        assert!(matches!(log.rewritten(done).unwrap(), Swap::Done(_)));
        sync(&mut log);
        assert!(dir.file_len("g1.log") < before, "journal rewritten");
        dir.crash(0);
        let (log, rec) = open(&dir);
        assert!(!rec.damaged);
        assert_eq!(
            (log.first_index().unwrap(), log.last_index().unwrap()),
            (1501, 2002)
        );
        assert_eq!(log.hard_state().commit, 1800);
        assert_eq!(log.snapshot(1500, 2).unwrap().get_data(), &state[..]);
    }

    /// A crash while a large snapshot's rewrite runs finds the journal as
    /// it was, the entries appended meanwhile included, and opens from the
    /// snapshot the journal last held, which is what the log says a
    /// restart opens at until the rewrite is swapped in.
    #[test]
    fn a_crash_during_a_rewrite_recovers_from_the_old_journal() {
        let dir = MemDir::new();
        let (mut log, _) = open(&dir);
        log.set_conf_state(&ConfState::from((vec![1, 2, 3], vec![])));
        let ents: Vec<Entry> = (1..=2000).map(|i| entry(i, 1)).collect();
        log.append(&ents);
        log.set_hard_state(&hs(1, 1, 2000));
        sync(&mut log);
        let large = vec![7; SNAPSHOT_INLINE + 1];
        let job = log.compact(2000, large).expect("a large one is rewritten");
        assert_eq!(log.journaled_snapshot_index(), 0, "not journaled yet");
        log.append(&[entry(2001, 1)]);
        sync(&mut log);
        let _done = job.run();
        dir.crash(0);
        let (log, rec) = open(&dir);
        assert_eq!(rec, Recovery::default());
        assert_eq!(
            (log.first_index().unwrap(), log.last_index().unwrap()),
            (1, 2001)
        );
        assert_eq!(log.journaled_snapshot_index(), 0);
    }

    /// A small snapshot (a file stream's state) is journaled as it is
    /// taken: once synced, a restart opens at it, rewrite or none. A
    /// state machine forgets what it kept for the older one (a file
    /// stream's store marks), so opening there would find nothing.
    #[test]
    fn a_small_snapshot_is_durable_with_the_next_sync() {
        let dir = MemDir::new();
        let (mut log, _) = open(&dir);
        log.set_conf_state(&ConfState::from((vec![1, 2, 3], vec![])));
        log.append(&(1..=20).map(|i| entry(i, 1)).collect::<Vec<_>>());
        log.set_hard_state(&hs(1, 1, 20));
        sync(&mut log);
        assert!(log.compact(15, vec![5; 2500]).is_none(), "no rewrite due");
        assert_eq!(log.journaled_snapshot_index(), 15);
        log.append(&[entry(21, 1)]);
        sync(&mut log);
        dir.crash(0);
        let (log, rec) = open(&dir);
        assert_eq!(rec, Recovery::default());
        assert_eq!(
            (log.first_index().unwrap(), log.last_index().unwrap()),
            (16, 21)
        );
        assert_eq!(log.journaled_snapshot_index(), 15);
        assert_eq!(log.snapshot(15, 2).unwrap().get_data(), &[5; 2500][..]);
    }

    /// Snapshot pieces with no metadata after them (an install cut off)
    /// are dropped; pieces followed by anything else are damage.
    #[test]
    fn snapshot_pieces_must_end_in_their_metadata() {
        let dir = MemDir::new();
        let (mut log, _) = open(&dir);
        log.append(&[entry(1, 1)]);
        log.journal
            .append(&tagged(Tag::SnapshotPiece, b"half a snapshot"));
        sync(&mut log);
        let (mut log, rec) = open(&dir);
        assert_eq!(rec, Recovery::default());
        assert_eq!(log.last_index().unwrap(), 1);
        // Gone from the file too: what is appended next is not after them.
        log.append(&[entry(2, 1)]);
        sync(&mut log);
        let (mut log, rec) = open(&dir);
        assert_eq!(rec, Recovery::default());
        assert_eq!(log.last_index().unwrap(), 2);
        log.journal.append(&tagged(Tag::SnapshotPiece, b"stray"));
        log.append(&[entry(3, 1)]);
        sync(&mut log);
        let (log, rec) = open(&dir);
        assert!(rec.damaged, "{rec:?}");
        assert_eq!(log.last_index().unwrap(), 2);
    }

    /// A flipped bit cuts the log at the damage and bars the replica from
    /// voting until it is repaired, across restarts.
    #[test]
    fn damage_keeps_the_prefix_and_bars_voting_durably() {
        let dir = MemDir::new();
        let (mut log, _) = open(&dir);
        for i in 1..=10 {
            log.append(&[entry(i, 1)]);
        }
        log.set_hard_state(&hs(1, 3, 10));
        sync(&mut log);
        // Damage entry 5's record.
        let len = dir.file_len("g1.log");
        dir.flip_bit("g1.log", len * 4 / 10, 3);
        let (mut log, rec) = open(&dir);
        assert!(rec.damaged && rec.corrupt >= 1, "{rec:?}");
        assert!(log.last_index().unwrap() < 10);
        assert!(log.is_damaged());
        // Still damaged after another crash.
        dir.crash(0);
        let (mut log2, rec) = open(&dir);
        assert!(rec.damaged && log2.is_damaged());
        log2.mark_repaired();
        sync(&mut log2);
        dir.crash(0);
        let (_, rec) = open(&dir);
        assert!(!rec.damaged);
        log.mark_repaired();
    }

    #[test]
    fn a_snapshot_from_the_leader_replaces_the_log() {
        let dir = MemDir::new();
        let (mut log, _) = open(&dir);
        log.append(&[entry(1, 1), entry(2, 1)]);
        let mut s = Snapshot::default();
        s.set_data(b"leader state".to_vec().into());
        s.set_metadata(snapshot_meta(50, 4, ConfState::default()));
        log.apply_snapshot(s);
        log.append(&[entry(51, 4)]);
        sync(&mut log);
        dir.crash(0);
        let (log, _) = open(&dir);
        assert_eq!(
            (log.first_index().unwrap(), log.last_index().unwrap()),
            (51, 51)
        );
        assert_eq!(log.term(50).unwrap(), 4);
        assert_eq!(log.hard_state().commit, 50);
    }
}
