//! `struct mojim_status`: what `Primary::status` reports, in fixed-width fields a C caller's
//! struct can hold, versioned by its size.

use crate::error::Failure;
use mojim::{Mode, PrimaryStatus};
use std::ffi::c_char;
use std::ptr;

/// Bytes of each string field of `struct mojim_status`, its NUL included.
pub const MOJIM_STATUS_TEXT: usize = 256;

/// The role of the node a handle speaks for (`struct mojim_status`'s `role`).
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MojimRole {
    /// The application's side of a region: the only role a handle has today.
    MOJIM_ROLE_PRIMARY = 1,
}

/// When sync points return (`[primary] mode`; `struct mojim_status`'s `mode`).
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MojimMode {
    /// Locally persistent; no mirror.
    MOJIM_MODE_UNREPLICATED = 0,
    /// Locally persistent; sent to the mirror in the background.
    MOJIM_MODE_ASYNC = 1,
    /// In the mirror's log.
    MOJIM_MODE_SYNC = 2,
    /// In the mirror's log and locally persistent.
    MOJIM_MODE_SYNC_FLUSH = 3,
    /// In the log of a mirror whose data area is on disk.
    MOJIM_MODE_SYNC_DISK = 4,
}

impl MojimMode {
    fn of(m: Mode) -> MojimMode {
        match m {
            Mode::Unreplicated => MojimMode::MOJIM_MODE_UNREPLICATED,
            Mode::Async => MojimMode::MOJIM_MODE_ASYNC,
            Mode::Sync => MojimMode::MOJIM_MODE_SYNC,
            Mode::SyncFlush => MojimMode::MOJIM_MODE_SYNC_FLUSH,
            Mode::SyncDisk => MojimMode::MOJIM_MODE_SYNC_DISK,
        }
    }
}

/// The primary's link to its mirror (`struct mojim_status`'s `mirror_state`).
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MojimMirrorState {
    /// The mode does not replicate (`unreplicated`).
    MOJIM_MIRROR_NONE = 0,
    /// A session is up and the mirror is current.
    MOJIM_MIRROR_CONNECTED = 1,
    /// A session is up and the mirror is being brought up to date (the application keeps
    /// syncing meanwhile); `resync_*` say how far.
    MOJIM_MIRROR_RESYNCING = 2,
    /// No session (`on_mirror_loss = "block"`): sync points fail with `MOJIM_ELOST` until the
    /// primary has reconnected by itself; `reason` says why.
    MOJIM_MIRROR_LOST = 3,
    /// No session (`on_mirror_loss = "degrade"`): sync points return once locally persistent
    /// and the changes are recorded for the next session; `reason` says why.
    MOJIM_MIRROR_DEGRADED = 4,
}

/// A snapshot of a primary's state, filled by `mojim_status`.
///
/// Set `size` to `sizeof(struct mojim_status)` before the call: the library fills at most
/// that many bytes and sets `size` to the number it filled, so a program built against an
/// older (shorter) struct keeps working, and one built against a newer struct can tell which
/// fields an older library filled. Fields are only ever added at the end.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct MojimStatus {
    /// In: the caller's `sizeof(struct mojim_status)`. Out: the bytes filled.
    pub size: u32,
    /// A `MOJIM_ROLE_*` value: `MOJIM_ROLE_PRIMARY`.
    pub role: u32,
    /// A `MOJIM_MODE_*` value.
    pub mode: u32,
    /// A `MOJIM_MIRROR_*` value.
    pub mirror_state: u32,
    /// Connected lanes, counting every broadcast mirror's (0 while not connected).
    pub lanes: u32,
    /// Always 0 (keeps the next field aligned).
    pub reserved: u32,
    /// This primary's epoch.
    pub epoch: u64,
    /// The generation id of the history this copy follows.
    pub generation: u64,
    /// The current session's id (0 while not connected).
    pub session: u64,
    /// The sequence number the next group will take (0 while not connected).
    pub next_seq: u64,
    /// The highest sequence number acknowledged on any lane (0 while not connected).
    pub acked_seq_max: u64,
    /// The lowest of the lanes' highest acknowledged sequence numbers (0 while not connected).
    pub acked_seq_min: u64,
    /// Times the mirror was lost since the region was opened.
    pub mirror_losses: u64,
    /// Microseconds the last loss took to make the primary's own copy persistent, or
    /// `UINT64_MAX` if the mirror was never lost.
    pub vulnerable_us: u64,
    /// Bytes the dirty bitmap marks as changed since the mirror last had them.
    pub dirty_bytes: u64,
    /// The current or last resynchronisation: bytes it sends in all (0 if none ran).
    pub resync_total_bytes: u64,
    /// The current or last resynchronisation: bytes sent so far.
    pub resync_sent_bytes: u64,
    /// Milliseconds this primary may still acknowledge for under its etcd lease, or
    /// `UINT64_MAX` without the etcd coordinator.
    pub lease_valid_ms: u64,
    /// The mirror's address, NUL-terminated (cut at 255 bytes).
    pub mirror: [c_char; MOJIM_STATUS_TEXT],
    /// Why the mirror is lost (`MOJIM_MIRROR_LOST` or `MOJIM_MIRROR_DEGRADED`), or why the
    /// last resynchronisation failed; else empty. NUL-terminated (cut at 255 bytes).
    pub reason: [c_char; MOJIM_STATUS_TEXT],
}

/// The smallest `size` a caller may give: the fields up to `mirror_state`.
pub(crate) const MIN_STATUS_SIZE: usize = 16;

/// Copies `s` into a C string field of `N` bytes, cut at a character boundary so it stays
/// valid UTF-8.
pub(crate) fn text<const N: usize>(s: &str) -> [c_char; N] {
    let mut end = s.len().min(N - 1);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    let mut out = [0 as c_char; N];
    for (o, b) in out.iter_mut().zip(&s.as_bytes()[..end]) {
        *o = *b as c_char;
    }
    out
}

/// Copies a status into the caller's struct at `out`, versioned by its size: `out` begins with
/// a `u32` `size` that the caller set to its `sizeof` (`c_type` names it in the error); at most
/// that many bytes of `value()` are copied, and `size` becomes the number copied. A `size`
/// below `min` (e.g. 0: not set) is refused.
///
/// # Safety
/// `out` is NULL or valid for reads and writes of `out->size` bytes, beginning with an aligned
/// `u32`. `T` begins with its `u32` size and has no padding (its layout test checks), so no
/// uninitialised byte is copied.
pub(crate) unsafe fn copy_sized<T: Copy>(
    out: *mut T,
    c_type: &str,
    min: usize,
    value: impl FnOnce() -> T,
) -> Result<(), Failure> {
    if out.is_null() {
        return Err(Failure::invalid(format!("out is NULL: pass a {c_type} to fill")));
    }
    // SAFETY: not NULL; the caller's struct begins with its `size` (a u32, aligned), and no
    // reference to the whole struct is made: it may be shorter than this library's.
    let size = unsafe { out.cast::<u32>().read() } as usize;
    if size < min {
        return Err(Failure::invalid(format!(
            "status size is {size}: set out->size = sizeof({c_type}) before the call"
        )));
    }
    let s = value();
    let n = size.min(size_of::<T>());
    // SAFETY: the caller promises `size` writable bytes at `out`, and n <= size; `s` is a
    // local with n readable bytes and no padding; then the size field, the first 4 bytes (n >=
    // min >= 4), is set.
    unsafe {
        ptr::copy_nonoverlapping((&raw const s).cast::<u8>(), out.cast::<u8>(), n);
        out.cast::<u32>().write(n as u32);
    }
    Ok(())
}

impl MojimStatus {
    /// The C view of a primary's status.
    pub fn of(st: &PrimaryStatus, mode: Mode) -> MojimStatus {
        let resyncing = st.resync.as_ref().is_some_and(|r| !r.done && r.error.is_none());
        let mirror_state = if !mode.replicated() {
            MojimMirrorState::MOJIM_MIRROR_NONE
        } else if st.lanes > 0 {
            if resyncing {
                MojimMirrorState::MOJIM_MIRROR_RESYNCING
            } else {
                MojimMirrorState::MOJIM_MIRROR_CONNECTED
            }
        } else if st.degraded {
            MojimMirrorState::MOJIM_MIRROR_DEGRADED
        } else {
            MojimMirrorState::MOJIM_MIRROR_LOST
        };
        let reason = st.failed.clone().or_else(|| st.resync.as_ref().and_then(|r| r.error.clone()));
        MojimStatus {
            size: size_of::<MojimStatus>() as u32,
            role: MojimRole::MOJIM_ROLE_PRIMARY as u32,
            mode: MojimMode::of(mode) as u32,
            mirror_state: mirror_state as u32,
            lanes: st.lanes as u32,
            reserved: 0,
            epoch: st.epoch,
            generation: st.generation,
            session: st.session,
            next_seq: st.next_seq,
            acked_seq_max: st.acked_seq.iter().copied().max().unwrap_or(0),
            acked_seq_min: st.acked_seq.iter().copied().min().unwrap_or(0),
            mirror_losses: st.mirror_losses,
            vulnerable_us: st.vulnerable_us.unwrap_or(u64::MAX),
            dirty_bytes: st.dirty_bytes,
            resync_total_bytes: st.resync.as_ref().map_or(0, |r| r.total_bytes),
            resync_sent_bytes: st.resync.as_ref().map_or(0, |r| r.sent_bytes),
            lease_valid_ms: st.lease.as_ref().map_or(u64::MAX, |l| l.valid_ms),
            mirror: text(&st.mirror),
            reason: text(reason.as_deref().unwrap_or("")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_cut_at_a_character_boundary_and_ends_in_nul() {
        let long = "é".repeat(200); // 400 bytes
        let t: [c_char; MOJIM_STATUS_TEXT] = text(&long);
        let bytes: Vec<u8> = t.iter().take_while(|c| **c != 0).map(|c| *c as u8).collect();
        assert_eq!(bytes.len(), 254);
        assert!(std::str::from_utf8(&bytes).is_ok());
        assert_eq!(t[MOJIM_STATUS_TEXT - 1], 0);
    }

    #[test]
    fn the_layout_is_the_one_the_header_declares() {
        assert_eq!(std::mem::offset_of!(MojimStatus, mirror_state), 12);
        assert_eq!(std::mem::offset_of!(MojimStatus, epoch), 24);
        assert_eq!(std::mem::offset_of!(MojimStatus, mirror), 120);
        assert_eq!(size_of::<MojimStatus>(), 120 + 2 * MOJIM_STATUS_TEXT);
    }
}
