//! A command's latency histogram: a fixed array of counts (no allocation when a value is
//! recorded), for `INFO latencystats` (percentiles) and `LATENCY HISTOGRAM` (cumulative counts
//! at powers of two).
//!
//! Values are nanoseconds. Below [`EXACT`] each value has its own bucket; from there each power
//! of two is split into [`SUBS`] equal buckets, so a bucket is at most 1/8 (12.5 %) of its
//! values wide, up to 2^[`TOP`] ns (about 9.8 hours), where the last bucket takes every larger
//! value.

/// Values with a bucket of their own (0 .. 15 ns).
const EXACT: u64 = 16;
/// Buckets a power of two is split into (its first three bits after the leading one).
const SUBS: usize = 8;
/// The power of two of the largest value told apart.
const TOP: u32 = 45;
/// Buckets in all.
pub const BUCKETS: usize = EXACT as usize + (TOP as usize - 4 + 1) * SUBS;

/// Counts of recorded durations by bucket.
#[derive(Clone, Debug)]
pub struct Histogram {
    counts: [u64; BUCKETS],
    total: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram { counts: [0; BUCKETS], total: 0 }
    }
}

/// The bucket of `ns`.
fn bucket(ns: u64) -> usize {
    if ns < EXACT {
        return ns as usize;
    }
    let e = (63 - ns.leading_zeros()).min(TOP);
    if e == TOP && ns >> TOP > 1 {
        return BUCKETS - 1;
    }
    let sub = ((ns >> (e - 3)) & (SUBS as u64 - 1)) as usize;
    EXACT as usize + (e as usize - 4) * SUBS + sub
}

/// The largest value bucket `b` holds.
fn upper(b: usize) -> u64 {
    if b < EXACT as usize {
        return b as u64;
    }
    let e = ((b - EXACT as usize) / SUBS + 4) as u32;
    let sub = ((b - EXACT as usize) % SUBS) as u64;
    ((SUBS as u64 + sub + 1) << (e - 3)) - 1
}

impl Histogram {
    /// Records one duration.
    pub fn record(&mut self, ns: u64) {
        self.counts[bucket(ns)] += 1;
        self.total += 1;
    }

    /// Durations recorded.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Forgets every count (its array is kept).
    pub fn reset(&mut self) {
        self.counts = [0; BUCKETS];
        self.total = 0;
    }

    /// The value under which `p` percent of the durations fall (the largest value of the
    /// bucket that holds the one at that rank), in nanoseconds; 0 when none was recorded.
    pub fn percentile(&self, p: f64) -> u64 {
        if self.total == 0 {
            return 0;
        }
        let rank = ((p / 100.0 * self.total as f64).ceil() as u64).clamp(1, self.total);
        let mut seen = 0;
        for (b, &n) in self.counts.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return upper(b);
            }
        }
        upper(BUCKETS - 1)
    }

    /// The durations of at most 2^k − 1 ns (below 2^k), for each k of `powers`: the cumulative
    /// buckets of a Prometheus histogram whose bounds are those values (each a bucket boundary
    /// here, so the counts are exact).
    pub fn below_powers(
        &self,
        powers: std::ops::RangeInclusive<u32>,
    ) -> impl Iterator<Item = (u32, u64)> + '_ {
        let (mut seen, mut at) = (0u64, 0usize);
        powers.map(move |k| {
            let bound = 1u64 << k.min(TOP);
            while at < BUCKETS - 1 && upper(at) < bound {
                seen += self.counts[at];
                at += 1;
            }
            (k, seen)
        })
    }

    /// `LATENCY HISTOGRAM`'s buckets, as Redis gives them: for each power of two from 1024 ns,
    /// the bound in microseconds (the power of two over 1000) and the durations below it, where
    /// that count grew, until it reaches every duration.
    pub fn cumulative_usec(&self) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        let (mut seen, mut at, mut last) = (0u64, 0usize, 0u64);
        for k in 10..=TOP + 1 {
            let bound = 1u64 << k;
            // Every bucket whose values are all below the bound.
            while at < BUCKETS && upper(at) < bound {
                seen += self.counts[at];
                at += 1;
            }
            if seen > last {
                out.push((bound / 1000, seen));
                last = seen;
            }
            if seen == self.total {
                break;
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_hold_their_values_and_follow_each_other() {
        for ns in (0..5000).chain([1 << 20, (1 << 20) + 1, (1 << 30) - 1, 1 << 40, (1 << 45) + 5]) {
            let b = bucket(ns);
            assert!(ns <= upper(b), "{ns} in bucket {b} whose top is {}", upper(b));
            if b > 0 && b < BUCKETS - 1 {
                assert!(ns > upper(b - 1), "{ns} belongs after bucket {}", b - 1);
            }
        }
        for b in 1..BUCKETS - 1 {
            assert_eq!(bucket(upper(b - 1) + 1), b, "bucket {b} starts after {}", upper(b - 1));
        }
        assert_eq!(bucket(u64::MAX), BUCKETS - 1);
        // At most an eighth of its values wide, above the exact ones.
        for b in EXACT as usize + 1..BUCKETS - 1 {
            let (lo, hi) = (upper(b - 1) + 1, upper(b));
            assert!((hi - lo + 1) * 8 <= lo, "bucket {b}: {lo}..={hi}");
        }
    }

    #[test]
    fn percentiles_and_the_cumulative_buckets() {
        let mut h = Histogram::default();
        assert_eq!((h.percentile(50.0), h.cumulative_usec()), (0, vec![]));
        // 98 durations of 1.5 us, one of 100 us, one of 3 ms.
        for _ in 0..98 {
            h.record(1500);
        }
        h.record(100_000);
        h.record(3_000_000);
        assert_eq!(h.total(), 100);
        let p50 = h.percentile(50.0);
        assert!((1500..=1500 + 1500 / 8).contains(&p50), "{p50}");
        let p99 = h.percentile(99.0);
        assert!((100_000..=112_500).contains(&p99), "{p99}");
        let p999 = h.percentile(99.9);
        assert!((3_000_000..=3_375_000).contains(&p999), "{p999}");
        // Below 2048 ns (2 us): 98; below 131072 ns (131 us): 99; below 4194304 (4194 us): all.
        assert_eq!(h.cumulative_usec(), vec![(2, 98), (131, 99), (4194, 100)]);
        let below: Vec<_> = h.below_powers(10..=23).collect();
        assert_eq!(below[0], (10, 0), "none below 1024 ns");
        assert_eq!(below[1], (11, 98), "1500 ns is below 2048");
        assert_eq!(below[7], (17, 99), "100 us is below 2^17 ns");
        assert_eq!(below[13], (23, 100), "3 ms is below 2^23 ns");
        let mut edge = Histogram::default();
        edge.record(1023);
        edge.record(1024);
        assert_eq!(edge.below_powers(10..=11).collect::<Vec<_>>(), vec![(10, 1), (11, 2)]);
        h.reset();
        assert_eq!((h.total(), h.percentile(99.0)), (0, 0));
    }
}
