//! The receiving side of one lane: every Data frame header is checked here before any byte of
//! it touches a log.

use crate::encode::SessionTag;
use mojim_format::copied::{CopiedTally, MAX_COPIED_RANGES, MAX_COPY_BODY};
use mojim_format::frame::{BodyError, FrameError};
use mojim_format::{FrameHeader, FrameKind, FRAME_HEADER_SIZE};
use std::fmt;

/// A frame the peer should never have sent. The connection is closed and nothing changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Violation {
    Frame(FrameError),
    Body(BodyError),
    Kind {
        found: FrameKind,
    },
    Lane {
        found: u16,
        expected: u16,
    },
    Epoch {
        found: u64,
        expected: u64,
    },
    Session {
        found: u64,
        expected: u64,
    },
    BodyLen {
        found: u32,
        max: u32,
    },
    OutOfBounds {
        offset: u64,
        len: u32,
        region_size: u64,
    },
    Seq {
        found: u64,
        expected_at_least: u64,
    },
    SeqInGroup {
        found: u64,
        expected: u64,
    },
    /// A group's numbers `first ..= last` (one number for a group of data, a run for a Skip)
    /// were already taken in this session, on this lane or another, or applied before it began
    /// (see [`crate::seq_window`]).
    SeqTaken {
        lane: u16,
        first: u64,
        last: u64,
        expected_from: u64,
        expected_to: u64,
    },
    /// A group's numbers lie beyond the session's window ahead of the lowest number not yet
    /// received (see [`crate::seq_window`]).
    SeqAhead {
        lane: u16,
        first: u64,
        last: u64,
        expected_from: u64,
        expected_to: u64,
    },
    FrameIndex {
        found: u32,
        expected: u32,
    },
    /// On a lane whose sender places its records itself, a record's header names a log
    /// position other than the one the receiver's log space gives it.
    Placed {
        found: u64,
        expected: u64,
    },
    /// A placed record on a lane that seals them (TLS) whose tag does not check, or is missing
    /// (`sealed` false), or a sealed record on a lane that does not seal them (`sealed` true):
    /// the record was forged or changed in the log, or the peer does not seal its records.
    RecordMac {
        seq: u64,
        frame_index: u32,
        sealed: bool,
        expected: bool,
    },
    /// A placed record whose `ENCRYPTED` flag is not what its lane agreed at its handshake
    /// (`[security] encrypt_placed`): `encrypted`, the flag found.
    RecordEncrypted {
        seq: u64,
        frame_index: u32,
        encrypted: bool,
    },
    /// The Copy frames since the last group cover more separate ranges than one Copied frame
    /// may list.
    CopiedRanges {
        max: u32,
    },
    /// Copy frames were not closed by their Copied frame (or CopyEnd) before the next group.
    Unmarked {
        bytes: u64,
    },
    /// A Copied frame does not describe the Copy frames before it.
    CopiedMismatch {
        listed: u32,
        sent: u32,
        checksum: u32,
        expected_checksum: u32,
    },
    /// A copy ended (or asked too much) while Copy frames that failed their check, and were
    /// asked for again with CopyRetry, had not been sent again.
    CopyNotResent {
        frames: usize,
        first_offset: u64,
    },
    /// A Copy frame while the session has no copy open: none was announced with CopyBegin, or
    /// every lane's CopyEnd closed it (see [`crate::control`]).
    CopyClosed,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Violation::Frame(e) => write!(f, "{e}"),
            Violation::Body(e) => write!(f, "{e}"),
            Violation::Kind { found } => write!(f, "unexpected {found:?} frame on a data lane"),
            Violation::RecordMac { seq, frame_index, sealed, expected } => match (sealed, expected) {
                (true, true) => write!(
                    f,
                    "record MAC of group {seq} frame {frame_index} does not check: the record was forged or \
                     changed in the log after it was placed"
                ),
                (false, _) => write!(
                    f,
                    "record MAC missing on group {seq} frame {frame_index}: a placed record over TLS must carry \
                     one (a primary of an older build does not: upgrade it, or set [primary] place_records = false)"
                ),
                (true, false) => write!(
                    f,
                    "record MAC flag on group {seq} frame {frame_index}, on a lane whose records carry none \
                     (only placed records over TLS do)"
                ),
            },
            Violation::RecordEncrypted { seq, frame_index, encrypted: true } => write!(
                f,
                "record ENCRYPTED flag on group {seq} frame {frame_index}, on a lane whose records are not \
                 encrypted (its Hello did not ask for [security] encrypt_placed)"
            ),
            Violation::RecordEncrypted { seq, frame_index, encrypted: false } => write!(
                f,
                "record not encrypted on group {seq} frame {frame_index}, on a lane that agreed to \
                 [security] encrypt_placed = true: every record placed on it must be"
            ),
            Violation::Placed { found, expected } => write!(
                f,
                "a record placed at log position {found} where the lane's next record goes at {expected}"
            ),
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
            Violation::SeqTaken { lane, first, last, expected_from, expected_to } => write!(
                f,
                "lane {lane} sent {}, already received in this session or applied before it; expected a \
                 number not yet received in {expected_from}..={expected_to}",
                Numbers(first, last)
            ),
            Violation::SeqAhead { lane, first, last, expected_from, expected_to } => write!(
                f,
                "lane {lane} sent {}, outside the session's window; expected a number not yet received in \
                 {expected_from}..={expected_to}",
                Numbers(first, last)
            ),
            Violation::SeqInGroup { found, expected } => {
                write!(f, "frame of group {found} arrived before group {expected} ended")
            }
            Violation::FrameIndex { found, expected } => {
                write!(f, "frame index {found} where {expected} was expected")
            }
            Violation::CopiedRanges { max } => {
                write!(f, "the Copy frames since the last group cover more than {max} separate ranges")
            }
            Violation::Unmarked { bytes } => write!(
                f,
                "{bytes} bytes of Copy frames were not closed by their Copied frame before the next group"
            ),
            Violation::CopiedMismatch { listed, sent, checksum, expected_checksum } => write!(
                f,
                "a Copied frame lists {listed} ranges (checksum {checksum:#010x}) but the Copy frames before \
                 it cover {sent} (checksum {expected_checksum:#010x})"
            ),
            Violation::CopyNotResent { frames, first_offset } => write!(
                f,
                "{frames} Copy frames that failed their checksum were not sent again (the first at offset \
                 {first_offset}); the copy cannot end"
            ),
            Violation::CopyClosed => f.write_str(
                "a Copy frame while the session has no copy open: a copy's frames come after its \
                 CopyBegin and before the last lane's CopyEnd",
            ),
        }
    }
}

impl std::error::Error for Violation {}

/// Sequence numbers `first ..= last`, as a message names them.
struct Numbers(u64, u64);

impl fmt::Display for Numbers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Numbers(a, b) if a == b => write!(f, "group {a}"),
            Numbers(a, b) => write!(f, "sequence numbers {a}..={b}"),
        }
    }
}

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
    /// The Copy frames since the last group, which a Copied frame (or CopyEnd) must close.
    copies: CopiedTally,
}

/// A checked Data frame header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Accepted {
    pub header: FrameHeader,
    /// This frame ends its group.
    pub ends_group: bool,
    /// A Copied frame: the bytes of the Copy frames it closes (else 0).
    pub copied: u64,
}

impl Accepted {
    /// The sequence numbers this frame takes for its group, if it begins one: the first frame
    /// of a group of data, a Copied frame, or a Skip (the run `offset ..= seq` it voids). The
    /// session checks them across lanes (see [`crate::seq_window`]).
    pub fn begins_group(&self) -> Option<(u64, u64)> {
        let h = &self.header;
        match h.kind {
            FrameKind::Data if h.frame_index == 0 => Some((h.seq, h.seq)),
            FrameKind::Copied => Some((h.seq, h.seq)),
            FrameKind::Skip => Some((h.offset, h.seq)),
            _ => None,
        }
    }
}

impl LaneReceiver {
    /// A lane of session `tag` whose first group is at least `first_seq`.
    pub fn new(tag: SessionTag, region_size: u64, max_frame: u32, first_seq: u64) -> LaneReceiver {
        LaneReceiver {
            tag,
            region_size,
            max_frame,
            min_seq: first_seq,
            open: None,
            copies: CopiedTally::default(),
        }
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
                | FrameKind::Copied
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
            FrameKind::Heartbeat | FrameKind::CopyBegin | FrameKind::Copy | FrameKind::CopyEnd => {
                return self.on_control(h)
            }
            _ if !self.copies.is_empty() && h.kind != FrameKind::Copied => {
                return Err(Violation::Unmarked { bytes: self.copies.bytes() })
            }
            FrameKind::Skip => return self.on_skip(h),
            FrameKind::Copied => return self.on_copied(h),
            _ => {}
        }
        self.check_body_place(&h, self.max_frame)?;
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
        Ok(Accepted { header: h, ends_group, copied: 0 })
    }

    /// A frame carrying region bytes: a non-empty body within `max` (`max_frame` for Data, at
    /// least [`MAX_COPY_BODY`] for Copy, which never enters a log), written inside the region.
    fn check_body_place(&self, h: &FrameHeader, max: u32) -> Result<(), Violation> {
        if h.body_len == 0 || h.body_len > max {
            return Err(Violation::BodyLen { found: h.body_len, max });
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
            self.check_body_place(&h, self.max_frame.max(MAX_COPY_BODY))?;
            self.copies.push(h.offset, h.body_len as u64);
            if self.copies.ranges() > MAX_COPIED_RANGES {
                return Err(Violation::CopiedRanges { max: MAX_COPIED_RANGES });
            }
        } else if h.body_len != 0 {
            return Err(Violation::BodyLen { found: h.body_len, max: 0 });
        }
        if h.kind == FrameKind::CopyEnd {
            // A full copy from a mirror is Copy frames closed by CopyEnd alone.
            self.copies = CopiedTally::default();
        }
        Ok(Accepted { header: h, ends_group: false, copied: 0 })
    }

    /// A Copied frame is a group of one frame, between groups, that lists exactly the Copy
    /// frames since the last group (its body's length and checksum say so; the body itself is
    /// checked against the header when it arrives).
    fn on_copied(&mut self, h: FrameHeader) -> Result<Accepted, Violation> {
        if let Some((seq, _)) = self.open {
            return Err(Violation::SeqInGroup { found: h.seq, expected: seq });
        }
        if h.seq < self.min_seq || h.seq == u64::MAX {
            return Err(Violation::Seq { found: h.seq, expected_at_least: self.min_seq });
        }
        if h.frame_index != 0 || !h.is_end() {
            return Err(Violation::FrameIndex { found: h.frame_index, expected: 0 });
        }
        if h.body_len == 0 || h.body_len > self.max_frame {
            return Err(Violation::BodyLen { found: h.body_len, max: self.max_frame });
        }
        let t = self.copies;
        if h.body_len as u64 != t.body_len() || h.body_checksum != t.checksum() {
            return Err(Violation::CopiedMismatch {
                listed: h.body_len / mojim_format::copied::COPIED_RANGE_SIZE as u32,
                sent: t.ranges(),
                checksum: h.body_checksum,
                expected_checksum: t.checksum(),
            });
        }
        self.copies = CopiedTally::default();
        self.min_seq = h.seq + 1;
        Ok(Accepted { header: h, ends_group: true, copied: t.bytes() })
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
        Ok(Accepted { header: h, ends_group: true, copied: 0 })
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
    fn a_group_takes_its_numbers_at_its_first_frame() {
        let mut r = LaneReceiver::new(TAG, 1 << 20, 4096, 1);
        assert_eq!(r.on_header(&hdr(1, 0, 0, 10, false)).unwrap().begins_group(), Some((1, 1)));
        assert_eq!(r.on_header(&hdr(1, 1, 100, 10, true)).unwrap().begins_group(), None);
        assert_eq!(r.on_header(&skip(2, 4)).unwrap().begins_group(), Some((2, 4)));
        let beat = control(FrameKind::Heartbeat, 0, 0);
        assert_eq!(r.on_header(&beat).unwrap().begins_group(), None);
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
        assert!(r.on_header(&control(FrameKind::Copy, 0, 4097)).is_ok(), "a Copy is not bound by max_frame");
        assert!(matches!(
            r.on_header(&control(FrameKind::Copy, 0, MAX_COPY_BODY + 1)),
            Err(Violation::BodyLen { .. })
        ));
        assert!(matches!(
            r.on_header(&control(FrameKind::Copy, (1 << 20) - 1, 2)),
            Err(Violation::OutOfBounds { .. })
        ));
        r.on_header(&control(FrameKind::CopyEnd, 0, 0)).unwrap();
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

    fn copied(seq: u64, body: &[u8]) -> [u8; 64] {
        let mut h = mojim_format::FrameHeader::new(FrameKind::Copied);
        h.lane = TAG.lane;
        h.epoch = TAG.epoch;
        h.session = TAG.session;
        h.seq = seq;
        h.flags = mojim_format::frame::FLAG_END;
        h.body_len = body.len() as u32;
        h.body_checksum = mojim_format::checksum::crc32c(body);
        h.to_bytes()
    }

    #[test]
    fn copy_frames_are_closed_by_the_copied_frame_that_lists_them() {
        use mojim_format::copied::push_range;
        let mut r = LaneReceiver::new(TAG, 1 << 20, 4096, 1);
        let mut body = Vec::new();
        for (off, len) in [(0u64, 4096u32), (4096, 100), (65536, 10)] {
            r.on_header(&control(FrameKind::Copy, off, len)).unwrap();
            push_range(&mut body, off, len as u64);
        }
        // A group may not start before the copies are closed.
        assert!(matches!(r.on_header(&hdr(1, 0, 0, 10, true)), Err(Violation::Unmarked { bytes: 4206 })));
        assert!(matches!(r.on_header(&skip(1, 1)), Err(Violation::Unmarked { .. })));
        // A list that is not the frames' is refused: another range, or one range fewer.
        let mut wrong = body.clone();
        wrong[0] = 1;
        assert!(matches!(r.on_header(&copied(1, &wrong)), Err(Violation::CopiedMismatch { .. })));
        assert!(matches!(r.on_header(&copied(1, &body[..16])), Err(Violation::CopiedMismatch { .. })));
        let a = r.on_header(&copied(1, &body)).unwrap();
        assert!(a.ends_group);
        assert_eq!(a.copied, 4206);
        // Closed: groups go on, and a Copied frame with nothing before it is refused.
        assert!(matches!(r.on_header(&copied(2, &body)), Err(Violation::CopiedMismatch { sent: 0, .. })));
        assert!(matches!(r.on_header(&hdr(1, 0, 0, 10, true)), Err(Violation::Seq { .. })));
        r.on_header(&hdr(2, 0, 0, 10, true)).unwrap();
        // A full copy's Copy frames are closed by CopyEnd.
        r.on_header(&control(FrameKind::Copy, 0, 4096)).unwrap();
        r.on_header(&control(FrameKind::CopyEnd, 0, 0)).unwrap();
        r.on_header(&hdr(3, 0, 0, 10, true)).unwrap();
    }

    #[test]
    fn copies_may_not_scatter_beyond_one_copied_frame() {
        let mut r = LaneReceiver::new(TAG, 1 << 30, 4096, 1);
        let max = mojim_format::copied::MAX_COPIED_RANGES as u64;
        for i in 0..max {
            r.on_header(&control(FrameKind::Copy, i * 8192, 1)).unwrap();
        }
        assert!(matches!(
            r.on_header(&control(FrameKind::Copy, max * 8192, 1)),
            Err(Violation::CopiedRanges { .. })
        ));
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
