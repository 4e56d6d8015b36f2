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
    /// Replicas hold different messages.
    Diverged { server: String, other: String },
    /// A server exited on its own.
    Crashed { server: String, how: String },
    /// The cluster did not serve again after the faults stopped.
    NoRecovery,
}

impl Anomaly {
    pub fn kind(&self) -> &'static str {
        match self {
            Anomaly::Lost { .. } => "lost acknowledged publish",
            Anomaly::Duplicated { .. } => "duplicated message",
            Anomaly::ConflictingAcks { .. } => "two acks at one sequence",
            Anomaly::Resurrected { .. } => "confirmed ack delivered again",
            Anomaly::Diverged { .. } => "replicas diverge",
            Anomaly::Crashed { .. } => "server crashed",
            Anomaly::NoRecovery => "no recovery",
        }
    }
}

/// Judges `history` against `replicas`: each server's stream contents
/// (sequence → payload, which is the publish's id).
pub fn check(history: &[Event], replicas: &[(String, BTreeMap<u64, String>)]) -> Vec<Anomaly> {
    let mut out = Vec::new();
    let mut acked: BTreeMap<u64, &str> = BTreeMap::new();
    let mut confirmed = std::collections::BTreeSet::new();
    for event in history {
        match event {
            Event::Acked { id, seq } => {
                if let Some(other) = acked.insert(*seq, id) {
                    if other != id {
                        out.push(Anomaly::ConflictingAcks { seq: *seq });
                    }
                }
            }
            Event::Delivered { seq } if confirmed.contains(seq) => {
                out.push(Anomaly::Resurrected { seq: *seq });
            }
            Event::Confirmed { seq } => {
                confirmed.insert(*seq);
            }
            _ => {}
        }
    }
    for (server, contents) in replicas {
        for (&seq, &id) in &acked {
            if contents.get(&seq).map(String::as_str) != Some(id) {
                out.push(Anomaly::Lost {
                    server: server.clone(),
                    id: id.to_string(),
                    seq,
                });
            }
        }
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
    if let Some((first, reference)) = replicas.first() {
        for (server, contents) in &replicas[1..] {
            if contents != reference {
                out.push(Anomaly::Diverged {
                    server: server.clone(),
                    other: first.clone(),
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(pairs: &[(u64, &str)]) -> BTreeMap<u64, String> {
        pairs.iter().map(|(s, id)| (*s, id.to_string())).collect()
    }

    #[test]
    fn a_clean_history_has_no_anomaly() {
        let history = vec![
            Event::Acked {
                id: "a".into(),
                seq: 1,
            },
            Event::Unacked { id: "b".into() },
            Event::Acked {
                id: "c".into(),
                seq: 3,
            },
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
            Event::Acked {
                id: "a".into(),
                seq: 1,
            },
            Event::Acked {
                id: "b".into(),
                seq: 2,
            },
            Event::Acked {
                id: "x".into(),
                seq: 2,
            },
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
}
