//! Acknowledgements and what follows from them: +ACK, -NAK (with and
//! without delay), +WPI, +TERM, +NXT, double-ack replies; ack policies;
//! ack_wait redelivery, backoff and max_deliver; deliver policies and
//! filters; interest and work-queue retention. Expectations are
//! nats-server 2.15.1's.

#[path = "../common/mod.rs"]
mod common;
#[path = "../consumer_util/mod.rs"]
mod consumer_util;

use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer, AckKind};
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

/// Pulls up to `n` messages: no_wait, with a short expiry so a message
/// published just before is not missed while the consumer catches up.
/// Returns the data messages.
async fn fetch(
    c: &async_nats::Client,
    stream: &str,
    consumer: &str,
    n: usize,
) -> Vec<async_nats::Message> {
    let body = json!({"batch": n, "no_wait": true, "expires": 300 * MS});
    fetch_with(c, stream, consumer, n, body).await
}

/// Pulls up to `n` messages with a plain no_wait: only what is there now.
async fn fetch_now(
    c: &async_nats::Client,
    stream: &str,
    consumer: &str,
    n: usize,
) -> Vec<async_nats::Message> {
    fetch_with(c, stream, consumer, n, json!({"batch": n, "no_wait": true})).await
}

async fn fetch_with(
    c: &async_nats::Client,
    stream: &str,
    consumer: &str,
    n: usize,
    body: Value,
) -> Vec<async_nats::Message> {
    let mut sub = pull(c, stream, consumer, body).await;
    let mut out = Vec::new();
    while out.len() < n {
        let m = recv(&mut sub).await;
        match status(&m) {
            None => out.push(m),
            Some(404) | Some(408) => break,
            _ => panic!("unexpected {}", describe(&m)),
        }
    }
    out
}

fn seqs(msgs: &[async_nats::Message]) -> Vec<u64> {
    msgs.iter().map(|m| ack_info(m).sseq).collect()
}

async fn stream_msgs(c: &async_nats::Client, stream: &str) -> u64 {
    stream_info(c, stream).await["state"]["messages"]
        .as_u64()
        .unwrap()
}

/// Waits until the stream holds `n` messages.
async fn wait_msgs(c: &async_nats::Client, stream: &str, n: u64) -> bool {
    eventually(Duration::from_secs(2), || async {
        stream_msgs(c, stream).await == n
    })
    .await
}

/// Sends `body` to an ack subject with a reply inbox; whether an (empty)
/// reply came within `wait`.
async fn ack_replied(
    c: &async_nats::Client,
    ack_subject: &str,
    body: &str,
    wait: Duration,
) -> bool {
    let inbox = c.new_inbox();
    let mut sub = c.subscribe(inbox.clone()).await.unwrap();
    c.publish_with_reply(
        ack_subject.to_string(),
        inbox,
        Bytes::from(body.to_string()),
    )
    .await
    .unwrap();
    c.flush().await.unwrap();
    match next(&mut sub, wait).await {
        Some(m) => {
            assert!(
                m.payload.is_empty() && m.headers.is_none(),
                "{}",
                describe(&m)
            );
            true
        }
        None => false,
    }
}

#[tokio::test]
async fn ack_bodies_that_ack() {
    let (_s, c) = setup().await;
    publish_n(&c, "s.a", 4).await;
    create_ok(&c, "S", "c", json!({"ack_policy": "explicit"})).await;
    let msgs = fetch(&c, "S", "c", 4).await;
    assert_eq!(seqs(&msgs), [1, 2, 3, 4]);
    ack_sync(&c, &msgs[0], "+ACK").await;
    ack_sync(&c, &msgs[1], "").await;
    ack_sync(&c, &msgs[2], "+OK").await;
    let i = info(&c, "S", "c").await;
    assert_eq!(i["num_ack_pending"], 1);
    assert_eq!(i["ack_floor"]["consumer_seq"], 3);
    assert_eq!(i["ack_floor"]["stream_seq"], 3);
    // Through async-nats.
    let js = jetstream::new(c.clone());
    let last = jetstream::Message {
        message: msgs[3].clone(),
        context: js,
    };
    last.double_ack().await.unwrap();
    let i = info(&c, "S", "c").await;
    assert_eq!(i["num_ack_pending"], 0);
    assert_eq!(i["ack_floor"]["consumer_seq"], 4);
    assert_eq!(i["ack_floor"]["stream_seq"], 4);
}

#[tokio::test]
async fn double_ack_replies() {
    let (_s, c) = setup().await;
    publish_n(&c, "s.a", 6).await;
    create_ok(&c, "S", "c", json!({"ack_policy": "explicit"})).await;
    let msgs = fetch(&c, "S", "c", 3).await;
    let w = Duration::from_millis(500);
    let subj = |i: usize| msgs[i].reply.clone().unwrap().to_string();
    assert!(ack_replied(&c, &subj(0), "+ACK", w).await, "ack");
    assert!(ack_replied(&c, &subj(0), "+ACK", w).await, "ack again");
    assert!(ack_replied(&c, &subj(1), "foo", w).await, "unknown body");
    assert!(ack_replied(&c, &subj(1), "+WPI", w).await, "progress");
    assert!(ack_replied(&c, &subj(1), "-NAK", w).await, "nak");
    assert!(ack_replied(&c, &subj(2), "+TERM because", w).await, "term");
    // A message not delivered yet (stream seq 5): no reply.
    let a = ack_info(&msgs[0]);
    let future = format!("$JS.ACK.S.c.1.5.9.{}.0", a.ts);
    assert!(
        !ack_replied(&c, &future, "+ACK", Duration::from_millis(300)).await,
        "ack ahead"
    );
    let i = info(&c, "S", "c").await;
    assert_eq!(i["num_ack_pending"], 1, "{i}");
    assert_eq!(i["num_pending"], 3, "{i}");
    // async-nats double_ack_with works for each kind.
    let js = jetstream::new(c.clone());
    let cons: consumer::PullConsumer = js
        .get_stream("S")
        .await
        .unwrap()
        .get_consumer("c")
        .await
        .unwrap();
    let mut b = cons.fetch().max_messages(3).messages().await.unwrap();
    let m1 = b.next().await.unwrap().unwrap();
    assert_eq!(m1.info().unwrap().stream_sequence, 2, "the NAKed one first");
    m1.double_ack_with(AckKind::Progress).await.unwrap();
    m1.double_ack_with(AckKind::Term).await.unwrap();
    let m2 = b.next().await.unwrap().unwrap();
    m2.double_ack_with(AckKind::Nak(None)).await.unwrap();
}

#[tokio::test]
async fn nak_redelivers_at_once_with_a_new_consumer_sequence() {
    let (_s, c) = setup().await;
    publish_n(&c, "s.a", 3).await;
    create_ok(&c, "S", "c", json!({"ack_policy": "explicit"})).await;
    let msgs = fetch(&c, "S", "c", 2).await;
    ack_sync(&c, &msgs[0], "-NAK").await;
    // The NAKed message comes before new ones.
    let again = fetch(&c, "S", "c", 2).await;
    let got: Vec<(u64, u64, u64, u64)> = again
        .iter()
        .map(|m| {
            let a = ack_info(m);
            (a.dc, a.sseq, a.dseq, a.pending)
        })
        .collect();
    assert_eq!(got, [(2, 1, 3, 1), (1, 3, 4, 0)]);
    let i = info(&c, "S", "c").await;
    assert_eq!(i["num_redelivered"], 1);
    assert_eq!(i["num_ack_pending"], 3);
    assert_eq!(i["delivered"]["consumer_seq"], 4);
    assert_eq!(i["delivered"]["stream_seq"], 3);
    // Acking the redelivery (new dseq) clears it.
    ack_sync(&c, &again[0], "+ACK").await;
    let i = info(&c, "S", "c").await;
    assert_eq!(i["num_redelivered"], 0);
    assert_eq!(i["ack_floor"]["consumer_seq"], 1);
    assert_eq!(i["ack_floor"]["stream_seq"], 1);
    // A NAK of something not pending does nothing.
    ack_sync(&c, &again[0], "-NAK").await;
    assert!(fetch(&c, "S", "c", 1).await.is_empty());
}

#[tokio::test]
async fn nak_with_a_delay() {
    let (s, c) = setup().await;
    publish_n(&c, "s.a", 2).await;
    let d = s.client().await;
    let mut sub = d.subscribe("dlv").await.unwrap();
    common::sync(&d).await;
    create_ok(
        &c,
        "S",
        "p",
        json!({"ack_policy": "explicit", "deliver_subject": "dlv", "ack_wait": 10 * SEC}),
    )
    .await;
    let msgs = recv_n(&mut sub, 2).await;
    let js = jetstream::new(c.clone());
    let first = jetstream::Message {
        message: msgs[0].clone(),
        context: js,
    };
    // async-nats sends `-NAK {"delay":<ns>}`.
    let t = Instant::now();
    first
        .ack_with(AckKind::Nak(Some(Duration::from_millis(500))))
        .await
        .unwrap();
    // The Go duration form.
    ack_raw(&c, &msgs[1], "-NAK 250ms").await;
    let m = recv(&mut sub).await;
    let el = t.elapsed();
    assert_eq!(ack_info(&m).sseq, 2);
    assert_eq!(ack_info(&m).dc, 2);
    assert!(
        el >= Duration::from_millis(200) && el < Duration::from_millis(450),
        "{el:?}"
    );
    let m = recv(&mut sub).await;
    let el = t.elapsed();
    assert_eq!(ack_info(&m).sseq, 1);
    assert_eq!(ack_info(&m).dc, 2);
    assert!(
        el >= Duration::from_millis(450) && el < Duration::from_millis(900),
        "{el:?}"
    );
    // An unparsable delay is a plain NAK.
    let t = Instant::now();
    ack_raw(&c, &m, "-NAK bogus").await;
    let m = recv(&mut sub).await;
    assert_eq!(ack_info(&m).sseq, 1);
    assert_eq!(ack_info(&m).dc, 3);
    assert!(
        t.elapsed() < Duration::from_millis(200),
        "{:?}",
        t.elapsed()
    );
}

#[tokio::test]
async fn progress_restarts_the_ack_wait() {
    let (s, c) = setup().await;
    publish(&c, "s.a", "x").await;
    let d = s.client().await;
    let mut sub = d.subscribe("dlv").await.unwrap();
    common::sync(&d).await;
    create_ok(
        &c,
        "S",
        "p",
        json!({"ack_policy": "explicit", "deliver_subject": "dlv", "ack_wait": 600 * MS}),
    )
    .await;
    let m = recv(&mut sub).await;
    let t = Instant::now();
    tokio::time::sleep(Duration::from_millis(400)).await;
    ack_sync(&c, &m, "+WPI").await;
    // No redelivery at the first deadline (600ms); one at about 1000ms.
    let again = recv(&mut sub).await;
    let el = t.elapsed();
    assert!(
        el >= Duration::from_millis(900) && el < Duration::from_millis(1500),
        "{el:?}"
    );
    let a = ack_info(&again);
    assert_eq!((a.dc, a.sseq, a.dseq), (2, 1, 2));
    ack_sync(&c, &again, "+ACK").await;
    assert_quiet(&mut sub, Duration::from_millis(800)).await;
}

#[tokio::test]
async fn term_stops_redelivery() {
    let (s, c) = setup().await;
    publish_n(&c, "s.a", 2).await;
    let d = s.client().await;
    let mut sub = d.subscribe("dlv").await.unwrap();
    common::sync(&d).await;
    create_ok(
        &c,
        "S",
        "p",
        json!({"ack_policy": "explicit", "deliver_subject": "dlv", "ack_wait": 300 * MS}),
    )
    .await;
    let msgs = recv_n(&mut sub, 2).await;
    ack_sync(&c, &msgs[0], "+TERM").await;
    ack_sync(&c, &msgs[1], "+TERM no good").await;
    assert_quiet(&mut sub, Duration::from_millis(700)).await;
    let i = info(&c, "S", "p").await;
    assert_eq!(i["num_ack_pending"], 0);
    assert_eq!(i["num_redelivered"], 0);
    assert_eq!(i["ack_floor"]["consumer_seq"], 2);
    assert_eq!(i["ack_floor"]["stream_seq"], 2);
}

#[tokio::test]
async fn next_acks_and_pulls_to_the_ack_reply() {
    let (_s, c) = setup().await;
    publish_n(&c, "s.a", 6).await;
    create_ok(&c, "S", "c", json!({"ack_policy": "explicit"})).await;
    let msgs = fetch(&c, "S", "c", 1).await;
    let inbox = c.new_inbox();
    let mut sub = c.subscribe(inbox.clone()).await.unwrap();
    // Plain +NXT: one more message, no empty ack reply.
    c.publish_with_reply(
        msgs[0].reply.clone().unwrap(),
        inbox.clone(),
        Bytes::from_static(b"+NXT"),
    )
    .await
    .unwrap();
    let m = recv(&mut sub).await;
    assert!(status(&m).is_none(), "{}", describe(&m));
    assert_eq!(ack_info(&m).sseq, 2);
    assert_quiet(&mut sub, Duration::from_millis(200)).await;
    // With a request body: that many.
    c.publish_with_reply(
        m.reply.clone().unwrap(),
        inbox.clone(),
        Bytes::from_static(b"+NXT {\"batch\":2}"),
    )
    .await
    .unwrap();
    let two = recv_n(&mut sub, 2).await;
    assert_eq!(seqs(&two), [3, 4]);
    let i = info(&c, "S", "c").await;
    assert_eq!(i["num_ack_pending"], 2);
    assert_eq!(i["ack_floor"]["stream_seq"], 2);
    // A push consumer cannot be pulled.
    create_ok(
        &c,
        "S",
        "p",
        json!({"ack_policy": "explicit", "deliver_subject": "dp"}),
    )
    .await;
    let mut dp = c.subscribe("dp").await.unwrap();
    let pm = recv(&mut dp).await;
    c.publish_with_reply(
        pm.reply.clone().unwrap(),
        inbox.clone(),
        Bytes::from_static(b"+NXT"),
    )
    .await
    .unwrap();
    let m = recv(&mut sub).await;
    assert_status(&m, 409, "Consumer is push based");
}

#[tokio::test]
async fn ack_policy_all_acks_everything_below() {
    let (_s, c) = setup().await;
    publish_n(&c, "s.a", 5).await;
    let v = create_ok(&c, "S", "c", json!({"ack_policy": "all"})).await;
    assert_eq!(v["config"]["ack_wait"], json!(30 * SEC));
    let msgs = fetch(&c, "S", "c", 5).await;
    ack_sync(&c, &msgs[2], "+ACK").await;
    let i = info(&c, "S", "c").await;
    assert_eq!(i["num_ack_pending"], 2);
    assert_eq!(i["ack_floor"]["consumer_seq"], 3);
    assert_eq!(i["ack_floor"]["stream_seq"], 3);
    // Below the floor: nothing changes.
    ack_sync(&c, &msgs[0], "+ACK").await;
    let i = info(&c, "S", "c").await;
    assert_eq!(i["num_ack_pending"], 2);
    assert_eq!(i["ack_floor"]["stream_seq"], 3);
    ack_sync(&c, &msgs[4], "+ACK").await;
    let i = info(&c, "S", "c").await;
    assert_eq!(i["num_ack_pending"], 0);
    assert_eq!(i["ack_floor"]["consumer_seq"], 5);
    assert_eq!(i["ack_floor"]["stream_seq"], 5);
}

#[tokio::test]
async fn ack_policy_none_tracks_nothing_and_takes_no_acks() {
    let (_s, c) = setup().await;
    publish_n(&c, "s.a", 3).await;
    let v = create_ok(
        &c,
        "S",
        "c",
        json!({"ack_policy": "none", "ack_wait": 200 * MS}),
    )
    .await;
    assert_eq!(v["config"]["ack_wait"], json!(200 * MS));
    let msgs = fetch(&c, "S", "c", 2).await;
    assert_eq!(seqs(&msgs), [1, 2]);
    let i = info(&c, "S", "c").await;
    assert_eq!(i["num_ack_pending"], 0);
    assert_eq!(i["ack_floor"]["consumer_seq"], 2);
    assert_eq!(i["ack_floor"]["stream_seq"], 2);
    // Nobody listens for its acks.
    let e = c
        .request(msgs[0].reply.clone().unwrap(), Bytes::from_static(b"+ACK"))
        .await
        .expect_err("no responders");
    assert_eq!(e.kind(), async_nats::RequestErrorKind::NoResponders);
    // No redelivery, ever.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let more = fetch(&c, "S", "c", 3).await;
    assert_eq!(seqs(&more), [3]);
    assert_eq!(info(&c, "S", "c").await["num_redelivered"], 0);
}

#[tokio::test]
async fn ack_wait_expiry_redelivers() {
    let (_s, c) = setup().await;
    publish_n(&c, "s.a", 2).await;
    create_ok(
        &c,
        "S",
        "c",
        json!({"ack_policy": "explicit", "ack_wait": 300 * MS}),
    )
    .await;
    let msgs = fetch(&c, "S", "c", 2).await;
    ack_sync(&c, &msgs[1], "+ACK").await;
    // Not before the wait is over.
    assert!(fetch_now(&c, "S", "c", 1).await.is_empty());
    tokio::time::sleep(Duration::from_millis(400)).await;
    let again = fetch(&c, "S", "c", 2).await;
    assert_eq!(again.len(), 1);
    let a = ack_info(&again[0]);
    assert_eq!((a.dc, a.sseq, a.dseq, a.pending), (2, 1, 3, 0));
    let i = info(&c, "S", "c").await;
    assert_eq!(i["num_redelivered"], 1);
    assert_eq!(i["num_ack_pending"], 1);
    assert_eq!(i["delivered"]["consumer_seq"], 3);
    ack_sync(&c, &again[0], "+ACK").await;
    let i = info(&c, "S", "c").await;
    assert_eq!(i["num_ack_pending"], 0);
    assert_eq!(i["ack_floor"]["consumer_seq"], 3);
    assert_eq!(i["ack_floor"]["stream_seq"], 2);
}

#[tokio::test]
async fn push_redelivery_follows_the_backoff_and_max_deliver() {
    let (s, c) = setup().await;
    publish(&c, "s.a", "x").await;
    let d = s.client().await;
    let mut sub = d.subscribe("dlv").await.unwrap();
    common::sync(&d).await;
    // Before the consumer exists, so every delivery is after it; times
    // are checked from here, not as gaps between receipts, which a late
    // receipt shrinks.
    let t = Instant::now();
    let v = create_ok(
        &c,
        "S",
        "p",
        json!({"ack_policy": "explicit", "deliver_subject": "dlv", "backoff": [200 * MS, 500 * MS], "max_deliver": 3}),
    )
    .await;
    assert_eq!(v["config"]["ack_wait"], json!(200 * MS));
    let mut times = Vec::new();
    let mut dcs = Vec::new();
    while let Some(m) = next(&mut sub, Duration::from_millis(1200)).await {
        times.push(t.elapsed());
        dcs.push(ack_info(&m).dc);
    }
    assert_eq!(dcs, [1, 2, 3], "{times:?}");
    assert!(
        times[1] >= Duration::from_millis(180) && times[1] < Duration::from_millis(450),
        "{times:?}"
    );
    assert!(
        times[2] >= Duration::from_millis(650) && times[2] < Duration::from_millis(1200),
        "{times:?}"
    );
    let i = info(&c, "S", "p").await;
    assert_eq!(i["num_ack_pending"], 0, "{i}");
    assert_eq!(i["num_redelivered"], 1, "{i}");
    assert_eq!(i["delivered"]["consumer_seq"], 3);
    // Dropping it does not count as an ack: the floor stays.
    assert_eq!(
        i["ack_floor"],
        json!({"consumer_seq": 0, "stream_seq": 0}),
        "{i}"
    );
}

#[tokio::test]
async fn pull_max_deliver_drops_the_message_on_the_next_pull() {
    let (_s, c) = setup().await;
    publish_n(&c, "s.a", 2).await;
    create_ok(
        &c,
        "S",
        "c",
        json!({"ack_policy": "explicit", "ack_wait": 200 * MS, "max_deliver": 2}),
    )
    .await;
    let first = fetch(&c, "S", "c", 1).await;
    assert_eq!(ack_info(&first[0]).dc, 1);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let second = fetch(&c, "S", "c", 1).await;
    assert_eq!((ack_info(&second[0]).sseq, ack_info(&second[0]).dc), (1, 2));
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Still counted as pending until a pull drops it.
    let i = info(&c, "S", "c").await;
    assert_eq!(i["num_ack_pending"], 1, "{i}");
    let next_ones = fetch(&c, "S", "c", 1).await;
    let a = ack_info(&next_ones[0]);
    assert_eq!((a.sseq, a.dc, a.dseq), (2, 1, 3));
    let i = info(&c, "S", "c").await;
    assert_eq!(i["num_ack_pending"], 1, "{i}");
    assert_eq!(i["num_redelivered"], 1, "{i}");
    assert_eq!(
        i["ack_floor"],
        json!({"consumer_seq": 0, "stream_seq": 0}),
        "{i}"
    );
}

#[tokio::test]
async fn deliver_policies() {
    let (_s, c) = setup().await;
    for subj in ["s.a", "s.b", "s.a", "s.c", "s.b"] {
        publish(&c, subj, subj).await;
    }
    let start = |p: &str, extra: Value| {
        let mut cfg = json!({"ack_policy": "none", "deliver_policy": p});
        for (k, v) in extra.as_object().unwrap() {
            cfg[k] = v.clone();
        }
        cfg
    };
    let cases: Vec<(&str, Value, u64, Vec<u64>)> = vec![
        ("all", json!({}), 5, vec![1, 2, 3, 4, 5]),
        ("last", json!({}), 1, vec![5]),
        ("last", json!({"filter_subject": "s.a"}), 1, vec![3]),
        ("new", json!({}), 0, vec![]),
        (
            "by_start_sequence",
            json!({"opt_start_seq": 3}),
            3,
            vec![3, 4, 5],
        ),
        (
            "by_start_sequence",
            json!({"opt_start_seq": 2, "filter_subject": "s.b"}),
            2,
            vec![2, 5],
        ),
        (
            "last_per_subject",
            json!({"filter_subject": "s.>"}),
            3,
            vec![3, 4, 5],
        ),
        (
            "last_per_subject",
            json!({"filter_subjects": ["s.a", "s.b"]}),
            2,
            vec![3, 5],
        ),
    ];
    for (i, (policy, extra, pending, want)) in cases.into_iter().enumerate() {
        let name = format!("c{i}");
        let v = create_ok(&c, "S", &name, start(policy, extra.clone())).await;
        assert_eq!(v["num_pending"], pending, "{policy} {extra}: {v}");
        let got = seqs(&fetch(&c, "S", &name, 10).await);
        assert_eq!(got, want, "{policy} {extra}");
    }
    // New messages follow in every case.
    publish(&c, "s.a", "six").await;
    for i in 0..8 {
        let got = seqs(&fetch(&c, "S", &format!("c{i}"), 10).await);
        let want: Vec<u64> = if i == 5 { vec![] } else { vec![6] };
        assert_eq!(got, want, "c{i}");
    }
}

#[tokio::test]
async fn deliver_by_start_sequence_past_the_end_waits_for_it() {
    let (_s, c) = setup().await;
    publish_n(&c, "s.a", 3).await;
    let v = create_ok(
        &c,
        "S",
        "c",
        json!({"ack_policy": "explicit", "deliver_policy": "by_start_sequence", "opt_start_seq": 5}),
    )
    .await;
    assert_eq!(v["num_pending"], 0);
    assert_eq!(v["delivered"]["stream_seq"], 4);
    publish(&c, "s.a", "4").await;
    assert!(fetch(&c, "S", "c", 1).await.is_empty());
    publish(&c, "s.a", "5").await;
    assert_eq!(seqs(&fetch(&c, "S", "c", 5).await), [5]);
}

#[tokio::test]
async fn deliver_by_start_time() {
    let (_s, c) = setup().await;
    publish_n(&c, "s.a", 2).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let t = time::OffsetDateTime::now_utc();
    tokio::time::sleep(Duration::from_millis(100)).await;
    publish(&c, "s.b", "2").await;
    publish(&c, "s.a", "3").await;
    let when = t
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap();
    let v = create_ok(
        &c,
        "S",
        "c",
        json!({"ack_policy": "explicit", "deliver_policy": "by_start_time", "opt_start_time": when}),
    )
    .await;
    assert_eq!(v["num_pending"], 2);
    assert_eq!(v["delivered"]["stream_seq"], 2);
    assert_eq!(seqs(&fetch(&c, "S", "c", 5).await), [3, 4]);
    let v = create_ok(
        &c,
        "S",
        "f",
        json!({"ack_policy": "explicit", "deliver_policy": "by_start_time", "opt_start_time": when, "filter_subject": "s.a"}),
    )
    .await;
    assert_eq!(v["num_pending"], 1);
    assert_eq!(seqs(&fetch(&c, "S", "f", 5).await), [4]);
}

#[tokio::test]
async fn filter_subject_and_filter_subjects() {
    let (_s, c) = setup().await;
    for subj in ["s.a", "s.b", "s.c.1", "s.c.2", "s.d", "s.a"] {
        publish(&c, subj, subj).await;
    }
    let v = create_ok(
        &c,
        "S",
        "one",
        json!({"ack_policy": "explicit", "filter_subject": "s.a"}),
    )
    .await;
    assert_eq!(v["num_pending"], 2);
    let v = create_ok(
        &c,
        "S",
        "many",
        json!({"ack_policy": "explicit", "filter_subjects": ["s.a", "s.c.>"]}),
    )
    .await;
    assert_eq!(v["num_pending"], 4);
    assert_eq!(v["config"]["filter_subjects"], json!(["s.a", "s.c.>"]));
    assert_eq!(seqs(&fetch(&c, "S", "one", 10).await), [1, 6]);
    let msgs = fetch(&c, "S", "many", 10).await;
    assert_eq!(seqs(&msgs), [1, 3, 4, 6]);
    let subjects: Vec<&str> = msgs.iter().map(|m| m.subject.as_str()).collect();
    assert_eq!(subjects, ["s.a", "s.c.1", "s.c.2", "s.a"]);
    // Changing the filter recounts what is pending.
    let v = create_ok(
        &c,
        "S",
        "one",
        json!({"ack_policy": "explicit", "filter_subject": "s.d"}),
    )
    .await;
    assert_eq!(v["config"]["filter_subject"], "s.d");
    assert_eq!(v["num_pending"], 0);
    publish(&c, "s.d", "x").await;
    publish(&c, "s.b", "y").await;
    assert_eq!(seqs(&fetch(&c, "S", "one", 10).await), [7]);
    // A filter outside the stream's subjects is accepted; it never matches.
    let v = create_ok(
        &c,
        "S",
        "none",
        json!({"ack_policy": "explicit", "filter_subject": "x.y"}),
    )
    .await;
    assert_eq!(v["num_pending"], 0);
}

#[tokio::test]
async fn interest_retention_keeps_messages_until_every_consumer_acks() {
    let s = common::js_server();
    let c = s.client().await;
    stream(
        &c,
        json!({"name": "I", "subjects": ["i.>"], "retention": "interest"}),
    )
    .await;
    // No consumers: not stored, but the sequence is used.
    assert_eq!(publish(&c, "i.a", "lost").await, 1);
    let st = stream_info(&c, "I").await;
    assert_eq!(st["state"]["messages"], 0, "{st}");
    assert_eq!(st["state"]["last_seq"], 1, "{st}");
    create_ok(
        &c,
        "I",
        "c1",
        json!({"durable_name": "c1", "ack_policy": "explicit"}),
    )
    .await;
    create_ok(
        &c,
        "I",
        "c2",
        json!({"durable_name": "c2", "ack_policy": "explicit"}),
    )
    .await;
    for i in 0..3 {
        assert_eq!(publish(&c, "i.a", &i.to_string()).await, i + 2);
    }
    assert_eq!(stream_msgs(&c, "I").await, 3);
    let one = fetch(&c, "I", "c1", 3).await;
    for m in &one {
        ack_sync(&c, m, "+ACK").await;
    }
    assert_eq!(stream_msgs(&c, "I").await, 3);
    let two = fetch(&c, "I", "c2", 3).await;
    ack_sync(&c, &two[0], "+ACK").await;
    assert!(wait_msgs(&c, "I", 2).await);
    let st = stream_info(&c, "I").await;
    assert_eq!(st["state"]["first_seq"], 3, "{st}");
    ack_sync(&c, &two[2], "+TERM").await;
    assert!(wait_msgs(&c, "I", 1).await);
    ack_sync(&c, &two[1], "+ACK").await;
    assert!(wait_msgs(&c, "I", 0).await);

    // A filtered consumer only holds what it matches.
    create_ok(
        &c,
        "I",
        "fb",
        json!({"durable_name": "fb", "ack_policy": "explicit", "filter_subject": "i.b"}),
    )
    .await;
    publish(&c, "i.b", "b").await;
    assert_eq!(stream_msgs(&c, "I").await, 1);
    for n in ["c1", "c2"] {
        for m in fetch(&c, "I", n, 5).await {
            ack_sync(&c, &m, "+ACK").await;
        }
    }
    assert_eq!(stream_msgs(&c, "I").await, 1, "fb still needs it");
    for m in fetch(&c, "I", "fb", 5).await {
        ack_sync(&c, &m, "+ACK").await;
    }
    assert!(wait_msgs(&c, "I", 0).await);

    // Deleting a consumer gives up its interest; deleting the last one
    // purges what is left.
    publish(&c, "i.a", "x").await;
    publish(&c, "i.a", "y").await;
    assert_eq!(stream_msgs(&c, "I").await, 2);
    for m in fetch(&c, "I", "c1", 5).await {
        ack_sync(&c, &m, "+ACK").await;
    }
    assert_ok(&delete(&c, "I", "c2").await);
    assert!(wait_msgs(&c, "I", 0).await);
    publish(&c, "i.a", "z").await;
    assert_eq!(stream_msgs(&c, "I").await, 1);
    assert_ok(&delete(&c, "I", "fb").await);
    assert_eq!(stream_msgs(&c, "I").await, 1);
    assert_ok(&delete(&c, "I", "c1").await);
    assert!(wait_msgs(&c, "I", 0).await);
}

#[tokio::test]
async fn interest_retention_with_ack_none_removes_on_delivery() {
    let s = common::js_server();
    let c = s.client().await;
    stream(
        &c,
        json!({"name": "I", "subjects": ["i.>"], "retention": "interest"}),
    )
    .await;
    create_ok(
        &c,
        "I",
        "n",
        json!({"durable_name": "n", "ack_policy": "none"}),
    )
    .await;
    publish_n(&c, "i.a", 3).await;
    assert_eq!(stream_msgs(&c, "I").await, 3);
    assert_eq!(seqs(&fetch(&c, "I", "n", 2).await), [1, 2]);
    assert!(wait_msgs(&c, "I", 1).await);
    // Ack-all: acking the last covers the ones before.
    create_ok(
        &c,
        "I",
        "all",
        json!({"durable_name": "all", "ack_policy": "all"}),
    )
    .await;
    publish_n(&c, "i.b", 3).await;
    assert_eq!(seqs(&fetch(&c, "I", "n", 5).await), [3, 4, 5, 6]);
    // It started at the first message still stored.
    let msgs = fetch(&c, "I", "all", 5).await;
    assert_eq!(seqs(&msgs), [3, 4, 5, 6]);
    assert_eq!(stream_msgs(&c, "I").await, 4);
    ack_sync(&c, &msgs[2], "+ACK").await;
    assert!(wait_msgs(&c, "I", 1).await);
    let st = stream_info(&c, "I").await;
    assert_eq!(st["state"]["first_seq"], 6, "{st}");
}

#[tokio::test]
async fn work_queue_removes_on_ack() {
    let s = common::js_server();
    let c = s.client().await;
    stream(
        &c,
        json!({"name": "W", "subjects": ["w.>"], "retention": "workqueue"}),
    )
    .await;
    publish_n(&c, "w.a", 4).await;
    create_ok(
        &c,
        "W",
        "w",
        json!({"durable_name": "w", "ack_policy": "explicit"}),
    )
    .await;
    let msgs = fetch(&c, "W", "w", 4).await;
    assert_eq!(seqs(&msgs), [1, 2, 3, 4]);
    ack_sync(&c, &msgs[0], "+ACK").await;
    assert!(wait_msgs(&c, "W", 3).await);
    ack_sync(&c, &msgs[1], "-NAK").await;
    ack_sync(&c, &msgs[2], "+TERM").await;
    assert!(wait_msgs(&c, "W", 2).await);
    let st = stream_info(&c, "W").await;
    assert_eq!(st["state"]["first_seq"], 2, "{st}");
    // Deleting the consumer removes nothing; the next one starts at first.
    assert_ok(&delete(&c, "W", "w").await);
    assert_eq!(stream_msgs(&c, "W").await, 2);
    let v = create_ok(
        &c,
        "W",
        "w2",
        json!({"durable_name": "w2", "ack_policy": "explicit"}),
    )
    .await;
    assert_eq!(v["num_pending"], 2);
    let msgs = fetch(&c, "W", "w2", 4).await;
    let got: Vec<(u64, u64)> = msgs
        .iter()
        .map(|m| (ack_info(m).sseq, ack_info(m).dc))
        .collect();
    assert_eq!(got, [(2, 1), (4, 1)]);
    for m in &msgs {
        ack_sync(&c, m, "+ACK").await;
    }
    assert!(wait_msgs(&c, "W", 0).await);
}

#[tokio::test]
async fn work_queue_filtered_consumers_split_the_work() {
    let s = common::js_server();
    let c = s.client().await;
    stream(
        &c,
        json!({"name": "W", "subjects": ["w.>"], "retention": "workqueue"}),
    )
    .await;
    create_ok(
        &c,
        "W",
        "a",
        json!({"durable_name": "a", "ack_policy": "explicit", "filter_subject": "w.a"}),
    )
    .await;
    create_ok(
        &c,
        "W",
        "b",
        json!({"durable_name": "b", "ack_policy": "explicit", "filter_subject": "w.b"}),
    )
    .await;
    for subj in ["w.a", "w.b", "w.a", "w.c"] {
        publish(&c, subj, subj).await;
    }
    let a = fetch(&c, "W", "a", 5).await;
    assert_eq!(seqs(&a), [1, 3]);
    let b = fetch(&c, "W", "b", 5).await;
    assert_eq!(seqs(&b), [2]);
    for m in a.iter().chain(b.iter()) {
        ack_sync(&c, m, "+ACK").await;
    }
    assert!(wait_msgs(&c, "W", 1).await);
    let st = stream_info(&c, "W").await;
    assert_eq!(st["state"]["first_seq"], 4, "{st}");
}

#[tokio::test]
async fn max_delivered_messages_stay_in_a_work_queue() {
    let s = common::js_server();
    let c = s.client().await;
    stream(
        &c,
        json!({"name": "W", "subjects": ["w.>"], "retention": "workqueue"}),
    )
    .await;
    publish(&c, "w.a", "x").await;
    let d = s.client().await;
    let mut sub = d.subscribe("dlv").await.unwrap();
    common::sync(&d).await;
    create_ok(
        &c,
        "W",
        "p",
        json!({"durable_name": "p", "ack_policy": "explicit", "deliver_subject": "dlv", "ack_wait": 150 * MS, "max_deliver": 1}),
    )
    .await;
    let m = recv(&mut sub).await;
    assert_eq!(ack_info(&m).dc, 1);
    assert_quiet(&mut sub, Duration::from_millis(500)).await;
    let i = info(&c, "W", "p").await;
    assert_eq!(i["num_ack_pending"], 0, "{i}");
    // Reported as 0 when max_deliver is 1.
    assert_eq!(i["num_redelivered"], 0, "{i}");
    assert_eq!(stream_msgs(&c, "W").await, 1);
}

#[tokio::test]
async fn interest_retention_stores_only_what_some_filter_matches() {
    let s = common::js_server();
    let c = s.client().await;
    stream(
        &c,
        json!({"name": "I", "subjects": ["i.>"], "retention": "interest"}),
    )
    .await;
    create_ok(
        &c,
        "I",
        "fa",
        json!({"durable_name": "fa", "ack_policy": "explicit", "filter_subject": "i.a"}),
    )
    .await;
    assert_eq!(publish(&c, "i.b", "nobody").await, 1);
    assert_eq!(publish(&c, "i.a", "fa").await, 2);
    let st = stream_info(&c, "I").await;
    assert_eq!(st["state"]["messages"], 1, "{st}");
    assert_eq!(st["state"]["first_seq"], 2, "{st}");
    // Widening the filter of the only consumer keeps new matches.
    create_ok(
        &c,
        "I",
        "fa",
        json!({"durable_name": "fa", "ack_policy": "explicit", "filter_subject": "i.>"}),
    )
    .await;
    publish(&c, "i.b", "now kept").await;
    assert_eq!(stream_msgs(&c, "I").await, 2);
    let msgs = fetch(&c, "I", "fa", 5).await;
    assert_eq!(seqs(&msgs), [2, 3]);
}

#[tokio::test]
async fn last_and_last_per_subject_with_several_filters() {
    let (_s, c) = setup().await;
    for subj in ["s.a", "s.b", "s.c", "s.a", "s.c", "s.d"] {
        publish(&c, subj, subj).await;
    }
    // Last: the latest message matching any filter.
    let v = create_ok(
        &c,
        "S",
        "l",
        json!({"ack_policy": "explicit", "deliver_policy": "last", "filter_subjects": ["s.a", "s.b"]}),
    )
    .await;
    assert_eq!(v["num_pending"], 1);
    assert_eq!(v["delivered"]["stream_seq"], 3);
    assert_eq!(seqs(&fetch(&c, "S", "l", 5).await), [4]);
    let v = create_ok(
        &c,
        "S",
        "lps",
        json!({"ack_policy": "explicit", "deliver_policy": "last_per_subject", "filter_subject": "s.*"}),
    )
    .await;
    assert_eq!(v["num_pending"], 4);
    let msgs = fetch(&c, "S", "lps", 10).await;
    assert_eq!(seqs(&msgs), [2, 4, 5, 6]);
    let pend: Vec<u64> = msgs.iter().map(|m| ack_info(m).pending).collect();
    assert_eq!(pend, [3, 2, 1, 0]);
}

#[tokio::test]
async fn last_per_subject_on_a_one_per_subject_stream_is_all() {
    let s = common::js_server();
    let c = s.client().await;
    stream(
        &c,
        json!({"name": "K", "subjects": ["k.>"], "max_msgs_per_subject": 1}),
    )
    .await;
    for subj in ["k.a", "k.b", "k.a", "k.c"] {
        publish(&c, subj, subj).await;
    }
    let v = create_ok(
        &c,
        "K",
        "w",
        json!({"ack_policy": "none", "deliver_policy": "last_per_subject", "filter_subject": "k.>"}),
    )
    .await;
    assert_eq!(v["num_pending"], 3);
    assert_eq!(seqs(&fetch(&c, "K", "w", 10).await), [2, 3, 4]);
}

#[tokio::test]
async fn acks_for_a_deleted_consumer_have_no_responders() {
    let (_s, c) = setup().await;
    publish(&c, "s.a", "x").await;
    create_ok(&c, "S", "c", json!({"ack_policy": "explicit"})).await;
    let msgs = fetch(&c, "S", "c", 1).await;
    assert_ok(&delete(&c, "S", "c").await);
    let e = c
        .request(msgs[0].reply.clone().unwrap(), Bytes::from_static(b"+ACK"))
        .await
        .expect_err("no responders");
    assert_eq!(e.kind(), async_nats::RequestErrorKind::NoResponders);
}

#[tokio::test]
async fn acks_with_headers_use_the_payload() {
    let (_s, c) = setup().await;
    publish_n(&c, "s.a", 2).await;
    create_ok(&c, "S", "c", json!({"ack_policy": "explicit"})).await;
    let msgs = fetch(&c, "S", "c", 2).await;
    let mut h = async_nats::HeaderMap::new();
    h.insert("X-Any", "thing");
    let r = c
        .request_with_headers(
            msgs[0].reply.clone().unwrap(),
            h.clone(),
            Bytes::from_static(b"+ACK"),
        )
        .await
        .unwrap();
    assert!(r.payload.is_empty());
    let r = c
        .request_with_headers(
            msgs[1].reply.clone().unwrap(),
            h,
            Bytes::from_static(b"-NAK"),
        )
        .await
        .unwrap();
    assert!(r.payload.is_empty());
    let i = info(&c, "S", "c").await;
    assert_eq!(i["num_ack_pending"], 1);
    assert_eq!(i["ack_floor"]["stream_seq"], 1);
    let again = fetch(&c, "S", "c", 2).await;
    let got: Vec<(u64, u64)> = again
        .iter()
        .map(|m| (ack_info(m).sseq, ack_info(m).dc))
        .collect();
    assert_eq!(got, [(2, 2)]);
}
