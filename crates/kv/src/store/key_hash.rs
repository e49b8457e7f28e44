//! Where a key goes: its bucket and the tag its entry keeps (to skip other keys of a chain
//! without reading them). A store made by this build hashes keys with SipHash-1-3 under a
//! key of its own, drawn at random when the store was made and kept in the superblock
//! (FORMAT.md §11.1), so that nobody who cannot read the region can choose keys that fall in
//! one bucket (hash flooding, as Redis seeds its dictionaries for). Stores of layout version 1
//! keep the unkeyed CRC32C they were made with.

use super::layout::bucket_of;
use std::hash::Hasher as _;

/// How a store's keys are hashed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyHasher {
    /// Layout version 1: CRC32C of the key, spread by a fixed mix.
    Crc32c,
    /// SipHash-1-3 under the store's 128-bit key.
    Keyed {
        /// The key's first half.
        k0: u64,
        /// The key's second half.
        k1: u64,
    },
    /// Tests: CRC32C masked to a few bits, so that many keys share a hash.
    #[cfg(test)]
    Masked(u64),
}

impl KeyHasher {
    /// A hasher under a fresh random key (for a store being made).
    pub fn random() -> KeyHasher {
        let mut b = [0u8; 16];
        mojim_transport::random::fill(&mut b);
        KeyHasher::from_bytes(&b)
    }

    /// The hasher whose key is `b` (as the superblock holds it).
    pub fn from_bytes(b: &[u8; 16]) -> KeyHasher {
        let k0 = u64::from_le_bytes(b[..8].try_into().expect("8 bytes"));
        let k1 = u64::from_le_bytes(b[8..].try_into().expect("8 bytes"));
        KeyHasher::Keyed { k0, k1 }
    }

    /// The key, as the superblock holds it (zero for [`KeyHasher::Crc32c`]).
    pub fn to_bytes(self) -> [u8; 16] {
        let mut b = [0u8; 16];
        if let KeyHasher::Keyed { k0, k1 } = self {
            b[..8].copy_from_slice(&k0.to_le_bytes());
            b[8..].copy_from_slice(&k1.to_le_bytes());
        }
        b
    }

    /// The 64-bit hash of `data` (the keyed hash; for version 1, CRC32C spread as buckets are).
    pub fn hash64(self, data: &[u8]) -> u64 {
        match self {
            KeyHasher::Crc32c => {
                let crc = crc32c::crc32c(data);
                (bucket_of(crc, 1 << 32) << 32) | u64::from(crc)
            }
            KeyHasher::Keyed { k0, k1 } => {
                let mut h = siphasher::sip::SipHasher13::new_with_keys(k0, k1);
                h.write(data);
                h.finish()
            }
            #[cfg(test)]
            KeyHasher::Masked(mask) => u64::from(crc32c::crc32c(data)) & mask,
        }
    }

    /// `key`'s bucket among `buckets` (a power of two) and its tag.
    pub fn locate(self, key: &[u8], buckets: u64) -> (u64, u32) {
        match self {
            KeyHasher::Crc32c => {
                let crc = crc32c::crc32c(key);
                (bucket_of(crc, buckets), crc)
            }
            _ => {
                let h = self.hash64(key);
                // Buckets from the low bits (at most 2^32 of them), the tag from the high.
                (h & (buckets - 1), (h >> 32) as u32)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_1_keys_stay_where_they_were() {
        let k = b"user:42";
        let crc = crc32c::crc32c(k);
        assert_eq!(KeyHasher::Crc32c.locate(k, 4096), (bucket_of(crc, 4096), crc));
    }

    #[test]
    fn keyed_hashes_depend_on_the_key_and_round_trip() {
        let a = KeyHasher::from_bytes(&[1; 16]);
        let b = KeyHasher::from_bytes(&[2; 16]);
        assert_ne!(a.hash64(b"x"), b.hash64(b"x"));
        assert_eq!(a.hash64(b"x"), a.hash64(b"x"));
        assert_eq!(KeyHasher::from_bytes(&a.to_bytes()), a);
        assert_ne!(KeyHasher::random(), KeyHasher::random());
        // SipHash-1-3 as the reference defines it (the siphasher crate's, checked here so that
        // a change of the crate cannot move every key of every store).
        let h = KeyHasher::Keyed { k0: 0x0706050403020100, k1: 0x0f0e0d0c0b0a0908 };
        assert_eq!(h.hash64(b""), 0xabac0158050fc4dc);
    }

    #[test]
    fn keys_chosen_for_one_crc_bucket_spread_under_a_keyed_hash() {
        // Keys that all share CRC32C's bucket (what a client can choose without the key)...
        let buckets = 1 << 12;
        let target = bucket_of(crc32c::crc32c(b"seed"), buckets);
        let mut same = Vec::new();
        let mut n = 0u64;
        while same.len() < 200 {
            let k = format!("k{n}");
            if bucket_of(crc32c::crc32c(k.as_bytes()), buckets) == target {
                same.push(k);
            }
            n += 1;
        }
        // ...fall in many buckets of a keyed store.
        let h = KeyHasher::random();
        let mut hit: Vec<u64> = same.iter().map(|k| h.locate(k.as_bytes(), buckets).0).collect();
        hit.sort_unstable();
        hit.dedup();
        assert!(hit.len() > 150, "{} buckets", hit.len());
    }
}
