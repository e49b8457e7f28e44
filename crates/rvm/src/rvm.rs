//! The RVM layer: recoverable memory allocated, committed and recovered (the report's Table 1).

use crate::error::{Result, RvmError};
use crate::layout::{
    self, at, class_of, class_size, Entry, Header, Kind, FREE_TAG, MAX_SMALL, META_LEN, PAGE, SLAB_LEN,
    TABLE_CAP,
};
use crate::options::{Backend, RvmOptions};
use crate::rmem::Rmem;
use mojim_region::{Arena, Cells, Plain};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Recoverable memory: allocate from it, store into it with ordinary stores, commit at points
/// of consistency, and find it again at the same addresses after a crash.
///
/// Every method may be called from any thread; they take one lock. A transaction covers the
/// whole process: [`Rvm::txn_commit`] sends every page written since the last commit, by any
/// thread. Stores made by other threads while a commit runs land in it or in the next one:
/// a program that wants a store in a given commit makes it before calling commit.
pub struct Rvm {
    state: Mutex<State>,
    /// The state's arena, shared for [`Rvm::cells`].
    arena: Arc<Arena>,
    base: usize,
    capacity: u64,
}

struct State {
    /// The program's memory: backend byte `o` is byte `o` here.
    arena: Arc<Arena>,
    store: Box<dyn Rmem>,
    /// Blocks in use: address to table entry.
    blocks: BTreeMap<u64, u32>,
    /// New or reused blocks, committed whole by the next commit: their stored bytes may be
    /// anything, whatever of them the program has written.
    fresh: Vec<(u64, u64)>,
    /// Runs of a commit that failed, sent again with the next.
    pending: Vec<(u64, u64)>,
    /// The commit at hand (reused).
    runs: Vec<(u64, u64)>,
    stats: Stats,
}

#[derive(Clone, Debug, Default)]
struct Stats {
    commits: u64,
    last_pages: u64,
    last_runs: usize,
    last_time: Duration,
    recovery: Option<Recovery>,
}

/// What the last open found and how long it took.
#[derive(Clone, Debug)]
pub struct Recovery {
    /// Commits the memory had seen.
    pub seq: u64,
    /// Blocks in use, read back.
    pub blocks: usize,
    /// Bytes read back, the meta block included.
    pub bytes: u64,
    /// From the start of [`Rvm::open`] to its return.
    pub time: Duration,
}

/// What [`Rvm::status`] reports.
#[derive(Clone, Debug)]
pub struct RvmStatus {
    /// The backend: `mojim` or `redis`.
    pub backend: &'static str,
    /// The backend's own line: where it is and how it is doing.
    pub store: String,
    /// How written pages are found: `uffd-async` or `mprotect`.
    pub tracking: &'static str,
    /// Why userfaultfd is not in use, when it was wanted.
    pub fallback: Option<String>,
    /// The address of recoverable memory's first byte (its meta block).
    pub base: usize,
    /// Bytes of recoverable memory, the meta block included.
    pub capacity: u64,
    /// Bytes given to blocks so far (the high-water mark past the meta block).
    pub used: u64,
    /// Blocks in use.
    pub blocks: usize,
    /// Commits made, over the memory's whole life.
    pub seq: u64,
    /// Commits made since this open.
    pub commits: u64,
    /// Pages the last commit sent.
    pub last_commit_pages: u64,
    /// Runs of contiguous pages the last commit sent.
    pub last_commit_runs: usize,
    /// How long the last commit took.
    pub last_commit_time: Duration,
    /// Set when the open found state and recovered it.
    pub recovery: Option<Recovery>,
}

fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Rvm {
    /// Connects to the backend and recovers what it holds (the report's `rvm_cfg_create`): the
    /// memory comes back at the addresses it was created at, with the last commit's contents,
    /// or is created empty at `opts.base` if the backend holds none.
    pub fn open(opts: &RvmOptions) -> Result<Rvm> {
        let t0 = Instant::now();
        let store: Box<dyn Rmem> = match &opts.backend {
            Backend::Mojim(p) => Box::new(crate::MojimRmem::open(p)?),
            Backend::Redis(r) => Box::new(crate::RedisRmem::connect(r)?),
        };
        Rvm::open_on(store, opts, t0)
    }

    /// As [`Rvm::open`], on a backend already connected.
    pub fn open_on(mut store: Box<dyn Rmem>, opts: &RvmOptions, t0: Instant) -> Result<Rvm> {
        let capacity = store.capacity() / PAGE * PAGE;
        if capacity < META_LEN + PAGE {
            return Err(RvmError::Config(format!(
                "the {} backend holds {} bytes; recoverable memory needs at least {} (its {} byte meta \
                 block and a page)",
                store.name(),
                store.capacity(),
                META_LEN + PAGE,
                META_LEN
            )));
        }
        let mut meta = vec![0u8; META_LEN as usize];
        store.read(0, &mut meta)?;
        let found = Header::decode(&meta)?;
        let base = match &found {
            Some(h) => h.base as usize,
            None => opts.base,
        };
        if let Some(h) = &found {
            if h.capacity != capacity {
                return Err(RvmError::Layout(format!(
                    "this recoverable memory was created in {} bytes of the {} backend, which now holds {}: \
                     recover it with a store of {} bytes (e.g. [region] size), as it was created",
                    h.capacity,
                    store.name(),
                    capacity,
                    h.capacity
                )));
            }
        }
        let arena = Arc::new(map(base, capacity)?);
        let mut st = State {
            arena,
            store,
            blocks: BTreeMap::new(),
            fresh: Vec::new(),
            pending: Vec::new(),
            runs: Vec::new(),
            stats: Stats::default(),
        };
        match found {
            None => st.arena.write(0, &Header::new(capacity, base as u64).encode()),
            Some(h) => st.recover(&h, &meta, t0)?,
        }
        Arc::get_mut(&mut st.arena)
            .expect("not shared yet")
            .track(opts.tracking)
            .map_err(RvmError::io("track writes to recoverable memory"))?;
        let arena = Arc::clone(&st.arena);
        let rvm = Rvm { state: Mutex::new(st), arena, base, capacity };
        if lock(&rvm.state).stats.recovery.is_none() {
            // An empty table, persisted before anything is allocated (report §2.1.2).
            lock(&rvm.state).fresh.push((0, META_LEN));
            rvm.txn_commit()?;
        }
        Ok(rvm)
    }

    /// Allocates `size` bytes of recoverable memory (`rvm_alloc`), zeroed: 16-byte aligned,
    /// or page-aligned past 4 KiB. It is recoverable once a commit has run after it.
    pub fn alloc(&self, size: usize) -> Result<*mut u8> {
        let mut st = lock(&self.state);
        let size = (size as u64).max(1);
        let addr = if size <= MAX_SMALL { st.alloc_small(size)? } else { st.alloc_large(size)? };
        Ok(addr as *mut u8)
    }

    /// Frees memory [`Rvm::alloc`] returned (`rvm_free`), as of the next commit. Anything else is
    /// [`RvmError::ForeignPointer`], and nothing changes.
    pub fn free(&self, ptr: *mut u8) -> Result<()> {
        lock(&self.state).free(ptr as u64)
    }

    /// Marks the start of a transaction (`rvm_txn_start`). Transactions are implicit: a commit
    /// takes everything written since the previous one, so this only documents the program's
    /// intent.
    pub fn txn_start(&self) -> Result<()> {
        Ok(())
    }

    /// Commits every page written since the last commit, with the allocator's changes, as one
    /// atomic step (`rvm_txn_commit`). On error the pages are kept and sent again by the next
    /// commit; the commit is in doubt (a recovery may find it whole, never in part).
    pub fn txn_commit(&self) -> Result<()> {
        lock(&self.state).commit()
    }

    /// Sets the root pointer found again after recovery (`rvm_set_usr_data`): null or an
    /// address in recoverable memory. Committed by the next commit.
    pub fn set_usr_data(&self, ptr: *mut u8) -> Result<()> {
        let st = lock(&self.state);
        let a = ptr as usize;
        if a != 0 && !st.arena.contains(a, 1) {
            return Err(RvmError::ForeignPointer { addr: a, call: "rvm_set_usr_data" });
        }
        st.arena.store_u64(at::USR_DATA, a as u64);
        Ok(())
    }

    /// The root pointer (`rvm_get_usr_data`): null until set.
    pub fn usr_data(&self) -> *mut u8 {
        lock(&self.state).arena.load_u64(at::USR_DATA) as usize as *mut u8
    }

    /// The address of recoverable memory's first byte.
    pub fn base(&self) -> usize {
        self.base
    }

    /// Bytes of recoverable memory.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// How it is doing.
    pub fn status(&self) -> RvmStatus {
        let st = lock(&self.state);
        let h = st.header();
        RvmStatus {
            backend: st.store.name(),
            store: st.store.describe(),
            tracking: st.arena.method().map_or("none", |m| m.name()),
            fallback: st.arena.fallback().map(str::to_string),
            base: self.base,
            capacity: self.capacity,
            used: h.hwm - META_LEN,
            blocks: st.blocks.len(),
            seq: h.seq,
            commits: st.stats.commits,
            last_commit_pages: st.stats.last_pages,
            last_commit_runs: st.stats.last_runs,
            last_commit_time: st.stats.last_time,
            recovery: st.stats.recovery.clone(),
        }
    }

    /// Ends it (`rvm_cfg_destroy`): writes since the last commit are dropped, the memory is
    /// unmapped (every pointer into it is invalid from here on), and the backend is closed.
    pub fn close(self) -> Result<()> {
        let Rvm { state, arena, .. } = self;
        let State { arena: own, store, .. } = state.into_inner().unwrap_or_else(|p| p.into_inner());
        drop((own, arena));
        store.close()
    }

    /// The `count` values of `T` at `ptr` in recoverable memory, read and written by value:
    /// how safe Rust code keeps its state here with ordinary loads and stores (C uses the
    /// pointer itself). `None` unless they lie inside recoverable memory, aligned for `T`.
    pub fn cells<T: Plain>(&self, ptr: *mut u8, count: usize) -> Option<Cells<'_, T>> {
        self.arena.cells(ptr as usize, count)
    }
}

fn map(base: usize, capacity: u64) -> Result<Arena> {
    Arena::map_at(base, capacity as usize).map_err(|e| match e.kind() {
        std::io::ErrorKind::AddrInUse => RvmError::AddressTaken(format!(
            "recoverable memory lives at {base:#x}..{:#x} ({capacity} bytes), but {e}: create it before \
             anything else maps memory there (and with address space layout randomisation off, \
             `setarch -R`), or choose another [rvm] base before it is first created",
            base + capacity as usize
        )),
        _ => RvmError::io(format!("map recoverable memory at {base:#x}"))(e),
    })
}

impl State {
    fn header(&self) -> Header {
        let mut b = [0u8; layout::HEADER_LEN as usize];
        self.arena.read(0, &mut b);
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"));
        let mut heads = [0; layout::CLASSES];
        for (i, h) in heads.iter_mut().enumerate() {
            *h = u64_at(at::HEADS + 8 * i);
        }
        Header {
            capacity: u64_at(16),
            base: u64_at(24),
            seq: u64_at(at::SEQ),
            usr_data: u64_at(at::USR_DATA),
            hwm: u64_at(at::HWM),
            blocks: u32::from_le_bytes(b[at::BLOCKS..at::BLOCKS + 4].try_into().expect("4 bytes")),
            heads,
        }
    }

    fn base(&self) -> u64 {
        self.arena.as_ptr() as u64
    }

    /// Reads back every block the table lists, into the arena (not yet tracked).
    fn recover(&mut self, h: &Header, meta: &[u8], t0: Instant) -> Result<()> {
        self.arena.write(0, meta);
        let mut bytes = META_LEN;
        let mut buf = Vec::new();
        for i in 0..h.blocks {
            let at = Entry::at(i);
            let e = Entry::decode(&meta[at..at + layout::ENTRY_LEN as usize], i, h)?;
            if e.kind == Kind::Free {
                continue;
            }
            buf.resize(e.len as usize, 0);
            self.store.read(e.offset, &mut buf)?;
            self.arena.write(e.offset as usize, &buf);
            self.blocks.insert(e.addr, i);
            bytes += e.len;
        }
        self.stats.recovery =
            Some(Recovery { seq: h.seq, blocks: self.blocks.len(), bytes, time: t0.elapsed() });
        Ok(())
    }

    fn entry(&self, i: u32) -> Entry {
        let mut b = [0u8; layout::ENTRY_LEN as usize];
        self.arena.read(Entry::at(i), &mut b);
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"));
        let kind = match u32::from_le_bytes(b[24..28].try_into().expect("4 bytes")) {
            0 => Kind::Free,
            1 => Kind::Slab {
                class: class_of(u64::from(u32::from_le_bytes(b[28..32].try_into().expect("4")))),
            },
            _ => Kind::Large,
        };
        Entry { addr: u64_at(0), offset: u64_at(8), len: u64_at(16), kind }
    }

    fn set_entry(&self, i: u32, e: &Entry) {
        self.arena.write(Entry::at(i), &e.encode());
    }

    /// A block of `len` bytes (whole pages) of kind `kind`: a free one reused (split if it is
    /// larger and the table has room), or a new one past the high-water mark.
    fn new_block(&mut self, len: u64, kind: Kind) -> Result<Entry> {
        let h = self.header();
        let reuse =
            (0..h.blocks).map(|i| (i, self.entry(i))).find(|(_, e)| e.kind == Kind::Free && e.len >= len);
        let (i, e) = match reuse {
            Some((i, free)) => {
                // Split off the rest as a free block of its own, if the table has room for it.
                let split = free.len > len && h.blocks < TABLE_CAP;
                if split {
                    let rest = Entry {
                        addr: free.addr + len,
                        offset: free.offset + len,
                        len: free.len - len,
                        kind: Kind::Free,
                    };
                    self.set_entry(h.blocks, &rest);
                    self.arena.write(at::BLOCKS, &(h.blocks + 1).to_le_bytes());
                }
                (i, Entry { len: if split { len } else { free.len }, kind, ..free })
            }
            None => {
                if h.blocks >= TABLE_CAP {
                    return Err(RvmError::Full {
                        wanted: len,
                        why: format!(
                            "the block table is full ({TABLE_CAP} blocks); free large blocks to reuse them"
                        ),
                    });
                }
                if h.hwm + len > h.capacity {
                    return Err(RvmError::Full {
                        wanted: len,
                        why: format!(
                            "{} of {} bytes of recoverable memory are in blocks already; use a larger \
                             region (or [rvm] redis_capacity), or free blocks",
                            h.hwm, h.capacity
                        ),
                    });
                }
                let e = Entry { addr: h.base + h.hwm, offset: h.hwm, len, kind };
                self.store.allocate(e.offset, e.len)?;
                self.arena.store_u64(at::HWM, h.hwm + len);
                self.arena.write(at::BLOCKS, &(h.blocks + 1).to_le_bytes());
                (h.blocks, e)
            }
        };
        self.set_entry(i, &e);
        self.blocks.insert(e.addr, i);
        self.fresh.push((e.offset, e.len));
        Ok(e)
    }

    fn alloc_small(&mut self, size: u64) -> Result<u64> {
        let c = class_of(size);
        let head_at = at::HEADS + 8 * c;
        let mut head = self.arena.load_u64(head_at);
        if head == 0 {
            let e = self.new_block(SLAB_LEN, Kind::Slab { class: c })?;
            // Thread every chunk onto the class's free list, in address order.
            let chunk = class_size(c);
            let mut slab = vec![0u8; SLAB_LEN as usize];
            for k in 0..SLAB_LEN / chunk {
                let (addr, at) = (e.addr + k * chunk, (k * chunk) as usize);
                let next = if k + 1 < SLAB_LEN / chunk { addr + chunk } else { 0 };
                slab[at..at + 8].copy_from_slice(&next.to_le_bytes());
                slab[at + 8..at + 16].copy_from_slice(&(addr ^ FREE_TAG).to_le_bytes());
            }
            self.arena.write(e.offset as usize, &slab);
            head = e.addr;
        }
        let at = (head - self.base()) as usize;
        let next = self.arena.load_u64(at);
        self.arena.store_u64(head_at, next);
        self.arena.zero(at, class_size(c) as usize);
        Ok(head)
    }

    fn alloc_large(&mut self, size: u64) -> Result<u64> {
        let len = size
            .checked_next_multiple_of(PAGE)
            .ok_or_else(|| RvmError::Full { wanted: size, why: "no memory is that large".into() })?;
        let hwm = self.arena.load_u64(at::HWM);
        let e = self.new_block(len, Kind::Large)?;
        if e.offset < hwm {
            // Reused: it holds what it held before it was freed. (Past the old high-water
            // mark the arena has never been written: zero already.)
            self.arena.zero(e.offset as usize, e.len as usize);
        }
        Ok(e.addr)
    }

    fn free(&mut self, addr: u64) -> Result<()> {
        let foreign = || RvmError::ForeignPointer { addr: addr as usize, call: "rvm_free" };
        let (&start, &i) = self.blocks.range(..=addr).next_back().ok_or_else(foreign)?;
        let e = self.entry(i);
        if addr >= start + e.len {
            return Err(foreign());
        }
        match e.kind {
            Kind::Large if addr == start => {
                self.set_entry(i, &Entry { kind: Kind::Free, ..e });
                self.blocks.remove(&start);
                self.store.free(e.offset, e.len);
            }
            Kind::Slab { class } if (addr - start).is_multiple_of(class_size(class)) => {
                let head_at = at::HEADS + 8 * class;
                let head = self.arena.load_u64(head_at);
                let at = (addr - self.base()) as usize;
                if self.arena.load_u64(at + 8) == addr ^ FREE_TAG && self.on_free_list(head, addr) {
                    return Err(foreign());
                }
                self.arena.store_u64(at, head);
                self.arena.store_u64(at + 8, addr ^ FREE_TAG);
                self.arena.store_u64(head_at, addr);
            }
            _ => return Err(foreign()),
        }
        Ok(())
    }

    /// Whether `addr` is on the free list that starts at `head`. Walked only when a chunk
    /// given to `free` carries the free tag (a chunk in use holding that value by chance
    /// is not on the list).
    /// A list the program broke (a store into a freed chunk) ends the walk: no chunk the
    /// list cannot reach, and never more steps than chunks fit.
    fn on_free_list(&self, mut head: u64, addr: u64) -> bool {
        let base = self.base();
        for _ in 0..self.arena.len() / 16 {
            if head == addr {
                return true;
            }
            if head == 0 || !self.arena.contains(head as usize, 8) {
                return false;
            }
            head = self.arena.load_u64((head - base) as usize);
        }
        false
    }

    fn commit(&mut self) -> Result<()> {
        let t0 = Instant::now();
        // The header first: the new sequence number and its CRC, so that its page is among
        // those found written.
        let mut b = [0u8; layout::HEADER_LEN as usize];
        self.arena.read(0, &mut b);
        let seq = u64::from_le_bytes(b[at::SEQ..at::SEQ + 8].try_into().expect("8 bytes")) + 1;
        b[at::SEQ..at::SEQ + 8].copy_from_slice(&seq.to_le_bytes());
        let crc = mojim_format::checksum::crc32c(&b[..at::CRC]);
        b[at::CRC..at::CRC + 4].copy_from_slice(&crc.to_le_bytes());
        self.arena.write(at::SEQ, &b[at::SEQ..at::SEQ + 8]);
        self.arena.write(at::CRC, &b[at::CRC..at::CRC + 4]);
        let hwm = self.arena.load_u64(at::HWM);
        let runs = &mut self.runs;
        runs.clear();
        self.arena
            .collect(hwm as usize, |o, l| runs.push((o, l)))
            .map_err(RvmError::io("find the pages written since the last commit"))?;
        if !self.fresh.is_empty() || !self.pending.is_empty() {
            runs.append(&mut self.fresh);
            runs.append(&mut self.pending);
            merge(runs);
        }
        let r = self.store.check(&self.runs).and_then(|()| self.store.commit(&self.runs, &self.arena));
        if let Err(e) = r {
            // Nothing is lost: the next commit sends these pages again.
            self.pending.clone_from(&self.runs);
            return Err(e);
        }
        self.stats.commits += 1;
        self.stats.last_pages = self.runs.iter().map(|r| r.1).sum::<u64>() / PAGE;
        self.stats.last_runs = self.runs.len();
        self.stats.last_time = t0.elapsed();
        Ok(())
    }
}

/// Sorts runs and joins those that overlap or touch.
fn merge(runs: &mut Vec<(u64, u64)>) {
    runs.sort_unstable();
    let mut out = 0;
    for i in 0..runs.len() {
        let (o, l) = runs[i];
        if out > 0 {
            let (po, pl) = runs[out - 1];
            if o <= po + pl {
                runs[out - 1].1 = (po + pl).max(o + l) - po;
                continue;
            }
        }
        runs[out] = (o, l);
        out += 1;
    }
    runs.truncate(out);
}

#[cfg(test)]
mod tests {
    use super::merge;

    #[test]
    fn merge_joins_overlapping_and_touching_runs() {
        let mut v = vec![(8192, 4096), (0, 4096), (4096, 4096), (20480, 8192), (24576, 4096)];
        merge(&mut v);
        assert_eq!(v, vec![(0, 12288), (20480, 8192)]);
    }
}
