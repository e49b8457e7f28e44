//! Error codes, the thread's last error message, and the guard that keeps panics inside.

use mojim::Error;
use std::cell::RefCell;
use std::ffi::{c_char, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Success.
pub const MOJIM_OK: i32 = 0;
/// A bad argument: a NULL pointer, unknown flags, a path that is not UTF-8. The caller's fault.
pub const MOJIM_EINVAL: i32 = -1;
/// A range or pointer outside the mapping, a group too large, or a ticket not from this
/// handle. The caller's fault; nothing was sent.
pub const MOJIM_ERANGE: i32 = -2;
/// The configuration is wrong; the message names the setting and the fix.
pub const MOJIM_ECONFIG: i32 = -3;
/// The mirror refused this primary, failed the handshake, broke the protocol, or holds a
/// history that cannot be reconciled. The peer's fault, or the operator's to resolve.
pub const MOJIM_EPEER: i32 = -4;
/// The mirror is lost: groups not acknowledged before are not durable on it (`block`).
pub const MOJIM_ELOST: i32 = -5;
/// A newer primary exists: this one must not write.
pub const MOJIM_EFENCED: i32 = -6;
/// The coordinator (etcd) could not be used, or says this node may not act.
pub const MOJIM_ECOORD: i32 = -7;
/// A system call or the local storage failed.
pub const MOJIM_EIO: i32 = -8;
/// A bug in Mojim (a panic, caught at the boundary). The handle should be closed.
pub const MOJIM_EBUG: i32 = -99;

thread_local! {
    static LAST: RefCell<CString> = RefCell::new(CString::default());
}

/// Records `msg` as this thread's last error and returns `code`.
pub(crate) fn fail(code: i32, msg: impl Into<String>) -> i32 {
    let mut msg = msg.into();
    msg.retain(|c| c != '\0');
    let c = CString::new(msg).unwrap_or_default();
    LAST.with(|l| *l.borrow_mut() = c);
    code
}

/// The code of a Mojim error, with its message recorded: the text the `mojim` command prints.
pub(crate) fn fail_with(e: &Error) -> i32 {
    let code = match e {
        Error::Range(_) => MOJIM_ERANGE,
        Error::Config(_) => MOJIM_ECONFIG,
        Error::Refused { .. }
        | Error::Handshake { .. }
        | Error::PeerMisbehaved { .. }
        | Error::Diverged { .. } => MOJIM_EPEER,
        Error::MirrorLost { .. } => MOJIM_ELOST,
        Error::Fenced { .. } => MOJIM_EFENCED,
        Error::Coordinator(_) => MOJIM_ECOORD,
        Error::Io { .. } | Error::Storage(_) => MOJIM_EIO,
    };
    fail(code, e.to_string())
}

/// Runs `f`, turning a panic into [`MOJIM_EBUG`] with its message: no unwinding crosses into
/// C.
pub(crate) fn guard(f: impl FnOnce() -> i32) -> i32 {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(code) => code,
        Err(p) => {
            let what = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            fail(MOJIM_EBUG, format!("bug in mojim (please report it): {what}"))
        }
    }
}

/// The message of the last call that failed on this thread: the same text the `mojim` command
/// prints. The pointer stays valid until the next failing call on this thread; it is an empty
/// string when no call has failed.
#[no_mangle]
pub extern "C" fn mojim_last_error() -> *const c_char {
    LAST.with(|l| l.borrow().as_ptr())
}
