//! `mojim._mojim`, the native half of the `mojim` Python package: `Region` (a primary's
//! region, lent through the buffer protocol, its sync points run with the GIL released),
//! `Memory` (recoverable memory, under `mojim.rvm`), `Ticket` and the `mojim.Error` hierarchy.

mod errors;
mod exporter;
mod region;
mod rvm;

use pyo3::prelude::*;

fn finder<'a>(obj: &'a Bound<'_, PyAny>) -> Option<&'a dyn exporter::Exporter> {
    if let Ok(r) = obj.cast::<region::Region>() {
        return Some(r.get());
    }
    if let Ok(m) = obj.cast::<rvm::Memory>() {
        return Some(m.get());
    }
    None
}

const REGION_DOC: &std::ffi::CStr = c"Region(config=\"mojim.toml\", *, mirror=None, insecure=False)
--

A Mojim region opened as primary: a mapping replicated to its mirror at sync points.

The region is a writable buffer: memoryview(region) and numpy.frombuffer(region, dtype,
count, offset) share its memory (no copy). Store into it, then make the bytes durable
with msync(offset, length) or msync(view), or several ranges as one atomic group with
gmsync([(offset, length) or view, ...]); persist(ranges) -> Ticket and wait(ticket) split
a group's ordering point from its durability point. Every sync point releases the GIL.

config: the mojim.toml to open ([region] path, [primary] mirror, mode, lanes, secret).
mirror: the mirror's address instead of [primary] mirror.
insecure: run without the cluster secret (never on a shared network).

A context manager: the with block's end closes it (views still alive keep the mapping
until they are gone; close() refuses while they live, with mojim.Busy). Errors are
mojim.Error subclasses (ConfigError, OutOfRange, MirrorLost, Fenced, ...) with the
library's message.";

const MEMORY_DOC: &std::ffi::CStr = c"Memory(config=\"mojim.toml\", *, mirror=None, insecure=False)
--

Recoverable memory (the Nephele API) on a Mojim region: alloc, free, commit, root. It is
a writable buffer spanning the whole of it, at the same address after every recovery;
mojim.rvm lays NumPy arrays and named roots over it.";

#[pymodule]
fn _mojim(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    exporter::set_finder(finder);
    errors::register(m)?;
    m.add_class::<region::Ticket>()?;
    m.add_class::<region::Region>()?;
    m.add_class::<rvm::Memory>()?;
    let region = exporter::buffer_subclass(&py.get_type::<region::Region>(), c"mojim.Region", REGION_DOC)?;
    m.add("Region", region)?;
    let memory = exporter::buffer_subclass(&py.get_type::<rvm::Memory>(), c"mojim.rvm.Memory", MEMORY_DOC)?;
    m.add("Memory", memory)?;
    Ok(())
}
