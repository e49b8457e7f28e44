//! The Transact engine: transactions of E epochs of W 64-byte writes, run with each strategy
//! (`no-sm`, `sm-rc`, `sm-ob`) on a session's primaries, and the ratios between strategies. It
//! is what `mojim bench --transact` ([`crate::transact`]) and the matrix's Transact experiment
//! run, and the WHISPER structures commit with its strategies.

use super::rng::XorShift;
use super::scratch::RemoveOnDrop;
use super::session::Session;
use crate::bench::BenchArgs;
use hdrhistogram::Histogram;
use mojim::error::{Error, Result};
use mojim::primary::Primary;
use mojim::{Mode, Range};
use serde::Serialize;
use std::time::Instant;

/// Bytes per write: one cache line.
pub const LINE: u64 = 64;
/// Most writes per epoch (one group; well under the default `max_ranges`).
pub const MAX_WRITES: u32 = 1024;
/// Most epochs per transaction.
pub const MAX_EPOCHS: u32 = 1 << 16;

/// Options of `mojim bench --transact` (also used by `--matrix`). `Default` is "not asked for",
/// with no epochs or writes: callers that run Transact take clap's defaults.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct TransactArgs {
    /// Run the Transact microbenchmark instead of --mode: transactions of --epochs epochs of
    /// --writes 64-byte writes, with strategies no-sm, sm-rc and sm-ob side by side.
    #[arg(long, conflicts_with = "matrix")]
    pub transact: bool,
    /// Epochs per transaction (Transact's E), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8,16,32,64,128,256")]
    pub epochs: Vec<u32>,
    /// Writes per epoch (Transact's W), comma-separated; each epoch's writes are one group.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8")]
    pub writes: Vec<u32>,
    /// Transactions measured per epochs × writes × strategy and round (a tenth more, at least
    /// one, run first as warm-up).
    #[arg(long, default_value_t = 100)]
    pub transactions: u64,
}

/// What a fence costs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strategy {
    /// Local persistence only: the baseline.
    NoSm,
    /// A durable round trip to the mirror at every fence.
    SmRc,
    /// Ordered pipelining: every fence queues in order, one durability wait at the end.
    SmOb,
}

impl Strategy {
    pub const ALL: [Strategy; 3] = [Strategy::NoSm, Strategy::SmRc, Strategy::SmOb];

    pub fn name(self) -> &'static str {
        match self {
            Strategy::NoSm => "no-sm",
            Strategy::SmRc => "sm-rc",
            Strategy::SmOb => "sm-ob",
        }
    }

    pub fn mode(self) -> Mode {
        match self {
            Strategy::NoSm => Mode::Unreplicated,
            Strategy::SmRc | Strategy::SmOb => Mode::Sync,
        }
    }
}

/// One measured (epochs, writes, strategy).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TransactResult {
    pub strategy: String,
    pub epochs: u32,
    pub writes: u32,
    pub transactions: u64,
    pub mean_us: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    /// `mean_us` over `no-sm`'s `mean_us` at the same epochs and writes.
    pub slowdown: f64,
}

/// Checks the options before anything is started.
pub fn check_args(t: &TransactArgs, region_size: u64) -> Result<()> {
    if t.epochs.is_empty() || t.epochs.iter().any(|&e| e == 0 || e > MAX_EPOCHS) {
        return Err(Error::Config(format!(
            "--epochs {:?}: each must be between 1 and {MAX_EPOCHS}",
            t.epochs
        )));
    }
    if t.writes.is_empty() || t.writes.iter().any(|&w| w == 0 || w > MAX_WRITES) {
        return Err(Error::Config(format!(
            "--writes {:?}: each must be between 1 and {MAX_WRITES}",
            t.writes
        )));
    }
    if t.transactions == 0 {
        return Err(Error::Config("--transactions must be at least 1".into()));
    }
    if region_size < LINE {
        return Err(Error::Config(format!("--region-size {region_size} holds no {LINE}-byte line")));
    }
    Ok(())
}

/// The primaries Transact drives: one in sync mode on the session's region (for `sm-rc` and
/// `sm-ob`), and one unreplicated (for `no-sm`) on a region file of its own beside it (a region
/// has one primary at a time), opened once.
pub struct Transact {
    local: Primary,
    replicated: Primary,
    lines: u64,
    rng: XorShift,
    /// Removes the unreplicated primary's region file once it is closed.
    _local_file: RemoveOnDrop,
}

impl Transact {
    /// Opens both primaries and touches every page of both mappings, so that no measured
    /// write takes a page fault.
    pub fn open(session: &Session, a: &BenchArgs) -> Result<Transact> {
        let replicated = session.open_primary(a, Mode::Sync)?;
        let path = session.region_path().with_extension("no-sm.mojim");
        let local_file = RemoveOnDrop(path.clone());
        let local = session.open_local_primary(a, &path, replicated.size())?;
        for p in [&local, &replicated] {
            let mut page = 0;
            while page < p.size() {
                p.write(page, &[0])?;
                page += 4096;
            }
        }
        let lines = local.size() / LINE;
        Ok(Transact {
            local,
            replicated,
            lines,
            rng: XorShift(0x5DEE_CE66_D1CE_4E5B),
            _local_file: local_file,
        })
    }

    /// Measures every strategy at `epochs` × `writes`: `a.repeat` interleaved rounds of
    /// `transactions` transactions each, and for each strategy the round with the median mean.
    pub fn measure(&mut self, a: &BenchArgs, epochs: u32, writes: u32) -> Result<Vec<TransactResult>> {
        let n = a.transact.transactions;
        let repeat = a.repeat.max(1);
        let mut ranges = vec![Range::new(0, 0); writes as usize];
        let mut rounds: Vec<Vec<TransactResult>> = vec![Vec::new(); Strategy::ALL.len()];
        for _ in 0..repeat {
            for (i, s) in Strategy::ALL.into_iter().enumerate() {
                let mut h = Histogram::<u64>::new(3).expect("3 significant figures is valid");
                self.transactions(s, epochs, &mut ranges, n.div_ceil(10), None)?;
                self.transactions(s, epochs, &mut ranges, n, Some(&mut h))?;
                rounds[i].push(TransactResult {
                    strategy: s.name().into(),
                    epochs,
                    writes,
                    transactions: n,
                    mean_us: h.mean() / 1000.0,
                    p50_us: h.value_at_quantile(0.5) as f64 / 1000.0,
                    p99_us: h.value_at_quantile(0.99) as f64 / 1000.0,
                    slowdown: 0.0,
                });
            }
        }
        let mut out: Vec<TransactResult> = rounds
            .into_iter()
            .map(|mut rs| {
                rs.sort_by(|x, y| x.mean_us.total_cmp(&y.mean_us));
                rs.swap_remove(rs.len() / 2)
            })
            .collect();
        let base = out[0].mean_us.max(1e-9);
        assert_eq!(out[0].strategy, Strategy::NoSm.name(), "no-sm is measured first");
        for r in &mut out {
            r.slowdown = r.mean_us / base;
        }
        Ok(out)
    }

    /// Runs `n` transactions of strategy `s`, recording each one's latency in `h` if given.
    fn transactions(
        &mut self,
        s: Strategy,
        epochs: u32,
        ranges: &mut [Range],
        n: u64,
        mut h: Option<&mut Histogram<u64>>,
    ) -> Result<()> {
        let p = match s {
            Strategy::NoSm => &self.local,
            Strategy::SmRc | Strategy::SmOb => &self.replicated,
        };
        let mut line = [0u8; LINE as usize];
        for tx in 0..n {
            line[..8].copy_from_slice(&tx.to_le_bytes());
            let start = Instant::now();
            let mut last = None;
            for _ in 0..epochs {
                for r in ranges.iter_mut() {
                    let off = (self.rng.next() % self.lines) * LINE;
                    p.write(off, &line)?;
                    *r = Range::new(off, LINE);
                }
                match s {
                    Strategy::SmRc => p.gmsync(ranges)?,
                    // no-sm: locally persistent on return (the ticket's wait is a no-op).
                    Strategy::NoSm | Strategy::SmOb => last = Some(p.persist(ranges)?),
                }
            }
            if let Some(t) = last {
                p.wait(t)?;
            }
            if let Some(h) = h.as_deref_mut() {
                h.record(start.elapsed().as_nanos() as u64).ok();
            }
        }
        Ok(())
    }

    /// Waits for everything sent and closes both primaries.
    pub fn close(self) -> Result<()> {
        self.replicated.close()?;
        self.local.close()
    }
}

/// `sm-rc` mean over `sm-ob` mean at each (epochs, writes) where both were measured.
pub fn speedups(results: &[TransactResult]) -> Vec<(u32, u32, f64)> {
    let find = |s: Strategy, e: u32, w: u32| {
        results.iter().find(|r| r.strategy == s.name() && r.epochs == e && r.writes == w)
    };
    let mut out = Vec::new();
    for r in results.iter().filter(|r| r.strategy == Strategy::SmOb.name()) {
        if let Some(rc) = find(Strategy::SmRc, r.epochs, r.writes) {
            out.push((r.epochs, r.writes, rc.mean_us / r.mean_us.max(1e-9)));
        }
    }
    out
}

/// The smallest `sm-rc`/`sm-ob` speedup at 1 write per epoch and at least 8 epochs (the
/// target: ≥ 3×), with the epochs where it was measured.
pub fn key_speedup(results: &[TransactResult]) -> Option<(u32, f64)> {
    speedups(results)
        .into_iter()
        .filter(|&(e, w, _)| w == 1 && e >= 8)
        .map(|(e, _, s)| (e, s))
        .min_by(|x, y| x.1.total_cmp(&y.1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(s: Strategy, e: u32, w: u32, mean: f64) -> TransactResult {
        TransactResult {
            strategy: s.name().into(),
            epochs: e,
            writes: w,
            transactions: 10,
            mean_us: mean,
            p50_us: mean,
            p99_us: mean,
            slowdown: 1.0,
        }
    }

    #[test]
    fn the_key_speedup_is_the_lowest_at_one_write_and_eight_epochs_or_more() {
        let rs = vec![
            r(Strategy::SmRc, 4, 1, 400.0),
            r(Strategy::SmOb, 4, 1, 200.0),
            r(Strategy::SmRc, 8, 1, 800.0),
            r(Strategy::SmOb, 8, 1, 200.0),
            r(Strategy::SmRc, 16, 1, 1600.0),
            r(Strategy::SmOb, 16, 1, 320.0),
            r(Strategy::SmRc, 16, 2, 1600.0),
            r(Strategy::SmOb, 16, 2, 1600.0),
        ];
        assert_eq!(speedups(&rs).len(), 4);
        assert_eq!(key_speedup(&rs), Some((8, 4.0)));
        assert_eq!(key_speedup(&rs[..2]), None);
    }

    #[test]
    fn bad_options_are_refused_with_their_values() {
        let t = |e: Vec<u32>, w: Vec<u32>, n| TransactArgs {
            transact: true,
            epochs: e,
            writes: w,
            transactions: n,
        };
        assert!(check_args(&t(vec![1, 2], vec![1], 5), 4096).is_ok());
        let e = check_args(&t(vec![0], vec![1], 5), 4096).unwrap_err().to_string();
        assert!(e.contains("--epochs [0]"), "{e}");
        assert!(check_args(&t(vec![1], vec![MAX_WRITES + 1], 5), 4096).is_err());
        assert!(check_args(&t(vec![1], vec![1], 0), 4096).is_err());
        assert!(check_args(&t(vec![1], vec![1], 1), 32).is_err());
    }
}
