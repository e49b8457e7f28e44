//! Sessions: opening one lane by lane through the handshake, and ending one at either end. The
//! mirror ends its side on a close, a timeout, a violation, a session that replaces it, a reset
//! or a crash, and seals; a primary ends its side on a close, a timeout, a reset or when it
//! stops, and fails what was not acknowledged. The other end learns of it by the close, which
//! it reads after what was queued before it, or, if a cut loses the close, by its own timeout.

use super::{World, STALE_POOL};
use crate::primary::{CopyKind, Plan};
use crate::sim::connect::LaneHandshake;
use crate::sim::mirror::{Admit, CrashPoint, REGION_UUID};
use crate::sim::net::{Conn, WireFrame};
use crate::sim::Check;
use mojim_format::handshake::{Hello, PeerRole, RefuseCode, NONCE_SIZE};
use std::collections::VecDeque;

impl World {
    /// The session of `session`, if one of its ends is open.
    pub(super) fn conn(&self, session: u64) -> Option<usize> {
        self.conns.iter().position(|c| c.session == session)
    }

    /// The session whose mirror end is open: the mirror's current session.
    pub(super) fn mirror_conn(&self) -> Option<usize> {
        self.conns.iter().position(|c| c.mirror_open)
    }

    /// Node `node` opens a session: one handshake per lane, in order, each through the core's
    /// state machines. The mirror checks the epoch; at the first lane it ends its current
    /// session (sealing it), adopts a higher epoch and begins the new session. A lane whose path
    /// is cut, or a refusal, makes the primary give up, closing the lanes already joined.
    pub(super) fn connect(&mut self, node: usize) -> Check<()> {
        self.sessions_begun += 1;
        // Unique per run: the counter in the high bits, randomness below.
        let id = (self.sessions_begun << 40) | (self.rng.next_u64() & ((1 << 40) - 1));
        let epoch = self.nodes[node].primary.epoch();
        let lanes = self.cfg.lanes;
        if !self.nodes[node].has_copy && !self.mirror.reports_consistent() {
            // The promotion is refused, as `mojim promote` refuses a copy that is not
            // consistent (a copy into it began after the coordinator decided): withdrawn, before
            // anything of the new epoch reaches the mirror. One that a later promotion already
            // superseded simply never runs.
            if node == self.nodes.len() - 1 {
                self.withdraw_promotion(node);
            } else {
                self.note(format!("the promotion of primary {node} is refused, and a later one stands"));
                self.stop(node, true);
            }
            return Ok(());
        }
        let mut next_seq = None;
        let mut welcomed = None;
        for lane in 0..lanes {
            if self.nodes[node].cuts[lane as usize].any(self.now) {
                let backoff = self.rng.between(1, 10);
                return self.abort_connect(node, id, format!("lane {lane}'s handshake was lost"), backoff);
            }
            let mut nonce = [0u8; NONCE_SIZE];
            self.rng.fill(&mut nonce);
            let hello = Hello {
                role: PeerRole::Primary,
                lane,
                lanes,
                region_uuid: REGION_UUID,
                region_size: self.cfg.region_size,
                epoch,
                session: id,
                nonce,
                max_frame: self.cfg.max_frame,
                generation: 0,
                place: false,
                encrypt_placed: false,
            };
            let mut server_nonce = [0u8; NONCE_SIZE];
            self.rng.fill(&mut server_nonce);
            let (handshake, verdict) =
                LaneHandshake::authenticate(&hello, server_nonce, &self.mirror.identity())?;
            let fence = self.model.fence();
            let accepted = match verdict {
                Ok(accepted) => accepted,
                Err(refusal) => {
                    let code = handshake.refuse(&refusal)?;
                    if code != RefuseCode::Epoch || epoch >= fence {
                        return Err(format!(
                            "the mirror (epoch {fence}) refused primary {node} at epoch {epoch}: {refusal}"
                        ));
                    }
                    // Fenced, as it must be. It does not give up (it cannot tell a coordinator's
                    // decision from a misconfigured mirror) and tries again later.
                    self.report.epoch_refusals += 1;
                    let backoff = self.rng.between(10, 40);
                    return self.abort_connect(node, id, format!("refused: {refusal}"), backoff);
                }
            };
            if accepted != hello {
                return Err(format!("the mirror authenticated {accepted:?}, the primary sent {hello:?}"));
            }
            if epoch < fence {
                return Err(format!(
                    "fencing broken: the mirror, having announced epoch {fence}, accepted the handshake \
                     of primary {node} at epoch {epoch}"
                ));
            }
            // The node's session slot decides: join, begin, or end the current session first.
            let welcome = loop {
                match self.mirror.admit(&accepted)? {
                    Admit::Joined(welcome) => break welcome,
                    Admit::Refused(refusal) => {
                        if refusal.code != RefuseCode::Epoch || epoch >= fence {
                            return Err(format!(
                                "the mirror's session slot (epoch {fence}) refused primary {node} at \
                                 epoch {epoch}: {refusal}"
                            ));
                        }
                        self.report.epoch_refusals += 1;
                        let backoff = self.rng.between(10, 40);
                        return self.abort_connect(node, id, format!("refused: {refusal}"), backoff);
                    }
                    Admit::Replace => {
                        if self.mirror_conn().is_none() {
                            return Err(format!(
                                "the mirror's slot has session {:?} to replace, and no connection of it",
                                self.mirror.session()
                            ));
                        }
                        let crashes = self.report.crashes;
                        self.mirror_end(format!(
                            "primary {node}'s session {id:#x} (epoch {epoch}) replaces it"
                        ))?;
                        if self.report.crashes != crashes {
                            let backoff = self.rng.between(1, 10);
                            return self.abort_connect(node, id, "the mirror crashed".into(), backoff);
                        }
                    }
                }
            };
            if lane == 0 {
                self.conns.push(Conn::new(id, node, lanes as usize, self.now));
            }
            let ci = self.conn(id).expect("pushed at the first lane");
            let c = &mut self.conns[ci];
            c.joined = lane as usize + 1;
            if lane == 0 {
                c.mirror_open = true;
                self.stored.iter_mut().for_each(VecDeque::clear);
                self.report.sessions += 1;
                self.model.announced(welcome.epoch);
                self.note(format!(
                    "mirror begins session {id:#x} of primary {node} at epoch {} seq {}",
                    welcome.epoch, welcome.next_seq
                ));
            }
            let read = handshake.welcome(&welcome)?;
            if read.epoch != epoch || next_seq.is_some_and(|s| s != read.next_seq) {
                return Err(format!(
                    "primary {node} at epoch {epoch} was welcomed to lane {lane} with {read:?} \
                     (earlier lanes: next_seq {next_seq:?})"
                ));
            }
            next_seq = Some(read.next_seq);
            welcomed.get_or_insert(read);
        }
        let next_seq = next_seq.expect("at least one lane");
        let welcome = welcomed.expect("at least one lane");
        if !welcome.inconsistent && self.model.copying() {
            return Err(format!(
                "the mirror's Welcome reports its data area consistent while a copy into it is \
                 unfinished: {welcome:?}"
            ));
        }
        if !self.nodes[node].has_copy {
            // A promoted incarnation resumes from the mirror's applied state, taken now that the
            // old session is sealed: it must hold every group acknowledged to its predecessors.
            // The coordinator promoted it only while the mirror's copy was consistent.
            if self.model.copying() {
                return Err(format!(
                    "primary {node} was promoted from the mirror's data area while a copy into it \
                     is unfinished (it reads consistent: {})",
                    !welcome.inconsistent
                ));
            }
            let generations = self.mirror.generations();
            let applied = welcome.next_seq - 1;
            self.nodes[node].primary.take_copy(self.mirror.durable.data.area.bytes(), generations, applied);
            self.nodes[node].has_copy = true;
            self.model.check_acked_applied(&format!("primary {node} took its copy of the region"))?;
            self.model.check_data(self.mirror.durable.data.area.bytes())?;
        }
        // The production resync choice: in sync, a copy, or a refusal (split brain), which the
        // operator resolves by discarding the mirror's copy.
        let plan = match self.nodes[node].primary.plan(&welcome, self.cfg.sabotage) {
            Ok(plan) => {
                if let Plan::Copy { kind, reason, .. } = &plan {
                    self.note(format!("primary {node} copies into the mirror ({kind:?}: {reason})"));
                    self.report.catch_ups += u64::from(*kind == CopyKind::Log);
                }
                plan
            }
            Err(divergence) => {
                self.discard_due = true;
                self.report.split_brains += 1;
                let backoff = self.rng.between(1, 10);
                return self.abort_connect(node, id, format!("refused the mirror: {divergence}"), backoff);
            }
        };
        let ci = self.conn(id).expect("joined above");
        let piece = 4 * u64::from(self.cfg.max_frame);
        let links = &mut self.conns[ci].links;
        self.nodes[node].primary.begin(id, next_seq, links, &plan, piece, self.cfg.window);
        let ci = self.conn(id).expect("joined above");
        self.conns[ci].primary_open = true;
        self.note(format!("primary {node} opens session {id:#x} at seq {next_seq}"));
        Ok(())
    }

    /// The primary gives up opening session `id`: the lanes already joined are closed.
    fn abort_connect(&mut self, node: usize, id: u64, why: String, backoff: u64) -> Check<()> {
        self.note(format!("primary {node} gives up session {id:#x}: {why}"));
        if let Some(ci) = self.conn(id) {
            let c = &mut self.conns[ci];
            for link in &mut c.links[..c.joined] {
                link.primary_closed = true;
            }
        }
        self.nodes[node].reconnect_at = self.now + backoff;
        Ok(())
    }

    /// Node `node` ends its side of its session: every unacknowledged group fails, acks still in
    /// flight are lost, and with `close` the mirror reads the end of each lane's stream after the
    /// frames queued (a process that dies with its machine closes nothing).
    pub(super) fn primary_end(&mut self, node: usize, why: String, close: bool) {
        let Some(id) = self.nodes[node].primary.session() else {
            return;
        };
        self.note(format!("primary {node} ends session {id:#x}: {why}"));
        let recent = self.nodes[node].primary.end(&mut self.model);
        self.keep_stale(recent);
        if let Some(ci) = self.conn(id) {
            let c = &mut self.conns[ci];
            c.primary_open = false;
            for link in &mut c.links {
                link.to_primary.clear();
                link.primary_closed = close;
            }
        }
        self.nodes[node].reconnect_at = self.now + self.rng.between(0, 10);
        self.prune();
    }

    /// The mirror ends its side of its current session: open groups are dropped and every
    /// complete group is applied (the seal, which may crash), and each lane's stream to the
    /// primary ends after the acks queued.
    pub(super) fn mirror_end(&mut self, why: String) -> Check<()> {
        let Some(ci) = self.mirror_conn() else {
            return Ok(());
        };
        let session = self.conns[ci].session;
        self.note(format!("mirror ends session {session:#x}: {why}"));
        if self.mirror.session() != Some(session) {
            return Err(format!(
                "the mirror is in session {:?}, its connections belong to {session:#x}",
                self.mirror.session()
            ));
        }
        if self.rng.chance_pct(self.cfg.faults.seal_crash_pct) {
            let power_cut = self.rng.chance_pct(self.cfg.faults.power_cut_pct);
            return self.crash(CrashPoint::Sealing, power_cut);
        }
        self.close_mirror_end(ci, true);
        self.mirror.end_session(&why, &mut self.model, &mut self.report)?;
        if self.restart_if_failed()? {
            return Ok(());
        }
        self.model.check_acked_applied("the session was sealed")?;
        self.model.check_data(self.mirror.durable.data.area.bytes())?;
        self.prune();
        Ok(())
    }

    /// A lane's connection is reset: both ends see it at once and end the session.
    pub(super) fn disconnect(&mut self, ci: usize, lane: usize) -> Check<()> {
        let (node, primary_open) = (self.conns[ci].node, self.conns[ci].primary_open);
        if primary_open {
            self.primary_end(node, format!("lane {lane} was reset"), false);
        }
        self.mirror_end(format!("lane {lane} was reset"))
    }

    /// The mirror crashes at `point`, its process only or, with `power_cut`, its machine, and
    /// restarts from what its media kept. Its connections die: the primary reads their end if
    /// the mirror's kernel closed them, or times out.
    pub(super) fn crash(&mut self, point: CrashPoint, power_cut: bool) -> Check<()> {
        if point != CrashPoint::Clean {
            self.report.crashes += 1;
            self.report.crashes_mid_copy += u64::from(self.model.copying());
        }
        if point == CrashPoint::Sealing {
            self.report.seal_crashes += 1;
        }
        let how = if power_cut { "loses power" } else { "crashes" };
        self.note(format!("mirror {how} ({point:?})"));
        let fronts: Vec<(usize, WireFrame)> = match (point, self.mirror_conn()) {
            (CrashPoint::Running, Some(ci)) => {
                let c = &self.conns[ci];
                let cuts = &self.nodes[c.node].cuts;
                // A lane waiting in the ack gate is receiving nothing.
                (0..c.joined)
                    .filter(|&lane| !c.links[lane].broken_to_mirror && !cuts[lane].toward_mirror(self.now))
                    .filter(|&lane| !self.mirror.holds(lane))
                    .filter_map(|lane| c.links[lane].to_mirror.front().map(|f| (lane, f.clone())))
                    .collect()
            }
            _ => Vec::new(),
        };
        let torn = (self.report.torn_writes, self.report.torn_applies);
        let lost = self.report.writes_lost;
        self.mirror.crash(point, power_cut, &fronts, &mut self.rng, &mut self.model, &mut self.report)?;
        if torn != (self.report.torn_writes, self.report.torn_applies) {
            self.note("a record or an apply was torn by the crash".into());
        }
        if lost != self.report.writes_lost {
            let n = self.report.writes_lost - lost;
            self.note(format!("the power cut lost {n} unpersisted cache lines or words"));
        }
        if let Some(ci) = self.mirror_conn() {
            let close = self.rng.chance_pct(50);
            self.close_mirror_end(ci, close);
        }
        self.prune();
        self.model.check_acked_applied("crash and recovery")?;
        self.model.check_data(self.mirror.durable.data.area.bytes())?;
        if self.model.copying() && self.mirror.reports_consistent() {
            return Err(format!(
                "the mirror restarted with a half-copied data area that reads consistent \
                 (generations {:x?})",
                self.mirror.generations()
            ));
        }
        if self.mirror.durable.epoch.value() < self.model.fence() {
            return Err(format!(
                "the mirror restarted at epoch {} after announcing epoch {}: a fenced primary \
                 would be accepted again",
                self.mirror.durable.epoch.value(),
                self.model.fence()
            ));
        }
        Ok(())
    }

    /// The mirror's end of session `ci` closes: frames in flight to it are discarded, and with
    /// `close` the primary reads the end of each lane's stream after the acks queued.
    fn close_mirror_end(&mut self, ci: usize, close: bool) {
        let c = &mut self.conns[ci];
        c.mirror_open = false;
        let mut dropped = Vec::new();
        for link in &mut c.links[..c.joined] {
            dropped.extend(link.to_mirror.drain(..).filter(|f| f.injected.is_none()));
            link.mirror_closed = close;
        }
        self.report.frames_lost += dropped.len() as u64;
        self.keep_stale(dropped);
    }

    /// Frames that may turn up, stale, in a later session.
    pub(super) fn keep_stale(&mut self, frames: Vec<WireFrame>) {
        for f in frames {
            if self.stale.len() == STALE_POOL {
                self.stale.pop_front();
            }
            self.stale.push_back(f);
        }
    }

    /// Forgets the sessions closed at both ends.
    pub(super) fn prune(&mut self) {
        self.conns.retain(|c| c.primary_open || c.mirror_open);
    }
}
