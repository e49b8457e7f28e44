//! The buffer protocol, both ways, by hand.
//!
//! The module is built for the stable ABI of CPython 3.9 (abi3), whose limited API has no
//! buffer protocol before 3.11; pyo3 then offers neither `__getbuffer__` nor `PyBuffer`.
//! CPython has had both since 3.0 with the same `Py_buffer` layout, and `PyType_FromSpec`
//! takes the two buffer slots since 3.9, so:
//! - exporting: [`buffer_subclass`] makes a subclass of a pyclass (`Region`, the recoverable
//!   memory) that sets `bf_getbuffer` and `bf_releasebuffer` to [`get_buffer`] and
//!   [`release_buffer`], which ask the object's [`Exporter`] for its mapping;
//! - consuming: [`extent`] asks any object for its buffer to learn which bytes it spans.
//!
//! A buffer handed out holds a reference to the exporting object (`Py_buffer.obj`), so the
//! object, and the mapping it owns, lives until the last view is released.

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyTuple, PyType};
use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::atomic::{AtomicUsize, Ordering};

/// CPython's `Py_buffer` (Include/pybuffer.h, unchanged since 3.0).
#[repr(C)]
pub struct RawBuffer {
    buf: *mut c_void,
    obj: *mut ffi::PyObject,
    len: ffi::Py_ssize_t,
    itemsize: ffi::Py_ssize_t,
    readonly: c_int,
    ndim: c_int,
    format: *mut c_char,
    shape: *mut ffi::Py_ssize_t,
    strides: *mut ffi::Py_ssize_t,
    suboffsets: *mut ffi::Py_ssize_t,
    internal: *mut c_void,
}

// The full API's buffer functions (present in every CPython 3 the module loads into).
extern "C" {
    fn PyObject_GetBuffer(obj: *mut ffi::PyObject, view: *mut RawBuffer, flags: c_int) -> c_int;
    fn PyBuffer_Release(view: *mut RawBuffer);
    fn PyBuffer_FillInfo(
        view: *mut RawBuffer,
        obj: *mut ffi::PyObject,
        buf: *mut c_void,
        len: ffi::Py_ssize_t,
        readonly: c_int,
        flags: c_int,
    ) -> c_int;
}

/// `Py_bf_getbuffer` and `Py_bf_releasebuffer` (Include/typeslots.h).
const BF_GETBUFFER: c_int = 1;
const BF_RELEASEBUFFER: c_int = 2;
/// `Py_tp_doc`.
const TP_DOC: c_int = 56;
/// `PyBUF_STRIDES`: shape and strides, any layout.
const BUF_STRIDES: c_int = 0x0010 | 0x0008;

/// An object that lends its mapping through the buffer protocol.
pub trait Exporter {
    /// The mapping's first byte and length, counting one more view; an error (closed) lends
    /// nothing.
    fn export(&self) -> PyResult<(*mut u8, usize)>;
    /// Views alive.
    fn exports(&self) -> &Exports;
}

/// Views of a mapping alive.
#[derive(Default)]
pub struct Exports(AtomicUsize);

impl Exports {
    pub fn add(&self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }

    fn sub(&self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }

    pub fn count(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

/// Finds the exporter behind an object of one of the module's buffer subclasses.
pub type Finder = for<'a, 'py> fn(&'a Bound<'py, PyAny>) -> Option<&'a dyn Exporter>;

static FINDER: std::sync::OnceLock<Finder> = std::sync::OnceLock::new();

/// Sets how [`get_buffer`] finds an object's exporter (once, at module initialisation).
pub fn set_finder(f: Finder) {
    let _ = FINDER.set(f);
}

unsafe extern "C" fn get_buffer(exporter: *mut ffi::PyObject, view: *mut RawBuffer, flags: c_int) -> c_int {
    // SAFETY: CPython calls a buffer slot with the GIL held and `exporter` a live object.
    let py = unsafe { Python::assume_attached() };
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // SAFETY: `exporter` is a live object (above), borrowed for this call.
        let obj = unsafe { Bound::from_borrowed_ptr(py, exporter) };
        let found = FINDER.get().and_then(|f| f(&obj));
        let Some(e) = found else {
            return Err(pyo3::exceptions::PyBufferError::new_err("this object lends no mapping"));
        };
        let (ptr, len) = e.export()?;
        // SAFETY: `view` is the caller's Py_buffer to fill; `ptr..ptr + len` is the mapping,
        // which stays mapped while the view (which holds a reference to `exporter`) lives:
        // `close` refuses while views are counted, and the owner is dropped only after.
        let rc = unsafe { PyBuffer_FillInfo(view, exporter, ptr.cast(), len as ffi::Py_ssize_t, 0, flags) };
        if rc != 0 {
            e.exports().sub();
            return Err(PyErr::fetch(py));
        }
        Ok(())
    }));
    match r {
        Ok(Ok(())) => 0,
        Ok(Err(e)) => {
            // SAFETY: the protocol asks for obj = NULL when the request fails.
            unsafe { (*view).obj = std::ptr::null_mut() };
            e.restore(py);
            -1
        }
        Err(_) => {
            // SAFETY: as above.
            unsafe { (*view).obj = std::ptr::null_mut() };
            pyo3::exceptions::PySystemError::new_err("mojim: a panic while lending the mapping").restore(py);
            -1
        }
    }
}

unsafe extern "C" fn release_buffer(exporter: *mut ffi::PyObject, _view: *mut RawBuffer) {
    // SAFETY: CPython calls a buffer slot with the GIL held and `exporter` a live object.
    let py = unsafe { Python::assume_attached() };
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // SAFETY: as in `get_buffer`.
        let obj = unsafe { Bound::from_borrowed_ptr(py, exporter) };
        if let Some(e) = FINDER.get().and_then(|f| f(&obj)) {
            e.exports().sub();
        }
    }));
}

/// A subclass of `base` named `name` that lends its mapping through the buffer protocol,
/// writable; `doc` is its docstring (both static: CPython keeps the name's pointer).
pub fn buffer_subclass<'py>(
    base: &Bound<'py, PyType>,
    name: &'static CStr,
    doc: &'static CStr,
) -> PyResult<Bound<'py, PyType>> {
    let py = base.py();
    let mut slots = [
        ffi::PyType_Slot { slot: BF_GETBUFFER, pfunc: get_buffer as *mut c_void },
        ffi::PyType_Slot { slot: BF_RELEASEBUFFER, pfunc: release_buffer as *mut c_void },
        ffi::PyType_Slot { slot: TP_DOC, pfunc: doc.as_ptr() as *mut c_void },
        ffi::PyType_Slot { slot: 0, pfunc: std::ptr::null_mut() },
    ];
    let mut spec = ffi::PyType_Spec {
        name: name.as_ptr(),
        basicsize: 0, // the base's layout: the pyclass's object
        itemsize: 0,
        flags: (ffi::Py_TPFLAGS_DEFAULT | ffi::Py_TPFLAGS_BASETYPE) as _,
        slots: slots.as_mut_ptr(),
    };
    let bases = PyTuple::new(py, [base])?;
    // SAFETY: `spec` and `slots` are valid for the call (CPython copies the slots; the name and
    // the docstring are static); `bases` is a tuple holding one type.
    let t = unsafe { ffi::PyType_FromSpecWithBases(&mut spec, bases.as_ptr()) };
    if t.is_null() {
        return Err(PyErr::fetch(py));
    }
    // SAFETY: a new reference to a type object.
    let t = unsafe { Bound::from_owned_ptr(py, t) };
    Ok(t.cast_into::<PyType>()?)
}

/// The bytes a buffer-protocol object spans: its lowest address and the length up to its
/// highest byte (for a strided view, the bytes between its items too).
pub fn extent(obj: &Bound<'_, PyAny>) -> PyResult<(usize, usize)> {
    let py = obj.py();
    let mut v = std::mem::MaybeUninit::<RawBuffer>::zeroed();
    // SAFETY: `obj` is live and the GIL is held; `v` is a Py_buffer to fill.
    if unsafe { PyObject_GetBuffer(obj.as_ptr(), v.as_mut_ptr(), BUF_STRIDES) } != 0 {
        return Err(PyErr::fetch(py));
    }
    // SAFETY: filled by the successful call above.
    let b = unsafe { v.assume_init_mut() };
    let base = b.buf as usize;
    let r = if b.strides.is_null() || b.ndim == 0 {
        (base, b.len as usize)
    } else {
        let (mut lo, mut hi) = (0isize, 0isize);
        let mut empty = false;
        for i in 0..b.ndim as usize {
            // SAFETY: shape and strides have ndim entries when strides were asked for.
            let (n, s) = unsafe { (*b.shape.add(i), *b.strides.add(i)) };
            if n == 0 {
                empty = true;
            }
            let span = (n - 1).max(0) * s;
            if span < 0 {
                lo += span;
            } else {
                hi += span;
            }
        }
        if empty {
            (base, 0)
        } else {
            ((base as isize + lo) as usize, (hi - lo + b.itemsize) as usize)
        }
    };
    // SAFETY: releases the view obtained above, once.
    unsafe { PyBuffer_Release(b) };
    Ok(r)
}
