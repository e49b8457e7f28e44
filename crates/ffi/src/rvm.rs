//! Recoverable memory from C: the report's Table 1 (`rvm_cfg_create`, `rvm_alloc`,
//! `rvm_txn_commit`, `rvm_get_usr_data`, ...) over `mojim_rvm::Rvm`, with the conventions of
//! the rest of the C API: a magic-checked handle, codes and `mojim_last_error`, no panic across.
//!
//! Every call may be made from any thread: each takes the memory's one lock (`rvm_cfg_destroy`
//! excepted: no other call may be in flight). A transaction covers the whole process: a commit
//! sends every page written since the last commit, by any thread.

use crate::error::{call, call_value, Failure, MojimError};
use crate::rvm_status::{self, Options, RvmCfgOptions, RvmCfgStatus};
use crate::status::copy_sized;
use mojim::Config;
use mojim_rvm::{Backend, Rvm, RvmError, RvmOptions};
use std::ffi::{c_char, c_int, c_void, CStr, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::ptr;
use std::sync::{Mutex, MutexGuard};

/// Marks a live handle: a pointer whose first word is not this is not one.
const MAGIC: u64 = u64::from_le_bytes(*b"mojim-r1");

/// Recoverable memory, open: what `rvm_cfg_create` returns (`rvm_cfg_t`). Opaque to C.
pub struct RvmCfg {
    magic: u64,
    rvm: Rvm,
    /// The store it lives in, as registered in [`OPEN`].
    store: String,
}

/// The stores recoverable memory is open on in this process, and their handles: a second
/// `rvm_cfg_create` of one is refused before it touches the store (a second primary session
/// would take the mirror from the first; a second Redis client would commit over the first's
/// master entry).
static OPEN: Mutex<Vec<(String, usize)>> = Mutex::new(Vec::new());

fn open_stores() -> MutexGuard<'static, Vec<(String, usize)>> {
    OPEN.lock().unwrap_or_else(|p| p.into_inner())
}

/// The store behind `opts`, named as the refusal of a second open names it: a region by its
/// canonical path (as given if it cannot be resolved: the open then fails and names it), a
/// Redis server by its address and key.
fn store_of(opts: &RvmOptions) -> String {
    match &opts.backend {
        Backend::Mojim(p) => {
            let path = std::fs::canonicalize(&p.region_path).unwrap_or_else(|_| p.region_path.clone());
            format!("region {}", path.display())
        }
        Backend::Redis(r) => format!("Redis server {} key {:?}", r.addr, r.key),
    }
}

/// The handle behind `cfg`.
///
/// # Safety
/// `cfg` is NULL or a handle `rvm_cfg_create` returned that is not destroyed.
unsafe fn handle<'a>(cfg: *const RvmCfg) -> Result<&'a RvmCfg, Failure> {
    if cfg.is_null() {
        return Err(Failure::invalid("the handle is NULL: pass the one rvm_cfg_create returned"));
    }
    // SAFETY: not NULL, and the caller promises it is a live handle. Only its magic word is
    // read before it is known to be one (so a pointer that is not a handle, to readable memory
    // at least as large, is caught without a reference to it being made).
    let magic = unsafe { (&raw const (*cfg).magic).read() };
    if magic != MAGIC {
        return Err(Failure::invalid(format!(
            "{cfg:p} is not a handle rvm_cfg_create returned (or it was destroyed): pass the one \
             rvm_cfg_create returned"
        )));
    }
    // SAFETY: a live handle, which no one changes while it is shared (every function but
    // destroy takes it shared, and destroy takes it only when no other call is in flight).
    Ok(unsafe { &*cfg })
}

/// A foreign-pointer error of `call` as C sees it: naming the call, the pointer, what it is
/// `not`, where recoverable memory is, that nothing was done (`nothing`) and the fix; other
/// errors as they are.
fn foreign(h: &RvmCfg, e: RvmError, call: &str, not: &str, nothing: &str, fix: &str) -> Failure {
    match e {
        RvmError::ForeignPointer { addr, .. } => Failure {
            code: MojimError::MOJIM_EFOREIGN,
            message: format!(
                "{call}: {addr:#x} is {not}; recoverable memory is {:#x}..{:#x}: {nothing}; {fix}",
                h.rvm.base(),
                h.rvm.base() as u64 + h.rvm.capacity()
            ),
        },
        e => e.into(),
    }
}

/// Connects to the backend the configuration file at `config_path` names (`[rvm]`; for the
/// "mojim" backend, its region, opened as primary, and its mirror) and recovers what it holds
/// (`Rvm::open`): the memory comes back at the addresses it was created at, with the last
/// commit's contents, so pointers stored in it stay valid; `rvm_get_usr_data` gives the root.
/// If the backend holds nothing yet, the memory is created empty at `[rvm] base`.
///
/// `opts`: NULL for the defaults, or an `rvm_options_t` whose `size` is set (its flags,
/// `RVM_INSECURE`, and a tracking method that overrides `[rvm] tracking`).
///
/// Returns the handle, or NULL with `mojim_last_error()` and `mojim_last_error_code()` set:
/// `MOJIM_EINVAL` (NULL `config_path`, bad options), `MOJIM_ESTATE` (recoverable memory on
/// this store is open in this process already), `MOJIM_ECONFIG`, `MOJIM_EADDRINUSE` (the
/// addresses are taken in this process), `MOJIM_ELAYOUT` (the stored memory cannot be
/// recovered here: created in a region of another size, or damaged; nothing is changed),
/// `MOJIM_EIO` (e.g. the tracking method asked for is not available), `MOJIM_EBACKEND` (the
/// Redis backend) and the errors of `mojim_open`.
///
/// # Safety
/// `config_path` is NULL or a NUL-terminated string; `opts` is NULL or valid for reads of
/// `opts->size` bytes.
#[no_mangle]
pub unsafe extern "C" fn rvm_cfg_create(
    config_path: *const c_char,
    opts: *const RvmCfgOptions,
) -> *mut RvmCfg {
    call_value(ptr::null_mut(), || {
        if config_path.is_null() {
            return Err(Failure::invalid(
                "config_path is NULL: pass the path of the configuration file (mojim.toml)",
            ));
        }
        // SAFETY: the caller's promise about `opts`, passed on.
        let o = unsafe { Options::read(opts) }?;
        // SAFETY: not NULL, and the caller promises a NUL-terminated string.
        let path = unsafe { CStr::from_ptr(config_path) };
        let cfg = Config::load(Path::new(OsStr::from_bytes(path.to_bytes())))?;
        let mut ro = RvmOptions::from_config(&cfg, o.insecure)?;
        if let Some(t) = o.tracking {
            ro.tracking = t;
        }
        let store = store_of(&ro);
        // Held while opening: of two threads creating on the same store at once, one is refused.
        let mut open = open_stores();
        if let Some((_, h)) = open.iter().find(|(s, _)| *s == store) {
            return Err(RvmError::State(format!(
                "recoverable memory on {store} is open in this process already (handle {h:#x}): use that \
                 handle, or rvm_cfg_destroy it first"
            ))
            .into());
        }
        let rvm = Rvm::open(&ro)?;
        let h = Box::into_raw(Box::new(RvmCfg { magic: MAGIC, rvm, store: store.clone() }));
        open.push((store, h as usize));
        Ok(h)
    })
}

/// Ends recoverable memory without committing (`Rvm::close`): writes since the last commit
/// are dropped (the next `rvm_cfg_create` finds the last commit), the memory is unmapped
/// (every pointer into it is invalid from here on), the backend is closed and the handle is
/// freed, even when this fails (the code and message say what failed). Commit first to keep
/// the last writes.
///
/// No other call on the handle may be in flight, or start, once this is called.
///
/// Errors: `MOJIM_EINVAL` (NULL, not a handle), and the backend's on closing.
///
/// # Safety
/// `cfg` is NULL or a handle `rvm_cfg_create` returned that is not destroyed.
#[no_mangle]
pub unsafe extern "C" fn rvm_cfg_destroy(cfg: *mut RvmCfg) -> c_int {
    call(|| {
        // SAFETY: the caller's promise, passed on.
        unsafe { handle(cfg) }?;
        // SAFETY: a live handle comes from Box::into_raw, and the caller gives it up now: no
        // other call is in flight and none follows.
        let mut h = unsafe { Box::from_raw(cfg) };
        h.magic = 0;
        let RvmCfg { rvm, store, .. } = *h;
        let closed = rvm.close();
        open_stores().retain(|(s, _)| *s != store);
        Ok(closed?)
    })
}

/// Allocates `size` bytes of recoverable memory (`rvm_alloc`), zeroed: 16-byte aligned,
/// page-aligned past 4 KiB (0 bytes gives the smallest block). Use it with ordinary loads and
/// stores; it is recoverable once a commit has run after it.
///
/// Returns NULL on failure, with `mojim_last_error_code()` `MOJIM_ENOSPC` (full: the message
/// names the size asked for and what ran out; nothing is allocated, and what is allocated is
/// untouched) or `MOJIM_EINVAL` (not a handle).
///
/// # Safety
/// `cfg` is NULL or a handle `rvm_cfg_create` returned that is not destroyed.
#[no_mangle]
pub unsafe extern "C" fn rvm_alloc(cfg: *mut RvmCfg, size: usize) -> *mut c_void {
    call_value(ptr::null_mut(), || {
        // SAFETY: the caller's promise, passed on.
        let h = unsafe { handle(cfg) }?;
        Ok(h.rvm.alloc(size)?.cast())
    })
}

/// Frees a block `rvm_alloc` returned (`rvm_free`), as of the next commit: a recovery before
/// it finds the block still allocated. `ptr` NULL does nothing, as for `free(3)`.
///
/// Errors: `MOJIM_EFOREIGN` (nothing is freed; the message names the pointer) for a pointer
/// `rvm_alloc` did not return (outside recoverable memory, or inside a block but not at its
/// start) or a block freed already; `MOJIM_EINVAL` (not a handle).
///
/// # Safety
/// `cfg` is NULL or a handle `rvm_cfg_create` returned that is not destroyed. `ptr` need not
/// be valid: it is looked up in the block table before anything is written.
#[no_mangle]
pub unsafe extern "C" fn rvm_free(cfg: *mut RvmCfg, ptr: *mut c_void) -> c_int {
    call(|| {
        // SAFETY: the caller's promise, passed on.
        let h = unsafe { handle(cfg) }?;
        if ptr.is_null() {
            return Ok(());
        }
        h.rvm.free(ptr.cast()).map_err(|e| {
            foreign(
                h,
                e,
                "rvm_free",
                "not a block rvm_alloc returned (a stack, malloc or freed pointer is not one)",
                "nothing was freed",
                "pass a pointer rvm_alloc returned",
            )
        })
    })
}

/// Marks the start of a transaction (`rvm_txn_start`). Transactions are implicit and cover the
/// whole process: `rvm_txn_commit` takes every page written since the previous commit, so
/// this only documents the program's intent. Errors: `MOJIM_EINVAL` (not a handle).
///
/// # Safety
/// `cfg` is NULL or a handle `rvm_cfg_create` returned that is not destroyed.
#[no_mangle]
pub unsafe extern "C" fn rvm_txn_start(cfg: *mut RvmCfg) -> c_int {
    call(|| {
        // SAFETY: the caller's promise, passed on.
        let h = unsafe { handle(cfg) }?;
        Ok(h.rvm.txn_start()?)
    })
}

/// Commits every page of recoverable memory written since the last commit, by any thread,
/// with the allocator's changes and the root pointer, as one atomic step (`rvm_txn_commit`):
/// a recovery finds all of it or none. For the "mojim" backend it is one `gmsync`: in the
/// mirror's log when this returns (mode sync). A store another thread makes while the commit
/// runs lands in it or in the next.
///
/// A failed commit is in doubt (a recovery may find it whole, never in part): its pages are
/// kept and sent again by the next commit, so once the cause is gone (the mirror is back) a
/// commit that succeeds makes everything durable. Errors: `MOJIM_ELOST` (the mirror is lost,
/// `on_mirror_loss = "block"`), `MOJIM_ERANGE` (more written pages than a lane's log takes:
/// commit more often, or raise `[mirror] log_capacity`), `MOJIM_EINVAL` (not a handle) and
/// the other link errors.
///
/// # Safety
/// `cfg` is NULL or a handle `rvm_cfg_create` returned that is not destroyed.
#[no_mangle]
pub unsafe extern "C" fn rvm_txn_commit(cfg: *mut RvmCfg) -> c_int {
    call(|| {
        // SAFETY: the caller's promise, passed on.
        let h = unsafe { handle(cfg) }?;
        Ok(h.rvm.txn_commit()?)
    })
}

/// Sets the root pointer that `rvm_get_usr_data` returns, after a recovery too
/// (`rvm_set_usr_data`): NULL, or an address inside recoverable memory (usually a block
/// `rvm_alloc` returned, holding the program's state). Committed by the next commit.
///
/// Errors: `MOJIM_EFOREIGN` (a pointer outside recoverable memory: nothing is set),
/// `MOJIM_EINVAL` (not a handle).
///
/// # Safety
/// `cfg` is NULL or a handle `rvm_cfg_create` returned that is not destroyed. `ptr` is only
/// compared, never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn rvm_set_usr_data(cfg: *mut RvmCfg, ptr: *mut c_void) -> c_int {
    call(|| {
        // SAFETY: the caller's promise, passed on.
        let h = unsafe { handle(cfg) }?;
        h.rvm.set_usr_data(ptr.cast()).map_err(|e| {
            foreign(
                h,
                e,
                "rvm_set_usr_data",
                "outside recoverable memory",
                "the root is unchanged",
                "pass a pointer into recoverable memory, or NULL",
            )
        })
    })
}

/// The root pointer (`rvm_get_usr_data`): what `rvm_set_usr_data` set, as last committed when
/// the memory was recovered; NULL until set. Also NULL if `cfg` is not a handle
/// (`mojim_last_error` says why): pass a live handle and NULL means "not set".
///
/// # Safety
/// `cfg` is NULL or a handle `rvm_cfg_create` returned that is not destroyed.
#[no_mangle]
pub unsafe extern "C" fn rvm_get_usr_data(cfg: *mut RvmCfg) -> *mut c_void {
    call_value(ptr::null_mut(), || {
        // SAFETY: the caller's promise, passed on.
        let h = unsafe { handle(cfg) }?;
        Ok(h.rvm.usr_data().cast())
    })
}

/// Fills `*out` with a snapshot of recoverable memory's state (`Rvm::status`): the tracking
/// method and whether it fell back (and why), commits, the last commit's pages, whether the
/// memory was recovered, the backend. Set `out->size = sizeof(rvm_status_t)` first: at most
/// that many bytes are filled, and `out->size` becomes the number filled.
///
/// Errors: `MOJIM_EINVAL` (NULL, not a handle, or `out->size` smaller than 16: not set).
///
/// # Safety
/// `cfg` is NULL or a handle `rvm_cfg_create` returned that is not destroyed; `out` is NULL
/// or valid for reads and writes of `out->size` bytes.
#[no_mangle]
pub unsafe extern "C" fn rvm_status(cfg: *mut RvmCfg, out: *mut RvmCfgStatus) -> c_int {
    call(|| {
        // SAFETY: the caller's promise, passed on.
        let h = unsafe { handle(cfg) }?;
        // SAFETY: the caller's promise about `out`, passed on.
        unsafe {
            copy_sized(out, "rvm_status_t", rvm_status::MIN_STATUS_SIZE, || RvmCfgStatus::of(&h.rvm.status()))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_handle_fits_the_forged_one_of_the_c_test() {
        // tests/c/rvm_bad_input.c (crates/cli) passes 1 KiB of zeros as a handle: its magic
        // word must lie inside.
        assert!(std::mem::offset_of!(RvmCfg, magic) + 8 <= 1024, "{}", size_of::<RvmCfg>());
    }
}
