//! JetStream on one server: the driver around the sans-IO stream and
//! consumer state machines of the `jetstream` crate.
//!
//! What a request asks, what it may do and what it answers are decided in
//! `jsservice`; this driver moves the bytes and makes writes durable.
//!
//! - `api`: the `$JS.API.>` dispatcher. Account-level requests (create,
//!   update, delete, names, list, account info) are decided on its task,
//!   one at a time, so checks across streams (subject overlap, limits)
//!   never race. Everything about one stream goes to that stream's actor.
//! - `actor`: one task per stream owns its state machine. It takes
//!   commands in batches, applies them as inputs, makes the batch's writes
//!   durable through the group committer, and only then releases what the
//!   batch produced (PubAcks, API replies, deliveries, double-ack replies).
//! - `commit`: the group-commit thread.
//! - `persist`: what a stream keeps on disk besides messages.
//! - `sinks`: the internal subscriptions that feed actors.
//! - `not_enabled`: the answers of accounts JetStream does not serve.
//!
//! Invariant: nothing a client can observe (a PubAck, an ack reply, an
//! API success, a delivered message) leaves an actor before the writes it
//! depends on are durable, unless the user chose a `sync_interval`.

mod actor;
mod api;
mod commit;
pub mod events;
pub mod not_enabled;
mod persist;
pub(crate) mod sinks;
pub mod stream;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use jetstream::api::{AccountTiers, ApiError, Storage, StreamConfig, StreamInfo, E};
use jetstream::output::OutMsg;
use jsservice::account::{self, Limits};
use jsservice::reply::Count;
use jsservice::request::Inbound;
use parking_lot::RwLock;
use tokio::sync::{mpsc, oneshot};
use tracing::{debug, error, info, warn};

use commit::Committer;
pub use stream::{Cmd, StreamHandle};

use crate::js::stream::PublishOut;
use flotilla_core::bus::Bus;

/// How acknowledged writes reach the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncPolicy {
    /// fsync before every PubAck and ack reply (the default).
    Always,
    /// Reply once written; fsync every interval (nats-server's model).
    Interval(Duration),
}

/// What the JetStreams of one server's accounts share: the storage they
/// use together (the server's limits bound the sum), and one server's
/// group committer.
#[derive(Default)]
pub struct Shared {
    memory_used: AtomicI64,
    store_used: AtomicI64,
    /// Told the system account that the disk is full (once, as
    /// nats-server tells it before it stops JetStream).
    told_out_of_space: std::sync::atomic::AtomicBool,
    committer: std::sync::OnceLock<Committer>,
}

impl Shared {
    /// Commit requests queued for the group committer's thread, or being
    /// synced by it.
    pub fn commits_queued(&self) -> usize {
        self.committer.get().map_or(0, |c| c.queued())
    }

    /// How long durable writes took: each latency bucket's count (bounds
    /// [`store::LATENCY_BOUNDS`] seconds, then one for slower) and the total
    /// seconds; `None` before the first stream starts the committer.
    pub fn write_latency(&self) -> Option<(Vec<u64>, f64)> {
        self.committer.get().map(|c| c.latency().snapshot())
    }

    /// Bytes used by every account: (memory, file).
    pub fn usage(&self) -> (u64, u64) {
        (
            self.memory_used.load(Ordering::Relaxed).max(0) as u64,
            self.store_used.load(Ordering::Relaxed).max(0) as u64,
        )
    }
}

/// One account's JetStream on this server.
pub struct JetStream {
    pub bus: Bus,
    pub store_dir: PathBuf,
    /// The account JetStream serves, and its limits.
    pub account: String,
    /// What monitoring calls the account (nats-server's name tag: an
    /// account JWT's `name`, else the account's name).
    pub name_tag: String,
    pub account_limits: AccountTiers,
    /// `jetstream { domain }`.
    pub domain: Option<String>,
    root: PathBuf,
    /// What the server's accounts share; its committer is set for one
    /// server's streams (a cluster's replicas are durable through their
    /// Raft logs).
    pub shared: Arc<Shared>,
    streams: RwLock<BTreeMap<String, Arc<StreamHandle>>>,
    pub api_total: AtomicU64,
    pub api_errors: AtomicU64,
    /// Stores a read found damaged while running, and of those, the ones
    /// repaired (reloaded, or fetched again from a peer): `/varz` and
    /// `/jsz` `store_damage`.
    pub damage_found: AtomicU64,
    pub damage_repaired: AtomicU64,
    /// Server-wide limits in bytes.
    pub max_memory: i64,
    pub max_store: i64,
    /// What this account's streams use on this server.
    memory_used: AtomicI64,
    store_used: AtomicI64,
    pub sync: SyncPolicy,
    /// Replies made where no task can publish (a publish refused by a sink).
    bounce: mpsc::UnboundedSender<OutMsg>,
    api_tx: mpsc::UnboundedSender<Inbound>,
    /// API requests waiting for their answer's audit.
    audits: events::Audits,
}

/// Sends what sinks refused, as they come.
async fn send_bounced(bus: Bus, mut rx: mpsc::UnboundedReceiver<OutMsg>) {
    let mut publisher = bus.publisher();
    while let Some(m) = rx.recv().await {
        publisher.publish_out(&m);
        while let Ok(m) = rx.try_recv() {
            publisher.publish_out(&m);
        }
        publisher.flush();
    }
}

/// Milliseconds on a monotonic clock, from the first call (for the time
/// sans-IO pieces take as input).
pub fn mono_ms() -> u64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_millis() as u64
}

/// A consumer name as nats-server generates one: 8 characters of
/// `[0-9A-Za-z]`.
pub fn new_consumer_name() -> String {
    const ALPHABET: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    (0..8)
        .map(|_| ALPHABET[fastrand::usize(..ALPHABET.len())] as char)
        .collect()
}

/// Unix nanoseconds now.
pub fn wall_clock() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

fn friendly_bytes(b: i64) -> String {
    const UNITS: [&str; 5] = ["B", "KB", "MB", "GB", "TB"];
    let mut v = b as f64;
    let mut i = 0;
    while v >= 1024.0 && i < UNITS.len() - 1 {
        v /= 1024.0;
        i += 1;
    }
    format!("{v:.2} {}", UNITS[i])
}

/// Makes a directory's entry in its parent durable.
fn sync_parent(path: &Path) -> std::io::Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::File::open(parent)?.sync_all()?;
    }
    Ok(())
}

pub struct Settings {
    pub store_dir: PathBuf,
    /// Bytes; 0 or less picks nats-server's default (three quarters of
    /// the machine's memory, three quarters of the free disk).
    pub max_memory: i64,
    pub max_store: i64,
    pub sync: SyncPolicy,
    /// In a cluster: no local streams, no API of its own.
    pub clustered: bool,
    /// The account JetStream serves (its store is
    /// `<store_dir>/jetstream/<account>`), and its limits.
    pub account: String,
    pub account_limits: AccountTiers,
    /// An account JWT's `name`, when it has one.
    pub name_tag: Option<String>,
    pub domain: Option<String>,
    /// What this server's accounts share (one per server).
    pub shared: Arc<Shared>,
}

/// Store files kept open at most, however many streams there are.
const MAX_OPEN_FILES: usize = 512;

/// How many files the stores may keep open: a quarter of the process's
/// descriptor limit (raised to its hard maximum first, as Go programs do),
/// leaving the rest to client connections.
fn open_file_budget() -> usize {
    // SAFETY: getrlimit/setrlimit on a zeroed struct we own.
    let mut lim: libc::rlimit = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return 256;
    }
    if lim.rlim_cur < lim.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: lim.rlim_max,
            rlim_max: lim.rlim_max,
        };
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            lim.rlim_cur = lim.rlim_max;
        }
    }
    ((lim.rlim_cur / 4) as usize).clamp(64, MAX_OPEN_FILES)
}

/// Three quarters of physical memory, as nats-server defaults.
fn default_max_memory() -> i64 {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let kb = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<i64>().ok())
        .unwrap_or(256 * 1024);
    kb * 1024 / 4 * 3
}

/// Three quarters of the free space where the store lives.
fn default_max_store(dir: &Path) -> i64 {
    use std::os::unix::ffi::OsStrExt;
    let Ok(path) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
        return 1 << 40;
    };
    // SAFETY: statvfs(3) fills the zeroed struct for a valid C string.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(path.as_ptr(), &mut st) } != 0 {
        return 1 << 40;
    }
    (st.f_bavail as u64 * st.f_frsize as u64 / 4 * 3) as i64
}

impl JetStream {
    /// Opens the store directory, recovers every stream in it, and starts
    /// serving the API.
    pub fn start(bus: Bus, settings: Settings) -> anyhow::Result<Arc<JetStream>> {
        use anyhow::Context;
        let root = persist::streams_root(&settings.store_dir, &settings.account);
        std::fs::create_dir_all(&root)
            .with_context(|| format!("could not create the store directory {}", root.display()))?;
        // The chain of directories must survive a crash too.
        let mut p = root.as_path();
        while let Some(parent) = p.parent() {
            if parent.as_os_str().is_empty() || p == settings.store_dir {
                break;
            }
            sync_parent(p).ok();
            p = parent;
        }
        store::set_open_file_limit(open_file_budget());
        let (bounce, bounce_rx) = mpsc::unbounded_channel();
        let (api_tx, api_rx) = mpsc::unbounded_channel();
        let js = Arc::new(JetStream {
            bus,
            store_dir: settings.store_dir.clone(),
            account: settings.account.clone(),
            name_tag: settings
                .name_tag
                .clone()
                .unwrap_or_else(|| settings.account.clone()),
            account_limits: settings.account_limits,
            domain: settings.domain.clone(),
            root,
            shared: settings.shared.clone(),
            streams: RwLock::new(BTreeMap::new()),
            api_total: AtomicU64::new(0),
            api_errors: AtomicU64::new(0),
            damage_found: AtomicU64::new(0),
            damage_repaired: AtomicU64::new(0),
            max_memory: if settings.max_memory > 0 {
                settings.max_memory
            } else {
                default_max_memory()
            },
            max_store: if settings.max_store > 0 {
                settings.max_store
            } else {
                default_max_store(&settings.store_dir)
            },
            memory_used: AtomicI64::new(0),
            store_used: AtomicI64::new(0),
            sync: settings.sync,
            bounce,
            api_tx,
            audits: Default::default(),
        });
        if settings.shared.committer.get().is_none() {
            // The first account's start tells the server's settings.
            info!("Starting JetStream");
            info!("  Max Memory:      {}", friendly_bytes(js.max_memory));
            info!("  Max Storage:     {}", friendly_bytes(js.max_store));
            info!("  Store Directory: \"{}\"", settings.store_dir.display());
            match settings.sync {
                SyncPolicy::Always => info!("  Sync:            always (fsync before every ack)"),
                SyncPolicy::Interval(d) => warn!("  Sync:            every {d:?}: acknowledged writes since the last sync are lost if the machine fails"),
            }
        }
        tokio::spawn(send_bounced(js.bus.clone(), bounce_rx));
        if settings.clustered {
            // Streams are replicated (`jscluster`), their replicas
            // registered here as they start.
            info!("JetStream started in clustered mode");
            return Ok(js);
        }
        js.shared.committer.get_or_init(Committer::start);
        js.recover();
        sinks::subscribe_api(&js).context("could not subscribe to the JetStream API")?;
        tokio::spawn(api::run(js.clone(), api_rx));
        info!(
            "JetStream started in account {} with {} streams",
            js.account,
            js.streams.read().len()
        );
        Ok(js)
    }

    fn recover(self: &Arc<Self>) {
        let Ok(entries) = std::fs::read_dir(&self.root) else {
            return;
        };
        let mut dirs: Vec<PathBuf> = entries
            .filter_map(|e| e.ok())
            .filter(|e| e.file_type().map(|t| t.is_dir()).unwrap_or(false))
            .map(|e| e.path())
            .collect();
        dirs.sort();
        let now = wall_clock();
        for dir in dirs {
            match persist::open_stream(&dir, now) {
                Ok(Some(loaded)) => {
                    let name = loaded.stream.config.name.clone();
                    let st = loaded.stream.store().state();
                    if !st.lost.is_empty() {
                        error!(
                            "Stream '{name}' recovered with {} messages lost to damaged storage ({} bytes): sequences {:?}",
                            st.lost.len(),
                            st.lost_bytes,
                            st.lost
                        );
                    }
                    for note in &loaded.notes {
                        warn!("Stream '{name}': {note}");
                    }
                    info!(
                        "  Restored {} messages for stream {}",
                        st.msgs,
                        self.label(&name)
                    );
                    if let Err(e) = self.launch(loaded) {
                        error!("Stream '{name}' could not be started: {e}");
                    }
                }
                Ok(None) => {
                    // A memory stream of an earlier run, or a stream whose
                    // create or delete was cut short.
                    debug!("Removing stream directory {}", dir.display());
                    let _ = std::fs::remove_dir_all(&dir);
                }
                Err(e) => error!("Stream in {} could not be recovered: {e}", dir.display()),
            }
        }
    }

    /// Starts the actor for a loaded stream and subscribes its subjects.
    fn launch(self: &Arc<Self>, loaded: persist::Loaded) -> Result<Arc<StreamHandle>, ApiError> {
        let (handle, rx) = StreamHandle::new(&loaded.stream);
        let config = loaded.stream.config.clone();
        self.add_usage(config.storage, handle.bytes.load(Ordering::Relaxed) as i64);
        sinks::subscribe_stream(self, &handle, &config.subjects)
            .map_err(|e| E::STREAM_CREATE.with("err", e))?;
        self.streams
            .write()
            .insert(config.name.clone(), handle.clone());
        tokio::spawn(actor::run(self.clone(), handle.clone(), loaded, rx));
        Ok(handle)
    }

    /// Registers a stream on this server (a cluster's replica, started
    /// by its meta assignment).
    pub fn register(&self, handle: Arc<StreamHandle>) {
        self.add_usage(handle.storage, handle.bytes.load(Ordering::Relaxed) as i64);
        self.streams.write().insert(handle.name.clone(), handle);
    }

    /// Forgets a stream registered with `register`, if it is still the
    /// one under its name.
    pub fn unregister(&self, handle: &Arc<StreamHandle>) {
        let mut streams = self.streams.write();
        if streams
            .get(&handle.name)
            .is_some_and(|h| Arc::ptr_eq(h, handle))
        {
            streams.remove(&handle.name);
            let bytes = handle.bytes.swap(0, Ordering::Relaxed);
            self.add_usage(handle.storage, -(bytes as i64));
        }
    }

    /// How logs name a stream: `'<account> > <stream>'`.
    pub fn label(&self, name: &str) -> String {
        format!("'{} > {name}'", self.account)
    }

    pub fn stream(&self, name: &str) -> Option<Arc<StreamHandle>> {
        self.streams.read().get(name).cloned()
    }

    pub fn streams(&self) -> Vec<Arc<StreamHandle>> {
        self.streams.read().values().cloned().collect()
    }

    fn stream_dir(&self, name: &str) -> PathBuf {
        self.root.join(name)
    }

    /// The server's storage limits and the account's, for the account's
    /// checks.
    pub fn limits(&self) -> Limits {
        Limits {
            max_memory: self.max_memory,
            max_store: self.max_store,
            account: self.account_limits.clone(),
        }
    }

    /// Counts an API answer in account info's statistics.
    pub fn count(&self, count: Count) {
        match count {
            Count::No => {}
            Count::Call => {
                self.api_total.fetch_add(1, Ordering::Relaxed);
            }
            Count::Error => {
                self.api_total.fetch_add(1, Ordering::Relaxed);
                self.api_errors.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Counts `delta` bytes of `storage` in the account's usage and in
    /// the server's.
    pub fn add_usage(&self, storage: Storage, delta: i64) {
        let (mine, all) = match storage {
            Storage::Memory => (&self.memory_used, &self.shared.memory_used),
            Storage::File => (&self.store_used, &self.shared.store_used),
        };
        let before = mine.fetch_add(delta, Ordering::Relaxed);
        all.fetch_add(delta, Ordering::Relaxed);
        // What is taken away was counted first (`register`, `launch`).
        debug_assert!(before + delta >= 0, "account usage below zero");
    }

    /// Why a publish of `size` bytes to `stream` may not be stored: it
    /// would pass the server's limit, which every account's streams
    /// share (10023), or the account's (10002): flat limits count every
    /// replica of the account's usage, a tier's the usage of its streams
    /// (nats-server's sums are the cluster's; here they are this
    /// server's, scaled).
    pub fn would_exceed(&self, stream: &StreamHandle, size: u64) -> Option<ApiError> {
        let (all, limit) = match stream.storage {
            Storage::Memory => (&self.shared.memory_used, self.max_memory),
            Storage::File => (&self.shared.store_used, self.max_store),
        };
        let size = size as i64;
        if limit > 0 && all.load(Ordering::Relaxed) + size > limit {
            return Some(E::INSUFFICIENT_RESOURCES.err());
        }
        let replicas = stream.config.read().num_replicas.max(1);
        // nats-server's `wouldExceedLimits`: no limits for the stream's
        // tier refuses with 10120.
        let selected = match self.account_limits.selected(replicas) {
            Ok(s) => s,
            Err(e) => return Some(e),
        };
        let account = match stream.storage {
            Storage::Memory => selected.limits.max_memory,
            Storage::File => selected.limits.max_storage,
        };
        if account < 0 {
            return None;
        }
        let used = match selected.tier {
            None => match stream.storage {
                Storage::Memory => self.memory_used.load(Ordering::Relaxed),
                Storage::File => self.store_used.load(Ordering::Relaxed),
            },
            // The tier's streams on this server, summed: tiered accounts
            // only, and their streams are few.
            Some(_) => self
                .streams
                .read()
                .values()
                .filter(|h| h.storage == stream.storage)
                .filter(|h| selected.counts(h.config.read().num_replicas))
                .map(|h| h.bytes.load(Ordering::Relaxed) as i64)
                .sum(),
        };
        let after = selected.reservation(replicas, used + size);
        (after > account).then(|| E::ACCOUNT_RESOURCES_EXCEEDED.err())
    }

    /// What the account's streams on this server hold, by tier: bytes
    /// by storage and consumers, and (with `streams`) each stream.
    pub fn tier_usage(&self, usage: &mut account::Usage, streams: bool) {
        for h in self.streams.read().values() {
            let tier = usage.tier(h.config.read().num_replicas);
            let bytes = h.bytes.load(Ordering::Relaxed);
            match h.storage {
                Storage::Memory => tier.memory += bytes,
                Storage::File => tier.storage += bytes,
            }
            tier.consumers += h.consumers.load(Ordering::Relaxed);
            tier.streams += u64::from(streams);
        }
    }

    pub fn usage(&self) -> (u64, u64) {
        (
            self.memory_used.load(Ordering::Relaxed).max(0) as u64,
            self.store_used.load(Ordering::Relaxed).max(0) as u64,
        )
    }

    /// Bytes promised to streams with `max_bytes`: (memory, file).
    pub fn reserved_totals(&self) -> (u64, u64) {
        account::reserved(&account::Streams::configs(self))
    }

    /// Creates a stream from a checked config. Durable before it returns.
    fn create_stream(self: &Arc<Self>, cfg: StreamConfig) -> Result<StreamInfo, ApiError> {
        let now = wall_clock();
        let dir = self.stream_dir(&cfg.name);
        if dir.join("meta.json").exists() {
            // A stream that could not be recovered at start: its data stays
            // where it is until someone looks at it.
            return Err(E::STREAM_CREATE.with(
                "err",
                "stream storage exists but could not be recovered; move it aside to reuse the name",
            ));
        }
        if dir.exists() {
            // Left by a delete that did not finish.
            std::fs::remove_dir_all(&dir).map_err(|e| E::STREAM_CREATE.with("err", e))?;
        }
        let loaded = tokio::task::block_in_place(|| persist::create_stream(&dir, cfg, now))
            .map_err(|e| {
                error!("Stream could not be created in {}: {e}", dir.display());
                E::STREAM_CREATE.with("err", "error creating store for stream")
            })?;
        let info = loaded.stream.info(now, false, "");
        self.launch(loaded)?;
        Ok(info)
    }

    /// Gives a stream a new config (checked by the account), answered
    /// at `reply` by its actor; returns once the config is in force.
    async fn update_stream(&self, cfg: StreamConfig, reply: &str) -> Result<(), ApiError> {
        let h = self
            .stream(&cfg.name)
            .ok_or_else(|| E::STREAM_NOT_FOUND.err())?;
        let (done, rx) = oneshot::channel();
        let update = Cmd::Update {
            config: Box::new(cfg),
            reply: reply.to_string(),
            done,
        };
        if !h.send(update) || rx.await.is_err() {
            return Err(E::STREAM_NOT_FOUND.err());
        }
        Ok(())
    }

    /// Removes a stream: no new messages reach it, then its actor deletes
    /// its storage.
    async fn delete_stream(&self, name: &str) -> Result<(), ApiError> {
        let handle = self.stream(name).ok_or_else(|| E::STREAM_NOT_FOUND.err())?;
        let subs = std::mem::take(&mut *handle.subs.lock());
        for s in subs {
            self.bus.unsubscribe(&s);
        }
        self.streams.write().remove(&handle.name);
        let (done, rx) = oneshot::channel();
        if !handle.send(Cmd::Delete { done }) {
            return Err(E::STREAM_DELETE.with("err", "stream is gone"));
        }
        let result = rx
            .await
            .unwrap_or_else(|_| Err(E::STREAM_DELETE.with("err", "stream stopped")));
        let bytes = handle.bytes.swap(0, Ordering::Relaxed);
        self.add_usage(handle.storage, -(bytes as i64));
        result
    }

    /// Every stream's info (and its consumers'), for monitoring.
    pub async fn snapshots(
        &self,
        consumers: bool,
    ) -> Vec<(StreamInfo, Vec<jetstream::api::ConsumerInfo>)> {
        let mut waits = Vec::new();
        for h in self.streams() {
            let (done, rx) = oneshot::channel();
            if h.send(Cmd::Info { consumers, done }) {
                waits.push(rx);
            }
        }
        let mut out = Vec::with_capacity(waits.len());
        for rx in waits {
            if let Ok(s) = rx.await {
                out.push(s);
            }
        }
        out
    }

    /// The names of stream `name`'s consumers, as its task knows them;
    /// `None` when it has no task here or the task does not answer.
    pub async fn consumer_names(&self, name: &str) -> Option<Vec<String>> {
        let h = self.stream(name)?;
        let (done, rx) = oneshot::channel();
        if !h.send(Cmd::Info {
            consumers: true,
            done,
        }) {
            return None;
        }
        let (_, consumers) = rx.await.ok()?;
        Some(consumers.into_iter().map(|c| c.name).collect())
    }

    /// The group committer of one server's streams.
    fn committer(&self) -> &Committer {
        self.shared
            .committer
            .get()
            .expect("one server's JetStream commits its streams' writes")
    }

    /// Sends a reply made where no task can publish (a sink refusing a
    /// publish).
    pub fn bounce(&self, msg: OutMsg) {
        let _ = self.bounce.send(msg);
    }
}

impl account::Streams for JetStream {
    fn configs(&self) -> BTreeMap<String, StreamConfig> {
        self.streams
            .read()
            .iter()
            .map(|(name, h)| (name.clone(), h.config.read().clone()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    //! The single-server driver in this process, over the bus of a core
    //! server that listens nowhere: no process, no socket.

    use std::sync::Arc;
    use std::time::Duration;

    use tokio::sync::mpsc;

    use super::{JetStream, Settings, SyncPolicy};
    use config::options::Options;
    use flotilla_core::bus::{Bus, Message, Reach, Sink};
    use flotilla_core::server::Server;

    /// Copies what arrives on a subject to a channel.
    struct Inbox(mpsc::UnboundedSender<(Option<String>, Vec<u8>)>);

    impl Sink for Inbox {
        fn deliver(&self, msg: Message<'_>) {
            let headers = msg.headers.map(|h| String::from_utf8_lossy(h).into_owned());
            let _ = self.0.send((headers, msg.payload.to_vec()));
        }
    }

    async fn ask(
        bus: &Bus,
        answers: &mut mpsc::UnboundedReceiver<(Option<String>, Vec<u8>)>,
        subject: &str,
        body: &str,
    ) -> (Option<String>, serde_json::Value) {
        let mut p = bus.publisher();
        p.publish(subject, subject, Some("reply.here"), None, body.as_bytes());
        p.flush();
        let (headers, payload) = tokio::time::timeout(Duration::from_secs(5), answers.recv())
            .await
            .expect("an answer")
            .expect("open");
        (
            headers,
            serde_json::from_slice(&payload).unwrap_or_default(),
        )
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_driver_answers_over_the_bus_once_writes_are_durable() {
        let dir = tempfile::tempdir().unwrap();
        let server = Server::new(Options::default());
        let bus = Bus::named(server, flotilla_core::account::GLOBAL);
        let js = JetStream::start(
            bus.clone(),
            Settings {
                store_dir: dir.path().to_path_buf(),
                max_memory: 0,
                max_store: 0,
                sync: SyncPolicy::Always,
                clustered: false,
                account: flotilla_core::account::GLOBAL.into(),
                account_limits: Default::default(),
                name_tag: None,
                domain: None,
                shared: Default::default(),
            },
        )
        .unwrap();
        let (tx, mut answers) = mpsc::unbounded_channel();
        bus.subscribe("reply.here", Reach::Local, Arc::new(Inbox(tx)))
            .unwrap();
        let (_, created) = ask(
            &bus,
            &mut answers,
            "$JS.API.STREAM.CREATE.S",
            r#"{"name":"S","subjects":["s.>"]}"#,
        )
        .await;
        assert_eq!(created["did_create"], true, "{created}");
        let (_, ack) = ask(&bus, &mut answers, "s.a", "hello").await;
        assert_eq!(ack, serde_json::json!({"stream": "S", "seq": 1}));
        // The PubAck came after the write was synced: the store has it.
        assert_eq!(
            js.stream("S").unwrap().msgs.load(super::Ordering::Relaxed),
            1
        );
        // An ack to a consumer nobody has is answered as no one listens.
        let (headers, _) = ask(&bus, &mut answers, "$JS.ACK.S.nope.1.1.1.1.0", "+ACK").await;
        assert!(headers.unwrap_or_default().starts_with("NATS/1.0 503"));
    }
}
