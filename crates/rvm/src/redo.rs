//! The Mojim backend's local redo file: what makes the region's own copy of a commit atomic.
//!
//! A commit copies the written pages into the region and then syncs them as one group. The
//! mirror gets all or none of the group, but a process killed while the pages are being copied
//! would leave the region, its local copy, holding part of the commit; and the primary, when it
//! restarts, trusts that copy (it sends ranges of unacknowledged groups again from it). So the
//! pages go to this file first; once they are all there, its header says so; then they are
//! copied into the region and synced; then the header says empty again, and the run table and
//! the bytes are zeroed: the file holds a commit's bytes only while it is being made, and is
//! created readable by its owner only (0600, as the region is). A restart finds either
//! an empty file (the region holds a whole commit) or a complete one, which it copies into the
//! region again before the primary opens, and syncs once it has: the region and the mirror both
//! end at that commit.
//!
//! It guards against the process dying, not the machine: it is mapped shared and never synced
//! (the machine's loss is what the mirror is for), so a commit writes it with plain stores, no
//! system call: a process killed at any instruction leaves in the page cache every store it made
//! before. The state word is stored last, with release ordering, so that no compiler or
//! processor puts it before the bytes it vouches for. The file grows (doubling, every block
//! reserved: a full file system fails the commit before anything is written) when a commit does
//! not fit. Layout (docs/FORMAT.md §10.3), little-endian:
//!
//! | offset | size | field |
//! |---:|---:|---|
//! | 0 | 8 | magic `MOJIMRDO` |
//! | 8 | 8 | state: 0 empty, 1 complete |
//! | 16 | 8 | data bytes |
//! | 24 | 4 | runs |
//! | 28 | 4 | CRC-32C of bytes 16..28 and the run table |
//! | 32 | 32 | 0 |
//! | 64 | 16 × runs | the runs: region offset (8), length (8) |
//! | next 4 KiB boundary | data bytes | the runs' bytes, in order |

use crate::error::{Result, RvmError};
use mojim_format::checksum::{crc32c, crc32c_append};
use mojim_region::{Arena, MappedFile};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{fence, Ordering};

const MAGIC: [u8; 8] = *b"MOJIMRDO";
const HEADER: usize = 64;
const STATE: usize = 8;
/// The file's first length; it doubles as commits need.
const INITIAL_LEN: u64 = 1 << 20;

/// The redo file beside a region: `<region>.rvm-redo`.
pub fn path_beside(region: &Path) -> PathBuf {
    let mut p = region.as_os_str().to_owned();
    p.push(".rvm-redo");
    PathBuf::from(p)
}

/// A commit to put back: `(region offset, bytes)` runs.
pub type Replay = Vec<(u64, Vec<u8>)>;

/// A redo file, open and mapped.
pub struct Redo {
    map: MappedFile,
    path: PathBuf,
    /// Where the next staged byte goes.
    next: usize,
}

fn data_start(runs: usize) -> usize {
    (HEADER + 16 * runs).next_multiple_of(4096)
}

fn io_error(path: &Path, what: &str) -> impl FnOnce(std::io::Error) -> RvmError {
    RvmError::io(format!("{what} {}", path.display()))
}

/// Opens `path` for reading and writing, creating it readable and writable by its owner only
/// (it holds a commit's bytes while the commit is made). A file that an earlier version
/// created readable by others is made private too.
fn open_private(path: &Path) -> Result<std::fs::File> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(path)
        .map_err(io_error(path, "open"))?;
    let mode = file.metadata().map_err(io_error(path, "stat"))?.permissions().mode();
    if mode & 0o077 != 0 {
        file.set_permissions(std::fs::Permissions::from_mode(mode & 0o700))
            .map_err(io_error(path, "make private (chmod 600)"))?;
    }
    Ok(file)
}

/// Makes `path` at least `len` bytes long with every block reserved, and maps it whole.
fn reserve_and_map(path: &Path, len: u64) -> Result<MappedFile> {
    let file = open_private(path)?;
    let have = file.metadata().map_err(io_error(path, "stat"))?.len();
    if have < len {
        rustix::fs::fallocate(&file, rustix::fs::FallocateFlags::empty(), 0, len)
            .map_err(|e| io_error(path, &format!("reserve {len} bytes for"))(e.into()))?;
    }
    MappedFile::open(path)
        .map_err(|e| RvmError::Io { op: format!("{} {}", e.op, e.path.display()), source: e.source })
}

impl Redo {
    /// Opens (or creates) the redo file beside `region`.
    pub fn open(region: &Path) -> Result<Redo> {
        let path = path_beside(region);
        let map = reserve_and_map(&path, INITIAL_LEN)?;
        Ok(Redo { map, path, next: 0 })
    }

    fn damaged(&self, why: impl std::fmt::Display) -> RvmError {
        RvmError::Layout(format!(
            "the redo file {} is damaged ({why}); it holds a commit that was being copied into the \
             region when the process stopped: move it away only if the region is known to be whole",
            self.path.display()
        ))
    }

    /// The runs of the complete commit the file holds, if it holds one.
    fn read_complete(&self) -> Result<Option<Vec<(u64, u64)>>> {
        let mut h = [0u8; HEADER];
        self.map.read(0, &mut h);
        if h.iter().all(|&b| b == 0) {
            return Ok(None);
        }
        if h[0..8] != MAGIC {
            return Err(self.damaged("no MOJIMRDO magic"));
        }
        match self.map.counter(STATE).load(Ordering::Acquire) {
            0 => return Ok(None),
            1 => {}
            s => return Err(self.damaged(format!("state {s}, neither 0 nor 1"))),
        }
        let bytes = u64::from_le_bytes(h[16..24].try_into().expect("8 bytes"));
        let runs = u32::from_le_bytes(h[24..28].try_into().expect("4 bytes")) as usize;
        let fits = |n: usize, b: u64| data_start(n) as u64 + b <= self.map.len() as u64;
        if !fits(runs, bytes) {
            return Err(self.damaged(format!(
                "{runs} runs of {bytes} bytes in all do not fit its {} bytes",
                self.map.len()
            )));
        }
        let mut table = vec![0u8; 16 * runs];
        self.map.read(HEADER, &mut table);
        let crc = crc32c_append(crc32c(&h[16..28]), &table);
        if u32::from_le_bytes(h[28..32].try_into().expect("4 bytes")) != crc {
            return Err(self.damaged("its header's CRC does not match"));
        }
        let runs: Vec<(u64, u64)> = table
            .chunks_exact(16)
            .map(|c| {
                (
                    u64::from_le_bytes(c[0..8].try_into().expect("8 bytes")),
                    u64::from_le_bytes(c[8..16].try_into().expect("8 bytes")),
                )
            })
            .collect();
        if runs.iter().map(|r| r.1).sum::<u64>() != bytes {
            return Err(self.damaged("its runs' lengths do not add up to its data bytes"));
        }
        Ok(Some(runs))
    }

    /// The complete commit the file holds, as `(offset, bytes)` runs, if it holds one.
    pub fn pending(&self) -> Result<Option<Replay>> {
        let Some(runs) = self.read_complete()? else { return Ok(None) };
        let mut at = data_start(runs.len());
        let mut out = Vec::with_capacity(runs.len());
        for (off, len) in runs {
            let mut b = vec![0u8; len as usize];
            self.map.read(at, &mut b);
            at += len as usize;
            out.push((off, b));
        }
        Ok(Some(out))
    }

    /// Starts staging a commit of `runs`: from here until [`Redo::seal`], the file holds no
    /// complete commit. The file grows first if the commit does not fit (a full file system is
    /// an error here, and the file still holds what it held).
    pub fn begin(&mut self, runs: &[(u64, u64)]) -> Result<()> {
        let need = (data_start(runs.len()) as u64).saturating_add(runs.iter().map(|r| r.1).sum::<u64>());
        if need > self.map.len() as u64 {
            let len = need.max(2 * self.map.len() as u64).next_multiple_of(INITIAL_LEN);
            self.map = reserve_and_map(&self.path, len)?;
        }
        self.clear();
        // The header but its state, and the run table: all known before the bytes.
        let bytes = runs.iter().map(|r| r.1).sum::<u64>();
        let mut h = [0u8; HEADER];
        h[0..8].copy_from_slice(&MAGIC);
        h[16..24].copy_from_slice(&bytes.to_le_bytes());
        h[24..28].copy_from_slice(&(runs.len() as u32).to_le_bytes());
        let mut crc = crc32c(&h[16..28]);
        for (i, (o, l)) in runs.iter().enumerate() {
            let mut e = [0u8; 16];
            e[0..8].copy_from_slice(&o.to_le_bytes());
            e[8..16].copy_from_slice(&l.to_le_bytes());
            crc = crc32c_append(crc, &e);
            self.map.write(HEADER + 16 * i, &e);
        }
        h[28..32].copy_from_slice(&crc.to_le_bytes());
        self.map.write(0, &h[..STATE]);
        self.map.write(16, &h[16..]);
        self.next = data_start(runs.len());
        Ok(())
    }

    /// Copies the bytes of `runs` (the ones [`Redo::begin`] got) from `memory` at the same
    /// offsets.
    pub fn write_runs(&mut self, memory: &Arena, runs: &[(u64, u64)]) {
        for &(o, l) in runs {
            self.map.write_from(self.next, memory.view(o as usize, l as usize));
            self.next += l as usize;
        }
    }

    /// Marks the commit staged since [`Redo::begin`] complete: the state word, stored after
    /// every byte it vouches for.
    pub fn seal(&mut self) {
        self.map.counter(STATE).store(1, Ordering::Release);
    }

    /// Marks the file empty (the region holds the commit whole), then zeroes the commit's run
    /// table and bytes. Stores that follow (the zeroes, the next commit's) are not moved before
    /// the mark: a process killed while they are made leaves an empty file. On a file that
    /// holds no complete commit, it zeroes what is left in it (a commit whose staging a process
    /// did not finish, or one an earlier version applied without zeroing).
    pub fn clear(&mut self) {
        self.map.counter(STATE).store(0, Ordering::Release);
        fence(Ordering::SeqCst);
        self.wipe();
    }

    /// Zeroes what the header says was staged, from its data-bytes field to the end of the
    /// commit's bytes (within the file), and what this process staged since. Only for a file
    /// whose state is empty.
    fn wipe(&mut self) {
        let mut h = [0u8; 32];
        self.map.read(0, &mut h);
        let bytes = u64::from_le_bytes(h[16..24].try_into().expect("8 bytes"));
        let runs = u32::from_le_bytes(h[24..28].try_into().expect("4 bytes")) as usize;
        let len = self.map.len();
        let named = (data_start(runs) as u64).saturating_add(bytes).min(len as u64) as usize;
        let end = if h[16..32].iter().all(|&b| b == 0) { self.next } else { named.max(self.next) };
        const ZEROS: [u8; 4096] = [0; 4096];
        let mut at = 16;
        while at < end.min(len) {
            let n = (end - at).min(ZEROS.len());
            self.map.write(at, &ZEROS[..n]);
            at += n;
        }
        self.next = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::FileExt;

    #[test]
    fn a_sealed_commit_is_found_and_a_cleared_or_unsealed_one_is_not() {
        let dir = std::env::temp_dir().join(format!("mojim-redo-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let region = dir.join("r.mojim");
        let mut r = Redo::open(&region).unwrap();
        assert!(r.pending().unwrap().is_none());
        let a = mojim_region::Arena::map_at(0x5b00_0000_0000, 3 << 12).unwrap();
        a.write(0, &[1; 4096]);
        a.write(8192, &[2; 4096]);
        // Arena offsets stand for region offsets here: runs at 0 and 8192.
        r.begin(&[(0, 4096), (8192, 4096)]).unwrap();
        r.write_runs(&a, &[(0, 4096), (8192, 4096)]);
        assert!(Redo::open(&region).unwrap().pending().unwrap().is_none(), "not sealed yet");
        r.seal();
        let p = Redo::open(&region).unwrap().pending().unwrap().expect("sealed");
        assert_eq!(p, vec![(0, vec![1; 4096]), (8192, vec![2; 4096])]);
        // A new commit begins by un-sealing: a crash while it is staged finds nothing.
        r.begin(&[(0, 4096)]).unwrap();
        assert!(Redo::open(&region).unwrap().pending().unwrap().is_none());
        r.write_runs(&a, &[(0, 4096)]);
        r.seal();
        r.clear();
        assert!(Redo::open(&region).unwrap().pending().unwrap().is_none());
        let left = std::fs::read(path_beside(&region)).unwrap();
        assert!(left[16..].iter().all(|&b| b == 0), "a cleared file holds no run table and no bytes");
        // Damage is named, not taken for a commit: a run table changed under its CRC, and a
        // state that is neither value.
        r.begin(&[(0, 4096)]).unwrap();
        r.write_runs(&a, &[(0, 4096)]);
        r.seal();
        let file = std::fs::OpenOptions::new().write(true).open(path_beside(&region)).unwrap();
        file.write_all_at(&[9], 64).unwrap();
        let e = Redo::open(&region).unwrap().pending().unwrap_err().to_string();
        assert!(e.contains("damaged") && e.contains("CRC"), "{e}");
        file.write_all_at(&7u64.to_le_bytes(), 8).unwrap();
        let e = Redo::open(&region).unwrap().pending().unwrap_err().to_string();
        assert!(e.contains("damaged") && e.contains("state 7"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_commit_larger_than_the_file_grows_it() {
        let dir = std::env::temp_dir().join(format!("mojim-redo-grow-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let region = dir.join("r.mojim");
        let mut r = Redo::open(&region).unwrap();
        let len = 3 * INITIAL_LEN as usize;
        let a = mojim_region::Arena::map_at(0x5b10_0000_0000, len).unwrap();
        a.write(len - 4096, &[5; 4096]);
        r.begin(&[(0, len as u64)]).unwrap();
        r.write_runs(&a, &[(0, len as u64)]);
        r.seal();
        let size = std::fs::metadata(path_beside(&region)).unwrap().len();
        assert!(size >= 4 * INITIAL_LEN, "{size}");
        let p = Redo::open(&region).unwrap().pending().unwrap().expect("sealed");
        assert_eq!(p[0].1[len - 4096..], [5; 4096]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
