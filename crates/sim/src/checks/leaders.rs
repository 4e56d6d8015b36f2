//! Leaders, live nodes, voters and peer ids, every step.

use crate::{groups, Sim, Violation, GROUP};

impl Sim {
    /// At most one leader per term, over the whole run; one live node per
    /// group on a server; every server counts every voter.
    pub(crate) fn check_leaders(&mut self) -> Result<(), Violation> {
        for si in 0..self.servers.len() {
            let s = &self.servers[si];
            let Some(e) = s.engine() else { continue };
            for &g in groups(&self.cfg) {
                if e.live_nodes(g) > 1 {
                    return Err(
                        self.violation(format!("two live nodes on server {} for group {g}", s.id))
                    );
                }
                if e.is_leader(g) {
                    let (term, _) = e.leader(g).expect("group exists");
                    let leaders = if g == GROUP {
                        &self.report.leaders
                    } else {
                        &self.agg_leaders
                    };
                    if let Some(&other) = leaders.get(&term).filter(|&&o| o != s.id) {
                        return Err(self.violation(format!(
                            "two leaders in term {term} of group {g}: {other} and {}",
                            s.id
                        )));
                    }
                    let id = s.id;
                    if g == GROUP {
                        self.report.leaders.insert(term, id);
                    } else {
                        self.agg_leaders.insert(term, id);
                    }
                }
                let s = &self.servers[si];
                let e = s.engine().expect("up");
                if let Some(v) = e.voters(g) {
                    if v.len() != self.servers.len() {
                        return Err(self.violation(format!(
                            "server {} counts {} voters, not {}",
                            s.id,
                            v.len(),
                            self.servers.len()
                        )));
                    }
                }
            }
        }
        Ok(())
    }

    /// No server ever adopts a peer id that is not a real server's.
    pub(crate) fn check_peer_ids(&self) -> Result<(), Violation> {
        for s in &self.servers {
            if let Some(p) = s
                .meta
                .peers()
                .find(|p| p.id == 0 || p.id > self.servers.len() as u64)
            {
                return Err(self.violation(format!(
                    "server {} adopted peer id {} ({})",
                    s.id, p.id, p.name
                )));
            }
        }
        Ok(())
    }
}
