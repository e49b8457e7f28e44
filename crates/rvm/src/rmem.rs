//! The remote-memory (RMEM) layer: where recoverable memory's bytes are kept, behind one trait.
//!
//! The RVM layer above knows only this trait (the report's §2.2): a flat store of `capacity`
//! bytes addressed by offset, whose state changes only by [`Rmem::commit`], atomically. The
//! program's memory is the store's image (byte `o` of the store is byte `o` of the
//! [`Arena`]), so a commit names runs of offsets and the backend takes their bytes from there. Two
//! implementations: [`crate::MojimRmem`] (a Mojim region and its mirror, the default) and
//! [`crate::RedisRmem`] (a Redis server: shadow pages and one master entry switched by
//! MULTI/EXEC). Connecting is each one's constructor, and recovery is reading what the last
//! commit left (the RVM layer reads the meta block at offset 0 first, then every block it
//! lists).

use crate::error::Result;
use mojim_region::Arena;

/// A store of recoverable memory's bytes that changes atomically, one commit at a time.
pub trait Rmem: Send {
    /// Its name in status and benchmark output: `mojim` or `redis`.
    fn name(&self) -> &'static str;

    /// Bytes it holds, from offset 0.
    fn capacity(&self) -> u64;

    /// Copies the last committed bytes at `offset` into `out`.
    fn read(&mut self, offset: u64, out: &mut [u8]) -> Result<()>;

    /// Tells the store that `[offset, offset + len)` (whole pages) now belongs to a block:
    /// its bytes are written by the next commit.
    fn allocate(&mut self, offset: u64, len: u64) -> Result<()>;

    /// Tells the store that `[offset, offset + len)` no longer belongs to a block, as of the
    /// next commit: a store that keeps pages apart may drop them then.
    fn free(&mut self, offset: u64, len: u64);

    /// Checks that a commit of `runs` (sorted, disjoint `(offset, len)` of whole pages) can be
    /// made in one atomic step, before anything of it is written: the error names the limit.
    fn check(&mut self, runs: &[(u64, u64)]) -> Result<()>;

    /// Writes the bytes of `runs` (as last checked), taken from `memory` at the same offsets,
    /// and makes them part of the stored state, all or none (the report's put to shadow pages
    /// and `atomic_commit`): after a crash at any point, a reader finds the previous commit or
    /// this one. An error leaves the commit in doubt (it may still land, whole); the caller
    /// commits the same runs again with its next.
    fn commit(&mut self, runs: &[(u64, u64)], memory: &Arena) -> Result<()>;

    /// Ends the connection. Staged writes not committed are dropped.
    fn close(self: Box<Self>) -> Result<()>;

    /// One line about the store for status output: where it is, and how it is doing.
    fn describe(&self) -> String;
}
