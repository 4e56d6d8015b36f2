//! The Go types nats-server decodes each API request into, as
//! [`gojson`](super::gojson) schemas: field names, Go types and the
//! policy enums' accepted texts. Taken from nats-server's struct
//! definitions (`stream.go`, `consumer.go`, `jetstream_api.go`,
//! `store.go`); embedded structs are flattened as Go promotes them.

use super::gojson::{EnumError, Schema, Ty};

const DURATION: Ty = Ty::Int("time.Duration");
const INT: Ty = Ty::Int("int");
const INT64: Ty = Ty::Int("int64");
const UINT64: Ty = Ty::Uint("uint64");

const fn policy(accepts: &'static [&'static str]) -> Ty {
    Ty::Enum {
        accepts,
        fold: false,
        error: EnumError::CanNot,
    }
}

const RETENTION: Ty = policy(&["\"limits\"", "\"interest\"", "\"workqueue\""]);
const DISCARD: Ty = Ty::Enum {
    accepts: &["\"old\"", "\"new\""],
    fold: true,
    error: EnumError::CanNot,
};
const STORAGE: Ty = policy(&["\"memory\"", "\"file\""]);
const PERSIST_MODE: Ty = policy(&["\"default\"", "\"async\"", "\"\""]);
const DELIVER: Ty = policy(&[
    "\"all\"",
    "\"undefined\"",
    "\"last\"",
    "\"last_per_subject\"",
    "\"new\"",
    "\"by_start_sequence\"",
    "\"by_start_time\"",
]);
const ACK: Ty = policy(&["\"none\"", "\"all\"", "\"explicit\"", "\"flow_control\""]);
const REPLAY: Ty = policy(&["\"instant\"", "\"original\""]);
const PRIORITY: Ty = Ty::Enum {
    accepts: &[
        "\"none\"",
        "\"overflow\"",
        "\"pinned_client\"",
        "\"prioritized\"",
    ],
    fold: false,
    error: EnumError::Prefixed("unknown priority policy"),
};
const ACTION: Ty = Ty::Enum {
    accepts: &["\"create\"", "\"update\"", "\"\""],
    fold: false,
    error: EnumError::Prefixed("unknown consumer action"),
};

static PLACEMENT: Schema = Schema {
    go_name: "server.Placement",
    fields: &[
        ("cluster", Ty::Str),
        ("tags", Ty::List(&Ty::Str)),
        ("preferred", Ty::Str),
    ],
};

static TRANSFORM: Schema = Schema {
    go_name: "server.SubjectTransformConfig",
    fields: &[("src", Ty::Str), ("dest", Ty::Str)],
};

static REPUBLISH: Schema = Schema {
    go_name: "server.RePublish",
    fields: &[
        ("src", Ty::Str),
        ("dest", Ty::Str),
        ("headers_only", Ty::Bool),
    ],
};

static EXTERNAL: Schema = Schema {
    go_name: "server.ExternalStream",
    fields: &[("api", Ty::Str), ("deliver", Ty::Str)],
};

static SOURCE_CONSUMER: Schema = Schema {
    go_name: "server.StreamConsumerSource",
    fields: &[("name", Ty::Str), ("deliver_subject", Ty::Str)],
};

static SOURCE: Schema = Schema {
    go_name: "server.StreamSource",
    fields: &[
        ("name", Ty::Str),
        ("opt_start_seq", UINT64),
        ("opt_start_time", Ty::Time),
        ("filter_subject", Ty::Str),
        ("subject_transforms", Ty::List(&Ty::Struct(&TRANSFORM))),
        ("external", Ty::Struct(&EXTERNAL)),
        ("consumer", Ty::Struct(&SOURCE_CONSUMER)),
    ],
};

static CONSUMER_LIMITS: Schema = Schema {
    go_name: "server.StreamConsumerLimits",
    fields: &[("inactive_threshold", DURATION), ("max_ack_pending", INT)],
};

/// `StreamConfigRequest`: a `StreamConfig` and `pedantic`.
pub static STREAM_CONFIG_REQUEST: Schema = Schema {
    go_name: "server.StreamConfigRequest",
    fields: &[
        ("name", Ty::Str),
        ("description", Ty::Str),
        ("subjects", Ty::List(&Ty::Str)),
        ("retention", RETENTION),
        ("max_consumers", INT),
        ("max_msgs", INT64),
        ("max_bytes", INT64),
        ("max_age", DURATION),
        ("max_msgs_per_subject", INT64),
        ("max_msg_size", Ty::Int("int32")),
        ("discard", DISCARD),
        ("storage", STORAGE),
        ("num_replicas", INT),
        ("no_ack", Ty::Bool),
        ("duplicate_window", DURATION),
        ("placement", Ty::Struct(&PLACEMENT)),
        ("mirror", Ty::Struct(&SOURCE)),
        ("sources", Ty::List(&Ty::Struct(&SOURCE))),
        ("compression", Ty::Compression),
        ("first_seq", UINT64),
        ("subject_transform", Ty::Struct(&TRANSFORM)),
        ("republish", Ty::Struct(&REPUBLISH)),
        ("allow_direct", Ty::Bool),
        ("mirror_direct", Ty::Bool),
        ("discard_new_per_subject", Ty::Bool),
        ("sealed", Ty::Bool),
        ("deny_delete", Ty::Bool),
        ("deny_purge", Ty::Bool),
        ("allow_rollup_hdrs", Ty::Bool),
        ("consumer_limits", Ty::Struct(&CONSUMER_LIMITS)),
        ("allow_msg_ttl", Ty::Bool),
        ("subject_delete_marker_ttl", DURATION),
        ("allow_msg_counter", Ty::Bool),
        ("allow_atomic", Ty::Bool),
        ("allow_msg_schedules", Ty::Bool),
        ("persist_mode", PERSIST_MODE),
        ("allow_batched", Ty::Bool),
        ("metadata", Ty::StrMap),
        ("pedantic", Ty::Bool),
    ],
};

pub static STREAM_INFO_REQUEST: Schema = Schema {
    go_name: "server.JSApiStreamInfoRequest",
    fields: &[
        ("offset", INT),
        ("deleted_details", Ty::Bool),
        ("subjects_filter", Ty::Str),
    ],
};

pub static STREAM_NAMES_REQUEST: Schema = Schema {
    go_name: "server.JSApiStreamNamesRequest",
    fields: &[("offset", INT), ("subject", Ty::Str)],
};

pub static STREAM_LIST_REQUEST: Schema = Schema {
    go_name: "server.JSApiStreamListRequest",
    fields: &[("offset", INT), ("subject", Ty::Str)],
};

pub static STREAM_PURGE_REQUEST: Schema = Schema {
    go_name: "server.JSApiStreamPurgeRequest",
    fields: &[("seq", UINT64), ("filter", Ty::Str), ("keep", UINT64)],
};

pub static MSG_GET_REQUEST: Schema = Schema {
    go_name: "server.JSApiMsgGetRequest",
    fields: &[
        ("seq", UINT64),
        ("last_by_subj", Ty::Str),
        ("next_by_subj", Ty::Str),
        ("batch", INT),
        ("max_bytes", INT),
        ("start_time", Ty::Time),
        ("multi_last", Ty::List(&Ty::Str)),
        ("up_to_seq", UINT64),
        ("up_to_time", Ty::Time),
        ("no_hdr", Ty::Bool),
    ],
};

pub static MSG_DELETE_REQUEST: Schema = Schema {
    go_name: "server.JSApiMsgDeleteRequest",
    fields: &[("seq", UINT64), ("no_erase", Ty::Bool)],
};

pub static CONSUMERS_REQUEST: Schema = Schema {
    go_name: "server.JSApiConsumersRequest",
    fields: &[("offset", INT)],
};

pub static CONSUMER_RESET_REQUEST: Schema = Schema {
    go_name: "server.JSApiConsumerResetRequest",
    fields: &[("seq", UINT64)],
};

pub static CONSUMER_UNPIN_REQUEST: Schema = Schema {
    go_name: "server.JSApiConsumerUnpinRequest",
    fields: &[("group", Ty::Str)],
};

pub static CONSUMER_PAUSE_REQUEST: Schema = Schema {
    go_name: "server.JSApiConsumerPauseRequest",
    fields: &[("pause_until", Ty::Time)],
};

static CONSUMER_CONFIG: Schema = Schema {
    go_name: "server.ConsumerConfig",
    fields: &[
        ("durable_name", Ty::Str),
        ("name", Ty::Str),
        ("description", Ty::Str),
        ("deliver_policy", DELIVER),
        ("opt_start_seq", UINT64),
        ("opt_start_time", Ty::Time),
        ("ack_policy", ACK),
        ("ack_wait", DURATION),
        ("max_deliver", INT),
        ("backoff", Ty::List(&DURATION)),
        ("filter_subject", Ty::Str),
        ("filter_subjects", Ty::List(&Ty::Str)),
        ("replay_policy", REPLAY),
        ("rate_limit_bps", UINT64),
        ("sample_freq", Ty::Str),
        ("max_waiting", INT),
        ("max_ack_pending", INT),
        ("flow_control", Ty::Bool),
        ("headers_only", Ty::Bool),
        ("max_batch", INT),
        ("max_expires", DURATION),
        ("max_bytes", INT),
        ("deliver_subject", Ty::Str),
        ("deliver_group", Ty::Str),
        ("idle_heartbeat", DURATION),
        ("inactive_threshold", DURATION),
        ("num_replicas", INT),
        ("mem_storage", Ty::Bool),
        ("direct", Ty::Bool),
        ("sourcing", Ty::Bool),
        ("metadata", Ty::StrMap),
        ("pause_until", Ty::Time),
        ("priority_groups", Ty::List(&Ty::Str)),
        ("priority_policy", PRIORITY),
        ("priority_timeout", DURATION),
    ],
};

pub static CREATE_CONSUMER_REQUEST: Schema = Schema {
    go_name: "server.CreateConsumerRequest",
    fields: &[
        ("stream_name", Ty::Str),
        ("config", Ty::Struct(&CONSUMER_CONFIG)),
        ("action", ACTION),
        ("pedantic", Ty::Bool),
    ],
};

/// `JSApiConsumerGetNextRequest` with its embedded `PriorityGroup`.
/// nats-server unmarshals into a pointer to a pointer, so its errors name
/// no struct (`Go struct field .batch`).
pub static PULL_REQUEST: Schema = Schema {
    go_name: "",
    fields: &[
        ("expires", DURATION),
        ("batch", INT),
        ("max_bytes", INT),
        ("no_wait", Ty::Bool),
        ("idle_heartbeat", DURATION),
        ("group", Ty::Str),
        ("min_pending", INT64),
        ("min_ack_pending", INT64),
        ("id", Ty::Str),
        ("priority", INT),
    ],
};

/// A request type and the Go type nats-server decodes it into.
pub trait GoShape {
    const SCHEMA: &'static Schema;
}

/// `go_shape!(Type => SCHEMA, ...)`: each type's [`GoShape`], written
/// next to the type (so this file names none of them).
macro_rules! go_shape {
    ($($t:ty => $s:path),+ $(,)?) => {
        $(impl $crate::go_types::GoShape for $t {
            const SCHEMA: &'static $crate::gojson::Schema = &$s;
        })+
    };
}
pub(crate) use go_shape;
