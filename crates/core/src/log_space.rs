//! Space accounting for one lane's circular log: where the next record goes and when the log
//! is full. Positions only grow; `head - tail` bytes are in use.

use mojim_format::log::RECORD_ALIGN;
use mojim_format::FRAME_HEADER_SIZE;

/// Where a record of a given size goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placement {
    /// A Pad record to write first, filling the rest of the lap.
    pub pad_at: Option<u64>,
    /// Position of the record.
    pub pos: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogSpace {
    capacity: u64,
    head: u64,
    tail: u64,
}

impl LogSpace {
    pub fn new(capacity: u64, tail: u64, head: u64) -> LogSpace {
        assert!(capacity > 0 && capacity.is_multiple_of(RECORD_ALIGN));
        assert!(tail <= head && head - tail <= capacity);
        assert!(tail.is_multiple_of(RECORD_ALIGN) && head.is_multiple_of(RECORD_ALIGN));
        LogSpace { capacity, head, tail }
    }

    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    pub fn head(&self) -> u64 {
        self.head
    }

    pub fn tail(&self) -> u64 {
        self.tail
    }

    pub fn used(&self) -> u64 {
        self.head - self.tail
    }

    /// Where a record of `size` bytes would go, or `None` if it does not fit until the tail
    /// moves.
    pub fn place(&self, size: u64) -> Option<Placement> {
        assert!(
            size.is_multiple_of(RECORD_ALIGN) && size >= FRAME_HEADER_SIZE as u64 && size <= self.capacity
        );
        let free = self.capacity - self.used();
        let room = self.capacity - self.head % self.capacity;
        if size <= room {
            (size <= free).then_some(Placement { pad_at: None, pos: self.head })
        } else {
            (room + size <= free).then_some(Placement { pad_at: Some(self.head), pos: self.head + room })
        }
    }

    /// Moves the head past a placed record.
    pub fn advance_head(&mut self, to: u64) {
        assert!(to >= self.head && to - self.tail <= self.capacity);
        self.head = to;
    }

    /// Moves the head back to `to` (discarding an incomplete group).
    pub fn rewind_head(&mut self, to: u64) {
        assert!(to >= self.tail && to <= self.head);
        self.head = to;
    }

    /// Releases space up to `to`.
    pub fn advance_tail(&mut self, to: u64) {
        assert!(to >= self.tail && to <= self.head);
        self.tail = to;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pads_at_the_end_of_a_lap_and_fills_up() {
        let mut s = LogSpace::new(1024, 0, 0);
        let p = s.place(512).unwrap();
        assert_eq!(p, Placement { pad_at: None, pos: 0 });
        s.advance_head(512);
        s.advance_head(512 + 384);
        // 128 bytes of room left in the lap, 128 free: a 256-byte record does not fit.
        assert_eq!(s.place(256), None);
        s.advance_tail(512);
        let p = s.place(256).unwrap();
        assert_eq!(p, Placement { pad_at: Some(896), pos: 1024 });
        s.advance_head(1280);
        assert_eq!(s.used(), 768);
    }
}
