//! `mojim bench --mode failover`: how long the application is without a primary when the
//! primary's machine dies, and how long acknowledged data has a single copy when the mirror
//! dies.
//!
//! Fail-over, each round on a fresh cluster under `--dir`: three nodes on loopback. Node A runs
//! only the application (no daemon): a `mojim bench-worker` process that opens A's region file
//! as primary in mode `sync` with node M as its mirror and syncs one 4 KiB group every
//! millisecond, printing each acknowledgement with a timestamp. M (`mojim serve --backup B`)
//! feeds node B in the background. Once the worker has had [`WARM_ACKS`] groups acknowledged,
//! it is killed with SIGKILL (the primary's death). The reaction is then timed:
//!
//! - `static` coordinator: this benchmark is the operator and acts at once (`detect_ms` is 0;
//!   a human or a monitor would add its own detection time). It does what `mojim promote
//!   --addr M --peer B` does: reads both nodes' epochs, sends `promote` at epoch + 1 to M (M
//!   ends the dead primary's session, applies its log, lets B catch up, and starts a new
//!   history on its data area and stops feeding B), then `fence` at that epoch to B, and
//!   starts a new worker on M's data area with B as its mirror. The killed worker wrote the
//!   lower half of the region and the new one writes the upper half; at the end of the round
//!   every acknowledged group of the killed worker still in place is checked in M's data area.
//! - `etcd` coordinator (`[cluster] coordinator = "etcd"`, the default lease settings): a
//!   single-member etcd runs on loopback; nobody acts. The killed primary's lease expires, M's
//!   watcher claims the next epoch in etcd (naming B the mirror) and promotes itself. This
//!   benchmark polls the roles in etcd (`detect_ms`: kill → the claim) and M's status
//!   (`promote_ms`: the claim → M reports itself primary), then starts the new worker, which
//!   takes the lease as node m. The target is a total within the lease TTL + 1 s.
//!
//! `total_ms` runs from the kill to the new worker's first acknowledgement; the timestamps of
//! both processes come from the system's real-time clock, on the same machine. The operator
//! does not wait for the killed process to be torn down (a dead machine has no teardown): the
//! promotion's fence ends the dead primary's session on M.
//!
//! Window of vulnerability, each round: an in-process primary of `--region-size` in mode `sync`
//! whose whole region was just written (the worst case: every byte may be dirty in a cache)
//! loses its mirror (SIGKILL). On the loss the primary makes its whole copy persistent before
//! anything else; until then the groups the mirror had acknowledged existed only in volatile
//! caches. `PrimaryStatus::vulnerable_us` is that time. Measured with the region on `--dir`
//! (tmpfs: cache-line write-back) and on `--disk-dir` (an ordinary file system: msync).

mod node;
mod result;
mod round;
mod vulnerability;
mod worker;
mod worker_child;

use crate::bench::harness::exe;
use crate::bench::BenchArgs;
use mojim::error::{Error, Result};
use mojim_etcd::testing::{etcd_binary, DEBIAN_ETCD};
use result::summarise;
use round::FailoverRun;
use std::time::{Duration, SystemTime};
use vulnerability::vulnerable;

pub use result::{print, FailoverResults, FailoverRound, Summary, VulnerabilityRound};
pub use worker::{worker, WorkerArgs};

/// Bytes of one group of the worker.
const GROUP: u64 = 4096;
/// Acknowledged groups before the primary is killed: the worker runs steadily by then.
const WARM_ACKS: u64 = 1000;
/// Acknowledged groups of the new worker before a round ends.
const AFTER_ACKS: u64 = 200;
const SECRET: &[u8] = b"mojim-bench-secret";
/// Most time for any one step of a round (a node's start, a warm-up, a resync).
const STEP: Duration = Duration::from_secs(60);
/// How long `promote` may wait for the backups to catch up (as `mojim promote`'s default).
const DRAIN_MS: u64 = 5000;

/// Who reacts to the primary's death.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Coordinator {
    /// This benchmark is the operator: promote the mirror at once, as `mojim promote` does.
    Static,
    /// Leases in etcd: the mirror promotes itself when the primary's lease expires.
    Etcd,
}

impl Coordinator {
    pub fn name(self) -> &'static str {
        match self {
            Coordinator::Static => "static",
            Coordinator::Etcd => "etcd",
        }
    }
}

/// Options of `mojim bench --mode failover`.
#[derive(clap::Args, Clone, Debug)]
pub struct FailoverArgs {
    /// `--mode failover`: who reacts to the primary's death.
    #[arg(long, value_enum, default_value = "static")]
    pub coordinator: Coordinator,
    /// `--mode failover`: primaries killed and replaced, each on a fresh cluster.
    #[arg(long, default_value_t = 5)]
    pub rounds: usize,
}

impl Default for FailoverArgs {
    fn default() -> Self {
        FailoverArgs { coordinator: Coordinator::Static, rounds: 5 }
    }
}

/// The benchmark found fail-over misbehaving (or could not drive it).
fn failed(stage: &str, message: String) -> Error {
    Error::Io { op: format!("bench --mode failover, {stage}"), source: std::io::Error::other(message) }
}

/// Runs `--mode failover` and prints its results.
pub fn run(a: &BenchArgs) -> Result<()> {
    let results = measure(a)?;
    print(a, &results);
    Ok(())
}

/// Runs every round of both measurements.
pub fn measure(a: &BenchArgs) -> Result<FailoverResults> {
    check_args(a)?;
    let f = &a.failover;
    if f.coordinator == Coordinator::Etcd && etcd_binary().is_none() {
        return Err(Error::Config(format!(
            "--coordinator etcd runs a local etcd: no etcd binary at {DEBIAN_ETCD} or on PATH (install the Debian \
             package etcd-server)"
        )));
    }
    let exe = exe()?;
    let mut failover = Vec::new();
    let mut vulnerability = Vec::new();
    for round in 1..=f.rounds {
        say(a, &format!("round {round} of {}: the mirror's loss", f.rounds));
        for dir in [&a.dir, &a.disk_dir] {
            let v = vulnerable(a, &exe, round, dir)?;
            say(
                a,
                &format!(
                    "round {round}: {} ({}) on {}: vulnerable {:.1} ms, noticed after {:.1} ms",
                    v.data, v.flush, v.dir, v.vulnerable_ms, v.noticed_ms
                ),
            );
            vulnerability.push(v);
        }
        say(a, &format!("round {round} of {}: the primary's death ({})", f.rounds, f.coordinator.name()));
        let r = FailoverRun::start(a, &exe, round)?.run()?;
        say(
            a,
            &format!(
                "round {round}: total {:.1} ms = kill to new worker {:.1} ms (detect {:.1}, promote {:.1}, \
                 fence {:.1}) + restart {:.1} ms (open {:.1}); resync {} of {} bytes in {:.1} ms",
                r.total_ms,
                r.operator_ms,
                r.detect_ms,
                r.promote_ms,
                r.fence_ms,
                r.restart_ms,
                r.open_ms,
                r.resync_kind,
                r.resync_bytes,
                r.resync_ms
            ),
        );
        failover.push(r);
    }
    let summaries = summarise(&failover, &vulnerability);
    Ok(FailoverResults { failover, vulnerability, summaries })
}

fn check_args(a: &BenchArgs) -> Result<()> {
    if a.mode.iter().any(|m| m.trim() != "failover") {
        return Err(Error::Config(format!(
            "--mode {} mixes failover with other modes; run --mode failover on its own",
            a.mode.join(",")
        )));
    }
    if a.region_size < (1 << 20) || !a.region_size.is_multiple_of(GROUP) {
        return Err(Error::Config(format!(
            "--region-size {} must be at least 1MiB and a multiple of 4KiB for --mode failover",
            a.region_size
        )));
    }
    if a.failover.rounds == 0 {
        return Err(Error::Config("--rounds must be at least 1".into()));
    }
    if a.mirror.is_some() {
        return Err(Error::Config(
            "--mode failover starts and kills its own nodes; it cannot use --mirror".into(),
        ));
    }
    Ok(())
}

fn say(a: &BenchArgs, what: &str) {
    if !a.json {
        eprintln!("bench: {what}");
    }
}

/// Nanoseconds since the Unix epoch: comparable between processes of one machine.
fn now_ns() -> u64 {
    SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

/// Milliseconds from `from` to `to` (nanosecond timestamps), negative if the clock stepped.
fn ms(from: u64, to: u64) -> f64 {
    (to as i128 - from as i128) as f64 / 1e6
}
