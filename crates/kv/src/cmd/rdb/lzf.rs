//! LZF decompression, for the strings Redis compresses in an RDB payload (those longer than 20
//! bytes, when compression saves room). The format: a control byte below 32 is a run of that
//! many plus one literal bytes; any other is a back reference, its top three bits a length
//! (7: a further byte adds to it) and its low five with the next byte a distance, copying
//! length + 2 bytes from distance + 1 bytes back (the copy may overlap what it writes).
//!
//! The result must be exactly the length the payload announced; nothing is written past it,
//! nothing read past the input, no reference reaches before the output's start.

/// Most bytes one input byte can stand for (a 3-byte reference copies at most 264).
pub const MAX_RATIO: u64 = 88;

/// `input` decompressed into exactly `len` bytes; `None` if it is not that.
pub fn decompress(input: &[u8], len: usize) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(len);
    let mut i = 0;
    while i < input.len() {
        let c = usize::from(input[i]);
        i += 1;
        if c < 32 {
            let run = c + 1;
            let lit = input.get(i..i + run)?;
            if out.len() + run > len {
                return None;
            }
            out.extend_from_slice(lit);
            i += run;
            continue;
        }
        let mut n = c >> 5;
        if n == 7 {
            n += usize::from(*input.get(i)?);
            i += 1;
        }
        let back = ((c & 0x1f) << 8) + usize::from(*input.get(i)?) + 1;
        i += 1;
        let n = n + 2;
        if back > out.len() || out.len() + n > len {
            return None;
        }
        let from = out.len() - back;
        for k in 0..n {
            let b = out[from + k];
            out.push(b);
        }
    }
    (out.len() == len).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_and_overlapping_references() {
        // "abc" as literals, then a reference of 6 bytes from 3 back: "abcabc".
        let input = [2, b'a', b'b', b'c', (4 << 5), 2];
        assert_eq!(decompress(&input, 9).unwrap(), b"abcabcabc");
        // A long reference: 7 + 10 + 2 = 19 bytes of "x" from 1 back.
        let input = [0, b'x', 7 << 5, 10, 0];
        assert_eq!(decompress(&input, 20).unwrap(), vec![b'x'; 20]);
    }

    #[test]
    fn anything_malformed_is_refused() {
        assert_eq!(decompress(&[2, b'a', b'b', b'c'], 4), None, "shorter than announced");
        assert_eq!(decompress(&[2, b'a', b'b', b'c'], 2), None, "longer than announced");
        assert_eq!(decompress(&[5, b'a'], 6), None, "a run past the input");
        assert_eq!(decompress(&[0, b'a', 1 << 5, 5], 10), None, "a reference before the start");
        assert_eq!(decompress(&[0, b'a', 7 << 5], 10), None, "a reference cut short");
        assert_eq!(decompress(&[], 0), Some(Vec::new()));
    }
}
