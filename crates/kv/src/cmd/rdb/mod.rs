//! `DUMP` payloads in Redis's own serialization, RDB version 10 (Redis 7.0), so that values move
//! between Redis and `mojim kv` both ways. A payload is the value's RDB type byte, the value as
//! the RDB file format writes it, the RDB version (u16, little-endian) and a CRC-64 (Jones, see
//! `crc64.rs`, little-endian) of all that comes before it.
//!
//! Each type has its own (de)serializer beside this file (`string.rs`, `hash.rs`, `set.rs`, `zset.rs`); [`decode`]
//! picks one by the type byte, and a type not read yet is refused by name. Decoding is sans I/O
//! over the payload's bytes and trusts nothing in them: every length is checked against what is
//! left, nothing is allocated before the bytes it stands for are there (an LZF string against
//! its compressed size and a limit), the whole payload must be the one value, and whatever is
//! malformed is an error, never a panic.

pub mod crc64;
pub mod hash;
pub mod list;
pub mod listpack;
mod lzf;
pub mod set;
pub mod string;
pub mod wire;
pub mod zset;

pub use wire::{write_len, write_string, Reader};

/// The RDB version of Redis 7.0: what payloads are written with, and the newest read.
pub const RDB_VERSION: u16 = 10;

/// RDB type of a string.
pub const TYPE_STRING: u8 = 0;
/// RDB type of a list as a count and its elements (before Redis 3.2; read only).
pub const TYPE_LIST: u8 = 1;
/// RDB type of a list as a quicklist of listpacks (Redis 7.0).
pub const TYPE_LIST_QUICKLIST_2: u8 = 18;
/// RDB type of a set as a table: a count, then each member.
pub const TYPE_SET: u8 = 2;
/// RDB type of a set of integers as an intset.
pub const TYPE_SET_INTSET: u8 = 11;
/// RDB type of a hash as a table: a count, then each field and value.
pub const TYPE_HASH: u8 = 4;
/// RDB type of a small hash as a listpack of fields and values.
pub const TYPE_HASH_LISTPACK: u8 = 16;

/// What a payload may unpack to (a string that decompresses, and the whole).
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Bytes of one string at most (`proto-max-bulk-len`).
    pub max_string: u64,
    /// Bytes of every string of the value together at most (what one group can store).
    pub max_total: u64,
}

/// A hash's fields and values, each field once.
pub type Pairs = Vec<(Vec<u8>, Vec<u8>)>;

/// A value as a payload carries it.
#[derive(Clone, Debug, PartialEq)]
pub enum Object {
    /// A string's bytes.
    String(Vec<u8>),
    /// A hash's fields and values, each field once, in the payload's order.
    Hash(Pairs),
    /// A sorted set's members and scores, in the set's order.
    Zset(zset::Members),
    /// A list's elements, in order (never none).
    List(Vec<Vec<u8>>),
    /// A set's members, each once, in the payload's order.
    Set(Vec<Vec<u8>>),
}

/// Why a payload is refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// Too short for its trailer, a newer RDB version, or a checksum that does not match
    /// (Redis: "DUMP payload version or checksum are wrong").
    Trailer,
    /// Not a well-formed value (Redis: "Bad data format"); the detail says where.
    Malformed(String),
    /// A well-formed payload of an RDB type this server does not read yet.
    Unsupported(u8),
    /// A value larger than [`Limits`] allow.
    TooLarge(String),
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DecodeError::Trailer => f.write_str("DUMP payload version or checksum are wrong"),
            DecodeError::Malformed(_) => f.write_str("Bad data format"),
            DecodeError::Unsupported(t) => write!(
                f,
                "mojim kv cannot RESTORE a {} yet (RDB type {t}): strings, hashes, lists, sets and sorted sets only",
                type_name(*t)
            ),
            DecodeError::TooLarge(what) => f.write_str(what),
        }
    }
}

/// The kind of value an RDB type holds (for messages).
pub fn type_name(t: u8) -> &'static str {
    match t {
        0 => "string",
        1 | 10 | 14 | 18 => "list",
        2 | 11 => "set",
        3 | 5 | 12 | 17 => "sorted set",
        4 | 9 | 13 | 16 => "hash",
        6 | 7 => "module value",
        15 | 19 => "stream",
        _ => "value of an unknown type",
    }
}

/// Whether Redis 7.0 knows `t` as a value's type.
fn known_type(t: u8) -> bool {
    t <= 7 || (9..=19).contains(&t)
}

/// Appends the trailer (RDB version and checksum) to a payload's body.
pub fn seal(payload: &mut Vec<u8>) {
    payload.extend_from_slice(&RDB_VERSION.to_le_bytes());
    let crc = crc64::crc64(0, payload);
    payload.extend_from_slice(&crc.to_le_bytes());
}

/// The body of a payload whose trailer is right.
pub fn open(payload: &[u8]) -> Result<&[u8], DecodeError> {
    if payload.len() < 10 {
        return Err(DecodeError::Trailer);
    }
    let (body, crc) = payload.split_at(payload.len() - 8);
    let version = u16::from_le_bytes([body[body.len() - 2], body[body.len() - 1]]);
    if version > RDB_VERSION || crc64::crc64(0, body) != u64::from_le_bytes(crc.try_into().expect("8 bytes"))
    {
        return Err(DecodeError::Trailer);
    }
    Ok(&body[..body.len() - 2])
}

/// The value a payload carries.
pub fn decode(payload: &[u8], limits: Limits) -> Result<Object, DecodeError> {
    let body = open(payload)?;
    let mut r = Reader::new(body, limits);
    let t = r.byte()?;
    let object = match t {
        TYPE_STRING => Object::String(string::decode(&mut r)?),
        TYPE_HASH => Object::Hash(hash::decode_table(&mut r)?),
        TYPE_HASH_LISTPACK => Object::Hash(hash::decode_listpack(&mut r)?),
        zset::TYPE_ZSET => Object::Zset(zset::decode_pairs(&mut r, true)?),
        zset::TYPE_ZSET_2 => Object::Zset(zset::decode_pairs(&mut r, false)?),
        zset::TYPE_ZSET_LISTPACK => Object::Zset(zset::decode_listpack(&mut r)?),
        TYPE_LIST => Object::List(list::decode_plain(&mut r)?),
        TYPE_LIST_QUICKLIST_2 => Object::List(list::decode_quicklist(&mut r)?),
        TYPE_SET => Object::Set(set::decode_table(&mut r)?),
        TYPE_SET_INTSET => {
            Object::Set(set::decode_intset(&mut r)?.into_iter().map(|v| v.to_string().into_bytes()).collect())
        }
        t if known_type(t) => return Err(DecodeError::Unsupported(t)),
        t => return Err(DecodeError::Malformed(format!("byte 0 is {t}, no RDB type"))),
    };
    if !r.is_empty() {
        return Err(DecodeError::Malformed(format!("{} bytes after the value", r.left())));
    }
    Ok(object)
}

#[cfg(test)]
mod tests;
