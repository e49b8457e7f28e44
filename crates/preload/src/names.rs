//! The calls that change a listed file's name: refused. A listed file lives in its slot of the
//! region, its placeholder on disk only stands for it, so a rename onto it (the atomic-replace
//! pattern: write a temporary file, rename it over) would leave the slot's old contents in
//! place, and an unlink would not remove them. Renaming the file away, renaming another file
//! onto it, renaming a folder on its path and removing it fail with `EBUSY` (in use, as a mount
//! point is) and a message naming the path; a program replaces a listed file's contents in
//! place (`O_TRUNC`, write, fsync), one sync point making the new contents whole on the mirror.
//!
//! Safety, for every function here: as for `hooks`; each passes its caller's arguments to the
//! C library's function of the same name and C signature.
#![allow(clippy::missing_safety_doc)]

use crate::hooks::{fail, path_at};
use crate::real::real;
use libc::{c_char, c_int, c_uint};
use std::ffi::CStr;

/// The listed file `path` (relative to `dirfd`) is, or holds on its path: its name, and
/// whether `path` is a folder of it.
unsafe fn listed(dirfd: c_int, path: *const c_char) -> Option<(String, bool)> {
    // SAFETY: the caller's path.
    let (st, bytes, dir, _b) = unsafe { path_at(dirfd, path) }?;
    let (slot, folder) = st.listed_or_holding(bytes, dir.as_deref())?;
    Some((st.slots[slot].name.clone(), folder))
}

/// A path as the caller gave it, for messages.
///
/// # Safety
///
/// `p` is null or NUL-terminated.
unsafe fn shown(p: *const c_char) -> String {
    if p.is_null() {
        return "(null)".into();
    }
    // SAFETY: as the caller promises.
    String::from_utf8_lossy(unsafe { CStr::from_ptr(p) }.to_bytes()).into_owned()
}

fn refuse(op: &str, what: &str, name: &str, folder: bool, how: &str) -> c_int {
    let why = if folder {
        format!("the folder holds the replicated file {name}")
    } else {
        format!("{name} is a replicated file, kept in the region")
    };
    fail(libc::EBUSY, &format!("{op}({what}): {why}: {how} is not supported (EBUSY)"))
}

/// `Some(-1)` (refused, said) when a rename from `old` to `new` would move a listed file or a
/// folder holding one, or replace a listed file; `None` to pass it on.
///
/// # Safety
///
/// The paths are null or NUL-terminated.
unsafe fn refuse_rename(
    op: &str,
    olddir: c_int,
    old: *const c_char,
    newdir: c_int,
    new: *const c_char,
) -> Option<c_int> {
    // SAFETY: the caller's paths.
    let (from, to) = unsafe { (listed(olddir, old), listed(newdir, new)) };
    if from.is_some() && from == to {
        // The same listed file under both names: the C library's rename does nothing.
        return None;
    }
    // SAFETY: the caller's paths.
    let what = unsafe { format!("{} -> {}", shown(old), shown(new)) };
    let how = "renaming it, or another file onto it (write a listed file in place: open with O_TRUNC, \
               write, fsync)";
    if let Some((name, folder)) = from.or(to) {
        return Some(refuse(op, &what, &name, folder, how));
    }
    None
}

#[no_mangle]
pub unsafe extern "C" fn rename(old: *const c_char, new: *const c_char) -> c_int {
    // SAFETY: the caller's paths.
    if let Some(r) = unsafe { refuse_rename("rename", libc::AT_FDCWD, old, libc::AT_FDCWD, new) } {
        return r;
    }
    // SAFETY: passed on.
    unsafe { real!(rename: unsafe extern "C" fn(*const c_char, *const c_char) -> c_int)(old, new) }
}

#[no_mangle]
pub unsafe extern "C" fn renameat(
    olddir: c_int,
    old: *const c_char,
    newdir: c_int,
    new: *const c_char,
) -> c_int {
    // SAFETY: the caller's paths.
    if let Some(r) = unsafe { refuse_rename("renameat", olddir, old, newdir, new) } {
        return r;
    }
    // SAFETY: passed on.
    unsafe {
        real!(renameat: unsafe extern "C" fn(c_int, *const c_char, c_int, *const c_char) -> c_int)(
            olddir, old, newdir, new,
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn renameat2(
    olddir: c_int,
    old: *const c_char,
    newdir: c_int,
    new: *const c_char,
    flags: c_uint,
) -> c_int {
    // SAFETY: the caller's paths.
    if let Some(r) = unsafe { refuse_rename("renameat2", olddir, old, newdir, new) } {
        return r;
    }
    // SAFETY: passed on.
    unsafe {
        real!(renameat2: unsafe extern "C" fn(c_int, *const c_char, c_int, *const c_char, c_uint) -> c_int)(
            olddir, old, newdir, new, flags,
        )
    }
}

/// `Some(-1)` (refused, said) when `path` is a listed file; a folder is left to the C library
/// (which does not unlink folders, and cannot remove one that holds a file).
///
/// # Safety
///
/// `path` is null or NUL-terminated.
unsafe fn refuse_unlink(op: &str, dirfd: c_int, path: *const c_char) -> Option<c_int> {
    // SAFETY: the caller's path.
    let (name, _) = unsafe { listed(dirfd, path) }.filter(|l| !l.1)?;
    // SAFETY: as above.
    let what = unsafe { shown(path) };
    Some(refuse(op, &what, &name, false, "removing it (truncate it to empty it)"))
}

#[no_mangle]
pub unsafe extern "C" fn unlink(path: *const c_char) -> c_int {
    // SAFETY: the caller's path.
    if let Some(r) = unsafe { refuse_unlink("unlink", libc::AT_FDCWD, path) } {
        return r;
    }
    // SAFETY: passed on.
    unsafe { real!(unlink: unsafe extern "C" fn(*const c_char) -> c_int)(path) }
}

#[no_mangle]
pub unsafe extern "C" fn unlinkat(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    if flags & libc::AT_REMOVEDIR == 0 {
        // SAFETY: the caller's path.
        if let Some(r) = unsafe { refuse_unlink("unlinkat", dirfd, path) } {
            return r;
        }
    }
    // SAFETY: passed on.
    unsafe { real!(unlinkat: unsafe extern "C" fn(c_int, *const c_char, c_int) -> c_int)(dirfd, path, flags) }
}

/// `remove` unlinks through the C library's own `unlink`.
#[no_mangle]
pub unsafe extern "C" fn remove(path: *const c_char) -> c_int {
    // SAFETY: the caller's path.
    if let Some(r) = unsafe { refuse_unlink("remove", libc::AT_FDCWD, path) } {
        return r;
    }
    // SAFETY: passed on.
    unsafe { real!(remove: unsafe extern "C" fn(*const c_char) -> c_int)(path) }
}
