//! A key of the selected database drawn at random (`RANDOMKEY`), every live key about equally
//! likely and no expired key ever.
//!
//! Where the buckets are dense enough for a random bucket to hold a key often, the draw is
//! Redis's: random buckets until one holds a live key of the database, and one of its keys at
//! random (a key sharing its bucket is drawn less often, as in Redis). Where they are sparse (a
//! large store holding few keys) or the probes all miss, one pass over every bucket draws
//! uniformly among the live keys (reservoir sampling), so that two keys among many empty
//! buckets come up equally often whatever the buckets between them.

use super::error::StoreError;
use super::layout::GEN_SHIFT;
use super::mem::Mem;
use super::Store;

/// Bucket words read at a time in the pass over every bucket.
const WORDS: u64 = 512;

/// Random buckets tried before the pass over every bucket.
const PROBES: u32 = 256;

/// Probing is tried only when a random bucket holds a key of the database at least once in
/// this many tries on average (buckets / keys); otherwise the pass is cheaper.
const DENSE: u64 = 32;

/// SplitMix64: the next of a stream of random numbers drawn from one seed.
fn next(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl<M: Mem> Store<M> {
    /// A live key of the selected database into `out` (false when it has none), drawn with the
    /// random seed `r0`, `r1`. Reads at most [`PROBES`] bucket words and then every bucket once.
    pub fn random_key(
        &mut self,
        r0: u64,
        r1: u64,
        now_ms: u64,
        out: &mut Vec<u8>,
    ) -> Result<bool, StoreError> {
        let keys = self.db_keys(self.selected());
        if keys == 0 {
            return Ok(false);
        }
        let mut rng = r0 ^ r1.rotate_left(32);
        let buckets = self.geo.buckets;
        let mut live = Vec::new();
        if buckets / keys <= DENSE {
            let mut word = [0u8; 8];
            for _ in 0..PROBES {
                let b = next(&mut rng) % buckets;
                self.mem.read(self.geo.bucket(b), &mut word)?;
                let w = u64::from_le_bytes(word);
                if w == 0 || w >> GEN_SHIFT != self.dy.gen {
                    continue;
                }
                live.clear();
                self.bucket_entries(b, |s, e, h| {
                    if !h.expired(now_ms) && s.in_selected(e, h)? {
                        live.push((e, *h));
                    }
                    Ok(())
                })?;
                if !live.is_empty() {
                    let (e, h) = live[(next(&mut rng) % live.len() as u64) as usize];
                    self.key_into(e, &h, out)?;
                    return Ok(true);
                }
            }
        }
        let mut words = vec![0u8; 8 * WORDS as usize];
        let mut seen = 0u64;
        let mut chosen = None;
        let mut b0 = 0u64;
        while b0 < buckets {
            let n = WORDS.min(buckets - b0);
            self.mem.read(self.geo.bucket(b0), &mut words[..8 * n as usize])?;
            for i in 0..n {
                let w = u64::from_le_bytes(
                    words[8 * i as usize..8 * i as usize + 8].try_into().expect("8 bytes"),
                );
                if w == 0 || w >> GEN_SHIFT != self.dy.gen {
                    continue;
                }
                self.bucket_entries(b0 + i, |s, e, h| {
                    if !h.expired(now_ms) && s.in_selected(e, h)? {
                        // The k-th live key replaces the one kept with chance 1/k.
                        seen += 1;
                        if next(&mut rng).is_multiple_of(seen) {
                            chosen = Some((e, *h));
                        }
                    }
                    Ok(())
                })?;
            }
            b0 += n;
        }
        match chosen {
            Some((e, h)) => {
                self.key_into(e, &h, out)?;
                Ok(true)
            }
            None => Ok(false),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::layout::KIND_STRING;
    use super::super::VecMem;
    use super::*;

    #[test]
    fn draws_every_live_key_of_the_database_and_never_an_expired_one() {
        let mut s = Store::open(VecMem::new(1 << 20), 64).unwrap();
        let mut k = Vec::new();
        assert!(!s.random_key(1, 2, 1000, &mut k).unwrap());
        for i in 0..20 {
            let name = format!("key{i}");
            let expire = if i % 2 == 0 { 500 } else { 0 };
            s.put(name.as_bytes(), KIND_STRING, expire, &[b"v"], 0, None).unwrap();
        }
        s.select(1);
        s.put(b"other", KIND_STRING, 0, &[b"v"], 0, None).unwrap();
        s.select(0);
        let mut drawn = std::collections::BTreeSet::new();
        let mut x = 7u64;
        for _ in 0..2000 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            assert!(s.random_key(x >> 7, x >> 29, 1000, &mut k).unwrap());
            drawn.insert(String::from_utf8(k.clone()).unwrap());
        }
        let want: std::collections::BTreeSet<String> =
            (1..20).step_by(2).map(|i| format!("key{i}")).collect();
        assert_eq!(drawn, want);
        // Every key expired: none, after one pass over the buckets.
        let mut s2 = Store::open(VecMem::new(1 << 20), 64).unwrap();
        s2.put(b"gone", KIND_STRING, 10, &[b"v"], 0, None).unwrap();
        assert!(!s2.random_key(3, 4, 1000, &mut k).unwrap());
    }

    #[test]
    fn two_keys_among_many_empty_buckets_come_up_equally_often() {
        // Each store hashes under its own random key, so the two keys land wherever; a draw
        // from the first key after a random bucket favoured the one after the longer gap (a
        // key right behind the other came up once in a thousand draws).
        let mut k = Vec::new();
        for round in 0..10u64 {
            let mut s = Store::open(VecMem::new(1 << 20), 64).unwrap();
            s.put(b"foo", KIND_STRING, 0, &[b"v"], 0, None).unwrap();
            s.put(b"bar", KIND_STRING, 0, &[b"v"], 0, None).unwrap();
            let mut foo = 0;
            let mut x = round;
            for _ in 0..2000 {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                assert!(s.random_key(x, x >> 17, 1000, &mut k).unwrap());
                foo += u32::from(k == b"foo");
            }
            // Binomial(2000, 1/2): 1000 ± 22; 800 is nine deviations away.
            assert!((800..=1200).contains(&foo), "round {round}: foo drawn {foo} times of 2000");
        }
    }
}
