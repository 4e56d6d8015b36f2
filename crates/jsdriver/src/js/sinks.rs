//! The internal subscriptions that feed JetStream on one server: a
//! stream's subjects, the API, the ack and flow-control subjects of every
//! consumer, and the inboxes of streams' sources. Sinks run on the
//! publisher's task, so they only copy and queue.

use std::sync::Arc;

use jetstream::headers;
use jetstream::output::OutMsg;
use jetstream::stream::PubAck;
use jsservice::request::{classify, Inbound, Mode, Request};
use jsservice::stream_api;

use super::{Cmd, JetStream, StreamHandle};
use flotilla_core::bus::Subscription;
use flotilla_core::bus::{Message, Reach, Sink as InternalSink};

/// A message as an internal subscription received it.
pub fn inbound(msg: Message<'_>) -> Inbound {
    Inbound {
        subject: String::from_utf8_lossy(msg.subject).into_owned(),
        reply: msg
            .reply
            .filter(|r| !r.is_empty())
            .map(|r| String::from_utf8_lossy(r).into_owned()),
        headers: msg.headers.map(bytes::Bytes::copy_from_slice),
        payload: bytes::Bytes::copy_from_slice(msg.payload),
    }
}

/// A stream's subjects: each message becomes a publish to its actor.
struct StreamSink {
    js: Arc<JetStream>,
    handle: Arc<StreamHandle>,
}

impl InternalSink for StreamSink {
    fn deliver(&self, msg: Message<'_>) {
        if self.handle.overloaded() {
            if let Some(reply) = msg.reply.filter(|r| !r.is_empty()) {
                let ack = PubAck::Error(jetstream::api::E::STREAM_TOO_MANY_REQUESTS.err());
                self.js.bounce(OutMsg {
                    subject: String::from_utf8_lossy(reply).into_owned(),
                    route: None,
                    reply: None,
                    headers: Some(headers::build(Some((429, "Too Many Requests")), &[])),
                    payload: ack.encode(&self.handle.name),
                });
            }
            return;
        }
        self.handle.send(Cmd::Publish(inbound(msg)));
    }

    fn traced_stream(&self) -> Option<&str> {
        Some(&self.handle.name)
    }
}

/// `$JS.API.>`: everything goes to the dispatcher task.
struct ApiSink {
    tx: tokio::sync::mpsc::UnboundedSender<Inbound>,
    js: Arc<JetStream>,
}

impl InternalSink for ApiSink {
    fn deliver(&self, msg: Message<'_>) {
        if !self.js.bus.pull_has_listener(msg.subject, msg.reply) {
            return;
        }
        let _ = self.tx.send(inbound(msg));
    }

    fn deliver_from(&self, msg: Message<'_>, publisher: u64) {
        self.js.note_request(&msg, publisher);
        self.deliver(msg);
    }
}

/// `$JS.ACK.<stream>.<consumer>...` and `$JS.FC.<stream>.<consumer>...`:
/// to the stream named in the subject.
struct AckSink {
    js: Arc<JetStream>,
}

impl InternalSink for AckSink {
    fn deliver(&self, msg: Message<'_>) {
        let Request::Stream {
            stream,
            reply,
            request,
        } = classify(inbound(msg), Mode::Single, &mut String::new)
        else {
            return;
        };
        match self.js.stream(&stream) {
            Some(handle) => {
                handle.send(Cmd::Request { reply, request });
            }
            None => {
                // No consumer listens here: a requester hears so.
                if let Some(a) = stream_api::missing(&stream, reply.as_deref(), &request) {
                    self.js.bounce(a.msg);
                }
            }
        }
    }
}

/// Answers and deliveries for a stream's sources.
struct InboxSink {
    handle: Arc<StreamHandle>,
}

impl InternalSink for InboxSink {
    fn deliver(&self, msg: Message<'_>) {
        let routed = String::from_utf8_lossy(msg.routed).into_owned();
        self.handle.send(Cmd::Inbox {
            routed,
            msg: inbound(msg),
        });
    }
}

pub fn subscribe_api(js: &Arc<JetStream>) -> Result<(), subjects::SublistError> {
    let api = Arc::new(ApiSink {
        tx: js.api_tx.clone(),
        js: js.clone(),
    });
    js.bus.subscribe("$JS.API.>", Reach::Local, api)?;
    for subject in ["$JS.ACK.>", "$JS.FC.>"] {
        let acks = Arc::new(AckSink { js: js.clone() });
        js.bus.subscribe(subject, Reach::Local, acks)?;
    }
    Ok(())
}

/// Replaces a stream's subject subscriptions with ones for `subjects`,
/// hearing what the account imports on them too.
pub fn subscribe_stream(
    js: &Arc<JetStream>,
    handle: &Arc<StreamHandle>,
    subjects: &[String],
) -> Result<(), subjects::SublistError> {
    let old = std::mem::take(&mut *handle.subs.lock());
    for s in old {
        js.bus.unsubscribe(&s);
    }
    let sink = Arc::new(StreamSink {
        js: js.clone(),
        handle: handle.clone(),
    });
    let mut subs = Vec::with_capacity(subjects.len());
    for subject in subjects {
        // Stream imports bring other accounts' messages too, as
        // nats-server's stream subscriptions take imports.
        match js
            .bus
            .subscribe_imported(subject, Reach::Local, sink.clone())
        {
            Ok(s) => subs.push(s),
            Err(e) => {
                for s in subs {
                    js.bus.unsubscribe(&s);
                }
                return Err(e);
            }
        }
    }
    *handle.subs.lock() = subs;
    Ok(())
}

/// A fresh inbox for a stream's sources: `$JS.S.<random token>`.
pub fn source_inbox() -> String {
    const ALPHABET: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    let token: String = (0..12)
        .map(|_| ALPHABET[fastrand::usize(..ALPHABET.len())] as char)
        .collect();
    format!("$JS.S.{token}")
}

/// Subscribes `<inbox>.>` for a stream's sources; in a cluster, told to
/// routes (an origin may be led on another server).
pub fn subscribe_inbox(
    js: &JetStream,
    handle: &Arc<StreamHandle>,
    inbox: &str,
    clustered: bool,
) -> Result<Arc<Subscription>, subjects::SublistError> {
    let sink = Arc::new(InboxSink {
        handle: handle.clone(),
    });
    js.bus
        .subscribe(&format!("{inbox}.>"), reach(clustered), sink)
}

/// A push source's deliver subject to the stream's actor as inbox
/// traffic, routed on it; heard also from an account this one imports
/// it from (another account's origin delivers through a stream export).
pub fn subscribe_routed(
    js: &JetStream,
    handle: &Arc<StreamHandle>,
    subject: &str,
    clustered: bool,
) -> Result<Arc<Subscription>, subjects::SublistError> {
    let sink = Arc::new(InboxSink {
        handle: handle.clone(),
    });
    js.bus.subscribe_imported(subject, reach(clustered), sink)
}

/// Told to routes in a cluster (an origin may be led on another server).
fn reach(clustered: bool) -> Reach {
    match clustered {
        true => Reach::Cluster,
        false => Reach::Local,
    }
}
