//! The IO side of the replication core: the Raft transport over TCP
//! ([`transport`]), the log throttle for its repeating errors
//! ([`repeats`]), and the thread that drives a server's multi-raft
//! engine ([`node`]). All Raft and state-machine decisions stay in the sans-IO
//! `replication` crate; this crate only moves bytes, runs fsyncs and keeps
//! time.

pub mod node;
pub mod repeats;
pub mod transport;
