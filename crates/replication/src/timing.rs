//! Raft's clock, in ticks of the driver's choosing (`cluster::node`'s
//! `Config::tick`; a step in the simulator). The engine sets raft-rs's
//! timeouts from these, and quiet groups ([`crate::quiet`]) count their
//! idle and silent ticks against them.

/// Ticks between heartbeats.
pub const HEARTBEAT_TICKS: usize = 2;
/// Elections take this many ticks plus a seeded spread of as many again.
pub const ELECTION_TICKS: usize = 10;
