//! Acknowledged values, at the end (value mode).

use std::collections::BTreeMap;

use crate::{Sim, Violation, GROUP};

impl Sim {
    /// In value mode, every acknowledged value is in every server's
    /// committed log exactly once, at the index its acknowledgement named.
    pub(crate) fn check_acked_values(&self) -> Result<(), Violation> {
        for s in &self.servers {
            let e = s.engine().expect("checked up");
            let log = e.committed_log(GROUP);
            // Every acknowledged value, exactly once, where its ack said.
            let mut at: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
            for (index, _, data) in &log {
                if data.len() >= 8 {
                    let v = u64::from_be_bytes(data[..8].try_into().expect("8 bytes"));
                    at.entry(v).or_default().push(*index);
                }
            }
            if self.cfg.work_queue || self.cfg.publish_ids || self.cfg.meta {
                continue;
            }
            for (v, index) in &self.acked {
                match at.get(v).map(Vec::as_slice) {
                    Some([i]) if i == index => {}
                    other => {
                        return Err(self.violation(format!(
                            "acknowledged value {v} (index {index}) found at {other:?} on server {}",
                            s.id
                        )));
                    }
                }
            }
        }
        Ok(())
    }
}
