//! A replica's half of catching up from the leader's store: the driver of
//! `jsservice::fetch` over the bus. A replica that installs a state
//! snapshot (or finds one at a restart that its store does not hold)
//! asks the leader for the messages, one chunk outstanding, on
//! `$JSC.CATCHUP.<group>`, with its replies to
//! `$JSC.CATCHUP.R.<group>.<peer>.<nonce>` (new for each fetch); the
//! leader answers from its store as of the snapshot's index. The node is held back from leading meanwhile
//! (`Engine::hold`), and committed entries wait until the store is
//! caught up.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use jsservice::catchup::{Ask, CatchupError, Reply, CHUNK_BYTES};
use jsservice::fetch::{self, Fetch, Progress};
use jsservice::request::Inbound;
use jsservice::stream_sm::StreamMachine;
use store::MsgStore;
use tracing::{error, info, warn};

use super::Actor;
use crate::bus::{Message, Reach, Sink as InternalSink, Subscription};
use crate::js::sinks::inbound;
use crate::js::stream::{Cmd, StreamHandle};
use crate::js::{wall_clock, JetStream};

/// An ask with no reply in this long goes out again (a lost message, or a
/// leader that changed).
const ASK_AGAIN_AFTER: Duration = Duration::from_secs(2);
/// A leader that answered "later" is asked again after this long.
const WAIT: Duration = Duration::from_millis(100);
/// After a failed fetch, the next one starts this much later.
const RETRY_AFTER: Duration = Duration::from_secs(1);

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

/// A fetch under way.
pub struct Fetching {
    fetch: Fetch,
    /// Entries committed after the snapshot, waiting in log order:
    /// (index, data, whether this server led then).
    pub waiting: Vec<(u64, Bytes, bool)>,
    inbox: Option<Arc<Subscription>>,
    /// The subject `inbox` listens on.
    reply_to: String,
    /// When to send the outstanding ask (again).
    ask_at: Option<Instant>,
    started: Instant,
}

impl Fetching {
    /// Ends the fetch (a newer snapshot, or the replica stops): its
    /// subscription goes; the store, as fetched so far, comes back.
    pub fn close(self, js: &JetStream) -> Option<Box<dyn MsgStore>> {
        if let Some(sub) = &self.inbox {
            js.bus.unsubscribe(sub);
        }
        self.fetch.into_store()
    }
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
    /// Starts fetching what `state` (a state snapshot as of `index`) holds
    /// into `store`; the machine stays a placeholder until then.
    pub(super) fn begin_fetch(&mut self, index: u64, state: Bytes, store: Box<dyn MsgStore>) {
        debug_assert!(self.fetching.is_none(), "one fetch at a time");
        let fetch = match Fetch::new(index, state.to_vec(), store) {
            Ok(f) => f,
            Err(e) => return self.halt(&format!("its snapshot at {index} does not decode ({e})")),
        };
        info!(
            "JetStream cluster stream '$G > {}' fetching its messages up to index {index} from the leader",
            self.handle.name
        );
        let sink: Arc<dyn InternalSink> = Arc::new(FetchSink {
            handle: self.handle.clone(),
        });
        let subject = reply_subject(self.group, self.jc.me.id);
        let inbox = match self.js.bus.subscribe(&subject, Reach::Cluster, sink) {
            Ok(s) => Some(s),
            Err(e) => {
                error!(
                    "Stream '{}': could not subscribe to {subject}: {e}",
                    self.handle.name
                );
                None
            }
        };
        self.fetching = Some(Fetching {
            fetch,
            waiting: Vec::new(),
            inbox,
            reply_to: subject,
            ask_at: None,
            started: Instant::now(),
        });
        self.restart_fetch();
    }

    /// Runs the fetch from its first step (again, after a failure).
    fn restart_fetch(&mut self) {
        let Some(f) = &mut self.fetching else { return };
        let progress = f.fetch.begin();
        self.fetch_progress(progress);
    }

    /// A message on a fetch subject: an ask to serve (leading), or a reply
    /// to this replica's fetch.
    pub(super) fn fetch_message(&mut self, m: Inbound) {
        if self.stopped {
            return;
        }
        if m.subject == ask_subject(self.group) {
            return self.serve_fetch(m);
        }
        let Some(f) = &mut self.fetching else { return };
        if m.subject != f.reply_to {
            // For a fetch given up since.
            return;
        }
        let progress = match Reply::decode(&m.payload) {
            Ok(reply) => f.fetch.reply(reply),
            Err(e) => {
                // Damaged on the way: asked again at once.
                warn!(
                    "Stream '{}': a fetch reply does not decode ({e}); asking again",
                    self.handle.name
                );
                self.ask_at(Instant::now());
                return self.fetch_tick();
            }
        };
        match progress {
            Ok(None) => {}
            Ok(Some(p)) => self.fetch_progress(Ok(p)),
            Err(e) => self.fetch_progress(Err(e)),
        }
    }

    fn fetch_progress(&mut self, progress: Result<Progress, CatchupError>) {
        if self.fetching.is_none() {
            return;
        }
        match progress {
            Ok(Progress::Ask(ask)) => self.send_ask(ask),
            Ok(Progress::Wait(_)) => self.ask_at(Instant::now() + WAIT),
            Ok(Progress::Caught(machine)) => self.fetched(*machine),
            Err(CatchupError::Diverged(why)) => {
                warn!(
                    "Stream '{}': its store is not a prefix of the snapshot ({why}); emptied and fetched whole",
                    self.handle.name
                );
                match self.empty_store() {
                    Ok(store) => {
                        if let Some(f) = &mut self.fetching {
                            f.fetch.replace_store(store);
                        }
                        self.restart_fetch();
                    }
                    Err(e) => self.halt(&format!("its store could not be emptied ({e})")),
                }
            }
            Err(e) => {
                warn!(
                    "Stream '{}': fetch from the leader failed ({e}); starting again",
                    self.handle.name
                );
                let has_store = self.fetching.as_ref().is_some_and(|f| f.fetch.has_store());
                match has_store {
                    true => self.ask_at(Instant::now() + RETRY_AFTER),
                    false => self.halt(&format!("its store was lost in a fetch ({e})")),
                }
            }
        }
    }

    /// When the fetch's next step is due (its ask sent again, or a failed
    /// fetch started again).
    fn ask_at(&mut self, at: Instant) {
        if let Some(f) = &mut self.fetching {
            f.ask_at = Some(at);
        }
    }

    /// Called on the follow period while fetching: sends the outstanding
    /// ask again if its reply is overdue, or starts a failed fetch again.
    /// A replica that still leads (its step-down found no member to take
    /// over) asks again to step down: it cannot fetch from itself.
    pub(super) fn fetch_tick(&mut self) {
        let Some(f) = &self.fetching else { return };
        if f.ask_at.is_none_or(|at| Instant::now() < at) {
            return;
        }
        if self.leading {
            let _ = self.jc.step_down(self.group, None);
        }
        match f.fetch.asked() {
            Some(ask) => self.send_ask(ask),
            None => self.restart_fetch(),
        }
    }

    fn send_ask(&mut self, ask: Ask) {
        self.ask_at(Instant::now() + ASK_AGAIN_AFTER);
        let subject = ask_subject(self.group);
        let Some(reply) = self.fetching.as_ref().map(|f| f.reply_to.clone()) else {
            return;
        };
        self.publisher
            .publish(&subject, &subject, Some(&reply), None, &ask.encode());
    }

    /// The store holds the snapshot's messages: the machine over it
    /// replaces the placeholder, the waiting entries are applied, and the
    /// node may lead again.
    fn fetched(&mut self, machine: StreamMachine) {
        let mut f = self.fetching.take().expect("fetching");
        if let Some(sub) = f.inbox.take() {
            self.js.bus.unsubscribe(&sub);
        }
        info!(
            "JetStream cluster stream '$G > {}' caught up to index {} from the leader: {} messages fetched in {:.1?}",
            self.handle.name,
            f.fetch.index(),
            f.fetch.fetched,
            f.started.elapsed()
        );
        self.retention = jsservice::fetch::Retention::opened_at(0);
        self.retention.marked(f.fetch.index());
        self.machine = machine;
        let grew = self.handle.record(self.machine.stream_mut());
        self.js.add_usage(self.handle.storage, grew);
        for (index, data, leader) in std::mem::take(&mut f.waiting) {
            self.apply(index, &data, leader);
        }
        let group = self.group;
        let _ = self.jc.node.call(move |e| e.hold(group, false));
        if std::mem::take(&mut self.repairing) {
            self.repaired();
        }
    }

    /// An empty store in place of the one a fetch found diverged.
    pub(super) fn empty_store(&self) -> Result<Box<dyn MsgStore>, String> {
        match &self.file {
            Some(file) => file.open_at(0).map_err(|e| e.to_string()),
            None => Ok(jsservice::stream_sm::replica_store(
                &self.machine.stream().config,
            )),
        }
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
        let reply = if self.serving.is_none() || self.fetching.is_some() {
            Reply::Later
        } else {
            let (machine, now) = (&self.machine, wall_clock());
            fetch::answer(machine, &mut self.retention, ask, now, CHUNK_BYTES).unwrap_or_else(|e| {
                warn!("Stream '{}': serving a fetch: {e}", self.handle.name);
                Reply::Later
            })
        };
        self.publisher
            .publish(&to, &to, None, None, &reply.encode());
    }
}
