//! WHISPER-style persistent data structures (Nalli et al., as used in §7.2 and Fig. 7 of the
//! RDMA mirroring study of Kokolis et al.), built in a Mojim region and run under the fence
//! strategies of `crate::transact` (`no-sm`, `sm-rc`, `sm-ob`):
//! - [`hashmap`]: a hash table of small values, inserts, updates and lookups;
//! - [`ctree`]: a crit-bit tree, inserts, updates and ordered range reads;
//! - [`echo`]: a log-structured key-value store taking batches of puts.
//!
//! Each structure's module documents the order of its stores and syncs. [`workload`] drives one
//! of them with a seeded mix and checks every read against a std map as it goes; [`decode`]
//! reads a structure's contents back (from the primary's region or a mirror's copy). The
//! benchmark (`mojim bench --whisper`) is [`driver`].

pub mod ctree;
pub mod driver;
pub mod echo;
pub mod hashmap;
pub mod mem;

use crate::bench::harness::XorShift;
use mem::Mem;
use mojim::error::{Error, Result};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// A structure's contents: key to value bytes (a crit-bit value as its 8 little-endian bytes).
pub type Contents = BTreeMap<u64, Vec<u8>>;

/// Bytes per value in the hash map and echo workloads.
pub const VALUE: usize = 32;
/// Keys per crit-bit range read.
pub const RANGE: usize = 16;

/// The structures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Structure {
    /// [`hashmap::HashMap`].
    HashMap,
    /// [`ctree::CritBit`].
    CritBit,
    /// [`echo::Echo`].
    Echo,
}

impl Structure {
    /// Every structure, in report order.
    pub const ALL: [Structure; 3] = [Structure::HashMap, Structure::CritBit, Structure::Echo];

    /// The name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Structure::HashMap => "hashmap",
            Structure::CritBit => "ctree",
            Structure::Echo => "echo",
        }
    }
}

/// A seeded workload's size.
#[derive(Clone, Copy, Debug)]
pub struct Workload {
    /// Operations (an echo operation is one batch).
    pub ops: u64,
    /// Distinct keys drawn from.
    pub keys: u64,
    /// Puts per echo batch.
    pub batch: u64,
    /// The generator's seed.
    pub seed: u64,
}

impl Workload {
    /// Bytes of region `s` needs for this workload.
    pub fn bytes(&self, s: Structure) -> u64 {
        match s {
            Structure::HashMap => hashmap::HashMap::bytes(2 * self.keys, self.ops),
            Structure::CritBit => ctree::CritBit::bytes(self.ops, self.ops),
            Structure::Echo => echo::Echo::bytes(self.ops * self.batch, VALUE),
        }
    }
}

/// A crit-bit key spread over all 64 bits, from a small key number.
fn wide(k: u64) -> u64 {
    k.wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

fn mismatch(s: Structure, op: u64, what: String) -> Error {
    Error::Config(format!("whisper {}: operation {op} read {what}", s.name()))
}

/// Formats `s` in the first `w.bytes(s)` bytes of `m` and runs `w` on it: the hash map 4 puts
/// (insert or update, [`VALUE`]-byte values) to 1 lookup, the crit-bit tree 4 puts to 1 range
/// read of [`RANGE`] keys, echo batches of `w.batch` puts. `each` gets every operation's
/// latency; every read is checked against a std map. Returns what the structure should hold
/// and the fences its operations took (the format's excluded).
pub fn workload(s: Structure, m: &mut impl Mem, w: &Workload, each: impl FnMut(Duration)) -> Result<Ran> {
    let mut formatted = 0;
    let contents = run(s, m, w, each, &mut formatted)?;
    Ok(Ran { contents, fences: m.fences() - formatted })
}

/// What [`workload`] did.
#[derive(Clone, Debug)]
pub struct Ran {
    /// What the structure should hold.
    pub contents: Contents,
    /// Fences (commits included) of the operations.
    pub fences: u64,
}

fn run(
    s: Structure,
    m: &mut impl Mem,
    w: &Workload,
    mut each: impl FnMut(Duration),
    formatted: &mut u64,
) -> Result<Contents> {
    let mut rng = XorShift(w.seed | 1);
    let mut want = Contents::new();
    let size = w.bytes(s);
    let keys = w.keys.max(1);
    match s {
        Structure::HashMap => {
            let mut h = hashmap::HashMap::format(m, 2 * keys, size)?;
            *formatted = m.fences();
            for op in 0..w.ops {
                let key = rng.next() % keys;
                let t = Instant::now();
                if rng.next().is_multiple_of(5) {
                    let got = h.get(m, key)?;
                    each(t.elapsed());
                    if got.as_ref() != want.get(&key) {
                        return Err(mismatch(s, op, format!("{got:?} for key {key}")));
                    }
                } else {
                    let v = [(op % 251) as u8; VALUE];
                    h.put(m, key, &v)?;
                    each(t.elapsed());
                    want.insert(key, v.to_vec());
                }
            }
        }
        Structure::CritBit => {
            let mut c = ctree::CritBit::format(m, size)?;
            *formatted = m.fences();
            for op in 0..w.ops {
                let key = wide(rng.next() % keys);
                let t = Instant::now();
                if rng.next().is_multiple_of(5) {
                    let got = c.range(m, key, RANGE)?;
                    each(t.elapsed());
                    let exp: Vec<(u64, u64)> = want
                        .range(key..)
                        .take(RANGE)
                        .map(|(k, v)| (*k, u64::from_le_bytes(v[..8].try_into().expect("8 bytes"))))
                        .collect();
                    if got != exp {
                        return Err(mismatch(
                            s,
                            op,
                            format!("{} keys from {key}, not {}", got.len(), exp.len()),
                        ));
                    }
                } else {
                    c.put(m, key, op)?;
                    each(t.elapsed());
                    want.insert(key, op.to_le_bytes().to_vec());
                }
            }
        }
        Structure::Echo => {
            let mut e = echo::Echo::format(m, size)?;
            *formatted = m.fences();
            for op in 0..w.ops {
                let vals: Vec<(u64, [u8; VALUE])> =
                    (0..w.batch).map(|i| (rng.next() % keys, [((op + i) % 251) as u8; VALUE])).collect();
                let batch: Vec<(u64, &[u8])> = vals.iter().map(|(k, v)| (*k, &v[..])).collect();
                let t = Instant::now();
                e.put_batch(m, &batch)?;
                each(t.elapsed());
                for (k, v) in vals {
                    want.insert(k, v.to_vec());
                }
                let key = rng.next() % keys;
                let got = e.get(m, key)?;
                if got.as_ref() != want.get(&key) {
                    return Err(mismatch(s, op, format!("{got:?} for key {key}")));
                }
            }
        }
    }
    Ok(want)
}

/// Reads back what structure `s` in `m` holds.
pub fn decode(s: Structure, m: &impl Mem) -> Result<Contents> {
    Ok(match s {
        Structure::HashMap => {
            let h = hashmap::HashMap::open(m)?;
            h.entries(m)?.into_iter().collect()
        }
        Structure::CritBit => {
            let c = ctree::CritBit::open(m)?;
            c.range(m, 0, usize::MAX)?.into_iter().map(|(k, v)| (k, v.to_le_bytes().to_vec())).collect()
        }
        Structure::Echo => echo::Echo::open(m)?.entries(m)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use mem::VecMem;

    #[test]
    fn every_workload_decodes_to_what_it_says_the_structure_holds() {
        let w = Workload { ops: 1500, keys: 300, batch: 4, seed: 42 };
        for s in Structure::ALL {
            let mut m = VecMem::new(w.bytes(s) as usize);
            let mut n = 0;
            let ran = workload(s, &mut m, &w, |_| n += 1).unwrap();
            let want = ran.contents;
            assert_eq!(n, w.ops, "{}", s.name());
            assert!(ran.fences >= w.ops, "{}: {} fences", s.name(), ran.fences);
            assert!(want.len() > 100, "{}: {} keys", s.name(), want.len());
            assert_eq!(decode(s, &m).unwrap(), want, "{}", s.name());
        }
    }
}
