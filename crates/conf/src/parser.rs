//! A recursive-descent reader for the NATS config format. It works on
//! bytes and tracks line and column itself; strings are sliced only at
//! ASCII delimiters, so multi-byte UTF-8 passes through intact.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::{Entry, Error, Item, Map, Pos, Value};

/// Includes nested deeper than this are refused, which also stops a file
/// that includes itself.
pub const MAX_INCLUDE_DEPTH: usize = 10;

type Env<'a> = &'a dyn Fn(&str) -> Option<String>;

pub fn parse_file(path: &Path, depth: usize, env: Env<'_>) -> Result<Map, Error> {
    let name: Arc<str> = Arc::from(path.display().to_string());
    let text = std::fs::read(path).map_err(|e| Error {
        pos: Pos {
            file: name.clone(),
            line: 0,
            col: 0,
        },
        msg: format!("error opening config file: {e}"),
    })?;
    let text = String::from_utf8(text).map_err(|e| Error {
        pos: Pos {
            file: name.clone(),
            line: 0,
            col: 0,
        },
        msg: format!("config file is not valid UTF-8: {e}"),
    })?;
    let dir = path.parent().unwrap_or(Path::new("."));
    parse_text(&text, name, dir, depth, env)
}

pub fn parse_text(
    text: &str,
    file: Arc<str>,
    dir: &Path,
    depth: usize,
    env: Env<'_>,
) -> Result<Map, Error> {
    let mut p = Parser {
        src: text.as_bytes(),
        text,
        i: 0,
        line: 1,
        col: 1,
        file,
        dir: dir.to_path_buf(),
        depth,
        env,
        scopes: Vec::new(),
    };
    p.document()
}

struct Parser<'a> {
    src: &'a [u8],
    text: &'a str,
    i: usize,
    line: u32,
    col: u32,
    file: Arc<str>,
    dir: PathBuf,
    depth: usize,
    env: Env<'a>,
    /// Maps being built, outermost first, for `$VAR` lookup. A map's
    /// entries become visible as they are parsed.
    scopes: Vec<Map>,
}

/// Where a map's entries end.
#[derive(Clone, Copy, PartialEq)]
enum Context {
    /// The whole file.
    Top,
    /// Inside `{ }`, at top level or as a value.
    Braces,
}

fn is_space(b: u8) -> bool {
    b == b' ' || b == b'\t'
}

fn is_newline(b: u8) -> bool {
    b == b'\n' || b == b'\r'
}

/// Bytes that end a bare string or number.
fn ends_bare(b: u8) -> bool {
    matches!(b, b'\n' | b'\r' | b';' | b',' | b']' | b'}' | b' ' | b'\t')
}

impl<'a> Parser<'a> {
    fn pos(&self) -> Pos {
        Pos {
            file: self.file.clone(),
            line: self.line,
            col: self.col,
        }
    }

    fn err<T>(&self, msg: impl Into<String>) -> Result<T, Error> {
        Err(Error {
            pos: self.pos(),
            msg: msg.into(),
        })
    }

    fn err_at<T>(&self, pos: Pos, msg: impl Into<String>) -> Result<T, Error> {
        Err(Error {
            pos,
            msg: msg.into(),
        })
    }

    fn peek(&self) -> Option<u8> {
        self.src.get(self.i).copied()
    }

    fn peek_at(&self, n: usize) -> Option<u8> {
        self.src.get(self.i + n).copied()
    }

    fn bump(&mut self) -> Option<u8> {
        let b = self.peek()?;
        self.i += 1;
        if b == b'\n' {
            self.line += 1;
            self.col = 1;
        } else if b & 0xC0 != 0x80 {
            // Count characters, not UTF-8 continuation bytes.
            self.col += 1;
        }
        Some(b)
    }

    /// The character at the cursor, for messages.
    fn shown(&self) -> String {
        match self.text[self.i..].chars().next() {
            None => "EOF".to_string(),
            Some('\n') => "\\n".to_string(),
            Some('\r') => "\\r".to_string(),
            Some(c) => c.to_string(),
        }
    }

    fn skip_spaces(&mut self) {
        while self.peek().is_some_and(is_space) {
            self.bump();
        }
    }

    fn at_comment(&self) -> bool {
        self.peek() == Some(b'#') || (self.peek() == Some(b'/') && self.peek_at(1) == Some(b'/'))
    }

    fn skip_comment(&mut self) {
        while self.peek().is_some_and(|b| !is_newline(b)) {
            self.bump();
        }
    }

    /// Skips spaces, newlines, comments and (where allowed) separators.
    fn skip_filler(&mut self, separators: &[u8]) {
        loop {
            match self.peek() {
                Some(b) if is_space(b) || is_newline(b) || separators.contains(&b) => {
                    self.bump();
                }
                Some(_) if self.at_comment() => self.skip_comment(),
                _ => return,
            }
        }
    }

    fn document(&mut self) -> Result<Map, Error> {
        self.skip_filler(b";");
        if self.peek() == Some(b'{') {
            // A whole file in braces, JSON style.
            self.bump();
            let m = self.entries(Context::Braces)?;
            self.skip_filler(b";");
            if self.peek().is_some() {
                return self.err(format!(
                    "Expected end of file after the closing '}}', but got '{}' instead.",
                    self.shown()
                ));
            }
            return Ok(m);
        }
        self.entries(Context::Top)
    }

    /// Reads `key value` entries until EOF (top) or `}` (braces).
    fn entries(&mut self, ctx: Context) -> Result<Map, Error> {
        self.scopes.push(Map::default());
        let result = self.entries_inner(ctx);
        let map = self.scopes.pop().expect("pushed above");
        result.map(|()| map)
    }

    fn entries_inner(&mut self, ctx: Context) -> Result<(), Error> {
        loop {
            self.skip_filler(b";,");
            match self.peek() {
                None if ctx == Context::Top => return Ok(()),
                None => return self.err("Unexpected EOF processing map."),
                Some(b'}') if ctx == Context::Braces => {
                    self.bump();
                    return Ok(());
                }
                Some(b'}') => return self.err("Unexpected '}' at top level."),
                Some(b']') => return self.err("Unexpected array end ']' processing map."),
                Some(b'=' | b':') => {
                    return self.err(format!("Unexpected key separator '{}'.", self.shown()))
                }
                _ => {}
            }
            let key_pos = self.pos();
            let key = self.key()?;
            if key.eq_ignore_ascii_case("include") && self.peek().is_some_and(is_space) {
                self.include(key_pos)?;
            } else {
                self.key_separator()?;
                let item = self.value()?;
                self.current().insert(Entry {
                    key,
                    key_pos,
                    item,
                    referenced: false,
                });
            }
            self.end_of_entry(ctx)?;
        }
    }

    fn current(&mut self) -> &mut Map {
        self.scopes.last_mut().expect("inside a map")
    }

    /// After a value: a comment, newline, EOF, `;`, `,` or the closing `}`.
    fn end_of_entry(&mut self, ctx: Context) -> Result<(), Error> {
        self.skip_spaces();
        match self.peek() {
            None | Some(b'\n' | b'\r' | b';' | b',') => Ok(()),
            Some(b'}') if ctx == Context::Braces => Ok(()),
            Some(_) if self.at_comment() => Ok(()),
            Some(_) => {
                let what = if ctx == Context::Top {
                    "top-level"
                } else {
                    "map"
                };
                self.err(format!(
                    "Expected a {what} value to end with a new line, comment or EOF, but got '{}' instead.",
                    self.shown()
                ))
            }
        }
    }

    fn key(&mut self) -> Result<String, Error> {
        match self.peek() {
            Some(q @ (b'"' | b'\'')) => {
                self.bump();
                let start = self.i;
                while self.peek().is_some_and(|b| b != q) {
                    self.bump();
                }
                if self.peek().is_none() {
                    return self.err("Unexpected EOF processing map key.");
                }
                let k = self.text[start..self.i].to_string();
                self.bump();
                Ok(k)
            }
            _ => {
                let start = self.i;
                while self.peek().is_some_and(|b| {
                    !is_space(b)
                        && !is_newline(b)
                        && !matches!(b, b'=' | b':' | b'{' | b'[' | b'}' | b',' | b';')
                }) {
                    self.bump();
                }
                if self.i == start {
                    return self.err(format!(
                        "Expected a key but got '{}' instead.",
                        self.shown()
                    ));
                }
                Ok(self.text[start..self.i].to_string())
            }
        }
    }

    /// `=`, `:`, or just whitespace between a key and its value. Before
    /// a separator, new lines are whitespace too (nats-server's
    /// `lexKeyEnd`): a block may open on the line after its key.
    fn key_separator(&mut self) -> Result<(), Error> {
        while self.peek().is_some_and(|b| is_space(b) || is_newline(b)) {
            self.bump();
        }
        if matches!(self.peek(), Some(b'=' | b':')) {
            self.bump();
            self.skip_spaces();
        }
        match self.peek() {
            None => self.err("Unexpected EOF, expected a value."),
            Some(b) if is_newline(b) => self.err("Expected value but found new line"),
            Some(_) if self.at_comment() => self.err("Expected value but found a comment"),
            Some(_) => Ok(()),
        }
    }

    fn value(&mut self) -> Result<Item, Error> {
        let pos = self.pos();
        let start = self.i;
        let value = match self.peek() {
            Some(b'{') => {
                self.bump();
                Value::Map(self.entries(Context::Braces)?)
            }
            Some(b'[') => {
                self.bump();
                Value::Array(self.array()?)
            }
            Some(b'"') => Value::String(self.double_quoted()?),
            Some(b'\'') => Value::String(self.single_quoted()?),
            Some(b'(') => Value::String(self.block_string()?),
            Some(b'.') => return self.err("Floats must start with a digit"),
            Some(b) if b.is_ascii_digit() || b == b'-' => return self.number(pos),
            Some(_) => return self.bare(pos),
            None => return self.err("Unexpected EOF, expected a value."),
        };
        Ok(Item {
            value,
            pos,
            raw: self.text[start..self.i].to_string(),
        })
    }

    fn array(&mut self) -> Result<Vec<Item>, Error> {
        let mut items = Vec::new();
        loop {
            self.skip_filler(b"");
            match self.peek() {
                Some(b']') => {
                    self.bump();
                    return Ok(items);
                }
                Some(b',') => return self.err("Unexpected array value terminator ','."),
                None => return self.err("Unexpected EOF processing array."),
                _ => {}
            }
            items.push(self.value()?);
            self.skip_spaces();
            if self.at_comment() {
                self.skip_comment();
            }
            match self.peek() {
                Some(b',') => {
                    self.bump();
                }
                Some(b']') => {}
                Some(b) if is_newline(b) => {}
                None => return self.err("Unexpected EOF processing array."),
                Some(_) => {
                    return self.err(format!(
                        "Expected an array value terminator \",\" or an array terminator \"]\", but got '{}' instead.",
                        self.shown()
                    ))
                }
            }
        }
    }

    fn double_quoted(&mut self) -> Result<String, Error> {
        self.bump();
        let mut out: Vec<u8> = Vec::new();
        loop {
            match self.peek() {
                None => return self.err("Unexpected EOF."),
                Some(b'"') => {
                    self.bump();
                    return String::from_utf8(out)
                        .or_else(|_| self.err("String is not valid UTF-8."));
                }
                Some(b'\\') => {
                    self.bump();
                    let c = self.peek();
                    match c {
                        Some(b't') => out.push(b'\t'),
                        Some(b'n') => out.push(b'\n'),
                        Some(b'r') => out.push(b'\r'),
                        Some(b'"') => out.push(b'"'),
                        Some(b'\\') => out.push(b'\\'),
                        Some(b'x') => {
                            self.bump();
                            let hex = self.text.get(self.i..self.i + 2).unwrap_or("");
                            match u8::from_str_radix(hex, 16) {
                                Ok(v) if hex.len() == 2 => {
                                    out.push(v);
                                    self.bump();
                                    self.bump();
                                    continue;
                                }
                                _ => {
                                    return self.err(format!(
                                        "Expected two hexadecimal digits after '\\x', but got '{hex}'"
                                    ))
                                }
                            }
                        }
                        _ => {
                            return self.err(format!(
                                "Invalid escape character '{}'. Only the following escape characters are allowed: \\xXX, \\t, \\n, \\r, \\\", \\\\.",
                                self.shown()
                            ))
                        }
                    }
                    self.bump();
                }
                Some(b) => {
                    out.push(b);
                    self.bump();
                }
            }
        }
    }

    fn single_quoted(&mut self) -> Result<String, Error> {
        self.bump();
        let start = self.i;
        while self.peek().is_some_and(|b| b != b'\'') {
            self.bump();
        }
        if self.peek().is_none() {
            return self.err("Unexpected EOF.");
        }
        let s = self.text[start..self.i].to_string();
        self.bump();
        Ok(s)
    }

    /// `(` ... a line holding only `)`. The text between is kept raw.
    fn block_string(&mut self) -> Result<String, Error> {
        self.bump();
        let start = self.i;
        loop {
            match self.peek() {
                None => return self.err("Unexpected EOF processing block."),
                Some(b')') if self.i > 0 && self.src[self.i - 1] == b'\n' => {
                    let after = self.peek_at(1);
                    if after.is_none() || after.is_some_and(is_newline) {
                        let s = self.text[start..self.i].to_string();
                        self.bump();
                        return Ok(s);
                    }
                    self.bump();
                }
                Some(_) => {
                    self.bump();
                }
            }
        }
    }

    /// A token up to the next terminator, as written.
    fn bare_token(&mut self) -> &'a str {
        let start = self.i;
        while self.peek().is_some_and(|b| !ends_bare(b)) {
            self.bump();
        }
        &self.text[start..self.i]
    }

    /// Numbers, sizes, datetimes and IP-like strings: anything starting
    /// with a digit or `-`.
    fn number(&mut self, pos: Pos) -> Result<Item, Error> {
        if self.peek() == Some(b'-') && !self.peek_at(1).is_some_and(|b| b.is_ascii_digit()) {
            self.bump();
            return self.err(format!("Expected a digit but got '{}'.", self.shown()));
        }
        let raw = self.bare_token();
        let value = classify_number(raw).map_err(|msg| Error {
            pos: pos.clone(),
            msg,
        })?;
        Ok(Item {
            value,
            pos,
            raw: raw.to_string(),
        })
    }

    /// Booleans, `$VAR` references, and plain bare strings.
    fn bare(&mut self, pos: Pos) -> Result<Item, Error> {
        let raw = self.bare_token();
        let value = match raw.to_ascii_lowercase().as_str() {
            "true" | "yes" | "on" => Value::Bool(true),
            "false" | "no" | "off" => Value::Bool(false),
            _ => match raw.strip_prefix('$') {
                Some(name) if !name.is_empty() => return self.variable(name, pos, raw),
                _ => Value::String(raw.to_string()),
            },
        };
        Ok(Item {
            value,
            pos,
            raw: raw.to_string(),
        })
    }

    /// Resolves `$name`: the nearest enclosing map that already defines
    /// it, else the environment.
    fn variable(&mut self, name: &str, pos: Pos, raw: &str) -> Result<Item, Error> {
        // bcrypt hashes ($2a$...) are values, not references.
        if name.starts_with("2a$") || name.starts_with("2b$") || name.starts_with("2y$") {
            return Ok(Item {
                value: Value::String(raw.to_string()),
                pos,
                raw: raw.to_string(),
            });
        }
        for scope in self.scopes.iter_mut().rev() {
            if let Some(entry) = scope.entries.iter_mut().find(|e| e.key == name) {
                entry.referenced = true;
                let mut item = entry.item.clone();
                item.pos = pos;
                return Ok(item);
            }
        }
        let Some(text) = (self.env)(name) else {
            return self.err_at(
                pos.clone(),
                format!(
                    "variable reference for '{name}' on line {} can not be found",
                    pos.line
                ),
            );
        };
        // The environment value is typed as if written in the file. Inside
        // it, the same name is not looked up again, so a variable whose
        // value names itself fails instead of looping.
        let env = self.env;
        let parsed = parse_text(
            &format!("pk={text}"),
            Arc::from(format!("${name}")),
            &self.dir,
            self.depth,
            &|n| if n == name { None } else { env(n) },
        )
        .map_err(|e| Error {
            pos: pos.clone(),
            msg: format!(
                "variable reference for '{name}' on line {} could not be parsed: {}",
                pos.line, e.msg
            ),
        })?;
        let mut item = parsed
            .entries
            .into_iter()
            .next()
            .expect("pk= yields one entry")
            .item;
        item.pos = pos;
        Ok(item)
    }

    /// `include <path>`: the file's top-level keys join the current map.
    fn include(&mut self, key_pos: Pos) -> Result<(), Error> {
        self.skip_spaces();
        let path = match self.peek() {
            Some(b'"') | Some(b'\'') => {
                let q = self.peek();
                self.bump();
                let start = self.i;
                while self.peek().is_some_and(|b| Some(b) != q && !is_newline(b)) {
                    self.bump();
                }
                if self.peek() != q {
                    return self.err("Unexpected EOF in quoted include");
                }
                let p = self.text[start..self.i].to_string();
                self.bump();
                p
            }
            Some(b'[' | b'{' | b'(') => {
                return self
                    .err("Expected include value but found start of an array, a map or a block")
            }
            Some(b) if is_newline(b) => {
                return self.err("Expected include value but found new line")
            }
            None => return self.err("Unexpected EOF, expected an include path"),
            _ => self.bare_token().to_string(),
        };
        if self.depth + 1 > MAX_INCLUDE_DEPTH {
            return self.err_at(
                key_pos,
                format!("error parsing include file '{path}', includes nested more than {MAX_INCLUDE_DEPTH} deep"),
            );
        }
        let full = self.dir.join(&path);
        let included = parse_file(&full, self.depth + 1, self.env).map_err(|e| Error {
            pos: if e.pos.line == 0 {
                key_pos.clone()
            } else {
                e.pos.clone()
            },
            msg: if e.pos.line == 0 {
                format!("error parsing include file '{path}', {}", e.msg)
            } else {
                e.msg
            },
        })?;
        for entry in included.entries {
            self.current().insert(entry);
        }
        Ok(())
    }
}

/// Size suffixes: decimal for `k`, binary for `kb`/`ki`/`kib`, and so on.
fn suffix_multiplier(suffix: &str) -> Option<i64> {
    let s = suffix.to_ascii_lowercase();
    let (unit, binary) = match s.len() {
        1 => (s.as_bytes()[0], false),
        _ if matches!(s.get(1..), Some("b" | "i" | "ib")) => (s.as_bytes()[0], true),
        _ => return None,
    };
    let exp = match unit {
        b'k' => 1,
        b'm' => 2,
        b'g' => 3,
        b't' => 4,
        b'p' => 5,
        b'e' => 6,
        _ => return None,
    };
    let base: i64 = if binary { 1024 } else { 1000 };
    base.checked_pow(exp)
}

/// Reads a token that starts with a digit or `-`.
fn classify_number(raw: &str) -> Result<Value, String> {
    let (neg, digits) = match raw.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, raw),
    };
    let lead = digits.bytes().take_while(u8::is_ascii_digit).count();
    let rest = &digits[lead..];
    if rest.is_empty() {
        return raw
            .parse::<i64>()
            .map(Value::Integer)
            .map_err(|_| format!("integer '{raw}' is out of the range"));
    }
    if let Some(frac) = rest.strip_prefix('.') {
        if !frac.is_empty() && frac.bytes().all(|b| b.is_ascii_digit()) {
            return raw
                .parse::<f64>()
                .map(Value::Float)
                .map_err(|_| format!("float '{raw}' is out of the range"));
        }
        // 10.0.0.1 or 127.0.0.1:4222: an address, kept as a string.
        if !neg
            && rest
                .bytes()
                .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b':' | b'-'))
        {
            return Ok(Value::String(raw.to_string()));
        }
        if frac.is_empty() {
            return Err("Floats must have a digit after the '.'".to_string());
        }
        return Ok(Value::String(raw.to_string()));
    }
    if !neg && lead == 4 && rest.starts_with('-') {
        return if is_zulu(raw) {
            Ok(Value::DateTime(raw.to_string()))
        } else {
            Err("All ISO8601 dates must be in full Zulu form.".to_string())
        };
    }
    if let Some(mult) = suffix_multiplier(rest) {
        let n: i64 = digits[..lead]
            .parse()
            .map_err(|_| format!("integer '{raw}' is out of the range"))?;
        let v = n
            .checked_mul(mult)
            .ok_or_else(|| format!("integer '{raw}' is out of the range"))?;
        return Ok(Value::Integer(if neg { -v } else { v }));
    }
    if neg {
        return Err(format!("Expected a number but got '{raw}'."));
    }
    // 10ms, 4222abc: a string, which duration-typed keys then parse.
    Ok(Value::String(raw.to_string()))
}

fn is_zulu(s: &str) -> bool {
    let b = s.as_bytes();
    let shape = b"dddd-dd-ddTdd:dd:ddZ";
    b.len() == shape.len()
        && b.iter().zip(shape).all(|(c, s)| match s {
            b'd' => c.is_ascii_digit(),
            other => c == other,
        })
}
