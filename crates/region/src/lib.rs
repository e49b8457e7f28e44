//! Mojim's memory layer: files mapped for loads and stores, and making their bytes persistent.
//!
//! This is the library's one crate with `unsafe` code beside the UCX bindings (`mojim-ucx`);
//! outside the library, the C ABI (`mojim-ffi`), the interposer (`mojim-preload`) and the
//! Python bindings' buffer exporter have their own, and every other crate forbids it (the
//! workspace's lint table, docs/DESIGN.md "Where unsafe lives"). The mapping
//! is memory shared with other threads (and, for region files, possibly other processes): safe
//! code reaches it only through bounds-checked copies, atomics and [`MapSlice`] views, never
//! through a Rust reference it could hold while someone else stores into those bytes (see the
//! memory model in `map.rs`). Every `unsafe` block says why it is sound.

mod arena;
mod cells;
mod dirty;
mod disk;
mod files;
mod flush;
mod map;
mod media;
mod meta_ring;
mod nvmm;
mod words;
mod written;

pub use arena::Arena;
pub use cells::{Cells, Plain};
pub use dirty::{DirtyMap, MIN_CHUNK_SIZE as DIRTY_MIN_CHUNK_SIZE};
pub use disk::DiskRegion;
pub use files::{LogFile, RegionFile};
pub use flush::Persistence;
pub use map::{MapError, MapSlice, MappedFile};
pub use media::{Bytes, DataMedia, LogMedia, Media};
pub use meta_ring::{MetaRing, MAX_CAPACITY as META_RING_MAX_CAPACITY};
pub use nvmm::{Nvmm, NvmmCounters, NvmmModel};
pub use words::Words;
pub use written::{Method as WriteTracking, WrittenPages};
