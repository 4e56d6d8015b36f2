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
//! so are a `share` on a stream import and the keys flotilla does not
//! implement yet (`latency`, `allow_trace`).

use conf::{Entry, Item, Value};

use super::Report;
use crate::options::{Export, Import, LinkKind, Options, ResponseType, DEFAULT_RESPONSE_THRESHOLD};

/// Exports and imports read so far, each with where it was written.
#[derive(Default)]
pub(super) struct Links<'a> {
    exports: Vec<(Export, &'a Item)>,
    imports: Vec<(Import, &'a Item)>,
}

/// Keys nats-server takes in an export or import that flotilla does not
/// implement yet: refused, never ignored.
const NOT_YET: &[&str] = &["latency", "allow_trace"];

fn not_yet(r: &mut Report, e: &Entry, what: &str) {
    r.error_at(
        e,
        format!("\"{}\" in {what} is not supported by flotilla", e.key),
    );
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
    };
    let (mut kind, mut response_at, mut threshold_at) = (None, None, None);
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
            k if NOT_YET.contains(&k) => not_yet(r, e, "an export"),
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
    out.kind = kind;
    Some(out)
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
        let earlier = links.imports.iter().map(|(i, _)| i).find(|i| {
            i.account == import.account
                && i.kind == LinkKind::Service
                && import.kind == LinkKind::Service
                && i.local_subject() == import.local_subject()
        });
        if let Some(earlier) = earlier {
            r.error(
                item,
                format!(
                    "Duplicate service import subject {:?}, previously used in import for account {:?}, subject {:?}",
                    import.local_subject(),
                    earlier.from,
                    earlier.subject
                ),
            );
            continue;
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
    let mut share = None;
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
            k if NOT_YET.contains(&k) => not_yet(r, e, "an import"),
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
        if let Err(why) = export_subject(export) {
            r.error(
                item,
                format!("Error adding {kind} export {:?}: {why}", export.subject),
            );
        }
    }
    let exports: Vec<Export> = links.exports.into_iter().map(|(e, _)| e).collect();
    let mut imports: Vec<Import> = Vec::new();
    for (import, item) in links.imports {
        let kind = import.kind.as_str();
        if !exists(&import.from) {
            r.error(
                item,
                format!("{:?} account not defined for {kind} import", import.from),
            );
            continue;
        }
        let checked = import_subjects(&import)
            .and_then(|()| authorized(&exports, &import))
            .and_then(|()| duplicate(&imports, &import))
            .and_then(|()| cycle(&imports, &import));
        match checked {
            Ok(()) => imports.push(import),
            Err(why) => r.error(
                item,
                format!("Error adding {kind} import {:?}: {why}", import.subject),
            ),
        }
    }
    o.exports.extend(exports);
    o.imports.extend(imports);
}

/// nats-server's `addStreamExportWithAccountPos` and its service twin.
fn export_subject(export: &Export) -> Result<(), String> {
    if !subjects::is_valid_subject(export.subject.as_bytes()) {
        return Err("sublist: invalid subject".into());
    }
    if let Some(at) = export.account_token_position {
        if export.subject.split('.').nth(at - 1) != Some("*") {
            return Err("sublist: invalid subject".into());
        }
    }
    Ok(())
}

/// Both subjects valid, and each way between them a map that can be
/// built (`*` in `to` stands for the subject's wildcard at its place),
/// as `flotilla_core::account::imports::SubjectMap` builds them.
fn import_subjects(import: &Import) -> Result<(), String> {
    let local = import.local_subject();
    if !subjects::is_valid_subject(import.subject.as_bytes())
        || !subjects::is_valid_subject(local.as_bytes())
    {
        return Err("sublist: invalid subject".into());
    }
    for (src, dest) in [
        (import.subject.as_str(), local),
        (local, import.subject.as_str()),
    ] {
        if src == dest || subjects::is_literal(dest.as_bytes()) {
            continue;
        }
        let tokenized = subjects::transform::tokenize(dest);
        subjects::transform::Transform::new(src, &tokenized).map_err(|e| {
            format!(
                "failed to create mapping transform for {} import subject from {:?} to {:?}: {e}",
                import.kind.as_str(),
                import.subject,
                local
            )
        })?;
    }
    Ok(())
}

/// nats-server's `checkStreamImportAuthorized`/`checkServiceImportAuthorized`:
/// an export of the same kind covers the subject, lists the importer (or
/// nobody), and holds its name at the token position it names.
fn authorized(exports: &[Export], import: &Import) -> Result<(), String> {
    let kind = import.kind.as_str();
    let allowed = exports.iter().any(|e| {
        e.account == import.from
            && e.kind == import.kind
            && subjects::subject_matches_filter(import.subject.as_bytes(), e.subject.as_bytes())
            && (e.accounts.is_empty() || e.accounts.contains(&import.account))
            && e.account_token_position.is_none_or(|at| {
                import.subject.split('.').nth(at - 1) == Some(import.account.as_str())
            })
    });
    if allowed {
        Ok(())
    } else {
        Err(format!("{kind} import not authorized"))
    }
}

fn duplicate(imports: &[Import], import: &Import) -> Result<(), String> {
    let twin = imports.iter().any(|i| {
        i.kind == LinkKind::Stream
            && import.kind == LinkKind::Stream
            && i.account == import.account
            && i.from == import.from
            && i.subject == import.subject
    });
    if twin {
        return Err("stream import already exists".into());
    }
    Ok(())
}

/// nats-server's `serviceImportFormsCycle`/`streamImportFormsCycle`:
/// what the import brings from its exporter must not reach the exporter
/// through the importer. From the exporter, every import of the same
/// kind whose local subject meets the subject is followed to its own
/// exporter; reaching an account already on the path is a cycle.
fn cycle(imports: &[Import], import: &Import) -> Result<(), String> {
    const MAX_DEPTH: usize = 1024;
    let mut path = vec![import.account.as_str()];
    let mut todo = vec![(import.from.as_str(), import.subject.as_str(), 1usize)];
    while let Some((account, subject, depth)) = todo.pop() {
        if depth >= MAX_DEPTH {
            return Err("search cycle depth exhausted".into());
        }
        path.truncate(depth);
        path.push(account);
        for next in imports.iter().filter(|i| {
            i.account == account
                && i.kind == import.kind
                && subjects::subjects_collide(i.local_subject().as_bytes(), subject.as_bytes())
        }) {
            if path.contains(&next.from.as_str()) {
                return Err("import forms a cycle".into());
            }
            todo.push((next.from.as_str(), next.subject.as_str(), depth + 1));
        }
    }
    Ok(())
}
