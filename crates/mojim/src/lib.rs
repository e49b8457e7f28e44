//! Mojim: replicated persistent memory in user space.
//!
//! An application maps a region and uses it with ordinary loads and stores. At sync points
//! ([`Primary::msync`], [`Primary::gmsync`]) exactly the named bytes go to a mirror, atomically,
//! in one round trip. The mirror keeps a crash-safe redo log per lane and checkpoints it into its
//! own copy: that role is the `mojim-node` crate (`mojim serve`).
//!
//! ```no_run
//! use mojim::{Primary, PrimaryOptions, Config};
//! let cfg = Config::load("mojim.toml".as_ref())?;
//! let region = Primary::open(&PrimaryOptions::from_config(&cfg, false)?)?;
//! region.write(0, b"hello")?;
//! region.msync(0, 5)?; // in the mirror's log when this returns (mode `sync`)
//! # Ok::<(), mojim::Error>(())
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod config;
pub mod coord;
pub mod error;
pub mod history;
pub mod nvmm;
pub mod primary;
mod region_lock;
pub mod size;

pub use config::{Config, Limits, Mode, RegionId, Secret};
pub use error::{Error, Result};
pub use mojim_core::Range;
pub use primary::{
    CopyHold, CopyKind, FailurePolicy, LeaseStatus, MirrorState, Primary, PrimaryMetrics, PrimaryOptions,
    PrimaryStatus, ResyncStatus, SyncHistogram, Ticket, SYNC_BUCKETS,
};
pub use region_lock::RegionLock;

/// Creates a region file for a primary.
pub fn create_region(path: &std::path::Path, id: RegionId) -> Result<()> {
    mojim_region::RegionFile::create(path, id.uuid, id.size)?;
    Ok(())
}

/// Removes a region file and the files a primary keeps beside it (its metadata log and dirty
/// map; see [`primary::PrimaryFiles`]). A file that is not there is skipped.
pub fn remove_region(path: &std::path::Path) -> Result<()> {
    let side = primary::PrimaryFiles::beside(path);
    for p in [path, side.metadata_log.as_path(), side.dirty_map.as_path()] {
        match std::fs::remove_file(p) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io(format!("remove {}", p.display()))(e)),
        }
    }
    Ok(())
}
