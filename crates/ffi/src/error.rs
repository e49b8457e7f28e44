//! Error codes, the thread's last message, and the boundary every call goes through: no panic
//! and no Rust error crosses into C, each becomes a code and a message.

use mojim::Error;
use mojim_rvm::RvmError;
use std::cell::{Cell, RefCell};
use std::ffi::{c_char, c_int, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// What a call returns: `MOJIM_OK` (0), or a negative code saying what kind of failure it was
/// and whose fault. `mojim_last_error()` then gives the message, the text the `mojim` command
/// prints for the same error.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MojimError {
    /// Success.
    MOJIM_OK = 0,
    /// The caller passed something unusable: a NULL pointer, unknown flag bits, a handle that
    /// is not one (or was closed), a ticket this handle did not issue, a status struct whose
    /// `size` is not set. Nothing was done.
    MOJIM_EINVAL = -1,
    /// The configuration is wrong (or could not be read); the message names the setting and
    /// the fix.
    MOJIM_ECONFIG = -2,
    /// A range is outside the region (by pointer or by offset), or a group is too large or has
    /// too many ranges (or an RVM commit is larger than a lane's log). Nothing was sent.
    MOJIM_ERANGE = -3,
    /// A system call failed (open, map, connect, flush, ...).
    MOJIM_EIO = -4,
    /// A region or log file could not be mapped or is not valid.
    MOJIM_ESTORAGE = -5,
    /// The mirror is lost: groups not acknowledged are not durable on the mirror. The primary
    /// reconnects by itself; under `on_mirror_loss = "block"` sync points fail until it has.
    MOJIM_ELOST = -6,
    /// The mirror refused the connection and said why (wrong region, epoch, secret, ...).
    MOJIM_EREFUSED = -7,
    /// The handshake with the mirror failed.
    MOJIM_EHANDSHAKE = -8,
    /// The mirror broke the protocol.
    MOJIM_EPEER = -9,
    /// Another node was promoted (a newer epoch): this primary must not write. Restart the
    /// application on the current primary.
    MOJIM_EFENCED = -10,
    /// This copy's history and the mirror's cannot be reconciled automatically (`mojim
    /// resolve`).
    MOJIM_EDIVERGED = -11,
    /// The coordinator (etcd) could not be used, or says this node may not act as primary.
    MOJIM_ECOORD = -12,
    /// A bug in Mojim: it panicked. The message says where; please report it. The handle may
    /// be left in any state: close it.
    MOJIM_EBUG = -13,
    /// Recoverable memory is full: the region holds no free block that large, or the block
    /// table is full. Nothing was allocated; what is allocated is untouched. Free blocks, or
    /// use a larger region.
    MOJIM_ENOSPC = -14,
    /// A pointer that is not recoverable memory's where one is needed: `rvm_free` of a pointer
    /// `rvm_alloc` did not return (a stack or `malloc` pointer, one inside a block, a large
    /// block freed already), `rvm_set_usr_data` of a pointer outside recoverable memory. The
    /// message names the pointer; nothing was done.
    MOJIM_EFOREIGN = -15,
    /// The addresses recoverable memory lives at are taken in this process (by another
    /// mapping). Nothing was mapped: map nothing there before `rvm_cfg_create`, or choose
    /// another `[rvm] base` before the memory is first created.
    MOJIM_EADDRINUSE = -16,
    /// The backend holds state that cannot be recovered here: recoverable memory created in a
    /// region of another size, something that is not recoverable memory, or damage. The
    /// message names the difference; nothing was changed.
    MOJIM_ELAYOUT = -17,
    /// The call is not allowed in the API's present state: a second `rvm_cfg_create` on a
    /// store (region, Redis key) this process has open already. Nothing was done.
    MOJIM_ESTATE = -18,
    /// An RVM backend other than a Mojim region (a Redis server) could not be reached,
    /// answered an error, or broke its protocol.
    MOJIM_EBACKEND = -19,
    /// The region is open as primary already, in another process or by another open in this
    /// one: one primary per region. The message names the region and, where the system says,
    /// the holder's pid. Nothing was opened.
    MOJIM_ELOCKED = -20,
}

impl MojimError {
    /// The kind of a Mojim error.
    pub fn of(e: &Error) -> MojimError {
        match e {
            Error::Range(_) => MojimError::MOJIM_ERANGE,
            Error::Config(_) => MojimError::MOJIM_ECONFIG,
            Error::Refused { .. } => MojimError::MOJIM_EREFUSED,
            Error::Handshake { .. } => MojimError::MOJIM_EHANDSHAKE,
            Error::PeerMisbehaved { .. } => MojimError::MOJIM_EPEER,
            Error::MirrorLost { .. } => MojimError::MOJIM_ELOST,
            Error::Fenced { .. } => MojimError::MOJIM_EFENCED,
            Error::Diverged { .. } => MojimError::MOJIM_EDIVERGED,
            Error::Coordinator(_) => MojimError::MOJIM_ECOORD,
            Error::Io { .. } => MojimError::MOJIM_EIO,
            Error::Storage(_) => MojimError::MOJIM_ESTORAGE,
            Error::RegionLocked { .. } => MojimError::MOJIM_ELOCKED,
        }
    }

    /// The kind of a recoverable-memory error (its Mojim errors as [`MojimError::of`]).
    pub fn of_rvm(e: &RvmError) -> MojimError {
        match e {
            RvmError::Full { .. } => MojimError::MOJIM_ENOSPC,
            RvmError::ForeignPointer { .. } => MojimError::MOJIM_EFOREIGN,
            RvmError::State(_) => MojimError::MOJIM_ESTATE,
            RvmError::AddressTaken(_) => MojimError::MOJIM_EADDRINUSE,
            RvmError::Layout(_) => MojimError::MOJIM_ELAYOUT,
            RvmError::TooLarge(_) => MojimError::MOJIM_ERANGE,
            RvmError::Config(_) => MojimError::MOJIM_ECONFIG,
            RvmError::Mojim(e) => MojimError::of(e),
            RvmError::Redis(_) => MojimError::MOJIM_EBACKEND,
            RvmError::Io { .. } => MojimError::MOJIM_EIO,
        }
    }

    /// The code `code` is, if it is one.
    pub fn from_code(code: c_int) -> Option<MojimError> {
        MojimError::ALL.iter().copied().find(|c| *c as c_int == code)
    }

    /// The code's name, e.g. `MOJIM_ERANGE`, as a C string.
    fn name(self) -> &'static [u8] {
        match self {
            MojimError::MOJIM_OK => b"MOJIM_OK\0",
            MojimError::MOJIM_EINVAL => b"MOJIM_EINVAL\0",
            MojimError::MOJIM_ECONFIG => b"MOJIM_ECONFIG\0",
            MojimError::MOJIM_ERANGE => b"MOJIM_ERANGE\0",
            MojimError::MOJIM_EIO => b"MOJIM_EIO\0",
            MojimError::MOJIM_ESTORAGE => b"MOJIM_ESTORAGE\0",
            MojimError::MOJIM_ELOST => b"MOJIM_ELOST\0",
            MojimError::MOJIM_EREFUSED => b"MOJIM_EREFUSED\0",
            MojimError::MOJIM_EHANDSHAKE => b"MOJIM_EHANDSHAKE\0",
            MojimError::MOJIM_EPEER => b"MOJIM_EPEER\0",
            MojimError::MOJIM_EFENCED => b"MOJIM_EFENCED\0",
            MojimError::MOJIM_EDIVERGED => b"MOJIM_EDIVERGED\0",
            MojimError::MOJIM_ECOORD => b"MOJIM_ECOORD\0",
            MojimError::MOJIM_EBUG => b"MOJIM_EBUG\0",
            MojimError::MOJIM_ENOSPC => b"MOJIM_ENOSPC\0",
            MojimError::MOJIM_EFOREIGN => b"MOJIM_EFOREIGN\0",
            MojimError::MOJIM_EADDRINUSE => b"MOJIM_EADDRINUSE\0",
            MojimError::MOJIM_ELAYOUT => b"MOJIM_ELAYOUT\0",
            MojimError::MOJIM_ESTATE => b"MOJIM_ESTATE\0",
            MojimError::MOJIM_EBACKEND => b"MOJIM_EBACKEND\0",
            MojimError::MOJIM_ELOCKED => b"MOJIM_ELOCKED\0",
        }
    }

    const ALL: [MojimError; 21] = [
        MojimError::MOJIM_OK,
        MojimError::MOJIM_EINVAL,
        MojimError::MOJIM_ECONFIG,
        MojimError::MOJIM_ERANGE,
        MojimError::MOJIM_EIO,
        MojimError::MOJIM_ESTORAGE,
        MojimError::MOJIM_ELOST,
        MojimError::MOJIM_EREFUSED,
        MojimError::MOJIM_EHANDSHAKE,
        MojimError::MOJIM_EPEER,
        MojimError::MOJIM_EFENCED,
        MojimError::MOJIM_EDIVERGED,
        MojimError::MOJIM_ECOORD,
        MojimError::MOJIM_EBUG,
        MojimError::MOJIM_ENOSPC,
        MojimError::MOJIM_EFOREIGN,
        MojimError::MOJIM_EADDRINUSE,
        MojimError::MOJIM_ELAYOUT,
        MojimError::MOJIM_ESTATE,
        MojimError::MOJIM_EBACKEND,
        MojimError::MOJIM_ELOCKED,
    ];
}

/// Why a call failed: its code and its message.
pub(crate) struct Failure {
    pub code: MojimError,
    pub message: String,
}

impl Failure {
    /// The caller passed something unusable; `message` names it and the fix.
    pub fn invalid(message: impl Into<String>) -> Failure {
        Failure { code: MojimError::MOJIM_EINVAL, message: message.into() }
    }
}

impl From<Error> for Failure {
    fn from(e: Error) -> Failure {
        Failure { code: MojimError::of(&e), message: e.to_string() }
    }
}

impl From<RvmError> for Failure {
    fn from(e: RvmError) -> Failure {
        Failure { code: MojimError::of_rvm(&e), message: e.to_string() }
    }
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
    static LAST_CODE: Cell<c_int> = const { Cell::new(0) };
}

/// Records `code` and `message` as this thread's last error.
fn set_last_error(code: MojimError, message: &str) {
    // A C string ends at its first NUL: one inside a message (from a path, say) is shown.
    let text = CString::new(message.replace('\0', "\\0")).unwrap_or_default();
    LAST_ERROR.with(|l| *l.borrow_mut() = text);
    LAST_CODE.with(|c| c.set(code as c_int));
}

/// Runs the body of an exported function: its error, or a panic inside it, becomes a code and
/// this thread's last error message.
pub(crate) fn call(body: impl FnOnce() -> Result<(), Failure>) -> c_int {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => MojimError::MOJIM_OK as c_int,
        Ok(Err(f)) => {
            set_last_error(f.code, &f.message);
            f.code as c_int
        }
        Err(payload) => {
            let what = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".into());
            set_last_error(
                MojimError::MOJIM_EBUG,
                &format!("a bug in Mojim: it panicked: {what}; please report it"),
            );
            MojimError::MOJIM_EBUG as c_int
        }
    }
}

/// As [`call`], for a function that returns a value rather than a code: `fallback` when it
/// fails (the message is then this thread's last error).
pub(crate) fn call_value<T: Copy>(fallback: T, body: impl FnOnce() -> Result<T, Failure>) -> T {
    let mut value = fallback;
    call(|| {
        value = body()?;
        Ok(())
    });
    value
}

/// The message of the last call that failed on this thread: the text the `mojim` command
/// prints for the same error (the Display of `mojim::Error`), or what was wrong with an
/// argument. An empty string if no call has failed on this thread.
///
/// The pointer stays valid until the next call that fails on this thread; copy the text to
/// keep it. A call that succeeds leaves it as it was.
#[no_mangle]
pub extern "C" fn mojim_last_error() -> *const c_char {
    // The thread-local's string lives as long as the thread and is replaced only by a failing
    // call on this thread, which is what the contract above promises.
    LAST_ERROR.with(|l| l.borrow().as_ptr())
}

/// The code of the last call that failed on this thread (a negative `MOJIM_E*` value), or
/// `MOJIM_OK` if none has. For the calls that return a pointer rather than a code
/// (`rvm_cfg_create`, `rvm_alloc`, `mojim_base`, ...): after one returns NULL, this says what
/// kind of failure it was, as `mojim_last_error()` says it in words. A call that succeeds
/// leaves it as it was.
#[no_mangle]
pub extern "C" fn mojim_last_error_code() -> c_int {
    LAST_CODE.with(Cell::get)
}

/// The name of an error code, e.g. "MOJIM_ERANGE" for `MOJIM_ERANGE`, or "MOJIM_E?" for a
/// number that is not a code. The string is static.
#[no_mangle]
pub extern "C" fn mojim_strerror(code: c_int) -> *const c_char {
    let name: &'static [u8] = MojimError::from_code(code).map_or(b"MOJIM_E?\0", MojimError::name);
    name.as_ptr().cast()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    fn last() -> String {
        // SAFETY: mojim_last_error returns this thread's NUL-terminated string, alive until
        // the next failing call on this thread (none happens while it is read).
        unsafe { CStr::from_ptr(mojim_last_error()) }.to_string_lossy().into_owned()
    }

    #[test]
    fn a_panic_becomes_ebug_with_its_message() {
        let code = call(|| panic!("the sky fell at {}", 42));
        assert_eq!(code, MojimError::MOJIM_EBUG as c_int);
        assert!(last().contains("the sky fell at 42"), "{}", last());
    }

    #[test]
    fn an_error_sets_the_message_and_a_success_keeps_it() {
        let code = call(|| Err(Error::Config("[primary] mode = \"fast\" is not a mode".into()).into()));
        assert_eq!(code, MojimError::MOJIM_ECONFIG as c_int);
        assert_eq!(last(), "configuration: [primary] mode = \"fast\" is not a mode");
        assert_eq!(mojim_last_error_code(), MojimError::MOJIM_ECONFIG as c_int);
        assert_eq!(call(|| Ok(())), 0);
        assert_eq!(last(), "configuration: [primary] mode = \"fast\" is not a mode");
        assert_eq!(mojim_last_error_code(), MojimError::MOJIM_ECONFIG as c_int);
    }

    #[test]
    fn every_code_has_its_name() {
        for c in MojimError::ALL {
            // SAFETY: mojim_strerror returns a static NUL-terminated string.
            let name = unsafe { CStr::from_ptr(mojim_strerror(c as c_int)) }.to_str().unwrap();
            assert_eq!(name, format!("{c:?}"));
        }
        // SAFETY: as above.
        let unknown = unsafe { CStr::from_ptr(mojim_strerror(7)) };
        assert_eq!(unknown.to_str().unwrap(), "MOJIM_E?");
    }
}
