//! `mojim bench`: the paper's microbenchmark. Threads persist random `size`-byte ranges of a
//! region and the latency of each sync point is recorded. Several modes run side by side in one
//! invocation (`--mode sync,tcp-rtt,unreplicated`), so that ratios come from one run on the same
//! machine at the same time.
//!
//! This file holds the command's options and picks the benchmark a run is; what several
//! benchmarks share (sessions, the modes' measurement, threads, results, settings) is in
//! [`harness`], which every benchmark uses and which uses none of them.

pub mod harness;

use crate::cluster::Topology;
use harness::{measure, measure_side_by_side, on_off_settings, print, tls_settings, transports};
use mojim::config::NvmmModel;
use mojim::error::{Error, Result};
use mojim::size::parse_size;
use std::path::PathBuf;

pub use harness::echo_server;

/// Options of `mojim bench`.
#[derive(clap::Args, Clone, Debug)]
pub struct BenchArgs {
    /// Modes to run, comma-separated, one after another in this run: unreplicated, async,
    /// sync, sync-flush, sync-disk, tcp-rtt (a raw ping-pong of the same size over TCP, no
    /// protocol), and the schemes sync-backup (sync with backups fed in the background),
    /// sync-backup-slow (the same over rate-limited backup links), chain and broadcast, each on a
    /// cluster of its own; or, on its own, resync (how fast a replica that was away is brought
    /// back: tcp baselines, full copy, bitmap, log catch-up); or, on its own, failover (the
    /// primary killed and replaced on the promoted mirror; the window of vulnerability).
    #[arg(long, default_value = "sync", value_delimiter = ',')]
    pub mode: Vec<String>,
    /// Bytes per sync point.
    #[arg(long, default_value = "4096", value_parser = parse_size)]
    pub size: u64,
    /// Bytes in the benchmark region (the paper used 4 GiB).
    #[arg(long, default_value = "1GiB", value_parser = parse_size)]
    pub region_size: u64,
    /// Application threads, each on its own part of the region.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Lanes (connections to the mirror); default: one per thread.
    #[arg(long)]
    pub lanes: Option<u16>,
    /// Sync points per mode, over all threads.
    #[arg(long, default_value_t = 20000)]
    pub ops: u64,
    /// Run each mode for this many seconds instead of --ops.
    #[arg(long)]
    pub duration: Option<f64>,
    /// Sync points per thread before measuring.
    #[arg(long, default_value_t = 500)]
    pub warmup: u64,
    /// Use this running mirror instead of starting one (needs --config for its region and secret).
    #[arg(long, requires = "config")]
    pub mirror: Option<String>,
    /// Configuration of the region to use with --mirror.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Run `unreplicated` on a region file at this path on an ordinary disk (msync(2) to the
    /// disk): the paper's S-unreplicated comparison. Reported as mode `unreplicated-disk`.
    #[arg(long)]
    pub disk_file: Option<PathBuf>,
    /// Folder for the benchmark's region and mirror files (memory-backed by default).
    #[arg(long, default_value = "/dev/shm")]
    pub dir: PathBuf,
    /// Folder on a disk for the `sync-disk` mirror's data area (its logs stay in --dir).
    #[arg(long, default_value = "/var/tmp")]
    pub disk_dir: PathBuf,
    /// Poll for the next message this many microseconds before sleeping, on both ends of every
    /// connection (the primary's lanes, the local mirror's lanes, and tcp-rtt's ping-pong alike).
    #[arg(long, default_value_t = 0)]
    pub busy_poll_us: u64,
    /// Run the whole list of modes this many times, interleaved, and report for each mode the
    /// round with the median p50 (this machine is shared and noisy).
    #[arg(long, default_value_t = 1)]
    pub repeat: usize,
    /// Start this many local backups behind (two-tier, chain) or beside (broadcast) the local
    /// mirror; the pseudo-modes sync-backup, sync-backup-slow, chain and broadcast use at least 1.
    #[arg(long, default_value_t = 0, conflicts_with = "mirror")]
    pub backups: usize,
    /// How the local mirror and its backups are arranged for the replicated modes.
    #[arg(long, value_enum, default_value = "two-tier")]
    pub topology: Topology,
    /// Cap each backup link at this rate, e.g. 100MiB/s (sync-backup-slow: default 100MiB/s).
    #[arg(long)]
    pub secondary_rate_limit: Option<String>,
    /// The local mirrors' secondary_tier_thresh (bytes not yet at every backup above which the
    /// mirror stalls the primary), e.g. 40MiB.
    #[arg(long)]
    pub secondary_tier_thresh: Option<String>,
    /// Start the local mirror with this checkpoint_thresh (complete groups between checkpoints).
    #[arg(long, conflicts_with = "mirror")]
    pub checkpoint_thresh: Option<usize>,
    /// Emulate slow NVMM (the paper's PMEP, about 1000 ns): add this many nanoseconds, by
    /// spinning, to every persistence barrier of both roles: the primary's own region when it
    /// persists locally (unreplicated, async, sync-flush) and the local mirrors' logs and data
    /// areas ([region] and [mirror] nvmm_barrier_ns). 0 to 1000000; 0: memory speed.
    #[arg(long, default_value_t = 0)]
    pub nvmm_barrier_ns: u64,
    /// Emulate slow NVMM: cap the bytes per second each role persists, e.g. 1600MiB/s (the
    /// paper's PMEP: 1.6 GB/s), on the same files as --nvmm-barrier-ns ([region] and [mirror]
    /// nvmm_write_rate); 1MiB/s to 1TiB/s. Default: no cap.
    #[arg(long)]
    pub nvmm_write_rate: Option<String>,
    #[command(flatten)]
    pub transact: harness::transact::TransactArgs,
    #[command(flatten)]
    pub matrix: crate::matrix::MatrixArgs,
    #[command(flatten)]
    pub whisper: crate::whisper::driver::WhisperArgs,
    #[command(flatten)]
    pub resync: crate::bench_resync::ResyncArgs,
    #[command(flatten)]
    pub failover: crate::bench_failover::FailoverArgs,
    #[command(flatten)]
    pub kv: crate::kv::KvArgs,
    #[command(flatten)]
    pub rvm: crate::rvm::bench::RvmBenchArgs,
    /// Run the LMDB benchmark instead: one unmodified LMDB program (Python's lmdb module)
    /// committing transactions of one --size put each, under libmojim_preload.so (mojim-sync),
    /// on --disk-dir with LMDB's fdatasync (ext4-fdatasync) and on --dir without syncs
    /// (tmpfs-none).
    #[arg(long)]
    pub lmdb: bool,
    /// Transactions per target for --lmdb.
    #[arg(long, default_value_t = 2000)]
    pub lmdb_txns: u64,
    /// The interposer for --lmdb (default: libmojim_preload.so beside the mojim executable).
    #[arg(long)]
    pub preload: Option<PathBuf>,
    /// Compare the C API's sync points (mojim_msync, mojim_msync_at) with the Rust API's
    /// (Primary::msync), taking turns on one primary per mode of --mode.
    #[arg(long)]
    pub c_api: bool,
    /// Transports to run every mode over, comma-separated, one after another: tcp (loopback),
    /// shm (shared memory with the mirror on this host: records placed straight into its logs;
    /// tcp-rtt is then the rings' raw ping-pong, reported as shm-rtt), shm-rings (shm with
    /// `[primary] place_records = false`: records' bytes through the rings), ucx (through UCX, on
    /// loopback: records put straight into the mirror's registered logs; tcp-rtt is then UCX's
    /// raw ping-pong, reported as ucx-rtt) and ucx-rings (ucx with `place_records = false`:
    /// records' bytes through the registered rings).
    #[arg(long, default_value = "tcp", value_delimiter = ',')]
    pub transport: Vec<String>,
    /// Mutual TLS on the links, comma-separated: off, on, encrypt, or several (off,on,encrypt)
    /// to run them side by side (a session each, their rounds interleaved under --repeat) and
    /// print the ratios. With on, the benchmark makes a CA and certificates for its mirrors
    /// (role node) and its primary and pinger (role application); tcp-rtt's echo server speaks
    /// TLS too. Over shm and ucx, TLS runs over the rings or the UCX stream, and placed records
    /// carry their MAC. encrypt is on with `[security] encrypt_placed = true`: placed records'
    /// bodies are encrypted too (reported as +tls+enc; over tcp the same as on).
    /// With --mode resync, on adds the kind full-tls: full with every link over mutual TLS.
    #[arg(long, default_value = "off", value_delimiter = ',', conflicts_with = "mirror")]
    pub tls: Vec<String>,
    /// The primary's metrics listener, comma-separated: off, on, or on,off to run both side by
    /// side (on one session, the primary opened with and without it in turns under --repeat)
    /// and print the ratios.
    /// With on, each primary serves its metrics on a free loopback port (`[primary]
    /// metrics_listen`) and a thread of the benchmark scrapes `/metrics` once a second while it
    /// runs. Rows of modes without a primary (tcp-rtt) measure the same thing in both settings:
    /// their ratio shows the run's noise.
    #[arg(long, default_value = "off", value_delimiter = ',')]
    pub metrics: Vec<String>,
    /// Print one JSON object per result instead of a table.
    #[arg(long)]
    pub json: bool,
}

impl BenchArgs {
    /// The emulated NVMM of `--nvmm-barrier-ns` and `--nvmm-write-rate`, checked.
    pub fn nvmm_model(&self) -> Result<NvmmModel> {
        let rate = self.nvmm_write_rate.as_deref().unwrap_or("");
        mojim::config::nvmm_model("--nvmm-barrier-ns / --nvmm-write-rate:", self.nvmm_barrier_ns, rate)
    }
}

/// Runs the benchmark (or, with `--transact` or `--matrix`, those) and prints its results.
pub fn run(a: &BenchArgs) -> Result<()> {
    if a.rvm.rvm {
        return crate::rvm::bench::run(a);
    }
    if a.matrix.matrix.is_some() {
        return crate::matrix::run(a);
    }
    if a.lmdb {
        return crate::bench_lmdb::run(a);
    }
    if a.kv.kv || a.kv.kv_memory || a.kv.kv_stall || a.kv.kv_move {
        return crate::kv::run(a);
    }
    if a.transact.transact {
        return crate::transact::run(a);
    }
    if a.whisper.whisper {
        return crate::whisper::driver::run(a);
    }
    if a.c_api {
        return crate::bench_capi::run(a);
    }
    if a.mode.iter().any(|m| m.trim() == "resync") {
        return crate::bench_resync::run(a);
    }
    if a.mode.iter().any(|m| m.trim() == "failover") {
        return crate::bench_failover::run(a);
    }
    let tls = tls_settings(a)?;
    let metrics = on_off_settings("--metrics", &a.metrics)?;
    if tls.len() > 1 && metrics.len() > 1 {
        return Err(Error::Config(
            "--tls on,off and --metrics on,off: compare one at a time (give the other one setting)".into(),
        ));
    }
    let mut results = Vec::new();
    for t in transports(a)? {
        let mut one = a.clone();
        one.transport = vec![t.to_string()];
        if tls.len() > 1 {
            results.extend(measure_side_by_side(&one, "--tls", &tls, true, |o, t| o.tls = vec![t.into()])?);
        } else if metrics.len() > 1 {
            results.extend(measure_side_by_side(&one, "--metrics", &metrics, false, |o, m| {
                o.metrics = vec![m.into()]
            })?);
        } else {
            results.extend(measure(&one)?);
        }
    }
    print(&results, a.json);
    Ok(())
}
