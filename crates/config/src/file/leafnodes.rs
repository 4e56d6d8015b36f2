//! The `leafnodes {}` block (also `leaf`), as nats-server's
//! `parseLeafNodes`, `parseLeafAuthorization` and `parseRemoteLeafNodes`
//! read it.

use std::path::PathBuf;

use conf::{Entry, Item, Map, Value};

use super::{boolean, duration, host_port, int, map, permissions, string, tls, Report};
use crate::options::{LeafUser, LeafnodeOptions, Options, RemoteLeaf};

/// The port a leaf node URL without one means (`DEFAULT_LEAFNODE_PORT`).
pub const DEFAULT_PORT: u16 = 7422;

/// Keys flotilla refuses to ignore: each changes who may connect or how
/// the connection is protected, and flotilla does not do it yet.
const UNSUPPORTED: &[&str] = &["nkey", "min_version", "minimum_version"];

/// Keys in a remote flotilla refuses to ignore, for the same reason.
const REMOTE_UNSUPPORTED: &[&str] = &["proxy"];

pub(super) fn leafnodes(e: &Entry, o: &mut Options, r: &mut Report) {
    let Some(m) = map(r, e) else {
        return;
    };
    let mut leaf = LeafnodeOptions::default();
    for e in &m.entries {
        match e.key.to_ascii_lowercase().as_str() {
            "listen" => {
                if let Some((host, port)) = host_port(r, e) {
                    leaf.host = host;
                    leaf.port = port;
                }
            }
            "port" => leaf.port = int(r, e).unwrap_or(0),
            "host" | "net" => leaf.host = string(r, e),
            "advertise" | "leafnode_advertise" => leaf.advertise = string(r, e),
            "no_advertise" => leaf.no_advertise = boolean(r, e).unwrap_or(false),
            "authorization" => {
                if let Some(m) = map(r, e) {
                    authorization(m, &mut leaf, r);
                }
            }
            "remotes" => remotes(e, &mut leaf, r),
            "tls" => {
                if let Some(m) = map(r, e) {
                    leaf.tls = Some(tls::tls(m, r));
                }
            }
            "reconnect" | "reconnect_delay" | "reconnect_interval" => {
                if let Some(d) = duration(r, e) {
                    leaf.reconnect = d;
                }
            }
            // Flotilla never compresses; a peer that asks is told "off",
            // which nats-server accepts.
            "compression"
            | "dial_timeout"
            | "write_deadline"
            | "write_timeout"
            | "isolate_leafnode_interest"
            | "isolate" => {}
            k if UNSUPPORTED.contains(&k) => r.error_at(
                e,
                format!(
                    "\"{}\" in a leafnodes block is not supported by flotilla",
                    e.key
                ),
            ),
            _ => r.unknown(e),
        }
    }
    o.leafnodes = leaf;
}

fn authorization(m: &Map, leaf: &mut LeafnodeOptions, r: &mut Report) {
    for e in &m.entries {
        match e.key.to_ascii_lowercase().as_str() {
            "user" | "username" => leaf.user = string(r, e),
            "pass" | "password" => leaf.password = string(r, e),
            "account" => leaf.account = string(r, e),
            "timeout" => leaf.auth_timeout = duration(r, e),
            "users" => users(e, leaf, r),
            "nkey" => {
                leaf.nkey = string(r, e);
                if leaf.nkey.as_deref().is_some_and(|k| !jwt::is_user_nkey(k)) {
                    r.error_at(e, "Not a valid public nkey for leafnode authorization");
                }
            }
            "proxy_required" => r.error_at(
                e,
                format!(
                    "\"{}\" in leafnodes authorization is not supported by flotilla",
                    e.key
                ),
            ),
            _ => r.unknown(e),
        }
    }
}

fn users(e: &Entry, leaf: &mut LeafnodeOptions, r: &mut Report) {
    let Value::Array(items) = &e.item.value else {
        r.error(
            &e.item,
            format!("Expected array of users, got {}", e.item.value.type_name()),
        );
        return;
    };
    for item in items {
        let Value::Map(m) = &item.value else {
            r.error(
                item,
                format!("Expected user entry, got {}", item.value.type_name()),
            );
            continue;
        };
        let mut user = LeafUser {
            user: String::new(),
            password: String::new(),
            account: None,
        };
        for e in &m.entries {
            match e.key.to_ascii_lowercase().as_str() {
                "user" | "username" => user.user = string(r, e).unwrap_or_default(),
                "pass" | "password" => user.password = string(r, e).unwrap_or_default(),
                "account" => user.account = string(r, e),
                _ => r.unknown(e),
            }
        }
        if user.user.is_empty() {
            r.error(item, "User entry requires a user");
            continue;
        }
        leaf.users.push(user);
    }
}

fn remotes(e: &Entry, leaf: &mut LeafnodeOptions, r: &mut Report) {
    let Value::Array(items) = &e.item.value else {
        r.error(
            &e.item,
            format!(
                "Expected remotes field to be an array, got {}",
                e.item.value.type_name()
            ),
        );
        return;
    };
    for item in items {
        if let Some(remote) = remote(item, r) {
            leaf.remotes.push(remote);
        }
    }
}

fn remote(item: &Item, r: &mut Report) -> Option<RemoteLeaf> {
    let Value::Map(m) = &item.value else {
        r.error(
            item,
            format!(
                "Expected remote leafnode entry to be a map/struct, got {}",
                item.value.type_name()
            ),
        );
        return None;
    };
    let mut remote = RemoteLeaf {
        urls: Vec::new(),
        account: None,
        tls: None,
        credentials: None,
        nkey: None,
        deny_imports: Vec::new(),
        deny_exports: Vec::new(),
    };
    for e in &m.entries {
        if !remote_entry(e, &mut remote, r) {
            return None;
        }
    }
    if remote.urls.is_empty() {
        r.error(item, "leafnode remote requires at least one url");
        return None;
    }
    check_remote_tls(item, &remote, r);
    Some(remote)
}

/// One key of a remote; `false` for `disabled: true` (the remote is
/// left out).
fn remote_entry(e: &Entry, remote: &mut RemoteLeaf, r: &mut Report) -> bool {
    match e.key.to_ascii_lowercase().as_str() {
        "url" | "urls" => urls(e, remote, r),
        "account" | "local" => remote.account = string(r, e),
        "deny_imports" | "deny_import" => {
            remote.deny_imports = permissions::subjects(r, &e.item, false).unwrap_or_default()
        }
        "deny_exports" | "deny_export" => {
            remote.deny_exports = permissions::subjects(r, &e.item, false).unwrap_or_default()
        }
        "credentials" | "creds" => remote.credentials = string(r, e).map(PathBuf::from),
        "nkey" | "seed" => {
            remote.nkey = string(r, e);
            if let Some(seed) = &remote.nkey {
                if !jwt::is_seed(seed) {
                    r.error_at(e, "Remote nkey has malformed seed");
                }
            }
        }
        "tls" => {
            if let Some(m) = map(r, e) {
                remote.tls = Some(tls::tls(m, r));
            }
        }
        "hub" => {
            if boolean(r, e) == Some(true) {
                r.error_at(
                    e,
                    "\"hub\" in a leafnodes remote is not supported by flotilla",
                );
            }
        }
        "no_randomize"
        | "dont_randomize"
        | "compression"
        | "first_info_timeout"
        | "dial_timeout"
        | "ignore_discovered_servers"
        | "ws_compression"
        | "ws_no_masking" => {}
        "disabled" => return boolean(r, e) != Some(true),
        k if REMOTE_UNSUPPORTED.contains(&k) => r.error_at(
            e,
            format!(
                "\"{}\" in a leafnodes remote is not supported by flotilla",
                e.key
            ),
        ),
        _ => r.unknown(e),
    }
    true
}

/// Without a CA to check the hub against, flotilla would have to trust
/// the system's roots, which it does not load: refused, not weakened.
fn check_remote_tls(item: &Item, remote: &RemoteLeaf, r: &mut Report) {
    let tls_url = remote.urls.iter().any(|u| u.starts_with("tls://"));
    match &remote.tls {
        None if tls_url => {
            r.error(item, "leafnode remote with a tls:// url needs a tls block with 'ca_file' to verify the hub");
        }
        Some(t) if t.ca_file.is_none() => {
            r.error(
                item,
                "leafnode remote tls needs 'ca_file' to verify the hub",
            );
        }
        _ => {}
    }
}

fn urls(e: &Entry, remote: &mut RemoteLeaf, r: &mut Report) {
    let texts: Vec<&Item> = match &e.item.value {
        Value::Array(items) => items.iter().collect(),
        _ => vec![&e.item],
    };
    for item in texts {
        let Value::String(text) = &item.value else {
            r.error(
                item,
                format!("Expected a url string, got {}", item.value.type_name()),
            );
            continue;
        };
        match normalize_url(text) {
            Ok(url) => remote.urls.push(url),
            Err(why) => r.error(item, why),
        }
    }
}

/// `[scheme://][user[:password]@]host[:port]`, checked, with the port
/// defaulting to [`DEFAULT_PORT`]. WebSocket URLs are refused: flotilla
/// dials leaf nodes over TCP only.
pub fn normalize_url(text: &str) -> Result<String, String> {
    let text = text.trim();
    let (scheme, rest) = text.split_once("://").unwrap_or(("nats-leaf", text));
    match scheme.to_ascii_lowercase().as_str() {
        "nats-leaf" | "nats" | "tcp" => {}
        "ws" | "wss" => {
            return Err(format!(
                "leafnode remote url {text:?}: WebSocket remotes are not supported by flotilla"
            ))
        }
        "tls" => {}
        other => {
            return Err(format!(
                "leafnode remote url {text:?}: unknown scheme {other:?}"
            ))
        }
    }
    let rest = rest.trim_end_matches('/');
    let (userinfo, hostport) = match rest.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, rest),
    };
    let hostport = match hostport.rsplit_once(':') {
        Some((host, port)) if !port.contains(']') => {
            port.parse::<u16>()
                .map_err(|_| format!("leafnode remote url {text:?}: invalid port"))?;
            if host.is_empty() {
                return Err(format!("leafnode remote url {text:?}: host is required"));
            }
            hostport.to_string()
        }
        _ if hostport.is_empty() => {
            return Err(format!("leafnode remote url {text:?}: host is required"))
        }
        _ => format!("{hostport}:{DEFAULT_PORT}"),
    };
    let scheme = match scheme.eq_ignore_ascii_case("tls") {
        true => "tls",
        false => "nats-leaf",
    };
    Ok(match userinfo {
        Some(u) => format!("{scheme}://{u}@{hostport}"),
        None => format!("{scheme}://{hostport}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remote_urls_get_the_default_port() {
        assert_eq!(
            normalize_url("nats-leaf://h").unwrap(),
            "nats-leaf://h:7422"
        );
        assert_eq!(
            normalize_url("nats://u:p@127.0.0.1:4").unwrap(),
            "nats-leaf://u:p@127.0.0.1:4"
        );
        assert_eq!(
            normalize_url("localhost:9").unwrap(),
            "nats-leaf://localhost:9"
        );
        assert!(normalize_url("ws://h:1").unwrap_err().contains("WebSocket"));
        assert!(normalize_url("nats://h:x")
            .unwrap_err()
            .contains("invalid port"));
        assert!(normalize_url("nats://")
            .unwrap_err()
            .contains("host is required"));
    }
}
