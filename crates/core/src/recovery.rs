//! Restart recovery: which groups the logs hold complete, in what order to apply them, and
//! where each lane resumes (the paper's Fig. 3: complete groups are applied, torn ones
//! discarded).

use crate::checkpoint::GroupRef;
use mojim_format::log::{scan, Record, RecordArea};

/// One lane's log as found on restart: its record area (a slice, or a view of a mapping) and
/// its tail.
pub struct LaneLog<'a, A: RecordArea + ?Sized = [u8]> {
    pub area: &'a A,
    pub tail: u64,
}

impl<A: RecordArea + ?Sized> Clone for LaneLog<'_, A> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<A: RecordArea + ?Sized> Copy for LaneLog<'_, A> {}

/// A group found incomplete (or malformed) and discarded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Discarded {
    pub lane: u16,
    pub seq: u64,
    pub frames: u32,
}

/// What the logs hold.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Recovered {
    /// Complete groups after `applied_seq`, in sequence order.
    pub groups: Vec<GroupRef>,
    /// Complete groups at or below `applied_seq`, already in the data area.
    pub already_applied: usize,
    pub discarded: Vec<Discarded>,
    /// Per lane, the position right after its last complete group: new records go there.
    pub heads: Vec<u64>,
    /// Highest sequence number seen in any valid record (complete or not), or `applied_seq`.
    pub max_seq: u64,
}

struct Open {
    seq: u64,
    session: u64,
    start: u64,
    next_index: u32,
    bytes: u64,
}

/// Scans every lane's log from its tail. A record only counts if it is valid (checksums,
/// position) and writes inside a region of `region_size` bytes; a group only counts if its
/// frames are consecutive, of one session and sequence number, numbered from 0, and the last
/// one carries END. Never panics, whatever the bytes.
pub fn recover<A: RecordArea + ?Sized>(
    lanes: &[LaneLog<'_, A>],
    applied_seq: u64,
    max_body: u32,
    region_size: u64,
) -> Recovered {
    let mut out = Recovered { max_seq: applied_seq, ..Recovered::default() };
    let mut seen: Vec<u64> = Vec::new();
    for (lane, log) in lanes.iter().enumerate() {
        let lane = lane as u16;
        let mut head = log.tail;
        if log.area.area_len() == 0 {
            out.heads.push(head);
            continue;
        }
        let mut open: Option<Open> = None;
        // A Copied record's bytes are already in the data area; its header writes nothing.
        let in_bounds = |r: &Record| {
            r.header.kind == mojim_format::FrameKind::Copied
                || r.header.offset.checked_add(r.header.body_len as u64).is_some_and(|e| e <= region_size)
        };
        for rec in scan(log.area, log.tail, max_body).take_while(in_bounds) {
            let h = rec.header;
            out.max_seq = out.max_seq.max(h.seq);
            let continues = open
                .as_ref()
                .is_some_and(|o| o.seq == h.seq && o.session == h.session && o.next_index == h.frame_index);
            if !continues {
                if let Some(o) = open.take() {
                    out.discarded.push(Discarded { lane, seq: o.seq, frames: o.next_index });
                }
                if h.frame_index != 0 {
                    out.discarded.push(Discarded { lane, seq: h.seq, frames: 1 });
                    continue;
                }
                open = Some(Open { seq: h.seq, session: h.session, start: rec.pos, next_index: 0, bytes: 0 });
            }
            let o = open.as_mut().expect("opened above");
            o.next_index += 1;
            o.bytes += if h.kind == mojim_format::FrameKind::Copied {
                let mut body = vec![0; h.body_len as usize];
                log.area.copy_out(rec.body_at, &mut body);
                mojim_format::copied::ranges(&body).map(|(_, len)| len).sum()
            } else {
                h.body_len as u64
            };
            if h.is_end() {
                let g = GroupRef::data(o.seq, lane, o.start, rec.end_pos(), o.bytes);
                open = None;
                head = g.end_pos;
                if g.seq <= applied_seq {
                    out.already_applied += 1;
                } else if seen.contains(&g.seq) {
                    out.discarded.push(Discarded { lane, seq: g.seq, frames: 0 });
                } else {
                    seen.push(g.seq);
                    out.groups.push(g);
                }
            }
        }
        if let Some(o) = open {
            out.discarded.push(Discarded { lane, seq: o.seq, frames: o.next_index });
        }
        out.heads.push(head);
    }
    out.groups.sort_by_key(|g| g.seq);
    out
}

/// Calls `write(offset, body)` for each Data record of a complete group, in order (a Copied
/// record writes nothing: its bytes reached the data area before it was a record). The records are
/// checked again (paired with the checks made when they were written) and a failed check is a
/// bug or corrupted memory: it panics rather than apply half a group.
pub fn for_each_write<'a, A: RecordArea + ?Sized>(
    area: &'a A,
    g: &GroupRef,
    max_body: u32,
    write: impl FnMut(u64, A::Body<'a>),
) {
    walk(area, g, max_body, true, write)
}

/// As [`for_each_write`] for a group whose records this process already checked (received, or
/// found by recovery): their bodies are not checksummed again.
pub fn for_each_verified_write<'a, A: RecordArea + ?Sized>(
    area: &'a A,
    g: &GroupRef,
    max_body: u32,
    write: impl FnMut(u64, A::Body<'a>),
) {
    walk(area, g, max_body, false, write)
}

fn walk<'a, A: RecordArea + ?Sized>(
    area: &'a A,
    g: &GroupRef,
    max_body: u32,
    check: bool,
    mut write: impl FnMut(u64, A::Body<'a>),
) {
    let mut pos = g.start_pos;
    while pos < g.end_pos {
        let rec = if check {
            mojim_format::log::record_at(area, pos, max_body)
        } else {
            mojim_format::log::record_at_verified(area, pos, max_body)
        };
        let rec = rec.unwrap_or_else(|| panic!("record at {pos} of group {} no longer valid", g.seq));
        if rec.header.kind == mojim_format::FrameKind::Data {
            assert_eq!(rec.header.seq, g.seq, "record at {pos} belongs to another group");
            write(rec.header.offset, rec.body(area));
        }
        pos = rec.end_pos();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encode::{data_header, FramePlan, SessionTag};
    use crate::log_space::LogSpace;
    use mojim_format::log::{record_size, write_pad};

    struct TestLog {
        area: Vec<u8>,
        space: LogSpace,
    }

    impl TestLog {
        fn new(cap: usize) -> TestLog {
            TestLog { area: vec![0; cap], space: LogSpace::new(cap as u64, 0, 0) }
        }
        fn put(&mut self, session: u64, seq: u64, index: u32, offset: u64, body: &[u8], end: bool) {
            let tag = SessionTag { session, epoch: 1, lane: 0 };
            let size = record_size(body.len() as u64);
            let p = self.space.place(size).expect("room");
            if let Some(pad) = p.pad_at {
                write_pad(&mut self.area, pad);
            }
            let cap = self.area.len() as u64;
            let at = (p.pos % cap) as usize;
            let mut hb = data_header(
                tag,
                seq,
                FramePlan { offset, len: body.len() as u32, frame_index: index, end },
                body,
            );
            let mut h = mojim_format::FrameHeader::decode(&hb).unwrap();
            h.log_pos = p.pos;
            h.encode(&mut hb);
            self.area[at..at + 64].copy_from_slice(&hb);
            self.area[at + 64..at + 64 + body.len()].copy_from_slice(body);
            self.space.advance_head(p.pos + size);
        }
    }

    #[test]
    fn figure_3_complete_applied_torn_discarded() {
        // Lane 0: A1 B1(END) C3 D3(END); lane 1: E2(END) G4(END) H5 (no END).
        let mut l0 = TestLog::new(4096);
        let mut l1 = TestLog::new(4096);
        l0.put(9, 1, 0, 0, b"A", false);
        l0.put(9, 1, 1, 1, b"B", true);
        l0.put(9, 3, 0, 2, b"C", false);
        l0.put(9, 3, 1, 3, b"D", true);
        l1.put(9, 2, 0, 4, b"E", true);
        l1.put(9, 4, 0, 6, b"G", true);
        l1.put(9, 5, 0, 7, b"H", false);
        let r = recover(
            &[LaneLog { area: &l0.area[..], tail: 0 }, LaneLog { area: &l1.area[..], tail: 0 }],
            0,
            4096,
            100,
        );
        assert_eq!(r.groups.iter().map(|g| g.seq).collect::<Vec<_>>(), vec![1, 2, 3, 4]);
        assert_eq!(r.discarded, vec![Discarded { lane: 1, seq: 5, frames: 1 }]);
        assert_eq!(r.max_seq, 5);
        assert_eq!(r.heads[1], 2 * record_size(1));
        let mut data = [0u8; 8];
        for g in &r.groups {
            let area: &[u8] = if g.lane == 0 { &l0.area } else { &l1.area };
            for_each_write(area, g, 4096, |off, body| {
                data[off as usize..off as usize + body.len()].copy_from_slice(body)
            });
        }
        assert_eq!(&data, b"ABCDE\0G\0");
    }

    #[test]
    fn applied_groups_are_skipped_and_sessions_do_not_mix() {
        let mut l0 = TestLog::new(4096);
        l0.put(1, 1, 0, 0, b"x", true);
        l0.put(1, 2, 0, 0, b"y", false); // torn: session 1 ended here
        l0.put(2, 2, 1, 0, b"z", true); // a later session's frame 1 of seq 2 must not complete it
        let r = recover(&[LaneLog { area: &l0.area[..], tail: 0 }], 1, 4096, 100);
        assert!(r.groups.is_empty());
        assert_eq!(r.already_applied, 1);
        assert_eq!(r.discarded.len(), 2);
        assert_eq!(r.heads[0], record_size(1));
    }

    #[test]
    fn truncated_and_flipped_records_end_the_log() {
        let mut l0 = TestLog::new(4096);
        for seq in 1..=4 {
            l0.put(1, seq, 0, seq, &[seq as u8; 50], true);
        }
        let mut flipped = l0.area.clone();
        flipped[(2 * record_size(50) + 70) as usize] ^= 4;
        let r = recover(&[LaneLog { area: &flipped[..], tail: 0 }], 0, 4096, 100);
        assert_eq!(r.groups.len(), 2);
        let mut truncated = l0.area.clone();
        truncated[(3 * record_size(50)) as usize..].fill(0);
        let r = recover(&[LaneLog { area: &truncated[..], tail: 0 }], 0, 4096, 100);
        assert_eq!(r.groups.len(), 3);
        // A record writing past the region's end is not trusted either.
        let r = recover(&[LaneLog { area: &l0.area[..], tail: 0 }], 0, 4096, 52);
        assert_eq!(r.groups.len(), 2, "offsets 1 and 2 fit in 52 bytes, 3 does not");
    }
}
