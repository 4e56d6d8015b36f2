//! Fast batch publish (ADR-50, `allow_batched`): the reply-subject
//! protocol, step by step. Each scenario publishes messages whose reply
//! subjects name the batch, and checks every answer on the inbox (flow
//! acks, gap and error reports, the final PubAck), word for word as
//! nats-server 2.15.1 sends them. Runs in every JetStream test mode and
//! against nats-server (`FLOTILLA_TEST_SERVER`).
#[path = "../common/mod.rs"]
mod common;

use std::time::Duration;

use futures::StreamExt;
use serde_json::{json, Value};

/// One publish: subject, the reply's `<id>.<flow>.<gap>.<seq>.<op>`
/// (or a whole reply subject, when it starts with `!`), headers, and the
/// answers expected, in order.
struct Step {
    subject: &'static str,
    reply: &'static str,
    headers: &'static [(&'static str, &'static str)],
    answers: Vec<Value>,
}

fn step(subject: &'static str, reply: &'static str, answers: Vec<Value>) -> Step {
    Step {
        subject,
        reply,
        headers: &[],
        answers,
    }
}

fn flow(seq: u64, msgs: u64) -> Value {
    json!({"type": "ack", "seq": seq, "msgs": msgs})
}

fn gap(last_seq: u64, seq: u64) -> Value {
    json!({"type": "gap", "last_seq": last_seq, "seq": seq})
}

fn done(seq: u64, batch: &str, count: u64) -> Value {
    json!({"stream": "FB", "seq": seq, "batch": batch, "count": count})
}

fn refused(stream: &str, code: u64, err_code: u64, description: &str) -> Value {
    json!({"error": {"code": code, "err_code": err_code, "description": description}, "stream": stream, "seq": 0})
}

/// Runs `steps` against a fresh `FB` stream (`fb.>`, fast batches on) and
/// a `PLAIN` one (`plain.>`, off), checking each step's answers.
async fn run(name: &str, steps: Vec<Step>) {
    let s = common::js_server();
    let c = s.client().await;
    let fb = json!({"name": "FB", "subjects": ["fb.>"], "allow_batched": true});
    let info = common::create_stream(&c, "FB", fb).await;
    assert_eq!(info["config"]["allow_batched"], true, "{info}");
    assert_eq!(info["config"]["metadata"]["_nats.req.level"], "4", "{info}");
    common::create_stream(
        &c,
        "PLAIN",
        json!({"name": "PLAIN", "subjects": ["plain.>"]}),
    )
    .await;
    let mut inbox = c.subscribe("fbi.>").await.unwrap();
    common::sync(&c).await;
    for (i, step) in steps.iter().enumerate() {
        let reply = match step.reply.strip_prefix('!') {
            Some(whole) => whole.to_string(),
            None => format!("fbi.x.{}.$FI", step.reply),
        };
        let mut headers = async_nats::HeaderMap::new();
        for (k, v) in step.headers {
            headers.append(*k, *v);
        }
        c.publish_with_reply_and_headers(step.subject, reply.clone(), headers, "m".into())
            .await
            .unwrap();
        for want in &step.answers {
            let got = tokio::time::timeout(Duration::from_secs(5), inbox.next())
                .await
                .unwrap_or_else(|_| panic!("{name} step {i} ({reply}): no answer, wanted {want}"))
                .unwrap();
            let got: Value = serde_json::from_slice(&got.payload).unwrap();
            assert_eq!(&got, want, "{name} step {i} ({reply})");
        }
    }
    let extra = tokio::time::timeout(Duration::from_millis(300), inbox.next()).await;
    if let Ok(Some(m)) = extra {
        panic!(
            "{name}: unexpected answer {:?}",
            String::from_utf8_lossy(&m.payload)
        );
    }
}

#[tokio::test]
async fn a_batch_is_acked_every_n_and_committed() {
    run(
        "flow 2",
        vec![
            step("fb.a", "b1.2.fail.1.0", vec![flow(0, 2)]),
            step("fb.a", "b1.2.fail.2.1", vec![flow(2, 2)]),
            step("fb.a", "b1.2.fail.3.1", vec![]),
            step("fb.a", "b1.2.fail.4.2", vec![done(4, "b1", 4)]),
        ],
    )
    .await;
    run(
        "end of batch",
        vec![
            step("fb.a", "b2.10.ok.1.0", vec![flow(0, 10)]),
            step("fb.a", "b2.10.ok.2.1", vec![]),
            step("fb.a", "b2.10.ok.3.3", vec![done(2, "b2", 2)]),
            // One message that commits at once gets only its PubAck.
            step("fb.a", "b3.10.ok.1.2", vec![done(3, "b3", 1)]),
            // A ping resends the flow settings.
            step("fb.a", "b4.10.ok.1.0", vec![flow(0, 10)]),
            step("fb.a", "b4.10.ok.1.4", vec![flow(0, 10)]),
        ],
    )
    .await;
}

#[tokio::test]
async fn gaps_end_a_failing_batch_and_are_reported_in_an_ok_one() {
    run(
        "gaps",
        vec![
            step("fb.a", "f.10.fail.1.0", vec![flow(0, 10)]),
            step("fb.a", "f.10.fail.3.1", vec![gap(2, 3), done(1, "f", 1)]),
            step("fb.a", "o.10.ok.1.0", vec![flow(0, 10)]),
            step("fb.a", "o.10.ok.4.1", vec![gap(2, 4)]),
            step("fb.a", "o.10.ok.5.2", vec![done(4, "o", 5)]),
        ],
    )
    .await;
}

#[tokio::test]
async fn refused_messages_and_bad_replies() {
    let wrong_last = Step {
        subject: "fb.a",
        reply: "e.10.fail.1.0",
        headers: &[("Nats-Expected-Last-Sequence", "99")],
        answers: vec![
            flow(0, 10),
            refused("FB", 400, 10071, "wrong last sequence: 0"),
        ],
    };
    let wrong_later = Step {
        subject: "fb.a",
        reply: "k.10.ok.2.1",
        headers: &[("Nats-Expected-Last-Sequence", "99")],
        answers: vec![
            json!({"type": "err", "seq": 2, "error": {"code": 400, "err_code": 10071, "description": "wrong last sequence: 1"}}),
        ],
    };
    run(
        "refusals",
        vec![
            wrong_last,
            step("fb.a", "k.10.ok.1.0", vec![flow(0, 10)]),
            wrong_later,
            step("fb.a", "k.10.ok.3.2", vec![done(2, "k", 3)]),
            step(
                "fb.a",
                "u.10.ok.2.1",
                vec![refused("FB", 400, 10208, "batch publish ID unknown")],
            ),
            step(
                "fb.a",
                "!fbi.x.u.10.ok.1.9.$FI",
                vec![refused(
                    "FB",
                    400,
                    10206,
                    "batch publish pattern is invalid",
                )],
            ),
            step(
                "fb.a",
                "0123456789012345678901234567890123456789012345678901234567890123456789.10.ok.1.0",
                vec![refused("FB", 400, 10207, "batch publish ID is invalid")],
            ),
            step(
                "plain.a",
                "p.10.ok.1.0",
                vec![refused("PLAIN", 400, 10205, "batch publish is disabled")],
            ),
        ],
    )
    .await;
}

#[tokio::test]
async fn fast_batches_are_switched_on_and_off_by_updates() {
    let s = common::js_server();
    let c = s.client().await;
    let mirror = json!({"name": "M", "mirror": {"name": "X"}, "allow_batched": true});
    let r = common::api(&c, "$JS.API.STREAM.CREATE.M", &mirror.to_string()).await;
    assert_eq!(
        common::api_err(&r),
        (
            400,
            10209,
            "stream mirrors can not also use batch publishing".to_string()
        ),
        "{r}"
    );
    common::create_stream(&c, "U", json!({"name": "U", "subjects": ["u.>"]})).await;
    let on = json!({"name": "U", "subjects": ["u.>"], "allow_batched": true});
    let r = common::api(&c, "$JS.API.STREAM.UPDATE.U", &on.to_string()).await;
    assert_eq!(r["config"]["allow_batched"], true, "{r}");
    assert_eq!(r["config"]["metadata"]["_nats.req.level"], "4", "{r}");
    let off = json!({"name": "U", "subjects": ["u.>"]});
    let r = common::api(&c, "$JS.API.STREAM.UPDATE.U", &off.to_string()).await;
    assert_eq!(r["config"]["allow_batched"], Value::Null, "{r}");
    let mut inbox = c.subscribe("fbi.>").await.unwrap();
    common::sync(&c).await;
    c.publish_with_reply("u.a", "fbi.x.b.10.ok.1.0.$FI", "m".into())
        .await
        .unwrap();
    let got = tokio::time::timeout(Duration::from_secs(5), inbox.next())
        .await
        .unwrap()
        .unwrap();
    let got: Value = serde_json::from_slice(&got.payload).unwrap();
    assert_eq!(got, refused("U", 400, 10205, "batch publish is disabled"));
}

async fn next_answer(inbox: &mut async_nats::Subscriber) -> Value {
    let got = tokio::time::timeout(Duration::from_secs(5), inbox.next())
        .await
        .expect("an answer within 5s")
        .unwrap();
    serde_json::from_slice(&got.payload).unwrap()
}

/// A batch's progress is stream state: in a cluster, the next leader
/// carries a batch on (gaps allowed) and commits it where it ends.
#[tokio::test]
async fn a_batch_carries_on_after_a_leader_change() {
    if common::replicas() < 3 {
        return;
    }
    let s = common::js_server();
    let c = s.client().await;
    let fb = json!({"name": "FB", "subjects": ["fb.>"], "allow_batched": true});
    common::create_stream(&c, "FB", fb).await;
    let mut inbox = c.subscribe("fbi.>").await.unwrap();
    common::sync(&c).await;
    c.publish_with_reply("fb.a", "fbi.x.lc.10.ok.1.0.$FI", "m1".into())
        .await
        .unwrap();
    assert_eq!(next_answer(&mut inbox).await, flow(0, 10));
    let before = common::api(&c, "$JS.API.STREAM.INFO.FB", "").await;
    let old = before["cluster"]["leader"].clone();
    let r = common::api(&c, "$JS.API.STREAM.LEADER.STEPDOWN.FB", "").await;
    assert_eq!(r["success"], true, "{r}");
    // Until the new leader serves, a publish may find nobody: wait for it.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let info = common::api(&c, "$JS.API.STREAM.INFO.FB", "").await;
        let leader = &info["cluster"]["leader"];
        if !leader.is_null() && *leader != old {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no new leader: {info}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    c.publish_with_reply("fb.a", "fbi.x.lc.10.ok.2.2.$FI", "m2".into())
        .await
        .unwrap();
    assert_eq!(next_answer(&mut inbox).await, done(2, "lc", 2));
}
