//! `$JS.API.INFO`: the account's JetStream usage and limits.

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

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct ApiStats {
    pub level: i64,
    pub total: u64,
    pub errors: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct AccountInfo {
    pub memory: u64,
    pub storage: u64,
    pub reserved_memory: u64,
    pub reserved_storage: u64,
    pub streams: u64,
    pub consumers: u64,
    pub limits: AccountLimits,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
    pub api: ApiStats,
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
