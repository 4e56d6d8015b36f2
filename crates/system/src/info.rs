//! Who this server is, as every system message tells it: nats-server's
//! `ServerInfo` (the `server` object), with the sequence number all such
//! messages share, and the bare `ServerID` that `IDZ` answers.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use flotilla_core::server::Server;
use serde::Serialize;

/// nats-server's `ServerCapability` bits: JetStream, binary stream
/// snapshots, account Raft traffic; all three with JetStream on.
const FLAGS_WITH_JETSTREAM: u64 = 1 | 2 | 4;

/// The feature flags nats-server 2.15.1 reports. Each names a way its
/// JetStream may talk to itself that flotilla does not have: all off.
const FEATURE_FLAGS: &[&str] = &[
    "js_ack_fc_v2",
    "js_api_reply_v2",
    "js_raft_delete_range",
    "js_snapshot_sources",
];

/// nats-server's `ServerInfo`, in its field order.
#[derive(Debug, Clone, Serialize)]
pub struct ServerInfo {
    pub name: String,
    pub host: String,
    pub id: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub cluster: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub domain: String,
    pub ver: &'static str,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    pub feature_flags: BTreeMap<&'static str, bool>,
    pub jetstream: bool,
    pub flags: u64,
    pub seq: u64,
    pub time: String,
}

/// nats-server's `ServerID`: what `IDZ` answers, with no sequence.
#[derive(Debug, Serialize)]
pub struct ServerId {
    pub name: String,
    pub host: String,
    pub id: String,
}

/// Stamps system messages with this server's identity.
pub struct Identity {
    server: Arc<Server>,
    /// The last sequence number given (nats-server starts at 1 and
    /// pre-increments: the first message carries 2).
    seq: AtomicU64,
}

impl Identity {
    pub fn new(server: Arc<Server>) -> Self {
        Identity {
            server,
            seq: AtomicU64::new(1),
        }
    }

    /// The `server` object of the next system message.
    pub fn stamp(&self) -> ServerInfo {
        let server = &self.server;
        let opts = server.opts();
        let jetstream = opts.jetstream.enabled;
        let seq = self.seq.fetch_add(1, Ordering::Relaxed) + 1;
        debug_assert!(seq >= 2, "nats-server's first stamped message is 2");
        ServerInfo {
            name: server.name.clone(),
            host: opts.host.clone(),
            id: server.id.clone(),
            cluster: self.cluster(),
            domain: opts.jetstream.domain.clone().unwrap_or_default(),
            ver: protocol::NATS_VERSION,
            tags: opts.server_tags.clone(),
            feature_flags: FEATURE_FLAGS.iter().map(|f| (*f, false)).collect(),
            jetstream,
            flags: if jetstream { FLAGS_WITH_JETSTREAM } else { 0 },
            seq,
            time: jsapi::time::rfc3339(unix_nanos()),
        }
    }

    /// The cluster's name, or nothing for a server without routes.
    pub fn cluster(&self) -> String {
        match self.server.routes.enabled() {
            true => self.server.routes.cluster_name().0,
            false => String::new(),
        }
    }

    pub fn server_id(&self) -> ServerId {
        ServerId {
            name: self.server.name.clone(),
            host: self.server.opts().host.clone(),
            id: self.server.id.clone(),
        }
    }
}

pub fn unix_nanos() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}
