//! Consumer configuration: nats-server's defaults and checks
//! (`setConsumerConfigDefaults`, `checkConsumerCfg`, `checkNewConsumerConfig`).

use crate::api::{
    AckPolicy, ApiError, ConsumerConfig, CreateConsumerRequest, DeliverPolicy, PriorityPolicy,
    Retention, StreamConfig, E,
};
use crate::stream::config::valid_name;

const MS: i64 = 1_000_000;
const SEC: i64 = 1_000 * MS;
/// Pull consumers' default queue of waiting requests.
pub const DEFAULT_MAX_WAITING: i64 = 512;
pub const DEFAULT_ACK_WAIT: i64 = 30 * SEC;
pub const DEFAULT_MAX_ACK_PENDING: i64 = 1000;
/// An ephemeral consumer with no threshold goes after this long inactive.
pub const EPHEMERAL_INACTIVE: i64 = 5 * SEC;
const MAX_DESCRIPTION: usize = 4096;
const MAX_METADATA: usize = 128 * 1024;

/// The subject a consumer create came on: the name and filter it gave,
/// and whether it was the durable endpoint.
#[derive(Debug, Clone, Copy, Default)]
pub struct Via<'a> {
    pub name: Option<&'a str>,
    pub filter: Option<&'a str>,
    pub durable_api: bool,
}

/// The account's limits on consumers: API data (`jsapi`), the
/// account's `jetstream` block as the leader puts it in a create.
pub use crate::api::AccountConsumerLimits;

fn invalid(msg: impl std::fmt::Display) -> ApiError {
    E::STREAM_INVALID_CONFIG.with("err", msg)
}

/// Records the API level a consumer config needs ([`required_level`]),
/// as nats-server does in its metadata.
pub fn stamp_required_level(cfg: &mut ConsumerConfig) {
    let level = required_level(cfg);
    cfg.metadata
        .insert("_nats.req.level".into(), level.to_string());
}

/// The request-level checks of a consumer create, in nats-server's
/// order: names and filters given in the subject against the body, then
/// replicas. Sets `config.name` from the subject. `durable_api` is the
/// legacy `CONSUMER.DURABLE.CREATE` form.
pub fn prepare_create(
    req: &mut CreateConsumerRequest,
    subject_name: Option<&str>,
    subject_filter: Option<&str>,
    durable_api: bool,
) -> Result<(), ApiError> {
    let cfg = &mut req.config;
    // The legacy ephemeral form takes its name from the body.
    let name = subject_name.unwrap_or(&cfg.name);
    if name.contains(['\\', '/']) {
        return Err(E::CONSUMER_NAME_CONTAINS_PATH_SEPARATORS.err());
    }
    match (durable_api, subject_name) {
        (true, Some(name)) => {
            if cfg.durable_name.is_empty() {
                return Err(E::CONSUMER_DURABLE_NAME_NOT_SET.err());
            }
            if cfg.durable_name != name {
                return Err(E::CONSUMER_DURABLE_NAME_NOT_MATCH_SUBJECT.err());
            }
            cfg.name = name.to_string();
        }
        (false, Some(name)) => {
            if !cfg.durable_name.is_empty() && cfg.durable_name != name {
                return Err(E::CONSUMER_DURABLE_NAME_NOT_MATCH_SUBJECT.err());
            }
            cfg.name = name.to_string();
        }
        (_, None) => {
            if !cfg.durable_name.is_empty() {
                return Err(E::CONSUMER_EPHEMERAL_WITH_DURABLE_NAME.err());
            }
        }
    }
    if let Some(f) = subject_filter {
        if !cfg.filter_subjects.is_empty() {
            return Err(E::CONSUMER_MULTIPLE_FILTERS_NOT_ALLOWED.err());
        }
        if cfg.filter_subject != f {
            return Err(E::CONSUMER_CREATE_FILTER_SUBJECT_MISMATCH.err());
        }
    }
    if cfg.num_replicas > 1 {
        return Err(E::STREAM_REPLICAS_NOT_SUPPORTED.err());
    }
    Ok(())
}

/// The API level a consumer config needs (`_nats.req.level`): 4 for the
/// flow-control ack policy, 1 for a pause or priority groups.
pub fn required_level(cfg: &ConsumerConfig) -> i64 {
    if cfg.ack_policy == AckPolicy::FlowControl {
        return 4;
    }
    let paused = cfg.pause_until.is_some_and(|u| u != 0);
    let priority = cfg.priority_policy != PriorityPolicy::None
        || cfg.priority_timeout != 0
        || !cfg.priority_groups.is_empty();
    i64::from(paused || priority)
}

/// Fills in what the config leaves out, as nats-server does.
pub fn defaults(cfg: &mut ConsumerConfig, stream: &StreamConfig, account: AccountConsumerLimits) {
    if cfg.max_deliver == 0 || cfg.max_deliver < -1 {
        cfg.max_deliver = -1;
    }
    for v in [
        &mut cfg.max_waiting,
        &mut cfg.max_batch,
        &mut cfg.max_expires,
        &mut cfg.max_bytes,
        &mut cfg.idle_heartbeat,
        &mut cfg.inactive_threshold,
        &mut cfg.priority_timeout,
    ] {
        if *v < 0 {
            *v = 0;
        }
    }
    if cfg.max_ack_pending < -1 {
        cfg.max_ack_pending = -1;
    }
    if !cfg.is_push() && cfg.max_waiting == 0 {
        cfg.max_waiting = DEFAULT_MAX_WAITING;
    }
    if cfg.ack_wait == 0 && matches!(cfg.ack_policy, AckPolicy::Explicit | AckPolicy::All) {
        cfg.ack_wait = DEFAULT_ACK_WAIT;
    }
    if let Some(&first) = cfg.backoff.first() {
        cfg.ack_wait = first;
    }
    if cfg.max_ack_pending == 0 {
        cfg.max_ack_pending = stream.consumer_limits.max_ack_pending;
    }
    if cfg.inactive_threshold == 0 {
        cfg.inactive_threshold = stream.consumer_limits.inactive_threshold;
    }
    if cfg.max_ack_pending == 0 && cfg.ack_policy != AckPolicy::None {
        cfg.max_ack_pending = match account.max_ack_pending {
            a if a > 0 => a.min(DEFAULT_MAX_ACK_PENDING),
            _ => DEFAULT_MAX_ACK_PENDING,
        };
    }
    if cfg.priority_policy == PriorityPolicy::PinnedClient && cfg.priority_timeout == 0 {
        cfg.priority_timeout = 120 * SEC;
    }
    if cfg.ack_policy == AckPolicy::FlowControl {
        cfg.flow_control = true;
        cfg.idle_heartbeat = SEC;
    }
}

/// Stamps an ephemeral's config with the default inactive threshold, as
/// nats-server does once the request has been compared with an existing
/// consumer's config.
pub fn stamp_ephemeral(cfg: &mut ConsumerConfig) {
    if !cfg.is_durable() && cfg.inactive_threshold <= 0 {
        cfg.inactive_threshold = EPHEMERAL_INACTIVE;
    }
}

/// The flow-control ack policy acks through a push consumer's flow
/// control (what a durable source reads through): nats-server's rules.
fn check_flow_control_acks(cfg: &ConsumerConfig) -> Result<(), ApiError> {
    if cfg.deliver_subject.is_empty() {
        return Err(E::CONSUMER_ACK_FC_REQUIRES_PUSH.err());
    }
    if !cfg.flow_control {
        return Err(E::CONSUMER_ACK_FC_REQUIRES_FC.err());
    }
    if cfg.idle_heartbeat != SEC {
        return Err(invalid("flow control ack policy heartbeat needs to be 1s"));
    }
    if cfg.max_ack_pending <= 0 {
        return Err(E::CONSUMER_ACK_FC_REQUIRES_MAX_ACK_PENDING.err());
    }
    if cfg.ack_wait != 0 || !cfg.backoff.is_empty() {
        return Err(E::CONSUMER_ACK_FC_REQUIRES_NO_ACK_WAIT.err());
    }
    if cfg.max_deliver > 0 {
        return Err(E::CONSUMER_ACK_FC_REQUIRES_NO_MAX_DELIVER.err());
    }
    Ok(())
}

/// Checks a (defaulted) config against its stream.
pub fn check(cfg: &ConsumerConfig, stream: &StreamConfig) -> Result<(), ApiError> {
    if !cfg.name.is_empty() && !valid_name(&cfg.name) {
        return Err(invalid(
            "consumer name can not contain '.', '*', '>', '\\', '/'",
        ));
    }
    if !cfg.durable_name.is_empty() && !valid_name(&cfg.durable_name) {
        return Err(invalid(
            "consumer durable name can not contain '.', '*', '>', '\\', '/'",
        ));
    }
    if cfg.num_replicas > stream.num_replicas {
        return Err(E::CONSUMER_REPLICAS_EXCEEDS_STREAM.err());
    }
    if cfg.num_replicas < 0 {
        return Err(E::REPLICAS_COUNT_CANNOT_BE_NEGATIVE.err());
    }
    if cfg.backoff.iter().any(|&b| b < 0) {
        return Err(E::CONSUMER_BACK_OFF_NEGATIVE.err());
    }
    if cfg.ack_wait < 0 {
        return Err(E::CONSUMER_ACK_WAIT_NEGATIVE.err());
    }
    if cfg.ack_policy == AckPolicy::FlowControl {
        check_flow_control_acks(cfg)?;
    }
    if !cfg.backoff.is_empty()
        && cfg.max_deliver != -1
        && cfg.backoff.len() as i64 > cfg.max_deliver
    {
        return Err(E::CONSUMER_MAX_DELIVER_BACKOFF.err());
    }
    if cfg.description.len() > MAX_DESCRIPTION {
        return Err(E::CONSUMER_DESCRIPTION_TOO_LONG.with("max", MAX_DESCRIPTION));
    }
    if cfg.is_push() {
        let ds = cfg.deliver_subject.as_bytes();
        if !subjects::is_literal(ds) {
            return Err(E::CONSUMER_DELIVER_TO_WILDCARDS.err());
        }
        if !subjects::is_valid_subject(ds) {
            return Err(E::CONSUMER_INVALID_DELIVER_SUBJECT.err());
        }
        if stream
            .subjects
            .iter()
            .any(|s| subjects::subject_matches_filter(ds, s.as_bytes()))
        {
            return Err(E::CONSUMER_DELIVER_CYCLE.err());
        }
        if cfg.max_waiting != 0 {
            return Err(E::CONSUMER_PUSH_MAX_WAITING.err());
        }
        if cfg.max_ack_pending > 0 && cfg.ack_policy == AckPolicy::None {
            return Err(E::CONSUMER_MAX_PENDING_ACK_POLICY_REQUIRED.err());
        }
        if cfg.idle_heartbeat > 0 && cfg.idle_heartbeat < 100 * MS {
            return Err(E::CONSUMER_SMALL_HEARTBEAT.err());
        }
    } else {
        if cfg.ack_policy == AckPolicy::None && stream.retention == Retention::WorkQueue {
            return Err(E::CONSUMER_PULL_REQUIRES_ACK.err());
        }
        if cfg.rate_limit_bps > 0 {
            return Err(E::CONSUMER_PULL_WITH_RATE_LIMIT.err());
        }
        if cfg.idle_heartbeat > 0 {
            return Err(E::CONSUMER_HB_REQUIRES_PUSH.err());
        }
        if cfg.flow_control {
            return Err(E::CONSUMER_FC_REQUIRES_PUSH.err());
        }
        if cfg.max_expires != 0 && cfg.max_expires < MS {
            return Err(E::CONSUMER_MAX_REQUEST_EXPIRES_TOO_SMALL.err());
        }
    }
    if !cfg.filter_subject.is_empty() && !cfg.filter_subjects.is_empty() {
        return Err(E::CONSUMER_DUPLICATE_FILTER_SUBJECTS.err());
    }
    if !cfg.filter_subject.is_empty() && !subjects::is_valid_subject(cfg.filter_subject.as_bytes())
    {
        return Err(invalid("invalid subject"));
    }
    for (i, f) in cfg.filter_subjects.iter().enumerate() {
        if f.is_empty() {
            return Err(E::CONSUMER_EMPTY_FILTER.err());
        }
        if !subjects::is_valid_subject(f.as_bytes()) {
            return Err(invalid("invalid subject"));
        }
        for g in &cfg.filter_subjects[..i] {
            if subjects::subject_matches_filter(f.as_bytes(), g.as_bytes())
                || subjects::subject_matches_filter(g.as_bytes(), f.as_bytes())
            {
                return Err(E::CONSUMER_OVERLAPPING_SUBJECT_FILTERS.err());
            }
        }
    }
    check_start(cfg)?;
    if !cfg.sample_freq.is_empty() {
        let f = cfg.sample_freq.trim_end_matches('%');
        if f.parse::<u64>().is_err() {
            return Err(E::CONSUMER_INVALID_SAMPLING.with(
                "err",
                format!("invalid sample frequency {:?}", cfg.sample_freq),
            ));
        }
    }
    if cfg.flow_control && cfg.idle_heartbeat <= 0 {
        return Err(E::CONSUMER_WITH_FLOW_CONTROL_NEEDS_HEARTBEATS.err());
    }
    if !cfg.durable_name.is_empty() && !cfg.name.is_empty() && cfg.durable_name != cfg.name {
        return Err(E::CONSUMER_CREATE_DURABLE_AND_NAME_MISMATCH.err());
    }
    let meta: usize = cfg.metadata.iter().map(|(k, v)| k.len() + v.len()).sum();
    if meta > MAX_METADATA {
        return Err(E::CONSUMER_METADATA_LENGTH.with("limit", "128KB"));
    }
    check_priority(cfg)
}

/// nats-server's checks of `priority_policy` and `priority_groups`.
fn check_priority(cfg: &ConsumerConfig) -> Result<(), ApiError> {
    if cfg.priority_policy == PriorityPolicy::None {
        if !cfg.priority_groups.is_empty() {
            return Err(E::CONSUMER_PRIORITY_GROUP_WITH_POLICY_NONE.err());
        }
        if cfg.priority_timeout > 0 {
            return Err(E::CONSUMER_PINNED_TTL_WITHOUT_PRIORITY_POLICY_NONE.err());
        }
        return Ok(());
    }
    if !cfg.deliver_subject.is_empty() {
        return Err(E::CONSUMER_PUSH_WITH_PRIORITY_GROUP.err());
    }
    if cfg.priority_groups.is_empty() {
        return Err(E::CONSUMER_PRIORITY_POLICY_WITHOUT_GROUP.err());
    }
    for group in &cfg.priority_groups {
        if group.is_empty() {
            return Err(E::CONSUMER_EMPTY_GROUP_NAME.err());
        }
        if !valid_group_name(group) {
            return Err(E::CONSUMER_INVALID_GROUP_NAME.err());
        }
    }
    Ok(())
}

/// `^[a-zA-Z0-9/_=-]{1,16}$`, nats-server's `validGroupName`.
pub fn valid_group_name(group: &str) -> bool {
    (1..=16).contains(&group.len())
        && group
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/_=-".contains(&b))
}

fn check_start(cfg: &ConsumerConfig) -> Result<(), ApiError> {
    let bad_start = |p: &str, what: &str| {
        E::CONSUMER_INVALID_POLICY.with(
            "err",
            format!(
                "consumer delivery policy is deliver {p}, but optional start {what} is also set"
            ),
        )
    };
    let not_set = |p: &str, what: &str| {
        E::CONSUMER_INVALID_POLICY.with(
            "err",
            format!("consumer delivery policy is deliver {p}, but optional {what} is not set"),
        )
    };
    let (seq, time) = (cfg.opt_start_seq > 0, cfg.opt_start_time.is_some());
    match cfg.deliver_policy {
        DeliverPolicy::All
        | DeliverPolicy::Last
        | DeliverPolicy::New
        | DeliverPolicy::LastPerSubject => {
            let p = match cfg.deliver_policy {
                DeliverPolicy::All => "all",
                DeliverPolicy::Last => "last",
                DeliverPolicy::New => "new",
                _ => "last per subject",
            };
            if seq {
                return Err(bad_start(p, "sequence"));
            }
            if time {
                return Err(bad_start(p, "time"));
            }
            if cfg.deliver_policy == DeliverPolicy::LastPerSubject && cfg.filters().is_empty() {
                return Err(not_set("last per subject", "filter subject"));
            }
        }
        DeliverPolicy::ByStartSequence => {
            if !seq {
                return Err(not_set("by start sequence", "start sequence"));
            }
            if time {
                return Err(bad_start("by start sequence", "time"));
            }
        }
        DeliverPolicy::ByStartTime => {
            if !time {
                return Err(not_set("by start time", "start time"));
            }
            if seq {
                return Err(bad_start("by start time", "start sequence"));
            }
        }
    }
    Ok(())
}

/// What an existing consumer's config may not change into. `bound`: the
/// old deliver subject has interest, so it cannot move.
pub fn check_update(
    old: &ConsumerConfig,
    new: &ConsumerConfig,
    bound: bool,
) -> Result<(), ApiError> {
    let create_err = |e: &str| E::CONSUMER_CREATE.with("err", e);
    let checks: [(bool, &str); 10] = [
        (
            old.deliver_policy != new.deliver_policy,
            "deliver policy can not be updated",
        ),
        (
            old.mem_storage != new.mem_storage,
            "storage type can not be updated",
        ),
        (
            old.opt_start_seq != new.opt_start_seq,
            "start sequence can not be updated",
        ),
        (
            old.opt_start_time != new.opt_start_time,
            "start time can not be updated",
        ),
        (
            old.ack_policy != new.ack_policy,
            "ack policy can not be updated",
        ),
        (
            old.replay_policy != new.replay_policy,
            "replay policy can not be updated",
        ),
        (
            old.idle_heartbeat != new.idle_heartbeat,
            "heart beats can not be updated",
        ),
        (
            old.flow_control != new.flow_control,
            "flow control can not be updated",
        ),
        (
            !old.is_push() && new.is_push(),
            "can not update pull consumer to push based",
        ),
        (
            old.is_push() && !new.is_push(),
            "can not update push consumer to pull based",
        ),
    ];
    if let Some((_, msg)) = checks.iter().find(|(bad, _)| *bad) {
        return Err(create_err(msg));
    }
    if old.deliver_subject != new.deliver_subject && bound {
        return Err(E::CONSUMER_NAME_EXIST.err());
    }
    if old.max_waiting != new.max_waiting {
        return Err(create_err("max waiting can not be updated"));
    }
    Ok(())
}
