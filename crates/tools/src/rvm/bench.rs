//! `mojim bench --rvm`: recoverable memory measured side by side in one run.
//!
//! - `commit`: the latency of `txn_commit` by pages written since the last commit (1, 16, 256
//!   and 10 000 contiguous, 1 000 scattered one in ten), per backend: Mojim with userfaultfd,
//!   Mojim with page protection, Redis (the report's §3.1 to §3.3);
//! - `recovery`: the time of `Rvm::open` recovering 1 and 10 000 pages;
//! - `dgemv`: DGEMV's total time against the commit interval and against the failure interval
//!   (a commit every iteration), on each backend, with manual serialization to a file with
//!   fsync, and without persistence (§3.5);
//! - `kmer`: the k-mer program's total time against the commit interval (§3.6).
//!
//! A Mojim region and its mirror, and a `redis-server`, are started for the run (or
//! `--rvm-redis` names a running server) and removed at its end with every file the run made.
//! Redis is left out, with a note, when no server can be started or reached.

use super::bench_apps::{self, AppPlan};
use super::stores::{MojimStore, RedisServer};
use super::{bench_commit, bench_dump};
use crate::bench::BenchArgs;
use mojim::error::{Error, Result};
use mojim_rvm::{RvmOptions, WriteTracking};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The flags of `mojim bench --rvm`.
#[derive(clap::Args, Clone, Debug)]
pub struct RvmBenchArgs {
    /// Run recoverable memory's benchmark instead: commit latency by pages written, recovery
    /// time, DGEMV and the k-mer program against commit and failure intervals, per backend
    /// (the Nephele report's §3). Uses --dir (memory) for the region, the mirror and Redis,
    /// --disk-dir (a disk) for DGEMV's manual serialization, --json and --repeat.
    #[arg(long)]
    pub rvm: bool,
    /// What to measure, comma-separated: commit, recovery, dgemv, kmer.
    #[arg(long, value_delimiter = ',', default_value = "commit,recovery,dgemv,kmer")]
    pub rvm_parts: Vec<String>,
    /// Backends, comma-separated: mojim-uffd, mojim-mprotect (a Mojim region and its mirror,
    /// written pages found by userfaultfd or by page protection), redis (a Redis server).
    #[arg(long, value_delimiter = ',', default_value = "mojim-uffd,mojim-mprotect,redis")]
    pub rvm_backends: Vec<String>,
    /// Use this running Redis server (HOST:PORT) instead of starting redis-server; the keys
    /// the benchmark writes are deleted at its end.
    #[arg(long)]
    pub rvm_redis: Option<String>,
    /// Most commits measured per point of `commit` (fewer past 3 s per point, at least 10).
    #[arg(long, default_value_t = 200)]
    pub rvm_commits: u64,
    /// Opens measured per point of `recovery`.
    #[arg(long, default_value_t = 5)]
    pub rvm_recoveries: u64,
    /// DGEMV at the report's sizes (1048576 × 100, 100 iterations: an 800 MB matrix, about
    /// 11 s per point on this 2-core machine) instead of 131072 × 100, 100 iterations.
    #[arg(long)]
    pub rvm_report_sizes: bool,
    /// DGEMV: commit intervals (iterations) to measure without failures.
    #[arg(long, value_delimiter = ',', default_value = "1,2,5,10,25,100")]
    pub rvm_commit_every: Vec<u64>,
    /// DGEMV: failure intervals (iterations) to measure, committing every iteration.
    #[arg(long, value_delimiter = ',', default_value = "1,5,10,25,100")]
    pub rvm_fail_every: Vec<u64>,
    /// The k-mer program: commit intervals (steps, out of about 2.5 million).
    #[arg(long, value_delimiter = ',', default_value = "10000,100000,1000000,10000000")]
    pub rvm_kmer_commit_every: Vec<u64>,
}

impl Default for RvmBenchArgs {
    /// The flags' defaults, with `--rvm` off.
    fn default() -> Self {
        let strings = |v: &[&str]| v.iter().map(|s| s.to_string()).collect();
        RvmBenchArgs {
            rvm: false,
            rvm_parts: strings(&PARTS),
            rvm_backends: strings(&["mojim-uffd", "mojim-mprotect", "redis"]),
            rvm_redis: None,
            rvm_commits: 200,
            rvm_recoveries: 5,
            rvm_report_sizes: false,
            rvm_commit_every: vec![1, 2, 5, 10, 25, 100],
            rvm_fail_every: vec![1, 5, 10, 25, 100],
            rvm_kmer_commit_every: vec![10_000, 100_000, 1_000_000, 10_000_000],
        }
    }
}

/// One measured point (a JSON line of `--json`).
#[derive(Clone, Debug, Default, Serialize)]
pub struct RvmResult {
    /// `mojim`, `redis`, `file` (manual serialization with fsync) or `none` (no persistence).
    pub backend: String,
    /// How written pages were found: `uffd-async`, `mprotect`, or `-`.
    pub tracking: String,
    /// `commit`, `recover`, `dgemv` or `kmer`.
    pub op: String,
    /// `contiguous` or `scattered` pages (commit); `commit-interval` or `failure-interval`
    /// (dgemv, kmer).
    pub pattern: String,
    /// Pages written per commit (commit), recovered (recover), or of the state (dgemv, kmer).
    pub pages: u64,
    /// Pages a commit sent (those written, the meta block's and the allocator's included; for
    /// dgemv and kmer the mean over the run's commits).
    pub sent_pages: u64,
    /// Commits (commit, dgemv, kmer) or opens (recover) measured.
    pub samples: u64,
    /// The median commit's or open's time.
    pub p50_us: f64,
    /// The 99th percentile's.
    pub p99_us: f64,
    /// The mean.
    pub mean_us: f64,
    /// The longest.
    pub max_us: f64,
    /// dgemv, kmer: the interval between commits, in steps.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub commit_every: Option<u64>,
    /// dgemv: the interval between failures, in steps.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fail_every: Option<u64>,
    /// dgemv, kmer: from the first open to the answer, failures and recoveries included.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total_s: Option<f64>,
    /// dgemv, kmer: failures injected.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failures: Option<u64>,
    /// dgemv, kmer: the mean time from a failure to the state found again.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recovery_mean_ms: Option<f64>,
    /// dgemv, kmer: steps run, those run again after failures included.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub steps_run: Option<u64>,
    /// commit, recover: p50 over the Mojim-with-userfaultfd point's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vs_mojim_uffd: Option<f64>,
    /// dgemv, kmer: total time over the run without persistence.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vs_none: Option<f64>,
    /// dgemv: total time over manual serialization's at the same intervals.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vs_file: Option<f64>,
}

impl RvmResult {
    /// A result named `backend`/`tracking`/`op`/`pattern`, with the statistics of `times`.
    pub fn timed(backend: &str, tracking: &str, op: &str, pattern: &str, times: &[Duration]) -> RvmResult {
        let mut us: Vec<f64> = times.iter().map(|d| d.as_secs_f64() * 1e6).collect();
        us.sort_by(f64::total_cmp);
        let at = |q: f64| us.get(((us.len() as f64 - 1.0) * q).round() as usize).copied().unwrap_or(0.0);
        RvmResult {
            backend: backend.into(),
            tracking: tracking.into(),
            op: op.into(),
            pattern: pattern.into(),
            samples: us.len() as u64,
            p50_us: at(0.5),
            p99_us: at(0.99),
            mean_us: if us.is_empty() { 0.0 } else { us.iter().sum::<f64>() / us.len() as f64 },
            max_us: us.last().copied().unwrap_or(0.0),
            ..RvmResult::default()
        }
    }

    /// What identifies the point across rounds of `--repeat`.
    fn key(&self) -> String {
        format!(
            "{} {} {} {} {} {:?} {:?}",
            self.backend,
            self.tracking,
            self.op,
            self.pattern,
            self.pages,
            self.commit_every,
            self.fail_every
        )
    }

    /// The figure the median round is chosen by: the total time of a program, else p50.
    fn figure(&self) -> f64 {
        self.total_s.unwrap_or(self.p50_us)
    }
}

/// A backend to measure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// A Mojim region and its mirror, with this way of finding written pages.
    Mojim(WriteTracking),
    /// A Redis server (written pages found as the kernel allows: userfaultfd, else mprotect).
    Redis,
}

impl Target {
    fn parse(s: &str) -> Result<Target> {
        match s.trim() {
            "mojim-uffd" => Ok(Target::Mojim(WriteTracking::UffdAsync)),
            "mojim-mprotect" => Ok(Target::Mojim(WriteTracking::Mprotect)),
            "redis" => Ok(Target::Redis),
            other => Err(Error::Config(format!(
                "--rvm-backends: {other:?} is not a backend: use mojim-uffd, mojim-mprotect and/or redis"
            ))),
        }
    }

    /// Its name in progress lines.
    pub fn name(self) -> &'static str {
        match self {
            Target::Mojim(WriteTracking::UffdAsync) => "mojim-uffd",
            Target::Mojim(_) => "mojim-mprotect",
            Target::Redis => "redis",
        }
    }
}

/// The parts of a run.
const PARTS: [&str; 4] = ["commit", "recovery", "dgemv", "kmer"];

/// The checked flags.
struct Plan {
    parts: Vec<&'static str>,
    targets: Vec<Target>,
    apps: AppPlan,
}

fn plan(a: &BenchArgs) -> Result<Plan> {
    let r = &a.rvm;
    let mut parts = Vec::new();
    for p in &r.rvm_parts {
        match PARTS.iter().find(|&&q| q == p.trim()) {
            Some(q) if !parts.contains(q) => parts.push(*q),
            Some(_) => {}
            None => {
                return Err(Error::Config(format!(
                    "--rvm-parts: {p:?} is not a part: use commit, recovery, dgemv and/or kmer"
                )))
            }
        }
    }
    let mut targets = Vec::new();
    for b in &r.rvm_backends {
        let t = Target::parse(b)?;
        if !targets.contains(&t) {
            targets.push(t);
        }
    }
    if targets.is_empty() || parts.is_empty() {
        return Err(Error::Config("--rvm-backends and --rvm-parts each need at least one name".into()));
    }
    for (flag, list) in [
        ("--rvm-commit-every", &r.rvm_commit_every),
        ("--rvm-fail-every", &r.rvm_fail_every),
        ("--rvm-kmer-commit-every", &r.rvm_kmer_commit_every),
    ] {
        if list.contains(&0) {
            return Err(Error::Config(format!("{flag}: 0 is not an interval: give intervals of at least 1")));
        }
    }
    if r.rvm_commits == 0 || r.rvm_recoveries == 0 {
        return Err(Error::Config(format!(
            "--rvm-commits {} / --rvm-recoveries {}: measure at least 1",
            r.rvm_commits, r.rvm_recoveries
        )));
    }
    if a.repeat == 0 {
        return Err(Error::Config("--repeat 0: run at least one round".into()));
    }
    Ok(Plan { parts, targets, apps: AppPlan::new(r) })
}

/// Progress lines on stderr: what is measured now, and how far the run is.
pub struct Progress {
    started: Instant,
    done: usize,
    total: usize,
}

impl Progress {
    /// Reports the start of a point.
    pub fn point(&mut self, what: &str) {
        self.done += 1;
        eprintln!(
            "rvm bench [{}/{}, {:.0} s]: {what}",
            self.done,
            self.total,
            self.started.elapsed().as_secs_f64()
        );
    }
}

/// The run's stores, removed when dropped.
pub struct Stores {
    /// The mojim executable, which serves the mirror.
    exe: PathBuf,
    /// `--busy-poll-us`, for both ends of the Mojim store's lanes.
    busy_poll_us: u64,
    /// Where the Mojim region and its mirror go (--dir).
    dir: PathBuf,
    /// Whether a Mojim target is measured.
    wants_mojim: bool,
    /// The Mojim region and mirror of the part at hand.
    mojim: Option<MojimStore>,
    /// Regions made so far (each gets a folder of its own).
    mojim_uses: usize,
    /// The Redis server, if one could be started or reached.
    redis: Option<RedisServer>,
    /// Uses of Redis so far (each gets keys of its own).
    redis_uses: usize,
    /// Bytes of recoverable memory for the part at hand.
    capacity: u64,
    /// The run's folder on --disk-dir, for manual serialization.
    pub disk: PathBuf,
}

impl Stores {
    /// Starts the part of a run that needs `bytes` of recoverable memory: a new Mojim region
    /// and mirror (the last part's removed), so that no part finds the blocks another freed
    /// (the allocator does not join free blocks).
    pub fn begin_part(&mut self, bytes: u64) -> Result<()> {
        self.capacity = bytes.next_multiple_of(1 << 20) + (4 << 20);
        self.mojim.take();
        if self.wants_mojim {
            self.mojim_uses += 1;
            let dir = run_dir(&self.dir, &format!("mojim-{}", self.mojim_uses));
            self.mojim = Some(MojimStore::start(&self.exe, &dir, self.capacity, self.busy_poll_us)?);
        }
        Ok(())
    }

    /// Options to open `t`'s memory (Redis: afresh, under keys no other use has).
    pub fn options(&mut self, t: Target) -> Result<RvmOptions> {
        match t {
            Target::Mojim(tracking) => self.mojim.as_ref().expect("begin_part starts it").options(tracking),
            Target::Redis => {
                self.redis_uses += 1;
                let prefix = format!("mojim-bench-rvm-{}-{}", std::process::id(), self.redis_uses);
                self.redis.as_mut().expect("started for the redis target").options(&prefix, self.capacity)
            }
        }
    }
}

impl Drop for Stores {
    fn drop(&mut self) {
        self.mojim.take();
        self.redis.take();
        let _ = std::fs::remove_dir_all(&self.disk);
    }
}

/// A folder of the run's, named after the process.
fn run_dir(parent: &Path, what: &str) -> PathBuf {
    parent.join(format!("mojim-bench-rvm-{}-{what}", std::process::id()))
}

/// Runs `mojim bench --rvm` and prints its results.
pub fn run(a: &BenchArgs) -> Result<()> {
    let results = measure(a)?;
    print(&results, a.json);
    Ok(())
}

/// Runs the benchmark and returns its results (the median round of each point).
pub fn measure(a: &BenchArgs) -> Result<Vec<RvmResult>> {
    let mut plan = plan(a)?;
    let disk = run_dir(&a.disk_dir, "disk");
    std::fs::create_dir_all(&disk).map_err(Error::io(format!("create {}", disk.display())))?;
    let mut stores = Stores {
        exe: crate::bench::harness::exe()?,
        busy_poll_us: a.busy_poll_us,
        dir: a.dir.clone(),
        wants_mojim: plan.targets.iter().any(|t| matches!(t, Target::Mojim(_))),
        mojim: None,
        mojim_uses: 0,
        redis: None,
        redis_uses: 0,
        capacity: 0,
        disk,
    };
    if plan.targets.contains(&Target::Redis) {
        // A server named by --rvm-redis must answer; one that cannot be started is left out.
        let server = match &a.rvm.rvm_redis {
            Some(addr) => Some(RedisServer::existing(addr).map_err(|e| Error::Config(e.0))?),
            None => match RedisServer::start(&run_dir(&a.dir, "redis")) {
                Ok(s) => Some(s),
                Err(e) => {
                    eprintln!("rvm bench: the Redis backend is left out: {}", e.0);
                    None
                }
            },
        };
        match server {
            Some(s) => {
                eprintln!("rvm bench: Redis at {}", s.addr());
                stores.redis = Some(s);
            }
            None => plan.targets.retain(|t| *t != Target::Redis),
        }
    }
    if plan.targets.is_empty() {
        return Err(Error::Config("no backend to measure: see the note above".into()));
    }
    let per_round = plan.parts.iter().map(|p| points(p, &plan)).sum::<usize>();
    let mut progress = Progress { started: Instant::now(), done: 0, total: per_round * a.repeat };
    let mut rounds: Vec<Vec<RvmResult>> = Vec::new();
    for _ in 0..a.repeat {
        let mut round = Vec::new();
        for part in &plan.parts {
            stores.begin_part(match *part {
                "commit" | "recovery" => bench_commit::bytes(part),
                "dgemv" => plan.apps.dgemv_bytes(),
                _ => plan.apps.kmer_bytes(),
            })?;
            match *part {
                "commit" => {
                    round.extend(bench_commit::commits(&mut stores, &plan.targets, &a.rvm, &mut progress)?);
                    round.extend(bench_dump::commits(&stores, a.rvm.rvm_commits as usize, &mut progress)?);
                }
                "recovery" => {
                    round.extend(bench_commit::recoveries(
                        &mut stores,
                        &plan.targets,
                        &a.rvm,
                        &mut progress,
                    )?);
                    round.extend(bench_dump::recoveries(
                        &stores,
                        a.rvm.rvm_recoveries as usize,
                        &mut progress,
                    )?);
                }
                "dgemv" => {
                    round.extend(bench_apps::dgemv(&mut stores, &plan.targets, &plan.apps, &mut progress)?)
                }
                _ => round.extend(bench_apps::kmer(&mut stores, &plan.targets, &plan.apps, &mut progress)?),
            }
        }
        rounds.push(round);
    }
    let mut results = median_rounds(rounds);
    ratios(&mut results);
    Ok(results)
}

/// Points per round of `part`, for progress lines.
fn points(part: &str, plan: &Plan) -> usize {
    let t = plan.targets.len();
    match part {
        "commit" => t + 1,
        "recovery" => t + 1,
        "dgemv" => plan.apps.dgemv_points(t),
        _ => plan.apps.kmer_points(t),
    }
}

/// Each point of the round whose figure is the median of its rounds', in the first round's
/// order.
fn median_rounds(rounds: Vec<Vec<RvmResult>>) -> Vec<RvmResult> {
    let Some(first) = rounds.first() else { return Vec::new() };
    let keys: Vec<String> = first.iter().map(RvmResult::key).collect();
    let mut out = Vec::new();
    for k in keys {
        let mut all: Vec<&RvmResult> =
            rounds.iter().filter_map(|r| r.iter().find(|x| x.key() == k)).collect();
        all.sort_by(|a, b| a.figure().total_cmp(&b.figure()));
        out.push(all[all.len() / 2].clone());
    }
    out
}

/// Fills in the ratios between points of one run.
fn ratios(results: &mut [RvmResult]) {
    let snapshot = results.to_vec();
    for r in results.iter_mut() {
        let same = |x: &&RvmResult| {
            x.op == r.op
                && x.pattern == r.pattern
                && x.commit_every == r.commit_every
                && x.fail_every == r.fail_every
        };
        match r.op.as_str() {
            "commit" | "recover" => {
                let base = snapshot
                    .iter()
                    .filter(same)
                    .find(|x| x.backend == "mojim" && x.tracking == "uffd-async" && x.pages == r.pages);
                r.vs_mojim_uffd = base.filter(|b| b.p50_us > 0.0).map(|b| r.p50_us / b.p50_us);
            }
            _ => {
                let total = r.total_s.unwrap_or(0.0);
                let none = snapshot.iter().find(|x| x.op == r.op && x.backend == "none");
                r.vs_none = none.and_then(|n| n.total_s).filter(|&t| t > 0.0).map(|t| total / t);
                let file = snapshot.iter().filter(same).find(|x| x.backend == "file");
                r.vs_file = file.and_then(|f| f.total_s).filter(|&t| t > 0.0).map(|t| total / t);
            }
        }
    }
}

/// Prints the results: JSON lines, or tables with the ratios.
pub fn print(results: &[RvmResult], json: bool) {
    if json {
        for r in results {
            println!("{}", serde_json::to_string(r).unwrap_or_default());
        }
        return;
    }
    let ratio = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.2}"));
    let micro: Vec<&RvmResult> = results.iter().filter(|r| r.op == "commit" || r.op == "recover").collect();
    if !micro.is_empty() {
        println!(
            "{:<8} {:<7} {:<11} {:<10} {:>6} {:>6} {:>7} {:>10} {:>10} {:>10} {:>8}",
            "op",
            "backend",
            "tracking",
            "pattern",
            "pages",
            "sent",
            "samples",
            "p50_us",
            "p99_us",
            "mean_us",
            "/uffd"
        );
        for r in micro {
            println!(
                "{:<8} {:<7} {:<11} {:<10} {:>6} {:>6} {:>7} {:>10.1} {:>10.1} {:>10.1} {:>8}",
                r.op,
                r.backend,
                r.tracking,
                r.pattern,
                r.pages,
                r.sent_pages,
                r.samples,
                r.p50_us,
                r.p99_us,
                r.mean_us,
                ratio(r.vs_mojim_uffd)
            );
        }
    }
    let apps: Vec<&RvmResult> = results.iter().filter(|r| r.op == "dgemv" || r.op == "kmer").collect();
    if !apps.is_empty() {
        println!();
        println!(
            "{:<6} {:<7} {:<11} {:>8} {:>8} {:>9} {:>8} {:>8} {:>12} {:>11} {:>7} {:>7}",
            "op",
            "backend",
            "tracking",
            "commit/",
            "fail/",
            "total_s",
            "failures",
            "sent",
            "commit_p50ms",
            "recover_ms",
            "/none",
            "/file"
        );
        for r in apps {
            let opt = |v: Option<u64>| v.map_or("-".to_string(), |v| v.to_string());
            println!(
                "{:<6} {:<7} {:<11} {:>8} {:>8} {:>9.3} {:>8} {:>8} {:>12.2} {:>11} {:>7} {:>7}",
                r.op,
                r.backend,
                r.tracking,
                opt(r.commit_every),
                opt(r.fail_every),
                r.total_s.unwrap_or(0.0),
                opt(r.failures),
                r.sent_pages,
                r.p50_us / 1e3,
                r.recovery_mean_ms.map_or("-".to_string(), |m| format!("{m:.1}")),
                ratio(r.vs_none),
                ratio(r.vs_file)
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        rvm: RvmBenchArgs,
    }

    #[test]
    fn the_default_is_what_the_flags_default_to() {
        let parsed = Cli::parse_from(["bench"]).rvm;
        assert_eq!(format!("{parsed:?}"), format!("{:?}", RvmBenchArgs::default()));
    }

    #[test]
    fn ratios_compare_within_a_run() {
        let commit = |tracking: &str, p50_us| RvmResult {
            backend: "mojim".into(),
            tracking: tracking.into(),
            op: "commit".into(),
            pattern: "contiguous".into(),
            pages: 16,
            p50_us,
            ..RvmResult::default()
        };
        let app = |backend: &str, commit_every, total| RvmResult {
            backend: backend.into(),
            op: "dgemv".into(),
            pattern: "commit-interval".into(),
            commit_every,
            total_s: Some(total),
            ..RvmResult::default()
        };
        let mut rs = vec![
            commit("uffd-async", 100.0),
            commit("mprotect", 150.0),
            app("none", None, 2.0),
            app("mojim", Some(5), 3.0),
            app("file", Some(5), 6.0),
            app("file", Some(1), 12.0),
        ];
        ratios(&mut rs);
        assert_eq!(rs[1].vs_mojim_uffd, Some(1.5));
        assert_eq!(
            (rs[3].vs_none, rs[3].vs_file),
            (Some(1.5), Some(0.5)),
            "the file run of the same interval"
        );
        assert_eq!(rs[2].vs_file, None);
    }

    #[test]
    fn the_median_round_is_kept() {
        let r = |p50_us| vec![RvmResult { op: "commit".into(), p50_us, ..RvmResult::default() }];
        let kept = median_rounds(vec![r(5.0), r(1.0), r(3.0)]);
        assert_eq!(kept.len(), 1);
        assert_eq!(kept[0].p50_us, 3.0);
    }
}
