//! What resolved account JWTs export, import and map, as the config's
//! plain data (nats-server's `updateAccountClaimsWithRefresh`): each
//! account's `exports`, `imports` (with their activation tokens checked)
//! and `mappings`, named by account public key. An import that does not
//! hold is logged and left out, as nats-server leaves it incomplete.

use std::collections::BTreeMap;

use config::options::{
    Export, Import, LinkKind, MapDest, Mapping, ResponseType, ServiceLatency,
    DEFAULT_RESPONSE_THRESHOLD,
};
use jwt::Claims;
use serde_json::Value;
use tracing::error;

/// Every resolved account's exports, imports and mappings.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Links {
    pub exports: Vec<Export>,
    pub imports: Vec<Import>,
    pub mappings: Vec<Mapping>,
}

/// The links of `accounts` (public key → claims) at `now`, imports
/// checked against the exports. Without a system account (`system`),
/// no service latency is tracked, as nats-server tracks none without
/// events.
pub fn links(accounts: &BTreeMap<String, Claims>, now: i64, system: bool) -> Links {
    let mut out = Links::default();
    for (key, claims) in accounts {
        out.exports.extend(exports(key, claims, system));
        out.mappings.extend(mappings(key, claims));
    }
    let mut admitted = config::links::Admitted::new(&out.exports);
    for (key, claims) in accounts {
        for import in imports(key, claims, accounts, now) {
            let (kind, subject) = (import.kind.as_str(), import.subject.clone());
            if let Err(why) = admitted.admit(import) {
                error!("Error adding {kind} import {subject:?} to account [{key}]: {why}");
            }
        }
    }
    out.imports = admitted.into_imports();
    out
}

fn kind(v: &Value) -> Option<LinkKind> {
    match v["type"].as_str()? {
        "stream" => Some(LinkKind::Stream),
        "service" => Some(LinkKind::Service),
        _ => None,
    }
}

fn exports(key: &str, claims: &Claims, system: bool) -> Vec<Export> {
    let (mut out, mut sampled) = (Vec::new(), Vec::new());
    for e in claims.nats["exports"].as_array().into_iter().flatten() {
        let (Some(kind), Some(subject)) = (kind(e), e["subject"].as_str()) else {
            error!("Account [{key}] has an export without a type or subject: {e}");
            continue;
        };
        let response = match e["response_type"].as_str() {
            Some("Stream") => ResponseType::Stream,
            Some("Chunked") => ResponseType::Chunked,
            _ => ResponseType::Singleton,
        };
        let threshold = e["response_threshold"]
            .as_u64()
            .filter(|ns| *ns > 0)
            .map_or(DEFAULT_RESPONSE_THRESHOLD, std::time::Duration::from_nanos);
        let export = Export {
            account: key.to_string(),
            kind,
            subject: subject.to_string(),
            accounts: Vec::new(),
            response,
            response_threshold: threshold,
            account_token_position: e["account_token_position"]
                .as_u64()
                .filter(|p| *p > 0)
                .map(|p| p as usize),
            token_req: e["token_req"].as_bool() == Some(true),
            // nats-server takes it on services only.
            allow_trace: kind == LinkKind::Service && e["allow_trace"].as_bool() == Some(true),
            latency: None,
        };
        match config::links::check_export(&export) {
            Ok(()) => {
                out.push(export);
                sampled.push(latency(&e["service_latency"]).filter(|_| kind == LinkKind::Service));
            }
            Err(why) => error!(
                "Error adding {} export {subject:?} to account [{key}]: {why}",
                kind.as_str()
            ),
        }
    }
    // Latency once the account's exports are known, as nats-server
    // tracks it: an export whose tracking fails is kept without it.
    debug_assert_eq!(out.len(), sampled.len(), "one latency per export");
    for (i, latency) in sampled.into_iter().enumerate() {
        let Some(latency) = latency else {
            continue;
        };
        if !system {
            error!(
                "Error adding latency tracking for service export {:?} to account [{key}]: \
                 system account not setup",
                out[i].subject
            );
            continue;
        }
        let mut tracked = out[i].clone();
        tracked.latency = Some(latency);
        match config::links::check_latency(&tracked, out.iter()) {
            Ok(()) => out[i] = tracked,
            Err(why) => error!(
                "Error adding latency tracking for service export {:?} to account [{key}]: {why}",
                tracked.subject
            ),
        }
    }
    out
}

/// An export's `service_latency` (nats-io/jwt's `ServiceLatency`):
/// `sampling` a percentage or `"headers"`, `results` a subject.
fn latency(v: &Value) -> Option<ServiceLatency> {
    let results = v["results"].as_str()?.to_string();
    let sampling = match &v["sampling"] {
        Value::String(s) if s.eq_ignore_ascii_case("headers") => 0,
        n => n
            .as_u64()
            .and_then(|n| u8::try_from(n).ok())
            .unwrap_or(u8::MAX),
    };
    Some(ServiceLatency { sampling, results })
}

fn imports(
    key: &str,
    claims: &Claims,
    accounts: &BTreeMap<String, Claims>,
    now: i64,
) -> Vec<Import> {
    let mut out = Vec::new();
    for i in claims.nats["imports"].as_array().into_iter().flatten() {
        let (Some(kind), Some(subject), Some(from)) =
            (kind(i), i["subject"].as_str(), i["account"].as_str())
        else {
            error!("Account [{key}] has an import without a type, subject or account: {i}");
            continue;
        };
        let Some(exporter) = accounts.get(from) else {
            error!(
                "Can't locate account [{from}] for import of [{subject}] {}",
                kind.as_str()
            );
            continue;
        };
        let local = i["local_subject"].as_str().filter(|s| !s.is_empty());
        // The deprecated `to`: a stream's prefix, a service's subject
        // in the exporter.
        let to = i["to"].as_str().filter(|s| !s.is_empty());
        let (subject, to) = match (kind, local, to) {
            (_, Some(local), _) => (subject.to_string(), Some(local.to_string())),
            (LinkKind::Stream, None, Some(prefix)) => (
                subject.to_string(),
                Some(format!("{}.{subject}", prefix.trim_end_matches('.'))),
            ),
            (LinkKind::Service, None, Some(theirs)) => {
                (theirs.to_string(), Some(subject.to_string()))
            }
            (_, None, None) => (subject.to_string(), None),
        };
        let token = i["token"].as_str().filter(|t| !t.is_empty());
        let activated = token.is_some_and(|t| activation(t, key, from, exporter, &subject, now));
        out.push(Import {
            account: key.to_string(),
            kind,
            from: from.to_string(),
            subject,
            to,
            share: i["share"].as_bool() == Some(true),
            activated,
            // nats-server takes it on streams only.
            allow_trace: kind == LinkKind::Stream && i["allow_trace"].as_bool() == Some(true),
        });
    }
    out
}

/// nats-server's `checkActivation`: an activation JWT for `importer`,
/// issued by the exporter (or one of its signing keys on its behalf),
/// covering `subject`, in force at `now`, and not revoked by the export.
fn activation(
    token: &str,
    importer: &str,
    from: &str,
    exporter: &Claims,
    subject: &str,
    now: i64,
) -> bool {
    let Ok(act) = jwt::decode(token) else {
        return false;
    };
    let issuer_account = act.nats_str("issuer_account").unwrap_or(&act.iss);
    let signed =
        act.iss == from || (issuer_account == from && exporter.signing_keys().contains(&act.iss));
    let covers = act
        .nats_str("subject")
        .is_some_and(|s| subjects::subject_matches_filter(subject.as_bytes(), s.as_bytes()));
    let revoked = exporter.nats["exports"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e["revocations"].get(importer).and_then(Value::as_i64))
        .any(|at| act.iat <= at);
    act.kind == "activation"
        && act.sub == importer
        && signed
        && covers
        && act.expired(now).is_none()
        && !revoked
}

fn mappings(key: &str, claims: &Claims) -> Vec<Mapping> {
    let mut out = Vec::new();
    let Some(map) = claims.nats["mappings"].as_object() else {
        return out;
    };
    for (src, dests) in map {
        let dests: Vec<MapDest> = dests
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|d| {
                Some(MapDest {
                    subject: d["subject"].as_str()?.to_string(),
                    // jwt's `GetWeight`: none (0) is all.
                    weight: d["weight"]
                        .as_u64()
                        .filter(|w| *w > 0)
                        .map_or(100, |w| w.min(100) as u8),
                    cluster: d["cluster"]
                        .as_str()
                        .filter(|c| !c.is_empty())
                        .map(str::to_string),
                })
            })
            .collect();
        match config::links::check_mapping(src, &dests) {
            Ok(()) => out.push(Mapping {
                account: key.to_string(),
                src: src.clone(),
                dests,
            }),
            Err(why) => error!("Error adding mapping for {src:?} to account [{key}]: {why}"),
        }
    }
    out
}
