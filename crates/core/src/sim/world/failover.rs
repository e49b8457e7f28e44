//! The faults of fail-over: the coordinator promotes a new primary incarnation while the old
//! one runs on, unaware; partitions cut a node's path to the mirror; heartbeats cross what is up,
//! and an end that hears nothing on a lane for `dead_ticks` declares it dead.

use super::{Node, World};
use crate::sim::Check;
use std::ops::Range;

/// Primary incarnations running at once, at most: old ones stop some time after a promotion.
const MAX_RUNNING: usize = 3;

/// Which directions of a path a cut takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Direction {
    ToMirror,
    ToPrimary,
    Both,
}

impl World {
    /// The coordinator promotes a new incarnation with the next epoch; it takes its copy of the
    /// region from the mirror when its first handshake is accepted. The incarnations before it
    /// are not told: each runs on for a while, writing and reconnecting at its own epoch, and the
    /// last one is often cut off, as by the partition that made the coordinator give up on it.
    pub(super) fn promote(&mut self) {
        if self.nodes.iter().filter(|n| n.alive).count() >= MAX_RUNNING {
            return;
        }
        // The coordinator promotes only from a consistent copy, as the mirror reports it.
        if self.discard_due || !self.mirror.reports_consistent() {
            return;
        }
        let dead = self.cfg.dead_ticks;
        let old = self.nodes.len() - 1;
        let epoch = self.nodes[old].primary.epoch() + 1;
        for node in 0..self.nodes.len() {
            if self.nodes[node].alive && self.nodes[node].stop_at.is_none() {
                self.nodes[node].stop_at = Some(self.now + self.rng.between(1, 4 * dead));
            }
        }
        if self.nodes[old].alive && self.rng.chance_pct(50) {
            let direction = self.direction();
            let until = self.now + self.rng.between(dead, 4 * dead);
            self.cut(old, 0..self.cfg.lanes as usize, direction, until);
        }
        let index = self.nodes.len();
        let reconnect_at = self.now + self.rng.between(0, 2 * dead);
        self.nodes.push(Node::new(index, epoch, &self.cfg, reconnect_at));
        self.report.promotions += 1;
        self.note(format!("promote primary {index} at epoch {epoch}; primary {old} runs on"));
    }

    /// The promotion of `node`, the newest incarnation, which has not yet taken its copy, is
    /// refused (the mirror's copy is not consistent): it never runs, and the incarnation it was
    /// to replace runs on, no longer told to stop.
    pub(super) fn withdraw_promotion(&mut self, node: usize) {
        assert!(node == self.nodes.len() - 1 && !self.nodes[node].has_copy, "withdraw primary {node}");
        assert!(self.conns.iter().all(|c| c.node != node), "a promotion withdrawn with a session open");
        self.nodes.pop();
        self.report.promotions -= 1;
        if let Some(prev) = self.nodes.last_mut() {
            prev.stop_at = None;
        }
        self.note(format!("the promotion of primary {node} is refused: the mirror's copy is not consistent"));
    }

    /// A running node's path to the mirror is cut for a while, on one lane or all.
    pub(super) fn partition(&mut self) {
        let running: Vec<usize> = (0..self.nodes.len()).filter(|&n| self.nodes[n].alive).collect();
        if running.is_empty() {
            return;
        }
        let node = running[self.rng.index(running.len())];
        let lanes = self.cfg.lanes as usize;
        let range = if self.rng.chance_pct(50) {
            0..lanes
        } else {
            let lane = self.rng.index(lanes);
            lane..lane + 1
        };
        let direction = self.direction();
        let until = self.now + self.rng.between(1, 3 * self.cfg.dead_ticks);
        self.report.partitions += 1;
        self.note(format!("cut primary {node}'s lanes {range:?} {direction:?} until t={until}"));
        self.cut(node, range, direction, until);
    }

    fn direction(&mut self) -> Direction {
        match self.rng.below(3) {
            0 => Direction::ToMirror,
            1 => Direction::ToPrimary,
            _ => Direction::Both,
        }
    }

    fn cut(&mut self, node: usize, lanes: Range<usize>, direction: Direction, until: u64) {
        for cut in &mut self.nodes[node].cuts[lanes] {
            if direction != Direction::ToPrimary {
                cut.to_mirror_until = cut.to_mirror_until.max(until);
            }
            if direction != Direction::ToMirror {
                cut.to_primary_until = cut.to_primary_until.max(until);
            }
        }
    }

    /// Old incarnations whose time has come stop.
    pub(super) fn stop_due(&mut self) {
        for node in 0..self.nodes.len() {
            if self.nodes[node].alive && self.nodes[node].stop_at.is_some_and(|t| t <= self.now) {
                let clean = self.rng.chance_pct(50);
                self.stop(node, clean);
            }
        }
    }

    /// Node `node` stops for good: its process exits and its connections close (`clean`), or
    /// its machine dies and they go silent.
    pub(super) fn stop(&mut self, node: usize, clean: bool) {
        let how = if clean { "stops" } else { "dies with its machine" };
        self.note(format!("primary {node} {how}"));
        self.primary_end(node, how.into(), clean);
        self.nodes[node].alive = false;
    }

    /// Running nodes without a session try to open one.
    pub(super) fn reconnect_due(&mut self) -> Check<()> {
        for node in 0..self.nodes.len() {
            let n = &self.nodes[node];
            if n.alive && n.primary.session().is_none() && self.now >= n.reconnect_at {
                self.connect(node)?;
            }
        }
        Ok(())
    }

    /// One tick of the network. What crosses a cut is lost and breaks its stream for good; what
    /// reaches an end that has closed is discarded; a live direction carries a heartbeat from an
    /// open end (and anything still queued counts as hearing); an end that heard nothing on a
    /// lane for `dead_ticks` declares it dead and ends its side of the session.
    pub(super) fn tick_network(&mut self) -> Check<()> {
        let (now, dead) = (self.now, self.cfg.dead_ticks);
        let mut dropped = Vec::new();
        let mut mirror_dead = None;
        let mut primaries_dead = Vec::new();
        for c in &mut self.conns {
            let cuts = &self.nodes[c.node].cuts;
            let (mirror_open, primary_open) = (c.mirror_open, c.primary_open);
            for (lane, (link, cut)) in c.links[..c.joined].iter_mut().zip(cuts).enumerate() {
                if mirror_open
                    && primary_open
                    && !cut.any(now)
                    && !link.broken_to_mirror
                    && !link.broken_to_primary
                {
                    // The common case: both ends hear each other's heartbeats.
                    link.mirror_heard = now;
                    link.primary_heard = now;
                    continue;
                }
                let pending = !link.to_mirror.is_empty() || link.primary_closed;
                if !mirror_open || link.broken_to_mirror || cut.toward_mirror(now) {
                    link.broken_to_mirror |= mirror_open && pending;
                    dropped.extend(link.to_mirror.drain(..).filter(|f| f.injected.is_none()));
                } else if primary_open || pending {
                    link.mirror_heard = now;
                }
                let pending = !link.to_primary.is_empty() || link.mirror_closed;
                if !primary_open || link.broken_to_primary || cut.toward_primary(now) {
                    link.broken_to_primary |= primary_open && pending;
                    link.to_primary.clear();
                } else if mirror_open || pending {
                    link.primary_heard = now;
                }
                if mirror_open && now - link.mirror_heard > dead && mirror_dead.is_none() {
                    mirror_dead = Some(lane);
                }
                let noted = primaries_dead.last().is_some_and(|&(node, _)| node == c.node);
                if primary_open && now - link.primary_heard > dead && !noted {
                    primaries_dead.push((c.node, lane));
                }
            }
        }
        if !dropped.is_empty() {
            self.report.frames_lost += dropped.len() as u64;
            self.keep_stale(dropped);
        }
        if let Some(lane) = mirror_dead {
            self.report.timeouts += 1;
            self.mirror_end(format!("lane {lane} heard nothing for {dead} ticks"))?;
        }
        for (node, lane) in primaries_dead {
            self.report.timeouts += 1;
            self.primary_end(node, format!("lane {lane} heard nothing for {dead} ticks"), true);
        }
        Ok(())
    }
}
