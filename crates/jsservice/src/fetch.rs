//! The two sides of catching a replica up from a peer's store, as state
//! machines a driver turns into messages (the cluster driver, and the
//! simulator): [`Fetch`], a replica installing a state snapshot, and
//! [`Retention`], a replica deciding how far its store may forget what it
//! removed (and so which fetches it can still serve).
//!
//! The driver contract for [`Fetch`]:
//!
//! 1. [`Fetch::new`] when a state snapshot is installed (or found at a
//!    restart with a store that does not match it), then [`Fetch::begin`].
//!    The node must not lead meanwhile (`Engine::hold`); entries committed
//!    after the snapshot wait, in order, until the fetch is done.
//! 2. For [`Progress::Ask`], send the [`Ask`] to the group's leader; for
//!    [`Progress::Wait`], send the same ask again a moment later. With one
//!    ask outstanding, send it again if no reply comes in a while: a lost
//!    ask or reply is only a delay.
//! 3. Hand every reply to [`Fetch::reply`]; `Ok(None)` is a reply to an
//!    ask no longer outstanding, dropped.
//! 4. [`Progress::Caught`] gives the stream machine, as of
//!    [`Fetch::index`]; its store is marked there. Apply the waiting
//!    entries (those at or below the index are skipped by the machine),
//!    then let the node lead again.
//!
//! Any [`CatchupError`] leaves the store as it was left; the driver
//! starts again from [`Fetch::begin`], after [`Fetch::replace_store`]
//! with an empty store when the error is `Diverged`.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use store::{Dir, FileStore, FileStoreConfig, MsgStore, StoreError};

use crate::catchup::{self, Ask, CatchupError, Reply, StoreSummary};
use crate::stream_sm::{DecodeError, RestoreError, StreamMachine};

/// What a [`Fetch`] wants next.
pub enum Progress {
    /// Send this to the leader.
    Ask(Ask),
    /// The leader cannot answer yet: ask again a moment later.
    Wait(Ask),
    /// Done: the stream machine over the caught-up store.
    Caught(Box<StreamMachine>),
}

/// A replica fetching the messages of a state snapshot it installs.
pub struct Fetch {
    index: u64,
    state: Vec<u8>,
    target: StoreSummary,
    store: Option<Box<dyn MsgStore>>,
    asked: Option<Ask>,
    /// Messages stored so far, for the driver's log.
    pub fetched: u64,
}

impl Fetch {
    /// A fetch of what `state` (a state snapshot as of log index `index`)
    /// holds into `store`, which must hold no mark at or past `index`.
    pub fn new(index: u64, state: Vec<u8>, store: Box<dyn MsgStore>) -> Result<Fetch, DecodeError> {
        let (_, target) = StreamMachine::snapshot_summary(&state)?;
        Ok(Fetch {
            index,
            state,
            target,
            store: Some(store),
            asked: None,
            fetched: 0,
        })
    }

    /// The log index the store is being brought to.
    pub fn index(&self) -> u64 {
        self.index
    }

    /// The ask outstanding, if any.
    pub fn asked(&self) -> Option<Ask> {
        self.asked
    }

    /// After `Diverged`: the store is replaced by an empty one.
    pub fn replace_store(&mut self, store: Box<dyn MsgStore>) {
        self.store = Some(store);
        self.asked = None;
    }

    /// Brings the store down to what the target holds of it, and says
    /// what to fetch first.
    pub fn begin(&mut self) -> Result<Progress, CatchupError> {
        self.asked = None;
        let store = self.store.as_deref_mut().expect("a fetch holds its store");
        match catchup::prepare(store, &self.target)? {
            Some(range) => Ok(self.ask(range)),
            None => self.done(),
        }
    }

    /// A reply from the leader. `Ok(None)`: it answers no ask outstanding.
    /// After an error no ask is outstanding: start again from
    /// [`Fetch::begin`] (a chunk may have been stored in part).
    pub fn reply(&mut self, reply: Reply) -> Result<Option<Progress>, CatchupError> {
        let progress = self.take_reply(reply);
        if progress.is_err() {
            self.asked = None;
        }
        progress
    }

    fn take_reply(&mut self, reply: Reply) -> Result<Option<Progress>, CatchupError> {
        let Some(asked) = self.asked else {
            return Ok(None);
        };
        match reply {
            Reply::Chunk(chunk) if chunk.from != asked.range.from => Ok(None),
            Reply::Chunk(chunk) => {
                let store = self.store.as_deref_mut().expect("a fetch holds its store");
                let before = store.state().msgs;
                let next = catchup::fill(store, &self.target, asked.range, chunk)?;
                self.fetched += store.state().msgs.saturating_sub(before);
                match next {
                    Some(range) => Ok(Some(self.ask(range))),
                    None => self.done().map(Some),
                }
            }
            Reply::Later => Ok(Some(Progress::Wait(asked))),
            Reply::Retarget { index, state } => {
                if index <= self.index {
                    return Err(CatchupError::BadChunk(format!(
                        "retargeted from {} back to {index}",
                        self.index
                    )));
                }
                let (_, target) = StreamMachine::snapshot_summary(&state)
                    .map_err(|e| CatchupError::BadChunk(format!("retarget state: {e}")))?;
                self.index = index;
                self.state = state;
                self.target = target;
                self.begin().map(Some)
            }
        }
    }

    fn ask(&mut self, range: catchup::ChunkRequest) -> Progress {
        let ask = Ask {
            mark: self.index,
            range,
        };
        self.asked = Some(ask);
        Progress::Ask(ask)
    }

    /// Checks the store, marks it at the snapshot's index, and builds the
    /// machine over it.
    fn done(&mut self) -> Result<Progress, CatchupError> {
        self.asked = None;
        let mut store = self.store.take().expect("a fetch holds its store");
        let checked = catchup::finish(store.as_mut(), &self.target)
            .and_then(|()| store.mark(self.index).map_err(store_error));
        if let Err(e) = checked {
            self.store = Some(store);
            return Err(e);
        }
        match StreamMachine::restore_state(&self.state, store) {
            Ok(machine) => Ok(Progress::Caught(Box::new(machine))),
            // Checked just before: only a snapshot that does not decode.
            Err(RestoreError::Store(why)) => Err(CatchupError::Diverged(why)),
            Err(RestoreError::Decode(e)) => Err(CatchupError::BadChunk(format!("state: {e}"))),
        }
    }

    /// Whether the fetch still holds its store (a failed restore gives it
    /// up).
    pub fn has_store(&self) -> bool {
        self.store.is_some()
    }

    /// The store, the fetch given up (a newer snapshot came meanwhile).
    pub fn into_store(self) -> Option<Box<dyn MsgStore>> {
        self.store
    }
}

fn store_error(e: store::StoreError) -> CatchupError {
    CatchupError::Store(e.to_string())
}

/// A leader's answer to a fetch: from its store as of the fetch's index
/// if it still keeps it (chunks of at most `limit` bytes), or its own
/// state to fetch instead. A leader that is itself fetching, or a store
/// that fails a read, answers [`Reply::Later`].
pub fn answer(
    machine: &StreamMachine,
    retention: &mut Retention,
    ask: Ask,
    now: i64,
    limit: u64,
) -> Result<Reply, CatchupError> {
    if !retention.serves(ask.mark) {
        let index = machine.applied();
        retention.fetching(index, now);
        return Ok(Reply::Retarget {
            index,
            state: machine.snapshot_state(now),
        });
    }
    let chunk = catchup::serve_up_to(machine.stream().store(), ask.range, ask.mark, limit)?;
    retention.fetching(ask.mark, now);
    Ok(Reply::Chunk(chunk))
}

/// How a replica's file store comes back from its log's state snapshot
/// (`index`, `state`).
pub enum Reopened {
    /// The store is at the snapshot's mark and matches it.
    Ready {
        machine: Box<StreamMachine>,
        mark: u64,
    },
    /// It does not hold the snapshot's messages: fetch them into `store`,
    /// opened at `mark`. `why`, for the driver's log, when it was damaged.
    Fetch {
        store: Box<dyn MsgStore>,
        mark: u64,
        why: Option<String>,
    },
}

/// Opens a replica's store in `dir` at its log's state snapshot: at the
/// snapshot's mark if it matches; at an earlier mark to be fetched if the
/// mark is missing (a fetch cut short) or the store differs (damage); and
/// emptied, to be fetched whole, if it cannot be read at all.
pub fn reopen(
    dir: Arc<dyn Dir>,
    cfg: FileStoreConfig,
    index: u64,
    state: &[u8],
) -> Result<Reopened, String> {
    let (_, summary) = StreamMachine::snapshot_summary(state)
        .map_err(|e| format!("its stored snapshot at {index} does not decode ({e})"))?;
    let earlier = |before: u64, why: Option<String>| {
        let (store, mark) =
            FileStore::open_at_or_before(dir.clone(), cfg, before).map_err(|e| e.to_string())?;
        Ok(Reopened::Fetch {
            store: Box::new(store),
            mark,
            why,
        })
    };
    match FileStore::open_at(dir.clone(), cfg, index) {
        Ok(store) => match summary.mismatch(&store) {
            None => {
                let machine = StreamMachine::restore_state(state, Box::new(store))
                    .map_err(|e| format!("its stored snapshot at {index}: {e}"))?;
                Ok(Reopened::Ready {
                    machine: Box::new(machine),
                    mark: index,
                })
            }
            // Marked at `index` and changed since (damage): fetched from
            // an earlier mark, as a fetch marks its store at its index.
            Some(why) => {
                drop(store);
                earlier(index - 1, Some(why))
            }
        },
        Err(StoreError::NoMark(_)) => earlier(index, None),
        Err(e) => {
            let store = FileStore::open_at(dir.clone(), cfg, 0).map_err(|e| e.to_string())?;
            Ok(Reopened::Fetch {
                store: Box::new(store),
                mark: 0,
                why: Some(format!("unreadable ({e}); emptied")),
            })
        }
    }
}

/// How long a fetch as of an index holds back what the store may forget,
/// since its last ask (nanoseconds of the driver's clock).
pub const FETCH_HELD_FOR: i64 = 60_000_000_000;

/// How far a replica's store may forget what it removed
/// (`MsgStore::release`): never past the snapshot a restart would open
/// at (the log's), nor past what a fetch still asks for.
#[derive(Debug, Default)]
pub struct Retention {
    /// This store's marks not yet released, oldest first.
    marks: VecDeque<u64>,
    released: u64,
    /// Fetches served lately: as of which index, and when last asked.
    fetches: BTreeMap<u64, i64>,
}

impl Retention {
    /// A store opened at `mark` (everything before it released).
    pub fn opened_at(mark: u64) -> Retention {
        Retention {
            marks: VecDeque::from([mark]),
            released: mark,
            fetches: BTreeMap::new(),
        }
    }

    /// The last mark made.
    pub fn last_mark(&self) -> u64 {
        self.marks.back().copied().unwrap_or(self.released)
    }

    /// The store was marked at `index`.
    pub fn marked(&mut self, index: u64) {
        debug_assert!(index > self.last_mark(), "marks only grow");
        self.marks.push_back(index);
    }

    /// Whether a fetch as of `index` can be served: nothing removed after
    /// it is forgotten yet.
    pub fn serves(&self, index: u64) -> bool {
        index >= self.released
    }

    /// A fetch as of `index` was served at `now`.
    pub fn fetching(&mut self, index: u64, now: i64) {
        debug_assert!(self.serves(index));
        self.fetches.insert(index, now);
    }

    /// What the store may release now that the log's snapshot is at
    /// `stored`: the greatest mark at or below both it and every fetch
    /// asked for in the last [`FETCH_HELD_FOR`]. `None`: nothing new.
    pub fn release(&mut self, stored: u64, now: i64) -> Option<u64> {
        self.fetches
            .retain(|_, at| now.saturating_sub(*at) < FETCH_HELD_FOR);
        let oldest_fetch = self.fetches.keys().next().copied().unwrap_or(u64::MAX);
        let limit = stored.min(oldest_fetch);
        let to = self.marks.iter().rev().find(|&&m| m <= limit).copied()?;
        if to <= self.released {
            return None;
        }
        while self.marks.front().is_some_and(|&m| m < to) {
            self.marks.pop_front();
        }
        self.released = to;
        debug_assert!(self.serves(to) && !self.serves(to - 1));
        Some(to)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catchup::serve;
    use jetstream::api::StreamConfig;
    use store::MemDir;

    fn config() -> StreamConfig {
        serde_json::from_str(r#"{"name":"S","subjects":["s.>"]}"#).unwrap()
    }

    fn file_store(dir: &MemDir) -> Box<dyn MsgStore> {
        let cfg = FileStoreConfig { segment_size: 4096 };
        Box::new(FileStore::open_at(Arc::new(dir.clone()), cfg, 0).unwrap())
    }

    /// A leader with 40 messages, some removed after its snapshot: a
    /// fetch brings an empty file store to the snapshot, chunk by chunk,
    /// and the store comes back at the mark after a restart.
    #[test]
    fn a_fetch_fills_an_empty_store_and_marks_it() {
        let leader_dir = MemDir::new();
        let mut leader = StreamMachine::new(config(), 0, file_store(&leader_dir)).unwrap();
        for i in 1..=40u64 {
            leader.stream_mut().store_mut().applying(i);
            let payload = vec![b'x'; 3000 * i as usize];
            leader
                .stream_mut()
                .store_mut()
                .store("s.a", None, &payload, i as i64)
                .unwrap();
        }
        leader.stream_mut().store_mut().remove(7, false).unwrap();
        leader.stream_mut().store_mut().mark(40).unwrap();
        let state = leader.snapshot_state(40);
        // Removed after the snapshot: still served as of it.
        leader.stream_mut().store_mut().applying(41);
        leader.stream_mut().store_mut().remove(20, false).unwrap();

        let dir = MemDir::new();
        let mut fetch = Fetch::new(40, state.clone(), file_store(&dir)).unwrap();
        let mut progress = fetch.begin().unwrap();
        let mut asks = 0;
        let machine = loop {
            match progress {
                Progress::Ask(ask) => {
                    asks += 1;
                    assert_eq!(ask.mark, 40);
                    let chunk = serve(leader.stream().store(), ask.range, ask.mark).unwrap();
                    // A stale copy of an earlier reply is dropped.
                    if asks > 1 {
                        let stale = Reply::Chunk(catchup::Chunk {
                            from: 1,
                            next: 2,
                            msgs: Vec::new(),
                        });
                        assert!(fetch.reply(stale).unwrap().is_none());
                    }
                    progress = fetch.reply(Reply::Chunk(chunk)).unwrap().unwrap();
                }
                Progress::Wait(_) => unreachable!(),
                Progress::Caught(machine) => break machine,
            }
        };
        assert!(asks > 1, "the stream is more than one chunk");
        assert_eq!(fetch.fetched, 39);
        assert_eq!(machine.stream().store().state().msgs, 39);
        assert!(machine.stream().store().get(20).unwrap().is_some());
        let mut machine = machine;
        if let Some(sync) = machine.stream_mut().store_mut().sync_handle() {
            sync.sync().unwrap();
        }
        drop(machine);
        dir.crash(0);
        let cfg = FileStoreConfig { segment_size: 4096 };
        let reopened = FileStore::open_at(Arc::new(dir.clone()), cfg, 40).unwrap();
        assert!(StreamMachine::restore_state(&state, Box::new(reopened)).is_ok());
    }

    /// A leader that no longer keeps the store as of the fetch's index
    /// retargets it to its own state; a fetch cannot be sent backwards.
    #[test]
    fn a_retarget_starts_over_at_the_later_state() {
        let mut leader = StreamMachine::new(config(), 0, file_store(&MemDir::new())).unwrap();
        leader.stream_mut().store_mut().applying(1);
        leader
            .stream_mut()
            .store_mut()
            .store("s.a", None, b"one", 1)
            .unwrap();
        let old = leader.snapshot_state(1);
        leader.stream_mut().store_mut().applying(2);
        leader
            .stream_mut()
            .store_mut()
            .store("s.a", None, b"two", 2)
            .unwrap();
        let new = leader.snapshot_state(2);
        let mut fetch = Fetch::new(1, old, file_store(&MemDir::new())).unwrap();
        assert!(matches!(fetch.begin().unwrap(), Progress::Ask(_)));
        assert!(matches!(
            fetch.reply(Reply::Later).unwrap(),
            Some(Progress::Wait(_))
        ));
        let retarget = Reply::Retarget {
            index: 2,
            state: new.clone(),
        };
        let Some(Progress::Ask(ask)) = fetch.reply(retarget).unwrap() else {
            panic!("asks again");
        };
        assert_eq!((ask.mark, ask.range.to), (2, 2));
        assert_eq!(fetch.index(), 2);
        let back = Reply::Retarget {
            index: 1,
            state: new,
        };
        assert!(fetch.reply(back).is_err());
    }

    #[test]
    fn retention_keeps_what_the_log_and_fetches_need() {
        let mut r = Retention::opened_at(0);
        r.marked(10);
        r.marked(20);
        r.marked(30);
        // The log's snapshot is at 20: marks up to it may go.
        assert_eq!(r.release(20, 0), Some(20));
        assert!(r.serves(20) && !r.serves(19));
        assert_eq!(r.release(20, 0), None);
        // A fetch as of 25 holds back the release at 30...
        r.fetching(25, 1_000);
        r.marked(40);
        assert_eq!(r.release(40, 2_000), None);
        // ...until it has not asked for a while.
        assert_eq!(r.release(40, 1_000 + FETCH_HELD_FOR), Some(40));
        assert_eq!(r.last_mark(), 40);
    }
}
