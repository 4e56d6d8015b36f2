//! Sources read through a durable consumer on the origin (`consumer` in
//! a source, nats-server 2.14): the configs nats-server refuses, and a
//! source that copies through a user's `flow_control` push consumer,
//! acking the origin only what it stored, and carries on after a crash
//! without copying anything twice. Runs in every JetStream test mode and
//! against nats-server (`FLOTILLA_TEST_SERVER`).
#[path = "../common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use common::api;
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(15);

async fn messages(c: &async_nats::Client, stream: &str) -> u64 {
    common::stream_state(c, stream, "").await["messages"]
        .as_u64()
        .unwrap_or(0)
}

async fn publish(c: &async_nats::Client, n: std::ops::RangeInclusive<u32>) {
    for i in n {
        let ack = common::js_publish_text(c, "origin.a", &[], format!("m{i}").as_bytes()).await;
        assert!(ack.contains("\"seq\""), "{ack}");
    }
}

fn agg(consumer: Value) -> Value {
    json!({"name": "AGG", "sources": [{"name": "ORIGIN", "consumer": consumer}]})
}

#[tokio::test]
async fn durable_source_configs_nats_server_refuses() {
    let s = common::js_server();
    let c = s.client().await;
    common::create_stream(
        &c,
        "ORIGIN",
        json!({"name": "ORIGIN", "subjects": ["origin.>"]}),
    )
    .await;
    let invalid = (
        400,
        10215,
        "stream source consumer config is invalid".to_string(),
    );
    let with_filter = json!({"name": "AGG", "sources": [{
        "name": "ORIGIN", "filter_subject": "origin.a",
        "consumer": {"name": "c", "deliver_subject": "agg.deliver"},
    }]});
    let twice = json!({"name": "AGG", "sources": [
        {"name": "ORIGIN", "consumer": {"name": "c", "deliver_subject": "d1"}},
        {"name": "ORIGIN", "subject_transforms": [{"src": "origin.b", "dest": ""}], "consumer": {"name": "c", "deliver_subject": "d2"}},
    ]});
    let mirror = json!({"name": "AGG", "mirror": {"name": "ORIGIN", "opt_start_seq": 2, "consumer": {"name": "c", "deliver_subject": "d"}}});
    let table = [
        (
            agg(json!({"name": "c", "deliver_subject": "agg.*"})),
            invalid.clone(),
        ),
        (
            agg(json!({"name": "c.d", "deliver_subject": "agg.deliver"})),
            invalid.clone(),
        ),
        (with_filter, invalid.clone()),
        (
            twice,
            (
                400,
                10216,
                "duplicate stream source consumer detected".to_string(),
            ),
        ),
        (
            mirror,
            (
                400,
                10213,
                "stream mirror consumer config is invalid".to_string(),
            ),
        ),
    ];
    for (cfg, want) in table {
        let r = api(&c, "$JS.API.STREAM.CREATE.AGG", &cfg.to_string()).await;
        assert_eq!(common::api_err(&r), want, "{cfg}: {r}");
    }
}

#[tokio::test]
async fn a_source_copies_through_a_durable_consumer_and_acks_what_it_stored() {
    let mut s = common::js_server();
    let c = s.client().await;
    common::create_stream(
        &c,
        "ORIGIN",
        json!({"name": "ORIGIN", "subjects": ["origin.>"]}),
    )
    .await;
    publish(&c, 1..=3).await;
    let consumer = json!({"stream_name": "ORIGIN", "config": {
        "durable_name": "agg-consumer", "deliver_subject": "agg.deliver",
        "ack_policy": "flow_control", "max_ack_pending": 100,
    }});
    let r = api(
        &c,
        "$JS.API.CONSUMER.CREATE.ORIGIN.agg-consumer",
        &consumer.to_string(),
    )
    .await;
    assert_eq!(r["config"]["ack_policy"], "flow_control", "{r}");
    let source = json!({"name": "agg-consumer", "deliver_subject": "agg.deliver"});
    let info = common::create_stream(&c, "AGG", agg(source.clone())).await;
    assert_eq!(info["config"]["sources"][0]["consumer"], source, "{info}");
    common::wait_messages(&c, "AGG", 3, WAIT).await;
    publish(&c, 4..=12).await;
    common::wait_messages(&c, "AGG", 12, WAIT).await;
    // The origin's consumer is acked up to what was copied.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let info = api(&c, "$JS.API.CONSUMER.INFO.ORIGIN.agg-consumer", "").await;
        if info["ack_floor"]["stream_seq"] == 12 {
            break;
        }
        assert!(Instant::now() < deadline, "ack floor: {info}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // A crash: the source carries on, and copies nothing twice.
    drop(c);
    s.kill9();
    s.restart();
    let c = s.client().await;
    publish(&c, 13..=15).await;
    common::wait_messages(&c, "AGG", 15, WAIT).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(messages(&c, "AGG").await, 15);
    let last = api(
        &c,
        "$JS.API.STREAM.MSG.GET.AGG",
        r#"{"last_by_subj":"origin.a"}"#,
    )
    .await;
    let data = common::unb64(last["message"]["data"].as_str().unwrap());
    assert_eq!(data, b"m15", "{last}");
}
