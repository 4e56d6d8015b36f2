//! Client authentication against the configured token, single user, or
//! users list. Secrets never reach a log line: a failure reports only the
//! identity the client claimed.

use protocol::ConnectInfo;
use subtle::ConstantTimeEq;

use crate::options::{Authorization, User};

/// What a client presented in CONNECT, kept for the life of the
/// connection so a config reload can check it against new settings.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Credentials {
    pub user: Option<String>,
    pub pass: Option<String>,
    pub auth_token: Option<String>,
}

impl From<&ConnectInfo> for Credentials {
    fn from(ci: &ConnectInfo) -> Self {
        Credentials {
            user: ci.user.clone(),
            pass: ci.pass.clone(),
            auth_token: ci.auth_token.clone(),
        }
    }
}

/// Compares a presented secret with a configured one: bcrypt when the
/// configured value is a bcrypt hash (as nats-server allows), otherwise
/// constant-time equality.
fn secret_matches(configured: &str, presented: &str) -> bool {
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
/// name, if the users list is in use. A client that presents nothing
/// connects as `no_auth_user` when there is one. `Err` carries the log
/// suffix naming who failed (e.g. ` - User "bob"`), or is empty when no
/// identity was given.
pub fn check<'a>(auth: &'a Authorization, ci: &Credentials) -> Result<Option<&'a User>, String> {
    if let Some(name) = &auth.no_auth_user {
        if ci.user.is_none() && ci.pass.is_none() && ci.auth_token.is_none() {
            let user = auth.users.iter().find(|u| &u.user == name);
            debug_assert!(user.is_some(), "the config checks no_auth_user is a user");
            return user.map(Some).ok_or_else(String::new);
        }
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
    } else if !auth.users.is_empty() {
        let presented = ci.user.as_deref();
        return auth
            .users
            .iter()
            .find(|u| Some(u.user.as_str()) == presented)
            .filter(|u| secret_matches(&u.password, ci.pass.as_deref().unwrap_or("")))
            .map(Some)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn connect(json: &str) -> Credentials {
        let ci: ConnectInfo = serde_json::from_str(json).unwrap();
        Credentials::from(&ci)
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
                },
                User {
                    user: "b".into(),
                    password: "2".into(),
                    permissions: None,
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
    fn no_auth_user_stands_in_for_no_credentials() {
        let user = |name: &str| User {
            user: name.into(),
            password: "pw".into(),
            permissions: None,
        };
        let a = Authorization {
            users: vec![user("a"), user("b")],
            no_auth_user: Some("b".into()),
            ..Default::default()
        };
        let picked = |json| check(&a, &connect(json)).map(|u| u.map(|u| u.user.clone()));
        assert_eq!(picked("{}"), Ok(Some("b".into())));
        assert_eq!(picked(r#"{"user":"a","pass":"pw"}"#), Ok(Some("a".into())));
        // Credentials that are given are checked, never replaced.
        assert!(picked(r#"{"user":"a","pass":"bad"}"#).is_err());
        assert!(picked(r#"{"pass":"pw"}"#).is_err());
    }
}
