//! WHISPER's hash map: a persistent open-addressing hash table of u64 keys and small values.
//!
//! Layout, from offset 0 of the memory:
//! - header (64 bytes): magic, slots, heap head, heap end;
//! - `slots` slots of 16 bytes: `key + 1` (0: empty) and the offset of the value's record;
//! - the heap: records of [`RECORD`] bytes, a length and up to [`MAX_VALUE`] bytes each, never
//!   overwritten once published (an update writes a new record).
//!
//! Order of stores and syncs (each line one epoch, ended by a fence; the last by the commit):
//! - **insert** into an empty slot: (1) the record, the heap head, and the slot's record offset
//!   (the slot is still empty: key 0); (2) the slot's key, one 8-byte store that publishes it.
//! - **update** of a present key: (1) the new record and the heap head; (2) the slot's record
//!   offset, one 8-byte store that switches to it.
//!
//! A crash before the last fence leaves the key absent (insert) or at its old value (update),
//! with at most an unreachable record below the heap head; after it the new value is there. A
//! lookup only reads.

use super::mem::Mem;
use mojim::error::{Error, Result};

const MAGIC: u64 = 0x5748_4953_5048_4D31; // "WHISPHM1"
const HEADER: u64 = 64;
const SLOT: u64 = 16;
/// Bytes per value record.
pub const RECORD: u64 = 64;
/// Largest value.
pub const MAX_VALUE: usize = (RECORD - 8) as usize;

/// An open hash map in a [`Mem`].
#[derive(Clone, Debug)]
pub struct HashMap {
    slots: u64,
    heap_head: u64,
    heap_end: u64,
}

fn corrupt(what: &str) -> Error {
    Error::Config(format!("whisper hash map: {what}; format the area again"))
}

impl HashMap {
    /// Bytes needed for `slots` slots and `records` value records.
    pub fn bytes(slots: u64, records: u64) -> u64 {
        HEADER + slots * SLOT + records * RECORD
    }

    /// Formats the first `size` bytes of `m` as an empty map of `slots` slots, durably.
    pub fn format(m: &mut impl Mem, slots: u64, size: u64) -> Result<HashMap> {
        let heap = (HEADER + slots * SLOT).next_multiple_of(RECORD);
        if slots == 0 || heap + RECORD > size || size > m.size() {
            return Err(Error::Config(format!(
                "whisper hash map: {slots} slots and a record do not fit {size} bytes; use fewer keys or a larger --region-size"
            )));
        }
        m.write(HEADER, &vec![0; (slots * SLOT) as usize])?;
        m.fence()?;
        let mut h = [0u8; 32];
        for (i, v) in [MAGIC, slots, heap, size].into_iter().enumerate() {
            h[i * 8..i * 8 + 8].copy_from_slice(&v.to_le_bytes());
        }
        m.write(0, &h)?;
        m.commit()?;
        Ok(HashMap { slots, heap_head: heap, heap_end: size })
    }

    /// Opens a formatted map.
    pub fn open(m: &impl Mem) -> Result<HashMap> {
        if m.read_u64(0)? != MAGIC {
            return Err(corrupt("no magic number at offset 0"));
        }
        let (slots, heap_head, heap_end) = (m.read_u64(8)?, m.read_u64(16)?, m.read_u64(24)?);
        if slots == 0 || heap_head < HEADER + slots * SLOT || heap_head > heap_end || heap_end > m.size() {
            return Err(corrupt("the header's slots and heap do not fit"));
        }
        Ok(HashMap { slots, heap_head, heap_end })
    }

    fn slot(&self, i: u64) -> u64 {
        HEADER + i * SLOT
    }

    /// The slot holding `key`, or the empty slot where it would go.
    fn find(&self, m: &impl Mem, key: u64) -> Result<(u64, bool)> {
        let start = key.wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(29) % self.slots;
        for n in 0..self.slots {
            let s = self.slot((start + n) % self.slots);
            match m.read_u64(s)? {
                0 => return Ok((s, false)),
                k if k == key.wrapping_add(1) => return Ok((s, true)),
                _ => {}
            }
        }
        Err(Error::Config(format!("whisper hash map: all {} slots are full; use more slots", self.slots)))
    }

    fn read_record(&self, m: &impl Mem, at: u64) -> Result<Vec<u8>> {
        if at < HEADER + self.slots * SLOT || at + RECORD > self.heap_end {
            return Err(corrupt("a slot points outside the heap"));
        }
        let len = m.read_u64(at)? as usize;
        if len > MAX_VALUE {
            return Err(corrupt("a record is longer than a value can be"));
        }
        let mut v = vec![0; len];
        m.read(at + 8, &mut v)?;
        Ok(v)
    }

    /// Inserts or updates `key`; durable on return.
    pub fn put(&mut self, m: &mut impl Mem, key: u64, value: &[u8]) -> Result<()> {
        if key == u64::MAX || value.len() > MAX_VALUE {
            return Err(Error::Config(format!(
                "whisper hash map: key {key} (at most {}) or a {}-byte value (at most {MAX_VALUE}) is too large",
                u64::MAX - 1,
                value.len()
            )));
        }
        if self.heap_head + RECORD > self.heap_end {
            return Err(Error::Config("whisper hash map: the heap is full; use a larger area".into()));
        }
        let (slot, present) = self.find(m, key)?;
        let rec = self.heap_head;
        let mut r = vec![0u8; 8 + value.len()];
        r[..8].copy_from_slice(&(value.len() as u64).to_le_bytes());
        r[8..].copy_from_slice(value);
        m.write(rec, &r)?;
        self.heap_head += RECORD;
        m.write_u64(16, self.heap_head)?;
        if present {
            m.fence()?;
            m.write_u64(slot + 8, rec)?;
        } else {
            m.write_u64(slot + 8, rec)?;
            m.fence()?;
            m.write_u64(slot, key + 1)?;
        }
        m.commit()
    }

    /// The value of `key`.
    pub fn get(&self, m: &impl Mem, key: u64) -> Result<Option<Vec<u8>>> {
        if key == u64::MAX {
            return Ok(None);
        }
        match self.find(m, key)? {
            (s, true) => Ok(Some(self.read_record(m, m.read_u64(s + 8)?)?)),
            _ => Ok(None),
        }
    }

    /// Every key and value, in slot order.
    pub fn entries(&self, m: &impl Mem) -> Result<Vec<(u64, Vec<u8>)>> {
        let mut out = Vec::new();
        for i in 0..self.slots {
            let s = self.slot(i);
            let k = m.read_u64(s)?;
            if k != 0 {
                out.push((k - 1, self.read_record(m, m.read_u64(s + 8)?)?));
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::harness::XorShift;
    use crate::whisper::mem::VecMem;

    #[test]
    fn a_seeded_workload_matches_a_std_hash_map_and_reopens_the_same() {
        let mut m = VecMem::new(1 << 20);
        let mut h = HashMap::format(&mut m, 512, 1 << 20).unwrap();
        let mut reference = std::collections::HashMap::new();
        let mut rng = XorShift(0x1234_5678_9ABC_DEF1);
        for i in 0..3000u64 {
            let key = rng.next() % 300;
            if rng.next().is_multiple_of(4) {
                assert_eq!(h.get(&m, key).unwrap(), reference.get(&key).cloned(), "get {key} at op {i}");
            } else {
                let v = format!("v{i}-{}", rng.next() % 1000).into_bytes();
                h.put(&mut m, key, &v).unwrap();
                reference.insert(key, v);
            }
        }
        let mut got = HashMap::open(&m).unwrap().entries(&m).unwrap();
        got.sort();
        let mut want: Vec<_> = reference.into_iter().collect();
        want.sort();
        assert_eq!(got, want);
        assert!(m.fences >= 2 * 2000, "two epochs per put: {} fences", m.fences);
    }

    #[test]
    fn a_crash_between_the_epochs_leaves_the_old_state() {
        let mut m = VecMem::new(1 << 16);
        let mut h = HashMap::format(&mut m, 16, 1 << 16).unwrap();
        h.put(&mut m, 7, b"old").unwrap();
        // Replay an update's first epoch only: the record and the heap head, not the slot.
        let before = m.clone();
        h.put(&mut m, 7, b"new").unwrap();
        let mut crashed = before.clone();
        let rec = HashMap::open(&before).unwrap().heap_head;
        crashed.bytes[rec as usize..rec as usize + RECORD as usize]
            .copy_from_slice(&m.bytes[rec as usize..rec as usize + RECORD as usize]);
        crashed.bytes[16..24].copy_from_slice(&m.bytes[16..24]);
        let c = HashMap::open(&crashed).unwrap();
        assert_eq!(c.get(&crashed, 7).unwrap().as_deref(), Some(&b"old"[..]));
        assert_eq!(h.get(&m, 7).unwrap().as_deref(), Some(&b"new"[..]));
    }

    #[test]
    fn bad_input_is_refused_with_its_value() {
        let mut m = VecMem::new(4096);
        assert!(HashMap::format(&mut m, 1000, 4096).is_err());
        let mut h = HashMap::format(&mut m, 4, 4096).unwrap();
        let e = h.put(&mut m, 1, &[0; MAX_VALUE + 1]).unwrap_err().to_string();
        assert!(e.contains("57-byte value"), "{e}");
        for k in 0..4 {
            h.put(&mut m, k, b"x").unwrap();
        }
        assert!(h.put(&mut m, 9, b"x").unwrap_err().to_string().contains("slots are full"));
        assert!(HashMap::open(&VecMem::new(4096)).is_err());
    }
}
