//! The NATS client wire protocol, without IO: a parser for what clients
//! send, encoders for what the server sends, and the INFO/CONNECT JSON.

pub mod encode;
mod info;
mod parser;
pub mod route;

pub use info::{ClientOptions, ConnectInfo, ServerInfo};
pub use parser::{parse_size, ClientOp, ParseError, Parsed, Parser, Publish};
