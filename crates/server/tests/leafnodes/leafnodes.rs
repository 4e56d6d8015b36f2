//! Leaf nodes (`leafnodes {}`), on real processes through async-nats:
//! every pairing of flotilla with itself and with nats-server 2.15.1 (a
//! flotilla leaf of either hub, a nats-server leaf of a flotilla hub)
//! carries pub/sub, request/reply and queue groups both ways; a leaf
//! connection that drops and comes back loses no interest; a cycle is
//! found and refused; TLS on the leaf connection. Pairings with nats-server are skipped, saying so,
//! where it is not installed (`scripts/reference-env`).

#[path = "../common/mod.rs"]
mod common;

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::time::{Duration, Instant};

use futures::StreamExt;

/// A hub listening for leaf nodes on `port`.
fn hub(bin: &OsString, port: u16) -> common::Server {
    common::server()
        .binary(bin)
        .config(&format!(
            "server_name: hub\nleafnodes {{ listen: \"127.0.0.1:{port}\" }}\n"
        ))
        .start()
}

/// A server that joins the hub on `port` as a leaf node.
fn leaf(bin: &OsString, port: u16) -> common::Server {
    common::server()
        .binary(bin)
        .config(&format!(
            "server_name: leaf\nleafnodes {{ remotes: [ {{ url: \"nats-leaf://127.0.0.1:{port}\" }} ] }}\n"
        ))
        .start()
}

async fn next(sub: &mut async_nats::Subscriber) -> async_nats::Message {
    tokio::time::timeout(Duration::from_secs(10), sub.next())
        .await
        .expect("a message in time")
        .expect("subscription open")
}

/// Publishes `<prefix>.probe` from `from` until `sub` (on `<prefix>.>`,
/// on the other server) gets one: the interest has crossed the leaf
/// connection. Later probes still in flight are drained by the caller
/// skipping them.
async fn crossed(from: &async_nats::Client, prefix: &str, sub: &mut async_nats::Subscriber) {
    let deadline = Instant::now() + Duration::from_secs(15);
    let probe = format!("{prefix}.probe");
    loop {
        from.publish(probe.clone(), "".into()).await.unwrap();
        from.flush().await.unwrap();
        if let Ok(Some(m)) = tokio::time::timeout(Duration::from_millis(200), sub.next()).await {
            assert_eq!(m.subject.as_str(), probe);
            return;
        }
        assert!(
            Instant::now() < deadline,
            "no interest in {prefix}.> crossed"
        );
    }
}

/// The next message on `sub` that is not a probe.
async fn next_data(sub: &mut async_nats::Subscriber) -> async_nats::Message {
    loop {
        let m = next(sub).await;
        if !m.subject.ends_with(".probe") {
            return m;
        }
    }
}

/// Messages cross one way, headers and all.
async fn messages_cross(from: &async_nats::Client, to: &async_nats::Client, prefix: &str) {
    let mut sub = to.subscribe(format!("{prefix}.>")).await.unwrap();
    crossed(from, prefix, &mut sub).await;
    let mut headers = async_nats::HeaderMap::new();
    headers.insert("Hop", "leaf");
    from.publish_with_headers(format!("{prefix}.a"), headers, "hello".into())
        .await
        .unwrap();
    let big = vec![7u8; 256 * 1024];
    from.publish(format!("{prefix}.big"), big.clone().into())
        .await
        .unwrap();
    let m = next_data(&mut sub).await;
    assert_eq!(m.subject.as_str(), format!("{prefix}.a"));
    assert_eq!(&m.payload[..], b"hello");
    assert_eq!(
        m.headers
            .as_ref()
            .and_then(|h| h.get("Hop"))
            .map(|v| v.as_str()),
        Some("leaf")
    );
    let m = next_data(&mut sub).await;
    assert_eq!(m.payload.len(), big.len());
}

/// A service on `server` answers a requester on `client`.
async fn requests_cross(service: &async_nats::Client, client: &async_nats::Client, prefix: &str) {
    let mut requests = service.subscribe(format!("{prefix}.>")).await.unwrap();
    crossed(client, prefix, &mut requests).await;
    let answering = service.clone();
    let answer = tokio::spawn(async move {
        let m = next_data(&mut requests).await;
        let reply = m.reply.expect("a reply subject");
        let mut body = b"re: ".to_vec();
        body.extend_from_slice(&m.payload);
        answering.publish(reply, body.into()).await.unwrap();
        answering.flush().await.unwrap();
    });
    let reply = tokio::time::timeout(
        Duration::from_secs(10),
        client.request(format!("{prefix}.ask"), "ping".into()),
    )
    .await
    .expect("a reply in time")
    .expect("a reply");
    assert_eq!(&reply.payload[..], b"re: ping");
    answer.await.unwrap();
}

/// A queue group with a member on each side gets every message once,
/// from either side; with the near member gone, the far one gets all.
async fn queue_groups_cross(hub: &async_nats::Client, leaf: &async_nats::Client) {
    let mut on_hub = hub
        .queue_subscribe("work.>", "workers".into())
        .await
        .unwrap();
    let mut on_leaf = leaf
        .queue_subscribe("work.>", "workers".into())
        .await
        .unwrap();
    // Each side's queue interest was sent before its plain interest in
    // `sync.>`, so once that crossed, both groups are known.
    let mut hub_sync = hub.subscribe("sync.hub.>").await.unwrap();
    let mut leaf_sync = leaf.subscribe("sync.leaf.>").await.unwrap();
    crossed(leaf, "sync.hub", &mut hub_sync).await;
    crossed(hub, "sync.leaf", &mut leaf_sync).await;
    const EACH: usize = 50;
    for i in 0..EACH {
        hub.publish(format!("work.h{i}"), "".into()).await.unwrap();
        leaf.publish(format!("work.l{i}"), "".into()).await.unwrap();
    }
    hub.flush().await.unwrap();
    leaf.flush().await.unwrap();
    let mut seen = BTreeSet::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while seen.len() < 2 * EACH {
        assert!(Instant::now() < deadline, "{} of {}", seen.len(), 2 * EACH);
        let m = tokio::select! {
            Some(m) = on_hub.next() => m,
            Some(m) = on_leaf.next() => m,
        };
        assert!(seen.insert(m.subject.to_string()), "twice: {}", m.subject);
    }
    // No message comes a second time.
    let extra = tokio::time::timeout(Duration::from_millis(300), async {
        tokio::select! {
            Some(m) = on_hub.next() => m,
            Some(m) = on_leaf.next() => m,
        }
    })
    .await;
    assert!(extra.is_err(), "a queue message delivered twice");

    // The hub's member leaves: the hub's messages go to the leaf's.
    on_hub.unsubscribe().await.unwrap();
    common::sync(hub).await;
    for i in 0..EACH {
        hub.publish(format!("work.again{i}"), "".into())
            .await
            .unwrap();
    }
    hub.flush().await.unwrap();
    for _ in 0..EACH {
        let m = next(&mut on_leaf).await;
        assert!(m.subject.starts_with("work.again"), "{}", m.subject);
    }
}

/// Everything a pairing must carry.
async fn exercise(hub: &common::Server, leaf: &common::Server) {
    let on_hub = async_nats::connect(hub.url()).await.unwrap();
    let on_leaf = async_nats::connect(leaf.url()).await.unwrap();
    messages_cross(&on_leaf, &on_hub, "up").await;
    messages_cross(&on_hub, &on_leaf, "down").await;
    requests_cross(&on_hub, &on_leaf, "svc.hub").await;
    requests_cross(&on_leaf, &on_hub, "svc.leaf").await;
    queue_groups_cross(&on_hub, &on_leaf).await;
}

/// `/leafz` on both sides names the connection, the right way round.
fn check_leafz(hub: &common::Server, leaf: &common::Server) {
    let hub_view = hub.json("/leafz");
    assert_eq!(hub_view["leafnodes"], 1, "{hub_view}");
    assert_eq!(hub_view["leafs"][0]["name"], "leaf", "{hub_view}");
    assert_eq!(hub_view["leafs"][0]["is_spoke"], false, "{hub_view}");
    assert_eq!(hub_view["leafs"][0]["account"], "$G", "{hub_view}");
    let leaf_view = leaf.json("/leafz");
    assert_eq!(leaf_view["leafnodes"], 1, "{leaf_view}");
    assert_eq!(leaf_view["leafs"][0]["name"], "hub", "{leaf_view}");
    assert_eq!(leaf_view["leafs"][0]["is_spoke"], true, "{leaf_view}");
}

fn reference() -> Option<OsString> {
    let bin = common::nats_server_bin();
    if bin.is_none() {
        eprintln!("skipped: nats-server 2.15.1 is not installed (scripts/reference-env)");
    }
    bin
}

#[tokio::test]
async fn a_flotilla_leaf_of_a_flotilla_hub() {
    let port = common::free_ports(1)[0];
    let hub = hub(&common::flotilla_bin(), port);
    let leaf = leaf(&common::flotilla_bin(), port);
    exercise(&hub, &leaf).await;
    check_leafz(&hub, &leaf);
}

#[tokio::test]
async fn a_flotilla_leaf_of_a_nats_server_hub() {
    let Some(nats_server) = reference() else {
        return;
    };
    let port = common::free_ports(1)[0];
    let hub = hub(&nats_server, port);
    let leaf = leaf(&common::flotilla_bin(), port);
    exercise(&hub, &leaf).await;
    check_leafz(&hub, &leaf);
}

#[tokio::test]
async fn a_nats_server_leaf_of_a_flotilla_hub() {
    let Some(nats_server) = reference() else {
        return;
    };
    let port = common::free_ports(1)[0];
    let hub = hub(&common::flotilla_bin(), port);
    let leaf = leaf(&nats_server, port);
    exercise(&hub, &leaf).await;
    check_leafz(&hub, &leaf);
}

/// A leaf connection that drops, with the hub killed and started again
/// or the leaf restarted, comes back with all its interest: subscriptions
/// made before the drop, on either side, get messages again.
#[tokio::test]
async fn a_leaf_connection_that_comes_back_loses_no_interest() {
    let port = common::free_ports(1)[0];
    let mut hub = hub(&common::flotilla_bin(), port);
    let mut leaf = leaf(&common::flotilla_bin(), port);
    let on_leaf = async_nats::connect(leaf.url()).await.unwrap();
    let mut leaf_sub = on_leaf.subscribe("held.leaf.>").await.unwrap();
    {
        let on_hub = async_nats::connect(hub.url()).await.unwrap();
        crossed(&on_hub, "held.leaf", &mut leaf_sub).await;
    }

    hub.kill9();
    hub.restart();
    let on_hub = async_nats::connect(hub.url()).await.unwrap();
    // The leaf told the new hub its subscription again.
    crossed(&on_hub, "held.leaf", &mut leaf_sub).await;
    let mut hub_sub = on_hub.subscribe("held.hub.>").await.unwrap();
    crossed(&on_leaf, "held.hub", &mut hub_sub).await;

    leaf.kill9();
    leaf.restart();
    let on_leaf = async_nats::connect(leaf.url()).await.unwrap();
    // The hub told the new leaf connection its subscription again.
    crossed(&on_leaf, "held.hub", &mut hub_sub).await;
    let view = hub.json("/leafz");
    assert_eq!(view["leafnodes"], 1, "the old connection is gone: {view}");
}

/// Two servers that are each other's leaf node form a cycle: one of them
/// is told its own loop detection subject and refuses the connection.
#[tokio::test]
async fn a_cycle_of_leaf_nodes_is_found() {
    let ports = common::free_ports(2);
    let config = |listen: u16, remote: u16| {
        format!(
            "leafnodes {{ listen: \"127.0.0.1:{listen}\", reconnect: \"100ms\", remotes: [ {{ url: \"nats-leaf://127.0.0.1:{remote}\" }} ] }}\n"
        )
    };
    let a = common::server().config(&config(ports[0], ports[1])).start();
    let b = common::server().config(&config(ports[1], ports[0])).start();
    let deadline = Instant::now() + Duration::from_secs(15);
    while !(a.log_text().contains("Loop detected") || b.log_text().contains("Loop detected")) {
        assert!(
            Instant::now() < deadline,
            "no loop found:\n{}",
            a.log_text()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The JetStream API does not cross a leaf connection (nats-server denies
/// it both ways unless JetStream domains extend it): a leaf's client gets
/// no responders from the hub's JetStream.
#[tokio::test]
async fn the_jetstream_api_does_not_cross() {
    let port = common::free_ports(1)[0];
    let hub = common::server()
        .js()
        .config(&format!("leafnodes {{ listen: \"127.0.0.1:{port}\" }}\n"))
        .start();
    let leaf = leaf(&common::flotilla_bin(), port);
    let on_hub = async_nats::connect(hub.url()).await.unwrap();
    let on_leaf = async_nats::connect(leaf.url()).await.unwrap();
    messages_cross(&on_leaf, &on_hub, "ready").await;
    let answer = on_leaf.request("$JS.API.INFO", "".into()).await;
    assert!(
        matches!(&answer, Err(e) if e.kind() == async_nats::RequestErrorKind::NoResponders),
        "{answer:?}"
    );
}

/// What flotilla cannot honour is refused, never ignored: a TLS remote
/// it could not verify the hub of; and a seed or a deny list that is
/// no such thing.
#[test]
fn leafnode_settings_flotilla_lacks_are_refused() {
    for (config, why) in [
        (
            "leafnodes { remotes: [ { url: \"tls://h:1\" } ] }",
            "needs a tls block with 'ca_file'",
        ),
        (
            "leafnodes { remotes: [ { url: \"nats-leaf://h:1\", tls { cert_file: x, key_file: y } } ] }",
            "tls needs 'ca_file'",
        ),
        (
            "leafnodes { remotes: [ { url: \"nats-leaf://h:1\", nkey: SUNOTASEED } ] }",
            "Remote nkey has malformed seed",
        ),
        (
            "leafnodes { port: -1, authorization { nkey: UNOTAKEY } }",
            "Not a valid public nkey for leafnode authorization",
        ),
        (
            "leafnodes { remotes: [ { url: \"nats-leaf://h:1\", deny_imports: [\"a..b\"] } ] }",
            "is not a valid subject",
        ),
        (
            "leafnodes { remotes: [ { url: \"ws://h:1\" } ] }",
            "WebSocket",
        ),
        ("leafnodes { remotes: [ { account: A } ] }", "url"),
    ] {
        let err = common::refused_config(config);
        assert!(err.contains(why), "{config}: {err}");
    }
}

/// A hub whose JetStream has a domain is reached across the leaf
/// connection by the domain's name (`$JS.<domain>.API`): a leaf's client
/// makes a stream there, publishes into it and reads it back; the hub's
/// own clients see the same stream. Checked against a flotilla hub and a
/// nats-server hub.
#[tokio::test]
async fn a_hubs_jetstream_domain_is_reached_from_a_leaf() {
    for bin in common::flotilla_and_reference() {
        let port = common::free_ports(1)[0];
        let hub = common::server()
            .binary(&bin)
            .js()
            .config(&format!(
                "server_name: hub\njetstream {{ domain: hub }}\nleafnodes {{ listen: \"127.0.0.1:{port}\" }}\n"
            ))
            .start();
        let leaf = leaf(&common::flotilla_bin(), port);
        let on_hub = async_nats::connect(hub.url()).await.unwrap();
        let on_leaf = async_nats::connect(leaf.url()).await.unwrap();
        // The leaf connection is up once ordinary interest crosses.
        messages_cross(&on_leaf, &on_hub, "ready").await;
        let js = async_nats::jetstream::with_domain(on_leaf.clone(), "hub");
        let mut stream = js
            .create_stream(async_nats::jetstream::stream::Config {
                name: "ORDERS".into(),
                subjects: vec!["orders.>".into()],
                ..Default::default()
            })
            .await
            .unwrap_or_else(|e| panic!("{bin:?}: {e}"));
        let ack = js
            .publish("orders.1", "first".into())
            .await
            .unwrap()
            .await
            .unwrap_or_else(|e| panic!("{bin:?}: {e}"));
        assert_eq!((ack.stream.as_str(), ack.sequence), ("ORDERS", 1));
        assert_eq!(stream.info().await.unwrap().state.messages, 1);
        let at_hub = async_nats::jetstream::new(on_hub.clone());
        let message = at_hub
            .get_stream("ORDERS")
            .await
            .unwrap()
            .get_raw_message(1)
            .await
            .unwrap();
        assert_eq!(&message.payload[..], b"first");
    }
}

/// A stream on a leaf sources and mirrors a stream in the hub's domain
/// through `external` (the domain's API prefix): what the hub's stream
/// holds, and what is published to it later, is copied across.
#[tokio::test]
async fn streams_source_and_mirror_from_another_domain() {
    let port = common::free_ports(1)[0];
    let hub = common::server()
        .js()
        .config(&format!(
            "server_name: hub\njetstream {{ domain: hub }}\nleafnodes {{ listen: \"127.0.0.1:{port}\" }}\n"
        ))
        .start();
    let leaf = common::server()
        .js()
        .config(&format!(
            "server_name: leaf\njetstream {{ domain: leaf }}\nleafnodes {{ remotes: [ {{ url: \"nats-leaf://127.0.0.1:{port}\" }} ] }}\n"
        ))
        .start();
    let on_hub = async_nats::connect(hub.url()).await.unwrap();
    let on_leaf = async_nats::connect(leaf.url()).await.unwrap();
    messages_cross(&on_leaf, &on_hub, "ready").await;
    let at_hub = async_nats::jetstream::new(on_hub.clone());
    at_hub
        .create_stream(async_nats::jetstream::stream::Config {
            name: "ORDERS".into(),
            subjects: vec!["orders.>".into()],
            ..Default::default()
        })
        .await
        .unwrap();
    for i in 0..3 {
        at_hub
            .publish(format!("orders.{i}"), "before".into())
            .await
            .unwrap()
            .await
            .unwrap();
    }
    let external = Some(async_nats::jetstream::stream::External {
        api_prefix: "$JS.hub.API".into(),
        delivery_prefix: None,
    });
    let origin = async_nats::jetstream::stream::Source {
        name: "ORDERS".into(),
        external,
        ..Default::default()
    };
    let at_leaf = async_nats::jetstream::new(on_leaf.clone());
    let mut copy = at_leaf
        .create_stream(async_nats::jetstream::stream::Config {
            name: "COPY".into(),
            sources: Some(vec![origin.clone()]),
            ..Default::default()
        })
        .await
        .unwrap();
    let mut mirror = at_leaf
        .create_stream(async_nats::jetstream::stream::Config {
            name: "MIRROR".into(),
            mirror: Some(origin),
            ..Default::default()
        })
        .await
        .unwrap();
    at_hub
        .publish("orders.3", "after".into())
        .await
        .unwrap()
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let copied = copy.info().await.unwrap().state.messages;
        let mirrored = mirror.info().await.unwrap().state.messages;
        if copied == 4 && mirrored == 4 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "copied {copied}, mirrored {mirrored} of 4"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let last = mirror.get_raw_message(4).await.unwrap();
    assert_eq!(
        (last.subject.as_str(), &last.payload[..]),
        ("orders.3", &b"after"[..])
    );
}

/// A hub with `leafnodes { authorization }` takes a leaf node whose URL
/// carries the user and password, and refuses one with a wrong password
/// (`-ERR 'Authorization Violation'`), which never registers.
#[tokio::test]
async fn leafnode_authorization_admits_only_the_configured_user() {
    let port = common::free_ports(1)[0];
    let hub = common::server()
        .config(&format!(
            "server_name: hub\nleafnodes {{ listen: \"127.0.0.1:{port}\", authorization {{ user: leaf, password: secret }} }}\n"
        ))
        .start();
    let remote = |pass: &str| {
        common::server()
            .config(&format!(
                "leafnodes {{ remotes: [ {{ url: \"nats-leaf://leaf:{pass}@127.0.0.1:{port}\" }} ] }}\n"
            ))
            .start()
    };
    refused(&hub, remote("guess"));
    let right = remote("secret");
    wait_leafs(&hub, 1);
    assert_eq!(right.json("/leafz")["leafs"][0]["name"], "hub");
}

/// A hub whose leaf node port takes TLS (`verify`: leafs must present a
/// certificate the test CA signed).
fn tls_hub(bin: &OsString, port: u16, certs: &common::certs::Certs) -> common::Server {
    let tls = certs.block_for(Some("route"), "  verify: true\n");
    common::server()
        .binary(bin)
        .config(&format!(
            "server_name: hub\nleafnodes {{ listen: \"127.0.0.1:{port}\"\n{tls} }}\n"
        ))
        .start()
}

/// A leaf of the hub on `port` over `url_scheme`, with `tls` in its
/// remote (or none).
fn tls_leaf(bin: &OsString, port: u16, scheme: &str, tls: &str) -> common::Server {
    common::server()
        .binary(bin)
        .config(&format!(
            "server_name: leaf\nleafnodes {{ remotes: [ {{ url: \"{scheme}://127.0.0.1:{port}\"\n{tls} }} ] }}\n"
        ))
        .start()
}

/// The hub told `leaf` `Authorization Violation` and holds no leaf
/// connection.
fn refused(hub: &common::Server, leaf: common::Server) {
    assert!(
        leaf.wait_log("Authorization Violation", Duration::from_secs(10)),
        "{}",
        leaf.log_text()
    );
    assert_eq!(hub.json("/leafz")["leafnodes"], 0);
}

fn wait_leafs(server: &common::Server, count: u64) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while server.json("/leafz")["leafnodes"] != count {
        assert!(Instant::now() < deadline, "{}", server.log_text());
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// With `tls {}` on the hub's leaf node port, INFO goes out in the clear
/// and the leaf shakes hands before CONNECT, as nats-server does: every
/// pairing with nats-server carries messages both ways over TLS, the
/// hub verifying the leaf's certificate and the leaf the hub's.
#[tokio::test]
async fn leaf_connections_speak_tls() {
    let certs = common::certs::Certs::new();
    let mut pairs = vec![(common::flotilla_bin(), common::flotilla_bin())];
    if let Some(nats_server) = reference() {
        pairs.push((nats_server.clone(), common::flotilla_bin()));
        pairs.push((common::flotilla_bin(), nats_server));
    }
    let leaf_tls = certs.block_for(Some("client"), "");
    for (hub_bin, leaf_bin) in pairs {
        let port = common::free_ports(1)[0];
        let hub = tls_hub(&hub_bin, port, &certs);
        let leaf = tls_leaf(&leaf_bin, port, "tls", &leaf_tls);
        wait_leafs(&hub, 1);
        let on_hub = async_nats::connect(hub.url()).await.unwrap();
        let on_leaf = async_nats::connect(leaf.url()).await.unwrap();
        messages_cross(&on_leaf, &on_hub, "up").await;
        messages_cross(&on_hub, &on_leaf, "down").await;
    }
}

/// A TLS hub admits no leaf that cannot prove itself: one without a tls
/// block (it says why and never sends CONNECT), one whose certificate
/// another CA signed, and one that trusts another CA than the hub's.
#[tokio::test]
async fn a_tls_hub_refuses_leafs_that_fail_the_handshake() {
    let certs = common::certs::Certs::new();
    let port = common::free_ports(1)[0];
    let hub = tls_hub(&common::flotilla_bin(), port, &certs);
    let plain = tls_leaf(&common::flotilla_bin(), port, "nats-leaf", "");
    assert!(
        plain.wait_log("the hub requires TLS", Duration::from_secs(10)),
        "{}",
        plain.log_text()
    );
    drop(plain);
    let rogue = tls_leaf(
        &common::flotilla_bin(),
        port,
        "tls",
        &certs.block_for(Some("rogue"), ""),
    );
    assert!(
        hub.wait_log("TLS leafnode handshake error", Duration::from_secs(10)),
        "{}",
        hub.log_text()
    );
    drop(rogue);
    assert_eq!(hub.json("/leafz")["leafnodes"], 0);
    // The hub still takes a leaf that can.
    let good = tls_leaf(
        &common::flotilla_bin(),
        port,
        "tls",
        &certs.block_for(Some("client"), ""),
    );
    wait_leafs(&hub, 1);
    assert_eq!(good.json("/leafz")["leafs"][0]["name"], "hub");
}

/// A remote's `nkey` seed proves the leaf to a hub that knows the key:
/// its CONNECT carries the public key and a signature of the hub's
/// nonce. Another seed is refused. Both where the hub's client users
/// are nkeys and where its leaf node authorization names one.
#[tokio::test]
async fn a_leaf_proves_itself_with_an_nkey() {
    for where_ in ["users", "leafnodes"] {
        a_leaf_proves_itself_with_an_nkey_in(where_).await;
    }
}

async fn a_leaf_proves_itself_with_an_nkey_in(where_: &str) {
    let port = common::free_ports(1)[0];
    let user = nkeys::KeyPair::new_user();
    let key = user.public_key();
    let config = match where_ {
        "users" => format!(
            "server_name: hub\nauthorization {{ users: [ {{ nkey: {key} }} ] }}\nleafnodes {{ listen: \"127.0.0.1:{port}\" }}\n"
        ),
        _ => format!(
            "server_name: hub\nleafnodes {{ listen: \"127.0.0.1:{port}\", authorization {{ nkey: {key} }} }}\n"
        ),
    };
    let hub = common::server().config(&config).start();
    let leaf_with = |seed: String| {
        common::server()
            .config(&format!(
                "server_name: leaf\nleafnodes {{ remotes: [ {{ url: \"nats-leaf://127.0.0.1:{port}\", nkey: {seed} }} ] }}\n"
            ))
            .start()
    };
    refused(&hub, leaf_with(nkeys::KeyPair::new_user().seed().unwrap()));
    let known = leaf_with(user.seed().unwrap());
    wait_leafs(&hub, 1);
    assert_eq!(known.json("/leafz")["leafs"][0]["name"], "hub");
}

/// Receives from `sub` until a message that is not a probe comes.
async fn next_real(sub: &mut async_nats::Subscriber) -> async_nats::Message {
    loop {
        let m = next(sub).await;
        if !m.subject.ends_with(".probe") {
            return m;
        }
    }
}

/// A remote's `deny_imports` keeps the hub's messages on those subjects
/// out of the leaf, even under a wildcard subscription, and its
/// `deny_exports` keeps the leaf's own from the hub; other subjects
/// cross. Against a flotilla hub, and a nats-server 2.15.1 hub (which
/// learns the imports denied from CONNECT's `deny_pub`).
#[tokio::test]
async fn a_remotes_deny_lists_hold_both_ways() {
    for bin in common::flotilla_and_reference() {
        let port = common::free_ports(1)[0];
        let hub = hub(&bin, port);
        let leaf = common::server()
            .config(&format!(
                "server_name: leaf\nleafnodes {{ remotes: [ {{ url: \"nats-leaf://127.0.0.1:{port}\", \
                 deny_imports: [\"down.secret.>\"], deny_exports: \"up.private\" }} ] }}\n"
            ))
            .start();
        let on_hub = async_nats::connect(hub.url()).await.unwrap();
        let on_leaf = async_nats::connect(leaf.url()).await.unwrap();

        let mut at_leaf = on_leaf.subscribe("down.>").await.unwrap();
        crossed(&on_hub, "down", &mut at_leaf).await;
        on_hub.publish("down.secret.a", "no".into()).await.unwrap();
        on_hub.publish("down.open", "yes".into()).await.unwrap();
        let got = next_real(&mut at_leaf).await;
        assert_eq!(got.subject.as_str(), "down.open", "{bin:?}");

        let mut at_hub = on_hub.subscribe("up.>").await.unwrap();
        crossed(&on_leaf, "up", &mut at_hub).await;
        on_leaf.publish("up.private", "no".into()).await.unwrap();
        on_leaf.publish("up.public", "yes".into()).await.unwrap();
        let got = next_real(&mut at_hub).await;
        assert_eq!(got.subject.as_str(), "up.public", "{bin:?}");
    }
}

/// A hub's leaf `authorization { users }` binds each leaf user to its
/// account: what the leaf publishes reaches that account's clients on
/// the hub, and not the global account's.
#[tokio::test]
async fn leaf_users_are_bound_to_their_accounts() {
    let port = common::free_ports(1)[0];
    let hub = common::server()
        .config(&format!(
            "server_name: hub\naccounts {{ A: {{ users: [ {{ user: ca, password: p }} ] }} }}\n\
             authorization {{ users: [ {{ user: g, password: p }} ] }}\n\
             leafnodes {{ listen: \"127.0.0.1:{port}\", authorization {{ users: [ {{ user: la, password: lp, account: A }} ] }} }}\n"
        ))
        .start();
    let leaf = common::server()
        .config(&format!(
            "server_name: leaf\nleafnodes {{ remotes: [ {{ url: \"nats-leaf://la:lp@127.0.0.1:{port}\" }} ] }}\n"
        ))
        .start();
    wait_leafs(&hub, 1);
    assert_eq!(hub.json("/leafz")["leafs"][0]["account"], "A");
    let in_a = async_nats::ConnectOptions::with_user_and_password("ca".into(), "p".into())
        .connect(hub.url())
        .await
        .unwrap();
    let in_global = async_nats::ConnectOptions::with_user_and_password("g".into(), "p".into())
        .connect(hub.url())
        .await
        .unwrap();
    let mut global_sub = in_global.subscribe("up.>").await.unwrap();
    in_global.flush().await.unwrap();
    let mut a_sub = in_a.subscribe("up.>").await.unwrap();
    let on_leaf = async_nats::connect(leaf.url()).await.unwrap();
    crossed(&on_leaf, "up", &mut a_sub).await;
    // The global account's subscriber, made first, has nothing (a
    // message of its own comes first).
    in_global.publish("up.own", "".into()).await.unwrap();
    assert_eq!(next(&mut global_sub).await.subject.as_str(), "up.own");
}

/// A peer on the leaf node port that speaks nonsense (a CONNECT that is
/// not JSON, then an unknown operation after a good CONNECT) is told
/// why and closed alone; the hub goes on serving a real leaf.
#[tokio::test]
async fn a_malformed_leaf_peer_is_closed_alone() {
    use std::io::{BufRead, BufReader, Write};
    let port = common::free_ports(1)[0];
    let hub = hub(&common::flotilla_bin(), port);
    let talk = |lines: &[&str]| -> String {
        let stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let mut info = String::new();
        reader.read_line(&mut info).unwrap();
        assert!(info.starts_with("INFO "), "{info}");
        let mut writer = stream;
        for line in lines {
            writer.write_all(line.as_bytes()).unwrap();
        }
        let mut said = String::new();
        let mut line = String::new();
        while reader.read_line(&mut line).map(|n| n > 0).unwrap_or(false) {
            said.push_str(&line);
            line.clear();
        }
        said
    };
    let said = talk(&["CONNECT {not json\r\n"]);
    assert!(said.contains("-ERR 'invalid CONNECT'"), "{said}");
    let said = talk(&[
        "CONNECT {\"name\":\"odd\",\"server_id\":\"X\"}\r\n",
        "BOGUS op\r\n",
    ]);
    assert!(said.contains("-ERR 'Unknown Protocol Operation'"), "{said}");
    assert_eq!(hub.json("/leafz")["leafnodes"], 0);
    let leaf = leaf(&common::flotilla_bin(), port);
    wait_leafs(&hub, 1);
    let on_hub = async_nats::connect(hub.url()).await.unwrap();
    let on_leaf = async_nats::connect(leaf.url()).await.unwrap();
    messages_cross(&on_leaf, &on_hub, "after").await;
}

/// A remote whose credentials file is missing or malformed says so and
/// sends no CONNECT: the hub never registers it, and the server runs on.
#[tokio::test]
async fn unreadable_credentials_are_reported_not_sent() {
    let port = common::free_ports(1)[0];
    let hub = hub(&common::flotilla_bin(), port);
    let dir = tempfile::tempdir().unwrap();
    let garbled = dir.path().join("garbled.creds");
    std::fs::write(&garbled, "not a creds file\n").unwrap();
    let missing = dir.path().join("missing.creds");
    for (file, says) in [
        (&missing, "credentials file"),
        (&garbled, "Credentials file malformed"),
    ] {
        let leaf = common::server()
            .config(&format!(
                "server_name: leaf\nleafnodes {{ remotes: [ {{ url: \"nats-leaf://127.0.0.1:{port}\", credentials: \"{}\" }} ] }}\n",
                file.display()
            ))
            .start();
        assert!(
            leaf.wait_log(says, Duration::from_secs(10)),
            "{}",
            leaf.log_text()
        );
        assert_eq!(hub.json("/leafz")["leafnodes"], 0);
        async_nats::connect(leaf.url())
            .await
            .unwrap()
            .flush()
            .await
            .unwrap();
    }
}

/// An account's `limits { max_leafnodes }` on the hub: the leaf node past
/// the limit is refused with nats-server's words, on a flotilla hub and
/// on a nats-server hub alike.
#[tokio::test]
async fn an_accounts_leaf_node_limit_holds() {
    let mut hubs = vec![common::flotilla_bin()];
    hubs.extend(reference());
    for bin in hubs {
        let port = common::free_ports(1)[0];
        let hub = common::server()
            .binary(&bin)
            .config(&format!(
                "server_name: hub\naccounts {{ L {{ users: [ {{ user: l, password: p }} ], limits {{ max_leafnodes: 1 }} }} }}\n\
                 leafnodes {{ listen: \"127.0.0.1:{port}\" }}\n"
            ))
            .start();
        let remote = || {
            common::server()
                .config(&format!(
                    "leafnodes {{ remotes: [ {{ url: \"nats-leaf://l:p@127.0.0.1:{port}\" }} ] }}\n"
                ))
                .start()
        };
        let _first = remote();
        wait_leafs(&hub, 1);
        let second = remote();
        assert!(
            second.wait_log(
                "maximum account active connections exceeded",
                Duration::from_secs(10)
            ),
            "{:?}: {}",
            bin,
            second.log_text()
        );
        assert_eq!(hub.json("/leafz")["leafnodes"], 1, "{bin:?}");
    }
}

/// A leaf node bound to an account that imports a service and maps
/// subjects: a request from the leaf's side reaches the exporter's
/// responder on the hub and its answer comes back, and a publish from
/// the leaf's side is mapped as a client's would be. The hub tells the
/// leaf of both subjects before anyone subscribes on them there
/// (nats-server's `initLeafNodeSmapAndSendSubs`).
#[tokio::test]
async fn a_leafs_account_imports_and_mappings_apply() {
    let port = common::free_ports(1)[0];
    let hub = common::server()
        .config(&format!(
            r#"server_name: hub
accounts {{
  A {{ users: [ {{ user: a, password: p }} ], exports: [ {{ service: "svc.>" }} ] }}
  B {{
    users: [ {{ user: b, password: p }} ]
    imports: [ {{ service: {{ account: A, subject: "svc.>" }} }} ]
    mappings: {{ "old.>": "new.>" }}
  }}
}}
leafnodes {{ listen: "127.0.0.1:{port}", authorization {{ users: [ {{ user: lb, password: lp, account: B }} ] }} }}
"#
        ))
        .start();
    let leaf = common::server()
        .config(&format!(
            "server_name: leaf\nleafnodes {{ remotes: [ {{ url: \"nats-leaf://lb:lp@127.0.0.1:{port}\" }} ] }}\n"
        ))
        .start();
    wait_leafs(&hub, 1);
    let on_hub = |user: &'static str| {
        async_nats::ConnectOptions::with_user_and_password(user.into(), "p".into())
            .connect(hub.url())
    };
    let (in_a, in_b) = (on_hub("a").await.unwrap(), on_hub("b").await.unwrap());
    let mut requests = in_a.subscribe("svc.>").await.unwrap();
    let mut mapped = in_b.subscribe("new.>").await.unwrap();
    // A request nobody answers comes back after the hub read every SUB
    // before it (`flush` only writes).
    for c in [&in_a, &in_b] {
        let _ = c.request("settle.nobody", "".into()).await;
    }
    let on_leaf = async_nats::connect(leaf.url()).await.unwrap();
    let responder = tokio::spawn(async move {
        let req = next(&mut requests).await;
        assert_eq!(req.subject.as_str(), "svc.time");
        in_a.publish(req.reply.unwrap(), "noon".into())
            .await
            .unwrap();
        in_a.flush().await.unwrap();
    });
    let answer = tokio::time::timeout(
        Duration::from_secs(10),
        on_leaf.request("svc.time", "now?".into()),
    )
    .await
    .expect("an answer in time")
    .expect("the import's answer");
    assert_eq!(&answer.payload[..], b"noon");
    responder.await.unwrap();
    on_leaf.publish("old.x", "moved".into()).await.unwrap();
    on_leaf.flush().await.unwrap();
    let m = next(&mut mapped).await;
    assert_eq!(
        (m.subject.as_str(), &m.payload[..]),
        ("new.x", &b"moved"[..])
    );
}

/// A reload that changes an account's mappings tells a connected leaf
/// node the new sources as standing interest, as it told the old ones at
/// connect: a publish from the leaf's side to the new source is mapped
/// on the hub at once, with nothing subscribed to it there. Deliberately
/// unlike nats-server 2.15.1, whose leaf nodes keep the sources told at
/// connect until they reconnect (a reload is to change routing for live
/// connections).
#[tokio::test]
async fn a_reload_tells_a_leaf_the_new_mappings() {
    if common::reference_server() {
        return;
    }
    let port = common::free_ports(1)[0];
    let hub_config = |source: &str| {
        format!(
            r#"server_name: hub
accounts {{
  B {{ users: [ {{ user: b, password: p }} ], mappings: {{ "{source}": "new.>" }} }}
}}
leafnodes {{ listen: "127.0.0.1:{port}", authorization {{ users: [ {{ user: lb, password: lp, account: B }} ] }} }}
"#
        )
    };
    let hub = common::server().config(&hub_config("old.>")).start();
    let leaf = common::server()
        .config(&format!(
            "server_name: leaf\nleafnodes {{ remotes: [ {{ url: \"nats-leaf://lb:lp@127.0.0.1:{port}\" }} ] }}\n"
        ))
        .start();
    wait_leafs(&hub, 1);
    let in_b = common::connect_as(&hub.url(), "b", "p").await;
    let mut mapped = in_b.subscribe("new.>").await.unwrap();
    let _ = in_b.request("settle.nobody", "".into()).await;
    let on_leaf = async_nats::connect(leaf.url()).await.unwrap();
    std::fs::write(hub.config_file(), hub_config("older.>")).unwrap();
    hub.signal(libc::SIGHUP);
    assert!(
        hub.wait_log("Reloaded server configuration", Duration::from_secs(10)),
        "{}",
        hub.log_text()
    );
    // The leaf hears of the new source a moment after the reload.
    let deadline = Instant::now() + Duration::from_secs(10);
    let m = loop {
        on_leaf.publish("older.x", "moved".into()).await.unwrap();
        on_leaf.flush().await.unwrap();
        match tokio::time::timeout(Duration::from_millis(200), mapped.next()).await {
            Ok(Some(m)) => break m,
            _ => assert!(Instant::now() < deadline, "never mapped"),
        }
    };
    assert_eq!(
        (m.subject.as_str(), &m.payload[..]),
        ("new.x", &b"moved"[..])
    );
}
