//! A string changed where it lies: `SETRANGE`, `SETBIT` and `APPEND` write into the entry's
//! block when the result fits it (FORMAT.md §11.6).
//!
//! The rule that makes this safe: within a batch, a value's length only grows in place (a
//! command that would shorten a value writes a new entry instead). So every byte at or past the
//! value's current length is one the sealed state does not use (the sealed length is at most
//! the current one), and is written fresh; bytes below it are stored in place, undo-logged.

use super::error::StoreError;
use super::layout::{ENC_PLAIN, ENC_RAW};
use super::mem::Mem;
use super::table::Found;
use super::Store;

/// Offset of `encoding` in an entry's header.
const ENCODING_AT: u64 = 30;
/// Offset of `vlen` in an entry's header.
const VLEN_AT: u64 = 24;
/// Zeros written a piece at a time.
const ZEROS: [u8; 4096] = [0; 4096];

impl<M: Mem> Store<M> {
    /// Writes `data` at byte `at` of a string's value, in its block: the bytes below the value's
    /// length in place, those past it fresh, with zeros from the old end up to `at`; the length
    /// grows to cover `data`, never shrinks. The entry's encoding becomes [`ENC_RAW`] (Redis's
    /// `raw`: a string changed in place). The caller checked that the result fits the block
    /// ([`Store::slack`]).
    pub fn string_write(&mut self, f: &mut Found, at: u64, data: &[u8]) -> Result<(), StoreError> {
        let vlen = u64::from(f.head.vlen);
        let end = at + data.len() as u64;
        let new_len = end.max(vlen);
        assert!(
            new_len - vlen <= self.slack(f),
            "string_write past the block: {new_len} bytes, {vlen} + {} of room",
            self.slack(f)
        );
        let base = f.value_off();
        // Zeros between the old end and `at`.
        let mut z = vlen;
        while z < at {
            let n = (at - z).min(ZEROS.len() as u64);
            self.fresh(base + z, &ZEROS[..n as usize])?;
            z += n;
        }
        // In place below the old length, fresh past it.
        let split = (vlen.saturating_sub(at) as usize).min(data.len());
        if split > 0 {
            self.meta(base + at, &data[..split])?;
        }
        if split < data.len() {
            self.fresh(base + at + split as u64, &data[split..])?;
        }
        if new_len != vlen {
            let len = u32::try_from(new_len).map_err(|_| {
                StoreError::TooLarge(format!("a string of {new_len} bytes is larger than an entry may hold"))
            })?;
            self.meta(f.entry + VLEN_AT, &len.to_le_bytes())?;
            f.head.vlen = len;
        }
        self.set_string_encoding(f, ENC_RAW)
    }

    /// Sets an entry's `encoding` byte in place (strings: how `OBJECT ENCODING` names it).
    pub fn set_string_encoding(&mut self, f: &mut Found, encoding: u8) -> Result<(), StoreError> {
        if f.head.encoding != encoding {
            debug_assert!(encoding == ENC_PLAIN || encoding >= ENC_RAW, "a string's encoding");
            self.meta(f.entry + ENCODING_AT, &[encoding])?;
            f.head.encoding = encoding;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::layout::KIND_STRING;
    use super::super::VecMem;
    use super::*;

    fn value(s: &mut Store<&VecMem>, k: &[u8]) -> (Vec<u8>, u8) {
        let f = s.find(k).unwrap().expect("the key");
        let mut v = Vec::new();
        s.value_into(&f, &mut v).unwrap();
        (v, f.head.encoding)
    }

    #[test]
    fn format_md_says_what_the_code_does() {
        let doc = include_str!("../../../../docs/FORMAT.md");
        let sec = &doc[doc.find("### 11.6 Strings").expect("FORMAT.md has section 11.6")..];
        let sec = &sec[..sec[4..].find("\n### ").map_or(sec.len(), |e| e + 4)];
        assert!(sec.contains(&format!("| {ENC_PLAIN} | made whole by `SET`")));
        assert!(sec.contains(&format!("| {ENC_RAW:#04x} | `raw`: changed in place")));
        assert!(sec
            .contains(&format!("| {:#04x} | made without a try at `int`", super::super::layout::ENC_EMBSTR)));
        let entry = &doc[doc.find("### 11.2").expect("section 11.2")..];
        assert!(entry.contains(&format!("| {VLEN_AT} | 4 | `vlen` |")));
        assert!(entry.contains(&format!("| {ENCODING_AT} | 1 | `encoding` |")));
    }

    #[test]
    fn writes_in_place_pad_with_zeros_and_mark_the_string_raw() {
        let mem = VecMem::new(1 << 20);
        let mut s = Store::open(&mem, 64).unwrap();
        s.put(b"k", KIND_STRING, 0, &[b"hello"], 64, None).unwrap();
        s.seal(64).unwrap();
        let mut f = s.find(b"k").unwrap().unwrap();
        s.string_write(&mut f, 1, b"EL").unwrap();
        assert_eq!(value(&mut s, b"k"), (b"hELlo".to_vec(), ENC_RAW));
        let mut f = s.find(b"k").unwrap().unwrap();
        s.string_write(&mut f, 8, b"xy").unwrap();
        assert_eq!(value(&mut s, b"k"), (b"hELlo\0\0\0xy".to_vec(), ENC_RAW));
        s.seal(64).unwrap();
        let mut s = Store::open(VecMem::from_bytes(mem.image()), 64).unwrap();
        let f = s.find(b"k").unwrap().unwrap();
        let mut v = Vec::new();
        s.value_into(&f, &mut v).unwrap();
        assert_eq!(v, b"hELlo\0\0\0xy");
    }

    /// A crash in the middle of a batch that changed a string in place leaves the value the
    /// last sealed batch made, byte for byte, at every write it could stop at.
    #[test]
    fn a_crash_at_any_write_of_a_batch_leaves_the_sealed_string() {
        let sealed = b"0123456789".to_vec();
        let run = |crash: Option<u64>| -> (VecMem, bool) {
            let mem = VecMem::new(1 << 20);
            let mut s = Store::open(&mem, 64).unwrap();
            s.put(b"k", KIND_STRING, 0, &[&sealed], 100, None).unwrap();
            s.seal(64).unwrap();
            if let Some(c) = crash {
                mem.crash_after(c);
            }
            let mut batch = || -> Result<(), StoreError> {
                let mut f = s.find(b"k")?.expect("the key");
                s.string_write(&mut f, 4, b"abcdefgh")?;
                s.string_write(&mut f, 20, b"zz")?;
                s.string_write(&mut f, 0, b"Q")?;
                s.seal(64).map(|_| ())
            };
            let done = batch().is_ok();
            (mem, done)
        };
        let (clean, done) = run(None);
        assert!(done);
        let writes = clean.writes();
        for crash in 0..writes {
            let (mem, done) = run(Some(crash));
            let mut s = Store::open(VecMem::from_bytes(mem.image()), 64).unwrap();
            let f = s.find(b"k").unwrap().unwrap();
            let mut v = Vec::new();
            s.value_into(&f, &mut v).unwrap();
            let after = b"Q123abcdefgh\0\0\0\0\0\0\0\0zz";
            if done || v != sealed {
                assert_eq!(v, after, "crash at write {crash}");
                assert_eq!(f.head.encoding, ENC_RAW, "crash at write {crash}");
            } else {
                assert_eq!(f.head.encoding, ENC_PLAIN, "crash at write {crash}");
            }
        }
    }
}
