//! The NATS client wire protocol, without IO: a parser for what clients
//! send, encoders for what the server sends, the INFO/CONNECT JSON, and
//! header blocks (`headers`).

pub mod encode;
pub mod headers;
mod info;
pub mod leaf;
mod parser;
pub mod route;

pub use info::{ClientOptions, ConnectInfo, ServerInfo};
pub use parser::{parse_size, ClientOp, ParseError, Parsed, Parser, Publish};

/// Version reported to clients and in monitoring. Clients gate features on
/// the server version (headers need 2.2+, for instance), so flotilla
/// reports the nats-server release whose behaviour it follows.
pub const NATS_VERSION: &str = "2.15.1";
