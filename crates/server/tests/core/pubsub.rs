//! Core pub/sub through the async-nats client against the real binary.

#[path = "../common/mod.rs"]
mod common;

use std::collections::HashMap;
use std::time::Duration;

use async_nats::header::HeaderMap;
use futures::StreamExt;
use tokio::time::timeout;

const T: Duration = Duration::from_secs(10);

async fn next(sub: &mut async_nats::Subscriber) -> async_nats::Message {
    timeout(T, sub.next())
        .await
        .expect("timed out")
        .expect("subscription ended")
}

async fn nothing_more(sub: &mut async_nats::Subscriber) {
    if let Ok(Some(m)) = timeout(Duration::from_millis(200), sub.next()).await {
        panic!("unexpected message on {}", m.subject);
    }
}

#[tokio::test]
async fn wildcards() {
    let s = common::server().start();
    let c = s.client().await;
    let mut star = c.subscribe("orders.*.new").await.unwrap();
    let mut gt = c.subscribe("orders.>").await.unwrap();
    let mut exact = c.subscribe("orders.eu.new").await.unwrap();
    c.flush().await.unwrap();
    for subj in [
        "orders.eu.new",
        "orders.us.new",
        "orders.eu.old",
        "orders",
        "orders.a.b.c",
    ] {
        c.publish(subj, subj.into()).await.unwrap();
    }
    c.flush().await.unwrap();
    assert_eq!(next(&mut star).await.subject.as_str(), "orders.eu.new");
    assert_eq!(next(&mut star).await.subject.as_str(), "orders.us.new");
    nothing_more(&mut star).await;
    let got: Vec<String> = [
        next(&mut gt).await,
        next(&mut gt).await,
        next(&mut gt).await,
        next(&mut gt).await,
    ]
    .iter()
    .map(|m| m.subject.to_string())
    .collect();
    assert_eq!(
        got,
        [
            "orders.eu.new",
            "orders.us.new",
            "orders.eu.old",
            "orders.a.b.c"
        ]
    );
    nothing_more(&mut gt).await;
    let m = next(&mut exact).await;
    assert_eq!(
        (m.subject.as_str(), &m.payload[..]),
        ("orders.eu.new", &b"orders.eu.new"[..])
    );
    nothing_more(&mut exact).await;
}

#[tokio::test]
async fn queue_group_delivers_each_message_once() {
    let s = common::server().start();
    let publisher = s.client().await;
    let mut members = Vec::new();
    for _ in 0..3 {
        let c = s.client().await;
        let sub = c.queue_subscribe("work", "workers".into()).await.unwrap();
        common::sync(&c).await;
        members.push((c, sub));
    }
    // A plain subscriber beside the group gets every message.
    let mut watcher = publisher.subscribe("work").await.unwrap();
    publisher.flush().await.unwrap();
    for i in 0..1000u32 {
        publisher
            .publish("work", i.to_string().into())
            .await
            .unwrap();
    }
    publisher.flush().await.unwrap();

    let mut seen: HashMap<u32, usize> = HashMap::new();
    let mut per_member = Vec::new();
    let mut total = 0;
    for (_, sub) in members.iter_mut() {
        let mut n = 0;
        while let Ok(Some(m)) = timeout(Duration::from_millis(500), sub.next()).await {
            let i: u32 = std::str::from_utf8(&m.payload).unwrap().parse().unwrap();
            *seen.entry(i).or_default() += 1;
            n += 1;
        }
        per_member.push(n);
        total += n;
    }
    assert_eq!(total, 1000, "per member: {per_member:?}");
    assert_eq!(seen.len(), 1000);
    assert!(
        seen.values().all(|&n| n == 1),
        "a message went to two members"
    );
    assert!(per_member.iter().all(|&n| n > 0), "spread: {per_member:?}");
    for i in 0..1000u32 {
        let m = next(&mut watcher).await;
        assert_eq!(&m.payload[..], i.to_string().as_bytes());
    }
}

#[tokio::test]
async fn request_reply_and_no_responders() {
    let s = common::server().start();
    let responder = s.client().await;
    let mut svc = responder.subscribe("svc.echo").await.unwrap();
    common::sync(&responder).await;
    tokio::spawn(async move {
        while let Some(m) = svc.next().await {
            let mut body = b"echo:".to_vec();
            body.extend_from_slice(&m.payload);
            responder
                .publish(m.reply.unwrap(), body.into())
                .await
                .unwrap();
        }
    });
    let c = s.client().await;
    for i in 0..50 {
        let r = timeout(T, c.request("svc.echo", format!("{i}").into()))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(r.payload, format!("echo:{i}").as_bytes());
    }
    let err = timeout(T, c.request("svc.nobody", "x".into()))
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(
        err.kind(),
        async_nats::RequestErrorKind::NoResponders,
        "{err:?}"
    );
}

#[tokio::test]
async fn headers_round_trip() {
    let s = common::server().start();
    let c = s.client().await;
    let mut sub = c.subscribe("h").await.unwrap();
    c.flush().await.unwrap();
    let mut headers = HeaderMap::new();
    headers.insert("X-One", "1");
    headers.append("X-Multi", "a");
    headers.append("X-Multi", "b");
    c.publish_with_headers("h", headers, "body".into())
        .await
        .unwrap();
    let m = next(&mut sub).await;
    let h = m.headers.expect("headers");
    assert_eq!(h.get("X-One").unwrap().as_str(), "1");
    let multi: Vec<&str> = h.get_all("X-Multi").map(|v| v.as_str()).collect();
    assert_eq!(multi, ["a", "b"]);
    assert_eq!(&m.payload[..], b"body");
}

#[tokio::test]
async fn auto_unsubscribe_after_max() {
    let s = common::server().start();
    let c = s.client().await;
    let mut sub = c.subscribe("limited").await.unwrap();
    sub.unsubscribe_after(3).await.unwrap();
    c.flush().await.unwrap();
    for i in 0..10 {
        c.publish("limited", format!("{i}").into()).await.unwrap();
    }
    c.flush().await.unwrap();
    for i in 0..3 {
        assert_eq!(next(&mut sub).await.payload, format!("{i}").as_bytes());
    }
    assert!(timeout(Duration::from_millis(300), sub.next())
        .await
        .map_or(true, |m| m.is_none()));
    // The server dropped the subscription too.
    let subsz = s.json("/subsz?acc=$G");
    assert_eq!(subsz["num_subscriptions"], 0, "{subsz}");
}

#[tokio::test]
async fn echo_off_skips_own_messages() {
    let s = common::server().start();
    let quiet = async_nats::ConnectOptions::new()
        .no_echo()
        .connect(s.url())
        .await
        .unwrap();
    let other = s.client().await;
    let mut own = quiet.subscribe("e").await.unwrap();
    let mut theirs = other.subscribe("e").await.unwrap();
    common::sync(&quiet).await;
    common::sync(&other).await;
    quiet.publish("e", "from-quiet".into()).await.unwrap();
    common::sync(&quiet).await;
    other.publish("e", "from-other".into()).await.unwrap();
    other.flush().await.unwrap();
    assert_eq!(&next(&mut own).await.payload[..], b"from-other");
    nothing_more(&mut own).await;
    assert_eq!(&next(&mut theirs).await.payload[..], b"from-quiet");
    assert_eq!(&next(&mut theirs).await.payload[..], b"from-other");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hundred_thousand_in_order() {
    let s = common::server().start();
    let publisher = s.client().await;
    // Room for every message, so the client library never drops one for
    // being slow: any gap or reordering is the server's.
    let subscriber = async_nats::ConnectOptions::new()
        .subscription_capacity(200_000)
        .connect(s.url())
        .await
        .unwrap();
    let mut sub = subscriber.subscribe("seq").await.unwrap();
    common::sync(&subscriber).await;
    const N: u64 = 100_000;
    let send = tokio::spawn(async move {
        for i in 0..N {
            publisher
                .publish("seq", i.to_be_bytes().to_vec().into())
                .await
                .unwrap();
        }
        publisher.flush().await.unwrap();
        publisher
    });
    for i in 0..N {
        let m = next(&mut sub).await;
        assert_eq!(u64::from_be_bytes(m.payload[..].try_into().unwrap()), i);
    }
    send.await.unwrap();
    nothing_more(&mut sub).await;
}

#[tokio::test]
async fn unsubscribe_stops_delivery() {
    let s = common::server().start();
    let c = s.client().await;
    let mut a = c.subscribe("u").await.unwrap();
    let mut b = c.subscribe("u").await.unwrap();
    c.flush().await.unwrap();
    a.unsubscribe().await.unwrap();
    c.flush().await.unwrap();
    c.publish("u", "x".into()).await.unwrap();
    c.flush().await.unwrap();
    assert_eq!(&next(&mut b).await.payload[..], b"x");
    assert!(timeout(Duration::from_millis(200), a.next())
        .await
        .map_or(true, |m| m.is_none()));
}

#[tokio::test]
async fn large_payload_up_to_max() {
    let s = common::server().start();
    let c = s.client().await;
    assert_eq!(c.server_info().max_payload, 1024 * 1024);
    let mut sub = c.subscribe("big").await.unwrap();
    c.flush().await.unwrap();
    let payload: Vec<u8> = (0..1024 * 1024).map(|i| (i % 251) as u8).collect();
    c.publish("big", payload.clone().into()).await.unwrap();
    c.flush().await.unwrap();
    assert_eq!(next(&mut sub).await.payload.to_vec(), payload);
}

/// 100k subscriptions on one connection: all registered, each reachable,
/// and all gone after unsubscribing.
#[test]
fn hundred_thousand_subscriptions() {
    let s = common::server().start();
    let mut r = common::Raw::connect(&s.addr());
    const N: usize = 100_000;
    let mut subs = String::from("CONNECT {\"verbose\":false}\r\n");
    for i in 0..N {
        subs.push_str(&format!("SUB scale.{}.{i} {i}\r\n", i % 1000));
    }
    subs.push_str("PING\r\n");
    r.send(subs.as_bytes());
    r.read_until("PONG\r\n", T);
    assert_eq!(s.json("/subsz?acc=$G")["num_subscriptions"], N);
    let mut pubs = String::new();
    for i in (0..N).step_by(9973) {
        pubs.push_str(&format!("PUB scale.{}.{i} 1\r\nx\r\n", i % 1000));
    }
    pubs.push_str("PING\r\n");
    r.send(pubs.as_bytes());
    let got = r.read_until("PONG\r\n", T);
    for i in (0..N).step_by(9973) {
        assert!(
            got.contains(&format!("MSG scale.{}.{i} {i} 1\r\n", i % 1000)),
            "{i}"
        );
    }
    let mut unsubs = String::new();
    for i in 0..N {
        unsubs.push_str(&format!("UNSUB {i}\r\n"));
    }
    unsubs.push_str("PING\r\n");
    r.send(unsubs.as_bytes());
    r.read_until("PONG\r\n", T);
    let z = s.json("/subsz?acc=$G");
    assert_eq!(z["num_subscriptions"], 0);
    assert_eq!(z["num_removes"], N);
}

/// UNSUB and auto-unsubscribe as the server enforces them, seen on the
/// wire (async-nats would hide extra messages by dropping them itself).
#[test]
fn unsubscribe_on_the_wire() {
    let s = common::server().start();
    let mut r = common::Raw::connect(&s.addr());
    r.send(b"CONNECT {\"verbose\":false}\r\nSUB gone 1\r\nUNSUB 1\r\nPUB gone 1\r\nx\r\n");
    r.send(b"SUB three 2\r\nUNSUB 2 3\r\n");
    for _ in 0..5 {
        r.send(b"PUB three 1\r\ny\r\n");
    }
    // Already past its new max: removed at once.
    r.send(b"SUB two 3\r\nPUB two 1\r\nz\r\nPUB two 1\r\nz\r\nUNSUB 3 2\r\nPUB two 1\r\nz\r\n");
    // A reused sid after UNSUB belongs to the new subject only.
    r.send(b"SUB old 4\r\nUNSUB 4\r\nSUB new 4\r\nPUB old 1\r\no\r\nPUB new 1\r\nn\r\nPING\r\n");
    let got = r.read_until("PONG\r\n", T);
    assert_eq!(
        got,
        "MSG three 2 1\r\ny\r\nMSG three 2 1\r\ny\r\nMSG three 2 1\r\ny\r\n\
         MSG two 3 1\r\nz\r\nMSG two 3 1\r\nz\r\n\
         MSG new 4 1\r\nn\r\nPONG\r\n"
    );
    assert_eq!(
        s.json("/subsz?acc=$G")["num_subscriptions"],
        1,
        "only `new` is left"
    );
}

/// A subscriber that did not ask for headers gets the payload alone; an
/// empty header block is delivered as a plain MSG.
#[test]
fn headers_stripped_for_subscribers_without_them() {
    let s = common::server().start();
    let mut plain = common::Raw::connect(&s.addr());
    plain.send(b"CONNECT {\"verbose\":false}\r\nSUB h 1\r\nPING\r\n");
    plain.read_until("PONG\r\n", T);
    let mut hdrs = common::Raw::connect(&s.addr());
    hdrs.send(b"CONNECT {\"verbose\":false,\"headers\":true}\r\nSUB h 9\r\n");
    hdrs.send(b"HPUB h 18 20\r\nNATS/1.0\r\nA: b\r\n\r\nhi\r\nHPUB h 0 2\r\nok\r\nPING\r\n");
    assert_eq!(
        hdrs.read_until("PONG\r\n", T),
        "HMSG h 9 18 20\r\nNATS/1.0\r\nA: b\r\n\r\nhi\r\nMSG h 9 2\r\nok\r\nPONG\r\n"
    );
    plain.send(b"PING\r\n");
    assert_eq!(
        plain.read_until("PONG\r\n", T),
        "MSG h 1 2\r\nhi\r\nMSG h 1 2\r\nok\r\nPONG\r\n"
    );
}
