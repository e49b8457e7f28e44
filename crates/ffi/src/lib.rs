//! Mojim's C API: every function `include/mojim.h` declares, over the Rust API of the `mojim`
//! library (`Primary`) and of recoverable memory (`mojim_rvm::Rvm`: the `rvm_*` functions).
//! `mojim-capi` links this crate into `libmojim.so` and `libmojim.a`; Rust code may call the
//! same functions directly (the benchmark does, to measure this layer).
//!
//! The layer is thin: every rule (bounds, groups, errors) is the library's. What it adds is
//! what C needs: opaque handles, pointers checked before use (NULL, outside the mapping),
//! integer error codes with the library's messages (`mojim_last_error`), and no panic across
//! the boundary (`error::call`).
#![warn(missing_docs)]

mod error;
mod handle;
mod metrics;
mod rvm;
mod rvm_status;
mod status;

pub use error::{mojim_last_error, mojim_last_error_code, mojim_strerror, MojimError};
pub use handle::Handle;
pub use metrics::{MojimMetrics, MOJIM_METRICS_BUCKETS};
pub use rvm::{
    rvm_alloc, rvm_cfg_create, rvm_cfg_destroy, rvm_free, rvm_get_usr_data, rvm_set_usr_data, rvm_status,
    rvm_txn_commit, rvm_txn_start, RvmCfg,
};
pub use rvm_status::{RvmCfgOptions, RvmCfgStatus, RvmTracking, RVM_INSECURE, RVM_STATUS_NAME};
pub use status::{MojimMirrorState, MojimMode, MojimRole, MojimStatus, MOJIM_STATUS_TEXT};

use error::{call, call_value, Failure};
use mojim::error::RangeError;
use mojim::{Config, Error, Primary, PrimaryOptions, Range, Ticket};
use std::collections::hash_map::RandomState;
use std::ffi::{c_char, c_int, c_void, CStr, OsStr};
use std::hash::BuildHasher;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::ptr;

/// `mojim_open` flag: allow a configuration without a cluster secret (no authentication
/// between primary and mirror), as the `mojim` command's `--insecure` does. Never on a shared
/// network.
pub const MOJIM_OPEN_INSECURE: u32 = 1;

/// Every flag `mojim_open` knows.
const OPEN_FLAGS: u32 = MOJIM_OPEN_INSECURE;

/// Ranges converted on the stack; a larger group is converted into a vector.
const STACK_RANGES: usize = 8;

/// Marks a live handle: a pointer whose first word is not this is not one.
const MAGIC: u64 = u64::from_le_bytes(*b"mojim-h1");

/// A region opened as primary: what `mojim_open` returns. Opaque to C.
pub struct Mojim {
    magic: u64,
    primary: Primary,
    /// `[limits] max_ranges`: a group with more ranges is refused before they are read.
    max_ranges: usize,
    /// Keys the tag of the tickets this handle issues.
    tickets: RandomState,
}

/// A range of the region by address: `len` bytes at `ptr`, which must lie inside the mapping
/// (`mojim_base(h)` to `mojim_base(h) + mojim_size(h)`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct MojimRange {
    /// The first byte.
    pub ptr: *const c_void,
    /// Bytes, any number (0 is allowed and sends nothing).
    pub len: usize,
}

/// A range of the region by offset: `len` bytes from byte `offset` of the region.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MojimExtent {
    /// Offset of the first byte in the region.
    pub offset: u64,
    /// Bytes, any number (0 is allowed and sends nothing).
    pub len: u64,
}

/// A group queued by `mojim_persist`, to give to `mojim_wait`. Treat it as opaque: only a
/// ticket the same handle issued, unchanged, is accepted (a keyed tag checks it).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MojimTicket {
    /// The session the group was sent in.
    pub session: u64,
    /// The group's sequence number (0 when nothing was sent: an empty group, an unreplicated
    /// mode, or a primary running without its mirror).
    pub seq: u64,
    /// The lane the group was sent on.
    pub lane: u32,
    /// A tag over the fields above, keyed by the handle.
    pub check: u32,
}

impl Mojim {
    /// The handle of a primary; `max_ranges` is its `[limits] max_ranges`.
    fn new(primary: Primary, max_ranges: usize) -> Mojim {
        Mojim { magic: MAGIC, primary, max_ranges, tickets: RandomState::new() }
    }

    fn tag(&self, session: u64, lane: u32, seq: u64) -> u32 {
        let h = self.tickets.hash_one((session, lane, seq));
        (h ^ (h >> 32)) as u32
    }

    fn ticket(&self, t: Ticket) -> MojimTicket {
        let (session, lane, seq) = t.to_parts();
        let lane = u32::from(lane);
        MojimTicket { session, seq, lane, check: self.tag(session, lane, seq) }
    }

    fn unticket(&self, t: &MojimTicket) -> Result<Ticket, Failure> {
        match u16::try_from(t.lane) {
            Ok(lane) if self.tag(t.session, t.lane, t.seq) == t.check => {
                Ok(Ticket::from_parts(t.session, lane, t.seq))
            }
            _ => Err(Failure::invalid(format!(
                "ticket (session {:#x}, seq {}, lane {}, check {:#x}) was not issued by this handle or was \
                 changed: pass the ticket mojim_persist filled in, unchanged, to the same handle",
                t.session, t.seq, t.lane, t.check
            ))),
        }
    }

    /// The region ranges of `n` pointer ranges at `ranges`.
    ///
    /// # Safety
    /// `ranges` is NULL or points to `n` readable `MojimRange`s.
    unsafe fn by_pointer<R>(
        &self,
        ranges: *const MojimRange,
        n: usize,
        then: impl FnOnce(&[Range]) -> Result<R, Failure>,
    ) -> Result<R, Failure> {
        // SAFETY: the caller's promise, passed on.
        let ranges = unsafe { self.array(ranges, n, "ranges") }?;
        self.convert(
            ranges,
            |i, r| {
                if r.ptr.is_null() {
                    return Err(Failure::invalid(format!(
                        "ranges[{i}].ptr is NULL: every range must point into the region"
                    )));
                }
                Ok(self.primary.range_of(r.ptr.cast(), r.len)?)
            },
            then,
        )
    }

    /// The region ranges of `n` extents at `extents` (checked against the region by the
    /// library when they are synced).
    ///
    /// # Safety
    /// `extents` is NULL or points to `n` readable `MojimExtent`s.
    unsafe fn by_offset<R>(
        &self,
        extents: *const MojimExtent,
        n: usize,
        then: impl FnOnce(&[Range]) -> Result<R, Failure>,
    ) -> Result<R, Failure> {
        // SAFETY: the caller's promise, passed on.
        let extents = unsafe { self.array(extents, n, "extents") }?;
        self.convert(extents, |_, e| Ok(Range::new(e.offset, e.len)), then)
    }

    /// The caller's array of `n` items, once `n` is within the group limit.
    ///
    /// # Safety
    /// `items` is NULL or points to `n` readable `T`s that stay unchanged while the slice
    /// lives.
    unsafe fn array<'a, T>(&self, items: *const T, n: usize, what: &str) -> Result<&'a [T], Failure> {
        if items.is_null() {
            return Err(Failure::invalid(format!(
                "{what} is NULL: pass the group's array of {n} struct mojim_{}",
                what.trim_end_matches('s')
            )));
        }
        if n > self.max_ranges {
            return Err(Error::Range(RangeError::TooManyRanges { count: n, limit: self.max_ranges }).into());
        }
        if n > isize::MAX as usize / size_of::<T>().max(1) {
            return Err(Failure::invalid(format!("{n} {what} cannot be an array in memory")));
        }
        // SAFETY: not NULL, the caller promises `n` readable, unchanged items, and `n` items
        // fit in the address space (checked above).
        Ok(unsafe { std::slice::from_raw_parts(items, n) })
    }

    /// Converts `items` into ranges (on the stack for a small group) and hands them to `then`.
    fn convert<T, R>(
        &self,
        items: &[T],
        mut one: impl FnMut(usize, &T) -> Result<Range, Failure>,
        then: impl FnOnce(&[Range]) -> Result<R, Failure>,
    ) -> Result<R, Failure> {
        if items.len() <= STACK_RANGES {
            let mut buf = [Range::new(0, 0); STACK_RANGES];
            for (i, (slot, item)) in buf.iter_mut().zip(items).enumerate() {
                *slot = one(i, item)?;
            }
            then(&buf[..items.len()])
        } else {
            let v = items.iter().enumerate().map(|(i, item)| one(i, item)).collect::<Result<Vec<_>, _>>()?;
            then(&v)
        }
    }
}

/// The handle behind `h`.
///
/// # Safety
/// `h` is NULL or a handle `mojim_open` returned (or a live [`Handle`] holds) that is not
/// closed.
unsafe fn handle<'a>(h: *const Mojim) -> Result<&'a Mojim, Failure> {
    if h.is_null() {
        return Err(Failure::invalid("the handle is NULL: pass the one mojim_open returned"));
    }
    // SAFETY: not NULL, and the caller promises it is a live handle, which no one changes
    // while it is shared (every function takes it shared, and close takes it only when no
    // other call is in flight).
    let m = unsafe { &*h };
    if m.magic != MAGIC {
        return Err(Failure::invalid(format!(
            "{h:p} is not a handle mojim_open returned (or it was closed): pass the one mojim_open returned"
        )));
    }
    Ok(m)
}

/// Stores through an out-pointer the caller gave.
///
/// # Safety
/// `out` is NULL or valid for a write of `T`.
unsafe fn put<T>(out: *mut T, what: &str, value: T) -> Result<(), Failure> {
    if out.is_null() {
        return Err(Failure::invalid(format!("{what} is NULL: pass where to store the result")));
    }
    // SAFETY: not NULL, and the caller promises it is valid for a write.
    unsafe { out.write(value) };
    Ok(())
}

/// Opens the region that the configuration file at `config_path` describes, as its primary,
/// and (if its mode replicates) connects to its mirror: `Primary::open`. On success `*out` is
/// the handle; on failure `*out` is NULL.
///
/// `flags`: 0, or `MOJIM_OPEN_INSECURE`. Unknown bits are refused (`MOJIM_EINVAL`).
///
/// Errors: `MOJIM_EINVAL` (NULL `config_path` or `out`, unknown flags), `MOJIM_ECONFIG` (the
/// file is missing or wrong), `MOJIM_EIO`/`MOJIM_ESTORAGE` (the region file), `MOJIM_ELOCKED`
/// (the region is open as primary already, here or in another process: one primary per
/// region), and the mirror's: `MOJIM_EREFUSED`, `MOJIM_EHANDSHAKE`, `MOJIM_EFENCED`,
/// `MOJIM_EDIVERGED`, `MOJIM_ECOORD`.
///
/// # Safety
/// `config_path` is NULL or a NUL-terminated string; `out` is NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn mojim_open(config_path: *const c_char, flags: u32, out: *mut *mut Mojim) -> c_int {
    call(|| {
        // SAFETY: the caller's promise about `out`.
        unsafe { put(out, "out", ptr::null_mut()) }?;
        if config_path.is_null() {
            return Err(Failure::invalid("config_path is NULL: pass the path of the region's mojim.toml"));
        }
        let unknown = flags & !OPEN_FLAGS;
        if unknown != 0 {
            return Err(Failure::invalid(format!(
                "unknown flag bits {unknown:#x} in flags {flags:#x}: the only flag is MOJIM_OPEN_INSECURE \
                 ({MOJIM_OPEN_INSECURE:#x}); pass 0 for none"
            )));
        }
        // SAFETY: not NULL, and the caller promises a NUL-terminated string.
        let path = unsafe { CStr::from_ptr(config_path) };
        let cfg = Config::load(Path::new(OsStr::from_bytes(path.to_bytes())))?;
        let opts = PrimaryOptions::from_config(&cfg, flags & MOJIM_OPEN_INSECURE != 0)?;
        let primary = Primary::open(&opts)?;
        let h = Box::into_raw(Box::new(Mojim::new(primary, opts.limits.max_ranges)));
        // SAFETY: checked and written above.
        unsafe { out.write(h) };
        Ok(())
    })
}

/// Waits until every group sent so far is acknowledged (in `async` mode: the mirror has caught
/// up), closes the session and frees the handle: `Primary::close`. The handle is freed even
/// when this fails (the code and message say what was not acknowledged).
///
/// No other call on the handle may be in flight, or start, once this is called.
///
/// # Safety
/// `h` is NULL or a handle `mojim_open` returned that is not closed.
#[no_mangle]
pub unsafe extern "C" fn mojim_close(h: *mut Mojim) -> c_int {
    call(|| {
        // SAFETY: the caller's promise, passed on.
        unsafe { handle(h) }?;
        // SAFETY: a live handle comes from Box::into_raw, and the caller gives it up now: no
        // other call is in flight and none follows.
        let mut m = unsafe { Box::from_raw(h) };
        m.magic = 0;
        m.primary.close()?;
        Ok(())
    })
}

/// Address of region byte 0, for loads and stores (`mojim_size(h)` bytes from there), or NULL
/// if `h` is not a handle (`mojim_last_error` says why).
///
/// # Safety
/// `h` is NULL or a handle `mojim_open` returned that is not closed.
#[no_mangle]
pub unsafe extern "C" fn mojim_base(h: *const Mojim) -> *mut c_void {
    // SAFETY: the caller's promise, passed on.
    call_value(ptr::null_mut(), || Ok(unsafe { handle(h) }?.primary.as_ptr().cast()))
}

/// Bytes in the region, or 0 if `h` is not a handle (`mojim_last_error` says why).
///
/// # Safety
/// `h` is NULL or a handle `mojim_open` returned that is not closed.
#[no_mangle]
pub unsafe extern "C" fn mojim_size(h: *const Mojim) -> u64 {
    // SAFETY: the caller's promise, passed on.
    call_value(0, || Ok(unsafe { handle(h) }?.primary.size()))
}

/// Sync point: makes the `len` bytes at `ptr` durable for the mode, atomically
/// (`Primary::msync_ptr`). In `sync` modes they are in the mirror's log when this returns.
///
/// Errors: `MOJIM_EINVAL` (NULL), `MOJIM_ERANGE` (not inside the mapping: nothing is sent),
/// `MOJIM_ELOST` and the other link errors.
///
/// # Safety
/// `h` is NULL or a handle `mojim_open` returned that is not closed. `ptr` need not be valid:
/// it is checked against the mapping before anything is read.
#[no_mangle]
pub unsafe extern "C" fn mojim_msync(h: *const Mojim, ptr: *const c_void, len: usize) -> c_int {
    call(|| {
        // SAFETY: the caller's promise, passed on.
        let m = unsafe { handle(h) }?;
        if ptr.is_null() {
            return Err(Failure::invalid("ptr is NULL: pass an address inside the region"));
        }
        Ok(m.primary.msync_ptr(ptr.cast(), len)?)
    })
}

/// Sync point: makes the `n` ranges at `ranges` durable for the mode as one atomic group
/// (`Primary::gmsync`): on the mirror, all of them or none.
///
/// Errors: `MOJIM_EINVAL` (NULL `h`, `ranges` or a range's `ptr`), `MOJIM_ERANGE` (a range not
/// inside the mapping, more than `[limits] max_ranges` ranges, a group larger than a lane's
/// log: nothing is sent), `MOJIM_ELOST` and the other link errors.
///
/// # Safety
/// `h` is NULL or a handle `mojim_open` returned that is not closed; `ranges` is NULL or
/// points to `n` readable `struct mojim_range`s (their `ptr`s are checked against the mapping).
#[no_mangle]
pub unsafe extern "C" fn mojim_gmsync(h: *const Mojim, ranges: *const MojimRange, n: usize) -> c_int {
    call(|| {
        // SAFETY: the caller's promise, passed on.
        let m = unsafe { handle(h) }?;
        // SAFETY: the caller's promise, passed on.
        unsafe { m.by_pointer(ranges, n, |r| Ok(m.primary.gmsync(r)?)) }
    })
}

/// Sync point by offset: makes bytes `offset` to `offset + len` of the region durable for the
/// mode, atomically (`Primary::msync`).
///
/// Errors: `MOJIM_EINVAL` (NULL `h`), `MOJIM_ERANGE` (past the region's end: nothing is sent),
/// `MOJIM_ELOST` and the other link errors.
///
/// # Safety
/// `h` is NULL or a handle `mojim_open` returned that is not closed.
#[no_mangle]
pub unsafe extern "C" fn mojim_msync_at(h: *const Mojim, offset: u64, len: u64) -> c_int {
    call(|| {
        // SAFETY: the caller's promise, passed on.
        let m = unsafe { handle(h) }?;
        Ok(m.primary.msync(offset, len)?)
    })
}

/// Sync point by offset: the `n` extents at `extents` as one atomic group (`Primary::gmsync`).
/// Errors as `mojim_gmsync`.
///
/// # Safety
/// `h` is NULL or a handle `mojim_open` returned that is not closed; `extents` is NULL or
/// points to `n` readable `struct mojim_extent`s.
#[no_mangle]
pub unsafe extern "C" fn mojim_gmsync_at(h: *const Mojim, extents: *const MojimExtent, n: usize) -> c_int {
    call(|| {
        // SAFETY: the caller's promise, passed on.
        let m = unsafe { handle(h) }?;
        // SAFETY: the caller's promise, passed on.
        unsafe { m.by_offset(extents, n, |r| Ok(m.primary.gmsync(r)?)) }
    })
}

/// Ordering point: queues the `n` ranges at `ranges` as one group after every group this
/// thread queued before, and returns without waiting for the mirror (`Primary::persist`); the
/// ticket to wait on goes to `*ticket`. In `unreplicated` and `async` modes the ranges are
/// locally persistent on return. Errors as `mojim_gmsync`.
///
/// # Safety
/// As `mojim_gmsync`; `ticket` is NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn mojim_persist(
    h: *const Mojim,
    ranges: *const MojimRange,
    n: usize,
    ticket: *mut MojimTicket,
) -> c_int {
    call(|| {
        // SAFETY: the caller's promise, passed on.
        let m = unsafe { handle(h) }?;
        if ticket.is_null() {
            return Err(Failure::invalid("ticket is NULL: pass where to store the ticket"));
        }
        // SAFETY: the caller's promise, passed on.
        let t = unsafe { m.by_pointer(ranges, n, |r| Ok(m.primary.persist(r)?)) }?;
        // SAFETY: checked above; the caller promises it is valid for a write.
        unsafe { put(ticket, "ticket", m.ticket(t)) }
    })
}

/// Ordering point by offset: as `mojim_persist`, for the `n` extents at `extents`.
///
/// # Safety
/// As `mojim_gmsync_at`; `ticket` is NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn mojim_persist_at(
    h: *const Mojim,
    extents: *const MojimExtent,
    n: usize,
    ticket: *mut MojimTicket,
) -> c_int {
    call(|| {
        // SAFETY: the caller's promise, passed on.
        let m = unsafe { handle(h) }?;
        if ticket.is_null() {
            return Err(Failure::invalid("ticket is NULL: pass where to store the ticket"));
        }
        // SAFETY: the caller's promise, passed on.
        let t = unsafe { m.by_offset(extents, n, |r| Ok(m.primary.persist(r)?)) }?;
        // SAFETY: checked above; the caller promises it is valid for a write.
        unsafe { put(ticket, "ticket", m.ticket(t)) }
    })
}

/// Durability point: returns when the ticket's group (and every group queued before it on its
/// lane) is in the mirror's log (`Primary::wait`). In `unreplicated` mode it returns at once.
/// Any thread may wait on any ticket of the same handle.
///
/// Errors: `MOJIM_EINVAL` (NULL `h`, a ticket this handle did not issue), `MOJIM_ELOST` (the
/// session ended before the group was acknowledged: it is not durable on the mirror) and the
/// other link errors.
///
/// # Safety
/// `h` is NULL or a handle `mojim_open` returned that is not closed.
#[no_mangle]
pub unsafe extern "C" fn mojim_wait(h: *const Mojim, ticket: MojimTicket) -> c_int {
    call(|| {
        // SAFETY: the caller's promise, passed on.
        let m = unsafe { handle(h) }?;
        Ok(m.primary.wait(m.unticket(&ticket)?)?)
    })
}

/// Fills `*out` with a snapshot of the primary's state (`Primary::status`). Set `out->size =
/// sizeof(struct mojim_status)` first: at most that many bytes are filled, and `out->size`
/// becomes the number filled.
///
/// Errors: `MOJIM_EINVAL` (NULL, or `out->size` smaller than 16: not set).
///
/// # Safety
/// `h` is NULL or a handle `mojim_open` returned that is not closed; `out` is NULL or valid
/// for reads and writes of `out->size` bytes.
#[no_mangle]
pub unsafe extern "C" fn mojim_status(h: *const Mojim, out: *mut MojimStatus) -> c_int {
    call(|| {
        // SAFETY: the caller's promise, passed on.
        let m = unsafe { handle(h) }?;
        // SAFETY: the caller's promise about `out`, passed on.
        unsafe {
            status::copy_sized(out, "struct mojim_status", status::MIN_STATUS_SIZE, || {
                MojimStatus::of(&m.primary.status(), m.primary.mode())
            })
        }
    })
}

/// Fills `*out` with a snapshot of what the primary counted since it opened
/// (`Primary::metrics`): sync points by latency, groups and bytes sent, groups in flight, the
/// mirror's state and losses, a resynchronisation's progress. Set `out->size =
/// sizeof(struct mojim_metrics)` first: at most that many bytes are filled, and `out->size`
/// becomes the number filled. Sync points count themselves without a lock; this call reads
/// the rest as `mojim_status` does.
///
/// Errors: `MOJIM_EINVAL` (NULL, or `out->size` smaller than 8: not set).
///
/// # Safety
/// `h` is NULL or a handle `mojim_open` returned that is not closed; `out` is NULL or valid
/// for reads and writes of `out->size` bytes.
#[no_mangle]
pub unsafe extern "C" fn mojim_metrics(h: *const Mojim, out: *mut MojimMetrics) -> c_int {
    call(|| {
        // SAFETY: the caller's promise, passed on.
        let m = unsafe { handle(h) }?;
        // SAFETY: the caller's promise about `out`, passed on.
        unsafe {
            status::copy_sized(out, "struct mojim_metrics", metrics::MIN_METRICS_SIZE, || {
                MojimMetrics::of(&m.primary.metrics(), m.primary.mode())
            })
        }
    })
}
