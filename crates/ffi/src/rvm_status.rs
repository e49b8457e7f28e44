//! `rvm_options_t` and `rvm_status_t`: what `rvm_cfg_create` may be told beyond the
//! configuration file, and what `rvm_status` reports, in fixed-width fields versioned by a
//! size, as `struct mojim_status` is.

use crate::error::Failure;
use crate::status::text;
use crate::MOJIM_STATUS_TEXT;
use mojim_rvm::{RvmStatus, WriteTracking};
use std::ffi::c_char;

/// Bytes of the short string fields of `rvm_status_t` (`tracking`, `backend`), NUL included.
pub const RVM_STATUS_NAME: usize = 32;

/// `rvm_options_t` flag: allow a configuration without a cluster secret (no authentication
/// between primary and mirror), as `MOJIM_OPEN_INSECURE` does for `mojim_open`. Never on a
/// shared network.
pub const RVM_INSECURE: u32 = 1;

/// Every flag `rvm_options_t` knows.
const FLAGS: u32 = RVM_INSECURE;

/// How written pages are found (`rvm_options_t`'s `tracking`).
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RvmTracking {
    /// As the configuration file's `[rvm] tracking` says (default "auto").
    RVM_TRACKING_CONFIG = 0,
    /// userfaultfd if the kernel offers it, else page protection (`rvm_status_t`'s
    /// `fell_back` and `fallback` then say why).
    RVM_TRACKING_AUTO = 1,
    /// userfaultfd asynchronous write protection (Linux 6.7 and later), or fail.
    RVM_TRACKING_UFFD = 2,
    /// Page protection and a SIGSEGV handler, even where userfaultfd is available. No system
    /// call may then write into recoverable memory (a `read(2)` into it fails with `EFAULT`):
    /// copy through a buffer of your own.
    RVM_TRACKING_MPROTECT = 3,
}

/// What `rvm_cfg_create` is told beyond the configuration file: a NULL `rvm_options_t *`
/// means all defaults.
///
/// Set `size` to `sizeof(rvm_options_t)`: a library reads at most that many bytes, so a
/// program built against an older (shorter) struct keeps working; bytes past the fields this
/// library knows must be zero (a newer program's option it cannot honour is refused, never
/// ignored). Fields are only ever added at the end.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RvmCfgOptions {
    /// The caller's `sizeof(rvm_options_t)`: at least 8 (`size` and `flags`).
    pub size: u32,
    /// 0, or `RVM_INSECURE`. Unknown bits are refused (`MOJIM_EINVAL`).
    pub flags: u32,
    /// An `enum rvm_tracking` value: `RVM_TRACKING_CONFIG` (0) leaves it to `[rvm] tracking`.
    pub tracking: u32,
    /// Must be 0.
    pub reserved: u32,
}

/// The smallest `size` of `rvm_options_t` a caller may give: `size` and `flags`.
const MIN_OPTIONS_SIZE: usize = 8;

/// The options, as read from the caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Options {
    pub insecure: bool,
    /// `None`: as the configuration says; `Some(None)`: auto; `Some(Some(m))`: `m`, or fail.
    pub tracking: Option<Option<WriteTracking>>,
}

impl Options {
    /// The options at `opts` (NULL: the defaults), checked.
    ///
    /// # Safety
    /// `opts` is NULL or valid for reads of `opts->size` bytes, beginning with an aligned
    /// `u32`.
    pub unsafe fn read(opts: *const RvmCfgOptions) -> Result<Options, Failure> {
        if opts.is_null() {
            return Ok(Options { insecure: false, tracking: None });
        }
        // SAFETY: not NULL; the caller's struct begins with its `size` (a u32, aligned); no
        // reference to the whole struct is made: it may be shorter than this library's.
        let size = unsafe { opts.cast::<u32>().read() } as usize;
        if size < MIN_OPTIONS_SIZE {
            return Err(Failure::invalid(format!(
                "options size is {size}: set opts->size = sizeof(rvm_options_t), or pass NULL for the defaults"
            )));
        }
        let mut o = RvmCfgOptions::default();
        let n = size.min(size_of::<RvmCfgOptions>());
        // SAFETY: the caller promises `size` readable bytes at `opts`, and n <= size; `o` is a
        // local of at least n bytes, every bit pattern of which is valid (four u32s).
        unsafe { std::ptr::copy_nonoverlapping(opts.cast::<u8>(), (&raw mut o).cast::<u8>(), n) };
        if size > n {
            // SAFETY: as above: bytes n..size of the caller's struct are readable.
            let rest = unsafe { std::slice::from_raw_parts(opts.cast::<u8>().add(n), size - n) };
            if let Some(i) = rest.iter().position(|&b| b != 0) {
                return Err(Failure::invalid(format!(
                    "options byte {} is {:#04x}, past the {n} bytes of rvm_options_t this library knows: \
                     a newer program's option it cannot honour; set it to 0, or use a newer libmojim",
                    n + i,
                    rest[i]
                )));
            }
        }
        let unknown = o.flags & !FLAGS;
        if unknown != 0 {
            return Err(Failure::invalid(format!(
                "unknown flag bits {unknown:#x} in opts->flags {:#x}: the only flag is RVM_INSECURE \
                 ({RVM_INSECURE:#x}); pass 0 for none",
                o.flags
            )));
        }
        let tracking = match o.tracking {
            0 => None,
            1 => Some(None),
            2 => Some(Some(WriteTracking::UffdAsync)),
            3 => Some(Some(WriteTracking::Mprotect)),
            t => {
                return Err(Failure::invalid(format!(
                    "opts->tracking is {t}, not an enum rvm_tracking: use RVM_TRACKING_CONFIG (0), \
                     RVM_TRACKING_AUTO (1), RVM_TRACKING_UFFD (2) or RVM_TRACKING_MPROTECT (3)"
                )))
            }
        };
        if o.reserved != 0 {
            return Err(Failure::invalid(format!("opts->reserved is {}: it must be 0", o.reserved)));
        }
        Ok(Options { insecure: o.flags & RVM_INSECURE != 0, tracking })
    }
}

/// A snapshot of recoverable memory's state, filled by `rvm_status`.
///
/// Set `size` to `sizeof(rvm_status_t)` before the call: the library fills at most that many
/// bytes and sets `size` to the number it filled. Fields are only ever added at the end.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct RvmCfgStatus {
    /// In: the caller's `sizeof(rvm_status_t)`. Out: the bytes filled.
    pub size: u32,
    /// 1 if `rvm_cfg_create` found committed state and recovered it, 0 if it created the
    /// memory empty.
    pub recovered: u32,
    /// 1 if userfaultfd was wanted (tracking "auto") but page protection is in use; `fallback`
    /// says why. 0 when the method in use is the one asked for.
    pub fell_back: u32,
    /// Runs of contiguous pages the last commit sent.
    pub last_commit_runs: u32,
    /// The address of recoverable memory's first byte (its meta block).
    pub base: u64,
    /// Bytes of recoverable memory, the meta block included.
    pub capacity: u64,
    /// Bytes given to blocks so far (the high-water mark past the meta block).
    pub used: u64,
    /// Blocks in use.
    pub blocks: u64,
    /// Commits made over the memory's whole life (what a recovery finds).
    pub seq: u64,
    /// Commits made since `rvm_cfg_create`.
    pub commits: u64,
    /// Pages the last commit sent.
    pub last_commit_pages: u64,
    /// Microseconds the last commit took.
    pub last_commit_us: u64,
    /// The recovery (if `recovered`): the commits the memory had seen.
    pub recovered_seq: u64,
    /// The recovery: blocks read back.
    pub recovered_blocks: u64,
    /// The recovery: bytes read back, the meta block included.
    pub recovered_bytes: u64,
    /// The recovery: microseconds from the start of `rvm_cfg_create` to its return.
    pub recovery_us: u64,
    /// How written pages are found: "uffd-async" or "mprotect". NUL-terminated.
    pub tracking: [c_char; RVM_STATUS_NAME],
    /// The backend: "mojim" (a region and its mirror) or "redis". NUL-terminated.
    pub backend: [c_char; RVM_STATUS_NAME],
    /// Why userfaultfd is not in use (when `fell_back`), else empty. NUL-terminated (cut at
    /// 255 bytes).
    pub fallback: [c_char; MOJIM_STATUS_TEXT],
    /// The backend's own line: where it is and how it is doing (e.g. "mojim region, mode
    /// sync, mirror 10.0.0.2:7420 (2 lanes connected)"). NUL-terminated (cut at 255 bytes).
    pub store: [c_char; MOJIM_STATUS_TEXT],
}

/// The smallest `size` of `rvm_status_t` a caller may give: the fields up to
/// `last_commit_runs`.
pub(crate) const MIN_STATUS_SIZE: usize = 16;

fn micros(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

impl RvmCfgStatus {
    /// The C view of recoverable memory's status.
    pub fn of(st: &RvmStatus) -> RvmCfgStatus {
        let rec = st.recovery.as_ref();
        RvmCfgStatus {
            size: size_of::<RvmCfgStatus>() as u32,
            recovered: u32::from(rec.is_some()),
            fell_back: u32::from(st.fallback.is_some()),
            last_commit_runs: u32::try_from(st.last_commit_runs).unwrap_or(u32::MAX),
            base: st.base as u64,
            capacity: st.capacity,
            used: st.used,
            blocks: st.blocks as u64,
            seq: st.seq,
            commits: st.commits,
            last_commit_pages: st.last_commit_pages,
            last_commit_us: micros(st.last_commit_time),
            recovered_seq: rec.map_or(0, |r| r.seq),
            recovered_blocks: rec.map_or(0, |r| r.blocks as u64),
            recovered_bytes: rec.map_or(0, |r| r.bytes),
            recovery_us: rec.map_or(0, |r| micros(r.time)),
            tracking: text(st.tracking),
            backend: text(st.backend),
            fallback: text(st.fallback.as_deref().unwrap_or("")),
            store: text(&st.store),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_layouts_are_the_ones_the_header_declares() {
        assert_eq!(std::mem::offset_of!(RvmCfgStatus, base), 16);
        assert_eq!(std::mem::offset_of!(RvmCfgStatus, recovery_us), 104);
        assert_eq!(std::mem::offset_of!(RvmCfgStatus, tracking), 112);
        assert_eq!(
            size_of::<RvmCfgStatus>(),
            112 + 2 * RVM_STATUS_NAME + 2 * MOJIM_STATUS_TEXT,
            "no padding"
        );
        assert_eq!(size_of::<RvmCfgOptions>(), 16);
    }

    fn read(o: &RvmCfgOptions) -> Result<Options, String> {
        // SAFETY: a whole struct, its size set by the caller of this helper.
        unsafe { Options::read(o) }.map_err(|f| f.message)
    }

    #[test]
    fn options_are_checked_and_named() {
        let full = RvmCfgOptions { size: 16, ..Default::default() };
        assert_eq!(read(&full).unwrap(), Options { insecure: false, tracking: None });
        let m = RvmCfgOptions { tracking: 3, flags: RVM_INSECURE, ..full };
        assert_eq!(
            read(&m).unwrap(),
            Options { insecure: true, tracking: Some(Some(WriteTracking::Mprotect)) }
        );
        // An older, shorter struct: the fields it lacks are defaults.
        let short = RvmCfgOptions { size: 8, tracking: 3, ..full };
        assert_eq!(read(&short).unwrap().tracking, None);
        assert!(read(&RvmCfgOptions::default()).unwrap_err().contains("options size is 0"));
        assert!(read(&RvmCfgOptions { flags: 6, ..full }).unwrap_err().contains("unknown flag bits 0x6"));
        assert!(read(&RvmCfgOptions { tracking: 9, ..full }).unwrap_err().contains("opts->tracking is 9"));
        assert!(read(&RvmCfgOptions { reserved: 1, ..full }).unwrap_err().contains("reserved is 1"));
        // A newer, longer struct: its unknown bytes must be zero.
        #[repr(C)]
        struct Newer {
            o: RvmCfgOptions,
            extra: u64,
        }
        let newer = Newer { o: RvmCfgOptions { size: 24, ..full }, extra: 0 };
        // SAFETY: `newer` holds 24 readable bytes, as its size says.
        assert!(unsafe { Options::read((&raw const newer).cast()) }.is_ok());
        let newer = Newer { o: RvmCfgOptions { size: 24, ..full }, extra: 1 << 8 };
        // SAFETY: as above.
        let e = unsafe { Options::read((&raw const newer).cast()) }.unwrap_err().message;
        assert!(e.contains("options byte 17 is 0x01"), "{e}");
    }
}
