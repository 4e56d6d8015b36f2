//! lossyfs: power loss for tests, as a FUSE filesystem (what lazyfs, the
//! filesystem Jepsen uses, does).
//!
//! It passes a directory through at a mount point. What is written to a
//! file stays in memory ([`overlay::Overlay`]) until the file is fsynced;
//! [`Control::drop_unsynced`] throws all of it away, so the files read as
//! the disk held them, as after a power cut. Directory operations
//! (create, mkdir, unlink, rename) reach the directory at once: they are
//! durable as soon as they return, so a file created and never synced
//! comes back empty (as on ext4, which journals the metadata).
//!
//! Files are opened with direct I/O and attributes are never cached, so
//! the kernel keeps no copy that would survive a drop.
//!
//! One filesystem thread runs every request; the state sits behind one
//! lock, shared with the [`Control`] a test or `flotilla-lossyfs` holds.

pub mod overlay;

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, OpenFlags,
    RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry,
    ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow, WriteFlags,
};
use parking_lot::Mutex;

use overlay::Overlay;

/// Nothing is cached by the kernel: sizes change under it on a drop.
const TTL: Duration = Duration::ZERO;

/// The filesystem's state: which inode is which path, the open files,
/// and the overlays of files written since their last sync.
#[derive(Default)]
struct State {
    paths: BTreeMap<u64, PathBuf>,
    inodes: BTreeMap<PathBuf, u64>,
    next_ino: u64,
    handles: BTreeMap<u64, (u64, Arc<File>)>,
    next_fh: u64,
    overlays: BTreeMap<u64, Overlay>,
    /// Bytes dropped so far, and drops.
    dropped_bytes: u64,
    drops: u64,
}

impl State {
    fn ino_of(&mut self, path: &Path) -> u64 {
        if let Some(&ino) = self.inodes.get(path) {
            return ino;
        }
        self.next_ino += 1;
        let ino = self.next_ino;
        self.paths.insert(ino, path.to_path_buf());
        self.inodes.insert(path.to_path_buf(), ino);
        ino
    }

    /// `path` and everything known under it, with their inodes.
    fn tree(&self, path: &Path) -> Vec<(PathBuf, u64)> {
        self.inodes
            .range(path.to_path_buf()..)
            .take_while(|(p, _)| p.starts_with(path))
            .map(|(p, &i)| (p.clone(), i))
            .collect()
    }

    /// `path` and everything under it no longer exist.
    fn forget_tree(&mut self, path: &Path) {
        for (p, ino) in self.tree(path) {
            self.inodes.remove(&p);
            self.paths.remove(&ino);
            self.overlays.remove(&ino);
        }
    }

    /// `from` and everything under it are now at `to`.
    fn move_tree(&mut self, from: &Path, to: &Path) {
        self.forget_tree(to);
        for (p, ino) in self.tree(from) {
            let rest = p.strip_prefix(from).expect("under from");
            let new = if rest.as_os_str().is_empty() {
                to.to_path_buf()
            } else {
                to.join(rest)
            };
            self.inodes.remove(&p);
            self.inodes.insert(new.clone(), ino);
            self.paths.insert(ino, new);
        }
    }
}

/// What a test (or `flotilla-lossyfs`) does to a mounted filesystem.
#[derive(Clone)]
pub struct Control {
    state: Arc<Mutex<State>>,
}

impl Control {
    /// The power cut: every write not yet fsynced is gone. Returns the
    /// bytes of the pages dropped.
    pub fn drop_unsynced(&self) -> u64 {
        let mut state = self.state.lock();
        let held: u64 = state.overlays.values().map(Overlay::held).sum();
        state.overlays.clear();
        state.dropped_bytes += held;
        state.drops += 1;
        held
    }

    /// Bytes written and not yet fsynced (whole pages).
    pub fn unsynced_bytes(&self) -> u64 {
        self.state.lock().overlays.values().map(Overlay::held).sum()
    }

    /// Drops so far, and the bytes they threw away.
    pub fn dropped(&self) -> (u64, u64) {
        let state = self.state.lock();
        (state.drops, state.dropped_bytes)
    }
}

/// The filesystem: `root` seen through the overlays.
pub struct LossyFs {
    root: PathBuf,
    state: Arc<Mutex<State>>,
}

impl LossyFs {
    pub fn new(root: impl Into<PathBuf>) -> (LossyFs, Control) {
        let mut state = State {
            next_ino: INodeNo::ROOT.0,
            ..Default::default()
        };
        state.paths.insert(INodeNo::ROOT.0, PathBuf::new());
        state.inodes.insert(PathBuf::new(), INodeNo::ROOT.0);
        let state = Arc::new(Mutex::new(state));
        let control = Control {
            state: state.clone(),
        };
        let fs = LossyFs {
            root: root.into(),
            state,
        };
        (fs, control)
    }

    fn real(&self, rel: &Path) -> PathBuf {
        self.root.join(rel)
    }

    fn rel(&self, ino: INodeNo) -> Result<PathBuf, Errno> {
        self.state
            .lock()
            .paths
            .get(&ino.0)
            .cloned()
            .ok_or(Errno::ENOENT)
    }

    fn child(&self, parent: INodeNo, name: &OsStr) -> Result<PathBuf, Errno> {
        Ok(self.rel(parent)?.join(name))
    }

    /// The attributes of `rel` as the file is now (its overlay's size).
    fn attr(&self, rel: &Path) -> Result<FileAttr, Errno> {
        let meta = std::fs::symlink_metadata(self.real(rel)).map_err(Errno::from)?;
        let mut state = self.state.lock();
        let ino = state.ino_of(rel);
        let size = state.overlays.get(&ino).map_or(meta.len(), Overlay::size);
        Ok(attr_of(ino, &meta, size))
    }

    /// Runs `f` over the overlay of the file open as `fh` (made if there
    /// is none) and its backing file.
    fn with_overlay<T>(
        &self,
        fh: FileHandle,
        f: impl FnOnce(&mut Overlay, &File) -> io::Result<T>,
    ) -> Result<T, Errno> {
        let (ino, file) = self
            .state
            .lock()
            .handles
            .get(&fh.0)
            .cloned()
            .ok_or(Errno::EBADF)?;
        self.with_overlay_of(ino, &file, f)
    }

    /// Runs `f` over inode `ino`'s overlay (made if there is none) and
    /// its backing file.
    fn with_overlay_of<T>(
        &self,
        ino: u64,
        file: &File,
        f: impl FnOnce(&mut Overlay, &File) -> io::Result<T>,
    ) -> Result<T, Errno> {
        use std::collections::btree_map::Entry;
        let mut state = self.state.lock();
        let overlay = match state.overlays.entry(ino) {
            Entry::Occupied(o) => o.into_mut(),
            Entry::Vacant(v) => v.insert(Overlay::new(file.metadata().map_err(Errno::from)?.len())),
        };
        f(overlay, file).map_err(Errno::from)
    }

    /// Removes `name` from the directory with `how` (durable at once),
    /// and forgets it and whatever was unsynced in it.
    fn remove(
        &self,
        parent: INodeNo,
        name: &OsStr,
        how: fn(PathBuf) -> io::Result<()>,
        reply: ReplyEmpty,
    ) {
        let result = self.child(parent, name).and_then(|rel| {
            how(self.real(&rel)).map_err(Errno::from)?;
            self.state.lock().forget_tree(&rel);
            Ok(())
        });
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    /// A handle on `file`, inode `ino`, opened with `flags`: `O_TRUNC`
    /// empties it, unsynced like any write.
    fn open_handle(&self, ino: u64, file: File, flags: i32) -> Result<FileHandle, Errno> {
        let fh = {
            let mut state = self.state.lock();
            state.next_fh += 1;
            let fh = FileHandle(state.next_fh);
            state.handles.insert(fh.0, (ino, Arc::new(file)));
            fh
        };
        if flags & libc::O_TRUNC != 0 {
            self.with_overlay(fh, |o, _| {
                o.set_size(0);
                Ok(())
            })?;
        }
        Ok(fh)
    }
}

fn attr_of(ino: u64, meta: &std::fs::Metadata, size: u64) -> FileAttr {
    let time = |secs: i64, nanos: i64| {
        UNIX_EPOCH + Duration::new(secs.max(0) as u64, nanos.clamp(0, 999_999_999) as u32)
    };
    let kind = match meta.file_type() {
        t if t.is_dir() => FileType::Directory,
        t if t.is_symlink() => FileType::Symlink,
        _ => FileType::RegularFile,
    };
    FileAttr {
        ino: INodeNo(ino),
        size,
        blocks: size.div_ceil(512),
        atime: time(meta.atime(), meta.atime_nsec()),
        mtime: time(meta.mtime(), meta.mtime_nsec()),
        ctime: time(meta.ctime(), meta.ctime_nsec()),
        crtime: SystemTime::UNIX_EPOCH,
        kind,
        perm: (meta.mode() & 0o7777) as u16,
        nlink: meta.nlink() as u32,
        uid: meta.uid(),
        gid: meta.gid(),
        rdev: meta.rdev() as u32,
        blksize: overlay::PAGE as u32,
        flags: 0,
    }
}

fn open_backing(path: &Path, flags: i32) -> io::Result<File> {
    let write = flags & libc::O_ACCMODE != libc::O_RDONLY;
    File::options()
        .read(true)
        .write(write)
        .custom_flags(flags & libc::O_APPEND)
        .open(path)
}

impl Filesystem for LossyFs {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        match self.child(parent, name).and_then(|rel| self.attr(&rel)) {
            Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.rel(ino).and_then(|rel| self.attr(&rel)) {
            Ok(attr) => reply.attr(&TTL, &attr),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let result = (|| {
            let rel = self.rel(ino)?;
            if let Some(mode) = mode {
                let perms = std::fs::Permissions::from_mode(mode & 0o7777);
                std::fs::set_permissions(self.real(&rel), perms).map_err(Errno::from)?;
            }
            if let Some(size) = size {
                // A truncation is a write like any other: not durable
                // until the file is synced.
                let file = match fh.and_then(|fh| self.state.lock().handles.get(&fh.0).cloned()) {
                    Some((_, file)) => file,
                    None => {
                        Arc::new(open_backing(&self.real(&rel), libc::O_RDWR).map_err(Errno::from)?)
                    }
                };
                self.with_overlay_of(ino.0, &file, |o, _| {
                    o.set_size(size);
                    Ok(())
                })?;
            }
            self.attr(&rel)
        })();
        match result {
            Ok(attr) => reply.attr(&TTL, &attr),
            Err(e) => reply.error(e),
        }
    }

    fn mkdir(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        let result = self.child(parent, name).and_then(|rel| {
            std::fs::create_dir(self.real(&rel)).map_err(Errno::from)?;
            let perms = std::fs::Permissions::from_mode(mode & 0o7777);
            let _ = std::fs::set_permissions(self.real(&rel), perms);
            self.attr(&rel)
        });
        match result {
            Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.remove(parent, name, std::fs::remove_file, reply);
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.remove(parent, name, std::fs::remove_dir, reply);
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        if flags.bits() != 0 {
            return reply.error(Errno::EINVAL);
        }
        let result = (|| {
            let from = self.child(parent, name)?;
            let to = self.child(newparent, newname)?;
            std::fs::rename(self.real(&from), self.real(&to)).map_err(Errno::from)?;
            self.state.lock().move_tree(&from, &to);
            Ok(())
        })();
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let result = self.rel(ino).and_then(|rel| {
            let file = open_backing(&self.real(&rel), flags.0).map_err(Errno::from)?;
            self.open_handle(ino.0, file, flags.0)
        });
        match result {
            Ok(fh) => reply.opened(fh, FopenFlags::FOPEN_DIRECT_IO),
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<fuser::LockOwner>,
        reply: ReplyData,
    ) {
        match self.with_overlay(fh, |o, file| o.read(file, offset, size as u64)) {
            Ok(data) => reply.data(&data),
            Err(e) => reply.error(e),
        }
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        flags: OpenFlags,
        _lock_owner: Option<fuser::LockOwner>,
        reply: ReplyWrite,
    ) {
        let append = flags.0 & libc::O_APPEND != 0;
        let result = self.with_overlay(fh, |o, file| {
            let at = if append { o.size() } else { offset };
            o.write(file, at, data)
        });
        match result {
            Ok(()) => reply.written(data.len() as u32),
            Err(e) => reply.error(e),
        }
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<fuser::LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        // What was written stays unsynced, as in a page cache.
        self.state.lock().handles.remove(&fh.0);
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let result = (|| {
            let mut state = self.state.lock();
            let (_, file) = state.handles.get(&fh.0).cloned().ok_or(Errno::EBADF)?;
            match state.overlays.remove(&ino.0) {
                Some(overlay) => {
                    // Kept if the write-through fails: still unsynced.
                    if let Err(e) = overlay.clone().sync(&file) {
                        state.overlays.insert(ino.0, overlay);
                        return Err(Errno::from(e));
                    }
                    Ok(())
                }
                None => file.sync_all().map_err(Errno::from),
            }
        })();
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let result = self.rel(ino).and_then(|rel| {
            let mut entries = vec![
                (ino.0, FileType::Directory, ".".into()),
                (ino.0, FileType::Directory, "..".into()),
            ];
            let dir = std::fs::read_dir(self.real(&rel)).map_err(Errno::from)?;
            let mut names: Vec<(std::ffi::OsString, bool)> = dir
                .filter_map(Result::ok)
                .map(|e| (e.file_name(), e.file_type().is_ok_and(|t| t.is_dir())))
                .collect();
            names.sort();
            let mut state = self.state.lock();
            for (name, is_dir) in names {
                let child = state.ino_of(&rel.join(&name));
                let kind = if is_dir {
                    FileType::Directory
                } else {
                    FileType::RegularFile
                };
                entries.push((child, kind, name));
            }
            Ok(entries)
        });
        match result {
            Ok(entries) => {
                for (i, (ino, kind, name)) in entries.into_iter().enumerate().skip(offset as usize)
                {
                    if reply.add(INodeNo(ino), i as u64 + 1, kind, &name) {
                        break;
                    }
                }
                reply.ok();
            }
            Err(e) => reply.error(e),
        }
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        // Directory operations were durable when they returned.
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let Ok(path) = std::ffi::CString::new(self.root.as_os_str().as_encoded_bytes()) else {
            return reply.error(Errno::EINVAL);
        };
        // SAFETY: statvfs fills the zeroed struct for a valid C string.
        let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
        if unsafe { libc::statvfs(path.as_ptr(), &mut st) } != 0 {
            return reply.error(Errno::from(io::Error::last_os_error()));
        }
        reply.statfs(
            st.f_blocks,
            st.f_bfree,
            st.f_bavail,
            st.f_files,
            st.f_ffree,
            st.f_bsize as u32,
            st.f_namemax as u32,
            st.f_frsize as u32,
        );
    }

    fn create(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let result = self.child(parent, name).and_then(|rel| {
            let file = File::options()
                .read(true)
                .write(true)
                .create(true)
                .create_new(flags & libc::O_EXCL != 0)
                .mode(mode & 0o7777)
                .open(self.real(&rel))
                .map_err(Errno::from)?;
            let attr = self.attr(&rel)?;
            let fh = self.open_handle(attr.ino.0, file, flags)?;
            Ok((self.attr(&rel)?, fh))
        });
        match result {
            Ok((attr, fh)) => {
                reply.created(&TTL, &attr, Generation(0), fh, FopenFlags::FOPEN_DIRECT_IO)
            }
            Err(e) => reply.error(e),
        }
    }

    fn fallocate(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        let result = match mode {
            // Growing the file is a write: not durable until a sync.
            0 => self.with_overlay(fh, |o, _| {
                let end = offset + length;
                if end > o.size() {
                    o.set_size(end);
                }
                Ok(())
            }),
            libc::FALLOC_FL_KEEP_SIZE => Ok(()),
            _ => Err(Errno::from_i32(libc::EOPNOTSUPP)),
        };
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }
}

/// A mounted lossyfs: unmounted when dropped.
pub struct Mounted {
    pub control: Control,
    session: Option<fuser::BackgroundSession>,
}

impl Mounted {
    /// Unmounts and waits for the filesystem thread.
    pub fn unmount(mut self) -> io::Result<()> {
        match self.session.take() {
            Some(s) => s.umount_and_join(),
            None => Ok(()),
        }
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if let Some(s) = self.session.take() {
            let _ = s.umount_and_join();
        }
    }
}

/// Mounts `root` at `mountpoint` (both directories) in the background.
/// Needs `/dev/fuse` and `fusermount3` (Debian's `fuse3`).
pub fn mount(root: &Path, mountpoint: &Path) -> io::Result<Mounted> {
    let (fs, control) = LossyFs::new(root);
    let mut config = fuser::Config::default();
    config.mount_options = vec![fuser::MountOption::FSName("lossyfs".into())];
    let session = fuser::spawn_mount(fs, mountpoint, &config)?;
    Ok(Mounted {
        control,
        session: Some(session),
    })
}
