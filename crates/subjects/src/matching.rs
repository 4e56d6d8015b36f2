//! Matching one subject pattern against another, without a trie.

use crate::validate::tokens;
use crate::{FWC, PWC};

fn is_pwc(t: &[u8]) -> bool {
    t == [PWC]
}
fn is_fwc(t: &[u8]) -> bool {
    t == [FWC]
}

/// Whether every subject matched by `subject` is also matched by `filter`.
/// With a literal `subject` this is ordinary wildcard matching. A wildcard
/// in `subject` is only covered by the same or a wider wildcard in
/// `filter`. nats-server: `SubjectMatchesFilter`.
pub fn subject_matches_filter(subject: &[u8], filter: &[u8]) -> bool {
    let mut s = tokens(subject);
    let mut f = tokens(filter);
    loop {
        match (s.next(), f.next()) {
            (None, None) => return true,
            (Some(st), Some(ft)) => {
                if ft.is_empty() || st.is_empty() {
                    return false;
                }
                if is_fwc(ft) {
                    return true;
                }
                if is_fwc(st) {
                    return false;
                }
                if is_pwc(st) {
                    if !is_pwc(ft) {
                        return false;
                    }
                    continue;
                }
                if !is_pwc(ft) && st != ft {
                    return false;
                }
            }
            _ => return false,
        }
    }
}

/// Whether some literal subject could match both patterns.
/// nats-server: `SubjectsCollide`.
pub fn subjects_collide(a: &[u8], b: &[u8]) -> bool {
    if a == b {
        return true;
    }
    let ta: Vec<&[u8]> = tokens(a).collect();
    let tb: Vec<&[u8]> = tokens(b).collect();
    let fwc_a = ta.last().is_some_and(|t| is_fwc(t));
    let fwc_b = tb.last().is_some_and(|t| is_fwc(t));
    if ta.len() != tb.len() {
        // The shorter one must end in `>` to reach the longer one's tokens.
        let shorter_has_fwc = if ta.len() < tb.len() { fwc_a } else { fwc_b };
        if !shorter_has_fwc {
            return false;
        }
    }
    ta.iter().zip(tb.iter()).all(|(x, y)| {
        if x.is_empty() || y.is_empty() {
            return false;
        }
        is_pwc(x) || is_pwc(y) || is_fwc(x) || is_fwc(y) || x == y
    })
}

/// The pattern that matches exactly the subjects both patterns match,
/// or `None` when they share none: token by token, a literal narrows a
/// `*`, and a `>` takes the other's remaining tokens.
pub fn intersection(a: &str, b: &str) -> Option<String> {
    let (ta, tb): (Vec<&str>, Vec<&str>) = (a.split('.').collect(), b.split('.').collect());
    let mut out: Vec<&str> = Vec::with_capacity(ta.len().max(tb.len()));
    for i in 0.. {
        match (ta.get(i).copied(), tb.get(i).copied()) {
            (None, None) => break,
            (Some(">"), Some(_)) => {
                out.extend(&tb[i..]);
                break;
            }
            (Some(_), Some(">")) => {
                out.extend(&ta[i..]);
                break;
            }
            (Some("*"), Some(t)) | (Some(t), Some("*")) => out.push(t),
            (Some(x), Some(y)) if x == y => out.push(x),
            _ => return None,
        }
    }
    Some(out.join("."))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filter_matching() {
        let yes = [
            ("foo.bar", "foo.bar"),
            ("foo.bar", "foo.*"),
            ("foo.bar", ">"),
            ("foo.bar.baz", "foo.>"),
            ("foo.*", "foo.*"),
            ("foo.*", "foo.>"),
            ("foo.>", ">"),
            ("foo.*", "*.*"),
        ];
        for (s, f) in yes {
            assert!(
                subject_matches_filter(s.as_bytes(), f.as_bytes()),
                "{s} in {f}"
            );
        }
        let no = [
            ("foo", "foo.bar"),
            ("foo.bar", "foo"),
            ("foo.*", "foo.bar"),
            ("foo.>", "foo.*"),
            ("foo", "foo.>"),
            ("foo.bar", "bar.*"),
        ];
        for (s, f) in no {
            assert!(
                !subject_matches_filter(s.as_bytes(), f.as_bytes()),
                "{s} not in {f}"
            );
        }
    }

    #[test]
    fn intersections() {
        for (a, b, both) in [
            ("p.foo.>", "p.foo.bar", Some("p.foo.bar")),
            (">", "p.foo.>", Some("p.foo.>")),
            ("p.*.bar", "p.foo.>", Some("p.foo.bar")),
            ("p.*.*", "p.foo.>", Some("p.foo.*")),
            ("a.*", "*.b", Some("a.b")),
            ("a.>", "a.>", Some("a.>")),
            ("a.*", "a.b.c", None),
            ("a.b", "a.c", None),
            ("a", "a.>", None),
        ] {
            assert_eq!(intersection(a, b).as_deref(), both, "{a} ^ {b}");
            assert_eq!(intersection(b, a).as_deref(), both, "{b} ^ {a}");
            if let Some(both) = both {
                assert!(subject_matches_filter(both.as_bytes(), a.as_bytes()));
                assert!(subject_matches_filter(both.as_bytes(), b.as_bytes()));
            }
        }
    }

    #[test]
    fn collisions() {
        let yes = [
            ("foo.*", "foo.bar"),
            ("foo.>", "*.bar.baz"),
            (">", "a"),
            ("a.*.c", "a.b.*"),
            ("a.>", "a.b.>"),
        ];
        for (a, b) in yes {
            assert!(subjects_collide(a.as_bytes(), b.as_bytes()), "{a} ~ {b}");
            assert!(subjects_collide(b.as_bytes(), a.as_bytes()), "{b} ~ {a}");
        }
        let no = [
            ("foo.*", "bar.*"),
            ("foo.*", "foo.a.b"),
            ("a.b", "a.c"),
            ("a.*", "a"),
            ("a.>", "a"),
        ];
        for (a, b) in no {
            assert!(!subjects_collide(a.as_bytes(), b.as_bytes()), "{a} !~ {b}");
            assert!(!subjects_collide(b.as_bytes(), a.as_bytes()), "{b} !~ {a}");
        }
    }
}
