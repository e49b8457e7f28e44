//! The programs in `mojim bench --rvm` (the report's §3.5 and §3.6): their total time against
//! the commit interval and the failure interval, on each backend, beside the same program
//! without persistence (`none`) and, for DGEMV, with manual serialization to a file on
//! `--disk-dir`, written whole and fsynced at the same points (`file`).
//!
//! Every run starts afresh (the memory's old state discarded, the file removed) and is checked
//! to end with the answer of the run without persistence, bit for bit.

use super::bench::{Progress, RvmBenchArgs, RvmResult, Stores, Target};
use super::schedule::{Outcome, Schedule};
use super::{dgemv, kmer};
use mojim::error::{Error, Result};
use std::fmt::Display;
use std::time::{Duration, Instant};

/// What the program part of a run measures.
pub struct AppPlan {
    dgemv: dgemv::Params,
    commit_every: Vec<u64>,
    fail_every: Vec<u64>,
    kmer: kmer::Params,
    kmer_commit_every: Vec<u64>,
}

impl AppPlan {
    /// The plan of the flags (checked by the caller: no interval is 0).
    pub fn new(r: &RvmBenchArgs) -> AppPlan {
        let dgemv = if r.rvm_report_sizes { dgemv::Params::report() } else { dgemv::Params::default() };
        AppPlan {
            dgemv,
            commit_every: r.rvm_commit_every.clone(),
            fail_every: r.rvm_fail_every.clone(),
            kmer: kmer::Params::default(),
            kmer_commit_every: r.rvm_kmer_commit_every.clone(),
        }
    }

    /// Bytes of recoverable memory DGEMV needs.
    pub fn dgemv_bytes(&self) -> u64 {
        self.dgemv.vector_bytes() + (1 << 20)
    }

    /// Bytes of recoverable memory the k-mer program needs.
    pub fn kmer_bytes(&self) -> u64 {
        self.kmer.table_bytes() + (1 << 20)
    }

    /// DGEMV's schedules: each commit interval without failures, then each failure interval
    /// with a commit every iteration.
    fn dgemv_schedules(&self) -> Vec<Schedule> {
        let c = self.commit_every.iter().map(|&k| Schedule { commit_every: k, fail_every: None });
        let f = self.fail_every.iter().map(|&f| Schedule { commit_every: 1, fail_every: Some(f) });
        c.chain(f).collect()
    }

    /// Points of DGEMV per round for `targets` backends.
    pub fn dgemv_points(&self, targets: usize) -> usize {
        (targets + 2) * (self.commit_every.len() + self.fail_every.len())
    }

    /// Points of the k-mer program per round for `targets` backends.
    pub fn kmer_points(&self, targets: usize) -> usize {
        (targets + 1) * self.kmer_commit_every.len()
    }
}

/// A program's run as a result.
fn result(op: &str, s: &Schedule, out: &Outcome, backend: &str, tracking: &str) -> RvmResult {
    let pattern = if s.fail_every.is_some() { "failure-interval" } else { "commit-interval" };
    let mut r = RvmResult::timed(backend, tracking, op, pattern, &out.commits);
    r.pages = out.state_pages;
    r.sent_pages = out.pages_sent / (out.commits.len() as u64).max(1);
    r.commit_every = Some(s.commit_every);
    r.fail_every = s.fail_every;
    r.total_s = Some(out.total.as_secs_f64());
    r.failures = Some(out.failures);
    r.recovery_mean_ms = (!out.recoveries.is_empty()).then(|| {
        out.recoveries.iter().map(|d| d.as_secs_f64() * 1e3).sum::<f64>() / out.recoveries.len() as f64
    });
    r.steps_run = Some(out.steps_run);
    r
}

/// A run's answer against the reference: a difference is a bug, reported with both.
fn same<A: PartialEq + Display>(what: &str, got: &A, want: &A) -> Result<()> {
    if got == want {
        return Ok(());
    }
    Err(Error::Config(format!("{what} ended with {got}, the run without persistence with {want}: a bug")))
}

fn label(s: &Schedule) -> String {
    match s.fail_every {
        Some(f) => format!("commit every {}, fail every {f}", s.commit_every),
        None => format!("commit every {}", s.commit_every),
    }
}

/// The runs without persistence as one result: their median time (they run beside the
/// others, once per schedule, so that they see the same machine).
fn none_result(op: &str, times: &mut [Duration], steps: u64, state_pages: u64) -> RvmResult {
    times.sort();
    let total = times.get(times.len() / 2).copied().unwrap_or_default();
    let o = Outcome { total, steps_run: steps, state_pages, ..Outcome::default() };
    let mut r = result(op, &Schedule { commit_every: steps, fail_every: None }, &o, "none", "-");
    (r.commit_every, r.failures, r.samples) = (None, None, times.len() as u64);
    r
}

/// DGEMV on every target, with a file, and without persistence, for each schedule.
pub fn dgemv(
    stores: &mut Stores,
    targets: &[Target],
    plan: &AppPlan,
    progress: &mut Progress,
) -> Result<Vec<RvmResult>> {
    let p = &plan.dgemv;
    p.check().map_err(Error::Config)?;
    let m = dgemv::Matrix::generate(p);
    let reference = dgemv::run_plain(&m, p)?;
    let file = stores.disk.join("dgemv.state");
    let mut out = Vec::new();
    let mut nones = Vec::new();
    for s in plan.dgemv_schedules() {
        progress.point(&format!(
            "dgemv {} × {}, {} iterations, without persistence",
            p.rows, p.cols, p.iterations
        ));
        let t0 = Instant::now();
        same("dgemv without persistence", &dgemv::run_plain(&m, p)?, &reference)?;
        nones.push(t0.elapsed());
        for &t in targets {
            progress.point(&format!("dgemv on {}: {}", t.name(), label(&s)));
            let opts = stores.options(t)?;
            let (answer, o) = dgemv::run_rvm(&opts, &m, p, &s, true, &mut |_| {})?;
            same(&format!("dgemv on {} ({})", t.name(), label(&s)), &answer, &reference)?;
            out.push(result("dgemv", &s, &o, o.backend, o.tracking));
        }
        progress.point(&format!("dgemv with a file and fsync: {}", label(&s)));
        let (answer, o) = dgemv::run_file(&file, &m, p, &s, true, &mut |_| {})?;
        same(&format!("dgemv with a file ({})", label(&s)), &answer, &reference)?;
        out.push(result("dgemv", &s, &o, "file", "fsync"));
    }
    let _ = std::fs::remove_file(&file);
    out.insert(0, none_result("dgemv", &mut nones, p.iterations, p.vector_bytes() / 4096));
    Ok(out)
}

/// The k-mer program on every target and without persistence, for each commit interval.
pub fn kmer(
    stores: &mut Stores,
    targets: &[Target],
    plan: &AppPlan,
    progress: &mut Progress,
) -> Result<Vec<RvmResult>> {
    let p = &plan.kmer;
    p.check().map_err(Error::Config)?;
    let input = kmer::Input::generate(p);
    let reference = kmer::run_plain(&input, p)?;
    let mut out = Vec::new();
    let mut nones = Vec::new();
    for &k in &plan.kmer_commit_every {
        progress.point(&format!(
            "kmer: {} insertions and {} probes, without persistence",
            p.kmers(),
            p.probes
        ));
        let t0 = Instant::now();
        same("kmer without persistence", &kmer::run_plain(&input, p)?, &reference)?;
        nones.push(t0.elapsed());
        let s = Schedule { commit_every: k, fail_every: None };
        for &t in targets {
            progress.point(&format!("kmer on {}: {}", t.name(), label(&s)));
            let opts = stores.options(t)?;
            let (answer, o) = kmer::run_rvm(&opts, &input, p, &s, true, &mut |_| {})?;
            same(&format!("kmer on {} ({})", t.name(), label(&s)), &answer, &reference)?;
            out.push(result("kmer", &s, &o, o.backend, o.tracking));
        }
    }
    out.insert(0, none_result("kmer", &mut nones, p.total(), p.table_bytes() / 4096));
    Ok(out)
}
