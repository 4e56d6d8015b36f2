//! The consumer API: CONSUMER.CREATE in all its subject forms, actions,
//! INFO / DELETE / NAMES / LIST / PAUSE, their error codes, and the
//! counters in consumer info. Expectations are nats-server 2.15.1's.

#[path = "../common/mod.rs"]
mod common;
#[path = "../consumer_util/mod.rs"]
mod consumer_util;

use std::time::Duration;

use bytes::Bytes;
use consumer_util::*;
use serde_json::{json, Value};

const CREATE_TYPE: &str = "io.nats.jetstream.api.v1.consumer_create_response";

fn rfc3339_in(d: Duration) -> String {
    let t = time::OffsetDateTime::now_utc() + d;
    t.format(&time::format_description::well_known::Rfc3339)
        .unwrap()
}

#[tokio::test]
async fn legacy_ephemeral_create_generates_a_name() {
    let s = common::js_server();
    let c = s.client().await;
    stream_s(&c).await;
    publish_n(&c, "s.a", 3).await;
    let v = api_json(
        &c,
        "$JS.API.CONSUMER.CREATE.S",
        json!({"stream_name": "S", "config": {"ack_policy": "explicit"}}),
    )
    .await;
    assert_ok(&v);
    assert_eq!(v["type"], CREATE_TYPE);
    assert_eq!(v["stream_name"], "S");
    let name = v["name"].as_str().unwrap().to_string();
    assert_eq!(name.len(), 8, "{v}");
    assert!(name.chars().all(|ch| ch.is_ascii_alphanumeric()), "{name}");
    let cfg = &v["config"];
    // nats-server does not write the generated name into the config.
    assert!(cfg.get("name").is_none(), "{v}");
    assert!(cfg.get("durable_name").is_none(), "{v}");
    // Ephemerals get the 5s inactivity threshold stamped in.
    assert_eq!(cfg["inactive_threshold"], json!(5 * SEC));
    assert_eq!(cfg["ack_wait"], json!(30 * SEC));
    assert_eq!(v["num_pending"], 3);
    assert_eq!(v["delivered"], json!({"consumer_seq": 0, "stream_seq": 0}));
    assert_eq!(v["ack_floor"], json!({"consumer_seq": 0, "stream_seq": 0}));

    // It is listed and has info under that name.
    let i = info(&c, "S", &name).await;
    assert_ok(&i);
    assert_eq!(i["name"], name.as_str());
    let names = api(&c, "$JS.API.CONSUMER.NAMES.S", Bytes::new()).await;
    assert_eq!(names["consumers"], json!([name]));

    // Two legacy ephemeral creates make two consumers.
    let v2 = api_json(
        &c,
        "$JS.API.CONSUMER.CREATE.S",
        json!({"stream_name": "S", "config": {"ack_policy": "explicit"}}),
    )
    .await;
    assert_ok(&v2);
    assert_ne!(v2["name"], v["name"]);
}

#[tokio::test]
async fn legacy_ephemeral_create_uses_the_body_name() {
    let s = common::js_server();
    let c = s.client().await;
    stream_s(&c).await;
    let v = api_json(
        &c,
        "$JS.API.CONSUMER.CREATE.S",
        json!({"stream_name": "S", "config": {"ack_policy": "explicit", "name": "myeph"}}),
    )
    .await;
    assert_ok(&v);
    assert_eq!(v["name"], "myeph");
    assert_eq!(v["config"]["name"], "myeph");
    assert_eq!(v["config"]["inactive_threshold"], json!(5 * SEC));

    // A path separator in the name: 10127. Other bad characters: 10052.
    let v = api_json(
        &c,
        "$JS.API.CONSUMER.CREATE.S",
        json!({"stream_name": "S", "config": {"name": "a/b"}}),
    )
    .await;
    assert_err(
        &v,
        400,
        10127,
        "Consumer name can not contain path separators",
    );
    let v = api_json(
        &c,
        "$JS.API.CONSUMER.CREATE.S",
        json!({"stream_name": "S", "config": {"name": "a b"}}),
    )
    .await;
    assert_err(
        &v,
        500,
        10052,
        "consumer name can not contain '.', '*', '>', '\\', '/'",
    );
    let v = api_json(
        &c,
        "$JS.API.CONSUMER.CREATE.S.c\\x",
        json!({"stream_name": "S", "config": {}}),
    )
    .await;
    assert_err(
        &v,
        400,
        10127,
        "Consumer name can not contain path separators",
    );
}

#[tokio::test]
async fn legacy_ephemeral_with_durable_name_is_10020() {
    let s = common::js_server();
    let c = s.client().await;
    stream_s(&c).await;
    let v = api_json(
        &c,
        "$JS.API.CONSUMER.CREATE.S",
        json!({"stream_name": "S", "config": {"durable_name": "d"}}),
    )
    .await;
    assert_err(
        &v,
        400,
        10020,
        "consumer expected to be ephemeral but a durable name was set in request",
    );
    assert_eq!(v["type"], CREATE_TYPE);
}

#[tokio::test]
async fn named_create_takes_the_name_from_the_subject() {
    let s = common::js_server();
    let c = s.client().await;
    stream_s(&c).await;
    // A different name in the body is silently replaced.
    let v = create(
        &c,
        "S",
        "c1",
        json!({"ack_policy": "explicit", "name": "other"}),
    )
    .await;
    assert_ok(&v);
    assert_eq!(v["name"], "c1");
    assert_eq!(v["config"]["name"], "c1");
    assert!(v["config"].get("durable_name").is_none());
    assert_eq!(v["config"]["inactive_threshold"], json!(5 * SEC));
    let names = api(&c, "$JS.API.CONSUMER.NAMES.S", Bytes::new()).await;
    assert_eq!(names["consumers"], json!(["c1"]));

    // The same durable name as the subject: a durable.
    let v = create(
        &c,
        "S",
        "d1",
        json!({"ack_policy": "explicit", "durable_name": "d1"}),
    )
    .await;
    assert_ok(&v);
    assert_eq!(v["config"]["durable_name"], "d1");
    assert_eq!(v["config"]["name"], "d1");
    assert!(v["config"].get("inactive_threshold").is_none(), "{v}");

    // A different durable name: 10017.
    let v = create(&c, "S", "c2", json!({"durable_name": "d"})).await;
    assert_err(
        &v,
        400,
        10017,
        "consumer name in subject does not match durable name in request",
    );
}

#[tokio::test]
async fn filtered_create_subject_form() {
    let s = common::js_server();
    let c = s.client().await;
    stream_s(&c).await;
    publish(&c, "s.a", "1").await;
    publish(&c, "s.b", "2").await;
    publish(&c, "s.a", "3").await;
    let subj = "$JS.API.CONSUMER.CREATE.S.f1.s.a";
    // No filter in the body counts as a mismatch.
    let v = api_json(&c, subj, json!({"stream_name": "S", "config": {}})).await;
    assert_err(
        &v,
        400,
        10131,
        "Consumer create request did not match filtered subject from create subject",
    );
    let v = api_json(
        &c,
        subj,
        json!({"stream_name": "S", "config": {"filter_subject": "s.b"}}),
    )
    .await;
    assert_err(
        &v,
        400,
        10131,
        "Consumer create request did not match filtered subject from create subject",
    );
    let v = api_json(
        &c,
        subj,
        json!({"stream_name": "S", "config": {"filter_subjects": ["s.a"]}}),
    )
    .await;
    assert_err(
        &v,
        400,
        10137,
        "consumer with multiple subject filters cannot use subject based API",
    );
    let v = api_json(
        &c,
        subj,
        json!({"stream_name": "S", "config": {"filter_subject": "s.a", "ack_policy": "explicit"}}),
    )
    .await;
    assert_ok(&v);
    assert_eq!(v["name"], "f1");
    assert_eq!(v["config"]["filter_subject"], "s.a");
    assert_eq!(v["num_pending"], 2);

    // The filter is every token from the seventh on.
    let v = api_json(
        &c,
        "$JS.API.CONSUMER.CREATE.S.f2.s.a.b.c",
        json!({"stream_name": "S", "config": {"filter_subject": "s.a.b.c"}}),
    )
    .await;
    assert_ok(&v);
    assert_eq!(v["config"]["filter_subject"], "s.a.b.c");
    assert_eq!(v["num_pending"], 0);
}

#[tokio::test]
async fn durable_create_legacy_form() {
    let s = common::js_server();
    let c = s.client().await;
    stream_s(&c).await;
    publish_n(&c, "s.a", 2).await;
    let subj = "$JS.API.CONSUMER.DURABLE.CREATE.S.d1";
    let v = api_json(&c, subj, json!({"stream_name": "S", "config": {}})).await;
    assert_err(
        &v,
        400,
        10018,
        "consumer expected to be durable but a durable name was not set",
    );
    let v = api_json(
        &c,
        subj,
        json!({"stream_name": "S", "config": {"durable_name": "d2"}}),
    )
    .await;
    assert_err(
        &v,
        400,
        10017,
        "consumer name in subject does not match durable name in request",
    );
    let v = api_json(
        &c,
        subj,
        json!({"stream_name": "S", "config": {"durable_name": "d1", "ack_policy": "explicit"}}),
    )
    .await;
    assert_ok(&v);
    assert_eq!(v["type"], CREATE_TYPE);
    assert_eq!(v["name"], "d1");
    assert_eq!(v["config"]["durable_name"], "d1");
    assert_eq!(v["config"]["name"], "d1");
    assert!(v["config"].get("inactive_threshold").is_none(), "{v}");
    assert_eq!(v["num_pending"], 2);
    let v = api_json(
        &c,
        "$JS.API.CONSUMER.DURABLE.CREATE.S.d1",
        json!({"stream_name": "X", "config": {"durable_name": "d1"}}),
    )
    .await;
    assert_err(
        &v,
        400,
        10056,
        "stream name in subject does not match request",
    );
}

/// nats-server only routes `DURABLE.CREATE.<stream>.<durable>` and
/// `CREATE.<stream>[.<name>[.<filter>]]`: with other token counts nothing
/// answers.
#[tokio::test]
async fn durable_create_with_wrong_token_count_gets_no_reply() {
    let s = common::js_server();
    let c = s.client().await;
    stream_s(&c).await;
    for subj in [
        "$JS.API.CONSUMER.DURABLE.CREATE.S",
        "$JS.API.CONSUMER.DURABLE.CREATE.S.d1.x",
        "$JS.API.CONSUMER.CREATE",
    ] {
        let inbox = c.new_inbox();
        let mut sub = c.subscribe(inbox.clone()).await.unwrap();
        c.publish_with_reply(
            subj,
            inbox,
            Bytes::from(json!({"stream_name": "S", "config": {"durable_name": "d1"}}).to_string()),
        )
        .await
        .unwrap();
        c.flush().await.unwrap();
        assert_quiet(&mut sub, Duration::from_millis(500)).await;
    }
    let names = api(&c, "$JS.API.CONSUMER.NAMES.S", Bytes::new()).await;
    assert_eq!(names["total"], 0);
}

#[tokio::test]
async fn stream_name_mismatch_is_10056() {
    let s = common::js_server();
    let c = s.client().await;
    stream_s(&c).await;
    // An empty body decodes as an empty request: its stream name mismatches.
    for subj in ["$JS.API.CONSUMER.CREATE.S", "$JS.API.CONSUMER.CREATE.S.c"] {
        let v = api(&c, subj, Bytes::new()).await;
        assert_err(
            &v,
            400,
            10056,
            "stream name in subject does not match request",
        );
        let v = api_json(&c, subj, json!({"stream_name": "X", "config": {}})).await;
        assert_err(
            &v,
            400,
            10056,
            "stream name in subject does not match request",
        );
    }
    // The mismatch is found before the stream is looked up.
    let v = api_json(
        &c,
        "$JS.API.CONSUMER.CREATE.NOPE.c",
        json!({"stream_name": "S", "config": {}}),
    )
    .await;
    assert_err(
        &v,
        400,
        10056,
        "stream name in subject does not match request",
    );
}

#[tokio::test]
async fn bad_json_is_10025() {
    let s = common::js_server();
    let c = s.client().await;
    stream_s(&c).await;
    let v = api_json(
        &c,
        "$JS.API.CONSUMER.CREATE.S",
        json!({"stream_name": "S", "config": {"ack_policy": "explicit"}, "foo": 1}),
    )
    .await;
    assert_err(&v, 400, 10025, "invalid JSON: json: unknown field \"foo\"");
    let v = api_json(
        &c,
        "$JS.API.CONSUMER.CREATE.S.c1",
        json!({"stream_name": "S", "config": {"ack_wait": "x"}}),
    )
    .await;
    assert_err(
        &v,
        400,
        10025,
        "invalid JSON: json: cannot unmarshal string into Go struct field CreateConsumerRequest.config.ack_wait of type time.Duration",
    );
    let v = api_json(
        &c,
        "$JS.API.CONSUMER.CREATE.S.c1",
        json!({"stream_name": "S", "config": {}, "action": "bogus"}),
    )
    .await;
    assert_err(
        &v,
        400,
        10025,
        "invalid JSON: unknown consumer action: \"bogus\"",
    );
    let v = api_json(
        &c,
        "$JS.API.CONSUMER.CREATE.S.c1",
        json!({"stream_name": "S", "config": {"ack_policy": "bogus"}}),
    )
    .await;
    assert_err(
        &v,
        400,
        10025,
        "invalid JSON: can not unmarshal \"\\\"bogus\\\"\"",
    );
    let v = api_json(
        &c,
        "$JS.API.CONSUMER.CREATE.S.c1",
        json!({"stream_name": "S", "config": {"deliver_policy": "bogus"}}),
    )
    .await;
    assert_err(
        &v,
        400,
        10025,
        "invalid JSON: can not unmarshal \"\\\"bogus\\\"\"",
    );
    let names = api(&c, "$JS.API.CONSUMER.NAMES.S", Bytes::new()).await;
    assert_eq!(names["total"], 0);
}

#[tokio::test]
async fn create_on_a_missing_stream_is_10059() {
    let s = common::js_server();
    let c = s.client().await;
    let v = api_json(
        &c,
        "$JS.API.CONSUMER.CREATE.NOPE.c",
        json!({"stream_name": "NOPE", "config": {}}),
    )
    .await;
    assert_err(&v, 404, 10059, "stream not found");
    let v = api_json(
        &c,
        "$JS.API.CONSUMER.CREATE.NOPE",
        json!({"stream_name": "NOPE", "config": {}}),
    )
    .await;
    assert_err(&v, 404, 10059, "stream not found");
    let v = api_json(
        &c,
        "$JS.API.CONSUMER.DURABLE.CREATE.NOPE.d",
        json!({"stream_name": "NOPE", "config": {"durable_name": "d"}}),
    )
    .await;
    assert_err(&v, 404, 10059, "stream not found");
}

#[tokio::test]
async fn action_create_is_idempotent_but_refuses_a_different_config() {
    let s = common::js_server();
    let c = s.client().await;
    stream_s(&c).await;
    let body = |cfg: Value| json!({"stream_name": "S", "config": cfg, "action": "create"});
    let subj = "$JS.API.CONSUMER.CREATE.S.c1";
    // A durable: the same config again is the existing consumer.
    let dsubj = "$JS.API.CONSUMER.CREATE.S.d1";
    let first = api_json(
        &c,
        dsubj,
        body(json!({"ack_policy": "explicit", "durable_name": "d1"})),
    )
    .await;
    assert_ok(&first);
    let again = api_json(
        &c,
        dsubj,
        body(json!({"ack_policy": "explicit", "durable_name": "d1"})),
    )
    .await;
    assert_ok(&again);
    assert_eq!(again["created"], first["created"]);
    assert_eq!(again["config"], first["config"]);
    let v = api_json(
        &c,
        dsubj,
        body(json!({"ack_policy": "explicit", "durable_name": "d1", "description": "x"})),
    )
    .await;
    assert_err(&v, 400, 10148, "consumer already exists");
    let i = info(&c, "S", "d1").await;
    assert!(i["config"].get("description").is_none(), "{i}");

    // An ephemeral is stored with the 5s inactive threshold stamped in, so
    // the same request again no longer equals it.
    let first = api_json(&c, subj, body(json!({"ack_policy": "explicit"}))).await;
    assert_ok(&first);
    let v = api_json(&c, subj, body(json!({"ack_policy": "explicit"}))).await;
    if common::nats_cluster() {
        // nats-server's cluster compares the request before stamping:
        // equal.
        assert_ok(&v);
        return;
    }
    assert_err(&v, 400, 10148, "consumer already exists");
    // Given with the stamped threshold, it is equal.
    let again = api_json(
        &c,
        subj,
        body(json!({"ack_policy": "explicit", "inactive_threshold": 5 * SEC})),
    )
    .await;
    assert_ok(&again);
    assert_eq!(again["created"], first["created"]);

    // Through async-nats: create_consumer_strict refuses another config,
    // create_consumer (create or update) updates, update_consumer needs
    // an existing consumer.
    let js = async_nats::jetstream::new(c.clone());
    let st = js.get_stream("S").await.unwrap();
    let dur = |desc: Option<&str>| async_nats::jetstream::consumer::pull::Config {
        durable_name: Some("dur".into()),
        description: desc.map(Into::into),
        ..Default::default()
    };
    st.create_consumer_strict(dur(None)).await.unwrap();
    st.create_consumer_strict(dur(None))
        .await
        .expect("same config again");
    assert!(st
        .create_consumer_strict(dur(Some("changed")))
        .await
        .is_err());
    let mut cons = st.create_consumer(dur(Some("changed"))).await.unwrap();
    assert_eq!(
        cons.info().await.unwrap().config.description.as_deref(),
        Some("changed")
    );
    let e = st
        .update_consumer(async_nats::jetstream::consumer::pull::Config {
            durable_name: Some("nope".into()),
            ..Default::default()
        })
        .await;
    assert!(e.is_err(), "update of a missing consumer must fail");
    let v = api_json(
        &c,
        "$JS.API.CONSUMER.CREATE.S.dur",
        json!({"stream_name": "S", "config": {"durable_name": "dur", "ack_policy": "explicit", "description": "y"}, "action": "create"}),
    )
    .await;
    assert_err(&v, 400, 10148, "consumer already exists");
}

#[tokio::test]
async fn action_update_needs_an_existing_consumer() {
    let s = common::js_server();
    let c = s.client().await;
    stream_s(&c).await;
    let subj = "$JS.API.CONSUMER.CREATE.S.c1";
    let v = api_json(
        &c,
        subj,
        json!({"stream_name": "S", "config": {"ack_policy": "explicit"}, "action": "update"}),
    )
    .await;
    assert_err(&v, 400, 10149, "consumer does not exist");
    let v = info(&c, "S", "c1").await;
    assert_err(&v, 404, 10014, "consumer not found");

    create_ok(&c, "S", "c1", json!({"ack_policy": "explicit"})).await;
    let v = api_json(
        &c,
        subj,
        json!({"stream_name": "S", "config": {"ack_policy": "explicit", "description": "x", "max_ack_pending": 7}, "action": "update"}),
    )
    .await;
    assert_ok(&v);
    assert_eq!(v["config"]["description"], "x");
    assert_eq!(v["config"]["max_ack_pending"], 7);
    // The default action (create or update) updates too.
    let v = create_ok(
        &c,
        "S",
        "c1",
        json!({"ack_policy": "explicit", "description": "y"}),
    )
    .await;
    assert_eq!(v["config"]["description"], "y");
    assert_eq!(v["config"]["max_ack_pending"], 1000);
    let i = info(&c, "S", "c1").await;
    assert_eq!(i["config"]["description"], "y");
}

#[tokio::test]
async fn updates_that_cannot_be_made_are_10012() {
    let s = common::js_server();
    let c = s.client().await;
    stream_s(&c).await;
    create_ok(&c, "S", "c1", json!({"ack_policy": "explicit"})).await;
    create_ok(
        &c,
        "S",
        "p1",
        json!({"ack_policy": "explicit", "deliver_subject": "dd"}),
    )
    .await;
    let cases = [
        (
            "c1",
            json!({"ack_policy": "all"}),
            "ack policy can not be updated",
        ),
        (
            "c1",
            json!({"ack_policy": "explicit", "deliver_policy": "new"}),
            "deliver policy can not be updated",
        ),
        (
            "c1",
            json!({"ack_policy": "explicit", "deliver_subject": "dd2"}),
            "can not update pull consumer to push based",
        ),
        (
            "c1",
            json!({"ack_policy": "explicit", "max_waiting": 10}),
            "max waiting can not be updated",
        ),
        (
            "c1",
            json!({"ack_policy": "explicit", "replay_policy": "original"}),
            "replay policy can not be updated",
        ),
        (
            "p1",
            json!({"ack_policy": "explicit"}),
            "can not update push consumer to pull based",
        ),
        (
            "p1",
            json!({"ack_policy": "explicit", "deliver_subject": "dd", "idle_heartbeat": SEC}),
            "heart beats can not be updated",
        ),
    ];
    for (name, cfg, desc) in cases {
        let v = create(&c, "S", name, cfg.clone()).await;
        assert_err(&v, 500, 10012, desc);
    }
}

#[tokio::test]
async fn create_response_fills_in_defaults() {
    let s = common::js_server();
    let c = s.client().await;
    stream_s(&c).await;
    // Pull, explicit ack.
    let v = explicit_durable(&c, "S", "d").await;
    let cfg = &v["config"];
    assert_eq!(cfg["deliver_policy"], "all");
    assert_eq!(cfg["ack_policy"], "explicit");
    assert_eq!(cfg["ack_wait"], json!(30 * SEC));
    assert_eq!(cfg["max_deliver"], -1);
    assert_eq!(cfg["replay_policy"], "instant");
    assert_eq!(cfg["max_waiting"], 512);
    assert_eq!(cfg["max_ack_pending"], 1000);
    assert_eq!(cfg["num_replicas"], 0);
    assert_eq!(cfg["metadata"]["_nats.req.level"], "0");
    assert_eq!(cfg["metadata"]["_nats.ver"], "2.15.1");
    for field in [
        "stream_name",
        "name",
        "created",
        "config",
        "delivered",
        "ack_floor",
        "num_ack_pending",
        "num_redelivered",
        "num_waiting",
        "num_pending",
        "ts",
    ] {
        assert!(v.get(field).is_some(), "{field} missing: {v}");
    }
    // A cluster's answer names the consumer's group.
    match common::clustered() {
        true => common::check_cluster(&v["cluster"]),
        false => assert!(v.get("cluster").is_none(), "{v}"),
    }
    assert!(v.get("push_bound").is_none(), "{v}");
    assert!(v.get("paused").is_none(), "{v}");

    // A missing ack policy means none: no ack wait, no max ack pending.
    let v = create_ok(&c, "S", "n", json!({})).await;
    let cfg = &v["config"];
    assert_eq!(cfg["ack_policy"], "none");
    assert!(cfg.get("ack_wait").is_none(), "{v}");
    assert!(cfg.get("max_ack_pending").is_none(), "{v}");
    assert_eq!(cfg["max_waiting"], 512);

    // Push: no max_waiting.
    let v = create_ok(
        &c,
        "S",
        "p",
        json!({"ack_policy": "explicit", "deliver_subject": "dp"}),
    )
    .await;
    let cfg = &v["config"];
    assert!(cfg.get("max_waiting").is_none(), "{v}");
    assert_eq!(cfg["deliver_subject"], "dp");
    assert_eq!(cfg["max_ack_pending"], 1000);
    assert_eq!(cfg["inactive_threshold"], json!(5 * SEC));

    // Clamps: max_deliver 0 and < -1 become -1; backoff sets ack_wait.
    let v = create_ok(
        &c,
        "S",
        "b",
        json!({"ack_policy": "explicit", "max_deliver": -7, "backoff": [SEC, 2 * SEC], "max_waiting": -3}),
    )
    .await;
    let cfg = &v["config"];
    assert_eq!(cfg["max_deliver"], -1);
    assert_eq!(cfg["ack_wait"], json!(SEC));
    assert_eq!(cfg["backoff"], json!([SEC, 2 * SEC]));
    assert_eq!(cfg["max_waiting"], 512);
}

#[tokio::test]
async fn invalid_configs_are_refused_with_their_codes() {
    let s = common::js_server();
    let c = s.client().await;
    stream_s(&c).await;
    let cases: Vec<(Value, u64, u64, &str)> = vec![
        (
            json!({"ack_policy": "explicit", "idle_heartbeat": SEC}),
            400,
            10088,
            "consumer idle heartbeat requires a push based consumer",
        ),
        (
            json!({"ack_policy": "explicit", "flow_control": true}),
            400,
            10089,
            "consumer flow control requires a push based consumer",
        ),
        (
            json!({"ack_policy": "explicit", "deliver_subject": "d", "max_waiting": 5}),
            400,
            10080,
            "consumer in push mode can not set max waiting",
        ),
        (
            json!({"ack_policy": "explicit", "deliver_subject": "d.*"}),
            400,
            10079,
            "consumer deliver subject has wildcards",
        ),
        (
            json!({"ack_policy": "explicit", "deliver_subject": "s.foo"}),
            400,
            10081,
            "consumer deliver subject forms a cycle",
        ),
        (
            json!({"ack_policy": "explicit", "deliver_subject": "d", "idle_heartbeat": 50 * MS}),
            400,
            10083,
            "consumer idle heartbeat needs to be >= 100ms",
        ),
        (
            json!({"ack_policy": "explicit", "deliver_subject": "d", "flow_control": true}),
            400,
            10108,
            "consumer with flow control also needs heartbeats",
        ),
        (
            json!({"ack_policy": "none", "deliver_subject": "d", "max_ack_pending": 5}),
            400,
            10082,
            "consumer requires ack policy for max ack pending",
        ),
        (
            json!({"ack_policy": "explicit", "filter_subject": "s.a", "filter_subjects": ["s.b"]}),
            400,
            10136,
            "consumer cannot have both FilterSubject and FilterSubjects specified",
        ),
        (
            json!({"ack_policy": "explicit", "filter_subjects": ["s.a", "s.*"]}),
            400,
            10138,
            "consumer subject filters cannot overlap",
        ),
        (
            json!({"ack_policy": "explicit", "filter_subjects": ["s.a", "s.a"]}),
            400,
            10138,
            "consumer subject filters cannot overlap",
        ),
        (
            json!({"ack_policy": "explicit", "filter_subjects": ["s.a", ""]}),
            400,
            10139,
            "consumer filter in FilterSubjects cannot be empty",
        ),
        (
            json!({"ack_policy": "explicit", "filter_subject": "s..a"}),
            500,
            10052,
            "invalid subject",
        ),
        (
            json!({"ack_policy": "explicit", "opt_start_seq": 5}),
            400,
            10094,
            "consumer delivery policy is deliver all, but optional start sequence is also set",
        ),
        (
            json!({"ack_policy": "explicit", "deliver_policy": "new", "opt_start_time": "2020-01-01T00:00:00Z"}),
            400,
            10094,
            "consumer delivery policy is deliver new, but optional start time is also set",
        ),
        (
            json!({"ack_policy": "explicit", "deliver_policy": "by_start_sequence"}),
            400,
            10094,
            "consumer delivery policy is deliver by start sequence, but optional start sequence is not set",
        ),
        (
            json!({"ack_policy": "explicit", "deliver_policy": "by_start_time"}),
            400,
            10094,
            "consumer delivery policy is deliver by start time, but optional start time is not set",
        ),
        (
            json!({"ack_policy": "explicit", "deliver_policy": "last_per_subject"}),
            400,
            10094,
            "consumer delivery policy is deliver last per subject, but optional filter subject is not set",
        ),
        (
            json!({"ack_policy": "explicit", "backoff": [SEC, 2 * SEC], "max_deliver": 1}),
            400,
            10116,
            "max deliver is required to be > length of backoff values",
        ),
        (
            json!({"ack_policy": "explicit", "description": "x".repeat(4097)}),
            400,
            10107,
            "consumer description is too long, maximum allowed is 4096",
        ),
        (
            json!({"ack_policy": "explicit", "max_expires": 100}),
            400,
            10115,
            "consumer max request expires needs to be >= 1ms",
        ),
        (
            json!({"ack_policy": "explicit", "rate_limit_bps": 100}),
            400,
            10086,
            "consumer in pull mode can not have rate limit set",
        ),
        (
            json!({"ack_policy": "explicit", "num_replicas": -1}),
            400,
            10133,
            "replicas count cannot be negative",
        ),
        (
            json!({"ack_policy": "explicit", "ack_wait": -5}),
            400,
            10183,
            "consumer ack wait needs to be positive",
        ),
        (
            json!({"ack_policy": "explicit", "backoff": [-1]}),
            400,
            10184,
            "consumer backoff needs to be positive",
        ),
    ];
    for (cfg, code, err_code, desc) in cases {
        let v = create(&c, "S", "v", cfg.clone()).await;
        assert!(v.get("error").is_some(), "{cfg} accepted: {v}");
        assert_err(&v, code, err_code, desc);
    }
    let names = api(&c, "$JS.API.CONSUMER.NAMES.S", Bytes::new()).await;
    assert_eq!(names["total"], 0, "{names}");
}

#[tokio::test]
async fn max_consumers_is_10026() {
    let s = common::js_server();
    let c = s.client().await;
    stream(
        &c,
        json!({"name": "M", "subjects": ["m.>"], "max_consumers": 2}),
    )
    .await;
    create_ok(&c, "M", "a", json!({})).await;
    create_ok(&c, "M", "b", json!({})).await;
    let v = create(&c, "M", "c", json!({})).await;
    assert_err(&v, 400, 10026, "maximum consumers limit reached");
    // Updating an existing one is not a new consumer.
    let v = create_ok(&c, "M", "a", json!({"description": "upd"})).await;
    assert_eq!(v["config"]["description"], "upd");
    assert_ok(&delete(&c, "M", "b").await);
    create_ok(&c, "M", "c", json!({})).await;
}

#[tokio::test]
async fn info_errors() {
    let s = common::js_server();
    let c = s.client().await;
    stream_s(&c).await;
    create_ok(&c, "S", "c1", json!({"ack_policy": "explicit"})).await;
    let v = info(&c, "S", "nope").await;
    assert_err(&v, 404, 10014, "consumer not found");
    assert_eq!(v["type"], "io.nats.jetstream.api.v1.consumer_info_response");
    let v = info(&c, "NOPE", "c1").await;
    assert_err(&v, 404, 10059, "stream not found");
    let v = api(
        &c,
        "$JS.API.CONSUMER.INFO.S.c1",
        Bytes::from_static(b"{\"a\":1}"),
    )
    .await;
    assert_err(&v, 400, 10038, "expected an empty request payload");
    let v = api(&c, "$JS.API.CONSUMER.INFO.S.c1", Bytes::from_static(b"{}")).await;
    assert_ok(&v);
    assert_eq!(v["type"], "io.nats.jetstream.api.v1.consumer_info_response");
    assert_eq!(v["name"], "c1");
    assert_eq!(v["stream_name"], "S");
}

#[tokio::test]
async fn delete_and_its_errors() {
    let s = common::js_server();
    let c = s.client().await;
    stream_s(&c).await;
    create_ok(&c, "S", "c1", json!({"ack_policy": "explicit"})).await;
    let v = api(
        &c,
        "$JS.API.CONSUMER.DELETE.S.c1",
        Bytes::from_static(b"{\"a\":1}"),
    )
    .await;
    assert_err(&v, 400, 10038, "expected an empty request payload");
    let v = delete(&c, "S", "nope").await;
    assert_err(&v, 404, 10014, "consumer not found");
    let v = delete(&c, "NOPE", "nope").await;
    assert_err(&v, 404, 10059, "stream not found");
    let v = delete(&c, "S", "c1").await;
    assert_eq!(
        v,
        json!({"type": "io.nats.jetstream.api.v1.consumer_delete_response", "success": true})
    );
    let v = info(&c, "S", "c1").await;
    assert_err(&v, 404, 10014, "consumer not found");
    let v = delete(&c, "S", "c1").await;
    assert_err(&v, 404, 10014, "consumer not found");
    // The same name can be created again.
    create_ok(&c, "S", "c1", json!({"ack_policy": "explicit"})).await;
}

#[tokio::test]
async fn names_are_sorted_and_paged() {
    let s = common::js_server();
    let c = s.client().await;
    stream_s(&c).await;
    for n in ["p1", "d1", "f1"] {
        create_ok(&c, "S", n, json!({})).await;
    }
    let v = api(&c, "$JS.API.CONSUMER.NAMES.S", Bytes::new()).await;
    assert_eq!(
        v,
        json!({"type": "io.nats.jetstream.api.v1.consumer_names_response", "total": 3, "offset": 0, "limit": 1024, "consumers": ["d1", "f1", "p1"]})
    );
    let v = api(
        &c,
        "$JS.API.CONSUMER.NAMES.S",
        Bytes::from_static(b"{\"offset\":1}"),
    )
    .await;
    assert_eq!(v["offset"], 1);
    assert_eq!(v["consumers"], json!(["f1", "p1"]));
    let v = api(
        &c,
        "$JS.API.CONSUMER.NAMES.S",
        Bytes::from_static(b"{\"offset\":100}"),
    )
    .await;
    assert_eq!(v["total"], 3);
    assert_eq!(v["offset"], 3);
    assert_eq!(v["consumers"], json!([]));
    let v = api(
        &c,
        "$JS.API.CONSUMER.NAMES.S",
        Bytes::from_static(b"{\"offset\":-5}"),
    )
    .await;
    assert_eq!(v["offset"], 0);
    assert_eq!(v["consumers"], json!(["d1", "f1", "p1"]));
    let v = api(
        &c,
        "$JS.API.CONSUMER.NAMES.S",
        Bytes::from_static(b"{\"bogus\":1}"),
    )
    .await;
    assert_err(
        &v,
        400,
        10025,
        "invalid JSON: json: unknown field \"bogus\"",
    );
    let v = api(&c, "$JS.API.CONSUMER.NAMES.NOPE", Bytes::new()).await;
    assert_eq!(
        v,
        json!({"type": "io.nats.jetstream.api.v1.consumer_names_response", "error": {"code": 404, "err_code": 10059, "description": "stream not found"}, "total": 0, "offset": 0, "limit": 0, "consumers": []})
    );
    let v = api(&c, "$JS.API.CONSUMER.LIST.NOPE", Bytes::new()).await;
    // nats-server's meta leader lists a missing stream's consumers as none.
    let missing = match common::clustered() {
        true => {
            json!({"type": "io.nats.jetstream.api.v1.consumer_list_response", "total": 0, "offset": 0, "limit": 256, "consumers": []})
        }
        false => {
            json!({"type": "io.nats.jetstream.api.v1.consumer_list_response", "error": {"code": 404, "err_code": 10059, "description": "stream not found"}, "total": 0, "offset": 0, "limit": 0, "consumers": []})
        }
    };
    assert_eq!(v, missing);
    // An empty stream lists nothing, as an empty array.
    stream(&c, json!({"name": "E", "subjects": ["e.>"]})).await;
    let v = api(&c, "$JS.API.CONSUMER.NAMES.E", Bytes::new()).await;
    assert_eq!(v["consumers"], json!([]));
    assert_eq!(v["total"], 0);
    let v = api(&c, "$JS.API.CONSUMER.LIST.E", Bytes::new()).await;
    assert_eq!(v["consumers"], json!([]));
    assert_eq!(v["limit"], 256);
}

#[tokio::test]
async fn list_pages_by_256() {
    let s = common::js_server();
    let c = s.client().await;
    stream_s(&c).await;
    publish(&c, "s.x", "x").await;
    let mut names: Vec<String> = (0..260).map(|i| format!("c{i:03}")).collect();
    for n in &names {
        create_ok(&c, "S", n, json!({"ack_policy": "explicit"})).await;
    }
    names.sort();
    let v = api(&c, "$JS.API.CONSUMER.LIST.S", Bytes::new()).await;
    assert_eq!(v["type"], "io.nats.jetstream.api.v1.consumer_list_response");
    assert_eq!(v["total"], 260);
    assert_eq!(v["offset"], 0);
    assert_eq!(v["limit"], 256);
    let page: Vec<&str> = v["consumers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["name"].as_str().unwrap())
        .collect();
    assert_eq!(page.len(), 256);
    assert_eq!(
        page,
        names[..256].iter().map(String::as_str).collect::<Vec<_>>()
    );
    let first = &v["consumers"][0];
    assert_eq!(first["stream_name"], "S");
    assert_eq!(first["num_pending"], 1);
    assert_eq!(first["config"]["ack_policy"], "explicit");
    // Infos in a list carry no version stamps.
    assert!(
        first["config"]["metadata"].get("_nats.ver").is_none(),
        "{first}"
    );
    assert!(first.get("type").is_none());

    let v = api(
        &c,
        "$JS.API.CONSUMER.LIST.S",
        Bytes::from_static(b"{\"offset\":256}"),
    )
    .await;
    assert_eq!(v["offset"], 256);
    let page: Vec<&str> = v["consumers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        page,
        names[256..].iter().map(String::as_str).collect::<Vec<_>>()
    );

    let v = api(&c, "$JS.API.CONSUMER.NAMES.S", Bytes::new()).await;
    assert_eq!(v["total"], 260);
    assert_eq!(v["consumers"].as_array().unwrap().len(), 260);
}

#[tokio::test]
async fn pause_and_resume() {
    let s = common::js_server();
    let c = s.client().await;
    stream_s(&c).await;
    create_ok(&c, "S", "pz", json!({"ack_policy": "explicit"})).await;
    let until = rfc3339_in(Duration::from_secs(30));
    let v = api_json(
        &c,
        "$JS.API.CONSUMER.PAUSE.S.pz",
        json!({"pause_until": until}),
    )
    .await;
    assert_ok(&v);
    assert_eq!(
        v["type"],
        "io.nats.jetstream.api.v1.consumer_pause_response"
    );
    assert_eq!(v["paused"], true);
    let remaining = v["pause_remaining"].as_i64().expect("pause_remaining");
    assert!(remaining > 28 * SEC && remaining <= 30 * SEC, "{v}");
    let i = info(&c, "S", "pz").await;
    assert_eq!(i["paused"], true);
    assert!(i["pause_remaining"].as_i64().unwrap() > 28 * SEC, "{i}");
    assert!(i["config"]["pause_until"].is_string(), "{i}");
    assert_eq!(i["config"]["metadata"]["_nats.req.level"], "1");

    // Paused: a pull request waits.
    publish(&c, "s.a", "1").await;
    let mut sub = pull(&c, "S", "pz", json!({"batch": 1, "expires": 300 * MS})).await;
    let m = recv(&mut sub).await;
    assert_status(&m, 408, "Request Timeout");

    // Create/update cannot change the pause.
    let v = create_ok(
        &c,
        "S",
        "pz",
        json!({"ack_policy": "explicit", "description": "d"}),
    )
    .await;
    assert_eq!(v["paused"], true, "{v}");
    assert_eq!(v["config"]["pause_until"], i["config"]["pause_until"]);

    // An empty body unpauses.
    let v = api(&c, "$JS.API.CONSUMER.PAUSE.S.pz", Bytes::new()).await;
    assert_eq!(
        v,
        json!({"type": "io.nats.jetstream.api.v1.consumer_pause_response", "paused": false, "pause_until": "0001-01-01T00:00:00Z"})
    );
    if common::nats_cluster() {
        // nats-server's cluster answers the unpause before its consumer
        // applies it: an info right after still says paused.
        return;
    }
    let i = info(&c, "S", "pz").await;
    assert!(i.get("paused").is_none(), "{i}");
    assert!(i["config"].get("pause_until").is_none(), "{i}");
    let mut sub = pull(&c, "S", "pz", json!({"batch": 1, "expires": SEC})).await;
    let m = recv(&mut sub).await;
    assert_eq!(m.payload, "1");

    // A time in the past: not paused, echoed back.
    let v = api_json(
        &c,
        "$JS.API.CONSUMER.PAUSE.S.pz",
        json!({"pause_until": "2001-01-01T00:00:00Z"}),
    )
    .await;
    assert_eq!(
        v,
        json!({"type": "io.nats.jetstream.api.v1.consumer_pause_response", "paused": false, "pause_until": "2001-01-01T00:00:00Z"})
    );

    let v = api(&c, "$JS.API.CONSUMER.PAUSE.S.nope", Bytes::new()).await;
    assert_eq!(
        v,
        json!({"type": "io.nats.jetstream.api.v1.consumer_pause_response", "error": {"code": 404, "err_code": 10014, "description": "consumer not found"}, "paused": false, "pause_until": "0001-01-01T00:00:00Z"})
    );
    let v = api(&c, "$JS.API.CONSUMER.PAUSE.NOPE.x", Bytes::new()).await;
    assert_err(&v, 404, 10059, "stream not found");
    let v = api(
        &c,
        "$JS.API.CONSUMER.PAUSE.S.pz",
        Bytes::from_static(b"{\"bogus\":1}"),
    )
    .await;
    assert_err(
        &v,
        400,
        10025,
        "invalid JSON: json: unknown field \"bogus\"",
    );
}

#[tokio::test]
async fn pause_until_in_create_and_expiry() {
    let s = common::js_server();
    let c = s.client().await;
    stream_s(&c).await;
    publish(&c, "s.a", "1").await;
    let until = rfc3339_in(Duration::from_millis(700));
    let v = create_ok(
        &c,
        "S",
        "pc",
        json!({"ack_policy": "explicit", "pause_until": until}),
    )
    .await;
    assert_eq!(v["paused"], true, "{v}");
    assert_eq!(v["config"]["metadata"]["_nats.req.level"], "1");
    let mut sub = pull(&c, "S", "pc", json!({"batch": 1, "expires": 3 * SEC})).await;
    // Nothing while paused; the message once the pause runs out.
    assert_quiet(&mut sub, Duration::from_millis(400)).await;
    let m = recv(&mut sub).await;
    assert_eq!(m.payload, "1");
    assert!(status(&m).is_none());
    let i = info(&c, "S", "pc").await;
    assert!(i.get("paused").is_none(), "{i}");
}

#[tokio::test]
async fn work_queue_rules() {
    let s = common::js_server();
    let c = s.client().await;
    stream(
        &c,
        json!({"name": "WQ", "subjects": ["wq.>"], "retention": "workqueue"}),
    )
    .await;
    let v = create(
        &c,
        "WQ",
        "w1",
        json!({"ack_policy": "none", "deliver_subject": "wqd"}),
    )
    .await;
    assert_err(&v, 400, 10098, "workqueue stream requires explicit ack");
    let v = create(&c, "WQ", "w1", json!({"ack_policy": "none"})).await;
    assert_err(
        &v,
        400,
        10084,
        "consumer in pull mode requires explicit ack policy on workqueue stream",
    );
    let v = create(&c, "WQ", "w1", json!({"ack_policy": "all"})).await;
    assert_err(&v, 400, 10098, "workqueue stream requires explicit ack");
    let v = create(
        &c,
        "WQ",
        "w1",
        json!({"ack_policy": "explicit", "deliver_policy": "new"}),
    )
    .await;
    assert_err(
        &v,
        400,
        10101,
        "consumer must be deliver all on workqueue stream",
    );
    create_ok(&c, "WQ", "w1", json!({"ack_policy": "explicit"})).await;
    let v = create(&c, "WQ", "w2", json!({"ack_policy": "explicit"})).await;
    assert_err(
        &v,
        400,
        10099,
        "multiple non-filtered consumers not allowed on workqueue stream",
    );
    // An unfiltered consumer collides with everything.
    let v = create(
        &c,
        "WQ",
        "w2",
        json!({"ack_policy": "explicit", "filter_subject": "wq.a"}),
    )
    .await;
    assert_err(
        &v,
        400,
        10100,
        "filtered consumer not unique on workqueue stream",
    );
    assert_ok(&delete(&c, "WQ", "w1").await);
    create_ok(
        &c,
        "WQ",
        "w2",
        json!({"ack_policy": "explicit", "filter_subject": "wq.a"}),
    )
    .await;
    let v = create(
        &c,
        "WQ",
        "w3",
        json!({"ack_policy": "explicit", "filter_subject": "wq.*"}),
    )
    .await;
    assert_err(
        &v,
        400,
        10100,
        "filtered consumer not unique on workqueue stream",
    );
    let v = create(
        &c,
        "WQ",
        "w3",
        json!({"ack_policy": "explicit", "filter_subjects": ["wq.b", "wq.a"]}),
    )
    .await;
    assert_err(
        &v,
        400,
        10100,
        "filtered consumer not unique on workqueue stream",
    );
    create_ok(
        &c,
        "WQ",
        "w3",
        json!({"ack_policy": "explicit", "filter_subjects": ["wq.b", "wq.c.>"]}),
    )
    .await;
    if common::nats_cluster() {
        // nats-server's cluster takes, or leaves unanswered, an update of
        // w2 into a colliding filter.
        return;
    }
    // Updating w2 into a colliding filter is refused too.
    let v = create(
        &c,
        "WQ",
        "w2",
        json!({"ack_policy": "explicit", "filter_subject": "wq.>"}),
    )
    .await;
    assert_err(
        &v,
        400,
        10100,
        "filtered consumer not unique on workqueue stream",
    );
    let i = info(&c, "WQ", "w2").await;
    assert_eq!(i["config"]["filter_subject"], "wq.a");
    // An update keeping its own filter is fine.
    create_ok(
        &c,
        "WQ",
        "w2",
        json!({"ack_policy": "explicit", "filter_subject": "wq.a", "description": "x"}),
    )
    .await;
}

#[tokio::test]
async fn info_counters_follow_deliveries_and_acks() {
    let s = common::js_server();
    let c = s.client().await;
    stream_s(&c).await;
    publish_n(&c, "s.a", 5).await;
    let v = create_ok(&c, "S", "c", json!({"ack_policy": "explicit"})).await;
    assert_eq!(v["num_pending"], 5);
    assert_eq!(v["num_ack_pending"], 0);

    let mut sub = pull(&c, "S", "c", json!({"batch": 3})).await;
    let msgs = recv_n(&mut sub, 3).await;
    let seqs: Vec<u64> = msgs.iter().map(|m| ack_info(m).sseq).collect();
    assert_eq!(seqs, [1, 2, 3]);
    let pend: Vec<u64> = msgs.iter().map(|m| ack_info(m).pending).collect();
    assert_eq!(pend, [4, 3, 2]);
    let i = info(&c, "S", "c").await;
    assert_eq!(i["num_pending"], 2);
    assert_eq!(i["num_ack_pending"], 3);
    assert_eq!(i["num_redelivered"], 0);
    assert_eq!(i["num_waiting"], 0);
    assert_eq!(i["delivered"]["consumer_seq"], 3);
    assert_eq!(i["delivered"]["stream_seq"], 3);
    assert!(i["delivered"]["last_active"].is_string(), "{i}");
    assert_eq!(i["ack_floor"], json!({"consumer_seq": 0, "stream_seq": 0}));

    // An ack above the floor does not move it.
    ack_sync(&c, &msgs[1], "+ACK").await;
    let i = info(&c, "S", "c").await;
    assert_eq!(i["num_ack_pending"], 2);
    assert_eq!(i["ack_floor"]["consumer_seq"], 0);
    assert_eq!(i["ack_floor"]["stream_seq"], 0);
    assert!(i["ack_floor"]["last_active"].is_string(), "{i}");
    // Acking the first moves it past the second.
    ack_sync(&c, &msgs[0], "+ACK").await;
    let i = info(&c, "S", "c").await;
    assert_eq!(i["num_ack_pending"], 1);
    assert_eq!(i["ack_floor"]["consumer_seq"], 2);
    assert_eq!(i["ack_floor"]["stream_seq"], 2);

    // A NAK and redelivery: a new consumer sequence, counted as redelivered.
    ack_sync(&c, &msgs[2], "-NAK").await;
    let mut sub = pull(&c, "S", "c", json!({"batch": 1})).await;
    let m = recv(&mut sub).await;
    let a = ack_info(&m);
    assert_eq!((a.dc, a.sseq, a.dseq, a.pending), (2, 3, 4, 2));
    let i = info(&c, "S", "c").await;
    assert_eq!(i["delivered"]["consumer_seq"], 4);
    assert_eq!(i["delivered"]["stream_seq"], 3);
    assert_eq!(i["num_redelivered"], 1);
    assert_eq!(i["num_ack_pending"], 1);
    assert_eq!(i["num_pending"], 2);
    ack_sync(&c, &m, "+ACK").await;
    let i = info(&c, "S", "c").await;
    assert_eq!(i["num_ack_pending"], 0);
    assert_eq!(i["num_redelivered"], 0);
    assert_eq!(i["ack_floor"]["consumer_seq"], 4);
    assert_eq!(i["ack_floor"]["stream_seq"], 3);

    // num_pending grows with new matching messages only.
    create_ok(
        &c,
        "S",
        "f",
        json!({"ack_policy": "explicit", "filter_subject": "s.b"}),
    )
    .await;
    publish(&c, "s.b", "b").await;
    publish(&c, "s.a", "a").await;
    let i = info_until(&c, "S", "c", Duration::from_secs(2), |i| {
        i["num_pending"] == 4
    })
    .await;
    assert_eq!(i["num_pending"], 4);
    let i = info_until(&c, "S", "f", Duration::from_secs(2), |i| {
        i["num_pending"] == 1
    })
    .await;
    assert_eq!(i["num_pending"], 1);
}

#[tokio::test]
async fn deliver_new_starts_after_the_last_message() {
    let s = common::js_server();
    let c = s.client().await;
    stream_s(&c).await;
    publish_n(&c, "s.a", 4).await;
    let v = create_ok(
        &c,
        "S",
        "n",
        json!({"ack_policy": "explicit", "deliver_policy": "new"}),
    )
    .await;
    assert_eq!(v["num_pending"], 0);
    assert_eq!(v["delivered"], json!({"consumer_seq": 0, "stream_seq": 4}));
    assert_eq!(v["ack_floor"], json!({"consumer_seq": 0, "stream_seq": 4}));
    let v = create_ok(
        &c,
        "S",
        "q",
        json!({"ack_policy": "explicit", "deliver_policy": "by_start_sequence", "opt_start_seq": 3}),
    )
    .await;
    assert_eq!(v["num_pending"], 2);
    assert_eq!(v["delivered"], json!({"consumer_seq": 0, "stream_seq": 2}));
    assert_eq!(v["config"]["opt_start_seq"], 3);
}

#[tokio::test]
async fn num_pending_follows_deletes_and_purges() {
    let s = common::js_server();
    let c = s.client().await;
    stream_s(&c).await;
    publish_n(&c, "s.a", 5).await;
    publish_n(&c, "s.b", 2).await;
    create_ok(&c, "S", "c", json!({"ack_policy": "explicit"})).await;
    create_ok(
        &c,
        "S",
        "f",
        json!({"ack_policy": "explicit", "filter_subject": "s.b"}),
    )
    .await;
    let mut sub = pull(&c, "S", "c", json!({"batch": 2})).await;
    let msgs = recv_n(&mut sub, 2).await;
    assert_eq!(info(&c, "S", "c").await["num_pending"], 5);
    // Removing an undelivered matching message counts down.
    let v = api_json(&c, "$JS.API.STREAM.MSG.DELETE.S", json!({"seq": 4})).await;
    assert_ok(&v);
    assert_eq!(info(&c, "S", "c").await["num_pending"], 4);
    assert_eq!(info(&c, "S", "f").await["num_pending"], 2);
    // Removing a pending (delivered, unacked) one drops it from ack pending.
    let v = api_json(&c, "$JS.API.STREAM.MSG.DELETE.S", json!({"seq": 1})).await;
    assert_ok(&v);
    let i = info(&c, "S", "c").await;
    assert_eq!(i["num_pending"], 4);
    if common::nats_cluster() {
        // nats-server's clustered consumer may still count the removed
        // message pending, depending on timing.
        return;
    }
    assert_eq!(i["num_ack_pending"], 1, "{i}");
    // A subject purge.
    let v = api_json(&c, "$JS.API.STREAM.PURGE.S", json!({"filter": "s.b"})).await;
    assert_ok(&v);
    assert_eq!(info(&c, "S", "f").await["num_pending"], 0);
    assert_eq!(info(&c, "S", "c").await["num_pending"], 2);
    // A full purge.
    let v = api(&c, "$JS.API.STREAM.PURGE.S", Bytes::new()).await;
    assert_ok(&v);
    let i = info(&c, "S", "c").await;
    assert_eq!(i["num_pending"], 0);
    assert_eq!(i["num_ack_pending"], 0, "{i}");
    ack_sync(&c, &msgs[1], "+ACK").await;
    publish(&c, "s.a", "new").await;
    let mut sub = pull(&c, "S", "c", json!({"batch": 1})).await;
    let m = recv(&mut sub).await;
    assert_eq!(ack_info(&m).sseq, 8);
}

#[tokio::test]
async fn durable_state_survives_a_restart() {
    let mut s = common::js_server();
    let c = s.client().await;
    stream_s(&c).await;
    publish_n(&c, "s.a", 5).await;
    explicit_durable(&c, "S", "d").await;
    let mut sub = pull(&c, "S", "d", json!({"batch": 3})).await;
    let msgs = recv_n(&mut sub, 3).await;
    ack_sync(&c, &msgs[0], "+ACK").await;
    ack_sync(&c, &msgs[2], "+ACK").await;
    let before = info(&c, "S", "d").await;
    assert_eq!(before["num_ack_pending"], 1);
    drop(c);
    // A clean shutdown, so the server has written consumer state out.
    s.signal(libc::SIGTERM);
    assert!(
        s.wait_exit(Duration::from_secs(10)).is_some(),
        "server did not exit"
    );
    s.restart();
    let c = s.client().await;
    let after = info(&c, "S", "d").await;
    assert_ok(&after);
    for k in ["delivered", "ack_floor"] {
        assert_eq!(
            after[k]["consumer_seq"], before[k]["consumer_seq"],
            "{k}: {after}"
        );
        assert_eq!(
            after[k]["stream_seq"], before[k]["stream_seq"],
            "{k}: {after}"
        );
    }
    assert_eq!(after["num_ack_pending"], 1);
    assert_eq!(after["num_pending"], 2);
    assert_eq!(after["created"], before["created"]);
    assert_eq!(after["config"]["durable_name"], "d");
    // Delivery continues where it was.
    let mut sub = pull(&c, "S", "d", json!({"batch": 5, "no_wait": true})).await;
    let m = recv(&mut sub).await;
    let a = ack_info(&m);
    assert_eq!((a.sseq, a.dseq), (4, 4));
}

#[tokio::test]
async fn reset_moves_a_consumer_and_forgets_what_was_pending() {
    let s = common::js_server();
    let c = s.client().await;
    stream_s(&c).await;
    publish_n(&c, "s.a", 5).await;
    explicit_durable(&c, "S", "c").await;
    let mut sub = pull(&c, "S", "c", json!({"batch": 2})).await;
    let first = recv(&mut sub).await;
    recv(&mut sub).await;
    ack_sync(&c, &first, "+ACK").await;
    // (body, the reset_seq, delivered and ack floor stream sequences)
    let table: [(&str, u64, u64); 3] = [(r#"{"seq":4}"#, 4, 3), ("", 4, 3), (r#"{"seq":2}"#, 2, 1)];
    for (body, reset_seq, floor) in table {
        let v = api(&c, "$JS.API.CONSUMER.RESET.S.c", body.to_string()).await;
        assert_eq!(
            v["type"], "io.nats.jetstream.api.v1.consumer_reset_response",
            "{v}"
        );
        assert_eq!(v["reset_seq"], reset_seq, "{body}: {v}");
        assert_eq!(v["name"], "c", "{v}");
        assert_eq!(v["delivered"]["stream_seq"], floor, "{body}: {v}");
        assert_eq!(v["ack_floor"]["stream_seq"], floor, "{body}: {v}");
        assert_eq!(v["num_ack_pending"], 0, "{body}: {v}");
        assert_eq!(v["num_pending"], 5 - floor, "{body}: {v}");
    }
    // Delivery starts again where it was reset to, as a first delivery.
    let mut sub = pull(&c, "S", "c", json!({"batch": 1})).await;
    let m = recv(&mut sub).await;
    assert_eq!(
        (ack_info(&m).sseq, ack_info(&m).dc, ack_info(&m).dseq),
        (2, 1, 1),
        "{}",
        describe(&m)
    );

    // Refusals: below a configured start, a policy that names no start,
    // bad JSON, a consumer that does not exist.
    let by_seq =
        json!({"durable_name": "from3", "deliver_policy": "by_start_sequence", "opt_start_seq": 3});
    create_ok(&c, "S", "from3", by_seq).await;
    create_ok(
        &c,
        "S",
        "last",
        json!({"durable_name": "last", "deliver_policy": "last"}),
    )
    .await;
    let refusals = [
        (
            "from3",
            r#"{"seq":1}"#,
            (400, 10204, "invalid reset: below start seq"),
        ),
        (
            "last",
            r#"{"seq":1}"#,
            (400, 10204, "invalid reset: not allowed"),
        ),
    ];
    for (consumer, body, (code, err_code, description)) in refusals {
        let v = api(
            &c,
            &format!("$JS.API.CONSUMER.RESET.S.{consumer}"),
            body.to_string(),
        )
        .await;
        assert_err(&v, code, err_code, description);
        assert_eq!(v["reset_seq"], 0, "{v}");
    }
    let v = api(&c, "$JS.API.CONSUMER.RESET.S.from3", "{".to_string()).await;
    assert_eq!(v["error"]["err_code"], 10025, "{v}");
    // As in nats-server, only the consumer answers: for one that does not
    // exist the request times out.
    let missing = tokio::time::timeout(
        Duration::from_millis(500),
        c.request("$JS.API.CONSUMER.RESET.S.nobody", Bytes::new()),
    )
    .await;
    assert!(missing.is_err(), "{missing:?}");
}
