//! The in-flight window of one lane in mode `async`: a sync point returns once its group is
//! sent, but not before the group sent `capacity` groups earlier on the same lane is
//! acknowledged, so that at most `capacity` groups per lane are ever unacknowledged.

/// The last `capacity` group numbers sent on a lane, oldest first in ring order. Allocated once;
/// [`InFlightWindow::sent`] allocates nothing.
#[derive(Clone, Debug)]
pub struct InFlightWindow {
    sent: Box<[u64]>,
    at: usize,
}

impl InFlightWindow {
    /// # Panics
    /// If `capacity` is 0.
    pub fn new(capacity: usize) -> InFlightWindow {
        assert!(capacity > 0, "an in-flight window of 0 groups");
        InFlightWindow { sent: vec![0; capacity].into_boxed_slice(), at: 0 }
    }

    /// The group that the next one sent must wait for (see [`InFlightWindow::sent`]).
    pub fn behind(&self) -> u64 {
        self.sent[self.at]
    }

    /// Group `seq` was sent: returns the group sent `capacity` groups before it on this lane,
    /// which must be acknowledged before its sync point returns (0: none, the lane has not sent
    /// that many).
    pub fn sent(&mut self, seq: u64) -> u64 {
        let behind = std::mem::replace(&mut self.sent[self.at], seq);
        self.at = (self.at + 1) % self.sent.len();
        behind
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_group_waits_for_the_one_capacity_groups_back() {
        let mut w = InFlightWindow::new(3);
        assert_eq!([w.sent(10), w.sent(11), w.sent(12)], [0, 0, 0], "the first three wait for nothing");
        assert_eq!(w.behind(), 10);
        assert_eq!(w.sent(15), 10);
        assert_eq!(w.sent(16), 11);
        let mut one = InFlightWindow::new(1);
        assert_eq!((one.sent(4), one.sent(5), one.behind()), (0, 4, 5), "a window of one waits for the last");
    }
}
