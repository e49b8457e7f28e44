//! `mojim bench --c-api`: what the C layer costs. On one primary per mode, each thread syncs
//! random `--size`-byte ranges, taking turns between the Rust API (`Primary::msync`) and the
//! exported C functions (`mojim_msync` by pointer, `mojim_msync_at` by offset, called as a C
//! program calls them), so the three see the same mirror, lanes and machine at the same time.
//! It reports each one's latency and the C layer's cost: the difference from the Rust call.

use crate::bench::harness::{Session, XorShift};
use crate::bench::BenchArgs;
use hdrhistogram::Histogram;
use mojim::config::Mode;
use mojim::error::{Error, Result};
use mojim_ffi::{Handle, MojimError};
use serde::Serialize;
use std::time::Instant;

/// The calls compared, in the order they take turns.
const APIS: [&str; 3] = ["rust msync", "c mojim_msync", "c mojim_msync_at"];

/// One call's latency in one mode.
#[derive(Clone, Debug, Serialize)]
pub struct CApiResult {
    pub mode: String,
    pub api: String,
    pub size: u64,
    pub threads: usize,
    pub ops: u64,
    pub mean_us: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    /// This call's mean less the Rust call's, in nanoseconds: what the C layer adds.
    pub over_rust_mean_ns: f64,
    /// The same for the medians.
    pub over_rust_p50_ns: f64,
    /// The standard error of `over_rust_mean_ns`, in nanoseconds: how much of it is noise.
    pub over_rust_mean_err_ns: f64,
}

/// Runs the comparison for every mode of `--mode` and prints it.
pub fn run(a: &BenchArgs) -> Result<()> {
    let modes = a
        .mode
        .iter()
        .map(|m| m.trim().parse::<Mode>().map_err(|e| Error::Config(format!("--mode with --c-api: {e}"))))
        .collect::<Result<Vec<_>>>()?;
    if a.threads == 0 || a.threads > 256 || a.size == 0 || a.size * a.threads as u64 > a.region_size {
        return Err(Error::Config(format!(
            "--threads {} must be 1 to 256 and --size {} times --threads must fit in --region-size {}",
            a.threads, a.size, a.region_size
        )));
    }
    if a.repeat != 1 || a.duration.is_some() {
        return Err(Error::Config(
            "--repeat and --duration do not apply to --c-api: its calls take turns within one run of \
             --ops sync points (give more --ops for a steadier result)"
                .into(),
        ));
    }
    let session = Session::start(a)?;
    let mut results = Vec::new();
    for mode in modes {
        if !a.json {
            eprintln!("bench: c-api, {} ({} B, {} threads)...", mode.name(), a.size, a.threads);
        }
        results.extend(measure(a, &session, mode)?);
    }
    print(&results, a.json);
    Ok(())
}

/// Measures the three calls, taking turns, on one primary in `mode`.
fn measure(a: &BenchArgs, session: &Session, mode: Mode) -> Result<Vec<CApiResult>> {
    let primary = session.open_primary(a, mode)?;
    let handle = Handle::new(primary, mojim::Limits::default().max_ranges);
    let p = handle.primary();
    let base = p.as_ptr() as usize;
    let part = p.size() / a.threads as u64;
    let slots = (part / a.size).max(1);
    let per_thread = a.ops.div_ceil(a.threads as u64).max(1);
    let hists: Vec<Result<Vec<Histogram<u64>>>> = std::thread::scope(|scope| {
        let handle = &handle;
        let threads: Vec<_> = (0..a.threads as u64)
            .map(|t| {
                scope.spawn(move || -> Result<Vec<Histogram<u64>>> {
                    let p = handle.primary();
                    let mut rng = XorShift(0x9E37_79B9_7F4A_7C15 ^ ((t + 1) * 0x1234_5678_9ABC_DEF1));
                    let mut hists: Vec<Histogram<u64>> = APIS
                        .iter()
                        .map(|_| Histogram::new(3).expect("3 significant figures is valid"))
                        .collect();
                    for i in 0..a.warmup * APIS.len() as u64 + per_thread {
                        let off = t * part + (rng.next() % slots) * a.size;
                        let stamp = i.to_le_bytes();
                        p.write(off, &stamp[..stamp.len().min(a.size as usize)])?;
                        let api = (i % APIS.len() as u64) as usize;
                        let t0 = Instant::now();
                        let rc = match api {
                            0 => p.msync(off, a.size).map(|()| 0),
                            1 => Ok(handle.msync((base + off as usize) as *const u8, a.size as usize)),
                            _ => Ok(handle.msync_at(off, a.size)),
                        }?;
                        let ns = t0.elapsed().as_nanos() as u64;
                        if rc != 0 {
                            return Err(Error::Config(format!(
                                "{} returned {} ({}): {}",
                                APIS[api],
                                rc,
                                c_name(rc),
                                Handle::last_error()
                            )));
                        }
                        if i >= a.warmup * APIS.len() as u64 {
                            hists[api].record(ns).ok();
                        }
                    }
                    Ok(hists)
                })
            })
            .collect();
        threads
            .into_iter()
            .map(|t| t.join().unwrap_or_else(|_| Err(Error::Config("benchmark thread panicked".into()))))
            .collect()
    });
    let mut all: Vec<Histogram<u64>> = APIS.iter().map(|_| Histogram::new(3).expect("valid")).collect();
    for h in hists {
        for (sum, one) in all.iter_mut().zip(h?) {
            sum.add(&one).ok();
        }
    }
    let rc = handle.close();
    if rc != 0 {
        return Err(Error::Config(format!("mojim_close returned {rc}: {}", Handle::last_error())));
    }
    let us = |ns: f64| ns / 1000.0;
    let (rust_mean, rust_p50) = (all[0].mean(), all[0].value_at_quantile(0.5) as f64);
    let sem2 = |h: &Histogram<u64>| h.stdev().powi(2) / h.len().max(1) as f64;
    Ok(APIS
        .iter()
        .zip(&all)
        .map(|(api, h)| CApiResult {
            mode: mode.name().into(),
            api: api.to_string(),
            size: a.size,
            threads: a.threads,
            ops: h.len(),
            mean_us: us(h.mean()),
            p50_us: us(h.value_at_quantile(0.5) as f64),
            p99_us: us(h.value_at_quantile(0.99) as f64),
            over_rust_mean_ns: h.mean() - rust_mean,
            over_rust_p50_ns: h.value_at_quantile(0.5) as f64 - rust_p50,
            over_rust_mean_err_ns: if std::ptr::eq(h, &all[0]) {
                0.0
            } else {
                (sem2(h) + sem2(&all[0])).sqrt()
            },
        })
        .collect())
}

fn c_name(rc: i32) -> String {
    MojimError::from_code(rc).map_or_else(|| format!("code {rc}"), |e| format!("{e:?}"))
}

/// Prints the results as a table, or as JSON lines.
pub fn print(results: &[CApiResult], json: bool) {
    if json {
        for r in results {
            println!("{}", serde_json::to_string(r).unwrap_or_default());
        }
        return;
    }
    println!(
        "{:<13} {:<17} {:>6} {:>7} {:>9} {:>9} {:>9} {:>9} {:>12} {:>14}",
        "mode",
        "api",
        "size",
        "threads",
        "ops",
        "mean_us",
        "p50_us",
        "p99_us",
        "c-rust_p50_ns",
        "c-rust_mean_ns"
    );
    for r in results {
        println!(
            "{:<13} {:<17} {:>6} {:>7} {:>9} {:>9.3} {:>9.3} {:>9.3} {:>12.0} {:>9.0} ± {:<4.0}",
            r.mode,
            r.api,
            r.size,
            r.threads,
            r.ops,
            r.mean_us,
            r.p50_us,
            r.p99_us,
            r.over_rust_p50_ns,
            r.over_rust_mean_ns,
            r.over_rust_mean_err_ns
        );
    }
    // Medians: a round trip's jitter moves means by more than the layer costs.
    let worst = results.iter().map(|r| r.over_rust_p50_ns).fold(f64::MIN, f64::max);
    println!(
        "the C layer adds at most {worst:.0} ns per call at the median ({} the 1 µs goal)",
        if worst < 1000.0 { "within" } else { "OVER" }
    );
}
