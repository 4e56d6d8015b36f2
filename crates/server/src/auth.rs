//! Client authentication against the configured token, single user, or
//! users list. Secrets never reach a log line: a failure reports only the
//! identity the client claimed.

use protocol::ConnectInfo;
use subtle::ConstantTimeEq;

use crate::options::Authorization;

/// Compares a presented secret with a configured one: bcrypt when the
/// configured value is a bcrypt hash (as nats-server allows), otherwise
/// constant-time equality.
fn secret_matches(configured: &str, presented: &str) -> bool {
    if configured.starts_with("$2") {
        return bcrypt::verify(presented, configured).unwrap_or(false);
    }
    configured.as_bytes().ct_eq(presented.as_bytes()).into()
}

/// Checks a CONNECT. `Err` carries the log suffix naming who failed
/// (e.g. ` - User "bob"`), or is empty when no identity was given.
pub fn check(auth: &Authorization, ci: &ConnectInfo) -> Result<(), String> {
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
        auth.users
            .iter()
            .find(|u| Some(u.user.as_str()) == presented)
            .is_some_and(|u| secret_matches(&u.password, ci.pass.as_deref().unwrap_or("")))
    } else {
        true
    };
    if ok {
        Ok(())
    } else {
        Err(who)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::User;

    fn connect(json: &str) -> ConnectInfo {
        serde_json::from_str(json).unwrap()
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
                },
                User {
                    user: "b".into(),
                    password: "2".into(),
                },
            ],
            ..Default::default()
        };
        assert!(check(&a, &connect(r#"{"user":"b","pass":"2"}"#)).is_ok());
        assert!(check(&a, &connect(r#"{"user":"b","pass":"1"}"#)).is_err());
        assert!(check(&a, &connect(r#"{"user":"c","pass":"2"}"#)).is_err());
    }
}
