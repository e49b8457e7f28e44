//! The Mojim backend's local redo file: what makes the region's own copy of a commit atomic.
//!
//! A commit copies the written pages into the region and then syncs them as one group. The
//! mirror gets all or none of the group, but a process killed while the pages are being copied
//! would leave the region, its local copy, holding part of the commit; and the primary, when it
//! restarts, trusts that copy (it sends ranges of unacknowledged groups again from it). So the
//! pages go to this file first; once they are all there, its header says so; then they are
//! copied into the region and synced; then the header says empty again. A restart finds either
//! an empty file (the region holds a whole commit) or a complete one, which it copies into the
//! region again before the primary opens, and syncs once it has: the region and the mirror both
//! end at that commit.
//!
//! It guards against the process dying, not the machine: it is not fsynced (the machine's loss
//! is what the mirror is for). Layout (docs/FORMAT.md §10.3), little-endian:
//!
//! | offset | size | field |
//! |---:|---:|---|
//! | 0 | 8 | magic `MOJIMRDO` |
//! | 8 | 4 | state: 0 empty, 1 complete |
//! | 12 | 4 | runs |
//! | 16 | 8 | data bytes |
//! | 24 | 4 | CRC-32C of bytes 0..24 and the run table |
//! | 28 | 36 | 0 |
//! | 64 | 16 × runs | the runs: region offset (8), length (8) |
//! | next 4 KiB boundary | data bytes | the runs' bytes, in order |

use crate::error::{Result, RvmError};
use mojim_format::checksum::{crc32c, crc32c_append};
use mojim_region::Arena;
use std::fs::File;
use std::io::IoSlice;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

const MAGIC: [u8; 8] = *b"MOJIMRDO";
const HEADER: usize = 64;

/// The redo file beside a region: `<region>.rvm-redo`.
pub fn path_beside(region: &Path) -> PathBuf {
    let mut p = region.as_os_str().to_owned();
    p.push(".rvm-redo");
    PathBuf::from(p)
}

/// A commit to put back: `(region offset, bytes)` runs.
pub type Replay = Vec<(u64, Vec<u8>)>;

/// A redo file, open.
pub struct Redo {
    file: File,
    path: PathBuf,
    /// Whether the header on disk says complete.
    complete: bool,
    /// The runs being staged, and where the next one's bytes go.
    runs: Vec<(u64, u64)>,
    data_at: u64,
    next: u64,
}

fn data_start(runs: usize) -> u64 {
    ((HEADER + 16 * runs) as u64).next_multiple_of(4096)
}

impl Redo {
    /// Opens (or creates) the redo file beside `region`.
    pub fn open(region: &Path) -> Result<Redo> {
        let path = path_beside(region);
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(RvmError::io(format!("open {}", path.display())))?;
        // Validated by `pending`; here only whether a clear must write.
        let mut h = [0u8; 12];
        let n = file.read_at(&mut h, 0).map_err(RvmError::io(format!("read {}", path.display())))?;
        let complete = n == 12 && h[8..12] != [0; 4];
        Ok(Redo { file, path, complete, runs: Vec::new(), data_at: 0, next: 0 })
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
        let n =
            self.file.read_at(&mut h, 0).map_err(RvmError::io(format!("read {}", self.path.display())))?;
        if n < HEADER || h.iter().all(|&b| b == 0) {
            return Ok(None);
        }
        if h[0..8] != MAGIC {
            return Err(self.damaged("no MOJIMRDO magic"));
        }
        let state = u32::from_le_bytes(h[8..12].try_into().expect("4 bytes"));
        if state == 0 {
            return Ok(None);
        }
        let runs = u32::from_le_bytes(h[12..16].try_into().expect("4 bytes")) as usize;
        let mut table = vec![0u8; 16 * runs];
        self.file
            .read_exact_at(&mut table, HEADER as u64)
            .map_err(|e| self.damaged(format!("its run table cannot be read: {e}")))?;
        let crc = crc32c_append(crc32c(&h[0..24]), &table);
        if u32::from_le_bytes(h[24..28].try_into().expect("4 bytes")) != crc || state != 1 {
            return Err(self.damaged("its header's CRC does not match"));
        }
        let runs = table
            .chunks_exact(16)
            .map(|c| {
                (
                    u64::from_le_bytes(c[0..8].try_into().expect("8 bytes")),
                    u64::from_le_bytes(c[8..16].try_into().expect("8 bytes")),
                )
            })
            .collect();
        Ok(Some(runs))
    }

    /// The complete commit the file holds, as `(offset, bytes)` runs, if it holds one.
    pub fn pending(&self) -> Result<Option<Replay>> {
        let Some(runs) = self.read_complete()? else { return Ok(None) };
        let mut at = data_start(runs.len());
        let mut out = Vec::with_capacity(runs.len());
        for (off, len) in runs {
            let mut b = vec![0u8; len as usize];
            self.file
                .read_exact_at(&mut b, at)
                .map_err(|e| self.damaged(format!("the bytes of run {off}+{len} cannot be read: {e}")))?;
            at += len;
            out.push((off, b));
        }
        Ok(Some(out))
    }

    /// Starts staging a commit of `runs`: from here until [`Redo::seal`], the file holds no
    /// complete commit.
    pub fn begin(&mut self, runs: &[(u64, u64)]) -> Result<()> {
        self.clear()?;
        self.runs.clear();
        self.runs.extend_from_slice(runs);
        self.data_at = data_start(runs.len());
        self.next = self.data_at;
        Ok(())
    }

    /// Writes the bytes of `runs` (the ones [`Redo::begin`] got), taken from `memory` at the
    /// same offsets: one `pwritev` per 64 runs, straight from the arena.
    pub fn write_runs(&mut self, memory: &Arena, runs: &[(u64, u64)]) -> Result<()> {
        const BATCH: usize = 64;
        let err = |path: &Path| RvmError::io(format!("write {}", path.display()));
        for chunk in runs.chunks(BATCH) {
            let mut iov = [IoSlice::new(&[]); BATCH];
            let mut total = 0;
            for (v, &(o, l)) in iov.iter_mut().zip(chunk) {
                *v = memory.view(o as usize, l as usize).io_slice();
                total += l;
            }
            let n = rustix::io::pwritev(&self.file, &iov[..chunk.len()], self.next)
                .map_err(|e| err(&self.path)(e.into()))? as u64;
            // A short write: the rest run by run, from where it stopped.
            let mut at = 0;
            for &(o, l) in chunk {
                if n < at + l {
                    let skip = n.saturating_sub(at);
                    memory
                        .view((o + skip) as usize, (l - skip) as usize)
                        .write_all_at(&self.file, self.next + at + skip)
                        .map_err(err(&self.path))?;
                }
                at += l;
            }
            self.next += total;
        }
        Ok(())
    }

    /// Marks the commit staged since [`Redo::begin`] complete.
    pub fn seal(&mut self) -> Result<()> {
        let mut b = vec![0u8; HEADER + 16 * self.runs.len()];
        b[0..8].copy_from_slice(&MAGIC);
        b[8..12].copy_from_slice(&1u32.to_le_bytes());
        b[12..16].copy_from_slice(&(self.runs.len() as u32).to_le_bytes());
        b[16..24].copy_from_slice(&(self.next - self.data_at).to_le_bytes());
        for (i, (o, l)) in self.runs.iter().enumerate() {
            b[HEADER + 16 * i..HEADER + 16 * i + 8].copy_from_slice(&o.to_le_bytes());
            b[HEADER + 16 * i + 8..HEADER + 16 * i + 16].copy_from_slice(&l.to_le_bytes());
        }
        let crc = crc32c_append(crc32c(&b[0..24]), &b[HEADER..]);
        b[24..28].copy_from_slice(&crc.to_le_bytes());
        self.file.write_all_at(&b, 0).map_err(RvmError::io(format!("write {}", self.path.display())))?;
        self.complete = true;
        Ok(())
    }

    /// Marks the file empty: the region holds the commit whole.
    pub fn clear(&mut self) -> Result<()> {
        if self.complete {
            self.file
                .write_all_at(&0u32.to_le_bytes(), 8)
                .map_err(RvmError::io(format!("write {}", self.path.display())))?;
            self.complete = false;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        r.write_runs(&a, &[(0, 4096), (8192, 4096)]).unwrap();
        assert!(Redo::open(&region).unwrap().pending().unwrap().is_none(), "not sealed yet");
        r.seal().unwrap();
        let p = Redo::open(&region).unwrap().pending().unwrap().expect("sealed");
        assert_eq!(p, vec![(0, vec![1; 4096]), (8192, vec![2; 4096])]);
        // A new commit begins by un-sealing: a crash while it is staged finds nothing.
        r.begin(&[(0, 4096)]).unwrap();
        assert!(Redo::open(&region).unwrap().pending().unwrap().is_none());
        r.write_runs(&a, &[(0, 4096)]).unwrap();
        r.seal().unwrap();
        r.clear().unwrap();
        assert!(Redo::open(&region).unwrap().pending().unwrap().is_none());
        // Damage is named, not taken for a commit.
        r.begin(&[(0, 4096)]).unwrap();
        r.write_runs(&a, &[(0, 4096)]).unwrap();
        r.seal().unwrap();
        std::fs::OpenOptions::new()
            .write(true)
            .open(path_beside(&region))
            .unwrap()
            .write_all_at(&[9], 64)
            .unwrap();
        let e = Redo::open(&region).unwrap().pending().unwrap_err().to_string();
        assert!(e.contains("damaged") && e.contains("CRC"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
