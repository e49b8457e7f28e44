//! A set in a payload, as Redis 7.0 writes one: as a table (RDB type 2: a count, then each
//! member as an RDB string), the way it writes a set of its `hashtable` encoding; or as an
//! intset (type 11: one RDB string holding Redis's intset, `encoding` (u32: 2, 4 or 8 bytes a
//! member), `length` (u32), then the members in ascending order, each `encoding` bytes of a
//! little-endian two's complement integer), the way it writes one of its `intset` encoding.
//! Redis 7.0 has no listpack sets (RDB type 20 is Redis 7.2's): a set held as a member list is
//! written as a table. Either type is read; an empty set, a member given twice, an intset whose
//! members are not in strictly ascending order, or whose length does not match its bytes, is
//! malformed.

use super::{write_len, write_string, DecodeError, Reader, TYPE_SET, TYPE_SET_INTSET};
use std::collections::HashSet;

/// Bytes before an intset's members: `encoding` and `length`.
const INTSET_HEAD: usize = 8;

/// Starts a set's payload body of `len` members as a table: each then goes with
/// [`encode_member`].
pub fn encode_table_head(len: u64, out: &mut Vec<u8>) {
    out.push(TYPE_SET);
    write_len(len, out);
}

/// Appends one member of a set begun with [`encode_table_head`].
pub fn encode_member(member: &[u8], out: &mut Vec<u8>) {
    write_string(member, out);
}

/// Appends an integer set's payload body: `members`, in strictly ascending order, as an intset
/// of `width` (2, 4 or 8) bytes a member.
pub fn encode_intset(width: u8, members: impl ExactSizeIterator<Item = i64>, out: &mut Vec<u8>) {
    debug_assert!([2, 4, 8].contains(&width));
    out.push(TYPE_SET_INTSET);
    let n = members.len();
    let mut blob = Vec::with_capacity(INTSET_HEAD + n * width as usize);
    blob.extend_from_slice(&u32::from(width).to_le_bytes());
    blob.extend_from_slice(&(n as u32).to_le_bytes());
    for v in members {
        debug_assert!(crate::store::intset::width_of(v) <= width);
        blob.extend_from_slice(&v.to_le_bytes()[..width as usize]);
    }
    write_string(&blob, out);
}

/// Reads a set of type 2 (after its type byte).
pub fn decode_table(r: &mut Reader) -> Result<Vec<Vec<u8>>, DecodeError> {
    let n = r.len()?;
    if n == 0 {
        return Err(DecodeError::Malformed("an empty set".into()));
    }
    // No room is made for more members than there are bytes left (each takes one at least).
    let mut members = Vec::with_capacity((n as usize).min(r.left()));
    let mut seen = HashSet::with_capacity((n as usize).min(r.left()));
    for _ in 0..n {
        let m = r.string()?;
        if !seen.insert(m.clone()) {
            return Err(DecodeError::Malformed("a set with a member twice".into()));
        }
        members.push(m);
    }
    Ok(members)
}

/// Reads a set of type 11 (after its type byte): its members, ascending.
pub fn decode_intset(r: &mut Reader) -> Result<Vec<i64>, DecodeError> {
    let blob = r.string()?;
    let bad = |what: &str| DecodeError::Malformed(format!("an intset of {} bytes: {what}", blob.len()));
    if blob.len() < INTSET_HEAD {
        return Err(bad("shorter than its header"));
    }
    let width = u32::from_le_bytes(blob[..4].try_into().expect("4 bytes"));
    let len = u32::from_le_bytes(blob[4..8].try_into().expect("4 bytes"));
    if ![2, 4, 8].contains(&width) {
        return Err(bad(&format!("encoding {width}")));
    }
    let body = &blob[INTSET_HEAD..];
    if body.len() as u64 != u64::from(len) * u64::from(width) {
        return Err(bad(&format!("{len} members of {width} bytes announced")));
    }
    if len == 0 {
        return Err(DecodeError::Malformed("an empty set".into()));
    }
    let members: Vec<i64> = body
        .chunks_exact(width as usize)
        .map(|c| match width {
            2 => i64::from(i16::from_le_bytes([c[0], c[1]])),
            4 => i64::from(i32::from_le_bytes(c.try_into().expect("4 bytes"))),
            _ => i64::from_le_bytes(c.try_into().expect("8 bytes")),
        })
        .collect();
    if members.windows(2).any(|w| w[0] >= w[1]) {
        return Err(bad("members not in strictly ascending order"));
    }
    Ok(members)
}

#[cfg(test)]
#[path = "set_tests.rs"]
mod tests;
