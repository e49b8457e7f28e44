//! The RDB format's lengths and strings. A length is 6 bits in its first byte (`00`), 14 bits
//! in two (`01`), a big-endian u32 after `0x80` or u64 after `0x81`; `11` marks a string of a
//! special encoding, its low 6 bits saying which: 0, 1, 2 an integer of 8, 16, 32 bits
//! (little-endian, signed), 3 an LZF-compressed string (compressed length, length, bytes).

use super::{lzf, DecodeError, Limits};
use crate::resp::parse_i64;

/// A payload being read: every read is checked against what is left.
pub struct Reader<'a> {
    b: &'a [u8],
    at: usize,
    limits: Limits,
    /// Bytes of strings read so far.
    total: u64,
}

fn bad(what: &str, at: usize) -> DecodeError {
    DecodeError::Malformed(format!("{what} at byte {at}"))
}

impl<'a> Reader<'a> {
    /// A reader of `b` under `limits`.
    pub fn new(b: &'a [u8], limits: Limits) -> Reader<'a> {
        Reader { b, at: 0, limits, total: 0 }
    }

    /// Whether every byte was read.
    pub fn is_empty(&self) -> bool {
        self.at == self.b.len()
    }

    /// Bytes not read yet.
    pub fn left(&self) -> usize {
        self.b.len() - self.at
    }

    /// One byte.
    pub fn byte(&mut self) -> Result<u8, DecodeError> {
        let v = *self.b.get(self.at).ok_or_else(|| bad("the payload ends", self.at))?;
        self.at += 1;
        Ok(v)
    }

    fn take(&mut self, n: u64) -> Result<&'a [u8], DecodeError> {
        if n > self.left() as u64 {
            return Err(bad(&format!("{n} bytes announced, {} left", self.left()), self.at));
        }
        let s = &self.b[self.at..self.at + n as usize];
        self.at += n as usize;
        Ok(s)
    }

    /// A length, or a special encoding's number (`Err` for neither).
    fn len_or_enc(&mut self) -> Result<(u64, bool), DecodeError> {
        let at = self.at;
        let c = self.byte()?;
        Ok(match c >> 6 {
            0 => (u64::from(c & 0x3F), false),
            1 => ((u64::from(c & 0x3F) << 8) | u64::from(self.byte()?), false),
            3 => (u64::from(c & 0x3F), true),
            _ if c == 0x80 => {
                (u64::from(u32::from_be_bytes(self.take(4)?.try_into().expect("4 bytes"))), false)
            }
            _ if c == 0x81 => (u64::from_be_bytes(self.take(8)?.try_into().expect("8 bytes")), false),
            _ => return Err(bad(&format!("length byte {c:#04x}"), at)),
        })
    }

    /// A length (a count of elements).
    pub fn len(&mut self) -> Result<u64, DecodeError> {
        let at = self.at;
        match self.len_or_enc()? {
            (n, false) => Ok(n),
            (_, true) => Err(bad("a string encoding where a length belongs", at)),
        }
    }

    /// A string, whatever its encoding.
    pub fn string(&mut self) -> Result<Vec<u8>, DecodeError> {
        let at = self.at;
        let s = match self.len_or_enc()? {
            (n, false) => {
                let s = self.take(n)?;
                self.check(n)?;
                s.to_vec()
            }
            (0, true) => (self.take(1)?[0] as i8).to_string().into_bytes(),
            (1, true) => {
                i16::from_le_bytes(self.take(2)?.try_into().expect("2 bytes")).to_string().into_bytes()
            }
            (2, true) => {
                i32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes")).to_string().into_bytes()
            }
            (3, true) => {
                let clen = self.len()?;
                let len = self.len()?;
                let packed = self.take(clen)?;
                // Refused before anything is allocated: more than the compressed bytes can
                // stand for, or than a string may be.
                if len > clen.saturating_mul(lzf::MAX_RATIO) {
                    return Err(bad(&format!("an LZF string of {clen} bytes said to give {len}"), at));
                }
                self.check(len)?;
                lzf::decompress(packed, len as usize)
                    .ok_or_else(|| bad("an LZF string that does not decompress", at))?
            }
            (e, true) => return Err(bad(&format!("string encoding {e}"), at)),
        };
        Ok(s)
    }

    /// Counts a string of `n` bytes against the limits.
    fn check(&mut self, n: u64) -> Result<(), DecodeError> {
        if n > self.limits.max_string {
            return Err(DecodeError::TooLarge(format!(
                "the payload holds a string of {n} bytes, more than proto-max-bulk-len ({})",
                self.limits.max_string
            )));
        }
        self.total = self.total.saturating_add(n);
        if self.total > self.limits.max_total {
            return Err(DecodeError::TooLarge(format!(
                "the payload's value is larger than one command may store ({} bytes): raise [mirror] \
                 log_capacity",
                self.limits.max_total
            )));
        }
        Ok(())
    }
}

/// Appends a length.
pub fn write_len(n: u64, out: &mut Vec<u8>) {
    if n < 1 << 6 {
        out.push(n as u8);
    } else if n < 1 << 14 {
        out.extend_from_slice(&[0x40 | (n >> 8) as u8, n as u8]);
    } else if n <= u64::from(u32::MAX) {
        out.push(0x80);
        out.extend_from_slice(&(n as u32).to_be_bytes());
    } else {
        out.push(0x81);
        out.extend_from_slice(&n.to_be_bytes());
    }
}

/// Appends a string: as an integer when it is one of at most 32 bits in its canonical form (as
/// Redis writes them), else its length and bytes (never compressed).
pub fn write_string(s: &[u8], out: &mut Vec<u8>) {
    if s.len() <= 11 {
        match parse_i64(s) {
            Some(v) if i8::try_from(v).is_ok() => return out.extend_from_slice(&[0xC0, v as i8 as u8]),
            Some(v) if i16::try_from(v).is_ok() => {
                out.push(0xC1);
                return out.extend_from_slice(&(v as i16).to_le_bytes());
            }
            Some(v) if i32::try_from(v).is_ok() => {
                out.push(0xC2);
                return out.extend_from_slice(&(v as i32).to_le_bytes());
            }
            _ => {}
        }
    }
    write_len(s.len() as u64, out);
    out.extend_from_slice(s);
}
