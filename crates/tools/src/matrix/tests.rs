//! Tests of the matrix's plan, CSV files, summary and plots, on made-up results.

use super::csv::{checkpoint_csv, schemes_csv, sizes_csv, threads_csv, transact_csv};
use super::plan::{plan, session_modes, Step};
use super::summary::summary_md;
use super::{
    nvmm, write_all, Experiment, MatrixArgs, MatrixResults, RunInfo, DISK_MODE, FILES, LANES, SCHEMES, SIZES,
};
use crate::bench::harness::transact::{Strategy, TransactArgs, TransactResult};
use crate::bench::harness::BenchResult;

fn bench(mode: &str, size: u64, threads: usize, lanes: u16, mean: f64) -> BenchResult {
    BenchResult {
        ops: 100,
        mean_us: mean,
        p50_us: mean * 0.9,
        p99_us: mean * 3.0,
        ops_per_s: 1e6 / mean * threads as f64,
        mb_per_s: size as f64 / mean * threads as f64,
        ..BenchResult::new(mode, size, threads, lanes)
    }
}

fn tx(s: Strategy, e: u32, w: u32, mean: f64, base: f64) -> TransactResult {
    TransactResult {
        strategy: s.name().into(),
        epochs: e,
        writes: w,
        transactions: 10,
        mean_us: mean,
        p50_us: mean,
        p99_us: mean * 2.0,
        slowdown: mean / base,
    }
}

/// Results shaped like a real run, made up.
fn fake() -> MatrixResults {
    let mut r = MatrixResults::default();
    for (m, mean) in [
        (DISK_MODE, 900.0),
        ("unreplicated", 0.7),
        ("async", 9.0),
        ("sync", 120.0),
        ("sync-flush", 125.0),
        ("sync-disk", 130.0),
        ("tcp-rtt", 115.0),
    ] {
        r.schemes.push(bench(m, 4096, 1, if m.starts_with("sync") { 1 } else { 0 }, mean));
    }
    for &size in &SIZES {
        for (m, mean) in [("unreplicated", 0.5), ("async", 8.0), ("sync", 100.0)] {
            r.sizes.push(bench(m, size, 1, 1, mean + size as f64 / 1000.0));
        }
    }
    for t in 1..=2 {
        for l in LANES {
            r.threads.push(bench("sync", 4096, t, l, 120.0 / t as f64));
        }
        r.threads.push(bench("unreplicated", 4096, t, 0, 0.7));
        r.threads.push(bench("async", 4096, t, t as u16, 9.0));
    }
    for c in [1, 10, 100] {
        r.checkpoint.push((c, bench("sync", 4096, 1, 1, 120.0 + c as f64 / 10.0)));
    }
    for t in [40 << 10, 4 << 20, 400 << 20] {
        r.secondary.push((t, bench("sync-backup-slow", 4096, 1, 1, 200.0 - (t >> 20) as f64 / 4.0)));
    }
    r.nvmm = nvmm::tests::fake();
    for w in [1, 2] {
        for e in [1, 8, 16] {
            let base = 0.2 * (e * w) as f64;
            r.transact.push(tx(Strategy::NoSm, e, w, base, base));
            r.transact.push(tx(Strategy::SmRc, e, w, 100.0 * e as f64, base));
            r.transact.push(tx(Strategy::SmOb, e, w, 100.0 + 10.0 * e as f64, base));
        }
    }
    r
}

#[test]
fn csv_files_have_a_header_with_units_and_one_row_per_result() {
    let r = fake();
    let s = schemes_csv(&r.schemes);
    let lines: Vec<&str> = s.lines().collect();
    assert_eq!(
        lines[0],
        "scheme,paper_name,size_B,threads,lanes,ops,mean_us,p50_us,p99_us,ops_per_s,MB_per_s"
    );
    assert_eq!(lines.len(), 1 + r.schemes.len());
    assert!(lines[1]
        .starts_with("unreplicated-disk,\"S-unreplicated on a disk file (msync(2))\",4096,1,0,100,900.000,"));
    let cols = lines[0].split(',').count();
    for l in &lines[1..] {
        assert_eq!(l.split(',').count(), cols, "{l}");
    }
    // So that a naive split on commas reads the files right.
    assert!(SCHEMES.iter().all(|s| !s.paper.contains([',', '"']) && !s.mode.contains([',', '"'])));
    let s = sizes_csv(&r.sizes);
    assert!(s.starts_with("mode,size_B,ops,mean_us,"));
    assert_eq!(s.lines().count(), 1 + SIZES.len() * 3);
    assert!(threads_csv(&r.threads).starts_with("mode,threads,lanes,size_B,ops,"));
    let s = checkpoint_csv(&r.checkpoint);
    assert_eq!(s.lines().nth(2).map(|l| l.split(',').take(2).collect::<Vec<_>>()), Some(vec!["10", "sync"]));
    let s = transact_csv(&r.transact);
    assert!(s.starts_with("strategy,epochs_per_tx,writes_per_epoch,write_B,transactions,mean_us,"));
    assert!(s.contains("\nsm-rc,8,1,64,10,800.000,800.000,1600.000,500.000\n"), "{s}");
}

#[test]
fn the_summary_has_every_table_and_the_key_ratios() {
    let r = fake();
    let info =
        RunInfo { command: "mojim bench --matrix out".into(), ops: 100, repeat: 1, ..RunInfo::default() };
    let s = summary_md(&r, &info);
    for needle in [
        "- command: `mojim bench --matrix out`",
        "sync / unreplicated-disk: mean 0.13 , p50 0.13",
        "sync p50 / tcp-rtt p50: 1.04",
        "sync-disk mean / sync mean: 1.08",
        // W=1: 800/180 = 4.44 at 8 epochs, 1600/260 = 6.15 at 16 epochs.
        "at least 4.44× (lowest at 8 epochs; by epochs 8: 4.44×, 16: 6.15×); target ≥ 3×: met",
        "## Table 1 schemes",
        "| M-sync | sync | 120 | 108 | 360 |",
        "| size | unreplicated | async | sync |",
        "| 4 KiB | 4.60 | 12.1 | 104 |",
        "| threads | sync, 1 lane | sync, 2 lanes | sync, 4 lanes | unreplicated | async |",
        "| 10 | 121 |",
        "| 8 | 1 | 1.60 | 800 | 180 | 500× | 112× | 4.44× |",
        "## Emulated NVMM",
        "sync-dram-mirror vs unreplicated: faster from about 29.0 µs",
    ] {
        assert!(s.contains(needle), "summary.md lacks {needle:?}:\n{s}");
    }
    assert!(!s.contains("Failed points"));
    let mut failed = r.clone();
    failed.failures.push("sizes: 8 B: boom".into());
    failed.transact.retain(|t| t.strategy != "sm-ob");
    let s = summary_md(&failed, &info);
    assert!(s.contains("## Failed points\n\n- sizes: 8 B: boom"), "{s}");
    assert!(!s.contains("target ≥ 3×"), "no key speedup without sm-ob");
    assert!(summary_md(&MatrixResults::default(), &info).contains("nothing measured"));
}

#[test]
fn write_all_writes_every_csv_plot_and_the_summary() {
    let dir = std::env::temp_dir().join(format!("mojim-matrix-unit-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create a temporary folder");
    let files = write_all(&dir, &fake(), &RunInfo::default()).expect("write the matrix files");
    let mut names: Vec<String> =
        files.iter().map(|p| p.file_name().unwrap_or_default().to_string_lossy().into_owned()).collect();
    names.sort();
    assert_eq!(names, FILES.iter().map(|s| s.to_string()).collect::<Vec<_>>());
    for f in &files {
        let bytes = std::fs::read(f).expect("read back");
        if f.extension().is_some_and(|e| e == "png") {
            assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n") && bytes.len() > 10_000, "{}", f.display());
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_plan_covers_every_experiment_and_options_are_checked() {
    let m = MatrixArgs {
        matrix: Some("x".into()),
        matrix_ops: 10,
        matrix_region_size: 1 << 20,
        matrix_threads: 2,
        matrix_experiments: vec![],
        matrix_checkpoints: vec![1, 100],
        matrix_secondary: vec![40 << 10],
        matrix_secondary_rate: "20MiB/s".into(),
        matrix_nvmm_barriers: vec![0, 1000],
    };
    let t = TransactArgs { transact: false, epochs: vec![1, 8], writes: vec![1, 2], transactions: 3 };
    let steps = plan(&m, &t, &Experiment::ALL);
    assert_eq!(steps[0], Step::Schemes);
    assert_eq!(steps.iter().filter(|s| matches!(s, Step::Size(_))).count(), SIZES.len());
    assert_eq!(steps.iter().filter(|s| matches!(s, Step::Threads { .. })).count(), 2 * (LANES.len() + 1));
    assert_eq!(steps.iter().filter(|s| matches!(s, Step::Checkpoint(_))).count(), 2);
    assert_eq!(steps.iter().filter(|s| matches!(s, Step::Nvmm(_))).count(), 2);
    assert_eq!(steps.last(), Some(&Step::Transact { epochs: 8, writes: 2 }));
    assert!(steps.iter().all(|s| !s.label().is_empty() && s.weight() >= 1));
    assert_eq!(session_modes(&[Experiment::Transact]), vec!["sync".to_string()]);
    let all = session_modes(&Experiment::ALL);
    assert!(all.contains(&"sync-disk".to_string()) && !all.contains(&DISK_MODE.to_string()), "{all:?}");
    assert!(Experiment::parse("sizes").is_ok());
    assert!(Experiment::parse("size").unwrap_err().to_string().contains("\"size\""));
}
