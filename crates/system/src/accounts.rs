//! The account requests (`$SYS.REQ.ACCOUNT.<acc>.<NAME>`) and who a
//! user is (`$SYS.REQ.USER.<acc>.INFO`): one account's view, asked by
//! the system account or, through the imports every account has from
//! it, by the account's own clients (nats-server's `accountReq`
//! handlers and `userInfoReq`).

use flotilla_core::client::{LeafRole, Subscription};
use monitor::query::Query;

use crate::requests::{self, ApiError};
use crate::{events, info, System};

impl System {
    /// An account request's answer (see `requests::AccountAnswer`);
    /// `None`: silent.
    pub(crate) async fn answer_account(
        &self,
        account: &str,
        service: &requests::AccountService,
        body: &[u8],
    ) -> Option<Vec<u8>> {
        use requests::AccountAnswer;
        let options = match &service.answer {
            AccountAnswer::Monitor { options, .. } => *options,
            _ => &[][..],
        };
        let read = match requests::read_body(body, options) {
            Ok(read) => read,
            Err(description) => return Some(self.refused(400, description)),
        };
        if read.filter.excludes(&self.me()) {
            return None;
        }
        let ping = account == "PING";
        let data: Result<Vec<u8>, ApiError> = match &service.answer {
            AccountAnswer::Monitor {
                path,
                query,
                forced,
                ..
            } => {
                let mut pairs = read.query;
                if !ping {
                    pairs.retain(|(k, _)| k != query);
                    pairs.push((query.to_string(), account.to_string()));
                }
                pairs.extend(forced.iter().map(|(k, v)| (k.to_string(), v.to_string())));
                self.monitor_data(path, Query::from_pairs(pairs)).await
            }
            AccountAnswer::Jsz if !ping => self.account_jsz(account).await,
            AccountAnswer::Info if !ping => self.account_info(account).await,
            AccountAnswer::Statz => return self.account_statz(account, body),
            AccountAnswer::Conns if !ping => return self.account_conns(account),
            _ => return None,
        };
        let stamp = self.identity.stamp();
        Some(match data {
            Ok(json) => requests::response(&stamp, Ok(&json)),
            Err(e) => requests::response(&stamp, Err(e)),
        })
    }

    /// `/jsz`'s detail of one account (nats-server's `JszAccount`).
    async fn account_jsz(&self, account: &str) -> Result<Vec<u8>, ApiError> {
        let q = Query::from_pairs([
            ("acc".to_string(), account.to_string()),
            ("accounts".to_string(), "true".to_string()),
        ]);
        let all = self.monitor_json("/jsz", q).await;
        match all["account_details"].get(0) {
            Some(detail) => Ok(serde_json::to_vec(detail).expect("json")),
            None => Err(ApiError {
                code: 500,
                description: format!("account {account:?} not jetstream enabled"),
            }),
        }
    }

    /// `/accountz`'s detail of one account (nats-server's `accountInfo`).
    async fn account_info(&self, account: &str) -> Result<Vec<u8>, ApiError> {
        let q = Query::from_pairs([("acc".to_string(), account.to_string())]);
        let json = self.monitor_data("/accountz", q).await?;
        let v: serde_json::Value = serde_json::from_slice(&json).unwrap_or_default();
        Ok(serde_json::to_vec(&v["account_detail"]).expect("json"))
    }

    /// A bare `AccountNumConns`, only when the account has connections
    /// here.
    fn account_conns(&self, account: &str) -> Option<Vec<u8>> {
        let a = self.server.accounts.get(account.as_bytes())?;
        if a.clients() == 0 {
            return None;
        }
        let event = events::Event::Conns {
            account: account.to_string(),
        };
        let mut stamp = || self.identity.stamp();
        let (_, _, body) = event.messages(&self.server, &mut stamp).pop()?;
        Some(body)
    }

    /// `AccountStatz` for one account, or with `PING` for those the body
    /// names (all, when it names none); silent when none has connections
    /// here and the body does not ask for unused ones.
    fn account_statz(&self, account: &str, body: &[u8]) -> Option<Vec<u8>> {
        let opts = match requests::statz_options(body) {
            Ok(o) => o,
            Err(description) => return Some(self.refused(400, description)),
        };
        let wanted = |name: &str| match account {
            "PING" => opts.accounts.is_empty() || opts.accounts.iter().any(|a| a == name),
            one => one == name,
        };
        let stats: Vec<_> = self
            .server
            .accounts
            .all()
            .into_iter()
            .filter(|a| wanted(&a.name) && (opts.include_unused || a.clients() > 0))
            .map(|a| monitor::accstatz::account_stat(&self.server, &a))
            .collect();
        if stats.is_empty() {
            return None;
        }
        let data = serde_json::json!({
            "server_id": self.server.id,
            "now": jsapi::time::rfc3339(info::unix_nanos()),
            "account_statz": stats,
        });
        let json = serde_json::to_vec(&data).expect("json");
        Some(requests::response(&self.identity.stamp(), Ok(&json)))
    }

    /// `$SYS.REQ.USER.INFO`'s answer: who asked, from the request's
    /// `Nats-Request-Info` (nats-server's `UserInfo`; its permissions
    /// are not told yet).
    pub(crate) fn user_info(&self, account: &str, info: Option<&str>, asker: u64) -> Vec<u8> {
        let ci: serde_json::Value = info
            .and_then(|i| serde_json::from_str(i).ok())
            .unwrap_or_default();
        let Some(acc) = ci["acc"].as_str() else {
            return self.refused(400, String::new());
        };
        debug_assert!(!account.is_empty(), "the subject names the importer");
        let mut data = serde_json::Map::new();
        data.insert(
            "user".into(),
            ci["user"].as_str().unwrap_or_default().into(),
        );
        data.insert("account".into(), acc.into());
        if self.server.accounts.get(acc.as_bytes()).is_some() {
            data.insert("account_name".into(), acc.into());
        }
        // The asker's own permissions, as nats-server's `publicPermissions`.
        let client = self.server.clients.lock().get(&asker).cloned();
        if let Some(permits) = client.and_then(|c| c.permits()) {
            data.insert("permissions".into(), permits.public());
        }
        let json = serde_json::to_vec(&data).expect("json");
        requests::response(&self.identity.stamp(), Ok(&json))
    }

    /// `$SYS.REQ.ACCOUNT.NSUBS` (nats-server's `nsubsRequest`): how many
    /// of an account's subscriptions here, from its clients and from leaf
    /// nodes this server is the hub of, match `subject` (and `queue`,
    /// when given). A bare number; silent for a body that does not read
    /// or an account with no connections here, as nats-server is.
    pub(crate) fn nsubs(&self, body: &[u8]) -> Option<Vec<u8>> {
        use base64::Engine;
        #[derive(serde::Deserialize)]
        struct Req {
            acc: String,
            subject: String,
            /// Go's `[]byte`: base64.
            #[serde(default)]
            queue: Option<String>,
        }
        let req: Req = serde_json::from_slice(body).ok()?;
        let queue = match req.queue {
            Some(q) => Some(base64::engine::general_purpose::STANDARD.decode(q).ok()?),
            None => None,
        };
        let account = self.server.accounts.get(req.acc.as_bytes())?;
        let counted = |s: &Subscription| {
            s.sink.is_none()
                && !s.client.is_route
                && s.client.leaf != Some(LeafRole::Solicited)
                && queue
                    .as_deref()
                    .is_none_or(|q| s.queue.as_deref() == Some(q))
        };
        let subject = req.subject.as_bytes();
        let mut n: i32 = 0;
        let mut leaves = false;
        if subjects::is_literal(subject) {
            let found = account.sublist.read().matches_uncached(subject);
            let plain = found.psubs.iter().filter(|_| queue.is_none());
            for s in plain.chain(found.qsubs.iter().flat_map(|(_, m)| m)) {
                leaves |= s.client.leaf.is_some();
                n += i32::from(counted(s));
            }
        } else {
            account.sublist.read().for_each(|s| {
                if subjects::subject_matches_filter(&s.subject, subject) {
                    leaves |= s.client.leaf.is_some();
                    n += i32::from(counted(s));
                }
            });
        }
        if account.clients() == 0 && !leaves {
            return None;
        }
        Some(n.to_string().into_bytes())
    }
}
