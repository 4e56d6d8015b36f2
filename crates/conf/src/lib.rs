//! The NATS configuration file format, as nats-server reads it: `key:
//! value`, `key = value` and `key value`; `{}` maps and `[]` arrays;
//! `#` and `//` comments; quoted, bare and block strings; numbers with
//! size suffixes (`1MB`); `include`; and `$VAR` variables.
//!
//! Every value carries the file, line and column it came from, so that
//! whoever interprets the options can point at the offending text.
//!
//! Where nats-server's lexer has accidents, this parser takes the reading
//! a user meant and says so in a comment: `[4222]` is an array holding an
//! integer, columns are 1-based on every line, an absolute `include` path
//! is absolute, and backslashes in bare strings are literal.

mod parser;

use std::fmt;
use std::path::Path;
use std::sync::Arc;

pub use parser::MAX_INCLUDE_DEPTH;

/// Where a value or key starts. Lines and columns are 1-based.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pos {
    pub file: Arc<str>,
    pub line: u32,
    pub col: u32,
}

impl fmt::Display for Pos {
    /// `file:line:col`, or just `file` for errors about the file as a
    /// whole (line 0).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(f, "{}", self.file)
        } else {
            write!(f, "{}:{}:{}", self.file, self.line, self.col)
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    String(String),
    Integer(i64),
    Float(f64),
    Bool(bool),
    /// An ISO 8601 Zulu time, `2016-05-04T18:53:41Z`, kept as written.
    DateTime(String),
    Array(Vec<Item>),
    Map(Map),
}

impl Value {
    /// The type name used in error messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::String(_) => "string",
            Value::Integer(_) => "integer",
            Value::Float(_) => "float",
            Value::Bool(_) => "boolean",
            Value::DateTime(_) => "datetime",
            Value::Array(_) => "array",
            Value::Map(_) => "map",
        }
    }
}

/// A value, where it was written, and how: `raw` is the source text of a
/// number, so `2m` can be read as a duration by keys that expect one even
/// though the format makes it the integer 2000000.
#[derive(Debug, Clone, PartialEq)]
pub struct Item {
    pub value: Value,
    pub pos: Pos,
    pub raw: String,
}

/// A key and its value.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub key: String,
    pub key_pos: Pos,
    pub item: Item,
    /// Some `$VAR` elsewhere named this key; such keys are definitions,
    /// not options, and are not reported as unknown.
    pub referenced: bool,
}

/// Entries in the order written. A repeated key replaces the earlier
/// value in place (the last one wins, as in nats-server).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Map {
    pub entries: Vec<Entry>,
}

impl Map {
    pub fn get(&self, key: &str) -> Option<&Entry> {
        self.entries.iter().find(|e| e.key == key)
    }

    fn insert(&mut self, entry: Entry) {
        match self.entries.iter_mut().find(|e| e.key == entry.key) {
            Some(existing) => *existing = entry,
            None => self.entries.push(entry),
        }
    }
}

/// A syntax error, or a file that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{pos}: {msg}")]
pub struct Error {
    pub pos: Pos,
    pub msg: String,
}

/// Parses a config file. Includes are resolved relative to its directory.
pub fn parse_file(path: &Path) -> Result<Map, Error> {
    parser::parse_file(path, 0, &|name| std::env::var(name).ok())
}

/// Parses config text. `name` labels positions; includes resolve relative
/// to `dir`; `env` supplies environment variables for `$VAR`.
pub fn parse_str(
    text: &str,
    name: &str,
    dir: &Path,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Map, Error> {
    parser::parse_text(text, Arc::from(name), dir, 0, env)
}
