//! Limits: payload size, slow consumers, stale connections, and an
//! account's `limits` block.

#[path = "../common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use common::Raw;
use futures::StreamExt;

#[tokio::test]
async fn max_payload_refused() {
    let s = common::server().config("max_payload: 1KB\n").start();
    let c = s.client().await;
    assert_eq!(c.server_info().max_payload, 1024);
    let err = c.publish("big", vec![0u8; 1025].into()).await.unwrap_err();
    assert_eq!(
        err.kind(),
        async_nats::client::PublishErrorKind::MaxPayloadExceeded
    );
    c.publish("ok", vec![0u8; 1024].into()).await.unwrap();
    c.flush().await.unwrap();

    // A client that ignores the limit is told and disconnected.
    let mut r = Raw::connect(&s.addr());
    r.send(b"CONNECT {\"verbose\":false}\r\nPUB big 1025\r\n");
    let (closed, seen) = r.closed(Duration::from_secs(5));
    assert!(closed, "{seen}");
    assert!(seen.contains("-ERR 'Maximum Payload Violation'"), "{seen}");
    // Others are unaffected.
    c.publish("ok", "still".into()).await.unwrap();
    c.flush().await.unwrap();
}

#[test]
fn slow_consumer_is_cut_off_and_fast_one_keeps_up() {
    let s = common::server()
        .config("max_pending: 4MB\nwrite_deadline: \"2s\"\n")
        .start();

    // A subscriber that never reads.
    let mut slow = Raw::connect(&s.addr());
    slow.send(b"CONNECT {\"verbose\":false}\r\nSUB flood 1\r\nPING\r\n");
    assert!(slow
        .read_until("PONG\r\n", Duration::from_secs(5))
        .contains("PONG"));

    const N: usize = 20_000;
    // The reading subscriber gets a thread and runtime of its own, so a
    // busy publisher in this process cannot starve it of CPU.
    let url = s.url();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let fast = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let c = async_nats::ConnectOptions::new()
                .subscription_capacity(N * 2)
                .connect(url)
                .await
                .unwrap();
            let mut sub = c.subscribe("flood").await.unwrap();
            common::sync(&c).await;
            ready_tx.send(()).unwrap();
            for i in 0..N {
                match tokio::time::timeout(Duration::from_secs(10), sub.next()).await {
                    Ok(Some(m)) => assert_eq!(m.payload.len(), 1024),
                    _ => return Err(format!("fast subscriber stalled at {i}")),
                }
            }
            Ok(())
        })
    });
    ready_rx.recv_timeout(Duration::from_secs(10)).unwrap();

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let publish_time = rt.block_on(async {
        let publisher = s.client().await;
        let started = Instant::now();
        let payload = bytes::Bytes::from(vec![7u8; 1024]);
        for _ in 0..N {
            publisher.publish("flood", payload.clone()).await.unwrap();
        }
        publisher.flush().await.unwrap();
        started.elapsed()
    });
    if let Err(e) = fast.join().unwrap() {
        let log: String = s
            .log_text()
            .lines()
            .filter(|l| l.contains("STALL") || l.contains("Slow"))
            .map(|l| format!("{l}\n"))
            .collect();
        panic!("{e}: {log}");
    }

    let varz = s.json("/varz");
    assert_eq!(
        varz["slow_consumers"], 1,
        "only the stalled one is cut: {varz}"
    );
    let closed = s.json("/connz?state=closed");
    let reasons: Vec<&str> = closed["connections"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["reason"].as_str())
        .collect();
    // The other closed connection is the fast subscriber leaving.
    assert_eq!(reasons, ["Slow Consumer (Pending Bytes)", "Client Closed"]);
    assert!(s.wait_log("Slow Consumer Detected", Duration::from_secs(2)));
    // The slow reader's socket is closed by the server.
    let (was_closed, _) = slow.closed(Duration::from_secs(5));
    assert!(was_closed);
    // Publishing never waited on the slow reader (generous bound: this
    // only catches a publisher blocked for the write deadline or longer).
    assert!(publish_time < Duration::from_secs(30), "{publish_time:?}");
}

#[test]
fn stale_connection_detected() {
    let s = common::server()
        .config("ping_interval: \"100ms\"\nping_max: 2\n")
        .start();
    let mut r = Raw::connect(&s.addr());
    r.send(b"CONNECT {\"verbose\":false}\r\n");
    let (closed, seen) = r.closed(Duration::from_secs(5));
    assert!(closed, "{seen}");
    assert_eq!(seen.matches("PING\r\n").count(), 2, "{seen}");
    assert!(seen.ends_with("-ERR 'Stale Connection'\r\n"), "{seen}");
    let varz = s.json("/varz");
    assert_eq!(varz["stale_connections"], 1, "{varz}");

    // A client that answers pings stays connected (a slower interval
    // gives a loaded test machine room to answer in time).
    let s = common::server()
        .config("ping_interval: \"300ms\"\nping_max: 2\n")
        .start();
    let mut alive = Raw::connect(&s.addr());
    alive.send(b"CONNECT {\"verbose\":false}\r\n");
    let until = Instant::now() + Duration::from_millis(1500);
    while Instant::now() < until {
        let got = alive.read_until("PING\r\n", Duration::from_millis(300));
        if got.contains("PING") {
            alive.send(b"PONG\r\n");
        }
        assert!(!got.contains("-ERR"), "{got}");
    }
    let (closed, _) = alive.closed(Duration::from_millis(100));
    assert!(!closed);
    assert_eq!(s.json("/varz")["stale_connections"], 0);
}

#[tokio::test]
async fn async_nats_keeps_connection_alive_under_fast_pings() {
    let s = common::server()
        .config("ping_interval: \"50ms\"\nping_max: 1\n")
        .start();
    let c = s.client().await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    c.flush().await.unwrap();
    assert_eq!(s.json("/varz")["stale_connections"], 0);
}

#[test]
fn write_deadline_cuts_a_reader_that_stopped() {
    // Pending bytes never reach max_pending here; the stuck socket write
    // is what gives the reader away.
    let s = common::server()
        .config("max_pending: 512MB\nmax_payload: 8MB\nwrite_deadline: \"300ms\"\n")
        .start();
    let mut stuck = Raw::connect(&s.addr());
    stuck.send(b"CONNECT {\"verbose\":false}\r\nSUB w 1\r\nPING\r\n");
    stuck.read_until("PONG\r\n", Duration::from_secs(5));
    let mut publisher = Raw::connect(&s.addr());
    publisher.send(b"CONNECT {\"verbose\":false}\r\n");
    let payload = vec![b'x'; 4 * 1024 * 1024];
    let mut op = b"PUB w 4194304\r\n".to_vec();
    op.extend_from_slice(&payload);
    op.extend_from_slice(b"\r\n");
    // 32 MB, far more than loopback socket buffers hold.
    for _ in 0..8 {
        publisher.send(&op);
    }
    publisher.send(b"PING\r\n");
    assert!(publisher
        .read_until("PONG\r\n", Duration::from_secs(10))
        .contains("PONG"));
    assert!(s.wait_log(
        "Slow Consumer Detected: WriteDeadline of",
        Duration::from_secs(10)
    ));
    let closed = s.json("/connz?state=closed");
    assert_eq!(
        closed["connections"][0]["reason"], "Slow Consumer (Write Deadline)",
        "{closed}"
    );
    assert_eq!(s.json("/varz")["slow_consumers"], 1);
}

const ACCOUNT_LIMITS: &str = r#"
accounts {
  L {
    users: [ { user: l, password: p } ]
    limits { max_connections: 2, max_subscriptions: 2, max_payload: 100 }
  }
}
"#;

/// A raw client of account L, past CONNECT (protocol 1, so it gets the
/// INFO that follows the first PONG).
fn l_client(addr: &str) -> Raw {
    let mut r = Raw::connect(addr);
    r.send(b"CONNECT {\"user\":\"l\",\"pass\":\"p\",\"verbose\":false,\"protocol\":1}\r\nPING\r\n");
    r
}

/// Each limit of an account's `limits` block, with nats-server's words:
/// connections past the limit are refused, a subscription past it is
/// refused while the connection stays, a payload past it closes the
/// connection, and the INFO after CONNECT tells the lower payload limit.
#[test]
fn an_accounts_limits_hold() {
    let s = common::server().config(ACCOUNT_LIMITS).start();
    let mut first = l_client(&s.addr());
    let said = first.read_until("PONG\r\n", Duration::from_secs(5));
    assert!(said.contains("PONG"), "{said}");
    let info = first.read_until("\r\n", Duration::from_secs(5));
    assert!(info.starts_with("INFO "), "{info}");
    let info: serde_json::Value = serde_json::from_str(&info[5..]).unwrap();
    assert_eq!(info["max_payload"], 100, "{info}");

    // Subscriptions: two, then a refusal; the connection stays.
    first.send(b"SUB a 1\r\nSUB b 2\r\nSUB c 3\r\nPING\r\n");
    let said = first.read_until("PONG\r\n", Duration::from_secs(5));
    assert!(
        said.contains("-ERR 'maximum subscriptions exceeded'"),
        "{said}"
    );
    assert!(said.ends_with("PONG\r\n"), "{said}");

    // Connections: a second, then a refusal.
    let mut second = l_client(&s.addr());
    assert!(second
        .read_until("PONG\r\n", Duration::from_secs(5))
        .contains("PONG"));
    let mut third = l_client(&s.addr());
    let (closed, seen) = third.closed(Duration::from_secs(5));
    assert!(closed, "{seen}");
    assert!(
        seen.contains("-ERR 'maximum account active connections exceeded'"),
        "{seen}"
    );
    let closed = s.json("/connz?state=closed");
    let reasons: Vec<&str> = closed["connections"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["reason"].as_str())
        .collect();
    assert!(
        reasons.contains(&"Maximum Account Connections Exceeded"),
        "{closed}"
    );

    // Payload: 100 bytes pass, 101 close the connection.
    second.send(b"PUB ok 100\r\n");
    second.send(&[b'x'; 100]);
    second.send(b"\r\nPING\r\n");
    assert!(second
        .read_until("PONG\r\n", Duration::from_secs(5))
        .contains("PONG"));
    second.send(b"PUB big 101\r\n");
    let (closed, seen) = second.closed(Duration::from_secs(5));
    assert!(closed, "{seen}");
    assert!(seen.contains("-ERR 'Maximum Payload Violation'"), "{seen}");
}

/// A reload that raises a limit lets the next connection in.
#[test]
fn a_reload_changes_an_accounts_limits() {
    let s = common::server().config(ACCOUNT_LIMITS).start();
    let mut held: Vec<Raw> = (0..2).map(|_| l_client(&s.addr())).collect();
    for r in &mut held {
        assert!(r
            .read_until("PONG\r\n", Duration::from_secs(5))
            .contains("PONG"));
    }
    let raised = ACCOUNT_LIMITS.replace("max_connections: 2", "max_connections: 3");
    std::fs::write(s.config_file(), raised).unwrap();
    s.signal(libc::SIGHUP);
    assert!(s.wait_log("Reloaded server configuration", Duration::from_secs(5)));
    let mut third = l_client(&s.addr());
    let said = third.read_until("PONG\r\n", Duration::from_secs(5));
    assert!(said.contains("PONG") && !said.contains("-ERR"), "{said}");
}

#[test]
fn bad_account_limits_are_refused_at_load() {
    for (limits, want) in [
        ("limits: 5", "Expected account limits to be a map/struct"),
        (
            "limits { bogus: 1 }",
            "Unknown field \"bogus\" parsing account limits",
        ),
    ] {
        let text = format!("accounts {{ L {{ {limits} }} }}\n");
        let said = common::refused_by_server(&text);
        assert!(said.contains(want), "{text}\nwant: {want}\ngot: {said}");
        assert!(said.contains("test.conf:"), "{said}");
    }
}
