//! The JetStream meta group on real processes: founded or joined over
//! routes, a leader elected through the Raft transport on the route
//! port, failover, and restarts with the stored identity.

#[path = "../common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use serde_json::Value;

fn js_node(name: &str, cluster: &str, routes: &[String]) -> common::Server {
    js_node_with(name, cluster, routes, "")
}

fn js_node_with(name: &str, cluster: &str, routes: &[String], config: &str) -> common::Server {
    let mut b = common::server()
        .js()
        .config(config)
        .arg("-n")
        .arg(name)
        .arg("--cluster_name")
        .arg("c1")
        .arg("--cluster")
        .arg(cluster);
    if !routes.is_empty() {
        b = b.arg("--routes").arg(&routes.join(","));
    }
    b.start()
}

fn route_url(s: &common::Server) -> String {
    format!("nats-route://127.0.0.1:{}", s.cluster_port.unwrap())
}

fn meta(s: &common::Server) -> Value {
    s.json("/jsz")["meta_cluster"].clone()
}

/// Every live server reports `size` voters and the same, known leader.
fn agreed(all: &[&common::Server], size: u64) -> Option<String> {
    let mut leader = None;
    for s in all {
        let m = meta(s);
        if m["cluster_size"].as_u64() != Some(size) {
            return None;
        }
        // Every voter named in the meta state.
        let unnamed = m["replicas"].as_array().is_some_and(|r| {
            r.iter().any(|p| {
                p["name"]
                    .as_str()
                    .unwrap_or("")
                    .starts_with("Server name unknown")
            })
        });
        if unnamed {
            return None;
        }
        let l = m["leader"].as_str()?.to_string();
        match &leader {
            None => leader = Some(l),
            Some(x) if *x != l => return None,
            Some(_) => {}
        }
    }
    leader
}

#[test]
fn servers_that_name_only_a_seed_found_and_join_one_meta_group() {
    let a = js_node("A", "nats://127.0.0.1:-1", &[]);
    let b = js_node("B", "nats://127.0.0.1:-1", &[route_url(&a)]);
    let c = js_node("C", "nats://127.0.0.1:-1", &[route_url(&a)]);
    let all = [&a, &b, &c];
    common::wait_for("one meta group of three", Duration::from_secs(20), || {
        agreed(&all, 3).is_some()
    });
    // A founds (alone, or with whoever reached it first); the rest join.
    assert!(a.wait_log("meta group founded", Duration::from_secs(1)));
    assert!(
        [&b, &c]
            .iter()
            .any(|s| s.log_text().contains("joining the meta group")),
        "someone joined later"
    );
    let m = meta(&b);
    assert_eq!(m["name"], "c1");
    assert_eq!(m["quorum_needed"], 2);
    let leader = m["leader"].as_str().unwrap().to_string();
    assert_eq!(m["peer"].as_str().unwrap().len(), 8);
    // Replicas: the others, by name, heard from recently.
    let names: Vec<&str> = m["replicas"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(names.len(), 2, "{m}");
    assert!(!names.contains(&"B") || leader == "B", "{m}");

    // /raftz: the meta group under the system account.
    let z = b.json("/raftz");
    let g = &z["$SYS"]["_meta_"];
    assert!(
        ["LEADER", "FOLLOWER"].contains(&g["state"].as_str().unwrap()),
        "{z}"
    );
    assert_eq!(g["size"], 3);
    assert_eq!(g["peers"].as_object().unwrap().len(), 2, "{z}");
    assert!(g["term"].as_u64().unwrap() >= 1);
    // No Raft groups without a cluster.
    let plain = common::server().start();
    let (code, _, body) = plain.http("/raftz");
    assert_eq!(code, 404);
    assert_eq!(body, "No Raft nodes registered");
}

/// Each server names all three: they found the group together, lose the
/// leader to SIGKILL and elect another, and the killed server comes back
/// with its stored identity: still three voters, never four.
#[test]
fn a_full_mesh_founds_together_fails_over_and_keeps_its_size() {
    let ports = common::free_ports(3);
    let routes: Vec<String> = ports
        .iter()
        .map(|p| format!("nats-route://127.0.0.1:{p}"))
        .collect();
    let mut all: Vec<common::Server> = (0..3)
        .map(|i| {
            js_node(
                &format!("S{i}"),
                &format!("nats://127.0.0.1:{}", ports[i]),
                &routes,
            )
        })
        .collect();
    common::wait_for("a meta leader", Duration::from_secs(20), || {
        agreed(&all.iter().collect::<Vec<_>>(), 3).is_some()
    });
    for server in &all {
        assert!(
            server.wait_log("meta group founded with voters", Duration::from_secs(1)),
            "every server founds: {}",
            all.iter()
                .map(common::Server::log_text)
                .collect::<Vec<_>>()
                .join("\n----\n")
        );
    }
    let leader = agreed(&all.iter().collect::<Vec<_>>(), 3).unwrap();
    let li = all
        .iter()
        .position(|s| s.log_text().contains(&format!("Name:     {leader}")))
        .unwrap();
    all[li].kill9();
    let started = Instant::now();
    let others: Vec<&common::Server> = all
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != li)
        .map(|(_, s)| s)
        .collect();
    common::wait_for("a new leader", Duration::from_secs(10), || {
        agreed(&others, 3).is_some_and(|l| l != leader)
    });
    eprintln!("new meta leader after {:?}", started.elapsed());
    // The dead server is still a voter, shown offline.
    common::wait_for(
        "the old leader shown offline",
        Duration::from_secs(15),
        || {
            meta(others[0])["replicas"]
                .as_array()
                .unwrap()
                .iter()
                .any(|r| r["name"] == leader.as_str() && r["offline"] == true)
        },
    );
    all[li].restart();
    common::wait_for("three again, never four", Duration::from_secs(20), || {
        let all: Vec<&common::Server> = all.iter().collect();
        agreed(&all, 3).is_some()
            && all.iter().all(|s| {
                meta(s)["replicas"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .all(|r| r["offline"] != true)
            })
    });
    assert!(all[li].wait_log("meta group restarted", Duration::from_secs(1)));
}

/// A server whose store was wiped comes back as a new, empty peer: it
/// joins, and the identity it had stays listed (offline) until an
/// operator removes it; it never takes the old one's place.
#[test]
fn a_wiped_server_rejoins_as_a_new_peer() {
    let a = js_node("A", "nats://127.0.0.1:-1", &[]);
    let b = js_node("B", "nats://127.0.0.1:-1", &[route_url(&a)]);
    let mut c = js_node("C", "nats://127.0.0.1:-1", &[route_url(&a)]);
    common::wait_for("three voters", Duration::from_secs(20), || {
        agreed(&[&a, &b, &c], 3).is_some()
    });
    c.kill9();
    std::fs::remove_dir_all(c.store_dir()).unwrap();
    c.restart();
    assert!(c.wait_log("peer id", Duration::from_secs(5)));
    common::wait_for("four voters", Duration::from_secs(20), || {
        agreed(&[&a, &b, &c], 4).is_some()
    });
    // C's name stays with its old id until an operator removes it, so the
    // new C is not placeable: an R3 stream has two servers up and is
    // refused, at once, rather than placed where it cannot be assigned.
    let rt = tokio::runtime::Runtime::new().unwrap();
    let r = rt.block_on(async {
        let nc = a.client().await;
        meta_api(
            &nc,
            "$JS.API.STREAM.CREATE.WIPED",
            r#"{"name":"WIPED","subjects":["wiped"],"num_replicas":3}"#,
        )
        .await
    });
    assert_eq!(r["error"]["err_code"], 10005, "{r}");
    assert!(
        r["error"]["description"]
            .as_str()
            .is_some_and(|d| d.contains("peer offline")),
        "{r}"
    );
}

/// Calls a meta API through `nc`, retrying while no server answers (the
/// API lives on the meta leader, which may be changing).
/// Asks the meta leader, again while nobody answers (no leader yet, or a
/// server that has just stopped leading and stays silent). A request that
/// was taken is waited for, not sent again: a removal is answered once it
/// commits, and asked a second time it finds the server gone (10044).
async fn meta_api(nc: &async_nats::Client, subject: &str, body: &str) -> Value {
    for _ in 0..30 {
        let r = tokio::time::timeout(
            Duration::from_secs(10),
            nc.request(subject.to_string(), body.to_string().into()),
        )
        .await;
        if let Ok(Ok(m)) = r {
            return serde_json::from_slice(&m.payload).unwrap();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no answer on {subject}");
}

fn leader_name(s: &common::Server) -> String {
    meta(s)["leader"].as_str().unwrap_or("").to_string()
}

#[tokio::test]
async fn operators_step_the_meta_leader_down_and_remove_a_dead_server() {
    let sys = common::WITH_SYSTEM_USER;
    let a = js_node_with("A", "nats://127.0.0.1:-1", &[], sys);
    let b = js_node_with("B", "nats://127.0.0.1:-1", &[route_url(&a)], sys);
    let mut c = js_node_with("C", "nats://127.0.0.1:-1", &[route_url(&a)], sys);
    common::wait_for("three voters", Duration::from_secs(20), || {
        agreed(&[&a, &b, &c], 3).is_some()
    });
    for s in [&a, &b, &c] {
        let (code, _, body) = s.http("/healthz");
        assert_eq!((code, body.as_str()), (200, r#"{"status":"ok"}"#));
    }
    // Only the system account may: another account is not answered.
    let user = b.client().await;
    for subject in ["$JS.API.META.LEADER.STEPDOWN", "$JS.API.SERVER.REMOVE"] {
        let asked = tokio::time::timeout(
            Duration::from_secs(2),
            user.request(subject, r#"{"peer":"C"}"#.into()),
        )
        .await;
        assert!(
            !matches!(asked, Ok(Ok(_))),
            "{subject} answered an ordinary account: {asked:?}"
        );
    }
    let nc = common::connect_as(&b.url(), "sys", "p").await;
    let first = leader_name(&a);
    let r = meta_api(&nc, "$JS.API.META.LEADER.STEPDOWN", "").await;
    assert_eq!(
        r,
        serde_json::json!({"type": "io.nats.jetstream.api.v1.meta_leader_stepdown_response", "success": true})
    );
    common::wait_for("another leader", Duration::from_secs(10), || {
        agreed(&[&a, &b, &c], 3).is_some_and(|l| l != first)
    });
    // To a preferred server; an unknown one is an error.
    let now = agreed(&[&a, &b, &c], 3).unwrap();
    let want = if now == "A" { "B" } else { "A" };
    let r = meta_api(
        &nc,
        "$JS.API.META.LEADER.STEPDOWN",
        &format!(r#"{{"placement":{{"preferred":"{want}"}}}}"#),
    )
    .await;
    let leaders = |s: &common::Server| {
        s.log_text()
            .lines()
            .filter(|l| l.contains("leader"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert_eq!(
        r["success"],
        true,
        "{r}\nA:\n{}\nB:\n{}\nC:\n{}",
        leaders(&a),
        leaders(&b),
        leaders(&c)
    );
    common::wait_for("the preferred leader", Duration::from_secs(10), || {
        agreed(&[&a, &b, &c], 3).as_deref() == Some(want)
    });
    let r = meta_api(
        &nc,
        "$JS.API.META.LEADER.STEPDOWN",
        r#"{"placement":{"preferred":"nobody"}}"#,
    )
    .await;
    assert_eq!(
        r["error"],
        serde_json::json!({"code": 400, "err_code": 10005, "description": "preferred server \"nobody\" not known"})
    );

    // C dies; an operator removes it. The cluster shrinks to two, and a
    // majority of two is both.
    c.kill9();
    let r = meta_api(&nc, "$JS.API.SERVER.REMOVE", "").await;
    assert_eq!(r["error"]["err_code"], 10003, "{r}");
    let r = meta_api(&nc, "$JS.API.SERVER.REMOVE", r#"{"peer":"Z"}"#).await;
    assert_eq!(
        r,
        serde_json::json!({"type": "io.nats.jetstream.api.v1.meta_server_remove_response", "error": {"code": 400, "err_code": 10044, "description": "server is not a member of the cluster"}})
    );
    let r = meta_api(&nc, "$JS.API.SERVER.REMOVE", r#"{"peer":"C"}"#).await;
    assert_eq!(r["success"], true, "{r}");
    for s in [&a, &b] {
        let m = meta(s);
        assert_eq!(m["cluster_size"], 2, "{m}");
        assert_eq!(m["quorum_needed"], 2, "{m}");
    }
    // Without a majority there is no leader, and health says so.
    let (mut follower, leader) = if leader_name(&a) == "A" {
        (b, a)
    } else {
        (a, b)
    };
    follower.kill9();
    common::wait_for(
        "the leader to lose its quorum",
        Duration::from_secs(10),
        || {
            let (code, _, body) = leader.http("/healthz");
            code == 503
                && body
                    == r#"{"status":"unavailable","error":"JetStream has not established contact with a meta leader"}"#
        },
    );
}

fn term(s: &common::Server) -> u64 {
    s.json("/raftz")["$SYS"]["_meta_"]["term"]
        .as_u64()
        .unwrap_or(0)
}

/// A follower frozen for 10 s (SIGSTOP, as under CPU starvation) and then
/// resumed does not depose the leader: pre-vote keeps its stale timers
/// from raising the term.
#[test]
fn a_frozen_follower_does_not_depose_the_leader() {
    let a = js_node("A", "nats://127.0.0.1:-1", &[]);
    let b = js_node("B", "nats://127.0.0.1:-1", &[route_url(&a)]);
    let c = js_node("C", "nats://127.0.0.1:-1", &[route_url(&a)]);
    let all = [&a, &b, &c];
    common::wait_for("three voters", Duration::from_secs(20), || {
        agreed(&all, 3).is_some()
    });
    let leader = agreed(&all, 3).unwrap();
    let before = term(all.iter().find(|s| leader_name(s) == leader).unwrap());
    let frozen = all
        .iter()
        .find(|s| !s.log_text().contains(&format!("Name:     {leader}")))
        .unwrap();
    frozen.signal(libc::SIGSTOP);
    std::thread::sleep(Duration::from_secs(10));
    frozen.signal(libc::SIGCONT);
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(agreed(&all, 3).as_deref(), Some(leader.as_str()));
    for s in all {
        assert_eq!(term(s), before, "the term moved");
    }
}

/// A corrupt Raft frame arriving on the route port is refused, counted in
/// `/varz`, and ends its connection; the meta group is untouched.
#[test]
fn a_corrupt_raft_frame_is_counted_in_monitoring() {
    use std::io::{Read, Write};
    let a = js_node("A", "nats://127.0.0.1:-1", &[]);
    let b = js_node("B", "nats://127.0.0.1:-1", &[route_url(&a)]);
    let c = js_node("C", "nats://127.0.0.1:-1", &[route_url(&a)]);
    common::wait_for("three voters", Duration::from_secs(20), || {
        agreed(&[&a, &b, &c], 3).is_some()
    });
    // Joiners were caught up from the leader's snapshot.
    assert!(
        [&a, &b, &c].iter().any(|s| s
            .log_text()
            .contains("caught up from the leader's snapshot")),
        "no catch-up logged"
    );
    let before = a.json("/varz")["raft"].clone();
    assert_eq!(before["rejected_frames"]["checksum"], 0, "{before}");
    let mut s = std::net::TcpStream::connect(("127.0.0.1", a.cluster_port.unwrap())).unwrap();
    s.write_all(b"RAFT {\"peer\":123,\"class\":\"control\"}\r\n")
        .unwrap();
    // length, a checksum that does not match, class, sender, group, payload
    let mut frame = Vec::new();
    frame.extend_from_slice(&(4u32 + 1 + 8 + 8 + 5).to_le_bytes());
    frame.extend_from_slice(&0xdead_beefu32.to_le_bytes());
    frame.push(0);
    frame.extend_from_slice(&123u64.to_le_bytes());
    frame.extend_from_slice(&1u64.to_le_bytes());
    frame.extend_from_slice(b"hello");
    s.write_all(&frame).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    common::wait_for("the rejection counted", Duration::from_secs(5), || {
        a.json("/varz")["raft"]["rejected_frames"]["checksum"] == 1
    });
    assert!(a.wait_log(
        "Rejected raft frame from peer 7b: frame checksum mismatch",
        Duration::from_secs(1)
    ));
    assert!(agreed(&[&a, &b, &c], 3).is_some());
}

/// A damaged peer identity (no good copy beside it) stops the server with
/// a clear error; it never starts as a new peer on its own.
#[test]
fn a_damaged_identity_is_an_error_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let raft = dir.path().join("store").join("raft");
    std::fs::create_dir_all(&raft).unwrap();
    std::fs::write(raft.join("peer.id"), b"FLID\x01garbage-not-an-identity").unwrap();
    let out = std::process::Command::new(common::BIN)
        .args(["-p", "-1", "-js", "-n", "X", "--cluster_name", "c1"])
        .args(["--cluster", "nats://127.0.0.1:-1", "-sd"])
        .arg(dir.path().join("store"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("peer identity is damaged") && err.contains("refusing to start as a new peer"),
        "{err}"
    );
    // The file is left as it was, for an operator to look at.
    assert_eq!(
        std::fs::read(raft.join("peer.id")).unwrap(),
        b"FLID\x01garbage-not-an-identity"
    );
}
