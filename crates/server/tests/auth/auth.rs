//! Each auth mode, accepted and refused, through async-nats; refusals are
//! logged without the secret.

#[path = "../common/mod.rs"]
mod common;

use std::time::Duration;

use common::Raw;

/// Asserts the server refuses these credentials as nats-server does.
async fn refused(url: &str, opts: async_nats::ConnectOptions) {
    let e = opts
        .connect(url)
        .await
        .expect_err("connection was accepted");
    assert_eq!(
        e.kind(),
        async_nats::ConnectErrorKind::AuthorizationViolation,
        "{e}"
    );
}

async fn works(c: async_nats::Client) {
    let mut sub = c.subscribe("auth.ok").await.unwrap();
    c.publish("auth.ok", "x".into()).await.unwrap();
    c.flush().await.unwrap();
    use futures::StreamExt;
    let m = tokio::time::timeout(Duration::from_secs(5), sub.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&m.payload[..], b"x");
}

#[tokio::test]
async fn token() {
    let s = common::server().arg("--auth").arg("s3cr3t-token").start();
    works(
        async_nats::ConnectOptions::with_token("s3cr3t-token".into())
            .connect(s.url())
            .await
            .unwrap(),
    )
    .await;
    refused(
        &s.url(),
        async_nats::ConnectOptions::with_token("wrong".into()),
    )
    .await;
    refused(&s.url(), async_nats::ConnectOptions::new()).await;
    assert!(s.wait_log("authentication error", Duration::from_secs(5)));
    let log = s.log_text();
    assert!(!log.contains("wrong"), "secret in log:\n{log}");
    assert!(!log.contains("s3cr3t"), "secret in log:\n{log}");
}

#[tokio::test]
async fn single_user() {
    let s = common::server()
        .arg("--user")
        .arg("alice")
        .arg("--pass")
        .arg("pa55word")
        .start();
    works(
        async_nats::ConnectOptions::with_user_and_password("alice".into(), "pa55word".into())
            .connect(s.url())
            .await
            .unwrap(),
    )
    .await;
    refused(
        &s.url(),
        async_nats::ConnectOptions::with_user_and_password("alice".into(), "nope-pass".into()),
    )
    .await;
    refused(
        &s.url(),
        async_nats::ConnectOptions::with_user_and_password("mallory".into(), "pa55word".into()),
    )
    .await;
    assert!(s.wait_log(
        "authentication error - User \"alice\"",
        Duration::from_secs(5)
    ));
    let log = s.log_text();
    assert!(
        !log.contains("nope-pass") && !log.contains("pa55word"),
        "secret in log:\n{log}"
    );
}

#[tokio::test]
async fn users_list_from_config_with_bcrypt() {
    let hash = bcrypt::hash("hunter2", 4).unwrap();
    let s = common::server()
        .config(&format!(
            "authorization {{\n  users = [\n    {{user: app, password: \"plain-pw\"}}\n    {{user: ops, password: \"{hash}\"}}\n  ]\n}}\n"
        ))
        .start();
    for (u, p) in [("app", "plain-pw"), ("ops", "hunter2")] {
        works(
            async_nats::ConnectOptions::with_user_and_password(u.into(), p.into())
                .connect(s.url())
                .await
                .unwrap(),
        )
        .await;
    }
    for (u, p) in [("app", "hunter2"), ("ops", "plain-pw"), ("nobody", "x")] {
        refused(
            &s.url(),
            async_nats::ConnectOptions::with_user_and_password(u.into(), p.into()),
        )
        .await;
    }
}

#[tokio::test]
async fn no_auth_server_accepts_any_credentials() {
    let s = common::server().start();
    works(
        async_nats::ConnectOptions::with_token("anything".into())
            .connect(s.url())
            .await
            .unwrap(),
    )
    .await;
}

#[test]
fn first_op_must_be_connect_when_auth_required() {
    let s = common::server().arg("--auth").arg("t").start();
    let mut r = Raw::connect(&s.addr());
    r.send(b"PING\r\n");
    let (closed, seen) = r.closed(Duration::from_secs(5));
    assert!(closed);
    assert!(seen.contains("-ERR 'Authorization Violation'"), "{seen}");
}

#[test]
fn auth_timeout_closes_silent_clients() {
    let s = common::server()
        .config("authorization { token: t, timeout: 0.3 }\n")
        .start();
    let mut r = Raw::connect(&s.addr());
    let (closed, seen) = r.closed(Duration::from_secs(5));
    assert!(closed);
    assert!(seen.contains("-ERR 'Authentication Timeout'"), "{seen}");
}

#[tokio::test]
async fn nkey_users_sign_the_nonce() {
    let alice = nkeys::KeyPair::new_user();
    let helper = nkeys::KeyPair::new_user();
    let stranger = nkeys::KeyPair::new_user();
    let s = common::server()
        .config(&format!(
            "authorization {{\n  users = [\n    {{nkey: {}}}\n    {{nkey: {}, permissions: {{publish: help, subscribe: \"_INBOX.>\"}}}}\n    {{user: app, password: pw}}\n  ]\n}}\n",
            alice.public_key(),
            helper.public_key()
        ))
        .start();
    // INFO carries a fresh nonce to sign.
    let mut info = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(std::net::TcpStream::connect(s.addr()).unwrap()),
        &mut info,
    )
    .unwrap();
    let json: serde_json::Value =
        serde_json::from_str(info.trim_start_matches("INFO ").trim()).unwrap();
    assert_eq!(json["nonce"].as_str().map(str::len), Some(15), "{info}");
    assert_eq!(json["auth_required"], true);

    let seed = |kp: &nkeys::KeyPair| kp.seed().unwrap();
    works(
        async_nats::ConnectOptions::with_nkey(seed(&alice))
            .connect(s.url())
            .await
            .unwrap(),
    )
    .await;
    works(
        async_nats::ConnectOptions::with_user_and_password("app".into(), "pw".into())
            .connect(s.url())
            .await
            .unwrap(),
    )
    .await;
    refused(
        &s.url(),
        async_nats::ConnectOptions::with_nkey(seed(&stranger)),
    )
    .await;
    refused(&s.url(), async_nats::ConnectOptions::new()).await;
    assert!(s.wait_log(
        &format!("authentication error - Nkey \"{}\"", stranger.public_key()),
        Duration::from_secs(5)
    ));
    assert!(
        !s.log_text().contains(&seed(&stranger)),
        "a seed in the log"
    );

    // An nkey user's permissions apply.
    let (tx, mut errors) = tokio::sync::mpsc::unbounded_channel();
    let limited = async_nats::ConnectOptions::with_nkey(seed(&helper))
        .event_callback(move |e| {
            let tx = tx.clone();
            async move {
                if let async_nats::Event::ServerError(e) = e {
                    let _ = tx.send(e.to_string());
                }
            }
        })
        .connect(s.url())
        .await
        .unwrap();
    limited.publish("elsewhere", "x".into()).await.unwrap();
    limited.flush().await.unwrap();
    let e = tokio::time::timeout(Duration::from_secs(5), errors.recv())
        .await
        .unwrap()
        .unwrap();
    assert!(
        e.contains("Permissions Violation for Publish to \"elsewhere\""),
        "{e}"
    );
    let users = s.authorized_users();
    assert!(users.contains(&helper.public_key()), "{users:?}");
}
