//! The JetStream API's JSON, with nats-server's field names, order and
//! omission rules, and its error catalogue.

mod account;
pub mod advisory;
mod catalogue;
mod consumer;
pub mod duration;
mod error;
pub mod go_types;
pub mod gojson;
pub mod nullable;
mod stream;
pub mod time;

pub use account::*;
pub use catalogue::E;
pub use consumer::*;
pub use error::{ApiError, ErrorDef};
pub use stream::*;

/// Prefix of every response `type`.
pub const TYPE_PREFIX: &str = "io.nats.jetstream.api.v1.";

/// nats-server's `getHash`: 8 characters, each a byte of SHA-256 of
/// `name` mapped into [0-9A-Za-z] (server ids in monitoring, stream
/// identities).
pub fn go_hash(name: &str) -> String {
    use sha2::Digest;
    const DIGITS: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    let sum = sha2::Sha256::digest(name.as_bytes());
    sum[..8]
        .iter()
        .map(|b| DIGITS[(*b % 62) as usize] as char)
        .collect()
}

/// A stream's identity (`Nats-Stream-Identity`): a hash of when it was
/// made, so a stream deleted and made again under the same name is told
/// apart (API level 5).
pub fn stream_identity(created: i64) -> String {
    go_hash(&time::rfc3339(created))
}

/// The JetStream API level this server implements, reported in account
/// info and stream metadata: nats-server 2.15's. Level 4 brought fast
/// batches, durable sources, the flow-control ack policy and consumer
/// reset; level 5 the stream identity a source's consumer create and
/// reset name (`stream_identity`).
pub const API_LEVEL: i64 = 5;
