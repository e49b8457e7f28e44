//! `mojim bench --transact` and `mojim bench --matrix`, run as a user would, with tiny settings:
//! the numbers are not checked (a debug build on a shared machine), the shape of the output is.

mod common;

use common::TempDir;
use std::process::Command;
use std::time::Instant;

fn mojim(args: &[&str]) -> String {
    let t0 = Instant::now();
    let out = Command::new(common::exe()).args(args).output().expect("run mojim");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "mojim {} failed ({}):\n{stderr}", args.join(" "), out.status);
    println!("mojim {} took {:.1} s", args.join(" "), t0.elapsed().as_secs_f64());
    String::from_utf8(out.stdout).expect("utf-8 output")
}

#[test]
fn transact_reports_every_strategy_at_every_epochs_and_writes() {
    let dir = TempDir::new("transact");
    let d = dir.path().to_str().expect("utf-8 path");
    let out = mojim(&[
        "bench",
        "--transact",
        "--epochs",
        "1,8",
        "--writes",
        "1,2",
        "--transactions",
        "5",
        "--region-size",
        "1MiB",
        "--dir",
        d,
        "--json",
    ]);
    let rows: Vec<serde_json::Value> =
        out.lines().map(|l| serde_json::from_str(l).expect("one JSON object per line")).collect();
    assert_eq!(rows.len(), 2 * 2 * 3, "{out}");
    for e in [1, 8] {
        for w in [1, 2] {
            for s in ["no-sm", "sm-rc", "sm-ob"] {
                let r = rows
                    .iter()
                    .find(|r| r["epochs"] == e && r["writes"] == w && r["strategy"] == s)
                    .unwrap_or_else(|| panic!("no row for {s} at {e} epochs × {w} writes in\n{out}"));
                assert_eq!(r["transactions"], 5, "{r}");
                let mean = r["mean_us"].as_f64().expect("mean_us is a number");
                assert!(mean > 0.0, "{r}");
                let slowdown = r["slowdown"].as_f64().expect("slowdown is a number");
                if s == "no-sm" {
                    assert!((slowdown - 1.0).abs() < 1e-9, "no-sm is the baseline: {r}");
                }
            }
        }
    }
    // The table form ends with the ratios.
    let table = mojim(&[
        "bench",
        "--transact",
        "--epochs",
        "8",
        "--writes",
        "1",
        "--transactions",
        "3",
        "--region-size",
        "1MiB",
        "--dir",
        d,
    ]);
    assert!(table.contains("sm-rc mean / sm-ob mean"), "{table}");
    assert!(table.contains("target ≥ 3×"), "{table}");
}

#[test]
fn bad_transact_options_are_refused_before_anything_starts() {
    let out = Command::new(common::exe())
        .args(["bench", "--transact", "--epochs", "0", "--region-size", "1MiB"])
        .output()
        .expect("run mojim");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--epochs [0]"), "{err}");
}

#[test]
fn matrix_with_tiny_settings_writes_every_file() {
    let dir = TempDir::new("matrix");
    let d = dir.path().to_str().expect("utf-8 path");
    let out_dir = dir.path().join("out");
    let disk_file = format!("/var/tmp/mojim-test-{}-matrix.region", std::process::id());
    let out = mojim(&[
        "bench",
        "--matrix",
        out_dir.to_str().expect("utf-8 path"),
        "--matrix-ops",
        "20",
        "--warmup",
        "2",
        "--matrix-region-size",
        "1MiB",
        "--matrix-threads",
        "2",
        "--matrix-checkpoints",
        "1,10",
        "--matrix-nvmm-barriers",
        "0,1000",
        "--epochs",
        "1,8",
        "--writes",
        "1",
        "--transactions",
        "3",
        "--dir",
        d,
        "--disk-file",
        &disk_file,
    ]);
    let mut names: Vec<String> = std::fs::read_dir(&out_dir)
        .expect("the output folder exists")
        .map(|e| e.expect("a folder entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, mojim_tools::matrix::FILES.to_vec(), "{out}");
    let summary = std::fs::read_to_string(out_dir.join("summary.md")).expect("read summary.md");
    assert!(summary.contains("## Key ratios"), "{summary}");
    assert!(summary.contains("sync / unreplicated-disk"), "{summary}");
    assert!(!summary.contains("Failed points"), "{summary}");
    let sizes = std::fs::read_to_string(out_dir.join("sizes.csv")).expect("read sizes.csv");
    assert_eq!(sizes.lines().count(), 1 + 7 * 3, "{sizes}");
    let transact = std::fs::read_to_string(out_dir.join("transact.csv")).expect("read transact.csv");
    assert_eq!(transact.lines().count(), 1 + 2 * 3, "{transact}");
    assert_eq!(
        files_beginning(&disk_file),
        Vec::<String>::new(),
        "the disk file and its side files are removed"
    );
    // Nothing of the benchmark's own is left in --dir but the output folder.
    let left: Vec<_> = std::fs::read_dir(dir.path()).expect("read the test folder").collect();
    assert_eq!(left.len(), 1, "{left:?}");
}

#[test]
fn the_nvmm_experiment_writes_every_series_at_every_barrier_delay() {
    let dir = TempDir::new("matrix-nvmm");
    let d = dir.path().to_str().expect("utf-8 path");
    let out_dir = dir.path().join("out");
    let out = mojim(&[
        "bench",
        "--matrix",
        out_dir.to_str().expect("utf-8 path"),
        "--matrix-experiments",
        "nvmm",
        "--matrix-nvmm-barriers",
        "0,2000",
        "--matrix-ops",
        "20",
        "--warmup",
        "2",
        "--matrix-region-size",
        "1MiB",
        "--dir",
        d,
    ]);
    let mut names: Vec<String> = std::fs::read_dir(&out_dir)
        .expect("the output folder exists")
        .map(|e| e.expect("a folder entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["nvmm.csv", "nvmm_latency.png", "summary.md"], "{out}");
    let csv = std::fs::read_to_string(out_dir.join("nvmm.csv")).expect("read nvmm.csv");
    assert!(csv.starts_with("barrier_ns,series,size_B,ops,mean_us,"), "{csv}");
    for b in ["0", "2000"] {
        for series in ["unreplicated", "sync", "sync-dram-mirror"] {
            for size in ["64", "4096"] {
                let row = format!("{b},{series},{size},20,");
                assert!(csv.lines().any(|l| l.starts_with(&row)), "no row {row:?} in\n{csv}");
            }
        }
    }
    assert_eq!(csv.lines().count(), 1 + 2 * 3 * 2, "{csv}");
    let summary = std::fs::read_to_string(out_dir.join("summary.md")).expect("read summary.md");
    assert!(summary.contains("## Emulated NVMM"), "{summary}");
    assert!(summary.contains("sync-dram-mirror vs unreplicated"), "{summary}");
    assert!(!summary.contains("Failed points"), "{summary}");
    let left: Vec<_> = std::fs::read_dir(dir.path()).expect("read the test folder").collect();
    assert_eq!(left.len(), 1, "{left:?}");
}

#[test]
fn bad_nvmm_settings_are_refused_by_name() {
    for (args, needle) in [
        (&["--nvmm-barrier-ns", "2000000"][..], "nvmm_barrier_ns = 2000000 is outside 0 ..= 1000000"),
        (&["--nvmm-write-rate", "1KiB/s"][..], "nvmm_write_rate = \"1KiB/s\" is outside 1MiB/s ..= 1TiB/s"),
        (
            &[
                "--matrix",
                "/nonexistent/out",
                "--matrix-experiments",
                "nvmm",
                "--matrix-nvmm-barriers",
                "5000000",
            ][..],
            "--matrix-nvmm-barriers [5000000]",
        ),
    ] {
        let out = Command::new(common::exe())
            .args(["bench", "--mode", "unreplicated", "--region-size", "1MiB", "--ops", "1"])
            .args(args)
            .output()
            .expect("run mojim");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(needle), "{args:?}: {needle:?} not in {err}");
    }
}

/// The files whose path begins with `prefix` (a file and whatever was written beside it).
fn files_beginning(prefix: &str) -> Vec<String> {
    let p = std::path::Path::new(prefix);
    let (dir, name) = (p.parent().expect("a folder"), p.file_name().expect("a name").to_string_lossy());
    let mut found: Vec<String> = std::fs::read_dir(dir)
        .expect("read the folder")
        .map(|e| e.expect("a folder entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(name.as_ref()))
        .collect();
    found.sort();
    found
}

#[test]
fn a_disk_file_run_leaves_nothing_behind_and_runs_again() {
    let dir = TempDir::new("disk-file");
    let d = dir.path().to_str().expect("utf-8 path");
    let disk_file = format!("/var/tmp/mojim-test-{}-diskfile.region", std::process::id());
    let args = [
        "bench",
        "--mode",
        "tcp-rtt",
        "--ops",
        "20",
        "--warmup",
        "2",
        "--region-size",
        "1MiB",
        "--dir",
        d,
        "--disk-file",
        &disk_file,
    ];
    // A second run at the same path used to be refused: the first left its dirty map beside it.
    for run in 0..2 {
        let out = mojim(&args);
        assert!(out.contains("unreplicated-disk"), "run {run}: {out}");
        assert_eq!(files_beginning(&disk_file), Vec::<String>::new(), "run {run} left files behind");
    }
    // Files left beside the path by a run that was cut short belong to a region that is gone:
    // the next run replaces them.
    std::fs::write(format!("{disk_file}.dirty"), b"left by a killed run").expect("write a stale file");
    let out = mojim(&args);
    assert!(out.contains("unreplicated-disk"), "{out}");
    assert_eq!(files_beginning(&disk_file), Vec::<String>::new());
}

#[test]
fn resync_with_a_tiny_region_reports_every_kind_verified() {
    let dir = TempDir::new("resync-bench");
    let d = dir.path().to_str().expect("utf-8 path");
    let out = mojim(&[
        "bench",
        "--mode",
        "resync",
        "--region-size",
        "4MiB",
        "--changed",
        "2",
        "--dir",
        d,
        "--json",
    ]);
    let rows: Vec<serde_json::Value> =
        out.lines().map(|l| serde_json::from_str(l).expect("one JSON object per line")).collect();
    let kinds: Vec<&str> = rows.iter().map(|r| r["kind"].as_str().expect("kind is a string")).collect();
    assert_eq!(kinds, ["tcp", "tcp-region", "tcp-checked", "full", "bitmap", "log"], "{out}");
    for r in &rows {
        if r["kind"] == "log" {
            // Timed from the poll that sees the backup reconnected: a few KiB of catch-up can be
            // done by then (0 s), but never before the backup restarted.
            assert!(r["seconds"].as_f64().is_some_and(|s| s >= 0.0), "{r}");
            assert!(r["since_restart_s"].as_f64().is_some_and(|s| s > 0.0), "{r}");
            continue;
        }
        assert!(r["seconds"].as_f64().is_some_and(|s| s > 0.0), "{r}");
        assert!(r["mb_per_s"].as_f64().is_some_and(|s| s > 0.0), "{r}");
    }
    let bytes = |k: &str| rows.iter().find(|r| r["kind"] == k).expect("kind present")["bytes"].as_u64();
    for k in ["tcp", "tcp-region", "tcp-checked", "full"] {
        assert_eq!(bytes(k), Some(4 << 20), "{k} moves the whole region: {out}");
    }
    assert!(
        bytes("bitmap").is_some_and(|b| b > 0 && b < 4 << 20),
        "bitmap resends part of the region: {out}"
    );
    let verified = |k: &str| rows.iter().find(|r| r["kind"] == k).expect("kind present")["verified"].clone();
    assert_eq!(verified("tcp-region"), "whole region", "{out}");
    assert_eq!(verified("tcp-checked"), "every frame's CRC32C + whole region", "{out}");
    assert_eq!(verified("full"), "whole region", "{out}");
    let tcp = verified("tcp");
    assert!(tcp.as_str().is_some_and(|v| v.contains("before") && v.contains("after full")), "{out}");
    // The streams and the full copy say what CPU they cost (a tiny one may cost less than a tick).
    let cpu = |k: &str| rows.iter().find(|r| r["kind"] == k).expect("kind present")["cpu_s"].as_f64();
    for k in ["tcp", "tcp-region", "tcp-checked", "full"] {
        assert!(cpu(k).is_some_and(|c| c >= 0.0), "{k} reports cpu_s: {out}");
    }
    assert_eq!(cpu("bitmap"), None, "{out}");
    // Nothing of the benchmark's own is left in --dir.
    assert_eq!(std::fs::read_dir(dir.path()).expect("read the test folder").count(), 0);
}

/// `--tls on` adds `full-tls`: the whole region copied to a new mirror over mutual TLS, compared
/// with the primary's copy; it was ignored before (the resync kinds ran in the clear only).
#[test]
fn resync_with_tls_copies_the_whole_region_over_tls() {
    let dir = TempDir::new("resync-bench-tls");
    let d = dir.path().to_str().expect("utf-8 path");
    let out =
        mojim(&["bench", "--mode", "resync", "--region-size", "4MiB", "--tls", "on", "--dir", d, "--json"]);
    let rows: Vec<serde_json::Value> =
        out.lines().map(|l| serde_json::from_str(l).expect("one JSON object per line")).collect();
    let kinds: Vec<&str> = rows.iter().map(|r| r["kind"].as_str().expect("kind is a string")).collect();
    assert_eq!(kinds, ["tcp", "tcp-region", "tcp-checked", "full", "full-tls", "bitmap", "log"], "{out}");
    let tls = rows.iter().find(|r| r["kind"] == "full-tls").expect("full-tls");
    assert_eq!(tls["bytes"].as_u64(), Some(4 << 20), "{out}");
    assert_eq!(tls["verified"], "whole region", "{out}");
    assert!(tls["mb_per_s"].as_f64().is_some_and(|s| s > 0.0), "{out}");
    assert_eq!(std::fs::read_dir(dir.path()).expect("read the test folder").count(), 0);
}

/// `--tls on,off,encrypt` over shared memory and UCX: a sync run with every link over mutual
/// TLS (its placed records sealed), one with their bodies encrypted too (`[security]
/// encrypt_placed`), and one without TLS, side by side; `on,off` was refused before ("--tls on
/// covers TCP only").
#[test]
fn sync_over_shm_and_ucx_runs_with_tls_encrypted_and_without_side_by_side() {
    let dir = TempDir::new("sync-bench-tls-shm");
    let d = dir.path().to_str().expect("utf-8 path");
    let args =
        ["bench", "--mode", "sync", "--transport", "shm,ucx", "--tls", "on,off,encrypt", "--ops", "200"];
    let out = mojim(&[&args[..], &["--region-size", "4MiB", "--dir", d, "--json"]].concat());
    let rows: Vec<serde_json::Value> =
        out.lines().map(|l| serde_json::from_str(l).expect("one JSON object per line")).collect();
    for t in ["shm", "ucx"] {
        for (tls, enc) in [(true, false), (false, false), (true, true)] {
            let r = rows.iter().find(|r| {
                r["transport"] == t && r["tls"] == tls && r["encrypt_placed"] == enc && r["mode"] == "sync"
            });
            let r = r.unwrap_or_else(|| panic!("a sync row over {t} with tls {tls}, encrypt {enc}: {out}"));
            assert!(r["ops"].as_u64().is_some_and(|n| n > 0), "{out}");
        }
    }
    assert_eq!(std::fs::read_dir(dir.path()).expect("read the test folder").count(), 0);
}

#[test]
fn bad_resync_options_are_refused_before_anything_starts() {
    for (args, names) in
        [(vec!["--changed", "0"], "--changed 0"), (vec!["--region-size", "1000"], "--region-size 1000")]
    {
        let out = Command::new(common::exe())
            .args(["bench", "--mode", "resync"])
            .args(&args)
            .output()
            .expect("run mojim");
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(names), "{err}");
    }
}

#[test]
fn c_api_reports_each_call_in_each_mode() {
    let dir = TempDir::new("c-api-bench");
    let d = dir.path().to_str().expect("utf-8 path");
    let args =
        ["bench", "--c-api", "--mode", "unreplicated,sync", "--size", "64", "--ops", "90", "--warmup", "5"];
    let out = mojim(&[&args[..], &["--region-size", "1MiB", "--dir", d, "--json"]].concat());
    let rows: Vec<serde_json::Value> =
        out.lines().map(|l| serde_json::from_str(l).expect("one JSON object per line")).collect();
    assert_eq!(rows.len(), 2 * 3, "{out}");
    for mode in ["unreplicated", "sync"] {
        for api in ["rust msync", "c mojim_msync", "c mojim_msync_at"] {
            let r = rows
                .iter()
                .find(|r| r["mode"] == mode && r["api"] == api)
                .unwrap_or_else(|| panic!("no row for {api} in mode {mode} in\n{out}"));
            assert_eq!(r["ops"], 30, "each call takes every third turn: {r}");
            assert!(r["p50_us"].as_f64().expect("p50_us is a number") > 0.0, "{r}");
            if api == "rust msync" {
                assert_eq!(r["over_rust_p50_ns"], 0.0, "the Rust call is the baseline: {r}");
            }
        }
    }
    // The table form ends with the verdict.
    let table = mojim(&[&args[..], &["--region-size", "1MiB", "--dir", d]].concat());
    assert!(table.contains("the C layer adds at most"), "{table}");
    assert!(files_beginning(&format!("{d}/mojim-bench-")).is_empty(), "the benchmark left its files in {d}");
}

#[test]
fn c_api_with_a_mode_that_is_not_a_region_mode_or_repeat_is_refused() {
    let out = Command::new(common::exe())
        .args(["bench", "--c-api", "--mode", "tcp-rtt", "--region-size", "1MiB"])
        .output()
        .expect("run mojim");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--mode with --c-api") && err.contains("tcp-rtt"), "{err}");
    let out = Command::new(common::exe())
        .args(["bench", "--c-api", "--mode", "sync", "--repeat", "3", "--region-size", "1MiB"])
        .output()
        .expect("run mojim");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--repeat and --duration do not apply to --c-api"), "{err}");
}
