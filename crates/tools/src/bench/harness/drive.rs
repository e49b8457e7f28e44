//! The threads of a measurement: each runs an operation until the op budget or the duration runs
//! out, and their latencies are merged into one result.

use super::kind::Kind;
use super::result::BenchResult;
use super::rng::XorShift;
use super::settings::lanes;
use crate::bench::BenchArgs;
use hdrhistogram::Histogram;
use mojim::error::{Error, Result};
use std::time::{Duration, Instant};

/// Runs `op` on every thread until the op budget or the duration runs out.
pub(crate) fn drive<S: Send>(
    a: &BenchArgs,
    kind: Kind,
    states: Vec<S>,
    op: impl Fn(&mut S, &mut XorShift) -> Result<()> + Sync,
) -> Result<BenchResult> {
    let per_thread = a.ops.div_ceil(a.threads as u64).max(1);
    let deadline = a.duration.map(Duration::from_secs_f64);
    let start_gate = std::sync::Barrier::new(a.threads);
    let t0 = std::sync::Mutex::new(None::<Instant>);
    let hists: Vec<Result<(Histogram<u64>, u64)>> = std::thread::scope(|scope| {
        let handles: Vec<_> = states
            .into_iter()
            .enumerate()
            .map(|(i, mut st)| {
                let op = &op;
                let gate = &start_gate;
                let t0 = &t0;
                scope.spawn(move || -> Result<(Histogram<u64>, u64)> {
                    let mut rng = XorShift(0x9E37_79B9_7F4A_7C15 ^ ((i as u64 + 1) * 0x1234_5678_9ABC_DEF1));
                    for _ in 0..a.warmup {
                        op(&mut st, &mut rng)?;
                    }
                    let mut h = Histogram::<u64>::new(3).expect("3 significant figures is valid");
                    gate.wait();
                    let start =
                        *t0.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert_with(Instant::now);
                    let mut n = 0u64;
                    loop {
                        let t = Instant::now();
                        op(&mut st, &mut rng)?;
                        h.record(t.elapsed().as_nanos() as u64).ok();
                        n += 1;
                        match deadline {
                            Some(d) => {
                                if n.is_multiple_of(64) && start.elapsed() >= d {
                                    break;
                                }
                            }
                            None => {
                                if n >= per_thread {
                                    break;
                                }
                            }
                        }
                    }
                    Ok((h, n))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err(Error::Config("benchmark thread panicked".into()))))
            .collect()
    });
    let wall = t0.lock().unwrap_or_else(|p| p.into_inner()).map(|t| t.elapsed()).unwrap_or_default();
    let mut all = Histogram::<u64>::new(3).expect("valid");
    let mut ops = 0;
    for r in hists {
        let (h, n) = r?;
        all.add(&h).ok();
        ops += n;
    }
    let secs = wall.as_secs_f64().max(1e-9);
    let lanes = if matches!(kind, Kind::Mode(m) if m.replicated()) || matches!(kind, Kind::Scheme(..)) {
        lanes(a)
    } else {
        0
    };
    Ok(BenchResult {
        ops,
        mean_us: all.mean() / 1000.0,
        p50_us: all.value_at_quantile(0.5) as f64 / 1000.0,
        p99_us: all.value_at_quantile(0.99) as f64 / 1000.0,
        ops_per_s: ops as f64 / secs,
        mb_per_s: ops as f64 * a.size as f64 / secs / 1e6,
        ..BenchResult::new(kind.name(), a.size, a.threads, lanes)
    })
}
