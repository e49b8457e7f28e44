//! A string in a payload (RDB type 0): one RDB string.

use super::{write_string, DecodeError, Reader, TYPE_STRING};

/// Appends a string's payload body (its type and itself).
pub fn encode(v: &[u8], out: &mut Vec<u8>) {
    out.push(TYPE_STRING);
    write_string(v, out);
}

/// Reads a string's value (after its type byte).
pub fn decode(r: &mut Reader) -> Result<Vec<u8>, DecodeError> {
    r.string()
}
