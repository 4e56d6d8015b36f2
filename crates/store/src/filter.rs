//! Which subjects a lookup is about: everything, or any of a few subject
//! patterns (a consumer's filter subjects).

/// A set of subject patterns. Empty means every subject.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    subjects: Vec<String>,
}

impl Filter {
    /// Every subject.
    pub fn all() -> Self {
        Filter::default()
    }

    /// The given patterns; an empty list, or one containing `>`, means all.
    pub fn new<I: IntoIterator<Item = S>, S: Into<String>>(subjects: I) -> Self {
        let subjects: Vec<String> = subjects
            .into_iter()
            .map(Into::into)
            .filter(|s| !s.is_empty())
            .collect();
        if subjects.iter().any(|s| s == ">") {
            return Filter::all();
        }
        Filter { subjects }
    }

    pub fn one(subject: &str) -> Self {
        Filter::new([subject])
    }

    pub fn is_all(&self) -> bool {
        self.subjects.is_empty()
    }

    pub fn subjects(&self) -> &[String] {
        &self.subjects
    }

    /// The single literal subject this filter is, if it is one; lookups can
    /// then use the per-subject index instead of scanning.
    pub fn literal(&self) -> Option<&str> {
        match self.subjects.as_slice() {
            [s] if subjects::is_literal(s.as_bytes()) => Some(s),
            _ => None,
        }
    }

    pub fn matches(&self, subject: &str) -> bool {
        self.subjects.is_empty()
            || self
                .subjects
                .iter()
                .any(|f| subjects::subject_matches_filter(subject.as_bytes(), f.as_bytes()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matching() {
        assert!(Filter::all().matches("a.b"));
        assert!(Filter::new([">"]).is_all());
        let f = Filter::new(["a.*", "b.>"]);
        assert!(f.matches("a.x") && f.matches("b.x.y") && !f.matches("c"));
        assert_eq!(Filter::one("a.b").literal(), Some("a.b"));
        assert_eq!(Filter::one("a.*").literal(), None);
    }
}
