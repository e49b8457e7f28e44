//! What one kind measured, the median round of each kind, the ratios between kinds round by
//! round, and the table they print as.

use super::round::Round;
use super::CHUNK;
use serde::Serialize;

/// One measured way of bringing a replica up to date.
#[derive(Clone, Debug, Serialize)]
pub struct ResyncResult {
    /// `tcp`, `full`, `bitmap` or `log`.
    pub kind: String,
    /// Bytes moved: the region (tcp, full), what the copy sent (bitmap), the changed bytes (log).
    pub bytes: u64,
    pub seconds: f64,
    /// Megabytes (10^6) per second.
    pub mb_per_s: f64,
    pub region_size: u64,
    pub changed_bytes: u64,
    pub lanes: u16,
    /// What was compared with the primary's copy afterwards.
    pub verified: String,
    /// `log`: seconds from the backup's restart (ready to serve) until it had caught up, which
    /// includes the mirror's wait before it reconnects.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub since_restart_s: Option<f64>,
    /// `full`: seconds `Primary::open` took before the copy's clock started (opening the region,
    /// every lane's handshake and the plan; the region's pages are mapped by a thread meanwhile
    /// and during the copy): not in `seconds`, but in `cpu_s`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub open_s: Option<f64>,
    /// `tcp-region`, `tcp-checked`: seconds taken to map the source file (every page) before the
    /// clock started, as opening the region did before a copy: not in `seconds`. The
    /// destination, like a mirror's data area, was made and mapped earlier.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub map_s: Option<f64>,
    /// `tcp`, `tcp-region`, `tcp-checked`, `full`: CPU seconds (user + system) the transfer cost
    /// both ends together, to the clock tick: every thread of the processes involved but the one
    /// timing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_s: Option<f64>,
}

impl ResyncResult {
    pub(super) fn new(kind: &str, bytes: u64, seconds: f64, r: &Round<'_>, verified: String) -> ResyncResult {
        ResyncResult {
            kind: kind.into(),
            bytes,
            seconds,
            mb_per_s: if seconds > 0.0 { bytes as f64 / 1e6 / seconds } else { 0.0 },
            region_size: r.id.size,
            changed_bytes: r.chunks.len() as u64 * CHUNK,
            lanes: r.lanes,
            verified,
            since_restart_s: None,
            open_s: None,
            map_s: None,
            cpu_s: None,
        }
    }

    /// `tcp` measured twice around another kind: the mean time and CPU of the two.
    pub(super) fn around(
        before: ResyncResult,
        after: ResyncResult,
        r: &Round<'_>,
        what: &str,
    ) -> ResyncResult {
        let seconds = (before.seconds + after.seconds) / 2.0;
        let verified = format!(
            "{}, {:.3} s before and {:.3} s after {what}",
            before.verified, before.seconds, after.seconds
        );
        let mut m = ResyncResult::new(&before.kind, before.bytes, seconds, r, verified);
        m.cpu_s = before.cpu_s.zip(after.cpu_s).map(|(b, a)| (b + a) / 2.0);
        m
    }
}

/// The set-up ratio of one round: `full`'s time with its opening over `tcp-region`'s, and over
/// `tcp-region`'s with the mapping of its source (`map_s`), which opening includes.
pub(super) struct SetUp;

impl SetUp {
    pub(super) fn of(results: &[ResyncResult]) -> Option<(f64, f64)> {
        let full = results.iter().find(|x| x.kind == "full")?;
        let base = results.iter().find(|x| x.kind == "tcp-region")?;
        let with_open = full.seconds + full.open_s?;
        Some((with_open / base.seconds, with_open / (base.seconds + base.map_s?)))
    }
}

/// A bandwidth ratio between two kinds, measured side by side in each round.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Spread {
    pub(super) min: f64,
    pub(super) median: f64,
    pub(super) max: f64,
    /// Rounds whose ratio is at least the target.
    pub(super) meeting: usize,
}

impl Spread {
    /// `of`'s MB/s over `base`'s, round by round; `None` unless every round has both.
    pub(super) fn of(rounds: &[Vec<ResyncResult>], of: &str, base: &str, target: f64) -> Option<Spread> {
        let mut ratios = rounds
            .iter()
            .map(|r| {
                let rate = |k: &str| r.iter().find(|x| x.kind == k).map(|x| x.mb_per_s);
                Some(rate(of)? / rate(base)?)
            })
            .collect::<Option<Vec<f64>>>()?;
        if ratios.is_empty() {
            return None;
        }
        ratios.sort_by(f64::total_cmp);
        Some(Spread {
            min: ratios[0],
            median: ratios[ratios.len() / 2],
            max: ratios[ratios.len() - 1],
            meeting: ratios.iter().filter(|&&x| x >= target).count(),
        })
    }
}

/// Per kind, the round with the median time.
pub(super) fn medians(rounds: &[Vec<ResyncResult>]) -> Vec<ResyncResult> {
    let kinds = rounds.first().map_or(0, Vec::len);
    (0..kinds)
        .map(|k| {
            let mut v: Vec<ResyncResult> = rounds.iter().map(|r| r[k].clone()).collect();
            v.sort_by(|x, y| x.seconds.total_cmp(&y.seconds));
            v.swap_remove(v.len() / 2)
        })
        .collect()
}

/// Prints results as a table with the two ratios, or as JSON lines.
pub fn print(results: &[ResyncResult], json: bool) {
    if json {
        for r in results {
            println!("{}", serde_json::to_string(r).unwrap_or_default());
        }
        return;
    }
    println!("{:<11} {:>14} {:>10} {:>9} {:>7}  verified", "kind", "bytes", "seconds", "MB/s", "CPU s");
    for r in results {
        let cpu = r.cpu_s.map_or("-".to_string(), |c| format!("{c:.2}"));
        println!(
            "{:<11} {:>14} {:>10.3} {:>9.1} {:>7}  {}",
            r.kind, r.bytes, r.seconds, r.mb_per_s, cpu, r.verified
        );
    }
    let find = |k: &str| results.iter().find(|r| r.kind == k);
    if let Some(l) = find("log").and_then(|l| l.since_restart_s.map(|s| (l, s))) {
        println!("log: {:.3} s from the backup's restart, {:.3} s from its reconnection", l.1, l.0.seconds);
    }
    if let Some(f) = find("full").and_then(|f| f.open_s.map(|s| (f, s))) {
        println!(
            "full: the primary opened in {:.3} s (the region, every lane's handshake and the plan; the region's \
             pages are mapped meanwhile and during the copy), then the copy took {:.3} s; CPU s counts both",
            f.1, f.0.seconds
        );
    }
    if let (Some(f), Some(t)) = (find("full"), find("tcp")) {
        println!("full/tcp bandwidth = {:.2} (target >= 0.8)", f.mb_per_s / t.mb_per_s);
        if let (Some(fc), Some(tc)) = (f.cpu_s, t.cpu_s.filter(|&c| c > 0.0)) {
            println!("full/tcp CPU per byte = {:.2}", (fc / f.bytes as f64) / (tc / t.bytes as f64));
        }
    }
    if let (Some(ft), Some(f)) = (find("full-tls"), find("full")) {
        println!("full-tls/full bandwidth = {:.2} (target >= 0.8)", ft.mb_per_s / f.mb_per_s);
        if let (Some(tc), Some(fc)) = (ft.cpu_s, f.cpu_s.filter(|&c| c > 0.0)) {
            println!("full-tls/full CPU per byte = {:.2}", (tc / ft.bytes as f64) / (fc / f.bytes as f64));
        }
    }
    for base in ["tcp-region", "tcp-checked"] {
        if let (Some(f), Some(t)) = (find("full"), find(base)) {
            println!("full/{base} bandwidth = {:.2}", f.mb_per_s / t.mb_per_s);
        }
    }
    if let (Some(f), Some(t)) = (find("full"), find("tcp-region")) {
        if let (Some(open), Some(map)) = (f.open_s, t.map_s) {
            println!(
                "(full + open)/tcp-region time = {:.2} (target <= 1.25); against tcp-region + mapping its source \
                 ({map:.3} s): {:.2}",
                (f.seconds + open) / t.seconds,
                (f.seconds + open) / (t.seconds + map)
            );
        }
    }
    if let (Some(b), Some(f)) = (find("bitmap"), find("full")) {
        println!("bitmap/full time = {:.4} (target <= 0.05)", b.seconds / f.seconds);
    }
}
