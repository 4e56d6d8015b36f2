//! Monitoring endpoints: nats-server's field names and values.

#[path = "../common/mod.rs"]
mod common;

use std::time::Duration;

use futures::StreamExt;

#[tokio::test]
async fn varz_fields_and_counters() {
    let s = common::server().arg("-n").arg("mon-test").start();
    // The server's own subscriptions (the system account's) are counted.
    let own = s.json("/varz")["subscriptions"].as_u64().unwrap();
    let c = s.client().await;
    let mut sub = c.subscribe("v").await.unwrap();
    for _ in 0..5 {
        c.publish("v", "12345".into()).await.unwrap();
    }
    c.flush().await.unwrap();
    for _ in 0..5 {
        sub.next().await.unwrap();
    }
    let (status, ctype, body) = s.http("/varz");
    assert_eq!(status, 200);
    assert_eq!(ctype, "application/json");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    for field in [
        "server_id",
        "server_name",
        "version",
        "proto",
        "go",
        "host",
        "port",
        "max_connections",
        "ping_interval",
        "ping_max",
        "http_host",
        "http_port",
        "auth_timeout",
        "max_control_line",
        "max_payload",
        "max_pending",
        "cluster",
        "gateway",
        "leaf",
        "jetstream",
        "write_deadline",
        "start",
        "now",
        "uptime",
        "mem",
        "cores",
        "cpu",
        "connections",
        "total_connections",
        "routes",
        "remotes",
        "in_msgs",
        "out_msgs",
        "in_bytes",
        "out_bytes",
        "slow_consumers",
        "subscriptions",
        "http_req_stats",
        "config_load_time",
    ] {
        assert!(v.get(field).is_some(), "varz lacks {field}: {v}");
    }
    assert_eq!(v["server_name"], "mon-test");
    assert_eq!(v["port"], s.port);
    assert_eq!(
        v["http_port"], -1,
        "the configured value is reported, as nats-server"
    );
    assert_eq!(v["in_msgs"], 5);
    assert_eq!(v["in_bytes"], 25);
    assert_eq!(v["out_msgs"], 5);
    assert_eq!(v["connections"], 1);
    assert_eq!(v["subscriptions"], own + 1);
    assert_eq!(v["max_payload"], 1048576);
    assert_eq!(v["ping_interval"], 120_000_000_000u64);
    assert_eq!(v["http_req_stats"]["/varz"], 2, "this one and the first");
    assert!(v["mem"].as_u64().unwrap() > 0);
    assert!(v["server_id"].as_str().unwrap().starts_with('N'));
    assert_eq!(v["server_id"].as_str().unwrap().len(), 56);
    // RFC 3339 with a Z.
    assert!(v["start"].as_str().unwrap().ends_with('Z'));
}

#[tokio::test]
async fn connz_with_subs_paging_and_sorting() {
    let s = common::server().start();
    let a = async_nats::ConnectOptions::new()
        .name("alpha")
        .connect(s.url())
        .await
        .unwrap();
    let b = async_nats::ConnectOptions::new()
        .name("beta")
        .connect(s.url())
        .await
        .unwrap();
    let _s1 = a.subscribe("x.one").await.unwrap();
    let _s2 = a.queue_subscribe("x.two", "q".into()).await.unwrap();
    common::sync(&a).await;
    for _ in 0..3 {
        b.publish("x.one", "hi".into()).await.unwrap();
    }
    common::sync(&b).await;

    let c = s.json("/connz?subs=1");
    assert_eq!(c["num_connections"], 2);
    assert_eq!(c["total"], 2);
    assert_eq!(c["limit"], 1024);
    let conns = c["connections"].as_array().unwrap();
    let alpha = conns.iter().find(|x| x["name"] == "alpha").unwrap();
    let beta = conns.iter().find(|x| x["name"] == "beta").unwrap();
    assert_eq!(alpha["lang"], "rust");
    // Two subscriptions and the request inbox of `sync`.
    assert_eq!(alpha["subscriptions"], 3);
    let mut list: Vec<&str> = alpha["subscriptions_list"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_str().unwrap())
        .filter(|s| !s.starts_with("_INBOX."))
        .collect();
    list.sort();
    assert_eq!(list, ["x.one", "x.two"]);
    assert_eq!(alpha["out_msgs"], 3);
    assert_eq!(beta["in_msgs"], 4, "three and the sync request");
    assert_eq!(beta["in_bytes"], 6);
    assert_eq!(
        beta["subscriptions_list"].as_array().unwrap().len(),
        1,
        "the sync inbox"
    );
    for field in [
        "cid",
        "kind",
        "type",
        "ip",
        "port",
        "start",
        "last_activity",
        "rtt",
        "uptime",
        "idle",
        "pending_bytes",
    ] {
        assert!(alpha.get(field).is_some(), "conn lacks {field}");
    }

    let detail = s.json("/connz?subs=detail");
    let alpha = detail["connections"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["name"] == "alpha")
        .unwrap()
        .clone();
    let subs = alpha["subscriptions_list_detail"].as_array().unwrap();
    let one = subs.iter().find(|d| d["subject"] == "x.one").unwrap();
    assert_eq!(one["msgs"], 3, "{detail}");
    let two = subs.iter().find(|d| d["subject"] == "x.two").unwrap();
    assert_eq!(two["qgroup"], "q");

    let sorted = s.json("/connz?sort=msgs_from");
    assert_eq!(sorted["connections"][0]["name"], "beta");
    let paged = s.json("/connz?limit=1&offset=1");
    assert_eq!(paged["num_connections"], 1);
    assert_eq!(paged["total"], 2);
    let by_cid = s.json(&format!("/connz?cid={}", alpha["cid"]));
    assert_eq!(by_cid["connections"][0]["name"], "alpha");
    assert_eq!(by_cid["limit"], 1);

    drop(b);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let closed = s.json("/connz?state=closed");
    assert_eq!(closed["connections"][0]["name"], "beta");
    assert_eq!(closed["connections"][0]["reason"], "Client Closed");
    assert!(closed["connections"][0]["stop"].is_string());
}

#[test]
fn connz_bad_parameters() {
    let s = common::server().start();
    for (q, want) in [
        ("/connz?sort=nope", "invalid sorting option: nope"),
        (
            "/connz?sort=stop",
            "sort by stop only valid on closed connections",
        ),
        ("/connz?limit=x", "Error decoding int for 'limit'"),
        ("/connz?state=sideways", "Error decoding state for sideways"),
        ("/connz?subs=maybe", "Error decoding boolean for 'subs'"),
        (
            "/subsz?test=foo.*",
            "invalid test subject, must be valid publish subject: foo.*",
        ),
    ] {
        let (status, ctype, body) = s.http(q);
        assert_eq!(status, 400, "{q}");
        assert_eq!(ctype, "text/plain; charset=utf-8");
        assert!(body.contains(want), "{q}: {body}");
    }
}

#[tokio::test]
async fn subsz_counts_and_lists() {
    let s = common::server().start();
    let c = s.client().await;
    let _a = c.subscribe("s.a").await.unwrap();
    let _b = c.subscribe("s.*").await.unwrap();
    c.publish("s.a", "x".into()).await.unwrap();
    c.publish("s.a", "x".into()).await.unwrap();
    common::sync(&c).await;
    // The global account's: the two subscriptions; the sync request's
    // inbox adds a third (the system account has its own).
    let z = s.json("/subsz?acc=$G");
    assert_eq!(z["num_subscriptions"], 3);
    assert_eq!(z["num_inserts"], 3);
    assert!(z["num_matches"].as_u64().unwrap() >= 1);
    for field in [
        "server_id",
        "now",
        "num_cache",
        "num_removes",
        "cache_hit_rate",
        "max_fanout",
        "avg_fanout",
        "total",
        "offset",
        "limit",
    ] {
        assert!(z.get(field).is_some(), "subsz lacks {field}");
    }
    assert!(z.get("subscriptions_list").is_none());
    let z = s.json("/subscriptionsz?subs=1&test=s.a");
    assert_eq!(z["total"], 2);
    let z = s.json("/subsz?subs=1&test=s.b");
    assert_eq!(z["total"], 1);
    assert_eq!(z["subscriptions_list"][0]["subject"], "s.*");
}

#[test]
fn healthz_routez_root_and_404() {
    let s = common::server().start();
    let (status, ctype, body) = s.http("/healthz");
    assert_eq!(
        (status, ctype.as_str(), body.as_str()),
        (200, "application/json", "{\"status\":\"ok\"}")
    );
    let (status, _, _) = s.http("/healthz?js-enabled-only=nah");
    assert_eq!(status, 400);
    let r = s.json("/routez");
    assert_eq!(r["num_routes"], 0);
    assert_eq!(r["routes"], serde_json::json!([]));
    let (status, ctype, body) = s.http("/");
    assert_eq!(status, 200);
    assert_eq!(ctype, "text/html; charset=utf-8");
    assert!(body.contains("varz"));
    let (status, _, body) = s.http("/nope");
    assert_eq!((status, body.as_str()), (404, "404 page not found\n"));
}

/// `/healthz`'s queries (issue 37), as nats-server answers them: an
/// account, stream or consumer named that this server does not hold is
/// 404, one checked and current is 200; a stream without its account
/// is 400; with `details`, the same as `errors`. One server or a
/// cluster (`FLOTILLA_TEST_JS`), and nats-server with
/// `FLOTILLA_TEST_SERVER`.
#[tokio::test]
async fn healthz_checks_what_the_query_names() {
    let s = common::js_server();
    let c = s.client().await;
    common::create_stream(
        &c,
        "HZ",
        serde_json::json!({"name": "HZ", "subjects": ["hz"]}),
    )
    .await;
    let body = serde_json::json!({"stream_name": "HZ", "config": {"durable_name": "D", "ack_policy": "explicit"}});
    let r = common::api(&c, "$JS.API.CONSUMER.CREATE.HZ.D", &body.to_string()).await;
    assert!(r.get("error").is_none(), "{r}");
    // The stream's leader holds it in every mode (in a cluster of three
    // with R1 streams, the others may not).
    let leader = match common::clustered() {
        false => 0,
        true => {
            let info = common::api(&c, "$JS.API.STREAM.INFO.HZ", "").await;
            let name = info["cluster"]["leader"].as_str().unwrap().to_string();
            (0..3)
                .find(|&i| s.servers[i].json("/varz")["server_name"] == name.as_str())
                .unwrap()
        }
    };
    let server = &s.servers[leader];
    let ok = r#"{"status":"ok"}"#;
    let cases: &[(&str, u16, &str)] = &[
        ("", 200, ok),
        ("?account=$G", 200, ok),
        ("?account=$G&stream=HZ", 200, ok),
        ("?account=$G&stream=HZ&consumer=D", 200, ok),
        ("?js-meta-only=true", 200, ok),
        ("?details=true", 200, ok),
        (
            "?account=NOPE",
            404,
            r#"{"status":"unavailable","error":"JetStream account \"NOPE\" not found"}"#,
        ),
        (
            "?account=$G&stream=NOPE",
            404,
            r#"{"status":"unavailable","error":"JetStream stream \"NOPE\" not found on account \"$G\""}"#,
        ),
        (
            "?account=$G&stream=HZ&consumer=NOPE",
            404,
            r#"{"status":"unavailable","error":"JetStream consumer \"NOPE\" not found for stream \"HZ\" on account \"$G\""}"#,
        ),
        (
            "?account=$G&stream=NOPE&details=true",
            404,
            r#"{"status":"error","errors":[{"type":"STREAM","account":"$G","stream":"NOPE","error":"JetStream stream \"NOPE\" not found on account \"$G\""}]}"#,
        ),
        (
            "?stream=HZ",
            400,
            r#"{"status":"error","error":"\"account\" must not be empty when checking stream health"}"#,
        ),
        (
            "?account=$G&consumer=D&details=true",
            400,
            r#"{"status":"error","errors":[{"type":"BAD_REQUEST","error":"\"stream\" must not be empty when checking consumer health"}]}"#,
        ),
    ];
    for (query, code, body) in cases {
        let (got_code, _, got) = server.http(&format!("/healthz{query}"));
        let got: serde_json::Value = serde_json::from_str(&got).unwrap();
        let want: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!((got_code, got), (*code, want), "/healthz{query}");
    }
}

/// `http_base_path` puts every endpoint under a prefix, as nats-server
/// does (`/varz` alone is then not found); `/varz` tells it as given.
#[test]
fn the_base_path_prefixes_every_endpoint() {
    let s = common::server()
        .config("http_base_path: \"mon/\"\n")
        .start();
    let cases: &[(&str, u16)] = &[
        ("/mon/varz", 200),
        ("/mon/connz", 200),
        ("/mon/healthz", 200),
        ("/mon", 200),
        ("/varz", 404),
        ("/monvarz", 404),
    ];
    for (path, code) in cases {
        assert_eq!(s.http(path).0, *code, "{path}");
    }
    let varz = s.json("/mon/varz");
    assert_eq!(varz["http_base_path"], "mon/", "{varz}");
}

/// `/ipqueuesz` lists the internal queues that hold work: with `all`,
/// empty ones too, and `queues` picks by name; a stream's messages queue
/// is named as nats-server names it. `$SYS.REQ.SERVER.PING.IPQUEUESZ`
/// takes `all` and `filter`.
#[tokio::test]
async fn ipqueuesz_lists_the_queues_that_hold_work() {
    if common::clustered() {
        return;
    }
    let s = common::server()
        .js()
        .config(common::WITH_SYSTEM_USER)
        .start();
    let c = s.client().await;
    common::create_stream(
        &c,
        "IPQ",
        serde_json::json!({"name": "IPQ", "subjects": ["ipq"]}),
    )
    .await;
    let name = "[ACC:$G] stream 'IPQ' messages";
    let all = s.json("/ipqueuesz?all=true&queues=IPQ");
    assert!(all[name]["pending"].is_u64(), "{all}");
    assert!(
        all.as_object().unwrap().keys().all(|k| k.contains("IPQ")),
        "{all}"
    );
    let busy = s.json("/ipqueuesz?queues=IPQ");
    assert!(
        busy.as_object()
            .unwrap()
            .values()
            .all(|q| q["pending"].as_u64() > Some(0)),
        "{busy}"
    );
    let (code, _, _) = s.http("/ipqueuesz?all=maybe");
    assert_eq!(code, 400);
    let sys = common::connect_as(&s.url(), "sys", "p").await;
    let body = r#"{"all":true,"filter":"IPQ"}"#;
    let m = sys
        .request("$SYS.REQ.SERVER.PING.IPQUEUESZ", body.into())
        .await
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&m.payload).unwrap();
    assert!(v["data"][name]["pending"].is_u64(), "{v}");
}
