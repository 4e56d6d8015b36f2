//! The engine thread's half of JetStream in a cluster: the apply hook of
//! this server's Raft node.
//!
//! - It applies the meta group's entries to the meta state, on the
//!   engine's thread, so a meta snapshot taken there is exactly as of the
//!   applied index.
//! - It starts a stream's replica (its Raft group and its actor) in the
//!   same apply that assigns the stream here (the engine's registry
//!   refuses a second node for a group: incident 5), and stops it when the
//!   stream goes.
//! - It hands every stream entry, in log order, to that replica's actor
//!   (`replica`), with whether this server led the group then. Streams
//!   are applied there, off this thread: a reader of one stream never
//!   holds up the entries of another, or the heartbeats of any.

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock, Weak};
use std::time::Instant;

use cluster::node::{Event, Snapshot};
use jetstream::api::Storage;
use jsservice::meta_sm::{Meta, MetaEvent, StreamAssignment, META_GROUP};
use jsservice::stream_sm::StreamMachine;
use parking_lot::Mutex;
use replication::engine::Engine;
use tracing::{error, info, warn};

use super::storage::{self, Opened, ReplicaStore};
use super::{replica, JsCluster, MetaChange};
use crate::js::stream::{Cmd, RaftEvent, StreamHandle};
use crate::js::JetStream;

/// One stream replica on this server.
pub struct Replica {
    pub name: String,
    /// Its account's JetStream.
    pub js: Arc<JetStream>,
    pub handle: Arc<StreamHandle>,
    /// The meta group took this server off the stream: the replica stays
    /// (it may still count towards the group's quorum) until the group's
    /// own membership no longer has it.
    pub leaving: Option<Instant>,
}

/// This server's replicas, by Raft group. Only the engine's thread adds
/// and removes; the map holds no stream state, so nobody waits on it for
/// long.
pub type Replicas = Arc<Mutex<BTreeMap<u64, Replica>>>;

pub struct Applier {
    pub me: u64,
    pub meta: Arc<Mutex<Meta>>,
    pub replicas: Replicas,
    /// Each account's JetStream, by name.
    pub accounts: Arc<BTreeMap<String, Arc<JetStream>>>,
    /// The cluster, once started (the node that calls this is part of it).
    pub cluster: Arc<OnceLock<Weak<JsCluster>>>,
    /// Where replica actors run.
    pub runtime: tokio::runtime::Handle,
}

impl Applier {
    pub fn apply(&mut self, ev: &Event, engine: &mut Engine) {
        let (c, snapshot) = match ev {
            Event::Committed(c) => (c, false),
            Event::Snapshot(c) => (c, true),
            // The meta group's proposals are answered where they were
            // made (`JsNode::propose`); a stream's go to its replica.
            Event::Dropped { group, data } => {
                if let Some(r) = self.replicas.lock().get(group) {
                    r.handle.send(Cmd::Raft(RaftEvent::Dropped(data.clone())));
                }
                return;
            }
        };
        if c.group == META_GROUP {
            return self.apply_meta(ev, engine);
        }
        let event = match snapshot {
            // An empty snapshot is a new group's bootstrap.
            true if c.data.is_empty() => return,
            true => {
                if StreamMachine::is_state_snapshot(&c.data) {
                    // Its messages are fetched before it may lead: held
                    // here, before another tick can start a campaign.
                    let _ = engine.hold(c.group, true);
                }
                RaftEvent::Snapshot {
                    index: c.index,
                    data: c.data.clone(),
                }
            }
            false => RaftEvent::Committed {
                index: c.index,
                data: c.data.clone(),
                leader: engine.is_leader(c.group),
            },
        };
        if let Some(r) = self.replicas.lock().get(&c.group) {
            r.handle.send(Cmd::Raft(event));
        }
    }

    fn apply_meta(&mut self, ev: &Event, engine: &mut Engine) {
        let change = match super::apply_meta_event(&self.meta, ev) {
            MetaChange::Event(e) => *e,
            MetaChange::Restored => return self.reconcile(engine),
            MetaChange::None => return,
        };
        match change {
            MetaEvent::StreamAssigned(a, reply) if a.peers.contains(&self.me) => {
                self.start(engine, &a, Some(reply));
            }
            MetaEvent::StreamUpdated(before, after, reply) => {
                let was = before.peers.contains(&self.me);
                let is = after.peers.contains(&self.me);
                if is && was {
                    // Its leader proposes the config, and answers once it
                    // applies it.
                    if let Some(r) = self.replicas.lock().get(&after.group) {
                        r.handle.send(Cmd::Raft(RaftEvent::Assigned {
                            config: after.config.clone(),
                            reply,
                        }));
                    }
                } else if is && !was {
                    // Added: joins, and the leader's snapshot brings the
                    // stream.
                    self.start(engine, &after, None);
                } else if was && !is {
                    if let Some(r) = self.replicas.lock().get_mut(&after.group) {
                        info!(
                            "JetStream cluster stream {} moving off this server",
                            after.label()
                        );
                        r.leaving = Some(Instant::now());
                    }
                }
            }
            MetaEvent::StreamRemoved(a) => self.stop(engine, a.group),
            _ => {}
        }
    }

    /// Starts this server's replica of an assigned stream (a new one, or
    /// one whose log is here from before a restart).
    fn start(&mut self, engine: &mut Engine, a: &StreamAssignment, reply: Option<String>) {
        if let Some(r) = self.replicas.lock().get_mut(&a.group) {
            // Assigned here again while on its way out: it stays.
            r.leaving = None;
            return;
        }
        let Some(cluster) = self.cluster.get().and_then(Weak::upgrade) else {
            return;
        };
        // Every server of a cluster is to serve the same accounts; one
        // that does not cannot hold the stream, and says so.
        let Some(js) = self.accounts.get(&a.account).cloned() else {
            error!(
                "JetStream cluster stream {} assigned here is in an account this server's JetStream does not serve",
                a.label()
            );
            return;
        };
        let Some(opened) = self.open(engine, a, &js, reply.is_some()) else {
            return;
        };
        let fresh = engine.raft_info(a.group).is_some_and(|i| i.last_index <= 1);
        if reply.is_some() && fresh && a.peers.first() == Some(&self.me) {
            // The first peer named campaigns at once, so a new stream has
            // a leader in a round trip rather than an election timeout.
            let _ = engine.campaign(a.group);
        }
        info!(
            "JetStream cluster stream {} on raft group {} with peers {:x?}",
            a.label(),
            a.group,
            a.peers
        );
        let (opened, file) = opened;
        if matches!(opened, Opened::Fetch { .. }) {
            // Held until the fetch is done: it must not lead without its
            // messages.
            let _ = engine.hold(a.group, true);
        }
        let (machine, mark, fetch) = match opened.into_start(a.created) {
            Ok(start) => start,
            Err(e) => {
                error!("Stream '{}' could not be started: {e}", a.name);
                let _ = engine.remove_group(a.group);
                return;
            }
        };
        let (handle, rx) = StreamHandle::new(machine.stream());
        js.register(handle.clone());
        self.replicas.lock().insert(
            a.group,
            Replica {
                name: a.name.clone(),
                js: js.clone(),
                handle: handle.clone(),
                leaving: None,
            },
        );
        let create = reply
            .filter(|r| fresh && !r.is_empty())
            .map(|r| (r, Instant::now()));
        let actor = replica::Actor::new(
            cluster,
            js,
            a.group,
            replica::Opened {
                machine,
                file,
                mark,
                fetch,
            },
            handle,
            create,
        );
        self.runtime.spawn(actor.run(rx));
    }

    /// The replica's Raft group, started (a new stream's members bootstrap
    /// it together; a server added later, or whose log is gone, joins, and
    /// the leader adds it and sends it a snapshot), and its state machine
    /// as the log's snapshot and its store leave it (`storage`), with the
    /// store's directory for a file stream.
    fn open(
        &mut self,
        engine: &mut Engine,
        a: &StreamAssignment,
        js: &JetStream,
        original: bool,
    ) -> Option<(Opened, Option<ReplicaStore>)> {
        let cfg = match storage::initial_config(a) {
            Ok(c) => c,
            Err(e) => {
                error!("Stream '{}': {e}", a.name);
                return None;
            }
        };
        let started = match original || engine.has_log(a.group) {
            true => engine.create_group(a.group, &a.peers),
            false => engine.join_group(a.group, &a.peers),
        };
        if let Err(e) = started {
            error!(
                "Stream '{}': raft group {} not started: {e}",
                a.name, a.group
            );
            return None;
        }
        let file = match cfg.storage {
            Storage::Memory => Ok(None),
            Storage::File => {
                ReplicaStore::new(storage::replica_dir(&js.store_dir, &js.account, a.group))
                    .map(Some)
            }
        };
        let stored = engine.snapshot(a.group).filter(|(_, d)| !d.is_empty());
        let opened = file.and_then(|file| {
            storage::open(file.as_ref(), cfg, a.created, stored).map(|o| (o, file))
        });
        match opened {
            Ok(o) => Some(o),
            Err(e) => {
                error!("Stream '{}' could not be started: {e}", a.name);
                let _ = engine.remove_group(a.group);
                None
            }
        }
    }

    fn stop(&mut self, engine: &mut Engine, group: u64) {
        if let Some(r) = self.replicas.lock().remove(&group) {
            info!("JetStream cluster stream {} removed", r.js.label(&r.name));
            r.handle.send(Cmd::Raft(RaftEvent::Stop));
            r.js.unregister(&r.handle);
        }
        if let Err(e) = engine.delete_group(group) {
            warn!("raft group {group}: {e}");
        }
    }

    /// After the meta state was replaced by a snapshot: start what is
    /// assigned here and not running, stop what is running and no longer
    /// assigned.
    fn reconcile(&mut self, engine: &mut Engine) {
        let assigned: Vec<StreamAssignment> = self
            .meta
            .lock()
            .streams()
            .filter(|a| a.peers.contains(&self.me))
            .cloned()
            .collect();
        let running: Vec<u64> = self.replicas.lock().keys().copied().collect();
        for g in running {
            if assigned.iter().any(|a| a.group == g) {
                continue;
            }
            let exists = self.meta.lock().stream_of_group(g).is_some();
            if exists {
                // Moved off this server: the replica may still count
                // towards its group's quorum until the group lets it go.
                if let Some(r) = self.replicas.lock().get_mut(&g) {
                    r.leaving.get_or_insert_with(Instant::now);
                }
            } else {
                self.stop(engine, g);
            }
        }
        for a in &assigned {
            self.start(engine, a, None);
        }
    }
}

/// Asks a stream's replica for its state as of `index` (the engine
/// compacts behind it once it comes, `Node::snapshot_taken`); the meta
/// state is snapshotted here.
pub fn snapshot(
    meta: &Mutex<Meta>,
    replicas: &Replicas,
    group: u64,
    index: u64,
    stored: u64,
) -> Snapshot {
    if group == META_GROUP {
        return Snapshot::Now(meta.lock().snapshot());
    }
    let take = Cmd::Raft(RaftEvent::TakeSnapshot { index, stored });
    match replicas.lock().get(&group) {
        Some(r) if r.handle.send(take) => Snapshot::Asked,
        _ => Snapshot::None,
    }
}

/// Entries after which a file stream's log is compacted: its snapshot is
/// the stream's state without messages, so it costs the same whatever the
/// stream holds, and the log holds an entry only this long after it is
/// applied.
const FILE_COMPACT_EVERY: u64 = 8192;

/// Compact a file stream's log every [`FILE_COMPACT_EVERY`] entries; a
/// memory stream's once it holds more entries than the stream holds
/// messages (and at least as many): its snapshot carries the messages, so
/// it is paid for by as many entries.
pub fn should_compact(replicas: &Replicas, group: u64, since: u64) -> bool {
    replicas.lock().get(&group).is_some_and(|r| {
        if r.handle.storage == Storage::File {
            return since >= FILE_COMPACT_EVERY;
        }
        let msgs = r.handle.msgs.load(std::sync::atomic::Ordering::Relaxed);
        since >= msgs.max(FILE_COMPACT_EVERY)
    })
}
