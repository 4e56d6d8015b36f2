//! Where a replicated stream's peers go, as nats-server's meta leader
//! places them (`selectPeerGroup`): the servers of the stream's cluster
//! that are up, take assets, and have the placement's tags (`!tag`
//! excludes a tag), the least loaded first; and when one peer goes, a
//! spare in its place.
//!
//! Pure decisions over what the meta leader sees ([`Candidate`]); the
//! driver gathers the candidates (the meta state's peers, their routes
//! and tags) and proposes the result.

use std::collections::BTreeSet;

use jetstream::api::{ApiError, StreamConfig, E};

/// A server that could hold a stream's replica, as the meta leader sees
/// it.
#[derive(Debug, Clone, Copy)]
pub struct Candidate<'a> {
    pub id: u64,
    /// Its `server_tags`; `None` when it is not up (no route to it).
    pub tags: Option<&'a [String]>,
    /// How many streams it holds replicas of.
    pub load: usize,
}

/// Why servers were passed over, worded as nats-server's
/// `selectPeerError`.
#[derive(Default)]
struct SelectError {
    offline: bool,
    exclude_tag: bool,
    missing: BTreeSet<String>,
    excluded: BTreeSet<String>,
}

impl SelectError {
    fn text(&self) -> String {
        let mut b = String::from("no suitable peers for placement");
        if self.offline {
            b.push_str(", peer offline");
        }
        if self.exclude_tag {
            b.push_str(", exclude tag set");
        }
        let list = |s: &BTreeSet<String>| {
            s.iter()
                .map(|t| format!("'{t}'"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        if !self.missing.is_empty() {
            b.push_str(&format!(", tags not matched [{}]", list(&self.missing)));
        }
        if !self.excluded.is_empty() {
            b.push_str(&format!(", tags excluded [{}]", list(&self.excluded)));
        }
        b
    }
}

/// The placement's tags, lowercase as nats-server compares them, each
/// with whether it excludes (`!tag`).
fn wanted_tags(cfg: &StreamConfig) -> Vec<(String, bool)> {
    cfg.placement
        .iter()
        .flat_map(|p| p.tags.iter())
        .map(|t| {
            let t = t.trim().to_lowercase();
            match t.strip_prefix('!') {
                Some(x) => (x.to_string(), true),
                None => (t, false),
            }
        })
        .collect()
}

/// `n` peers for a stream of `cfg` in cluster `cluster`, none of
/// `except`, from `candidates`: those that fit, the least loaded first,
/// ties broken by a hash of the stream's name so streams spread. 10005
/// with nats-server's reasons when too few fit.
pub fn place(
    cfg: &StreamConfig,
    cluster: &str,
    candidates: &[Candidate<'_>],
    except: &[u64],
    n: usize,
) -> Result<Vec<u64>, ApiError> {
    let wrong_cluster = cfg
        .placement
        .as_ref()
        .is_some_and(|p| !p.cluster.is_empty() && p.cluster != cluster);
    let wanted = wanted_tags(cfg);
    let mut why = SelectError::default();
    let mut fit: Vec<&Candidate<'_>> = Vec::new();
    for c in candidates {
        if except.contains(&c.id) || wrong_cluster {
            continue;
        }
        let Some(have) = c.tags else {
            why.offline = true;
            continue;
        };
        // nats-server's marker for a server that takes no assets.
        if have.iter().any(|t| t == "!jetstream") {
            why.exclude_tag = true;
            continue;
        }
        let refused = wanted
            .iter()
            .find(|(t, exclude)| *exclude == have.contains(t));
        match refused {
            Some((t, true)) => {
                why.excluded.insert(t.clone());
            }
            Some((t, false)) => {
                why.missing.insert(t.clone());
            }
            None => fit.push(c),
        }
    }
    if fit.len() < n {
        return Err(E::CLUSTER_NO_PEERS.with("err", why.text()));
    }
    let salt = cfg.name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    fit.sort_by_key(|c| (c.load, c.id.wrapping_mul(salt | 1)));
    let peers: Vec<u64> = fit.iter().take(n).map(|c| c.id).collect();
    debug_assert_eq!(peers.len(), n, "placed as many as asked");
    Ok(peers)
}

/// A stream's `peers` without `gone`, with a spare in its place if one
/// is up and holds none of the stream (the least loaded, then the
/// lowest id). `None` if `require`d and there is none, or if no peer
/// would be left.
pub fn remap(
    peers: &[u64],
    gone: u64,
    candidates: &[Candidate<'_>],
    require: bool,
) -> Option<Vec<u64>> {
    let spare = candidates
        .iter()
        .filter(|c| c.id != gone && !peers.contains(&c.id) && c.tags.is_some())
        .min_by_key(|c| (c.load, c.id))
        .map(|c| c.id);
    if spare.is_none() && require {
        return None;
    }
    let remapped: Vec<u64> = peers
        .iter()
        .filter_map(|&p| if p == gone { spare } else { Some(p) })
        .collect();
    (!remapped.is_empty()).then_some(remapped)
}

#[cfg(test)]
mod tests {
    use super::*;
    use jetstream::api::Placement;

    fn tags(t: &[&str]) -> Vec<String> {
        t.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn peers_fit_the_placement_and_the_least_loaded_go_first() {
        let (east, west, off) = (
            tags(&["east"]),
            tags(&["west", "ssd"]),
            tags(&["!jetstream"]),
        );
        let candidates = [
            Candidate {
                id: 1,
                tags: Some(&east),
                load: 5,
            },
            Candidate {
                id: 2,
                tags: Some(&west),
                load: 1,
            },
            Candidate {
                id: 3,
                tags: Some(&east),
                load: 0,
            },
            Candidate {
                id: 4,
                tags: None,
                load: 0,
            },
            Candidate {
                id: 5,
                tags: Some(&off),
                load: 0,
            },
        ];
        let mut cfg = StreamConfig {
            name: "S".into(),
            ..Default::default()
        };
        assert_eq!(place(&cfg, "c", &candidates, &[], 2), Ok(vec![3, 2]));
        cfg.placement = Some(Placement {
            tags: vec!["EAST".into()],
            ..Default::default()
        });
        assert_eq!(place(&cfg, "c", &candidates, &[], 2), Ok(vec![3, 1]));
        let err = place(&cfg, "c", &candidates, &[1], 2).unwrap_err();
        assert_eq!(
            err.description,
            "no suitable peers for placement, peer offline, exclude tag set, tags not matched ['east']"
        );
        cfg.placement = Some(Placement {
            tags: vec!["!east".into()],
            ..Default::default()
        });
        assert_eq!(place(&cfg, "c", &candidates, &[], 1), Ok(vec![2]));
        cfg.placement = Some(Placement {
            cluster: "other".into(),
            ..Default::default()
        });
        assert!(place(&cfg, "c", &candidates, &[], 1).is_err());
    }

    #[test]
    fn a_gone_peer_is_replaced_by_a_spare_that_is_up() {
        let t = tags(&[]);
        let candidates = [
            Candidate {
                id: 1,
                tags: Some(&t),
                load: 0,
            },
            Candidate {
                id: 2,
                tags: Some(&t),
                load: 0,
            },
            Candidate {
                id: 3,
                tags: None,
                load: 0,
            },
            Candidate {
                id: 4,
                tags: Some(&t),
                load: 3,
            },
            Candidate {
                id: 5,
                tags: Some(&t),
                load: 1,
            },
        ];
        assert_eq!(remap(&[1, 2, 3], 3, &candidates, true), Some(vec![1, 2, 5]));
        assert_eq!(remap(&[1, 2, 3, 4, 5], 3, &candidates, true), None);
        assert_eq!(
            remap(&[1, 2, 3, 4, 5], 3, &candidates, false),
            Some(vec![1, 2, 4, 5])
        );
        assert_eq!(remap(&[3], 3, &candidates[2..3], false), None);
    }
}
