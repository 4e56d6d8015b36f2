//! Query-string decoding with nats-server's rules and error texts.

use std::collections::HashMap;

/// A bad parameter; sent as a 400 with this text.
#[derive(Debug)]
pub struct QueryError(pub String);

pub struct Query(HashMap<String, String>);

impl Query {
    pub fn parse(raw: Option<&str>) -> Self {
        let mut map = HashMap::new();
        for (k, v) in form_urlencoded::parse(raw.unwrap_or("").as_bytes()) {
            // The first value wins, as with Go's `Query().Get`.
            map.entry(k.into_owned()).or_insert_with(|| v.into_owned());
        }
        Query(map)
    }

    /// A query of `(name, value)` pairs, as if they came in a URL (the
    /// system account's requests carry their options as JSON).
    pub fn from_pairs(pairs: impl IntoIterator<Item = (String, String)>) -> Self {
        Query(pairs.into_iter().collect())
    }

    pub fn get(&self, name: &str) -> &str {
        self.0.get(name).map(String::as_str).unwrap_or("")
    }

    /// Go's `strconv.ParseBool`; absent is false.
    pub fn bool(&self, name: &str) -> Result<bool, QueryError> {
        match self.get(name) {
            "" => Ok(false),
            "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok(true),
            "0" | "f" | "F" | "FALSE" | "false" | "False" => Ok(false),
            v => Err(QueryError(format!(
                "Error decoding boolean for '{name}': strconv.ParseBool: parsing \"{v}\": invalid syntax"
            ))),
        }
    }

    pub fn int(&self, name: &str) -> Result<i64, QueryError> {
        match self.get(name) {
            "" => Ok(0),
            v => v.parse().map_err(|_| {
                QueryError(format!(
                    "Error decoding int for '{name}': strconv.Atoi: parsing \"{v}\": invalid syntax"
                ))
            }),
        }
    }

    pub fn uint(&self, name: &str) -> Result<u64, QueryError> {
        match self.get(name) {
            "" => Ok(0),
            v => v.parse().map_err(|_| {
                QueryError(format!(
                    "Error decoding uint64 for '{name}': strconv.ParseUint: parsing \"{v}\": invalid syntax"
                ))
            }),
        }
    }

    /// `subs`: `detail` asks for details, otherwise a boolean.
    /// Returns (list, detail).
    pub fn subs(&self) -> Result<(bool, bool), QueryError> {
        if self.get("subs").eq_ignore_ascii_case("detail") {
            return Ok((false, true));
        }
        Ok((self.bool("subs")?, false))
    }
}
