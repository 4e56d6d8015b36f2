//! Quiet groups: a Raft group with nothing to do stops ticking, as TiKV's
//! hibernated regions do, so thousands of idle streams cost no heartbeats.
//! Failure detection goes on through one liveness signal per peer.
//!
//! The contract, as the engine keeps it:
//! - **Going quiet (leader).** A leader whose every live member (its
//!   server heard within [`SILENT_AFTER`] ticks) has its whole log, with
//!   everything committed and applied, no read, transfer or membership
//!   change pending, and the live members a quorum, counts idle ticks;
//!   after [`QUIET_AFTER`] of them (time for the last commit index to
//!   reach the followers in a heartbeat) it stops ticking and owes each
//!   member a [`Notice`] of its term and last index. A silent minority
//!   does not keep a group awake: a dead server's groups go quiet again
//!   once led without it.
//! - **Going quiet (follower).** A follower takes a notice only from the
//!   leader it follows, for its own term, with exactly the notice's index
//!   in its log and committed. Otherwise it stays awake: its election
//!   timer runs, its pre-vote wakes the leader, and both go on as Raft
//!   does.
//! - **Waking.** Any proposal, read, transfer or campaign, and any Raft
//!   message for the group, wakes it at once. A peer silent for
//!   [`SILENT_AFTER`] ticks wakes every quiet group it is a member of: a
//!   follower of that peer to time out and elect, a leader to check its
//!   quorum. Election timers go on from where they stopped: a dead
//!   server's groups elect over the usual randomized timeouts, not all
//!   at once (which, with thousands of groups, starved heartbeats).
//!   A silent peer heard again wakes every quiet group this node leads
//!   with it as a member, to be caught up. A quiet follower woken by a
//!   member other than its leader (a pre-vote) owes its leader a wake
//!   notice, so the leader's heartbeats renew its lease before it would
//!   grant the next pre-vote.
//! - **Leaving.** A leader whose node stops while its server lives on
//!   sends its members a wake notice, since their silence check would
//!   never fire.
//! - **Liveness.** Every [`HEARTBEAT_TICKS`] each engine sends every peer
//!   it shares a group with one frame (group [`PEER_FRAMES`]), carrying
//!   the notices owed to it; owed notices also leave at the next tick.
//!   Any valid frame from a peer counts as hearing from it.

use std::collections::BTreeMap;

use bytes::{BufMut, Bytes, BytesMut};
use raft::{RawNode, StateRole};

use crate::frame::{Class, Frame};
use crate::log::LogStore;
use crate::timing::{ELECTION_TICKS, HEARTBEAT_TICKS};

/// The group id of frames between engines rather than Raft nodes: one
/// liveness signal per peer, with the notices above. No Raft group has
/// it (groups start at 1).
pub const PEER_FRAMES: u64 = 0;

/// Idle ticks before a leader's group goes quiet.
pub const QUIET_AFTER: usize = 2 * HEARTBEAT_TICKS;
/// Ticks without a frame from a peer before it counts as silent.
pub const SILENT_AFTER: u64 = ELECTION_TICKS as u64;

/// A leader's word that `group` went quiet at `term` with `index` as its
/// last (committed) entry; or, with term 0, a wake: from a leader, that
/// it no longer leads `group` here, so its quiet followers must wake; to
/// a leader, from a member, that the member was woken by another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Notice {
    pub group: u64,
    pub term: u64,
    pub index: u64,
}

impl Notice {
    pub fn wake(group: u64) -> Notice {
        Notice {
            group,
            term: 0,
            index: 0,
        }
    }

    pub fn is_wake(&self) -> bool {
        self.term == 0
    }
}

const NOTICE_LEN: usize = 24;

/// A peer frame's payload: its notices, 24 little-endian bytes each.
fn encode(notices: &[Notice]) -> Bytes {
    let mut out = BytesMut::with_capacity(notices.len() * NOTICE_LEN);
    for n in notices {
        out.put_u64_le(n.group);
        out.put_u64_le(n.term);
        out.put_u64_le(n.index);
    }
    out.freeze()
}

/// The notices of a peer frame's payload; `None` if it is not whole ones.
pub fn decode(payload: &[u8]) -> Option<Vec<Notice>> {
    if !payload.len().is_multiple_of(NOTICE_LEN) {
        return None;
    }
    let word = |b: &[u8]| u64::from_le_bytes(b.try_into().expect("8 bytes"));
    Some(
        payload
            .chunks_exact(NOTICE_LEN)
            .map(|c| Notice {
                group: word(&c[..8]),
                term: word(&c[8..16]),
                index: word(&c[16..]),
            })
            .filter(|n| n.group != PEER_FRAMES)
            .collect(),
    )
}

#[derive(Debug, Default)]
struct Peer {
    last_heard: u64,
    silent: bool,
    owed: Vec<Notice>,
}

/// What an engine knows of its peers' servers.
#[derive(Debug, Default)]
pub struct Peers {
    /// Ticks so far.
    now: u64,
    /// The tick whose liveness frames went out.
    signalled: u64,
    peers: BTreeMap<u64, Peer>,
}

impl Peers {
    /// Starts watching `peer` (a member of a group here); a new one is
    /// given a full silence period from now.
    /// Every peer known, in id order.
    pub fn ids(&self) -> impl Iterator<Item = u64> + '_ {
        self.peers.keys().copied()
    }

    pub fn know(&mut self, peer: u64) {
        let now = self.now;
        self.peers.entry(peer).or_insert_with(|| Peer {
            last_heard: now,
            ..Peer::default()
        });
    }

    /// A valid frame came from `peer`. Returns whether it was silent
    /// until now (its server came back).
    pub fn heard(&mut self, peer: u64) -> bool {
        self.know(peer);
        let p = self.peers.get_mut(&peer).expect("known");
        p.last_heard = self.now;
        std::mem::replace(&mut p.silent, false)
    }

    pub fn is_live(&self, peer: u64) -> bool {
        self.peers.get(&peer).is_some_and(|p| !p.silent)
    }

    /// One tick: the peers that just became silent.
    pub fn tick(&mut self) -> Vec<u64> {
        self.now += 1;
        let now = self.now;
        let mut newly = Vec::new();
        for (&id, p) in self.peers.iter_mut() {
            if !p.silent && now - p.last_heard > SILENT_AFTER {
                p.silent = true;
                newly.push(id);
            }
        }
        newly
    }

    pub fn owe(&mut self, peer: u64, notice: Notice) {
        self.know(peer);
        self.peers.get_mut(&peer).expect("known").owed.push(notice);
    }

    /// Peer frames from `sender` due now: to every peer once on a
    /// liveness tick, else only to those owed notices.
    pub fn frames(&mut self, sender: u64) -> Vec<(u64, Frame)> {
        let liveness_tick =
            self.now.is_multiple_of(HEARTBEAT_TICKS as u64) && self.signalled != self.now;
        if liveness_tick {
            self.signalled = self.now;
        }
        let mut frames = Vec::new();
        for (&id, p) in self.peers.iter_mut() {
            if !liveness_tick && p.owed.is_empty() {
                continue;
            }
            let payload = encode(&std::mem::take(&mut p.owed));
            let frame = Frame {
                class: Class::Control,
                sender,
                group: PEER_FRAMES,
                payload,
            };
            frames.push((id, frame));
        }
        frames
    }
}

/// Whether a leader's group has nothing to do: every member whose server
/// is live holds its whole log, all of it committed and applied, nothing
/// is pending, and every live follower has answered since the last
/// quorum check (or since its server was last silent): a follower that
/// has not yet taken this leader back after a partition holds no lease,
/// and would grant another member's pre-vote if the leader went quiet
/// now.
///
/// Members whose servers are silent are passed over, as long as the live
/// ones (this leader among them) are a quorum: a group with one dead
/// member of three goes quiet too, so a dead server's thousands of groups
/// do not heartbeat for ever (they kept two cores busy enough to starve
/// the elections of the groups it led). The silent member is not
/// forgotten: hearing from its server again wakes the group
/// (`Engine::wake_led_with`), whose leader then catches it up.
pub fn leader_idle(raw: &RawNode<LogStore>, peers: &Peers) -> bool {
    let raft = &raw.raft;
    let log = &raft.raft_log;
    let last = log.last_index();
    let settled = raft.state == StateRole::Leader
        && log.committed == last
        && log.applied == last
        && log.persisted == last
        && raft.lead_transferee.is_none()
        && raft.pending_conf_index <= log.applied
        && raft.pending_read_count() == 0
        && !raw.has_ready();
    if !settled {
        return false;
    }
    let mut live = std::collections::HashSet::default();
    for (&id, pr) in raft.prs().iter() {
        if id != raft.id && !peers.is_live(id) {
            continue;
        }
        let caught_up = id == raft.id
            || (pr.matched == last
                && pr.state == raft::ProgressState::Replicate
                && pr.recent_active);
        if !caught_up {
            return false;
        }
        live.insert(id);
    }
    raft.prs().has_quorum(&live)
}

/// Whether a follower may take `notice` from `from`: it follows `from` in
/// the notice's term and holds exactly its log, committed and durable.
pub fn follower_agrees(raw: &RawNode<LogStore>, from: u64, notice: &Notice) -> bool {
    let raft = &raw.raft;
    let log = &raft.raft_log;
    raft.state == StateRole::Follower
        && raft.leader_id == from
        && raft.term == notice.term
        && log.last_index() == notice.index
        && log.committed == notice.index
        && log.persisted == notice.index
        && !raw.has_ready()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notices_round_trip_and_ragged_payloads_are_refused() {
        let notices = vec![
            Notice {
                group: 7,
                term: 3,
                index: 99,
            },
            Notice {
                group: u64::MAX,
                term: 1,
                index: 0,
            },
        ];
        assert_eq!(decode(&encode(&notices)), Some(notices));
        assert_eq!(decode(&[0u8; 23]), None);
        assert_eq!(decode(&[]), Some(vec![]));
    }

    #[test]
    fn a_peer_is_silent_after_the_period_and_live_once_heard() {
        let mut peers = Peers::default();
        peers.know(2);
        for _ in 0..SILENT_AFTER {
            assert!(peers.tick().is_empty());
        }
        assert!(peers.is_live(2));
        assert_eq!(peers.tick(), vec![2]);
        assert!(!peers.is_live(2));
        assert!(peers.tick().is_empty(), "reported once");
        peers.heard(2);
        assert!(peers.is_live(2));
    }

    #[test]
    fn owed_notices_leave_at_once_and_liveness_on_its_ticks() {
        let mut peers = Peers::default();
        peers.know(2);
        peers.know(3);
        peers.tick(); // tick 1: not a liveness tick
        assert!(peers.frames(1).is_empty());
        let n = Notice {
            group: 5,
            term: 2,
            index: 10,
        };
        peers.owe(3, n);
        let frames = peers.frames(1);
        assert_eq!(frames.len(), 1);
        assert_eq!(frames[0].0, 3);
        assert_eq!(decode(&frames[0].1.payload), Some(vec![n]));
        peers.tick(); // tick 2: liveness to everyone, nothing owed
        let frames = peers.frames(1);
        assert_eq!(frames.iter().map(|f| f.0).collect::<Vec<_>>(), [2, 3]);
        assert!(frames.iter().all(|f| f.1.payload.is_empty()));
        assert!(peers.frames(1).is_empty(), "once a tick");
    }
}
