//! A key of the selected database drawn at random (`RANDOMKEY`): from a random bucket on, the
//! first bucket that holds a live key of the database, and one of its live keys at random. A
//! key after a long run of empty buckets is drawn more often than one in a crowded stretch, as
//! with Redis's own draw from its dict's buckets; every live key can be drawn, no expired key
//! ever is.

use super::error::StoreError;
use super::layout::GEN_SHIFT;
use super::mem::Mem;
use super::Store;

/// Bucket words read at a time.
const WORDS: u64 = 512;

impl<M: Mem> Store<M> {
    /// A live key of the selected database into `out` (false when it has none), drawn with the
    /// random numbers `r0` (the bucket to start from) and `r1` (the key among its bucket's).
    /// Reads at most every bucket once.
    pub fn random_key(
        &mut self,
        r0: u64,
        r1: u64,
        now_ms: u64,
        out: &mut Vec<u8>,
    ) -> Result<bool, StoreError> {
        if self.db_keys(self.selected()) == 0 {
            return Ok(false);
        }
        let buckets = self.geo.buckets;
        let start = r0 % buckets;
        let mut words = vec![0u8; 8 * WORDS as usize];
        let mut seen = 0u64;
        let mut live = Vec::new();
        while seen < buckets {
            let b0 = (start + seen) % buckets;
            let n = WORDS.min(buckets - b0).min(buckets - seen);
            self.mem.read(self.geo.bucket(b0), &mut words[..8 * n as usize])?;
            for i in 0..n {
                let w = u64::from_le_bytes(
                    words[8 * i as usize..8 * i as usize + 8].try_into().expect("8 bytes"),
                );
                if w == 0 || w >> GEN_SHIFT != self.dy.gen {
                    continue;
                }
                live.clear();
                self.bucket_entries(b0 + i, |s, e, h| {
                    if !h.expired(now_ms) && s.in_selected(e, h)? {
                        live.push((e, *h));
                    }
                    Ok(())
                })?;
                if !live.is_empty() {
                    let (e, h) = live[(r1 % live.len() as u64) as usize];
                    self.key_into(e, &h, out)?;
                    return Ok(true);
                }
            }
            seen += n;
        }
        Ok(false)
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
}
