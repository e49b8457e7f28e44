//! The primary's metrics listener: [`PrimaryMetrics`] rendered as `mojim_primary_*` families
//! in the Prometheus text format at each scrape, with `/healthz` (the primary is open) and
//! `/readyz` (the mirror is online). docs/METRICS.md lists each family.

use super::metrics::{MirrorState, PrimaryMetrics};
use super::Primary;
use crate::error::{Error, Result};
use mojim_metrics::{Exposition, Kind, Limits, MetricsListener, Pages};
use mojim_transport::Transport;
use std::net::SocketAddr;
use std::sync::Arc;

impl<T: Transport> Primary<T>
where
    T::Conn: Send + Sync + 'static,
{
    /// Serves the primary's metrics at `addr` (`host:port`; port 0: any free port) on threads
    /// of their own, and returns the address bound. [`Primary::open`] calls it for
    /// `PrimaryOptions::metrics_listen`. A scrape takes a [`Primary::metrics`] snapshot and
    /// touches no sync point's path. The listener stops, and frees its port, when the primary
    /// is closed or dropped (a scrape being answered then finds `/metrics` empty and `/healthz`
    /// and `/readyz` answering 503).
    pub fn serve_metrics(&self, addr: &str) -> Result<SocketAddr> {
        let listener = MetricsListener::bind(addr).map_err(Error::io(format!(
            "bind the primary's metrics listener to {addr} ([primary] metrics_listen): choose a free port, or 0"
        )))?;
        let bound = listener.local_addr();
        let weak = Arc::downgrade(&self.inner);
        let (m, h, r) = (weak.clone(), weak.clone(), weak);
        let pages = Pages {
            metrics: Box::new(move || m.upgrade().map_or_else(String::new, |i| render_metrics(&i.metrics()))),
            health: Box::new(move || h.upgrade().map(|_| ()).ok_or_else(closed)),
            ready: Box::new(move || {
                let i = r.upgrade().ok_or_else(closed)?;
                match i.metrics().mirror_state {
                    MirrorState::Online => Ok(()),
                    s => Err(format!("the mirror is {}", s.name())),
                }
            }),
        };
        let serving = listener
            .serve(pages, Limits::default())
            .map_err(Error::io("start the primary's metrics listener"))?;
        self.metrics_serving.lock().unwrap_or_else(|p| p.into_inner()).push(serving);
        let _ = self.inner.metrics_addr.set(bound);
        tracing::info!(%bound, "primary metrics listener");
        Ok(bound)
    }
}

/// What `/healthz` and `/readyz` answer (503) once the primary is closed.
fn closed() -> String {
    "the primary is closed".into()
}

/// The metrics page for `m`: `mojim_primary_*` families.
pub fn render_metrics(m: &PrimaryMetrics) -> String {
    use Kind::{Counter, Gauge, Histogram};
    let mut e = Exposition::new();
    let mode = [("mode", m.mode.as_str())];
    e.family(
        "mojim_primary_mirror_state",
        Gauge,
        "Where the primary stands with its mirror: 1 for its state.",
    );
    for s in MirrorState::ALL {
        e.sample(&[("state", s.name())], m.mirror_state == s);
    }
    e.family(
        "mojim_primary_sync_seconds",
        Histogram,
        "Latency of the sync points that succeeded (msync, gmsync), from the call to the return.",
    );
    let h = &m.sync_seconds;
    let cumulative = h.counts.iter().scan(0, |seen, c| {
        *seen += c;
        Some(*seen)
    });
    e.histogram(&mode, h.bounds_seconds.iter().copied().zip(cumulative), h.sum_seconds, h.count);
    e.single(
        "mojim_primary_sync_failures_total",
        Counter,
        "Sync points that returned an error.",
        m.sync_failures,
    );
    e.single(
        "mojim_primary_groups_sent_total",
        Counter,
        "Groups sent to the mirror by sync points (not a resynchronisation's copies).",
        m.groups_sent,
    );
    e.single(
        "mojim_primary_sent_bytes_total",
        Counter,
        "Bytes of the ranges of the groups sent.",
        m.bytes_sent,
    );
    e.single(
        "mojim_primary_in_flight_groups",
        Gauge,
        "Groups sent and not yet known to be acknowledged (an upper bound).",
        m.in_flight_groups,
    );
    e.single("mojim_primary_lanes", Gauge, "Connected lanes, counting every broadcast mirror's.", m.lanes);
    e.single(
        "mojim_primary_mirror_losses_total",
        Counter,
        "Times the mirror was lost since the primary opened.",
        m.mirror_losses,
    );
    // Families with nothing to say yet (no loss, no resync, no etcd) are listed without a
    // sample, so that a dashboard's queries always name something served.
    e.single_or_none(
        "mojim_primary_vulnerable_seconds",
        Gauge,
        "How long the last loss took to make the primary's copy persistent (the window of vulnerability).",
        m.vulnerable_seconds,
    );
    e.single(
        "mojim_primary_dirty_bytes",
        Gauge,
        "Bytes the dirty bitmap marks as changed since the mirror last had them.",
        m.dirty_bytes,
    );
    let resync = m.resync.as_ref();
    let kind = resync.map(|r| [("kind", r.kind.name())]);
    e.family("mojim_primary_resync_total_bytes", Gauge, "Bytes the current or last resynchronisation sends.");
    if let (Some(r), Some(kind)) = (resync, &kind) {
        e.sample(kind, r.total_bytes);
    }
    e.family(
        "mojim_primary_resync_sent_bytes",
        Gauge,
        "Bytes the current or last resynchronisation has sent.",
    );
    if let (Some(r), Some(kind)) = (resync, &kind) {
        e.sample(kind, r.sent_bytes);
    }
    e.family(
        "mojim_primary_resync_running",
        Gauge,
        "1 while a resynchronisation runs (0 once it finished or failed).",
    );
    if let (Some(r), Some(kind)) = (resync, &kind) {
        e.sample(kind, !r.done && r.error.is_none());
    }
    e.single_or_none(
        "mojim_primary_lease_renewals_total",
        Counter,
        "Renewal attempts of the lease in etcd.",
        m.lease_renewals,
    );
    e.single_or_none(
        "mojim_primary_lease_valid_seconds",
        Gauge,
        "Seconds this primary may still acknowledge for under its lease.",
        m.lease_valid_seconds,
    );
    e.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::primary::metrics::SyncHistogram;
    use crate::primary::{CopyKind, ResyncStatus};

    #[test]
    fn the_page_has_a_cumulative_histogram_and_every_state() {
        let m = PrimaryMetrics {
            mode: "sync".into(),
            mirror_state: MirrorState::Degraded,
            sync_seconds: SyncHistogram {
                bounds_seconds: vec![1e-6, 2e-6],
                counts: vec![1, 2, 3],
                count: 6,
                sum_seconds: 1.5,
            },
            sync_failures: 1,
            groups_sent: 5,
            bytes_sent: 4096,
            in_flight_groups: 0,
            lanes: 0,
            mirror_losses: 1,
            vulnerable_seconds: Some(0.25),
            dirty_bytes: 65536,
            resync: Some(ResyncStatus {
                kind: CopyKind::Bitmap,
                total_bytes: 10,
                sent_bytes: 4,
                remaining_bytes: 6,
                seconds: 1.0,
                mb_per_s: 0.0,
                done: false,
                error: None,
                resent_bytes: 0,
            }),
            lease_renewals: None,
            lease_valid_seconds: None,
        };
        let page = render_metrics(&m);
        for line in [
            "mojim_primary_mirror_state{state=\"degraded\"} 1\n",
            "mojim_primary_mirror_state{state=\"online\"} 0\n",
            "# TYPE mojim_primary_sync_seconds histogram\n",
            "mojim_primary_sync_seconds_bucket{mode=\"sync\",le=\"0.000001\"} 1\n",
            "mojim_primary_sync_seconds_bucket{mode=\"sync\",le=\"0.000002\"} 3\n",
            "mojim_primary_sync_seconds_bucket{mode=\"sync\",le=\"+Inf\"} 6\n",
            "mojim_primary_sync_seconds_sum{mode=\"sync\"} 1.5\n",
            "mojim_primary_sync_seconds_count{mode=\"sync\"} 6\n",
            "mojim_primary_groups_sent_total 5\n",
            "mojim_primary_vulnerable_seconds 0.25\n",
            "mojim_primary_resync_sent_bytes{kind=\"bitmap\"} 4\n",
            "mojim_primary_resync_running{kind=\"bitmap\"} 1\n",
        ] {
            assert!(page.contains(line), "{line:?} missing from\n{page}");
        }
        let lease_samples = page.lines().filter(|l| l.starts_with("mojim_primary_lease")).count();
        assert_eq!(lease_samples, 0, "no lease without the coordinator:\n{page}");
        assert!(
            page.contains("# TYPE mojim_primary_lease_valid_seconds gauge"),
            "the family is listed:\n{page}"
        );
    }
}
