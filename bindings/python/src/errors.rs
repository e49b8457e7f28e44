//! The `mojim.Error` hierarchy: one Python exception class per kind of library error, each
//! carrying the library's message (which names the bad value and the fix).

use mojim::Error as LibError;
use mojim_rvm::RvmError;
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;

create_exception!(mojim, Error, PyException, "Every error of mojim. Its message is the library's: what was asked, what stands in the way, and what to do.");
create_exception!(
    mojim,
    ConfigError,
    Error,
    "The configuration is wrong (or could not be read): the message names the setting and the fix."
);
create_exception!(mojim, OutOfRange, Error, "A range or view that is not inside the region, or a group the mirror cannot take in one step: nothing was sent.");
create_exception!(mojim, MirrorLost, Error, "The replication session is gone: groups not acknowledged before this are not durable on the mirror. The primary reconnects by itself.");
create_exception!(mojim, Fenced, Error, "Another node was promoted at a newer epoch: this primary must not write; restart the application on the current primary.");
create_exception!(mojim, Refused, Error, "The mirror refused the connection and said why (another region, a wrong secret, its storage failed, ...).");
create_exception!(mojim, HandshakeFailed, Error, "The handshake with the mirror failed.");
create_exception!(mojim, PeerMisbehaved, Error, "The mirror broke the protocol.");
create_exception!(
    mojim,
    Diverged,
    Error,
    "This copy's history and the mirror's cannot be reconciled automatically: `mojim resolve`."
);
create_exception!(
    mojim,
    CoordinatorError,
    Error,
    "The coordinator (etcd) could not be used, or says this node may not act."
);
create_exception!(mojim, IoError, Error, "A system call failed: the message names what was being done.");
create_exception!(mojim, StorageError, Error, "A region or log file could not be mapped or is not valid.");
create_exception!(
    mojim,
    RegionLocked,
    Error,
    "The region is open as primary already, in another process or by another open in this one: one primary per region. The message names the region and, where the system says, the holder's pid."
);
create_exception!(
    mojim,
    Closed,
    Error,
    "The region (or recoverable memory) was closed: no sync point, view or commit after close()."
);
create_exception!(mojim, Busy, Error, "close() was refused: views of the mapping (memoryviews, NumPy arrays) are alive. Delete them first, or leave a `with` block, which unmaps once the last view is gone.");
create_exception!(mojim, RvmFull, Error, "Recoverable memory is full (the region, or its block table).");
create_exception!(
    mojim,
    ForeignPointer,
    Error,
    "An address that is not a block of recoverable memory (or was freed already)."
);
create_exception!(
    mojim,
    AddressTaken,
    Error,
    "The address recoverable memory lives at is taken in this process."
);
create_exception!(mojim, LayoutError, Error, "The stored recoverable memory cannot be recovered here (wrong size, not recoverable memory, damaged), or a stored root does not describe an array.");
create_exception!(mojim, TooLarge, Error, "A commit larger than the backend takes in one atomic step.");
create_exception!(
    mojim,
    StateError,
    Error,
    "The API was used in the wrong order (e.g. recoverable memory opened twice in one process)."
);
create_exception!(mojim, RedisError, Error, "The Redis backend of recoverable memory failed.");

/// The Python exception for a library error.
pub fn mojim_err(e: LibError) -> PyErr {
    let m = e.to_string();
    match e {
        LibError::Range(_) => OutOfRange::new_err(m),
        LibError::Config(_) => ConfigError::new_err(m),
        LibError::Refused { .. } => Refused::new_err(m),
        LibError::Handshake { .. } => HandshakeFailed::new_err(m),
        LibError::PeerMisbehaved { .. } => PeerMisbehaved::new_err(m),
        LibError::MirrorLost { .. } => MirrorLost::new_err(m),
        LibError::Fenced { .. } => Fenced::new_err(m),
        LibError::Diverged { .. } => Diverged::new_err(m),
        LibError::Coordinator(_) => CoordinatorError::new_err(m),
        LibError::Io { .. } => IoError::new_err(m),
        LibError::Storage(_) => StorageError::new_err(m),
        LibError::RegionLocked { .. } => RegionLocked::new_err(m),
    }
}

/// The Python exception for a recoverable-memory error.
pub fn rvm_err(e: RvmError) -> PyErr {
    let m = e.to_string();
    match e {
        RvmError::Mojim(e) => mojim_err(e),
        RvmError::Full { .. } => RvmFull::new_err(m),
        RvmError::ForeignPointer { .. } => ForeignPointer::new_err(m),
        RvmError::AddressTaken(_) => AddressTaken::new_err(m),
        RvmError::Layout(_) => LayoutError::new_err(m),
        RvmError::TooLarge(_) => TooLarge::new_err(m),
        RvmError::State(_) => StateError::new_err(m),
        RvmError::Config(_) => ConfigError::new_err(m),
        RvmError::Redis(_) => RedisError::new_err(m),
        RvmError::Io { .. } => IoError::new_err(m),
    }
}

/// Adds the exception classes to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("Error", py.get_type::<Error>())?;
    macro_rules! add {
        ($($t:ident),*) => { $( m.add(stringify!($t), py.get_type::<$t>())?; )* };
    }
    add!(
        ConfigError,
        OutOfRange,
        MirrorLost,
        Fenced,
        Refused,
        HandshakeFailed,
        PeerMisbehaved,
        Diverged,
        CoordinatorError,
        IoError,
        StorageError,
        RegionLocked,
        Closed,
        Busy,
        RvmFull,
        ForeignPointer,
        AddressTaken,
        LayoutError,
        TooLarge,
        StateError,
        RedisError
    );
    Ok(())
}
