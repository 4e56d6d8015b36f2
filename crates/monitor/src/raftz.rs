//! `/raftz`: the Raft groups this server takes part in, in nats-server's
//! shape (account -> group name -> group). The meta group is `_meta_`
//! under the system account.

use std::collections::BTreeMap;

use serde::Serialize;

/// The meta group's name in `/raftz`, under the system account.
pub const META_NAME: &str = "_meta_";

#[derive(Serialize)]
pub struct RaftzGroup {
    pub id: String,
    pub state: &'static str,
    pub size: usize,
    pub quorum_needed: usize,
    pub committed: u64,
    pub applied: u64,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub leader: String,
    pub ever_had_leader: bool,
    pub term: u64,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub voted_for: String,
    pub pterm: u64,
    pub pindex: u64,
    pub system_account: bool,
    pub traffic_account: &'static str,
    pub ipq_proposal_len: usize,
    pub ipq_entry_len: usize,
    pub ipq_resp_len: usize,
    pub ipq_apply_len: usize,
    pub peers: BTreeMap<String, RaftzPeer>,
}

#[derive(Serialize)]
pub struct RaftzPeer {
    pub name: String,
    pub known: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_replicated_index: Option<u64>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub last_seen: String,
}

/// `/raftz`, by account then group name. `None`: this server runs no
/// Raft group (nats-server answers 404).
pub fn raftz(
    services: &super::Services,
    acc: &str,
    group: &str,
) -> Option<BTreeMap<String, BTreeMap<String, RaftzGroup>>> {
    services.js.get()?.raftz(acc, group)
}
