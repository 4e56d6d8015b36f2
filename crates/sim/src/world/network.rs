//! The network: frames between servers, dropped, corrupted, delayed and
//! duplicated by the seed, cut by partitions, and (with a bandwidth)
//! queued on links as the real transport's outboxes queue them.

use bytes::BytesMut;
use replication::engine::Engine;
use replication::frame;
use replication::node::Input;
use replication::outbox::Outbox;

use crate::{mix, Faults, Sim};

/// A directed link with limited bandwidth. Prioritized, it queues in
/// the real per-peer outbox (control first, bulk bounded); otherwise in one
/// FIFO (incident 4's cause).
pub(crate) struct Link {
    queue: LinkQueue,
    /// Bytes the link may still send this step.
    credit: usize,
}

pub(crate) enum LinkQueue {
    Prioritized(Outbox),
    Fifo(std::collections::VecDeque<frame::Frame>),
}

/// Bulk bytes a prioritized link queues before dropping (Raft resends).
const BULK_LIMIT: usize = 4 << 20;

impl Link {
    fn new(prioritize: bool) -> Link {
        Link {
            queue: if prioritize {
                LinkQueue::Prioritized(Outbox::new(BULK_LIMIT))
            } else {
                LinkQueue::Fifo(Default::default())
            },
            credit: 0,
        }
    }

    fn push(&mut self, f: frame::Frame) {
        match &mut self.queue {
            LinkQueue::Prioritized(o) => {
                o.push(f);
            }
            LinkQueue::Fifo(q) => q.push_back(f),
        }
    }

    fn encoded(f: &frame::Frame) -> usize {
        frame::HEADER_LEN + f.payload.len()
    }

    /// Credit may build up to the largest head, so a frame bigger than a
    /// step's bandwidth still goes in time.
    fn largest_head(&self) -> usize {
        match &self.queue {
            LinkQueue::Prioritized(o) => o.largest_head(),
            LinkQueue::Fifo(q) => q.front().map_or(0, Self::encoded),
        }
    }

    fn next_len(&self) -> Option<usize> {
        match &self.queue {
            LinkQueue::Prioritized(o) => o.next_len(),
            LinkQueue::Fifo(q) => q.front().map(Self::encoded),
        }
    }

    fn pop(&mut self) -> Option<frame::Frame> {
        match &mut self.queue {
            LinkQueue::Prioritized(o) => o.pop(),
            LinkQueue::Fifo(q) => q.pop_front(),
        }
    }
}

pub(crate) struct Packet {
    at: u64,
    from: u64,
    to: u64,
    bytes: Vec<u8>,
}

impl Sim {
    pub(crate) fn send(&mut self, from: u64, frames: Vec<(u64, frame::Frame)>, f: &Faults) {
        for (to, fr) in frames {
            if self.cfg.bandwidth.is_some() {
                // Faults apply when the link carries it (`transmit`).
                self.links
                    .entry((from, to))
                    .or_insert_with(|| Link::new(self.cfg.prioritize_control))
                    .push(fr);
                continue;
            }
            let mut b = BytesMut::new();
            frame::encode(&fr, &mut b);
            let mut bytes = b.to_vec();
            if self.rng.chance(f.drop) {
                continue;
            }
            if self.rng.chance(f.corrupt) {
                let at = self.rng.below(bytes.len() as u64) as usize;
                bytes[at] ^= 1 << self.rng.below(8);
            }
            let at = self.step + self.rng.below(f.max_delay + 1);
            if self.rng.chance(f.duplicate) {
                self.net.push(Packet {
                    at: at + self.rng.below(f.max_delay + 1),
                    from,
                    to,
                    bytes: bytes.clone(),
                });
            }
            self.net.push(Packet {
                at,
                from,
                to,
                bytes,
            });
        }
    }

    /// Moves frames off bandwidth-limited links onto the network.
    pub(crate) fn transmit(&mut self, f: &Faults) {
        let Some(bw) = self.cfg.bandwidth else {
            return;
        };
        for (&(from, to), link) in self.links.iter_mut() {
            // A limited link is a stream (TCP): it does not lose single
            // frames, its connection breaks, and what was queued is lost
            // (as the real transport drops its queue).
            if self.rng.chance(f.drop) {
                while link.pop().is_some() {}
                link.credit = 0;
                continue;
            }
            link.credit = (link.credit + bw).min(bw.max(link.largest_head()));
            while let Some(n) = link.next_len().filter(|&n| n <= link.credit) {
                link.credit -= n;
                let fr = link.pop().expect("head exists");
                let mut b = BytesMut::new();
                frame::encode(&fr, &mut b);
                let mut bytes = b.to_vec();
                if self.rng.chance(f.corrupt) {
                    let at = self.rng.below(bytes.len() as u64) as usize;
                    bytes[at] ^= 1 << self.rng.below(8);
                }
                self.net.push(Packet {
                    at: self.step,
                    from,
                    to,
                    bytes,
                });
            }
        }
    }

    pub(crate) fn deliver(&mut self, f: &Faults) {
        let _ = f;
        let now = self.step;
        let (due, later): (Vec<Packet>, Vec<Packet>) = std::mem::take(&mut self.net)
            .into_iter()
            .partition(|p| p.at <= now);
        self.net = later;
        for p in due {
            if self.cut.contains(&(p.from, p.to)) {
                continue;
            }
            let Some(s) = self.servers.iter_mut().find(|s| s.id == p.to) else {
                continue;
            };
            let Some(node) = s.node.as_mut() else {
                continue;
            };
            let refused = |e: &Engine| e.refused.frames.total() + e.refused.foreign;
            let before = refused(node.engine());
            let len = p.bytes.len() as u64;
            node.handle(Input::Bytes {
                peer: p.from,
                bytes: p.bytes,
            });
            self.report.frames_refused += refused(node.engine()) - before;
            self.report.trace = mix(self.report.trace, len);
        }
    }
}
