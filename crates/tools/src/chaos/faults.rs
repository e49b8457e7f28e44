//! One trial: a fresh cluster, a worker on the primary's node, several faults each healed as an
//! operator of the static coordinator would heal it (or, under the etcd coordinator, as the
//! coordinator heals it: see `takeover.rs`), then quiescing and the checks.
//!
//! Roles start as node a primary's node, b mirror (feeding the rest), c.. backups. Faults:
//! - `kill`: SIGKILL a node's daemon (and the worker, if it is the primary's node). A dead
//!   mirror or backup is restarted from its folder; the worker reconnects by itself. A dead
//!   primary's node is replaced: fence the other nodes at epoch E+1, promote the mirror at E+1
//!   (and restart its daemon without backups: it feeds nobody now), restart the first backup as
//!   the new mirror feeding the rest and the old primary's node (restarted and demoted), and
//!   start a worker on the promoted node. If the mirror's copy may not be promoted (a copy into
//!   it is unfinished), the primary's node is restarted in place.
//! - `partition`: cut two nodes off from each other for a while (network namespaces), or, on
//!   loopback, freeze one node (SIGSTOP, SIGCONT) for a while.
//! - `zombie`: cut the primary's node off (or freeze it), fail over as above while its worker
//!   still runs, let the old worker run again, then kill it and demote its node.
//!
//! Under the etcd coordinator the harness never fences or promotes after the start: a lost
//! primary (killed, cut off from etcd, frozen, or a worker that stopped because its lease could
//! expire) is replaced by the mirror's automatic take-over, and the harness only restarts the
//! daemons around the new roles and starts the application on the new primary's node.
//! Partitions may then also cut a node off from etcd. With `--takeover-crashes`, a fourth fault
//! kills the primary's node and then the mirror's daemon as soon as it has claimed the next
//! epoch in etcd, before or while it promotes itself (sometimes held up by a partition from its
//! backups, which a promotion drains first).

use super::check::{self, Move};
use super::cluster::{Cluster, Net, Proc, WorkerPlan};
use super::workload::{read_acks, read_intent, wall_us, Ack};
use super::Rng;
use mojim::coord::Coordinator;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// How long the harness waits for anything before it calls it a hang.
pub(super) const HANG: Duration = Duration::from_secs(15);
/// How long a promotion may wait for the backups to catch up.
const DRAIN_MS: u64 = 500;

/// What a trial found.
#[derive(Default)]
pub(crate) struct Report {
    pub faults: Vec<String>,
    pub acked: u64,
    /// Keyed by group number, so a group missed at a promotion and again at the end counts once.
    pub lost: BTreeMap<u64, String>,
    pub torn: BTreeMap<String, String>,
    pub dual: Vec<String>,
    pub unconverged: Vec<String>,
    /// Hangs, failed promotions, unexpected worker exits, divergence nobody reports.
    pub errors: Vec<String>,
    /// Log lines of nodes that closed a connection for a protocol violation.
    pub violations: Vec<String>,
    /// etcd coordinator: milliseconds from a primary's loss to the take-over in etcd.
    pub takeover_ms: Vec<u64>,
    /// etcd coordinator: milliseconds from a primary's loss to the first acknowledgement of the
    /// application on the new primary.
    pub first_ack_ms: Vec<u64>,
    /// etcd coordinator: losses after which no take-over came (the mirror had not seen the lost
    /// primary's lease), healed by restarting the application in place.
    pub no_takeover: u64,
    /// etcd coordinator: workers that stopped because their lease could expire.
    pub lease_stops: u64,
}

impl Report {
    pub fn failed(&self) -> bool {
        !self.lost.is_empty() || !self.torn.is_empty() || !self.dual.is_empty() || !self.errors.is_empty()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    Primary,
    Mirror,
    Backup,
}

pub(crate) struct Trial<'n> {
    pub(super) rng: Rng,
    seed: u64,
    net: &'n mut Net,
    pub(super) c: Cluster,
    pub(super) epoch: u64,
    pub(super) primary: usize,
    pub(super) mirror: usize,
    pub(super) backups: Vec<usize>,
    pub(super) worker: Option<Proc>,
    /// Every worker's ack log and the node it ran on.
    logs: Vec<(usize, PathBuf)>,
    /// The etcd coordinator the nodes follow (`None`: the harness is the static coordinator's
    /// operator).
    pub(super) coord: Option<Coordinator>,
    /// When the roles left each epoch, keyed by the epoch left.
    pub(super) moves: BTreeMap<u64, Move>,
    /// The epochs whose primary stopped for its lease (and so revoked it at once).
    pub(super) let_go: BTreeSet<u64>,
    /// When the primary of each epoch left (keyed by that epoch) was lost, where known.
    pub(super) losses: BTreeMap<u64, u64>,
    /// Also crash the mirror while it takes over (`--takeover-crashes`).
    pub takeover_crashes: bool,
    pub report: Report,
}

impl<'n> Trial<'n> {
    pub fn new(seed: u64, net: &'n mut Net, c: Cluster) -> Result<Trial<'n>, String> {
        let n = c.nodes.len();
        let coord = match &c.etcd {
            Some(settings) => Some(Coordinator::new(settings).map_err(|e| format!("harness: {e}"))?),
            None => None,
        };
        Ok(Trial {
            rng: Rng::new(seed),
            seed,
            net,
            c,
            epoch: 1,
            primary: 0,
            mirror: 1,
            backups: (2..n).collect(),
            worker: None,
            logs: Vec::new(),
            coord,
            moves: BTreeMap::new(),
            let_go: BTreeSet::new(),
            losses: BTreeMap::new(),
            takeover_crashes: false,
            report: Report::default(),
        })
    }

    pub(super) fn name(&self, i: usize) -> char {
        self.c.nodes[i].name
    }

    fn role(&self, i: usize) -> Role {
        if i == self.primary {
            Role::Primary
        } else if i == self.mirror {
            Role::Mirror
        } else {
            Role::Backup
        }
    }

    /// Notes what the operator saw or did in the trial's `operator.log`.
    pub(super) fn note(&self, line: String) {
        self.c.note(&line);
    }

    pub(super) fn sleep_ms(&mut self, lo: u64, hi: u64) -> u64 {
        let ms = self.rng.range(lo, hi);
        std::thread::sleep(Duration::from_millis(ms));
        ms
    }

    fn backup_addrs(&self) -> Vec<String> {
        self.backups.iter().map(|&b| self.c.nodes[b].addr.clone()).collect()
    }

    /// Starts node `i`'s daemon as its role needs: the mirror feeds the backups.
    pub(super) fn start_daemon(&mut self, i: usize) -> Result<(), String> {
        let feeds = if i == self.mirror { self.backup_addrs() } else { Vec::new() };
        self.c.start_daemon(self.net, i, &feeds)
    }

    /// Runs the whole trial; problems land in the report.
    pub fn run(&mut self, faults: usize) {
        if let Err(e) = self.play(faults) {
            self.report.errors.push(e);
        }
        if let Net::Netns(n) = self.net {
            if let Err(e) = n.heal() {
                self.report.errors.push(format!("harness: end the partitions: {e}"));
            }
        }
        self.report.violations = self.c.grep_logs("protocol violation");
        // Counted whether or not the trial got as far as its end.
        match self.all_acks() {
            Ok(acks) => {
                self.report.acked = acks.iter().map(|(_, a)| a.len() as u64).sum();
                self.report.dual = check::dual_primary(&acks);
                // Only a lease forbids acknowledging once the roles may move on, and only a worker
                // that is never frozen logs its acknowledgements at once.
                let margin_us = self.c.etcd.as_ref().map_or(0, |e| e.lease_margin.as_micros() as u64);
                let by_return = self.coord.is_some() && matches!(self.net, Net::Netns(_));
                self.report.dual.extend(check::late_acks(
                    &acks,
                    &self.moves,
                    margin_us,
                    &self.let_go,
                    by_return,
                ));
                for (&epoch, &loss_us) in &self.losses {
                    let first = acks.iter().flat_map(|(_, a)| a).filter(|a| a.epoch == epoch + 1);
                    if let Some(t) = first.map(|a| a.done_us).min() {
                        self.report.first_ack_ms.push(t.saturating_sub(loss_us) / 1000);
                    }
                }
            }
            Err(e) => self.report.errors.push(e),
        }
    }

    fn play(&mut self, faults: usize) -> Result<(), String> {
        self.setup()?;
        for _ in 0..faults {
            self.sleep_ms(60, 150);
            self.ensure_worker()?;
            let r = self.rng.below(100);
            let (kind, done) = if r < 45 {
                let x = self.rng.below(self.c.nodes.len() as u64) as usize;
                ("kill", self.kill(x))
            } else if r < 75 {
                ("partition", self.partition())
            } else if self.takeover_crashes && r < 90 {
                ("takeover crash", self.crash_takeover())
            } else {
                ("zombie", self.zombie())
            };
            let fault = done.inspect_err(|_| self.report.faults.push(format!("{kind}: unfinished")))?;
            self.c.note(&format!("fault: {fault}"));
            self.report.faults.push(fault);
        }
        self.sleep_ms(60, 150);
        self.ensure_worker()?;
        self.quiesce_and_check()
    }

    /// Starts the daemons (backups, then the mirror feeding them, then the primary's node),
    /// promotes node a at epoch 2 and starts the worker there.
    fn setup(&mut self) -> Result<(), String> {
        for i in (0..self.c.nodes.len()).rev() {
            self.start_daemon(i)?;
        }
        self.promote(self.primary, 2, &[])?;
        self.start_worker(false)
    }

    /// Fences every other reachable node at `epoch`, then promotes node `m` at `epoch`.
    fn promote(&mut self, m: usize, epoch: u64, skip: &[usize]) -> Result<serde_json::Value, String> {
        for j in 0..self.c.nodes.len() {
            if j == m || skip.contains(&j) || self.c.nodes[j].daemon.is_none() {
                continue;
            }
            if let Err(e) = self.c.command(j, &format!(r#"{{"op":"fence","epoch":{epoch}}}"#)) {
                self.note(format!("could not fence node {}: {e}", self.name(j)));
            }
        }
        let t0 = Instant::now();
        let reply = self
            .c
            .command(m, &format!(r#"{{"op":"promote","epoch":{epoch},"drain_ms":{DRAIN_MS}}}"#))
            .map_err(|e| format!("promote failed: {e}"))?;
        self.moves.insert(self.epoch, Move { after_us: wall_us(), to: self.name(m) });
        self.epoch = epoch;
        self.c.note(&format!(
            "promoted node {} at epoch {epoch} in {:?}: {reply}",
            self.name(m),
            t0.elapsed()
        ));
        Ok(reply)
    }

    /// The next group number: after every group any worker acknowledged or meant to write.
    fn start_k(&self) -> Result<u64, String> {
        let mut k = 0;
        for (_, log) in &self.logs {
            k = read_acks(log)?.iter().map(|a| a.k).fold(k, u64::max);
        }
        for n in &self.c.nodes {
            if let Some((ik, _, _)) = read_intent(&n.dir.join("intent")) {
                k = k.max(ik);
            }
        }
        Ok(k + 1)
    }

    /// Starts a worker on the primary's node; `redo` when it restarts on the same copy.
    pub(super) fn start_worker(&mut self, redo: bool) -> Result<(), String> {
        assert!(self.worker.is_none());
        let w = self.logs.len();
        let start_k = self.start_k()?;
        let seed = super::mix(self.seed ^ super::mix(w as u64 + 1));
        let mirror = self.c.nodes[self.mirror].addr.clone();
        let plan = WorkerPlan { mirror: &mirror, number: w, start_k, seed, redo };
        let (p, log, said) = self
            .c
            .start_worker(self.net, self.primary, &plan)
            .map_err(|e| format!("worker on node {}: {e}", self.name(self.primary)))?;
        self.c.note(&format!(
            "worker {w} on node {} (pid {}), mirror {}, epoch {}: {said}",
            self.name(self.primary),
            p.pid(),
            self.name(self.mirror),
            self.epoch
        ));
        self.logs.push((self.primary, log));
        self.worker = Some(p);
        if self.coord.is_some() {
            // The epoch and the mirror come from the roles in etcd: they must be the harness's.
            let expected = format!("epoch={} ", self.epoch);
            let mirror = format!("mirror={}", mirror);
            if !said.starts_with(&expected) || !said.ends_with(&mirror) {
                return Err(format!(
                    "the worker on node {} runs with {said:?} but the harness expected {expected}... {mirror}",
                    self.name(self.primary)
                ));
            }
        }
        Ok(())
    }

    /// A worker that stopped by itself is a problem (it gives up only after a long loss);
    /// it is restarted in place so the trial goes on. Under the etcd coordinator the primary is
    /// lost then, and the coordinator heals (see `follow`).
    fn ensure_worker(&mut self) -> Result<(), String> {
        if self.coord.is_some() && self.worker.is_some() {
            if let Some(how) = self.follow()? {
                if let Some(last) = self.report.faults.last_mut() {
                    last.push_str(&format!(" (then {how})"));
                }
            }
            return Ok(());
        }
        let Some(w) = self.worker.as_mut() else { return self.start_worker(true) };
        if let Some(status) = w.exited() {
            let line = w.last_line();
            self.worker = None;
            self.report.errors.push(format!(
                "worker on node {} stopped by itself ({status}): {line}",
                self.name(self.primary)
            ));
            return self.start_worker(true);
        }
        Ok(())
    }

    /// After node `m` became primary at epoch `e` in place of node `x` (a zombie still running
    /// its worker, or dead): the first backup becomes the mirror, the zombie is let back onto
    /// the network and its worker stopped, and the daemons are restarted around the new roles.
    /// The promoted node's daemon feeds nobody (its copy is the application's; left running
    /// with its old backups, its forwarder would go on opening sessions on the new mirror); the
    /// old primary's node rejoins as a backup, demoted (its copy may hold unacknowledged
    /// writes); the new mirror feeds the other backups and the old primary's node. Then the
    /// worker starts on the new primary.
    pub(super) fn after_promotion(&mut self, m: usize, x: usize, e: u64, zombie: bool) -> Result<(), String> {
        let new_mirror = self.backups.first().copied().ok_or("no backup to become the mirror")?;
        self.primary = m;
        self.mirror = new_mirror;
        self.backups.retain(|&b| b != new_mirror);
        self.backups.push(x);
        if zombie {
            self.release(x)?;
            let ran = self.sleep_ms(50, 200);
            let said = self.worker.as_mut().map(|w| (w.exited(), w.last_line()));
            self.note(format!(
                "old worker on node {} after {ran}ms back on the network: {said:?}",
                self.name(x)
            ));
        }
        self.kill_worker();
        self.c.kill_daemon(m);
        self.start_daemon(m)?;
        if self.c.nodes[x].daemon.is_none() {
            self.start_daemon(x)?;
        }
        self.c
            .command(x, &format!(r#"{{"op":"demote","epoch":{e}}}"#))
            .map_err(|e| format!("demote: {e}"))?;
        self.c.kill_daemon(new_mirror);
        self.start_daemon(new_mirror)?;
        self.start_worker(false)
    }

    pub(super) fn kill_worker(&mut self) {
        if let Some(mut w) = self.worker.take() {
            w.kill();
        }
    }

    /// SIGKILLs node `x` (its daemon, and the worker on the primary's node), then heals.
    fn kill(&mut self, x: usize) -> Result<String, String> {
        let role = self.role(x);
        let lost_us = wall_us();
        if role == Role::Primary {
            self.kill_worker();
        }
        self.c.kill_daemon(x);
        let down = self.sleep_ms(10, 200);
        let what = format!("kill({}:{role:?}, down {down}ms)", self.name(x)).to_lowercase();
        match role {
            Role::Primary if self.coord.is_some() => {
                self.primary_lost(x, false, Some(lost_us)).map(|how| format!("{what} -> {how}"))
            }
            Role::Primary => self.fail_over(x, false).map(|how| format!("{what} -> {how}")),
            Role::Mirror | Role::Backup => self.start_daemon(x).map(|()| what),
        }
    }

    /// The primary's node `x` is gone (dead, or cut off with its worker still running when
    /// `zombie`): promote the mirror under a new epoch and rebuild the tiers around it.
    /// Returns what was done.
    fn fail_over(&mut self, x: usize, zombie: bool) -> Result<String, String> {
        let m = self.mirror;
        let consistent = self.c.status(m).map(|st| st.consistent);
        if let Err(e) = consistent.as_ref() {
            if e.starts_with("hang") {
                return Err(e.clone());
            }
        }
        if !matches!(consistent, Ok(true)) {
            // Nothing else holds every acknowledged group: the primary's node comes back.
            self.note(format!(
                "mirror {} may not be promoted ({consistent:?}): restarting node {} in place",
                self.name(m),
                self.name(x)
            ));
            if zombie {
                self.release(x)?;
            }
            if self.c.nodes[x].daemon.is_none() {
                self.start_daemon(x)?;
            }
            if self.worker.is_none() {
                self.start_worker(true)?;
            }
            return Ok("restart in place".into());
        }
        let e = self.epoch + 1;
        // A cut-off node cannot be told anything; a dead one is not running.
        let skip = if zombie { vec![x] } else { Vec::new() };
        let reply = self.promote(m, e, &skip)?;
        if reply["backups_drained"] != serde_json::Value::Bool(true) {
            self.note(format!("promotion of node {} did not drain its backups: {reply}", self.name(m)));
        }
        self.check_copy(m, &format!("promoted node {}", self.name(m)))?;
        self.after_promotion(m, x, e, zombie)?;
        Ok(format!("promote {} at epoch {e}", self.name(m)))
    }

    /// Ends a zombie's isolation: heals its partitions or thaws it.
    pub(super) fn release(&mut self, x: usize) -> Result<(), String> {
        match self.net {
            Net::Netns(n) => n.heal().map_err(|e| format!("harness: {e}")),
            Net::Loopback { .. } => {
                if let Some(d) = self.c.nodes[x].daemon.as_mut() {
                    d.thaw();
                }
                if let Some(w) = self.worker.as_mut() {
                    w.thaw();
                }
                Ok(())
            }
        }
    }

    /// The name of site `i`: a node's, or `etcd` for the etcd's namespace after the nodes'.
    fn site(&self, i: usize) -> String {
        if i < self.c.nodes.len() {
            self.name(i).to_string()
        } else {
            "etcd".into()
        }
    }

    /// Cuts a node off (netns: two nodes from each other, or a node from etcd; loopback:
    /// freezes one) for a while.
    fn partition(&mut self) -> Result<String, String> {
        let n = self.c.nodes.len() as u64;
        // Under the etcd coordinator the etcd's namespace is one more site to cut off from.
        let sites = n + u64::from(self.coord.is_some() && matches!(self.net, Net::Netns(_)));
        let a = self.rng.below(n) as usize;
        let b = (a + 1 + self.rng.below(sites - 1) as usize) % sites as usize;
        // The primary's node cut off from etcd may stay cut off past its lease.
        let lease = a == self.primary && b == n as usize;
        let ms = if lease { self.rng.range(100, 1500) } else { self.rng.range(50, 450) };
        let primary_frozen =
            self.coord.is_some() && a == self.primary && matches!(self.net, Net::Loopback { .. });
        // Then the mirror may take over while the partition lasts: the harness watches the roles.
        let watch = lease || primary_frozen;
        let what = match self.net {
            Net::Netns(net) => {
                net.partition(a, b).map_err(|e| format!("harness: {e}"))?;
                self.pause(Duration::from_millis(ms), watch);
                self.heal_partitions()?;
                format!("partition({}-{}, {ms}ms)", self.name(a), self.site(b))
            }
            Net::Loopback { .. } => {
                self.freeze(a);
                self.pause(Duration::from_millis(ms), watch);
                self.release(a)?;
                format!("freeze({}:{:?}, {ms}ms)", self.name(a), self.role(a)).to_lowercase()
            }
        };
        if watch {
            // A renewal may have failed: the worker then stops at the end of its lease's validity
            // and the mirror takes over once the lease expired.
            self.pause(super::etcd::LEASE_TTL, true);
            if let Some(how) = self.follow()? {
                return Ok(format!("{what} -> {how}"));
            }
        }
        Ok(what)
    }

    /// Cuts sites `a` and `b` off from each other, if the nodes run in network namespaces.
    pub(super) fn cut(&mut self, a: usize, b: usize) -> Result<bool, String> {
        match self.net {
            Net::Netns(net) => net.partition(a, b).map(|()| true).map_err(|e| format!("harness: {e}")),
            Net::Loopback { .. } => Ok(false),
        }
    }

    pub(super) fn heal_partitions(&mut self) -> Result<(), String> {
        match self.net {
            Net::Netns(net) => net.heal().map_err(|e| format!("harness: {e}")),
            Net::Loopback { .. } => Ok(()),
        }
    }

    fn freeze(&mut self, x: usize) {
        if let Some(d) = self.c.nodes[x].daemon.as_mut() {
            d.freeze();
        }
        if x == self.primary {
            if let Some(w) = self.worker.as_mut() {
                w.freeze();
            }
        }
    }

    /// Cuts the primary's node off with its worker running, fails over, then lets the old
    /// worker back onto the network before killing it. Under the etcd coordinator the node is
    /// cut off from etcd too (or from etcd alone, its mirror still answering its worker), and
    /// the fail-over is the coordinator's take-over once its lease expired.
    fn zombie(&mut self) -> Result<String, String> {
        let x = self.primary;
        let n = self.c.nodes.len();
        let lost_us = wall_us();
        let etcd_only = self.coord.is_some() && self.rng.below(2) == 0;
        let cut = match self.net {
            Net::Netns(net) => {
                let mut sites: Vec<usize> =
                    if etcd_only { Vec::new() } else { (0..n).filter(|&j| j != x).collect() };
                if self.coord.is_some() {
                    sites.push(n);
                }
                for &j in &sites {
                    net.partition(x, j).map_err(|e| format!("harness: {e}"))?;
                }
                if etcd_only {
                    "cut off from etcd"
                } else {
                    "cut off"
                }
            }
            Net::Loopback { .. } => {
                self.freeze(x);
                "frozen"
            }
        };
        if self.coord.is_some() {
            let how = self.primary_lost(x, true, Some(lost_us))?;
            return Ok(format!("zombie({}, {cut}) -> {how}", self.name(x)));
        }
        let ms = self.sleep_ms(50, 400);
        let how = self.fail_over(x, true)?;
        Ok(format!("zombie({}, cut off {ms}ms) -> {how}", self.name(x)))
    }

    /// Every acknowledged group is in node `i`'s copy, and no group there is torn.
    pub(super) fn check_copy(&mut self, i: usize, what: &str) -> Result<(), String> {
        let image = check::data_area(&self.c.nodes[i].data_path())?;
        let acks = self.all_acks()?;
        for (_, list) in &acks {
            for (k, msg) in check::lost(list, &image) {
                self.report.lost.entry(k).or_insert_with(|| format!("{what}: {msg}"));
            }
        }
        for msg in check::torn(&image) {
            self.report.torn.entry(msg.clone()).or_insert_with(|| format!("{what}: {msg}"));
        }
        Ok(())
    }

    pub(super) fn all_acks(&self) -> Result<Vec<(char, Vec<Ack>)>, String> {
        self.logs.iter().map(|(n, p)| read_acks(p).map(|a| (self.name(*n), a))).collect()
    }

    /// Stops the worker, waits for every replica to catch up, and checks the invariants.
    fn quiesce_and_check(&mut self) -> Result<(), String> {
        // A worker that did not stop cleanly may leave a group in its copy that no replica has.
        let mut clean = true;
        if let Some(mut w) = self.worker.take() {
            w.close_stdin();
            match w.wait_exit(HANG) {
                None => {
                    self.report.errors.push(format!(
                        "hang: the worker on node {} did not stop within {HANG:?} (last said: {})",
                        self.name(self.primary),
                        w.last_line()
                    ));
                    w.kill();
                    clean = false;
                }
                Some(s) if !s.success() => {
                    self.report.errors.push(format!(
                        "worker on node {} failed to stop cleanly ({s}): {}",
                        self.name(self.primary),
                        w.last_line()
                    ));
                    clean = false;
                }
                Some(_) => self.c.note(&format!("worker stopped: {}", w.last_line())),
            }
        }
        let stopped_us = wall_us();
        self.check_copy(self.primary, &format!("primary's node {}", self.name(self.primary)))?;
        let primary = check::data_area(&self.c.nodes[self.primary].data_path())?;
        if self.coord.is_some() && clean {
            // The application stopped: its lease expires and the mirror takes over.
            if let Some(roles) = self.await_takeover(Some(stopped_us))? {
                return self.check_after_takeover(&roles, &primary);
            }
        }
        if !self.wait_caught_up() || !clean {
            return Ok(());
        }
        let mirror_links = self.c.status(self.mirror).map(|st| st.backups).unwrap_or_default();
        let replicas: Vec<usize> = std::iter::once(self.mirror).chain(self.backups.iter().copied()).collect();
        for r in replicas {
            // The status before the image: a copy still landing can end between two reads, and
            // a status read after the image would call an image taken before its end consistent.
            let st = self.c.status(r);
            let image = check::data_area(&self.c.nodes[r].data_path())?;
            let Some((at, bytes)) = check::difference(&primary, &image) else { continue };
            let addr = &self.c.nodes[r].addr;
            let needs_copy = mirror_links.iter().any(|l| &l.addr == addr && l.needs_copy);
            let consistent = st.as_ref().map(|s| s.consistent).unwrap_or(false);
            let what = format!(
                "{:?} node {} differs from the primary's copy at offset {at} ({bytes} bytes; consistent={consistent}, \
                 needs_copy={needs_copy})",
                self.role(r),
                self.name(r)
            )
            .to_lowercase();
            if needs_copy || (!consistent && r != self.mirror) {
                self.report.unconverged.push(what);
            } else {
                self.report.errors.push(format!("diverged: {what}; status: {st:?}"));
            }
        }
        Ok(())
    }

    /// Waits (at most [`HANG`]) until the mirror applied everything and every backup that can
    /// be fed has it applied too. Returns whether they did.
    fn wait_caught_up(&mut self) -> bool {
        let t0 = Instant::now();
        let mut last = String::new();
        while t0.elapsed() < HANG {
            match self.caught_up() {
                Ok(None) => return true,
                Err(why) if why.starts_with("hang") => {
                    last = why;
                    break;
                }
                Ok(Some(why)) | Err(why) => last = why,
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.report.errors.push(format!("hang: replicas did not catch up within {HANG:?}: {last}"));
        false
    }

    /// `None` once caught up, else what is still missing.
    fn caught_up(&self) -> Result<Option<String>, String> {
        let m = self.c.status(self.mirror)?;
        if m.session.is_none() && m.lag_groups == 0 && !m.consistent {
            return Ok(Some(format!(
                "mirror {} was left inconsistent: a copy into it (a resynchronisation, which marks it \
                 inconsistent) began in the last session and did not finish before the application closed",
                self.name(self.mirror)
            )));
        }
        if m.lag_groups != 0 || m.applied_seq < m.last_received_seq || !m.consistent {
            return Ok(Some(format!(
                "mirror {}: applied {} of {}, consistent={}",
                self.name(self.mirror),
                m.applied_seq,
                m.last_received_seq,
                m.consistent
            )));
        }
        // The mirror is consistent here, so a backup waiting for it (needs_copy) is copied at its
        // link's next attempt.
        for l in &m.backups {
            if l.needs_copy || !l.connected || l.acked_seq < m.applied_seq {
                return Ok(Some(format!(
                    "backup {}: connected={} acked {} of {} ({:?})",
                    l.addr, l.connected, l.acked_seq, m.applied_seq, l.error
                )));
            }
        }
        for &b in &self.backups {
            let st = self.c.status(b)?;
            if st.lag_groups != 0 || st.applied_seq < st.last_received_seq {
                return Ok(Some(format!(
                    "backup {}: applied {} of {}",
                    self.name(b),
                    st.applied_seq,
                    st.last_received_seq
                )));
            }
        }
        Ok(None)
    }
}
