//! What the everyday natscli commands send, sent as they send it, and
//! what they read from the answers, checked as they read it (issue 37).
//! Each step names its command; the wire facts are natscli's and
//! jsm.go's (`cli/server_*_command.go`, `serverdata/request.go`,
//! `monitor/*.go`): a `$SYS.REQ.SERVER.PING*` request gathers answers
//! until 300 ms pass after the last one (or as many as it expects),
//! JSZ and CONNZ asked with `Accept-Encoding: snappy`, JetStream API
//! answers checked against their schema's `type`.
//!
//! One server and a cluster of three; nats-server with
//! `FLOTILLA_TEST_SERVER`.

#[path = "../common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::{json, Value};

/// jsm.go's `DoReqAsync`: publishes `body` with `headers` and gathers
/// the answers, stopping after `expect` of them (if not 0), 300 ms after
/// the last, or 5 s after sending with none.
async fn scatter(
    c: &async_nats::Client,
    subject: &str,
    body: &str,
    snappy: bool,
    expect: usize,
) -> Vec<Value> {
    let inbox = c.new_inbox();
    let mut replies = c.subscribe(inbox.clone()).await.unwrap();
    // nats-server compresses its answer (S2) when asked to, which this
    // test cannot read; flotilla answers plainly either way, as natscli
    // allows.
    if snappy && !common::reference_server() {
        let mut headers = async_nats::HeaderMap::new();
        headers.insert("Accept-Encoding", "snappy");
        c.publish_with_reply_and_headers(
            subject.to_string(),
            inbox,
            headers,
            body.to_string().into(),
        )
        .await
        .unwrap();
    } else {
        c.publish_with_reply(subject.to_string(), inbox, body.to_string().into())
            .await
            .unwrap();
    }
    let mut out = Vec::new();
    let mut wait = Duration::from_secs(5);
    while let Ok(Some(m)) = tokio::time::timeout(wait, replies.next()).await {
        assert!(m.status.is_none(), "{subject}: a status answer: {m:?}");
        let headers = m.headers.as_ref();
        let encoding = headers.and_then(|h| h.get("Content-Encoding"));
        assert!(
            encoding.is_none(),
            "{subject}: compressed, which this test cannot read"
        );
        out.push(
            serde_json::from_slice(&m.payload).unwrap_or_else(|e| {
                panic!("{subject}: {e}: {}", String::from_utf8_lossy(&m.payload))
            }),
        );
        if expect > 0 && out.len() == expect {
            break;
        }
        wait = Duration::from_millis(300);
    }
    out
}

/// jsm.go's Manager request: a plain request; the answer must carry its
/// schema's `type`.
async fn js_api(c: &async_nats::Client, subject: &str, body: &str, kind: &str) -> Value {
    let m = c
        .request(subject.to_string(), body.to_string().into())
        .await
        .unwrap_or_else(|e| panic!("{subject}: {e}"));
    let v: Value = serde_json::from_slice(&m.payload).unwrap();
    assert_eq!(
        v["type"],
        format!("io.nats.jetstream.api.v1.{kind}"),
        "{subject}: {v}"
    );
    assert!(v.get("error").is_none(), "{subject}: {v}");
    v
}

fn is_uint(v: &Value) -> bool {
    v.is_u64()
}

/// A server under test, the system user's client and an account user's.
struct Setup {
    servers: Vec<common::Server>,
    sys: async_nats::Client,
    user: async_nats::Client,
    names: Vec<String>,
}

async fn setup(n: usize) -> Setup {
    let servers = match n {
        1 => vec![common::server()
            .js()
            .config(common::WITH_SYSTEM_USER)
            .start()],
        _ => common::replicated::cluster_configured(n, common::WITH_SYSTEM_USER),
    };
    let sys = common::connect_as(&servers[0].url(), "sys", "p").await;
    let user = common::connect_as(&servers[0].url(), "anon", "p").await;
    common::replicated::api_ready(std::slice::from_ref(&user)).await;
    let mut names: Vec<String> = servers
        .iter()
        .map(|s| s.json("/varz")["server_name"].as_str().unwrap().to_string())
        .collect();
    names.sort();
    Setup {
        servers,
        sys,
        user,
        names,
    }
}

/// `nats server list`: `$SYS.REQ.SERVER.PING` with `{}`, each answer a
/// `ServerStatsMsg`.
async fn server_list(s: &Setup) {
    let answers = scatter(&s.sys, "$SYS.REQ.SERVER.PING", "{}", false, 0).await;
    let mut names: Vec<String> = answers
        .iter()
        .map(|a| a["server"]["name"].as_str().unwrap().to_string())
        .collect();
    names.sort();
    assert_eq!(names, s.names, "every server answers once");
    for a in &answers {
        let (server, stats) = (&a["server"], &a["statsz"]);
        assert!(
            server["host"].is_string() && server["ver"].is_string(),
            "{a}"
        );
        assert!(server["jetstream"].is_boolean(), "{a}");
        assert!(
            common::is_timestamp(&server["time"]) && common::is_timestamp(&stats["start"]),
            "{a}"
        );
        for k in [
            "mem",
            "cores",
            "connections",
            "subscriptions",
            "slow_consumers",
        ] {
            assert!(is_uint(&stats[k]), "statsz.{k}: {a}");
        }
        assert!(stats["cpu"].is_number(), "{a}");
        // Grouped by cluster: every node of one lists as many routes.
        let routes = stats["routes"].as_array().map_or(0, Vec::len);
        let peers = s.servers.len() - 1;
        assert!(routes >= peers, "{peers} peers routed: {a}");
        if peers > 0 {
            assert!(server["cluster"].is_string(), "{a}");
        }
    }
}

/// `nats server report jetstream`: `PING.JSZ` with
/// `{"raft":true,"exact_match":true}`; every answer has `server` and
/// `data`, and one of them is the meta leader's.
async fn report_jetstream(s: &Setup) {
    let body = r#"{"raft":true,"exact_match":true}"#;
    let answers = scatter(&s.sys, "$SYS.REQ.SERVER.PING.JSZ", body, true, 0).await;
    assert_eq!(answers.len(), s.servers.len(), "{answers:?}");
    for a in &answers {
        let data = &a["data"];
        assert!(a["server"].is_object() && data.is_object(), "{a}");
        for k in [
            "streams",
            "consumers",
            "messages",
            "bytes",
            "memory",
            "storage",
        ] {
            assert!(is_uint(&data[k]), "data.{k}: {a}");
        }
        assert!(is_uint(&data["api"]["total"]), "{a}");
    }
    if s.servers.len() == 1 {
        return;
    }
    let leader = answers
        .iter()
        .find(|a| a["server"]["name"] == a["data"]["meta_cluster"]["leader"])
        .expect("a meta leader among the answers");
    let meta = &leader["data"]["meta_cluster"];
    assert_eq!(meta["cluster_size"], s.servers.len(), "{meta}");
    assert!(is_uint(&meta["pending"]), "{meta}");
    let replicas = meta["replicas"]
        .as_array()
        .expect("the leader lists its peers");
    assert_eq!(replicas.len(), s.servers.len() - 1, "{meta}");
    for r in replicas {
        assert!(r["name"].is_string() && r["current"].is_boolean(), "{r}");
        assert!(is_uint(&r["active"]) && r["peer"].is_string(), "{r}");
    }
}

/// `nats server report connections`: the active server count from a
/// `PING`, then `PING.CONNZ` with natscli's full options, as many answers
/// as servers; every connection has a kind.
async fn report_connections(s: &Setup) {
    let first = scatter(&s.sys, "$SYS.REQ.SERVER.PING", "{}", false, 1).await;
    let expect = first[0]["statsz"]["active_servers"].as_u64().unwrap_or(0) as usize;
    assert_eq!(expect, s.servers.len(), "{}", first[0]);
    let body = json!({"sort": "", "auth": true, "subscriptions": true,
        "subscriptions_detail": false, "offset": 0, "limit": 1024, "cid": 0,
        "mqtt_client": "", "state": 0, "user": "", "acc": "", "filter_subject": "",
        "exact_match": true});
    let answers = scatter(
        &s.sys,
        "$SYS.REQ.SERVER.PING.CONNZ",
        &body.to_string(),
        true,
        expect,
    )
    .await;
    assert_eq!(answers.len(), expect, "{answers:?}");
    let mut accounts = Vec::new();
    for a in &answers {
        assert!(a.get("error").is_none_or(Value::is_null), "{a}");
        let data = &a["data"];
        for k in ["offset", "limit", "total"] {
            assert!(is_uint(&data[k]), "{a}");
        }
        for c in data["connections"].as_array().expect("connections") {
            assert!(c["kind"].as_str().is_some_and(|k| !k.is_empty()), "{c}");
            for k in [
                "cid",
                "port",
                "in_msgs",
                "out_msgs",
                "in_bytes",
                "out_bytes",
                "subscriptions",
            ] {
                assert!(is_uint(&c[k]), "{k}: {c}");
            }
            assert!(c["ip"].is_string() && c["uptime"].is_string(), "{c}");
            assert!(common::is_timestamp(&c["start"]), "{c}");
            accounts.push(c["account"].as_str().unwrap_or("").to_string());
        }
    }
    // `auth: true` tells whose each connection is (the global account
    // unnamed, as nats-server leaves it).
    accounts.sort();
    assert_eq!(accounts, ["", "SYS"], "the user's and the system's");
}

/// `nats server check jetstream`: `$JS.API.INFO`, then `STREAM.LIST`
/// pages from `{"offset":0}`; every replicated stream has a leader, its
/// other replicas listed, online, seen within 5 s and lagging at most
/// 200.
async fn check_jetstream(s: &Setup) {
    let info = js_api(&s.user, "$JS.API.INFO", "", "account_info_response").await;
    for k in ["memory", "storage", "streams", "consumers"] {
        assert!(is_uint(&info[k]), "{k}: {info}");
    }
    for k in ["max_memory", "max_storage", "max_streams", "max_consumers"] {
        assert!(info["limits"][k].is_i64(), "limits.{k}: {info}");
    }
    let list = js_api(
        &s.user,
        "$JS.API.STREAM.LIST",
        r#"{"offset":0}"#,
        "stream_list_response",
    )
    .await;
    let streams = list["streams"].as_array().expect("streams");
    assert_eq!(list["total"], streams.len(), "{list}");
    assert!(list["limit"].as_u64().is_some_and(|l| l > 0), "{list}");
    assert!(!streams.is_empty());
    for st in streams {
        let replicas = st["config"]["num_replicas"].as_u64().unwrap();
        if replicas == 1 {
            continue;
        }
        let cluster = &st["cluster"];
        assert!(
            cluster["leader"].as_str().is_some_and(|l| !l.is_empty()),
            "{st}"
        );
        let others = cluster["replicas"].as_array().expect("replicas");
        assert_eq!(others.len() as u64, replicas - 1, "{cluster}");
        for r in others {
            assert_ne!(r["offline"], true, "{r}");
            assert!(
                r["active"].as_u64().is_some_and(|a| a <= 5_000_000_000),
                "{r}"
            );
            assert!(r["lag"].as_u64().unwrap_or(0) <= 200, "{r}");
        }
    }
}

/// `nats server check meta`: `PING.JSZ` with `{"leader_only":true}`,
/// answered by the meta leader alone, naming all its peers current.
async fn check_meta(s: &Setup) {
    let answers = scatter(
        &s.sys,
        "$SYS.REQ.SERVER.PING.JSZ",
        r#"{"leader_only":true}"#,
        true,
        0,
    )
    .await;
    assert_eq!(answers.len(), 1, "only the leader answers: {answers:?}");
    if s.servers.len() == 1 {
        return;
    }
    let meta = &answers[0]["data"]["meta_cluster"];
    assert_eq!(meta["leader"], answers[0]["server"]["name"], "{meta}");
    // Over HTTP, a follower refuses the same filter.
    let mut codes: Vec<u16> = s
        .servers
        .iter()
        .map(|x| x.http("/jsz?leader-only=true").0)
        .collect();
    codes.sort();
    assert_eq!(codes, [200, 400, 400], "the leader alone answers");
    let replicas = meta["replicas"].as_array().unwrap();
    assert_eq!(replicas.len() + 1, s.servers.len(), "{meta}");
    for r in replicas {
        assert_eq!(r["current"], true, "{r}");
        assert_ne!(r["offline"], true, "{r}");
    }
}

/// `nats server check stream --peer-expect N`: one `STREAM.INFO`.
async fn check_stream(s: &Setup, name: &str, peers: usize) {
    let subject = format!("$JS.API.STREAM.INFO.{name}");
    let info = js_api(&s.user, &subject, "", "stream_info_response").await;
    for k in [
        "retention",
        "storage",
        "num_replicas",
        "max_msgs",
        "max_bytes",
        "max_age",
    ] {
        assert!(!info["config"][k].is_null(), "config.{k}: {info}");
    }
    for k in [
        "messages",
        "bytes",
        "first_seq",
        "last_seq",
        "consumer_count",
    ] {
        assert!(is_uint(&info["state"][k]), "state.{k}: {info}");
    }
    if peers > 1 {
        let cluster = &info["cluster"];
        assert!(
            cluster["leader"].as_str().is_some_and(|l| !l.is_empty()),
            "{info}"
        );
        let others = cluster["replicas"].as_array().unwrap();
        assert_eq!(others.len() + 1, peers, "{cluster}");
    }
}

/// `nats server raft step-down`: the active servers, the JSZ answer of
/// the one meta leader, `META.LEADER.STEPDOWN` with `{}`, then JSZ every
/// 500 ms until another leads.
async fn raft_step_down(s: &Setup) {
    let first = scatter(&s.sys, "$SYS.REQ.SERVER.PING", "{}", false, 1).await;
    let expect = first[0]["statsz"]["active_servers"].as_u64().unwrap() as usize;
    let leader_of = |answers: &[Value]| -> Vec<String> {
        answers
            .iter()
            .filter(|a| !a["data"]["meta_cluster"].is_null())
            .filter(|a| a["server"]["name"] == a["data"]["meta_cluster"]["leader"])
            .map(|a| a["server"]["name"].as_str().unwrap().to_string())
            .collect()
    };
    let answers = scatter(&s.sys, "$SYS.REQ.SERVER.PING.JSZ", "{}", true, expect).await;
    let leaders = leader_of(&answers);
    assert_eq!(leaders.len(), 1, "one meta leader: {answers:?}");
    let r = js_api(
        &s.sys,
        "$JS.API.META.LEADER.STEPDOWN",
        "{}",
        "meta_leader_stepdown_response",
    )
    .await;
    assert_eq!(r["success"], true, "{r}");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let answers = scatter(&s.sys, "$SYS.REQ.SERVER.PING.JSZ", "{}", true, expect).await;
        let now = leader_of(&answers);
        if now.len() == 1 && now != leaders {
            break;
        }
        assert!(Instant::now() < deadline, "no new leader: {answers:?}");
    }
}

/// `nats account info`: `$SYS.REQ.USER.INFO` (through the account's
/// import), then `$JS.API.INFO`.
async fn account_info(s: &Setup) {
    let m = s
        .user
        .request("$SYS.REQ.USER.INFO", "".into())
        .await
        .unwrap();
    let v: Value = serde_json::from_slice(&m.payload).unwrap();
    let data = &v["data"];
    assert_eq!(data["user"], "anon", "{v}");
    assert_eq!(data["account"], "$G", "{v}");
    // No expiry: left out (natscli shows "never").
    assert!(data.get("expires").is_none_or(is_uint), "{v}");
    let info = js_api(&s.user, "$JS.API.INFO", "", "account_info_response").await;
    for k in ["reserved_memory", "reserved_storage"] {
        assert!(is_uint(&info[k]), "{k}: {info}");
    }
    for k in [
        "memory_max_stream_bytes",
        "storage_max_stream_bytes",
        "max_ack_pending",
    ] {
        assert!(info["limits"][k].is_i64(), "limits.{k}: {info}");
    }
    assert!(info["limits"]["max_bytes_required"].is_boolean(), "{info}");
}

/// `nats events`: `$SYS.ACCOUNT.*.CONNECT`, `.DISCONNECT` and
/// `$SYS.SERVER.*.CLIENT.AUTH.ERR`, decoded by `type`.
async fn events(s: &Setup) {
    let mut sub = s.sys.subscribe("$SYS.ACCOUNT.*.CONNECT").await.unwrap();
    let mut gone = s.sys.subscribe("$SYS.ACCOUNT.*.DISCONNECT").await.unwrap();
    let _auth = s
        .sys
        .subscribe("$SYS.SERVER.*.CLIENT.AUTH.ERR")
        .await
        .unwrap();
    s.sys.flush().await.unwrap();
    let c = common::connect_as(&s.servers[0].url(), "anon", "p").await;
    c.flush().await.unwrap();
    drop(c);
    let connect = next_json(&mut sub).await;
    assert_eq!(
        connect["type"], "io.nats.server.advisory.v1.client_connect",
        "{connect}"
    );
    let client = &connect["client"];
    assert_eq!(client["acc"], "$G", "{connect}");
    assert_eq!(client["kind"], "Client", "{connect}");
    assert!(
        is_uint(&client["id"]) && common::is_timestamp(&client["start"]),
        "{connect}"
    );
    let left = next_json(&mut gone).await;
    assert_eq!(
        left["type"], "io.nats.server.advisory.v1.client_disconnect",
        "{left}"
    );
    for k in ["msgs", "bytes"] {
        assert!(
            is_uint(&left["sent"][k]) && is_uint(&left["received"][k]),
            "{left}"
        );
    }
    assert!(left["reason"].is_string(), "{left}");
}

async fn next_json(sub: &mut async_nats::Subscriber) -> Value {
    let m = tokio::time::timeout(Duration::from_secs(5), sub.next())
        .await
        .expect("an event")
        .unwrap();
    serde_json::from_slice(&m.payload).unwrap()
}

async fn every_command(n: usize) {
    let s = setup(n).await;
    let replicas = n.min(3);
    let stream = json!({"name": "CLI", "subjects": ["cli"], "num_replicas": replicas});
    let created = common::api(&s.user, "$JS.API.STREAM.CREATE.CLI", &stream.to_string()).await;
    assert!(created.get("error").is_none(), "{created}");
    server_list(&s).await;
    report_jetstream(&s).await;
    report_connections(&s).await;
    check_jetstream(&s).await;
    check_meta(&s).await;
    check_stream(&s, "CLI", replicas).await;
    account_info(&s).await;
    events(&s).await;
    if n > 1 {
        raft_step_down(&s).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn natscli_reads_one_server() {
    every_command(1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn natscli_reads_a_cluster() {
    every_command(3).await;
}
