//! What the rounds measured, their median, minimum and maximum, and the tables they print as.

use crate::bench::BenchArgs;
use mojim::size::format_size;
use serde::Serialize;

/// One fail-over: the primary killed, another started on the promoted node.
#[derive(Clone, Debug, Serialize)]
pub struct FailoverRound {
    /// `failover`.
    pub kind: &'static str,
    pub coordinator: &'static str,
    pub round: usize,
    pub region_size: u64,
    /// The primary's lease (etcd), or none (static).
    pub lease_ttl_ms: Option<u64>,
    /// Kill → the coordinator has acted: 0 for static (the operator acts at the kill); for
    /// etcd, until the mirror has claimed the next epoch (the lease expired and the mirror saw
    /// it).
    pub detect_ms: f64,
    /// Static: the `promote` command on the mirror. Etcd: the claim in etcd → the mirror
    /// reports itself primary.
    pub promote_ms: f64,
    /// Static: the `fence` command on the backup (etcd: none, 0).
    pub fence_ms: f64,
    /// Kill → the new worker started (static: connecting, reading epochs, promote, fence; etcd:
    /// detect and promote, as seen from here).
    pub operator_ms: f64,
    /// The new worker's start → its region is open and its session begun.
    pub open_ms: f64,
    /// The new worker's start → its first acknowledgement.
    pub restart_ms: f64,
    /// The same as `restart_ms`.
    pub first_ack_ms: f64,
    /// Kill → the new worker's first acknowledgement.
    pub total_ms: f64,
    /// The old worker's last acknowledgement → the new worker's first.
    pub gap_ms: f64,
    /// What the promoted node reported: time spent letting its backups catch up, and whether
    /// they did.
    pub drain_ms: Option<u64>,
    pub backups_drained: Option<bool>,
    /// The new primary's resynchronisation of its mirror (the old backup): kind, seconds and
    /// bytes; it runs beside the application's sync points.
    pub resync_kind: String,
    pub resync_ms: f64,
    pub resync_bytes: u64,
    /// Groups the killed worker had acknowledged.
    pub acked_before_kill: u64,
    /// The last of them (as many as fit in half the region) found whole in the promoted copy.
    pub checked_groups: u64,
}

/// One loss of the mirror: how long the primary's acknowledged groups had one volatile copy.
#[derive(Clone, Debug, Serialize)]
pub struct VulnerabilityRound {
    /// `vulnerability`.
    pub kind: &'static str,
    pub round: usize,
    pub region_size: u64,
    /// Where the primary's region lives: `memory` (tmpfs), `file` or `dax`.
    pub data: String,
    /// How it is made persistent: `clwb`, `clflush` or `msync`.
    pub flush: &'static str,
    pub dir: String,
    /// `PrimaryStatus::vulnerable_us`: the whole region made persistent after the loss.
    pub vulnerable_ms: f64,
    /// The mirror's kill → a sync point of the application returned after the loss was
    /// handled (detection plus `vulnerable_ms`).
    pub noticed_ms: f64,
}

/// The median, minimum and maximum of one figure over the rounds.
#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    /// `summary`.
    pub kind: &'static str,
    /// `failover static`, `vulnerability memory clwb`, ...
    pub of: String,
    pub metric: &'static str,
    pub rounds: usize,
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

/// Everything one run measured.
#[derive(Clone, Debug, Serialize)]
pub struct FailoverResults {
    pub failover: Vec<FailoverRound>,
    pub vulnerability: Vec<VulnerabilityRound>,
    pub summaries: Vec<Summary>,
}

pub(super) fn summary(of: String, metric: &'static str, mut v: Vec<f64>) -> Summary {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let median = if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 };
    Summary { kind: "summary", of, metric, rounds: n, median, min: v[0], max: v[n - 1] }
}

pub(super) type Figure<T> = (&'static str, fn(&T) -> f64);

pub(super) const FAILOVER_FIGURES: [Figure<FailoverRound>; 9] = [
    ("detect_ms", |r| r.detect_ms),
    ("promote_ms", |r| r.promote_ms),
    ("fence_ms", |r| r.fence_ms),
    ("operator_ms", |r| r.operator_ms),
    ("open_ms", |r| r.open_ms),
    ("restart_ms", |r| r.restart_ms),
    ("total_ms", |r| r.total_ms),
    ("gap_ms", |r| r.gap_ms),
    ("resync_ms", |r| r.resync_ms),
];

pub(super) const VULNERABILITY_FIGURES: [Figure<VulnerabilityRound>; 2] =
    [("vulnerable_ms", |r| r.vulnerable_ms), ("noticed_ms", |r| r.noticed_ms)];

pub(super) fn summarise(failover: &[FailoverRound], vulnerability: &[VulnerabilityRound]) -> Vec<Summary> {
    let mut out = Vec::new();
    if let Some(first) = failover.first() {
        let of = format!("failover {}", first.coordinator);
        for (metric, f) in FAILOVER_FIGURES {
            out.push(summary(of.clone(), metric, failover.iter().map(f).collect()));
        }
    }
    let mut kinds: Vec<(String, &'static str)> = Vec::new();
    for v in vulnerability {
        if !kinds.iter().any(|k| k.0 == v.data && k.1 == v.flush) {
            kinds.push((v.data.clone(), v.flush));
        }
    }
    for (data, flush) in kinds {
        let of = format!("vulnerability {data} {flush}");
        let these: Vec<&VulnerabilityRound> =
            vulnerability.iter().filter(|v| v.data == data && v.flush == flush).collect();
        for (metric, f) in VULNERABILITY_FIGURES {
            out.push(summary(of.clone(), metric, these.iter().map(|v| f(v)).collect()));
        }
    }
    out
}

/// Prints the rounds and their summaries as tables, or every object as a JSON line.
pub fn print(a: &BenchArgs, r: &FailoverResults) {
    if a.json {
        let lines = r
            .failover
            .iter()
            .map(serde_json::to_string)
            .chain(r.vulnerability.iter().map(serde_json::to_string))
            .chain(r.summaries.iter().map(serde_json::to_string));
        for l in lines {
            println!("{}", l.unwrap_or_default());
        }
        return;
    }
    let coordinator = a.failover.coordinator.name();
    println!(
        "fail-over ({coordinator} coordinator), {} region, mode sync, one 4 KiB group per ms, {} round(s)",
        format_size(a.region_size),
        r.failover.len()
    );
    println!(
        "{:<6} {:>7} {:>8} {:>7} {:>9} {:>7} {:>8} {:>8} {:>7} {:>13}",
        "round", "detect", "promote", "fence", "operator", "open", "restart", "total", "gap", "resync"
    );
    for f in &r.failover {
        println!(
            "{:<6} {:>7.1} {:>8.1} {:>7.1} {:>9.1} {:>7.1} {:>8.1} {:>8.1} {:>7.1} {:>6} {:>6.1}",
            f.round,
            f.detect_ms,
            f.promote_ms,
            f.fence_ms,
            f.operator_ms,
            f.open_ms,
            f.restart_ms,
            f.total_ms,
            f.gap_ms,
            f.resync_kind,
            f.resync_ms
        );
    }
    match r.failover.first().and_then(|f| f.lease_ttl_ms) {
        None => println!("(milliseconds; detect is 0 for static: the operator acts at the kill)"),
        Some(ttl) => {
            let target = ttl as f64 + 1000.0;
            let met = r.failover.iter().filter(|f| f.total_ms <= target).count();
            println!(
                "(milliseconds; lease ttl {ttl} ms) target: total <= lease ttl + 1 s = {target:.0} ms: met in \
                 {met} of {} rounds",
                r.failover.len()
            );
        }
    }
    println!();
    println!(
        "window of vulnerability: {} region, mode sync, the whole region just written",
        format_size(a.region_size)
    );
    println!("{:<6} {:<8} {:<8} {:>14} {:>12}  dir", "round", "data", "flush", "vulnerable ms", "noticed ms");
    for v in &r.vulnerability {
        println!(
            "{:<6} {:<8} {:<8} {:>14.1} {:>12.1}  {}",
            v.round, v.data, v.flush, v.vulnerable_ms, v.noticed_ms, v.dir
        );
    }
    println!();
    println!("{:<28} {:<14} {:>10} {:>10} {:>10}", "summary", "metric", "median", "min", "max");
    for s in &r.summaries {
        println!("{:<28} {:<14} {:>10.1} {:>10.1} {:>10.1}", s.of, s.metric, s.median, s.min, s.max);
    }
}
