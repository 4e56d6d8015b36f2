//! Client TLS through async-nats, with certificates made here (rcgen):
//! TLS after INFO and TLS first, mutual TLS, the `--tls*` flags, and
//! what a server must survive: plain text, garbage and stalled
//! handshakes, unknown certificates and bad certificate files.

#[path = "../common/mod.rs"]
mod common;

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use common::certs::Certs;
use futures::StreamExt;
use rcgen::CertificateParams;

/// A round trip of one message through `client`.
async fn works(client: &async_nats::Client) {
    let mut sub = client.subscribe("tls.ok").await.unwrap();
    client.publish("tls.ok", "x".into()).await.unwrap();
    let m = tokio::time::timeout(Duration::from_secs(5), sub.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&m.payload[..], b"x");
}

/// The INFO line a plain TCP client reads first.
fn plain_info(addr: &str) -> (std::net::TcpStream, serde_json::Value) {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    while !line.ends_with(b"\r\n") {
        s.read_exact(&mut byte).unwrap();
        line.push(byte[0]);
    }
    let text = String::from_utf8(line).unwrap();
    let json = text.trim_start_matches("INFO ").trim();
    (s, serde_json::from_str(json).unwrap())
}

/// Whether the server closes `s` within `within`.
fn closed_within(s: &mut std::net::TcpStream, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    s.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let mut buf = [0u8; 512];
    while Instant::now() < deadline {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {}
            Err(_) => return true,
        }
    }
    false
}

#[tokio::test]
async fn a_client_speaks_tls_after_info() {
    let certs = Certs::new();
    let s = common::server().config(&certs.block("")).start();
    let (_, info) = plain_info(&s.addr());
    assert_eq!(info["tls_required"], true, "{info}");
    assert!(info.get("tls_verify").is_none(), "{info}");
    let client = certs.client(None).connect(s.url()).await.unwrap();
    works(&client).await;
    let varz = s.json("/varz");
    assert_eq!(varz["tls_required"], true, "{varz}");
}

#[tokio::test]
async fn mutual_tls_admits_only_certificates_the_ca_signed() {
    let certs = Certs::new();
    let s = common::server()
        .config(&certs.block("  verify: true\n"))
        .start();
    let (_, info) = plain_info(&s.addr());
    assert_eq!(info["tls_verify"], true, "{info}");
    let client = certs.client(Some("client")).connect(s.url()).await.unwrap();
    works(&client).await;
    for refused in [None, Some("rogue")] {
        let attempt = certs
            .client(refused)
            .connection_timeout(Duration::from_secs(2))
            .connect(s.url());
        let outcome = tokio::time::timeout(Duration::from_secs(10), attempt).await;
        assert!(!matches!(outcome, Ok(Ok(_))), "{refused:?} was let in");
    }
    assert!(s.wait_log("TLS handshake error", Duration::from_secs(5)));
    // The first client never noticed.
    works(&client).await;
}

#[tokio::test]
async fn handshake_first_sends_info_encrypted() {
    let certs = Certs::new();
    let s = common::server()
        .config(&certs.block("  handshake_first: true\n"))
        .start();
    let client = certs
        .client(None)
        .tls_first()
        .connect(s.url())
        .await
        .unwrap();
    works(&client).await;
    // A client waiting for a plain INFO hears nothing, and is closed at
    // the TLS timeout.
    let mut plain = std::net::TcpStream::connect(s.addr()).unwrap();
    assert!(closed_within(&mut plain, Duration::from_secs(5)));
}

#[tokio::test]
async fn handshake_first_auto_serves_both_kinds_of_client() {
    let certs = Certs::new();
    for setting in ["\"auto\"", "\"300ms\""] {
        let s = common::server()
            .config(&certs.block(&format!("  handshake_first: {setting}\n")))
            .start();
        let first = certs
            .client(None)
            .tls_first()
            .connect(s.url())
            .await
            .unwrap();
        works(&first).await;
        // This one waits for INFO, gets it after the delay, then upgrades.
        let after_info = certs.client(None).connect(s.url()).await.unwrap();
        works(&after_info).await;
    }
}

#[tokio::test]
async fn verify_and_map_takes_the_user_from_the_certificate() {
    let certs = Certs::new();
    // One client named by an e-mail address, one by its subject.
    let mut by_email = CertificateParams::new(Vec::<String>::new()).unwrap();
    by_email.subject_alt_names = vec![rcgen::SanType::Rfc822Name(
        "alice@example.com".try_into().unwrap(),
    )];
    certs.issue("alice", by_email);
    let mut by_subject = CertificateParams::new(Vec::<String>::new()).unwrap();
    by_subject.distinguished_name = rcgen::DistinguishedName::new();
    by_subject
        .distinguished_name
        .push(rcgen::DnType::CommonName, "bob");
    by_subject
        .distinguished_name
        .push(rcgen::DnType::OrganizationName, "Acme");
    certs.issue("bob", by_subject);

    let s = common::server()
        .config(&format!(
            "{}authorization {{ users: [\n  {{user: \"alice@example.com\", permissions: {{publish: \"tls.ok\", subscribe: \"tls.ok\"}}}}\n  {{user: \"O=Acme,CN=bob\"}}\n] }}\n",
            certs.block("  verify_and_map: true\n")
        ))
        .start();
    let mut mapped = Vec::new();
    for user in ["alice", "bob"] {
        let client = certs.client(Some(user)).connect(s.url()).await.unwrap();
        works(&client).await;
        mapped.push(client);
    }
    // A certificate the CA signed that names no user is refused.
    let nobody = certs
        .client(Some("client"))
        .connection_timeout(Duration::from_secs(2))
        .connect(s.url())
        .await
        .expect_err("a certificate naming no user was let in");
    assert_eq!(
        nobody.kind(),
        async_nats::ConnectErrorKind::AuthorizationViolation,
        "{nobody}"
    );
    let users = s.authorized_users();
    assert!(users.iter().any(|u| u == "alice@example.com"), "{users:?}");
    assert!(users.iter().any(|u| u == "O=Acme,CN=bob"), "{users:?}");
}

#[tokio::test]
async fn the_tls_flags_turn_it_on() {
    let certs = Certs::new();
    let path = |name: &str| certs.path(name).display().to_string();
    let s = common::server()
        .arg("--tls")
        .arg("--tlscert")
        .arg(&path("server.pem"))
        .arg("--tlskey")
        .arg(&path("server-key.pem"))
        .arg("--tlsverify")
        .arg("--tlscacert")
        .arg(&path("ca.pem"))
        .start();
    let (_, info) = plain_info(&s.addr());
    assert_eq!(info["tls_required"], true);
    assert_eq!(info["tls_verify"], true);
    let client = certs.client(Some("client")).connect(s.url()).await.unwrap();
    works(&client).await;
}

#[tokio::test]
async fn hostile_connections_close_alone_within_the_timeout() {
    let certs = Certs::new();
    let s = common::server()
        .config(&certs.block("  timeout: 0.5\n"))
        .start();
    let client = certs.client(None).connect(s.url()).await.unwrap();

    // Plain text to a TLS port.
    let (mut plain, _) = plain_info(&s.addr());
    plain.write_all(b"CONNECT {}\r\nPING\r\n").unwrap();
    assert!(closed_within(&mut plain, Duration::from_secs(5)));
    // Garbage where a ClientHello belongs.
    let (mut garbage, _) = plain_info(&s.addr());
    garbage
        .write_all(&[0x16, 0x03, 0x01, 0xff, 0xff, 0xde, 0xad])
        .unwrap();
    garbage.write_all(&[0xbe; 600]).unwrap();
    assert!(closed_within(&mut garbage, Duration::from_secs(5)));
    // A handshake that stalls: closed at the timeout, not before.
    let started = Instant::now();
    let (mut stalled, _) = plain_info(&s.addr());
    assert!(closed_within(&mut stalled, Duration::from_secs(5)));
    assert!(started.elapsed() >= Duration::from_millis(400));
    // nats-server logs a client's handshake timeout at debug level only;
    // flotilla says it where operators look.
    if !common::reference_server() {
        assert!(s.wait_log("TLS handshake timeout", Duration::from_secs(5)));
    }
    assert!(s.wait_log("TLS handshake error: ", Duration::from_secs(5)));
    // Everyone else was served throughout.
    works(&client).await;
    let again = certs.client(None).connect(s.url()).await.unwrap();
    works(&again).await;
}

#[test]
fn bad_certificate_files_are_refused_at_start() {
    let certs = Certs::new();
    let check = common::refused_config;
    let missing = certs.block("").replace("server-key.pem", "nope.pem");
    assert!(
        check(&missing).contains("error parsing X509 certificate/key pair"),
        "{}",
        check(&missing)
    );
    std::fs::write(certs.path("junk.pem"), "not a certificate\n").unwrap();
    let junk = certs.block("").replace("/server.pem", "/junk.pem");
    assert!(check(&junk).contains("no certificate found"));
    let no_key = format!(
        "tls {{ cert_file: \"{}\" }}\n",
        certs.path("server.pem").display()
    );
    assert!(check(&no_key).contains("missing 'key_file' in TLS configuration"));
    let verify_without_ca = format!(
        "tls {{ cert_file: \"{}\", key_file: \"{}\", verify: true }}\n",
        certs.path("server.pem").display(),
        certs.path("server-key.pem").display()
    );
    assert!(check(&verify_without_ca).contains("TLS verify requires 'ca_file'"));
    for (setting, said) in [
        ("min_version: \"1.1\"", "unsupported TLS version: TLS 1.1"),
        (
            "cipher_suites: [\"TLS_NOPE\"]",
            "unrecognized cipher TLS_NOPE",
        ),
        (
            "cipher_suites: [\"TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA\"]",
            "cipher suite TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA is not supported by flotilla",
        ),
        ("cipher_suites: []", "'cipher_suites' cannot be empty"),
        (
            "curve_preferences: [\"CurveP521\"]",
            "curve preference CurveP521 is not supported by flotilla",
        ),
        (
            "curve_preferences: [\"Curve9\"]",
            "unrecognized curve preference Curve9",
        ),
        (
            "pinned_certs: [\"abc\"]",
            "'pinned_certs' key abc does not look like hex-encoded sha256",
        ),
        (
            "cert_store: \"WindowsCurrentUser\"",
            "\"cert_store\" in a tls block is not supported by flotilla",
        ),
    ] {
        let out = check(&certs.block(&format!("  {setting}\n")));
        assert!(out.contains(said), "{setting}: {out}");
    }
    assert!(check(&certs.block("  bogus: 1\n"))
        .contains("error parsing tls config, unknown field \"bogus\""));
    assert!(
        check(&certs.block("  timeout: \"x\"\n")).contains("error parsing tls config, 'timeout'")
    );
    assert!(check(&certs.block("  handshake_first: \"sometimes\"\n"))
        .contains("field \"handshake_first\"'s value \"sometimes\" is invalid"));
}

#[tokio::test]
async fn a_reload_takes_renewed_certificates_and_keeps_connections() {
    let old = Certs::new();
    let s = common::server().config(&old.block("")).start();
    let kept = old.client(None).connect(s.url()).await.unwrap();
    works(&kept).await;

    // The certificate is renewed in place, by another CA.
    let renewed = Certs::new();
    for file in ["server.pem", "server-key.pem"] {
        std::fs::copy(renewed.path(file), old.path(file)).unwrap();
    }
    s.signal(libc::SIGHUP);
    assert!(s.wait_log("Reloaded server configuration", Duration::from_secs(5)));

    let fresh = renewed.client(None).connect(s.url()).await.unwrap();
    works(&fresh).await;
    let stale = old
        .client(None)
        .connection_timeout(Duration::from_secs(2))
        .connect(s.url());
    let outcome = tokio::time::timeout(Duration::from_secs(10), stale).await;
    assert!(
        !matches!(outcome, Ok(Ok(_))),
        "the old certificate is still served"
    );
    works(&kept).await;
}

#[tokio::test]
async fn monitoring_over_https() {
    let certs = Certs::new();
    // Mutual TLS for clients; monitoring asks for no client certificate.
    let s = common::server()
        .no_monitoring()
        .config(&format!(
            "{}https_port: -1\n",
            certs.block("  verify: true\n")
        ))
        .start();
    let log = s.log_text();
    let port: u16 = log
        .split("Starting https monitor on 127.0.0.1:")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no https monitor in the log:\n{log}"));

    let mut roots = rustls::RootCertStore::empty();
    let ca = std::fs::read(certs.path("ca.pem")).unwrap();
    for cert in rustls_pki_types::pem::PemObject::pem_slice_iter(&ca) {
        roots.add(cert.unwrap()).unwrap();
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    let name = rustls_pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let mut tls = connector.connect(name, tcp).await.unwrap();
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    tls.write_all(b"GET /varz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut response = String::new();
    tls.read_to_string(&mut response).await.unwrap();
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    let body = response.split("\r\n\r\n").nth(1).unwrap();
    let varz: serde_json::Value = serde_json::from_str(body).unwrap();
    assert_eq!(varz["tls_verify"], true, "{varz}");
    assert_eq!(varz["https_port"], -1, "{varz}");

    // Both ports, or https without TLS, are refused as nats-server does.
    let refused = common::refused_config;
    assert!(refused("https_port: 8443\n").contains("TLS cert and key required for HTTPS"));
    assert!(refused(&format!(
        "{}https_port: 8443\nhttp_port: 8222\n",
        certs.block("")
    ))
    .contains("can't specify both HTTP (8222) and HTTPs (8443) ports"));
}

/// The cluster port of `server`, from /varz.
fn cluster_port(server: &common::Server) -> u16 {
    server.json("/varz")["cluster"]["cluster_port"]
        .as_u64()
        .unwrap() as u16
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_routes_carry_an_r3_stream() {
    use common::replicated::{check_replicas, cluster_configured, connect, created};
    let certs = Certs::new();
    let all = cluster_configured(3, &certs.cluster_block("route"));
    let clients = connect(&all).await;
    created(
        &clients[0],
        serde_json::json!({"name": "SECURE", "subjects": ["secure.>"], "num_replicas": 3}),
    )
    .await;
    let js = async_nats::jetstream::new(clients[1].clone());
    let mut acks = Vec::new();
    for i in 0..50 {
        let id = format!("m{i}");
        let ack = js
            .publish(format!("secure.{i}"), id.clone().into())
            .await
            .unwrap()
            .await
            .unwrap();
        acks.push((id, ack.sequence));
    }
    let names: Vec<String> = all
        .iter()
        .map(|s| s.json("/varz")["server_name"].as_str().unwrap().to_string())
        .collect();
    check_replicas(&names, &clients[2], "SECURE", &acks).await;

    let varz = all[0].json("/varz");
    assert_eq!(varz["cluster"]["tls_required"], true, "{varz}");
    assert_eq!(varz["cluster"]["tls_verify"], true, "{varz}");

    // The route port speaks nothing in plain text: a route's CONNECT is
    // a failed handshake, logged, and the connection is closed.
    let port = cluster_port(&all[0]);
    let mut plain = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    plain
        .write_all(b"CONNECT {\"name\":\"intruder\"}\r\nPING\r\n")
        .unwrap();
    assert!(closed_within(&mut plain, Duration::from_secs(5)));
    assert!(all[0].wait_log("TLS route handshake error", Duration::from_secs(5)));
}

#[tokio::test]
async fn a_route_with_a_foreign_certificate_is_refused() {
    let certs = Certs::new();
    let servers = common::routed_servers(&[
        certs.cluster_block("route"),
        certs.cluster_block("rogue-route"),
    ]);
    let (trusted, foreign) = (&servers[0], &servers[1]);
    // Each side refuses the other: the trusted server the foreign
    // certificate, whether it dialed or was dialed.
    assert!(trusted.wait_log("TLS route handshake error", Duration::from_secs(10)));
    assert!(foreign.wait_log("TLS route handshake error", Duration::from_secs(10)));
    std::thread::sleep(Duration::from_secs(2));
    for server in [trusted, foreign] {
        assert_eq!(server.json("/routez")["num_routes"], 0);
    }
}

/// A peer whose certificate stops being trusted (here it restarts with
/// a foreign one) is redialed on every lane of the Raft transport every
/// 250 ms and by its route every second, each attempt failing alike. The
/// error is logged once per 30-second window, not once per attempt.
/// nats-server logs every failed handshake: quieter by design, so this
/// runs on flotilla only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_peer_is_logged_once_per_window_not_per_redial() {
    use common::replicated::{cluster_configured, connect, created};
    if common::reference_server() {
        return;
    }
    let certs = Certs::new();
    let mut all = cluster_configured(3, &certs.cluster_block("route"));
    let clients = connect(&all).await;
    created(
        &clients[0],
        serde_json::json!({"name": "R", "subjects": ["r.>"], "num_replicas": 3}),
    )
    .await;
    all[2].kill9();
    let conf = all[2].config_file();
    let text = std::fs::read_to_string(&conf).unwrap();
    let rogue = text
        .replace("route.pem", "rogue-route.pem")
        .replace("route-key.pem", "rogue-route-key.pem");
    assert_ne!(text, rogue);
    std::fs::write(&conf, rogue).unwrap();
    all[2].restart();
    let refused = "TLS route handshake error";
    assert!(all[0].wait_log(refused, Duration::from_secs(10)));
    // Some 40 redials by the Raft transport alone.
    tokio::time::sleep(Duration::from_secs(5)).await;
    for (i, s) in all.iter().enumerate() {
        let log = s.log_text();
        let lines = log.lines().filter(|l| l.contains(refused)).count();
        assert!(lines <= 6, "server {i}: {lines} lines:\n{log}");
    }
}

#[test]
fn cluster_tls_needs_a_ca_to_verify_peers() {
    let certs = Certs::new();
    let pair = format!(
        "cert_file: \"{}\"\nkey_file: \"{}\"\n",
        certs.path("route.pem").display(),
        certs.path("route-key.pem").display()
    );
    for (extra, expected) in [
        ("", "cluster TLS requires 'ca_file'"),
        (
            &*format!(
                "ca_file: \"{}\"\nverify_and_map: true\n",
                certs.path("ca.pem").display()
            ),
            "\"verify_and_map\" in a cluster tls block is not supported",
        ),
    ] {
        let text = format!("cluster {{\nport: -1\ntls {{\n{pair}{extra}}}\n}}\n");
        let said = common::refused_config(&text);
        assert!(said.contains(expected), "{text}: {said}");
    }
}

/// A rustls client trusting the test CA, offering only `versions` and
/// `suites` (all of the provider's when empty), as `name`'s certificate
/// holder if given.
fn narrow_client(
    certs: &Certs,
    versions: &[&'static rustls::SupportedProtocolVersion],
    suites: &[rustls::CipherSuite],
    name: Option<&str>,
) -> tokio_rustls::TlsConnector {
    use rustls_pki_types::pem::PemObject;
    let mut provider = rustls::crypto::ring::default_provider();
    if !suites.is_empty() {
        provider
            .cipher_suites
            .retain(|s| suites.contains(&s.suite()));
    }
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_pki_types::CertificateDer::pem_file_iter(certs.path("ca.pem")).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let builder = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(provider))
        .with_protocol_versions(versions)
        .unwrap()
        .with_root_certificates(roots);
    let config = match name {
        Some(name) => {
            let chain =
                rustls_pki_types::CertificateDer::pem_file_iter(certs.path(&format!("{name}.pem")))
                    .unwrap()
                    .map(Result::unwrap)
                    .collect();
            let key = rustls_pki_types::PrivateKeyDer::from_pem_file(
                certs.path(&format!("{name}-key.pem")),
            )
            .unwrap();
            builder.with_client_auth_cert(chain, key).unwrap()
        }
        None => builder.with_no_client_auth(),
    };
    tokio_rustls::TlsConnector::from(std::sync::Arc::new(config))
}

/// Whether a TLS handshake through `connector` succeeds, after INFO;
/// with a client certificate the server may still close the connection
/// right after (TLS 1.3 checks it then), so a round trip is made.
async fn handshake(server: &common::Server, connector: tokio_rustls::TlsConnector) -> bool {
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
    let mut tcp = tokio::net::TcpStream::connect(server.addr()).await.unwrap();
    let mut info = Vec::new();
    let mut byte = [0u8; 1];
    while !info.ends_with(b"\r\n") {
        tcp.read_exact(&mut byte).await.unwrap();
        info.push(byte[0]);
    }
    let name = rustls_pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let Ok(Ok(mut tls)) =
        tokio::time::timeout(Duration::from_secs(5), connector.connect(name, tcp)).await
    else {
        return false;
    };
    if tls.write_all(b"CONNECT {}\r\nPING\r\n").await.is_err() {
        return false;
    }
    let mut lines = tokio::io::BufReader::new(tls).lines();
    let answered = tokio::time::timeout(Duration::from_secs(5), async {
        while let Ok(Some(line)) = lines.next_line().await {
            if line == "PONG" {
                return true;
            }
        }
        false
    });
    answered.await.unwrap_or(false)
}

#[tokio::test]
async fn min_version_and_cipher_suites_narrow_what_is_offered() {
    use rustls::version::{TLS12, TLS13};
    use rustls::CipherSuite::*;
    let certs = Certs::new();
    let s = common::server()
        .config(&certs.block("  min_version: \"1.3\"\n"))
        .start();
    assert!(handshake(&s, narrow_client(&certs, &[&TLS13], &[], None)).await);
    assert!(!handshake(&s, narrow_client(&certs, &[&TLS12], &[], None)).await);

    let s = common::server()
        .config(&certs.block(
            "  cipher_suites: [\"TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384\"]\n  curve_preferences: [\"CurveP384\", \"X25519\"]\n",
        ))
        .start();
    let tls12 = |suite| narrow_client(&certs, &[&TLS12], &[suite], None);
    assert!(handshake(&s, tls12(TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384)).await);
    assert!(!handshake(&s, tls12(TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256)).await);
    // TLS 1.3's suites are not narrowed, as in nats-server.
    assert!(handshake(&s, narrow_client(&certs, &[&TLS13], &[], None)).await);
    // async-nats gets in as usual.
    works(&certs.client(None).connect(s.url()).await.unwrap()).await;
}

#[tokio::test]
async fn pinned_certs_admit_only_the_pinned_keys() {
    use rustls_pki_types::pem::PemObject;
    use sha2::Digest;
    let certs = Certs::new();
    certs.issue(
        "other",
        CertificateParams::new(vec!["other.example".to_string()]).unwrap(),
    );
    let der = rustls_pki_types::CertificateDer::pem_file_iter(certs.path("client.pem"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap();
    let (_, cert) = x509_parser::parse_x509_certificate(&der).unwrap();
    let pin =
        data_encoding::HEXLOWER.encode(&sha2::Sha256::digest(cert.tbs_certificate.subject_pki.raw));
    let s = common::server()
        .config(&certs.block(&format!(
            "  verify: true\n  pinned_certs: [\"{}\"]\n",
            pin.to_uppercase()
        )))
        .start();
    use rustls::version::{TLS12, TLS13};
    assert!(
        handshake(
            &s,
            narrow_client(&certs, &[&TLS13, &TLS12], &[], Some("client"))
        )
        .await
    );
    assert!(
        !handshake(
            &s,
            narrow_client(&certs, &[&TLS13, &TLS12], &[], Some("other"))
        )
        .await
    );
    assert!(s.wait_log("certificate not pinned", Duration::from_secs(5)));
    works(&certs.client(Some("client")).connect(s.url()).await.unwrap()).await;
}
