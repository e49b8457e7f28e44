//! Memory of the peer's that this side writes into: one-sided record placement.
//!
//! A mirror offers a lane's log to its primary ([`crate::Conn::offer_memory`]); the primary
//! takes it ([`crate::Conn::take_memory`]) and places each record's body straight into it, then
//! rings the lane's doorbell (the record's header, sent on the connection). Over shared memory
//! the offered file is mapped into the primary; over UCX it is the mirror's registered mapping,
//! written with puts. The mirror validates every record in place before it acknowledges it
//! (docs/DESIGN-transport.md).

use crate::record_mac::TAG_SIZE;
use crate::ucx::RemoteRegion;
use crate::RecordMac;
use mojim_region::{MapSlice, MappedFile};
use std::io::{self, IoSlice};
use std::os::fd::{AsRawFd, BorrowedFd};
use std::path::PathBuf;

/// Maps the whole file `fd` (received from a peer, or made here), shared.
pub(crate) fn map_file(fd: BorrowedFd<'_>) -> io::Result<MappedFile> {
    let path = PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()));
    MappedFile::open(&path).map_err(|e| io::Error::new(e.source.kind(), e.to_string()))
}

/// Memory the peer offered: mapped here, or reached with UCX puts.
pub struct PeerMemory {
    backing: Backing,
    /// Where a body is staged before it is put (UCX) or encrypted (either): the bytes
    /// checksummed are the bytes placed, whatever the application stores into the source
    /// meanwhile. Grows to the longest body (and tag) once; no allocation per record after that.
    staging: Vec<u8>,
}

enum Backing {
    /// The peer's file, mapped into this process; the offered bytes start at `from` of it.
    Mapped { map: MappedFile, from: usize },
    /// The peer's registered memory.
    Remote { region: RemoteRegion },
}

/// `staging`, grown to at least `len` bytes, its first `len`.
fn staged(staging: &mut Vec<u8>, len: usize) -> &mut [u8] {
    if staging.len() < len {
        staging.resize(len, 0);
    }
    &mut staging[..len]
}

/// Stages a body of `len` bytes (`fill` writes it) and encrypts it under `mac` as frame
/// `frame_index` of group `seq`, its tag after it. Returns the staged ciphertext and tag, and
/// the CRC32C of the plaintext (what the record's header carries: the mirror checks it after it
/// decrypted the body).
fn encrypt_staged<'a>(
    staging: &'a mut Vec<u8>,
    len: usize,
    fill: impl FnOnce(&mut [u8]),
    mac: &RecordMac,
    seq: u64,
    frame_index: u32,
) -> (&'a [u8], u32) {
    let bytes = staged(staging, len + TAG_SIZE);
    let (body, tag) = bytes.split_at_mut(len);
    fill(body);
    let checksum = mojim_format::checksum::crc32c(body);
    tag.copy_from_slice(&mac.encrypt(seq, frame_index, body));
    (bytes, checksum)
}

fn too_small(offered: u64, len: usize) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("the peer offered {offered} bytes of memory where {len} were announced"),
    )
}

impl PeerMemory {
    /// The bytes of the mapping `map` from `from` on, at least `len` of them, or an error
    /// naming both sizes.
    pub(crate) fn mapped(map: MappedFile, from: usize, len: usize) -> io::Result<PeerMemory> {
        let offered = map.len().saturating_sub(from);
        if offered < len {
            return Err(too_small(offered as u64, len));
        }
        Ok(PeerMemory { backing: Backing::Mapped { map, from }, staging: Vec::new() })
    }

    /// The peer's registered `region` of at least `len` bytes, or an error naming both sizes.
    pub(crate) fn remote(region: RemoteRegion, len: usize) -> io::Result<PeerMemory> {
        if region.len() < len as u64 {
            return Err(too_small(region.len(), len));
        }
        Ok(PeerMemory { backing: Backing::Remote { region }, staging: Vec::new() })
    }

    /// Where `len` bytes at `at` of the offer lie in a mapping of `map_len` bytes whose offer
    /// starts at `from`; an error past the offer's end, as a remote put's.
    fn inside(from: usize, map_len: usize, at: usize, len: usize) -> io::Result<usize> {
        match at.checked_add(len).and_then(|end| end.checked_add(from)) {
            Some(end) if end <= map_len => Ok(from + at),
            _ => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{len} bytes at {at} overrun the peer's offered {} bytes", map_len - from),
            )),
        }
    }

    pub fn len(&self) -> usize {
        match &self.backing {
            Backing::Mapped { map, from } => map.len() - from,
            Backing::Remote { region } => region.len() as usize,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Places `src` at `at` and returns the CRC32C of exactly the bytes placed. Over UCX the
    /// bytes are in the peer's memory after [`PeerMemory::flush`], or once the connection this
    /// memory was taken from has sent anything after them: its every write flushes its endpoint
    /// (these puts among its operations) before it rings, so a doorbell sent on it never
    /// arrives before the bodies, and a flush of its own would add a round trip. A mapping needs
    /// neither: the stores are in the shared pages, and the connection's ring publishes its
    /// bytes with a release store.
    pub fn place(&mut self, at: usize, src: MapSlice<'_>) -> io::Result<u32> {
        match &mut self.backing {
            Backing::Mapped { map, from } => {
                let at = Self::inside(*from, map.len(), at, src.len())?;
                map.write_from(at, src);
                // The checksum of the bytes where they lie: the application may store into the
                // source meanwhile.
                Ok(map.view(at, src.len()).crc32c())
            }
            Backing::Remote { region } => {
                let bytes = staged(&mut self.staging, src.len());
                src.read(0, bytes);
                region.put(at as u64, &[IoSlice::new(bytes)])?;
                Ok(mojim_format::checksum::crc32c(bytes))
            }
        }
    }

    /// As [`PeerMemory::place`], for a record authenticated by `mac` as frame `frame_index` of
    /// group `seq`: its tag, of exactly the bytes placed, goes right after them (the record's
    /// `MAC` flag, docs/FORMAT.md §2.4). If `mac` encrypts, the bytes are staged here and
    /// encrypted, and their ciphertext and its tag placed: the plaintext never enters the
    /// peer's memory (the record's `ENCRYPTED` flag); the CRC32C returned is the plaintext's.
    pub fn place_sealed(
        &mut self,
        at: usize,
        src: MapSlice<'_>,
        mac: &RecordMac,
        seq: u64,
        frame_index: u32,
    ) -> io::Result<u32> {
        let len = src.len();
        if mac.encrypts() {
            let (sealed, checksum) =
                encrypt_staged(&mut self.staging, len, |b| src.read(0, b), mac, seq, frame_index);
            Self::put(&mut self.backing, at, sealed)?;
            return Ok(checksum);
        }
        match &mut self.backing {
            Backing::Mapped { map, from } => {
                let at = Self::inside(*from, map.len(), at, len + TAG_SIZE)?;
                map.write_from(at, src);
                // Of the bytes where they lie: the application may store into the source.
                let placed = map.view(at, len);
                let tag = placed.with_bytes(|b| mac.tag(seq, frame_index, b));
                map.write(at + len, &tag);
                Ok(placed.crc32c())
            }
            Backing::Remote { region } => {
                let staging = staged(&mut self.staging, len + TAG_SIZE);
                let (bytes, tag) = staging.split_at_mut(len);
                src.read(0, bytes);
                tag.copy_from_slice(&mac.tag(seq, frame_index, bytes));
                region.put(at as u64, &[IoSlice::new(staging)])?;
                Ok(mojim_format::checksum::crc32c(&staging[..len]))
            }
        }
    }

    /// Writes `bytes` at `at` of the offer (a mapping's stores, or one put).
    fn put(backing: &mut Backing, at: usize, bytes: &[u8]) -> io::Result<()> {
        match backing {
            Backing::Mapped { map, from } => {
                map.write(Self::inside(*from, map.len(), at, bytes.len())?, bytes)
            }
            Backing::Remote { region } => region.put(at as u64, &[IoSlice::new(bytes)])?,
        }
        Ok(())
    }

    /// As [`PeerMemory::write`], with `data`'s tag under `mac` right after it, or, if `mac`
    /// encrypts, its ciphertext and tag (see [`PeerMemory::place_sealed`]).
    pub fn write_sealed(
        &mut self,
        at: usize,
        data: &[u8],
        mac: &RecordMac,
        seq: u64,
        frame_index: u32,
    ) -> io::Result<u32> {
        if mac.encrypts() {
            let fill = |b: &mut [u8]| b.copy_from_slice(data);
            let (sealed, checksum) =
                encrypt_staged(&mut self.staging, data.len(), fill, mac, seq, frame_index);
            Self::put(&mut self.backing, at, sealed)?;
            return Ok(checksum);
        }
        let tag = mac.tag(seq, frame_index, data);
        match &mut self.backing {
            Backing::Mapped { map, from } => {
                let at = Self::inside(*from, map.len(), at, data.len() + TAG_SIZE)?;
                map.write(at, data);
                map.write(at + data.len(), &tag);
            }
            Backing::Remote { region } => region.put(at as u64, &[IoSlice::new(data), IoSlice::new(&tag)])?,
        }
        Ok(mojim_format::checksum::crc32c(data))
    }

    /// Writes `data` at `at` and returns its CRC32C (the bytes are this side's own).
    pub fn write(&mut self, at: usize, data: &[u8]) -> io::Result<u32> {
        Self::put(&mut self.backing, at, data)?;
        Ok(mojim_format::checksum::crc32c(data))
    }

    /// Waits until everything placed or written is in the peer's memory.
    pub fn flush(&self) -> io::Result<()> {
        match &self.backing {
            Backing::Mapped { .. } => Ok(()),
            Backing::Remote { region } => region.flush(),
        }
    }

    /// The bytes at `at` of a mapping (the peer may change them at any time: a view, never a
    /// slice); `None` over UCX, where this side cannot read the peer's memory.
    pub fn view(&self, at: usize, len: usize) -> Option<MapSlice<'_>> {
        match &self.backing {
            Backing::Mapped { map, from } => Some(map.view(from + at, len)),
            Backing::Remote { .. } => None,
        }
    }
}
