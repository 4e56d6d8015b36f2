//! A server's stream replicas, kept as the cluster driver keeps them
//! (`server::jscluster::replica`): each in a file store on a directory
//! of its own that crashes with its server, marked and synced at every
//! snapshot, whose snapshots carry the stream's state and not its
//! messages. A replica that installs a leader's snapshot, or comes back
//! to a store that does not hold its log's snapshot, fetches the messages
//! from the leader's store (`jsservice::fetch`), one small chunk per
//! step, through the same faults as frames: asks and replies are dropped,
//! and replies corrupted, lose only time.

use std::sync::Arc;

use bytes::Bytes;
use jsservice::catchup::{CatchupError, Reply};
use jsservice::fetch::{self, Fetch, Progress, Reopened, Retention};
use jsservice::stream_sm::StreamMachine;
use replication::engine::Engine;
use store::{FileStore, FileStoreConfig, MemDir, MsgStore};

use crate::{Faults, Server, Sim, Violation, SOURCING_GROUP};

/// Small segments, so that removals empty and reclaim whole segments.
const SEGMENTS: FileStoreConfig = FileStoreConfig { segment_size: 4096 };
/// Bytes of messages a fetch's chunk carries: small, so a fetch takes
/// many steps and faults land in the middle of it.
const CHUNK: u64 = 200;
/// Steps before an ask without a reply goes out again.
const ASK_AGAIN: u64 = 5;

/// One stream replica's store and what goes with it.
pub(crate) struct ReplicaStore {
    pub dir: MemDir,
    pub retention: Retention,
    pub fetching: Option<Fetching>,
    /// A bit was flipped under the running replica, and it has not been
    /// repaired or reopened since: counted among the damaged servers.
    pub flipped: bool,
}

/// A fetch under way.
pub(crate) struct Fetching {
    fetch: Fetch,
    /// Entries committed after the snapshot, in log order.
    pub waiting: Vec<(u64, Bytes)>,
    /// The step at which to send the outstanding ask (or begin again).
    ask_at: u64,
}

impl ReplicaStore {
    pub fn new() -> ReplicaStore {
        ReplicaStore {
            dir: MemDir::new(),
            retention: Retention::opened_at(0),
            fetching: None,
            flipped: false,
        }
    }

    /// The store emptied: what a new replica starts from.
    pub fn empty(&self) -> Box<dyn MsgStore> {
        let dir = Arc::new(self.dir.clone());
        Box::new(FileStore::open_at(dir, SEGMENTS, 0).expect("an empty store opens"))
    }
}

/// The machine slot of `group` on a server.
pub(crate) fn machine(s: &mut Server, group: u64) -> &mut Option<StreamMachine> {
    match group == SOURCING_GROUP {
        true => &mut s.agg,
        false => &mut s.wq,
    }
}

/// After a restart: the replica of `group` from its log's snapshot and
/// its store, or a fetch of what the store lacks (the node held
/// meanwhile). `fresh` makes a new replica's machine over a store.
pub(crate) fn reopen(
    s: &mut Server,
    engine: &mut Engine,
    group: u64,
    fresh: impl FnOnce(Box<dyn MsgStore>) -> Option<StreamMachine>,
) {
    let rs = s.stores.get_mut(&group).expect("a store per stream group");
    rs.fetching = None;
    rs.flipped = false;
    let stored = engine.snapshot(group).filter(|(_, d)| !d.is_empty());
    let Some((index, state)) = stored else {
        rs.retention = Retention::opened_at(0);
        let store = rs.empty();
        *machine(s, group) = fresh(store);
        return;
    };
    let dir = Arc::new(rs.dir.clone());
    match fetch::reopen(dir, SEGMENTS, index, &state).expect("stores this simulator made reopen") {
        Reopened::Ready { machine: m, mark } => {
            rs.retention = Retention::opened_at(mark);
            *machine(s, group) = Some(*m);
        }
        Reopened::Fetch { store, mark, .. } => {
            rs.retention = Retention::opened_at(mark);
            begin(s, engine, group, index, state, store);
        }
    }
}

/// A leader's snapshot installed on a server: its messages are fetched
/// into the replica's store (what it has is kept where it fits).
pub(crate) fn install(s: &mut Server, engine: &mut Engine, group: u64, index: u64, state: Bytes) {
    let rs = s.stores.get_mut(&group).expect("a store per stream group");
    let store = match rs.fetching.take() {
        Some(f) => f.fetch.into_store(),
        None => machine(s, group).take().map(StreamMachine::into_store),
    };
    let rs = s.stores.get_mut(&group).expect("a store per stream group");
    let store = store.unwrap_or_else(|| rs.empty());
    begin(s, engine, group, index, state, store);
}

fn begin(
    s: &mut Server,
    engine: &mut Engine,
    group: u64,
    index: u64,
    state: Bytes,
    store: Box<dyn MsgStore>,
) {
    let fetch =
        Fetch::new(index, state.to_vec(), store).expect("snapshots this simulator made decode");
    engine.hold(group, true).expect("the group is here");
    *machine(s, group) = None;
    let rs = s.stores.get_mut(&group).expect("a store per stream group");
    rs.fetching = Some(Fetching {
        fetch,
        waiting: Vec::new(),
        ask_at: 0,
    });
}

/// A stream replica's snapshot for compaction: the store marked at the
/// applied index and synced first, then what it kept for the log's
/// previous snapshot released. `None` while fetching.
pub(crate) fn snapshot(s: &mut Server, group: u64, now: i64) -> Option<(u64, Vec<u8>)> {
    let stored = s
        .engine
        .as_ref()
        .and_then(|e| e.snapshot_index(group))
        .unwrap_or(0);
    let rs = s.stores.get_mut(&group).expect("a store per stream group");
    if rs.fetching.is_some() {
        return None;
    }
    let retention = &mut rs.retention;
    let m = match group == SOURCING_GROUP {
        true => s.agg.as_mut(),
        false => s.wq.as_mut(),
    }?;
    let index = m.applied();
    let store = m.stream_mut().store_mut();
    if index > retention.last_mark() {
        store.mark(index).expect("memory dirs do not fail");
        retention.marked(index);
    }
    if let Some(sync) = store.sync_handle() {
        sync.sync().expect("memory dirs sync");
    }
    if let Some(to) = retention.release(stored, now) {
        store.release(to).expect("memory dirs do not fail");
    }
    Some((index, m.snapshot_state(now)))
}

impl Sim {
    /// Moves every fetch one ask and reply along, if its ask is due and
    /// the leader is reachable.
    pub(crate) fn fetch_round(&mut self, f: &Faults) -> Result<(), Violation> {
        for i in 0..self.servers.len() {
            let groups: Vec<u64> = self.servers[i].stores.keys().copied().collect();
            for g in groups {
                self.fetch_one(i, g, f)?;
            }
        }
        Ok(())
    }

    fn fetch_one(&mut self, i: usize, g: u64, f: &Faults) -> Result<(), Violation> {
        let step = self.step;
        let s = &mut self.servers[i];
        if s.engine.is_none() {
            return Ok(());
        }
        let rs = s.stores.get_mut(&g).expect("a store per stream group");
        let Some(fetching) = rs.fetching.as_mut() else {
            return Ok(());
        };
        if fetching.ask_at > step {
            return Ok(());
        }
        let Some(ask) = fetching.fetch.asked() else {
            let progress = fetching.fetch.begin().map(Some);
            return self.fetch_progress(i, g, progress);
        };
        fetching.ask_at = step + ASK_AGAIN;
        let Some(li) = self.leader_index_of(g) else {
            return Ok(());
        };
        let (me, leader) = (self.servers[i].id, self.servers[li].id);
        if li == i {
            // It cannot fetch from itself: it hands its leadership on,
            // and asks whoever takes it.
            let n = self.servers.len() as u64;
            let engine = self.servers[i].engine.as_mut().expect("running");
            crate::repair::step_down(engine, g, me, n, &mut self.rng);
            return Ok(());
        }
        if self.cut.contains(&(me, leader)) || self.cut.contains(&(leader, me)) {
            return Ok(());
        }
        if self.rng.chance(f.drop) {
            return Ok(());
        }
        let now = self.now();
        let l = &mut self.servers[li];
        let lrs = l.stores.get_mut(&g).expect("a store per stream group");
        let lm = match g == SOURCING_GROUP {
            true => l.agg.as_ref(),
            false => l.wq.as_ref(),
        };
        let reply = match (lm, lrs.fetching.is_some()) {
            (Some(m), false) => {
                fetch::answer(m, &mut lrs.retention, ask, now, CHUNK).unwrap_or(Reply::Later)
            }
            _ => Reply::Later,
        };
        let mut bytes = reply.encode();
        if self.rng.chance(f.corrupt) && bytes.len() > 1 {
            let at = 1 + self.rng.below(bytes.len() as u64 - 1) as usize;
            bytes[at] ^= 1 << self.rng.below(8);
        }
        self.event(9000 + me * 100 + g);
        let rs = self.servers[i].stores.get_mut(&g).expect("store");
        let fetching = rs.fetching.as_mut().expect("fetching");
        let progress = match Reply::decode(&bytes) {
            Ok(reply) => fetching.fetch.reply(reply),
            // Damaged on the way (a retarget's state carries no checksum
            // of its own: it is refused when it does not decode).
            Err(_) => {
                fetching.ask_at = step + 1;
                return Ok(());
            }
        };
        self.fetch_progress(i, g, progress)
    }

    fn fetch_progress(
        &mut self,
        i: usize,
        g: u64,
        progress: Result<Option<Progress>, CatchupError>,
    ) -> Result<(), Violation> {
        let step = self.step;
        let rs = self.servers[i].stores.get_mut(&g).expect("store");
        let fetching = rs.fetching.as_mut().expect("fetching");
        match progress {
            Ok(None) => Ok(()),
            Ok(Some(Progress::Ask(_))) => {
                fetching.ask_at = step + 1;
                Ok(())
            }
            Ok(Some(Progress::Wait(_))) => {
                fetching.ask_at = step + 3;
                Ok(())
            }
            Ok(Some(Progress::Caught(m))) => self.caught(i, g, *m),
            Err(CatchupError::Diverged(_)) => {
                let empty = rs.empty();
                let fetching = rs.fetching.as_mut().expect("fetching");
                fetching.fetch.replace_store(empty);
                fetching.ask_at = step + 1;
                Ok(())
            }
            Err(_) if fetching.fetch.has_store() => {
                fetching.ask_at = step + 3;
                Ok(())
            }
            Err(e) => Err(self.violation(format!(
                "server {}: a fetch of group {g} lost its store: {e}",
                self.servers[i].id
            ))),
        }
    }

    /// The fetch is done: the machine takes its place, the entries that
    /// waited are applied, and the node may lead again.
    fn caught(&mut self, i: usize, g: u64, m: StreamMachine) -> Result<(), Violation> {
        let s = &mut self.servers[i];
        let rs = s.stores.get_mut(&g).expect("store");
        let fetching = rs.fetching.take().expect("fetching");
        rs.retention = Retention::opened_at(0);
        rs.retention.marked(fetching.fetch.index());
        *machine(s, g) = Some(m);
        if let Some(e) = s.engine.as_mut() {
            e.hold(g, false).expect("the group is here");
        }
        self.report.fetches += 1;
        self.event(9500 + self.servers[i].id);
        for (index, data) in fetching.waiting {
            self.apply_stream(i, g, false, index, &data)?;
        }
        Ok(())
    }
}
