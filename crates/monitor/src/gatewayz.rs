//! `/gatewayz`: flotilla has no gateways (issue 39), so it shows none,
//! in nats-server's shape for a server without a `gateway` block.

use std::collections::BTreeMap;
use std::time::SystemTime;

use serde::Serialize;

use super::format::rfc3339;
use flotilla_core::server::Server;

#[derive(Serialize)]
pub struct Gatewayz {
    server_id: String,
    now: String,
    outbound_gateways: BTreeMap<String, serde_json::Value>,
    inbound_gateways: BTreeMap<String, serde_json::Value>,
}

pub fn gatewayz(server: &Server) -> Gatewayz {
    Gatewayz {
        server_id: server.id.clone(),
        now: rfc3339(SystemTime::now()),
        outbound_gateways: BTreeMap::new(),
        inbound_gateways: BTreeMap::new(),
    }
}
