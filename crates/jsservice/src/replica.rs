//! One server's replica of a replicated stream, as far as its storage
//! goes, sans IO: applying committed entries, snapshots for compaction,
//! installing a leader's snapshot, fetching the messages a state snapshot
//! names from the leader's store ([`crate::fetch`]), and repairing a store
//! a read found damaged. The cluster driver (`jsdriver::jscluster::replica`)
//! and the simulator both run this; each turns its events into IO.
//!
//! # The driver contract
//!
//! Every `handle_*` method may queue [`Event`]s; the driver drains them
//! with [`Replica::poll_event`] after each call, in order, before it
//! calls anything else. Time comes in as a [`Clock`], the driver's.
//!
//! - [`Replica::handle_committed`]: every entry the Raft node hands out,
//!   in log order, with whether this server led the group then.
//! - [`Replica::handle_snapshot`]: a leader's snapshot the node installed.
//! - [`Replica::handle_take_snapshot`]: the node asks for a snapshot to
//!   compact its log behind. [`Event::Snapshot`] answers it (maybe later:
//!   a replica that is fetching owes it until its next applied entry).
//! - [`Replica::handle_reply`]: a reply to this replica's fetch.
//! - [`Replica::handle_timeout`]: once [`Replica::poll_timeout`] is due.
//! - [`Replica::damage`], after every call that read the store: `Some`
//!   means the driver holds the node from leading, reads the log after its
//!   snapshot, and calls [`Replica::repair`] with it.
//! - [`Replica::answer`]: the leader's side of another replica's fetch.
//!
//! Once [`Event::Halted`] is out, the replica takes nothing more.

use std::collections::VecDeque;

use bytes::Bytes;
use jetstream::api::{Storage, StreamConfig};
use store::{MsgStore, SyncHandle};

use crate::catchup::{Ask, CatchupError, Reply};
use crate::fetch::{self, Fetch, Progress, Retention};
use crate::stream_sm::{replica_store, Applied, StreamMachine};

/// What a replica starts with: its machine, the mark its store was opened
/// at, and a fetch to begin first (index, state, store). For a fetch the
/// machine is a placeholder until it is done.
pub type Start = (StreamMachine, u64, Option<(u64, Bytes, Box<dyn MsgStore>)>);

/// Where a replica's store lives, and how it is opened: the driver's
/// files, or the simulator's memory directories.
pub trait Home: Send {
    /// The store is a file store (marked at snapshots, synced before the
    /// log is compacted); a memory store's snapshot carries its messages.
    fn is_file(&self) -> bool;

    /// An empty store for a stream under `config`.
    fn empty(&self, config: &StreamConfig) -> Result<Box<dyn MsgStore>, String>;

    /// The replica as a restart opens it, from the log's snapshot
    /// `stored` (none: new, under the stream's first config). `config`
    /// and `created` are the stream's as this replica last had them.
    fn reopen(
        &self,
        config: StreamConfig,
        created: i64,
        stored: Option<(u64, Bytes)>,
    ) -> Result<Start, String>;

    /// A snapshot that carries its messages, restored into an emptied
    /// store (a file store marked at `index`).
    fn restore_whole(&self, index: u64, data: &[u8]) -> Result<StreamMachine, String>;
}

/// The driver's two clocks at a call.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    /// Monotonic milliseconds: when asks are due.
    pub now: u64,
    /// Unix nanoseconds: what snapshots and stores record.
    pub wall: i64,
}

/// How long the fetch waits, in milliseconds of [`Clock::now`].
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// An ask with no reply in this long goes out again.
    pub ask_again: u64,
    /// A leader that answered "later" is asked again after this long.
    pub wait: u64,
    /// After a failed fetch, the next one starts this much later.
    pub retry: u64,
}

/// The log after its snapshot, as the driver read it for a repair.
pub struct LogTail {
    /// The log's snapshot, if it has one with data.
    pub snapshot: Option<(u64, Bytes)>,
    /// The last index the log holds.
    pub reaches: u64,
    /// Its entries after the snapshot, in order.
    pub entries: Vec<(u64, Bytes)>,
}

/// What the driver does next.
pub enum Event {
    /// The entry at `index` (`entry`) was applied; answer it if
    /// `leader` (this server led the group when it was handed out).
    Applied {
        index: u64,
        leader: bool,
        entry: Bytes,
        applied: Box<Applied>,
    },
    /// Run `sync`, then tell the node its snapshot at `index` is `data`.
    /// A sync that fails leaves the log as it was.
    Snapshot {
        index: u64,
        data: Vec<u8>,
        sync: Option<SyncHandle>,
    },
    /// A fetch to `index` began: replies come to a new inbox.
    FetchBegun { index: u64 },
    /// Send this to the group's leader, replies to the fetch's inbox.
    Ask(Ask),
    /// The fetch ended; its inbox goes.
    FetchEnded,
    /// The fetch to `index` is done: `messages` fetched in `took`. Run
    /// `sync` (off the driver's loop): until it has run, a restart finds
    /// the store short of the log's snapshot and fetches again, and if
    /// every replica did so at once none could answer the others.
    Fetched {
        index: u64,
        messages: u64,
        took: u64,
        sync: Option<SyncHandle>,
    },
    /// Hold the node from leading (`true`), or let it lead again.
    Hold(bool),
    /// This replica cannot serve: stop serving, and hand the group's
    /// leadership on if this server leads it.
    StepDown,
    /// A leader's snapshot that carries its messages was restored.
    Restored { index: u64 },
    /// A repair is done.
    Repaired,
    /// Worth a line in the log.
    Note(String),
    /// A whole fetch did not match the snapshot it was for: the peer
    /// served a state other than the one it was asked for. Never
    /// expected (a peer serves only states it still holds, `Retention`);
    /// the fetch is tried again after `Timing::retry`.
    Diverged(String),
    /// This replica can go on no more: it stops applying and serving;
    /// the node's group is removed (its log and store stay for a restart).
    Halted(String),
}

/// A fetch under way.
struct Fetching {
    fetch: Fetch,
    /// The index the fetch began at: the log's snapshot. A leader that
    /// no longer keeps that state retargets the fetch to a later one.
    began_at: u64,
    /// Entries committed after the snapshot, waiting in log order:
    /// (index, data, whether this server led then).
    waiting: Vec<(u64, Bytes, bool)>,
    /// When to send the outstanding ask (again), or start over.
    ask_at: Option<u64>,
    started: u64,
    /// The store was emptied for a fetch that diverged: another
    /// divergence means the peer no longer holds what the snapshot says,
    /// and the next try waits.
    emptied: bool,
}

pub struct Replica {
    machine: StreamMachine,
    home: Box<dyn Home>,
    /// How far the store may forget what it removed.
    retention: Retention,
    fetching: Option<Fetching>,
    /// A snapshot was asked for while fetching: taken after the next
    /// entry applied.
    snapshot_owed: bool,
    /// The fetch under way repairs a damaged store.
    repairing: bool,
    stopped: bool,
    timing: Timing,
    events: VecDeque<Event>,
}

impl Replica {
    /// A replica as `home` opened it (`start`), at `now`.
    pub fn new(start: Start, home: Box<dyn Home>, timing: Timing, t: Clock) -> Replica {
        let (machine, mark, fetch) = start;
        let mut replica = Replica {
            machine,
            home,
            retention: Retention::opened_at(mark),
            fetching: None,
            snapshot_owed: false,
            repairing: false,
            stopped: false,
            timing,
            events: VecDeque::new(),
        };
        if let Some((index, state, store)) = fetch {
            replica.begin_fetch(index, state, store, t);
        }
        replica
    }

    /// The next thing for the driver to do.
    /// The driver contract: a call's events are drained before the next
    /// call, so none is acted on out of order or lost.
    fn assert_drained(&self) {
        assert!(
            self.events.is_empty(),
            "the driver drains the last call's events first ({} left)",
            self.events.len()
        );
    }

    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// When [`Replica::handle_timeout`] is next due.
    pub fn poll_timeout(&self) -> Option<u64> {
        self.fetching.as_ref().and_then(|f| f.ask_at)
    }

    /// The stream machine: a placeholder while fetching.
    pub fn machine(&self) -> &StreamMachine {
        &self.machine
    }

    pub fn machine_mut(&mut self) -> &mut StreamMachine {
        &mut self.machine
    }

    /// The machine, unless the replica is fetching or stopped.
    pub fn current(&self) -> Option<&StreamMachine> {
        (self.fetching.is_none() && !self.stopped).then_some(&self.machine)
    }

    pub fn home(&self) -> &dyn Home {
        self.home.as_ref()
    }

    pub fn is_fetching(&self) -> bool {
        self.fetching.is_some()
    }

    pub fn is_stopped(&self) -> bool {
        self.stopped
    }

    /// The entry at `index` committed.
    pub fn handle_committed(&mut self, index: u64, data: Bytes, leader: bool, t: Clock) {
        self.assert_drained();
        self.committed(index, data, leader, t);
    }

    fn committed(&mut self, index: u64, data: Bytes, leader: bool, t: Clock) {
        match &mut self.fetching {
            Some(f) => f.waiting.push((index, data, leader)),
            None => self.apply(index, data, leader, t),
        }
    }

    fn apply(&mut self, index: u64, entry: Bytes, leader: bool, t: Clock) {
        debug_assert!(
            self.fetching.is_none(),
            "a fetching replica applies nothing"
        );
        if self.stopped || index <= self.machine.applied() {
            // Already in the state (a fetch brought it past this entry).
            return;
        }
        self.machine.stream_mut().store_mut().applying(index);
        let applied = self.machine.apply(index, &entry);
        debug_assert_eq!(self.machine.applied(), index, "applied in log order");
        // A state a damaged store produced (a read failed while applying)
        // may differ from the other replicas': it answers nobody. So does
        // one whose store failed a write (a full disk), memory ahead of
        // storage. Either is repaired ([`Replica::damage`]): the repair
        // applies the entry again, unanswered; a client's retry meets the
        // repaired state.
        let leader = leader && !self.store_unsound();
        self.events.push_back(Event::Applied {
            index,
            leader,
            entry,
            applied: Box::new(applied),
        });
        if self.snapshot_owed {
            self.take_snapshot(index, 0, t);
        }
    }

    /// The node asks for a snapshot as of `index` (the log's own is at
    /// `stored`); not while fetching, nor while the store has damage a
    /// read found: owed until the next entry applied after that. A file
    /// store is marked there and synced before the node
    /// hears ([`Event::Snapshot`]), so the log is compacted only behind a
    /// durable store; and what the store kept for a restart at `stored`
    /// may go. A memory store's snapshot carries its messages.
    pub fn handle_take_snapshot(&mut self, index: u64, stored: u64, t: Clock) {
        self.assert_drained();
        self.take_snapshot(index, stored, t);
    }

    fn take_snapshot(&mut self, index: u64, stored: u64, t: Clock) {
        if self.stopped {
            return;
        }
        // Nor of a state a damaged store produced (a read failed while it
        // was applied): a repair opens the store again at the log's
        // snapshot, which must predate the damage. Owed until then.
        if self.fetching.is_some() || self.store_unsound() {
            self.snapshot_owed = true;
            return;
        }
        self.snapshot_owed = false;
        // Every entry up to `index` came before this; a fetch may have
        // brought the state past it.
        let at = index.max(self.machine.applied());
        if !self.home.is_file() {
            let data = self.machine.snapshot(t.wall);
            self.events.push_back(Event::Snapshot {
                index: at,
                data,
                sync: None,
            });
            return;
        }
        let store = self.machine.stream_mut().store_mut();
        if at > self.retention.last_mark() {
            if let Err(e) = store.mark(at) {
                return self.halt(format!("its store could not be marked ({e})"));
            }
            self.retention.marked(at);
        }
        // The log is compacted only behind a store marked at the
        // snapshot's index (and synced: the event's handle).
        debug_assert!(self.retention.last_mark() >= at, "marked at the snapshot");
        let data = self.machine.snapshot_state(t.wall);
        let sync = self.machine.stream_mut().store_mut().sync_handle();
        self.events.push_back(Event::Snapshot {
            index: at,
            data,
            sync,
        });
        if let Some(to) = self.retention.release(stored, t.wall) {
            if let Err(e) = self.machine.stream_mut().store_mut().release(to) {
                self.halt(format!("its store could not release ({e})"));
            }
        }
    }

    /// A leader's snapshot replaced the log: the state becomes its. A
    /// state snapshot's messages are fetched from the leader's store into
    /// this replica's (what it has is kept where it fits); one that
    /// carries them goes into an emptied store.
    pub fn handle_snapshot(&mut self, index: u64, data: Bytes, t: Clock) {
        self.assert_drained();
        if self.stopped {
            return;
        }
        if StreamMachine::is_state_snapshot(&data) {
            let store = match self.end_fetch() {
                // A newer snapshot while fetching: what was fetched stays.
                Some(f) => f.fetch.into_store(),
                None => self.take_store(),
            };
            let store = match store {
                Some(store) => Ok(store),
                None => self.home.empty(&self.machine.stream().config),
            };
            match store {
                Ok(store) => self.begin_fetch(index, data, store, t),
                Err(e) => self.halt(format!("its store could not be opened ({e})")),
            }
            return;
        }
        match self.home.restore_whole(index, &data) {
            Ok(machine) => {
                self.machine = machine;
                if self.home.is_file() {
                    // Filled as of `index`: it never held what was
                    // removed before, so it serves no older state.
                    self.retention = Retention::opened_at(index);
                }
                self.events.push_back(Event::Restored { index });
            }
            // Going on from the old state would diverge from the other
            // replicas.
            Err(e) => self.halt(format!("installing the leader's snapshot: {e}")),
        }
    }

    /// The leader's side of another replica's fetch: from the store as of
    /// the fetch's index if it still keeps it, or this replica's own state
    /// to fetch instead; "later" while this one fetches or its store fails
    /// a read.
    pub fn answer(&mut self, ask: Ask, t: Clock, limit: u64) -> Reply {
        if self.fetching.is_some() || self.stopped {
            return Reply::Later;
        }
        fetch::answer(&self.machine, &mut self.retention, ask, t.wall, limit).unwrap_or_else(|e| {
            self.events
                .push_back(Event::Note(format!("serving a fetch: {e}")));
            Reply::Later
        })
    }

    /// A reply to this replica's fetch. One that does not decode (damaged
    /// on the way) has the ask sent again at once.
    pub fn handle_reply(&mut self, bytes: &[u8], t: Clock) {
        self.assert_drained();
        if self.stopped {
            return;
        }
        let Some(f) = &mut self.fetching else { return };
        let progress = match Reply::decode(bytes) {
            Ok(reply) => f.fetch.reply(reply),
            Err(e) => {
                self.events.push_back(Event::Note(format!(
                    "a fetch reply does not decode ({e}); asking again"
                )));
                f.ask_at = Some(t.now);
                return self.timeout(t);
            }
        };
        match progress {
            Ok(None) => {}
            Ok(Some(p)) => self.fetch_progress(Ok(p), t),
            Err(e) => self.fetch_progress(Err(e), t),
        }
    }

    /// Sends the outstanding ask again if its reply is overdue, or starts
    /// a failed fetch again; asks the driver each time to step down if
    /// its server still leads the group (it cannot fetch from itself).
    pub fn handle_timeout(&mut self, t: Clock) {
        self.assert_drained();
        self.timeout(t);
    }

    fn timeout(&mut self, t: Clock) {
        let Some(f) = &self.fetching else { return };
        if f.ask_at.is_none_or(|at| t.now < at) {
            return;
        }
        self.events.push_back(Event::StepDown);
        match f.fetch.asked() {
            Some(ask) => self.send_ask(ask, t),
            None => self.restart_fetch(t),
        }
    }

    /// What a read found damaged in the store, if a repair is due: not
    /// while fetching (a fetch's store is checked whole when it is done).
    /// A store that failed a write (a full disk) counts too: memory is
    /// ahead of storage, so it is opened again and the log applied over
    /// it, as a restart would; while writes still fail, the repair meets
    /// the failure again and is tried again later.
    pub fn damage(&self) -> Option<String> {
        if self.stopped || self.fetching.is_some() {
            return None;
        }
        let store = self.machine.stream().store();
        store
            .damage()
            .or_else(|| store.failed().map(|e| format!("a write failed: {e}")))
    }

    /// Whether the store's state may differ from the other replicas': a
    /// read found damage, or a write failed.
    fn store_unsound(&self) -> bool {
        let store = self.machine.stream().store();
        store.damage().is_some() || store.failed().is_some()
    }

    /// Repairs a store a read found damaged, as a restart would: the
    /// store opened again at the log's snapshot, what that lacks fetched
    /// from the leader, and the log's entries since applied again over it,
    /// unanswered. `log` is what the driver read after holding the node
    /// from leading (`None`: the log no longer holds the entry after its
    /// snapshot). The state the damaged store produced is dropped whole.
    ///
    /// A log that does not yet reach what the replica applied (its own
    /// sync of committed entries is under way, or a fetch brought the
    /// state past it) waits: the node may lead again, and the driver
    /// calls this again while [`Replica::damage`] says so.
    pub fn repair(&mut self, log: Option<LogTail>, t: Clock) {
        self.assert_drained();
        let applied = self.machine.applied();
        let Some(log) = log else {
            return self
                .halt("its store is damaged and its log no longer holds what it applied".into());
        };
        if log.reaches < applied {
            self.events.push_back(Event::Hold(false));
            return;
        }
        self.events.push_back(Event::StepDown);
        if let Err(e) = self.reopen(log.snapshot, t) {
            return self.halt(format!("its damaged store could not be opened again ({e})"));
        }
        for (index, data) in log.entries.into_iter().filter(|(i, _)| *i <= applied) {
            // Answered when they were first applied.
            self.committed(index, data, false, t);
        }
        if self.stopped {
            return;
        }
        if self.store_unsound() {
            // Its store failed again on the way (still no space): tried
            // again after the next command.
            self.events.push_back(Event::Hold(false));
            return;
        }
        match self.fetching.is_some() {
            // Counted repaired once fetched.
            true => self.repairing = true,
            false => {
                debug_assert!(
                    self.machine.applied() >= applied,
                    "a repaired replica is where it was"
                );
                // Nothing was lost since the log's snapshot: done already.
                self.events.push_back(Event::Hold(false));
                self.events.push_back(Event::Repaired);
            }
        }
    }

    /// The stream is gone from this server: a fetch under way ends. The
    /// driver removes the store.
    pub fn stop(&mut self) {
        self.end_fetch();
        self.stopped = true;
    }

    /// Drops the store and opens it again as a restart does, at the log's
    /// snapshot `stored`; a store that lacks the snapshot's messages
    /// starts a fetch.
    fn reopen(&mut self, stored: Option<(u64, Bytes)>, t: Clock) -> Result<(), String> {
        let config = self.machine.stream().config.clone();
        let created = self.machine.stream().created;
        // Another store must not open the directory while this one holds
        // it.
        drop(self.take_store());
        let (machine, mark, fetch) = self.home.reopen(config, created, stored)?;
        self.machine = machine;
        self.retention = Retention::opened_at(mark);
        if let Some((index, state, store)) = fetch {
            self.begin_fetch(index, state, store, t);
        }
        Ok(())
    }

    /// The store, taken from the machine (a placeholder over an empty
    /// memory store is left).
    fn take_store(&mut self) -> Option<Box<dyn MsgStore>> {
        let stream = self.machine.stream();
        let (config, created) = (stream.config.clone(), stream.created);
        let empty = placeholder(config, created)?;
        Some(std::mem::replace(&mut self.machine, empty).into_store())
    }

    /// Starts fetching what `state` (a state snapshot as of `index`) holds
    /// into `store`; the node is held from leading meanwhile.
    fn begin_fetch(&mut self, index: u64, state: Bytes, store: Box<dyn MsgStore>, t: Clock) {
        debug_assert!(self.fetching.is_none(), "one fetch at a time");
        let fetch = match Fetch::new(index, state.to_vec(), store) {
            Ok(f) => f,
            Err(e) => return self.halt(format!("its snapshot at {index} does not decode ({e})")),
        };
        self.events.push_back(Event::Hold(true));
        self.events.push_back(Event::FetchBegun { index });
        self.fetching = Some(Fetching {
            fetch,
            began_at: index,
            waiting: Vec::new(),
            ask_at: None,
            started: t.now,
            emptied: false,
        });
        self.restart_fetch(t);
    }

    fn end_fetch(&mut self) -> Option<Fetching> {
        let f = self.fetching.take()?;
        self.events.push_back(Event::FetchEnded);
        Some(f)
    }

    /// Runs the fetch from its first step (again, after a failure).
    fn restart_fetch(&mut self, t: Clock) {
        let Some(f) = &mut self.fetching else { return };
        let progress = f.fetch.begin();
        self.fetch_progress(progress, t);
    }

    fn fetch_progress(&mut self, progress: Result<Progress, CatchupError>, t: Clock) {
        let Some(f) = &mut self.fetching else { return };
        match progress {
            Ok(Progress::Ask(ask)) => self.send_ask(ask, t),
            Ok(Progress::Wait(_)) => f.ask_at = Some(t.now + self.timing.wait),
            Ok(Progress::Caught(machine)) => self.fetched(*machine, t),
            Err(CatchupError::Diverged(why)) => {
                let again = std::mem::replace(&mut f.emptied, true);
                let event = match again {
                    false => Event::Note(format!(
                        "its store is not a prefix of the snapshot ({why}); emptied and fetched whole"
                    )),
                    // The peer answered with what it holds now, short of
                    // what the snapshot says: at once, it would again.
                    true => Event::Diverged(format!(
                        "a whole fetch does not match the snapshot ({why}); trying again in {} ms",
                        self.timing.retry
                    )),
                };
                self.events.push_back(event);
                match self.home.empty(&self.machine.stream().config) {
                    Ok(store) => {
                        f.fetch.replace_store(store);
                        match again {
                            false => self.restart_fetch(t),
                            true => f.ask_at = Some(t.now + self.timing.retry),
                        }
                    }
                    Err(e) => self.halt(format!("its store could not be emptied ({e})")),
                }
            }
            Err(e) if f.fetch.has_store() => {
                f.ask_at = Some(t.now + self.timing.retry);
                self.events.push_back(Event::Note(format!(
                    "fetch from the leader failed ({e}); starting again"
                )));
            }
            Err(e) => self.halt(format!("its store was lost in a fetch ({e})")),
        }
    }

    fn send_ask(&mut self, ask: Ask, t: Clock) {
        let Some(f) = &mut self.fetching else { return };
        f.ask_at = Some(t.now + self.timing.ask_again);
        self.events.push_back(Event::Ask(ask));
    }

    /// The store holds the snapshot's messages: the machine over it
    /// replaces the placeholder, the waiting entries are applied, and the
    /// node may lead again.
    fn fetched(&mut self, machine: StreamMachine, t: Clock) {
        let f = self.end_fetch().expect("fetching");
        let index = f.fetch.index();
        debug_assert!(index >= f.began_at, "a fetch is never sent backwards");
        // The store was filled as of `index`: it never held what was
        // removed before it, so an ask for an older state is retargeted
        // to this one (`fetch::answer`), never served short of it.
        self.retention = Retention::opened_at(index);
        self.machine = machine;
        let sync = self.machine.stream_mut().store_mut().sync_handle();
        self.events.push_back(Event::Fetched {
            index,
            messages: f.fetch.fetched,
            took: t.now.saturating_sub(f.started),
            sync,
        });
        // The snapshot's index may be past the last entry the machine
        // saw (Raft's own entries are not the stream's).
        debug_assert!(self.machine.applied() <= index, "caught up to the snapshot");
        for (index, data, leader) in f.waiting {
            self.apply(index, data, leader, t);
        }
        if self.stopped {
            return;
        }
        if index > f.began_at {
            // Retargeted: the log's snapshot is older than the store, and
            // a restart opening the store there would find it unmarked
            // and fetch again (if every replica did, none could answer).
            // The log is moved to the store's state now, not at the next
            // compaction, which an idle stream may never reach.
            let at = self.machine.applied();
            self.take_snapshot(at, 0, t);
        }
        self.events.push_back(Event::Hold(false));
        if std::mem::take(&mut self.repairing) {
            self.events.push_back(Event::Repaired);
        }
    }

    /// This replica can go on no more (see [`Event::Halted`]).
    fn halt(&mut self, why: String) {
        self.end_fetch();
        self.stopped = true;
        self.events.push_back(Event::Halted(why));
    }
}

/// A machine over an empty memory store, standing in while the real
/// store is fetched or reopened.
pub fn placeholder(config: StreamConfig, created: i64) -> Option<StreamMachine> {
    let store = replica_store(&StreamConfig {
        storage: Storage::Memory,
        ..config.clone()
    });
    StreamMachine::new(config, created, store).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream_sm::{Entry, Op};
    use std::sync::Arc;
    use store::{FileStore, FileStoreConfig, MemDir};

    const TIMING: Timing = Timing {
        ask_again: 50,
        wait: 30,
        retry: 30,
    };

    fn config() -> StreamConfig {
        let mut cfg = StreamConfig {
            name: "S".into(),
            subjects: vec!["s.>".into()],
            storage: Storage::File,
            ..Default::default()
        };
        jetstream::stream::config::check(&mut cfg, false, false).unwrap();
        cfg
    }

    /// A home over a memory directory that only makes empty stores.
    struct Empty(MemDir);

    impl Home for Empty {
        fn is_file(&self) -> bool {
            true
        }

        fn empty(&self, _: &StreamConfig) -> Result<Box<dyn MsgStore>, String> {
            let cfg = FileStoreConfig { segment_size: 4096 };
            let store = FileStore::open_at(Arc::new(self.0.clone()), cfg, 0);
            Ok(Box::new(store.map_err(|e| e.to_string())?))
        }

        fn reopen(
            &self,
            _: StreamConfig,
            _: i64,
            _: Option<(u64, Bytes)>,
        ) -> Result<Start, String> {
            Err("not in this test".into())
        }

        fn restore_whole(&self, _: u64, _: &[u8]) -> Result<StreamMachine, String> {
            Err("not in this test".into())
        }
    }

    fn publish(ts: i64) -> Bytes {
        let op = Op::Publish {
            subject: "s.a".into(),
            headers: None,
            payload: Bytes::from(vec![b'x'; 100]),
        };
        Bytes::from(Entry { ts, op }.encode())
    }

    fn snapshots(r: &mut Replica) -> Vec<(u64, Option<SyncHandle>)> {
        let mut out = Vec::new();
        while let Some(event) = r.poll_event() {
            if let Event::Snapshot { index, sync, .. } = event {
                out.push((index, sync));
            }
        }
        out
    }

    /// The asks of a fetch, in order.
    fn asks(r: &mut Replica) -> Vec<Ask> {
        let mut out = Vec::new();
        while let Some(event) = r.poll_event() {
            if let Event::Ask(ask) = event {
                out.push(ask);
            }
        }
        out
    }

    /// A peer that answers short of the snapshot (it removed a message
    /// since, and did not keep it): the store is emptied and fetched
    /// whole at once, but a whole fetch that still does not match waits
    /// `retry` before the next, rather than asking again and again (the
    /// fault campaign saw a replica ask 962 times in five seconds).
    #[test]
    fn a_whole_fetch_that_diverges_again_waits() {
        let source = Empty(MemDir::new());
        let mut leader = StreamMachine::new(config(), 0, source.empty(&config()).unwrap()).unwrap();
        leader.apply(1, &publish(1));
        let state = Bytes::from(leader.snapshot_state(1));

        let home = Empty(MemDir::new());
        let machine = StreamMachine::new(config(), 0, home.empty(&config()).unwrap()).unwrap();
        let t = Clock { now: 0, wall: 1 };
        let mut r = Replica::new((machine, 0, None), Box::new(home), TIMING, t);
        r.handle_snapshot(1, state, t);
        let first = asks(&mut r);
        assert_eq!(first.len(), 1, "{first:?}");
        // Message 1 is gone from the peer: an empty answer.
        let short = |ask: &Ask| {
            Reply::Chunk(crate::catchup::Chunk {
                from: ask.range.from,
                next: ask.range.to + 1,
                msgs: Vec::new(),
            })
            .encode()
        };
        r.handle_reply(&short(&first[0]), t);
        let again = asks(&mut r);
        assert_eq!(again.len(), 1, "emptied and asked again at once");
        r.handle_reply(&short(&again[0]), t);
        assert!(
            asks(&mut r).is_empty(),
            "no ask right after a second divergence"
        );
        assert_eq!(r.poll_timeout(), Some(TIMING.retry));
        r.handle_timeout(Clock {
            now: TIMING.retry,
            wall: 1,
        });
        assert_eq!(asks(&mut r).len(), 1, "asked again once the wait is over");
    }

    /// A fetched store and its mark are made durable once the fetch is
    /// done: after a crash the store opens at the snapshot, with nothing
    /// to fetch again. (The fault campaign: every replica of a stream
    /// fetched again at each restart, and after a restart of all three
    /// none could answer the others.)
    #[test]
    fn a_fetched_store_survives_a_crash_without_fetching_again() {
        let source = Empty(MemDir::new());
        let mut leader = StreamMachine::new(config(), 0, source.empty(&config()).unwrap()).unwrap();
        for index in 1..=3 {
            leader.apply(index, &publish(index as i64));
        }
        let state = leader.snapshot_state(3);

        let dir = MemDir::new();
        let machine =
            StreamMachine::new(config(), 0, Empty(dir.clone()).empty(&config()).unwrap()).unwrap();
        let t = Clock { now: 0, wall: 1 };
        let mut r = Replica::new((machine, 0, None), Box::new(Empty(dir.clone())), TIMING, t);
        r.handle_snapshot(3, Bytes::from(state.clone()), t);
        let mut synced = false;
        for _ in 0..10 {
            let mut replies = Vec::new();
            while let Some(event) = r.poll_event() {
                match event {
                    Event::Ask(ask) => {
                        let chunk =
                            crate::catchup::serve(leader.stream().store(), ask.range, ask.mark);
                        replies.push(Reply::Chunk(chunk.unwrap()).encode());
                    }
                    Event::Fetched { sync, .. } => {
                        if let Some(sync) = sync {
                            sync.sync().unwrap();
                        }
                        synced = true;
                    }
                    _ => {}
                }
            }
            for reply in replies {
                r.handle_reply(&reply, t);
            }
        }
        assert!(synced && !r.is_fetching(), "the fetch is done");
        dir.crash(0);
        let cfg = FileStoreConfig { segment_size: 4096 };
        match crate::fetch::reopen(Arc::new(dir), cfg, 3, &state).unwrap() {
            crate::fetch::Reopened::Ready { machine, mark } => {
                assert_eq!(mark, 3);
                assert_eq!(machine.stream().store().state().msgs, 3);
            }
            crate::fetch::Reopened::Fetch { mark, .. } => {
                panic!("fetched again after a crash, from mark {mark}")
            }
        }
    }

    /// A replica whose store was fetched as of index 3 never held what
    /// was removed before it: asked for its store as of an earlier index
    /// (another follower installing an older snapshot), it must not serve
    /// it, which would be short of that snapshot and make the asker
    /// diverge, but retarget the asker to its own state.
    #[test]
    fn a_fetched_store_serves_no_state_older_than_its_fetch() {
        let source = Empty(MemDir::new());
        let mut leader = StreamMachine::new(config(), 0, source.empty(&config()).unwrap()).unwrap();
        leader.apply(1, &publish(1));
        leader.apply(2, &publish(2));
        let delete = Entry {
            ts: 3,
            op: Op::DeleteMsg {
                seq: 1,
                erase: false,
            },
        };
        leader.apply(3, &Bytes::from(delete.encode()));
        let state = Bytes::from(leader.snapshot_state(3));

        let home = Empty(MemDir::new());
        let machine = StreamMachine::new(config(), 0, home.empty(&config()).unwrap()).unwrap();
        let t = Clock { now: 0, wall: 1 };
        let mut r = Replica::new((machine, 0, None), Box::new(home), TIMING, t);
        r.handle_snapshot(3, state, t);
        for _ in 0..10 {
            for ask in asks(&mut r) {
                let chunk = crate::catchup::serve(leader.stream().store(), ask.range, ask.mark);
                r.handle_reply(&Reply::Chunk(chunk.unwrap()).encode(), t);
            }
        }
        assert!(!r.is_fetching(), "fetched as of 3");
        let older = Ask {
            mark: 2,
            range: crate::catchup::ChunkRequest { from: 1, to: 2 },
        };
        match r.answer(older, t, u64::MAX) {
            Reply::Retarget { index, .. } => assert_eq!(index, 3),
            Reply::Chunk(chunk) => panic!(
                "served a state it never held: {} messages from 1",
                chunk.msgs.len()
            ),
            Reply::Later => panic!("asked to wait for what it will never hold"),
        }
    }

    /// A fetch retargeted to a later state than its log's snapshot takes
    /// a snapshot there at once: a restart then opens the store where it
    /// is, instead of finding it unmarked at the log's older snapshot and
    /// fetching again (campaign seed 4701: after every server lost power,
    /// every replica did, and none could answer).
    #[test]
    fn a_retargeted_fetch_moves_the_logs_snapshot_to_its_state() {
        let source = Empty(MemDir::new());
        let mut leader = StreamMachine::new(config(), 0, source.empty(&config()).unwrap()).unwrap();
        leader.apply(1, &publish(1));
        let old = Bytes::from(leader.snapshot_state(1));
        leader.apply(2, &publish(2));
        leader.apply(3, &publish(3));
        // The leader no longer keeps its store as of 1.
        let mut kept = Retention::opened_at(3);

        let home = Empty(MemDir::new());
        let machine = StreamMachine::new(config(), 0, home.empty(&config()).unwrap()).unwrap();
        let t = Clock { now: 0, wall: 1 };
        let mut r = Replica::new((machine, 0, None), Box::new(home), TIMING, t);
        r.handle_snapshot(1, old, t);
        let mut taken = Vec::new();
        for _ in 0..10 {
            let mut asked = Vec::new();
            while let Some(event) = r.poll_event() {
                match event {
                    Event::Ask(ask) => asked.push(ask),
                    Event::Snapshot { index, .. } => taken.push(index),
                    _ => {}
                }
            }
            for ask in asked {
                let reply = fetch::answer(&leader, &mut kept, ask, t.wall, u64::MAX).unwrap();
                r.handle_reply(&reply.encode(), t);
            }
        }
        assert!(!r.is_fetching(), "fetched");
        assert_eq!(r.machine().applied(), 3, "as of the leader's state");
        assert_eq!(taken, vec![3], "the log's snapshot follows the store");
    }

    /// A write that fails (a full disk) does not stop the replica: it
    /// goes on applying, answers nobody, takes no snapshot, and reports
    /// its store for repair.
    #[test]
    fn a_failed_write_makes_the_store_unsound_not_the_replica_stop() {
        let dir = MemDir::new();
        let home = Empty(dir.clone());
        let machine = StreamMachine::new(config(), 0, home.empty(&config()).unwrap()).unwrap();
        let t = Clock { now: 0, wall: 1 };
        let mut r = Replica::new((machine, 0, None), Box::new(home), TIMING, t);
        // The indexes the leader answers, its events drained.
        let answers = |r: &mut Replica| {
            let mut answered = Vec::new();
            while let Some(event) = r.poll_event() {
                if let Event::Applied { index, leader, .. } = event {
                    answered.extend(leader.then_some(index));
                }
            }
            answered
        };
        r.handle_committed(1, publish(1), true, t);
        let mut answered = answers(&mut r);
        assert!(r.damage().is_none());
        dir.set_space(Some(0));
        for index in 2..=80 {
            r.handle_committed(index, publish(index as i64), true, t);
            answered.extend(answers(&mut r));
        }
        assert!(!r.is_stopped(), "a full disk does not stop it");
        let why = r.damage().expect("reported for repair");
        assert!(why.starts_with("a write failed"), "{why}");
        assert!(answered.len() < 80, "{answered:?}");
        assert!(
            answered.windows(2).all(|w| w[1] == w[0] + 1),
            "answers stop at the failure"
        );
        r.handle_take_snapshot(80, 0, t);
        assert!(snapshots(&mut r).is_empty(), "owed while unsound");
        assert_eq!(r.machine().applied(), 80);
    }

    /// A repair opens the store again at the log's snapshot, so no
    /// snapshot is taken of a state a damaged store produced: it is owed
    /// until the store is whole, and taken after the next entry then.
    #[test]
    fn a_state_a_damaged_store_produced_is_not_snapshotted() {
        let dir = MemDir::new();
        let home = Empty(dir.clone());
        let machine = StreamMachine::new(config(), 0, home.empty(&config()).unwrap()).unwrap();
        let t = Clock { now: 0, wall: 1 };
        let mut r = Replica::new((machine, 0, None), Box::new(home), TIMING, t);
        for index in 1..=5 {
            r.handle_committed(index, publish(index as i64), false, t);
            while r.poll_event().is_some() {}
        }
        r.handle_take_snapshot(5, 0, t);
        let taken = snapshots(&mut r);
        assert_eq!(taken.len(), 1);
        for (_, sync) in taken {
            sync.expect("written").sync().unwrap();
        }
        // A bit in the first message's payload, after the segment's Start
        // record and the message's header, prefix and subject.
        let segment = dir
            .names()
            .into_iter()
            .find(|n| n.ends_with(".blk"))
            .unwrap();
        dir.flip_bit(&segment, 25 + 25 + 6 + 3 + 10, 0);
        assert!(
            r.machine().stream().store().get(1).is_err(),
            "the read fails"
        );
        assert!(r.damage().is_some());

        r.handle_take_snapshot(5, 0, t);
        assert!(snapshots(&mut r).is_empty(), "owed while damaged");
        r.handle_committed(6, publish(6), false, t);
        assert!(snapshots(&mut r).is_empty(), "still owed while damaged");

        // Its log's own sync of entry 6 is under way: the repair waits,
        // letting the node lead again, and the damage still asks for it.
        let behind = LogTail {
            snapshot: None,
            reaches: 5,
            entries: Vec::new(),
        };
        r.repair(Some(behind), t);
        assert!(matches!(r.poll_event(), Some(Event::Hold(false))));
        assert!(r.poll_event().is_none());
        assert!(!r.is_stopped() && r.damage().is_some());
        // A log that no longer holds what follows its snapshot: it halts.
        r.repair(None, t);
        assert!(matches!(r.poll_event(), Some(Event::Halted(_))));
        assert!(r.is_stopped());
    }
}
