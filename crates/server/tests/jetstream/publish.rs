//! Publishing into streams: acks and error acks, headers that set
//! expectations, deduplication, limits and discard policies, TTLs,
//! roll-ups, republish, subject transforms, sealed streams and interest
//! retention. Expectations are what nats-server 2.15.1 answers.
#[path = "../common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use async_nats::jetstream::{self, context::PublishErrorKind, message::PublishMessage as Publish};
use common::{api, js_publish_text as pubt, wait_messages};
use futures::StreamExt;
use serde_json::{json, Value};

async fn create(c: &async_nats::Client, name: &str, cfg: Value) -> Value {
    common::create_stream(c, name, cfg).await
}

async fn state(c: &async_nats::Client, name: &str, body: &str) -> Value {
    common::stream_state(c, name, body).await
}

/// The state without `bytes`, for tests about something else (byte
/// accounting has its own tests).
fn no_bytes(mut st: Value) -> Value {
    st.as_object_mut().unwrap().remove("bytes");
    st
}

/// Headers of a publish, in order.
type Headers<'a> = &'a [(&'a str, &'a str)];

fn ack(stream: &str, seq: u64) -> String {
    format!(r#"{{"stream":"{stream}","seq":{seq}}}"#)
}

fn err_ack(stream: &str, code: u64, err_code: u64, desc: &str) -> String {
    format!(
        r#"{{"error":{{"code":{code},"err_code":{err_code},"description":{}}},"stream":"{stream}","seq":0}}"#,
        serde_json::to_string(desc).unwrap()
    )
}

/// Compares the JSON of an ack with the expected text (Go escapes `>` and
/// such; the values must agree exactly).
fn assert_ack(got: &str, want: &str, ctx: &str) {
    let g: Value = serde_json::from_str(got).unwrap_or_else(|e| panic!("{ctx}: ack {got:?}: {e}"));
    let w: Value = serde_json::from_str(want).unwrap();
    assert_eq!(g, w, "{ctx}: got {got}");
}

#[tokio::test]
async fn puback_and_duplicate_ack_bytes() {
    let s = common::js_server();
    let c = s.client().await;
    create(&c, "S", json!({"name": "S", "subjects": ["s.>"]})).await;
    assert_eq!(
        pubt(&c, "s.a", &[], b"hi").await,
        r#"{"stream":"S","seq":1}"#
    );
    assert_eq!(
        pubt(&c, "s.a", &[("Nats-Msg-Id", "m1")], b"hi").await,
        r#"{"stream":"S","seq":2}"#
    );
    // The duplicate ack has a space after the colon.
    assert_eq!(
        pubt(&c, "s.a", &[("Nats-Msg-Id", "m1")], b"hi").await,
        r#"{"stream":"S","seq":2,"duplicate": true}"#
    );
    assert_eq!(
        pubt(&c, "s.a", &[("Nats-Expected-Stream", "X")], b"hi").await,
        r#"{"error":{"code":400,"err_code":10060,"description":"expected stream does not match"},"stream":"S","seq":0}"#
    );
    let st = state(&c, "S", "").await;
    assert_eq!(st["messages"], 2);
    assert_eq!(st["last_seq"], 2);
}

#[tokio::test]
async fn publish_without_stream_is_no_responders() {
    let s = common::js_server();
    let c = s.client().await;
    create(&c, "S", json!({"name": "S", "subjects": ["s.>"]})).await;
    let err = c
        .request("nomatch", "hi".into())
        .await
        .expect_err("no stream");
    assert_eq!(err.kind(), async_nats::RequestErrorKind::NoResponders);
    let js = jetstream::new(c.clone());
    let err = js
        .publish("nomatch", "hi".into())
        .await
        .unwrap()
        .await
        .expect_err("no stream");
    assert_eq!(err.kind(), PublishErrorKind::StreamNotFound);
}

#[tokio::test]
async fn dedupe_by_msg_id_with_the_client() {
    let s = common::js_server();
    let c = s.client().await;
    let js = jetstream::new(c.clone());
    create(&c, "S", json!({"name": "S", "subjects": ["s.>"]})).await;
    let send = |id: &'static str, subject: &'static str| {
        let js = js.clone();
        async move {
            js.send_publish(subject, Publish::build().payload("x".into()).message_id(id))
                .await
                .unwrap()
                .await
                .unwrap()
        }
    };
    let a = send("a", "s.1").await;
    assert_eq!(
        (a.sequence, a.duplicate, a.stream.as_str()),
        (1, false, "S")
    );
    let b = send("b", "s.1").await;
    assert_eq!((b.sequence, b.duplicate), (2, false));
    // The same id on another subject of the stream is still a duplicate.
    let a2 = send("a", "s.2").await;
    assert_eq!((a2.sequence, a2.duplicate), (1, true));
    let st = state(&c, "S", "").await;
    assert_eq!(st["messages"], 2);
    assert_eq!(st["last_seq"], 2);
}

#[tokio::test]
async fn dedupe_window_expires() {
    let s = common::js_server();
    let c = s.client().await;
    create(
        &c,
        "DW",
        json!({"name": "DW", "subjects": ["dw"], "duplicate_window": 300_000_000}),
    )
    .await;
    let started = Instant::now();
    assert_eq!(
        pubt(&c, "dw", &[("Nats-Msg-Id", "a")], b"x").await,
        ack("DW", 1)
    );
    assert_eq!(
        pubt(&c, "dw", &[("Nats-Msg-Id", "a")], b"x").await,
        r#"{"stream":"DW","seq":1,"duplicate": true}"#
    );
    let deadline = started + Duration::from_secs(3);
    loop {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let got = pubt(&c, "dw", &[("Nats-Msg-Id", "a")], b"x").await;
        if got == ack("DW", 2) {
            break;
        }
        assert_eq!(got, r#"{"stream":"DW","seq":1,"duplicate": true}"#);
        assert!(Instant::now() < deadline, "the id never left the window");
    }
    assert!(
        started.elapsed() >= Duration::from_millis(300),
        "left the window too early"
    );
}

#[tokio::test]
async fn expected_stream_and_last_sequence() {
    let s = common::js_server();
    let c = s.client().await;
    create(&c, "S", json!({"name": "S", "subjects": ["s.>"]})).await;
    let steps: Vec<(&[(&str, &str)], String)> = vec![
        (&[], ack("S", 1)),
        (&[("Nats-Msg-Id", "m1")], ack("S", 2)),
        // Expectations are checked before deduplication (nats-server's
        // cluster leader finds the duplicate first).
        (
            &[("Nats-Msg-Id", "m1"), ("Nats-Expected-Last-Sequence", "1")],
            if common::nats_cluster() {
                r#"{"stream":"S","seq":2,"duplicate":true}"#.to_string()
            } else {
                err_ack("S", 400, 10071, "wrong last sequence: 2")
            },
        ),
        (
            &[("Nats-Expected-Stream", "X")],
            err_ack("S", 400, 10060, "expected stream does not match"),
        ),
        (&[("Nats-Expected-Stream", "S")], ack("S", 3)),
        // Not a number: never matches.
        (
            &[("Nats-Expected-Last-Sequence", "abc")],
            err_ack("S", 400, 10071, "wrong last sequence: 3"),
        ),
        (&[("Nats-Expected-Last-Sequence", "3")], ack("S", 4)),
        (
            &[("Nats-Expected-Last-Sequence", "3")],
            err_ack("S", 400, 10071, "wrong last sequence: 4"),
        ),
    ];
    for (i, (headers, want)) in steps.iter().enumerate() {
        let got = pubt(&c, "s.a", headers, b"hi").await;
        assert_ack(&got, want, &format!("step {i} {headers:?}"));
    }
    let st = state(&c, "S", "").await;
    assert_eq!(st["messages"], 4);
}

#[tokio::test]
async fn header_values_are_read_like_nats_server() {
    let s = common::js_server();
    let c = s.client().await;
    create(&c, "S", json!({"name": "S", "subjects": ["s.>"]})).await;
    let steps: Vec<(&[(&str, &str)], String)> = vec![
        (&[], ack("S", 1)),
        // An empty value is no expectation at all.
        (&[("Nats-Expected-Last-Sequence", "")], ack("S", 2)),
        (&[("Nats-Expected-Last-Subject-Sequence", "")], ack("S", 3)),
        (
            &[("Nats-Expected-Last-Subject-Sequence", "abc")],
            err_ack("S", 400, 10071, "wrong last sequence: 3"),
        ),
        (&[("Nats-Expected-Stream", "")], ack("S", 4)),
        // An empty id is not deduplicated.
        (&[("Nats-Msg-Id", "")], ack("S", 5)),
        (&[("Nats-Msg-Id", "")], ack("S", 6)),
        // Leading spaces of a value are dropped.
        (&[("Nats-Expected-Last-Sequence", " 6")], ack("S", 7)),
        // Names are case-sensitive.
        (&[("nats-expected-last-sequence", "1")], ack("S", 8)),
        // The first of repeated headers counts.
        (
            &[
                ("Nats-Expected-Last-Sequence", "7"),
                ("Nats-Expected-Last-Sequence", "1"),
            ],
            err_ack("S", 400, 10071, "wrong last sequence: 8"),
        ),
    ];
    for (i, (headers, want)) in steps.iter().enumerate() {
        let got = pubt(&c, "s.a", headers, b"x").await;
        assert_ack(&got, want, &format!("step {i} {headers:?}"));
    }
}

#[tokio::test]
async fn expected_last_subject_sequence() {
    let s = common::js_server();
    let c = s.client().await;
    create(&c, "S", json!({"name": "S", "subjects": ["s.>"]})).await;
    pubt(&c, "s.a", &[], b"x").await; // 1
    let steps: Vec<(&str, Headers, String)> = vec![
        // No message on the subject yet: 0 matches.
        (
            "s.b",
            &[("Nats-Expected-Last-Subject-Sequence", "0")],
            ack("S", 2),
        ),
        (
            "s.b",
            &[("Nats-Expected-Last-Subject-Sequence", "0")],
            err_ack("S", 400, 10071, "wrong last sequence: 2"),
        ),
        (
            "s.b",
            &[("Nats-Expected-Last-Subject-Sequence", "2")],
            ack("S", 3),
        ),
        // Checked against another subject, which may be a wildcard.
        (
            "s.c",
            &[
                ("Nats-Expected-Last-Subject-Sequence", "2"),
                ("Nats-Expected-Last-Subject-Sequence-Subject", "s.b"),
            ],
            err_ack("S", 400, 10071, "wrong last sequence: 3"),
        ),
        (
            "s.c",
            &[
                ("Nats-Expected-Last-Subject-Sequence", "3"),
                ("Nats-Expected-Last-Subject-Sequence-Subject", "s.*"),
            ],
            ack("S", 4),
        ),
        (
            "s.c",
            &[("Nats-Expected-Last-Subject-Sequence-Subject", "s.b")],
            err_ack(
                "S",
                400,
                10193,
                "missing sequence for expected last sequence per subject",
            ),
        ),
        (
            "s.a",
            &[("Nats-Expected-Last-Subject-Sequence", "1")],
            ack("S", 5),
        ),
    ];
    for (i, (subject, headers, want)) in steps.iter().enumerate() {
        let got = pubt(&c, subject, headers, b"x").await;
        assert_ack(&got, want, &format!("step {i} {subject} {headers:?}"));
    }
}

#[tokio::test]
async fn expected_last_msg_id() {
    if common::nats_cluster() {
        // nats-server's cluster leaves a publish whose last message id does
        // not match unanswered (the client times out); flotilla answers as
        // one server does.
        return;
    }
    let s = common::js_server();
    let c = s.client().await;
    create(&c, "S", json!({"name": "S", "subjects": ["s.>"]})).await;
    let steps: Vec<(&[(&str, &str)], String)> = vec![
        (&[], ack("S", 1)),
        // The last message had no id: the error names "".
        (
            &[("Nats-Expected-Last-Msg-Id", "zzz")],
            err_ack("S", 400, 10070, "wrong last msg ID: "),
        ),
        (&[("Nats-Msg-Id", "m2")], ack("S", 2)),
        (
            &[("Nats-Expected-Last-Msg-Id", "zzz")],
            err_ack("S", 400, 10070, "wrong last msg ID: m2"),
        ),
        (&[("Nats-Expected-Last-Msg-Id", "m2")], ack("S", 3)),
        (
            &[("Nats-Expected-Last-Msg-Id", "m2")],
            err_ack("S", 400, 10070, "wrong last msg ID: "),
        ),
        // An empty expectation is no expectation.
        (&[("Nats-Expected-Last-Msg-Id", "")], ack("S", 4)),
    ];
    for (i, (headers, want)) in steps.iter().enumerate() {
        let got = pubt(&c, "s.c", headers, b"x").await;
        assert_ack(&got, want, &format!("step {i} {headers:?}"));
    }
}

#[tokio::test]
async fn client_maps_expectation_errors() {
    if common::nats_cluster() {
        // As in `expected_last_msg_id`: nats-server's cluster does not
        // answer one of these publishes.
        return;
    }
    let s = common::js_server();
    let c = s.client().await;
    let js = jetstream::new(c.clone());
    create(&c, "S", json!({"name": "S", "subjects": ["s.>"]})).await;
    js.publish("s.a", "x".into()).await.unwrap().await.unwrap();
    let err = js
        .send_publish(
            "s.a",
            Publish::build()
                .payload("x".into())
                .expected_last_sequence(9),
        )
        .await
        .unwrap()
        .await
        .expect_err("wrong last sequence");
    assert_eq!(err.kind(), PublishErrorKind::WrongLastSequence);
    let err = js
        .send_publish(
            "s.a",
            Publish::build()
                .payload("x".into())
                .expected_last_message_id("nope"),
        )
        .await
        .unwrap()
        .await
        .expect_err("wrong last id");
    assert_eq!(err.kind(), PublishErrorKind::WrongLastMessageId);
    let ok = js
        .send_publish(
            "s.a",
            Publish::build()
                .payload("x".into())
                .expected_last_sequence(1)
                .expected_last_subject_sequence(1)
                .expected_stream("S"),
        )
        .await
        .unwrap()
        .await
        .unwrap();
    assert_eq!(ok.sequence, 2);
}

#[tokio::test]
async fn max_msg_size_counts_headers() {
    let s = common::js_server();
    let c = s.client().await;
    create(
        &c,
        "Z",
        json!({"name": "Z", "subjects": ["z"], "max_msg_size": 10}),
    )
    .await;
    let too_big = err_ack("Z", 400, 10054, "message size exceeds maximum allowed");
    assert_ack(
        &pubt(&c, "z", &[], &[b'x'; 10]).await,
        &ack("Z", 1),
        "10 bytes",
    );
    assert_ack(&pubt(&c, "z", &[], &[b'x'; 11]).await, &too_big, "11 bytes");
    // A header block alone is over 10 bytes.
    assert_ack(
        &pubt(&c, "z", &[("A", "b")], b"xxxxx").await,
        &too_big,
        "with header",
    );
    assert_ack(
        &pubt(&c, "z", &[("A", "b")], b"").await,
        &too_big,
        "header only",
    );
    let st = state(&c, "Z", "").await;
    assert_eq!(st["messages"], 1);
    assert_eq!(st["last_seq"], 1);
}

#[tokio::test]
async fn discard_new_max_msgs_and_max_bytes() {
    let s = common::js_server();
    let c = s.client().await;
    create(
        &c,
        "L",
        json!({"name": "L", "subjects": ["l.>"], "max_msgs": 3, "discard": "new"}),
    )
    .await;
    for i in 0..3 {
        assert_ack(
            &pubt(&c, &format!("l.{i}"), &[], b"x").await,
            &ack("L", i + 1),
            "under the limit",
        );
    }
    assert_ack(
        &pubt(&c, "l.3", &[], b"x").await,
        &err_ack("L", 503, 10077, "maximum messages exceeded"),
        "over max_msgs",
    );
    // A refused message uses no sequence.
    let st = state(&c, "L", "").await;
    assert_eq!(
        (st["messages"].as_u64(), st["last_seq"].as_u64()),
        (Some(3), Some(3))
    );

    // 22 + 4 + 10 + 8 = 44 bytes each in a file store.
    create(
        &c,
        "L2",
        json!({"name": "L2", "subjects": ["l2.>"], "max_bytes": 100, "discard": "new"}),
    )
    .await;
    assert_ack(
        &pubt(&c, "l2.a", &[], &[b'x'; 10]).await,
        &ack("L2", 1),
        "first",
    );
    assert_ack(
        &pubt(&c, "l2.a", &[], &[b'x'; 10]).await,
        &ack("L2", 2),
        "second",
    );
    for _ in 0..2 {
        assert_ack(
            &pubt(&c, "l2.a", &[], &[b'x'; 10]).await,
            &err_ack("L2", 503, 10077, "maximum bytes exceeded"),
            "over max_bytes",
        );
    }
    let st = state(&c, "L2", "").await;
    assert_eq!(
        (st["messages"].as_u64(), st["bytes"].as_u64()),
        (Some(2), Some(88))
    );
}

#[tokio::test]
async fn discard_new_per_subject() {
    let s = common::js_server();
    let c = s.client().await;
    create(
        &c,
        "L3",
        json!({"name": "L3", "subjects": ["l3.>"], "max_msgs_per_subject": 2, "discard": "new",
               "discard_new_per_subject": true}),
    )
    .await;
    assert_ack(&pubt(&c, "l3.a", &[], b"x").await, &ack("L3", 1), "1");
    assert_ack(&pubt(&c, "l3.a", &[], b"x").await, &ack("L3", 2), "2");
    assert_ack(
        &pubt(&c, "l3.a", &[], b"x").await,
        &err_ack("L3", 503, 10077, "maximum messages per subject exceeded"),
        "3",
    );
    assert_ack(
        &pubt(&c, "l3.b", &[], b"x").await,
        &ack("L3", 3),
        "other subject",
    );
}

#[tokio::test]
async fn discard_new_lets_a_full_subject_replace_its_oldest() {
    let s = common::js_server();
    let c = s.client().await;
    create(
        &c,
        "L4",
        json!({"name": "L4", "subjects": ["l4.>"], "max_msgs_per_subject": 2, "max_msgs": 3, "discard": "new"}),
    )
    .await;
    let steps = [
        ("a", ack("L4", 1)),
        ("a", ack("L4", 2)),
        // Per-subject limits drop the oldest even under discard new.
        ("a", ack("L4", 3)),
        ("b", ack("L4", 4)),
        ("c", err_ack("L4", 503, 10077, "maximum messages exceeded")),
        // a is at its limit: the new one replaces its oldest (nats-server's
        // cluster leader refuses it, counting the stream full first).
        if common::nats_cluster() {
            ("a", err_ack("L4", 503, 10077, "maximum messages exceeded"))
        } else {
            ("a", ack("L4", 5))
        },
    ];
    for (i, (subj, want)) in steps.iter().enumerate() {
        assert_ack(
            &pubt(&c, &format!("l4.{subj}"), &[], b"x").await,
            want,
            &format!("step {i}"),
        );
    }
    if common::nats_cluster() {
        return;
    }
    let st = state(
        &c,
        "L4",
        r#"{"subjects_filter":">","deleted_details":true}"#,
    )
    .await;
    assert_eq!(
        no_bytes(st),
        json!({"messages": 3, "first_seq": 3, "last_seq": 5, "num_subjects": 2,
               "subjects": {"l4.a": 2, "l4.b": 1}, "consumer_count": 0})
    );
}

#[tokio::test]
async fn discard_old_limits() {
    let s = common::js_server();
    let c = s.client().await;
    create(
        &c,
        "O",
        json!({"name": "O", "subjects": ["o.>"], "max_msgs": 3}),
    )
    .await;
    for i in 0..5 {
        assert_ack(
            &pubt(&c, "o.x", &[], b"x").await,
            &ack("O", i + 1),
            "max_msgs",
        );
    }
    assert_eq!(
        no_bytes(state(&c, "O", "").await),
        json!({"messages": 3, "first_seq": 3, "last_seq": 5, "num_subjects": 1, "consumer_count": 0})
    );
    create(
        &c,
        "O2",
        json!({"name": "O2", "subjects": ["o2.>"], "max_msgs_per_subject": 1}),
    )
    .await;
    for (i, subj) in ["a", "b", "a", "a"].iter().enumerate() {
        assert_ack(
            &pubt(&c, &format!("o2.{subj}"), &[], b"x").await,
            &ack("O2", i as u64 + 1),
            "per subject",
        );
    }
    assert_eq!(
        no_bytes(state(&c, "O2", r#"{"deleted_details":true}"#).await),
        json!({"messages": 2, "first_seq": 2, "last_seq": 4, "num_subjects": 2,
               "num_deleted": 1, "deleted": [3], "consumer_count": 0})
    );
}

#[tokio::test]
async fn discard_old_max_bytes() {
    let s = common::js_server();
    let c = s.client().await;
    // 22 + 4 + 1 + 8 = 35 bytes each in a file store: two fit in 70.
    create(
        &c,
        "O3",
        json!({"name": "O3", "subjects": ["o3.>"], "max_bytes": 70}),
    )
    .await;
    for (i, subj) in ["a", "b", "c"].iter().enumerate() {
        assert_ack(
            &pubt(&c, &format!("o3.{subj}"), &[], b"x").await,
            &ack("O3", i as u64 + 1),
            "max_bytes",
        );
    }
    assert_eq!(
        state(&c, "O3", "").await,
        json!({"messages": 2, "bytes": 70, "first_seq": 2, "last_seq": 3, "num_subjects": 2, "consumer_count": 0})
    );
}

#[tokio::test]
async fn byte_accounting() {
    let s = common::js_server();
    let c = s.client().await;
    create(&c, "F", json!({"name": "F", "subjects": ["f.>"]})).await;
    create(
        &c,
        "M",
        json!({"name": "M", "subjects": ["m.>"], "storage": "memory"}),
    )
    .await;
    // "NATS/1.0\r\nK: V\r\n\r\n" is 18 bytes.
    for p in ["f", "m"] {
        pubt(&c, &format!("{p}.ab"), &[], b"hello").await;
        pubt(&c, &format!("{p}.h"), &[("K", "V")], b"").await;
        pubt(&c, &format!("{p}.h"), &[("K", "V")], b"xyz").await;
    }
    // file: 22 + subject + payload + 8, plus 4 + header when there is one.
    let file = (22 + 4 + 5 + 8) + (22 + 3 + 8 + 4 + 18) + (22 + 3 + 3 + 8 + 4 + 18);
    // memory: subject + header + payload + 16.
    let mem = (4 + 5 + 16) + (3 + 18 + 16) + (3 + 18 + 3 + 16);
    assert_eq!(state(&c, "F", "").await["bytes"], file);
    assert_eq!(state(&c, "M", "").await["bytes"], mem);
    // In a cluster each server counts what it stores (and nats-server's
    // account info there counts more): the account's figures are one
    // server's.
    if !common::clustered() {
        let info = api(&c, "$JS.API.INFO", "").await;
        assert_eq!(info["storage"], file);
        assert_eq!(info["memory"], mem);
    }
    // Removing a message gives its bytes back.
    for p in ["F", "M"] {
        let r = api(
            &c,
            &format!("$JS.API.STREAM.MSG.DELETE.{p}"),
            r#"{"seq":1}"#,
        )
        .await;
        assert_eq!(r["success"], true, "{r}");
    }
    assert_eq!(state(&c, "F", "").await["bytes"], file - (22 + 4 + 5 + 8));
    assert_eq!(state(&c, "M", "").await["bytes"], mem - (4 + 5 + 16));
    api(&c, "$JS.API.STREAM.PURGE.F", "").await;
    assert_eq!(state(&c, "F", "").await["bytes"], 0);
    if !common::clustered() {
        assert_eq!(api(&c, "$JS.API.INFO", "").await["storage"], 0);
    }
}

#[tokio::test]
async fn max_age_expires_but_never_ttl_stays() {
    let s = common::js_server();
    let c = s.client().await;
    create(
        &c,
        "A",
        json!({"name": "A", "subjects": ["a.>"], "max_age": 1_000_000_000, "allow_msg_ttl": true}),
    )
    .await;
    assert_ack(&pubt(&c, "a.1", &[], b"x").await, &ack("A", 1), "plain");
    assert_ack(
        &pubt(&c, "a.2", &[("Nats-TTL", "never")], b"x").await,
        &ack("A", 2),
        "never",
    );
    // A TTL longer than max_age does not outlive max_age.
    assert_ack(
        &pubt(&c, "a.3", &[("Nats-TTL", "5")], b"x").await,
        &ack("A", 3),
        "5s",
    );
    let started = Instant::now();
    assert_eq!(state(&c, "A", "").await["messages"], 3);
    let st = wait_messages(&c, "A", 1, Duration::from_secs(4)).await;
    assert!(
        started.elapsed() >= Duration::from_millis(700),
        "expired too early"
    );
    assert_eq!(
        (st["first_seq"].as_u64(), st["last_seq"].as_u64()),
        (Some(2), Some(3)),
        "{st}"
    );
    let r = api(&c, "$JS.API.STREAM.MSG.GET.A", r#"{"seq":2}"#).await;
    assert_eq!(r["message"]["subject"], "a.2", "{r}");
}

#[tokio::test]
async fn ttl_header_values() {
    let s = common::js_server();
    let c = s.client().await;
    // Without allow_msg_ttl: a valid TTL is refused; an invalid one is
    // reported as invalid.
    create(&c, "S", json!({"name": "S", "subjects": ["s"]})).await;
    assert_ack(
        &pubt(&c, "s", &[("Nats-TTL", "5s")], b"x").await,
        &err_ack("S", 400, 10166, "per-message TTL is disabled"),
        "disabled",
    );
    // nats-server's cluster leader says TTLs are disabled first.
    let disabled_invalid = match common::nats_cluster() {
        true => err_ack("S", 400, 10166, "per-message TTL is disabled"),
        false => err_ack("S", 400, 10165, "invalid per-message TTL"),
    };
    assert_ack(
        &pubt(&c, "s", &[("Nats-TTL", "bogus")], b"x").await,
        &disabled_invalid,
        "disabled, invalid",
    );
    create(
        &c,
        "T",
        json!({"name": "T", "subjects": ["t.>"], "allow_msg_ttl": true}),
    )
    .await;
    let invalid = err_ack("T", 400, 10165, "invalid per-message TTL");
    let mut seq = 0;
    for (v, ok) in [
        ("1s", true),
        ("5", true),
        ("never", true),
        ("NEVER", true),
        ("0", false),
        ("500ms", false),
        ("1.5s", true),
        ("-1", false),
        ("1h", true),
        ("1m30s", true),
        ("abc", false),
        ("10x", false),
    ] {
        let want = if ok {
            seq += 1;
            ack("T", seq)
        } else {
            invalid.clone()
        };
        assert_ack(
            &pubt(&c, "t.a", &[("Nats-TTL", v)], b"x").await,
            &want,
            &format!("Nats-TTL {v:?}"),
        );
    }
    // The header is stored as sent.
    let r = api(&c, "$JS.API.STREAM.MSG.GET.T", r#"{"seq":1}"#).await;
    assert_eq!(
        r["message"]["hdrs"],
        common::b64(b"NATS/1.0\r\nNats-TTL: 1s\r\n\r\n"),
        "{r}"
    );
}

#[tokio::test]
async fn ttl_expires_a_message() {
    let s = common::js_server();
    let c = s.client().await;
    create(
        &c,
        "B",
        json!({"name": "B", "subjects": ["b.>"], "allow_msg_ttl": true}),
    )
    .await;
    let js = jetstream::new(c.clone());
    let a = js
        .send_publish(
            "b.1",
            Publish::build()
                .payload("x".into())
                .ttl(Duration::from_secs(1)),
        )
        .await
        .unwrap()
        .await
        .unwrap();
    assert_eq!(a.sequence, 1);
    let started = Instant::now();
    assert_ack(&pubt(&c, "b.2", &[], b"x").await, &ack("B", 2), "no ttl");
    assert_eq!(state(&c, "B", "").await["messages"], 2);
    let st = wait_messages(&c, "B", 1, Duration::from_secs(4)).await;
    assert!(
        started.elapsed() >= Duration::from_millis(700),
        "expired too early"
    );
    assert_eq!(
        (st["first_seq"].as_u64(), st["last_seq"].as_u64()),
        (Some(2), Some(2)),
        "{st}"
    );
}

#[tokio::test]
async fn rollup_refused_without_permission() {
    let s = common::js_server();
    let c = s.client().await;
    create(&c, "S", json!({"name": "S", "subjects": ["s.>"]})).await;
    pubt(&c, "s.c", &[], b"x").await;
    for v in ["sub", "all", "bogus"] {
        assert_ack(
            &pubt(&c, "s.c", &[("Nats-Rollup", v)], b"x").await,
            &err_ack("S", 500, 10111, "rollup not permitted"),
            v,
        );
    }
    assert_eq!(state(&c, "S", "").await["messages"], 1);
}

#[tokio::test]
async fn rollup_sub_and_all() {
    let s = common::js_server();
    let c = s.client().await;
    create(
        &c,
        "R",
        json!({"name": "R", "subjects": ["r.>"], "allow_rollup_hdrs": true}),
    )
    .await;
    for subj in ["a", "a", "b", "b"] {
        pubt(&c, &format!("r.{subj}"), &[], b"x").await;
    }
    assert_ack(
        &pubt(&c, "r.a", &[("Nats-Rollup", "bogus")], b"y").await,
        &err_ack("R", 500, 10111, "rollup value invalid: \"bogus\""),
        "bogus",
    );
    // The value is read case-insensitively.
    assert_ack(
        &pubt(&c, "r.a", &[("Nats-Rollup", "SUB")], b"y").await,
        &ack("R", 5),
        "sub",
    );
    assert_eq!(
        no_bytes(state(&c, "R", r#"{"subjects_filter":">","deleted_details":true}"#).await),
        json!({"messages": 3, "first_seq": 3, "last_seq": 5, "num_subjects": 2,
               "subjects": {"r.a": 1, "r.b": 2}, "consumer_count": 0})
    );
    assert_ack(
        &pubt(&c, "r.c", &[("Nats-Rollup", "all")], b"z").await,
        &ack("R", 6),
        "all",
    );
    assert_eq!(
        no_bytes(state(&c, "R", r#"{"subjects_filter":">","deleted_details":true}"#).await),
        json!({"messages": 1, "first_seq": 6, "last_seq": 6, "num_subjects": 1,
               "subjects": {"r.c": 1}, "consumer_count": 0})
    );
}

fn hdr(m: &async_nats::Message, name: &str) -> String {
    common::header(m, name)
        .unwrap_or_else(|| panic!("no {name} on {m:?}"))
        .to_string()
}

#[tokio::test]
async fn republish_adds_stream_headers() {
    let s = common::js_server();
    let c = s.client().await;
    let mut sub = c.subscribe("rp.>").await.unwrap();
    common::sync(&c).await;
    create(
        &c,
        "RP",
        json!({"name": "RP", "subjects": ["src.>"], "republish": {"src": "src.>", "dest": "rp.>"}}),
    )
    .await;
    pubt(&c, "src.a", &[("Foo", "bar")], b"hello").await;
    pubt(&c, "src.a", &[], b"hello2").await;
    pubt(&c, "src.b", &[], b"hello3").await;
    let mut got = Vec::new();
    for _ in 0..3 {
        got.push(
            tokio::time::timeout(Duration::from_secs(2), sub.next())
                .await
                .expect("republished")
                .unwrap(),
        );
    }
    let want = [
        ("rp.a", "src.a", "1", "0", "hello"),
        ("rp.a", "src.a", "2", "1", "hello2"),
        ("rp.b", "src.b", "3", "0", "hello3"),
    ];
    for (m, (subj, orig, seq, last, payload)) in got.iter().zip(want) {
        assert_eq!(m.subject.as_str(), subj);
        assert_eq!(&m.payload[..], payload.as_bytes());
        assert_eq!(hdr(m, "Nats-Stream"), "RP");
        assert_eq!(hdr(m, "Nats-Subject"), orig);
        assert_eq!(hdr(m, "Nats-Sequence"), seq);
        assert_eq!(hdr(m, "Nats-Last-Sequence"), last);
        assert!(
            common::is_timestamp(&json!(hdr(m, "Nats-Time-Stamp"))),
            "{m:?}"
        );
        assert!(common::header(m, "Nats-Msg-Size").is_none());
    }
    assert_eq!(hdr(&got[0], "Foo"), "bar");
}

#[tokio::test]
async fn republish_header_block_order() {
    let s = common::js_server();
    let c = s.client().await;
    create(
        &c,
        "RP",
        json!({"name": "RP", "subjects": ["src.>"], "republish": {"src": "src.>", "dest": "rp.>"}}),
    )
    .await;
    let mut raw = common::raw_js(&s.addr());
    raw.send(b"SUB rp.> 1\r\nPING\r\n");
    raw.read_until("PONG\r\n", Duration::from_secs(2));
    pubt(&c, "src.a", &[("Foo", "bar")], b"hello").await;
    let (subject, h, payload) = raw.next_msg(Duration::from_secs(2));
    assert_eq!(subject, "rp.a");
    assert_eq!(payload, b"hello");
    let lines: Vec<&str> = h.split("\r\n").collect();
    assert_eq!(
        lines[..4],
        [
            "NATS/1.0",
            "Foo: bar",
            "Nats-Stream: RP",
            "Nats-Subject: src.a"
        ],
        "{h:?}"
    );
    assert_eq!(lines[4], "Nats-Sequence: 1", "{h:?}");
    assert!(lines[5].starts_with("Nats-Time-Stamp: "), "{h:?}");
    assert_eq!(lines[6..], ["Nats-Last-Sequence: 0", "", ""], "{h:?}");
}

#[tokio::test]
async fn republish_headers_only_and_src_filter() {
    let s = common::js_server();
    let c = s.client().await;
    let mut sub = c.subscribe("rp.>").await.unwrap();
    common::sync(&c).await;
    create(
        &c,
        "RP2",
        json!({"name": "RP2", "subjects": ["s2.*"],
               "republish": {"src": "s2.*", "dest": "rp.h.{{wildcard(1)}}", "headers_only": true}}),
    )
    .await;
    create(&c, "RP3", json!({"name": "RP3", "subjects": ["s3.*"], "republish": {"src": "s3.a", "dest": "rp.only"}})).await;
    pubt(&c, "s2.a", &[], b"hello").await;
    let m = tokio::time::timeout(Duration::from_secs(2), sub.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(m.subject.as_str(), "rp.h.a");
    assert!(m.payload.is_empty());
    assert_eq!(hdr(&m, "Nats-Msg-Size"), "5");
    assert_eq!(hdr(&m, "Nats-Subject"), "s2.a");
    assert_eq!(hdr(&m, "Nats-Stream"), "RP2");
    // Only messages matching src are republished.
    pubt(&c, "s3.b", &[], b"no").await;
    pubt(&c, "s3.a", &[], b"yes").await;
    let m = tokio::time::timeout(Duration::from_secs(2), sub.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(m.subject.as_str(), "rp.only");
    assert_eq!(&m.payload[..], b"yes");
    assert_eq!(hdr(&m, "Nats-Sequence"), "2");
    assert_eq!(hdr(&m, "Nats-Last-Sequence"), "0");
}

#[tokio::test]
async fn subject_transform_rewrites_the_stored_subject() {
    let s = common::js_server();
    let c = s.client().await;
    create(
        &c,
        "X",
        json!({"name": "X", "subjects": ["x.*"], "subject_transform": {"src": "x.*", "dest": "y.{{wildcard(1)}}"}}),
    )
    .await;
    assert_ack(&pubt(&c, "x.a", &[], b"x").await, &ack("X", 1), "publish");
    let r = api(&c, "$JS.API.STREAM.MSG.GET.X", r#"{"seq":1}"#).await;
    assert_eq!(r["message"]["subject"], "y.a", "{r}");
    let r = api(&c, "$JS.API.STREAM.MSG.GET.X", r#"{"last_by_subj":"x.a"}"#).await;
    assert_eq!(common::api_err(&r), (404, 10037, "no message found".into()));
    let r = api(&c, "$JS.API.STREAM.MSG.GET.X", r#"{"last_by_subj":"y.a"}"#).await;
    assert_eq!(r["message"]["seq"], 1, "{r}");
    // The destination is not one of the stream's subjects.
    let err = c
        .request("y.a", "x".into())
        .await
        .expect_err("not captured");
    assert_eq!(err.kind(), async_nats::RequestErrorKind::NoResponders);
}

#[tokio::test]
async fn sealed_stream_refuses_publish() {
    let s = common::js_server();
    let c = s.client().await;
    create(&c, "SE", json!({"name": "SE"})).await;
    assert_ack(&pubt(&c, "SE", &[], b"x").await, &ack("SE", 1), "before");
    let r = api(
        &c,
        "$JS.API.STREAM.UPDATE.SE",
        &json!({"name": "SE", "sealed": true}).to_string(),
    )
    .await;
    assert_eq!(r["config"]["sealed"], true, "{r}");
    assert_ack(
        &pubt(&c, "SE", &[], b"x").await,
        &err_ack("SE", 400, 10109, "invalid operation on sealed stream"),
        "sealed",
    );
    let st = state(&c, "SE", "").await;
    assert_eq!(
        (st["messages"].as_u64(), st["last_seq"].as_u64()),
        (Some(1), Some(1))
    );
}

#[tokio::test]
async fn first_seq_starts_the_sequence() {
    let s = common::js_server();
    let c = s.client().await;
    create(
        &c,
        "F",
        json!({"name": "F", "subjects": ["f"], "first_seq": 100}),
    )
    .await;
    assert_ack(&pubt(&c, "f", &[], b"x").await, &ack("F", 100), "first");
    assert_ack(
        &pubt(&c, "f", &[("Nats-Expected-Last-Sequence", "100")], b"x").await,
        &ack("F", 101),
        "second",
    );
    let st = state(&c, "F", "").await;
    assert_eq!(
        no_bytes(st),
        json!({"messages": 2, "first_seq": 100, "last_seq": 101, "num_subjects": 1, "consumer_count": 0})
    );
}

#[tokio::test]
async fn interest_retention_without_consumers_acks_but_keeps_nothing() {
    let s = common::js_server();
    let c = s.client().await;
    create(
        &c,
        "I",
        json!({"name": "I", "subjects": ["i.>"], "retention": "interest"}),
    )
    .await;
    assert_ack(
        &pubt(&c, "i.a", &[("Nats-Msg-Id", "q")], b"x").await,
        &ack("I", 1),
        "first",
    );
    assert_ack(&pubt(&c, "i.a", &[], b"x").await, &ack("I", 2), "second");
    // The id was still recorded.
    assert_eq!(
        pubt(&c, "i.a", &[("Nats-Msg-Id", "q")], b"x").await,
        r#"{"stream":"I","seq":1,"duplicate": true}"#
    );
    let st = state(&c, "I", "").await;
    assert_eq!(
        (
            st["messages"].as_u64(),
            st["bytes"].as_u64(),
            st["first_seq"].as_u64(),
            st["last_seq"].as_u64()
        ),
        (Some(0), Some(0), Some(3), Some(2)),
        "{st}"
    );
    let r = api(&c, "$JS.API.STREAM.MSG.GET.I", r#"{"seq":1}"#).await;
    assert_eq!(common::api_err(&r), (404, 10037, "no message found".into()));
}

#[tokio::test]
async fn no_ack_stream_stores_without_replying() {
    let s = common::js_server();
    let c = s.client().await;
    create(
        &c,
        "N",
        json!({"name": "N", "subjects": ["n"], "no_ack": true}),
    )
    .await;
    let got = common::no_reply(&c, "n", &[], b"x", Duration::from_millis(300)).await;
    assert!(got.is_none(), "{got:?}");
    // Rejections are silent too.
    let got = common::no_reply(
        &c,
        "n",
        &[("Nats-Expected-Last-Sequence", "7")],
        b"x",
        Duration::from_millis(300),
    )
    .await;
    assert!(got.is_none(), "{got:?}");
    let st = state(&c, "N", "").await;
    assert_eq!(
        (st["messages"].as_u64(), st["last_seq"].as_u64()),
        (Some(1), Some(1)),
        "{st}"
    );
}

#[tokio::test]
async fn headers_are_stored_verbatim() {
    let s = common::js_server();
    let c = s.client().await;
    create(&c, "H", json!({"name": "H", "subjects": ["h"]})).await;
    let mut raw = common::raw_js(&s.addr());
    raw.send(b"SUB ack 1\r\n");
    let block = "NATS/1.0\r\nB: 2\r\nA: 1\r\nNats-Msg-Id: x\r\nB: 3\r\n\r\n";
    let frame = format!(
        "HPUB h ack {} {}\r\n{block}hi\r\n",
        block.len(),
        block.len() + 2
    );
    raw.send(frame.as_bytes());
    let (_, _, payload) = raw.next_msg(Duration::from_secs(2));
    assert_eq!(payload, br#"{"stream":"H","seq":1}"#);
    let r = api(&c, "$JS.API.STREAM.MSG.GET.H", r#"{"seq":1}"#).await;
    assert_eq!(r["message"]["hdrs"], common::b64(block.as_bytes()), "{r}");
    assert_eq!(r["message"]["data"], common::b64(b"hi"), "{r}");
}

#[tokio::test]
async fn dedupe_ids_survive_a_purge() {
    let s = common::js_server();
    let c = s.client().await;
    create(&c, "S", json!({"name": "S", "subjects": ["s.>"]})).await;
    assert_eq!(
        pubt(&c, "s.a", &[("Nats-Msg-Id", "a")], b"x").await,
        ack("S", 1)
    );
    let r = api(&c, "$JS.API.STREAM.PURGE.S", "").await;
    assert_eq!(r["purged"], 1, "{r}");
    assert_eq!(
        pubt(&c, "s.a", &[("Nats-Msg-Id", "a")], b"x").await,
        r#"{"stream":"S","seq":1,"duplicate": true}"#
    );
    assert_eq!(state(&c, "S", "").await["messages"], 0);
}

#[tokio::test]
async fn expectations_after_deletes() {
    let s = common::js_server();
    let c = s.client().await;
    create(&c, "S", json!({"name": "S", "subjects": ["s.>"]})).await;
    pubt(&c, "s.a", &[], b"x").await; // 1
    pubt(&c, "s.b", &[], b"x").await; // 2
    let r = api(&c, "$JS.API.STREAM.MSG.DELETE.S", r#"{"seq":2}"#).await;
    assert_eq!(r["success"], true, "{r}");
    // The stream's last sequence is the last one assigned, deleted or not.
    let steps: Vec<(&str, Headers, String)> = vec![
        (
            "s.b",
            &[("Nats-Expected-Last-Sequence", "1")],
            err_ack("S", 400, 10071, "wrong last sequence: 2"),
        ),
        ("s.b", &[("Nats-Expected-Last-Sequence", "2")], ack("S", 3)),
        ("s.c", &[], ack("S", 4)),
        ("s.c", &[], ack("S", 5)),
    ];
    for (i, (subject, headers, want)) in steps.iter().enumerate() {
        assert_ack(
            &pubt(&c, subject, headers, b"x").await,
            want,
            &format!("step {i}"),
        );
    }
    // A subject's last sequence is that of its last message still stored.
    let r = api(&c, "$JS.API.STREAM.MSG.DELETE.S", r#"{"seq":5}"#).await;
    assert_eq!(r["success"], true, "{r}");
    assert_ack(
        &pubt(
            &c,
            "s.c",
            &[("Nats-Expected-Last-Subject-Sequence", "5")],
            b"x",
        )
        .await,
        &err_ack("S", 400, 10071, "wrong last sequence: 4"),
        "deleted last",
    );
    assert_ack(
        &pubt(
            &c,
            "s.c",
            &[("Nats-Expected-Last-Subject-Sequence", "4")],
            b"x",
        )
        .await,
        &ack("S", 6),
        "remaining last",
    );
}

#[tokio::test]
async fn rollup_passes_discard_new_per_subject() {
    let s = common::js_server();
    let c = s.client().await;
    create(
        &c,
        "L3",
        json!({"name": "L3", "subjects": ["l3.>"], "max_msgs_per_subject": 2, "discard": "new",
               "discard_new_per_subject": true, "allow_rollup_hdrs": true}),
    )
    .await;
    assert_ack(&pubt(&c, "l3.a", &[], b"x").await, &ack("L3", 1), "1");
    assert_ack(&pubt(&c, "l3.a", &[], b"x").await, &ack("L3", 2), "2");
    assert_ack(
        &pubt(&c, "l3.a", &[], b"x").await,
        &err_ack("L3", 503, 10077, "maximum messages per subject exceeded"),
        "full",
    );
    assert_ack(
        &pubt(&c, "l3.a", &[("Nats-Rollup", "sub")], b"x").await,
        &ack("L3", 3),
        "roll-up",
    );
    assert_eq!(
        no_bytes(state(&c, "L3", r#"{"subjects_filter":">"}"#).await),
        json!({"messages": 1, "first_seq": 3, "last_seq": 3, "num_subjects": 1,
               "subjects": {"l3.a": 1}, "consumer_count": 0})
    );
}

#[tokio::test]
async fn subject_delete_markers_after_max_age() {
    let s = common::js_server();
    let c = s.client().await;
    create(
        &c,
        "M",
        json!({"name": "M", "subjects": ["m.>"], "max_age": 1_000_000_000,
               "subject_delete_marker_ttl": 1_000_000_000}),
    )
    .await;
    pubt(&c, "m.a", &[], b"x").await;
    pubt(&c, "m.b", &[], b"y").await;
    pubt(&c, "m.b", &[], b"z").await;
    // Once max_age removes a subject's last message, a marker with the
    // marker TTL takes its place: one per subject, after the last seq.
    let deadline = Instant::now() + Duration::from_secs(4);
    loop {
        let st = state(&c, "M", "").await;
        if st["first_seq"] == 4 {
            assert_eq!(
                (st["messages"].as_u64(), st["last_seq"].as_u64()),
                (Some(2), Some(5)),
                "{st}"
            );
            break;
        }
        // The three expire at their own times (a publish apart), so a
        // poll can land between them.
        assert!(matches!(st["first_seq"].as_u64(), Some(1..=3)), "{st}");
        assert!(Instant::now() < deadline, "no markers: {st}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let marker =
        b"NATS/1.0\r\nNats-Marker-Reason: MaxAge\r\nNats-TTL: 1s\r\nNats-Rollup: sub\r\n\r\n";
    for (seq, subject) in [(4, "m.a"), (5, "m.b")] {
        let r = api(
            &c,
            "$JS.API.STREAM.MSG.GET.M",
            &format!(r#"{{"seq":{seq}}}"#),
        )
        .await;
        let m = &r["message"];
        assert_eq!(m["subject"], subject, "{r}");
        assert_eq!(m["hdrs"], common::b64(marker), "{r}");
        assert!(m.get("data").is_none(), "{r}");
    }
    // The markers expire in turn, leaving no new markers behind.
    let st = wait_messages(&c, "M", 0, Duration::from_secs(4)).await;
    assert_eq!(
        (st["first_seq"].as_u64(), st["last_seq"].as_u64()),
        (Some(6), Some(5)),
        "{st}"
    );
}

#[tokio::test]
async fn ttl_below_the_marker_ttl_is_raised() {
    let s = common::js_server();
    let c = s.client().await;
    create(
        &c,
        "T",
        json!({"name": "T", "subjects": ["t.>"], "subject_delete_marker_ttl": 5_000_000_000u64}),
    )
    .await;
    assert_ack(
        &pubt(&c, "t.a", &[("Nats-TTL", "1s")], b"x").await,
        &ack("T", 1),
        "raised",
    );
    let r = api(&c, "$JS.API.STREAM.MSG.GET.T", r#"{"seq":1}"#).await;
    // Rewritten as whole seconds.
    assert_eq!(
        r["message"]["hdrs"],
        common::b64(b"NATS/1.0\r\nNats-TTL: 5\r\n\r\n"),
        "{r}"
    );
    // Not with one message per subject.
    create(
        &c,
        "T1",
        json!({"name": "T1", "subjects": ["t1.>"], "subject_delete_marker_ttl": 5_000_000_000u64,
               "max_msgs_per_subject": 1}),
    )
    .await;
    assert_ack(
        &pubt(&c, "t1.a", &[("Nats-TTL", "1s")], b"x").await,
        &ack("T1", 1),
        "kept",
    );
    let r = api(&c, "$JS.API.STREAM.MSG.GET.T1", r#"{"seq":1}"#).await;
    assert_eq!(
        r["message"]["hdrs"],
        common::b64(b"NATS/1.0\r\nNats-TTL: 1s\r\n\r\n"),
        "{r}"
    );
}

fn counted(stream: &str, seq: u64, val: &str) -> String {
    format!(r#"{{"stream":"{stream}","seq":{seq},"val":"{val}"}}"#)
}

#[tokio::test]
async fn counters_add_increments_per_subject() {
    let s = common::js_server();
    let c = s.client().await;
    let info = create(
        &c,
        "C",
        json!({"name": "C", "subjects": ["c.>"], "allow_msg_counter": true}),
    )
    .await;
    assert_eq!(info["config"]["allow_msg_counter"], true, "{info}");
    assert_eq!(info["config"]["metadata"]["_nats.req.level"], "2", "{info}");
    create(&c, "PLAIN", json!({"name": "PLAIN", "subjects": ["plain"]})).await;
    const BIG: &str = "123456789012345678901234567890";
    // (subject, headers, body, the ack expected)
    let steps: Vec<(&str, Headers, &[u8], String)> = vec![
        ("c.a", &[("Nats-Incr", "+1")], b"", counted("C", 1, "1")),
        ("c.a", &[("Nats-Incr", "10")], b"", counted("C", 2, "11")),
        ("c.b", &[("Nats-Incr", "-3")], b"", counted("C", 3, "-3")),
        ("c.a", &[("Nats-Incr", "-11")], b"", counted("C", 4, "0")),
        ("c.big", &[("Nats-Incr", BIG)], b"", counted("C", 5, BIG)),
        (
            "c.big",
            &[("Nats-Incr", BIG)],
            b"",
            counted("C", 6, "246913578024691357802469135780"),
        ),
        ("c.a", &[("Nats-Incr", "0")], b"", counted("C", 7, "0")),
        (
            "c.a",
            &[],
            b"",
            err_ack("C", 400, 10169, "message counter increment is missing"),
        ),
        (
            "c.a",
            &[("Nats-Incr", "+1")],
            b"x",
            err_ack("C", 400, 10170, "message counter has payload"),
        ),
        (
            "c.a",
            &[("Nats-Incr", "one")],
            b"",
            err_ack("C", 400, 10171, "message counter increment is invalid"),
        ),
        (
            "c.a",
            &[("Nats-Incr", "1.5")],
            b"",
            err_ack("C", 400, 10171, "message counter increment is invalid"),
        ),
        (
            "c.a",
            &[("Nats-Incr", "+1"), ("Nats-Expected-Last-Sequence", "7")],
            b"",
            err_ack("C", 400, 10171, "message counter increment is invalid"),
        ),
        (
            "c.a",
            &[("Nats-Incr", "+1"), ("Nats-Rollup", "sub")],
            b"",
            err_ack("C", 400, 10171, "message counter increment is invalid"),
        ),
        (
            "plain",
            &[("Nats-Incr", "+1")],
            b"",
            err_ack("PLAIN", 400, 10168, "message counters is disabled"),
        ),
        (
            "c.b",
            &[("Nats-Incr", "+5"), ("X-Keep", "me")],
            b"",
            counted("C", 8, "2"),
        ),
    ];
    for (i, (subject, headers, body, want)) in steps.iter().enumerate() {
        let got = pubt(&c, subject, headers, body).await;
        assert_ack(&got, want, &format!("step {i} {subject} {headers:?}"));
    }
    // The stored message is the value, with the publish's headers kept.
    let last = api(&c, "$JS.API.STREAM.MSG.GET.C", r#"{"last_by_subj":"c.b"}"#).await;
    let msg = &last["message"];
    assert_eq!(
        common::unb64(msg["data"].as_str().unwrap()),
        br#"{"val":"2"}"#,
        "{last}"
    );
    let hdrs = String::from_utf8(common::unb64(msg["hdrs"].as_str().unwrap())).unwrap();
    assert!(
        hdrs.contains("Nats-Incr: +5\r\n") && hdrs.contains("X-Keep: me\r\n"),
        "{hdrs:?}"
    );
}

#[tokio::test]
async fn counter_configs_nats_server_refuses() {
    let s = common::js_server();
    let c = s.client().await;
    let invalid = |text: &str| (500, 10052, text.to_string());
    let counter = |extra: Value| {
        let mut cfg = json!({"name": "C", "subjects": ["c.>"], "allow_msg_counter": true});
        cfg.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        cfg
    };
    let table = [
        (
            counter(json!({"discard": "new"})),
            invalid("counter stream cannot use discard new"),
        ),
        (
            counter(json!({"allow_msg_ttl": true})),
            invalid("counter stream cannot use message TTLs"),
        ),
        (
            counter(json!({"retention": "workqueue"})),
            invalid("counter stream can only use limits retention"),
        ),
        (
            json!({"name": "M", "mirror": {"name": "C"}, "allow_msg_counter": true}),
            (
                400,
                10173,
                "stream mirrors can not also calculate counters".to_string(),
            ),
        ),
    ];
    for (cfg, want) in table {
        let r = api(&c, "$JS.API.STREAM.CREATE.C", &cfg.to_string()).await;
        let r = if cfg["name"] == "M" {
            api(&c, "$JS.API.STREAM.CREATE.M", &cfg.to_string()).await
        } else {
            r
        };
        assert_eq!(common::api_err(&r), want, "{cfg}: {r}");
    }
    // Counting cannot be switched on or off later.
    create(
        &c,
        "ON",
        json!({"name": "ON", "subjects": ["on"], "allow_msg_counter": true}),
    )
    .await;
    create(&c, "OFF", json!({"name": "OFF", "subjects": ["off"]})).await;
    let change = "stream configuration update can not change message counter setting";
    for (name, subject, on) in [("ON", "on", false), ("OFF", "off", true)] {
        let body = json!({"name": name, "subjects": [subject], "allow_msg_counter": on});
        let r = api(
            &c,
            &format!("$JS.API.STREAM.UPDATE.{name}"),
            &body.to_string(),
        )
        .await;
        assert_eq!(common::api_err(&r), invalid(change), "{name}: {r}");
    }
}

#[tokio::test]
async fn a_counter_sourced_into_another_adds_what_its_origin_moved() {
    let s = common::js_server();
    let c = s.client().await;
    create(
        &c,
        "EU",
        json!({"name": "EU", "subjects": ["eu.>"], "allow_msg_counter": true}),
    )
    .await;
    for incr in ["+5", "+7"] {
        pubt(&c, "eu.hits", &[("Nats-Incr", incr)], b"").await;
    }
    // The aggregate counts the origin's value so far, then what it moves.
    let cfg = json!({"name": "ALL", "allow_msg_counter": true,
        "sources": [{"name": "EU", "subject_transforms": [{"src": "eu.>", "dest": "all.>"}]}]});
    create(&c, "ALL", cfg).await;
    let value_of = |stream: &'static str, subject: &'static str| {
        let c = c.clone();
        async move {
            let body = json!({"last_by_subj": subject}).to_string();
            let r = api(&c, &format!("$JS.API.STREAM.MSG.GET.{stream}"), &body).await;
            r["message"]["data"]
                .as_str()
                .map(|d| String::from_utf8(common::unb64(d)).unwrap())
        }
    };
    let want = Some(r#"{"val":"12"}"#.to_string());
    let deadline = Instant::now() + Duration::from_secs(10);
    while value_of("ALL", "all.hits").await != want {
        assert!(Instant::now() < deadline, "ALL never reached 12");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    pubt(&c, "eu.hits", &[("Nats-Incr", "-2")], b"").await;
    let want = Some(r#"{"val":"10"}"#.to_string());
    while value_of("ALL", "all.hits").await != want {
        assert!(Instant::now() < deadline, "ALL never reached 10");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Each sourced message's increment is what the origin moved, and the
    // origin's last value is remembered per origin stream and subject.
    let body = json!({"last_by_subj": "all.hits"}).to_string();
    let r = api(&c, "$JS.API.STREAM.MSG.GET.ALL", &body).await;
    let hdrs = String::from_utf8(common::unb64(r["message"]["hdrs"].as_str().unwrap())).unwrap();
    assert!(hdrs.contains("Nats-Incr: -2\r\n"), "{hdrs:?}");
    assert!(
        hdrs.contains(r#"Nats-Counter-Sources: {"EU":{"eu.hits":"10"}}"#),
        "{hdrs:?}"
    );
}

fn batched(stream: &str, seq: u64, batch: &str, count: u64) -> String {
    format!(r#"{{"stream":"{stream}","seq":{seq},"batch":"{batch}","count":{count}}}"#)
}

/// A batch message's headers: its id, its sequence, a commit and more.
fn in_batch<'a>(id: &'a str, seq: &'a str, more: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    let mut h = vec![("Nats-Batch-Id", id), ("Nats-Batch-Sequence", seq)];
    h.extend_from_slice(more);
    h
}

#[tokio::test]
async fn an_atomic_batch_is_stored_whole_or_not_at_all() {
    let s = common::js_server();
    let c = s.client().await;
    let info = create(
        &c,
        "A",
        json!({"name": "A", "subjects": ["a.>"], "allow_atomic": true}),
    )
    .await;
    assert_eq!(info["config"]["allow_atomic"], true, "{info}");
    assert_eq!(info["config"]["metadata"]["_nats.req.level"], "2", "{info}");
    create(&c, "PLAIN", json!({"name": "PLAIN", "subjects": ["plain"]})).await;
    let commit = ("Nats-Batch-Commit", "1");
    let long_id = "x".repeat(65);
    // (subject, headers, the reply expected: "" for a staged message)
    type Step<'a> = (&'a str, Vec<(&'a str, &'a str)>, String);
    let steps: Vec<Step> = vec![
        ("a.1", in_batch("one", "1", &[]), String::new()),
        ("a.2", in_batch("one", "2", &[]), String::new()),
        (
            "a.3",
            in_batch("one", "3", &[commit]),
            batched("A", 3, "one", 3),
        ),
        // Ended by a marker that is not stored: two messages.
        ("a.4", in_batch("two", "1", &[]), String::new()),
        ("a.5", in_batch("two", "2", &[]), String::new()),
        (
            "a.x",
            in_batch("two", "3", &[("Nats-Batch-Commit", "eob")]),
            batched("A", 5, "two", 2),
        ),
        // A failed expectation refuses the whole batch.
        ("a.6", in_batch("three", "1", &[]), String::new()),
        (
            "a.7",
            in_batch(
                "three",
                "2",
                &[commit, ("Nats-Expected-Last-Subject-Sequence", "9")],
            ),
            err_ack("A", 400, 10071, "wrong last sequence: 0"),
        ),
        // So is one that expects a subject the batch already wrote.
        ("a.8", in_batch("four", "1", &[]), String::new()),
        (
            "a.9",
            in_batch(
                "four",
                "2",
                &[
                    commit,
                    ("Nats-Expected-Last-Subject-Sequence", "0"),
                    ("Nats-Expected-Last-Subject-Sequence-Subject", "a.8"),
                ],
            ),
            err_ack("A", 400, 10164, "wrong last sequence"),
        ),
        // Gaps, unknown batches, bad commits, long ids, missing sequences.
        ("a.1", in_batch("five", "1", &[]), String::new()),
        (
            "a.1",
            in_batch("five", "3", &[]),
            err_ack("A", 400, 10176, "atomic publish batch is incomplete"),
        ),
        (
            "a.1",
            in_batch("five", "2", &[]),
            err_ack("A", 400, 10176, "atomic publish batch is incomplete"),
        ),
        (
            "a.1",
            in_batch("six", "1", &[("Nats-Batch-Commit", "yes")]),
            err_ack("A", 400, 10200, "atomic publish batch commit is invalid"),
        ),
        (
            "a.1",
            in_batch(&long_id, "1", &[]),
            err_ack("A", 400, 10179, "atomic publish batch ID is invalid"),
        ),
        (
            "a.1",
            vec![("Nats-Batch-Id", "seven")],
            err_ack("A", 400, 10175, "atomic publish sequence is missing"),
        ),
        // A marker at sequence 0 counts as a huge batch, as in nats-server.
        (
            "a.1",
            in_batch("zero", "0", &[("Nats-Batch-Commit", "eob")]),
            err_ack("A", 400, 10199, "atomic publish batch is too large: 1000"),
        ),
        // Headers a batch cannot take; ids repeated within it.
        (
            "a.1",
            in_batch("eight", "1", &[commit, ("Nats-Expected-Last-Msg-Id", "m")]),
            err_ack(
                "A",
                400,
                10177,
                "atomic publish unsupported header used: Nats-Expected-Last-Msg-Id",
            ),
        ),
        (
            "a.1",
            in_batch("nine", "1", &[("Nats-Msg-Id", "m")]),
            String::new(),
        ),
        (
            "a.2",
            in_batch("nine", "2", &[commit, ("Nats-Msg-Id", "m")]),
            err_ack(
                "A",
                400,
                10201,
                "atomic publish batch contains duplicate message id",
            ),
        ),
        (
            "plain",
            in_batch("ten", "1", &[commit]),
            err_ack("PLAIN", 400, 10174, "atomic publish is disabled"),
        ),
    ];
    for (i, (subject, headers, want)) in steps.iter().enumerate() {
        let got = pubt(&c, subject, headers, b"x").await;
        match want.is_empty() {
            true => assert_eq!(got, "", "step {i} {subject} {headers:?}"),
            false => assert_ack(&got, want, &format!("step {i} {subject} {headers:?}")),
        }
    }
    // Only the two committed batches are stored, and the marker's batch
    // says on its last message that it committed.
    let st = state(&c, "A", "").await;
    assert_eq!(
        (st["messages"].clone(), st["last_seq"].clone()),
        (json!(5), json!(5)),
        "{st}"
    );
    let last = api(&c, "$JS.API.STREAM.MSG.GET.A", r#"{"seq":5}"#).await;
    let hdrs = String::from_utf8(common::unb64(last["message"]["hdrs"].as_str().unwrap())).unwrap();
    assert!(hdrs.contains("Nats-Batch-Commit: 1\r\n"), "{hdrs:?}");
}

#[tokio::test]
async fn counters_count_through_an_atomic_batch() {
    let s = common::js_server();
    let c = s.client().await;
    let cfg = json!({"name": "AC", "subjects": ["ac.>"], "allow_atomic": true, "allow_msg_counter": true});
    create(&c, "AC", cfg).await;
    let incr = ("Nats-Incr", "+2");
    assert_eq!(
        pubt(&c, "ac.n", &in_batch("b", "1", &[incr]), b"").await,
        ""
    );
    let ack = pubt(
        &c,
        "ac.n",
        &in_batch("b", "2", &[incr, ("Nats-Batch-Commit", "1")]),
        b"",
    )
    .await;
    assert_ack(&ack, &batched("AC", 2, "b", 2), "commit");
    let last = api(
        &c,
        "$JS.API.STREAM.MSG.GET.AC",
        r#"{"last_by_subj":"ac.n"}"#,
    )
    .await;
    assert_eq!(
        common::unb64(last["message"]["data"].as_str().unwrap()),
        br#"{"val":"4"}"#,
        "{last}"
    );
}
