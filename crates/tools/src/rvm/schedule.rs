//! When the example programs commit, when a failure is injected, and what a run reports.
//!
//! A program advances in numbered steps (DGEMV's iterations, the k-mer program's insertions and
//! probes), 1 to `total`. It commits after every `commit_every`-th step and after the last. An
//! injected failure happens after a step whose number is a multiple of `fail_every`, before
//! that step's commit: the memory is closed without committing (losing every store since the
//! last commit) and opened again, which recovers the last commit; the program goes on from
//! there. Each step fails at most once, so a run always ends.

use std::time::Duration;

/// When to commit and when to fail, in steps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Schedule {
    /// Commit after every this many steps, and after the last.
    pub commit_every: u64,
    /// Inject a failure after every step whose number is a multiple of this (before its
    /// commit); `None`: never.
    pub fail_every: Option<u64>,
}

impl Schedule {
    /// Checks the settings; the error names the bad one (`--commit-every`, `--fail-every`).
    pub fn check(&self) -> Result<(), String> {
        if self.commit_every == 0 {
            return Err("--commit-every 0: commit after every N steps, N at least 1".into());
        }
        if self.fail_every == Some(0) {
            return Err("--fail-every 0: fail after every N steps, N at least 1 (or leave it out)".into());
        }
        Ok(())
    }

    /// Whether step `step` of `total` ends with a commit.
    pub fn commit_after(&self, step: u64, total: u64) -> bool {
        step.is_multiple_of(self.commit_every) || step == total
    }
}

/// Injects the failures of a [`Schedule`]: remembers which steps failed already.
#[derive(Debug)]
pub struct Injector {
    every: Option<u64>,
    /// The highest step a failure was injected after.
    last: u64,
    /// Failures injected so far.
    pub failures: u64,
}

impl Injector {
    /// An injector for `fail_every`.
    pub fn new(fail_every: Option<u64>) -> Injector {
        Injector { every: fail_every, last: 0, failures: 0 }
    }

    /// Whether to fail now, after step `step`: a multiple of `fail_every` not failed after yet.
    pub fn due(&mut self, step: u64) -> bool {
        match self.every {
            Some(f) if step.is_multiple_of(f) && step > self.last => {
                self.last = step;
                self.failures += 1;
                true
            }
            _ => false,
        }
    }
}

/// What happens during a run, for progress output.
#[derive(Clone, Debug)]
pub enum Event {
    /// The state was created empty (`fresh`: an old one was discarded first).
    Started {
        /// Whether an earlier state was discarded.
        discarded: bool,
    },
    /// The state was recovered at step `step` of `total`.
    Resumed {
        /// Steps the recovered state had committed.
        step: u64,
        /// Steps in all.
        total: u64,
        /// How long the open took (connecting and reading the state back).
        open: Duration,
    },
    /// A commit after step `step` returned: that step is durable.
    Committed {
        /// The step.
        step: u64,
        /// Steps in all.
        total: u64,
    },
    /// A failure was injected after step `step`.
    Failed {
        /// The step.
        step: u64,
    },
}

/// How a run went, for the benchmark.
#[derive(Clone, Debug, Default)]
pub struct Outcome {
    /// From the first open to the answer (the input, generated before, not included).
    pub total: Duration,
    /// Each commit's time (or each checkpoint's, for a file), in order.
    pub commits: Vec<Duration>,
    /// Each recovery's time after an injected failure (close and open).
    pub recoveries: Vec<Duration>,
    /// Failures injected.
    pub failures: u64,
    /// Steps executed, those run again after a failure included.
    pub steps_run: u64,
    /// Pages the commits sent, in all (or the checkpoints wrote).
    pub pages_sent: u64,
    /// Pages of the program's state (the recoverable blocks, or the file).
    pub state_pages: u64,
    /// The backend (`mojim`, `redis`; empty for a file) and how it found written pages.
    pub backend: &'static str,
    /// `uffd-async` or `mprotect` (empty for a file).
    pub tracking: &'static str,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_multiple_fails_once_and_commits_end_every_run() {
        let s = Schedule { commit_every: 3, fail_every: Some(2) };
        assert!(s.check().is_ok());
        assert!(s.commit_after(3, 10) && s.commit_after(10, 10) && !s.commit_after(4, 10));
        let mut inj = Injector::new(s.fail_every);
        assert!(!inj.due(1));
        assert!(inj.due(2));
        assert!(!inj.due(1) && !inj.due(2), "after recovery, step 2 runs again without failing");
        assert!(inj.due(4));
        assert_eq!(inj.failures, 2);
        assert!(!Injector::new(None).due(4));
    }

    #[test]
    fn zero_rates_are_refused_by_name() {
        let e = Schedule { commit_every: 0, fail_every: None }.check().unwrap_err();
        assert!(e.contains("--commit-every 0"), "{e}");
        let e = Schedule { commit_every: 1, fail_every: Some(0) }.check().unwrap_err();
        assert!(e.contains("--fail-every 0"), "{e}");
    }
}
