//! Client events in the system account, as nats-server sends them
//! (`events.go`): `$SYS.ACCOUNT.<acc>.CONNECT` and `.DISCONNECT`, the
//! two `CLIENT.AUTH.ERR` events of a failed login, and an account's
//! connection count (`AccountNumConns`) on `$SYS.SERVER.ACCOUNT.<acc>.CONNS`
//! and `$SYS.ACCOUNT.<acc>.SERVER.CONNS` whenever a client comes or goes
//! (never for `$G`).
//!
//! The core calls [`Events`] on the client's task; each call takes a
//! snapshot of the client and queues it. The answering task stamps and
//! publishes it ([`Event::messages`]), so that stamps count up in the
//! order messages go out.

use std::sync::Arc;

use flotilla_core::client::Client;
use flotilla_core::server::{Server, ServerEvents};
use serde::Serialize;
use serde_json::{Map, Value};
use tokio::sync::mpsc;

use crate::info::ServerInfo;

pub const CONNECT_TYPE: &str = "io.nats.server.advisory.v1.client_connect";
pub const DISCONNECT_TYPE: &str = "io.nats.server.advisory.v1.client_disconnect";
pub const CONNS_TYPE: &str = "io.nats.server.advisory.v1.account_connections";

/// nats-server's `DataStats` as client events carry it.
#[derive(Debug, Clone, Copy, Serialize, Default)]
pub struct DataStats {
    pub msgs: u64,
    pub bytes: u64,
}

/// A client event, snapshot taken.
#[derive(Debug)]
pub enum Event {
    Connect {
        account: String,
        client: Map<String, Value>,
    },
    Disconnect {
        account: String,
        closed: Closed,
    },
    /// A failed login, in the account it was bound to.
    AuthError {
        account: String,
        closed: Closed,
    },
    /// An account's connections changed.
    Conns {
        account: String,
    },
}

/// What a `DisconnectEventMsg` says of a client.
#[derive(Debug, Serialize)]
pub struct Closed {
    pub client: Map<String, Value>,
    /// What the client sent the server.
    pub sent: DataStats,
    /// What the server delivered to it.
    pub received: DataStats,
    pub reason: String,
}

/// `TypedEvent` and the `server` object, then the event's own fields.
#[derive(Serialize)]
struct Typed<'a, T: Serialize> {
    #[serde(rename = "type")]
    kind: &'a str,
    id: String,
    timestamp: String,
    server: &'a ServerInfo,
    #[serde(flatten)]
    body: T,
}

#[derive(Serialize)]
struct ConnectBody<'a> {
    client: &'a Map<String, Value>,
}

impl Event {
    /// The messages it sends: (account to publish in, `None` for the
    /// system account; subject; payload), given a stamp per message.
    pub fn messages(
        &self,
        server: &Server,
        stamp: &mut dyn FnMut() -> ServerInfo,
    ) -> Vec<(Option<String>, String, Vec<u8>)> {
        match self {
            Event::Connect { account, client } => {
                let body = ConnectBody { client };
                let json = typed(CONNECT_TYPE, &stamp(), &body);
                vec![(None, format!("$SYS.ACCOUNT.{account}.CONNECT"), json)]
            }
            Event::Disconnect { account, closed } => {
                let json = typed(DISCONNECT_TYPE, &stamp(), closed);
                vec![(None, format!("$SYS.ACCOUNT.{account}.DISCONNECT"), json)]
            }
            Event::AuthError { account, closed } => {
                // In the client's account first, then the server's.
                let first = typed(DISCONNECT_TYPE, &stamp(), closed);
                let second = typed(DISCONNECT_TYPE, &stamp(), closed);
                let own = format!("$SYS.SERVER.{}.CLIENT.AUTH.ERR", server.id);
                vec![
                    (
                        Some(account.clone()),
                        "$SYS.ACCOUNT.CLIENT.AUTH.ERR".to_string(),
                        first,
                    ),
                    (None, own, second),
                ]
            }
            Event::Conns { account } => {
                let Some(a) = server.accounts.get(account.as_bytes()) else {
                    return Vec::new();
                };
                let stat = monitor::accstatz::account_stat(server, &a);
                let server_info = stamp();
                let json = typed(CONNS_TYPE, &server_info, &stat);
                vec![
                    (
                        None,
                        format!("$SYS.SERVER.ACCOUNT.{account}.CONNS"),
                        json.clone(),
                    ),
                    (None, format!("$SYS.ACCOUNT.{account}.SERVER.CONNS"), json),
                ]
            }
        }
    }
}

/// An event: its `TypedEvent` and `server` object, then `body`'s fields.
fn typed<T: Serialize>(kind: &str, server: &ServerInfo, body: &T) -> Vec<u8> {
    let event = Typed {
        kind,
        id: flotilla_core::nuid(),
        timestamp: jsapi::time::rfc3339(crate::info::unix_nanos()),
        server,
        body,
    };
    serde_json::to_vec(&event).expect("events serialize")
}

/// The core's [`ServerEvents`]: client events queued as snapshots for
/// the system task; this server's leaving published at once, by
/// `leaving` (through [`crate::System`]).
pub struct Events {
    pub tx: mpsc::UnboundedSender<Event>,
    pub system: std::sync::Weak<crate::System>,
}

impl Events {
    fn send(&self, event: Event) {
        let _ = self.tx.send(event);
    }
}

/// A client's account name, or nats-server's `N/A`.
fn account_of(client: &Client) -> String {
    client
        .account()
        .map_or_else(|| "N/A".into(), |a| a.name.clone())
}

impl ServerEvents for Events {
    fn connected(&self, client: &Arc<Client>) {
        let account = account_of(client);
        let info = client_info(client, &account, None);
        self.send(Event::Connect {
            account: account.clone(),
            client: info,
        });
        self.send(Event::Conns { account });
    }

    fn auth_failed(&self, client: &Arc<Client>) {
        let account = account_of(client);
        let closed = closed(client, &account, "Authentication Failure");
        self.send(Event::AuthError { account, closed });
    }

    fn closed(&self, client: &Arc<Client>) {
        let account = account_of(client);
        let reason = client
            .closed_reason()
            .map_or("Client Closed", |r| r.as_str());
        let closed = closed(client, &account, reason);
        self.send(Event::Disconnect {
            account: account.clone(),
            closed,
        });
        self.send(Event::Conns { account });
    }

    fn leaf_connected(&self, client: &Arc<Client>, account: &str) {
        let info = client_info(client, account, None);
        self.send(Event::Connect {
            account: account.to_string(),
            client: info,
        });
        self.send(Event::Conns {
            account: account.to_string(),
        });
    }

    fn leaf_closed(&self, client: &Arc<Client>, account: &str) {
        let reason = client
            .closed_reason()
            .map_or("Client Closed", |r| r.as_str());
        let closed = closed(client, account, reason);
        self.send(Event::Disconnect {
            account: account.to_string(),
            closed,
        });
        self.send(Event::Conns {
            account: account.to_string(),
        });
    }

    fn leaving(&self, lame_duck: bool) {
        if let Some(system) = self.system.upgrade() {
            system.leaving(lame_duck);
        }
    }
}

fn closed(client: &Client, account: &str, reason: &str) -> Closed {
    let stop = crate::info::unix_nanos();
    let out = client.out.stats();
    Closed {
        client: client_info(client, account, Some(stop)),
        sent: DataStats {
            msgs: client.in_msgs.load(std::sync::atomic::Ordering::Relaxed),
            bytes: client.in_bytes.load(std::sync::atomic::Ordering::Relaxed),
        },
        received: DataStats {
            msgs: out.out_msgs,
            bytes: out.out_bytes,
        },
        reason: reason.to_string(),
    }
}

/// nats-server's `ClientInfo` as its client events fill it; a
/// disconnect's has its `stop` and round trip time.
fn client_info(client: &Client, account: &str, stop: Option<i64>) -> Map<String, Value> {
    let mut info = Map::new();
    let mut put = |key: &str, value: Value| {
        let empty = value.as_str() == Some("") || value.as_u64() == Some(0);
        if !empty {
            info.insert(key.to_string(), value);
        }
    };
    let start = flotilla_core::client::unix_nanos(client.start) as i64;
    put("start", jsapi::time::rfc3339(start).into());
    put("host", client.addr.ip().to_string().into());
    put("id", client.cid.into());
    put("acc", account.into());
    let meta = client.meta.lock().clone();
    put("user", meta.user.unwrap_or_default().into());
    put("name", meta.name.into());
    put("lang", meta.lang.into());
    put("ver", meta.version.into());
    if let Some(stop) = stop {
        let rtt = client.rtt.load(std::sync::atomic::Ordering::Relaxed);
        put("rtt", rtt.into());
        put("stop", jsapi::time::rfc3339(stop).into());
    }
    let jwt = client.creds.lock().as_ref().and_then(|c| c.jwt.clone());
    put("jwt", jwt.unwrap_or_default().into());
    put("name_tag", account.into());
    // A leaf node connection has no client type (nats-server's
    // `clientTypeString` of a non-client).
    if client.leaf.is_some() {
        put("kind", "Leafnode".into());
    } else {
        put("kind", "Client".into());
        let kind = if client.websocket {
            "websocket"
        } else {
            "nats"
        };
        put("client_type", kind.into());
    }
    info
}
