//! JetStream in a named account: the account whose block enables it,
//! with its limits (`jetstream { max_file, max_streams, ... }`), and the
//! server's JetStream domain. Every mode; run against nats-server with
//! `FLOTILLA_TEST_SERVER`.

#[path = "../common/mod.rs"]
mod common;

use async_nats::jetstream;
use common::{api, api_err, JsServer};
use futures::StreamExt;
use serde_json::json;

/// Account `A` has JetStream with limits, and `a` is everyone who does
/// not log in; `B` has none.
const CONFIG: &str = r#"
jetstream { domain: "hub" }
no_auth_user: "a"
accounts {
  A {
    users: [{ user: "a" }]
    jetstream {
      max_mem: 64MB
      max_file: 32MB
      max_streams: 3
      max_consumers: 2
      max_ack_pending: 100
      memory_max_stream_bytes: 2048
      store_max_stream_bytes: 4096
      max_bytes_required: true
    }
  }
  B { users: [{ user: "b", password: "b" }] }
}
"#;

fn server() -> JsServer {
    common::js_server_configured(CONFIG)
}

#[tokio::test]
async fn account_info_has_the_account_limits_and_the_domain() {
    let s = server();
    assert_eq!(s.json("/jsz")["config"]["domain"], "hub");
    assert_eq!(s.json("/varz")["jetstream"]["config"]["domain"], "hub");
    let c = s.client().await;
    for subject in ["$JS.API.INFO", "$JS.hub.API.INFO"] {
        let info = api(&c, subject, "").await;
        assert_eq!(info["domain"], "hub", "{info}");
        assert_eq!(
            info["limits"],
            json!({
                "max_memory": 64 << 20,
                "max_storage": 32 << 20,
                "max_streams": 3,
                "max_consumers": 2,
                "max_ack_pending": 100,
                "memory_max_stream_bytes": 2048,
                "storage_max_stream_bytes": 4096,
                "max_bytes_required": true,
            }),
            "{subject}"
        );
    }
}

#[tokio::test]
async fn stream_configs_meet_the_account_limits() {
    let s = server();
    let c = s.client().await;
    let create = |name: &str, extra: &str| {
        let body = format!(r#"{{"name":"{name}","subjects":["{name}.>"]{extra}}}"#);
        let subject = format!("$JS.API.STREAM.CREATE.{name}");
        let c = c.clone();
        async move { api(&c, &subject, &body).await }
    };
    for (extra, refused) in [
        (
            "",
            (
                400,
                10113,
                "account requires a stream config to have max bytes set",
            ),
        ),
        (
            r#","max_bytes":4097"#,
            (
                400,
                10122,
                "stream max bytes exceeds account limit max stream bytes",
            ),
        ),
        (
            r#","max_bytes":2049,"storage":"memory""#,
            (
                400,
                10122,
                "stream max bytes exceeds account limit max stream bytes",
            ),
        ),
        (
            r#","max_bytes":128,"max_consumers":3"#,
            (400, 10026, "maximum consumers limit reached"),
        ),
    ] {
        let reply = create("S", extra).await;
        let (code, err_code, description) = api_err(&reply);
        assert_eq!((code, err_code, description.as_str()), refused, "{extra}");
    }
    for name in ["S1", "S2", "S3"] {
        let reply = create(name, r#","max_bytes":4096"#).await;
        assert_eq!(reply["config"]["max_bytes"], 4096, "{reply}");
    }
    // The same create again is not a fourth stream.
    let again = create("S1", r#","max_bytes":4096"#).await;
    assert!(again.get("error").is_none(), "{again}");
    let fourth = create("S4", r#","max_bytes":4096"#).await;
    assert_eq!(
        api_err(&fourth),
        (400, 10027, "maximum number of streams reached".into())
    );
    let info = api(&c, "$JS.API.INFO", "").await;
    assert_eq!(info["streams"], 3);
}

#[tokio::test]
async fn consumers_meet_the_account_limits() {
    let s = server();
    let c = s.client().await;
    let body = r#"{"name":"S","subjects":["s.>"],"max_bytes":4096}"#;
    let created = api(&c, "$JS.API.STREAM.CREATE.S", body).await;
    assert!(created.get("error").is_none(), "{created}");
    let consumer = |name: &str, extra: &str| {
        let body = format!(
            r#"{{"stream_name":"S","config":{{"durable_name":"{name}","ack_policy":"explicit"{extra}}}}}"#
        );
        let subject = format!("$JS.API.CONSUMER.CREATE.S.{name}");
        let c = c.clone();
        async move { api(&c, &subject, &body).await }
    };
    // The account's max_ack_pending is the default, and the most.
    let first = consumer("C1", "").await;
    assert_eq!(first["config"]["max_ack_pending"], 100, "{first}");
    let over = consumer("C2", r#","max_ack_pending":101"#).await;
    assert_eq!(
        api_err(&over),
        (
            400,
            10121,
            "consumer max ack pending exceeds system limit of 100".into()
        )
    );
    let second = consumer("C2", r#","max_ack_pending":50"#).await;
    assert_eq!(second["config"]["max_ack_pending"], 50, "{second}");
    let third = consumer("C3", "").await;
    assert_eq!(
        api_err(&third),
        (400, 10026, "maximum consumers limit reached".into())
    );
}

/// A client reaches the account's JetStream through the domain's API
/// prefix (`$JS.hub.API`), key-value buckets included, and the streams
/// live under the account's directory, across a restart.
#[tokio::test]
async fn the_domain_prefix_reaches_the_account_streams() {
    let mut s = server();
    let js = jetstream::with_domain(s.client().await, "hub");
    let kv = js
        .create_key_value(jetstream::kv::Config {
            bucket: "cfg".into(),
            max_bytes: 4096,
            num_replicas: common::replicas() as usize,
            ..Default::default()
        })
        .await
        .unwrap();
    kv.put("k", "v1".into()).await.unwrap();
    assert_eq!(kv.get("k").await.unwrap().unwrap(), "v1");
    if !common::reference_server() {
        let home = match common::clustered() {
            false => "streams",
            true => "replicas",
        };
        // An R1 stream is on one of a cluster's servers.
        let held = s.servers.iter().any(|server| {
            let dir = server.store_dir().join("jetstream").join("A").join(home);
            dir.read_dir().is_ok_and(|mut d| d.next().is_some())
        });
        assert!(held, "no server keeps the bucket under A/{home}");
        for server in &s.servers {
            assert!(!server.store_dir().join("jetstream").join("$G").exists());
        }
    }
    s.kill9();
    s.restart();
    let js = jetstream::with_domain(s.client().await, "hub");
    let kv = js.get_key_value("cfg").await.unwrap();
    assert_eq!(kv.get("k").await.unwrap().unwrap(), "v1");
    let mut stream = js.get_stream("KV_cfg").await.unwrap();
    assert_eq!(stream.info().await.unwrap().state.messages, 1);
}

/// The account's storage limit refuses a publish that would pass it
/// (10002), and stores nothing for it.
#[tokio::test]
async fn publishes_past_the_account_storage_are_refused() {
    let s = common::js_server_configured(
        r#"
no_auth_user: "a"
accounts { A { users: [{ user: "a" }], jetstream { max_file: 4KB } } }
"#,
    );
    let c = s.client().await;
    let created = api(
        &c,
        "$JS.API.STREAM.CREATE.S",
        r#"{"name":"S","subjects":["s"]}"#,
    )
    .await;
    assert!(created.get("error").is_none(), "{created}");
    let js = jetstream::new(c.clone());
    let (mut acked, mut refused) = (0, None);
    for _ in 0..20 {
        match js.publish("s", vec![b'x'; 600].into()).await.unwrap().await {
            Ok(_) => acked += 1,
            Err(e) => {
                refused = Some(e.to_string());
                break;
            }
        }
    }
    let refused = refused.expect("a publish past 4KB is refused");
    assert!(refused.contains("10002"), "{refused}");
    assert!(acked > 0);
    common::wait_messages(&c, "S", acked, std::time::Duration::from_secs(5)).await;
}

/// What a config of JetStream in accounts may not say.
#[test]
fn configs_flotilla_cannot_honour_are_refused() {
    if common::reference_server() {
        return;
    }
    for (config, says) in [
        (
            "jetstream: enabled\naccounts { A { users: [{user: a}] } }\n",
            "no account enables it",
        ),
        (
            "jetstream { domain: \"a.b\" }\n",
            "invalid domain name: may not contain ., * or >",
        ),
        (
            "jetstream: enabled\naccounts { A { jetstream: { max_file: \"x\" } } }\n",
            "expected an integer",
        ),
    ] {
        let out = common::refused_config(config);
        assert!(out.contains(says), "{config}: {out}");
    }
}

/// A, B and D each have JetStream, B with one stream at most, D with
/// one consumer; C has none.
const TENANTS: &str = r#"
jetstream: enabled
accounts {
  A { users: [{ user: "a", password: "p" }], jetstream: enabled }
  B { users: [{ user: "b", password: "p" }], jetstream { max_streams: 1 } }
  C { users: [{ user: "c", password: "p" }] }
  D { users: [{ user: "d", password: "p" }], jetstream { max_consumers: 1 } }
}
"#;

/// Every account whose block enables JetStream has its own: its own
/// stream names and subjects, its own limits and usage, its own place
/// on disk, kept across a restart. An account without JetStream is
/// answered "not enabled" (10039) in each request's response kind, as
/// nats-server answers it, and a direct get there finds no one. Every
/// mode: a cluster's meta group holds every account's streams.
#[tokio::test]
async fn each_account_has_its_own_jetstream() {
    let mut s = common::js_server_configured(TENANTS);
    let create = r#"{"name":"S","subjects":["s.>"]}"#;
    let (a, b) = (s.client_as("a", "p").await, s.client_as("b", "p").await);
    let d = s.client_as("d", "p").await;
    for c in [&a, &b, &d] {
        let created = api(c, "$JS.API.STREAM.CREATE.S", create).await;
        assert_eq!(created["did_create"], true, "{created}");
    }
    // D's consumer limit is D's alone.
    for (c, name, refused) in [(&d, "C1", false), (&d, "C2", true), (&a, "C2", false)] {
        let body = format!(r#"{{"stream_name":"S","config":{{"durable_name":"{name}"}}}}"#);
        let subject = format!("$JS.API.CONSUMER.CREATE.S.{name}");
        let answer = api(c, &subject, &body).await;
        assert_eq!(
            answer["error"]["err_code"] == 10026,
            refused,
            "{name}: {answer}"
        );
    }
    let second = api(&b, "$JS.API.STREAM.CREATE.T", r#"{"name":"T"}"#).await;
    assert_eq!(
        api_err(&second),
        (400, 10027, "maximum number of streams reached".into())
    );
    for (c, n) in [(&a, 3), (&b, 1)] {
        let js = jetstream::new(c.clone());
        for i in 1..=n {
            let ack = js.publish("s.x", "m".into()).await.unwrap().await.unwrap();
            assert_eq!((ack.stream.as_str(), ack.sequence), ("S", i));
        }
    }
    let jsz = s.json("/jsz?accounts=true");
    assert_eq!(jsz["total"], 3, "{jsz}");
    if !common::clustered() {
        // A cluster's server counts the replicas it holds.
        let counts = (jsz["streams"].clone(), jsz["messages"].clone());
        assert_eq!(counts, (json!(3), json!(4)), "{jsz}");
    }
    let names: Vec<_> = jsz["account_details"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["name"].clone())
        .collect();
    assert_eq!(names, [json!("A"), json!("B"), json!("D")]);
    let only_b = s.json("/jsz?acc=B");
    assert_eq!(only_b["account_details"][0]["name"], "B", "{only_b}");
    assert_eq!(only_b["account_details"].as_array().unwrap().len(), 1);
    let c = s.client_as("c", "p").await;
    for (subject, body, kind) in [
        ("$JS.API.INFO", "", "account_info_response"),
        ("$JS.API.STREAM.CREATE.S", create, "stream_create_response"),
        ("$JS.API.STREAM.NAMES", "", "stream_names_response"),
        (
            "$JS.API.STREAM.MSG.GET.S",
            r#"{"seq":1}"#,
            "stream_msg_get_response",
        ),
    ] {
        let reply = api(&c, subject, body).await;
        assert_eq!(reply["type"], format!("io.nats.jetstream.api.v1.{kind}"));
        assert_eq!(
            api_err(&reply),
            (503, 10039, "JetStream not enabled for account".into()),
            "{subject}"
        );
    }
    let names = api(&c, "$JS.API.STREAM.NAMES", "").await;
    assert_eq!(
        (names["total"].clone(), names["streams"].clone()),
        (json!(0), json!(null))
    );
    let direct = c
        .request("$JS.API.DIRECT.GET.S", r#"{"seq":1}"#.into())
        .await;
    assert!(
        matches!(&direct, Err(e) if e.kind() == async_nats::RequestErrorKind::NoResponders),
        "{direct:?}"
    );
    s.kill9();
    s.restart();
    for (user, n) in [("a", 3), ("b", 1)] {
        let c = s.client_as(user, "p").await;
        let info = api(&c, "$JS.API.STREAM.INFO.S", "").await;
        assert_eq!(info["state"]["messages"], n, "{user}: {info}");
    }
}

/// nats-server's config for sourcing across accounts
/// (`TestJetStreamFlowControlCrossAccountFanOut`): A and B export their
/// consumer API, a deliver prefix and flow control; SOURCER imports
/// them, each API under a prefix of its own.
const CROSS: &str = r#"
jetstream: enabled
accounts {
  ACCT_A {
    jetstream: enabled
    users: [{ user: usrA, password: pwd }]
    exports: [
      { service: "$JS.API.CONSUMER.>" }
      { stream: "RI.DELIVER.A.>" }
      { service: "$JS.FC.>" }
    ]
  }
  ACCT_B {
    jetstream: enabled
    users: [{ user: usrB, password: pwd }]
    exports: [
      { service: "$JS.API.CONSUMER.>" }
      { stream: "RI.DELIVER.B.>" }
      { service: "$JS.FC.>" }
    ]
  }
  SOURCER {
    jetstream: enabled
    users: [{ user: src, password: pwd }]
    imports: [
      { service: { account: ACCT_A, subject: "$JS.API.CONSUMER.>" }, to: "RI.JS.A.API.CONSUMER.>" }
      { stream: { account: ACCT_A, subject: "RI.DELIVER.A.>" } }
      { service: { account: ACCT_A, subject: "$JS.FC.>" } }
      { service: { account: ACCT_B, subject: "$JS.API.CONSUMER.>" }, to: "RI.JS.B.API.CONSUMER.>" }
      { stream: { account: ACCT_B, subject: "RI.DELIVER.B.>" } }
      { service: { account: ACCT_B, subject: "$JS.FC.>" } }
    ]
  }
  SOURCER2 {
    jetstream: enabled
    users: [{ user: src2, password: pwd }]
    imports: [
      { service: { account: ACCT_A, subject: "$JS.API.CONSUMER.>" }, to: "RI.JS.A.API.CONSUMER.>" }
      { stream: { account: ACCT_A, subject: "RI.DELIVER.A.>" } }
      { service: { account: ACCT_A, subject: "$JS.FC.>" } }
    ]
  }
}
"#;

/// A stream sources the streams of two other accounts through
/// `external { api, deliver }`, as nats-server users share streams:
/// every message of both arrives, enough of them for flow control to go
/// round, and what is published later follows. A stream of the same name
/// in a third account sources one of them alongside, on its own. The
/// origins stay their accounts' own: SOURCER's API does not know them.
/// Every mode.
#[tokio::test]
async fn a_stream_sources_other_accounts_through_external() {
    let s = common::js_server_configured(CROSS);
    let replicas = common::replicas();
    let payload = vec![b'X'; 64 * 1024];
    let mut origins = Vec::new();
    for (user, subject) in [("usrA", "A"), ("usrB", "B")] {
        let c = s.client_as(user, "pwd").await;
        let cfg = json!({"name": "TEST", "subjects": [subject], "num_replicas": replicas});
        let created = api(&c, "$JS.API.STREAM.CREATE.TEST", &cfg.to_string()).await;
        assert_eq!(created["did_create"], true, "{created}");
        let js = jetstream::new(c.clone());
        for _ in 0..20 {
            js.publish(subject, payload.clone().into())
                .await
                .unwrap()
                .await
                .unwrap();
        }
        origins.push(js);
    }
    let src = s.client_as("src", "pwd").await;
    let external = |account: &str| {
        json!({"name": "TEST", "external": {
            "api": format!("RI.JS.{account}.API"),
            "deliver": format!("RI.DELIVER.{account}"),
        }})
    };
    let cfg = json!({
        "name": "DEST", "num_replicas": replicas,
        "sources": [external("A"), external("B")],
    });
    let created = api(&src, "$JS.API.STREAM.CREATE.DEST", &cfg.to_string()).await;
    assert!(created.get("error").is_none(), "{created}");
    let src2 = s.client_as("src2", "pwd").await;
    let cfg2 = json!({"name": "DEST", "num_replicas": replicas, "sources": [external("A")]});
    let created = api(&src2, "$JS.API.STREAM.CREATE.DEST", &cfg2.to_string()).await;
    assert!(created.get("error").is_none(), "{created}");
    let messages = |src: &async_nats::Client, want: u64| {
        let src = src.clone();
        async move {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
            loop {
                let info = api(&src, "$JS.API.STREAM.INFO.DEST", "").await;
                let have = info["state"]["messages"].as_u64().unwrap_or(0);
                if have == want {
                    return info;
                }
                assert!(
                    have < want && std::time::Instant::now() < deadline,
                    "{have} of {want}: {info}"
                );
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
        }
    };
    messages(&src, 40).await;
    messages(&src2, 20).await;
    for (js, subject) in origins.iter().zip(["A", "B"]) {
        for _ in 0..5 {
            js.publish(subject, "later".into())
                .await
                .unwrap()
                .await
                .unwrap();
        }
    }
    let info = messages(&src, 50).await;
    messages(&src2, 25).await;
    let subjects = api(
        &src,
        "$JS.API.STREAM.INFO.DEST",
        r#"{"subjects_filter":">"}"#,
    )
    .await;
    assert_eq!(
        subjects["state"]["subjects"],
        json!({"A": 25, "B": 25}),
        "{info}"
    );
    let mut externals: Vec<String> = info["sources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["external"].to_string())
        .collect();
    externals.sort();
    assert_eq!(
        externals,
        [
            json!({"api": "RI.JS.A.API", "deliver": "RI.DELIVER.A"}).to_string(),
            json!({"api": "RI.JS.B.API", "deliver": "RI.DELIVER.B"}).to_string(),
        ],
        "{info}"
    );
    let theirs = api(&src, "$JS.API.STREAM.INFO.TEST", "").await;
    assert_eq!(theirs["error"]["err_code"], 10059, "{theirs}");
}

/// An account that imports everything another exports as a stream
/// (`>`) hears that account's messages, never its JetStream API: the
/// exporter's requests are answered by the exporter's JetStream alone,
/// and make nothing in the importer's. Every mode.
#[tokio::test]
async fn a_stream_import_of_everything_leaves_the_api_alone() {
    let config = r#"
jetstream: enabled
accounts {
  A { jetstream: enabled, users: [{ user: a, password: p }], exports: [{ stream: ">" }] }
  B {
    jetstream: enabled
    users: [{ user: b, password: p }]
    imports: [{ stream: { account: A, subject: ">" } }]
  }
}
"#;
    let s = common::js_server_configured(config);
    let (a, b) = (s.client_as("a", "p").await, s.client_as("b", "p").await);
    let mut heard = b.subscribe("orders.>").await.unwrap();
    b.flush().await.unwrap();
    let cfg = json!({"name": "S", "subjects": ["s.>"], "num_replicas": common::replicas()});
    let created = api(&a, "$JS.API.STREAM.CREATE.S", &cfg.to_string()).await;
    assert_eq!(created["did_create"], true, "{created}");
    a.publish("orders.new", "o".into()).await.unwrap();
    a.flush().await.unwrap();
    let m = tokio::time::timeout(std::time::Duration::from_secs(5), heard.next())
        .await
        .expect("the import carries A's messages")
        .unwrap();
    assert_eq!(m.subject.as_str(), "orders.new");
    let names = api(&b, "$JS.API.STREAM.NAMES", "").await;
    assert_eq!(names["total"], 0, "{names}");
    let names = api(&a, "$JS.API.STREAM.NAMES", "").await;
    assert_eq!(names["streams"], json!(["S"]), "{names}");
}

/// A client of another account pulls from a stream's consumer through
/// imports, as nats-server users share a work queue: the pull's
/// messages come back through a `stream` response import, and its acks
/// go back through an import of the consumer's ack subjects. Every
/// mode.
#[tokio::test]
async fn a_consumer_is_pulled_and_acked_from_another_account() {
    let config = r#"
jetstream: enabled
accounts {
  A {
    jetstream: enabled
    users: [{ user: a, password: p }]
    exports: [
      { service: "$JS.API.CONSUMER.MSG.NEXT.ORDERS.C", response_type: stream }
      { service: "$JS.ACK.ORDERS.C.>" }
    ]
  }
  B {
    users: [{ user: b, password: p }]
    imports: [
      { service: { account: A, subject: "$JS.API.CONSUMER.MSG.NEXT.ORDERS.C" }, to: "orders.next" }
      { service: { account: A, subject: "$JS.ACK.ORDERS.C.>" } }
    ]
  }
}
"#;
    let s = common::js_server_configured(config);
    let (a, b) = (s.client_as("a", "p").await, s.client_as("b", "p").await);
    let cfg =
        json!({"name": "ORDERS", "subjects": ["orders.>"], "num_replicas": common::replicas()});
    let created = api(&a, "$JS.API.STREAM.CREATE.ORDERS", &cfg.to_string()).await;
    assert_eq!(created["did_create"], true, "{created}");
    let consumer =
        json!({"stream_name": "ORDERS", "config": {"durable_name": "C", "ack_policy": "explicit"}});
    let made = api(
        &a,
        "$JS.API.CONSUMER.CREATE.ORDERS.C",
        &consumer.to_string(),
    )
    .await;
    assert!(made.get("error").is_none(), "{made}");
    let js = jetstream::new(a.clone());
    for i in 0..3 {
        js.publish(format!("orders.{i}"), "o".into())
            .await
            .unwrap()
            .await
            .unwrap();
    }
    let inbox = b.new_inbox();
    let mut delivered = b.subscribe(inbox.clone()).await.unwrap();
    b.publish_with_reply(
        "orders.next",
        inbox,
        r#"{"batch":3,"expires":5000000000}"#.into(),
    )
    .await
    .unwrap();
    for i in 0..3 {
        let m = tokio::time::timeout(std::time::Duration::from_secs(5), delivered.next())
            .await
            .expect("a message through the import")
            .unwrap();
        assert_eq!(m.subject.as_str(), format!("orders.{i}"));
        let ack = m.reply.expect("an ack subject");
        assert!(ack.starts_with("$JS.ACK.ORDERS.C."), "{ack}");
        b.request(ack.to_string(), "+ACK".into()).await.ok();
    }
    b.flush().await.unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let info = api(&a, "$JS.API.CONSUMER.INFO.ORDERS.C", "").await;
        if info["ack_floor"]["stream_seq"] == 3 && info["num_ack_pending"] == 0 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "acks lost: {info}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// A stream captures what its account imports, as nats-server's stream
/// subscriptions take stream imports: A's messages on `orders.>` reach
/// B's stream on `fromA.>` under B's subject, and A's own stream on the
/// same subjects keeps its own copy. Every mode.
#[tokio::test]
async fn a_stream_captures_what_its_account_imports() {
    let config = r#"
jetstream: enabled
accounts {
  A { jetstream: enabled, users: [{ user: a, password: p }], exports: [{ stream: "orders.>" }] }
  B {
    jetstream: enabled
    users: [{ user: b, password: p }]
    imports: [{ stream: { account: A, subject: "orders.>" }, prefix: "fromA" }]
  }
}
"#;
    let s = common::js_server_configured(config);
    let (a, b) = (s.client_as("a", "p").await, s.client_as("b", "p").await);
    let replicas = common::replicas();
    for (c, subjects) in [(&a, "orders.>"), (&b, "fromA.>")] {
        let cfg = json!({"name": "IN", "subjects": [subjects], "num_replicas": replicas});
        let created = api(c, "$JS.API.STREAM.CREATE.IN", &cfg.to_string()).await;
        assert_eq!(created["did_create"], true, "{created}");
    }
    // Interest crosses routes a moment after the stream subscribes.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    for n in 1..=3 {
        a.publish(format!("orders.{n}"), "o".into()).await.unwrap();
    }
    a.flush().await.unwrap();
    for c in [&a, &b] {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let info = api(c, "$JS.API.STREAM.INFO.IN", "").await;
            if info["state"]["messages"] == 3 {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "{info}");
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }
    let got = api(&b, "$JS.API.STREAM.MSG.GET.IN", r#"{"seq":1}"#).await;
    assert_eq!(got["message"]["subject"], "fromA.orders.1", "{got}");
    let got = api(&a, "$JS.API.STREAM.MSG.GET.IN", r#"{"seq":1}"#).await;
    assert_eq!(got["message"]["subject"], "orders.1", "{got}");
}
