//! `/raftz`: the Raft groups this server takes part in, in nats-server's
//! shape (account -> group name -> group). The meta group is `_meta_`
//! under the system account.

use std::collections::BTreeMap;

use serde::Serialize;

use flotilla_core::server::Server;
use jsdriver::jscluster::{peer_hash, JsCluster};

/// nats-server lists the meta group under the system account.
use flotilla_core::account::SYSTEM_ACCOUNT;
pub const META_NAME: &str = "_meta_";

#[derive(Serialize)]
pub struct RaftzGroup {
    id: String,
    state: &'static str,
    size: usize,
    quorum_needed: usize,
    committed: u64,
    applied: u64,
    #[serde(skip_serializing_if = "String::is_empty")]
    leader: String,
    ever_had_leader: bool,
    term: u64,
    #[serde(skip_serializing_if = "String::is_empty")]
    voted_for: String,
    pterm: u64,
    pindex: u64,
    system_account: bool,
    traffic_account: &'static str,
    ipq_proposal_len: usize,
    ipq_entry_len: usize,
    ipq_resp_len: usize,
    ipq_apply_len: usize,
    peers: BTreeMap<String, RaftzPeer>,
}

#[derive(Serialize)]
struct RaftzPeer {
    name: String,
    known: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    last_replicated_index: Option<u64>,
    #[serde(skip_serializing_if = "String::is_empty")]
    last_seen: String,
}

/// `None`: this server runs no Raft group (nats-server answers 404).
pub fn raftz(
    server: &Server,
    services: &super::Services,
    acc: &str,
    group: &str,
) -> Option<BTreeMap<String, BTreeMap<String, RaftzGroup>>> {
    let jc = services.jc.get()?;
    let mut out = BTreeMap::new();
    let wanted =
        |a: &str, name: &str| (acc.is_empty() || acc == a) && (group.is_empty() || group == name);
    let status = jc.node.status();
    let names = jc.group_names();
    for g in status.groups.iter() {
        let (account, name) = if g.group == jsservice::meta_sm::META_GROUP {
            (SYSTEM_ACCOUNT, META_NAME.to_string())
        } else if let Some(n) = names.get(&g.group) {
            (jc.js.account.as_str(), n.clone())
        } else {
            continue;
        };
        if wanted(account, &name) {
            out.entry(account.to_string())
                .or_insert_with(BTreeMap::new)
                .insert(name, group_of(server, jc, g));
        }
    }
    Some(out)
}

fn group_of(server: &Server, jc: &JsCluster, g: &cluster::node::GroupStatus) -> RaftzGroup {
    let hash_of = |id: u64| {
        jc.peer_name(server, id)
            .map(|n| peer_hash(&n))
            .unwrap_or_else(|| format!("{id:x}"))
    };
    let state = if g.is_leader {
        "LEADER"
    } else if g.leader == 0 && g.vote == jc.me.id {
        "CANDIDATE"
    } else {
        "FOLLOWER"
    };
    let transport = &jc.node.transport;
    let peers = g
        .voters
        .iter()
        .filter(|&&v| v != jc.me.id)
        .map(|&v| {
            let name = jc.peer_name(server, v).unwrap_or_default();
            let replicated = g.progress.iter().find(|(id, _)| *id == v).map(|(_, m)| *m);
            let last_seen = transport
                .last_heard(v)
                .map(jetstream::duration::format)
                .unwrap_or_default();
            (
                hash_of(v),
                RaftzPeer {
                    known: !name.is_empty(),
                    name,
                    last_replicated_index: replicated,
                    last_seen,
                },
            )
        })
        .collect();
    RaftzGroup {
        id: peer_hash(&server.name),
        state,
        size: g.voters.len(),
        quorum_needed: g.voters.len() / 2 + 1,
        committed: g.committed,
        applied: g.applied,
        leader: if g.leader == 0 {
            String::new()
        } else {
            hash_of(g.leader)
        },
        ever_had_leader: g.leader != 0 || g.term > 1,
        term: g.term,
        voted_for: if g.vote == 0 {
            String::new()
        } else {
            hash_of(g.vote)
        },
        pterm: g.last_term,
        pindex: g.last_index,
        // Every group's replication goes through the system account, as
        // nats-server's does unless an account volunteers its own.
        system_account: true,
        traffic_account: SYSTEM_ACCOUNT,
        ipq_proposal_len: 0,
        ipq_entry_len: 0,
        ipq_resp_len: 0,
        ipq_apply_len: 0,
        peers,
    }
}
