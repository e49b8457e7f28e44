//! Property tests: requests and values survive a round trip whatever the bytes and however
//! they are cut; garbage never panics and never reserves past the limits.

use super::*;
use proptest::prelude::*;

fn args() -> impl Strategy<Value = Vec<Vec<u8>>> {
    prop::collection::vec(prop::collection::vec(any::<u8>(), 0..40), 1..8)
}

fn value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        prop::collection::vec(any::<u8>().prop_filter("no CR/LF", |b| *b != b'\r' && *b != b'\n'), 0..10)
            .prop_map(Value::Simple),
        any::<i64>().prop_map(Value::Int),
        prop::collection::vec(any::<u8>(), 0..20).prop_map(Value::Bulk),
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
    ];
    leaf.prop_recursive(4, 32, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Set),
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Push),
            prop::collection::vec((inner.clone(), inner), 0..3).prop_map(Value::Map),
        ]
    })
}

/// Parses every request in `buf`, fed in pieces ending at `cuts`.
fn parse_all(buf: &[u8], cuts: &[usize], limits: Limits) -> Result<Vec<Vec<Vec<u8>>>, ProtocolError> {
    let mut p = Parser::new(limits);
    let mut out = Vec::new();
    let mut start = 0;
    let mut ends: Vec<usize> = cuts.iter().map(|c| c % (buf.len() + 1)).collect();
    ends.push(buf.len());
    ends.sort_unstable();
    for end in ends {
        loop {
            if start >= end {
                break;
            }
            match p.parse(&buf[start..end])? {
                Parsed::Incomplete => break,
                Parsed::Empty { len } => start += len,
                Parsed::Request { len } => {
                    out.push((0..p.argc()).map(|i| p.arg(&buf[start..end], i).to_vec()).collect());
                    start += len;
                }
            }
        }
    }
    Ok(out)
}

proptest! {
    #[test]
    fn requests_round_trip_however_cut(reqs in prop::collection::vec(args(), 1..5), cuts in prop::collection::vec(any::<usize>(), 0..6)) {
        let mut buf = Vec::new();
        for r in &reqs {
            encode_request(r, &mut buf);
        }
        let got = parse_all(&buf, &cuts, Limits::default()).unwrap();
        prop_assert_eq!(got, reqs);
    }

    #[test]
    fn values_round_trip(v in value(), resp3 in any::<bool>()) {
        let mut buf = Vec::new();
        v.encode(resp3, &mut buf);
        let (d, n) = decode(&buf, &Limits::default()).unwrap().unwrap();
        prop_assert_eq!(n, buf.len());
        // RESP2 has no null of its own: `$-1` decodes as the same null.
        prop_assert_eq!(d, v);
    }

    #[test]
    fn garbage_never_panics(buf in prop::collection::vec(any::<u8>(), 0..200), cuts in prop::collection::vec(any::<usize>(), 0..4)) {
        let limits = Limits { max_bulk: 64, max_args: 8, max_inline: 32 };
        let _ = parse_all(&buf, &cuts, limits);
        let _ = decode(&buf, &limits);
    }

    #[test]
    fn garbage_after_a_star_never_panics(tail in prop::collection::vec(prop_oneof![Just(b'*'), Just(b'$'), Just(b'\r'), Just(b'\n'), Just(b'-'), Just(b'1'), Just(b'0'), any::<u8>()], 0..80)) {
        let mut buf = b"*".to_vec();
        buf.extend_from_slice(&tail);
        let limits = Limits { max_bulk: 16, max_args: 4, max_inline: 16 };
        if let Ok(reqs) = parse_all(&buf, &[], limits) {
            for r in reqs {
                prop_assert!(r.len() <= 4);
                prop_assert!(r.iter().all(|a| a.len() <= 32));
            }
        }
        let _ = decode(&buf, &limits);
    }
}
