//! API errors as they go on the wire: `{"code","err_code","description"}`.

use serde::{Deserialize, Serialize};

/// One entry of the error catalogue: the HTTP-like code, nats-server's
/// error number, and the description template.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ErrorDef {
    pub code: u16,
    pub err_code: u16,
    pub description: &'static str,
}

impl ErrorDef {
    pub const fn new(code: u16, err_code: u16, description: &'static str) -> Self {
        ErrorDef {
            code,
            err_code,
            description,
        }
    }

    /// The error with its template as is (for descriptions without
    /// placeholders).
    pub fn err(self) -> ApiError {
        ApiError {
            code: self.code,
            err_code: self.err_code,
            description: self.description.to_string(),
        }
    }

    /// The error with `{key}` replaced by `value`.
    pub fn with(self, key: &str, value: impl std::fmt::Display) -> ApiError {
        ApiError {
            code: self.code,
            err_code: self.err_code,
            description: self
                .description
                .replace(&format!("{{{key}}}"), &value.to_string()),
        }
    }
}

/// An error in an API response or a PubAck.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApiError {
    pub code: u16,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub err_code: u16,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
}

fn is_zero(v: &u16) -> bool {
    *v == 0
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.description, self.err_code)
    }
}

impl std::error::Error for ApiError {}

#[cfg(test)]
mod tests {
    use crate::E;

    #[test]
    fn placeholders() {
        let e = E::STREAM_WRONG_LAST_SEQUENCE.with("seq", 7);
        assert_eq!(
            serde_json::to_string(&e).unwrap(),
            r#"{"code":400,"err_code":10071,"description":"wrong last sequence: 7"}"#
        );
        assert_eq!(E::STREAM_NOT_FOUND.err().description, "stream not found");
    }
}
