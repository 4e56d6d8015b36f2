//! The world the servers live in: each server's files (a `MemDir` that
//! loses what was not synced), its engine and its replicated state, and
//! the network between them (`network`); `node` drives each server's
//! engine.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use jsservice::meta_sm::Meta;
use jsservice::stream_sm::StreamMachine;
use replication::engine::Engine;
use replication::identity;
use store::{MemDir, RewriteJob, Rewritten};

use crate::{groups, mix, replica, Config, Sim, Violation, GROUP, SOURCING_GROUP};

mod network;
mod node;

pub(crate) use network::{Link, Packet};

pub(crate) struct Server {
    pub(crate) id: u64,
    pub(crate) dir: MemDir,
    pub(crate) engine: Option<Engine>,
    /// Steps until a crashed server comes back.
    pub(crate) down_for: u64,
    /// Its log took a bit flip while it was down.
    pub(crate) flipped: bool,
    /// The replicated meta state, rebuilt from the log on restart.
    pub(crate) meta: Meta,
    /// The stream replicas' stores, by group (`replica`).
    pub(crate) stores: BTreeMap<u64, replica::ReplicaStore>,
    /// Applied index of the last compaction, by group.
    pub(crate) compacted_at: BTreeMap<u64, u64>,
    /// Sync handles handed out and not yet run, by epoch, as a sync
    /// thread holds them while the engine goes on.
    pub(crate) syncing: Vec<(u64, Vec<store::SyncHandle>)>,
    /// Log rewrites asked for and not yet run, by group, as a rewrite
    /// thread holds them.
    pub(crate) rewrites: Vec<(u64, RewriteJob)>,
    /// Log rewrites run (their files written) and not yet swapped in.
    pub(crate) rewritten: Vec<(u64, Rewritten)>,
    /// Stream replicas' snapshots the engine asked for, as (group, its
    /// applied index, its log's snapshot index): taken once the entries
    /// handed out before the ask are applied, as a replica task takes
    /// them in the order they came.
    pub(crate) snapshots_asked: Vec<(u64, u64, u64)>,
}

impl Server {
    /// The replicated work-queue stream (the publish-ids stream), unless
    /// it is fetching; rebuilt from the log on restart.
    pub(crate) fn wq(&self) -> Option<&StreamMachine> {
        self.stores
            .get(&GROUP)
            .and_then(replica::ReplicaStore::current)
    }

    /// In sourced mode, the stream sourcing it.
    pub(crate) fn agg(&self) -> Option<&StreamMachine> {
        self.stores
            .get(&SOURCING_GROUP)
            .and_then(replica::ReplicaStore::current)
    }

    /// Power loss: the engine stops, and every file of the server (its
    /// logs and its replicas' stores) goes back to what was synced, with
    /// `torn` bytes of the unsynced tail kept.
    pub(crate) fn crash(&mut self, torn: usize) {
        self.engine = None;
        self.dir.crash(torn);
        for rs in self.stores.values() {
            rs.dir.crash(torn);
        }
    }

    /// Compacts a group's log; a rewrite it asks for waits for a later
    /// step, as it would for a rewrite thread.
    pub(crate) fn compact(&mut self, g: u64, index: u64, data: Vec<u8>) -> bool {
        let e = self.engine.as_mut().expect("up");
        match e.compact(g, index, data) {
            Ok(job) => {
                self.rewrites.extend(job.map(|j| (g, j)));
                true
            }
            Err(_) => false,
        }
    }
}

impl Sim {
    /// Brings crashed server `i` back: a new engine over its files, its
    /// groups created again, its replicas reopened from their stores.
    pub(crate) fn restart(&mut self, i: usize) -> Result<(), Violation> {
        let n = self.servers.len() as u64;
        let s = &mut self.servers[i];
        // The id comes back from the store, never anew.
        let (me, new) =
            identity::load_or_create(&s.dir, "", || 0).expect("the identity survives crashes");
        assert!(!new && me.id == s.id, "server {} came back as {me:?}", s.id);
        let mut e = Engine::new(me.id, Arc::new(s.dir.clone()), self.rng.next_u64());
        e.unsafe_ack_before_sync = self.cfg.unsafe_ack_before_sync;
        e.unsafe_no_pre_vote = self.cfg.unsafe_no_pre_vote;
        e.unsafe_skip_frame_checksum = self.cfg.unsafe_skip_frame_checksum;
        e.unsafe_no_registry = self.cfg.unsafe_no_registry;
        if let Some(c) = self.cfg.chunk_size {
            e.chunk_size = c;
        }
        let voters: Vec<u64> = (1..=n).collect();
        for &g in groups(&self.cfg) {
            e.create_group(g, &voters)
                .expect("one node per group: the old one is gone");
            s.compacted_at.remove(&g);
            if s.stores.contains_key(&g) {
                continue;
            }
            let data = e.snapshot(g).map(|(_, d)| d).unwrap_or_default();
            restore_state(&self.cfg, s, g, &data);
        }
        let stored: Vec<(u64, Option<(u64, Bytes)>)> = s
            .stores
            .keys()
            .map(|&g| (g, e.snapshot(g).filter(|(_, d)| !d.is_empty())))
            .collect();
        s.engine = Some(e);
        // What the crashed engine had not synced is gone, and so are its
        // rewrites (the new engine removed their files).
        s.syncing.clear();
        s.rewrites.clear();
        s.rewritten.clear();
        s.snapshots_asked.clear();
        self.report.trace = mix(self.report.trace, 3000 + s.id);
        for (g, stored) in stored {
            self.open_replica(i, g, stored)?;
        }
        Ok(())
    }
}

/// A server's files other than its identity: the bit-flip faults hit
/// these. (One damaged copy of the identity is repaired from the other;
/// both damaged stop a server for good, with an error:
/// `replication::identity`'s tests show both.)
pub(crate) fn log_files(dir: &MemDir) -> Vec<String> {
    let mut names = dir.names();
    names.retain(|n| n != identity::FILE && n != identity::COPY);
    names
}

/// The applied index of a server's replicated state of `group` (0 in
/// value mode).
pub(crate) fn state_snapshot_index(s: &Server, group: u64) -> u64 {
    let stream = match group == SOURCING_GROUP {
        true => s.agg(),
        false => s.wq(),
    };
    match stream {
        Some(w) => w.applied(),
        None => s.meta.applied(),
    }
}

/// A snapshot of a server's meta state: (its applied index, data); in
/// value mode there is no state (index from the engine). Streams take
/// theirs in `replica::snapshot`.
pub(crate) fn state_snapshot(s: &Server, group: u64) -> (Option<u64>, Vec<u8>) {
    debug_assert!(!s.stores.contains_key(&group));
    if s.meta.applied() > 0 {
        return (Some(s.meta.applied()), s.meta.snapshot());
    }
    (None, Vec::new())
}

/// Replaces a server's replicated state of `group` with a snapshot's
/// (empty data: the state a new group starts with). Streams' replicas
/// take theirs (`Sim::absorb`).
pub(crate) fn restore_state(cfg: &Config, s: &mut Server, group: u64, data: &[u8]) {
    debug_assert!(!s.stores.contains_key(&group), "replicas take their own");
    s.compacted_at.remove(&group);
    if cfg.meta {
        s.meta = if data.is_empty() {
            Meta::new()
        } else {
            Meta::restore(data).expect("meta snapshots decode")
        };
    }
}

/// The groups that replicate a stream, each kept in a file store.
pub(crate) fn stream_groups(cfg: &Config) -> impl Iterator<Item = u64> {
    let wq = cfg.work_queue || cfg.publish_ids;
    let groups: &'static [u64] = match (wq, cfg.sourced) {
        (true, true) => &[GROUP, SOURCING_GROUP],
        (true, false) => &[GROUP],
        _ => &[],
    };
    groups.iter().copied()
}
