//! The interposer's state once initialised: the primary, the file table, each file's slot, size
//! and changed ranges, and the sync points.

use mojim::{Primary, Range};
use mojim_format::files::{FileTable, FILE_TABLE_PAGE};
use mojim_region::{WriteTracking, WrittenPages};
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

/// Most changed ranges kept per file between sync points; more are merged across the smallest
/// gaps (sending a few unchanged bytes rather than a group too many ranges long).
const MAX_DIRTY: usize = 256;

const PAGE: u64 = 4096;

/// One listed file.
pub struct Slot {
    /// The path as listed in `MOJIM_FILES` (the table's name).
    pub name: String,
    /// Its last component, compared first: most paths opened are not listed.
    pub base: Vec<u8>,
    /// The names of the folders on its path (as listed and canonical), compared first by the
    /// calls that rename or remove folders.
    pub folders: Vec<Vec<u8>>,
    /// The canonical path (the listed one's folder canonicalised, then its name), once the
    /// folder exists.
    pub canon: Mutex<Option<PathBuf>>,
    /// The absolute path as listed (against the working folder at start), for canonicalising
    /// later.
    pub abs: PathBuf,
    /// Where the slot starts in the data area.
    pub offset: u64,
    pub capacity: u64,
    /// The current size (changed under the lock, read without it).
    pub size: AtomicU64,
}

/// What the lock guards.
pub struct Shared {
    pub table: FileTable,
    /// Per slot: changed ranges since its last sync point, slot-relative, sorted, disjoint and
    /// not touching.
    pub dirty: Vec<Vec<(u64, u64)>>,
    /// Per slot: the size the table (and so the mirror) has.
    pub synced_size: Vec<u64>,
    /// Per slot: how the stores through its writable mappings are found.
    pub mapped: Vec<Mapped>,
}

/// How a sync point of a file finds what the program stored through its mappings, which no
/// interposed call sees.
pub enum Mapped {
    /// Never mapped writable: there is nothing to find.
    No,
    /// The pages written since the last sync point, found by the kernel (userfaultfd's
    /// asynchronous write protection over the whole slot, from the first writable mapping on).
    Pages(WrittenPages),
    /// Where the kernel cannot find them: every byte mapped writable so far, up to the file's
    /// size, is sent at every sync point.
    Whole { end: u64 },
}

pub struct State {
    pub primary: Primary,
    pub base: usize,
    pub region_size: u64,
    pub slots: Vec<Slot>,
    pub shared: Mutex<Shared>,
}

/// The last component of a path's bytes.
pub fn last_component(p: &[u8]) -> &[u8] {
    let p = p.strip_suffix(b"/").unwrap_or(p);
    match p.iter().rposition(|&b| b == b'/') {
        Some(i) => &p[i + 1..],
        None => p,
    }
}

/// `p` made absolute against `cwd` and lexically normalised (`.` dropped, `..` applied).
pub fn absolute(p: &Path, cwd: &Path) -> PathBuf {
    let joined = if p.is_absolute() { p.to_path_buf() } else { cwd.join(p) };
    let mut out = PathBuf::from("/");
    for c in joined.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(n) => out.push(n),
            _ => {}
        }
    }
    out
}

/// The canonical form of a file path whose file may not exist yet: its folder canonicalised,
/// then its name. `None` when the folder does not exist.
pub fn canonical(p: &Path) -> Option<PathBuf> {
    let dir = p.parent()?;
    let name = p.file_name()?;
    Some(std::fs::canonicalize(dir).ok()?.join(name))
}

/// [`canonical`] of a path's bytes, relative to `dir` or the working folder.
fn canonical_of(path: &[u8], dir: Option<&Path>) -> Option<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    let p = Path::new(std::ffi::OsStr::from_bytes(path));
    let cwd = match dir {
        Some(d) => d.to_path_buf(),
        None => std::env::current_dir().ok()?,
    };
    canonical(&absolute(p, &cwd))
}

/// The names of the folders on the paths `paths` of one file (its last component left out),
/// each once.
pub fn folder_names<'a>(paths: impl IntoIterator<Item = &'a Path>) -> Vec<Vec<u8>> {
    use std::os::unix::ffi::OsStrExt;
    let mut names: Vec<Vec<u8>> = Vec::new();
    for p in paths {
        for c in p.parent().into_iter().flat_map(Path::components) {
            if let Component::Normal(n) = c {
                let n = n.as_bytes().to_vec();
                if !names.contains(&n) {
                    names.push(n);
                }
            }
        }
    }
    names
}

impl State {
    pub fn lock(&self) -> MutexGuard<'_, Shared> {
        self.shared.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The slot whose listed file `path` (absolute, or relative to `dir` or the working
    /// folder) is, if any. Cheap when the last component matches no listed file.
    pub fn slot_of_path(&self, path: &[u8], dir: Option<&Path>) -> Option<usize> {
        let last = last_component(path);
        if !self.slots.iter().any(|s| s.base == last) {
            return None;
        }
        let c = canonical_of(path, dir)?;
        (0..self.slots.len()).find(|&i| self.canon(i).as_deref() == Some(c.as_path()))
    }

    /// What `path` (as for [`State::slot_of_path`]) is to the listed files: `(i, false)` listed
    /// file `i` itself, `(i, true)` a folder on its path. Cheap when the last component names
    /// no listed file and no folder on a listed path.
    pub fn listed_or_holding(&self, path: &[u8], dir: Option<&Path>) -> Option<(usize, bool)> {
        let last = last_component(path);
        if !self.slots.iter().any(|s| s.base == last || s.folders.iter().any(|f| f == last)) {
            return None;
        }
        let c = canonical_of(path, dir)?;
        (0..self.slots.len()).find_map(|i| {
            let canon = self.canon(i)?;
            (canon.starts_with(&c)).then_some((i, canon != c))
        })
    }

    /// The canonical path of listed file `i`, once its folder exists.
    fn canon(&self, i: usize) -> Option<PathBuf> {
        let s = &self.slots[i];
        let mut canon = s.canon.lock().unwrap_or_else(|p| p.into_inner());
        if canon.is_none() {
            *canon = canonical(&s.abs);
        }
        canon.clone()
    }

    /// The slot of a region address range `[addr, addr + len)`, if it lies in the region.
    pub fn in_region(&self, addr: usize, len: usize) -> bool {
        addr >= self.base && addr.checked_add(len).is_some_and(|e| e <= self.base + self.region_size as usize)
    }

    /// A pointer to slot-relative byte `at` of slot `i`.
    pub fn ptr(&self, i: usize, at: u64) -> *mut u8 {
        let s = &self.slots[i];
        debug_assert!(at <= s.capacity);
        (self.base + (s.offset + at) as usize) as *mut u8
    }

    /// Grows slot `i` to `end` bytes (at most its capacity), zeroing what lay past the old size
    /// where it is not zero already (and recording that as changed).
    pub fn grow(&self, sh: &mut Shared, i: usize, end: u64) {
        let s = &self.slots[i];
        let size = s.size.load(Ordering::Relaxed);
        if end <= size {
            return;
        }
        assert!(end <= s.capacity, "a slot grows within its capacity");
        let mut at = size;
        while at < end {
            let chunk_end = ((at / 4096) + 1) * 4096;
            let n = (chunk_end.min(end) - at) as usize;
            // SAFETY: `at..at + n` lies inside slot `i` (end <= capacity), which lies inside
            // the region mapping that lives as long as the state; the lock serialises writers.
            let bytes = unsafe { std::slice::from_raw_parts_mut(self.ptr(i, at), n) };
            if bytes.iter().any(|&b| b != 0) {
                bytes.fill(0);
                add_dirty(&mut sh.dirty[i], at, at + n as u64);
            }
            at += n as u64;
        }
        s.size.store(end, Ordering::Release);
    }

    /// Sets slot `i`'s size (a truncate, or a file opened with `O_TRUNC`).
    pub fn set_size(&self, sh: &mut Shared, i: usize, len: u64) {
        let size = self.slots[i].size.load(Ordering::Relaxed);
        if len > size {
            self.grow(sh, i, len);
        } else {
            self.slots[i].size.store(len, Ordering::Release);
            // Bytes past the new size are undefined; nothing to send for them.
            sh.dirty[i].retain_mut(|r| {
                r.1 = r.1.min(len);
                r.0 < r.1
            });
        }
    }

    /// Slot `i` is mapped writable up to slot-relative byte `end`: from now on its sync points
    /// find what is stored through the mapping. Called before the mapping is handed out.
    pub fn mapped_writable(&self, sh: &mut Shared, i: usize, end: u64) {
        let s = &self.slots[i];
        match &mut sh.mapped[i] {
            Mapped::Pages(_) => {}
            Mapped::Whole { end: e } => *e = (*e).max(end),
            m @ Mapped::No => {
                // SAFETY: the slot is whole pages (its offset and capacity are multiples of the
                // page, from a page-aligned data area) of the region's mapping, which stays
                // mapped for the process's life (the state is never dropped). Nothing else
                // registers it with userfaultfd; with userfaultfd's protection (the only method
                // asked for) a program's own mprotect of its view keeps the pages' marks.
                let tracked = unsafe {
                    WrittenPages::new(self.ptr(i, 0), s.capacity as usize, Some(WriteTracking::UffdAsync))
                };
                *m = match tracked {
                    Ok(t) => Mapped::Pages(t),
                    // A kernel before 6.7, or a mapping it does not support.
                    Err(_) => Mapped::Whole { end },
                };
            }
        }
    }

    /// Adds to slot `i`'s changed ranges what was stored through its mappings since its last
    /// sync point (up to its size: bytes past it are undefined).
    fn collect_mapped(&self, sh: &mut Shared, i: usize) {
        let s = &self.slots[i];
        let size = s.size.load(Ordering::Acquire);
        let (mapped, list) = (&mut sh.mapped[i], &mut sh.dirty[i]);
        if let Mapped::Pages(t) = mapped {
            let upto = size.next_multiple_of(PAGE).min(s.capacity);
            if t.collect_upto(upto, |at, len| add_dirty(list, at, (at + len).min(size))).is_err() {
                // The tracking broke (its descriptors closed under it, say): the pages it did
                // not report are found by sending everything instead, from now on.
                *mapped = Mapped::Whole { end: s.capacity };
            }
        }
        if let Mapped::Whole { end } = *mapped {
            add_dirty(list, 0, end.min(size));
        }
    }

    /// One sync point for `slots`: every range changed since their last one (written by the
    /// interposed calls or stored through a mapping), and the table when a size changed, as one
    /// group. On failure nothing is forgotten: the next sync point sends it again.
    pub fn sync(&self, sh: &mut Shared, slots: &[usize]) -> mojim::Result<()> {
        let mut ranges: Vec<Range> = Vec::new();
        let mut table_changed = false;
        for &i in slots {
            self.collect_mapped(sh, i);
            let size = self.slots[i].size.load(Ordering::Acquire);
            if size != sh.synced_size[i] {
                sh.table.entries[i].size = size;
                table_changed = true;
            }
            let off = self.slots[i].offset;
            ranges.extend(sh.dirty[i].iter().map(|&(a, b)| Range::new(off + a, b - a)));
        }
        if table_changed {
            let bytes = sh.table.encode();
            debug_assert!(bytes.len() as u64 <= FILE_TABLE_PAGE);
            // SAFETY: the table fits page 0 of the region, which the mapping covers; only sync
            // points write it, and they hold the lock.
            unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.base as *mut u8, bytes.len()) };
            ranges.push(Range::new(0, bytes.len() as u64));
        }
        self.primary.gmsync(&ranges)?;
        for &i in slots {
            sh.dirty[i].clear();
            sh.synced_size[i] = sh.table.entries[i].size;
        }
        Ok(())
    }
}

/// Records `[a, b)` as changed in a sorted, disjoint list, merging what it overlaps or touches;
/// past [`MAX_DIRTY`] ranges, the two closest are merged.
pub fn add_dirty(list: &mut Vec<(u64, u64)>, a: u64, b: u64) {
    if a >= b {
        return;
    }
    let i = list.partition_point(|r| r.1 < a);
    let mut j = i;
    let (mut lo, mut hi) = (a, b);
    while j < list.len() && list[j].0 <= b {
        lo = lo.min(list[j].0);
        hi = hi.max(list[j].1);
        j += 1;
    }
    list.splice(i..j, [(lo, hi)]);
    if list.len() > MAX_DIRTY {
        let k = (0..list.len() - 1).min_by_key(|&k| list[k + 1].0 - list[k].1).expect("two ranges or more");
        list[k].1 = list[k + 1].1;
        list.remove(k + 1);
    }
}

/// Which slots a region address range touches, with the part of it in each (slot-relative).
pub fn slots_touched(st: &State, addr: usize, len: usize) -> Vec<(usize, u64, u64)> {
    let a = (addr - st.base) as u64;
    let b = a + len as u64;
    st.slots
        .iter()
        .enumerate()
        .filter_map(|(i, s)| {
            let lo = a.max(s.offset);
            let hi = b.min(s.offset + s.capacity);
            (lo < hi).then(|| (i, lo - s.offset, hi - s.offset))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dirty_ranges_merge_and_stay_bounded() {
        let mut l = Vec::new();
        add_dirty(&mut l, 10, 20);
        add_dirty(&mut l, 30, 40);
        add_dirty(&mut l, 20, 30);
        assert_eq!(l, [(10, 40)]);
        add_dirty(&mut l, 0, 5);
        add_dirty(&mut l, 50, 60);
        add_dirty(&mut l, 3, 12);
        assert_eq!(l, [(0, 40), (50, 60)]);
        let mut l = Vec::new();
        for k in 0..(MAX_DIRTY as u64 + 10) {
            add_dirty(&mut l, k * 100, k * 100 + 10);
        }
        assert_eq!(l.len(), MAX_DIRTY);
        assert!(l.windows(2).all(|w| w[0].1 < w[1].0));
        assert_eq!((l[0].0, l[l.len() - 1].1), (0, (MAX_DIRTY as u64 + 9) * 100 + 10));
    }

    #[test]
    fn paths() {
        assert_eq!(last_component(b"/a/b/data.mdb"), b"data.mdb");
        assert_eq!(last_component(b"data.mdb"), b"data.mdb");
        assert_eq!(absolute(Path::new("x/../y/./z"), Path::new("/w")), PathBuf::from("/w/y/z"));
        assert_eq!(absolute(Path::new("/a/b"), Path::new("/w")), PathBuf::from("/a/b"));
        let (listed, canon) = (Path::new("/data/db/data.mdb"), Path::new("/mnt/ssd/db/data.mdb"));
        assert_eq!(folder_names([listed, canon]), [&b"data"[..], b"db", b"mnt", b"ssd"]);
    }
}
