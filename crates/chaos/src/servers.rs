//! The servers under test: real processes of any binary that takes
//! nats-server's flags and config, on loopback, each with its store on
//! its own lossyfs mount (when power loss is among the faults) so a power
//! cut can drop what it did not sync.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Node {
    pub name: String,
    pub port: u16,
    config: PathBuf,
    log: PathBuf,
    target: PathBuf,
    child: Option<Child>,
    /// The power-loss filesystem under its store, if any.
    pub disk: Option<lossyfs::Mounted>,
    pub stopped: bool,
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

impl Node {
    /// Writes server `i`'s config in `dir` and starts it.
    pub fn start(
        target: &Path,
        dir: &Path,
        i: usize,
        ports: &[u16],
        routes: &[u16],
        power: bool,
    ) -> std::io::Result<Node> {
        let name = format!("S{i}");
        let home = dir.join(&name);
        let store = home.join("store");
        std::fs::create_dir_all(&store)?;
        let disk = match power {
            true => {
                let backing = home.join("disk");
                std::fs::create_dir_all(&backing)?;
                Some(lossyfs::mount(&backing, &store)?)
            }
            false => None,
        };
        let route_urls: Vec<String> = routes
            .iter()
            .map(|p| format!("\"nats-route://127.0.0.1:{p}\""))
            .collect();
        let config = home.join("server.conf");
        std::fs::write(
            &config,
            format!(
                "server_name: {name}\nlisten: \"127.0.0.1:{}\"\n\
                 jetstream {{ store_dir: \"{}\" }}\n\
                 cluster {{ name: chaos, listen: \"127.0.0.1:{}\", routes: [{}] }}\n",
                ports[i],
                store.display(),
                routes[i],
                route_urls.join(", ")
            ),
        )?;
        let mut node = Node {
            name,
            port: ports[i],
            config,
            log: home.join("server.log"),
            target: target.to_path_buf(),
            child: None,
            disk,
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
        let child = Command::new(&self.target)
            .arg("-c")
            .arg(&self.config)
            .stdout(Stdio::from(log.try_clone()?))
            .stderr(Stdio::from(log))
            .spawn()?;
        self.child = Some(child);
        self.stopped = false;
        Ok(())
    }

    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
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
    }
}

/// Waits until a TCP connection to `port` succeeds.
pub fn wait_listening(port: u16, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}
