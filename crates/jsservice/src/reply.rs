//! Everything JetStream says back: API responses as nats-server writes
//! them (`type` first, then `error` when there is one, then the
//! endpoint's own fields, in struct order; error responses keep the
//! endpoint's type and its fields that are not omitted when empty:
//! `"total":0`, `"streams":null`, `"purged":0`...), statuses, and
//! [`answers`], the one place that turns what an applied input decided
//! into its reply.

use bytes::Bytes;
use jetstream::api::{self, ApiError, ConsumerInfo, StoredMessage, StreamInfo, TYPE_PREFIX};
use jetstream::output::{OutMsg, Output};
use jetstream::stream::PubAck;
use protocol::NATS_VERSION;
use serde::Serialize;

use crate::stream_sm::{Acked, Applied, Op, Outcome};

/// The endpoints, by their response type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    System,
    AccountInfo,
    StreamCreate,
    StreamUpdate,
    StreamNames,
    StreamList,
    StreamInfo,
    StreamDelete,
    StreamPurge,
    MsgGet,
    MsgDelete,
    ConsumerCreate,
    ConsumerInfo,
    ConsumerDelete,
    ConsumerNames,
    ConsumerList,
    ConsumerPause,
    ConsumerUnpin,
    ConsumerReset,
    MetaLeaderStepdown,
    MetaServerRemove,
    StreamLeaderStepdown,
    ConsumerLeaderStepdown,
    StreamRemovePeer,
}

impl Kind {
    fn type_name(self) -> &'static str {
        match self {
            Kind::System => "system_response",
            Kind::AccountInfo => "account_info_response",
            Kind::StreamCreate => "stream_create_response",
            Kind::StreamUpdate => "stream_update_response",
            Kind::StreamNames => "stream_names_response",
            Kind::StreamList => "stream_list_response",
            Kind::StreamInfo => "stream_info_response",
            Kind::StreamDelete => "stream_delete_response",
            Kind::StreamPurge => "stream_purge_response",
            Kind::MsgGet => "stream_msg_get_response",
            Kind::MsgDelete => "stream_msg_delete_response",
            Kind::ConsumerCreate => "consumer_create_response",
            Kind::ConsumerInfo => "consumer_info_response",
            Kind::ConsumerDelete => "consumer_delete_response",
            Kind::ConsumerNames => "consumer_names_response",
            Kind::ConsumerList => "consumer_list_response",
            Kind::ConsumerPause => "consumer_pause_response",
            Kind::ConsumerUnpin => "consumer_unpin_response",
            Kind::ConsumerReset => "consumer_reset_response",
            Kind::MetaLeaderStepdown => "meta_leader_stepdown_response",
            Kind::MetaServerRemove => "meta_server_remove_response",
            Kind::StreamLeaderStepdown => "stream_leader_stepdown_response",
            Kind::ConsumerLeaderStepdown => "consumer_leader_stepdown_response",
            Kind::StreamRemovePeer => "stream_remove_peer_response",
        }
    }
}

#[derive(Serialize)]
struct Envelope<'a, B: Serialize> {
    #[serde(rename = "type")]
    kind: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a ApiError>,
    #[serde(flatten)]
    body: B,
}

/// `CONSUMER.RESET`'s answer: the consumer's info, then where it starts.
#[derive(Serialize)]
struct Reset<'a> {
    #[serde(flatten)]
    info: &'a ConsumerInfo,
    #[serde(flatten)]
    reset_seq: ResetSeq,
}

#[derive(Serialize)]
struct ResetSeq {
    reset_seq: u64,
}

/// `total`, `offset` and `limit` of paged responses.
#[derive(Serialize)]
pub struct Paged<T: Serialize> {
    pub total: usize,
    pub offset: usize,
    pub limit: usize,
    #[serde(flatten)]
    pub rest: T,
}

#[derive(Serialize)]
pub struct Streams<T: Serialize> {
    pub streams: T,
}

#[derive(Serialize)]
pub struct Consumers<T: Serialize> {
    pub consumers: T,
}

#[derive(Serialize, Default)]
pub struct Success {
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub success: bool,
}

#[derive(Serialize, Default)]
pub struct Purged {
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub success: bool,
    pub purged: u64,
}

#[derive(Serialize)]
pub struct Created {
    #[serde(flatten)]
    pub info: StreamInfo,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub did_create: bool,
}

#[derive(Serialize)]
pub struct Message {
    pub message: StoredMessage,
}

#[derive(Serialize)]
pub struct Pause {
    pub paused: bool,
    #[serde(serialize_with = "ser_time")]
    pub pause_until: i64,
    #[serde(skip_serializing_if = "is_zero")]
    pub pause_remaining: i64,
}

fn is_zero(v: &i64) -> bool {
    *v == 0
}

fn ser_time<S: serde::Serializer>(v: &i64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&api::time::rfc3339(*v))
}

#[derive(Serialize)]
struct Empty {}

/// A success response.
pub fn ok<B: Serialize>(kind: Kind, body: &B) -> Bytes {
    encode(kind, None, body)
}

fn zero<T: Serialize>(rest: T) -> Paged<T> {
    Paged {
        total: 0,
        offset: 0,
        limit: 0,
        rest,
    }
}

/// An error response with the endpoint's always-present fields.
pub fn error(kind: Kind, e: &ApiError) -> Bytes {
    let none: [(); 0] = [];
    match kind {
        Kind::StreamInfo => encode(kind, Some(e), &zero(Empty {})),
        Kind::StreamNames => encode(
            kind,
            Some(e),
            &zero(Streams {
                streams: None::<Vec<String>>,
            }),
        ),
        Kind::StreamList => encode(kind, Some(e), &zero(Streams { streams: none })),
        Kind::ConsumerNames | Kind::ConsumerList => {
            encode(kind, Some(e), &zero(Consumers { consumers: none }))
        }
        Kind::StreamPurge => encode(kind, Some(e), &Purged::default()),
        Kind::ConsumerReset => encode(kind, Some(e), &ResetSeq { reset_seq: 0 }),
        Kind::ConsumerPause => encode(
            kind,
            Some(e),
            &Pause {
                paused: false,
                pause_until: 0,
                pause_remaining: 0,
            },
        ),
        _ => encode(kind, Some(e), &Empty {}),
    }
}

fn encode<B: Serialize>(kind: Kind, error: Option<&ApiError>, body: &B) -> Bytes {
    let env = Envelope {
        kind: format!("{TYPE_PREFIX}{}", kind.type_name()),
        error,
        body,
    };
    Bytes::from(api::gojson::to_vec(&env))
}

/// The version keys CREATE, UPDATE and INFO responses carry in the
/// config's metadata (never stored).
pub fn stamp_stream(info: &mut StreamInfo) {
    info.config
        .metadata
        .insert("_nats.ver".into(), NATS_VERSION.into());
    info.config
        .metadata
        .insert("_nats.level".into(), api::API_LEVEL.to_string());
}

/// Takes the stamps of `stamp_stream` off again: a list answers with the
/// configs as stored (a cluster's meta leader gathers its entries from
/// stream leaders' info answers).
pub fn unstamp_stream(info: &mut StreamInfo) {
    info.config.metadata.remove("_nats.ver");
    info.config.metadata.remove("_nats.level");
}

pub fn stamp_consumer(info: &mut ConsumerInfo) {
    info.config
        .metadata
        .insert("_nats.ver".into(), NATS_VERSION.into());
    info.config
        .metadata
        .insert("_nats.level".into(), api::API_LEVEL.to_string());
}

/// How an answer counts in account info's `api` statistics, as
/// nats-server counts it: every API call counts once (`total`); refusals
/// sent through its error path count as errors too, while results of an
/// applied change that carry an error (a purge or message delete that
/// failed in the store) are plain responses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Count {
    /// Not an API response: deliveries, statuses, PubAcks, a raw
    /// MSG.GET answer.
    No,
    Call,
    Error,
}

/// Something to send, and what it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub msg: OutMsg,
    pub what: What,
}

/// What an answer is, for counting it and for failing it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum What {
    /// A delivery, a status, an ack's reply: not counted, and not sent
    /// if the writes it depends on fail.
    Out,
    /// A PubAck; `ok` unless it carries an error.
    PubAck { ok: bool },
    /// An API response.
    Api { kind: Kind, count: Count },
    /// An advisory or metric: the driver gives it its id, time and
    /// domain, and sends it if anyone listens. Not sent if the writes it
    /// follows fail.
    Event(Box<jetstream::api::advisory::Event>),
}

impl Answer {
    /// An advisory or metric, on its subject (`msg` has no body: the
    /// driver renders it).
    pub fn event(e: jetstream::api::advisory::Event) -> Answer {
        Answer {
            msg: OutMsg {
                subject: e.subject(),
                route: None,
                reply: None,
                headers: None,
                payload: Bytes::new(),
            },
            what: What::Event(Box::new(e)),
        }
    }

    /// A message with nothing to count (a delivery, a status).
    pub fn out(msg: OutMsg) -> Answer {
        Answer {
            msg,
            what: What::Out,
        }
    }

    fn to(to: &str, body: Bytes, what: What) -> Answer {
        Answer {
            msg: OutMsg {
                subject: to.to_string(),
                route: None,
                reply: None,
                headers: None,
                payload: body,
            },
            what,
        }
    }

    /// The answer with the stream's identity in a `Nats-Stream-Identity`
    /// header (API level 5).
    pub fn with_identity(mut self, stream: &jetstream::stream::Stream) -> Answer {
        let identity = api::stream_identity(stream.created);
        self.msg.headers = Some(jetstream::headers::build(
            None,
            &[("Nats-Stream-Identity", &identity)],
        ));
        self
    }

    /// A body sent as it is to `to`, not counted.
    pub fn raw(to: &str, body: Bytes) -> Answer {
        Answer::to(to, body, What::Out)
    }

    /// A PubAck for stream `stream`.
    pub fn puback(to: &str, stream: &str, ack: &PubAck) -> Answer {
        let ok = !matches!(ack, PubAck::Error(_));
        Answer::to(to, ack.encode(stream), What::PubAck { ok })
    }

    /// An API response as built, counted as `count`.
    pub fn api(to: &str, kind: Kind, body: Bytes, count: Count) -> Answer {
        Answer::to(to, body, What::Api { kind, count })
    }

    /// A successful API response.
    pub fn ok<B: Serialize>(to: &str, kind: Kind, body: &B) -> Answer {
        Answer::api(to, kind, ok(kind, body), Count::Call)
    }

    /// An API refusal, counted as an error.
    pub fn refused(to: &str, kind: Kind, e: &ApiError) -> Answer {
        Answer::api(to, kind, error(kind, e), Count::Error)
    }

    /// An error in the result of an applied change: a plain response.
    pub fn failed(to: &str, kind: Kind, e: &ApiError) -> Answer {
        Answer::api(to, kind, error(kind, e), Count::Call)
    }

    /// A status reply with no body (`408 Request Timeout`, ...).
    pub fn status(to: &str, code: u16, description: &str) -> Answer {
        Answer::out(status_msg(to, code, description))
    }

    /// What a requester gets when nothing listens on `subject`.
    pub fn no_responders(to: &str, subject: &str) -> Answer {
        Answer::out(no_responders(to, subject))
    }

    /// How it counts in account info's API statistics.
    pub fn count(&self) -> Count {
        match self.what {
            What::Api { count, .. } => count,
            _ => Count::No,
        }
    }

    /// What to send instead when the writes this answer depends on failed
    /// (`e`): a PubAck or API response says so, anything else is not
    /// sent. An answer that was already an error stands.
    pub fn write_failed(self, stream: &str, e: &ApiError) -> Option<Answer> {
        let to = self.msg.subject.as_str();
        match self.what {
            What::Out | What::Event(_) => None,
            What::PubAck { ok: false } => Some(self),
            What::PubAck { ok: true } => {
                Some(Answer::puback(to, stream, &PubAck::Error(e.clone())))
            }
            What::Api { kind, .. } => Some(Answer::refused(to, kind, e)),
        }
    }
}

pub use crate::status::{no_responders, status_msg};

/// The answer to a create, with the stream's info (`info.cluster` as the
/// driver reports it).
pub fn created(to: &str, mut info: StreamInfo) -> Answer {
    stamp_stream(&mut info);
    let body = Created {
        info,
        did_create: true,
    };
    Answer::ok(to, Kind::StreamCreate, &body)
}

/// The answer to an update, with the stream's info after it.
pub fn updated(to: &str, mut info: StreamInfo) -> Answer {
    stamp_stream(&mut info);
    Answer::ok(to, Kind::StreamUpdate, &info)
}

/// What an applied input sends, in order: its outputs (deliveries,
/// statuses), then its requester's answer. `stream` is the stream after
/// the input; `cluster` gives what a consumer's info reports of its group
/// (asked only for a consumer create's or an update's answer).
/// One server sends these once the batch is durable, a cluster's leader
/// once the entry is committed and applied.
pub fn answers(
    stream: &jetstream::stream::Stream,
    applied: Applied,
    cluster: impl FnOnce() -> Option<api::ClusterInfo>,
) -> Vec<Answer> {
    let Applied {
        outcome,
        outputs,
        reply,
        ts,
    } = applied;
    let mut out: Vec<Answer> = outputs
        .into_iter()
        .filter_map(|o| match o {
            Output::Publish(m) => Some(Answer::out(m)),
            Output::ConsumerDeleted(_) => None,
            Output::Event(e) => Some(Answer::event(e)),
        })
        .collect();
    let Some(to) = reply else { return out };
    let to = to.as_str();
    let answer = match outcome {
        Outcome::None => None,
        Outcome::Published(_) | Outcome::FastBatch(_) if stream.config.no_ack => None,
        Outcome::FastBatch(bodies) => {
            out.extend(bodies.into_iter().map(|body| Answer::raw(to, body)));
            None
        }
        Outcome::Published(ack) => Some(Answer::puback(to, &stream.config.name, &ack)),
        Outcome::ConsumerCreated(Ok(mut info)) => {
            if let Some(c) = cluster() {
                info.cluster = Some(c);
            }
            stamp_consumer(&mut info);
            let answer = Answer::ok(to, Kind::ConsumerCreate, &info);
            // A direct consumer (a source's) learns whose stream it reads.
            Some(match info.config.direct {
                true => answer.with_identity(stream),
                false => answer,
            })
        }
        Outcome::ConsumerCreated(Err(e)) => Some(Answer::refused(to, Kind::ConsumerCreate, &e)),
        Outcome::ConsumerPaused(Ok(info)) => Some(Answer::ok(
            to,
            Kind::ConsumerPause,
            &Pause {
                paused: info.paused,
                pause_until: info.config.pause_until.unwrap_or(0),
                pause_remaining: info.pause_remaining,
            },
        )),
        Outcome::ConsumerPaused(Err(e)) => Some(Answer::refused(to, Kind::ConsumerPause, &e)),
        Outcome::ConsumerReset(Ok((mut info, seq)), identity) => {
            if let Some(c) = cluster() {
                info.cluster = Some(c);
            }
            stamp_consumer(&mut info);
            let body = Reset {
                info: &info,
                reset_seq: ResetSeq { reset_seq: seq },
            };
            let answer = Answer::ok(to, Kind::ConsumerReset, &body);
            Some(match identity {
                Some(_) => answer.with_identity(stream),
                None => answer,
            })
        }
        Outcome::ConsumerReset(Err(e), _) => Some(Answer::refused(to, Kind::ConsumerReset, &e)),
        Outcome::ConsumerUnpinned(Ok(())) => Some(Answer::ok(to, Kind::ConsumerUnpin, &Empty {})),
        Outcome::ConsumerUnpinned(Err(e)) => Some(Answer::refused(to, Kind::ConsumerUnpin, &e)),
        Outcome::Purged(Ok(purged)) => Some(Answer::ok(
            to,
            Kind::StreamPurge,
            &Purged {
                success: true,
                purged,
            },
        )),
        Outcome::Purged(Err(e)) => Some(Answer::failed(to, Kind::StreamPurge, &e)),
        Outcome::MsgDeleted(Ok(())) => {
            Some(Answer::ok(to, Kind::MsgDelete, &Success { success: true }))
        }
        Outcome::MsgDeleted(Err(e)) => Some(Answer::failed(to, Kind::MsgDelete, &e)),
        Outcome::ConsumerDeleted(Ok(())) => Some(Answer::ok(
            to,
            Kind::ConsumerDelete,
            &Success { success: true },
        )),
        Outcome::ConsumerDeleted(Err(e)) => Some(Answer::refused(to, Kind::ConsumerDelete, &e)),
        Outcome::Acked(Acked::Silent) => None,
        Outcome::Acked(Acked::Confirmed) => Some(Answer::raw(to, Bytes::new())),
        Outcome::Acked(Acked::NoListener) => Some(Answer::status(to, 503, "")),
        // A copy from a source is acked on the origin once applied here
        // (stored, or already had); one that failed is sent again.
        Outcome::Sourced(Ok(_)) => Some(Answer::raw(to, Bytes::from_static(b"+ACK"))),
        Outcome::SourceFlowControl(last) => {
            let headers = last.map(|(stream_seq, consumer_seq)| {
                jetstream::headers::build(
                    None,
                    &[
                        ("Nats-Last-Stream", &stream_seq.to_string()),
                        ("Nats-Last-Consumer", &consumer_seq.to_string()),
                    ],
                )
            });
            Some(Answer::out(OutMsg {
                subject: to.to_string(),
                route: None,
                reply: None,
                headers,
                payload: Bytes::new(),
            }))
        }
        Outcome::Sourced(Err(_)) => None,
        Outcome::Configured(Ok(())) => {
            out.push(Answer::event(jetstream::api::advisory::Event::Stream {
                stream: stream.config.name.clone(),
                action: jetstream::api::advisory::Action::Modify,
            }));
            let mut info = stream.info(ts, false, "");
            info.cluster = cluster();
            Some(updated(to, info))
        }
        Outcome::Configured(Err(e)) => Some(Answer::refused(to, Kind::StreamUpdate, &e)),
        Outcome::Barrier { .. } => None,
    };
    out.extend(answer);
    out
}

/// What the requester of an input that was never proposed hears, with
/// the subject the input came on: its leader lost the lead before
/// proposing it, or raft-rs dropped the proposal
/// (`replication::node::Event::Dropped`). A publish and a double ack
/// get "no responders", what a request gets when no leader listens at
/// all: not stored, try again (nats.go retries a publish on it). The
/// driver sends it only if no other server listens on that subject (a
/// new leader that got the same publish answers it). Nothing else is
/// answered: a pull's requester waits out its expiry (its heartbeats
/// tell it), an ack without a reply is redelivered, and a source's copy
/// is taken up again by its session (its origin ack must mean
/// "copied").
pub fn dropped(op: &Op) -> Option<(&str, Answer)> {
    let Op::Replied { reply, op } = op else {
        return None;
    };
    match op.as_ref() {
        Op::Publish { subject, .. } | Op::Ack { subject, .. } => {
            Some((subject.as_str(), Answer::no_responders(reply, subject)))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jetstream::api::E;

    #[test]
    fn error_shapes() {
        let e = E::STREAM_NOT_FOUND.err();
        assert_eq!(
            std::str::from_utf8(&error(Kind::StreamInfo, &e)).unwrap(),
            r#"{"type":"io.nats.jetstream.api.v1.stream_info_response","error":{"code":404,"err_code":10059,"description":"stream not found"},"total":0,"offset":0,"limit":0}"#
        );
        assert_eq!(
            std::str::from_utf8(&error(Kind::StreamNames, &e)).unwrap(),
            r#"{"type":"io.nats.jetstream.api.v1.stream_names_response","error":{"code":404,"err_code":10059,"description":"stream not found"},"total":0,"offset":0,"limit":0,"streams":null}"#
        );
        assert_eq!(
            std::str::from_utf8(&error(Kind::StreamPurge, &e)).unwrap(),
            r#"{"type":"io.nats.jetstream.api.v1.stream_purge_response","error":{"code":404,"err_code":10059,"description":"stream not found"},"purged":0}"#
        );
        assert_eq!(
            std::str::from_utf8(&error(Kind::StreamDelete, &e)).unwrap(),
            r#"{"type":"io.nats.jetstream.api.v1.stream_delete_response","error":{"code":404,"err_code":10059,"description":"stream not found"}}"#
        );
        assert_eq!(
            std::str::from_utf8(&ok(Kind::StreamDelete, &Success { success: true })).unwrap(),
            r#"{"type":"io.nats.jetstream.api.v1.stream_delete_response","success":true}"#
        );
    }

    /// A dropped publish or double ack is told "no responders"; a pull,
    /// a plain ack and a source's copy are not answered.
    #[test]
    fn what_a_dropped_input_answers() {
        let publish = Op::Publish {
            subject: "orders.1".into(),
            headers: None,
            payload: Bytes::from_static(b"x"),
        };
        let ack = Op::Ack {
            consumer: "C".into(),
            subject: "$JS.ACK.S.C.1.1.1.0.0".into(),
            body: Bytes::from_static(b"+ACK"),
        };
        let pull = Op::Pull {
            consumer: "C".into(),
            request: Bytes::from_static(b"{}"),
            reply: "_INBOX.p".into(),
        };
        let sourced = Op::Sourced {
            key: "k".into(),
            origin_seq: 1,
            origin_ts: 0,
            pending: 0,
            after: None,
            subject: "s".into(),
            headers: None,
            payload: Bytes::new(),
        };
        let cases = [
            (publish.clone().replied(Some("_INBOX.a")), Some("_INBOX.a")),
            (ack.clone().replied(Some("_INBOX.b")), Some("_INBOX.b")),
            (publish, None),
            (ack, None),
            (pull, None),
            (sourced.replied(Some("$JS.ACK.O.c.1.1.1.0.0")), None),
        ];
        for (op, to) in cases {
            let got = dropped(&op);
            assert_eq!(
                got.as_ref().map(|(_, a)| a.msg.subject.as_str()),
                to,
                "{op:?}"
            );
            if let Some((subject, a)) = got {
                assert!(subject == "orders.1" || subject.starts_with("$JS.ACK."));
                let headers = a.msg.headers.expect("a status");
                let text = String::from_utf8_lossy(&headers);
                assert!(text.starts_with("NATS/1.0 503"), "{text}");
                assert!(a.msg.payload.is_empty());
            }
        }
    }
}
