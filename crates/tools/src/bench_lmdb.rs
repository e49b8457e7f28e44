//! `mojim bench --lmdb`: an unmodified LMDB program (transactions of one 4 KiB put each),
//! side by side in one run on three targets:
//!
//! | target | where the database lives | what makes a commit durable |
//! |---|---|---|
//! | `mojim-sync` | the replicated region, through the `msync` interposer | the mirror's log (mode `sync`) |
//! | `ext4-fdatasync` | a file on a local disk (`--disk-dir`) | LMDB's own `fdatasync` and `O_DSYNC` write |
//! | `tmpfs-none` | a file in memory (`--dir`), `MDB_NOSYNC` | nothing: the interposer's overhead shows against it |
//!
//! The program (`lmdb_commits.c`) is compiled with the system `cc` against `liblmdb` when the
//! benchmark starts, and run once per target and round; it times every transaction itself.

use crate::bench::BenchArgs;
use crate::cluster::{LocalCluster, Shape, Topology};
use mojim::config::{random_uuid, template, ConfigFile};
use mojim::error::{Error, Result};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The benchmark program's source.
const PROGRAM: &str = include_str!("lmdb_commits.c");
/// LMDB's map, and the replicated file's room in the region.
const MAP_SIZE: u64 = 64 << 20;
/// The benchmark region: the interposer's file table and one file's slot of at least the map.
const REGION_SIZE: u64 = 2 * MAP_SIZE;

/// Options of `mojim bench --lmdb`.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct LmdbArgs {
    /// Run the LMDB benchmark instead of --mode: one unmodified program committing transactions
    /// of one 4 KiB put each, on mojim-sync (under the interposer), ext4-fdatasync (a file in
    /// --disk-dir) and tmpfs-none (a file in --dir, no durability), side by side; --repeat
    /// rounds, interleaved, each target reported by its median round.
    #[arg(long, conflicts_with_all = ["matrix", "transact"])]
    pub lmdb: bool,
    /// Timed transactions per target and round (a tenth more, at least 10, run first untimed).
    #[arg(long, default_value_t = 2000)]
    pub lmdb_txns: u64,
    /// The interposer, libmojim_preload.so (default: beside the mojim executable, where
    /// `cargo build --release` puts it).
    #[arg(long)]
    pub preload: Option<PathBuf>,
}

/// One target's measurement.
#[derive(Clone, Debug, Serialize)]
pub struct LmdbResult {
    pub target: &'static str,
    pub txns: u64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub mean_us: f64,
    pub ops_per_s: f64,
}

const TARGETS: [&str; 3] = ["mojim-sync", "ext4-fdatasync", "tmpfs-none"];

/// `mojim bench --lmdb`: measures every target `--repeat` times and prints the median rounds.
pub fn run(a: &BenchArgs) -> Result<()> {
    let l = &a.lmdb;
    if l.lmdb_txns == 0 {
        return Err(Error::Config("--lmdb-txns must be at least 1".into()));
    }
    let preload = preload_path(l)?;
    let work = Workdir::new(&a.dir)?;
    let program = compile(&work.0)?;
    let disk = Workdir::new(&a.disk_dir)?;
    let mirror = Replicated::start(a, &work.0, &preload)?;
    let mut rounds: Vec<Vec<LmdbResult>> = vec![Vec::new(); TARGETS.len()];
    for round in 0..a.repeat.max(1) {
        for (i, &target) in TARGETS.iter().enumerate() {
            if !a.json {
                eprintln!("lmdb: {target}, round {}, {} transactions...", round + 1, l.lmdb_txns);
            }
            let db = match target {
                "ext4-fdatasync" => disk.0.join(format!("db-{round}")),
                _ => work.0.join(format!("db-{target}-{round}")),
            };
            std::fs::create_dir_all(&db).map_err(Error::io(format!("create {}", db.display())))?;
            let mut cmd = Command::new(&program);
            let sync = if target == "tmpfs-none" { "nosync" } else { "sync" };
            let warmup = (l.lmdb_txns / 10).max(10);
            cmd.arg(&db).args([warmup.to_string(), l.lmdb_txns.to_string(), MAP_SIZE.to_string()]);
            cmd.arg(sync);
            if target == "mojim-sync" {
                mirror.fresh(&db)?;
                mirror.configure(&mut cmd, &db);
            }
            let out = cmd.output().map_err(Error::io(format!("run {}", program.display())))?;
            let _ = std::fs::remove_dir_all(&db);
            if !out.status.success() {
                return Err(Error::Io {
                    op: format!("run the LMDB program on {target}"),
                    source: std::io::Error::other(format!(
                        "{} exited with {}: {}",
                        program.display(),
                        out.status,
                        String::from_utf8_lossy(&out.stderr).trim()
                    )),
                });
            }
            rounds[i].push(summarise(target, &out.stdout)?);
        }
    }
    let results: Vec<LmdbResult> = rounds
        .into_iter()
        .map(|mut r| {
            r.sort_by(|x, y| x.p50_us.total_cmp(&y.p50_us));
            r.swap_remove(r.len() / 2)
        })
        .collect();
    print(&results, a.json);
    Ok(())
}

/// The interposer to run the `mojim-sync` target under.
fn preload_path(l: &LmdbArgs) -> Result<PathBuf> {
    let p = match &l.preload {
        Some(p) => p.clone(),
        None => crate::bench::exe()?.with_file_name("libmojim_preload.so"),
    };
    if !p.is_file() {
        return Err(Error::Config(format!(
            "the interposer {} is not there: build it with `cargo build --release -p mojim-preload` \
             (it lands beside the mojim executable), or name it with --preload",
            p.display()
        )));
    }
    Ok(p)
}

/// Compiles the benchmark program into `dir`.
fn compile(dir: &Path) -> Result<PathBuf> {
    let src = dir.join("lmdb_commits.c");
    let exe = dir.join("lmdb_commits");
    std::fs::write(&src, PROGRAM).map_err(Error::io(format!("write {}", src.display())))?;
    let out =
        Command::new("cc").args(["-O2", "-o"]).arg(&exe).arg(&src).arg("-llmdb").output().map_err(|e| {
            Error::Config(format!("run cc to build the LMDB program ({e}): install a C compiler"))
        })?;
    if !out.status.success() {
        return Err(Error::Config(format!(
            "cc could not build the LMDB program (install liblmdb-dev, which has lmdb.h and liblmdb): {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(exe)
}

/// Latencies in nanoseconds, one per line, into one target's summary.
fn summarise(target: &'static str, stdout: &[u8]) -> Result<LmdbResult> {
    let text = String::from_utf8_lossy(stdout);
    let mut ns: Vec<u64> = Vec::new();
    for line in text.lines() {
        ns.push(line.trim().parse().map_err(|_| {
            Error::io("read the LMDB program's output")(std::io::Error::other(format!(
                "{line:?} is not a latency in nanoseconds"
            )))
        })?);
    }
    if ns.is_empty() {
        return Err(Error::io("read the LMDB program's output")(std::io::Error::other("no latencies")));
    }
    let total: u64 = ns.iter().sum();
    ns.sort_unstable();
    let at = |q: f64| ns[((ns.len() - 1) as f64 * q).round() as usize] as f64 / 1e3;
    Ok(LmdbResult {
        target,
        txns: ns.len() as u64,
        p50_us: at(0.5),
        p99_us: at(0.99),
        mean_us: total as f64 / ns.len() as f64 / 1e3,
        ops_per_s: ns.len() as f64 / (total as f64 / 1e9),
    })
}

fn print(results: &[LmdbResult], json: bool) {
    if json {
        for r in results {
            println!("{}", serde_json::to_string(r).unwrap_or_default());
        }
        return;
    }
    println!(
        "{:<16} {:>7} {:>10} {:>10} {:>10} {:>10}",
        "target", "txns", "p50_us", "p99_us", "mean_us", "ops/s"
    );
    for r in results {
        println!(
            "{:<16} {:>7} {:>10.1} {:>10.1} {:>10.1} {:>10.0}",
            r.target, r.txns, r.p50_us, r.p99_us, r.mean_us, r.ops_per_s
        );
    }
    let p50 = |t: &str| results.iter().find(|r| r.target == t).map(|r| r.p50_us);
    if let (Some(m), Some(e)) = (p50("mojim-sync"), p50("ext4-fdatasync")) {
        println!("mojim-sync / ext4-fdatasync p50 = {:.2} (target ≤ 0.25)", m / e.max(1e-9));
    }
    if let (Some(m), Some(t)) = (p50("mojim-sync"), p50("tmpfs-none")) {
        println!("mojim-sync - tmpfs-none p50 = {:.1} µs (replication and the interposer)", m - t);
    }
}

/// A folder of the benchmark's own, removed when dropped.
struct Workdir(PathBuf);

impl Workdir {
    fn new(parent: &Path) -> Result<Workdir> {
        let d = parent.join(format!("mojim-bench-lmdb-{}", std::process::id()));
        std::fs::create_dir_all(&d).map_err(Error::io(format!("create {}", d.display())))?;
        Ok(Workdir(d))
    }
}

impl Drop for Workdir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The `mojim-sync` target: a local mirror, and the configuration the program's interposer
/// opens the region with.
struct Replicated {
    _cluster: LocalCluster,
    config: PathBuf,
    region: PathBuf,
    preload: PathBuf,
}

impl Replicated {
    fn start(a: &BenchArgs, dir: &Path, preload: &Path) -> Result<Replicated> {
        let uuid = random_uuid();
        let secret = format!("{:032x}", u128::from_le_bytes(random_uuid()));
        let text = template(&uuid, REGION_SIZE, &secret, "127.0.0.1:0");
        let shape = Shape {
            topology: Topology::TwoTier,
            backups: 0,
            rate_limit: None,
            secondary_tier_thresh: None,
            checkpoint_thresh: a.checkpoint_thresh,
            busy_poll_us: a.busy_poll_us,
        };
        let cluster = LocalCluster::start(&crate::bench::exe()?, &text, dir, "lmdb", &shape)?;
        let mut f: ConfigFile =
            toml::from_str(&text).map_err(|e| Error::Config(format!("benchmark config: {e}")))?;
        f.primary.mirror = cluster.mirror.addr().to_string();
        f.primary.mode = "sync".into();
        f.primary.lanes = 1;
        f.primary.busy_poll_us = a.busy_poll_us;
        let region = dir.join("lmdb-region.mojim");
        f.region.path = region.to_string_lossy().into_owned();
        let config = dir.join("lmdb-primary.toml");
        let text = toml::to_string(&f).map_err(|e| Error::Config(format!("benchmark config: {e}")))?;
        mojim::config::write_private(&config, &text).map_err(Error::io("write config"))?;
        Ok(Replicated { _cluster: cluster, config, region, preload: preload.to_path_buf() })
    }

    /// A fresh region for a round: the region file made again (the mirror's copy simply takes
    /// the new groups; the interposer lays out its file table anew).
    fn fresh(&self, _db: &Path) -> Result<()> {
        let cfg = mojim::Config::load(&self.config)?;
        mojim::remove_region(&self.region)?;
        mojim::create_region(&self.region, cfg.region_id()?)
    }

    fn configure(&self, cmd: &mut Command, db: &Path) {
        cmd.env("MOJIM_CONFIG", &self.config)
            .env("MOJIM_FILES", db.join("data.mdb"))
            .env("LD_PRELOAD", &self.preload);
    }
}

impl Drop for Replicated {
    fn drop(&mut self) {
        let _ = mojim::remove_region(&self.region);
    }
}
