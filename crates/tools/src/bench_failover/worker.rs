//! The application of a round: the hidden `mojim bench-worker`, which syncs one group per
//! interval and prints what happens, and where its groups go.

use super::{now_ns, GROUP};
use crate::bench::harness::XorShift;
use mojim::config::{Config, Mode};
use mojim::error::Result;
use mojim::primary::{Primary, PrimaryOptions};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Options of the hidden `mojim bench-worker` (started by `mojim bench --mode failover`).
#[derive(clap::Args, Clone, Debug)]
pub struct WorkerArgs {
    /// The region's configuration (secret, limits, failure policy).
    #[arg(long)]
    pub config: PathBuf,
    /// The region file to open as primary (a promoted node's data area, after a fail-over).
    #[arg(long)]
    pub region: PathBuf,
    /// The mirror's address.
    #[arg(long)]
    pub mirror: String,
    /// Microseconds from one sync point's start to the next.
    #[arg(long, default_value_t = 1000)]
    pub interval_us: u64,
    /// Write the upper half of the region instead of the lower half (group k goes to slot k
    /// modulo the half's 4 KiB slots).
    #[arg(long)]
    pub upper_half: bool,
    /// Poll for acknowledgements this many microseconds before sleeping.
    #[arg(long, default_value_t = 0)]
    pub busy_poll_us: u64,
    /// This node's name for the etcd coordinator, instead of [cluster] node.
    #[arg(long)]
    pub node: Option<String>,
}

/// The worker: opens the region as primary in mode `sync` and syncs one 4 KiB group per
/// interval until killed. It prints one line per event, each with a real-time timestamp:
/// `open NS`, `ack K NS` per acknowledged group (K counts from 1), `resync KIND SECONDS BYTES`
/// (or `resync none`, `resync failed WHY`) when the session's copy has finished, and
/// `error WHY` before it exits on an error.
pub fn worker(w: &WorkerArgs) -> Result<()> {
    let cfg = Config::load(&w.config)?;
    let mut o = PrimaryOptions::from_config(&cfg, false)?;
    o.region_path = w.region.clone();
    o.mirror = w.mirror.clone();
    o.mode = Mode::Sync;
    o.lanes = 1;
    o.busy_poll = Duration::from_micros(w.busy_poll_us);
    if let Some(n) = &w.node {
        o.node = n.clone();
    }
    let p = match Primary::open(&o) {
        Ok(p) => p,
        Err(e) => {
            println!("error open: {e}");
            return Err(e);
        }
    };
    println!("open {}", now_ns());
    let size = p.size();
    let interval = Duration::from_micros(w.interval_us);
    std::thread::scope(|s| {
        s.spawn(|| match p.wait_resync(Duration::from_secs(3600)) {
            None => println!("resync none"),
            Some(r) if r.done => println!("resync {} {} {}", r.kind.name(), r.seconds, r.total_bytes),
            Some(r) => println!("resync failed {}", r.error.unwrap_or_else(|| "did not finish".into())),
        });
        let mut next = Instant::now();
        for k in 1.. {
            let off = group_offset(k, size, w.upper_half);
            let synced = p.write(off, &group_bytes(k)).and_then(|()| p.msync(off, GROUP));
            if let Err(e) = synced {
                println!("error group {k}: {e}");
                // The resync thread may wait an hour; a worker that failed has nothing to finish.
                std::process::exit(1);
            }
            println!("ack {k} {}", now_ns());
            next = (next + interval).max(Instant::now());
            std::thread::sleep(next.saturating_duration_since(Instant::now()));
        }
    });
    Ok(())
}

/// The bytes group `k` writes: its number, then a pattern derived from it.
pub(super) fn group_bytes(k: u64) -> Vec<u8> {
    let mut rng = XorShift(k.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let mut b = vec![0u8; GROUP as usize];
    for w in b.chunks_mut(8) {
        w.copy_from_slice(&rng.next().to_le_bytes());
    }
    b[..8].copy_from_slice(&k.to_le_bytes());
    b
}

/// 4 KiB slots in each half of a region of `size` bytes.
pub(super) fn half_slots(size: u64) -> u64 {
    size / GROUP / 2
}

/// Where group `k` goes in a region of `size` bytes: the first worker of a round writes the
/// lower half, the one started after the fail-over the upper half, so that the old worker's
/// groups stay in place to be checked.
pub(super) fn group_offset(k: u64, size: u64, upper: bool) -> u64 {
    let half = half_slots(size);
    (if upper { half } else { 0 } + k % half) * GROUP
}
