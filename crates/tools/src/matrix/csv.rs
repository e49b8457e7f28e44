//! The matrix's CSV files: one per experiment, a header with units and one row per result.

use super::SCHEMES;
use crate::bench::harness::transact::{self, TransactResult};
use crate::bench::harness::BenchResult;
use std::fmt::Write as _;

pub(crate) const BENCH_COLUMNS: &str = "ops,mean_us,p50_us,p99_us,ops_per_s,MB_per_s";

pub(crate) fn bench_columns(r: &BenchResult) -> String {
    format!("{},{:.3},{:.3},{:.3},{:.1},{:.3}", r.ops, r.mean_us, r.p50_us, r.p99_us, r.ops_per_s, r.mb_per_s)
}

pub(super) fn paper_name(mode: &str) -> &'static str {
    SCHEMES.iter().find(|s| s.mode == mode).map_or("", |s| s.paper)
}

/// Table 1: one row per scheme.
pub fn schemes_csv(rs: &[BenchResult]) -> String {
    let mut s = format!("scheme,paper_name,size_B,threads,lanes,{BENCH_COLUMNS}\n");
    for r in rs {
        let _ = writeln!(
            s,
            "{},\"{}\",{},{},{},{}",
            r.mode,
            paper_name(&r.mode),
            r.size,
            r.threads,
            r.lanes,
            bench_columns(r)
        );
    }
    s
}

/// Fig. 8: one row per mode and size.
pub fn sizes_csv(rs: &[BenchResult]) -> String {
    let mut s = format!("mode,size_B,{BENCH_COLUMNS}\n");
    for r in rs {
        let _ = writeln!(s, "{},{},{}", r.mode, r.size, bench_columns(r));
    }
    s
}

/// Fig. 9: one row per mode, threads and lanes.
pub fn threads_csv(rs: &[BenchResult]) -> String {
    let mut s = format!("mode,threads,lanes,size_B,{BENCH_COLUMNS}\n");
    for r in rs {
        let _ = writeln!(s, "{},{},{},{},{}", r.mode, r.threads, r.lanes, r.size, bench_columns(r));
    }
    s
}

/// §6.3.3: one row per secondary_tier_thresh.
pub fn secondary_csv(rs: &[(usize, BenchResult)]) -> String {
    sweep_csv("secondary_tier_thresh_B", rs)
}

/// §6.3.3: one row per checkpoint_thresh.
pub fn checkpoint_csv(rs: &[(usize, BenchResult)]) -> String {
    sweep_csv("checkpoint_thresh_groups", rs)
}

/// One row per value of a swept setting, named `column`.
pub(super) fn sweep_csv(column: &str, rs: &[(usize, BenchResult)]) -> String {
    let mut s = format!("{column},mode,size_B,{BENCH_COLUMNS}\n");
    for (t, r) in rs {
        let _ = writeln!(s, "{t},{},{},{}", r.mode, r.size, bench_columns(r));
    }
    s
}

/// Transact: one row per strategy, epochs and writes.
pub fn transact_csv(rs: &[TransactResult]) -> String {
    let mut s = String::from(
        "strategy,epochs_per_tx,writes_per_epoch,write_B,transactions,mean_us,p50_us,p99_us,slowdown_vs_no_sm_x\n",
    );
    for r in rs {
        let _ = writeln!(
            s,
            "{},{},{},{},{},{:.3},{:.3},{:.3},{:.3}",
            r.strategy,
            r.epochs,
            r.writes,
            transact::LINE,
            r.transactions,
            r.mean_us,
            r.p50_us,
            r.p99_us,
            r.slowdown
        );
    }
    s
}
