//! `$JS.API.INFO`: the account's JetStream usage and limits.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::{ApiError, ConsumerConfig, StreamConfig, E};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct AccountLimits {
    pub max_memory: i64,
    pub max_storage: i64,
    pub max_streams: i64,
    pub max_consumers: i64,
    pub max_ack_pending: i64,
    pub memory_max_stream_bytes: i64,
    pub storage_max_stream_bytes: i64,
    pub max_bytes_required: bool,
}

impl Default for AccountLimits {
    /// Unlimited: every limit -1, as nats-server reports the dynamic
    /// (untiered) limits.
    fn default() -> Self {
        AccountLimits {
            max_memory: -1,
            max_storage: -1,
            max_streams: -1,
            max_consumers: -1,
            max_ack_pending: -1,
            memory_max_stream_bytes: -1,
            storage_max_stream_bytes: -1,
            max_bytes_required: false,
        }
    }
}

impl AccountLimits {
    /// What a consumer create must meet.
    pub fn consumers(&self) -> AccountConsumerLimits {
        AccountConsumerLimits {
            max_consumers: self.max_consumers,
            max_ack_pending: self.max_ack_pending,
        }
    }
}

impl AccountLimits {
    /// Every limit 0: what nats-server reports as an account's `limits`
    /// when its limits are tiered (each tier has its own, in `tiers`).
    pub const ZERO: AccountLimits = AccountLimits {
        max_memory: 0,
        max_storage: 0,
        max_streams: 0,
        max_consumers: 0,
        max_ack_pending: 0,
        memory_max_stream_bytes: 0,
        storage_max_stream_bytes: 0,
        max_bytes_required: false,
    };
}

/// nats-server's `tierName`: the tier of a stream or consumer with
/// `replicas` replicas ("R1" for 0 or 1).
pub fn tier_name(replicas: i64) -> String {
    format!("R{}", replicas.max(1))
}

/// An account's JetStream limits, as nats-server keeps them (`jsLimits`):
/// one set every stream meets (flat: its tier ""), or one per replica
/// count, by tier name (an account JWT's `tiered_limits`; nats-server's
/// config file has no tiers).
///
/// The two differ beyond selection: flat limits count every replica of
/// a stream's bytes (an R3 stream of 1 MiB reserves 3 MiB), a tier's
/// limits already mean replicated bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AccountTiers {
    Flat(AccountLimits),
    Tiered(BTreeMap<String, AccountLimits>),
}

impl Default for AccountTiers {
    fn default() -> Self {
        AccountTiers::Flat(AccountLimits::default())
    }
}

/// The limits a stream or consumer meets: its tier's (`tier` is `None`
/// when flat).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Selected<'a> {
    pub tier: Option<&'a str>,
    pub limits: &'a AccountLimits,
}

impl Selected<'_> {
    /// Bytes a stream of `replicas` holding `bytes` counts against these
    /// limits (nats-server's `accountReservation`): every replica's when
    /// flat, the bytes themselves in a tier.
    pub fn reservation(&self, replicas: i64, bytes: i64) -> i64 {
        match (self.tier, bytes) {
            (_, b) if b <= 0 => 0,
            (None, b) => b.saturating_mul(replicas.max(1)),
            (Some(_), b) => b,
        }
    }

    /// Whether a stream of `replicas` counts in these limits: all of them
    /// when flat, those of the same tier otherwise (`isSameTier`).
    pub fn counts(&self, replicas: i64) -> bool {
        self.tier.is_none_or(|t| t == tier_name(replicas))
    }
}

impl AccountTiers {
    /// nats-server's `selectLimits`: the flat limits, or the tier of
    /// `replicas`; `None` when the account has no such tier (10120).
    pub fn select(&self, replicas: i64) -> Option<Selected<'_>> {
        match self {
            AccountTiers::Flat(limits) => Some(Selected { tier: None, limits }),
            AccountTiers::Tiered(tiers) => {
                tiers
                    .get_key_value(&tier_name(replicas))
                    .map(|(tier, limits)| Selected {
                        tier: Some(tier),
                        limits,
                    })
            }
        }
    }

    /// [`AccountTiers::select`], or nats-server's 10120 "no JetStream
    /// default or applicable tiered limit present".
    pub fn selected(&self, replicas: i64) -> Result<Selected<'_>, ApiError> {
        self.select(replicas).ok_or_else(|| E::NO_LIMITS.err())
    }

    /// The `limits` account info reports: the flat limits, or all 0.
    pub fn reported(&self) -> AccountLimits {
        match self {
            AccountTiers::Flat(limits) => *limits,
            AccountTiers::Tiered(_) => AccountLimits::ZERO,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct ApiStats {
    pub level: i64,
    pub total: u64,
    pub errors: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct AccountInfo {
    /// The account's totals, with its limits (all 0 when tiered), as
    /// nats-server embeds its `JetStreamTier`.
    #[serde(flatten)]
    pub totals: TierInfo,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
    pub api: ApiStats,
    /// With tiered limits: each tier's usage and limits, by tier name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tiers: Option<BTreeMap<String, TierInfo>>,
}

/// One tier in account info (nats-server's `JetStreamTier`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct TierInfo {
    pub memory: u64,
    pub storage: u64,
    pub reserved_memory: u64,
    pub reserved_storage: u64,
    pub streams: u64,
    pub consumers: u64,
    pub limits: AccountLimits,
}

/// The account's limits on consumers (`jetstream { max_consumers,
/// max_ack_pending }` in its block; 0 or less: none). The leader puts
/// them in a consumer create, so every replica decides with the same.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AccountConsumerLimits {
    /// Consumers a stream may have, when its own `max_consumers` is
    /// larger or unset.
    pub max_consumers: i64,
    /// The default `max_ack_pending`, when lower than nats-server's
    /// 1000, and the most a consumer may ask for.
    pub max_ack_pending: i64,
}

impl AccountConsumerLimits {
    pub fn is_none(&self) -> bool {
        self.max_consumers <= 0 && self.max_ack_pending <= 0
    }

    /// How many consumers a stream of `stream` may have (0: any).
    pub fn max_consumers(&self, stream: &StreamConfig) -> i64 {
        let own = stream.max_consumers;
        match self.max_consumers {
            a if a > 0 && (own <= 0 || a < own) => a,
            _ => own.max(0),
        }
    }

    /// nats-server's `checkConsumerCfg` against the account's limit.
    pub fn check(&self, cfg: &ConsumerConfig) -> Result<(), ApiError> {
        let limit = self.max_ack_pending;
        if limit > 0 && cfg.max_ack_pending > limit {
            return Err(E::CONSUMER_MAX_PENDING_ACK_EXCESS.with("limit", limit));
        }
        Ok(())
    }
}
