//! A replica whose store a read found damaged (`MsgStore::damage`: a
//! record that failed its checksum, or no longer reads back), or whose
//! store failed a write (`MsgStore::failed`: a full disk), repairs it
//! while the server runs, as a restart would (`jsservice::replica`
//! decides how): its store is opened again at its log's snapshot, what
//! that lacks is fetched from the leader, and the log's entries since the
//! snapshot are applied again over it. It does not lead meanwhile; a
//! leader hands its leadership on. While its log does not yet reach what
//! it applied (its own sync under way), the repair waits, unheld, and is
//! tried again after the next command or follow period.
//!
//! The state the damaged store produced is dropped whole, so a read that
//! failed leaves nothing behind in it: consumers wait at a record that
//! does not read back (they never skip it), and the repaired replica
//! computes their state again from the log.

use std::sync::atomic::Ordering;

use jsservice::replica::LogTail;
use tracing::{error, info};

use super::Actor;

impl Actor {
    /// Repairs the store if a read found it damaged (see the module
    /// doc). Call after every command: the damage is found by whatever
    /// read the store last.
    pub(super) fn repair_if_damaged(&mut self) {
        let Some(why) = self.core.damage() else {
            // A leader's snapshot may have replaced the damaged state
            // while a repair waited: none is under way once nothing is
            // fetched either.
            if !self.core.is_fetching() {
                self.repairing = false;
            }
            return;
        };
        // Counted and logged once: a repair whose log does not yet reach
        // what was applied is tried again after the next command.
        if !std::mem::replace(&mut self.repairing, true) {
            self.js.damage_found.fetch_add(1, Ordering::Relaxed);
            let what = match why.starts_with("a write failed") {
                true => format!("{why}; opening its store again over its log once writes succeed"),
                false => format!(
                    "a read found its store damaged ({why}); fetching it again from the leader"
                ),
            };
            error!(
                "JetStream cluster stream {}: {what}",
                self.js.label(&self.handle.name)
            );
            self.js.note_write_error(&self.handle.name, &why);
        }
        let log = self.log_since_snapshot();
        self.core.repair(log, self.clock());
        self.drain();
    }

    /// A repair is done: counted, and logged.
    pub(super) fn repaired(&mut self) {
        self.repairing = false;
        self.js.damage_repaired.fetch_add(1, Ordering::Relaxed);
        info!(
            "JetStream cluster stream {}: its damaged store is repaired",
            self.js.label(&self.handle.name)
        );
    }

    /// Holds the node back from leading, and reads its log: the latest
    /// snapshot with data, if any, and the entries after it.
    fn log_since_snapshot(&self) -> Option<LogTail> {
        let group = self.group;
        self.jc
            .node
            .call(move |e| {
                let _ = e.hold(group, true);
                let snapshot = e.snapshot(group);
                // The log goes on after its snapshot, an empty one too: a
                // new group's bootstrap, its membership at index 1.
                let after = snapshot.as_ref().map_or(0, |(index, _)| *index);
                // The store opens at a snapshot with data; an empty one
                // opens it empty, as a new replica's.
                let snapshot = snapshot.filter(|(_, d)| !d.is_empty());
                e.handed_out_after(group, after)
                    .map(|(reaches, entries)| LogTail {
                        snapshot,
                        reaches,
                        entries,
                    })
            })
            .flatten()
    }
}
