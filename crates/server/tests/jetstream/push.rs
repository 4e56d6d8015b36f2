//! Push consumers: delivery to deliver_subject only while it has interest,
//! deliver_group, flow control, idle heartbeats, headers_only, replay
//! policies, and inactive_threshold deleting consumers. Expectations are
//! nats-server 2.15.1's.

#[path = "../common/mod.rs"]
mod common;
#[path = "../consumer_util/mod.rs"]
mod consumer_util;

use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer};
use bytes::Bytes;
use consumer_util::*;
use futures::StreamExt;
use serde_json::json;

async fn setup() -> (common::JsServer, async_nats::Client) {
    let s = common::js_server();
    let c = s.client().await;
    stream_s(&c).await;
    (s, c)
}

/// Subscribes on a second connection and makes sure the server has the
/// subscription before returning.
async fn subscriber(
    s: &common::Server,
    subject: &str,
) -> (async_nats::Client, async_nats::Subscriber) {
    let c = s.client().await;
    let sub = c.subscribe(subject.to_string()).await.unwrap();
    common::sync(&c).await;
    (c, sub)
}

#[tokio::test]
async fn delivers_to_the_deliver_subject_with_ack_subjects() {
    let (s, c) = setup().await;
    publish(&c, "s.a", "1").await;
    publish(&c, "s.b", "2").await;
    let (_d, mut sub) = subscriber(&s, "dlv").await;
    let v = create_ok(
        &c,
        "S",
        "p",
        json!({"ack_policy": "explicit", "deliver_subject": "dlv"}),
    )
    .await;
    assert_eq!(v["config"]["deliver_subject"], "dlv");
    let msgs = recv_n(&mut sub, 2).await;
    // The subject is the stored message's own.
    assert_eq!(msgs[0].subject.as_str(), "s.a");
    assert_eq!(msgs[1].subject.as_str(), "s.b");
    assert_eq!(msgs[0].payload, "1");
    let a = ack_info(&msgs[0]);
    assert_eq!(
        (
            a.stream.as_str(),
            a.consumer.as_str(),
            a.dc,
            a.sseq,
            a.dseq,
            a.pending
        ),
        ("S", "p", 1, 1, 1, 1)
    );
    let b = ack_info(&msgs[1]);
    assert_eq!((b.dc, b.sseq, b.dseq, b.pending), (1, 2, 2, 0));
    assert!(
        b.ts >= a.ts && a.ts > 1_600_000_000_000_000_000,
        "{a:?} {b:?}"
    );
    // New messages follow.
    publish(&c, "s.c", "3").await;
    let m = recv(&mut sub).await;
    assert_eq!(ack_info(&m).sseq, 3);
    let i = info(&c, "S", "p").await;
    assert_eq!(i["push_bound"], true);
    assert_eq!(i["num_ack_pending"], 3);
    assert_eq!(i["num_waiting"], 0);
}

#[tokio::test]
async fn delivery_starts_once_the_deliver_subject_has_interest() {
    let (s, c) = setup().await;
    publish_n(&c, "s.a", 3).await;
    let v = create_ok(
        &c,
        "S",
        "p",
        json!({"ack_policy": "explicit", "deliver_subject": "dlv.p"}),
    )
    .await;
    assert!(v.get("push_bound").is_none(), "{v}");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let i = info(&c, "S", "p").await;
    assert!(i.get("push_bound").is_none(), "{i}");
    assert_eq!(i["delivered"]["consumer_seq"], 0);
    assert_eq!(i["num_pending"], 3);
    // A wildcard subscription does not count as interest.
    let (_w, mut wild) = subscriber(&s, "dlv.*").await;
    assert_quiet(&mut wild, Duration::from_millis(300)).await;
    assert!(info(&c, "S", "p").await.get("push_bound").is_none());
    // The exact subject does; delivery starts from the beginning.
    let (_d, mut sub) = subscriber(&s, "dlv.p").await;
    let msgs = recv_n(&mut sub, 3).await;
    let got: Vec<(u64, u64)> = msgs
        .iter()
        .map(|m| (ack_info(m).sseq, ack_info(m).dseq))
        .collect();
    assert_eq!(got, [(1, 1), (2, 2), (3, 3)]);
    let i = info(&c, "S", "p").await;
    assert_eq!(i["push_bound"], true);
    assert_eq!(i["num_pending"], 0);
}

/// The server has no interest poll: the consumer learns of a subscriber
/// leaving and arriving from the subscription itself, so without that
/// notice it would stay bound to nobody, or never deliver again.
#[tokio::test]
async fn delivery_follows_the_subscriber_leaving_and_coming_back() {
    let (s, c) = setup().await;
    create_ok(
        &c,
        "S",
        "p",
        json!({"ack_policy": "none", "deliver_subject": "dlv.p"}),
    )
    .await;
    let (d, mut sub) = subscriber(&s, "dlv.p").await;
    publish(&c, "s.a", "1").await;
    assert_eq!(ack_info(&recv(&mut sub).await).sseq, 1);
    assert_eq!(info(&c, "S", "p").await["push_bound"], true);

    sub.unsubscribe().await.unwrap();
    common::sync(&d).await;
    info_until(&c, "S", "p", Duration::from_secs(5), |i| {
        i.get("push_bound").is_none()
    })
    .await;
    publish(&c, "s.a", "2").await;
    assert_eq!(info(&c, "S", "p").await["num_pending"], 1);

    let (_d, mut again) = subscriber(&s, "dlv.p").await;
    let m = recv(&mut again).await;
    assert_eq!((ack_info(&m).sseq, m.payload.as_ref()), (2, &b"2"[..]));
    assert_eq!(info(&c, "S", "p").await["push_bound"], true);
}

#[tokio::test]
async fn deliver_group_needs_a_queue_subscription_with_that_name() {
    let (s, c) = setup().await;
    publish_n(&c, "s.a", 10).await;
    create_ok(
        &c,
        "S",
        "g",
        json!({"ack_policy": "explicit", "deliver_subject": "dlv.g", "deliver_group": "grp"}),
    )
    .await;
    let o = s.client().await;
    let mut plain = o.subscribe("dlv.g").await.unwrap();
    let mut other = o.queue_subscribe("dlv.g", "other".into()).await.unwrap();
    common::sync(&o).await;
    assert_quiet(&mut plain, Duration::from_millis(300)).await;
    assert_quiet(&mut other, Duration::from_millis(10)).await;
    let i = info(&c, "S", "g").await;
    assert!(i.get("push_bound").is_none(), "{i}");
    assert_eq!(i["config"]["deliver_group"], "grp");
    drop(plain);
    drop(other);
    // Two members of the group share the messages.
    let q = s.client().await;
    let mut m1 = q.queue_subscribe("dlv.g", "grp".into()).await.unwrap();
    let mut m2 = q.queue_subscribe("dlv.g", "grp".into()).await.unwrap();
    common::sync(&q).await;
    let mut seqs = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    while seqs.len() < 10 && Instant::now() < deadline {
        tokio::select! {
            Some(m) = m1.next() => seqs.push(ack_info(&m).sseq),
            Some(m) = m2.next() => seqs.push(ack_info(&m).sseq),
            _ = tokio::time::sleep(Duration::from_millis(100)) => {}
        }
    }
    seqs.sort_unstable();
    assert_eq!(seqs, (1..=10).collect::<Vec<u64>>());
    assert_eq!(info(&c, "S", "g").await["push_bound"], true);
}

#[tokio::test]
async fn flow_control_requests_and_stalls() {
    let (s, c) = setup().await;
    let big = "x".repeat(100_000);
    for _ in 0..40 {
        publish(&c, "s.x", &big).await;
    }
    let (d, mut sub) = subscriber(&s, "dlv.fc").await;
    create_ok(
        &c,
        "S",
        "fc",
        json!({"ack_policy": "none", "deliver_subject": "dlv.fc", "flow_control": true, "idle_heartbeat": 300 * MS}),
    )
    .await;
    // 1MiB delivered asks for flow control; past 2MiB delivery stalls.
    let mut data = 0;
    let mut fc = None;
    let mut fc_after = 0;
    let mut stalled_hb = None;
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline && stalled_hb.is_none() {
        let Some(m) = next(&mut sub, Duration::from_secs(2)).await else {
            break;
        };
        match status(&m) {
            None => data += 1,
            Some(100) if m.description.as_deref() == Some("FlowControl Request") => {
                assert!(fc.is_none(), "one request at a time: {}", describe(&m));
                assert!(m.payload.is_empty());
                fc = Some(m.reply.clone().expect("fc reply").to_string());
                fc_after = data;
            }
            Some(100) => {
                assert_status(&m, 100, "Idle Heartbeat");
                stalled_hb = Some(m);
            }
            _ => panic!("unexpected {}", describe(&m)),
        }
    }
    let fc = fc.expect("a flow control request");
    assert_eq!(fc_after, 11, "FC request after the 11th message");
    assert_eq!(data, 21, "stalled after 21 messages");
    let prefix = "$JS.FC.S.fc.";
    assert!(fc.starts_with(prefix), "{fc}");
    let token = &fc[prefix.len()..];
    assert!(
        token.len() == 4 && token.chars().all(|ch| ch.is_ascii_alphanumeric()),
        "{fc}"
    );
    let hb = stalled_hb.expect("a heartbeat while stalled");
    assert_eq!(
        header(&hb, "Nats-Last-Consumer"),
        Some("21"),
        "{}",
        describe(&hb)
    );
    assert_eq!(
        header(&hb, "Nats-Last-Stream"),
        Some("21"),
        "{}",
        describe(&hb)
    );
    assert_eq!(
        header(&hb, "Nats-Consumer-Stalled"),
        Some(fc.as_str()),
        "{}",
        describe(&hb)
    );
    assert!(hb.reply.is_none());
    // Answering resumes delivery.
    d.publish(fc.clone(), Bytes::new()).await.unwrap();
    d.flush().await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while data < 40 && Instant::now() < deadline {
        let Some(m) = next(&mut sub, Duration::from_secs(2)).await else {
            break;
        };
        if status(&m).is_none() {
            data += 1;
        }
    }
    assert_eq!(data, 40);
    let i = info(&c, "S", "fc").await;
    assert_eq!(i["delivered"]["consumer_seq"], 40);
}

#[tokio::test]
async fn idle_heartbeats_carry_the_last_sequences() {
    let (s, c) = setup().await;
    publish_n(&c, "s.a", 2).await;
    let (_d, mut sub) = subscriber(&s, "dlv.hb").await;
    // Before the deliveries the heartbeat's idle time counts from, so the
    // acks' round trips (slow under load) cannot eat into it.
    let t = Instant::now();
    create_ok(
        &c,
        "S",
        "hb",
        json!({"ack_policy": "explicit", "deliver_subject": "dlv.hb", "idle_heartbeat": 200 * MS}),
    )
    .await;
    let msgs = recv_n(&mut sub, 2).await;
    for m in &msgs {
        ack_raw(&c, m, "+ACK").await;
    }
    let hb = recv(&mut sub).await;
    let el = t.elapsed();
    assert_status(&hb, 100, "Idle Heartbeat");
    assert!(
        el >= Duration::from_millis(180) && el < Duration::from_millis(1000),
        "{el:?}"
    );
    assert_eq!(hb.subject.as_str(), "dlv.hb");
    assert!(hb.reply.is_none());
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
    assert_eq!(header(&hb, "Nats-Consumer-Stalled"), None);
    // They keep coming while idle, about every 200ms.
    let t = Instant::now();
    for _ in 0..3 {
        assert_status(&recv(&mut sub).await, 100, "Idle Heartbeat");
    }
    let el = t.elapsed();
    assert!(
        el >= Duration::from_millis(450) && el < Duration::from_millis(1200),
        "{el:?}"
    );
    // A filtered consumer reports the stream position it scanned to.
    publish(&c, "s.other", "x").await;
    publish(&c, "s.other", "y").await;
    let (_e, mut fsub) = subscriber(&s, "dlv.hf").await;
    create_ok(
        &c,
        "S",
        "hf",
        json!({"ack_policy": "none", "deliver_subject": "dlv.hf", "idle_heartbeat": 200 * MS, "filter_subject": "s.a"}),
    )
    .await;
    assert_eq!(recv_n(&mut fsub, 2).await.len(), 2);
    let hb = recv(&mut fsub).await;
    assert_status(&hb, 100, "Idle Heartbeat");
    assert_eq!(
        header(&hb, "Nats-Last-Consumer"),
        Some("2"),
        "{}",
        describe(&hb)
    );
    assert_eq!(
        header(&hb, "Nats-Last-Stream"),
        Some("4"),
        "{}",
        describe(&hb)
    );
}

#[tokio::test]
async fn headers_only_sends_the_size_instead_of_the_payload() {
    let (s, c) = setup().await;
    publish(&c, "s.a", "hello").await;
    let mut h = async_nats::HeaderMap::new();
    h.insert("Foo", "bar");
    let ack = c
        .request_with_headers("s.b", h, Bytes::from_static(b"withhdr"))
        .await
        .unwrap();
    assert!(!ack.payload.is_empty());
    let (_d, mut sub) = subscriber(&s, "dlv.h").await;
    create_ok(
        &c,
        "S",
        "h",
        json!({"ack_policy": "none", "deliver_subject": "dlv.h", "headers_only": true}),
    )
    .await;
    let msgs = recv_n(&mut sub, 2).await;
    assert!(msgs[0].payload.is_empty());
    assert_eq!(
        header(&msgs[0], "Nats-Msg-Size"),
        Some("5"),
        "{}",
        describe(&msgs[0])
    );
    assert!(msgs[1].payload.is_empty());
    assert_eq!(
        header(&msgs[1], "Foo"),
        Some("bar"),
        "{}",
        describe(&msgs[1])
    );
    assert_eq!(
        header(&msgs[1], "Nats-Msg-Size"),
        Some("7"),
        "{}",
        describe(&msgs[1])
    );
    assert!(status(&msgs[0]).is_none() && status(&msgs[1]).is_none());
    assert_eq!(ack_info(&msgs[1]).sseq, 2);
    // Pull consumers too.
    create_ok(
        &c,
        "S",
        "hp",
        json!({"ack_policy": "explicit", "headers_only": true}),
    )
    .await;
    let mut p = pull(&c, "S", "hp", json!({"batch": 1})).await;
    let m = recv(&mut p).await;
    assert!(m.payload.is_empty());
    assert_eq!(header(&m, "Nats-Msg-Size"), Some("5"));
}

#[tokio::test]
async fn headers_only_exact_header_block() {
    let (s, c) = setup().await;
    let mut h = async_nats::HeaderMap::new();
    h.insert("Foo", "bar");
    c.request_with_headers("s.b", h, Bytes::from_static(b"withhdr"))
        .await
        .unwrap();
    publish(&c, "s.a", "hello").await;
    let mut r = common::Raw::connect(&s.addr());
    r.send(
        b"CONNECT {\"headers\":true,\"verbose\":false,\"protocol\":1}\r\nSUB dlv.x 1\r\nPING\r\n",
    );
    assert!(r
        .read_until("PONG\r\n", Duration::from_secs(5))
        .ends_with("PONG\r\n"));
    create_ok(
        &c,
        "S",
        "h",
        json!({"ack_policy": "none", "deliver_subject": "dlv.x", "headers_only": true}),
    )
    .await;
    let first = "NATS/1.0\r\nFoo: bar\r\nNats-Msg-Size: 7\r\n\r\n";
    let got = r.read_until(first, Duration::from_secs(3));
    assert!(
        got.contains(&format!(" {} {}\r\n{first}", first.len(), first.len())),
        "{got:?}"
    );
    let second = "NATS/1.0\r\nNats-Msg-Size: 5\r\n\r\n";
    let got = r.read_until(second, Duration::from_secs(3));
    assert!(
        got.contains(&format!(" {} {}\r\n{second}", second.len(), second.len())),
        "{got:?}"
    );
    assert!(got.contains("HMSG s.a 1 $JS.ACK.S.h.1.2.2."), "{got:?}");
}

#[tokio::test]
async fn replay_original_keeps_the_spacing_instant_does_not() {
    let (s, c) = setup().await;
    for i in 0..3 {
        publish(&c, "s.a", &i.to_string()).await;
        if i < 2 {
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }
    let (_d, mut orig) = subscriber(&s, "dlv.o").await;
    let (_e, mut inst) = subscriber(&s, "dlv.i").await;
    // Taken before the consumer exists, so no delivery precedes it. A late
    // receipt can shrink the gap the test sees between two messages (the
    // test task was descheduled, not the server early), so the spacing is
    // checked as each message's time since this start: receipt can be
    // late, never early.
    let t = Instant::now();
    create_ok(
        &c,
        "S",
        "o",
        json!({"ack_policy": "none", "deliver_subject": "dlv.o", "replay_policy": "original"}),
    )
    .await;
    create_ok(
        &c,
        "S",
        "i",
        json!({"ack_policy": "none", "deliver_subject": "dlv.i", "replay_policy": "instant"}),
    )
    .await;
    let mut times = Vec::new();
    for _ in 0..3 {
        recv(&mut orig).await;
        times.push(t.elapsed());
    }
    assert!(times[1] >= Duration::from_millis(250), "{times:?}");
    assert!(times[2] >= Duration::from_millis(550), "{times:?}");
    assert!(times[2] < Duration::from_millis(1500), "{times:?}");
    let t = Instant::now();
    recv_n(&mut inst, 3).await;
    assert!(
        t.elapsed() < Duration::from_millis(200),
        "{:?}",
        t.elapsed()
    );
    // Once caught up, new messages go out at once.
    let t = Instant::now();
    publish(&c, "s.a", "new").await;
    let m = recv(&mut orig).await;
    assert_eq!(m.payload, "new");
    assert!(
        t.elapsed() < Duration::from_millis(200),
        "{:?}",
        t.elapsed()
    );
}

#[tokio::test]
async fn inactive_push_ephemeral_is_deleted() {
    let (s, c) = setup().await;
    // Nobody listening: gone after its threshold.
    let v = create_ok(
        &c,
        "S",
        "gone",
        json!({"ack_policy": "none", "deliver_subject": "dlv.gone", "inactive_threshold": 400 * MS}),
    )
    .await;
    assert_eq!(v["config"]["inactive_threshold"], json!(400 * MS));
    let t = Instant::now();
    let deleted = eventually(Duration::from_secs(3), || async {
        info(&c, "S", "gone").await.get("error").is_some()
    })
    .await;
    assert!(deleted, "not deleted");
    assert!(
        t.elapsed() >= Duration::from_millis(300),
        "{:?}",
        t.elapsed()
    );
    assert_err(
        &info(&c, "S", "gone").await,
        404,
        10014,
        "consumer not found",
    );

    // With a subscriber it stays; without one again it goes.
    let (d, sub) = subscriber(&s, "dlv.kept").await;
    create_ok(
        &c,
        "S",
        "kept",
        json!({"ack_policy": "none", "deliver_subject": "dlv.kept", "inactive_threshold": 400 * MS}),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let i = info(&c, "S", "kept").await;
    assert_ok(&i);
    assert_eq!(i["push_bound"], true);
    drop(sub);
    common::sync(&d).await;
    let deleted = eventually(Duration::from_secs(3), || async {
        info(&c, "S", "kept").await.get("error").is_some()
    })
    .await;
    assert!(deleted, "not deleted after losing interest");
}

#[tokio::test]
async fn inactive_threshold_deletes_durables_too() {
    let (_s, c) = setup().await;
    create_ok(
        &c,
        "S",
        "dur",
        json!({"durable_name": "dur", "ack_policy": "none", "deliver_subject": "dlv.dur", "inactive_threshold": 300 * MS}),
    )
    .await;
    // A durable without a threshold stays.
    create_ok(
        &c,
        "S",
        "stay",
        json!({"durable_name": "stay", "ack_policy": "none", "deliver_subject": "dlv.stay"}),
    )
    .await;
    let deleted = eventually(Duration::from_secs(3), || async {
        info(&c, "S", "dur").await.get("error").is_some()
    })
    .await;
    assert!(deleted, "durable with inactive_threshold not deleted");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_ok(&info(&c, "S", "stay").await);
    let names = api(&c, "$JS.API.CONSUMER.NAMES.S", Bytes::new()).await;
    assert_eq!(names["consumers"], json!(["stay"]));
}

#[tokio::test]
async fn inactive_pull_ephemeral_is_deleted() {
    let (_s, c) = setup().await;
    create_ok(
        &c,
        "S",
        "p",
        json!({"ack_policy": "explicit", "inactive_threshold": 300 * MS}),
    )
    .await;
    let t = Instant::now();
    let deleted = eventually(Duration::from_secs(4), || async {
        info(&c, "S", "p").await.get("error").is_some()
    })
    .await;
    assert!(deleted, "pull ephemeral not deleted");
    // A pull consumer gets 100ms (plus up to 900ms of jitter) on top of
    // its threshold.
    let el = t.elapsed();
    assert!(el >= Duration::from_millis(370), "deleted after {el:?}");
}

#[tokio::test]
async fn a_waiting_request_keeps_a_pull_ephemeral_alive() {
    let (_s, c) = setup().await;
    create_ok(
        &c,
        "S",
        "q",
        json!({"ack_policy": "explicit", "inactive_threshold": 300 * MS}),
    )
    .await;
    let mut sub = pull(&c, "S", "q", json!({"batch": 1, "expires": 1500 * MS})).await;
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_ok(&info(&c, "S", "q").await);
    let m = recv(&mut sub).await;
    assert_status(&m, 408, "Request Timeout");
    let deleted = eventually(Duration::from_secs(4), || async {
        info(&c, "S", "q").await.get("error").is_some()
    })
    .await;
    assert!(
        deleted,
        "pull ephemeral not deleted after its request expired"
    );
}

#[tokio::test]
async fn async_nats_push_consumer() {
    let (_s, c) = setup().await;
    publish_n(&c, "s.a", 3).await;
    let js = jetstream::new(c.clone());
    let st = js.get_stream("S").await.unwrap();
    let cons: consumer::PushConsumer = st
        .create_consumer(consumer::push::Config {
            durable_name: Some("push".into()),
            deliver_subject: c.new_inbox(),
            ack_wait: Duration::from_secs(5),
            ..Default::default()
        })
        .await
        .unwrap();
    let mut msgs = cons.messages().await.unwrap();
    for i in 0..3u64 {
        let m = tokio::time::timeout(Duration::from_secs(5), msgs.next())
            .await
            .expect("in time")
            .unwrap()
            .unwrap();
        assert_eq!(m.info().unwrap().stream_sequence, i + 1);
        m.double_ack().await.unwrap();
    }
    publish(&c, "s.a", "more").await;
    let m = tokio::time::timeout(Duration::from_secs(5), msgs.next())
        .await
        .expect("in time")
        .unwrap()
        .unwrap();
    assert_eq!(m.payload, "more");
    m.ack().await.unwrap();
    let i = info(&c, "S", "push").await;
    assert_eq!(i["push_bound"], true);
    assert!(
        eventually(Duration::from_secs(2), || async {
            info(&c, "S", "push").await["num_ack_pending"] == 0
        })
        .await
    );
}

#[tokio::test]
async fn async_nats_ordered_push_consumer() {
    let (_s, c) = setup().await;
    publish(&c, "s.a", "a1").await;
    publish(&c, "s.b", "b1").await;
    publish(&c, "s.a", "a2").await;
    let js = jetstream::new(c.clone());
    let st = js.get_stream("S").await.unwrap();
    let ordered = st
        .create_consumer(consumer::push::OrderedConfig {
            deliver_subject: c.new_inbox(),
            filter_subject: "s.a".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let mut msgs = ordered.messages().await.unwrap();
    let mut got = Vec::new();
    for _ in 0..2 {
        let m = tokio::time::timeout(Duration::from_secs(5), msgs.next())
            .await
            .expect("in time")
            .unwrap()
            .unwrap();
        got.push(m.payload.clone());
    }
    publish(&c, "s.a", "a3").await;
    let m = tokio::time::timeout(Duration::from_secs(5), msgs.next())
        .await
        .expect("in time")
        .unwrap()
        .unwrap();
    got.push(m.payload.clone());
    assert_eq!(got, ["a1", "a2", "a3"]);
    let info = m.info().unwrap();
    assert_eq!(info.consumer_sequence, 3);
    assert_eq!(info.stream_sequence, 4);
    assert_eq!(info.pending, 0);
}

#[tokio::test]
async fn push_ack_none_does_not_track_pending() {
    let (s, c) = setup().await;
    publish_n(&c, "s.a", 3).await;
    let (_d, mut sub) = subscriber(&s, "dlv.n").await;
    create_ok(
        &c,
        "S",
        "n",
        json!({"ack_policy": "none", "deliver_subject": "dlv.n"}),
    )
    .await;
    let msgs = recv_n(&mut sub, 3).await;
    // The ack subject is still attached.
    assert_eq!(ack_info(&msgs[2]).dseq, 3);
    let i = info(&c, "S", "n").await;
    assert_eq!(i["num_ack_pending"], 0);
    assert_eq!(i["ack_floor"]["consumer_seq"], 3);
    assert_eq!(i["ack_floor"]["stream_seq"], 3);
    assert_eq!(i["delivered"]["consumer_seq"], 3);
    assert_quiet(&mut sub, Duration::from_millis(300)).await;
}

#[tokio::test]
async fn max_ack_pending_holds_push_deliveries_back() {
    let (s, c) = setup().await;
    publish_n(&c, "s.a", 5).await;
    let (_d, mut sub) = subscriber(&s, "dlv.m").await;
    create_ok(
        &c,
        "S",
        "m",
        json!({"ack_policy": "explicit", "deliver_subject": "dlv.m", "max_ack_pending": 2}),
    )
    .await;
    let msgs = recv_n(&mut sub, 2).await;
    assert_quiet(&mut sub, Duration::from_millis(300)).await;
    let i = info(&c, "S", "m").await;
    assert_eq!(i["num_ack_pending"], 2);
    assert_eq!(i["num_pending"], 3);
    ack_sync(&c, &msgs[0], "+ACK").await;
    let m = recv(&mut sub).await;
    assert_eq!(ack_info(&m).sseq, 3);
    assert_quiet(&mut sub, Duration::from_millis(200)).await;
}

#[tokio::test]
async fn a_paused_push_consumer_delivers_after_the_pause() {
    let (s, c) = setup().await;
    publish_n(&c, "s.a", 2).await;
    let (_d, mut sub) = subscriber(&s, "dlv.z").await;
    let at = |d: Duration| {
        (time::OffsetDateTime::now_utc() + d)
            .format(&time::format_description::well_known::Rfc3339)
            .unwrap()
    };
    // Paused until a moment from now: delivery starts when it runs out.
    let v = create_ok(
        &c,
        "S",
        "z",
        json!({"ack_policy": "none", "deliver_subject": "dlv.z", "pause_until": at(Duration::from_millis(700))}),
    )
    .await;
    assert_eq!(v["paused"], true);
    assert_quiet(&mut sub, Duration::from_millis(400)).await;
    assert_eq!(recv_n(&mut sub, 2).await.len(), 2);
    // Paused for long, then resumed through the API.
    let (_e, mut sub2) = subscriber(&s, "dlv.y").await;
    create_ok(
        &c,
        "S",
        "y",
        json!({"ack_policy": "none", "deliver_subject": "dlv.y", "pause_until": at(Duration::from_secs(30))}),
    )
    .await;
    assert_quiet(&mut sub2, Duration::from_millis(300)).await;
    let v = api(&c, "$JS.API.CONSUMER.PAUSE.S.y", Bytes::new()).await;
    assert_eq!(v["paused"], false);
    publish(&c, "s.a", "3").await;
    let got: Vec<u64> = recv_n(&mut sub2, 3)
        .await
        .iter()
        .map(|m| ack_info(m).sseq)
        .collect();
    assert_eq!(got, [1, 2, 3]);
}

#[tokio::test]
async fn deliver_subject_in_use_cannot_be_taken_over() {
    let (s, c) = setup().await;
    let (_d, _sub) = subscriber(&s, "dlv.one").await;
    create_ok(
        &c,
        "S",
        "d",
        json!({"durable_name": "d", "ack_policy": "explicit", "deliver_subject": "dlv.one"}),
    )
    .await;
    assert!(
        eventually(Duration::from_secs(2), || async {
            info(&c, "S", "d").await["push_bound"] == true
        })
        .await
    );
    let v = create(
        &c,
        "S",
        "d",
        json!({"durable_name": "d", "ack_policy": "explicit", "deliver_subject": "dlv.two"}),
    )
    .await;
    assert_err(&v, 400, 10013, "consumer name already in use");
    // Without interest on the old subject, it can move.
    create_ok(
        &c,
        "S",
        "e",
        json!({"durable_name": "e", "ack_policy": "explicit", "deliver_subject": "dlv.idle"}),
    )
    .await;
    let v = create_ok(
        &c,
        "S",
        "e",
        json!({"durable_name": "e", "ack_policy": "explicit", "deliver_subject": "dlv.moved"}),
    )
    .await;
    assert_eq!(v["config"]["deliver_subject"], "dlv.moved");
}
