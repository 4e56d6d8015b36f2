//! `/jsz` and the `jetstream` section of `/varz`, with nats-server's
//! field names and order.

use std::sync::atomic::Ordering;
use std::time::SystemTime;

use serde::Serialize;
use serde_json::Value;

use super::format::rfc3339;
use super::query::{Query, QueryError};
use super::varz::Empty;
use jetstream::api::{ClusterInfo, StreamConfig, StreamState};

use flotilla_core::server::Server;
use jsdriver::js::{JetStream, SyncPolicy};

/// The global account, the only one flotilla has.

#[derive(Serialize, Default)]
pub struct ApiStats {
    level: i64,
    total: u64,
    errors: u64,
}

#[derive(Serialize, Default)]
pub struct Stats {
    memory: u64,
    storage: u64,
    reserved_memory: u64,
    reserved_storage: u64,
    accounts: usize,
    ha_assets: usize,
    api: ApiStats,
    /// Not in nats-server: stores a read found damaged while running, and
    /// how many of them were repaired (server-wide, not per account).
    #[serde(skip_serializing_if = "Option::is_none")]
    store_damage: Option<StoreDamage>,
}

#[derive(Serialize, Default)]
pub struct StoreDamage {
    found: u64,
    repaired: u64,
}

#[derive(Serialize, Default)]
pub struct Config {
    max_memory: i64,
    max_storage: i64,
    #[serde(skip_serializing_if = "String::is_empty")]
    store_dir: String,
    #[serde(skip_serializing_if = "is_zero")]
    sync_interval: u128,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    sync_always: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    domain: Option<String>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    compress_ok: bool,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    strict: bool,
}

fn is_zero(v: &u128) -> bool {
    *v == 0
}

/// `/varz`'s `jetstream`: `{}` when JetStream is off.
#[derive(Serialize, Default)]
pub struct Varz {
    #[serde(skip_serializing_if = "Option::is_none")]
    config: Option<Config>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stats: Option<Stats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    limits: Option<Empty>,
}

fn config(js: &JetStream) -> Config {
    let (sync_interval, sync_always) = match js.sync {
        SyncPolicy::Always => (0, true),
        SyncPolicy::Interval(d) => (d.as_nanos(), false),
    };
    Config {
        max_memory: js.max_memory,
        max_storage: js.max_store,
        store_dir: js.store_dir.join("jetstream").display().to_string(),
        sync_interval,
        sync_always,
        domain: js.domain.clone(),
        compress_ok: false,
        strict: true,
    }
}

fn stats(js: &JetStream, accounts: usize) -> Stats {
    let (memory, storage) = js.usage();
    let (reserved_memory, reserved_storage) = js.reserved_totals();
    Stats {
        memory,
        storage,
        reserved_memory,
        reserved_storage,
        accounts,
        ha_assets: 0,
        api: ApiStats {
            level: jetstream::api::API_LEVEL,
            total: js.api_total.load(Ordering::Relaxed),
            errors: js.api_errors.load(Ordering::Relaxed),
        },
        store_damage: Some(StoreDamage {
            found: js.damage_found.load(Ordering::Relaxed),
            repaired: js.damage_repaired.load(Ordering::Relaxed),
        }),
    }
}

pub fn varz(services: &super::Services) -> Varz {
    match services.js.get() {
        None => Varz::default(),
        Some(js) => Varz {
            config: Some(config(js)),
            stats: Some(stats(js, 1)),
            limits: Some(Empty {}),
        },
    }
}

#[derive(Serialize)]
struct JsInfo {
    #[serde(flatten)]
    stats: Stats,
    server_id: String,
    now: String,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    disabled: bool,
    config: Config,
    #[serde(skip_serializing_if = "Option::is_none")]
    limits: Option<Empty>,
    streams: usize,
    consumers: u64,
    messages: u64,
    bytes: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    meta_cluster: Option<MetaClusterInfo>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    account_details: Vec<AccountDetail>,
    total: usize,
}

/// The meta group, as nats-server's `MetaClusterInfo`.
#[derive(Serialize)]
struct MetaClusterInfo {
    #[serde(skip_serializing_if = "String::is_empty")]
    name: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    leader: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    peer: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    replicas: Vec<jetstream::api::PeerInfo>,
    cluster_size: usize,
    quorum_needed: usize,
    pending: usize,
    pending_requests: usize,
    pending_infos: usize,
    snapshot: SnapshotStats,
}

#[derive(Serialize)]
struct SnapshotStats {
    pending_entries: u64,
    pending_size: u64,
}

fn meta_cluster(server: &Server, services: &super::Services) -> Option<MetaClusterInfo> {
    use jsdriver::jscluster::peer_hash;
    let jc = services.jc.get()?;
    let g = jc.meta_status().unwrap_or_default();
    let name_of = |id: u64| {
        jc.peer_name(server, id)
            .unwrap_or_else(|| format!("Server name unknown at this time (peerID: {id:x})"))
    };
    let leader = if g.leader == 0 {
        String::new()
    } else {
        name_of(g.leader)
    };
    let replicas = jc.replicas(server, &g);
    Some(MetaClusterInfo {
        name: server.routes.cluster_name().0,
        peer: if leader.is_empty() {
            String::new()
        } else {
            peer_hash(&leader)
        },
        leader,
        replicas,
        cluster_size: g.voters.len(),
        quorum_needed: g.voters.len() / 2 + 1,
        pending: 0,
        pending_requests: 0,
        pending_infos: 0,
        snapshot: SnapshotStats {
            pending_entries: g.last_index.saturating_sub(g.applied),
            pending_size: 0,
        },
    })
}

#[derive(Serialize)]
struct AccountDetail {
    name: String,
    id: String,
    #[serde(flatten)]
    stats: Stats,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    stream_detail: Vec<StreamDetail>,
}

#[derive(Serialize)]
struct StreamDetail {
    name: String,
    created: String,
    cluster: ClusterInfo,
    #[serde(skip_serializing_if = "Option::is_none")]
    config: Option<StreamConfig>,
    state: StreamState,
    /// Consumer infos; without their config unless asked for.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    consumer_detail: Vec<Value>,
}

pub async fn jsz(
    server: &Server,
    services: &super::Services,
    q: &Query,
) -> Result<impl Serialize, QueryError> {
    let accounts_opt = q.bool("accounts")?;
    let mut streams_opt = q.bool("streams")?;
    let consumers_opt = q.bool("consumers")?;
    q.bool("direct-consumers")?;
    let config_opt = q.bool("config")?;
    let offset = q.int("offset")?.max(0) as usize;
    let limit = match q.int("limit")? {
        0 => 1024,
        l => l.max(0) as usize,
    };
    q.bool("leader-only")?;
    q.bool("raft")?;
    q.bool("stream-leader-only")?;
    let acc = q.get("acc").to_string();
    if consumers_opt {
        streams_opt = true;
    }
    let accounts_opt = accounts_opt || (streams_opt && acc.is_empty());
    let now = rfc3339(SystemTime::now());
    let Some(js) = services.js.get() else {
        let meta = meta_cluster(server, services);
        let info = JsInfo {
            stats: Stats::default(),
            server_id: server.id.clone(),
            now,
            disabled: meta.is_none(),
            config: Config::default(),
            limits: None,
            streams: 0,
            consumers: 0,
            messages: 0,
            bytes: 0,
            meta_cluster: meta,
            account_details: Vec::new(),
            total: 0,
        };
        return Ok(info);
    };
    let handles = js.streams();
    let mut info = JsInfo {
        stats: stats(js, 1),
        server_id: server.id.clone(),
        now,
        disabled: false,
        config: config(js),
        limits: Some(Empty {}),
        streams: handles.len(),
        consumers: handles
            .iter()
            .map(|h| h.consumers.load(Ordering::Relaxed))
            .sum(),
        messages: handles.iter().map(|h| h.msgs.load(Ordering::Relaxed)).sum(),
        bytes: handles
            .iter()
            .map(|h| h.bytes.load(Ordering::Relaxed))
            .sum(),
        meta_cluster: meta_cluster(server, services),
        account_details: Vec::new(),
        total: 1,
    };
    let wanted = acc == js.account || (acc.is_empty() && accounts_opt && offset == 0 && limit > 0);
    if wanted {
        let (memory, storage) = js.usage();
        let (reserved_memory, reserved_storage) = js.reserved_totals();
        let mut detail = AccountDetail {
            name: js.account.clone(),
            id: js.account.clone(),
            stats: Stats {
                memory,
                storage,
                reserved_memory,
                reserved_storage,
                accounts: 0,
                ha_assets: 0,
                api: ApiStats {
                    level: 0,
                    total: js.api_total.load(Ordering::Relaxed),
                    errors: js.api_errors.load(Ordering::Relaxed),
                },
                store_damage: None,
            },
            stream_detail: Vec::new(),
        };
        if streams_opt {
            for (stream, consumers) in js.snapshots(consumers_opt).await {
                let mut d = StreamDetail {
                    name: stream.config.name.clone(),
                    created: jetstream::api::time::rfc3339(stream.created),
                    cluster: ClusterInfo {
                        leader: server.name.clone(),
                        ..ClusterInfo::default()
                    },
                    config: config_opt.then(|| stream.config.clone()),
                    state: stream.state,
                    consumer_detail: Vec::new(),
                };
                if consumers_opt {
                    d.consumer_detail = consumers
                        .iter()
                        .map(|c| {
                            let mut v = serde_json::to_value(c).expect("consumer info serializes");
                            if !config_opt {
                                if let Some(o) = v.as_object_mut() {
                                    o.remove("config");
                                }
                            }
                            v
                        })
                        .collect();
                }
                detail.stream_detail.push(d);
            }
        }
        info.account_details.push(detail);
    }
    Ok(info)
}
