//! `/ipqueuesz`: the server's internal queues that hold work, as
//! nats-server's `Ipqueuesz` lists its own: by name, what waits
//! (`pending`) and what is being worked on (`in_progress`, left out when
//! 0); only queues with something in them unless `all`, and only names
//! containing `queues` (`filter` in a `$SYS` request). flotilla's queues
//! are its own (a stream's inputs, the group committer), named in
//! nats-server's style where one corresponds.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::query::{Query, QueryError};

/// One queue's figures (nats-server's `IpqueueszStatusIPQ`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Queue {
    pub pending: usize,
    #[serde(skip_serializing_if = "is_zero")]
    pub in_progress: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// `queues` named by what they hold, as the query filters them.
pub fn ipqueuesz(
    queues: Vec<(String, Queue)>,
    q: &Query,
) -> Result<BTreeMap<String, Queue>, QueryError> {
    let all = q.bool("all")?;
    let filter = q.get("queues");
    Ok(queues
        .into_iter()
        .filter(|(_, q)| all || q.pending > 0 || q.in_progress > 0)
        .filter(|(name, _)| name.contains(filter))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_queues_only_with_all_and_names_by_filter() {
        let q = |pending| Queue {
            pending,
            in_progress: 0,
        };
        let queues = || vec![("a one".to_string(), q(0)), ("b two".to_string(), q(3))];
        let names = |query: &str| -> Vec<String> {
            ipqueuesz(queues(), &Query::parse(Some(query)))
                .unwrap()
                .into_keys()
                .collect()
        };
        assert_eq!(names(""), ["b two"]);
        assert_eq!(names("all=true"), ["a one", "b two"]);
        assert_eq!(names("all=true&queues=one"), ["a one"]);
        let json =
            serde_json::to_string(&ipqueuesz(queues(), &Query::parse(None)).unwrap()).unwrap();
        assert_eq!(json, r#"{"b two":{"pending":3}}"#);
    }
}
