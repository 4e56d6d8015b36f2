//! The internal subscriptions that feed JetStream: a stream's subjects,
//! the API, and the ack and flow-control subjects of every consumer.
//! Sinks run on the publisher's task, so they only copy and queue.

use std::sync::Arc;

use bytes::Bytes;
use jetstream::headers;
use jetstream::output::OutMsg;
use jetstream::stream::PubAck;

use super::{Cmd, Inbound, JetStream, StreamHandle};
use crate::client::delivery::{InternalSink, Message};

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
        self.handle.send(Cmd::Publish(Inbound::copy(msg)));
    }
}

/// `$JS.API.>`: everything goes to the dispatcher task.
struct ApiSink {
    tx: tokio::sync::mpsc::UnboundedSender<Inbound>,
}

impl InternalSink for ApiSink {
    fn deliver(&self, msg: Message<'_>) {
        let _ = self.tx.send(Inbound::copy(msg));
    }
}

/// `$JS.ACK.<stream>.<consumer>...` and `$JS.FC.<stream>.<consumer>...`:
/// routed to the stream named in the subject.
struct AckSink {
    js: Arc<JetStream>,
    flow_control: bool,
}

impl InternalSink for AckSink {
    fn deliver(&self, msg: Message<'_>) {
        let subject = String::from_utf8_lossy(msg.subject);
        let mut tokens = subject.split('.').skip(2);
        let (Some(stream), Some(consumer)) = (tokens.next(), tokens.next()) else {
            return;
        };
        let Some(handle) = self.js.stream(stream) else {
            // No consumer listens here: a requester hears no responders.
            if let Some(reply) = msg.reply.filter(|r| !r.is_empty()) {
                let reply = String::from_utf8_lossy(reply);
                self.js.bounce(status_msg(&reply, 503, ""));
            }
            return;
        };
        let consumer = consumer.to_string();
        if self.flow_control {
            handle.send(Cmd::FlowControl {
                consumer,
                subject: subject.into_owned(),
            });
        } else {
            handle.send(Cmd::Ack {
                consumer,
                msg: Inbound::copy(msg),
            });
        }
    }
}

pub fn subscribe_api(js: &Arc<JetStream>) -> Result<(), subjects::SublistError> {
    js.server.subscribe_internal(
        "$JS.API.>",
        None,
        Arc::new(ApiSink {
            tx: js.api_tx.clone(),
        }),
    )?;
    js.server.subscribe_internal(
        "$JS.ACK.>",
        None,
        Arc::new(AckSink {
            js: js.clone(),
            flow_control: false,
        }),
    )?;
    js.server.subscribe_internal(
        "$JS.FC.>",
        None,
        Arc::new(AckSink {
            js: js.clone(),
            flow_control: true,
        }),
    )?;
    Ok(())
}

/// Replaces a stream's subject subscriptions with ones for `subjects`.
pub fn subscribe_stream(
    js: &Arc<JetStream>,
    handle: &Arc<StreamHandle>,
    subjects: &[String],
) -> Result<(), subjects::SublistError> {
    let old = std::mem::take(&mut *handle.subs.lock());
    for s in old {
        js.server.unsubscribe(&s);
    }
    let sink = Arc::new(StreamSink {
        js: js.clone(),
        handle: handle.clone(),
    });
    let mut subs = Vec::with_capacity(subjects.len());
    for subject in subjects {
        match js.server.subscribe_internal(subject, None, sink.clone()) {
            Ok(s) => subs.push(s),
            Err(e) => {
                for s in subs {
                    js.server.unsubscribe(&s);
                }
                return Err(e);
            }
        }
    }
    *handle.subs.lock() = subs;
    Ok(())
}

/// Deliveries of a source's consumer on the origin, for this stream.
struct SourceSink {
    handle: Arc<StreamHandle>,
    key: String,
    generation: u64,
}

impl InternalSink for SourceSink {
    fn deliver(&self, msg: Message<'_>) {
        self.handle.send(Cmd::Sourced {
            key: self.key.clone(),
            generation: self.generation,
            msg: Inbound::copy(msg),
        });
    }
}

pub fn subscribe_source(
    js: &JetStream,
    handle: &Arc<StreamHandle>,
    key: &str,
    generation: u64,
    subject: &str,
) -> Result<Arc<crate::subscription::Subscription>, subjects::SublistError> {
    js.server.subscribe_internal(
        subject,
        None,
        Arc::new(SourceSink {
            handle: handle.clone(),
            key: key.to_string(),
            generation,
        }),
    )
}

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
