//! A list in a payload: as Redis 7.0 writes it, a quicklist of listpacks (RDB type 18: the
//! number of nodes, then per node its container, 2 for a packed node whose listpack follows as
//! one RDB string, or 1 for a plain node holding one large element as an RDB string). Read too:
//! the plain list of older versions (type 1: a count, then each element). An empty list, an
//! empty node or a container of another number is malformed.

use super::{listpack, write_len, write_string, DecodeError, Reader, TYPE_LIST_QUICKLIST_2};

/// Elements per node written, and bytes of a node's elements after which a node ends (Redis's
/// `list-max-listpack-size -2`, 8 KiB).
const NODE_ELEMENTS: usize = 128;
const NODE_BYTES: usize = 8 << 10;

/// Container of a node holding one element (Redis's `QUICKLIST_NODE_CONTAINER_PLAIN`).
const PLAIN: u64 = 1;
/// Container of a node holding a listpack (`QUICKLIST_NODE_CONTAINER_PACKED`).
const PACKED: u64 = 2;

/// Appends a list's payload body: its elements, in order, in nodes of listpacks.
pub fn encode(elems: &[Vec<u8>], out: &mut Vec<u8>) {
    let mut nodes: Vec<&[Vec<u8>]> = Vec::new();
    let (mut start, mut bytes) = (0, 0);
    for (i, e) in elems.iter().enumerate() {
        if i > start && (i - start == NODE_ELEMENTS || bytes + e.len() > NODE_BYTES) {
            nodes.push(&elems[start..i]);
            (start, bytes) = (i, 0);
        }
        bytes += e.len();
    }
    if start < elems.len() {
        nodes.push(&elems[start..]);
    }
    out.push(TYPE_LIST_QUICKLIST_2);
    write_len(nodes.len() as u64, out);
    for n in nodes {
        write_len(PACKED, out);
        write_string(&listpack::encode(n.iter().map(|e| e.as_slice())), out);
    }
}

/// Reads a list of type 18 (after its type byte).
pub fn decode_quicklist(r: &mut Reader) -> Result<Vec<Vec<u8>>, DecodeError> {
    let nodes = r.len()?;
    let mut elems = Vec::new();
    for _ in 0..nodes {
        match r.len()? {
            PLAIN => elems.push(r.string()?),
            PACKED => {
                let lp = r.string()?;
                let node = listpack::decode(&lp)
                    .ok_or_else(|| DecodeError::Malformed("a listpack that is not one".into()))?;
                if node.is_empty() {
                    return Err(DecodeError::Malformed("an empty quicklist node".into()));
                }
                elems.extend(node);
            }
            c => return Err(DecodeError::Malformed(format!("a quicklist node of container {c}"))),
        }
    }
    if elems.is_empty() {
        return Err(DecodeError::Malformed("an empty list".into()));
    }
    Ok(elems)
}

/// Reads a list of type 1 (after its type byte).
pub fn decode_plain(r: &mut Reader) -> Result<Vec<Vec<u8>>, DecodeError> {
    let n = r.len()?;
    // No room is made for more elements than there are bytes left (each takes one at least).
    let mut elems = Vec::with_capacity((n as usize).min(r.left()));
    for _ in 0..n {
        elems.push(r.string()?);
    }
    if elems.is_empty() {
        return Err(DecodeError::Malformed("an empty list".into()));
    }
    Ok(elems)
}
