//! `/jsz` and the `jetstream` section of `/varz`, with nats-server's
//! field names and order. The shapes and the query are here; JetStream's
//! driver fills them (`JetStreamView`).

use std::time::SystemTime;

use serde::Serialize;
use serde_json::Value;

use super::format::rfc3339;
use super::format::Empty;
use super::query::{Query, QueryError};
use jsapi::{ClusterInfo, StreamConfig, StreamState};

use flotilla_core::server::Server;

#[derive(Serialize, Default)]
pub struct ApiStats {
    pub level: i64,
    pub total: u64,
    pub errors: u64,
}

#[derive(Serialize, Default)]
pub struct Stats {
    pub memory: u64,
    pub storage: u64,
    pub reserved_memory: u64,
    pub reserved_storage: u64,
    pub accounts: usize,
    pub ha_assets: usize,
    pub api: ApiStats,
    /// Not in nats-server: stores a read found damaged while running, and
    /// how many of them were repaired (server-wide, not per account).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub store_damage: Option<StoreDamage>,
}

#[derive(Serialize, Default)]
pub struct StoreDamage {
    pub found: u64,
    pub repaired: u64,
}

#[derive(Serialize, Default)]
pub struct Config {
    pub max_memory: i64,
    pub max_storage: i64,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub store_dir: String,
    #[serde(skip_serializing_if = "is_zero")]
    pub sync_interval: u128,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub sync_always: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub compress_ok: bool,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub strict: bool,
}

fn is_zero(v: &u128) -> bool {
    *v == 0
}

/// `/varz`'s `jetstream`: `{}` when JetStream is off.
#[derive(Serialize, Default)]
pub struct Varz {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config: Option<Config>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stats: Option<Stats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limits: Option<Empty>,
}

#[derive(Serialize)]
pub struct JsInfo {
    #[serde(flatten)]
    pub stats: Stats,
    pub server_id: String,
    pub now: String,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub disabled: bool,
    pub config: Config,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limits: Option<Empty>,
    pub streams: usize,
    pub consumers: u64,
    pub messages: u64,
    pub bytes: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub meta_cluster: Option<MetaClusterInfo>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub account_details: Vec<AccountDetail>,
    pub total: usize,
}

/// The meta group, as nats-server's `MetaClusterInfo`.
#[derive(Serialize)]
pub struct MetaClusterInfo {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub leader: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub peer: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub replicas: Vec<jsapi::PeerInfo>,
    pub cluster_size: usize,
    pub quorum_needed: usize,
    pub pending: usize,
    pub pending_requests: usize,
    pub pending_infos: usize,
    pub snapshot: SnapshotStats,
}

#[derive(Serialize)]
pub struct SnapshotStats {
    pub pending_entries: u64,
    pub pending_size: u64,
}

#[derive(Serialize)]
pub struct AccountDetail {
    pub name: String,
    pub id: String,
    #[serde(flatten)]
    pub stats: Stats,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub stream_detail: Vec<StreamDetail>,
}

#[derive(Serialize)]
pub struct StreamDetail {
    pub name: String,
    pub created: String,
    pub cluster: ClusterInfo,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config: Option<StreamConfig>,
    pub state: StreamState,
    /// Consumer infos; without their config unless asked for.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub consumer_detail: Vec<Value>,
}

/// `/jsz`'s query, parsed as nats-server parses it.
#[derive(Debug, Clone, Default)]
pub struct JszOptions {
    /// Account details are wanted (asked, or implied by streams).
    pub accounts: bool,
    pub streams: bool,
    pub consumers: bool,
    pub config: bool,
    pub offset: usize,
    pub limit: usize,
    /// Only this account (`acc`); empty: any.
    pub acc: String,
    /// Answered by the meta leader alone (`leader-only`).
    pub leader_only: bool,
}

/// nats-server's words for a `/jsz?leader-only=true` asked of a server
/// that does not lead (its `errSkipZreq`): HTTP's 400, and no answer at
/// all to `$SYS.REQ.SERVER.PING.JSZ`.
pub const NOT_LEADER: &str = "filtered response: not leader";

impl JszOptions {
    pub fn parse(q: &Query) -> Result<JszOptions, QueryError> {
        let accounts = q.bool("accounts")?;
        let mut streams = q.bool("streams")?;
        let consumers = q.bool("consumers")?;
        q.bool("direct-consumers")?;
        let config = q.bool("config")?;
        let offset = q.int("offset")?.max(0) as usize;
        let limit = match q.int("limit")? {
            0 => 1024,
            l => l.max(0) as usize,
        };
        let leader_only = q.bool("leader-only")?;
        q.bool("raft")?;
        q.bool("stream-leader-only")?;
        let acc = q.get("acc").to_string();
        if consumers {
            streams = true;
        }
        let accounts = accounts || (streams && acc.is_empty());
        Ok(JszOptions {
            accounts,
            streams,
            consumers,
            config,
            offset,
            limit,
            acc,
            leader_only,
        })
    }
}

/// `/jsz`: what JetStream's driver says, or a disabled JetStream.
pub async fn jsz(
    server: &Server,
    services: &super::Services,
    q: &Query,
) -> Result<JsInfo, QueryError> {
    let opts = JszOptions::parse(q)?;
    let info = match services.js.get() {
        Some(view) => view.jsz(server, &opts).await,
        None if opts.leader_only => return Err(QueryError(NOT_LEADER.into())),
        None => JsInfo {
            stats: Stats::default(),
            server_id: server.id.clone(),
            now: rfc3339(SystemTime::now()),
            disabled: true,
            config: Config::default(),
            limits: None,
            streams: 0,
            consumers: 0,
            messages: 0,
            bytes: 0,
            meta_cluster: None,
            account_details: Vec::new(),
            total: 0,
        },
    };
    // One server leads itself; a cluster's meta leader is named.
    let leads = info
        .meta_cluster
        .as_ref()
        .is_none_or(|m| m.leader == server.name);
    if opts.leader_only && (info.disabled || !leads) {
        return Err(QueryError(NOT_LEADER.into()));
    }
    Ok(info)
}

/// `/varz`'s `jetstream`: `{}` when JetStream is off.
pub fn varz(services: &super::Services) -> Varz {
    services
        .js
        .get()
        .map_or_else(Varz::default, |view| view.varz())
}
