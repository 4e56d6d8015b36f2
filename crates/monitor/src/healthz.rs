//! `/healthz` as nats-server's `healthz` decides it (monitor.go): the
//! query's checks in its order (bad combinations, the server ready,
//! `js-server-only`, JetStream running, `js-enabled-only`, then
//! JetStream's own: the meta group, `js-meta-only`, and each stream and
//! consumer this server holds, or the one `account`, `stream` and
//! `consumer` name), answered as one `error` or, with `details`, every
//! `errors` entry. JetStream's checks are the driver's, through
//! `JetStreamView::healthz`.

use serde::Serialize;

use crate::query::{Query, QueryError};

/// What the query asks of JetStream.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HealthOptions {
    /// Only the meta group (`js-meta-only`).
    pub meta_only: bool,
    pub account: String,
    pub stream: String,
    pub consumer: String,
}

/// nats-server's `HealthZErrorType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Kind {
    Connection,
    BadRequest,
    #[serde(rename = "JETSTREAM")]
    JetStream,
    Account,
    Stream,
    Consumer,
}

/// One reason the server is not healthy (nats-server's `HealthzError`),
/// with the HTTP status it answers with alone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Issue {
    #[serde(rename = "type")]
    pub kind: Kind,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub account: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub stream: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub consumer: String,
    pub error: String,
    #[serde(skip)]
    pub status: u16,
}

impl Issue {
    /// A JetStream issue (503) about what `account`, `stream` and
    /// `consumer` name (empty: none).
    pub fn new(kind: Kind, names: [&str; 3], error: String) -> Issue {
        let [account, stream, consumer] = names.map(str::to_string);
        Issue {
            kind,
            account,
            stream,
            consumer,
            error,
            status: 503,
        }
    }

    /// What the query named is not there (404).
    pub fn not_found(kind: Kind, names: [&str; 3], error: String) -> Issue {
        Issue {
            status: 404,
            ..Issue::new(kind, names, error)
        }
    }
}

/// nats-server's `HealthStatus`, as HTTP shows it (no `status_code`).
#[derive(Serialize)]
struct Status<'a> {
    status: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    error: &'a str,
    #[serde(skip_serializing_if = "<[Issue]>::is_empty")]
    errors: &'a [Issue],
}

/// The query, read: the JetStream options, which checks to skip
/// (`js-server-only`, and `js-enabled-only` or its older `js-enabled`),
/// and `details`.
pub struct Asked {
    pub js: HealthOptions,
    pub server_only: bool,
    pub enabled_only: bool,
    pub details: bool,
}

impl Asked {
    pub fn parse(q: &Query) -> Result<Asked, QueryError> {
        Ok(Asked {
            enabled_only: q.bool("js-enabled-only")? | q.bool("js-enabled")?,
            server_only: q.bool("js-server-only")?,
            details: q.bool("details")?,
            js: HealthOptions {
                meta_only: q.bool("js-meta-only")?,
                account: q.get("account").to_string(),
                stream: q.get("stream").to_string(),
                consumer: q.get("consumer").to_string(),
            },
        })
    }

    /// A named stream needs its account, a named consumer its stream.
    pub fn bad_request(&self) -> Option<Issue> {
        let (what, of) = if self.js.account.is_empty() && !self.js.stream.is_empty() {
            ("account", "stream")
        } else if self.js.stream.is_empty() && !self.js.consumer.is_empty() {
            ("stream", "consumer")
        } else {
            return None;
        };
        let error = format!("\"{what}\" must not be empty when checking {of} health");
        Some(Issue {
            status: 400,
            ..Issue::new(Kind::BadRequest, ["", "", ""], error)
        })
    }
}

/// The answer: its HTTP status and body. Without `details`, the first
/// issue alone (`unavailable`; `error` when the server is not ready);
/// with it, every issue and `status` `error`.
pub fn answer(issues: &[Issue], details: bool) -> (u16, Vec<u8>) {
    let Some(first) = issues.first() else {
        let ok = Status {
            status: "ok",
            error: "",
            errors: &[],
        };
        return (200, serde_json::to_vec(&ok).expect("json"));
    };
    let status = match details {
        true => Status {
            status: "error",
            error: "",
            errors: issues,
        },
        false => Status {
            status: match first.kind {
                Kind::Connection | Kind::BadRequest => "error",
                _ => "unavailable",
            },
            error: &first.error,
            errors: &[],
        },
    };
    (first.status, serde_json::to_vec(&status).expect("json"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_as_nats_server_words_them() {
        let (code, body) = answer(&[], false);
        assert_eq!((code, &body[..]), (200, &br#"{"status":"ok"}"#[..]));
        let stream = Issue::not_found(
            Kind::Stream,
            ["A", "S", ""],
            "JetStream stream \"S\" not found on account \"A\"".into(),
        );
        let (code, body) = answer(std::slice::from_ref(&stream), false);
        assert_eq!(code, 404);
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"status": "unavailable", "error": stream.error})
        );
        let (code, body) = answer(std::slice::from_ref(&stream), true);
        assert_eq!(code, 404);
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        let want = serde_json::json!({"status": "error", "errors": [
            {"type": "STREAM", "account": "A", "stream": "S", "error": stream.error}]});
        assert_eq!(v, want);
        let q = Query::parse(Some("stream=S"));
        let bad = Asked::parse(&q).unwrap().bad_request().unwrap();
        assert_eq!(bad.status, 400);
        assert_eq!(
            bad.error,
            "\"account\" must not be empty when checking stream health"
        );
        let v = serde_json::to_value(&bad).unwrap();
        assert_eq!(v["type"], "BAD_REQUEST");
    }
}
