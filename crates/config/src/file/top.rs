//! The config file's top level: a table from each key (and its aliases)
//! to the function that reads its value, then the checks that need the
//! whole file read first.
//!
//! A new top-level key is one line in [`TOP`]: a plain value reads with
//! one of `super`'s readers (`int`, `string`, `duration`, ...), a block
//! with its own function in `super` or in a module of its own.

use std::path::PathBuf;
use std::time::Duration;

use conf::{Entry, Item, Map, Value};

use super::{
    accounts, authorization, boolean, check_no_auth_user, cluster, duration, host_port, ignore,
    int, jetstream, leafnodes, map, operators, resolver, resolver_preload, size31, string, tls,
    websocket, Report, IGNORED, UNSUPPORTED,
};
use crate::options::Options;

/// What reading the top level carries from key to key: the options being
/// built, the report, and the values checked once every key is read.
struct Top<'m, 'o> {
    o: &'o mut Options,
    r: &'o mut Report,
    no_auth_user: Option<(String, &'m Entry)>,
    system_account: Option<(String, &'m Entry)>,
    no_system_account: Option<&'m Entry>,
    websocket_at: Option<&'m Entry>,
    /// A top-level `authorization` block was written.
    authorization: bool,
}

/// Reads one top-level entry into [`Top`].
type Set = for<'m, 'o> fn(&'m Entry, &mut Top<'m, 'o>);

/// Every top-level key flotilla reads, lower case, aliases together.
#[rustfmt::skip]
const TOP: &[(&[&str], Set)] = &[
    (&["listen"], |e, t| {
        if let Some((host, port)) = host_port(t.r, e) {
            if let Some(h) = host {
                t.o.host = h;
            }
            t.o.port = port;
        }
    }),
    (&["host", "net"], |e, t| if let Some(v) = string(t.r, e) { t.o.host = v }),
    (&["port"], |e, t| if let Some(v) = int(t.r, e) { t.o.port = v }),
    (&["server_tags"], |e, t| server_tags(e, t.o, t.r)),
    (&["server_name"], |e, t| {
        if let Some(v) = string(t.r, e) {
            if v.contains(' ') {
                t.r.error(&e.item, "server name cannot contain spaces");
            } else {
                t.o.server_name = Some(v);
            }
        }
    }),
    (&["http"], |e, t| {
        if let Some((host, port)) = host_port(t.r, e) {
            t.o.http_host = host;
            t.o.http_port = port;
        }
    }),
    (&["http_port", "monitor_port"], |e, t| if let Some(v) = int(t.r, e) { t.o.http_port = v }),
    (&["https"], |e, t| {
        if let Some((host, port)) = host_port(t.r, e) {
            t.o.http_host = host;
            t.o.https_port = port;
        }
    }),
    (&["https_port"], |e, t| if let Some(v) = int(t.r, e) { t.o.https_port = v }),
    (&["http_base_path"], |e, t| if let Some(v) = string(t.r, e) { t.o.http_base_path = v }),
    (&["max_payload"], |e, t| if let Some(v) = size31(t.r, e) { t.o.max_payload = v }),
    (&["max_control_line"], |e, t| if let Some(v) = size31(t.r, e) { t.o.max_control_line = v }),
    (&["max_pending"], |e, t| match int(t.r, e) {
        Some(v) if v <= 0 => t.r.error(&e.item, "max_pending must be positive"),
        Some(v) => t.o.max_pending = v as usize,
        None => {}
    }),
    (&["max_connections", "max_conn"], |e, t| {
        if let Some(v) = int(t.r, e) {
            t.o.max_connections = v.max(0) as usize;
        }
    }),
    (&["ping_interval"], |e, t| if let Some(v) = duration(t.r, e) { t.o.ping_interval = v }),
    (&["ping_max"], |e, t| {
        if let Some(v) = int(t.r, e) {
            t.o.ping_max = v.clamp(0, u32::MAX as i64) as u32;
        }
    }),
    (&["write_deadline"], |e, t| if let Some(v) = duration(t.r, e) { t.o.write_deadline = v }),
    (&["lame_duck_duration"], |e, t| match duration(t.r, e) {
        Some(v) if v < Duration::from_secs(30) => t.r.error(
            &e.item,
            format!("invalid lame_duck_duration of {v:?}, minimum is 30 seconds"),
        ),
        Some(v) => t.o.lame_duck_duration = v,
        None => {}
    }),
    (&["lame_duck_grace_period"], |e, t| {
        if let Some(v) = duration(t.r, e) {
            t.o.lame_duck_grace_period = v;
        }
    }),
    (&["debug"], |e, t| if let Some(v) = boolean(t.r, e) { t.o.debug = v }),
    (&["trace"], |e, t| if let Some(v) = boolean(t.r, e) { t.o.trace = v }),
    (&["logtime"], |e, t| if let Some(v) = boolean(t.r, e) { t.o.logtime = v }),
    (&["logfile", "log_file"], |e, t| {
        if let Some(v) = string(t.r, e) {
            t.o.logfile = Some(PathBuf::from(v));
        }
    }),
    (&["pidfile", "pid_file"], |e, t| {
        if let Some(v) = string(t.r, e) {
            t.o.pid_file = Some(PathBuf::from(v));
        }
    }),
    (&["ports_file_dir"], |e, t| {
        if let Some(v) = string(t.r, e) {
            t.o.ports_file_dir = Some(PathBuf::from(v));
        }
    }),
    (&["authorization"], |e, t| {
        t.authorization = true;
        if let Some(m) = map(t.r, e) { authorization(m, e, t.o, t.r) }
    }),
    (&["tls"], |e, t| if let Some(m) = map(t.r, e) { t.o.tls = Some(tls::tls(m, t.r)) }),
    (&["accounts"], |e, t| accounts(e, t.o, t.r)),
    (&["mappings", "maps"], |e, t| {
        super::mappings::mappings(crate::options::GLOBAL_ACCOUNT, e, t.o, t.r)
    }),
    (
        &["operator", "operators", "root", "roots", "root_operator", "root_operators"],
        |e, t| operators(e, t.o, t.r),
    ),
    (&["resolver", "account_resolver", "accounts_resolver"], |e, t| resolver(e, t.o, t.r)),
    (&["resolver_preload"], |e, t| resolver_preload(e, t.o, t.r)),
    (&["system_account", "system"], |e, t| {
        if let Some(v) = string(t.r, e) {
            t.system_account = Some((v, e));
        }
    }),
    (&["no_system_account", "no_system", "no_sys_acc"], |e, t| {
        if let Some(v) = super::boolean(t.r, e) {
            t.o.no_system_account = v;
            t.no_system_account = Some(e);
        }
    }),
    (&["no_auth_user"], |e, t| {
        if let Some(v) = string(t.r, e) {
            t.no_auth_user = Some((v, e));
        }
    }),
    (&["store_dir", "storedir"], |e, t| {
        if let Some(v) = string(t.r, e) {
            t.o.jetstream.store_dir = Some(PathBuf::from(v));
        }
    }),
    (&["jetstream"], |e, t| jetstream(e, t.o, t.r)),
    (&["websocket", "ws"], |e, t| {
        websocket::websocket(e, t.o, t.r);
        t.websocket_at = Some(e);
    }),
    (&["leafnodes", "leaf"], |e, t| leafnodes::leafnodes(e, t.o, t.r)),
    (&["cluster"], |e, t| if let Some(m) = map(t.r, e) { cluster(m, t.o, t.r) }),
];

/// Reads the top level of a config file into `o`, key by key, then
/// checks what needs the whole file.
pub(super) fn apply(m: &Map, o: &mut Options, r: &mut Report) {
    let mut top = Top {
        o,
        r,
        no_auth_user: None,
        system_account: None,
        no_system_account: None,
        websocket_at: None,
        authorization: false,
    };
    for e in &m.entries {
        let key = e.key.to_ascii_lowercase();
        let key = key.as_str();
        match TOP.iter().find(|(names, _)| names.contains(&key)) {
            Some((_, set)) => set(e, &mut top),
            None if IGNORED.iter().any(|(k, _)| *k == key) => ignore(e, top.o, top.r),
            None if UNSUPPORTED.contains(&key) => top
                .r
                .error_at(e, format!("\"{}\" is not supported by flotilla", e.key)),
            None => top.r.unknown(e),
        }
    }
    top.finish();
}

impl Top<'_, '_> {
    /// The checks that need every key read: `no_auth_user` names a user
    /// configured anywhere, websocket auth against the top level's, and
    /// the system account against the operator's.
    fn finish(self) {
        let Top {
            o,
            r,
            no_auth_user,
            system_account,
            no_system_account,
            websocket_at,
            authorization,
        } = self;
        if let Some((user, at)) = no_auth_user {
            check_no_auth_user(&user, at, o, r);
            o.authorization.no_auth_user = Some(user);
        }
        if let Some(at) = websocket_at {
            websocket::validate_auth(at, o, r);
        }
        // A resolver without an operator is unused, as in nats-server.
        if o.authorization
            .operator
            .as_ref()
            .is_some_and(|op| op.jwts.is_empty())
        {
            o.authorization.operator = None;
        }
        system_account_of(system_account, o, r);
        if !authorization {
            anonymous_into_global(o);
        }
        if let Some(at) = no_system_account {
            latency_needs_system(at, o, r);
        }
    }
}

/// `system_account`: in operator mode it must match the operator JWT's
/// (which names it when the config does not); outside operator mode it
/// names an account the config defines (or `$SYS`, which the server
/// makes), and an account block called `$SYS` is the system account
/// when none is named, as nats-server's `configureAccounts` makes it.
fn system_account_of(configured: Option<(String, &Entry)>, o: &mut Options, r: &mut Report) {
    let sys = crate::options::DEFAULT_SYSTEM_ACCOUNT;
    match (&configured, o.authorization.operator.is_some()) {
        (Some((name, at)), false) => {
            if name != sys && !o.accounts.contains(name) {
                r.error_at(at, "error resolving system account: account missing");
            }
            o.system_account = Some(name.clone());
        }
        (None, false) if o.accounts.iter().any(|a| a == sys) => {
            o.system_account = Some(sys.to_string());
        }
        _ => {}
    }
    match (configured, o.authorization.operator.as_mut()) {
        (Some((name, at)), Some(op)) => {
            let from_jwt = jwt::operator_system_account(&op.jwts);
            if from_jwt.as_ref().is_some_and(|j| *j != name) {
                r.error_at(
                    at,
                    "system_account in config and operator JWT must be identical",
                );
            }
            op.system_account = Some(name);
            o.system_account = op.system_account.clone();
        }
        (None, Some(op)) => {
            op.system_account = jwt::operator_system_account(&op.jwts);
            o.system_account = op.system_account.clone();
        }
        (_, None) => {}
    }
}

/// nats-server's special case for a config whose only account is the
/// system account (`configureAccounts`): with no `authorization` block
/// and no `no_auth_user`, clients without credentials still land in
/// `$G`, through a hidden user `nats-xxxxxxxx` it makes for them.
fn anonymous_into_global(o: &mut Options) {
    let only_system = match (&o.system_account, o.accounts.as_slice()) {
        (Some(system), [only]) => only == system,
        _ => false,
    };
    if !only_system || o.authorization.operator.is_some() || o.authorization.no_auth_user.is_some()
    {
        return;
    }
    let secret = hidden_secret();
    let user = format!("nats-{secret}");
    o.authorization.users.push(crate::options::User {
        user: user.clone(),
        password: secret,
        permissions: None,
        account: None,
    });
    o.authorization.no_auth_user = Some(user);
}

/// Eight random alphanumeric characters, from the process's hash seed,
/// the same for the whole process: a reload finds the same hidden user,
/// so it is no change of authorization.
fn hidden_secret() -> String {
    static SECRET: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    SECRET
        .get_or_init(|| {
            use std::hash::{BuildHasher, Hasher};
            const DIGITS: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u64(0x5eed);
            let mut n = h.finish();
            (0..8)
                .map(|_| {
                    let c = DIGITS[(n % 62) as usize] as char;
                    n /= 62;
                    c
                })
                .collect()
        })
        .clone()
}

/// Service latency is published through the system account's events:
/// with none (`no_system_account`, nothing named), nats-server refuses
/// every `latency`.
fn latency_needs_system(at: &Entry, o: &Options, r: &mut Report) {
    if o.system_account().is_some() {
        return;
    }
    for e in o.exports.iter().filter(|e| e.latency.is_some()) {
        r.error_at(
            at,
            format!(
                "Error adding service latency sampling for {:?}: system account not setup",
                e.subject
            ),
        );
    }
}

/// `server_tags`: a string or a list of strings, each trimmed and lower
/// case, kept once.
fn server_tags(e: &Entry, o: &mut Options, r: &mut Report) {
    let items: Vec<&Item> = match &e.item.value {
        Value::Array(items) => items.iter().collect(),
        _ => vec![&e.item],
    };
    for item in items {
        match &item.value {
            Value::String(t) => {
                let t = t.trim().to_lowercase();
                if !t.is_empty() && !o.server_tags.contains(&t) {
                    o.server_tags.push(t);
                }
            }
            other => r.error(
                item,
                format!("error parsing tags: unsupported type {}", other.type_name()),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str) -> (Options, Report) {
        let map =
            conf::parse_str(text, "t.conf", std::path::Path::new("."), &|_| None).expect("parses");
        let (mut o, mut r) = (Options::default(), Report::default());
        apply(&map, &mut o, &mut r);
        (o, r)
    }

    #[test]
    fn keys_are_read_in_any_case() {
        let (o, r) = load("MAX_PAYLOAD: 1024\nMQTT { port: 1883 }\nTrusted: x\n");
        assert_eq!(o.max_payload, 1024);
        assert_eq!(o.ignored_config, ["mqtt"], "{:?}", r.warnings);
        assert_eq!(r.errors.len(), 1, "{:?}", r.errors);
        assert!(r.errors[0].contains("\"Trusted\" is not supported"));
    }

    #[test]
    fn each_key_has_one_reader() {
        let mut seen = std::collections::BTreeSet::new();
        let refused = UNSUPPORTED.iter().chain(IGNORED.iter().map(|(k, _)| k));
        for key in TOP.iter().flat_map(|(names, _)| names.iter()) {
            assert_eq!(*key, key.to_ascii_lowercase(), "{key} is lower case");
            assert!(seen.insert(*key), "{key} is read once");
        }
        for key in refused {
            assert!(!seen.contains(key), "{key} is read and refused");
        }
    }
}
