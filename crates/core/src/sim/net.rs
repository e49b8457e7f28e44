//! The simulated network: per lane, one ordered, reliable stream each way (TCP-like). Bytes are
//! never lost silently; a fault is a disconnect, which ends the session. Frames travel as whole
//! messages, some of them deliberately bad.

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
    /// A frame of an earlier session delivered to the current one.
    Stale,
    /// A frame of this session delivered again, after the receiver has moved past it.
    Replay,
}

/// Which header field a buggy peer got wrong. Each makes the frame invalid whatever the
/// receiver's state, when applied to the frame the receiver expects next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum FieldMutation {
    Kind,
    Flags,
    Lane,
    Epoch,
    Session,
    BodyLenOverMax,
    OffsetPastRegion,
    OffsetOverflow,
    SeqZero,
    FrameIndexSkip,
}

impl FieldMutation {
    pub const ALL: [FieldMutation; 10] = [
        FieldMutation::Kind,
        FieldMutation::Flags,
        FieldMutation::Lane,
        FieldMutation::Epoch,
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

/// One lane's connection: frames to the mirror, acks to the primary.
#[derive(Clone, Debug, Default)]
pub(super) struct Link {
    pub to_mirror: VecDeque<WireFrame>,
    pub to_primary: VecDeque<[u8; FRAME_HEADER_SIZE]>,
}

impl Link {
    pub fn is_idle(&self) -> bool {
        self.to_mirror.is_empty() && self.to_primary.is_empty()
    }
}
