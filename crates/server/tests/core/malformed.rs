//! Malformed input over raw sockets: the right -ERR, a close where
//! nats-server closes, and a server that keeps serving everyone else.

#[path = "../common/mod.rs"]
mod common;

use std::time::Duration;

use common::Raw;

const T: Duration = Duration::from_secs(5);

/// Sends `input` on a fresh connection and returns (closed, what came back).
fn send(addr: &str, input: &[u8]) -> (bool, String) {
    let mut r = Raw::connect(addr);
    r.send(input);
    r.closed(Duration::from_millis(1500))
}

/// The server still routes messages for a well-behaved client.
fn still_serving(addr: &str) {
    let mut r = Raw::connect(addr);
    r.send(b"CONNECT {\"verbose\":false}\r\nSUB ok 1\r\nPUB ok 2\r\nhi\r\nPING\r\n");
    let got = r.read_until("PONG\r\n", T);
    assert!(got.contains("MSG ok 1 2\r\nhi\r\n"), "{got}");
}

#[test]
fn unknown_verbs_close_with_unknown_protocol_operation() {
    let s = common::server().start();
    for input in [
        &b"FOO bar\r\n"[..],
        b"PUBX foo 1\r\n",
        b"MSG foo 1 1\r\nx\r\n",
        b"SUBfoo 1\r\n",
        b"\x00\x01\x02\r\n",
        b"PUB\r\n",
    ] {
        let (closed, seen) = send(&s.addr(), input);
        assert!(closed, "{input:?} left the connection open");
        assert!(
            seen.contains("-ERR 'Unknown Protocol Operation'"),
            "{input:?}: {seen}"
        );
    }
    still_serving(&s.addr());
}

#[test]
fn bad_arguments_close_the_connection() {
    let s = common::server().start();
    for (input, text) in [
        (&b"PUB foo\r\n"[..], "processPub Parse Error"),
        (b"PUB foo bar baz 3\r\n", "processPub Parse Error"),
        (b"PUB foo abc\r\n", "processPub Bad or Missing Size"),
        (b"PUB foo -1\r\n", "processPub Bad or Missing Size"),
        (b"SUB foo\r\n", "processSub Parse Error"),
        (b"SUB a b c d\r\n", "processSub Parse Error"),
        (b"UNSUB\t\r\n", "processUnsub Parse Error"),
        (b"UNSUB 1 2 3\r\n", "processUnsub Parse Error"),
        (
            b"CONNECT {\"verbose\":false,\"headers\":true}\r\nHPUB foo 10 5\r\n",
            "processHeaderPub Header Size larger then TotalSize",
        ),
        (b"CONNECT {not json}\r\n", "invalid CONNECT"),
        (
            b"HPUB foo 12 14\r\nNATS/1.0\r\n\r\nhi\r\n",
            "message headers not supported",
        ),
    ] {
        let (closed, seen) = send(&s.addr(), input);
        assert!(closed, "{input:?} left the connection open");
        assert!(seen.contains(&format!("-ERR '{text}")), "{input:?}: {seen}");
    }
    assert!(s.log_text().contains("processPub Parse Error: \"foo\""));
    still_serving(&s.addr());
}

#[test]
fn oversized_control_line() {
    let s = common::server().config("max_control_line: 64\n").start();
    let long = format!("SUB {} 1\r\n", "a".repeat(100));
    let (closed, seen) = send(&s.addr(), long.as_bytes());
    assert!(closed);
    assert!(
        seen.contains("-ERR 'maximum control line exceeded'"),
        "{seen}"
    );
    // Without a line end at all: refused as soon as it is too long.
    let (closed, seen) = send(&s.addr(), format!("PUB {}", "b".repeat(200)).as_bytes());
    assert!(closed);
    assert!(
        seen.contains("-ERR 'maximum control line exceeded'"),
        "{seen}"
    );
    // Just within the limit is fine.
    let mut r = Raw::connect(&s.addr());
    r.send(format!("SUB {} 1\r\nPING\r\n", "c".repeat(58)).as_bytes());
    assert!(r.read_until("PONG\r\n", T).ends_with("+OK\r\nPONG\r\n"));
    still_serving(&s.addr());
}

#[test]
fn payload_length_mismatch() {
    let s = common::server().start();
    // Longer than declared: the byte after the payload is not CRLF.
    let (closed, seen) = send(&s.addr(), b"PUB foo 2\r\nhello\r\n");
    assert!(closed);
    assert!(seen.contains("-ERR 'Unknown Protocol Operation'"), "{seen}");
    // Shorter than declared: the server waits for the rest, and the
    // following operation's bytes are taken as payload, so the CRLF check
    // fails where the declared length ends.
    let mut r = Raw::connect(&s.addr());
    r.send(b"CONNECT {\"verbose\":false}\r\nSUB foo 1\r\nPUB foo 10\r\nhi\r\n");
    let (closed, _) = r.closed(Duration::from_millis(300));
    assert!(!closed, "an incomplete payload is waited for");
    r.send(b"PING\r\nPING\r\n");
    let (closed, seen) = r.closed(T);
    assert!(closed);
    assert!(seen.contains("-ERR 'Unknown Protocol Operation'"), "{seen}");
    still_serving(&s.addr());
}

#[test]
fn invalid_subjects() {
    let s = common::server().start();
    let mut r = Raw::connect(&s.addr());
    // Defaults before CONNECT are verbose and pedantic, as in nats-server.
    r.send(b"SUB foo..bar 1\r\nSUB foo.>.bar 2\r\nSUB good.* 3\r\nPUB good.* 1\r\nx\r\nPUB good.one 1\r\ny\r\nPING\r\n");
    let got = r.read_until("PONG\r\n", T);
    assert_eq!(
        got,
        "-ERR 'Invalid Subject'\r\n-ERR 'Invalid Subject'\r\n+OK\r\n\
         -ERR 'Invalid Publish Subject'\r\n+OK\r\nMSG good.* 3 1\r\nx\r\n\
         +OK\r\nMSG good.one 3 1\r\ny\r\nPONG\r\n"
    );
    let (closed, _) = r.closed(Duration::from_millis(200));
    assert!(!closed, "invalid subjects do not close the connection");
}

#[test]
fn protocol_is_case_insensitive_and_tolerant_of_spacing() {
    let s = common::server().start();
    let mut r = Raw::connect(&s.addr());
    r.send(
        b"connect {\"verbose\":false}\r\nsub  a.b \t 7\nPuB a.b   3\r\nabc\r\nping extra junk\r\n",
    );
    assert_eq!(
        r.read_until("PONG\r\n", T),
        "MSG a.b 7 3\r\nabc\r\nPONG\r\n"
    );
}

#[test]
fn client_sent_err_closes() {
    let s = common::server().start();
    let (closed, _) = send(&s.addr(), b"-ERR 'boom'\r\n");
    assert!(closed);
    assert!(s.wait_log("Client Error 'boom'", T));
}

#[test]
fn bad_connect_options() {
    let s = common::server().start();
    let (closed, seen) = send(&s.addr(), b"CONNECT {\"protocol\":2}\r\n");
    assert!(closed);
    assert!(seen.contains("-ERR 'invalid client protocol'"), "{seen}");
    let (closed, seen) = send(&s.addr(), b"CONNECT {\"no_responders\":true}\r\n");
    assert!(closed);
    assert!(
        seen.contains("-ERR 'no responders requires headers support'"),
        "{seen}"
    );
}

#[test]
fn random_bytes_from_many_connections() {
    let s = common::server().start();
    let base = s.json("/varz")["subscriptions"].clone();
    let mut rng = fastrand::Rng::with_seed(0x5eed);
    let mut handles = Vec::new();
    for _ in 0..8 {
        let addr = s.addr();
        let seed = rng.u64(..);
        handles.push(std::thread::spawn(move || {
            let mut rng = fastrand::Rng::with_seed(seed);
            for _ in 0..25 {
                let mut r = Raw::connect(&addr);
                let mut junk = vec![0u8; rng.usize(1..2048)];
                rng.fill(&mut junk);
                // Sometimes start with something valid.
                if rng.bool() {
                    r.send(b"CONNECT {}\r\nSUB x 1\r\n");
                }
                r.send(&junk);
                let _ = r.closed(Duration::from_millis(50));
            }
        }));
    }
    for h in handles {
        h.join().unwrap();
    }
    still_serving(&s.addr());
    let log = s.log_text();
    assert!(!log.contains("panicked"), "{log}");
    // Nothing leaked: once the junk connections are gone, none remain.
    let deadline = std::time::Instant::now() + T;
    loop {
        let varz = s.json("/varz");
        // The server's own (the system account's) subscriptions stay.
        if varz["connections"] == 0 && varz["subscriptions"] == base {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{varz}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn endless_ping_line_is_not_buffered() {
    let s = common::server().start();
    let mut r = Raw::connect(&s.addr());
    r.send(b"CONNECT {\"verbose\":false}\r\nPING");
    let junk = vec![b'x'; 1 << 20];
    let before = s.json("/varz")["mem"].as_u64().unwrap();
    for _ in 0..64 {
        r.send(&junk);
    }
    r.send(b"\r\nPING\r\n");
    let got = r.read_until("PONG\r\nPONG\r\n", T);
    assert_eq!(got, "PONG\r\nPONG\r\n");
    let after = s.json("/varz")["mem"].as_u64().unwrap();
    assert!(
        after < before + 16 * 1024 * 1024,
        "64 MB of junk held: {before} -> {after}"
    );
}

#[test]
fn replies_count_against_max_pending() {
    let s = common::server()
        .config("max_pending: 64KB\nmax_payload: 32KB\n")
        .start();
    let mut r = Raw::connect(&s.addr());
    r.send(b"CONNECT {\"verbose\":false}\r\n");
    // Never read the PONGs: far more than the socket buffers hold.
    let pings = b"PING\r\n".repeat(100_000);
    for _ in 0..40 {
        r.send(&pings);
    }
    let deadline = std::time::Instant::now() + T;
    while s.json("/varz")["slow_consumers"] != 1 {
        assert!(std::time::Instant::now() < deadline, "never cut off");
        std::thread::sleep(Duration::from_millis(50));
    }
    still_serving(&s.addr());
}
