//! The JSON carried by `INFO` and `CONNECT`, with nats-server's field names
//! and order.

use serde::{Deserialize, Serialize};

fn is_false(b: &bool) -> bool {
    !*b
}

/// What the server announces. Field order follows nats-server's `Info`
/// struct, so byte-level comparisons with it line up.
#[derive(Debug, Clone, Serialize, Deserialize, Default, PartialEq)]
pub struct ServerInfo {
    pub server_id: String,
    pub server_name: String,
    pub version: String,
    pub proto: i32,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub git_commit: String,
    /// nats-server reports its Go version here; clients only display it.
    pub go: String,
    pub host: String,
    pub port: u16,
    pub headers: bool,
    #[serde(default, skip_serializing_if = "is_false")]
    pub auth_required: bool,
    #[serde(default, skip_serializing_if = "is_false")]
    pub tls_required: bool,
    #[serde(default, skip_serializing_if = "is_false")]
    pub tls_verify: bool,
    pub max_payload: i64,
    #[serde(default, skip_serializing_if = "is_false")]
    pub jetstream: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_id: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_ip: Option<String>,
    /// The challenge an nkey user signs in CONNECT.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nonce: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub connect_urls: Vec<String>,
    #[serde(default, skip_serializing_if = "is_false")]
    pub ldm: bool,
    #[serde(default, skip_serializing_if = "is_false")]
    pub connect_info: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote_account: Option<String>,
    #[serde(default, skip_serializing_if = "is_false")]
    pub acc_is_sys: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_lvl: Option<i32>,
}

/// What a client sends in `CONNECT`. Absent fields keep the values the
/// connection already had (nats-server unmarshals into the existing
/// struct), hence the `Option`s: see [`ConnectInfo::apply`].
#[derive(Debug, Clone, Deserialize, Default)]
pub struct ConnectInfo {
    pub verbose: Option<bool>,
    pub pedantic: Option<bool>,
    pub echo: Option<bool>,
    pub headers: Option<bool>,
    pub no_responders: Option<bool>,
    pub tls_required: Option<bool>,
    pub protocol: Option<i64>,
    pub name: Option<String>,
    pub lang: Option<String>,
    pub version: Option<String>,
    pub user: Option<String>,
    pub pass: Option<String>,
    pub auth_token: Option<String>,
    pub nkey: Option<String>,
    pub jwt: Option<String>,
    pub sig: Option<String>,
    pub account: Option<String>,
    pub new_account: Option<bool>,
}

/// A connection's protocol options, as accumulated over its CONNECTs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientOptions {
    pub verbose: bool,
    pub pedantic: bool,
    pub echo: bool,
    pub headers: bool,
    pub no_responders: bool,
    pub protocol: i64,
    pub name: String,
    pub lang: String,
    pub version: String,
}

impl Default for ClientOptions {
    /// nats-server starts every client verbose, pedantic and with echo on,
    /// so a client that never sends CONNECT (telnet) gets `+OK`s.
    fn default() -> Self {
        ClientOptions {
            verbose: true,
            pedantic: true,
            echo: true,
            headers: false,
            no_responders: false,
            protocol: 0,
            name: String::new(),
            lang: String::new(),
            version: String::new(),
        }
    }
}

impl ConnectInfo {
    /// Overlays the fields present in this CONNECT onto `opts`.
    pub fn apply(&self, opts: &mut ClientOptions) {
        macro_rules! take {
            ($($f:ident),*) => { $( if let Some(v) = &self.$f { opts.$f = v.clone(); } )* };
        }
        take!(
            verbose,
            pedantic,
            echo,
            headers,
            no_responders,
            protocol,
            name,
            lang,
            version
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_overlays_only_present_fields() {
        let mut o = ClientOptions::default();
        let c: ConnectInfo =
            serde_json::from_str(r#"{"verbose":false,"name":"x","unknown":1}"#).unwrap();
        c.apply(&mut o);
        assert!(!o.verbose && o.pedantic && o.echo);
        assert_eq!(o.name, "x");
    }

    #[test]
    fn info_omits_empty_fields() {
        let i = ServerInfo {
            server_id: "N".into(),
            max_payload: 5,
            ..Default::default()
        };
        let s = serde_json::to_string(&i).unwrap();
        assert_eq!(
            s,
            r#"{"server_id":"N","server_name":"","version":"","proto":0,"go":"","host":"","port":0,"headers":false,"max_payload":5}"#
        );
    }
}
