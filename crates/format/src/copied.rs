//! The body of a `Copied` frame: which region bytes the Copy frames before it carried.
//!
//! A copy group is sent as Copy frames, which land straight in the receiver's data area, and then
//! one `Copied` frame that gives the group its sequence number (and its place in the log). The
//! body lists the ranges of those Copy frames in the order they came, *coalesced*: a frame that
//! starts where the previous range ends extends it. Each entry is 16 bytes:
//!
//! ```text
//! off len field
//!   0   8 offset   first region byte of the range
//!   8   8 len      bytes in the range (> 0)
//! ```
//!
//! A body holds 1 to [`MAX_COPIED_RANGES`] entries. Because the list is canonical, a receiver
//! checks it without keeping it: [`CopiedTally`] follows the Copy frames in constant space and
//! knows the length and CRC32C the body must have.

use crate::bytes::{put_u64, u64_at};
use crate::checksum::crc32c_append;

/// Most bytes in one Copy frame's body, whatever the session's `max_frame` (a Copy frame goes
/// to the data area, never into a log, so the log's frame limit does not bound it).
pub const MAX_COPY_BODY: u32 = 1 << 20;

/// Bytes of one entry.
pub const COPIED_RANGE_SIZE: usize = 16;
/// Most ranges one Copied frame may stand for.
pub const MAX_COPIED_RANGES: u32 = 1024;

/// One entry, encoded.
pub fn encode_range(offset: u64, len: u64) -> [u8; COPIED_RANGE_SIZE] {
    let mut b = [0u8; COPIED_RANGE_SIZE];
    put_u64(&mut b, 0, offset);
    put_u64(&mut b, 8, len);
    b
}

/// The entries of a body whose length is a multiple of [`COPIED_RANGE_SIZE`] (a body checked
/// against its header; trailing bytes of any other length are ignored).
pub fn ranges(body: &[u8]) -> impl Iterator<Item = (u64, u64)> + '_ {
    body.chunks_exact(COPIED_RANGE_SIZE).map(|e| (u64_at(e, 0), u64_at(e, 8)))
}

/// Appends the range of one Copy frame to a body being built, coalescing as the format says.
/// The caller keeps the body within [`MAX_COPIED_RANGES`] entries.
pub fn push_range(body: &mut Vec<u8>, offset: u64, len: u64) {
    let n = body.len();
    if n >= COPIED_RANGE_SIZE {
        let last = &mut body[n - COPIED_RANGE_SIZE..];
        let (o, l) = (u64_at(last, 0), u64_at(last, 8));
        if o + l == offset {
            put_u64(last, 8, l + len);
            return;
        }
    }
    body.extend_from_slice(&encode_range(offset, len));
}

/// What a receiver knows of the Copy frames since the last group, in constant space: enough to
/// check the Copied frame that must follow them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CopiedTally {
    /// Entries before the open one, and the CRC32C of their encoding.
    closed: u32,
    closed_crc: u32,
    /// The last range, still growing: start and end.
    open: Option<(u64, u64)>,
    bytes: u64,
}

impl CopiedTally {
    /// Counts a Copy frame of `len` bytes at `offset`.
    pub fn push(&mut self, offset: u64, len: u64) {
        self.bytes += len;
        match &mut self.open {
            Some((_, end)) if *end == offset => *end += len,
            open => {
                if let Some((start, end)) = open.take() {
                    self.closed += 1;
                    self.closed_crc = crc32c_append(self.closed_crc, &encode_range(start, end - start));
                }
                *open = Some((offset, offset + len));
            }
        }
    }

    /// Entries the body must have.
    pub fn ranges(&self) -> u32 {
        self.closed + u32::from(self.open.is_some())
    }

    /// Bytes the Copy frames carried.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    pub fn is_empty(&self) -> bool {
        self.open.is_none()
    }

    /// The CRC32C the body must have.
    pub fn checksum(&self) -> u32 {
        match self.open {
            Some((start, end)) => crc32c_append(self.closed_crc, &encode_range(start, end - start)),
            None => self.closed_crc,
        }
    }

    /// Body length the Copied frame must have.
    pub fn body_len(&self) -> u64 {
        self.ranges() as u64 * COPIED_RANGE_SIZE as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checksum::crc32c;
    use proptest::prelude::*;

    #[test]
    fn coalesces_touching_frames_only() {
        let mut body = Vec::new();
        let mut t = CopiedTally::default();
        for (o, l) in [(0, 10), (10, 5), (100, 1), (50, 50), (101, 3)] {
            push_range(&mut body, o, l);
            t.push(o, l);
        }
        assert_eq!(ranges(&body).collect::<Vec<_>>(), vec![(0, 15), (100, 1), (50, 50), (101, 3)]);
        assert_eq!((t.ranges(), t.bytes(), t.body_len()), (4, 69, 64));
        assert_eq!(t.checksum(), crc32c(&body));
    }

    proptest! {
        #[test]
        fn the_tally_knows_the_body(frames in proptest::collection::vec((0u64..64, 1u64..8), 1..40)) {
            let (mut body, mut t, mut at) = (Vec::new(), CopiedTally::default(), 0u64);
            for (gap, len) in frames {
                // Mostly contiguous, sometimes a jump.
                let off = if gap < 48 { at } else { gap * 100 };
                push_range(&mut body, off, len);
                t.push(off, len);
                at = off + len;
            }
            prop_assert_eq!(t.body_len(), body.len() as u64);
            prop_assert_eq!(t.checksum(), crc32c(&body));
        }
    }
}
