//! Options from a config file: what each nats-server key means, and the
//! errors and warnings a bad value earns, each naming file, line and
//! column.
//!
//! Deliberate differences from nats-server, for safety:
//! - an unknown key is a warning, not an error (as the issue asks), but a
//!   known nats-server key that flotilla does not implement and that
//!   changes security or routing (`trusted`, `nkeys`, ...) is an error, so
//!   nobody believes a protection is on when it is not;
//! - a block for a whole feature flotilla lacks (`gateway`, `mqtt`) is
//!   ignored with a warning, and `/varz` lists it under `ignored_config`,
//!   so that an existing config still starts;
//! - a duration written bare with a size-like suffix (`ping_interval: 2m`)
//!   means two minutes; nats-server reads it as 2,000,000 seconds.

use jsapi::duration::{from_secs as bounded, parse as parse_go_duration};
use std::path::{Path, PathBuf};
use std::time::Duration;

use conf::{Entry, Item, Map, Value};

use crate::options::{Authorization, NkeyUser, Options, User};

pub mod leafnodes;
mod links;
mod mappings;
mod permissions;
pub mod tls;
mod top;
pub mod websocket;

/// Keys nats-server understands that flotilla refuses to ignore.
const UNSUPPORTED: &[&str] = &["trusted", "trusted_keys", "nkeys"];

/// Features flotilla lacks whose blocks it ignores, with a warning: a
/// server without them only lacks what they would connect, and nothing
/// it does serve is less protected. Each is (key, what is off).
const IGNORED: &[(&str, &str)] = &[
    ("gateway", "no gateway connections are made or accepted"),
    ("mqtt", "no MQTT clients are accepted"),
];

/// Reads a config file into options. `Err` lists every error found, one
/// per line; warnings come back with the options.
pub fn load(path: &Path) -> anyhow::Result<(Options, Vec<String>)> {
    let map = conf::parse_file(path)?;
    let mut opts = Options {
        config_file: Some(path.to_path_buf()),
        ..Options::default()
    };
    let mut r = Report::default();
    if map.entries.is_empty() {
        r.warnings.push(format!(
            "{}: config has no values or is empty",
            path.display()
        ));
    }
    top::apply(&map, &mut opts, &mut r);
    if r.errors.is_empty() {
        Ok((opts, r.warnings))
    } else {
        anyhow::bail!("{}", r.errors.join("\n"))
    }
}

#[derive(Default)]
struct Report {
    warnings: Vec<String>,
    errors: Vec<String>,
}

impl Report {
    fn error(&mut self, item: &Item, msg: impl std::fmt::Display) {
        self.errors.push(format!("{}: {msg}", item.pos));
    }
    fn error_at(&mut self, e: &Entry, msg: impl std::fmt::Display) {
        self.errors.push(format!("{}: {msg}", e.key_pos));
    }
    fn warn(&mut self, item: &Item, field: &str, msg: impl std::fmt::Display) {
        self.warnings.push(format!(
            "{}: invalid use of field \"{field}\": {msg}",
            item.pos
        ));
    }
    fn unknown(&mut self, e: &Entry) {
        if !e.referenced {
            self.warnings
                .push(format!("{}: unknown field \"{}\"", e.key_pos, e.key));
        }
    }
}

fn int(r: &mut Report, e: &Entry) -> Option<i64> {
    match &e.item.value {
        Value::Integer(v) => Some(*v),
        other => {
            r.error(
                &e.item,
                format!(
                    "expected an integer for \"{}\", got {}",
                    e.key,
                    other.type_name()
                ),
            );
            None
        }
    }
}

fn string(r: &mut Report, e: &Entry) -> Option<String> {
    match &e.item.value {
        Value::String(v) => Some(v.clone()),
        other => {
            r.error(
                &e.item,
                format!(
                    "expected a string for \"{}\", got {}",
                    e.key,
                    other.type_name()
                ),
            );
            None
        }
    }
}

fn boolean(r: &mut Report, e: &Entry) -> Option<bool> {
    match &e.item.value {
        Value::Bool(v) => Some(*v),
        other => {
            r.error(
                &e.item,
                format!(
                    "expected a boolean for \"{}\", got {}",
                    e.key,
                    other.type_name()
                ),
            );
            None
        }
    }
}

fn map<'a>(r: &mut Report, e: &'a Entry) -> Option<&'a Map> {
    match &e.item.value {
        Value::Map(m) => Some(m),
        other => {
            r.error(
                &e.item,
                format!(
                    "expected a map for \"{}\", got {}",
                    e.key,
                    other.type_name()
                ),
            );
            None
        }
    }
}

/// A size that must fit in 31 bits, as nats-server requires for payload
/// and control-line limits.
fn size31(r: &mut Report, e: &Entry) -> Option<usize> {
    let v = int(r, e)?;
    if v > i32::MAX as i64 {
        r.error(&e.item, format!("{} value is too big", e.key));
        return None;
    }
    if v <= 0 {
        r.error(&e.item, format!("{} must be positive", e.key));
        return None;
    }
    Some(v as usize)
}

/// A duration: a Go duration string, a bare suffixed number like `2m`
/// read as written, or an integer meaning seconds (with nats-server's
/// warning to convert it).
fn duration(r: &mut Report, e: &Entry) -> Option<Duration> {
    let parsed = match &e.item.value {
        Value::String(s) => parse_go_duration(s),
        Value::Integer(_) if e.item.raw.ends_with(|c: char| c.is_ascii_alphabetic()) => {
            parse_go_duration(&e.item.raw)
        }
        Value::Integer(v) if *v >= 0 => {
            r.warn(
                &e.item,
                &e.key,
                format!("{} should be converted to a duration", e.key),
            );
            bounded(*v as f64, &e.item.raw)
        }
        Value::Float(v) if *v >= 0.0 => {
            r.warn(
                &e.item,
                &e.key,
                format!("{} should be converted to a duration", e.key),
            );
            bounded(*v, &e.item.raw)
        }
        other => Err(format!("expected a duration, got {}", other.type_name())),
    };
    match parsed {
        Ok(d) => Some(d),
        Err(msg) => {
            r.error(&e.item, format!("error parsing {}: {msg}", e.key));
            None
        }
    }
}

/// `listen`/`http`: a port, or `host:port`.
fn host_port(r: &mut Report, e: &Entry) -> Option<(Option<String>, i64)> {
    match &e.item.value {
        Value::Integer(p) => Some((None, *p)),
        Value::String(s) => {
            let Some((host, port)) = s.rsplit_once(':') else {
                r.error(&e.item, format!("could not parse address string \"{s}\""));
                return None;
            };
            let host = host.trim_start_matches('[').trim_end_matches(']');
            match port.parse::<i64>() {
                Ok(p) => Some(((!host.is_empty()).then(|| host.to_string()), p)),
                Err(_) => {
                    r.error(&e.item, format!("could not parse port \"{port}\""));
                    None
                }
            }
        }
        other => {
            r.error(
                &e.item,
                format!("expected port or host:port, got {}", other.type_name()),
            );
            None
        }
    }
}

/// `operator`: one JWT or a list, each inline or in a file (nats-server's
/// `readOperatorJWT`: a path first, then text starting `eyJ`).
fn operators(e: &Entry, o: &mut Options, r: &mut Report) {
    let items: Vec<&Item> = match &e.item.value {
        Value::Array(items) => items.iter().collect(),
        _ => vec![&e.item],
    };
    let op = o
        .authorization
        .operator
        .get_or_insert_with(Default::default);
    for item in items {
        let Value::String(text) = &item.value else {
            r.error(
                item,
                format!(
                    "error parsing operators: unsupported type {}",
                    item.value.type_name()
                ),
            );
            continue;
        };
        let token = match std::fs::read_to_string(text) {
            Ok(file) => decorated_jwt(&file),
            Err(_) if text.starts_with("eyJ") => text.clone(),
            Err(e) => {
                r.error(item, format!("error parsing operator JWT: {e}"));
                continue;
            }
        };
        match jwt::decode(&token) {
            Ok(claims) if claims.kind == "operator" => op.jwts.push(token),
            Ok(_) => r.error(item, "error parsing operator JWT: not operator claim"),
            Err(e) => r.error(item, format!("error parsing operator JWT: {e}")),
        }
    }
}

/// The JWT in a file: the line after a `-----BEGIN ... JWT-----` line
/// (a creds-style file), or the whole text.
fn decorated_jwt(text: &str) -> String {
    let mut lines = text.lines().map(str::trim);
    while let Some(line) = lines.next() {
        if line.starts_with("-----BEGIN") && line.contains("JWT") {
            if let Some(jwt) = lines.find(|l| !l.is_empty()) {
                return jwt.to_string();
            }
        }
    }
    text.trim().to_string()
}

/// `resolver`: only the memory resolver (`MEMORY`, or any text holding
/// "mem", as nats-server's pattern matches).
fn resolver(e: &Entry, o: &mut Options, r: &mut Report) {
    match &e.item.value {
        Value::String(s) if s.to_ascii_lowercase().contains("mem") => {
            o.authorization
                .operator
                .get_or_insert_with(Default::default)
                .resolver = true;
        }
        Value::String(_) | Value::Map(_) => r.error(
            &e.item,
            "only the MEMORY account resolver is supported by flotilla",
        ),
        other => r.error(
            &e.item,
            format!(
                "error parsing operator resolver, wrong type {}",
                other.type_name()
            ),
        ),
    }
}

/// `resolver_preload`: account public key → account JWT.
fn resolver_preload(e: &Entry, o: &mut Options, r: &mut Report) {
    let Value::Map(m) = &e.item.value else {
        r.error(
            &e.item,
            "preload should be a map of account_public_key:account_jwt",
        );
        return;
    };
    let op = o
        .authorization
        .operator
        .get_or_insert_with(Default::default);
    for account in &m.entries {
        let Value::String(token) = &account.item.value else {
            r.error(&account.item, "preload map value should be a string JWT");
            continue;
        };
        match jwt::decode(token) {
            Ok(claims) if claims.kind == "account" => {
                op.preload
                    .insert(account.key.clone(), token.trim().to_string());
            }
            _ => r.error(&account.item, "invalid account JWT"),
        }
    }
}

/// A block for a feature flotilla lacks: a warning saying what is off,
/// and a note for `/varz`.
fn ignore(e: &Entry, o: &mut Options, r: &mut Report) {
    let (key, off) = IGNORED
        .iter()
        .find(|(key, _)| key.eq_ignore_ascii_case(&e.key))
        .expect("called for an ignored key");
    r.warnings.push(format!(
        "{}: \"{key}\" is not supported by flotilla and is ignored: {off}",
        e.key_pos
    ));
    if !o.ignored_config.iter().any(|k| k == key) {
        o.ignored_config.push(key.to_string());
    }
}

/// nats-server's `validateNoAuthUser`: the user must be configured.
fn check_no_auth_user(user: &str, at: &Entry, o: &Options, r: &mut Report) {
    let a = &o.authorization;
    if a.users.is_empty() && a.nkeys.is_empty() {
        r.error_at(
            at,
            format!("no_auth_user: \"{user}\" present, but users/nkeys are not defined"),
        );
    } else if !a.users.iter().any(|u| u.user == user) && !a.nkeys.iter().any(|u| u.nkey == user) {
        r.error_at(
            at,
            format!("no_auth_user: \"{user}\" not present as user or nkey in authorization block or account configuration"),
        );
    }
}

/// An `authorization` block's `timeout`: seconds (a number, or a duration
/// string), as nats-server reads it, with its warning for a high one.
fn auth_timeout(r: &mut Report, e: &Entry) -> Option<Duration> {
    let secs = match &e.item.value {
        Value::Integer(v) => Some(*v as f64),
        Value::Float(v) => Some(*v),
        Value::String(s) => match parse_go_duration(s) {
            Ok(d) => Some(d.as_secs_f64()),
            Err(msg) => {
                r.error(
                    &e.item,
                    format!("error parsing authorization config, 'timeout' {msg}"),
                );
                None
            }
        },
        _ => {
            r.error(
                &e.item,
                "error parsing authorization config, 'timeout' wrong type",
            );
            None
        }
    };
    if let Some(s) = secs {
        if s > 60.0 {
            r.warn(
                &e.item,
                &e.key,
                format!("timeout of {} ({s:.6} seconds) is high, consider keeping it under 60 seconds. possibly caused by unquoted duration; use '1m' instead of 1m, for example", e.item.raw),
            );
        }
        match bounded(s, &e.item.raw) {
            Ok(d) => return Some(d),
            Err(msg) => r.error(
                &e.item,
                format!("error parsing authorization config, 'timeout' {msg}"),
            ),
        }
    }
    None
}

fn authorization(m: &Map, at: &Entry, o: &mut Options, r: &mut Report) {
    let a = &mut o.authorization;
    let (users_from, nkeys_from) = (a.users.len(), a.nkeys.len());
    let mut defaults = None;
    for e in &m.entries {
        match e.key.to_ascii_lowercase().as_str() {
            "user" | "username" => a.user = string(r, e),
            "pass" | "password" => a.password = string(r, e),
            "token" => a.token = string(r, e),
            "timeout" => {
                if let Some(d) = auth_timeout(r, e) {
                    a.timeout = Some(d);
                }
            }
            "users" => users(e, a, r),
            "default_permission" | "default_permissions" | "permissions" => {
                defaults = permissions::permissions(r, e)
            }
            "auth_callout" => r.error_at(e, format!("\"{}\" is not supported by flotilla", e.key)),
            _ => r.unknown(e),
        }
    }
    // Users without permissions of their own get the defaults, wherever
    // in the block the defaults were written.
    if let Some(defaults) = defaults {
        let users = a.users[users_from..].iter_mut().map(|u| &mut u.permissions);
        let nkeys = a.nkeys[nkeys_from..].iter_mut().map(|u| &mut u.permissions);
        for permissions in users.chain(nkeys).filter(|p| p.is_none()) {
            *permissions = Some(defaults.clone());
        }
    }
    let single = a.user.is_some() || a.password.is_some();
    let listed = a.users.len() > users_from || a.nkeys.len() > nkeys_from;
    if single && a.token.is_some() {
        r.error_at(at, "Cannot have a user/pass and token");
    }
    if single && listed {
        r.error_at(at, "Can not have a single user/pass and a users array");
    }
    if a.token.is_some() && listed {
        r.error_at(at, "Can not have a token and a users array");
    }
}

/// `accounts`: a list of names, or a map of each account's block with
/// its `users` and `default_permissions` (nats-server's `parseAccounts`).
/// Its `exports` and `imports` are read by `links`, its `mappings` by
/// `mappings`, its `limits` here; what else an account block may hold
/// (`nkey`, `msg_trace`) flotilla does not implement, and refuses; its `jetstream` enables JetStream there, with limits.
fn accounts(e: &Entry, o: &mut Options, r: &mut Report) {
    let named = |name: &str, at: &Item, o: &mut Options, r: &mut Report| {
        if name == crate::options::GLOBAL_ACCOUNT {
            r.error(at, format!("{name:?} is a Reserved Account"));
            return false;
        }
        if !o.accounts.iter().any(|a| a == name) {
            o.accounts.push(name.to_string());
        }
        true
    };
    match &e.item.value {
        Value::Array(items) => {
            for item in items {
                match &item.value {
                    Value::String(name) => {
                        named(name, item, o, r);
                    }
                    other => r.error(
                        item,
                        format!(
                            "Expected account name to be a string, got {}",
                            other.type_name()
                        ),
                    ),
                }
            }
        }
        Value::Map(m) => {
            let mut found = links::Links::default();
            for account in &m.entries {
                let Value::Map(block) = &account.item.value else {
                    r.error(&account.item, "Expected map entries for accounts");
                    continue;
                };
                if named(&account.key, &account.item, o, r) {
                    account_block(&account.key, block, &mut found, o, r);
                }
            }
            // As nats-server: imports are checked once every account
            // parsed cleanly.
            if r.errors.is_empty() {
                links::check(found, o, r);
            }
        }
        other => r.error(
            &e.item,
            format!(
                "Expected map or array for accounts, got {}",
                other.type_name()
            ),
        ),
    }
}

/// One account's block: its users join `authorization`, naming it.
fn account_block<'a>(
    name: &str,
    block: &'a Map,
    found: &mut links::Links<'a>,
    o: &mut Options,
    r: &mut Report,
) {
    let (users_from, nkeys_from) = (o.authorization.users.len(), o.authorization.nkeys.len());
    let mut defaults = None;
    let mut users_at = None;
    for e in &block.entries {
        match e.key.to_ascii_lowercase().as_str() {
            "users" => {
                users_at = Some(e);
                users(e, &mut o.authorization, r);
            }
            "default_permissions" => defaults = permissions::permissions(r, e),
            "jetstream" => account_jetstream(name, e, o, r),
            "exports" => links::exports(name, e, found, r),
            "mappings" | "maps" => mappings::mappings(name, e, o, r),
            "limits" => account_limits(name, e, o, r),
            "imports" => links::imports(name, e, found, r),
            "nkey" | "msg_trace" | "trace_dest" => r.error_at(
                e,
                format!("\"{}\" in an account is not supported by flotilla", e.key),
            ),
            _ => r.error_at(e, format!("unknown field {:?}", e.key)),
        }
    }
    let a = &mut o.authorization;
    let users = a.users[users_from..]
        .iter_mut()
        .map(|u| (&mut u.account, &mut u.permissions));
    let nkeys = a.nkeys[nkeys_from..]
        .iter_mut()
        .map(|u| (&mut u.account, &mut u.permissions));
    for (account, permissions) in users.chain(nkeys) {
        *account = Some(name.to_string());
        if permissions.is_none() {
            permissions.clone_from(&defaults);
        }
    }
    if let Some(at) = users_at {
        let added = a.users.len() > users_from || a.nkeys.len() > nkeys_from;
        if added && a.user.is_some() {
            r.error_at(at, "Can not have a single user/pass and accounts");
        }
        if added && a.token.is_some() {
            r.error_at(at, "Can not have a token and accounts");
        }
    }
}

/// An account's `limits { max_connections, max_subscriptions,
/// max_payload, max_leafnodes }` (nats-server's `parseAccountLimits`,
/// its aliases and errors); -1 is no limit.
fn account_limits(name: &str, e: &Entry, o: &mut Options, r: &mut Report) {
    let Value::Map(m) = &e.item.value else {
        let got = e.item.value.type_name();
        return r.error(
            &e.item,
            format!("Expected account limits to be a map/struct, got {got}"),
        );
    };
    let mut limits = crate::options::Limits::default();
    for f in &m.entries {
        let field = match f.key.to_ascii_lowercase().as_str() {
            "max_connections" | "max_conn" => &mut limits.max_connections,
            "max_subscriptions" | "max_subs" => &mut limits.max_subscriptions,
            "max_payload" | "max_pay" => &mut limits.max_payload,
            "max_leafnodes" | "max_leafs" => &mut limits.max_leafnodes,
            _ if f.referenced => continue,
            _ => {
                r.error_at(
                    f,
                    format!("Unknown field {:?} parsing account limits", f.key),
                );
                continue;
            }
        };
        match int(r, f) {
            // nats-server keeps them in 32 bits.
            Some(v) if i32::try_from(v).is_ok() => *field = v,
            Some(v) => r.error(&f.item, format!("{} value {v} is too big", f.key)),
            None => {}
        }
    }
    o.account_limits.insert(name.to_string(), limits);
}

/// A `users` list, each entry added to `a`.
fn users(e: &Entry, a: &mut Authorization, r: &mut Report) {
    let Value::Array(items) = &e.item.value else {
        r.error(
            &e.item,
            format!(
                "Expected users field to be an array, got {}",
                e.item.value.type_name()
            ),
        );
        return;
    };
    for item in items {
        user_entry(item, a, r);
    }
}

/// One entry of `users`: a user and password, or an nkey, each with
/// optional permissions (nats-server's `parseUsers`).
fn user_entry(item: &Item, a: &mut Authorization, r: &mut Report) {
    let Value::Map(um) = &item.value else {
        r.error(
            item,
            format!(
                "Expected user entry to be a map/struct, got {}",
                item.value.type_name()
            ),
        );
        return;
    };
    let (mut user, mut pass, mut nkey, mut perms) = (None, None, None, None);
    for ue in &um.entries {
        match ue.key.to_ascii_lowercase().as_str() {
            "user" | "username" => user = string(r, ue),
            "pass" | "password" => pass = string(r, ue),
            "nkey" => nkey = string(r, ue),
            "permission" | "permissions" | "authorization" => {
                perms = permissions::permissions(r, ue)
            }
            _ => r.unknown(ue),
        }
    }
    match (nkey, user) {
        (Some(_), Some(_)) => r.error(item, "Nkey users do not take usernames or passwords"),
        (Some(_), None) if pass.is_some() => {
            r.error(item, "Nkey users do not take usernames or passwords")
        }
        (Some(nkey), _) if !jwt::is_user_nkey(&nkey) => {
            r.error(item, "Not a valid public nkey for a user")
        }
        (Some(nkey), _) => {
            if a.nkeys.iter().any(|u| u.nkey == nkey) {
                r.error(item, format!("Duplicate nkey {nkey:?} detected"));
            }
            a.nkeys.push(NkeyUser {
                nkey,
                permissions: perms,
                account: None,
            })
        }
        (None, Some(user)) => {
            if a.users.iter().any(|u| u.user == user) {
                r.error(item, format!("Duplicate user {user:?} detected"));
            }
            a.users.push(User {
                user,
                password: pass.unwrap_or_default(),
                permissions: perms,
                account: None,
            });
        }
        (None, None) => r.error(item, "User entry requires a user"),
    }
}

/// An account's `jetstream`: `true`, `enabled`, or a map of its limits
/// (nats-server's `parseJetStreamForAccount`; unset limits are -1).
fn account_jetstream(name: &str, e: &Entry, o: &mut Options, r: &mut Report) {
    let mut limits = jsapi::AccountLimits::default();
    let enabled = match &e.item.value {
        Value::Bool(b) => *b,
        Value::String(s) => match s.to_ascii_lowercase().as_str() {
            "enabled" | "enable" => true,
            "disabled" | "disable" => false,
            _ => {
                let msg = format!("Expected 'enabled' or 'disabled' for string value, got '{s}'");
                return r.error(&e.item, msg);
            }
        },
        Value::Map(m) => {
            for le in &m.entries {
                account_limit(le, &mut limits, r);
            }
            true
        }
        other => {
            let msg = format!(
                "Expected map, bool or string to define JetStream, got {}",
                other.type_name()
            );
            return r.error(&e.item, msg);
        }
    };
    match enabled {
        true => o.account_jetstream.insert(name.to_string(), limits),
        false => o.account_jetstream.remove(name),
    };
}

/// One limit of an account's `jetstream` map.
fn account_limit(e: &Entry, limits: &mut jsapi::AccountLimits, r: &mut Report) {
    let field = match e.key.to_ascii_lowercase().as_str() {
        "max_memory" | "max_mem" | "mem" | "memory" => &mut limits.max_memory,
        "max_store" | "max_file" | "max_disk" | "store" | "disk" => &mut limits.max_storage,
        "max_streams" | "streams" => &mut limits.max_streams,
        "max_consumers" | "consumers" => &mut limits.max_consumers,
        "mem_max_stream_bytes" | "memory_max_stream_bytes" => &mut limits.memory_max_stream_bytes,
        "disk_max_stream_bytes" | "store_max_stream_bytes" => &mut limits.storage_max_stream_bytes,
        "max_ack_pending" => &mut limits.max_ack_pending,
        "max_bytes_required" | "max_stream_bytes" | "max_bytes" => {
            if let Some(b) = boolean(r, e) {
                limits.max_bytes_required = b;
            }
            return;
        }
        "cluster_traffic" => {
            return r.error_at(e, "\"cluster_traffic\" is not supported by flotilla");
        }
        _ => return r.unknown(e),
    };
    if let Some(v) = int(r, e) {
        *field = v;
    }
}

fn jetstream(e: &Entry, o: &mut Options, r: &mut Report) {
    match &e.item.value {
        Value::Bool(b) => o.jetstream.enabled = *b,
        Value::String(s) => match s.to_ascii_lowercase().as_str() {
            "enabled" | "enable" => o.jetstream.enabled = true,
            "disabled" | "disable" => o.jetstream.enabled = false,
            _ => r.error(
                &e.item,
                format!("Expected 'enabled' or 'disabled' for string value, got '{s}'"),
            ),
        },
        Value::Map(m) => {
            o.jetstream.enabled = true;
            for je in &m.entries {
                match je.key.to_ascii_lowercase().as_str() {
                    "enabled" | "enable" => {
                        if let Some(b) = boolean(r, je) {
                            o.jetstream.enabled = b;
                        }
                    }
                    "store" | "store_dir" | "storedir" => {
                        if let Some(v) = string(r, je) {
                            if o.jetstream.store_dir.is_some() {
                                r.error(&je.item, "Duplicate 'store_dir' configuration");
                            }
                            o.jetstream.store_dir = Some(PathBuf::from(v));
                        }
                    }
                    "max_memory_store" | "max_mem_store" | "max_mem" => {
                        o.jetstream.max_memory = int(r, je);
                    }
                    "max_file_store" | "max_file" => o.jetstream.max_file = int(r, je),
                    "domain" => o.jetstream.domain = string(r, je).filter(|d| !d.is_empty()),
                    "sync_interval" | "sync" => match &je.item.value {
                        Value::String(v) if v.eq_ignore_ascii_case("always") => {
                            o.jetstream.sync_interval = None;
                        }
                        _ => {
                            if let Some(d) = duration(r, je) {
                                o.jetstream.sync_interval = (!d.is_zero()).then_some(d);
                            }
                        }
                    },
                    _ => r.unknown(je),
                }
            }
        }
        other => r.error(
            &e.item,
            format!(
                "Expected map, bool or string to define JetStream, got {}",
                other.type_name()
            ),
        ),
    }
}

fn cluster(m: &Map, o: &mut Options, r: &mut Report) {
    for e in &m.entries {
        match e.key.to_ascii_lowercase().as_str() {
            "name" => {
                if let Some(v) = string(r, e) {
                    if v.contains(' ') {
                        r.error(&e.item, "cluster name cannot contain spaces");
                    } else {
                        o.cluster.name = Some(v);
                    }
                }
            }
            "listen" => {
                if let Some((host, port)) = host_port(r, e) {
                    o.cluster.host = host;
                    o.cluster.port = Some(port);
                }
            }
            "host" | "net" => o.cluster.host = string(r, e),
            "port" => o.cluster.port = int(r, e),
            "advertise" | "cluster_advertise" => o.cluster.advertise = string(r, e),
            "no_advertise" => {
                if let Some(b) = boolean(r, e) {
                    o.cluster.no_advertise = b;
                }
            }
            "tls" => {
                if let Some(m) = map(r, e) {
                    o.cluster.tls = Some(tls::tls(m, r));
                }
            }
            "connect_retries" => {
                if let Some(n) = int(r, e) {
                    o.cluster.connect_retries = n.clamp(0, u32::MAX as i64) as u32;
                }
            }
            "authorization" => {
                if let Some(m) = map(r, e) {
                    cluster_authorization(m, o, r);
                }
            }
            "routes" => {
                let Value::Array(items) = &e.item.value else {
                    r.error(
                        &e.item,
                        format!(
                            "expected an array for \"routes\", got {}",
                            e.item.value.type_name()
                        ),
                    );
                    continue;
                };
                for item in items {
                    match &item.value {
                        Value::String(s) => {
                            let s = s.trim().to_string();
                            if o.cluster.routes.contains(&s) {
                                r.warn(item, &s, "Duplicate route entry detected");
                            } else {
                                o.cluster.routes.push(s);
                            }
                        }
                        other => r.error(
                            item,
                            format!("error parsing route url, got {}", other.type_name()),
                        ),
                    }
                }
            }
            _ => r.unknown(e),
        }
    }
}

/// A route's credentials: one user and password (nats-server refuses
/// users lists, tokens and callouts here).
fn cluster_authorization(m: &Map, o: &mut Options, r: &mut Report) {
    for e in &m.entries {
        match e.key.to_ascii_lowercase().as_str() {
            "user" | "username" => o.cluster.user = string(r, e),
            "pass" | "password" => o.cluster.password = string(r, e),
            "timeout" => {}
            "users" => r.error(
                &e.item,
                "Cluster authorization does not allow multiple users",
            ),
            "token" => r.error(&e.item, "Cluster authorization does not support tokens"),
            "auth_callout" => r.error(&e.item, "Cluster authorization does not support callouts"),
            _ => r.unknown(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations() {
        assert_eq!(parse_go_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_go_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_go_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_go_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_go_duration("0"), Ok(Duration::ZERO));
        assert!(parse_go_duration("2").unwrap_err().contains("missing unit"));
        assert!(parse_go_duration("3d")
            .unwrap_err()
            .contains("unknown unit \"d\""));
        assert!(parse_go_duration("abc")
            .unwrap_err()
            .contains("invalid duration"));
        assert!(parse_go_duration("-1s").is_err());
        assert!(parse_go_duration("100000000000000000000s")
            .unwrap_err()
            .contains("longer than a year"));
        assert!(parse_go_duration("1e400s").is_err());
    }
}
