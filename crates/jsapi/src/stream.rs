//! Stream configuration, state and the stream API's requests and
//! responses.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::nullable;
use super::time;
use super::ApiError;

fn is_false(b: &bool) -> bool {
    !*b
}
fn is_zero_i64(v: &i64) -> bool {
    *v == 0
}
fn is_zero_u64(v: &u64) -> bool {
    *v == 0
}
fn is_zero_i32(v: &i32) -> bool {
    *v == 0
}

/// A policy enum carried as a string: one of the listed texts (matched
/// case-insensitively where nats-server does), empty or null meaning the
/// default.
macro_rules! string_enum {
    ($name:ident, default $default:ident, case_insensitive $ci:expr, { $($variant:ident = $text:literal),+ $(,)? }) => {
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum $name {
            $($variant),+
        }

        impl Default for $name {
            fn default() -> Self {
                $name::$default
            }
        }

        impl $name {
            pub fn as_str(self) -> &'static str {
                match self {
                    $( $name::$variant => $text, )+
                }
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = Option::<String>::deserialize(d)?.unwrap_or_default();
                if s.is_empty() {
                    return Ok($name::$default);
                }
                $(
                    if (if $ci { s.eq_ignore_ascii_case($text) } else { s == $text }) {
                        return Ok($name::$variant);
                    }
                )+
                // Go's text quotes the raw JSON value.
                let raw = serde_json::to_string(&s).unwrap_or_default();
                Err(serde::de::Error::custom(format!("can not unmarshal {:?}", raw)))
            }
        }
    };
}
pub(crate) use string_enum;

string_enum!(Retention, default Limits, case_insensitive false, { Limits = "limits", Interest = "interest", WorkQueue = "workqueue" });
string_enum!(Discard, default Old, case_insensitive true, { Old = "old", New = "new" });
string_enum!(Storage, default File, case_insensitive false, { File = "file", Memory = "memory" });
string_enum!(Compression, default None, case_insensitive false, { None = "none", S2 = "s2" });

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Placement {
    #[serde(
        default,
        skip_serializing_if = "String::is_empty",
        deserialize_with = "nullable::default"
    )]
    pub cluster: String,
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "nullable::default"
    )]
    pub tags: Vec<String>,
    #[serde(
        default,
        skip_serializing_if = "String::is_empty",
        deserialize_with = "nullable::default"
    )]
    pub preferred: String,
}

impl Placement {
    pub fn is_empty(&self) -> bool {
        self.cluster.is_empty() && self.tags.is_empty() && self.preferred.is_empty()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubjectTransform {
    #[serde(default)]
    pub src: String,
    #[serde(default)]
    pub dest: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Republish {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub src: String,
    #[serde(default)]
    pub dest: String,
    #[serde(default, skip_serializing_if = "is_false")]
    pub headers_only: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExternalStream {
    #[serde(default)]
    pub api: String,
    #[serde(default)]
    pub deliver: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceConsumer {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub deliver_subject: String,
}

/// A mirror or source: another stream this one copies from.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamSource {
    pub name: String,
    #[serde(
        default,
        skip_serializing_if = "is_zero_u64",
        deserialize_with = "nullable::default"
    )]
    pub opt_start_seq: u64,
    #[serde(default, skip_serializing_if = "Option::is_none", with = "time::opt")]
    pub opt_start_time: Option<i64>,
    #[serde(
        default,
        skip_serializing_if = "String::is_empty",
        deserialize_with = "nullable::default"
    )]
    pub filter_subject: String,
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "nullable::default"
    )]
    pub subject_transforms: Vec<SubjectTransform>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external: Option<ExternalStream>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consumer: Option<SourceConsumer>,
    /// Sent by some clients; ignored (no domains here).
    #[serde(default, skip_serializing)]
    pub domain: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamConsumerLimits {
    #[serde(
        default,
        skip_serializing_if = "is_zero_i64",
        deserialize_with = "nullable::default"
    )]
    pub inactive_threshold: i64,
    #[serde(
        default,
        skip_serializing_if = "is_zero_i64",
        deserialize_with = "nullable::default"
    )]
    pub max_ack_pending: i64,
}

/// A stream's configuration, as nats-server writes and reads it.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamConfig {
    #[serde(default, deserialize_with = "nullable::default")]
    pub name: String,
    #[serde(
        default,
        skip_serializing_if = "String::is_empty",
        deserialize_with = "nullable::default"
    )]
    pub description: String,
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "nullable::default"
    )]
    pub subjects: Vec<String>,
    #[serde(default)]
    pub retention: Retention,
    #[serde(default, deserialize_with = "nullable::default")]
    pub max_consumers: i64,
    #[serde(default, deserialize_with = "nullable::default")]
    pub max_msgs: i64,
    #[serde(default, deserialize_with = "nullable::default")]
    pub max_bytes: i64,
    #[serde(default, deserialize_with = "nullable::default")]
    pub max_age: i64,
    #[serde(default, deserialize_with = "nullable::default")]
    pub max_msgs_per_subject: i64,
    #[serde(
        default,
        skip_serializing_if = "is_zero_i32",
        deserialize_with = "nullable::default"
    )]
    pub max_msg_size: i32,
    #[serde(default)]
    pub discard: Discard,
    #[serde(default)]
    pub storage: Storage,
    #[serde(default, deserialize_with = "nullable::default")]
    pub num_replicas: i64,
    #[serde(
        default,
        skip_serializing_if = "is_false",
        deserialize_with = "nullable::default"
    )]
    pub no_ack: bool,
    #[serde(
        default,
        skip_serializing_if = "is_zero_i64",
        deserialize_with = "nullable::default"
    )]
    pub duplicate_window: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<Placement>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mirror: Option<StreamSource>,
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "nullable::default"
    )]
    pub sources: Vec<StreamSource>,
    #[serde(default)]
    pub compression: Compression,
    #[serde(
        default,
        skip_serializing_if = "is_zero_u64",
        deserialize_with = "nullable::default"
    )]
    pub first_seq: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject_transform: Option<SubjectTransform>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub republish: Option<Republish>,
    #[serde(default, deserialize_with = "nullable::default")]
    pub allow_direct: bool,
    #[serde(default, deserialize_with = "nullable::default")]
    pub mirror_direct: bool,
    #[serde(
        default,
        skip_serializing_if = "is_false",
        deserialize_with = "nullable::default"
    )]
    pub discard_new_per_subject: bool,
    #[serde(default, deserialize_with = "nullable::default")]
    pub sealed: bool,
    #[serde(default, deserialize_with = "nullable::default")]
    pub deny_delete: bool,
    #[serde(default, deserialize_with = "nullable::default")]
    pub deny_purge: bool,
    #[serde(default, deserialize_with = "nullable::default")]
    pub allow_rollup_hdrs: bool,
    #[serde(default, deserialize_with = "nullable::default")]
    pub consumer_limits: StreamConsumerLimits,
    #[serde(default, deserialize_with = "nullable::default")]
    pub allow_msg_ttl: bool,
    #[serde(
        default,
        skip_serializing_if = "is_zero_i64",
        deserialize_with = "nullable::default"
    )]
    pub subject_delete_marker_ttl: i64,
    #[serde(
        default,
        skip_serializing_if = "is_false",
        deserialize_with = "nullable::default"
    )]
    pub allow_msg_counter: bool,
    #[serde(
        default,
        skip_serializing_if = "is_false",
        deserialize_with = "nullable::default"
    )]
    pub allow_atomic: bool,
    #[serde(
        default,
        skip_serializing_if = "is_false",
        deserialize_with = "nullable::default"
    )]
    pub allow_msg_schedules: bool,
    #[serde(
        default,
        skip_serializing_if = "String::is_empty",
        deserialize_with = "nullable::default"
    )]
    pub persist_mode: String,
    #[serde(
        default,
        skip_serializing_if = "is_false",
        deserialize_with = "nullable::default"
    )]
    pub allow_batched: bool,
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        deserialize_with = "nullable::default"
    )]
    pub metadata: BTreeMap<String, String>,
}

/// Parses a stream create/update body as nats-server does (unknown fields
/// refused, Go's acceptance rules and error texts). Returns the config
/// and nats-server's request-only `pedantic` flag.
pub fn parse_stream_config(body: &[u8]) -> Result<(StreamConfig, bool), String> {
    let mut v = super::gojson::read(
        body,
        &super::go_types::STREAM_CONFIG_REQUEST,
        super::gojson::Mode::Request,
    )?;
    let pedantic = v
        .as_object_mut()
        .and_then(|o| o.remove("pedantic"))
        .and_then(|p| p.as_bool())
        .unwrap_or(false);
    let cfg: StreamConfig = serde_json::from_value(v).map_err(|e| e.to_string())?;
    Ok((cfg, pedantic))
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct LostData {
    #[serde(default)]
    pub msgs: Vec<u64>,
    #[serde(default)]
    pub bytes: u64,
}

/// A stream's state, in nats-server's field order.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct StreamState {
    pub messages: u64,
    pub bytes: u64,
    pub first_seq: u64,
    #[serde(serialize_with = "ser_time", deserialize_with = "de_time")]
    pub first_ts: i64,
    pub last_seq: u64,
    #[serde(serialize_with = "ser_time", deserialize_with = "de_time")]
    pub last_ts: i64,
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub num_subjects: u64,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub subjects: BTreeMap<String, u64>,
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub num_deleted: u64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deleted: Vec<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost: Option<LostData>,
    pub consumer_count: u64,
}

pub(crate) fn ser_time<S: Serializer>(v: &i64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&time::rfc3339(*v))
}

pub(crate) fn de_time<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
    let s = String::deserialize(d)?;
    time::parse(&s).ok_or_else(|| serde::de::Error::custom("invalid time"))
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ClusterInfo {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// The asset's Raft group.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub raft_group: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub leader: String,
    /// When the leader took the lead (Unix nanoseconds).
    #[serde(
        default,
        with = "crate::time::opt",
        skip_serializing_if = "Option::is_none"
    )]
    pub leader_since: Option<i64>,
    /// Whether the group's replication traffic goes through the system
    /// account, and that account's name.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub system_account: bool,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub traffic_account: String,
    /// The other members of the asset's group (the leader not among them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replicas: Vec<PeerInfo>,
}

/// A member of a Raft group as nats-server reports it.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct PeerInfo {
    pub name: String,
    pub current: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub offline: bool,
    /// Nanoseconds since last heard from; 0 if never.
    pub active: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub lag: u64,
    /// nats-server's 8-character hash of the server's name.
    pub peer: String,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct StreamSourceInfo {
    pub name: String,
    /// The source's `external`, as configured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external: Option<ExternalStream>,
    pub lag: u64,
    /// Nanoseconds since last contact; -1 when never.
    pub active: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ApiError>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub filter_subject: String,
    /// The source's transforms, as configured (nats-server's
    /// `SubjectTransformConfig`s).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subject_transforms: Vec<SubjectTransform>,
}

/// STREAM.INFO, CREATE, UPDATE and LIST entries. Read back as a
/// cluster's meta leader gathers them from streams' leaders for a list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamInfo {
    pub config: StreamConfig,
    #[serde(serialize_with = "ser_time", deserialize_with = "de_time")]
    pub created: i64,
    pub state: StreamState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<ClusterInfo>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mirror: Option<StreamSourceInfo>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sources: Vec<StreamSourceInfo>,
    #[serde(serialize_with = "ser_time", deserialize_with = "de_time")]
    pub ts: i64,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamInfoRequest {
    #[serde(default, deserialize_with = "nullable::default")]
    pub offset: i64,
    #[serde(default, deserialize_with = "nullable::default")]
    pub deleted_details: bool,
    #[serde(default, deserialize_with = "nullable::default")]
    pub subjects_filter: String,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamNamesRequest {
    #[serde(default, deserialize_with = "nullable::default")]
    pub offset: i64,
    #[serde(default, deserialize_with = "nullable::default")]
    pub subject: String,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PurgeRequest {
    #[serde(default, deserialize_with = "nullable::default")]
    pub filter: String,
    #[serde(default, deserialize_with = "nullable::default")]
    pub seq: u64,
    #[serde(default, deserialize_with = "nullable::default")]
    pub keep: u64,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MsgGetRequest {
    #[serde(default, deserialize_with = "nullable::default")]
    pub seq: u64,
    #[serde(default, deserialize_with = "nullable::default")]
    pub last_by_subj: String,
    #[serde(default, deserialize_with = "nullable::default")]
    pub next_by_subj: String,
    #[serde(default, with = "time::opt")]
    pub start_time: Option<i64>,
    #[serde(default, deserialize_with = "nullable::default")]
    pub batch: i64,
    #[serde(default, deserialize_with = "nullable::default")]
    pub max_bytes: i64,
    #[serde(default, deserialize_with = "nullable::default")]
    pub multi_last: Vec<String>,
    #[serde(default, deserialize_with = "nullable::default")]
    pub up_to_seq: u64,
    #[serde(default, with = "time::opt")]
    pub up_to_time: Option<i64>,
    #[serde(default, deserialize_with = "nullable::default")]
    pub no_hdr: bool,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MsgDeleteRequest {
    #[serde(default, deserialize_with = "nullable::default")]
    pub seq: u64,
    #[serde(default, deserialize_with = "nullable::default")]
    pub no_erase: bool,
}

/// A stored message as MSG.GET returns it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StoredMessage {
    pub subject: String,
    pub seq: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hdrs: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data: Option<String>,
    #[serde(serialize_with = "ser_time")]
    pub time: i64,
}

super::go_types::go_shape!(
    StreamInfoRequest => super::go_types::STREAM_INFO_REQUEST,
    StreamNamesRequest => super::go_types::STREAM_NAMES_REQUEST,
    PurgeRequest => super::go_types::STREAM_PURGE_REQUEST,
    MsgGetRequest => super::go_types::MSG_GET_REQUEST,
    MsgDeleteRequest => super::go_types::MSG_DELETE_REQUEST,
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn async_nats_create_body_parses() {
        let body = br#"{"name":"S","max_bytes":0,"max_msgs":0,"max_msgs_per_subject":0,"discard":"old","subjects":["s.>"],"retention":"limits","max_consumers":0,"max_age":0,"storage":"file","num_replicas":0,"consumer_limits":null}"#;
        let (cfg, pedantic) = parse_stream_config(body).unwrap();
        assert_eq!(cfg.name, "S");
        assert_eq!(cfg.subjects, vec!["s.>"]);
        assert!(!pedantic);
    }

    #[test]
    fn unknown_fields_are_refused_like_go() {
        let err = parse_stream_config(br#"{"name":"S","bogus":1}"#).unwrap_err();
        assert_eq!(err, "json: unknown field \"bogus\"");
    }

    #[test]
    fn enums() {
        let (cfg, _) = parse_stream_config(
            br#"{"name":"S","discard":"NEW","storage":"memory","retention":"workqueue"}"#,
        )
        .unwrap();
        assert_eq!(
            (cfg.discard, cfg.storage, cfg.retention),
            (Discard::New, Storage::Memory, Retention::WorkQueue)
        );
        assert!(parse_stream_config(br#"{"name":"S","retention":"Limits"}"#).is_err());
        let json = serde_json::to_value(&cfg).unwrap();
        assert_eq!(json["discard"], "new");
        assert_eq!(json["compression"], "none");
        assert_eq!(json["consumer_limits"], serde_json::json!({}));
    }
}
