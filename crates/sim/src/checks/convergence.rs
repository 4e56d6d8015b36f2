//! A group converges once the faults stop.

use crate::{Sim, Violation};

impl Sim {
    /// The group has a leader and every server has committed what it has.
    pub(crate) fn check_group_converged(&self, group: u64) -> Result<(), Violation> {
        let Some(li) = self.leader_index_of(group) else {
            let states: Vec<String> = self
                .servers
                .iter()
                .map(|s| match s.engine() {
                    None => format!("{}: down", s.id),
                    Some(e) => format!(
                        "{}: term/leader {:?} damaged {} last committed {:?}",
                        s.id,
                        e.leader(group),
                        e.is_damaged(group),
                        e.committed_log(group).last().map(|x| x.0)
                    ),
                })
                .collect();
            return Err(self.violation(format!(
                "no leader of group {group} after the faults stopped ({})",
                states.join("; ")
            )));
        };
        let last = self.servers[li]
            .engine()
            .expect("up")
            .committed(group)
            .unwrap_or(0);
        for s in &self.servers {
            let Some(e) = s.engine() else {
                return Err(self.violation(format!("server {} still down", s.id)));
            };
            if e.committed(group) != Some(last) {
                return Err(self.violation(format!(
                    "server {} has committed group {group} up to {:?}, the leader {last}",
                    s.id,
                    e.committed(group)
                )));
            }
        }
        Ok(())
    }
}
