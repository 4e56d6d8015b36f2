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

/// `$N` or `{{wildcard(N)}}` (1-based), as a 0-based index.
fn placeholder(token: &str) -> Option<Result<usize, String>> {
    let n = if let Some(n) = token.strip_prefix('$') {
        n
    } else {
        let inner = token.strip_prefix("{{")?.strip_suffix("}}")?.trim();
        let args = inner
            .strip_prefix("wildcard(")
            .or_else(|| inner.strip_prefix("Wildcard("))?
            .strip_suffix(')')?;
        args.trim()
    };
    Some(
        n.parse::<usize>()
            .ok()
            .filter(|&i| i >= 1)
            .map(|i| i - 1)
            .ok_or_else(|| format!("invalid mapping destination token {token:?}")),
    )
}

impl Transform {
    pub fn new(src: &str, dest: &str) -> Result<Self, String> {
        let src = if src.is_empty() { ">" } else { src };
        if !subjects::is_valid_subject(src.as_bytes()) {
            return Err(format!("invalid source subject {src:?}"));
        }
        let wildcards = src.split('.').filter(|t| *t == "*").count();
        let has_rest = src.ends_with('>') && (src == ">" || src.ends_with(".>"));
        if dest.is_empty() {
            return Err("mapping destination can not be empty".to_string());
        }
        let mut parts = Vec::new();
        let mut positional = 0;
        for (i, token) in dest.split('.').enumerate() {
            let part = match token {
                "" => return Err(format!("invalid mapping destination {dest:?}")),
                "*" => {
                    if positional >= wildcards {
                        return Err(format!(
                            "mapping destination {dest:?} has more wildcards than {src:?}"
                        ));
                    }
                    positional += 1;
                    Part::Wildcard(positional - 1)
                }
                ">" => {
                    if !has_rest || i + 1 != dest.split('.').count() {
                        return Err(format!(
                            "invalid use of '>' in mapping destination {dest:?}"
                        ));
                    }
                    Part::Rest
                }
                t => match placeholder(t) {
                    Some(Ok(n)) if n < wildcards => Part::Wildcard(n),
                    Some(Ok(_)) => {
                        return Err(format!(
                            "mapping destination {dest:?} refers to a missing wildcard"
                        ))
                    }
                    Some(Err(e)) => return Err(e),
                    None if t.contains("{{") => {
                        return Err(format!("unsupported mapping function in {t:?}"))
                    }
                    None => Part::Literal(t.to_string()),
                },
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
        if !subjects::subject_matches_filter(subject.as_bytes(), self.src.as_bytes()) {
            return None;
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
        let t = Transform::new("in.*", "out.*").unwrap();
        assert_eq!(t.apply("in.q").as_deref(), Some("out.q"));
        let t = Transform::new(">", "copy.>").unwrap();
        assert_eq!(t.apply("x.y").as_deref(), Some("copy.x.y"));
        assert!(Transform::new("a.*", "b.$2").is_err());
        assert!(Transform::new("a.*", "b.>").is_err());
        assert!(Transform::new("a.*", "b.{{partition(3)}}").is_err());
    }
}
