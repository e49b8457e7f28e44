//! `mojim bench --mode resync`: how fast a replica that was away is brought back, measured side by
//! side in one run against the raw TCP bandwidth of the same machine:
//!
//! - `tcp`: `--region-size` bytes streamed over loopback TCP, one connection per lane, from one
//!   cache-resident buffer into a sink that only reads them: the ceiling for any copy. Measured
//!   just before and just after `full`, with the same nodes up; the two times are averaged, so a
//!   machine whose speed drifts weighs on both sides of the ratio alike.
//! - `tcp-region`: the same stream from a region-sized mapping into another (allocated before the
//!   clock starts, as the mirror's data area is), checked byte for byte: raw TCP moving a region's
//!   bytes from memory into memory, with no protocol, checksum or snapshot.
//! - `tcp-checked`: `tcp-region` with the per-byte work of a copy sent from snapshots (as resent
//!   frames are) and none of its protocol: each 256 KiB piece is read into a snapshot and sent
//!   as a Copy frame (header and CRC32C), four to a write as a copy group's are, and on the other
//!   end received into a buffer, checked, and stored with streaming stores. A copy sends
//!   straight from the region, without the snapshot, so it can be the faster of the two.
//! - `full`: a primary whose region has a history meets a new, empty mirror, which gets the whole
//!   region (`ResyncStatus::seconds`); the mirror's copy is then compared with the primary's,
//!   byte for byte.
//! - `bitmap`: the same primary (`on_mirror_loss = degrade`) loses that mirror (SIGKILL), changes
//!   `--changed` percent of the region in random 4 KiB chunks, each followed by an msync, and when
//!   the mirror is restarted on its folder the keeper resends only what the dirty bitmap recorded.
//!   The bitmap has a bit per 4 KiB here (`dirty_chunk`; the configuration's default is 64 KiB,
//!   which would resend 64 KiB for every random 4 KiB change).
//! - `log`: a mirror's backup is killed, the primary changes `--changed` percent of the region as
//!   groups, and the restarted backup catches up from the mirror's log; timed from the moment the
//!   mirror has reconnected to it until it has acknowledged everything the mirror applied.
//!
//! Every node is a `mojim serve` child on an address chosen here, so that a killed node comes
//! back where its peers look for it.

mod copy;
mod cpu;
mod log;
mod node;
mod result;
mod round;
mod stream;
#[cfg(test)]
mod tests;

use crate::bench::harness::lanes;
use crate::bench::BenchArgs;
use mojim::error::{Error, Result};
use mojim::size::format_size;
use result::{medians, SetUp, Spread};
use round::Round;
use std::time::Duration;

pub use result::{print, ResyncResult};

/// Bytes of one changed chunk, and of one bit of the primary's dirty bitmap here.
const CHUNK: u64 = 4096;
/// Changed chunks per group in `log`.
const GROUP_CHUNKS: usize = 16;
/// Bytes per store while the region is filled.
const FILL_PIECE: u64 = 1 << 20;
/// Bytes per write and read of the raw streams (`tcp`, `tcp-region`).
const STREAM_PIECE: u64 = 1 << 20;
/// Random 1 MiB windows compared besides the changed chunks after `bitmap` and `log`.
const SAMPLE_WINDOWS: u64 = 16;
const SECRET: &[u8] = b"mojim-bench-secret";
/// How often the catch-up of `log` is polled.
const POLL: Duration = Duration::from_millis(1);

/// Options of `mojim bench --mode resync`.
#[derive(clap::Args, Clone, Debug)]
pub struct ResyncArgs {
    /// `--mode resync`: percent of the region changed while a replica is away (bitmap, log).
    #[arg(long, default_value_t = 1.0)]
    pub changed: f64,
}

impl Default for ResyncArgs {
    fn default() -> Self {
        ResyncArgs { changed: 1.0 }
    }
}

/// The benchmark found the resync path misbehaving (or could not drive it).
fn failed(stage: &str, message: String) -> Error {
    Error::Io { op: format!("bench --mode resync, {stage}"), source: std::io::Error::other(message) }
}

/// Runs `--mode resync` and prints its results.
pub fn run(a: &BenchArgs) -> Result<()> {
    let rounds = rounds(a)?;
    print(&medians(&rounds), a.json);
    if !a.json && rounds.len() > 1 {
        if let Some(s) = Spread::of(&rounds, "full", "tcp", 0.8) {
            println!(
                "full/tcp per round: {:.2} to {:.2}, median {:.2}; {} of {} rounds >= 0.8",
                s.min,
                s.max,
                s.median,
                s.meeting,
                rounds.len()
            );
        }
        if let Some(s) = Spread::of(&rounds, "full-tls", "full", 0.8) {
            println!(
                "full-tls/full per round: {:.2} to {:.2}, median {:.2}; {} of {} rounds >= 0.8",
                s.min,
                s.max,
                s.median,
                s.meeting,
                rounds.len()
            );
        }
        let mut set_up: Vec<(f64, f64)> = rounds.iter().filter_map(|r| SetUp::of(r)).collect();
        if set_up.len() == rounds.len() {
            set_up.sort_by(|x, y| x.0.total_cmp(&y.0));
            let (lo, mid, hi) = (set_up[0], set_up[set_up.len() / 2], set_up[set_up.len() - 1]);
            println!(
                "(full + open)/tcp-region time per round: {:.2} to {:.2}, median {:.2} (with tcp-region's \
                 mapping of its source: {:.2} to {:.2}, median {:.2})",
                lo.0, hi.0, mid.0, lo.1, hi.1, mid.1
            );
        }
    }
    Ok(())
}

/// Runs every round and returns, per kind, the round with the median time.
pub fn measure(a: &BenchArgs) -> Result<Vec<ResyncResult>> {
    Ok(medians(&rounds(a)?))
}

/// Runs every round (`--repeat`), each kind side by side in it.
fn rounds(a: &BenchArgs) -> Result<Vec<Vec<ResyncResult>>> {
    check_args(a)?;
    let mut rounds: Vec<Vec<ResyncResult>> = Vec::new();
    for round in 0..a.repeat {
        if !a.json {
            eprintln!(
                "bench: resync of a {} region, {}% changed, {} lane(s), round {} of {}...",
                format_size(a.region_size),
                a.resync.changed,
                lanes(a),
                round + 1,
                a.repeat
            );
        }
        let results = Round::new(a, round)?.run()?;
        if !a.json {
            let each: Vec<String> = results
                .iter()
                .map(|r| format!("{} {:.3} s ({:.0} MB/s)", r.kind, r.seconds, r.mb_per_s))
                .collect();
            eprintln!("bench: round {}: {}", round + 1, each.join(", "));
        }
        rounds.push(results);
    }
    Ok(rounds)
}

fn check_args(a: &BenchArgs) -> Result<()> {
    if a.mode.iter().any(|m| m.trim() != "resync") {
        return Err(Error::Config(format!(
            "--mode {} mixes resync with other modes; run --mode resync on its own",
            a.mode.join(",")
        )));
    }
    if a.region_size < (1 << 20) || !a.region_size.is_multiple_of(CHUNK) {
        return Err(Error::Config(format!(
            "--region-size {} must be at least 1MiB and a multiple of 4KiB for --mode resync",
            a.region_size
        )));
    }
    let c = a.resync.changed;
    if !(c > 0.0 && c <= 100.0) {
        return Err(Error::Config(format!("--changed {c} must be a percentage above 0 and at most 100")));
    }
    if a.repeat == 0 {
        return Err(Error::Config("--repeat must be at least 1".into()));
    }
    if a.mirror.is_some() {
        return Err(Error::Config(
            "--mode resync starts and kills its own mirrors; it cannot use --mirror".into(),
        ));
    }
    Ok(())
}
