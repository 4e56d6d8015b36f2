//! The classifier: what a message on a JetStream subject asks for.
//! [`classify`] turns (subject, reply, headers, payload) into a typed
//! [`Request`], checking everything that needs no stream: the API level,
//! the body's JSON (read the way nats-server's Go decoder reads it), and
//! the request-level rules, in nats-server's order. What needs a stream
//! (it exists, its consumer does, it allows direct gets) is checked by
//! `stream_api`, against the stream.
//!
//! One server and a cluster classify alike; where nats-server answers a
//! request differently in a cluster, [`Mode`] says which.

use bytes::Bytes;
use jetstream::api::{
    self, go_types::GoShape, gojson, parse_stream_config, ApiError, MsgDeleteRequest,
    MsgGetRequest, NamesRequest, PurgeRequest, StreamConfig, StreamInfoRequest, StreamNamesRequest,
    E,
};
use jetstream::headers;
use jetstream::stream::config as stream_config;
use serde::de::DeserializeOwned;
use serde::Deserialize;

use crate::reply::{Answer, Kind};
use crate::stream_sm::Op;

/// A message on a JetStream subject, as a subscription received it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inbound {
    pub subject: String,
    pub reply: Option<String>,
    pub headers: Option<Bytes>,
    pub payload: Bytes,
}

/// Whether this server runs JetStream alone or in a cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Single,
    Clustered,
}

/// What a message asks for.
#[derive(Debug)]
pub enum Request {
    /// Nobody answers: nats-server has no subscription there, or there is
    /// nowhere to answer.
    Ignore,
    /// Answered at once (a refusal, a status).
    Answer(Answer),
    /// About the account's streams as a whole: decided where every
    /// stream is known (`account`).
    Account {
        reply: String,
        request: AccountRequest,
    },
    /// About one stream: answered by (or through) that stream.
    Stream {
        stream: String,
        reply: Option<String>,
        request: StreamRequest,
    },
    /// The meta group's operator API (a cluster's meta leader).
    Operator {
        reply: String,
        request: OperatorRequest,
    },
}

#[derive(Debug)]
pub enum AccountRequest {
    Info,
    Create {
        name: String,
        config: Box<StreamConfig>,
    },
    Update {
        name: String,
        config: Box<StreamConfig>,
    },
    Delete {
        name: String,
    },
    Names(StreamNamesRequest),
    List(StreamNamesRequest),
    /// Take a server off a stream (a cluster only).
    PeerRemove {
        name: String,
        peer: String,
    },
}

impl AccountRequest {
    pub fn kind(&self) -> Kind {
        match self {
            AccountRequest::Info => Kind::AccountInfo,
            AccountRequest::Create { .. } => Kind::StreamCreate,
            AccountRequest::Update { .. } => Kind::StreamUpdate,
            AccountRequest::Delete { .. } => Kind::StreamDelete,
            AccountRequest::Names(_) => Kind::StreamNames,
            AccountRequest::List(_) => Kind::StreamList,
            AccountRequest::PeerRemove { .. } => Kind::StreamRemovePeer,
        }
    }
}

/// A request about one stream.
#[derive(Debug)]
pub enum StreamRequest {
    /// Answered from the stream's state (`stream_api::read`).
    Read(Read),
    /// An input to the stream's state machine, applied (one server) or
    /// proposed (a cluster) once `stream_api::admit` lets it in.
    Change(Op),
    /// Hand the stream's (and its consumers') leadership over (a cluster
    /// only): to the server named, if one is.
    StepDown {
        consumer: Option<String>,
        preferred: Option<String>,
    },
}

#[derive(Debug)]
pub enum Read {
    /// STREAM.INFO; answered as a create when `create` (see
    /// [`RESPONSE_TYPE`]).
    Info {
        request: StreamInfoRequest,
        create: bool,
    },
    MsgGet(MsgGetRequest),
    ConsumerInfo(String),
    ConsumerNames(i64),
    ConsumerList(i64),
    /// `DIRECT.GET`, with the subject given after the stream name, if
    /// any; its body is read only if the stream serves direct gets.
    Direct {
        subject: Option<String>,
        body: Bytes,
    },
}

impl Read {
    /// Whether the answer can be large (a stream's subjects or deleted
    /// sequences, a page of consumer infos): worth computing off the
    /// driver's event loop.
    pub fn may_be_large(&self) -> bool {
        matches!(self, Read::Info { .. } | Read::ConsumerList(_))
    }
}

#[derive(Debug)]
pub enum OperatorRequest {
    /// `$JS.API.META.LEADER.STEPDOWN`, to the server named, if one is.
    MetaStepDown { preferred: String },
    /// `$JS.API.SERVER.REMOVE`: a server by name, or by peer id (which
    /// takes precedence).
    ServerRemove { peer: String, peer_id: String },
}

/// Why a request gets no further.
pub type Refusal = (Kind, ApiError);

const API_PREFIX: &str = "$JS.API.";
pub const META_STEPDOWN: &str = "$JS.API.META.LEADER.STEPDOWN";
/// A header naming the response type a request is answered as: `create`
/// on a STREAM.INFO makes it a create's answer (a cluster's meta leader
/// forwards a create of a stream that exists, with the same config, to
/// its leader so).
pub const RESPONSE_TYPE: &str = "Nats-Response-Type";
pub const SERVER_REMOVE: &str = "$JS.API.SERVER.REMOVE";

/// What `m` asks for (see the module's notes). `new_name` names a
/// consumer whose create names none (called once per create, so every
/// replica of a stream uses the same name).
pub fn classify(m: Inbound, mode: Mode, new_name: &mut dyn FnMut() -> String) -> Request {
    if let Some(rest) = m.subject.strip_prefix("$JS.ACK.") {
        return ack(rest, &m, false);
    }
    if let Some(rest) = m.subject.strip_prefix("$JS.FC.") {
        return ack(rest, &m, true);
    }
    let Some(rest) = m.subject.strip_prefix(API_PREFIX) else {
        return Request::Ignore;
    };
    let tokens: Vec<&str> = rest.split('.').collect();
    let Some(reply) = m.reply.clone().filter(|r| !r.is_empty()) else {
        return Request::Ignore;
    };
    let operator = matches!(
        tokens.as_slice(),
        ["META", "LEADER", "STEPDOWN"] | ["SERVER", "REMOVE"]
    );
    let kind = endpoint(&tokens);
    if operator {
        if mode == Mode::Single {
            return Request::Ignore;
        }
    } else if kind.is_none() && !is_pull_or_direct(&tokens) {
        // nats-server has no subscription there: no reply at all.
        return Request::Ignore;
    }
    if !api_level_ok(m.headers.as_deref()) {
        return match kind {
            None if !operator => Request::Answer(Answer::status(&reply, 412, "Required Api Level")),
            _ => Request::Answer(Answer::refused(
                &reply,
                kind.unwrap_or(Kind::System),
                &E::REQUIRED_API_LEVEL.err(),
            )),
        };
    }
    match classify_api(&tokens, &m, mode, new_name) {
        Ok(Classified::Account(request)) => Request::Account { reply, request },
        Ok(Classified::Stream(stream, request)) => Request::Stream {
            stream,
            reply: Some(reply),
            request,
        },
        Ok(Classified::Operator(request)) => Request::Operator { reply, request },
        Ok(Classified::Ignore) => Request::Ignore,
        Err((kind, e)) => Request::Answer(Answer::refused(&reply, kind, &e)),
    }
}

enum Classified {
    Account(AccountRequest),
    Stream(String, StreamRequest),
    Operator(OperatorRequest),
    Ignore,
}

/// What a flow-control reply says was received: `Nats-Last-Stream` (when
/// above zero) and `Nats-Last-Consumer` (zero when missing), as
/// nats-server's `processFlowControl` reads them.
fn flow_control_last(headers: Option<&[u8]>) -> Option<(u64, u64)> {
    let h = headers?;
    let number = |name| {
        jetstream::headers::get(h, name)
            .and_then(|v| v.parse::<i64>().ok())
            .unwrap_or(0)
    };
    let stream_seq = number("Nats-Last-Stream");
    (stream_seq > 0).then(|| {
        (
            stream_seq as u64,
            number("Nats-Last-Consumer").max(0) as u64,
        )
    })
}

/// `$JS.ACK.<stream>.<consumer>.…` and `$JS.FC.<stream>.<consumer>.…`.
fn ack(rest: &str, m: &Inbound, flow_control: bool) -> Request {
    let mut tokens = rest.split('.');
    let (Some(stream), Some(consumer)) = (tokens.next(), tokens.next()) else {
        return Request::Ignore;
    };
    let consumer = consumer.to_string();
    let op = if flow_control {
        Op::FlowControl {
            consumer,
            subject: m.subject.clone(),
            last: flow_control_last(m.headers.as_deref()),
        }
    } else {
        Op::Ack {
            consumer,
            subject: m.subject.clone(),
            body: m.payload.clone(),
        }
    };
    Request::Stream {
        stream: stream.to_string(),
        reply: m.reply.clone().filter(|r| !r.is_empty()),
        request: StreamRequest::Change(op),
    }
}

fn classify_api(
    tokens: &[&str],
    m: &Inbound,
    mode: Mode,
    new_name: &mut dyn FnMut() -> String,
) -> Result<Classified, Refusal> {
    use AccountRequest as A;
    let body = &m.payload;
    let stream = |name: &str, r: StreamRequest| Ok(Classified::Stream(name.to_string(), r));
    let read = |name: &str, r: Read| stream(name, StreamRequest::Read(r));
    let change = |name: &str, op: Op| stream(name, StreamRequest::Change(op));
    match tokens {
        ["INFO"] => Ok(Classified::Account(A::Info)),
        ["STREAM", "CREATE", name] => {
            let config = stream_config(Kind::StreamCreate, name, body, mode)?;
            Ok(Classified::Account(A::Create {
                name: name.to_string(),
                config: Box::new(config),
            }))
        }
        ["STREAM", "UPDATE", name] => {
            let config = stream_config(Kind::StreamUpdate, name, body, mode)?;
            Ok(Classified::Account(A::Update {
                name: name.to_string(),
                config: Box::new(config),
            }))
        }
        ["STREAM", "NAMES"] => Ok(Classified::Account(A::Names(
            optional(body).map_err(|e| (Kind::StreamNames, e))?,
        ))),
        ["STREAM", "LIST"] => Ok(Classified::Account(A::List(
            optional(body).map_err(|e| (Kind::StreamList, e))?,
        ))),
        ["STREAM", "DELETE", name] => {
            if !is_empty_request(body) {
                return Err((Kind::StreamDelete, E::NOT_EMPTY_REQUEST.err()));
            }
            Ok(Classified::Account(A::Delete {
                name: name.to_string(),
            }))
        }
        ["STREAM", "INFO", name] => {
            let create = m
                .headers
                .as_deref()
                .and_then(|h| headers::get(h, RESPONSE_TYPE))
                .is_some_and(|t| t == "create");
            let request = optional(body).map_err(|e| (Kind::StreamInfo, e))?;
            read(name, Read::Info { request, create })
        }
        ["STREAM", "PURGE", name] => {
            let req: PurgeRequest = optional(body).map_err(|e| (Kind::StreamPurge, e))?;
            if req.seq > 0 && req.keep > 0 {
                return Err((Kind::StreamPurge, E::BAD_REQUEST.err()));
            }
            change(
                name,
                Op::Purge {
                    request: body.clone(),
                },
            )
        }
        ["STREAM", "MSG", "GET", name] => read(
            name,
            Read::MsgGet(msg_get_request(body).map_err(|e| (Kind::MsgGet, e))?),
        ),
        ["STREAM", "MSG", "DELETE", name] => {
            let kind = Kind::MsgDelete;
            if is_empty_request(body) {
                return Err((kind, E::BAD_REQUEST.err()));
            }
            let req: MsgDeleteRequest = strict(body).map_err(|e| (kind, e))?;
            change(
                name,
                Op::DeleteMsg {
                    seq: req.seq,
                    erase: !req.no_erase,
                },
            )
        }
        ["DIRECT", "GET", name, subject @ ..] => read(
            name,
            Read::Direct {
                subject: (!subject.is_empty()).then(|| subject.join(".")),
                body: body.clone(),
            },
        ),
        ["CONSUMER", "CREATE", name, rest @ ..] => {
            let subject_name = rest.first().map(|s| s.to_string());
            let filter = (rest.len() > 1).then(|| rest[1..].join("."));
            let identity = stream_identity(m);
            let op = consumer_create(name, subject_name, filter, false, body, identity, new_name)?;
            change(name, op)
        }
        // nats-server subscribes to `DURABLE.CREATE.*.*` only: other
        // token counts get no answer.
        ["CONSUMER", "DURABLE", "CREATE", name, durable] => {
            let identity = stream_identity(m);
            let op = consumer_create(
                name,
                Some(durable.to_string()),
                None,
                true,
                body,
                identity,
                new_name,
            )?;
            change(name, op)
        }
        ["CONSUMER", "DURABLE", "CREATE", ..] | ["CONSUMER", "CREATE"] => Ok(Classified::Ignore),
        ["CONSUMER", "INFO", name, consumer] => {
            if !is_empty_request(body) {
                return Err((Kind::ConsumerInfo, E::NOT_EMPTY_REQUEST.err()));
            }
            read(name, Read::ConsumerInfo(consumer.to_string()))
        }
        ["CONSUMER", "DELETE", name, consumer] => {
            if !is_empty_request(body) {
                return Err((Kind::ConsumerDelete, E::NOT_EMPTY_REQUEST.err()));
            }
            change(
                name,
                Op::DeleteConsumer {
                    name: consumer.to_string(),
                },
            )
        }
        ["CONSUMER", "NAMES", name] => {
            let req: NamesRequest = optional(body).map_err(|e| (Kind::ConsumerNames, e))?;
            read(name, Read::ConsumerNames(req.offset))
        }
        ["CONSUMER", "LIST", name] => {
            let req: NamesRequest = optional(body).map_err(|e| (Kind::ConsumerList, e))?;
            read(name, Read::ConsumerList(req.offset))
        }
        ["CONSUMER", "PAUSE", name, consumer] => {
            let req: PauseRequest = optional(body).map_err(|e| (Kind::ConsumerPause, e))?;
            change(
                name,
                Op::PauseConsumer {
                    name: consumer.to_string(),
                    until: req.pause_until,
                },
            )
        }
        ["CONSUMER", "RESET", name, consumer] => {
            let req = reset_request(body).map_err(|e| (Kind::ConsumerReset, e))?;
            change(
                name,
                Op::ResetConsumer {
                    name: consumer.to_string(),
                    seq: req.seq,
                    identity: stream_identity(m).is_some(),
                },
            )
        }
        ["CONSUMER", "UNPIN", name, consumer] => {
            let req = unpin_request(body).map_err(|e| (Kind::ConsumerUnpin, e))?;
            change(
                name,
                Op::UnpinConsumer {
                    name: consumer.to_string(),
                    group: req.group,
                },
            )
        }
        // Parsed once the consumer is known to exist: nats-server has no
        // subscription for one that does not (`stream_api::admit`).
        ["CONSUMER", "MSG", "NEXT", name, consumer] => change(
            name,
            Op::Pull {
                consumer: consumer.to_string(),
                request: body.clone(),
                reply: m.reply.clone().unwrap_or_default(),
            },
        ),
        // A single server has no leaders to move and no peers to remove;
        // nats-server answers these so.
        ["STREAM", "LEADER", "STEPDOWN", _]
        | ["CONSUMER", "LEADER", "STEPDOWN", _, _]
        | ["STREAM", "PEER", "REMOVE", _]
            if mode == Mode::Single =>
        {
            let kind = endpoint(tokens).unwrap_or(Kind::System);
            Err((kind, E::CLUSTER_REQUIRED.err()))
        }
        ["STREAM", "LEADER", "STEPDOWN", name] => {
            let preferred = preferred(body).map_err(|e| (Kind::StreamLeaderStepdown, e))?;
            stream(
                name,
                StreamRequest::StepDown {
                    consumer: None,
                    preferred,
                },
            )
        }
        ["CONSUMER", "LEADER", "STEPDOWN", name, consumer] => {
            let preferred = preferred(body).map_err(|e| (Kind::ConsumerLeaderStepdown, e))?;
            stream(
                name,
                StreamRequest::StepDown {
                    consumer: Some(consumer.to_string()),
                    preferred,
                },
            )
        }
        ["STREAM", "PEER", "REMOVE", name] => {
            let peer = peer_remove(body)?;
            Ok(Classified::Account(A::PeerRemove {
                name: name.to_string(),
                peer,
            }))
        }
        ["META", "LEADER", "STEPDOWN"] => {
            let kind = Kind::MetaLeaderStepdown;
            let req: StepDownRequest = object_or_default(body).map_err(|e| (kind, e))?;
            Ok(Classified::Operator(OperatorRequest::MetaStepDown {
                preferred: req.placement.map(|p| p.preferred).unwrap_or_default(),
            }))
        }
        ["SERVER", "REMOVE"] => {
            let kind = Kind::MetaServerRemove;
            let trimmed: Vec<u8> = body
                .iter()
                .copied()
                .filter(|b| !b.is_ascii_whitespace())
                .collect();
            if trimmed.is_empty() || trimmed == b"{}" {
                return Err((kind, E::BAD_REQUEST.err()));
            }
            let req: RemoveRequest =
                serde_json::from_slice(body).map_err(|e| (kind, E::INVALID_JSON.with("err", e)))?;
            Ok(Classified::Operator(OperatorRequest::ServerRemove {
                peer: req.peer,
                peer_id: req.peer_id,
            }))
        }
        _ => Err((Kind::System, E::BAD_REQUEST.err())),
    }
}

/// The stream a request about one stream names, and its response kind:
/// what a cluster's meta leader answers "not found" to, before reading
/// the body, when the stream does not exist (its leader answers the
/// rest). Pulls and direct gets are not among them (nothing subscribes
/// there for a stream that does not exist), nor consumer creates, whose
/// body nats-server reads first.
pub fn stream_of(subject: &str) -> Option<(&str, Kind)> {
    let tokens: Vec<&str> = subject.strip_prefix(API_PREFIX)?.split('.').collect();
    let kind = endpoint(&tokens)?;
    let name = match tokens.as_slice() {
        ["STREAM", "INFO" | "PURGE", s] | ["STREAM", "MSG", "GET" | "DELETE", s] => s,
        ["STREAM", "LEADER", "STEPDOWN", s] => s,
        ["CONSUMER", "INFO" | "DELETE" | "PAUSE" | "UNPIN", s, _] => s,
        ["CONSUMER", "NAMES" | "LIST", s] => s,
        ["CONSUMER", "LEADER", "STEPDOWN", s, _] => s,
        _ => return None,
    };
    Some((name, kind))
}

/// Bodies nats-server reads only when they start like a JSON object or
/// array; anything else (empty, `null`, a string) is the zero request.
pub fn optional<T: DeserializeOwned + Default + GoShape>(body: &[u8]) -> Result<T, ApiError> {
    if is_object_or_array(body) {
        strict(body)
    } else {
        Ok(T::default())
    }
}

/// nats-server's request decoding, error texts included.
pub fn strict<T: DeserializeOwned + GoShape>(body: &[u8]) -> Result<T, ApiError> {
    gojson::decode(body, T::SCHEMA, gojson::Mode::Request)
        .map_err(|e| E::INVALID_JSON.with("err", e))
}

/// nats-server's `isJSONObjectOrArray`.
fn is_object_or_array(body: &[u8]) -> bool {
    body.iter()
        .find(|b| !b.is_ascii_whitespace())
        .is_some_and(|b| *b == b'{' || *b == b'[')
}

/// A body read with serde's defaults when it holds a JSON object or
/// array, the zero request otherwise (the operator API's reading).
fn object_or_default<T: DeserializeOwned + Default>(body: &[u8]) -> Result<T, ApiError> {
    if !is_object_or_array(body) {
        return Ok(T::default());
    }
    serde_json::from_slice(body).map_err(|e| E::INVALID_JSON.with("err", e))
}

/// nats-server's "empty request": no bytes, or a JSON object with no keys.
pub fn is_empty_request(body: &[u8]) -> bool {
    if body.is_empty() {
        return true;
    }
    matches!(
        serde_json::from_slice::<serde_json::Value>(body),
        Ok(serde_json::Value::Object(m)) if m.is_empty()
    )
}

#[derive(Deserialize, Default)]
struct ResetRequest {
    #[serde(default)]
    seq: u64,
}

/// `CONSUMER.RESET`'s body: nothing (back to the ack floor), or plain
/// `json.Unmarshal` of `{"seq": n}`.
fn reset_request(body: &[u8]) -> Result<ResetRequest, ApiError> {
    if body.is_empty() {
        return Ok(ResetRequest::default());
    }
    gojson::decode(
        body,
        &api::go_types::CONSUMER_RESET_REQUEST,
        gojson::Mode::Unmarshal,
    )
    .map_err(|e| E::INVALID_JSON.with("err", e))
}

#[derive(Deserialize, Default)]
struct UnpinRequest {
    #[serde(default)]
    group: String,
}

/// `CONSUMER.UNPIN`'s body, checked as nats-server checks it: plain
/// `json.Unmarshal` (so an empty body is an error), a group, a valid name.
fn unpin_request(body: &[u8]) -> Result<UnpinRequest, ApiError> {
    let req: UnpinRequest = gojson::decode(
        body,
        &api::go_types::CONSUMER_UNPIN_REQUEST,
        gojson::Mode::Unmarshal,
    )
    .map_err(|e| E::INVALID_JSON.with("err", e))?;
    if req.group.is_empty() {
        return Err(E::INVALID_JSON.with("err", "consumer group not specified"));
    }
    if !jetstream::consumer::valid_group_name(&req.group) {
        return Err(E::CONSUMER_INVALID_GROUP_NAME.err());
    }
    Ok(req)
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct PauseRequest {
    #[serde(default, with = "api::time::opt")]
    pause_until: Option<i64>,
}

impl GoShape for PauseRequest {
    const SCHEMA: &'static gojson::Schema = &api::go_types::CONSUMER_PAUSE_REQUEST;
}

#[derive(Deserialize, Default)]
struct Placement {
    #[serde(default)]
    preferred: String,
}

#[derive(Deserialize, Default)]
struct StepDownRequest {
    #[serde(default)]
    placement: Option<Placement>,
}

#[derive(Deserialize, Default)]
struct RemoveRequest {
    /// The server's name.
    #[serde(default)]
    peer: String,
    /// Its peer id (takes precedence): flotilla's hex id or nats-server's
    /// 8-character name hash.
    #[serde(default)]
    peer_id: String,
}

/// The server a step-down request prefers (`placement.preferred`), if any.
fn preferred(body: &[u8]) -> Result<Option<String>, ApiError> {
    if body
        .iter()
        .find(|b| !b.is_ascii_whitespace())
        .is_none_or(|b| *b != b'{')
    {
        return Ok(None);
    }
    let r: StepDownRequest =
        serde_json::from_slice(body).map_err(|e| E::INVALID_JSON.with("err", e))?;
    Ok(r.placement.map(|p| p.preferred).filter(|p| !p.is_empty()))
}

/// STREAM.PEER.REMOVE's body: the server to take off.
fn peer_remove(body: &[u8]) -> Result<String, Refusal> {
    let kind = Kind::StreamRemovePeer;
    if is_empty_request(body) {
        return Err((kind, E::BAD_REQUEST.err()));
    }
    #[derive(Deserialize)]
    struct Request {
        #[serde(default)]
        peer: String,
    }
    let req: Request =
        serde_json::from_slice(body).map_err(|e| (kind, E::INVALID_JSON.with("err", e)))?;
    if req.peer.is_empty() {
        return Err((kind, E::BAD_REQUEST.err()));
    }
    Ok(req.peer)
}

/// Parses and checks a create or update body for stream `name`.
fn stream_config(kind: Kind, name: &str, body: &[u8], mode: Mode) -> Result<StreamConfig, Refusal> {
    let (mut cfg, pedantic) =
        parse_stream_config(body).map_err(|e| (kind, E::INVALID_JSON.with("err", e)))?;
    if kind == Kind::StreamCreate {
        if cfg.name != name {
            return Err((kind, E::STREAM_MISMATCH.err()));
        }
        if name.contains(['\\', '/']) {
            return Err((kind, E::STREAM_NAME_CONTAINS_PATH_SEPARATORS.err()));
        }
        if cfg.sealed {
            return Err((
                kind,
                E::STREAM_INVALID_CONFIG
                    .with("err", "stream configuration for create can not be sealed"),
            ));
        }
    }
    stream_config::check(&mut cfg, pedantic, mode == Mode::Clustered).map_err(|e| (kind, e))?;
    if kind == Kind::StreamUpdate && cfg.name != name {
        return Err((kind, E::STREAM_MISMATCH.err()));
    }
    cfg.metadata.insert(
        "_nats.req.level".into(),
        stream_config::required_level(&cfg).to_string(),
    );
    Ok(cfg)
}

/// A consumer create's request-level checks, in nats-server's order (the
/// body, the stream it names, the name and filter in the subject), as the
/// input every replica applies.
fn consumer_create(
    stream: &str,
    subject_name: Option<String>,
    filter: Option<String>,
    durable_api: bool,
    body: &Bytes,
    identity: Option<String>,
    new_name: &mut dyn FnMut() -> String,
) -> Result<Op, Refusal> {
    let kind = Kind::ConsumerCreate;
    let mut req = api::CreateConsumerRequest::parse(body)
        .map_err(|e| (kind, E::INVALID_JSON.with("err", e)))?;
    if req.stream_name != stream {
        return Err((kind, E::STREAM_MISMATCH.err()));
    }
    jetstream::consumer::prepare_create(
        &mut req,
        subject_name.as_deref(),
        filter.as_deref(),
        durable_api,
    )
    .map_err(|e| (kind, e))?;
    Ok(Op::ConsumerCreate {
        request: body.clone(),
        subject_name,
        filter,
        durable_api,
        generated: new_name(),
        identity,
        limits: Default::default(),
    })
}

/// The stream identity a request names (`Nats-Stream-Identity`).
fn stream_identity(m: &Inbound) -> Option<String> {
    let h = m.headers.as_deref()?;
    jetstream::headers::get(h, "Nats-Stream-Identity").map(str::to_string)
}

/// Whether this server has the API level a request requires
/// (`Nats-Required-Api-Level`), or it requires none.
fn api_level_ok(headers: Option<&[u8]>) -> bool {
    let level = headers.and_then(|h| headers::get(h, "Nats-Required-Api-Level"));
    level.is_none_or(|level| {
        level
            .trim()
            .parse::<i64>()
            .is_ok_and(|l| l <= api::API_LEVEL)
    })
}

/// MSG.GET's checks, in nats-server's order.
fn msg_get_request(body: &[u8]) -> Result<MsgGetRequest, ApiError> {
    if is_empty_request(body) {
        return Err(E::BAD_REQUEST.err());
    }
    let req: MsgGetRequest = strict(body)?;
    if req.batch > 0 || req.max_bytes > 0 {
        return Err(E::BAD_REQUEST.err());
    }
    let seq = req.seq > 0;
    let last = !req.last_by_subj.is_empty();
    let next = !req.next_by_subj.is_empty();
    let time = req.start_time.is_some();
    if (seq && last)
        || (!seq && !last && !next && !time)
        || (seq && time)
        || (time && last)
        || (last && next)
    {
        return Err(E::BAD_REQUEST.err());
    }
    Ok(req)
}

fn is_pull_or_direct(tokens: &[&str]) -> bool {
    matches!(
        tokens,
        ["CONSUMER", "MSG", "NEXT", _, _] | ["DIRECT", "GET", _, ..]
    )
}

/// The response kind of an API subject, for errors found before routing.
fn endpoint(tokens: &[&str]) -> Option<Kind> {
    Some(match tokens {
        ["INFO"] => Kind::AccountInfo,
        ["STREAM", "CREATE", _] => Kind::StreamCreate,
        ["STREAM", "UPDATE", _] => Kind::StreamUpdate,
        ["STREAM", "NAMES"] => Kind::StreamNames,
        ["STREAM", "LIST"] => Kind::StreamList,
        ["STREAM", "INFO", _] => Kind::StreamInfo,
        ["STREAM", "DELETE", _] => Kind::StreamDelete,
        ["STREAM", "PURGE", _] => Kind::StreamPurge,
        ["STREAM", "MSG", "GET", _] => Kind::MsgGet,
        ["STREAM", "MSG", "DELETE", _] => Kind::MsgDelete,
        ["CONSUMER", "CREATE", _, ..] | ["CONSUMER", "DURABLE", "CREATE", _, _] => {
            Kind::ConsumerCreate
        }
        ["CONSUMER", "INFO", _, _] => Kind::ConsumerInfo,
        ["CONSUMER", "DELETE", _, _] => Kind::ConsumerDelete,
        ["CONSUMER", "NAMES", _] => Kind::ConsumerNames,
        ["CONSUMER", "LIST", _] => Kind::ConsumerList,
        ["CONSUMER", "PAUSE", _, _] => Kind::ConsumerPause,
        ["CONSUMER", "UNPIN", _, _] => Kind::ConsumerUnpin,
        ["CONSUMER", "RESET", _, _] => Kind::ConsumerReset,
        ["STREAM", "LEADER", "STEPDOWN", _] => Kind::StreamLeaderStepdown,
        ["CONSUMER", "LEADER", "STEPDOWN", _, _] => Kind::ConsumerLeaderStepdown,
        ["STREAM", "PEER", "REMOVE", _] => Kind::StreamRemovePeer,
        ["META", "LEADER", "STEPDOWN"] => Kind::MetaLeaderStepdown,
        ["SERVER", "REMOVE"] => Kind::MetaServerRemove,
        _ => return None,
    })
}
