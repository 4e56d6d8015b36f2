//! JetStream without IO: the stream and consumer state machines, over
//! the API's types (`jsapi`, re-exported as `api`). Inputs come in with
//! the time as a number; outputs (messages to send, state to persist) go
//! out as values.
//! `jsservice` and `jsdriver` drive these over real sockets and disks; a simulator
//! can drive them over simulated ones.

pub mod consumer;
pub use jsapi::duration;
pub mod output;
pub mod stream;
pub use subjects::transform;

/// The API's types, JSON and error catalogue, now the `jsapi` crate:
/// `jetstream::api` stays for the crates that name it so.
pub use jsapi as api;
/// NATS header blocks, now `protocol::headers`: `jetstream::headers`
/// stays for the crates that name it so.
pub use protocol::headers;
