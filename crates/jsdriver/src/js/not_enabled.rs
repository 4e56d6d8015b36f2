//! Accounts without JetStream, on a server with it. nats-server gives
//! every such account its JetStream API imports, so a request there is
//! answered "JetStream not enabled for account" (10039) in the request's
//! response kind, not with "no responders"; what is answered with
//! messages (a pull, a direct get) still finds no one. What is answered
//! is decided in `jsservice::request::not_enabled`; this moves it.
//!
//! Every account but those JetStream serves gets the subscriptions, the
//! ones made later too (`Accounts::on_new`). A request that one of the
//! account's own service imports serves (JetStream imported from another
//! account) is left to the import, as nats-server does not shadow it.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use jsservice::reply::Answer;
use jsservice::request::{not_enabled, not_enabled_subjects, Mode};
use parking_lot::Mutex;
use tokio::sync::mpsc;
use tracing::warn;

use super::sinks::inbound;
use crate::js::stream::PublishOut;
use flotilla_core::account::SYSTEM_ACCOUNT;
use flotilla_core::bus::{Bus, Message, Reach, Sink};
use flotilla_core::client::Account;
use flotilla_core::server::Server;

/// The answers of one account, queued for the publishing task.
type Queued = (String, Answer);

/// Starts answering in every account JetStream does not serve. Called
/// once JetStream serves its own accounts, on a runtime.
pub fn start(server: &Arc<Server>, mode: Mode) {
    let (tx, rx) = mpsc::unbounded_channel();
    let responder = Arc::new(Responder {
        server: Arc::downgrade(server),
        mode,
        tx,
        answered: Mutex::new(BTreeSet::new()),
    });
    tokio::spawn(publish(server.clone(), rx));
    let hook = responder.clone();
    if !server
        .accounts
        .on_new(Box::new(move |account| hook.answer_in(account)))
    {
        warn!("accounts made later get no JetStream \"not enabled\" answers");
    }
    for account in server.accounts.all() {
        responder.answer_in(&account);
    }
}

struct Responder {
    /// Weak: the server's accounts hold this through their hook.
    server: std::sync::Weak<Server>,
    mode: Mode,
    tx: mpsc::UnboundedSender<Queued>,
    /// Accounts subscribed, so each is once.
    answered: Mutex<BTreeSet<String>>,
}

impl Responder {
    fn answer_in(&self, account: &Arc<Account>) {
        let Some(server) = self.server.upgrade() else {
            return;
        };
        if server.js_enabled_for(&account.name) || account.name == SYSTEM_ACCOUNT {
            return;
        }
        if !self.answered.lock().insert(account.name.clone()) {
            return;
        }
        let bus = Bus::new(server, account.clone());
        let sink = Arc::new(NotEnabledSink {
            account: account.clone(),
            mode: self.mode,
            tx: self.tx.clone(),
        });
        for subject in not_enabled_subjects() {
            if let Err(e) = bus.subscribe(&subject, Reach::Local, sink.clone()) {
                warn!(
                    "Account {}: could not subscribe to {subject}: {e}",
                    account.name
                );
            }
        }
    }
}

/// One account's requests: answered unless an import serves them.
struct NotEnabledSink {
    account: Arc<Account>,
    mode: Mode,
    tx: mpsc::UnboundedSender<Queued>,
}

impl Sink for NotEnabledSink {
    fn deliver(&self, msg: Message<'_>) {
        if self
            .account
            .imports()
            .services(msg.subject)
            .next()
            .is_some()
        {
            return;
        }
        if let Some(answer) = not_enabled(&inbound(msg), self.mode) {
            let _ = self.tx.send((self.account.name.clone(), answer));
        }
    }
}

/// Publishes the answers, each in its own account.
async fn publish(server: Arc<Server>, mut rx: mpsc::UnboundedReceiver<Queued>) {
    let mut publishers = HashMap::new();
    while let Some((account, answer)) = rx.recv().await {
        let publisher = publishers
            .entry(account)
            .or_insert_with_key(|name| Bus::named(server.clone(), name).publisher());
        publisher.publish_out(&answer.msg);
        publisher.flush();
    }
}
