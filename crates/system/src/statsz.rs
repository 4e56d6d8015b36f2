//! nats-server's `ServerStats` (`statsz`): the figures a server sends on
//! `$SYS.SERVER.<id>.STATSZ` and answers `$SYS.REQ.SERVER.PING` with,
//! taken from this server's `/varz` and `/routez` so that both tell the
//! same numbers.

use serde::Serialize;
use serde_json::Value;

use crate::info::ServerInfo;

/// nats-server's `ServerStatsMsg`.
#[derive(Serialize)]
pub struct StatsMsg {
    pub server: ServerInfo,
    pub statsz: ServerStats,
}

/// nats-server's `DataStats` with only its message and byte counts.
#[derive(Serialize, Default)]
pub struct DataStats {
    pub msgs: u64,
    pub bytes: u64,
}

/// nats-server's `RouteStat`.
#[derive(Serialize)]
pub struct RouteStat {
    pub rid: u64,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    pub sent: DataStats,
    pub received: DataStats,
    pub pending: u64,
}

/// nats-server's `ServerStats`, in its field order.
#[derive(Serialize)]
pub struct ServerStats {
    pub start: Value,
    pub mem: Value,
    pub cores: Value,
    pub cpu: Value,
    pub connections: Value,
    pub total_connections: Value,
    pub active_accounts: usize,
    pub subscriptions: Value,
    pub sent: DataStats,
    pub sent_to_clients: DataStats,
    pub received: DataStats,
    pub received_from_clients: DataStats,
    pub slow_consumers: Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slow_consumer_stats: Option<Value>,
    #[serde(skip_serializing_if = "is_zero")]
    pub stale_connections: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stale_connection_stats: Option<Value>,
    #[serde(skip_serializing_if = "is_zero")]
    pub stalled_clients: u64,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub routes: Vec<RouteStat>,
    pub active_servers: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub jetstream: Option<Value>,
    pub gomaxprocs: Value,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// What [`ServerStats::from_monitoring`] reads beside the endpoints.
pub struct Counts {
    /// Accounts with a client connected here (the system account counts:
    /// nats-server's internal client is one).
    pub active_accounts: usize,
    /// This server and the others it heard from lately.
    pub active_servers: usize,
    pub jetstream: bool,
}

impl ServerStats {
    /// The statsz of this server's `/varz` and `/routez` (compact JSON).
    pub fn from_monitoring(varz: &Value, routez: &Value, counts: Counts) -> ServerStats {
        debug_assert!(counts.active_servers >= 1, "this server is one");
        let n = |k: &str| varz[k].as_u64().unwrap_or(0);
        let pair = |m: &str, b: &str| DataStats {
            msgs: n(m),
            bytes: n(b),
        };
        // Per-kind figures only when one is set, as nats-server omits them.
        let kinds = |k: &str| {
            let v = &varz[k];
            let any = v
                .as_object()
                .is_some_and(|m| m.values().any(|c| c.as_u64().unwrap_or(0) > 0));
            any.then(|| v.clone())
        };
        let routes = routez["routes"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|r| {
                let n = |k: &str| r[k].as_u64().unwrap_or(0);
                RouteStat {
                    rid: n("rid"),
                    name: r["remote_name"].as_str().unwrap_or_default().to_string(),
                    sent: DataStats {
                        msgs: n("out_msgs"),
                        bytes: n("out_bytes"),
                    },
                    received: DataStats {
                        msgs: n("in_msgs"),
                        bytes: n("in_bytes"),
                    },
                    pending: n("pending_size"),
                }
            })
            .collect();
        // JetStream's section as `/varz` has it, without the store
        // directory (nats-server clears it here).
        let jetstream = counts.jetstream.then(|| {
            let mut js = varz["jetstream"].clone();
            if let Some(config) = js.get_mut("config").and_then(Value::as_object_mut) {
                config.remove("store_dir");
            }
            js
        });
        ServerStats {
            start: varz["start"].clone(),
            mem: varz["mem"].clone(),
            cores: varz["cores"].clone(),
            cpu: varz["cpu"].clone(),
            connections: varz["connections"].clone(),
            total_connections: varz["total_connections"].clone(),
            active_accounts: counts.active_accounts,
            subscriptions: varz["subscriptions"].clone(),
            sent: pair("out_msgs", "out_bytes"),
            sent_to_clients: pair("out_client_msgs", "out_client_bytes"),
            received: pair("in_msgs", "in_bytes"),
            received_from_clients: pair("in_client_msgs", "in_client_bytes"),
            slow_consumers: varz["slow_consumers"].clone(),
            slow_consumer_stats: kinds("slow_consumer_stats"),
            stale_connections: n("stale_connections"),
            stale_connection_stats: kinds("stale_connection_stats"),
            stalled_clients: n("stalled_clients"),
            routes,
            active_servers: counts.active_servers,
            jetstream,
            gomaxprocs: varz["gomaxprocs"].clone(),
        }
    }
}
