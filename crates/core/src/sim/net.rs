//! The simulated network. Per lane of a session, one connection: an ordered stream each way
//! (TCP-like) that loses nothing while it lives. A connection ends by a close, which its peer
//! reads after whatever was queued before it, or dies: a partition cuts a node's path, what
//! crosses the cut is lost, and a stream that lost something is broken for good in that direction
//! (it cannot skip a hole), so its receiver hears nothing more on it and only a timeout tells it
//! so. Frames travel as whole messages, some of them deliberately bad.

use mojim_format::FRAME_HEADER_SIZE;
use std::collections::VecDeque;

/// How an injected frame was made bad. Every one of them must be refused by the mirror.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Injection {
    /// Random header and body bytes.
    Garbage,
    /// One bit of the header flipped in flight.
    HeaderFlip,
    /// One bit of the body flipped in flight: the header passes, the body check must not.
    BodyFlip,
    /// A field changed and the header re-encoded with a valid checksum (a buggy peer).
    Field(FieldMutation),
    /// A frame of an earlier session (perhaps of a fenced primary) delivered to the current one.
    Stale,
    /// A frame of this session delivered again, after the receiver has moved past it.
    Replay,
    /// A Heartbeat of this session but of the epoch before it, as a fenced primary would send.
    StaleHeartbeat,
    /// The first frame of a group already received on another lane of this session, sent again
    /// on this one (by a peer that authenticated), where this lane expects a new group and the
    /// number is after its last: only the session's window can refuse it.
    SeqResend,
    /// A Data or Skip frame of this session that keeps every rule of its lane but is numbered
    /// beyond the session's window, up to 2⁶⁴−2: only the session's window can refuse it.
    SeqAhead,
}

impl Injection {
    /// Every rule of its lane holds for it: the lane may wait for room before the session's
    /// window refuses it.
    pub fn passes_lane_checks(self) -> bool {
        matches!(self, Injection::SeqResend | Injection::SeqAhead)
    }
}

/// Which header field a buggy peer got wrong. Each makes the frame invalid whatever the
/// receiver's state, when applied to the frame the receiver expects next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum FieldMutation {
    Kind,
    Flags,
    Lane,
    /// An epoch above the session's.
    Epoch,
    /// An epoch below the session's: a fenced primary's.
    EpochBelow,
    Session,
    BodyLenOverMax,
    OffsetPastRegion,
    OffsetOverflow,
    SeqZero,
    FrameIndexSkip,
}

impl FieldMutation {
    pub const ALL: [FieldMutation; 11] = [
        FieldMutation::Kind,
        FieldMutation::Flags,
        FieldMutation::Lane,
        FieldMutation::Epoch,
        FieldMutation::EpochBelow,
        FieldMutation::Session,
        FieldMutation::BodyLenOverMax,
        FieldMutation::OffsetPastRegion,
        FieldMutation::OffsetOverflow,
        FieldMutation::SeqZero,
        FieldMutation::FrameIndexSkip,
    ];
}

/// One frame on the wire: a header and its body.
#[derive(Clone, Debug)]
pub(super) struct WireFrame {
    pub header: [u8; FRAME_HEADER_SIZE],
    pub body: Vec<u8>,
    /// Set for frames the simulator made bad on purpose.
    pub injected: Option<Injection>,
}

/// One lane's connection: frames to the mirror, acks to the primary, and how each direction
/// ends.
#[derive(Clone, Debug, Default)]
pub(super) struct Link {
    pub to_mirror: VecDeque<WireFrame>,
    pub to_primary: VecDeque<[u8; FRAME_HEADER_SIZE]>,
    /// The primary closed its end: the mirror reads the end of the stream after the frames
    /// queued.
    pub primary_closed: bool,
    /// The mirror closed its end: the primary reads the end of the stream after the acks queued.
    pub mirror_closed: bool,
    /// Something was lost in this direction: nothing more arrives, heartbeats included.
    pub broken_to_mirror: bool,
    pub broken_to_primary: bool,
    /// The last tick each end heard anything (data, close or heartbeat) on this lane.
    pub mirror_heard: u64,
    pub primary_heard: u64,
}

impl Link {
    pub fn is_idle(&self) -> bool {
        self.to_mirror.is_empty() && self.to_primary.is_empty()
    }
}

/// The lanes of one session, as both ends see them. Lanes join in order, one handshake each; the
/// primary opens its end once every lane has joined, the mirror opens its end at the first.
#[derive(Clone, Debug)]
pub(super) struct Conn {
    pub session: u64,
    /// The primary node (index into the world's nodes) whose session it is.
    pub node: usize,
    pub links: Vec<Link>,
    /// Lanes whose handshake completed: `0..joined`.
    pub joined: usize,
    pub primary_open: bool,
    pub mirror_open: bool,
}

impl Conn {
    pub fn new(session: u64, node: usize, lanes: usize, now: u64) -> Conn {
        Conn {
            session,
            node,
            links: vec![Link { mirror_heard: now, primary_heard: now, ..Link::default() }; lanes],
            joined: 0,
            primary_open: false,
            mirror_open: false,
        }
    }

    /// Both ends open, every lane joined, nothing in flight and nothing broken: nothing will
    /// happen on its own.
    pub fn is_settled(&self) -> bool {
        self.primary_open
            && self.mirror_open
            && self.joined == self.links.len()
            && self.links.iter().all(|l| l.is_idle() && !l.broken_to_mirror && !l.broken_to_primary)
    }
}

/// Until when each direction of one lane of a node's path to the mirror is cut (exclusive).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Cut {
    pub to_mirror_until: u64,
    pub to_primary_until: u64,
}

impl Cut {
    pub fn toward_mirror(self, now: u64) -> bool {
        now < self.to_mirror_until
    }

    pub fn toward_primary(self, now: u64) -> bool {
        now < self.to_primary_until
    }

    pub fn any(self, now: u64) -> bool {
        self.toward_mirror(now) || self.toward_primary(now)
    }
}
