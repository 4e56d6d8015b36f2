//! The `flow_control` ack policy (nats-server 2.14, API level 4): a push
//! consumer acked through its flow-control replies, as a durable source
//! reads its origin. The configs nats-server refuses, and a consumer that
//! asks for flow control once `max_ack_pending` deliveries wait, then
//! takes a reply's `Nats-Last-Stream` as an ack of everything up to it.
//! Runs in every JetStream test mode and against nats-server
//! (`FLOTILLA_TEST_SERVER`).
#[path = "../common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use common::api;
use futures::StreamExt;
use serde_json::{json, Value};

#[tokio::test]
async fn flow_control_ack_configs_nats_server_refuses() {
    let s = common::js_server();
    let c = s.client().await;
    common::create_stream(&c, "S", json!({"name": "S", "subjects": ["s.>"]})).await;
    let consumer = |extra: Value| {
        let mut cfg =
            json!({"durable_name": "C", "deliver_subject": "d", "ack_policy": "flow_control"});
        cfg.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        json!({"stream_name": "S", "config": cfg}).to_string()
    };
    let table = [
        (
            json!({"deliver_subject": null}),
            (
                400,
                10218,
                "flow control ack policy requires a push based consumer",
            ),
        ),
        (
            json!({"max_ack_pending": -1}),
            (
                400,
                10220,
                "flow control ack policy requires max ack pending",
            ),
        ),
        (
            json!({"ack_wait": 5_000_000_000u64}),
            (
                400,
                10221,
                "flow control ack policy requires unset ack wait",
            ),
        ),
        (
            json!({"max_deliver": 3}),
            (
                400,
                10222,
                "flow control ack policy requires unset max deliver",
            ),
        ),
    ];
    for (extra, (code, err_code, text)) in table {
        let body = consumer(extra.clone());
        let r = api(&c, "$JS.API.CONSUMER.CREATE.S.C", &body).await;
        assert_eq!(
            common::api_err(&r),
            (code, err_code, text.to_string()),
            "{extra}: {r}"
        );
    }
    // The defaults: flow control on, a heartbeat of a second, no ack wait.
    let r = api(&c, "$JS.API.CONSUMER.CREATE.S.C", &consumer(json!({}))).await;
    let cfg = &r["config"];
    assert_eq!(cfg["ack_policy"], "flow_control", "{r}");
    assert_eq!(cfg["flow_control"], true, "{r}");
    assert_eq!(cfg["idle_heartbeat"], 1_000_000_000u64, "{r}");
    assert_eq!(cfg["ack_wait"], Value::Null, "{r}");
    assert_eq!(cfg["max_deliver"], -1, "{r}");
    assert_eq!(cfg["metadata"]["_nats.req.level"], "4", "{r}");
}

/// The next message on the deliver subject other than an idle heartbeat.
async fn next_delivery(sub: &mut async_nats::Subscriber) -> async_nats::Message {
    loop {
        let m = tokio::time::timeout(Duration::from_secs(5), sub.next())
            .await
            .expect("a delivery within 5s")
            .unwrap();
        let heartbeat = m.description.as_deref() == Some("Idle Heartbeat");
        if !heartbeat {
            return m;
        }
    }
}

async fn ack_floor(c: &async_nats::Client) -> Value {
    let info = api(c, "$JS.API.CONSUMER.INFO.S.C", "").await;
    info["ack_floor"]["stream_seq"].clone()
}

#[tokio::test]
async fn flow_control_replies_ack_what_they_say_was_received() {
    let s = common::js_server();
    let c = s.client().await;
    common::create_stream(&c, "S", json!({"name": "S", "subjects": ["s.>"]})).await;
    for i in 1..=5 {
        common::js_publish_text(&c, "s.a", &[], format!("m{i}").as_bytes()).await;
    }
    let mut sub = c.subscribe("fc.deliver").await.unwrap();
    common::sync(&c).await;
    let cfg = json!({"stream_name": "S", "config": {
        "durable_name": "C", "deliver_subject": "fc.deliver",
        "ack_policy": "flow_control", "max_ack_pending": 2,
    }});
    let r = api(&c, "$JS.API.CONSUMER.CREATE.S.C", &cfg.to_string()).await;
    assert_eq!(r["config"]["ack_policy"], "flow_control", "{r}");
    // Two deliveries, then a flow-control request: nothing more until a
    // reply says what arrived.
    let mut delivered = Vec::new();
    let mut received = (0, 0);
    for round in 0..3 {
        loop {
            let m = next_delivery(&mut sub).await;
            if m.status.map(|s| s.as_u16()) == Some(100) {
                assert_eq!(m.description.as_deref(), Some("FlowControl Request"));
                let fc = m
                    .reply
                    .expect("a flow-control request has a reply")
                    .to_string();
                assert!(fc.starts_with("$JS.FC.S.C."), "{fc}");
                let mut h = async_nats::HeaderMap::new();
                h.insert("Nats-Last-Stream", received.0.to_string().as_str());
                h.insert("Nats-Last-Consumer", received.1.to_string().as_str());
                c.publish_with_headers(fc, h, "".into()).await.unwrap();
                break;
            }
            let reply = m.reply.expect("a delivery has an ack subject").to_string();
            // $JS.ACK.<stream>.<consumer>.<dc>.<sseq>.<dseq>.<ts>.<pending>
            let tokens: Vec<&str> = reply.split('.').collect();
            received = (tokens[5].parse().unwrap(), tokens[6].parse().unwrap());
            delivered.push(String::from_utf8(m.payload.to_vec()).unwrap());
        }
        let want = received.0;
        let deadline = Instant::now() + Duration::from_secs(5);
        while ack_floor(&c).await != want {
            assert!(
                Instant::now() < deadline,
                "round {round}: ack floor not at {want}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        if received.0 == 5 {
            break;
        }
    }
    assert_eq!(delivered, ["m1", "m2", "m3", "m4", "m5"]);
    let info = api(&c, "$JS.API.CONSUMER.INFO.S.C", "").await;
    assert_eq!(info["num_ack_pending"], 0, "{info}");
}
