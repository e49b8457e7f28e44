//! A histogram with fixed log-spaced buckets: an array of counters fixed at compile time, so
//! that recording a value takes no lock and allocates nothing.
//!
//! A value `x` (a count of some unit: nanoseconds, commands) is first reduced to `v`: `x /
//! UNIT` when a bound excludes itself (`INCLUSIVE = false`: the bucket of bound `B` holds the
//! values below `B`), `(x - 1) / UNIT` when it includes itself (the values at most `B`, as
//! Prometheus's `le` says). The buckets then split `v`'s range by powers of two: below `2 ×
//! 2^SUB_BITS` every `v` has a bucket of its own; from there each power of two is split into
//! `2^SUB_BITS` equal buckets (with `SUB_BITS = 3`, a bucket is at most 1/8 of its values
//! wide). The last of the `N` buckets takes every larger value.
//!
//! Each power of two `2^k` of `v` is a bucket boundary, so the cumulative count at the bound
//! `UNIT × 2^k` (less 1 when bounds exclude themselves) is exact: [`LogHistogram::below_powers`]
//! gives those counts, the `_bucket` samples of a Prometheus histogram
//! ([`crate::Exposition::histogram`]).
//!
//! Threads that share a histogram record with [`LogHistogram::record`] (relaxed atomic adds);
//! its one owner can use [`LogHistogram::record_mut`] (plain adds through `&mut`).

use std::sync::atomic::{AtomicU64, Ordering};

/// Counts of values by bucket, and their sum.
pub struct LogHistogram<const N: usize, const SUB_BITS: u32, const UNIT: u64, const INCLUSIVE: bool> {
    counts: [AtomicU64; N],
    sum: AtomicU64,
}

impl<const N: usize, const SUB_BITS: u32, const UNIT: u64, const INCLUSIVE: bool>
    LogHistogram<N, SUB_BITS, UNIT, INCLUSIVE>
{
    /// Buckets a power of two is split into.
    const SUBS: u64 = 1 << SUB_BITS;
    /// Values of `v` with a bucket of their own.
    const EXACT: u64 = 2 * Self::SUBS;
    /// The layout is sound: at least the exact buckets and one more, and a unit.
    const CHECK: () = assert!(N as u64 > Self::EXACT && UNIT > 0 && SUB_BITS < 16);

    /// An empty histogram.
    pub const fn new() -> Self {
        #[allow(clippy::let_unit_value)]
        let () = Self::CHECK;
        LogHistogram { counts: [const { AtomicU64::new(0) }; N], sum: AtomicU64::new(0) }
    }

    /// `x` reduced to the value the buckets split.
    #[inline]
    fn reduced(x: u64) -> u64 {
        if INCLUSIVE {
            x.saturating_sub(1) / UNIT
        } else {
            x / UNIT
        }
    }

    /// The bucket of `x`.
    #[inline]
    pub fn bucket(x: u64) -> usize {
        let v = Self::reduced(x);
        if v < Self::EXACT {
            return v as usize;
        }
        let e = 63 - v.leading_zeros();
        let sub = (v >> (e - SUB_BITS)) & (Self::SUBS - 1);
        let b = Self::EXACT + (e - SUB_BITS - 1) as u64 * Self::SUBS + sub;
        (b as usize).min(N - 1)
    }

    /// The largest value bucket `b` holds (the last bucket's nominal top: it takes every
    /// larger value too).
    pub fn upper(b: usize) -> u64 {
        let b = b as u64;
        let v = if b < Self::EXACT {
            b
        } else {
            let e = ((b - Self::EXACT) / Self::SUBS) as u32 + SUB_BITS + 1;
            let sub = (b - Self::EXACT) % Self::SUBS;
            ((Self::SUBS + sub + 1) << (e - SUB_BITS)) - 1
        };
        // The largest x whose reduced value is v.
        let top = (v + 1).saturating_mul(UNIT);
        if INCLUSIVE {
            top
        } else {
            top - 1
        }
    }

    /// The bound of the power of two `2^k` of the reduced value: `UNIT × 2^k`, less 1 when
    /// bounds exclude themselves; a bucket boundary, so counts up to it are exact.
    pub fn power_bound(k: u32) -> u64 {
        let b = UNIT.saturating_mul(1u64.checked_shl(k).unwrap_or(u64::MAX));
        if INCLUSIVE {
            b
        } else {
            b - 1
        }
    }

    /// Records `x`, from any thread (relaxed atomic adds).
    #[inline]
    pub fn record(&self, x: u64) {
        self.counts[Self::bucket(x)].fetch_add(1, Ordering::Relaxed);
        self.sum.fetch_add(x, Ordering::Relaxed);
    }

    /// Records `x` through the one owner (plain adds).
    #[inline]
    pub fn record_mut(&mut self, x: u64) {
        *self.counts[Self::bucket(x)].get_mut() += 1;
        *self.sum.get_mut() += x;
    }

    /// Bucket `b`'s count.
    pub fn count_of(&self, b: usize) -> u64 {
        self.counts[b].load(Ordering::Relaxed)
    }

    /// Every bucket's count, in order (read one by one: a value recorded meanwhile may be in
    /// one and not in the sum).
    pub fn counts(&self) -> impl Iterator<Item = u64> + '_ {
        self.counts.iter().map(|c| c.load(Ordering::Relaxed))
    }

    /// Values recorded.
    pub fn count(&self) -> u64 {
        self.counts().sum()
    }

    /// Their sum (wrapping past `u64::MAX`).
    pub fn sum(&self) -> u64 {
        self.sum.load(Ordering::Relaxed)
    }

    /// Forgets every value.
    pub fn reset(&mut self) {
        for c in &mut self.counts {
            *c.get_mut() = 0;
        }
        *self.sum.get_mut() = 0;
    }

    /// The largest value of the bucket that holds the value of rank `⌈q × count⌉` (`q` from 0
    /// to 1); `None` when none was recorded.
    pub fn quantile(&self, q: f64) -> Option<u64> {
        let total = self.count();
        if total == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).clamp(1, total);
        let mut seen = 0;
        for (b, n) in self.counts().enumerate() {
            seen += n;
            if seen >= rank {
                return Some(Self::upper(b));
            }
        }
        Some(Self::upper(N - 1))
    }

    /// For each `k` of `powers`, [`Self::power_bound`]`(k)` and the values recorded up to it
    /// (cumulative, exact): a Prometheus histogram's buckets.
    pub fn below_powers(
        &self,
        powers: std::ops::RangeInclusive<u32>,
    ) -> impl Iterator<Item = (u64, u64)> + '_ {
        let (mut seen, mut at) = (0u64, 0usize);
        powers.map(move |k| {
            let bound = Self::power_bound(k);
            while at < N - 1 && Self::upper(at) <= bound {
                seen += self.count_of(at);
                at += 1;
            }
            (bound, seen)
        })
    }
}

impl<const N: usize, const S: u32, const U: u64, const I: bool> Default for LogHistogram<N, S, U, I> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize, const S: u32, const U: u64, const I: bool> Clone for LogHistogram<N, S, U, I> {
    fn clone(&self) -> Self {
        let h = Self::new();
        for (to, from) in h.counts.iter().zip(&self.counts) {
            to.store(from.load(Ordering::Relaxed), Ordering::Relaxed);
        }
        h.sum.store(self.sum(), Ordering::Relaxed);
        h
    }
}

impl<const N: usize, const S: u32, const U: u64, const I: bool> std::fmt::Debug for LogHistogram<N, S, U, I> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogHistogram").field("count", &self.count()).field("sum", &self.sum()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Exposition, Kind};

    /// Nanoseconds in buckets of 1/8 of a power of two, bounds below 2^k ns (`mojim kv`'s).
    type Fine = LogHistogram<352, 3, 1, false>;
    /// Nanoseconds in buckets up to 2^k µs, bounds included (the primary's sync points).
    type Micros = LogHistogram<25, 0, 1000, true>;
    /// Counts up to 2^k, bounds included (`mojim kv`'s commands per group).
    type Counts = LogHistogram<14, 0, 1, true>;

    /// Every value is in the bucket whose range holds it, the buckets follow each other without
    /// a gap, and the last takes every larger value.
    fn buckets_follow_each_other<const N: usize, const S: u32, const U: u64, const I: bool>(
        samples: impl Iterator<Item = u64>,
    ) {
        let bucket = LogHistogram::<N, S, U, I>::bucket;
        let upper = LogHistogram::<N, S, U, I>::upper;
        for x in samples {
            let b = bucket(x);
            if b < N - 1 {
                assert!(x <= upper(b), "{x} in bucket {b} whose top is {}", upper(b));
            }
            if b > 0 {
                assert!(x > upper(b - 1), "{x} belongs after bucket {}", b - 1);
            }
        }
        for b in 1..N - 1 {
            assert_eq!(bucket(upper(b - 1) + 1), b, "bucket {b} starts after {}", upper(b - 1));
            assert_eq!(bucket(upper(b)), b, "bucket {b} ends at {}", upper(b));
        }
        assert_eq!(bucket(u64::MAX), N - 1);
    }

    #[test]
    fn bucket_edges() {
        let some =
            || (0..5000).chain([1 << 20, (1 << 20) + 1, (1 << 30) - 1, 1 << 40, (1 << 45) + 5, 1 << 62]);
        buckets_follow_each_other::<352, 3, 1, false>(some());
        buckets_follow_each_other::<25, 0, 1000, true>(some());
        buckets_follow_each_other::<14, 0, 1, true>(some());
        // Fine: each value below 16 alone, then an eighth of a power of two at most.
        assert_eq!(
            (Fine::bucket(15), Fine::bucket(16), Fine::bucket(17), Fine::bucket(18)),
            (15, 16, 16, 17)
        );
        for b in 17..351 {
            let (lo, hi) = (Fine::upper(b - 1) + 1, Fine::upper(b));
            assert!((hi - lo + 1) * 8 <= lo, "bucket {b}: {lo}..={hi}");
        }
        // Micros: bucket k holds (2^(k-1), 2^k] µs; past 2^23 µs, the last.
        assert_eq!((Micros::bucket(0), Micros::bucket(1000), Micros::bucket(1001)), (0, 0, 1));
        assert_eq!((Micros::bucket(2000), Micros::bucket(2001)), (1, 2));
        for k in 0..24 {
            assert_eq!(Micros::upper(k), 1000 << k);
            assert_eq!(Micros::power_bound(k as u32), 1000 << k);
        }
        assert_eq!(Micros::bucket((1000 << 23) + 1), 24);
        // Counts: bucket k holds (2^(k-1), 2^k]; 0 is with 1.
        assert_eq!(
            (Counts::bucket(0), Counts::bucket(1), Counts::bucket(2), Counts::bucket(3)),
            (0, 0, 1, 2)
        );
        assert_eq!((Counts::bucket(4096), Counts::bucket(4097)), (12, 13));
        // Fine: the bound of 2^k excludes itself.
        assert_eq!((Fine::power_bound(10), Fine::bucket(1023), Fine::bucket(1024)), (1023, 63, 64));
        assert_eq!(Fine::upper(63), 1023);
    }

    #[test]
    fn counts_sums_quantiles_and_cumulative_counts() {
        let mut h = Fine::new();
        assert_eq!((h.quantile(0.5), h.count()), (None, 0));
        for _ in 0..98 {
            h.record_mut(1500);
        }
        h.record(100_000);
        h.record(3_000_000);
        assert_eq!((h.count(), h.sum()), (100, 98 * 1500 + 3_100_000));
        assert!((1500..=1500 + 1500 / 8).contains(&h.quantile(0.5).unwrap()));
        assert!((100_000..=112_500).contains(&h.quantile(0.99).unwrap()));
        let below: Vec<_> = h.below_powers(10..=23).collect();
        assert_eq!(below[0], (1023, 0), "none below 1024 ns");
        assert_eq!(below[1], (2047, 98), "1500 ns is below 2048");
        assert_eq!(below[7], (131_071, 99), "100 µs is below 2^17 ns");
        assert_eq!(below[13], ((1 << 23) - 1, 100), "3 ms is below 2^23 ns");
        let copy = h.clone();
        h.reset();
        assert_eq!((h.count(), h.sum(), h.quantile(0.99)), (0, 0, None));
        assert_eq!(copy.count(), 100, "a clone keeps its counts");

        let m = Micros::new();
        for us in [3u64, 3, 3, 50, 20_000_000] {
            m.record(us * 1000);
        }
        let counts: Vec<u64> = m.counts().collect();
        assert_eq!((counts[2], counts[6], counts[24]), (3, 1, 1));
        let below: Vec<_> = m.below_powers(0..=23).collect();
        assert_eq!(below[2], (4000, 3), "3 µs is at most 4 µs");
        assert_eq!(below[23], (1000 << 23, 4), "20 s is past every bound");
        assert_eq!(m.quantile(0.5), Some(4000));
    }

    #[test]
    fn threads_count_without_losing_any() {
        let h = Micros::new();
        std::thread::scope(|s| {
            for t in 0..4u64 {
                let h = &h;
                s.spawn(move || {
                    for i in 0..10_000u64 {
                        h.record((i * 7919 + t) % 5_000_000);
                    }
                });
            }
        });
        assert_eq!(h.count(), 40_000);
    }

    #[test]
    fn the_prometheus_rendering() {
        let h = Counts::new();
        for n in [1u64, 1, 2, 3, 5000] {
            h.record(n);
        }
        let mut e = Exposition::new();
        e.family("mojim_group_commands", Kind::Histogram, "Commands per group.");
        e.histogram(&[("db", "0")], h.below_powers(0..=2).map(|(b, n)| (b as f64, n)), h.sum(), h.count());
        assert_eq!(
            e.finish(),
            "# HELP mojim_group_commands Commands per group.\n\
             # TYPE mojim_group_commands histogram\n\
             mojim_group_commands_bucket{db=\"0\",le=\"1\"} 2\n\
             mojim_group_commands_bucket{db=\"0\",le=\"2\"} 3\n\
             mojim_group_commands_bucket{db=\"0\",le=\"4\"} 4\n\
             mojim_group_commands_bucket{db=\"0\",le=\"+Inf\"} 5\n\
             mojim_group_commands_sum{db=\"0\"} 5007\n\
             mojim_group_commands_count{db=\"0\"} 5\n"
        );
        let m = Micros::new();
        m.record(1500);
        let mut e = Exposition::new();
        e.family("mojim_sync_seconds", Kind::Histogram, "Sync points.");
        let seconds = |ns: u64| ns as f64 / 1e9;
        e.histogram(&[], m.below_powers(0..=1).map(|(b, n)| (seconds(b), n)), seconds(m.sum()), m.count());
        let page = e.finish();
        for line in [
            "mojim_sync_seconds_bucket{le=\"0.000001\"} 0",
            "mojim_sync_seconds_bucket{le=\"0.000002\"} 1",
            "mojim_sync_seconds_bucket{le=\"+Inf\"} 1",
            "mojim_sync_seconds_sum 0.0000015",
            "mojim_sync_seconds_count 1",
        ] {
            assert!(page.lines().any(|l| l == line), "{line:?} not in\n{page}");
        }
    }
}
