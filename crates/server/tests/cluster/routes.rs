//! Core clustering over real routes: three flotilla processes on
//! loopback, driven by async-nats.

#[path = "../common/mod.rs"]
mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use futures_util::StreamExt;

/// A server listening for routes on a random port, dialing `routes`.
fn node(name: &str, routes: &[String]) -> common::Server {
    let mut b = common::server()
        .arg("-n")
        .arg(name)
        .arg("--cluster_name")
        .arg("c1")
        .arg("--cluster")
        .arg("nats://127.0.0.1:-1");
    if !routes.is_empty() {
        b = b.arg("--routes").arg(&routes.join(","));
    }
    b.start()
}

fn route_url(s: &common::Server) -> String {
    format!(
        "nats-route://127.0.0.1:{}",
        s.cluster_port.expect("cluster port")
    )
}

/// The names of the servers `s` has a route to.
fn peers(s: &common::Server) -> Vec<String> {
    let z = s.json("/routez");
    let mut names: Vec<String> = z["routes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["remote_name"].as_str().unwrap().to_string())
        .collect();
    names.sort();
    assert_eq!(z["num_routes"].as_u64().unwrap() as usize, names.len());
    names
}

/// A is the seed; B and C name only A and must still find each other.
fn mesh() -> Vec<common::Server> {
    let a = node("A", &[]);
    let b = node("B", &[route_url(&a)]);
    let c = node("C", &[route_url(&a)]);
    let all = vec![a, b, c];
    common::wait_for("a full mesh", Duration::from_secs(15), || {
        all.iter().all(|s| peers(s).len() == 2)
    });
    all
}

/// Waits until `s` knows of interest in `subject` over some route.
fn wait_remote_interest(s: &common::Server, subject: &str, routes: usize) {
    common::wait_for(
        &format!("interest in {subject}"),
        Duration::from_secs(10),
        || {
            let z = s.json("/routez?subs=1");
            z["routes"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|r| {
                    r["subscriptions_list"]
                        .as_array()
                        .is_some_and(|l| l.iter().any(|x| x == subject))
                })
                .count()
                >= routes
        },
    );
}

#[tokio::test]
async fn servers_that_name_only_a_seed_form_a_full_mesh() {
    let all = mesh();
    assert_eq!(peers(&all[0]), ["B", "C"]);
    assert_eq!(peers(&all[1]), ["A", "C"]);
    assert_eq!(peers(&all[2]), ["A", "B"]);
    let z = all[1].json("/routez");
    let r = &z["routes"][0];
    for field in [
        "rid",
        "remote_id",
        "did_solicit",
        "is_configured",
        "ip",
        "port",
        "start",
        "last_activity",
        "uptime",
        "idle",
        "pending_size",
        "in_msgs",
        "out_msgs",
        "in_bytes",
        "out_bytes",
        "subscriptions",
    ] {
        assert!(!r[field].is_null(), "routez lacks {field}: {r}");
    }
    assert_eq!(all[0].json("/varz")["routes"], 2);
    assert!(all[0].wait_log("Route connection created", Duration::from_secs(1)));
    // Clients learn every server's URL.
    let c = all[0].client().await;
    let urls: BTreeSet<String> = c.server_info().connect_urls.into_iter().collect();
    let want: BTreeSet<String> = all
        .iter()
        .map(|s| format!("127.0.0.1:{}", s.port))
        .collect();
    assert_eq!(urls, want);
    // And /varz says the same (test launchers wait for it).
    let varz = all[0].json("/varz");
    let listed: BTreeSet<String> = varz["connect_urls"]
        .as_array()
        .unwrap_or_else(|| panic!("no connect_urls: {varz}"))
        .iter()
        .map(|u| u.as_str().unwrap().to_string())
        .collect();
    assert_eq!(listed, want);
}

#[tokio::test]
async fn pub_sub_request_reply_and_no_responders_across_servers() {
    let all = mesh();
    let (a, b, c) = (
        all[0].client().await,
        all[1].client().await,
        all[2].client().await,
    );
    let mut sub = c.subscribe("orders.>").await.unwrap();
    c.flush().await.unwrap();
    wait_remote_interest(&all[1], "orders.>", 1);
    for i in 0..100 {
        b.publish(format!("orders.{i}"), format!("m{i}").into())
            .await
            .unwrap();
    }
    b.flush().await.unwrap();
    for i in 0..100 {
        let m = tokio::time::timeout(Duration::from_secs(5), sub.next())
            .await
            .expect("delivered")
            .unwrap();
        assert_eq!(m.subject.as_str(), format!("orders.{i}"));
        assert_eq!(&m.payload[..], format!("m{i}").as_bytes());
    }
    // One hop: nothing arrives twice through the third server.
    assert!(
        tokio::time::timeout(Duration::from_millis(300), sub.next())
            .await
            .is_err(),
        "a message came twice"
    );

    // Request on C, responder on A; headers travel too.
    let mut svc = a.subscribe("svc.echo").await.unwrap();
    a.flush().await.unwrap();
    wait_remote_interest(&all[2], "svc.echo", 1);
    let responder = a.clone();
    tokio::spawn(async move {
        while let Some(m) = svc.next().await {
            let mut h = async_nats::HeaderMap::new();
            h.insert("X-From", "A");
            let body = [b"echo:".as_slice(), &m.payload].concat();
            responder
                .publish_with_headers(m.reply.unwrap(), h, body.into())
                .await
                .unwrap();
        }
    });
    let reply = c.request("svc.echo", "hi".into()).await.unwrap();
    assert_eq!(&reply.payload[..], b"echo:hi");
    assert_eq!(reply.headers.unwrap().get("X-From").unwrap().as_str(), "A");

    // Nobody anywhere: the requester is told at once.
    let err = c.request("nobody.home", "x".into()).await.unwrap_err();
    assert_eq!(
        err.kind(),
        async_nats::client::RequestErrorKind::NoResponders,
        "{err}"
    );
}

#[tokio::test]
async fn a_queue_group_spread_over_servers_gets_each_message_once() {
    let all = mesh();
    let clients = [
        all[0].client().await,
        all[1].client().await,
        all[2].client().await,
    ];
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(usize, String)>();
    // Two members on A, two on B; a plain subscriber on A sees all.
    for (server, client) in [
        (0usize, &clients[0]),
        (0, &clients[0]),
        (1, &clients[1]),
        (1, &clients[1]),
    ] {
        let mut s = client
            .queue_subscribe("work", "workers".into())
            .await
            .unwrap();
        let tx = tx.clone();
        tokio::spawn(async move {
            while let Some(m) = s.next().await {
                let _ = tx.send((server, String::from_utf8_lossy(&m.payload).into_owned()));
            }
        });
    }
    let mut all_sub = clients[0].subscribe("work").await.unwrap();
    for c in &clients[..2] {
        c.flush().await.unwrap();
    }
    wait_remote_interest(&all[2], "work", 2);
    // Weights settle: A's and B's group counts reach C.
    common::wait_for("queue weights", Duration::from_secs(5), || {
        let z = all[2].json("/routez?subs=1");
        z["routes"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["subscriptions"].as_u64().unwrap() >= 1)
    });
    const N: usize = 400;
    for i in 0..N {
        clients[2]
            .publish("work", format!("{i}").into())
            .await
            .unwrap();
    }
    clients[2].flush().await.unwrap();
    let mut seen = BTreeSet::new();
    let mut per_server = [0usize; 2];
    while seen.len() < N {
        let (server, v) = tokio::time::timeout(Duration::from_secs(5), rx.recv())
            .await
            .expect("all delivered")
            .unwrap();
        assert!(seen.insert(v.clone()), "message {v} delivered twice");
        per_server[server] += 1;
    }
    assert!(
        tokio::time::timeout(Duration::from_millis(300), rx.recv())
            .await
            .is_err(),
        "a queue group got a message twice"
    );
    assert!(
        per_server[0] > N / 5 && per_server[1] > N / 5,
        "spread by member count: {per_server:?}"
    );
    for _ in 0..N {
        tokio::time::timeout(Duration::from_secs(5), all_sub.next())
            .await
            .expect("the plain subscriber gets every message")
            .unwrap();
    }
}

#[tokio::test]
async fn a_restarted_server_rejoins_and_interest_follows() {
    let mut all = mesh();
    let a = all[0].client().await;
    let mut sub = a.subscribe("after").await.unwrap();
    a.flush().await.unwrap();
    all[1].kill9();
    common::wait_for("the route to go", Duration::from_secs(10), || {
        peers(&all[0]) == ["C"]
    });
    all[1].restart();
    common::wait_for("the mesh again", Duration::from_secs(15), || {
        all.iter().all(|s| peers(s).len() == 2)
    });
    wait_remote_interest(&all[1], "after", 1);
    let b = all[1].client().await;
    b.publish("after", "x".into()).await.unwrap();
    b.flush().await.unwrap();
    let m = tokio::time::timeout(Duration::from_secs(5), sub.next())
        .await
        .expect("delivered after the restart")
        .unwrap();
    assert_eq!(&m.payload[..], b"x");
}

/// Every server names every other (and itself, as shared config files
/// do), so each pair dials both ways at once. After every simultaneous
/// restart each server keeps exactly one route per peer.
#[test]
fn simultaneous_dials_leave_one_route_per_pair() {
    let ports = common::free_ports(3);
    let routes: Vec<String> = ports
        .iter()
        .map(|p| format!("nats-route://127.0.0.1:{p}"))
        .collect();
    let start = |i: usize| {
        common::server()
            .arg("-n")
            .arg(&format!("S{i}"))
            .arg("--cluster_name")
            .arg("c1")
            .arg("--cluster")
            .arg(&format!("nats://127.0.0.1:{}", ports[i]))
            .arg("--routes")
            .arg(&routes.join(","))
            .start()
    };
    let mut all: Vec<common::Server> = (0..3).map(start).collect();
    for round in 0..20 {
        if round > 0 {
            for s in all.iter_mut() {
                s.kill9();
            }
            all = (0..3).map(start).collect();
        }
        common::wait_for("one route per pair", Duration::from_secs(15), || {
            all.iter().all(|s| peers(s).len() == 2)
        });
        // Settled, not passing through: still one per pair a moment later,
        // and both ends of each pair agree on the connection.
        std::thread::sleep(Duration::from_millis(300));
        for (i, s) in all.iter().enumerate() {
            let names = peers(s);
            let want: Vec<String> = (0..3)
                .filter(|&j| j != i)
                .map(|j| format!("S{j}"))
                .collect();
            assert_eq!(names, want, "round {round}");
        }
        // Each pair kept the same connection: one end dialed it, the
        // other accepted it.
        let solicited = |i: usize, j: usize| -> bool {
            let z = all[i].json("/routez");
            let r = z["routes"]
                .as_array()
                .unwrap()
                .iter()
                .find(|r| r["remote_name"] == format!("S{j}"))
                .cloned()
                .unwrap();
            r["did_solicit"].as_bool().unwrap()
        };
        for (i, j) in [(0, 1), (0, 2), (1, 2)] {
            assert_ne!(
                solicited(i, j),
                solicited(j, i),
                "round {round}: pair {i}-{j}"
            );
        }
        // No connection was dropped on both ends and dialed again: each
        // server saw at most one dial each way per peer, and its own dial
        // to itself (both ends of it).
        for s in &all {
            let created = s.log_text().matches("Route connection created").count();
            assert!(
                created <= 6,
                "round {round}: {created} connections\n{}",
                s.log_text()
            );
        }
    }
}

/// Bad input on the route port gets a clear error and a closed
/// connection, and the server carries on.
#[test]
fn the_route_port_refuses_clients_garbage_and_strangers() {
    let a = node("A", &[]);
    let addr = format!("127.0.0.1:{}", a.cluster_port.unwrap());
    // Anything before CONNECT.
    let mut r = common::Raw::connect(&addr);
    r.read_until("INFO ", Duration::from_secs(2));
    r.send(b"RS+ $G foo\r\n");
    let (closed, text) = r.closed(Duration::from_secs(2));
    assert!(
        closed && text.contains("-ERR 'Authorization Violation'"),
        "{text}"
    );
    // A client that dialed the wrong port.
    let mut r = common::Raw::connect(&addr);
    r.send(b"CONNECT {\"lang\":\"rust\",\"verbose\":false}\r\n");
    let (closed, text) = r.closed(Duration::from_secs(2));
    assert!(
        closed && text.contains("-ERR 'attempted to connect to route port'"),
        "{text}"
    );
    // Another cluster.
    let mut r = common::Raw::connect(&addr);
    r.send(b"CONNECT {\"name\":\"NX\",\"cluster\":\"other\"}\r\n");
    let (closed, text) = r.closed(Duration::from_secs(2));
    assert!(closed && text.contains("does not match"), "{text}");
    // Garbage after a proper CONNECT, and a routed message whose size lies.
    for bad in [&b"NOPE\r\n"[..], b"RMSG $G foo 3\r\nabcdef\r\n"] {
        let mut r = common::Raw::connect(&addr);
        r.send(b"CONNECT {\"name\":\"NX\",\"cluster\":\"c1\"}\r\n");
        r.send(
            b"INFO {\"server_id\":\"NX\",\"server_name\":\"X\",\"cluster\":\"c1\",\"port\":1}\r\n",
        );
        r.send(bad);
        let (closed, text) = r.closed(Duration::from_secs(2));
        assert!(closed, "{}: {text}", String::from_utf8_lossy(bad));
    }
    assert!(a.wait_log("Route protocol error", Duration::from_secs(2)));
    // Still serving.
    assert_eq!(a.json("/varz")["routes"], 0);
}

/// Without a configured cluster name each server makes one up; on
/// meeting, they settle on one (nats-server's rule) and still mesh.
#[test]
fn servers_without_a_cluster_name_settle_on_one() {
    let unnamed = |name: &str, routes: &[String]| {
        let mut b = common::server()
            .arg("-n")
            .arg(name)
            .arg("--cluster")
            .arg("nats://127.0.0.1:-1");
        if !routes.is_empty() {
            b = b.arg("--routes").arg(&routes.join(","));
        }
        b.start()
    };
    let a = unnamed("A", &[]);
    let b = unnamed("B", &[route_url(&a)]);
    let c = unnamed("C", &[route_url(&a)]);
    let all = [a, b, c];
    common::wait_for("a full mesh", Duration::from_secs(20), || {
        all.iter().all(|s| peers(s).len() == 2)
    });
    assert!(all[0].wait_log(
        "Cluster name was dynamically generated",
        Duration::from_secs(1)
    ));
}

/// Routes can require credentials: a server dialing with the right ones
/// (in its route URL) joins; one without them is refused.
#[test]
fn cluster_authorization_admits_only_the_right_credentials() {
    let a = common::server()
        .arg("-n")
        .arg("A")
        .config("cluster {\n  name: c1\n  listen: 127.0.0.1:-1\n  authorization { user: ruser, password: \"T0p$ecret\" }\n}\n")
        .start();
    let port = a.cluster_port.unwrap();
    let good = node(
        "B",
        &[format!("nats-route://ruser:T0p$ecret@127.0.0.1:{port}")],
    );
    let bad = node("C", &[format!("nats-route://ruser:wrong@127.0.0.1:{port}")]);
    common::wait_for("B to join", Duration::from_secs(10), || peers(&a) == ["B"]);
    assert!(a.wait_log("Router authentication error", Duration::from_secs(5)));
    assert!(bad.wait_log(
        "Route Error 'Authorization Violation'",
        Duration::from_secs(5)
    ));
    assert!(peers(&bad).is_empty());
    assert_eq!(peers(&good), ["A"]);
    let v = a.json("/varz");
    assert_eq!(v["cluster"]["name"], "c1");
    assert_eq!(v["cluster"]["cluster_port"], port);
    assert!(good.json("/varz")["cluster"]["urls"][0]
        .as_str()
        .unwrap()
        .ends_with(&format!(":{port}")));
}

/// `no_advertise`: clients are not told about the other servers.
#[tokio::test]
async fn no_advertise_keeps_other_servers_from_clients() {
    let a = common::server()
        .arg("-n")
        .arg("A")
        .arg("--cluster_name")
        .arg("c1")
        .arg("--cluster")
        .arg("nats://127.0.0.1:-1")
        .arg("--no_advertise")
        .start();
    let b = node("B", &[route_url(&a)]);
    common::wait_for("the route", Duration::from_secs(10), || peers(&a) == ["B"]);
    let c = a.client().await;
    assert!(c.server_info().connect_urls.is_empty());
    // And B is not told A's client URL.
    let cb = b.client().await;
    let urls = cb.server_info().connect_urls;
    assert!(!urls.contains(&format!("127.0.0.1:{}", a.port)), "{urls:?}");
}
