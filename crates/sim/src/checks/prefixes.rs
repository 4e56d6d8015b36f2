//! Committed prefixes agree, every step.

use std::collections::BTreeMap;

use bytes::Bytes;

use crate::{groups, Sim, Violation};

impl Sim {
    /// Committed entries agree wherever two replicas hold the same index.
    pub(crate) fn check_prefixes(&self) -> Result<(), Violation> {
        let mut seen: BTreeMap<(u64, u64), (u64, Bytes, u64)> = BTreeMap::new();
        for s in &self.servers {
            let Some(e) = s.engine() else { continue };
            for (g, (index, term, data)) in groups(&self.cfg)
                .iter()
                .flat_map(|&g| e.committed_log(g).into_iter().map(move |x| (g, x)))
            {
                match seen.get(&(g, index)) {
                    Some((t, d, who)) if *t != term || *d != data => {
                        let what = if *t != term { "terms" } else { "data" };
                        return Err(self.violation(format!(
                            "index {index} committed with different {what}: term {t} on {who}, term {term} on {}",
                            s.id
                        )));
                    }
                    Some(_) => {}
                    None => {
                        seen.insert((g, index), (term, data, s.id));
                    }
                }
            }
        }
        Ok(())
    }
}
