//! Just enough DER to read a certificate's subject common name and its URI alternative names:
//! each element is a tag, a length and its content, walked with bounds checks, never trusted.
//! The certificates read here have already been checked against the cluster's CA; a malformed
//! one still gives `None`, never a panic.

/// Reads elements one after another from DER bytes.
pub(crate) struct Der<'a> {
    rest: &'a [u8],
}

/// SEQUENCE.
pub(crate) const SEQUENCE: u8 = 0x30;
/// SET.
pub(crate) const SET: u8 = 0x31;
/// OBJECT IDENTIFIER.
pub(crate) const OID: u8 = 0x06;
/// OCTET STRING.
pub(crate) const OCTET_STRING: u8 = 0x04;

impl<'a> Der<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Der<'a> {
        Der { rest: bytes }
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.rest.is_empty()
    }

    /// The next element's tag and content; `None` at the end or where the bytes are malformed.
    pub(crate) fn next(&mut self) -> Option<(u8, &'a [u8])> {
        let (&tag, after) = self.rest.split_first()?;
        let (&first, mut after) = after.split_first()?;
        let len = if first < 0x80 {
            first as usize
        } else {
            let n = (first & 0x7f) as usize;
            if n == 0 || n > 4 || after.len() < n {
                return None;
            }
            let len = after[..n].iter().fold(0usize, |l, &b| (l << 8) | b as usize);
            after = &after[n..];
            len
        };
        if after.len() < len {
            return None;
        }
        let (content, rest) = after.split_at(len);
        self.rest = rest;
        Some((tag, content))
    }

    /// The next element's content if its tag is `tag`.
    pub(crate) fn expect(&mut self, tag: u8) -> Option<&'a [u8]> {
        match self.next()? {
            (t, content) if t == tag => Some(content),
            _ => None,
        }
    }

    /// The next element if its tag is `tag`; leaves the reader where it was otherwise.
    pub(crate) fn optional(&mut self, tag: u8) -> Option<&'a [u8]> {
        let before = self.rest;
        match self.next() {
            Some((t, content)) if t == tag => Some(content),
            _ => {
                self.rest = before;
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_and_long_lengths_are_read() {
        let mut long = vec![SEQUENCE, 0x81, 200];
        long.extend([7u8; 200]);
        long.extend([OID, 1, 9]);
        let mut d = Der::new(&long);
        assert_eq!(d.next(), Some((SEQUENCE, &[7u8; 200][..])));
        assert_eq!(d.expect(OID), Some(&[9u8][..]));
        assert!(d.is_empty());
    }

    #[test]
    fn malformed_bytes_end_the_walk() {
        // A length past the end, a length of five bytes, an indefinite length, a lone tag.
        for bytes in [&[SEQUENCE, 5, 1][..], &[SEQUENCE, 0x85, 0, 0, 0, 0, 1], &[SEQUENCE, 0x80], &[SEQUENCE]]
        {
            assert_eq!(Der::new(bytes).next(), None, "{bytes:?}");
        }
        let mut d = Der::new(&[OID, 1, 1]);
        assert_eq!(d.optional(SET), None);
        assert_eq!(d.expect(OID), Some(&[1u8][..]));
    }
}
