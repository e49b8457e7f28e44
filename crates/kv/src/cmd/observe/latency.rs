//! The latency monitor (`LATENCY LATEST/HISTORY/RESET/DOCTOR`): with
//! `latency-monitor-threshold` above 0, each command that took at least that many
//! milliseconds is a sample of the event `command` (`fast-command` for a command flagged
//! `fast`), as in Redis. An event keeps its newest [`HISTORY`] samples, one a second (the
//! largest of that second), its latest and its largest; the events are few and fixed.
//!
//! Redis's other events (`fork`, `aof-*`, `expire-cycle`, `eviction-*`) come from work
//! `mojim kv` does not do, or does in steps too short to matter: they are never raised.

/// Samples an event keeps (Redis's `LATENCY_TS_LEN`).
pub const HISTORY: usize = 160;

/// The events `mojim kv` raises.
pub const EVENTS: [&str; 2] = ["command", "fast-command"];

/// One event's samples.
#[derive(Clone, Debug, Default)]
pub struct Event {
    /// (Unix seconds, milliseconds), oldest first, at most [`HISTORY`].
    samples: std::collections::VecDeque<(u64, u64)>,
    /// The largest sample since the last reset.
    max_ms: u64,
}

/// The monitored events.
#[derive(Clone, Debug, Default)]
pub struct Monitor {
    events: [Event; 2],
}

impl Monitor {
    /// Records a command that took `ms` (fast: flagged `fast`) at `time_s` if `threshold_ms`
    /// is above 0 and the command took at least that.
    pub fn offer(&mut self, time_s: u64, ms: u64, fast: bool, threshold_ms: u64) {
        if threshold_ms == 0 || ms < threshold_ms {
            return;
        }
        let ev = &mut self.events[usize::from(fast)];
        match ev.samples.back_mut() {
            Some((t, m)) if *t == time_s => *m = (*m).max(ms),
            _ => {
                if ev.samples.len() == HISTORY {
                    ev.samples.pop_front();
                }
                ev.samples.push_back((time_s, ms));
            }
        }
        ev.max_ms = ev.max_ms.max(ms);
    }

    /// Events with samples: name, time and milliseconds of the latest, the largest.
    pub fn latest(&self) -> Vec<(&'static str, u64, u64, u64)> {
        EVENTS
            .iter()
            .zip(&self.events)
            .filter_map(|(n, e)| e.samples.back().map(|&(t, ms)| (*n, t, ms, e.max_ms)))
            .collect()
    }

    /// The samples of `name`, oldest first (none for an event never raised).
    pub fn history(&self, name: &[u8]) -> Vec<(u64, u64)> {
        match EVENTS.iter().position(|n| n.as_bytes().eq_ignore_ascii_case(name)) {
            Some(i) => self.events[i].samples.iter().copied().collect(),
            None => Vec::new(),
        }
    }

    /// Forgets the samples of the events named (every event when none is), returning how many
    /// events with samples were reset.
    pub fn reset<'a>(&mut self, names: impl Iterator<Item = &'a [u8]>) -> usize {
        let mut names = names.peekable();
        let all = names.peek().is_none();
        let chosen: Vec<usize> = if all {
            (0..EVENTS.len()).collect()
        } else {
            names.filter_map(|n| EVENTS.iter().position(|e| e.as_bytes().eq_ignore_ascii_case(n))).collect()
        };
        let mut reset = 0;
        for i in chosen {
            let e = &mut self.events[i];
            if !e.samples.is_empty() {
                reset += 1;
            }
            *e = Event::default();
        }
        reset
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_above_the_threshold_one_a_second() {
        let mut m = Monitor::default();
        m.offer(100, 50, false, 0);
        assert!(m.latest().is_empty(), "a threshold of 0 monitors nothing");
        m.offer(100, 5, false, 10);
        assert!(m.latest().is_empty(), "under the threshold");
        m.offer(100, 20, false, 10);
        m.offer(100, 30, false, 10);
        m.offer(101, 15, false, 10);
        m.offer(101, 12, true, 10);
        assert_eq!(m.latest(), vec![("command", 101, 15, 30), ("fast-command", 101, 12, 12)]);
        assert_eq!(m.history(b"COMMAND"), vec![(100, 30), (101, 15)]);
        assert_eq!(m.history(b"fork"), vec![]);
        for t in 0..200 {
            m.offer(1000 + t, 11, false, 10);
        }
        assert_eq!(m.history(b"command").len(), HISTORY);
        assert_eq!(m.reset([&b"command"[..], b"nosuch"].into_iter()), 1);
        assert_eq!(m.reset(std::iter::empty()), 1);
        assert!(m.latest().is_empty());
    }
}
