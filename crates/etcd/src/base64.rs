//! Base64, the standard alphabet with padding (RFC 4648 §4): how etcd's JSON gateway carries
//! `bytes` fields. Decoding is strict: every character in the alphabet, the length a multiple of
//! four, padding only at the end, and no bits set past the last byte (one encoding per value).

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// `bytes` in base64.
pub(crate) fn encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [chunk[0], chunk.get(1).copied().unwrap_or(0), chunk.get(2).copied().unwrap_or(0)];
        let n = u32::from(b[0]) << 16 | u32::from(b[1]) << 8 | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The value of one base64 character.
fn value(c: u8) -> Option<u32> {
    match c {
        b'A'..=b'Z' => Some(u32::from(c - b'A')),
        b'a'..=b'z' => Some(u32::from(c - b'a') + 26),
        b'0'..=b'9' => Some(u32::from(c - b'0') + 52),
        b'+' => Some(62),
        b'/' => Some(63),
        _ => None,
    }
}

/// The bytes `text` encodes, or why it is not base64.
pub(crate) fn decode(text: &str) -> Result<Vec<u8>, String> {
    let t = text.as_bytes();
    if !t.len().is_multiple_of(4) {
        return Err(format!("its length {} is not a multiple of 4", t.len()));
    }
    let mut out = Vec::with_capacity(t.len() / 4 * 3);
    let quads = t.len() / 4;
    for (q, quad) in t.chunks(4).enumerate() {
        let pad = quad.iter().rev().take_while(|&&c| c == b'=').count();
        if pad > 2 {
            return Err(format!("{pad} padding characters at {}, at most 2", q * 4 + 4 - pad));
        }
        if pad > 0 && q + 1 != quads {
            return Err(format!("padding in the middle, at character {}", q * 4 + 4 - pad));
        }
        let mut n = 0u32;
        for (i, &c) in quad[..4 - pad].iter().enumerate() {
            let v = value(c)
                .ok_or_else(|| format!("character {:?} at {} is not base64", c as char, q * 4 + i))?;
            n |= v << (18 - 6 * i);
        }
        let bytes = n.to_be_bytes();
        let keep = 3 - pad;
        if bytes[1 + keep..].iter().any(|&b| b != 0) {
            return Err(format!("bits set past the last byte, at character {}", q * 4 + 3 - pad));
        }
        out.extend_from_slice(&bytes[1..1 + keep]);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 4648 §10.
    const VECTORS: [(&str, &str); 7] = [
        ("", ""),
        ("f", "Zg=="),
        ("fo", "Zm8="),
        ("foo", "Zm9v"),
        ("foob", "Zm9vYg=="),
        ("fooba", "Zm9vYmE="),
        ("foobar", "Zm9vYmFy"),
    ];

    #[test]
    fn the_rfc_vectors_encode_and_decode() {
        for (plain, coded) in VECTORS {
            assert_eq!(encode(plain.as_bytes()), coded);
            assert_eq!(decode(coded).unwrap(), plain.as_bytes());
        }
    }

    #[test]
    fn every_byte_value_and_length_round_trips() {
        let bytes: Vec<u8> = (0..=255u8).chain((0..=255u8).rev()).collect();
        for len in 0..bytes.len() {
            assert_eq!(decode(&encode(&bytes[..len])).unwrap(), &bytes[..len], "length {len}");
        }
    }

    #[test]
    fn anything_else_is_refused_with_its_reason() {
        for (bad, why) in [
            ("Zm9", "multiple of 4"),
            ("Zm=v", "not base64"),
            ("Zg==Zg==", "padding in the middle"),
            ("Z===", "at most 2"),
            ("Zm9v!A==", "not base64"),
            ("Zh==", "bits set past the last byte"),
            ("Zm9=", "bits set past the last byte"),
            ("Zm9v\n", "multiple of 4"),
        ] {
            let e = decode(bad).unwrap_err();
            assert!(e.contains(why), "{bad:?}: {e}");
        }
    }
}
