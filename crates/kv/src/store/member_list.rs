//! A small set's members in one blob (a set's value with `ENC_LISTPACK`, FORMAT.md §11.8):
//! `count` (u32), then per member its length (LEB128: 7 bits a byte, low first, the top bit set
//! on every byte but the last) and its bytes, in the order they were added. A member costs its
//! length and one byte (two past 127 bytes), as in Redis's listpack. Used only when
//! `set-max-listpack-entries` is above 0 (Redis 7.2's listpack sets; 7.0 has none, and 0 is the
//! default here); a change writes the whole blob again.

use super::error::StoreError;

/// The members of a blob, checked as they are read.
pub struct Members<'a> {
    blob: &'a [u8],
    at: usize,
    left: u32,
}

/// Reads a blob's members.
pub fn members(blob: &[u8]) -> Result<Members<'_>, StoreError> {
    let c = blob
        .get(..4)
        .ok_or_else(|| StoreError::Corrupt("a set's member list is shorter than 4 bytes".into()))?;
    Ok(Members { blob, at: 4, left: u32::from_le_bytes(c.try_into().expect("4 bytes")) })
}

/// Members in a blob.
pub fn count(blob: &[u8]) -> u32 {
    blob.get(..4).map_or(0, |c| u32::from_le_bytes(c.try_into().expect("4 bytes")))
}

impl<'a> Iterator for Members<'a> {
    type Item = Result<&'a [u8], StoreError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let at = self.at;
        let bad =
            || StoreError::Corrupt(format!("a set's member list: the member at byte {at} runs past its end"));
        let (mut len, mut shift, mut i) = (0u64, 0, at);
        let r = loop {
            let Some(&b) = self.blob.get(i) else { break Err(bad()) };
            if shift > 28 {
                break Err(bad());
            }
            len |= u64::from(b & 0x7F) << shift;
            shift += 7;
            i += 1;
            if b & 0x80 == 0 {
                break self.blob.get(i..i + len as usize).ok_or_else(bad);
            }
        };
        match r {
            Ok(m) => {
                self.at = i + m.len();
                Some(Ok(m))
            }
            Err(e) => {
                self.left = 0;
                Some(Err(e))
            }
        }
    }
}

/// The blob of `members` (distinct, in the order given).
pub fn encode<'m>(members: impl IntoIterator<Item = &'m [u8]>) -> Vec<u8> {
    let mut out = vec![0u8; 4];
    let mut n = 0u32;
    for m in members {
        let mut len = m.len() as u64;
        loop {
            let b = (len & 0x7F) as u8;
            len >>= 7;
            if len == 0 {
                out.push(b);
                break;
            }
            out.push(b | 0x80);
        }
        out.extend_from_slice(m);
        n += 1;
    }
    out[..4].copy_from_slice(&n.to_le_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let long = vec![b'x'; 300];
        let ms: Vec<&[u8]> = vec![b"a", b"", &long, b"bc"];
        let b = encode(ms.iter().copied());
        assert_eq!(count(&b), 4);
        assert_eq!(b.len(), 4 + 2 + 1 + 302 + 3);
        let got: Vec<&[u8]> = members(&b).unwrap().map(|m| m.unwrap()).collect();
        assert_eq!(got, ms);
    }

    #[test]
    fn damaged_blobs_are_errors() {
        let mut b = encode([&b"abc"[..]]);
        b.pop();
        assert!(members(&b).unwrap().next().unwrap().is_err());
        assert!(members(b"ab").is_err());
        let b = [1, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01];
        assert!(members(&b).unwrap().next().unwrap().is_err());
    }
}
