//! A replica whose store a read found damaged (`MsgStore::damage`: a
//! record that failed its checksum, or no longer reads back) repairs it
//! while the server runs, as a restart would: its store is opened again at
//! its log's snapshot, what that lacks is fetched from the leader
//! (`fetch`), and the log's entries since the snapshot are applied again
//! over it. It does not lead meanwhile; a leader hands its leadership on.
//!
//! The state the damaged store produced is dropped whole, so a read that
//! failed leaves nothing behind in it: consumers wait at a record that
//! does not read back (they never skip it), and the repaired replica
//! computes their state again from the log.

use bytes::Bytes;
use std::sync::atomic::Ordering;

use tracing::{error, info};

use super::storage;
use super::Actor;
use jsservice::fetch::Retention;

impl Actor {
    /// Repairs the store if a read found it damaged (see the module
    /// doc). Call after every command: the damage is found by whatever
    /// read the store last.
    pub(super) fn repair_if_damaged(&mut self) {
        if self.stopped || self.fetching.is_some() {
            // A fetch's store is checked whole when it is done.
            return;
        }
        if let Some(why) = self.machine.stream().store().damage() {
            self.repair(&why);
        }
    }

    fn repair(&mut self, why: &str) {
        self.js.damage_found.fetch_add(1, Ordering::Relaxed);
        error!(
            "JetStream cluster stream '$G > {}': a read found its store damaged ({why}); fetching it again from the leader",
            self.handle.name
        );
        let applied = self.machine.applied();
        let Some((stored, entries)) = self.log_since_snapshot(applied) else {
            return self.halt("its store is damaged and its log no longer holds what it applied");
        };
        if self.leading {
            // Fails only with no member to take over: the fetch then waits
            // for one, as the stream does.
            let _ = self.jc.step_down(self.group, None);
        }
        self.unserve();
        if let Err(e) = self.reopen(stored) {
            return self.halt(&format!(
                "its damaged store could not be opened again ({e})"
            ));
        }
        for (index, data) in entries.into_iter().filter(|(i, _)| *i <= applied) {
            // Answered when they were first applied.
            match &mut self.fetching {
                Some(f) => f.waiting.push((index, data, false)),
                None => self.apply(index, &data, false),
            }
        }
        debug_assert!(
            self.fetching.is_some() || self.machine.applied() >= applied,
            "a repaired replica is where it was"
        );
        match self.fetching.is_some() {
            // Counted repaired once fetched (`fetched`).
            true => self.repairing = true,
            false => {
                // Nothing was lost since the log's snapshot: done already.
                let group = self.group;
                let _ = self.jc.node.call(move |e| e.hold(group, false));
                self.try_serve();
                self.repaired();
            }
        }
    }

    /// A repair is done: counted, and logged.
    pub(super) fn repaired(&mut self) {
        self.js.damage_repaired.fetch_add(1, Ordering::Relaxed);
        info!(
            "JetStream cluster stream '$G > {}': its damaged store is repaired",
            self.handle.name
        );
    }

    /// Holds the node back from leading, and reads its log: the latest
    /// snapshot, if any, and the entries after it, which must reach
    /// `applied`.
    #[allow(clippy::type_complexity)]
    fn log_since_snapshot(
        &self,
        applied: u64,
    ) -> Option<(Option<(u64, Bytes)>, Vec<(u64, Bytes)>)> {
        let group = self.group;
        let (stored, (reaches, entries)) = self
            .jc
            .node
            .call(move |e| {
                let _ = e.hold(group, true);
                let snapshot = e.snapshot(group);
                // The log goes on after its snapshot, an empty one too: a
                // new group's bootstrap, its membership at index 1.
                let after = snapshot.as_ref().map_or(0, |(index, _)| *index);
                // The store opens at a snapshot with data; an empty one
                // opens it empty, as a new replica's.
                let stored = snapshot.filter(|(_, d)| !d.is_empty());
                e.handed_out_after(group, after).map(|log| (stored, log))
            })
            .flatten()?;
        (reaches >= applied).then_some((stored, entries))
    }

    /// Drops the damaged store and opens it again as a restart does: at
    /// the log's snapshot (`stored`), or empty with the stream's first
    /// config when the log has none. A store that lacks the snapshot's
    /// messages starts a fetch.
    fn reopen(&mut self, stored: Option<(u64, Bytes)>) -> Result<(), String> {
        let config = match &stored {
            Some(_) => self.machine.stream().config.clone(),
            None => {
                let meta = self.jc.meta.lock();
                let assignment = meta
                    .stream(&self.handle.name)
                    .filter(|a| a.group == self.group)
                    .ok_or("its assignment is gone")?;
                storage::initial_config(assignment)?
            }
        };
        let created = self.machine.stream().created;
        // Another store must not open the directory while this one holds
        // it.
        drop(self.take_store());
        let file = self
            .file
            .as_ref()
            .ok_or("a memory store cannot be damaged")?;
        let (machine, mark, fetch) =
            storage::open(Some(file), config, created, stored)?.into_start(created)?;
        self.machine = machine;
        self.retention = Retention::opened_at(mark);
        if let Some((index, state, store)) = fetch {
            self.begin_fetch(index, state, store);
        }
        let grew = self.handle.record(self.machine.stream_mut());
        self.js.add_usage(self.handle.storage, grew);
        Ok(())
    }
}
