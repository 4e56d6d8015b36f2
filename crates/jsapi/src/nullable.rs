//! Go's JSON decoding leaves a field at its default when the value is
//! `null`; clients rely on it (async-nats sends `"consumer_limits":null`).
//! `#[serde(deserialize_with = "nullable::default")]` does the same.

use serde::{Deserialize, Deserializer};

pub fn default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}
