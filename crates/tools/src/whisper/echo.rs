//! WHISPER's echo: a log-structured key-value store taking puts in batches.
//!
//! Layout, from offset 0 of the memory: a header (64 bytes: magic, committed tail, log end),
//! then the log from offset 64: records of a key (u64), a length (u64) and the value, padded to
//! 8 bytes. The index (key to its latest record) is volatile, rebuilt by one scan of the log up
//! to the committed tail on open, as echo rebuilds its in-memory store.
//!
//! Order of stores and syncs for a **batch of puts** (each line one epoch; the last ended by
//! the commit): (1) all the batch's records, one write beyond the committed tail; (2) the tail,
//! one 8-byte store that commits the whole batch. A crash before the last fence leaves none of
//! the batch (its records lie beyond the tail, ignored and overwritten); after it, all of it. A
//! get reads the index and one record.

use super::mem::Mem;
use mojim::error::{Error, Result};
use std::collections::{BTreeMap, HashMap};

const MAGIC: u64 = 0x5748_4953_5045_4331; // "WHISPEC1"
const HEADER: u64 = 64;
const TAIL: u64 = 8;
/// Largest value.
pub const MAX_VALUE: usize = 1 << 20;

/// An echo store in a [`Mem`].
#[derive(Clone, Debug)]
pub struct Echo {
    tail: u64,
    end: u64,
    index: HashMap<u64, (u64, usize)>,
}

fn corrupt(what: &str) -> Error {
    Error::Config(format!("whisper echo: {what}; format the area again"))
}

fn record_len(value: usize) -> u64 {
    16 + (value as u64).next_multiple_of(8)
}

impl Echo {
    /// Bytes needed for `puts` values of `value` bytes.
    pub fn bytes(puts: u64, value: usize) -> u64 {
        HEADER + puts * record_len(value)
    }

    /// Formats the first `size` bytes of `m` as an empty store, durably.
    pub fn format(m: &mut impl Mem, size: u64) -> Result<Echo> {
        if size < HEADER + 16 || size > m.size() {
            return Err(Error::Config(format!(
                "whisper echo: {size} bytes hold no record; use a larger --region-size"
            )));
        }
        let mut h = [0u8; 24];
        for (i, v) in [MAGIC, HEADER, size].into_iter().enumerate() {
            h[i * 8..i * 8 + 8].copy_from_slice(&v.to_le_bytes());
        }
        m.write(0, &h)?;
        m.commit()?;
        Ok(Echo { tail: HEADER, end: size, index: HashMap::new() })
    }

    /// Opens a formatted store, rebuilding its index from the log.
    pub fn open(m: &impl Mem) -> Result<Echo> {
        if m.read_u64(0)? != MAGIC {
            return Err(corrupt("no magic number at offset 0"));
        }
        let (tail, end) = (m.read_u64(TAIL)?, m.read_u64(16)?);
        if tail < HEADER || tail > end || end > m.size() {
            return Err(corrupt("the header's log does not fit"));
        }
        let mut index = HashMap::new();
        let mut at = HEADER;
        while at < tail {
            let (key, len) = (m.read_u64(at)?, m.read_u64(at + 8)?);
            if len > MAX_VALUE as u64 || at + record_len(len as usize) > tail {
                return Err(corrupt("a record runs past the committed tail"));
            }
            index.insert(key, (at + 16, len as usize));
            at += record_len(len as usize);
        }
        Ok(Echo { tail, end, index })
    }

    /// Puts every key and value of `batch` (later ones win); durable on return.
    pub fn put_batch(&mut self, m: &mut impl Mem, batch: &[(u64, &[u8])]) -> Result<()> {
        let mut log = Vec::new();
        for (k, v) in batch {
            if v.len() > MAX_VALUE {
                return Err(Error::Config(format!(
                    "whisper echo: a {}-byte value for key {k} is larger than {MAX_VALUE}",
                    v.len()
                )));
            }
            log.extend_from_slice(&k.to_le_bytes());
            log.extend_from_slice(&(v.len() as u64).to_le_bytes());
            log.extend_from_slice(v);
            log.resize(log.len().next_multiple_of(8), 0);
        }
        if self.tail + log.len() as u64 > self.end {
            return Err(Error::Config("whisper echo: the log is full; use a larger area".into()));
        }
        if log.is_empty() {
            return Ok(());
        }
        m.write(self.tail, &log)?;
        m.fence()?;
        let mut at = self.tail;
        for (k, v) in batch {
            self.index.insert(*k, (at + 16, v.len()));
            at += record_len(v.len());
        }
        self.tail = at;
        m.write_u64(TAIL, self.tail)?;
        m.commit()
    }

    /// The value of `key`.
    pub fn get(&self, m: &impl Mem, key: u64) -> Result<Option<Vec<u8>>> {
        match self.index.get(&key) {
            Some(&(at, len)) => {
                let mut v = vec![0; len];
                m.read(at, &mut v)?;
                Ok(Some(v))
            }
            None => Ok(None),
        }
    }

    /// Every key and its latest value, in key order.
    pub fn entries(&self, m: &impl Mem) -> Result<BTreeMap<u64, Vec<u8>>> {
        let mut out = BTreeMap::new();
        for &k in self.index.keys() {
            out.insert(k, self.get(m, k)?.expect("indexed"));
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
    fn seeded_batches_match_a_btree_map_and_the_log_rebuilds_the_same() {
        let mut m = VecMem::new(1 << 20);
        let mut e = Echo::format(&mut m, 1 << 20).unwrap();
        let mut reference = BTreeMap::new();
        let mut rng = XorShift(0xEC40_0000_0000_0001);
        for i in 0..500u64 {
            let n = 1 + rng.next() % 8;
            let vals: Vec<(u64, Vec<u8>)> =
                (0..n).map(|j| (rng.next() % 200, vec![(i + j) as u8; (rng.next() % 40) as usize])).collect();
            let batch: Vec<(u64, &[u8])> = vals.iter().map(|(k, v)| (*k, &v[..])).collect();
            e.put_batch(&mut m, &batch).unwrap();
            for (k, v) in vals {
                reference.insert(k, v);
            }
            let k = rng.next() % 200;
            assert_eq!(e.get(&m, k).unwrap(), reference.get(&k).cloned());
        }
        assert_eq!(e.entries(&m).unwrap(), reference);
        assert_eq!(Echo::open(&m).unwrap().entries(&m).unwrap(), reference);
        assert_eq!(m.fences, 1 + 2 * 500, "the format, then two epochs per batch");
    }

    #[test]
    fn records_beyond_the_tail_are_not_there_and_bad_input_is_refused() {
        let mut m = VecMem::new(4096);
        let mut e = Echo::format(&mut m, 4096).unwrap();
        e.put_batch(&mut m, &[(1, b"one")]).unwrap();
        let before = m.clone();
        e.put_batch(&mut m, &[(2, b"two")]).unwrap();
        // The batch's first epoch without its second: the record, not the tail.
        let mut crashed = m.clone();
        crashed.bytes[8..16].copy_from_slice(&before.bytes[8..16]);
        let c = Echo::open(&crashed).unwrap();
        assert_eq!(c.get(&crashed, 2).unwrap(), None);
        assert_eq!(c.get(&crashed, 1).unwrap().as_deref(), Some(&b"one"[..]));
        assert!(e.put_batch(&mut m, &[(3, &[0; 5000])]).unwrap_err().to_string().contains("log is full"));
        assert!(Echo::open(&VecMem::new(4096)).is_err());
        assert!(Echo::format(&mut m, 70).is_err());
    }
}
