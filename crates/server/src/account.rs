//! Accounts: separate subject spaces. Every connection belongs to one
//! (a client to its user's, `$G` when no account names it); a message
//! reaches only subscriptions of its publisher's account, here and, with
//! the account's name on `RS+`/`RMSG`, on other servers. Each account has
//! its own trie, so matching never crosses accounts.
//!
//! `$G` always exists. The accounts a config names are made at start and
//! by each reload; none is ever removed while the server runs (a removed
//! one's users can no longer log in, and its connections are closed by
//! the reload's authorization check).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use parking_lot::RwLock;
use subjects::Sublist;

use crate::client::Subscription;

/// nats-server's global account: everyone's when no accounts are set.
pub const GLOBAL: &str = "$G";

pub struct Account {
    pub name: String,
    pub sublist: RwLock<Sublist<Arc<Subscription>>>,
    /// Client connections in it now.
    conns: AtomicI64,
}

impl Account {
    fn new(name: &str) -> Arc<Account> {
        Arc::new(Account {
            name: name.to_string(),
            sublist: RwLock::new(Sublist::new()),
            conns: AtomicI64::new(0),
        })
    }

    /// Counts one more client connection in, unless `limit` (-1: none)
    /// is reached; checked and counted in one step, so two CONNECTs at
    /// once cannot both take the last place.
    pub fn enter(&self, limit: i64) -> bool {
        self.conns
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (limit < 0 || n < limit).then_some(n + 1)
            })
            .is_ok()
    }

    /// A client connection left it.
    pub fn leave(&self) {
        let before = self.conns.fetch_sub(1, Ordering::Relaxed);
        debug_assert!(before > 0, "more clients left {} than joined", self.name);
    }

    pub fn is_global(&self) -> bool {
        self.name == GLOBAL
    }
}

impl std::fmt::Debug for Account {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Account({})", self.name)
    }
}

/// Every account of this server, by name.
pub struct Accounts {
    global: Arc<Account>,
    by_name: RwLock<BTreeMap<String, Arc<Account>>>,
}

impl Accounts {
    pub fn new() -> Accounts {
        let global = Account::new(GLOBAL);
        let by_name = BTreeMap::from([(GLOBAL.to_string(), global.clone())]);
        Accounts {
            global,
            by_name: RwLock::new(by_name),
        }
    }

    /// `$G`.
    pub fn global(&self) -> &Arc<Account> {
        &self.global
    }

    /// The account named `name`, if there is one.
    pub fn get(&self, name: &[u8]) -> Option<Arc<Account>> {
        let name = std::str::from_utf8(name).ok()?;
        if name == GLOBAL {
            return Some(self.global.clone());
        }
        self.by_name.read().get(name).cloned()
    }

    /// Makes the account named `name` unless it exists.
    pub fn ensure(&self, name: &str) -> Arc<Account> {
        if let Some(account) = self.by_name.read().get(name) {
            return account.clone();
        }
        self.by_name
            .write()
            .entry(name.to_string())
            .or_insert_with(|| Account::new(name))
            .clone()
    }

    /// Every account, by name.
    pub fn all(&self) -> Vec<Arc<Account>> {
        self.by_name.read().values().cloned().collect()
    }
}

impl Default for Accounts {
    fn default() -> Self {
        Accounts::new()
    }
}
