//! The world the servers live in: each server's files (a `MemDir` that
//! loses what was not synced), its Raft node (`replication::node`, the
//! core `cluster::node` runs) and its replicated state, and the network
//! between them (`network`); `node` drives each server's node as the
//! node's threads would.

use std::collections::BTreeMap;

use bytes::Bytes;
use jsservice::meta_sm::Meta;
use jsservice::stream_sm::StreamMachine;
use replication::engine::Engine;
use replication::identity;
use replication::node::{NodeCore, SyncJob, Want};
use store::{MemDir, RewriteJob, Rewritten};

use crate::{groups, mix, replica, Config, Sim, Violation, GROUP, SOURCING_GROUP};

mod network;
pub(crate) mod node;

pub(crate) use network::{Link, Packet};
pub(crate) use node::{node_clock, Deferred};

pub(crate) struct Server {
    pub(crate) id: u64,
    pub(crate) dir: MemDir,
    /// Its Raft node, while it runs.
    pub(crate) node: Option<NodeCore>,
    /// Steps until a crashed server comes back.
    pub(crate) down_for: u64,
    /// Its log took a bit flip while it was down.
    pub(crate) flipped: bool,
    /// The replicated meta state, rebuilt from the log on restart.
    pub(crate) meta: Meta,
    /// The stream replicas' stores, by group (`replica`).
    pub(crate) stores: BTreeMap<u64, replica::ReplicaStore>,
    /// Sync jobs handed out and not yet run, as a sync thread holds them
    /// while the node goes on.
    pub(crate) syncing: Vec<SyncJob>,
    /// Log rewrites asked for and not yet run, by group, as a rewrite
    /// thread holds them.
    pub(crate) rewrites: Vec<(u64, RewriteJob)>,
    /// Log rewrites run (their files written) and not yet swapped in.
    pub(crate) rewritten: Vec<(u64, Rewritten)>,
    /// Stream replicas' snapshots the node asked for
    /// (`Snapshot::Asked`): taken once the entries handed out before the
    /// ask are applied, as a replica task takes them in the order they
    /// came.
    pub(crate) snapshots_asked: Vec<Want>,
    /// What replicas sent the node while it was in a cycle: fed to it
    /// once the cycle is over, as a channel would.
    pub(crate) inbox: Vec<Deferred>,
    /// In a cycle: from its Ready until its snapshot wants are answered.
    pub(crate) cycling: bool,
}

impl Server {
    /// Its engine, while it runs.
    pub(crate) fn engine(&self) -> Option<&Engine> {
        self.node.as_ref().map(NodeCore::engine)
    }

    pub(crate) fn is_up(&self) -> bool {
        self.node.is_some()
    }

    /// Its node, which runs.
    pub(crate) fn node(&mut self) -> &mut NodeCore {
        self.node.as_mut().expect("the server is up")
    }

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

    /// Power loss: the node stops, and every file of the server (its
    /// logs and its replicas' stores) goes back to what was synced, with
    /// `torn` bytes of the unsynced tail kept.
    pub(crate) fn crash(&mut self, torn: usize) {
        self.node = None;
        self.cycling = false;
        self.dir.crash(torn);
        for rs in self.stores.values() {
            rs.dir.crash(torn);
        }
    }
}

impl Sim {
    /// Brings crashed server `i` back: a new node over its files, its
    /// groups started again (as `Node::restart_group` does, its meta
    /// state rebuilt from the log's snapshot), its replicas reopened from
    /// their stores (as the server's applier opens them).
    pub(crate) fn restart(&mut self, i: usize) -> Result<(), Violation> {
        let n = self.servers.len() as u64;
        let s = &mut self.servers[i];
        // The id comes back from the store, never anew.
        let (me, new) =
            identity::load_or_create(&s.dir, "", || 0).expect("the identity survives crashes");
        assert!(!new && me.id == s.id, "server {} came back as {me:?}", s.id);
        let e = self.cfg.engine(me.id, &s.dir, self.rng.next_u64());
        s.node = Some(NodeCore::new(e, self.cfg.node(), node_clock(self.step)));
        // What the crashed node had not synced is gone, and so are its
        // rewrites (the new engine removed their files), and its memory.
        s.syncing.clear();
        s.rewrites.clear();
        s.rewritten.clear();
        s.snapshots_asked.clear();
        s.inbox.clear();
        s.meta = Meta::new();
        let voters: Vec<u64> = (1..=n).collect();
        let mut frames = Vec::new();
        for &g in groups(&self.cfg) {
            let s = &mut self.servers[i];
            if s.stores.contains_key(&g) {
                s.node()
                    .create_group(g, &voters)
                    .expect("one node per group: the old one is gone");
                continue;
            }
            s.node()
                .restart_group(g, &voters)
                .expect("one node per group: the old one is gone");
            let a = s.node().poll();
            self.carry_out(i, a, &mut frames)?;
        }
        debug_assert!(frames.is_empty(), "a restart sends nothing");
        let s = &mut self.servers[i];
        let e = s.engine().expect("up");
        let stored: Vec<(u64, Option<(u64, Bytes)>)> = s
            .stores
            .keys()
            .map(|&g| (g, e.snapshot(g).filter(|(_, d)| !d.is_empty())))
            .collect();
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

/// A snapshot of a server's state of `group` that is not a stream's (the
/// meta state; none in value mode), as of what it applied. Streams take
/// theirs in `replica.rs`.
pub(crate) fn state_snapshot(cfg: &Config, s: &Server, group: u64) -> Vec<u8> {
    debug_assert!(!s.stores.contains_key(&group), "replicas take their own");
    match cfg.meta {
        true => s.meta.snapshot(),
        false => Vec::new(),
    }
}

/// Replaces a server's replicated state of `group` with a snapshot's
/// (empty data: the state a new group starts with). Streams' replicas
/// take theirs (`Sim::apply_event`).
pub(crate) fn restore_state(cfg: &Config, s: &mut Server, group: u64, data: &[u8]) {
    debug_assert!(!s.stores.contains_key(&group), "replicas take their own");
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
