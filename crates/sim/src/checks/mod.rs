//! The checkers. `check_step` runs every step, `check_converged` once
//! the faults have stopped; each property has its own file:
//! - `leaders`: at most one leader per term, one live node per group on
//!   a server, every voter counted, no made-up peer id;
//! - `prefixes`: committed prefixes agree on every replica;
//! - `durable`: a log after a crash holds every entry counted persisted;
//! - `values`: every acknowledged value committed exactly once, where
//!   its acknowledgement said;
//! - `convergence`: a leader, and everyone caught up;
//! - `work_queue`: consumed messages never come back, on a leader, in a
//!   current read, or at the end;
//! - `sourced`: a sourced work queue drains into its sourcing stream;
//! - `pubacks`: every acknowledged publish stored exactly once, at its
//!   PubAck's sequence;
//! - `counters`: every counter's stored values add up, batches are
//!   stored whole, and nothing acknowledged is missing;
//! - `meta`: the meta state agrees on every server.

use crate::{groups, Sim, Violation};

mod convergence;
mod counters;
mod durable;
mod leaders;
mod meta;
mod prefixes;
mod pubacks;
mod schedules;
mod sourced;
mod values;
mod work_queue;

impl Sim {
    /// What must hold after every step.
    pub(crate) fn check_step(&mut self) -> Result<(), Violation> {
        self.check_leaders()?;
        self.check_prefixes()?;
        self.check_wq_leader()?;
        self.check_peer_ids()
    }

    /// What must hold once the faults have stopped and the cluster
    /// has had its quiet steps.
    pub(crate) fn check_converged(&mut self) -> Result<(), Violation> {
        for &g in groups(&self.cfg) {
            self.check_group_converged(g)?;
        }
        for s in &self.servers {
            if let Some(g) = s.stores.iter().find(|(_, rs)| rs.is_fetching()) {
                return Err(self.violation(format!(
                    "server {} still fetching group {}'s messages after the faults stopped",
                    s.id, g.0
                )));
            }
        }
        self.check_acked_values()?;
        if self.cfg.work_queue {
            self.check_wq_converged()?;
        }
        if self.cfg.sourced {
            self.check_sourced_converged()?;
        }
        if self.cfg.schedules {
            self.report.schedules_fired = self.check_schedules()?;
        }
        if self.cfg.publish_ids {
            self.check_pubacks()?;
        }
        if self.cfg.counters {
            self.check_counters()?;
        }
        if self.cfg.meta {
            self.check_meta_converged()?;
        }
        Ok(())
    }
}
