//! Subject mappings through async-nats: every transform function, weighted
//! destinations within a statistical bound, loss injection, destinations
//! scoped to a cluster, per-account mappings applied before permissions
//! and through service imports, and every bad mapping refused at load
//! with nats-server's error.

#[path = "../common/mod.rs"]
mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt;

const MAPPINGS: &str = r#"
mappings {
  "wc.*.*": "wc.$2.$1"
  "part.*": "part.{{partition(10,1)}}.{{wildcard(1)}}"
  "sp.*": "sp.{{split(1,-)}}"
  "sfl.*": "sfl.{{splitFromLeft(1,2)}}"
  "sfr.*": "sfr.{{SplitFromRight(1,1)}}"
  "sll.*": "sll.{{sliceFromLeft(1,2)}}"
  "slr.*": "slr.{{sliceFromRight(1,2)}}"
  "lit": "lit.dest"
  "tail.>": "moved.>"
  "canary": [ { destination: "v1", weight: 80% }, { destination: "v2", weight: "20" } ]
  "lossy": { destination: "lossy", weight: 0 }
  "cl": [ { destination: "cl.c1", weight: 100%, cluster: c1 } ]
}
"#;

/// Each function, on one server: what a subscriber to everything sees
/// for each publish.
#[tokio::test]
async fn every_transform_function_maps_as_nats_server() {
    let s = common::server().config(MAPPINGS).start();
    let c = async_nats::connect(s.url()).await.unwrap();
    let mut all = c.subscribe(">").await.unwrap();
    c.flush().await.unwrap();
    let cases = [
        ("wc.a.b", "wc.b.a"),
        ("part.foo", "part.3.foo"),
        ("part.baz", "part.0.baz"),
        ("sp.-a-b--c-", "sp.a.b.c"),
        ("sfl.abcd", "sfl.ab.cd"),
        ("sfr.abcd", "sfr.abc.d"),
        ("sll.abcde", "sll.ab.cd.e"),
        ("slr.abcde", "slr.a.bc.de"),
        ("lit", "lit.dest"),
        ("tail.a.b", "moved.a.b"),
        ("lossy", "(dropped)"),
        ("cl", "cl"),
        ("unmapped.x", "unmapped.x"),
    ];
    for (published, _) in cases {
        c.publish(published, "".into()).await.unwrap();
    }
    c.publish("end", "".into()).await.unwrap();
    let want: Vec<&str> = cases
        .iter()
        .map(|(_, to)| *to)
        .filter(|to| *to != "(dropped)")
        .collect();
    assert_eq!(common::received_until(&mut all, "end").await, want);
}

/// 80/20 over 2,000 publishes: each side within five standard deviations
/// (about 18 messages) of its share, and nothing lost or doubled.
#[tokio::test]
async fn weighted_destinations_split_by_weight() {
    let s = common::server().config(MAPPINGS).start();
    let c = async_nats::connect(s.url()).await.unwrap();
    let mut all = c.subscribe(">").await.unwrap();
    c.flush().await.unwrap();
    for _ in 0..2000 {
        c.publish("canary", "".into()).await.unwrap();
    }
    c.publish("end", "".into()).await.unwrap();
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for subject in common::received_until(&mut all, "end").await {
        *counts.entry(subject).or_default() += 1;
    }
    let (v1, v2) = (counts["v1"], counts["v2"]);
    assert_eq!(v1 + v2, 2000, "{counts:?}");
    assert!((310..=490).contains(&v2), "20% of 2000 is 400: {counts:?}");
}

/// A destination scoped to a cluster applies on that cluster's servers.
#[tokio::test]
async fn a_cluster_scoped_destination_applies_in_its_cluster() {
    let servers = common::routed_servers(&[MAPPINGS.to_string()]);
    let c = async_nats::connect(servers[0].url()).await.unwrap();
    let mut all = c.subscribe(">").await.unwrap();
    c.flush().await.unwrap();
    c.publish("cl", "".into()).await.unwrap();
    c.publish("end", "".into()).await.unwrap();
    assert_eq!(common::received_until(&mut all, "end").await, ["cl.c1"]);
}

const ACCOUNTS: &str = r#"
accounts {
  A {
    users: [ { user: a, password: p, permissions: { publish: ["allowed.>", "req"], allow_responses: true } } ]
    mappings { "go": "allowed.go", "sneak": "forbidden.x", "req": "req.v2" }
    exports: [ { service: "req" } ]
  }
  B {
    users: [ { user: b, password: p } ]
    imports: [ { service: { account: A, subject: "req" } } ]
  }
}
"#;

/// An account's mappings apply to its own publishes only, before its
/// permissions: a mapped subject is allowed or refused as itself (the
/// refusal names the subject published, as nats-server 2.15.1 does).
#[tokio::test]
async fn account_mappings_apply_before_permissions() {
    let s = common::server().config(ACCOUNTS).start();
    let (a, b) = (
        common::connect_as(&s.url(), "a", "p").await,
        common::connect_as(&s.url(), "b", "p").await,
    );
    let mut a_all = a.subscribe(">").await.unwrap();
    let mut b_all = b.subscribe(">").await.unwrap();
    a.flush().await.unwrap();
    b.flush().await.unwrap();
    b.publish("go", "".into()).await.unwrap();
    b.publish("b.end", "".into()).await.unwrap();
    assert_eq!(
        common::received_until(&mut b_all, "b.end").await,
        ["go"],
        "B has no mappings"
    );
    a.publish("go", "".into()).await.unwrap();
    a.publish("allowed.end", "".into()).await.unwrap();
    assert_eq!(
        common::received_until(&mut a_all, "allowed.end").await,
        ["allowed.go"]
    );

    let mut raw = common::Raw::connect(&s.addr());
    raw.send(b"CONNECT {\"user\":\"a\",\"pass\":\"p\",\"verbose\":false}\r\n");
    raw.send(b"PUB sneak 0\r\n\r\nPING\r\n");
    let said = raw.read_until("PONG", Duration::from_secs(5));
    assert!(
        said.contains("Permissions Violation for Publish to \"sneak\""),
        "{said}"
    );
}

/// A request through a service import meets the exporter's mappings.
#[tokio::test]
async fn a_service_import_meets_the_exporters_mappings() {
    let s = common::server().config(ACCOUNTS).start();
    let a = common::connect_as(&s.url(), "a", "p").await;
    let mut requests = a.subscribe("req.v2").await.unwrap();
    a.flush().await.unwrap();
    tokio::spawn(async move {
        while let Some(m) = requests.next().await {
            let _ = a.publish(m.reply.unwrap(), "v2".into()).await;
        }
    });
    let b = common::connect_as(&s.url(), "b", "p").await;
    let answer = b.request("req", "".into()).await.unwrap();
    assert_eq!(&answer.payload[..], b"v2");
}

#[test]
fn bad_mappings_are_refused_at_load() {
    for (mapping, want) in [
        (r#""a..b": "c""#, r#"Subject "a..b" is not a valid subject"#),
        (
            r#""a": [ { destination: "b", weight: 60 }, { destination: "c", weight: 50 } ]"#,
            "total weight needs to be <= 100",
        ),
        (
            r#""a": [ { destination: "b", weight: 60 }, { destination: "b", weight: 10 } ]"#,
            r#"duplicate entry for "b""#,
        ),
        (
            r#""a": { destination: "b", weight: "x%" }"#,
            r#"Invalid weight "x" for mapping destination"#,
        ),
        (
            r#""a": { destination: "b", weight: 101 }"#,
            "Invalid weight 101 for mapping destination",
        ),
        (
            r#""a": { destination: "b" }"#,
            r#"Missing weight for mapping destination "b""#,
        ),
        (
            r#""a": { destination: "b", weight: 1, bogus: 1 }"#,
            r#"Unknown field "bogus" for mapping destination"#,
        ),
        (
            r#""a.*": "b.{{nope(1)}}""#,
            "unknown function in {{nope(1)}}",
        ),
        (r#""a.*": "b.$2""#, "wildcard index out of range"),
    ] {
        let text = format!("mappings {{\n  {mapping}\n}}\n");
        let said = common::refused_by_server(&text);
        assert!(said.contains(want), "{text}\nwant: {want}\ngot: {said}");
        assert!(said.contains("test.conf:"), "{said}");
    }
}

/// `/accountz` shows a mapping's destinations as nats-server does:
/// lightest first, each weight the running total, what the weights leave
/// on the source.
#[test]
fn accountz_shows_the_mappings() {
    let s = common::server().config(MAPPINGS).start();
    let g = &s.json("/accountz?acc=$G")["account_detail"];
    assert_eq!(
        g["mappings"]["canary"],
        serde_json::json!([{"subject": "v2", "weight": 20}, {"subject": "v1", "weight": 100}]),
        "{g}"
    );
    assert_eq!(
        g["mappings"]["lossy"],
        serde_json::json!([{"subject": "lossy", "weight": 0}]),
        "{g}"
    );
}
