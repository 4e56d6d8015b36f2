//! Per-user permissions through async-nats: what each user may publish
//! and subscribe to, the `-ERR` nats-server sends for each refusal,
//! queue-group entries, deny filters on wildcard subscriptions,
//! `allow_responses`, `default_permissions` and `no_auth_user`.

#[path = "../common/mod.rs"]
mod common;

use std::time::Duration;

use futures::{FutureExt, StreamExt};
use tokio::sync::mpsc;

const CONFIG: &str = r#"
authorization {
  default_permissions = {
    publish: "public.>"
    subscribe: ["public.>", "_INBOX.>"]
  }
  users = [
    { user: alice, password: a, permissions: {
        publish: { allow: ["orders.>", "_INBOX.>"], deny: ["orders.secret"] }
        subscribe: {
          allow: ["orders.>", "jobs workers", "tasks", "tasks.> v.*", "_INBOX.>"]
          deny: ["orders.secret", "tasks bad"]
        }
    } }
    { user: bob, password: b }
    { user: svc, password: s, permissions: {
        subscribe: "requests"
        allow_responses: { max: 2 }
    } }
    { user: admin, password: x, permissions: {
        publish: { allow: ">", deny: "sync.>" }
        subscribe: ">"
    } }
  ]
}
no_auth_user: bob
"#;

/// A connection and the server errors it is told of.
struct User {
    client: async_nats::Client,
    errors: mpsc::UnboundedReceiver<String>,
}

async fn connect(url: &str, user: Option<(&str, &str)>) -> User {
    let (tx, errors) = mpsc::unbounded_channel();
    let opts = match user {
        Some((u, p)) => async_nats::ConnectOptions::with_user_and_password(u.into(), p.into()),
        None => async_nats::ConnectOptions::new(),
    };
    let client = opts
        .event_callback(move |event| {
            let tx = tx.clone();
            async move {
                if let async_nats::Event::ServerError(async_nats::ServerError::Other(text)) = event
                {
                    let _ = tx.send(text);
                }
            }
        })
        .connect(url)
        .await
        .unwrap();
    User { client, errors }
}

impl User {
    /// A round trip: publishes to `sync.marker`, which no user here may,
    /// and returns the errors the server sent before refusing it. When
    /// this returns, the server has handled everything sent before.
    async fn errors(&mut self) -> Vec<String> {
        let marker = publish_violation("sync.marker");
        self.client.publish("sync.marker", "".into()).await.unwrap();
        self.client.flush().await.unwrap();
        let mut out = Vec::new();
        loop {
            let e = tokio::time::timeout(Duration::from_secs(5), self.errors.recv())
                .await
                .unwrap_or_else(|_| panic!("no refusal of sync.marker after {out:?}"))
                .unwrap();
            if e == marker {
                return out;
            }
            out.push(e);
        }
    }
}

/// No errors, or no messages.
const NONE: Vec<String> = Vec::new();

fn publish_violation(subject: &str) -> String {
    format!("Permissions Violation for Publish to \"{subject}\"")
}

#[tokio::test]
async fn publishes_are_checked_against_allow_then_deny() {
    let s = common::server().config(CONFIG).start();
    let mut admin = connect(&s.url(), Some(("admin", "x"))).await;
    let mut alice = connect(&s.url(), Some(("alice", "a"))).await;
    let mut all = admin.client.subscribe(">").await.unwrap();
    assert_eq!(admin.errors().await, NONE);

    let table = [
        ("orders.new", true),
        ("orders.eu.new", true),
        ("orders.secret", false),
        ("orders", false),
        ("public.news", false),
        ("$JS.API.INFO", false),
    ];
    for (subject, _) in table {
        alice.client.publish(subject, "x".into()).await.unwrap();
    }
    alice
        .client
        .publish("orders.end", "x".into())
        .await
        .unwrap();
    let got = common::received_until(&mut all, "orders.end").await;
    let allowed: Vec<&str> = table.iter().filter(|t| t.1).map(|t| t.0).collect();
    assert_eq!(got, allowed);
    let refused: Vec<String> = table
        .iter()
        .filter(|t| !t.1)
        .map(|t| publish_violation(t.0))
        .collect();
    assert_eq!(alice.errors().await, refused);
    // The connection stays up, as in nats-server.
    alice
        .client
        .publish("orders.after", "x".into())
        .await
        .unwrap();
    assert_eq!(alice.errors().await, NONE);
    assert!(s.wait_log(
        "Publish Violation - Subject \"orders.secret\"",
        Duration::from_secs(5)
    ));
}

#[tokio::test]
async fn subscriptions_are_checked_with_their_queue_groups() {
    let s = common::server().config(CONFIG).start();
    let mut alice = connect(&s.url(), Some(("alice", "a"))).await;
    let table: [(&str, Option<&str>, Option<&str>); 10] = [
        ("orders.*", None, None),
        (
            "orders.secret",
            None,
            Some("Permissions Violation for Subscription to \"orders.secret\""),
        ),
        ("jobs", Some("workers"), None),
        (
            "jobs",
            None,
            Some("Permissions Violation for Subscription to \"jobs\""),
        ),
        (
            "jobs",
            Some("others"),
            Some("Permissions Violation for Subscription to \"jobs\" using queue \"others\""),
        ),
        ("tasks", Some("good"), None),
        (
            "tasks",
            Some("bad"),
            Some("Permissions Violation for Subscription to \"tasks\" using queue \"bad\""),
        ),
        ("tasks.x", Some("v.1"), None),
        (
            "tasks.x",
            Some("w"),
            Some("Permissions Violation for Subscription to \"tasks.x\" using queue \"w\""),
        ),
        (
            "public.>",
            None,
            Some("Permissions Violation for Subscription to \"public.>\""),
        ),
    ];
    let mut subs = Vec::new();
    for (subject, queue, _) in table {
        subs.push(match queue {
            Some(q) => alice
                .client
                .queue_subscribe(subject, q.into())
                .await
                .unwrap(),
            None => alice.client.subscribe(subject).await.unwrap(),
        });
    }
    let want: Vec<String> = table
        .iter()
        .filter_map(|t| t.2.map(str::to_string))
        .collect();
    assert_eq!(alice.errors().await, want);

    // The allowed ones receive; the refused ones are not subscribed.
    let admin = connect(&s.url(), Some(("admin", "x"))).await;
    for subject in ["jobs", "orders.secret", "public.news", "orders.done"] {
        admin.client.publish(subject, "1".into()).await.unwrap();
    }
    let jobs_in_workers = &mut subs[2];
    let m = tokio::time::timeout(Duration::from_secs(5), jobs_in_workers.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(m.subject.as_str(), "jobs");
    // Deliveries come in order: once orders.done is in, anything for the
    // refused subscriptions would be too.
    assert_eq!(
        common::received_until(&mut subs[0], "orders.done").await,
        NONE
    );
    for refused in [1, 9] {
        assert!(subs[refused].next().now_or_never().is_none());
    }
}

#[tokio::test]
async fn a_deny_filters_what_a_wildcard_subscription_receives() {
    let s = common::server().config(CONFIG).start();
    let admin = connect(&s.url(), Some(("admin", "x"))).await;
    let mut alice = connect(&s.url(), Some(("alice", "a"))).await;
    let mut orders = alice.client.subscribe("orders.*").await.unwrap();
    let mut tasks = alice
        .client
        .queue_subscribe("tasks", "good".into())
        .await
        .unwrap();
    assert_eq!(alice.errors().await, NONE);
    for subject in ["orders.secret", "orders.new", "orders.end"] {
        admin.client.publish(subject, "x".into()).await.unwrap();
    }
    assert_eq!(
        common::received_until(&mut orders, "orders.end").await,
        ["orders.new"]
    );
    admin.client.publish("tasks", "t".into()).await.unwrap();
    admin.client.flush().await.unwrap();
    let m = tokio::time::timeout(Duration::from_secs(5), tasks.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&m.payload[..], b"t");
}

#[tokio::test]
async fn allow_responses_lets_a_service_answer_what_it_was_asked() {
    let s = common::server().config(CONFIG).start();
    let mut admin = connect(&s.url(), Some(("admin", "x"))).await;
    let mut svc = connect(&s.url(), Some(("svc", "s"))).await;
    let mut requests = svc.client.subscribe("requests").await.unwrap();
    assert_eq!(svc.errors().await, NONE);

    let inbox = admin.client.new_inbox();
    let mut replies = admin.client.subscribe(inbox.clone()).await.unwrap();
    assert_eq!(admin.errors().await, NONE);
    admin
        .client
        .publish_with_reply("requests", inbox.clone(), "q".into())
        .await
        .unwrap();
    admin.client.flush().await.unwrap();
    let request = tokio::time::timeout(Duration::from_secs(5), requests.next())
        .await
        .unwrap()
        .unwrap();
    let reply = request.reply.unwrap();
    // max: 2 replies to one request; the third is refused.
    for n in ["1", "2", "3"] {
        svc.client.publish(reply.clone(), n.into()).await.unwrap();
    }
    // Nothing it was not asked for.
    svc.client.publish("elsewhere", "x".into()).await.unwrap();
    assert_eq!(
        svc.errors().await,
        [publish_violation(&inbox), publish_violation("elsewhere")]
    );
    for want in ["1", "2"] {
        let m = tokio::time::timeout(Duration::from_secs(5), replies.next())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(&m.payload[..], want.as_bytes());
    }
    admin
        .client
        .publish(inbox.clone(), "end".into())
        .await
        .unwrap();
    let m = replies.next().await.unwrap();
    assert_eq!(&m.payload[..], b"end", "the third reply was not delivered");
}

#[tokio::test]
async fn default_permissions_and_no_auth_user() {
    let s = common::server().config(CONFIG).start();
    let mut admin = connect(&s.url(), Some(("admin", "x"))).await;
    let mut all = admin.client.subscribe(">").await.unwrap();
    assert_eq!(admin.errors().await, NONE);
    // No credentials: connected as bob, who has the default permissions.
    for user in [None, Some(("bob", "b"))] {
        let mut bob = connect(&s.url(), user).await;
        bob.client.publish("orders.new", "x".into()).await.unwrap();
        bob.client.publish("public.end", "x".into()).await.unwrap();
        assert_eq!(common::received_until(&mut all, "public.end").await, NONE);
        assert_eq!(bob.errors().await, [publish_violation("orders.new")]);
    }
    let users = s.authorized_users();
    assert!(users.iter().any(|u| u == "bob"), "{users:?}");
    // Wrong credentials are still refused, never replaced by bob.
    let e = async_nats::ConnectOptions::with_user_and_password("bob".into(), "nope".into())
        .connect(s.url())
        .await
        .expect_err("wrong password accepted");
    assert_eq!(
        e.kind(),
        async_nats::ConnectErrorKind::AuthorizationViolation
    );
}

#[tokio::test]
async fn jetstream_api_subjects_are_checked_like_any_other() {
    let config = r#"
authorization {
  users = [
    { user: admin, password: x }
    { user: reader, password: r, permissions: {
        publish: ["$JS.API.STREAM.INFO.*", "$JS.API.INFO"]
        subscribe: "_INBOX.>"
    } }
  ]
}
"#;
    let s = common::server().config(config).js().start();
    let admin = connect(&s.url(), Some(("admin", "x"))).await;
    let js = async_nats::jetstream::new(admin.client.clone());
    js.create_stream(async_nats::jetstream::stream::Config {
        name: "ORDERS".into(),
        subjects: vec!["orders.>".into()],
        ..Default::default()
    })
    .await
    .unwrap();

    let mut reader = connect(&s.url(), Some(("reader", "r"))).await;
    let info = reader
        .client
        .request("$JS.API.STREAM.INFO.ORDERS", "".into())
        .await
        .unwrap();
    let info: serde_json::Value = serde_json::from_slice(&info.payload).unwrap();
    assert_eq!(info["config"]["name"], "ORDERS");
    reader
        .client
        .publish("$JS.API.STREAM.DELETE.ORDERS", "".into())
        .await
        .unwrap();
    assert_eq!(
        reader.errors().await,
        [publish_violation("$JS.API.STREAM.DELETE.ORDERS")]
    );
    assert!(
        js.get_stream("ORDERS").await.is_ok(),
        "the stream is still there"
    );
}

#[tokio::test]
async fn a_reload_applies_changed_permissions_to_connected_clients() {
    let s = common::server().config(CONFIG).start();
    let mut alice = connect(&s.url(), Some(("alice", "a"))).await;
    let _orders = alice.client.subscribe("orders.*").await.unwrap();
    let mut jobs = alice
        .client
        .queue_subscribe("jobs", "workers".into())
        .await
        .unwrap();
    alice
        .client
        .publish("orders.new", "x".into())
        .await
        .unwrap();
    assert_eq!(alice.errors().await, NONE);

    // Alice loses orders.>, keeps jobs.
    let narrowed = CONFIG.replace(
        r#"publish: { allow: ["orders.>", "_INBOX.>"], deny: ["orders.secret"] }"#,
        r#"publish: { allow: ["_INBOX.>"] }"#,
    );
    let narrowed = narrowed.replace(
        r#"allow: ["orders.>", "jobs workers""#,
        r#"allow: ["jobs workers""#,
    );
    assert_ne!(narrowed, CONFIG);
    std::fs::write(s.dir.path().join("server.conf"), narrowed).unwrap();
    s.signal(libc::SIGHUP);
    assert!(s.wait_log("Reloaded server configuration", Duration::from_secs(5)));

    alice
        .client
        .publish("orders.new", "x".into())
        .await
        .unwrap();
    let errors = alice.errors().await;
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(
        errors[0].starts_with("Permissions Violation for Subscription to \"orders.*\" (sid "),
        "{errors:?}"
    );
    assert_eq!(errors[1], publish_violation("orders.new"));
    // Still connected, and what it may still do works.
    let admin = connect(&s.url(), Some(("admin", "x"))).await;
    admin.client.publish("jobs", "j".into()).await.unwrap();
    let m = tokio::time::timeout(Duration::from_secs(5), jobs.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&m.payload[..], b"j");
}
