//! Redis's listpack, as an RDB payload carries a small hash (and later small lists, sets and
//! sorted sets): `total_bytes` (u32), `count` (u16; 65535: not known), the entries, the end
//! byte 0xFF. An entry is its encoding and data, then its own length written backwards
//! (`backlen`, 1 to 5 bytes of 7 bits, the high bit set on all but the first). Encodings:
//!
//! | first byte | entry |
//! | --- | --- |
//! | `0xxxxxxx` | an integer 0 .. 127 |
//! | `10llllll` | a string of up to 63 bytes |
//! | `110xxxxx` + 1 byte | a 13-bit signed integer |
//! | `1110llll` + 1 byte | a string of up to 4095 bytes (12-bit length, big end first) |
//! | `0xF0` + u32 | a longer string |
//! | `0xF1`, `0xF2`, `0xF3`, `0xF4` | a 16-, 24-, 32-, 64-bit signed integer, little-endian |
//!
//! Integers read back as their decimal text, which is what a hash holds. Writing uses an
//! integer's encoding for a string that is one in Redis's canonical form, as Redis does.

use crate::resp::parse_i64;

/// The end byte.
const EOF: u8 = 0xFF;
/// Bytes of the header.
const HEADER: usize = 6;

/// A listpack's entries, each as bytes (an integer as its decimal text); `None` if the bytes
/// are not a listpack, whole and consistent.
pub fn decode(lp: &[u8]) -> Option<Vec<Vec<u8>>> {
    if lp.len() < HEADER + 1 {
        return None;
    }
    let total = u32::from_le_bytes(lp[..4].try_into().expect("4 bytes")) as usize;
    let count = usize::from(u16::from_le_bytes(lp[4..6].try_into().expect("2 bytes")));
    if total != lp.len() || lp[total - 1] != EOF {
        return None;
    }
    let mut out = Vec::new();
    let mut at = HEADER;
    while lp[at] != EOF {
        let (value, len) = entry(&lp[at..total - 1])?;
        // The backlen must say the entry's length.
        let (back, blen) = backlen(len);
        if lp.get(at + len..at + len + blen)? != &back[..blen] {
            return None;
        }
        out.push(value);
        at += len + blen;
        if at >= total {
            return None;
        }
    }
    if at != total - 1 || (count != 65535 && count != out.len()) {
        return None;
    }
    Some(out)
}

/// The entry at the start of `b` (which ends before the listpack's end byte): its value and
/// the bytes of its encoding and data.
fn entry(b: &[u8]) -> Option<(Vec<u8>, usize)> {
    let c = *b.first()?;
    let int = |v: i64, len: usize| Some((v.to_string().into_bytes(), len));
    let le = |n: usize| -> Option<u64> {
        let bytes = b.get(1..1 + n)?;
        Some(bytes.iter().rev().fold(0u64, |acc, &x| (acc << 8) | u64::from(x)))
    };
    // A two's-complement integer of `bits` bits.
    let signed = |u: u64, bits: u32| -> i64 {
        if bits == 64 {
            u as i64
        } else if u >> (bits - 1) & 1 == 1 {
            (u as i64) - (1i64 << bits)
        } else {
            u as i64
        }
    };
    let string = |start: usize, n: usize| Some((b.get(start..start + n)?.to_vec(), start + n));
    match c {
        0x00..=0x7F => int(i64::from(c), 1),
        0x80..=0xBF => string(1, usize::from(c & 0x3F)),
        0xC0..=0xDF => {
            let u = (u64::from(c & 0x1F) << 8) | u64::from(*b.get(1)?);
            int(signed(u, 13), 2)
        }
        0xE0..=0xEF => string(2, (usize::from(c & 0x0F) << 8) | usize::from(*b.get(1)?)),
        0xF0 => string(5, le(4)? as usize),
        0xF1 => int(signed(le(2)?, 16), 3),
        0xF2 => int(signed(le(3)?, 24), 4),
        0xF3 => int(signed(le(4)?, 32), 5),
        0xF4 => int(signed(le(8)?, 64), 9),
        _ => None,
    }
}

/// The backlen of an entry of `len` bytes: its bytes, and how many of them.
fn backlen(len: usize) -> ([u8; 5], usize) {
    let mut b = [0u8; 5];
    let n = match len {
        0..=127 => 1,
        128..=16382 => 2,
        16383..=2097150 => 3,
        2097151..=268435454 => 4,
        _ => 5,
    };
    // The first byte holds the highest 7 bits, without the high bit; the others have it.
    for (i, slot) in b.iter_mut().take(n).enumerate() {
        let shift = 7 * (n - 1 - i);
        let v = ((len >> shift) & 0x7F) as u8;
        *slot = if i == 0 { v } else { v | 0x80 };
    }
    (b, n)
}

/// A listpack of `entries`.
pub fn encode<'a>(entries: impl IntoIterator<Item = &'a [u8]>) -> Vec<u8> {
    let mut lp = vec![0u8; HEADER];
    let mut count = 0usize;
    for e in entries {
        let start = lp.len();
        match parse_i64(e) {
            Some(v @ 0..=127) => lp.push(v as u8),
            Some(v @ -4096..=4095) => {
                let u = (v as u64) & 0x1FFF;
                lp.push(0xC0 | (u >> 8) as u8);
                lp.push(u as u8);
            }
            Some(v @ -32768..=32767) => {
                lp.push(0xF1);
                lp.extend_from_slice(&(v as i16).to_le_bytes());
            }
            Some(v @ -8_388_608..=8_388_607) => {
                lp.push(0xF2);
                lp.extend_from_slice(&(v as i32).to_le_bytes()[..3]);
            }
            Some(v) if i32::try_from(v).is_ok() => {
                lp.push(0xF3);
                lp.extend_from_slice(&(v as i32).to_le_bytes());
            }
            Some(v) => {
                lp.push(0xF4);
                lp.extend_from_slice(&v.to_le_bytes());
            }
            None if e.len() < 64 => {
                lp.push(0x80 | e.len() as u8);
                lp.extend_from_slice(e);
            }
            None if e.len() < 4096 => {
                lp.push(0xE0 | (e.len() >> 8) as u8);
                lp.push(e.len() as u8);
                lp.extend_from_slice(e);
            }
            None => {
                lp.push(0xF0);
                lp.extend_from_slice(&(e.len() as u32).to_le_bytes());
                lp.extend_from_slice(e);
            }
        }
        let (back, n) = backlen(lp.len() - start);
        lp.extend_from_slice(&back[..n]);
        count += 1;
    }
    lp.push(EOF);
    let total = lp.len() as u32;
    lp[..4].copy_from_slice(&total.to_le_bytes());
    lp[4..6].copy_from_slice(&(count.min(65535) as u16).to_le_bytes());
    lp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_every_encoding() {
        let long = vec![b'z'; 5000];
        let mid = vec![b'm'; 300];
        let values: Vec<&[u8]> = vec![
            b"",
            b"0",
            b"127",
            b"128",
            b"-1",
            b"-4096",
            b"4095",
            b"4096",
            b"-32768",
            b"32767",
            b"32768",
            b"-8388608",
            b"8388607",
            b"8388608",
            b"2147483647",
            b"-2147483649",
            b"9223372036854775807",
            b"-9223372036854775808",
            b"01",
            b"+1",
            b"field",
            &mid,
            &long,
        ];
        let lp = encode(values.iter().copied());
        let back = decode(&lp).unwrap();
        assert_eq!(back, values.iter().map(|v| v.to_vec()).collect::<Vec<_>>());
    }

    /// Bytes Redis 7.0 writes for `HSET h a 1 b hello` (its listpack, taken from a DUMP).
    #[test]
    fn reads_and_writes_redis_s_bytes() {
        let lp = encode([&b"a"[..], b"1", b"b", b"hello"]);
        assert_eq!(
            lp,
            [
                22, 0, 0, 0, 4, 0, 0x81, b'a', 2, 1, 1, 0x81, b'b', 2, 0x85, b'h', b'e', b'l', b'l', b'o', 6,
                0xFF
            ]
        );
        assert_eq!(
            decode(&lp).unwrap(),
            vec![b"a".to_vec(), b"1".to_vec(), b"b".to_vec(), b"hello".to_vec()]
        );
    }

    #[test]
    fn anything_inconsistent_is_refused() {
        let lp = encode([&b"a"[..], b"1"]);
        let mut bad = lp.clone();
        bad[0] += 1;
        assert_eq!(decode(&bad), None, "total bytes");
        let mut bad = lp.clone();
        bad[4] = 3;
        assert_eq!(decode(&bad), None, "count");
        let mut bad = lp.clone();
        *bad.last_mut().unwrap() = 0;
        assert_eq!(decode(&bad), None, "no end byte");
        let mut bad = lp.clone();
        bad[8] = 9;
        assert_eq!(decode(&bad), None, "a backlen");
        let mut bad = lp.clone();
        bad[6] = 0xF5;
        assert_eq!(decode(&bad), None, "an encoding");
        let mut bad = lp.clone();
        bad[6] = 0xBF;
        assert_eq!(decode(&bad), None, "a string past the end");
        assert_eq!(decode(&[7, 0, 0, 0, 0, 0, 0xFF]), Some(vec![]));
        assert_eq!(decode(&[]), None);
        let mut unknown = lp.clone();
        unknown[4..6].copy_from_slice(&65535u16.to_le_bytes());
        assert_eq!(decode(&unknown).unwrap().len(), 2, "a count not known is counted");
    }
}
