//! Request bodies, read as nats-server reads them (Go's decoder rules,
//! `jetstream::api::gojson`, or plain `json.Unmarshal` where it uses
//! that), with the request-level checks that need no stream.

use bytes::Bytes;
use jetstream::api::{
    self, go_types::GoShape, gojson, parse_stream_config, ApiError, MsgGetRequest, StreamConfig, E,
};
use jetstream::stream::config as stream_config;
use serde::de::DeserializeOwned;
use serde::Deserialize;

use super::types::{Mode, Refusal};
use crate::reply::Kind;
use crate::stream_sm::Op;

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
pub(super) fn object_or_default<T: DeserializeOwned + Default>(body: &[u8]) -> Result<T, ApiError> {
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
pub(super) struct ResetRequest {
    #[serde(default)]
    pub(super) seq: u64,
}

/// `CONSUMER.RESET`'s body: nothing (back to the ack floor), or plain
/// `json.Unmarshal` of `{"seq": n}`.
pub(super) fn reset_request(body: &[u8]) -> Result<ResetRequest, ApiError> {
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
pub(super) struct UnpinRequest {
    #[serde(default)]
    pub(super) group: String,
}

/// `CONSUMER.UNPIN`'s body, checked as nats-server checks it: plain
/// `json.Unmarshal` (so an empty body is an error), a group, a valid name.
pub(super) fn unpin_request(body: &[u8]) -> Result<UnpinRequest, ApiError> {
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
pub(super) struct PauseRequest {
    #[serde(default, with = "api::time::opt")]
    pub(super) pause_until: Option<i64>,
}

impl GoShape for PauseRequest {
    const SCHEMA: &'static gojson::Schema = &api::go_types::CONSUMER_PAUSE_REQUEST;
}

#[derive(Deserialize, Default)]
pub(super) struct Placement {
    #[serde(default)]
    pub(super) preferred: String,
}

#[derive(Deserialize, Default)]
pub(super) struct StepDownRequest {
    #[serde(default)]
    pub(super) placement: Option<Placement>,
}

#[derive(Deserialize, Default)]
pub(super) struct RemoveRequest {
    /// The server's name.
    #[serde(default)]
    pub(super) peer: String,
    /// Its peer id (takes precedence): flotilla's hex id or nats-server's
    /// 8-character name hash.
    #[serde(default)]
    pub(super) peer_id: String,
}

/// The server a step-down request prefers (`placement.preferred`), if any.
pub(super) fn preferred(body: &[u8]) -> Result<Option<String>, ApiError> {
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
pub(super) fn peer_remove(body: &[u8]) -> Result<String, Refusal> {
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
pub(super) fn stream_config(
    kind: Kind,
    name: &str,
    body: &[u8],
    mode: Mode,
) -> Result<StreamConfig, Refusal> {
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
pub(super) fn consumer_create(
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

/// MSG.GET's checks, in nats-server's order.
pub(super) fn msg_get_request(body: &[u8]) -> Result<MsgGetRequest, ApiError> {
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
