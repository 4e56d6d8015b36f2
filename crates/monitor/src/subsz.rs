//! `/subsz`: the tries' counters (one account's with `acc`), and
//! optionally their subscriptions.

use std::sync::Arc;
use std::time::SystemTime;

use serde::Serialize;

use super::connz::SubDetail;
use super::format::rfc3339;
use super::query::{Query, QueryError};
use flotilla_core::client::Subscription;
use flotilla_core::server::Server;

const DEFAULT_LIMIT: usize = 1024;

#[derive(Serialize)]
pub struct Subsz {
    server_id: String,
    now: String,
    #[serde(flatten)]
    stats: SublistStats,
    total: usize,
    offset: usize,
    limit: usize,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    subscriptions_list: Vec<SubDetail>,
}

/// nats-server's `SublistStats`, as `/subsz` and `/accountz` show it.
#[derive(Serialize)]
pub(crate) struct SublistStats {
    num_subscriptions: u32,
    num_cache: u32,
    num_inserts: u64,
    num_removes: u64,
    num_matches: u64,
    cache_hit_rate: f64,
    max_fanout: u32,
    avg_fanout: f64,
}

impl From<subjects::SublistStats> for SublistStats {
    fn from(s: subjects::SublistStats) -> Self {
        SublistStats {
            num_subscriptions: s.num_subscriptions,
            num_cache: s.num_cache,
            num_inserts: s.num_inserts,
            num_removes: s.num_removes,
            num_matches: s.num_matches,
            cache_hit_rate: s.cache_hit_rate,
            max_fanout: s.max_fanout,
            avg_fanout: s.avg_fanout,
        }
    }
}

pub fn subsz(server: &Server, q: &Query) -> Result<Subsz, QueryError> {
    let subs = q.bool("subs")?;
    let offset = q.int("offset")?.max(0) as usize;
    let limit = match q.int("limit")? {
        l if l <= 0 => DEFAULT_LIMIT,
        l => l as usize,
    };
    let test = q.get("test");
    if !test.is_empty() && !subjects::is_valid_literal_subject(test.as_bytes()) {
        return Err(QueryError(format!(
            "invalid test subject, must be valid publish subject: {test}"
        )));
    }
    let mut stats = subjects::SublistStats::default();
    let mut list: Vec<Arc<Subscription>> = Vec::new();
    // nats-server's `acc`: that account's trie alone.
    let acc = q.get("acc");
    for account in server.accounts.all() {
        if !acc.is_empty() && account.name != acc {
            continue;
        }
        let sl = account.sublist.read();
        if subs {
            sl.for_each(|s| list.push(s.clone()));
        }
        stats.add(&sl.stats());
    }
    if !test.is_empty() {
        list.retain(|s| subjects::subject_matches_filter(test.as_bytes(), &s.subject));
    }
    list.sort_by_key(|s| s.key);
    let total = list.len();
    let start = offset.min(total);
    let end = start + limit.min(total - start);
    Ok(Subsz {
        server_id: server.id.clone(),
        now: rfc3339(SystemTime::now()),
        stats: stats.into(),
        total,
        offset,
        limit,
        subscriptions_list: list[start..end].iter().map(|s| SubDetail::of(s)).collect(),
    })
}
