//! Log lines for errors that repeat on a timer: a peer whose TLS
//! certificate is refused is redialed every 250 ms per lane by the Raft
//! transport and every second by its route, and each attempt fails the
//! same way. The first of each line is logged; the same line again only
//! once per window, saying how many were held back in between. The
//! caller keeps time ([`Repeats::admit`] takes `now`).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// How long the same line is held back after it was logged.
pub const WINDOW: Duration = Duration::from_secs(30);
/// Lines remembered at most; past it, those whose window is over are
/// forgotten (a scan from many addresses cannot grow the map for ever).
const MAX_LINES: usize = 1024;

/// The transport errors of this process: TLS handshakes on the route
/// port, inbound and dialed, routes' and the Raft transport's.
pub static TRANSPORT: std::sync::LazyLock<Repeats> = std::sync::LazyLock::new(Repeats::default);

pub struct Repeats {
    window: Duration,
    /// Line → (when it was last logged, repeats held back since).
    lines: Mutex<HashMap<String, (Instant, u64)>>,
}

impl Repeats {
    pub fn new(window: Duration) -> Repeats {
        Repeats {
            window,
            lines: Mutex::new(HashMap::new()),
        }
    }

    /// Whether `line` is logged now: `Some(held)` with the number of
    /// repeats held back since it was last logged, `None` to hold this
    /// one back too.
    pub fn admit(&self, line: &str, now: Instant) -> Option<u64> {
        let mut lines = self.lines.lock();
        if let Some((logged, held)) = lines.get_mut(line) {
            if now.saturating_duration_since(*logged) < self.window {
                *held += 1;
                return None;
            }
            let before = std::mem::take(held);
            *logged = now;
            return Some(before);
        }
        if lines.len() >= MAX_LINES {
            let window = self.window;
            lines.retain(|_, (logged, _)| now.saturating_duration_since(*logged) < window);
        }
        if lines.len() < MAX_LINES {
            lines.insert(line.to_string(), (now, 0));
        }
        debug_assert!(lines.len() <= MAX_LINES, "the map stays bounded");
        Some(0)
    }

    /// Logs `line` as an error unless a line of the same `kind` is held
    /// back (`kind` is the line without what differs between repeats,
    /// such as a dialing port); a line logged after repeats were held
    /// back says how many.
    pub fn error(&self, kind: &str, line: &str) {
        match self.admit(kind, Instant::now()) {
            Some(0) => tracing::error!("{line}"),
            Some(held) => tracing::error!(
                "{line} ({held} more like it in the last {}s)",
                self.window.as_secs()
            ),
            None => {}
        }
    }
}

impl Default for Repeats {
    fn default() -> Repeats {
        Repeats::new(WINDOW)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_repeats_once_per_window_with_its_count() {
        let r = Repeats::new(Duration::from_secs(30));
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_millis(s);
        assert_eq!(r.admit("a", at(0)), Some(0));
        // Every 250 ms for the rest of the window: held back.
        for ms in (250..30_000).step_by(250) {
            assert_eq!(r.admit("a", at(ms)), None, "at {ms} ms");
        }
        // Another line is its own.
        assert_eq!(r.admit("b", at(1_000)), Some(0));
        assert_eq!(r.admit("a", at(30_000)), Some(119));
        assert_eq!(r.admit("a", at(30_250)), None);
        assert_eq!(r.admit("a", at(60_000)), Some(1));
    }

    #[test]
    fn many_lines_do_not_grow_it_past_its_bound() {
        let r = Repeats::new(Duration::from_secs(1));
        let t0 = Instant::now();
        for i in 0..(3 * MAX_LINES) {
            let now = t0 + Duration::from_millis(i as u64);
            assert_eq!(r.admit(&format!("line {i}"), now), Some(0));
        }
        assert!(r.lines.lock().len() <= MAX_LINES);
    }
}
