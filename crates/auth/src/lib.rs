//! Client authentication against the configured token, single user,
//! users list, or nkeys. Secrets never reach a log line: a failure
//! reports only the identity the client claimed.
//!
//! The crate is who a connection is and what it may do: credentials
//! checked at CONNECT (here), operator mode's trust chain (`operator`),
//! permissions compiled into tries (`permissions`), and TLS
//! configurations and bounded handshakes (`tls`). It reads the options
//! (`flotilla-config`) and knows no connection or account.

pub mod links;
pub mod operator;
pub mod permissions;
pub mod tls;

use data_encoding::{BASE64, BASE64URL_NOPAD};
use protocol::ConnectInfo;
use subtle::ConstantTimeEq;

use config::options::{Authorization, NkeyUser, Permissions, User};
use tls::CertIdentity;

/// What a client presented in CONNECT, and the nonce it was asked to
/// sign, kept for the life of the connection so a config reload can
/// check it against new settings.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Credentials {
    pub user: Option<String>,
    pub pass: Option<String>,
    pub auth_token: Option<String>,
    pub nkey: Option<String>,
    /// A user JWT (operator mode).
    pub jwt: Option<String>,
    pub sig: Option<String>,
    /// The nonce of this connection's INFO, if it had one.
    pub nonce: Option<String>,
    /// Who its TLS client certificate names, under `verify_and_map`.
    pub cert: Option<CertIdentity>,
}

impl Credentials {
    pub fn new(ci: &ConnectInfo, nonce: Option<&str>, cert: Option<&CertIdentity>) -> Self {
        Credentials {
            user: ci.user.clone(),
            pass: ci.pass.clone(),
            auth_token: ci.auth_token.clone(),
            nkey: ci.nkey.clone(),
            jwt: ci.jwt.clone(),
            sig: ci.sig.clone(),
            nonce: nonce.map(str::to_string),
            cert: cert.cloned(),
        }
    }

    fn is_empty(&self) -> bool {
        self.user.is_none()
            && self.pass.is_none()
            && self.auth_token.is_none()
            && self.nkey.is_none()
    }
}

/// Who a client authenticated as, when it is a configured user: its name
/// (an nkey user's is its public key) and its permissions.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Identity<'a> {
    pub name: &'a str,
    pub permissions: Option<&'a Permissions>,
    /// The account the user belongs to; `None` is `$G`.
    pub account: Option<&'a str>,
}

impl<'a> Identity<'a> {
    fn user(u: &'a User) -> Identity<'a> {
        Identity {
            name: &u.user,
            permissions: u.permissions.as_ref(),
            account: u.account.as_deref(),
        }
    }

    fn nkey(u: &'a NkeyUser) -> Identity<'a> {
        Identity {
            name: &u.nkey,
            permissions: u.permissions.as_ref(),
            account: u.account.as_deref(),
        }
    }
}

/// Bytes of randomness in a nonce (nats-server's `nonceRawLen`).
const NONCE_BYTES: usize = 11;

/// A fresh INFO nonce: 11 random bytes from the operating system, in
/// unpadded base64url, as nats-server makes them.
pub fn nonce() -> String {
    let mut raw = [0u8; NONCE_BYTES];
    getrandom::getrandom(&mut raw).expect("the OS random source works");
    BASE64URL_NOPAD.encode(&raw)
}

/// Whether `sig` (base64url without padding, or standard base64, as
/// nats-server accepts) is `key`'s signature of `nonce`.
pub fn signed(key: &str, nonce: &str, sig: &str) -> bool {
    let Ok(sig) = BASE64URL_NOPAD
        .decode(sig.as_bytes())
        .or_else(|_| BASE64.decode(sig.as_bytes()))
    else {
        return false;
    };
    nkeys::KeyPair::from_public_key(key).is_ok_and(|kp| kp.verify(nonce.as_bytes(), &sig).is_ok())
}

/// What a server puts in its CONNECT to prove who it is to another (a
/// leaf node to its hub): a user JWT and its seed's signature of the
/// nonce, or an nkey and its signature.
#[derive(Debug, Default, PartialEq)]
pub struct Proof {
    pub jwt: Option<String>,
    pub nkey: Option<String>,
    pub sig: Option<String>,
}

/// Signs `nonce` with the user seed `seed` (base64url without padding,
/// as nats-server's leaf does).
fn sign(seed: &str, nonce: &str) -> Result<(String, String), String> {
    let key = nkeys::KeyPair::from_seed(seed.trim()).map_err(|_| "malformed seed".to_string())?;
    let sig = key
        .sign(nonce.as_bytes())
        .map_err(|e| format!("signing the nonce: {e}"))?;
    Ok((key.public_key(), BASE64URL_NOPAD.encode(&sig)))
}

/// A proof from a `.creds` file's text: its first framed item is the
/// user JWT, its second the seed (nats-server's `credsRe`).
pub fn prove_with_creds(creds: &str, nonce: &str) -> Result<Proof, String> {
    let mut items = Vec::new();
    let mut lines = creds.lines().map(str::trim);
    while let Some(line) = lines.next() {
        if line.starts_with("---") && line.ends_with("---") && line.contains("BEGIN") {
            if let Some(item) = lines
                .next()
                .filter(|l| !l.is_empty() && !l.starts_with("---"))
            {
                items.push(item);
            }
        }
    }
    let [jwt, seed, ..] = items[..] else {
        return Err("Credentials file malformed".into());
    };
    let (_, sig) = sign(seed, nonce).map_err(|e| format!("Credentials file: {e}"))?;
    Ok(Proof {
        jwt: Some(jwt.to_string()),
        nkey: None,
        sig: Some(sig),
    })
}

/// A proof with the user seed `seed`: its public key and signature.
pub fn prove_with_nkey(seed: &str, nonce: &str) -> Result<Proof, String> {
    let (key, sig) = sign(seed, nonce).map_err(|e| format!("Remote nkey: {e}"))?;
    Ok(Proof {
        jwt: None,
        nkey: Some(key),
        sig: Some(sig),
    })
}

/// Compares a presented secret with a configured one: bcrypt when the
/// configured value is a bcrypt hash (as nats-server allows), otherwise
/// constant-time equality.
pub fn secret_matches(configured: &str, presented: &str) -> bool {
    if configured.starts_with("$2") {
        // bcrypt takes tens of milliseconds by design; keep other
        // connections on this runtime worker moving meanwhile.
        let verify = || bcrypt::verify(presented, configured).unwrap_or(false);
        return match tokio::runtime::Handle::try_current() {
            Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
                tokio::task::block_in_place(verify)
            }
            _ => verify(),
        };
    }
    configured.as_bytes().ct_eq(presented.as_bytes()).into()
}

/// Checks a client's credentials and returns the configured user they
/// name, if the users list or nkeys are in use. A client that presents
/// nothing connects as `no_auth_user` when there is one. `Err` carries
/// the log suffix naming who failed (e.g. ` - User "bob"`), or is empty
/// when no identity was given.
pub fn check<'a>(
    auth: &'a Authorization,
    ci: &Credentials,
) -> Result<Option<Identity<'a>>, String> {
    if let Some(name) = auth.no_auth_user.as_deref().filter(|_| ci.is_empty()) {
        let identity = listed(auth, name);
        debug_assert!(
            identity.is_some(),
            "the config checks no_auth_user is a user"
        );
        return identity.map(Some).ok_or_else(String::new);
    }
    if let (Some(cert), false) = (&ci.cert, auth.users.is_empty()) {
        // verify_and_map: the certificate, not CONNECT, says who it is.
        return auth
            .users
            .iter()
            .find(|u| cert.names(&u.user))
            .map(|u| Some(Identity::user(u)))
            .ok_or_else(|| " - no user for the TLS client certificate".to_string());
    }
    if let (Some(key), false) = (&ci.nkey, auth.nkeys.is_empty()) {
        let who = format!(" - Nkey {key:?}");
        let user = auth
            .nkeys
            .iter()
            .find(|u| &u.nkey == key)
            .ok_or(who.clone())?;
        let nonce = ci.nonce.as_deref().unwrap_or("");
        if !signed(key, nonce, ci.sig.as_deref().unwrap_or("")) {
            return Err(who);
        }
        return Ok(Some(Identity::nkey(user)));
    }
    let who = match (&ci.user, &ci.auth_token) {
        (Some(u), _) => format!(" - User {u:?}"),
        (None, Some(_)) => " - Token \"[REDACTED]\"".to_string(),
        _ => String::new(),
    };
    let ok = if let Some(token) = &auth.token {
        ci.auth_token
            .as_deref()
            .is_some_and(|t| secret_matches(token, t))
    } else if let Some(user) = &auth.user {
        ci.user.as_deref() == Some(user.as_str())
            && secret_matches(
                auth.password.as_deref().unwrap_or(""),
                ci.pass.as_deref().unwrap_or(""),
            )
    } else if !auth.users.is_empty() || !auth.nkeys.is_empty() {
        let presented = ci.user.as_deref();
        return auth
            .users
            .iter()
            .find(|u| Some(u.user.as_str()) == presented)
            .filter(|u| secret_matches(&u.password, ci.pass.as_deref().unwrap_or("")))
            .map(|u| Some(Identity::user(u)))
            .ok_or(who);
    } else {
        true
    };
    if ok {
        Ok(None)
    } else {
        Err(who)
    }
}

/// The configured user or nkey user called `name`.
fn listed<'a>(auth: &'a Authorization, name: &str) -> Option<Identity<'a>> {
    let user = auth
        .users
        .iter()
        .find(|u| u.user == name)
        .map(Identity::user);
    user.or_else(|| {
        auth.nkeys
            .iter()
            .find(|u| u.nkey == name)
            .map(Identity::nkey)
    })
}

/// Builds what the options describe that only the runtime can check
/// (client TLS, route TLS, operator trust), so that a bad file or JWT
/// refuses a start or a reload. `Options::validate` checks the rest.
pub fn check_options(o: &config::options::Options) -> Result<(), String> {
    if let Some(tls) = &o.tls {
        tls::server_config(tls)?;
    }
    if let Some(op) = &o.authorization.operator {
        let trust = operator::Trust::new(&op.jwts, &op.preload)?;
        if let Some(system) = &op.system_account {
            if !trust.resolves(system) {
                return Err("error resolving system account: account missing".into());
            }
        }
    }
    if let Some(tls) = &o.cluster.tls {
        tls::RouteTls::new(tls)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use config::options::{NkeyUser, User};

    fn connect(json: &str) -> Credentials {
        let ci: ConnectInfo = serde_json::from_str(json).unwrap();
        Credentials::new(&ci, None, None)
    }

    #[test]
    fn token() {
        let a = Authorization {
            token: Some("s3cr3t".into()),
            ..Default::default()
        };
        assert!(check(&a, &connect(r#"{"auth_token":"s3cr3t"}"#)).is_ok());
        let err = check(&a, &connect(r#"{"auth_token":"nope"}"#)).unwrap_err();
        assert!(!err.contains("nope"), "secret must not be logged: {err}");
        assert!(check(&a, &connect("{}")).is_err());
    }

    #[test]
    fn single_user_and_bcrypt() {
        let hash = bcrypt::hash("pw", 4).unwrap();
        let a = Authorization {
            user: Some("alice".into()),
            password: Some(hash),
            ..Default::default()
        };
        assert!(check(&a, &connect(r#"{"user":"alice","pass":"pw"}"#)).is_ok());
        assert_eq!(
            check(&a, &connect(r#"{"user":"alice","pass":"bad"}"#)),
            Err(" - User \"alice\"".into())
        );
        assert!(check(&a, &connect(r#"{"user":"bob","pass":"pw"}"#)).is_err());
    }

    #[test]
    fn users_list() {
        let a = Authorization {
            users: vec![
                User {
                    user: "a".into(),
                    password: "1".into(),
                    permissions: None,
                    account: None,
                },
                User {
                    user: "b".into(),
                    password: "2".into(),
                    permissions: None,
                    account: None,
                },
            ],
            ..Default::default()
        };
        assert!(check(&a, &connect(r#"{"user":"b","pass":"2"}"#)).is_ok());
        assert!(check(&a, &connect(r#"{"user":"b","pass":"1"}"#)).is_err());
        assert!(check(&a, &connect(r#"{"user":"c","pass":"2"}"#)).is_err());
        assert!(check(&a, &connect("{}")).is_err());
    }

    #[test]
    fn a_creds_files_proof_verifies_as_a_clients_would() {
        let user = nkeys::KeyPair::new_user();
        let creds = format!(
            "-----BEGIN NATS USER JWT-----\nJWT.TEXT.HERE\n------END NATS USER JWT------\n\n\
             ************************* IMPORTANT *************************\n\
             -----BEGIN USER NKEY SEED-----\n{}\n------END USER NKEY SEED------\n",
            user.seed().unwrap()
        );
        let proof = prove_with_creds(&creds, "nonce-1").unwrap();
        assert_eq!(proof.jwt.as_deref(), Some("JWT.TEXT.HERE"));
        let sig = proof.sig.unwrap();
        assert!(signed(&user.public_key(), "nonce-1", &sig));
        assert!(!signed(&user.public_key(), "nonce-2", &sig));
        assert!(prove_with_creds("no frames here", "n").is_err());
        let by_nkey = prove_with_nkey(&user.seed().unwrap(), "n").unwrap();
        assert_eq!(by_nkey.nkey, Some(user.public_key()));
        assert!(signed(&user.public_key(), "n", &by_nkey.sig.unwrap()));
        assert!(prove_with_nkey("SUNOTASEED", "n").is_err());
    }

    #[test]
    fn no_auth_user_stands_in_for_no_credentials() {
        let user = |name: &str| User {
            user: name.into(),
            password: "pw".into(),
            permissions: None,
            account: None,
        };
        let a = Authorization {
            users: vec![user("a"), user("b")],
            no_auth_user: Some("b".into()),
            ..Default::default()
        };
        let picked = |json| check(&a, &connect(json)).map(|u| u.map(|u| u.name.to_string()));
        assert_eq!(picked("{}"), Ok(Some("b".into())));
        assert_eq!(picked(r#"{"user":"a","pass":"pw"}"#), Ok(Some("a".into())));
        // Credentials that are given are checked, never replaced.
        assert!(picked(r#"{"user":"a","pass":"bad"}"#).is_err());
        assert!(picked(r#"{"pass":"pw"}"#).is_err());
    }

    #[test]
    fn nkey_users_sign_their_nonce() {
        let alice = nkeys::KeyPair::new_user();
        let mallory = nkeys::KeyPair::new_user();
        let a = Authorization {
            nkeys: vec![NkeyUser {
                nkey: alice.public_key(),
                permissions: None,
                account: None,
            }],
            ..Default::default()
        };
        let nonce = nonce();
        assert_eq!(nonce.len(), 15, "as nats-server's nonceLen");
        let creds = |key: &nkeys::KeyPair, signer: &nkeys::KeyPair, sig_nonce: &str| Credentials {
            nkey: Some(key.public_key()),
            sig: Some(BASE64URL_NOPAD.encode(&signer.sign(sig_nonce.as_bytes()).unwrap())),
            nonce: Some(nonce.clone()),
            ..Default::default()
        };
        let ok = check(&a, &creds(&alice, &alice, &nonce)).unwrap().unwrap();
        assert_eq!(ok.name, alice.public_key());
        // Standard base64 is accepted too.
        let mut std = creds(&alice, &alice, &nonce);
        std.sig = Some(BASE64.encode(&alice.sign(nonce.as_bytes()).unwrap()));
        assert!(check(&a, &std).is_ok());
        for (what, bad) in [
            ("someone else's signature", creds(&alice, &mallory, &nonce)),
            ("another nonce signed", creds(&alice, &alice, "other-nonce")),
            ("an unknown key", creds(&mallory, &mallory, &nonce)),
        ] {
            let err = check(&a, &bad).unwrap_err();
            assert!(err.starts_with(" - Nkey \"U"), "{what}: {err}");
        }
        let mut unsigned = creds(&alice, &alice, &nonce);
        unsigned.sig = None;
        assert!(check(&a, &unsigned).is_err());
        let mut garbled = creds(&alice, &alice, &nonce);
        garbled.sig = Some("!!not base64!!".into());
        assert!(check(&a, &garbled).is_err());
        // Nothing presented, and no no_auth_user: refused.
        assert!(check(&a, &Credentials::default()).is_err());
    }
}
