//! The subscription trie: one level per token, with `*` and `>` children
//! held apart from literal ones, and a bounded cache of match results.
//!
//! Invariants:
//! - `count` equals the number of entries stored in the trie.
//! - A node with no subscriptions and no children is pruned on removal, so
//!   the trie's size follows the live subscriptions, not their history.
//! - A cached result equals what a fresh trie walk would return: every
//!   insert and remove drops the cache entries its subject can match.
//! - `generation` changes on every insert and remove, so results cached
//!   outside (see [`crate::MatchCache`]) can be validated with one load.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::Mutex;

use crate::validate::tokens;
use crate::{FWC, PWC};

/// Most cached results kept; past this the cache is thinned.
const CACHE_MAX: usize = 1024;
/// Entries kept after thinning, so a scan of distinct subjects does not
/// thin on every miss.
const CACHE_SWEEP_TO: usize = 256;

/// The literal tokens a filter starts with, each with its dot: every
/// subject the filter matches starts with these bytes (`a.b.*` gives
/// `a.b.`, `*.x` nothing).
fn literal_prefix(filter: &[u8]) -> &[u8] {
    let mut end = 0;
    for t in tokens(filter) {
        if t == [PWC] || t == [FWC] {
            break;
        }
        end += t.len() + 1;
    }
    &filter[..end.min(filter.len())]
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SublistError {
    #[error("sublist: invalid subject")]
    InvalidSubject,
    #[error("sublist: no matches found")]
    NotFound,
}

/// Subscribers matching one subject: plain ones, and the members of each
/// queue group (merged by queue name across patterns).
#[derive(Debug)]
pub struct SubResult<T> {
    pub psubs: Vec<T>,
    pub qsubs: Vec<(Bytes, Vec<T>)>,
}

impl<T> SubResult<T> {
    pub fn is_empty(&self) -> bool {
        self.psubs.is_empty() && self.qsubs.is_empty()
    }
    fn fanout(&self) -> usize {
        self.psubs.len() + self.qsubs.len()
    }
}

impl<T> Default for SubResult<T> {
    fn default() -> Self {
        SubResult {
            psubs: Vec::new(),
            qsubs: Vec::new(),
        }
    }
}

/// Counters reported by `/subsz`, with nats-server's meanings.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct SublistStats {
    pub num_subscriptions: u32,
    pub num_cache: u32,
    pub num_inserts: u64,
    pub num_removes: u64,
    pub num_matches: u64,
    pub cache_hit_rate: f64,
    pub max_fanout: u32,
    pub avg_fanout: f64,
}

impl SublistStats {
    /// Adds `other`'s figures, as nats-server sums every account's trie
    /// for `/subsz`: counts add up, the fan-out maximum is the larger, and
    /// the rates are over both.
    pub fn add(&mut self, other: &SublistStats) {
        let hits = self.cache_hit_rate * self.num_matches as f64
            + other.cache_hit_rate * other.num_matches as f64;
        let fanout =
            self.avg_fanout * self.num_cache as f64 + other.avg_fanout * other.num_cache as f64;
        self.num_subscriptions += other.num_subscriptions;
        self.num_cache += other.num_cache;
        self.num_inserts += other.num_inserts;
        self.num_removes += other.num_removes;
        self.num_matches += other.num_matches;
        self.max_fanout = self.max_fanout.max(other.max_fanout);
        self.cache_hit_rate = if self.num_matches > 0 {
            hits / self.num_matches as f64
        } else {
            0.0
        };
        self.avg_fanout = if self.num_cache > 0 {
            fanout / self.num_cache as f64
        } else {
            0.0
        };
    }
}

struct Node<T> {
    next: Option<Box<Level<T>>>,
    psubs: BTreeMap<u64, T>,
    qsubs: BTreeMap<Bytes, BTreeMap<u64, T>>,
}

impl<T> Node<T> {
    fn new() -> Self {
        Node {
            next: None,
            psubs: BTreeMap::new(),
            qsubs: BTreeMap::new(),
        }
    }
    fn is_empty(&self) -> bool {
        self.psubs.is_empty()
            && self.qsubs.is_empty()
            && self.next.as_ref().is_none_or(|l| l.is_empty())
    }
}

struct Level<T> {
    nodes: hashbrown::HashMap<Box<[u8]>, Node<T>>,
    pwc: Option<Box<Node<T>>>,
    fwc: Option<Box<Node<T>>>,
}

impl<T> Level<T> {
    fn new() -> Self {
        Level {
            nodes: hashbrown::HashMap::new(),
            pwc: None,
            fwc: None,
        }
    }
    fn is_empty(&self) -> bool {
        self.nodes.is_empty() && self.pwc.is_none() && self.fwc.is_none()
    }
}

enum TokenKind<'a> {
    Literal(&'a [u8]),
    Pwc,
    Fwc,
}

fn kind(t: &[u8]) -> TokenKind<'_> {
    match t {
        [PWC] => TokenKind::Pwc,
        [FWC] => TokenKind::Fwc,
        _ => TokenKind::Literal(t),
    }
}

/// Match results by published subject.
type Cache<T> = hashbrown::HashMap<Box<[u8]>, Arc<SubResult<T>>>;

/// The subscription trie. `T` is the caller's subscription handle; `key`
/// identifies one entry for removal.
pub struct Sublist<T> {
    root: Level<T>,
    count: u32,
    inserts: u64,
    removes: u64,
    cache: Mutex<Cache<T>>,
    matches: AtomicU64,
    cache_hits: AtomicU64,
    generation: Arc<AtomicU64>,
}

impl<T: Clone> Default for Sublist<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Clone> Sublist<T> {
    pub fn new() -> Self {
        Sublist {
            root: Level::new(),
            count: 0,
            inserts: 0,
            removes: 0,
            cache: Mutex::new(hashbrown::HashMap::new()),
            matches: AtomicU64::new(0),
            cache_hits: AtomicU64::new(0),
            generation: Arc::new(AtomicU64::new(0)),
        }
    }

    /// A counter that changes whenever the trie does. Shared, so readers
    /// can check it without the lock that guards the trie.
    pub fn generation(&self) -> Arc<AtomicU64> {
        self.generation.clone()
    }

    pub fn count(&self) -> u32 {
        self.count
    }

    /// Adds `value` under `subject` (and `queue`). A `key` already present
    /// at the same place is replaced.
    pub fn insert(
        &mut self,
        subject: &[u8],
        queue: Option<&[u8]>,
        key: u64,
        value: T,
    ) -> Result<(), SublistError> {
        if !structurally_valid(subject) {
            return Err(SublistError::InvalidSubject);
        }
        let mut level = &mut self.root;
        let mut toks = tokens(subject).peekable();
        let node = loop {
            let t = toks.next().expect("validated non-empty");
            let node: &mut Node<T> = match kind(t) {
                TokenKind::Pwc => level.pwc.get_or_insert_with(|| Box::new(Node::new())),
                TokenKind::Fwc => level.fwc.get_or_insert_with(|| Box::new(Node::new())),
                TokenKind::Literal(t) => level.nodes.entry(t.into()).or_insert_with(Node::new),
            };
            if toks.peek().is_none() {
                break node;
            }
            level = node.next.get_or_insert_with(|| Box::new(Level::new()));
        };
        let replaced = match queue {
            None => node.psubs.insert(key, value).is_some(),
            Some(q) => node
                .qsubs
                .entry(Bytes::copy_from_slice(q))
                .or_default()
                .insert(key, value)
                .is_some(),
        };
        if !replaced {
            self.count += 1;
        }
        self.inserts += 1;
        self.invalidate(subject);
        Ok(())
    }

    /// Removes the entry `key` under `subject` (and `queue`), pruning nodes
    /// left empty.
    pub fn remove(
        &mut self,
        subject: &[u8],
        queue: Option<&[u8]>,
        key: u64,
    ) -> Result<T, SublistError> {
        if !structurally_valid(subject) {
            return Err(SublistError::InvalidSubject);
        }
        let toks: Vec<&[u8]> = tokens(subject).collect();
        let value = remove_in(&mut self.root, &toks, queue, key).ok_or(SublistError::NotFound)?;
        self.count -= 1;
        self.removes += 1;
        self.invalidate(subject);
        Ok(value)
    }

    fn invalidate(&mut self, subject: &[u8]) {
        self.generation.fetch_add(1, Ordering::Release);
        let cache = self.cache.get_mut();
        if crate::is_literal(subject) {
            cache.remove(subject);
        } else {
            // A cached subject can match only if it starts with the
            // filter's literal tokens: most entries fail that one compare,
            // and a leader change (a stream's `$JS.ACK.<name>.>`) costs a
            // scan, not a thousand full matches.
            let prefix = literal_prefix(subject);
            cache.retain(|cached, _| {
                !(cached.starts_with(prefix) && crate::subject_matches_filter(cached, subject))
            });
        }
    }

    /// Everything subscribed to the published `subject`.
    pub fn matches(&self, subject: &[u8]) -> Arc<SubResult<T>> {
        self.matches.fetch_add(1, Ordering::Relaxed);
        if let Some(r) = self.cache.lock().get(subject) {
            self.cache_hits.fetch_add(1, Ordering::Relaxed);
            return r.clone();
        }
        let result = Arc::new(self.compute(subject));
        let mut cache = self.cache.lock();
        if cache.len() >= CACHE_MAX {
            let mut drop = cache.len() - CACHE_SWEEP_TO;
            cache.retain(|_, _| {
                if drop == 0 {
                    return true;
                }
                drop -= 1;
                false
            });
        }
        cache.insert(subject.into(), result.clone());
        result
    }

    /// As [`Sublist::matches`], without the cache: for subjects used once
    /// (JetStream ack subjects are unique per message), which would only
    /// push useful entries out of it.
    pub fn matches_uncached(&self, subject: &[u8]) -> Arc<SubResult<T>> {
        self.matches.fetch_add(1, Ordering::Relaxed);
        Arc::new(self.compute(subject))
    }

    fn compute(&self, subject: &[u8]) -> SubResult<T> {
        let mut result = SubResult::default();
        // A `*` or `>` token in a published subject is looked up as an
        // ordinary token, so only wildcard subscriptions at that position
        // match it, as in nats-server.
        if structurally_valid(subject) {
            let toks: Vec<&[u8]> = tokens(subject).collect();
            match_level(&self.root, &toks, &mut result);
        }
        result
    }

    /// Whether anything is subscribed to the literal `subject`.
    pub fn has_interest(&self, subject: &[u8]) -> bool {
        !self.matches(subject).is_empty()
    }

    /// Calls `f` on every stored entry.
    pub fn for_each(&self, mut f: impl FnMut(&T)) {
        fn walk<T>(level: &Level<T>, f: &mut impl FnMut(&T)) {
            let nodes = level
                .nodes
                .values()
                .chain(level.pwc.as_deref())
                .chain(level.fwc.as_deref());
            for n in nodes {
                n.psubs.values().for_each(&mut *f);
                n.qsubs.values().flat_map(|q| q.values()).for_each(&mut *f);
                if let Some(next) = &n.next {
                    walk(next, f);
                }
            }
        }
        walk(&self.root, &mut f);
    }

    pub fn stats(&self) -> SublistStats {
        let cache = self.cache.lock();
        let matches = self.matches.load(Ordering::Relaxed);
        let hits = self.cache_hits.load(Ordering::Relaxed);
        let (mut total, mut max) = (0usize, 0usize);
        for r in cache.values() {
            total += r.fanout();
            max = max.max(r.fanout());
        }
        SublistStats {
            num_subscriptions: self.count,
            num_cache: cache.len() as u32,
            num_inserts: self.inserts,
            num_removes: self.removes,
            num_matches: matches,
            cache_hit_rate: if matches > 0 {
                hits as f64 / matches as f64
            } else {
                0.0
            },
            max_fanout: max as u32,
            avg_fanout: if cache.is_empty() {
                0.0
            } else {
                total as f64 / cache.len() as f64
            },
        }
    }
}

/// Non-empty tokens with nothing after `>`: what the trie can store.
/// (Whitespace is the parser's concern; it never reaches here.)
fn structurally_valid(subject: &[u8]) -> bool {
    let mut after_fwc = false;
    for t in tokens(subject) {
        if t.is_empty() || after_fwc {
            return false;
        }
        after_fwc = t == [FWC];
    }
    true
}

fn add_node<T: Clone>(n: &Node<T>, result: &mut SubResult<T>) {
    result.psubs.extend(n.psubs.values().cloned());
    for (q, members) in &n.qsubs {
        if members.is_empty() {
            continue;
        }
        match result.qsubs.iter_mut().find(|(name, _)| name == q) {
            Some((_, group)) => group.extend(members.values().cloned()),
            None => result
                .qsubs
                .push((q.clone(), members.values().cloned().collect())),
        }
    }
}

fn match_level<T: Clone>(level: &Level<T>, toks: &[&[u8]], result: &mut SubResult<T>) {
    let mut level = Some(level);
    let mut last: Option<&Node<T>> = None;
    let mut last_pwc: Option<&Node<T>> = None;
    for (i, t) in toks.iter().enumerate() {
        let Some(l) = level else { return };
        if let Some(fwc) = &l.fwc {
            add_node(fwc, result);
        }
        last_pwc = l.pwc.as_deref();
        if let Some(pwc) = last_pwc {
            if let Some(next) = &pwc.next {
                match_level(next, &toks[i + 1..], result);
            }
        }
        last = l.nodes.get(*t);
        level = last.and_then(|n| n.next.as_deref());
    }
    if let Some(n) = last {
        add_node(n, result);
    }
    if let Some(n) = last_pwc {
        add_node(n, result);
    }
}

/// Removes `key` at the node for `toks`, pruning empty nodes on the way
/// back up.
fn remove_in<T>(level: &mut Level<T>, toks: &[&[u8]], queue: Option<&[u8]>, key: u64) -> Option<T> {
    let (t, rest) = toks.split_first()?;
    let removed;
    let prune;
    {
        let node: &mut Node<T> = match kind(t) {
            TokenKind::Pwc => level.pwc.as_deref_mut()?,
            TokenKind::Fwc => level.fwc.as_deref_mut()?,
            TokenKind::Literal(t) => level.nodes.get_mut(t)?,
        };
        if rest.is_empty() {
            removed = match queue {
                None => node.psubs.remove(&key),
                Some(q) => {
                    let group = node.qsubs.get_mut(q)?;
                    let v = group.remove(&key);
                    if group.is_empty() {
                        node.qsubs.remove(q);
                    }
                    v
                }
            };
        } else {
            let next = node.next.as_deref_mut()?;
            removed = remove_in(next, rest, queue, key);
            if next.is_empty() {
                node.next = None;
            }
        }
        prune = node.is_empty();
    }
    if prune {
        match kind(t) {
            TokenKind::Pwc => level.pwc = None,
            TokenKind::Fwc => level.fwc = None,
            TokenKind::Literal(t) => {
                level.nodes.remove(t);
            }
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uncached_matches_agree_and_leave_the_cache_alone() {
        let mut s = Sublist::new();
        s.insert(b"$JS.ACK.>", None, 1, 7u64).unwrap();
        s.insert(b"a.b", None, 2, 8u64).unwrap();
        s.matches(b"a.b");
        let before = s.stats().num_cache;
        for i in 0..100 {
            let subj = format!("$JS.ACK.S.C.1.{i}.{i}.0.0");
            let r = s.matches_uncached(subj.as_bytes());
            assert_eq!(r.psubs, vec![7]);
        }
        assert_eq!(s.stats().num_cache, before);
        assert_eq!(s.stats().num_matches, 101);
    }

    #[test]
    fn a_filters_literal_prefix_ends_at_its_first_wildcard() {
        let cases: [(&[u8], &[u8]); 5] = [
            (b"a.b.*", b"a.b."),
            (b"$JS.ACK.S.>", b"$JS.ACK.S."),
            (b"*.x", b""),
            (b">", b""),
            (b"a.*.c", b"a."),
        ];
        for (filter, prefix) in cases {
            assert_eq!(literal_prefix(filter), prefix, "{filter:?}");
        }
    }

    #[test]
    fn a_wildcard_change_drops_exactly_the_cached_subjects_it_matches() {
        let mut s = Sublist::new();
        s.insert(b"a.>", None, 1, 1u64).unwrap();
        for subj in ["a.b.c", "a.x", "ab.c", "b.a.c"] {
            s.matches(subj.as_bytes());
        }
        s.insert(b"a.*.c", None, 2, 2u64).unwrap();
        assert_eq!(s.stats().num_cache, 3, "only a.b.c dropped");
        assert_eq!(keys(&s.matches(b"a.b.c")).0, vec![1, 2]);
        s.insert(b"*.c", None, 3, 3u64).unwrap();
        assert_eq!(keys(&s.matches(b"ab.c")).0, vec![3]);
        assert_eq!(keys(&s.matches(b"a.x")).0, vec![1]);
    }

    fn keys(r: &SubResult<u64>) -> (Vec<u64>, Vec<(String, Vec<u64>)>) {
        let mut p = r.psubs.clone();
        p.sort();
        let mut q: Vec<(String, Vec<u64>)> = r
            .qsubs
            .iter()
            .map(|(n, m)| {
                let mut m = m.clone();
                m.sort();
                (String::from_utf8_lossy(n).into_owned(), m)
            })
            .collect();
        q.sort();
        (p, q)
    }

    #[test]
    fn wildcards_match() {
        let mut s = Sublist::new();
        for (k, subj) in [
            "foo.bar",
            "foo.*",
            "foo.>",
            ">",
            "*.bar",
            "foo.bar.baz",
            "*",
            "foo",
        ]
        .iter()
        .enumerate()
        {
            s.insert(subj.as_bytes(), None, k as u64, k as u64).unwrap();
        }
        assert_eq!(keys(&s.matches(b"foo.bar")).0, vec![0, 1, 2, 3, 4]);
        assert_eq!(keys(&s.matches(b"foo.bar.baz")).0, vec![2, 3, 5]);
        assert_eq!(keys(&s.matches(b"foo")).0, vec![3, 6, 7]);
        assert_eq!(keys(&s.matches(b"bar")).0, vec![3, 6]);
        assert_eq!(keys(&s.matches(b"x.y.z")).0, vec![3]);
    }

    #[test]
    fn queues_merge_by_name() {
        let mut s = Sublist::new();
        s.insert(b"a.*", Some(b"q"), 1, 1).unwrap();
        s.insert(b"a.b", Some(b"q"), 2, 2).unwrap();
        s.insert(b"a.b", Some(b"r"), 3, 3).unwrap();
        s.insert(b"a.b", None, 4, 4).unwrap();
        let (p, q) = keys(&s.matches(b"a.b"));
        assert_eq!(p, vec![4]);
        assert_eq!(q, vec![("q".into(), vec![1, 2]), ("r".into(), vec![3])]);
    }

    #[test]
    fn cache_is_invalidated() {
        let mut s = Sublist::new();
        s.insert(b"a.b", None, 1, 1).unwrap();
        assert_eq!(keys(&s.matches(b"a.b")).0, vec![1]);
        s.insert(b"a.*", None, 2, 2).unwrap();
        assert_eq!(keys(&s.matches(b"a.b")).0, vec![1, 2]);
        s.remove(b"a.b", None, 1).unwrap();
        assert_eq!(keys(&s.matches(b"a.b")).0, vec![2]);
        s.remove(b"a.*", None, 2).unwrap();
        assert!(s.matches(b"a.b").is_empty());
        let st = s.stats();
        assert_eq!((st.num_inserts, st.num_removes, st.num_matches), (2, 2, 4));
    }

    #[test]
    fn removal_prunes_everything() {
        let mut s = Sublist::new();
        let subjects = ["a.b.c", "a.*.c", "a.>", "*.*", ">", "x.y.z.w"];
        for (k, subj) in subjects.iter().enumerate() {
            s.insert(subj.as_bytes(), Some(b"q"), k as u64, k as u64)
                .unwrap();
            s.insert(subj.as_bytes(), None, 100 + k as u64, k as u64)
                .unwrap();
        }
        assert_eq!(s.count(), 12);
        for (k, subj) in subjects.iter().enumerate() {
            s.remove(subj.as_bytes(), Some(b"q"), k as u64).unwrap();
            s.remove(subj.as_bytes(), None, 100 + k as u64).unwrap();
        }
        assert_eq!(s.count(), 0);
        assert!(s.root.is_empty());
        assert_eq!(s.remove(b"a.b.c", None, 1), Err(SublistError::NotFound));
    }

    #[test]
    fn invalid_subjects_rejected() {
        let mut s: Sublist<u64> = Sublist::new();
        for bad in ["", "a..b", "a.>.b", ".a", "a."] {
            assert_eq!(
                s.insert(bad.as_bytes(), None, 1, 1),
                Err(SublistError::InvalidSubject),
                "{bad}"
            );
        }
        assert!(
            s.matches(b"a.*").is_empty(),
            "wildcard publish matches nothing"
        );
    }

    #[test]
    fn many_subscriptions_insert_and_remove() {
        let mut s = Sublist::new();
        for k in 0..100_000u64 {
            let subj = format!("load.{}.{}", k % 100, k);
            s.insert(subj.as_bytes(), None, k, k).unwrap();
        }
        assert_eq!(s.count(), 100_000);
        assert_eq!(s.matches(b"load.7.107").psubs, vec![107]);
        for k in 0..100_000u64 {
            let subj = format!("load.{}.{}", k % 100, k);
            s.remove(subj.as_bytes(), None, k).unwrap();
        }
        assert!(s.root.is_empty());
    }
}
