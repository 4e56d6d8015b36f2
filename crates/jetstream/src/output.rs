//! What the state machines ask the driver to do.

use bytes::Bytes;

/// A message to publish on the bus: a delivery, a status message, a
/// republish, a flow-control request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutMsg {
    /// The subject the receiver sees.
    pub subject: String,
    /// Where to route it, when not `subject`: a consumer delivers a message
    /// under its original subject to the deliver subject or pull inbox.
    pub route: Option<String>,
    pub reply: Option<String>,
    pub headers: Option<Bytes>,
    pub payload: Bytes,
}

impl OutMsg {
    pub fn status(to: &str, reply: Option<String>, headers: Bytes) -> Self {
        OutMsg {
            subject: to.to_string(),
            route: None,
            reply,
            headers: Some(headers),
            payload: Bytes::new(),
        }
    }

    /// The subject subscribers are matched against.
    pub fn route_subject(&self) -> &str {
        self.route.as_deref().unwrap_or(&self.subject)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    Publish(OutMsg),
    /// A consumer deleted itself (inactivity): stop routing to it.
    ConsumerDeleted(String),
    /// An advisory or metric (`$JS.EVENT.>`), sent by the leader.
    Event(jsapi::advisory::Event),
}
