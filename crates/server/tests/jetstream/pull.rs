//! Pull consumers: `CONSUMER.MSG.NEXT` requests (batch, expires, no_wait,
//! max_bytes, idle_heartbeat), the 404/408/409 status messages with their
//! exact descriptions and pending headers, request limits, max_waiting,
//! max_ack_pending, deletes, and async-nats fetch/batch/messages().
//! Expectations are nats-server 2.15.1's.

#[path = "../common/mod.rs"]
mod common;
#[path = "../consumer_util/mod.rs"]
mod consumer_util;

use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer};
use bytes::Bytes;
use consumer_util::*;
use futures::StreamExt;
use serde_json::{json, Value};

async fn setup() -> (common::JsServer, async_nats::Client) {
    let s = common::js_server();
    let c = s.client().await;
    stream_s(&c).await;
    (s, c)
}

#[tokio::test]
async fn fetch_returns_what_is_there_then_ends() {
    let (_s, c) = setup().await;
    publish_n(&c, "s.a", 7).await;
    let js = jetstream::new(c.clone());
    let cons: consumer::PullConsumer = js
        .get_stream("S")
        .await
        .unwrap()
        .create_consumer(consumer::pull::Config {
            durable_name: Some("d".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    let mut got = Vec::new();
    let mut batch = cons.fetch().max_messages(5).messages().await.unwrap();
    while let Some(m) = batch.next().await {
        let m = m.unwrap();
        got.push(m.info().unwrap().stream_sequence);
        m.ack().await.unwrap();
    }
    assert_eq!(got, [1, 2, 3, 4, 5]);
    // Fewer than asked: it ends on the server's 404 right away.
    let t = Instant::now();
    let mut batch = cons.fetch().max_messages(5).messages().await.unwrap();
    got.clear();
    while let Some(m) = batch.next().await {
        let m = m.unwrap();
        got.push(m.info().unwrap().stream_sequence);
        m.double_ack().await.unwrap();
    }
    assert_eq!(got, [6, 7]);
    // Nothing left at all.
    let mut batch = cons.fetch().max_messages(5).messages().await.unwrap();
    assert!(batch.next().await.is_none());
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    let i = info(&c, "S", "d").await;
    assert_eq!(i["num_pending"], 0);
    assert_eq!(i["delivered"]["consumer_seq"], 7);
    assert_eq!(i["num_waiting"], 0);
}

#[tokio::test]
async fn batch_waits_for_messages_until_it_expires() {
    let (_s, c) = setup().await;
    publish_n(&c, "s.a", 2).await;
    let js = jetstream::new(c.clone());
    let cons: consumer::PullConsumer = js
        .get_stream("S")
        .await
        .unwrap()
        .create_consumer(consumer::pull::Config {
            durable_name: Some("d".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    let t = Instant::now();
    let mut batch = cons
        .batch()
        .max_messages(5)
        .expires(Duration::from_millis(600))
        .messages()
        .await
        .unwrap();
    let p = c.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        publish(&p, "s.a", "late").await;
    });
    let mut got = Vec::new();
    while let Some(m) = batch.next().await {
        let m = m.unwrap();
        got.push(m.payload.clone());
        m.ack().await.unwrap();
    }
    assert_eq!(got, ["0", "1", "late"]);
    let el = t.elapsed();
    assert!(
        el >= Duration::from_millis(550) && el < Duration::from_secs(3),
        "{el:?}"
    );
}

#[tokio::test]
async fn messages_stream_receives_new_messages() {
    let (_s, c) = setup().await;
    let js = jetstream::new(c.clone());
    let cons: consumer::PullConsumer = js
        .get_stream("S")
        .await
        .unwrap()
        .create_consumer(consumer::pull::Config {
            durable_name: Some("d".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    let mut msgs = cons.messages().await.unwrap();
    publish_n(&c, "s.a", 3).await;
    for i in 0..3 {
        let m = tokio::time::timeout(Duration::from_secs(5), msgs.next())
            .await
            .expect("a message")
            .unwrap()
            .unwrap();
        assert_eq!(m.payload, i.to_string());
        let info = m.info().unwrap();
        assert_eq!(info.stream_sequence, i as u64 + 1);
        assert_eq!(info.consumer_sequence, i as u64 + 1);
        assert_eq!(info.delivered, 1);
        m.double_ack().await.unwrap();
    }
    let i = info(&c, "S", "d").await;
    assert_eq!(i["num_ack_pending"], 0);
    assert_eq!(i["ack_floor"]["stream_seq"], 3);
    // The iterator keeps a request waiting.
    assert_eq!(i["num_waiting"], 1);
}

#[tokio::test]
async fn body_forms_empty_and_integer() {
    let (_s, c) = setup().await;
    publish_n(&c, "s.a", 6).await;
    create_ok(&c, "S", "c", json!({"ack_policy": "explicit"})).await;
    // Empty: one message, no terminal status.
    let mut sub = pull_raw(&c, "S", "c", Bytes::new()).await;
    let m = recv(&mut sub).await;
    assert!(status(&m).is_none(), "{}", describe(&m));
    assert_eq!(m.subject.as_str(), "s.a");
    let a = ack_info(&m);
    assert_eq!((a.stream.as_str(), a.consumer.as_str()), ("S", "c"));
    assert_eq!((a.dc, a.sseq, a.dseq, a.pending), (1, 1, 1, 5));
    assert_quiet(&mut sub, Duration::from_millis(300)).await;
    // A plain number is the batch size.
    let mut sub = pull_raw(&c, "S", "c", Bytes::from_static(b"3")).await;
    let msgs = recv_n(&mut sub, 3).await;
    let seqs: Vec<u64> = msgs.iter().map(|m| ack_info(m).sseq).collect();
    assert_eq!(seqs, [2, 3, 4]);
    assert_quiet(&mut sub, Duration::from_millis(300)).await;
    let i = info(&c, "S", "c").await;
    assert_eq!(i["num_pending"], 2);
    assert_eq!(i["num_waiting"], 0);
}

#[tokio::test]
async fn no_wait_on_nothing_is_404_without_pending_headers() {
    let (_s, c) = setup().await;
    create_ok(&c, "S", "c", json!({"ack_policy": "explicit"})).await;
    let mut sub = pull(&c, "S", "c", json!({"batch": 1, "no_wait": true})).await;
    let m = recv(&mut sub).await;
    assert_status(&m, 404, "No Messages");
    assert_no_pending_headers(&m);
    assert_quiet(&mut sub, Duration::from_millis(200)).await;
    let i = info(&c, "S", "c").await;
    assert_eq!(i["num_waiting"], 0);
}

#[tokio::test]
async fn no_wait_after_a_partial_batch_is_404() {
    let (_s, c) = setup().await;
    publish_n(&c, "s.a", 2).await;
    create_ok(&c, "S", "c", json!({"ack_policy": "explicit"})).await;
    let mut sub = pull(&c, "S", "c", json!({"batch": 5, "no_wait": true})).await;
    let msgs = recv_n(&mut sub, 3).await;
    assert_eq!(ack_info(&msgs[0]).pending, 1);
    assert_eq!(ack_info(&msgs[1]).pending, 0);
    assert_status(&msgs[2], 404, "No Messages");
    assert_no_pending_headers(&msgs[2]);
    // With expires too, it ends as soon as messages ran out.
    publish_n(&c, "s.a", 2).await;
    let t = Instant::now();
    let mut sub = pull(
        &c,
        "S",
        "c",
        json!({"batch": 5, "no_wait": true, "expires": 5 * SEC}),
    )
    .await;
    let msgs = recv_n(&mut sub, 3).await;
    assert!(status(&msgs[0]).is_none() && status(&msgs[1]).is_none());
    assert_status(&msgs[2], 404, "No Messages");
    assert!(t.elapsed() < Duration::from_secs(2));
}

#[tokio::test]
async fn expiry_is_408_with_pending_headers() {
    let (_s, c) = setup().await;
    publish_n(&c, "s.a", 2).await;
    create_ok(&c, "S", "c", json!({"ack_policy": "explicit"})).await;
    let t = Instant::now();
    let mut sub = pull(&c, "S", "c", json!({"batch": 5, "expires": 300 * MS})).await;
    let msgs = recv_n(&mut sub, 3).await;
    assert!(status(&msgs[0]).is_none() && status(&msgs[1]).is_none());
    assert_status(&msgs[2], 408, "Request Timeout");
    assert_pending_headers(&msgs[2], 3, 0);
    let el = t.elapsed();
    assert!(
        el >= Duration::from_millis(280) && el < Duration::from_secs(2),
        "{el:?}"
    );
    // Nothing at all: the whole batch is reported pending.
    let mut sub = pull(&c, "S", "c", json!({"batch": 5, "expires": 200 * MS})).await;
    let m = recv(&mut sub).await;
    assert_status(&m, 408, "Request Timeout");
    assert_pending_headers(&m, 5, 0);
    // A max_bytes request reports the bytes it had left.
    let mut sub = pull(
        &c,
        "S",
        "c",
        json!({"batch": 4, "expires": 200 * MS, "max_bytes": 1000}),
    )
    .await;
    let m = recv(&mut sub).await;
    assert_status(&m, 408, "Request Timeout");
    assert_pending_headers(&m, 4, 1000);
    let i = info(&c, "S", "c").await;
    assert_eq!(i["num_waiting"], 0);
}

/// Drops INFO lines (a server may send one after CONNECT).
fn without_info(s: &str) -> String {
    s.split_inclusive("\r\n")
        .filter(|l| !l.starts_with("INFO "))
        .collect()
}

#[tokio::test]
async fn exact_408_and_404_on_the_wire() {
    let (s, c) = setup().await;
    create_ok(&c, "S", "c", json!({"ack_policy": "explicit"})).await;
    let mut r = common::Raw::connect(&s.addr());
    r.send(
        b"CONNECT {\"headers\":true,\"verbose\":false,\"protocol\":1}\r\nSUB inbox.1 1\r\nPING\r\n",
    );
    assert!(r
        .read_until("PONG\r\n", Duration::from_secs(5))
        .ends_with("PONG\r\n"));
    let body = br#"{"batch":5,"expires":200000000}"#;
    let cmd = format!(
        "PUB $JS.API.CONSUMER.MSG.NEXT.S.c inbox.1 {}\r\n",
        body.len()
    );
    r.send(cmd.as_bytes());
    r.send(body);
    r.send(b"\r\n");
    let hdr =
        "NATS/1.0 408 Request Timeout\r\nNats-Pending-Messages: 5\r\nNats-Pending-Bytes: 0\r\n\r\n";
    let want = format!("HMSG inbox.1 1 {} {}\r\n{hdr}\r\n", hdr.len(), hdr.len());
    let got = r.read_until(&want, Duration::from_secs(3));
    assert_eq!(without_info(&got), want);
    let body = br#"{"batch":1,"no_wait":true}"#;
    let cmd = format!(
        "PUB $JS.API.CONSUMER.MSG.NEXT.S.c inbox.1 {}\r\n",
        body.len()
    );
    r.send(cmd.as_bytes());
    r.send(body);
    r.send(b"\r\n");
    let hdr = "NATS/1.0 404 No Messages\r\n\r\n";
    let want = format!("HMSG inbox.1 1 {} {}\r\n{hdr}\r\n", hdr.len(), hdr.len());
    let got = r.read_until(&want, Duration::from_secs(3));
    assert_eq!(without_info(&got), want);
}

#[tokio::test]
async fn no_wait_with_expires_waits_for_expiry_or_a_message() {
    let (_s, c) = setup().await;
    create_ok(&c, "S", "c", json!({"ack_policy": "explicit"})).await;
    let t = Instant::now();
    let mut sub = pull(
        &c,
        "S",
        "c",
        json!({"batch": 5, "no_wait": true, "expires": 300 * MS}),
    )
    .await;
    let m = recv(&mut sub).await;
    assert_status(&m, 408, "Request Timeout");
    assert_pending_headers(&m, 5, 0);
    assert!(
        t.elapsed() >= Duration::from_millis(280),
        "{:?}",
        t.elapsed()
    );
    // A message arriving meanwhile is delivered, then the request ends.
    let mut sub = pull(
        &c,
        "S",
        "c",
        json!({"batch": 5, "no_wait": true, "expires": 3 * SEC}),
    )
    .await;
    common::sync(&c).await;
    publish(&c, "s.a", "x").await;
    let m = recv(&mut sub).await;
    assert_eq!(m.payload, "x");
    let m = recv(&mut sub).await;
    assert_status(&m, 404, "No Messages");
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
}

#[tokio::test]
async fn max_bytes_smaller_than_a_message_is_409() {
    let (_s, c) = setup().await;
    publish_n(&c, "s.a", 2).await;
    create_ok(&c, "S", "c", json!({"ack_policy": "explicit"})).await;
    let mut sub = pull(&c, "S", "c", json!({"batch": 5, "max_bytes": 10})).await;
    let m = recv(&mut sub).await;
    assert_status(&m, 409, "Message Size Exceeds MaxBytes");
    assert_pending_headers(&m, 5, 10);
    let i = info(&c, "S", "c").await;
    assert_eq!(i["num_pending"], 2);
    assert_eq!(i["num_ack_pending"], 0);
    assert_eq!(i["num_waiting"], 0);
}

#[tokio::test]
async fn max_bytes_left_over_is_409_batch_completed() {
    let (_s, c) = setup().await;
    publish_n(&c, "s.a", 3).await;
    create_ok(&c, "S", "c", json!({"ack_policy": "explicit"})).await;
    let mut sub = pull(&c, "S", "c", json!({"batch": 2, "max_bytes": 1000})).await;
    let msgs = recv_n(&mut sub, 3).await;
    let used = pull_size(&msgs[0], 0) + pull_size(&msgs[1], 0);
    assert_status(&msgs[2], 409, "Batch Completed");
    assert_pending_headers(&msgs[2], 0, 1000 - used);
    assert_quiet(&mut sub, Duration::from_millis(200)).await;
}

#[tokio::test]
async fn max_bytes_running_out_midway_is_409() {
    let (_s, c) = setup().await;
    publish_n(&c, "s.a", 3).await;
    create_ok(&c, "S", "c", json!({"ack_policy": "explicit"})).await;
    // Room for one message (about 43 bytes each) but not two.
    let mut sub = pull(
        &c,
        "S",
        "c",
        json!({"batch": 5, "max_bytes": 60, "expires": 2 * SEC}),
    )
    .await;
    let msgs = recv_n(&mut sub, 2).await;
    assert!(status(&msgs[0]).is_none());
    let left = 60 - pull_size(&msgs[0], 0);
    assert!(left > 0 && left < 43, "{left}");
    assert_status(&msgs[1], 409, "Message Size Exceeds MaxBytes");
    assert_pending_headers(&msgs[1], 4, left);
    // The message that did not fit is still there for the next request.
    let mut sub = pull(&c, "S", "c", json!({"batch": 1})).await;
    let m = recv(&mut sub).await;
    assert_eq!(ack_info(&m).sseq, 2);
}

#[tokio::test]
async fn pull_heartbeats_carry_the_last_sequences() {
    let (_s, c) = setup().await;
    publish_n(&c, "s.a", 2).await;
    create_ok(&c, "S", "c", json!({"ack_policy": "explicit"})).await;
    let t = Instant::now();
    let mut sub = pull(
        &c,
        "S",
        "c",
        json!({"batch": 5, "expires": SEC, "idle_heartbeat": 200 * MS}),
    )
    .await;
    let msgs = recv_n(&mut sub, 2).await;
    assert!(status(&msgs[0]).is_none() && status(&msgs[1]).is_none());
    let hb = recv(&mut sub).await;
    assert_status(&hb, 100, "Idle Heartbeat");
    assert!(
        t.elapsed() >= Duration::from_millis(180),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(
        header(&hb, "Nats-Last-Consumer"),
        Some("2"),
        "{}",
        describe(&hb)
    );
    assert_eq!(
        header(&hb, "Nats-Last-Stream"),
        Some("2"),
        "{}",
        describe(&hb)
    );
    assert_no_pending_headers(&hb);
    // More heartbeats, then the timeout.
    let mut heartbeats = 1;
    loop {
        let m = recv(&mut sub).await;
        match status(&m) {
            Some(100) => heartbeats += 1,
            Some(408) => {
                assert_status(&m, 408, "Request Timeout");
                assert_pending_headers(&m, 3, 0);
                break;
            }
            _ => panic!("unexpected {}", describe(&m)),
        }
    }
    assert!((3..=5).contains(&heartbeats), "{heartbeats} heartbeats");
}

#[tokio::test]
async fn heartbeat_too_large_for_expires_is_400() {
    let (_s, c) = setup().await;
    create_ok(&c, "S", "c", json!({"ack_policy": "explicit"})).await;
    for body in [
        json!({"batch": 5, "expires": 300 * MS, "idle_heartbeat": 200 * MS}),
        json!({"batch": 5, "idle_heartbeat": 200 * MS}),
    ] {
        let mut sub = pull(&c, "S", "c", body).await;
        let m = recv(&mut sub).await;
        assert_status(&m, 400, "Bad Request - heartbeat value too large");
        assert_no_pending_headers(&m);
    }
    let i = info(&c, "S", "c").await;
    assert_eq!(i["num_waiting"], 0);
}

#[tokio::test]
async fn bad_json_is_400_bad_request() {
    let (_s, c) = setup().await;
    create_ok(&c, "S", "c", json!({"ack_policy": "explicit"})).await;
    let mut sub = pull_raw(&c, "S", "c", Bytes::from_static(b"{\"batch\":")).await;
    let m = recv(&mut sub).await;
    assert_status(&m, 400, "Bad Request - unexpected end of JSON input");
    let mut sub = pull_raw(&c, "S", "c", Bytes::from_static(b"{\"batch\":\"x\"}")).await;
    let m = recv(&mut sub).await;
    assert_status(
        &m,
        400,
        "Bad Request - json: cannot unmarshal string into Go struct field .batch of type int",
    );
    // Unknown fields and nulls (as async-nats sends) are fine.
    publish(&c, "s.a", "x").await;
    let mut sub = pull_raw(
        &c,
        "S",
        "c",
        Bytes::from_static(b"{\"batch\":1,\"bogus\":true,\"min_pending\":null,\"group\":null,\"priority\":null,\"max_bytes\":0}"),
    )
    .await;
    let m = recv(&mut sub).await;
    assert_eq!(m.payload, "x");
}

#[tokio::test]
async fn request_limits_are_409() {
    let (_s, c) = setup().await;
    create_ok(
        &c,
        "S",
        "lim",
        json!({"ack_policy": "explicit", "max_batch": 5, "max_expires": SEC, "max_bytes": 100}),
    )
    .await;
    let cases = [
        (json!({"batch": 10}), "Exceeded MaxRequestBatch of 5"),
        (
            json!({"batch": 1, "expires": 2 * SEC}),
            "Exceeded MaxRequestExpires of 1s",
        ),
        (
            json!({"batch": 1, "max_bytes": 101}),
            "Exceeded MaxRequestMaxBytes of 100",
        ),
    ];
    for (body, desc) in cases {
        let mut sub = pull(&c, "S", "lim", body).await;
        let m = recv(&mut sub).await;
        assert_status(&m, 409, desc);
        assert_no_pending_headers(&m);
    }
    // Within limits, and without expires at all: accepted.
    let mut sub = pull(&c, "S", "lim", json!({"batch": 1, "no_wait": true})).await;
    assert_status(&recv(&mut sub).await, 404, "No Messages");
    let mut sub = pull_raw(&c, "S", "lim", Bytes::new()).await;
    common::sync(&c).await;
    publish(&c, "s.a", "x").await;
    let m = recv(&mut sub).await;
    assert!(status(&m).is_none(), "{}", describe(&m));
    assert_eq!(m.payload, "x");

    // async-nats ends messages() on such a 409.
    let js = jetstream::new(c.clone());
    let cons: consumer::PullConsumer = js
        .get_stream("S")
        .await
        .unwrap()
        .get_consumer("lim")
        .await
        .unwrap();
    let mut msgs = cons
        .stream()
        .max_messages_per_batch(10)
        .messages()
        .await
        .unwrap();
    let e = tokio::time::timeout(Duration::from_secs(5), msgs.next())
        .await
        .expect("an error")
        .expect("an item")
        .expect_err("a request limit error");
    assert_eq!(
        e.kind(),
        consumer::pull::MessagesErrorKind::RequestLimitExceeded
    );
}

#[tokio::test]
async fn max_waiting_is_409_and_heartbeat_requests_are_dropped_silently() {
    let (_s, c) = setup().await;
    create_ok(
        &c,
        "S",
        "c",
        json!({"ack_policy": "explicit", "max_waiting": 2}),
    )
    .await;
    let mut a = pull(&c, "S", "c", json!({"batch": 1, "expires": 5 * SEC})).await;
    let mut b = pull(&c, "S", "c", json!({"batch": 1, "expires": 5 * SEC})).await;
    let mut third = pull(&c, "S", "c", json!({"batch": 1, "expires": 5 * SEC})).await;
    let m = recv(&mut third).await;
    assert_status(&m, 409, "Exceeded MaxWaiting");
    assert_no_pending_headers(&m);
    let mut hb = pull(
        &c,
        "S",
        "c",
        json!({"batch": 1, "expires": 5 * SEC, "idle_heartbeat": SEC}),
    )
    .await;
    assert_quiet(&mut hb, Duration::from_millis(300)).await;
    let i = info(&c, "S", "c").await;
    assert_eq!(i["num_waiting"], 2);
    // The queued two are served in order.
    publish(&c, "s.a", "1").await;
    publish(&c, "s.a", "2").await;
    assert_eq!(recv(&mut a).await.payload, "1");
    assert_eq!(recv(&mut b).await.payload, "2");
    let i = info(&c, "S", "c").await;
    assert_eq!(i["num_waiting"], 0);
}

#[tokio::test]
async fn max_ack_pending_holds_deliveries_back() {
    let (_s, c) = setup().await;
    publish_n(&c, "s.a", 3).await;
    create_ok(
        &c,
        "S",
        "c",
        json!({"ack_policy": "explicit", "max_ack_pending": 1}),
    )
    .await;
    let mut sub = pull(&c, "S", "c", json!({"batch": 5, "expires": 400 * MS})).await;
    let first = recv(&mut sub).await;
    assert_eq!(ack_info(&first).sseq, 1);
    let m = recv(&mut sub).await;
    assert_status(&m, 408, "Request Timeout");
    assert_pending_headers(&m, 4, 0);
    let i = info(&c, "S", "c").await;
    assert_eq!(i["num_ack_pending"], 1);
    assert_eq!(i["num_pending"], 2);
    // An ack lets the next one through to a waiting request.
    let mut sub = pull(&c, "S", "c", json!({"batch": 5, "expires": 2 * SEC})).await;
    common::sync(&c).await;
    assert_quiet(&mut sub, Duration::from_millis(200)).await;
    ack_sync(&c, &first, "+ACK").await;
    let m = recv(&mut sub).await;
    assert_eq!(ack_info(&m).sseq, 2);
    assert_quiet(&mut sub, Duration::from_millis(200)).await;
    // Ack-none consumers are not limited.
    create_ok(&c, "S", "n", json!({"ack_policy": "none"})).await;
    let mut sub = pull(&c, "S", "n", json!({"batch": 3, "no_wait": true})).await;
    let msgs = recv_n(&mut sub, 3).await;
    assert!(msgs.iter().all(|m| status(m).is_none()));
}

#[tokio::test]
async fn no_wait_while_requests_wait_is_408_requests_pending() {
    let (_s, c) = setup().await;
    publish_n(&c, "s.a", 3).await;
    create_ok(
        &c,
        "S",
        "c",
        json!({"ack_policy": "explicit", "max_ack_pending": 1}),
    )
    .await;
    // A request holds 4 more, but only 2 messages are pending.
    let mut waiting = pull(&c, "S", "c", json!({"batch": 5, "expires": 5 * SEC})).await;
    assert_eq!(ack_info(&recv(&mut waiting).await).sseq, 1);
    let mut sub = pull(&c, "S", "c", json!({"batch": 1, "no_wait": true})).await;
    let m = recv(&mut sub).await;
    assert_status(&m, 408, "Requests Pending");
    assert_no_pending_headers(&m);
}

#[tokio::test]
async fn deleting_the_consumer_sends_409_to_waiting_requests() {
    let (_s, c) = setup().await;
    create_ok(&c, "S", "c", json!({"ack_policy": "explicit"})).await;
    let mut a = pull(&c, "S", "c", json!({"batch": 5, "expires": 10 * SEC})).await;
    let mut b = pull_raw(&c, "S", "c", Bytes::new()).await;
    common::sync(&c).await;
    assert_eq!(info(&c, "S", "c").await["num_waiting"], 2);
    assert_ok(&delete(&c, "S", "c").await);
    for sub in [&mut a, &mut b] {
        let m = recv(sub).await;
        assert_status(&m, 409, "Consumer Deleted");
        assert_no_pending_headers(&m);
    }
    // Then nothing answers pulls for it.
    let e = c
        .request("$JS.API.CONSUMER.MSG.NEXT.S.c", Bytes::new())
        .await
        .expect_err("no responders");
    assert_eq!(e.kind(), async_nats::RequestErrorKind::NoResponders);
}

#[tokio::test]
async fn messages_iterator_ends_when_the_consumer_is_deleted() {
    let (_s, c) = setup().await;
    let js = jetstream::new(c.clone());
    let cons: consumer::PullConsumer = js
        .get_stream("S")
        .await
        .unwrap()
        .create_consumer(consumer::pull::Config {
            durable_name: Some("d".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    let mut msgs = cons.messages().await.unwrap();
    publish(&c, "s.a", "x").await;
    let m = tokio::time::timeout(Duration::from_secs(5), msgs.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    m.ack().await.unwrap();
    assert!(
        eventually(Duration::from_secs(3), || async {
            info(&c, "S", "d").await["num_waiting"] == 1
        })
        .await
    );
    assert_ok(&delete(&c, "S", "d").await);
    let e = tokio::time::timeout(Duration::from_secs(5), msgs.next())
        .await
        .expect("an error in time")
        .expect("an item")
        .expect_err("consumer deleted");
    assert_eq!(e.kind(), consumer::pull::MessagesErrorKind::ConsumerDeleted);
}

#[tokio::test]
async fn pulls_for_a_missing_consumer_have_no_responders() {
    let (_s, c) = setup().await;
    let e = c
        .request("$JS.API.CONSUMER.MSG.NEXT.S.nope", Bytes::new())
        .await
        .expect_err("no responders");
    assert_eq!(e.kind(), async_nats::RequestErrorKind::NoResponders);
    let e = c
        .request("$JS.API.CONSUMER.MSG.NEXT.NOPE.nope", Bytes::new())
        .await
        .expect_err("no responders");
    assert_eq!(e.kind(), async_nats::RequestErrorKind::NoResponders);
}

#[tokio::test]
async fn pulls_to_a_push_consumer_are_409() {
    let (_s, c) = setup().await;
    create_ok(
        &c,
        "S",
        "p",
        json!({"ack_policy": "explicit", "deliver_subject": "dp"}),
    )
    .await;
    let mut sub = pull(&c, "S", "p", json!({"batch": 1, "no_wait": true})).await;
    let m = recv(&mut sub).await;
    assert_status(&m, 409, "Consumer is push based");
    assert_no_pending_headers(&m);
}

#[tokio::test]
async fn waiting_requests_share_deliveries_in_turn() {
    let (_s, c) = setup().await;
    create_ok(&c, "S", "c", json!({"ack_policy": "explicit"})).await;
    let mut a = pull(&c, "S", "c", json!({"batch": 2, "expires": 5 * SEC})).await;
    let mut b = pull(&c, "S", "c", json!({"batch": 2, "expires": 5 * SEC})).await;
    common::sync(&c).await;
    publish_n(&c, "s.a", 4).await;
    let a_seqs: Vec<u64> = recv_n(&mut a, 2)
        .await
        .iter()
        .map(|m| ack_info(m).sseq)
        .collect();
    let b_seqs: Vec<u64> = recv_n(&mut b, 2)
        .await
        .iter()
        .map(|m| ack_info(m).sseq)
        .collect();
    assert_eq!(a_seqs, [1, 3]);
    assert_eq!(b_seqs, [2, 4]);
    // Served by count without max_bytes: no terminal status.
    assert_quiet(&mut a, Duration::from_millis(200)).await;
    assert_quiet(&mut b, Duration::from_millis(10)).await;
    assert_eq!(info(&c, "S", "c").await["num_waiting"], 0);
}

#[tokio::test]
async fn expired_requests_leave_the_queue() {
    let (_s, c) = setup().await;
    create_ok(&c, "S", "c", json!({"ack_policy": "explicit"})).await;
    let mut sub = pull(&c, "S", "c", json!({"batch": 1, "expires": 300 * MS})).await;
    common::sync(&c).await;
    assert_eq!(info(&c, "S", "c").await["num_waiting"], 1);
    assert_status(&recv(&mut sub).await, 408, "Request Timeout");
    assert_eq!(info(&c, "S", "c").await["num_waiting"], 0);
    // A message published after expiry waits for the next request.
    publish(&c, "s.a", "x").await;
    assert_quiet(&mut sub, Duration::from_millis(100)).await;
    let i = info(&c, "S", "c").await;
    assert_eq!(i["num_pending"], 1);
    assert_eq!(i["delivered"]["consumer_seq"], 0);
}

#[tokio::test]
async fn filtered_pull_and_pending_token() {
    let (_s, c) = setup().await;
    for subj in ["s.a", "s.b", "s.a", "s.b", "s.a"] {
        publish(&c, subj, subj).await;
    }
    create_ok(
        &c,
        "S",
        "c",
        json!({"ack_policy": "explicit", "filter_subject": "s.a"}),
    )
    .await;
    let mut sub = pull(&c, "S", "c", json!({"batch": 10, "no_wait": true})).await;
    let msgs = recv_n(&mut sub, 4).await;
    let got: Vec<(u64, u64, u64)> = msgs[..3]
        .iter()
        .map(|m| {
            let a = ack_info(m);
            (a.sseq, a.dseq, a.pending)
        })
        .collect();
    assert_eq!(got, [(1, 1, 2), (3, 2, 1), (5, 3, 0)]);
    assert!(msgs[..3].iter().all(|m| m.subject.as_str() == "s.a"));
    assert_status(&msgs[3], 404, "No Messages");
}

#[tokio::test]
async fn deleting_the_stream_sends_409_to_waiting_requests() {
    let (_s, c) = setup().await;
    create_ok(&c, "S", "c", json!({"ack_policy": "explicit"})).await;
    let mut sub = pull(&c, "S", "c", json!({"batch": 5, "expires": 10 * SEC})).await;
    common::sync(&c).await;
    // Waiting, as the stream's leader sees it: in a cluster the request
    // is a proposal of the stream's group, and the delete the meta
    // group's; the info read waits behind the leader's own proposals.
    assert_eq!(info(&c, "S", "c").await["num_waiting"], 1);
    let v = api(&c, "$JS.API.STREAM.DELETE.S", Bytes::new()).await;
    assert_ok(&v);
    let m = recv(&mut sub).await;
    assert_status(&m, 409, "Consumer Deleted");
}

#[tokio::test]
async fn batch_zero_or_negative_means_one() {
    let (_s, c) = setup().await;
    publish_n(&c, "s.a", 4).await;
    create_ok(&c, "S", "c", json!({"ack_policy": "explicit"})).await;
    for body in [json!({"batch": 0}), json!({"batch": -3})] {
        let mut sub = pull(&c, "S", "c", body).await;
        let m = recv(&mut sub).await;
        assert!(status(&m).is_none(), "{}", describe(&m));
        assert_quiet(&mut sub, Duration::from_millis(200)).await;
    }
    let i = info(&c, "S", "c").await;
    assert_eq!(i["delivered"]["consumer_seq"], 2);
    assert_eq!(i["num_waiting"], 0);
}

#[tokio::test]
async fn a_pull_whose_requester_left_takes_no_message() {
    let (_s, c) = setup().await;
    publish_n(&c, "s.a", 1).await;
    explicit_durable(&c, "S", "d").await;
    // The requester unsubscribed before asking (nats.py's
    // test_pull_subscribe_limits): nobody hears the reply, so nats-server
    // drops the request and the message stays pending.
    let inbox = c.new_inbox();
    c.publish_with_reply("$JS.API.CONSUMER.MSG.NEXT.S.d", inbox, "1".into())
        .await
        .unwrap();
    c.flush().await.unwrap();
    let v = info(&c, "S", "d").await;
    assert_eq!(v["num_pending"], 1, "{v}");
    assert_eq!(v["num_ack_pending"], 0, "{v}");
    assert_eq!(v["delivered"]["stream_seq"], 0, "{v}");
    // A requester that listens gets it, delivered for the first time.
    let mut sub = pull(&c, "S", "d", json!({"batch": 1})).await;
    let m = recv(&mut sub).await;
    assert_eq!(ack_info(&m).sseq, 1, "{}", describe(&m));
    assert_eq!(ack_info(&m).dc, 1, "{}", describe(&m));
}

/// A pull request in priority group `A` on stream `S`.
async fn group_pull(
    c: &async_nats::Client,
    consumer: &str,
    batch: u64,
    expires: u64,
) -> async_nats::Subscriber {
    pull(
        c,
        "S",
        consumer,
        json!({"batch": batch, "group": "A", "expires": expires}),
    )
    .await
}

#[tokio::test]
async fn priority_group_configs_nats_server_refuses() {
    let (_s, c) = setup().await;
    let pull = |extra: Value| {
        let mut cfg = json!({"durable_name": "p", "ack_policy": "explicit"});
        cfg.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        cfg
    };
    let table = [
        (json!({"priority_policy": "overflow"}), (10159, "Setting PriorityPolicy requires at least one PriorityGroup to be set")),
        (json!({"priority_groups": ["A"]}), (10196, "consumer can not have priority groups when policy is none")),
        (json!({"priority_timeout": 1_000_000_000}), (10197, "PinnedTTL cannot be set when PriorityPolicy is none")),
        (json!({"priority_policy": "pinned_client", "priority_groups": [""]}), (10161, "Group name cannot be an empty string")),
        (
            json!({"priority_policy": "prioritized", "priority_groups": ["much-too-long-group-name"]}),
            (10162, "Valid priority group name must match A-Z, a-z, 0-9, -_/=)+ and may not exceed 16 characters"),
        ),
        (
            json!({"priority_policy": "overflow", "priority_groups": ["A"], "deliver_subject": "push.here"}),
            (10178, "priority groups can not be used with push consumers"),
        ),
    ];
    for (extra, (err_code, description)) in table {
        let v = create(&c, "S", "p", pull(extra.clone())).await;
        assert_err(&v, 400, err_code, description);
    }
}

#[tokio::test]
async fn overflow_pulls_wait_for_enough_pending() {
    let (_s, c) = setup().await;
    publish_n(&c, "s.a", 5).await;
    let cfg = json!({"durable_name": "o", "ack_policy": "explicit",
        "priority_policy": "overflow", "priority_groups": ["A"]});
    create_ok(&c, "S", "o", cfg).await;
    // Requests that break the group's rules are refused.
    let refusals = [
        (json!({"batch": 1}), "Bad Request - Priority Group missing"),
        (
            json!({"batch": 1, "group": "B"}),
            "Bad Request - Invalid Priority Group",
        ),
        (
            json!({"batch": 1, "group": "A", "id": "x"}),
            "Bad Request - Not a Pinned Client Priority consumer",
        ),
        (
            json!({"batch": 1, "group": "A", "priority": 10}),
            "Bad Request - Priority must be between 0 and 9",
        ),
    ];
    for (body, description) in refusals {
        let mut sub = pull(&c, "S", "o", body).await;
        assert_status(&recv(&mut sub).await, 400, description);
    }
    // Five pending: a pull that wants ten waits; one without limits does not.
    let mut patient = pull(
        &c,
        "S",
        "o",
        json!({"batch": 10, "group": "A", "min_pending": 10, "expires": 3_000_000_000u64}),
    )
    .await;
    assert_quiet(&mut patient, Duration::from_millis(500)).await;
    let mut eager = pull(&c, "S", "o", json!({"batch": 1, "group": "A"})).await;
    assert_eq!(ack_info(&recv(&mut eager).await).sseq, 1);
    assert_quiet(&mut patient, Duration::from_millis(200)).await;
    // Ten more pending: the patient one is served.
    publish_n(&c, "s.a", 10).await;
    let m = recv(&mut patient).await;
    assert_eq!(ack_info(&m).sseq, 2, "{}", describe(&m));
}

#[tokio::test]
async fn prioritized_pulls_serve_the_most_urgent_first() {
    let (_s, c) = setup().await;
    let cfg = json!({"durable_name": "p", "ack_policy": "explicit",
        "priority_policy": "prioritized", "priority_groups": ["A"]});
    create_ok(&c, "S", "p", cfg).await;
    let expires = 5_000_000_000u64;
    let mut low = pull(
        &c,
        "S",
        "p",
        json!({"batch": 5, "group": "A", "priority": 5, "expires": expires}),
    )
    .await;
    let mut high = pull(
        &c,
        "S",
        "p",
        json!({"batch": 2, "group": "A", "priority": 1, "expires": expires}),
    )
    .await;
    let both = eventually(Duration::from_secs(5), || async {
        info(&c, "S", "p").await["num_waiting"] == 2
    });
    assert!(both.await);
    publish_n(&c, "s.a", 3).await;
    // The urgent request takes what it asked for; then the other.
    assert_eq!(ack_info(&recv(&mut high).await).sseq, 1);
    assert_eq!(ack_info(&recv(&mut high).await).sseq, 2);
    assert_eq!(ack_info(&recv(&mut low).await).sseq, 3);
}

#[tokio::test]
async fn a_pinned_client_gets_everything_until_unpinned() {
    let (_s, c) = setup().await;
    let cfg = json!({"durable_name": "pin", "ack_policy": "explicit",
        "priority_policy": "pinned_client", "priority_groups": ["A"]});
    create_ok(&c, "S", "pin", cfg).await;
    let state = info(&c, "S", "pin").await;
    assert_eq!(
        state["priority_groups"],
        json!([{"group": "A", "pinned_ts": "0001-01-01T00:00:00Z"}]),
        "{state}"
    );
    let expires = 5_000_000_000u64;
    let mut first = group_pull(&c, "pin", 1, expires).await;
    let mut standby = group_pull(&c, "pin", 5, expires).await;
    publish_n(&c, "s.a", 2).await;
    // The first request is pinned: its delivery carries the pin id.
    let m = recv(&mut first).await;
    let id = header(&m, "Nats-Pin-Id").expect("a pin id").to_string();
    assert_eq!(id.len(), 22, "{}", describe(&m));
    let state = info(&c, "S", "pin").await;
    assert_eq!(
        state["priority_groups"][0]["pinned_client_id"],
        id.as_str(),
        "{state}"
    );
    // The standby waits; a request with another id is refused; the pinned
    // client's next request takes the next message.
    assert_quiet(&mut standby, Duration::from_millis(300)).await;
    let mut stale = pull(
        &c,
        "S",
        "pin",
        json!({"batch": 1, "group": "A", "id": "stale"}),
    )
    .await;
    assert_status(&recv(&mut stale).await, 423, "Nats-Pin-Id mismatch");
    let mut again = pull(
        &c,
        "S",
        "pin",
        json!({"batch": 1, "group": "A", "id": id, "expires": expires}),
    )
    .await;
    let m = recv(&mut again).await;
    assert_eq!(ack_info(&m).sseq, 2, "{}", describe(&m));
    // Unpinned: the standby is pinned with a new id at the next message.
    let unpinned = api(&c, "$JS.API.CONSUMER.UNPIN.S.pin", r#"{"group":"A"}"#).await;
    assert_eq!(
        unpinned,
        json!({"type": "io.nats.jetstream.api.v1.consumer_unpin_response"})
    );
    let wrong = api(&c, "$JS.API.CONSUMER.UNPIN.S.pin", r#"{"group":"B"}"#).await;
    assert_err(
        &wrong,
        400,
        10160,
        "Provided priority group does not exist for this consumer",
    );
    publish_n(&c, "s.a", 1).await;
    let m = recv(&mut standby).await;
    let new_id = header(&m, "Nats-Pin-Id").expect("a pin id");
    assert_ne!(new_id, id, "{}", describe(&m));
}

#[tokio::test]
async fn a_waiting_pull_is_dropped_once_its_requester_leaves() {
    let (_s, c) = setup().await;
    explicit_durable(&c, "S", "d").await;
    let mut sub = pull(
        &c,
        "S",
        "d",
        json!({"batch": 1, "expires": 30_000_000_000u64}),
    )
    .await;
    assert!(
        eventually(Duration::from_secs(5), || async {
            info(&c, "S", "d").await["num_waiting"] == 1
        })
        .await
    );
    sub.unsubscribe().await.unwrap();
    c.flush().await.unwrap();
    // nats-server forgets it when it next looks; flotilla within a second
    // or so.
    let forgotten = eventually(Duration::from_secs(5), || async {
        info(&c, "S", "d").await["num_waiting"] == 0
    })
    .await;
    assert!(forgotten, "{}", info(&c, "S", "d").await);
    publish_n(&c, "s.a", 1).await;
    let v = info(&c, "S", "d").await;
    assert_eq!(
        (v["num_pending"].clone(), v["num_ack_pending"].clone()),
        (json!(1), json!(0)),
        "{v}"
    );
}

#[tokio::test]
async fn a_pin_lapses_when_its_client_stops_pulling() {
    let (_s, c) = setup().await;
    let cfg = json!({"durable_name": "lapse", "ack_policy": "explicit",
        "priority_policy": "pinned_client", "priority_groups": ["A"],
        "priority_timeout": 1_000_000_000u64});
    create_ok(&c, "S", "lapse", cfg).await;
    let expires = 10_000_000_000u64;
    let mut first = group_pull(&c, "lapse", 1, expires).await;
    publish_n(&c, "s.a", 1).await;
    let pinned = header(&recv(&mut first).await, "Nats-Pin-Id")
        .expect("pinned")
        .to_string();
    // The pinned client pulls no more; after priority_timeout another
    // request takes the next message, with a new pin.
    let mut standby = group_pull(&c, "lapse", 1, expires).await;
    publish_n(&c, "s.a", 1).await;
    let m = recv(&mut standby).await;
    let repinned = header(&m, "Nats-Pin-Id").expect("pinned again");
    assert_ne!(repinned, pinned, "{}", describe(&m));
    let state = info(&c, "S", "lapse").await;
    assert_eq!(
        state["priority_groups"][0]["pinned_client_id"], repinned,
        "{state}"
    );
}
