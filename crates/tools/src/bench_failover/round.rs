//! One fail-over round: the primary killed, the coordinator's reaction (`static` or `etcd`)
//! timed, and a new primary started on the promoted node.

use super::node::{admin, serve, wait_status, write_config};
use super::result::FailoverRound;
use super::worker_child::{check_groups, Event, Worker};
use super::{failed, ms, now_ns, Coordinator, AFTER_ACKS, DRAIN_MS, STEP, WARM_ACKS};
use crate::bench::harness::Scratch;
use crate::bench::BenchArgs;
use crate::child::ChildNode;
use mojim::config::{Config, EtcdSettings};
use mojim::error::{Error, Result};
use mojim_etcd::testing::EtcdServer;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// What the coordinator did about the primary's death.
pub(super) struct Reaction {
    pub(super) epoch: u64,
    /// The promoted node's data area: the new primary's region.
    pub(super) region: PathBuf,
    pub(super) detect_ms: f64,
    pub(super) promote_ms: f64,
    pub(super) fence_ms: f64,
    pub(super) drain_ms: Option<u64>,
    pub(super) backups_drained: Option<bool>,
}

/// One fail-over round's cluster.
pub(super) struct FailoverRun<'a> {
    pub(super) a: &'a BenchArgs,
    pub(super) exe: PathBuf,
    pub(super) round: usize,
    pub(super) cfg: PathBuf,
    // Dropped in order: the worker and nodes before their folder.
    pub(super) worker: Option<Worker>,
    pub(super) mirror: ChildNode,
    pub(super) mirror_dir: PathBuf,
    pub(super) backup: ChildNode,
    /// The etcd coordinator's server and settings (`--coordinator etcd`).
    pub(super) etcd: Option<(EtcdServer, EtcdSettings)>,
    pub(super) _dir: Scratch,
}

impl<'a> FailoverRun<'a> {
    pub(super) fn start(a: &'a BenchArgs, exe: &Path, round: usize) -> Result<FailoverRun<'a>> {
        let dir = Scratch::create(a.dir.join(format!("mojim-failover-{}-{round}", std::process::id())))?;
        let etcd = match a.failover.coordinator {
            Coordinator::Static => None,
            Coordinator::Etcd => {
                Some(EtcdServer::launch().dir(&dir.0.join("etcd")).start().map_err(|e| failed("etcd", e))?)
            }
        };
        let cfg = write_config(&dir.0, a.region_size, etcd.as_ref().map(|e| e.endpoint()).as_deref())?;
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

    pub(super) fn run(mut self) -> Result<FailoverRound> {
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
    pub(super) fn react_static(&mut self) -> Result<Reaction> {
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
    pub(super) fn react_etcd(&self, kill_ns: u64, first_epoch: u64) -> Result<Reaction> {
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
