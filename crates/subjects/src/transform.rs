//! Subject transforms (stream `subject_transform`, `republish`, and
//! source transforms): a source pattern and a destination that reuses the
//! source's wildcard tokens, by position (`*`), by number (`$1`,
//! `{{wildcard(1)}}`), and `>` for the tail.

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Literal(String),
    /// The n-th (0-based) `*` token of the source.
    Wildcard(usize),
    /// Whatever the source's `>` matched.
    Rest,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transform {
    src: String,
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

/// A destination token that names a source wildcard: `$N` or
/// `{{wildcard(N)}}` (1-based, as written). `None` for a plain token.
fn placeholder(token: &str) -> Option<Result<usize, String>> {
    if let Some(n) = token.strip_prefix('$') {
        // `$` tokens that are not numbers are plain text to nats-server.
        return n.parse::<usize>().ok().map(Ok);
    }
    let inner = token.strip_prefix("{{")?.strip_suffix("}}")?.trim();
    let open = inner.find('(')?;
    let (func, args) = (inner[..open].trim(), &inner[open + 1..]);
    let args = args.strip_suffix(')')?;
    if !func.eq_ignore_ascii_case("wildcard") {
        return Some(Err(format!(
            "{BAD_DEST}: mapping function {func:?} is not supported by flotilla in {token}"
        )));
    }
    if args.trim().is_empty() {
        return Some(Err(dest_err(
            "not enough arguments passed to the function",
            token,
        )));
    }
    if args.contains(',') {
        return Some(Err(dest_err(
            "too many arguments passed to the function",
            token,
        )));
    }
    Some(
        args.trim()
            .parse::<usize>()
            .map_err(|_| dest_err("function argument is invalid or in the wrong format", token)),
    )
}

impl Transform {
    /// Checks a mapping as nats-server's `ValidateMapping` does, with its
    /// error texts. An empty destination maps nothing.
    pub fn new(src: &str, dest: &str) -> Result<Self, String> {
        let src = if src.is_empty() { ">" } else { src };
        if dest.is_empty() {
            return Ok(Transform {
                src: src.to_string(),
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
            } else if t.contains(['\t', '\n', '\x0c', '\r', ' ']) {
                return Err(dest_err("invalid transform", ""));
            }
        }
        let src_ok = crate::is_valid_subject(src.as_bytes());
        let dest_ok = crate::is_valid_subject(dest.as_bytes());
        let src_tokens: Vec<&str> = src.split('.').collect();
        let wildcards = src_tokens.iter().filter(|t| **t == "*").count();
        let src_rest = src_tokens.last() == Some(&">");
        let dest_tokens: Vec<&str> = dest.split('.').collect();
        let dest_rest = dest_tokens.last() == Some(&">");
        if !src_ok || !dest_ok || dest_tokens.contains(&"*") || src_rest != dest_rest {
            return Err("invalid subject".to_string());
        }
        let mut parts = Vec::with_capacity(dest_tokens.len());
        for t in dest_tokens {
            let part = match (t, placeholder(t)) {
                (">", _) => Part::Rest,
                (_, None) => Part::Literal(t.to_string()),
                (_, Some(Err(e))) => return Err(e),
                (_, Some(Ok(n))) => {
                    if wildcards == 0 && !src_rest {
                        return Err(dest_err("wildcard index out of range", t));
                    }
                    if n > wildcards || n == 0 {
                        return Err(dest_err(
                            "wildcard index out of range",
                            &format!("{t}: [{n}]"),
                        ));
                    }
                    Part::Wildcard(n - 1)
                }
            };
            parts.push(part);
        }
        Ok(Transform {
            src: src.to_string(),
            dest: parts,
        })
    }

    /// The mapped subject, or `None` when `subject` does not match.
    pub fn apply(&self, subject: &str) -> Option<String> {
        if !crate::subject_matches_filter(subject.as_bytes(), self.src.as_bytes()) {
            return None;
        }
        if self.dest.is_empty() {
            return Some(subject.to_string());
        }
        let tokens: Vec<&str> = subject.split('.').collect();
        let mut wild = Vec::new();
        let mut rest = String::new();
        for (i, t) in self.src.split('.').enumerate() {
            match t {
                "*" => wild.push(tokens[i]),
                ">" => {
                    rest = tokens[i..].join(".");
                    break;
                }
                _ => {}
            }
        }
        let out: Vec<String> = self
            .dest
            .iter()
            .map(|p| match p {
                Part::Literal(s) => s.clone(),
                Part::Wildcard(n) => wild[*n].to_string(),
                Part::Rest => rest.clone(),
            })
            .collect();
        Some(out.join("."))
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
        assert!(Transform::new("a.*", "b.{{partition(3)}}").is_err());
    }

    #[test]
    fn tokenize_names_wildcards_by_position() {
        assert_eq!(tokenize("a.*.b.*.>"), "a.$1.b.$2.>");
        assert_eq!(tokenize("plain"), "plain");
        let t = Transform::new("x.*.*", &tokenize("y.*.*")).unwrap();
        assert_eq!(t.apply("x.1.2").as_deref(), Some("y.1.2"));
    }
}
