//! Consumed work-queue messages never come back.

use crate::{live_seqs, Sim, Violation};

impl Sim {
    /// Every replica's stream holds the same messages, none consumed.
    pub(crate) fn check_wq_converged(&self) -> Result<(), Violation> {
        let mut first: Option<(u64, Vec<u64>)> = None;
        for s in &self.servers {
            let Some(wq) = s.wq() else { continue };
            let seqs = live_seqs(wq);
            if let Some(seq) = seqs.iter().find(|q| self.wq_consumed.contains_key(q)) {
                return Err(self.violation(format!(
                    "consumed message {seq} is still on server {}",
                    s.id
                )));
            }
            match &first {
                None => first = Some((s.id, seqs)),
                Some((id, other)) if *other != seqs => {
                    return Err(self.violation(format!(
                        "work queue differs: server {id} has {other:?}, server {} has {seqs:?}",
                        s.id
                    )));
                }
                Some(_) => {}
            }
        }
        Ok(())
    }

    /// A consumed message must not be in a leader's stream once that
    /// leader has applied the ack's log index (a new leader may still be
    /// applying what it inherited); checked every step, and on every
    /// replica at the end.
    pub(crate) fn check_wq_leader(&self) -> Result<(), Violation> {
        let Some(li) = self.leader_index() else {
            return Ok(());
        };
        let Some(wq) = self.servers[li].wq() else {
            return Ok(());
        };
        let applied = wq.applied();
        for seq in live_seqs(wq) {
            if self.wq_consumed.get(&seq).is_some_and(|&at| at <= applied) {
                return Err(self.violation(format!(
                    "consumed message {seq} is back on leader {}",
                    self.servers[li].id
                )));
            }
        }
        Ok(())
    }

    /// Serves server `i`'s confirmed reads it has applied far enough for:
    /// the stream it reads must hold no message whose ack committed at or
    /// before the read index.
    pub(crate) fn serve_reads(&mut self, i: usize) -> Result<(), Violation> {
        let Some(wq) = self.servers[i].wq() else {
            return Ok(());
        };
        let applied = wq.applied();
        let mut keep = Vec::new();
        for (who, index) in std::mem::take(&mut self.reads_waiting) {
            if who != i || applied < index {
                keep.push((who, index));
                continue;
            }
            if self.cfg.work_queue {
                let seqs = live_seqs(wq);
                if let Some(seq) = seqs
                    .iter()
                    .find(|q| self.wq_consumed.get(q).is_some_and(|&at| at <= index))
                {
                    return Err(self.violation(format!(
                        "a current read at index {index} on server {} saw consumed message {seq}",
                        self.servers[i].id
                    )));
                }
            }
            self.report.reads += 1;
        }
        self.reads_waiting = keep;
        Ok(())
    }
}
