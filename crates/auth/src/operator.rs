//! Operator mode (decentralized JWT authentication), as nats-server does
//! it with the memory resolver: the trusted operators, the account JWTs
//! preloaded into the resolver, and the check of a user JWT at CONNECT.
//!
//! A client proves it holds the user key by signing its INFO nonce; the
//! user JWT names its account (its issuer, or `issuer_account` for a
//! signing key), whose JWT a trusted operator key must have signed. The
//! account's public key is the account's name on this server.
//!
//! Not implemented, and refused rather than ignored: users issued by a
//! scoped signing key, `src` and `times` restrictions, and any resolver
//! but `MEMORY`.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde_json::Value;

use config::options::{Permissions, ResponsePermission, SubjectPermission};
use jwt::Claims;

/// The trust anchors and resolved accounts, built from the options.
#[derive(Debug)]
pub struct Trust {
    /// Operator public keys and their signing keys.
    keys: BTreeSet<String>,
    /// Valid account JWTs by account public key.
    accounts: BTreeMap<String, Claims>,
    /// What those accounts export, import and map.
    links: crate::links::Links,
}

/// What an account JWT says of JetStream, as nats-server reads its
/// `limits` (`Account::updateAccountClaimsWithRefresh`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JwtJetStream {
    /// No storage set: neither `mem_storage` nor `disk_storage`, or with
    /// `tiered_limits`, in none of the tiers.
    Disabled,
    /// One set of limits for every stream, or a set per tier.
    Enabled(jsapi::AccountTiers),
}

/// An account JWT's JetStream, as nats-server's jwt `IsJSEnabled` and
/// its account update read it:
/// - with `tiered_limits`, enabled when a tier sets `mem_storage` or
///   `disk_storage` (-1: unlimited); then the flat limits if they set
///   either, else every tier;
/// - without, enabled with the flat limits when they set either.
///
/// A stream-size or ack-pending limit of 0 or less is none, as
/// nats-server maps them.
pub fn jetstream_of(claims: &Claims) -> JwtJetStream {
    let limits = &claims.nats["limits"];
    let tiers = limits["tiered_limits"]
        .as_object()
        .filter(|t| !t.is_empty());
    let stores =
        |l: &Value| storage_of(l, "mem_storage") != 0 || storage_of(l, "disk_storage") != 0;
    let enabled = match tiers {
        Some(tiers) => tiers.values().any(stores),
        None => stores(limits),
    };
    if !enabled {
        return JwtJetStream::Disabled;
    }
    match tiers {
        Some(tiers) if !stores(limits) => JwtJetStream::Enabled(jsapi::AccountTiers::Tiered(
            tiers
                .iter()
                .map(|(tier, l)| (tier.clone(), js_limits_of(l)))
                .collect(),
        )),
        _ => JwtJetStream::Enabled(jsapi::AccountTiers::Flat(js_limits_of(limits))),
    }
}

/// A JWT limit; absent is 0 (disabled) in either JWT version: a
/// JetStream limit is never implied.
fn storage_of(limits: &Value, field: &str) -> i64 {
    limits.get(field).and_then(Value::as_i64).unwrap_or(0)
}

/// One set of JetStream limits from a JWT's `limits` or one of its tiers.
fn js_limits_of(limits: &Value) -> jsapi::AccountLimits {
    let get = |field: &str| storage_of(limits, field);
    let unlimited_unless_positive = |v: i64| if v > 0 { v } else { -1 };
    jsapi::AccountLimits {
        max_memory: get("mem_storage"),
        max_storage: get("disk_storage"),
        max_streams: get("streams"),
        max_consumers: get("consumer"),
        max_ack_pending: unlimited_unless_positive(get("max_ack_pending")),
        memory_max_stream_bytes: unlimited_unless_positive(get("mem_max_stream_bytes")),
        storage_max_stream_bytes: unlimited_unless_positive(get("disk_max_stream_bytes")),
        max_bytes_required: limits["max_bytes_required"].as_bool() == Some(true),
    }
}

/// Who a user JWT says the client is.
#[derive(Debug, Clone, PartialEq)]
pub struct JwtUser {
    /// The user's public key.
    pub key: String,
    /// The account's public key.
    pub account: String,
    pub permissions: Option<Permissions>,
    /// Unix seconds when the user JWT (or its account's) expires.
    pub expires: Option<i64>,
    /// The account's `limits.conn`, `limits.subs` and `limits.payload`
    /// and the user's `subs` and `payload` (-1: none).
    pub limits: Limits,
}

/// The per-account and per-user limits enforced for core connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub account_conns: i64,
    /// The account's `limits.leaf`: leaf node connections it may have.
    pub account_leafs: i64,
    pub subs: i64,
    pub payload: i64,
}

impl Trust {
    /// Trusts `operators` (JWTs) and resolves the `preload` accounts
    /// (public key → JWT). A preloaded account that does not validate is
    /// logged and left out, as nats-server does at start.
    pub fn new(operators: &[String], preload: &BTreeMap<String, String>) -> Result<Trust, String> {
        let mut keys = BTreeSet::new();
        for token in operators {
            let op = jwt::decode(token).map_err(|e| format!("error parsing operator JWT: {e}"))?;
            if op.kind != "operator" {
                return Err("error parsing operator JWT: not operator claim".into());
            }
            keys.insert(op.sub.clone());
            keys.extend(op.signing_keys());
        }
        let mut trust = Trust {
            keys,
            accounts: BTreeMap::new(),
            links: Default::default(),
        };
        for (key, token) in preload {
            match trust.verify_account(key, token, unix_now()) {
                Ok(claims) => {
                    trust.accounts.insert(key.clone(), claims);
                }
                Err(e) => tracing::warn!("Preloaded account [{key}] not valid: {e}"),
            }
        }
        let system = jwt::operator_system_account(operators).is_some();
        trust.links = crate::links::links(&trust.accounts, unix_now(), system);
        Ok(trust)
    }

    /// What the resolved accounts export, import and map.
    pub fn links(&self) -> &crate::links::Links {
        &self.links
    }

    /// The resolved accounts' public keys.
    pub fn account_keys(&self) -> Vec<String> {
        self.accounts.keys().cloned().collect()
    }

    /// What each resolved account's JWT says of JetStream, by account
    /// public key.
    pub fn jetstream(&self) -> Vec<(String, JwtJetStream)> {
        self.accounts
            .iter()
            .map(|(key, claims)| (key.clone(), jetstream_of(claims)))
            .collect()
    }

    /// What monitoring calls the account `key`: its JWT's `name`, as
    /// nats-server's name tag, if it has one.
    pub fn name_tag(&self, key: &str) -> Option<String> {
        let name = &self.accounts.get(key)?.name;
        (!name.is_empty()).then(|| name.clone())
    }

    /// Whether the account `key` resolved.
    pub fn resolves(&self, key: &str) -> bool {
        self.accounts.contains_key(key)
    }

    /// nats-server's `verifyAccountClaims`: a trusted issuer, in force at
    /// `now`, about `key`.
    fn verify_account(&self, key: &str, token: &str, now: i64) -> Result<Claims, String> {
        let claims = jwt::decode(token).map_err(|e| format!("invalid account JWT: {e}"))?;
        if claims.kind != "account" {
            return Err("not account claim".into());
        }
        if !self.keys.contains(&claims.iss) {
            return Err("account validation failed: untrusted issuer".into());
        }
        if let Some(why) = claims.expired(now) {
            return Err(format!("account validation failed: {why}"));
        }
        if claims.sub != key {
            return Err("account validation failed: subject is not the account".into());
        }
        Ok(claims)
    }

    /// Checks a CONNECT's user JWT and its signature of `nonce`, at
    /// `now` (Unix seconds). `Err` is the reason logged; the client is
    /// told `Authorization Violation`.
    pub fn authenticate(
        &self,
        token: Option<&str>,
        sig: Option<&str>,
        nonce: Option<&str>,
        now: i64,
    ) -> Result<JwtUser, String> {
        let token = token.ok_or("Authentication requires a user JWT")?;
        let user = jwt::decode(token).map_err(|e| format!("User JWT not valid: {e}"))?;
        if user.kind != "user" {
            return Err("User JWT not valid: not user claim".into());
        }
        if let Some(why) = user.expired(now) {
            return Err(format!("User JWT no longer valid: {why}"));
        }
        let account_key = user
            .nats_str("issuer_account")
            .unwrap_or(&user.iss)
            .to_string();
        let account = self
            .accounts
            .get(&account_key)
            .ok_or_else(|| "Account JWT lookup error: account missing".to_string())?;
        if user.iss != account.sub && !account.signing_keys().contains(&user.iss) {
            return Err("User JWT issuer is not known".into());
        }
        if is_scoped(account, &user.iss) {
            return Err(
                "User JWT is not valid: scoped signing keys are not supported by flotilla".into(),
            );
        }
        if let Some(why) = account.expired(now) {
            return Err(format!("Account JWT has expired: {why}"));
        }
        let bearer = user.nats.get("bearer_token").and_then(Value::as_bool) == Some(true);
        if bearer && account.nats["limits"]["disallow_bearer"].as_bool() == Some(true) {
            return Err("Account does not allow bearer tokens".into());
        }
        check_connection_types(&user)?;
        if !bearer {
            let sig = sig.filter(|s| !s.is_empty()).ok_or("Signature missing")?;
            if !crate::signed(&user.sub, nonce.unwrap_or(""), sig) {
                return Err("Signature not verified".into());
            }
        }
        if revoked(account, &user) {
            return Err("User authentication revoked".into());
        }
        for unsupported in ["src", "times"] {
            if user.nats.get(unsupported).is_some_and(|v| !is_empty(v)) {
                return Err(format!(
                    "User JWT restricts {unsupported:?}, which flotilla does not support"
                ));
            }
        }
        let permissions = permissions(&user.nats).or_else(|| {
            account
                .nats
                .get("default_permissions")
                .and_then(permissions)
        });
        Ok(JwtUser {
            key: user.sub.clone(),
            account: account_key,
            permissions,
            expires: [user.exp, account.exp].into_iter().flatten().min(),
            limits: Limits {
                account_conns: limit(account, &account.nats["limits"], "conn"),
                account_leafs: limit(account, &account.nats["limits"], "leaf"),
                subs: min_limit(
                    limit(account, &account.nats["limits"], "subs"),
                    limit(&user, &user.nats, "subs"),
                ),
                payload: min_limit(
                    limit(account, &account.nats["limits"], "payload"),
                    limit(&user, &user.nats, "payload"),
                ),
            },
        })
    }
}

/// Whether `signer` is one of `account`'s scoped signing keys.
fn is_scoped(account: &Claims, signer: &str) -> bool {
    account
        .nats
        .get("signing_keys")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|k| k.get("key").and_then(Value::as_str) == Some(signer))
}

/// `allowed_connection_types`: a plain client is `STANDARD`.
fn check_connection_types(user: &Claims) -> Result<(), String> {
    let Some(types) = user
        .nats
        .get("allowed_connection_types")
        .and_then(Value::as_array)
        .filter(|t| !t.is_empty())
    else {
        return Ok(());
    };
    let standard = types
        .iter()
        .filter_map(Value::as_str)
        .any(|t| t.eq_ignore_ascii_case("STANDARD"));
    if standard {
        Ok(())
    } else {
        Err("Connection type not allowed".into())
    }
}

/// Revoked when the account's `revocations` name the user (or `*`) at or
/// after the user JWT was issued.
fn revoked(account: &Claims, user: &Claims) -> bool {
    let revocations = &account.nats["revocations"];
    [user.sub.as_str(), "*"]
        .iter()
        .any(|k| revocations[*k].as_i64().is_some_and(|at| at >= user.iat))
}

fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        Value::String(s) => s.is_empty(),
        _ => false,
    }
}

/// A limit field of `claims`. Absent, it is no limit in a version 1
/// token and 0 in a version 2 one, as nats-io/jwt decodes them.
fn limit(claims: &Claims, obj: &Value, field: &str) -> i64 {
    let absent = if claims.v1 { -1 } else { 0 };
    obj.get(field).and_then(Value::as_i64).unwrap_or(absent)
}

/// The tighter of two limits, -1 being none.
fn min_limit(a: i64, b: i64) -> i64 {
    match (a < 0, b < 0) {
        (true, true) => -1,
        (true, false) => b,
        (false, true) => a,
        (false, false) => a.min(b),
    }
}

/// `pub`, `sub` and `resp` of a user JWT or of an account's
/// `default_permissions` (nats-server's `buildPermissionsFromJwt`);
/// `None` when none is set.
fn permissions(nats: &Value) -> Option<Permissions> {
    let list = |v: &Value| -> Vec<String> {
        v.as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_string)
            .collect()
    };
    let subjects = |field: &str| -> Option<SubjectPermission> {
        let (allow, deny) = (list(&nats[field]["allow"]), list(&nats[field]["deny"]));
        (!allow.is_empty() || !deny.is_empty()).then(|| SubjectPermission {
            allow: (!allow.is_empty()).then_some(allow),
            deny,
        })
    };
    let mut p = Permissions {
        publish: subjects("pub"),
        subscribe: subjects("sub"),
        response: None,
    };
    if let Some(resp) = nats.get("resp").filter(|r| r.is_object()) {
        let defaults = ResponsePermission::default();
        let max_msgs = resp["max"].as_i64().unwrap_or(0);
        let ttl = resp["ttl"].as_i64().unwrap_or(0);
        p.response = Some(ResponsePermission {
            max_msgs: if max_msgs == 0 {
                defaults.max_msgs
            } else {
                max_msgs
            },
            expires: if ttl == 0 {
                defaults.expires
            } else {
                Some(Duration::from_nanos(ttl.max(0) as u64))
            },
        });
        // nats-server's validateResponsePermissions: replies only.
        let publish = p.publish.get_or_insert_with(SubjectPermission::default);
        publish.allow.get_or_insert_with(Vec::new);
    }
    (p.publish.is_some() || p.subscribe.is_some() || p.response.is_some()).then_some(p)
}

/// Seconds since the Unix epoch, now. Authentication is IO at the edge,
/// not the deterministic core, so it reads the clock.
pub fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use jwt::testing::{mint, mint_expiring};
    use serde_json::json;

    struct World {
        operator: nkeys::KeyPair,
        account: nkeys::KeyPair,
        user: nkeys::KeyPair,
    }

    fn world() -> World {
        World {
            operator: nkeys::KeyPair::new_operator(),
            account: nkeys::KeyPair::new_account(),
            user: nkeys::KeyPair::new_user(),
        }
    }

    fn trust(w: &World, account: Value) -> Trust {
        let op = mint(
            &w.operator,
            &w.operator.public_key(),
            "operator",
            json!({}),
            false,
        );
        let acc = mint(
            &w.operator,
            &w.account.public_key(),
            "account",
            account,
            false,
        );
        Trust::new(&[op], &BTreeMap::from([(w.account.public_key(), acc)])).unwrap()
    }

    fn connect(t: &Trust, w: &World, user: Value) -> Result<JwtUser, String> {
        let token = mint(&w.account, &w.user.public_key(), "user", user, false);
        let nonce = "abc";
        let sig = data_encoding::BASE64URL_NOPAD.encode(&w.user.sign(nonce.as_bytes()).unwrap());
        t.authenticate(Some(&token), Some(&sig), Some(nonce), unix_now())
    }

    #[test]
    fn a_user_of_a_trusted_account_gets_in_with_its_permissions() {
        let w = world();
        let t = trust(
            &w,
            json!({"limits": {"conn": -1, "subs": 10, "payload": -1}}),
        );
        let user = connect(
            &t,
            &w,
            json!({"pub": {"allow": ["a.>"]}, "sub": {"deny": ["x"]}, "subs": 5, "payload": -1}),
        )
        .unwrap();
        assert_eq!(user.account, w.account.public_key());
        assert_eq!(user.key, w.user.public_key());
        let p = user.permissions.unwrap();
        assert_eq!(p.publish.unwrap().allow, Some(vec!["a.>".to_string()]));
        assert_eq!(p.subscribe.unwrap().deny, vec!["x".to_string()]);
        assert_eq!(
            user.limits,
            Limits {
                account_conns: -1,
                // Absent from a v2 account JWT: none allowed.
                account_leafs: 0,
                subs: 5,
                payload: -1
            }
        );
    }

    #[test]
    fn every_broken_link_of_the_chain_refuses() {
        let w = world();
        let t = trust(&w, json!({"revocations": {}}));
        // Wrong signature of the nonce.
        let token = mint(&w.account, &w.user.public_key(), "user", json!({}), false);
        let other = nkeys::KeyPair::new_user();
        let sig = data_encoding::BASE64URL_NOPAD.encode(&other.sign(b"abc").unwrap());
        assert_eq!(
            t.authenticate(Some(&token), Some(&sig), Some("abc"), unix_now()),
            Err("Signature not verified".into())
        );
        assert_eq!(
            t.authenticate(Some(&token), None, Some("abc"), unix_now()),
            Err("Signature missing".into())
        );
        assert_eq!(
            t.authenticate(None, None, None, 0),
            Err("Authentication requires a user JWT".into())
        );
        // An account nobody trusts.
        let stranger = nkeys::KeyPair::new_account();
        let token = mint(&stranger, &w.user.public_key(), "user", json!({}), false);
        assert!(t
            .authenticate(Some(&token), Some("x"), Some("abc"), unix_now())
            .unwrap_err()
            .contains("account missing"));
        // Expired, revoked, bearer without a signature.
        assert!(connect(&t, &w, json!({})).is_ok());
        let expired = mint_expiring(
            &w.account,
            &w.user.public_key(),
            "user",
            json!({}),
            false,
            Some(2),
        );
        assert_eq!(
            t.authenticate(Some(&expired), None, None, 3),
            Err("User JWT no longer valid: claim is expired".into())
        );
        let revoking = trust(&w, json!({"revocations": {"*": unix_now() + 10}}));
        assert_eq!(
            connect(&revoking, &w, json!({})),
            Err("User authentication revoked".into())
        );
        let bearer = mint(
            &w.account,
            &w.user.public_key(),
            "user",
            json!({"bearer_token": true}),
            false,
        );
        assert!(t
            .authenticate(Some(&bearer), None, None, unix_now())
            .is_ok());
        assert!(connect(&t, &w, json!({"src": ["10.0.0.0/8"]}))
            .unwrap_err()
            .contains("restricts \"src\""));
    }

    #[test]
    fn an_untrusted_or_misnamed_account_is_not_resolved() {
        let w = world();
        let rogue = nkeys::KeyPair::new_operator();
        let op = mint(
            &w.operator,
            &w.operator.public_key(),
            "operator",
            json!({}),
            false,
        );
        let by_rogue = mint(&rogue, &w.account.public_key(), "account", json!({}), false);
        let t = Trust::new(
            std::slice::from_ref(&op),
            &BTreeMap::from([(w.account.public_key(), by_rogue)]),
        )
        .unwrap();
        assert!(!t.resolves(&w.account.public_key()));
        assert!(connect(&t, &w, json!({}))
            .unwrap_err()
            .contains("account missing"));
        // Signed by the operator, but preloaded under another account's key.
        let other = nkeys::KeyPair::new_account();
        let theirs = mint(
            &w.operator,
            &other.public_key(),
            "account",
            json!({}),
            false,
        );
        let t = Trust::new(&[op], &BTreeMap::from([(w.account.public_key(), theirs)])).unwrap();
        assert!(!t.resolves(&w.account.public_key()));
        assert!(connect(&t, &w, json!({}))
            .unwrap_err()
            .contains("account missing"));
    }

    /// nats-server's reading of an account JWT's JetStream limits: flat
    /// ones win over tiers, tiers count only if one sets storage.
    #[test]
    fn jetstream_limits_are_flat_tiered_or_none() {
        let op = nkeys::KeyPair::new_operator();
        let of = |limits: Value| {
            let token = mint(&op, "A", "account", json!({ "limits": limits }), false);
            jetstream_of(&jwt::decode(&token).unwrap())
        };
        let tier = json!({"R1": {"disk_storage": 100, "streams": 2}, "R3": {"streams": 1}});
        let JwtJetStream::Enabled(jsapi::AccountTiers::Tiered(tiers)) =
            of(json!({ "tiered_limits": tier }))
        else {
            panic!("tiered");
        };
        assert_eq!(tiers.len(), 2);
        assert_eq!(tiers["R1"].max_storage, 100);
        assert_eq!(tiers["R1"].max_streams, 2);
        // A tier without storage is still a tier (its streams may hold
        // nothing), as nats-server keeps it.
        assert_eq!(tiers["R3"].max_storage, 0);
        assert_eq!(tiers["R3"].max_ack_pending, -1);
        let flat = of(json!({ "mem_storage": -1, "tiered_limits": tier }));
        assert!(
            matches!(&flat, JwtJetStream::Enabled(jsapi::AccountTiers::Flat(l)) if l.max_memory == -1),
            "{flat:?}"
        );
        let no_storage = json!({"R1": {"streams": 2}});
        assert_eq!(
            of(json!({ "mem_storage": -1, "tiered_limits": no_storage })),
            JwtJetStream::Disabled
        );
        assert_eq!(of(json!({ "streams": 2 })), JwtJetStream::Disabled);
    }
}
