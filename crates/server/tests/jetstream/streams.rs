//! JetStream stream CRUD over the real API: create, update, delete,
//! names, list and info, with their error replies. Expectations are what
//! nats-server 2.15.1 answers to the same requests.
#[path = "../common/mod.rs"]
mod common;

use std::time::Duration;

use async_nats::jetstream::{self, stream};
use common::{api, api_error_body, scrub};
use futures::{StreamExt, TryStreamExt};
use serde_json::{json, Value};

/// The body async-nats sends for `Config { name, subjects, ..Default }`.
fn client_body(name: &str, subjects: &[&str]) -> String {
    json!({
        "name": name, "max_bytes": 0, "max_msgs": 0, "max_msgs_per_subject": 0,
        "discard": "old", "subjects": subjects, "retention": "limits",
        "max_consumers": 0, "max_age": 0, "storage": "file", "num_replicas": 0,
        "consumer_limits": null
    })
    .to_string()
}

/// The config nats-server stores for a stream created with all defaults.
fn default_config(name: &str, subjects: &[&str]) -> Value {
    json!({
        "name": name, "subjects": subjects, "retention": "limits",
        "max_consumers": -1, "max_msgs": -1, "max_bytes": -1, "max_age": 0,
        "max_msgs_per_subject": -1, "max_msg_size": -1, "discard": "old",
        "storage": "file", "num_replicas": common::replicas(), "duplicate_window": 120_000_000_000u64,
        "compression": "none", "allow_direct": false, "mirror_direct": false,
        "sealed": false, "deny_delete": false, "deny_purge": false,
        "allow_rollup_hdrs": false, "consumer_limits": {}, "allow_msg_ttl": false,
        "metadata": {"_nats.req.level": "0", "_nats.ver": "2.15.1"}
    })
}

fn empty_state() -> Value {
    json!({
        "messages": 0, "bytes": 0, "first_seq": 0, "first_ts": "0001-01-01T00:00:00Z",
        "last_seq": 0, "last_ts": "0001-01-01T00:00:00Z", "consumer_count": 0
    })
}

async fn create(c: &async_nats::Client, name: &str, cfg: Value) -> Value {
    api(
        c,
        &format!("$JS.API.STREAM.CREATE.{name}"),
        &cfg.to_string(),
    )
    .await
}

async fn create_ok(c: &async_nats::Client, name: &str, cfg: Value) -> Value {
    let r = create(c, name, cfg).await;
    assert!(r.get("error").is_none(), "create {name}: {r}");
    r
}

async fn publish(c: &async_nats::Client, subject: &str, payload: &str) -> Value {
    let m = common::js_publish_raw(c, subject, &[], payload.as_bytes()).await;
    serde_json::from_slice(&m.payload).expect("ack json")
}

#[tokio::test]
async fn create_returns_normalised_config_and_empty_state() {
    let s = common::js_server();
    let c = s.client().await;
    let mut r = api(&c, "$JS.API.STREAM.CREATE.S", &client_body("S", &["s.>"])).await;
    scrub(&mut r);
    assert_eq!(
        r,
        common::clustered_asset(json!({
            "type": "io.nats.jetstream.api.v1.stream_create_response",
            "config": default_config("S", &["s.>"]),
            "created": "<ts>",
            "state": empty_state(),
            "ts": "<ts>",
            "did_create": true
        }))
    );
}

#[tokio::test]
async fn json_is_written_as_go_writes_it() {
    let s = common::js_server();
    let c = s.client().await;
    // Go's encoding/json escapes <, > and & in strings.
    let m = c
        .request(
            "$JS.API.STREAM.CREATE.S",
            client_body("S", &["s.>", "a&b.<x>"]).into(),
        )
        .await
        .unwrap();
    let text = String::from_utf8(m.payload.to_vec()).unwrap();
    assert!(
        text.contains(r#""subjects":["s.\u003e","a\u0026b.\u003cx\u003e"]"#),
        "{text}"
    );
    // Fields come in Go's struct order.
    let at = |k: &str| {
        text.find(&format!("\"{k}\":"))
            .unwrap_or_else(|| panic!("{k} in {text}"))
    };
    assert!(
        at("type") < at("config") && at("config") < at("created"),
        "{text}"
    );
    assert!(
        at("created") < at("state") && at("state") < at("ts") && at("ts") < at("did_create"),
        "{text}"
    );
    assert!(
        at("name") < at("subjects") && at("subjects") < at("retention"),
        "{text}"
    );
    assert!(
        at("consumer_limits") < at("allow_msg_ttl") && at("allow_msg_ttl") < at("metadata"),
        "{text}"
    );
    let m = c
        .request("$JS.API.STREAM.INFO.NOPE", "".into())
        .await
        .unwrap();
    assert_eq!(
        &m.payload[..],
        br#"{"type":"io.nats.jetstream.api.v1.stream_info_response","error":{"code":404,"err_code":10059,"description":"stream not found"},"total":0,"offset":0,"limit":0}"#
    );
    let m = c.request("$JS.API.STREAM.NAMES", "".into()).await.unwrap();
    assert_eq!(
        &m.payload[..],
        br#"{"type":"io.nats.jetstream.api.v1.stream_names_response","total":1,"offset":0,"limit":1024,"streams":["S"]}"#
    );
}

#[tokio::test]
async fn info_has_paging_zeros_and_cluster_leader() {
    let s = common::js_server();
    let c = s.client().await;
    create_ok(&c, "S", json!({"name": "S", "subjects": ["s.>"]})).await;
    // async-nats sends `null` for a plain info request.
    let mut r = api(&c, "$JS.API.STREAM.INFO.S", "null").await;
    scrub(&mut r);
    assert_eq!(
        r,
        json!({
            "type": "io.nats.jetstream.api.v1.stream_info_response",
            "total": 0, "offset": 0, "limit": 0,
            "config": default_config("S", &["s.>"]),
            "created": "<ts>",
            "state": empty_state(),
            "cluster": "<cluster>",
            "ts": "<ts>"
        })
    );
    // An empty body, and a body that is not a JSON object, mean no request.
    for body in ["", "garbage"] {
        let r = api(&c, "$JS.API.STREAM.INFO.S", body).await;
        assert_eq!(r["config"]["name"], "S", "body {body:?}: {r}");
        assert!(r.get("error").is_none(), "body {body:?}: {r}");
    }
}

#[tokio::test]
async fn info_errors() {
    let s = common::js_server();
    let c = s.client().await;
    create_ok(&c, "S", json!({"name": "S"})).await;
    let paged = json!({"total": 0, "offset": 0, "limit": 0});
    let cases = [
        ("NOPE", "null", 404, 10059, "stream not found"),
        ("NOPE", "", 404, 10059, "stream not found"),
        ("S", r#"{"bogus":1}"#, 400, 10025, "invalid JSON: json: unknown field \"bogus\""),
        // Strict decoding runs before the stream is looked up.
        // A cluster's meta leader says the stream is not there before it
        // reads the body.
        if common::clustered() {
            ("NOPE", r#"{"bogus":1}"#, 404, 10059, "stream not found")
        } else {
            ("NOPE", r#"{"bogus":1}"#, 400, 10025, "invalid JSON: json: unknown field \"bogus\"")
        },
        (
            "S",
            "[]",
            400,
            10025,
            "invalid JSON: json: cannot unmarshal array into Go value of type server.JSApiStreamInfoRequest",
        ),
    ];
    let mut checks = common::Checks::default();
    for (name, body, code, err_code, desc) in cases {
        let r = api(&c, &format!("$JS.API.STREAM.INFO.{name}"), body).await;
        checks.json(
            &r,
            &api_error_body("stream_info_response", code, err_code, desc, paged.clone()),
            format!("INFO.{name} {body:?}"),
        );
    }
    checks.done();
}

#[tokio::test]
async fn create_same_config_again_is_idempotent() {
    let s = common::js_server();
    let c = s.client().await;
    let first = create_ok(
        &c,
        "S",
        json!({"name": "S", "subjects": ["s"], "max_bytes": 1000}),
    )
    .await;
    let m = common::js_publish_raw(&c, "s", &[], b"hello").await;
    assert_eq!(&m.payload[..], br#"{"stream":"S","seq":1}"#);
    // The same config, and the same config with the defaults spelled out.
    for body in [
        json!({"name": "S", "subjects": ["s"], "max_bytes": 1000}),
        json!({"name": "S", "subjects": ["s"], "max_bytes": 1000, "max_msgs": -1,
               "duplicate_window": 120_000_000_000u64, "storage": "file", "discard": "old"}),
    ] {
        let again = create(&c, "S", body.clone()).await;
        assert!(again.get("error").is_none(), "{body}: {again}");
        assert_eq!(
            again["type"],
            "io.nats.jetstream.api.v1.stream_create_response"
        );
        assert_eq!(again["created"], first["created"], "{again}");
        assert_eq!(again["state"]["messages"], 1, "{again}");
        assert_eq!(again["state"]["last_seq"], 1, "{again}");
        if common::clustered() {
            // nats-server's meta leader has the stream's leader answer, with
            // its info: the cluster block, and no `did_create`.
            assert!(again.get("did_create").is_none(), "{again}");
            common::check_cluster(&again["cluster"]);
        } else {
            assert_eq!(again["did_create"], true, "{again}");
            assert!(again.get("cluster").is_none(), "{again}");
        }
    }
    // Any difference is a conflict.
    for body in [
        json!({"name": "S", "subjects": ["s"], "max_bytes": 1000, "metadata": {"x": "y"}}),
        json!({"name": "S", "subjects": ["s"], "max_bytes": 1000, "description": "d"}),
        json!({"name": "S", "subjects": ["s"]}),
    ] {
        let r = create(&c, "S", body.clone()).await;
        assert_eq!(
            r,
            api_error_body(
                "stream_create_response",
                400,
                10058,
                "stream name already in use with a different configuration",
                json!({})
            ),
            "{body}"
        );
    }
}

#[tokio::test]
async fn create_name_checks() {
    let s = common::js_server();
    let c = s.client().await;
    let long = "X".repeat(256);
    let cases: Vec<(String, String, u64, u64, &str)> = vec![
        (
            "A".into(),
            r#"{"name":"B"}"#.into(),
            400,
            10056,
            "stream name in subject does not match request",
        ),
        (
            "A".into(),
            "".into(),
            400,
            10056,
            "stream name in subject does not match request",
        ),
        (
            "A".into(),
            "{}".into(),
            400,
            10056,
            "stream name in subject does not match request",
        ),
        (
            "a*b".into(),
            r#"{"name":"a*b"}"#.into(),
            500,
            10052,
            "stream name is required and can not contain '.', '*', '>', '\\', '/'",
        ),
        (
            "a/b".into(),
            r#"{"name":"a/b"}"#.into(),
            400,
            10128,
            "Stream name can not contain path separators",
        ),
        (
            r"a\b".into(),
            r#"{"name":"a\\b"}"#.into(),
            400,
            10128,
            "Stream name can not contain path separators",
        ),
        (
            long.clone(),
            json!({ "name": long }).to_string(),
            500,
            10052,
            "stream name is too long, maximum allowed is 255",
        ),
    ];
    let mut checks = common::Checks::default();
    for (name, body, code, err_code, desc) in cases {
        let r = api(&c, &format!("$JS.API.STREAM.CREATE.{name}"), &body).await;
        checks.json(
            &r,
            &api_error_body("stream_create_response", code, err_code, desc, json!({})),
            format!("CREATE.{name} {body}"),
        );
    }
    checks.done();
    let names = api(&c, "$JS.API.STREAM.NAMES", "").await;
    assert_eq!(names["total"], 0, "{names}");
}

#[tokio::test]
async fn create_rejects_bad_json() {
    let s = common::js_server();
    let c = s.client().await;
    let cases = [
        (r#"{"name":"A","bogus":1}"#, "invalid JSON: json: unknown field \"bogus\""),
        (r#"{"name":"A","#, "invalid JSON: unexpected EOF"),
        (r#"{"name":"A"} x"#, "invalid JSON: invalid character 'x' looking for beginning of value at offset 14"),
        ("xyz", "invalid JSON: invalid character 'x' looking for beginning of value at offset 1"),
        (
            r#"{"name":1}"#,
            "invalid JSON: json: cannot unmarshal number into Go struct field StreamConfigRequest.name of type string",
        ),
        (r#"{"name":"A","retention":"foo"}"#, r#"invalid JSON: can not unmarshal "\"foo\"""#),
        (r#"{"name":"A","discard":"foo"}"#, r#"invalid JSON: can not unmarshal "\"foo\"""#),
        (r#"{"name":"A","storage":"foo"}"#, r#"invalid JSON: can not unmarshal "\"foo\"""#),
        (r#"{"name":"A","compression":"zzz"}"#, "invalid JSON: unknown compression algorithm"),
    ];
    let mut checks = common::Checks::default();
    for (body, desc) in cases {
        let r = api(&c, "$JS.API.STREAM.CREATE.A", body).await;
        checks.json(
            &r,
            &api_error_body("stream_create_response", 400, 10025, desc, json!({})),
            body,
        );
    }
    checks.done();
    // The discard policy is read case-insensitively.
    let r = create_ok(&c, "A", json!({"name": "A", "discard": "NEW"})).await;
    assert_eq!(r["config"]["discard"], "new");
}

#[tokio::test]
async fn create_rejects_invalid_limits() {
    let s = common::js_server();
    let c = s.client().await;
    let mut cases = vec![
        (
            json!({"sealed": true}),
            500,
            10052,
            "stream configuration for create can not be sealed",
        ),
        (
            json!({"mirror_direct": true}),
            500,
            10052,
            "stream has no mirror but does have mirror direct",
        ),
        (
            json!({"max_age": -1}),
            500,
            10052,
            "max age can not be negative",
        ),
        (
            json!({"max_age": 50_000_000}),
            500,
            10052,
            "max age needs to be >= 100ms",
        ),
        (
            json!({"duplicate_window": -1}),
            500,
            10052,
            "duplicates window can not be negative",
        ),
        (
            json!({"duplicate_window": 50_000_000}),
            500,
            10052,
            "duplicates window needs to be >= 100ms",
        ),
        (
            json!({"max_age": 1_000_000_000, "duplicate_window": 2_000_000_000}),
            500,
            10052,
            "duplicates window can not be larger then max age",
        ),
        (
            json!({"num_replicas": 3}),
            500,
            10074,
            "replicas > 1 not supported in non-clustered mode",
        ),
        (
            json!({"num_replicas": 6}),
            500,
            10052,
            "maximum replicas is 5",
        ),
        (
            json!({"num_replicas": -1}),
            400,
            10133,
            "replicas count cannot be negative",
        ),
        (
            json!({"description": "x".repeat(4097)}),
            500,
            10052,
            "stream description is too long, maximum allowed is 4096",
        ),
        (
            json!({"metadata": {"k": "v".repeat(131_072)}}),
            500,
            10052,
            "stream metadata exceeds maximum size of 131072 bytes",
        ),
        (
            json!({"deny_purge": true, "allow_rollup_hdrs": true}),
            500,
            10052,
            "roll-ups require the purge permission",
        ),
        (
            json!({"discard_new_per_subject": true}),
            500,
            10052,
            "discard new per subject requires discard new policy to be set",
        ),
        (
            json!({"discard_new_per_subject": true, "discard": "new"}),
            500,
            10052,
            "discard new per subject requires max msgs per subject > 0",
        ),
        (
            json!({"max_msgs": -5, "pedantic": true}),
            400,
            10157,
            "pedantic mode: max_msgs must be set to -1",
        ),
        (
            json!({"subject_delete_marker_ttl": 500_000_000}),
            500,
            10052,
            "subject delete marker TTL must be at least 1 second",
        ),
        (
            json!({"subject_delete_marker_ttl": -1}),
            500,
            10052,
            "subject delete marker TTL must not be negative",
        ),
        (
            json!({"placement": {"preferred": "x"}}),
            500,
            10052,
            "preferred server not permitted in placement",
        ),
    ];
    // A cluster takes more than one replica.
    if common::clustered() {
        cases.retain(|case| case.2 != 10074);
    }
    let mut checks = common::Checks::default();
    for (extra, code, err_code, desc) in cases {
        let mut body = json!({"name": "A"});
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        let r = create(&c, "A", body.clone()).await;
        checks.json(
            &r,
            &api_error_body("stream_create_response", code, err_code, desc, json!({})),
            format!("{body}"),
        );
    }
    checks.done();
    let names = api(&c, "$JS.API.STREAM.NAMES", "").await;
    assert_eq!(
        names["streams"],
        Value::Null,
        "nothing was created: {names}"
    );
}

#[tokio::test]
async fn create_rejects_invalid_subjects() {
    let s = common::js_server();
    let c = s.client().await;
    let cases = [
        (json!({"subjects": ["a", "a"]}), 500, 10052, r#"subject "a" overlaps with "a""#),
        (json!({"subjects": ["a.*", "a.b"]}), 500, 10052, r#"subject "a.*" overlaps with "a.b""#),
        (json!({"subjects": ["a..b"]}), 500, 10052, "invalid subject"),
        (json!({"subjects": [">"]}), 500, 10052, "capturing all subjects requires no-ack to be true"),
        (
            json!({"subjects": ["$JS.API.>"]}),
            500,
            10052,
            "subjects that overlap with jetstream api require no-ack to be true",
        ),
        (
            json!({"subjects": ["$SYS.>"]}),
            500,
            10052,
            "subjects that overlap with system api require no-ack to be true",
        ),
        (
            json!({"subject_transform": {"src": "a.*", "dest": "b.{{wildcard(2)}}"}}),
            400,
            10156,
            "stream transform: invalid mapping destination: wildcard index out of range in {{wildcard(2)}}: [2]",
        ),
        (
            json!({"subject_transform": {"src": "a..", "dest": "b"}}),
            400,
            10155,
            "stream transform source: invalid subject a..",
        ),
        (
            json!({"republish": {"src": "A", "dest": "A"}}),
            500,
            10052,
            "stream configuration for republish destination forms a cycle",
        ),
        (
            json!({"subjects": ["r4"], "republish": {"dest": "r4"}}),
            500,
            10052,
            "stream configuration for republish destination forms a cycle",
        ),
        (
            json!({"subjects": ["foo.*"], "republish": {"src": "foo.*", "dest": "x.{{wildcard(2)}}"}}),
            500,
            10052,
            "stream configuration for republish with transform from 'foo.*' to 'x.{{wildcard(2)}}' not valid",
        ),
    ];
    let mut checks = common::Checks::default();
    for (extra, code, err_code, desc) in cases {
        let mut body = json!({"name": "A"});
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        let r = create(&c, "A", body.clone()).await;
        checks.json(
            &r,
            &api_error_body("stream_create_response", code, err_code, desc, json!({})),
            format!("{body}"),
        );
    }
    checks.done();
}

#[tokio::test]
async fn create_fills_defaults() {
    let s = common::js_server();
    let c = s.client().await;
    // No subjects: the stream's name. max_age below the default duplicate
    // window: the window shrinks to max_age.
    let r = create_ok(
        &c,
        "D",
        json!({"name": "D", "description": "hello", "max_age": 1_000_000_000}),
    )
    .await;
    let cfg = &r["config"];
    assert_eq!(cfg["subjects"], json!(["D"]));
    assert_eq!(cfg["description"], "hello");
    assert_eq!(cfg["max_age"], 1_000_000_000u64);
    assert_eq!(cfg["duplicate_window"], 1_000_000_000u64);
    // An empty placement is dropped; a republish without src gets ">".
    let r = create_ok(&c, "P", json!({"name": "P", "placement": {}})).await;
    assert!(r["config"].get("placement").is_none(), "{r}");
    let r = create_ok(
        &c,
        "R1",
        json!({"name": "R1", "republish": {"src": ">", "dest": "x.>"}}),
    )
    .await;
    assert_eq!(r["config"]["republish"], json!({"src": ">", "dest": "x.>"}));
    // first_seq: the store starts there.
    let r = create_ok(&c, "F", json!({"name": "F", "first_seq": 100})).await;
    assert_eq!(r["config"]["first_seq"], 100);
    assert_eq!(r["state"]["first_seq"], 100);
    assert_eq!(r["state"]["last_seq"], 99);
    assert_eq!(r["state"]["messages"], 0);
    // A subject delete marker TTL turns on message TTLs and roll-ups.
    let r = create_ok(
        &c,
        "T2",
        json!({"name": "T2", "subject_delete_marker_ttl": 1_000_000_000}),
    )
    .await;
    assert_eq!(r["config"]["allow_msg_ttl"], true, "{r}");
    assert_eq!(r["config"]["allow_rollup_hdrs"], true, "{r}");
    assert_eq!(
        r["config"]["subject_delete_marker_ttl"], 1_000_000_000u64,
        "{r}"
    );
    assert_eq!(r["config"]["metadata"]["_nats.req.level"], "1", "{r}");
    // no_ack is emitted only when set.
    let r = create_ok(&c, "N", json!({"name": "N", "no_ack": true})).await;
    assert_eq!(r["config"]["no_ack"], true);
    let r = api(&c, "$JS.API.STREAM.INFO.D", "").await;
    assert!(r["config"].get("no_ack").is_none(), "{r}");
}

#[tokio::test]
async fn metadata_versioning_keys() {
    let s = common::js_server();
    let c = s.client().await;
    // Keys a client sends under `_nats.` are replaced by the server's.
    let r = create_ok(
        &c,
        "M",
        json!({"name": "M", "metadata": {"k": "v", "_nats.ver": "9", "_nats.level": "9", "_nats.req.level": "7"}}),
    )
    .await;
    let md = r["config"]["metadata"].as_object().unwrap();
    assert_eq!(md["k"], "v");
    assert_eq!(md["_nats.req.level"], "0");
    assert_eq!(md["_nats.ver"], "2.15.1");
    assert!(md.contains_key("_nats.level"), "{r}");
    assert_eq!(md.len(), 4, "{r}");
    // Per-message TTLs need API level 1.
    let r = create_ok(&c, "T", json!({"name": "T", "allow_msg_ttl": true})).await;
    assert_eq!(r["config"]["metadata"]["_nats.req.level"], "1");
    // LIST returns the stored config: no `_nats.ver` / `_nats.level`.
    let r = api(&c, "$JS.API.STREAM.LIST", "").await;
    assert_eq!(
        r["streams"][0]["config"]["metadata"],
        json!({"_nats.req.level": "0", "k": "v"})
    );
    assert_eq!(
        r["streams"][1]["config"]["metadata"],
        json!({"_nats.req.level": "1"})
    );
    // INFO adds them again.
    let r = api(&c, "$JS.API.STREAM.INFO.M", "").await;
    assert_eq!(r["config"]["metadata"]["_nats.ver"], "2.15.1");
    assert_eq!(r["config"]["metadata"]["k"], "v");
}

#[tokio::test]
async fn create_subjects_overlapping_another_stream() {
    let s = common::js_server();
    let c = s.client().await;
    create_ok(&c, "O", json!({"name": "O", "subjects": ["o.*"]})).await;
    let overlap = api_error_body(
        "stream_create_response",
        400,
        10065,
        "subjects overlap with an existing stream",
        json!({}),
    );
    for subjects in [json!(["o.>"]), json!(["o.x"]), json!(["p", "o.*"])] {
        let r = create(&c, "O2", json!({"name": "O2", "subjects": subjects})).await;
        assert_eq!(r, overlap, "{subjects}");
    }
    // Disjoint subjects are fine.
    create_ok(&c, "O2", json!({"name": "O2", "subjects": ["o.x.y", "p"]})).await;
}

#[tokio::test]
async fn update_changes_subjects_and_applies_limits() {
    let s = common::js_server();
    let c = s.client().await;
    create_ok(
        &c,
        "U",
        json!({"name": "U", "subjects": ["u.>"], "max_msgs": 10}),
    )
    .await;
    for i in 0..5 {
        let ack = publish(&c, &format!("u.{i}"), "x").await;
        assert_eq!(ack["seq"], i + 1);
    }
    let mut r = api(
        &c,
        "$JS.API.STREAM.UPDATE.U",
        &json!({"name": "U", "subjects": ["u.>", "v.>"], "max_msgs": 3}).to_string(),
    )
    .await;
    scrub(&mut r);
    // Byte accounting has its own tests (js_publish::byte_accounting).
    r["state"].as_object_mut().unwrap().remove("bytes");
    let mut cfg = default_config("U", &["u.>", "v.>"]);
    cfg["max_msgs"] = json!(3);
    assert_eq!(
        r,
        common::clustered_asset(json!({
            "type": "io.nats.jetstream.api.v1.stream_update_response",
            "config": cfg,
            "created": "<ts>",
            "state": {"messages": 3, "first_seq": 3, "first_ts": "<ts>",
                      "last_seq": 5, "last_ts": "<ts>", "num_subjects": 3, "consumer_count": 0},
            "ts": "<ts>"
        }))
    );
    // The new subject is captured.
    let ack = publish(&c, "v.1", "x").await;
    assert_eq!(ack, json!({"stream": "U", "seq": 6}));
}

#[tokio::test]
async fn update_refusals() {
    let s = common::js_server();
    let c = s.client().await;
    create_ok(&c, "U", json!({"name": "U", "subjects": ["u.>"]})).await;
    create_ok(&c, "O", json!({"name": "O", "subjects": ["o.*"]})).await;
    create_ok(
        &c,
        "DD",
        json!({"name": "DD", "deny_delete": true, "deny_purge": true, "allow_msg_ttl": true}),
    )
    .await;
    let mut cases: Vec<(&str, String, u64, u64, &str)> = vec![
        (
            "U",
            json!({"name": "U", "subjects": ["u.>"], "storage": "memory"}).to_string(),
            500,
            10052,
            "stream configuration update can not change storage type",
        ),
        (
            "U",
            json!({"name": "U", "subjects": ["u.>"], "retention": "workqueue"}).to_string(),
            500,
            10052,
            "stream configuration update can not change retention policy to/from workqueue",
        ),
        (
            "U",
            json!({"name": "X"}).to_string(),
            400,
            10056,
            "stream name in subject does not match request",
        ),
        (
            "NOPE",
            json!({"name": "NOPE"}).to_string(),
            404,
            10059,
            "stream not found",
        ),
        (
            "U",
            json!({"name": "U", "subjects": ["u.>"], "num_replicas": 3}).to_string(),
            500,
            10074,
            "replicas > 1 not supported in non-clustered mode",
        ),
        (
            "U",
            json!({"name": "U", "bogus": 3}).to_string(),
            400,
            10025,
            "invalid JSON: json: unknown field \"bogus\"",
        ),
        (
            "U",
            String::new(),
            500,
            10052,
            "stream name is required and can not contain '.', '*', '>', '\\', '/'",
        ),
        (
            "U",
            json!({"name": "U", "subjects": ["u.>", "o.x"]}).to_string(),
            400,
            10065,
            "subjects overlap with an existing stream",
        ),
        (
            "DD",
            json!({"name": "DD", "deny_delete": false, "deny_purge": true, "allow_msg_ttl": true})
                .to_string(),
            500,
            10052,
            "stream configuration update can not cancel deny message deletes",
        ),
        (
            "DD",
            json!({"name": "DD", "deny_delete": true, "deny_purge": false, "allow_msg_ttl": true})
                .to_string(),
            500,
            10052,
            "stream configuration update can not cancel deny purge",
        ),
        (
            "DD",
            json!({"name": "DD", "deny_delete": true, "deny_purge": true}).to_string(),
            500,
            10052,
            "message TTL status can not be disabled",
        ),
    ];
    // A cluster takes more than one replica.
    if common::clustered() {
        cases.retain(|case| case.3 != 10074);
    }
    let mut checks = common::Checks::default();
    for (name, body, code, err_code, desc) in cases {
        let r = api(&c, &format!("$JS.API.STREAM.UPDATE.{name}"), &body).await;
        checks.json(
            &r,
            &api_error_body("stream_update_response", code, err_code, desc, json!({})),
            format!("UPDATE.{name} {body}"),
        );
    }
    checks.done();
    // Nothing changed.
    let r = api(&c, "$JS.API.STREAM.INFO.U", "").await;
    assert_eq!(r["config"]["subjects"], json!(["u.>"]));
    assert_eq!(r["config"]["storage"], "file");
}

#[tokio::test]
async fn update_to_interest_without_consumers_drops_messages() {
    let s = common::js_server();
    let c = s.client().await;
    create_ok(&c, "U", json!({"name": "U", "subjects": ["u.>"]})).await;
    for i in 0..5 {
        publish(&c, &format!("u.{i}"), "x").await;
    }
    let r = api(
        &c,
        "$JS.API.STREAM.UPDATE.U",
        &json!({"name": "U", "subjects": ["u.>"], "retention": "interest"}).to_string(),
    )
    .await;
    assert_eq!(r["config"]["retention"], "interest", "{r}");
    let st = &r["state"];
    assert_eq!(st["messages"], 0, "{r}");
    assert_eq!(st["bytes"], 0, "{r}");
    assert_eq!(st["first_seq"], 6, "{r}");
    assert_eq!(st["last_seq"], 5, "{r}");
    assert_eq!(st["first_ts"], "0001-01-01T00:00:00Z", "{r}");
}

#[tokio::test]
async fn update_refuses_consumer_limits_a_consumer_exceeds() {
    let s = common::js_server();
    let c = s.client().await;
    create_ok(&c, "L", json!({"name": "L", "subjects": ["l.>"]})).await;
    for (name, pending) in [("big", 0), ("small", 5)] {
        let body = json!({"stream_name": "L", "config": {
            "durable_name": name, "ack_policy": "explicit", "max_ack_pending": pending}});
        let r = api(
            &c,
            &format!("$JS.API.CONSUMER.CREATE.L.{name}"),
            &body.to_string(),
        )
        .await;
        assert!(r.get("error").is_none(), "{r}");
    }
    let limits =
        |limits: Value| json!({"name": "L", "subjects": ["l.>"], "consumer_limits": limits});
    // (consumer limits asked for, the error expected; None: taken)
    type Row<'a> = (Value, Option<(u64, u64, &'a str)>);
    let table: [Row; 4] = [
        (
            json!({"max_ack_pending": 10}),
            Some((500, 10069, "change to limits violates consumers: big")),
        ),
        (
            json!({"max_ack_pending": 1}),
            Some((
                500,
                10069,
                "change to limits violates consumers: big, small",
            )),
        ),
        (json!({"max_ack_pending": 1000}), None),
        (
            json!({"max_ack_pending": 1000, "inactive_threshold": 1_000_000_000}),
            None,
        ),
    ];
    for (asked, expected) in table {
        let r = api(
            &c,
            "$JS.API.STREAM.UPDATE.L",
            &limits(asked.clone()).to_string(),
        )
        .await;
        match expected {
            Some((code, err_code, description)) => {
                // nats-server names the consumers in no fixed order.
                let (got_code, got_err_code, got) = common::api_err(&r);
                let names = |d: &str| -> std::collections::BTreeSet<String> {
                    d.split([':', ','])
                        .skip(1)
                        .map(|n| n.trim().to_string())
                        .collect()
                };
                assert_eq!((got_code, got_err_code), (code, err_code), "{asked}: {r}");
                assert!(
                    got.starts_with("change to limits violates consumers:"),
                    "{r}"
                );
                assert_eq!(names(&got), names(description), "{asked}: {r}");
            }
            None => assert_eq!(r["config"]["consumer_limits"], asked, "{r}"),
        }
    }
    // What was refused never took: the stream keeps the last limits taken.
    let info = api(&c, "$JS.API.STREAM.INFO.L", "").await;
    assert_eq!(
        info["config"]["consumer_limits"]["max_ack_pending"], 1000,
        "{info}"
    );
}

#[tokio::test]
async fn persist_mode_async_on_one_replica_file_streams_only() {
    let s = common::js_server();
    let c = s.client().await;
    let one_replica = common::replicas() == 1;
    let invalid = |text: &str| Some((500, 10052, text.to_string()));
    let replicated = "async persist mode is not supported on replicated streams";
    // (stream, what it asks for, the persist_mode it gets or the error)
    type Row<'a> = (&'a str, Value, Result<Option<&'a str>, (u64, u64, String)>);
    let table: [Row; 5] = [
        (
            "ASYNC",
            json!({"persist_mode": "async"}),
            match one_replica {
                true => Ok(Some("async")),
                false => Err(invalid(replicated).unwrap()),
            },
        ),
        ("DEFAULT", json!({"persist_mode": "default"}), Ok(None)),
        ("UNSET", json!({}), Ok(None)),
        (
            "MEM",
            json!({"persist_mode": "async", "storage": "memory"}),
            Err(invalid("async persist mode is only supported on file storage").unwrap()),
        ),
        (
            "R3",
            json!({"persist_mode": "async", "num_replicas": 3}),
            Err(invalid(replicated).unwrap()),
        ),
    ];
    for (name, asked, expected) in table {
        let mut cfg = json!({"name": name, "subjects": [name.to_lowercase()]});
        cfg.as_object_mut()
            .unwrap()
            .extend(asked.as_object().unwrap().clone());
        let r = create(&c, name, cfg).await;
        match expected {
            Ok(mode) => {
                assert_eq!(r["config"]["persist_mode"].as_str(), mode, "{name}: {r}");
                let level = if mode.is_some() { "2" } else { "0" };
                assert_eq!(
                    r["config"]["metadata"]["_nats.req.level"], level,
                    "{name}: {r}"
                );
            }
            Err(error) => assert_eq!(common::api_err(&r), error, "{name}: {r}"),
        }
    }
    if !one_replica {
        return;
    }
    // An async stream takes and serves messages; its mode never changes.
    for i in 0..3 {
        let ack = publish(&c, "async", &format!("m{i}")).await;
        assert_eq!(ack["seq"], i + 1, "{ack}");
    }
    let info = api(&c, "$JS.API.STREAM.INFO.ASYNC", "").await;
    assert_eq!(info["state"]["messages"], 3, "{info}");
    let body = json!({"name": "ASYNC", "subjects": ["async"]}).to_string();
    let r = api(&c, "$JS.API.STREAM.UPDATE.ASYNC", &body).await;
    let change = "stream configuration update can not change persist mode";
    assert_eq!(common::api_err(&r), invalid(change).unwrap(), "{r}");
}

#[tokio::test]
async fn update_to_sealed_forces_settings_and_cannot_unseal() {
    let s = common::js_server();
    let c = s.client().await;
    create_ok(
        &c,
        "SE",
        json!({"name": "SE", "max_age": 5_000_000_000u64, "allow_rollup_hdrs": true}),
    )
    .await;
    publish(&c, "SE", "x").await;
    let r = api(
        &c,
        "$JS.API.STREAM.UPDATE.SE",
        &json!({"name": "SE", "max_age": 5_000_000_000u64, "allow_rollup_hdrs": true, "sealed": true}).to_string(),
    )
    .await;
    let cfg = &r["config"];
    assert_eq!(cfg["sealed"], true, "{r}");
    assert_eq!(cfg["max_age"], 0, "{r}");
    assert_eq!(cfg["discard"], "new", "{r}");
    assert_eq!(cfg["deny_delete"], true, "{r}");
    assert_eq!(cfg["deny_purge"], true, "{r}");
    assert_eq!(cfg["allow_rollup_hdrs"], false, "{r}");
    assert_eq!(cfg["duplicate_window"], 5_000_000_000u64, "{r}");
    assert_eq!(r["state"]["messages"], 1, "{r}");
    let r = api(
        &c,
        "$JS.API.STREAM.UPDATE.SE",
        &json!({"name": "SE", "sealed": false}).to_string(),
    )
    .await;
    assert_eq!(
        r,
        api_error_body(
            "stream_update_response",
            500,
            10052,
            "stream configuration update can not unseal a sealed stream",
            json!({})
        )
    );
}

#[tokio::test]
async fn delete_stream() {
    let s = common::js_server();
    let c = s.client().await;
    create_ok(&c, "C", json!({"name": "C", "subjects": ["c.>"]})).await;
    publish(&c, "c.1", "x").await;
    let not_empty = api_error_body(
        "stream_delete_response",
        400,
        10038,
        "expected an empty request payload",
        json!({}),
    );
    let mut checks = common::Checks::default();
    for body in ["null", "[]", r#"{"a":1}"#, "  "] {
        let r = api(&c, "$JS.API.STREAM.DELETE.C", body).await;
        checks.json(&r, &not_empty, format!("{body:?}"));
    }
    checks.done();
    // The body is checked before the stream is looked up.
    assert_eq!(
        api(&c, "$JS.API.STREAM.DELETE.NOPE", "null").await,
        not_empty
    );
    let r = api(&c, "$JS.API.STREAM.DELETE.C", "{}").await;
    assert_eq!(
        r,
        json!({"type": "io.nats.jetstream.api.v1.stream_delete_response", "success": true})
    );
    let r = api(&c, "$JS.API.STREAM.DELETE.C", "").await;
    assert_eq!(
        r,
        api_error_body(
            "stream_delete_response",
            404,
            10059,
            "stream not found",
            json!({})
        )
    );
    // Its subjects are no longer captured.
    let err = c.request("c.1", "x".into()).await.expect_err("no stream");
    assert_eq!(
        err.kind(),
        async_nats::RequestErrorKind::NoResponders,
        "{err:?}"
    );
    let r = api(&c, "$JS.API.STREAM.NAMES", "").await;
    assert_eq!(r["total"], 0);
    // The name can be used again, from sequence 1.
    create_ok(&c, "C", json!({"name": "C", "subjects": ["c.>"]})).await;
    assert_eq!(
        publish(&c, "c.1", "x").await,
        json!({"stream": "C", "seq": 1})
    );
}

#[tokio::test]
async fn names_and_list_when_empty() {
    let s = common::js_server();
    let c = s.client().await;
    assert_eq!(
        api(&c, "$JS.API.STREAM.NAMES", r#"{"offset":0,"subject":null}"#).await,
        json!({"type": "io.nats.jetstream.api.v1.stream_names_response",
               "total": 0, "offset": 0, "limit": 1024, "streams": null})
    );
    assert_eq!(
        api(&c, "$JS.API.STREAM.LIST", r#"{"offset":0}"#).await,
        json!({"type": "io.nats.jetstream.api.v1.stream_list_response",
               "total": 0, "offset": 0, "limit": 256, "streams": []})
    );
}

#[tokio::test]
async fn names_sorted_paged_and_filtered() {
    let s = common::js_server();
    let c = s.client().await;
    for (n, subs) in [
        ("B", json!(["b.>"])),
        ("A", json!(["a.*", "x.y"])),
        ("C", json!(["c"])),
        ("D", json!(["d.1.>"])),
    ] {
        create_ok(&c, n, json!({"name": n, "subjects": subs})).await;
    }
    let names = |total: u64, offset: u64, streams: Value| {
        json!({"type": "io.nats.jetstream.api.v1.stream_names_response",
               "total": total, "offset": offset, "limit": 1024, "streams": streams})
    };
    let cases = [
        ("", names(4, 0, json!(["A", "B", "C", "D"]))),
        ("null", names(4, 0, json!(["A", "B", "C", "D"]))),
        ("garbage", names(4, 0, json!(["A", "B", "C", "D"]))),
        (r#"{"offset":2}"#, names(4, 2, json!(["C", "D"]))),
        (r#"{"offset":-5}"#, names(4, 0, json!(["A", "B", "C", "D"]))),
        // nats-server's meta leader lists a page past the end as `[]`.
        (
            r#"{"offset":10}"#,
            names(
                4,
                4,
                if common::clustered() {
                    json!([])
                } else {
                    Value::Null
                },
            ),
        ),
        (r#"{"subject":"a.b"}"#, names(1, 0, json!(["A"]))),
        (r#"{"subject":"x.*"}"#, names(1, 0, json!(["A"]))),
        (
            r#"{"subject":">"}"#,
            names(4, 0, json!(["A", "B", "C", "D"])),
        ),
        (r#"{"subject":"*.1.*"}"#, names(2, 0, json!(["B", "D"]))),
        (r#"{"subject":"zzz"}"#, names(0, 0, Value::Null)),
        (
            r#"{"offset":1,"subject":"*.1.*"}"#,
            names(2, 1, json!(["D"])),
        ),
    ];

    let mut checks = common::Checks::default();
    for (body, want) in cases {
        checks.json(
            &api(&c, "$JS.API.STREAM.NAMES", body).await,
            &want,
            format!("{body:?}"),
        );
    }
    checks.done();
    assert_eq!(
        api(&c, "$JS.API.STREAM.NAMES", r#"{"bogus":1}"#).await,
        api_error_body(
            "stream_names_response",
            400,
            10025,
            "invalid JSON: json: unknown field \"bogus\"",
            json!({"total": 0, "offset": 0, "limit": 0, "streams": null})
        )
    );
    // The client's iterator and subject lookup.
    let js = jetstream::new(c.clone());
    let mut all: Vec<String> = js.stream_names().try_collect().await.unwrap();
    all.sort();
    assert_eq!(all, ["A", "B", "C", "D"]);
    assert_eq!(js.stream_by_subject("d.1.2").await.unwrap(), "D");
    assert!(js.stream_by_subject("nothing").await.is_err());
}

#[tokio::test]
async fn list_shape_paging_and_filter() {
    let s = common::js_server();
    let c = s.client().await;
    for n in ["B", "A", "D", "C"] {
        create_ok(&c, n, json!({"name": n, "subjects": [n.to_lowercase()]})).await;
    }
    publish(&c, "d", "x").await;
    let r = api(&c, "$JS.API.STREAM.LIST", r#"{"offset":3}"#).await;
    assert_eq!(r["type"], "io.nats.jetstream.api.v1.stream_list_response");
    assert_eq!(
        (
            r["total"].as_u64(),
            r["offset"].as_u64(),
            r["limit"].as_u64()
        ),
        (Some(4), Some(3), Some(256))
    );
    let mut one = r["streams"].as_array().unwrap().clone();
    assert_eq!(one.len(), 1, "{r}");
    scrub(&mut one[0]);
    // Byte accounting has its own tests (js_publish::byte_accounting).
    one[0]["state"].as_object_mut().unwrap().remove("bytes");
    let mut cfg = default_config("D", &["d"]);
    cfg["metadata"] = json!({"_nats.req.level": "0"});
    assert_eq!(
        one[0],
        common::clustered_asset(json!({
            "config": cfg,
            "created": "<ts>",
            "state": {"messages": 1, "first_seq": 1, "first_ts": "<ts>",
                      "last_seq": 1, "last_ts": "<ts>", "num_subjects": 1, "consumer_count": 0},
            "ts": "<ts>"
        }))
    );
    let r = api(&c, "$JS.API.STREAM.LIST", "").await;
    let order: Vec<&str> = r["streams"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["config"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(order, ["A", "B", "C", "D"]);
    let r = api(&c, "$JS.API.STREAM.LIST", r#"{"subject":"c"}"#).await;
    assert_eq!(r["total"], 1);
    assert_eq!(r["streams"][0]["config"]["name"], "C");
    assert_eq!(
        api(&c, "$JS.API.STREAM.LIST", r#"{"subject":"zzz"}"#).await,
        json!({"type": "io.nats.jetstream.api.v1.stream_list_response",
               "total": 0, "offset": 0, "limit": 256, "streams": []})
    );
    // nats-server's meta leader counts the streams it gathered: none for
    // a page past the end.
    let total = if common::clustered() { 0 } else { 4 };
    assert_eq!(
        api(&c, "$JS.API.STREAM.LIST", r#"{"offset":10}"#).await,
        json!({"type": "io.nats.jetstream.api.v1.stream_list_response",
               "total": total, "offset": 4, "limit": 256, "streams": []})
    );
    assert_eq!(
        api(&c, "$JS.API.STREAM.LIST", r#"{"bogus":1}"#).await,
        api_error_body(
            "stream_list_response",
            400,
            10025,
            "invalid JSON: json: unknown field \"bogus\"",
            json!({"total": 0, "offset": 0, "limit": 0, "streams": []})
        )
    );
}

#[tokio::test]
async fn list_and_names_page_past_their_limits() {
    let s = common::js_server();
    let c = s.client().await;
    let n = 260;
    for i in 0..n {
        let name = format!("S{i:03}");
        create_ok(&c, &name, json!({"name": name, "storage": "memory"})).await;
    }
    let r = api(&c, "$JS.API.STREAM.LIST", "").await;
    assert_eq!(r["total"], n);
    assert_eq!(r["limit"], 256);
    assert_eq!(r["streams"].as_array().unwrap().len(), 256);
    assert_eq!(r["streams"][255]["config"]["name"], "S255");
    let r = api(&c, "$JS.API.STREAM.LIST", r#"{"offset":256}"#).await;
    let rest: Vec<&str> = r["streams"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["config"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(rest, ["S256", "S257", "S258", "S259"]);
    let r = api(&c, "$JS.API.STREAM.NAMES", "").await;
    assert_eq!(r["streams"].as_array().unwrap().len(), n);
    let js = jetstream::new(c.clone());
    let infos: Vec<stream::Info> = js.streams().try_collect().await.unwrap();
    let mut got: Vec<String> = infos.into_iter().map(|i| i.config.name).collect();
    got.sort();
    let want: Vec<String> = (0..n).map(|i| format!("S{i:03}")).collect();
    assert_eq!(got, want);
    let mut names: Vec<String> = js.stream_names().try_collect().await.unwrap();
    names.sort();
    assert_eq!(names, want);
}

#[tokio::test]
async fn required_api_level_header() {
    let s = common::js_server();
    let c = s.client().await;
    create_ok(&c, "B", json!({"name": "B", "allow_direct": true})).await;
    let desc = "JetStream minimum api level required";
    let cases = [
        (
            "$JS.API.STREAM.INFO.B",
            "",
            "stream_info_response",
            json!({"total": 0, "offset": 0, "limit": 0}),
        ),
        (
            "$JS.API.STREAM.CREATE.Q",
            r#"{"name":"Q"}"#,
            "stream_create_response",
            json!({}),
        ),
        (
            "$JS.API.STREAM.NAMES",
            "",
            "stream_names_response",
            json!({"total": 0, "offset": 0, "limit": 0, "streams": null}),
        ),
        (
            "$JS.API.STREAM.PURGE.B",
            "",
            "stream_purge_response",
            json!({"purged": 0}),
        ),
        (
            "$JS.API.STREAM.MSG.GET.B",
            r#"{"seq":1}"#,
            "stream_msg_get_response",
            json!({}),
        ),
    ];
    let mut checks = common::Checks::default();
    for level in ["99", "abc"] {
        for (subject, body, kind, extra) in &cases {
            let r =
                common::api_with_headers(&c, subject, &[("Nats-Required-Api-Level", level)], body)
                    .await;
            checks.json(
                &r,
                &api_error_body(kind, 412, 10185, desc, extra.clone()),
                format!("{subject} level {level}"),
            );
        }
    }
    checks.done();
    let r = common::api_with_headers(
        &c,
        "$JS.API.STREAM.INFO.B",
        &[("Nats-Required-Api-Level", "0")],
        "",
    )
    .await;
    assert_eq!(r["config"]["name"], "B", "{r}");
    // Direct gets answer with a status.
    let m = common::request_with_headers(
        &c,
        "$JS.API.DIRECT.GET.B",
        &[("Nats-Required-Api-Level", "99")],
        br#"{"seq":1}"#,
    )
    .await;
    assert_eq!(m.status.map(|s| s.as_u16()), Some(412));
    assert_eq!(m.description.as_deref(), Some("Required Api Level"));
    // The stream Q was not created.
    let r = api(&c, "$JS.API.STREAM.NAMES", "").await;
    assert_eq!(r["streams"], json!(["B"]));
}

#[tokio::test]
async fn unknown_api_subjects_get_no_reply() {
    let s = common::js_server();
    let c = s.client().await;
    create_ok(&c, "S", json!({"name": "S"})).await;
    let level: &[(&str, &str)] = &[("Nats-Required-Api-Level", "99")];
    let cases: [(&str, &[(&str, &str)]); 6] = [
        ("$JS.API.FOO", &[]),
        ("$JS.API.STREAM.INFO", &[]),
        ("$JS.API.STREAM.INFO.S.X", &[]),
        ("$JS.API.STREAM.CREATE", &[]),
        ("$JS.API.STREAM.MSG.GET", &[]),
        ("$JS.API.FOO", level),
    ];
    // All sent at once, then one wait for whatever comes back.
    let mut subs = Vec::new();
    for (subject, headers) in cases {
        let inbox = c.new_inbox();
        let sub = c.subscribe(inbox.clone()).await.unwrap();
        let mut h = async_nats::HeaderMap::new();
        for (k, v) in headers {
            h.append(*k, *v);
        }
        c.publish_with_reply_and_headers(subject, inbox, h, "".into())
            .await
            .unwrap();
        subs.push((subject, headers, sub));
    }
    // The server has seen them all once this round trip is done.
    common::sync(&c).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut checks = common::Checks::default();
    for (subject, headers, mut sub) in subs {
        let got = tokio::time::timeout(Duration::from_millis(1), sub.next())
            .await
            .ok()
            .flatten();
        checks.eq(
            got.map(|m| m.payload),
            None,
            format!("{subject} {headers:?}"),
        );
    }
    checks.done();
}

#[tokio::test]
async fn account_info_counts_streams_bytes_and_api_calls() {
    let s = common::js_server();
    let c = s.client().await;
    let info = |v: &Value| {
        (
            v["api"]["total"].as_u64().unwrap(),
            v["api"]["errors"].as_u64().unwrap(),
            v["streams"].as_u64().unwrap(),
            v["memory"].as_u64().unwrap(),
            v["storage"].as_u64().unwrap(),
            v["reserved_memory"].as_u64().unwrap(),
            v["reserved_storage"].as_u64().unwrap(),
        )
    };
    let r = api(&c, "$JS.API.INFO", "[]").await;
    assert_eq!(r["type"], "io.nats.jetstream.api.v1.account_info_response");
    assert_eq!(
        r["limits"],
        json!({"max_memory": -1, "max_storage": -1, "max_streams": -1, "max_consumers": -1,
               "max_ack_pending": -1, "memory_max_stream_bytes": -1,
               "storage_max_stream_bytes": -1, "max_bytes_required": false})
    );
    // Counters are read before the current request is counted (the
    // harness may have asked before, to see the API up in a cluster).
    let (base, ..) = info(&r);
    let calls = |v: &Value| {
        let (total, errors, streams, memory, storage, rmem, rstore) = info(v);
        (total - base, errors, streams, memory, storage, rmem, rstore)
    };
    assert_eq!(calls(&r), (0, 0, 0, 0, 0, 0, 0));
    assert_eq!(
        calls(&api(&c, "$JS.API.INFO", "").await),
        (1, 0, 0, 0, 0, 0, 0)
    );
    api(&c, "$JS.API.STREAM.INFO.NOPE", "").await;
    assert_eq!(
        calls(&api(&c, "$JS.API.INFO", "").await),
        (3, 1, 0, 0, 0, 0, 0)
    );
    create_ok(
        &c,
        "S",
        json!({"name": "S", "subjects": ["s"], "max_bytes": 1000}),
    )
    .await;
    create_ok(
        &c,
        "M",
        json!({"name": "M", "subjects": ["m"], "storage": "memory", "max_bytes": 500}),
    )
    .await;
    publish(&c, "s", "hello").await;
    publish(&c, "m", "hello").await;
    // A message get that succeeds is not counted.
    let r = api(&c, "$JS.API.STREAM.MSG.GET.S", r#"{"seq":1}"#).await;
    assert_eq!(r["message"]["seq"], 1);
    // Failures: counted as errors ...
    api(&c, "$JS.API.STREAM.MSG.GET.S", r#"{"seq":9}"#).await;
    api(&c, "$JS.API.STREAM.PURGE.S", r#"{"seq":2,"keep":1}"#).await;
    // ... except a failed message delete, which is sent as a plain response.
    let r = api(&c, "$JS.API.STREAM.MSG.DELETE.S", r#"{"seq":9}"#).await;
    assert!(r.get("error").is_some(), "{r}");
    let (total, errors, streams, memory, storage, rmem, rstore) =
        calls(&api(&c, "$JS.API.INFO", "").await);
    assert_eq!((streams, rmem, rstore), (2, 500, 1000));
    if common::clustered() {
        // In a cluster each server counts the calls it answered (the
        // meta leader the account's, each stream's leader its own), and
        // what it stores: nats-server's figures depend on where the
        // streams were placed.
        return;
    }
    // memory: 16 + subject + payload; file: 22 + subject + payload + 8.
    assert_eq!((total, errors, memory, storage), (9, 3, 22, 36));
}

#[tokio::test]
async fn client_stream_management() {
    let s = common::js_server();
    let c = s.client().await;
    let js = jetstream::new(c.clone());
    // get_or_create creates a missing stream (it relies on the 404).
    let mut st = js
        .get_or_create_stream(stream::Config {
            name: "S".into(),
            subjects: vec!["s.>".into()],
            max_messages: 10,
            ..Default::default()
        })
        .await
        .unwrap();
    let info = st.info().await.unwrap();
    assert_eq!(info.config.max_messages, 10);
    assert_eq!(info.config.max_bytes, -1);
    assert_eq!(info.config.max_messages_per_subject, -1);
    assert_eq!(info.config.max_consumers, -1);
    assert_eq!(info.config.max_message_size, -1);
    assert_eq!(info.config.num_replicas, 1);
    assert_eq!(info.config.duplicate_window, Duration::from_secs(120));
    assert!(info.cluster.is_some());
    // And gets an existing one.
    js.get_or_create_stream(stream::Config {
        name: "S".into(),
        subjects: vec!["other".into()],
        ..Default::default()
    })
    .await
    .unwrap();
    assert_eq!(
        js.get_stream("S")
            .await
            .unwrap()
            .cached_info()
            .config
            .subjects,
        ["s.>"]
    );
    // create_or_update updates.
    let info = js
        .create_or_update_stream(stream::Config {
            name: "S".into(),
            subjects: vec!["s.>".into(), "t".into()],
            max_messages: 20,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(info.config.max_messages, 20);
    assert_eq!(info.config.subjects, ["s.>", "t"]);
    // Errors carry the server's codes.
    let err = js.get_stream("NOPE").await.expect_err("missing");
    match err.kind() {
        jetstream::context::GetStreamErrorKind::JetStream(e) => {
            assert_eq!(e.error_code().0, 10059, "{e:?}");
            assert_eq!(e.code(), 404);
        }
        k => panic!("unexpected {k:?}"),
    }
    let err = js
        .create_stream(stream::Config {
            name: "S".into(),
            subjects: vec!["x".into()],
            ..Default::default()
        })
        .await
        .expect_err("name in use");
    match err.kind() {
        jetstream::context::CreateStreamErrorKind::JetStream(e) => {
            assert_eq!(e.error_code().0, 10058)
        }
        k => panic!("unexpected {k:?}"),
    }
    assert!(js.delete_stream("S").await.unwrap().success);
    assert!(js.delete_stream("S").await.is_err());
}

#[tokio::test]
async fn update_drops_subjects_and_trims_per_subject() {
    let s = common::js_server();
    let c = s.client().await;
    create_ok(&c, "U", json!({"name": "U", "subjects": ["u.>", "w"]})).await;
    for subject in ["u.a", "u.a", "u.a", "u.b", "w"] {
        publish(&c, subject, "x").await;
    }
    let r = api(
        &c,
        "$JS.API.STREAM.UPDATE.U",
        &json!({"name": "U", "subjects": ["u.>"], "max_msgs_per_subject": 1}).to_string(),
    )
    .await;
    let st = &r["state"];
    assert_eq!(
        (
            st["messages"].as_u64(),
            st["first_seq"].as_u64(),
            st["last_seq"].as_u64(),
            st["num_subjects"].as_u64()
        ),
        (Some(3), Some(3), Some(5), Some(3)),
        "{r}"
    );
    // w is no longer captured; its stored message stays.
    let err = c.request("w", "x".into()).await.expect_err("not captured");
    assert_eq!(err.kind(), async_nats::RequestErrorKind::NoResponders);
    assert_eq!(
        publish(&c, "u.b", "x").await,
        json!({"stream": "U", "seq": 6})
    );
    let r = api(&c, "$JS.API.STREAM.MSG.GET.U", r#"{"last_by_subj":"w"}"#).await;
    assert_eq!(r["message"]["seq"], 5, "{r}");
}

#[tokio::test]
async fn file_streams_survive_a_crash_and_memory_streams_do_not() {
    let mut s = common::js_server();
    let c = s.client().await;
    let created = create_ok(
        &c,
        "F",
        json!({"name": "F", "subjects": ["f.>"], "max_msgs_per_subject": 5}),
    )
    .await["created"]
        .clone();
    create_ok(
        &c,
        "M",
        json!({"name": "M", "subjects": ["m.>"], "storage": "memory"}),
    )
    .await;
    common::js_publish_raw(&c, "f.a", &[("Nats-Msg-Id", "x")], b"1").await;
    publish(&c, "f.b", "2").await;
    publish(&c, "f.a", "3").await;
    let r = api(&c, "$JS.API.STREAM.MSG.DELETE.F", r#"{"seq":2}"#).await;
    assert_eq!(r["success"], true, "{r}");
    publish(&c, "m.a", "1").await;
    drop(c);
    s.restart();
    let c = s.client().await;
    let r = api(
        &c,
        "$JS.API.STREAM.INFO.F",
        r#"{"deleted_details":true,"subjects_filter":">"}"#,
    )
    .await;
    assert_eq!(r["created"], created, "{r}");
    assert_eq!(r["config"]["max_msgs_per_subject"], 5, "{r}");
    let mut st = r["state"].clone();
    for k in ["first_ts", "last_ts", "bytes"] {
        st.as_object_mut().unwrap().remove(k);
    }
    assert_eq!(
        st,
        json!({"messages": 2, "first_seq": 1, "last_seq": 3, "num_subjects": 1,
               "subjects": {"f.a": 2}, "num_deleted": 1, "deleted": [2], "consumer_count": 0})
    );
    // Message ids in the window are known again.
    let m = common::js_publish_raw(&c, "f.a", &[("Nats-Msg-Id", "x")], b"4").await;
    assert_eq!(
        &m.payload[..],
        br#"{"stream":"F","seq":1,"duplicate": true}"#
    );
    assert_eq!(
        publish(&c, "f.c", "5").await,
        json!({"stream": "F", "seq": 4})
    );
    let r = api(&c, "$JS.API.STREAM.MSG.GET.F", r#"{"seq":3}"#).await;
    assert_eq!(r["message"]["data"], common::b64(b"3"), "{r}");
    if common::clustered() {
        // A replicated memory stream keeps its assignment in the meta
        // group, so it is there after the cluster restarts. nats-server
        // keeps a memory stream's Raft log in memory and brings it back
        // empty; flotilla's log is on disk, so its messages come back too.
        let r = api(&c, "$JS.API.STREAM.INFO.M", "").await;
        let kept = if common::reference_server() { 0 } else { 1 };
        assert_eq!(r["state"]["messages"], kept, "{r}");
        let r = api(&c, "$JS.API.STREAM.NAMES", "").await;
        assert_eq!(r["streams"], json!(["F", "M"]));
        return;
    }
    // A memory stream does not come back.
    let r = api(&c, "$JS.API.STREAM.INFO.M", "").await;
    assert_eq!(common::api_err(&r), (404, 10059, "stream not found".into()));
    let r = api(&c, "$JS.API.STREAM.NAMES", "").await;
    assert_eq!(r["streams"], json!(["F"]));
}

/// On a single server the cluster operator APIs answer that clustering is
/// required (stream and consumer step-down, stream peer-remove), and the
/// meta ones are not answered at all.
#[tokio::test]
async fn cluster_operator_apis_on_a_single_server() {
    if common::clustered() {
        // A cluster's are tested in cluster_meta.rs and cluster_streams.rs.
        return;
    }
    let s = common::js_server();
    let c = s.client().await;
    create_ok(&c, "OP", json!({"name": "OP", "subjects": ["op"]})).await;
    let err = json!({"code": 503, "err_code": 10010, "description": "JetStream clustering support required"});
    for (subject, kind) in [
        (
            "$JS.API.STREAM.LEADER.STEPDOWN.OP",
            "stream_leader_stepdown_response",
        ),
        (
            "$JS.API.STREAM.LEADER.STEPDOWN.NOPE",
            "stream_leader_stepdown_response",
        ),
        (
            "$JS.API.CONSUMER.LEADER.STEPDOWN.OP.C",
            "consumer_leader_stepdown_response",
        ),
        (
            "$JS.API.STREAM.PEER.REMOVE.OP",
            "stream_remove_peer_response",
        ),
    ] {
        let r = api(&c, subject, r#"{"peer":"x"}"#).await;
        assert_eq!(
            r,
            json!({"type": format!("io.nats.jetstream.api.v1.{kind}"), "error": err}),
            "{subject}"
        );
    }
    for subject in ["$JS.API.META.LEADER.STEPDOWN", "$JS.API.SERVER.REMOVE"] {
        let r = tokio::time::timeout(
            Duration::from_millis(500),
            c.request(subject, r#"{"peer":"x"}"#.into()),
        )
        .await;
        match r {
            Err(_) => {}
            Ok(Err(e)) => assert_eq!(
                e.kind(),
                async_nats::RequestErrorKind::TimedOut,
                "{subject}: {e}"
            ),
            Ok(Ok(m)) => panic!("{subject} answered: {:?}", m.payload),
        }
    }
}

/// Reading one stream does not hold up another's writes: while large
/// STREAM.INFOs (100k subjects) and direct gets of one stream are being
/// answered, one-at-a-time publishes to another keep their rate. Each
/// stream is read and applied on its own task, never on the Raft thread
/// that commits every group's entries.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn apply_goes_on_while_another_stream_is_read() {
    use std::sync::{Arc, Mutex};
    use std::time::Instant;
    let s = common::js_server();
    let c = s.client().await;
    create_ok(
        &c,
        "BIG",
        json!({"name": "BIG", "subjects": ["big.>"], "allow_direct": true}),
    )
    .await;
    create_ok(&c, "W", json!({"name": "W", "subjects": ["w"]})).await;
    let js = jetstream::new(c.clone());
    const SUBJECTS: usize = 100_000;
    let mut acks = Vec::new();
    for i in 0..SUBJECTS {
        acks.push(js.publish(format!("big.{i}"), "x".into()).await.unwrap());
        if acks.len() == 2000 {
            for a in acks.drain(..) {
                a.await.unwrap();
            }
        }
    }
    for a in acks {
        a.await.unwrap();
    }
    if common::replicas() > 1 {
        // Both led from one server: a reader there holding up the Raft
        // thread would hold up W's commits. (One replica each cannot
        // move; they may be on one server or not.)
        let big = common::replicated::leader_of(&c, "BIG").await;
        common::replicated::lead_on(&c, "W", &big).await;
    }
    // Publishes to W one at a time while BIG is read: some must be
    // acknowledged inside a read, between its request and its answer (a
    // reader that held up every stream's apply would let none finish
    // there). An order of events, not a rate.
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reads: Arc<Mutex<Vec<(Instant, Instant)>>> = Arc::default();
    // One reader, so a read's interval is never covered by another's.
    let mut readers = Vec::new();
    for k in 0..1 {
        let (c, reads, done) = (c.clone(), reads.clone(), done.clone());
        readers.push(tokio::spawn(async move {
            let mut n = k;
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                let start = Instant::now();
                let m = c
                    .request(
                        "$JS.API.STREAM.INFO.BIG",
                        r#"{"subjects_filter":">"}"#.into(),
                    )
                    .await
                    .unwrap();
                reads.lock().unwrap().push((start, Instant::now()));
                // Not parsed: this test's own tasks must not be the ones
                // held up.
                let head = String::from_utf8_lossy(&m.payload[..100]).into_owned();
                assert!(head.contains(r#""total":100000,"#), "{head}");
                for _ in 0..20 {
                    n += 2;
                    let body = json!({"last_by_subj": format!("big.{}", n % SUBJECTS)});
                    let m = c
                        .request("$JS.API.DIRECT.GET.BIG", body.to_string().into())
                        .await
                        .unwrap();
                    assert_eq!(&m.payload[..], b"x");
                }
            }
        }));
    }
    let mut acked = Vec::new();
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(3) {
        js.publish("w", "y".into()).await.unwrap().await.unwrap();
        acked.push(Instant::now());
    }
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    for r in readers {
        r.await.unwrap();
    }
    let reads = reads.lock().unwrap().clone();
    let inside = acked
        .iter()
        .filter(|at| reads.iter().any(|(from, to)| from < *at && *at < to))
        .count();
    let report = format!(
        "{} publishes acked, {inside} of them inside one of {} reads",
        acked.len(),
        reads.len()
    );
    eprintln!("{report}");
    assert!(reads.len() >= 2, "{report}");
    assert!(inside > 0, "{report}");
}
