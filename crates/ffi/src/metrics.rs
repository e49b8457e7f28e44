//! `struct mojim_metrics`: what `Primary::metrics` reports, in fixed-width fields a C caller's
//! struct can hold, versioned by its size as `struct mojim_status` is.

use crate::status::MojimMirrorState;
use mojim::{MirrorState, Mode, PrimaryMetrics, SYNC_BUCKETS};

/// Buckets of `struct mojim_metrics`'s `sync_buckets`: bucket `k` (0 to 23) counts sync points
/// that took more than 2^(k-1) µs and at most 2^k µs (bucket 0: at most 1 µs); the last, 24,
/// those that took longer than 2^23 µs (about 8.4 s).
pub const MOJIM_METRICS_BUCKETS: usize = 25;

const _: () = assert!(MOJIM_METRICS_BUCKETS == SYNC_BUCKETS + 1);

/// A snapshot of what a primary counted since it opened, filled by `mojim_metrics`.
///
/// Set `size` to `sizeof(struct mojim_metrics)` before the call: the library fills at most
/// that many bytes and sets `size` to the number it filled. Fields are only ever added at the
/// end.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct MojimMetrics {
    /// In: the caller's `sizeof(struct mojim_metrics)`. Out: the bytes filled.
    pub size: u32,
    /// A `MOJIM_MIRROR_*` value, as `struct mojim_status` has it.
    pub mirror_state: u32,
    /// Connected lanes, counting every broadcast mirror's (0 while not connected).
    pub lanes: u32,
    /// The current or last resynchronisation's kind: 0 none ran, 1 log, 2 bitmap, 3 full.
    pub resync_kind: u32,
    /// 1 while a resynchronisation runs, else 0.
    pub resync_running: u32,
    /// Always 0 (keeps the next field aligned).
    pub reserved: u32,
    /// Sync points that succeeded (`mojim_msync`, `mojim_gmsync` and their `_at` forms): the
    /// sum of `sync_buckets`.
    pub sync_count: u64,
    /// Their latencies summed, in nanoseconds.
    pub sync_sum_ns: u64,
    /// Sync points that returned an error.
    pub sync_failures: u64,
    /// Groups sent to the mirror by sync points (not a resynchronisation's copies).
    pub groups_sent: u64,
    /// Bytes of the ranges of those groups.
    pub bytes_sent: u64,
    /// Groups sent and not yet known to be acknowledged, at most.
    pub in_flight_groups: u64,
    /// Times the mirror was lost since the region was opened.
    pub mirror_losses: u64,
    /// Microseconds the last loss took to make the primary's copy persistent (the window of
    /// vulnerability), or `UINT64_MAX` if the mirror was never lost.
    pub vulnerable_us: u64,
    /// Bytes the dirty bitmap marks as changed since the mirror last had them.
    pub dirty_bytes: u64,
    /// The current or last resynchronisation: bytes it sends in all (0 if none ran).
    pub resync_total_bytes: u64,
    /// The current or last resynchronisation: bytes sent so far.
    pub resync_sent_bytes: u64,
    /// Renewal attempts of the etcd lease, or `UINT64_MAX` without the etcd coordinator.
    pub lease_renewals: u64,
    /// Sync points by latency, not cumulative (see `MOJIM_METRICS_BUCKETS`).
    pub sync_buckets: [u64; MOJIM_METRICS_BUCKETS],
}

/// The smallest `size` a caller may give: the fields up to `mirror_state`.
pub(crate) const MIN_METRICS_SIZE: usize = 8;

impl MojimMetrics {
    /// The C view of a primary's metrics.
    pub fn of(m: &PrimaryMetrics, mode: Mode) -> MojimMetrics {
        let running = m.resync.as_ref().is_some_and(|r| !r.done && r.error.is_none());
        let mirror_state = match m.mirror_state {
            MirrorState::Unreplicated => MojimMirrorState::MOJIM_MIRROR_NONE,
            MirrorState::Online if running => MojimMirrorState::MOJIM_MIRROR_RESYNCING,
            MirrorState::Online => MojimMirrorState::MOJIM_MIRROR_CONNECTED,
            MirrorState::Lost => MojimMirrorState::MOJIM_MIRROR_LOST,
            MirrorState::Degraded => MojimMirrorState::MOJIM_MIRROR_DEGRADED,
        };
        debug_assert_eq!(mode.replicated(), m.mirror_state != MirrorState::Unreplicated);
        let mut sync_buckets = [0u64; MOJIM_METRICS_BUCKETS];
        for (o, c) in sync_buckets.iter_mut().zip(&m.sync_seconds.counts) {
            *o = *c;
        }
        MojimMetrics {
            size: size_of::<MojimMetrics>() as u32,
            mirror_state: mirror_state as u32,
            lanes: m.lanes as u32,
            resync_kind: m.resync.as_ref().map_or(0, |r| r.kind as u32),
            resync_running: running.into(),
            reserved: 0,
            sync_count: m.sync_seconds.count,
            sync_sum_ns: (m.sync_seconds.sum_seconds * 1e9).round() as u64,
            sync_failures: m.sync_failures,
            groups_sent: m.groups_sent,
            bytes_sent: m.bytes_sent,
            in_flight_groups: m.in_flight_groups,
            mirror_losses: m.mirror_losses,
            vulnerable_us: m.vulnerable_seconds.map_or(u64::MAX, |s| (s * 1e6).round() as u64),
            dirty_bytes: m.dirty_bytes,
            resync_total_bytes: m.resync.as_ref().map_or(0, |r| r.total_bytes),
            resync_sent_bytes: m.resync.as_ref().map_or(0, |r| r.sent_bytes),
            lease_renewals: m.lease_renewals.unwrap_or(u64::MAX),
            sync_buckets,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_layout_is_the_one_the_header_declares() {
        assert_eq!(std::mem::offset_of!(MojimMetrics, mirror_state), 4);
        assert_eq!(std::mem::offset_of!(MojimMetrics, sync_count), 24);
        assert_eq!(std::mem::offset_of!(MojimMetrics, sync_buckets), 24 + 12 * 8);
        assert_eq!(size_of::<MojimMetrics>(), 24 + 12 * 8 + MOJIM_METRICS_BUCKETS * 8);
    }
}
