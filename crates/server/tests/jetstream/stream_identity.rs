//! Stream identity (API level 5, `Nats-Stream-Identity`): a `direct`
//! consumer's create (a source's) is answered with the stream's identity,
//! refused when it names another (the stream was deleted and made again),
//! and a reset asked for it says it too. Runs in every JetStream test mode
//! and against nats-server (`FLOTILLA_TEST_SERVER`).
#[path = "../common/mod.rs"]
mod common;

use serde_json::{json, Value};

const IDENTITY: &str = "Nats-Stream-Identity";
const WAIT: std::time::Duration = std::time::Duration::from_secs(20);

async fn create_direct(c: &async_nats::Client, identity: Option<&str>) -> (Value, Option<String>) {
    let body = json!({"stream_name": "S", "config": {
        "name": "D", "direct": true, "deliver_subject": "d.inbox", "ack_policy": "none",
    }});
    let headers: Vec<(&str, &str)> = identity.iter().map(|id| (IDENTITY, *id)).collect();
    let m = common::request_with_headers(
        c,
        "$JS.API.CONSUMER.CREATE.S.D",
        &headers,
        body.to_string().as_bytes(),
    )
    .await;
    let answered = m
        .headers
        .as_ref()
        .and_then(|h| h.get(IDENTITY))
        .map(|v| v.to_string());
    (serde_json::from_slice(&m.payload).unwrap(), answered)
}

#[tokio::test]
async fn a_stream_made_again_is_told_apart() {
    let s = common::js_server();
    let c = s.client().await;
    common::create_stream(&c, "S", json!({"name": "S", "subjects": ["s.>"]})).await;
    let (r, identity) = create_direct(&c, None).await;
    assert_eq!(r["config"]["direct"], true, "{r}");
    let identity = identity.expect("a direct consumer's create names the stream");
    assert_eq!(identity.len(), 8, "{identity}");
    // Named right: made (again, the same config); named wrong: refused.
    let (r, again) = create_direct(&c, Some(&identity)).await;
    assert!(r.get("error").is_none(), "{r}");
    assert_eq!(again.as_deref(), Some(identity.as_str()));
    let (r, _) = create_direct(&c, Some("nothere")).await;
    let want = format!("consumer's stream identity does not match: {identity}");
    assert_eq!(common::api_err(&r), (400, 10225, want), "{r}");
    // A reset that asks is told the identity.
    let m = common::request_with_headers(&c, "$JS.API.CONSUMER.RESET.S.D", &[(IDENTITY, "")], b"")
        .await;
    let told = m
        .headers
        .as_ref()
        .and_then(|h| h.get(IDENTITY))
        .map(|v| v.to_string());
    assert_eq!(told.as_deref(), Some(identity.as_str()));
    // The stream made again is another stream.
    let r = common::api(&c, "$JS.API.STREAM.DELETE.S", "").await;
    assert_eq!(r["success"], true, "{r}");
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    common::create_stream(&c, "S", json!({"name": "S", "subjects": ["s.>"]})).await;
    let (r, _) = create_direct(&c, Some(&identity)).await;
    let (code, err_code, _) = common::api_err(&r);
    assert_eq!((code, err_code), (400, 10225), "{r}");
}

/// A source whose origin is deleted and made again copies the new
/// origin's messages from its start, not from the old position.
#[tokio::test]
async fn a_source_starts_over_when_its_origin_is_made_again() {
    let s = common::js_server();
    let c = s.client().await;
    let origin = json!({"name": "O", "subjects": ["o.>"]});
    common::create_stream(&c, "O", origin.clone()).await;
    for i in 0..5 {
        common::js_publish_text(&c, "o.a", &[], format!("old{i}").as_bytes()).await;
    }
    common::create_stream(
        &c,
        "AGG",
        json!({"name": "AGG", "sources": [{"name": "O"}]}),
    )
    .await;
    common::wait_messages(&c, "AGG", 5, WAIT).await;
    let r = common::api(&c, "$JS.API.STREAM.DELETE.O", "").await;
    assert_eq!(r["success"], true, "{r}");
    common::create_stream(&c, "O", origin).await;
    for i in 0..3 {
        common::js_publish_text(&c, "o.a", &[], format!("new{i}").as_bytes()).await;
    }
    common::wait_messages(&c, "AGG", 8, WAIT).await;
}
