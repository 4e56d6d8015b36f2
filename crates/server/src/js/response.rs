//! API responses as nats-server writes them: `type` first, then `error`
//! when there is one, then the endpoint's own fields, in struct order.
//! Error responses keep the endpoint's type and its fields that are not
//! omitted when empty (`"total":0`, `"streams":null`, `"purged":0`...).

use bytes::Bytes;
use jetstream::api::{self, ApiError, ConsumerInfo, StoredMessage, StreamInfo, TYPE_PREFIX};
use serde::Serialize;

use crate::options::NATS_VERSION;

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

pub fn stamp_consumer(info: &mut ConsumerInfo) {
    info.config
        .metadata
        .insert("_nats.ver".into(), NATS_VERSION.into());
    info.config
        .metadata
        .insert("_nats.level".into(), api::API_LEVEL.to_string());
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
}
