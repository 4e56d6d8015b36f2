//! The error texts of Go's `encoding/json`, for request bodies nats-server
//! decodes with it: syntax errors (found before anything is decoded) and
//! type mismatches naming the field's path and Go type. A body is read as
//! a `serde_json::Value` first, then checked against a table of the Go
//! struct's fields, then decoded for real.

use serde_json::Value;

/// A field's Go type, as far as the checks need it.
#[derive(Debug, Clone, Copy)]
pub enum Ty {
    Str,
    Bool,
    /// A signed integer type (`int`, `int64`, `time.Duration`).
    Int(&'static str),
    /// An unsigned integer type (`uint64`).
    Uint(&'static str),
    /// A slice of strings.
    Strs,
    /// A slice of signed integers of the named element type.
    Ints(&'static str),
    /// `map[string]string`.
    StrMap,
    /// A nested struct: its Go type and fields.
    Struct(&'static str, &'static [(&'static str, Ty)]),
    /// A type with its own decoding (enums, times): not checked here.
    Custom,
}

/// Reads `body` as JSON, as Go would before decoding: a syntax error gets
/// Go's text.
pub fn parse_value(body: &[u8]) -> Result<Value, String> {
    serde_json::from_slice(body).map_err(|e| syntax_error(&e, body))
}

/// Go's text for a JSON syntax error.
pub fn syntax_error(e: &serde_json::Error, body: &[u8]) -> String {
    if e.classify() == serde_json::error::Category::Eof {
        return "unexpected end of JSON input".into();
    }
    let msg = strip_position(e);
    let context = match msg.as_str() {
        "expected value" => "looking for beginning of value",
        "trailing characters" => "after top-level value",
        "expected `:`" => "after object key",
        "expected `,` or `}`" => "after object key:value pair",
        "expected `,` or `]`" => "after array element",
        "key must be a string" => "looking for beginning of object key string",
        _ => return msg,
    };
    match char_at(body, e.line(), e.column()) {
        Some(c) => format!("invalid character {} {context}", quote_char(c)),
        None => msg,
    }
}

/// serde_json's message without its " at line L column C".
pub fn strip_position(e: &serde_json::Error) -> String {
    let s = e.to_string();
    let suffix = format!(" at line {} column {}", e.line(), e.column());
    s.strip_suffix(&suffix).map(str::to_string).unwrap_or(s)
}

/// The character at a 1-based line and column (serde_json's position).
fn char_at(body: &[u8], line: usize, column: usize) -> Option<char> {
    let text = std::str::from_utf8(body).ok()?;
    let l = text.split('\n').nth(line.checked_sub(1)?)?;
    l.get(column.checked_sub(1)?..)?.chars().next()
}

fn quote_char(c: char) -> String {
    match c {
        '\'' => r"'\''".into(),
        '"' => "'\"'".into(),
        c => format!("'{c}'"),
    }
}

/// The first field of `v` whose JSON type cannot go into its Go type,
/// described as Go does: `json: cannot unmarshal string into Go struct
/// field Root.a.b of type int`. `root` is the Go struct's name (empty
/// when Go decodes through a pointer to a pointer).
pub fn type_error(v: &Value, root: &str, fields: &[(&str, Ty)]) -> Option<String> {
    let (value, path, ty) = check_struct(v, "", fields)?;
    Some(format!(
        "json: cannot unmarshal {value} into Go struct field {root}.{path} of type {ty}"
    ))
}

fn check_struct(
    v: &Value,
    prefix: &str,
    fields: &[(&str, Ty)],
) -> Option<(String, String, String)> {
    let obj = v.as_object()?;
    for (key, value) in obj {
        // Go matches field names case-insensitively.
        let Some((name, ty)) = fields.iter().find(|(n, _)| n.eq_ignore_ascii_case(key)) else {
            continue;
        };
        let path = if prefix.is_empty() {
            name.to_string()
        } else {
            format!("{prefix}.{name}")
        };
        if let Some((kind, ty)) = check(value, *ty, &path) {
            return Some(match ty {
                Mismatch::Here(t) => (kind, path, t),
                Mismatch::Nested(p, t) => (kind, p, t),
            });
        }
    }
    None
}

enum Mismatch {
    Here(String),
    Nested(String, String),
}

fn kind(v: &Value) -> String {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
    .into()
}

fn check(v: &Value, ty: Ty, path: &str) -> Option<(String, Mismatch)> {
    let here = |t: &str| Some((kind(v), Mismatch::Here(t.to_string())));
    if v.is_null() {
        return None;
    }
    match ty {
        Ty::Custom => None,
        Ty::Str => (!v.is_string()).then(|| here("string")).flatten(),
        Ty::Bool => (!v.is_boolean()).then(|| here("bool")).flatten(),
        Ty::Int(t) => int(v, t, false),
        Ty::Uint(t) => int(v, t, true),
        Ty::Strs => match v.as_array() {
            None => here("[]string"),
            Some(a) => a.iter().find_map(|e| check(e, Ty::Str, path)),
        },
        Ty::Ints(t) => match v.as_array() {
            None => here(&format!("[]{t}")),
            Some(a) => a.iter().find_map(|e| int(e, t, false)),
        },
        Ty::StrMap => match v.as_object() {
            None => here("map[string]string"),
            Some(m) => m.values().find_map(|e| check(e, Ty::Str, path)),
        },
        Ty::Struct(t, fields) => {
            if !v.is_object() {
                return here(t);
            }
            let (k, p, t) = check_struct(v, path, fields)?;
            Some((k, Mismatch::Nested(p, t)))
        }
    }
}

fn int(v: &Value, t: &str, unsigned: bool) -> Option<(String, Mismatch)> {
    if v.is_null() {
        return None;
    }
    let Value::Number(n) = v else {
        return Some((kind(v), Mismatch::Here(t.to_string())));
    };
    let fits = if unsigned { n.is_u64() } else { n.is_i64() };
    (!fits).then(|| (format!("number {n}"), Mismatch::Here(t.to_string())))
}

#[cfg(test)]
mod tests {
    use super::*;

    const INNER: &[(&str, Ty)] = &[("ack_wait", Ty::Int("time.Duration")), ("name", Ty::Str)];
    const OUTER: &[(&str, Ty)] = &[
        ("stream_name", Ty::Str),
        ("config", Ty::Struct("server.ConsumerConfig", INNER)),
    ];

    #[test]
    fn type_errors() {
        let v: Value = serde_json::from_str(r#"{"config":{"ack_wait":"x"}}"#).unwrap();
        assert_eq!(
            type_error(&v, "CreateConsumerRequest", OUTER).unwrap(),
            "json: cannot unmarshal string into Go struct field CreateConsumerRequest.config.ack_wait of type time.Duration"
        );
        let v: Value = serde_json::from_str(r#"{"ack_wait":1.5}"#).unwrap();
        assert_eq!(
            type_error(&v, "", INNER).unwrap(),
            "json: cannot unmarshal number 1.5 into Go struct field .ack_wait of type time.Duration"
        );
        let v: Value = serde_json::from_str(r#"{"config":null,"stream_name":"S"}"#).unwrap();
        assert_eq!(type_error(&v, "X", OUTER), None);
    }

    #[test]
    fn syntax_errors() {
        let err = |b: &str| parse_value(b.as_bytes()).unwrap_err();
        assert_eq!(err(r#"{"batch":"#), "unexpected end of JSON input");
        assert_eq!(
            err(r#"{"batch":x}"#),
            "invalid character 'x' looking for beginning of value"
        );
        assert_eq!(err("{} x"), "invalid character 'x' after top-level value");
    }
}
