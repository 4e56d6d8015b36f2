//! The classifier: what a message on a JetStream subject asks for.
//! [`classify`] turns (subject, reply, headers, payload) into a typed
//! [`Request`], checking everything that needs no stream: the API level,
//! the body's JSON (read the way nats-server's Go decoder reads it), and
//! the request-level rules, in nats-server's order. What needs a stream
//! (it exists, its consumer does, it allows direct gets) is checked by
//! `stream_api`, against the stream.
//!
//! One server and a cluster classify alike; where nats-server answers a
//! request differently in a cluster, [`Mode`] says which.
//!
//! - `types`: the requests, by who decides them.
//! - `classify`: [`classify`], [`stream_of`] and [`unserved`], acks and flow-control
//!   replies by their subjects, the rest through `table`.
//! - `table`: one entry per `$JS.API` request: its subject's tokens, its
//!   response kind, who may ask, and the function that reads it.
//! - `body`: request bodies, read and checked as nats-server does.

mod body;
mod classify;
mod table;
mod types;

pub use body::{is_empty_request, optional, strict};
pub use classify::{classify, not_enabled, not_enabled_subjects, stream_of, unserved};
pub use types::{
    AccountRequest, Inbound, Mode, OperatorRequest, Read, Refusal, Request, StreamRequest,
    META_STEPDOWN, RESPONSE_TYPE, SERVER_REMOVE,
};
