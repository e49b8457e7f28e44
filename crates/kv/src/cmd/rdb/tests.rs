//! Payloads Redis 7.0 wrote (`DUMP` of a redis-server 7.0.15) read here, ours read back, and
//! malformed ones refused without a panic.

use super::*;

const LIMITS: Limits = Limits { max_string: 1 << 20, max_total: 4 << 20 };

fn payload(body: &[u8]) -> Vec<u8> {
    let mut p = body.to_vec();
    seal(&mut p);
    p
}

#[test]
fn reads_what_redis_dumps() {
    // SET s hello; DUMP s
    let s = b"\x00\x05hello\n\x00cr\xdfve4 \n";
    assert_eq!(decode(s, LIMITS), Ok(Object::String(b"hello".to_vec())));
    // SET i 12345; DUMP i (an integer of 16 bits)
    let i = b"\x00\xc190\n\x00\x9d\x94\xea'\x93\xfc\x08\xb9";
    assert_eq!(decode(i, LIMITS), Ok(Object::String(b"12345".to_vec())));
    // SET big "abab...ab" (80 bytes); DUMP big (LZF-compressed)
    let big = b"\x00\xc3\n@P\x02aba\xe0B\x01\x01ab\n\x00\x94\x9d_\x0e\xb1\xde\xa4E";
    assert_eq!(decode(big, LIMITS), Ok(Object::String(b"ab".repeat(40))));
    // HSET h a 1 b hello; DUMP h (a listpack)
    let h = b"\x10\x16\x16\x00\x00\x00\x04\x00\x81a\x02\x01\x01\x81b\x02\x85hello\x06\xff\n\x00\xe8\xc5\xfe\x99\xee\x07\x95]";
    assert_eq!(
        decode(h, LIMITS),
        Ok(Object::Hash(vec![(b"a".to_vec(), b"1".to_vec()), (b"b".to_vec(), b"hello".to_vec())]))
    );
}

#[test]
fn writes_what_redis_writes() {
    let mut p = Vec::new();
    string::encode(b"hello", &mut p);
    seal(&mut p);
    assert_eq!(p, b"\x00\x05hello\n\x00cr\xdfve4 \n");
    let mut p = Vec::new();
    string::encode(b"12345", &mut p);
    seal(&mut p);
    assert_eq!(p, b"\x00\xc190\n\x00\x9d\x94\xea'\x93\xfc\x08\xb9");
    let mut p = Vec::new();
    hash::encode_listpack([(&b"a"[..], &b"1"[..]), (b"b", b"hello")], &mut p);
    seal(&mut p);
    assert_eq!(
        p,
        b"\x10\x16\x16\x00\x00\x00\x04\x00\x81a\x02\x01\x01\x81b\x02\x85hello\x06\xff\n\x00\xe8\xc5\xfe\x99\xee\x07\x95]"
    );
}

#[test]
fn round_trips() {
    for v in [&b""[..], b"0", b"-128", b"128", b"-32769", b"2147483647", b"2147483648", b"007", b"x"] {
        let mut p = Vec::new();
        string::encode(v, &mut p);
        seal(&mut p);
        assert_eq!(decode(&p, LIMITS), Ok(Object::String(v.to_vec())), "{v:?}");
    }
    let long = vec![7u8; 20_000];
    let mut p = Vec::new();
    string::encode(&long, &mut p);
    seal(&mut p);
    assert_eq!(decode(&p, LIMITS), Ok(Object::String(long.clone())));
    let pairs: Vec<(Vec<u8>, Vec<u8>)> = (0..300)
        .map(|i| {
            (format!("f{i}").into_bytes(), if i == 7 { long.clone() } else { i.to_string().into_bytes() })
        })
        .collect();
    let mut p = Vec::new();
    hash::encode_table_head(pairs.len() as u64, &mut p);
    for (f, v) in &pairs {
        hash::encode_pair(f, v, &mut p);
    }
    seal(&mut p);
    assert_eq!(decode(&p, LIMITS), Ok(Object::Hash(pairs)));
}

#[test]
fn a_bad_trailer_is_the_checksum_error() {
    let mut p = payload(b"\x00\x01x");
    assert_eq!(decode(&p[..9], LIMITS), Err(DecodeError::Trailer));
    let n = p.len();
    p[n - 1] ^= 1;
    assert_eq!(decode(&p, LIMITS), Err(DecodeError::Trailer));
    // A newer RDB version, with a right checksum.
    let mut newer = b"\x00\x01x".to_vec();
    newer.extend_from_slice(&11u16.to_le_bytes());
    let crc = crc64::crc64(0, &newer);
    newer.extend_from_slice(&crc.to_le_bytes());
    assert_eq!(decode(&newer, LIMITS), Err(DecodeError::Trailer));
    assert_eq!(DecodeError::Trailer.to_string(), "DUMP payload version or checksum are wrong");
}

#[test]
fn malformed_values_are_refused() {
    let bad = |body: &[u8]| match decode(&payload(body), LIMITS) {
        Err(DecodeError::Malformed(_)) => {}
        other => panic!("{body:?}: {other:?}"),
    };
    bad(b"");
    bad(b"\x00");
    bad(b"\x00\x05hell");
    bad(b"\x00\x01xx");
    bad(b"\x00\xc4");
    bad(b"\x00\x82\x00");
    bad(b"\x00\x80\xff\xff\xff\xff");
    bad(b"\x08\x00");
    bad(b"\xff");
    bad(b"\x04\x00");
    bad(b"\x04\x02\x01a\x01b\x01a\x01c");
    bad(b"\x04\x03\x01a\x01b");
    bad(b"\x04\x81\xff\xff\xff\xff\xff\xff\xff\xff");
    bad(b"\x10\x03abc");
    // An odd listpack, an empty one.
    let mut odd = vec![0x10];
    write_string(&listpack::encode([&b"a"[..]]), &mut odd);
    bad(&odd);
    let mut empty = vec![0x10];
    write_string(&listpack::encode(std::iter::empty()), &mut empty);
    bad(&empty);
    // An LZF string said to give far more than its bytes could.
    bad(b"\x00\xc3\x01\x80\x10\x00\x00\x00a");
    assert_eq!(decode(&payload(b"\x0e\x00"), LIMITS), Err(DecodeError::Unsupported(14)));
    assert!(DecodeError::Unsupported(14).to_string().contains("list"));
}

#[test]
fn limits_are_kept() {
    let small = Limits { max_string: 10, max_total: 25 };
    let mut p = Vec::new();
    string::encode(b"0123456789a", &mut p);
    seal(&mut p);
    assert!(matches!(decode(&p, small), Err(DecodeError::TooLarge(_))));
    let mut p = Vec::new();
    hash::encode_table_head(3, &mut p);
    for f in [b"f1", b"f2", b"f3"] {
        hash::encode_pair(f, b"123456789x", &mut p);
    }
    seal(&mut p);
    assert!(matches!(decode(&p, small), Err(DecodeError::TooLarge(_))));
}

/// Every payload cut short, and every payload with one byte changed, is refused or read,
/// never a panic (with the checksum made right again, so that the value itself is read).
#[test]
fn damaged_payloads_never_panic() {
    let mut bodies = Vec::new();
    let mut p = Vec::new();
    string::encode(&b"ab".repeat(40), &mut p);
    bodies.push(p);
    bodies.push(b"\x00\xc3\n@P\x02aba\xe0B\x01\x01ab".to_vec());
    let mut p = Vec::new();
    hash::encode_listpack((0..20).map(|i| (&b"field"[..i % 5 + 1], &b"-1234567"[..i % 8])), &mut p);
    bodies.push(p);
    let mut p = Vec::new();
    hash::encode_table_head(2, &mut p);
    hash::encode_pair(b"a", b"99999", &mut p);
    hash::encode_pair(b"b", &[9u8; 300], &mut p);
    bodies.push(p);
    for body in &bodies {
        for cut in 0..body.len() {
            let _ = decode(&payload(&body[..cut]), LIMITS);
        }
        for i in 0..body.len() {
            for x in [0x00, 0x01, 0x3f, 0x40, 0x7f, 0x80, 0x81, 0xc0, 0xc3, 0xf0, 0xff] {
                let mut b = body.clone();
                b[i] = x;
                let _ = decode(&payload(&b), LIMITS);
                b[i] = body[i] ^ 0x10;
                let _ = decode(&payload(&b), LIMITS);
            }
        }
    }
}

#[test]
fn lists_round_trip_in_nodes_and_malformed_ones_are_refused() {
    let elems: Vec<Vec<u8>> =
        (0..300).map(|i| if i % 50 == 0 { vec![b'x'; 3000] } else { format!("{i}").into_bytes() }).collect();
    let mut p = Vec::new();
    list::encode(&elems, &mut p);
    seal(&mut p);
    assert_eq!(decode(&p, LIMITS), Ok(Object::List(elems.clone())));
    // A node of one plain element, then a packed one; and the plain list of type 1.
    let mut body = vec![TYPE_LIST_QUICKLIST_2, 2, 1];
    write_string(b"big", &mut body);
    body.push(2);
    write_string(&listpack::encode([b"a".as_slice(), b"7"]), &mut body);
    assert_eq!(
        decode(&payload(&body), LIMITS),
        Ok(Object::List(vec![b"big".to_vec(), b"a".to_vec(), b"7".to_vec()]))
    );
    let mut body = vec![TYPE_LIST, 2];
    write_string(b"p", &mut body);
    write_string(b"q", &mut body);
    assert_eq!(decode(&payload(&body), LIMITS), Ok(Object::List(vec![b"p".to_vec(), b"q".to_vec()])));
    // No nodes; an empty node; a container that does not exist; more nodes than bytes.
    let malformed = |body: &[u8]| matches!(decode(&payload(body), LIMITS), Err(DecodeError::Malformed(_)));
    assert!(malformed(&[TYPE_LIST_QUICKLIST_2, 0]));
    let mut empty_node = vec![TYPE_LIST_QUICKLIST_2, 1, 2];
    write_string(&listpack::encode(std::iter::empty::<&[u8]>()), &mut empty_node);
    assert!(malformed(&empty_node));
    let mut container = vec![TYPE_LIST_QUICKLIST_2, 1, 3];
    write_string(b"x", &mut container);
    assert!(malformed(&container));
    assert!(decode(&payload(&[TYPE_LIST_QUICKLIST_2, 0x40, 0xff]), LIMITS).is_err());
    assert!(malformed(&[TYPE_LIST, 0]));
}
