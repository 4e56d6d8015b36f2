//! The sourced work queue, at the end.

use std::collections::BTreeMap;

use crate::{live_seqs, Sim, Violation};

impl Sim {
    /// Publishing stopped and the work queue drained: on every replica it
    /// is empty, and the sourcing stream holds every acknowledged publish
    /// and every consumed message exactly once, tagged with the sequence
    /// its PubAck named; the replicas agree.
    pub(crate) fn check_sourced_converged(&self) -> Result<(), Violation> {
        let mut first: Option<(u64, Vec<(u64, u64)>)> = None;
        for s in &self.servers {
            let (Some(wq), Some(agg)) = (s.wq(), s.agg()) else {
                continue;
            };
            let left = live_seqs(wq);
            if !left.is_empty() {
                return Err(self.violation(format!(
                    "the work queue did not drain on server {}: {left:?}",
                    s.id
                )));
            }
            // (origin sequence, value) of every sourced message.
            let store = agg.stream().store();
            let mut copies = Vec::new();
            for seq in live_seqs(agg) {
                let m = store.get(seq).ok().flatten().expect("listed");
                let origin = m
                    .headers
                    .as_deref()
                    .and_then(|h| jetstream::headers::get(h, "Nats-Stream-Source"))
                    .and_then(|t| t.split(' ').nth(1)?.parse::<u64>().ok())
                    .unwrap_or(0);
                let v = u64::from_be_bytes(m.payload[..8].try_into().expect("8 bytes"));
                copies.push((origin, v));
            }
            let mut by_origin: BTreeMap<u64, u64> = BTreeMap::new();
            for &(origin, v) in &copies {
                if by_origin.insert(origin, v).is_some() {
                    return Err(self.violation(format!(
                        "origin message {origin} sourced twice on server {}",
                        s.id
                    )));
                }
            }
            for (&v, &seq) in &self.src_published {
                if by_origin.get(&seq) != Some(&v) {
                    return Err(self.violation(format!(
                        "publish {v} acknowledged at {seq}: server {}'s sourcing stream has {:?} for it",
                        s.id,
                        by_origin.get(&seq)
                    )));
                }
            }
            if let Some(seq) = self.wq_consumed.keys().find(|q| !by_origin.contains_key(q)) {
                return Err(self.violation(format!(
                    "message {seq} was consumed but is not in server {}'s sourcing stream",
                    s.id
                )));
            }
            match &first {
                None => first = Some((s.id, copies)),
                Some((id, other)) if *other != copies => {
                    return Err(self.violation(format!(
                        "sourcing streams differ between servers {id} and {}",
                        s.id
                    )));
                }
                Some(_) => {}
            }
        }
        Ok(())
    }
}
