//! Clients over WebSocket (`websocket {}`): async-nats over `ws://`
//! talking with plain clients, a compressing client (yawc), and upgrade
//! requests nats-server refuses. Each test also passes against
//! nats-server 2.15.1 (`FLOTILLA_TEST_SERVER`).

#[path = "../common/mod.rs"]
mod common;

use std::io::{Read, Write};
use std::time::Duration;

use futures::{SinkExt, StreamExt};

const PLAIN: &str = "websocket { host: 127.0.0.1, port: -1, no_tls: true }\n";
const COMPRESSING: &str =
    "websocket { host: 127.0.0.1, port: -1, no_tls: true, compression: true }\n";

fn ws_url(server: &common::Server) -> String {
    format!(
        "ws://127.0.0.1:{}",
        server.websocket_port.expect("websocket port")
    )
}

async fn next(sub: &mut async_nats::Subscriber) -> async_nats::Message {
    tokio::time::timeout(Duration::from_secs(10), sub.next())
        .await
        .expect("a message in time")
        .expect("subscription open")
}

/// Subjects, headers, request/reply and full-size payloads cross between
/// a WebSocket client and a plain one; monitoring tells them apart.
#[tokio::test]
async fn websocket_clients_are_ordinary_clients() {
    let server = common::server().config(PLAIN).start();
    let ws = async_nats::connect(ws_url(&server)).await.unwrap();
    let tcp = async_nats::connect(server.url()).await.unwrap();

    let mut from_ws = tcp.subscribe("from.ws.>").await.unwrap();
    // async-nats's flush is no round trip: a message of its own, back,
    // shows the server has the subscription.
    tcp.publish("from.ws.ready", "".into()).await.unwrap();
    assert_eq!(next(&mut from_ws).await.subject.as_str(), "from.ws.ready");
    let mut headers = async_nats::HeaderMap::new();
    headers.insert("Kind", "websocket");
    ws.publish_with_headers("from.ws.a", headers, "hello".into())
        .await
        .unwrap();
    let message = next(&mut from_ws).await;
    assert_eq!(message.subject.as_str(), "from.ws.a");
    assert_eq!(&message.payload[..], b"hello");
    assert_eq!(
        message.headers.unwrap().get("Kind").unwrap().as_str(),
        "websocket"
    );

    let mut to_ws = ws.subscribe("to.ws").await.unwrap();
    ws.publish("to.ws", "ready".into()).await.unwrap();
    assert_eq!(&next(&mut to_ws).await.payload[..], b"ready");
    tcp.publish("to.ws", "from tcp".into()).await.unwrap();
    assert_eq!(&next(&mut to_ws).await.payload[..], b"from tcp");

    // max_payload exactly, to itself (as async-nats's own test does):
    // larger than any one read or frame, both ways.
    let big = bytes::Bytes::from(
        (0..1024 * 1024)
            .map(|i| (i % 251) as u8)
            .collect::<Vec<u8>>(),
    );
    let mut own = ws.subscribe("big").await.unwrap();
    for _ in 0..3 {
        ws.publish("big", big.clone()).await.unwrap();
    }
    for _ in 0..3 {
        assert!(next(&mut own).await.payload == big);
    }

    let mut service = ws.subscribe("svc").await.unwrap();
    let responder = ws.clone();
    tokio::spawn(async move {
        while let Some(request) = service.next().await {
            let mut reply = request.payload.to_vec();
            reply.reverse();
            let _ = responder
                .publish(request.reply.unwrap(), reply.into())
                .await;
        }
    });
    let answer = ws.request("svc", "abc".into()).await.unwrap();
    assert_eq!(&answer.payload[..], b"cba");

    let connz = server.json("/connz");
    let mut types: Vec<&str> = connz["connections"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["type"].as_str().unwrap())
        .collect();
    types.sort();
    assert_eq!(types, ["nats", "websocket"]);
    let varz = server.json("/varz");
    assert_eq!(varz["websocket"]["port"], server.websocket_port.unwrap());
    assert_eq!(varz["websocket"]["no_tls"], true);
}

/// The whole upgrade request and what came back, up to `needle` or the
/// server closing.
fn upgrade(server: &common::Server, request: &str, needle: &[u8]) -> Vec<u8> {
    let port = server.websocket_port.unwrap();
    let mut socket = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    socket.write_all(request.as_bytes()).unwrap();
    let mut got = Vec::new();
    let mut chunk = [0u8; 4096];
    while !got.windows(needle.len()).any(|w| w == needle) {
        match socket.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&chunk[..n]),
        }
    }
    got
}

fn request(method: &str, skip: &str, extra: &str) -> String {
    let lines = [
        "Host: 127.0.0.1",
        "Upgrade: websocket",
        "Connection: Upgrade",
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
        "Sec-WebSocket-Version: 13",
    ];
    let mut text = format!("{method} / HTTP/1.1\r\n");
    for line in lines
        .iter()
        .filter(|l| !l.starts_with(skip) || skip.is_empty())
    {
        text.push_str(line);
        text.push_str("\r\n");
    }
    text.push_str(extra);
    text.push_str("\r\n");
    text
}

/// A request nats-server refuses gets its status line; the server goes
/// on serving.
#[tokio::test]
async fn a_bad_upgrade_is_refused_with_nats_servers_status() {
    let server = common::server().config(PLAIN).start();
    for (method, skip, status) in [
        ("POST", "", "HTTP/1.1 405 Method Not Allowed"),
        ("GET", "Upgrade", "HTTP/1.1 400 Bad Request"),
        ("GET", "Connection", "HTTP/1.1 400 Bad Request"),
        ("GET", "Sec-WebSocket-Key", "HTTP/1.1 400 Bad Request"),
        ("GET", "Sec-WebSocket-Version", "HTTP/1.1 400 Bad Request"),
    ] {
        let reply = upgrade(&server, &request(method, skip, ""), b"\r\n\r\n");
        let reply = String::from_utf8_lossy(&reply);
        assert!(
            reply.starts_with(status),
            "{method} without {skip}: {reply}"
        );
    }
    let reply = upgrade(&server, &request("GET", "", ""), b"\r\n\r\n");
    let reply = String::from_utf8_lossy(&reply);
    assert!(
        reply.starts_with("HTTP/1.1 101 Switching Protocols\r\n"),
        "{reply}"
    );
    assert!(
        reply.contains("Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n"),
        "{reply}"
    );
    let client = async_nats::connect(ws_url(&server)).await.unwrap();
    client.flush().await.unwrap();
}

/// A request that does not parse as HTTP is answered as Go's HTTP
/// server answers it for nats-server (400), not just closed.
#[tokio::test]
async fn an_unparsable_upgrade_is_answered_with_400() {
    let server = common::server().config(PLAIN).start();
    for garbage in ["GARBAGE\r\n\r\n", "GET / HTTP/1.1\r\nno colon here\r\n\r\n"] {
        let reply = upgrade(&server, garbage, b"400 Bad Request\n");
        let reply = String::from_utf8_lossy(&reply);
        assert!(
            reply.starts_with("HTTP/1.1 400 Bad Request"),
            "{garbage:?}: {reply}"
        );
    }
    let client = async_nats::connect(ws_url(&server)).await.unwrap();
    client.flush().await.unwrap();
}

/// A WebSocket client the server closes is sent a close frame with
/// nats-server's status for the reason and the reason's text, after the
/// `-ERR` that explains it.
#[tokio::test]
async fn the_server_closes_with_nats_servers_status_and_reason() {
    let server = common::server()
        .config("max_payload: 1024\nwebsocket { host: 127.0.0.1, port: -1, no_tls: true }\n")
        .start();
    // (A parse error is left out: nats-server 2.15.1 sends neither its
    // -ERR nor a close frame there.)
    for (sent, code, reason) in [(
        &b"PUB a 2048\r\n"[..],
        1009,
        "Maximum Message Payload Exceeded",
    )] {
        let port = server.websocket_port.unwrap();
        let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .unwrap();
        let mut socket = yawc::WebSocket::handshake(
            ws_url(&server).parse().unwrap(),
            tcp,
            yawc::Options::default(),
        )
        .await
        .unwrap();
        let connect = b"CONNECT {\"verbose\":false,\"protocol\":1}\r\nPING\r\n";
        socket
            .send(yawc::Frame::binary(&connect[..]))
            .await
            .unwrap();
        let mut text = String::new();
        let mut sent_it = false;
        let close = loop {
            // The offending bytes once the server has read all before
            // them: a server that closes with bytes unread resets the
            // connection, and the client may lose what came before.
            if !sent_it && text.contains("PONG") {
                socket.send(yawc::Frame::binary(sent)).await.unwrap();
                sent_it = true;
            }
            let frame = tokio::time::timeout(Duration::from_secs(10), socket.next())
                .await
                .expect("closed in time")
                .unwrap_or_else(|| panic!("a close frame before the end: {text}"));
            if frame.opcode() == yawc::OpCode::Close {
                break frame;
            }
            text.push_str(&String::from_utf8_lossy(frame.payload()));
        };
        assert!(text.contains("-ERR "), "{text}");
        assert_eq!(close.close_code(), Some(yawc::close::CloseCode::from(code)));
        assert_eq!(close.close_reason().unwrap(), Some(reason), "{text}");
    }
}

/// In a cluster, a WebSocket client's INFO lists the cluster's
/// WebSocket URLs as its `connect_urls` (routes carry them as
/// `ws_connect_urls`), this server's first; a plain client's lists the
/// client URLs.
#[tokio::test]
async fn websocket_clients_get_the_clusters_websocket_urls() {
    let all = common::routed_servers(&[PLAIN.to_string(), PLAIN.to_string()]);
    common::wait_for("the route", Duration::from_secs(10), || {
        // nats-server pools three routes per pair.
        all.iter()
            .all(|s| s.json("/routez")["num_routes"].as_u64() > Some(0))
    });
    let ws_urls: Vec<String> = all
        .iter()
        .map(|s| format!("127.0.0.1:{}", s.websocket_port.unwrap()))
        .collect();
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", all[0].websocket_port.unwrap()))
        .await
        .unwrap();
    let mut socket = yawc::WebSocket::handshake(
        ws_url(&all[0]).parse().unwrap(),
        tcp,
        yawc::Options::default(),
    )
    .await
    .unwrap();
    let frame = tokio::time::timeout(Duration::from_secs(5), socket.next())
        .await
        .unwrap()
        .unwrap();
    let text = String::from_utf8_lossy(frame.payload()).into_owned();
    let info: serde_json::Value =
        serde_json::from_str(text.trim_start_matches("INFO ").trim()).unwrap();
    assert_eq!(info["connect_urls"], serde_json::json!(ws_urls), "{info}");

    let (_, plain) = {
        let mut s = std::net::TcpStream::connect(all[0].addr()).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut buf = [0u8; 4096];
        let n = s.read(&mut buf).unwrap();
        let line = String::from_utf8_lossy(&buf[..n]).into_owned();
        let json = line.trim_start_matches("INFO ").trim().to_string();
        (s, serde_json::from_str::<serde_json::Value>(&json).unwrap())
    };
    let client_urls: Vec<String> = all
        .iter()
        .map(|s| format!("127.0.0.1:{}", s.port))
        .collect();
    assert_eq!(
        plain["connect_urls"],
        serde_json::json!(client_urls),
        "{plain}"
    );
}

/// With `compression`, an offer of permessage-deflate is agreed with no
/// context takeover, the server's frames are compressed, and a client
/// that compresses what it sends is understood.
#[tokio::test]
async fn compression_is_agreed_and_works_both_ways() {
    let server = common::server().config(COMPRESSING).start();
    let offer = "Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n";
    let reply = upgrade(&server, &request("GET", "", offer), b"\r\n\r\n");
    let head_end = reply.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    let head = String::from_utf8_lossy(&reply[..head_end]);
    assert!(
        head.contains("Sec-WebSocket-Extensions: permessage-deflate; server_no_context_takeover; client_no_context_takeover\r\n"),
        "{head}"
    );
    // Without the offer, nothing is agreed.
    let plain = upgrade(&server, &request("GET", "", ""), b"\r\n\r\n");
    assert!(!String::from_utf8_lossy(&plain).contains("Sec-WebSocket-Extensions"));

    let port = server.websocket_port.unwrap();
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    let options = yawc::Options::default().with_low_latency_compression();
    let mut socket = yawc::WebSocket::handshake(ws_url(&server).parse().unwrap(), tcp, options)
        .await
        .unwrap();
    let payload = "compressible ".repeat(2000);
    let publish = format!(
        "CONNECT {{\"verbose\":false}}\r\nSUB deflate 1\r\nPUB deflate {}\r\n{payload}\r\nPING\r\n",
        payload.len()
    );
    socket
        .send(yawc::Frame::binary(publish.into_bytes()))
        .await
        .unwrap();
    let mut read = Vec::new();
    let want = format!("MSG deflate 1 {}\r\n{payload}\r\n", payload.len());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !String::from_utf8_lossy(&read).contains(&want) {
        let frame = tokio::time::timeout_at(deadline, socket.next())
            .await
            .expect("the message in time")
            .expect("socket open");
        read.extend_from_slice(frame.payload());
    }
}

/// Whether a client with `options` gets in over WebSocket (`ws`) or the
/// client port.
async fn gets_in(server: &common::Server, ws: bool, options: async_nats::ConnectOptions) -> bool {
    let url = if ws { ws_url(server) } else { server.url() };
    match options.connect(url).await {
        Ok(client) => {
            // A round trip: the server answered CONNECT without closing.
            client.request("$no.such.service", "".into()).await.ok();
            client.connection_state() == async_nats::connection::State::Connected
        }
        Err(_) => false,
    }
}

fn user(name: &str, password: &str) -> async_nats::ConnectOptions {
    async_nats::ConnectOptions::new().user_and_password(name.into(), password.into())
}

/// The websocket block's `authorization` and `no_auth_user` stand in
/// for the top-level ones for WebSocket clients alone, as nats-server's
/// auth override: the client port keeps its own, and the top-level
/// users still apply over WebSocket.
#[tokio::test]
async fn the_websocket_authorization_overrides_the_top_level_one() {
    let server = common::server()
        .config(
            "websocket { host: 127.0.0.1, port: -1, no_tls: true, \
             authorization { user: web, password: wpass, timeout: 2 } }\n",
        )
        .start();
    let nobody = async_nats::ConnectOptions::new;
    for (ws, options, admitted, case) in [
        (false, nobody(), true, "the client port needs nothing"),
        (true, nobody(), false, "WebSocket needs the override's user"),
        (true, user("web", "wrong"), false, "a wrong password"),
        (true, user("web", "wpass"), true, "the override's user"),
    ] {
        assert_eq!(gets_in(&server, ws, options).await, admitted, "{case}");
    }
    // The client port's INFO (and /varz, which omits it when false)
    // still needs no auth.
    assert_ne!(server.json("/varz")["auth_required"], true);

    let server = common::server()
        .config(
            "authorization { users: [{user: a, password: apass}, {user: b, password: bpass}] }\n\
             websocket { host: 127.0.0.1, port: -1, no_tls: true, no_auth_user: b }\n",
        )
        .start();
    for (ws, options, admitted, case) in [
        (
            false,
            nobody(),
            false,
            "the client port has no no_auth_user",
        ),
        (true, nobody(), true, "WebSocket's no_auth_user"),
        (
            true,
            user("a", "apass"),
            true,
            "a top-level user over WebSocket",
        ),
        (
            true,
            user("a", "bpass"),
            false,
            "a wrong password over WebSocket",
        ),
    ] {
        assert_eq!(gets_in(&server, ws, options).await, admitted, "{case}");
    }
    let anonymous = async_nats::connect(ws_url(&server)).await.unwrap();
    anonymous.flush().await.unwrap();
    let connz = server.json("/connz?auth=true");
    let users: Vec<&str> = connz["connections"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["authorized_user"].as_str())
        .collect();
    assert!(
        users.contains(&"b"),
        "no_auth_user names who it is: {connz}"
    );
}

/// Cookies named in the block fill what CONNECT leaves out: a browser
/// that cannot set CONNECT's credentials logs in with its cookies.
#[tokio::test]
async fn cookies_stand_in_for_connects_credentials() {
    let server = common::server()
        .config(
            "authorization { users: [{user: a, password: apass}] }\n\
             websocket { host: 127.0.0.1, port: -1, no_tls: true, \
             user_cookie: nuser, pass_cookie: npass }\n",
        )
        .start();
    for (cookie, admitted) in [
        ("nuser=a; npass=apass", true),
        ("other=1; nuser=a; npass=\"apass\"", true),
        ("nuser=a; npass=wrong", false),
        ("user=a; pass=apass", false),
    ] {
        let port = server.websocket_port.unwrap();
        let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .unwrap();
        let request = yawc::HttpRequestBuilder::new().header("Cookie", cookie);
        let mut socket = yawc::WebSocket::handshake_with_request(
            ws_url(&server).parse().unwrap(),
            tcp,
            yawc::Options::default(),
            request,
        )
        .await
        .unwrap();
        socket
            .send(yawc::Frame::binary(
                &b"CONNECT {\"verbose\":false}\r\nPING\r\n"[..],
            ))
            .await
            .unwrap();
        let mut read = String::new();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while !read.contains("PONG") && !read.contains("-ERR") {
            match tokio::time::timeout_at(deadline, socket.next()).await {
                Ok(Some(frame)) => read.push_str(&String::from_utf8_lossy(frame.payload())),
                _ => break,
            }
        }
        assert_eq!(read.contains("PONG"), admitted, "{cookie}: {read}");
        if !admitted {
            assert!(read.contains("-ERR 'Authorization Violation'"), "{read}");
        }
    }
}

/// The block's `ping_interval` is WebSocket clients' alone: a quiet
/// WebSocket client is pinged at its rhythm (1 s here), where the
/// top-level one (1 minute) would leave it alone for a minute.
#[tokio::test]
async fn the_websocket_ping_interval_is_its_clients_own() {
    let server = common::server()
        .config(
            "ping_interval: \"1m\"\n\
             websocket { host: 127.0.0.1, port: -1, no_tls: true, ping_interval: \"1s\" }\n",
        )
        .start();
    let port = server.websocket_port.unwrap();
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    let mut socket = yawc::WebSocket::handshake(
        ws_url(&server).parse().unwrap(),
        tcp,
        yawc::Options::default(),
    )
    .await
    .unwrap();
    socket
        .send(yawc::Frame::binary(&b"CONNECT {\"verbose\":false}\r\n"[..]))
        .await
        .unwrap();
    let mut pings = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while pings < 3 {
        let frame = tokio::time::timeout_at(deadline, socket.next())
            .await
            .expect("pinged in time")
            .expect("socket open");
        let text = String::from_utf8_lossy(frame.payload()).into_owned();
        for _ in text.matches("PING\r\n") {
            pings += 1;
            socket
                .send(yawc::Frame::binary(&b"PONG\r\n"[..]))
                .await
                .unwrap();
        }
    }
}
