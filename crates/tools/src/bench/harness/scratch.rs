//! Files and folders a benchmark makes for itself, removed when dropped.

use mojim::error::{Error, Result};
use std::path::PathBuf;

/// A file removed when this is dropped.
pub(crate) struct RemoveOnDrop(pub(crate) std::path::PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A folder removed when dropped (declare it before what lives in it).
pub(crate) struct Scratch(pub(crate) PathBuf);

impl Scratch {
    pub(crate) fn create(p: PathBuf) -> Result<Scratch> {
        std::fs::create_dir_all(&p).map_err(Error::io(format!("create {}", p.display())))?;
        Ok(Scratch(p))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
