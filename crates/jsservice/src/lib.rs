//! The JetStream service, sans-IO: everything a JetStream server decides,
//! for one server and for a cluster alike. Nothing here touches a socket,
//! a clock, a thread or a file of its own; the drivers (`server::js`)
//! move the bytes and decide when a result is durable.
//!
//! - `request`: the classifier, from a message to a typed request.
//! - `stream_api`: requests about one stream, against the stream: reads,
//!   and the admission of changes as inputs.
//! - `reply`: responses, statuses, and what an applied input answers.
//! - `meta_sm`: the meta group's state machine (peers, stream and
//!   consumer assignments).
//! - `catchup`: a replica's store brought up to a snapshot's state from
//!   a peer's store, in checksummed chunks; `fetch`: the replica's side
//!   of it, and how long a store keeps what it removed for others' fetches.
//! - `replica`: a stream replica's storage life (apply, snapshot,
//!   install, fetch, repair), as both cluster drivers run it.
//! - `codec`: length-prefixed fields and messages, as `stream_sm`'s
//!   entries and snapshots and `catchup`'s chunks write them; `summary`:
//!   what a store holds, without its messages (a state snapshot's part,
//!   which `catchup` fills).
//! - `stream_sm`: a stream as a state machine over inputs (`Op`s): what
//!   one server applies in order, and what every replica applies from its
//!   Raft log.

pub mod account;
pub mod catchup;
mod codec;
pub mod fetch;
pub mod meta_sm;
pub mod placement;
pub mod replica;
pub mod reply;
pub mod request;
pub mod sourcing;
pub mod status;
pub mod stream_api;
pub mod stream_sm;
mod summary;
