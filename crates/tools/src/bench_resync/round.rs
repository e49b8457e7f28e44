//! One round: its region identity, changed chunks and folder, the kinds it runs in order, and
//! the steps they share (configurations, nodes, filling the region, comparing the copies).

use super::node::{wait_status, Node};
use super::result::ResyncResult;
use super::{failed, CHUNK, FILL_PIECE, SAMPLE_WINDOWS, SECRET};
use crate::bench::harness::{exe, lanes, Scratch, XorShift};
use crate::bench::BenchArgs;
use indicatif::{ProgressBar, ProgressStyle};
use mojim::config::{template, ConfigFile, Limits, Mode, OnMirrorLoss, RegionId, Secret};
use mojim::error::{Error, Result};
use mojim::primary::{FailurePolicy, Primary, PrimaryOptions};
use mojim_node::admin_client::AdminClient;
use mojim_node::{MirrorStatus, MAX_READ};
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// One round's region identity, changed chunks and folder.
pub(super) struct Round<'a> {
    pub(super) a: &'a BenchArgs,
    pub(super) exe: PathBuf,
    pub(super) dir: Scratch,
    pub(super) base: String,
    pub(super) id: RegionId,
    pub(super) lanes: u16,
    /// Offsets of the chunks changed while a replica is away, in the order they are written.
    pub(super) chunks: Vec<u64>,
    pub(super) rng: XorShift,
    /// `--tls on` (or on,off): also measure `full-tls`.
    pub(super) tls: bool,
}

impl<'a> Round<'a> {
    pub(super) fn new(a: &'a BenchArgs, round: usize) -> Result<Round<'a>> {
        let dir = Scratch::create(a.dir.join(format!("mojim-resync-{}-{round}", std::process::id())))?;
        let id = RegionId { uuid: mojim::config::random_uuid(), size: a.region_size };
        let mut rng = XorShift(mojim_transport::random::u64() | 1);
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

    pub(super) fn run(mut self) -> Result<Vec<ResyncResult>> {
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

    pub(super) fn say(&self, what: &str) {
        if !self.a.json {
            eprintln!("bench: {what}");
        }
    }

    /// Writes a configuration for a node into `dir`, edited from the round's template.
    pub(super) fn config(
        &self,
        dir: &Path,
        name: &str,
        edit: impl FnOnce(&mut ConfigFile),
    ) -> Result<PathBuf> {
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

    pub(super) fn options(&self, region: &Path, mirror: &str, mode: Mode) -> PrimaryOptions {
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

    pub(super) fn node(&self, cfg: &Path, dir: &Path) -> Result<Node> {
        Node::start(&self.exe, cfg, dir, self.a.busy_poll_us)
    }

    /// Creates the region, gives it a history, and fills it with pseudo-random bytes. The history
    /// comes from a first session with a first mirror while both are still empty (nothing to
    /// copy); that mirror is then discarded, and the region is filled locally.
    pub(super) fn prepare(&mut self, dir: &Path, region: &Path) -> Result<()> {
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
    pub(super) fn fill_region(&mut self, mut put: impl FnMut(u64, &[u8]) -> Result<()>) -> Result<()> {
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

    /// Waits until the mirror has applied every group the primary sent.
    pub(super) fn wait_applied(
        &self,
        p: &Primary,
        admin: &mut AdminClient,
        stage: &str,
    ) -> Result<MirrorStatus> {
        let last = p.status().next_seq.saturating_sub(1);
        wait_status(admin, stage, Duration::from_secs(60), |st| st.applied_seq >= last && st.lag_groups == 0)
    }

    /// Compares `ranges` of the node's data area with the primary's copy.
    pub(super) fn compare(
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
    pub(super) fn compare_changed(
        &mut self,
        p: &Primary,
        admin: &mut AdminClient,
        stage: &str,
    ) -> Result<String> {
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
}

pub(super) fn bar(a: &BenchArgs, len: u64, template: &str, msg: &str) -> ProgressBar {
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

pub(super) const BYTES_BAR: &str =
    "{elapsed_precise} [{wide_bar}] {bytes}/{total_bytes} ({bytes_per_sec}) {msg}";

pub(super) const COUNT_BAR: &str = "{elapsed_precise} [{wide_bar}] {pos}/{len} {msg}";

pub(super) fn fill(buf: &mut [u8], rng: &mut XorShift) {
    for w in buf.chunks_mut(8) {
        let x = rng.next().to_le_bytes();
        w.copy_from_slice(&x[..w.len()]);
    }
}

/// `n` distinct chunk numbers below `total` (Floyd's sampling), as byte offsets.
pub(super) fn pick_chunks(total: u64, n: u64, rng: &mut XorShift) -> Vec<u64> {
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
