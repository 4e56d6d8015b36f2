//! The account API: requests about the account's streams as a whole
//! (create, update, delete, names, list, account info), decided with the
//! checks that span streams: a name already taken, subjects that overlap
//! another stream's, and `max_bytes` reservations against the server's
//! limits.
//!
//! The answers to a create or an update are `reply::created` and
//! `reply::updated`.
//!
//! [`decide`] works over [`Streams`], which one server's stream registry
//! and a cluster's meta state both implement; it answers what it can at
//! once and returns what the driver must carry out: one server creates
//! the stream's files and actor, a cluster's meta leader places peers and
//! proposes the assignment.

use std::collections::BTreeMap;

use jetstream::api::{
    tier_name, AccountInfo, AccountLimits, AccountTiers, ApiStats, Selected, Storage, StreamConfig,
    StreamInfo, StreamNamesRequest, TierInfo, API_LEVEL, E,
};

use crate::reply::{self, Answer, Kind, Paged};
use crate::request::{AccountRequest, Mode};

const NAMES_LIMIT: usize = 1024;
const LIST_LIMIT: usize = 256;

/// The account's streams, as whoever decides for the account knows them.
pub trait Streams {
    /// Every stream's config, by name.
    fn configs(&self) -> BTreeMap<String, StreamConfig>;
}

/// The server's storage limits, in bytes (0 or less: none), and the
/// account's (`jetstream {}` in its block, or its JWT's, flat or tiered;
/// -1: none).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Limits {
    pub max_memory: i64,
    pub max_store: i64,
    pub account: AccountTiers,
}

/// What the driver carries out after [`decide`].
#[derive(Debug)]
pub enum Decision {
    /// Send this (an answer, or a refusal).
    Answer(Answer),
    /// Create this stream, then answer with its info (`created`).
    Create(Box<StreamConfig>),
    /// The stream exists with the very config asked for: answer with its
    /// info as it is (`created`).
    Exists(String),
    /// Give the stream this config (checked against the one it has),
    /// then answer with its info.
    Update(Box<StreamConfig>),
    /// Delete the stream, then answer (`deleted`).
    Delete(String),
    /// Answer with these streams' infos, in this order (`list`).
    List {
        names: Vec<String>,
        total: usize,
        offset: usize,
    },
    /// Answer with the account's usage (`info`).
    Info,
    /// Take server `peer` off stream `name` (a cluster only).
    PeerRemove { name: String, peer: String },
}

/// Decides an account request against `streams` and the server's
/// `limits`.
pub fn decide(
    streams: &dyn Streams,
    limits: Limits,
    mode: Mode,
    to: &str,
    request: AccountRequest,
) -> Decision {
    let kind = request.kind();
    match decide_inner(streams, limits, mode, to, request) {
        Ok(d) => d,
        Err(e) => Decision::Answer(Answer::refused(to, kind, &e)),
    }
}

fn decide_inner(
    streams: &dyn Streams,
    limits: Limits,
    mode: Mode,
    to: &str,
    request: AccountRequest,
) -> Result<Decision, jetstream::api::ApiError> {
    let configs = streams.configs();
    Ok(match request {
        AccountRequest::Info => Decision::Info,
        AccountRequest::Create { name, config } => {
            check_max_bytes(limits.account.select(config.num_replicas), &config)?;
            if let Some(existing) = configs.get(&name) {
                if existing != config.as_ref() {
                    return Err(E::STREAM_NAME_EXIST.err());
                }
                return Ok(Decision::Exists(name));
            }
            // nats-server's `jsNonClusteredStreamLimitsCheck`: the tier's
            // limits, and its streams only.
            let selected = limits.account.selected(config.num_replicas)?;
            let max_streams = selected.limits.max_streams;
            let in_tier = configs
                .values()
                .filter(|c| selected.counts(c.num_replicas))
                .count();
            if max_streams > 0 && in_tier as i64 >= max_streams {
                return Err(E::MAXIMUM_STREAMS_LIMIT.err());
            }
            check_others(&configs, &limits, selected, mode, &config)?;
            Decision::Create(config)
        }
        AccountRequest::Update { name, mut config } => {
            let current = configs.get(&name).ok_or_else(|| E::STREAM_NOT_FOUND.err());
            // The new replicas' tier, or the stream's own (nats-server's
            // `update`).
            let selected = limits.account.select(config.num_replicas).or_else(|| {
                current
                    .as_ref()
                    .ok()
                    .and_then(|c| limits.account.select(c.num_replicas))
            });
            check_max_bytes(selected, &config)?;
            let current = current?;
            let selected = selected.ok_or_else(|| E::NO_LIMITS.err())?;
            jetstream::stream::config::check_update(current, &mut config)?;
            check_others(&configs, &limits, selected, mode, &config)?;
            Decision::Update(config)
        }
        AccountRequest::Delete { name } => {
            if !configs.contains_key(&name) {
                return Err(E::STREAM_NOT_FOUND.err());
            }
            Decision::Delete(name)
        }
        AccountRequest::Names(req) => {
            let (names, total, offset) = page(&configs, &req, NAMES_LIMIT);
            // `null` when nothing is listed; nats-server's meta leader
            // lists `[]` for a page past the end of a list it has.
            let paged_past = mode == Mode::Clustered && total > 0 && offset > 0;
            let body = Paged {
                total,
                offset,
                limit: NAMES_LIMIT,
                rest: reply::Streams {
                    streams: (!names.is_empty() || paged_past).then_some(names),
                },
            };
            Decision::Answer(Answer::ok(to, Kind::StreamNames, &body))
        }
        AccountRequest::List(req) => {
            let (names, mut total, offset) = page(&configs, &req, LIST_LIMIT);
            // nats-server's meta leader counts what it gathers: nothing,
            // for a page past the end.
            if mode == Mode::Clustered && names.is_empty() {
                total = 0;
            }
            Decision::List {
                names,
                total,
                offset,
            }
        }
        AccountRequest::PeerRemove { name, peer } => Decision::PeerRemove { name, peer },
    })
}

/// The account's rules for a stream's `max_bytes` (nats-server's
/// `checkStreamCfg`): required, and at most a limit per storage type,
/// as the stream's tier sets them (none without one: the create is
/// refused later, for the missing tier).
fn check_max_bytes(
    selected: Option<Selected<'_>>,
    config: &StreamConfig,
) -> Result<(), jetstream::api::ApiError> {
    let Some(Selected {
        limits: account, ..
    }) = selected
    else {
        return Ok(());
    };
    let limit = match config.storage {
        Storage::Memory => account.memory_max_stream_bytes,
        Storage::File => account.storage_max_stream_bytes,
    };
    if account.max_bytes_required && config.max_bytes <= 0 {
        return Err(E::STREAM_MAX_BYTES_REQUIRED.err());
    }
    if limit > 0 && config.max_bytes > limit {
        return Err(E::STREAM_MAX_STREAM_BYTES_EXCEEDED.err());
    }
    Ok(())
}

/// nats-server's `checkLimits` against the account: a stream may not
/// allow more consumers than its tier, nor reserve past the tier's
/// storage (a stream without `max_bytes` counts one byte). `others` are
/// the account's other streams; those of the same tier count.
fn check_account(
    others: &[&StreamConfig],
    selected: Selected<'_>,
    config: &StreamConfig,
) -> Result<(), jetstream::api::ApiError> {
    let account = selected.limits;
    let max_consumers = account.max_consumers;
    if config.max_consumers > 0 && max_consumers > 0 && config.max_consumers > max_consumers {
        return Err(E::MAXIMUM_CONSUMERS_LIMIT.err());
    }
    let (limit, err) = match config.storage {
        Storage::Memory => (account.max_memory, E::MEMORY_RESOURCES_EXCEEDED),
        Storage::File => (account.max_storage, E::STORAGE_RESOURCES_EXCEEDED),
    };
    let reserved: i64 = others
        .iter()
        .filter(|c| c.storage == config.storage && selected.counts(c.num_replicas))
        .map(|c| selected.reservation(c.num_replicas, c.max_bytes))
        .fold(0, i64::saturating_add);
    let asked = selected.reservation(config.num_replicas, config.max_bytes.max(1));
    if limit >= 0 && (reserved > limit || asked > limit - reserved) {
        return Err(err.err());
    }
    Ok(())
}

/// The checks against every other stream: subjects that could capture
/// the same messages, the account's limits (`selected`: the stream's
/// tier), and reservations past the server's limits (which a cluster's
/// meta leader finds while placing the stream: no server has the room).
fn check_others(
    configs: &BTreeMap<String, StreamConfig>,
    limits: &Limits,
    selected: Selected<'_>,
    mode: Mode,
    config: &StreamConfig,
) -> Result<(), jetstream::api::ApiError> {
    let others = configs.iter().filter(|(n, _)| **n != config.name);
    let overlaps = others.clone().any(|(_, theirs)| {
        theirs.subjects.iter().any(|t| {
            config
                .subjects
                .iter()
                .any(|mine| subjects::subjects_collide(mine.as_bytes(), t.as_bytes()))
        })
    });
    if overlaps {
        return Err(E::STREAM_SUBJECT_OVERLAP.err());
    }
    let other_configs: Vec<&StreamConfig> = others.clone().map(|(_, c)| c).collect();
    check_account(&other_configs, selected, config)?;
    let (limit, err) = match config.storage {
        Storage::Memory => (limits.max_memory, E::MEMORY_RESOURCES_EXCEEDED),
        Storage::File => (limits.max_store, E::STORAGE_RESOURCES_EXCEEDED),
    };
    let reserved: i64 = others
        .filter(|(_, c)| c.storage == config.storage)
        .map(|(_, c)| c.max_bytes.max(0))
        .sum();
    if limit > 0 && reserved + config.max_bytes.max(0) > limit {
        return Err(match mode {
            Mode::Single => err.err(),
            Mode::Clustered => E::CLUSTER_NO_PEERS.with(
                "err",
                "no suitable peers for placement, insufficient storage",
            ),
        });
    }
    Ok(())
}

/// Bytes promised to streams with `max_bytes`: (memory, file).
pub fn reserved(configs: &BTreeMap<String, StreamConfig>) -> (u64, u64) {
    reserved_in(configs, None)
}

/// [`reserved`], of the streams of `tier` only if one is named.
fn reserved_in(configs: &BTreeMap<String, StreamConfig>, tier: Option<&str>) -> (u64, u64) {
    let sum = |storage: Storage| {
        configs
            .values()
            .filter(|c| c.storage == storage)
            .filter(|c| tier.is_none_or(|t| t == tier_name(c.num_replicas)))
            .map(|c| c.max_bytes.max(0) as u64)
            .sum()
    };
    (sum(Storage::Memory), sum(Storage::File))
}

/// A page of the names of the streams whose subjects could meet the
/// request's filter, in name order, with the total and the offset.
fn page(
    configs: &BTreeMap<String, StreamConfig>,
    req: &StreamNamesRequest,
    limit: usize,
) -> (Vec<String>, usize, usize) {
    let filter = req.subject.as_bytes();
    let matching: Vec<&String> = configs
        .iter()
        .filter(|(_, c)| {
            filter.is_empty()
                || c.subjects
                    .iter()
                    .any(|s| subjects::subjects_collide(s.as_bytes(), filter))
        })
        .map(|(n, _)| n)
        .collect();
    let total = matching.len();
    let offset = (req.offset.max(0) as usize).min(total);
    let names = matching
        .into_iter()
        .skip(offset)
        .take(limit)
        .cloned()
        .collect();
    (names, total, offset)
}

/// The answer to STREAM.LIST: `infos` of the page `Decision::List`
/// named (those the driver could get).
pub fn list(to: &str, total: usize, offset: usize, infos: Vec<StreamInfo>) -> Answer {
    let body = Paged {
        total,
        offset,
        limit: LIST_LIMIT,
        rest: reply::Streams { streams: infos },
    };
    Answer::ok(to, Kind::StreamList, &body)
}

/// The answer to a delete that went through.
pub fn deleted(to: &str) -> Answer {
    Answer::ok(to, Kind::StreamDelete, &reply::Success { success: true })
}

/// What the account holds, as the driver counts it.
#[derive(Debug, Clone, Default)]
pub struct Usage {
    pub memory: u64,
    pub storage: u64,
    pub streams: u64,
    pub consumers: u64,
    /// API calls and errors so far.
    pub total: u64,
    pub errors: u64,
    /// The same by tier (streams of one replica count, "R1", "R3"), as
    /// account info reports it when the account's limits are tiered.
    pub tiers: BTreeMap<String, TierUsage>,
}

/// What the account's streams of one tier hold.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TierUsage {
    pub memory: u64,
    pub storage: u64,
    pub streams: u64,
    pub consumers: u64,
}

impl Usage {
    /// The usage of the tier of streams with `replicas`, to count into.
    pub fn tier(&mut self, replicas: i64) -> &mut TierUsage {
        self.tiers.entry(tier_name(replicas)).or_default()
    }
}

/// The answer to `$JS.API.INFO`: `usage`, the account's `limits`, and
/// the server's JetStream `domain`. With tiered limits, `limits` is all
/// 0 and `tiers` has each tier the account has limits for or streams
/// in, as nats-server's `JetStreamUsage` reports them.
pub fn info(
    to: &str,
    streams: &dyn Streams,
    usage: Usage,
    limits: &AccountTiers,
    domain: Option<&str>,
) -> Answer {
    let configs = streams.configs();
    let (reserved_memory, reserved_storage) = reserved(&configs);
    let tiers = match limits {
        AccountTiers::Flat(_) => None,
        AccountTiers::Tiered(tiers) => {
            let names = tiers.keys().chain(usage.tiers.keys());
            let info = names
                .map(|name| {
                    let used = usage.tiers.get(name).copied().unwrap_or_default();
                    let (reserved_memory, reserved_storage) = reserved_in(&configs, Some(name));
                    let tier = TierInfo {
                        memory: used.memory,
                        storage: used.storage,
                        reserved_memory,
                        reserved_storage,
                        streams: used.streams,
                        consumers: used.consumers,
                        limits: tiers.get(name).copied().unwrap_or(AccountLimits::ZERO),
                    };
                    (name.clone(), tier)
                })
                .collect();
            Some(info)
        }
    };
    let info = AccountInfo {
        totals: TierInfo {
            memory: usage.memory,
            storage: usage.storage,
            reserved_memory,
            reserved_storage,
            streams: usage.streams,
            consumers: usage.consumers,
            limits: limits.reported(),
        },
        domain: domain.map(str::to_string),
        api: ApiStats {
            level: API_LEVEL,
            total: usage.total,
            errors: usage.errors,
        },
        tiers,
    };
    Answer::ok(to, Kind::AccountInfo, &info)
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixed(BTreeMap<String, StreamConfig>);

    impl Streams for Fixed {
        fn configs(&self) -> BTreeMap<String, StreamConfig> {
            self.0.clone()
        }
    }

    fn config(name: &str, subjects: &[&str], max_bytes: i64) -> StreamConfig {
        let mut cfg = StreamConfig {
            name: name.into(),
            subjects: subjects.iter().map(|s| s.to_string()).collect(),
            max_bytes,
            ..Default::default()
        };
        jetstream::stream::config::check(&mut cfg, false, false).unwrap();
        cfg
    }

    fn refusal(d: Decision) -> u64 {
        match d {
            Decision::Answer(a) => {
                let v: serde_json::Value = serde_json::from_slice(&a.msg.payload).unwrap();
                v["error"]["err_code"].as_u64().expect("an error")
            }
            other => panic!("{other:?}"),
        }
    }

    fn create(name: &str, subjects: &[&str], max_bytes: i64) -> AccountRequest {
        AccountRequest::Create {
            name: name.into(),
            config: Box::new(config(name, subjects, max_bytes)),
        }
    }

    #[test]
    fn creates_are_checked_against_every_other_stream() {
        let mut all = BTreeMap::new();
        all.insert("A".to_string(), config("A", &["a.>"], 600));
        let streams = Fixed(all);
        let limits = Limits {
            max_memory: 0,
            max_store: 1000,
            account: AccountTiers::default(),
        };
        // Overlapping subjects (10065), a name taken with another config
        // (10058), reservations past the limit (10047).
        assert_eq!(
            refusal(decide(
                &streams,
                limits.clone(),
                Mode::Single,
                "r",
                create("B", &["a.b"], 0)
            )),
            10065
        );
        assert_eq!(
            refusal(decide(
                &streams,
                limits.clone(),
                Mode::Single,
                "r",
                create("A", &["x"], 0)
            )),
            10058
        );
        assert_eq!(
            refusal(decide(
                &streams,
                limits.clone(),
                Mode::Single,
                "r",
                create("B", &["b"], 500)
            )),
            10047
        );
        assert!(matches!(
            decide(
                &streams,
                limits.clone(),
                Mode::Single,
                "r",
                create("B", &["b"], 400)
            ),
            Decision::Create(_)
        ));
        assert!(matches!(
            decide(
                &streams,
                limits.clone(),
                Mode::Single,
                "r",
                create("A", &["a.>"], 600)
            ),
            Decision::Exists(_)
        ));
        // A stream's own reservation is not counted twice on update.
        let update = AccountRequest::Update {
            name: "A".into(),
            config: Box::new(config("A", &["a.>"], 1000)),
        };
        assert!(matches!(
            decide(&streams, limits.clone(), Mode::Single, "r", update),
            Decision::Update(_)
        ));
    }

    /// Tiered limits: each tier counts its own streams and reservations
    /// (a tier's bytes already replicated), and a stream of a tier the
    /// account has no limits for is refused (10120).
    #[test]
    fn tiers_count_their_own_streams_and_bytes() {
        let replicated = |name: &str, subject: &str, replicas: i64, max_bytes: i64| {
            let mut c = config(name, &[subject], max_bytes);
            c.num_replicas = replicas;
            c
        };
        let mut all = BTreeMap::new();
        all.insert("A".to_string(), replicated("A", "a", 1, 600));
        all.insert("B".to_string(), replicated("B", "b", 3, 0));
        let streams = Fixed(all);
        let tier = |max_storage: i64, max_streams: i64| AccountLimits {
            max_storage,
            max_streams,
            ..AccountLimits::default()
        };
        let limits = Limits {
            max_memory: 0,
            max_store: 0,
            account: AccountTiers::Tiered(BTreeMap::from([
                ("R1".to_string(), tier(1000, 1)),
                ("R3".to_string(), tier(1000, 2)),
            ])),
        };
        let create = |name: &str, replicas: i64, max_bytes: i64| AccountRequest::Create {
            name: name.into(),
            config: Box::new(replicated(name, &name.to_lowercase(), replicas, max_bytes)),
        };
        let decided = |r| decide(&streams, limits.clone(), Mode::Clustered, "r", r);
        // R1 holds one stream already; R3 one of two.
        assert_eq!(refusal(decided(create("C", 1, 0))), 10027);
        // 1000 bytes in R3 fit its 1000 (flat limits would count 3000).
        assert!(matches!(decided(create("C", 3, 1000)), Decision::Create(_)));
        assert_eq!(refusal(decided(create("C", 3, 1001))), 10047);
        // No R5 tier.
        assert_eq!(refusal(decided(create("C", 5, 0))), 10120);
        // Flat limits count every replica's bytes.
        let flat = Limits {
            account: AccountTiers::Flat(tier(1000, -1)),
            ..limits.clone()
        };
        assert_eq!(
            refusal(decide(
                &streams,
                flat,
                Mode::Clustered,
                "r",
                create("C", 3, 200)
            )),
            10047
        );
    }
}
