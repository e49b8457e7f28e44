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

use crate::bench::harness::{exe, lanes, Scratch, XorShift};
use crate::bench::BenchArgs;
use crate::child::ChildNode;
use indicatif::{ProgressBar, ProgressStyle};
use mojim::config::{template, ConfigFile, Limits, Mode, OnMirrorLoss, RegionId, Secret};
use mojim::error::{Error, Result};
use mojim::primary::{
    CopyKind, FailurePolicy, Primary, PrimaryOptions, ResyncStatus, COPY_FRAME, COPY_GROUP_BYTES,
};
use mojim::size::format_size;
use mojim_core::Range;
use mojim_format::{FrameHeader, FrameKind, FRAME_HEADER_SIZE};
use mojim_node::admin::AdminClient;
use mojim_node::{BackupStatus, MirrorStatus, MAX_READ};
use mojim_region::MappedFile;
use mojim_transport::tls::TlsPaths;
use mojim_transport::{Conn, TcpTransport, TlsContext, Transport};
use serde::Serialize;
use std::collections::HashSet;
use std::io::{IoSlice, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

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

/// One measured way of bringing a replica up to date.
#[derive(Clone, Debug, Serialize)]
pub struct ResyncResult {
    /// `tcp`, `full`, `bitmap` or `log`.
    pub kind: String,
    /// Bytes moved: the region (tcp, full), what the copy sent (bitmap), the changed bytes (log).
    pub bytes: u64,
    pub seconds: f64,
    /// Megabytes (10^6) per second.
    pub mb_per_s: f64,
    pub region_size: u64,
    pub changed_bytes: u64,
    pub lanes: u16,
    /// What was compared with the primary's copy afterwards.
    pub verified: String,
    /// `log`: seconds from the backup's restart (ready to serve) until it had caught up, which
    /// includes the mirror's wait before it reconnects.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub since_restart_s: Option<f64>,
    /// `full`: seconds `Primary::open` took before the copy's clock started (opening the region,
    /// every lane's handshake and the plan; the region's pages are mapped by a thread meanwhile
    /// and during the copy): not in `seconds`, but in `cpu_s`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub open_s: Option<f64>,
    /// `tcp-region`, `tcp-checked`: seconds taken to map the source file (every page) before the
    /// clock started, as opening the region did before a copy: not in `seconds`. The
    /// destination, like a mirror's data area, was made and mapped earlier.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub map_s: Option<f64>,
    /// `tcp`, `tcp-region`, `tcp-checked`, `full`: CPU seconds (user + system) the transfer cost
    /// both ends together, to the clock tick: every thread of the processes involved but the one
    /// timing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_s: Option<f64>,
}

impl ResyncResult {
    fn new(kind: &str, bytes: u64, seconds: f64, r: &Round<'_>, verified: String) -> ResyncResult {
        ResyncResult {
            kind: kind.into(),
            bytes,
            seconds,
            mb_per_s: if seconds > 0.0 { bytes as f64 / 1e6 / seconds } else { 0.0 },
            region_size: r.id.size,
            changed_bytes: r.chunks.len() as u64 * CHUNK,
            lanes: r.lanes,
            verified,
            since_restart_s: None,
            open_s: None,
            map_s: None,
            cpu_s: None,
        }
    }

    /// `tcp` measured twice around another kind: the mean time and CPU of the two.
    fn around(before: ResyncResult, after: ResyncResult, r: &Round<'_>, what: &str) -> ResyncResult {
        let seconds = (before.seconds + after.seconds) / 2.0;
        let verified = format!(
            "{}, {:.3} s before and {:.3} s after {what}",
            before.verified, before.seconds, after.seconds
        );
        let mut m = ResyncResult::new(&before.kind, before.bytes, seconds, r, verified);
        m.cpu_s = before.cpu_s.zip(after.cpu_s).map(|(b, a)| (b + a) / 2.0);
        m
    }
}

/// CPU time spent since it was made by the given processes, less the calling thread's (which
/// only times and waits).
struct CpuSpent {
    pids: Vec<u32>,
    at: Duration,
}

impl CpuSpent {
    fn since_now(pids: Vec<u32>) -> Result<CpuSpent> {
        let at = Self::total(&pids)?;
        Ok(CpuSpent { pids, at })
    }

    fn total(pids: &[u32]) -> Result<Duration> {
        let mut sum = Duration::ZERO;
        for &pid in pids {
            sum += crate::cpu_time::process(pid)
                .map_err(Error::io(format!("read the CPU time of process {pid}")))?;
        }
        let mine = crate::cpu_time::this_thread().map_err(Error::io("read this thread's CPU time"))?;
        Ok(sum.saturating_sub(mine))
    }

    fn seconds(&self) -> Result<f64> {
        Ok(Self::total(&self.pids)?.saturating_sub(self.at).as_secs_f64())
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

/// The set-up ratio of one round: `full`'s time with its opening over `tcp-region`'s, and over
/// `tcp-region`'s with the mapping of its source (`map_s`), which opening includes.
struct SetUp;

impl SetUp {
    fn of(results: &[ResyncResult]) -> Option<(f64, f64)> {
        let full = results.iter().find(|x| x.kind == "full")?;
        let base = results.iter().find(|x| x.kind == "tcp-region")?;
        let with_open = full.seconds + full.open_s?;
        Some((with_open / base.seconds, with_open / (base.seconds + base.map_s?)))
    }
}

/// Runs every round and returns, per kind, the round with the median time.
pub fn measure(a: &BenchArgs) -> Result<Vec<ResyncResult>> {
    Ok(medians(&rounds(a)?))
}

/// A bandwidth ratio between two kinds, measured side by side in each round.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Spread {
    min: f64,
    median: f64,
    max: f64,
    /// Rounds whose ratio is at least the target.
    meeting: usize,
}

impl Spread {
    /// `of`'s MB/s over `base`'s, round by round; `None` unless every round has both.
    fn of(rounds: &[Vec<ResyncResult>], of: &str, base: &str, target: f64) -> Option<Spread> {
        let mut ratios = rounds
            .iter()
            .map(|r| {
                let rate = |k: &str| r.iter().find(|x| x.kind == k).map(|x| x.mb_per_s);
                Some(rate(of)? / rate(base)?)
            })
            .collect::<Option<Vec<f64>>>()?;
        if ratios.is_empty() {
            return None;
        }
        ratios.sort_by(f64::total_cmp);
        Some(Spread {
            min: ratios[0],
            median: ratios[ratios.len() / 2],
            max: ratios[ratios.len() - 1],
            meeting: ratios.iter().filter(|&&x| x >= target).count(),
        })
    }
}

/// Per kind, the round with the median time.
fn medians(rounds: &[Vec<ResyncResult>]) -> Vec<ResyncResult> {
    let kinds = rounds.first().map_or(0, Vec::len);
    (0..kinds)
        .map(|k| {
            let mut v: Vec<ResyncResult> = rounds.iter().map(|r| r[k].clone()).collect();
            v.sort_by(|x, y| x.seconds.total_cmp(&y.seconds));
            v.swap_remove(v.len() / 2)
        })
        .collect()
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

/// A free loopback address (a node started on it right after keeps it across restarts).
fn free_addr() -> Result<String> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(Error::io("find a free port"))?;
    Ok(l.local_addr().map_err(Error::io("local address"))?.to_string())
}

/// A `mojim serve` child that can be killed and restarted on the same address and folder.
struct Node {
    exe: PathBuf,
    args: Vec<String>,
    addr: String,
    child: Option<ChildNode>,
    /// The operator's TLS settings, for a node with `[security] tls` on.
    operator_tls: Option<Arc<TlsContext>>,
}

impl Node {
    fn start(exe: &Path, cfg: &Path, dir: &Path, busy_poll_us: u64) -> Result<Node> {
        let addr = free_addr()?;
        let args = vec![
            "serve".to_string(),
            "--config".into(),
            cfg.to_string_lossy().into_owned(),
            "--listen".into(),
            addr.clone(),
            "--dir".into(),
            dir.to_string_lossy().into_owned(),
            "--busy-poll-us".into(),
            busy_poll_us.to_string(),
        ];
        let mut n = Node { exe: exe.to_path_buf(), args, addr, child: None, operator_tls: None };
        n.restart()?;
        Ok(n)
    }

    /// A crash, not a shutdown: SIGKILL, then reaped.
    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.kill();
        }
    }

    fn restart(&mut self) -> Result<()> {
        let args: Vec<&str> = self.args.iter().map(String::as_str).collect();
        let child = ChildNode::spawn(&self.exe, &args)?;
        if child.addr() != self.addr {
            return Err(failed(
                "restart",
                format!("node came up on {} instead of {}", child.addr(), self.addr),
            ));
        }
        self.child = Some(child);
        Ok(())
    }

    fn admin(&self) -> Result<AdminClient> {
        let secret = Secret(SECRET.to_vec());
        AdminClient::connect_tls(&self.addr, &secret, self.operator_tls.clone(), Duration::from_secs(5))
    }
}

fn bar(a: &BenchArgs, len: u64, template: &str, msg: &str) -> ProgressBar {
    if a.json {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::new(len);
    // The templates are constants known to be valid; fall back to the default bar regardless.
    let style = ProgressStyle::with_template(template)
        .map(|s| s.progress_chars("=> "))
        .unwrap_or_else(|_| ProgressStyle::default_bar());
    pb.set_style(style);
    pb.set_message(msg.to_string());
    pb
}

const BYTES_BAR: &str = "{elapsed_precise} [{wide_bar}] {bytes}/{total_bytes} ({bytes_per_sec}) {msg}";
const COUNT_BAR: &str = "{elapsed_precise} [{wide_bar}] {pos}/{len} {msg}";

fn fill(buf: &mut [u8], rng: &mut XorShift) {
    for w in buf.chunks_mut(8) {
        let x = rng.next().to_le_bytes();
        w.copy_from_slice(&x[..w.len()]);
    }
}

/// `n` distinct chunk numbers below `total` (Floyd's sampling), as byte offsets.
fn pick_chunks(total: u64, n: u64, rng: &mut XorShift) -> Vec<u64> {
    let mut set = HashSet::with_capacity(n as usize);
    let mut out = Vec::with_capacity(n as usize);
    for j in (total - n)..total {
        let t = rng.next() % (j + 1);
        let pick = if set.insert(t) { t } else { j };
        set.insert(pick);
        out.push(pick * CHUNK);
    }
    out
}

/// Where a raw TCP stream's bytes come from and go.
#[derive(Clone, Copy)]
enum Ends<'b> {
    /// One cache-resident buffer sent again and again, into a buffer that is read into again and
    /// again: the stream touches no memory beyond the caches.
    Buffer(&'b [u8]),
    /// A region-sized mapping into another; `checked`: as Copy frames, checked before they land.
    Region { from: &'b MappedFile, into: &'b MappedFile, checked: bool },
}

/// The header of `tcp-checked`'s Copy frame of `body` for region offset `at`.
fn checked_header(at: u64, body: &[u8]) -> [u8; FRAME_HEADER_SIZE] {
    let mut h = FrameHeader::new(FrameKind::Copy);
    h.offset = at;
    h.body_len = body.len() as u32;
    h.body_checksum = mojim_format::checksum::crc32c(body);
    h.to_bytes()
}

/// Receives one Copy frame of `tcp-checked` for `at` into `buf` and checks it, as a mirror does.
fn receive_checked(c: &mut impl Read, at: u64, buf: &mut [u8]) -> std::io::Result<()> {
    let mut hb = [0u8; FRAME_HEADER_SIZE];
    c.read_exact(&mut hb)?;
    let h = FrameHeader::decode(&hb).map_err(|e| std::io::Error::other(format!("frame for {at}: {e}")))?;
    if h.kind != FrameKind::Copy || h.offset != at || h.body_len as usize != buf.len() {
        return Err(std::io::Error::other(format!(
            "expected a Copy frame of {} bytes for {at}, got {:?} of {} for {}",
            buf.len(),
            h.kind,
            h.body_len,
            h.offset
        )));
    }
    c.read_exact(buf)?;
    h.check_body(buf).map_err(|e| std::io::Error::other(format!("frame for {at}: {e}")))
}

/// One round's region identity, changed chunks and folder.
struct Round<'a> {
    a: &'a BenchArgs,
    exe: PathBuf,
    dir: Scratch,
    base: String,
    id: RegionId,
    lanes: u16,
    /// Offsets of the chunks changed while a replica is away, in the order they are written.
    chunks: Vec<u64>,
    rng: XorShift,
    /// `--tls on` (or on,off): also measure `full-tls`.
    tls: bool,
}

impl<'a> Round<'a> {
    fn new(a: &'a BenchArgs, round: usize) -> Result<Round<'a>> {
        let dir = Scratch::create(a.dir.join(format!("mojim-resync-{}-{round}", std::process::id())))?;
        let id = RegionId { uuid: mojim::config::random_uuid(), size: a.region_size };
        let mut rng = XorShift(mojim::random::u64() | 1);
        let total = a.region_size / CHUNK;
        let n = ((total as f64 * a.resync.changed / 100.0).ceil() as u64).clamp(1, total);
        let chunks = pick_chunks(total, n, &mut rng);
        Ok(Round {
            a,
            exe: exe()?,
            dir,
            base: template(&id.uuid, id.size, "mojim-bench-secret", "127.0.0.1:0"),
            id,
            lanes: lanes(a),
            chunks,
            rng,
            tls: crate::bench::harness::tls_settings(a)?.contains(&"on"),
        })
    }

    fn run(mut self) -> Result<Vec<ResyncResult>> {
        let (tcp, full, bitmap) = self.full_and_bitmap()?;
        let full_tls = if self.tls { Some(self.full_tls()?) } else { None };
        let log = self.log()?;
        // Last, so that mapping and freeing region-sized files cannot weigh on the others.
        let tcp_region = self.tcp_region(false)?;
        let tcp_checked = self.tcp_region(true)?;
        let mut all = vec![tcp, tcp_region, tcp_checked, full];
        all.extend(full_tls);
        all.extend([bitmap, log]);
        Ok(all)
    }

    /// `full-tls`: `full` with every link mutual TLS (`[security] tls`, a CA and certificates
    /// made for the round): a new, empty mirror gets the whole region over TLS.
    fn full_tls(&mut self) -> Result<ResyncResult> {
        let scratch = Scratch::create(self.dir.0.join("copy-tls"))?;
        let region = scratch.0.join("region.mojim");
        self.prepare(&scratch.0, &region)?;
        self.say("full-tls: a new, empty mirror meets the primary, over mutual TLS");
        crate::certs::make_cluster_certs(&scratch.0, "")?;
        let file = |name: &str| scratch.0.join("tls").join(name);
        let paths = |role: &str| TlsPaths {
            ca: file("ca.pem"),
            cert: file(&format!("{role}.pem")),
            key: file(&format!("{role}.key")),
            crl: None,
        };
        let load = |role: &str| {
            TlsContext::load(&paths(role)).map(Arc::new).map_err(|e| Error::Config(e.to_string()))
        };
        let node = paths("node");
        let cfg = self.config(&scratch.0, "mirror", |f| {
            f.security.tls = true;
            f.security.ca_file = node.ca.to_string_lossy().into_owned();
            f.security.cert_file = node.cert.to_string_lossy().into_owned();
            f.security.key_file = node.key.to_string_lossy().into_owned();
        })?;
        let mut mirror = self.node(&cfg, &scratch.0.join("mirror"))?;
        mirror.operator_tls = Some(load("operator")?);
        let mut o = self.options(&region, &mirror.addr, Mode::Sync);
        o.tls = Some(load("application")?);
        let mirror_pid = mirror.child.as_ref().map(ChildNode::pid).expect("just started");
        let cpu = CpuSpent::since_now(vec![std::process::id(), mirror_pid])?;
        let opened = Instant::now();
        let p = Primary::open(&o)?;
        let open_s = opened.elapsed().as_secs_f64();
        let st = self.wait_copy(&p, "full-tls")?;
        let cpu_s = cpu.seconds()?;
        self.expect_full_copy(&st, "full-tls")?;
        let mut admin = mirror.admin()?;
        self.wait_applied(&p, &mut admin, "full-tls")?;
        self.compare(&p, &mut admin, &[(0, self.id.size)], "full-tls")?;
        let mut r = ResyncResult::new("full-tls", st.total_bytes, st.seconds, self, "whole region".into());
        r.cpu_s = Some(cpu_s);
        r.open_s = Some(open_s);
        drop(admin);
        p.close()?;
        mirror.kill();
        Ok(r)
    }

    /// A new, empty mirror must have been given the whole region.
    fn expect_full_copy(&self, st: &ResyncStatus, stage: &str) -> Result<()> {
        if st.kind == CopyKind::Full && st.total_bytes == self.id.size {
            return Ok(());
        }
        Err(failed(
            stage,
            format!(
                "a new mirror got a {} copy of {} bytes; expected a full copy of {} bytes",
                st.kind.name(),
                st.total_bytes,
                self.id.size
            ),
        ))
    }

    fn say(&self, what: &str) {
        if !self.a.json {
            eprintln!("bench: {what}");
        }
    }

    /// Writes a configuration for a node into `dir`, edited from the round's template.
    fn config(&self, dir: &Path, name: &str, edit: impl FnOnce(&mut ConfigFile)) -> Result<PathBuf> {
        let mut f: ConfigFile =
            toml::from_str(&self.base).map_err(|e| Error::Config(format!("benchmark config: {e}")))?;
        // A node makes the logs of the lanes the primary opens when it starts.
        f.primary.lanes = self.lanes;
        edit(&mut f);
        let text = toml::to_string(&f).map_err(|e| Error::Config(format!("benchmark config: {e}")))?;
        let p = dir.join(format!("{name}.toml"));
        mojim::config::write_private(&p, &text).map_err(Error::io(format!("write {}", p.display())))?;
        Ok(p)
    }

    fn options(&self, region: &Path, mirror: &str, mode: Mode) -> PrimaryOptions {
        PrimaryOptions {
            metrics_listen: None,
            region_path: region.to_path_buf(),
            mode,
            mirror: mirror.to_string(),
            lanes: self.lanes,
            secret: Secret(SECRET.to_vec()),
            tls: None,
            limits: Limits::default(),
            async_window: 256,
            connect_timeout: Duration::from_secs(5),
            busy_poll: Duration::from_micros(self.a.busy_poll_us),
            place_records: true,
            broadcast: Vec::new(),
            failure: FailurePolicy {
                on_mirror_loss: OnMirrorLoss::Degrade,
                dirty_chunk: CHUNK,
                ..FailurePolicy::default()
            },
            coordinator: None,
            node: String::new(),
            nvmm: Default::default(),
        }
    }

    fn node(&self, cfg: &Path, dir: &Path) -> Result<Node> {
        Node::start(&self.exe, cfg, dir, self.a.busy_poll_us)
    }

    /// `tcp`: the region's size over one loopback connection per lane into a reading sink.
    fn tcp(&mut self) -> Result<ResyncResult> {
        self.say("tcp: streaming the region's size over loopback TCP");
        let mut buf = vec![0u8; STREAM_PIECE as usize];
        fill(&mut buf, &mut self.rng);
        self.stream("tcp", Ends::Buffer(&buf))
    }

    /// `tcp-region` (and with `checked`, `tcp-checked`): the region's bytes over the same
    /// connections, from a mapping of a file like the primary's region into a mapping of a file
    /// like the mirror's data area (both in `--dir`, allocated and mapped before the clock
    /// starts), so the bytes cross memory as a copy's do.
    fn tcp_region(&mut self, checked: bool) -> Result<ResyncResult> {
        let kind = if checked { "tcp-checked" } else { "tcp-region" };
        self.say(&format!(
            "{kind}: streaming a region's bytes from memory into memory over loopback TCP{}",
            if checked { ", as checked Copy frames" } else { "" }
        ));
        let scratch = Scratch::create(self.dir.0.join(kind))?;
        let open = |name: &str| {
            let p = scratch.0.join(name);
            MappedFile::create(&p, self.id.size).map_err(|e| failed(kind, format!("{}: {e}", p.display())))
        };
        let (from, into) = (open("from")?, open("into")?);
        self.fill_region(|off, bytes| {
            from.write(off as usize, bytes);
            Ok(())
        })?;
        // Mapped anew and timed, as a primary opens its region before a copy.
        drop(from);
        let from_path = scratch.0.join("from");
        let mapping = Instant::now();
        let from = MappedFile::open(&from_path)
            .map_err(|e| failed(kind, format!("{}: {e}", from_path.display())))?;
        let map_s = mapping.elapsed().as_secs_f64();
        let mut r = self.stream(kind, Ends::Region { from: &from, into: &into, checked })?;
        r.map_s = Some(map_s);
        if from.view(0, from.len()).to_vec() != into.view(0, into.len()).to_vec() {
            return Err(failed(kind, "the bytes received differ from those sent".into()));
        }
        Ok(r)
    }

    /// Streams the region's size over one loopback connection per lane, each lane its own share.
    fn stream(&self, kind: &str, ends: Ends<'_>) -> Result<ResyncResult> {
        let total = self.id.size;
        let lanes = self.lanes as u64;
        let share = |i: u64| {
            (i * (total / lanes) + i.min(total % lanes), total / lanes + u64::from(i < total % lanes))
        };
        let listener = TcpTransport.listen("127.0.0.1:0").map_err(Error::io("listen for tcp"))?;
        let addr = TcpTransport.local_addr(&listener).map_err(Error::io("local address"))?;
        let poll = Duration::from_micros(self.a.busy_poll_us);
        let gate = std::sync::Barrier::new(self.lanes as usize + 1);
        let (received, secs, cpu_s) = std::thread::scope(|s| -> Result<(u64, f64, f64)> {
            let sink = s.spawn(|| -> std::io::Result<u64> {
                let mut conns = Vec::new();
                for i in 0..lanes {
                    let mut c = TcpTransport.accept(&listener)?;
                    c.set_busy_poll(poll);
                    // The first 8 bytes name the connection's lane.
                    let mut lane = [0u8; 8];
                    c.read_exact(&mut lane)?;
                    let lane = u64::from_le_bytes(lane);
                    if lane >= lanes {
                        return Err(std::io::Error::other(format!("connection {i} names lane {lane}")));
                    }
                    conns.push((lane, c));
                }
                std::thread::scope(|s2| {
                    let readers: Vec<_> = conns
                        .into_iter()
                        .map(|(lane, mut c)| {
                            s2.spawn(move || -> std::io::Result<u64> {
                                let (mut at, len) = share(lane);
                                let end = at + len;
                                if let Ends::Region { into, checked: true, .. } = ends {
                                    let mut buf = vec![0u8; COPY_FRAME as usize];
                                    while at < end {
                                        let n = (end - at).min(COPY_FRAME as u64) as usize;
                                        receive_checked(&mut c, at, &mut buf[..n])?;
                                        into.write_persistent(at as usize, &buf[..n])?;
                                        at += n as u64;
                                    }
                                    return Ok(len);
                                }
                                if let Ends::Region { into, .. } = ends {
                                    while at < end {
                                        let n = (end - at).min(STREAM_PIECE) as usize;
                                        into.recv_at(at as usize, n, &mut c)?;
                                        at += n as u64;
                                    }
                                    return Ok(len);
                                }
                                let mut b = vec![0u8; STREAM_PIECE as usize];
                                let mut n = 0u64;
                                loop {
                                    match c.read(&mut b)? {
                                        0 => return Ok(n),
                                        k => n += k as u64,
                                    }
                                }
                            })
                        })
                        .collect();
                    readers.into_iter().try_fold(0u64, |sum, r| {
                        Ok(sum + r.join().unwrap_or_else(|_| Err(std::io::Error::other("sink panicked")))?)
                    })
                })
            });
            let senders: Vec<_> = (0..lanes)
                .map(|i| {
                    let (addr, gate, share) = (&addr, &gate, &share);
                    s.spawn(move || -> std::io::Result<()> {
                        let mut c = TcpTransport.connect(addr, Duration::from_secs(5))?;
                        c.write_all(&i.to_le_bytes())?;
                        gate.wait();
                        let (mut at, len) = share(i);
                        let end = at + len;
                        if let Ends::Region { from, checked: true, .. } = ends {
                            // As a copy sends a group: its frames read and checksummed one by
                            // one into a snapshot, then written together.
                            let mut snapshot = vec![0u8; COPY_GROUP_BYTES as usize];
                            let frame = COPY_FRAME as usize;
                            let mut headers = Vec::new();
                            while at < end {
                                let n = (end - at).min(COPY_GROUP_BYTES) as usize;
                                headers.clear();
                                for (k, bytes) in snapshot[..n].chunks_mut(frame).enumerate() {
                                    let off = at + (k * frame) as u64;
                                    from.read(off as usize, bytes);
                                    headers.push(checked_header(off, bytes));
                                }
                                let mut iov: Vec<IoSlice<'_>> = headers
                                    .iter()
                                    .zip(snapshot[..n].chunks(frame))
                                    .flat_map(|(h, b)| [IoSlice::new(h), IoSlice::new(b)])
                                    .collect();
                                c.send_all_vectored(&mut iov)?;
                                at += n as u64;
                            }
                            c.shutdown();
                            return Ok(());
                        }
                        while at < end {
                            let n = (end - at).min(STREAM_PIECE) as usize;
                            match ends {
                                Ends::Buffer(buf) => c.write_all(&buf[..n])?,
                                Ends::Region { from, .. } => {
                                    c.send_all_vectored(&mut [from.view(at as usize, n).io_slice()])?
                                }
                            }
                            at += n as u64;
                        }
                        c.shutdown();
                        Ok(())
                    })
                })
                .collect();
            gate.wait();
            let cpu = CpuSpent::since_now(vec![std::process::id()])?;
            let t0 = Instant::now();
            for h in senders {
                h.join()
                    .unwrap_or_else(|_| Err(std::io::Error::other("sender panicked")))
                    .map_err(Error::io(format!("send over {kind}")))?;
            }
            let received = sink
                .join()
                .unwrap_or_else(|_| Err(std::io::Error::other("sink panicked")))
                .map_err(Error::io(format!("receive over {kind}")))?;
            let secs = t0.elapsed().as_secs_f64();
            Ok((received, secs, cpu.seconds()?))
        })?;
        if received != total {
            return Err(failed(kind, format!("the sink received {received} bytes of {total}")));
        }
        let verified = match ends {
            Ends::Buffer(_) => "bytes counted",
            Ends::Region { checked: false, .. } => "whole region",
            Ends::Region { checked: true, .. } => "every frame's CRC32C + whole region",
        };
        let mut r = ResyncResult::new(kind, total, secs, self, verified.into());
        r.cpu_s = Some(cpu_s);
        Ok(r)
    }

    /// `tcp` around `full`, then `bitmap` with the same primary and mirror.
    fn full_and_bitmap(&mut self) -> Result<(ResyncResult, ResyncResult, ResyncResult)> {
        let scratch = Scratch::create(self.dir.0.join("copy"))?;
        let region = scratch.0.join("region.mojim");
        self.prepare(&scratch.0, &region)?;

        self.say("full: a new, empty mirror meets the primary");
        let cfg = self.config(&scratch.0, "mirror", |_| {})?;
        let mut mirror = self.node(&cfg, &scratch.0.join("mirror"))?;
        let tcp_before = self.tcp()?;
        let mirror_pid = mirror.child.as_ref().map(ChildNode::pid).expect("just started");
        let cpu = CpuSpent::since_now(vec![std::process::id(), mirror_pid])?;
        let opened = Instant::now();
        let p = Primary::open(&self.options(&region, &mirror.addr, Mode::Sync))?;
        let open_s = opened.elapsed().as_secs_f64();
        let st = self.wait_copy(&p, "full")?;
        let full_cpu = cpu.seconds()?;
        self.expect_full_copy(&st, "full")?;
        let mut admin = mirror.admin()?;
        self.wait_applied(&p, &mut admin, "full")?;
        let tcp_after = self.tcp()?;
        let tcp = ResyncResult::around(tcp_before, tcp_after, self, "full");
        self.compare(&p, &mut admin, &[(0, self.id.size)], "full")?;
        let mut full = ResyncResult::new("full", st.total_bytes, st.seconds, self, "whole region".into());
        full.cpu_s = Some(full_cpu);
        full.open_s = Some(open_s);
        drop(admin);

        self.say(&format!(
            "bitmap: killing the mirror, changing {} chunks of 4KiB, restarting it",
            self.chunks.len()
        ));
        let before = p.status();
        let old = before.resync.clone();
        mirror.kill();
        let pb = bar(self.a, self.chunks.len() as u64, COUNT_BAR, "chunks changed while degraded");
        let mut page = vec![0u8; CHUNK as usize];
        for &off in &self.chunks {
            fill(&mut page, &mut self.rng);
            p.write(off, &page)?;
            p.msync(off, CHUNK)?;
            pb.inc(1);
        }
        pb.finish_and_clear();
        let st = p.status();
        if !st.degraded || st.dirty_bytes == 0 {
            return Err(failed(
                "bitmap",
                format!(
                    "after the mirror was killed and {} chunks changed, the primary is not degraded with a \
                     dirty bitmap: status {st:?}",
                    self.chunks.len()
                ),
            ));
        }
        let dirty_bytes = st.dirty_bytes;
        mirror.restart()?;
        self.wait_new_resync(&p, before.session, old.as_ref())?;
        let st = self.wait_copy(&p, "bitmap")?;
        if st.kind != CopyKind::Bitmap {
            return Err(failed(
                "bitmap",
                format!(
                    "the restarted mirror got a {} copy of {} bytes; expected a bitmap copy of the {dirty_bytes} \
                     dirty bytes",
                    st.kind.name(),
                    st.total_bytes
                ),
            ));
        }
        let mut admin = mirror.admin()?;
        self.wait_applied(&p, &mut admin, "bitmap")?;
        let verified = self.compare_changed(&p, &mut admin, "bitmap")?;
        let bitmap = ResyncResult::new("bitmap", st.total_bytes, st.seconds, self, verified);
        drop(admin);
        p.close()?;
        mirror.kill();
        Ok((tcp, full, bitmap))
    }

    /// Creates the region, gives it a history, and fills it with pseudo-random bytes. The history
    /// comes from a first session with a first mirror while both are still empty (nothing to
    /// copy); that mirror is then discarded, and the region is filled locally.
    fn prepare(&mut self, dir: &Path, region: &Path) -> Result<()> {
        mojim::create_region(region, self.id)?;
        let cfg = self.config(dir, "first", |_| {})?;
        let first_dir = dir.join("first-mirror");
        let mut first = self.node(&cfg, &first_dir)?;
        let p = Primary::open(&self.options(region, &first.addr, Mode::Sync))?;
        let st = p.status();
        p.close()?;
        first.kill();
        let _ = std::fs::remove_dir_all(&first_dir);
        if st.generation == 0 {
            return Err(failed(
                "full",
                format!("the first session left the region without a generation: {st:?}"),
            ));
        }
        let p = Primary::open(&self.options(region, "", Mode::Unreplicated))?;
        let pb = bar(self.a, self.id.size, BYTES_BAR, "filling the region");
        self.fill_region(|off, bytes| {
            p.write(off, bytes)?;
            p.msync(off, bytes.len() as u64)?;
            pb.set_position(off + bytes.len() as u64);
            Ok(())
        })?;
        pb.finish_and_clear();
        p.close()
    }

    /// Hands `put` the region's size in pseudo-random bytes, `FILL_PIECE` at a time, in order.
    fn fill_region(&mut self, mut put: impl FnMut(u64, &[u8]) -> Result<()>) -> Result<()> {
        let mut buf = vec![0u8; FILL_PIECE as usize];
        let mut off = 0;
        while off < self.id.size {
            let n = (self.id.size - off).min(FILL_PIECE) as usize;
            fill(&mut buf[..n], &mut self.rng);
            put(off, &buf[..n])?;
            off += n as u64;
        }
        Ok(())
    }

    /// Waits for the primary's current copy to finish, showing its progress.
    fn wait_copy(&self, p: &Primary, stage: &str) -> Result<ResyncStatus> {
        let Some(first) = p.status().resync else {
            return Err(failed(
                stage,
                "the session began without a copy (the primary planned: in sync)".into(),
            ));
        };
        let pb = bar(self.a, first.total_bytes, BYTES_BAR, &format!("{stage} copy"));
        // Generous: a copy slower than 5 MB/s is broken on any machine this runs on.
        let deadline =
            Instant::now() + Duration::from_secs(60) + Duration::from_secs(first.total_bytes / 5_000_000);
        loop {
            let st = p.wait_resync(Duration::from_millis(200));
            let Some(st) = st else {
                return Err(failed(stage, "the copy's status disappeared".into()));
            };
            pb.set_position(st.sent_bytes);
            if let Some(e) = &st.error {
                pb.finish_and_clear();
                return Err(failed(
                    stage,
                    format!("the {} copy failed: {e}; status {:?}", st.kind.name(), p.status()),
                ));
            }
            if st.done {
                pb.finish_and_clear();
                return Ok(st);
            }
            if Instant::now() > deadline {
                pb.finish_and_clear();
                return Err(failed(
                    stage,
                    format!(
                        "the {} copy did not finish in {:.0} s: {} of {} bytes sent; status {:?}",
                        st.kind.name(),
                        st.seconds,
                        st.sent_bytes,
                        st.total_bytes,
                        p.status()
                    ),
                ));
            }
        }
    }

    /// Waits until the keeper has reconnected (a session other than `old_session`) and that
    /// session's copy has begun.
    fn wait_new_resync(&self, p: &Primary, old_session: u64, old: Option<&ResyncStatus>) -> Result<()> {
        let same = |r: &ResyncStatus| {
            old.is_some_and(|o| {
                o.kind == r.kind
                    && o.total_bytes == r.total_bytes
                    && o.seconds.to_bits() == r.seconds.to_bits()
            })
        };
        let t0 = Instant::now();
        let mut reconnected: Option<Instant> = None;
        loop {
            let st = p.status();
            if st.session != 0 && st.session != old_session {
                let at = *reconnected.get_or_insert_with(Instant::now);
                if st.resync.as_ref().is_some_and(|r| !same(r)) {
                    return Ok(());
                }
                if at.elapsed() > Duration::from_secs(2) {
                    return Err(failed(
                        "bitmap",
                        format!(
                            "the restarted mirror's session began without a copy (the primary planned: in sync), \
                             although {} chunks changed while it was away; status {st:?}",
                            self.chunks.len()
                        ),
                    ));
                }
            } else if t0.elapsed() > Duration::from_secs(30) {
                return Err(failed(
                    "bitmap",
                    format!("the primary did not reconnect to the restarted mirror in 30 s; status {st:?}"),
                ));
            }
            std::thread::sleep(POLL);
        }
    }

    /// Waits until the mirror has applied every group the primary sent.
    fn wait_applied(&self, p: &Primary, admin: &mut AdminClient, stage: &str) -> Result<MirrorStatus> {
        let last = p.status().next_seq.saturating_sub(1);
        wait_status(admin, stage, Duration::from_secs(60), |st| st.applied_seq >= last && st.lag_groups == 0)
    }

    /// Compares `ranges` of the node's data area with the primary's copy.
    fn compare(
        &self,
        p: &Primary,
        admin: &mut AdminClient,
        ranges: &[(u64, u64)],
        stage: &str,
    ) -> Result<()> {
        let total = ranges.iter().map(|r| r.1).sum();
        let pb = bar(self.a, total, BYTES_BAR, &format!("{stage}: comparing with the primary"));
        let mut mine = vec![0u8; MAX_READ.min(total) as usize];
        for &(off, len) in ranges {
            let mut at = off;
            while at < off + len {
                let n = (off + len - at).min(MAX_READ);
                let theirs = admin.read(at, n)?;
                let mine = &mut mine[..n as usize];
                p.read(at, mine)?;
                if let Some(i) = (0..n as usize).find(|&i| theirs.get(i) != Some(&mine[i])) {
                    pb.finish_and_clear();
                    return Err(failed(
                        stage,
                        format!(
                            "data mismatch: the replica's byte at offset {} is {:?}, the primary's {:#04x} \
                             (compared {} bytes at {at})",
                            at + i as u64,
                            theirs.get(i),
                            mine[i],
                            n
                        ),
                    ));
                }
                at += n;
                pb.inc(n);
            }
        }
        pb.finish_and_clear();
        Ok(())
    }

    /// Compares the changed chunks and a sample of random 1 MiB windows; says what it compared.
    fn compare_changed(&mut self, p: &Primary, admin: &mut AdminClient, stage: &str) -> Result<String> {
        let mut sorted = self.chunks.clone();
        sorted.sort_unstable();
        let mut ranges: Vec<(u64, u64)> = Vec::new();
        for off in sorted {
            match ranges.last_mut() {
                Some(last) if last.0 + last.1 == off && last.1 < MAX_READ => last.1 += CHUNK,
                _ => ranges.push((off, CHUNK)),
            }
        }
        let window = (1u64 << 20).min(self.id.size);
        let windows = self.id.size / window;
        for _ in 0..SAMPLE_WINDOWS {
            ranges.push((self.rng.next() % windows * window, window));
        }
        self.compare(p, admin, &ranges, stage)?;
        Ok(format!("changed chunks + {SAMPLE_WINDOWS} random 1MiB windows"))
    }

    /// `log`: a mirror with one backup; the backup is killed, the primary changes the chunks,
    /// and the restarted backup catches up from the mirror's log. On a new (sparse) region of
    /// the same size: the catch-up's work is the changed bytes, not the region's.
    fn log(&mut self) -> Result<ResyncResult> {
        let scratch = Scratch::create(self.dir.0.join("log"))?;
        let region = scratch.0.join("region.mojim");
        mojim::create_region(&region, self.id)?;
        let changed = self.chunks.len() as u64 * CHUNK;
        // The mirror keeps every group until the backup has it; one writer uses one lane.
        let log_capacity = (2 * changed + (64 << 20)).next_multiple_of(CHUNK);
        let keep = |f: &mut ConfigFile| {
            f.mirror.log_capacity = log_capacity.to_string();
            f.mirror.secondary_tier_thresh = log_capacity.to_string();
        };
        let cfg = self.config(&scratch.0, "backup", keep)?;
        let mut backup = self.node(&cfg, &scratch.0.join("backup"))?;
        let backup_addr = backup.addr.clone();
        let cfg = self.config(&scratch.0, "mirror", |f| {
            keep(f);
            f.mirror.backups = vec![backup_addr];
        })?;
        let mirror = self.node(&cfg, &scratch.0.join("mirror"))?;
        let mut admin = mirror.admin()?;
        let p = Primary::open(&self.options(&region, &mirror.addr, Mode::Sync))?;
        let link = |st: &MirrorStatus| st.backups.first().cloned().unwrap_or_default();
        // A backup in service: it has received groups (and so created its log) before it fails.
        let mut page = vec![0u8; CHUNK as usize];
        fill(&mut page, &mut self.rng);
        p.write(0, &page)?;
        p.msync(0, CHUNK)?;
        let warm = p.status().next_seq.saturating_sub(1);
        wait_status(&mut admin, "log", Duration::from_secs(30), |st| {
            let l = link(st);
            l.connected && l.acked_seq >= warm
        })?;

        self.say(&format!(
            "log: killing the backup, changing {} chunks of 4KiB as groups",
            self.chunks.len()
        ));
        backup.kill();
        let pb = bar(self.a, self.chunks.len() as u64, COUNT_BAR, "chunks changed while the backup is away");
        for group in self.chunks.clone().chunks(GROUP_CHUNKS) {
            let mut ranges = Vec::with_capacity(group.len());
            for &off in group {
                fill(&mut page, &mut self.rng);
                p.write(off, &page)?;
                ranges.push(Range::new(off, CHUNK));
            }
            p.gmsync(&ranges)?;
            pb.inc(group.len() as u64);
        }
        pb.finish_and_clear();
        let st = self.wait_applied(&p, &mut admin, "log")?;
        let applied = st.applied_seq;
        let st = wait_status(&mut admin, "log", Duration::from_secs(30), |st| !link(st).connected)?;
        let before: BackupStatus = link(&st);
        if before.acked_seq >= applied {
            return Err(failed(
                "log",
                format!(
                    "the killed backup had acknowledged {} of {applied} groups already",
                    before.acked_seq
                ),
            ));
        }

        backup.restart()?;
        let restarted = Instant::now();
        let deadline = restarted + Duration::from_secs(60) + Duration::from_secs(changed / 1_000_000);
        let mut connected: Option<Instant> = None;
        let done = loop {
            let st = admin.status()?;
            let l = link(&st);
            let now = Instant::now();
            if l.needs_copy {
                return Err(failed(
                    "log",
                    format!("the mirror says the restarted backup needs a full copy: {:?}", l.error),
                ));
            }
            if l.connected {
                connected.get_or_insert(now);
                if l.acked_seq >= st.applied_seq {
                    break now;
                }
            }
            if now > deadline {
                return Err(failed(
                    "log",
                    format!(
                        "the restarted backup did not catch up in {:.0} s: {l:?}",
                        (now - restarted).as_secs_f64()
                    ),
                ));
            }
            std::thread::sleep(POLL);
        };
        let connected = connected.expect("set before the loop breaks");
        let mut backup_admin = backup.admin()?;
        wait_status(&mut backup_admin, "log", Duration::from_secs(60), |st| st.applied_seq >= applied)?;
        let verified = self.compare_changed(&p, &mut backup_admin, "log")?;
        let mut r = ResyncResult::new("log", changed, (done - connected).as_secs_f64(), self, verified);
        r.since_restart_s = Some((done - restarted).as_secs_f64());
        drop(backup_admin);
        drop(admin);
        p.close()?;
        Ok(r)
    }
}

/// Polls a node's status until `ready` holds, at most `timeout`.
fn wait_status(
    admin: &mut AdminClient,
    stage: &str,
    timeout: Duration,
    ready: impl Fn(&MirrorStatus) -> bool,
) -> Result<MirrorStatus> {
    let t0 = Instant::now();
    loop {
        let st = admin.status()?;
        if ready(&st) {
            return Ok(st);
        }
        if t0.elapsed() > timeout {
            return Err(failed(
                stage,
                format!("waited {} s for the node; its status: {st:?}", timeout.as_secs()),
            ));
        }
        std::thread::sleep(POLL);
    }
}

/// Prints results as a table with the two ratios, or as JSON lines.
pub fn print(results: &[ResyncResult], json: bool) {
    if json {
        for r in results {
            println!("{}", serde_json::to_string(r).unwrap_or_default());
        }
        return;
    }
    println!("{:<11} {:>14} {:>10} {:>9} {:>7}  verified", "kind", "bytes", "seconds", "MB/s", "CPU s");
    for r in results {
        let cpu = r.cpu_s.map_or("-".to_string(), |c| format!("{c:.2}"));
        println!(
            "{:<11} {:>14} {:>10.3} {:>9.1} {:>7}  {}",
            r.kind, r.bytes, r.seconds, r.mb_per_s, cpu, r.verified
        );
    }
    let find = |k: &str| results.iter().find(|r| r.kind == k);
    if let Some(l) = find("log").and_then(|l| l.since_restart_s.map(|s| (l, s))) {
        println!("log: {:.3} s from the backup's restart, {:.3} s from its reconnection", l.1, l.0.seconds);
    }
    if let Some(f) = find("full").and_then(|f| f.open_s.map(|s| (f, s))) {
        println!(
            "full: the primary opened in {:.3} s (the region, every lane's handshake and the plan; the region's \
             pages are mapped meanwhile and during the copy), then the copy took {:.3} s; CPU s counts both",
            f.1, f.0.seconds
        );
    }
    if let (Some(f), Some(t)) = (find("full"), find("tcp")) {
        println!("full/tcp bandwidth = {:.2} (target >= 0.8)", f.mb_per_s / t.mb_per_s);
        if let (Some(fc), Some(tc)) = (f.cpu_s, t.cpu_s.filter(|&c| c > 0.0)) {
            println!("full/tcp CPU per byte = {:.2}", (fc / f.bytes as f64) / (tc / t.bytes as f64));
        }
    }
    if let (Some(ft), Some(f)) = (find("full-tls"), find("full")) {
        println!("full-tls/full bandwidth = {:.2} (target >= 0.8)", ft.mb_per_s / f.mb_per_s);
        if let (Some(tc), Some(fc)) = (ft.cpu_s, f.cpu_s.filter(|&c| c > 0.0)) {
            println!("full-tls/full CPU per byte = {:.2}", (tc / ft.bytes as f64) / (fc / f.bytes as f64));
        }
    }
    for base in ["tcp-region", "tcp-checked"] {
        if let (Some(f), Some(t)) = (find("full"), find(base)) {
            println!("full/{base} bandwidth = {:.2}", f.mb_per_s / t.mb_per_s);
        }
    }
    if let (Some(f), Some(t)) = (find("full"), find("tcp-region")) {
        if let (Some(open), Some(map)) = (f.open_s, t.map_s) {
            println!(
                "(full + open)/tcp-region time = {:.2} (target <= 1.25); against tcp-region + mapping its source \
                 ({map:.3} s): {:.2}",
                (f.seconds + open) / t.seconds,
                (f.seconds + open) / (t.seconds + map)
            );
        }
    }
    if let (Some(b), Some(f)) = (find("bitmap"), find("full")) {
        println!("bitmap/full time = {:.4} (target <= 0.05)", b.seconds / f.seconds);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(kind: &str, mb_per_s: f64) -> ResyncResult {
        ResyncResult {
            kind: kind.into(),
            bytes: 1,
            seconds: 1.0 / mb_per_s,
            mb_per_s,
            region_size: 1,
            changed_bytes: 0,
            lanes: 1,
            verified: String::new(),
            since_restart_s: None,
            open_s: None,
            map_s: None,
            cpu_s: None,
        }
    }

    #[test]
    fn a_checked_stream_refuses_a_frame_that_is_not_the_one_expected() {
        let body: Vec<u8> = (0..4096u32).map(|i| (i * 7) as u8).collect();
        let frame = |at: u64, body: &[u8]| [&checked_header(at, body)[..], body].concat();
        let mut buf = vec![0u8; body.len()];
        receive_checked(&mut &frame(8192, &body)[..], 8192, &mut buf).expect("the frame expected");
        assert_eq!(buf, body);

        let mut flipped = frame(8192, &body);
        flipped[FRAME_HEADER_SIZE + 100] ^= 1;
        let e = receive_checked(&mut &flipped[..], 8192, &mut buf).expect_err("a changed body");
        assert!(e.to_string().contains("frame for 8192") && e.to_string().contains("checksum"), "{e}");

        let e = receive_checked(&mut &frame(0, &body)[..], 8192, &mut buf).expect_err("another offset");
        assert!(e.to_string().contains("expected a Copy frame of 4096 bytes for 8192"), "{e}");
        let e = receive_checked(&mut &frame(8192, &body[..100])[..], 8192, &mut buf).expect_err("shorter");
        assert!(e.to_string().contains("of 100 for 8192"), "{e}");

        let mut header = frame(8192, &body);
        header[20] ^= 1;
        let e = receive_checked(&mut &header[..], 8192, &mut buf).expect_err("a changed header");
        assert!(e.to_string().contains("frame for 8192"), "{e}");

        let cut = frame(8192, &body);
        let e = receive_checked(&mut &cut[..cut.len() - 1], 8192, &mut buf).expect_err("a cut stream");
        assert_eq!(e.kind(), std::io::ErrorKind::UnexpectedEof, "{e}");
    }

    #[test]
    fn the_spread_of_a_ratio_is_taken_round_by_round() {
        let rounds: Vec<Vec<ResyncResult>> = [(100.0, 90.0), (200.0, 100.0), (100.0, 70.0)]
            .iter()
            .map(|&(tcp, full)| vec![result("tcp", tcp), result("full", full)])
            .collect();
        let s = Spread::of(&rounds, "full", "tcp", 0.8).expect("every round has both kinds");
        assert_eq!(s, Spread { min: 0.5, median: 0.7, max: 0.9, meeting: 1 });
        // The medians' ratio can look better than most rounds: 90 / 100 here.
        let m = medians(&rounds);
        assert_eq!((m[0].mb_per_s, m[1].mb_per_s), (100.0, 90.0));
        assert_eq!(Spread::of(&rounds, "full", "bitmap", 0.8), None);
        assert_eq!(Spread::of(&[], "full", "tcp", 0.8), None);
    }
}
