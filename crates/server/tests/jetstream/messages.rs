//! Reading and removing stored messages: STREAM.PURGE, STREAM.MSG.GET,
//! STREAM.MSG.DELETE, DIRECT.GET, and the `deleted_details` and
//! `subjects_filter` views of STREAM.INFO. Expectations are what
//! nats-server 2.15.1 answers to the same requests.
#[path = "../common/mod.rs"]
mod common;

use std::time::Duration;

use async_nats::jetstream::{self, stream::DirectGetErrorKind, stream::LastRawMessageErrorKind};
use common::{api, api_error_body, b64, js_publish_text as pubt, scrub};
use futures::TryStreamExt;
use serde_json::{json, Value};

async fn create(c: &async_nats::Client, name: &str, cfg: Value) -> Value {
    common::create_stream(c, name, cfg).await
}

async fn state(c: &async_nats::Client, name: &str, body: &str) -> Value {
    common::stream_state(c, name, body).await
}

/// A stream `name` on `name.>` holding a, b, a, c, b, a, x.y (seqs 1-7).
async fn seven(c: &async_nats::Client, name: &str) {
    create(
        c,
        name,
        json!({"name": name, "subjects": [format!("{name}.>")]}),
    )
    .await;
    for s in ["a", "b", "a", "c", "b", "a", "x.y"] {
        pubt(c, &format!("{name}.{s}"), &[], s.as_bytes()).await;
    }
}

fn purge_ok(purged: u64) -> Value {
    json!({"type": "io.nats.jetstream.api.v1.stream_purge_response", "success": true, "purged": purged})
}

#[tokio::test]
async fn purge_everything() {
    let s = common::js_server();
    let c = s.client().await;
    for (name, body) in [("P", ""), ("Q", "null")] {
        seven(&c, name).await;
        assert_eq!(
            api(&c, &format!("$JS.API.STREAM.PURGE.{name}"), body).await,
            purge_ok(7),
            "{body:?}"
        );
        let r = api(&c, &format!("$JS.API.STREAM.INFO.{name}"), "").await;
        let st = &r["state"];
        assert_eq!(
            (
                st["messages"].as_u64(),
                st["bytes"].as_u64(),
                st["first_seq"].as_u64(),
                st["last_seq"].as_u64()
            ),
            (Some(0), Some(0), Some(8), Some(7)),
            "{st}"
        );
        assert_eq!(st["first_ts"], "0001-01-01T00:00:00Z", "{st}");
        assert!(
            common::is_timestamp(&st["last_ts"]),
            "last_ts is kept: {st}"
        );
        assert!(st.get("num_subjects").is_none(), "{st}");
        // The sequence carries on.
        assert_eq!(
            pubt(&c, &format!("{name}.a"), &[], b"x").await,
            format!(r#"{{"stream":"{name}","seq":8}}"#)
        );
    }
}

#[tokio::test]
async fn purge_filter_seq_and_keep() {
    let s = common::js_server();
    let c = s.client().await;
    // (body, purged, messages, first_seq, last_seq, subjects, deleted)
    let cases: Vec<(&str, u64, u64, u64, u64, Value, Value)> = vec![
        (
            r#"{"filter":"X.a"}"#,
            3,
            4,
            2,
            7,
            json!({"b": 2, "c": 1, "x.y": 1}),
            json!([3, 6]),
        ),
        (
            r#"{"filter":"X.*"}"#,
            6,
            1,
            7,
            7,
            json!({"x.y": 1}),
            Value::Null,
        ),
        (
            r#"{"filter":"X.a","keep":1}"#,
            2,
            5,
            2,
            7,
            json!({"a": 1, "b": 2, "c": 1, "x.y": 1}),
            json!([3]),
        ),
        (
            r#"{"filter":"X.a","keep":5}"#,
            0,
            7,
            1,
            7,
            json!({"a": 3, "b": 2, "c": 1, "x.y": 1}),
            Value::Null,
        ),
        (
            r#"{"filter":"X.a","keep":0}"#,
            3,
            4,
            2,
            7,
            json!({"b": 2, "c": 1, "x.y": 1}),
            json!([3, 6]),
        ),
        (
            r#"{"filter":"X.>","keep":3}"#,
            4,
            3,
            5,
            7,
            json!({"a": 1, "b": 1, "x.y": 1}),
            Value::Null,
        ),
        (
            r#"{"keep":2}"#,
            5,
            2,
            6,
            7,
            json!({"a": 1, "x.y": 1}),
            Value::Null,
        ),
        (
            r#"{"seq":4}"#,
            3,
            4,
            4,
            7,
            json!({"a": 1, "b": 1, "c": 1, "x.y": 1}),
            Value::Null,
        ),
        (
            r#"{"seq":1}"#,
            0,
            7,
            1,
            7,
            json!({"a": 3, "b": 2, "c": 1, "x.y": 1}),
            Value::Null,
        ),
        (r#"{"seq":8}"#, 7, 0, 8, 7, Value::Null, Value::Null),
        (r#"{"seq":20}"#, 7, 0, 20, 19, Value::Null, Value::Null),
        (
            r#"{"filter":"X.a","seq":6}"#,
            2,
            5,
            2,
            7,
            json!({"a": 1, "b": 2, "c": 1, "x.y": 1}),
            json!([3]),
        ),
        (
            r#"{"filter":"X.a","seq":1}"#,
            0,
            7,
            1,
            7,
            json!({"a": 3, "b": 2, "c": 1, "x.y": 1}),
            Value::Null,
        ),
        (r#"{"filter":">"}"#, 7, 0, 8, 7, Value::Null, Value::Null),
        (
            r#"{"filter":">","seq":3}"#,
            2,
            5,
            3,
            7,
            json!({"a": 2, "b": 1, "c": 1, "x.y": 1}),
            Value::Null,
        ),
        (
            r#"{"filter":"zzz"}"#,
            0,
            7,
            1,
            7,
            json!({"a": 3, "b": 2, "c": 1, "x.y": 1}),
            Value::Null,
        ),
    ];
    for (i, (body, purged, messages, first, last, subjects, deleted)) in
        cases.into_iter().enumerate()
    {
        let name = format!("P{i}");
        seven(&c, &name).await;
        let body = body.replace('X', &name);
        let r = api(&c, &format!("$JS.API.STREAM.PURGE.{name}"), &body).await;
        assert_eq!(r, purge_ok(purged), "{body}");
        let st = state(
            &c,
            &name,
            r#"{"subjects_filter":">","deleted_details":true}"#,
        )
        .await;
        let ctx = format!("{body}: {st}");
        assert_eq!(st["messages"], messages, "{ctx}");
        assert_eq!(st["first_seq"], first, "{ctx}");
        assert_eq!(st["last_seq"], last, "{ctx}");
        let subjects = match subjects {
            Value::Object(m) => Value::Object(
                m.into_iter()
                    .map(|(k, v)| (format!("{name}.{k}"), v))
                    .collect(),
            ),
            v => v,
        };
        assert_eq!(
            st.get("subjects").cloned().unwrap_or(Value::Null),
            subjects,
            "{ctx}"
        );
        assert_eq!(
            st.get("deleted").cloned().unwrap_or(Value::Null),
            deleted,
            "{ctx}"
        );
    }
    // After compacting past the end, the next message gets that sequence.
    assert_eq!(
        pubt(&c, "P10.a", &[], b"x").await,
        r#"{"stream":"P10","seq":20}"#
    );
}

#[tokio::test]
async fn purge_errors() {
    let s = common::js_server();
    let c = s.client().await;
    seven(&c, "P").await;
    create(&c, "DP", json!({"name": "DP", "deny_purge": true})).await;
    create(&c, "SE", json!({"name": "SE"})).await;
    api(
        &c,
        "$JS.API.STREAM.UPDATE.SE",
        &json!({"name": "SE", "sealed": true}).to_string(),
    )
    .await;
    let purged0 = json!({"purged": 0});
    let cases = [
        (
            "P",
            "[]",
            400,
            10025,
            "invalid JSON: json: cannot unmarshal array into Go value of type server.JSApiStreamPurgeRequest",
        ),
        ("P", r#"{"bogus":1}"#, 400, 10025, "invalid JSON: json: unknown field \"bogus\""),
        ("P", r#"{"seq":2,"keep":1}"#, 400, 10003, "bad request"),
        // Checked before the stream is looked up, on one server; a
        // cluster's meta leader says the stream is not there first.
        if common::clustered() {
            ("NOPE", r#"{"seq":2,"keep":1}"#, 404, 10059, "stream not found")
        } else {
            ("NOPE", r#"{"seq":2,"keep":1}"#, 400, 10003, "bad request")
        },
        ("NOPE", "", 404, 10059, "stream not found"),
        ("DP", "", 500, 10110, "stream purge not permitted"),
        ("SE", "", 400, 10109, "invalid operation on sealed stream"),
    ];
    let mut checks = common::Checks::default();
    for (name, body, code, err_code, desc) in cases {
        let r = api(&c, &format!("$JS.API.STREAM.PURGE.{name}"), body).await;
        checks.json(
            &r,
            &api_error_body(
                "stream_purge_response",
                code,
                err_code,
                desc,
                purged0.clone(),
            ),
            format!("PURGE.{name} {body:?}"),
        );
    }
    checks.done();
    assert_eq!(state(&c, "P", "").await["messages"], 7);
}

#[tokio::test]
async fn purge_with_the_client() {
    let s = common::js_server();
    let c = s.client().await;
    let js = jetstream::new(c.clone());
    seven(&c, "P").await;
    let st = js.get_stream("P").await.unwrap();
    let r = st.purge().filter("P.a").keep(1).await.unwrap();
    assert_eq!((r.success, r.purged), (true, 2));
    let r = st.purge().sequence(5).await.unwrap();
    assert_eq!((r.success, r.purged), (true, 2));
    let r = st.purge().await.unwrap();
    assert_eq!((r.success, r.purged), (true, 3));
    let r = st.purge().await.unwrap();
    assert_eq!((r.success, r.purged), (true, 0));
}

/// A stream M on m.> holding a, b, a, c, b (1-5), then m.h with a header
/// and no payload (6) and m.h2 with two headers and a payload (7).
async fn messages(c: &async_nats::Client, extra: Value) {
    let mut cfg = json!({"name": "M", "subjects": ["m.>"]});
    cfg.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    create(c, "M", cfg).await;
    for s in ["a", "b", "a", "c", "b"] {
        pubt(c, &format!("m.{s}"), &[], s.as_bytes()).await;
    }
    pubt(c, "m.h", &[("K", "V")], b"").await;
    pubt(c, "m.h2", &[("K", "V"), ("K", "W")], b"pp").await;
}

fn got_msg(subject: &str, seq: u64, hdrs: Option<&[u8]>, data: Option<&[u8]>) -> Value {
    let mut m = json!({"subject": subject, "seq": seq, "time": "<ts>"});
    if let Some(h) = hdrs {
        m["hdrs"] = json!(b64(h));
    }
    if let Some(d) = data {
        m["data"] = json!(b64(d));
    }
    json!({"type": "io.nats.jetstream.api.v1.stream_msg_get_response", "message": m})
}

async fn msg_get(c: &async_nats::Client, body: &str) -> Value {
    let mut r = api(c, "$JS.API.STREAM.MSG.GET.M", body).await;
    scrub(&mut r);
    r
}

#[tokio::test]
async fn msg_get_by_sequence() {
    let s = common::js_server();
    let c = s.client().await;
    messages(&c, json!({})).await;
    let h2 = b"NATS/1.0\r\nK: V\r\nK: W\r\n\r\n";
    let cases: Vec<(&str, Value)> = vec![
        (r#"{"seq":1}"#, got_msg("m.a", 1, None, Some(b"a"))),
        // No payload: no data.
        (
            r#"{"seq":6}"#,
            got_msg("m.h", 6, Some(b"NATS/1.0\r\nK: V\r\n\r\n"), None),
        ),
        (r#"{"seq":7}"#, got_msg("m.h2", 7, Some(h2), Some(b"pp"))),
        (
            r#"{"seq":7,"no_hdr":true}"#,
            got_msg("m.h2", 7, None, Some(b"pp")),
        ),
    ];
    let mut checks = common::Checks::default();
    for (body, want) in cases {
        checks.json(&msg_get(&c, body).await, &want, body);
    }
    checks.done();
    let not_found = api_error_body(
        "stream_msg_get_response",
        404,
        10037,
        "no message found",
        json!({}),
    );
    assert_eq!(msg_get(&c, r#"{"seq":99}"#).await, not_found);
    let r = api(&c, "$JS.API.STREAM.MSG.DELETE.M", r#"{"seq":1}"#).await;
    assert_eq!(r["success"], true, "{r}");
    assert_eq!(msg_get(&c, r#"{"seq":1}"#).await, not_found);
}

#[tokio::test]
async fn msg_get_by_subject_and_time() {
    let s = common::js_server();
    let c = s.client().await;
    messages(&c, json!({})).await;
    let h2 = b"NATS/1.0\r\nK: V\r\nK: W\r\n\r\n";
    let not_found = api_error_body(
        "stream_msg_get_response",
        404,
        10037,
        "no message found",
        json!({}),
    );
    let cases: Vec<(&str, Value)> = vec![
        (
            r#"{"last_by_subj":"m.a"}"#,
            got_msg("m.a", 3, None, Some(b"a")),
        ),
        (
            r#"{"last_by_subj":"m.*"}"#,
            got_msg("m.h2", 7, Some(h2), Some(b"pp")),
        ),
        (r#"{"last_by_subj":"m.zz"}"#, not_found.clone()),
        (
            r#"{"next_by_subj":"m.b"}"#,
            got_msg("m.b", 2, None, Some(b"b")),
        ),
        (
            r#"{"next_by_subj":"m.b","seq":3}"#,
            got_msg("m.b", 5, None, Some(b"b")),
        ),
        (r#"{"next_by_subj":"m.b","seq":6}"#, not_found.clone()),
        (
            r#"{"next_by_subj":"m.*","seq":4}"#,
            got_msg("m.c", 4, None, Some(b"c")),
        ),
        (
            r#"{"start_time":"2020-01-01T00:00:00Z"}"#,
            got_msg("m.a", 1, None, Some(b"a")),
        ),
        (
            r#"{"start_time":"2099-01-01T00:00:00Z"}"#,
            not_found.clone(),
        ),
        (
            r#"{"start_time":"2020-01-01T00:00:00Z","next_by_subj":"m.c"}"#,
            got_msg("m.c", 4, None, Some(b"c")),
        ),
    ];
    let mut checks = common::Checks::default();
    for (body, want) in cases {
        checks.json(&msg_get(&c, body).await, &want, body);
    }
    checks.done();
}

#[tokio::test]
async fn msg_get_request_errors() {
    let s = common::js_server();
    let c = s.client().await;
    messages(&c, json!({})).await;
    let bad = (400, 10003, "bad request");
    let cases: Vec<(&str, &str, (u64, u64, &str))> = vec![
        ("M", "", bad),
        ("M", "{}", bad),
        ("M", "null", bad),
        (
            "M",
            "[]",
            (400, 10025, "invalid JSON: json: cannot unmarshal array into Go value of type server.JSApiMsgGetRequest"),
        ),
        ("M", "garbage", (400, 10025, "invalid JSON: invalid character 'g' looking for beginning of value at offset 1")),
        ("M", r#"{"seq":1,"bogus":1}"#, (400, 10025, "invalid JSON: json: unknown field \"bogus\"")),
        (
            "M",
            r#"{"seq":-1}"#,
            (
                400,
                10025,
                "invalid JSON: json: cannot unmarshal number -1 into Go struct field JSApiMsgGetRequest.seq of type uint64",
            ),
        ),
        (
            "M",
            r#"{"start_time":"garbage"}"#,
            (
                400,
                10025,
                "invalid JSON: parsing time \"garbage\" as \"2006-01-02T15:04:05Z07:00\": cannot parse \"garbage\" as \"2006\"",
            ),
        ),
        ("M", r#"{"seq":1,"last_by_subj":"m.a"}"#, bad),
        ("M", r#"{"no_hdr":true}"#, bad),
        ("M", r#"{"seq":1,"start_time":"2020-01-01T00:00:00Z"}"#, bad),
        ("M", r#"{"last_by_subj":"m.a","start_time":"2020-01-01T00:00:00Z"}"#, bad),
        ("M", r#"{"last_by_subj":"m.a","next_by_subj":"m.a"}"#, bad),
        ("M", r#"{"seq":1,"batch":2}"#, bad),
        ("M", r#"{"seq":1,"max_bytes":2}"#, bad),
        ("NOPE", r#"{"seq":1}"#, (404, 10059, "stream not found")),
        // The request is checked before the stream is looked up, on one
        // server; a cluster's meta leader says the stream is not there
        // first.
        if common::clustered() {
            ("NOPE", "", (404, 10059, "stream not found"))
        } else {
            ("NOPE", "", bad)
        },
    ];
    let mut checks = common::Checks::default();
    for (name, body, (code, err_code, desc)) in cases {
        let r = api(&c, &format!("$JS.API.STREAM.MSG.GET.{name}"), body).await;
        checks.json(
            &r,
            &api_error_body("stream_msg_get_response", code, err_code, desc, json!({})),
            format!("MSG.GET.{name} {body:?}"),
        );
    }
    checks.done();
}

#[tokio::test]
async fn msg_get_with_the_client() {
    let s = common::js_server();
    let c = s.client().await;
    messages(&c, json!({})).await;
    let js = jetstream::new(c.clone());
    let st = js.get_stream("M").await.unwrap();
    let m = st.get_raw_message(7).await.unwrap();
    assert_eq!(
        (m.subject.as_str(), m.sequence, &m.payload[..]),
        ("m.h2", 7, &b"pp"[..])
    );
    // async-nats keeps the last of repeated headers here: the server sent
    // them in order.
    assert_eq!(m.headers.get("K").map(|v| v.as_str()), Some("W"));
    let m = st.get_last_raw_message_by_subject("m.a").await.unwrap();
    assert_eq!(m.sequence, 3);
    let m = st.get_next_raw_message_by_subject("m.b").await.unwrap();
    assert_eq!(m.sequence, 2);
    let err = st.get_raw_message(99).await.expect_err("missing");
    assert_eq!(err.kind(), LastRawMessageErrorKind::NoMessageFound);
    let err = st
        .get_last_raw_message_by_subject("m.zz")
        .await
        .expect_err("missing");
    assert_eq!(err.kind(), LastRawMessageErrorKind::NoMessageFound);
}

fn delete_err(code: u64, err_code: u64, desc: &str) -> Value {
    api_error_body(
        "stream_msg_delete_response",
        code,
        err_code,
        desc,
        json!({}),
    )
}

fn delete_ok() -> Value {
    json!({"type": "io.nats.jetstream.api.v1.stream_msg_delete_response", "success": true})
}

#[tokio::test]
async fn msg_delete_file_store() {
    let s = common::js_server();
    let c = s.client().await;
    messages(&c, json!({})).await;
    let cases: Vec<(&str, &str, Value)> = vec![
        ("M", "", delete_err(400, 10003, "bad request")),
        ("M", "{}", delete_err(400, 10003, "bad request")),
        ("M", "null", delete_err(500, 10057, "no message found")),
        (
            "M",
            "[]",
            delete_err(400, 10025, "invalid JSON: json: cannot unmarshal array into Go value of type server.JSApiMsgDeleteRequest"),
        ),
        (
            "M",
            "garbage",
            delete_err(400, 10025, "invalid JSON: invalid character 'g' looking for beginning of value at offset 1"),
        ),
        ("M", r#"{"seq":2,"bogus":1}"#, delete_err(400, 10025, "invalid JSON: json: unknown field \"bogus\"")),
        ("NOPE", r#"{"seq":2}"#, delete_err(404, 10059, "stream not found")),
        // On one server the body is read first; a cluster's meta leader
        // says the stream is not there first.
        if common::clustered() {
            ("NOPE", "", delete_err(404, 10059, "stream not found"))
        } else {
            ("NOPE", "", delete_err(400, 10003, "bad request"))
        },
        ("M", r#"{"seq":2}"#, delete_ok()),
        ("M", r#"{"seq":2}"#, delete_err(400, 10043, "sequence 2 not found")),
        ("M", r#"{"seq":0}"#, delete_err(500, 10057, "no message found")),
        ("M", r#"{"seq":99}"#, delete_err(500, 10057, "stream store EOF")),
        ("M", r#"{"seq":3,"no_erase":true}"#, delete_ok()),
        ("M", r#"{"seq":1}"#, delete_ok()),
        // Below the first sequence now.
        ("M", r#"{"seq":1}"#, delete_err(500, 10057, "no message found")),
    ];
    let mut checks = common::Checks::default();
    for (i, (name, body, want)) in cases.into_iter().enumerate() {
        let r = api(&c, &format!("$JS.API.STREAM.MSG.DELETE.{name}"), body).await;
        checks.json(&r, &want, format!("step {i}: MSG.DELETE.{name} {body:?}"));
    }
    checks.done();
    // 1-3 are gone: the first sequence moved past them. (File store byte
    // accounting has its own test, js_publish::byte_accounting.)
    let mut st = state(&c, "M", r#"{"deleted_details":true}"#).await;
    st.as_object_mut().unwrap().remove("bytes");
    assert_eq!(
        st,
        json!({"messages": 4, "first_seq": 4, "last_seq": 7, "num_subjects": 4, "consumer_count": 0})
    );
}

#[tokio::test]
async fn msg_delete_memory_store() {
    let s = common::js_server();
    let c = s.client().await;
    messages(&c, json!({"storage": "memory"})).await;
    let cases: Vec<(&str, Value)> = vec![
        ("", delete_err(400, 10003, "bad request")),
        ("null", delete_err(400, 10043, "sequence 0 not found")),
        (r#"{"seq":2}"#, delete_ok()),
        (
            r#"{"seq":2}"#,
            delete_err(400, 10043, "sequence 2 not found"),
        ),
        (
            r#"{"seq":0}"#,
            delete_err(400, 10043, "sequence 0 not found"),
        ),
        (
            r#"{"seq":99}"#,
            delete_err(400, 10043, "sequence 99 not found"),
        ),
        (r#"{"seq":4,"no_erase":true}"#, delete_ok()),
        (r#"{"seq":1}"#, delete_ok()),
        (
            r#"{"seq":1}"#,
            delete_err(400, 10043, "sequence 1 not found"),
        ),
    ];
    let mut checks = common::Checks::default();
    for (i, (body, want)) in cases.into_iter().enumerate() {
        let r = api(&c, "$JS.API.STREAM.MSG.DELETE.M", body).await;
        checks.json(&r, &want, format!("step {i}: {body:?}"));
    }
    checks.done();
    // 3 is still there, so 4 is an interior gap.
    assert_eq!(
        state(&c, "M", r#"{"deleted_details":true}"#).await,
        json!({"messages": 4, "bytes": 20 + 20 + 37 + 46, "first_seq": 3, "last_seq": 7,
               "num_subjects": 4, "num_deleted": 1, "deleted": [4], "consumer_count": 0})
    );
}

#[tokio::test]
async fn msg_delete_refused_by_the_stream() {
    let s = common::js_server();
    let c = s.client().await;
    create(&c, "DD", json!({"name": "DD", "deny_delete": true})).await;
    pubt(&c, "DD", &[], b"x").await;
    for seq in [1, 5] {
        let r = api(
            &c,
            "$JS.API.STREAM.MSG.DELETE.DD",
            &format!(r#"{{"seq":{seq}}}"#),
        )
        .await;
        assert_eq!(
            r,
            delete_err(500, 10057, "message delete not permitted"),
            "seq {seq}"
        );
    }
    create(&c, "SE", json!({"name": "SE"})).await;
    pubt(&c, "SE", &[], b"x").await;
    api(
        &c,
        "$JS.API.STREAM.UPDATE.SE",
        &json!({"name": "SE", "sealed": true}).to_string(),
    )
    .await;
    let r = api(&c, "$JS.API.STREAM.MSG.DELETE.SE", r#"{"seq":1}"#).await;
    assert_eq!(
        r,
        delete_err(400, 10109, "invalid operation on sealed stream")
    );
    assert_eq!(state(&c, "DD", "").await["messages"], 1);
    assert_eq!(state(&c, "SE", "").await["messages"], 1);
}

#[tokio::test]
async fn msg_delete_with_the_client() {
    let s = common::js_server();
    let c = s.client().await;
    messages(&c, json!({})).await;
    let js = jetstream::new(c.clone());
    let st = js.get_stream("M").await.unwrap();
    assert!(st.delete_message(3).await.unwrap());
    let err = st.delete_message(3).await.expect_err("gone");
    match err.kind() {
        jetstream::stream::DeleteMessageErrorKind::JetStream(e) => {
            assert_eq!(e.error_code().0, 10043);
            assert_eq!(e.code(), 400);
        }
        k => panic!("unexpected {k:?}"),
    }
    let m = st.get_raw_message(4).await.unwrap();
    assert_eq!(m.subject.as_str(), "m.c");
}

#[tokio::test]
async fn info_deleted_details_and_subjects_filter() {
    let s = common::js_server();
    let c = s.client().await;
    create(&c, "S", json!({"name": "S", "subjects": ["s.>"]})).await;
    for subj in ["c", "a", "b", "a", "d.x"] {
        pubt(&c, &format!("s.{subj}"), &[], b"x").await;
    }
    for seq in [2, 3] {
        api(
            &c,
            "$JS.API.STREAM.MSG.DELETE.S",
            &format!(r#"{{"seq":{seq}}}"#),
        )
        .await;
    }
    let base = json!({"messages": 3, "first_seq": 1, "last_seq": 5,
                      "num_subjects": 3, "num_deleted": 2, "consumer_count": 0});
    // (body, total, offset, limit, subjects, deleted)
    let cases: Vec<(&str, u64, u64, u64, Value, Value)> = vec![
        ("", 0, 0, 0, Value::Null, Value::Null),
        (
            r#"{"deleted_details":true}"#,
            0,
            0,
            0,
            Value::Null,
            json!([2, 3]),
        ),
        (
            r#"{"deleted_details":false}"#,
            0,
            0,
            0,
            Value::Null,
            Value::Null,
        ),
        (
            r#"{"subjects_filter":"s.*"}"#,
            2,
            0,
            100_000,
            json!({"s.a": 1, "s.c": 1}),
            Value::Null,
        ),
        (
            r#"{"subjects_filter":"s.*","offset":1}"#,
            2,
            1,
            100_000,
            json!({"s.c": 1}),
            Value::Null,
        ),
        (
            r#"{"subjects_filter":"s.*","offset":10}"#,
            2,
            10,
            100_000,
            Value::Null,
            Value::Null,
        ),
        (
            r#"{"subjects_filter":">","offset":-3}"#,
            3,
            0,
            100_000,
            json!({"s.a": 1, "s.c": 1, "s.d.x": 1}),
            Value::Null,
        ),
        (
            r#"{"subjects_filter":"s.a"}"#,
            1,
            0,
            100_000,
            json!({"s.a": 1}),
            Value::Null,
        ),
        (
            r#"{"subjects_filter":"zz"}"#,
            0,
            0,
            0,
            Value::Null,
            Value::Null,
        ),
        (
            r#"{"subjects_filter":"zz","offset":3}"#,
            0,
            0,
            0,
            Value::Null,
            Value::Null,
        ),
        (r#"{"offset":3}"#, 0, 0, 0, Value::Null, Value::Null),
    ];
    for (body, total, offset, limit, subjects, deleted) in cases {
        let r = api(&c, "$JS.API.STREAM.INFO.S", body).await;
        assert_eq!(
            (
                r["total"].as_u64(),
                r["offset"].as_u64(),
                r["limit"].as_u64()
            ),
            (Some(total), Some(offset), Some(limit)),
            "{body}: {r}"
        );
        let mut want = base.clone();
        if !subjects.is_null() {
            want["subjects"] = subjects;
        }
        if !deleted.is_null() {
            want["deleted"] = deleted;
        }
        let mut st = r["state"].clone();
        st.as_object_mut().unwrap().remove("first_ts");
        st.as_object_mut().unwrap().remove("last_ts");
        // Byte accounting has its own tests (js_publish::byte_accounting).
        st.as_object_mut().unwrap().remove("bytes");
        assert_eq!(st, want, "{body}");
    }
    // The client's paging over subjects.
    let js = jetstream::new(c.clone());
    let st = js.get_stream("S").await.unwrap();
    let mut got: Vec<(String, usize)> = st
        .info_with_subjects("s.>")
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    got.sort();
    assert_eq!(
        got,
        [
            ("s.a".to_string(), 1),
            ("s.c".to_string(), 1),
            ("s.d.x".to_string(), 1)
        ]
    );
    let info = st.info_builder().with_deleted(true).fetch().await.unwrap();
    assert_eq!(info.info.state.deleted, Some(vec![2, 3]));
}

/// A stream D on d.> with direct gets: a, b, a, c.x, b (1-5), then d.h
/// with a header (6).
async fn direct_stream(c: &async_nats::Client) {
    create(
        c,
        "D",
        json!({"name": "D", "subjects": ["d.>"], "allow_direct": true}),
    )
    .await;
    for s in ["a", "b", "a", "c.x", "b"] {
        pubt(c, &format!("d.{s}"), &[], s.as_bytes()).await;
    }
    pubt(c, "d.h", &[("K", "V")], b"hh").await;
}

/// An expected direct-get hit: (subject, sequence, payload).
type Found<'a> = (&'a str, u64, &'a [u8]);

/// (sequence, Nats-Num-Pending, Nats-Last-Sequence) per message, and the
/// EOB's (Nats-Num-Pending, Nats-Last-Sequence).
type Batch = (Vec<(u64, u64, u64)>, Option<(u64, u64)>);

/// A batch request and the batch it should get.
type BatchCase<'a> = (&'a str, Vec<(u64, u64, u64)>, (u64, u64));

/// A multi_last request, its messages and the EOB's Nats-UpTo-Sequence.
type MultiLastCase<'a> = (&'a str, Vec<(u64, u64, u64)>, u64);

fn status(m: &async_nats::Message) -> (Option<u16>, Option<&str>) {
    (m.status.map(|s| s.as_u16()), m.description.as_deref())
}

/// (subject, sequence, payload) of a direct-get reply, checking the
/// stream headers.
fn found(m: &async_nats::Message) -> (String, u64, Vec<u8>) {
    assert_eq!(m.status, None, "{m:?}");
    assert_eq!(common::header(m, "Nats-Stream"), Some("D"), "{m:?}");
    let ts = common::header(m, "Nats-Time-Stamp").unwrap_or_else(|| panic!("no time stamp: {m:?}"));
    assert!(common::is_timestamp(&json!(ts)), "{m:?}");
    (
        common::header(m, "Nats-Subject")
            .unwrap_or_else(|| panic!("no subject: {m:?}"))
            .to_string(),
        common::header(m, "Nats-Sequence").unwrap().parse().unwrap(),
        m.payload.to_vec(),
    )
}

async fn direct(c: &async_nats::Client, subject: &str, body: &str) -> async_nats::Message {
    c.request(subject.to_string(), body.to_string().into())
        .await
        .unwrap_or_else(|e| panic!("{subject} {body}: {e:?}"))
}

#[tokio::test]
async fn direct_get_needs_allow_direct() {
    let s = common::js_server();
    let c = s.client().await;
    create(&c, "ND", json!({"name": "ND", "subjects": ["nd.>"]})).await;
    pubt(&c, "nd.a", &[], b"x").await;
    for (subject, body) in [
        ("$JS.API.DIRECT.GET.ND", r#"{"seq":1}"#),
        ("$JS.API.DIRECT.GET.ND.nd.a", ""),
        ("$JS.API.DIRECT.GET.NOPE", r#"{"seq":1}"#),
    ] {
        let err = c
            .request(subject, body.into())
            .await
            .expect_err("nobody answers");
        assert_eq!(
            err.kind(),
            async_nats::RequestErrorKind::NoResponders,
            "{subject}"
        );
    }
    // Turning it on by update subscribes.
    let r = api(
        &c,
        "$JS.API.STREAM.UPDATE.ND",
        &json!({"name": "ND", "subjects": ["nd.>"], "allow_direct": true}).to_string(),
    )
    .await;
    assert_eq!(r["config"]["allow_direct"], true, "{r}");
    let m = c
        .request("$JS.API.DIRECT.GET.ND", r#"{"seq":1}"#.into())
        .await
        .unwrap();
    assert_eq!(common::header(&m, "Nats-Sequence"), Some("1"), "{m:?}");
    // And turning it off unsubscribes.
    let r = api(
        &c,
        "$JS.API.STREAM.UPDATE.ND",
        &json!({"name": "ND", "subjects": ["nd.>"], "allow_direct": false}).to_string(),
    )
    .await;
    assert_eq!(r["config"]["allow_direct"], false, "{r}");
    let err = c
        .request("$JS.API.DIRECT.GET.ND", r#"{"seq":1}"#.into())
        .await
        .expect_err("nobody answers");
    assert_eq!(err.kind(), async_nats::RequestErrorKind::NoResponders);
}

#[tokio::test]
async fn direct_get_without_responders_names_the_subject() {
    let s = common::js_server();
    let c = s.client().await;
    create(&c, "ND", json!({"name": "ND", "subjects": ["nd.>"]})).await;
    for (subject, body) in [
        ("$JS.API.DIRECT.GET.ND", r#"{"seq":1}"#),
        ("$JS.API.DIRECT.GET.ND.nd.a", ""),
        ("$JS.API.DIRECT.GET.NOPE", r#"{"seq":1}"#),
    ] {
        // The no-responders status names the subject, as for any subject
        // nobody listens on.
        let replies =
            common::collect_replies(&c, subject, body.as_bytes(), Duration::from_secs(2)).await;
        assert_eq!(replies.len(), 1, "{subject}: {replies:?}");
        assert_eq!(
            status(&replies[0]),
            (Some(503), None),
            "{subject}: {replies:?}"
        );
        assert_eq!(
            common::header(&replies[0], "Nats-Subject"),
            Some(subject),
            "{subject}: {replies:?}"
        );
    }
    // The same as for a subject with no subscribers at all.
    let replies = common::collect_replies(&c, "nobody.here", b"", Duration::from_secs(2)).await;
    assert_eq!(
        common::header(&replies[0], "Nats-Subject"),
        Some("nobody.here"),
        "{replies:?}"
    );
}

#[tokio::test]
async fn direct_get_single_messages() {
    let s = common::js_server();
    let c = s.client().await;
    direct_stream(&c).await;
    let g = "$JS.API.DIRECT.GET.D";
    let cases: Vec<(&str, Found)> = vec![
        (r#"{"seq":1}"#, ("d.a", 1, b"a")),
        (r#"{"seq":6}"#, ("d.h", 6, b"hh")),
        (r#"{"last_by_subj":"d.a"}"#, ("d.a", 3, b"a")),
        (r#"{"next_by_subj":"d.b"}"#, ("d.b", 2, b"b")),
        (r#"{"next_by_subj":"d.b","seq":3}"#, ("d.b", 5, b"b")),
        (r#"{"start_time":"2020-01-01T00:00:00Z"}"#, ("d.a", 1, b"a")),
        // Unknown fields are ignored here.
        (r#"{"bogus":1,"seq":2}"#, ("d.b", 2, b"b")),
    ];
    for (body, (subj, seq, payload)) in cases {
        let m = direct(&c, g, body).await;
        assert_eq!(
            found(&m),
            (subj.to_string(), seq, payload.to_vec()),
            "{body}"
        );
    }
    // Stored headers come first, then the stream's.
    let m = direct(&c, g, r#"{"seq":6}"#).await;
    assert_eq!(common::header(&m, "K"), Some("V"));
    // no_hdr: the bare payload.
    let m = direct(&c, g, r#"{"seq":6,"no_hdr":true}"#).await;
    assert!(m.headers.as_ref().is_none_or(|h| h.is_empty()), "{m:?}");
    assert_eq!(&m.payload[..], b"hh");
}

#[tokio::test]
async fn direct_get_header_block() {
    let s = common::js_server();
    let c = s.client().await;
    direct_stream(&c).await;
    let mut raw = common::raw_js(&s.addr());
    raw.send(b"SUB rep 1\r\n");
    for (body, want) in [
        (
            r#"{"seq":6}"#,
            vec![
                "NATS/1.0",
                "K: V",
                "Nats-Stream: D",
                "Nats-Subject: d.h",
                "Nats-Sequence: 6",
            ],
        ),
        (
            r#"{"seq":1}"#,
            vec![
                "NATS/1.0",
                "Nats-Stream: D",
                "Nats-Subject: d.a",
                "Nats-Sequence: 1",
            ],
        ),
    ] {
        raw.send(format!("PUB $JS.API.DIRECT.GET.D rep {}\r\n{body}\r\n", body.len()).as_bytes());
        let (_, h, _) = raw.next_msg(Duration::from_secs(2));
        let lines: Vec<&str> = h.split("\r\n").collect();
        let n = want.len();
        assert_eq!(lines[..n], want[..], "{h:?}");
        assert!(lines[n].starts_with("Nats-Time-Stamp: "), "{h:?}");
        assert_eq!(lines[n + 1..], ["", ""], "{h:?}");
    }
    // A not-found status has no other headers.
    let body = r#"{"seq":99}"#;
    raw.send(format!("PUB $JS.API.DIRECT.GET.D rep {}\r\n{body}\r\n", body.len()).as_bytes());
    let (_, h, payload) = raw.next_msg(Duration::from_secs(2));
    assert_eq!(h, "NATS/1.0 404 Message Not Found\r\n\r\n");
    assert!(payload.is_empty());
}

#[tokio::test]
async fn direct_get_status_codes() {
    let s = common::js_server();
    let c = s.client().await;
    direct_stream(&c).await;
    let g = "$JS.API.DIRECT.GET.D";
    let cases = [
        (g, r#"{"seq":99}"#, 404, "Message Not Found"),
        (g, r#"{"last_by_subj":"d.zz"}"#, 404, "Message Not Found"),
        (g, r#"{"seq":99,"batch":2}"#, 404, "Message Not Found"),
        (g, "", 408, "Empty Request"),
        (g, "{}", 408, "Empty Request"),
        (g, r#"{"bogus":1}"#, 408, "Empty Request"),
        (g, r#"{"batch":3}"#, 408, "Empty Request"),
        (g, "garbage", 408, "Malformed Request"),
        (g, r#"{"start_time":"garbage"}"#, 408, "Malformed Request"),
        (g, r#"{"seq":-1}"#, 408, "Malformed Request"),
        (g, r#"{"seq":1,"last_by_subj":"d.a"}"#, 408, "Bad Request"),
        (g, r#"{"last_by_subj":"d.a","batch":2}"#, 408, "Bad Request"),
        (
            g,
            r#"{"last_by_subj":"d.a","next_by_subj":"d.a"}"#,
            408,
            "Bad Request",
        ),
        (
            g,
            r#"{"seq":1,"start_time":"2020-01-01T00:00:00Z"}"#,
            408,
            "Bad Request",
        ),
        ("$JS.API.DIRECT.GET.D.d.zz", "", 404, "Message Not Found"),
        (
            "$JS.API.DIRECT.GET.D.d.a",
            r#"{"seq":1}"#,
            408,
            "Bad Request",
        ),
        (
            "$JS.API.DIRECT.GET.D.d.a",
            r#"{"last_by_subj":"d.b"}"#,
            408,
            "Bad Request",
        ),
        (
            "$JS.API.DIRECT.GET.D.d.a",
            "garbage",
            408,
            "Malformed Request",
        ),
    ];
    let mut checks = common::Checks::default();
    for (subject, body, code, desc) in cases {
        let m = direct(&c, subject, body).await;
        checks.eq(
            (status(&m), m.payload.is_empty()),
            ((Some(code), Some(desc)), true),
            format!("{subject} {body:?}"),
        );
    }
    checks.done();
}

#[tokio::test]
async fn direct_get_last_by_subject_suffix() {
    let s = common::js_server();
    let c = s.client().await;
    direct_stream(&c).await;
    let cases: Vec<(&str, &str, Found)> = vec![
        ("$JS.API.DIRECT.GET.D.d.a", "", ("d.a", 3, b"a")),
        ("$JS.API.DIRECT.GET.D.d.c.x", "", ("d.c.x", 4, b"c.x")),
        ("$JS.API.DIRECT.GET.D.d.b", "", ("d.b", 5, b"b")),
        // A body without lookup fields is accepted.
        ("$JS.API.DIRECT.GET.D.d.a", "{}", ("d.a", 3, b"a")),
        (
            "$JS.API.DIRECT.GET.D.d.a",
            r#"{"bogus":1}"#,
            ("d.a", 3, b"a"),
        ),
    ];
    for (subject, body, (subj, seq, payload)) in cases {
        let m = direct(&c, subject, body).await;
        assert_eq!(
            found(&m),
            (subj.to_string(), seq, payload.to_vec()),
            "{subject} {body:?}"
        );
    }
    let m = direct(&c, "$JS.API.DIRECT.GET.D.d.a", r#"{"no_hdr":true}"#).await;
    assert!(m.headers.as_ref().is_none_or(|h| h.is_empty()), "{m:?}");
    assert_eq!(&m.payload[..], b"a");
}

/// (sequence, Nats-Num-Pending, Nats-Last-Sequence) of each message in a
/// batch, and the EOB's (Nats-Num-Pending, Nats-Last-Sequence).
fn batch_of(replies: &[async_nats::Message]) -> Batch {
    let num = |m: &async_nats::Message, h: &str| -> u64 {
        common::header(m, h)
            .unwrap_or_else(|| panic!("no {h}: {m:?}"))
            .parse()
            .unwrap()
    };
    let mut msgs = Vec::new();
    let mut eob = None;
    for m in replies {
        match m.status.map(|s| s.as_u16()) {
            None => msgs.push((
                num(m, "Nats-Sequence"),
                num(m, "Nats-Num-Pending"),
                num(m, "Nats-Last-Sequence"),
            )),
            Some(204) => {
                assert_eq!(m.description.as_deref(), Some("EOB"), "{m:?}");
                assert!(m.payload.is_empty());
                eob = Some((num(m, "Nats-Num-Pending"), num(m, "Nats-Last-Sequence")));
            }
            _ => panic!("unexpected status in a batch: {m:?}"),
        }
    }
    (msgs, eob)
}

#[tokio::test]
async fn direct_get_batches() {
    let s = common::js_server();
    let c = s.client().await;
    create(
        &c,
        "D",
        json!({"name": "D", "subjects": ["d.>"], "allow_direct": true}),
    )
    .await;
    for subj in ["a", "b", "a", "c", "b"] {
        pubt(&c, &format!("d.{subj}"), &[], subj.as_bytes()).await;
    }
    let g = "$JS.API.DIRECT.GET.D";
    let wait = Duration::from_millis(500);
    let cases: Vec<BatchCase> = vec![
        (
            r#"{"seq":2,"batch":10,"next_by_subj":"d.b"}"#,
            vec![(2, 1, 0), (5, 0, 2)],
            (0, 5),
        ),
        (r#"{"seq":3,"batch":2}"#, vec![(3, 2, 0), (4, 1, 3)], (1, 4)),
        (r#"{"seq":1,"batch":1}"#, vec![(1, 4, 0)], (4, 1)),
        (
            r#"{"next_by_subj":"d.a","batch":5}"#,
            vec![(1, 1, 0), (3, 0, 1)],
            (0, 3),
        ),
        // max_bytes counts subject, headers and payload; it stops once reached.
        (
            r#"{"seq":1,"batch":10,"max_bytes":5}"#,
            vec![(1, 4, 0), (2, 3, 1)],
            (3, 2),
        ),
    ];
    for (body, msgs, eob) in cases {
        let replies = common::collect_replies(&c, g, body.as_bytes(), wait).await;
        assert_eq!(batch_of(&replies), (msgs, Some(eob)), "{body}: {replies:?}");
    }
    // Deleted messages are stepped over.
    api(&c, "$JS.API.STREAM.MSG.DELETE.D", r#"{"seq":2}"#).await;
    let cases: Vec<BatchCase> = vec![
        (
            r#"{"seq":1,"batch":10}"#,
            vec![(1, 3, 0), (3, 2, 1), (4, 1, 3), (5, 0, 4)],
            (0, 5),
        ),
        (r#"{"seq":2,"batch":2}"#, vec![(3, 2, 0), (4, 1, 3)], (1, 4)),
    ];
    for (body, msgs, eob) in cases {
        let replies = common::collect_replies(&c, g, body.as_bytes(), wait).await;
        assert_eq!(batch_of(&replies), (msgs, Some(eob)), "{body}: {replies:?}");
    }
    // A single get of a deleted message is not found, with no EOB.
    let replies = common::collect_replies(&c, g, br#"{"seq":2}"#, wait).await;
    assert_eq!(replies.len(), 1, "{replies:?}");
    assert_eq!(status(&replies[0]), (Some(404), Some("Message Not Found")));
    let replies = common::collect_replies(&c, g, br#"{"seq":9,"batch":3}"#, wait).await;
    assert_eq!(replies.len(), 1, "{replies:?}");
    assert_eq!(status(&replies[0]), (Some(404), Some("Message Not Found")));
}

#[tokio::test]
async fn direct_get_with_the_client() {
    let s = common::js_server();
    let c = s.client().await;
    direct_stream(&c).await;
    let js = jetstream::new(c.clone());
    let st = js.get_stream("D").await.unwrap();
    let m = st.direct_get(6).await.unwrap();
    assert_eq!(
        (m.subject.as_str(), m.sequence, &m.payload[..]),
        ("d.h", 6, &b"hh"[..])
    );
    assert_eq!(m.headers.get("K").map(|v| v.as_str()), Some("V"));
    let m = st.direct_get_last_for_subject("d.a").await.unwrap();
    assert_eq!(m.sequence, 3);
    let m = st.direct_get_last_for_subject("d.c.x").await.unwrap();
    assert_eq!(m.sequence, 4);
    let m = st
        .direct_get_next_for_subject("d.b", Some(3))
        .await
        .unwrap();
    assert_eq!(m.sequence, 5);
    let m = st.direct_get_next_for_subject("d.b", None).await.unwrap();
    assert_eq!(m.sequence, 2);
    let err = st.direct_get(99).await.expect_err("missing");
    assert_eq!(err.kind(), DirectGetErrorKind::NotFound);
    let err = st
        .direct_get_last_for_subject("d.zz")
        .await
        .expect_err("missing");
    assert_eq!(err.kind(), DirectGetErrorKind::NotFound);
}

#[tokio::test]
async fn direct_get_multi_last() {
    let s = common::js_server();
    let c = s.client().await;
    create(
        &c,
        "D",
        json!({"name": "D", "subjects": ["d.>"], "allow_direct": true}),
    )
    .await;
    for subj in ["a", "b", "a", "c.x", "b", "a"] {
        pubt(&c, &format!("d.{subj}"), &[], subj.as_bytes()).await;
    }
    let g = "$JS.API.DIRECT.GET.D";
    let wait = Duration::from_millis(500);
    // The last message of each matching subject, in sequence order; the
    // EOB also names the sequence the lookup went up to.
    let cases: Vec<MultiLastCase> = vec![
        (
            r#"{"multi_last":["d.a","d.b"]}"#,
            vec![(5, 1, 0), (6, 0, 5)],
            6,
        ),
        (
            r#"{"multi_last":["d.>"]}"#,
            vec![(4, 2, 0), (5, 1, 4), (6, 0, 5)],
            6,
        ),
        (
            r#"{"multi_last":["d.*"],"up_to_seq":3}"#,
            vec![(2, 1, 0), (3, 0, 2)],
            3,
        ),
        (r#"{"multi_last":["d.a"],"batch":1}"#, vec![(6, 0, 0)], 6),
    ];
    for (body, msgs, up_to) in cases {
        let replies = common::collect_replies(&c, g, body.as_bytes(), wait).await;
        let last = msgs.last().map_or(0, |m| m.0);
        assert_eq!(
            batch_of(&replies),
            (msgs, Some((0, last))),
            "{body}: {replies:?}"
        );
        let eob = replies.last().unwrap();
        assert_eq!(
            common::header(eob, "Nats-UpTo-Sequence"),
            Some(up_to.to_string().as_str()),
            "{body}: {eob:?}"
        );
    }
    for (body, code, desc) in [
        (r#"{"multi_last":["zz"]}"#, 404, "No Results"),
        (
            r#"{"multi_last":["d.>"],"up_to_time":"2020-01-01T00:00:00Z"}"#,
            404,
            "No Results",
        ),
        (
            r#"{"multi_last":["d.a"],"up_to_seq":3,"up_to_time":"2020-01-01T00:00:00Z"}"#,
            408,
            "Bad Request",
        ),
        (
            r#"{"multi_last":["d.a"],"last_by_subj":"d.a"}"#,
            408,
            "Bad Request",
        ),
        (
            r#"{"multi_last":["d.a"],"next_by_subj":"d.a"}"#,
            408,
            "Bad Request",
        ),
    ] {
        let replies = common::collect_replies(&c, g, body.as_bytes(), wait).await;
        assert_eq!(replies.len(), 1, "{body}: {replies:?}");
        assert_eq!(
            status(&replies[0]),
            (Some(code), Some(desc)),
            "{body}: {replies:?}"
        );
    }
}

/// A delete refused by the stream's settings counts as an API error; a
/// delete of a missing message is a plain response. The same on one
/// server and in a cluster (where each server counts what it answered:
/// summed over the servers' `/jsz`).
#[tokio::test]
async fn refused_deletes_count_as_api_errors() {
    let s = common::js_server();
    let c = s.client().await;
    create(
        &c,
        "DD",
        json!({"name": "DD", "subjects": ["dd"], "deny_delete": true}),
    )
    .await;
    create(&c, "OK", json!({"name": "OK", "subjects": ["ok"]})).await;
    pubt(&c, "dd", &[], b"x").await;
    pubt(&c, "ok", &[], b"x").await;
    let before = s.api_errors();
    let r = api(&c, "$JS.API.STREAM.MSG.DELETE.DD", r#"{"seq":1}"#).await;
    assert_eq!(r["error"]["err_code"], 10057, "{r}");
    let r = api(&c, "$JS.API.STREAM.MSG.DELETE.OK", r#"{"seq":9}"#).await;
    assert!(r.get("error").is_some(), "{r}");
    // nats-server's cluster counts the failed delete too: its leader
    // answers it through its error path.
    let refused = if common::nats_cluster() { 2 } else { 1 };
    assert_eq!(s.api_errors() - before, refused);
}
