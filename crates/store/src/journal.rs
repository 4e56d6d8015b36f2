//! A small append-only log of checksummed entries, compacted by
//! rewriting: how a consumer's state survives restarts (a snapshot entry
//! followed by changes).

use std::sync::Arc;

use crate::dir::Dir;
use crate::record::{self, Kind};
use crate::sync::SyncHandle;
use crate::Result;

pub struct Journal {
    dir: Arc<dyn Dir>,
    name: String,
    len: u64,
    next: u64,
    pending: Vec<u8>,
    /// Something in `pending` must be durable before its writer goes on
    /// (see [`Journal::append_unsynced`]).
    must_sync: bool,
    created: bool,
    /// Bytes of the file made room for (`Dir::reserve`).
    reserved: u64,
}

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
            // Nothing valid yet: the entry's creation may never have
            // been synced, so the first sync covers the directory too.
            created: valid == 0,
            reserved: valid,
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
        self.append_unsynced(entry);
        self.must_sync = true;
    }

    /// Appends an entry whose loss in a crash is harmless (a later
    /// state that can be learnt again, like a Raft commit index): it is
    /// written with the next [`Journal::sync_handle`] but asks for no sync
    /// of its own, and becomes durable with the next entry that does.
    /// Entries stay in order either way, so a crash keeps a prefix.
    pub fn append_unsynced(&mut self, entry: &[u8]) {
        record::encode_msg(&mut self.pending, Kind::Msg, self.next, 0, "", None, entry);
        self.next += 1;
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
    pub fn rewrite(&mut self, entries: &[&[u8]]) -> Result<()> {
        let mut buf = Vec::new();
        for (i, e) in entries.iter().enumerate() {
            record::encode_msg(&mut buf, Kind::Msg, i as u64, 0, "", None, e);
        }
        self.dir.write_atomic(&self.name, &buf)?;
        self.len = buf.len() as u64;
        self.reserved = self.len;
        self.next = entries.len() as u64;
        self.pending.clear();
        self.must_sync = false;
        self.created = false;
        Ok(())
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
