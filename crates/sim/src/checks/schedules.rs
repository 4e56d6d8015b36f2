//! Message schedules, at the end: every replica stored the same fired
//! copies at the same sequences (a schedule fires inside an applied
//! `Tick`, never by a replica's own clock), a one-shot schedule fired at
//! most once, and a repeating one never twice for the same time.

use std::collections::BTreeMap;

use jetstream::headers;

use crate::{live_seqs, Sim, Violation};

/// A fired copy: its sequence, the schedule that fired it, and the
/// `Nats-Schedule-Next` it carries.
type Fired = (u64, String, String);

impl Sim {
    /// Checks the fired copies; returns how many the first replica holds.
    pub(crate) fn check_schedules(&self) -> Result<u64, Violation> {
        let mut first: Option<(u64, Vec<Fired>)> = None;
        for s in &self.servers {
            let Some(st) = s.wq() else { continue };
            let store = st.stream().store();
            let fired: Vec<Fired> = live_seqs(st)
                .into_iter()
                .filter_map(|seq| {
                    let m = store.get(seq).ok().flatten()?;
                    let h = m.headers.as_deref()?;
                    let scheduler = headers::get(h, "Nats-Scheduler")?.to_string();
                    let next = headers::get(h, "Nats-Schedule-Next")?.to_string();
                    Some((seq, scheduler, next))
                })
                .collect();
            self.check_fired_once(s.id, &fired)?;
            match &first {
                None => first = Some((s.id, fired)),
                Some((id, want)) if *want != fired => {
                    return Err(self.violation(format!(
                        "server {} fired {} copies, server {id} {}: first difference {:?} / {:?}",
                        s.id,
                        fired.len(),
                        want.len(),
                        fired.iter().zip(want).find(|(a, b)| a != b),
                        (fired.len() != want.len()).then_some("lengths differ"),
                    )));
                }
                Some(_) => {}
            }
        }
        Ok(first.map_or(0, |(_, fired)| fired.len() as u64))
    }

    fn check_fired_once(&self, server: u64, fired: &[Fired]) -> Result<(), Violation> {
        let mut by_schedule: BTreeMap<&str, Vec<i64>> = BTreeMap::new();
        for (_, scheduler, next) in fired {
            let at = jetstream::api::time::parse_signed(next).unwrap_or(0);
            by_schedule.entry(scheduler).or_default().push(at);
        }
        for (scheduler, times) in by_schedule {
            let repeats = self.schedules_sent.get(scheduler).copied();
            let twice = match repeats {
                Some(false) => times.len() > 1,
                _ => times.windows(2).any(|w| w[1] <= w[0]),
            };
            if twice {
                return Err(self.violation(format!(
                    "server {server}: schedule {scheduler} (repeating: {repeats:?}) fired twice: {times:?}"
                )));
            }
        }
        Ok(())
    }
}
