//! Request bodies read the way nats-server reads them with Go's
//! `encoding/json`, so that every client sees the same acceptance rules
//! and the same error texts:
//!
//! - API requests go through a `json.Decoder` loop with unknown fields
//!   refused ([`Mode::Request`]): an empty or all-blank body is the zero
//!   request, `null` changes nothing, several values in a row are all
//!   applied, a syntax error names its byte offset, and input that ends
//!   early is `unexpected EOF`.
//! - Pull requests use plain `json.Unmarshal` ([`Mode::Unmarshal`]):
//!   unknown fields are ignored and a truncated body is
//!   `unexpected end of JSON input`.
//!
//! Go matches keys to fields case-insensitively, leaves a field alone on
//! `null` (unless its type reads `null` itself, as nats-server's policy
//! enums do, and refuses it), and reports the first type mismatch after
//! reading the whole value. Each request type describes its Go shape with
//! a [`Schema`]; once a body passes it, serde builds the Rust value.

use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

/// JSON as Go's `encoding/json` writes it: `<`, `>`, `&`, U+2028 and
/// U+2029 inside strings are escaped as `\u003c` and so on, so responses
/// are byte-for-byte what nats-server sends.
pub fn to_vec<T: serde::Serialize + ?Sized>(value: &T) -> Vec<u8> {
    let mut out = Vec::with_capacity(128);
    let mut ser = serde_json::Serializer::with_formatter(&mut out, GoFormatter);
    value
        .serialize(&mut ser)
        .expect("API values serialize: string keys, no non-finite floats");
    out
}

struct GoFormatter;

impl serde_json::ser::Formatter for GoFormatter {
    fn write_string_fragment<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        fragment: &str,
    ) -> std::io::Result<()> {
        let mut start = 0;
        for (i, ch) in fragment.char_indices() {
            let esc = match ch {
                '<' => "\\u003c",
                '>' => "\\u003e",
                '&' => "\\u0026",
                '\u{2028}' => "\\u2028",
                '\u{2029}' => "\\u2029",
                _ => continue,
            };
            w.write_all(&fragment.as_bytes()[start..i])?;
            w.write_all(esc.as_bytes())?;
            start = i + ch.len_utf8();
        }
        w.write_all(&fragment.as_bytes()[start..])
    }
}

/// How nats-server reads a given body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `json.Decoder` with `DisallowUnknownFields`, looped until EOF.
    Request,
    /// `json.Unmarshal`, unknown fields ignored.
    Unmarshal,
}

/// A Go struct: its name as errors print it and its JSON fields (embedded
/// structs flattened, as Go promotes their fields).
#[derive(Debug)]
pub struct Schema {
    /// Package-qualified type name, e.g. `server.JSApiMsgGetRequest`;
    /// empty for an anonymous struct.
    pub go_name: &'static str,
    pub fields: &'static [(&'static str, Ty)],
}

/// The Go type of a field, as far as decoding can tell them apart.
#[derive(Debug)]
pub enum Ty {
    Str,
    Bool,
    /// A signed integer; the name is how Go prints the type (`int`,
    /// `int64`, `int32`, `time.Duration`).
    Int(&'static str),
    /// An unsigned integer (`uint64`).
    Uint(&'static str),
    /// `time.Time`, decoded by its own `UnmarshalJSON`.
    Time,
    /// A policy enum with nats-server's `UnmarshalJSON`: accepted raw
    /// JSON texts (compared after ASCII lowercasing when `fold`), and the
    /// error it returns otherwise.
    Enum {
        accepts: &'static [&'static str],
        fold: bool,
        error: EnumError,
    },
    /// `StoreCompression`, which first unmarshals into a Go string.
    Compression,
    List(&'static Ty),
    /// `map[string]string`.
    StrMap,
    Struct(&'static Schema),
}

/// The text a policy enum's `UnmarshalJSON` fails with.
#[derive(Debug, Clone, Copy)]
pub enum EnumError {
    /// `can not unmarshal %q` of the raw JSON.
    CanNot,
    /// `<prefix>: <raw JSON>`.
    Prefixed(&'static str),
}

/// Decodes `body` as nats-server would into the struct `schema` describes.
pub fn decode<T: DeserializeOwned>(body: &[u8], schema: &Schema, mode: Mode) -> Result<T, String> {
    let value = read(body, schema, mode)?;
    serde_json::from_value(value).map_err(|e| e.to_string())
}

/// As [`decode`], returning the checked JSON object with keys renamed to
/// the schema's spelling and `null` fields dropped.
pub fn read(body: &[u8], schema: &Schema, mode: Mode) -> Result<Value, String> {
    let mut merged = Map::new();
    match mode {
        Mode::Unmarshal => {
            let mut p = Parser::new(body);
            let node = p.value(0).map_err(|e| e.unmarshal_text())?;
            p.skip_ws();
            if let Some(&c) = p.buf.get(p.pos) {
                p.pos += 1;
                return Err(Syntax::Char(c, "after top-level value", p.pos).unmarshal_text());
            }
            apply(&node, schema, &mut merged, false)?;
        }
        Mode::Request => {
            let mut p = Parser::new(body);
            loop {
                p.skip_ws();
                if p.pos >= p.buf.len() {
                    break;
                }
                let node = p.value(0).map_err(|e| e.decoder_text())?;
                apply(&node, schema, &mut merged, true)?;
            }
        }
    }
    Ok(Value::Object(merged))
}

/// A syntax problem, as Go's scanner words it.
enum Syntax {
    /// Input ended inside a value.
    Eof,
    /// A byte that cannot come here, the context, and the 1-based offset.
    Char(u8, &'static str, usize),
    Depth(usize),
}

impl Syntax {
    fn message(&self) -> String {
        match self {
            Syntax::Eof => unreachable!("EOF has mode-specific text"),
            Syntax::Char(c, ctx, _) => format!("invalid character {} {ctx}", quote_char(*c)),
            Syntax::Depth(_) => "exceeded max depth".to_string(),
        }
    }

    fn offset(&self) -> usize {
        match self {
            Syntax::Char(_, _, o) | Syntax::Depth(o) => *o,
            Syntax::Eof => 0,
        }
    }

    fn unmarshal_text(&self) -> String {
        match self {
            Syntax::Eof => "unexpected end of JSON input".to_string(),
            _ => self.message(),
        }
    }

    /// nats-server adds the offset to the decoder's syntax errors.
    fn decoder_text(&self) -> String {
        match self {
            Syntax::Eof => "unexpected EOF".to_string(),
            _ => format!("{} at offset {}", self.message(), self.offset()),
        }
    }
}

/// Go's `quoteChar`.
fn quote_char(c: u8) -> String {
    match c {
        b'\'' => "'\\''".to_string(),
        b'"' => "'\"'".to_string(),
        _ => {
            let ch = char::from(c);
            let q = if ch.is_control() || (0x7f..0xa0).contains(&c) {
                if c < 0x80 {
                    match c {
                        b'\t' => "\\t".to_string(),
                        b'\n' => "\\n".to_string(),
                        b'\r' => "\\r".to_string(),
                        0x07 => "\\a".to_string(),
                        0x08 => "\\b".to_string(),
                        0x0c => "\\f".to_string(),
                        0x0b => "\\v".to_string(),
                        _ => format!("\\x{c:02x}"),
                    }
                } else {
                    format!("\\u{:04x}", c)
                }
            } else {
                ch.to_string()
            };
            format!("'{q}'")
        }
    }
}

/// Nesting past this is refused. Go allows 10000; the parser here
/// recurses, so it stops far earlier to keep its stack small. No API
/// request nests deeper than four.
const MAX_DEPTH: usize = 256;

/// A parsed JSON value with the raw text custom unmarshalers see.
struct Node<'a> {
    raw: &'a [u8],
    v: Val<'a>,
}

enum Val<'a> {
    Null,
    Bool,
    Num,
    Str,
    Arr(Vec<Node<'a>>),
    Obj(Vec<(String, Node<'a>)>),
}

impl Node<'_> {
    /// The word Go's type errors use for this kind of value.
    fn kind(&self) -> &'static str {
        match self.v {
            Val::Null => "null",
            Val::Bool => "bool",
            Val::Num => "number",
            Val::Str => "string",
            Val::Arr(_) => "array",
            Val::Obj(_) => "object",
        }
    }

    fn text(&self) -> &str {
        std::str::from_utf8(self.raw).unwrap_or("")
    }
}

struct Parser<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Parser<'a> {
    fn new(buf: &'a [u8]) -> Self {
        Parser { buf, pos: 0 }
    }

    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.buf.get(self.pos) {
            self.pos += 1;
        }
    }

    /// The next byte, consumed; its 1-based offset is then `self.pos`.
    fn next(&mut self) -> Result<u8, Syntax> {
        let c = *self.buf.get(self.pos).ok_or(Syntax::Eof)?;
        self.pos += 1;
        Ok(c)
    }

    fn peek(&self) -> Option<u8> {
        self.buf.get(self.pos).copied()
    }

    fn bad(&self, c: u8, ctx: &'static str) -> Syntax {
        Syntax::Char(c, ctx, self.pos)
    }

    fn value(&mut self, depth: usize) -> Result<Node<'a>, Syntax> {
        self.skip_ws();
        let start = self.pos;
        let c = self.next()?;
        let v = match c {
            b'{' | b'[' if depth + 1 > MAX_DEPTH => return Err(Syntax::Depth(self.pos)),
            b'{' => self.object(depth + 1)?,
            b'[' => self.array(depth + 1)?,
            b'"' => {
                self.string_rest()?;
                Val::Str
            }
            b'-' | b'0'..=b'9' => {
                self.number_rest(c)?;
                Val::Num
            }
            b't' => {
                self.literal(b"rue", "in literal true (expecting ")?;
                Val::Bool
            }
            b'f' => {
                self.literal(b"alse", "in literal false (expecting ")?;
                Val::Bool
            }
            b'n' => {
                self.literal(b"ull", "in literal null (expecting ")?;
                Val::Null
            }
            _ => return Err(self.bad(c, "looking for beginning of value")),
        };
        Ok(Node {
            raw: &self.buf[start..self.pos],
            v,
        })
    }

    fn literal(&mut self, rest: &[u8], ctx: &'static str) -> Result<(), Syntax> {
        for &want in rest {
            let c = self.next()?;
            if c != want {
                // Go's context names the byte it expected.
                let ctx: &'static str = match (ctx.as_bytes()[11], want) {
                    (b't', b'r') => "in literal true (expecting 'r')",
                    (b't', b'u') => "in literal true (expecting 'u')",
                    (b't', _) => "in literal true (expecting 'e')",
                    (b'f', b'a') => "in literal false (expecting 'a')",
                    (b'f', b'l') => "in literal false (expecting 'l')",
                    (b'f', b's') => "in literal false (expecting 's')",
                    (b'f', _) => "in literal false (expecting 'e')",
                    (_, b'u') => "in literal null (expecting 'u')",
                    (_, _) => "in literal null (expecting 'l')",
                };
                return Err(self.bad(c, ctx));
            }
        }
        Ok(())
    }

    fn string_rest(&mut self) -> Result<(), Syntax> {
        loop {
            match self.next()? {
                b'"' => return Ok(()),
                b'\\' => match self.next()? {
                    b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => {}
                    b'u' => {
                        for _ in 0..4 {
                            let h = self.next()?;
                            if !h.is_ascii_hexdigit() {
                                return Err(self.bad(h, "in \\u hexadecimal character escape"));
                            }
                        }
                    }
                    c => return Err(self.bad(c, "in string escape code")),
                },
                c if c < 0x20 => return Err(self.bad(c, "in string literal")),
                _ => {}
            }
        }
    }

    /// A number's remaining bytes; it ends at the first byte that cannot
    /// continue it, which is left for the enclosing value.
    fn number_rest(&mut self, first: u8) -> Result<(), Syntax> {
        let mut c = first;
        if c == b'-' {
            c = self.next()?;
            if !c.is_ascii_digit() {
                return Err(self.bad(c, "in numeric literal"));
            }
        }
        if c != b'0' {
            while self.peek().is_some_and(|d| d.is_ascii_digit()) {
                self.pos += 1;
            }
        }
        if self.peek() == Some(b'.') {
            self.pos += 1;
            let d = self.next()?;
            if !d.is_ascii_digit() {
                return Err(self.bad(d, "after decimal point in numeric literal"));
            }
            while self.peek().is_some_and(|d| d.is_ascii_digit()) {
                self.pos += 1;
            }
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.pos += 1;
            let mut d = self.next()?;
            if d == b'+' || d == b'-' {
                d = self.next()?;
            }
            if !d.is_ascii_digit() {
                return Err(self.bad(d, "in exponent of numeric literal"));
            }
            while self.peek().is_some_and(|d| d.is_ascii_digit()) {
                self.pos += 1;
            }
        }
        Ok(())
    }

    fn array(&mut self, depth: usize) -> Result<Val<'a>, Syntax> {
        let mut items = Vec::new();
        self.skip_ws();
        if self.peek() == Some(b']') {
            self.pos += 1;
            return Ok(Val::Arr(items));
        }
        loop {
            items.push(self.value(depth)?);
            self.skip_ws();
            match self.next()? {
                b',' => {}
                b']' => return Ok(Val::Arr(items)),
                c => return Err(self.bad(c, "after array element")),
            }
        }
    }

    fn object(&mut self, depth: usize) -> Result<Val<'a>, Syntax> {
        let mut fields = Vec::new();
        self.skip_ws();
        if self.peek() == Some(b'}') {
            self.pos += 1;
            return Ok(Val::Obj(fields));
        }
        loop {
            self.skip_ws();
            let start = self.pos;
            let c = self.next()?;
            if c != b'"' {
                return Err(self.bad(c, "looking for beginning of object key string"));
            }
            self.string_rest()?;
            let key = decode_string(&self.buf[start..self.pos]);
            self.skip_ws();
            let c = self.next()?;
            if c != b':' {
                return Err(self.bad(c, "after object key"));
            }
            let v = self.value(depth)?;
            fields.push((key, v));
            self.skip_ws();
            match self.next()? {
                b',' => {}
                b'}' => return Ok(Val::Obj(fields)),
                c => return Err(self.bad(c, "after object key:value pair")),
            }
        }
    }
}

/// A scanned string literal's text; invalid UTF-8 and lone surrogates
/// become U+FFFD, as in Go.
fn decode_string(raw: &[u8]) -> String {
    let text = String::from_utf8_lossy(raw);
    serde_json::from_str::<String>(&text).unwrap_or_else(|_| {
        // Lone surrogate escapes: serde refuses them, Go replaces them.
        text.trim_matches('"').to_string()
    })
}

/// Checks one decoded top-level value against the schema and merges its
/// fields into `out`.
fn apply(
    node: &Node,
    schema: &Schema,
    out: &mut Map<String, Value>,
    strict: bool,
) -> Result<(), String> {
    let mut ctx = Ctx {
        root: schema.go_name.rsplit('.').next().unwrap_or(""),
        path: Vec::new(),
        saved: None,
        strict,
    };
    match &node.v {
        Val::Null => Ok(()),
        Val::Obj(fields) => {
            ctx.object(fields, schema, out)?;
            match ctx.saved {
                Some(e) => Err(e),
                None => Ok(()),
            }
        }
        _ => Err(format!(
            "json: cannot unmarshal {} into Go value of type {}",
            node.kind(),
            schema.go_name
        )),
    }
}

struct Ctx<'s> {
    root: &'s str,
    path: Vec<String>,
    /// Go keeps the first type mismatch and goes on decoding.
    saved: Option<String>,
    strict: bool,
}

impl Ctx<'_> {
    fn save(&mut self, e: String) {
        if self.saved.is_none() {
            self.saved = Some(e);
        }
    }

    fn mismatch(&mut self, value: String, ty: &str) {
        let e = format!(
            "json: cannot unmarshal {value} into Go struct field {}.{} of type {ty}",
            self.root,
            self.path.join(".")
        );
        self.save(e);
    }

    /// Errors returned (not saved) stop decoding at once, as errors from
    /// a type's own `UnmarshalJSON` do in Go.
    fn object(
        &mut self,
        fields: &[(String, Node)],
        schema: &Schema,
        out: &mut Map<String, Value>,
    ) -> Result<(), String> {
        for (key, node) in fields {
            let found = schema.fields.iter().find(|(n, _)| n == key).or_else(|| {
                schema
                    .fields
                    .iter()
                    .find(|(n, _)| n.eq_ignore_ascii_case(key))
            });
            let Some((name, ty)) = found else {
                if self.strict {
                    self.save(format!("json: unknown field {}", go_quote(key)));
                }
                continue;
            };
            self.path.push((*name).to_string());
            let v = self.value(node, ty)?;
            self.path.pop();
            match v {
                Some(v) => {
                    out.insert((*name).to_string(), v);
                }
                None => {
                    // null leaves the field alone, but a later value may
                    // have set it in an earlier document of the stream.
                }
            }
        }
        Ok(())
    }

    /// The checked value for a field, or None when Go would leave it as
    /// it is.
    fn value(&mut self, node: &Node, ty: &Ty) -> Result<Option<Value>, String> {
        if let Ty::Enum {
            accepts,
            fold,
            error,
        } = ty
        {
            // These read null themselves, and refuse it.
            let raw = node.text();
            let cmp = if *fold {
                raw.to_ascii_lowercase()
            } else {
                raw.to_string()
            };
            if !accepts.contains(&cmp.as_str()) {
                return Err(match error {
                    EnumError::CanNot => format!("can not unmarshal {}", go_quote(raw)),
                    EnumError::Prefixed(p) => format!("{p}: {raw}"),
                });
            }
            return Ok(Some(Value::String(
                serde_json::from_str::<String>(&cmp).unwrap_or_default(),
            )));
        }
        if matches!(node.v, Val::Null) {
            return Ok(None);
        }
        match ty {
            Ty::Enum { .. } => unreachable!("handled above"),
            Ty::Str => match node.v {
                Val::Str => Ok(Some(Value::String(decode_string(node.raw)))),
                _ => {
                    self.mismatch(node.kind().to_string(), "string");
                    Ok(None)
                }
            },
            Ty::Bool => match node.v {
                Val::Bool => Ok(Some(Value::Bool(node.raw == b"true"))),
                _ => {
                    self.mismatch(node.kind().to_string(), "bool");
                    Ok(None)
                }
            },
            Ty::Int(go) => match node.v {
                Val::Num => match node.text().parse::<i64>() {
                    Ok(n) if *go != "int32" || i32::try_from(n).is_ok() => Ok(Some(n.into())),
                    _ => {
                        self.mismatch(format!("number {}", node.text()), go);
                        Ok(None)
                    }
                },
                _ => {
                    self.mismatch(node.kind().to_string(), go);
                    Ok(None)
                }
            },
            Ty::Uint(go) => match node.v {
                Val::Num => match node.text().parse::<u64>() {
                    Ok(n) => Ok(Some(n.into())),
                    Err(_) => {
                        self.mismatch(format!("number {}", node.text()), go);
                        Ok(None)
                    }
                },
                _ => {
                    self.mismatch(node.kind().to_string(), go);
                    Ok(None)
                }
            },
            Ty::Time => {
                let raw = node.text();
                if !matches!(node.v, Val::Str) {
                    return Err("Time.UnmarshalJSON: input is not a JSON string".to_string());
                }
                let inner = &raw[1..raw.len() - 1];
                if super::time::parse(inner).is_none() && !is_go_zero_time(inner) {
                    return Err(rfc3339_error(inner));
                }
                Ok(Some(Value::String(inner.to_string())))
            }
            Ty::Compression => match node.v {
                Val::Str => {
                    let s = decode_string(node.raw);
                    if s == "s2" || s == "none" {
                        Ok(Some(Value::String(s)))
                    } else {
                        Err("unknown compression algorithm".to_string())
                    }
                }
                _ => Err(format!(
                    "json: cannot unmarshal {} into Go value of type string",
                    node.kind()
                )),
            },
            Ty::List(elem) => match &node.v {
                Val::Arr(items) => {
                    let mut out = Vec::with_capacity(items.len());
                    for item in items {
                        if let Some(v) = self.value(item, elem)? {
                            out.push(v);
                        } else if !matches!(item.v, Val::Null) {
                            // A mismatched element is saved; keep the
                            // slot so indexes stay where they were.
                            out.push(Value::Null);
                        } else {
                            out.push(zero_of(elem));
                        }
                    }
                    Ok(Some(Value::Array(out)))
                }
                _ => {
                    self.mismatch(node.kind().to_string(), &go_type_name(ty));
                    Ok(None)
                }
            },
            Ty::StrMap => match &node.v {
                Val::Obj(fields) => {
                    let mut m = Map::new();
                    for (k, v) in fields {
                        match v.v {
                            Val::Str => {
                                m.insert(k.clone(), Value::String(decode_string(v.raw)));
                            }
                            Val::Null => {
                                m.insert(k.clone(), Value::String(String::new()));
                            }
                            _ => {
                                self.path.push(k.clone());
                                self.mismatch(v.kind().to_string(), "string");
                                self.path.pop();
                            }
                        }
                    }
                    Ok(Some(Value::Object(m)))
                }
                _ => {
                    self.mismatch(node.kind().to_string(), "map[string]string");
                    Ok(None)
                }
            },
            Ty::Struct(schema) => match &node.v {
                Val::Obj(fields) => {
                    let mut m = Map::new();
                    self.object(fields, schema, &mut m)?;
                    Ok(Some(Value::Object(m)))
                }
                _ => {
                    self.mismatch(node.kind().to_string(), schema.go_name);
                    Ok(None)
                }
            },
        }
    }
}

/// The zero value Go stores for a `null` list element.
fn zero_of(ty: &Ty) -> Value {
    match ty {
        Ty::Str | Ty::Compression | Ty::Enum { .. } => Value::String(String::new()),
        Ty::Bool => Value::Bool(false),
        Ty::Int(_) | Ty::Uint(_) => Value::from(0),
        Ty::Time => Value::String(super::time::ZERO.to_string()),
        Ty::List(_) => Value::Array(Vec::new()),
        Ty::StrMap | Ty::Struct(_) => Value::Object(Map::new()),
    }
}

fn go_type_name(ty: &Ty) -> String {
    match ty {
        Ty::Str => "string".into(),
        Ty::Bool => "bool".into(),
        Ty::Int(n) | Ty::Uint(n) => (*n).into(),
        Ty::Time => "time.Time".into(),
        Ty::Enum { .. } | Ty::Compression => "int".into(),
        Ty::List(e) => format!("[]{}", go_type_name(e)),
        Ty::StrMap => "map[string]string".into(),
        Ty::Struct(s) => s.go_name.into(),
    }
}

/// Go's `%q` of a string.
fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for ch in s.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn is_go_zero_time(s: &str) -> bool {
    s == super::time::ZERO
}

/// Go's `time.Parse(time.RFC3339, s)` error for text it cannot read: the
/// first layout element the text stops matching.
fn rfc3339_error(s: &str) -> String {
    const LAYOUT: &str = "2006-01-02T15:04:05Z07:00";
    let prefix = format!("parsing time {} as {}", go_quote(s), go_quote(LAYOUT));
    // (layout element, digits it takes, or the literal it needs)
    let elems: [(&str, Option<usize>); 11] = [
        ("2006", Some(4)),
        ("-", None),
        ("01", Some(2)),
        ("-", None),
        ("02", Some(2)),
        ("T", None),
        ("15", Some(2)),
        (":", None),
        ("04", Some(2)),
        (":", None),
        ("05", Some(2)),
    ];
    let b = s.as_bytes();
    let mut i = 0;
    for (elem, digits) in elems {
        let rest = &s[i.min(s.len())..];
        let ok = match digits {
            Some(n) => b.len() >= i + n && b[i..i + n].iter().all(u8::is_ascii_digit),
            None => rest.starts_with(elem),
        };
        if !ok {
            return format!(
                "{prefix}: cannot parse {} as {}",
                go_quote(rest),
                go_quote(elem)
            );
        }
        i += digits.unwrap_or(elem.len());
    }
    // Fractional seconds, then the zone.
    if b.get(i) == Some(&b'.') {
        i += 1;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
    }
    let rest = &s[i.min(s.len())..];
    if !(rest == "Z" || rest.len() == 6 && (rest.starts_with('+') || rest.starts_with('-'))) {
        return format!(
            "{prefix}: cannot parse {} as {}",
            go_quote(rest),
            go_quote("Z07:00")
        );
    }
    format!("{prefix}: value out of range")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    static INNER: Schema = Schema {
        go_name: "server.Inner",
        fields: &[("name", Ty::Str)],
    };
    static S: Schema = Schema {
        go_name: "server.Req",
        fields: &[
            ("name", Ty::Str),
            ("seq", Ty::Uint("uint64")),
            ("batch", Ty::Int("int")),
            ("subjects", Ty::List(&Ty::Str)),
            ("inner", Ty::Struct(&INNER)),
            ("when", Ty::Time),
            (
                "retention",
                Ty::Enum {
                    accepts: &["\"limits\"", "\"interest\""],
                    fold: false,
                    error: EnumError::CanNot,
                },
            ),
        ],
    };

    #[derive(Deserialize, Default, Debug)]
    #[serde(default)]
    struct Req {
        name: String,
        seq: u64,
        batch: i64,
    }

    fn req(body: &str) -> Result<Req, String> {
        decode(body.as_bytes(), &S, Mode::Request)
    }

    fn unm(body: &str) -> Result<Req, String> {
        decode(body.as_bytes(), &S, Mode::Unmarshal)
    }

    #[test]
    fn go_decoder_texts() {
        assert_eq!(req("").unwrap().name, "");
        assert_eq!(req("  \n").unwrap().name, "");
        assert_eq!(req("null").unwrap().name, "");
        assert_eq!(req(r#"{"name":"a"} {"seq":2}"#).unwrap().seq, 2);
        assert_eq!(req(r#"{"NAME":"a"}"#).unwrap().name, "a");
        assert_eq!(req(r#"{"name":"A","#).unwrap_err(), "unexpected EOF");
        assert_eq!(
            req(r#"{"name":"A"} x"#).unwrap_err(),
            "invalid character 'x' looking for beginning of value at offset 14"
        );
        assert_eq!(
            req("xyz").unwrap_err(),
            "invalid character 'x' looking for beginning of value at offset 1"
        );
        assert_eq!(
            req("[]").unwrap_err(),
            "json: cannot unmarshal array into Go value of type server.Req"
        );
        assert_eq!(
            req(r#"{"name":1}"#).unwrap_err(),
            "json: cannot unmarshal number into Go struct field Req.name of type string"
        );
        assert_eq!(
            req(r#"{"seq":-1}"#).unwrap_err(),
            "json: cannot unmarshal number -1 into Go struct field Req.seq of type uint64"
        );
        assert_eq!(
            req(r#"{"inner":{"name":true}}"#).unwrap_err(),
            "json: cannot unmarshal bool into Go struct field Req.inner.name of type string"
        );
        assert_eq!(
            req(r#"{"bogus":1}"#).unwrap_err(),
            "json: unknown field \"bogus\""
        );
        assert_eq!(
            req(r#"{"retention":"foo"}"#).unwrap_err(),
            r#"can not unmarshal "\"foo\"""#
        );
        assert_eq!(
            req(r#"{"retention":null}"#).unwrap_err(),
            r#"can not unmarshal "null""#
        );
        assert_eq!(
            req(r#"{"when":"garbage"}"#).unwrap_err(),
            r#"parsing time "garbage" as "2006-01-02T15:04:05Z07:00": cannot parse "garbage" as "2006""#
        );
        assert_eq!(
            req(r#"{"name":"a" "x"}"#).unwrap_err(),
            "invalid character '\"' after object key:value pair at offset 13"
        );
        assert_eq!(
            req(r#"{"a" 1}"#).unwrap_err(),
            "invalid character '1' after object key at offset 6"
        );
        assert_eq!(
            req("[1 2]").unwrap_err(),
            "invalid character '2' after array element at offset 4"
        );
        assert_eq!(
            req("tru ").unwrap_err(),
            "invalid character ' ' in literal true (expecting 'e') at offset 4"
        );
        assert_eq!(
            req("-x").unwrap_err(),
            "invalid character 'x' in numeric literal at offset 2"
        );
        assert_eq!(
            req(r#"{"batch":"x","name":1}"#).unwrap_err(),
            "json: cannot unmarshal string into Go struct field Req.batch of type int"
        );
    }

    #[test]
    fn written_as_go_writes() {
        let v = serde_json::json!({"s": "a&b.<x>\u{2028}é"});
        assert_eq!(
            String::from_utf8(to_vec(&v)).unwrap(),
            r#"{"s":"a\u0026b.\u003cx\u003e\u2028é"}"#
        );
    }

    #[test]
    fn go_unmarshal_texts() {
        assert_eq!(unm("").unwrap_err(), "unexpected end of JSON input");
        assert_eq!(
            unm(r#"{"batch":"#).unwrap_err(),
            "unexpected end of JSON input"
        );
        assert_eq!(
            unm(r#"{"batch":1} x"#).unwrap_err(),
            "invalid character 'x' after top-level value"
        );
        assert_eq!(unm(r#"{"batch":1,"bogus":true}"#).unwrap().batch, 1);
    }

    #[test]
    fn deep_nesting_is_refused() {
        let body = "[".repeat(MAX_DEPTH + 1);
        assert!(req(&body).unwrap_err().starts_with("exceeded max depth"));
    }
}
