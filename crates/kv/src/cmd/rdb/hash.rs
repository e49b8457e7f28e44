//! A hash in a payload: as a table (RDB type 4: a count, then each field and value as RDB
//! strings), the way Redis writes a hash of its `hashtable` encoding, or as a listpack of
//! fields and values (type 16, the listpack as one RDB string), the way it writes one of its
//! `listpack` encoding. Either is read; an empty hash, an odd listpack or a field given twice is
//! malformed.

use super::{listpack, write_len, write_string, DecodeError, Pairs, Reader, TYPE_HASH, TYPE_HASH_LISTPACK};
use std::collections::HashSet;

/// Appends a small hash's payload body: a listpack of its fields and values.
pub fn encode_listpack<'a>(pairs: impl IntoIterator<Item = (&'a [u8], &'a [u8])>, out: &mut Vec<u8>) {
    out.push(TYPE_HASH_LISTPACK);
    let lp = listpack::encode(pairs.into_iter().flat_map(|(f, v)| [f, v]));
    write_string(&lp, out);
}

/// Starts a large hash's payload body of `len` fields: each then goes with [`encode_pair`].
pub fn encode_table_head(len: u64, out: &mut Vec<u8>) {
    out.push(TYPE_HASH);
    write_len(len, out);
}

/// Appends one field and its value of a hash begun with [`encode_table_head`].
pub fn encode_pair(field: &[u8], value: &[u8], out: &mut Vec<u8>) {
    write_string(field, out);
    write_string(value, out);
}

fn unique(pairs: &[(Vec<u8>, Vec<u8>)]) -> Result<(), DecodeError> {
    if pairs.is_empty() {
        return Err(DecodeError::Malformed("an empty hash".into()));
    }
    let mut seen = HashSet::with_capacity(pairs.len());
    for (f, _) in pairs {
        if !seen.insert(f.as_slice()) {
            return Err(DecodeError::Malformed("a hash with a field twice".into()));
        }
    }
    Ok(())
}

/// Reads a hash of type 4 (after its type byte).
pub fn decode_table(r: &mut Reader) -> Result<Pairs, DecodeError> {
    let n = r.len()?;
    // No room is made for more pairs than there are bytes left (each takes two at least).
    let mut pairs = Vec::with_capacity((n as usize).min(r.left() / 2));
    for _ in 0..n {
        let f = r.string()?;
        let v = r.string()?;
        pairs.push((f, v));
    }
    unique(&pairs)?;
    Ok(pairs)
}

/// Reads a hash of type 16 (after its type byte).
pub fn decode_listpack(r: &mut Reader) -> Result<Pairs, DecodeError> {
    let lp = r.string()?;
    let entries =
        listpack::decode(&lp).ok_or_else(|| DecodeError::Malformed("a listpack that is not one".into()))?;
    if entries.len() % 2 != 0 {
        return Err(DecodeError::Malformed("a hash's listpack of an odd number of entries".into()));
    }
    let mut it = entries.into_iter();
    let mut pairs = Vec::with_capacity(it.len() / 2);
    while let (Some(f), Some(v)) = (it.next(), it.next()) {
        pairs.push((f, v));
    }
    unique(&pairs)?;
    Ok(pairs)
}
