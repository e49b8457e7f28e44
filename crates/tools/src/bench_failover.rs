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

use crate::bench::harness::{exe, Scratch, XorShift};
use crate::bench::BenchArgs;
use crate::child::ChildNode;
use mojim::config::{template, Config, ConfigFile, EtcdSettings, Mode, OnMirrorLoss, RegionId, Secret};
use mojim::error::{Error, Result};
use mojim::primary::{Primary, PrimaryOptions};
use mojim::size::format_size;
use mojim_node::admin::AdminClient;
use mojim_node::MirrorStatus;
use serde::Serialize;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant, SystemTime};

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

/// One fail-over: the primary killed, another started on the promoted node.
#[derive(Clone, Debug, Serialize)]
pub struct FailoverRound {
    /// `failover`.
    pub kind: &'static str,
    pub coordinator: &'static str,
    pub round: usize,
    pub region_size: u64,
    /// The primary's lease (etcd), or none (static).
    pub lease_ttl_ms: Option<u64>,
    /// Kill → the coordinator has acted: 0 for static (the operator acts at the kill); for
    /// etcd, until the mirror has claimed the next epoch (the lease expired and the mirror saw
    /// it).
    pub detect_ms: f64,
    /// Static: the `promote` command on the mirror. Etcd: the claim in etcd → the mirror
    /// reports itself primary.
    pub promote_ms: f64,
    /// Static: the `fence` command on the backup (etcd: none, 0).
    pub fence_ms: f64,
    /// Kill → the new worker started (static: connecting, reading epochs, promote, fence; etcd:
    /// detect and promote, as seen from here).
    pub operator_ms: f64,
    /// The new worker's start → its region is open and its session begun.
    pub open_ms: f64,
    /// The new worker's start → its first acknowledgement.
    pub restart_ms: f64,
    /// The same as `restart_ms`.
    pub first_ack_ms: f64,
    /// Kill → the new worker's first acknowledgement.
    pub total_ms: f64,
    /// The old worker's last acknowledgement → the new worker's first.
    pub gap_ms: f64,
    /// What the promoted node reported: time spent letting its backups catch up, and whether
    /// they did.
    pub drain_ms: Option<u64>,
    pub backups_drained: Option<bool>,
    /// The new primary's resynchronisation of its mirror (the old backup): kind, seconds and
    /// bytes; it runs beside the application's sync points.
    pub resync_kind: String,
    pub resync_ms: f64,
    pub resync_bytes: u64,
    /// Groups the killed worker had acknowledged.
    pub acked_before_kill: u64,
    /// The last of them (as many as fit in half the region) found whole in the promoted copy.
    pub checked_groups: u64,
}

/// One loss of the mirror: how long the primary's acknowledged groups had one volatile copy.
#[derive(Clone, Debug, Serialize)]
pub struct VulnerabilityRound {
    /// `vulnerability`.
    pub kind: &'static str,
    pub round: usize,
    pub region_size: u64,
    /// Where the primary's region lives: `memory` (tmpfs), `file` or `dax`.
    pub data: String,
    /// How it is made persistent: `clwb`, `clflush` or `msync`.
    pub flush: &'static str,
    pub dir: String,
    /// `PrimaryStatus::vulnerable_us`: the whole region made persistent after the loss.
    pub vulnerable_ms: f64,
    /// The mirror's kill → a sync point of the application returned after the loss was
    /// handled (detection plus `vulnerable_ms`).
    pub noticed_ms: f64,
}

/// The median, minimum and maximum of one figure over the rounds.
#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    /// `summary`.
    pub kind: &'static str,
    /// `failover static`, `vulnerability memory clwb`, ...
    pub of: String,
    pub metric: &'static str,
    pub rounds: usize,
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

/// Everything one run measured.
#[derive(Clone, Debug, Serialize)]
pub struct FailoverResults {
    pub failover: Vec<FailoverRound>,
    pub vulnerability: Vec<VulnerabilityRound>,
    pub summaries: Vec<Summary>,
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
            "--coordinator etcd runs a local etcd: no etcd binary at {ETCD} or on PATH (install the Debian \
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

/// Writes the configuration every node and worker of a round uses: a new region of `size`
/// bytes, one lane, and the etcd coordinator at `etcd` if given (its lease settings are the
/// defaults).
fn write_config(dir: &Path, size: u64, etcd: Option<&str>) -> Result<PathBuf> {
    let id = RegionId { uuid: mojim::config::random_uuid(), size };
    let base = template(&id.uuid, id.size, "mojim-bench-secret", "127.0.0.1:0");
    let mut f: ConfigFile =
        toml::from_str(&base).map_err(|e| Error::Config(format!("benchmark config: {e}")))?;
    f.primary.lanes = 1;
    if let Some(endpoint) = etcd {
        f.cluster.coordinator = "etcd".into();
        f.cluster.etcd_endpoints = vec![endpoint.to_string()];
    }
    let text = toml::to_string(&f).map_err(|e| Error::Config(format!("benchmark config: {e}")))?;
    let p = dir.join("mojim.toml");
    mojim::config::write_private(&p, &text).map_err(Error::io(format!("write {}", p.display())))?;
    Ok(p)
}

/// Starts `mojim serve` as node `node` on a free loopback port with its data under `dir`.
fn serve(
    exe: &Path,
    cfg: &Path,
    dir: &Path,
    node: &str,
    busy_poll_us: u64,
    backup: Option<&str>,
) -> Result<ChildNode> {
    let cfg = cfg.to_string_lossy();
    let dir = dir.to_string_lossy();
    let poll = busy_poll_us.to_string();
    let mut args = vec!["serve", "--config", &cfg, "--listen", "127.0.0.1:0", "--dir", &dir, "--node", node];
    args.extend(["--busy-poll-us", &poll]);
    if let Some(b) = backup {
        args.extend(["--backup", b]);
    }
    ChildNode::spawn(exe, &args)
}

fn admin(addr: &str) -> Result<AdminClient> {
    AdminClient::connect(addr, &Secret(SECRET.to_vec()), Duration::from_secs(5))
}

/// Polls a node's status until `ready` holds, at most [`STEP`].
fn wait_status(addr: &str, stage: &str, ready: impl Fn(&MirrorStatus) -> bool) -> Result<MirrorStatus> {
    let mut c = admin(addr)?;
    let t0 = Instant::now();
    loop {
        let st = c.status()?;
        if ready(&st) {
            return Ok(st);
        }
        if t0.elapsed() > STEP {
            return Err(failed(stage, format!("waited {} s for {addr}; its status: {st:?}", STEP.as_secs())));
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// The bytes group `k` writes: its number, then a pattern derived from it.
fn group_bytes(k: u64) -> Vec<u8> {
    let mut rng = XorShift(k.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let mut b = vec![0u8; GROUP as usize];
    for w in b.chunks_mut(8) {
        w.copy_from_slice(&rng.next().to_le_bytes());
    }
    b[..8].copy_from_slice(&k.to_le_bytes());
    b
}

/// 4 KiB slots in each half of a region of `size` bytes.
fn half_slots(size: u64) -> u64 {
    size / GROUP / 2
}

/// Where group `k` goes in a region of `size` bytes: the first worker of a round writes the
/// lower half, the one started after the fail-over the upper half, so that the old worker's
/// groups stay in place to be checked.
fn group_offset(k: u64, size: u64, upper: bool) -> u64 {
    let half = half_slots(size);
    (if upper { half } else { 0 } + k % half) * GROUP
}

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

/// What a worker printed.
#[derive(Debug)]
enum Event {
    Open(u64),
    Ack {
        k: u64,
        ns: u64,
    },
    Resync {
        kind: String,
        seconds: f64,
        bytes: u64,
    },
    /// `resync failed` or `error`.
    Failed(String),
    /// The worker's output ended.
    Exit,
}

impl Event {
    fn parse(line: &str) -> Option<Event> {
        let f: Vec<&str> = line.split_whitespace().collect();
        let num = |i: usize| f.get(i).and_then(|x| x.parse::<u64>().ok());
        Some(match *f.first()? {
            "open" => Event::Open(num(1)?),
            "ack" => Event::Ack { k: num(1)?, ns: num(2)? },
            "resync" if f.get(1) == Some(&"none") => {
                Event::Resync { kind: "none".into(), seconds: 0.0, bytes: 0 }
            }
            "resync" if f.get(1) == Some(&"failed") => Event::Failed(line.into()),
            "resync" => Event::Resync {
                kind: f.get(1)?.to_string(),
                seconds: f.get(2)?.parse().ok()?,
                bytes: num(3)?,
            },
            "error" => Event::Failed(line.into()),
            _ => return None,
        })
    }
}

/// A `mojim bench-worker` child whose output arrives as events; killed on drop.
struct Worker {
    child: Child,
    events: Receiver<Event>,
    /// When it was started (real-time nanoseconds).
    started_ns: u64,
}

impl Worker {
    fn spawn(
        exe: &Path,
        cfg: &Path,
        region: &Path,
        mirror: &str,
        node: &str,
        upper_half: bool,
    ) -> Result<Worker> {
        let mut cmd = Command::new(exe);
        if std::env::var_os("MOJIM_LOG").is_none() {
            cmd.env("MOJIM_LOG", "warn");
        }
        cmd.arg("bench-worker")
            .arg("--config")
            .arg(cfg)
            .arg("--region")
            .arg(region)
            .args(["--mirror", mirror, "--node", node])
            .args(upper_half.then_some("--upper-half"))
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let started_ns = now_ns();
        let mut child = cmd.spawn().map_err(Error::io(format!("start {} bench-worker", exe.display())))?;
        let out = child.stdout.take().expect("stdout is piped");
        let (tx, events) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                let e =
                    Event::parse(&line).unwrap_or_else(|| Event::Failed(format!("unexpected line {line:?}")));
                if tx.send(e).is_err() {
                    return;
                }
            }
            let _ = tx.send(Event::Exit);
        });
        Ok(Worker { child, events, started_ns })
    }

    /// The next event, at most [`STEP`] from now.
    fn next(&self, stage: &str) -> Result<Event> {
        match self.events.recv_timeout(STEP) {
            Ok(Event::Failed(why)) => Err(failed(stage, format!("the worker said: {why}"))),
            Ok(Event::Exit) => Err(failed(stage, "the worker exited".into())),
            Ok(e) => Ok(e),
            Err(RecvTimeoutError::Timeout) => {
                Err(failed(stage, format!("the worker said nothing for {} s", STEP.as_secs())))
            }
            Err(RecvTimeoutError::Disconnected) => Err(failed(stage, "the worker's output ended".into())),
        }
    }

    /// SIGKILL, without waiting: none of the worker's code runs after this, but the kernel takes
    /// a while to tear the process down (unmap its region, close its sockets), which a machine
    /// that dies does not do.
    fn kill_now(&mut self) {
        let _ = self.child.kill();
    }

    /// Waits until a killed worker is gone; returns the last acknowledgement it printed that
    /// was not read yet, if any.
    fn reap(&mut self) -> Option<(u64, u64)> {
        let _ = self.child.wait();
        let mut last = None;
        while let Ok(e) = self.events.recv_timeout(Duration::from_secs(5)) {
            match e {
                Event::Ack { k, ns } => last = Some((k, ns)),
                Event::Exit => break,
                _ => {}
            }
        }
        last
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Checks that the groups `1..=last` of the lower half that were not overwritten since are
/// whole in the region file at `path`; returns how many it checked.
fn check_groups(path: &Path, last: u64) -> Result<u64> {
    let r = mojim_region::RegionFile::open(path)?;
    let first = last.saturating_sub(half_slots(r.size()) - 1).max(1);
    let mut got = vec![0u8; GROUP as usize];
    for k in first..=last {
        let off = group_offset(k, r.size(), false);
        r.read(off, &mut got);
        let want = group_bytes(k);
        if let Some(i) = (0..got.len()).find(|&i| got[i] != want[i]) {
            return Err(failed(
                "check",
                format!(
                    "acknowledged group {k} (of 1..={last}) is not whole on the promoted node: byte {i} at \
                     offset {} is {:#04x}, not {:#04x}",
                    off + i as u64,
                    got[i],
                    want[i]
                ),
            ));
        }
    }
    Ok(last - first + 1)
}

/// Where Debian's `etcd-server` puts the binary; `etcd` on `PATH` is the fallback.
const ETCD: &str = "/usr/bin/etcd";

fn etcd_binary() -> Option<PathBuf> {
    let debian = PathBuf::from(ETCD);
    if debian.is_file() {
        return Some(debian);
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join("etcd")).find(|p| p.is_file())
}

/// A single-member etcd on loopback with its data in a folder of the round; killed on drop.
struct Etcd {
    child: Child,
    endpoint: String,
    log: PathBuf,
}

impl Etcd {
    fn start(dir: &Path) -> Result<Etcd> {
        let binary =
            etcd_binary().ok_or_else(|| failed("etcd", format!("no etcd binary at {ETCD} or on PATH")))?;
        std::fs::create_dir_all(dir).map_err(Error::io(format!("create {}", dir.display())))?;
        // Both stay bound until both are read, so the two ports differ.
        let bind = || std::net::TcpListener::bind("127.0.0.1:0").map_err(Error::io("find a free port"));
        let (l1, l2) = (bind()?, bind()?);
        let port =
            |l: &std::net::TcpListener| l.local_addr().map(|a| a.port()).map_err(Error::io("local address"));
        let (client, peer) = (port(&l1)?, port(&l2)?);
        drop((l1, l2));
        let log = dir.join("etcd.log");
        let out = std::fs::File::create(&log).map_err(Error::io(format!("create {}", log.display())))?;
        let err = out.try_clone().map_err(Error::io("duplicate the log's handle"))?;
        let client_url = format!("http://127.0.0.1:{client}");
        let peer_url = format!("http://127.0.0.1:{peer}");
        let mut cmd = Command::new(&binary);
        // etcd refuses ETCD_* variables that shadow its flags.
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("ETCD_") {
                cmd.env_remove(name);
            }
        }
        cmd.arg("--name=bench")
            .arg(format!("--data-dir={}", dir.join("data").display()))
            .arg(format!("--listen-client-urls={client_url}"))
            .arg(format!("--advertise-client-urls={client_url}"))
            .arg(format!("--listen-peer-urls={peer_url}"))
            .arg(format!("--initial-advertise-peer-urls={peer_url}"))
            .arg(format!("--initial-cluster=bench={peer_url}"))
            .arg("--initial-cluster-state=new")
            // A single member elects itself after one election timeout: keep start-up short.
            .args(["--heartbeat-interval=10", "--election-timeout=100", "--log-level=warn"])
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err);
        let child = cmd.spawn().map_err(Error::io(format!("start {}", binary.display())))?;
        let mut e = Etcd { child, endpoint: format!("127.0.0.1:{client}"), log };
        let probe = mojim_etcd::Client::new(std::slice::from_ref(&e.endpoint), Duration::from_millis(500))
            .map_err(|x| failed("etcd", x.to_string()))?;
        let t0 = Instant::now();
        loop {
            if let Ok(Some(status)) = e.child.try_wait() {
                return Err(failed(
                    "etcd",
                    format!("etcd exited at start ({status}); see {}", e.log.display()),
                ));
            }
            match probe.get("mojim-bench-probe") {
                Ok(_) => return Ok(e),
                Err(x) if t0.elapsed() > Duration::from_secs(10) => {
                    let tail = std::fs::read_to_string(&e.log).unwrap_or_default();
                    let tail: Vec<&str> = tail.lines().rev().take(10).collect();
                    return Err(failed(
                        "etcd",
                        format!("etcd did not answer in 10 s ({x}); its log ends: {tail:?}"),
                    ));
                }
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What the coordinator did about the primary's death.
struct Reaction {
    epoch: u64,
    /// The promoted node's data area: the new primary's region.
    region: PathBuf,
    detect_ms: f64,
    promote_ms: f64,
    fence_ms: f64,
    drain_ms: Option<u64>,
    backups_drained: Option<bool>,
}

/// One fail-over round's cluster.
struct FailoverRun<'a> {
    a: &'a BenchArgs,
    exe: PathBuf,
    round: usize,
    cfg: PathBuf,
    // Dropped in order: the worker and nodes before their folder.
    worker: Option<Worker>,
    mirror: ChildNode,
    mirror_dir: PathBuf,
    backup: ChildNode,
    /// The etcd coordinator's server and settings (`--coordinator etcd`).
    etcd: Option<(Etcd, EtcdSettings)>,
    _dir: Scratch,
}

impl<'a> FailoverRun<'a> {
    fn start(a: &'a BenchArgs, exe: &Path, round: usize) -> Result<FailoverRun<'a>> {
        let dir = Scratch::create(a.dir.join(format!("mojim-failover-{}-{round}", std::process::id())))?;
        let etcd = match a.failover.coordinator {
            Coordinator::Static => None,
            Coordinator::Etcd => Some(Etcd::start(&dir.0.join("etcd"))?),
        };
        let cfg = write_config(&dir.0, a.region_size, etcd.as_ref().map(|e| e.endpoint.as_str()))?;
        let loaded = Config::load(&cfg)?;
        let etcd = match etcd {
            Some(e) => Some((e, loaded.etcd()?.expect("the configuration names the coordinator"))),
            None => None,
        };
        let backup = serve(exe, &cfg, &dir.0.join("b"), "b", a.busy_poll_us, None)?;
        let mirror = serve(exe, &cfg, &dir.0.join("m"), "m", a.busy_poll_us, Some(backup.addr()))?;
        let region = dir.0.join("a").join("region.mojim");
        std::fs::create_dir_all(dir.0.join("a")).map_err(Error::io("create the primary's folder"))?;
        mojim::create_region(&region, loaded.region_id()?)?;
        let worker = Worker::spawn(exe, &cfg, &region, mirror.addr(), "a", false)?;
        Ok(FailoverRun {
            a,
            exe: exe.to_path_buf(),
            round,
            cfg,
            worker: Some(worker),
            mirror,
            mirror_dir: dir.0.join("m"),
            backup,
            etcd,
            _dir: dir,
        })
    }

    fn run(mut self) -> Result<FailoverRound> {
        let mut old = self.worker.take().expect("started with a worker");
        // Steady: the worker has had WARM_ACKS groups acknowledged, and the mirror feeds the
        // backup (so the promotion has a backup to drain and the new mirror has a copy).
        let mut acked = 0;
        let mut last = None;
        while acked < WARM_ACKS {
            if let Event::Ack { k, ns } = old.next("warm-up")? {
                acked += 1;
                last = Some((k, ns));
            }
        }
        let st =
            wait_status(self.mirror.addr(), "warm-up", |st| st.backups.first().is_some_and(|b| b.connected))?;
        let first_epoch = st.epoch;

        let kill_ns = now_ns();
        old.kill_now();

        let r = match self.a.failover.coordinator {
            Coordinator::Static => self.react_static()?,
            Coordinator::Etcd => self.react_etcd(kill_ns, first_epoch)?,
        };
        let epoch = r.epoch;
        let region = r.region.clone();
        let new = Worker::spawn(&self.exe, &self.cfg, &region, self.backup.addr(), "m", true)?;
        let spawn_ns = new.started_ns;

        let mut open_ns = None;
        let mut first_ns = None;
        let mut resync = None;
        let mut after = 0;
        while first_ns.is_none() || resync.is_none() || after < AFTER_ACKS {
            match new.next("restart")? {
                Event::Open(ns) => open_ns = Some(ns),
                Event::Ack { ns, .. } => {
                    first_ns.get_or_insert(ns);
                    after += 1;
                }
                Event::Resync { kind, seconds, bytes } => resync = Some((kind, seconds, bytes)),
                Event::Failed(_) | Event::Exit => unreachable!("next() returns these as errors"),
            }
        }
        self.worker = Some(new);
        let st = admin(self.backup.addr())?.status()?;
        if st.epoch != epoch || st.session.is_none() {
            return Err(failed(
                "restart",
                format!("the old backup is not the new primary's mirror at epoch {epoch}: {st:?}"),
            ));
        }
        let (last_k, last_ns) = old
            .reap()
            .or(last)
            .ok_or_else(|| failed("kill", "the killed worker had printed no acknowledgement".into()))?;
        self.worker = None;
        let checked = check_groups(&region, last_k)?;
        let first_ns = first_ns.expect("the loop ends after the first acknowledgement");
        let (resync_kind, resync_s, resync_bytes) = resync.expect("the loop ends after the resync");
        let restart_ms = ms(spawn_ns, first_ns);
        Ok(FailoverRound {
            kind: "failover",
            coordinator: self.a.failover.coordinator.name(),
            round: self.round,
            region_size: self.a.region_size,
            lease_ttl_ms: self.etcd.as_ref().map(|e| e.1.lease_ttl.as_millis() as u64),
            detect_ms: r.detect_ms,
            promote_ms: r.promote_ms,
            fence_ms: r.fence_ms,
            operator_ms: ms(kill_ns, spawn_ns),
            open_ms: open_ns.map_or(f64::NAN, |ns| ms(spawn_ns, ns)),
            restart_ms,
            first_ack_ms: restart_ms,
            total_ms: ms(kill_ns, first_ns),
            gap_ms: ms(last_ns, first_ns),
            drain_ms: r.drain_ms,
            backups_drained: r.backups_drained,
            resync_kind,
            resync_ms: resync_s * 1e3,
            resync_bytes,
            acked_before_kill: last_k,
            checked_groups: checked,
        })
    }

    /// The static coordinator's operator, as `mojim promote --addr M --peer B`: promote M at
    /// a new epoch, then fence B.
    fn react_static(&mut self) -> Result<Reaction> {
        let mut m = admin(self.mirror.addr())?;
        let mut b = admin(self.backup.addr())?;
        let epoch = m.status()?.epoch.max(b.status()?.epoch) + 1;
        let t = Instant::now();
        let reply = m
            .command(&format!(r#"{{"op":"promote","epoch":{epoch},"drain_ms":{DRAIN_MS}}}"#))
            .map_err(|e| failed("promote", format!("the mirror refused promotion at epoch {epoch}: {e}")))?;
        let promote_ms = t.elapsed().as_secs_f64() * 1e3;
        let t = Instant::now();
        b.command(&format!(r#"{{"op":"fence","epoch":{epoch}}}"#))
            .map_err(|e| failed("fence", format!("the backup refused the fence at epoch {epoch}: {e}")))?;
        let fence_ms = t.elapsed().as_secs_f64() * 1e3;
        let region = reply["region_path"]
            .as_str()
            .map(PathBuf::from)
            .ok_or_else(|| failed("promote", format!("the reply names no region_path: {reply}")))?;
        Ok(Reaction {
            epoch,
            region,
            detect_ms: 0.0,
            promote_ms,
            fence_ms,
            drain_ms: reply["drain_ms"].as_u64(),
            backups_drained: reply["backups_drained"].as_bool(),
        })
    }

    /// The etcd coordinator: nobody acts; the primary's lease expires, M claims the next epoch
    /// in etcd and promotes itself. Watched from here: the roles in etcd (detection), then M's
    /// role (promotion).
    fn react_etcd(&self, kill_ns: u64, first_epoch: u64) -> Result<Reaction> {
        let (_, settings) = self.etcd.as_ref().expect("--coordinator etcd starts etcd");
        let coord = mojim::coord::Coordinator::new(settings)?;
        let t0 = Instant::now();
        let roles = loop {
            match coord.roles()? {
                Some((r, _)) if r.epoch > first_epoch => break r,
                _ => {}
            }
            if t0.elapsed() > STEP {
                return Err(failed(
                    "detect",
                    format!(
                        "nobody took over in {} s (lease ttl {} ms); the roles: {:?}",
                        STEP.as_secs(),
                        settings.lease_ttl.as_millis(),
                        coord.roles()?
                    ),
                ));
            }
            std::thread::sleep(Duration::from_millis(2));
        };
        let claimed_ns = now_ns();
        if roles.primary != "m" || roles.mirror_addr != self.backup.addr() {
            return Err(failed(
                "detect",
                format!(
                    "expected node m as primary and {} as mirror, the roles say {roles:?}",
                    self.backup.addr()
                ),
            ));
        }
        wait_status(self.mirror.addr(), "promote", |st| st.role == "primary" && st.epoch == roles.epoch)?;
        let promoted_ns = now_ns();
        Ok(Reaction {
            epoch: roles.epoch,
            region: self.mirror_dir.join("data.mojim"),
            detect_ms: ms(kill_ns, claimed_ns),
            promote_ms: ms(claimed_ns, promoted_ns),
            fence_ms: 0.0,
            drain_ms: None,
            backups_drained: None,
        })
    }
}

/// How a region in `dir` is made persistent: the mapping's kind and the instruction or call.
fn persistence_of(region: &Path) -> Result<(String, &'static str)> {
    let p = mojim_region::RegionFile::open(region)?.persistence();
    let flush = match p {
        mojim_region::Persistence::File => "msync",
        mojim_region::Persistence::Dax | mojim_region::Persistence::Memory => {
            let cpu = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
            if cpu.split_whitespace().any(|w| w == "clwb") {
                "clwb"
            } else {
                "clflush"
            }
        }
    };
    Ok((p.name().to_string(), flush))
}

/// One loss of the mirror by a primary whose region is in `dir` and was just written whole.
fn vulnerable(a: &BenchArgs, exe: &Path, round: usize, dir: &Path) -> Result<VulnerabilityRound> {
    let stage = "window of vulnerability";
    let scratch = Scratch::create(a.dir.join(format!("mojim-vulnerable-{}-{round}", std::process::id())))?;
    let region_dir =
        Scratch::create(dir.join(format!("mojim-vulnerable-region-{}-{round}", std::process::id())))?;
    let cfg = write_config(&scratch.0, a.region_size, None)?;
    let cfg = Config::load(&cfg)?;
    let region = region_dir.0.join("region.mojim");
    mojim::create_region(&region, cfg.region_id()?)?;
    let (data, flush) = persistence_of(&region)?;
    let mut mirror =
        serve(exe, &scratch.0.join("mojim.toml"), &scratch.0.join("m"), "m", a.busy_poll_us, None)?;
    let mut o = PrimaryOptions::from_config(&cfg, false)?;
    o.region_path = region;
    o.mirror = mirror.addr().to_string();
    o.mode = Mode::Sync;
    o.lanes = 1;
    o.failure.on_mirror_loss = OnMirrorLoss::Degrade;
    let p = Primary::open(&o)?;
    let piece = 1u64 << 20;
    let mut buf = vec![0u8; piece as usize];
    let mut rng = XorShift(mojim::random::u64() | 1);
    for off in (0..a.region_size).step_by(piece as usize) {
        for w in buf.chunks_mut(8) {
            w.copy_from_slice(&rng.next().to_le_bytes());
        }
        let n = piece.min(a.region_size - off) as usize;
        p.write(off, &buf[..n])?;
    }
    for k in 1..=64 {
        p.msync(group_offset(k, a.region_size, false), GROUP)?;
    }
    if p.status().mirror_losses != 0 {
        return Err(failed(stage, format!("the mirror was lost before the kill: {:?}", p.status())));
    }
    let t0 = Instant::now();
    mirror.kill();
    let mut k = 65;
    let noticed = loop {
        p.msync(group_offset(k, a.region_size, false), GROUP)?;
        if p.status().mirror_losses > 0 {
            break t0.elapsed();
        }
        if t0.elapsed() > STEP {
            return Err(failed(stage, format!("the primary did not notice the loss: {:?}", p.status())));
        }
        k += 1;
        std::thread::sleep(Duration::from_millis(1));
    };
    let st = p.status();
    let us =
        st.vulnerable_us.ok_or_else(|| failed(stage, format!("a loss without vulnerable_us: {st:?}")))?;
    drop(p);
    Ok(VulnerabilityRound {
        kind: "vulnerability",
        round,
        region_size: a.region_size,
        data,
        flush,
        dir: dir.display().to_string(),
        vulnerable_ms: us as f64 / 1e3,
        noticed_ms: noticed.as_secs_f64() * 1e3,
    })
}

fn summary(of: String, metric: &'static str, mut v: Vec<f64>) -> Summary {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let median = if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 };
    Summary { kind: "summary", of, metric, rounds: n, median, min: v[0], max: v[n - 1] }
}

type Figure<T> = (&'static str, fn(&T) -> f64);

const FAILOVER_FIGURES: [Figure<FailoverRound>; 9] = [
    ("detect_ms", |r| r.detect_ms),
    ("promote_ms", |r| r.promote_ms),
    ("fence_ms", |r| r.fence_ms),
    ("operator_ms", |r| r.operator_ms),
    ("open_ms", |r| r.open_ms),
    ("restart_ms", |r| r.restart_ms),
    ("total_ms", |r| r.total_ms),
    ("gap_ms", |r| r.gap_ms),
    ("resync_ms", |r| r.resync_ms),
];

const VULNERABILITY_FIGURES: [Figure<VulnerabilityRound>; 2] =
    [("vulnerable_ms", |r| r.vulnerable_ms), ("noticed_ms", |r| r.noticed_ms)];

fn summarise(failover: &[FailoverRound], vulnerability: &[VulnerabilityRound]) -> Vec<Summary> {
    let mut out = Vec::new();
    if let Some(first) = failover.first() {
        let of = format!("failover {}", first.coordinator);
        for (metric, f) in FAILOVER_FIGURES {
            out.push(summary(of.clone(), metric, failover.iter().map(f).collect()));
        }
    }
    let mut kinds: Vec<(String, &'static str)> = Vec::new();
    for v in vulnerability {
        if !kinds.iter().any(|k| k.0 == v.data && k.1 == v.flush) {
            kinds.push((v.data.clone(), v.flush));
        }
    }
    for (data, flush) in kinds {
        let of = format!("vulnerability {data} {flush}");
        let these: Vec<&VulnerabilityRound> =
            vulnerability.iter().filter(|v| v.data == data && v.flush == flush).collect();
        for (metric, f) in VULNERABILITY_FIGURES {
            out.push(summary(of.clone(), metric, these.iter().map(|v| f(v)).collect()));
        }
    }
    out
}

/// Prints the rounds and their summaries as tables, or every object as a JSON line.
pub fn print(a: &BenchArgs, r: &FailoverResults) {
    if a.json {
        let lines = r
            .failover
            .iter()
            .map(serde_json::to_string)
            .chain(r.vulnerability.iter().map(serde_json::to_string))
            .chain(r.summaries.iter().map(serde_json::to_string));
        for l in lines {
            println!("{}", l.unwrap_or_default());
        }
        return;
    }
    let coordinator = a.failover.coordinator.name();
    println!(
        "fail-over ({coordinator} coordinator), {} region, mode sync, one 4 KiB group per ms, {} round(s)",
        format_size(a.region_size),
        r.failover.len()
    );
    println!(
        "{:<6} {:>7} {:>8} {:>7} {:>9} {:>7} {:>8} {:>8} {:>7} {:>13}",
        "round", "detect", "promote", "fence", "operator", "open", "restart", "total", "gap", "resync"
    );
    for f in &r.failover {
        println!(
            "{:<6} {:>7.1} {:>8.1} {:>7.1} {:>9.1} {:>7.1} {:>8.1} {:>8.1} {:>7.1} {:>6} {:>6.1}",
            f.round,
            f.detect_ms,
            f.promote_ms,
            f.fence_ms,
            f.operator_ms,
            f.open_ms,
            f.restart_ms,
            f.total_ms,
            f.gap_ms,
            f.resync_kind,
            f.resync_ms
        );
    }
    match r.failover.first().and_then(|f| f.lease_ttl_ms) {
        None => println!("(milliseconds; detect is 0 for static: the operator acts at the kill)"),
        Some(ttl) => {
            let target = ttl as f64 + 1000.0;
            let met = r.failover.iter().filter(|f| f.total_ms <= target).count();
            println!(
                "(milliseconds; lease ttl {ttl} ms) target: total <= lease ttl + 1 s = {target:.0} ms: met in \
                 {met} of {} rounds",
                r.failover.len()
            );
        }
    }
    println!();
    println!(
        "window of vulnerability: {} region, mode sync, the whole region just written",
        format_size(a.region_size)
    );
    println!("{:<6} {:<8} {:<8} {:>14} {:>12}  dir", "round", "data", "flush", "vulnerable ms", "noticed ms");
    for v in &r.vulnerability {
        println!(
            "{:<6} {:<8} {:<8} {:>14.1} {:>12.1}  {}",
            v.round, v.data, v.flush, v.vulnerable_ms, v.noticed_ms, v.dir
        );
    }
    println!();
    println!("{:<28} {:<14} {:>10} {:>10} {:>10}", "summary", "metric", "median", "min", "max");
    for s in &r.summaries {
        println!("{:<28} {:<14} {:>10.1} {:>10.1} {:>10.1}", s.of, s.metric, s.median, s.min, s.max);
    }
}
