//! API requests about one stream, run by its actor: stream info, purge,
//! message get and delete, direct get, and everything about its
//! consumers (including pull requests). The dispatcher has parsed the
//! request; here it meets the state machine.

use std::sync::atomic::Ordering;

use bytes::Bytes;
use jetstream::api::{
    ClusterInfo, CreateConsumerRequest, MsgDeleteRequest, MsgGetRequest, PullRequest, PurgeRequest,
    StreamInfoRequest,
};
use jetstream::output::OutMsg;
use jetstream::stream::Stream;
use serde::Deserialize;

use super::response::{self, Consumers, Kind, Paged, Pause, Purged, Success};
use super::sinks::status_msg;
use super::JetStream;

/// Subjects per STREAM.INFO page.
const SUBJECTS_LIMIT: usize = 100_000;
const NAMES_LIMIT: usize = 1024;
const LIST_LIMIT: usize = 256;

pub enum Op {
    Info(StreamInfoRequest),
    Purge(PurgeRequest),
    MsgGet(MsgGetRequest),
    MsgDelete(MsgDeleteRequest),
    ConsumerCreate {
        req: Box<CreateConsumerRequest>,
        name: Option<String>,
        filter: Option<String>,
        durable_api: bool,
    },
    ConsumerInfo(String),
    ConsumerDelete(String),
    ConsumerNames(i64),
    ConsumerList(i64),
    ConsumerPause {
        name: String,
        until: Option<i64>,
    },
    /// `CONSUMER.MSG.NEXT`: a pull request.
    Next {
        consumer: String,
        body: Bytes,
    },
    /// `DIRECT.GET`, with the subject given after the stream name, if any.
    Direct {
        subject: Option<String>,
        body: Bytes,
    },
}

pub enum Reply {
    Api { kind: Kind, body: Bytes },
    Msgs(Vec<OutMsg>),
    None,
}

fn ok<B: serde::Serialize>(js: &JetStream, kind: Kind, body: &B) -> Reply {
    js.api_total.fetch_add(1, Ordering::Relaxed);
    Reply::Api {
        kind,
        body: response::ok(kind, body),
    }
}

fn err(js: &JetStream, kind: Kind, e: &jetstream::api::ApiError) -> Reply {
    js.api_total.fetch_add(1, Ordering::Relaxed);
    js.api_errors.fetch_add(1, Ordering::Relaxed);
    Reply::Api {
        kind,
        body: response::error(kind, e),
    }
}

/// An error nats-server sends as a plain response: it counts as a call,
/// not as an error, in account info.
fn plain_err(js: &JetStream, kind: Kind, e: &jetstream::api::ApiError) -> Reply {
    js.api_total.fetch_add(1, Ordering::Relaxed);
    Reply::Api {
        kind,
        body: response::error(kind, e),
    }
}

/// A consumer name as nats-server generates one: 8 characters of
/// `[0-9A-Za-z]`.
pub(crate) fn generated_name() -> String {
    const ALPHABET: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    (0..8)
        .map(|_| ALPHABET[fastrand::usize(..ALPHABET.len())] as char)
        .collect()
}

fn page(total: usize, offset: i64) -> usize {
    (offset.max(0) as usize).min(total)
}

pub fn handle(
    js: &JetStream,
    stream: &mut Stream,
    op: Op,
    reply: &str,
    now: i64,
    cluster: Option<&ClusterInfo>,
) -> Reply {
    match op {
        Op::Purge(req) => match stream.purge(&req) {
            Ok(n) => ok(
                js,
                Kind::StreamPurge,
                &Purged {
                    success: true,
                    purged: n,
                },
            ),
            Err(e) => err(js, Kind::StreamPurge, &e),
        },
        Op::MsgDelete(req) => {
            // nats-server refuses sealed and deny_delete streams as API
            // errors, before it tries the store; a failure of the delete
            // itself goes back as a plain response.
            let refused = stream.config.sealed || stream.config.deny_delete;
            match stream.delete_msg(req.seq, !req.no_erase) {
                Ok(()) => ok(js, Kind::MsgDelete, &Success { success: true }),
                Err(e) if refused => err(js, Kind::MsgDelete, &e),
                Err(e) => plain_err(js, Kind::MsgDelete, &e),
            }
        }
        Op::ConsumerCreate {
            req,
            name,
            filter,
            durable_api,
        } => match stream.add_consumer(
            *req,
            name.as_deref(),
            filter.as_deref(),
            durable_api,
            generated_name,
            now,
        ) {
            Ok(mut info) => {
                response::stamp_consumer(&mut info);
                ok(js, Kind::ConsumerCreate, &info)
            }
            Err(e) => err(js, Kind::ConsumerCreate, &e),
        },
        Op::ConsumerDelete(name) => match stream.delete_consumer(&name) {
            Ok(()) => ok(js, Kind::ConsumerDelete, &Success { success: true }),
            Err(e) => err(js, Kind::ConsumerDelete, &e),
        },
        Op::ConsumerPause { name, until } => match stream.pause_consumer(&name, until, now) {
            Ok(info) => ok(
                js,
                Kind::ConsumerPause,
                &Pause {
                    paused: info.paused,
                    pause_until: info.config.pause_until.unwrap_or(0),
                    pause_remaining: info.pause_remaining,
                },
            ),
            Err(e) => err(js, Kind::ConsumerPause, &e),
        },
        Op::Next { consumer, body } => {
            if stream.consumer(&consumer).is_none() {
                // Nothing would be subscribed to this pull subject.
                let subject = format!(
                    "$JS.API.CONSUMER.MSG.NEXT.{}.{consumer}",
                    stream.config.name
                );
                return Reply::Msgs(vec![super::sinks::no_responders(reply, &subject)]);
            }
            match PullRequest::parse(&body) {
                Ok(req) => {
                    if let Err(e) = stream.pull(&consumer, req, reply, now) {
                        tracing::warn!("Stream '{}': pull failed: {e}", stream.config.name);
                    }
                    Reply::None
                }
                Err(e) => Reply::Msgs(vec![status_msg(reply, 400, &format!("Bad Request - {e}"))]),
            }
        }
        op => read(js, stream, op, reply, now, cluster),
    }
}

/// The requests that only look: a replicated stream's leader answers
/// these from its replica. `cluster` is what its info reports of its
/// group (a single server reports itself as leader).
pub fn read(
    js: &JetStream,
    stream: &Stream,
    op: Op,
    reply: &str,
    now: i64,
    cluster: Option<&ClusterInfo>,
) -> Reply {
    match op {
        Op::Info(req) => {
            let mut info = stream.info(now, req.deleted_details, &req.subjects_filter);
            info.cluster = Some(cluster.cloned().unwrap_or_else(|| ClusterInfo {
                name: String::new(),
                leader: js.server.name.clone(),
                replicas: Vec::new(),
                raft_group: String::new(),
            }));
            response::stamp_stream(&mut info);
            let (mut total, mut offset, mut limit) = (0, 0, 0);
            let subjects = std::mem::take(&mut info.state.subjects);
            if !subjects.is_empty() {
                total = subjects.len();
                offset = req.offset.max(0) as usize;
                limit = SUBJECTS_LIMIT;
                if req.offset <= 0 && subjects.len() <= SUBJECTS_LIMIT {
                    info.state.subjects = subjects;
                } else {
                    let start = page(subjects.len(), req.offset);
                    info.state.subjects = subjects
                        .into_iter()
                        .skip(start)
                        .take(SUBJECTS_LIMIT)
                        .collect();
                }
            }
            ok(
                js,
                Kind::StreamInfo,
                &Paged {
                    total,
                    offset,
                    limit,
                    rest: info,
                },
            )
        }
        Op::MsgGet(req) => match stream.get_msg(&req) {
            // Sent raw, and not counted, as nats-server does.
            Ok(message) => Reply::Api {
                kind: Kind::MsgGet,
                body: response::ok(Kind::MsgGet, &response::Message { message }),
            },
            Err(e) => err(js, Kind::MsgGet, &e),
        },
        Op::ConsumerInfo(name) => match stream.consumer_info(&name, now) {
            Ok(mut info) => {
                if let Some(c) = cluster {
                    info.cluster = Some(c.clone());
                }
                response::stamp_consumer(&mut info);
                ok(js, Kind::ConsumerInfo, &info)
            }
            Err(e) => err(js, Kind::ConsumerInfo, &e),
        },
        Op::ConsumerNames(offset) => {
            let names = stream.consumer_names();
            let total = names.len();
            let start = page(total, offset);
            let list: Vec<String> = names.into_iter().skip(start).take(NAMES_LIMIT).collect();
            ok(
                js,
                Kind::ConsumerNames,
                &Paged {
                    total,
                    offset: start,
                    limit: NAMES_LIMIT,
                    rest: Consumers { consumers: list },
                },
            )
        }
        Op::ConsumerList(offset) => {
            let names = stream.consumer_names();
            let total = names.len();
            let start = page(total, offset);
            let list: Vec<_> = names
                .iter()
                .skip(start)
                .take(LIST_LIMIT)
                .filter_map(|n| stream.consumer_info(n, now).ok())
                .collect();
            ok(
                js,
                Kind::ConsumerList,
                &Paged {
                    total,
                    offset: start,
                    limit: LIST_LIMIT,
                    rest: Consumers { consumers: list },
                },
            )
        }
        Op::Direct { subject, body } => Reply::Msgs(direct_get(stream, subject, &body, reply)),
        // Changes go through `handle` (or a replicated stream's log).
        _ => Reply::None,
    }
}

/// The lenient reading nats-server gives DIRECT.GET bodies: unknown
/// fields are ignored.
#[derive(Deserialize, Default)]
struct LenientGet {
    #[serde(default)]
    seq: Option<u64>,
    #[serde(default)]
    last_by_subj: Option<String>,
    #[serde(default)]
    next_by_subj: Option<String>,
    #[serde(default)]
    batch: Option<i64>,
    #[serde(default)]
    max_bytes: Option<i64>,
    #[serde(default)]
    start_time: Option<String>,
    #[serde(default)]
    multi_last: Option<Vec<String>>,
    #[serde(default)]
    up_to_seq: Option<u64>,
    #[serde(default)]
    up_to_time: Option<String>,
    #[serde(default)]
    no_hdr: Option<bool>,
}

fn direct_get(stream: &Stream, subject: Option<String>, body: &[u8], reply: &str) -> Vec<OutMsg> {
    let bad = |d: &str| vec![status_msg(reply, 408, d)];
    let empty_body = body.iter().all(|b| b.is_ascii_whitespace());
    let parsed: Option<LenientGet> = if empty_body {
        None
    } else {
        match serde_json::from_slice::<LenientGet>(body) {
            Ok(r) => Some(r),
            Err(_) => return bad("Malformed Request"),
        }
    };
    let nz = |v: &Option<u64>| v.is_some_and(|x| x > 0);
    let ne = |v: &Option<String>| v.as_deref().is_some_and(|x| !x.is_empty());
    let mut req = MsgGetRequest::default();
    match subject {
        Some(subj) => {
            if subj.is_empty() {
                return bad("Bad Request");
            }
            if let Some(p) = &parsed {
                if ne(&p.last_by_subj)
                    || ne(&p.next_by_subj)
                    || p.multi_last.as_ref().is_some_and(|m| !m.is_empty())
                    || nz(&p.seq)
                    || p.batch.is_some_and(|b| b > 0)
                    || ne(&p.start_time)
                    || nz(&p.up_to_seq)
                    || ne(&p.up_to_time)
                {
                    return bad("Bad Request");
                }
                req.no_hdr = p.no_hdr.unwrap_or(false);
            }
            req.last_by_subj = subj;
        }
        None => {
            let Some(p) = parsed else {
                return bad("Empty Request");
            };
            let start_time = match p.start_time.as_deref().filter(|s| !s.is_empty()) {
                Some(t) => match jetstream::api::time::parse(t) {
                    Some(ns) => Some(ns),
                    None => return bad("Malformed Request"),
                },
                None => None,
            };
            let seq = p.seq.unwrap_or(0);
            let last = p.last_by_subj.clone().unwrap_or_default();
            let next = p.next_by_subj.clone().unwrap_or_default();
            let multi = p.multi_last.clone().unwrap_or_default();
            let batch = p.batch.unwrap_or(0);
            if seq == 0
                && last.is_empty()
                && next.is_empty()
                && multi.is_empty()
                && start_time.is_none()
            {
                return bad("Empty Request");
            }
            if (seq > 0 && (!last.is_empty() || start_time.is_some()))
                || (start_time.is_some() && !last.is_empty())
                || (!last.is_empty() && !next.is_empty())
                || (!last.is_empty() && batch > 0)
                || (!last.is_empty() && !multi.is_empty())
                || (!next.is_empty() && !multi.is_empty())
                || (nz(&p.up_to_seq) && ne(&p.up_to_time))
            {
                return bad("Bad Request");
            }
            let up_to_time = match p.up_to_time.as_deref().filter(|s| !s.is_empty()) {
                Some(t) => match jetstream::api::time::parse(t) {
                    Some(ns) => Some(ns),
                    None => return bad("Malformed Request"),
                },
                None => None,
            };
            req.multi_last = multi;
            req.up_to_seq = p.up_to_seq.unwrap_or(0);
            req.up_to_time = up_to_time;
            req.seq = seq;
            req.last_by_subj = last;
            req.next_by_subj = next;
            req.start_time = start_time;
            req.batch = batch;
            req.max_bytes = p.max_bytes.unwrap_or(0);
            req.no_hdr = p.no_hdr.unwrap_or(false);
        }
    }
    stream.direct_get(&req, reply)
}
