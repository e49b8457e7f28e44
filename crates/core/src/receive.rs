//! The receiving side of one lane: every Data frame header is checked here before any byte of
//! it touches a log.

use crate::encode::SessionTag;
use mojim_format::frame::{BodyError, FrameError};
use mojim_format::{FrameHeader, FrameKind, FRAME_HEADER_SIZE};
use std::fmt;

/// A frame the peer should never have sent. The connection is closed and nothing changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Violation {
    Frame(FrameError),
    Body(BodyError),
    Kind { found: FrameKind },
    Lane { found: u16, expected: u16 },
    Epoch { found: u64, expected: u64 },
    Session { found: u64, expected: u64 },
    BodyLen { found: u32, max: u32 },
    OutOfBounds { offset: u64, len: u32, region_size: u64 },
    Seq { found: u64, expected_at_least: u64 },
    SeqInGroup { found: u64, expected: u64 },
    FrameIndex { found: u32, expected: u32 },
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Violation::Frame(e) => write!(f, "{e}"),
            Violation::Body(e) => write!(f, "{e}"),
            Violation::Kind { found } => write!(f, "unexpected {found:?} frame on a data lane"),
            Violation::Lane { found, expected } => {
                write!(f, "frame for lane {found} arrived on lane {expected}")
            }
            Violation::Epoch { found, expected } => {
                write!(f, "frame epoch {found} does not match the session's epoch {expected}")
            }
            Violation::Session { found, expected } => {
                write!(f, "frame session {found:#x} does not match the lane's session {expected:#x}")
            }
            Violation::BodyLen { found, max } => {
                write!(f, "frame body of {found} bytes is empty or over the limit of {max}")
            }
            Violation::OutOfBounds { offset, len, region_size } => {
                write!(f, "frame writes offset {offset} len {len}, outside the region of {region_size} bytes")
            }
            Violation::Seq { found, expected_at_least } => write!(
                f,
                "group sequence {found} is not after the lane's last group (expected >= {expected_at_least})"
            ),
            Violation::SeqInGroup { found, expected } => {
                write!(f, "frame of group {found} arrived before group {expected} ended")
            }
            Violation::FrameIndex { found, expected } => {
                write!(f, "frame index {found} where {expected} was expected")
            }
        }
    }
}

impl std::error::Error for Violation {}

/// Per-lane receive state: which group is open and what may come next.
#[derive(Clone, Debug)]
pub struct LaneReceiver {
    tag: SessionTag,
    region_size: u64,
    max_frame: u32,
    /// The next group must have at least this sequence number.
    min_seq: u64,
    /// The group being received and the index its next frame must carry.
    open: Option<(u64, u32)>,
}

/// A checked Data frame header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Accepted {
    pub header: FrameHeader,
    /// This frame ends its group.
    pub ends_group: bool,
}

impl LaneReceiver {
    /// A lane of session `tag` whose first group is at least `first_seq`.
    pub fn new(tag: SessionTag, region_size: u64, max_frame: u32, first_seq: u64) -> LaneReceiver {
        LaneReceiver { tag, region_size, max_frame, min_seq: first_seq, open: None }
    }

    /// Sequence number of the open group, if a group is partly received.
    pub fn open_group(&self) -> Option<u64> {
        self.open.map(|(s, _)| s)
    }

    /// Checks a header and, if it is acceptable, advances the lane's state.
    pub fn on_header(&mut self, bytes: &[u8; FRAME_HEADER_SIZE]) -> Result<Accepted, Violation> {
        let h = FrameHeader::decode(bytes).map_err(Violation::Frame)?;
        if !matches!(
            h.kind,
            FrameKind::Data
                | FrameKind::Skip
                | FrameKind::Heartbeat
                | FrameKind::CopyBegin
                | FrameKind::Copy
                | FrameKind::CopyEnd
        ) {
            return Err(Violation::Kind { found: h.kind });
        }
        if h.lane != self.tag.lane {
            return Err(Violation::Lane { found: h.lane, expected: self.tag.lane });
        }
        if h.epoch != self.tag.epoch {
            return Err(Violation::Epoch { found: h.epoch, expected: self.tag.epoch });
        }
        if h.session != self.tag.session {
            return Err(Violation::Session { found: h.session, expected: self.tag.session });
        }
        match h.kind {
            FrameKind::Skip => return self.on_skip(h),
            FrameKind::Heartbeat | FrameKind::CopyBegin | FrameKind::Copy | FrameKind::CopyEnd => {
                return self.on_control(h)
            }
            _ => {}
        }
        self.check_body_place(&h)?;
        match self.open {
            Some((seq, index)) => {
                if h.seq != seq {
                    return Err(Violation::SeqInGroup { found: h.seq, expected: seq });
                }
                if h.frame_index != index {
                    return Err(Violation::FrameIndex { found: h.frame_index, expected: index });
                }
            }
            None => {
                if h.seq < self.min_seq || h.seq == u64::MAX {
                    return Err(Violation::Seq { found: h.seq, expected_at_least: self.min_seq });
                }
                if h.frame_index != 0 {
                    return Err(Violation::FrameIndex { found: h.frame_index, expected: 0 });
                }
            }
        }
        let ends_group = h.is_end();
        if ends_group {
            self.open = None;
            self.min_seq = h.seq + 1;
        } else {
            self.open = Some((h.seq, h.frame_index + 1));
        }
        Ok(Accepted { header: h, ends_group })
    }

    /// A frame carrying region bytes (Data, Copy): a non-empty body within `max_frame`, written
    /// inside the region.
    fn check_body_place(&self, h: &FrameHeader) -> Result<(), Violation> {
        if h.body_len == 0 || h.body_len > self.max_frame {
            return Err(Violation::BodyLen { found: h.body_len, max: self.max_frame });
        }
        if h.offset.checked_add(h.body_len as u64).is_none_or(|e| e > self.region_size) {
            return Err(Violation::OutOfBounds {
                offset: h.offset,
                len: h.body_len,
                region_size: self.region_size,
            });
        }
        Ok(())
    }

    /// Heartbeats and copy frames come between groups. A Copy carries region bytes (checked like
    /// a Data frame's); the others have no body. `ends_group` is false: they belong to no group.
    fn on_control(&mut self, h: FrameHeader) -> Result<Accepted, Violation> {
        if let Some((seq, _)) = self.open {
            return Err(Violation::SeqInGroup { found: h.seq, expected: seq });
        }
        if h.kind == FrameKind::Copy {
            self.check_body_place(&h)?;
        } else if h.body_len != 0 {
            return Err(Violation::BodyLen { found: h.body_len, max: 0 });
        }
        Ok(Accepted { header: h, ends_group: false })
    }

    /// A Skip voids sequence numbers `offset ..= seq`, between groups, starting exactly at the
    /// next one expected.
    fn on_skip(&mut self, h: FrameHeader) -> Result<Accepted, Violation> {
        if h.body_len != 0 {
            return Err(Violation::BodyLen { found: h.body_len, max: 0 });
        }
        if let Some((seq, _)) = self.open {
            return Err(Violation::SeqInGroup { found: h.seq, expected: seq });
        }
        if h.offset < self.min_seq || h.seq < h.offset || h.seq == u64::MAX {
            return Err(Violation::Seq { found: h.offset, expected_at_least: self.min_seq });
        }
        self.min_seq = h.seq + 1;
        Ok(Accepted { header: h, ends_group: true })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encode::{data_header, FramePlan};

    const TAG: SessionTag = SessionTag { session: 42, epoch: 1, lane: 0 };

    fn hdr(seq: u64, index: u32, offset: u64, len: u32, end: bool) -> [u8; 64] {
        let body = vec![7u8; len as usize];
        data_header(TAG, seq, FramePlan { offset, len, frame_index: index, end }, &body)
    }

    #[test]
    fn accepts_a_well_formed_stream() {
        let mut r = LaneReceiver::new(TAG, 1 << 20, 4096, 1);
        assert!(!r.on_header(&hdr(1, 0, 0, 10, false)).unwrap().ends_group);
        assert!(r.on_header(&hdr(1, 1, 100, 10, true)).unwrap().ends_group);
        assert!(r.on_header(&hdr(5, 0, 0, 10, true)).unwrap().ends_group);
    }

    fn skip(first: u64, last: u64) -> [u8; 64] {
        let mut h = mojim_format::FrameHeader::new(FrameKind::Skip);
        h.lane = TAG.lane;
        h.epoch = TAG.epoch;
        h.session = TAG.session;
        h.offset = first;
        h.seq = last;
        h.to_bytes()
    }

    #[test]
    fn skips_void_sequence_numbers_between_groups() {
        let mut r = LaneReceiver::new(TAG, 1 << 20, 4096, 1);
        r.on_header(&hdr(1, 0, 0, 10, true)).unwrap();
        assert!(r.on_header(&skip(2, 4)).unwrap().ends_group);
        assert!(matches!(r.on_header(&hdr(4, 0, 0, 10, true)), Err(Violation::Seq { .. })));
        r.on_header(&hdr(5, 0, 0, 10, false)).unwrap();
        assert!(matches!(r.on_header(&skip(6, 6)), Err(Violation::SeqInGroup { .. })), "not inside a group");
        r.on_header(&hdr(5, 1, 0, 10, true)).unwrap();
        assert!(matches!(r.on_header(&skip(5, 9)), Err(Violation::Seq { .. })), "not backwards");
        assert!(matches!(r.on_header(&skip(7, 6)), Err(Violation::Seq { .. })), "not empty");
    }

    fn control(kind: FrameKind, offset: u64, body_len: u32) -> [u8; 64] {
        let mut h = mojim_format::FrameHeader::new(kind);
        h.lane = TAG.lane;
        h.epoch = TAG.epoch;
        h.session = TAG.session;
        h.offset = offset;
        h.body_len = body_len;
        h.to_bytes()
    }

    #[test]
    fn control_frames_come_between_groups_and_are_checked() {
        let mut r = LaneReceiver::new(TAG, 1 << 20, 4096, 1);
        for k in [FrameKind::Heartbeat, FrameKind::CopyBegin, FrameKind::CopyEnd] {
            assert!(!r.on_header(&control(k, 0, 0)).unwrap().ends_group);
            assert!(matches!(r.on_header(&control(k, 0, 1)), Err(Violation::BodyLen { .. })), "{k:?}");
        }
        assert!(r.on_header(&control(FrameKind::Copy, 4096, 4096)).is_ok());
        assert!(matches!(r.on_header(&control(FrameKind::Copy, 0, 0)), Err(Violation::BodyLen { .. })));
        assert!(matches!(r.on_header(&control(FrameKind::Copy, 0, 4097)), Err(Violation::BodyLen { .. })));
        assert!(matches!(
            r.on_header(&control(FrameKind::Copy, (1 << 20) - 1, 2)),
            Err(Violation::OutOfBounds { .. })
        ));
        r.on_header(&hdr(1, 0, 0, 10, false)).unwrap();
        assert!(matches!(
            r.on_header(&control(FrameKind::Heartbeat, 0, 0)),
            Err(Violation::SeqInGroup { .. })
        ));
        let mut stale = mojim_format::FrameHeader::new(FrameKind::Heartbeat);
        stale.session = TAG.session;
        stale.epoch = TAG.epoch - 1;
        assert!(matches!(r.on_header(&stale.to_bytes()), Err(Violation::Epoch { .. })));
    }

    #[test]
    fn rejects_each_kind_of_violation() {
        let mut r = LaneReceiver::new(TAG, 1 << 20, 4096, 3);
        assert!(matches!(r.on_header(&hdr(2, 0, 0, 10, true)), Err(Violation::Seq { .. })));
        assert!(matches!(r.on_header(&hdr(3, 1, 0, 10, true)), Err(Violation::FrameIndex { .. })));
        assert!(matches!(r.on_header(&hdr(3, 0, 1 << 20, 1, true)), Err(Violation::OutOfBounds { .. })));
        assert!(matches!(
            r.on_header(&hdr(3, 0, u64::MAX - 2, 10, true)),
            Err(Violation::OutOfBounds { .. })
        ));
        r.on_header(&hdr(3, 0, 0, 10, false)).unwrap();
        assert!(matches!(r.on_header(&hdr(4, 0, 0, 10, true)), Err(Violation::SeqInGroup { .. })));
        let mut bad = hdr(3, 1, 0, 10, true);
        bad[30] ^= 1;
        assert!(matches!(r.on_header(&bad), Err(Violation::Frame(_))));
        let other = SessionTag { session: 43, ..TAG };
        let h = data_header(other, 3, FramePlan { offset: 0, len: 1, frame_index: 1, end: true }, &[0]);
        assert!(matches!(r.on_header(&h), Err(Violation::Session { .. })));
    }
}
