//! Sets in payloads: what a redis-server 7.0.15 dumps read here, ours written as it writes
//! them, and malformed ones refused without a panic.

use super::super::{decode, seal, write_string, DecodeError, Limits, Object};
use super::*;

const LIMITS: Limits = Limits { max_string: 1 << 20, max_total: 4 << 20 };

fn payload(body: &[u8]) -> Vec<u8> {
    let mut p = body.to_vec();
    seal(&mut p);
    p
}

fn set(members: &[&str]) -> Object {
    Object::Set(members.iter().map(|m| m.as_bytes().to_vec()).collect())
}

#[test]
fn reads_what_redis_dumps() {
    // SADD si 1 2 3 -5; DUMP si (an intset of 16-bit members)
    let si = b"\x0b\x10\x02\x00\x00\x00\x04\x00\x00\x00\xfb\xff\x01\x00\x02\x00\x03\x00\n\x00\xc8\xe4\xdf\xb6os\x96\xf0";
    assert_eq!(decode(si, LIMITS), Ok(set(&["-5", "1", "2", "3"])));
    // SADD sl 100000 1; DUMP sl (32-bit members)
    let sl = b"\x0b\x10\x04\x00\x00\x00\x02\x00\x00\x00\x01\x00\x00\x00\xa0\x86\x01\x00\n\x00\xd7\xb5H\xc0\x07ye\x15";
    assert_eq!(decode(sl, LIMITS), Ok(set(&["1", "100000"])));
    // SADD ss a; DUMP ss (a hashtable set: a table)
    let ss = b"\x02\x01\x01a\n\x00b\x96\xe9~D\xd2\x1am";
    assert_eq!(decode(ss, LIMITS), Ok(set(&["a"])));
    // SADD s2 hello 12345; DUMP s2 (the integer member as an RDB integer string)
    let s2 = b"\x02\x02\x05hello\xc190\n\x00\x18\xb6\xe8\xc8\xa4\xb3\xc1f";
    assert_eq!(decode(s2, LIMITS), Ok(set(&["hello", "12345"])));
}

#[test]
fn writes_what_redis_writes() {
    let mut p = Vec::new();
    encode_intset(2, [-5, 1, 2, 3].into_iter(), &mut p);
    seal(&mut p);
    assert_eq!(
        p,
        b"\x0b\x10\x02\x00\x00\x00\x04\x00\x00\x00\xfb\xff\x01\x00\x02\x00\x03\x00\n\x00\xc8\xe4\xdf\xb6os\x96\xf0"
    );
    let mut p = Vec::new();
    encode_table_head(2, &mut p);
    encode_member(b"hello", &mut p);
    encode_member(b"12345", &mut p);
    seal(&mut p);
    assert_eq!(p, b"\x02\x02\x05hello\xc190\n\x00\x18\xb6\xe8\xc8\xa4\xb3\xc1f");
}

#[test]
fn round_trips() {
    let wide = [i64::MIN, -(1 << 40), -1, 0, 7, i64::MAX];
    let mut p = Vec::new();
    encode_intset(8, wide.into_iter(), &mut p);
    seal(&mut p);
    let want: Vec<Vec<u8>> = wide.iter().map(|v| v.to_string().into_bytes()).collect();
    assert_eq!(decode(&p, LIMITS), Ok(Object::Set(want)));
    let members: Vec<Vec<u8>> =
        (0..600).map(|i| if i % 3 == 0 { i.to_string() } else { format!("m{i}") }.into_bytes()).collect();
    let mut p = Vec::new();
    encode_table_head(members.len() as u64, &mut p);
    for m in &members {
        encode_member(m, &mut p);
    }
    seal(&mut p);
    assert_eq!(decode(&p, LIMITS), Ok(Object::Set(members)));
}

fn intset_body(width: u32, len: u32, members: &[u8]) -> Vec<u8> {
    let mut blob = width.to_le_bytes().to_vec();
    blob.extend_from_slice(&len.to_le_bytes());
    blob.extend_from_slice(members);
    let mut body = vec![TYPE_SET_INTSET];
    write_string(&blob, &mut body);
    body
}

#[test]
fn malformed_sets_are_refused() {
    let bad = |body: &[u8]| match decode(&payload(body), LIMITS) {
        Err(DecodeError::Malformed(_)) => {}
        other => panic!("{body:?}: {other:?}"),
    };
    // Tables: empty, a member twice, fewer members than announced, a huge count.
    bad(b"\x02\x00");
    bad(b"\x02\x02\x01a\x01a");
    bad(b"\x02\x02\xc0\x01\x011");
    bad(b"\x02\x03\x01a\x01b");
    bad(b"\x02\x81\xff\xff\xff\xff\xff\xff\xff\xff");
    // Intsets: empty, a bad encoding, a length that does not match, out of order, twice.
    bad(&intset_body(2, 0, &[]));
    bad(&intset_body(3, 1, &[1, 0, 0]));
    bad(&intset_body(2, 2, &[1, 0]));
    bad(&intset_body(2, 1, &[1, 0, 2, 0]));
    bad(&intset_body(2, 2, &[2, 0, 1, 0]));
    bad(&intset_body(2, 2, &[1, 0, 1, 0]));
    bad(&[TYPE_SET_INTSET, 3, 2, 0, 0]);
    // Redis 7.2's listpack set (type 20) is no type of Redis 7.0.
    bad(b"\x14\x00");
}

#[test]
fn limits_are_kept() {
    let small = Limits { max_string: 10, max_total: 25 };
    let mut p = Vec::new();
    encode_table_head(3, &mut p);
    for m in [b"0123456789", b"123456789x", b"23456789xy"] {
        encode_member(m, &mut p);
    }
    seal(&mut p);
    assert!(matches!(decode(&p, small), Err(DecodeError::TooLarge(_))));
    let mut p = Vec::new();
    encode_intset(8, [0, 1, 2, 3].into_iter(), &mut p);
    seal(&mut p);
    assert!(matches!(decode(&p, small), Err(DecodeError::TooLarge(_))), "an intset of 40 bytes");
}

/// Every set payload cut short, and every one with one byte changed, is refused or read, never
/// a panic (with the checksum made right again, so that the value itself is read).
#[test]
fn damaged_payloads_never_panic() {
    let mut bodies = Vec::new();
    let mut p = Vec::new();
    encode_intset(4, [-70_000, 3, 1 << 20].into_iter(), &mut p);
    bodies.push(p);
    let mut p = Vec::new();
    encode_table_head(3, &mut p);
    for m in [&b"a"[..], b"-12", &[7u8; 70]] {
        encode_member(m, &mut p);
    }
    bodies.push(p);
    for body in &bodies {
        for cut in 0..body.len() {
            assert!(decode(&payload(&body[..cut]), LIMITS).is_err());
        }
        for i in 0..body.len() {
            for x in [0x00, 0x01, 0x02, 0x0b, 0x3f, 0x40, 0x7f, 0x80, 0x81, 0xc0, 0xc3, 0xff] {
                let mut b = body.clone();
                b[i] = x;
                let _ = decode(&payload(&b), LIMITS);
                b[i] = body[i] ^ 0x10;
                let _ = decode(&payload(&b), LIMITS);
            }
        }
    }
}
