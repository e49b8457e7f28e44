//! What can go wrong in recoverable memory, and whose fault it is.

use std::fmt;

/// An error of recoverable memory. Each says what was asked, what stands in the way, and
/// what to do; none leaves committed state changed.
#[derive(Debug)]
pub enum RvmError {
    /// The caller's fault: the memory is full (the region, or the block table).
    Full {
        /// Bytes asked for.
        wanted: u64,
        /// What ran out, and how to get more.
        why: String,
    },
    /// The caller's fault: a pointer `rvm_alloc` did not return (or returned and was freed).
    ForeignPointer {
        /// The pointer.
        addr: usize,
        /// The call it was given to: `rvm_free` or `rvm_set_usr_data`.
        call: &'static str,
    },
    /// The caller's fault (or the process's layout): the address recoverable memory lives at
    /// is taken in this process.
    AddressTaken(String),
    /// The stored state cannot be recovered here: a region of the wrong size, not recoverable
    /// memory, or damaged. The message names the difference.
    Layout(String),
    /// A commit larger than the backend takes in one atomic step.
    TooLarge(String),
    /// The caller used the API in the wrong order (e.g. a second `rvm_cfg_create`).
    State(String),
    /// The configuration is wrong; the message names the setting and the fix.
    Config(String),
    /// The Mojim backend (the region and its mirror) failed: see the inner error.
    Mojim(mojim::Error),
    /// The Redis backend failed: the server could not be reached, answered an error, or broke
    /// the protocol.
    Redis(String),
    /// A system call failed.
    Io {
        /// What was being done.
        op: String,
        /// The system's error.
        source: std::io::Error,
    },
}

impl RvmError {
    /// Wraps an I/O error, with `op` naming what was being done.
    pub fn io(op: impl Into<String>) -> impl FnOnce(std::io::Error) -> RvmError {
        move |source| RvmError::Io { op: op.into(), source }
    }
}

impl fmt::Display for RvmError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RvmError::Full { wanted, why } => write!(f, "cannot allocate {wanted} bytes: {why}"),
            RvmError::ForeignPointer { addr, call: "rvm_set_usr_data" } => write!(
                f,
                "rvm_set_usr_data: {addr:#x} is not in recoverable memory: the root is unchanged; pass \
                 null or a pointer rvm_alloc returned"
            ),
            RvmError::ForeignPointer { addr, call } => write!(
                f,
                "{call}: {addr:#x} is not a block rvm_alloc returned (or it was freed already): nothing \
                 was freed"
            ),
            RvmError::AddressTaken(m)
            | RvmError::Layout(m)
            | RvmError::TooLarge(m)
            | RvmError::State(m)
            | RvmError::Config(m)
            | RvmError::Redis(m) => f.write_str(m),
            RvmError::Mojim(e) => e.fmt(f),
            RvmError::Io { op, source } => write!(f, "{op}: {source}"),
        }
    }
}

impl std::error::Error for RvmError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RvmError::Mojim(e) => Some(e),
            RvmError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl From<mojim::Error> for RvmError {
    fn from(e: mojim::Error) -> Self {
        RvmError::Mojim(e)
    }
}

/// A result whose error is [`RvmError`].
pub type Result<T, E = RvmError> = std::result::Result<T, E>;
