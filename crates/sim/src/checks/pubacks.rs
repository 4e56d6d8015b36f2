//! Publishes with message ids, at the end.

use std::collections::BTreeMap;

use crate::{live_seqs, Sim, Violation};

impl Sim {
    /// Every acknowledged publish is stored exactly once, at the sequence
    /// its PubAck named, on every replica.
    pub(crate) fn check_pubacks(&self) -> Result<(), Violation> {
        for s in &self.servers {
            let Some(st) = s.wq() else { continue };
            let store = st.stream().store();
            let mut count: BTreeMap<String, u64> = BTreeMap::new();
            for seq in live_seqs(st) {
                if let Ok(Some(m)) = store.get(seq) {
                    if let Some(id) = m
                        .headers
                        .as_deref()
                        .and_then(|h| jetstream::headers::get(h, "Nats-Msg-Id"))
                    {
                        *count.entry(id.to_string()).or_default() += 1;
                    }
                }
            }
            for (id, &seq) in &self.id_acked {
                let here = store.get(seq).ok().flatten().and_then(|m| {
                    m.headers
                        .as_deref()
                        .and_then(|h| jetstream::headers::get(h, "Nats-Msg-Id").map(str::to_string))
                });
                if here.as_deref() != Some(id.as_str()) || count.get(id) != Some(&1) {
                    return Err(self.violation(format!(
                        "publish {id} acknowledged at {seq}: server {} has {here:?} there and {:?} copies",
                        s.id,
                        count.get(id)
                    )));
                }
            }
        }
        Ok(())
    }
}
