//! `mojim bench --lmdb`: one unmodified LMDB program (assets/lmdb_loader.py, Python's `lmdb`
//! module) committing transactions of one 4 KiB put each, side by side in one run against:
//!
//! - `mojim-sync`: under libmojim_preload.so, the database in a region replicated in mode `sync`
//!   to a mirror on loopback (LMDB's fdatasync and O_DSYNC meta write are the sync points);
//! - `ext4-fdatasync`: a plain database in `--disk-dir` (/var/tmp), LMDB's own fdatasync;
//! - `tmpfs-none`: a plain database in `--dir` (/dev/shm) with LMDB's syncs off.
//!
//! The latency of each commit (begin, put, commit) is measured inside the program.

use crate::bench::BenchArgs;
use crate::child::ChildNode;
use hdrhistogram::Histogram;
use mojim::config::{random_uuid, template, write_private, RegionId};
use mojim::error::{Error, Result};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::Command;

const LOADER: &str = include_str!("../assets/lmdb_loader.py");
const TARGETS: [&str; 3] = ["mojim-sync", "ext4-fdatasync", "tmpfs-none"];

/// One target's result (the JSON line of `--json`).
#[derive(Clone, Debug, Serialize)]
pub struct LmdbResult {
    pub target: String,
    pub txns: u64,
    pub value_size: u64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub mean_us: f64,
    pub ops_per_s: f64,
}

/// A python3 that can `import lmdb`.
fn python() -> Result<PathBuf> {
    for py in ["/usr/bin/python3", "python3"] {
        if Command::new(py).args(["-c", "import lmdb"]).output().is_ok_and(|o| o.status.success()) {
            return Ok(PathBuf::from(py));
        }
    }
    Err(Error::Config(
        "bench --lmdb needs python3 with the lmdb module: apt-get install python3-lmdb (or pip install lmdb)"
            .into(),
    ))
}

/// The interposer: `--preload`, else beside the mojim executable (cargo builds both into the
/// same target folder).
fn preload_lib(a: &BenchArgs) -> Result<PathBuf> {
    if let Some(p) = &a.preload {
        return Ok(p.clone());
    }
    let exe = crate::bench::harness::exe()?;
    let dir = exe.parent().unwrap_or(Path::new("."));
    for p in [dir.join("libmojim_preload.so"), dir.join("deps").join("libmojim_preload.so")] {
        if p.is_file() {
            return Ok(p);
        }
    }
    Err(Error::Config(format!(
        "libmojim_preload.so is not beside {}: build it (cargo build --release -p mojim-preload) or pass --preload PATH",
        exe.display()
    )))
}

/// Removes a folder when dropped.
struct Cleanup(Vec<PathBuf>);

impl Drop for Cleanup {
    fn drop(&mut self) {
        for d in &self.0 {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

/// Runs the LMDB benchmark and prints its results.
pub fn run(a: &BenchArgs) -> Result<()> {
    let results = measure(a)?;
    if a.json {
        for r in &results {
            println!("{}", serde_json::to_string(r).unwrap_or_default());
        }
        return Ok(());
    }
    println!(
        "{:<16} {:>7} {:>9} {:>9} {:>9} {:>9}",
        "target", "txns", "mean_us", "p50_us", "p99_us", "ops/s"
    );
    for r in &results {
        println!(
            "{:<16} {:>7} {:>9.1} {:>9.1} {:>9.1} {:>9.0}",
            r.target, r.txns, r.mean_us, r.p50_us, r.p99_us, r.ops_per_s
        );
    }
    let find = |t: &str| results.iter().find(|r| r.target == t);
    if let (Some(m), Some(e)) = (find("mojim-sync"), find("ext4-fdatasync")) {
        println!("mojim-sync p50 / ext4-fdatasync p50 = {:.3}", m.p50_us / e.p50_us);
    }
    Ok(())
}

/// Runs every target `--repeat` times, interleaved, and returns for each the round with the
/// median p50.
pub fn measure(a: &BenchArgs) -> Result<Vec<LmdbResult>> {
    let py = python()?;
    let lib = preload_lib(a)?;
    let name = format!("mojim-bench-lmdb-{}", std::process::id());
    let dir = a.dir.join(&name);
    let disk = a.disk_dir.join(&name);
    let _cleanup = Cleanup(vec![dir.clone(), disk.clone()]);
    for d in [&dir, &disk] {
        std::fs::create_dir_all(d).map_err(Error::io(format!("create {}", d.display())))?;
    }
    let loader = dir.join("lmdb_loader.py");
    std::fs::write(&loader, LOADER).map_err(Error::io("write the loader"))?;

    // The region and its mirror on loopback.
    let id = RegionId { uuid: random_uuid(), size: a.region_size };
    let region = dir.join("region.mojim");
    mojim::create_region(&region, id)?;
    let cfg_path = dir.join("mojim.toml");
    let base = template(&id.uuid, id.size, "mojim-bench-secret", "127.0.0.1:0");
    write_private(&cfg_path, &base).map_err(Error::io("write the configuration"))?;
    let cfg_s = cfg_path.to_str().unwrap_or_default().to_string();
    let poll = a.busy_poll_us.to_string();
    let mirror = ChildNode::spawn(
        &crate::bench::harness::exe()?,
        &["serve", "--config", &cfg_s, "--listen", "127.0.0.1:0", "--busy-poll-us", &poll],
    )?;
    let mut cfg = mojim::Config::load(&cfg_path)?;
    cfg.file.primary.mirror = mirror.addr().to_string();
    cfg.file.primary.busy_poll_us = a.busy_poll_us;
    cfg.file.primary.lanes = 1;
    let text =
        toml::to_string(&cfg.file).map_err(|e| Error::Config(format!("serialise the configuration: {e}")))?;
    write_private(&cfg_path, &text).map_err(Error::io("write the configuration"))?;

    let map_size = (a.lmdb_txns * a.size * 4).max(16 << 20);
    let mut rounds: Vec<Vec<LmdbResult>> = vec![Vec::new(); TARGETS.len()];
    for round in 0..a.repeat.max(1) {
        for (t, target) in TARGETS.iter().enumerate() {
            // The plain targets get a fresh database each round; the mojim target keeps its one
            // listed file (the region's file table names it) and goes on with fresh keys.
            let db = match *target {
                "mojim-sync" => dir.join("db-mojim"),
                "ext4-fdatasync" => disk.join(format!("db-{round}")),
                _ => dir.join(format!("db-tmpfs-{round}")),
            };
            let start = round as u64 * a.lmdb_txns;
            let mut cmd = Command::new(&py);
            cmd.arg(&loader).arg("--bench").arg(&db);
            cmd.args(["--count", &a.lmdb_txns.to_string(), "--start", &start.to_string()]);
            cmd.args([
                "--value-size",
                &a.size.to_string(),
                "--map-size",
                &(map_size * a.repeat.max(1) as u64).to_string(),
            ]);
            match *target {
                "mojim-sync" => {
                    std::fs::create_dir_all(&db).map_err(Error::io("create the database folder"))?;
                    let file = db.join("data.mdb");
                    cmd.env("LD_PRELOAD", &lib).env("MOJIM_CONFIG", &cfg_path).env("MOJIM_FILES", &file);
                }
                "tmpfs-none" => {
                    cmd.arg("--no-sync");
                }
                _ => {}
            }
            let out = cmd.output().map_err(Error::io(format!("run {}", py.display())))?;
            if !out.status.success() {
                return Err(Error::Io {
                    op: format!("the LMDB program for {target}"),
                    source: std::io::Error::other(format!(
                        "{}: {}",
                        out.status,
                        String::from_utf8_lossy(&out.stderr).trim()
                    )),
                });
            }
            rounds[t].push(summarise(target, a, &out.stdout)?);
        }
    }
    drop(mirror);
    Ok(rounds
        .into_iter()
        .map(|mut rs| {
            rs.sort_by(|x, y| x.p50_us.total_cmp(&y.p50_us));
            rs.swap_remove(rs.len() / 2)
        })
        .collect())
}

#[derive(serde::Deserialize)]
struct Report {
    total_ns: u64,
    lat_ns: Vec<u64>,
}

fn summarise(target: &str, a: &BenchArgs, stdout: &[u8]) -> Result<LmdbResult> {
    let r: Report = serde_json::from_slice(stdout)
        .map_err(|e| Error::Config(format!("the LMDB program's report for {target} is not JSON: {e}")))?;
    let mut h = Histogram::<u64>::new(3).map_err(|e| Error::Config(format!("histogram: {e}")))?;
    for &ns in &r.lat_ns {
        h.record(ns.max(1)).map_err(|e| Error::Config(format!("histogram: {e}")))?;
    }
    let n = r.lat_ns.len() as u64;
    Ok(LmdbResult {
        target: target.to_string(),
        txns: n,
        value_size: a.size,
        p50_us: h.value_at_quantile(0.5) as f64 / 1000.0,
        p99_us: h.value_at_quantile(0.99) as f64 / 1000.0,
        mean_us: h.mean() / 1000.0,
        ops_per_s: n as f64 / (r.total_ns.max(1) as f64 / 1e9),
    })
}
