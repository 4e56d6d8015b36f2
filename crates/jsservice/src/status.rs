//! Status replies: a message with headers only, naming a code.

use bytes::Bytes;
use jetstream::headers;
use jetstream::output::OutMsg;

/// Headers of a status reply with no body (`503` when nothing serves a
/// request, as nats-server's no-responders).
pub fn status_msg(to: &str, code: u16, description: &str) -> OutMsg {
    OutMsg {
        subject: to.to_string(),
        route: None,
        reply: None,
        headers: Some(headers::build(Some((code, description)), &[])),
        payload: Bytes::new(),
    }
}

/// What a requester gets when nothing listens on `subject`: the 503
/// status naming the subject, as the core server sends it.
pub fn no_responders(to: &str, subject: &str) -> OutMsg {
    OutMsg {
        subject: to.to_string(),
        route: None,
        reply: None,
        headers: Some(headers::build(
            Some((503, "")),
            &[("Nats-Subject", subject)],
        )),
        payload: Bytes::new(),
    }
}
