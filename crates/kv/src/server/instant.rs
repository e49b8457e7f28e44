//! INFO's `instantaneous_*` rates, as Redis computes them: every 100 ms a sample of the
//! commands run and the bytes read and written since the one before, as a rate a second; the
//! rate given is the mean of the last [`SAMPLES`].

use crate::cmd::Stats;
use std::time::{Duration, Instant};

/// Samples averaged (Redis's `STATS_METRIC_SAMPLES`).
const SAMPLES: usize = 16;
/// Time between two samples.
pub const EVERY: Duration = Duration::from_millis(100);

/// One rate's samples.
#[derive(Clone, Debug, Default)]
struct Rate {
    samples: [f64; SAMPLES],
    next: usize,
    last: u64,
}

impl Rate {
    fn sample(&mut self, total: u64, secs: f64) {
        // A reset (CONFIG RESETSTAT) makes the total smaller: that sample counts from 0.
        let delta = total.checked_sub(self.last).unwrap_or(total);
        self.samples[self.next] = delta as f64 / secs;
        self.next = (self.next + 1) % SAMPLES;
        self.last = total;
    }

    fn mean(&self) -> f64 {
        self.samples.iter().sum::<f64>() / SAMPLES as f64
    }
}

/// The rates of commands and of bytes in and out.
#[derive(Clone, Debug)]
pub struct Rates {
    at: Instant,
    ops: Rate,
    input: Rate,
    output: Rate,
}

impl Default for Rates {
    fn default() -> Self {
        Rates { at: Instant::now(), ops: Rate::default(), input: Rate::default(), output: Rate::default() }
    }
}

impl Rates {
    /// Takes a sample of `stats` if [`EVERY`] has passed since the last.
    pub fn sample(&mut self, stats: &Stats) {
        let secs = self.at.elapsed().as_secs_f64();
        if secs < EVERY.as_secs_f64() {
            return;
        }
        self.at = Instant::now();
        self.ops.sample(stats.commands, secs);
        self.input.sample(stats.net_input_bytes, secs);
        self.output.sample(stats.net_output_bytes, secs);
    }

    /// Writes the rates into `stats` (operations a second; KiB a second).
    pub fn fill(&self, stats: &mut Stats) {
        stats.ops_per_sec = self.ops.mean().round() as u64;
        stats.input_kbps = self.input.mean() / 1024.0;
        stats.output_kbps = self.output.mean() / 1024.0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mean_of_the_samples_and_a_reset() {
        let mut r = Rate::default();
        r.sample(100, 0.1);
        assert_eq!(r.mean(), 1000.0 / SAMPLES as f64);
        for i in 2..=SAMPLES as u64 + 1 {
            r.sample(100 * i, 0.1);
        }
        assert_eq!(r.mean(), 1000.0, "every kept sample is 100 in 0.1 s");
        r.sample(50, 0.1);
        assert_eq!(r.samples[(r.next + SAMPLES - 1) % SAMPLES], 500.0, "after a reset it counts from 0");
    }
}
