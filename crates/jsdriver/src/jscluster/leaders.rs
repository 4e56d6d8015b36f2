//! Which stream groups this server leads, and what their leaders do to
//! the groups themselves. One task, every `FOLLOW_EVERY`:
//! - each replica hears when its server starts or stops leading its group
//!   (`RaftEvent::Leading`): it serves while it leads (`replica`);
//! - a leader brings its group's members to what the meta group assigned,
//!   one conf change at a time, never leaving the voters without a current
//!   majority: new peers join as learners and vote once caught up, a
//!   member goes once the rest are current without it ([`next_step`]); a
//!   leader that is to go hands leadership over first;
//! - replicas this server was taken off are removed once their group's
//!   membership no longer names it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use replication::engine::{ConfChange, ConfChangeType};
use replication::membership::{next_step, Members, Step};
use tracing::info;

use super::JsCluster;
use crate::js::stream::{Cmd, RaftEvent};

const FOLLOW_EVERY: Duration = Duration::from_millis(50);
/// A leader proposes a membership change for its group at most this
/// often (raft-rs takes one conf change at a time).
const RECONCILE_EVERY: Duration = Duration::from_millis(500);
/// A member counts toward its group's quorum for a membership change if
/// its log is at most this far behind the commit index (a healthy
/// follower under load trails by the entries in flight)...
const CURRENT_LAG: u64 = 256;
/// ...and it was heard from this recently (liveness frames go out every
/// heartbeat, even for quiet groups).
const CURRENT_HEARD_WITHIN: Duration = Duration::from_secs(2);
/// A leader that is to go hands over at most this often.
const TRANSFER_AGAIN_AFTER: Duration = Duration::from_secs(5);

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
    /// Groups whose removal of a peer waits, and for which peer (logged
    /// once per wait).
    waiting: BTreeMap<u64, u64>,
    /// When this leader last handed each group's leadership over.
    transferred: BTreeMap<u64, Instant>,
}

impl Leaders {
    pub fn start(jc: Arc<JsCluster>) {
        let leaders = Leaders {
            jc,
            leading: BTreeSet::new(),
            last_reconcile: BTreeMap::new(),
            followed: None,
            waiting: BTreeMap::new(),
            transferred: BTreeMap::new(),
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
        self.waiting.retain(|g, _| led.contains(g));
        self.transferred.retain(|g, _| led.contains(g));
        self.retire_left(&status);
    }

    /// As a stream's leader, brings its group's members to what the meta
    /// group assigned, one conf change at a time ([`next_step`]).
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
        let me = self.jc.me.id;
        let transport = &self.jc.node.transport;
        // Down: its server unheard, or nothing of the log acknowledged (a
        // learner just added). Positive evidence, so a member that is
        // merely quiet is not taken for dead.
        let dead = |v: u64| {
            let matched = g.progress.iter().find(|(id, _)| *id == v).map(|(_, m)| *m);
            v != me
                && (matched.is_none_or(|m| m == 0)
                    || transport
                        .last_heard(v)
                        .is_none_or(|d| d > CURRENT_HEARD_WITHIN))
        };
        // Current: not down, close to the commit index, and heard by this
        // group's Raft within its last election timeout (raft-rs clears
        // that at each check, so a member may look not current for a
        // moment: a change only waits for it).
        let current = |v: u64| {
            let matched = g.progress.iter().find(|(id, _)| *id == v).map(|(_, m)| *m);
            v == me
                || (!dead(v)
                    && matched.is_some_and(|m| m + CURRENT_LAG >= g.committed)
                    && g.active.contains(&v))
        };
        let members = Members {
            me,
            voters: &g.voters,
            learners: &g.learners,
            assigned: &a.peers,
        };
        let step = next_step(&members, &current, &dead);
        let label = a.label();
        let name = |id: u64| self.jc.peer_name(id).unwrap_or_default();
        let (kind, id) = match step {
            Step::Settled => return,
            Step::Wait(id) => {
                self.last_reconcile.insert(group, Instant::now());
                if self.waiting.insert(group, id) != Some(id) {
                    info!(
                        "JetStream cluster stream {label}: removing peer {} waits until the members that stay are a current majority",
                        name(id)
                    );
                }
                return;
            }
            Step::Transfer(to) => {
                self.last_reconcile.insert(group, Instant::now());
                // A member that refuses (held while it fetches) lets raft-rs
                // drop proposals until the transfer times out: not asked
                // again at once.
                if self
                    .transferred
                    .get(&group)
                    .is_some_and(|t| t.elapsed() < TRANSFER_AGAIN_AFTER)
                {
                    return;
                }
                self.transferred.insert(group, Instant::now());
                let _ = self.jc.node.call(move |e| e.transfer_leader(group, to));
                return;
            }
            Step::Change(kind, id) => (kind, id),
        };
        self.waiting.remove(&group);
        self.last_reconcile.insert(group, Instant::now());
        let doing = match kind {
            ConfChangeType::AddLearnerNode => "adding peer",
            ConfChangeType::AddNode => "promoting caught-up peer",
            _ => "removing peer",
        };
        info!("JetStream cluster stream {label}: {doing} {}", name(id));
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
            let (meta, replicas) = (self.jc.meta.clone(), self.jc.replicas.clone());
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
                        r.js.label(&r.name)
                    );
                    r.handle.send(Cmd::Raft(RaftEvent::Stop));
                    r.js.unregister(&r.handle);
                }
                drop(reps);
                let _ = e.delete_group(group);
            });
        }
    }
}
