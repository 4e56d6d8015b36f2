//! The meta group's operator API, answered by the meta leader only (as
//! nats-server subscribes these on the meta leader):
//! - `$JS.API.META.LEADER.STEPDOWN`: hand leadership to another voter,
//!   optionally a preferred one;
//! - `$JS.API.SERVER.REMOVE`: take a server out of the meta group (its
//!   id is never reused); the reply waits until the removal commits.
//!
//! Both listen in the system account only, and answer there: another
//! account's request goes unanswered, as nats-server ignores it.

use std::sync::Arc;

use jetstream::api::{ApiError, E};
use jsservice::meta_sm::{MetaOp, META_GROUP};
use jsservice::reply::{Answer, Kind, Success};
use jsservice::request::{
    classify, Inbound, Mode, OperatorRequest, Request, META_STEPDOWN, SERVER_REMOVE,
};
use parking_lot::Mutex;
use replication::engine::{ConfChange, ConfChangeType};
use tokio::sync::mpsc;
use tracing::info;

use super::leading::follow;
use super::{peer_hash, JsCluster};
use crate::js::new_consumer_name;
use crate::js::stream::PublishOut;
use flotilla_core::bus::{Bus, Subscription};

/// A removal waiting to commit: the peer and where to answer.
pub struct PendingRemoval {
    pub peer: u64,
    pub reply: String,
}

/// The API's subscriptions while this server leads the meta group.
pub struct MetaApi {
    subs: Mutex<Vec<Arc<Subscription>>>,
    tx: mpsc::UnboundedSender<Inbound>,
    pub pending: Mutex<Option<PendingRemoval>>,
}

impl MetaApi {
    /// Serves the API on `system` (the system account's bus), if any.
    pub fn start(jc: Arc<JsCluster>, system: Option<Bus>) -> Arc<MetaApi> {
        let (tx, rx) = mpsc::unbounded_channel();
        let api = Arc::new(MetaApi {
            subs: Mutex::new(Vec::new()),
            tx,
            pending: Mutex::new(None),
        });
        if let Some(bus) = system {
            tokio::spawn(serve(jc, api.clone(), bus, rx));
        }
        api
    }

    /// Subscribes while leading, unsubscribes otherwise; a pending removal
    /// is answered once the voter is gone, and forgotten with leadership.
    pub fn follow_leadership(&self, bus: &Bus, leading: bool, voters: &[u64]) {
        if follow(
            bus,
            &self.subs,
            &[META_STEPDOWN, SERVER_REMOVE],
            &self.tx,
            leading,
            None,
        ) {
            *self.pending.lock() = None;
        }
        let done = {
            let mut p = self.pending.lock();
            match p.as_ref() {
                Some(r) if !voters.contains(&r.peer) => p.take(),
                _ => None,
            }
        };
        if let Some(r) = done {
            let a = Answer::ok(&r.reply, Kind::MetaServerRemove, &Success { success: true });
            let mut p = bus.publisher();
            p.publish_out(&a.msg);
            p.flush();
        }
    }
}

async fn serve(
    jc: Arc<JsCluster>,
    api: Arc<MetaApi>,
    bus: Bus,
    mut rx: mpsc::UnboundedReceiver<Inbound>,
) {
    let mut publisher = bus.publisher();
    while let Some(m) = rx.recv().await {
        // The subscription follows leadership a moment late; a server
        // that no longer leads stays silent, as nats-server's followers do.
        if !jc.meta_status().is_some_and(|g| g.is_leader) {
            continue;
        }
        let answer = match classify(m, Mode::Clustered, &mut new_consumer_name) {
            Request::Answer(a) => a,
            Request::Operator { reply, request } => {
                let (kind, r) = match request {
                    OperatorRequest::MetaStepDown { preferred } => {
                        (Kind::MetaLeaderStepdown, stepdown(&jc, &preferred))
                    }
                    OperatorRequest::ServerRemove { peer, peer_id } => (
                        Kind::MetaServerRemove,
                        remove(&jc, &api, &peer, &peer_id, &reply),
                    ),
                };
                match r {
                    Ok(true) => Answer::ok(&reply, kind, &Success { success: true }),
                    // Answered later, once the removal commits.
                    Ok(false) => continue,
                    Err(e) => Answer::refused(&reply, kind, &e),
                }
            }
            _ => continue,
        };
        publisher.publish_out(&answer.msg);
        publisher.flush();
    }
}

/// Hands the meta group's leadership to another voter that is up (the
/// one `preferred` names, if any).
fn stepdown(jc: &JsCluster, preferred: &str) -> Result<bool, ApiError> {
    let Some(g) = jc.meta_status() else {
        return Err(E::CLUSTER_NOT_AVAIL.err());
    };
    let online = jc.routed_ids();
    let candidates: Vec<u64> = g
        .voters
        .iter()
        .copied()
        .filter(|v| *v != jc.me.id && online.contains(v))
        .collect();
    let no_peers = |why: String| E::CLUSTER_NO_PEERS.with("err", why);
    let target = if preferred.is_empty() {
        if candidates.is_empty() {
            return Err(no_peers("no replacement peer connected".into()));
        }
        candidates[fastrand::usize(..candidates.len())]
    } else if preferred == jc.server.name() {
        return Err(no_peers(format!(
            "preferred server {preferred:?} is already leader"
        )));
    } else {
        *candidates
            .iter()
            .find(|&&v| jc.peer_name(v).as_deref() == Some(preferred))
            .ok_or_else(|| no_peers(format!("preferred server {preferred:?} not known")))?
    };
    match jc.node.call(move |e| e.transfer_leader(META_GROUP, target)) {
        Some(Ok(())) => {
            info!(
                "JetStream meta leader stepping down, to {}",
                jc.peer_name(target).unwrap_or_default()
            );
            Ok(true)
        }
        Some(Err(e)) => Err(E::RAFT_GENERAL.with("err", e)),
        None => Err(E::CLUSTER_NOT_AVAIL.err()),
    }
}

/// Takes a server out of the meta group, by name or by peer id (which
/// takes precedence). `Ok(false)`: answered later, once the removal
/// commits.
fn remove(
    jc: &JsCluster,
    api: &MetaApi,
    peer: &str,
    peer_id: &str,
    reply_to: &str,
) -> Result<bool, ApiError> {
    if api.pending.lock().is_some() {
        return Err(E::CLUSTER_SERVER_MEMBER_CHANGE_INFLIGHT.err());
    }
    let voters = jc.meta_status().map(|g| g.voters).unwrap_or_default();
    let matching: Vec<u64> = voters
        .iter()
        .copied()
        .filter(|&v| {
            let name = jc.peer_name(v);
            if !peer_id.is_empty() {
                peer_id == format!("{v:x}")
                    || name.as_deref().map(peer_hash).as_deref() == Some(peer_id)
            } else {
                name.as_deref() == Some(peer)
            }
        })
        .collect();
    // A server that came back with a wiped store is a new peer under its
    // old name: the name then means the identity that is gone.
    let online = jc.routed_ids();
    let found = match matching.as_slice() {
        [one] => Some(*one),
        many => many
            .iter()
            .copied()
            .find(|v| *v != jc.me.id && !online.contains(v)),
    };
    let id = found.ok_or_else(|| E::CLUSTER_SERVER_NOT_MEMBER.err())?;
    // Its streams move to other servers first (or go on with one replica
    // fewer where none is free), so the removal is not refused for them.
    let hosted: Vec<_> = jc
        .meta
        .lock()
        .streams()
        .filter(|a| a.peers.contains(&id))
        .cloned()
        .collect();
    for a in hosted {
        let peers =
            super::account_api::remap(jc, &a, id, false).ok_or_else(|| E::PEER_REMAP.err())?;
        let op = MetaOp::UpdateStream {
            account: a.account.clone(),
            name: a.name.clone(),
            config: a.config.clone(),
            peers,
            reply: String::new(),
        };
        jc.node
            .propose(META_GROUP, op.encode())
            .map_err(|_| E::CLUSTER_NOT_LEADER.err())?;
    }
    let mut cc = ConfChange::default();
    cc.set_change_type(ConfChangeType::RemoveNode);
    cc.node_id = id;
    match jc.node.call(move |e| e.propose_conf_change(META_GROUP, cc)) {
        Some(Ok(())) => {
            let _ = jc
                .node
                .propose(META_GROUP, MetaOp::RemovePeer { id }.encode());
            info!(
                "JetStream cluster removing peer {} ({id:x})",
                jc.peer_name(id).unwrap_or_default()
            );
            *api.pending.lock() = Some(PendingRemoval {
                peer: id,
                reply: reply_to.to_string(),
            });
            Ok(false)
        }
        Some(Err(e)) => Err(E::RAFT_GENERAL.with("err", e)),
        None => Err(E::CLUSTER_NOT_AVAIL.err()),
    }
}
