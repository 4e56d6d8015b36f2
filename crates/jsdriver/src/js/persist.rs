//! What a stream keeps on disk besides its messages: its configuration
//! (`meta.json`, replaced atomically) and each consumer's journal (a
//! snapshot, then the changes of each commit).
//!
//! ```text
//! <store_dir>/jetstream/$G/streams/<stream>/meta.json
//! <store_dir>/jetstream/$G/streams/<stream>/msgs/NNNNNNNN.blk
//! <store_dir>/jetstream/$G/streams/<stream>/obs/<consumer>.log
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use jetstream::api::{self, ConsumerConfig, Storage, StreamConfig};
use jetstream::consumer::state::PendingEntry;
use jetstream::consumer::ConsumerState;
use jetstream::stream::Stream;
use serde::{Deserialize, Serialize};
use store::{Dir, FileStore, FileStoreConfig, FsDir, Journal, MemStore, MsgStore, SyncHandle};

/// A journal is compacted into one snapshot once it grows past this.
const COMPACT_AT: u64 = 4 * 1024 * 1024;

pub fn streams_root(store_dir: &Path, account: &str) -> PathBuf {
    store_dir.join("jetstream").join(account).join("streams")
}

#[derive(Serialize, Deserialize)]
pub struct StreamMeta {
    pub config: StreamConfig,
    pub created: String,
}

pub fn write_stream_meta(
    dir: &dyn Dir,
    config: &StreamConfig,
    created: i64,
) -> std::io::Result<()> {
    let meta = StreamMeta {
        config: config.clone(),
        created: api::time::rfc3339(created),
    };
    dir.write_atomic(
        "meta.json",
        &serde_json::to_vec_pretty(&meta).expect("meta serializes"),
    )
}

pub fn read_stream_meta(dir: &dyn Dir) -> Result<(StreamConfig, i64), String> {
    let raw = dir.read_all("meta.json").map_err(|e| e.to_string())?;
    let meta: StreamMeta = serde_json::from_slice(&raw).map_err(|e| e.to_string())?;
    let created = api::time::parse(&meta.created).unwrap_or(0);
    Ok((meta.config, created))
}

#[derive(Serialize, Deserialize)]
struct Snapshot {
    config: ConsumerConfig,
    created: i64,
    state: ConsumerState,
}

/// The difference between two persisted states.
#[derive(Serialize, Deserialize, Default)]
struct Delta {
    delivered: (u64, u64),
    floor: (u64, u64),
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    add: Vec<PendingEntry>,
    /// Added entries in runs of `(sseq, dseq, count, ts)`: consecutive
    /// stream and consumer sequences delivered at the same moment, which
    /// is what one pull batch is. A batch of 256 is one run of a few
    /// dozen bytes instead of 256 entries, so its commit writes one page.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    runs: Vec<(u64, u64, u64, i64)>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    del: Vec<u64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    rdc: Vec<(u64, u64)>,
}

impl Delta {
    /// Files an added entry, extending the last run when it continues it.
    fn push_added(&mut self, p: PendingEntry) {
        if let Some(r) = self.runs.last_mut() {
            if r.0 + r.2 == p.sseq && r.1 + r.2 == p.dseq && r.3 == p.ts {
                r.2 += 1;
                return;
            }
        }
        self.runs.push((p.sseq, p.dseq, 1, p.ts));
    }

    /// Runs of one go back to single entries, which are shorter.
    fn settle_runs(&mut self) {
        let add = &mut self.add;
        self.runs.retain(|&(sseq, dseq, n, ts)| {
            if n == 1 {
                add.push(PendingEntry { sseq, dseq, ts });
            }
            n > 1
        });
    }

    /// Every added entry, runs expanded. No pending entry is past the
    /// delivered consumer sequence, so a run that claims to reach past it
    /// (a damaged entry with a valid checksum) is cut there instead of
    /// being trusted with the memory it would take.
    fn added(&self) -> impl Iterator<Item = PendingEntry> + '_ {
        let last_dseq = self.delivered.0;
        let runs = self.runs.iter().flat_map(move |&(sseq, dseq, n, ts)| {
            let n = n
                .min((last_dseq + 1).saturating_sub(dseq))
                .min(u64::MAX - sseq);
            (0..n).map(move |i| PendingEntry {
                sseq: sseq + i,
                dseq: dseq + i,
                ts,
            })
        });
        self.add.iter().copied().chain(runs)
    }
}

/// Walks two lists sorted by key (as a consumer's state keeps them) and
/// reports each key in either, with its value on each side.
fn merge_walk<K: Ord + Copy, V: Copy>(
    old: &[V],
    new: &[V],
    key: impl Fn(&V) -> K,
    mut f: impl FnMut(Option<V>, Option<V>),
) {
    let (mut i, mut j) = (0, 0);
    while i < old.len() || j < new.len() {
        let order = match (old.get(i), new.get(j)) {
            (Some(a), Some(b)) => key(a).cmp(&key(b)),
            (Some(_), None) => std::cmp::Ordering::Less,
            _ => std::cmp::Ordering::Greater,
        };
        match order {
            std::cmp::Ordering::Less => {
                f(Some(old[i]), None);
                i += 1;
            }
            std::cmp::Ordering::Greater => {
                f(None, Some(new[j]));
                j += 1;
            }
            std::cmp::Ordering::Equal => {
                f(Some(old[i]), Some(new[j]));
                i += 1;
                j += 1;
            }
        }
    }
}

#[derive(Serialize, Deserialize)]
enum Entry {
    #[serde(rename = "snap")]
    Snap(Box<Snapshot>),
    #[serde(rename = "delta")]
    Delta(Delta),
}

/// Appends a consumer journal entry twice, back to back, so that one
/// damaged place in the file cannot take an ack: replaying an entry
/// sets absolute values ([`apply`] is idempotent), so a whole twin after
/// a damaged copy, or both copies, give the same state. A lost delta
/// would leave acknowledged messages pending, to be delivered again.
fn append_twice(journal: &mut Journal, entry: &[u8]) {
    journal.append(entry);
    journal.append(entry);
}

/// One consumer's journal and what it last wrote.
pub struct ConsumerJournal {
    journal: Journal,
    config: ConsumerConfig,
    created: i64,
    last: ConsumerState,
}

fn diff(old: &ConsumerState, new: &ConsumerState) -> Delta {
    debug_assert!(old.pending.windows(2).all(|w| w[0].sseq < w[1].sseq));
    debug_assert!(new.pending.windows(2).all(|w| w[0].sseq < w[1].sseq));
    let mut d = Delta {
        delivered: (new.delivered_dseq, new.delivered_sseq),
        floor: (new.ack_floor_dseq, new.ack_floor_sseq),
        ..Delta::default()
    };
    merge_walk(
        &old.pending,
        &new.pending,
        |p| p.sseq,
        |a, b| match (a, b) {
            (Some(a), None) => d.del.push(a.sseq),
            (a, Some(b)) if a != Some(b) => d.push_added(b),
            _ => {}
        },
    );
    d.settle_runs();
    merge_walk(
        &old.redelivered,
        &new.redelivered,
        |r| r.0,
        |a, b| match (a, b) {
            (Some((s, _)), None) => d.rdc.push((s, 0)),
            (a, Some(b)) if a != Some(b) => d.rdc.push(b),
            _ => {}
        },
    );
    d
}

fn apply(state: &mut ConsumerState, d: Delta) {
    (state.delivered_dseq, state.delivered_sseq) = d.delivered;
    (state.ack_floor_dseq, state.ack_floor_sseq) = d.floor;
    let mut pending: BTreeMap<u64, PendingEntry> =
        state.pending.iter().map(|p| (p.sseq, *p)).collect();
    for s in &d.del {
        pending.remove(s);
    }
    for p in d.added() {
        pending.insert(p.sseq, p);
    }
    state.pending = pending.into_values().collect();
    let mut rdc: BTreeMap<u64, u64> = state.redelivered.iter().copied().collect();
    for (s, n) in d.rdc {
        if n == 0 {
            rdc.remove(&s);
        } else {
            rdc.insert(s, n);
        }
    }
    state.redelivered = rdc.into_iter().collect();
}

impl ConsumerJournal {
    /// Starts a journal for a new consumer. The returned handle makes it
    /// durable (with its directory entry); a leftover file of the same
    /// name is replaced at once.
    pub fn create(
        dir: Arc<dyn Dir>,
        config: &ConsumerConfig,
        created: i64,
        state: ConsumerState,
    ) -> store::Result<(Self, Option<SyncHandle>)> {
        let (mut journal, replay) = Journal::open(dir, &format!("{}.log", config.name))?;
        let snap = serde_json::to_vec(&Entry::Snap(Box::new(Snapshot {
            config: config.clone(),
            created,
            state: state.clone(),
        })))
        .expect("snapshot serializes");
        let handle = if replay.entries.is_empty() && replay.damaged == 0 && journal.is_empty() {
            append_twice(&mut journal, &snap);
            journal.sync_handle()?
        } else {
            journal.rewrite(&[&snap, &snap])?;
            None
        };
        Ok((
            ConsumerJournal {
                journal,
                config: config.clone(),
                created,
                last: state,
            },
            handle,
        ))
    }

    /// Every consumer journal in `dir`: config, creation time, state.
    /// The consumers whose journals can be read, each with a note on
    /// damage found; and notes on journals that could not be read at all.
    pub fn load_all(dir: Arc<dyn Dir>) -> (Vec<(ConsumerJournal, String)>, Vec<String>) {
        let mut out = Vec::new();
        let mut unreadable = Vec::new();
        let names = dir.list().unwrap_or_default();
        for name in names.iter().filter(|n| n.ends_with(".log")) {
            let (journal, replay) = match Journal::open(dir.clone(), name) {
                Ok(j) => j,
                Err(e) => {
                    unreadable.push(format!(
                        "consumer journal {name}: {e}; consumer not restored"
                    ));
                    continue;
                }
            };
            let mut snap: Option<Snapshot> = None;
            for raw in replay.entries {
                match serde_json::from_slice::<Entry>(&raw) {
                    Ok(Entry::Snap(s)) => snap = Some(*s),
                    Ok(Entry::Delta(d)) => {
                        if let Some(s) = snap.as_mut() {
                            apply(&mut s.state, d);
                        }
                    }
                    Err(_) => {}
                }
            }
            let Some(s) = snap else {
                unreadable.push(format!(
                    "consumer journal {name}: no readable snapshot; consumer not restored"
                ));
                continue;
            };
            let mut notes = Vec::new();
            if replay.damaged > 0 {
                notes.push(format!("{} damaged entries skipped", replay.damaged));
            }
            if replay.torn {
                notes.push("a cut-off last entry was dropped".to_string());
            }
            let note = notes.join("; ");
            out.push((
                ConsumerJournal {
                    journal,
                    config: s.config,
                    created: s.created,
                    last: s.state,
                },
                note,
            ));
        }
        (out, unreadable)
    }

    pub fn config(&self) -> &ConsumerConfig {
        &self.config
    }

    pub fn created(&self) -> i64 {
        self.created
    }

    pub fn state(&self) -> &ConsumerState {
        &self.last
    }

    /// Records `state` (and a new config, if it changed) and returns a
    /// handle that makes it durable.
    pub fn record(
        &mut self,
        config: &ConsumerConfig,
        state: ConsumerState,
    ) -> store::Result<Option<SyncHandle>> {
        if *config != self.config || self.journal.len() > COMPACT_AT {
            self.config = config.clone();
            let snap = Entry::Snap(Box::new(Snapshot {
                config: config.clone(),
                created: self.created,
                state: state.clone(),
            }));
            let snap = serde_json::to_vec(&snap).expect("snapshot serializes");
            self.journal.rewrite(&[&snap, &snap])?;
            self.last = state;
            return Ok(None);
        }
        let delta = Entry::Delta(diff(&self.last, &state));
        let delta = serde_json::to_vec(&delta).expect("delta serializes");
        append_twice(&mut self.journal, &delta);
        self.last = state;
        self.journal.sync_handle()
    }

    /// Removes the journal, durably: a deleted consumer must not come
    /// back after a crash.
    pub fn remove(&self, dir: &dyn Dir) -> store::Result<()> {
        self.journal.remove()?;
        dir.sync_dir()?;
        Ok(())
    }
}

/// A stream's directories: its own (meta.json) and, for file storage,
/// its consumers'.
pub struct StreamDirs {
    pub path: PathBuf,
    pub root: Arc<dyn Dir>,
    pub obs: Option<Arc<dyn Dir>>,
}

/// A stream read back from disk (or just created), with the journals of
/// its persisted consumers.
pub struct Loaded {
    pub stream: Stream,
    /// Where the stream's sources' positions are journaled (file streams).
    pub sources: Option<Journal>,
    pub journals: BTreeMap<String, ConsumerJournal>,
    pub dirs: StreamDirs,
    /// Things worth a log line (damaged journal entries).
    pub notes: Vec<String>,
}

fn open_dirs(path: &Path, storage: Storage) -> std::io::Result<(StreamDirs, Box<dyn MsgStore>)> {
    let root: Arc<dyn Dir> = Arc::new(FsDir::new(path)?);
    match storage {
        Storage::Memory => Ok((
            StreamDirs {
                path: path.to_path_buf(),
                root,
                obs: None,
            },
            Box::new(MemStore::new()),
        )),
        Storage::File => {
            let msgs: Arc<dyn Dir> = Arc::new(FsDir::new(path.join("msgs"))?);
            let obs: Arc<dyn Dir> = Arc::new(FsDir::new(path.join("obs"))?);
            let store =
                FileStore::open(msgs, FileStoreConfig::default()).map_err(std::io::Error::other)?;
            Ok((
                StreamDirs {
                    path: path.to_path_buf(),
                    root,
                    obs: Some(obs),
                },
                Box::new(store),
            ))
        }
    }
}

/// Creates a new stream's files; durable when it returns.
pub fn create_stream(path: &Path, config: StreamConfig, now: i64) -> std::io::Result<Loaded> {
    let (dirs, store) = open_dirs(path, config.storage)?;
    if let Some(obs) = &dirs.obs {
        obs.sync_dir()?;
    }
    write_stream_meta(dirs.root.as_ref(), &config, now)?;
    if let Some(parent) = path.parent() {
        std::fs::File::open(parent)?.sync_all()?;
    }
    let file = config.storage == Storage::File;
    let stream =
        Stream::create(config, now, store).map_err(|e| std::io::Error::other(e.description))?;
    let sources = if file {
        Some(
            Journal::open(dirs.root.clone(), POSITIONS_JOURNAL)
                .map_err(std::io::Error::other)?
                .0,
        )
    } else {
        None
    };
    Ok(Loaded {
        stream,
        sources,
        journals: BTreeMap::new(),
        dirs,
        notes: Vec::new(),
    })
}

/// Reads a stream back from its directory. `None` when it has no
/// meta.json (a create or delete that did not finish) or was a memory
/// stream: the caller removes the directory.
pub fn open_stream(path: &Path, now: i64) -> Result<Option<Loaded>, String> {
    let root = FsDir::new(path).map_err(|e| e.to_string())?;
    match root.read_all("meta.json") {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("meta.json: {e}")),
        Ok(_) => {}
    }
    let (config, created) = read_stream_meta(&root).map_err(|e| format!("meta.json: {e}"))?;
    if config.storage == Storage::Memory {
        // Memory streams live as long as the process, as in nats-server.
        return Ok(None);
    }
    let (dirs, store) = open_dirs(path, config.storage).map_err(|e| e.to_string())?;
    let mut stream = Stream::recover(config, created, store, now);
    let mut journals = BTreeMap::new();
    let mut notes = Vec::new();
    if let Some(obs) = &dirs.obs {
        let (loaded, unreadable) = ConsumerJournal::load_all(obs.clone());
        notes.extend(unreadable);
        for (j, note) in loaded {
            if !note.is_empty() {
                notes.push(format!("consumer '{}': {note}", j.config().name));
            }
            stream.restore_consumer(j.config().clone(), j.created(), j.state(), now);
            journals.insert(j.config().name.clone(), j);
        }
    }
    let sources = match &dirs.obs {
        Some(_) => {
            let (journal, positions) = load_positions(&dirs.root);
            stream.restore_source_positions(&positions);
            journal
        }
        None => {
            stream.restore_source_positions(&BTreeMap::new());
            None
        }
    };
    if let Err(e) = stream.reconcile() {
        notes.push(format!("retention check after restart failed: {e}"));
    }
    Ok(Some(Loaded {
        stream,
        sources,
        journals,
        dirs,
        notes,
    }))
}

/// Where a stream journals its sources' positions (a file stream).
const POSITIONS_JOURNAL: &str = "sources.log";

/// Positions journaled for a stream, newest entry wins.
fn load_positions(dir: &Arc<dyn Dir>) -> (Option<Journal>, BTreeMap<String, u64>) {
    match Journal::open(dir.clone(), POSITIONS_JOURNAL) {
        Ok((j, replay)) => {
            let latest = replay
                .entries
                .iter()
                .rev()
                .find_map(|e| serde_json::from_slice::<BTreeMap<String, u64>>(e).ok())
                .unwrap_or_default();
            (Some(j), latest)
        }
        Err(e) => {
            tracing::warn!("sources journal could not be read: {e}");
            (None, BTreeMap::new())
        }
    }
}

/// Removes a stream's files: meta.json first (durably), so a crash part
/// way leaves a directory recovery finishes removing, never a stream
/// with half its data.
pub fn remove_stream(dirs: &StreamDirs) -> std::io::Result<()> {
    dirs.root.remove("meta.json")?;
    dirs.root.sync_dir()?;
    std::fs::remove_dir_all(&dirs.path)?;
    if let Some(parent) = dirs.path.parent() {
        std::fs::File::open(parent)?.sync_all()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deltas_round_trip() {
        let a = ConsumerState {
            delivered_dseq: 3,
            delivered_sseq: 10,
            ack_floor_dseq: 1,
            ack_floor_sseq: 5,
            pending: vec![
                PendingEntry {
                    sseq: 7,
                    dseq: 2,
                    ts: 1,
                },
                PendingEntry {
                    sseq: 10,
                    dseq: 3,
                    ts: 2,
                },
            ],
            redelivered: vec![(7, 1)],
        };
        let b = ConsumerState {
            delivered_dseq: 5,
            delivered_sseq: 12,
            ack_floor_dseq: 2,
            ack_floor_sseq: 7,
            pending: vec![
                PendingEntry {
                    sseq: 10,
                    dseq: 3,
                    ts: 9,
                },
                PendingEntry {
                    sseq: 12,
                    dseq: 5,
                    ts: 3,
                },
            ],
            redelivered: vec![(10, 2)],
        };
        let mut c = a.clone();
        apply(&mut c, diff(&a, &b));
        assert_eq!(c, b);
    }

    /// A flipped bit anywhere in a consumer journal takes no ack: every
    /// entry has a twin, so the consumer reads back as last recorded, its
    /// acknowledged messages gone from pending. (A damaged single copy
    /// would leave them pending, delivered again.)
    #[test]
    fn a_flip_anywhere_in_a_consumer_journal_takes_no_ack() {
        let dir = store::MemDir::new();
        let config = ConsumerConfig {
            name: "c".to_string(),
            durable_name: "c".to_string(),
            ..ConsumerConfig::default()
        };
        let shared: Arc<dyn Dir> = Arc::new(dir.clone());
        let (mut j, h) =
            ConsumerJournal::create(shared, &config, 1, ConsumerState::default()).unwrap();
        h.expect("a new journal syncs").sync().unwrap();
        let delivered = |n: u64, acked: &[u64]| ConsumerState {
            delivered_dseq: n,
            delivered_sseq: n,
            ack_floor_dseq: 0,
            ack_floor_sseq: 0,
            pending: (1..=n)
                .filter(|s| !acked.contains(s))
                .map(|s| entry(s, s, s as i64))
                .collect(),
            redelivered: Vec::new(),
        };
        let mut last = ConsumerState::default();
        for state in [
            delivered(6, &[]),
            delivered(6, &[2]),
            delivered(8, &[2, 5]),
            delivered(8, &[2, 5, 7]),
        ] {
            if let Some(h) = j.record(&config, state.clone()).unwrap() {
                h.sync().unwrap();
            }
            last = state;
        }
        let names = dir.names();
        assert_eq!(names, vec!["c.log".to_string()]);
        for at in 0..dir.file_len("c.log") {
            let damaged = dir.deep_clone();
            damaged.flip_bit("c.log", at, (at % 8) as u8);
            let (loaded, unreadable) = ConsumerJournal::load_all(Arc::new(damaged));
            assert!(unreadable.is_empty(), "at {at}: {unreadable:?}");
            assert_eq!(loaded.len(), 1, "at {at}");
            assert_eq!(loaded[0].0.state(), &last, "at {at}: {}", loaded[0].1);
        }
    }

    #[test]
    fn an_entry_applied_twice_is_applied_once() {
        let a = ConsumerState::default();
        let b = ConsumerState {
            delivered_dseq: 4,
            delivered_sseq: 9,
            ack_floor_dseq: 1,
            ack_floor_sseq: 6,
            pending: vec![entry(7, 2, 1), entry(8, 3, 1), entry(9, 4, 2)],
            redelivered: vec![(7, 2)],
        };
        let (mut once, mut twice) = (a.clone(), a.clone());
        apply(&mut once, diff(&a, &b));
        apply(&mut twice, diff(&a, &b));
        apply(&mut twice, diff(&a, &b));
        assert_eq!(once, b);
        assert_eq!(twice, b);
    }

    fn entry(sseq: u64, dseq: u64, ts: i64) -> PendingEntry {
        PendingEntry { sseq, dseq, ts }
    }

    #[test]
    fn a_pull_batch_is_one_run() {
        let old = ConsumerState {
            delivered_dseq: 2,
            delivered_sseq: 2,
            pending: vec![entry(1, 1, 5), entry(2, 2, 5)],
            ..ConsumerState::default()
        };
        let mut new = ConsumerState {
            delivered_dseq: 258,
            delivered_sseq: 258,
            ack_floor_dseq: 2,
            ack_floor_sseq: 2,
            ..ConsumerState::default()
        };
        new.pending = (3..=258).map(|n| entry(n, n, 9)).collect();
        let d = diff(&old, &new);
        assert_eq!(d.runs, vec![(3, 3, 256, 9)]);
        assert!(d.add.is_empty());
        assert_eq!(d.del, vec![1, 2]);
        let json = serde_json::to_vec(&Entry::Delta(d)).unwrap();
        assert!(json.len() < 120, "{}", String::from_utf8_lossy(&json));
        let Entry::Delta(back) = serde_json::from_slice(&json).unwrap() else {
            panic!("not a delta");
        };
        let mut state = old.clone();
        apply(&mut state, back);
        assert_eq!(state, new);
    }

    #[test]
    fn runs_break_where_sequences_or_times_do() {
        let old = ConsumerState {
            pending: vec![entry(4, 4, 1)],
            redelivered: vec![(4, 1), (6, 2)],
            ..ConsumerState::default()
        };
        let new = ConsumerState {
            delivered_dseq: 12,
            delivered_sseq: 20,
            pending: vec![
                // Redelivered: a new consumer sequence and time.
                entry(4, 9, 3),
                entry(5, 10, 3),
                // A gap in stream sequences (filtered out).
                entry(8, 11, 3),
                entry(9, 12, 3),
                // Same sequences on, another moment.
                entry(10, 13, 4),
                entry(20, 14, 4),
            ],
            redelivered: vec![(4, 2), (8, 1)],
            ..ConsumerState::default()
        };
        let d = diff(&old, &new);
        assert_eq!(d.runs, vec![(4, 9, 2, 3), (8, 11, 2, 3)]);
        assert_eq!(d.add, vec![entry(10, 13, 4), entry(20, 14, 4)]);
        assert_eq!(d.rdc, vec![(4, 2), (6, 0), (8, 1)]);
        let mut state = old.clone();
        apply(&mut state, d);
        assert_eq!(state, new);
    }

    #[test]
    fn a_run_past_the_delivered_sequence_is_cut_there() {
        let raw = br#"{"delta":{"delivered":[12,12],"floor":[0,0],"runs":[[10,10,18446744073709551615,1]]}}"#;
        let Entry::Delta(d) = serde_json::from_slice(raw).unwrap() else {
            panic!("not a delta");
        };
        let mut state = ConsumerState::default();
        apply(&mut state, d);
        let seqs: Vec<u64> = state.pending.iter().map(|p| p.dseq).collect();
        assert_eq!(seqs, vec![10, 11, 12]);
    }

    #[test]
    fn deltas_written_before_runs_still_apply() {
        let raw = br#"{"delta":{"delivered":[2,7],"floor":[0,0],"add":[{"sseq":7,"dseq":2,"ts":1}],"rdc":[[7,1]]}}"#;
        let Entry::Delta(d) = serde_json::from_slice(raw).unwrap() else {
            panic!("not a delta");
        };
        let mut state = ConsumerState::default();
        apply(&mut state, d);
        assert_eq!(state.pending, vec![entry(7, 2, 1)]);
        assert_eq!(state.redelivered, vec![(7, 1)]);
        assert_eq!((state.delivered_dseq, state.delivered_sseq), (2, 7));
    }
}
