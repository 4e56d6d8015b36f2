//! From a message to a [`Request`]: acks and flow-control replies by
//! their subjects, API requests through the table (`table`).

use jetstream::api::{self, E};
use jetstream::headers;

use super::table::{self, Classified, Scope};
use super::types::{Inbound, Mode, Request, StreamRequest, API_PREFIX};
use crate::reply::{Answer, Kind};
use crate::stream_sm::Op;

/// What `m` asks for (see the module's notes). `new_name` names a
/// consumer whose create names none (called once per create, so every
/// replica of a stream uses the same name).
pub fn classify(m: Inbound, mode: Mode, new_name: &mut dyn FnMut() -> String) -> Request {
    if let Some(rest) = m.subject.strip_prefix("$JS.ACK.") {
        return ack(rest, &m, false);
    }
    if let Some(rest) = m.subject.strip_prefix("$JS.FC.") {
        return ack(rest, &m, true);
    }
    let Some(rest) = m.subject.strip_prefix(API_PREFIX) else {
        return Request::Ignore;
    };
    let tokens: Vec<&str> = rest.split('.').collect();
    let (found, reply, kind) = match entry(&tokens, &m, mode) {
        Entry::Ignore => return Request::Ignore,
        Entry::Answer(answer) => return Request::Answer(answer),
        Entry::Read { found, reply, kind } => (found, reply, kind),
    };
    let api = found.api;
    let mut call = table::Call {
        kind,
        names: found.names,
        rest: found.rest,
        m: &m,
        mode,
        new_name,
    };
    let classified = (api.parse)(&mut call);
    // The kind the table gives is the one the request is answered with
    // later (`AccountRequest::kind`, `StreamRequest::kind` in
    // `stream_api::missing`).
    match &classified {
        Ok(Classified::Account(request)) => assert_eq!(request.kind(), kind),
        Ok(Classified::Stream(_, request)) => assert_eq!(request.kind(), kind),
        _ => {}
    }
    match classified {
        Ok(Classified::Account(request)) => Request::Account { reply, request },
        Ok(Classified::Stream(stream, request)) => Request::Stream {
            stream,
            reply: Some(reply),
            request,
        },
        Ok(Classified::Operator(request)) => Request::Operator { reply, request },
        Err((kind, e)) => Request::Answer(Answer::refused(&reply, kind, &e)),
    }
}

/// How far a `$JS.API` request gets before its body is read.
enum Entry<'a, 't> {
    /// nats-server does not answer it.
    Ignore,
    /// Refused by a check that comes first.
    Answer(Answer),
    /// Its entry, the reply subject, and the kind it is answered with.
    Read {
        found: table::Found<'a, 't>,
        reply: String,
        kind: Kind,
    },
}

/// The checks every `$JS.API` request passes first, in nats-server's
/// order: a reply to answer, an entry, who may ask, the API level.
fn entry<'a, 't>(tokens: &'a [&'t str], m: &Inbound, mode: Mode) -> Entry<'a, 't> {
    let Some(reply) = m.reply.clone().filter(|r| !r.is_empty()) else {
        return Entry::Ignore;
    };
    // nats-server has no subscription there: no reply at all.
    let Some(found) = table::find(tokens) else {
        return Entry::Ignore;
    };
    let api = found.api;
    if api.scope == Scope::Operator && mode == Mode::Single {
        return Entry::Ignore;
    }
    if !api_level_ok(m.headers.as_deref()) {
        return Entry::Answer(match api.kind {
            None => Answer::status(&reply, 412, "Required Api Level"),
            Some(kind) => Answer::refused(&reply, kind, &E::REQUIRED_API_LEVEL.err()),
        });
    }
    let kind = api.kind.unwrap_or(Kind::System);
    // A single server has no leaders to move and no peers to remove;
    // nats-server answers these so.
    if api.scope == Scope::Cluster && mode == Mode::Single {
        return Entry::Answer(Answer::refused(&reply, kind, &E::CLUSTER_REQUIRED.err()));
    }
    Entry::Read { found, reply, kind }
}

/// What a request in an account without JetStream is answered, on a
/// server with it: after the checks every request passes first,
/// nats-server's 10039 "JetStream not enabled for account", in the
/// request's response kind. Nothing answers the operator's requests,
/// nor those answered with messages (a pull, a direct get): they are
/// not subscribed to ([`not_enabled_subjects`]).
pub fn not_enabled(m: &Inbound, mode: Mode) -> Option<Answer> {
    let rest = m.subject.strip_prefix(API_PREFIX)?;
    let tokens: Vec<&str> = rest.split('.').collect();
    match entry(&tokens, m, mode) {
        Entry::Ignore => None,
        Entry::Answer(answer) => Some(answer),
        Entry::Read { found, reply, kind } => {
            assert!(
                found.api.kind.is_some(),
                "subscribed for API responses only"
            );
            Some(Answer::refused(
                &reply,
                kind,
                &E::NOT_ENABLED_FOR_ACCOUNT.err(),
            ))
        }
    }
}

/// The subjects [`not_enabled`] answers: each request with an API
/// response that anyone may send (a `>` that may match no token is
/// subscribed without it as well).
pub fn not_enabled_subjects() -> Vec<String> {
    let mut out = Vec::new();
    for api in table::APIS {
        if api.kind.is_none() || api.scope == Scope::Operator {
            continue;
        }
        out.push(format!("{API_PREFIX}{}", api.pattern));
        if let Some(bare) = api.pattern.strip_suffix(".>") {
            out.push(format!("{API_PREFIX}{bare}"));
        }
    }
    out
}

/// The stream a request about one stream names, and its response kind:
/// what a cluster's meta leader answers "not found" to, before reading
/// the body, when the stream does not exist (its leader answers the
/// rest): the table's requests marked so.
pub fn stream_of(subject: &str) -> Option<(&str, Kind)> {
    let tokens: Vec<&str> = subject.strip_prefix(API_PREFIX)?.split('.').collect();
    let found = table::find(&tokens)?;
    if !found.api.not_found_by_meta {
        return None;
    }
    Some((found.names[0], found.api.kind?))
}

/// What a cluster's server answers for a request that reached no one
/// but itself: no server leads the stream, or the meta group, at this
/// moment (an election under way). An endpoint with an API response
/// gets nats-server's 503 "JetStream system temporarily unavailable"
/// (10008), what its servers answer while a group is leaderless; a pull
/// or a direct get gets "no responders", what the core says of a
/// subject nobody listens on. A subject no entry matches is not
/// answered (see `table`).
pub fn unserved(subject: &str, reply: &str) -> Option<Answer> {
    let tokens: Vec<&str> = subject.strip_prefix(API_PREFIX)?.split('.').collect();
    let found = table::find(&tokens)?;
    Some(match found.api.kind {
        Some(kind) => Answer::refused(reply, kind, &E::CLUSTER_NOT_AVAIL.err()),
        None => Answer::no_responders(reply, subject),
    })
}

/// What a flow-control reply says was received: `Nats-Last-Stream` (when
/// above zero) and `Nats-Last-Consumer` (zero when missing), as
/// nats-server's `processFlowControl` reads them.
fn flow_control_last(headers: Option<&[u8]>) -> Option<(u64, u64)> {
    let h = headers?;
    let number = |name| {
        jetstream::headers::get(h, name)
            .and_then(|v| v.parse::<i64>().ok())
            .unwrap_or(0)
    };
    let stream_seq = number("Nats-Last-Stream");
    (stream_seq > 0).then(|| {
        (
            stream_seq as u64,
            number("Nats-Last-Consumer").max(0) as u64,
        )
    })
}

/// `$JS.ACK.<stream>.<consumer>.…` and `$JS.FC.<stream>.<consumer>.…`.
fn ack(rest: &str, m: &Inbound, flow_control: bool) -> Request {
    let mut tokens = rest.split('.');
    let (Some(stream), Some(consumer)) = (tokens.next(), tokens.next()) else {
        return Request::Ignore;
    };
    let consumer = consumer.to_string();
    let op = if flow_control {
        Op::FlowControl {
            consumer,
            subject: m.subject.clone(),
            last: flow_control_last(m.headers.as_deref()),
        }
    } else {
        Op::Ack {
            consumer,
            subject: m.subject.clone(),
            body: m.payload.clone(),
        }
    };
    Request::Stream {
        stream: stream.to_string(),
        reply: m.reply.clone().filter(|r| !r.is_empty()),
        request: StreamRequest::Change(op),
    }
}

/// Whether this server has the API level a request requires
/// (`Nats-Required-Api-Level`), or it requires none.
fn api_level_ok(headers: Option<&[u8]>) -> bool {
    let level = headers.and_then(|h| headers::get(h, "Nats-Required-Api-Level"));
    level.is_none_or(|level| {
        level
            .trim()
            .parse::<i64>()
            .is_ok_and(|l| l <= api::API_LEVEL)
    })
}
