//! Certificates made for a test (rcgen): a CA, server and client
//! certificates it signed, and some from another CA; PEM files in a
//! temporary directory.

use std::path::PathBuf;

use rcgen::{BasicConstraints, CertificateParams, ExtendedKeyUsagePurpose, IsCa, KeyPair};

/// A CA, a server certificate for 127.0.0.1 and a client certificate it
/// signed, and a client certificate from another CA; PEM files in `dir`.
pub struct Certs {
    dir: tempfile::TempDir,
    ca: rcgen::Certificate,
    ca_key: KeyPair,
}

impl Certs {
    pub fn new() -> Certs {
        let dir = tempfile::tempdir().unwrap();
        let (ca, ca_key) = authority("flotilla test CA");
        let (rogue, rogue_key) = authority("someone else's CA");
        std::fs::write(dir.path().join("ca.pem"), ca.pem()).unwrap();
        let leaf = |name: &str,
                    sans: &[&str],
                    usage: &[ExtendedKeyUsagePurpose],
                    issuer: &rcgen::Certificate,
                    key: &KeyPair| {
            let mut params =
                CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>())
                    .unwrap();
            params.extended_key_usages = usage.to_vec();
            let leaf_key = KeyPair::generate().unwrap();
            let cert = params.signed_by(&leaf_key, issuer, key).unwrap();
            std::fs::write(dir.path().join(format!("{name}.pem")), cert.pem()).unwrap();
            std::fs::write(
                dir.path().join(format!("{name}-key.pem")),
                leaf_key.serialize_pem(),
            )
            .unwrap();
        };
        leaf(
            "server",
            &["127.0.0.1", "localhost"],
            &[ExtendedKeyUsagePurpose::ServerAuth],
            &ca,
            &ca_key,
        );
        leaf(
            "client",
            &["client.example"],
            &[ExtendedKeyUsagePurpose::ClientAuth],
            &ca,
            &ca_key,
        );
        leaf(
            "rogue",
            &["client.example"],
            &[ExtendedKeyUsagePurpose::ClientAuth],
            &rogue,
            &rogue_key,
        );
        // A server's certificate on the route port: it dials and is
        // dialed.
        let both = [
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        leaf("route", &["127.0.0.1"], &both, &ca, &ca_key);
        leaf("rogue-route", &["127.0.0.1"], &both, &rogue, &rogue_key);
        Certs { dir, ca, ca_key }
    }

    /// Signs a client certificate made from `params` with the test CA.
    pub fn issue(&self, name: &str, mut params: CertificateParams) {
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.ca, &self.ca_key).unwrap();
        std::fs::write(self.path(&format!("{name}.pem")), cert.pem()).unwrap();
        std::fs::write(self.path(&format!("{name}-key.pem")), key.serialize_pem()).unwrap();
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// A `tls {}` block with the server's pair, and `extra` lines.
    pub fn block(&self, extra: &str) -> String {
        format!(
            "tls {{\n  cert_file: \"{}\"\n  key_file: \"{}\"\n  ca_file: \"{}\"\n{extra}}}\n",
            self.path("server.pem").display(),
            self.path("server-key.pem").display(),
            self.path("ca.pem").display(),
        )
    }

    /// A `tls {}` block with the `name` pair (none: no certificate),
    /// verifying peers against the test CA, and `extra` lines.
    pub fn block_for(&self, name: Option<&str>, extra: &str) -> String {
        let pair = match name {
            Some(name) => format!(
                "  cert_file: \"{}\"\n  key_file: \"{}\"\n",
                self.path(&format!("{name}.pem")).display(),
                self.path(&format!("{name}-key.pem")).display(),
            ),
            None => String::new(),
        };
        format!(
            "tls {{\n{pair}  ca_file: \"{}\"\n{extra}}}\n",
            self.path("ca.pem").display(),
        )
    }

    /// A `cluster { tls {} }` block with the `name` pair, verifying
    /// peers against the test CA.
    pub fn cluster_block(&self, name: &str) -> String {
        format!(
            "cluster {{\n  tls {{\n    cert_file: \"{}\"\n    key_file: \"{}\"\n    ca_file: \"{}\"\n    verify: true\n  }}\n}}\n",
            self.path(&format!("{name}.pem")).display(),
            self.path(&format!("{name}-key.pem")).display(),
            self.path("ca.pem").display(),
        )
    }

    /// async-nats options trusting the test CA, with a client
    /// certificate when `cert` names one.
    pub fn client(&self, cert: Option<&str>) -> async_nats::ConnectOptions {
        let opts = async_nats::ConnectOptions::new()
            .add_root_certificates(self.path("ca.pem"))
            .require_tls(true);
        match cert {
            Some(name) => opts.add_client_certificate(
                self.path(&format!("{name}.pem")),
                self.path(&format!("{name}-key.pem")),
            ),
            None => opts,
        }
    }
}

fn authority(name: &str) -> (rcgen::Certificate, KeyPair) {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let key = KeyPair::generate().unwrap();
    (params.self_signed(&key).unwrap(), key)
}
