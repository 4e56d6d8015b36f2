//! `/varz`: the server's settings and counters.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::time::{Instant, SystemTime};

use parking_lot::Mutex;
use serde::Serialize;

use super::format::{rfc3339, uptime, Empty};
use config::options::DEFAULT_TLS_TIMEOUT;
use flotilla_core::server::Server;
use protocol::NATS_VERSION;

/// `cluster` in `/varz`: empty (`{}`) when clustering is off, as
/// nats-server leaves every field out then.
#[derive(Serialize, Default)]
pub struct ClusterVarz {
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    addr: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cluster_port: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    auth_timeout: Option<f64>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    urls: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tls_timeout: Option<f64>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    tls_required: bool,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    tls_verify: bool,
}

#[derive(Serialize)]
pub struct RaftVarz {
    pub frames_in: u64,
    pub bytes_in: u64,
    pub frames_out: u64,
    pub bytes_out: u64,
    /// Frames that failed their length or checksum checks, by reason.
    pub rejected_frames: RejectedFrames,
    /// Frames naming another sender than their connection's peer.
    pub foreign_frames: u64,
    /// Queued frames dropped (a failed connection, a full bulk queue).
    pub dropped_frames: u64,
    /// Frames the engine refused after the transport's checks.
    pub refused_not_member: u64,
    pub refused_unknown_group: u64,
    pub refused_undecodable: u64,
    pub votes_withheld: u64,
}

#[derive(Serialize)]
pub struct RejectedFrames {
    pub length: u64,
    pub checksum: u64,
    pub class: u64,
    pub short: u64,
}

fn cluster_varz(server: &Server) -> ClusterVarz {
    let opts = server.opts();
    if !opts.cluster.enabled() {
        return ClusterVarz::default();
    }
    ClusterVarz {
        name: Some(server.routes.cluster_name().0),
        addr: Some(
            opts.cluster
                .host
                .clone()
                .unwrap_or_else(|| "0.0.0.0".into()),
        ),
        cluster_port: Some(server.routes.port.load(Ordering::Relaxed)),
        auth_timeout: opts.cluster.user.as_ref().map(|_| 2.0),
        urls: opts
            .cluster
            .routes
            .iter()
            .filter_map(|u| flotilla_core::route::host_port(u))
            .collect(),
        tls_timeout: opts.cluster.tls.as_ref().map(|t| t.timeout.as_secs_f64()),
        tls_required: opts.cluster.tls.is_some(),
        tls_verify: opts.cluster.tls.is_some(),
    }
}

/// `/varz websocket`, as nats-server's `WebsocketOptsVarz`: every field
/// left out when unset, so `{}` when WebSocket is off.
#[derive(Serialize, Default)]
pub struct WebsocketVarz {
    #[serde(skip_serializing_if = "String::is_empty")]
    host: String,
    #[serde(skip_serializing_if = "is_zero")]
    port: u16,
    #[serde(skip_serializing_if = "String::is_empty")]
    advertise: String,
    /// Nanoseconds, as Go's Duration.
    #[serde(skip_serializing_if = "is_zero_u128")]
    handshake_timeout: u128,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    no_tls: bool,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    same_origin: bool,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    allowed_origins: Vec<String>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    compression: bool,
}

/// `/varz leaf`, as nats-server's `LeafNodeOptsVarz`: every field left
/// out when unset, so `{}` without a `leafnodes {}` block.
#[derive(Serialize, Default)]
pub struct LeafVarz {
    #[serde(skip_serializing_if = "String::is_empty")]
    host: String,
    #[serde(skip_serializing_if = "is_zero")]
    port: u16,
    /// Seconds.
    #[serde(skip_serializing_if = "is_zero_f64")]
    auth_timeout: f64,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    remotes: Vec<RemoteLeafVarz>,
}

/// One of `/varz leaf remotes` (`RemoteLeafOptsVarz`).
#[derive(Serialize)]
pub struct RemoteLeafVarz {
    local_account: String,
    urls: Vec<String>,
}

fn is_zero_f64(v: &f64) -> bool {
    *v == 0.0
}

fn leaf_varz(server: &Server) -> LeafVarz {
    let opts = server.opts();
    let leafnodes = &opts.leafnodes;
    let remotes = leafnodes
        .remotes
        .iter()
        .map(|r| RemoteLeafVarz {
            local_account: r.account.clone().unwrap_or_else(|| "$G".into()),
            // Without the user info, which may hold a password.
            urls: r
                .urls
                .iter()
                .map(|u| {
                    match u
                        .split_once("://")
                        .map(|(s, rest)| (s, rest.rsplit_once('@')))
                    {
                        Some((scheme, Some((_, host)))) => format!("{scheme}://{host}"),
                        _ => u.clone(),
                    }
                })
                .collect(),
        })
        .collect();
    if !leafnodes.accepts() {
        return LeafVarz {
            remotes,
            ..Default::default()
        };
    }
    LeafVarz {
        host: leafnodes
            .host
            .clone()
            .unwrap_or_else(|| config::options::DEFAULT_HOST.into()),
        port: server.leafs.port.load(Ordering::Relaxed) as u16,
        auth_timeout: leafnodes
            .auth_timeout
            .unwrap_or_else(|| opts.auth_timeout())
            .as_secs_f64(),
        remotes,
    }
}

fn is_zero(v: &u16) -> bool {
    *v == 0
}

fn is_zero_u128(v: &u128) -> bool {
    *v == 0
}

fn websocket_varz(server: &Server) -> WebsocketVarz {
    let opts = server.opts();
    let ws = &opts.websocket;
    if !ws.enabled() {
        return WebsocketVarz::default();
    }
    WebsocketVarz {
        host: ws
            .host
            .clone()
            .unwrap_or_else(|| config::options::DEFAULT_HOST.into()),
        port: server.websocket_port.load(Ordering::Relaxed) as u16,
        advertise: ws.advertise.clone().unwrap_or_default(),
        handshake_timeout: ws.handshake_timeout.map_or(0, |t| t.as_nanos()),
        no_tls: ws.no_tls,
        same_origin: ws.same_origin,
        allowed_origins: ws
            .allowed_origins
            .iter()
            .map(|o| format!("{}://{}:{}", o.scheme, o.host, o.port))
            .collect(),
        compression: ws.compression,
    }
}

#[derive(Serialize, Default)]
pub struct KindCounts {
    clients: u64,
    routes: u64,
    gateways: u64,
    leafs: u64,
}

#[derive(Serialize)]
pub struct Varz {
    server_id: String,
    server_name: String,
    version: &'static str,
    proto: i32,
    go: String,
    host: String,
    port: u16,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    auth_required: bool,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    tls_required: bool,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    tls_verify: bool,
    /// What clients are told to connect to, once a route is up (test
    /// launchers read it to tell when a cluster has formed).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    connect_urls: Vec<String>,
    max_connections: usize,
    ping_interval: u128,
    ping_max: u32,
    http_host: String,
    http_port: i64,
    http_base_path: String,
    https_port: i64,
    auth_timeout: f64,
    max_control_line: usize,
    max_payload: usize,
    max_pending: usize,
    cluster: ClusterVarz,
    gateway: Empty,
    leaf: LeafVarz,
    mqtt: Empty,
    websocket: WebsocketVarz,
    jetstream: super::jsz::Varz,
    /// Flotilla's Raft transport counters (not in nats-server's /varz),
    /// when JetStream is clustered: corrupt and foreign frames show here.
    #[serde(skip_serializing_if = "Option::is_none")]
    raft: Option<RaftVarz>,
    /// Config blocks for features flotilla lacks, which it ignored (not in
    /// nats-server's /varz): `gateway`, `mqtt`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    ignored_config: Vec<String>,
    tls_timeout: f64,
    write_deadline: u128,
    start: String,
    now: String,
    uptime: String,
    mem: u64,
    cores: usize,
    gomaxprocs: usize,
    cpu: f64,
    connections: usize,
    total_connections: u64,
    routes: usize,
    remotes: usize,
    leafnodes: usize,
    in_msgs: u64,
    in_bytes: u64,
    in_client_msgs: u64,
    in_client_bytes: u64,
    out_msgs: u64,
    out_bytes: u64,
    out_client_msgs: u64,
    out_client_bytes: u64,
    slow_consumers: u64,
    stale_connections: u64,
    stalled_clients: u64,
    subscriptions: u32,
    http_req_stats: BTreeMap<String, u64>,
    config_load_time: String,
    config_digest: String,
    slow_consumer_stats: KindCounts,
    stale_connection_stats: KindCounts,
}

/// Process CPU figures between requests, for the `cpu` percentage.
#[derive(Default)]
pub struct CpuSampler {
    last: Mutex<Option<(Instant, u64, f64)>>,
}

impl CpuSampler {
    /// Percent of one core used since the previous sample (nats-server
    /// reports the same way, so 2 busy cores read 200). Samples closer
    /// than half a second apart return the previous figure.
    fn sample(&self) -> f64 {
        let Some(ticks) = proc_cpu_ticks() else {
            return 0.0;
        };
        let now = Instant::now();
        let mut last = self.last.lock();
        let pct = match *last {
            Some((t, _, pct)) if now.duration_since(t).as_millis() < 500 => return pct,
            Some((t, prev, _)) => {
                let secs = now.duration_since(t).as_secs_f64();
                (ticks.saturating_sub(prev) as f64 / clock_ticks_per_second()) / secs * 100.0
            }
            None => 0.0,
        };
        let pct = (pct * 10.0).round() / 10.0;
        *last = Some((now, ticks, pct));
        pct
    }
}

fn clock_ticks_per_second() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if hz > 0 {
        hz as f64
    } else {
        100.0
    }
}

/// utime + stime of this process, in clock ticks.
fn proc_cpu_ticks() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The command name is in parentheses and may hold spaces; fields
    // start after the last ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// Resident set size in bytes.
pub fn rss_bytes() -> u64 {
    let Ok(statm) = std::fs::read_to_string("/proc/self/statm") else {
        return 0;
    };
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(0) as u64;
    pages * page
}

pub fn varz(server: &Server, services: &super::Services, cpu: &CpuSampler) -> Varz {
    let opts = server.opts();
    let now = SystemTime::now();
    let s = &server.stats;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let in_msgs = s.in_msgs.load(Ordering::Relaxed);
    let in_bytes = s.in_bytes.load(Ordering::Relaxed);
    let out_msgs = s.out_msgs.load(Ordering::Relaxed);
    let out_bytes = s.out_bytes.load(Ordering::Relaxed);
    let slow = s.slow_consumers.load(Ordering::Relaxed);
    let stale = s.stale_connections.load(Ordering::Relaxed);
    let info = server.info();
    Varz {
        server_id: server.id.clone(),
        server_name: server.name.clone(),
        version: NATS_VERSION,
        proto: 1,
        go: info.go,
        host: opts.host.clone(),
        port: server.client_port.load(Ordering::Relaxed) as u16,
        auth_required: opts.authorization.required(),
        tls_required: opts.tls.is_some(),
        tls_verify: opts.tls.as_ref().is_some_and(|t| t.verify),
        connect_urls: info.connect_urls,
        max_connections: opts.max_connections,
        ping_interval: opts.ping_interval.as_nanos(),
        ping_max: opts.ping_max,
        http_host: opts.http_host.clone().unwrap_or_else(|| opts.host.clone()),
        http_port: opts.http_port,
        http_base_path: opts.http_base_path.clone(),
        https_port: opts.https_port,
        auth_timeout: opts.auth_timeout().as_secs_f64(),
        max_control_line: opts.max_control_line,
        max_payload: opts.max_payload,
        max_pending: opts.max_pending,
        cluster: cluster_varz(server),
        gateway: Empty {},
        leaf: leaf_varz(server),
        mqtt: Empty {},
        websocket: websocket_varz(server),
        jetstream: super::jsz::varz(services),
        raft: services.js.get().and_then(|view| view.raft_varz()),
        ignored_config: opts.ignored_config.clone(),
        tls_timeout: opts
            .tls
            .as_ref()
            .map_or(DEFAULT_TLS_TIMEOUT, |t| t.timeout)
            .as_secs_f64(),
        write_deadline: opts.write_deadline.as_nanos(),
        start: rfc3339(server.start),
        now: rfc3339(now),
        uptime: uptime(now.duration_since(server.start).unwrap_or_default()),
        mem: rss_bytes(),
        cores,
        gomaxprocs: cores,
        cpu: cpu.sample(),
        connections: server.clients.lock().len(),
        total_connections: s.total_connections.load(Ordering::Relaxed),
        routes: server.routes.routes().len(),
        remotes: server.routes.routes().len(),
        leafnodes: server.leafs.count(),
        in_msgs,
        in_bytes,
        in_client_msgs: in_msgs,
        in_client_bytes: in_bytes,
        out_msgs,
        out_bytes,
        out_client_msgs: out_msgs,
        out_client_bytes: out_bytes,
        slow_consumers: slow,
        stale_connections: stale,
        stalled_clients: 0,
        subscriptions: server
            .accounts
            .all()
            .iter()
            .map(|a| a.sublist.read().count())
            .sum(),
        http_req_stats: server.http_req_stats.lock().clone(),
        config_load_time: rfc3339(*server.config_load_time.lock()),
        config_digest: String::new(),
        slow_consumer_stats: KindCounts {
            clients: slow,
            ..Default::default()
        },
        stale_connection_stats: KindCounts {
            clients: stale,
            ..Default::default()
        },
    }
}
