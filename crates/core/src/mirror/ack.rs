//! The ack gate: when a mirror with backups may acknowledge a group.
//!
//! A lane acknowledges a group once the group is whole and persistent in the lane's log (the
//! lane's own rule, [`crate::lane::MirrorLane::commit`]); that is all an acknowledgement
//! promises the primary. A mirror that feeds backups holds the acknowledgement back at two gates,
//! passed in turn, each asked again until it opens:
//!
//! 1. **The secondary tier's threshold** (`secondary_tier_thresh`). While the bytes not yet at
//!    every backup exceed it, the lane waits: the applied groups queued for the backups, and the
//!    complete groups that can be applied now (which will be queued once they are; groups after
//!    a gap are not counted, since the lane held here may be the one that brings the gap's
//!    group: counted, they held every lane for good once they passed the threshold). This is
//!    the stall that bounds how far the backups lag behind what was acknowledged. A group not
//!    applied cannot be forwarded, so before it waits the lane applies what it can itself, once.
//! 2. **Chain mode** (`chain`). The lane waits until every backup has acknowledged the group
//!    itself, after applying what it can itself, once (the group is forwarded only once it is
//!    applied).
//!
//! With no backup both gates are open. A gate once passed is not asked again for the group, so
//! in chain mode a group may be acknowledged while the bytes behind it are over the threshold
//! again. A wait ends without an acknowledgement when the data area fails (nothing more is
//! applied or forwarded: the group stays in its log, for recovery) or when the lane's connection
//! is gone; it ends with one when the node shuts down (the group is persistent in the log; only
//! the backups' pace is given up).
//!
//! Nothing here waits or does I/O: the runtime asks [`AckGate::decide`] with what it sees now
//! ([`AckView`]), does what the [`AckDecision`] says, and asks again. The node's `forward.rs`
//! waits on its forwarder's condition variable, sending heartbeats; the simulator's mirror holds
//! the acknowledgement and asks again each tick, against its model of the backups.

/// The configuration the gates read: `[mirror] secondary_tier_thresh` and `chain`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AckRule {
    /// Bytes not yet at every backup above which lanes stop acknowledging.
    pub secondary_tier_thresh: u64,
    /// Acknowledge a group only once every backup has it.
    pub chain: bool,
}

/// What the runtime sees when it asks the gate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AckView {
    /// Backups this node feeds.
    pub backups: usize,
    /// Bytes of applied groups not yet acknowledged by every backup.
    pub queued_bytes: u64,
    /// Bytes of the complete groups that can be applied now: the gap-free run after the applied
    /// prefix (the group asked about among them, until it is applied). Groups after a gap are
    /// not counted: they wait for a lane to bring the missing group, perhaps the very lane
    /// this gate holds, so counting them could hold every lane for good.
    pub waiting_bytes: u64,
    /// The highest sequence number every backup has acknowledged.
    pub all_acked_seq: u64,
    /// The data area failed: nothing more is applied or forwarded until a restart.
    pub data_failed: bool,
    /// The lane's connection still works (its heartbeats get through).
    pub lane_alive: bool,
    pub shutting_down: bool,
}

/// Why a gate is closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hold {
    /// More than the threshold is not yet at every backup.
    OverThreshold { behind_bytes: u64, thresh_bytes: u64 },
    /// Chain mode: a backup lacks the group.
    NotAtBackups { seq: u64, all_acked_seq: u64 },
}

/// Why a group is never acknowledged by this lane.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoAck {
    /// The data area failed while the lane waited: the lane ends with the storage's message.
    DataFailed,
    /// The lane's connection is gone: nothing can be sent on it.
    LaneGone,
}

/// What the runtime does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AckDecision {
    /// Send the acknowledgement now.
    Ack,
    /// Apply the complete groups that can be applied, on this thread, then ask again.
    ApplyInline(Hold),
    /// Wait for the backups (an acknowledgement of theirs, a group applied, or a tick; keep the
    /// lane's heartbeats going), then ask again.
    Wait(Hold),
    /// Send nothing, ever, for this group.
    Refuse(NoAck),
}

/// A fault injected on purpose into the gate, for the simulator to prove it catches it.
#[cfg(feature = "sim")]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AckFault {
    #[default]
    None,
    /// The threshold's gate is always open: acknowledges while backups lag past it.
    PastThreshold,
    /// The chain's gate is always open: acknowledges before every backup has the group.
    ChainEarly,
}

/// Which gate a group's acknowledgement is at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    /// `applied`: the lane already applied inline at this gate.
    Threshold {
        applied: bool,
    },
    Chain {
        applied: bool,
    },
    Open,
}

/// The gates of one group's acknowledgement, asked until it is sent or refused.
#[derive(Clone, Debug)]
pub struct AckGate {
    rule: AckRule,
    seq: u64,
    stage: Stage,
    #[cfg(feature = "sim")]
    fault: AckFault,
}

impl AckGate {
    /// The gates for group `seq`, which is whole and persistent in its lane's log.
    pub fn new(rule: AckRule, seq: u64) -> AckGate {
        AckGate {
            rule,
            seq,
            stage: Stage::Threshold { applied: false },
            #[cfg(feature = "sim")]
            fault: AckFault::None,
        }
    }

    /// Breaks the gate on purpose (simulator tests only).
    #[cfg(feature = "sim")]
    pub fn inject(&mut self, fault: AckFault) {
        self.fault = fault;
    }

    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// Whether a fault opens the threshold's gate (`chain`: the chain's).
    fn broken(&self, chain: bool) -> bool {
        #[cfg(feature = "sim")]
        {
            self.fault == if chain { AckFault::ChainEarly } else { AckFault::PastThreshold }
        }
        #[cfg(not(feature = "sim"))]
        {
            let _ = chain;
            false
        }
    }

    /// What to do now, as `view` shows the node. An [`AckDecision::ApplyInline`] is taken as
    /// done: the next question is asked after it.
    pub fn decide(&mut self, view: &AckView) -> AckDecision {
        if !view.lane_alive {
            return AckDecision::Refuse(NoAck::LaneGone);
        }
        if view.backups == 0 {
            return AckDecision::Ack;
        }
        loop {
            match self.stage {
                Stage::Threshold { applied } => {
                    let behind_bytes = view.queued_bytes.saturating_add(view.waiting_bytes);
                    let thresh_bytes = self.rule.secondary_tier_thresh;
                    if behind_bytes <= thresh_bytes || self.broken(false) {
                        self.stage = Stage::Chain { applied: false };
                        continue;
                    }
                    let hold = Hold::OverThreshold { behind_bytes, thresh_bytes };
                    if !applied {
                        self.stage = Stage::Threshold { applied: true };
                        return AckDecision::ApplyInline(hold);
                    }
                    if view.shutting_down {
                        self.stage = Stage::Chain { applied: false };
                        continue;
                    }
                    if view.data_failed {
                        return AckDecision::Refuse(NoAck::DataFailed);
                    }
                    return AckDecision::Wait(hold);
                }
                Stage::Chain { applied } => {
                    if !self.rule.chain || self.broken(true) {
                        self.stage = Stage::Open;
                        continue;
                    }
                    let hold = Hold::NotAtBackups { seq: self.seq, all_acked_seq: view.all_acked_seq };
                    if !applied {
                        self.stage = Stage::Chain { applied: true };
                        return AckDecision::ApplyInline(hold);
                    }
                    if view.all_acked_seq >= self.seq || view.shutting_down {
                        self.stage = Stage::Open;
                        continue;
                    }
                    if view.data_failed {
                        return AckDecision::Refuse(NoAck::DataFailed);
                    }
                    return AckDecision::Wait(hold);
                }
                Stage::Open => return AckDecision::Ack,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use AckDecision::*;

    const RULE: AckRule = AckRule { secondary_tier_thresh: 100, chain: false };
    const CHAIN: AckRule = AckRule { secondary_tier_thresh: 100, chain: true };

    /// One backup, nothing behind, everything fine.
    fn calm() -> AckView {
        AckView {
            backups: 1,
            queued_bytes: 0,
            waiting_bytes: 0,
            all_acked_seq: 0,
            data_failed: false,
            lane_alive: true,
            shutting_down: false,
        }
    }

    fn over(thresh_bytes: u64, behind_bytes: u64) -> Hold {
        Hold::OverThreshold { behind_bytes, thresh_bytes }
    }

    #[test]
    fn without_backups_both_gates_are_open_whatever_lags() {
        let v = AckView { backups: 0, queued_bytes: 1 << 40, waiting_bytes: 1 << 40, ..calm() };
        assert_eq!(AckGate::new(CHAIN, 7).decide(&v), Ack);
        // Even with the data area failed: the group is persistent in its log.
        assert_eq!(AckGate::new(RULE, 7).decide(&AckView { data_failed: true, ..v }), Ack);
    }

    #[test]
    fn at_or_under_the_threshold_a_group_is_acknowledged_at_once() {
        let v = AckView { queued_bytes: 60, waiting_bytes: 40, ..calm() };
        assert_eq!(AckGate::new(RULE, 3).decide(&v), Ack, "100 bytes behind, the threshold is 100");
    }

    #[test]
    fn over_the_threshold_the_lane_applies_once_then_waits_until_the_backups_catch_up() {
        let mut g = AckGate::new(RULE, 3);
        let v = AckView { queued_bytes: 80, waiting_bytes: 40, ..calm() };
        assert_eq!(g.decide(&v), ApplyInline(over(100, 120)));
        // Applying moved the waiting bytes to the queue: still over, and not applied again.
        let v = AckView { queued_bytes: 120, waiting_bytes: 0, ..v };
        assert_eq!(g.decide(&v), Wait(over(100, 120)));
        assert_eq!(g.decide(&v), Wait(over(100, 120)));
        assert_eq!(g.decide(&AckView { queued_bytes: 100, ..v }), Ack);
    }

    #[test]
    fn a_failed_data_area_ends_a_wait_without_an_ack_but_not_an_open_gate() {
        let failed = AckView { queued_bytes: 200, data_failed: true, ..calm() };
        let mut g = AckGate::new(RULE, 3);
        assert_eq!(g.decide(&failed), ApplyInline(over(100, 200)));
        assert_eq!(g.decide(&failed), Refuse(NoAck::DataFailed));
        // Nothing behind: nothing to wait for, and the group is persistent in its log.
        assert_eq!(AckGate::new(RULE, 3).decide(&AckView { queued_bytes: 0, ..failed }), Ack);
        let mut g = AckGate::new(CHAIN, 3);
        let failed = AckView { data_failed: true, all_acked_seq: 2, ..calm() };
        assert!(matches!(g.decide(&failed), ApplyInline(Hold::NotAtBackups { .. })));
        assert_eq!(g.decide(&failed), Refuse(NoAck::DataFailed));
    }

    #[test]
    fn a_lane_whose_connection_is_gone_acknowledges_nothing() {
        let gone = AckView { lane_alive: false, ..calm() };
        assert_eq!(AckGate::new(RULE, 3).decide(&gone), Refuse(NoAck::LaneGone));
        let mut g = AckGate::new(CHAIN, 3);
        assert!(matches!(g.decide(&calm()), ApplyInline(_)));
        assert!(matches!(g.decide(&calm()), Wait(_)));
        assert_eq!(g.decide(&gone), Refuse(NoAck::LaneGone));
        assert_eq!(g.decide(&AckView { backups: 0, ..gone }), Refuse(NoAck::LaneGone));
    }

    #[test]
    fn shutting_down_ends_the_waits_with_an_ack() {
        let v = AckView { queued_bytes: 500, shutting_down: true, ..calm() };
        let mut g = AckGate::new(RULE, 3);
        assert_eq!(g.decide(&v), ApplyInline(over(100, 500)), "it applies first, as a stall does");
        assert_eq!(g.decide(&v), Ack);
        let mut g = AckGate::new(CHAIN, 3);
        assert_eq!(g.decide(&v), ApplyInline(over(100, 500)));
        assert!(matches!(g.decide(&v), ApplyInline(Hold::NotAtBackups { .. })));
        assert_eq!(g.decide(&v), Ack, "no backup has group 3, but the node stops");
    }

    #[test]
    fn in_chain_mode_the_lane_applies_then_waits_until_every_backup_has_the_group() {
        let mut g = AckGate::new(CHAIN, 5);
        let v = AckView { all_acked_seq: 4, ..calm() };
        let hold = Hold::NotAtBackups { seq: 5, all_acked_seq: 4 };
        assert_eq!(g.decide(&v), ApplyInline(hold), "a group is forwarded once applied");
        assert_eq!(g.decide(&v), Wait(hold));
        assert_eq!(g.decide(&AckView { all_acked_seq: 5, ..v }), Ack);
        // Applied inline even when the backups have it already, as the node always did.
        let mut g = AckGate::new(CHAIN, 5);
        let v = AckView { all_acked_seq: u64::MAX, ..calm() };
        assert!(matches!(g.decide(&v), ApplyInline(_)));
        assert_eq!(g.decide(&v), Ack);
    }

    #[test]
    fn the_gates_come_in_turn_and_a_passed_gate_is_not_asked_again() {
        let mut g = AckGate::new(CHAIN, 5);
        let lagging = AckView { queued_bytes: 300, all_acked_seq: 1, ..calm() };
        assert_eq!(g.decide(&lagging), ApplyInline(over(100, 300)));
        assert_eq!(g.decide(&lagging), Wait(over(100, 300)));
        // Under the threshold: on to the chain's gate, which applies again.
        let caught_up = AckView { queued_bytes: 50, ..lagging };
        let hold = Hold::NotAtBackups { seq: 5, all_acked_seq: 1 };
        assert_eq!(g.decide(&caught_up), ApplyInline(hold));
        assert_eq!(g.decide(&lagging), Wait(hold), "the threshold's gate is behind it");
        assert_eq!(g.decide(&AckView { all_acked_seq: 9, ..lagging }), Ack);
        assert_eq!(g.seq(), 5);
    }

    #[test]
    fn bytes_behind_saturate_rather_than_wrap() {
        let v = AckView { queued_bytes: u64::MAX, waiting_bytes: 2, ..calm() };
        let rule = AckRule { secondary_tier_thresh: u64::MAX - 1, chain: false };
        assert_eq!(AckGate::new(rule, 1).decide(&v), ApplyInline(over(u64::MAX - 1, u64::MAX)));
    }

    #[cfg(feature = "sim")]
    #[test]
    fn injected_faults_open_one_gate_each() {
        let lagging = AckView { queued_bytes: 300, all_acked_seq: 1, ..calm() };
        let mut g = AckGate::new(RULE, 5);
        g.inject(AckFault::PastThreshold);
        assert_eq!(g.decide(&lagging), Ack);
        let mut g = AckGate::new(CHAIN, 5);
        g.inject(AckFault::ChainEarly);
        assert_eq!(g.decide(&lagging), ApplyInline(over(100, 300)), "the threshold still holds");
        assert_eq!(g.decide(&AckView { queued_bytes: 0, ..lagging }), Ack);
    }
}
