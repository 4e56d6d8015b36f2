//! What one run measured, as a table row for people and a JSON line for
//! scripts (the compare script reads only the JSON).

use std::time::Duration;

use serde::Serialize;

/// Latency percentiles in microseconds, nearest-rank over every sample.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Latency {
    pub samples: usize,
    pub p50_us: f64,
    pub p90_us: f64,
    pub p99_us: f64,
    pub max_us: f64,
}

impl Latency {
    /// `None` when there is nothing to rank.
    pub fn from_samples(mut samples: Vec<Duration>) -> Option<Latency> {
        if samples.is_empty() {
            return None;
        }
        samples.sort_unstable();
        let rank = |q: f64| {
            // Nearest rank: the smallest sample with at least q of all at or below it.
            let i = ((q * samples.len() as f64).ceil() as usize).clamp(1, samples.len()) - 1;
            samples[i].as_secs_f64() * 1e6
        };
        Some(Latency {
            samples: samples.len(),
            p50_us: rank(0.50),
            p90_us: rank(0.90),
            p99_us: rank(0.99),
            max_us: samples[samples.len() - 1].as_secs_f64() * 1e6,
        })
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub scenario: String,
    pub url: String,
    /// What the server says it is, from its INFO.
    pub server: String,
    pub msg_size: usize,
    pub msgs: u64,
    pub pubs: usize,
    pub subs: usize,
    pub in_flight: usize,
    pub replicas: usize,
    pub elapsed_s: f64,
    /// Operations completed per second: messages published (and, for
    /// the consuming scenarios, consumed), requests answered, keys put.
    pub msgs_per_sec: f64,
    /// Messages received by all subscribers together per second.
    pub delivered_per_sec: f64,
    pub mb_per_sec: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latency: Option<Latency>,
}

impl Report {
    pub fn json(&self) -> String {
        serde_json::to_string(self).expect("a report is plain data")
    }

    pub const TABLE_HEADER: &'static str =
        "scenario        size    msgs      pubs subs infl  R   msgs/s        MB/s     p50 us   p90 us   p99 us   max us";

    pub fn table_row(&self) -> String {
        let lat = |f: fn(&Latency) -> f64| {
            self.latency
                .as_ref()
                .map(|l| format!("{:>8.0}", f(l)))
                .unwrap_or_else(|| format!("{:>8}", "-"))
        };
        format!(
            "{:<15} {:<7} {:<9} {:<4} {:<4} {:<5} {:<2} {:>12.0} {:>8.1} {} {} {} {}",
            self.scenario,
            self.msg_size,
            self.msgs,
            self.pubs,
            self.subs,
            self.in_flight,
            self.replicas,
            self.msgs_per_sec,
            self.mb_per_sec,
            lat(|l| l.p50_us),
            lat(|l| l.p90_us),
            lat(|l| l.p99_us),
            lat(|l| l.max_us),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let s: Vec<Duration> = (1..=100).rev().map(Duration::from_micros).collect();
        let l = Latency::from_samples(s).unwrap();
        assert_eq!(
            (l.p50_us, l.p90_us, l.p99_us, l.max_us),
            (50.0, 90.0, 99.0, 100.0)
        );
        let one = Latency::from_samples(vec![Duration::from_micros(7)]).unwrap();
        assert_eq!((one.p50_us, one.p99_us), (7.0, 7.0));
        assert!(Latency::from_samples(Vec::new()).is_none());
    }
}
