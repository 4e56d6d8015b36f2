//! The replication core, sans-IO: what servers say to each other and how
//! it is checked. Nothing here touches a socket, a clock or a thread; the
//! drivers (real network, simulator) move the bytes.

pub mod chunk;
pub mod engine;
pub mod frame;
pub mod identity;
pub mod log;
pub mod membership;
pub mod node;
pub mod outbox;
pub mod quiet;
pub mod rng;
pub mod timing;
