//! Frames waiting for one peer, in two classes: control frames (votes,
//! heartbeats) always leave before bulk frames (appends, snapshots), and
//! the bulk queue is bounded by bytes, so replication load can neither
//! delay an election message nor grow without limit (incident 4: traffic
//! starved heartbeats and elections looped).

use std::collections::VecDeque;

use crate::frame::{Class, Frame};

#[derive(Debug)]
pub struct Outbox {
    control: VecDeque<Frame>,
    bulk: VecDeque<Frame>,
    bulk_bytes: usize,
    bulk_limit: usize,
    /// Bulk frames refused because the queue was full; Raft resends.
    pub dropped_bulk: u64,
    /// The first chunk of the message now arriving was dropped, so its
    /// later chunks are too (they could never be reassembled).
    dropping_chunks: bool,
}

impl Outbox {
    pub fn new(bulk_limit: usize) -> Self {
        Outbox {
            control: VecDeque::new(),
            bulk: VecDeque::new(),
            bulk_bytes: 0,
            bulk_limit,
            dropped_bulk: 0,
            dropping_chunks: false,
        }
    }

    /// Queues a frame. A bulk frame that does not fit is dropped and
    /// counted (returns false); control frames are always queued.
    pub fn push(&mut self, f: Frame) -> bool {
        match f.class {
            Class::Control => {
                self.control.push_back(f);
                true
            }
            Class::Bulk => {
                let n = f.payload.len();
                // A message's later chunks follow its first: all of it is
                // queued (bounded by one message) or none.
                let admit = if crate::chunk::is_continuation(&f.payload) {
                    !self.dropping_chunks
                } else {
                    let fits = self.bulk_bytes + n <= self.bulk_limit || self.bulk.is_empty();
                    self.dropping_chunks = !fits;
                    fits
                };
                if !admit {
                    self.dropped_bulk += 1;
                    return false;
                }
                self.bulk_bytes += n;
                self.bulk.push_back(f);
                true
            }
        }
    }

    /// The next frame to write: any control frame first.
    pub fn pop(&mut self) -> Option<Frame> {
        if let Some(f) = self.control.pop_front() {
            return Some(f);
        }
        let f = self.bulk.pop_front()?;
        self.bulk_bytes -= f.payload.len();
        Some(f)
    }

    pub fn is_empty(&self) -> bool {
        self.control.is_empty() && self.bulk.is_empty()
    }

    /// Encoded size of the frame [`Outbox::pop`] would return.
    pub fn next_len(&self) -> Option<usize> {
        self.control
            .front()
            .or(self.bulk.front())
            .map(|f| crate::frame::HEADER_LEN + f.payload.len())
    }

    /// Encoded size of the larger of the two queue heads.
    pub fn largest_head(&self) -> usize {
        let len = |f: Option<&Frame>| f.map_or(0, |f| crate::frame::HEADER_LEN + f.payload.len());
        len(self.control.front()).max(len(self.bulk.front()))
    }

    /// Encodes waiting frames, control first, into `out` for one write to
    /// the peer, stopping once `max_bytes` are queued (at least one frame
    /// goes, however large). Returns how many frames were taken.
    pub fn drain_batch(&mut self, max_bytes: usize, out: &mut bytes::BytesMut) -> usize {
        let start = out.len();
        let mut n = 0;
        while out.len() - start < max_bytes || n == 0 {
            let Some(f) = self.pop() else { break };
            crate::frame::encode(&f, out);
            n += 1;
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn f(class: Class, n: usize) -> Frame {
        Frame {
            class,
            sender: 1,
            group: 1,
            payload: Bytes::from(vec![0; n]),
        }
    }

    /// A chunked message is queued whole or not at all: once its first
    /// chunk is refused, so are the rest; the next message starts anew.
    #[test]
    fn chunks_of_one_message_are_all_or_nothing() {
        let chunk = |p: Bytes| Frame {
            class: Class::Bulk,
            sender: 1,
            group: 1,
            payload: p,
        };
        let big = crate::chunk::split(&[7u8; 5000], 1000);
        let mut o = Outbox::new(3000);
        // Empty queue: the whole message goes in, past the byte bound.
        for c in &big {
            assert!(o.push(chunk(c.clone())));
        }
        // Full: a second message is refused from its first chunk on.
        for c in &big {
            assert!(!o.push(chunk(c.clone())));
        }
        while o.pop().is_some() {}
        assert!(o.push(chunk(big[0].clone())));
        assert!(o.push(chunk(big[1].clone())));
    }

    #[test]
    fn control_overtakes_queued_bulk() {
        let mut o = Outbox::new(1 << 20);
        for _ in 0..10 {
            assert!(o.push(f(Class::Bulk, 1000)));
        }
        o.push(f(Class::Control, 10));
        assert_eq!(o.pop().unwrap().class, Class::Control);
        assert_eq!(o.pop().unwrap().class, Class::Bulk);
    }

    #[test]
    fn frames_for_a_peer_leave_in_one_batch_control_first() {
        let mut o = Outbox::new(1 << 20);
        o.push(f(Class::Bulk, 100));
        o.push(f(Class::Bulk, 100));
        o.push(f(Class::Control, 5));
        let mut buf = bytes::BytesMut::new();
        assert_eq!(o.drain_batch(1 << 16, &mut buf), 3);
        let mut d = crate::frame::StreamDecoder::new();
        d.feed(&buf);
        let mut classes = Vec::new();
        while let Some(fr) = d.next_frame().unwrap() {
            classes.push(fr.class);
        }
        assert_eq!(classes, vec![Class::Control, Class::Bulk, Class::Bulk]);
        // A byte budget splits batches; one frame always goes.
        o.push(f(Class::Bulk, 1000));
        o.push(f(Class::Bulk, 1000));
        let mut buf = bytes::BytesMut::new();
        assert_eq!(o.drain_batch(10, &mut buf), 1);
        assert!(!o.is_empty());
    }

    #[test]
    fn bulk_is_bounded_and_drops_are_counted() {
        let mut o = Outbox::new(2500);
        assert!(o.push(f(Class::Bulk, 1000)));
        assert!(o.push(f(Class::Bulk, 1000)));
        assert!(!o.push(f(Class::Bulk, 1000)));
        assert!(o.push(f(Class::Control, 10)));
        assert_eq!(o.dropped_bulk, 1);
        // One oversized frame still goes when nothing else waits.
        let mut o = Outbox::new(10);
        assert!(o.push(f(Class::Bulk, 1000)));
        while o.pop().is_some() {}
        assert!(o.is_empty());
    }
}
