//! The memory store: messages in a sequence-ordered map.

use std::collections::BTreeMap;

use bytes::Bytes;

use crate::subject_index::SubjectIndex;
use crate::{Filter, MsgStore, Purge, Result, StoreState, StoredMsg, SubjectState, SyncHandle};

#[derive(Default)]
pub struct MemStore {
    /// Sizes are counted as nats-server's file store counts them (a
    /// replica of a file stream kept in memory), not its memory store.
    file_sizes: bool,
    msgs: BTreeMap<u64, StoredMsg>,
    /// Next sequence to be first when empty; first live otherwise.
    first_seq: u64,
    last_seq: u64,
    last_ts: i64,
    bytes: u64,
    subjects: SubjectIndex,
}

impl MemStore {
    pub fn new() -> Self {
        MemStore::default()
    }

    /// A memory store that counts `bytes` (and `max_bytes`) as a file
    /// store does, for a file stream's messages held in memory.
    pub fn sized_as_file() -> Self {
        MemStore {
            file_sizes: true,
            ..Default::default()
        }
    }

    fn size(&self, m: &StoredMsg) -> u64 {
        self.msg_size(&m.subject, m.headers.as_deref(), &m.payload)
    }

    fn first_live_of(&self, subject: &str, from: u64) -> u64 {
        self.msgs
            .range(from..)
            .find(|(_, m)| m.subject == subject)
            .map_or(0, |(s, _)| *s)
    }

    fn last_live_of(&self, subject: &str, to: u64) -> u64 {
        self.msgs
            .range(..=to)
            .rev()
            .find(|(_, m)| m.subject == subject)
            .map_or(0, |(s, _)| *s)
    }

    fn fix_first(&mut self) {
        self.first_seq = match self.msgs.keys().next() {
            Some(&s) => s,
            None => self.last_seq + 1,
        };
    }
}

/// The sequences a filtered (or keep-N) purge removes, given the live
/// messages as (seq, matches filter) in ascending order: matching ones
/// below `seq` if set, all but the newest `keep` if set.
pub(crate) fn purge_selection(
    p: &Purge,
    last: u64,
    live: &mut dyn Iterator<Item = (u64, bool)>,
) -> Vec<u64> {
    let upper = p.seq.map(|s| s.saturating_sub(1)).unwrap_or(last);
    let matching: Vec<u64> = live
        .take_while(|(s, _)| *s <= upper)
        .filter(|(_, m)| *m)
        .map(|(s, _)| s)
        .collect();
    match p.keep {
        Some(k) if k > 0 => {
            let n = matching.len().saturating_sub(k as usize);
            matching[..n].to_vec()
        }
        _ => matching,
    }
}

impl MsgStore for MemStore {
    fn msg_size(&self, subject: &str, headers: Option<&[u8]>, payload: &[u8]) -> u64 {
        match self.file_sizes {
            true => crate::file_msg_size(subject, headers, payload),
            false => crate::msg_size(subject, headers, payload),
        }
    }

    fn store(
        &mut self,
        subject: &str,
        headers: Option<&[u8]>,
        payload: &[u8],
        ts: i64,
    ) -> Result<u64> {
        let seq = self.last_seq + 1;
        let msg = StoredMsg {
            seq,
            ts,
            subject: subject.to_string(),
            headers: headers.map(Bytes::copy_from_slice),
            payload: Bytes::copy_from_slice(payload),
        };
        self.bytes += self.size(&msg);
        self.subjects.add(subject, seq);
        self.msgs.insert(seq, msg);
        self.last_seq = seq;
        self.last_ts = ts;
        if self.first_seq == 0 || self.msgs.len() == 1 {
            self.first_seq = seq;
        }
        Ok(seq)
    }

    fn skip(&mut self, ts: i64) -> Result<u64> {
        self.last_seq += 1;
        self.last_ts = ts;
        if self.msgs.is_empty() {
            self.first_seq = self.last_seq + 1;
        }
        Ok(self.last_seq)
    }

    fn get(&self, seq: u64) -> Result<Option<StoredMsg>> {
        Ok(self.msgs.get(&seq).cloned())
    }

    fn next_matching(&self, start: u64, filter: &Filter) -> Result<Option<StoredMsg>> {
        if let Some(subject) = filter.literal() {
            let Some(st) = self.subject_state(subject) else {
                return Ok(None);
            };
            if start > st.last {
                return Ok(None);
            }
            let from = start.max(st.first);
            return Ok(self
                .msgs
                .range(from..)
                .find(|(_, m)| m.subject == subject)
                .map(|(_, m)| m.clone()));
        }
        Ok(self
            .msgs
            .range(start..)
            .find(|(_, m)| filter.matches(&m.subject))
            .map(|(_, m)| m.clone()))
    }

    fn last_matching(&self, filter: &Filter) -> Result<Option<StoredMsg>> {
        if let Some(subject) = filter.literal() {
            return Ok(self
                .subject_state(subject)
                .and_then(|st| self.msgs.get(&st.last).cloned()));
        }
        Ok(self
            .msgs
            .values()
            .rev()
            .find(|m| filter.matches(&m.subject))
            .cloned())
    }

    fn remove(&mut self, seq: u64, _erase: bool) -> Result<bool> {
        let Some(m) = self.msgs.remove(&seq) else {
            return Ok(false);
        };
        self.bytes -= self.size(&m);
        self.subjects.remove(&m.subject, seq);
        if seq == self.first_seq {
            self.fix_first();
        }
        Ok(true)
    }

    fn purge(&mut self, p: &Purge) -> Result<u64> {
        let filter = Filter::new(p.filter.iter().cloned());
        if filter.is_all() && p.keep.unwrap_or(0) == 0 {
            // Everything below `seq` (or everything).
            let upto = match p.seq {
                Some(s) if s <= 1 => return Ok(0),
                Some(s) => s,
                None => self.last_seq + 1,
            };
            let keep = self.msgs.split_off(&upto);
            let gone = std::mem::replace(&mut self.msgs, keep);
            for m in gone.values() {
                self.bytes -= self.size(m);
                self.subjects.remove(&m.subject, m.seq);
            }
            if upto > self.last_seq + 1 {
                // Purging past the end moves the next sequence there.
                self.last_seq = upto - 1;
            }
            self.fix_first();
            return Ok(gone.len() as u64);
        }
        if p.seq == Some(1) {
            return Ok(0);
        }
        let mut live = self
            .msgs
            .iter()
            .map(|(s, m)| (*s, filter.matches(&m.subject)));
        let doomed = purge_selection(p, self.last_seq, &mut live);
        for s in &doomed {
            self.remove(*s, false)?;
        }
        Ok(doomed.len() as u64)
    }

    fn state(&self) -> StoreState {
        let msgs = self.msgs.len() as u64;
        StoreState {
            msgs,
            bytes: self.bytes,
            first_seq: self.first_seq,
            first_ts: self.msgs.values().next().map_or(0, |m| m.ts),
            last_seq: self.last_seq,
            last_ts: if self.last_seq == 0 { 0 } else { self.last_ts },
            num_subjects: self.subjects.len() as u64,
            num_deleted: if msgs == 0 || self.last_seq < self.first_seq {
                0
            } else {
                (self.last_seq - self.first_seq + 1) - msgs
            },
            lost: Vec::new(),
            lost_bytes: 0,
        }
    }

    fn deleted(&self) -> Vec<u64> {
        if self.msgs.is_empty() {
            return Vec::new();
        }
        (self.first_seq..=self.last_seq)
            .filter(|s| !self.msgs.contains_key(s))
            .collect()
    }

    fn deleted_ranges(&self) -> Vec<(u64, u64)> {
        crate::gaps(self.msgs.keys().map(|&k| (k, k + 1)), self.last_seq)
    }

    fn subject_state(&self, subject: &str) -> Option<SubjectState> {
        self.subjects.state(
            subject,
            |from| self.first_live_of(subject, from),
            |to| self.last_live_of(subject, to),
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
            return self.msgs.range(start..).count() as u64;
        }
        self.msgs
            .range(start..)
            .filter(|(_, m)| filter.matches(&m.subject))
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
        self.msgs
            .values()
            .find(|m| m.ts >= ts)
            .map_or(self.last_seq + 1, |m| m.seq)
    }

    fn expired(&self, cutoff: i64, limit: usize) -> Vec<u64> {
        self.msgs
            .values()
            .take_while(|m| m.ts <= cutoff)
            .take(limit)
            .map(|m| m.seq)
            .collect()
    }

    fn reset_to(&mut self, seq: u64) -> Result<()> {
        if !self.msgs.is_empty() {
            self.purge(&Purge::default())?;
        }
        self.last_seq = seq.saturating_sub(1);
        self.first_seq = seq;
        Ok(())
    }

    fn dirty(&self) -> bool {
        false
    }

    fn sync_handle(&mut self) -> Option<SyncHandle> {
        None
    }

    fn delete_all(&mut self) -> Result<()> {
        self.msgs.clear();
        self.subjects.clear();
        self.bytes = 0;
        Ok(())
    }
}
