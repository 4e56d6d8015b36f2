//! The system account (issue 37): which account it is, in config mode
//! as nats-server picks it, and what a bad choice is told.

#[path = "../common/mod.rs"]
mod common;

/// The accounts `/accountz` lists, sorted.
fn accounts(s: &common::Server) -> Vec<String> {
    let all = s.json("/accountz");
    let mut names: Vec<String> = all["accounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect();
    names.sort();
    names
}

/// Without a config naming one, the server makes `$SYS`; with
/// `no_system_account` it makes none; a named account is the system
/// account, and then no `$SYS` is made.
#[test]
fn the_system_account_is_made_or_named() {
    let cases: &[(&str, &[&str])] = &[
        ("", &["$G", "$SYS"]),
        ("no_system_account: true\n", &["$G"]),
        ("no_sys_acc: true\n", &["$G"]),
        (
            "accounts { SYS { users: [{ user: s, password: p }] } }\nsystem_account: SYS\n",
            &["$G", "SYS"],
        ),
        (
            "accounts { SYS { users: [{ user: s, password: p }] } }\nsystem: SYS\nno_system_account: true\n",
            &["$G", "SYS"],
        ),
    ];
    for (config, want) in cases {
        let s = common::server().config(config).start();
        assert_eq!(accounts(&s), *want, "{config}");
    }
}

/// A system account that no account block defines stops the server at
/// start, with nats-server's words (flotilla's `-t` refuses it too, and
/// names the file, line and column).
#[test]
fn a_missing_system_account_is_refused() {
    let text = "system_account: NOPE\n";
    let dir = tempfile::tempdir().unwrap();
    let path = common::config_path(dir.path(), "test.conf", text);
    let bin = std::env::var_os("FLOTILLA_TEST_SERVER").unwrap_or_else(|| common::BIN.into());
    let mut child = std::process::Command::new(bin)
        .arg("-c")
        .arg(&path)
        .args(["-a", "127.0.0.1", "-p", "-1"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            child.kill().unwrap();
            panic!("the server started with a missing system account");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    assert_ne!(out.status.code(), Some(0));
    let said =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("error resolving system account: account missing"),
        "{said}"
    );
    if !common::reference_server() {
        let said = common::refused_by_server(text);
        assert!(said.contains("test.conf:1:1"), "{said}");
    }
}

const SYS: &str = r#"
accounts {
  SYS { users: [{ user: sys, password: p }] }
  A { users: [
    { user: a, password: p }
    { user: limited, password: p, permissions: {
        publish: { allow: ["a.>", "$SYS.REQ.USER.INFO"], deny: ["a.secret"] }
        subscribe: { allow: ["_INBOX.>", "b.* q"] }
        allow_responses: true } }
  ] }
}
system_account: SYS
server_tags: ["az:1", "Rack"]
"#;

/// Every answer to one request published on `subject` with `body`, for
/// `wait` after the last one (as `nats server list` gathers them).
async fn gather(
    c: &async_nats::Client,
    subject: &str,
    body: &str,
    wait: std::time::Duration,
) -> Vec<serde_json::Value> {
    use futures::StreamExt;
    let inbox = c.new_inbox();
    let mut replies = c.subscribe(inbox.clone()).await.unwrap();
    c.publish_with_reply(subject.to_string(), inbox, body.to_string().into())
        .await
        .unwrap();
    let mut out = Vec::new();
    while let Ok(Some(m)) = tokio::time::timeout(wait, replies.next()).await {
        // A status without a body (no responders) is no answer.
        if m.payload.is_empty() {
            assert!(m.status.is_some(), "an empty answer: {m:?}");
            continue;
        }
        out.push(serde_json::from_slice(&m.payload).unwrap());
    }
    out
}

const WAIT: std::time::Duration = std::time::Duration::from_millis(700);

/// The `server` object nats-server stamps on a system message.
fn check_server(s: &serde_json::Value, id: &str) {
    assert_eq!(s["id"], id, "{s}");
    assert!(s["name"].is_string() && s["host"].is_string(), "{s}");
    assert!(
        s["ver"].as_str().is_some_and(|v| v.starts_with("2.")),
        "{s}"
    );
    assert_eq!(s["jetstream"], false, "{s}");
    assert_eq!(s["flags"], 0, "{s}");
    assert_eq!(s["tags"], serde_json::json!(["az:1", "rack"]), "{s}");
    assert!(s["seq"].as_u64().is_some_and(|n| n >= 2), "{s}");
    assert!(s["time"].as_str().is_some_and(|t| t.ends_with('Z')), "{s}");
}

/// `$SYS.REQ.SERVER.PING` is answered with the statsz, bare, as `nats
/// server list` reads it; `PING.<NAME>` with the monitoring endpoint's
/// JSON as `data`; IDZ with who the server is; a body that does not
/// decode with a 400; a filter for another server with silence.
#[tokio::test]
async fn server_requests_are_answered_as_nats_server_answers_them() {
    let s = common::server().config(SYS).start();
    let id = s.json("/varz")["server_id"].as_str().unwrap().to_string();
    let sys = common::connect_as(&s.url(), "sys", "p").await;
    let _a = common::connect_as(&s.url(), "a", "p").await;

    let got = gather(&sys, "$SYS.REQ.SERVER.PING", "{}", WAIT).await;
    assert_eq!(got.len(), 1, "{got:?}");
    let (server, stats) = (&got[0]["server"], &got[0]["statsz"]);
    check_server(server, &id);
    for k in [
        "mem",
        "cores",
        "connections",
        "total_connections",
        "subscriptions",
    ] {
        assert!(stats[k].as_u64().is_some(), "{k}: {stats}");
    }
    assert!(stats["connections"].as_u64() >= Some(2), "{stats}");
    assert!(stats["start"].is_string(), "{stats}");
    assert!(stats["cpu"].is_number(), "{stats}");
    assert_eq!(stats["active_servers"], 1, "{stats}");
    assert!(stats["active_accounts"].as_u64() >= Some(2), "{stats}");
    for k in [
        "sent",
        "received",
        "sent_to_clients",
        "received_from_clients",
    ] {
        assert!(
            stats[k]["msgs"].is_u64() && stats[k]["bytes"].is_u64(),
            "{k}: {stats}"
        );
    }
    assert!(stats.get("jetstream").is_none(), "no JetStream: {stats}");

    // Each monitoring service, from every server and from this one.
    for (name, key) in [
        ("VARZ", "server_id"),
        ("CONNZ", "num_connections"),
        ("SUBSZ", "num_subscriptions"),
        ("ROUTEZ", "num_routes"),
        ("LEAFZ", "leafnodes"),
        ("GATEWAYZ", "outbound_gateways"),
        ("ACCOUNTZ", "accounts"),
        ("HEALTHZ", "status"),
    ] {
        for subject in [
            format!("$SYS.REQ.SERVER.PING.{name}"),
            format!("$SYS.REQ.SERVER.{id}.{name}"),
        ] {
            let got = gather(&sys, &subject, "", WAIT).await;
            assert_eq!(got.len(), 1, "{subject}: {got:?}");
            check_server(&got[0]["server"], &id);
            assert!(got[0]["data"].get(key).is_some(), "{subject}: {}", got[0]);
            assert!(got[0].get("error").is_none(), "{subject}: {}", got[0]);
        }
    }
    let health = gather(&sys, "$SYS.REQ.SERVER.PING.HEALTHZ", "", WAIT).await;
    assert_eq!(
        health[0]["data"],
        serde_json::json!({"status": "ok", "status_code": 200}),
        "{}",
        health[0]
    );
    // Options in the body: CONNZ for one account's connections.
    let connz = gather(&sys, "$SYS.REQ.SERVER.PING.CONNZ", r#"{"acc":"A"}"#, WAIT).await;
    assert_eq!(connz[0]["data"]["num_connections"], 1, "{}", connz[0]);

    let idz = gather(&sys, "$SYS.REQ.SERVER.PING.IDZ", "", WAIT).await;
    assert_eq!(idz.len(), 1);
    assert_eq!(idz[0]["id"], id.as_str(), "{}", idz[0]);
    assert!(idz[0].get("server").is_none(), "bare: {}", idz[0]);

    let bad = gather(&sys, "$SYS.REQ.SERVER.PING.VARZ", "{not json", WAIT).await;
    assert_eq!(bad.len(), 1, "{bad:?}");
    assert_eq!(bad[0]["error"]["code"], 400, "{}", bad[0]);
    assert!(bad[0].get("data").is_none(), "{}", bad[0]);

    let other = r#"{"server_name":"nobody-has-this-name"}"#;
    assert!(gather(&sys, "$SYS.REQ.SERVER.PING", other, WAIT)
        .await
        .is_empty());
    assert!(gather(&sys, "$SYS.REQ.SERVER.PING.VARZ", other, WAIT)
        .await
        .is_empty());
    let tagged = r#"{"tags":["RACK"]}"#;
    assert_eq!(
        gather(&sys, "$SYS.REQ.SERVER.PING", tagged, WAIT)
            .await
            .len(),
        1
    );

    // Every stamped message counts up one sequence.
    let one = gather(&sys, "$SYS.REQ.SERVER.PING", "", WAIT).await;
    let two = gather(&sys, "$SYS.REQ.SERVER.PING", "", WAIT).await;
    let seq = |v: &serde_json::Value| v["server"]["seq"].as_u64().unwrap();
    assert!(seq(&two[0]) > seq(&one[0]), "{} {}", one[0], two[0]);
}

/// Only the system account's users reach its requests: another
/// account's PING has no responders.
#[tokio::test]
async fn other_accounts_do_not_reach_the_system_account() {
    let s = common::server().config(SYS).start();
    let a = common::connect_as(&s.url(), "a", "p").await;
    let asked = a
        .request("$SYS.REQ.SERVER.PING", "".into())
        .await
        .map(|m| m.payload);
    assert!(asked.is_err(), "{asked:?}");
}

/// In a cluster every server answers a PING, and each statsz counts
/// the servers it has heard from (`active_servers`), which `nats server
/// ping` waits for.
#[tokio::test]
async fn every_server_of_a_cluster_answers() {
    let servers = common::routed_servers(&[SYS.to_string(), SYS.to_string(), SYS.to_string()]);
    let routed = |s: &common::Server| s.json("/routez")["num_routes"].as_u64() >= Some(2);
    common::wait_for("the routes", std::time::Duration::from_secs(10), || {
        servers.iter().all(routed)
    });
    let sys = common::connect_as(&servers[0].url(), "sys", "p").await;
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let got = gather(&sys, "$SYS.REQ.SERVER.PING", "", WAIT).await;
        let mut ids: Vec<&str> = got
            .iter()
            .filter_map(|g| g["server"]["id"].as_str())
            .collect();
        ids.sort();
        ids.dedup();
        let all_heard = got.iter().all(|g| g["statsz"]["active_servers"] == 3);
        if ids.len() == 3 && all_heard {
            // Each names its routes to the two others (nats-server pools
            // several routes to each).
            for g in &got {
                assert_eq!(g["server"]["cluster"], "c1", "{g}");
                let mut names: Vec<&str> = g["statsz"]["routes"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter_map(|r| r["name"].as_str())
                    .collect();
                names.sort();
                names.dedup();
                assert_eq!(names.len(), 2, "{g}");
            }
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{got:?}");
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
    let varz = gather(&sys, "$SYS.REQ.SERVER.PING.VARZ", "", WAIT).await;
    assert_eq!(varz.len(), 3, "{varz:?}");
}

/// The messages on `subject` (a wildcard) until `quiet` passes without one.
async fn drain(
    sub: &mut async_nats::Subscriber,
    quiet: std::time::Duration,
) -> Vec<(String, serde_json::Value)> {
    use futures::StreamExt;
    let mut out = Vec::new();
    while let Ok(Some(m)) = tokio::time::timeout(quiet, sub.next()).await {
        let v = serde_json::from_slice(&m.payload).unwrap_or(serde_json::Value::Null);
        out.push((m.subject.to_string(), v));
    }
    out
}

/// A client coming and going is told in the system account as
/// nats-server tells it: CONNECT, the account's connection count on both
/// of its subjects, DISCONNECT with what it sent and received and why;
/// a failed login is an AUTH.ERR and a DISCONNECT in `$G`.
#[tokio::test]
async fn clients_coming_and_going_are_told() {
    let s = common::server().config(SYS).start();
    let id = s.json("/varz")["server_id"].as_str().unwrap().to_string();
    let sys = common::connect_as(&s.url(), "sys", "p").await;
    let mut events = sys.subscribe("$SYS.>").await.unwrap();
    sys.flush().await.unwrap();

    let a = async_nats::ConnectOptions::with_user_and_password("a".into(), "p".into())
        .name("events-test")
        .connect(s.url())
        .await
        .unwrap();
    a.publish("x", "hello".into()).await.unwrap();
    a.flush().await.unwrap();
    drop(a);
    let bad = async_nats::ConnectOptions::with_user_and_password("a".into(), "wrong".into())
        .connect(s.url())
        .await;
    assert!(bad.is_err());
    let seen = drain(&mut events, std::time::Duration::from_millis(1500)).await;
    let find = |subject: &str| -> Vec<&serde_json::Value> {
        seen.iter()
            .filter(|(s, _)| s == subject)
            .map(|(_, v)| v)
            .collect()
    };
    let subjects: Vec<&str> = seen.iter().map(|(s, _)| s.as_str()).collect();

    let connect = find("$SYS.ACCOUNT.A.CONNECT");
    assert_eq!(connect.len(), 1, "{subjects:?}");
    let c = connect[0];
    assert_eq!(
        c["type"], "io.nats.server.advisory.v1.client_connect",
        "{c}"
    );
    assert_eq!(c["id"].as_str().map(str::len), Some(22), "{c}");
    assert_eq!(c["server"]["id"], id.as_str(), "{c}");
    let client = &c["client"];
    assert_eq!(client["acc"], "A", "{c}");
    assert_eq!(client["user"], "a", "{c}");
    assert_eq!(client["name"], "events-test", "{c}");
    assert_eq!(client["kind"], "Client", "{c}");
    assert_eq!(client["client_type"], "nats", "{c}");
    assert!(
        client["id"].as_u64().is_some() && client["host"].is_string(),
        "{c}"
    );

    let disconnect = find("$SYS.ACCOUNT.A.DISCONNECT");
    assert_eq!(disconnect.len(), 1, "{subjects:?}");
    let d = disconnect[0];
    assert_eq!(
        d["type"], "io.nats.server.advisory.v1.client_disconnect",
        "{d}"
    );
    assert_eq!(d["reason"], "Client Closed", "{d}");
    assert_eq!(d["sent"]["msgs"], 1, "what the client sent: {d}");
    assert!(d["client"]["stop"].is_string(), "{d}");
    assert!(d["received"]["msgs"].is_u64(), "{d}");

    for subject in ["$SYS.SERVER.ACCOUNT.A.CONNS", "$SYS.ACCOUNT.A.SERVER.CONNS"] {
        let conns = find(subject);
        let counts: Vec<&serde_json::Value> = conns.iter().map(|c| &c["conns"]).collect();
        assert_eq!(counts, [1, 0], "{subject}: {conns:?}");
        assert_eq!(
            conns[0]["type"],
            "io.nats.server.advisory.v1.account_connections"
        );
        assert_eq!(conns[0]["acc"], "A");
    }
    assert!(
        find("$SYS.ACCOUNT.$G.SERVER.CONNS").is_empty(),
        "{subjects:?}"
    );

    let auth = find(&format!("$SYS.SERVER.{id}.CLIENT.AUTH.ERR"));
    assert_eq!(auth.len(), 1, "{subjects:?}");
    assert_eq!(auth[0]["reason"], "Authentication Failure", "{}", auth[0]);
    assert_eq!(auth[0]["client"]["acc"], "$G", "{}", auth[0]);
    let gone = find("$SYS.ACCOUNT.$G.DISCONNECT");
    assert_eq!(gone.len(), 1, "{subjects:?}");
    assert_eq!(gone[0]["reason"], "Authentication Failure", "{}", gone[0]);
}

/// A server that shuts down says so on `$SYS.SERVER.<id>.SHUTDOWN` with
/// its bare `server` object, and the others stop counting it.
#[tokio::test]
async fn a_server_leaving_says_so() {
    use futures::StreamExt;
    let servers = common::routed_servers(&[SYS.to_string(), SYS.to_string(), SYS.to_string()]);
    let routed = |s: &common::Server| s.json("/routez")["num_routes"].as_u64() >= Some(2);
    common::wait_for("the routes", std::time::Duration::from_secs(10), || {
        servers.iter().all(routed)
    });
    let leaving = servers[2].json("/varz")["server_id"]
        .as_str()
        .unwrap()
        .to_string();
    let sys = common::connect_as(&servers[0].url(), "sys", "p").await;
    let mut gone = sys.subscribe("$SYS.SERVER.*.SHUTDOWN").await.unwrap();
    sys.flush().await.unwrap();
    // Every server has heard the others.
    let active = |n: u64| {
        let sys = sys.clone();
        async move {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
            loop {
                let got = gather(&sys, "$SYS.REQ.SERVER.PING", "", WAIT).await;
                if got.iter().all(|g| g["statsz"]["active_servers"] == n) && !got.is_empty() {
                    return;
                }
                assert!(std::time::Instant::now() < deadline, "{got:?}");
                tokio::time::sleep(std::time::Duration::from_millis(300)).await;
            }
        }
    };
    active(3).await;
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    servers[2].signal(libc::SIGTERM);
    let m = tokio::time::timeout(std::time::Duration::from_secs(10), gone.next())
        .await
        .expect("a shutdown event")
        .unwrap();
    assert_eq!(
        m.subject.as_str(),
        format!("$SYS.SERVER.{leaving}.SHUTDOWN")
    );
    let info: serde_json::Value = serde_json::from_slice(&m.payload).unwrap();
    assert_eq!(info["id"], leaving.as_str(), "{info}");
    assert!(
        info["seq"].as_u64().is_some() && info["time"].is_string(),
        "{info}"
    );
    active(2).await;
}

/// A config whose only account is the system account still lets clients
/// without credentials in, to `$G` (nats-server's hidden `nats-` user);
/// one with an `authorization` block does not.
#[tokio::test]
async fn only_a_system_account_leaves_the_global_account_open() {
    let config = "accounts { SYS { users: [{ user: sys, password: p }] } }\nsystem_account: SYS\n";
    let s = common::server().config(config).start();
    let anon = s.client().await;
    let mut sub = anon.subscribe("hello").await.unwrap();
    anon.publish("hello", "x".into()).await.unwrap();
    anon.flush().await.unwrap();
    use futures::StreamExt;
    let got = tokio::time::timeout(std::time::Duration::from_secs(5), sub.next()).await;
    assert!(matches!(got, Ok(Some(_))), "{got:?}");
    let connz = s.json("/connz?acc=$G&auth=1");
    assert_eq!(connz["num_connections"], 1, "{connz}");
    let user = connz["connections"][0]["authorized_user"]
        .as_str()
        .unwrap_or_default();
    assert!(user.starts_with("nats-"), "{connz}");
    // A reload keeps the hidden user: no change of authorization.
    if !common::reference_server() {
        s.signal(libc::SIGHUP);
        let reloaded = s.wait_log(
            "Reloaded server configuration",
            std::time::Duration::from_secs(5),
        );
        assert!(reloaded, "{}", s.log_text());
        assert!(
            !s.log_text().contains("Reloaded: authorization"),
            "{}",
            s.log_text()
        );
    }

    let closed = format!("{config}authorization {{ users: [{{ user: u, password: p }}] }}\n");
    let s = common::server().config(&closed).start();
    let refused = async_nats::connect(s.url()).await;
    assert!(refused.is_err(), "no credentials, no hidden user");
}

/// Account requests: the system account asks about one account; an
/// account's own client asks through the imports every account has from
/// the system account, and sees only its own account.
#[tokio::test]
async fn accounts_are_asked_about() {
    let s = common::server().config(SYS).start();
    let id = s.json("/varz")["server_id"].as_str().unwrap().to_string();
    let sys = common::connect_as(&s.url(), "sys", "p").await;
    let a = common::connect_as(&s.url(), "a", "p").await;
    let _sub = a.subscribe("a.thing").await.unwrap();
    let _queue = a.queue_subscribe("a.*", "q".into()).await.unwrap();
    a.flush().await.unwrap();

    // How many subscriptions match (a bare number), as other servers ask;
    // `queue` is Go's []byte, base64 ("cQ==" is "q").
    let nsubs = [
        (r#"{"acc":"A","subject":"a.thing"}"#, 2),
        (r#"{"acc":"A","subject":"a.thing","queue":"cQ=="}"#, 1),
        (r#"{"acc":"A","subject":"a.>"}"#, 2),
        (r#"{"acc":"A","subject":"b.thing"}"#, 0),
    ];
    for (body, want) in nsubs {
        // nats-server counted none once, just after the subscriptions.
        let mut got = Vec::new();
        for _ in 0..5 {
            got = gather(&sys, "$SYS.REQ.ACCOUNT.NSUBS", body, WAIT).await;
            if got == [serde_json::json!(want)] {
                break;
            }
        }
        assert_eq!(got, [serde_json::json!(want)], "{body}");
    }
    for body in [r#"{"acc":"SYS2","subject":"a"}"#, "{bad", ""] {
        let got = gather(&sys, "$SYS.REQ.ACCOUNT.NSUBS", body, WAIT).await;
        assert!(got.is_empty(), "{body}: {got:?}");
    }

    let connz = gather(&sys, "$SYS.REQ.ACCOUNT.A.CONNZ", "", WAIT).await;
    assert_eq!(connz.len(), 1, "{connz:?}");
    check_server(&connz[0]["server"], &id);
    assert_eq!(connz[0]["data"]["num_connections"], 1, "{}", connz[0]);

    let subsz = gather(&sys, "$SYS.REQ.ACCOUNT.A.SUBSZ", "", WAIT).await;
    let list = subsz[0]["data"]["subscriptions_list"].as_array().unwrap();
    assert!(
        list.iter().any(|s| s["subject"] == "a.thing"),
        "{}",
        subsz[0]
    );

    let info = gather(&sys, "$SYS.REQ.ACCOUNT.A.INFO", "", WAIT).await;
    assert_eq!(info[0]["data"]["account_name"], "A", "{}", info[0]);

    let statz = gather(&sys, "$SYS.REQ.ACCOUNT.A.STATZ", "", WAIT).await;
    let stats = &statz[0]["data"]["account_statz"];
    assert_eq!(stats[0]["acc"], "A", "{}", statz[0]);
    assert_eq!(stats[0]["conns"], 1, "{}", statz[0]);
    let all = gather(
        &sys,
        "$SYS.REQ.ACCOUNT.PING.STATZ",
        r#"{"accounts":["A"]}"#,
        WAIT,
    )
    .await;
    assert_eq!(all.len(), 1, "{all:?}");
    assert_eq!(all[0]["data"]["account_statz"][0]["acc"], "A", "{}", all[0]);

    let conns = gather(&sys, "$SYS.REQ.ACCOUNT.A.CONNS", "", WAIT).await;
    assert_eq!(conns.len(), 1, "{conns:?}");
    assert_eq!(
        conns[0]["type"],
        "io.nats.server.advisory.v1.account_connections"
    );
    assert_eq!(conns[0]["conns"], 1, "{}", conns[0]);

    // A's own client, through its imports from the system account.
    let own = gather(&a, "$SYS.REQ.SERVER.PING.CONNZ", "", WAIT).await;
    assert_eq!(own.len(), 1, "{own:?}");
    let conns = own[0]["data"]["connections"].as_array().unwrap();
    assert_eq!(conns.len(), 1, "only A's: {}", own[0]);
    let own = gather(&a, "$SYS.REQ.ACCOUNT.PING.CONNZ", "", WAIT).await;
    assert_eq!(own[0]["data"]["num_connections"], 1, "{}", own[0]);
    let own = gather(&a, "$SYS.REQ.ACCOUNT.PING.STATZ", "", WAIT).await;
    assert_eq!(own[0]["data"]["account_statz"][0]["acc"], "A", "{}", own[0]);
    let me = gather(&a, "$SYS.REQ.USER.INFO", "", WAIT).await;
    assert_eq!(me.len(), 1, "{me:?}");
    assert_eq!(me[0]["data"]["user"], "a", "{}", me[0]);
    assert_eq!(me[0]["data"]["account"], "A", "{}", me[0]);
    // Other system requests are not A's to make.
    assert!(gather(&a, "$SYS.REQ.SERVER.PING.VARZ", "", WAIT)
        .await
        .is_empty());
    // The system account's users ask who they are too.
    // A user's permissions are told to it (list order aside: nats-server
    // walks its tries).
    let limited = common::connect_as(&s.url(), "limited", "p").await;
    let me = gather(&limited, "$SYS.REQ.USER.INFO", "", WAIT).await;
    assert_eq!(me.len(), 1, "{me:?}");
    let mut perms = me[0]["data"]["permissions"].clone();
    for list in ["/publish/allow", "/publish/deny", "/subscribe/allow"] {
        let l = perms
            .pointer_mut(list)
            .and_then(|l| l.as_array_mut())
            .unwrap();
        l.sort_by_key(|v| v.to_string());
    }
    let want = serde_json::json!({
        "publish": {"allow": ["$SYS.REQ.USER.INFO", "a.>"], "deny": ["a.secret"]},
        "subscribe": {"allow": ["_INBOX.>", "b.* q"]},
        "responses": {"max": 1, "ttl": 120_000_000_000u64},
    });
    assert_eq!(perms, want, "{}", me[0]);
    assert!(gather(&a, "$SYS.REQ.USER.INFO", "", WAIT).await[0]["data"]
        .get("permissions")
        .is_none());
    let me = gather(&sys, "$SYS.REQ.USER.INFO", "", WAIT).await;
    assert_eq!(me.len(), 1, "{me:?}");
    assert_eq!(me[0]["data"]["user"], "sys", "{}", me[0]);
    assert_eq!(me[0]["data"]["account"], "SYS", "{}", me[0]);
}

/// `KICK` closes the client a `cid` names (its reason `Kicked`), and
/// `LDM` tells it the server is going; both are this server's alone.
#[tokio::test]
async fn clients_are_kicked_and_told_of_lame_duck() {
    let s = common::server().config(SYS).start();
    let id = s.json("/varz")["server_id"].as_str().unwrap().to_string();
    let sys = common::connect_as(&s.url(), "sys", "p").await;
    let (opts, mut events) = common::with_events(
        async_nats::ConnectOptions::with_user_and_password("a".into(), "p".into()),
    );
    let a = opts.connect(s.url()).await.unwrap();
    a.flush().await.unwrap();
    let connz = s.json("/connz?acc=A");
    let cid = connz["connections"][0]["cid"].as_u64().unwrap();

    let ldm = format!("$SYS.REQ.SERVER.{id}.LDM");
    let r = gather(&sys, &ldm, &format!(r#"{{"cid":{cid}}}"#), WAIT).await;
    assert_eq!(r.len(), 1, "{r:?}");
    assert!(
        r[0].get("error").is_none() && r[0].get("data").is_none(),
        "{}",
        r[0]
    );
    let told = tokio::time::timeout(std::time::Duration::from_secs(5), async {
        while let Some(e) = events.recv().await {
            if e.contains("lame duck") {
                return e;
            }
        }
        String::new()
    })
    .await;
    assert!(
        told.is_ok_and(|e| !e.is_empty()),
        "the client hears of lame duck mode"
    );

    let kick = format!("$SYS.REQ.SERVER.{id}.KICK");
    let r = gather(&sys, &kick, r#"{"cid":999999}"#, WAIT).await;
    assert_eq!(r[0]["error"]["code"], 500, "{}", r[0]);
    let r = gather(&sys, &kick, &format!(r#"{{"cid":{cid}}}"#), WAIT).await;
    assert!(r[0].get("error").is_none(), "{}", r[0]);
    common::wait_for(
        "the kicked client gone",
        std::time::Duration::from_secs(5),
        || {
            let closed = s.json(&format!("/connz?state=closed&cid={cid}"));
            closed["connections"][0]["reason"] == "Kicked"
        },
    );
    // Not asked of every server.
    assert!(
        gather(&sys, "$SYS.REQ.SERVER.PING.KICK", r#"{"cid":1}"#, WAIT)
            .await
            .is_empty()
    );
    drop(a);
}

/// `RELOAD` reloads the config file, as SIGHUP does, and says when the
/// new one is refused.
#[tokio::test]
async fn the_config_is_reloaded_on_request() {
    let s = common::server().config(SYS).start();
    let id = s.json("/varz")["server_id"].as_str().unwrap().to_string();
    let sys = common::connect_as(&s.url(), "sys", "p").await;
    let subject = format!("$SYS.REQ.SERVER.{id}.RELOAD");
    let before = s.json("/varz")["config_load_time"].clone();
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    let r = gather(&sys, &subject, "", WAIT).await;
    assert_eq!(r.len(), 1, "{r:?}");
    assert!(r[0].get("error").is_none(), "{}", r[0]);
    assert_ne!(s.json("/varz")["config_load_time"], before, "reloaded");

    let changed = format!("{SYS}server_name: renamed\n");
    std::fs::write(s.config_file(), changed).unwrap();
    let r = gather(&sys, &subject, "", WAIT).await;
    assert_eq!(r[0]["error"]["code"], 500, "{}", r[0]);
    let why = r[0]["error"]["description"].as_str().unwrap_or_default();
    assert!(why.contains("config reload not supported for"), "{why}");
}

/// A leaf node connection is told as a client is, as a `Leafnode`.
#[tokio::test]
async fn leaf_node_connections_are_told() {
    use futures::StreamExt;
    let port = common::free_ports(1)[0];
    let hub_config = format!(
        "{SYS}authorization {{ users: [{{ user: anon, password: p }}] }}\n\
         leafnodes {{ listen: \"127.0.0.1:{port}\" }}\n"
    );
    let hub = common::server().config(&hub_config).start();
    let sys = common::connect_as(&hub.url(), "sys", "p").await;
    let mut events = sys.subscribe("$SYS.ACCOUNT.*.*").await.unwrap();
    sys.flush().await.unwrap();
    let leaf_config = format!(
        "leafnodes {{ remotes: [ {{ url: \"nats-leaf://anon:p@127.0.0.1:{port}\" }} ] }}\n"
    );
    let mut leaf = common::server().config(&leaf_config).start();
    let connect = tokio::time::timeout(std::time::Duration::from_secs(10), async {
        while let Some(m) = events.next().await {
            if m.subject.as_str() == "$SYS.ACCOUNT.$G.CONNECT" {
                return Some(m);
            }
        }
        None
    })
    .await
    .expect("a connect event")
    .unwrap();
    let c: serde_json::Value = serde_json::from_slice(&connect.payload).unwrap();
    assert_eq!(connect.subject.as_str(), "$SYS.ACCOUNT.$G.CONNECT", "{c}");
    assert_eq!(c["client"]["kind"], "Leafnode", "{c}");
    assert!(c["client"].get("client_type").is_none(), "{c}");
    leaf.kill9();
    let gone = tokio::time::timeout(std::time::Duration::from_secs(10), async {
        while let Some(m) = events.next().await {
            if m.subject.as_str() == "$SYS.ACCOUNT.$G.DISCONNECT" {
                return Some(m);
            }
        }
        None
    })
    .await
    .expect("a disconnect event")
    .unwrap();
    let d: serde_json::Value = serde_json::from_slice(&gone.payload).unwrap();
    assert_eq!(d["client"]["kind"], "Leafnode", "{d}");
}

/// `/accountz` lists every account's imports from the system account,
/// as nats-server does.
#[test]
fn accountz_lists_the_system_imports() {
    let s = common::server()
        .config("accounts { A { users: [{ user: a, password: p }] } }\n")
        .start();
    let a = &s.json("/accountz?acc=A")["account_detail"];
    let mut system: Vec<serde_json::Value> = a["imports"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["account"] == "$SYS")
        .cloned()
        .collect();
    system.sort_by_key(|i| i["to"].as_str().unwrap_or_default().to_string());
    let import = |subject: &str, to: &str, share: bool| {
        serde_json::json!({"subject": subject, "account": "$SYS", "to": to,
            "local_subject": to, "type": "service", "invalid": false,
            "share": share, "tracking": false})
    };
    assert_eq!(
        system,
        [
            import(
                "$SYS.REQ.ACCOUNT.A.CONNZ",
                "$SYS.REQ.ACCOUNT.PING.CONNZ",
                false
            ),
            import(
                "$SYS.REQ.ACCOUNT.A.STATZ",
                "$SYS.REQ.ACCOUNT.PING.STATZ",
                false
            ),
            import(
                "$SYS.REQ.ACCOUNT.A.CONNZ",
                "$SYS.REQ.SERVER.PING.CONNZ",
                false
            ),
            import("$SYS.REQ.USER.A.INFO", "$SYS.REQ.USER.INFO", true),
        ],
        "{a}"
    );
}
