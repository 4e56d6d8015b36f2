//! Subscriptions a server holds only while it leads the meta group: the
//! meta leader's APIs (`api`, `account_api`) copy what arrives to their
//! task's channel, and drop the subscriptions with leadership.

use std::sync::Arc;

use flotilla_core::bus::{Bus, Message, Reach, Sink as InternalSink, Subscription};
use jsservice::request::Inbound;
use parking_lot::Mutex;
use tokio::sync::mpsc;

use crate::js::sinks::inbound;
use crate::js::JetStream;

/// Copies what an internal subscription receives to a task's channel;
/// with `audit`, notes each request for that JetStream's API audit.
pub struct Sink {
    pub tx: mpsc::UnboundedSender<Inbound>,
    pub audit: Option<Arc<JetStream>>,
}

impl InternalSink for Sink {
    fn deliver(&self, msg: Message<'_>) {
        let _ = self.tx.send(inbound(msg));
    }

    fn deliver_from(&self, msg: Message<'_>, publisher: u64) {
        if let Some(js) = &self.audit {
            js.note_request(&msg, publisher);
        }
        self.deliver(msg);
    }
}

/// Subscriptions held while this server leads the meta group, copying to
/// one task's channel. Returns whether they were just dropped.
pub fn follow(
    bus: &Bus,
    subs: &Mutex<Vec<Arc<Subscription>>>,
    subjects: &[&str],
    tx: &mpsc::UnboundedSender<Inbound>,
    leading: bool,
    audit: Option<&Arc<JetStream>>,
) -> bool {
    let mut subs = subs.lock();
    if leading && subs.is_empty() {
        for subject in subjects {
            let sink = Arc::new(Sink {
                tx: tx.clone(),
                audit: audit.cloned(),
            });
            if let Ok(s) = bus.subscribe(subject, Reach::Cluster, sink) {
                subs.push(s);
            }
        }
    } else if !leading && !subs.is_empty() {
        for s in subs.drain(..) {
            bus.unsubscribe(&s);
        }
        return true;
    }
    false
}
