//! JetStream across a cluster: this server's Raft node (every group it
//! takes part in, driven by `cluster::node`), and the meta group — how it
//! is founded, joined and grown.
//!
//! Founding, without an operator naming the first voters:
//! - Each JetStream server has a stored peer id (`replication::identity`,
//!   in `<store_dir>/raft/`) and tells it to its routes (`FlotillaHello`).
//! - A server that restarts with a meta log keeps that group.
//! - A server that hears of a peer already holding a meta group joins it:
//!   it starts an empty node and waits for the leader to add it.
//! - Otherwise it proposes to found the group with every JetStream server
//!   it has a route to, once all of its configured routes have answered
//!   (or, after a grace period, with at least a majority of the servers
//!   it expects from its configuration). The group is founded only when
//!   every proposed member proposes exactly the same set, so two servers
//!   never found different groups from the same view; a majority
//!   requirement keeps two disjoint sets from both founding.
//! - The meta leader adds every JetStream server it has a route to and
//!   that is not yet a voter, one conf change at a time, and records each
//!   voter's name in the meta state (`MetaOp::AddPeer`) on its next
//!   pass, or at once when it places a stream, ahead of the assignment.
//!
//! Voters leave only through an operator's peer-remove: a server that
//! was wiped comes back with a new id, joins as a new peer, and the old
//! id stays visible as offline until removed.

pub mod account_api;
pub mod api;
mod applier;
mod elected;
mod leaders;
mod leading;
mod replica;
mod requests;
mod storage;
mod view;

pub use view::ClusterView;
use view::RoutedPeer;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use anyhow::Context;
use cluster::node::Event;
use cluster::node::{Config as NodeConfig, Node};
use jsservice::meta_sm::{Meta, MetaEvent, MetaOp, META_GROUP};
use parking_lot::Mutex;
use protocol::route::FlotillaHello;
use replication::engine::{ConfChange, ConfChangeType};
use replication::identity::{self, Identity};
use tokio::sync::Notify;
use tracing::{debug, info, warn};

use crate::js::JetStream;

/// Raft's clock here: elections after 0.5 to 1 s without a leader,
/// heartbeats every 100 ms.
pub const TICK: Duration = Duration::from_millis(50);
/// How long a server waits for all its configured routes before founding
/// with a majority of the servers it expects.
const FOUNDING_GRACE: Duration = Duration::from_secs(5);
const CONTROL_EVERY: Duration = Duration::from_millis(200);
/// How often the control loop looks for what deleted streams left behind
/// (first once the meta group has a leader), and how soon again once the
/// meta state has moved on since: a server back from being down learns
/// of the deletes it missed as it catches up, and sweeps then. The sweep
/// is safe on a meta state that is behind (`storage::sweep_orphans`).
const SWEEP_ORPHANS_EVERY: Duration = Duration::from_secs(60);
const SWEEP_ORPHANS_AFTER_CHANGE: Duration = Duration::from_secs(2);
/// How often the meta leader looks for streams short of replicas (one is
/// healed per look).
const HEAL_EVERY: Duration = Duration::from_secs(1);
/// The meta log is compacted behind a snapshot every this many entries.
const META_COMPACT_EVERY: u64 = 4096;
/// A peer not heard from for this long is not current (nats-server's
/// lost-quorum interval).
const CURRENT_WITHIN: Duration = Duration::from_secs(10);
/// A follower counts the leader current if it heard from it this recently.
const LEADER_CURRENT_WITHIN: Duration = Duration::from_secs(2);

pub struct JsCluster {
    pub me: Identity,
    /// The peer id was made at this start: nobody can have named it in a
    /// meta group before this process's founding round.
    fresh_id: bool,
    pub node: Node,
    pub meta: Arc<Mutex<Meta>>,
    /// This server's stream replicas.
    pub replicas: applier::Replicas,
    /// The first account's JetStream: where the Raft node and the
    /// operator's API live.
    pub js: Arc<JetStream>,
    /// Each account's JetStream, by account name (fixed at start).
    pub accounts: Arc<BTreeMap<String, Arc<JetStream>>>,
    /// What this driver sees of the core server: routes, names, shutdown.
    pub server: ClusterView,
    /// Names of peers heard of over routes, kept after the route goes (a
    /// dead voter is still shown by name).
    names: Mutex<BTreeMap<u64, String>>,
    /// The peer being added to the meta group, and when it was proposed.
    adding: Mutex<Option<(u64, Instant)>>,
    /// This server holds a meta group node (founded, joined or restarted).
    has_meta: Mutex<bool>,
    /// The voters it founded the group with (told to peers, so one that
    /// agreed but has not founded yet still can).
    founded_with: Mutex<Vec<u64>>,
    started: Instant,
    wake: Notify,
    /// This server's `server_tags`.
    pub tags: Vec<String>,
    /// When the meta leader last looked for streams short of replicas.
    healed: Mutex<Option<Instant>>,
    /// This server has seen the meta group led since it started: a
    /// request nobody serves is answered only then (while a cluster
    /// forms, requests wait for its first leader, as nats-server's do).
    pub meta_was_led: std::sync::atomic::AtomicBool,
    /// Each account's catch-all subscription (`account_api::CatchAll`).
    catch_alls: Mutex<BTreeMap<String, Arc<flotilla_core::bus::Subscription>>>,
}

impl JsCluster {
    /// Loads (or makes) the peer id, opens the Raft node (in
    /// `<store_dir>/raft/`, beside the accounts' stores), and restarts
    /// the meta group if this store has one. `accounts`: each account's
    /// JetStream, at least one.
    pub fn start(
        server: ClusterView,
        accounts: &[Arc<JetStream>],
    ) -> anyhow::Result<Arc<JsCluster>> {
        let js = accounts
            .first()
            .context("a JetStream cluster serves at least one account")?;
        let by_name: Arc<BTreeMap<String, Arc<JetStream>>> = Arc::new(
            accounts
                .iter()
                .map(|js| (js.account.clone(), js.clone()))
                .collect(),
        );
        let dir = js.store_dir.join("raft");
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("could not create {}", dir.display()))?;
        let fsdir = Arc::new(
            store::FsDir::new(&dir).with_context(|| format!("could not open {}", dir.display()))?,
        );
        let (me, new) = identity::load_or_create(fsdir.as_ref(), server.name(), || {
            // Never 0, and not a small number a test might also use.
            fastrand::u64(1 << 32..u64::MAX)
        })?;
        if new {
            info!("JetStream cluster peer id {:x} made for {}", me.id, me.name);
        }
        let meta = Arc::new(Mutex::new(Meta::new()));
        let replicas: applier::Replicas = Default::default();
        let cluster = Arc::new(OnceLock::new());
        let mut applier = applier::Applier {
            me: me.id,
            meta: meta.clone(),
            replicas: replicas.clone(),
            accounts: by_name.clone(),
            cluster: cluster.clone(),
            runtime: tokio::runtime::Handle::current(),
        };
        let (snap_meta, snap_replicas) = (meta.clone(), replicas.clone());
        let compact_replicas = replicas.clone();
        // The meta state is applied on the engine's thread, so its
        // snapshot taken there is exactly as of the applied index; a
        // stream's replica is applied by its own task and snapshots when
        // asked (`Node::snapshot_taken`).
        let (node, _events) = Node::start(NodeConfig {
            id: me.id,
            dir: fsdir.clone(),
            tick: TICK,
            seed: fastrand::u64(..),
            snapshotter: Box::new(move |group, index, stored| {
                applier::snapshot(&snap_meta, &snap_replicas, group, index, stored)
            }),
            apply: Some(Box::new(move |ev, engine| applier.apply(ev, engine))),
            compact: Some(Box::new(move |group, since| {
                if group == META_GROUP {
                    since >= META_COMPACT_EVERY
                } else {
                    applier::should_compact(&compact_replicas, group, since)
                }
            })),
        });
        node.transport.set_upgrade(server.raft_upgrade());
        let has_log = dir.join(format!("raft-{META_GROUP:016x}.log")).exists();
        let jc = Arc::new(JsCluster {
            me,
            fresh_id: new,
            node,
            meta,
            replicas,
            js: js.clone(),
            accounts: by_name.clone(),
            server: server.clone(),
            has_meta: Mutex::new(false),
            founded_with: Mutex::new(Vec::new()),
            names: Mutex::new(BTreeMap::new()),
            adding: Mutex::new(None),
            started: Instant::now(),
            wake: Notify::new(),
            tags: server.tags(),
            healed: Mutex::new(None),
            meta_was_led: std::sync::atomic::AtomicBool::new(false),
            catch_alls: Mutex::new(BTreeMap::new()),
        });
        let _ = cluster.set(Arc::downgrade(&jc));
        if has_log {
            // The meta state comes back from the log's snapshot, then the
            // entries after it (the streams it assigns here start from it).
            let voters = jc.node.restart_group(META_GROUP)?;
            if voters.is_empty() {
                // A log with no configuration: this server was joining
                // when it stopped, and joins again.
                let _ = jc.node.call(|e| e.remove_group(META_GROUP));
            } else {
                info!("JetStream cluster meta group restarted with voters {voters:x?}");
                *jc.has_meta.lock() = true;
            }
        }
        for js in by_name.values() {
            let catch_all = Arc::new(account_api::CatchAll {
                jc: Arc::downgrade(&jc),
                js: js.clone(),
                me: std::sync::OnceLock::new(),
            });
            let sub = js
                .bus
                .subscribe(
                    "$JS.API.>",
                    flotilla_core::bus::Reach::Local,
                    catch_all.clone(),
                )
                .context("could not subscribe to the JetStream API")?;
            let _ = catch_all.me.set(sub.clone());
            jc.catch_alls.lock().insert(js.account.clone(), sub);
        }
        let follower = Arc::downgrade(&jc);
        server.on_routes_changed(Box::new(move || {
            if let Some(jc) = follower.upgrade() {
                jc.poke();
            }
        }));
        server.serve_raft(jc.node.transport.clone());
        server.set_hello(jc.hello(Vec::new()));
        Ok(jc)
    }

    fn hello(&self, proposal: Vec<u64>) -> FlotillaHello {
        FlotillaHello {
            peer: self.me.id,
            founded: *self.has_meta.lock(),
            proposal,
            tags: self.tags.clone(),
        }
    }

    /// Something changed (a route came or went, a peer's hello changed).
    pub fn poke(&self) {
        self.wake.notify_one();
    }

    /// The control loop: founding, joining, and the leader's growing of
    /// the voter set.
    pub async fn run(self: Arc<Self>) {
        let server = &self.server;
        let mut shutdown = server.shutdown_signal();
        let mut last_hello = None;
        let mut last_leader = 0;
        let mut last_sweep: Option<(Instant, u64)> = None;
        let system_bus = self.server.system_bus();
        let api = api::MetaApi::start(self.clone(), system_bus.clone());
        let account_apis: Vec<_> = self
            .accounts
            .values()
            .map(|js| account_api::AccountApi::start(self.clone(), js.clone()))
            .collect();
        leaders::Leaders::start(self.clone());
        loop {
            tokio::select! {
                _ = tokio::time::sleep(CONTROL_EVERY) => {}
                _ = self.wake.notified() => {}
                _ = shutdown.changed() => return,
            }
            let peers = server.routed_peers();
            for p in &peers {
                self.node.transport.set_peer(p.id, &p.addr);
                self.names.lock().insert(p.id, p.name.clone());
            }
            let proposal = if *self.has_meta.lock() {
                self.grow(&peers);
                self.founded_with.lock().clone()
            } else {
                self.found_or_join(&peers)
            };
            let (leading, voters, leader) = self
                .meta_status()
                .map(|g| (g.is_leader, g.voters, g.leader))
                .unwrap_or_default();
            if leader != last_leader {
                last_leader = leader;
                if leading {
                    let domain = self.accounts.values().find_map(|js| js.domain.clone());
                    self.tell_meta_leader(domain.as_deref());
                }
                if leader != 0 {
                    self.meta_was_led
                        .store(true, std::sync::atomic::Ordering::Relaxed);
                    // nats-server's wording, which operators grep for.
                    info!(
                        "JetStream cluster new metadata leader: {}/{}",
                        self.peer_name(leader).unwrap_or_default(),
                        server.cluster_name()
                    );
                }
            }
            // A Raft log that could not be synced for want of space.
            if self
                .node
                .disk_full
                .load(std::sync::atomic::Ordering::Relaxed)
            {
                if let Some(js) = self.accounts.values().next() {
                    js.tell_out_of_space("");
                }
            }
            let applied = self.meta.lock().applied();
            let sweep = last_sweep.is_none_or(|(at, swept)| {
                at.elapsed() >= SWEEP_ORPHANS_EVERY
                    || (applied != swept && at.elapsed() >= SWEEP_ORPHANS_AFTER_CHANGE)
            });
            if leader != 0 && sweep {
                last_sweep = Some((Instant::now(), applied));
                self.sweep_orphans();
            }
            // The operator's API is the system account's alone; without
            // one, nobody may call it (as nats-server).
            if let Some(bus) = &system_bus {
                api.follow_leadership(bus, leading, &voters);
            }
            for account_api in &account_apis {
                account_api.follow_leadership(leading);
            }
            let hello = self.hello(proposal);
            if last_hello.as_ref() != Some(&hello) {
                server.set_hello(hello.clone());
                last_hello = Some(hello);
            }
        }
    }

    /// Removes what streams that no longer want this server left behind
    /// (`storage::sweep_orphans`), in each account's store, on the
    /// engine's thread.
    fn sweep_orphans(&self) {
        for js in self.accounts.values() {
            let (meta, replicas) = (self.meta.clone(), self.replicas.clone());
            let root = storage::replicas_root(&js.store_dir, &js.account);
            let _ = self.node.call(move |e| {
                let running = |group| replicas.lock().contains_key(&group);
                storage::sweep_orphans(e, &meta.lock(), running, &root);
            });
        }
    }

    /// Before this server has a meta node. Returns its founding proposal.
    fn found_or_join(&self, peers: &[RoutedPeer]) -> Vec<u64> {
        let ids: Vec<u64> = peers.iter().map(|p| p.id).collect();
        // A peer founded with this server's new id among the voters (it
        // saw every route before this one did): found with the same set,
        // the bootstrap every founder has, rather than join as a stranger.
        // Unfounded peers' proposals do not matter here (route churn can
        // leave them stale); they follow the founders the same way. An id
        // from an earlier start may have left the group since, and joins
        // to learn where it stands.
        if let Some(voters) = self.named_by_founders(peers) {
            return self.found(voters);
        }
        let (resolved, expected) = self.server.configured_routes();
        let mut proposal: Vec<u64> = ids.clone();
        proposal.push(self.me.id);
        proposal.sort_unstable();
        let grace_over = self.started.elapsed() >= FOUNDING_GRACE;
        // Every configured URL answered and every server behind them is
        // routed with its hello: a full mesh founds together. A route that
        // answered but is being replaced (a duplicate closing) is not yet
        // in `proposal`, so waiting for it keeps the founders in step.
        let enough = (resolved && proposal.len() >= expected)
            || (grace_over && proposal.len() * 2 > expected);
        // Every other member proposes exactly this set.
        let agreed = enough && peers.iter().all(|p| p.hello.proposal == proposal);
        if !agreed && peers.iter().any(|p| p.hello.founded) {
            let joined = self
                .node
                .call(move |e| e.join_group(META_GROUP, &ids).map(|_| ()));
            if let Some(Ok(())) = joined {
                info!("JetStream cluster joining the meta group");
                *self.has_meta.lock() = true;
            }
            return Vec::new();
        }
        match (enough, agreed) {
            (false, _) => Vec::new(),
            (true, false) => proposal,
            (true, true) => self.found(proposal),
        }
    }

    /// The voter set founders created the meta group with, if it names
    /// this server's new id and every founder that names it agrees.
    fn named_by_founders(&self, peers: &[RoutedPeer]) -> Option<Vec<u64>> {
        if !self.fresh_id {
            return None;
        }
        let mut sets = peers
            .iter()
            .filter(|p| p.hello.founded && p.hello.proposal.contains(&self.me.id))
            .map(|p| &p.hello.proposal);
        let first = sets.next()?;
        if sets.any(|other| other != first) {
            warn!("JetStream cluster founders disagree on the meta group's voters; waiting");
            return None;
        }
        Some(first.clone())
    }

    /// Creates the meta group with `voters`, this server among them.
    /// Returns the proposal to advertise: the voters once founded.
    fn found(&self, voters: Vec<u64>) -> Vec<u64> {
        debug_assert!(voters.contains(&self.me.id), "a founder is a voter");
        let bootstrap = voters.clone();
        let founded = self
            .node
            .call(move |e| e.create_group(META_GROUP, &bootstrap).map(|_| ()));
        match founded {
            Some(Ok(())) => {
                info!("JetStream cluster meta group founded with voters {voters:x?}");
                *self.has_meta.lock() = true;
                self.founded_with.lock().clone_from(&voters);
            }
            other => warn!("could not found the meta group: {other:?}"),
        }
        voters
    }

    /// With a meta node: let joiners hear from everyone; as leader, add
    /// routed JetStream servers as voters and name every voter.
    fn grow(&self, peers: &[RoutedPeer]) {
        let ids: Vec<u64> = peers.iter().map(|p| p.id).collect();
        let voters = self
            .node
            .call(move |e| {
                e.extend_join(META_GROUP, &ids);
                e.is_leader(META_GROUP)
                    .then(|| e.voters(META_GROUP).unwrap_or_default())
            })
            .flatten();
        let Some(voters) = voters else { return };
        let voter_set: BTreeSet<u64> = voters.iter().copied().collect();
        if let Some(p) = peers.iter().find(|p| !voter_set.contains(&p.id)) {
            let id = p.id;
            // One change at a time; asked again only if it has not
            // happened after a while (raft-rs drops a change proposed
            // while another is pending).
            {
                let mut adding = self.adding.lock();
                if adding.is_some_and(|(a, at)| a == id && at.elapsed() < Duration::from_secs(2)) {
                    return;
                }
                *adding = Some((id, Instant::now()));
            }
            info!(
                "JetStream cluster adding peer {} ({id:x}) to the meta group",
                p.name
            );
            let mut cc = ConfChange::default();
            cc.set_change_type(ConfChangeType::AddNode);
            cc.node_id = id;
            let _ = self
                .node
                .call(move |e| e.propose_conf_change(META_GROUP, cc));
            return;
        }
        self.heal();
        self.name_voters(&voters);
    }

    /// As meta leader: proposes a name for each voter the meta state does
    /// not name yet but this server knows (itself, or a routed server).
    /// A name another peer holds is not proposed (it would be refused).
    /// Returns the voters named; their names commit before anything
    /// proposed after this call.
    pub fn name_voters(&self, voters: &[u64]) -> Vec<u64> {
        let mut unnamed: Vec<u64> = {
            let meta = self.meta.lock();
            voters
                .iter()
                .copied()
                .filter(|&v| !meta.peers().any(|p| p.id == v))
                .collect()
        };
        if unnamed.is_empty() {
            return Vec::new();
        }
        // Two unnamed voters under one name (a server wiped before it was
        // ever named): only one is proposed, the other would be refused
        // behind it; the one that is up (this server, or routed) first.
        let up = self.routed_ids();
        unnamed.sort_by_key(|&v| (v != self.me.id && !up.contains(&v), v));
        let mut names: BTreeSet<String> = BTreeSet::new();
        let mut named = Vec::new();
        for v in unnamed {
            let name = if v == self.me.id {
                Some(self.server.name().to_string())
            } else {
                self.names.lock().get(&v).cloned()
            };
            let Some(name) = name else { continue };
            // Not proposed again and again to be refused: it is asked for
            // once the name is free (an operator removed the old peer).
            if self.meta.lock().check_add_peer(v, &name).is_err() || !names.insert(name.clone()) {
                continue;
            }
            let op = MetaOp::AddPeer { id: v, name };
            if self.node.propose(META_GROUP, op.encode()).is_ok() {
                named.push(v);
            }
        }
        named
    }
}

/// What applying a meta event changed.
pub enum MetaChange {
    None,
    Event(Box<MetaEvent>),
    /// The whole state was replaced by a leader's snapshot.
    Restored,
}

impl JsCluster {
    /// As meta leader: a stream with fewer peers than replicas (a dead
    /// server was removed and none was free then) gets servers that are up
    /// and free now, one stream per pass.
    fn heal(&self) {
        {
            let mut last = self.healed.lock();
            if last.is_some_and(|t| t.elapsed() < HEAL_EVERY) {
                return;
            }
            *last = Some(Instant::now());
        }
        let online = self.routed_ids();
        let op = {
            let meta = self.meta.lock();
            let load = |id: u64| meta.streams().filter(|a| a.peers.contains(&id)).count();
            let found = meta.streams().find_map(|a| {
                let cfg = serde_json::from_str::<jetstream::api::StreamConfig>(&a.config).ok()?;
                let want = cfg.num_replicas.max(1) as usize;
                if a.peers.len() >= want {
                    return None;
                }
                let mut spare: Vec<u64> = meta
                    .peers()
                    .map(|p| p.id)
                    .filter(|id| !a.peers.contains(id))
                    .filter(|id| *id == self.me.id || online.contains(id))
                    .collect();
                if spare.is_empty() {
                    return None;
                }
                spare.sort_by_key(|&id| (load(id), id));
                let mut peers = a.peers.clone();
                peers.extend(spare.into_iter().take(want - a.peers.len()));
                info!(
                    "JetStream cluster stream {} is short of replicas: adding peers",
                    a.label()
                );
                Some(MetaOp::UpdateStream {
                    account: a.account.clone(),
                    name: a.name.clone(),
                    config: a.config.clone(),
                    peers,
                    reply: String::new(),
                })
            });
            found
        };
        if let Some(op) = op {
            let _ = self.node.propose(META_GROUP, op.encode());
        }
    }
}

/// Applies one meta event (on the engine's thread).
pub fn apply_meta_event(meta: &Mutex<Meta>, ev: &Event) -> MetaChange {
    match ev {
        Event::Snapshot(s) if s.group == META_GROUP => {
            let restored = if s.data.is_empty() {
                Some(Meta::new())
            } else {
                Meta::restore(&s.data)
            };
            match restored {
                Some(m) => {
                    info!(
                        "JetStream cluster meta state caught up from the leader's snapshot at index {}",
                        s.index
                    );
                    *meta.lock() = m;
                    MetaChange::Restored
                }
                None => {
                    warn!("meta snapshot at {} does not decode", s.index);
                    MetaChange::None
                }
            }
        }
        Event::Committed(c) if c.group == META_GROUP => {
            let applied = meta.lock().apply(c.index, &c.data);
            match applied {
                Ok(MetaEvent::PeerAdded(p)) => {
                    info!("JetStream cluster new peer {} ({:x})", p.name, p.id);
                    MetaChange::Event(Box::new(MetaEvent::PeerAdded(p)))
                }
                Ok(MetaEvent::PeerRemoved(id)) => {
                    info!("JetStream cluster peer {id:x} removed");
                    MetaChange::Event(Box::new(MetaEvent::PeerRemoved(id)))
                }
                Ok(e) => MetaChange::Event(Box::new(e)),
                Err(e) => {
                    debug!("meta entry {} refused: {e}", c.index);
                    MetaChange::None
                }
            }
        }
        _ => MetaChange::None,
    }
}

/// nats-server's shape of a stream group's name.
pub fn stream_group_name(group: u64, cfg: &jetstream::api::StreamConfig) -> String {
    let storage = match cfg.storage {
        jetstream::api::Storage::File => 'F',
        jetstream::api::Storage::Memory => 'M',
    };
    format!(
        "S-R{}{storage}-{}",
        cfg.num_replicas.max(1),
        peer_hash(&format!("group-{group}"))
    )
}

/// nats-server's 8-character id for a server in Raft monitoring: the
/// first 8 bytes of SHA-256 of its name, each mapped into [0-9A-Za-z].
pub fn peer_hash(name: &str) -> String {
    jetstream::api::go_hash(name)
}

impl JsCluster {
    /// The name of the server with peer id `id`, if known: from the meta
    /// state, a route, or this server.
    pub fn peer_name(&self, id: u64) -> Option<String> {
        if id == self.me.id {
            return Some(self.server.name().to_string());
        }
        if let Some(p) = self.meta.lock().peers().find(|p| p.id == id) {
            return Some(p.name.clone());
        }
        self.names.lock().get(&id).cloned()
    }

    /// The members of a group as nats-server reports them in
    /// `meta_cluster` and an asset's `cluster`: with a leader known, this
    /// server is left out (it is the one asked), in name order.
    pub fn replicas(&self, g: &cluster::node::GroupStatus) -> Vec<jetstream::api::PeerInfo> {
        self.members_of(g, false)
    }

    /// `g`'s members as this server sees them: all of them with `all`
    /// (as advisories list them), else as [`Self::replicas`].
    pub fn members_of(
        &self,
        g: &cluster::node::GroupStatus,
        all: bool,
    ) -> Vec<jetstream::api::PeerInfo> {
        let routed = self.routed_ids();
        let name_of = |id: u64| {
            self.peer_name(id)
                .unwrap_or_else(|| format!("Server name unknown at this time (peerID: {id:x})"))
        };
        let mut replicas: Vec<jetstream::api::PeerInfo> = g
            .voters
            .iter()
            .filter(|&&v| all || g.leader == 0 || v != self.me.id)
            .map(|&v| {
                let seen = if v == self.me.id {
                    Some(Duration::ZERO)
                } else {
                    self.node.transport.last_heard(v)
                };
                let lag = g
                    .progress
                    .iter()
                    .find(|(id, _)| *id == v)
                    .map_or(0, |(_, m)| g.committed.saturating_sub(*m));
                // As nats-server: from the leader, a member is current when
                // caught up and heard from; from a follower, only the leader
                // (recently heard) is known to be.
                let current = if v == self.me.id {
                    true
                } else if g.is_leader {
                    lag == 0 && seen.is_some_and(|d| d <= CURRENT_WITHIN)
                } else {
                    v == g.leader && seen.is_some_and(|d| d <= LEADER_CURRENT_WITHIN)
                };
                jetstream::api::PeerInfo {
                    peer: self
                        .peer_name(v)
                        .map(|n| peer_hash(&n))
                        .unwrap_or_else(|| format!("{v:x}")),
                    name: name_of(v),
                    current,
                    // Offline: no route to it (the server is gone, not just
                    // quiet on Raft).
                    offline: v != self.me.id && !routed.contains(&v),
                    active: seen.map_or(0, |d| d.as_nanos() as u64),
                    lag,
                }
            })
            .collect();
        replicas.sort_by(|a, b| a.name.cmp(&b.name));
        replicas
    }

    /// The Raft group names of this server's streams, by group id, as
    /// nats-server names them (`S-R<replicas><F|M>-<8 characters>`), the
    /// characters derived from the group id so every server agrees.
    /// This server's stream groups: (account, nats-server's group name).
    pub fn group_names(&self) -> BTreeMap<u64, (String, String)> {
        self.replicas
            .lock()
            .iter()
            .map(|(group, r)| {
                let name = stream_group_name(*group, &r.handle.config.read());
                (*group, (r.js.account.clone(), name))
            })
            .collect()
    }

    /// The `cluster` block of a stream's (or its consumers') info, as its
    /// leader reports it.
    pub fn cluster_info(
        &self,
        group: u64,
        cfg: &jetstream::api::StreamConfig,
    ) -> jetstream::api::ClusterInfo {
        let server = &self.server;
        let g = self.node.status().group(group).cloned().unwrap_or_default();
        jetstream::api::ClusterInfo {
            name: server.cluster_name(),
            raft_group: stream_group_name(group, cfg),
            leader: match g.leader {
                0 => String::new(),
                leader => self.peer_name(leader).unwrap_or_default(),
            },
            leader_since: g.leader_since,
            // Replication runs on the cluster transport, which nats-server
            // accounts to the system account.
            system_account: true,
            traffic_account: flotilla_core::account::SYSTEM_ACCOUNT.to_string(),
            replicas: self.replicas(&g),
        }
    }

    /// Hands a group's leadership to another member that is caught up
    /// (raft-rs sends it a TimeoutNow once its log matches), or to the
    /// server named `preferred`.
    pub fn step_down(
        &self,
        group: u64,
        preferred: Option<&str>,
    ) -> Result<(), jetstream::api::ApiError> {
        use jetstream::api::E;
        let server = &self.server;
        let status = self.node.status();
        let g = status
            .groups
            .iter()
            .find(|g| g.group == group)
            .ok_or_else(|| E::STREAM_NOT_FOUND.err())?;
        let routed = self.routed_ids();
        let mut candidates = g
            .progress
            .iter()
            .filter(|(id, m)| *id != self.me.id && routed.contains(id) && *m >= g.committed)
            .map(|(id, _)| *id);
        let target = match preferred {
            // At random: a member that refuses the transfer (held while it
            // catches up) is not the only one tried, step down after step
            // down.
            None => {
                let all: Vec<u64> = candidates.collect();
                fastrand::choice(all).ok_or_else(|| {
                    E::CLUSTER_NO_PEERS.with("err", "no replacement peer connected")
                })?
            }
            Some(p) if p == server.name() => {
                return Err(E::CLUSTER_NO_PEERS
                    .with("err", format!("preferred server {p:?} is already leader")))
            }
            Some(p) => candidates
                .find(|&id| self.peer_name(id).as_deref() == Some(p))
                .ok_or_else(|| {
                    E::CLUSTER_NO_PEERS.with("err", format!("preferred server {p:?} not known"))
                })?,
        };
        self.node
            .call(move |e| e.transfer_leader(group, target))
            .ok_or_else(|| E::CLUSTER_NOT_AVAIL.err())?
            .map_err(|_| E::CLUSTER_NOT_LEADER.err())
    }

    /// The `server_tags` of the JetStream servers that are up: this one,
    /// and those it has a route to.
    pub fn live_tags(&self) -> BTreeMap<u64, Vec<String>> {
        let mut out: BTreeMap<u64, Vec<String>> = self
            .server
            .routed_peers()
            .into_iter()
            .map(|p| (p.id, p.hello.tags))
            .collect();
        out.insert(self.me.id, self.tags.clone());
        out
    }

    /// Peer ids of the JetStream servers this server has a route to.
    pub fn routed_ids(&self) -> BTreeSet<u64> {
        self.server
            .routed_peers()
            .into_iter()
            .map(|p| p.id)
            .collect()
    }

    /// Whether `leader` (a group's leader as this server's node sees it)
    /// is one this server reaches: itself, or a peer with a live route.
    /// None (0) is not.
    pub fn reaches_leader(&self, leader: u64) -> bool {
        leader != 0 && (leader == self.me.id || self.routed_ids().contains(&leader))
    }

    /// The account's catch-all subscription, once made.
    pub fn catch_all(&self, account: &str) -> Option<Arc<flotilla_core::bus::Subscription>> {
        self.catch_alls.lock().get(account).cloned()
    }

    /// The meta group as this server's node sees it.
    pub fn meta_status(&self) -> Option<cluster::node::GroupStatus> {
        self.node.status().group(META_GROUP).cloned()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn peer_hashes_match_nats_server() {
        // Values nats-server's getHash gives.
        assert_eq!(super::peer_hash("n1"), "fjFyEjc1");
        assert_eq!(super::peer_hash("n2"), "44jzkV9D");
        assert_eq!(super::peer_hash("S-1"), "esFhDys3");
    }
}
