//! `mojim bench --matrix OUT_DIR`: the shapes of the Mojim paper's evaluation (§6.2, §6.3) and
//! the Transact microbenchmark, measured on this machine in one run and written as one CSV file
//! per experiment, PNG plots and a `summary.md` with the tables and the key ratios.
//!
//! | experiment | paper | varies | modes |
//! |---|---|---|---|
//! | `schemes` | Table 1, Figs. 4–5 | scheme, at 4 KiB | [`SCHEMES`] |
//! | `sizes` | Fig. 8 | bytes per sync point, 8 B … 12 KiB | unreplicated, async, sync |
//! | `threads` | Fig. 9 | threads 1 … N, with 1, 2 and 4 lanes | sync (and unreplicated, async) |
//! | `checkpoint` | §6.3.3 | the mirror's checkpoint_thresh, 1 … 10000 | sync |
//! | `secondary` | §6.3.3 | the mirror's secondary_tier_thresh, 40 KiB … 400 MiB | sync-backup-slow |
//! | `nvmm` | §6.1–6.2 (PMEP) | emulated NVMM barrier delay, 0 … 200 µs, at 64 B and 4 KiB | unreplicated, sync, sync with a memory-speed mirror |
//! | `transact` | Kokolis et al. §7.1 | epochs × writes per epoch | no-sm, sm-rc, sm-ob |
//!
//! One mirror (and a disk mirror and an echo server, for the schemes that need them) is started
//! for the whole run; the checkpoint, secondary and nvmm experiments start their own per point.

pub mod nvmm;

mod csv;
mod machine;
mod plan;
mod plots;
mod summary;
#[cfg(test)]
mod tests;

use crate::bench::harness::transact::{Transact, TransactResult};
use crate::bench::harness::{BenchResult, Session};
use crate::bench::BenchArgs;
use indicatif::{ProgressBar, ProgressStyle};
use machine::{machine, utc_date};
use mojim::error::{Error, Result};
use nvmm::NvmmPoint;
use plan::{check, plan, point_args, session_modes, Step};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub(crate) use csv::{bench_columns, BENCH_COLUMNS};
pub use csv::{checkpoint_csv, schemes_csv, secondary_csv, sizes_csv, threads_csv, transact_csv};
pub use plots::plots;
pub(crate) use summary::{distinct, num};
pub use summary::{key_ratios, summary_md};

/// Options of `mojim bench --matrix`. `Default` is "not asked for" (no OUT_DIR), with no
/// experiments: callers that run the matrix take clap's defaults.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct MatrixArgs {
    /// Run the paper's evaluation matrix (Table 1 schemes, Figs. 8 and 9, checkpoint_thresh,
    /// secondary_tier_thresh, emulated NVMM, Transact) and write CSV files, PNG plots and
    /// summary.md into this folder.
    #[arg(long, value_name = "OUT_DIR", conflicts_with = "mirror")]
    pub matrix: Option<PathBuf>,
    /// Sync points per measured point of the matrix (--ops for each point).
    #[arg(long, default_value_t = 2000)]
    pub matrix_ops: u64,
    /// Bytes in the matrix's regions (instead of --region-size): small enough that a short run
    /// is not dominated by first-touch page faults, large enough to defeat the CPU caches.
    #[arg(long, default_value = "64MiB", value_parser = mojim::size::parse_size)]
    pub matrix_region_size: u64,
    /// Most application threads in the threads experiment (threads 1 … N).
    #[arg(long, default_value_t = 4)]
    pub matrix_threads: usize,
    /// Experiments to run, comma-separated: schemes, sizes, threads, checkpoint, secondary,
    /// nvmm, transact.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "schemes,sizes,threads,checkpoint,secondary,nvmm,transact"
    )]
    pub matrix_experiments: Vec<String>,
    /// The emulated NVMM's persistence barrier delays in the nvmm experiment (nanoseconds, on
    /// the primary for unreplicated and on the mirror for sync; see --nvmm-barrier-ns).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "0,500,1000,2000,5000,10000,20000,50000,100000,200000"
    )]
    pub matrix_nvmm_barriers: Vec<u64>,
    /// The mirror's checkpoint_thresh values in the checkpoint experiment.
    #[arg(long, value_delimiter = ',', default_value = "1,10,100,1000,10000")]
    pub matrix_checkpoints: Vec<usize>,
    /// The mirror's secondary_tier_thresh values in the secondary experiment (bytes).
    #[arg(long, value_delimiter = ',', value_parser = mojim::size::parse_size,
          default_value = "40KiB,400KiB,4MiB,40MiB,400MiB")]
    pub matrix_secondary: Vec<u64>,
    /// The backup link's rate in the secondary experiment.
    #[arg(long, default_value = "20MiB/s")]
    pub matrix_secondary_rate: String,
}

/// The experiments, in the order they run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Experiment {
    Schemes,
    Sizes,
    Threads,
    Checkpoint,
    Secondary,
    Nvmm,
    Transact,
}

impl Experiment {
    pub const ALL: [Experiment; 7] = [
        Experiment::Schemes,
        Experiment::Sizes,
        Experiment::Threads,
        Experiment::Checkpoint,
        Experiment::Secondary,
        Experiment::Nvmm,
        Experiment::Transact,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Experiment::Schemes => "schemes",
            Experiment::Sizes => "sizes",
            Experiment::Threads => "threads",
            Experiment::Checkpoint => "checkpoint",
            Experiment::Secondary => "secondary",
            Experiment::Nvmm => "nvmm",
            Experiment::Transact => "transact",
        }
    }

    fn parse(s: &str) -> Result<Experiment> {
        Experiment::ALL.into_iter().find(|e| e.name() == s.trim()).ok_or_else(|| {
            Error::Config(format!(
                "--matrix-experiments: unknown experiment {s:?}; choose from schemes, sizes, threads, checkpoint, secondary, nvmm, \
                 transact"
            ))
        })
    }
}

/// One scheme of the paper's Table 1: its name there and the `--mode` that measures it here.
#[derive(Clone, Copy, Debug)]
pub struct Scheme {
    pub paper: &'static str,
    pub mode: &'static str,
}

/// `--mode` of `unreplicated` on an ordinary disk file (`bench --disk-file`).
const DISK_MODE: &str = "unreplicated-disk";

/// The schemes of Table 1 that exist here, one line each, in the order of the paper's figures.
pub const SCHEMES: &[Scheme] = &[
    Scheme { paper: "S-unreplicated on a disk file (msync(2))", mode: DISK_MODE },
    Scheme { paper: "S-unreplicated on tmpfs (clwb)", mode: "unreplicated" },
    Scheme { paper: "M-async", mode: "async" },
    Scheme { paper: "M-sync", mode: "sync" },
    Scheme { paper: "M-syncflush", mode: "sync-flush" },
    Scheme { paper: "M-syncdisk", mode: "sync-disk" },
    Scheme { paper: "raw TCP round trip (reference)", mode: "tcp-rtt" },
    Scheme { paper: "M-syncsec (two-tier: mirror + backup)", mode: "sync-backup" },
    Scheme { paper: "M-syncsec-eth (backup over a 100 MiB/s link)", mode: "sync-backup-slow" },
    Scheme { paper: "E-chain (chain replication)", mode: "chain" },
    Scheme { paper: "E-broadcast (primary broadcasts to two replicas)", mode: "broadcast" },
];

/// Schemes of the paper's Table 1 that `mojim bench` cannot start yet; named in summary.md.
pub const PENDING_SCHEMES: &[&str] = &[];

/// Bytes per sync point in the sizes experiment (Fig. 8).
pub const SIZES: [u64; 7] = [8, 64, 256, 1024, 4096, 8192, 12288];
/// Modes of the sizes experiment.
pub const SIZE_MODES: [&str; 3] = ["unreplicated", "async", "sync"];
/// Lane counts of the threads experiment (Fig. 9).
pub const LANES: [u16; 3] = [1, 2, 4];
/// Modes measured beside sync in the threads experiment (one lane per thread).
pub const THREAD_REFERENCE_MODES: [&str; 2] = ["unreplicated", "async"];

/// The files a run of every experiment writes into OUT_DIR, sorted by name.
pub const FILES: [&str; 17] = [
    "checkpoint.csv",
    "checkpoint_latency.png",
    "nvmm.csv",
    "nvmm_latency.png",
    "schemes.csv",
    "schemes_latency.png",
    "schemes_throughput.png",
    "secondary.csv",
    "secondary_latency.png",
    "sizes.csv",
    "sizes_latency.png",
    "summary.md",
    "threads.csv",
    "threads_throughput.png",
    "transact.csv",
    "transact_slowdown.png",
    "transact_speedup.png",
];

/// Everything a matrix run measured.
#[derive(Clone, Debug, Default)]
pub struct MatrixResults {
    pub schemes: Vec<BenchResult>,
    pub sizes: Vec<BenchResult>,
    pub threads: Vec<BenchResult>,
    /// `(checkpoint_thresh, result)`.
    pub checkpoint: Vec<(usize, BenchResult)>,
    /// `(secondary_tier_thresh in bytes, result)`.
    pub secondary: Vec<(usize, BenchResult)>,
    /// `(barrier delay in ns, result)`; the result's mode is its series.
    pub nvmm: Vec<NvmmPoint>,
    pub transact: Vec<TransactResult>,
    /// Points that failed: which and why.
    pub failures: Vec<String>,
}

/// How the results were made, for summary.md.
#[derive(Clone, Debug, Default)]
pub struct RunInfo {
    pub command: String,
    pub date: String,
    pub machine: String,
    pub ops: u64,
    pub repeat: usize,
    pub transactions: u64,
    pub seconds: f64,
}

/// `mojim bench --matrix OUT_DIR`: runs the plan with a progress bar and writes the files.
pub fn run(a: &BenchArgs) -> Result<()> {
    let Some(out) = a.matrix.matrix.clone() else {
        return Err(Error::Config("bench --matrix needs an output folder".into()));
    };
    let experiments: Vec<Experiment> =
        a.matrix.matrix_experiments.iter().map(|s| Experiment::parse(s)).collect::<Result<_>>()?;
    check(a, &experiments)?;
    std::fs::create_dir_all(&out).map_err(Error::io(format!("create {}", out.display())))?;
    let t0 = Instant::now();
    let base = point_args(a);
    let disk_file = a
        .disk_file
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("/var/tmp/mojim-matrix-{}.region", std::process::id())));
    let steps = plan(&a.matrix, &a.transact, &experiments);
    let pb = ProgressBar::new(steps.iter().map(Step::weight).sum());
    // The template is a constant known to be valid; fall back to the default bar regardless.
    let style = ProgressStyle::with_template("{elapsed_precise} [{wide_bar}] {pos}/{len} (eta {eta}) {msg}")
        .map(|s| s.progress_chars("=> "))
        .unwrap_or_else(|_| ProgressStyle::default_bar());
    pb.set_style(style);
    pb.enable_steady_tick(Duration::from_millis(250));
    pb.set_message("starting the mirrors");

    let mut sa = base.clone();
    sa.mode = session_modes(&experiments);
    let session = Session::start(&sa)?;
    let mut res = MatrixResults::default();
    let mut first_error = None;
    let mut transact: Option<Transact> = None;
    for step in &steps {
        pb.set_message(step.label());
        if let Err(e) = run_step(&base, &disk_file, &session, &mut transact, step, &mut res) {
            pb.println(format!("failed: {}: {e}", step.label()));
            res.failures.push(format!("{}: {e}", step.label()));
            first_error.get_or_insert(e);
        }
        pb.inc(step.weight());
    }
    if let Some(t) = transact.take() {
        if let Err(e) = t.close() {
            res.failures.push(format!("transact: close: {e}"));
            first_error.get_or_insert(e);
        }
    }
    drop(session);
    pb.finish_and_clear();

    let info = RunInfo {
        command: std::env::args().collect::<Vec<_>>().join(" "),
        date: utc_date(),
        machine: machine(),
        ops: a.matrix.matrix_ops,
        repeat: a.repeat.max(1),
        transactions: a.transact.transactions,
        seconds: t0.elapsed().as_secs_f64(),
    };
    let files = write_all(&out, &res, &info)?;
    println!("{}", key_ratios(&res));
    println!("wrote {} files to {} in {:.0} s:", files.len(), out.display(), info.seconds);
    for f in &files {
        println!("  {}", f.display());
    }
    match first_error {
        Some(e) => {
            eprintln!(
                "bench --matrix: {} points failed (listed in summary.md); the first:",
                res.failures.len()
            );
            Err(e)
        }
        None => Ok(()),
    }
}

fn run_step(
    base: &BenchArgs,
    disk_file: &Path,
    session: &Session,
    transact: &mut Option<Transact>,
    step: &Step,
    res: &mut MatrixResults,
) -> Result<()> {
    let mut a = base.clone();
    match *step {
        Step::Schemes => {
            a.mode = SCHEMES.iter().map(|s| s.mode).filter(|&m| m != DISK_MODE).map(String::from).collect();
            if SCHEMES.iter().any(|s| s.mode == DISK_MODE) {
                a.disk_file = Some(disk_file.to_path_buf());
            }
            let mut rs = session.measure(&a)?;
            // In the order of SCHEMES, which is the order of the paper's figures.
            rs.sort_by_key(|r| SCHEMES.iter().position(|s| s.mode == r.mode));
            res.schemes = rs;
        }
        Step::Size(size) => {
            a.mode = SIZE_MODES.map(String::from).to_vec();
            a.size = size;
            res.sizes.extend(session.measure(&a)?);
        }
        Step::Threads { threads, lanes } => {
            a.threads = threads;
            a.lanes = lanes;
            a.mode = match lanes {
                Some(_) => vec!["sync".into()],
                None => THREAD_REFERENCE_MODES.map(String::from).to_vec(),
            };
            res.threads.extend(session.measure(&a)?);
        }
        Step::Checkpoint(thresh) => {
            a.mode = vec!["sync".into()];
            a.checkpoint_thresh = Some(thresh);
            let own = Session::start(&a)?;
            res.checkpoint.extend(own.measure(&a)?.into_iter().map(|r| (thresh, r)));
        }
        Step::Secondary(thresh) => {
            a.mode = vec!["sync-backup-slow".into()];
            a.secondary_tier_thresh = Some(thresh.to_string());
            a.secondary_rate_limit = Some(a.matrix.matrix_secondary_rate.clone());
            let own = Session::start(&a)?;
            res.secondary.extend(own.measure(&a)?.into_iter().map(|r| (thresh as usize, r)));
        }
        Step::Nvmm(ns) => res.nvmm.extend(nvmm::measure(&a, ns)?),
        Step::Transact { epochs, writes } => {
            let t = match transact {
                Some(t) => t,
                None => transact.insert(Transact::open(session, &a)?),
            };
            res.transact.extend(t.measure(&a, epochs, writes)?);
        }
    }
    Ok(())
}

/// Writes the CSV file and plots of every experiment that has results, and summary.md;
/// returns the paths written.
pub fn write_all(out: &Path, res: &MatrixResults, info: &RunInfo) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    let mut put = |name: &str, text: String| -> Result<()> {
        let p = out.join(name);
        std::fs::write(&p, text).map_err(Error::io(format!("write {}", p.display())))?;
        files.push(p);
        Ok(())
    };
    if !res.schemes.is_empty() {
        put("schemes.csv", schemes_csv(&res.schemes))?;
    }
    if !res.sizes.is_empty() {
        put("sizes.csv", sizes_csv(&res.sizes))?;
    }
    if !res.threads.is_empty() {
        put("threads.csv", threads_csv(&res.threads))?;
    }
    if !res.checkpoint.is_empty() {
        put("checkpoint.csv", checkpoint_csv(&res.checkpoint))?;
    }
    if !res.secondary.is_empty() {
        put("secondary.csv", secondary_csv(&res.secondary))?;
    }
    if !res.nvmm.is_empty() {
        put("nvmm.csv", nvmm::csv(&res.nvmm))?;
    }
    if !res.transact.is_empty() {
        put("transact.csv", transact_csv(&res.transact))?;
    }
    put("summary.md", summary_md(res, info))?;
    files.extend(plots(out, res)?);
    Ok(files)
}
