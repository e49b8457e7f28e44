//! The matrix's PNG plots, one or two per experiment.

use super::summary::{distinct, thread_series};
use super::{nvmm, MatrixResults};
use crate::bench::harness::transact::{self, Strategy, TransactResult};
use crate::bench::harness::BenchResult;
use crate::plot::{self, Axis, Legend, Series};
use mojim::error::Result;
use std::path::{Path, PathBuf};

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
        files.push(draw(out, "nvmm_latency.png", |p| nvmm::plot(p, &res.nvmm))?);
    }
    if !res.transact.is_empty() {
        files.push(transact_slowdown_plot(out, &res.transact)?);
        files.push(transact_speedup_plot(out, &res.transact)?);
    }
    Ok(files)
}

/// Draws the plot `name` in `out` with `render`; returns its path.
pub(super) fn draw(out: &Path, name: &str, render: impl FnOnce(&Path) -> Result<()>) -> Result<PathBuf> {
    let p = out.join(name);
    render(&p)?;
    Ok(p)
}

/// Figs. 4 and 5: mean latency and throughput, a bar per scheme.
pub(super) fn schemes_plots(out: &Path, rs: &[BenchResult]) -> Result<[PathBuf; 2]> {
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
pub(super) fn sizes_plot(out: &Path, rs: &[BenchResult]) -> Result<PathBuf> {
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
pub(super) fn threads_plot(out: &Path, rs: &[BenchResult]) -> Result<PathBuf> {
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
pub(super) fn series_by(
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
pub(super) fn transact_slowdown_plot(out: &Path, rs: &[TransactResult]) -> Result<PathBuf> {
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
pub(super) fn transact_speedup_plot(out: &Path, rs: &[TransactResult]) -> Result<PathBuf> {
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

/// A latency plot (mean, p50, p99) over a swept setting on a log scale.
pub(super) fn sweep_plot(path: &Path, title: &str, x: &Axis, rs: &[(usize, BenchResult)]) -> Result<()> {
    let pick = |label: &str, color, v: fn(&BenchResult) -> f64| Series {
        label: label.into(),
        points: rs.iter().map(|(t, r)| (*t as f64, v(r))).collect(),
        color,
        dashed: false,
    };
    let series = [pick("mean", 0, |r| r.mean_us), pick("p50", 1, |r| r.p50_us), pick("p99", 2, |r| r.p99_us)];
    plot::lines(path, title, x, &Axis::log("latency (µs, log scale)"), &series, Legend::UpperLeft, None)
}
