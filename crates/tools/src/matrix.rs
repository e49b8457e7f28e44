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

use crate::bench::{BenchArgs, BenchResult, Session};
use crate::matrix_nvmm::{self, NvmmPoint};
use crate::plot::{self, Axis, Legend, Series};
use crate::transact::{self, Strategy, Transact, TransactArgs, TransactResult};
use indicatif::{ProgressBar, ProgressStyle};
use mojim::error::{Error, Result};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

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

/// One unit of work: what it measures; its weight on the progress bar is the modes it runs.
#[derive(Clone, Debug, PartialEq)]
enum Step {
    Schemes,
    Size(u64),
    Threads {
        threads: usize,
        lanes: Option<u16>,
    },
    Checkpoint(usize),
    Secondary(u64),
    /// The emulated NVMM's barrier delay in nanoseconds.
    Nvmm(u64),
    Transact {
        epochs: u32,
        writes: u32,
    },
}

impl Step {
    fn label(&self) -> String {
        match self {
            Step::Schemes => format!("Table 1: {} schemes at 4 KiB", SCHEMES.len()),
            Step::Size(s) => format!("sizes: {} B", s),
            Step::Threads { threads, lanes: Some(l) } => {
                format!("threads: sync, {threads} threads, {l} lane(s)")
            }
            Step::Threads { threads, lanes: None } => {
                format!("threads: unreplicated and async, {threads} threads")
            }
            Step::Checkpoint(t) => format!("checkpoint: checkpoint_thresh {t}"),
            Step::Secondary(t) => format!("secondary: secondary_tier_thresh {}", plot::bytes(*t as f64)),
            Step::Nvmm(ns) => format!("nvmm: {ns} ns per persistence barrier"),
            Step::Transact { epochs, writes } => format!("transact: {epochs} epochs × {writes} writes"),
        }
    }

    fn weight(&self) -> u64 {
        match self {
            Step::Schemes => SCHEMES.len() as u64,
            Step::Size(_) => SIZE_MODES.len() as u64,
            Step::Threads { lanes: Some(_), .. } | Step::Checkpoint(_) | Step::Secondary(_) => 1,
            Step::Threads { lanes: None, .. } => THREAD_REFERENCE_MODES.len() as u64,
            Step::Nvmm(_) => (matrix_nvmm::NVMM_SERIES.len() * matrix_nvmm::NVMM_SIZES.len()) as u64,
            Step::Transact { .. } => Strategy::ALL.len() as u64,
        }
    }
}

fn plan(m: &MatrixArgs, t: &TransactArgs, experiments: &[Experiment]) -> Vec<Step> {
    let mut steps = Vec::new();
    for &e in experiments {
        match e {
            Experiment::Schemes => steps.push(Step::Schemes),
            Experiment::Sizes => steps.extend(SIZES.map(Step::Size)),
            Experiment::Threads => {
                for threads in 1..=m.matrix_threads {
                    steps.extend(LANES.map(|l| Step::Threads { threads, lanes: Some(l) }));
                    steps.push(Step::Threads { threads, lanes: None });
                }
            }
            Experiment::Checkpoint => steps.extend(m.matrix_checkpoints.iter().map(|&c| Step::Checkpoint(c))),
            Experiment::Secondary => steps.extend(m.matrix_secondary.iter().map(|&t| Step::Secondary(t))),
            Experiment::Nvmm => steps.extend(m.matrix_nvmm_barriers.iter().map(|&ns| Step::Nvmm(ns))),
            Experiment::Transact => {
                for &writes in &t.writes {
                    steps.extend(t.epochs.iter().map(|&epochs| Step::Transact { epochs, writes }));
                }
            }
        }
    }
    steps
}

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

fn check(a: &BenchArgs, experiments: &[Experiment]) -> Result<()> {
    let m = &a.matrix;
    if m.matrix_ops == 0 {
        return Err(Error::Config("--matrix-ops must be at least 1".into()));
    }
    if m.matrix_threads == 0 || m.matrix_threads > 64 {
        return Err(Error::Config(format!("--matrix-threads {} must be between 1 and 64", m.matrix_threads)));
    }
    if experiments.contains(&Experiment::Checkpoint)
        && (m.matrix_checkpoints.is_empty() || m.matrix_checkpoints.contains(&0))
    {
        return Err(Error::Config(format!(
            "--matrix-checkpoints {:?}: give at least one, each at least 1",
            m.matrix_checkpoints
        )));
    }
    if experiments.contains(&Experiment::Nvmm) {
        let max = mojim::config::MAX_NVMM_BARRIER_NS;
        if m.matrix_nvmm_barriers.is_empty() || m.matrix_nvmm_barriers.iter().any(|&b| b > max) {
            return Err(Error::Config(format!(
                "--matrix-nvmm-barriers {:?}: give at least one, each 0 to {max} ns",
                m.matrix_nvmm_barriers
            )));
        }
        a.nvmm_model()?;
    }
    let biggest = SIZES[SIZES.len() - 1].max(4096 * m.matrix_threads as u64);
    if m.matrix_region_size < biggest {
        return Err(Error::Config(format!(
            "--matrix-region-size {} must be at least {biggest} bytes",
            m.matrix_region_size
        )));
    }
    if experiments.contains(&Experiment::Transact) {
        transact::check_args(&a.transact, m.matrix_region_size)?;
    }
    Ok(())
}

/// The arguments of one measured point: `a` with the matrix's op budget, quiet.
fn point_args(a: &BenchArgs) -> BenchArgs {
    let mut p = a.clone();
    p.ops = a.matrix.matrix_ops;
    p.region_size = a.matrix.matrix_region_size;
    p.duration = None;
    p.warmup = a.warmup.min(a.matrix.matrix_ops / 4);
    // measure() prints its per-round progress lines only for table output.
    p.json = true;
    p.size = 4096;
    p.threads = 1;
    p.lanes = None;
    p.checkpoint_thresh = None;
    // Only the schemes experiment measures `unreplicated` on a disk file.
    p.disk_file = None;
    p
}

/// The modes the shared session must start for `experiments` (all but checkpoint's).
fn session_modes(experiments: &[Experiment]) -> Vec<String> {
    let mut modes: Vec<&str> = Vec::new();
    for e in experiments {
        let add: Vec<&str> = match e {
            Experiment::Schemes => SCHEMES.iter().map(|s| s.mode).filter(|&m| m != DISK_MODE).collect(),
            Experiment::Sizes => SIZE_MODES.to_vec(),
            Experiment::Threads => {
                let mut v = THREAD_REFERENCE_MODES.to_vec();
                v.push("sync");
                v
            }
            Experiment::Checkpoint | Experiment::Secondary | Experiment::Nvmm => Vec::new(),
            Experiment::Transact => vec!["sync"],
        };
        for m in add {
            if !modes.contains(&m) {
                modes.push(m);
            }
        }
    }
    if modes.is_empty() {
        modes.push("unreplicated");
    }
    modes.into_iter().map(String::from).collect()
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
        Step::Nvmm(ns) => res.nvmm.extend(matrix_nvmm::measure(&a, ns)?),
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

// ---- CSV ------------------------------------------------------------------------------------

pub(crate) const BENCH_COLUMNS: &str = "ops,mean_us,p50_us,p99_us,ops_per_s,MB_per_s";

pub(crate) fn bench_columns(r: &BenchResult) -> String {
    format!("{},{:.3},{:.3},{:.3},{:.1},{:.3}", r.ops, r.mean_us, r.p50_us, r.p99_us, r.ops_per_s, r.mb_per_s)
}

fn paper_name(mode: &str) -> &'static str {
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
fn sweep_csv(column: &str, rs: &[(usize, BenchResult)]) -> String {
    let mut s = format!("{column},mode,size_B,{BENCH_COLUMNS}\n");
    for (t, r) in rs {
        let _ = writeln!(s, "{t},{},{},{}", r.mode, r.size, bench_columns(r));
    }
    s
}

/// A summary.md table of a swept setting: one row per value, as `label` writes it.
fn sweep_table(
    s: &mut String,
    heading: &str,
    name: &str,
    rs: &[(usize, BenchResult)],
    label: fn(usize) -> String,
) {
    s.push_str(heading);
    let _ = writeln!(s, "| {name} | mean µs | p50 µs | p99 µs | ops/s |\n|---:|---:|---:|---:|---:|");
    for (t, r) in rs {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {:.0} |",
            label(*t),
            num(r.mean_us),
            num(r.p50_us),
            num(r.p99_us),
            r.ops_per_s
        );
    }
}

/// A latency plot (mean, p50, p99) over a swept setting on a log scale.
fn sweep_plot(path: &Path, title: &str, x: &Axis, rs: &[(usize, BenchResult)]) -> Result<()> {
    let pick = |label: &str, color, v: fn(&BenchResult) -> f64| Series {
        label: label.into(),
        points: rs.iter().map(|(t, r)| (*t as f64, v(r))).collect(),
        color,
        dashed: false,
    };
    let series = [pick("mean", 0, |r| r.mean_us), pick("p50", 1, |r| r.p50_us), pick("p99", 2, |r| r.p99_us)];
    plot::lines(path, title, x, &Axis::log("latency (µs, log scale)"), &series, Legend::UpperLeft, None)
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

// ---- summary.md -----------------------------------------------------------------------------

/// A figure with about three significant digits.
pub(crate) fn num(v: f64) -> String {
    if !v.is_finite() {
        "–".into()
    } else if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

fn find<'a>(rs: &'a [BenchResult], mode: &str) -> Option<&'a BenchResult> {
    rs.iter().find(|r| r.mode == mode)
}

/// The ratios the matrix is for, one line each (only those whose inputs were measured).
pub fn key_ratios(res: &MatrixResults) -> String {
    let mut s = String::new();
    let t = &res.schemes;
    if let (Some(y), Some(d)) = (find(t, "sync"), find(t, DISK_MODE)) {
        let _ = writeln!(
            s,
            "- sync / unreplicated-disk: mean {} , p50 {} (paper, M-sync vs S-unreplicated: 0.55–0.60)",
            num(y.mean_us / d.mean_us),
            num(y.p50_us / d.p50_us)
        );
    }
    if let (Some(y), Some(r)) = (find(t, "sync"), find(t, "tcp-rtt")) {
        let _ = writeln!(
            s,
            "- sync p50 / tcp-rtt p50: {} (a raw round trip of the same size)",
            num(y.p50_us / r.p50_us)
        );
    }
    if let (Some(d), Some(y)) = (find(t, "sync-disk"), find(t, "sync")) {
        let _ = writeln!(
            s,
            "- sync-disk mean / sync mean: {} (paper: the disk adds 1–10 %)",
            num(d.mean_us / y.mean_us)
        );
    }
    if let (Some(x), Some(u)) = (find(t, "async"), find(t, "unreplicated")) {
        let _ = writeln!(s, "- async mean / unreplicated (tmpfs) mean: {}", num(x.mean_us / u.mean_us));
    }
    let ups: Vec<(u32, f64)> = transact::speedups(&res.transact)
        .into_iter()
        .filter(|&(e, w, _)| w == 1 && e >= 8)
        .map(|(e, _, x)| (e, x))
        .collect();
    if let Some((e, lowest)) = transact::key_speedup(&res.transact) {
        let each: Vec<String> = ups.iter().map(|(e, x)| format!("{e}: {}×", num(*x))).collect();
        let _ = writeln!(
            s,
            "- Transact, ordered pipelining (sm-ob) vs a round trip per fence (sm-rc), 1 write per epoch, \
             ≥ 8 epochs: at least {}× (lowest at {e} epochs; by epochs {}); target ≥ 3×: {}",
            num(lowest),
            each.join(", "),
            if lowest >= 3.0 { "met" } else { "NOT met" }
        );
    }
    if !res.checkpoint.is_empty() {
        let (lo, hi) = res
            .checkpoint
            .iter()
            .fold((f64::INFINITY, 0f64), |(lo, hi), (_, r)| (lo.min(r.mean_us), hi.max(r.mean_us)));
        let _ = writeln!(
            s,
            "- checkpoint_thresh: slowest / fastest mean sync latency over thresholds {}: {} (paper: no effect)",
            res.checkpoint.iter().map(|(t, _)| t.to_string()).collect::<Vec<_>>().join(", "),
            num(hi / lo)
        );
    }
    s.push_str(&matrix_nvmm::key_lines(&res.nvmm));
    if s.is_empty() {
        s.push_str("- (nothing measured that a key ratio needs)\n");
    }
    s
}

/// summary.md: how the run was made, the key ratios, and one table per experiment.
pub fn summary_md(res: &MatrixResults, info: &RunInfo) -> String {
    let mut s = String::from("# mojim bench --matrix\n\n");
    run_info_md(&mut s, info);
    s.push_str("\n## Key ratios\n\n");
    s.push_str(&key_ratios(res));
    if !res.schemes.is_empty() {
        schemes_table(&mut s, &res.schemes);
    }
    if !res.sizes.is_empty() {
        sizes_table(&mut s, &res.sizes);
    }
    if !res.threads.is_empty() {
        threads_table(&mut s, &res.threads);
    }
    if !res.checkpoint.is_empty() {
        let h = "\n## The mirror's checkpoint_thresh, sync at 4 KiB (§6.3.3): `checkpoint.csv`\n\n";
        sweep_table(&mut s, h, "checkpoint_thresh", &res.checkpoint, |t| t.to_string());
    }
    if !res.secondary.is_empty() {
        let h = "\n## The mirror's secondary_tier_thresh, sync + backup over a slow link at 4 KiB (§6.3.3): \
                 `secondary.csv`\n\n";
        sweep_table(&mut s, h, "secondary_tier_thresh", &res.secondary, |t| plot::bytes(t as f64));
    }
    if !res.nvmm.is_empty() {
        matrix_nvmm::table(&mut s, &res.nvmm);
    }
    if !res.transact.is_empty() {
        transact_table(&mut s, &res.transact);
    }
    if !res.failures.is_empty() {
        s.push_str("\n## Failed points\n\n");
        for f in &res.failures {
            let _ = writeln!(s, "- {f}");
        }
    }
    s
}

/// summary.md's opening list: when, where and how the run was made.
fn run_info_md(s: &mut String, info: &RunInfo) {
    let _ = writeln!(s, "- date (UTC): {}", info.date);
    let _ = writeln!(s, "- machine: {}", info.machine);
    let _ = writeln!(s, "- command: `{}`", info.command);
    let _ = writeln!(
        s,
        "- {} sync points per point; {} transactions per Transact point; {} round(s) per point, the \
         median reported; took {:.0} s",
        info.ops, info.transactions, info.repeat, info.seconds
    );
    s.push_str("\nThe machine is shared and noisy: compare ratios within one run, not across runs.\n");
}

/// summary.md's Table 1: one row per scheme, then the schemes not measured yet.
fn schemes_table(s: &mut String, rs: &[BenchResult]) {
    s.push_str("\n## Table 1 schemes, 4 KiB sync points (Figs. 4–5): `schemes.csv`\n\n");
    s.push_str("| scheme (paper) | mode | mean µs | p50 µs | p99 µs | ops/s | MB/s |\n|---|---|---:|---:|---:|---:|---:|\n");
    for r in rs {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {:.0} | {} |",
            paper_name(&r.mode),
            r.mode,
            num(r.mean_us),
            num(r.p50_us),
            num(r.p99_us),
            r.ops_per_s,
            num(r.mb_per_s)
        );
    }
    if !PENDING_SCHEMES.is_empty() {
        s.push_str("\nNot measured yet (`mojim bench` cannot start them yet): ");
        s.push_str(&PENDING_SCHEMES.join("; "));
        s.push_str(".\n");
    }
}

/// summary.md's Fig. 8 table: mean latency, one row per size, one column per mode.
fn sizes_table(s: &mut String, rs: &[BenchResult]) {
    s.push_str("\n## Sync point size, mean latency in µs (Fig. 8): `sizes.csv`\n\n");
    let modes = distinct(rs.iter().map(|r| r.mode.as_str()));
    let sizes = distinct(rs.iter().map(|r| r.size));
    grid_table(
        s,
        "size",
        &modes,
        &sizes,
        |size| plot::bytes(size as f64),
        |size, m| rs.iter().find(|r| r.size == size && r.mode == *m).map(|r| r.mean_us),
    );
}

/// summary.md's Fig. 9 table: throughput, one row per thread count, one column per series.
fn threads_table(s: &mut String, rs: &[BenchResult]) {
    s.push_str("\n## Threads and lanes, throughput in MB/s of 4 KiB sync points (Fig. 9): `threads.csv`\n\n");
    let cols = distinct(rs.iter().map(thread_series));
    let threads = distinct(rs.iter().map(|r| r.threads));
    grid_table(
        s,
        "threads",
        &cols,
        &threads,
        |t| t.to_string(),
        |t, c| rs.iter().find(|r| r.threads == t && thread_series(r) == *c).map(|r| r.mb_per_s),
    );
}

/// A summary.md table with one row per value of `rows` (named by `row_name`) and one column per
/// name in `cols`; a cell `cell` has no figure for is "–".
fn grid_table<R: Copy, C: AsRef<str>>(
    s: &mut String,
    corner: &str,
    cols: &[C],
    rows: &[R],
    row_name: impl Fn(R) -> String,
    cell: impl Fn(R, &C) -> Option<f64>,
) {
    let names: Vec<&str> = cols.iter().map(AsRef::as_ref).collect();
    let _ = writeln!(s, "| {corner} | {} |", names.join(" | "));
    let _ = writeln!(s, "|---:|{}", "---:|".repeat(cols.len()));
    for &r in rows {
        let cells: Vec<String> = cols.iter().map(|c| cell(r, c).map_or("–".into(), num)).collect();
        let _ = writeln!(s, "| {} | {} |", row_name(r), cells.join(" | "));
    }
}

/// summary.md's Transact table: one row per writes and epochs, the three strategies side by side.
fn transact_table(s: &mut String, rs: &[TransactResult]) {
    s.push_str("\n## Transact: mean transaction latency in µs and slowdown over no-sm: `transact.csv`\n\n");
    s.push_str(
        "| epochs | writes | no-sm µs | sm-rc µs | sm-ob µs | sm-rc slowdown | sm-ob slowdown | sm-rc / sm-ob |\n\
         |---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for w in distinct(rs.iter().map(|r| r.writes)) {
        for e in distinct(rs.iter().filter(|r| r.writes == w).map(|r| r.epochs)) {
            transact_row(s, rs, e, w);
        }
    }
}

/// One row of the Transact table: `e` epochs of `w` writes.
fn transact_row(s: &mut String, rs: &[TransactResult], e: u32, w: u32) {
    let get = |st: Strategy| rs.iter().find(|r| r.strategy == st.name() && r.epochs == e && r.writes == w);
    let (n, rc, ob) = (get(Strategy::NoSm), get(Strategy::SmRc), get(Strategy::SmOb));
    let f = |r: Option<&TransactResult>, v: fn(&TransactResult) -> f64| r.map_or("–".into(), |r| num(v(r)));
    let ratio = match (rc, ob) {
        (Some(rc), Some(ob)) => num(rc.mean_us / ob.mean_us),
        _ => "–".into(),
    };
    let _ = writeln!(
        s,
        "| {e} | {w} | {} | {} | {} | {}× | {}× | {ratio}× |",
        f(n, |r| r.mean_us),
        f(rc, |r| r.mean_us),
        f(ob, |r| r.mean_us),
        f(rc, |r| r.slowdown),
        f(ob, |r| r.slowdown)
    );
}

fn thread_series(r: &BenchResult) -> String {
    if r.mode == "sync" {
        format!("sync, {} lane{}", r.lanes, if r.lanes == 1 { "" } else { "s" })
    } else {
        r.mode.clone()
    }
}

/// The distinct values, in first-seen order.
pub(crate) fn distinct<T: PartialEq>(it: impl Iterator<Item = T>) -> Vec<T> {
    let mut v = Vec::new();
    for x in it {
        if !v.contains(&x) {
            v.push(x);
        }
    }
    v
}

// ---- files ----------------------------------------------------------------------------------

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
        put("nvmm.csv", matrix_nvmm::csv(&res.nvmm))?;
    }
    if !res.transact.is_empty() {
        put("transact.csv", transact_csv(&res.transact))?;
    }
    put("summary.md", summary_md(res, info))?;
    files.extend(plots(out, res)?);
    Ok(files)
}

/// Draws the plots of every experiment that has results; returns the paths written.
pub fn plots(out: &Path, res: &MatrixResults) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    if !res.schemes.is_empty() {
        files.extend(schemes_plots(out, &res.schemes)?);
    }
    if !res.sizes.is_empty() {
        files.push(sizes_plot(out, &res.sizes)?);
    }
    if !res.threads.is_empty() {
        files.push(threads_plot(out, &res.threads)?);
    }
    if !res.checkpoint.is_empty() {
        files.push(draw(out, "checkpoint_latency.png", |p| {
            sweep_plot(
                p,
                "sync latency by the mirror's checkpoint_thresh, 4 KiB (paper §6.3.3)",
                &Axis::log("checkpoint_thresh (groups between checkpoints, log scale)"),
                &res.checkpoint,
            )
        })?);
    }
    if !res.secondary.is_empty() {
        files.push(draw(out, "secondary_latency.png", |p| {
            sweep_plot(
                p,
                "sync + backup over a slow link, by secondary_tier_thresh, 4 KiB (paper §6.3.3)",
                &Axis::log("secondary_tier_thresh (bytes, log scale)").with_format(plot::bytes),
                &res.secondary,
            )
        })?);
    }
    if !res.nvmm.is_empty() {
        files.push(draw(out, "nvmm_latency.png", |p| matrix_nvmm::plot(p, &res.nvmm))?);
    }
    if !res.transact.is_empty() {
        files.push(transact_slowdown_plot(out, &res.transact)?);
        files.push(transact_speedup_plot(out, &res.transact)?);
    }
    Ok(files)
}

/// Draws the plot `name` in `out` with `render`; returns its path.
fn draw(out: &Path, name: &str, render: impl FnOnce(&Path) -> Result<()>) -> Result<PathBuf> {
    let p = out.join(name);
    render(&p)?;
    Ok(p)
}

/// Figs. 4 and 5: mean latency and throughput, a bar per scheme.
fn schemes_plots(out: &Path, rs: &[BenchResult]) -> Result<[PathBuf; 2]> {
    let bars = |v: fn(&BenchResult) -> f64| -> Vec<(String, f64)> {
        rs.iter().map(|r| (r.mode.clone(), v(r))).collect()
    };
    let latency = draw(out, "schemes_latency.png", |p| {
        plot::bars(
            p,
            "Mean latency of a 4 KiB sync point, by scheme (paper Fig. 4)",
            &Axis::log("mean latency (µs, log scale)"),
            &bars(|r| r.mean_us),
            " µs",
        )
    })?;
    let throughput = draw(out, "schemes_throughput.png", |p| {
        plot::bars(
            p,
            "Throughput of 4 KiB sync points, one thread, by scheme (paper Fig. 5)",
            &Axis::log("throughput (MB/s, log scale)"),
            &bars(|r| r.mb_per_s),
            " MB/s",
        )
    })?;
    Ok([latency, throughput])
}

/// Fig. 8: mean latency by size, a line per mode.
fn sizes_plot(out: &Path, rs: &[BenchResult]) -> Result<PathBuf> {
    let series = series_by(rs, |r| r.mode.clone(), |r| (r.size as f64, r.mean_us), |_| false);
    draw(out, "sizes_latency.png", |p| {
        plot::lines(
            p,
            "Mean sync point latency by size (paper Fig. 8)",
            &Axis::log("bytes per sync point (log scale)").with_format(plot::bytes),
            &Axis::log("mean latency (µs, log scale)"),
            &series,
            Legend::UpperLeft,
            None,
        )
    })
}

/// Fig. 9: throughput by threads, a line per mode and lane count (dashed unless sync).
fn threads_plot(out: &Path, rs: &[BenchResult]) -> Result<PathBuf> {
    let series =
        series_by(rs, thread_series, |r| (r.threads as f64, r.mb_per_s), |name| !name.starts_with("sync"));
    draw(out, "threads_throughput.png", |p| {
        plot::lines(
            p,
            "Throughput of 4 KiB sync points by threads and lanes (paper Fig. 9)",
            &Axis::linear("application threads"),
            &Axis::log("throughput (MB/s, log scale)"),
            &series,
            Legend::UpperLeft,
            None,
        )
    })
}

/// One line per distinct `name` of the results, in first-seen order, through their `point`s.
fn series_by(
    rs: &[BenchResult],
    name: impl Fn(&BenchResult) -> String,
    point: impl Fn(&BenchResult) -> (f64, f64),
    dashed: impl Fn(&str) -> bool,
) -> Vec<Series> {
    distinct(rs.iter().map(&name))
        .into_iter()
        .enumerate()
        .map(|(i, label)| Series {
            points: rs.iter().filter(|r| name(r) == label).map(&point).collect(),
            dashed: dashed(&label),
            label,
            color: i,
        })
        .collect()
}

/// Transact: the slowdown over no-sm by epochs, a line per strategy (sm-rc solid, sm-ob dashed)
/// and writes per epoch.
fn transact_slowdown_plot(out: &Path, rs: &[TransactResult]) -> Result<PathBuf> {
    let writes = distinct(rs.iter().map(|r| r.writes));
    let mut series = Vec::new();
    for (st, dashed) in [(Strategy::SmRc, false), (Strategy::SmOb, true)] {
        for (i, &w) in writes.iter().enumerate() {
            series.push(Series {
                label: format!("{} W={w}", st.name()),
                points: rs
                    .iter()
                    .filter(|r| r.strategy == st.name() && r.writes == w)
                    .map(|r| (r.epochs as f64, r.slowdown))
                    .collect(),
                color: i,
                dashed,
            });
        }
    }
    draw(out, "transact_slowdown.png", |p| {
        plot::lines(
            p,
            "Transact: slowdown over no-sm (solid: sm-rc, dashed: sm-ob; W = writes per epoch)",
            &Axis::log("epochs per transaction (log scale)"),
            &Axis::log("mean transaction latency / no-sm's (log scale)"),
            &series,
            Legend::UpperLeft,
            None,
        )
    })
}

/// Transact: sm-ob's speed-up over sm-rc by epochs, a line per writes per epoch, against the
/// target.
fn transact_speedup_plot(out: &Path, rs: &[TransactResult]) -> Result<PathBuf> {
    let ups = transact::speedups(rs);
    let series: Vec<Series> = distinct(rs.iter().map(|r| r.writes))
        .into_iter()
        .enumerate()
        .map(|(i, w)| Series {
            label: format!("W={w} writes per epoch"),
            points: ups.iter().filter(|u| u.1 == w).map(|u| (u.0 as f64, u.2)).collect(),
            color: i,
            dashed: false,
        })
        .collect();
    draw(out, "transact_speedup.png", |p| {
        plot::lines(
            p,
            "Transact: ordered pipelining vs a round trip per fence (sm-rc / sm-ob mean)",
            &Axis::log("epochs per transaction (log scale)"),
            &Axis::linear("sm-rc mean / sm-ob mean (×)"),
            &series,
            Legend::UpperLeft,
            Some((3.0, "target 3× (W=1, E ≥ 8)")),
        )
    })
}

// ---- the run's circumstances ----------------------------------------------------------------

/// Cores, CPU model, memory and kernel, from /proc (what is there).
fn machine() -> String {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let cpu = read("/proc/cpuinfo")
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name").map(|v| v.trim_start_matches([' ', '\t', ':']).to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let mem_gib = read("/proc/meminfo")
        .lines()
        .find_map(|l| {
            l.strip_prefix("MemTotal:").and_then(|v| v.trim().trim_end_matches(" kB").parse::<u64>().ok())
        })
        .map_or(String::new(), |kb| format!(", {:.0} GiB", kb as f64 / (1024.0 * 1024.0)));
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    format!("{cores} cores ({cpu}){mem_gib}, Linux {}", read("/proc/sys/kernel/osrelease").trim())
}

/// Today's date and time in UTC, `YYYY-MM-DD HH:MM`.
fn utc_date() -> String {
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (days, rest) = ((secs / 86_400) as i64, secs % 86_400);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02} {:02}:{:02}", rest / 3600, rest % 3600 / 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bench(mode: &str, size: u64, threads: usize, lanes: u16, mean: f64) -> BenchResult {
        BenchResult {
            mode: mode.into(),
            size,
            threads,
            lanes,
            ops: 100,
            mean_us: mean,
            p50_us: mean * 0.9,
            p99_us: mean * 3.0,
            ops_per_s: 1e6 / mean * threads as f64,
            mb_per_s: size as f64 / mean * threads as f64,
            backups: 0,
            topology: "none".into(),
            transport: "tcp".into(),
            tls: false,
            encrypt_placed: false,
            metrics: false,
            cpu_us_sender: None,
            cpu_us_receiver: None,
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
        r.nvmm = matrix_nvmm::tests::fake();
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
        assert!(lines[1].starts_with(
            "unreplicated-disk,\"S-unreplicated on a disk file (msync(2))\",4096,1,0,100,900.000,"
        ));
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
        assert_eq!(
            s.lines().nth(2).map(|l| l.split(',').take(2).collect::<Vec<_>>()),
            Some(vec!["10", "sync"])
        );
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
}
