//! The bit commands on strings: SETBIT GETBIT BITCOUNT BITPOS BITOP. Bit 0 is the most
//! significant bit of byte 0. A command reads only the bytes its range covers; BITOP reads its
//! sources a piece at a time.

use super::{
    byte_range, clamp_range, lookup, max_string, write_string, Args, Cx, Reply, NOT_INT, SYNTAX, WRONGTYPE,
};
use crate::cmd::args::{int, is};
use crate::cmd::notify::{GENERIC, STRING};
use crate::store::{Mem, StoreError, ENC_RAW, KIND_STRING};

/// Bytes of each source BITOP reads at a time.
const CHUNK: usize = 64 << 10;

/// A bit offset as Redis reads one: within `proto-max-bulk-len` bytes; `None` after replying
/// the error.
fn bit_offset<M: Mem>(cx: &Cx<M>, arg: &[u8], r: &mut Reply) -> Option<u64> {
    match int(arg) {
        Some(n) if n >= 0 && ((n as u64) >> 3) < max_string(cx) => Some(n as u64),
        _ => {
            r.error("ERR bit offset is not an integer or out of range");
            None
        }
    }
}

/// SETBIT key offset 0|1: the bit's old value. The string grows (with zeros) to hold it, and
/// is `raw` from then on, as in Redis.
pub(super) fn setbit<M: Mem>(cx: &mut Cx<M>, a: &Args, r: &mut Reply) -> Result<(), StoreError> {
    let Some(off) = bit_offset(cx, a.get(2), r) else { return Ok(()) };
    let on = match int(a.get(3)) {
        Some(v @ (0 | 1)) => v as u8,
        _ => {
            r.error("ERR bit is not an integer or out of range");
            return Ok(());
        }
    };
    let key = a.get(1);
    let (byte, shift) = (off >> 3, 7 - (off & 7) as u8);
    let (found, live) = lookup(cx, key)?;
    let old = match live {
        None => {
            let mut v = vec![0u8; byte as usize + 1];
            v[byte as usize] = on << shift;
            cx.store.put_encoded(key, KIND_STRING, ENC_RAW, 0, &[&v], 0, found.as_ref())?;
            cx.notify(STRING, "setbit", key);
            0
        }
        Some(f) if f.head.kind != KIND_STRING => {
            r.error(WRONGTYPE);
            return Ok(());
        }
        Some(mut f) => {
            let mut cur = [0u8; 1];
            if byte < u64::from(f.head.vlen) {
                cx.store.read_value(&f, byte, &mut cur)?;
            }
            let old = (cur[0] >> shift) & 1;
            let new = (cur[0] & !(1 << shift)) | (on << shift);
            if new != cur[0] || byte >= u64::from(f.head.vlen) {
                write_string(cx, key, f, found.as_ref(), byte, &[new])?;
                cx.notify(STRING, "setbit", key);
            } else {
                // Unchanged, but Redis makes the string its own, raw, all the same.
                cx.store.set_string_encoding(&mut f, ENC_RAW)?;
            }
            old
        }
    };
    r.int(i64::from(old));
    Ok(())
}

/// GETBIT key offset: 0 past the end.
pub(super) fn getbit<M: Mem>(cx: &mut Cx<M>, a: &Args, r: &mut Reply) -> Result<(), StoreError> {
    let Some(off) = bit_offset(cx, a.get(2), r) else { return Ok(()) };
    let bit = match cx.store.get(a.get(1), cx.now_ms)? {
        None => 0,
        Some(f) if f.head.kind != KIND_STRING => {
            r.error(WRONGTYPE);
            return Ok(());
        }
        Some(f) if off >> 3 >= u64::from(f.head.vlen) => 0,
        Some(f) => {
            let mut b = [0u8; 1];
            cx.store.read_value(&f, off >> 3, &mut b)?;
            (b[0] >> (7 - (off & 7))) & 1
        }
    };
    r.int(i64::from(bit));
    Ok(())
}

/// A range of bits `first ..= last` of a string: the bytes that hold it, and masks of the bits
/// of its first and last byte that lie outside it.
struct BitRange {
    from: u64,
    to: u64,
    /// Bits of byte `from` before the range (set in the mask).
    head_out: u8,
    /// Bits of byte `to` after the range.
    tail_out: u8,
}

/// How a command turns `start`, `end` and a length into a range ([`byte_range`] or
/// [`clamp_range`]).
type Rule = fn(i64, i64, i64) -> Option<(i64, i64)>;

/// Reads `start end [BYTE|BIT]` at `at` (BITCOUNT's and BITPOS's range) for a string of `len`
/// bytes; `Err(())` after replying an error, `Ok(None)` for an empty range.
fn range_arg(
    a: &Args,
    at: usize,
    len: u64,
    end_given: bool,
    rule: Rule,
    r: &mut Reply,
) -> Result<Option<BitRange>, ()> {
    let Some(start) = int(a.get(at)) else {
        r.error(NOT_INT);
        return Err(());
    };
    let mut bit = false;
    if a.len() > at + 2 {
        match a.get(at + 2) {
            u if is(u, "BIT") => bit = true,
            u if is(u, "BYTE") => {}
            _ => {
                r.error(SYNTAX);
                return Err(());
            }
        }
    }
    let total = if bit { len * 8 } else { len } as i64;
    let end = if end_given {
        match int(a.get(at + 1)) {
            Some(e) => e,
            None => {
                r.error(NOT_INT);
                return Err(());
            }
        }
    } else {
        total - 1
    };
    let Some((s, e)) = rule(start, end, total) else { return Ok(None) };
    let (s, e) = (s as u64, e as u64);
    Ok(Some(if bit {
        BitRange {
            from: s >> 3,
            to: e >> 3,
            head_out: !(0xFFu8 >> (s & 7)),
            tail_out: (0xFFu16 >> ((e & 7) + 1)) as u8,
        }
    } else {
        BitRange { from: s, to: e, head_out: 0, tail_out: 0 }
    }))
}

/// BITCOUNT key [start end [BYTE|BIT]]: the bits set in the range.
pub(super) fn bitcount<M: Mem>(cx: &mut Cx<M>, a: &Args, r: &mut Reply) -> Result<(), StoreError> {
    let f = match cx.store.get(a.get(1), cx.now_ms)? {
        None => {
            r.int(0);
            return Ok(());
        }
        Some(f) if f.head.kind != KIND_STRING => {
            r.error(WRONGTYPE);
            return Ok(());
        }
        Some(f) => f,
    };
    let len = u64::from(f.head.vlen);
    let range = match a.len() {
        2 => (len > 0).then(|| BitRange { from: 0, to: len - 1, head_out: 0, tail_out: 0 }),
        4 | 5 => {
            // As Redis: both indexes are read before the unit, and two negative ones the wrong
            // way round count nothing, whatever follows.
            let (Some(s), Some(e)) = (int(a.get(2)), int(a.get(3))) else {
                r.error(NOT_INT);
                return Ok(());
            };
            if s < 0 && e < 0 && s > e {
                r.int(0);
                return Ok(());
            }
            match range_arg(a, 2, len, true, byte_range, r) {
                Ok(range) => range,
                Err(()) => return Ok(()),
            }
        }
        _ => {
            r.error(SYNTAX);
            return Ok(());
        }
    };
    let Some(g) = range else {
        r.int(0);
        return Ok(());
    };
    let mut bytes = vec![0u8; (g.to - g.from + 1) as usize];
    cx.store.read_value(&f, g.from, &mut bytes)?;
    let last = bytes.len() - 1;
    bytes[0] &= !g.head_out;
    bytes[last] &= !g.tail_out;
    r.int(bytes.iter().map(|b| i64::from(b.count_ones())).sum());
    Ok(())
}

/// BITPOS key 0|1 [start [end [BYTE|BIT]]]: the first bit of that value in the range; -1 when
/// there is none, except that the bits past a string's end count as zeros when no end is given.
pub(super) fn bitpos<M: Mem>(cx: &mut Cx<M>, a: &Args, r: &mut Reply) -> Result<(), StoreError> {
    let bit = match int(a.get(2)) {
        None => {
            r.error(NOT_INT);
            return Ok(());
        }
        Some(b @ (0 | 1)) => b as u8,
        Some(_) => {
            r.error("ERR The bit argument must be 1 or 0.");
            return Ok(());
        }
    };
    let f = match cx.store.get(a.get(1), cx.now_ms)? {
        None => {
            r.int(if bit == 1 { -1 } else { 0 });
            return Ok(());
        }
        Some(f) if f.head.kind != KIND_STRING => {
            r.error(WRONGTYPE);
            return Ok(());
        }
        Some(f) => f,
    };
    let len = u64::from(f.head.vlen);
    let end_given = a.len() >= 5;
    let range = match a.len() {
        3 => (len > 0).then(|| BitRange { from: 0, to: len - 1, head_out: 0, tail_out: 0 }),
        // BITPOS clamps two negative indexes the wrong way round (BITCOUNT answers 0).
        4..=6 => match range_arg(a, 3, len, end_given, clamp_range, r) {
            Ok(range) => range,
            Err(()) => return Ok(()),
        },
        _ => {
            r.error(SYNTAX);
            return Ok(());
        }
    };
    let Some(g) = range else {
        r.int(-1);
        return Ok(());
    };
    let mut bytes = vec![0u8; (g.to - g.from + 1) as usize];
    cx.store.read_value(&f, g.from, &mut bytes)?;
    let last = bytes.len() - 1;
    // Bits outside the range made unlike the one looked for.
    let (head, tail) = if bit == 1 {
        (bytes[0] & !g.head_out, bytes[last] & !g.tail_out)
    } else {
        (bytes[0] | g.head_out, bytes[last] | g.tail_out)
    };
    bytes[0] = head;
    bytes[last] = if last == 0 {
        if bit == 1 {
            head & tail
        } else {
            head | tail
        }
    } else {
        tail
    };
    let skip = if bit == 1 { 0x00 } else { 0xFF };
    let pos = bytes.iter().position(|&b| b != skip).map(|i| {
        let b = if bit == 1 { bytes[i] } else { !bytes[i] };
        (g.from + i as u64) * 8 + u64::from(b.leading_zeros())
    });
    let answer = match pos {
        Some(p) => p as i64,
        None if bit == 0 && !end_given => ((g.to + 1) * 8) as i64,
        None => -1,
    };
    r.int(answer);
    Ok(())
}

/// BITOP AND|OR|XOR|NOT destkey key...: the result (as long as the longest source, the shorter
/// ones read as zeros past their end) stored at `destkey` without an expiry, or `destkey`
/// deleted when every source is empty; its length.
pub(super) fn bitop<M: Mem>(cx: &mut Cx<M>, a: &Args, r: &mut Reply) -> Result<(), StoreError> {
    #[derive(Clone, Copy, PartialEq)]
    enum Op {
        And,
        Or,
        Xor,
        Not,
    }
    let op = match a.get(1) {
        o if is(o, "AND") => Op::And,
        o if is(o, "OR") => Op::Or,
        o if is(o, "XOR") => Op::Xor,
        o if is(o, "NOT") => Op::Not,
        _ => {
            r.error(SYNTAX);
            return Ok(());
        }
    };
    if op == Op::Not && a.len() != 4 {
        r.error("ERR BITOP NOT must be called with a single source key.");
        return Ok(());
    }
    let mut sources = Vec::with_capacity(a.len() - 3);
    let mut longest = 0u64;
    for k in a.from(3) {
        match cx.store.get(k, cx.now_ms)? {
            None => sources.push(None),
            Some(f) if f.head.kind != KIND_STRING => {
                r.error(WRONGTYPE);
                return Ok(());
            }
            Some(f) => {
                longest = longest.max(u64::from(f.head.vlen));
                sources.push(Some(f));
            }
        }
    }
    let dest = a.get(2);
    if longest == 0 {
        if let Some(f) = cx.store.get(dest, cx.now_ms)? {
            cx.store.remove(&f)?;
            cx.notify(GENERIC, "del", dest);
        }
        r.int(0);
        return Ok(());
    }
    if longest > max_string(cx) {
        r.error(super::TOO_LONG);
        return Ok(());
    }
    let mut out = vec![0u8; longest as usize];
    let mut piece = vec![0u8; CHUNK];
    for (i, src) in sources.iter().enumerate() {
        let len = src.map_or(0, |f| u64::from(f.head.vlen));
        for start in (0..longest).step_by(CHUNK) {
            let n = (longest - start).min(CHUNK as u64) as usize;
            let have = len.saturating_sub(start).min(n as u64) as usize;
            let p = &mut piece[..n];
            p[have..].fill(0);
            if let Some(f) = src.filter(|_| have > 0) {
                cx.store.read_value(&f, start, &mut p[..have])?;
            }
            let o = &mut out[start as usize..start as usize + n];
            match (op, i) {
                (Op::Not, _) => o.iter_mut().zip(p.iter()).for_each(|(o, p)| *o = !p),
                (_, 0) => o.copy_from_slice(p),
                (Op::And, _) => o.iter_mut().zip(p.iter()).for_each(|(o, p)| *o &= p),
                (Op::Or, _) => o.iter_mut().zip(p.iter()).for_each(|(o, p)| *o |= p),
                (Op::Xor, _) => o.iter_mut().zip(p.iter()).for_each(|(o, p)| *o ^= p),
            }
        }
    }
    let (found, _) = lookup(cx, dest)?;
    cx.store.put_encoded(dest, KIND_STRING, ENC_RAW, 0, &[&out], 0, found.as_ref())?;
    cx.notify(STRING, "set", dest);
    r.int(longest as i64);
    Ok(())
}
