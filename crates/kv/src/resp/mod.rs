//! RESP, the Redis protocol, sans I/O: a bounded incremental request parser, a reply writer
//! for RESP2 and RESP3, and a whole-value type with a bounded decoder.

mod error;
mod parse;
#[cfg(test)]
mod proptests;
mod value;
mod write;

pub use error::ProtocolError;
pub use parse::{parse_i64, Limits, Parsed, Parser};
pub use value::{decode, Value, MAX_DEPTH};
pub use write::{itoa, Proto, Reply};

/// Appends `args` as a request (a multibulk of bulk strings), as clients send them.
pub fn encode_request<A: AsRef<[u8]>>(args: &[A], out: &mut Vec<u8>) {
    out.push(b'*');
    out.extend_from_slice(args.len().to_string().as_bytes());
    out.extend_from_slice(b"\r\n");
    for a in args {
        let a = a.as_ref();
        out.push(b'$');
        out.extend_from_slice(a.len().to_string().as_bytes());
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
}
