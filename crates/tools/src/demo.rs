//! `mojim demo`: the paper's Fig. 1 on a real mirror in a child process.
//!
//! 1. An access count made persistent with `msync` after every increment.
//! 2. A log append made atomic with `gmsync`: the entry and the log's tail pointer together.
//! 3. A burst of random 4 KiB `msync`s.
//!
//! Then the mirror's data area is compared with the primary's byte for byte, a latency table
//! per mode is printed, and everything is removed.

use crate::bench::{harness, BenchArgs};
use crate::child::ChildNode;
use mojim::config::{random_uuid, template, Config, Mode};
use mojim::error::{Error, Result};
use mojim::primary::{Primary, PrimaryOptions};
use mojim::Range;
use mojim_node::admin_client::AdminClient;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Options of `mojim demo` (none are needed).
#[derive(clap::Args, Clone, Debug)]
pub struct DemoArgs {
    /// Folder for the demo's files (memory-backed by default; removed afterwards).
    #[arg(long, default_value = "/dev/shm")]
    pub dir: PathBuf,
    /// Sync points per mode in the latency table.
    #[arg(long, default_value_t = 2000)]
    pub ops: u64,
    /// Keep the demo's files instead of removing them.
    #[arg(long)]
    pub keep: bool,
}

const REGION_SIZE: u64 = 64 << 20;
const COUNT_AT: u64 = 0;
const LOG_TAIL_AT: u64 = 64;
const LOG_AT: u64 = 4096;
const ENTRY: u64 = 128;
const BURST_AT: u64 = 1 << 20;

struct Cleanup {
    dir: PathBuf,
    keep: bool,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        if !self.keep {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

pub fn run(a: &DemoArgs) -> Result<()> {
    let base = if a.dir.is_dir() { a.dir.clone() } else { std::env::temp_dir() };
    let dir = base.join(format!("mojim-demo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(Error::io(format!("create {}", dir.display())))?;
    let _cleanup = Cleanup { dir: dir.clone(), keep: a.keep };
    let uuid = random_uuid();
    let secret: String = random_uuid().iter().map(|b| format!("{b:02x}")).collect();
    let cfg_path = dir.join("mojim.toml");
    mojim::config::write_private(&cfg_path, &template(&uuid, REGION_SIZE, &secret, "127.0.0.1:0"))
        .map_err(Error::io("write config"))?;
    mojim::create_region(&dir.join("region.mojim"), mojim::RegionId { uuid, size: REGION_SIZE })?;
    let exe = std::env::current_exe().map_err(Error::io("find the mojim executable"))?;
    let mirror = ChildNode::spawn(
        &exe,
        &["serve", "--config", cfg_path.to_str().unwrap_or_default(), "--listen", "127.0.0.1:0"],
    )?;
    println!("mirror started (pid {}) on {}; files in {}", mirror.pid(), mirror.addr(), dir.display());

    let cfg = Config::load(&cfg_path)?;
    let mut opts = PrimaryOptions::from_config(&cfg, false)?;
    opts.mirror = mirror.addr().to_string();
    opts.mode = Mode::Sync;
    let p = Primary::open(&opts)?;

    // Fig. 1, top: an access count, persistent after every increment.
    let t = Instant::now();
    for _ in 0..1000 {
        let mut c = [0u8; 8];
        p.read(COUNT_AT, &mut c)?;
        let n = u64::from_le_bytes(c) + 1;
        p.write(COUNT_AT, &n.to_le_bytes())?;
        p.msync(COUNT_AT, 8)?;
    }
    println!(
        "access count: 1000 increments, each msync'd ({:.1} µs each)",
        t.elapsed().as_secs_f64() * 1e6 / 1000.0
    );

    // Fig. 1, bottom: append to a log; the entry and the tail pointer are one atomic group.
    let t = Instant::now();
    for i in 0..1000u64 {
        let mut tail = [0u8; 8];
        p.read(LOG_TAIL_AT, &mut tail)?;
        let tail = u64::from_le_bytes(tail);
        let entry = format!("entry {i:06}: the quick brown fox jumps over the lazy dog");
        let mut rec = [b'.'; ENTRY as usize];
        rec[..entry.len()].copy_from_slice(entry.as_bytes());
        let at = LOG_AT + tail * ENTRY;
        p.write(at, &rec)?;
        p.write(LOG_TAIL_AT, &(tail + 1).to_le_bytes())?;
        p.gmsync(&[Range::new(at, ENTRY), Range::new(LOG_TAIL_AT, 8)])?;
    }
    println!(
        "log append: 1000 entries, entry + tail pointer in one gmsync ({:.1} µs each)",
        t.elapsed().as_secs_f64() * 1e6 / 1000.0
    );

    // A burst of random 4 KiB sync points.
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    let mut page = [0u8; 4096];
    for i in 0..2000u64 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let off = BURST_AT + (x % ((REGION_SIZE - BURST_AT) / 4096)) * 4096;
        page.iter_mut().enumerate().for_each(|(j, b)| *b = (i as u8).wrapping_add(j as u8) ^ (x as u8));
        p.write(off, &page)?;
        p.msync(off, 4096)?;
    }
    println!("burst: 2000 random 4 KiB msyncs");
    p.close()?;

    verify(&cfg, mirror.addr(), &dir.join("region.mojim"))?;

    // Latency per mode, on the same mirror.
    let args = BenchArgs {
        mode: vec![
            "unreplicated".into(),
            "async".into(),
            "sync".into(),
            "sync-flush".into(),
            "tcp-rtt".into(),
        ],
        size: 4096,
        region_size: REGION_SIZE,
        threads: 1,
        lanes: Some(1),
        ops: a.ops,
        duration: None,
        warmup: 200,
        mirror: Some(mirror.addr().to_string()),
        config: Some(cfg_path.clone()),
        disk_file: None,
        dir: dir.clone(),
        disk_dir: dir.clone(),
        busy_poll_us: 0,
        repeat: 1,
        backups: 0,
        topology: crate::cluster::Topology::TwoTier,
        secondary_rate_limit: None,
        secondary_tier_thresh: None,
        checkpoint_thresh: None,
        nvmm_barrier_ns: 0,
        nvmm_write_rate: None,
        transact: Default::default(),
        matrix: Default::default(),
        whisper: Default::default(),
        resync: Default::default(),
        failover: Default::default(),
        kv: Default::default(),
        rvm: Default::default(),
        lmdb: false,
        lmdb_txns: 0,
        preload: None,
        c_api: false,
        transport: vec!["tcp".into()],
        tls: vec!["off".into()],
        metrics: vec!["off".into()],
        json: false,
    };
    println!();
    println!("latency of one 4 KiB sync point per mode ({} ops each):", a.ops);
    harness::print(&harness::measure(&args)?, false);
    drop(mirror);
    println!();
    println!("demo passed: the mirror's copy matched the primary's byte for byte");
    Ok(())
}

/// Compares the mirror's data area with the primary's region, once the mirror has applied
/// every group it received.
fn verify(cfg: &Config, addr: &str, region_path: &std::path::Path) -> Result<()> {
    let secret = cfg.secret(false)?;
    let mut admin = AdminClient::connect(addr, &secret, Duration::from_secs(5))?;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let st = admin.status()?;
        if st.lag_groups == 0 && st.applied_seq >= st.last_received_seq {
            break;
        }
        if Instant::now() > deadline {
            return Err(Error::Config(format!("mirror did not apply its log in time: {st:?}")));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let region = mojim_region::RegionFile::open(region_path)?;
    let mut at = 0;
    let chunk = 4 << 20;
    while at < REGION_SIZE {
        let n = chunk.min(REGION_SIZE - at);
        let theirs = admin.read(at, n)?;
        let ours = region.view(at, n as usize).to_vec();
        if let Some(i) = ours.iter().zip(&theirs).position(|(a, b)| a != b) {
            return Err(Error::Config(format!(
                "verification failed: byte {} differs (primary {:#04x}, mirror {:#04x})",
                at + i as u64,
                ours[i],
                theirs[i]
            )));
        }
        at += n;
    }
    println!("verified: mirror data area == primary region ({} bytes)", REGION_SIZE);
    Ok(())
}
