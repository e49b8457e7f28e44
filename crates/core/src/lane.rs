//! One lane on the receiving side: frame checks, log placement and group completion together,
//! so the daemon and the simulator run the same logic.

use crate::checkpoint::GroupRef;
use crate::encode::SessionTag;
use crate::log_space::{LogSpace, Placement};
use crate::receive::{Accepted, LaneReceiver, Violation};
use mojim_format::log::record_size_of;
use mojim_format::{FrameKind, FRAME_HEADER_SIZE};

/// Receive state and log space of one lane.
#[derive(Clone, Debug)]
pub struct MirrorLane {
    lane: u16,
    receiver: Option<LaneReceiver>,
    space: LogSpace,
    /// First position and data bytes of the group being received.
    open: Option<(u64, u64)>,
    /// Highest sequence number accepted on this lane in this session.
    max_seq: u64,
    /// Log bytes before this position that recovery needs are persistent: the end of the last
    /// group whose log range was handed out to be persisted (see [`Completed`]).
    persisted_to: u64,
}

/// A group a record completed, and the log bytes that must be persistent before it is
/// acknowledged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completed {
    pub group: GroupRef,
    /// `[persist_from, persist_to)`: everything written to the log since the lane's last
    /// completed group. That is the group's records and any Pad written before them, or before
    /// the records of a group an ended session dropped. Restart recovery scans a log from its
    /// tail across every record and pad up to the group, so a pad lost to a power cut would end
    /// the scan before it: persisting only the group's own records is not enough.
    pub persist_from: u64,
    pub persist_to: u64,
}

/// A checked frame with the place its record goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slot {
    pub accepted: Accepted,
    pub placement: Placement,
    /// Bytes the record occupies.
    pub size: u64,
}

impl MirrorLane {
    /// A lane whose log holds `[tail, head)` and no session yet. Those bytes are not taken to
    /// be persistent (a killed process leaves written, unpersisted records that recovery finds
    /// all the same): the first group completed persists them together with its own.
    pub fn new(lane: u16, capacity: u64, tail: u64, head: u64) -> MirrorLane {
        MirrorLane {
            lane,
            receiver: None,
            space: LogSpace::new(capacity, tail, head),
            open: None,
            max_seq: 0,
            persisted_to: tail,
        }
    }

    pub fn space(&self) -> &LogSpace {
        &self.space
    }

    pub fn max_seq(&self) -> u64 {
        self.max_seq
    }

    /// Starts a session on this lane. Any group left open by an earlier session must have been
    /// discarded.
    pub fn begin(&mut self, tag: SessionTag, region_size: u64, max_frame: u32, first_seq: u64) {
        assert_eq!(tag.lane, self.lane);
        assert!(self.open.is_none(), "begin with an open group");
        self.receiver = Some(LaneReceiver::new(tag, region_size, max_frame, first_seq));
        self.max_seq = 0;
    }

    /// Checks a header. On success the record's place is returned, or `Ok(None)` with nothing
    /// changed when the log has no room until the tail moves: call again after a checkpoint.
    /// Data and Copied frames become records; a Skip frame takes no room: its slot has size 0
    /// and [`MirrorLane::commit`] turns it into a void group; control frames (Copy among them,
    /// whose bytes go to the data area) take no room and are no group.
    pub fn on_header(&mut self, bytes: &[u8; FRAME_HEADER_SIZE]) -> Result<Option<Slot>, Violation> {
        let receiver = self.receiver.as_mut().expect("on_header outside a session");
        // Check on a copy so that a frame that must wait for room is checked again unchanged.
        let mut probe = receiver.clone();
        let accepted = probe.on_header(bytes)?;
        if !matches!(accepted.header.kind, FrameKind::Data | FrameKind::Copied) {
            // Skips and control frames take no log room; only a Skip becomes a (void) group.
            *receiver = probe;
            let placement = Placement { pad_at: None, pos: self.space.head() };
            return Ok(Some(Slot { accepted, placement, size: 0 }));
        }
        // A sealed record's tag lies after its body (its `MAC` flag): it takes room too.
        let size = record_size_of(&accepted.header);
        let Some(placement) = self.space.place(size) else {
            return Ok(None);
        };
        *receiver = probe;
        Ok(Some(Slot { accepted, placement, size }))
    }

    /// The record of `slot` is in the log and its body verified: advance the head. Returns the
    /// group if this record completed it, with the log range to persist before acknowledging
    /// it. The caller persists that range or stops storing on this lane: the range is not
    /// handed out again.
    pub fn commit(&mut self, slot: &Slot) -> Option<Completed> {
        let h = &slot.accepted.header;
        if !matches!(h.kind, FrameKind::Data | FrameKind::Skip | FrameKind::Copied) {
            return None;
        }
        self.max_seq = self.max_seq.max(h.seq);
        if h.kind == FrameKind::Skip {
            assert!(self.open.is_none(), "a skip inside a group");
            return Some(self.complete(GroupRef::void(h.offset, h.seq, self.lane, self.space.head())));
        }
        self.space.advance_head(slot.placement.pos + slot.size);
        let (start, bytes) = self.open.get_or_insert((slot.placement.pos, 0));
        // A Copied record stands for the bytes its Copy frames put in the data area.
        *bytes += if h.kind == FrameKind::Copied { slot.accepted.copied } else { h.body_len as u64 };
        let (start, bytes) = (*start, *bytes);
        if slot.accepted.ends_group {
            self.open = None;
            return Some(self.complete(GroupRef::data(h.seq, self.lane, start, self.space.head(), bytes)));
        }
        None
    }

    fn complete(&mut self, group: GroupRef) -> Completed {
        let (from, to) = (self.persisted_to, self.space.head());
        assert!(from <= group.start_pos && group.end_pos == to, "group {group:?} outside [{from}, {to})");
        self.persisted_to = to;
        Completed { group, persist_from: from, persist_to: to }
    }

    /// Ends the session: the open group, if any, is dropped and its space reused. Returns the
    /// sequence number of the dropped group.
    pub fn end_session(&mut self) -> Option<u64> {
        let dropped = self.receiver.take().and_then(|r| r.open_group());
        if let Some((start, _)) = self.open.take() {
            self.space.rewind_head(start);
        }
        dropped
    }

    /// Space before `to` has been applied and may be reused (the log's persisted tail is `to`
    /// already, so recovery needs nothing before it).
    pub fn release(&mut self, to: u64) {
        self.space.advance_tail(to);
        self.persisted_to = self.persisted_to.max(to);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encode::{data_header, FramePlan};

    #[test]
    fn group_completes_and_session_end_rewinds() {
        let tag = SessionTag { session: 1, epoch: 1, lane: 0 };
        let mut l = MirrorLane::new(0, 1024, 0, 0);
        l.begin(tag, 1 << 20, 256, 1);
        let h0 = data_header(tag, 1, FramePlan { offset: 0, len: 10, frame_index: 0, end: false }, &[0; 10]);
        let s = l.on_header(&h0).unwrap().unwrap();
        assert_eq!(l.commit(&s), None);
        let h1 = data_header(tag, 1, FramePlan { offset: 10, len: 10, frame_index: 1, end: true }, &[0; 10]);
        let s = l.on_header(&h1).unwrap().unwrap();
        let g = l.commit(&s).unwrap().group;
        assert_eq!((g.seq, g.start_pos, g.end_pos, g.bytes), (1, 0, 256, 20));
        let h2 = data_header(tag, 2, FramePlan { offset: 0, len: 10, frame_index: 0, end: false }, &[0; 10]);
        let s = l.on_header(&h2).unwrap().unwrap();
        l.commit(&s);
        assert_eq!(l.end_session(), Some(2));
        assert_eq!(l.space().head(), 256);
    }

    #[test]
    fn a_skip_takes_no_room_and_becomes_a_void_group() {
        let tag = SessionTag { session: 1, epoch: 1, lane: 0 };
        let mut l = MirrorLane::new(0, 1024, 0, 0);
        l.begin(tag, 1 << 20, 256, 5);
        let mut h = mojim_format::FrameHeader::new(FrameKind::Skip);
        h.epoch = 1;
        h.session = 1;
        h.offset = 5;
        h.seq = 7;
        let s = l.on_header(&h.to_bytes()).unwrap().unwrap();
        assert_eq!(s.size, 0);
        let g = l.commit(&s).unwrap().group;
        assert_eq!((g.first_seq, g.seq, g.start_pos, g.end_pos, g.bytes), (5, 7, 0, 0, 0));
        assert_eq!(l.space().used(), 0);
        // The next group must come after the void numbers.
        let early = data_header(tag, 7, FramePlan { offset: 0, len: 1, frame_index: 0, end: true }, &[0]);
        assert!(l.on_header(&early).is_err());
        let next = data_header(tag, 8, FramePlan { offset: 0, len: 1, frame_index: 0, end: true }, &[0]);
        assert!(l.on_header(&next).unwrap().is_some());
    }

    #[test]
    fn a_copied_frame_is_a_group_of_the_copied_bytes() {
        let tag = SessionTag { session: 1, epoch: 1, lane: 0 };
        let mut l = MirrorLane::new(0, 1024, 0, 0);
        l.begin(tag, 1 << 20, 256, 1);
        let mut copy = mojim_format::FrameHeader::new(FrameKind::Copy);
        (copy.epoch, copy.session, copy.offset, copy.body_len) = (1, 1, 512, 200);
        let s = l.on_header(&copy.to_bytes()).unwrap().unwrap();
        assert_eq!((s.size, l.commit(&s)), (0, None), "a Copy takes no log room and is no group");
        let mut body = Vec::new();
        mojim_format::copied::push_range(&mut body, 512, 200);
        let mut h = mojim_format::FrameHeader::new(FrameKind::Copied);
        (h.epoch, h.session, h.seq, h.flags) = (1, 1, 1, mojim_format::frame::FLAG_END);
        h.body_len = body.len() as u32;
        h.body_checksum = mojim_format::checksum::crc32c(&body);
        let s = l.on_header(&h.to_bytes()).unwrap().unwrap();
        assert_eq!(s.size, mojim_format::log::record_size(16));
        let g = l.commit(&s).unwrap().group;
        assert_eq!((g.seq, g.start_pos, g.end_pos, g.bytes), (1, 0, 128, 200));
    }

    #[test]
    fn a_sealed_record_takes_room_for_its_tag_after_its_body() {
        let tag = SessionTag { session: 1, epoch: 1, lane: 0 };
        let mut l = MirrorLane::new(0, 4096, 0, 0);
        l.begin(tag, 1 << 20, 4096, 1);
        let plan = FramePlan { offset: 0, len: 64, frame_index: 0, end: true };
        let h = crate::encode::sealed(crate::encode::data_header(tag, 1, plan, &[7u8; 64]));
        let s = l.on_header(&h).unwrap().unwrap();
        // 64 bytes of header, 64 of body, 16 of tag rounded up to 64.
        assert_eq!(s.size, 192);
        assert_eq!(l.commit(&s).unwrap().group.end_pos, 192);
    }

    fn one_frame(l: &mut MirrorLane, tag: SessionTag, seq: u64, len: u32) -> (Slot, Option<Completed>) {
        let body = vec![7u8; len as usize];
        let h = data_header(tag, seq, FramePlan { offset: 0, len, frame_index: 0, end: true }, &body);
        let s = l.on_header(&h).unwrap().unwrap();
        (s, l.commit(&s))
    }

    #[test]
    fn a_group_after_a_pad_persists_the_pad_too() {
        let tag = SessionTag { session: 1, epoch: 1, lane: 0 };
        let mut l = MirrorLane::new(0, 1024, 0, 0);
        l.begin(tag, 1 << 20, 512, 1);
        // 320 + 320 + 192 bytes: 192 left in the lap, too few for the next 320-byte record.
        for (seq, len) in [(1, 256), (2, 256), (3, 128)] {
            let (_, c) = one_frame(&mut l, tag, seq, len);
            let c = c.unwrap();
            assert_eq!((c.persist_from, c.persist_to), (c.group.start_pos, c.group.end_pos));
        }
        l.release(640);
        let (s, c) = one_frame(&mut l, tag, 4, 256);
        let c = c.unwrap();
        assert_eq!(s.placement.pad_at, Some(832));
        assert_eq!((c.group.start_pos, c.group.end_pos), (1024, 1344));
        // Recovery scans from the tail (640) through the pad at 832: it must be persistent
        // before group 4 is acknowledged.
        assert_eq!((c.persist_from, c.persist_to), (832, 1344));
    }

    #[test]
    fn a_pad_before_a_dropped_group_is_persisted_with_the_next_group() {
        let tag = SessionTag { session: 1, epoch: 1, lane: 0 };
        let mut l = MirrorLane::new(0, 1024, 832, 832);
        l.begin(tag, 1 << 20, 512, 1);
        let h = data_header(tag, 1, FramePlan { offset: 0, len: 256, frame_index: 0, end: false }, &[1; 256]);
        let s = l.on_header(&h).unwrap().unwrap();
        assert_eq!(s.placement.pad_at, Some(832));
        assert_eq!(l.commit(&s), None);
        // The session ends with group 1 open: its record is dropped, the pad before it stays.
        assert_eq!(l.end_session(), Some(1));
        assert_eq!(l.space().head(), 1024);
        let tag2 = SessionTag { session: 2, ..tag };
        l.begin(tag2, 1 << 20, 512, 1);
        let (_, c) = one_frame(&mut l, tag2, 1, 64);
        let c = c.unwrap();
        assert_eq!((c.group.start_pos, c.persist_from, c.persist_to), (1024, 832, 1152));
        let (_, c) = one_frame(&mut l, tag2, 2, 64);
        assert_eq!(c.unwrap().persist_from, 1152);
    }

    #[test]
    fn records_found_on_restart_are_persisted_with_the_first_group() {
        // Recovery found [0, 256) in the log; a killed process may never have persisted it, and
        // a scan after a power cut must still get through it to the groups that follow.
        let tag = SessionTag { session: 1, epoch: 1, lane: 0 };
        let mut l = MirrorLane::new(0, 1024, 0, 256);
        l.begin(tag, 1 << 20, 512, 1);
        let (_, c) = one_frame(&mut l, tag, 1, 64);
        let c = c.unwrap();
        assert_eq!((c.group.start_pos, c.persist_from, c.persist_to), (256, 0, 384));
    }

    #[test]
    fn full_log_waits_without_changing_state() {
        let tag = SessionTag { session: 1, epoch: 1, lane: 0 };
        let mut l = MirrorLane::new(0, 256, 0, 0);
        l.begin(tag, 1 << 20, 256, 1);
        let h = data_header(tag, 1, FramePlan { offset: 0, len: 100, frame_index: 0, end: true }, &[0; 100]);
        let s = l.on_header(&h).unwrap().unwrap();
        let g = l.commit(&s).unwrap().group;
        let h2 = data_header(tag, 2, FramePlan { offset: 0, len: 100, frame_index: 0, end: true }, &[0; 100]);
        assert_eq!(l.on_header(&h2).unwrap(), None);
        l.release(g.end_pos);
        assert!(l.on_header(&h2).unwrap().is_some());
    }
}
