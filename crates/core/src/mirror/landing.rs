//! A Copy frame's body, from its lane into the data area (the copy's bookkeeping is the session
//! slot's, [`super::CopyState`]). The node's `lane.rs` and the simulator's mirror both take the
//! verdict here and land the bytes through [`land`].
//!
//! The bytes land before the group they belong to is applied in order. That is the same
//! result: the sender read them after the group's number was assigned, so they are at least as
//! new as every group numbered before it (a group before it that the checkpointer applies later
//! writes bytes as new as the copy's, or newer), and no group numbered after it is applied before
//! its Copied frame, which follows these frames on the lane, is in the log.

use crate::receive::Violation;
use mojim_format::frame::BodyError;
use mojim_format::FrameHeader;
use mojim_region::DataMedia;
use std::io;

/// What becomes of a Copy frame's body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CopyVerdict {
    /// It checks: it lands in the data area.
    Land,
    /// It fails its checksum: it does not land, and is asked for again (CopyRetry). The sender
    /// reads its region as it sends, so the application may have changed the bytes after the
    /// checksum was taken (or the link corrupted them); the copy cannot end until a Copy frame
    /// covering them lands.
    AskAgain,
}

/// The verdict on `body`, received for the Copy frame `h`. A body of the wrong length is the
/// peer's fault: a violation, and the lane ends.
pub fn copy_verdict(h: &FrameHeader, body: &[u8]) -> Result<CopyVerdict, Violation> {
    match h.check_body(body) {
        Ok(()) => Ok(CopyVerdict::Land),
        Err(BodyError::Checksum { .. }) => Ok(CopyVerdict::AskAgain),
        Err(e) => Err(Violation::Body(e)),
    }
}

/// Lands a Copy frame's checked `body` at `offset` of the data area: written and persistent
/// there (a disk area's, once the Copied group's `SyncData` runs). An error is this node's
/// storage's: the lane ends, and the copy with it (the area stays marked inconsistent).
pub fn land<D: DataMedia + ?Sized>(data: &mut D, offset: u64, body: &[u8]) -> io::Result<()> {
    data.write_persistent(offset, body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use mojim_format::FrameKind;

    fn copy_frame(body: &[u8]) -> FrameHeader {
        let mut h = FrameHeader::new(FrameKind::Copy);
        h.body_len = body.len() as u32;
        h.body_checksum = mojim_format::checksum::crc32c(body);
        h
    }

    #[test]
    fn a_body_that_checks_lands_and_a_changed_one_is_asked_for_again() {
        let h = copy_frame(b"copied bytes");
        assert_eq!(copy_verdict(&h, b"copied bytes"), Ok(CopyVerdict::Land));
        assert_eq!(copy_verdict(&h, b"copied bytez"), Ok(CopyVerdict::AskAgain));
    }

    #[test]
    fn a_body_of_the_wrong_length_is_a_violation() {
        let h = copy_frame(b"copied bytes");
        assert!(matches!(copy_verdict(&h, b"copied"), Err(Violation::Body(_))));
    }
}
