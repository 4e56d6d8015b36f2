//! The duplicate window: message ids seen recently, and the sequence each
//! was stored at. Expiry walks ids in arrival order; lookups are by id.

use std::collections::{HashMap, VecDeque};

#[derive(Default)]
pub struct Dedupe {
    ids: HashMap<String, u64>,
    order: VecDeque<(i64, String)>,
}

impl Dedupe {
    pub fn get(&self, id: &str) -> Option<u64> {
        self.ids.get(id).copied()
    }

    pub fn insert(&mut self, id: &str, seq: u64, ts: i64) {
        if self.ids.insert(id.to_string(), seq).is_none() {
            self.order.push_back((ts, id.to_string()));
        }
    }

    /// Forgets ids stored at or before `cutoff`.
    pub fn expire(&mut self, cutoff: i64) {
        while let Some((ts, _)) = self.order.front() {
            if *ts > cutoff {
                break;
            }
            let (_, id) = self.order.pop_front().expect("front exists");
            self.ids.remove(&id);
        }
    }

    /// Every id in arrival order: (time, id, sequence).
    pub fn entries(&self) -> Vec<(i64, String, u64)> {
        self.order
            .iter()
            .map(|(ts, id)| (*ts, id.clone(), self.ids[id]))
            .collect()
    }

    /// Replaces the window with `entries` (from [`Dedupe::entries`]).
    pub fn restore(&mut self, entries: Vec<(i64, String, u64)>) {
        self.ids.clear();
        self.order.clear();
        for (ts, id, seq) in entries {
            self.insert(&id, seq, ts);
        }
    }

    /// When the oldest id expires, for the driver's timer.
    pub fn oldest(&self) -> Option<i64> {
        self.order.front().map(|(ts, _)| *ts)
    }
}
