//! The meta state, at the end (meta mode).

use crate::{Sim, Violation};

impl Sim {
    /// Every server holds the same meta state, whose peers are exactly
    /// the real servers.
    pub(crate) fn check_meta_converged(&self) -> Result<(), Violation> {
        let real: Vec<u64> = self.servers.iter().map(|s| s.id).collect();
        let first = self.servers[0].meta.snapshot();
        for s in &self.servers {
            let peers: Vec<u64> = s.meta.peers().map(|p| p.id).collect();
            if peers != real {
                return Err(self.violation(format!(
                    "server {} knows peers {peers:?}, the servers are {real:?}",
                    s.id
                )));
            }
            if s.meta.snapshot() != first {
                return Err(
                    self.violation(format!("server {} meta state differs from server 1", s.id))
                );
            }
        }
        Ok(())
    }
}
