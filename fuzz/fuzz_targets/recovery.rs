//! Restart recovery over logs built from fuzzer-chosen records and then corrupted: `recover`
//! never panics, returns complete groups in increasing, unique sequence order, every group it
//! returns can be applied (paired check: `for_each_write` re-validates each record), writes stay
//! inside the region, and every lane resumes within one lap of its tail.
//!
//! Input layout:
//! ```text
//! off len field
//!   0   1 lanes        1 + (b % 4)
//!   1   1 capacity     64 * (4 + b % 60) bytes per lane
//!   2   1 applied_seq  b % 16
//!   3   . ops          8 bytes each, until a 0xFF byte or the end:
//!                        0: lane (low 2 bits), session (bit 2), end (bit 3)
//!                        1: seq (b % 32)
//!                        2: frame index (b % 4)
//!                        3: body length 1 + b
//!                        4..6: offset u16 LE
//!                        6: body fill byte, 7: unused
//!   .   .  flips       after the 0xFF: 4 bytes each: lane, offset u16 LE, xor mask
//! ```
//! Replay a failure: `cargo +nightly fuzz run recovery artifacts/recovery/<file>`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mojim_core::encode::{data_header, FramePlan, SessionTag};
use mojim_core::recovery::{for_each_write, recover, LaneLog};
use mojim_format::log::{pad_header, record_size};
use mojim_format::FrameHeader;

const REGION: u64 = 1 << 16;
const MAX_BODY: u32 = 256;

fuzz_target!(|data: &[u8]| {
    if data.len() < 3 {
        return;
    }
    let lanes = 1 + data[0] as usize % 4;
    let cap = 64 * (4 + data[1] as u64 % 60);
    let applied = data[2] as u64 % 16;
    let mut areas = vec![vec![0u8; cap as usize]; lanes];
    let mut heads = vec![0u64; lanes];
    let mut rest = &data[3..];
    while rest.len() >= 8 && rest[0] != 0xFF {
        let op = &rest[..8];
        rest = &rest[8..];
        let lane = (op[0] & 3) as usize % lanes;
        let len = 1 + op[3] as u32;
        let size = record_size(len as u64);
        if size > cap {
            continue;
        }
        let area = &mut areas[lane];
        let mut pos = heads[lane];
        let room = cap - pos % cap;
        if room < size {
            let at = (pos % cap) as usize;
            area[at..at + 64].copy_from_slice(&pad_header(cap, pos));
            pos += room;
        }
        let tag = SessionTag { session: 1 + (op[0] >> 2 & 1) as u64, epoch: 1, lane: lane as u16 };
        let body = vec![op[6]; len as usize];
        let offset = u16::from_le_bytes([op[4], op[5]]) as u64;
        let plan = FramePlan { offset, len, frame_index: op[2] as u32 % 4, end: op[0] & 8 != 0 };
        let mut h = FrameHeader::decode(&data_header(tag, op[1] as u64 % 32, plan, &body)).expect("valid");
        h.log_pos = pos;
        let at = (pos % cap) as usize;
        area[at..at + 64].copy_from_slice(&h.to_bytes());
        area[at + 64..at + 64 + len as usize].copy_from_slice(&body);
        heads[lane] = pos + size;
    }
    if let Some((&0xFF, flips)) = rest.split_first() {
        for f in flips.chunks_exact(4) {
            let lane = f[0] as usize % lanes;
            let at = u16::from_le_bytes([f[1], f[2]]) as usize % cap as usize;
            areas[lane][at] ^= f[3];
        }
    }
    let tails: Vec<u64> = heads.iter().map(|&h| h.saturating_sub(cap).next_multiple_of(64).min(h)).collect();
    let logs: Vec<LaneLog<'_>> =
        areas.iter().zip(&tails).map(|(a, &t)| LaneLog { area: &a[..], tail: t }).collect();
    let r = recover(&logs, applied, MAX_BODY, REGION);
    assert_eq!(r.heads.len(), lanes);
    for (lane, (&head, &tail)) in r.heads.iter().zip(&tails).enumerate() {
        assert!(
            head >= tail && head - tail <= cap,
            "lane {lane}: head {head} outside [{tail}, {tail}+{cap}]"
        );
    }
    assert!(r.groups.windows(2).all(|w| w[0].seq < w[1].seq), "groups out of order: {:?}", r.groups);
    let mut image = vec![0u8; REGION as usize];
    for g in &r.groups {
        assert!(g.seq > applied);
        assert!(g.seq <= r.max_seq);
        for_each_write(&areas[g.lane as usize][..], g, MAX_BODY, |off, body| {
            let end = off as usize + body.len();
            assert!(end as u64 <= REGION, "write past the region: {off}+{}", body.len());
            image[off as usize..end].copy_from_slice(body);
        });
    }
});
