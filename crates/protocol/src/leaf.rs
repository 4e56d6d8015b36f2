//! The INFO and CONNECT JSON of a leaf node connection, with
//! nats-server's field names (`Info` in server.go, `leafConnectInfo` in
//! leafnode.go). The hub (the accepting side) sends INFO first; the leaf
//! answers with CONNECT; the hub then sends a second INFO with
//! `connect_info` set. The lines themselves are the leaf dialect of
//! [`crate::route`].

use serde::{Deserialize, Serialize};

/// What a hub tells a leaf node, first on the connection and again once
/// the leaf's CONNECT is taken (then with `connect_info` and
/// `remote_account`).
#[derive(Debug, Clone, Serialize, Deserialize, Default, PartialEq)]
pub struct LeafInfo {
    pub server_id: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub server_name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub version: String,
    #[serde(default)]
    pub proto: i32,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub host: String,
    #[serde(default)]
    pub port: u16,
    #[serde(default)]
    pub headers: bool,
    #[serde(default)]
    pub auth_required: bool,
    /// The leaf must shake hands (TLS) after this INFO, before CONNECT.
    #[serde(default, skip_serializing_if = "is_false")]
    pub tls_required: bool,
    #[serde(default)]
    pub max_payload: i64,
    #[serde(default, skip_serializing_if = "is_false")]
    pub info_on_connect: bool,
    #[serde(default, skip_serializing_if = "is_false")]
    pub connect_info: bool,
    /// `host:port` where the hub's cluster accepts leaf nodes; a leaf
    /// refuses a hub that sends none (it reached the wrong port).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub leafnode_urls: Vec<String>,
    #[serde(default)]
    pub client_id: u64,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub nonce: String,
    /// The hub's compression mode; flotilla's is always `off`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub compression: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub cluster: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub domain: String,
    /// The account the hub bound the connection to (second INFO).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub remote_account: String,
}

/// What a leaf node sends its hub (`leafConnectInfo`). Every field is
/// left out when empty, as nats-server does.
#[derive(Debug, Clone, Serialize, Deserialize, Default, PartialEq)]
pub struct LeafConnect {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub version: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pass: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth_token: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jwt: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nkey: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sig: Option<String>,
    #[serde(
        default,
        rename = "server_id",
        skip_serializing_if = "String::is_empty"
    )]
    pub id: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub domain: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(default, rename = "is_hub", skip_serializing_if = "is_false")]
    pub hub: bool,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub cluster: String,
    #[serde(default, skip_serializing_if = "is_false")]
    pub headers: bool,
    #[serde(default, skip_serializing_if = "is_false")]
    pub jetstream: bool,
    #[serde(
        default,
        rename = "compress_mode",
        skip_serializing_if = "String::is_empty"
    )]
    pub compression: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub remote_account: String,
    /// Subjects the leaf will not take (its `deny_imports`): the hub
    /// does not send them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deny_pub: Vec<String>,
    #[serde(default, rename = "protocol", skip_serializing_if = "is_zero")]
    pub proto: i32,
    /// Sent by a gateway or client that reached the wrong port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lang: Option<String>,
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn is_zero(n: &i32) -> bool {
    *n == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_names_fields_as_nats_server() {
        let c = LeafConnect {
            id: "S".into(),
            headers: true,
            compression: "off".into(),
            remote_account: "$G".into(),
            ..Default::default()
        };
        let json = serde_json::to_string(&c).unwrap();
        assert_eq!(
            json,
            r#"{"server_id":"S","headers":true,"compress_mode":"off","remote_account":"$G"}"#
        );
        let back: LeafConnect =
            serde_json::from_str(r#"{"name":"x","is_hub":true,"protocol":1}"#).unwrap();
        assert!(back.hub && back.proto == 1 && back.name == "x");
    }
}
