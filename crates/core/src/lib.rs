//! The core of a NATS server: the subject space and everything that
//! delivers into it. Accounts, each with its trie (`account`); a
//! connection's state and outbound buffers (`client`); the client
//! connection's tasks and the delivery of every publish (`conn`); how
//! messages cross accounts through imports (`imports`); the
//! registries of routes (`route`) and leaf node connections (`leaf`)
//! that delivery and interest propagation consult; the server's own
//! subscribers (`internal`, and `bus`, the one interface JetStream
//! reaches the core through); interest notifications (`interest`);
//! message tracing (`trace`); and the hub that owns them all (`server`).
//!
//! The connection surfaces (`flotilla-routes`, `flotilla-leafnodes`,
//! `flotilla-websocket`) run their protocols over these pieces; nothing
//! here knows them, JetStream, monitoring or the binary.

pub mod account;
pub mod bus;
pub mod client;
pub mod conn;
pub mod imports;
pub mod interest;
pub mod internal;
pub mod latency;
pub mod leaf;
pub mod route;
pub mod server;
pub mod trace;

/// A new NUID-like id: 22 base-62 characters (nats-server's event ids,
/// system events and JetStream advisories alike).
pub fn nuid() -> String {
    const DIGITS: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    (0..22)
        .map(|_| DIGITS[fastrand::usize(..DIGITS.len())] as char)
        .collect()
}
