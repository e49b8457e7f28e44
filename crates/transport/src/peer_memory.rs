//! Memory of the peer's that this side writes into: one-sided record placement.
//!
//! A mirror offers a lane's log to its primary ([`crate::Conn::offer_memory`]); the primary
//! takes it ([`crate::Conn::take_memory`]) and places each record's body straight into it, then
//! rings the lane's doorbell (the record's header, sent on the connection). Over shared memory
//! the offered file is mapped into the primary; the mirror validates every record in place
//! before it acknowledges it (docs/DESIGN-transport.md).

use mojim_region::{MapSlice, MappedFile};
use std::io;

/// A mapping of memory the peer offered.
pub struct PeerMemory {
    map: MappedFile,
}

impl PeerMemory {
    /// Memory of at least `len` bytes in `map`, or an error naming both sizes.
    pub(crate) fn new(map: MappedFile, len: usize) -> io::Result<PeerMemory> {
        if map.len() < len {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("the peer offered {} bytes of memory where {len} were announced", map.len()),
            ));
        }
        Ok(PeerMemory { map })
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Copies `src` to `at`.
    pub fn copy_from(&self, at: usize, src: MapSlice<'_>) {
        self.map.write_from(at, src)
    }

    /// Writes `data` at `at`.
    pub fn write(&self, at: usize, data: &[u8]) {
        self.map.write(at, data)
    }

    /// The bytes at `at` (the peer may change them at any time: a view, never a slice).
    pub fn view(&self, at: usize, len: usize) -> MapSlice<'_> {
        self.map.view(at, len)
    }
}
