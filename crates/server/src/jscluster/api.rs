//! The meta group's operator API, answered by the meta leader only (as
//! nats-server subscribes these on the meta leader):
//! - `$JS.API.META.LEADER.STEPDOWN`: hand leadership to another voter,
//!   optionally a preferred one;
//! - `$JS.API.SERVER.REMOVE`: take a server out of the meta group (its
//!   id is never reused); the reply waits until the removal commits.
//!
//! Flotilla has one account, so these are not limited to a system account.

use std::sync::Arc;

use bytes::Bytes;
use jetstream::api::{ApiError, E};
use jsservice::meta_sm::{MetaOp, META_GROUP};
use parking_lot::Mutex;
use replication::engine::{ConfChange, ConfChangeType};
use serde::Deserialize;
use tokio::sync::mpsc;
use tracing::info;

use super::{peer_hash, JsCluster};
use crate::client::delivery::{InternalSink, Message};
use crate::internal::InternalPublisher;
use crate::js::response::{self, Kind, Success};
use crate::js::Inbound;
use crate::server::Server;
use crate::subscription::Subscription;

pub const STEPDOWN: &str = "$JS.API.META.LEADER.STEPDOWN";
pub const SERVER_REMOVE: &str = "$JS.API.SERVER.REMOVE";

/// Copies what an internal subscription receives to a task's channel.
pub struct Sink {
    pub tx: mpsc::UnboundedSender<Inbound>,
}

impl InternalSink for Sink {
    fn deliver(&self, msg: Message<'_>) {
        let _ = self.tx.send(Inbound::copy(msg));
    }
}

/// Subscriptions held while this server leads the meta group, copying to
/// one task's channel. Returns whether they were just dropped.
pub fn follow(
    server: &Arc<Server>,
    subs: &Mutex<Vec<Arc<Subscription>>>,
    subjects: &[&str],
    tx: &mpsc::UnboundedSender<Inbound>,
    leading: bool,
) -> bool {
    let mut subs = subs.lock();
    if leading && subs.is_empty() {
        for subject in subjects {
            let sink = Arc::new(Sink { tx: tx.clone() });
            if let Ok(s) = server.subscribe_internal_cluster(subject, sink) {
                subs.push(s);
            }
        }
    } else if !leading && !subs.is_empty() {
        for s in subs.drain(..) {
            server.unsubscribe(&s);
        }
        return true;
    }
    false
}

#[derive(Deserialize, Default)]
struct Placement {
    #[serde(default)]
    preferred: String,
}

#[derive(Deserialize, Default)]
struct StepdownRequest {
    #[serde(default)]
    placement: Option<Placement>,
}

#[derive(Deserialize, Default)]
struct RemoveRequest {
    /// The server's name.
    #[serde(default)]
    peer: String,
    /// Its peer id (takes precedence): flotilla's hex id or nats-server's
    /// 8-character name hash.
    #[serde(default)]
    peer_id: String,
}

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
    pub fn start(server: Arc<Server>, jc: Arc<JsCluster>) -> Arc<MetaApi> {
        let (tx, rx) = mpsc::unbounded_channel();
        let api = Arc::new(MetaApi {
            subs: Mutex::new(Vec::new()),
            tx,
            pending: Mutex::new(None),
        });
        tokio::spawn(serve(server, jc, api.clone(), rx));
        api
    }

    /// Subscribes while leading, unsubscribes otherwise; a pending removal
    /// is answered once the voter is gone, and forgotten with leadership.
    pub fn follow_leadership(&self, server: &Arc<Server>, leading: bool, voters: &[u64]) {
        if follow(
            server,
            &self.subs,
            &[STEPDOWN, SERVER_REMOVE],
            &self.tx,
            leading,
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
            let body = response::ok(Kind::MetaServerRemove, &Success { success: true });
            reply(server, &r.reply, body);
        }
    }
}

fn reply(server: &Arc<Server>, to: &str, body: Bytes) {
    let mut p = InternalPublisher::new(server.clone());
    p.publish(to, to, None, None, &body);
    p.flush();
}

async fn serve(
    server: Arc<Server>,
    jc: Arc<JsCluster>,
    api: Arc<MetaApi>,
    mut rx: mpsc::UnboundedReceiver<Inbound>,
) {
    let mut publisher = InternalPublisher::new(server.clone());
    while let Some(m) = rx.recv().await {
        let Some(to) = m.reply.clone() else { continue };
        // The subscription follows leadership a moment late; a server
        // that no longer leads stays silent, as nats-server's followers do.
        if !jc.meta_status().is_some_and(|g| g.is_leader) {
            continue;
        }
        let body = if m.subject == STEPDOWN {
            stepdown(&server, &jc, &m.payload)
        } else {
            match remove(&server, &jc, &api, &m.payload, &to) {
                Some(b) => b,
                None => continue,
            }
        };
        publisher.publish(&to, &to, None, None, &body);
        publisher.flush();
    }
}

/// A body counts only if it is a JSON object or array (nats-server's
/// `isJSONObjectOrArray`).
fn has_body(payload: &[u8]) -> bool {
    payload
        .iter()
        .find(|b| !b.is_ascii_whitespace())
        .is_some_and(|b| *b == b'{' || *b == b'[')
}

fn invalid_json(e: serde_json::Error) -> ApiError {
    E::INVALID_JSON.with("err", e)
}

fn stepdown(server: &Server, jc: &JsCluster, payload: &[u8]) -> Bytes {
    let kind = Kind::MetaLeaderStepdown;
    let req: StepdownRequest = if has_body(payload) {
        match serde_json::from_slice(payload) {
            Ok(r) => r,
            Err(e) => return response::error(kind, &invalid_json(e)),
        }
    } else {
        StepdownRequest::default()
    };
    let Some(g) = jc.meta_status() else {
        return response::error(kind, &E::CLUSTER_NOT_AVAIL.err());
    };
    let online = jc.routed_ids(server);
    let candidates: Vec<u64> = g
        .voters
        .iter()
        .copied()
        .filter(|v| *v != jc.me.id && online.contains(v))
        .collect();
    let preferred = req.placement.map(|p| p.preferred).unwrap_or_default();
    let target = if preferred.is_empty() {
        if candidates.is_empty() {
            return response::error(
                kind,
                &E::CLUSTER_NO_PEERS.with("err", "no replacement peer connected"),
            );
        }
        candidates[fastrand::usize(..candidates.len())]
    } else if preferred == server.name {
        return response::error(
            kind,
            &E::CLUSTER_NO_PEERS.with(
                "err",
                format!("preferred server {preferred:?} is already leader"),
            ),
        );
    } else {
        match candidates
            .iter()
            .find(|&&v| jc.peer_name(server, v).as_deref() == Some(preferred.as_str()))
        {
            Some(&v) => v,
            None => {
                return response::error(
                    kind,
                    &E::CLUSTER_NO_PEERS
                        .with("err", format!("preferred server {preferred:?} not known")),
                )
            }
        }
    };
    match jc.node.call(move |e| e.transfer_leader(META_GROUP, target)) {
        Some(Ok(())) => {
            info!(
                "JetStream meta leader stepping down, to {}",
                jc.peer_name(server, target).unwrap_or_default()
            );
            response::ok(kind, &Success { success: true })
        }
        Some(Err(e)) => response::error(kind, &E::RAFT_GENERAL.with("err", e)),
        None => response::error(kind, &E::CLUSTER_NOT_AVAIL.err()),
    }
}

/// `None`: answered later, once the removal commits.
fn remove(
    server: &Server,
    jc: &JsCluster,
    api: &MetaApi,
    payload: &[u8],
    reply_to: &str,
) -> Option<Bytes> {
    let kind = Kind::MetaServerRemove;
    let trimmed: Vec<u8> = payload
        .iter()
        .copied()
        .filter(|b| !b.is_ascii_whitespace())
        .collect();
    if trimmed.is_empty() || trimmed == b"{}" {
        return Some(response::error(kind, &E::BAD_REQUEST.err()));
    }
    let req: RemoveRequest = match serde_json::from_slice(payload) {
        Ok(r) => r,
        Err(e) => return Some(response::error(kind, &invalid_json(e))),
    };
    if api.pending.lock().is_some() {
        return Some(response::error(
            kind,
            &E::CLUSTER_SERVER_MEMBER_CHANGE_INFLIGHT.err(),
        ));
    }
    let voters = jc.meta_status().map(|g| g.voters).unwrap_or_default();
    let matching: Vec<u64> = voters
        .iter()
        .copied()
        .filter(|&v| {
            let name = jc.peer_name(server, v);
            if !req.peer_id.is_empty() {
                req.peer_id == format!("{v:x}")
                    || name.as_deref().map(peer_hash).as_deref() == Some(req.peer_id.as_str())
            } else {
                name.as_deref() == Some(req.peer.as_str())
            }
        })
        .collect();
    // A server that came back with a wiped store is a new peer under its
    // old name: the name then means the identity that is gone.
    let online = jc.routed_ids(server);
    let found = match matching.as_slice() {
        [one] => Some(*one),
        many => many
            .iter()
            .copied()
            .find(|v| *v != jc.me.id && !online.contains(v)),
    };
    let Some(id) = found else {
        return Some(response::error(kind, &E::CLUSTER_SERVER_NOT_MEMBER.err()));
    };
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
        let Some(peers) = super::account_api::remap(server, jc, &a, id, false) else {
            return Some(response::error(kind, &E::PEER_REMAP.err()));
        };
        let op = MetaOp::UpdateStream {
            name: a.name.clone(),
            config: a.config.clone(),
            peers,
        };
        if jc.node.propose(META_GROUP, op.encode()).is_err() {
            return Some(response::error(kind, &E::CLUSTER_NOT_LEADER.err()));
        }
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
                jc.peer_name(server, id).unwrap_or_default()
            );
            *api.pending.lock() = Some(PendingRemoval {
                peer: id,
                reply: reply_to.to_string(),
            });
            None
        }
        Some(Err(e)) => Some(response::error(kind, &E::RAFT_GENERAL.with("err", e))),
        None => Some(response::error(kind, &E::CLUSTER_NOT_AVAIL.err())),
    }
}
