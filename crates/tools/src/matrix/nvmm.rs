//! The matrix's `nvmm` experiment (Mojim paper §6.1–6.2, the PMEP emulator): M-sync against
//! S-unreplicated as the emulated NVMM's persistence barrier grows.
//!
//! At each barrier delay one local cluster is started with the delay on both roles
//! (`--nvmm-barrier-ns`): `unreplicated` pays it on the primary's own region, `sync` on the
//! mirror's log before it acknowledges. A second cluster whose mirror runs at memory speed
//! measures `sync-dram-mirror`: the paper's M-sync, whose mirror is written by the network
//! card straight into memory and flushes no cache before it acknowledges. The crossover is the
//! barrier delay from which a sync series is faster (mean latency) than `unreplicated`,
//! interpolated between the two measured delays around it.

use crate::bench::harness::{BenchResult, Session};
use crate::bench::BenchArgs;
use crate::plot::{self, Axis, Legend, Series};
use mojim::error::Result;
use std::fmt::Write as _;
use std::path::Path;

/// Bytes per sync point measured at every barrier delay.
pub const NVMM_SIZES: [u64; 2] = [64, 4096];
/// The series: unreplicated and sync on the emulated NVMM, sync against a memory-speed mirror.
pub const NVMM_SERIES: [&str; 3] = ["unreplicated", "sync", DRAM_MIRROR];
/// The series of `sync` whose mirror has no emulated NVMM.
pub const DRAM_MIRROR: &str = "sync-dram-mirror";

/// One measured point: the barrier delay in nanoseconds and a result whose `mode` is its series.
pub type NvmmPoint = (u64, BenchResult);

/// Measures every series at every size of [`NVMM_SIZES`] with barrier delay `barrier_ns`.
pub fn measure(base: &BenchArgs, barrier_ns: u64) -> Result<Vec<NvmmPoint>> {
    let mut out = Vec::new();
    let mut a = base.clone();
    a.nvmm_barrier_ns = barrier_ns;
    a.mode = vec!["unreplicated".into(), "sync".into()];
    let nvmm = Session::start(&a)?;
    for size in NVMM_SIZES {
        a.size = size;
        out.extend(nvmm.measure(&a)?.into_iter().map(|r| (barrier_ns, r)));
    }
    drop(nvmm);
    // The paper's mirror: memory speed (the primary's model does not matter in sync mode, which
    // persists nothing locally).
    a.mode = vec!["sync".into()];
    a.nvmm_barrier_ns = 0;
    a.nvmm_write_rate = None;
    let dram = Session::start(&a)?;
    for size in NVMM_SIZES {
        a.size = size;
        for mut r in dram.measure(&a)? {
            r.mode = DRAM_MIRROR.into();
            out.push((barrier_ns, r));
        }
    }
    Ok(out)
}

/// One row per barrier delay, series and size.
pub fn csv(rs: &[NvmmPoint]) -> String {
    let mut s = format!("barrier_ns,series,size_B,{}\n", super::BENCH_COLUMNS);
    for (b, r) in rs {
        let _ = writeln!(s, "{b},{},{},{}", r.mode, r.size, super::bench_columns(r));
    }
    s
}

/// Where a sync series becomes faster than unreplicated at `size`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Crossover {
    /// Faster already at the smallest delay measured.
    Always,
    /// Faster from about this many nanoseconds, between the two measured delays around it.
    At { ns: f64, after: u64, before: u64 },
    /// Slower at every delay measured, the largest of which is this.
    Never(u64),
}

/// The crossover of `series` against unreplicated at `size`, by mean latency: the first measured
/// delay at which the series is faster, interpolated linearly from the one before.
pub fn crossover(rs: &[NvmmPoint], series: &str, size: u64) -> Option<Crossover> {
    let mean = |b: u64, m: &str| {
        rs.iter().find(|(x, r)| *x == b && r.mode == m && r.size == size).map(|(_, r)| r.mean_us)
    };
    let mut delays: Vec<u64> = rs.iter().filter(|(_, r)| r.size == size).map(|(b, _)| *b).collect();
    delays.sort_unstable();
    delays.dedup();
    // unreplicated minus the series: positive where the series is faster.
    let gaps: Vec<(u64, f64)> =
        delays.iter().filter_map(|&b| Some((b, mean(b, "unreplicated")? - mean(b, series)?))).collect();
    let first = gaps.iter().position(|&(_, g)| g > 0.0);
    match first {
        _ if gaps.is_empty() => None,
        Some(0) => Some(Crossover::Always),
        Some(i) => {
            let ((b0, g0), (b1, g1)) = (gaps[i - 1], gaps[i]);
            let ns = b0 as f64 + (b1 - b0) as f64 * (-g0) / (g1 - g0);
            Some(Crossover::At { ns, after: b0, before: b1 })
        }
        None => Some(Crossover::Never(gaps[gaps.len() - 1].0)),
    }
}

fn describe(c: Crossover) -> String {
    match c {
        Crossover::Always => "faster at every delay measured".into(),
        Crossover::At { ns, after, before } => {
            format!("faster from about {:.1} µs per barrier (between {after} and {before} ns)", ns / 1000.0)
        }
        Crossover::Never(max) => format!("slower at every delay measured (up to {max} ns)"),
    }
}

/// The crossovers, one line per size, for the key ratios.
pub fn key_lines(rs: &[NvmmPoint]) -> String {
    let mut s = String::new();
    for size in super::distinct(rs.iter().map(|(_, r)| r.size)) {
        let each: Vec<String> = [DRAM_MIRROR, "sync"]
            .into_iter()
            .filter_map(|series| {
                Some(format!("{series} vs unreplicated: {}", describe(crossover(rs, series, size)?)))
            })
            .collect();
        if !each.is_empty() {
            let _ = writeln!(
                s,
                "- NVMM emulation, {} sync points: {} (paper, PMEP with a 1 µs barrier: M-sync 40 % below \
                 S-unreplicated)",
                plot::bytes(size as f64),
                each.join("; ")
            );
        }
    }
    s
}

/// summary.md's table: mean latency, one row per barrier delay, a column per series and size.
pub fn table(s: &mut String, rs: &[NvmmPoint]) {
    s.push_str(
        "\n## Emulated NVMM: mean latency in µs by the persistence barrier's delay (§6.1, PMEP): \
         `nvmm.csv`\n\nunreplicated pays the delay on the primary, sync on the mirror's log before it \
         acknowledges; sync-dram-mirror is sync against a mirror at memory speed (the paper's \
         M-sync).\n\n",
    );
    let sizes = super::distinct(rs.iter().map(|(_, r)| r.size));
    let delays = super::distinct(rs.iter().map(|(b, _)| *b));
    let cols: Vec<(u64, &str)> = sizes.iter().flat_map(|&z| NVMM_SERIES.map(|m| (z, m))).collect();
    let _ = write!(s, "| barrier ns |");
    for (z, m) in &cols {
        let _ = write!(s, " {m}, {} |", plot::bytes(*z as f64));
    }
    let _ = writeln!(s, "\n|---:|{}", "---:|".repeat(cols.len()));
    for b in delays {
        let _ = write!(s, "| {b} |");
        for (z, m) in &cols {
            let v = rs.iter().find(|(x, r)| *x == b && r.size == *z && r.mode == *m).map(|(_, r)| r.mean_us);
            let _ = write!(s, " {} |", v.map_or("–".into(), super::num));
        }
        s.push('\n');
    }
    s.push('\n');
    s.push_str(&key_lines(rs));
}

/// Mean latency by barrier delay, a line per series and size (dashed: 64 B).
pub fn plot(path: &Path, rs: &[NvmmPoint]) -> Result<()> {
    let sizes = super::distinct(rs.iter().map(|(_, r)| r.size));
    let mut series = Vec::new();
    for (zi, &z) in sizes.iter().enumerate() {
        for (i, m) in NVMM_SERIES.iter().enumerate() {
            let points: Vec<(f64, f64)> = rs
                .iter()
                .filter(|(_, r)| r.size == z && r.mode == *m)
                .map(|(b, r)| (*b as f64 / 1000.0, r.mean_us))
                .collect();
            if !points.is_empty() {
                series.push(Series {
                    label: format!("{m}, {}", plot::bytes(z as f64)),
                    points,
                    color: i,
                    dashed: zi + 1 < sizes.len(),
                });
            }
        }
    }
    plot::lines(
        path,
        "Emulated NVMM: mean sync point latency by barrier delay (dashed: the smaller size)",
        &Axis::linear("delay added to each persistence barrier (µs)"),
        &Axis::log("mean latency (µs, log scale)"),
        &series,
        Legend::UpperLeft,
        None,
    )
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn point(b: u64, mode: &str, size: u64, mean: f64) -> NvmmPoint {
        let r = BenchResult {
            ops: 10,
            mean_us: mean,
            p50_us: mean,
            p99_us: mean,
            ops_per_s: 1e6 / mean,
            ..BenchResult::new(mode, size, 1, 1)
        };
        (b, r)
    }

    /// unreplicated: 1 µs + the delay; sync: 30 µs + the delay; the memory-speed mirror: 30 µs.
    pub fn fake() -> Vec<NvmmPoint> {
        let mut v = Vec::new();
        for b in [0u64, 10_000, 20_000, 50_000] {
            let d = b as f64 / 1000.0;
            v.push(point(b, "unreplicated", 4096, 1.0 + d));
            v.push(point(b, "sync", 4096, 30.0 + d));
            v.push(point(b, DRAM_MIRROR, 4096, 30.0));
        }
        v
    }

    #[test]
    fn the_crossover_is_interpolated_between_the_delays_around_it() {
        let rs = fake();
        // The gap is 1 + d - 30: -9 at 20 µs, +21 at 50 µs: zero at 20 + 30 × 9/30 = 29 µs.
        match crossover(&rs, DRAM_MIRROR, 4096) {
            Some(Crossover::At { ns, after: 20_000, before: 50_000 }) => {
                assert!((ns - 29_000.0).abs() < 1e-6)
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(crossover(&rs, "sync", 4096), Some(Crossover::Never(50_000)));
        assert_eq!(crossover(&rs, "sync", 64), None);
        let fast: Vec<NvmmPoint> = rs
            .iter()
            .cloned()
            .map(|(b, mut r)| {
                if r.mode == "sync" {
                    r.mean_us = 0.5;
                }
                (b, r)
            })
            .collect();
        assert_eq!(crossover(&fast, "sync", 4096), Some(Crossover::Always));
    }

    #[test]
    fn the_csv_and_the_table_have_every_point() {
        let rs = fake();
        let c = csv(&rs);
        assert!(c.starts_with("barrier_ns,series,size_B,ops,mean_us,"), "{c}");
        assert_eq!(c.lines().count(), 1 + rs.len());
        assert!(c.contains("\n20000,sync-dram-mirror,4096,10,30.000,"), "{c}");
        let mut s = String::new();
        table(&mut s, &rs);
        for needle in [
            "| barrier ns | unreplicated, 4 KiB | sync, 4 KiB | sync-dram-mirror, 4 KiB |",
            "| 10000 | 11.0 | 40.0 | 30.0 |",
            "sync-dram-mirror vs unreplicated: faster from about 29.0 µs per barrier (between 20000 and 50000 ns)",
            "sync vs unreplicated: slower at every delay measured (up to 50000 ns)",
        ] {
            assert!(s.contains(needle), "{needle:?} not in\n{s}");
        }
    }
}
