//! The checker over a campaign's history and what each replica holds at
//! the end. Pure: the run records, this judges.

use std::collections::BTreeMap;

/// What the workload saw, in the order it saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A publish of `id` (its payload) was acknowledged at `seq`.
    Acked { id: String, seq: u64 },
    /// A publish gave up without an acknowledgement (it may or may not
    /// be stored).
    Unacked { id: String },
    /// The consumer was handed the message at `seq`.
    Delivered { seq: u64 },
    /// A double ack of `seq` was confirmed: it must never come again.
    Confirmed { seq: u64 },
    /// A delete of the message at `seq` was confirmed (or it was found
    /// already gone): no read may find it again, and no replica keep it.
    Deleted { seq: u64 },
    /// A delete of `seq` went unanswered: it may have been applied, so
    /// the message may be missing, or not.
    MaybeDeleted { seq: u64 },
    /// A read of `seq` that began after its delete was confirmed found
    /// the message.
    ReadAfterDelete { seq: u64 },
}

/// Something the promise forbids.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Anomaly {
    /// An acknowledged publish is missing from a replica, or not at its
    /// acknowledged sequence.
    Lost {
        server: String,
        id: String,
        seq: u64,
    },
    /// One id stored at two sequences.
    Duplicated {
        server: String,
        id: String,
        seqs: (u64, u64),
    },
    /// Two ids acknowledged at one sequence.
    ConflictingAcks { seq: u64 },
    /// A message whose ack was confirmed was delivered again.
    Resurrected { seq: u64 },
    /// A deleted message was read again, or a replica still holds it.
    DeletedReadAgain { server: Option<String>, seq: u64 },
    /// Replicas hold different messages.
    Diverged { server: String, other: String },
    /// A consumed work-queue message is still in (a replica of) the
    /// work queue: its delete was lost.
    ConsumedStillQueued {
        server: String,
        id: String,
        seq: u64,
    },
    /// A mirror holds another message than its origin at a sequence.
    Miscopied {
        server: String,
        seq: u64,
        id: String,
        copied: String,
    },
    /// A key's compare-and-set history has no linearization.
    NotLinearizable { key: String },
    /// The linearizability search gave up on a key.
    Undecided { key: String },
    /// A server exited on its own.
    Crashed { server: String, how: String },
    /// The cluster did not serve again after the faults stopped.
    NoRecovery,
    /// A replica of a stream could not be read after the faults: it had
    /// no leader, or would not lead. What it holds goes unchecked.
    Unread { stream: String, what: String },
}

impl Anomaly {
    pub fn kind(&self) -> &'static str {
        match self {
            Anomaly::Lost { .. } => "lost acknowledged publish",
            Anomaly::Duplicated { .. } => "duplicated message",
            Anomaly::ConflictingAcks { .. } => "two acks at one sequence",
            Anomaly::Resurrected { .. } => "confirmed ack delivered again",
            Anomaly::DeletedReadAgain { .. } => "deleted message read again",
            Anomaly::Diverged { .. } => "replicas diverge",
            Anomaly::ConsumedStillQueued { .. } => "consumed work-queue message still queued",
            Anomaly::Miscopied { .. } => "mirror holds another message",
            Anomaly::NotLinearizable { .. } => "compare-and-set not linearizable",
            Anomaly::Undecided { .. } => "linearizability undecided",
            Anomaly::Crashed { .. } => "server crashed",
            Anomaly::NoRecovery => "no recovery",
            Anomaly::Unread { .. } => "replica not readable",
        }
    }
}

/// One replica's contents: sequence → payload (the publish's id).
pub type Replicas = [(String, BTreeMap<u64, String>)];

/// Judges `history` against `replicas`: each server's stream contents
/// (sequence → payload, which is the publish's id).
pub fn check(history: &[Event], replicas: &Replicas) -> Vec<Anomaly> {
    let mut out = Vec::new();
    let acked = acked(history, &mut out);
    let mut confirmed = std::collections::BTreeSet::new();
    let mut deleted = std::collections::BTreeSet::new();
    let mut maybe = std::collections::BTreeSet::new();
    for event in history {
        match event {
            Event::Delivered { seq } if confirmed.contains(seq) => {
                out.push(Anomaly::Resurrected { seq: *seq });
            }
            Event::Confirmed { seq } => {
                confirmed.insert(*seq);
            }
            Event::Deleted { seq } => {
                deleted.insert(*seq);
            }
            Event::MaybeDeleted { seq } => {
                maybe.insert(*seq);
            }
            Event::ReadAfterDelete { seq } => out.push(Anomaly::DeletedReadAgain {
                server: None,
                seq: *seq,
            }),
            _ => {}
        }
    }
    for (server, contents) in replicas {
        for &seq in &deleted {
            if contents.contains_key(&seq) {
                out.push(Anomaly::DeletedReadAgain {
                    server: Some(server.clone()),
                    seq,
                });
            }
        }
        for (&seq, &id) in &acked {
            if deleted.contains(&seq) {
                continue;
            }
            // Gone through a delete whose answer was lost, or not.
            if maybe.contains(&seq) && !contents.contains_key(&seq) {
                continue;
            }
            if contents.get(&seq).map(String::as_str) != Some(id) {
                out.push(Anomaly::Lost {
                    server: server.clone(),
                    id: id.to_string(),
                    seq,
                });
            }
        }
    }
    out.extend(duplicates(replicas));
    out.extend(divergence(replicas));
    out
}

/// Judges a work queue that a second stream sources (and so consumes):
/// every acknowledged publish is in the archive, once, or
/// still queued (not both: what the archive took, the queue deleted).
pub fn check_work(history: &[Event], queue: &Replicas, archive: &Replicas) -> Vec<Anomaly> {
    let mut out = Vec::new();
    let acked = acked(history, &mut out);
    // Each archive replica's ids as a set: a lookup per acknowledged id,
    // not a scan (an unpaced campaign archives hundreds of thousands).
    let archived: Vec<std::collections::BTreeSet<&str>> = archive
        .iter()
        .map(|(_, contents)| contents.values().map(String::as_str).collect())
        .collect();
    for (&seq, &id) in &acked {
        let queued = !queue.is_empty()
            && queue
                .iter()
                .all(|(_, contents)| contents.get(&seq).map(String::as_str) == Some(id));
        for ((server, _), ids) in archive.iter().zip(&archived) {
            if !ids.contains(id) && !queued {
                out.push(Anomaly::Lost {
                    server: server.clone(),
                    id: id.to_string(),
                    seq,
                });
            }
        }
    }
    let in_archive: std::collections::BTreeSet<&str> = archive
        .iter()
        .flat_map(|(_, contents)| contents.values().map(String::as_str))
        .collect();
    for (server, contents) in queue {
        for (&seq, id) in contents {
            if in_archive.contains(id.as_str()) {
                out.push(Anomaly::ConsumedStillQueued {
                    server: server.clone(),
                    id: id.clone(),
                    seq,
                });
            }
        }
    }
    out.extend(duplicates(archive));
    out.extend(divergence(queue));
    out.extend(divergence(archive));
    out
}

/// Judges a mirror of the main stream, read once it has caught up: each
/// of its replicas holds every message the main stream's (first read)
/// replica holds, at the same sequence. A message deleted from the main
/// stream after it was copied stays in the mirror, and one deleted
/// before may be missing from both; anything else missing was lost.
pub fn check_mirror(main: &Replicas, mirror: &Replicas) -> Vec<Anomaly> {
    let mut out = Vec::new();
    let Some((_, origin)) = main.first() else {
        return out;
    };
    for (server, contents) in mirror {
        for (&seq, id) in origin {
            match contents.get(&seq) {
                Some(copied) if copied == id => {}
                Some(copied) => out.push(Anomaly::Miscopied {
                    server: server.clone(),
                    seq,
                    id: id.clone(),
                    copied: copied.clone(),
                }),
                None => out.push(Anomaly::Lost {
                    server: server.clone(),
                    id: id.clone(),
                    seq,
                }),
            }
        }
    }
    out.extend(duplicates(mirror));
    out.extend(divergence(mirror));
    out
}

/// The acknowledged publishes by sequence; two ids at one sequence are
/// an anomaly.
fn acked<'a>(history: &'a [Event], out: &mut Vec<Anomaly>) -> BTreeMap<u64, &'a str> {
    let mut acked: BTreeMap<u64, &str> = BTreeMap::new();
    for event in history {
        if let Event::Acked { id, seq } = event {
            if let Some(other) = acked.insert(*seq, id) {
                if other != id {
                    out.push(Anomaly::ConflictingAcks { seq: *seq });
                }
            }
        }
    }
    acked
}

/// One id stored at two sequences of one replica.
fn duplicates(replicas: &Replicas) -> Vec<Anomaly> {
    let mut out = Vec::new();
    for (server, contents) in replicas {
        let mut seen: BTreeMap<&str, u64> = BTreeMap::new();
        for (&seq, id) in contents {
            if let Some(first) = seen.insert(id, seq) {
                out.push(Anomaly::Duplicated {
                    server: server.clone(),
                    id: id.clone(),
                    seqs: (first, seq),
                });
            }
        }
    }
    out
}

fn divergence(replicas: &Replicas) -> Vec<Anomaly> {
    let Some((first, reference)) = replicas.first() else {
        return Vec::new();
    };
    replicas[1..]
        .iter()
        .filter(|(_, contents)| contents != reference)
        .map(|(server, _)| Anomaly::Diverged {
            server: server.clone(),
            other: first.clone(),
        })
        .collect()
}

/// The compare-and-set writes, judged key by key.
pub fn check_kv(ops: &[crate::linear::Op]) -> Vec<Anomaly> {
    use crate::linear::Verdict;
    crate::linear::check(ops)
        .into_iter()
        .filter_map(|(key, verdict)| match verdict {
            Verdict::Linearizable => None,
            Verdict::NotLinearizable => Some(Anomaly::NotLinearizable { key }),
            Verdict::Undecided => Some(Anomaly::Undecided { key }),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An acknowledged publish of `id` at `seq`.
    fn acked(id: &str, seq: u64) -> Event {
        Event::Acked { id: id.into(), seq }
    }

    fn stored(pairs: &[(u64, &str)]) -> BTreeMap<u64, String> {
        pairs.iter().map(|(s, id)| (*s, id.to_string())).collect()
    }

    #[test]
    fn a_clean_history_has_no_anomaly() {
        let history = vec![
            acked("a", 1),
            Event::Unacked { id: "b".into() },
            acked("c", 3),
            Event::Delivered { seq: 1 },
            Event::Confirmed { seq: 1 },
            Event::Delivered { seq: 2 },
        ];
        let contents = stored(&[(1, "a"), (2, "b"), (3, "c")]);
        let replicas = vec![("S0".into(), contents.clone()), ("S1".into(), contents)];
        assert_eq!(check(&history, &replicas), vec![]);
    }

    #[test]
    fn each_anomaly_is_found() {
        let history = vec![
            acked("a", 1),
            acked("b", 2),
            acked("x", 2),
            Event::Delivered { seq: 1 },
            Event::Confirmed { seq: 1 },
            Event::Delivered { seq: 1 },
        ];
        let replicas = vec![
            ("S0".into(), stored(&[(1, "a"), (2, "b"), (3, "a")])),
            ("S1".into(), stored(&[(2, "b")])),
        ];
        let kinds: Vec<&str> = check(&history, &replicas)
            .iter()
            .map(Anomaly::kind)
            .collect();
        for kind in [
            "two acks at one sequence",
            "confirmed ack delivered again",
            "lost acknowledged publish",
            "duplicated message",
            "replicas diverge",
        ] {
            assert!(kinds.contains(&kind), "{kind} not found in {kinds:?}");
        }
    }

    #[test]
    fn deleted_messages_are_not_lost_and_must_stay_gone() {
        let history = vec![
            acked("a", 1),
            acked("b", 2),
            acked("c", 3),
            Event::Deleted { seq: 1 },
            Event::Deleted { seq: 3 },
        ];
        let clean = vec![("S0".into(), stored(&[(2, "b")]))];
        assert_eq!(check(&history, &clean), vec![]);
        // A delete with no answer: the message may be gone, or kept.
        let mut unanswered = history.clone();
        unanswered.push(Event::MaybeDeleted { seq: 2 });
        assert_eq!(check(&unanswered, &clean), vec![]);
        assert_eq!(check(&unanswered, &[("S0".into(), stored(&[]))]), vec![]);
        let mut read = history.clone();
        read.push(Event::ReadAfterDelete { seq: 1 });
        let kept = vec![("S0".into(), stored(&[(2, "b"), (3, "c")]))];
        let found = check(&read, &kept);
        assert_eq!(
            found,
            vec![
                Anomaly::DeletedReadAgain {
                    server: None,
                    seq: 1
                },
                Anomaly::DeletedReadAgain {
                    server: Some("S0".into()),
                    seq: 3
                },
            ]
        );
    }

    #[test]
    fn a_work_queue_drained_into_its_archive_is_clean() {
        let history = vec![
            acked("a", 1),
            acked("b", 2),
            acked("c", 3),
            Event::Unacked { id: "d".into() },
        ];
        // "c" not archived yet, still queued everywhere.
        let queue = vec![
            ("S0".into(), stored(&[(3, "c")])),
            ("S1".into(), stored(&[(3, "c")])),
        ];
        let archive = vec![
            ("S0".into(), stored(&[(1, "a"), (2, "b"), (3, "d")])),
            ("S1".into(), stored(&[(1, "a"), (2, "b"), (3, "d")])),
        ];
        assert_eq!(check_work(&history, &queue, &archive), vec![]);
    }

    #[test]
    fn mirror_anomalies_are_found() {
        let main = vec![("S0".into(), stored(&[(2, "b"), (3, "c"), (4, "d")]))];
        // 1 deleted from the main stream after it was copied: kept.
        let clean = stored(&[(1, "a"), (2, "b"), (3, "c"), (4, "d")]);
        let mirror = vec![("S0".into(), clean.clone()), ("S1".into(), clean)];
        assert_eq!(check_mirror(&main, &mirror), vec![]);
        // S1: "c" missing, "b" twice, another message at 4.
        let bad = stored(&[(1, "a"), (2, "b"), (4, "x"), (5, "b")]);
        let mirror = vec![
            ("S0".into(), stored(&[(2, "b"), (3, "c"), (4, "d")])),
            ("S1".into(), bad),
        ];
        let kinds: Vec<&str> = check_mirror(&main, &mirror)
            .iter()
            .map(Anomaly::kind)
            .collect();
        for kind in [
            "lost acknowledged publish",
            "mirror holds another message",
            "duplicated message",
            "replicas diverge",
        ] {
            assert!(kinds.contains(&kind), "{kind} not found in {kinds:?}");
        }
    }

    #[test]
    fn work_queue_anomalies_are_found() {
        let history = vec![acked("a", 1), acked("b", 2), acked("c", 3)];
        // "a" archived and still queued on S1; "b" archived twice; "c"
        // nowhere.
        let queue = vec![
            ("S0".into(), stored(&[])),
            ("S1".into(), stored(&[(1, "a")])),
        ];
        let archive = vec![("S0".into(), stored(&[(1, "a"), (2, "b"), (3, "b")]))];
        let kinds: Vec<&str> = check_work(&history, &queue, &archive)
            .iter()
            .map(Anomaly::kind)
            .collect();
        for kind in [
            "consumed work-queue message still queued",
            "duplicated message",
            "lost acknowledged publish",
            "replicas diverge",
        ] {
            assert!(kinds.contains(&kind), "{kind} not found in {kinds:?}");
        }
    }
}
