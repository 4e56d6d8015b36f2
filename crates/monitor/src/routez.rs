//! `/routez`: the routes to other servers, with nats-server's fields.

use std::sync::atomic::Ordering;
use std::time::SystemTime;

use serde::Serialize;

use super::format::rfc3339;
use flotilla_core::server::Server;

#[derive(Serialize)]
pub struct Routez {
    server_id: String,
    server_name: String,
    now: String,
    num_routes: usize,
    routes: Vec<RouteInfo>,
}

#[derive(Serialize)]
struct RouteInfo {
    rid: u64,
    remote_id: String,
    remote_name: String,
    did_solicit: bool,
    is_configured: bool,
    ip: String,
    port: u16,
    start: String,
    last_activity: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    rtt: String,
    uptime: String,
    idle: String,
    pending_size: usize,
    in_msgs: u64,
    out_msgs: u64,
    in_bytes: u64,
    out_bytes: u64,
    subscriptions: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    subscriptions_list: Option<Vec<String>>,
}

/// `subs`: list each route's subscribed subjects.
pub fn routez(server: &Server, subs: bool) -> Routez {
    let now = SystemTime::now();
    let routes: Vec<RouteInfo> = server
        .routes
        .routes()
        .iter()
        .map(|r| {
            let c = &r.client;
            let out = c.out.stats();
            let times = super::connz::activity(c, now);
            let remote_subs = r.subs.lock();
            RouteInfo {
                rid: c.cid,
                remote_id: r.remote_id.clone(),
                remote_name: r.remote_name.clone(),
                did_solicit: r.did_solicit,
                is_configured: r.configured,
                ip: c.addr.ip().to_string(),
                port: c.addr.port(),
                start: times.start,
                last_activity: times.last_activity,
                rtt: times.rtt,
                uptime: times.uptime,
                idle: times.idle,
                pending_size: out.pending,
                in_msgs: c.in_msgs.load(Ordering::Relaxed),
                out_msgs: out.out_msgs,
                in_bytes: c.in_bytes.load(Ordering::Relaxed),
                out_bytes: out.out_bytes,
                subscriptions: remote_subs.len(),
                subscriptions_list: subs.then(|| {
                    remote_subs
                        .keys()
                        .map(|(_, s, _)| String::from_utf8_lossy(s).into_owned())
                        .collect()
                }),
            }
        })
        .collect();
    Routez {
        server_id: server.id.clone(),
        server_name: server.name.clone(),
        now: rfc3339(now),
        num_routes: routes.len(),
        routes,
    }
}
