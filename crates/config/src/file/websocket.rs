//! The `websocket {}` block (also `ws`), as nats-server's
//! `parseWebsocket` and `validateWebsocketOptions` read it.

use conf::{Entry, Map, Value};

use super::{
    auth_timeout, boolean, check_no_auth_user, duration, host_port, int, map, string, tls, Report,
};
use crate::options::{Options, Origin, WebsocketOptions};

/// Response headers nats-server will not let a config set.
const RESERVED_HEADERS: &[&str] = &[
    "host",
    "content-length",
    "connection",
    "upgrade",
    "nats-no-masking",
];

pub(super) fn websocket(e: &Entry, o: &mut Options, r: &mut Report) {
    let Some(m) = map(r, e) else {
        return;
    };
    let mut ws = WebsocketOptions::default();
    for e in &m.entries {
        match e.key.to_ascii_lowercase().as_str() {
            "listen" => {
                if let Some((host, port)) = host_port(r, e) {
                    ws.host = host;
                    ws.port = port;
                }
            }
            "port" => ws.port = int(r, e).unwrap_or(0),
            "host" | "net" => ws.host = string(r, e),
            "advertise" => ws.advertise = string(r, e),
            "no_tls" => ws.no_tls = boolean(r, e).unwrap_or(false),
            "tls" => {
                if let Some(m) = map(r, e) {
                    ws.tls = Some(tls::tls(m, r));
                }
            }
            "same_origin" => ws.same_origin = boolean(r, e).unwrap_or(false),
            "allowed_origins" | "allowed_origin" | "allow_origins" | "allow_origin" | "origins"
            | "origin" => origins(e, &mut ws, r),
            "handshake_timeout" => ws.handshake_timeout = duration(r, e),
            "compression" | "compress" => ws.compression = boolean(r, e).unwrap_or(false),
            "headers" => {
                if let Some(m) = map(r, e) {
                    headers(m, &mut ws, r);
                }
            }
            "authorization" | "authentication" => {
                if let Some(m) = map(r, e) {
                    authorization(m, &mut ws, r);
                }
            }
            "no_auth_user" => ws.no_auth_user = string(r, e),
            "jwt_cookie" => ws.cookies.jwt = string(r, e),
            "user_cookie" => ws.cookies.user = string(r, e),
            "pass_cookie" => ws.cookies.pass = string(r, e),
            "token_cookie" => ws.cookies.token = string(r, e),
            "ping_interval" => ws.ping_interval = duration(r, e),
            _ => r.unknown(e),
        }
    }
    if ws.enabled() && ws.tls.is_none() && !ws.no_tls {
        r.error_at(e, "websocket requires TLS configuration");
    }
    o.websocket = ws;
}

/// nats-server's `parseSimpleAuth`: one user or a token, no users list.
fn authorization(m: &Map, ws: &mut WebsocketOptions, r: &mut Report) {
    for e in &m.entries {
        match e.key.to_ascii_lowercase().as_str() {
            "user" | "username" => ws.user = string(r, e),
            "pass" | "password" => ws.password = string(r, e),
            "token" => ws.token = string(r, e),
            "timeout" => ws.auth_timeout = auth_timeout(r, e),
            // An error, as in nats-server: a `users` list here would
            // otherwise be ignored, letting in whom it meant to keep out.
            _ => r.error_at(e, format!("unknown field {:?}", e.key)),
        }
    }
}

/// The checks of nats-server's `validateWebsocketOptions` that need the
/// whole config (the users may come after the block): `at` is the
/// block.
pub(super) fn validate_auth(at: &Entry, o: &Options, r: &mut Report) {
    let ws = &o.websocket;
    if let Some(user) = &ws.no_auth_user {
        check_no_auth_user(user, at, o, r);
    }
    let a = &o.authorization;
    if !a.users.is_empty() || !a.nkeys.is_empty() {
        if ws.user.is_some() {
            r.error_at(
                at,
                "websocket authentication username not compatible with presence of users/nkeys",
            );
        }
        if ws.token.is_some() {
            r.error_at(
                at,
                "websocket authentication token not compatible with presence of users/nkeys",
            );
        }
    }
    if let Some(cookie) = &ws.cookies.jwt {
        if a.operator.is_none() {
            r.error_at(
                at,
                format!("trusted operators or trusted keys configuration is required for JWT authentication via cookie {cookie:?}"),
            );
        }
    }
}

fn origins(e: &Entry, ws: &mut WebsocketOptions, r: &mut Report) {
    let texts: Vec<String> = match &e.item.value {
        Value::String(s) => vec![s.clone()],
        Value::Array(items) => items
            .iter()
            .filter_map(|item| match &item.value {
                Value::String(s) => Some(s.clone()),
                other => {
                    r.error(
                        item,
                        format!("expected a string, got {}", other.type_name()),
                    );
                    None
                }
            })
            .collect(),
        other => {
            r.error(
                &e.item,
                format!(
                    "expected a string or an array for \"{}\", got {}",
                    e.key,
                    other.type_name()
                ),
            );
            return;
        }
    };
    for text in texts {
        match parse_origin(&text) {
            Ok(origin) => ws.allowed_origins.push(origin),
            Err(why) => r.error(&e.item, why),
        }
    }
}

/// `scheme://host[:port][/...]` with nats-server's errors; the port
/// defaults by scheme.
pub fn parse_origin(text: &str) -> Result<Origin, String> {
    let Some((scheme, rest)) = text.split_once("://") else {
        return Err(format!(
            "unable to parse allowed origin: parse {text:?}: invalid URI for request"
        ));
    };
    let scheme = scheme.to_ascii_lowercase();
    if scheme != "http" && scheme != "https" {
        return Err(format!(
            "unable to parse allowed origin {text:?}: allowed origins must be absolute URLs with http or https scheme"
        ));
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let (host, port) = split_host_port(authority, &scheme)
        .ok_or_else(|| format!("unable to parse allowed origin {text:?}: invalid port"))?;
    if host.is_empty() {
        return Err(format!(
            "unable to parse allowed origin {text:?}: host is required"
        ));
    }
    Ok(Origin { scheme, host, port })
}

/// `host[:port]` (IPv6 in brackets), the host lowercased and the port
/// defaulting to the scheme's.
pub fn split_host_port(authority: &str, scheme: &str) -> Option<(String, u16)> {
    let default = if scheme == "https" { 443 } else { 80 };
    let (host, port) = match authority.rfind(':') {
        Some(i) if !authority[i..].contains(']') => (&authority[..i], Some(&authority[i + 1..])),
        _ => (authority, None),
    };
    let port = match port {
        Some(p) => p.parse().ok()?,
        None => default,
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    Some((host.to_ascii_lowercase(), port))
}

fn headers(m: &Map, ws: &mut WebsocketOptions, r: &mut Report) {
    for e in &m.entries {
        let name = e.key.to_ascii_lowercase();
        if RESERVED_HEADERS.contains(&name.as_str()) {
            r.error_at(
                e,
                format!("websocket: invalid header {:?} not allowed", e.key),
            );
        } else if name.starts_with("sec-websocket-") {
            r.error_at(
                e,
                format!(
                    "websocket: invalid header {:?}, \"Sec-WebSocket-\" prefix not allowed",
                    e.key
                ),
            );
        } else if let Some(value) = string(r, e) {
            ws.headers.push((e.key.clone(), value));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_default_their_port_by_scheme() {
        let origin = parse_origin("https://Example.com/path").unwrap();
        assert_eq!(
            origin,
            Origin {
                scheme: "https".into(),
                host: "example.com".into(),
                port: 443
            }
        );
        assert_eq!(parse_origin("http://[::1]:8080").unwrap().port, 8080);
        assert_eq!(parse_origin("http://[::1]").unwrap().host, "::1");
        assert!(parse_origin("ftp://x")
            .unwrap_err()
            .contains("http or https"));
        assert!(parse_origin("http://")
            .unwrap_err()
            .contains("host is required"));
        assert!(parse_origin("example.com").is_err());
        assert!(parse_origin("http://x:99999").is_err());
    }
}
