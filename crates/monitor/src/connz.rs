//! `/connz`: open and closed connections, with nats-server's paging,
//! sorting and filters.

use std::cmp::Reverse;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde::Serialize;

use super::format::{rfc3339, rtt, uptime};
use super::query::{Query, QueryError};
use flotilla_core::client::{Client, Subscription};
use flotilla_core::server::Server;

const DEFAULT_LIMIT: usize = 1024;

#[derive(Serialize, Clone, Debug)]
pub struct SubDetail {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub account: Option<String>,
    pub subject: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub qgroup: Option<String>,
    pub sid: String,
    pub msgs: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max: Option<u64>,
    pub cid: u64,
}

impl SubDetail {
    pub fn of(s: &Subscription) -> Self {
        let max = s.max.load(Ordering::Relaxed);
        SubDetail {
            account: Some(s.account.name.clone()),
            subject: String::from_utf8_lossy(&s.subject).into_owned(),
            qgroup: s
                .queue
                .as_ref()
                .map(|q| String::from_utf8_lossy(q).into_owned()),
            sid: String::from_utf8_lossy(&s.sid).into_owned(),
            msgs: s
                .delivered
                .load(Ordering::Relaxed)
                .min(if max > 0 { max } else { u64::MAX }),
            max: (max > 0).then_some(max),
            cid: s.client.cid,
        }
    }
}

#[derive(Serialize, Clone, Debug)]
pub struct ConnInfo {
    pub cid: u64,
    pub kind: &'static str,
    #[serde(rename = "type")]
    pub conn_type: &'static str,
    pub ip: String,
    pub port: u16,
    pub start: String,
    pub last_activity: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stop: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<&'static str>,
    pub rtt: String,
    pub uptime: String,
    pub idle: String,
    pub pending_bytes: usize,
    pub in_msgs: u64,
    pub out_msgs: u64,
    pub in_bytes: u64,
    pub out_bytes: u64,
    pub subscriptions: u32,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub lang: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub version: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub authorized_user: Option<String>,
    /// With `auth`: the client's account, unless it is `$G`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub account: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub subscriptions_list: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub subscriptions_list_detail: Vec<SubDetail>,
}

/// Values the sort keys need, kept beside the rendered info.
#[derive(Clone, Debug)]
struct SortKeys {
    start: SystemTime,
    last: u64,
    stop: Option<SystemTime>,
    rtt: u64,
}

/// A connection as it was when it closed.
#[derive(Clone, Debug)]
pub struct ClosedConn {
    info: ConnInfo,
    keys: SortKeys,
    user: Option<String>,
    /// Its account, when not `$G`.
    account: Option<String>,
    subs: Vec<SubDetail>,
}

/// A snapshot of one connection, open or closed, before the query's
/// options shape it.
struct Row {
    info: ConnInfo,
    keys: SortKeys,
    user: Option<String>,
    /// Its account, when not `$G`.
    account: Option<String>,
    subs: Vec<SubDetail>,
}

/// A connection's times as monitoring shows them (`/connz`, `/routez`).
pub(super) struct Activity {
    pub start: String,
    pub last_activity: String,
    pub rtt: String,
    pub uptime: String,
    pub idle: String,
}

pub(super) fn activity(c: &Client, now: SystemTime) -> Activity {
    let last =
        SystemTime::UNIX_EPOCH + Duration::from_nanos(c.last_activity.load(Ordering::Relaxed));
    Activity {
        start: rfc3339(c.start),
        last_activity: rfc3339(last),
        rtt: rtt(c.rtt.load(Ordering::Relaxed)),
        uptime: uptime(now.duration_since(c.start).unwrap_or_default()),
        idle: uptime(now.duration_since(last).unwrap_or_default()),
    }
}

fn snapshot(c: &Client, subs: &[Arc<Subscription>], now: SystemTime, detail: bool) -> Row {
    let out = c.out.stats();
    let meta = c.meta.lock().clone();
    let last_ns = c.last_activity.load(Ordering::Relaxed);
    let rtt_ns = c.rtt.load(Ordering::Relaxed);
    let times = activity(c, now);
    Row {
        info: ConnInfo {
            cid: c.cid,
            kind: "Client",
            conn_type: if c.websocket { "websocket" } else { "nats" },
            ip: c.addr.ip().to_string(),
            port: c.addr.port(),
            start: times.start,
            last_activity: times.last_activity,
            stop: None,
            reason: None,
            rtt: times.rtt,
            uptime: times.uptime,
            idle: times.idle,
            pending_bytes: out.pending,
            in_msgs: c.in_msgs.load(Ordering::Relaxed),
            out_msgs: out.out_msgs,
            in_bytes: c.in_bytes.load(Ordering::Relaxed),
            out_bytes: out.out_bytes,
            subscriptions: subs.len() as u32,
            name: meta.name,
            lang: meta.lang,
            version: meta.version,
            authorized_user: None,
            account: None,
            subscriptions_list: Vec::new(),
            subscriptions_list_detail: Vec::new(),
        },
        keys: SortKeys {
            start: c.start,
            last: last_ns,
            stop: None,
            rtt: rtt_ns,
        },
        user: meta.user,
        account: c
            .account()
            .filter(|a| !a.is_global())
            .map(|a| a.name.clone()),
        subs: if detail {
            subs.iter().map(|s| SubDetail::of(s)).collect()
        } else {
            Vec::new()
        },
    }
}

impl ClosedConn {
    /// Freezes a closing connection's figures.
    pub fn capture(c: &Client, subs: &[Arc<Subscription>]) -> Self {
        let now = SystemTime::now();
        let mut row = snapshot(c, subs, now, true);
        row.info.stop = Some(rfc3339(now));
        row.info.reason = c.closed_reason().map(|r| r.as_str());
        row.keys.stop = Some(now);
        ClosedConn {
            info: row.info,
            keys: row.keys,
            user: row.user,
            account: row.account,
            subs: row.subs,
        }
    }
}

#[derive(Serialize)]
pub struct Connz {
    server_id: String,
    now: String,
    num_connections: usize,
    total: usize,
    offset: usize,
    limit: usize,
    connections: Vec<ConnInfo>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    Open,
    Closed,
    Any,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Sort {
    Cid,
    Subs,
    Pending,
    MsgsTo,
    MsgsFrom,
    BytesTo,
    BytesFrom,
    Last,
    Idle,
    Uptime,
    Stop,
    Reason,
    Rtt,
}

fn parse_sort(s: &str) -> Option<Sort> {
    Some(match s {
        "" | "cid" | "start" => Sort::Cid,
        "subs" => Sort::Subs,
        "pending" => Sort::Pending,
        "msgs_to" => Sort::MsgsTo,
        "msgs_from" => Sort::MsgsFrom,
        "bytes_to" => Sort::BytesTo,
        "bytes_from" => Sort::BytesFrom,
        "last" => Sort::Last,
        "idle" => Sort::Idle,
        "uptime" => Sort::Uptime,
        "stop" => Sort::Stop,
        "reason" => Sort::Reason,
        "rtt" => Sort::Rtt,
        _ => return None,
    })
}

pub fn connz(server: &Server, services: &super::Services, q: &Query) -> Result<Connz, QueryError> {
    let auth = q.bool("auth")?;
    let (subs, detail) = q.subs()?;
    let offset = q.int("offset")?.max(0) as usize;
    let limit = match q.int("limit")? {
        l if l <= 0 => DEFAULT_LIMIT,
        l => l as usize,
    };
    let cid = q.uint("cid")?;
    let state = match q.get("state").to_ascii_lowercase().as_str() {
        "" | "open" => State::Open,
        "closed" => State::Closed,
        "any" | "all" => State::Any,
        other => return Err(QueryError(format!("Error decoding state for {other}"))),
    };
    let user = q.get("user");
    // nats-server's `acc`: only the connections of that account.
    let acc = q.get("acc");
    let in_acc = |name: Option<&str>| acc.is_empty() || name == Some(acc);
    let sort_name = q.get("sort");
    let sort = parse_sort(sort_name)
        .ok_or_else(|| QueryError(format!("invalid sorting option: {sort_name}")))?;
    if state != State::Closed {
        if sort == Sort::Stop {
            return Err(QueryError(
                "sort by stop only valid on closed connections".into(),
            ));
        }
        if sort == Sort::Reason {
            return Err(QueryError(
                "sort by reason only valid on closed connections".into(),
            ));
        }
    }

    let now = SystemTime::now();
    let mut rows: Vec<Row> = Vec::new();
    // As in nats-server, `total` counts the whole set asked for; `cid` and
    // `user` only narrow what is listed.
    let mut total = 0;
    if state != State::Closed {
        let mut clients: Vec<Arc<Client>> = server.clients.lock().values().cloned().collect();
        clients.retain(|c| in_acc(c.account().as_ref().map(|a| a.name.as_str())));
        total += clients.len();
        for c in clients {
            if cid != 0 && c.cid != cid {
                continue;
            }
            let list: Vec<Arc<Subscription>> = c.subs.lock().values().cloned().collect();
            rows.push(snapshot(&c, &list, now, subs || detail));
        }
    }
    if state != State::Open {
        let closed = services.closed.lock();
        let closed: Vec<_> = closed
            .iter()
            .filter(|c| in_acc(c.account.as_deref()))
            .collect();
        total += closed.len();
        for c in closed {
            if cid != 0 && c.info.cid != cid {
                continue;
            }
            rows.push(Row {
                info: c.info.clone(),
                keys: c.keys.clone(),
                user: c.user.clone(),
                account: c.account.clone(),
                subs: if subs || detail {
                    c.subs.clone()
                } else {
                    Vec::new()
                },
            });
        }
    }
    if !user.is_empty() {
        rows.retain(|r| r.user.as_deref() == Some(user));
    }

    // Stable sort with cid as the tie-break, so equal keys keep a fixed
    // order between requests.
    rows.sort_by_key(|r| r.info.cid);
    match sort {
        Sort::Cid => {}
        Sort::Subs => rows.sort_by_key(|r| Reverse(r.info.subscriptions)),
        Sort::Pending => rows.sort_by_key(|r| Reverse(r.info.pending_bytes)),
        Sort::MsgsTo => rows.sort_by_key(|r| Reverse(r.info.out_msgs)),
        Sort::MsgsFrom => rows.sort_by_key(|r| Reverse(r.info.in_msgs)),
        Sort::BytesTo => rows.sort_by_key(|r| Reverse(r.info.out_bytes)),
        Sort::BytesFrom => rows.sort_by_key(|r| Reverse(r.info.in_bytes)),
        Sort::Last => rows.sort_by_key(|r| Reverse(r.keys.last)),
        Sort::Idle => rows.sort_by_key(|r| r.keys.last),
        Sort::Uptime => rows.sort_by_key(|r| {
            r.keys
                .stop
                .unwrap_or(now)
                .duration_since(r.keys.start)
                .unwrap_or_default()
        }),
        Sort::Stop => rows.sort_by_key(|r| Reverse(r.keys.stop)),
        Sort::Reason => rows.sort_by_key(|r| r.info.reason),
        Sort::Rtt => rows.sort_by_key(|r| Reverse(r.keys.rtt)),
    }

    let start = offset.min(rows.len());
    let end = start + limit.min(rows.len() - start);
    let connections: Vec<ConnInfo> = rows
        .drain(start..end)
        .map(|r| {
            let mut info = r.info;
            if auth {
                info.authorized_user = r.user;
                info.account = r.account;
            }
            if detail {
                info.subscriptions_list_detail = r.subs;
            } else if subs {
                info.subscriptions_list = r.subs.into_iter().map(|s| s.subject).collect();
            }
            info
        })
        .collect();
    Ok(Connz {
        server_id: server.id.clone(),
        now: rfc3339(now),
        num_connections: connections.len(),
        total,
        offset,
        limit: if cid != 0 { 1 } else { limit },
        connections,
    })
}
