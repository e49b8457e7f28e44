//! Healing under the etcd coordinator: the harness does not promote anyone after the start.
//!
//! When the primary is lost (its node killed, cut off or frozen past its lease, or its worker
//! stopped because the lease could expire), the harness watches the roles in etcd until the
//! mirror named there has claimed the next epoch (the new primary must be the old mirror, the
//! new mirror its first backup), waits for that node's promotion, then does what the
//! coordinator leaves to the operator: it restarts the daemons around the new roles (the
//! promoted node feeding nobody, the new mirror feeding the other backups and the old
//! primary's node, demoted so that it gets a full copy) and starts the application on the new
//! primary's node, which takes its mirror and epoch from etcd.
//!
//! A primary lost before the mirror saw its lease is never replaced (the mirror takes over only
//! from a primary it saw in the epoch): once the lease has been gone for a while with the roles
//! unchanged, the application restarts on the same node, as it would after a crash.

use super::check::{self, Move};
use super::faults::{Trial, HANG};
use super::workload::wall_us;
use mojim::coord::Roles;
use mojim_node::MirrorStatus;
use std::time::{Duration, Instant};

/// How long a worker whose roles moved on is given to exit by itself: a holder that saw its
/// lease lapse waits for its revocation (at most the lease's TTL) before it stops.
const LET_GO_EXIT: Duration = Duration::from_millis(1500);

/// How long the lease may be gone with the roles unchanged before the harness concludes that
/// no take-over will come (the mirror polls every half renewal interval).
const NO_TAKEOVER: Duration = Duration::from_millis(2000);

impl Trial<'_> {
    /// Sleeps for `d`; with `watch`, polls the roles meanwhile so that a take-over is noted when
    /// it happens rather than when the harness next asks.
    pub(super) fn pause(&mut self, d: Duration, watch: bool) {
        let t0 = Instant::now();
        let coord = self.coord.clone().filter(|_| watch);
        while let Some(left) = d.checked_sub(t0.elapsed()) {
            if let Some(c) = &coord {
                if let Ok(Some((r, _))) = c.roles() {
                    if r.epoch > self.epoch {
                        self.note_move(&r);
                    }
                }
            }
            std::thread::sleep(if coord.is_some() { left.min(Duration::from_millis(10)) } else { left });
        }
    }

    /// Notes the moment the roles were first seen beyond the current epoch.
    fn note_move(&mut self, r: &Roles) -> Move {
        let to = self.c.nodes.iter().find(|n| n.name.to_string() == r.primary).map_or('?', |n| n.name);
        let epoch = self.epoch;
        let now = Move { after_us: wall_us(), to };
        let seen = *self.moves.entry(epoch).or_insert(now);
        if seen == now {
            self.note(format!("the roles moved to {r:?}"));
        }
        seen
    }

    /// Kills the primary's node, then the mirror's daemon as soon as it has claimed the next
    /// epoch in etcd (its promotion sometimes held up by a partition from the backup it drains
    /// first), restarts the mirror's daemon, and heals as after any loss of the primary.
    pub(super) fn crash_takeover(&mut self) -> Result<String, String> {
        let (x, m) = (self.primary, self.mirror);
        let hold = self.rng.below(2) == 0 && self.cut(m, self.backups[0])?;
        let lost_us = wall_us();
        self.kill_worker();
        self.c.kill_daemon(x);
        let coord = self.coord.clone().expect("the etcd coordinator");
        let t0 = Instant::now();
        let roles = loop {
            match coord.roles() {
                Ok(Some((r, _))) if r.epoch > self.epoch => break r,
                _ if t0.elapsed() > HANG => {
                    return Err(format!("hang: no take-over within {HANG:?} of node {}'s loss", self.name(x)))
                }
                _ => std::thread::sleep(Duration::from_millis(2)),
            }
        };
        let st = self.c.status(m).map(|s| format!("role {} epoch {}", s.role, s.epoch));
        self.c.kill_daemon(m);
        self.note(format!("killed node {}'s daemon once it claimed {roles:?} ({st:?})", self.name(m)));
        self.heal_partitions()?;
        let down = self.sleep_ms(10, 200);
        self.start_daemon(m)?;
        let how = self.primary_lost(x, false, Some(lost_us))?;
        let held = if hold { ", its backup cut off" } else { "" };
        Ok(format!(
            "kill({}:primary) + kill({}:mirror) as it took over{held}, down {down}ms -> {how}",
            self.name(x),
            self.name(m)
        ))
    }

    /// Whether the primary is lost (the worker stopped, or the roles moved on); then waits for
    /// the coordinator to heal and returns what happened.
    pub(super) fn follow(&mut self) -> Result<Option<String>, String> {
        let coord = self.coord.clone().expect("the etcd coordinator");
        let exited = self.worker.as_mut().is_none_or(|w| w.exited().is_some());
        let moved = matches!(coord.roles(), Ok(Some((r, _))) if r.epoch > self.epoch);
        if !exited && !moved {
            return Ok(None);
        }
        let name = self.name(self.primary);
        if let Some(w) = self.worker.as_mut() {
            // A worker that stopped for its lease exits once its lease is revoked, which may be
            // after the roles moved: let it finish saying why.
            let exited = exited || w.wait_exit(LET_GO_EXIT).is_some();
            let line = w.last_line();
            if exited {
                if line.starts_with("exit fenced") {
                    self.report.lease_stops += 1;
                    if line.contains("no longer hold its lease") {
                        self.let_go.insert(self.epoch);
                    }
                    self.note(format!("worker on node {name} stopped: {line}"));
                } else {
                    let status = w.exited();
                    self.report
                        .errors
                        .push(format!("worker on node {name} stopped by itself ({status:?}): {line}"));
                }
            } else {
                self.note(format!(
                    "the roles moved on while the worker on node {name} runs (last said: {line})"
                ));
            }
        }
        self.kill_worker();
        self.primary_lost(self.primary, false, None).map(Some)
    }

    /// The primary's node `x` is lost (`zombie`: cut off or frozen with its worker running; else
    /// its worker is dead): waits for the take-over and rebuilds around the new roles, or
    /// restarts the application in place when no take-over comes. `lost_us`: when it was lost.
    pub(super) fn primary_lost(
        &mut self,
        x: usize,
        zombie: bool,
        lost_us: Option<u64>,
    ) -> Result<String, String> {
        match self.await_takeover(lost_us)? {
            Some(roles) => self.adopt(x, &roles, zombie),
            None => self.restart_in_place(x, zombie),
        }
    }

    /// Polls the roles until they leave the current epoch (returns them, and notes when the move
    /// happened), or until the lease has been gone for [`NO_TAKEOVER`] with the roles unchanged
    /// (`None`).
    pub(super) fn await_takeover(&mut self, lost_us: Option<u64>) -> Result<Option<Roles>, String> {
        let coord = self.coord.clone().expect("the etcd coordinator");
        let t0 = Instant::now();
        let mut gone: Option<Instant> = None;
        let (mut seen, mut leader, mut error) = (None, None, String::new());
        while t0.elapsed() < HANG {
            match coord.roles() {
                Ok(Some((r, _))) if r.epoch > self.epoch => {
                    let moved = self.note_move(&r);
                    if let Some(lost) = lost_us {
                        self.losses.insert(self.epoch, lost);
                        self.report.takeover_ms.push(moved.after_us.saturating_sub(lost) / 1000);
                    }
                    self.note(format!("waited {:?} for the take-over", t0.elapsed()));
                    return Ok(Some(r));
                }
                Ok(r) => seen = r,
                Err(e) => error = e.to_string(),
            }
            match coord.leader() {
                Ok(Some(l)) if l.epoch == self.epoch => {
                    gone = None;
                    leader = Some(l);
                }
                Ok(l) => {
                    leader = l;
                    if gone.get_or_insert_with(Instant::now).elapsed() > NO_TAKEOVER {
                        self.report.no_takeover += 1;
                        self.note(format!(
                            "no take-over: no lease in epoch {} for {NO_TAKEOVER:?} and the roles unchanged ({seen:?})",
                            self.epoch
                        ));
                        return Ok(None);
                    }
                }
                Err(e) => error = e.to_string(),
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Err(format!(
            "hang: no take-over within {HANG:?} of the primary's loss: roles {seen:?}, leader {leader:?} \
             (last etcd error: {error:?})"
        ))
    }

    /// The roles, as a take-over of the primary's node `x` must leave them: the next epoch, the
    /// old mirror primary, the first backup the mirror.
    fn check_roles(&self, x: usize, roles: &Roles) -> Result<(), String> {
        let e = self.epoch + 1;
        let m = self.mirror;
        let next = self.backups.first().map(|&b| self.c.nodes[b].addr.clone()).unwrap_or_default();
        if roles.epoch != e || roles.primary != self.name(m).to_string() || roles.mirror_addr != next {
            return Err(format!(
                "unexpected roles after node {}'s loss: {roles:?}; expected epoch {e}, primary {}, mirror {next}",
                self.name(x),
                self.name(m)
            ));
        }
        Ok(())
    }

    /// Waits until node `m`'s copy is promoted at `epoch` (the coordinator's take-over promotes
    /// it after claiming the roles).
    fn wait_promoted(&self, m: usize, epoch: u64) -> Result<MirrorStatus, String> {
        let t0 = Instant::now();
        let mut last = String::new();
        while t0.elapsed() < HANG {
            match self.c.status(m) {
                Ok(st) if st.role == "primary" && st.epoch >= epoch => return Ok(st),
                Ok(st) => last = format!("role {} epoch {} consistent {}", st.role, st.epoch, st.consistent),
                Err(e) if e.starts_with("hang") => return Err(e),
                Err(e) => last = e,
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let said: Vec<String> = self
            .c
            .grep_logs("")
            .into_iter()
            .filter(|l| l.starts_with(&format!("{}/daemon.log", self.name(m))))
            .filter(|l| l.contains("promot") || l.contains("take") || l.contains("coordinator"))
            .collect();
        Err(format!(
            "node {} claimed epoch {epoch} in etcd but was not promoted within {HANG:?} ({last}); its log: {}",
            self.name(m),
            said.join(" | ")
        ))
    }

    /// Rebuilds the cluster around the roles of a take-over of node `x`'s primary.
    fn adopt(&mut self, x: usize, roles: &Roles, zombie: bool) -> Result<String, String> {
        let t0 = Instant::now();
        self.check_roles(x, roles)?;
        let m = self.mirror;
        let e = roles.epoch;
        let st = self.wait_promoted(m, e)?;
        self.note(format!("node {} promoted itself at epoch {e} (applied {})", self.name(m), st.applied_seq));
        self.epoch = e;
        self.check_copy(m, &format!("node {} promoted by the coordinator", self.name(m)))?;
        self.after_promotion(m, x, e, zombie)?;
        let took = self.moves.get(&(e - 1)).map(|mv| mv.after_us);
        let since = match (took, self.losses.get(&(e - 1))) {
            (Some(t), Some(&lost)) => format!(" {:.1}s after the loss", t.saturating_sub(lost) as f64 / 1e6),
            _ => String::new(),
        };
        self.note(format!("rebuilt around epoch {e} in {:?}", t0.elapsed()));
        Ok(format!("take-over by {} at epoch {e}{since}", self.name(m)))
    }

    /// No take-over came: the roles still name node `x`, whose application restarts there.
    fn restart_in_place(&mut self, x: usize, zombie: bool) -> Result<String, String> {
        if zombie {
            self.release(x)?;
        }
        self.kill_worker();
        if self.c.nodes[x].daemon.is_none() {
            self.start_daemon(x)?;
        }
        self.start_worker(true)?;
        Ok("no take-over: restart in place".into())
    }

    /// The checks at the end of a trial whose last application stopped and whose mirror then
    /// took over: every acknowledged group is in the promoted copy, and every replica equals the
    /// last primary's copy (`primary`) unless it could not be fed.
    pub(super) fn check_after_takeover(&mut self, roles: &Roles, primary: &[u8]) -> Result<(), String> {
        let x = self.primary;
        self.check_roles(x, roles)?;
        let m = self.mirror;
        let promoted = self.wait_promoted(m, roles.epoch)?;
        self.check_copy(m, &format!("node {} promoted at the end", self.name(m)))?;
        // The promotion drained what the backups could take; they apply what they received.
        let t0 = Instant::now();
        let backups = self.backups.clone();
        let mut waiting = backups.clone();
        while !waiting.is_empty() {
            let mut still = Vec::new();
            for &b in &waiting {
                match self.c.status(b) {
                    Ok(st) if st.lag_groups == 0 && st.applied_seq >= st.last_received_seq => {}
                    Ok(_) => still.push(b),
                    Err(e) => return Err(e),
                }
            }
            waiting = still;
            if t0.elapsed() > HANG {
                let names: Vec<char> = waiting.iter().map(|&b| self.name(b)).collect();
                self.report.errors.push(format!(
                    "hang: backups {names:?} did not apply what they received within {HANG:?}"
                ));
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let image = check::data_area(&self.c.nodes[m].data_path())?;
        if let Some((at, bytes)) = check::difference(primary, &image) {
            self.report.errors.push(format!(
                "diverged: node {} promoted at the end differs from the last primary's copy at offset {at} \
                 ({bytes} bytes)",
                self.name(m)
            ));
        }
        for b in backups {
            // The status before the image (see `quiesce_and_check`).
            let st = self.c.status(b)?;
            let image = check::data_area(&self.c.nodes[b].data_path())?;
            let Some((at, bytes)) = check::difference(primary, &image) else { continue };
            let addr = &self.c.nodes[b].addr;
            let needs_copy = promoted.backups.iter().any(|l| &l.addr == addr && l.needs_copy);
            let what = format!(
                "backup node {} differs from the primary's copy at offset {at} ({bytes} bytes; consistent={}, \
                 needs_copy={needs_copy}, applied {} of the promoted node's {})",
                self.name(b),
                st.consistent,
                st.applied_seq,
                promoted.applied_seq
            );
            // A backup the promotion could not drain keeps what it had: it is fed again only by
            // the next application's mirror.
            if needs_copy || !st.consistent || st.applied_seq < promoted.applied_seq {
                self.report.unconverged.push(what);
            } else {
                self.report.errors.push(format!("diverged: {what}"));
            }
        }
        Ok(())
    }
}
