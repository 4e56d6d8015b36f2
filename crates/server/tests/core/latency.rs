//! Service latency through async-nats, on one server and across a route:
//! a request through a service import whose export says `latency` is
//! measured, and the measurement published in the exporter's account on
//! the results subject, in nats-server's `ServiceLatency` JSON, for each
//! way a request ends (answered, no responder, no reply subject, no
//! answer in time); sampling by headers; every bad `latency` refused.

#[path = "../common/mod.rs"]
mod common;

use std::time::Duration;

use futures::StreamExt;
use serde_json::Value;

const CONFIG: &str = r#"
accounts {
  A {
    users: [ { user: a, password: p } ]
    exports: [
      { service: "svc", latency: { sampling: 100%, subject: "lat.svc" } }
      { service: "traced", latency: { sampling: headers, subject: "lat.traced" } }
      { service: "slow", response_threshold: "1s", latency: "lat.slow" }
      { service: "plain" }
    ]
  }
  B {
    users: [ { user: b, password: p } ]
    imports: [
      { service: { account: A, subject: "svc" }, share: true }
      { service: { account: A, subject: "traced" } }
      { service: { account: A, subject: "slow" } }
      { service: { account: A, subject: "plain" } }
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

async fn next_report(sub: &mut async_nats::Subscriber) -> Value {
    let msg = tokio::time::timeout(Duration::from_secs(5), sub.next())
        .await
        .expect("a latency report")
        .unwrap();
    serde_json::from_slice(&msg.payload).unwrap()
}

async fn no_report(sub: &mut async_nats::Subscriber) {
    let late = tokio::time::timeout(Duration::from_millis(500), sub.next()).await;
    assert!(late.is_err(), "no report expected: {late:?}");
}

/// The fields every report has, as nats-server writes them.
fn common_fields(r: &Value, status: u64) {
    assert_eq!(r["type"], "io.nats.server.metric.v1.service_latency", "{r}");
    assert_eq!(r["id"].as_str().map(str::len), Some(22), "a NUID: {r}");
    assert!(
        r["timestamp"].as_str().is_some_and(|t| t.ends_with('Z')),
        "{r}"
    );
    assert!(r["start"].as_str().is_some_and(|t| t.ends_with('Z')), "{r}");
    assert_eq!(r["status"], status, "{r}");
    for k in ["service", "system", "total"] {
        assert!(r[k].as_i64().is_some_and(|n| n >= 0), "{k}: {r}");
    }
}

/// A's responder answers B's request; the report, in A, names the
/// requester fully (the import shares) and the responder.
async fn an_answered_request_is_reported(
    requester_url: &str,
    responder_url: &str,
    responder_server: &str,
) {
    let a = common::connect_as(responder_url, "a", "p").await;
    let mut requests = a.subscribe("svc").await.unwrap();
    let mut reports = a.subscribe("lat.svc").await.unwrap();
    let b = common::connect_as(requester_url, "b", "p").await;
    settle(&[&a, &b]).await;
    tokio::spawn({
        let a = a.clone();
        async move {
            while let Some(m) = requests.next().await {
                a.publish(m.reply.unwrap(), "pong".into()).await.unwrap();
            }
        }
    });
    let answer = b.request("svc", "ping".into()).await.unwrap();
    assert_eq!(&answer.payload[..], b"pong");
    let r = next_report(&mut reports).await;
    common_fields(&r, 200);
    assert!(r.get("description").is_none(), "{r}");
    assert!(r.get("header").is_none(), "{r}");
    let requestor = &r["requestor"];
    assert_eq!(requestor["acc"], "B", "{r}");
    assert_eq!(requestor["kind"], "Client", "shared in full: {r}");
    assert!(requestor["id"].as_u64().is_some(), "{r}");
    let total = r["total"].as_i64().unwrap();
    assert!(total >= r["service"].as_i64().unwrap(), "{r}");
    // Another server's responder is told by its own server, through the
    // system account, and its half merged here.
    let responder = &r["responder"];
    assert_eq!(responder["acc"], "A", "{r}");
    assert_eq!(responder["kind"], "Client", "{r}");
    let name = responder["server"]
        .as_str()
        .expect("the responder's server");
    assert_eq!(name, responder_server, "{r}");
    // Exactly one report per request.
    no_report(&mut reports).await;
}

#[tokio::test]
async fn an_answered_request_is_reported_on_one_server() {
    let s = common::server().config(CONFIG).start();
    let name = s.json("/varz")["server_name"].as_str().unwrap().to_string();
    an_answered_request_is_reported(&s.url(), &s.url(), &name).await;
}

#[tokio::test]
async fn an_answered_request_is_reported_across_a_route() {
    let servers = common::routed_servers(&[CONFIG.to_string(), CONFIG.to_string()]);
    let routed = |s: &common::Server| s.json("/routez")["num_routes"].as_u64() >= Some(1);
    common::wait_for("the route", Duration::from_secs(10), || {
        routed(&servers[0]) && routed(&servers[1])
    });
    let name = servers[1].json("/varz")["server_name"]
        .as_str()
        .unwrap()
        .to_string();
    an_answered_request_is_reported(&servers[0].url(), &servers[1].url(), &name).await;
}

/// A request nothing in A receives is a 503; one without a reply
/// subject a 400; one left unanswered past its threshold a 504. A
/// requester whose import does not share is told by account alone.
#[tokio::test]
async fn requests_that_fail_are_reported_with_their_status() {
    let s = common::server().config(CONFIG).start();
    let a = common::connect_as(&s.url(), "a", "p").await;
    let mut reports = a.subscribe("lat.*").await.unwrap();
    let b = common::connect_as(&s.url(), "b", "p").await;
    settle(&[&a, &b]).await;

    let asked = b.request("svc", "anyone?".into()).await;
    assert!(asked.is_err(), "no responder: {asked:?}");
    let r = next_report(&mut reports).await;
    common_fields(&r, 503);
    assert_eq!(r["description"], "Service Unavailable", "{r}");
    assert_eq!(r["requestor"]["acc"], "B", "{r}");

    let _listening = a.subscribe("svc").await.unwrap();
    settle(&[&a]).await;
    b.publish("svc", "no reply".into()).await.unwrap();
    b.flush().await.unwrap();
    let r = next_report(&mut reports).await;
    common_fields(&r, 400);
    assert_eq!(r["description"], "Bad Request", "{r}");

    // A listener that never answers: the path expires after 1 s.
    let _silent = a.subscribe("slow").await.unwrap();
    settle(&[&a]).await;
    let b2 = b.clone();
    tokio::spawn(async move {
        let _ = b2
            .send_request(
                "slow",
                async_nats::Request::new().timeout(Some(Duration::from_secs(10))),
            )
            .await;
    });
    let msg = tokio::time::timeout(Duration::from_secs(8), reports.next())
        .await
        .expect("a timeout report")
        .unwrap();
    assert_eq!(msg.subject.as_str(), "lat.slow");
    let r: Value = serde_json::from_slice(&msg.payload).unwrap();
    common_fields(&r, 504);
    assert_eq!(r["description"], "Service Timeout", "{r}");
    let requestor = r["requestor"].as_object().unwrap();
    assert_eq!(requestor["acc"], "B", "{r}");
    assert!(
        requestor.keys().all(|k| k == "acc" || k == "rtt"),
        "not shared: account and round trip only: {r}"
    );
}

/// With `sampling: headers`, only a request whose tracing headers say it
/// is sampled is measured, and the report carries those headers.
#[tokio::test]
async fn headers_decide_what_is_sampled() {
    let s = common::server().config(CONFIG).start();
    let a = common::connect_as(&s.url(), "a", "p").await;
    let mut requests = a.subscribe("traced").await.unwrap();
    let mut reports = a.subscribe("lat.traced").await.unwrap();
    let b = common::connect_as(&s.url(), "b", "p").await;
    settle(&[&a, &b]).await;
    tokio::spawn({
        let a = a.clone();
        async move {
            while let Some(m) = requests.next().await {
                a.publish(m.reply.unwrap(), "ok".into()).await.unwrap();
            }
        }
    });
    b.request("traced", "plain".into()).await.unwrap();
    let mut headers = async_nats::HeaderMap::new();
    headers.insert("X-B3-Sampled", "0");
    headers.insert("X-B3-TraceId", "80f198ee56343ba864fe8b2a57d3eff7");
    b.request_with_headers("traced", headers, "denied".into())
        .await
        .unwrap();
    no_report(&mut reports).await;

    let mut headers = async_nats::HeaderMap::new();
    headers.insert(
        "traceparent",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    );
    b.request_with_headers("traced", headers, "sampled".into())
        .await
        .unwrap();
    let r = next_report(&mut reports).await;
    common_fields(&r, 200);
    assert_eq!(
        r["header"],
        serde_json::json!({"Traceparent": ["00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"]}),
        "{r}"
    );
    no_report(&mut reports).await;
}

/// `/accountz` shows an export's latency as `service_latency`, and an
/// import's as `latency`, in nats-io/jwt's form.
#[test]
fn accountz_shows_latency() {
    let s = common::server().config(CONFIG).start();
    let a = &s.json("/accountz?acc=A")["account_detail"];
    let export = a["exports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["subject"] == "traced")
        .cloned()
        .unwrap_or_else(|| panic!("{a}"));
    assert_eq!(
        export["service_latency"],
        serde_json::json!({"sampling": "headers", "results": "lat.traced"}),
        "{export}"
    );
    let b = &s.json("/accountz?acc=B")["account_detail"];
    let import = b["imports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["subject"] == "svc")
        .cloned()
        .unwrap_or_else(|| panic!("{b}"));
    assert_eq!(
        import["latency"],
        serde_json::json!({"sampling": 100, "results": "lat.svc"}),
        "{import}"
    );
}

/// Each bad `latency`, refused with nats-server's text, the file, line
/// and column.
#[test]
fn bad_latency_is_refused_at_load() {
    let cases: &[(&str, &str)] = &[
        (
            r#"{ service: "svc", latency: { sampling: 200, subject: "lat" } }"#,
            "bad sampling percentage, should be 1-100",
        ),
        (
            r#"{ service: "svc", latency: { sampling: "0%", subject: "lat" } }"#,
            "bad sampling percentage, should be 1-100",
        ),
        (
            r#"{ service: "svc", latency: { sampling: "lots", subject: "lat" } }"#,
            "Failed to parse latency sample",
        ),
        (
            r#"{ service: "svc", latency: { sampling: 50 } }"#,
            "Latency subject required, but missing",
        ),
        (
            r#"{ service: "svc", latency: 5 }"#,
            "Expected latency entry to be a map/struct or string",
        ),
        (
            r#"{ stream: "foo", latency: "lat" }"#,
            "Detected latency directive on non-service",
        ),
        (
            r#"{ service: "svc", response_type: stream, latency: "lat" }"#,
            r#"Error adding service latency sampling for "svc" on subject "lat": bad service response type"#,
        ),
        (
            r#"{ service: "svc.>", latency: "svc.lat" }"#,
            r#"Error adding service latency sampling for "svc.>" on subject "svc.lat": invalid publish subject"#,
        ),
        (
            r#"{ service: "svc", latency: "lat.*" }"#,
            "invalid publish subject",
        ),
    ];
    for (export, want) in cases {
        let text = format!("accounts {{\n  A {{\n    exports: [ {export} ]\n  }}\n}}\n");
        let said = common::refused_by_server(&text);
        assert!(said.contains(want), "{text}\nwant: {want}\ngot: {said}");
        assert!(said.contains("test.conf:"), "{said}");
    }
    // Without a system account, nothing can publish the results.
    let text =
        "no_system_account: true\naccounts { A { exports: [ { service: svc, latency: lat } ] } }\n";
    let said = common::refused_by_server(text);
    let want = r#"Error adding service latency sampling for "svc": system account not setup"#;
    assert!(said.contains(want), "{said}");
}
