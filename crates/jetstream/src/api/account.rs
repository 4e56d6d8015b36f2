//! `$JS.API.INFO`: the account's JetStream usage and limits.

use serde::Serialize;

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
    pub fn consumers(&self) -> crate::consumer::AccountConsumerLimits {
        crate::consumer::AccountConsumerLimits {
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
