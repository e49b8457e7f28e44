//! One incarnation of the primary: the application writes random bytes into its region and
//! issues groups; each group gets the session's next sequence number and goes out on one lane as
//! consecutive Data frames. Acks arrive per lane in order; when the session ends, every
//! unacknowledged group fails (the application is told it is not durable). An incarnation has
//! one epoch for life, given by the coordinator that started it.

use super::model::{Model, Writes};
use super::net::{Link, WireFrame};
use super::rng::Rng;
use super::{Check, SimConfig};
use crate::encode::{check_group, data_header, frames, GroupLimits, RangeError, SessionTag};
use crate::Range;
use mojim_format::{FrameHeader, FrameKind, FRAME_HEADER_SIZE};
use std::collections::VecDeque;

/// Frames of a session kept to be replayed, stale, into a later one.
const RECENT_FRAMES: usize = 16;

pub(super) struct Primary {
    /// Which incarnation this is (its node's index in the world).
    node: usize,
    epoch: u64,
    region: Vec<u8>,
    session: Option<PrimarySession>,
}

struct PrimarySession {
    id: u64,
    next_seq: u64,
    /// Per lane, the groups sent and not yet acknowledged, in order.
    unacked: Vec<VecDeque<u64>>,
    recent: VecDeque<WireFrame>,
}

impl Primary {
    pub fn new(node: usize, epoch: u64, region_size: u64) -> Primary {
        Primary { node, epoch, region: vec![0; region_size as usize], session: None }
    }

    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The open session's id, if any.
    pub fn session(&self) -> Option<u64> {
        self.session.as_ref().map(|s| s.id)
    }

    /// A promoted incarnation resumes from a copy of the region it was given.
    pub fn take_copy(&mut self, data: &[u8]) {
        self.region.copy_from_slice(data);
    }

    /// Every lane's handshake is done: groups start at `next_seq`.
    pub fn begin(&mut self, id: u64, next_seq: u64, lanes: u16) {
        assert!(self.session.is_none(), "primary session begun twice");
        self.session = Some(PrimarySession {
            id,
            next_seq,
            unacked: vec![VecDeque::new(); lanes as usize],
            recent: VecDeque::with_capacity(RECENT_FRAMES),
        });
    }

    /// Groups sent and not yet acknowledged.
    pub fn outstanding(&self) -> usize {
        self.session.as_ref().map_or(0, |s| s.unacked.iter().map(VecDeque::len).sum())
    }

    /// The application writes and syncs one group of random ranges. Returns its sequence number.
    pub fn issue(
        &mut self,
        cfg: &SimConfig,
        limits: &GroupLimits,
        rng: &mut Rng,
        links: &mut [Link],
        model: &mut Model,
    ) -> Check<Option<u64>> {
        let Some(s) = self.session.as_mut() else {
            return Ok(None);
        };
        let region_size = cfg.region_size;
        let mf = u64::from(cfg.max_frame);
        let count = rng.between(1, cfg.max_ranges as u64) as usize;
        let mut ranges: Vec<Range> = (0..count)
            .map(|_| {
                let len = if rng.chance_pct(cfg.large_range_pct) {
                    rng.between(mf / 2, 3 * mf)
                } else {
                    match rng.below(10) {
                        0 => 0,
                        1..=6 => rng.between(1, 64),
                        _ => rng.between(1, mf),
                    }
                }
                .min(region_size);
                Range::new(rng.below(region_size - len + 1), len)
            })
            .collect();
        if ranges.iter().all(|r| r.len == 0) {
            ranges[0] = Range::new(rng.below(region_size), 1);
        }
        let shape = loop {
            match check_group(&ranges, limits) {
                Ok(shape) => break shape,
                Err(RangeError::GroupTooLarge { .. }) => {
                    for r in &mut ranges {
                        if r.len > 1 {
                            r.len /= 2;
                        }
                    }
                }
                Err(e) => return Err(format!("check_group refused a valid group: {e}")),
            }
        };
        for r in &ranges {
            rng.fill(&mut self.region[r.offset as usize..(r.offset + r.len) as usize]);
        }
        let seq = s.next_seq;
        s.next_seq += 1;
        let lane = rng.index(links.len());
        let tag = SessionTag { session: s.id, epoch: self.epoch, lane: lane as u16 };
        let mut writes: Writes = Vec::with_capacity(shape.frames as usize);
        for plan in frames(&ranges, cfg.max_frame, shape) {
            let at = plan.offset as usize;
            let body = self.region[at..at + plan.len as usize].to_vec();
            let header = data_header(tag, seq, plan, &body);
            writes.push((plan.offset, body.clone()));
            let frame = WireFrame { header, body, injected: None };
            if s.recent.len() == RECENT_FRAMES {
                s.recent.pop_front();
            }
            s.recent.push_back(frame.clone());
            links[lane].to_mirror.push_back(frame);
        }
        if writes.len() != shape.frames as usize || writes.is_empty() {
            return Err(format!(
                "frames() cut {} frames, check_group promised {}",
                writes.len(),
                shape.frames
            ));
        }
        model.issued((s.id, seq), writes);
        s.unacked[lane].push_back(seq);
        Ok(Some(seq))
    }

    /// An ack arrived on `lane`: it must name the oldest outstanding group of that lane.
    pub fn on_ack(&mut self, lane: usize, bytes: &[u8; FRAME_HEADER_SIZE], model: &mut Model) -> Check<u64> {
        let s = self.session.as_mut().ok_or("ack delivered outside a session")?;
        let h = FrameHeader::decode(bytes)
            .map_err(|e| format!("primary got a corrupt ack on lane {lane}: {e}"))?;
        if h.kind != FrameKind::Ack
            || usize::from(h.lane) != lane
            || h.session != s.id
            || h.epoch != self.epoch
        {
            return Err(format!("primary got a misdirected ack on lane {lane} (session {:#x}): {h:?}", s.id));
        }
        match s.unacked[lane].pop_front() {
            Some(seq) if seq == h.seq => {
                model.acked((s.id, seq), self.node, self.epoch)?;
                Ok(seq)
            }
            other => Err(format!(
                "primary got an ack for group {} on lane {lane}, oldest outstanding is {other:?}",
                h.seq
            )),
        }
    }

    /// The session is over: every outstanding group fails. Returns the frames recently sent,
    /// which a later session may see again as stale frames.
    pub fn end(&mut self, model: &mut Model) -> Vec<WireFrame> {
        let Some(s) = self.session.take() else {
            return Vec::new();
        };
        model.failed(s.unacked.iter().map(VecDeque::len).sum());
        s.recent.into()
    }
}
