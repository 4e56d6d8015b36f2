//! A set of sequences kept as sorted, disjoint, non-adjacent inclusive
//! ranges: the sequences of a segment that are not live messages. Streams
//! remove mostly from the front or in runs, so this stays a few ranges
//! where a per-sequence index would grow with the stream.

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct SeqRanges {
    ranges: Vec<(u64, u64)>,
    /// Sequences held, kept with the ranges.
    total: u64,
}

impl SeqRanges {
    /// Index of the first range ending at or after `seq`.
    fn first_ending_at_or_after(&self, seq: u64) -> usize {
        self.ranges.partition_point(|&(_, b)| b < seq)
    }

    pub fn contains(&self, seq: u64) -> bool {
        let i = self.first_ending_at_or_after(seq);
        self.ranges.get(i).is_some_and(|&(a, _)| a <= seq)
    }

    pub fn insert(&mut self, seq: u64) {
        self.insert_range(seq, seq);
    }

    /// Adds `a..=b`.
    pub fn insert_range(&mut self, a: u64, b: u64) {
        debug_assert!(a <= b, "a range runs forwards: {a}..={b}");
        // Ranges that touch or overlap a..=b merge with it.
        let from = self.first_ending_at_or_after(a.saturating_sub(1));
        let mut to = from;
        let (mut lo, mut hi) = (a, b);
        while to < self.ranges.len() && self.ranges[to].0 <= b.saturating_add(1) {
            lo = lo.min(self.ranges[to].0);
            hi = hi.max(self.ranges[to].1);
            self.total -= self.ranges[to].1 - self.ranges[to].0 + 1;
            to += 1;
        }
        self.ranges.splice(from..to, [(lo, hi)]);
        self.total += hi - lo + 1;
        debug_assert!(self.is_canonical(), "ranges stay sorted and apart");
    }

    /// Ranges that end at or after `seq`, in order.
    pub fn iter_from(&self, seq: u64) -> impl DoubleEndedIterator<Item = (u64, u64)> + '_ {
        self.ranges[self.first_ending_at_or_after(seq)..]
            .iter()
            .copied()
    }

    pub fn total(&self) -> u64 {
        self.total
    }

    fn is_canonical(&self) -> bool {
        let sum: u64 = self.ranges.iter().map(|&(a, b)| b - a + 1).sum();
        sum == self.total
            && self.ranges.iter().all(|&(a, b)| a <= b)
            && self.ranges.windows(2).all(|w| w[0].1 + 1 < w[1].0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inserts_merge_neighbours_and_overlaps() {
        let mut set = SeqRanges::default();
        set.insert(5);
        set.insert(7);
        assert_eq!(set.iter_from(0).collect::<Vec<_>>(), [(5, 5), (7, 7)]);
        set.insert(6);
        assert_eq!(set.iter_from(0).collect::<Vec<_>>(), [(5, 7)]);
        set.insert_range(1, 3);
        set.insert_range(10, 12);
        set.insert_range(2, 11);
        assert_eq!(set.iter_from(0).collect::<Vec<_>>(), [(1, 12)]);
        assert_eq!(set.total(), 12);
        set.insert(12);
        assert_eq!(set.total(), 12);
    }

    #[test]
    fn contains_and_iter_from_agree_with_a_plain_set() {
        let mut set = SeqRanges::default();
        let mut plain = std::collections::BTreeSet::new();
        // A fixed scatter of inserts, runs and repeats.
        let mut x = 7u64;
        for _ in 0..500 {
            x = (x * 31 + 11) % 211;
            let len = x % 4;
            set.insert_range(x, x + len);
            plain.extend(x..=x + len);
        }
        for seq in 0..220 {
            assert_eq!(set.contains(seq), plain.contains(&seq), "seq {seq}");
        }
        assert_eq!(set.total(), plain.len() as u64);
        let expanded: Vec<u64> = set.iter_from(100).flat_map(|(a, b)| a..=b).collect();
        let first = expanded[0];
        assert!(first <= 100 || !plain.contains(&100));
        let want: Vec<u64> = plain.range(first..).copied().collect();
        assert_eq!(expanded, want);
    }
}
