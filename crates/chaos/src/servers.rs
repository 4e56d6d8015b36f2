//! The servers under test: real processes of any binary that takes
//! nats-server's flags and config, each in its own network namespace
//! ([`crate::net`]) or on loopback, with its store on its own lossyfs
//! mount (when power loss is among the faults) so a power cut can drop
//! what it did not sync, on a small tmpfs of its own (when a full disk
//! is) so it can be filled.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Node {
    pub name: String,
    /// Where clients and routes reach it.
    pub host: String,
    pub port: u16,
    http_port: u16,
    /// Its directory: config, log, filesystems.
    home: PathBuf,
    /// Its network namespace, when it has one.
    netns: Option<String>,
    config: PathBuf,
    log: PathBuf,
    target: PathBuf,
    /// JetStream's `store_dir`.
    pub store: PathBuf,
    /// A file on the store's filesystem (not in the store) that a full
    /// disk fills it with.
    filler: PathBuf,
    child: Option<Child>,
    /// The power-loss filesystem under its store, if any.
    pub disk: Option<lossyfs::Mounted>,
    /// The small filesystem under both, if any: unmounted after `disk`.
    small: Option<Tmpfs>,
    pub stopped: bool,
}

/// Where one server listens.
#[derive(Debug, Clone)]
pub struct Place {
    pub host: String,
    pub port: u16,
    pub route_port: u16,
    /// Monitoring, read when a run fails.
    pub http_port: u16,
    pub netns: Option<String>,
}

/// How each server's store is kept.
#[derive(Debug, Clone, Copy, Default)]
pub struct Disks {
    /// On lossyfs, so a power cut can drop what was not synced.
    pub lossy: bool,
    /// On a small filesystem of its own (a tmpfs), so it can be filled.
    pub small: bool,
    /// Every write synced (`sync_interval: always`).
    pub sync_always: bool,
}

/// The size of the filesystem a full disk fills.
const SMALL_DISK: &str = "1g";

/// A tmpfs mounted for one server, unmounted when dropped.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(at: &Path) -> std::io::Result<Tmpfs> {
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={SMALL_DISK}"), "tmpfs"])
            .arg(at)
            .output()?;
        if !out.status.success() {
            return Err(std::io::Error::other(format!(
                "mount tmpfs: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        Ok(Tmpfs(at.to_path_buf()))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).output();
    }
}

/// Ports nobody listens on now (each bound once, then released).
pub fn free_ports(n: usize) -> Vec<u16> {
    let listeners: Vec<std::net::TcpListener> = (0..n)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").expect("bind"))
        .collect();
    listeners
        .iter()
        .map(|l| l.local_addr().expect("addr").port())
        .collect()
}

/// Places on loopback, on free ports.
pub fn loopback(n: usize) -> Vec<Place> {
    let ports = free_ports(n);
    let routes = free_ports(n);
    let monitors = free_ports(n);
    (0..n)
        .map(|i| Place {
            host: "127.0.0.1".into(),
            port: ports[i],
            route_port: routes[i],
            http_port: monitors[i],
            netns: None,
        })
        .collect()
}

impl Node {
    /// Writes server `i`'s config in `dir` and starts it.
    pub fn start(
        target: &Path,
        dir: &Path,
        i: usize,
        places: &[Place],
        disks: Disks,
    ) -> std::io::Result<Node> {
        let name = format!("S{i}");
        let home = dir.join(&name);
        let fs = home.join("fs");
        std::fs::create_dir_all(&fs)?;
        let small = match disks.small {
            true => Some(Tmpfs::mount(&fs)?),
            false => None,
        };
        let backing = fs.join("store");
        std::fs::create_dir_all(&backing)?;
        let (store, disk) = match disks.lossy {
            true => {
                let store = home.join("store");
                std::fs::create_dir_all(&store)?;
                let disk = lossyfs::mount(&backing, &store)?;
                (store, Some(disk))
            }
            false => (backing, None),
        };
        let place = &places[i];
        let route_urls: Vec<String> = places
            .iter()
            .map(|p| format!("\"nats-route://{}:{}\"", p.host, p.route_port))
            .collect();
        // The operator's calls (meta leader stepdown, peer removal) are
        // the system account's; the workload's clients are the global
        // account's, without credentials.
        const SYSTEM: &str = "accounts { SYS { users: [{ user: sys, password: sys }] } }\n\
             system_account: SYS\n\
             authorization { users: [{ user: app, password: app }] }\n\
             no_auth_user: app\n";
        let config = home.join("server.conf");
        std::fs::write(
            &config,
            format!(
                "server_name: {name}\nlisten: \"{}:{}\"\nhttp: \"{}:{}\"\n\
                 jetstream {{ store_dir: \"{}\"{} }}\n\
                 cluster {{ name: chaos, listen: \"{}:{}\", routes: [{}] }}\n\
                 {SYSTEM}",
                place.host,
                place.port,
                place.host,
                place.http_port,
                store.display(),
                if disks.sync_always {
                    ", sync_interval: always"
                } else {
                    ""
                },
                place.host,
                place.route_port,
                route_urls.join(", ")
            ),
        )?;
        let mut node = Node {
            name,
            host: place.host.clone(),
            port: place.port,
            http_port: place.http_port,
            home: home.clone(),
            netns: place.netns.clone(),
            config,
            log: home.join("server.log"),
            target: target.to_path_buf(),
            store,
            filler: fs.join("filler"),
            child: None,
            disk,
            small,
            stopped: false,
        };
        node.spawn()?;
        Ok(node)
    }

    fn spawn(&mut self) -> std::io::Result<()> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)?;
        let mut command = match &self.netns {
            // `ip netns exec` execs the target: the child is the server.
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]).arg(&self.target);
                c
            }
            None => Command::new(&self.target),
        };
        let child = command
            .arg("-c")
            .arg(&self.config)
            .stdout(Stdio::from(log.try_clone()?))
            .stderr(Stdio::from(log))
            .spawn()?;
        self.child = Some(child);
        self.stopped = false;
        Ok(())
    }

    /// Saves what its monitoring says of JetStream and Raft into its
    /// directory (`jsz.json`, `raftz.json`), for a failed run's post
    /// mortem; a server that does not answer leaves an error there.
    pub fn save_monitoring(&self) {
        for (path, file) in [
            (
                "/jsz?accounts=true&streams=true&consumers=true&config=true&raft=true",
                "jsz.json",
            ),
            ("/raftz", "raftz.json"),
        ] {
            let body = http_get(&self.host, self.http_port, path)
                .unwrap_or_else(|e| format!("no answer: {e}"));
            let _ = std::fs::write(self.home.join(file), body);
        }
    }

    pub fn url(&self) -> String {
        format!("nats://{}:{}", self.host, self.port)
    }

    pub fn pid(&self) -> Option<i32> {
        self.child.as_ref().map(|c| c.id() as i32)
    }

    pub fn signal(&self, sig: i32) {
        if let Some(pid) = self.pid() {
            // SAFETY: a signal to a child we started.
            unsafe { libc::kill(pid, sig) };
        }
    }

    /// SIGKILL, and reaped.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.stopped = false;
    }

    /// Empties its store (the server must be stopped).
    pub fn wipe(&mut self) -> std::io::Result<()> {
        for entry in std::fs::read_dir(&self.store)? {
            let path = entry?.path();
            match path.is_dir() {
                true => std::fs::remove_dir_all(&path)?,
                false => std::fs::remove_file(&path)?,
            }
        }
        Ok(())
    }

    /// Damages bytes in up to three of its store's files (the server must
    /// be stopped): each gets a few bytes flipped, synced. Returns what
    /// it damaged.
    pub fn damage(&mut self, rng: &mut fastrand::Rng) -> std::io::Result<Vec<String>> {
        use std::os::unix::fs::FileExt;
        let mut files = Vec::new();
        list_files(&self.store, &mut files)?;
        files.retain(|(_, len)| *len > 0);
        let mut damaged = Vec::new();
        for _ in 0..3.min(files.len()) {
            let (path, len) = files.swap_remove(rng.usize(..files.len()));
            let file = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(&path)?;
            // Half the time in a tombstone, when the file is a flotilla
            // store segment that has some: a damaged delete must not
            // bring its message back.
            let mut tombstones = Vec::new();
            if rng.bool() {
                let mut bytes = vec![0u8; len as usize];
                file.read_exact_at(&mut bytes, 0)?;
                tombstones = tombstone_offsets(&bytes);
            }
            for _ in 0..rng.usize(1..=8) {
                let at = match tombstones.is_empty() {
                    true => rng.u64(..len),
                    // Past the length, inside the checksummed bytes.
                    false => tombstones[rng.usize(..tombstones.len())] as u64 + rng.u64(8..25),
                };
                let mut byte = [0u8];
                file.read_exact_at(&mut byte, at)?;
                byte[0] ^= rng.u8(1..);
                file.write_all_at(&byte, at)?;
            }
            file.sync_all()?;
            let shown = path.strip_prefix(&self.store).unwrap_or(&path);
            damaged.push(shown.display().to_string());
        }
        Ok(damaged)
    }

    /// Fills its store's filesystem: what is left of it goes to a filler
    /// file. Returns the bytes it took.
    pub fn fill_disk(&self) -> std::io::Result<u64> {
        use std::io::Write;
        let mut file = std::fs::File::create(&self.filler)?;
        let chunk = vec![0u8; 1 << 20];
        let mut taken = 0u64;
        loop {
            match file.write(&chunk) {
                Ok(0) => break,
                Ok(n) => taken += n as u64,
                Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
                Err(e) => return Err(e),
            }
        }
        // Past a full page cache: ENOSPC from the sync is the disk full too.
        let _ = file.sync_all();
        Ok(taken)
    }

    /// Gives back what [`Node::fill_disk`] took.
    pub fn free_disk(&self) {
        let _ = std::fs::remove_file(&self.filler);
    }

    pub fn restart(&mut self) -> std::io::Result<()> {
        self.kill();
        self.spawn()
    }

    pub fn running(&self) -> bool {
        self.child.is_some()
    }

    /// Whether it exited on its own (a crash), with its status.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.as_mut()?.try_wait().ok().flatten()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if self.stopped {
            self.signal(libc::SIGCONT);
        }
        self.kill();
        // The power-loss filesystem first, then the tmpfs under it.
        drop(self.disk.take());
        drop(self.small.take());
    }
}

/// Every regular file under `dir`, with its length.
fn list_files(dir: &Path, out: &mut Vec<(PathBuf, u64)>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let meta = entry.metadata()?;
        if meta.is_dir() {
            list_files(&entry.path(), out)?;
        } else if meta.is_file() {
            out.push((entry.path(), meta.len()));
        }
    }
    Ok(())
}

/// Waits until a TCP connection to `host:port` succeeds.
pub fn wait_listening(host: &str, port: u16, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if std::net::TcpStream::connect((host, port)).is_ok() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// A monitoring page's body, read over plain HTTP/1.0.
fn http_get(host: &str, port: u16, path: &str) -> std::io::Result<String> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect((host, port))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {host}\r\n\r\n")?;
    let mut text = String::new();
    stream.read_to_string(&mut text)?;
    Ok(text
        .split_once("\r\n\r\n")
        .map_or(text.clone(), |(_, body)| body.to_string()))
}

/// Where the tombstones are in a flotilla store segment, read as its
/// records (`u32 len | u32 crc | u8 kind | u64 seq | i64 ts | body`,
/// kind 2 a tombstone): the offset of each. Nothing for other files.
fn tombstone_offsets(bytes: &[u8]) -> Vec<usize> {
    const HEADER: usize = 25;
    let mut out = Vec::new();
    let mut at = 0;
    while at + HEADER <= bytes.len() {
        let len = u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes")) as usize;
        if len < HEADER || at + len > bytes.len() {
            break;
        }
        if bytes[at + 8] == 2 && len == HEADER {
            out.push(at);
        }
        at += len;
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn tombstones_are_found_in_a_segment_and_not_in_garbage() {
        let record = |kind: u8, seq: u64, body: &[u8]| {
            let mut r = Vec::new();
            r.extend_from_slice(&((25 + body.len()) as u32).to_le_bytes());
            r.extend_from_slice(&[0; 4]);
            r.push(kind);
            r.extend_from_slice(&seq.to_le_bytes());
            r.extend_from_slice(&0i64.to_le_bytes());
            r.extend_from_slice(body);
            r
        };
        let mut seg = record(6, 0, b"");
        seg.extend(record(1, 1, b"\x01\x00\x01\x00\x00\x00ax"));
        let first = seg.len();
        seg.extend(record(2, 1, b""));
        seg.extend(record(2, 1, b""));
        assert_eq!(super::tombstone_offsets(&seg), vec![first, first + 25]);
        assert!(super::tombstone_offsets(b"{\"json\": true}").is_empty());
    }
}
