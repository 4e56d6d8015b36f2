//! A replica's half of catching up from the leader's store, over the bus:
//! the replica core (`jsservice::replica`) decides what to ask and when;
//! this turns its asks into messages. A replica that installs a state
//! snapshot (or finds one at a restart that its store does not hold) asks
//! the leader for the messages, one chunk outstanding, on
//! `$JSC.CATCHUP.<group>`, with its replies to
//! `$JSC.CATCHUP.R.<group>.<peer>.<nonce>` (new for each fetch); the
//! leader answers from its store as of the snapshot's index.

use std::sync::Arc;

use jsservice::catchup::{Ask, CHUNK_BYTES};
use jsservice::request::Inbound;
use tracing::{error, info, warn};

use super::Actor;
use crate::js::sinks::inbound;
use crate::js::stream::{Cmd, StreamHandle};
use flotilla_core::bus::{Message, Reach, Sink as InternalSink, Subscription};

/// The subject a stream's leader takes fetches on.
pub fn ask_subject(group: u64) -> String {
    format!("$JSC.CATCHUP.{group:x}")
}

/// Where a fetch's replies come: a new subject per fetch, so a reply
/// to another fetch (or one made up without seeing the ask) never lands
/// in this one.
fn reply_subject(group: u64, me: u64) -> String {
    let nonce = fastrand::u64(..);
    format!("$JSC.CATCHUP.R.{group:x}.{me:x}.{nonce:x}")
}

/// The inbox of the fetch under way.
pub struct Inbox {
    sub: Option<Arc<Subscription>>,
    /// The subject `sub` listens on.
    reply_to: String,
}

/// Fetch asks and replies, to the actor.
pub struct FetchSink {
    pub handle: Arc<StreamHandle>,
}

impl InternalSink for FetchSink {
    fn deliver(&self, msg: Message<'_>) {
        self.handle.send(Cmd::Catchup(inbound(msg)));
    }
}

impl Actor {
    /// A fetch to `index` began: its replies get a new inbox.
    pub(super) fn fetch_begun(&mut self, index: u64) {
        self.fetch_ended();
        info!(
            "JetStream cluster stream {} fetching its messages up to index {index} from the leader",
            self.js.label(&self.handle.name)
        );
        let sink: Arc<dyn InternalSink> = Arc::new(FetchSink {
            handle: self.handle.clone(),
        });
        let reply_to = reply_subject(self.group, self.jc.me.id);
        let sub = match self.js.bus.subscribe(&reply_to, Reach::Cluster, sink) {
            Ok(s) => Some(s),
            Err(e) => {
                error!(
                    "Stream '{}': could not subscribe to {reply_to}: {e}",
                    self.handle.name
                );
                None
            }
        };
        self.inbox = Some(Inbox { sub, reply_to });
    }

    /// The fetch ended: its inbox goes.
    pub(super) fn fetch_ended(&mut self) {
        if let Some(sub) = self.inbox.take().and_then(|i| i.sub) {
            self.js.bus.unsubscribe(&sub);
        }
    }

    pub(super) fn send_ask(&mut self, ask: Ask) {
        let subject = ask_subject(self.group);
        let Some(reply) = self.inbox.as_ref().map(|i| i.reply_to.clone()) else {
            return;
        };
        self.publisher
            .publish(&subject, &subject, Some(&reply), None, &ask.encode());
    }

    /// A message on a fetch subject: an ask to serve (leading), or a reply
    /// to this replica's fetch.
    pub(super) fn fetch_message(&mut self, m: Inbound) {
        if m.subject == ask_subject(self.group) {
            return self.serve_fetch(m);
        }
        if self.inbox.as_ref().is_none_or(|i| i.reply_to != m.subject) {
            // For a fetch given up since.
            return;
        }
        self.core.handle_reply(&m.payload, self.clock());
        self.drain();
    }

    /// The leader's side: answers a fetch from its store as of the
    /// fetch's index, if it still keeps it; otherwise sends its own state
    /// to fetch instead.
    fn serve_fetch(&mut self, m: Inbound) {
        let Some(to) = m.reply.filter(|r| !r.is_empty()) else {
            return;
        };
        let Ok(ask) = Ask::decode(&m.payload) else {
            warn!("Stream '{}': a fetch ask does not decode", self.handle.name);
            return;
        };
        let reply = match self.serving {
            None => jsservice::catchup::Reply::Later,
            Some(_) => self.core.answer(ask, self.clock(), CHUNK_BYTES),
        };
        self.publisher
            .publish(&to, &to, None, None, &reply.encode());
        self.drain();
    }
}
