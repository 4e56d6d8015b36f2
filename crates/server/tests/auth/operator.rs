//! Operator mode through async-nats: user JWTs signed by accounts that a
//! trusted operator signed, preloaded into the memory resolver. A user
//! gets in with its credentials, lands in its account, is held to its
//! JWT's permissions and limits; a broken link anywhere in the chain is
//! refused.

#[path = "../common/mod.rs"]
mod common;

use std::time::Duration;

use data_encoding::BASE64URL_NOPAD;
use futures::{FutureExt, StreamExt};
use serde_json::{json, Value};

/// A version 2 NATS JWT for `sub`, signed by `issuer`.
fn mint(issuer: &nkeys::KeyPair, sub: &str, kind: &str, mut nats: Value) -> String {
    nats["type"] = kind.into();
    nats["version"] = 2.into();
    let header = BASE64URL_NOPAD.encode(br#"{"typ":"JWT","alg":"ed25519-nkey"}"#);
    let claims = json!({
        "jti": "test", "iat": 1_700_000_000, "iss": issuer.public_key(), "sub": sub,
        "name": kind, "nats": nats,
    });
    let payload = BASE64URL_NOPAD.encode(claims.to_string().as_bytes());
    let signed = format!("{header}.{payload}");
    let signature = issuer.sign(signed.as_bytes()).unwrap();
    format!("{signed}.{}", BASE64URL_NOPAD.encode(&signature))
}

const UNLIMITED: &str = r#"{"conn": -1, "subs": -1, "payload": -1, "data": -1, "imports": -1, "exports": -1, "wildcards": true}"#;

struct Operator {
    key: nkeys::KeyPair,
    accounts: Vec<(nkeys::KeyPair, String)>,
    /// The index of the account its JWT names `system_account`.
    system: Option<usize>,
}

impl Operator {
    fn new() -> Operator {
        Operator {
            key: nkeys::KeyPair::new_operator(),
            accounts: Vec::new(),
            system: None,
        }
    }

    /// A new account with `limits` (and more account claims); its index.
    fn account(&mut self, nats: Value) -> usize {
        let key = nkeys::KeyPair::new_account();
        let jwt = mint(&self.key, &key.public_key(), "account", nats);
        self.accounts.push((key, jwt));
        self.accounts.len() - 1
    }

    fn config(&self) -> String {
        let claims = match self.system {
            Some(i) => json!({"system_account": self.accounts[i].0.public_key()}),
            None => json!({}),
        };
        let op = mint(&self.key, &self.key.public_key(), "operator", claims);
        let preload: Vec<String> = self
            .accounts
            .iter()
            .map(|(k, jwt)| format!("  {}: \"{jwt}\"", k.public_key()))
            .collect();
        format!(
            "operator: {op}\nresolver: MEMORY\nresolver_preload: {{\n{}\n}}\n",
            preload.join("\n")
        )
    }

    /// Credentials of a new user of account `account` with `nats` claims.
    fn user(&self, account: usize, nats: Value) -> (nkeys::KeyPair, String) {
        let user = nkeys::KeyPair::new_user();
        let jwt = mint(&self.accounts[account].0, &user.public_key(), "user", nats);
        (user, jwt)
    }
}

fn creds(user: &nkeys::KeyPair, jwt: &str) -> String {
    format!(
        "-----BEGIN NATS USER JWT-----\n{jwt}\n------END NATS USER JWT------\n\n\
         -----BEGIN USER NKEY SEED-----\n{}\n------END USER NKEY SEED------\n",
        user.seed().unwrap()
    )
}

async fn connect(
    url: &str,
    user: &nkeys::KeyPair,
    jwt: &str,
) -> Result<async_nats::Client, String> {
    async_nats::ConnectOptions::with_credentials(&creds(user, jwt))
        .unwrap()
        .connect(url)
        .await
        .map_err(|e| e.to_string())
}

fn unlimited() -> Value {
    json!({ "limits": serde_json::from_str::<Value>(UNLIMITED).unwrap() })
}

fn user_claims(extra: Value) -> Value {
    let mut v = json!({"pub": {}, "sub": {}, "subs": -1, "data": -1, "payload": -1});
    for (k, x) in extra.as_object().unwrap() {
        v[k] = x.clone();
    }
    v
}

#[tokio::test]
async fn users_land_in_their_accounts_with_their_permissions() {
    let mut op = Operator::new();
    let a = op.account(unlimited());
    let b = op.account(unlimited());
    let s = common::server().config(&op.config()).start();
    let (alice, alice_jwt) = op.user(
        a,
        user_claims(json!({
            "pub": {"allow": ["orders.>", "_INBOX.>"]},
        })),
    );
    let (amos, amos_jwt) = op.user(a, user_claims(json!({})));
    let (bob, bob_jwt) = op.user(b, user_claims(json!({})));
    let alice_c = connect(&s.url(), &alice, &alice_jwt).await.unwrap();
    let amos_c = connect(&s.url(), &amos, &amos_jwt).await.unwrap();
    let bob_c = connect(&s.url(), &bob, &bob_jwt).await.unwrap();

    let mut amos_all = amos_c.subscribe("orders.>").await.unwrap();
    let mut amos_payments = amos_c.subscribe("payments.>").await.unwrap();
    let mut bob_all = bob_c.subscribe("orders.>").await.unwrap();
    common::sync(&amos_c).await;
    common::sync(&bob_c).await;
    alice_c.publish("orders.new", "x".into()).await.unwrap();
    // Refused by alice's JWT: never delivered.
    alice_c.publish("payments.new", "x".into()).await.unwrap();
    alice_c.publish("orders.end", "x".into()).await.unwrap();
    alice_c.flush().await.unwrap();
    assert_eq!(
        common::received_until(&mut amos_all, "orders.end").await,
        ["orders.new"]
    );
    assert!(amos_payments.next().now_or_never().is_none());
    // Nothing crossed into B.
    bob_c.publish("orders.bob", "".into()).await.unwrap();
    let first = tokio::time::timeout(Duration::from_secs(5), bob_all.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(first.subject.as_str(), "orders.bob");

    let connz = s.json("/connz?auth=1");
    let rows: Vec<(String, String)> = connz["connections"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["authorized_user"].as_str().unwrap_or("").to_string(),
                c["account"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    assert!(
        rows.contains(&(alice.public_key(), op.accounts[a].0.public_key())),
        "{connz}"
    );
    assert!(
        rows.contains(&(bob.public_key(), op.accounts[b].0.public_key())),
        "{connz}"
    );
    assert!(s.wait_log("Publish Violation", Duration::from_secs(5)));
}

#[tokio::test]
async fn every_broken_link_is_refused() {
    let mut op = Operator::new();
    let a = op.account(unlimited());
    let revoking = op.account(json!({
        "limits": serde_json::from_str::<Value>(UNLIMITED).unwrap(),
        "revocations": {"*": 2_000_000_000},
    }));
    let s = common::server().config(&op.config()).start();
    let (user, jwt) = op.user(a, user_claims(json!({})));
    assert!(connect(&s.url(), &user, &jwt).await.is_ok());

    // The JWT, but another key's signature of the nonce.
    let thief = nkeys::KeyPair::new_user();
    // An account the operator never signed.
    let stranger = nkeys::KeyPair::new_account();
    let (u2, _) = op.user(a, user_claims(json!({})));
    let orphan = mint(&stranger, &u2.public_key(), "user", user_claims(json!({})));
    // Revoked, and expired.
    let (revoked, revoked_jwt) = op.user(revoking, user_claims(json!({})));
    let (late, _) = op.user(a, user_claims(json!({})));
    let expired = {
        let header = BASE64URL_NOPAD.encode(br#"{"typ":"JWT","alg":"ed25519-nkey"}"#);
        let mut nats = user_claims(json!({}));
        nats["type"] = "user".into();
        nats["version"] = 2.into();
        let claims = json!({"jti": "x", "iat": 1, "exp": 2, "iss": op.accounts[a].0.public_key(),
            "sub": late.public_key(), "nats": nats});
        let signed = format!(
            "{header}.{}",
            BASE64URL_NOPAD.encode(claims.to_string().as_bytes())
        );
        let sig = op.accounts[a].0.sign(signed.as_bytes()).unwrap();
        format!("{signed}.{}", BASE64URL_NOPAD.encode(&sig))
    };
    for (who, key, token, reason) in [
        ("thief", &thief, jwt.as_str(), "Signature not verified"),
        ("orphan", &u2, orphan.as_str(), "account missing"),
        (
            "revoked",
            &revoked,
            revoked_jwt.as_str(),
            "User authentication revoked",
        ),
        ("expired", &late, expired.as_str(), "claim is expired"),
    ] {
        let refused = connect(&s.url(), key, token).await;
        assert!(refused.is_err(), "{who} got in");
        // nats-server logs the reason at debug level only; flotilla
        // names it in the error line.
        if !common::reference_server() {
            assert!(
                s.wait_log(reason, Duration::from_secs(5)),
                "{who}: no {reason:?} in the log"
            );
        }
    }
    // No credentials at all.
    assert!(async_nats::connect(s.url()).await.is_err());
    if !common::reference_server() {
        assert!(s.wait_log("Authentication requires a user JWT", Duration::from_secs(5)));
    }
}

#[tokio::test]
async fn account_and_user_limits_hold() {
    let mut op = Operator::new();
    let small = op.account(json!({"limits": {"conn": 1, "subs": -1, "payload": -1}}));
    let s = common::server().config(&op.config()).start();
    let (one, one_jwt) = op.user(small, user_claims(json!({"subs": 1})));
    let first = connect(&s.url(), &one, &one_jwt).await.unwrap();
    let (two, two_jwt) = op.user(small, user_claims(json!({})));
    assert!(connect(&s.url(), &two, &two_jwt).await.is_err());
    assert!(s.wait_log(
        "maximum account active connections exceeded",
        Duration::from_secs(5)
    ));

    // One subscription allowed; the second is refused and the
    // connection stays.
    let _kept = first.subscribe("a").await.unwrap();
    let _refused = first.subscribe("b").await.unwrap();
    first.flush().await.unwrap();
    assert!(s.wait_log("maximum subscriptions exceeded", Duration::from_secs(5)));
    // Still connected, holding the one subscription.
    let connz = s.json("/connz");
    assert_eq!(connz["num_connections"], 1, "{connz}");
    assert_eq!(connz["connections"][0]["subscriptions"], 1, "{connz}");
    assert_eq!(
        first.connection_state(),
        async_nats::connection::State::Connected
    );

    // The connection left: the account has room again.
    drop((_kept, _refused));
    first.drain().await.unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while s.json("/connz")["num_connections"] != 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "{}",
            s.json("/connz?auth=1")
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(connect(&s.url(), &two, &two_jwt).await.is_ok());
}

#[test]
fn operator_configs_that_cannot_work_are_refused() {
    let mut op = Operator::new();
    op.account(unlimited());
    let base = op.config();
    for (extra, want) in [
        (
            "accounts { A: {} }\n",
            "operators do not allow Accounts to be configured directly",
        ),
        (
            "authorization { users: [{user: u, password: p}] }\n",
            "operators do not allow users to be configured directly",
        ),
    ] {
        let out = common::refused_config(&format!("{base}{extra}"));
        assert!(out.contains(want), "{extra}: {out}");
    }
    let no_resolver: String = base
        .lines()
        .filter(|l| !l.starts_with("resolver:"))
        .collect::<Vec<_>>()
        .join("\n");
    assert!(common::refused_config(&format!("{no_resolver}\n"))
        .contains("operators require an account resolver to be configured"));
    let bad_preload = base.replace(
        "resolver_preload: {\n",
        "resolver_preload: {\n  AX: \"eyJhbGciOi.x.y\"\n",
    );
    assert!(common::refused_config(&bad_preload).contains("invalid account JWT"));
    assert!(common::refused_config("resolver: URL(\"http://x\")\n")
        .contains("only the MEMORY account resolver"));
}

/// Publishes `<prefix>.probe` from `from` until `sub` (on the other
/// side of a leaf connection) gets one.
async fn crosses(from: &async_nats::Client, prefix: &str, sub: &mut async_nats::Subscriber) {
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    loop {
        from.publish(format!("{prefix}.probe"), "".into())
            .await
            .unwrap();
        if let Ok(Some(_)) = tokio::time::timeout(Duration::from_millis(200), sub.next()).await {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "nothing crossed on {prefix}"
        );
    }
}

/// A leaf node joins an operator-mode hub with a `.creds` file: the hub
/// binds the connection to the user's account, and messages cross
/// between it and the leaf both ways. A user of an account the operator
/// did not sign is refused. Against a flotilla hub, and a nats-server
/// 2.15.1 hub where it is installed.
#[tokio::test]
async fn a_leaf_node_joins_an_operator_hub_with_credentials() {
    let mut op = Operator::new();
    // One leaf connection allowed (the default, as in nats-server, is
    // none).
    let mut limits = unlimited();
    limits["limits"]["leaf"] = 1.into();
    let a = op.account(limits);
    let none = op.account(unlimited());
    let account_key = op.accounts[a].0.public_key();
    let (no_leafs_user, no_leafs_jwt) = op.user(none, user_claims(json!({})));
    let (leaf_user, leaf_jwt) = op.user(a, user_claims(json!({})));
    let (hub_user, hub_jwt) = op.user(a, user_claims(json!({})));
    let stranger = nkeys::KeyPair::new_account();
    let rogue_user = nkeys::KeyPair::new_user();
    let rogue_jwt = mint(
        &stranger,
        &rogue_user.public_key(),
        "user",
        user_claims(json!({})),
    );
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("leaf.creds");
    let rogue = dir.path().join("rogue.creds");
    std::fs::write(&good, creds(&leaf_user, &leaf_jwt)).unwrap();
    std::fs::write(&rogue, creds(&rogue_user, &rogue_jwt)).unwrap();
    let no_leafs = dir.path().join("no-leafs.creds");
    std::fs::write(&no_leafs, creds(&no_leafs_user, &no_leafs_jwt)).unwrap();
    let leaf_of = |port: u16, file: &std::path::Path| {
        common::server()
            .config(&format!(
                "server_name: leaf\nleafnodes {{ remotes: [ {{ url: \"nats-leaf://127.0.0.1:{port}\", credentials: \"{}\" }} ] }}\n",
                file.display()
            ))
            .start()
    };
    for bin in common::flotilla_and_reference() {
        let port = common::free_ports(1)[0];
        let hub = common::server()
            .binary(&bin)
            .config(&format!(
                "server_name: hub\n{}leafnodes {{ listen: \"127.0.0.1:{port}\" }}\n",
                op.config()
            ))
            .start();
        for file in [&rogue, &no_leafs] {
            let refused = leaf_of(port, file);
            assert!(
                refused.wait_log("Leafnode connection closed", Duration::from_secs(10)),
                "{}",
                refused.log_text()
            );
            assert_eq!(hub.json("/leafz")["leafnodes"], 0, "{bin:?} {file:?}");
        }

        let leaf = leaf_of(port, &good);
        let deadline = std::time::Instant::now() + Duration::from_secs(15);
        while hub.json("/leafz")["leafnodes"] != 1 {
            assert!(std::time::Instant::now() < deadline, "{}", hub.log_text());
            std::thread::sleep(Duration::from_millis(50));
        }
        assert_eq!(hub.json("/leafz")["leafs"][0]["account"], account_key);
        let on_hub = connect(&hub.url(), &hub_user, &hub_jwt).await.unwrap();
        let on_leaf = async_nats::connect(leaf.url()).await.unwrap();
        let mut at_hub = on_hub.subscribe("up.>").await.unwrap();
        crosses(&on_leaf, "up", &mut at_hub).await;
        let mut at_leaf = on_leaf.subscribe("down.>").await.unwrap();
        crosses(&on_hub, "down", &mut at_leaf).await;
        // A second leaf of the account is over its limit.
        let second = leaf_of(port, &good);
        assert!(
            second.wait_log("Leafnode connection closed", Duration::from_secs(10)),
            "{}",
            second.log_text()
        );
        assert_eq!(hub.json("/leafz")["leafnodes"], 1);
    }
}

/// Account JWTs' exports, imports and mappings: a service and a stream
/// cross from A to B, a `token_req` stream only with an activation token
/// A signed for B, and B's mapping applies to B's publishes.
#[tokio::test]
async fn account_jwts_export_import_and_map() {
    let mut op = Operator::new();
    // A system account, without which nats-server tracks no latency.
    op.system = Some(op.account(json!({})));
    let a = op.account(json!({
        "limits": serde_json::from_str::<Value>(UNLIMITED).unwrap(),
        "exports": [
            {"subject": "svc", "type": "service",
             "service_latency": {"sampling": 100, "results": "lat.svc"}},
            {"subject": "feed.>", "type": "stream"},
            {"subject": "private.>", "type": "stream", "token_req": true},
            {"subject": "closed.>", "type": "stream", "token_req": true},
        ],
    }));
    let a_key = op.accounts[a].0.public_key();
    let b_key = nkeys::KeyPair::new_account();
    let activation = mint(
        &op.accounts[a].0,
        &b_key.public_key(),
        "activation",
        json!({"subject": "private.>", "kind": "stream"}),
    );
    let b_jwt = mint(
        &op.key,
        &b_key.public_key(),
        "account",
        json!({
            "limits": serde_json::from_str::<Value>(UNLIMITED).unwrap(),
            "imports": [
                {"subject": "svc", "account": a_key, "type": "service"},
                {"subject": "feed.>", "account": a_key, "type": "stream", "local_subject": "a.feed.>"},
                {"subject": "private.>", "account": a_key, "type": "stream", "token": activation},
                {"subject": "closed.>", "account": a_key, "type": "stream"},
            ],
            "mappings": {"m.in": [{"subject": "m.out"}]},
        }),
    );
    op.accounts.push((b_key, b_jwt));
    let b = op.accounts.len() - 1;
    let s = common::server().config(&op.config()).start();
    let (au, au_jwt) = op.user(a, user_claims(json!({})));
    let (bu, bu_jwt) = op.user(b, user_claims(json!({})));
    let a_client = connect(&s.url(), &au, &au_jwt).await.unwrap();
    let b_client = connect(&s.url(), &bu, &bu_jwt).await.unwrap();

    let mut requests = a_client.subscribe("svc").await.unwrap();
    let mut latency = a_client.subscribe("lat.svc").await.unwrap();
    let mut b_all = b_client.subscribe(">").await.unwrap();
    // A request nobody answers comes back after the server read every
    // SUB before it (`flush` only writes): B's own `>` would otherwise
    // take a request that came before A's `svc`, and it would time out.
    // B's `>` is read before B's request, on the same connection.
    let _ = a_client.request("settle.nobody", "".into()).await;
    b_client.flush().await.unwrap();
    let responder = a_client.clone();
    tokio::spawn(async move {
        while let Some(m) = requests.next().await {
            let _ = responder.publish(m.reply.unwrap(), "from A".into()).await;
        }
    });
    let answer = b_client.request("svc", "".into()).await.unwrap();
    assert_eq!(&answer.payload[..], b"from A");
    // The export's `service_latency`: A hears how long B's request took.
    let report = tokio::time::timeout(Duration::from_secs(5), latency.next())
        .await
        .expect("a latency report")
        .unwrap();
    let report: Value = serde_json::from_slice(&report.payload).unwrap();
    assert_eq!(report["status"], 200, "{report}");
    assert_eq!(
        report["requestor"]["acc"],
        op.accounts[b].0.public_key(),
        "{report}"
    );

    for subject in ["feed.1", "private.1", "closed.1", "feed.end"] {
        a_client.publish(subject, "".into()).await.unwrap();
    }
    // Delivered to B before B publishes: the server answers this only
    // after it routed A's publishes before it.
    let _ = a_client.request("settle.nobody", "".into()).await;
    b_client.publish("m.in", "".into()).await.unwrap();
    b_client.publish("b.end", "".into()).await.unwrap();
    let mut seen = common::received_until(&mut b_all, "a.feed.end").await;
    // B's own request and its answer are B's too.
    seen.retain(|s| !s.starts_with("_INBOX.") && s != "svc");
    assert_eq!(seen, ["a.feed.1", "private.1"], "closed.> needs a token");
    assert_eq!(
        common::received_until(&mut b_all, "b.end").await,
        ["m.out"],
        "B's mapping"
    );
}

/// An API request's answer as JSON.
async fn js_api(c: &async_nats::Client, subject: &str, body: &str) -> Value {
    let m = c
        .request(subject.to_string(), body.to_string().into())
        .await
        .unwrap_or_else(|e| panic!("{subject}: {e}"));
    serde_json::from_slice(&m.payload).unwrap()
}

/// An account JWT whose `limits` set `mem_storage` or `disk_storage`
/// has JetStream with those limits, as nats-server reads them; one
/// that sets neither has none (10039), nor one whose tiers set neither.
#[tokio::test]
async fn account_jwts_give_jetstream_with_their_limits() {
    let mut op = Operator::new();
    let mut js_limits = unlimited();
    for (k, v) in [
        ("mem_storage", json!(-1)),
        ("disk_storage", json!(1 << 20)),
        ("streams", json!(1)),
        ("consumer", json!(-1)),
        ("max_ack_pending", json!(-1)),
    ] {
        js_limits["limits"][k] = v;
    }
    let with_js = op.account(js_limits.clone());
    let without = op.account(unlimited());
    // Tiers without storage: no JetStream, flat limits or not.
    let mut tiered = js_limits.clone();
    tiered["limits"]["tiered_limits"] = json!({"R1": {"streams": 1}});
    let tiered = op.account(tiered);
    // nats-server's JetStream in operator mode needs a system account.
    let system = op.account(unlimited());
    let config = format!(
        "{}system_account: {}\n",
        op.config(),
        op.accounts[system].0.public_key()
    );
    let s = common::server().js().config(&config).start();
    let login = |account| {
        let (user, jwt) = op.user(account, user_claims(json!({})));
        let url = s.url();
        async move { connect(&url, &user, &jwt).await.unwrap() }
    };
    let c = login(with_js).await;
    let info = js_api(&c, "$JS.API.INFO", "").await;
    assert_eq!(
        info["limits"],
        json!({
            "max_memory": -1, "max_storage": 1 << 20, "max_streams": 1,
            "max_consumers": -1, "max_ack_pending": -1,
            "memory_max_stream_bytes": -1, "storage_max_stream_bytes": -1,
            "max_bytes_required": false,
        }),
        "{info}"
    );
    let created = js_api(
        &c,
        "$JS.API.STREAM.CREATE.S",
        r#"{"name":"S","subjects":["s"]}"#,
    )
    .await;
    assert_eq!(created["did_create"], true, "{created}");
    let second = js_api(
        &c,
        "$JS.API.STREAM.CREATE.T",
        r#"{"name":"T","subjects":["t"]}"#,
    )
    .await;
    assert_eq!(second["error"]["err_code"], 10027, "{second}");
    for account in [without, tiered] {
        let c = login(account).await;
        let info = js_api(&c, "$JS.API.INFO", "").await;
        assert_eq!(info["error"]["err_code"], 10039, "{info}");
    }
    let jsz = s.json("/jsz?accounts=true");
    // `id` is the account; `name` its JWT's `name` (`mint`: "account").
    let details = jsz["account_details"].as_array().unwrap();
    assert!(details.iter().all(|d| d["name"] == "account"), "{jsz}");
    let names: Vec<&str> = details.iter().filter_map(|d| d["id"].as_str()).collect();
    assert!(
        names.contains(&op.accounts[with_js].0.public_key().as_str()),
        "{jsz}"
    );
    assert!(
        !names.contains(&op.accounts[without].0.public_key().as_str()),
        "{jsz}"
    );
}

/// A tier's JetStream limits from an account JWT's `tiered_limits`, as
/// nats-server enforces and reports them: account info's `limits` all 0
/// and each tier in `tiers`; streams, storage and consumers counted
/// against the tier of the stream's replicas.
#[tokio::test]
async fn tiered_jwt_limits_hold_per_tier() {
    let mut op = Operator::new();
    let mut tiered = unlimited();
    tiered["limits"]["tiered_limits"] = json!({
        "R1": {"mem_storage": -1, "disk_storage": 4096, "streams": 2, "consumer": 1,
               "max_ack_pending": 10},
        "R3": {"mem_storage": 1024, "disk_storage": -1, "streams": 5, "consumer": -1},
    });
    let tiered = op.account(tiered);
    let system = op.account(unlimited());
    let config = format!(
        "{}system_account: {}\n",
        op.config(),
        op.accounts[system].0.public_key()
    );
    let s = common::server().js().config(&config).start();
    let (user, jwt) = op.user(tiered, user_claims(json!({})));
    let c = connect(&s.url(), &user, &jwt).await.unwrap();
    let zero = json!({
        "max_memory": 0, "max_storage": 0, "max_streams": 0, "max_consumers": 0,
        "max_ack_pending": 0, "memory_max_stream_bytes": 0, "storage_max_stream_bytes": 0,
        "max_bytes_required": false,
    });
    let r1_limits = json!({
        "max_memory": -1, "max_storage": 4096, "max_streams": 2, "max_consumers": 1,
        "max_ack_pending": 10, "memory_max_stream_bytes": -1, "storage_max_stream_bytes": -1,
        "max_bytes_required": false,
    });
    let r3_limits = json!({
        "max_memory": 1024, "max_storage": -1, "max_streams": 5, "max_consumers": -1,
        "max_ack_pending": -1, "memory_max_stream_bytes": -1, "storage_max_stream_bytes": -1,
        "max_bytes_required": false,
    });
    let tier = |limits: &Value, storage: u64, reserved: u64, streams: u64, consumers: u64| {
        json!({
            "memory": 0, "storage": storage, "reserved_memory": 0, "reserved_storage": reserved,
            "streams": streams, "consumers": consumers, "limits": limits,
        })
    };
    let info = js_api(&c, "$JS.API.INFO", "").await;
    assert_eq!(info["limits"], zero, "{info}");
    assert_eq!(
        info["tiers"],
        json!({"R1": tier(&r1_limits, 0, 0, 0, 0), "R3": tier(&r3_limits, 0, 0, 0, 0)}),
        "{info}"
    );

    // A stream reserving more than its tier's storage: 10047.
    let too_big = js_api(
        &c,
        "$JS.API.STREAM.CREATE.BIG",
        r#"{"name":"BIG","subjects":["big"],"max_bytes":8192}"#,
    )
    .await;
    assert_eq!(too_big["error"]["err_code"], 10047, "{too_big}");
    for (name, body) in [
        ("A", r#"{"name":"A","subjects":["a"],"max_bytes":1024}"#),
        ("B", r#"{"name":"B","subjects":["b"]}"#),
    ] {
        let created = js_api(&c, &format!("$JS.API.STREAM.CREATE.{name}"), body).await;
        assert_eq!(created["did_create"], true, "{created}");
    }
    // The tier's two streams are made.
    let third = js_api(
        &c,
        "$JS.API.STREAM.CREATE.C",
        r#"{"name":"C","subjects":["c"]}"#,
    )
    .await;
    assert_eq!(third["error"]["err_code"], 10027, "{third}");

    // One consumer a stream, and ack pending at most the tier's.
    let consumer = |stream: &str, pending: u64| {
        format!(
            r#"{{"stream_name":"{stream}","config":{{"ack_policy":"explicit","max_ack_pending":{pending}}}}}"#
        )
    };
    let pending = js_api(&c, "$JS.API.CONSUMER.CREATE.B", &consumer("B", 20)).await;
    assert_eq!(pending["error"]["err_code"], 10121, "{pending}");
    let first = js_api(&c, "$JS.API.CONSUMER.CREATE.B", &consumer("B", 5)).await;
    assert!(first.get("error").is_none(), "{first}");
    let second = js_api(&c, "$JS.API.CONSUMER.CREATE.B", &consumer("B", 5)).await;
    assert_eq!(second["error"]["err_code"], 10026, "{second}");

    // The tier's storage: a publish past it is refused.
    let js = async_nats::jetstream::new(c.clone());
    let body = vec![b'x'; 1500];
    js.publish("b", body.clone().into())
        .await
        .unwrap()
        .await
        .expect("the first fits");
    let mut refused = None;
    for _ in 0..3 {
        match js.publish("b", body.clone().into()).await.unwrap().await {
            Ok(_) => {}
            Err(e) => {
                refused = Some(e.to_string());
                break;
            }
        }
    }
    let refused = refused.expect("a publish past the tier's storage is refused");
    assert!(refused.contains("10002"), "{refused}");

    let info = js_api(&c, "$JS.API.INFO", "").await;
    assert_eq!(info["streams"], 2, "{info}");
    assert_eq!(info["consumers"], 1, "{info}");
    let r1 = &info["tiers"]["R1"];
    assert_eq!(r1["streams"], 2, "{info}");
    assert_eq!(r1["consumers"], 1, "{info}");
    assert_eq!(r1["reserved_storage"], 1024, "{info}");
    assert_eq!(info["reserved_storage"], 1024, "{info}");
    let stored = r1["storage"].as_u64().unwrap();
    assert!((1500..4096).contains(&stored), "{info}");
    assert_eq!(info["storage"], stored, "{info}");
    assert_eq!(info["tiers"]["R3"], tier(&r3_limits, 0, 0, 0, 0), "{info}");
}
