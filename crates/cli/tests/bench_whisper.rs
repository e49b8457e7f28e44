//! `mojim bench --whisper`, run as a user would, with tiny settings: every structure under
//! every strategy, one JSON object each, and nothing left behind in the folder it was given.
//! The numbers are not checked (a debug build on a shared machine), the shape of the output is.

mod common;

use common::TempDir;
use std::process::Command;

#[test]
fn whisper_reports_every_structure_under_every_strategy_and_leaves_nothing() {
    let dir = TempDir::new("whisper");
    let d = dir.path().to_str().expect("utf-8 path");
    let args = [
        "bench",
        "--whisper",
        "--whisper-ops",
        "40",
        "--whisper-keys",
        "20",
        "--region-size",
        "4MiB",
        "--dir",
        d,
        "--json",
    ];
    let out = Command::new(common::exe()).args(args).output().expect("run mojim");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "mojim {} failed ({}):\n{stderr}", args.join(" "), out.status);
    assert!(stderr.contains("whisper: echo under sm-ob"), "progress goes to stderr: {stderr}");
    let stdout = String::from_utf8(out.stdout).expect("utf-8 output");
    let rows: Vec<serde_json::Value> =
        stdout.lines().map(|l| serde_json::from_str(l).expect("one JSON object per line")).collect();
    assert_eq!(rows.len(), 3 * 3, "{stdout}");
    for s in ["hashmap", "ctree", "echo"] {
        for st in ["no-sm", "sm-rc", "sm-ob"] {
            let r = rows.iter().find(|r| r["structure"] == s && r["strategy"] == st);
            let r = r.unwrap_or_else(|| panic!("no {s} under {st}: {stdout}"));
            assert_eq!(r["ops"], 40, "{r}");
            assert!(r["ops_per_s"].as_f64().unwrap() > 0.0, "{r}");
            assert!(r["fences_per_op"].as_f64().unwrap() >= 1.0, "puts fence: {r}");
            assert!(r["mean_us"].as_f64().unwrap() > 0.0, "{r}");
        }
    }
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert!(left.is_empty(), "the benchmark removes what it created: {left:?}");

    let bad = Command::new(common::exe())
        .args(["bench", "--whisper", "--whisper-batch", "0", "--dir", d])
        .output()
        .expect("run mojim");
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--whisper-batch 0"), "{bad:?}");
}
