//! A copy's history, shared by both roles: generation ids, the kinds of copy that bring a copy
//! up to date, and the files a primary (or a node promoted to be one) keeps beside its region.

use crate::error::{Error, Result};
use mojim_region::{DirtyMap, MetaRing};
use std::path::PathBuf;

/// A random, non-zero generation id.
pub fn new_generation() -> u64 {
    mojim_transport::random::u64() | 1
}

/// How a mirror is brought up to date (the core's decision, shown and stored by name:
/// `log`, `bitmap`, `full`).
pub use mojim_core::primary::CopyKind;

/// The files a primary keeps beside its region file.
pub struct PrimaryFiles {
    /// The metadata log (`<region>.mlog`): the ranges of recent groups, for a log catch-up.
    pub metadata_log: PathBuf,
    /// The dirty bitmap (`<region>.dirty`): the chunks changed without the mirror.
    pub dirty_map: PathBuf,
}

impl PrimaryFiles {
    /// The files beside the region file at `region` (its path with `.mlog` and `.dirty`
    /// appended).
    pub fn beside(region: &std::path::Path) -> PrimaryFiles {
        let with = |suffix: &str| {
            let mut s = region.as_os_str().to_owned();
            s.push(suffix);
            PathBuf::from(s)
        };
        PrimaryFiles { metadata_log: with(".mlog"), dirty_map: with(".dirty") }
    }

    /// A promoted node's copy starts a new history from generation `base` at `applied`: the
    /// dirty bitmap records from there (so a peer still at `base` gets only what changed) and
    /// the metadata log answers for groups after `applied`.
    pub fn start_history(
        &self,
        uuid: [u8; 16],
        size: u64,
        dirty_chunk: u64,
        records: u64,
        base: u64,
        applied: u64,
    ) -> Result<()> {
        let dirty = DirtyMap::open_or_create(&self.dirty_map, uuid, size, dirty_chunk)?;
        dirty.begin(base, applied).map_err(Error::io("start the dirty bitmap"))?;
        let meta = MetaRing::open_or_create(&self.metadata_log, uuid, records)?;
        meta.restart(applied + 1).map_err(Error::io("restart the metadata log"))?;
        Ok(())
    }
}
