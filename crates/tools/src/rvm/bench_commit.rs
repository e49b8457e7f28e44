//! The microbenchmarks of `mojim bench --rvm` (the report's §3.1): the latency of a commit by
//! pages written since the last one, and the time of an open that recovers a given number of
//! pages.
//!
//! Commit: one block of 10 000 pages; before each commit, one word is stored into each page of
//! the case (contiguous from the block's start, or every tenth page for `scattered`), a new
//! value each time, so every commit sends those pages and the meta block's. Three commits
//! warm up; then up to `--rvm-commits` are measured, fewer once a case has taken 3 s (at least
//! 10).
//!
//! Recovery: a memory holding nothing but its meta block, then 256 and 10 000 pages in one
//! block, each closed and opened `--rvm-recoveries` times; an open maps the memory back and
//! reads every block in use, and is checked to find the last value stored.

use super::bench::{Progress, RvmBenchArgs, RvmResult, Stores, Target};
use super::mem;
use super::{rvm_error, state_error};
use mojim::error::{Error, Result};
use mojim_rvm::{Rvm, RvmOptions};
use std::time::{Duration, Instant};

/// Pages of the commit benchmark's block.
pub const BLOCK_PAGES: usize = 10_000;
/// Bytes of recoverable memory `part` (`commit` or `recovery`) needs: its blocks, the meta
/// block and a slab.
pub fn bytes(part: &str) -> u64 {
    let pages = if part == "commit" { BLOCK_PAGES } else { RECOVER_PAGES.iter().sum() };
    (pages as u64 + 128) * PAGE as u64
}

const PAGE: usize = 4096;
/// Pages of the meta block, sent with every commit and read by every recovery.
pub const META_PAGES: usize = 16;
const WORDS_PER_PAGE: usize = PAGE / 8;
const WARMUP: usize = 3;
const MIN_SAMPLES: usize = 10;
const BUDGET: Duration = Duration::from_secs(3);

/// A commit case: `pages` pages written, one every `stride`.
pub struct Case {
    pub pattern: &'static str,
    pub pages: usize,
    pub stride: usize,
}

pub const CASES: [Case; 5] = [
    Case { pattern: "contiguous", pages: 1, stride: 1 },
    Case { pattern: "contiguous", pages: 16, stride: 1 },
    Case { pattern: "contiguous", pages: 256, stride: 1 },
    Case { pattern: "contiguous", pages: BLOCK_PAGES, stride: 1 },
    Case { pattern: "scattered", pages: 1000, stride: 10 },
];

/// Pages of the blocks whose recovery is timed (0: the meta block alone).
pub const RECOVER_PAGES: [usize; 3] = [0, 256, BLOCK_PAGES];

/// Commit latency by pages written, per target.
pub fn commits(
    stores: &mut Stores,
    targets: &[Target],
    a: &RvmBenchArgs,
    progress: &mut Progress,
) -> Result<Vec<RvmResult>> {
    let mut out = Vec::new();
    for &t in targets {
        progress.point(&format!(
            "commit latency on {}: 1, 16, 256, 10000 contiguous, 1000 scattered pages",
            t.name()
        ));
        let opts = stores.options(t)?;
        out.extend(commit_cases(&opts, a.rvm_commits as usize)?);
    }
    Ok(out)
}

fn commit_cases(opts: &RvmOptions, most: usize) -> Result<Vec<RvmResult>> {
    let rvm = Rvm::open(opts).map_err(rvm_error)?;
    super::discard(&rvm)?;
    let block = rvm.alloc(BLOCK_PAGES * PAGE).map_err(rvm_error)?;
    rvm.txn_commit().map_err(rvm_error)?;
    let status = rvm.status();
    let (backend, tracking) = (status.backend, status.tracking);
    let cells = mem::cells::<u64>(&rvm, block, BLOCK_PAGES * WORDS_PER_PAGE).map_err(state_error)?;
    let mut value = 0u64;
    let mut out = Vec::new();
    for case in &CASES {
        let mut times = Vec::new();
        let mut sent = 0;
        let t0 = Instant::now();
        for i in 0usize.. {
            let measured = i.saturating_sub(WARMUP);
            if measured >= most || (measured >= MIN_SAMPLES && t0.elapsed() > BUDGET) {
                break;
            }
            for k in 0..case.pages {
                value += 1;
                cells.set(k * case.stride * WORDS_PER_PAGE, value);
            }
            let tc = Instant::now();
            rvm.txn_commit().map_err(rvm_error)?;
            let took = tc.elapsed();
            let s = rvm.status();
            if s.last_commit_pages < case.pages as u64 {
                return Err(Error::Config(format!(
                    "a commit after writing {} pages sent {}: the {tracking} tracker lost writes",
                    case.pages, s.last_commit_pages
                )));
            }
            if i >= WARMUP {
                times.push(took);
                sent = s.last_commit_pages;
            }
        }
        let mut r = RvmResult::timed(backend, tracking, "commit", case.pattern, &times);
        r.pages = case.pages as u64;
        r.sent_pages = sent;
        out.push(r);
    }
    rvm.free(block).map_err(rvm_error)?;
    rvm.txn_commit().map_err(rvm_error)?;
    rvm.close().map_err(rvm_error)?;
    Ok(out)
}

/// Recovery time by pages in use, per target.
pub fn recoveries(
    stores: &mut Stores,
    targets: &[Target],
    a: &RvmBenchArgs,
    progress: &mut Progress,
) -> Result<Vec<RvmResult>> {
    let mut out = Vec::new();
    for &t in targets {
        progress.point(&format!("recovery time on {}: the meta block, 256 and 10000 pages", t.name()));
        let opts = stores.options(t)?;
        for pages in RECOVER_PAGES {
            out.push(recover_case(&opts, pages, a.rvm_recoveries as usize)?);
        }
    }
    Ok(out)
}

fn recover_case(opts: &RvmOptions, pages: usize, samples: usize) -> Result<RvmResult> {
    // The state: `pages` pages in one block, each with its number plus one in its first word.
    let rvm = Rvm::open(opts).map_err(rvm_error)?;
    super::discard(&rvm)?;
    let block = if pages > 0 {
        let b = rvm.alloc(pages * PAGE).map_err(rvm_error)?;
        let cells = mem::cells::<u64>(&rvm, b, pages * WORDS_PER_PAGE).map_err(state_error)?;
        for k in 0..pages {
            cells.set(k * WORDS_PER_PAGE, k as u64 + 1);
        }
        Some(b)
    } else {
        None
    };
    rvm.txn_commit().map_err(rvm_error)?;
    rvm.close().map_err(rvm_error)?;
    let mut times = Vec::new();
    let mut recovered = 0;
    let mut names = ("", "");
    for _ in 0..samples {
        let t0 = Instant::now();
        let rvm = Rvm::open(opts).map_err(rvm_error)?;
        times.push(t0.elapsed());
        let s = rvm.status();
        names = (s.backend, s.tracking);
        recovered = s.recovery.as_ref().map_or(0, |r| r.bytes) / PAGE as u64;
        if let Some(b) = block {
            let cells = mem::cells::<u64>(&rvm, b, pages * WORDS_PER_PAGE).map_err(state_error)?;
            let last = cells.get((pages - 1) * WORDS_PER_PAGE);
            if last != pages as u64 {
                return Err(Error::Config(format!(
                    "recovery found {last} in the last page of {pages}, not {pages}: the commit was lost"
                )));
            }
        }
        rvm.close().map_err(rvm_error)?;
    }
    if let Some(b) = block {
        let rvm = Rvm::open(opts).map_err(rvm_error)?;
        rvm.free(b).map_err(rvm_error)?;
        rvm.txn_commit().map_err(rvm_error)?;
        rvm.close().map_err(rvm_error)?;
    }
    let mut r = RvmResult::timed(names.0, names.1, "recover", "one-block", &times);
    r.pages = recovered;
    Ok(r)
}
