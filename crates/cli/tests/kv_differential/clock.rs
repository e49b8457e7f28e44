//! The expiry instants ("ticks") of the keys that expire while the test runs, and the rule
//! that keeps the servers from disagreeing about them: they run each command milliseconds
//! apart, so a *timed* step (one that names such a key, or the whole keyspace) is sent only when
//! it can end before the next tick, and is not compared if it came near one anyway.

use std::collections::VecDeque;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Milliseconds since 1970, the clock both servers read.
pub fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).expect("after 1970").as_millis() as u64
}

/// How far from an expiry instant a timed step must stay: the servers read the same clock,
/// in milliseconds.
const GUARD_MS: u64 = 15;

/// The expiry instants ("ticks") handed out, and how long a timed step may take.
pub struct Clock {
    ticks: Vec<u64>,
    /// A timed step starts only this long (and `GUARD_MS`) before the next tick.
    lead_ms: u64,
    recent_ms: VecDeque<u64>,
}

impl Clock {
    pub fn new() -> Clock {
        Clock { ticks: Vec::new(), lead_ms: 150, recent_ms: VecDeque::new() }
    }

    /// The tick for an expiry set now: a whole second (EXAT takes seconds) far enough ahead
    /// that a step started now ends before it.
    pub fn tick(&mut self) -> u64 {
        let t = (now_ms() + self.lead_ms + 2 * GUARD_MS).div_ceil(1000) * 1000;
        if !self.ticks.contains(&t) {
            self.ticks.push(t);
        }
        t
    }

    /// Waits, if a tick is near, until it has passed; whether it waited.
    pub fn wait_clear(&mut self) -> bool {
        let mut waited = false;
        loop {
            let now = now_ms();
            self.ticks.retain(|&t| t + GUARD_MS >= now);
            match self.ticks.iter().min() {
                Some(&t) if t <= now + self.lead_ms + GUARD_MS => {
                    std::thread::sleep(Duration::from_millis(t + GUARD_MS + 1 - now.min(t + GUARD_MS)));
                    waited = true;
                }
                _ => return waited,
            }
        }
    }

    /// Whether a step that ran from `from` to `to` came near a tick.
    pub fn overlapped(&self, from: u64, to: u64) -> bool {
        self.ticks.iter().any(|&t| from <= t + GUARD_MS && t <= to + GUARD_MS)
    }

    /// Learns how long timed steps take: the lead is twice the longest of the last 64.
    pub fn record(&mut self, ms: u64) {
        self.recent_ms.push_back(ms);
        if self.recent_ms.len() > 64 {
            self.recent_ms.pop_front();
        }
        let max = self.recent_ms.iter().copied().max().unwrap_or(0);
        self.lead_ms = (2 * max).clamp(150, 700);
    }
}
