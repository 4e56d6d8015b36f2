//! Message tracing (ADR-41): a publish with `Nats-Trace-Dest` gets one
//! event per server it passes through, at that subject; with
//! `Nats-Trace-Only` it is delivered to nobody. Expectations are
//! nats-server 2.15.1's (these tests pass against it too).
#[path = "../common/mod.rs"]
mod common;

use std::time::Duration;

use futures::StreamExt;
use serde_json::Value;

const DEST: &str = "trace.events";

async fn traced(c: &async_nats::Client, subject: &str, only: bool) {
    let mut headers = async_nats::HeaderMap::new();
    headers.insert("Nats-Trace-Dest", DEST);
    if only {
        headers.insert("Nats-Trace-Only", "true");
    }
    c.publish_with_headers(subject.to_string(), headers, "hello".into())
        .await
        .unwrap();
    c.flush().await.unwrap();
}

async fn event(events: &mut async_nats::Subscriber) -> Value {
    let m = tokio::time::timeout(Duration::from_secs(5), events.next())
        .await
        .expect("a trace event within 5s")
        .unwrap();
    serde_json::from_slice(&m.payload).expect("event JSON")
}

/// The events of one kind (`in`, `eg`, `js`).
fn of_type<'a>(e: &'a Value, kind: &str) -> Vec<&'a Value> {
    e["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|x| x["type"] == kind)
        .collect()
}

async fn quiet(sub: &mut async_nats::Subscriber) -> bool {
    tokio::time::timeout(Duration::from_millis(300), sub.next())
        .await
        .is_err()
}

#[tokio::test]
async fn a_traced_message_reports_where_it_went() {
    let s = common::server().start();
    let c = s.client().await;
    let mut events = c.subscribe(DEST).await.unwrap();
    let mut plain = c.subscribe("greet").await.unwrap();
    let mut grouped = c.queue_subscribe("greet", "workers".into()).await.unwrap();
    c.flush().await.unwrap();

    for only in [false, true] {
        traced(&c, "greet", only).await;
        let e = event(&mut events).await;
        let ingress = of_type(&e, "in");
        assert_eq!(ingress.len(), 1, "{e}");
        assert_eq!(ingress[0]["kind"], 0, "{e}");
        assert_eq!(ingress[0]["subj"], "greet", "{e}");
        assert_eq!(ingress[0]["acc"], "$G", "{e}");
        assert!(
            ingress[0]["ts"].as_str().is_some_and(|t| t.ends_with('Z')),
            "{e}"
        );
        assert_eq!(e["request"]["header"]["Nats-Trace-Dest"][0], DEST, "{e}");
        assert!(e["request"]["msgsize"].as_u64() > Some(5), "{e}");
        assert!(
            e["server"]["name"].is_string() && e["server"]["id"].is_string(),
            "{e}"
        );
        let egress = of_type(&e, "eg");
        let subs: Vec<(&str, &str)> = egress
            .iter()
            .map(|x| {
                (
                    x["sub"].as_str().unwrap(),
                    x["queue"].as_str().unwrap_or(""),
                )
            })
            .collect();
        assert_eq!(egress.len(), 2, "{e}");
        assert!(
            subs.contains(&("greet", "")) && subs.contains(&("greet", "workers")),
            "{e}"
        );
        // Delivered, unless trace only.
        assert_eq!(quiet(&mut plain).await, only, "only={only}");
        assert_eq!(quiet(&mut grouped).await, only, "only={only}");
    }
}

#[tokio::test]
async fn a_traced_publish_into_a_stream_names_the_stream() {
    let s = common::one_js_server();
    let c = s.client().await;
    let js = async_nats::jetstream::new(c.clone());
    js.create_stream(async_nats::jetstream::stream::Config {
        name: "TRACED".into(),
        subjects: vec!["traced.>".into()],
        ..Default::default()
    })
    .await
    .unwrap();
    let mut events = c.subscribe(DEST).await.unwrap();
    c.flush().await.unwrap();
    // Trace only: reported, not stored; then traced and stored.
    for (only, stored) in [(true, 0), (false, 1)] {
        traced(&c, "traced.a", only).await;
        let e = event(&mut events).await;
        let js_events = of_type(&e, "js");
        assert_eq!(js_events.len(), 1, "{e}");
        assert_eq!(js_events[0]["stream"], "TRACED", "{e}");
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        loop {
            let info = js
                .get_stream("TRACED")
                .await
                .unwrap()
                .info()
                .await
                .unwrap()
                .clone();
            if info.state.messages == stored {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{} stored",
                info.state.messages
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

#[tokio::test]
async fn each_server_on_the_way_sends_its_own_event() {
    let servers = common::routed_servers(&[String::new(), String::new()]);
    let (one, two) = (&servers[0], &servers[1]);
    let routed = |s: &common::Server| s.json("/routez")["num_routes"].as_u64() >= Some(1);
    common::wait_for("the route", Duration::from_secs(10), || {
        routed(one) && routed(two)
    });
    let far = two.client().await;
    let mut remote = far.subscribe("far.away").await.unwrap();
    far.flush().await.unwrap();
    let near = one.client().await;
    let mut events = near.subscribe(DEST).await.unwrap();
    near.flush().await.unwrap();
    // Interest has reached the first server once a plain message arrives.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        near.publish("far.away", "ping".into()).await.unwrap();
        near.flush().await.unwrap();
        if tokio::time::timeout(Duration::from_millis(200), remote.next())
            .await
            .is_ok()
        {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no interest across the route"
        );
    }
    while tokio::time::timeout(Duration::from_millis(300), remote.next())
        .await
        .is_ok()
    {}

    traced(&near, "far.away", false).await;
    let (a, b) = (event(&mut events).await, event(&mut events).await);
    let (first, second) = match of_type(&a, "in")[0]["kind"] == 0 {
        true => (a, b),
        false => (b, a),
    };
    // The first server sent it over the route as hop 1 ...
    let out = of_type(&first, "eg");
    assert_eq!(out.len(), 1, "{first}");
    assert_eq!(out[0]["kind"], 1, "{first}");
    assert_eq!(out[0]["hop"], "1", "{first}");
    assert_eq!(first["hops"], 1, "{first}");
    // ... and the second got it from the route and delivered it.
    let came = of_type(&second, "in");
    assert_eq!(came[0]["kind"], 1, "{second}");
    assert_eq!(
        second["request"]["header"]["Nats-Trace-Hop"][0], "1",
        "{second}"
    );
    let delivered = of_type(&second, "eg");
    assert_eq!(delivered.len(), 1, "{second}");
    assert_eq!(delivered[0]["kind"], 0, "{second}");
    assert_eq!(delivered[0]["sub"], "far.away", "{second}");
    assert!(!quiet(&mut remote).await);
}

#[tokio::test]
async fn a_destination_the_publisher_may_not_use_stops_the_message() {
    let config = r#"
authorization {
  users = [
    { user: tracer, password: t, permissions: { publish: { allow: ">", deny: "trace.>" } } }
    { user: watcher, password: w }
  ]
}
"#;
    let s = common::server().config(config).start();
    let watcher = async_nats::ConnectOptions::with_user_and_password("watcher".into(), "w".into())
        .connect(s.url())
        .await
        .unwrap();
    let mut events = watcher.subscribe(DEST).await.unwrap();
    let mut plain = watcher.subscribe("greet").await.unwrap();
    watcher.flush().await.unwrap();
    let (errors_tx, mut errors) = tokio::sync::mpsc::unbounded_channel();
    let tracer = async_nats::ConnectOptions::with_user_and_password("tracer".into(), "t".into())
        .event_callback(move |e| {
            let errors_tx = errors_tx.clone();
            async move {
                let _ = errors_tx.send(e.to_string());
            }
        })
        .connect(s.url())
        .await
        .unwrap();
    traced(&tracer, "greet", false).await;
    // A permissions violation, as nats-server reports it; no event, and
    // the message itself goes nowhere.
    let error = tokio::time::timeout(Duration::from_secs(5), async {
        while let Some(e) = errors.recv().await {
            if e.contains("Permissions Violation") {
                return e;
            }
        }
        String::new()
    })
    .await
    .expect("a permissions violation within 5s");
    assert!(
        error.contains("Permissions Violation for Publish"),
        "{error}"
    );
    assert!(quiet(&mut events).await && quiet(&mut plain).await);
    // Publishing the same message without tracing works.
    tracer.publish("greet", "plain".into()).await.unwrap();
    tracer.flush().await.unwrap();
    assert!(!quiet(&mut plain).await);
}

/// A trace across accounts, as nats-server reports it: a mapping is an
/// `sm` step, a service import an `si` step and a stream import an `se`
/// step, and a delivery in another account than the publisher's names
/// it. A trace goes past an import only where the service's export, or
/// the stream's import, says `allow_trace`; a request that goes on
/// untraced carries `Nats-Trace-Dest: trace disabled`.
#[tokio::test]
async fn a_trace_crosses_accounts_where_allowed() {
    let s = common::server()
        .config(
            r#"
accounts {
  A {
    users: [ { user: a, password: p } ]
    exports: [
      { service: "svc.open", allow_trace: true }
      { service: "svc.closed" }
      { stream: "feed.>" }
      { stream: "news.>" }
    ]
  }
  B {
    users: [ { user: b, password: p } ]
    imports: [
      { service: { account: A, subject: "svc.open" } }
      { service: { account: A, subject: "svc.closed" } }
      { stream: { account: A, subject: "feed.>" }, prefix: "fromA", allow_trace: true }
      { stream: { account: A, subject: "news.>" }, prefix: "fromA" }
    ]
    mappings: { "old.svc": "svc.open" }
  }
}
"#,
        )
        .start();
    let connect = |user: &'static str| {
        async_nats::ConnectOptions::with_user_and_password(user.into(), "p".into()).connect(s.url())
    };
    let (a, b) = (connect("a").await.unwrap(), connect("b").await.unwrap());
    let mut b_events = b.subscribe(DEST).await.unwrap();
    let mut a_events = a.subscribe(DEST).await.unwrap();
    let mut service = a.subscribe("svc.>").await.unwrap();
    let mut feed = b.subscribe("fromA.>").await.unwrap();
    // A request nobody answers comes back after the server read every
    // SUB before it.
    for c in [&a, &b] {
        let _ = c.request("settle.nobody", "".into()).await;
    }
    let kinds = |e: &Value| -> Vec<String> {
        e["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x["type"].as_str().unwrap().to_string())
            .collect()
    };

    traced(&b, "svc.open", false).await;
    let e = event(&mut b_events).await;
    assert_eq!(kinds(&e), ["in", "si", "eg"], "{e}");
    let si = of_type(&e, "si")[0];
    assert_eq!(
        (&si["acc"], &si["from"], &si["to"]),
        (&"A".into(), &"svc.open".into(), &"svc.open".into()),
        "{e}"
    );
    let eg = of_type(&e, "eg")[0];
    assert_eq!(
        (&eg["acc"], &eg["sub"]),
        (&"A".into(), &"svc.>".into()),
        "{e}"
    );
    service.next().await.unwrap();

    traced(&b, "old.svc", false).await;
    let e = event(&mut b_events).await;
    assert_eq!(kinds(&e), ["in", "sm", "si", "eg"], "{e}");
    assert_eq!(of_type(&e, "in")[0]["subj"], "old.svc", "{e}");
    assert_eq!(of_type(&e, "sm")[0]["to"], "svc.open", "{e}");
    service.next().await.unwrap();

    traced(&b, "svc.closed", false).await;
    let e = event(&mut b_events).await;
    assert_eq!(kinds(&e), ["in", "si"], "{e}");
    let got = service.next().await.unwrap();
    let dest = got.headers.as_ref().and_then(|h| h.get("Nats-Trace-Dest"));
    assert_eq!(dest.map(|d| d.as_str()), Some("trace disabled"));

    for (subject, allowed) in [("feed.x", true), ("news.x", false)] {
        traced(&a, subject, false).await;
        let e = event(&mut a_events).await;
        let want: &[&str] = if allowed {
            &["in", "se", "eg"]
        } else {
            &["in", "se"]
        };
        assert_eq!(kinds(&e), want, "{e}");
        let se = of_type(&e, "se")[0];
        let shown = format!("fromA.{subject}");
        assert_eq!(
            (&se["acc"], se["to"].as_str()),
            (&"B".into(), Some(shown.as_str())),
            "{e}"
        );
        if allowed {
            let eg = of_type(&e, "eg")[0];
            assert_eq!(
                (&eg["acc"], &eg["sub"]),
                (&"B".into(), &"feed.>".into()),
                "{e}"
            );
        }
        assert_eq!(feed.next().await.unwrap().subject.as_str(), shown);
    }
}
