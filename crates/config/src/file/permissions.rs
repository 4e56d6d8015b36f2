//! A user's `permissions` block and `default_permissions`, read as
//! nats-server's `parseUserPermissions` reads them, with its messages:
//!
//! ```text
//! permissions {
//!   publish   = "a.>" | ["a", "b"] | { allow: [...], deny: [...] }
//!   subscribe = ... (entries may name a queue group: "subject queue")
//!   allow_responses = true | { max: 1, expires: "2m" }
//! }
//! ```
//!
//! `pub`/`import` and `sub`/`export` are the same keys. A bare subject or
//! list is an allow list.

use conf::{Entry, Item, Value};

use super::{parse_go_duration, Report};
use crate::options::{Permissions, ResponsePermission, SubjectPermission};

/// Reads `permissions` (or `default_permissions`).
pub(super) fn permissions(r: &mut Report, e: &Entry) -> Option<Permissions> {
    let Value::Map(m) = &e.item.value else {
        r.error(
            &e.item,
            format!(
                "Expected permissions to be a map/struct, got {}",
                e.item.value.type_name()
            ),
        );
        return None;
    };
    let mut p = Permissions::default();
    for pe in &m.entries {
        match pe.key.to_ascii_lowercase().as_str() {
            "pub" | "publish" | "import" => p.publish = subject_permission(r, &pe.item, false),
            "sub" | "subscribe" | "export" => p.subscribe = subject_permission(r, &pe.item, true),
            "publish_allow_responses" | "allow_responses" => {
                p.response = match &pe.item.value {
                    Value::Bool(true) => Some(ResponsePermission::default()),
                    Value::Bool(false) => None,
                    _ => response_permission(r, pe),
                };
            }
            _ if pe.referenced => {}
            _ => r.error_at(
                pe,
                format!("Unknown field {:?} parsing permissions", pe.key),
            ),
        }
    }
    if p.response.is_some() {
        // Answering requests is all a publish-less responder may do: its
        // blanket allow is turned off, as nats-server does.
        let publish = p.publish.get_or_insert_with(SubjectPermission::default);
        publish.allow.get_or_insert_with(Vec::new);
    }
    Some(p)
}

/// A subject, a list of subjects (both allow lists), or an
/// `{ allow, deny }` map.
fn subject_permission(r: &mut Report, item: &Item, queues: bool) -> Option<SubjectPermission> {
    let Value::Map(m) = &item.value else {
        let allow = subjects(r, item, queues)?;
        return Some(SubjectPermission {
            allow: (!allow.is_empty()).then_some(allow),
            deny: Vec::new(),
        });
    };
    if m.entries.is_empty() {
        return None;
    }
    let mut p = SubjectPermission::default();
    for e in &m.entries {
        match e.key.to_ascii_lowercase().as_str() {
            "allow" => {
                if let Some(allow) = subjects(r, &e.item, queues) {
                    p.allow = (!allow.is_empty()).then_some(allow);
                }
            }
            "deny" => {
                if let Some(deny) = subjects(r, &e.item, queues) {
                    p.deny = deny;
                }
            }
            _ if e.referenced => {}
            _ => r.error_at(
                e,
                format!(
                    "Unknown field name {:?} parsing subject permissions, only 'allow' or 'deny' are permitted",
                    e.key
                ),
            ),
        }
    }
    Some(p)
}

/// One subject or an array of them, each checked as nats-server's
/// `checkPermSubjectArray` does.
pub(super) fn subjects(r: &mut Report, item: &Item, queues: bool) -> Option<Vec<String>> {
    let list: Vec<&Item> = match &item.value {
        Value::String(_) => vec![item],
        Value::Array(items) => items.iter().collect(),
        other => {
            r.error(
                item,
                format!(
                    "Expected subject permissions to be a subject, or array of subjects, got {}",
                    other.type_name()
                ),
            );
            return None;
        }
    };
    let mut out = Vec::with_capacity(list.len());
    for entry in list {
        let Value::String(subject) = &entry.value else {
            r.error(
                entry,
                "Subject in permissions array cannot be cast to string",
            );
            return None;
        };
        if let Err(msg) = check_subject(subject, queues) {
            r.error(entry, msg);
            return None;
        }
        out.push(subject.clone());
    }
    Some(out)
}

fn check_subject(subject: &str, queues: bool) -> Result<(), String> {
    if subjects::is_valid_subject(subject.as_bytes()) {
        return Ok(());
    }
    let invalid = || format!("subject {subject:?} is not a valid subject");
    if !queues {
        return Err(invalid());
    }
    let parts: Vec<&str> = subject.split_whitespace().collect();
    match parts[..] {
        [s, _] if !subjects::is_valid_subject(s.as_bytes()) => {
            Err(format!("subject {s:?} is not a valid subject"))
        }
        [_, q] if !subjects::is_valid_subject(q.as_bytes()) => {
            Err(format!("queue {q:?} is not a valid queue"))
        }
        [_, _] => Ok(()),
        _ => Err(invalid()),
    }
}

/// `allow_responses { max, expires }`.
fn response_permission(r: &mut Report, e: &Entry) -> Option<ResponsePermission> {
    let Value::Map(m) = &e.item.value else {
        r.error(
            &e.item,
            "error parsing response permissions, expected a boolean or a map",
        );
        return None;
    };
    let mut rp = ResponsePermission::default();
    for re in &m.entries {
        match re.key.to_ascii_lowercase().as_str() {
            "max" | "max_msgs" | "max_messages" | "max_responses" => match re.item.value {
                // Zero keeps the default; below zero is no limit.
                Value::Integer(0) => {}
                Value::Integer(n) => rp.max_msgs = n,
                ref other => {
                    r.error(
                        &re.item,
                        format!(
                            "expected an integer for {:?}, got {}",
                            re.key,
                            other.type_name()
                        ),
                    );
                    return None;
                }
            },
            "expires" | "expiration" | "ttl" => {
                let Value::String(text) = &re.item.value else {
                    r.error(&re.item, "error parsing expires, not a duration string");
                    return None;
                };
                match expiry(text) {
                    Ok(Some(d)) if d.is_zero() => {}
                    Ok(d) => rp.expires = d,
                    Err(msg) => {
                        r.error(&re.item, format!("error parsing expires: {msg}"));
                        return None;
                    }
                }
            }
            _ if re.referenced => {}
            _ => r.error_at(
                re,
                format!("Unknown field {:?} parsing permissions", re.key),
            ),
        }
    }
    Some(rp)
}

/// A Go duration; a negative one means no expiry (`None`).
fn expiry(text: &str) -> Result<Option<std::time::Duration>, String> {
    match text.trim().strip_prefix('-') {
        Some(rest) => parse_go_duration(rest).map(|_| None),
        None => parse_go_duration(text).map(Some),
    }
}
