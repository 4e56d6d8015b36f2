//! TLS with rustls: the configurations built from PEM files (checked when
//! options are validated, so `-t` and a bad reload catch a bad
//! certificate), and the handshakes, bounded by the TLS timeout. Clients
//! handshake after the plain-text INFO (the default) or before it
//! (`handshake_first`); routes and Raft connections before anything
//! ([`RouteTls`]).

use std::path::Path;
use std::sync::Arc;

use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;
use tokio_rustls::{TlsAcceptor, TlsConnector};

use config::options::TlsOptions;

/// The rustls configuration `o` describes, or nats-server's message for
/// what is wrong with it.
pub fn server_config(o: &TlsOptions) -> Result<Arc<ServerConfig>, String> {
    let (certs, key) = pair(o)?;
    let provider = provider(o)?;
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(versions(o))
        .map_err(|e| format!("error building TLS configuration: {e}"))?;
    let builder = match (&o.ca_file, o.verify) {
        (None, true) => return Err("TLS verify requires 'ca_file'".into()),
        (Some(ca_file), true) => {
            let verifier = WebPkiClientVerifier::builder_with_provider(roots(ca_file)?, provider)
                .build()
                .map_err(|e| format!("failed to use root ca certificate: {e}"))?;
            builder.with_client_cert_verifier(verifier)
        }
        _ => builder.with_no_client_auth(),
    };
    let config = builder
        .with_single_cert(certs, key)
        .map_err(|e| format!("error parsing X509 certificate/key pair: {e}"))?;
    Ok(Arc::new(config))
}

/// rustls's ring provider, narrowed to `cipher_suites` (TLS 1.2's; TLS
/// 1.3's stay, as Go does not configure them) and ordered by
/// `curve_preferences`.
fn provider(o: &TlsOptions) -> Result<Arc<rustls::crypto::CryptoProvider>, String> {
    let mut provider = rustls::crypto::ring::default_provider();
    if !o.cipher_suites.is_empty() {
        let all = std::mem::take(&mut provider.cipher_suites);
        let tls13 = all.iter().filter(|s| s.tls13().is_some()).copied();
        let mut chosen: Vec<rustls::SupportedCipherSuite> = tls13.collect();
        for name in &o.cipher_suites {
            let found = all
                .iter()
                .find(|s| s.suite().as_str() == Some(name.as_str()));
            if let Some(suite) = found.filter(|s| s.tls13().is_none()) {
                chosen.push(*suite);
            }
        }
        provider.cipher_suites = chosen;
    }
    if !o.curve_preferences.is_empty() {
        provider.kx_groups = o
            .curve_preferences
            .iter()
            .map(|name| curve(name))
            .collect::<Result<_, _>>()?;
    }
    Ok(Arc::new(provider))
}

/// TLS 1.3 alone with `min_version: "1.3"`, else 1.2 and 1.3.
fn versions(o: &TlsOptions) -> &'static [&'static rustls::SupportedProtocolVersion] {
    static TLS13_ONLY: &[&rustls::SupportedProtocolVersion] = &[&rustls::version::TLS13];
    if o.min_tls13 {
        TLS13_ONLY
    } else {
        rustls::DEFAULT_VERSIONS
    }
}

/// A curve by Go's name (nats-server's `curvePreferenceMap`).
fn curve(name: &str) -> Result<&'static dyn rustls::crypto::SupportedKxGroup, String> {
    use rustls::crypto::ring::kx_group;
    match name {
        "X25519" => Ok(kx_group::X25519),
        "CurveP256" => Ok(kx_group::SECP256R1),
        "CurveP384" => Ok(kx_group::SECP384R1),
        "CurveP521" | "X25519MLKEM768" | "SecP256r1MLKEM768" | "SecP384r1MLKEM1024" => Err(
            format!("curve preference {name} is not supported by flotilla"),
        ),
        _ => Err(format!("unrecognized curve preference {name}")),
    }
}

/// Whether the peer on `conn` may stay under `pinned` (nats-server's
/// `matchesPinnedCert`): no pins, or its certificate's
/// SubjectPublicKeyInfo hashes to one of them.
pub fn pinned(pinned: &std::collections::BTreeSet<String>, conn: &rustls::CommonState) -> bool {
    use sha2::Digest;
    if pinned.is_empty() {
        return true;
    }
    let Some(cert) = conn.peer_certificates().and_then(|c| c.first()) else {
        return false;
    };
    let Ok((_, cert)) = x509_parser::parse_x509_certificate(cert) else {
        return false;
    };
    let digest = sha2::Sha256::digest(cert.tbs_certificate.subject_pki.raw);
    pinned.contains(&data_encoding::HEXLOWER.encode(&digest))
}

/// The certificate chain and key `o` names.
fn pair(o: &TlsOptions) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), String> {
    let Some(cert_file) = &o.cert_file else {
        return Err("missing 'cert_file' in TLS configuration".into());
    };
    let Some(key_file) = &o.key_file else {
        return Err("missing 'key_file' in TLS configuration".into());
    };
    let pair_error = |e: String| format!("error parsing X509 certificate/key pair: {e}");
    let certs = certificates(cert_file).map_err(pair_error)?;
    let key = PrivateKeyDer::from_pem_file(key_file)
        .map_err(|e| pair_error(format!("{}: {e}", key_file.display())))?;
    Ok((certs, key))
}

/// The roots in `ca_file`.
fn roots(ca_file: &Path) -> Result<Arc<RootCertStore>, String> {
    let mut roots = RootCertStore::empty();
    for cert in
        certificates(ca_file).map_err(|e| format!("failed to parse root ca certificate: {e}"))?
    {
        roots
            .add(cert)
            .map_err(|e| format!("failed to parse root ca certificate: {e}"))?;
    }
    Ok(Arc::new(roots))
}

/// TLS on the route port (`cluster { tls {} }`), for routes and Raft
/// connections alike. As in nats-server, the handshake is the first
/// thing on such a connection, either way; the dialer verifies the peer's
/// certificate against `ca_file` and the host it dialed, and presents its
/// own, which the accepting side verifies when `verify` is set.
pub struct RouteTls {
    server: Arc<ServerConfig>,
    dial: DialTls,
    options: TlsOptions,
}

impl RouteTls {
    pub fn new(o: &TlsOptions) -> Result<RouteTls, String> {
        if o.map {
            return Err(
                "\"verify_and_map\" in a cluster tls block is not supported by flotilla".into(),
            );
        }
        if o.ca_file.is_none() {
            return Err("cluster TLS requires 'ca_file' to verify its peers".into());
        }
        let server = server_config(o)?;
        // Its certificate is required (server_config checked it).
        let dial = DialTls::new(o)?;
        Ok(RouteTls {
            server,
            dial,
            options: o.clone(),
        })
    }

    /// The server side of the handshake on an accepted connection.
    pub async fn accept(
        &self,
        stream: TcpStream,
    ) -> Result<tokio_rustls::TlsStream<TcpStream>, String> {
        accept(self.server.clone(), stream, &self.options)
            .await
            .map(tokio_rustls::TlsStream::Server)
    }

    /// The client side of the handshake on a connection dialed to
    /// `host_port`.
    pub async fn connect(
        &self,
        stream: TcpStream,
        host_port: &str,
    ) -> Result<tokio_rustls::TlsStream<TcpStream>, String> {
        self.dial.connect(stream, host_port).await
    }
}

/// The dialing side of TLS to another server (a route, a leaf node's
/// hub): the peer's certificate must chain to `ca_file` and name the
/// host dialed; this side presents its own when the block has one.
pub struct DialTls {
    client: Arc<ClientConfig>,
    options: TlsOptions,
}

impl DialTls {
    pub fn new(o: &TlsOptions) -> Result<DialTls, String> {
        let Some(ca_file) = &o.ca_file else {
            return Err("TLS to another server requires 'ca_file' to verify it".into());
        };
        let builder = ClientConfig::builder_with_provider(provider(o)?)
            .with_protocol_versions(versions(o))
            .map_err(|e| format!("error building TLS configuration: {e}"))?
            .with_root_certificates(roots(ca_file)?);
        let client = match (&o.cert_file, &o.key_file) {
            (None, None) => builder.with_no_client_auth(),
            _ => {
                let (certs, key) = pair(o)?;
                builder
                    .with_client_auth_cert(certs, key)
                    .map_err(|e| format!("error parsing X509 certificate/key pair: {e}"))?
            }
        };
        Ok(DialTls {
            client: Arc::new(client),
            options: o.clone(),
        })
    }

    /// The client side of the handshake on a connection dialed to
    /// `host_port`, whose host (a name or an address) the peer's
    /// certificate must name.
    pub async fn connect(
        &self,
        stream: TcpStream,
        host_port: &str,
    ) -> Result<tokio_rustls::TlsStream<TcpStream>, String> {
        let host = host_port
            .rsplit_once(':')
            .map_or(host_port, |(host, _)| host)
            .trim_start_matches('[')
            .trim_end_matches(']');
        let name = ServerName::try_from(host.to_string())
            .map_err(|e| format!("invalid server name {host:?}: {e}"))?;
        let connector = TlsConnector::from(self.client.clone());
        match tokio::time::timeout(self.options.timeout, connector.connect(name, stream)).await {
            Ok(Ok(tls)) if !pinned(&self.options.pinned_certs, tls.get_ref().1) => {
                Err("TLS handshake error: certificate not pinned".into())
            }
            Ok(Ok(tls)) => Ok(tokio_rustls::TlsStream::Client(tls)),
            Ok(Err(e)) => Err(format!("TLS handshake error: {e}")),
            Err(_) => Err("TLS handshake timeout".into()),
        }
    }
}

/// Every certificate in a PEM file; at least one.
fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("{}: no certificate found", path.display()));
    }
    Ok(certs)
}

/// Runs the server side of the handshake on `stream`, giving up after
/// `timeout`. The error is the log line's reason.
pub async fn accept(
    config: Arc<ServerConfig>,
    stream: TcpStream,
    o: &TlsOptions,
) -> Result<TlsStream<TcpStream>, String> {
    match tokio::time::timeout(o.timeout, TlsAcceptor::from(config).accept(stream)).await {
        Ok(Ok(tls)) if !pinned(&o.pinned_certs, tls.get_ref().1) => {
            Err("TLS handshake error: certificate not pinned".into())
        }
        Ok(Ok(tls)) => Ok(tls),
        Ok(Err(e)) => Err(format!("TLS handshake error: {e}")),
        Err(_) => Err("TLS handshake timeout".into()),
    }
}

/// What a client certificate says about who holds it, for
/// `verify_and_map`: its e-mail, DNS and URI subject alternative names,
/// and its subject's attributes as (type, value), types upper-case.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CertIdentity {
    pub emails: Vec<String>,
    pub dns_names: Vec<String>,
    pub uris: Vec<String>,
    pub subject: Vec<(String, String)>,
}

impl CertIdentity {
    /// The identity in the first certificate the client presented.
    pub fn of(stream: &TlsStream<TcpStream>) -> Option<CertIdentity> {
        let cert = stream.get_ref().1.peer_certificates()?.first()?;
        let (_, cert) = x509_parser::parse_x509_certificate(cert).ok()?;
        let mut id = CertIdentity::default();
        if let Ok(Some(san)) = cert.subject_alternative_name() {
            for name in &san.value.general_names {
                use x509_parser::extensions::GeneralName;
                match name {
                    GeneralName::RFC822Name(e) => id.emails.push(e.to_string()),
                    GeneralName::DNSName(d) => id.dns_names.push(d.to_string()),
                    GeneralName::URI(u) => id.uris.push(u.to_string()),
                    _ => {}
                }
            }
        }
        let registry = x509_parser::objects::oid_registry();
        for attr in cert.subject().iter_attributes() {
            let (Ok(kind), Ok(value)) = (
                x509_parser::objects::oid2abbrev(attr.attr_type(), registry),
                attr.as_str(),
            ) else {
                continue;
            };
            id.subject
                .push((kind.to_ascii_uppercase(), value.to_string()));
        }
        Some(id)
    }

    /// Whether the configured user name `name` is this certificate's, in
    /// nats-server's order: an e-mail, a DNS name, a URI, then the
    /// subject as a distinguished name (`CN=x,O=y`, in any order).
    pub fn names(&self, name: &str) -> bool {
        let listed = self.emails.iter().chain(&self.dns_names).chain(&self.uris);
        if listed.into_iter().any(|n| n == name) {
            return true;
        }
        match parse_dn(name) {
            Some(mut dn) if !self.subject.is_empty() => {
                let mut subject = self.subject.clone();
                dn.sort();
                subject.sort();
                dn == subject
            }
            _ => false,
        }
    }
}

/// `CN=x,O=y` (RFC 4514, `\,` escapes) as (TYPE, value) pairs; `None` if
/// it is not a distinguished name. `E` and `EMAILADDRESS` are `EMAIL`.
fn parse_dn(text: &str) -> Option<Vec<(String, String)>> {
    let mut parts = Vec::new();
    let mut current = String::new();
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => current.push(chars.next()?),
            ',' | '+' => parts.push(std::mem::take(&mut current)),
            _ => current.push(c),
        }
    }
    parts.push(current);
    parts
        .iter()
        .map(|part| {
            let (kind, value) = part.split_once('=')?;
            let kind = match kind.trim().to_ascii_uppercase().as_str() {
                "E" | "EMAILADDRESS" => "EMAIL".to_string(),
                other => other.to_string(),
            };
            (!kind.is_empty()).then(|| (kind, value.trim().to_string()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_match_in_nats_servers_order() {
        let id = CertIdentity {
            emails: vec!["alice@example.com".into()],
            dns_names: vec!["svc.example.com".into()],
            uris: vec!["spiffe://example/alice".into()],
            subject: vec![
                ("CN".into(), "alice".into()),
                ("O".into(), "Acme, Inc".into()),
                ("EMAIL".into(), "a@x".into()),
            ],
        };
        for (name, want) in [
            ("alice@example.com", true),
            ("svc.example.com", true),
            ("spiffe://example/alice", true),
            ("CN=alice,O=Acme\\, Inc,E=a@x", true),
            ("emailAddress=a@x, O=Acme\\, Inc, cn=alice", true),
            ("CN=alice,O=Acme\\, Inc", false),
            ("CN=alice", false),
            ("bob", false),
            ("CN=", false),
        ] {
            assert_eq!(id.names(name), want, "{name}");
        }
    }

    #[test]
    fn the_configs_names_are_the_ones_rustls_has() {
        let ours: Vec<&str> = rustls::crypto::ring::default_provider()
            .cipher_suites
            .iter()
            .filter_map(|s| s.suite().as_str())
            .collect();
        assert_eq!(ours, config::file::tls::CIPHER_SUITES);
        for name in config::file::tls::CURVES {
            assert!(curve(name).is_ok(), "{name}");
        }
        for name in ["CurveP521", "P256", ""] {
            assert!(curve(name).is_err(), "{name}");
        }
    }
}
