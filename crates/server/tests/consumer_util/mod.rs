//! Helpers shared by the consumer tests (`js_consumer_api`, `js_pull`,
//! `js_push`, `js_ack`): raw API requests with JSON checks, status
//! messages, ack-subject parsing and polling.
#![allow(dead_code)]

use std::time::{Duration, Instant};

use async_nats::{Client, Message, Subscriber};
use bytes::Bytes;
use futures::StreamExt;
use serde_json::{json, Value};

/// A JetStream API request; the reply parsed as JSON.
pub async fn api(c: &Client, subject: &str, body: impl Into<Bytes>) -> Value {
    let body: Bytes = body.into();
    let body = match std::str::from_utf8(&body) {
        Ok(text) => Bytes::from(super::common::with_replicas(subject, text)),
        Err(_) => body,
    };
    let m = tokio::time::timeout(Duration::from_secs(5), c.request(subject.to_string(), body))
        .await
        .unwrap_or_else(|_| panic!("{subject}: no reply in 5s"))
        .unwrap_or_else(|e| panic!("{subject}: {e}"));
    serde_json::from_slice(&m.payload)
        .unwrap_or_else(|e| panic!("{subject}: reply is not JSON ({e}): {:?}", m.payload))
}

/// An API request with a JSON body.
pub async fn api_json(c: &Client, subject: &str, body: Value) -> Value {
    api(c, subject, Bytes::from(body.to_string())).await
}

/// Asserts an API error reply: `(code, err_code, description)`.
#[track_caller]
pub fn assert_err(v: &Value, code: u64, err_code: u64, description: &str) {
    let e = &v["error"];
    assert!(e.is_object(), "expected error {err_code}, got {v}");
    assert_eq!(e["code"], json!(code), "{v}");
    assert_eq!(e["err_code"], json!(err_code), "{v}");
    assert_eq!(e["description"], json!(description), "{v}");
}

/// Asserts a reply without an error.
#[track_caller]
pub fn assert_ok(v: &Value) {
    assert!(v.get("error").is_none(), "unexpected error: {v}");
}

/// Creates a stream from raw JSON config (`name` must be set).
pub async fn stream(c: &Client, cfg: Value) -> Value {
    let name = cfg["name"].as_str().expect("stream name").to_string();
    let v = api_json(c, &format!("$JS.API.STREAM.CREATE.{name}"), cfg).await;
    assert_ok(&v);
    v
}

/// A stream `S` on `s.>` (limits retention, file storage).
pub async fn stream_s(c: &Client) {
    stream(c, json!({"name": "S", "subjects": ["s.>"]})).await;
}

/// Creates a consumer on `stream` with the new-style subject
/// (`CONSUMER.CREATE.<stream>.<name>`); returns the reply.
pub async fn create(c: &Client, stream: &str, name: &str, cfg: Value) -> Value {
    let subject = format!("$JS.API.CONSUMER.CREATE.{stream}.{name}");
    api_json(c, &subject, json!({"stream_name": stream, "config": cfg})).await
}

/// A durable pull consumer `name` with explicit acks, asserting success.
pub async fn explicit_durable(c: &Client, stream: &str, name: &str) -> Value {
    create_ok(
        c,
        stream,
        name,
        json!({"durable_name": name, "ack_policy": "explicit"}),
    )
    .await
}

/// `create`, asserting success.
pub async fn create_ok(c: &Client, stream: &str, name: &str, cfg: Value) -> Value {
    let v = create(c, stream, name, cfg).await;
    assert_ok(&v);
    v
}

pub async fn info(c: &Client, stream: &str, name: &str) -> Value {
    api(
        c,
        &format!("$JS.API.CONSUMER.INFO.{stream}.{name}"),
        Bytes::new(),
    )
    .await
}

pub async fn stream_info(c: &Client, stream: &str) -> Value {
    api(c, &format!("$JS.API.STREAM.INFO.{stream}"), Bytes::new()).await
}

pub async fn delete(c: &Client, stream: &str, name: &str) -> Value {
    api(
        c,
        &format!("$JS.API.CONSUMER.DELETE.{stream}.{name}"),
        Bytes::new(),
    )
    .await
}

/// Publishes through JetStream and waits for the ack; returns the seq.
pub async fn publish(c: &Client, subject: &str, payload: &str) -> u64 {
    let m = tokio::time::timeout(
        Duration::from_secs(5),
        c.request(subject.to_string(), Bytes::from(payload.to_string())),
    )
    .await
    .expect("pub ack in time")
    .expect("pub ack");
    let v: Value = serde_json::from_slice(&m.payload).expect("pub ack json");
    assert!(v.get("error").is_none(), "publish {subject}: {v}");
    v["seq"].as_u64().expect("seq")
}

/// Publishes `n` messages `subject` with payloads `0..n`.
pub async fn publish_n(c: &Client, subject: &str, n: usize) {
    for i in 0..n {
        publish(c, subject, &i.to_string()).await;
    }
}

/// The next message on `sub` within `timeout`.
pub async fn next(sub: &mut Subscriber, timeout: Duration) -> Option<Message> {
    tokio::time::timeout(timeout, sub.next())
        .await
        .ok()
        .flatten()
}

/// The next message on `sub`, which must come within 5s.
pub async fn recv(sub: &mut Subscriber) -> Message {
    next(sub, Duration::from_secs(5))
        .await
        .expect("a message within 5s")
}

/// Asserts nothing arrives on `sub` for `d`.
pub async fn assert_quiet(sub: &mut Subscriber, d: Duration) {
    if let Some(m) = next(sub, d).await {
        panic!("unexpected message: {}", describe(&m));
    }
}

/// A short human description of a message, for failures.
pub fn describe(m: &Message) -> String {
    format!(
        "subject={} reply={:?} status={:?} description={:?} headers={:?} payload={:?}",
        m.subject, m.reply, m.status, m.description, m.headers, m.payload
    )
}

/// The status code of a status message (None for a normal message).
pub fn status(m: &Message) -> Option<u16> {
    m.status.map(|s| s.as_u16())
}

/// A header's value.
pub fn header<'a>(m: &'a Message, key: &str) -> Option<&'a str> {
    m.headers.as_ref()?.get(key).map(|v| v.as_str())
}

/// Asserts a status message with exactly this code and description.
#[track_caller]
pub fn assert_status(m: &Message, code: u16, description: &str) {
    assert_eq!(status(m), Some(code), "{}", describe(m));
    assert_eq!(
        m.description.as_deref(),
        Some(description),
        "{}",
        describe(m)
    );
    assert!(m.payload.is_empty(), "{}", describe(m));
}

/// Asserts the pull pending headers of a status message.
#[track_caller]
pub fn assert_pending_headers(m: &Message, msgs: i64, bytes: i64) {
    assert_eq!(
        header(m, "Nats-Pending-Messages"),
        Some(msgs.to_string().as_str()),
        "{}",
        describe(m)
    );
    assert_eq!(
        header(m, "Nats-Pending-Bytes"),
        Some(bytes.to_string().as_str()),
        "{}",
        describe(m)
    );
}

/// Asserts a status message has no pull pending headers.
#[track_caller]
pub fn assert_no_pending_headers(m: &Message) {
    assert_eq!(header(m, "Nats-Pending-Messages"), None, "{}", describe(m));
    assert_eq!(header(m, "Nats-Pending-Bytes"), None, "{}", describe(m));
}

/// The parsed v1 ack subject
/// `$JS.ACK.<stream>.<consumer>.<dc>.<sseq>.<dseq>.<ts>.<pending>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ack {
    pub stream: String,
    pub consumer: String,
    pub dc: u64,
    pub sseq: u64,
    pub dseq: u64,
    pub ts: i64,
    pub pending: u64,
}

#[track_caller]
pub fn ack_info(m: &Message) -> Ack {
    let reply = m
        .reply
        .as_ref()
        .unwrap_or_else(|| panic!("no reply: {}", describe(m)));
    let t: Vec<&str> = reply.split('.').collect();
    assert_eq!(t.len(), 9, "ack subject {reply}");
    assert_eq!(&t[..2], ["$JS", "ACK"], "ack subject {reply}");
    Ack {
        stream: t[2].to_string(),
        consumer: t[3].to_string(),
        dc: t[4].parse().expect("dc"),
        sseq: t[5].parse().expect("sseq"),
        dseq: t[6].parse().expect("dseq"),
        ts: t[7].parse().expect("ts"),
        pending: t[8].parse().expect("pending"),
    }
}

/// Acks a delivered message with `body` (fire and forget).
pub async fn ack_raw(c: &Client, m: &Message, body: &str) {
    let reply = m.reply.clone().expect("ack reply");
    c.publish(reply, Bytes::from(body.to_string()))
        .await
        .unwrap();
    c.flush().await.unwrap();
}

/// Acks with `body` and waits for the server's (empty) double-ack reply.
pub async fn ack_sync(c: &Client, m: &Message, body: &str) {
    let reply = m.reply.clone().expect("ack reply");
    let r = tokio::time::timeout(
        Duration::from_secs(5),
        c.request(reply, Bytes::from(body.to_string())),
    )
    .await
    .expect("ack reply in time")
    .expect("ack reply");
    assert!(
        r.payload.is_empty(),
        "double ack reply not empty: {:?}",
        r.payload
    );
}

/// Sends a pull request and returns the inbox subscription.
pub async fn pull(c: &Client, stream: &str, consumer: &str, body: Value) -> Subscriber {
    pull_raw(c, stream, consumer, Bytes::from(body.to_string())).await
}

pub async fn pull_raw(
    c: &Client,
    stream: &str,
    consumer: &str,
    body: impl Into<Bytes>,
) -> Subscriber {
    let inbox = c.new_inbox();
    let sub = c.subscribe(inbox.clone()).await.unwrap();
    c.publish_with_reply(
        format!("$JS.API.CONSUMER.MSG.NEXT.{stream}.{consumer}"),
        inbox,
        body.into(),
    )
    .await
    .unwrap();
    c.flush().await.unwrap();
    sub
}

/// Polls `f` until it returns true, for at most `timeout`.
pub async fn eventually<F, Fut>(timeout: Duration, mut f: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if f().await {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Polls consumer info until `pred` holds; returns the last info.
pub async fn info_until(
    c: &Client,
    stream: &str,
    name: &str,
    timeout: Duration,
    pred: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + timeout;
    loop {
        let v = info(c, stream, name).await;
        if pred(&v) || Instant::now() > deadline {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Milliseconds and seconds in the nanoseconds the API uses.
pub const MS: i64 = 1_000_000;
pub const SEC: i64 = 1_000 * MS;

/// Collects exactly `n` messages (status messages included) from `sub`.
pub async fn recv_n(sub: &mut Subscriber, n: usize) -> Vec<Message> {
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        v.push(recv(sub).await);
    }
    v
}

/// The size nats-server charges a pull request's max_bytes for a
/// delivered message: subject + reply + headers + payload.
pub fn pull_size(m: &Message, header_len: usize) -> i64 {
    (m.subject.len() + m.reply.as_ref().map_or(0, |r| r.len()) + header_len + m.payload.len())
        as i64
}
