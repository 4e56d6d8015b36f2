//! The JetStream API's JSON, with nats-server's field names, order and
//! omission rules, and its error catalogue.

mod account;
mod catalogue;
mod consumer;
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

/// The JetStream API level this server implements, reported in account
/// info and stream metadata: everything through level 4 (nats-server
/// 2.14: fast batches, durable sources, the flow-control ack policy,
/// consumer reset). nats-server 2.15 reports 5, which adds detecting an
/// origin stream that was deleted and made again under a source.
pub const API_LEVEL: i64 = 4;
