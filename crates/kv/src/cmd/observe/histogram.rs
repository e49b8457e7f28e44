//! A command's latency histogram (`mojim_metrics::LogHistogram`: a fixed array of counts, no
//! allocation when a value is recorded), for `INFO latencystats` (percentiles) and `LATENCY
//! HISTOGRAM` (cumulative counts at powers of two).
//!
//! Values are nanoseconds. Below 16 ns each value has its own bucket; from there each power
//! of two is split into 8 equal buckets, so a bucket is at most 1/8 (12.5 %) of its values
//! wide, up to 2^[`TOP`] ns (about 9.8 hours), where the last bucket takes every larger
//! value.

/// The power of two of the largest value told apart.
const TOP: u32 = 45;
/// Buckets in all: 16 exact ones, then 8 for each power of two from 2^4 to 2^[`TOP`].
pub const BUCKETS: usize = 16 + (TOP as usize - 4 + 1) * 8;

/// Nanoseconds in buckets 1/8 of a power of two wide, a power of two's bound excluding itself.
type Buckets = mojim_metrics::LogHistogram<BUCKETS, 3, 1, false>;

/// Counts of recorded durations by bucket, and their sum.
#[derive(Clone, Debug, Default)]
pub struct Histogram(Buckets);

impl Histogram {
    /// Records one duration.
    pub fn record(&mut self, ns: u64) {
        self.0.record_mut(ns);
    }

    /// Durations recorded.
    pub fn total(&self) -> u64 {
        self.0.count()
    }

    /// Their sum, in nanoseconds.
    pub fn sum_ns(&self) -> u64 {
        self.0.sum()
    }

    /// Forgets every count (its array is kept).
    pub fn reset(&mut self) {
        self.0.reset();
    }

    /// The value under which `p` percent of the durations fall (the largest value of the
    /// bucket that holds the one at that rank), in nanoseconds; 0 when none was recorded.
    pub fn percentile(&self, p: f64) -> u64 {
        self.0.quantile(p / 100.0).unwrap_or(0)
    }

    /// The durations of at most 2^k − 1 ns (below 2^k), for each k of `powers`: the cumulative
    /// buckets of a Prometheus histogram whose bounds are those values (each a bucket boundary
    /// here, so the counts are exact).
    pub fn below_powers(
        &self,
        powers: std::ops::RangeInclusive<u32>,
    ) -> impl Iterator<Item = (u32, u64)> + '_ {
        let ks = powers.clone();
        ks.zip(self.0.below_powers(powers)).map(|(k, (_, n))| (k, n))
    }

    /// `LATENCY HISTOGRAM`'s buckets, as Redis gives them: for each power of two from 1024 ns,
    /// the bound in microseconds (the power of two over 1000) and the durations below it, where
    /// that count grew, until it reaches every duration.
    pub fn cumulative_usec(&self) -> Vec<(u64, u64)> {
        let total = self.total();
        let mut out = Vec::new();
        let mut last = 0;
        for (k, seen) in self.below_powers(10..=TOP + 1) {
            // The last bucket's nominal top is 2^(TOP+1) - 1: every duration counts there.
            let seen = if k == TOP + 1 { total } else { seen };
            if seen > last {
                out.push(((1u64 << k) / 1000, seen));
                last = seen;
            }
            if seen == total {
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
