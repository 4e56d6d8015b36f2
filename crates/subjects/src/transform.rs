//! Subject transforms (stream `subject_transform`, `republish`, source
//! transforms, account imports and subject mappings), as nats-server's
//! `subject_transform.go` has them: a source pattern and a destination
//! whose tokens are literals, the source's `*` tokens (`$N`,
//! `{{wildcard(N)}}`), `>` for the source's tail, or a function of
//! source tokens: `partition`, `split`, `splitFromLeft`,
//! `splitFromRight`, `sliceFromLeft`, `sliceFromRight`, `left`, `right`
//! and `random`.
//!
//! Two constructors differ in what they accept: [`Transform::new`] for
//! state that every replica computes (streams), which refuses `random`
//! (replicas would disagree; nats-server takes it), and
//! [`Transform::mapping`] for subject mappings, which takes `random`
//! too (nats-server 2.15.1 takes every function in a mapping).

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Literal(String),
    /// The destination's `>`: the source's tail goes after.
    Rest,
    /// The source token at this index.
    Wildcard(usize),
    /// FNV-1a of these source tokens joined with nothing (all of the
    /// subject, joined with dots, when none are named), modulo buckets.
    Partition(u32, Option<Vec<usize>>),
    /// A function of one source token and an integer.
    Cut(Cut, usize, i32),
    /// The source token split on a delimiter into tokens.
    Split(usize, String),
    /// A random number below the argument, per message.
    Random(u32),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cut {
    SplitFromLeft,
    SplitFromRight,
    SliceFromLeft,
    SliceFromRight,
    Left,
    Right,
}

/// The functions, as nats-server's regular expressions name them: the
/// first letter of each word in either case.
const FUNCTIONS: &[&str] = &[
    "wildcard",
    "partition",
    "splitFromLeft",
    "splitFromRight",
    "sliceFromLeft",
    "sliceFromRight",
    "split",
    "left",
    "right",
    "random",
];

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transform {
    src: String,
    src_tokens: usize,
    dest: Vec<Part>,
}

const BAD_DEST: &str = "invalid mapping destination";

/// nats-server's `mappingDestinationErr` text: the reason, then the token.
fn dest_err(reason: &str, token: &str) -> String {
    if token.is_empty() {
        format!("{BAD_DEST}: {reason}")
    } else {
        format!("{BAD_DEST}: {reason} in {token}")
    }
}

/// What a destination token is, before source positions are resolved.
enum Token {
    Plain,
    /// A function (`wildcard` included) with its arguments.
    Function(&'static str, Vec<String>),
}

/// Reads `{{ name(args) }}`; `None` for a plain token, `Err` for an
/// unknown function.
fn function(token: &str) -> Result<Token, String> {
    if token.len() <= 4 || !token.starts_with("{{") || !token.ends_with("}}") {
        return Ok(Token::Plain);
    }
    let inner = token[2..token.len() - 2].trim();
    let unknown = || dest_err("unknown function", token);
    let open = inner.find('(').ok_or_else(unknown)?;
    let close = inner.rfind(')').ok_or_else(unknown)?;
    if close < open || !inner[close + 1..].trim().is_empty() {
        return Err(unknown());
    }
    let name = inner[..open].trim_end();
    let known = FUNCTIONS
        .iter()
        .find(|f| same_name(name, f))
        .ok_or_else(unknown)?;
    // nats-server splits on `,\s*`: the first argument keeps its leading
    // spaces, and numbers are trimmed of spaces.
    let args = inner[open + 1..close]
        .split(',')
        .enumerate()
        .map(|(i, a)| {
            if i == 0 {
                a.to_string()
            } else {
                a.trim_start().to_string()
            }
        })
        .collect();
    Ok(Token::Function(known, args))
}

/// `name` is `canonical` with the first letter of each word in either case.
fn same_name(name: &str, canonical: &str) -> bool {
    name.len() == canonical.len()
        && name
            .chars()
            .zip(canonical.chars())
            .enumerate()
            .all(|(i, (n, c))| {
                n == c || ((i == 0 || c.is_ascii_uppercase()) && n.eq_ignore_ascii_case(&c))
            })
}

fn int(arg: &str, token: &str) -> Result<i64, String> {
    arg.trim_matches(' ')
        .parse::<i64>()
        .map_err(|_| dest_err("function argument is invalid or in the wrong format", token))
}

fn int32(arg: &str, token: &str) -> Result<i32, String> {
    let n = int(arg, token)?;
    i32::try_from(n)
        .map_err(|_| dest_err("function argument is invalid or in the wrong format", token))
}

/// How a destination is checked.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Checks {
    /// Streams: everything but `random`.
    Stream,
    /// Subject mappings: every function.
    Mapping,
}

impl Transform {
    /// A transform every replica computes alike (streams): nats-server's
    /// checks and error texts, without `random`. An empty destination
    /// maps nothing.
    pub fn new(src: &str, dest: &str) -> Result<Self, String> {
        Transform::build(src, dest, Checks::Stream)
    }

    /// A subject mapping's destination: every function, `random`
    /// included.
    pub fn mapping(src: &str, dest: &str) -> Result<Self, String> {
        Transform::build(src, dest, Checks::Mapping)
    }

    fn build(src: &str, dest: &str, checks: Checks) -> Result<Self, String> {
        let src = if src.is_empty() { ">" } else { src };
        let src_tokens: Vec<&str> = src.split('.').collect();
        if dest.is_empty() {
            return Ok(Transform {
                src: src.to_string(),
                src_tokens: src_tokens.len(),
                dest: Vec::new(),
            });
        }
        let mut after_rest = false;
        for t in dest.split('.') {
            if t.is_empty() || after_rest {
                return Err(dest_err("invalid transform", t));
            }
            if t == ">" {
                after_rest = true;
            } else if t.contains(['\t', '\n', '\x0c', '\r', ' ']) && !t.starts_with("{{") {
                return Err(dest_err("invalid transform", ""));
            }
        }
        // nats-server's `subjectInfo`: no empty token, nothing after `>`
        // (function tokens may hold spaces).
        let src_ok = subject_info(src);
        let dest_ok = subject_info(dest);
        let src_rest = src_tokens.last() == Some(&">");
        let dest_tokens: Vec<&str> = dest.split('.').collect();
        let dest_rest = dest_tokens.last() == Some(&">");
        if !src_ok || !dest_ok || dest_tokens.contains(&"*") || src_rest != dest_rest {
            return Err("invalid subject".to_string());
        }
        // The source token index of each `*`, by its 1-based number.
        let wildcards: Vec<usize> = src_tokens
            .iter()
            .enumerate()
            .filter(|(_, t)| **t == "*")
            .map(|(i, _)| i)
            .collect();
        let literal_src = wildcards.is_empty() && !src_rest;
        let mut parts = Vec::with_capacity(dest_tokens.len());
        for t in dest_tokens {
            let part = match part(t, &wildcards, literal_src, checks)? {
                Part::Literal(l) if l == ">" => Part::Rest,
                p => p,
            };
            parts.push(part);
        }
        Ok(Transform {
            src: src.to_string(),
            src_tokens: src_tokens.len(),
            dest: parts,
        })
    }

    /// Whether it draws a random number per subject (`random`).
    pub fn is_random(&self) -> bool {
        self.dest.iter().any(|p| matches!(p, Part::Random(_)))
    }

    /// The mapped subject, or `None` when `subject` does not match.
    /// A transform with `random` takes [`Transform::apply_random`].
    pub fn apply(&self, subject: &str) -> Option<String> {
        debug_assert!(!self.is_random(), "a random transform needs a source");
        self.apply_random(subject, &mut |_| 0)
    }

    /// The mapped subject, with `random(n)` drawing from `random` (a
    /// number below its argument).
    pub fn apply_random(
        &self,
        subject: &str,
        random: &mut dyn FnMut(u32) -> u32,
    ) -> Option<String> {
        if !crate::subject_matches_filter(subject.as_bytes(), self.src.as_bytes()) {
            return None;
        }
        if self.dest.is_empty() {
            return Some(subject.to_string());
        }
        let tokens: Vec<&str> = subject.split('.').collect();
        let token = |i: usize| tokens.get(i).copied().unwrap_or("");
        let mut out = String::with_capacity(subject.len() + 8);
        let last = self.dest.len() - 1;
        for (i, part) in self.dest.iter().enumerate() {
            match part {
                Part::Rest => break,
                Part::Literal(l) => out.push_str(l),
                Part::Wildcard(at) => out.push_str(token(*at)),
                Part::Partition(buckets, at) => {
                    let key = match at {
                        Some(at) => at.iter().map(|i| token(*i)).collect::<String>(),
                        None => subject.to_string(),
                    };
                    let bucket = if *buckets == 0 {
                        0
                    } else {
                        fnv1a(key.as_bytes()) % buckets
                    };
                    out.push_str(&bucket.to_string());
                }
                Part::Cut(cut, at, n) => cut_token(&mut out, *cut, token(*at), *n),
                Part::Split(at, delim) => split_token(&mut out, token(*at), delim),
                Part::Random(n) => {
                    let drawn = if *n == 0 { 0 } else { random(*n) % n };
                    out.push_str(&drawn.to_string());
                }
            }
            if i < last {
                out.push('.');
            }
        }
        if matches!(self.dest.last(), Some(Part::Rest)) {
            out.push_str(&tokens[self.src_tokens - 1..].join("."));
        }
        Some(out)
    }
}

fn subject_info(subject: &str) -> bool {
    let tokens: Vec<&str> = subject.split('.').collect();
    !subject.is_empty()
        && tokens.iter().all(|t| !t.is_empty())
        && !tokens[..tokens.len() - 1].contains(&">")
}

/// One destination token: a literal or a function of source tokens.
fn part(t: &str, wildcards: &[usize], literal_src: bool, checks: Checks) -> Result<Part, String> {
    if let Some(n) = t.strip_prefix('$').filter(|n| !n.is_empty()) {
        // `$` tokens that are not numbers are plain text to nats-server.
        return match n.parse::<i64>() {
            Ok(n) => wildcard(t, n, wildcards, literal_src),
            Err(_) => Ok(Part::Literal(t.to_string())),
        };
    }
    let (name, args) = match function(t)? {
        Token::Plain => return Ok(Part::Literal(t.to_string())),
        Token::Function(name, args) => (name, args),
    };
    let not_enough = || dest_err("not enough arguments passed to the function", t);
    let too_many = || dest_err("too many arguments passed to the function", t);
    let invalid = || dest_err("function argument is invalid or in the wrong format", t);
    match name {
        "random" if checks == Checks::Stream => Err(dest_err(
            "random() is not supported by flotilla where every replica must map alike",
            t,
        )),
        "wildcard" => match args.as_slice() {
            [a] if a.is_empty() => Err(not_enough()),
            [a] => wildcard(t, int(a, t)?, wildcards, literal_src),
            _ => Err(too_many()),
        },
        "partition" => {
            let (buckets, indexes) = args.split_first().ok_or_else(not_enough)?;
            let buckets = u32::try_from(int32(buckets, t)?).map_err(|_| invalid())?;
            if indexes.is_empty() || literal_src {
                // A literal source's partition hashes the whole subject.
                for a in indexes {
                    int(a, t)?;
                }
                return Ok(Part::Partition(buckets, None));
            }
            let mut at = Vec::with_capacity(indexes.len());
            for a in indexes {
                at.push(source_index(t, int(a, t)?, wildcards)?);
            }
            Ok(Part::Partition(buckets, Some(at)))
        }
        "random" => match args.as_slice() {
            [a] => {
                let n = u32::try_from(int32(a, t)?).map_err(|_| invalid())?;
                Ok(Part::Random(n))
            }
            _ => Err(not_enough()),
        },
        "split" => match args.as_slice() {
            [_] | [] => Err(not_enough()),
            [a, delim] => {
                let at = int(a, t)?;
                if delim.contains([' ', '.']) {
                    return Err(invalid());
                }
                need_wildcard(t, literal_src)?;
                Ok(Part::Split(source_index(t, at, wildcards)?, delim.clone()))
            }
            _ => Err(too_many()),
        },
        cut => match args.as_slice() {
            [_] | [] => Err(not_enough()),
            [a, n] => {
                let (at, n) = (int(a, t)?, int32(n, t)?);
                need_wildcard(t, literal_src)?;
                let cut = match cut {
                    "splitFromLeft" => Cut::SplitFromLeft,
                    "splitFromRight" => Cut::SplitFromRight,
                    "sliceFromLeft" => Cut::SliceFromLeft,
                    "sliceFromRight" => Cut::SliceFromRight,
                    "left" => Cut::Left,
                    _ => Cut::Right,
                };
                Ok(Part::Cut(cut, source_index(t, at, wildcards)?, n))
            }
            _ => Err(too_many()),
        },
    }
}

/// A literal source has no wildcard for a function to take.
fn need_wildcard(t: &str, literal_src: bool) -> Result<(), String> {
    if literal_src {
        return Err(dest_err("wildcard index out of range", t));
    }
    Ok(())
}

fn wildcard(t: &str, n: i64, wildcards: &[usize], literal_src: bool) -> Result<Part, String> {
    need_wildcard(t, literal_src)?;
    Ok(Part::Wildcard(source_index(t, n, wildcards)?))
}

/// The source token index of wildcard `n` (1-based). Past the last is an
/// error; 0 or below is the first token, as nats-server's lookup of a
/// missing key gives.
fn source_index(t: &str, n: i64, wildcards: &[usize]) -> Result<usize, String> {
    if n > wildcards.len() as i64 {
        return Err(dest_err(
            "wildcard index out of range",
            &format!("{t}: [{n}]"),
        ));
    }
    Ok(usize::try_from(n)
        .ok()
        .and_then(|n| n.checked_sub(1))
        .map_or(0, |i| wildcards[i]))
}

/// 32-bit FNV-1a, as nats-server's partition hashes.
fn fnv1a(bytes: &[u8]) -> u32 {
    bytes.iter().fold(2166136261u32, |h, b| {
        (h ^ u32::from(*b)).wrapping_mul(16777619)
    })
}

fn cut_token(out: &mut String, cut: Cut, token: &str, n: i32) {
    let len = token.len();
    let Ok(n) = usize::try_from(n) else {
        out.push_str(token);
        return;
    };
    // Too small to cut at the requested place: the token as it is. Cuts
    // are at byte positions, as in nats-server; one that falls inside a
    // character leaves the token whole.
    if n == 0 || n >= len || !token.is_char_boundary(n) || !token.is_char_boundary(len - n) {
        out.push_str(token);
        return;
    }
    match cut {
        Cut::SplitFromLeft => {
            out.push_str(&token[..n]);
            out.push('.');
            out.push_str(&token[n..]);
        }
        Cut::SplitFromRight => {
            out.push_str(&token[..len - n]);
            out.push('.');
            out.push_str(&token[len - n..]);
        }
        Cut::Left => out.push_str(&token[..n]),
        Cut::Right => out.push_str(&token[len - n..]),
        Cut::SliceFromLeft => {
            let pieces: Vec<&str> = chunks(token, 0, n);
            out.push_str(&pieces.join("."));
        }
        Cut::SliceFromRight => {
            let rem = len % n;
            let mut pieces = Vec::new();
            if rem > 0 {
                pieces.push(&token[..rem]);
            }
            pieces.extend(chunks(token, rem, n));
            out.push_str(&pieces.join("."));
        }
    }
}

/// `token` from `from` in pieces of `n` bytes, the last shorter.
fn chunks(token: &str, from: usize, n: usize) -> Vec<&str> {
    let mut pieces = Vec::new();
    let mut at = from;
    while at < token.len() {
        let end = (at + n).min(token.len());
        match token.get(at..end) {
            Some(piece) => pieces.push(piece),
            None => return vec![token],
        }
        at = end;
    }
    pieces
}

/// nats-server's `split`: empty parts vanish, and a dot follows a part
/// only when the next is not empty (and not after an empty first part).
fn split_token(out: &mut String, token: &str, delim: &str) {
    let parts: Vec<&str> = if delim.is_empty() {
        token
            .char_indices()
            .map(|(i, c)| &token[i..i + c.len_utf8()])
            .collect()
    } else {
        token.split(delim).collect()
    };
    for (j, part) in parts.iter().enumerate() {
        out.push_str(part);
        let next_full = parts.get(j + 1).is_some_and(|p| !p.is_empty());
        if next_full && !(j == 0 && part.is_empty()) {
            out.push('.');
        }
    }
}

/// nats-server's `transformTokenize`: each `*` token of an import's
/// `to` becomes `$1`, `$2`, ... by position, naming the subject's
/// wildcards in order.
pub fn tokenize(subject: &str) -> String {
    let mut n = 0;
    subject
        .split('.')
        .map(|t| {
            if t == "*" {
                n += 1;
                format!("${n}")
            } else {
                t.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join(".")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(src: &str, dest: &str, subject: &str) -> String {
        Transform::new(src, dest)
            .unwrap_or_else(|e| panic!("{src} -> {dest}: {e}"))
            .apply(subject)
            .unwrap_or_else(|| panic!("{subject} does not match {src}"))
    }

    #[test]
    fn mappings() {
        let t = Transform::new("orders.*.*", "shipped.$2.$1").unwrap();
        assert_eq!(t.apply("orders.eu.42").as_deref(), Some("shipped.42.eu"));
        assert_eq!(t.apply("other.eu.42"), None);
        let t = Transform::new("a.*.>", "b.{{wildcard(1)}}.>").unwrap();
        assert_eq!(t.apply("a.x.y.z").as_deref(), Some("b.x.y.z"));
        let t = Transform::new("in.*", "out.$1").unwrap();
        assert_eq!(t.apply("in.q").as_deref(), Some("out.q"));
        let t = Transform::new("in.>", "").unwrap();
        assert_eq!(t.apply("in.q").as_deref(), Some("in.q"));
        assert_eq!(
            Transform::new("a.*", "b.{{wildcard(2)}}").unwrap_err(),
            "invalid mapping destination: wildcard index out of range in {{wildcard(2)}}: [2]"
        );
        assert_eq!(
            Transform::new("in.*", "out.*").unwrap_err(),
            "invalid subject"
        );
        let t = Transform::new(">", "copy.>").unwrap();
        assert_eq!(t.apply("x.y").as_deref(), Some("copy.x.y"));
        assert!(Transform::new("a.*", "b.$2").is_err());
        assert!(Transform::new("a.*", "b.>").is_err());
        assert!(Transform::new("a.*", "b.{{bogus(3)}}").is_err());
    }

    /// Expectations from nats-server's subject_transform_test.go.
    #[test]
    fn functions_as_nats_server() {
        for (src, dest, subject, want) in [
            ("*", "{{partition(10)}}", "foo", "3"),
            ("*", "{{partition(10)}}", "baz", "0"),
            ("*", "{{partition(10)}}", "qux", "9"),
            ("*", "{{partition(10,1)}}", "foo", "3"),
            ("*", "bar.{{partition(10, 0)}}", "foo", "bar.3"),
            ("*", "bar.{{partition(0)}}", "baz", "bar.0"),
            ("*.*", "bar.{{partition(10)}}", "foo.bar", "bar.6"),
            ("foo.bar", "baz.{{partition(10)}}", "foo.bar", "baz.6"),
            ("foo.baz", "qux.{{partition(10)}}", "foo.baz", "qux.4"),
            (
                "test.subject",
                "result.{{partition(5)}}",
                "test.subject",
                "result.0",
            ),
            ("*", "{{splitFromLeft(1,3)}}", "12345", "123.45"),
            ("*", "{{SplitFromRight(1,3)}}", "12345", "12.345"),
            ("*", "{{splitFromLeft(1,6)}}", "12345", "12345"),
            ("*", "{{sliceFromLeft(1,3)}}", "1234567890", "123.456.789.0"),
            (
                "*",
                "{{sliceFromRight(1,3)}}",
                "1234567890",
                "1.234.567.890",
            ),
            ("*", "{{sliceFromLeft(1,3)}}", "123456789", "123.456.789"),
            ("*", "{{split(1,-)}}", "-abc-def--ghi-", "abc.def.ghi"),
            ("*", "{{split(1,-)}}", "abc", "abc"),
            ("*", "{{split(1,-)}}", "--abc", ".abc"),
            ("*", "{{left(1,2)}}", "1234", "12"),
            ("*", "{{right(1,2)}}", "1234", "34"),
            ("*.*", "{{ wildcard(2) }}.{{wildcard(1)}}", "a.b", "b.a"),
            ("a.*.*", "b.$2", "a.x.y", "b.y"),
            ("*.>", "x.{{wildcard(1)}}.>", "a.b.c", "x.a.b.c"),
        ] {
            assert_eq!(
                map(src, dest, subject),
                want,
                "{src} -> {dest} on {subject}"
            );
        }
    }

    #[test]
    fn function_errors_as_nats_server() {
        for (src, dest, want) in [
            (
                "*",
                "{{wildcard()}}",
                "not enough arguments passed to the function in {{wildcard()}}",
            ),
            (
                "*",
                "{{wildcard(1,2)}}",
                "too many arguments passed to the function in {{wildcard(1,2)}}",
            ),
            (
                "*",
                "{{wildcard(x)}}",
                "function argument is invalid or in the wrong format in {{wildcard(x)}}",
            ),
            (
                "*",
                "{{splitFromLeft(1)}}",
                "not enough arguments passed to the function in {{splitFromLeft(1)}}",
            ),
            (
                "*",
                "{{split(1,a b)}}",
                "function argument is invalid or in the wrong format in {{split(1,a b)}}",
            ),
            ("*", "{{nope(1)}}", "unknown function in {{nope(1)}}"),
            (
                "*",
                "{{PARTITION(1)}}",
                "unknown function in {{PARTITION(1)}}",
            ),
            (
                "foo",
                "{{wildcard(1)}}",
                "wildcard index out of range in {{wildcard(1)}}",
            ),
            (
                "*",
                "{{random(5)}}",
                "random() is not supported by flotilla",
            ),
        ] {
            let got = Transform::new(src, dest).unwrap_err();
            assert!(got.contains(want), "{src} -> {dest}: {got}");
        }
        assert!(Transform::mapping("*", "{{left(1,2)}}").is_ok());
        let t = Transform::mapping("*", "r.{{random(5)}}").unwrap();
        assert!(t.is_random());
        assert_eq!(t.apply_random("x", &mut |n| n + 3).as_deref(), Some("r.3"));
    }

    #[test]
    fn tokenize_names_wildcards_by_position() {
        assert_eq!(tokenize("a.*.b.*.>"), "a.$1.b.$2.>");
        assert_eq!(tokenize("plain"), "plain");
        let t = Transform::new("x.*.*", &tokenize("y.*.*")).unwrap();
        assert_eq!(t.apply("x.1.2").as_deref(), Some("y.1.2"));
    }
}
