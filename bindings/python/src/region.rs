//! `mojim.Region`: a region opened as primary, lent to Python through the buffer protocol,
//! with its sync points run with the GIL released.

use crate::errors::{mojim_err, Busy, Closed, OutOfRange};
use crate::exporter::{extent, Exporter, Exports};
use mojim::{Config, Primary, PrimaryOptions, Range};
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

static SERIALS: AtomicU64 = AtomicU64::new(1);

/// The base of `mojim.Region` (which adds the buffer protocol, see exporter.rs).
#[pyclass(frozen, subclass, name = "_Region", module = "mojim._mojim")]
pub struct Region {
    /// The open primary; `None` once closed. Sync points clone the `Arc` and release the GIL.
    open: Mutex<Option<Arc<Primary>>>,
    /// A primary closed while views were alive: dropped (drained, unmapped) with this object,
    /// which every view keeps alive.
    kept: Mutex<Option<Arc<Primary>>>,
    ptr: usize,
    size: u64,
    exports: Exports,
    /// Tells this region's tickets from another's.
    serial: u64,
}

/// A group queued by `Region.persist`: `Region.wait(ticket)` returns once it is durable.
#[pyclass(frozen, module = "mojim")]
pub struct Ticket {
    ticket: mojim::Ticket,
    region: u64,
}

#[pymethods]
impl Ticket {
    /// The group's global sequence number (0 when nothing was sent: an empty group, an
    /// unreplicated mode, or a primary running without its mirror).
    #[getter]
    fn seq(&self) -> u64 {
        self.ticket.seq()
    }

    fn __repr__(&self) -> String {
        format!("<mojim.Ticket seq={}>", self.ticket.seq())
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Region {
    fn primary(&self) -> PyResult<Arc<Primary>> {
        lock(&self.open)
            .clone()
            .ok_or_else(|| Closed::new_err("the region is closed: open a new mojim.Region"))
    }

    /// The region range of one item of a group: `(offset, length)` or a buffer-protocol object
    /// (a memoryview, a NumPy array) whose bytes lie inside the region.
    fn range(&self, p: &Primary, item: &Bound<'_, PyAny>) -> PyResult<Range> {
        if let Ok(t) = item.cast::<PyTuple>() {
            if t.len() != 2 {
                return Err(OutOfRange::new_err(format!(
                    "{t} is not a range: give (offset, length) or a view of the region"
                )));
            }
            return Ok(Range::new(offset(&t.get_item(0)?)?, offset(&t.get_item(1)?)?));
        }
        let (addr, len) = extent(item)?;
        p.range_of(addr as *const u8, len).map_err(mojim_err)
    }

    fn ranges(&self, p: &Primary, items: &Bound<'_, PyAny>) -> PyResult<Vec<Range>> {
        let mut out = Vec::new();
        for item in items.try_iter()? {
            out.push(self.range(p, &item?)?);
        }
        Ok(out)
    }

    /// Closes now, or, while views are alive and `defer`, stops taking sync points and views
    /// and leaves the unmapping to when the last view is gone.
    fn shut(&self, py: Python<'_>, defer: bool) -> PyResult<()> {
        let n = self.exports.count();
        if n > 0 {
            if !defer {
                return Err(Busy::new_err(format!(
                    "{n} view(s) of the region are alive (memoryviews or arrays made from it): delete them \
                     before close(), or leave a `with` block, which unmaps once the last view is gone"
                )));
            }
            let p = lock(&self.open).take();
            *lock(&self.kept) = p;
            return Ok(());
        }
        let Some(p) = lock(&self.open).take() else { return Ok(()) };
        let r = py.detach(move || match Arc::try_unwrap(p) {
            Ok(p) => p.close(),
            // A sync point of another thread holds it: the last one drops it, which drains.
            Err(_) => Ok(()),
        });
        r.map_err(mojim_err)
    }
}

/// A byte offset or length: an int from 0.
fn offset(v: &Bound<'_, PyAny>) -> PyResult<u64> {
    v.extract::<u64>()
        .map_err(|_| OutOfRange::new_err(format!("{v} is not a byte offset or length (an int from 0)")))
}

#[pymethods]
impl Region {
    #[new]
    #[pyo3(signature = (config = PathBuf::from("mojim.toml"), *, mirror = None, insecure = false))]
    fn new(py: Python<'_>, config: PathBuf, mirror: Option<String>, insecure: bool) -> PyResult<Self> {
        let p = py
            .detach(move || -> mojim::Result<Primary> {
                let cfg = Config::load(&config)?;
                let mut opts = PrimaryOptions::from_config(&cfg, insecure)?;
                if let Some(m) = mirror {
                    opts.mirror = m;
                }
                Primary::open(&opts)
            })
            .map_err(mojim_err)?;
        Ok(Region {
            ptr: p.as_ptr() as usize,
            size: p.size(),
            open: Mutex::new(Some(Arc::new(p))),
            kept: Mutex::new(None),
            exports: Exports::default(),
            serial: SERIALS.fetch_add(1, Ordering::Relaxed),
        })
    }

    /// msync(target, length=None): makes bytes durable on the mirror (for the mode), as one
    /// atomic group, with the GIL released. `target` is a byte offset (then `length` is
    /// needed) or a view of the region (a memoryview or NumPy array into it: the bytes it spans).
    #[pyo3(signature = (target, length = None))]
    fn msync(
        &self,
        py: Python<'_>,
        target: &Bound<'_, PyAny>,
        length: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let p = self.primary()?;
        let r = match length {
            Some(len) => Range::new(offset(target)?, offset(len)?),
            None if target.extract::<u64>().is_ok() => {
                return Err(pyo3::exceptions::PyTypeError::new_err(
                    "msync(offset, length): give the length too, or pass a view of the region instead",
                ))
            }
            None => self.range(&p, target)?,
        };
        py.detach(|| p.msync(r.offset, r.len)).map_err(mojim_err)
    }

    /// gmsync(ranges): makes every range durable as one atomic group (all or nothing on the
    /// mirror, whatever crashes), with the GIL released. Each item is `(offset, length)` or a
    /// view of the region.
    fn gmsync(&self, py: Python<'_>, ranges: &Bound<'_, PyAny>) -> PyResult<()> {
        let p = self.primary()?;
        let rs = self.ranges(&p, ranges)?;
        py.detach(|| p.gmsync(&rs)).map_err(mojim_err)
    }

    /// persist(ranges) -> Ticket: the ordering point. Queues the ranges as one group after
    /// every group this thread queued before and returns without waiting for the mirror.
    fn persist(&self, py: Python<'_>, ranges: &Bound<'_, PyAny>) -> PyResult<Ticket> {
        let p = self.primary()?;
        let rs = self.ranges(&p, ranges)?;
        let ticket = py.detach(|| p.persist(&rs)).map_err(mojim_err)?;
        Ok(Ticket { ticket, region: self.serial })
    }

    /// wait(ticket): the durability point. Returns once the ticket's group, and every group
    /// queued before it on its lane, is durable (in the mirror's log in the sync modes).
    fn wait(&self, py: Python<'_>, ticket: &Ticket) -> PyResult<()> {
        if ticket.region != self.serial {
            return Err(OutOfRange::new_err(
                "this ticket was issued by another mojim.Region: wait on the region that persisted it",
            ));
        }
        let p = self.primary()?;
        let t = ticket.ticket;
        py.detach(|| p.wait(t)).map_err(mojim_err)
    }

    /// _msync_timed(offset, length) -> ns: `msync(offset, length)` timed inside Rust (the
    /// GIL released, as msync does), for the benchmark that sets Python's cost per call
    /// against Rust's, call by call on the same primary (bench/msync_bench.py).
    fn _msync_timed(&self, py: Python<'_>, offset: u64, length: u64) -> PyResult<u64> {
        let p = self.primary()?;
        py.detach(|| {
            let t = std::time::Instant::now();
            p.msync(offset, length).map(|()| t.elapsed().as_nanos() as u64)
        })
        .map_err(mojim_err)
    }

    /// range_of(view) -> (offset, length): where a view of the region lies in it.
    fn range_of(&self, view: &Bound<'_, PyAny>) -> PyResult<(u64, u64)> {
        let p = self.primary()?;
        let r = self.range(&p, view)?;
        Ok((r.offset, r.len))
    }

    /// status() -> dict: the session, lanes, acknowledged sequence numbers, losses, a
    /// resynchronisation and the lease, as `mojim status` reports them.
    fn status<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let p = self.primary()?;
        let json = py
            .detach(|| serde_json::to_string(&p.status()))
            .map_err(|e| pyo3::exceptions::PyRuntimeError::new_err(format!("status: {e}")))?;
        py.import("json")?.call_method1("loads", (json,))
    }

    /// metrics() -> dict: what the primary counted since it opened, as `Primary::metrics`
    /// reports it: `mirror_state` (`online`, `lost`, `degraded`, `unreplicated`),
    /// `sync_seconds` (a histogram: `bounds_seconds`, per-bucket `counts` with one more entry
    /// for longer ones, `count`, `sum_seconds`), `sync_failures`, `groups_sent`, `bytes_sent`,
    /// `in_flight_groups`, `lanes`, `mirror_losses`, `vulnerable_seconds`, `dirty_bytes`,
    /// `resync`, `lease_renewals`, `lease_valid_seconds`.
    fn metrics<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let p = self.primary()?;
        let json = py
            .detach(|| serde_json::to_string(&p.metrics()))
            .map_err(|e| pyo3::exceptions::PyRuntimeError::new_err(format!("metrics: {e}")))?;
        py.import("json")?.call_method1("loads", (json,))
    }

    /// close(): waits until every group sent is acknowledged, ends the session and unmaps the
    /// region. Refused (mojim.Busy) while views of it are alive. Closing twice does nothing.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        self.shut(py, false)
    }

    /// Bytes in the region.
    #[getter]
    fn size(&self) -> u64 {
        self.size
    }

    /// The address of the region's byte 0 in this process.
    #[getter]
    fn address(&self) -> usize {
        self.ptr
    }

    /// The mode the region was opened in (`sync`, `async`, ...).
    #[getter]
    fn mode(&self) -> PyResult<&'static str> {
        Ok(self.primary()?.mode().name())
    }

    /// Whether close() ran (or a `with` block ended).
    #[getter]
    fn closed(&self) -> bool {
        lock(&self.open).is_none()
    }

    /// Views of the region alive (memoryviews, arrays).
    #[getter]
    fn views(&self) -> usize {
        self.exports.count()
    }

    fn __len__(&self) -> usize {
        self.size as usize
    }

    fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    /// Closes the region; views still alive keep it mapped (without sync points) until the
    /// last is gone.
    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, PyTuple>) -> PyResult<bool> {
        self.shut(py, true)?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        let state = if self.closed() { "closed" } else { "open" };
        format!("<mojim.Region {} bytes at {:#x}, {state}>", self.size, self.ptr)
    }
}

impl Exporter for Region {
    fn export(&self) -> PyResult<(*mut u8, usize)> {
        let open = lock(&self.open);
        if open.is_none() {
            return Err(Closed::new_err("the region is closed: no new views of it"));
        }
        self.exports.add();
        Ok((self.ptr as *mut u8, self.size as usize))
    }

    fn exports(&self) -> &Exports {
        &self.exports
    }
}
