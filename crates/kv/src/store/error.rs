//! What can go wrong in the store, and whose fault it is.

use std::fmt;

/// An error of the store. The command that met it is rolled back (nothing it did stays), except
/// for [`StoreError::Mem`] and [`StoreError::Corrupt`], after which the store refuses further
/// work until it is opened again.
#[derive(Debug)]
pub enum StoreError {
    /// The caller's load: the heap has no block of the size wanted.
    Full {
        /// Bytes wanted.
        wanted: u64,
        /// Bytes of the heap.
        heap: u64,
    },
    /// The caller's load: one command (or transaction) changes more than one atomic group
    /// can carry; the message says which limit and the setting that raises it.
    TooLarge(String),
    /// The caller's: the reply would pass the client's output limit (`[kv] output_limit`,
    /// bytes); the command is undone and the client closed.
    OutputLimit(usize),
    /// The region holds something other than a store (another application's data).
    NotKv(String),
    /// The region is a store, but not one this build or this region size can open.
    Layout(String),
    /// The region's bytes break the layout: a damaged region, or a bug. The message names
    /// the offset and what was wrong.
    Corrupt(String),
    /// The memory underneath refused a read or a write (the region, or a test's simulated
    /// crash).
    Mem(String),
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::Full { wanted, heap } => write!(
                f,
                "no room for {wanted} more bytes in the region's {heap}-byte heap: delete keys, or \
                 move to a larger region"
            ),
            StoreError::TooLarge(m) => f.write_str(m),
            StoreError::OutputLimit(limit) => write!(
                f,
                "the reply, with the replies this client has not read yet, would pass [kv] output_limit \
                 ({limit} bytes): the command was undone and the connection is closed; ask for less at a \
                 time (fewer keys per command), or raise output_limit"
            ),
            StoreError::NotKv(m) => {
                write!(f, "{m}: the region holds other data; give mojim kv a region of its own (mojim init)")
            }
            StoreError::Layout(m) => f.write_str(m),
            StoreError::Corrupt(m) => write!(f, "the store in the region is damaged: {m}"),
            StoreError::Mem(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for StoreError {}

impl StoreError {
    /// Whether the store must not be used further (the region may be damaged or the memory
    /// failed), as opposed to a command that was refused and rolled back.
    pub fn is_fatal(&self) -> bool {
        matches!(self, StoreError::Corrupt(_) | StoreError::Mem(_))
    }
}

impl From<mojim::Error> for StoreError {
    fn from(e: mojim::Error) -> StoreError {
        StoreError::Mem(e.to_string())
    }
}
