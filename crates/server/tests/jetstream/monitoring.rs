//! `/jsz` and the `jetstream` section of `/varz`.

#[path = "../common/mod.rs"]
mod common;

use async_nats::jetstream::{self, consumer, stream};

#[tokio::test]
async fn jsz_reports_streams_and_consumers() {
    let s = common::one_js_server();
    let js = jetstream::new(s.client().await);
    let st = js
        .create_stream(stream::Config {
            name: "ORDERS".into(),
            subjects: vec!["orders.>".into()],
            max_bytes: 1 << 20,
            ..Default::default()
        })
        .await
        .unwrap();
    st.create_consumer(consumer::pull::Config {
        durable_name: Some("d".into()),
        ..Default::default()
    })
    .await
    .unwrap();
    for i in 0..3 {
        js.publish(format!("orders.{i}"), "x".into())
            .await
            .unwrap()
            .await
            .unwrap();
    }
    // API counters are visible too.
    let _ = js.query_account().await.unwrap();

    let j = s.json("/jsz");
    assert_eq!(j["streams"], 1);
    assert_eq!(j["consumers"], 1);
    assert_eq!(j["messages"], 3);
    assert!(j["bytes"].as_u64().unwrap() > 0);
    assert_eq!(j["reserved_storage"], 1 << 20);
    assert_eq!(j["total"], 1);
    assert!(j["api"]["total"].as_u64().unwrap() >= 3, "{j}");
    assert!(j["config"]["max_storage"].as_i64().unwrap() > 0);
    assert_eq!(j["config"]["sync_always"], true);
    assert!(j["config"]["store_dir"]
        .as_str()
        .unwrap()
        .ends_with("jetstream"));
    assert!(
        j.get("account_details").is_none(),
        "details only when asked: {j}"
    );

    let j = s.json("/jsz?consumers=true&config=true");
    let acc = &j["account_details"][0];
    assert_eq!(acc["name"], "$G");
    let sd = &acc["stream_detail"][0];
    assert_eq!(sd["name"], "ORDERS");
    assert_eq!(sd["state"]["messages"], 3);
    assert_eq!(sd["config"]["subjects"][0], "orders.>");
    let cd = &sd["consumer_detail"][0];
    assert_eq!(cd["name"], "d");
    assert_eq!(cd["num_pending"], 3);
    assert_eq!(cd["config"]["durable_name"], "d");

    let j = s.json("/jsz?streams=1");
    let sd = &j["account_details"][0]["stream_detail"][0];
    assert!(
        sd.get("config").is_none() && sd.get("consumer_detail").is_none(),
        "{sd}"
    );

    let (status, _, body) = s.http("/jsz?streams=maybe");
    assert_eq!(status, 400);
    assert!(
        body.contains("Error decoding boolean for 'streams'"),
        "{body}"
    );

    let v = s.json("/varz");
    assert_eq!(v["jetstream"]["stats"]["reserved_storage"], 1 << 20);
    assert_eq!(v["jetstream"]["stats"]["accounts"], 1);
    assert!(v["jetstream"]["config"]["max_memory"].as_i64().unwrap() > 0);
    assert_eq!(v["jetstream"]["limits"], serde_json::json!({}));
}

#[tokio::test]
async fn jsz_without_jetstream() {
    let s = common::server().start();
    let j = s.json("/jsz");
    assert_eq!(j["disabled"], true);
    assert_eq!(j["streams"], 0);
    let v = s.json("/varz");
    assert_eq!(v["jetstream"], serde_json::json!({}));
}

#[tokio::test]
async fn sync_interval_is_configurable() {
    let dir = tempfile::tempdir().unwrap();
    let s = common::server()
        .config(&format!(
            "jetstream {{ store_dir: \"{}\", sync_interval: \"30s\", max_mem: 1GB }}",
            dir.path().display()
        ))
        .start();
    let js = jetstream::new(s.client().await);
    js.create_stream(stream::Config {
        name: "S".into(),
        ..Default::default()
    })
    .await
    .unwrap();
    let ack = js.publish("S", "x".into()).await.unwrap().await.unwrap();
    assert_eq!(ack.sequence, 1);
    let v = s.json("/varz");
    let cfg = &v["jetstream"]["config"];
    assert_eq!(cfg["sync_interval"], 30_000_000_000u64);
    assert!(cfg.get("sync_always").is_none(), "{cfg}");
    assert_eq!(cfg["max_memory"], 1i64 << 30);
    assert!(s
        .log_text()
        .contains("acknowledged writes since the last sync are lost"));
}
