//! Log scanning over arbitrary record areas: `scan` never panics, returns only records of the
//! lap that starts at the tail, in increasing and non-overlapping order, and `record_at` agrees
//! with it on every record (paired check).
//!
//! Input layout:
//! ```text
//! off len field
//!   0   8 tail      u64 LE: the position the scan starts from
//!   8   4 max_body  u32 LE: largest Data body accepted
//!  12   1 repair    what to mend before scanning (see `repair`); bits:
//!                   0: reseal the checksums of every slot that carries the frame magic
//!                   1: also set each such slot's log_pos to its position in the tail's lap
//!                   2: first write the frame magic and version into every slot
//!  13   . area      the record area, cut to a multiple of 64 bytes; at least 64
//! ```
//! Without repair the fuzzer would almost never guess a CRC32C, and so never see a valid record;
//! with it, it still decides every other field, including wrong magics, positions and checksums
//! (by leaving the repair bits clear).
//!
//! Replay a failure: `cargo +nightly fuzz run log_scan artifacts/log_scan/<file>`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mojim_format::checksum::crc32c;
use mojim_format::frame::FRAME_MAGIC;
use mojim_format::log::{record_at, record_size, scan, RECORD_ALIGN};
use mojim_format::{FrameKind, FRAME_HEADER_SIZE, PROTOCOL_VERSION};

const PREFIX: usize = 13;
const REPAIR_CHECKSUMS: u8 = 1;
const REPAIR_POSITIONS: u8 = 2;
const REPAIR_STAMP: u8 = 4;

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
        let positions = repair_flags & REPAIR_POSITIONS != 0;
        repair(&mut area, tail, positions, repair_flags & REPAIR_STAMP != 0);
    }
    check_scan(&area, tail, max_body);
});

/// Positions are compared by their distance from `tail` (`pos - tail`, wrapping), so that the
/// checks hold the same whether a scan past `u64::MAX` wraps around or stops.
fn check_scan(area: &[u8], tail: u64, max_body: u32) {
    let cap = area.len() as u64;
    let mut next_free = 0u64; // distance from the tail at which the previous record ended
    let mut count = 0u64;
    for rec in scan(area, tail, max_body) {
        // Built only when an assertion fails.
        let ctx = || format!("tail {tail} cap {cap} max_body {max_body} record {rec:?}");
        count += 1;
        assert!(count <= cap / RECORD_ALIGN, "more records than fit in a lap: {}", ctx());
        let from_tail = rec.pos.wrapping_sub(tail);
        assert!(from_tail < cap, "record starts beyond one lap of the tail: {}", ctx());
        assert!(from_tail >= next_free, "record not after the previous one: {}", ctx());
        let size = record_size(rec.header.body_len as u64);
        assert!(
            from_tail + size <= cap,
            "record ends beyond one lap of the tail, so it overlaps the bytes the scan \
             started from: {}",
            ctx()
        );
        assert_eq!(rec.header.kind, FrameKind::Data, "scan returned a non-Data record: {}", ctx());
        assert_eq!(rec.header.log_pos, rec.pos, "{}", ctx());
        assert!(rec.header.body_len > 0 && rec.header.body_len <= max_body, "{}", ctx());
        let at = (rec.pos % cap) as usize;
        assert_eq!(rec.body_at, at + FRAME_HEADER_SIZE, "{}", ctx());
        assert!(at as u64 + size <= cap, "record wraps the area: {}", ctx());
        let body_end = rec.body_at + rec.header.body_len as usize;
        assert!(rec.header.check_body(&area[rec.body_at..body_end]).is_ok(), "{}", ctx());
        // Paired check: the record is found again when looked up by its position.
        assert_eq!(record_at(area, rec.pos, max_body), Some(rec), "{}", ctx());
        next_free = from_tail + size;
    }
}

/// Reseals the 64-byte slots that sit where a record of the lap starting at `tail` could start
/// (offsets congruent to `tail` mod 64) and carry the frame magic: the body checksum of a Data
/// record whose body fits, then the header checksum. With `stamp`, every such slot first gets
/// the magic and version; with `positions`, its `log_pos` is set to the position it has in that
/// lap. Slots are resealed from the last to the first, so that a header lying inside an earlier
/// record's body is final before that body's checksum is taken.
fn repair(area: &mut [u8], tail: u64, positions: bool, stamp: bool) {
    let cap = area.len();
    let phase = (tail % RECORD_ALIGN) as usize;
    let tail_at = (tail % cap as u64) as usize;
    let mut starts: Vec<usize> =
        (phase..cap).step_by(RECORD_ALIGN as usize).filter(|&at| at + FRAME_HEADER_SIZE <= cap).collect();
    starts.reverse();
    for at in starts {
        let h = &mut area[at..at + FRAME_HEADER_SIZE];
        if stamp {
            h[8..10].copy_from_slice(&FRAME_MAGIC.to_le_bytes());
            h[10] = PROTOCOL_VERSION;
        }
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
