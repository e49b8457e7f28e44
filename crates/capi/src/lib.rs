//! libmojim: Mojim's C API. The header is `include/mojim.h`, generated from this crate by
//! cbindgen.
//!
//! Every function returns an error code (`MOJIM_OK`, or a negative `MOJIM_E*`), and
//! `mojim_last_error()` gives the thread's last message. No panic crosses the boundary: each
//! body runs under a guard that turns one into `MOJIM_EBUG`. Every pointer into the mapping is
//! checked against it, by address arithmetic only: a pointer outside it is `MOJIM_ERANGE`, not
//! undefined behaviour. What C hands in by pointer (paths, arrays of ranges, out-parameters)
//! must be valid for the length given, as in any C API; NULL is checked.
//!
//! Threads: a handle may be used from many threads at once (sync points, fences, status),
//! as `mojim::Primary` is `Sync`; each thread keeps to a lane. `mojim_close` must not race any
//! other call on the handle.
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]
#![allow(non_camel_case_types)]

mod error;

pub use error::*;

use mojim::{Config, Mode, Primary, PrimaryOptions, Range, Ticket};
use std::ffi::{c_char, c_void, CStr};

/// An open region: the primary's side of a replicated region. Opaque to C.
pub struct Mojim {
    primary: Primary,
}

/// `mojim_open` flag: accept a configuration file that others can read (its secret is then
/// not secret), or one without a secret (no authentication). Never on a shared network.
pub const MOJIM_OPEN_INSECURE: u32 = 1;
const KNOWN_FLAGS: u32 = MOJIM_OPEN_INSECURE;

/// Bytes of the region by pointer: `[ptr, ptr + len)` must lie inside the mapping.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct mojim_range {
    pub ptr: *const c_void,
    pub len: usize,
}

/// Bytes of the region by offset: `[offset, offset + len)`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct mojim_extent {
    pub offset: u64,
    pub len: u64,
}

/// A group queued by `mojim_persist`, to wait for with `mojim_wait`. Plain data: copy it
/// freely, but only wait for tickets the same handle returned.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct mojim_ticket {
    pub session: u64,
    /// The group's sequence number; 0 when nothing was sent (nothing to wait for).
    pub seq: u64,
    pub lane: u32,
    pub reserved: u32,
}

/// Role of the handle's node: always the primary's.
pub const MOJIM_ROLE_PRIMARY: u32 = 1;
/// Modes (`[primary] mode`).
pub const MOJIM_MODE_UNREPLICATED: u32 = 0;
pub const MOJIM_MODE_ASYNC: u32 = 1;
pub const MOJIM_MODE_SYNC: u32 = 2;
pub const MOJIM_MODE_SYNC_FLUSH: u32 = 3;
pub const MOJIM_MODE_SYNC_DISK: u32 = 4;
/// Mirror states.
pub const MOJIM_MIRROR_CONNECTED: u32 = 0;
/// Connecting, or copying the region to the mirror.
pub const MOJIM_MIRROR_CONNECTING: u32 = 1;
/// Lost: sync points fail (`block`) until it is back and caught up.
pub const MOJIM_MIRROR_LOST: u32 = 2;
/// Lost, and the primary goes on alone, recording what changed (`degrade`).
pub const MOJIM_MIRROR_DEGRADED: u32 = 3;
/// No mirror: mode `unreplicated`.
pub const MOJIM_MIRROR_NONE: u32 = 4;

/// What `mojim_status` fills in. Set `size` to `sizeof(struct mojim_status)` first: fields
/// past it are left alone, so that a program built against an older header keeps working.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct mojim_status {
    /// Bytes of this struct the caller has (in), and bytes filled in (out).
    pub size: u32,
    /// `MOJIM_ROLE_PRIMARY`.
    pub role: u32,
    /// `MOJIM_MODE_*`.
    pub mode: u32,
    /// `MOJIM_MIRROR_*`.
    pub mirror: u32,
    /// Connected lanes (0 while not connected).
    pub lanes: u32,
    pub reserved: u32,
    /// Bytes in the region.
    pub region_size: u64,
    /// This primary's epoch.
    pub epoch: u64,
    /// The current session's id (0 while not connected).
    pub session: u64,
    /// The sequence number the next group will take (0 while not connected).
    pub next_seq: u64,
    /// The lowest of the lanes' highest acknowledged sequence numbers.
    pub acked_seq: u64,
    /// Times the mirror was lost since the region was opened.
    pub mirror_losses: u64,
    /// Bytes changed while the mirror was away, not yet sent to it (`degrade`).
    pub dirty_bytes: u64,
}

/// `*h` as a reference, or the error for a NULL handle.
///
/// # Safety
///
/// `h` is NULL or a handle from `mojim_open` not yet closed.
unsafe fn handle<'a>(h: *const Mojim) -> Result<&'a Mojim, i32> {
    // SAFETY: as promised by the caller; NULL gives None.
    unsafe { h.as_ref() }.ok_or_else(|| fail(MOJIM_EINVAL, "the handle is NULL: pass one from mojim_open"))
}

/// `n` elements at `p`, or the error for a NULL array of some elements.
///
/// # Safety
///
/// `p` is NULL or points to `n` valid, initialised `T`s that outlive the result.
unsafe fn array<'a, T>(p: *const T, n: usize, what: &str) -> Result<&'a [T], i32> {
    if n == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(fail(MOJIM_EINVAL, format!("{what} is NULL but its count is {n}")));
    }
    // SAFETY: non-NULL and, as promised by the caller, `n` valid elements.
    Ok(unsafe { std::slice::from_raw_parts(p, n) })
}

fn code(r: mojim::Result<()>) -> i32 {
    match r {
        Ok(()) => MOJIM_OK,
        Err(e) => fail_with(&e),
    }
}

/// Opens the region that the configuration file at `config_path` names, as its primary:
/// maps it and connects to the mirror (waiting for the connection in mode `sync` with
/// `on_mirror_loss = "block"`). `flags` is 0 or `MOJIM_OPEN_INSECURE`. On success `*out` is
/// the handle.
///
/// # Safety
///
/// `config_path` is NULL or a NUL-terminated string; `out` is NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn mojim_open(config_path: *const c_char, flags: u32, out: *mut *mut Mojim) -> i32 {
    error::guard(|| {
        if out.is_null() {
            return fail(MOJIM_EINVAL, "out is NULL: pass the address of a mojim pointer");
        }
        if config_path.is_null() {
            return fail(MOJIM_EINVAL, "config_path is NULL: pass the path of a mojim.toml");
        }
        if flags & !KNOWN_FLAGS != 0 {
            return fail(
                MOJIM_EINVAL,
                format!(
                    "unknown flags {:#x}: the known flags are MOJIM_OPEN_INSECURE (1)",
                    flags & !KNOWN_FLAGS
                ),
            );
        }
        // SAFETY: non-NULL and NUL-terminated, as promised by the caller.
        let path = unsafe { CStr::from_ptr(config_path) };
        let Ok(path) = path.to_str() else {
            return fail(MOJIM_EINVAL, format!("config_path {path:?} is not UTF-8"));
        };
        let opened = Config::load(path.as_ref())
            .and_then(|cfg| PrimaryOptions::from_config(&cfg, flags & MOJIM_OPEN_INSECURE != 0))
            .and_then(|o| Primary::open(&o));
        match opened {
            Ok(primary) => {
                let h = Box::into_raw(Box::new(Mojim { primary }));
                // SAFETY: `out` is non-NULL and valid for a write, as promised by the caller.
                unsafe { out.write(h) };
                MOJIM_OK
            }
            Err(e) => fail_with(&e),
        }
    })
}

/// Waits until every group sent is acknowledged, closes the session and unmaps the region.
/// The handle is gone afterwards, whatever the result. NULL is an error.
///
/// # Safety
///
/// `h` is NULL or an open handle, used by no other thread during or after the call.
#[no_mangle]
pub unsafe extern "C" fn mojim_close(h: *mut Mojim) -> i32 {
    error::guard(|| {
        if h.is_null() {
            return fail(MOJIM_EINVAL, "the handle is NULL: pass one from mojim_open");
        }
        // SAFETY: an open handle from `mojim_open` (a leaked Box), given up by the caller.
        let m = unsafe { Box::from_raw(h) };
        code(m.primary.close())
    })
}

/// Address of region byte 0, for loads and stores; NULL for a NULL handle.
///
/// # Safety
///
/// `h` is NULL or an open handle.
#[no_mangle]
pub unsafe extern "C" fn mojim_base(h: *const Mojim) -> *mut c_void {
    // SAFETY: as promised by the caller.
    match unsafe { h.as_ref() } {
        Some(m) => m.primary.as_ptr().cast(),
        None => std::ptr::null_mut(),
    }
}

/// Bytes in the region; 0 for a NULL handle.
///
/// # Safety
///
/// `h` is NULL or an open handle.
#[no_mangle]
pub unsafe extern "C" fn mojim_size(h: *const Mojim) -> u64 {
    // SAFETY: as promised by the caller.
    unsafe { h.as_ref() }.map_or(0, |m| m.primary.size())
}

/// Makes `[ptr, ptr + len)`, inside the mapping, durable for the mode: one atomic group.
///
/// # Safety
///
/// `h` is NULL or an open handle. `ptr` is only compared with the mapping, never followed
/// unless inside it.
#[no_mangle]
pub unsafe extern "C" fn mojim_msync(h: *const Mojim, ptr: *const c_void, len: usize) -> i32 {
    error::guard(|| {
        // SAFETY: as promised by the caller.
        let m = match unsafe { handle(h) } {
            Ok(m) => m,
            Err(c) => return c,
        };
        code(m.primary.msync_ptr(ptr.cast(), len))
    })
}

/// Makes `[offset, offset + len)` of the region durable for the mode: one atomic group.
///
/// # Safety
///
/// `h` is NULL or an open handle.
#[no_mangle]
pub unsafe extern "C" fn mojim_msync_at(h: *const Mojim, offset: u64, len: u64) -> i32 {
    error::guard(|| {
        // SAFETY: as promised by the caller.
        let m = match unsafe { handle(h) } {
            Ok(m) => m,
            Err(c) => return c,
        };
        code(m.primary.msync(offset, len))
    })
}

/// Ranges given in C as Mojim ranges, on the stack for the common small group.
fn with_ranges<T: Copy>(
    items: &[T],
    convert: impl Fn(T) -> Result<Range, i32>,
    f: impl FnOnce(&[Range]) -> i32,
) -> i32 {
    const ON_STACK: usize = 32;
    if items.len() <= ON_STACK {
        let mut buf = [Range::new(0, 0); ON_STACK];
        for (slot, &it) in buf.iter_mut().zip(items) {
            match convert(it) {
                Ok(r) => *slot = r,
                Err(c) => return c,
            }
        }
        f(&buf[..items.len()])
    } else {
        match items.iter().map(|&it| convert(it)).collect::<Result<Vec<Range>, i32>>() {
            Ok(v) => f(&v),
            Err(c) => c,
        }
    }
}

fn by_pointer(m: &Mojim) -> impl Fn(mojim_range) -> Result<Range, i32> + '_ {
    |r| m.primary.range_of(r.ptr.cast(), r.len).map_err(|e| fail_with(&e))
}

fn by_offset(e: mojim_extent) -> Result<Range, i32> {
    Ok(Range::new(e.offset, e.len))
}

/// Makes all `n` ranges (by pointer, each inside the mapping) durable for the mode as one
/// atomic group.
///
/// # Safety
///
/// `h` is NULL or an open handle; `ranges` is NULL (with `n` 0) or points to `n` ranges.
#[no_mangle]
pub unsafe extern "C" fn mojim_gmsync(h: *const Mojim, ranges: *const mojim_range, n: usize) -> i32 {
    error::guard(|| {
        // SAFETY: as promised by the caller.
        let (m, items) = match unsafe { handle(h).and_then(|m| Ok((m, array(ranges, n, "ranges")?))) } {
            Ok(x) => x,
            Err(c) => return c,
        };
        with_ranges(items, by_pointer(m), |r| code(m.primary.gmsync(r)))
    })
}

/// Makes all `n` extents (by offset) durable for the mode as one atomic group.
///
/// # Safety
///
/// `h` is NULL or an open handle; `extents` is NULL (with `n` 0) or points to `n` extents.
#[no_mangle]
pub unsafe extern "C" fn mojim_gmsync_at(h: *const Mojim, extents: *const mojim_extent, n: usize) -> i32 {
    error::guard(|| {
        // SAFETY: as promised by the caller.
        let (m, items) = match unsafe { handle(h).and_then(|m| Ok((m, array(extents, n, "extents")?))) } {
            Ok(x) => x,
            Err(c) => return c,
        };
        with_ranges(items, by_offset, |r| code(m.primary.gmsync(r)))
    })
}

/// The ordering point: queues the `n` extents as one group after every group this thread
/// queued before, without waiting, and fills `*ticket` (the fence of persistent-memory
/// transactions; `mojim_wait` is the durability point).
///
/// # Safety
///
/// `h` is NULL or an open handle; `extents` is NULL (with `n` 0) or points to `n` extents;
/// `ticket` is NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn mojim_persist(
    h: *const Mojim,
    extents: *const mojim_extent,
    n: usize,
    ticket: *mut mojim_ticket,
) -> i32 {
    error::guard(|| {
        if ticket.is_null() {
            return fail(MOJIM_EINVAL, "ticket is NULL: pass the address of a struct mojim_ticket");
        }
        // SAFETY: as promised by the caller.
        let (m, items) = match unsafe { handle(h).and_then(|m| Ok((m, array(extents, n, "extents")?))) } {
            Ok(x) => x,
            Err(c) => return c,
        };
        with_ranges(items, by_offset, |r| match m.primary.persist(r) {
            Ok(t) => {
                let (session, lane, seq) = t.to_parts();
                let t = mojim_ticket { session, seq, lane: lane.into(), reserved: 0 };
                // SAFETY: non-NULL and valid for a write, as promised by the caller.
                unsafe { ticket.write(t) };
                MOJIM_OK
            }
            Err(e) => fail_with(&e),
        })
    })
}

/// The durability point: returns when the ticket's group, and every group queued before it on
/// its lane, is durable for the mode.
///
/// # Safety
///
/// `h` is NULL or an open handle; `ticket` is NULL or points to a ticket.
#[no_mangle]
pub unsafe extern "C" fn mojim_wait(h: *const Mojim, ticket: *const mojim_ticket) -> i32 {
    error::guard(|| {
        // SAFETY: as promised by the caller.
        let m = match unsafe { handle(h) } {
            Ok(m) => m,
            Err(c) => return c,
        };
        // SAFETY: NULL or a valid ticket, as promised by the caller.
        let Some(t) = (unsafe { ticket.as_ref() }) else {
            return fail(MOJIM_EINVAL, "ticket is NULL: pass one mojim_persist filled in");
        };
        let Ok(lane) = u16::try_from(t.lane) else {
            return fail(MOJIM_ERANGE, format!("the ticket names lane {}, which no session has", t.lane));
        };
        code(m.primary.wait(Ticket::from_parts(t.session, lane, t.seq)))
    })
}

/// Fills the first `out->size` bytes of `*out` with the primary's state (role, mode, the
/// mirror's state, sequence numbers), and sets `out->size` to the bytes filled in.
///
/// # Safety
///
/// `h` is NULL or an open handle; `out` is NULL or points to `out->size` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn mojim_status(h: *const Mojim, out: *mut mojim_status) -> i32 {
    error::guard(|| {
        // SAFETY: as promised by the caller.
        let m = match unsafe { handle(h) } {
            Ok(m) => m,
            Err(c) => return c,
        };
        if out.is_null() {
            return fail(MOJIM_EINVAL, "out is NULL: pass a struct mojim_status with size set");
        }
        // SAFETY: non-NULL; its first field is readable, as promised by the caller.
        let have = unsafe { (*out).size } as usize;
        if have < 8 {
            return fail(
                MOJIM_EINVAL,
                format!("out->size is {have}: set it to sizeof(struct mojim_status) before the call"),
            );
        }
        let s = fill(&m.primary);
        let n = have.min(std::mem::size_of::<mojim_status>());
        let filled = mojim_status { size: n as u32, ..s };
        // SAFETY: `n` bytes from a valid status into `out`, which has at least `have >= n`
        // writable bytes, as promised by the caller; the two do not overlap.
        unsafe {
            std::ptr::copy_nonoverlapping((&filled as *const mojim_status).cast::<u8>(), out.cast(), n)
        };
        MOJIM_OK
    })
}

fn fill(p: &Primary) -> mojim_status {
    let st = p.status();
    let mode = match p.mode() {
        Mode::Unreplicated => MOJIM_MODE_UNREPLICATED,
        Mode::Async => MOJIM_MODE_ASYNC,
        Mode::Sync => MOJIM_MODE_SYNC,
        Mode::SyncFlush => MOJIM_MODE_SYNC_FLUSH,
        Mode::SyncDisk => MOJIM_MODE_SYNC_DISK,
    };
    let mirror = if mode == MOJIM_MODE_UNREPLICATED {
        MOJIM_MIRROR_NONE
    } else if st.degraded {
        MOJIM_MIRROR_DEGRADED
    } else if st.failed.is_some() {
        MOJIM_MIRROR_LOST
    } else if st.lanes == 0 || st.resync.as_ref().is_some_and(|r| !r.done && r.error.is_none()) {
        MOJIM_MIRROR_CONNECTING
    } else {
        MOJIM_MIRROR_CONNECTED
    };
    mojim_status {
        size: 0,
        role: MOJIM_ROLE_PRIMARY,
        mode,
        mirror,
        lanes: st.lanes as u32,
        reserved: 0,
        region_size: p.size(),
        epoch: st.epoch,
        session: st.session,
        next_seq: st.next_seq,
        acked_seq: st.acked_seq.iter().copied().min().unwrap_or(0),
        mirror_losses: st.mirror_losses,
        dirty_bytes: st.dirty_bytes,
    }
}
