//! The primary's side of a group: checking ranges and cutting them into frames.
//!
//! A group's ranges become consecutive Data frames on one lane, none with a body larger than
//! the negotiated `max_frame`, numbered from 0, the last one flagged END. Zero-length ranges
//! are skipped; a group with no bytes sends nothing.

use crate::Range;
use mojim_format::checksum::crc32c;
use mojim_format::frame::{FLAG_ENCRYPTED, FLAG_END, FLAG_MAC};
use mojim_format::log::record_size;
use mojim_format::{FrameHeader, FrameKind, FRAME_HEADER_SIZE};
use std::fmt;

/// A group the caller asked for that cannot be sent: the caller's fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RangeError {
    /// `offset + len` is past the end of the region (or overflows).
    OutOfBounds { offset: u64, len: u64, region_size: u64 },
    /// The group needs more log space than one lane's log can hold at once.
    GroupTooLarge { bytes: u64, limit: u64 },
    /// More ranges than the configured limit.
    TooManyRanges { count: usize, limit: usize },
    /// A pointer range that is not inside the mapped region.
    Pointer { addr: usize, len: usize, base: usize, size: u64 },
    /// A ticket naming a lane the session does not have: it was not handed out by this
    /// primary (a binding's caller made it up or kept it from elsewhere).
    Ticket { lane: u16, lanes: usize },
}

impl fmt::Display for RangeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            RangeError::OutOfBounds { offset, len, region_size } => write!(
                f,
                "range offset {offset} len {len} is outside the region (size {region_size}); \
                 offset + len must be at most {region_size}"
            ),
            RangeError::GroupTooLarge { bytes, limit } => write!(
                f,
                "group needs {bytes} bytes of log space but at most {limit} fit in one lane's log; \
                 split it or raise log_capacity"
            ),
            RangeError::Pointer { addr, len, base, size } => write!(
                f,
                "pointer range {addr:#x}+{len} is not inside the region mapped at {base:#x} ({size} bytes)"
            ),
            RangeError::Ticket { lane, lanes } => write!(
                f,
                "the ticket names lane {lane}, but the session has {lanes}: wait only for tickets \
                 this primary's persist returned"
            ),
            RangeError::TooManyRanges { count, limit } => {
                write!(f, "group has {count} ranges, the limit is {limit}; split it or raise max_ranges")
            }
        }
    }
}

impl std::error::Error for RangeError {}

/// What a checked group will cost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GroupShape {
    pub frames: u32,
    pub bytes: u64,
    /// Log space the group takes on the receiver, pads excluded.
    pub log_bytes: u64,
}

/// Limits a group must respect.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GroupLimits {
    pub region_size: u64,
    pub max_frame: u32,
    pub max_ranges: usize,
    /// Largest `log_bytes` a group may take: see [`max_group_log_bytes`].
    pub max_group_log_bytes: u64,
}

/// The largest log footprint of one group on a log of `capacity` bytes holding bodies of at
/// most `max_frame`: the log less one record, so that a whole group fits behind the worst pad
/// once everything before it has been applied.
///
/// Why that is enough: every group below the lowest incomplete sequence number is complete, so
/// the checkpointer can apply it and empty the logs up to that group; the group then has the
/// whole log to itself, and its records plus one pad (shorter than a record) fit in it.
pub fn max_group_log_bytes(capacity: u64, max_frame: u32) -> u64 {
    capacity.saturating_sub(record_size(max_frame as u64))
}

/// Checks every range of a group and measures it.
pub fn check_group(ranges: &[Range], limits: &GroupLimits) -> Result<GroupShape, RangeError> {
    if ranges.len() > limits.max_ranges {
        return Err(RangeError::TooManyRanges { count: ranges.len(), limit: limits.max_ranges });
    }
    let mf = limits.max_frame as u64;
    let mut shape = GroupShape { frames: 0, bytes: 0, log_bytes: 0 };
    for r in ranges {
        let end = r.offset.checked_add(r.len);
        if end.is_none_or(|e| e > limits.region_size) {
            return Err(RangeError::OutOfBounds {
                offset: r.offset,
                len: r.len,
                region_size: limits.region_size,
            });
        }
        if r.len == 0 {
            continue;
        }
        let full = r.len / mf;
        let rest = r.len % mf;
        shape.frames += (full + u64::from(rest != 0)) as u32;
        shape.bytes += r.len;
        shape.log_bytes += full * record_size(mf) + if rest != 0 { record_size(rest) } else { 0 };
    }
    if shape.log_bytes > limits.max_group_log_bytes {
        return Err(RangeError::GroupTooLarge { bytes: shape.log_bytes, limit: limits.max_group_log_bytes });
    }
    Ok(shape)
}

/// One frame of a group: where its body comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FramePlan {
    pub offset: u64,
    pub len: u32,
    pub frame_index: u32,
    pub end: bool,
}

/// Iterates over the frames of a checked group, in order.
pub fn frames(ranges: &[Range], max_frame: u32, shape: GroupShape) -> impl Iterator<Item = FramePlan> + '_ {
    let mf = max_frame as u64;
    let mut index = 0u32;
    ranges
        .iter()
        .filter(|r| r.len > 0)
        .flat_map(move |r| {
            let n = r.len.div_ceil(mf);
            (0..n).map(move |i| (r.offset + i * mf, (r.len - i * mf).min(mf) as u32))
        })
        .map(move |(offset, len)| {
            let frame_index = index;
            index += 1;
            FramePlan { offset, len, frame_index, end: frame_index + 1 == shape.frames }
        })
}

/// Where a session's frames belong.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SessionTag {
    pub session: u64,
    pub epoch: u64,
    pub lane: u16,
}

/// The header of one Data frame carrying `body`.
pub fn data_header(tag: SessionTag, seq: u64, plan: FramePlan, body: &[u8]) -> [u8; FRAME_HEADER_SIZE] {
    assert_eq!(body.len(), plan.len as usize);
    data_header_with_checksum(tag, seq, plan, crc32c(body))
}

/// As [`data_header`], for a body of `plan.len` bytes whose CRC32C the caller computed where
/// the body lies (a view of a mapping, not a slice).
pub fn data_header_with_checksum(
    tag: SessionTag,
    seq: u64,
    plan: FramePlan,
    body_checksum: u32,
) -> [u8; FRAME_HEADER_SIZE] {
    placed_data_header(tag, seq, plan, body_checksum, 0)
}

/// As [`data_header_with_checksum`], for a body the sender placed in the receiver's log at
/// `log_pos` + 64 (one-sided placement: the header is the doorbell).
pub fn placed_data_header(
    tag: SessionTag,
    seq: u64,
    plan: FramePlan,
    body_checksum: u32,
    log_pos: u64,
) -> [u8; FRAME_HEADER_SIZE] {
    let mut h = with_checksum(FrameKind::Data, tag, plan.len, body_checksum);
    h.flags = if plan.end { FLAG_END } else { 0 };
    h.frame_index = plan.frame_index;
    h.seq = seq;
    h.offset = plan.offset;
    h.log_pos = log_pos;
    h.to_bytes()
}

/// `header` (a placed `Data` or `Copied` record's) with its `MAC` flag set: its tag follows its
/// body in the log (docs/FORMAT.md §2.4). The header's checksum is made again.
pub fn sealed(header: [u8; FRAME_HEADER_SIZE]) -> [u8; FRAME_HEADER_SIZE] {
    let mut h = FrameHeader::decode(&header).expect("a header this side encoded");
    assert!(matches!(h.kind, FrameKind::Data | FrameKind::Copied), "only records are sealed");
    h.flags |= FLAG_MAC;
    h.to_bytes()
}

/// `header` (a placed `Data` or `Copied` record's doorbell) with its `MAC` and `ENCRYPTED`
/// flags set: the body placed is ciphertext, its tag after it (`[security] encrypt_placed`,
/// docs/FORMAT.md §2.4). The header's checksum is made again.
pub fn encrypted(header: [u8; FRAME_HEADER_SIZE]) -> [u8; FRAME_HEADER_SIZE] {
    let mut h = FrameHeader::decode(&sealed(header)).expect("a header this side encoded");
    h.flags |= FLAG_ENCRYPTED;
    h.to_bytes()
}

/// The header of a Copy frame carrying `body`, region bytes at `offset`.
pub fn copy_header(tag: SessionTag, offset: u64, body: &[u8]) -> [u8; FRAME_HEADER_SIZE] {
    copy_header_with_checksum(tag, offset, body.len() as u32, crc32c(body))
}

/// As [`copy_header`], for a body of `len` bytes whose CRC32C the caller computed.
pub fn copy_header_with_checksum(
    tag: SessionTag,
    offset: u64,
    len: u32,
    body_checksum: u32,
) -> [u8; FRAME_HEADER_SIZE] {
    let mut h = with_checksum(FrameKind::Copy, tag, len, body_checksum);
    h.offset = offset;
    h.to_bytes()
}

/// The header of the Copied frame that makes group `seq` of the Copy frames before it; `body`
/// lists their ranges (see `mojim_format::copied`).
pub fn copied_header(tag: SessionTag, seq: u64, body: &[u8]) -> [u8; FRAME_HEADER_SIZE] {
    let mut h = with_body(FrameKind::Copied, tag, body);
    h.flags = FLAG_END;
    h.seq = seq;
    h.to_bytes()
}

/// As [`copied_header`], for a body of `len` bytes with CRC32C `checksum` that the sender placed
/// in the receiver's log at `log_pos` + 64.
pub fn placed_copied_header(
    tag: SessionTag,
    seq: u64,
    len: u32,
    checksum: u32,
    log_pos: u64,
) -> [u8; FRAME_HEADER_SIZE] {
    let mut h = with_checksum(FrameKind::Copied, tag, len, checksum);
    h.flags = FLAG_END;
    h.seq = seq;
    h.log_pos = log_pos;
    h.to_bytes()
}

/// A header of `kind` in session `tag` carrying `body` (its length and checksum).
fn with_body(kind: FrameKind, tag: SessionTag, body: &[u8]) -> FrameHeader {
    with_checksum(kind, tag, body.len() as u32, crc32c(body))
}

/// A header of `kind` in session `tag` carrying a body of `len` bytes with CRC32C `checksum`.
fn with_checksum(kind: FrameKind, tag: SessionTag, len: u32, checksum: u32) -> FrameHeader {
    let mut h = FrameHeader::new(kind);
    h.body_checksum = checksum;
    h.body_len = len;
    h.lane = tag.lane;
    h.epoch = tag.epoch;
    h.session = tag.session;
    h
}

/// The header of an acknowledgement of group `seq`.
pub fn ack_header(tag: SessionTag, seq: u64) -> [u8; FRAME_HEADER_SIZE] {
    ack_header_with_tail(tag, seq, 0)
}

/// As [`ack_header`], telling a sender that places its records that the lane's log is free
/// before `tail` (`offset`).
pub fn ack_header_with_tail(tag: SessionTag, seq: u64, tail: u64) -> [u8; FRAME_HEADER_SIZE] {
    reply_header(FrameKind::Ack, tag, tail, seq)
}

/// A receiver's Heartbeat on a lane of `tag`'s session, sent unasked; `offset` is the lane log's
/// tail, as in [`ack_header_with_tail`].
pub fn heartbeat_header(tag: SessionTag, tail: u64) -> [u8; FRAME_HEADER_SIZE] {
    heartbeat_answer(tag, tail, 0)
}

/// A receiver's answer to a Heartbeat that carried the probe number `probe` in `seq` (0: none):
/// the answer repeats it, so a sender can tell it from Heartbeats sent unasked.
pub fn heartbeat_answer(tag: SessionTag, tail: u64, probe: u64) -> [u8; FRAME_HEADER_SIZE] {
    reply_header(FrameKind::Heartbeat, tag, tail, probe)
}

/// The header of a CopyRetry: the Copy frame at `offset` of `len` bytes did not land.
pub fn copy_retry_header(tag: SessionTag, offset: u64, len: u64) -> [u8; FRAME_HEADER_SIZE] {
    reply_header(FrameKind::CopyRetry, tag, offset, len)
}

/// A bodiless frame from a receiver back on a lane of `tag`'s session.
fn reply_header(kind: FrameKind, tag: SessionTag, offset: u64, seq: u64) -> [u8; FRAME_HEADER_SIZE] {
    let mut h = FrameHeader::new(kind);
    h.lane = tag.lane;
    h.epoch = tag.epoch;
    h.seq = seq;
    h.offset = offset;
    h.session = tag.session;
    h.to_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn limits() -> GroupLimits {
        GroupLimits { region_size: 1 << 20, max_frame: 4096, max_ranges: 64, max_group_log_bytes: 1 << 19 }
    }

    #[test]
    fn out_of_bounds_and_overflow_are_refused() {
        let l = limits();
        assert!(matches!(check_group(&[Range::new(1 << 20, 1)], &l), Err(RangeError::OutOfBounds { .. })));
        assert!(matches!(check_group(&[Range::new(u64::MAX, 2)], &l), Err(RangeError::OutOfBounds { .. })));
        assert!(check_group(&[Range::new((1 << 20) - 1, 1)], &l).is_ok());
        let e = check_group(&[Range::new(1 << 20, 5)], &l).unwrap_err().to_string();
        assert!(e.contains("offset 1048576") && e.contains("size 1048576"), "{e}");
    }

    #[test]
    fn too_large_is_refused() {
        let l = limits();
        assert!(matches!(check_group(&[Range::new(0, 1 << 20)], &l), Err(RangeError::GroupTooLarge { .. })));
    }

    proptest! {
        #[test]
        fn frames_cover_ranges_exactly(ranges in proptest::collection::vec((0u64..(1<<19), 0u64..20000), 1..8)) {
            let ranges: Vec<Range> = ranges.into_iter().map(|(o, l)| Range::new(o, l)).collect();
            let shape = check_group(&ranges, &limits()).unwrap();
            let plans: Vec<FramePlan> = frames(&ranges, 4096, shape).collect();
            prop_assert_eq!(plans.len() as u32, shape.frames);
            prop_assert_eq!(plans.iter().map(|p| p.len as u64).sum::<u64>(), shape.bytes);
            for (i, p) in plans.iter().enumerate() {
                prop_assert_eq!(p.frame_index as usize, i);
                prop_assert_eq!(p.end, i + 1 == plans.len());
                prop_assert!(p.len > 0 && p.len <= 4096);
            }
            let log: u64 = plans.iter().map(|p| record_size(p.len as u64)).sum();
            prop_assert_eq!(log, shape.log_bytes);
        }
    }
}
