//! TLS for client connections, with rustls: the server configuration
//! built from PEM files (checked when options are validated, so `-t`
//! and a bad reload catch a bad certificate), and the handshake, bounded
//! by the TLS timeout, either after the plain-text INFO (the default) or
//! before it (`handshake_first`).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

use crate::options::TlsOptions;

/// The rustls configuration `o` describes, or nats-server's message for
/// what is wrong with it.
pub fn server_config(o: &TlsOptions) -> Result<Arc<ServerConfig>, String> {
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
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("error building TLS configuration: {e}"))?;
    let builder = match (&o.ca_file, o.verify) {
        (None, true) => return Err("TLS verify requires 'ca_file'".into()),
        (Some(ca_file), true) => {
            let mut roots = RootCertStore::empty();
            for cert in certificates(ca_file)
                .map_err(|e| format!("failed to parse root ca certificate: {e}"))?
            {
                roots
                    .add(cert)
                    .map_err(|e| format!("failed to parse root ca certificate: {e}"))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| format!("failed to use root ca certificate: {e}"))?;
            builder.with_client_cert_verifier(verifier)
        }
        _ => builder.with_no_client_auth(),
    };
    let config = builder
        .with_single_cert(certs, key)
        .map_err(|e| pair_error(e.to_string()))?;
    Ok(Arc::new(config))
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
    timeout: Duration,
) -> Result<TlsStream<TcpStream>, String> {
    match tokio::time::timeout(timeout, TlsAcceptor::from(config).accept(stream)).await {
        Ok(Ok(tls)) => Ok(tls),
        Ok(Err(e)) => Err(format!("TLS handshake error: {e}")),
        Err(_) => Err("TLS handshake timeout".into()),
    }
}
