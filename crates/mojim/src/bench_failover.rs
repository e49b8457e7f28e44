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
//!   history on its data area), then `fence` at that epoch to B. It then starts a new worker
//!   on M's data area with B as its mirror. The new worker first checks that the last group
//!   the killed worker had acknowledged is whole in its copy.
//! - `etcd` coordinator: not available yet (see [`run`]).
//!
//! `total_ms` runs from the kill to the new worker's first acknowledgement; the timestamps of
//! both processes come from the system's real-time clock, on the same machine.
//!
//! Window of vulnerability, each round: an in-process primary of `--region-size` in mode `sync`
//! whose whole region was just written (the worst case: every byte may be dirty in a cache)
//! loses its mirror (SIGKILL). On the loss the primary makes its whole copy persistent before
//! anything else; until then the groups the mirror had acknowledged existed only in volatile
//! caches. `PrimaryStatus::vulnerable_us` is that time. Measured with the region on `--dir`
//! (tmpfs: cache-line write-back) and on `--disk-dir` (an ordinary file system: msync).

use crate::admin::AdminClient;
use crate::bench::{exe, BenchArgs, XorShift};
use crate::child::ChildNode;
use crate::config::{template, Config, ConfigFile, Mode, OnMirrorLoss, RegionId, Secret};
use crate::error::{Error, Result};
use crate::mirror::MirrorStatus;
use crate::primary::{Primary, PrimaryOptions};
use crate::size::format_size;
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
const SECRET: &[u8] = b"bench";
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
    /// Kill → the coordinator has noticed (0 for static: the operator acts at the kill).
    pub detect_ms: f64,
    /// The `promote` command on the mirror.
    pub promote_ms: f64,
    /// The `fence` command on the backup.
    pub fence_ms: f64,
    /// Stopping the promoted node's daemon (SIGTERM until it has exited).
    pub stop_ms: f64,
    /// Kill → the killed worker is gone (reaped: its memory unmapped, its sockets closed).
    pub reap_ms: f64,
    /// Kill → the new worker started (the reap, connecting, reading epochs, promote, fence,
    /// stop).
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
    pub drain_ms: u64,
    pub backups_drained: bool,
    /// The new primary's resynchronisation of its mirror (the old backup): kind, seconds and
    /// bytes; it runs beside the application's sync points.
    pub resync_kind: String,
    pub resync_ms: f64,
    pub resync_bytes: u64,
    /// Groups the killed worker had acknowledged; the last one was found whole.
    pub acked_before_kill: u64,
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
    if f.coordinator == Coordinator::Etcd {
        return Err(Error::Config(
            "--coordinator etcd is not available yet in bench --mode failover: the etcd coordinator \
             ([cluster] coordinator = \"etcd\") is not finished; use --coordinator static"
                .into(),
        ));
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
                "round {round}: total {:.1} ms = operator {:.1} ms (reap {:.1}, promote {:.1}, fence {:.1}) \
                 + restart {:.1} ms (open {:.1}); resync {} of {} bytes in {:.1} ms",
                r.total_ms,
                r.operator_ms,
                r.reap_ms,
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

/// A folder removed when dropped (declare it before what lives in it).
struct Scratch(PathBuf);

impl Scratch {
    fn create(p: PathBuf) -> Result<Scratch> {
        std::fs::create_dir_all(&p).map_err(Error::io(format!("create {}", p.display())))?;
        Ok(Scratch(p))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Writes the configuration every node and worker of a round uses: a new region of `size`
/// bytes, one lane.
fn write_config(dir: &Path, size: u64) -> Result<PathBuf> {
    let id = RegionId { uuid: crate::config::random_uuid(), size };
    let base = template(&id.uuid, id.size, "bench", "127.0.0.1:0");
    let mut f: ConfigFile =
        toml::from_str(&base).map_err(|e| Error::Config(format!("benchmark config: {e}")))?;
    f.primary.lanes = 1;
    let text = toml::to_string(&f).map_err(|e| Error::Config(format!("benchmark config: {e}")))?;
    let p = dir.join("mojim.toml");
    std::fs::write(&p, text).map_err(Error::io(format!("write {}", p.display())))?;
    Ok(p)
}

/// Starts `mojim serve` on a free loopback port with its data under `dir`.
fn serve(exe: &Path, cfg: &Path, dir: &Path, busy_poll_us: u64, backup: Option<&str>) -> Result<ChildNode> {
    let cfg = cfg.to_string_lossy();
    let dir = dir.to_string_lossy();
    let poll = busy_poll_us.to_string();
    let mut args = vec!["serve", "--config", &cfg, "--listen", "127.0.0.1:0", "--dir", &dir];
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

/// Where group `k` goes in a region of `size` bytes.
fn group_offset(k: u64, size: u64) -> u64 {
    k % (size / GROUP) * GROUP
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
    /// The first group's number; group k writes 4 KiB at slot k of the region.
    #[arg(long, default_value_t = 1)]
    pub start_k: u64,
    /// Before writing, check that group K is whole in the region (0: no check).
    #[arg(long, default_value_t = 0)]
    pub check_k: u64,
    /// Poll for acknowledgements this many microseconds before sleeping.
    #[arg(long, default_value_t = 0)]
    pub busy_poll_us: u64,
}

/// The worker: opens the region as primary in mode `sync` and syncs one 4 KiB group per
/// interval until killed. It prints one line per event, each with a real-time timestamp:
/// `open NS`, `checked K ok` (or `checked K bad WHY`), `ack K NS` per acknowledged group,
/// `resync KIND SECONDS BYTES` (or `resync none`, `resync failed WHY`) when the session's copy
/// has finished, and `error WHY` before it exits on an error.
pub fn worker(w: &WorkerArgs) -> Result<()> {
    let cfg = Config::load(&w.config)?;
    let mut o = PrimaryOptions::from_config(&cfg, false)?;
    o.region_path = w.region.clone();
    o.mirror = w.mirror.clone();
    o.mode = Mode::Sync;
    o.lanes = 1;
    o.busy_poll = Duration::from_micros(w.busy_poll_us);
    let p = match Primary::open(&o) {
        Ok(p) => p,
        Err(e) => {
            println!("error open: {e}");
            return Err(e);
        }
    };
    println!("open {}", now_ns());
    let size = p.size();
    if w.check_k != 0 {
        let mut got = vec![0u8; GROUP as usize];
        p.read(group_offset(w.check_k, size), &mut got)?;
        let want = group_bytes(w.check_k);
        match (0..got.len()).find(|&i| got[i] != want[i]) {
            None => println!("checked {} ok", w.check_k),
            Some(i) => println!(
                "checked {} bad: byte {i} of the group at offset {} is {:#04x}, not {:#04x}",
                w.check_k,
                group_offset(w.check_k, size),
                got[i],
                want[i]
            ),
        }
    }
    let interval = Duration::from_micros(w.interval_us);
    std::thread::scope(|s| {
        s.spawn(|| match p.wait_resync(Duration::from_secs(3600)) {
            None => println!("resync none"),
            Some(r) if r.done => println!("resync {} {} {}", r.kind.name(), r.seconds, r.total_bytes),
            Some(r) => println!("resync failed {}", r.error.unwrap_or_else(|| "did not finish".into())),
        });
        let mut next = Instant::now();
        for k in w.start_k.. {
            let off = group_offset(k, size);
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
    Checked(u64, std::result::Result<(), String>),
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
            "checked" if f.get(2) == Some(&"ok") => Event::Checked(num(1)?, Ok(())),
            "checked" => Event::Checked(num(1)?, Err(f[2..].join(" "))),
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
        start_k: u64,
        check_k: u64,
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
            .args(["--mirror", mirror, "--start-k", &start_k.to_string(), "--check-k", &check_k.to_string()])
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

    /// SIGKILL, reaped; returns the last acknowledgement it printed, if any.
    fn kill(&mut self) -> Option<(u64, u64)> {
        let _ = self.child.kill();
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

/// One fail-over round's cluster.
struct FailoverRun<'a> {
    a: &'a BenchArgs,
    exe: PathBuf,
    round: usize,
    cfg: PathBuf,
    // Dropped in order: the worker and nodes before their folder.
    worker: Option<Worker>,
    mirror: ChildNode,
    backup: ChildNode,
    _dir: Scratch,
}

impl<'a> FailoverRun<'a> {
    fn start(a: &'a BenchArgs, exe: &Path, round: usize) -> Result<FailoverRun<'a>> {
        let dir = Scratch::create(a.dir.join(format!("mojim-failover-{}-{round}", std::process::id())))?;
        let cfg = write_config(&dir.0, a.region_size)?;
        let backup = serve(exe, &cfg, &dir.0.join("b"), a.busy_poll_us, None)?;
        let mirror = serve(exe, &cfg, &dir.0.join("m"), a.busy_poll_us, Some(backup.addr()))?;
        let region = dir.0.join("a").join("region.mojim");
        std::fs::create_dir_all(dir.0.join("a")).map_err(Error::io("create the primary's folder"))?;
        let cfg_now = Config::load(&cfg)?;
        crate::create_region(&region, cfg_now.region_id()?)?;
        let worker = Worker::spawn(exe, &cfg, &region, mirror.addr(), 1, 0)?;
        Ok(FailoverRun {
            a,
            exe: exe.to_path_buf(),
            round,
            cfg,
            worker: Some(worker),
            mirror,
            backup,
            _dir: dir,
        })
    }

    fn run(mut self) -> Result<FailoverRound> {
        // Steady: the worker has had WARM_ACKS groups acknowledged, and the mirror feeds the
        // backup (so the promotion has a backup to drain and the new mirror has a copy).
        let w = self.worker.as_ref().expect("started with a worker");
        let mut acked = 0;
        let mut last = None;
        while acked < WARM_ACKS {
            if let Event::Ack { k, ns } = w.next("warm-up")? {
                acked += 1;
                last = Some((k, ns));
            }
        }
        wait_status(self.mirror.addr(), "warm-up", |st| st.backups.first().is_some_and(|b| b.connected))?;

        let kill_ns = now_ns();
        let (last_k, last_ns) = self
            .worker
            .take()
            .expect("started with a worker")
            .kill()
            .or(last)
            .ok_or_else(|| failed("kill", "the killed worker had printed no acknowledgement".into()))?;
        let reap_ms = ms(kill_ns, now_ns());

        // The operator, as `mojim promote --addr M --peer B`.
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
        // The application opens the promoted data area itself; the promoted node's daemon keeps
        // feeding its backup at the new epoch, and its reconnection there would replace the new
        // primary's session on that backup: stop it first.
        let t = Instant::now();
        self.mirror.stop();
        let stop_ms = t.elapsed().as_secs_f64() * 1e3;
        let region = reply["region_path"]
            .as_str()
            .map(PathBuf::from)
            .ok_or_else(|| failed("promote", format!("the reply names no region_path: {reply}")))?;
        let w = Worker::spawn(&self.exe, &self.cfg, &region, self.backup.addr(), last_k + 1, last_k)?;
        let spawn_ns = w.started_ns;

        let mut open_ns = None;
        let mut first_ns = None;
        let mut resync = None;
        let mut after = 0;
        while first_ns.is_none() || resync.is_none() || after < AFTER_ACKS {
            match w.next("restart")? {
                Event::Open(ns) => open_ns = Some(ns),
                Event::Checked(k, Ok(())) if k == last_k => {}
                Event::Checked(k, res) => {
                    return Err(failed(
                        "restart",
                        format!(
                            "the last acknowledged group ({k}) is not whole on the promoted node: {res:?}"
                        ),
                    ))
                }
                Event::Ack { ns, .. } => {
                    first_ns.get_or_insert(ns);
                    after += 1;
                }
                Event::Resync { kind, seconds, bytes } => resync = Some((kind, seconds, bytes)),
                Event::Failed(_) | Event::Exit => unreachable!("next() returns these as errors"),
            }
        }
        self.worker = Some(w);
        let st = admin(self.backup.addr())?.status()?;
        if st.epoch != epoch || st.session.is_none() {
            return Err(failed(
                "restart",
                format!("the old backup is not the new primary's mirror at epoch {epoch}: {st:?}"),
            ));
        }
        let first_ns = first_ns.expect("the loop ends after the first acknowledgement");
        let (resync_kind, resync_s, resync_bytes) = resync.expect("the loop ends after the resync");
        let restart_ms = ms(spawn_ns, first_ns);
        Ok(FailoverRound {
            kind: "failover",
            coordinator: self.a.failover.coordinator.name(),
            round: self.round,
            region_size: self.a.region_size,
            detect_ms: 0.0,
            promote_ms,
            fence_ms,
            stop_ms,
            reap_ms,
            operator_ms: ms(kill_ns, spawn_ns),
            open_ms: open_ns.map_or(f64::NAN, |ns| ms(spawn_ns, ns)),
            restart_ms,
            first_ack_ms: restart_ms,
            total_ms: ms(kill_ns, first_ns),
            gap_ms: ms(last_ns, first_ns),
            drain_ms: reply["drain_ms"].as_u64().unwrap_or(0),
            backups_drained: reply["backups_drained"].as_bool().unwrap_or(false),
            resync_kind,
            resync_ms: resync_s * 1e3,
            resync_bytes,
            acked_before_kill: last_k,
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
    let cfg = write_config(&scratch.0, a.region_size)?;
    let cfg = Config::load(&cfg)?;
    let region = region_dir.0.join("region.mojim");
    crate::create_region(&region, cfg.region_id()?)?;
    let (data, flush) = persistence_of(&region)?;
    let mut mirror = serve(exe, &scratch.0.join("mojim.toml"), &scratch.0.join("m"), a.busy_poll_us, None)?;
    let mut o = PrimaryOptions::from_config(&cfg, false)?;
    o.region_path = region;
    o.mirror = mirror.addr().to_string();
    o.mode = Mode::Sync;
    o.lanes = 1;
    o.failure.on_mirror_loss = OnMirrorLoss::Degrade;
    let p = Primary::open(&o)?;
    let piece = 1u64 << 20;
    let mut buf = vec![0u8; piece as usize];
    let mut rng = XorShift(crate::random::u64() | 1);
    for off in (0..a.region_size).step_by(piece as usize) {
        for w in buf.chunks_mut(8) {
            w.copy_from_slice(&rng.next().to_le_bytes());
        }
        let n = piece.min(a.region_size - off) as usize;
        p.write(off, &buf[..n])?;
    }
    for k in 1..=64 {
        p.msync(group_offset(k, a.region_size), GROUP)?;
    }
    if p.status().mirror_losses != 0 {
        return Err(failed(stage, format!("the mirror was lost before the kill: {:?}", p.status())));
    }
    let t0 = Instant::now();
    mirror.kill();
    let mut k = 65;
    let noticed = loop {
        p.msync(group_offset(k, a.region_size), GROUP)?;
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

const FAILOVER_FIGURES: [Figure<FailoverRound>; 11] = [
    ("detect_ms", |r| r.detect_ms),
    ("reap_ms", |r| r.reap_ms),
    ("promote_ms", |r| r.promote_ms),
    ("fence_ms", |r| r.fence_ms),
    ("stop_ms", |r| r.stop_ms),
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
        "{:<6} {:>7} {:>7} {:>8} {:>7} {:>9} {:>7} {:>8} {:>8} {:>7} {:>13}",
        "round",
        "detect",
        "reap",
        "promote",
        "fence",
        "operator",
        "open",
        "restart",
        "total",
        "gap",
        "resync"
    );
    for f in &r.failover {
        println!(
            "{:<6} {:>7.1} {:>7.1} {:>8.1} {:>7.1} {:>9.1} {:>7.1} {:>8.1} {:>8.1} {:>7.1} {:>6} {:>6.1}",
            f.round,
            f.detect_ms,
            f.reap_ms,
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
    println!("(milliseconds; detect is 0 for static: the operator acts at the kill)");
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
