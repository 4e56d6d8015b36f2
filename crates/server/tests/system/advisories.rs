//! JetStream's advisories and metrics (issue 37), as nats-server
//! publishes them in the account that owns the stream: stream and
//! consumer actions, a consumer's NAKs, TERMs, exhausted deliveries and
//! sampled acks, and the audit of every API answer. One server or a
//! cluster (`FLOTILLA_TEST_JS`); nats-server with `FLOTILLA_TEST_SERVER`.

#[path = "../common/mod.rs"]
mod common;

use std::time::Duration;

use futures::StreamExt;
use serde_json::{json, Value};

/// The next event on `sub` whose subject passes `keep`, as JSON.
async fn next_event(
    sub: &mut async_nats::Subscriber,
    keep: impl Fn(&str) -> bool,
) -> (String, Value) {
    loop {
        let m = tokio::time::timeout(Duration::from_secs(10), sub.next())
            .await
            .expect("an event in time")
            .expect("subscription open");
        if keep(&m.subject) {
            let v: Value = serde_json::from_slice(&m.payload).expect("events are JSON");
            return (m.subject.to_string(), v);
        }
    }
}

/// Publishes `body` to `subject` with `reply` (a pull request whose
/// deliveries come to a subscription of the test's).
async fn ask(c: &async_nats::Client, subject: &str, reply: &str, body: &str) {
    c.publish_with_reply(
        subject.to_string(),
        reply.to_string(),
        body.to_string().into(),
    )
    .await
    .unwrap();
}

/// Every event carries nats-server's head: its type, a NUID and a UTC
/// time; the fields `want` names have `want`'s values.
fn check_event(subject: &str, got: &Value, kind: &str, want: &Value) {
    assert_eq!(got["type"], kind, "{subject}: {got}");
    assert_eq!(
        got["id"].as_str().map(str::len),
        Some(22),
        "{subject}: {got}"
    );
    assert!(common::is_timestamp(&got["timestamp"]), "{subject}: {got}");
    for (k, v) in want.as_object().unwrap() {
        assert_eq!(&got[k], v, "{subject} field {k}: {got}");
    }
}

const ADVISORY: &str = "io.nats.jetstream.advisory.v1.";

fn is_action(subject: &str) -> bool {
    ["CREATED", "UPDATED", "DELETED"]
        .iter()
        .any(|a| subject.contains(&format!(".{a}.")))
}

/// What a consumer tells of its deliveries (not of its leaders).
fn is_delivery(subject: &str) -> bool {
    ["METRIC.CONSUMER.ACK.", ".MSG_", ".MAX_DELIVERIES."]
        .iter()
        .any(|k| subject.contains(k))
}

/// Creating, updating and deleting a stream and a consumer is told on
/// `$JS.EVENT.ADVISORY.{STREAM,CONSUMER}.<ACTION>...`, one event each;
/// deleting the stream tells of its consumer first.
#[tokio::test]
async fn stream_and_consumer_actions_are_told() {
    let s = common::js_server();
    let c = s.client().await;
    let mut sub = c.subscribe("$JS.EVENT.ADVISORY.>").await.unwrap();
    common::sync(&c).await;
    common::create_stream(&c, "ADV", json!({"name": "ADV", "subjects": ["adv.>"]})).await;
    let r = common::api(
        &c,
        "$JS.API.STREAM.UPDATE.ADV",
        &json!({"name": "ADV", "subjects": ["adv.>"], "max_msgs": 10}).to_string(),
    )
    .await;
    assert!(r.get("error").is_none(), "{r}");
    for name in ["D1", "D2"] {
        let body = json!({"stream_name": "ADV", "config": {"durable_name": name, "ack_policy": "explicit"}});
        let r = common::api(
            &c,
            &format!("$JS.API.CONSUMER.CREATE.ADV.{name}"),
            &body.to_string(),
        )
        .await;
        assert!(r.get("error").is_none(), "{r}");
    }
    let r = common::api(&c, "$JS.API.CONSUMER.DELETE.ADV.D1", "").await;
    assert_eq!(r["success"], true, "{r}");
    let r = common::api(&c, "$JS.API.STREAM.DELETE.ADV", "").await;
    assert_eq!(r["success"], true, "{r}");

    let stream = |action: &str| {
        (
            format!("{ADVISORY}stream_action"),
            json!({"stream": "ADV", "action": action}),
        )
    };
    let consumer = |name: &str, action: &str| {
        let want = json!({"stream": "ADV", "consumer": name, "action": action});
        (format!("{ADVISORY}consumer_action"), want)
    };
    let expected = [
        ("$JS.EVENT.ADVISORY.STREAM.CREATED.ADV", stream("create")),
        ("$JS.EVENT.ADVISORY.STREAM.UPDATED.ADV", stream("modify")),
        (
            "$JS.EVENT.ADVISORY.CONSUMER.CREATED.ADV.D1",
            consumer("D1", "create"),
        ),
        (
            "$JS.EVENT.ADVISORY.CONSUMER.CREATED.ADV.D2",
            consumer("D2", "create"),
        ),
        (
            "$JS.EVENT.ADVISORY.CONSUMER.DELETED.ADV.D1",
            consumer("D1", "delete"),
        ),
        (
            "$JS.EVENT.ADVISORY.CONSUMER.DELETED.ADV.D2",
            consumer("D2", "delete"),
        ),
        ("$JS.EVENT.ADVISORY.STREAM.DELETED.ADV", stream("delete")),
    ];
    // A cluster's stream leader may stop before it tells of the consumers
    // a stream's deletion takes with it.
    let told = |s: &str| is_action(s) && !(common::clustered() && s.ends_with(".DELETED.ADV.D2"));
    for (subject, (kind, want)) in expected {
        if !told(subject) {
            continue;
        }
        let (got_subject, got) = next_event(&mut sub, told).await;
        assert_eq!(got_subject, subject, "{got}");
        check_event(subject, &got, &kind, &want);
        assert!(got.get("domain").is_none(), "no domain configured: {got}");
    }
}

/// A pull consumer's deliveries: a NAK, a TERM with its reason, an ack
/// sampled at `sample_freq` 100%, and a message that ran out of
/// deliveries, each told once with the sequences of its ack subject.
#[tokio::test]
async fn a_consumers_deliveries_are_told() {
    let s = common::js_server();
    let c = s.client().await;
    common::create_stream(&c, "DLV", json!({"name": "DLV", "subjects": ["dlv"]})).await;
    let body = json!({"stream_name": "DLV", "config": {
        "durable_name": "C", "ack_policy": "explicit", "max_deliver": 2,
        "ack_wait": 500_000_000u64, "sample_freq": "100%"}});
    let r = common::api(&c, "$JS.API.CONSUMER.CREATE.DLV.C", &body.to_string()).await;
    assert!(r.get("error").is_none(), "{r}");
    let mut events = c.subscribe("$JS.EVENT.>").await.unwrap();
    for i in 1..=3 {
        common::js_publish_text(&c, "dlv", &[], format!("m{i}").as_bytes()).await;
    }
    let inbox = c.new_inbox();
    let mut msgs = c.subscribe(inbox.clone()).await.unwrap();
    common::sync(&c).await;
    let pull = json!({"batch": 3, "expires": 2_000_000_000u64}).to_string();
    ask(&c, "$JS.API.CONSUMER.MSG.NEXT.DLV.C", &inbox, &pull).await;
    let mut acks = Vec::new();
    while acks.len() < 3 {
        let m = tokio::time::timeout(Duration::from_secs(5), msgs.next())
            .await
            .expect("a delivery")
            .unwrap();
        if let Some(reply) = m.reply {
            acks.push(reply.to_string());
        }
    }
    // `$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<dseq>...`
    let ack = |reply: &str, body: &'static str| {
        let c = c.clone();
        let reply = reply.to_string();
        async move {
            c.publish(reply, body.into()).await.unwrap();
            c.flush().await.unwrap();
        }
    };
    ack(&acks[0], "+ACK").await;
    ack(&acks[1], "+TERM no good").await;
    ack(&acks[2], "-NAK").await;
    let delivery = |sseq: u64, deliveries: u64| json!({"stream": "DLV", "consumer": "C", "consumer_seq": sseq, "stream_seq": sseq, "deliveries": deliveries});
    let (subject, got) = next_event(&mut events, is_delivery).await;
    assert_eq!(subject, "$JS.EVENT.METRIC.CONSUMER.ACK.DLV.C");
    check_event(
        &subject,
        &got,
        "io.nats.jetstream.metric.v1.consumer_ack",
        &delivery(1, 1),
    );
    assert!(got["ack_time"].as_i64().is_some_and(|t| t > 0), "{got}");
    let (subject, got) = next_event(&mut events, is_delivery).await;
    assert_eq!(subject, "$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.DLV.C");
    let mut want = delivery(2, 1);
    want["reason"] = "no good".into();
    check_event(&subject, &got, &format!("{ADVISORY}terminated"), &want);
    let (subject, got) = next_event(&mut events, is_delivery).await;
    assert_eq!(subject, "$JS.EVENT.ADVISORY.CONSUMER.MSG_NAKED.DLV.C");
    check_event(&subject, &got, &format!("{ADVISORY}nak"), &delivery(3, 1));
    // The NAKed message comes again (its second and last delivery), is
    // left to time out, and is then given up: told once.
    ask(&c, "$JS.API.CONSUMER.MSG.NEXT.DLV.C", &inbox, &pull).await;
    let again = tokio::time::timeout(Duration::from_secs(5), msgs.next())
        .await
        .expect("a redelivery")
        .unwrap();
    assert_eq!(&again.payload[..], b"m3");
    ask(&c, "$JS.API.CONSUMER.MSG.NEXT.DLV.C", &inbox, &pull).await;
    let (subject, got) = next_event(&mut events, is_delivery).await;
    assert_eq!(subject, "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.DLV.C");
    let want = json!({"stream": "DLV", "consumer": "C", "stream_seq": 3, "deliveries": 2});
    check_event(&subject, &got, &format!("{ADVISORY}max_deliver"), &want);
    assert!(got.get("consumer_seq").is_none(), "{got}");
    let more = tokio::time::timeout(Duration::from_millis(1500), async {
        next_event(&mut events, |s| s.contains("MAX_DELIVERIES")).await
    })
    .await;
    assert!(more.is_err(), "told twice: {more:?}");
}

/// Every API answer is audited on `$JS.EVENT.ADVISORY.API` in the
/// requester's account: the subject, the request's body and the answer
/// as sent, by the server that answered.
#[tokio::test]
async fn api_answers_are_audited() {
    let s = common::js_server();
    let c = s.client().await;
    let mut audits = c.subscribe("$JS.EVENT.ADVISORY.API").await.unwrap();
    common::sync(&c).await;
    let cases = [
        ("$JS.API.INFO", ""),
        ("$JS.API.STREAM.INFO.NOPE", ""),
        (
            "$JS.API.STREAM.CREATE.AUD",
            r#"{"name":"AUD","subjects":["aud"]}"#,
        ),
        ("$JS.API.STREAM.NAMES", r#"{"offset":0}"#),
    ];
    for (subject, body) in cases {
        let reply = c
            .request(subject.to_string(), body.to_string().into())
            .await
            .unwrap();
        let (_, got) = next_event(&mut audits, |_| true).await;
        check_event(
            subject,
            &got,
            &format!("{ADVISORY}api_audit"),
            &json!({"subject": subject}),
        );
        assert_eq!(
            got["response"].as_str().unwrap().as_bytes(),
            &reply.payload[..]
        );
        match body {
            "" => assert!(got.get("request").is_none(), "{got}"),
            // A cluster's create is audited by the leader that answers
            // it, from the assignment, without the request.
            _ if subject.contains(".CREATE.") && common::clustered() => {}
            _ => assert_eq!(got["request"], body, "{got}"),
        }
        assert!(
            got["server"].as_str().is_some_and(|s| !s.is_empty()),
            "{got}"
        );
        if !common::clustered() {
            // The requester, as nats-server's `Nats-Request-Info` tells
            // it (flotilla knows it only where the client connected).
            let client = &got["client"];
            assert_eq!(client["acc"], "$G", "{got}");
            assert_eq!(client["kind"], "Client", "{got}");
            assert_eq!(client["client_type"], "nats", "{got}");
            assert!(client["id"].as_u64().is_some_and(|id| id > 0), "{got}");
            assert!(client.get("jwt").is_none(), "{got}");
        }
    }
}

/// Published from every server until `sub` hears it: interest in the
/// subject has reached them all (the probe is left out of what follows).
async fn interest_everywhere(
    clients: &[async_nats::Client],
    subject: &str,
    sub: &mut async_nats::Subscriber,
) {
    for c in clients {
        loop {
            c.publish(subject.to_string(), "probe".into())
                .await
                .unwrap();
            c.flush().await.unwrap();
            let heard = tokio::time::timeout(Duration::from_millis(200), sub.next()).await;
            if matches!(heard, Ok(Some(m)) if &m.payload[..] == b"probe") {
                break;
            }
        }
    }
}

/// The next leader event on `sub`, probes left out.
async fn next_leader(sub: &mut async_nats::Subscriber, suffix: &str) -> Value {
    loop {
        let m = tokio::time::timeout(Duration::from_secs(10), sub.next())
            .await
            .unwrap_or_else(|_| panic!("no {suffix} in time"))
            .unwrap();
        if &m.payload[..] != b"probe" && m.subject.ends_with(suffix) {
            return serde_json::from_slice(&m.payload).unwrap();
        }
    }
}

fn check_replicas(got: &Value, names: &[String]) {
    let replicas = got["replicas"].as_array().expect("replicas listed");
    let mut listed: Vec<&str> = replicas
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    listed.sort();
    assert_eq!(listed, names, "{got}");
    let leader = replicas.iter().find(|r| r["name"] == got["leader"]);
    assert!(leader.is_some_and(|r| r["current"] == true), "{got}");
    for r in replicas {
        assert_eq!(r["peer"].as_str().map(str::len), Some(8), "{got}");
        assert!(r["active"].is_u64(), "{got}");
    }
}

/// A replicated stream's new leader (at creation, and after a step
/// down) and its consumer's first are told in the stream's account
/// without `account`, and in the system account with it; a new meta
/// leader in the system account, named by its node id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_leaders_are_told() {
    use common::replicated::{cluster_configured, connect, created};
    let all = cluster_configured(3, common::WITH_SYSTEM_USER);
    let clients = connect(&all).await;
    let sys = common::connect_as(&all[0].url(), "sys", "p").await;
    let mut names: Vec<String> = all
        .iter()
        .map(|s| s.json("/varz")["server_name"].as_str().unwrap().to_string())
        .collect();
    names.sort();
    let stream_subject = "$JS.EVENT.ADVISORY.STREAM.LEADER_ELECTED.LE";
    let consumer_subject = "$JS.EVENT.ADVISORY.CONSUMER.LEADER_ELECTED.LE.D";
    let mut mine = clients[0]
        .subscribe("$JS.EVENT.ADVISORY.*.LEADER_ELECTED.>")
        .await
        .unwrap();
    let mut system = sys.subscribe("$JS.EVENT.ADVISORY.>").await.unwrap();
    let sys_clients = [sys.clone()];
    interest_everywhere(&clients, stream_subject, &mut mine).await;
    interest_everywhere(&clients, consumer_subject, &mut mine).await;
    for subject in [
        stream_subject,
        consumer_subject,
        "$JS.EVENT.ADVISORY.DOMAIN.LEADER_ELECTED",
    ] {
        interest_everywhere(&sys_clients, subject, &mut system).await;
    }

    created(
        &clients[0],
        json!({"name": "LE", "subjects": ["le"], "num_replicas": 3}),
    )
    .await;
    let got = next_leader(&mut mine, ".LE").await;
    check_event(
        stream_subject,
        &got,
        &format!("{ADVISORY}stream_leader_elected"),
        &json!({"stream": "LE"}),
    );
    assert!(got.get("account").is_none(), "{got}");
    check_replicas(&got, &names);
    let first = got["leader"].as_str().unwrap().to_string();
    let got = next_leader(&mut system, ".LE").await;
    check_event(
        stream_subject,
        &got,
        &format!("{ADVISORY}stream_leader_elected"),
        &json!({"stream": "LE", "account": "$G", "leader": first}),
    );

    let body =
        json!({"stream_name": "LE", "config": {"durable_name": "D", "ack_policy": "explicit"}});
    let r = common::api(
        &clients[0],
        "$JS.API.CONSUMER.CREATE.LE.D",
        &body.to_string(),
    )
    .await;
    assert!(r.get("error").is_none(), "{r}");
    let got = next_leader(&mut mine, ".LE.D").await;
    let want = json!({"stream": "LE", "consumer": "D"});
    check_event(
        consumer_subject,
        &got,
        &format!("{ADVISORY}consumer_leader_elected"),
        &want,
    );
    check_replicas(&got, &names);
    let got = next_leader(&mut system, ".LE.D").await;
    assert_eq!(got["account"], "$G", "{got}");

    let r = common::api(&clients[0], "$JS.API.STREAM.LEADER.STEPDOWN.LE", "").await;
    assert_eq!(r["success"], true, "{r}");
    let got = next_leader(&mut mine, ".LE").await;
    assert_ne!(got["leader"], first.as_str(), "a new leader: {got}");
    check_replicas(&got, &names);

    let r = common::api(&sys, "$JS.API.META.LEADER.STEPDOWN", "").await;
    assert_eq!(r["success"], true, "{r}");
    let got = next_leader(&mut system, ".DOMAIN.LEADER_ELECTED").await;
    let kind = format!("{ADVISORY}domain_leader_elected");
    check_event("DOMAIN.LEADER_ELECTED", &got, &kind, &json!({}));
    assert_eq!(
        got["leader"].as_str().map(str::len),
        Some(8),
        "a node id: {got}"
    );
    assert!(
        got["cluster"].as_str().is_some_and(|c| !c.is_empty()),
        "{got}"
    );
    assert_eq!(got["replicas"].as_array().map(Vec::len), Some(3), "{got}");
}

/// Pausing and resuming a consumer is told with when the pause ends; a
/// `pinned_client` group's pin is told with its id, and an operator's
/// unpin with its reason.
#[tokio::test]
async fn pauses_and_pins_are_told() {
    let s = common::js_server();
    let c = s.client().await;
    common::create_stream(&c, "PP", json!({"name": "PP", "subjects": ["pp"]})).await;
    let consumers = [
        ("P", json!({"durable_name": "P", "ack_policy": "explicit"})),
        (
            "G",
            json!({"durable_name": "G", "ack_policy": "explicit",
                "priority_policy": "pinned_client", "priority_groups": ["g"],
                "priority_timeout": 60_000_000_000u64}),
        ),
    ];
    for (name, config) in consumers {
        let body = json!({"stream_name": "PP", "config": config}).to_string();
        let r = common::api(&c, &format!("$JS.API.CONSUMER.CREATE.PP.{name}"), &body).await;
        assert!(r.get("error").is_none(), "{r}");
    }
    let mut events = c.subscribe("$JS.EVENT.ADVISORY.CONSUMER.>").await.unwrap();
    common::sync(&c).await;
    let told = |s: &str| s.contains(".PAUSE.") || s.contains("PINNED.");
    let kind = |k: &str| format!("{ADVISORY}{k}");

    let until = "2030-01-02T03:04:05Z";
    let r = common::api(
        &c,
        "$JS.API.CONSUMER.PAUSE.PP.P",
        &json!({"pause_until": until}).to_string(),
    )
    .await;
    assert_eq!(r["paused"], true, "{r}");
    let (subject, got) = next_event(&mut events, told).await;
    assert_eq!(subject, "$JS.EVENT.ADVISORY.CONSUMER.PAUSE.PP.P");
    let want = json!({"stream": "PP", "consumer": "P", "paused": true, "pause_until": until});
    check_event(&subject, &got, &kind("consumer_pause"), &want);
    let r = common::api(&c, "$JS.API.CONSUMER.PAUSE.PP.P", "{}").await;
    assert_eq!(r["paused"], false, "{r}");
    // A clustered nats-server may tell the pause twice (R1 here).
    let (subject, got) = loop {
        let (subject, got) = next_event(&mut events, told).await;
        if got["paused"] == false {
            break (subject, got);
        }
    };
    let want = json!({"paused": false, "pause_until": "0001-01-01T00:00:00Z"});
    check_event(&subject, &got, &kind("consumer_pause"), &want);

    common::js_publish_text(&c, "pp", &[], b"one").await;
    let inbox = c.new_inbox();
    let mut msgs = c.subscribe(inbox.clone()).await.unwrap();
    common::sync(&c).await;
    let pull = json!({"batch": 1, "group": "g", "expires": 2_000_000_000u64}).to_string();
    ask(&c, "$JS.API.CONSUMER.MSG.NEXT.PP.G", &inbox, &pull).await;
    let m = tokio::time::timeout(Duration::from_secs(5), msgs.next())
        .await
        .expect("a delivery")
        .unwrap();
    let pin = common::header(&m, "Nats-Pin-Id")
        .expect("a pin id")
        .to_string();
    let (subject, got) = next_event(&mut events, told).await;
    assert_eq!(subject, "$JS.EVENT.ADVISORY.CONSUMER.PINNED.PP.G");
    let want =
        json!({"account": "$G", "stream": "PP", "consumer": "G", "group": "g", "pinned_id": pin});
    check_event(&subject, &got, &kind("consumer_group_pinned"), &want);
    let r = common::api(&c, "$JS.API.CONSUMER.UNPIN.PP.G", r#"{"group":"g"}"#).await;
    assert!(r.get("error").is_none(), "{r}");
    let (subject, got) = next_event(&mut events, told).await;
    assert_eq!(subject, "$JS.EVENT.ADVISORY.CONSUMER.UNPINNED.PP.G");
    let want =
        json!({"account": "$G", "stream": "PP", "consumer": "G", "group": "g", "reason": "admin"});
    check_event(&subject, &got, &kind("consumer_group_unpinned"), &want);
}
