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
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;

use parking_lot::RwLock;
use subjects::Sublist;

pub mod imports;
pub mod mappings;
pub mod stats;
use imports::{Imports, Responses};
use mappings::Mappings;

/// nats-server's global account: everyone's when no accounts are set.
pub use config::options::{GLOBAL_ACCOUNT as GLOBAL, SYSTEM_ACCOUNT};

/// One account, generic over what its trie holds (`S`, a subscription)
/// so that the subject space knows nothing of connections: the server's
/// accounts are `client::Account`, whose `S` is `client::Subscription`.
pub struct Account<S> {
    pub name: String,
    pub sublist: RwLock<Sublist<Arc<S>>>,
    /// Client connections in it now.
    conns: AtomicI64,
    /// `$JS.<domain>.API.`, when JetStream serves this account for a
    /// domain: publishes there are mapped onto the API ([`Account::map`]).
    domain_api: std::sync::OnceLock<Vec<u8>>,
    /// What it imports from other accounts, replaced whole by a reload.
    imports: RwLock<Arc<Imports<S>>>,
    /// It imports a service: its clients' publishes are checked against
    /// `imports` (read without a lock on every publish).
    imports_services: AtomicBool,
    /// It has the system account's imports, which only `$SYS.REQ.`
    /// publishes can use (checked without a lock on those).
    imports_system: AtomicBool,
    /// Its `limits` block's (-1: none), replaced by a reload.
    limits: RwLock<config::options::Limits>,
    /// Its subject mappings, replaced whole by a reload.
    mappings: RwLock<Arc<Mappings>>,
    /// It has mappings (read without a lock on every publish).
    maps: AtomicBool,
    /// Reply paths of service requests imported into it.
    pub responses: Responses<S>,
    /// This server's subscription for those replies (`_R_.xxxxxx.>`),
    /// made at the first imported request.
    pub reply_sub: std::sync::OnceLock<Arc<S>>,
    /// Set once the task reporting its tracked requests that timed out
    /// runs (`crate::latency::sweeper`).
    pub latency_sweeper: std::sync::OnceLock<()>,
    /// The subjects of its service exports whose latency is tracked,
    /// replaced by a reload: a request for one that another server sent
    /// is timed here too, where its responder is.
    tracked: RwLock<Arc<Vec<String>>>,
    /// Its traffic on this server (`/accstatz`).
    pub stats: stats::Stats,
}

/// What nats-server's `generateJSMappingTable` maps under
/// `$JS.<domain>.API.`: these API prefixes onto `$JS.API.`, and `$KV.`
/// and `$OBJ.` onto themselves.
const DOMAIN_API: [&[u8]; 6] = [
    b"STREAM.",
    b"CONSUMER.",
    b"DIRECT.",
    b"META.",
    b"SERVER.",
    b"ACCOUNT.",
];

impl<S> Account<S> {
    fn new(name: &str) -> Arc<Account<S>> {
        Arc::new(Account {
            name: name.to_string(),
            sublist: RwLock::new(Sublist::new()),
            conns: AtomicI64::new(0),
            domain_api: std::sync::OnceLock::new(),
            imports: RwLock::new(Arc::default()),
            imports_services: AtomicBool::new(false),
            imports_system: AtomicBool::new(false),
            limits: RwLock::new(Default::default()),
            mappings: RwLock::new(Arc::default()),
            maps: AtomicBool::new(false),
            responses: Responses::default(),
            reply_sub: std::sync::OnceLock::new(),
            latency_sweeper: std::sync::OnceLock::new(),
            tracked: RwLock::new(Arc::default()),
            stats: Default::default(),
        })
    }

    /// What it imports now.
    pub fn imports(&self) -> Arc<Imports<S>> {
        self.imports.read().clone()
    }

    /// Whether a publish here may go through a service import.
    pub fn imports_services(&self) -> bool {
        self.imports_services.load(Ordering::Relaxed)
    }

    /// Its `limits` block's.
    pub fn limits(&self) -> config::options::Limits {
        *self.limits.read()
    }

    pub fn set_limits(&self, limits: config::options::Limits) {
        *self.limits.write() = limits;
    }

    /// Its subject mappings, if it has any.
    pub fn mappings(&self) -> Option<Arc<Mappings>> {
        if !self.maps.load(Ordering::Relaxed) {
            return None;
        }
        Some(self.mappings.read().clone())
    }

    /// Replaces its mappings (at start and by each reload).
    pub fn set_mappings(&self, mappings: Mappings) {
        self.maps.store(!mappings.is_empty(), Ordering::Relaxed);
        *self.mappings.write() = Arc::new(mappings);
    }

    /// Its service exports whose latency is tracked (from the options).
    pub fn set_tracked(&self, subjects: Vec<String>) {
        *self.tracked.write() = Arc::new(subjects);
    }

    /// Whether a request on `subject` is for one of its tracked exports.
    pub fn tracks(&self, subject: &[u8]) -> bool {
        let tracked = self.tracked.read().clone();
        tracked
            .iter()
            .any(|t| subjects::subject_matches_filter(subject, t.as_bytes()))
    }

    /// Replaces what it imports (at start and by each reload).
    pub fn set_imports(&self, imports: Imports<S>) {
        let (system, own): (Vec<_>, Vec<_>) = imports.services.iter().partition(|s| s.system);
        self.imports_services
            .store(!own.is_empty(), Ordering::Relaxed);
        self.imports_system
            .store(!system.is_empty(), Ordering::Relaxed);
        *self.imports.write() = Arc::new(imports);
    }

    /// Whether a publish on a `$SYS.REQ.` subject may go through one of
    /// the system account's imports (see `crate::system_imports`).
    pub fn imports_system(&self) -> bool {
        self.imports_system.load(Ordering::Relaxed)
    }

    /// JetStream serves this account for `domain`.
    pub fn set_js_domain(&self, domain: &str) {
        let _ = self
            .domain_api
            .set(format!("$JS.{domain}.API.").into_bytes());
    }

    /// `$JS.<domain>.API.>` when JetStream serves this account for a
    /// domain: the mapping's source, which leaf nodes are told as this
    /// account's interest (nats-server sends mapping sources with its
    /// subscriptions), so the domain's API is reached across them.
    pub fn domain_api_interest(&self) -> Option<Vec<u8>> {
        self.domain_api
            .get()
            .map(|prefix| [prefix.as_slice(), b">"].concat())
    }

    /// The subject a client's publish to `subject` goes to, when the
    /// account maps it elsewhere (the JetStream domain's API).
    pub fn map(&self, subject: &[u8]) -> Option<Vec<u8>> {
        let rest = subject.strip_prefix(self.domain_api.get()?.as_slice())?;
        if rest.starts_with(b"$KV.") || rest.starts_with(b"$OBJ.") {
            return Some(rest.to_vec());
        }
        let api = rest == b"INFO"
            || DOMAIN_API
                .iter()
                .any(|p| rest.starts_with(p) && rest.len() > p.len());
        api.then(|| [&b"$JS.API."[..], rest].concat())
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

    /// Client connections in it now.
    pub fn clients(&self) -> i64 {
        self.conns.load(Ordering::Relaxed)
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

impl<S> std::fmt::Debug for Account<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Account({})", self.name)
    }
}

/// Told of each account made after it is set (`Accounts::on_new`).
pub type NewAccountHook<S> = Box<dyn Fn(&Arc<Account<S>>) + Send + Sync>;

/// Every account of this server, by name.
pub struct Accounts<S> {
    global: Arc<Account<S>>,
    by_name: RwLock<BTreeMap<String, Arc<Account<S>>>>,
    on_new: std::sync::OnceLock<NewAccountHook<S>>,
}

impl<S> Accounts<S> {
    pub fn new() -> Accounts<S> {
        let global = Account::new(GLOBAL);
        let by_name = BTreeMap::from([(GLOBAL.to_string(), global.clone())]);
        Accounts {
            global,
            by_name: RwLock::new(by_name),
            on_new: std::sync::OnceLock::new(),
        }
    }

    /// Calls `hook` with every account made from now on (once each, on
    /// the thread that made it, outside the accounts' lock). Set once;
    /// returns whether it was. Accounts made before are in `all`: a
    /// caller that sets the hook and then walks `all` may see one twice,
    /// never miss one.
    pub fn on_new(&self, hook: NewAccountHook<S>) -> bool {
        self.on_new.set(hook).is_ok()
    }

    /// `$G`.
    pub fn global(&self) -> &Arc<Account<S>> {
        &self.global
    }

    /// The account named `name`, if there is one.
    pub fn get(&self, name: &[u8]) -> Option<Arc<Account<S>>> {
        let name = std::str::from_utf8(name).ok()?;
        if name == GLOBAL {
            return Some(self.global.clone());
        }
        self.by_name.read().get(name).cloned()
    }

    /// Makes the account named `name` unless it exists.
    pub fn ensure(&self, name: &str) -> Arc<Account<S>> {
        if let Some(account) = self.by_name.read().get(name) {
            return account.clone();
        }
        let mut made = false;
        let account = self
            .by_name
            .write()
            .entry(name.to_string())
            .or_insert_with(|| {
                made = true;
                Account::new(name)
            })
            .clone();
        if made {
            if let Some(hook) = self.on_new.get() {
                hook(&account);
            }
        }
        account
    }

    /// Every account, by name.
    pub fn all(&self) -> Vec<Arc<Account<S>>> {
        self.by_name.read().values().cloned().collect()
    }
}

impl<S> Default for Accounts<S> {
    fn default() -> Self {
        Accounts::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_domain_api_maps_as_nats_server_does() {
        let account = Account::<()>::new("A");
        assert_eq!(account.map(b"$JS.hub.API.INFO"), None, "no domain yet");
        account.set_js_domain("hub");
        let mapped = |s: &str| {
            account
                .map(s.as_bytes())
                .map(|m| String::from_utf8(m).unwrap())
        };
        for (from, to) in [
            ("$JS.hub.API.INFO", Some("$JS.API.INFO")),
            ("$JS.hub.API.STREAM.INFO.S", Some("$JS.API.STREAM.INFO.S")),
            (
                "$JS.hub.API.CONSUMER.MSG.NEXT.S.C",
                Some("$JS.API.CONSUMER.MSG.NEXT.S.C"),
            ),
            ("$JS.hub.API.DIRECT.GET.S", Some("$JS.API.DIRECT.GET.S")),
            (
                "$JS.hub.API.META.LEADER.STEPDOWN",
                Some("$JS.API.META.LEADER.STEPDOWN"),
            ),
            ("$JS.hub.API.SERVER.REMOVE", Some("$JS.API.SERVER.REMOVE")),
            (
                "$JS.hub.API.ACCOUNT.PURGE.A",
                Some("$JS.API.ACCOUNT.PURGE.A"),
            ),
            ("$JS.hub.API.$KV.b.k", Some("$KV.b.k")),
            ("$JS.hub.API.$OBJ.b.c", Some("$OBJ.b.c")),
            ("$JS.hub.API.INFO.x", None),
            ("$JS.hub.API.STREAM", None),
            ("$JS.hub.API.OTHER.x", None),
            ("$JS.other.API.INFO", None),
            ("$JS.API.INFO", None),
            ("plain", None),
        ] {
            assert_eq!(mapped(from).as_deref(), to, "{from}");
        }
    }
}
