//! The Mojim backend: recoverable memory's bytes are a region's, and a commit is one `gmsync`.
//!
//! Backend offset `o` is region offset `o`. A commit's pages go to the redo file (see
//! `redo.rs`), then into the region and to the mirror as one group (`gmsync_staged`: each part
//! is copied into the region just before it is sent, so that copying overlaps the mirror's
//! work): atomic there by Mojim's own guarantee, in one round trip while it fits the lanes'
//! logs. Runs beyond `[limits]
//! max_ranges` are joined across their smallest gaps first: the bytes in a gap are the last
//! commit's (the region holds nothing else), so sending them again changes nothing.
//!
//! Recovery reads the region: after a process crash on the same host, once the redo file has
//! been replayed; on a promoted mirror's host, its data area, which holds whole groups only.

use crate::error::{Result, RvmError};
use crate::redo::Redo;
use crate::rmem::Rmem;
use mojim::{Primary, PrimaryOptions, Range, RegionLock};
use mojim_core::encode::RangeError;
use mojim_region::{Arena, RegionFile};

/// A Mojim region as recoverable memory's store.
pub struct MojimRmem {
    /// Holds the region's lock (one primary per region, so one user of this recoverable memory
    /// and its redo file at a time), taken before the redo file was read.
    primary: Primary,
    redo: Redo,
    max_ranges: usize,
    /// The group of the commit at hand (reused: no allocation per commit).
    group: Vec<Range>,
}

impl MojimRmem {
    /// Opens the region as primary (connecting to its mirror if the mode replicates), after
    /// putting back into it a commit a crash interrupted, under the region's lock: another
    /// user of the region, in this process or another, is refused (`Error::RegionLocked`)
    /// before the redo file is touched.
    pub fn open(opts: &PrimaryOptions) -> Result<MojimRmem> {
        let lock = RegionLock::acquire(&opts.region_path)?;
        let mut redo = Redo::open(&opts.region_path)?;
        let replay = redo.pending()?;
        if replay.is_none() {
            // Whatever bytes an unfinished or an applied commit left in it go.
            redo.clear();
        }
        if let Some(runs) = &replay {
            let region = RegionFile::open(&opts.region_path).map_err(mojim::Error::from)?;
            for (off, bytes) in runs {
                if off.checked_add(bytes.len() as u64).is_none_or(|e| e > region.size()) {
                    return Err(RvmError::Layout(format!(
                        "the redo file beside {} holds bytes at {off}+{} past the region's {} bytes: \
                         it belongs to another region",
                        opts.region_path.display(),
                        bytes.len(),
                        region.size()
                    )));
                }
                region.write(*off, bytes);
            }
            tracing::info!(runs = runs.len(), "put back a commit the last process was copying");
        }
        let primary = Primary::open_locked(lock, opts)?;
        let mut me = MojimRmem { primary, redo, max_ranges: opts.limits.max_ranges, group: Vec::new() };
        if let Some(runs) = replay {
            let runs: Vec<(u64, u64)> = runs.iter().map(|(o, b)| (*o, b.len() as u64)).collect();
            bridge(&runs, me.max_ranges, &mut me.group);
            me.primary.gmsync(&me.group)?;
            me.redo.clear();
        }
        Ok(me)
    }

    /// The primary underneath, for its status.
    pub fn primary(&self) -> &Primary {
        &self.primary
    }
}

/// `runs` (sorted, disjoint) as at most `max` ranges: runs are joined across their smallest
/// gaps until few enough remain.
pub(crate) fn bridge(runs: &[(u64, u64)], max: usize, out: &mut Vec<Range>) {
    out.clear();
    if runs.len() <= max.max(1) {
        out.extend(runs.iter().map(|&(o, l)| Range::new(o, l)));
        return;
    }
    // Keep the `max - 1` largest gaps; join across every other.
    let gaps: Vec<u64> = runs.windows(2).map(|w| w[1].0 - (w[0].0 + w[0].1)).collect();
    let mut order: Vec<usize> = (0..gaps.len()).collect();
    order.sort_unstable_by(|&a, &b| gaps[b].cmp(&gaps[a]).then(a.cmp(&b)));
    let mut split = vec![false; gaps.len()];
    for &i in &order[..max.max(1) - 1] {
        split[i] = true;
    }
    let (mut start, mut end) = (runs[0].0, runs[0].0 + runs[0].1);
    for (i, &(o, l)) in runs.iter().enumerate().skip(1) {
        if split[i - 1] {
            out.push(Range::new(start, end - start));
            start = o;
        }
        end = o + l;
    }
    out.push(Range::new(start, end - start));
}

impl Rmem for MojimRmem {
    fn name(&self) -> &'static str {
        "mojim"
    }

    fn capacity(&self) -> u64 {
        self.primary.size()
    }

    fn read(&mut self, offset: u64, out: &mut [u8]) -> Result<()> {
        Ok(self.primary.read(offset, out)?)
    }

    fn allocate(&mut self, offset: u64, len: u64) -> Result<()> {
        if offset.checked_add(len).is_none_or(|e| e > self.primary.size()) {
            return Err(RvmError::Full {
                wanted: len,
                why: format!("the region holds {} bytes", self.primary.size()),
            });
        }
        Ok(())
    }

    fn free(&mut self, _offset: u64, _len: u64) {}

    fn check(&mut self, runs: &[(u64, u64)]) -> Result<()> {
        bridge(runs, self.max_ranges, &mut self.group);
        match self.primary.check_group(&self.group) {
            Ok(()) => Ok(()),
            Err(mojim::Error::Range(RangeError::GroupTooLarge { bytes, limit })) => {
                let pages: u64 = runs.iter().map(|r| r.1).sum::<u64>() / crate::layout::PAGE;
                Err(RvmError::TooLarge(format!(
                    "a commit of {pages} written pages needs {bytes} bytes of log space, but one lane's \
                     log takes at most {limit}: commit more often, or raise [mirror] log_capacity"
                )))
            }
            Err(e) => Err(e.into()),
        }
    }

    fn commit(&mut self, runs: &[(u64, u64)], memory: &Arena) -> Result<()> {
        bridge(runs, self.max_ranges, &mut self.group);
        self.redo.begin(runs)?;
        self.redo.write_runs(memory, runs);
        self.redo.seal();
        // The redo file holds the commit whole: now the region may hold part of it for a while.
        // Each part of the group goes into the region just before it is sent (the gaps bridged
        // between runs hold the last commit's bytes already).
        let primary = &self.primary;
        let mut next = 0;
        let mut put = |off: u64, len: u64| {
            let end = off + len;
            while next < runs.len() && runs[next].0 + runs[next].1 <= off {
                next += 1;
            }
            for &(o, l) in runs[next..].iter().take_while(|r| r.0 < end) {
                let (from, to) = (o.max(off), (o + l).min(end));
                primary
                    .write_from(from, memory.view(from as usize, (to - from) as usize))
                    .expect("runs are checked against the region before a commit");
            }
        };
        self.primary.gmsync_staged(&self.group, &mut put)?;
        self.redo.clear();
        Ok(())
    }

    fn close(self: Box<Self>) -> Result<()> {
        Ok(self.primary.close()?)
    }

    fn describe(&self) -> String {
        let s = self.primary.status();
        let link = match (&s.failed, s.degraded) {
            (Some(why), true) => format!("degraded, mirror lost: {why}"),
            (Some(why), false) => format!("mirror lost: {why}"),
            (None, _) if s.lanes == 0 => "not connected".to_string(),
            (None, _) => format!("{} lanes connected", s.lanes),
        };
        format!("mojim region, mode {}, mirror {} ({link})", s.mode, s.mirror)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ranges(v: &[Range]) -> Vec<(u64, u64)> {
        v.iter().map(|r| (r.offset, r.len)).collect()
    }

    #[test]
    fn bridging_joins_across_the_smallest_gaps_only() {
        let runs = [(0, 10), (12, 10), (100, 10), (111, 10), (1000, 10)];
        let mut out = Vec::new();
        bridge(&runs, 5, &mut out);
        assert_eq!(ranges(&out), runs.to_vec());
        bridge(&runs, 3, &mut out);
        assert_eq!(ranges(&out), vec![(0, 22), (100, 21), (1000, 10)]);
        bridge(&runs, 1, &mut out);
        assert_eq!(ranges(&out), vec![(0, 1010)]);
        // Equal gaps: exactly `max` ranges.
        let even = [(0, 1), (2, 1), (4, 1), (6, 1)];
        bridge(&even, 2, &mut out);
        assert_eq!(out.len(), 2);
        assert_eq!(out.iter().map(|r| r.len).sum::<u64>() + 1, 7);
    }
}
