//! Consumer configuration, info and requests.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::nullable;
use super::stream::{ser_time, string_enum, ClusterInfo};
use super::time;
use super::{go_types, gojson};

fn is_false(b: &bool) -> bool {
    !*b
}
fn is_zero_i64(v: &i64) -> bool {
    *v == 0
}
fn is_zero_u64(v: &u64) -> bool {
    *v == 0
}

string_enum!(DeliverPolicy, default All, case_insensitive false, {
    All = "all",
    Last = "last",
    New = "new",
    ByStartSequence = "by_start_sequence",
    ByStartTime = "by_start_time",
    LastPerSubject = "last_per_subject",
});
// A missing ack policy is Go's zero value, `none`.
string_enum!(AckPolicy, default None, case_insensitive false, {
    None = "none",
    All = "all",
    Explicit = "explicit",
    FlowControl = "flow_control",
});
string_enum!(ReplayPolicy, default Instant, case_insensitive false, { Instant = "instant", Original = "original" });
string_enum!(PriorityPolicy, default None, case_insensitive false, {
    None = "none",
    Overflow = "overflow",
    PinnedClient = "pinned_client",
    Prioritized = "prioritized",
});

fn is_default_priority(p: &PriorityPolicy) -> bool {
    *p == PriorityPolicy::None
}

/// A consumer's configuration, in nats-server's field order.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConsumerConfig {
    #[serde(
        default,
        skip_serializing_if = "String::is_empty",
        deserialize_with = "nullable::default"
    )]
    pub durable_name: String,
    #[serde(
        default,
        skip_serializing_if = "String::is_empty",
        deserialize_with = "nullable::default"
    )]
    pub name: String,
    #[serde(
        default,
        skip_serializing_if = "String::is_empty",
        deserialize_with = "nullable::default"
    )]
    pub description: String,
    #[serde(default)]
    pub deliver_policy: DeliverPolicy,
    #[serde(
        default,
        skip_serializing_if = "is_zero_u64",
        deserialize_with = "nullable::default"
    )]
    pub opt_start_seq: u64,
    #[serde(default, skip_serializing_if = "Option::is_none", with = "time::opt")]
    pub opt_start_time: Option<i64>,
    #[serde(default)]
    pub ack_policy: AckPolicy,
    #[serde(
        default,
        skip_serializing_if = "is_zero_i64",
        deserialize_with = "nullable::default"
    )]
    pub ack_wait: i64,
    #[serde(
        default,
        skip_serializing_if = "is_zero_i64",
        deserialize_with = "nullable::default"
    )]
    pub max_deliver: i64,
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "nullable::default"
    )]
    pub backoff: Vec<i64>,
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
    pub filter_subjects: Vec<String>,
    #[serde(default)]
    pub replay_policy: ReplayPolicy,
    #[serde(
        default,
        skip_serializing_if = "is_zero_u64",
        deserialize_with = "nullable::default"
    )]
    pub rate_limit_bps: u64,
    #[serde(
        default,
        skip_serializing_if = "String::is_empty",
        deserialize_with = "nullable::default"
    )]
    pub sample_freq: String,
    #[serde(
        default,
        skip_serializing_if = "is_zero_i64",
        deserialize_with = "nullable::default"
    )]
    pub max_waiting: i64,
    #[serde(
        default,
        skip_serializing_if = "is_zero_i64",
        deserialize_with = "nullable::default"
    )]
    pub max_ack_pending: i64,
    #[serde(
        default,
        skip_serializing_if = "is_false",
        deserialize_with = "nullable::default"
    )]
    pub flow_control: bool,
    #[serde(
        default,
        skip_serializing_if = "is_false",
        deserialize_with = "nullable::default"
    )]
    pub headers_only: bool,
    #[serde(
        default,
        skip_serializing_if = "is_zero_i64",
        deserialize_with = "nullable::default"
    )]
    pub max_batch: i64,
    #[serde(
        default,
        skip_serializing_if = "is_zero_i64",
        deserialize_with = "nullable::default"
    )]
    pub max_expires: i64,
    #[serde(
        default,
        skip_serializing_if = "is_zero_i64",
        deserialize_with = "nullable::default"
    )]
    pub max_bytes: i64,
    #[serde(
        default,
        skip_serializing_if = "String::is_empty",
        deserialize_with = "nullable::default"
    )]
    pub deliver_subject: String,
    #[serde(
        default,
        skip_serializing_if = "String::is_empty",
        deserialize_with = "nullable::default"
    )]
    pub deliver_group: String,
    #[serde(
        default,
        skip_serializing_if = "is_zero_i64",
        deserialize_with = "nullable::default"
    )]
    pub idle_heartbeat: i64,
    #[serde(
        default,
        skip_serializing_if = "is_zero_i64",
        deserialize_with = "nullable::default"
    )]
    pub inactive_threshold: i64,
    #[serde(default, deserialize_with = "nullable::default")]
    pub num_replicas: i64,
    #[serde(
        default,
        skip_serializing_if = "is_false",
        deserialize_with = "nullable::default"
    )]
    pub mem_storage: bool,
    #[serde(
        default,
        skip_serializing_if = "is_false",
        deserialize_with = "nullable::default"
    )]
    pub direct: bool,
    #[serde(
        default,
        skip_serializing_if = "is_false",
        deserialize_with = "nullable::default"
    )]
    pub sourcing: bool,
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        deserialize_with = "nullable::default"
    )]
    pub metadata: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none", with = "time::opt")]
    pub pause_until: Option<i64>,
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "nullable::default"
    )]
    pub priority_groups: Vec<String>,
    #[serde(default, skip_serializing_if = "is_default_priority")]
    pub priority_policy: PriorityPolicy,
    #[serde(
        default,
        skip_serializing_if = "is_zero_i64",
        deserialize_with = "nullable::default"
    )]
    pub priority_timeout: i64,
}

impl ConsumerConfig {
    pub fn is_push(&self) -> bool {
        !self.deliver_subject.is_empty()
    }

    pub fn is_durable(&self) -> bool {
        !self.durable_name.is_empty()
    }

    /// The filter subjects, from either field.
    pub fn filters(&self) -> Vec<String> {
        if !self.filter_subjects.is_empty() {
            self.filter_subjects.clone()
        } else if !self.filter_subject.is_empty() {
            vec![self.filter_subject.clone()]
        } else {
            Vec::new()
        }
    }
}

/// What a create request may do: nats-server's `action`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ConsumerAction {
    #[default]
    CreateOrUpdate,
    Create,
    Update,
}

impl ConsumerAction {
    pub fn as_str(self) -> &'static str {
        match self {
            ConsumerAction::CreateOrUpdate => "",
            ConsumerAction::Create => "create",
            ConsumerAction::Update => "update",
        }
    }
}

impl Serialize for ConsumerAction {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for ConsumerAction {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = Option::<String>::deserialize(d)?.unwrap_or_default();
        match s.as_str() {
            "" => Ok(ConsumerAction::CreateOrUpdate),
            "create" => Ok(ConsumerAction::Create),
            "update" => Ok(ConsumerAction::Update),
            _ => Err(serde::de::Error::custom(format!(
                "unknown consumer action: {}",
                serde_json::to_string(&s).unwrap_or_default()
            ))),
        }
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateConsumerRequest {
    #[serde(default, deserialize_with = "nullable::default")]
    pub stream_name: String,
    #[serde(default, deserialize_with = "nullable::default")]
    pub config: ConsumerConfig,
    #[serde(default)]
    pub action: ConsumerAction,
    #[serde(default, deserialize_with = "nullable::default")]
    pub pedantic: bool,
}

impl CreateConsumerRequest {
    /// Reads a create request as nats-server does, with Go's error texts.
    pub fn parse(body: &[u8]) -> Result<Self, String> {
        gojson::decode(
            body,
            &go_types::CREATE_CONSUMER_REQUEST,
            gojson::Mode::Request,
        )
    }
}

/// A position in the stream and the consumer's own sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct SequenceInfo {
    pub consumer_seq: u64,
    pub stream_seq: u64,
    #[serde(default, skip_serializing_if = "Option::is_none", with = "time::opt")]
    pub last_active: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ConsumerInfo {
    pub stream_name: String,
    pub name: String,
    #[serde(serialize_with = "ser_time")]
    pub created: i64,
    pub config: ConsumerConfig,
    pub delivered: SequenceInfo,
    pub ack_floor: SequenceInfo,
    pub num_ack_pending: u64,
    pub num_redelivered: u64,
    pub num_waiting: u64,
    pub num_pending: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster: Option<ClusterInfo>,
    #[serde(skip_serializing_if = "is_false")]
    pub push_bound: bool,
    #[serde(skip_serializing_if = "is_false")]
    pub paused: bool,
    #[serde(skip_serializing_if = "is_zero_i64")]
    pub pause_remaining: i64,
    #[serde(serialize_with = "ser_time")]
    pub ts: i64,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub priority_groups: Vec<PriorityGroupState>,
}

/// A priority group's state in consumer info: who is pinned, since when
/// (Go's zero time when nobody is).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PriorityGroupState {
    pub group: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub pinned_client_id: String,
    #[serde(serialize_with = "ser_time")]
    pub pinned_ts: i64,
}

/// A pull request body. Parsed leniently, as nats-server does: unknown
/// fields are ignored and `null` means absent.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
pub struct PullRequest {
    #[serde(default, deserialize_with = "nullable::default")]
    pub batch: i64,
    #[serde(default, deserialize_with = "nullable::default")]
    pub expires: i64,
    #[serde(default, deserialize_with = "nullable::default")]
    pub max_bytes: i64,
    #[serde(default, deserialize_with = "nullable::default")]
    pub no_wait: bool,
    #[serde(default, deserialize_with = "nullable::default")]
    pub idle_heartbeat: i64,
    #[serde(default, deserialize_with = "nullable::default")]
    pub group: String,
    #[serde(default, deserialize_with = "nullable::default")]
    pub min_pending: i64,
    #[serde(default, deserialize_with = "nullable::default")]
    pub min_ack_pending: i64,
    #[serde(default, deserialize_with = "nullable::default")]
    pub id: String,
    #[serde(default, deserialize_with = "nullable::default")]
    pub priority: i64,
    /// Whether the body was a JSON request (only those are checked
    /// against the consumer's priority groups, as nats-server checks).
    #[serde(skip)]
    pub formal: bool,
}

impl PullRequest {
    /// nats-server's reading of a MSG.NEXT body: empty means one message,
    /// JSON is a request, a bare number is a batch size, anything else is
    /// one message.
    pub fn parse(body: &[u8]) -> Result<Self, String> {
        let trimmed = std::str::from_utf8(body).unwrap_or("").trim();
        if trimmed.is_empty() {
            return Ok(PullRequest {
                batch: 1,
                ..Default::default()
            });
        }
        if trimmed.starts_with('{') {
            // Go's error texts: nats-server sends them back in the 400.
            let decoded: Result<Self, String> = gojson::decode(
                trimmed.as_bytes(),
                &go_types::PULL_REQUEST,
                gojson::Mode::Unmarshal,
            );
            return decoded.map(|req| PullRequest {
                formal: true,
                ..req
            });
        }
        Ok(PullRequest {
            batch: trimmed.parse().unwrap_or(1),
            ..Default::default()
        })
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NamesRequest {
    #[serde(default, deserialize_with = "nullable::default")]
    pub offset: i64,
}

go_types::go_shape!(
    NamesRequest => go_types::CONSUMERS_REQUEST,
    CreateConsumerRequest => go_types::CREATE_CONSUMER_REQUEST,
    PullRequest => go_types::PULL_REQUEST,
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn async_nats_ordered_consumer_config() {
        let body = br#"{"stream_name":"KV_b","config":{"deliver_subject":"_INBOX.x","deliver_policy":"last_per_subject","ack_policy":"none","max_deliver":1,"filter_subject":"$KV.b.>","replay_policy":"instant","headers_only":true,"flow_control":true,"idle_heartbeat":5000000000,"inactive_threshold":30000000000,"num_replicas":1,"mem_storage":true},"action":""}"#;
        let r = CreateConsumerRequest::parse(body).unwrap();
        assert_eq!(r.config.deliver_policy, DeliverPolicy::LastPerSubject);
        assert_eq!(r.config.ack_policy, AckPolicy::None);
        assert_eq!(r.action, ConsumerAction::CreateOrUpdate);
        assert!(r.config.is_push());
    }

    #[test]
    fn pull_request_forms() {
        assert_eq!(PullRequest::parse(b"").unwrap().batch, 1);
        assert_eq!(PullRequest::parse(b" 10 ").unwrap().batch, 10);
        let p = PullRequest::parse(br#"{"batch":5,"expires":100,"min_pending":null,"group":null,"priority":null,"extra":1}"#).unwrap();
        assert_eq!((p.batch, p.expires), (5, 100));
        assert!(PullRequest::parse(b"{bad").is_err());
    }
}
