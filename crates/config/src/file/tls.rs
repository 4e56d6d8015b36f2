//! The `tls {}` block, read as nats-server's `parseTLS` reads it, with
//! its messages. Settings flotilla does not implement are errors, not
//! warnings: ignoring `cert_store` or `ocsp_peer` would leave a
//! weaker server than the file asks for.

use std::path::PathBuf;
use std::time::Duration;

use conf::{Entry, Map, Value};
use jsapi::duration::from_secs as bounded;

use super::{parse_go_duration, Report};
use crate::options::{TlsOptions, DEFAULT_HANDSHAKE_FIRST_FALLBACK};

/// Keys nats-server's `tls` block takes that flotilla refuses.
const UNSUPPORTED: &[&str] = &[
    "verify_cert_and_check_known_urls",
    "insecure",
    "allow_insecure_cipher_suites",
    "connection_rate_limit",
    "cert_store",
    "cert_match_by",
    "cert_match",
    "ca_certs_match",
    "cert_match_skip_invalid",
    "ocsp_peer",
    "certs",
    "certificates",
];

pub(super) fn tls(m: &Map, r: &mut Report) -> TlsOptions {
    let mut t = TlsOptions::default();
    for e in &m.entries {
        let key = e.key.to_ascii_lowercase();
        match key.as_str() {
            "cert_file" => t.cert_file = file(r, e),
            "key_file" => t.key_file = file(r, e),
            "ca_file" => t.ca_file = file(r, e),
            "verify" => t.verify = flag(r, e).unwrap_or(t.verify),
            "verify_and_map" => {
                if let Some(map) = flag(r, e) {
                    t.map = map;
                    t.verify |= map;
                }
            }
            "timeout" => t.timeout = timeout(r, e).unwrap_or(t.timeout),
            "handshake_first" | "first" | "immediate" => {
                if let Some((first, fallback)) = handshake_first(r, e) {
                    t.handshake_first = first;
                    t.handshake_first_fallback = fallback;
                }
            }
            "min_version" => match &e.item.value {
                Value::String(v) if v == "1.3" => t.min_tls13 = true,
                Value::String(v) if v == "1.2" => t.min_tls13 = false,
                Value::String(v) if v == "1.0" || v == "1.1" => r.error(
                    &e.item,
                    format!("error parsing tls config: unsupported TLS version: TLS {v}"),
                ),
                Value::String(v) => r.error(
                    &e.item,
                    format!("error parsing tls config: unknown version: {v}"),
                ),
                _ => r.error(
                    &e.item,
                    format!(
                        "error parsing tls config: 'min_version' wrong type: {}",
                        e.item.raw
                    ),
                ),
            },
            "cipher_suites" => {
                t.cipher_suites = names(r, e, check_cipher_suite);
            }
            "curve_preferences" => {
                t.curve_preferences = names(r, e, check_curve);
            }
            "pinned_certs" => t.pinned_certs = pinned(r, e),
            k if UNSUPPORTED.contains(&k) => r.error_at(
                e,
                format!("\"{}\" in a tls block is not supported by flotilla", e.key),
            ),
            _ => r.error_at(
                e,
                format!("error parsing tls config, unknown field {:?}", e.key),
            ),
        }
    }
    t
}

/// A non-empty list of names, each checked by `check` (whose error is
/// the message).
/// The TLS 1.2 and 1.3 cipher suites flotilla's TLS (rustls with ring)
/// has, by the names rustls gives them; the TLS layer checks that it has
/// exactly these.
pub const CIPHER_SUITES: &[&str] = &[
    "TLS13_AES_256_GCM_SHA384",
    "TLS13_AES_128_GCM_SHA256",
    "TLS13_CHACHA20_POLY1305_SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
];

/// Go's cipher suite names (nats-server's `cipherMap`). Those not in
/// [`CIPHER_SUITES`] (CBC, RSA key exchange, 3DES, RC4) are refused.
const GO_CIPHER_SUITES: &[&str] = &[
    "TLS_RSA_WITH_RC4_128_SHA",
    "TLS_RSA_WITH_3DES_EDE_CBC_SHA",
    "TLS_RSA_WITH_AES_128_CBC_SHA",
    "TLS_RSA_WITH_AES_256_CBC_SHA",
    "TLS_RSA_WITH_AES_128_CBC_SHA256",
    "TLS_RSA_WITH_AES_128_GCM_SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384",
    "TLS_ECDHE_ECDSA_WITH_RC4_128_SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA",
    "TLS_ECDHE_RSA_WITH_RC4_128_SHA",
    "TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
    "TLS_AES_128_GCM_SHA256",
    "TLS_AES_256_GCM_SHA384",
    "TLS_CHACHA20_POLY1305_SHA256",
];

/// A `cipher_suites` entry: one of [`CIPHER_SUITES`]; Go's others are
/// refused as unsupported, anything else as unknown.
pub fn check_cipher_suite(name: &str) -> Result<(), String> {
    match (
        CIPHER_SUITES.contains(&name),
        GO_CIPHER_SUITES.contains(&name),
    ) {
        (true, _) => Ok(()),
        (false, true) => Err(format!("cipher suite {name} is not supported by flotilla")),
        (false, false) => Err(format!("unrecognized cipher {name}")),
    }
}

/// The curves flotilla's TLS has, by Go's names (nats-server's
/// `curvePreferenceMap`); the TLS layer maps each to its key exchange.
pub const CURVES: &[&str] = &["X25519", "CurveP256", "CurveP384"];

/// Go's curves that flotilla's TLS lacks.
const GO_ONLY_CURVES: &[&str] = &[
    "CurveP521",
    "X25519MLKEM768",
    "SecP256r1MLKEM768",
    "SecP384r1MLKEM1024",
];

/// A `curve_preferences` entry: one of [`CURVES`].
pub fn check_curve(name: &str) -> Result<(), String> {
    match (CURVES.contains(&name), GO_ONLY_CURVES.contains(&name)) {
        (true, _) => Ok(()),
        (false, true) => Err(format!(
            "curve preference {name} is not supported by flotilla"
        )),
        (false, false) => Err(format!("unrecognized curve preference {name}")),
    }
}

fn names(r: &mut Report, e: &Entry, check: fn(&str) -> Result<(), String>) -> Vec<String> {
    let Value::Array(items) = &e.item.value else {
        r.error(
            &e.item,
            format!("error parsing tls config, '{}' must be a list", e.key),
        );
        return Vec::new();
    };
    if items.is_empty() {
        r.error(
            &e.item,
            format!("error parsing tls config, '{}' cannot be empty", e.key),
        );
    }
    let mut out = Vec::new();
    for item in items {
        match &item.value {
            Value::String(name) => match check(name) {
                Ok(()) => out.push(name.clone()),
                Err(msg) => r.error(item, msg),
            },
            other => r.error(
                item,
                format!(
                    "error parsing tls config, '{}' entries must be strings, got {}",
                    e.key,
                    other.type_name()
                ),
            ),
        }
    }
    out
}

/// `pinned_certs`: hex SHA-256 digests, stored lowercase.
fn pinned(r: &mut Report, e: &Entry) -> std::collections::BTreeSet<String> {
    const SHAPE: &str = "hex-encoded sha256 of DER encoded SubjectPublicKeyInfo";
    let Value::Array(items) = &e.item.value else {
        r.error(
            &e.item,
            format!("error parsing tls config, expected 'pinned_certs' to be a list of {SHAPE}"),
        );
        return Default::default();
    };
    let mut out = std::collections::BTreeSet::new();
    for item in items {
        let entry = match &item.value {
            Value::String(s) => s.to_ascii_lowercase(),
            _ => item.raw.to_ascii_lowercase(),
        };
        if entry.len() == 64 && entry.bytes().all(|b| b.is_ascii_hexdigit()) {
            out.insert(entry);
        } else {
            r.error(
                item,
                format!("error parsing tls config, 'pinned_certs' key {entry} does not look like {SHAPE}"),
            );
        }
    }
    out
}

fn file(r: &mut Report, e: &Entry) -> Option<PathBuf> {
    match &e.item.value {
        Value::String(s) => Some(PathBuf::from(s)),
        _ => {
            r.error(
                &e.item,
                format!(
                    "error parsing tls config, expected '{}' to be filename",
                    e.key
                ),
            );
            None
        }
    }
}

fn flag(r: &mut Report, e: &Entry) -> Option<bool> {
    match &e.item.value {
        Value::Bool(b) => Some(*b),
        _ => {
            r.error(
                &e.item,
                format!(
                    "error parsing tls config, expected '{}' to be a boolean",
                    e.key
                ),
            );
            None
        }
    }
}

/// Seconds as a number, or a Go duration string.
fn timeout(r: &mut Report, e: &Entry) -> Option<Duration> {
    let parsed = match &e.item.value {
        Value::Integer(v) => bounded(*v as f64, &e.item.raw),
        Value::Float(v) => bounded(*v, &e.item.raw),
        Value::String(s) => parse_go_duration(s),
        _ => Err("wrong type".to_string()),
    };
    match parsed {
        Ok(d) => Some(d),
        // "wrong type" included: nats-server's message for it is this one.
        Err(msg) => {
            r.error(
                &e.item,
                format!("error parsing tls config, 'timeout' {msg}"),
            );
            None
        }
    }
}

/// `true`/`false` or their string forms, or `auto` (or a duration): TLS
/// first, falling back to INFO first for a client silent that long.
fn handshake_first(r: &mut Report, e: &Entry) -> Option<(bool, Option<Duration>)> {
    match &e.item.value {
        Value::Bool(b) => Some((*b, None)),
        Value::String(s) => match s.to_ascii_lowercase().as_str() {
            "true" | "on" => Some((true, None)),
            "false" | "off" => Some((false, None)),
            "auto" | "auto_fallback" => Some((true, Some(DEFAULT_HANDSHAKE_FIRST_FALLBACK))),
            _ => match parse_go_duration(s) {
                Ok(delay) => Some((true, Some(delay))),
                Err(_) => {
                    r.error(
                        &e.item,
                        format!("field {:?}'s value {s:?} is invalid", e.key),
                    );
                    None
                }
            },
        },
        other => {
            r.error(
                &e.item,
                format!(
                    "field {:?} should be a boolean or a string, got {}",
                    e.key,
                    other.type_name()
                ),
            );
            None
        }
    }
}
