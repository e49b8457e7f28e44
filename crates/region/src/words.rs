//! Where the primary's side files keep their words: the metadata log ([`crate::MetaRing`]) and
//! the dirty map ([`crate::DirtyMap`]) are arrays of 8-byte words, stored to with atomics and
//! made persistent by range. A primary keeps them in mapped files beside its region; the
//! simulator's primaries keep them in plain memory, with the files' layout, so that it runs the
//! same code.

use crate::MappedFile;
use std::io;
use std::path::Path;
use std::sync::atomic::AtomicU64;

/// An array of 8-byte words, addressed by byte offset, that can be made persistent by range.
pub trait Words {
    /// The aligned 8-byte word at byte offset `at`.
    fn word(&self, at: usize) -> &AtomicU64;
    /// Makes the `len` bytes at `at` as durable as the words can be.
    fn persist(&self, at: usize, len: usize) -> io::Result<()>;
    /// Where the words live, for messages.
    fn place(&self) -> &Path;
}

impl Words for MappedFile {
    fn word(&self, at: usize) -> &AtomicU64 {
        self.counter(at)
    }

    fn persist(&self, at: usize, len: usize) -> io::Result<()> {
        MappedFile::persist(self, at, len)
    }

    fn place(&self) -> &Path {
        self.path()
    }
}

/// Memory lives exactly as long as its owner: there is nothing to persist it to.
impl Words for Box<[AtomicU64]> {
    fn word(&self, at: usize) -> &AtomicU64 {
        assert_eq!(at % 8, 0, "word at unaligned offset {at}");
        &self[at / 8]
    }

    fn persist(&self, _at: usize, _len: usize) -> io::Result<()> {
        Ok(())
    }

    fn place(&self) -> &Path {
        Path::new("(memory)")
    }
}

/// `len` bytes of zeroed words in memory.
pub(crate) fn zeroed(len: usize) -> Box<[AtomicU64]> {
    (0..len.div_ceil(8)).map(|_| AtomicU64::new(0)).collect()
}
