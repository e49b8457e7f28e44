//! Which frames a data lane takes, and when: the rule the node's lane (`mojim-node`'s `lane.rs`)
//! and the simulator's mirror both call once the lane's receiver
//! ([`crate::receive::LaneReceiver`]) has checked a frame's fields.
//!
//! | frame                | the session's copy             | the lane                        |
//! |----------------------|--------------------------------|---------------------------------|
//! | Data, Skip, Copied   | any                            | [`LaneStep::Record`]            |
//! | Heartbeat            | any                            | [`LaneStep::AnswerHeartbeat`]   |
//! | CopyBegin            | any (a second one is the same copy) | [`LaneStep::BeginCopy`]    |
//! | Copy                 | closed                         | [`Violation::CopyClosed`]       |
//! | Copy                 | open                           | [`LaneStep::LandCopy`]          |
//! | CopyEnd              | awaiting resent Copy frames    | [`Violation::CopyNotResent`]    |
//! | CopyEnd              | closed (it names the generation) or open | [`LaneStep::EndCopy`] |
//! | anything else        | any                            | [`Violation::Kind`]             |
//!
//! The copy is the session's, shared by its lanes: it opens at the first CopyBegin of any lane
//! and closes once every lane's CopyEnd is in. Where it stands is asked only for a Copy or a
//! CopyEnd (the node keeps it under its session's lock, which a Data frame should not take).

use crate::receive::Violation;
use mojim_format::FrameKind;

/// Where the session's copy stands, as a lane sees it when a frame arrives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CopyPhase {
    /// No copy was announced in this session, or it ended.
    Closed,
    /// A copy was announced (CopyBegin): Copy frames land in the data area.
    Open,
    /// Open, and `frames` Copy frames that failed their check were asked for again
    /// (CopyRetry) and not yet sent again, the first at `first_offset`.
    AwaitingResend { frames: usize, first_offset: u64 },
}

/// What a lane does with a frame it takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LaneStep {
    /// A record for the lane's log: Data, Skip (a void group) or Copied.
    Record,
    /// Answer with a Heartbeat, after every frame before it.
    AnswerHeartbeat,
    /// Open the session's copy: the data area is marked inconsistent before any of it lands.
    BeginCopy,
    /// Land a Copy frame's bytes in the data area (they never enter the log).
    LandCopy,
    /// End this lane's part of the copy, or, without one, name the generation.
    EndCopy,
}

/// What a lane does with a frame of `kind`, or why the peer broke the protocol by sending it;
/// `copy` says where the session's copy stands (called only for Copy and CopyEnd).
pub fn lane_step(kind: FrameKind, copy: impl FnOnce() -> CopyPhase) -> Result<LaneStep, Violation> {
    match kind {
        FrameKind::Data | FrameKind::Skip | FrameKind::Copied => Ok(LaneStep::Record),
        FrameKind::Heartbeat => Ok(LaneStep::AnswerHeartbeat),
        FrameKind::CopyBegin => Ok(LaneStep::BeginCopy),
        FrameKind::Copy => match copy() {
            CopyPhase::Closed => Err(Violation::CopyClosed),
            CopyPhase::Open | CopyPhase::AwaitingResend { .. } => Ok(LaneStep::LandCopy),
        },
        FrameKind::CopyEnd => match copy() {
            CopyPhase::AwaitingResend { frames, first_offset } => {
                Err(Violation::CopyNotResent { frames, first_offset })
            }
            CopyPhase::Closed | CopyPhase::Open => Ok(LaneStep::EndCopy),
        },
        found => Err(Violation::Kind { found }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [CopyPhase; 3] =
        [CopyPhase::Closed, CopyPhase::Open, CopyPhase::AwaitingResend { frames: 2, first_offset: 4096 }];

    fn unasked() -> CopyPhase {
        panic!("the copy's phase is asked only for Copy and CopyEnd")
    }

    #[test]
    fn records_heartbeats_and_copy_begins_are_taken_whatever_the_copy_without_asking_it() {
        for (kind, step) in [
            (FrameKind::Data, LaneStep::Record),
            (FrameKind::Skip, LaneStep::Record),
            (FrameKind::Copied, LaneStep::Record),
            (FrameKind::Heartbeat, LaneStep::AnswerHeartbeat),
            (FrameKind::CopyBegin, LaneStep::BeginCopy),
        ] {
            assert_eq!(lane_step(kind, unasked), Ok(step), "{kind:?}");
        }
    }

    #[test]
    fn a_copy_frame_lands_only_while_the_copy_is_open() {
        assert_eq!(lane_step(FrameKind::Copy, || CopyPhase::Closed), Err(Violation::CopyClosed));
        for phase in &ALL[1..] {
            assert_eq!(lane_step(FrameKind::Copy, || *phase), Ok(LaneStep::LandCopy), "{phase:?}");
        }
        assert!(Violation::CopyClosed.to_string().contains("CopyBegin"), "{}", Violation::CopyClosed);
    }

    #[test]
    fn a_copy_cannot_end_while_rejected_frames_await_their_resend() {
        assert_eq!(
            lane_step(FrameKind::CopyEnd, || ALL[2]),
            Err(Violation::CopyNotResent { frames: 2, first_offset: 4096 })
        );
        // Without a copy, CopyEnd names the generation.
        for phase in &ALL[..2] {
            assert_eq!(lane_step(FrameKind::CopyEnd, || *phase), Ok(LaneStep::EndCopy), "{phase:?}");
        }
    }

    #[test]
    fn frames_of_other_conversations_are_never_taken_on_a_data_lane() {
        for kind in
            [FrameKind::Ack, FrameKind::Hello, FrameKind::Welcome, FrameKind::Refuse, FrameKind::CopyRetry]
        {
            assert_eq!(lane_step(kind, unasked), Err(Violation::Kind { found: kind }), "{kind:?}");
        }
    }
}
