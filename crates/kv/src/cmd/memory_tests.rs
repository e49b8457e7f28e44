//! What a key costs: MEMORY USAGE of small and large collections, as Redis names their
//! encodings, through the changes, copies and restores that keep or move an encoding.

use super::family_harness::*;
use crate::resp::Value;

fn usage(h: &mut Harness<crate::store::VecMem>, key: &str) -> i64 {
    match h.cmd(&["MEMORY", "USAGE", key, "SAMPLES", "0"]) {
        Value::Int(n) => n,
        other => panic!("MEMORY USAGE {key}: {other:?}"),
    }
}

/// Bytes of the entry of a one-letter key whose value is a tree's handle (32 of header, 5 of
/// database prefix, the key, 16 of handle), in its class.
const ENTRY: i64 = 64;

fn long(n: usize, tag: &str) -> String {
    format!("{tag}:{}", "v".repeat(n - tag.len() - 1))
}

#[test]
fn a_collection_of_one_long_member_costs_a_few_hundred_bytes() {
    let mut h = Harness::new();
    let v = long(100, "x");
    h.cmd(&["HSET", "h", "f0", &v]);
    h.cmd(&["SADD", "s", &v]);
    h.cmd(&["ZADD", "z", "0", &v]);
    // As Redis 7.0: a value past hash-max-listpack-value (64) makes a hashtable, a member past
    // set-max-intset-entries' integers a hashtable, one past zset-max-listpack-value a
    // skiplist.
    assert_eq!(h.encoding("h"), "hashtable");
    assert_eq!(h.encoding("s"), "hashtable");
    assert_eq!(h.encoding("z"), "skiplist");
    // Redis 7.0 says 280, 272 and 1008 bytes. Here an entry of 64 bytes (its header, the key
    // with its database prefix, a tree's handle) and a leaf of 144 (16 bytes of head, a slot,
    // 12 bytes of hash and lengths, the field or member and the value); a sorted set has a leaf
    // in each of its two trees.
    assert_eq!(usage(&mut h, "h"), ENTRY + 144);
    assert_eq!(usage(&mut h, "s"), ENTRY + 144);
    let z = usage(&mut h, "z");
    assert!((ENTRY + 144 + 128..=512).contains(&z), "{z} bytes for a sorted set of one member");
    // The bytes in use are what MEMORY USAGE says.
    let used = h.store.used_bytes() as i64;
    h.cmd(&["DEL", "h", "s", "z"]);
    assert_eq!(used - h.store.used_bytes() as i64, 2 * (ENTRY + 144) + z);
}

#[test]
fn a_hash_past_the_small_encoding_grows_its_leaf_and_never_moves_back() {
    let mut h = Harness::new();
    // At the limit: a listpack, in the entry.
    h.cmd(&["HSET", "h", "f", &long(64, "a")]);
    assert_eq!(h.encoding("h"), "listpack");
    let small = usage(&mut h, "h");
    // Past it: a hashtable, a leaf of the class that holds the one field.
    h.cmd(&["HSET", "h", "f", &long(65, "a")]);
    assert_eq!(h.encoding("h"), "hashtable");
    let one = usage(&mut h, "h");
    assert!(one - small <= 160, "{small} bytes as a listpack, {one} as a hashtable of one field");
    // Fields added one at a time (29 of them fit one leaf): the leaf is made again larger, in
    // the smallest class that holds it (a class is a quarter larger than the one before,
    // rounded up to 64).
    let mut last = one;
    for n in 1..30 {
        h.cmd(&["HSET", "h", &format!("field{n}"), &long(100, &n.to_string())]);
        let u = usage(&mut h, "h");
        assert!(u >= last, "field {n}: {u} bytes after {last}");
        // The entry and a leaf: 16 bytes of head, then per field 12 bytes, its slot (2), its
        // name and its value.
        let held =
            16 + (12 + 2 + 1 + 65) + (1..=n).map(|k| 12 + 2 + format!("field{k}").len() + 100).sum::<usize>();
        assert!(u - ENTRY <= (held + held / 4 + 64) as i64, "{n} fields: {u} bytes, the leaf holds {held}");
        last = u;
    }
    // Emptied to one field, then none: a hashtable until the key goes.
    for n in 1..30 {
        h.cmd(&["HDEL", "h", &format!("field{n}")]);
    }
    assert_eq!(h.encoding("h"), "hashtable");
    assert_eq!(h.cmd(&["HLEN", "h"]), i(1));
    h.cmd(&["HDEL", "h", "f"]);
    assert_eq!(h.cmd(&["EXISTS", "h"]), i(0));
}

#[test]
fn copies_and_restores_of_a_small_hashtable_keep_its_encoding_and_size() {
    let mut h = Harness::new();
    let v = long(100, "x");
    h.cmd(&["HSET", "h", "f0", &v]);
    h.cmd(&["SADD", "s", &v]);
    h.cmd(&["ZADD", "z", "1.5", &v]);
    for key in ["h", "s", "z"] {
        let enc = h.encoding(key);
        let bytes = usage(&mut h, key);
        let copy = format!("{key}:copy");
        assert_eq!(h.cmd(&["COPY", key, &copy]), i(1));
        assert_eq!((h.encoding(&copy), usage(&mut h, &copy)), (enc.clone(), bytes), "COPY {key}");
        let Value::Bulk(payload) = h.cmd(&["DUMP", key]) else { panic!("DUMP {key}") };
        let back = format!("{key}:restored");
        let r = h.cmd_bytes(&[b"RESTORE", back.as_bytes(), b"0", &payload]);
        assert_eq!(r, Value::Simple(b"OK".to_vec()));
        assert_eq!((h.encoding(&back), usage(&mut h, &back)), (enc, bytes), "RESTORE {key}");
    }
    assert_eq!(h.cmd(&["HGET", "h:restored", "f0"]), b(&v));
    assert_eq!(h.cmd(&["SISMEMBER", "s:copy", &v]), i(1));
    assert_eq!(h.cmd(&["ZSCORE", "z:restored", &v]), b("1.5"));
}

#[test]
fn memory_usage_counts_a_sorted_sets_trees_and_a_lists_nodes() {
    let mut h = Harness::new();
    let mut z = vec!["ZADD".to_string(), "z".to_string()];
    let mut l = vec!["RPUSH".to_string(), "l".to_string()];
    for n in 0..300 {
        z.push(n.to_string());
        z.push(long(100, &n.to_string()));
        l.push(long(100, &n.to_string()));
    }
    h.cmd_owned(&z);
    h.cmd_owned(&l);
    assert_eq!((h.encoding("z"), h.encoding("l")), ("skiplist".to_string(), "quicklist".to_string()));
    let before = h.store.used_bytes() as i64;
    let (zu, lu) = (usage(&mut h, "z"), usage(&mut h, "l"));
    // Each member is held twice (the order tree and the member tree), each element once.
    assert!(zu > 2 * 300 * 100, "{zu} bytes for 300 members of 100 bytes");
    assert!(lu > 300 * 100, "{lu} bytes for 300 elements of 100 bytes");
    h.cmd(&["DEL", "z", "l"]);
    // The sorted set (300 members) is freed in the background, the list (a few nodes) by the
    // DEL.
    assert_eq!(h.lazyfree(), 1);
    assert_eq!(before - h.store.used_bytes() as i64, zu + lu, "MEMORY USAGE is what DEL frees");
}
