//! Mapping the region's pages in the background.
//!
//! Opening a region maps the file without its pages: for a large region already in memory,
//! making every page-table entry is most of what opening costs (about 70 ms per GiB on a small
//! VM), and nothing needs them all at once. A thread maps them while the session is set up and
//! a copy into the mirror begins, in order from the region's start, where a copy begins too;
//! whatever touches a page before it does (the application, a copy) maps that page itself, as
//! with any mapping. It stops when the primary closes.

use super::Inner;
use mojim_transport::Transport;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;

/// Bytes mapped per step, between looks at whether the primary is closing.
const STEP: u64 = 64 << 20;

/// Starts mapping `inner`'s region; `None` if no thread could be started (the pages are then
/// mapped as they are touched).
pub(crate) fn start<T: Transport>(inner: &Arc<Inner<T>>) -> Option<JoinHandle<()>>
where
    T::Conn: Send + Sync + 'static,
{
    let inner = inner.clone();
    let spawned = std::thread::Builder::new().name("mojim-populate".into()).spawn(move || {
        let size = inner.region.size();
        let mut at = 0;
        while at < size && !inner.closing.load(Ordering::SeqCst) {
            let n = STEP.min(size - at);
            if let Err(e) = inner.region.populate(at, n) {
                // Only an optimisation: the pages are mapped when touched instead.
                tracing::debug!(error = %e, at, "cannot map the region's pages ahead");
                return;
            }
            at += n;
        }
    });
    match spawned {
        Ok(h) => Some(h),
        Err(e) => {
            tracing::debug!(error = %e, "cannot start mapping the region's pages ahead");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::config::{Mode, RegionId};
    use crate::primary::{Primary, PrimaryOptions};
    use std::time::{Duration, Instant};

    /// Bytes of the mapping at `addr` that have page-table entries (its `Rss` in smaps).
    fn mapped_bytes(addr: usize) -> u64 {
        let smaps = std::fs::read_to_string("/proc/self/smaps").expect("read /proc/self/smaps");
        let mut lines = smaps.lines().skip_while(|l| !l.starts_with(&format!("{addr:x}-")));
        assert!(lines.next().is_some(), "no mapping at {addr:#x} in smaps");
        let rss = lines.find(|l| l.starts_with("Rss:")).expect("an Rss line");
        rss.split_whitespace().nth(1).and_then(|n| n.parse::<u64>().ok()).expect("Rss in kB") * 1024
    }

    /// Opening does not map the region's pages itself, but every page is mapped afterwards
    /// without the application touching one.
    #[test]
    fn the_regions_pages_are_mapped_after_opening_without_a_touch() {
        let dir = std::env::temp_dir().join(format!("mojim-populate-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("make the folder");
        let path = dir.join("region.mojim");
        let size = 8 << 20;
        crate::create_region(&path, RegionId { uuid: [7; 16], size }).expect("create the region");
        let opts = PrimaryOptions {
            region_path: path,
            mode: Mode::Unreplicated,
            mirror: String::new(),
            lanes: 1,
            async_window: 1,
            connect_timeout: Duration::from_secs(1),
            ..PrimaryOptions::default()
        };
        let p = Primary::open(&opts).expect("open the region");
        // The header page before the data is mapped too: the mapping starts a page earlier.
        let start = p.as_ptr() as usize - mojim_format::region::REGION_HEADER_SIZE;
        let deadline = Instant::now() + Duration::from_secs(60);
        while mapped_bytes(start) < size {
            assert!(
                Instant::now() < deadline,
                "the pages were not mapped: {} of {size}",
                mapped_bytes(start)
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        p.close().expect("close");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
