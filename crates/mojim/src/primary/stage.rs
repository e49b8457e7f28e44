//! A group whose bytes reach the region while it is being sent.
//!
//! A caller that keeps its new bytes elsewhere (recoverable memory keeps them in an arena of
//! its own) would copy them all into the region and then send the group: two passes, one after
//! the other, while the mirror waits for the first frame. Staged, each frame's bytes are put
//! into the region just before the frame is framed and sent, so that the copying of one overlaps
//! the mirror's receiving of those before it. Every path that does not send (no mirror, a lane
//! lost part-way, local persistence) puts the rest first: the region always holds the group
//! whole before anything but the frame loop reads it.

use mojim_core::Range;

/// Puts `(offset, len)`: region bytes of the group, in the group's order, each exactly once.
pub type Put<'a> = &'a mut dyn FnMut(u64, u64);

/// The part of a group's bytes put into the region so far.
pub struct Stage<'a> {
    ranges: &'a [Range],
    put: Option<Put<'a>>,
    /// Bytes put, counted in the ranges' order.
    done: u64,
}

impl<'a> Stage<'a> {
    /// A group whose bytes are in the region already.
    pub fn none() -> Stage<'static> {
        Stage { ranges: &[], put: None, done: 0 }
    }

    /// A group of `ranges` whose bytes `put` places in the region.
    pub fn new(ranges: &'a [Range], put: Put<'a>) -> Stage<'a> {
        Stage { ranges, put: Some(put), done: 0 }
    }

    /// The frame at byte `at` of the group (in the ranges' order), `len` bytes at region
    /// `offset`, is about to be read: puts it, unless it was put already (a second replica's
    /// pass over the same frames).
    pub fn frame(&mut self, at: u64, offset: u64, len: u64) {
        let Some(put) = &mut self.put else { return };
        if at == self.done && len > 0 {
            put(offset, len);
            self.done += len;
        }
        debug_assert!(at < self.done || len == 0, "frames out of order: at {at}, put {}", self.done);
    }

    /// Puts every byte not put yet.
    pub fn finish(&mut self) {
        let Some(put) = &mut self.put else { return };
        let mut at = 0;
        for r in self.ranges {
            let (start, end) = (at, at + r.len);
            if end > self.done {
                let skip = self.done.max(start) - start;
                put(r.offset + skip, r.len - skip);
                self.done = end;
            }
            at = end;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_byte_is_put_once_in_order_whether_framed_or_finished() {
        let ranges = [Range::new(0, 10), Range::new(100, 0), Range::new(200, 30)];
        let mut got = Vec::new();
        {
            let mut put = |o, l| got.push((o, l));
            let mut s = Stage::new(&ranges, &mut put);
            s.frame(0, 0, 10);
            s.frame(10, 200, 16);
            // A second replica's pass over the same frames puts nothing again.
            s.frame(0, 0, 10);
            s.frame(10, 200, 16);
            // The lane failed: the rest.
            s.finish();
            s.finish();
        }
        assert_eq!(got, vec![(0, 10), (200, 16), (216, 14)]);
    }
}
