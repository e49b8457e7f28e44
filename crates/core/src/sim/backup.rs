//! The mirror's backups, as much of them as the mirror's ack gate reads
//! ([`crate::mirror::ack`]): the applied groups queued for them (their numbers and bytes), and the
//! highest number every backup has acknowledged, which advances on the backups' own schedule.
//!
//! The backups are other machines: a crash or power cut of the mirror leaves them as they are.
//! Their copies' contents are not modelled; what is checked is when the mirror acknowledges
//! ([`Backups::check_ack`]).

use super::rng::Rng;
use super::{BackupConfig, Check};
use crate::mirror::AckRule;
use std::collections::VecDeque;

/// Most groups the backups acknowledge in one tick.
const MOST_PER_TICK: u64 = 3;

pub(super) struct Backups {
    cfg: BackupConfig,
    /// The backups' own schedule, apart from the world's generator, so that a run without
    /// backups draws what it drew before they were modelled.
    rng: Rng,
    /// Applied groups not yet at every backup, in sequence order: number and bytes.
    queue: VecDeque<(u64, u64)>,
    queued_bytes: u64,
    /// The highest number every backup has acknowledged.
    all_acked_seq: u64,
}

impl Backups {
    pub fn new(cfg: BackupConfig, seed: u64) -> Backups {
        Backups {
            cfg,
            rng: Rng::new(seed ^ 0x6261_636B_7570_732E),
            queue: VecDeque::new(),
            queued_bytes: 0,
            all_acked_seq: 0,
        }
    }

    pub fn count(&self) -> usize {
        self.cfg.count
    }

    pub fn rule(&self) -> AckRule {
        AckRule { secondary_tier_thresh: self.cfg.secondary_tier_thresh, chain: self.cfg.chain }
    }

    pub fn queued_bytes(&self) -> u64 {
        self.queued_bytes
    }

    pub fn all_acked_seq(&self) -> u64 {
        self.all_acked_seq
    }

    /// Whether groups wait for the backups' acknowledgement.
    pub fn behind(&self) -> bool {
        !self.queue.is_empty()
    }

    /// Group `seq` of `bytes` was applied: it is queued for the backups (once: a group applied
    /// again after a power cut lost its applied number is already on its way).
    pub fn applied(&mut self, seq: u64, bytes: u64) {
        let last = self.queue.back().map_or(self.all_acked_seq, |&(s, _)| s);
        if self.cfg.count == 0 || seq <= last {
            return;
        }
        self.queue.push_back((seq, bytes));
        self.queued_bytes += bytes;
    }

    /// One tick: now and then every backup acknowledges the next few queued groups. Returns
    /// whether any did.
    pub fn tick(&mut self) -> bool {
        if self.queue.is_empty() || !self.rng.chance_pct(self.cfg.pace_pct) {
            return false;
        }
        for _ in 0..self.rng.between(1, MOST_PER_TICK) {
            let Some((seq, bytes)) = self.queue.pop_front() else { break };
            self.queued_bytes -= bytes;
            self.all_acked_seq = seq;
        }
        true
    }

    /// The mirror acknowledges group `seq` while `waiting_bytes` could be applied now: in chain mode
    /// every backup must have the group; otherwise the bytes not yet at every backup must be
    /// within the threshold. (In chain mode the threshold's gate is passed before the chain's,
    /// and the bytes may grow again while the lane waits at the second.)
    pub fn check_ack(&self, seq: u64, waiting_bytes: u64) -> Check<()> {
        if self.cfg.count == 0 {
            return Ok(());
        }
        if self.cfg.chain {
            if self.all_acked_seq < seq {
                return Err(format!(
                    "chain broken: the mirror acknowledged group {seq} before every backup had it \
                     (they have up to {})",
                    self.all_acked_seq
                ));
            }
            return Ok(());
        }
        let behind = self.queued_bytes + waiting_bytes;
        if behind > self.cfg.secondary_tier_thresh {
            return Err(format!(
                "secondary tier broken: the mirror acknowledged group {seq} with {behind} bytes not yet \
                 at every backup ({} queued, {waiting_bytes} waiting to be applied), over the threshold {}",
                self.queued_bytes, self.cfg.secondary_tier_thresh
            ));
        }
        Ok(())
    }
}
