//! The steps of a matrix run and their weights, and the options checked before anything starts.

use super::{
    nvmm, Experiment, MatrixArgs, DISK_MODE, LANES, SCHEMES, SIZES, SIZE_MODES, THREAD_REFERENCE_MODES,
};
use crate::bench::harness::transact::{self, Strategy, TransactArgs};
use crate::bench::BenchArgs;
use crate::plot;
use mojim::error::{Error, Result};

/// One unit of work: what it measures; its weight on the progress bar is the modes it runs.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Step {
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
    pub(super) fn label(&self) -> String {
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

    pub(super) fn weight(&self) -> u64 {
        match self {
            Step::Schemes => SCHEMES.len() as u64,
            Step::Size(_) => SIZE_MODES.len() as u64,
            Step::Threads { lanes: Some(_), .. } | Step::Checkpoint(_) | Step::Secondary(_) => 1,
            Step::Threads { lanes: None, .. } => THREAD_REFERENCE_MODES.len() as u64,
            Step::Nvmm(_) => (nvmm::NVMM_SERIES.len() * nvmm::NVMM_SIZES.len()) as u64,
            Step::Transact { .. } => Strategy::ALL.len() as u64,
        }
    }
}

pub(super) fn plan(m: &MatrixArgs, t: &TransactArgs, experiments: &[Experiment]) -> Vec<Step> {
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

pub(super) fn check(a: &BenchArgs, experiments: &[Experiment]) -> Result<()> {
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
pub(super) fn point_args(a: &BenchArgs) -> BenchArgs {
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
pub(super) fn session_modes(experiments: &[Experiment]) -> Vec<String> {
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
