//! Requests about one stream, against the stream: [`admit`] lets a
//! change in as an input to its state machine (or refuses it), [`read`]
//! answers from its state, and [`missing`] is what a requester hears when
//! the stream is not there. One server runs these on the stream it owns;
//! a cluster on its leader's replica, before proposing.

use jetstream::api::{AccountTiers, ApiError, ClusterInfo, MsgGetRequest, E};
use jetstream::output::OutMsg;
use jetstream::stream::Stream;
use serde::Deserialize;

use crate::reply::{self, Answer, Consumers, Count, Kind, Paged};
use crate::request::{Read, StreamRequest};
use crate::stream_sm::Op;

/// Subjects per STREAM.INFO page.
const SUBJECTS_LIMIT: usize = 100_000;
const NAMES_LIMIT: usize = 1024;
const LIST_LIMIT: usize = 256;

/// What a change may do, decided against the stream.
#[derive(Debug)]
pub enum Admitted {
    /// Refused (or answered) at once.
    Answer(Answer),
    /// Apply it (one server) or propose it (a cluster); its answer comes
    /// from `reply::answers` once it is applied.
    Input(Op),
    /// Nothing to do or say.
    Nothing,
}

/// Lets a change to `stream` in: the checks nats-server makes against
/// the stream before it applies (or proposes) one. The input returned
/// carries `reply` when its result goes back to a requester, and a
/// consumer create the `account`'s limits on consumers: those of the
/// consumer's tier (its own replicas, or the stream's), or 10120 if the
/// account has no limits for it (nats-server's `addConsumer`).
pub fn admit(stream: &Stream, account: &AccountTiers, reply: Option<&str>, mut op: Op) -> Admitted {
    let refused = |kind: Kind, e: ApiError| match reply {
        Some(to) => Admitted::Answer(Answer::refused(to, kind, &e)),
        None => Admitted::Nothing,
    };
    if let Op::ConsumerCreate {
        limits, request, ..
    } = &mut op
    {
        let replicas = consumer_replicas(request).unwrap_or(0);
        let replicas = match replicas {
            r if r > 0 => r,
            _ => stream.config.num_replicas,
        };
        match account.select(replicas) {
            Some(selected) => *limits = selected.limits.consumers(),
            None => return refused(Kind::ConsumerCreate, E::NO_LIMITS.err()),
        }
    }
    match &op {
        Op::Purge { .. } => {
            if let Err(e) = stream.check_purge() {
                return refused(Kind::StreamPurge, e);
            }
        }
        Op::DeleteMsg { .. } => {
            if let Err(e) = stream.check_delete() {
                return refused(Kind::MsgDelete, e);
            }
        }
        // Pulls answer through their outputs (a missing consumer, a bad
        // body: the state machine says so, so a cluster's leader can
        // propose a pull as it comes).
        Op::Pull { .. } | Op::FlowControl { .. } => return Admitted::Input(op),
        // nats-server answers a reset only from the consumer itself: for
        // one that does not exist, nothing answers.
        Op::ResetConsumer { name, .. } if stream.consumer(name).is_none() => {
            return Admitted::Nothing;
        }
        _ => {}
    }
    Admitted::Input(op.replied(reply))
}

/// A consumer create's `config.num_replicas`, if its body says.
fn consumer_replicas(request: &[u8]) -> Option<i64> {
    #[derive(serde::Deserialize)]
    struct Body {
        config: Config,
    }
    #[derive(serde::Deserialize)]
    struct Config {
        #[serde(default)]
        num_replicas: i64,
    }
    serde_json::from_slice::<Body>(request)
        .ok()
        .map(|b| b.config.num_replicas)
}

fn next_subject(stream: &str, consumer: &str) -> String {
    format!("$JS.API.CONSUMER.MSG.NEXT.{stream}.{consumer}")
}

/// What a requester hears about a stream that is not here.
pub fn missing(stream: &str, reply: Option<&str>, request: &StreamRequest) -> Option<Answer> {
    let to = reply?;
    let not_found = |kind: Kind| Some(Answer::refused(to, kind, &E::STREAM_NOT_FOUND.err()));
    match request {
        // Nothing is subscribed there: what a client sees then.
        StreamRequest::Read(Read::Direct { subject, .. }) => Some(Answer::no_responders(
            to,
            &direct_subject(stream, subject.as_deref()),
        )),
        StreamRequest::Change(Op::Pull { consumer, .. }) => {
            Some(Answer::no_responders(to, &next_subject(stream, consumer)))
        }
        StreamRequest::Change(Op::Ack { .. }) => Some(Answer::status(to, 503, "")),
        StreamRequest::Change(Op::ResetConsumer { .. }) => None,
        StreamRequest::Change(Op::FlowControl { .. }) => None,
        other => not_found(other.kind()),
    }
}

fn direct_subject(stream: &str, subject: Option<&str>) -> String {
    match subject {
        Some(s) => format!("$JS.API.DIRECT.GET.{stream}.{s}"),
        None => format!("$JS.API.DIRECT.GET.{stream}"),
    }
}

fn page(total: usize, offset: i64) -> usize {
    (offset.max(0) as usize).min(total)
}

/// Answers a request that only looks. `cluster` is what a replicated
/// stream's (and its consumers') info reports of its group; one server
/// reports itself (`server`) as the stream's leader.
pub fn read(
    stream: &Stream,
    request: Read,
    to: &str,
    now: i64,
    cluster: Option<&ClusterInfo>,
    server: &str,
) -> Vec<Answer> {
    let answer = match request {
        Read::Info {
            request: req,
            create,
        } => {
            let mut info = stream.info(now, req.deleted_details, &req.subjects_filter);
            info.cluster = Some(cluster.cloned().unwrap_or_else(|| ClusterInfo {
                leader: server.to_string(),
                ..Default::default()
            }));
            reply::stamp_stream(&mut info);
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
            let body = Paged {
                total,
                offset,
                limit,
                rest: info,
            };
            let kind = match create {
                true => Kind::StreamCreate,
                false => Kind::StreamInfo,
            };
            Answer::ok(to, kind, &body)
        }
        Read::MsgGet(req) => match stream.get_msg(&req) {
            // Sent raw, and not counted, as nats-server does.
            Ok(message) => Answer::api(
                to,
                Kind::MsgGet,
                reply::ok(Kind::MsgGet, &reply::Message { message }),
                Count::No,
            ),
            Err(e) => Answer::refused(to, Kind::MsgGet, &e),
        },
        Read::ConsumerInfo(name) => match stream.consumer_info(&name, now) {
            Ok(mut info) => {
                if let Some(c) = cluster {
                    info.cluster = Some(c.clone());
                }
                reply::stamp_consumer(&mut info);
                Answer::ok(to, Kind::ConsumerInfo, &info)
            }
            Err(e) => Answer::refused(to, Kind::ConsumerInfo, &e),
        },
        Read::ConsumerNames(offset) => {
            let names = stream.consumer_names();
            let total = names.len();
            let start = page(total, offset);
            let list: Vec<String> = names.into_iter().skip(start).take(NAMES_LIMIT).collect();
            let body = Paged {
                total,
                offset: start,
                limit: NAMES_LIMIT,
                rest: Consumers { consumers: list },
            };
            Answer::ok(to, Kind::ConsumerNames, &body)
        }
        Read::ConsumerList(offset) => {
            let names = stream.consumer_names();
            let total = names.len();
            let start = page(total, offset);
            let list: Vec<_> = names
                .iter()
                .skip(start)
                .take(LIST_LIMIT)
                .filter_map(|n| stream.consumer_info(n, now).ok())
                .collect();
            let body = Paged {
                total,
                offset: start,
                limit: LIST_LIMIT,
                rest: Consumers { consumers: list },
            };
            Answer::ok(to, Kind::ConsumerList, &body)
        }
        Read::Direct { subject, body } => {
            if !stream.config.allow_direct {
                let subject = direct_subject(&stream.config.name, subject.as_deref());
                return vec![Answer::no_responders(to, &subject)];
            }
            return direct_get(stream, subject, &body, to)
                .into_iter()
                .map(Answer::out)
                .collect();
        }
    };
    vec![answer]
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

/// Why a direct get is answered with a 408 status.
type Bad = &'static str;

fn direct_get(stream: &Stream, subject: Option<String>, body: &[u8], to: &str) -> Vec<OutMsg> {
    match direct_request(subject, body) {
        Ok(req) => stream.direct_get(&req, to),
        Err(why) => vec![reply::status_msg(to, 408, why)],
    }
}

/// A DIRECT.GET body (and the subject after the stream name, if any) as
/// a message get request, with nats-server's checks.
fn direct_request(subject: Option<String>, body: &[u8]) -> Result<MsgGetRequest, Bad> {
    let parsed: Option<LenientGet> = if body.iter().all(|b| b.is_ascii_whitespace()) {
        None
    } else {
        Some(serde_json::from_slice(body).map_err(|_| "Malformed Request")?)
    };
    match subject {
        Some(subject) => last_by_subject(subject, parsed),
        None => by_body(parsed.ok_or("Empty Request")?),
    }
}

fn non_zero(v: &Option<u64>) -> bool {
    v.is_some_and(|x| x > 0)
}

fn non_empty(v: &Option<String>) -> bool {
    v.as_deref().is_some_and(|x| !x.is_empty())
}

fn time(v: Option<&str>) -> Result<Option<i64>, Bad> {
    match v.filter(|s| !s.is_empty()) {
        Some(t) => jetstream::api::time::parse(t)
            .map(Some)
            .ok_or("Malformed Request"),
        None => Ok(None),
    }
}

/// `DIRECT.GET.<stream>.<subject>`: the last message on the subject; the
/// body may only ask to leave headers out.
fn last_by_subject(subject: String, parsed: Option<LenientGet>) -> Result<MsgGetRequest, Bad> {
    if subject.is_empty() {
        return Err("Bad Request");
    }
    let mut req = MsgGetRequest::default();
    if let Some(p) = &parsed {
        if non_empty(&p.last_by_subj)
            || non_empty(&p.next_by_subj)
            || p.multi_last.as_ref().is_some_and(|m| !m.is_empty())
            || non_zero(&p.seq)
            || p.batch.is_some_and(|b| b > 0)
            || non_empty(&p.start_time)
            || non_zero(&p.up_to_seq)
            || non_empty(&p.up_to_time)
        {
            return Err("Bad Request");
        }
        req.no_hdr = p.no_hdr.unwrap_or(false);
    }
    req.last_by_subj = subject;
    Ok(req)
}

/// `DIRECT.GET.<stream>` with what to get in the body.
fn by_body(p: LenientGet) -> Result<MsgGetRequest, Bad> {
    let start_time = time(p.start_time.as_deref())?;
    let seq = p.seq.unwrap_or(0);
    let last = p.last_by_subj.clone().unwrap_or_default();
    let next = p.next_by_subj.clone().unwrap_or_default();
    let multi = p.multi_last.clone().unwrap_or_default();
    let batch = p.batch.unwrap_or(0);
    if seq == 0 && last.is_empty() && next.is_empty() && multi.is_empty() && start_time.is_none() {
        return Err("Empty Request");
    }
    if (seq > 0 && (!last.is_empty() || start_time.is_some()))
        || (start_time.is_some() && !last.is_empty())
        || (!last.is_empty() && !next.is_empty())
        || (!last.is_empty() && batch > 0)
        || (!last.is_empty() && !multi.is_empty())
        || (!next.is_empty() && !multi.is_empty())
        || (non_zero(&p.up_to_seq) && non_empty(&p.up_to_time))
    {
        return Err("Bad Request");
    }
    Ok(MsgGetRequest {
        multi_last: multi,
        up_to_seq: p.up_to_seq.unwrap_or(0),
        up_to_time: time(p.up_to_time.as_deref())?,
        seq,
        last_by_subj: last,
        next_by_subj: next,
        start_time,
        batch,
        max_bytes: p.max_bytes.unwrap_or(0),
        no_hdr: p.no_hdr.unwrap_or(false),
    })
}
