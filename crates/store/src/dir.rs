//! The storage a file store writes to: a directory of named files. The
//! store's logic talks only to [`Dir`], so tests and the simulator can give
//! it [`MemDir`], which loses unsynced writes on a simulated crash, tears
//! writes, flips bits and runs out of space on request.

use std::collections::{BTreeMap, HashMap};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use crate::sync::{SyncHandle, SyncKey};

/// How far ahead [`Dir::reserve`] extends a file on a real file system: a
/// quarter of its length, at least this and at most [`RESERVE_MAX`], in
/// multiples of this. Small files stay small, since reopening reads the
/// whole file, zeros included (a thousand streams restart in seconds).
pub const RESERVE_MIN: u64 = 64 << 10;
pub const RESERVE_MAX: u64 = 1 << 20;

/// Where a reservation for appends up to `end` reaches.
fn reserve_to(end: u64) -> u64 {
    let ahead = (end / 4).clamp(RESERVE_MIN, RESERVE_MAX);
    (end + ahead).div_ceil(RESERVE_MIN) * RESERVE_MIN
}

/// A flat directory of files.
pub trait Dir: Send + Sync + 'static {
    fn list(&self) -> io::Result<Vec<String>>;
    fn read_all(&self, name: &str) -> io::Result<Vec<u8>>;
    fn read_at(&self, name: &str, offset: u64, buf: &mut [u8]) -> io::Result<()>;
    /// Writes at `offset`, creating the file if needed.
    fn write_at(&self, name: &str, offset: u64, data: &[u8]) -> io::Result<()>;
    fn truncate(&self, name: &str, len: u64) -> io::Result<()>;
    fn remove(&self, name: &str) -> io::Result<()>;
    /// A handle that makes `name`'s writes durable (and, with `new_file`,
    /// its directory entry).
    fn sync_handle(&self, name: &str, new_file: bool) -> io::Result<SyncHandle>;
    /// Removes every file and the directory itself.
    fn remove_all(&self) -> io::Result<()>;
    /// Renames a file, replacing any file called `to`.
    fn rename(&self, from: &str, to: &str) -> io::Result<()>;
    /// Makes the directory's entries (creations, removals, renames)
    /// durable.
    fn sync_dir(&self) -> io::Result<()>;

    /// [`Dir::rename`], returning what keeps the replaced file's storage
    /// until it is dropped (a real directory holds it open), so that its
    /// blocks are freed where the caller drops it, not in the rename.
    fn replace(&self, from: &str, to: &str) -> io::Result<Box<dyn Send>> {
        self.rename(from, to)?;
        Ok(Box::new(()))
    }

    /// Makes room for appends to `name` up to `end` bytes, given that
    /// `reserved` bytes were made room for already; returns the new
    /// reservation. A real directory extends the file (sparse, zeros) ahead
    /// of the appends ([`RESERVE_MIN`]), so that an append inside it leaves the
    /// size alone and its `fdatasync` writes no inode (ext4, 180-byte
    /// appends: 190 µs down to 130 µs at the median). Readers take trailing
    /// zeros for unwritten space (`record::scan`). By default nothing is
    /// reserved, which keeps `MemDir`'s crash and full-disk models exact.
    fn reserve(&self, _name: &str, end: u64, reserved: u64) -> io::Result<u64> {
        Ok(reserved.max(end))
    }

    /// [`Dir::reserve`] for a file synced after nearly every append (a
    /// journal: consumer state, a Raft log): a real directory writes the
    /// zeros, so the file owns its blocks and an append's `fdatasync` is
    /// the data and a cache flush, with no block allocation and no inode
    /// write behind it. The price is every reserved byte written twice,
    /// and one larger flush per reservation. A Raft log carries its
    /// stream's payloads, so that is as many bytes again as the stream;
    /// measured on R3 publish it still gained (BENCHMARKS.md, change 14).
    /// A message store, synced in larger batches, lost more than it
    /// gained, and reserves sparse.
    fn reserve_written(&self, name: &str, end: u64, reserved: u64) -> io::Result<u64> {
        self.reserve(name, end, reserved)
    }

    /// Replaces `name` with `data` so that a crash leaves either the old
    /// or the new contents: write a temporary file, sync it, rename it
    /// over, sync the directory.
    fn write_atomic(&self, name: &str, data: &[u8]) -> io::Result<()> {
        let tmp = format!("{name}.tmp");
        self.remove(&tmp)?;
        self.write_at(&tmp, 0, data)?;
        self.sync_handle(&tmp, false)?.sync()?;
        self.rename(&tmp, name)?;
        self.sync_handle(name, true)?.sync()
    }
}

/// Files kept open across every [`FsDir`] in the process; the least
/// recently used is closed past this and reopened when needed, so a
/// thousand streams do not hold thousands of descriptors. Handles lent to
/// a pending sync stay open until it runs.
static OPEN_LIMIT: AtomicUsize = AtomicUsize::new(256);

/// Sets how many files all stores together keep open.
pub fn set_open_file_limit(n: usize) {
    OPEN_LIMIT.store(n.max(8), Ordering::Relaxed);
}

/// The process-wide cache of open files, least recently used first.
#[derive(Default)]
struct OpenFiles {
    files: HashMap<(u64, String), (Arc<File>, u64)>,
    by_use: BTreeMap<u64, (u64, String)>,
    tick: u64,
}

impl OpenFiles {
    fn get(&mut self, key: &(u64, String)) -> Option<Arc<File>> {
        self.tick += 1;
        let tick = self.tick;
        let (f, used) = self.files.get_mut(key)?;
        self.by_use.remove(used);
        *used = tick;
        self.by_use.insert(tick, key.clone());
        Some(f.clone())
    }

    fn insert(&mut self, key: (u64, String), f: Arc<File>) {
        self.tick += 1;
        let limit = OPEN_LIMIT.load(Ordering::Relaxed);
        while self.files.len() >= limit {
            let Some((_, oldest)) = self.by_use.pop_first() else {
                break;
            };
            self.files.remove(&oldest);
        }
        if let Some((_, used)) = self.files.insert(key.clone(), (f, self.tick)) {
            self.by_use.remove(&used);
        }
        self.by_use.insert(self.tick, key);
    }

    fn remove(&mut self, key: &(u64, String)) {
        if let Some((_, used)) = self.files.remove(key) {
            self.by_use.remove(&used);
        }
    }

    fn remove_dir(&mut self, dir: u64) {
        let keys: Vec<(u64, String)> = self.files.keys().filter(|k| k.0 == dir).cloned().collect();
        for k in keys {
            self.remove(&k);
        }
    }
}

fn open_files() -> std::sync::MutexGuard<'static, OpenFiles> {
    static FILES: OnceLock<Mutex<OpenFiles>> = OnceLock::new();
    FILES
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

/// A real directory.
pub struct FsDir {
    root: PathBuf,
    id: u64,
}

impl FsDir {
    pub fn new(root: impl Into<PathBuf>) -> io::Result<Self> {
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        let root = root.into();
        std::fs::create_dir_all(&root)?;
        Ok(FsDir {
            root,
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
        })
    }

    pub fn path(&self) -> &Path {
        &self.root
    }

    fn file(&self, name: &str) -> io::Result<Arc<File>> {
        let key = (self.id, name.to_string());
        if let Some(f) = open_files().get(&key) {
            return Ok(f);
        }
        let f = Arc::new(
            OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(self.root.join(name))?,
        );
        open_files().insert(key, f.clone());
        Ok(f)
    }

    fn forget(&self, name: &str) {
        open_files().remove(&(self.id, name.to_string()));
    }
}

impl Drop for FsDir {
    fn drop(&mut self) {
        open_files().remove_dir(self.id);
    }
}

impl Dir for FsDir {
    fn list(&self) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for e in std::fs::read_dir(&self.root)? {
            let e = e?;
            if e.file_type()?.is_file() {
                names.push(e.file_name().to_string_lossy().into_owned());
            }
        }
        names.sort();
        Ok(names)
    }

    fn read_all(&self, name: &str) -> io::Result<Vec<u8>> {
        std::fs::read(self.root.join(name))
    }

    fn read_at(&self, name: &str, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.file(name)?.read_exact_at(buf, offset)
    }

    fn write_at(&self, name: &str, offset: u64, data: &[u8]) -> io::Result<()> {
        self.file(name)?.write_all_at(data, offset)
    }

    fn truncate(&self, name: &str, len: u64) -> io::Result<()> {
        self.file(name)?.set_len(len)
    }

    fn reserve(&self, name: &str, end: u64, reserved: u64) -> io::Result<u64> {
        if end <= reserved {
            return Ok(reserved);
        }
        let to = reserve_to(end);
        self.file(name)?.set_len(to)?;
        Ok(to)
    }

    fn reserve_written(&self, name: &str, end: u64, reserved: u64) -> io::Result<u64> {
        if end <= reserved {
            return Ok(reserved);
        }
        let to = reserve_to(end);
        let f = self.file(name)?;
        // Zeros from the end of what is written (`end` includes the
        // append about to be written over them).
        let zeros = [0u8; 64 << 10];
        let mut at = reserved;
        while at < to {
            let n = (to - at).min(zeros.len() as u64);
            if f.write_all_at(&zeros[..n as usize], at).is_err() {
                // No room for the zeros (a full disk): sparse, as
                // `reserve`; an append that does not fit fails itself.
                f.set_len(to)?;
                break;
            }
            at += n;
        }
        Ok(to)
    }

    fn remove(&self, name: &str) -> io::Result<()> {
        self.forget(name);
        match std::fs::remove_file(self.root.join(name)) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            r => r,
        }
    }

    fn sync_handle(&self, name: &str, new_file: bool) -> io::Result<SyncHandle> {
        let f = self.file(name)?;
        let dir = new_file.then(|| self.root.clone());
        let key = SyncKey::new(Arc::as_ptr(&f) as usize, new_file);
        Ok(SyncHandle::keyed(key, move || {
            f.sync_data()?;
            if let Some(dir) = dir {
                File::open(dir)?.sync_all()?;
            }
            Ok(())
        }))
    }

    fn remove_all(&self) -> io::Result<()> {
        open_files().remove_dir(self.id);
        match std::fs::remove_dir_all(&self.root) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            r => r,
        }
    }

    fn sync_dir(&self) -> io::Result<()> {
        File::open(&self.root)?.sync_all()
    }

    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        self.forget(from);
        self.forget(to);
        std::fs::rename(self.root.join(from), self.root.join(to))
    }

    fn replace(&self, from: &str, to: &str) -> io::Result<Box<dyn Send>> {
        // Open before the rename unlinks it, so the unlink frees nothing:
        // measured at about 300 ms for an 80 MB Raft log on ext4.
        let old = match File::open(self.root.join(to)) {
            Ok(f) => Some(f),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(e),
        };
        self.rename(from, to)?;
        Ok(Box::new(old))
    }
}

#[derive(Default, Clone)]
struct MemFile {
    data: Vec<u8>,
    /// What survives a crash: the contents as of the last sync.
    durable: Option<Vec<u8>>,
    /// A sync of it failed: as Linux may after a write-back error, the
    /// pages it held are clean but not on disk, and no later sync of this
    /// file makes anything more durable. A new file (a rewrite) is sound.
    poisoned: bool,
}

#[derive(Default)]
struct MemDirState {
    files: BTreeMap<String, MemFile>,
    /// Bytes writes may still add before failing with "no space".
    space: Option<u64>,
    /// How many more sync handles fail to be made.
    refused_handles: u32,
    /// Whether syncs fail, as fsync does after a write-back error.
    syncs_fail: bool,
}

/// An in-memory directory with fault injection, for tests.
#[derive(Clone, Default)]
pub struct MemDir {
    state: Arc<Mutex<MemDirState>>,
}

impl MemDir {
    pub fn new() -> Self {
        MemDir::default()
    }

    fn with<R>(&self, f: impl FnOnce(&mut MemDirState) -> R) -> R {
        f(&mut self.state.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// An independent directory holding a copy of this one's files as
    /// they are now (a clone shares them): damage one copy, keep the other.
    pub fn deep_clone(&self) -> MemDir {
        let files = self.with(|s| s.files.clone());
        let copy = MemDir::new();
        copy.with(|s| s.files = files);
        copy
    }

    /// Simulates power loss: every file goes back to its last synced
    /// contents; a file never synced disappears. With `torn`, each file
    /// keeps that many bytes of its unsynced tail (a partial write).
    pub fn crash(&self, torn: usize) {
        self.with(|s| {
            s.files.retain(|_, f| f.durable.is_some());
            for f in s.files.values_mut() {
                let durable = f.durable.clone().unwrap_or_default();
                let keep = (durable.len() + torn).min(f.data.len()).max(durable.len());
                let mut data = durable.clone();
                if keep > durable.len() && f.data.len() >= keep {
                    data.extend_from_slice(&f.data[durable.len()..keep]);
                }
                f.data = data;
            }
        });
    }

    /// Flips one bit, as bit rot would, in the file's current and durable
    /// contents.
    pub fn flip_bit(&self, name: &str, offset: usize, bit: u8) {
        self.with(|s| {
            if let Some(f) = s.files.get_mut(name) {
                if let Some(b) = f.data.get_mut(offset) {
                    *b ^= 1 << bit;
                }
                if let Some(b) = f.durable.as_mut().and_then(|d| d.get_mut(offset)) {
                    *b ^= 1 << bit;
                }
            }
        });
    }

    /// Cuts a file to `len` bytes, durably.
    pub fn cut(&self, name: &str, len: usize) {
        self.with(|s| {
            if let Some(f) = s.files.get_mut(name) {
                f.data.truncate(len);
                if let Some(d) = f.durable.as_mut() {
                    d.truncate(len);
                }
            }
        });
    }

    /// Deletes a file outright (a lost segment).
    pub fn lose(&self, name: &str) {
        self.with(|s| {
            s.files.remove(name);
        });
    }

    /// The next `n` sync handles fail to be made, as when a file that was
    /// closed to stay under the open-file limit cannot be opened again.
    pub fn refuse_handles(&self, n: u32) {
        self.with(|s| s.refused_handles = n);
    }

    /// From now on, syncs fail (or succeed again) and make nothing durable;
    /// a file whose sync failed never becomes more durable (see
    /// `MemFile::poisoned`).
    pub fn fail_syncs(&self, fail: bool) {
        self.with(|s| s.syncs_fail = fail);
    }

    /// From now on, writes beyond `bytes` more fail as a full disk would;
    /// `None` lifts the limit.
    pub fn set_space(&self, bytes: Option<u64>) {
        self.with(|s| s.space = bytes);
    }

    /// What a crash now would leave (as [`MemDir::crash`] with nothing
    /// torn), as a directory of its own: a checker opens it without
    /// disturbing this one.
    pub fn durable_copy(&self) -> MemDir {
        let files = self.with(|s| s.files.clone());
        let copy = MemDir {
            state: Arc::new(Mutex::new(MemDirState {
                files,
                ..Default::default()
            })),
        };
        copy.crash(0);
        copy
    }

    pub fn file_len(&self, name: &str) -> usize {
        self.with(|s| s.files.get(name).map_or(0, |f| f.data.len()))
    }

    pub fn names(&self) -> Vec<String> {
        self.with(|s| s.files.keys().cloned().collect())
    }
}

fn not_found(name: &str) -> io::Error {
    io::Error::new(io::ErrorKind::NotFound, format!("{name}: no such file"))
}

impl Dir for MemDir {
    fn list(&self) -> io::Result<Vec<String>> {
        Ok(self.names())
    }

    fn read_all(&self, name: &str) -> io::Result<Vec<u8>> {
        self.with(|s| {
            s.files
                .get(name)
                .map(|f| f.data.clone())
                .ok_or_else(|| not_found(name))
        })
    }

    fn read_at(&self, name: &str, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.with(|s| {
            let f = s.files.get(name).ok_or_else(|| not_found(name))?;
            let start = offset as usize;
            let end = start + buf.len();
            if end > f.data.len() {
                return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "short read"));
            }
            buf.copy_from_slice(&f.data[start..end]);
            Ok(())
        })
    }

    fn write_at(&self, name: &str, offset: u64, data: &[u8]) -> io::Result<()> {
        self.with(|s| {
            let f = s.files.entry(name.to_string()).or_default();
            let end = offset as usize + data.len();
            let growth = end.saturating_sub(f.data.len()) as u64;
            if let Some(space) = s.space.as_mut() {
                if growth > *space {
                    return Err(io::Error::new(
                        io::ErrorKind::StorageFull,
                        "no space left on device",
                    ));
                }
                *space -= growth;
            }
            let f = s.files.get_mut(name).expect("inserted above");
            if f.data.len() < end {
                f.data.resize(end, 0);
            }
            f.data[offset as usize..end].copy_from_slice(data);
            Ok(())
        })
    }

    fn truncate(&self, name: &str, len: u64) -> io::Result<()> {
        self.with(|s| {
            let f = s.files.get_mut(name).ok_or_else(|| not_found(name))?;
            f.data.truncate(len as usize);
            Ok(())
        })
    }

    fn remove(&self, name: &str) -> io::Result<()> {
        self.with(|s| {
            s.files.remove(name);
        });
        Ok(())
    }

    fn sync_handle(&self, name: &str, _new_file: bool) -> io::Result<SyncHandle> {
        let refused = self.with(|s| {
            let r = s.refused_handles > 0;
            s.refused_handles = s.refused_handles.saturating_sub(1);
            r
        });
        if refused {
            return Err(io::Error::other("too many open files"));
        }
        let me = self.clone();
        let name = name.to_string();
        Ok(SyncHandle::new(move || {
            me.with(|s| {
                let fail = s.syncs_fail;
                if let Some(f) = s.files.get_mut(&name) {
                    f.poisoned |= fail;
                    if !f.poisoned {
                        f.durable = Some(f.data.clone());
                    }
                }
                if fail {
                    return Err(io::Error::other("input/output error"));
                }
                Ok(())
            })
        }))
    }

    fn remove_all(&self) -> io::Result<()> {
        self.with(|s| s.files.clear());
        Ok(())
    }

    fn sync_dir(&self) -> io::Result<()> {
        // Removals and renames here are durable when made.
        Ok(())
    }

    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        self.with(|s| {
            let f = s.files.remove(from).ok_or_else(|| not_found(from))?;
            // A rename is a directory operation: treated as durable along
            // with the synced contents it carries.
            s.files.insert(to.to_string(), f);
            Ok(())
        })
    }
}
