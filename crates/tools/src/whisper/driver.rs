//! `mojim bench --whisper`: every WHISPER structure under every fence strategy, side by side in
//! one run (the shape of Fig. 7 of the RDMA mirroring study: `sm-ob` faster than `sm-rc`, both
//! slower than `no-sm`). Each (structure, strategy) formats the structure afresh at the start of
//! the region and runs the same seeded workload (see [`super::workload`]); `--repeat` rounds are
//! interleaved and the round with the median mean is reported.

use super::mem::PmMem;
use super::{workload, Structure, Workload};
use crate::bench::harness::transact::Strategy;
use crate::bench::harness::Session;
use crate::bench::BenchArgs;
use hdrhistogram::Histogram;
use mojim::error::{Error, Result};
use mojim::primary::Primary;
use mojim::Mode;
use serde::Serialize;
use std::time::Instant;

/// Options of `mojim bench --whisper`.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct WhisperArgs {
    /// Run the WHISPER structures (hashmap, ctree, echo) under the strategies no-sm, sm-rc and
    /// sm-ob instead of --mode.
    #[arg(long, conflicts_with_all = ["matrix", "transact"])]
    pub whisper: bool,
    /// Operations per structure and strategy (an echo operation is one batch).
    #[arg(long, default_value_t = 2000)]
    pub whisper_ops: u64,
    /// Distinct keys the workloads draw from.
    #[arg(long, default_value_t = 1000)]
    pub whisper_keys: u64,
    /// Puts per echo batch.
    #[arg(long, default_value_t = 8)]
    pub whisper_batch: u64,
}

/// One measured (structure, strategy).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct WhisperResult {
    pub structure: String,
    pub strategy: String,
    pub ops: u64,
    /// Ordering points (fences, the commit's included) per operation: the most round trips
    /// `sm-ob` can save over `sm-rc` in one operation.
    pub fences_per_op: f64,
    pub ops_per_s: f64,
    pub mean_us: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    /// `mean_us` over `no-sm`'s for the same structure.
    pub slowdown: f64,
}

/// Checks the options before anything is started.
pub fn check_args(w: &WhisperArgs, region_size: u64) -> Result<Workload> {
    if w.whisper_ops == 0 || w.whisper_keys == 0 || w.whisper_batch == 0 || w.whisper_batch > 64 {
        return Err(Error::Config(format!(
            "--whisper-ops {}, --whisper-keys {}, --whisper-batch {}: each must be at least 1 (a batch at most 64)",
            w.whisper_ops, w.whisper_keys, w.whisper_batch
        )));
    }
    let wl = Workload {
        ops: w.whisper_ops,
        keys: w.whisper_keys,
        batch: w.whisper_batch,
        seed: 0x5748_1595_0000_0001,
    };
    for s in Structure::ALL {
        if wl.bytes(s) > region_size {
            return Err(Error::Config(format!(
                "--region-size {region_size}: {} needs {} bytes for this workload; use a larger --region-size or fewer --whisper-ops",
                s.name(),
                wl.bytes(s)
            )));
        }
    }
    Ok(wl)
}

/// Runs `w` on structure `s` under strategy `st` on primary `p`.
fn measure_one(p: &Primary, s: Structure, st: Strategy, w: &Workload) -> Result<WhisperResult> {
    let mut m = PmMem::new(p, st, w.bytes(s))?;
    let mut h = Histogram::<u64>::new(3).expect("3 significant figures is valid");
    let start = Instant::now();
    let ran = workload(s, &mut m, w, |d| {
        h.record(d.as_nanos() as u64).ok();
    })?;
    let secs = start.elapsed().as_secs_f64();
    Ok(WhisperResult {
        structure: s.name().into(),
        strategy: st.name().into(),
        ops: w.ops,
        fences_per_op: ran.fences as f64 / w.ops as f64,
        ops_per_s: w.ops as f64 / secs.max(1e-9),
        mean_us: h.mean() / 1000.0,
        p50_us: h.value_at_quantile(0.5) as f64 / 1000.0,
        p99_us: h.value_at_quantile(0.99) as f64 / 1000.0,
        slowdown: 0.0,
    })
}

/// `mojim bench --whisper`: measures and prints.
pub fn run(a: &BenchArgs) -> Result<()> {
    let w = check_args(&a.whisper, a.region_size)?;
    let mut sa = a.clone();
    sa.mode = vec![Mode::Sync.name().into()];
    sa.disk_file = None;
    let session = Session::start(&sa)?;
    let replicated = session.open_primary(&sa, Mode::Sync)?;
    // The unreplicated primary on a region file of its own (a region has one primary at a
    // time), removed at the end.
    let local_path = session.region_path().with_extension("no-sm.mojim");
    let local = session.open_local_primary(&sa, &local_path, replicated.size());
    let _remove = crate::bench::harness::RemoveOnDrop(local_path);
    let local = local?;
    let area = Structure::ALL.iter().map(|&s| w.bytes(s)).max().unwrap_or(0);
    for p in [&local, &replicated] {
        let mut page = 0;
        while page < area {
            p.write(page, &[0])?;
            page += 4096;
        }
    }
    let mut results = Vec::new();
    for s in Structure::ALL {
        let mut rounds: Vec<Vec<WhisperResult>> = vec![Vec::new(); Strategy::ALL.len()];
        for round in 0..a.repeat.max(1) {
            for (i, st) in Strategy::ALL.into_iter().enumerate() {
                eprintln!(
                    "whisper: {} under {}, {} operations, round {}...",
                    s.name(),
                    st.name(),
                    w.ops,
                    round + 1
                );
                let p = if st == Strategy::NoSm { &local } else { &replicated };
                rounds[i].push(measure_one(p, s, st, &w)?);
            }
        }
        let mut out: Vec<WhisperResult> = rounds
            .into_iter()
            .map(|mut rs| {
                rs.sort_by(|x, y| x.mean_us.total_cmp(&y.mean_us));
                rs.swap_remove(rs.len() / 2)
            })
            .collect();
        let base = out[0].mean_us.max(1e-9);
        for r in &mut out {
            r.slowdown = r.mean_us / base;
        }
        results.extend(out);
    }
    replicated.close()?;
    local.close()?;
    drop(session);
    print(&results, a.json);
    Ok(())
}

/// For each structure: `sm-rc` mean over `sm-ob` mean.
pub fn speedups(results: &[WhisperResult]) -> Vec<(String, f64)> {
    let find = |s: &str, st: Strategy| results.iter().find(|r| r.structure == s && r.strategy == st.name());
    Structure::ALL
        .iter()
        .filter_map(|s| {
            let (rc, ob) = (find(s.name(), Strategy::SmRc)?, find(s.name(), Strategy::SmOb)?);
            Some((s.name().to_string(), rc.mean_us / ob.mean_us.max(1e-9)))
        })
        .collect()
}

/// Prints results as a table with the ratios, or as JSON lines.
pub fn print(results: &[WhisperResult], json: bool) {
    if json {
        for r in results {
            println!("{}", serde_json::to_string(r).unwrap_or_default());
        }
        return;
    }
    println!(
        "{:<9} {:<8} {:>6} {:>7} {:>11} {:>10} {:>10} {:>10} {:>9}",
        "structure", "strategy", "ops", "fences", "ops/s", "mean_us", "p50_us", "p99_us", "slowdown"
    );
    for r in results {
        println!(
            "{:<9} {:<8} {:>6} {:>7.2} {:>11.0} {:>10.2} {:>10.2} {:>10.2} {:>8.2}x",
            r.structure,
            r.strategy,
            r.ops,
            r.fences_per_op,
            r.ops_per_s,
            r.mean_us,
            r.p50_us,
            r.p99_us,
            r.slowdown
        );
    }
    for (s, x) in speedups(results) {
        println!("{s}: sm-rc mean / sm-ob mean = {x:.2}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(ops: u64, keys: u64, batch: u64) -> WhisperArgs {
        WhisperArgs { whisper: true, whisper_ops: ops, whisper_keys: keys, whisper_batch: batch }
    }

    #[test]
    fn bad_options_are_refused_with_their_values() {
        assert!(check_args(&args(10, 10, 8), 1 << 20).is_ok());
        let e = check_args(&args(0, 10, 8), 1 << 20).unwrap_err().to_string();
        assert!(e.contains("--whisper-ops 0"), "{e}");
        assert!(check_args(&args(10, 10, 65), 1 << 20).is_err());
        let e = check_args(&args(100_000, 10, 8), 1 << 20).unwrap_err().to_string();
        assert!(e.contains("--region-size 1048576"), "{e}");
    }

    #[test]
    fn the_speedup_is_sm_rc_over_sm_ob_per_structure() {
        let r = |s: &str, st: Strategy, mean: f64| WhisperResult {
            structure: s.into(),
            strategy: st.name().into(),
            ops: 1,
            fences_per_op: 2.0,
            ops_per_s: 1.0,
            mean_us: mean,
            p50_us: mean,
            p99_us: mean,
            slowdown: 1.0,
        };
        let rs = vec![
            r("hashmap", Strategy::SmRc, 300.0),
            r("hashmap", Strategy::SmOb, 100.0),
            r("echo", Strategy::SmRc, 5.0),
        ];
        assert_eq!(speedups(&rs), vec![("hashmap".to_string(), 3.0)]);
    }
}
