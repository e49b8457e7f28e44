//! The matrix's `summary.md`: the run's circumstances, the key ratios and a table per experiment.

use super::csv::paper_name;
use super::{nvmm, MatrixResults, RunInfo, DISK_MODE, PENDING_SCHEMES};
use crate::bench::harness::transact::{self, Strategy, TransactResult};
use crate::bench::harness::BenchResult;
use crate::plot;
use std::fmt::Write as _;

/// A figure with about three significant digits.
pub(crate) fn num(v: f64) -> String {
    if !v.is_finite() {
        "–".into()
    } else if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

pub(super) fn find<'a>(rs: &'a [BenchResult], mode: &str) -> Option<&'a BenchResult> {
    rs.iter().find(|r| r.mode == mode)
}

/// The ratios the matrix is for, one line each (only those whose inputs were measured).
pub fn key_ratios(res: &MatrixResults) -> String {
    let mut s = String::new();
    let t = &res.schemes;
    if let (Some(y), Some(d)) = (find(t, "sync"), find(t, DISK_MODE)) {
        let _ = writeln!(
            s,
            "- sync / unreplicated-disk: mean {} , p50 {} (paper, M-sync vs S-unreplicated: 0.55–0.60)",
            num(y.mean_us / d.mean_us),
            num(y.p50_us / d.p50_us)
        );
    }
    if let (Some(y), Some(r)) = (find(t, "sync"), find(t, "tcp-rtt")) {
        let _ = writeln!(
            s,
            "- sync p50 / tcp-rtt p50: {} (a raw round trip of the same size)",
            num(y.p50_us / r.p50_us)
        );
    }
    if let (Some(d), Some(y)) = (find(t, "sync-disk"), find(t, "sync")) {
        let _ = writeln!(
            s,
            "- sync-disk mean / sync mean: {} (paper: the disk adds 1–10 %)",
            num(d.mean_us / y.mean_us)
        );
    }
    if let (Some(x), Some(u)) = (find(t, "async"), find(t, "unreplicated")) {
        let _ = writeln!(s, "- async mean / unreplicated (tmpfs) mean: {}", num(x.mean_us / u.mean_us));
    }
    let ups: Vec<(u32, f64)> = transact::speedups(&res.transact)
        .into_iter()
        .filter(|&(e, w, _)| w == 1 && e >= 8)
        .map(|(e, _, x)| (e, x))
        .collect();
    if let Some((e, lowest)) = transact::key_speedup(&res.transact) {
        let each: Vec<String> = ups.iter().map(|(e, x)| format!("{e}: {}×", num(*x))).collect();
        let _ = writeln!(
            s,
            "- Transact, ordered pipelining (sm-ob) vs a round trip per fence (sm-rc), 1 write per epoch, \
             ≥ 8 epochs: at least {}× (lowest at {e} epochs; by epochs {}); target ≥ 3×: {}",
            num(lowest),
            each.join(", "),
            if lowest >= 3.0 { "met" } else { "NOT met" }
        );
    }
    if !res.checkpoint.is_empty() {
        let (lo, hi) = res
            .checkpoint
            .iter()
            .fold((f64::INFINITY, 0f64), |(lo, hi), (_, r)| (lo.min(r.mean_us), hi.max(r.mean_us)));
        let _ = writeln!(
            s,
            "- checkpoint_thresh: slowest / fastest mean sync latency over thresholds {}: {} (paper: no effect)",
            res.checkpoint.iter().map(|(t, _)| t.to_string()).collect::<Vec<_>>().join(", "),
            num(hi / lo)
        );
    }
    s.push_str(&nvmm::key_lines(&res.nvmm));
    if s.is_empty() {
        s.push_str("- (nothing measured that a key ratio needs)\n");
    }
    s
}

/// summary.md: how the run was made, the key ratios, and one table per experiment.
pub fn summary_md(res: &MatrixResults, info: &RunInfo) -> String {
    let mut s = String::from("# mojim bench --matrix\n\n");
    run_info_md(&mut s, info);
    s.push_str("\n## Key ratios\n\n");
    s.push_str(&key_ratios(res));
    if !res.schemes.is_empty() {
        schemes_table(&mut s, &res.schemes);
    }
    if !res.sizes.is_empty() {
        sizes_table(&mut s, &res.sizes);
    }
    if !res.threads.is_empty() {
        threads_table(&mut s, &res.threads);
    }
    if !res.checkpoint.is_empty() {
        let h = "\n## The mirror's checkpoint_thresh, sync at 4 KiB (§6.3.3): `checkpoint.csv`\n\n";
        sweep_table(&mut s, h, "checkpoint_thresh", &res.checkpoint, |t| t.to_string());
    }
    if !res.secondary.is_empty() {
        let h = "\n## The mirror's secondary_tier_thresh, sync + backup over a slow link at 4 KiB (§6.3.3): \
                 `secondary.csv`\n\n";
        sweep_table(&mut s, h, "secondary_tier_thresh", &res.secondary, |t| plot::bytes(t as f64));
    }
    if !res.nvmm.is_empty() {
        nvmm::table(&mut s, &res.nvmm);
    }
    if !res.transact.is_empty() {
        transact_table(&mut s, &res.transact);
    }
    if !res.failures.is_empty() {
        s.push_str("\n## Failed points\n\n");
        for f in &res.failures {
            let _ = writeln!(s, "- {f}");
        }
    }
    s
}

/// summary.md's opening list: when, where and how the run was made.
pub(super) fn run_info_md(s: &mut String, info: &RunInfo) {
    let _ = writeln!(s, "- date (UTC): {}", info.date);
    let _ = writeln!(s, "- machine: {}", info.machine);
    let _ = writeln!(s, "- command: `{}`", info.command);
    let _ = writeln!(
        s,
        "- {} sync points per point; {} transactions per Transact point; {} round(s) per point, the \
         median reported; took {:.0} s",
        info.ops, info.transactions, info.repeat, info.seconds
    );
    s.push_str("\nThe machine is shared and noisy: compare ratios within one run, not across runs.\n");
}

/// summary.md's Table 1: one row per scheme, then the schemes not measured yet.
pub(super) fn schemes_table(s: &mut String, rs: &[BenchResult]) {
    s.push_str("\n## Table 1 schemes, 4 KiB sync points (Figs. 4–5): `schemes.csv`\n\n");
    s.push_str("| scheme (paper) | mode | mean µs | p50 µs | p99 µs | ops/s | MB/s |\n|---|---|---:|---:|---:|---:|---:|\n");
    for r in rs {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {:.0} | {} |",
            paper_name(&r.mode),
            r.mode,
            num(r.mean_us),
            num(r.p50_us),
            num(r.p99_us),
            r.ops_per_s,
            num(r.mb_per_s)
        );
    }
    if !PENDING_SCHEMES.is_empty() {
        s.push_str("\nNot measured yet (`mojim bench` cannot start them yet): ");
        s.push_str(&PENDING_SCHEMES.join("; "));
        s.push_str(".\n");
    }
}

/// summary.md's Fig. 8 table: mean latency, one row per size, one column per mode.
pub(super) fn sizes_table(s: &mut String, rs: &[BenchResult]) {
    s.push_str("\n## Sync point size, mean latency in µs (Fig. 8): `sizes.csv`\n\n");
    let modes = distinct(rs.iter().map(|r| r.mode.as_str()));
    let sizes = distinct(rs.iter().map(|r| r.size));
    grid_table(
        s,
        "size",
        &modes,
        &sizes,
        |size| plot::bytes(size as f64),
        |size, m| rs.iter().find(|r| r.size == size && r.mode == *m).map(|r| r.mean_us),
    );
}

/// summary.md's Fig. 9 table: throughput, one row per thread count, one column per series.
pub(super) fn threads_table(s: &mut String, rs: &[BenchResult]) {
    s.push_str("\n## Threads and lanes, throughput in MB/s of 4 KiB sync points (Fig. 9): `threads.csv`\n\n");
    let cols = distinct(rs.iter().map(thread_series));
    let threads = distinct(rs.iter().map(|r| r.threads));
    grid_table(
        s,
        "threads",
        &cols,
        &threads,
        |t| t.to_string(),
        |t, c| rs.iter().find(|r| r.threads == t && thread_series(r) == *c).map(|r| r.mb_per_s),
    );
}

/// A summary.md table with one row per value of `rows` (named by `row_name`) and one column per
/// name in `cols`; a cell `cell` has no figure for is "–".
pub(super) fn grid_table<R: Copy, C: AsRef<str>>(
    s: &mut String,
    corner: &str,
    cols: &[C],
    rows: &[R],
    row_name: impl Fn(R) -> String,
    cell: impl Fn(R, &C) -> Option<f64>,
) {
    let names: Vec<&str> = cols.iter().map(AsRef::as_ref).collect();
    let _ = writeln!(s, "| {corner} | {} |", names.join(" | "));
    let _ = writeln!(s, "|---:|{}", "---:|".repeat(cols.len()));
    for &r in rows {
        let cells: Vec<String> = cols.iter().map(|c| cell(r, c).map_or("–".into(), num)).collect();
        let _ = writeln!(s, "| {} | {} |", row_name(r), cells.join(" | "));
    }
}

/// summary.md's Transact table: one row per writes and epochs, the three strategies side by side.
pub(super) fn transact_table(s: &mut String, rs: &[TransactResult]) {
    s.push_str("\n## Transact: mean transaction latency in µs and slowdown over no-sm: `transact.csv`\n\n");
    s.push_str(
        "| epochs | writes | no-sm µs | sm-rc µs | sm-ob µs | sm-rc slowdown | sm-ob slowdown | sm-rc / sm-ob |\n\
         |---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for w in distinct(rs.iter().map(|r| r.writes)) {
        for e in distinct(rs.iter().filter(|r| r.writes == w).map(|r| r.epochs)) {
            transact_row(s, rs, e, w);
        }
    }
}

/// One row of the Transact table: `e` epochs of `w` writes.
pub(super) fn transact_row(s: &mut String, rs: &[TransactResult], e: u32, w: u32) {
    let get = |st: Strategy| rs.iter().find(|r| r.strategy == st.name() && r.epochs == e && r.writes == w);
    let (n, rc, ob) = (get(Strategy::NoSm), get(Strategy::SmRc), get(Strategy::SmOb));
    let f = |r: Option<&TransactResult>, v: fn(&TransactResult) -> f64| r.map_or("–".into(), |r| num(v(r)));
    let ratio = match (rc, ob) {
        (Some(rc), Some(ob)) => num(rc.mean_us / ob.mean_us),
        _ => "–".into(),
    };
    let _ = writeln!(
        s,
        "| {e} | {w} | {} | {} | {} | {}× | {}× | {ratio}× |",
        f(n, |r| r.mean_us),
        f(rc, |r| r.mean_us),
        f(ob, |r| r.mean_us),
        f(rc, |r| r.slowdown),
        f(ob, |r| r.slowdown)
    );
}

pub(super) fn thread_series(r: &BenchResult) -> String {
    if r.mode == "sync" {
        format!("sync, {} lane{}", r.lanes, if r.lanes == 1 { "" } else { "s" })
    } else {
        r.mode.clone()
    }
}

/// The distinct values, in first-seen order.
pub(crate) fn distinct<T: PartialEq>(it: impl Iterator<Item = T>) -> Vec<T> {
    let mut v = Vec::new();
    for x in it {
        if !v.contains(&x) {
            v.push(x);
        }
    }
    v
}

/// A summary.md table of a swept setting: one row per value, as `label` writes it.
pub(super) fn sweep_table(
    s: &mut String,
    heading: &str,
    name: &str,
    rs: &[(usize, BenchResult)],
    label: fn(usize) -> String,
) {
    s.push_str(heading);
    let _ = writeln!(s, "| {name} | mean µs | p50 µs | p99 µs | ops/s |\n|---:|---:|---:|---:|---:|");
    for (t, r) in rs {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {:.0} |",
            label(*t),
            num(r.mean_us),
            num(r.p50_us),
            num(r.p99_us),
            r.ops_per_s
        );
    }
}
