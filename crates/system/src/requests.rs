//! `$SYS.REQ.SERVER.PING.<NAME>` (every server answers) and
//! `$SYS.REQ.SERVER.<id>.<NAME>` (this one): what each `NAME` answers,
//! how its request body is read, and nats-server's reply shapes
//! (`statszReq`, `idzReq` and `zReq` in its `events.go`).
//!
//! A body is JSON: filter options that decide whether this server
//! answers at all (nats-server's `EventFilterOptions`), beside the
//! monitoring options of the endpoint asked (`ConnzOptions`, ...), which
//! become the endpoint's query. An empty body filters nothing; a body
//! that does not decode is answered with a 400 by every server.

use serde::Serialize;
use serde_json::{Map, Value};

use crate::info::ServerInfo;

/// One service a `$SYS.REQ.SERVER` request names.
pub struct Service {
    /// The request subject's last token.
    pub name: &'static str,
    pub answer: Answer,
}

/// How a service answers.
pub enum Answer {
    /// A bare `ServerStatsMsg` (`{"server", "statsz"}`).
    Statsz,
    /// A bare `ServerID`, to anyone, whatever the body.
    Idz,
    /// Closes a client (`{"cid": N}`): a `ServerAPIResponse` without
    /// data, or its error. This server's id only, never `PING`.
    Kick,
    /// Tells a client (`{"cid": N}`) this server goes (lame duck INFO).
    /// This server's id only.
    Ldm,
    /// Reloads the config file, as SIGHUP: no data, or the reason it
    /// was refused (500). This server's id only.
    Reload,
    /// A monitoring endpoint's JSON as `data` in a `ServerAPIResponse`.
    Monitor {
        path: &'static str,
        options: &'static [Opt],
    },
}

impl Answer {
    /// Asked of one server by its id, never of all (`PING`).
    pub fn one_server(&self) -> bool {
        matches!(self, Answer::Kick | Answer::Ldm | Answer::Reload)
    }
}

/// One monitoring option of a request body: its JSON key, the query
/// name the endpoint reads, and how the value is written there.
pub struct Opt {
    pub json: &'static str,
    pub query: &'static str,
    pub kind: Kind,
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Str,
    Bool,
    Int,
    /// `subscriptions_detail: true`, which the query says as
    /// `subs=detail`.
    Detail,
    /// `ConnState`: 0 open, 1 closed, 2 all.
    State,
}

const fn opt(json: &'static str, query: &'static str, kind: Kind) -> Opt {
    Opt { json, query, kind }
}

const CONNZ: &[Opt] = &[
    opt("sort", "sort", Kind::Str),
    opt("auth", "auth", Kind::Bool),
    opt("subscriptions", "subs", Kind::Bool),
    opt("subscriptions_detail", "subs", Kind::Detail),
    opt("offset", "offset", Kind::Int),
    opt("limit", "limit", Kind::Int),
    opt("cid", "cid", Kind::Int),
    opt("state", "state", Kind::State),
    opt("user", "user", Kind::Str),
    opt("acc", "acc", Kind::Str),
];

const SUBSZ: &[Opt] = &[
    opt("offset", "offset", Kind::Int),
    opt("limit", "limit", Kind::Int),
    opt("subscriptions", "subs", Kind::Bool),
    opt("account", "acc", Kind::Str),
    opt("test", "test", Kind::Str),
];

const ROUTEZ: &[Opt] = &[
    opt("subscriptions", "subs", Kind::Bool),
    opt("subscriptions_detail", "subs", Kind::Detail),
];

const LEAFZ: &[Opt] = &[
    opt("subscriptions", "subs", Kind::Bool),
    opt("account", "acc", Kind::Str),
];

const ACCOUNTZ: &[Opt] = &[opt("account", "acc", Kind::Str)];

const JSZ: &[Opt] = &[
    opt("account", "acc", Kind::Str),
    opt("accounts", "accounts", Kind::Bool),
    opt("streams", "streams", Kind::Bool),
    opt("consumer", "consumers", Kind::Bool),
    opt("direct_consumer", "direct-consumers", Kind::Bool),
    opt("config", "config", Kind::Bool),
    opt("leader_only", "leader-only", Kind::Bool),
    opt("offset", "offset", Kind::Int),
    opt("limit", "limit", Kind::Int),
    opt("raft", "raft", Kind::Bool),
    opt("stream_leader_only", "stream-leader-only", Kind::Bool),
];

const HEALTHZ: &[Opt] = &[
    opt("js-enabled", "js-enabled", Kind::Bool),
    opt("js-enabled-only", "js-enabled-only", Kind::Bool),
    opt("js-server-only", "js-server-only", Kind::Bool),
    opt("js-meta-only", "js-meta-only", Kind::Bool),
    opt("account", "account", Kind::Str),
    opt("stream", "stream", Kind::Str),
    opt("consumer", "consumer", Kind::Str),
    opt("details", "details", Kind::Bool),
];

const IPQUEUESZ: &[Opt] = &[
    opt("all", "all", Kind::Bool),
    opt("filter", "queues", Kind::Str),
];

const RAFTZ: &[Opt] = &[
    opt("account", "acc", Kind::Str),
    opt("group", "group", Kind::Str),
];

/// Every service, as nats-server's `initEventTracking` registers them
/// (those flotilla serves; `STATSZ` is also the bare `PING`'s answer).
pub const SERVICES: &[Service] = &[
    Service {
        name: "STATSZ",
        answer: Answer::Statsz,
    },
    Service {
        name: "IDZ",
        answer: Answer::Idz,
    },
    Service {
        name: "KICK",
        answer: Answer::Kick,
    },
    Service {
        name: "LDM",
        answer: Answer::Ldm,
    },
    Service {
        name: "RELOAD",
        answer: Answer::Reload,
    },
    Service {
        name: "VARZ",
        answer: Answer::Monitor {
            path: "/varz",
            options: &[],
        },
    },
    Service {
        name: "CONNZ",
        answer: Answer::Monitor {
            path: "/connz",
            options: CONNZ,
        },
    },
    Service {
        name: "SUBSZ",
        answer: Answer::Monitor {
            path: "/subsz",
            options: SUBSZ,
        },
    },
    Service {
        name: "ROUTEZ",
        answer: Answer::Monitor {
            path: "/routez",
            options: ROUTEZ,
        },
    },
    Service {
        name: "GATEWAYZ",
        answer: Answer::Monitor {
            path: "/gatewayz",
            options: &[],
        },
    },
    Service {
        name: "LEAFZ",
        answer: Answer::Monitor {
            path: "/leafz",
            options: LEAFZ,
        },
    },
    Service {
        name: "ACCOUNTZ",
        answer: Answer::Monitor {
            path: "/accountz",
            options: ACCOUNTZ,
        },
    },
    Service {
        name: "JSZ",
        answer: Answer::Monitor {
            path: "/jsz",
            options: JSZ,
        },
    },
    Service {
        name: "HEALTHZ",
        answer: Answer::Monitor {
            path: "/healthz",
            options: HEALTHZ,
        },
    },
    Service {
        name: "IPQUEUESZ",
        answer: Answer::Monitor {
            path: "/ipqueuesz",
            options: IPQUEUESZ,
        },
    },
    Service {
        name: "RAFTZ",
        answer: Answer::Monitor {
            path: "/raftz",
            options: RAFTZ,
        },
    },
];

/// The service a request subject names: `$SYS.REQ.SERVER.PING` (the
/// statsz), `...PING.<NAME>` or `...<id>.<NAME>` for this server's `id`.
pub fn service(subject: &str, id: &str) -> Option<&'static Service> {
    let rest = subject.strip_prefix("$SYS.REQ.SERVER.")?;
    let (name, ping) = match rest.split_once('.') {
        None if rest == "PING" => ("STATSZ", true),
        None => return None,
        Some(("PING", name)) => (name, true),
        Some((to, name)) if to == id => (name, false),
        Some(_) => return None,
    };
    let found = SERVICES.iter().find(|s| s.name == name)?;
    // A client is one server's: never asked of all.
    let one_server = found.answer.one_server();
    (!(ping && one_server)).then_some(found)
}

/// nats-server's `EventFilterOptions`: which servers a request is for.
#[derive(Debug, Default, PartialEq)]
pub struct Filter {
    pub server_name: String,
    pub cluster: String,
    pub host: String,
    pub exact_match: bool,
    pub tags: Vec<String>,
    pub domain: String,
}

/// What this server is, for a [`Filter`].
pub struct Me {
    pub name: String,
    pub cluster: String,
    pub host: String,
    pub tags: Vec<String>,
    pub domain: String,
}

impl Filter {
    /// Whether this server is left out (nats-server's `filterRequest`):
    /// name, host and cluster contain the filter's (or equal it, with
    /// `exact_match`), every tag is the server's, and the domain is its.
    pub fn excludes(&self, me: &Me) -> bool {
        let differs = |want: &str, have: &str| {
            !want.is_empty()
                && match self.exact_match {
                    true => want != have,
                    false => !have.contains(want),
                }
        };
        differs(&self.server_name, &me.name)
            || differs(&self.host, &me.host)
            || differs(&self.cluster, &me.cluster)
            || self
                .tags
                .iter()
                .any(|t| !me.tags.contains(&t.trim().to_lowercase()))
            || (!self.domain.is_empty() && self.domain != me.domain)
    }
}

/// A request body read: its filter and the endpoint's query pairs.
#[derive(Debug, Default, PartialEq)]
pub struct Body {
    pub filter: Filter,
    pub query: Vec<(String, String)>,
}

/// Reads a request body for a service with `options`, as Go decodes it
/// into the service's options struct: keys matched without case,
/// unknown keys ignored, a value of the wrong type an error (its text
/// goes back in a 400). An empty body (or `null`) is no options at all.
pub fn read_body(body: &[u8], options: &[Opt]) -> Result<Body, String> {
    let mut out = Body::default();
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(out);
    }
    let value: Value = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    let map = match value {
        Value::Object(map) => map,
        Value::Null => return Ok(out),
        other => {
            return Err(format!(
                "json: cannot unmarshal {} into Go value",
                kind_of(&other)
            ))
        }
    };
    for (key, v) in &map {
        let key = key.to_ascii_lowercase();
        match key.as_str() {
            "server_name" => out.filter.server_name = string(&key, v)?,
            "cluster" => out.filter.cluster = string(&key, v)?,
            "host" => out.filter.host = string(&key, v)?,
            "domain" => out.filter.domain = string(&key, v)?,
            "exact_match" => out.filter.exact_match = boolean(&key, v)?,
            "tags" => out.filter.tags = strings(&key, v)?,
            _ => {}
        }
        for o in options.iter().filter(|o| o.json == key) {
            if let Some(text) = option_text(o, v)? {
                out.query.retain(|(q, _)| q != o.query);
                out.query.push((o.query.to_string(), text));
            }
        }
    }
    Ok(out)
}

/// The query text of one option's value; `None` when it asks nothing
/// (false, zero, empty).
fn option_text(o: &Opt, v: &Value) -> Result<Option<String>, String> {
    let text = match o.kind {
        Kind::Str => string(o.json, v)?,
        Kind::Bool => match boolean(o.json, v)? {
            true => "true".into(),
            false => String::new(),
        },
        Kind::Detail => match boolean(o.json, v)? {
            true => "detail".into(),
            false => String::new(),
        },
        Kind::Int => match v {
            Value::Null => String::new(),
            v => v
                .as_i64()
                .map(|n| n.to_string())
                .ok_or_else(|| mismatch(o.json, v, "int"))?,
        },
        Kind::State => match (v, v.as_i64()) {
            (Value::Null, _) | (_, Some(0)) => String::new(),
            (_, Some(1)) => "closed".into(),
            (_, Some(2)) => "all".into(),
            (_, Some(n)) => n.to_string(),
            (_, None) => return Err(mismatch(o.json, v, "server.ConnState")),
        },
    };
    Ok((!text.is_empty()).then_some(text))
}

fn string(key: &str, v: &Value) -> Result<String, String> {
    match v {
        Value::String(s) => Ok(s.clone()),
        Value::Null => Ok(String::new()),
        other => Err(mismatch(key, other, "string")),
    }
}

fn boolean(key: &str, v: &Value) -> Result<bool, String> {
    match v {
        Value::Bool(b) => Ok(*b),
        Value::Null => Ok(false),
        other => Err(mismatch(key, other, "bool")),
    }
}

fn strings(key: &str, v: &Value) -> Result<Vec<String>, String> {
    match v {
        Value::Null => Ok(Vec::new()),
        Value::Array(items) => items.iter().map(|i| string(key, i)).collect(),
        other => Err(mismatch(key, other, "[]string")),
    }
}

/// Go's `UnmarshalTypeError` text.
fn mismatch(key: &str, v: &Value, go: &str) -> String {
    format!(
        "json: cannot unmarshal {} into Go struct field .{key} of type {go}",
        kind_of(v)
    )
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// nats-server's `ApiError`, as a `ServerAPIResponse` carries it.
#[derive(Debug, Serialize)]
pub struct ApiError {
    pub code: u16,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub description: String,
}

/// A `ServerAPIResponse` with `data` (already JSON) or `error`.
pub fn response(server: &ServerInfo, data: Result<&[u8], ApiError>) -> Vec<u8> {
    let mut out = b"{\"server\":".to_vec();
    out.extend(serde_json::to_vec(server).expect("server info serializes"));
    match data {
        Ok(json) => {
            debug_assert!(
                serde_json::from_slice::<Value>(json).is_ok(),
                "data is JSON"
            );
            out.extend_from_slice(b",\"data\":");
            out.extend_from_slice(json);
        }
        Err(e) => {
            out.extend_from_slice(b",\"error\":");
            out.extend(serde_json::to_vec(&e).expect("errors serialize"));
        }
    }
    out.push(b'}');
    out
}

/// A `ServerAPIResponse` with neither data nor error (a done action).
pub fn response_done(server: &ServerInfo) -> Vec<u8> {
    let mut out = b"{\"server\":".to_vec();
    out.extend(serde_json::to_vec(server).expect("server info serializes"));
    out.push(b'}');
    out
}

/// A `/healthz` answer as `HEALTHZ` data: with its `status_code`, which
/// nats-server's `HealthStatus` carries there.
pub fn with_status_code(body: &[u8], status: u16) -> Vec<u8> {
    let Ok(Value::Object(mut map)) = serde_json::from_slice::<Value>(body) else {
        return body.to_vec();
    };
    let mut out = Map::new();
    for (k, v) in std::mem::take(&mut map) {
        out.insert(k.clone(), v);
        if k == "status" {
            out.insert("status_code".into(), status.into());
        }
    }
    serde_json::to_vec(&out).expect("json")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subjects_name_their_service() {
        let name = |s: &str| service(s, "NID").map(|s| s.name);
        assert_eq!(name("$SYS.REQ.SERVER.PING"), Some("STATSZ"));
        assert_eq!(name("$SYS.REQ.SERVER.PING.VARZ"), Some("VARZ"));
        assert_eq!(name("$SYS.REQ.SERVER.NID.CONNZ"), Some("CONNZ"));
        assert_eq!(name("$SYS.REQ.SERVER.OTHER.CONNZ"), None);
        assert_eq!(name("$SYS.REQ.SERVER.PING.BOGUS"), None);
        assert_eq!(name("$SYS.REQ.ACCOUNT.PING.CONNZ"), None);
    }

    #[test]
    fn bodies_become_filters_and_queries() {
        let body = br#"{"Server_Name":"n1","exact_match":true,"tags":["A"],"subscriptions_detail":true,"limit":5,"state":1,"acc":"X","unknown":3}"#;
        let read = read_body(body, CONNZ).unwrap();
        assert_eq!(read.filter.server_name, "n1");
        assert!(read.filter.exact_match);
        let mut q = read.query.clone();
        q.sort();
        let pairs = |p: &[(&str, &str)]| {
            p.iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            q,
            pairs(&[
                ("acc", "X"),
                ("limit", "5"),
                ("state", "closed"),
                ("subs", "detail")
            ])
        );
        assert_eq!(read_body(b"", CONNZ).unwrap(), Body::default());
        assert_eq!(read_body(b"null", CONNZ).unwrap(), Body::default());
        assert!(read_body(b"{bad", CONNZ).is_err());
        assert!(read_body(br#"{"limit":"x"}"#, CONNZ).is_err());
        assert!(read_body(br#"{"server_name":5}"#, &[]).is_err());
    }

    #[test]
    fn filters_pick_servers_as_nats_server() {
        let me = Me {
            name: "n1-east".into(),
            cluster: "C".into(),
            host: "0.0.0.0".into(),
            tags: vec!["east".into()],
            domain: String::new(),
        };
        let f = |name: &str, exact: bool| Filter {
            server_name: name.into(),
            exact_match: exact,
            ..Filter::default()
        };
        assert!(!f("n1", false).excludes(&me));
        assert!(f("n1", true).excludes(&me));
        assert!(!f("n1-east", true).excludes(&me));
        assert!(f("n2", false).excludes(&me));
        let tagged = |t: &str| Filter {
            tags: vec![t.into()],
            ..Filter::default()
        };
        assert!(!tagged("EAST").excludes(&me));
        assert!(tagged("west").excludes(&me));
        let domain = Filter {
            domain: "hub".into(),
            ..Filter::default()
        };
        assert!(domain.excludes(&me));
    }
}

/// `$SYS.REQ.ACCOUNT.<acc>.<NAME>`: one account's view, asked by the
/// system account or, through the imports every account has from it,
/// by the account's own clients (nats-server's `accountReq` handlers).
pub struct AccountService {
    pub name: &'static str,
    pub answer: AccountAnswer,
}

pub enum AccountAnswer {
    /// A monitoring endpoint limited to the account (`query` names it),
    /// with `forced` options, as `data`.
    Monitor {
        path: &'static str,
        options: &'static [Opt],
        query: &'static str,
        forced: &'static [(&'static str, &'static str)],
    },
    /// `/jsz`'s entry for the account (`JszAccount`'s `AccountDetail`).
    Jsz,
    /// `/accountz`'s detail of the account (`accountInfo`).
    Info,
    /// `AccountStatz` of the account, silent without connections here
    /// unless `include_unused`.
    Statz,
    /// A bare `AccountNumConns`, only with connections here.
    Conns,
}

pub const ACCOUNT_SERVICES: &[AccountService] = &[
    AccountService {
        name: "SUBSZ",
        answer: AccountAnswer::Monitor {
            path: "/subsz",
            options: SUBSZ,
            query: "acc",
            forced: &[("subs", "true")],
        },
    },
    AccountService {
        name: "CONNZ",
        answer: AccountAnswer::Monitor {
            path: "/connz",
            options: CONNZ,
            query: "acc",
            forced: &[],
        },
    },
    AccountService {
        name: "LEAFZ",
        answer: AccountAnswer::Monitor {
            path: "/leafz",
            options: LEAFZ,
            query: "acc",
            forced: &[],
        },
    },
    AccountService {
        name: "JSZ",
        answer: AccountAnswer::Jsz,
    },
    AccountService {
        name: "INFO",
        answer: AccountAnswer::Info,
    },
    AccountService {
        name: "STATZ",
        answer: AccountAnswer::Statz,
    },
    AccountService {
        name: "CONNS",
        answer: AccountAnswer::Conns,
    },
];

/// The account and service an account request's subject names.
pub fn account_service(subject: &str) -> Option<(&str, &'static AccountService)> {
    let rest = subject.strip_prefix("$SYS.REQ.ACCOUNT.")?;
    let (account, name) = rest.rsplit_once('.')?;
    if account.is_empty() || account.contains('.') {
        return None;
    }
    let service = ACCOUNT_SERVICES.iter().find(|s| s.name == name)?;
    Some((account, service))
}

/// `AccountStatzOptions` (beside the filter): which accounts, and
/// whether those without connections here count.
#[derive(Debug, Default, PartialEq)]
pub struct StatzOptions {
    pub accounts: Vec<String>,
    pub include_unused: bool,
}

pub fn statz_options(body: &[u8]) -> Result<StatzOptions, String> {
    let mut out = StatzOptions::default();
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(out);
    }
    let value: Value = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    let Value::Object(map) = value else {
        return Ok(out);
    };
    for (key, v) in &map {
        match key.to_ascii_lowercase().as_str() {
            "accounts" => out.accounts = strings(key, v)?,
            "include_unused" => out.include_unused = boolean(key, v)?,
            _ => {}
        }
    }
    Ok(out)
}
