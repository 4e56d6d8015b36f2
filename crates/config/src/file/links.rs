//! An account block's `exports` and `imports` (nats-server's
//! `parseAccountExports`, `parseAccountImports` and the second half of
//! `parseAccounts`), with nats-server's error texts.
//!
//! Each entry is read where it is written; once every account block is
//! read, [`check`] authorizes each import against the exports, as
//! nats-server does after its accounts exist. Its errors name the entry
//! that fails (nats-server names the `accounts` block).
//!
//! Deliberate differences, for safety: an entry with neither a stream
//! nor a service, a `prefix` on a service import, and a `prefix` with a
//! `to` in any order are errors (nats-server drops or ignores them), and
//! so are a `share` on a stream import and an unknown key in a
//! `latency` block.

use conf::{Entry, Item, Value};

use super::Report;
use crate::options::{
    Export, Import, LinkKind, Options, ResponseType, ServiceLatency, DEFAULT_LATENCY_SAMPLING,
    DEFAULT_RESPONSE_THRESHOLD,
};

/// Exports and imports read so far, each with where it was written.
#[derive(Default)]
pub(super) struct Links<'a> {
    exports: Vec<(Export, &'a Item)>,
    imports: Vec<(Import, &'a Item)>,
    /// Service imports read so far, by (importer, local subject,
    /// exporter): the exporter and its subject, for the duplicate
    /// check's error. Two exporters may share a local subject (as
    /// nats-server allows: both hear a request on it).
    services: std::collections::HashMap<(String, String, String), (String, String)>,
}

/// `exports: [...]` of `account`.
pub(super) fn exports<'a>(account: &str, e: &'a Entry, links: &mut Links<'a>, r: &mut Report) {
    let Value::Array(items) = &e.item.value else {
        let got = e.item.value.type_name();
        return r.error(&e.item, format!("Exports should be an array, got {got}"));
    };
    for item in items {
        if let Some(export) = export(account, item, r) {
            links.exports.push((export, item));
        }
    }
}

fn export(account: &str, item: &Item, r: &mut Report) -> Option<Export> {
    let Value::Map(m) = &item.value else {
        let got = item.value.type_name();
        r.error(
            item,
            format!("Export Items should be a map with type entry, got {got}"),
        );
        return None;
    };
    let mut out = Export {
        account: account.to_string(),
        kind: LinkKind::Stream,
        subject: String::new(),
        accounts: Vec::new(),
        response: ResponseType::Singleton,
        response_threshold: DEFAULT_RESPONSE_THRESHOLD,
        account_token_position: None,
        token_req: false,
        allow_trace: false,
        latency: None,
    };
    let (mut kind, mut response_at, mut threshold_at) = (None, None, None);
    let (mut trace_at, mut latency_at) = (None, None);
    for e in &m.entries {
        match e.key.to_ascii_lowercase().as_str() {
            k @ ("stream" | "service") => {
                let this = if k == "stream" {
                    LinkKind::Stream
                } else {
                    LinkKind::Service
                };
                let Value::String(subject) = &e.item.value else {
                    let got = e.item.value.type_name();
                    r.error(
                        &e.item,
                        format!("Expected {k} name to be string, got {got}"),
                    );
                    return None;
                };
                if let Some(seen) = kind.filter(|seen| *seen != this) {
                    let seen: LinkKind = seen;
                    r.error_at(
                        e,
                        format!(
                            "Detected {k} {subject:?} but already saw a {}",
                            seen.as_str()
                        ),
                    );
                    return None;
                }
                kind = Some(this);
                out.subject = subject.clone();
            }
            "accounts" => out.accounts = names(r, e)?,
            "response" | "response_type" => {
                if response_at.replace(e).is_some() {
                    r.error_at(e, "Duplicate response type definition");
                    return None;
                }
                out.response = response_type(r, e)?;
            }
            "threshold" | "response_threshold" | "response_max_time" | "response_time" => {
                if threshold_at.replace(e).is_some() {
                    r.error_at(e, "Duplicate response threshold detected");
                    return None;
                }
                out.response_threshold = threshold(r, e)?;
            }
            "account_token_position" => match &e.item.value {
                Value::Integer(n) if *n > 0 => out.account_token_position = Some(*n as usize),
                // nats-server: zero is no position.
                Value::Integer(0) => {}
                other => {
                    let got = other.type_name();
                    r.error(&e.item, format!("Expected a positive integer, got {got}"));
                    return None;
                }
            },
            "allow_trace" => {
                out.allow_trace = super::boolean(r, e)?;
                trace_at = Some(e);
            }
            "latency" => {
                out.latency = Some(latency(r, e)?);
                latency_at = Some(e);
            }
            _ => r.error_at(e, format!("unknown field {:?}", e.key)),
        }
    }
    let Some(kind) = kind else {
        r.error(item, "Export Items should name a stream or a service");
        return None;
    };
    if kind == LinkKind::Stream && (response_at.is_some() || threshold_at.is_some()) {
        r.error(item, "Detected response directive on non-service");
        return None;
    }
    if let Some(at) = trace_at.filter(|_| kind == LinkKind::Stream) {
        r.error_at(at, "Detected allow_trace directive on non-service");
        return None;
    }
    if let Some(at) = latency_at.filter(|_| kind == LinkKind::Stream) {
        r.error_at(at, "Detected latency directive on non-service");
        return None;
    }
    out.kind = kind;
    Some(out)
}

/// A service export's `latency` (nats-server's `parseServiceLatency`):
/// the results subject alone, or `{ sampling, subject }`, sampling a
/// percentage (`50`, `"50%"`) or `headers`.
fn latency(r: &mut Report, e: &Entry) -> Option<ServiceLatency> {
    let m = match &e.item.value {
        Value::String(results) => {
            return Some(ServiceLatency {
                sampling: DEFAULT_LATENCY_SAMPLING,
                results: results.clone(),
            })
        }
        Value::Map(m) => m,
        other => {
            let got = other.type_name();
            r.error(
                &e.item,
                format!("Expected latency entry to be a map/struct or string, got {got}"),
            );
            return None;
        }
    };
    let mut out = ServiceLatency {
        sampling: DEFAULT_LATENCY_SAMPLING,
        results: String::new(),
    };
    let mut results = None;
    for f in &m.entries {
        match f.key.to_ascii_lowercase().as_str() {
            "sampling" => out.sampling = sampling(r, f)?,
            "subject" => {
                let Value::String(s) = &f.item.value else {
                    let got = f.item.value.type_name();
                    r.error(
                        &f.item,
                        format!("Expected latency subject to be a string, got {got}"),
                    );
                    return None;
                };
                results = Some(s.clone());
            }
            _ => r.error_at(f, format!("unknown field {:?}", f.key)),
        }
    }
    let Some(results) = results else {
        r.error(&e.item, "Latency subject required, but missing");
        return None;
    };
    out.results = results;
    Some(out)
}

/// `sampling`: 1 to 100, as a number or a string with or without `%`;
/// or `headers`, which is 0.
fn sampling(r: &mut Report, f: &Entry) -> Option<u8> {
    let n = match &f.item.value {
        Value::Integer(n) => *n,
        Value::String(s) if s.trim().eq_ignore_ascii_case("headers") => return Some(0),
        Value::String(s) => match s.strip_suffix('%').unwrap_or(s).parse::<i64>() {
            Ok(n) => n,
            Err(e) => {
                r.error(&f.item, format!("Failed to parse latency sample: {e}"));
                return None;
            }
        },
        other => {
            let got = other.type_name();
            r.error(
                &f.item,
                format!("Expected latency sample to be a string or map/struct, got {got}"),
            );
            return None;
        }
    };
    match u8::try_from(n) {
        Ok(n @ 1..=100) => Some(n),
        _ => {
            r.error(&f.item, "bad sampling percentage, should be 1-100");
            None
        }
    }
}

fn names(r: &mut Report, e: &Entry) -> Option<Vec<String>> {
    let Value::Array(items) = &e.item.value else {
        let got = e.item.value.type_name();
        r.error(
            &e.item,
            format!("Expected accounts to be an array, got {got}"),
        );
        return None;
    };
    let mut names = Vec::with_capacity(items.len());
    for item in items {
        let Value::String(name) = &item.value else {
            let got = item.value.type_name();
            r.error(
                item,
                format!("Expected account name to be a string, got {got}"),
            );
            return None;
        };
        names.push(name.clone());
    }
    Some(names)
}

fn response_type(r: &mut Report, e: &Entry) -> Option<ResponseType> {
    let Value::String(text) = &e.item.value else {
        let got = e.item.value.type_name();
        r.error(
            &e.item,
            format!("Expected response type to be string, got {got}"),
        );
        return None;
    };
    match text.to_ascii_lowercase().as_str() {
        "single" | "singleton" => Some(ResponseType::Singleton),
        "stream" => Some(ResponseType::Stream),
        "chunk" | "chunked" => Some(ResponseType::Chunked),
        _ => {
            r.error(&e.item, format!("Unknown response type: {text:?}"));
            None
        }
    }
}

fn threshold(r: &mut Report, e: &Entry) -> Option<std::time::Duration> {
    let parsed = match &e.item.value {
        Value::String(s) => jsapi::duration::parse(s).ok(),
        _ => None,
    };
    if parsed.is_none() {
        r.error(
            &e.item,
            format!(
                "Expected response threshold to be a parseable time duration, got {:?}",
                e.item.raw
            ),
        );
    }
    parsed
}

/// `imports: [...]` of `account`.
pub(super) fn imports<'a>(account: &str, e: &'a Entry, links: &mut Links<'a>, r: &mut Report) {
    let Value::Array(items) = &e.item.value else {
        let got = e.item.value.type_name();
        return r.error(&e.item, format!("Imports should be an array, got {got}"));
    };
    for item in items {
        let Some(import) = import(account, item, r) else {
            continue;
        };
        if import.kind == LinkKind::Service {
            let key = (
                import.account.clone(),
                import.local_subject().to_string(),
                import.from.clone(),
            );
            if let Some((from, subject)) = links.services.get(&key) {
                r.error(
                    item,
                    format!(
                        "Duplicate service import subject {:?}, previously used in import for account {from:?}, subject {subject:?}",
                        import.local_subject(),
                    ),
                );
                continue;
            }
            links
                .services
                .insert(key, (import.from.clone(), import.subject.clone()));
        }
        links.imports.push((import, item));
    }
}

fn import(account: &str, item: &Item, r: &mut Report) -> Option<Import> {
    let Value::Map(m) = &item.value else {
        let got = item.value.type_name();
        r.error(
            item,
            format!("Import Items should be a map with type entry, got {got}"),
        );
        return None;
    };
    let (mut kind, mut from, mut prefix, mut to) = (None, None, None, None);
    let (mut share, mut allow_trace) = (None, None);
    for e in &m.entries {
        match e.key.to_ascii_lowercase().as_str() {
            k @ ("stream" | "service") => {
                let this = if k == "stream" {
                    LinkKind::Stream
                } else {
                    LinkKind::Service
                };
                if let Some(seen) = kind.filter(|seen| *seen != this) {
                    let seen: LinkKind = seen;
                    r.error_at(
                        e,
                        format!("Detected {k} but already saw a {}", seen.as_str()),
                    );
                    return None;
                }
                kind = Some(this);
                from = Some(exporter(r, e, k)?);
            }
            "prefix" => prefix = Some((super::string(r, e)?, e)),
            "to" => to = Some(super::string(r, e)?),
            "share" => share = Some((super::boolean(r, e)?, e)),
            "allow_trace" => allow_trace = Some((super::boolean(r, e)?, e)),
            _ => r.error_at(e, format!("unknown field {:?}", e.key)),
        }
    }
    let (Some(kind), Some((exporter, subject))) = (kind, from) else {
        r.error(item, "Import Items should name a stream or a service");
        return None;
    };
    if let Some((_, at)) = share.filter(|_| kind == LinkKind::Stream) {
        r.error_at(at, "\"share\" is for service imports");
        return None;
    }
    if let Some((_, at)) = allow_trace.filter(|_| kind == LinkKind::Service) {
        r.error_at(at, "Detected allow_trace directive on a non-stream");
        return None;
    }
    let to = match (prefix, to) {
        (Some(_), Some(_)) => {
            r.error(
                item,
                "Stream import can not have a 'prefix' and a 'to' property",
            );
            return None;
        }
        (Some((_, at)), None) if kind == LinkKind::Service => {
            r.error_at(
                at,
                "\"prefix\" is for stream imports: a service import takes \"to\"",
            );
            return None;
        }
        (Some((prefix, at)), None) => {
            if !subjects::is_valid_literal_subject(prefix.trim_end_matches('.').as_bytes()) {
                r.error_at(
                    at,
                    format!(
                        "Error adding stream import {subject:?}: stream import prefix can not contain wildcard tokens"
                    ),
                );
                return None;
            }
            Some(format!("{}.{subject}", prefix.trim_end_matches('.')))
        }
        (None, to) => to.filter(|t| !t.is_empty()),
    };
    Some(Import {
        account: account.to_string(),
        kind,
        from: exporter,
        subject,
        to,
        share: share.is_some_and(|(s, _)| s),
        activated: false,
        allow_trace: allow_trace.is_some_and(|(t, _)| t),
    })
}

/// `stream: { account, subject }` (or `service`).
fn exporter(r: &mut Report, e: &Entry, kind: &str) -> Option<(String, String)> {
    let Value::Map(m) = &e.item.value else {
        let got = e.item.value.type_name();
        let kind = if kind == "stream" {
            "Stream"
        } else {
            "Service"
        };
        r.error(
            &e.item,
            format!("{kind} entry should be an account map, got {got}"),
        );
        return None;
    };
    let (mut account, mut subject) = (None, None);
    for f in &m.entries {
        match f.key.to_ascii_lowercase().as_str() {
            "account" => account = super::string(r, f),
            "subject" => subject = super::string(r, f),
            _ => r.error_at(f, format!("unknown field {:?}", f.key)),
        }
    }
    match (account, subject) {
        (Some(a), Some(s)) if !a.is_empty() && !s.is_empty() => Some((a, s)),
        _ => {
            r.error(&e.item, "Expect an account name and a subject");
            None
        }
    }
}

/// Once every account is read: each export's accounts exist and its
/// subject is valid; each import names an account that exists and
/// exports what it imports to it, forms no cycle, and maps its subject
/// as written. What passes goes into `o`.
pub(super) fn check(links: Links<'_>, o: &mut Options, r: &mut Report) {
    let exists = |name: &str| o.accounts.iter().any(|a| a == name);
    for (export, item) in &links.exports {
        let kind = export.kind.as_str();
        for name in export.accounts.iter().filter(|n| !exists(n)) {
            r.error(
                item,
                format!("{name:?} account not defined for {kind} export"),
            );
        }
        if let Err(why) = crate::links::check_export(export) {
            r.error(
                item,
                format!("Error adding {kind} export {:?}: {why}", export.subject),
            );
        }
    }
    let all: Vec<&Export> = links.exports.iter().map(|(e, _)| e).collect();
    for (export, item) in &links.exports {
        if let Err(why) = crate::links::check_latency(export, all.iter().copied()) {
            let results = export.latency.as_ref().map_or("", |l| &l.results);
            r.error(
                item,
                format!(
                    "Error adding service latency sampling for {:?} on subject {results:?}: {why}",
                    export.subject
                ),
            );
        }
    }
    let exports: Vec<Export> = links.exports.into_iter().map(|(e, _)| e).collect();
    let mut admitted = crate::links::Admitted::new(&exports);
    for (import, item) in links.imports {
        let kind = import.kind.as_str();
        if !exists(&import.from) {
            r.error(
                item,
                format!("{:?} account not defined for {kind} import", import.from),
            );
            continue;
        }
        let subject = import.subject.clone();
        if let Err(why) = admitted.admit(import) {
            r.error(
                item,
                format!("Error adding {kind} import {subject:?}: {why}"),
            );
        }
    }
    let imports = admitted.into_imports();
    o.exports.extend(exports);
    o.imports.extend(imports);
}
