//! Checking and completing a stream configuration the way nats-server's
//! `checkStreamCfg` does: defaults filled in, every rule with its error.
//! Rules that need other streams (subject overlap) are the engine's.

use crate::api::{ApiError, ConsumerConfig, Discard, Retention, StreamConfig, E};

const NS: i64 = 1;
const MS: i64 = 1_000_000 * NS;
const SEC: i64 = 1_000 * MS;
/// Duplicate window when none is given.
pub const DEFAULT_DUPLICATE_WINDOW: i64 = 120 * SEC;
/// nats-server's maximum stream name length.
const MAX_NAME: usize = 255;
const MAX_DESCRIPTION: usize = 4096;
const MAX_METADATA: usize = 128 * 1024;

fn invalid(msg: impl std::fmt::Display) -> ApiError {
    E::STREAM_INVALID_CONFIG.with("err", msg)
}

fn pedantic(msg: impl std::fmt::Display) -> ApiError {
    E::PEDANTIC.with("err", msg)
}

/// Whether `name` is usable as a stream or consumer name.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && !name.chars().any(|c| {
            matches!(
                c,
                ' ' | '\t' | '\r' | '\n' | '\x0c' | '.' | '*' | '>' | '/' | '\\'
            )
        })
}

/// Subjects reserved for the system and JetStream's own API.
fn reserved(subject: &str) -> Option<&'static str> {
    let s = subject.as_bytes();
    let collides = |p: &str| subjects::subjects_collide(s, p.as_bytes());
    let within = |p: &str| subjects::subject_matches_filter(s, p.as_bytes());
    if (collides("$JS.>") || collides("$JSC.>") || collides("$NRG.>")) && !within("$JS.EVENT.>") {
        return Some("subjects that overlap with jetstream api require no-ack to be true");
    }
    if collides("$SYS.>") && !within("$SYS.ACCOUNT.>") {
        return Some("subjects that overlap with system api require no-ack to be true");
    }
    None
}

/// Normalizes `cfg` in place and checks it. `clustered` is false for a
/// single server (replicas above 1 are refused). The checks run in
/// nats-server's order, so the first that fails is the error it gives.
pub fn check(cfg: &mut StreamConfig, is_pedantic: bool, clustered: bool) -> Result<(), ApiError> {
    check_name_and_metadata(cfg)?;
    check_replicas(cfg)?;
    check_limits(cfg, is_pedantic)?;
    check_duplicate_window(cfg, is_pedantic)?;
    check_counters_and_discard(cfg)?;
    check_delete_markers(cfg, is_pedantic)?;
    check_schedules(cfg, is_pedantic)?;
    check_persist_mode(cfg)?;
    check_mirror(cfg)?;
    check_sources(cfg)?;
    check_subjects(cfg)?;
    check_subject_transform(cfg)?;
    check_republish(cfg, is_pedantic)?;
    check_placement(cfg)?;
    // After every check of the config itself, as nats-server's
    // `addStreamWithAssignment` checks it.
    if cfg.num_replicas > 1 && !clustered {
        return Err(E::STREAM_REPLICAS_NOT_SUPPORTED.err());
    }
    Ok(())
}

/// Whether the stream takes its messages from other streams.
fn sourcing(cfg: &StreamConfig) -> bool {
    cfg.mirror.is_some() || !cfg.sources.is_empty()
}

/// The name, description and metadata sizes; version keys are the
/// server's to write.
fn check_name_and_metadata(cfg: &mut StreamConfig) -> Result<(), ApiError> {
    if !valid_name(&cfg.name) {
        return Err(invalid(
            "stream name is required and can not contain '.', '*', '>', '\\', '/'",
        ));
    }
    if cfg.name.len() > MAX_NAME {
        return Err(invalid(format!(
            "stream name is too long, maximum allowed is {MAX_NAME}"
        )));
    }
    if cfg.description.len() > MAX_DESCRIPTION {
        return Err(invalid(format!(
            "stream description is too long, maximum allowed is {MAX_DESCRIPTION}"
        )));
    }
    let meta: usize = cfg.metadata.iter().map(|(k, v)| k.len() + v.len()).sum();
    if meta > MAX_METADATA {
        return Err(invalid(format!(
            "stream metadata exceeds maximum size of {MAX_METADATA} bytes"
        )));
    }
    cfg.metadata
        .retain(|k, _| k != "_nats.ver" && k != "_nats.level");
    Ok(())
}

/// `num_replicas`: 0 is 1, at most 5.
fn check_replicas(cfg: &mut StreamConfig) -> Result<(), ApiError> {
    if cfg.num_replicas < 0 {
        return Err(E::REPLICAS_COUNT_CANNOT_BE_NEGATIVE.err());
    }
    if cfg.num_replicas == 0 {
        cfg.num_replicas = 1;
    }
    if cfg.num_replicas > 5 {
        return Err(invalid("maximum replicas is 5"));
    }
    Ok(())
}

/// The counts and sizes (zero or below -1 means unlimited: -1), and
/// `max_age`.
fn check_limits(cfg: &mut StreamConfig, is_pedantic: bool) -> Result<(), ApiError> {
    for (field, v) in [
        ("max_msgs", &mut cfg.max_msgs),
        ("max_bytes", &mut cfg.max_bytes),
        ("max_msgs_per_subject", &mut cfg.max_msgs_per_subject),
        ("max_consumers", &mut cfg.max_consumers),
    ] {
        if *v < -1 && is_pedantic {
            return Err(pedantic(format!("{field} must be set to -1")));
        }
        if *v == 0 || *v < -1 {
            *v = -1;
        }
    }
    if cfg.max_msg_size == 0 || cfg.max_msg_size < -1 {
        cfg.max_msg_size = -1;
    }
    if cfg.max_age < 0 {
        return Err(invalid("max age can not be negative"));
    }
    if cfg.max_age != 0 && cfg.max_age < 100 * MS {
        return Err(invalid("max age needs to be >= 100ms"));
    }
    Ok(())
}

/// `duplicate_window`: the default unless sourcing, within `max_age`.
fn check_duplicate_window(cfg: &mut StreamConfig, is_pedantic: bool) -> Result<(), ApiError> {
    if cfg.duplicate_window < 0 {
        return Err(invalid("duplicates window can not be negative"));
    }
    if cfg.duplicate_window == 0 && !sourcing(cfg) {
        cfg.duplicate_window = DEFAULT_DUPLICATE_WINDOW;
        if cfg.max_age != 0 && cfg.max_age < cfg.duplicate_window {
            if is_pedantic {
                return Err(pedantic("duplicate window cannot be bigger than max age"));
            }
            cfg.duplicate_window = cfg.max_age;
        }
    } else if cfg.duplicate_window != 0 {
        if cfg.max_age != 0 && cfg.duplicate_window > cfg.max_age {
            return Err(invalid("duplicates window can not be larger then max age"));
        }
        if cfg.duplicate_window < 100 * MS {
            return Err(invalid("duplicates window needs to be >= 100ms"));
        }
    }
    Ok(())
}

/// Roll-ups against `deny_purge`, counters against what they cannot
/// have, and discard new per subject.
fn check_counters_and_discard(cfg: &StreamConfig) -> Result<(), ApiError> {
    if cfg.deny_purge && cfg.allow_rollup_hdrs {
        return Err(invalid("roll-ups require the purge permission"));
    }
    if cfg.allow_msg_counter {
        let refusal = if cfg.discard == Discard::New {
            Some("counter stream cannot use discard new")
        } else if cfg.allow_msg_ttl {
            Some("counter stream cannot use message TTLs")
        } else if cfg.allow_msg_schedules {
            Some("counter stream cannot use message schedules")
        } else if cfg.retention != Retention::Limits {
            Some("counter stream can only use limits retention")
        } else {
            None
        };
        if let Some(text) = refusal {
            return Err(invalid(text));
        }
    }
    if cfg.discard_new_per_subject {
        if cfg.discard != Discard::New {
            return Err(invalid(
                "discard new per subject requires discard new policy to be set",
            ));
        }
        if cfg.max_msgs_per_subject <= 0 {
            return Err(invalid(
                "discard new per subject requires max msgs per subject > 0",
            ));
        }
    }
    Ok(())
}

/// `subject_delete_marker_ttl`: at least a second, not on mirrors; it
/// turns on TTLs and roll-ups.
fn check_delete_markers(cfg: &mut StreamConfig, is_pedantic: bool) -> Result<(), ApiError> {
    if cfg.subject_delete_marker_ttl < 0 {
        return Err(invalid("subject delete marker TTL must not be negative"));
    }
    if cfg.subject_delete_marker_ttl > 0 {
        if cfg.subject_delete_marker_ttl < SEC {
            return Err(invalid(
                "subject delete marker TTL must be at least 1 second",
            ));
        }
        if cfg.mirror.is_some() {
            return Err(invalid("subject delete markers forbidden on mirrors"));
        }
        if is_pedantic && (!cfg.allow_msg_ttl || !cfg.allow_rollup_hdrs || cfg.deny_purge) {
            return Err(pedantic(
                "subject delete markers require message TTLs and roll-ups",
            ));
        }
        cfg.allow_msg_ttl = true;
        cfg.allow_rollup_hdrs = true;
        cfg.deny_purge = false;
    }
    Ok(())
}

/// `allow_msg_schedules`: not with discard new; it turns on roll-ups.
fn check_schedules(cfg: &mut StreamConfig, is_pedantic: bool) -> Result<(), ApiError> {
    if cfg.allow_msg_schedules {
        if cfg.discard == Discard::New {
            return Err(invalid("message scheduling cannot use discard new"));
        }
        if !cfg.allow_rollup_hdrs {
            if is_pedantic {
                return Err(pedantic(
                    "message scheduling cannot be set if roll-ups are disabled",
                ));
            }
            cfg.allow_rollup_hdrs = true;
            cfg.deny_purge = false;
        }
    }
    Ok(())
}

/// A mirror: nothing of its own to store or source, a valid origin.
fn check_mirror(cfg: &StreamConfig) -> Result<(), ApiError> {
    let Some(m) = &cfg.mirror else {
        return Ok(());
    };
    if cfg.first_seq > 0 {
        return Err(E::MIRROR_WITH_FIRST_SEQ.err());
    }
    if !cfg.subjects.is_empty() {
        return Err(E::MIRROR_WITH_SUBJECTS.err());
    }
    if !cfg.sources.is_empty() {
        return Err(E::MIRROR_WITH_SOURCES.err());
    }
    if cfg.allow_msg_counter {
        return Err(E::MIRROR_WITH_COUNTERS.err());
    }
    if cfg.allow_atomic {
        return Err(E::MIRROR_WITH_ATOMIC_PUBLISH.err());
    }
    if cfg.allow_batched {
        return Err(E::MIRROR_WITH_BATCH_PUBLISH.err());
    }
    if cfg.allow_msg_schedules {
        return Err(E::MIRROR_WITH_MSG_SCHEDULES.err());
    }
    if m.consumer.is_some() && !durable_consumer_ok(m) {
        return Err(E::MIRROR_DURABLE_CONSUMER_CFG_INVALID.err());
    }
    if !m.filter_subject.is_empty() && !m.subject_transforms.is_empty() {
        return Err(E::MIRROR_MULTIPLE_FILTERS_NOT_ALLOWED.err());
    }
    if m.external.is_none() && !valid_name(&m.name) {
        return Err(E::MIRROR_INVALID_STREAM_NAME.err());
    }
    if m.opt_start_seq > 0 && m.opt_start_time.is_some() {
        return Err(E::MIRROR_WITH_START_SEQ_AND_TIME.err());
    }
    if transforms_overlap(&m.subject_transforms) {
        return Err(E::MIRROR_OVERLAPPING_SUBJECT_FILTERS.err());
    }
    Ok(())
}

/// Sources: valid origins, each once, a durable consumer serving one
/// source; then `mirror_direct`, which needs a mirror.
fn check_sources(cfg: &StreamConfig) -> Result<(), ApiError> {
    if !cfg.sources.is_empty() && cfg.allow_msg_schedules {
        return Err(E::SOURCE_WITH_MSG_SCHEDULES.err());
    }
    let mut seen = Vec::new();
    let mut consumers = Vec::new();
    for s in &cfg.sources {
        if s.external.is_none() && !valid_name(&s.name) {
            return Err(E::SOURCE_INVALID_STREAM_NAME.err());
        }
        if !s.filter_subject.is_empty() && !s.subject_transforms.is_empty() {
            return Err(E::SOURCE_MULTIPLE_FILTERS_NOT_ALLOWED.err());
        }
        if transforms_overlap(&s.subject_transforms) {
            return Err(E::SOURCE_OVERLAPPING_SUBJECT_FILTERS.err());
        }
        if let Some(c) = &s.consumer {
            if !durable_consumer_ok(s) {
                return Err(E::SOURCE_DURABLE_CONSUMER_CFG_INVALID.err());
            }
            // One durable consumer serves one source.
            let cname = (s.name.clone(), c.name.clone());
            if consumers.contains(&cname) {
                return Err(E::SOURCE_DURABLE_CONSUMER_DUPLICATE_DETECTED.err());
            }
            consumers.push(cname);
        }
        // nats-server's `composeIName`: an origin in another domain or
        // account (its API prefix) or read through another consumer is
        // another source.
        let key = (
            s.name.clone(),
            s.external.as_ref().map(|e| e.api.clone()),
            s.consumer.as_ref().map(|c| c.name.clone()),
            s.filter_subject.clone(),
            s.subject_transforms.clone(),
        );
        if seen.contains(&key) {
            return Err(E::SOURCE_DUPLICATE_DETECTED.err());
        }
        seen.push(key);
    }
    if cfg.mirror_direct && cfg.mirror.is_none() {
        return Err(invalid("stream has no mirror but does have mirror direct"));
    }
    Ok(())
}

/// `subjects`: the stream's name when none (and not sourcing), valid,
/// not repeated nor overlapping, none of the system's.
fn check_subjects(cfg: &mut StreamConfig) -> Result<(), ApiError> {
    if cfg.subjects.is_empty() && !sourcing(cfg) {
        cfg.subjects = vec![cfg.name.clone()];
    }
    for (i, subj) in cfg.subjects.iter().enumerate() {
        if !subjects::is_valid_subject(subj.as_bytes()) {
            return Err(invalid("invalid subject"));
        }
        if cfg.subjects[..i].contains(subj) {
            return Err(invalid("duplicate subjects detected"));
        }
        if subj == ">" {
            if !cfg.no_ack {
                return Err(invalid("capturing all subjects requires no-ack to be true"));
            }
            if cfg.num_replicas != 1 {
                return Err(invalid("capturing all subjects requires replicas of 1"));
            }
        }
        if !cfg.no_ack {
            if let Some(msg) = reserved(subj) {
                return Err(invalid(msg));
            }
        }
        for other in &cfg.subjects[i + 1..] {
            if subjects::subjects_collide(subj.as_bytes(), other.as_bytes()) {
                return Err(invalid(format!("subject {subj:?} overlaps with {other:?}")));
            }
        }
    }
    if cfg.subjects.is_empty() && !sourcing(cfg) {
        return Err(invalid(
            "stream needs at least one configured subject or be a source/mirror",
        ));
    }
    Ok(())
}

/// `subject_transform`: a valid source and destination.
fn check_subject_transform(cfg: &StreamConfig) -> Result<(), ApiError> {
    if let Some(t) = &cfg.subject_transform {
        if !t.src.is_empty() && !subjects::is_valid_subject(t.src.as_bytes()) {
            return Err(E::STREAM_TRANSFORM_INVALID_SOURCE
                .with("err", format!("invalid subject {}", t.src)));
        }
        if let Err(e) = crate::transform::Transform::new(&t.src, &t.dest) {
            return Err(E::STREAM_TRANSFORM_INVALID_DESTINATION.with("err", e));
        }
    }
    Ok(())
}

/// `republish`: `>` when no source is given, following the subject
/// transform when it takes the only subject, no cycle, a valid
/// transform.
fn check_republish(cfg: &mut StreamConfig, is_pedantic: bool) -> Result<(), ApiError> {
    let Some(r) = &mut cfg.republish else {
        return Ok(());
    };
    if r.src.is_empty() {
        if is_pedantic {
            return Err(pedantic("republish source can not be empty"));
        }
        r.src = ">".to_string();
    }
    // '>' to '>' follows the subject transform when that transform
    // takes the stream's only subject: republish what it produces.
    if let Some(t) = &cfg.subject_transform {
        if r.src == ">" && r.dest == ">" && cfg.subjects.len() == 1 && t.src == cfg.subjects[0] {
            if is_pedantic {
                return Err(pedantic("implicit republish based on subject transform"));
            }
            r.src = t.dest.clone();
            r.dest = t.dest.clone();
        }
    }
    for s in &cfg.subjects {
        if subjects::subjects_collide(s.as_bytes(), r.dest.as_bytes()) {
            return Err(invalid(
                "stream configuration for republish destination forms a cycle",
            ));
        }
    }
    if crate::transform::Transform::new(&r.src, &r.dest).is_err() {
        return Err(invalid(format!(
            "stream configuration for republish with transform from '{}' to '{}' not valid",
            r.src, r.dest
        )));
    }
    Ok(())
}

/// `placement`: no preferred server; an empty one is none.
fn check_placement(cfg: &mut StreamConfig) -> Result<(), ApiError> {
    if let Some(p) = &cfg.placement {
        if !p.preferred.is_empty() {
            return Err(invalid("preferred server not permitted in placement"));
        }
        if p.is_empty() {
            cfg.placement = None;
        }
    }
    Ok(())
}

/// A mirror's or source's durable consumer: a valid name, a literal
/// deliver subject, and no start or filter of its own (the consumer has
/// them).
fn durable_consumer_ok(s: &crate::api::StreamSource) -> bool {
    let Some(c) = &s.consumer else {
        return true;
    };
    valid_name(&c.name)
        && subjects::is_valid_literal_subject(c.deliver_subject.as_bytes())
        && s.opt_start_seq == 0
        && s.opt_start_time.is_none()
        && s.filter_subject.is_empty()
}

/// `persist_mode`: `default` (stored as unset, as nats-server stores it)
/// or `async`, which only a one-replica file stream may have.
fn check_persist_mode(cfg: &mut StreamConfig) -> Result<(), ApiError> {
    match cfg.persist_mode.as_str() {
        "" | "default" => cfg.persist_mode.clear(),
        ASYNC_PERSIST => {
            if cfg.storage != crate::api::Storage::File {
                return Err(invalid(
                    "async persist mode is only supported on file storage",
                ));
            }
            if cfg.num_replicas > 1 {
                return Err(invalid(
                    "async persist mode is not supported on replicated streams",
                ));
            }
            if cfg.allow_atomic {
                return Err(invalid(
                    "async persist mode is not supported with atomic batch publish",
                ));
            }
        }
        // The API's decoder admits no other value.
        other => return Err(invalid(format!("invalid persist mode {other:?}"))),
    }
    Ok(())
}

/// `persist_mode: async`: acknowledged before the data is synced.
pub const ASYNC_PERSIST: &str = "async";

/// The minimum API level a config needs, stored as `_nats.req.level`.
pub fn required_level(cfg: &StreamConfig) -> i64 {
    if cfg.allow_batched {
        return 4;
    }
    if cfg.persist_mode == ASYNC_PERSIST
        || cfg.allow_msg_counter
        || cfg.allow_atomic
        || cfg.allow_msg_schedules
    {
        return 2;
    }
    i64::from(cfg.allow_msg_ttl || cfg.subject_delete_marker_ttl > 0)
}

/// Rules for changing `old` into `new` (both already checked).
pub fn check_update(old: &StreamConfig, new: &mut StreamConfig) -> Result<(), ApiError> {
    if old.name != new.name {
        return Err(invalid("stream configuration name must match original"));
    }
    if old.storage != new.storage {
        return Err(invalid(
            "stream configuration update can not change storage type",
        ));
    }
    if old.retention != new.retention
        && (old.retention == Retention::WorkQueue || new.retention == Retention::WorkQueue)
    {
        return Err(invalid(
            "stream configuration update can not change retention policy to/from workqueue",
        ));
    }
    if old.sealed && !new.sealed {
        return Err(invalid(
            "stream configuration update can not unseal a sealed stream",
        ));
    }
    if old.deny_delete && !new.deny_delete {
        return Err(invalid(
            "stream configuration update can not cancel deny message deletes",
        ));
    }
    if old.deny_purge && !new.deny_purge {
        return Err(invalid(
            "stream configuration update can not cancel deny purge",
        ));
    }
    if new.mirror.is_some() && old.mirror != new.mirror {
        return Err(E::STREAM_MIRROR_NOT_UPDATABLE.err());
    }
    if old.allow_msg_counter != new.allow_msg_counter {
        return Err(invalid(
            "stream configuration update can not change message counter setting",
        ));
    }
    if old.allow_msg_schedules && !new.allow_msg_schedules {
        return Err(invalid("message schedules can not be disabled"));
    }
    if old.persist_mode != new.persist_mode {
        return Err(invalid(
            "stream configuration update can not change persist mode",
        ));
    }
    if old.allow_msg_ttl && !new.allow_msg_ttl {
        return Err(invalid("message TTL status can not be disabled"));
    }
    if new.sealed {
        new.max_age = 0;
        new.discard = Discard::New;
        new.deny_delete = true;
        new.deny_purge = true;
        new.allow_rollup_hdrs = false;
    }
    Ok(())
}

/// Whether `new` sets consumer limits that differ from `old`'s, which
/// an existing consumer might then exceed ([`check_consumer_limits`]).
pub fn tightens_consumer_limits(old: &StreamConfig, new: &StreamConfig) -> bool {
    let (old, limits) = (&old.consumer_limits, &new.consumer_limits);
    (limits.inactive_threshold > 0 && limits.inactive_threshold != old.inactive_threshold)
        || (limits.max_ack_pending > 0 && limits.max_ack_pending != old.max_ack_pending)
}

/// nats-server refuses new consumer limits that a consumer already
/// exceeds; it checks only the limits that change to a set value.
pub fn check_consumer_limits<'a>(
    old: &StreamConfig,
    new: &StreamConfig,
    consumers: impl IntoIterator<Item = (&'a str, &'a ConsumerConfig)>,
) -> Result<(), ApiError> {
    if !tightens_consumer_limits(old, new) {
        return Ok(());
    }
    let (old, limits) = (&old.consumer_limits, &new.consumer_limits);
    let inactive = (limits.inactive_threshold != old.inactive_threshold)
        .then_some(limits.inactive_threshold)
        .filter(|t| *t > 0);
    let pending = (limits.max_ack_pending != old.max_ack_pending)
        .then_some(limits.max_ack_pending)
        .filter(|p| *p > 0);
    let over: Vec<&str> = consumers
        .into_iter()
        .filter(|(_, consumer)| {
            inactive.is_some_and(|t| consumer.inactive_threshold > t)
                || pending.is_some_and(|p| consumer.max_ack_pending > p)
        })
        .map(|(name, _)| name)
        .collect();
    match over.is_empty() {
        true => Ok(()),
        false => Err(E::STREAM_UPDATE.with(
            "err",
            format!("change to limits violates consumers: {}", over.join(", ")),
        )),
    }
}

/// Whether one transform's source subject is within another's (nats-server
/// checks `subjectIsSubsetMatch` both ways over every pair).
fn transforms_overlap(transforms: &[crate::api::SubjectTransform]) -> bool {
    transforms.iter().enumerate().any(|(i, outer)| {
        transforms.iter().enumerate().any(|(j, inner)| {
            i != j && subjects::subject_matches_filter(outer.src.as_bytes(), inner.src.as_bytes())
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::Storage;

    fn cfg(name: &str) -> StreamConfig {
        StreamConfig {
            name: name.into(),
            ..Default::default()
        }
    }

    #[test]
    fn defaults() {
        let mut c = cfg("S");
        check(&mut c, false, false).unwrap();
        assert_eq!(c.subjects, vec!["S"]);
        assert_eq!(
            (
                c.max_msgs,
                c.max_bytes,
                c.max_msgs_per_subject,
                c.max_consumers,
                c.max_msg_size
            ),
            (-1, -1, -1, -1, -1)
        );
        assert_eq!(c.duplicate_window, DEFAULT_DUPLICATE_WINDOW);
        assert_eq!(c.num_replicas, 1);
        let mut c = StreamConfig {
            max_age: SEC,
            ..cfg("S")
        };
        check(&mut c, false, false).unwrap();
        assert_eq!(c.duplicate_window, SEC, "capped to max_age");
    }

    #[test]
    fn errors() {
        let bad = |mut c: StreamConfig| check(&mut c, false, false).unwrap_err().description;
        assert!(bad(cfg("a.b")).contains("can not contain"));
        assert_eq!(
            bad(StreamConfig {
                num_replicas: 3,
                ..cfg("S")
            }),
            "replicas > 1 not supported in non-clustered mode"
        );
        assert_eq!(
            bad(StreamConfig {
                max_age: 10,
                ..cfg("S")
            }),
            "max age needs to be >= 100ms"
        );
        assert_eq!(
            bad(StreamConfig {
                subjects: vec!["a".into(), "a".into()],
                ..cfg("S")
            }),
            "subject \"a\" overlaps with \"a\""
        );
        assert_eq!(
            bad(StreamConfig {
                subjects: vec!["a.*".into(), "a.b".into()],
                ..cfg("S")
            }),
            "subject \"a.*\" overlaps with \"a.b\""
        );
        assert_eq!(
            bad(StreamConfig {
                subjects: vec!["$JS.API.>".into()],
                ..cfg("S")
            }),
            "subjects that overlap with jetstream api require no-ack to be true"
        );
        assert_eq!(
            bad(StreamConfig {
                subjects: vec![">".into()],
                ..cfg("S")
            }),
            "capturing all subjects requires no-ack to be true"
        );
        assert_eq!(
            bad(StreamConfig {
                deny_purge: true,
                allow_rollup_hdrs: true,
                ..cfg("S")
            }),
            "roll-ups require the purge permission"
        );
        assert_eq!(
            bad(StreamConfig {
                discard_new_per_subject: true,
                ..cfg("S")
            }),
            "discard new per subject requires discard new policy to be set"
        );
    }

    #[test]
    fn update_rules() {
        let mut old = cfg("S");
        check(&mut old, false, false).unwrap();
        let mut new = StreamConfig {
            storage: Storage::Memory,
            ..old.clone()
        };
        assert!(check_update(&old, &mut new)
            .unwrap_err()
            .description
            .contains("storage type"));
        let mut new = StreamConfig {
            retention: Retention::WorkQueue,
            ..old.clone()
        };
        assert!(check_update(&old, &mut new)
            .unwrap_err()
            .description
            .contains("workqueue"));
        let mut new = StreamConfig {
            sealed: true,
            max_age: SEC,
            ..old.clone()
        };
        check_update(&old, &mut new).unwrap();
        assert!(new.deny_delete && new.deny_purge && new.max_age == 0);
    }
}
