//! `/leafz`: the leaf node connections, either way, with nats-server's
//! fields (`Leafz`, `LeafInfo`).

use std::sync::atomic::Ordering;
use std::time::SystemTime;

use serde::Serialize;

use super::format::{rfc3339, rtt};
use flotilla_core::client::LeafRole;
use flotilla_core::server::Server;

#[derive(Serialize)]
pub struct Leafz {
    server_id: String,
    now: String,
    leafnodes: usize,
    leafs: Vec<LeafInfo>,
}

#[derive(Serialize)]
struct LeafInfo {
    id: u64,
    name: String,
    /// This server dialed it: the other side is its hub.
    is_spoke: bool,
    account: String,
    ip: String,
    port: u16,
    rtt: String,
    in_msgs: u64,
    out_msgs: u64,
    in_bytes: u64,
    out_bytes: u64,
    subscriptions: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    subscriptions_list: Option<Vec<String>>,
    compression: String,
}

/// `subs`: list each connection's subscribed subjects; `account`: only
/// connections bound to it.
pub fn leafz(server: &Server, subs: bool, account: &str) -> Leafz {
    let leafs: Vec<LeafInfo> = server
        .leafs
        .all()
        .iter()
        .filter(|leaf| account.is_empty() || leaf.account.name == account)
        .map(|leaf| {
            let c = &leaf.client;
            let out = c.out.stats();
            let subjects = leaf.subscriptions();
            LeafInfo {
                id: c.cid,
                name: leaf.remote_name.clone(),
                is_spoke: leaf.role == LeafRole::Solicited,
                account: leaf.account.name.clone(),
                ip: c.addr.ip().to_string(),
                port: c.addr.port(),
                rtt: rtt(c.rtt.load(Ordering::Relaxed)),
                in_msgs: c.in_msgs.load(Ordering::Relaxed),
                out_msgs: out.out_msgs,
                in_bytes: c.in_bytes.load(Ordering::Relaxed),
                out_bytes: out.out_bytes,
                subscriptions: subjects.len(),
                subscriptions_list: subs.then(|| {
                    subjects
                        .iter()
                        .map(|s| String::from_utf8_lossy(s).into_owned())
                        .collect()
                }),
                compression: "off".into(),
            }
        })
        .collect();
    Leafz {
        server_id: server.id.clone(),
        now: rfc3339(SystemTime::now()),
        leafnodes: leafs.len(),
        leafs,
    }
}
