//! A handle owned by Rust code, which calls the exported C functions exactly as a C program
//! does: the benchmark measures the C layer with it, against the Rust API on the same primary.

use crate::{mojim_close, mojim_msync, mojim_msync_at, Mojim};
use mojim::Primary;
use std::ffi::{c_int, CStr};

/// A live handle, closed (`mojim_close`) by [`Handle::close`] or when dropped.
pub struct Handle(Option<Box<Mojim>>);

impl Handle {
    /// The handle of `primary` (opened in Rust), as `mojim_open` would make it; `max_ranges`
    /// is its `[limits] max_ranges`.
    pub fn new(primary: Primary, max_ranges: usize) -> Handle {
        Handle(Some(Box::new(Mojim::new(primary, max_ranges))))
    }

    fn raw(&self) -> &Mojim {
        self.0.as_deref().expect("a handle is live until closed")
    }

    /// The handle's primary, for calls through the Rust API.
    pub fn primary(&self) -> &Primary {
        &self.raw().primary
    }

    /// `mojim_msync(h, ptr, len)`.
    pub fn msync(&self, ptr: *const u8, len: usize) -> c_int {
        // SAFETY: the handle is live (owned here, closed only by consuming it); `ptr` is
        // checked against the mapping by the function before anything is read.
        unsafe { mojim_msync(self.raw(), ptr.cast(), len) }
    }

    /// `mojim_msync_at(h, offset, len)`.
    pub fn msync_at(&self, offset: u64, len: u64) -> c_int {
        // SAFETY: the handle is live (owned here, closed only by consuming it).
        unsafe { mojim_msync_at(self.raw(), offset, len) }
    }

    /// `mojim_close(h)`: 0, or the code of the failure (the message is [`Handle::last_error`]).
    pub fn close(mut self) -> c_int {
        let Some(h) = self.0.take() else { return 0 };
        // SAFETY: a live handle, given up here: nothing else can call with it any more.
        unsafe { mojim_close(Box::into_raw(h)) }
    }

    /// `mojim_last_error()`, copied.
    pub fn last_error() -> String {
        // SAFETY: mojim_last_error returns this thread's NUL-terminated message, valid until
        // the next failing call on this thread; it is copied at once.
        unsafe { CStr::from_ptr(crate::mojim_last_error()) }.to_string_lossy().into_owned()
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        if let Some(h) = self.0.take() {
            // SAFETY: as in close.
            unsafe { mojim_close(Box::into_raw(h)) };
        }
    }
}
