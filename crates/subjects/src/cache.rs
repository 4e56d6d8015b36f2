//! A per-reader cache of match results, checked against the trie's
//! generation so that it needs no lock to stay correct.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::SubResult;

/// Most subjects remembered; a reader publishing to more distinct subjects
/// starts over, which costs one trie lookup per subject.
const MAX_ENTRIES: usize = 512;

/// Match results a single reader looked up, keyed by subject. An entry is
/// used only while the trie's generation is the one it was made under.
pub struct MatchCache<T> {
    generation: Arc<AtomicU64>,
    seen: u64,
    entries: hashbrown::HashMap<Vec<u8>, Arc<SubResult<T>>>,
}

impl<T> MatchCache<T> {
    pub fn new(generation: Arc<AtomicU64>) -> Self {
        MatchCache {
            generation,
            seen: 0,
            entries: hashbrown::HashMap::new(),
        }
    }

    /// The cached result for `subject`, or `lookup`'s answer (then cached).
    /// Borrowed, so a hit costs no reference-count traffic on the result,
    /// which other readers share.
    pub fn get_or_insert(
        &mut self,
        subject: &[u8],
        lookup: impl FnOnce() -> Arc<SubResult<T>>,
    ) -> &SubResult<T> {
        // Acquire pairs with the trie's Release on change: a result made
        // before the change is never taken as current after it.
        let now = self.generation.load(Ordering::Acquire);
        if now != self.seen {
            self.entries.clear();
            self.seen = now;
        } else if self.entries.len() >= MAX_ENTRIES && !self.entries.contains_key(subject) {
            self.entries.clear();
        }
        self.entries.entry_ref(subject).or_insert_with(lookup)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Sublist;

    #[test]
    fn follows_the_trie() {
        let mut s = Sublist::new();
        let mut c = MatchCache::new(s.generation());
        s.insert(b"a", None, 1, 1u64).unwrap();
        assert_eq!(c.get_or_insert(b"a", || s.matches(b"a")).psubs, vec![1]);
        s.insert(b"a", None, 2, 2).unwrap();
        assert_eq!(c.get_or_insert(b"a", || s.matches(b"a")).psubs, vec![1, 2]);
        // A hit does not call the lookup.
        assert_eq!(c.get_or_insert(b"a", || unreachable!()).psubs, vec![1, 2]);
        // Many subjects: the cache starts over rather than growing.
        for i in 0..(MAX_ENTRIES * 3) {
            let subj = format!("x.{i}");
            c.get_or_insert(subj.as_bytes(), || s.matches(subj.as_bytes()));
        }
        assert!(c.entries.len() <= MAX_ENTRIES);
    }
}
