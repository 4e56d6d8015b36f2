//! Per-subject counts with the first and last sequence of each subject.
//! Removing a subject's first (or last) message leaves a bound that the
//! owning store tightens by scanning when asked, so removal stays O(log n).

use std::collections::BTreeMap;

use crate::SubjectState;

#[derive(Debug, Clone, Copy)]
struct Entry {
    msgs: u64,
    /// A lower bound on the first sequence; exact unless `first_stale`.
    first: u64,
    /// An upper bound on the last sequence; exact unless `last_stale`.
    last: u64,
    first_stale: bool,
    last_stale: bool,
}

#[derive(Debug, Default, Clone)]
pub(crate) struct SubjectIndex {
    map: BTreeMap<String, Entry>,
}

impl SubjectIndex {
    pub fn add(&mut self, subject: &str, seq: u64) {
        match self.map.get_mut(subject) {
            Some(e) => {
                e.msgs += 1;
                e.last = seq;
                e.last_stale = false;
            }
            None => {
                self.map.insert(
                    subject.to_string(),
                    Entry {
                        msgs: 1,
                        first: seq,
                        last: seq,
                        first_stale: false,
                        last_stale: false,
                    },
                );
            }
        }
    }

    pub fn remove(&mut self, subject: &str, seq: u64) {
        let Some(e) = self.map.get_mut(subject) else {
            return;
        };
        e.msgs -= 1;
        if e.msgs == 0 {
            self.map.remove(subject);
            return;
        }
        if seq == e.first {
            e.first = seq + 1;
            e.first_stale = true;
        }
        if seq == e.last {
            e.last = seq - 1;
            e.last_stale = true;
        }
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn clear(&mut self) {
        self.map.clear();
    }

    /// The state of `subject`, with stale bounds resolved by `first_from`
    /// (first live seq of the subject at or after a bound) and `last_to`
    /// (last live seq at or before a bound).
    pub fn state(
        &self,
        subject: &str,
        first_from: impl Fn(u64) -> u64,
        last_to: impl Fn(u64) -> u64,
    ) -> Option<SubjectState> {
        let e = self.map.get(subject)?;
        Some(SubjectState {
            first: if e.first_stale {
                first_from(e.first)
            } else {
                e.first
            },
            last: if e.last_stale {
                last_to(e.last)
            } else {
                e.last
            },
            msgs: e.msgs,
        })
    }

    /// Subjects and counts, in subject order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, u64)> {
        self.map.iter().map(|(s, e)| (s.as_str(), e.msgs))
    }

    /// Every subject, in order.
    pub fn subjects(&self) -> impl Iterator<Item = &str> {
        self.map.keys().map(String::as_str)
    }
}
