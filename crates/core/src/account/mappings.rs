//! An account's subject mappings (nats-server's `AddWeightedMappings`
//! and `selectMappedSubject`), built from the config's plain `Mapping`s:
//! a publish on a subject the first matching mapping covers goes to one
//! of its destinations, drawn by weight, preferring those scoped to this
//! server's cluster.

use std::collections::BTreeMap;

use subjects::transform::{tokenize, Transform};

/// One destination with the running total of weights up to it.
#[derive(Debug)]
struct Dest {
    /// As written (the source's own, for what the weights leave).
    subject: String,
    transform: Transform,
    upto: u32,
}

#[derive(Debug)]
struct Mapping {
    src: String,
    literal: bool,
    /// Destinations without a cluster, with the source itself for what
    /// their weights leave.
    dests: Vec<Dest>,
    /// Destinations of one cluster each, used on that cluster's servers.
    by_cluster: BTreeMap<String, Vec<Dest>>,
}

/// What a mapping made of a subject.
#[derive(Debug, PartialEq, Eq)]
pub enum Mapped {
    To(String),
    /// Mapped to nowhere: a source that names itself with less than 100%
    /// loses the rest (nats-server's deliberate loss injection).
    Dropped,
}

#[derive(Debug, Default)]
pub struct Mappings {
    list: Vec<Mapping>,
}

impl Mappings {
    /// `account`'s mappings, checked at load (`config::file::mappings`).
    pub fn build(account: &str, mappings: &[config::options::Mapping]) -> Mappings {
        let mut list = Vec::new();
        for m in mappings.iter().filter(|m| m.account == account) {
            let mut plain = Vec::new();
            let mut by_cluster: BTreeMap<String, Vec<_>> = BTreeMap::new();
            for d in &m.dests {
                let Ok(t) = Transform::mapping(&m.src, &d.subject) else {
                    debug_assert!(false, "a mapping the config checked: {m:?}");
                    continue;
                };
                let weighted = (d.subject.clone(), t, u32::from(d.weight));
                match &d.cluster {
                    None => plain.push(weighted),
                    Some(c) => by_cluster.entry(c.clone()).or_default().push(weighted),
                }
            }
            list.push(Mapping {
                src: m.src.clone(),
                literal: subjects::is_literal(m.src.as_bytes()),
                dests: totals(&m.src, plain),
                by_cluster: by_cluster
                    .into_iter()
                    .map(|(c, ds)| (c, totals(&m.src, ds)))
                    .collect(),
            });
        }
        Mappings { list }
    }

    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// Where a publish on `subject` goes on a server of `cluster`, if a
    /// mapping covers it: the first that does, in the order written.
    /// `draw(n)` is a random number below `n`.
    pub fn select(
        &self,
        subject: &str,
        cluster: &str,
        draw: &mut dyn FnMut(u32) -> u32,
    ) -> Option<Mapped> {
        let m = self.list.iter().find(|m| {
            if m.literal {
                m.src == subject
            } else {
                subjects::subject_matches_filter(subject.as_bytes(), m.src.as_bytes())
            }
        })?;
        let dests = m.by_cluster.get(cluster).unwrap_or(&m.dests);
        let chosen = match dests.as_slice() {
            [only] if only.upto == 100 => Some(only),
            _ => {
                let w = draw(100);
                dests.iter().find(|d| w < d.upto)
            }
        };
        let Some(d) = chosen else {
            return Some(Mapped::Dropped);
        };
        let to = d.transform.apply_random(subject, draw)?;
        Some(Mapped::To(to))
    }
}

/// nats-server's `processDestinations`: unless the source names itself,
/// what the weights leave of 100 maps to the source; then by weight,
/// lightest first, as running totals.
fn totals(src: &str, mut dests: Vec<(String, Transform, u32)>) -> Vec<Dest> {
    let total: u32 = dests.iter().map(|(_, _, w)| w).sum();
    debug_assert!(total <= 100, "checked at load");
    let names_itself = dests.iter().any(|(subject, _, _)| subject == src);
    if total != 100 && !names_itself {
        let itself = tokenize(src);
        if let Ok(t) = Transform::mapping(src, &itself) {
            dests.push((itself, t, 100 - total));
        }
    }
    dests.sort_by_key(|(_, _, w)| *w);
    let mut upto = 0;
    dests
        .into_iter()
        .map(|(subject, transform, w)| {
            upto += w;
            Dest {
                subject,
                transform,
                upto,
            }
        })
        .collect()
}

/// One destination as `/accountz` shows it: nats-server's `MapDest`,
/// whose weight is the running total.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shown {
    pub subject: String,
    pub weight: u32,
    pub cluster: Option<String>,
}

impl Mappings {
    /// Each mapping's source and destinations, as `/accountz` shows them.
    pub fn shown(&self) -> Vec<(String, Vec<Shown>)> {
        let shown = |d: &Dest, cluster: Option<&String>| Shown {
            subject: d.subject.clone(),
            weight: d.upto,
            cluster: cluster.cloned(),
        };
        self.list
            .iter()
            .map(|m| {
                let mut dests: Vec<Shown> = m.dests.iter().map(|d| shown(d, None)).collect();
                for (cluster, ds) in &m.by_cluster {
                    dests.extend(ds.iter().map(|d| shown(d, Some(cluster))));
                }
                (m.src.clone(), dests)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use config::options::{MapDest, Mapping as Config};

    fn dest(subject: &str, weight: u8, cluster: Option<&str>) -> MapDest {
        MapDest {
            subject: subject.into(),
            weight,
            cluster: cluster.map(str::to_string),
        }
    }

    fn build(src: &str, dests: Vec<MapDest>) -> Mappings {
        let m = Config {
            account: "A".into(),
            src: src.into(),
            dests,
        };
        Mappings::build("A", &[m])
    }

    #[test]
    fn weights_split_by_the_draw() {
        let m = build("canary", vec![dest("v1", 80, None), dest("v2", 20, None)]);
        let at = |w: u32| m.select("canary", "", &mut |_| w);
        // Lightest first: 0..20 is v2, 20..100 v1.
        assert_eq!(at(0), Some(Mapped::To("v2".into())));
        assert_eq!(at(19), Some(Mapped::To("v2".into())));
        assert_eq!(at(20), Some(Mapped::To("v1".into())));
        assert_eq!(at(99), Some(Mapped::To("v1".into())));
        assert_eq!(m.select("other", "", &mut |_| 0), None);
    }

    #[test]
    fn what_weights_leave_stays_or_is_lost() {
        let m = build("orders.*", vec![dest("new.$1", 30, None)]);
        assert_eq!(
            m.select("orders.1", "", &mut |_| 50),
            Some(Mapped::To("orders.1".into())),
            "the rest maps to the source"
        );
        let m = build("foo", vec![dest("foo", 80, None)]);
        assert_eq!(m.select("foo", "", &mut |_| 90), Some(Mapped::Dropped));
        assert_eq!(
            m.select("foo", "", &mut |_| 10),
            Some(Mapped::To("foo".into()))
        );
    }

    #[test]
    fn a_cluster_scoped_destination_applies_in_its_cluster() {
        let m = build("foo", vec![dest("bar", 100, Some("SYN"))]);
        assert_eq!(
            m.select("foo", "SYN", &mut |_| 0),
            Some(Mapped::To("bar".into()))
        );
        assert_eq!(
            m.select("foo", "other", &mut |_| 0),
            Some(Mapped::To("foo".into()))
        );
    }
}
