//! What the primary counts as it works, and the snapshot [`Primary::metrics`] takes of it.
//!
//! Sync points are counted on their own path: one `Instant` pair and relaxed `fetch_add`s on
//! atomics fixed at open, in a shard of the calling thread's on cache lines of its own; no
//! lock and no allocation. The latency goes into a histogram with fixed log-spaced buckets
//! (`mojim_metrics::LogHistogram`: 1 µs doubling up to about 8.4 s, then `+Inf`). A snapshot
//! sums the shards; everything else in it is read when it is taken, from what the primary
//! keeps anyway.
//!
//! [`Primary::metrics`]: super::Primary::metrics

use super::ResyncStatus;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Finite buckets of the sync-point histogram: bucket `k` holds latencies up to 2^k µs.
pub const SYNC_BUCKETS: usize = 24;

/// Latencies in nanoseconds: bucket `k` holds those up to 2^k µs (its bound included), the
/// last those past 2^23 µs (`+Inf`).
type SyncLatency = mojim_metrics::LogHistogram<{ SYNC_BUCKETS + 1 }, 0, 1000, true>;

/// Shards of the counters: a thread records into shard `thread number % SHARDS`, so that
/// threads syncing at once do not take turns owning the same cache lines, and a snapshot,
/// which reads every shard, finds each line written by as few threads as there can be.
const SHARDS: usize = 8;

/// One thread's share of the counters, on cache lines of its own (128 bytes: a line and the
/// neighbour that adjacent-line prefetching pulls in with it).
#[derive(Default)]
#[repr(align(128))]
struct Shard {
    /// Sync points that returned `Ok`, by latency, and their latencies summed.
    latency: SyncLatency,
    /// Sync points that returned an error.
    failures: AtomicU64,
    /// Groups sent to the mirror, and the bytes of their ranges.
    groups: AtomicU64,
    bytes: AtomicU64,
}

/// The counters sync points update, from every thread of the application: relaxed atomic
/// additions into the calling thread's shard, no lock and no allocation. Reading them sums
/// the shards.
#[derive(Default)]
pub(crate) struct SyncCounters {
    shards: [Shard; SHARDS],
}

impl SyncCounters {
    fn shard(&self, thread: usize) -> &Shard {
        &self.shards[thread % SHARDS]
    }

    /// A sync point of thread number `thread` that took `took` and succeeded (`ok`) or not.
    pub fn sync_point(&self, thread: usize, took: Duration, ok: bool) {
        let s = self.shard(thread);
        if !ok {
            s.failures.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let ns = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        s.latency.record(ns);
    }

    /// A group of `bytes` sent to the mirror by thread number `thread`.
    pub fn sent(&self, thread: usize, bytes: u64) {
        let s = self.shard(thread);
        s.groups.fetch_add(1, Ordering::Relaxed);
        s.bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    /// The histogram now, summed over the shards (counts read one by one, so a sync point
    /// finishing meanwhile may be in the count and not yet in the sum).
    pub fn histogram(&self) -> SyncHistogram {
        let mut counts = vec![0u64; SYNC_BUCKETS + 1];
        let mut sum_ns = 0u64;
        for s in &self.shards {
            for (to, n) in counts.iter_mut().zip(s.latency.counts()) {
                *to += n;
            }
            sum_ns = sum_ns.wrapping_add(s.latency.sum());
        }
        SyncHistogram {
            bounds_seconds: (0..SYNC_BUCKETS as u32)
                .map(|k| SyncLatency::power_bound(k) as f64 / 1e9)
                .collect(),
            count: counts.iter().sum(),
            counts,
            sum_seconds: sum_ns as f64 / 1e9,
        }
    }

    fn total(&self, of: impl Fn(&Shard) -> &AtomicU64) -> u64 {
        self.shards.iter().map(|s| of(s).load(Ordering::Relaxed)).fold(0, u64::wrapping_add)
    }

    pub fn failures(&self) -> u64 {
        self.total(|s| &s.failures)
    }

    pub fn groups(&self) -> u64 {
        self.total(|s| &s.groups)
    }

    pub fn bytes(&self) -> u64 {
        self.total(|s| &s.bytes)
    }
}

/// Sync-point latencies, counted in fixed buckets.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct SyncHistogram {
    /// The upper bound of each finite bucket, in seconds, rising (1 µs, 2 µs, 4 µs, ...).
    pub bounds_seconds: Vec<f64>,
    /// Sync points per bucket, not cumulative: `counts[k]` took more than `bounds_seconds[k-1]`
    /// and at most `bounds_seconds[k]`; one more entry than `bounds_seconds`, the last for
    /// those longer than every bound.
    pub counts: Vec<u64>,
    /// Sync points counted (the sum of `counts`).
    pub count: u64,
    /// Their latencies summed, in seconds.
    pub sum_seconds: f64,
}

impl SyncHistogram {
    /// The upper bound of the bucket where the `q` quantile (0 to 1) falls; `None` when nothing
    /// was counted, infinity when it falls past the last bound.
    pub fn quantile_bound_seconds(&self, q: f64) -> Option<f64> {
        if self.count == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.count as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (k, c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Some(self.bounds_seconds.get(k).copied().unwrap_or(f64::INFINITY));
            }
        }
        Some(f64::INFINITY)
    }
}

/// Where the primary stands with its mirror.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum MirrorState {
    /// A session is up: sync points reach the mirror.
    Online,
    /// The mirror is lost and `on_mirror_loss = "block"`: sync points fail until it is back.
    Lost,
    /// The mirror is lost and `on_mirror_loss = "degrade"`: sync points go on locally and the
    /// dirty bitmap records what the mirror lacks.
    Degraded,
    /// The mode does not replicate: there is no mirror.
    Unreplicated,
}

impl MirrorState {
    /// Every state, in the order of their numbers (`as u8`).
    pub const ALL: [MirrorState; 4] =
        [MirrorState::Online, MirrorState::Lost, MirrorState::Degraded, MirrorState::Unreplicated];

    /// The state's name: `online`, `lost`, `degraded` or `unreplicated`.
    pub fn name(self) -> &'static str {
        match self {
            MirrorState::Online => "online",
            MirrorState::Lost => "lost",
            MirrorState::Degraded => "degraded",
            MirrorState::Unreplicated => "unreplicated",
        }
    }
}

/// A snapshot of what the primary counted since it opened ([`Primary::metrics`]).
///
/// [`Primary::metrics`]: super::Primary::metrics
#[derive(Clone, Debug, serde::Serialize)]
pub struct PrimaryMetrics {
    /// The mode's name, e.g. `sync` (the histogram's label).
    pub mode: String,
    /// Where the primary stands with its mirror.
    pub mirror_state: MirrorState,
    /// Latencies of the sync points that succeeded (`msync`, `gmsync` and their staged form,
    /// from the call to the return).
    pub sync_seconds: SyncHistogram,
    /// Sync points that returned an error.
    pub sync_failures: u64,
    /// Groups sent to the mirror (every sync point's group while online; not the copies of a
    /// resynchronisation).
    pub groups_sent: u64,
    /// Bytes of those groups' ranges.
    pub bytes_sent: u64,
    /// Groups sent and not yet known to be acknowledged, at most: the sequence numbers from
    /// the lowest acknowledgement a lane still owes to the last group sent (0 while no lane
    /// owes one, or offline).
    pub in_flight_groups: u64,
    /// Connected lanes, counting every broadcast mirror's.
    pub lanes: u64,
    /// Times the mirror was lost since the primary opened.
    pub mirror_losses: u64,
    /// How long the last loss took to make the primary's own copy persistent (the window of
    /// vulnerability: until then acknowledged groups had one copy, in volatile caches).
    pub vulnerable_seconds: Option<f64>,
    /// Bytes the dirty bitmap marks as changed since the mirror last had them.
    pub dirty_bytes: u64,
    /// The current or last resynchronisation: its kind and progress.
    pub resync: Option<ResyncStatus>,
    /// Renewal attempts of the lease in etcd (under the coordinator).
    pub lease_renewals: Option<u64>,
    /// Seconds this primary may still acknowledge for under its lease (under the coordinator).
    pub lease_valid_seconds: Option<f64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_hold_up_to_their_bound() {
        let bucket_of = SyncLatency::bucket;
        let bound_ns = |k: usize| SyncLatency::power_bound(k as u32);
        assert_eq!(bound_ns(0), 1000);
        assert_eq!(bucket_of(0), 0);
        assert_eq!(bucket_of(1000), 0);
        assert_eq!(bucket_of(1001), 1);
        assert_eq!(bucket_of(2000), 1);
        assert_eq!(bucket_of(2001), 2);
        for k in 1..SYNC_BUCKETS {
            assert_eq!(bucket_of(bound_ns(k)), k, "the bound of {k} is in it");
            assert_eq!(bucket_of(bound_ns(k) + 1), k + 1, "one past the bound of {k} is in the next");
            assert_eq!(bucket_of(bound_ns(k - 1) + 1), k);
        }
        assert_eq!(bucket_of(bound_ns(SYNC_BUCKETS - 1) + 1), SYNC_BUCKETS, "+Inf");
        assert_eq!(bucket_of(u64::MAX), SYNC_BUCKETS);
    }

    #[test]
    fn the_histogram_counts_sums_and_finds_quantiles() {
        let c = SyncCounters::default();
        assert_eq!(c.histogram().quantile_bound_seconds(0.5), None);
        for (thread, us) in [3u64, 3, 3, 50, 20_000_000].into_iter().enumerate() {
            c.sync_point(thread, Duration::from_micros(us), true);
        }
        c.sync_point(SHARDS + 2, Duration::from_micros(1), false);
        c.sent(0, 4096);
        c.sent(SHARDS + 9, 10);
        let h = c.histogram();
        assert_eq!(h.count, 5);
        assert_eq!(h.counts.len(), h.bounds_seconds.len() + 1);
        assert_eq!(h.counts[2], 3, "3 µs is in the 4 µs bucket");
        assert_eq!(h.counts[6], 1, "50 µs is in the 64 µs bucket");
        assert_eq!(h.counts[SYNC_BUCKETS], 1, "20 s is past every bound");
        assert!((h.sum_seconds - 20.000059).abs() < 1e-9, "{}", h.sum_seconds);
        assert_eq!(h.quantile_bound_seconds(0.5), Some(4e-6));
        assert_eq!(h.quantile_bound_seconds(0.8), Some(64e-6));
        assert_eq!(h.quantile_bound_seconds(1.0), Some(f64::INFINITY));
        assert_eq!((c.failures(), c.groups(), c.bytes()), (1, 2, 4106));
        assert!(h.bounds_seconds.windows(2).all(|w| w[1] == 2.0 * w[0]), "log-spaced");
    }

    #[test]
    fn threads_count_without_losing_any() {
        let c = SyncCounters::default();
        std::thread::scope(|s| {
            for t in 0..4u64 {
                let c = &c;
                s.spawn(move || {
                    // Every other sync point as the thread numbered SHARDS more, which
                    // shares its shard.
                    for i in 0..10_000u64 {
                        let thread = t as usize + if i % 2 == 0 { 0 } else { SHARDS };
                        c.sync_point(thread, Duration::from_nanos((i * 7919 + t) % 5_000_000), true);
                        c.sent(thread, 1);
                    }
                });
            }
        });
        assert_eq!(c.histogram().count, 40_000);
        assert_eq!(c.groups(), 40_000);
    }
}
