//! `/accstatz`: each account's connections, subscriptions and traffic on
//! this server (nats-server's `AccountStatz`), for the accounts with a
//! client connection here, or every account with `unused=1`. What the
//! counters count is `flotilla_core::account::stats`'s.

use std::time::SystemTime;

use serde::Serialize;

use super::format::rfc3339;
use super::query::{Query, QueryError};
use flotilla_core::account::stats::{Count, TrafficCount};
use flotilla_core::client::Account;
use flotilla_core::server::Server;

#[derive(Serialize)]
pub struct Accstatz {
    server_id: String,
    now: String,
    account_statz: Vec<AccountStat>,
}

/// nats-server's `AccountStat`: one account's figures on this server.
#[derive(Serialize)]
pub struct AccountStat {
    acc: String,
    name: String,
    conns: i64,
    leafnodes: i64,
    total_conns: i64,
    num_subscriptions: u32,
    sent: DataStats,
    received: DataStats,
    slow_consumers: u64,
}

#[derive(Serialize)]
struct MsgBytes {
    msgs: u64,
    bytes: u64,
}

impl From<Count> for MsgBytes {
    fn from(c: Count) -> Self {
        MsgBytes {
            msgs: c.msgs,
            bytes: c.bytes,
        }
    }
}

/// nats-server's `DataStats`: flotilla has no gateways, so theirs is 0.
#[derive(Serialize)]
struct DataStats {
    msgs: u64,
    bytes: u64,
    gateways: MsgBytes,
    routes: MsgBytes,
    leafs: MsgBytes,
}

impl From<TrafficCount> for DataStats {
    fn from(t: TrafficCount) -> Self {
        DataStats {
            msgs: t.total.msgs,
            bytes: t.total.bytes,
            gateways: Count::default().into(),
            routes: t.routes.into(),
            leafs: t.leafs.into(),
        }
    }
}

pub fn accstatz(server: &Server, q: &Query) -> Result<Accstatz, QueryError> {
    let unused = q.bool("unused")?;
    let leafs = server.leafs.all();
    let account_statz = server
        .accounts
        .all()
        .iter()
        .filter(|a| unused || a.clients() != 0)
        .map(|a| {
            let leafnodes = leafs
                .iter()
                .filter(|l| std::sync::Arc::ptr_eq(&l.account, a))
                .count() as i64;
            stat(a, leafnodes)
        })
        .collect();
    Ok(Accstatz {
        server_id: server.id.clone(),
        now: rfc3339(SystemTime::now()),
        account_statz,
    })
}

/// `account`'s figures on `server` now (what the system account's
/// `SERVER.CONNS` events carry too).
pub fn account_stat(server: &Server, account: &std::sync::Arc<Account>) -> AccountStat {
    let leafnodes = server
        .leafs
        .all()
        .iter()
        .filter(|l| std::sync::Arc::ptr_eq(&l.account, account))
        .count() as i64;
    stat(account, leafnodes)
}

fn stat(a: &Account, leafnodes: i64) -> AccountStat {
    let conns = a.clients();
    AccountStat {
        acc: a.name.clone(),
        name: a.name.clone(),
        conns,
        leafnodes,
        total_conns: conns + leafnodes,
        num_subscriptions: a.sublist.read().count(),
        sent: a.stats.sent.read().into(),
        received: a.stats.received.read().into(),
        slow_consumers: a.stats.slow_consumers(),
    }
}
