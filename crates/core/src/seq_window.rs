//! The sequence numbers of one session, across all of its lanes.
//!
//! Each lane checks that its own groups come in increasing order ([`crate::receive`]). That is
//! not enough: two lanes could both send group 7, or one lane could send group 2⁶⁴−2, and the
//! checkpointer (which applies in global order) would be handed a number it already applied,
//! or its watermark would jump to the end of the number space, and every later session would
//! be refused. A [`SeqWindow`] checks every group of a session, whichever lane it comes on,
//! before any of it touches a log:
//!
//! - its numbers were not applied before the session began and not taken by another group of
//!   this session (on any lane);
//! - its numbers lie within a bounded window ahead of the lowest number not yet received.
//!
//! # The window
//!
//! While the lowest number not yet received (`base`) is missing, the checkpointer cannot apply
//! any group after it, so every group received after `base` waits in a lane's log. A group
//! takes at least [`MIN_GROUP_LOG_BYTES`] of log (one record with a header and at least one
//! 64-byte unit of body), so the session's logs hold at most `Σ capacity / MIN_GROUP_LOG_BYTES`
//! of them: no legitimate primary can be further ahead than that with groups that were
//! received. The numbers between `base` and a group that are not received yet are groups in
//! flight on the other lanes, which need log room of their own once they land; the window
//! allows as many again. So the window is `2 × Σ capacity / MIN_GROUP_LOG_BYTES` numbers (see
//! [`window_for_logs`]): for two lanes of 64 MiB that is 2²¹ numbers, a bitmap of 256 KiB
//! allocated once per session (1/512 of the logs it stands for), and at most [`MAX_WINDOW`]
//! numbers (32 MiB) however large the logs: a primary that ran 2²⁸ groups ahead of one it has
//! not sent is not a legitimate one.
//!
//! # Void runs from a mirror
//!
//! A Skip (void numbers a mirror forwards to its backups for groups it never had) is a run of
//! numbers the mirror's own session passed over: the groups that were in flight on its other
//! lanes when that session was sealed across a gap. The mirror's window bounded that run, not
//! the backup's: a mirror fed by 16 lanes can forward a run 16 times as long as a one-lane
//! link's window on a backup with the same logs, and more on a backup with smaller logs. A Skip
//! takes no log room, so the window's reasoning does not bound it; the mirror's window does, and
//! no window is longer than [`MAX_WINDOW`]. A session opened by a mirror
//! ([`SeqWindow::with_void_runs`]) therefore admits a run that starts at the lowest number not
//! yet received and is at most [`MAX_WINDOW`] numbers long, however short its own window (a
//! mirror sends its one lane in order, so each of its runs starts there). Such a run takes the
//! whole window at once and needs no more bitmap: the session's bitmap stays
//! `window_for_logs(its lanes' logs) / 8` bytes. Every other run, and every group, stays within
//! the window.

use crate::receive::Violation;
use mojim_format::log::record_size;

/// The least log room a group takes: one record with a one-byte body.
pub const MIN_GROUP_LOG_BYTES: u64 = record_size(1);

/// The largest window, whatever the logs: 2²⁸ numbers, a bitmap of 32 MiB.
pub const MAX_WINDOW: u64 = 1 << 28;

/// The window of a session whose lanes have logs of `capacities` bytes (see the module
/// documentation): from 64 to [`MAX_WINDOW`].
pub fn window_for_logs(capacities: impl IntoIterator<Item = u64>) -> u64 {
    let groups: u64 = capacities.into_iter().map(|c| c / MIN_GROUP_LOG_BYTES).fold(0, u64::saturating_add);
    groups.saturating_mul(2).clamp(64, MAX_WINDOW)
}

/// Which sequence numbers of a session are taken, and which may come next.
#[derive(Clone, Debug)]
pub struct SeqWindow {
    /// The lowest number not taken: every number below it was taken in this session or
    /// applied before the session began.
    base: u64,
    /// How far ahead of `base` a number may be: `base + len` is the first refused.
    len: u64,
    /// One bit per number in `[base, base + len)`, at `n % len`; clear outside that range.
    taken: Vec<u64>,
    /// The longest run from `base` admitted past the window (0: none; see "Void runs from a
    /// mirror" above).
    void_run: u64,
}

impl SeqWindow {
    /// A session whose first number is `first_seq` (every number before it is applied), with a
    /// window of `len` numbers, rounded up to a multiple of 64 (at most [`MAX_WINDOW`]).
    /// Allocates the bitmap, once.
    pub fn new(first_seq: u64, len: u64) -> SeqWindow {
        let words = len.clamp(1, MAX_WINDOW).div_ceil(64);
        SeqWindow { base: first_seq, len: words * 64, taken: vec![0; words as usize], void_run: 0 }
    }

    /// The window of a session a mirror opened to feed this node as its backup: it also admits
    /// a run (a Skip) that starts at the lowest number not yet received and is at most
    /// [`MAX_WINDOW`] numbers long, past the end of the window.
    pub fn with_void_runs(mut self) -> SeqWindow {
        self.void_run = MAX_WINDOW;
        self
    }

    /// The lowest number not yet taken.
    pub fn base(&self) -> u64 {
        self.base
    }

    /// The last number the window admits now.
    pub fn last_admitted(&self) -> u64 {
        self.base.saturating_add(self.len - 1)
    }

    fn bit(&self, n: u64) -> (usize, u64) {
        let i = n % self.len;
        ((i / 64) as usize, 1u64 << (i % 64))
    }

    fn is_taken(&self, n: u64) -> bool {
        let (w, b) = self.bit(n);
        self.taken[w] & b != 0
    }

    /// Takes the numbers `first ..= last` for one group (a data group has `first == last`; a
    /// Skip voids a run) arriving on `lane`. On a violation nothing changes.
    pub fn take(&mut self, lane: u16, first: u64, last: u64) -> Result<(), Violation> {
        let (from, to) = (self.base, self.last_admitted());
        if first > last || last == u64::MAX {
            return Err(Violation::SeqAhead { lane, first, last, expected_from: from, expected_to: to });
        }
        if last > to {
            if self.void_run == 0 || first != from {
                return Err(Violation::SeqAhead { lane, first, last, expected_from: from, expected_to: to });
            }
            // A void run from the base past the window: it covers the whole window.
            let run_to = from.saturating_add(self.void_run - 1);
            if last > run_to {
                return Err(Violation::SeqAhead {
                    lane,
                    first,
                    last,
                    expected_from: from,
                    expected_to: run_to,
                });
            }
            if self.taken.iter().any(|w| *w != 0) {
                return Err(Violation::SeqTaken { lane, first, last, expected_from: from, expected_to: to });
            }
            self.base = last + 1;
            return Ok(());
        }
        if first < from || (first..=last).any(|n| self.is_taken(n)) {
            return Err(Violation::SeqTaken { lane, first, last, expected_from: from, expected_to: to });
        }
        for n in first..=last {
            let (w, b) = self.bit(n);
            self.taken[w] |= b;
        }
        while self.is_taken(self.base) {
            let (w, b) = self.bit(self.base);
            self.taken[w] &= !b;
            self.base += 1;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_from_several_lanes_fill_the_numbers_in_any_order() {
        let mut w = SeqWindow::new(10, 64);
        w.take(1, 11, 11).unwrap();
        assert_eq!(w.base(), 10, "10 is still missing");
        w.take(0, 10, 10).unwrap();
        assert_eq!(w.base(), 12);
        w.take(0, 13, 15).unwrap();
        w.take(1, 12, 12).unwrap();
        assert_eq!(w.base(), 16);
    }

    #[test]
    fn a_number_is_taken_once_per_session_on_any_lane() {
        // Lane 0 sends 10..=12, then lane 1 sends 11 again: refused, naming the lane.
        let mut w = SeqWindow::new(10, 64);
        for n in 10..=12 {
            w.take(0, n, n).unwrap();
        }
        let e = w.take(1, 11, 11).unwrap_err();
        assert_eq!(
            e,
            Violation::SeqTaken { lane: 1, first: 11, last: 11, expected_from: 13, expected_to: 76 }
        );
        let m = e.to_string();
        assert!(m.contains("lane 1") && m.contains("11") && m.contains("13..=76"), "{m}");
        // Taken above the base, too, and a void run that overlaps a taken number.
        w.take(0, 20, 20).unwrap();
        assert!(matches!(w.take(1, 20, 20), Err(Violation::SeqTaken { .. })));
        assert!(matches!(w.take(1, 18, 22), Err(Violation::SeqTaken { .. })));
        // Refusals changed nothing: 13..=19 and 21.. are still free.
        w.take(1, 13, 19).unwrap();
        assert_eq!(w.base(), 21);
    }

    #[test]
    fn numbers_applied_before_the_session_are_refused() {
        let mut w = SeqWindow::new(100, 64);
        assert!(matches!(
            w.take(0, 99, 99),
            Err(Violation::SeqTaken { lane: 0, first: 99, expected_from: 100, .. })
        ));
        assert!(matches!(w.take(0, 1, 100), Err(Violation::SeqTaken { .. })));
        assert_eq!(w.base(), 100);
    }

    #[test]
    fn numbers_too_far_ahead_are_refused_and_nothing_moves() {
        let mut w = SeqWindow::new(1, 128);
        assert_eq!(w.last_admitted(), 128);
        // The wedge: a Skip or group at the end of the number space.
        let e = w.take(3, u64::MAX - 1, u64::MAX - 1).unwrap_err();
        assert_eq!(
            e,
            Violation::SeqAhead {
                lane: 3,
                first: u64::MAX - 1,
                last: u64::MAX - 1,
                expected_from: 1,
                expected_to: 128
            }
        );
        assert!(e.to_string().contains("lane 3"), "{e}");
        assert!(matches!(w.take(0, 1, u64::MAX - 1), Err(Violation::SeqAhead { .. })));
        assert!(matches!(w.take(0, 129, 129), Err(Violation::SeqAhead { .. })));
        assert!(matches!(w.take(0, 5, 4), Err(Violation::SeqAhead { .. })), "an empty run");
        assert_eq!(w.base(), 1);
        // The whole window at once is fine; then it slides.
        w.take(0, 1, 128).unwrap();
        assert_eq!((w.base(), w.last_admitted()), (129, 256));
        w.take(0, 256, 256).unwrap();
        assert!(matches!(w.take(0, 257, 257), Err(Violation::SeqAhead { .. })));
    }

    #[test]
    fn the_window_near_the_end_of_the_number_space_does_not_overflow() {
        let mut w = SeqWindow::new(u64::MAX - 3, 64);
        assert_eq!(w.last_admitted(), u64::MAX);
        w.take(0, u64::MAX - 3, u64::MAX - 2).unwrap();
        assert!(matches!(w.take(0, u64::MAX, u64::MAX), Err(Violation::SeqAhead { .. })));
    }

    #[test]
    fn the_bitmap_wraps_as_the_window_slides() {
        let mut w = SeqWindow::new(0, 64);
        // Lane 0 holds back one number a lap while lane 1 fills the rest of the window, for many
        // laps of the bitmap.
        for lap in 0..1000u64 {
            let base = lap * 64;
            for n in base + 1..base + 64 {
                w.take(1, n, n).unwrap_or_else(|e| panic!("{n}: {e}"));
                // The next lap's number at the same bit is still out of reach.
                assert!(matches!(w.take(1, n + 64, n + 64), Err(Violation::SeqAhead { .. })), "{n}");
            }
            assert_eq!(w.base(), base);
            w.take(0, base, base).unwrap();
            assert_eq!(w.base(), base + 64);
            assert!(matches!(w.take(0, base + 5, base + 5), Err(Violation::SeqTaken { .. })));
        }
    }

    #[test]
    fn a_mirrors_session_admits_a_void_run_from_the_base_past_the_window() {
        // A primary's session: nothing past the window, a run neither.
        let mut w = SeqWindow::new(10, 64);
        assert!(matches!(w.take(0, 10, 10 + 64), Err(Violation::SeqAhead { .. })));
        // A mirror's: a run from the base, up to MAX_WINDOW numbers, slides the whole window.
        let mut w = SeqWindow::new(10, 64).with_void_runs();
        w.take(0, 10, 10 + 1000).unwrap();
        assert_eq!((w.base(), w.last_admitted()), (1011, 1011 + 63));
        w.take(0, 1011, 1011 + MAX_WINDOW - 1).unwrap();
        let base = 1011 + MAX_WINDOW;
        assert_eq!(w.base(), base);
        // One number longer is refused, naming the longest run admitted.
        let e = w.take(2, base, base + MAX_WINDOW).unwrap_err();
        assert_eq!(
            e,
            Violation::SeqAhead {
                lane: 2,
                first: base,
                last: base + MAX_WINDOW,
                expected_from: base,
                expected_to: base + MAX_WINDOW - 1
            }
        );
        // Not from the base: the window bounds it as any other.
        assert!(matches!(w.take(0, base + 1, base + 100), Err(Violation::SeqAhead { .. })));
        // A run over a number taken in the window is a resend.
        w.take(0, base + 5, base + 5).unwrap();
        assert!(matches!(w.take(0, base, base + 100), Err(Violation::SeqTaken { .. })));
        // The wedge is refused still, and refusals changed nothing.
        assert!(matches!(w.take(0, base, u64::MAX - 1), Err(Violation::SeqAhead { .. })));
        assert_eq!(w.base(), base);
        w.take(0, base, base + 4).unwrap();
        assert_eq!(w.base(), base + 6);
        // Near the end of the number space the run stops short of 2⁶⁴−1.
        let mut w = SeqWindow::new(u64::MAX - 100, 64).with_void_runs();
        assert!(matches!(w.take(0, u64::MAX - 100, u64::MAX), Err(Violation::SeqAhead { .. })));
        w.take(0, u64::MAX - 100, u64::MAX - 1).unwrap();
    }

    #[test]
    fn the_window_is_twice_the_groups_the_logs_hold() {
        assert_eq!(MIN_GROUP_LOG_BYTES, 128);
        assert_eq!(window_for_logs([64 << 20, 64 << 20]), 1 << 21);
        assert_eq!(window_for_logs([]), 64);
        assert_eq!(window_for_logs([u64::MAX, u64::MAX]), MAX_WINDOW);
    }
}
