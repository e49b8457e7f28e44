//! A key's hash slot, as Redis Cluster computes it: CRC16 (XMODEM: polynomial 0x1021, initial
//! value 0, no reflection, as Redis's `crc16.c`) of the key, or of its hash tag, modulo
//! [`SLOTS`].
//!
//! The hash tag: when the key holds a `{`, and a `}` after it with at least one byte between,
//! only the bytes between the first `{` and the first `}` after it are hashed, so that
//! `{user1000}.following` and `{user1000}.followers` share a slot.

use super::topology::SLOTS;

/// CRC16-XMODEM's table, built at compile time.
const TABLE: [u16; 256] = {
    let mut t = [0u16; 256];
    let mut i = 0;
    while i < 256 {
        let mut crc = (i as u16) << 8;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 0x8000 != 0 { (crc << 1) ^ 0x1021 } else { crc << 1 };
            bit += 1;
        }
        t[i] = crc;
        i += 1;
    }
    t
};

/// CRC16-XMODEM of `bytes`.
pub fn crc16(bytes: &[u8]) -> u16 {
    bytes.iter().fold(0u16, |crc, &b| (crc << 8) ^ TABLE[usize::from((crc >> 8) as u8 ^ b)])
}

/// The part of `key` that is hashed: its hash tag, if it has a non-empty one, else all of it.
pub fn hash_tag(key: &[u8]) -> &[u8] {
    let Some(open) = key.iter().position(|&c| c == b'{') else { return key };
    match key[open + 1..].iter().position(|&c| c == b'}') {
        Some(len) if len > 0 => &key[open + 1..open + 1 + len],
        _ => key,
    }
}

/// The hash slot of `key`, `0..SLOTS`.
pub fn key_slot(key: &[u8]) -> u16 {
    // SLOTS is a power of two: the modulo is a mask, as Redis's `& 0x3FFF`.
    const _: () = assert!(SLOTS.is_power_of_two());
    crc16(hash_tag(key)) & (SLOTS - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc16_is_xmodem() {
        // The check value of CRC-16/XMODEM, and Redis's crc16.c test vector.
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(crc16(b""), 0);
    }

    #[test]
    fn slots_are_redis_slots() {
        // As `CLUSTER KEYSLOT` answers on Redis 7.0.
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"somekey"), 11058);
        assert_eq!(key_slot(b"bar"), 5061);
        assert_eq!(key_slot(b""), 0);
    }

    #[test]
    fn hash_tags() {
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"{user1000}.followers"));
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
        // An empty tag: the whole key.
        assert_eq!(hash_tag(b"foo{}{bar}"), b"foo{}{bar}");
        assert_eq!(key_slot(b"foo{}{bar}"), crc16(b"foo{}{bar}") % SLOTS);
        // The first `{` and the first `}` after it.
        assert_eq!(hash_tag(b"foo{{bar}}zap"), b"{bar");
        assert_eq!(hash_tag(b"foo{bar}{zap}"), b"bar");
        // No `}` after the `{`: the whole key.
        assert_eq!(hash_tag(b"}foo{bar"), b"}foo{bar");
        assert_eq!(hash_tag(b"{"), b"{");
        assert_eq!(hash_tag(b"{a}"), b"a");
    }
}
