//! `/accountz`: the accounts of this server, and with `acc=<name>` one
//! account's detail (nats-server's `Accountz` and `AccountInfo`): its
//! connections and subscriptions, exports, imports, mappings and open
//! service reply paths, in nats-server's JSON.

use std::collections::BTreeMap;
use std::time::SystemTime;

use serde::Serialize;

use super::format::rfc3339;
use super::query::{Query, QueryError};
use super::subsz::SublistStats;
use config::options::{LinkKind, ResponseType};
use flotilla_core::server::Server;

#[derive(Serialize)]
pub struct Accountz {
    server_id: String,
    now: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    accounts: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    account_detail: Option<AccountInfo>,
}

#[derive(Serialize)]
struct AccountInfo {
    account_name: String,
    update_time: String,
    expired: bool,
    complete: bool,
    jetstream_enabled: bool,
    leafnode_connections: usize,
    client_connections: usize,
    subscriptions: u32,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    mappings: BTreeMap<String, Vec<MapDest>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    exports: Vec<ExtExport>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    imports: Vec<ExtImport>,
    sublist_stats: SublistStats,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    responses: BTreeMap<String, ExtImport>,
}

#[derive(Serialize)]
struct MapDest {
    subject: String,
    weight: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    cluster: Option<String>,
}

/// nats-server's `ExtExport`: a `jwt.Export` and who may import it.
#[derive(Serialize)]
struct ExtExport {
    subject: String,
    #[serde(rename = "type")]
    kind: &'static str,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    token_req: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_type: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    account_token_position: Option<usize>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    approved_accounts: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    service_latency: Option<Latency>,
}

/// nats-io/jwt's `ServiceLatency`: a sampling percentage, or `headers`.
#[derive(Serialize)]
struct Latency {
    sampling: serde_json::Value,
    results: String,
}

impl Latency {
    fn of(l: &config::options::ServiceLatency) -> Latency {
        let sampling = match l.sampling {
            0 => "headers".into(),
            n => n.into(),
        };
        Latency {
            sampling,
            results: l.results.clone(),
        }
    }
}

/// nats-server's `ExtImport`: a `jwt.Import` and its state.
#[derive(Serialize)]
struct ExtImport {
    subject: String,
    account: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    to: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    local_subject: Option<String>,
    #[serde(rename = "type")]
    kind: &'static str,
    invalid: bool,
    share: bool,
    tracking: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    latency: Option<Latency>,
}

pub fn accountz(server: &Server, q: &Query) -> Result<Accountz, QueryError> {
    let acc = q.get("acc");
    let mut out = Accountz {
        server_id: server.id.clone(),
        now: rfc3339(SystemTime::now()),
        accounts: None,
        account_detail: None,
    };
    if acc.is_empty() {
        out.accounts = Some(
            server
                .accounts
                .all()
                .iter()
                .map(|a| a.name.clone())
                .collect(),
        );
        return Ok(out);
    }
    let account = server
        .accounts
        .get(acc.as_bytes())
        .ok_or_else(|| QueryError(format!("Account {acc} does not exist")))?;
    out.account_detail = Some(detail(server, &account));
    Ok(out)
}

fn detail(server: &Server, account: &flotilla_core::client::Account) -> AccountInfo {
    let name = &account.name;
    let links = server.account_links();
    let clients = server.clients.lock();
    let client_connections = clients
        .values()
        .filter(|c| !c.is_server() && c.account().is_some_and(|a| a.name == *name))
        .count();
    drop(clients);
    let leafnode_connections = server
        .leafs
        .all()
        .iter()
        .filter(|l| l.account.name == *name)
        .count();
    let stats = account.sublist.read().stats();
    let mappings = account
        .mappings()
        .map(|m| m.shown())
        .unwrap_or_default()
        .into_iter()
        .map(|(src, dests)| {
            let dests = dests
                .into_iter()
                .map(|d| MapDest {
                    subject: d.subject,
                    weight: d.weight,
                    cluster: d.cluster,
                })
                .collect();
            (src, dests)
        })
        .collect();
    let exports = links
        .exports
        .iter()
        .filter(|e| e.account == *name)
        .map(|e| ExtExport {
            subject: e.subject.clone(),
            kind: e.kind.as_str(),
            token_req: e.token_req,
            response_type: (e.kind == LinkKind::Service).then_some(match e.response {
                ResponseType::Singleton => "Singleton",
                ResponseType::Stream => "Stream",
                ResponseType::Chunked => "Chunked",
            }),
            account_token_position: e.account_token_position,
            approved_accounts: e.accounts.clone(),
            service_latency: e.latency.as_ref().map(Latency::of),
        })
        .collect();
    let mut imports: Vec<ExtImport> = links
        .imports
        .iter()
        .filter(|i| i.account == *name)
        .map(|i| match i.kind {
            // nats-server shows a stream import's local subject, and a
            // service import's both as `to` and as `local_subject`.
            LinkKind::Stream => ExtImport {
                subject: i.subject.clone(),
                account: i.from.clone(),
                to: None,
                local_subject: Some(i.local_subject().to_string()),
                kind: "stream",
                invalid: false,
                share: false,
                tracking: false,
                latency: None,
            },
            LinkKind::Service => ExtImport {
                subject: i.subject.clone(),
                account: i.from.clone(),
                to: Some(i.local_subject().to_string()),
                local_subject: Some(i.local_subject().to_string()),
                kind: "service",
                invalid: false,
                share: i.share,
                tracking: false,
                // The export's, as the import carries it.
                latency: links
                    .exports
                    .iter()
                    .find(|e| {
                        e.account == i.from
                            && e.kind == LinkKind::Service
                            && subjects::subject_matches_filter(
                                i.subject.as_bytes(),
                                e.subject.as_bytes(),
                            )
                    })
                    .and_then(|e| e.latency.as_ref())
                    .map(Latency::of),
            },
        })
        .collect();
    // The system account's imports, which nats-server lists too.
    let theirs = account.imports();
    for s in theirs.services.iter().filter(|s| s.system) {
        imports.push(ExtImport {
            subject: s.request.apply(&s.local),
            account: s.to.name.clone(),
            to: Some(s.local.clone()),
            local_subject: Some(s.local.clone()),
            kind: "service",
            invalid: false,
            share: s.share,
            tracking: false,
            latency: None,
        });
    }
    let responses = account
        .responses
        .list()
        .into_iter()
        .map(|(path, requester, reply, tracking)| {
            let path = String::from_utf8_lossy(&path).into_owned();
            let import = ExtImport {
                subject: String::from_utf8_lossy(&reply).into_owned(),
                account: requester,
                to: Some(path.clone()),
                local_subject: Some(path.clone()),
                kind: "service",
                invalid: false,
                share: false,
                tracking,
                latency: None,
            };
            (path, import)
        })
        .collect();
    AccountInfo {
        account_name: name.clone(),
        update_time: rfc3339(*server.config_load_time.lock()),
        expired: false,
        complete: true,
        jetstream_enabled: server.js_enabled_for(name),
        leafnode_connections,
        client_connections,
        subscriptions: stats.num_subscriptions,
        mappings,
        exports,
        imports,
        sublist_stats: stats.into(),
        responses,
    }
}
