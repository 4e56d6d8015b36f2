//! JetStream without IO: the API's JSON, the error catalogue, and the
//! stream and consumer state machines. Inputs come in with the time as a
//! number; outputs (messages to send, state to persist) go out as values.
//! The server crate drives these over real sockets and disks; a simulator
//! can drive them over simulated ones.

pub mod api;
pub mod consumer;
pub mod duration;
pub mod headers;
pub mod output;
pub mod stream;
pub mod transform;
