//! Which stream groups this server leads, and what their leaders do to
//! the groups themselves. One task, every `FOLLOW_EVERY`:
//! - each replica hears when its server starts or stops leading its group
//!   (`RaftEvent::Leading`): it serves while it leads (`replica`);
//! - a leader brings its group's members to what the meta group assigned,
//!   one conf change at a time, added before removed; a leader that is to
//!   go hands leadership over first;
//! - replicas this server was taken off are removed once their group's
//!   membership no longer names it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use replication::engine::{ConfChange, ConfChangeType};
use tracing::info;

use super::JsCluster;
use crate::js::stream::{Cmd, RaftEvent};

const FOLLOW_EVERY: Duration = Duration::from_millis(50);
/// A leader proposes a membership change for its group at most this
/// often (raft-rs takes one conf change at a time).
const RECONCILE_EVERY: Duration = Duration::from_millis(500);

pub struct Leaders {
    jc: Arc<JsCluster>,
    /// The groups this server leads, as last told to their replicas.
    leading: BTreeSet<u64>,
    /// When each led group last had a membership change proposed.
    last_reconcile: BTreeMap<u64, Instant>,
    /// The node status version last followed, and when: with nothing new
    /// the groups are looked at again only every RECONCILE_EVERY (for the
    /// meta group's changes of membership), not at every FOLLOW_EVERY.
    followed: Option<(u64, Instant)>,
}

impl Leaders {
    pub fn start(jc: Arc<JsCluster>) {
        let leaders = Leaders {
            jc,
            leading: BTreeSet::new(),
            last_reconcile: BTreeMap::new(),
            followed: None,
        };
        tokio::spawn(leaders.run());
    }

    async fn run(mut self) {
        let mut shutdown = self.jc.server.shutdown_signal();
        let mut follow = tokio::time::interval(FOLLOW_EVERY);
        follow.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = follow.tick() => self.follow(),
                _ = shutdown.changed() => return,
            }
        }
    }

    fn follow(&mut self) {
        let status = self.jc.node.status();
        let unchanged = self.followed.is_some_and(|(version, at)| {
            version == status.version && at.elapsed() < RECONCILE_EVERY
        });
        if unchanged {
            return;
        }
        self.followed = Some((status.version, Instant::now()));
        // A new leader is told once every entry committed before it took
        // over has been handed to its replica.
        let leading: BTreeSet<u64> = status
            .groups
            .iter()
            .filter(|g| g.is_leader)
            .filter(|g| self.leading.contains(&g.group) || g.applied >= g.committed)
            .map(|g| g.group)
            .collect();
        {
            let replicas = self.jc.replicas.lock();
            for (group, r) in replicas.iter() {
                let now = leading.contains(group);
                if now != self.leading.contains(group) {
                    r.handle.send(Cmd::Raft(RaftEvent::Leading(now)));
                }
            }
            self.leading = leading
                .iter()
                .copied()
                .filter(|g| replicas.contains_key(g))
                .collect();
        }
        for g in status.groups.iter().filter(|g| g.is_leader) {
            self.reconcile(g);
        }
        let led: BTreeSet<u64> = status
            .groups
            .iter()
            .filter(|g| g.is_leader)
            .map(|g| g.group)
            .collect();
        self.last_reconcile.retain(|g, _| led.contains(g));
        self.retire_left(&status);
    }

    /// As a stream's leader, brings its group's members to what the meta
    /// group assigned: one conf change at a time, added before removed; a
    /// leader that is to go hands leadership over first.
    fn reconcile(&mut self, g: &cluster::node::GroupStatus) {
        if self
            .last_reconcile
            .get(&g.group)
            .is_some_and(|t| t.elapsed() < RECONCILE_EVERY)
        {
            return;
        }
        let Some(a) = self.jc.meta.lock().stream_of_group(g.group).cloned() else {
            return;
        };
        let group = g.group;
        let add = a.peers.iter().find(|p| !g.voters.contains(p)).copied();
        let remove = g.voters.iter().find(|v| !a.peers.contains(v)).copied();
        let change = match (add, remove) {
            (Some(id), _) => Some((ConfChangeType::AddNode, id)),
            (None, Some(id)) if id == self.jc.me.id => {
                // Hand over to a member that stays and is caught up.
                let to = g
                    .progress
                    .iter()
                    .find(|(p, m)| a.peers.contains(p) && *m >= g.committed)
                    .map(|(p, _)| *p);
                if let Some(to) = to {
                    self.last_reconcile.insert(group, Instant::now());
                    let _ = self.jc.node.call(move |e| e.transfer_leader(group, to));
                }
                None
            }
            (None, Some(id)) => Some((ConfChangeType::RemoveNode, id)),
            (None, None) => None,
        };
        let Some((kind, id)) = change else { return };
        self.last_reconcile.insert(group, Instant::now());
        info!(
            "JetStream cluster stream {}: {} peer {}",
            self.jc.js.label(&a.name),
            if kind == ConfChangeType::AddNode {
                "adding"
            } else {
                "removing"
            },
            self.jc.peer_name(id).unwrap_or_default()
        );
        let mut cc = ConfChange::default();
        cc.set_change_type(kind);
        cc.node_id = id;
        let _ = self.jc.node.call(move |e| e.propose_conf_change(group, cc));
    }

    /// Replicas this server was taken off are removed once their group's
    /// membership no longer names this server.
    fn retire_left(&mut self, status: &cluster::node::Status) {
        let me = self.jc.me.id;
        let done: Vec<u64> = self
            .jc
            .replicas
            .lock()
            .iter()
            .filter(|(_, r)| r.leaving.is_some())
            .filter(|(group, _)| {
                status
                    .groups
                    .iter()
                    .find(|g| g.group == **group)
                    .is_none_or(|g| !g.voters.contains(&me))
            })
            .map(|(group, _)| *group)
            .collect();
        for group in done {
            // Checked again on the engine's thread, where assignments are
            // applied, so a re-assignment cannot slip in between.
            let (meta, replicas, js) = (
                self.jc.meta.clone(),
                self.jc.replicas.clone(),
                self.jc.js.clone(),
            );
            let _ = self.jc.node.call(move |e| {
                let assigned = meta
                    .lock()
                    .stream_of_group(group)
                    .is_some_and(|a| a.peers.contains(&me));
                let member = e.voters(group).is_some_and(|v| v.contains(&me));
                let mut reps = replicas.lock();
                let leaving = reps.get(&group).is_some_and(|r| r.leaving.is_some());
                if assigned || member || !leaving {
                    return;
                }
                if let Some(r) = reps.remove(&group) {
                    info!(
                        "JetStream cluster stream {} left this server",
                        js.label(&r.name)
                    );
                    r.handle.send(Cmd::Raft(RaftEvent::Stop));
                    js.unregister(&r.handle);
                }
                drop(reps);
                let _ = e.delete_group(group);
            });
        }
    }
}
