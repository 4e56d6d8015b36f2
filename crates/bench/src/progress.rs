//! Counting work toward a target: workers bump a shared counter, the one
//! that reaches the target stamps the end time, and a timer redraws a
//! progress bar on stderr. The message path pays one atomic add.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use tokio::sync::Notify;

use crate::{Error, Result};

#[derive(Clone)]
pub struct Progress(Arc<Inner>);

struct Inner {
    done: AtomicU64,
    target: u64,
    end: Mutex<Option<Instant>>,
    reached: Notify,
    bar: ProgressBar,
    ticker: tokio::task::JoinHandle<()>,
}

impl Progress {
    /// Counts toward `target`; draws only when `show` and stderr is a
    /// terminal (indicatif hides itself otherwise).
    pub fn start(label: &str, target: u64, show: bool) -> Progress {
        let draw = if show {
            ProgressDrawTarget::stderr()
        } else {
            ProgressDrawTarget::hidden()
        };
        let bar = ProgressBar::with_draw_target(Some(target), draw);
        bar.set_style(
            ProgressStyle::with_template("{prefix:>10} [{bar:40}] {pos}/{len} {per_sec} eta {eta}")
                .expect("a fixed template")
                .progress_chars("=> "),
        );
        bar.set_prefix(label.to_string());
        let done = AtomicU64::new(0);
        Progress(Arc::new_cyclic(|weak: &std::sync::Weak<Inner>| {
            let weak = weak.clone();
            let ticker = tokio::spawn(async move {
                loop {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    let Some(p) = weak.upgrade() else { return };
                    p.bar.set_position(p.done.load(Ordering::Relaxed));
                }
            });
            Inner {
                done,
                target,
                end: Mutex::new(None),
                reached: Notify::new(),
                bar,
                ticker,
            }
        }))
    }

    pub fn add(&self, n: u64) {
        let before = self.0.done.fetch_add(n, Ordering::Relaxed);
        if before < self.0.target && before + n >= self.0.target {
            *self.0.end.lock().expect("never poisoned") = Some(Instant::now());
            self.0.reached.notify_one();
        }
    }

    pub fn get(&self) -> u64 {
        self.0.done.load(Ordering::Relaxed)
    }

    /// When the target was reached; fails once nothing has been counted
    /// for `stall`.
    pub async fn wait(&self, scenario: &'static str, stall: Duration) -> Result<Instant> {
        let mut last = self.get();
        loop {
            if let Some(end) = *self.0.end.lock().expect("never poisoned") {
                return Ok(end);
            }
            tokio::select! {
                _ = self.0.reached.notified() => {}
                _ = tokio::time::sleep(stall) => {
                    let now = self.get();
                    if now == last {
                        return Err(Error::Stalled { scenario, got: now, want: self.0.target, stall });
                    }
                    last = now;
                }
            }
        }
    }

    pub fn finish(&self) {
        self.0.ticker.abort();
        self.0.bar.finish_and_clear();
    }
}
