//! Where a stream replica keeps its messages, and how it comes back.
//!
//! A replica of a `storage: file` stream keeps them in a `FileStore` in
//! `<store_dir>/jetstream/<account>/replicas/<group>/`; its Raft log's snapshots
//! carry the stream's state, not its messages
//! (`StreamMachine::snapshot_state`), and the store is marked at each
//! snapshot's index (`MsgStore::mark`), so a restart opens it at exactly
//! the snapshot's state and the log's entries after it replay on top. A
//! replica whose store does not hold a snapshot's messages fetches them
//! from the leader (`jsservice::fetch`).
//!
//! A `storage: memory` stream keeps them in a `MemStore`, and its
//! snapshots carry them (`StreamMachine::snapshot`), as nothing of the
//! store outlives the process.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use jetstream::api::{Storage, StreamConfig};
use jsservice::fetch::{self, Reopened};
use jsservice::meta_sm::{Meta, StreamAssignment};
use jsservice::replica::{self, Home, Start};
use replication::engine::Engine;

use jsservice::stream_sm::{replica_store, StreamMachine};
use store::{Dir, FileStore, FileStoreConfig, FsDir, MsgStore, StoreError};
use tracing::warn;

/// A replica's store directory.
pub fn replica_dir(store_dir: &Path, account: &str, group: u64) -> PathBuf {
    replicas_root(store_dir, account).join(format!("{group:016x}"))
}

pub fn replicas_root(store_dir: &Path, account: &str) -> PathBuf {
    store_dir.join("jetstream").join(account).join("replicas")
}

/// Removes what this server keeps of streams that no longer want it, as
/// nats-server cleans up orphaned streams: the Raft logs of deleted
/// streams' groups, and replica store directories that have neither a
/// log nor a node here and whose group the meta state knows and does not
/// assign here. Both are left behind only by a crash between the steps
/// of a removal. Run on the engine's thread (`Node::call`), where
/// replicas are started, so none can start meanwhile.
///
/// Only facts that cannot be undone are trusted, so a meta state that is
/// behind the leader's deletes nothing wrongly: a group id is never
/// handed out again, so a deleted stream's group stays deleted; and a
/// directory with no log never held more than its log did.
pub fn sweep_orphans(engine: &mut Engine, meta: &Meta, running: impl Fn(u64) -> bool, root: &Path) {
    for group in engine.idle_logs() {
        if meta.group_deleted(group) {
            warn!(
                "JetStream cluster found the raft log of deleted raft group {group}, will clean up"
            );
            if let Err(e) = engine.delete_log(group) {
                warn!("raft group {group}: {e}");
            }
        }
    }
    let Ok(dirs) = std::fs::read_dir(root) else {
        return;
    };
    let me = engine.id();
    let logs: std::collections::BTreeSet<u64> = engine.logs().into_iter().collect();
    for entry in dirs.flatten() {
        let name = entry.file_name();
        let Some(group) = name.to_str().and_then(|n| u64::from_str_radix(n, 16).ok()) else {
            continue;
        };
        let known = meta.group_deleted(group) || meta.stream_of_group(group).is_some();
        let assigned = meta
            .stream_of_group(group)
            .is_some_and(|a| a.peers.contains(&me));
        let kept = engine.has_group(group) || logs.contains(&group) || running(group);
        if known && !assigned && !kept {
            warn!(
                "JetStream cluster found an orphaned replica store {}, will clean up",
                entry.path().display()
            );
            if let Err(e) = std::fs::remove_dir_all(entry.path()) {
                warn!("{}: {e}", entry.path().display());
            }
        }
    }
}

/// The config a replica's log replays from the start under: the one the
/// stream was created with (a snapshot, if any, brings its own).
pub fn initial_config(a: &StreamAssignment) -> Result<StreamConfig, String> {
    let initial = match a.initial.is_empty() {
        true => &a.config,
        false => &a.initial,
    };
    serde_json::from_str(initial).map_err(|e| format!("assigned config does not decode: {e}"))
}

/// A replica as it comes back.
pub enum Opened {
    /// Its machine, as of the log's snapshot (or new); the log's entries
    /// after it follow. `mark`: what the store was opened at.
    Ready {
        machine: Box<StreamMachine>,
        mark: u64,
    },
    /// The store does not hold the log's snapshot's messages: the machine
    /// must wait for a fetch into `store` (`jsservice::fetch::Fetch`).
    /// `mark`: what the store was opened at.
    Fetch {
        config: Box<StreamConfig>,
        index: u64,
        state: Bytes,
        store: Box<dyn MsgStore>,
        mark: u64,
    },
}

impl Opened {
    /// The replica's start; for a fetch, the machine is a placeholder over
    /// an empty store until the fetch is done.
    pub fn into_start(self, created: i64) -> Result<Start, String> {
        match self {
            Opened::Ready { machine, mark } => Ok((*machine, mark, None)),
            Opened::Fetch {
                config,
                index,
                state,
                store,
                mark,
            } => {
                let machine = replica::placeholder(*config, created)
                    .ok_or("its config does not make a stream")?;
                Ok((machine, mark, Some((index, state, store))))
            }
        }
    }
}

/// The store of a `storage: file` replica, in `dir`.
pub struct ReplicaStore {
    pub dir: Arc<dyn Dir>,
    pub path: PathBuf,
}

impl ReplicaStore {
    pub fn new(path: PathBuf) -> Result<ReplicaStore, String> {
        let dir = FsDir::new(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(ReplicaStore {
            dir: Arc::new(dir),
            path,
        })
    }

    /// The store opened at the state after log index `mark` (0: empty).
    pub fn open_at(&self, mark: u64) -> Result<Box<dyn MsgStore>, StoreError> {
        let store = FileStore::open_at(self.dir.clone(), FileStoreConfig::default(), mark)?;
        Ok(Box::new(store))
    }
}

/// Opens a replica: `stored` is its log's snapshot (index, data), if any;
/// `config` and `created`, the stream's as first assigned, for a replica
/// without one. `file` is `None` for a memory stream.
pub fn open(
    file: Option<&ReplicaStore>,
    config: StreamConfig,
    created: i64,
    stored: Option<(u64, Bytes)>,
) -> Result<Opened, String> {
    let Some(file) = file else {
        return open_in_memory(config, created, stored);
    };
    let Some((index, data)) = stored else {
        let store = file.open_at(0).map_err(|e| e.to_string())?;
        let machine = StreamMachine::new(config, created, store).map_err(|e| e.description)?;
        return Ok(Opened::Ready {
            machine: Box::new(machine),
            mark: 0,
        });
    };
    if !StreamMachine::is_state_snapshot(&data) {
        // A log from before state snapshots.
        let machine = restore_whole(Some(file), index, &data)?;
        return Ok(Opened::Ready {
            machine: Box::new(machine),
            mark: index,
        });
    }
    let (config, _) = StreamMachine::snapshot_summary(&data)
        .map_err(|e| format!("its stored snapshot at {index} does not decode ({e})"))?;
    match fetch::reopen(file.dir.clone(), FileStoreConfig::default(), index, &data)? {
        Reopened::Ready { machine, mark } => Ok(Opened::Ready { machine, mark }),
        Reopened::Fetch { store, mark, why } => {
            if let Some(why) = why {
                warn!(
                    "replica store {}: {why}; to be fetched from the leader",
                    file.path.display()
                );
            }
            Ok(Opened::Fetch {
                config: Box::new(config),
                index,
                state: data,
                store,
                mark,
            })
        }
    }
}

fn open_in_memory(
    config: StreamConfig,
    created: i64,
    stored: Option<(u64, Bytes)>,
) -> Result<Opened, String> {
    debug_assert_eq!(config.storage, Storage::Memory);
    let machine = match stored {
        None => {
            let store = replica_store(&config);
            StreamMachine::new(config, created, store).map_err(|e| e.description)?
        }
        Some((index, data)) => restore_whole(None, index, &data)?,
    };
    Ok(Opened::Ready {
        machine: Box::new(machine),
        mark: 0,
    })
}

/// A snapshot that carries its messages (a memory stream's, or a file
/// stream's from a log older than state snapshots), restored into an
/// emptied store; a file stream's store is marked at `index`.
pub fn restore_whole(
    file: Option<&ReplicaStore>,
    index: u64,
    data: &[u8],
) -> Result<StreamMachine, String> {
    let mut emptied = file
        .map(|f| f.open_at(0))
        .transpose()
        .map_err(|e| format!("its store could not be emptied ({e})"))?;
    let mut machine = StreamMachine::restore(data, |config| {
        emptied.take().unwrap_or_else(|| replica_store(config))
    })
    .map_err(|e| format!("the snapshot at {index} does not decode ({e})"))?;
    if file.is_some() {
        machine
            .stream_mut()
            .store_mut()
            .mark(index)
            .map_err(|e| format!("its store could not be marked ({e})"))?;
    }
    Ok(machine)
}

/// Where a replica's store lives on this server, as the replica core
/// opens it (`jsservice::replica`).
pub struct ServerHome {
    /// A file stream's store directory; `None` for a memory stream.
    pub file: Option<ReplicaStore>,
    meta: Arc<parking_lot::Mutex<Meta>>,
    name: String,
    group: u64,
}

impl ServerHome {
    pub fn new(
        file: Option<ReplicaStore>,
        meta: Arc<parking_lot::Mutex<Meta>>,
        name: String,
        group: u64,
    ) -> ServerHome {
        ServerHome {
            file,
            meta,
            name,
            group,
        }
    }
}

impl Home for ServerHome {
    fn is_file(&self) -> bool {
        self.file.is_some()
    }

    fn empty(&self, config: &StreamConfig) -> Result<Box<dyn MsgStore>, String> {
        match &self.file {
            Some(file) => file.open_at(0).map_err(|e| e.to_string()),
            None => Ok(replica_store(config)),
        }
    }

    /// With no snapshot, the log replays from the start under the config
    /// the stream was created with, from its assignment.
    fn reopen(
        &self,
        config: StreamConfig,
        created: i64,
        stored: Option<(u64, Bytes)>,
    ) -> Result<Start, String> {
        let config = match &stored {
            Some(_) => config,
            None => {
                let meta = self.meta.lock();
                let assignment = meta
                    .stream_of_group(self.group)
                    .filter(|a| a.name == self.name)
                    .ok_or("its assignment is gone")?;
                initial_config(assignment)?
            }
        };
        open(self.file.as_ref(), config, created, stored)?.into_start(created)
    }

    fn restore_whole(&self, index: u64, data: &[u8]) -> Result<StreamMachine, String> {
        restore_whole(self.file.as_ref(), index, data)
    }
}
