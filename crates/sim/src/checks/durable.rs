//! What a crash leaves of a log after a rewrite.

use std::sync::Arc;

use replication::engine::log_name;
use replication::log::LogStore;

use crate::{Sim, Violation};

impl Sim {
    /// Opens what a crash of server `i` would leave of group `g`'s log,
    /// which must hold the last entry its engine counts as persisted.
    pub(crate) fn check_durable(&self, i: usize, g: u64) -> Result<(), Violation> {
        let s = &self.servers[i];
        let Some((index, term)) = s.engine().and_then(|e| e.persisted(g)) else {
            return Ok(());
        };
        let copy: Arc<dyn store::Dir> = Arc::new(s.dir.durable_copy());
        let found = match LogStore::open(copy, &log_name(g)) {
            Ok((log, _)) => log.term_of(index),
            Err(_) => None,
        };
        if found != Some(term) && index > 0 {
            return Err(self.violation(format!(
                "server {}: group {g}'s log after a crash lacks persisted entry {index} (term {term}), found {found:?}",
                s.id
            )));
        }
        Ok(())
    }
}
