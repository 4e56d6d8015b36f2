//! Priority groups for pull consumers (ADR-42): which waiting request a
//! message goes to under the `overflow`, `pinned_client` and
//! `prioritized` policies, pin ids, and the checks a pull request meets.
//! As nats-server's `nextWaiting` and `processNextMsgRequest` decide.
//!
//! A pin id is made from the consumer's name, how many pins it has
//! handed out and the time, not drawn at random: every replica applies
//! the same pulls and must hand out the same id.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use crate::api::{PriorityPolicy, PullRequest};

/// The consumer's current pin: the id a pinned client sends, when it was
/// handed out, and when it lapses unless that client pulls again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pin {
    pub id: String,
    pub since: i64,
    pub deadline: i64,
    /// The priority group pinned (its events name it).
    #[serde(default)]
    pub group: String,
}

/// What a pull request says about priority groups, kept with it while it
/// waits.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ask {
    #[serde(default)]
    pub group: String,
    #[serde(default)]
    pub min_pending: i64,
    #[serde(default)]
    pub min_ack_pending: i64,
    /// The pin id the request carries, or the one it was handed.
    #[serde(default)]
    pub pin: String,
    #[serde(default)]
    pub priority: i64,
}

impl Ask {
    pub fn of(req: &PullRequest) -> Ask {
        Ask {
            group: req.group.clone(),
            min_pending: req.min_pending,
            min_ack_pending: req.min_ack_pending,
            pin: req.id.clone(),
            priority: req.priority,
        }
    }
}

/// A refused pull request: the status and its description.
pub type Refusal = (u16, &'static str);

/// nats-server's checks of a pull request's priority fields, in its
/// order. `Ok(true)` when the request names the current pin (which then
/// lasts longer).
pub fn check_pull(
    req: &PullRequest,
    policy: PriorityPolicy,
    groups: &[String],
    pin: Option<&Pin>,
) -> Result<bool, Refusal> {
    if !req.formal {
        return Ok(false);
    }
    if (req.min_pending != 0 || req.min_ack_pending != 0) && policy != PriorityPolicy::Overflow {
        return Err((400, "Bad Request - Not a Overflow Priority consumer"));
    }
    if !req.id.is_empty() && policy != PriorityPolicy::PinnedClient {
        return Err((400, "Bad Request - Not a Pinned Client Priority consumer"));
    }
    if !(0..=9).contains(&req.priority) {
        return Err((400, "Bad Request - Priority must be between 0 and 9"));
    }
    if policy == PriorityPolicy::None {
        return Ok(false);
    }
    if req.group.is_empty() {
        return Err((400, "Bad Request - Priority Group missing"));
    }
    if !groups.contains(&req.group) {
        return Err((400, "Bad Request - Invalid Priority Group"));
    }
    match pin {
        Some(pin) if pin.id == req.id => Ok(true),
        Some(_) if !req.id.is_empty() => Err((423, "Nats-Pin-Id mismatch")),
        _ => Ok(false),
    }
}

/// Where a new request waits: behind every request of its priority or a
/// more urgent one under `prioritized`, else at the back.
pub fn insert_at<T>(
    queue: &VecDeque<T>,
    policy: PriorityPolicy,
    priority: impl Fn(&T) -> i64,
    new: i64,
) -> usize {
    if policy != PriorityPolicy::Prioritized {
        return queue.len();
    }
    queue
        .iter()
        .position(|w| priority(w) > new)
        .unwrap_or(queue.len())
}

/// What to do with the request at the head of the queue for a message.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// It takes the message (handed a new pin first, if `pinned`).
    Take { pinned: bool },
    /// Not now: to the back of the queue, and try the next.
    Skip,
    /// It carries a pin that is not the consumer's: `423` and removed.
    WrongPin,
}

/// nats-server's `nextWaiting` for one request. `pending` counts the
/// matching messages not yet delivered, the one at hand included;
/// `ack_pending` those delivered and not acknowledged.
pub fn verdict(
    ask: &Ask,
    policy: PriorityPolicy,
    pin: Option<&Pin>,
    pending: u64,
    ack_pending: usize,
) -> Verdict {
    if policy == PriorityPolicy::PinnedClient {
        match pin {
            None if ask.pin.is_empty() => return Verdict::Take { pinned: true },
            None => return Verdict::WrongPin,
            Some(pin) if pin.id == ask.pin => {}
            Some(_) if ask.pin.is_empty() => return Verdict::Skip,
            Some(_) => return Verdict::WrongPin,
        }
    }
    if policy == PriorityPolicy::Overflow && (ask.min_pending > 0 || ask.min_ack_pending > 0) {
        let enough_pending = ask.min_pending > 0 && ask.min_pending as u64 <= pending;
        let enough_acks = ask.min_ack_pending > 0 && ask.min_ack_pending as usize <= ack_pending;
        if !enough_pending && !enough_acks {
            return Verdict::Skip;
        }
    }
    Verdict::Take { pinned: false }
}

/// A pin id: 22 base-62 characters, like a nuid, from the consumer's
/// name, how many pins it handed out before, and the time.
pub fn pin_id(consumer: &str, issued: u64, now: i64) -> String {
    const DIGITS: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    let mut state = consumer.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    state ^= issued.rotate_left(32) ^ now as u64;
    let mut id = String::with_capacity(22);
    for _ in 0..2 {
        let mut word = splitmix64(&mut state);
        for _ in 0..11 {
            id.push(DIGITS[(word % 62) as usize] as char);
            word /= 62;
        }
    }
    id
}

fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn formal(group: &str) -> PullRequest {
        PullRequest {
            batch: 1,
            group: group.into(),
            formal: true,
            ..Default::default()
        }
    }

    #[test]
    fn pull_checks_in_nats_server_order() {
        let groups = vec!["A".to_string()];
        let pin = Pin {
            id: "p".into(),
            since: 0,
            deadline: 10,
            group: "A".into(),
        };
        let check = |req: &PullRequest, policy, pin| check_pull(req, policy, &groups, pin);
        assert_eq!(
            check(&formal("A"), PriorityPolicy::Overflow, None),
            Ok(false)
        );
        assert_eq!(
            check(&formal(""), PriorityPolicy::Overflow, None),
            Err((400, "Bad Request - Priority Group missing"))
        );
        assert_eq!(
            check(&formal("B"), PriorityPolicy::Prioritized, None),
            Err((400, "Bad Request - Invalid Priority Group"))
        );
        let min = PullRequest {
            min_pending: 3,
            ..formal("A")
        };
        assert_eq!(
            check(&min, PriorityPolicy::Prioritized, None),
            Err((400, "Bad Request - Not a Overflow Priority consumer"))
        );
        let urgent = PullRequest {
            priority: 10,
            ..formal("A")
        };
        assert_eq!(
            check(&urgent, PriorityPolicy::Prioritized, None),
            Err((400, "Bad Request - Priority must be between 0 and 9"))
        );
        let with_id = |id: &str| PullRequest {
            id: id.into(),
            ..formal("A")
        };
        assert_eq!(
            check(&with_id("p"), PriorityPolicy::PinnedClient, Some(&pin)),
            Ok(true)
        );
        assert_eq!(
            check(&with_id("q"), PriorityPolicy::PinnedClient, Some(&pin)),
            Err((423, "Nats-Pin-Id mismatch"))
        );
        // A bare batch size is no request for a group at all.
        let bare = PullRequest {
            batch: 1,
            ..Default::default()
        };
        assert_eq!(
            check(&bare, PriorityPolicy::PinnedClient, Some(&pin)),
            Ok(false)
        );
    }

    #[test]
    fn verdicts() {
        let pin = Pin {
            id: "p".into(),
            since: 0,
            deadline: 10,
            group: "A".into(),
        };
        let ask = |pin: &str, min_pending: i64| Ask {
            group: "A".into(),
            pin: pin.into(),
            min_pending,
            ..Default::default()
        };
        use PriorityPolicy::{Overflow, PinnedClient};
        assert_eq!(
            verdict(&ask("", 0), PinnedClient, None, 1, 0),
            Verdict::Take { pinned: true }
        );
        assert_eq!(
            verdict(&ask("old", 0), PinnedClient, None, 1, 0),
            Verdict::WrongPin
        );
        assert_eq!(
            verdict(&ask("p", 0), PinnedClient, Some(&pin), 1, 0),
            Verdict::Take { pinned: false }
        );
        assert_eq!(
            verdict(&ask("", 0), PinnedClient, Some(&pin), 1, 0),
            Verdict::Skip
        );
        assert_eq!(verdict(&ask("", 10), Overflow, None, 9, 0), Verdict::Skip);
        assert_eq!(
            verdict(&ask("", 10), Overflow, None, 10, 0),
            Verdict::Take { pinned: false }
        );
    }

    #[test]
    fn prioritized_requests_wait_behind_their_betters() {
        let queue: VecDeque<i64> = [0, 1, 1, 5].into_iter().collect();
        let at = |p| insert_at(&queue, PriorityPolicy::Prioritized, |w| *w, p);
        assert_eq!((at(0), at(1), at(3), at(9)), (1, 3, 3, 4));
        assert_eq!(insert_at(&queue, PriorityPolicy::Overflow, |w| *w, 0), 4);
    }

    #[test]
    fn pin_ids_are_nuid_shaped_and_differ() {
        let a = pin_id("c", 0, 5);
        assert_eq!(a.len(), 22);
        assert!(a.bytes().all(|b| b.is_ascii_alphanumeric()));
        assert_ne!(a, pin_id("c", 1, 5));
        assert_eq!(a, pin_id("c", 0, 5));
    }
}
