//! Mojim's memory layer: files mapped for loads and stores, and making their bytes persistent.
//!
//! This is one of the two places in Mojim with `unsafe` code (the other is the C ABI). Every
//! other crate forbids it. The mapping is memory shared with other threads (and, for region
//! files, possibly other processes); all access from safe code goes through bounds-checked
//! methods here.

mod dirty;
mod disk;
mod files;
mod flush;
mod map;
mod meta_ring;

pub use dirty::DirtyMap;
pub use disk::DiskRegion;
pub use files::{LogFile, RegionFile};
pub use flush::{persist_cache_lines, Persistence};
pub use map::{MapError, MappedFile};
pub use meta_ring::MetaRing;
