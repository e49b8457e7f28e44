//! Log scanning over arbitrary record areas: `scan` never panics, returns only records of the
//! lap that starts at the tail, in increasing and non-overlapping order, and `record_at` agrees
//! with it on every record (paired check).
//!
//! Input layout:
//! ```text
//! off len field
//!   0   8 tail      u64 LE: the position the scan starts from
//!   8   4 max_body  u32 LE: largest Data body accepted
//!  12   1 repair    bit 0: before scanning, reseal the checksums of every header-looking slot
//!                   bit 1: ... and also set its log_pos to the position the slot has in the lap
//!                          that starts at `tail` (see `repair`)
//!  13   . area      the record area, cut to a multiple of 64 bytes; at least 64
//! ```
//! Without repair the fuzzer would almost never guess a CRC32C, and so never see a valid record.
//!
//! Replay a failure: `cargo +nightly fuzz run log_scan artifacts/log_scan/<file>`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mojim_format::checksum::crc32c;
use mojim_format::frame::FRAME_MAGIC;
use mojim_format::log::{record_at, record_size, scan, RECORD_ALIGN};
use mojim_format::{FrameKind, FRAME_HEADER_SIZE};

const PREFIX: usize = 13;
const REPAIR_CHECKSUMS: u8 = 1;
const REPAIR_POSITIONS: u8 = 2;

fuzz_target!(|data: &[u8]| {
    if data.len() < PREFIX + RECORD_ALIGN as usize {
        return;
    }
    let tail = u64::from_le_bytes(data[0..8].try_into().expect("8 bytes"));
    let max_body = u32::from_le_bytes(data[8..12].try_into().expect("4 bytes"));
    let repair_flags = data[12];
    let rest = &data[PREFIX..];
    let mut area = rest[..rest.len() - rest.len() % RECORD_ALIGN as usize].to_vec();
    if repair_flags & REPAIR_CHECKSUMS != 0 {
        repair(&mut area, tail, repair_flags & REPAIR_POSITIONS != 0);
    }
    check_scan(&area, tail, max_body);
});

fn check_scan(area: &[u8], tail: u64, max_body: u32) {
    let cap = area.len() as u64;
    let mut next_free = tail; // no record may start before the end of the previous one
    let mut count = 0u64;
    for rec in scan(area, tail, max_body) {
        let ctx = format!("tail {tail} cap {cap} max_body {max_body} record {rec:?}");
        count += 1;
        assert!(count <= cap / RECORD_ALIGN, "more records than fit in a lap: {ctx}");
        assert!(rec.pos >= next_free, "record not after the previous one: {ctx}");
        let from_tail = rec.pos - tail; // cannot underflow: rec.pos >= next_free >= tail
        assert!(from_tail < cap, "record starts beyond one lap of the tail: {ctx}");
        let size = record_size(rec.header.body_len as u64);
        assert!(
            from_tail + size <= cap,
            "record ends beyond one lap of the tail, so it shares bytes with a record \
             returned earlier: {ctx}"
        );
        assert_eq!(rec.header.kind, FrameKind::Data, "scan returned a non-Data record: {ctx}");
        assert_eq!(rec.header.log_pos, rec.pos, "{ctx}");
        assert!(rec.header.body_len > 0 && rec.header.body_len <= max_body, "{ctx}");
        let at = (rec.pos % cap) as usize;
        assert_eq!(rec.body_at, at + FRAME_HEADER_SIZE, "{ctx}");
        let body_end = rec.body_at + rec.header.body_len as usize;
        assert!(at as u64 + size <= cap, "record wraps the area: {ctx}");
        assert!(rec.header.check_body(&area[rec.body_at..body_end]).is_ok(), "{ctx}");
        // Paired check: the record is found again when looked up by its position.
        assert_eq!(record_at(area, rec.pos, max_body), Some(rec), "{ctx}");
        next_free = rec.pos.checked_add(size).unwrap_or_else(|| {
            panic!("record end position overflows u64: {ctx}")
        });
    }
}

/// Reseals the 64-byte slots that sit where a record of the lap starting at `tail` could start
/// (offsets congruent to `tail` mod 64) and carry the frame magic: the body checksum of a Data
/// record whose body fits, then the header checksum. With `positions`, the slot's `log_pos` is
/// first set to the position it has in that lap. Slots are resealed from the last to the first,
/// so that a header lying inside an earlier record's body is final before that body's checksum
/// is taken.
fn repair(area: &mut [u8], tail: u64, positions: bool) {
    let cap = area.len();
    let phase = (tail % RECORD_ALIGN) as usize;
    let tail_at = (tail % cap as u64) as usize;
    let mut starts: Vec<usize> = (phase..cap)
        .step_by(RECORD_ALIGN as usize)
        .filter(|&at| at + FRAME_HEADER_SIZE <= cap)
        .collect();
    starts.reverse();
    for at in starts {
        let h = &mut area[at..at + FRAME_HEADER_SIZE];
        if h[8..10] != FRAME_MAGIC.to_le_bytes() {
            continue;
        }
        if positions {
            let pos = tail.wrapping_add(((at + cap - tail_at) % cap) as u64);
            h[56..64].copy_from_slice(&pos.to_le_bytes());
        }
        let body_len = u32::from_le_bytes(h[16..20].try_into().expect("4 bytes")) as usize;
        let body_at = at + FRAME_HEADER_SIZE;
        if h[11] == FrameKind::Data as u8 && body_len <= cap - body_at {
            let crc = crc32c(&area[body_at..body_at + body_len]);
            area[at + 4..at + 8].copy_from_slice(&crc.to_le_bytes());
        }
        let crc = crc32c(&area[at + 4..at + FRAME_HEADER_SIZE]);
        area[at..at + 4].copy_from_slice(&crc.to_le_bytes());
    }
}
