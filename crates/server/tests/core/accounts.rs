//! Accounts through async-nats: each account is its own subject space,
//! on one server and across a route; `no_auth_user` lands in its user's
//! account; `/connz?auth=1` names it; a reload that moves a user to
//! another account closes its connections.

#[path = "../common/mod.rs"]
mod common;

use std::time::Duration;

use futures::StreamExt;

const CONFIG: &str = r#"
accounts {
  A {
    users: [ { user: a1, password: p }, { user: a2, password: p } ]
  }
  B {
    users: [ { user: b1, password: p } ]
    default_permissions: { publish: "b.>", subscribe: ["b.>", "_INBOX.>"] }
  }
}
authorization {
  users: [ { user: g1, password: p } ]
}
no_auth_user: a2
"#;

/// Each of a1 (A), b1 (B) and g1 ($G) subscribes to everything its
/// permissions allow; each publishes; each sees only its own account's
/// messages. `publisher_url` may be another server of a cluster.
async fn accounts_stay_apart(subscriber_url: &str, publisher_url: &str) {
    let (a_sub, b_sub, g_sub) = (
        common::connect_as(subscriber_url, "a1", "p").await,
        common::connect_as(subscriber_url, "b1", "p").await,
        common::connect_as(subscriber_url, "g1", "p").await,
    );
    let mut a_all = a_sub.subscribe(">").await.unwrap();
    let mut b_all = b_sub.subscribe("b.>").await.unwrap();
    let mut g_all = g_sub.subscribe(">").await.unwrap();
    for c in [&a_sub, &b_sub, &g_sub] {
        c.flush().await.unwrap();
    }
    // Interest crosses the route a moment after SUB.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (a_pub, b_pub, g_pub) = (
        common::connect_as(publisher_url, "a2", "p").await,
        common::connect_as(publisher_url, "b1", "p").await,
        common::connect_as(publisher_url, "g1", "p").await,
    );
    a_pub.publish("b.from_a", "".into()).await.unwrap();
    g_pub.publish("b.from_g", "".into()).await.unwrap();
    b_pub.publish("b.from_b", "".into()).await.unwrap();
    a_pub.publish("a.from_a", "".into()).await.unwrap();
    g_pub.publish("g.from_g", "".into()).await.unwrap();
    for c in [&a_pub, &b_pub, &g_pub] {
        c.flush().await.unwrap();
    }
    a_pub.publish("a.end", "".into()).await.unwrap();
    b_pub.publish("b.end", "".into()).await.unwrap();
    g_pub.publish("g.end", "".into()).await.unwrap();
    assert_eq!(
        common::received_until(&mut a_all, "a.end").await,
        ["b.from_a", "a.from_a"]
    );
    assert_eq!(
        common::received_until(&mut b_all, "b.end").await,
        ["b.from_b"]
    );
    assert_eq!(
        common::received_until(&mut g_all, "g.end").await,
        ["b.from_g", "g.from_g"]
    );
}

#[tokio::test]
async fn each_account_is_its_own_subject_space() {
    let s = common::server().config(CONFIG).start();
    accounts_stay_apart(&s.url(), &s.url()).await;

    // Requests too: a responder in A answers A only.
    let responder = common::connect_as(&s.url(), "a1", "p").await;
    let mut requests = responder.subscribe("help").await.unwrap();
    responder.flush().await.unwrap();
    tokio::spawn(async move {
        while let Some(m) = requests.next().await {
            let _ = responder.publish(m.reply.unwrap(), "ok".into()).await;
        }
    });
    let asked = common::connect_as(&s.url(), "a2", "p")
        .await
        .request("help", "".into())
        .await;
    assert_eq!(&asked.unwrap().payload[..], b"ok");
    let from_g = common::connect_as(&s.url(), "g1", "p")
        .await
        .request("help", "".into())
        .await;
    assert_eq!(
        from_g.unwrap_err().kind(),
        async_nats::RequestErrorKind::NoResponders
    );
}

#[tokio::test]
async fn no_auth_user_lands_in_its_account() {
    let s = common::server().config(CONFIG).start();
    let a1 = common::connect_as(&s.url(), "a1", "p").await;
    let mut sub = a1.subscribe("anon").await.unwrap();
    a1.flush().await.unwrap();
    let anonymous = async_nats::connect(s.url()).await.unwrap();
    anonymous.publish("anon", "x".into()).await.unwrap();
    anonymous.flush().await.unwrap();
    let m = tokio::time::timeout(Duration::from_secs(5), sub.next())
        .await
        .expect("the anonymous client publishes in A")
        .unwrap();
    assert_eq!(&m.payload[..], b"x");

    let connz = s.json("/connz?auth=1");
    let accounts: Vec<(String, Option<String>)> = connz["connections"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["authorized_user"].as_str().unwrap().to_string(),
                c["account"].as_str().map(str::to_string),
            )
        })
        .collect();
    assert!(
        accounts.contains(&("a1".into(), Some("A".into()))),
        "{connz}"
    );
    assert!(
        accounts.contains(&("a2".into(), Some("A".into()))),
        "{connz}"
    );
}

#[tokio::test]
async fn accounts_stay_apart_across_a_route() {
    let servers = common::routed_servers(&[CONFIG.to_string(), CONFIG.to_string()]);
    let (one, two) = (&servers[0], &servers[1]);
    // nats-server pools several connections per route.
    let routed = |s: &common::Server| s.json("/routez")["num_routes"].as_u64() >= Some(1);
    common::wait_for("the route", Duration::from_secs(10), || {
        routed(one) && routed(two)
    });
    accounts_stay_apart(&one.url(), &two.url()).await;
}

#[tokio::test]
async fn a_reload_that_moves_a_user_closes_its_connection() {
    let s = common::server().config(CONFIG).start();
    let stays = common::connect_as(&s.url(), "b1", "p").await;
    let (opts, mut events) = common::with_events(
        async_nats::ConnectOptions::with_user_and_password("a1".into(), "p".into()),
    );
    let moved = opts.connect(s.url()).await.unwrap();
    let moved_config = CONFIG.replace(
        "users: [ { user: a1, password: p }, { user: a2, password: p } ]",
        "users: [ { user: a2, password: p } ]",
    );
    let moved_config = moved_config.replace(
        "users: [ { user: b1, password: p } ]",
        "users: [ { user: b1, password: p }, { user: a1, password: p } ]",
    );
    assert_ne!(moved_config, CONFIG);
    std::fs::write(s.dir.path().join("server.conf"), moved_config).unwrap();
    s.signal(libc::SIGHUP);
    assert!(s.wait_log("Reloaded server configuration", Duration::from_secs(5)));
    let disconnected = tokio::time::timeout(Duration::from_secs(5), async {
        while let Some(e) = events.recv().await {
            if e.contains("disconnected") {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(disconnected, Ok(true), "a1 was not disconnected");
    // It comes back in B, and b1 was never disturbed.
    common::wait_for("a1 back in B", Duration::from_secs(10), || {
        s.json("/connz?auth=1")["connections"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["authorized_user"] == "a1")
            .all(|c| c["account"] == "B")
    });
    let mut sub = stays.subscribe("b.moved").await.unwrap();
    stays.flush().await.unwrap();
    moved.publish("b.moved", "".into()).await.unwrap();
    moved.flush().await.unwrap();
    assert!(tokio::time::timeout(Duration::from_secs(5), sub.next())
        .await
        .is_ok());
}

/// `acc` narrows `/connz` and `/subsz` to one account, as nats-server's.
#[tokio::test]
async fn monitoring_narrows_to_one_account() {
    let s = common::server().config(CONFIG).start();
    // nats-server's accounts hold subscriptions of its own (its system
    // imports): counted from where each starts.
    let count = |acc: &str| {
        s.json(&format!("/subsz?acc={acc}"))["num_subscriptions"]
            .as_u64()
            .unwrap()
    };
    let (a0, b0) = (count("A"), count("B"));
    let (a, b) = (
        common::connect_as(&s.url(), "a1", "p").await,
        common::connect_as(&s.url(), "b1", "p").await,
    );
    let _subs = (
        a.subscribe("a.one").await.unwrap(),
        a.subscribe("a.two").await.unwrap(),
        b.subscribe("b.one").await.unwrap(),
    );
    a.flush().await.unwrap();
    b.flush().await.unwrap();
    let connz = s.json("/connz?acc=A&auth=1");
    assert_eq!(connz["total"], 1, "{connz}");
    assert_eq!(connz["connections"][0]["account"], "A", "{connz}");
    assert_eq!(s.json("/connz?acc=B")["total"], 1);
    assert_eq!((count("A") - a0, count("B") - b0), (2, 1));
}
