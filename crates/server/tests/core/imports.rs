//! Exports and imports through async-nats, on one server and across a
//! route: a service import answers a request from another account, with
//! nats-server's reply subjects, header and response types; a stream
//! import shows another account's messages under a prefix or a mapped
//! subject; nothing that is not exported crosses; a reload changes the
//! routes of live connections; every bad import is refused at load with
//! nats-server's error.

#[path = "../common/mod.rs"]
mod common;

use std::time::Duration;

use futures::StreamExt;

const CONFIG: &str = r#"
accounts {
  A {
    users: [ { user: a, password: p } ]
    exports: [
      { service: "svc.>" }
      { service: "many", response_type: stream }
      { service: "shared" }
      { stream: "foo.>" }
      { stream: "limited.>", accounts: [C] }
      { stream: "xf.*.*" }
    ]
  }
  B {
    users: [ { user: b, password: p } ]
    imports: [
      { service: { account: A, subject: "svc.>" }, to: "ask.>" }
      { service: { account: A, subject: "many" } }
      { service: { account: A, subject: "shared" }, share: true }
      { stream: { account: A, subject: "foo.>" }, prefix: "fromA" }
      { stream: { account: A, subject: "xf.*.*" }, to: "mapped.*.*" }
    ]
  }
  C {
    users: [ { user: c, password: p } ]
    imports: [
      { stream: { account: A, subject: "limited.>" } }
      { stream: { account: A, subject: "foo.>" } }
    ]
  }
}
"#;

/// Interest crosses a route a moment after SUB.
async fn settle(clients: &[&async_nats::Client]) {
    for c in clients {
        c.flush().await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
}

fn routed_pair() -> Vec<common::Server> {
    let servers = common::routed_servers(&[CONFIG.to_string(), CONFIG.to_string()]);
    let routed = |s: &common::Server| s.json("/routez")["num_routes"].as_u64() >= Some(1);
    common::wait_for("the route", Duration::from_secs(10), || {
        routed(&servers[0]) && routed(&servers[1])
    });
    servers
}

/// A responder in A answers B's requests on the imported subject: it
/// sees the exporter's subject, a `_R_.` reply and a `Nats-Request-Info`
/// header naming B; B sees the answer, once. A B subscriber on the
/// subject gets the request too, as in nats-server.
async fn a_service_import_answers(requester_url: &str, responder_url: &str) {
    let responder = common::connect_as(responder_url, "a", "p").await;
    let mut requests = responder.subscribe("svc.>").await.unwrap();
    let b_listener = common::connect_as(requester_url, "b", "p").await;
    let mut overheard = b_listener.subscribe("ask.>").await.unwrap();
    settle(&[&responder, &b_listener]).await;

    let requester = common::connect_as(requester_url, "b", "p").await;
    let asked = tokio::spawn({
        let requester = requester.clone();
        async move { requester.request("ask.time", "now?".into()).await }
    });
    let got = tokio::time::timeout(Duration::from_secs(5), requests.next())
        .await
        .expect("the request reaches A")
        .unwrap();
    assert_eq!(got.subject.as_str(), "svc.time");
    assert_eq!(&got.payload[..], b"now?");
    let reply = got.reply.clone().expect("a reply subject");
    assert!(reply.starts_with("_R_."), "{reply}");
    assert_eq!(
        reply.len(),
        17,
        "_R_. and two six-character tokens: {reply}"
    );
    let info = got
        .headers
        .as_ref()
        .and_then(|h| h.get("Nats-Request-Info"))
        .expect("the request names its account")
        .to_string();
    let info: serde_json::Value = serde_json::from_str(&info).unwrap();
    assert_eq!(info["acc"], "B", "{info}");
    // A singleton: a second answer goes nowhere.
    responder
        .publish(reply.clone(), "12:00".into())
        .await
        .unwrap();
    responder.publish(reply, "again".into()).await.unwrap();
    responder.flush().await.unwrap();
    let answer = asked.await.unwrap().expect("B gets the answer");
    assert_eq!(&answer.payload[..], b"12:00");
    let heard = tokio::time::timeout(Duration::from_secs(5), overheard.next())
        .await
        .expect("B's own subscriber gets the request")
        .unwrap();
    assert_eq!(heard.subject.as_str(), "ask.time");
}

#[tokio::test]
async fn a_service_import_answers_on_one_server() {
    let s = common::server().config(CONFIG).start();
    a_service_import_answers(&s.url(), &s.url()).await;
}

#[tokio::test]
async fn a_service_import_answers_across_a_route() {
    let servers = routed_pair();
    a_service_import_answers(&servers[0].url(), &servers[1].url()).await;
}

/// A `stream` response type keeps the reply path open for every answer;
/// with no responder, the requester hears so at once.
#[tokio::test]
async fn response_types_and_no_responders() {
    let s = common::server().config(CONFIG).start();
    let requester = common::connect_as(&s.url(), "b", "p").await;
    let nobody = requester.request("ask.anyone", "".into()).await;
    assert_eq!(
        nobody.unwrap_err().kind(),
        async_nats::RequestErrorKind::NoResponders,
        "no responder in A"
    );

    let responder = common::connect_as(&s.url(), "a", "p").await;
    let mut requests = responder.subscribe("many").await.unwrap();
    settle(&[&responder]).await;
    let inbox = requester.new_inbox();
    let mut answers = requester.subscribe(inbox.clone()).await.unwrap();
    requester
        .publish_with_reply("many", inbox, "".into())
        .await
        .unwrap();
    requester.flush().await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(5), requests.next())
        .await
        .unwrap()
        .unwrap();
    for part in ["1", "2", "3"] {
        responder
            .publish(got.reply.clone().unwrap(), part.into())
            .await
            .unwrap();
    }
    responder.flush().await.unwrap();
    for part in ["1", "2", "3"] {
        let m = tokio::time::timeout(Duration::from_secs(5), answers.next())
            .await
            .unwrap_or_else(|_| panic!("answer {part}"))
            .unwrap();
        assert_eq!(&m.payload[..], part.as_bytes());
    }
}

/// An import that shares tells the exporter who asked, as nats-server's
/// detailed `ClientInfo`; one that does not, only the account.
#[tokio::test]
async fn a_shared_import_tells_who_asked() {
    let s = common::server()
        .config(&format!("server_name: srv\n{CONFIG}"))
        .start();
    let responder = common::connect_as(&s.url(), "a", "p").await;
    let mut requests = responder.subscribe("shared").await.unwrap();
    settle(&[&responder]).await;
    let requester = async_nats::ConnectOptions::with_user_and_password("b".into(), "p".into())
        .name("asker")
        .connect(s.url())
        .await
        .unwrap();
    requester
        .publish_with_reply("shared", "_INBOX.x", "".into())
        .await
        .unwrap();
    requester.flush().await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(5), requests.next())
        .await
        .unwrap()
        .unwrap();
    let info = got
        .headers
        .as_ref()
        .unwrap()
        .get("Nats-Request-Info")
        .unwrap();
    let info: serde_json::Value = serde_json::from_str(info.as_str()).unwrap();
    for (key, want) in [
        ("acc", "B"),
        ("user", "b"),
        ("name", "asker"),
        ("lang", "rust"),
        ("server", "srv"),
        ("host", "127.0.0.1"),
        ("kind", "Client"),
        ("client_type", "nats"),
    ] {
        assert_eq!(info[key], want, "{key} in {info}");
    }
    assert!(info["id"].as_u64().is_some_and(|id| id > 0), "{info}");
    assert!(common::is_timestamp(&info["start"]), "{info}");
}

/// What A publishes reaches B under its prefix or mapped subject, and C
/// (to which A limits a stream) as published; what A does not export,
/// and what B publishes, stays where it was published.
async fn stream_imports_show_what_is_exported(subscriber_url: &str, publisher_url: &str) {
    let (a_sub, b_sub, c_sub) = (
        common::connect_as(subscriber_url, "a", "p").await,
        common::connect_as(subscriber_url, "b", "p").await,
        common::connect_as(subscriber_url, "c", "p").await,
    );
    let mut a_all = a_sub.subscribe(">").await.unwrap();
    let mut b_all = b_sub.subscribe(">").await.unwrap();
    let mut b_narrow = b_sub.subscribe("fromA.foo.narrow").await.unwrap();
    let mut c_all = c_sub.subscribe(">").await.unwrap();
    settle(&[&a_sub, &b_sub, &c_sub]).await;

    let (a_pub, b_pub) = (
        common::connect_as(publisher_url, "a", "p").await,
        common::connect_as(publisher_url, "b", "p").await,
    );
    for subject in ["fromA.foo.by_b", "foo.by_b", "b.end"] {
        b_pub.publish(subject, "".into()).await.unwrap();
    }
    b_pub.flush().await.unwrap();
    assert_eq!(
        common::received_until(&mut b_all, "b.end").await,
        ["fromA.foo.by_b", "foo.by_b"]
    );
    for subject in [
        "foo.1",
        "limited.1",
        "xf.x.y",
        "secret.1",
        "foo.narrow",
        "foo.end",
        "limited.end",
    ] {
        a_pub.publish(subject, "".into()).await.unwrap();
    }
    a_pub.flush().await.unwrap();
    assert_eq!(
        common::received_until(&mut b_all, "fromA.foo.end").await,
        ["fromA.foo.1", "mapped.x.y", "fromA.foo.narrow"]
    );
    assert_eq!(
        common::received_until(&mut c_all, "limited.end").await,
        ["foo.1", "limited.1", "foo.narrow", "foo.end"]
    );
    let narrow = tokio::time::timeout(Duration::from_secs(5), b_narrow.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(narrow.subject.as_str(), "fromA.foo.narrow");
    assert_eq!(
        common::received_until(&mut a_all, "limited.end").await,
        [
            "foo.1",
            "limited.1",
            "xf.x.y",
            "secret.1",
            "foo.narrow",
            "foo.end"
        ],
        "nothing of B's reaches A"
    );
}

#[tokio::test]
async fn stream_imports_on_one_server() {
    let s = common::server().config(CONFIG).start();
    stream_imports_show_what_is_exported(&s.url(), &s.url()).await;
}

#[tokio::test]
async fn stream_imports_across_a_route() {
    let servers = routed_pair();
    stream_imports_show_what_is_exported(&servers[0].url(), &servers[1].url()).await;
}

/// A client may not use a reply subject of the spaces the server makes
/// replies in: it could answer another account's request.
#[test]
fn reserved_reply_subjects_are_refused() {
    let s = common::server().config(CONFIG).start();
    for reply in ["_R_.abcdef.ghijkl", "$JS.ACK.S.C.1.1.1.1.0"] {
        let mut raw = common::Raw::connect(&s.addr());
        raw.send(b"CONNECT {\"user\":\"b\",\"pass\":\"p\",\"verbose\":false}\r\n");
        raw.send(format!("PUB ask.x {reply} 0\r\n\r\nPING\r\n").as_bytes());
        let said = raw.read_until("PONG", Duration::from_secs(5));
        assert!(
            said.contains(&format!(
                "-ERR 'Permissions Violation for Publish with Reply of \"{reply}\"'"
            )),
            "{said}"
        );
    }
}

/// Adding an import by reload reaches a subscriber already connected;
/// taking it away by reload stops it.
#[tokio::test]
async fn a_reload_changes_live_imports() {
    let without = CONFIG.replace(
        r#"{ stream: { account: A, subject: "foo.>" }, prefix: "fromA" }"#,
        "",
    );
    assert_ne!(without, CONFIG);
    let s = common::server().config(&without).start();
    let b = common::connect_as(&s.url(), "b", "p").await;
    let mut sub = b.subscribe("fromA.>").await.unwrap();
    let mut ends = b.subscribe("end").await.unwrap();
    let a = common::connect_as(&s.url(), "a", "p").await;
    settle(&[&b]).await;
    let reload = |text: &str| {
        std::fs::write(s.config_file(), text).unwrap();
        s.signal(libc::SIGHUP);
    };
    let round = |n: usize| {
        let (a, b) = (a.clone(), b.clone());
        async move {
            a.publish(format!("foo.{n}"), "".into()).await.unwrap();
            a.flush().await.unwrap();
            b.publish("end", "".into()).await.unwrap();
            b.flush().await.unwrap();
        }
    };
    round(1).await;
    reload(CONFIG);
    assert!(s.wait_log("Reloaded server configuration", Duration::from_secs(5)));
    round(2).await;
    let m = tokio::time::timeout(Duration::from_secs(5), sub.next())
        .await
        .expect("the import added by reload reaches the subscriber")
        .unwrap();
    assert_eq!(m.subject.as_str(), "fromA.foo.2");
    for _ in 0..2 {
        tokio::time::timeout(Duration::from_secs(5), ends.next())
            .await
            .unwrap();
    }
    reload(&without);
    common::wait_for("the second reload", Duration::from_secs(5), || {
        s.log_text()
            .matches("Reloaded server configuration")
            .count()
            >= 2
    });
    round(3).await;
    tokio::time::timeout(Duration::from_secs(5), ends.next())
        .await
        .unwrap();
    let late = tokio::time::timeout(Duration::from_millis(300), sub.next()).await;
    assert!(late.is_err(), "the import was taken away: {late:?}");
}

/// Each bad export or import, and what refuses it: nats-server's text,
/// with the file, line and column.
#[test]
fn bad_imports_are_refused_at_load() {
    let accounts = |a: &str, b: &str| {
        format!(
            "accounts {{\n  A {{\n    users: [ {{ user: a, password: p }} ]\n    {a}\n  }}\n  \
             B {{\n    users: [ {{ user: b, password: p }} ]\n    {b}\n  }}\n  C {{ }}\n}}\n"
        )
    };
    let cases: &[(&str, &str, &str)] = &[
        (
            r#"exports: [ { stream: "foo.>" } ]"#,
            r#"imports: [ { stream: { account: A, subject: "secret.>" } } ]"#,
            r#"Error adding stream import "secret.>": stream import not authorized"#,
        ),
        (
            r#"exports: [ { stream: "foo.>" } ]"#,
            r#"imports: [ { service: { account: A, subject: "foo.x" } } ]"#,
            r#"Error adding service import "foo.x": service import not authorized"#,
        ),
        (
            r#"exports: [ { stream: "foo.>", accounts: [C] } ]"#,
            r#"imports: [ { stream: { account: A, subject: "foo.>" } } ]"#,
            r#"Error adding stream import "foo.>": stream import not authorized"#,
        ),
        (
            r#"exports: [ { service: "req.*.x", account_token_position: 2 } ]"#,
            r#"imports: [ { service: { account: A, subject: "req.C.x" } } ]"#,
            r#"Error adding service import "req.C.x": service import not authorized"#,
        ),
        (
            r#"exports: [ { service: "req.x", account_token_position: 2 } ]"#,
            "",
            r#"Error adding service export "req.x""#,
        ),
        (
            r#"exports: [ { stream: "foo.>" } ]"#,
            r#"imports: [ { stream: { account: Z, subject: "foo.>" } } ]"#,
            r#""Z" account not defined for stream import"#,
        ),
        (
            r#"exports: [ { service: "svc", accounts: [Z] } ]"#,
            "",
            r#""Z" account not defined for service export"#,
        ),
        (
            r#"exports: [ { stream: "foo.>" } ]"#,
            r#"imports: [ { stream: { account: A, subject: "foo.>" }, prefix: "p.*" } ]"#,
            "stream import prefix can not contain wildcard tokens",
        ),
        (
            r#"exports: [ { service: "q" } ], imports: [ { service: { account: B, subject: "q" } } ]"#,
            r#"exports: [ { service: "q" } ], imports: [ { service: { account: A, subject: "q" } } ]"#,
            "import forms a cycle",
        ),
        (
            r#"exports: [ { service: "svc", response_type: bogus } ]"#,
            "",
            r#"Unknown response type: "bogus""#,
        ),
        (
            r#"exports: [ { service: "svc", stream: "foo" } ]"#,
            "",
            "but already saw a",
        ),
        (
            r#"exports: { service: "svc" }"#,
            "",
            "Exports should be an array",
        ),
        (
            r#"exports: [ { stream: "foo" } ]"#,
            r#"imports: [ { stream: { account: A, subject: "foo", bogus: 1 } } ]"#,
            r#"unknown field "bogus""#,
        ),
        (
            r#"exports: [ { stream: "foo" } ]"#,
            r#"imports: [ { stream: { account: A } } ]"#,
            "Expect an account name and a subject",
        ),
        (
            r#"exports: [ { service: "svc" }, { service: "other" } ]"#,
            r#"imports: [ { service: { account: A, subject: "svc" } }, { service: { account: A, subject: "other" }, to: "svc" } ]"#,
            r#"Duplicate service import subject "svc", previously used in import for account "A", subject "svc""#,
        ),
        (
            r#"exports: [ { stream: "foo", allow_trace: true } ]"#,
            "",
            "Detected allow_trace directive on non-service",
        ),
        (
            r#"exports: [ { service: "svc" } ]"#,
            r#"imports: [ { service: { account: A, subject: "svc" }, allow_trace: true } ]"#,
            "Detected allow_trace directive on a non-stream",
        ),
    ];
    for (a, b, want) in cases {
        let text = accounts(a, b);
        let said = common::refused_by_server(&text);
        assert!(said.contains(want), "{text}\nwant: {want}\ngot: {said}");
        // Every error names the file, line and column.
        assert!(said.contains("test.conf:"), "{said}");
    }
    // Deliberately stricter than nats-server, which ignores or drops these.
    if common::reference_server() {
        return;
    }
    let stricter: &[(&str, &str, &str)] = &[
        (
            r#"exports: [ { stream: "foo.>" } ]"#,
            r#"imports: [ { stream: { account: A, subject: "foo.>" }, prefix: "p", to: "x.>" } ]"#,
            "Stream import can not have a 'prefix' and a 'to' property",
        ),
        (
            r#"exports: [ { service: "svc" } ]"#,
            r#"imports: [ { service: { account: A, subject: "svc" }, prefix: "p" } ]"#,
            "\"prefix\" is for stream imports",
        ),
        (
            r#"exports: [ { stream: "foo" } ]"#,
            r#"imports: [ { stream: { account: A, subject: "foo" }, share: true } ]"#,
            "\"share\" is for service imports",
        ),
        (
            r#"exports: [ { accounts: [B] } ]"#,
            "",
            "Export Items should name a stream or a service",
        ),
    ];
    for (a, b, want) in stricter {
        let text = accounts(a, b);
        let said = common::refused_by_server(&text);
        assert!(said.contains(want), "{text}\nwant: {want}\ngot: {said}");
    }
}

/// `/accountz` lists the accounts, and with `acc` shows one account's
/// exports and imports as nats-server does.
#[test]
fn accountz_shows_exports_and_imports() {
    let s = common::server().config(CONFIG).start();
    let all = s.json("/accountz");
    let names: Vec<&str> = all["accounts"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|a| a.as_str())
        .collect();
    for name in ["A", "B", "C", "$G"] {
        assert!(names.contains(&name), "{all}");
    }
    let b = &s.json("/accountz?acc=B")["account_detail"];
    assert_eq!(b["account_name"], "B");
    let imports = b["imports"].as_array().unwrap();
    let find = |subject: &str| {
        imports
            .iter()
            .find(|i| i["subject"] == subject)
            .unwrap_or_else(|| panic!("{subject} in {b}"))
            .clone()
    };
    assert_eq!(
        find("svc.>"),
        serde_json::json!({"subject": "svc.>", "account": "A", "to": "ask.>",
            "local_subject": "ask.>", "type": "service", "invalid": false,
            "share": false, "tracking": false})
    );
    assert_eq!(
        find("foo.>"),
        serde_json::json!({"subject": "foo.>", "account": "A",
            "local_subject": "fromA.foo.>", "type": "stream", "invalid": false,
            "share": false, "tracking": false})
    );
    let a = &s.json("/accountz?acc=A")["account_detail"];
    let exports = a["exports"].as_array().unwrap();
    let export = |subject: &str| {
        exports
            .iter()
            .find(|e| e["subject"] == subject)
            .unwrap_or_else(|| panic!("{subject} in {a}"))
            .clone()
    };
    assert_eq!(
        export("svc.>"),
        serde_json::json!({"subject": "svc.>", "type": "service", "response_type": "Singleton"})
    );
    assert_eq!(
        export("limited.>"),
        serde_json::json!({"subject": "limited.>", "type": "stream", "approved_accounts": ["C"]})
    );
    let (status, _, body) = s.http("/accountz?acc=Z");
    assert_eq!((status, body.trim()), (400, "Account Z does not exist"));
}

/// `/accstatz` counts each account's traffic as nats-server does: what
/// its clients published (`received`), and what its subject space
/// delivered (`sent`), a stream import's deliveries counted in the
/// exporter's; only accounts with a client here, unless `unused`.
#[tokio::test]
async fn accstatz_counts_each_accounts_traffic() {
    let s = common::server().config(CONFIG).start();
    // nats-server's accounts hold subscriptions of its own (its system
    // imports): counted from where each starts.
    let subs = |acc: &str| {
        s.json(&format!("/subsz?acc={acc}"))["num_subscriptions"]
            .as_u64()
            .unwrap()
    };
    let a0 = subs("A");
    let (a, b) = (
        common::connect_as(&s.url(), "a", "p").await,
        common::connect_as(&s.url(), "b", "p").await,
    );
    let mut own = a.subscribe("foo.x").await.unwrap();
    let mut imported = b.subscribe("fromA.foo.>").await.unwrap();
    settle(&[&a, &b]).await;
    for _ in 0..3 {
        a.publish("foo.x", "hello".into()).await.unwrap();
    }
    b.publish("nobody", "hi".into()).await.unwrap();
    settle(&[&a, &b]).await;
    for _ in 0..3 {
        own.next().await.unwrap();
        imported.next().await.unwrap();
    }
    let statz = s.json("/accstatz");
    let stat = |name: &str| {
        statz["account_statz"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["acc"] == name)
            .cloned()
    };
    let zero = serde_json::json!({"msgs": 0, "bytes": 0});
    let data = |msgs: u64, bytes: u64| {
        serde_json::json!({"msgs": msgs, "bytes": bytes,
            "gateways": zero, "routes": zero, "leafs": zero})
    };
    let a_stat = stat("A").unwrap_or_else(|| panic!("A in {statz}"));
    assert_eq!(a_stat["name"], "A");
    assert_eq!(
        (
            &a_stat["conns"],
            &a_stat["leafnodes"],
            &a_stat["total_conns"]
        ),
        (&1.into(), &0.into(), &1.into())
    );
    assert_eq!(a_stat["received"], data(3, 15), "{a_stat}");
    assert_eq!(a_stat["sent"], data(6, 30), "{a_stat}");
    assert_eq!(a_stat["slow_consumers"], 0);
    // Its own subscription and the shadow of B's.
    assert_eq!(a_stat["num_subscriptions"].as_u64().unwrap() - a0, 2);
    let b_stat = stat("B").unwrap_or_else(|| panic!("B in {statz}"));
    assert_eq!(b_stat["received"], data(1, 2), "{b_stat}");
    assert_eq!(b_stat["sent"], data(0, 0), "{b_stat}");
    assert!(stat("C").is_none() && stat("$G").is_none(), "{statz}");
    let all = s.json("/accstatz?unused=1");
    let names: Vec<&str> = all["account_statz"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|a| a["acc"].as_str())
        .collect();
    for name in ["A", "B", "C", "$G"] {
        assert!(names.contains(&name), "{all}");
    }
}

/// Across a route, `/accstatz` counts a message where it was published
/// and again where the route brought it, under `routes` on both sides.
#[tokio::test]
async fn accstatz_counts_what_crosses_a_route() {
    let servers = routed_pair();
    let (publisher, subscriber) = (
        common::connect_as(&servers[0].url(), "a", "p").await,
        common::connect_as(&servers[1].url(), "a", "p").await,
    );
    let mut sub = subscriber.subscribe("foo.r").await.unwrap();
    settle(&[&subscriber]).await;
    for _ in 0..2 {
        publisher.publish("foo.r", "hello".into()).await.unwrap();
    }
    for _ in 0..2 {
        sub.next().await.unwrap();
    }
    settle(&[&publisher]).await;
    let a = |s: &common::Server| {
        let statz = s.json("/accstatz");
        statz["account_statz"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["acc"] == "A")
            .cloned()
            .unwrap_or_else(|| panic!("A in {statz}"))
    };
    let zero = serde_json::json!({"msgs": 0, "bytes": 0});
    let ten = serde_json::json!({"msgs": 2, "bytes": 10});
    let data = |routes: &serde_json::Value| {
        serde_json::json!({"msgs": 2, "bytes": 10,
            "gateways": zero, "routes": routes, "leafs": zero})
    };
    let (from, to) = (a(&servers[0]), a(&servers[1]));
    assert_eq!(from["received"], data(&zero), "{from}");
    assert_eq!(from["sent"], data(&ten), "{from}");
    assert_eq!(to["received"], data(&ten), "{to}");
    assert_eq!(to["sent"], data(&zero), "{to}");
}

/// A service import of a service that the exporter imports in turn: the
/// request goes on through both (the last hop's header names the middle
/// account as `svc`), the middle account's own subscribers hear it, and
/// the answer comes back through both reply paths.
#[tokio::test]
async fn a_chained_service_import_reaches_the_last_exporter() {
    let s = common::server()
        .config(
            r#"
accounts {
  C { users: [ { user: c, password: p } ], exports: [ { service: "svc.>" } ] }
  B {
    users: [ { user: b, password: p } ]
    exports: [ { service: "svc.>" } ]
    imports: [ { service: { account: C, subject: "svc.>" }, share: true } ]
  }
  A { users: [ { user: a, password: p } ], imports: [ { service: { account: B, subject: "svc.>" } } ] }
}
"#,
        )
        .start();
    let (a, b, c) = (
        common::connect_as(&s.url(), "a", "p").await,
        common::connect_as(&s.url(), "b", "p").await,
        common::connect_as(&s.url(), "c", "p").await,
    );
    let mut last = c.subscribe("svc.>").await.unwrap();
    let mut middle = b.subscribe("svc.>").await.unwrap();
    settle(&[&b, &c]).await;
    let asked = tokio::spawn({
        let a = a.clone();
        async move { a.request("svc.time", "now?".into()).await }
    });
    let got = tokio::time::timeout(Duration::from_secs(5), last.next())
        .await
        .expect("C gets the request")
        .unwrap();
    let info = |m: &async_nats::Message| -> serde_json::Value {
        let h = m.headers.as_ref().and_then(|h| h.get("Nats-Request-Info"));
        serde_json::from_str(h.expect("a request info header").as_str()).unwrap()
    };
    let at_c = info(&got);
    assert_eq!(
        (&at_c["acc"], &at_c["svc"]),
        (&"A".into(), &"B".into()),
        "{at_c}"
    );
    // B's import shares what A's did not: only the server is added.
    assert!(at_c["server"].is_string(), "{at_c}");
    assert!(
        at_c.get("user").is_none() && at_c.get("host").is_none(),
        "{at_c}"
    );
    let heard = tokio::time::timeout(Duration::from_secs(5), middle.next())
        .await
        .expect("B's own subscriber hears it")
        .unwrap();
    let at_b = info(&heard);
    assert_eq!(at_b["acc"], "A", "{at_b}");
    assert!(at_b.get("svc").is_none(), "{at_b}");
    c.publish(got.reply.clone().unwrap(), "noon".into())
        .await
        .unwrap();
    let answer = asked.await.unwrap().expect("A gets C's answer");
    assert_eq!(&answer.payload[..], b"noon");
}

/// Two accounts export a service that a third imports under one subject
/// (as nats-server's cross-account sourcing config imports each
/// origin's `$JS.FC.>`): a request there reaches both exporters, each
/// of whose answers comes back.
#[tokio::test]
async fn one_subject_imported_from_two_accounts_reaches_both() {
    let config = r#"
accounts {
  A { users: [ { user: a, password: p } ], exports: [ { service: "fc.>" } ] }
  B { users: [ { user: b, password: p } ], exports: [ { service: "fc.>" } ] }
  C {
    users: [ { user: c, password: p } ]
    imports: [
      { service: { account: A, subject: "fc.>" } }
      { service: { account: B, subject: "fc.>" } }
    ]
  }
}
"#;
    let s = common::server().config(config).start();
    let url = s.url();
    let mut answering = Vec::new();
    for user in ["a", "b"] {
        let c = common::connect_as(&url, user, "p").await;
        let mut sub = c.subscribe("fc.>").await.unwrap();
        c.flush().await.unwrap();
        let answerer = c.clone();
        answering.push(tokio::spawn(async move {
            let m = sub.next().await.expect("a request");
            let reply = m.reply.expect("a reply subject");
            answerer.publish(reply, user.into()).await.unwrap();
            answerer.flush().await.unwrap();
        }));
    }
    let c = common::connect_as(&url, "c", "p").await;
    let inbox = c.new_inbox();
    let mut answers = c.subscribe(inbox.clone()).await.unwrap();
    c.publish_with_reply("fc.x", inbox, "?".into())
        .await
        .unwrap();
    c.flush().await.unwrap();
    let mut heard = Vec::new();
    for _ in 0..2 {
        let m = tokio::time::timeout(Duration::from_secs(5), answers.next())
            .await
            .expect("both exporters answer")
            .unwrap();
        heard.push(String::from_utf8_lossy(&m.payload).to_string());
    }
    heard.sort();
    assert_eq!(heard, ["a", "b"]);
    for a in answering {
        a.await.unwrap();
    }
}
