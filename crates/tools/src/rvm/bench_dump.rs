//! The whole-state dump baseline of `mojim bench --rvm` (backend `dump`), in the place of the
//! report's BLCR: a process checkpointer that cannot tell which pages changed must at least
//! write every allocated page to a file and make it durable, and a restart must read them all
//! back. Here the state is the same as the Mojim and Redis cases': a block of 10 000 pages and
//! the 16 pages of a meta block, in ordinary memory.
//!
//! Commit: the same stores as [`super::bench_commit`]'s cases, then the whole state written to
//! a file on `--disk-dir` and `fsync`ed. Recovery: the file, as the same commit left it, read
//! back into fresh memory. The file is removed at the end of each part.

use super::bench::{Progress, RvmResult, Stores};
use super::bench_commit::{BLOCK_PAGES, CASES, META_PAGES, RECOVER_PAGES};
use mojim::error::{Error, Result};
use std::fs::File;
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::{Duration, Instant};

const PAGE: usize = 4096;
const WARMUP: usize = 1;
const MIN_SAMPLES: usize = 5;
const BUDGET: Duration = Duration::from_secs(3);

/// Writes `state` whole to `path` and makes it durable.
fn dump(path: &Path, state: &[u8]) -> Result<()> {
    let f = File::create(path).map_err(Error::io(format!("create {}", path.display())))?;
    f.write_all_at(state, 0).map_err(Error::io(format!("write {}", path.display())))?;
    f.sync_all().map_err(Error::io(format!("fsync {}", path.display())))
}

/// Commit latency by pages written, with the whole state dumped at each commit.
pub fn commits(stores: &Stores, most: usize, progress: &mut Progress) -> Result<Vec<RvmResult>> {
    progress.point("commit latency of a whole-state dump (write every allocated page, fsync)");
    let path = stores.disk.join("dump.state");
    let mut state = vec![0u8; (BLOCK_PAGES + META_PAGES) * PAGE];
    let mut value = 0u64;
    let mut out = Vec::new();
    for case in &CASES {
        let mut times = Vec::new();
        let t0 = Instant::now();
        for i in 0usize.. {
            let measured = i.saturating_sub(WARMUP);
            if measured >= most || (measured >= MIN_SAMPLES && t0.elapsed() > BUDGET) {
                break;
            }
            for k in 0..case.pages {
                value += 1;
                let at = (META_PAGES + k * case.stride) * PAGE;
                state[at..at + 8].copy_from_slice(&value.to_le_bytes());
            }
            let tc = Instant::now();
            dump(&path, &state)?;
            if i >= WARMUP {
                times.push(tc.elapsed());
            }
        }
        let mut r = RvmResult::timed("dump", "none", "commit", case.pattern, &times);
        r.pages = case.pages as u64;
        r.sent_pages = (BLOCK_PAGES + META_PAGES) as u64;
        out.push(r);
    }
    std::fs::remove_file(&path).map_err(Error::io(format!("remove {}", path.display())))?;
    Ok(out)
}

/// Recovery time by pages in use: the dump read back whole.
pub fn recoveries(stores: &Stores, samples: usize, progress: &mut Progress) -> Result<Vec<RvmResult>> {
    progress.point("recovery time of a whole-state dump (read every page back)");
    let path = stores.disk.join("dump.state");
    let mut out = Vec::new();
    for pages in RECOVER_PAGES {
        let len = (pages + META_PAGES) * PAGE;
        let mut state = vec![0u8; len];
        for k in 0..pages {
            let at = (META_PAGES + k) * PAGE;
            state[at..at + 8].copy_from_slice(&(k as u64 + 1).to_le_bytes());
        }
        dump(&path, &state)?;
        drop(state);
        let mut times = Vec::new();
        for _ in 0..samples {
            let t0 = Instant::now();
            let mut back = Vec::with_capacity(len);
            File::open(&path)
                .and_then(|mut f| f.read_to_end(&mut back))
                .map_err(Error::io(format!("read {}", path.display())))?;
            times.push(t0.elapsed());
            // The last page's first word: its number (the meta block's pages hold zeros).
            let last = len - PAGE;
            let found =
                back.get(last..last + 8).map_or(u64::MAX, |w| u64::from_le_bytes(w.try_into().expect("8")));
            if back.len() != len || found != pages as u64 {
                return Err(Error::Config(format!(
                    "the dump of {pages} pages read back {} bytes, its last page holding {found}",
                    back.len()
                )));
            }
        }
        let mut r = RvmResult::timed("dump", "none", "recover", "one-block", &times);
        r.pages = (pages + META_PAGES) as u64;
        out.push(r);
    }
    std::fs::remove_file(&path).map_err(Error::io(format!("remove {}", path.display())))?;
    Ok(out)
}
