//! Process life: command line, signals, lame duck, reload, and no leaks
//! over many connections.

#[path = "../common/mod.rs"]
mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::{Raw, BIN};

fn run(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(BIN).args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn version_help_and_bad_flags() {
    let (code, out, _) = run(&["-v"]);
    assert_eq!(code, 0);
    assert!(
        out.starts_with("flotilla: v") && out.contains("nats-server v2.15.1"),
        "{out}"
    );
    let (code, out, _) = run(&["--help"]);
    assert_eq!(code, 0);
    assert!(
        out.contains("Usage: flotilla [options]") && out.contains("--jetstream"),
        "{out}"
    );
    let (code, _, err) = run(&["--bogus"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("flag provided but not defined: -bogus"),
        "{err}"
    );
    let (code, _, err) = run(&["--profile", "1"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("nats-server option flotilla does not support"),
        "{err}"
    );
    let (code, _, err) = run(&["-p", "notaport"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("invalid value \"notaport\" for flag -p"),
        "{err}"
    );
}

#[test]
fn cluster_flags_are_checked_as_nats_server_checks_them() {
    let (code, _, err) = run(&["--routes", "nats://a:1"]);
    assert_eq!(code, 1);
    assert!(
        err.contains("solicited routes require cluster capabilities, e.g. --cluster"),
        "{err}"
    );
    let (code, _, err) = run(&["-js", "--cluster", "nats://127.0.0.1:-1"]);
    assert_eq!(code, 1);
    assert!(
        err.contains("jetstream cluster requires `server_name` to be set"),
        "{err}"
    );
    let (code, _, err) = run(&["-js", "-n", "a", "--cluster", "nats://127.0.0.1:-1"]);
    assert_eq!(code, 1);
    assert!(
        err.contains("jetstream cluster requires `cluster.name` to be set"),
        "{err}"
    );
    // With both set, JetStream runs clustered.
    let s = common::server()
        .js()
        .arg("-n")
        .arg("a")
        .arg("--cluster_name")
        .arg("c")
        .arg("--cluster")
        .arg("nats://127.0.0.1:-1")
        .start();
    assert!(s.wait_log(
        "JetStream started in clustered mode",
        std::time::Duration::from_secs(5)
    ));
}

#[test]
fn startup_log_lines_pid_and_ports_files() {
    let piddir = tempfile::tempdir().unwrap();
    let pidfile = piddir.path().join("flotilla.pid");
    let mut s = common::server()
        .arg("-P")
        .arg(pidfile.to_str().unwrap())
        .start();
    // The server accepts connections a moment before it logs that it is
    // ready, so wait for each line rather than reading the log once.
    for line in [
        "Starting nats-server",
        "Listening for client connections on 127.0.0.1:",
        "Server is ready",
        "Listening for monitoring traffic on 127.0.0.1:",
    ] {
        assert!(
            s.wait_log(line, Duration::from_secs(5)),
            "missing {line:?} in:\n{}",
            s.log_text()
        );
    }
    let pid = std::fs::read_to_string(&pidfile).unwrap();
    assert_eq!(pid, s.pid().to_string());
    s.signal(libc::SIGTERM);
    assert_eq!(s.wait_exit(Duration::from_secs(10)), Some(0));
    assert!(!pidfile.exists(), "pid file removed on exit");
    let ports: Vec<_> = std::fs::read_dir(s.dir.path())
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "ports")
        })
        .collect();
    assert!(ports.is_empty(), "ports file removed on exit");
    let log = s.log_text();
    assert!(
        log.contains("Trapped \"terminated\" signal") && log.contains("Server Exiting.."),
        "{log}"
    );
}

#[test]
fn sigterm_flushes_pending_output_before_closing() {
    let mut s = common::server().start();
    let mut sub = Raw::connect(&s.addr());
    sub.send(b"CONNECT {\"verbose\":false}\r\nSUB t 1\r\nPING\r\n");
    sub.read_until("PONG\r\n", Duration::from_secs(5));
    let mut publisher = Raw::connect(&s.addr());
    let mut batch = Vec::new();
    for i in 0..2000 {
        batch.extend_from_slice(format!("PUB t 5\r\n{i:05}\r\n").as_bytes());
    }
    batch.extend_from_slice(b"PING\r\n");
    publisher.send(b"CONNECT {\"verbose\":false}\r\n");
    publisher.send(&batch);
    publisher.read_until("PONG\r\n", Duration::from_secs(5));
    s.signal(libc::SIGTERM);
    assert_eq!(s.wait_exit(Duration::from_secs(10)), Some(0));
    let (closed, rest) = sub.closed(Duration::from_secs(5));
    assert!(closed);
    let n = rest.matches("MSG t 1 5\r\n").count();
    assert_eq!(
        n, 2000,
        "every accepted message reached the subscriber before close"
    );
}

#[test]
fn sigint_stops_the_server() {
    let mut s = common::server().start();
    s.signal(libc::SIGINT);
    assert_eq!(s.wait_exit(Duration::from_secs(10)), Some(0));
    assert!(s.log_text().contains("Trapped \"interrupt\" signal"));
}

#[test]
fn lame_duck_informs_then_closes_clients() {
    let mut s = common::server()
        .config("lame_duck_duration: \"30s\"\nlame_duck_grace_period: \"1s\"\n")
        .start();
    let mut clients: Vec<Raw> = (0..2)
        .map(|_| {
            let mut r = Raw::connect(&s.addr());
            r.send(b"CONNECT {\"verbose\":false,\"protocol\":1}\r\nPING\r\n");
            r.read_until("PONG\r\n", Duration::from_secs(5));
            r
        })
        .collect();
    let started = Instant::now();
    s.signal(libc::SIGUSR2);
    for c in clients.iter_mut() {
        let info = c.read_until("\r\n", Duration::from_secs(5));
        // The post-PING INFO may come first; look for the ldm one.
        let info = if info.contains("\"ldm\"") {
            info
        } else {
            c.read_until("\r\n", Duration::from_secs(5))
        };
        assert!(
            info.starts_with("INFO ") && info.contains("\"ldm\":true"),
            "{info}"
        );
    }
    assert!(s.wait_log(
        "Entering lame duck mode, stop accepting new clients",
        Duration::from_secs(2)
    ));
    // New clients are refused while draining.
    assert!(
        std::net::TcpStream::connect(s.addr()).is_err() || {
            let mut r = std::net::TcpStream::connect(s.addr()).unwrap();
            r.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
            let mut b = [0u8; 16];
            matches!(std::io::Read::read(&mut r, &mut b), Ok(0) | Err(_))
        }
    );
    for c in clients.iter_mut() {
        let (closed, _) = c.closed(Duration::from_secs(10));
        assert!(closed);
    }
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "closed before the grace period"
    );
    assert_eq!(s.wait_exit(Duration::from_secs(10)), Some(0));
    assert!(s.log_text().contains("Closing existing clients"));
}

#[tokio::test]
async fn the_signal_flag_sends_each_command() {
    let pids = tempfile::tempdir().unwrap();
    let pid_file = pids.path().join("server.pid");
    let pid_file = pid_file.to_str().unwrap();
    let s = common::server()
        .config("debug: false\nlame_duck_duration: \"30s\"\nlame_duck_grace_period: \"1s\"\n")
        .arg("-P")
        .arg(pid_file)
        .start();
    let pid = s.pid().to_string();

    // reload, by pid file.
    std::fs::write(
        s.dir.path().join("server.conf"),
        "debug: true\nlame_duck_duration: \"30s\"\nlame_duck_grace_period: \"1s\"\n",
    )
    .unwrap();
    let (code, _, err) = run(&["--signal", &format!("reload={pid_file}")]);
    assert_eq!(code, 0, "{err}");
    assert!(s.wait_log("Reloaded: debug = true", Duration::from_secs(5)));

    // reopen: the log file moved away is let go, a new one started.
    let log = s.dir.path().join("server.log");
    std::fs::rename(&log, s.dir.path().join("server.log.1")).unwrap();
    let (code, _, err) = run(&["-sl", &format!("reopen={pid}")]);
    assert_eq!(code, 0, "{err}");
    assert!(s.wait_log("File log re-opened", Duration::from_secs(5)));

    // ldm: clients are told, as async-nats's lame_duck_callback expects.
    let (opts, mut events) = common::with_events(async_nats::ConnectOptions::new());
    let _client = opts.connect(s.url()).await.unwrap();
    let (code, _, err) = run(&["--signal", &format!("ldm={pid}")]);
    assert_eq!(code, 0, "{err}");
    let lame = tokio::time::timeout(Duration::from_secs(5), async {
        while let Some(e) = events.recv().await {
            if e == "lame duck mode detected" {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(lame, Ok(true));

    // Errors name the problem and send nothing.
    for (args, want) in [
        (vec!["--signal", "bogus=1"], "unknown signal \"bogus\""),
        (vec!["--signal", "stop=x"], "invalid pid: x"),
        (
            vec!["--signal", "stop=1=2"],
            "invalid signal parameters: [2]",
        ),
        (
            vec!["--signal", "stop=2147483646"],
            "signal \"stop\" 2147483646: No such process",
        ),
    ] {
        let (code, _, err) = run(&args);
        assert_eq!(code, 1, "{args:?}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
    assert!(s.log_text().contains("Entering lame duck mode"));
}

#[test]
fn the_signal_flag_stops_servers() {
    for (command, trapped) in [("term", "terminated"), ("quit", "interrupt")] {
        let mut s = common::server().start();
        let (code, _, err) = run(&["--signal", &format!("{command}={}", s.pid())]);
        assert_eq!(code, 0, "{err}");
        assert_eq!(s.wait_exit(Duration::from_secs(10)), Some(0));
        assert!(s
            .log_text()
            .contains(&format!("Trapped \"{trapped}\" signal")));
    }
    let mut s = common::server().start();
    let (code, _, err) = run(&["--signal", &format!("stop={}", s.pid())]);
    assert_eq!(code, 0, "{err}");
    let status = s.child.wait().unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(libc::SIGKILL));
}

#[tokio::test]
async fn sighup_reloads_what_can_change() {
    let s = common::server()
        .config("authorization { token: old }\n")
        .start();
    let conf = s.dir.path().join("server.conf");
    let old = async_nats::ConnectOptions::with_token("old".into())
        .connect(s.url())
        .await
        .unwrap();
    std::fs::write(&conf, "authorization { token: new }\ndebug: true\n").unwrap();
    s.signal(libc::SIGHUP);
    assert!(
        s.wait_log("Reloaded server configuration", Duration::from_secs(5)),
        "{}",
        s.log_text()
    );
    assert!(s.log_text().contains("Reloaded: debug = true"));
    async_nats::ConnectOptions::with_token("new".into())
        .connect(s.url())
        .await
        .unwrap();
    let refused = async_nats::ConnectOptions::with_token("old".into())
        .connect(s.url())
        .await;
    assert!(refused.is_err());
    // The connection made with the old token is closed, as nats-server does.
    assert!(s.wait_log("authentication error - Token", Duration::from_secs(5)));
    let closed = s.json("/connz?state=closed");
    assert!(
        closed["connections"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["reason"] == "Authentication Failure"),
        "{closed}"
    );
    drop(old);

    // A change that needs a restart is refused and nothing changes.
    std::fs::write(
        &conf,
        "authorization { token: newer }\nserver_name: renamed\n",
    )
    .unwrap();
    s.signal(libc::SIGHUP);
    assert!(s.wait_log(
        "config reload not supported for server_name",
        Duration::from_secs(5)
    ));
    async_nats::ConnectOptions::with_token("new".into())
        .connect(s.url())
        .await
        .unwrap();

    // A broken file is refused with its position.
    std::fs::write(&conf, "authorization {\n").unwrap();
    s.signal(libc::SIGHUP);
    assert!(s.wait_log(
        "server.conf:2:1: Unexpected EOF processing map.",
        Duration::from_secs(5)
    ));
}

/// Opens and closes `n` connections from 4 threads, in a mix of ways.
fn churn(addr: &str, n: usize) {
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let addr = addr.to_string();
            std::thread::spawn(move || {
                for i in 0..n / 4 {
                    let mut r = Raw::connect(&addr);
                    match i % 3 {
                        0 => r.send(
                            format!("CONNECT {{}}\r\nSUB a.{t}.{i} 1\r\nSUB q.> grp 2\r\nPUB a.{t}.{i} 1\r\nx\r\n")
                                .as_bytes(),
                        ),
                        1 => r.send(b"CONNECT {\"verbose\":false}\r\nSUB x 1\r\nUNSUB 1\r\n"),
                        _ => {}
                    }
                    // Half close without waiting, half after a round trip.
                    if i % 2 == 0 {
                        r.send(b"PING\r\n");
                        r.read_until("PONG\r\n", Duration::from_secs(5));
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

/// Waits until no connection is left and only the server's own
/// subscriptions (`base`: the system account's) are; returns /varz.
fn drained(s: &common::Server, base: &serde_json::Value) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let v = s.json("/varz");
        if v["connections"] == 0 && v["subscriptions"] == *base {
            return v;
        }
        assert!(Instant::now() < deadline, "state left behind: {v}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn no_state_leaks_over_ten_thousand_connections() {
    let s = common::server().start();
    let base = s.json("/varz")["subscriptions"].clone();
    let before = s.json("/subsz");
    let open = |z: &serde_json::Value| {
        z["num_inserts"].as_u64().unwrap() - z["num_removes"].as_u64().unwrap()
    };
    // The first round fills the closed-connection ring (10,000 entries,
    // as nats-server keeps); the second must then cost nothing more.
    churn(&s.addr(), 10_000);
    let first = drained(&s, &base);
    assert_eq!(first["total_connections"], 10_000);
    churn(&s.addr(), 10_000);
    let second = drained(&s, &base);
    assert_eq!(second["total_connections"], 20_000);
    let subsz = s.json("/subsz");
    assert_eq!(subsz["num_subscriptions"], before["num_subscriptions"]);
    assert_eq!(open(&subsz), open(&before), "{subsz}");
    // A leak of even 1 KB per connection would show as 10 MB here.
    let (a, b) = (
        first["mem"].as_u64().unwrap(),
        second["mem"].as_u64().unwrap(),
    );
    assert!(
        b < a + 8 * 1024 * 1024,
        "RSS grew {a} -> {b} over 10,000 connections"
    );
}
