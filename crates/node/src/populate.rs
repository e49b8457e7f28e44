//! Mapping the logs' and the data area's pages in the background.
//!
//! The node opens and creates its files without mapping their pages: a brand-new 1 GiB data
//! area's zeroed pages took 0.7 s to 3.7 s to map at open, and a large one written before,
//! after a reboot, would be read whole from the disk before the node served. Recovery maps only
//! the pages it reads and writes. Once the node serves, this thread maps the rest, lane logs
//! first (a lane receives into its log as soon as a primary joins), then the data area, so that
//! the node soon runs as it did when it mapped everything at open; whatever touches a page before
//! it does (a lane, the checkpointer, a copy) maps that page itself, as with any mapping. It
//! changes no byte, takes no lock, and stops when the node stops.

use crate::Shared;
use std::io;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;

/// Bytes mapped per step, between looks at whether the node is stopping.
const STEP: u64 = 64 << 20;

/// Starts mapping the pages of `s`'s logs, then of its data area; `None` if no thread could be
/// started (the pages are then mapped as they are touched).
pub(crate) fn start(s: &Arc<Shared>) -> Option<JoinHandle<()>> {
    let s = s.clone();
    let spawned = std::thread::Builder::new().name("mojim-populate".into()).spawn(move || {
        if let Err((what, e)) = populate_all(&s) {
            // Only an optimisation: the pages are mapped when touched instead.
            tracing::debug!(error = %e, what, "cannot map the node's pages ahead");
        }
    });
    match spawned {
        Ok(h) => Some(h),
        Err(e) => {
            tracing::debug!(error = %e, "cannot start mapping the node's pages ahead");
            None
        }
    }
}

/// Maps every lane log that exists now (one made later is mapped when it is made), then the
/// data area; returns early once the node stops.
fn populate_all(s: &Shared) -> Result<(), (&'static str, io::Error)> {
    for lane in 0..s.lanes.count() as u16 {
        if let Some(log) = s.lanes.log(lane) {
            in_steps(s, log.capacity(), |at, n| log.populate(at, n)).map_err(|e| ("a lane's log", e))?;
        }
    }
    let area = s.data.area();
    in_steps(s, area.size(), |at, n| area.populate(at, n)).map_err(|e| ("the data area", e))
}

/// Runs `populate` over `[0, len)` in steps of [`STEP`] bytes until the node stops.
fn in_steps(s: &Shared, len: u64, populate: impl Fn(u64, u64) -> io::Result<()>) -> io::Result<()> {
    let mut at = 0;
    while at < len && !s.shutdown.load(Ordering::SeqCst) {
        let n = STEP.min(len - at);
        populate(at, n)?;
        at += n;
    }
    Ok(())
}
