//! Counters and atomic batches, at the end: on every replica each
//! counter's stored values add up message by message, every batch is
//! stored whole (all its messages, one after another) or not at all, no
//! increment is stored twice, and each counter holds at least every
//! increment acknowledged on it.

use std::collections::BTreeMap;

use jetstream::headers;

use crate::{counter_increment, counter_subject, live_seqs, Sim, Violation};

/// What one replica's stream says.
#[derive(Default)]
struct Seen {
    /// Subject -> its last value.
    totals: BTreeMap<String, i128>,
    /// Batch id -> the sequences holding its messages.
    batches: BTreeMap<String, Vec<u64>>,
    /// Message id -> how many times stored.
    ids: BTreeMap<String, u64>,
}

fn number(text: &str) -> Option<i128> {
    text.strip_prefix('+').unwrap_or(text).parse().ok()
}

impl Sim {
    pub(crate) fn check_counters(&self) -> Result<(), Violation> {
        let owed = self.acked_increments();
        for s in &self.servers {
            let Some(st) = s.wq() else { continue };
            let seen = self.walk_counters(s.id, st)?;
            for (id, copies) in &seen.ids {
                if *copies > 1 {
                    return Err(self.violation(format!(
                        "server {}: increment {id} stored {copies} times",
                        s.id
                    )));
                }
            }
            for (batch, seqs) in &seen.batches {
                let size = batch
                    .strip_prefix('b')
                    .and_then(|v| v.parse::<u64>().ok())
                    .and_then(|v| self.batch_sizes.get(&v).copied());
                let whole = seqs.windows(2).all(|w| w[1] == w[0] + 1);
                if size != Some(seqs.len() as u64) || !whole {
                    return Err(self.violation(format!(
                        "server {}: batch {batch} of {size:?} messages stored at {seqs:?}",
                        s.id
                    )));
                }
            }
            for (subject, want) in &owed {
                let total = seen.totals.get(subject).copied().unwrap_or(0);
                if total < *want {
                    return Err(self.violation(format!(
                        "server {}: counter {subject} is {total}, below the {want} acknowledged",
                        s.id
                    )));
                }
            }
        }
        Ok(())
    }

    /// Every counter message in order: its value is the one before plus
    /// its increment.
    fn walk_counters(
        &self,
        server: u64,
        st: &jsservice::stream_sm::StreamMachine,
    ) -> Result<Seen, Violation> {
        let store = st.stream().store();
        let mut seen = Seen::default();
        for seq in live_seqs(st) {
            let Ok(Some(m)) = store.get(seq) else {
                continue;
            };
            let h = m.headers.as_deref().unwrap_or_default();
            let incr = headers::get(h, headers::INCR).and_then(number);
            let value = serde_json::from_slice::<serde_json::Value>(&m.payload)
                .ok()
                .and_then(|v| v["val"].as_str().and_then(number));
            let before = seen.totals.get(&m.subject).copied().unwrap_or(0);
            match (incr, value) {
                (Some(incr), Some(value)) if value == before + incr => {
                    seen.totals.insert(m.subject.clone(), value);
                }
                _ => {
                    return Err(self.violation(format!(
                        "server {server}: {} at {seq} is {value:?} after {before} with increment {incr:?}",
                        m.subject
                    )))
                }
            }
            if let Some(batch) = headers::get(h, "Nats-Batch-Id") {
                seen.batches.entry(batch.to_string()).or_default().push(seq);
            }
            if let Some(id) = headers::get(h, headers::MSG_ID) {
                *seen.ids.entry(id.to_string()).or_default() += 1;
            }
        }
        Ok(seen)
    }

    /// Per subject, the increments the client heard were stored: a value
    /// alone by its PubAck, a batch's values by the PubAck of its last.
    fn acked_increments(&self) -> BTreeMap<String, i128> {
        let mut owed = BTreeMap::new();
        for id in self.id_acked.keys() {
            let Some(last) = id.strip_prefix('m').and_then(|v| v.parse::<u64>().ok()) else {
                continue;
            };
            let size = self.batch_sizes.get(&last).copied().unwrap_or(1);
            for v in last + 1 - size..=last {
                let incr = number(&counter_increment(v)).unwrap_or(0);
                *owed.entry(counter_subject(v)).or_default() += incr;
            }
        }
        owed
    }
}
