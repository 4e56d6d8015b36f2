//! A small append-only log of checksummed entries, compacted by
//! rewriting: how a consumer's state survives restarts (a snapshot entry
//! followed by changes), and a Raft group's log.
//!
//! A rewrite can be done in two halves, so that its bulk (a Raft log's
//! snapshot is as large as its stream) is written and synced off the
//! thread that appends: [`Journal::begin_rewrite`] there,
//! [`RewriteJob::run`] anywhere, [`Journal::finish_rewrite`] back there.
//! The old file stays the journal until the swap: appends go on to it
//! meanwhile and are kept, and the swap copies them after the new file's
//! base, syncs, and renames it over. A crash at any point leaves one
//! whole file under the journal's name, and every entry made durable
//! before is in it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;

use crate::dir::Dir;
use crate::record::{self, Kind};
use crate::sync::SyncHandle;
use crate::Result;

/// The largest entry a journal takes: a record is believed on read only
/// up to [`record::MAX_RECORD`], so a caller with more (a snapshot) splits
/// it.
pub const MAX_ENTRY: usize = record::MAX_RECORD - record::HEADER - record::MSG_PREFIX;

/// How much of a rewrite's file is written before it is synced.
const REWRITE_STEP: usize = 4 << 20;

/// The most appended during a rewrite that its swap writes and syncs
/// itself, and how many more jobs it asks for before it does anyway
/// (appends that outrun the disk would otherwise keep it going).
const SWAP_TAIL: usize = 256 << 10;
const SWAP_ROUNDS: u32 = 4;

/// In the name of a rewrite's file, between the journal's name and the
/// rewrite's id.
const REWRITE_MARK: &str = ".rewrite-";

/// Ends a batch of entries about to be synced with a `Synced` record
/// (`next` is the count of entries before it). A write torn by a crash is
/// never followed by one, so a damaged last entry before it is counted as
/// damage ([`Replay::damaged`]) instead of dropped as torn: a Raft log
/// that lost an entry it acknowledged must not vote as if it had never
/// had it.
fn end_batch(buf: &mut Vec<u8>, next: u64) {
    record::encode_marker(buf, Kind::Synced, next, 0);
}

pub struct Journal {
    dir: Arc<dyn Dir>,
    name: String,
    len: u64,
    next: u64,
    pending: Vec<u8>,
    /// Something in `pending` must be durable before its writer goes on
    /// (see [`Journal::append_unsynced`]).
    must_sync: bool,
    /// `pending` ends in a `Synced` record (see [`end_batch`]).
    batch_ended: bool,
    created: bool,
    /// Bytes of the file made room for (`Dir::reserve`).
    reserved: u64,
    /// A rewrite begun and not finished.
    rewriting: Option<Rewriting>,
}

struct Rewriting {
    id: u64,
    /// Every entry appended since the last of its jobs began: the swap
    /// copies them after what the jobs wrote.
    tail: Vec<Vec<u8>>,
    /// Jobs that copied such entries (see [`Journal::finish_rewrite`]).
    rounds: u32,
}

/// What [`Journal::finish_rewrite`] did.
#[must_use = "a rewrite that is not done keeps every later entry until it is"]
pub enum Swap {
    /// Swapped in: the old file's storage, to drop where freeing its
    /// blocks costs nothing (on ext4 about as long as writing them took).
    Done(Replaced),
    /// Much was appended while the job ran: this job writes and syncs it
    /// after the new base, off the appending thread, and its result is
    /// finished again.
    More(RewriteJob),
    /// Not this journal's current rewrite: discarded.
    Dropped,
}

/// The bulk of a rewrite: a journal's new base, written and synced to a
/// temporary file. It touches nothing the journal is using, so it can run
/// on any thread while the journal goes on.
#[must_use = "a rewrite begun keeps every later entry until it is finished"]
pub struct RewriteJob {
    dir: Arc<dyn Dir>,
    tmp: String,
    id: u64,
    /// Each entry as pieces end to end.
    entries: Vec<Vec<Bytes>>,
    /// Bytes and entries already in the file, after which these go (none
    /// for the first job of a rewrite, which starts the file).
    start: (u64, u64),
}

/// What running a [`RewriteJob`] did, for [`Journal::finish_rewrite`].
pub struct Rewritten {
    id: u64,
    dir: Arc<dyn Dir>,
    tmp: String,
    /// Bytes and entries in the temporary file.
    result: Result<(u64, u64)>,
}

impl RewriteJob {
    /// Writes the new base and syncs it; on an error, removes what it
    /// wrote (the old file is untouched and stays the journal).
    pub fn run(self) -> Rewritten {
        let result = self.write();
        if result.is_err() {
            let _ = self.dir.remove(&self.tmp);
        }
        Rewritten {
            id: self.id,
            dir: self.dir,
            tmp: self.tmp,
            result,
        }
    }

    /// Written and synced [`REWRITE_STEP`] at a time, so the disk takes
    /// the syncs of the logs beside it between steps rather than behind
    /// the whole file, and the encoded file is never all in memory.
    fn write(&self) -> Result<(u64, u64)> {
        let (mut at, count) = self.start;
        if at == 0 {
            self.dir.remove(&self.tmp)?;
        }
        let mut buf = Vec::new();
        let mut flush = |buf: &mut Vec<u8>| -> Result<()> {
            for step in buf.chunks(REWRITE_STEP) {
                self.dir.write_at(&self.tmp, at, step)?;
                at += step.len() as u64;
                self.dir.sync_handle(&self.tmp, false)?.sync()?;
            }
            buf.clear();
            Ok(())
        };
        for (i, parts) in self.entries.iter().enumerate() {
            record::encode_parts(&mut buf, Kind::Msg, count + i as u64, 0, parts);
            if buf.len() >= REWRITE_STEP {
                flush(&mut buf)?;
            }
        }
        let count = count + self.entries.len() as u64;
        end_batch(&mut buf, count);
        flush(&mut buf)?;
        Ok((at, count))
    }
}

impl Rewritten {
    /// Drops a rewrite whose journal is gone, with its file (its own).
    pub fn discard(self) {
        let _ = self.dir.remove(&self.tmp);
    }
}

/// What keeps a replaced file's storage allocated: dropping it frees the
/// blocks, which on ext4 costs about as long as writing them took, so a
/// caller with latency to keep drops it on another thread.
pub type Replaced = Box<dyn Send>;

/// What a journal held when opened.
pub struct Replay {
    pub entries: Vec<Vec<u8>>,
    /// Entries that failed their checksum and were skipped.
    pub damaged: usize,
    /// Whether a cut-off last entry was dropped.
    pub torn: bool,
}

impl Journal {
    /// Opens `name` in `dir`, returning its valid entries in order. A
    /// cut-off last entry is dropped.
    pub fn open(dir: Arc<dyn Dir>, name: &str) -> Result<(Journal, Replay)> {
        let data = match dir.read_all(name) {
            Ok(d) => d,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(e.into()),
        };
        let scan = record::scan(&data);
        let entries: Vec<Vec<u8>> = scan
            .records
            .iter()
            .filter(|(_, r)| r.kind == Kind::Msg)
            .map(|(_, r)| r.payload.to_vec())
            .collect();
        let valid = scan.torn_at.unwrap_or(data.len() as u64);
        if valid < data.len() as u64 {
            dir.truncate(name, valid)?;
        }
        let j = Journal {
            next: entries.len() as u64,
            dir,
            name: name.to_string(),
            len: valid,
            pending: Vec::new(),
            must_sync: false,
            batch_ended: false,
            // Nothing valid yet: the entry's creation may never have
            // been synced, so the first sync covers the directory too.
            created: valid == 0,
            reserved: valid,
            rewriting: None,
        };
        Ok((
            j,
            Replay {
                entries,
                damaged: scan.corrupt.len(),
                // Zeros after the last entry are reserved space.
                torn: valid < data.len() as u64 && !scan.zero_tail,
            },
        ))
    }

    pub fn append(&mut self, entry: &[u8]) {
        self.append_parts(&[entry]);
    }

    /// Appends one entry given as pieces end to end (a tag and a body,
    /// say), written as one record without joining them first.
    pub fn append_parts<P: AsRef<[u8]>>(&mut self, parts: &[P]) {
        self.append_parts_unsynced(parts);
        self.must_sync = true;
    }

    /// Appends an entry whose loss in a crash is harmless (a later
    /// state that can be learnt again, like a Raft commit index): it is
    /// written with the next [`Journal::sync_handle`] but asks for no sync
    /// of its own, and becomes durable with the next entry that does.
    /// Entries stay in order either way, so a crash keeps a prefix.
    ///
    /// # Panics
    /// If `entry` is over [`MAX_ENTRY`]: it could be written but never
    /// read back, so a caller that lets one through has a bug.
    pub fn append_unsynced(&mut self, entry: &[u8]) {
        self.append_parts_unsynced(&[entry]);
    }

    /// [`Journal::append_unsynced`] for an entry in pieces.
    pub fn append_parts_unsynced<P: AsRef<[u8]>>(&mut self, parts: &[P]) {
        let len: usize = parts.iter().map(|p| p.as_ref().len()).sum();
        assert!(
            len <= MAX_ENTRY,
            "journal entry of {len} bytes is over {MAX_ENTRY}"
        );
        record::encode_parts(&mut self.pending, Kind::Msg, self.next, 0, parts);
        self.next += 1;
        self.batch_ended = false;
        if let Some(r) = self.rewriting.as_mut() {
            r.tail
                .push(parts.iter().flat_map(|p| p.as_ref()).copied().collect());
        }
    }

    /// Bytes in the journal, written or not.
    pub fn len(&self) -> u64 {
        self.len + self.pending.len() as u64
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Writes what was appended and returns a handle that makes it
    /// durable, or `None` if nothing was appended that needs a sync.
    ///
    /// On an error nothing is forgotten: what was not written stays
    /// pending, and a sync still owed is asked for again by the next call,
    /// even with nothing new appended (a caller that records a state only
    /// when it changes appends nothing when it retries).
    pub fn sync_handle(&mut self) -> Result<Option<SyncHandle>> {
        if self.must_sync && !self.batch_ended {
            end_batch(&mut self.pending, self.next);
            self.batch_ended = true;
        }
        if !self.pending.is_empty() {
            let end = self.len + self.pending.len() as u64;
            self.reserved = self.dir.reserve_written(&self.name, end, self.reserved)?;
            self.dir.write_at(&self.name, self.len, &self.pending)?;
            self.len += self.pending.len() as u64;
            self.pending.clear();
        }
        if !self.must_sync {
            return Ok(None);
        }
        let h = self.dir.sync_handle(&self.name, self.created)?;
        self.must_sync = false;
        self.created = false;
        Ok(Some(h))
    }

    /// Replaces the whole journal with `entries`, durably and atomically.
    /// A rewrite begun and not finished is abandoned.
    pub fn rewrite(&mut self, entries: &[&[u8]]) -> Result<()> {
        let mut buf = Vec::new();
        for (i, e) in entries.iter().enumerate() {
            record::encode_msg(&mut buf, Kind::Msg, i as u64, 0, "", None, e);
        }
        end_batch(&mut buf, entries.len() as u64);
        self.dir.write_atomic(&self.name, &buf)?;
        self.len = buf.len() as u64;
        self.reserved = self.len;
        self.next = entries.len() as u64;
        self.pending.clear();
        self.batch_ended = true;
        self.must_sync = false;
        self.created = false;
        self.rewriting = None;
        Ok(())
    }

    /// Starts replacing the journal with `entries` (each given as pieces
    /// end to end, so a large one is not copied here); `None` while an
    /// earlier rewrite is unfinished. Entries appended from now on are
    /// kept until [`Journal::finish_rewrite`].
    pub fn begin_rewrite(&mut self, entries: Vec<Vec<Bytes>>) -> Option<RewriteJob> {
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        if self.rewriting.is_some() {
            return None;
        }
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        self.rewriting = Some(Rewriting {
            id,
            tail: Vec::new(),
            rounds: 0,
        });
        Some(RewriteJob {
            dir: self.dir.clone(),
            // Its own name: a job abandoned (its journal closed, reopened,
            // or rewritten at once) may still be writing when the next
            // one starts, and is removed by its own discard, never theirs.
            tmp: format!("{}{REWRITE_MARK}{id}", self.name),
            id,
            entries,
            start: (0, 0),
        })
    }

    /// Swaps in the file a [`RewriteJob`] wrote: appends what was appended
    /// since the job began, syncs, renames it over the journal. On an
    /// error (of the job or the swap) the journal goes on in the old file,
    /// unchanged, and may be rewritten again.
    ///
    /// When more than [`SWAP_TAIL`] bytes were appended meanwhile (at
    /// R3 with 8 KiB messages, tens of MB while a large stream's snapshot
    /// is written), writing and syncing them here would stall the caller
    /// for as long: they go to another job instead, and what is appended
    /// while that one runs is finished after it, a few rounds at most.
    ///
    /// The new file's directory entry is made durable by the next sync,
    /// which this asks for; until then a crash finds the old file, which
    /// holds everything that was durable before the swap.
    pub fn finish_rewrite(&mut self, done: Rewritten) -> Result<Swap> {
        let Some(r) = self.rewriting.as_mut().filter(|r| r.id == done.id) else {
            done.discard();
            return Ok(Swap::Dropped);
        };
        let (base_len, base_count) = match done.result {
            Ok(at) => at,
            Err(e) => {
                self.rewriting = None;
                return Err(e);
            }
        };
        let tail_bytes: usize = r.tail.iter().map(Vec::len).sum();
        if tail_bytes > SWAP_TAIL && r.rounds < SWAP_ROUNDS {
            r.rounds += 1;
            let entries = std::mem::take(&mut r.tail)
                .into_iter()
                .map(|e| vec![Bytes::from(e)])
                .collect();
            return Ok(Swap::More(RewriteJob {
                dir: done.dir,
                tmp: done.tmp,
                id: done.id,
                entries,
                start: (base_len, base_count),
            }));
        }
        let tail = self.rewriting.take().expect("found above").tail;
        let mut buf = Vec::new();
        for (i, e) in tail.iter().enumerate() {
            record::encode_msg(&mut buf, Kind::Msg, base_count + i as u64, 0, "", None, e);
        }
        if !buf.is_empty() {
            end_batch(&mut buf, base_count + tail.len() as u64);
        }
        let swap = || -> Result<Replaced> {
            // With nothing appended since, the job's own sync covered it.
            if !buf.is_empty() {
                self.dir.write_at(&done.tmp, base_len, &buf)?;
                self.dir.sync_handle(&done.tmp, false)?.sync()?;
            }
            Ok(self.dir.replace(&done.tmp, &self.name)?)
        };
        let old = match swap() {
            Ok(old) => old,
            Err(e) => {
                let _ = self.dir.remove(&done.tmp);
                return Err(e);
            }
        };
        self.len = base_len + buf.len() as u64;
        self.reserved = self.len;
        self.next = base_count + tail.len() as u64;
        // Everything pending is in the tail, now written and synced, and
        // the file ends in a Synced record (the job's or the tail's).
        self.pending.clear();
        self.batch_ended = true;
        self.must_sync = true;
        self.created = true;
        Ok(Swap::Done(old))
    }

    /// Removes the files of rewrites that never finished (a crash, or a
    /// journal closed with one running), from a directory no rewrite job
    /// is running over.
    pub fn remove_unfinished_rewrites(dir: &dyn Dir) -> Result<usize> {
        let mut removed = 0;
        for name in dir.list()? {
            if name.contains(REWRITE_MARK) {
                dir.remove(&name)?;
                removed += 1;
            }
        }
        Ok(removed)
    }

    pub fn remove(&self) -> Result<()> {
        self.dir.remove(&self.name)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemDir;

    #[test]
    fn append_replay_rewrite_and_crash() {
        let dir = MemDir::new();
        let d: Arc<dyn Dir> = Arc::new(dir.clone());
        let (mut j, r) = Journal::open(d.clone(), "c.log").unwrap();
        assert!(r.entries.is_empty());
        j.append(b"one");
        j.append(b"two");
        j.sync_handle().unwrap().unwrap().sync().unwrap();
        j.append(b"three");
        j.sync_handle().unwrap();
        dir.crash(3);
        let (mut j, r) = Journal::open(d.clone(), "c.log").unwrap();
        assert_eq!(r.entries, vec![b"one".to_vec(), b"two".to_vec()]);
        j.rewrite(&[b"snap"]).unwrap();
        j.append(b"after");
        j.sync_handle().unwrap().unwrap().sync().unwrap();
        dir.crash(0);
        let (_, r) = Journal::open(d, "c.log").unwrap();
        assert_eq!(r.entries, vec![b"snap".to_vec(), b"after".to_vec()]);
    }

    /// A bit flipped anywhere in a synced journal, in its last entry too,
    /// is counted as damage or changes nothing: an entry that was synced
    /// is never dropped as if a crash had torn it. Every copy is damaged
    /// after a rewrite and an append, so each way of writing is covered.
    #[test]
    fn no_synced_entry_is_dropped_as_torn() {
        let dir = MemDir::new();
        let d: Arc<dyn Dir> = Arc::new(dir.clone());
        let (mut j, _) = Journal::open(d.clone(), "c.log").unwrap();
        j.rewrite(&[b"snap"]).unwrap();
        for e in ["one", "two", "three"] {
            j.append(e.as_bytes());
            j.sync_handle().unwrap().unwrap().sync().unwrap();
        }
        let want = entries(&["snap", "one", "two", "three"]);
        assert_eq!(Journal::open(d, "c.log").unwrap().1.entries, want);
        for at in 0..dir.file_len("c.log") {
            let damaged = dir.deep_clone();
            damaged.flip_bit("c.log", at, (at % 8) as u8);
            let (_, r) = Journal::open(Arc::new(damaged), "c.log").unwrap();
            assert!(
                r.entries.iter().all(|e| want.contains(e)),
                "flip at {at}: {:?}",
                r.entries
            );
            assert!(
                r.entries == want || r.damaged > 0,
                "flip at {at}: {:?} read, no damage counted",
                r.entries
            );
        }
    }

    /// A handle that could not be made (the file would not open) leaves
    /// the sync owed: the next call asks for it, though nothing new was
    /// appended, and the entry survives a crash once it has run.
    #[test]
    fn a_failed_handle_leaves_the_sync_owed() {
        let dir = MemDir::new();
        let d: Arc<dyn Dir> = Arc::new(dir.clone());
        let (mut j, _) = Journal::open(d.clone(), "c.log").unwrap();
        j.append(b"vote");
        dir.refuse_handles(1);
        assert!(j.sync_handle().is_err());
        let h = j.sync_handle().unwrap().expect("the sync is still owed");
        h.sync().unwrap();
        assert!(j.sync_handle().unwrap().is_none(), "owed once");
        dir.crash(0);
        let (_, r) = Journal::open(d, "c.log").unwrap();
        assert_eq!(r.entries, vec![b"vote".to_vec()]);
    }

    /// A write that fails (a full disk) keeps the entry pending.
    #[test]
    fn a_failed_write_keeps_the_entry() {
        let dir = MemDir::new();
        let d: Arc<dyn Dir> = Arc::new(dir.clone());
        let (mut j, _) = Journal::open(d.clone(), "c.log").unwrap();
        j.append(b"vote");
        dir.set_space(Some(0));
        assert!(j.sync_handle().is_err());
        dir.set_space(None);
        j.sync_handle().unwrap().unwrap().sync().unwrap();
        dir.crash(0);
        let (_, r) = Journal::open(d, "c.log").unwrap();
        assert_eq!(r.entries, vec![b"vote".to_vec()]);
    }

    fn entries(list: &[&str]) -> Vec<Vec<u8>> {
        list.iter().map(|e| e.as_bytes().to_vec()).collect()
    }

    fn base(list: &[&str]) -> Vec<Vec<Bytes>> {
        list.iter()
            .map(|e| e.as_bytes().chunks(2).map(Bytes::copy_from_slice).collect())
            .collect()
    }

    /// Entries appended while the bulk is written, synced or not, follow
    /// the new base; until the swap a crash finds the old file whole.
    #[test]
    fn a_background_rewrite_keeps_what_was_appended_meanwhile() {
        let dir = MemDir::new();
        let d: Arc<dyn Dir> = Arc::new(dir.clone());
        let (mut j, _) = Journal::open(d.clone(), "c.log").unwrap();
        j.append(b"a");
        j.append(b"b");
        j.sync_handle().unwrap().unwrap().sync().unwrap();
        let job = j.begin_rewrite(base(&["snapshot", "b"])).unwrap();
        assert!(j.begin_rewrite(base(&["x"])).is_none(), "one at a time");
        j.append(b"c");
        j.sync_handle().unwrap().unwrap().sync().unwrap();
        let done = job.run();
        j.append(b"d");
        let crashed = dir.clone();
        let image = Journal::open(d.clone(), "c.log").unwrap().1.entries;
        assert_eq!(
            image,
            entries(&["a", "b", "c"]),
            "the old file until the swap"
        );
        assert!(matches!(j.finish_rewrite(done).unwrap(), Swap::Done(_)));
        assert!(j.rewriting.is_none());
        let h = j
            .sync_handle()
            .unwrap()
            .expect("the swap's entry is owed a sync");
        h.sync().unwrap();
        j.append(b"e");
        j.sync_handle().unwrap().unwrap().sync().unwrap();
        crashed.crash(0);
        let (_, r) = Journal::open(d, "c.log").unwrap();
        assert_eq!(r.entries, entries(&["snapshot", "b", "c", "d", "e"]));
        assert_eq!(dir.names(), ["c.log"], "no file left behind");
    }

    /// Much appended while the bulk was written goes to the new file in
    /// further jobs, not in the swap; everything arrives, in order.
    #[test]
    fn a_long_tail_is_copied_by_further_jobs() {
        let dir = MemDir::new();
        let d: Arc<dyn Dir> = Arc::new(dir.clone());
        let (mut j, _) = Journal::open(d.clone(), "c.log").unwrap();
        let big = |i: u32| format!("{i:08}").repeat(16 << 10).into_bytes();
        j.append(b"a");
        let job = j.begin_rewrite(base(&["snapshot"])).unwrap();
        for i in 0..3 {
            j.append(&big(i));
        }
        j.sync_handle().unwrap().unwrap().sync().unwrap();
        let Swap::More(more) = j.finish_rewrite(job.run()).unwrap() else {
            panic!("384 KiB appended: copied by another job");
        };
        j.append(b"small");
        let done = more.run();
        j.append(b"late");
        assert!(matches!(j.finish_rewrite(done).unwrap(), Swap::Done(_)));
        j.sync_handle().unwrap().unwrap().sync().unwrap();
        dir.crash(0);
        let (_, r) = Journal::open(d, "c.log").unwrap();
        let mut want = vec![b"snapshot".to_vec()];
        want.extend((0..3).map(big));
        want.extend([b"small".to_vec(), b"late".to_vec()]);
        assert_eq!(r.entries, want);
        assert_eq!(dir.names(), ["c.log"]);
    }

    /// Appends that outrun the disk do not keep a rewrite going: after a
    /// few rounds the swap copies what is left itself.
    #[test]
    fn a_rewrite_ends_however_fast_entries_come() {
        let dir = MemDir::new();
        let d: Arc<dyn Dir> = Arc::new(dir.clone());
        let (mut j, _) = Journal::open(d.clone(), "c.log").unwrap();
        let mut job = j.begin_rewrite(base(&["snapshot"])).unwrap();
        let mut rounds = 0;
        loop {
            j.append(&vec![7u8; SWAP_TAIL + 1]);
            match j.finish_rewrite(job.run()).unwrap() {
                Swap::More(next) => job = next,
                Swap::Done(_) => break,
                Swap::Dropped => panic!("its own rewrite"),
            }
            rounds += 1;
        }
        assert_eq!(rounds, SWAP_ROUNDS);
        j.sync_handle().unwrap().unwrap().sync().unwrap();
        dir.crash(0);
        let (_, r) = Journal::open(d, "c.log").unwrap();
        assert_eq!(r.entries.len(), 1 + SWAP_ROUNDS as usize + 1);
    }

    /// A crash after the bulk is written and before the swap leaves the
    /// old file, with every entry that was synced.
    #[test]
    fn a_crash_before_the_swap_keeps_the_old_file() {
        let dir = MemDir::new();
        let d: Arc<dyn Dir> = Arc::new(dir.clone());
        let (mut j, _) = Journal::open(d.clone(), "c.log").unwrap();
        j.append(b"a");
        let job = j.begin_rewrite(base(&["snapshot"])).unwrap();
        j.sync_handle().unwrap().unwrap().sync().unwrap();
        let _done = job.run();
        dir.crash(0);
        let (_, r) = Journal::open(d.clone(), "c.log").unwrap();
        assert_eq!(r.entries, entries(&["a"]));
        assert_eq!(dir.names().len(), 2, "the unfinished rewrite's file");
        assert_eq!(Journal::remove_unfinished_rewrites(&*d).unwrap(), 1);
        assert_eq!(dir.names(), ["c.log"]);
    }

    /// A disk that fills during the bulk or during the swap fails the
    /// rewrite and nothing else: the journal goes on in the old file and
    /// can be rewritten later.
    #[test]
    fn a_failed_rewrite_leaves_the_journal_as_it_was() {
        let dir = MemDir::new();
        let d: Arc<dyn Dir> = Arc::new(dir.clone());
        let (mut j, _) = Journal::open(d.clone(), "c.log").unwrap();
        j.append(b"a");
        j.sync_handle().unwrap().unwrap().sync().unwrap();
        // The bulk does not fit.
        let job = j.begin_rewrite(base(&["snapshot"])).unwrap();
        j.append(b"b");
        dir.set_space(Some(4));
        assert!(j.finish_rewrite(job.run()).is_err());
        dir.set_space(None);
        assert_eq!(dir.names(), ["c.log"]);
        // The bulk fits, the entries appended meanwhile do not.
        let job = j.begin_rewrite(base(&["snapshot"])).unwrap();
        j.append(b"c");
        let done = job.run();
        dir.set_space(Some(0));
        assert!(j.finish_rewrite(done).is_err());
        dir.set_space(None);
        assert_eq!(dir.names(), ["c.log"]);
        j.sync_handle().unwrap().unwrap().sync().unwrap();
        dir.crash(0);
        let (mut j, r) = Journal::open(d.clone(), "c.log").unwrap();
        assert_eq!(r.entries, entries(&["a", "b", "c"]));
        let job = j.begin_rewrite(base(&["snapshot"])).unwrap();
        assert!(matches!(
            j.finish_rewrite(job.run()).unwrap(),
            Swap::Done(_)
        ));
        dir.crash(0);
        let (_, r) = Journal::open(d, "c.log").unwrap();
        assert_eq!(r.entries, entries(&["snapshot"]));
    }

    /// A rewrite abandoned for a synchronous one is not swapped in later.
    #[test]
    fn an_abandoned_rewrite_is_ignored() {
        let dir = MemDir::new();
        let d: Arc<dyn Dir> = Arc::new(dir.clone());
        let (mut j, _) = Journal::open(d.clone(), "c.log").unwrap();
        j.append(b"a");
        let job = j.begin_rewrite(base(&["stale"])).unwrap();
        j.rewrite(&[b"fresh"]).unwrap();
        assert!(matches!(
            j.finish_rewrite(job.run()).unwrap(),
            Swap::Dropped
        ));
        dir.crash(0);
        let (_, r) = Journal::open(d, "c.log").unwrap();
        assert_eq!(r.entries, entries(&["fresh"]));
        assert_eq!(dir.names(), ["c.log"]);
    }

    #[test]
    #[should_panic(expected = "is over")]
    fn an_entry_that_could_not_be_read_back_is_refused() {
        let d: Arc<dyn Dir> = Arc::new(MemDir::new());
        let (mut j, _) = Journal::open(d, "c.log").unwrap();
        j.append(&vec![0u8; MAX_ENTRY + 1]);
    }

    #[test]
    fn unsynced_entries_wait_for_the_next_synced_one() {
        let dir = MemDir::new();
        let d: Arc<dyn Dir> = Arc::new(dir.clone());
        let (mut j, _) = Journal::open(d.clone(), "c.log").unwrap();
        j.append_unsynced(b"lazy");
        assert!(
            j.sync_handle().unwrap().is_none(),
            "nothing asks for a sync"
        );
        dir.crash(0);
        let (mut j, r) = Journal::open(d.clone(), "c.log").unwrap();
        assert!(r.entries.is_empty(), "an unsynced entry may be lost");
        j.append_unsynced(b"lazy");
        assert!(j.sync_handle().unwrap().is_none());
        j.append(b"one");
        j.append_unsynced(b"lazy again");
        j.sync_handle().unwrap().unwrap().sync().unwrap();
        dir.crash(0);
        let (_, r) = Journal::open(d, "c.log").unwrap();
        let want: Vec<Vec<u8>> = vec![b"lazy".to_vec(), b"one".to_vec(), b"lazy again".to_vec()];
        assert_eq!(r.entries, want, "a sync covers what was written before it");
    }
}
