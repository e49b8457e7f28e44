//! `mojim._mojim.Memory`: recoverable memory (the Nephele API) as one mapping lent through the
//! buffer protocol; `mojim.rvm` (Python) lays NumPy arrays and named roots over it.

use crate::errors::{rvm_err, Busy, Closed};
use crate::exporter::{Exporter, Exports};
use mojim_rvm::{Backend, Rvm, RvmOptions};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

/// The base of `mojim._mojim.Memory` (which adds the buffer protocol, see exporter.rs).
#[pyclass(frozen, subclass, name = "_Memory", module = "mojim._mojim")]
pub struct Memory {
    open: Mutex<Option<Arc<Rvm>>>,
    /// Closed while views were alive: dropped (unmapped) with this object.
    kept: Mutex<Option<Arc<Rvm>>>,
    base: usize,
    capacity: u64,
    exports: Exports,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Memory {
    fn rvm(&self) -> PyResult<Arc<Rvm>> {
        lock(&self.open).clone().ok_or_else(|| Closed::new_err("recoverable memory is closed: open it again"))
    }

    fn shut(&self, py: Python<'_>, defer: bool) -> PyResult<()> {
        let n = self.exports.count();
        if n > 0 {
            if !defer {
                return Err(Busy::new_err(format!(
                    "{n} view(s) of recoverable memory are alive (its arrays): delete them before close(), \
                     or leave a `with` block, which unmaps once the last is gone"
                )));
            }
            let r = lock(&self.open).take();
            *lock(&self.kept) = r;
            return Ok(());
        }
        let Some(r) = lock(&self.open).take() else { return Ok(()) };
        py.detach(move || match Arc::try_unwrap(r) {
            Ok(r) => r.close(),
            Err(_) => Ok(()),
        })
        .map_err(rvm_err)
    }
}

#[pymethods]
impl Memory {
    #[new]
    #[pyo3(signature = (config = PathBuf::from("mojim.toml"), *, mirror = None, insecure = false))]
    fn new(py: Python<'_>, config: PathBuf, mirror: Option<String>, insecure: bool) -> PyResult<Self> {
        let rvm = py
            .detach(move || -> mojim_rvm::Result<Rvm> {
                let cfg = mojim::Config::load(&config)?;
                let mut opts = RvmOptions::from_config(&cfg, insecure)?;
                if let (Some(m), Backend::Mojim(p)) = (mirror, &mut opts.backend) {
                    p.mirror = m;
                }
                Rvm::open(&opts)
            })
            .map_err(rvm_err)?;
        Ok(Memory {
            base: rvm.base(),
            capacity: rvm.capacity(),
            open: Mutex::new(Some(Arc::new(rvm))),
            kept: Mutex::new(None),
            exports: Exports::default(),
        })
    }

    /// alloc(size) -> address: `size` zeroed bytes (16-byte aligned, page-aligned past 4 KiB),
    /// recoverable once a commit has run after it.
    fn alloc(&self, size: usize) -> PyResult<usize> {
        Ok(self.rvm()?.alloc(size).map_err(rvm_err)? as usize)
    }

    /// free(address): frees a block alloc returned, as of the next commit.
    fn free(&self, address: usize) -> PyResult<()> {
        self.rvm()?.free(address as *mut u8).map_err(rvm_err)
    }

    /// commit(): every page written since the last commit, by any thread, and the allocator's
    /// changes, as one atomic step, with the GIL released.
    fn commit(&self, py: Python<'_>) -> PyResult<()> {
        let r = self.rvm()?;
        py.detach(|| r.txn_commit()).map_err(rvm_err)
    }

    /// The root address found again after recovery (0: none); set it to a block's address,
    /// committed by the next commit.
    #[getter]
    fn get_root(&self) -> PyResult<usize> {
        Ok(self.rvm()?.usr_data() as usize)
    }

    #[setter]
    fn set_root(&self, address: usize) -> PyResult<()> {
        self.rvm()?.set_usr_data(address as *mut u8).map_err(rvm_err)
    }

    /// The address of recoverable memory's first byte.
    #[getter]
    fn base(&self) -> usize {
        self.base
    }

    /// Bytes of recoverable memory.
    #[getter]
    fn capacity(&self) -> u64 {
        self.capacity
    }

    /// status() -> dict: backend, tracking, use, commits, and what the last open recovered.
    fn status<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.rvm()?.status();
        let d = PyDict::new(py);
        d.set_item("backend", s.backend)?;
        d.set_item("store", s.store)?;
        d.set_item("tracking", s.tracking)?;
        d.set_item("fallback", s.fallback)?;
        d.set_item("base", s.base)?;
        d.set_item("capacity", s.capacity)?;
        d.set_item("used", s.used)?;
        d.set_item("blocks", s.blocks)?;
        d.set_item("seq", s.seq)?;
        d.set_item("commits", s.commits)?;
        d.set_item("last_commit_pages", s.last_commit_pages)?;
        d.set_item("last_commit_runs", s.last_commit_runs)?;
        d.set_item("last_commit_us", s.last_commit_time.as_micros() as u64)?;
        let rec = match s.recovery {
            None => None,
            Some(r) => {
                let rd = PyDict::new(py);
                rd.set_item("seq", r.seq)?;
                rd.set_item("blocks", r.blocks)?;
                rd.set_item("bytes", r.bytes)?;
                rd.set_item("ms", r.time.as_secs_f64() * 1e3)?;
                Some(rd)
            }
        };
        d.set_item("recovery", rec)?;
        Ok(d)
    }

    /// close(): drops writes since the last commit, unmaps, closes the backend. Refused
    /// (mojim.Busy) while arrays of it are alive.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        self.shut(py, false)
    }

    /// Whether close() ran.
    #[getter]
    fn closed(&self) -> bool {
        lock(&self.open).is_none()
    }

    /// Views alive (arrays made from it).
    #[getter]
    fn views(&self) -> usize {
        self.exports.count()
    }

    fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, PyTuple>) -> PyResult<bool> {
        self.shut(py, true)?;
        Ok(false)
    }
}

impl Exporter for Memory {
    fn export(&self) -> PyResult<(*mut u8, usize)> {
        if lock(&self.open).is_none() {
            return Err(Closed::new_err("recoverable memory is closed: no new views of it"));
        }
        self.exports.add();
        Ok((self.base as *mut u8, self.capacity as usize))
    }

    fn exports(&self) -> &Exports {
        &self.exports
    }
}
