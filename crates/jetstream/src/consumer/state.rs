//! The part of a consumer that survives a restart, and its encoding.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingEntry {
    pub sseq: u64,
    pub dseq: u64,
    pub ts: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ConsumerState {
    pub delivered_dseq: u64,
    pub delivered_sseq: u64,
    pub ack_floor_dseq: u64,
    pub ack_floor_sseq: u64,
    pub pending: Vec<PendingEntry>,
    /// (stream sequence, redeliveries so far).
    pub redelivered: Vec<(u64, u64)>,
}

impl ConsumerState {
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("state serializes")
    }

    pub fn decode(bytes: &[u8]) -> Option<Self> {
        serde_json::from_slice(bytes).ok()
    }
}
