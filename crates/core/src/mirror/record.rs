//! A record a lane received, from the slot its lane gave it to the acknowledgement of the group
//! it completes: how it is stored in the log ([`RecordRules::store`], the executor), and what
//! the group needs, in order, before the primary hears of it ([`RecordRules::after`], the
//! steps). The node's lanes (`mojim-node`'s `lane.rs`) and the simulator's mirror both run
//! these against their log media, so the order is written once.
//!
//! The order of a record:
//! 1. a Pad where the record skips the end of the log's lap;
//! 2. the body, received straight into its place (or already placed there by the peer);
//! 3. the body checked where it lies, against the header's checksum;
//! 4. only then the header, stamped with its position: the bytes become a record. A body that
//!    fails its check stays behind the head, where no header vouches for it.
//!
//! The order of a group (invariant 2 of docs/DESIGN.md: acknowledged means whole and
//! persistent): its log range is made persistent (its records and any Pad before them); a
//! Copied group's bytes, which its Copy frames put in the data area, are made durable there;
//! the group goes to the checkpointer; and only then is it acknowledged, through the ack gate.

use crate::checkpoint::GroupRef;
use crate::lane::{Completed, Slot};
use crate::receive::Violation;
use mojim_format::frame::FLAG_ENCRYPTED;
use mojim_format::log::{pad_header, RecordArea};
use mojim_format::{FrameHeader, FrameKind, FRAME_HEADER_SIZE};
use mojim_region::{Bytes, LogMedia};
use std::io::{self, Read};

/// Where a record's body comes from.
pub enum Body<'a> {
    /// From the connection, straight into its place in the log.
    Receive(&'a mut dyn Read),
    /// Already in its place: the peer wrote it into the log (a placed lane), and checked it
    /// there (its seal, over TLS) before this runs.
    InPlace,
}

/// Why a record was not stored. Nothing of it is a record: no header vouches for its bytes.
#[derive(Debug)]
pub enum StoreError {
    /// The body does not match its header: the peer's fault (or the link's).
    Peer(Violation),
    /// The body could not be received: the connection ended or failed.
    Receive(io::Error),
    /// The log's media refused a write: this node's fault.
    Storage(io::Error),
}

/// One step a group completed by a record needs, in the order they come.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupStep {
    /// Make the lane's log positions `from..to` persistent. A failure is never retried: the
    /// log fail-stops, and nothing more is acknowledged from it until a restart recovers it.
    PersistLog { from: u64, to: u64 },
    /// A Copied group: make the bytes its Copy frames put in the data area durable (a disk
    /// file's writes need a sync; memory was written back as they landed).
    SyncData,
    /// Hand the group to the checkpointer, which applies it in order.
    Queue(GroupRef),
    /// Acknowledge group `.0`, once the ack gate lets it go.
    Ack(u64),
}

/// The steps after one record, in order: none, or those of the group it completed.
#[derive(Clone, Copy, Debug)]
pub struct Steps {
    steps: [Option<GroupStep>; 4],
    next: usize,
}

impl Iterator for Steps {
    type Item = GroupStep;

    fn next(&mut self) -> Option<GroupStep> {
        while self.next < self.steps.len() {
            self.next += 1;
            if let Some(s) = self.steps[self.next - 1] {
                return Some(s);
            }
        }
        None
    }
}

/// A fault injected on purpose, for the simulator to prove it catches it.
#[cfg(feature = "sim")]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RecordFault {
    #[default]
    None,
    /// Acknowledges a group as soon as its first record is in the log, before it is whole or
    /// persistent.
    AckBeforeEnd,
    /// Persists only the group's own records, not a Pad the lane wrote before them.
    PersistGroupOnly,
}

/// How a lane stores its records and completes its groups.
#[derive(Clone, Copy, Debug, Default)]
pub struct RecordRules {
    #[cfg(feature = "sim")]
    fault: RecordFault,
}

impl RecordRules {
    /// The rules as the node runs them.
    pub fn new() -> RecordRules {
        RecordRules::default()
    }

    /// Breaks the rules on purpose (simulator tests only).
    #[cfg(feature = "sim")]
    pub fn inject(&mut self, fault: RecordFault) {
        self.fault = fault;
    }

    #[cfg(feature = "sim")]
    fn faulty(&self, fault: RecordFault) -> bool {
        self.fault == fault
    }

    #[cfg(not(feature = "sim"))]
    fn faulty(&self, _: ()) -> bool {
        false
    }

    /// Stores `slot`'s record in `log`, in the order of the module's comment. A record of no
    /// size (a Skip) stores nothing.
    pub fn store<L: LogMedia + ?Sized>(
        &self,
        log: &mut L,
        slot: &Slot,
        body: Body<'_>,
    ) -> Result<(), StoreError> {
        if slot.size == 0 {
            return Ok(());
        }
        let cap = log.len();
        let (pos, h) = (slot.placement.pos, slot.accepted.header);
        let at = pos % cap;
        let (body_at, len) = (at + FRAME_HEADER_SIZE as u64, h.body_len as usize);
        if let Some(pad) = slot.placement.pad_at {
            log.write(pad % cap, Bytes::Slice(&pad_header(cap, pad))).map_err(StoreError::Storage)?;
        }
        if let Body::Receive(src) = body {
            log.receive(body_at, len, src).map_err(StoreError::Receive)?;
        }
        let computed = log.records().checksum(body_at as usize, len);
        h.check_checksum(len, computed).map_err(|e| StoreError::Peer(Violation::Body(e)))?;
        let mut stamped = h;
        stamped.log_pos = pos;
        // The body lies decrypted (a placed lane's runtime decrypted it in place): the record
        // says so by not saying ENCRYPTED.
        stamped.flags &= !FLAG_ENCRYPTED;
        log.write(at, Bytes::Slice(&stamped.to_bytes())).map_err(StoreError::Storage)
    }

    /// The steps after the record of `h` was stored and committed; `done`: the group it
    /// completed, if it did.
    pub fn after(&self, h: &FrameHeader, done: Option<&Completed>) -> Steps {
        let mut steps = [None; 4];
        #[cfg(feature = "sim")]
        let early = self.faulty(RecordFault::AckBeforeEnd);
        #[cfg(not(feature = "sim"))]
        let early = self.faulty(());
        if early && h.frame_index == 0 && h.kind != FrameKind::Skip {
            // Broken on purpose: acknowledged when its first record is in the log.
            steps[3] = Some(GroupStep::Ack(h.seq));
        }
        let Some(c) = done else { return Steps { steps, next: 0 } };
        let g = c.group;
        #[cfg(feature = "sim")]
        let own = self.faulty(RecordFault::PersistGroupOnly);
        #[cfg(not(feature = "sim"))]
        let own = self.faulty(());
        steps[0] = Some(if own {
            // Broken on purpose: only the group's own records, not a Pad before them.
            GroupStep::PersistLog { from: g.start_pos, to: g.end_pos }
        } else {
            GroupStep::PersistLog { from: c.persist_from, to: c.persist_to }
        });
        if h.kind == FrameKind::Copied {
            steps[1] = Some(GroupStep::SyncData);
        }
        steps[2] = Some(GroupStep::Queue(g));
        if !early || h.kind == FrameKind::Skip {
            steps[3] = Some(GroupStep::Ack(g.seq));
        }
        Steps { steps, next: 0 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encode::SessionTag;
    use crate::lane::MirrorLane;
    use mojim_format::log::record_at;

    /// A log in memory: its record area and tail, nothing persistent (these tests look at
    /// what is written and the steps, not at power cuts).
    struct MemLog {
        area: Vec<u8>,
        persisted: Vec<(u64, u64)>,
    }

    impl mojim_region::Media for MemLog {
        fn len(&self) -> u64 {
            self.area.len() as u64
        }
        fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
            out.copy_from_slice(&self.area[offset as usize..offset as usize + out.len()]);
            Ok(())
        }
        fn write(&mut self, offset: u64, src: Bytes<'_>) -> io::Result<()> {
            let at = offset as usize;
            src.read(0, &mut self.area[at..at + src.len()]);
            Ok(())
        }
        fn persist(&mut self, offset: u64, len: u64) -> io::Result<()> {
            self.persisted.push((offset, len));
            Ok(())
        }
        fn sync(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl LogMedia for MemLog {
        fn records(&self) -> Bytes<'_> {
            Bytes::Slice(&self.area)
        }
        fn tail(&self) -> u64 {
            0
        }
        fn set_tail(&mut self, _: u64) -> io::Result<()> {
            Ok(())
        }
    }

    const CAP: u64 = 4096;
    const TAG: SessionTag = SessionTag { session: 7, epoch: 1, lane: 0 };

    /// A lane of a log of `CAP` bytes whose head is at `head`, in a session from group 1.
    fn lane_at(head: u64) -> MirrorLane {
        let mut l = MirrorLane::new(0, CAP, head, head);
        l.begin(TAG, 1 << 20, 1024, 1);
        l
    }

    fn data_frame(seq: u64, body: &[u8]) -> ([u8; FRAME_HEADER_SIZE], Vec<u8>) {
        let mut h = FrameHeader::new(FrameKind::Data);
        (h.session, h.epoch, h.lane, h.seq) = (TAG.session, TAG.epoch, TAG.lane, seq);
        h.flags = mojim_format::frame::FLAG_END;
        h.offset = 64;
        h.body_len = body.len() as u32;
        h.body_checksum = mojim_format::checksum::crc32c(body);
        (h.to_bytes(), body.to_vec())
    }

    #[test]
    fn a_record_is_stored_with_its_pad_and_its_group_persisted_queued_then_acknowledged() {
        // The head is near the end of the lap: the record skips it behind a Pad.
        let mut lane = lane_at(CAP - 128);
        let mut log = MemLog { area: vec![0; CAP as usize], persisted: Vec::new() };
        let (hb, body) = data_frame(1, &[9u8; 200]);
        let slot = lane.on_header(&hb).expect("a valid header").expect("room");
        assert_eq!(slot.placement.pad_at, Some(CAP - 128));
        let rules = RecordRules::new();
        rules.store(&mut log, &slot, Body::Receive(&mut body.as_slice())).expect("stored");
        let rec = record_at(log.area.as_slice(), slot.placement.pos, 1024).expect("a record");
        assert_eq!((rec.header.log_pos, rec.header.body_len), (CAP, 200));
        let pad = record_at(log.area.as_slice(), CAP - 128, 1024).expect("a pad");
        assert_eq!(pad.header.kind, FrameKind::Pad);
        let done = lane.commit(&slot).expect("a whole group");
        let steps: Vec<_> = rules.after(&slot.accepted.header, Some(&done)).collect();
        assert_eq!(
            steps,
            [
                GroupStep::PersistLog { from: CAP - 128, to: done.persist_to },
                GroupStep::Queue(done.group),
                GroupStep::Ack(1),
            ],
            "the Pad is persisted with the group, and the Ack comes last"
        );
    }

    #[test]
    fn a_body_that_fails_its_check_leaves_no_record() {
        let mut lane = lane_at(0);
        let mut log = MemLog { area: vec![0; CAP as usize], persisted: Vec::new() };
        let (hb, mut body) = data_frame(1, &[9u8; 100]);
        body[50] ^= 1;
        let slot = lane.on_header(&hb).expect("a valid header").expect("room");
        let r = RecordRules::new().store(&mut log, &slot, Body::Receive(&mut body.as_slice()));
        assert!(matches!(r, Err(StoreError::Peer(Violation::Body(_)))), "{r:?}");
        assert!(record_at(log.area.as_slice(), 0, 1024).is_none(), "no header vouches for the body");
    }

    #[test]
    fn a_body_cut_short_is_a_receive_error_and_leaves_no_record() {
        let mut lane = lane_at(0);
        let mut log = MemLog { area: vec![0; CAP as usize], persisted: Vec::new() };
        let (hb, body) = data_frame(1, &[9u8; 100]);
        let slot = lane.on_header(&hb).expect("a valid header").expect("room");
        let r = RecordRules::new().store(&mut log, &slot, Body::Receive(&mut &body[..60]));
        assert!(matches!(r, Err(StoreError::Receive(_))), "{r:?}");
        assert!(record_at(log.area.as_slice(), 0, 1024).is_none());
    }

    #[test]
    fn a_copied_group_syncs_the_data_area_before_it_is_queued() {
        let mut h = FrameHeader::new(FrameKind::Copied);
        h.seq = 4;
        let g = GroupRef::data(4, 0, 0, 128, 4096);
        let done = Completed { group: g, persist_from: 0, persist_to: 128 };
        let steps: Vec<_> = RecordRules::new().after(&h, Some(&done)).collect();
        assert_eq!(
            steps,
            [
                GroupStep::PersistLog { from: 0, to: 128 },
                GroupStep::SyncData,
                GroupStep::Queue(g),
                GroupStep::Ack(4)
            ]
        );
    }

    #[test]
    fn a_record_that_completes_nothing_needs_nothing() {
        let h = FrameHeader::new(FrameKind::Data);
        assert_eq!(RecordRules::new().after(&h, None).count(), 0);
    }
}
