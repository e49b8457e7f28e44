//! The store's work per SADD and per ZADD on a collection of a million members, without the
//! server around it: for counting instructions (`valgrind --tool=callgrind
//! --toggle-collect='*measured_ops*'`) and the ranges and bytes of each group.
//!
//! ```text
//! tree_cost build FILE sadd|zadd MEMBERS    # a region file holding the set or sorted set
//! tree_cost run FILE sadd|zadd OPS          # OPS commands on it, 50 per group
//! ```
//!
//! `build` grows the collection as the benchmark loads it (1000 members per command, members
//! `m` and 15 digits, random integer scores). `run` does what SADD of a new member (numbered
//! from the collection's size up) or ZADD of an existing member with a new score does to the
//! store, each command between a savepoint and the next, 50 commands per sealed group, and
//! prints the groups' ranges and bytes. The file is changed: run on a copy.

use mojim_kv::store::{Mem, Store, ENC_TREE, ENC_ZSET_INDEX, KIND_SET, KIND_ZSET};
use mojim_region::RegionFile;
use std::path::Path;

const SET_KEY: &[u8] = b"bench:set";
const ZSET_KEY: &[u8] = b"bench:zset";
const MAX_RANGES: usize = 1024;
const PER_GROUP: u64 = 50;
const REGION_BYTES: u64 = 768 << 20;

fn member(n: u64) -> [u8; 16] {
    let mut b = *b"m000000000000000";
    let mut v = n;
    for d in b[1..].iter_mut().rev() {
        *d = b'0' + (v % 10) as u8;
        v /= 10;
    }
    b
}

/// A fixed sequence of numbers (xorshift), so that every run does the same work.
struct Rng(u64);

impl Rng {
    fn next(&mut self, below: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % below
    }
}

fn fail(what: &str) -> ! {
    eprintln!("tree_cost: {what}");
    eprintln!("usage: tree_cost build FILE sadd|zadd MEMBERS | tree_cost run FILE sadd|zadd OPS");
    std::process::exit(2)
}

/// One SADD of `m` to the set at `key`.
fn sadd<M: Mem>(s: &mut Store<M>, m: &[u8]) {
    let mut f = s.find(SET_KEY).expect("find").expect("the set exists");
    let mut t = s.tree_of(&f).expect("a handle").expect("a tree");
    let before = t;
    s.tree_set(&mut t, m, b"").expect("tree_set");
    if t != before {
        s.set_tree(&mut f, &t).expect("set_tree");
    }
}

/// One ZADD of `m` with `score` to the sorted set at `key`, which holds `m`.
fn zadd<M: Mem>(s: &mut Store<M>, m: &[u8], score: f64) {
    let mut f = s.find(ZSET_KEY).expect("find").expect("the sorted set exists");
    let mut z = s.zindex_of(&f).expect("a handle").expect("an index");
    let before = z;
    match s.zindex_score(&z, m).expect("zindex_score") {
        Some(cur) if cur != score => s.zindex_rescore(&mut z, m, cur, score).expect("zindex_rescore"),
        Some(_) => {}
        None => s.zindex_add(&mut z, m, score).expect("zindex_add"),
    }
    if z != before {
        s.set_zindex(&mut f, &z).expect("set_zindex");
    }
}

fn build(path: &Path, zset: bool, members: u64) {
    let file = RegionFile::create(path, [7; 16], REGION_BYTES).expect("create the region file");
    let mut s = Store::open(&file, MAX_RANGES).expect("open the store");
    let _ = s.take_resend();
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    if zset {
        let z = s.zindex_new().expect("an index");
        s.put_encoded(ZSET_KEY, KIND_ZSET, ENC_ZSET_INDEX, 0, &[&z.encode()], 0, None).expect("put");
    } else {
        let t = s.tree_new().expect("a tree");
        s.put_encoded(SET_KEY, KIND_SET, ENC_TREE, 0, &[&t.encode()], 0, None).expect("put");
    }
    s.seal(MAX_RANGES).expect("seal");
    for chunk in 0..members.div_ceil(1000) {
        let _sp = s.savepoint();
        for n in chunk * 1000..(chunk * 1000 + 1000).min(members) {
            if zset {
                zadd(&mut s, &member(n), rng.next(1_000_000_000) as f64);
            } else {
                sadd(&mut s, &member(n));
            }
        }
        s.seal(MAX_RANGES).expect("seal");
    }
    println!("built {members} members; heap {} MiB", s.heap_top_bytes() >> 20);
}

/// The commands measured: `ops` of them, 50 per group. Returns (groups, ranges, bytes) of the
/// groups sealed, and the ranges and bytes before sealing merged them.
#[inline(never)]
fn measured_ops(s: &mut Store<&RegionFile>, zset: bool, first: u64, ops: u64) -> [u64; 5] {
    let mut rng = Rng(0x2545_F491_4F6C_DD1D);
    let [mut groups, mut ranges, mut bytes, mut raw_ranges, mut raw_bytes] = [0u64; 5];
    for k in 0..ops {
        let _sp = s.savepoint();
        if zset {
            let m = member(rng.next(first));
            zadd(s, &m, rng.next(1_000_000_000) as f64);
        } else {
            sadd(s, &member(first + k));
        }
        if (k + 1) % PER_GROUP == 0 || k + 1 == ops {
            raw_ranges += s.batch_ranges() as u64;
            raw_bytes += s.batch_bytes();
            let g = s.seal(MAX_RANGES).expect("seal").expect("a group");
            groups += 1;
            ranges += g.len() as u64;
            bytes += g.iter().map(|r| r.len).sum::<u64>();
        }
    }
    [groups, ranges, bytes, raw_ranges, raw_bytes]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 5 {
        fail("four arguments");
    }
    let path = Path::new(&args[2]);
    let zset = match args[3].as_str() {
        "sadd" => false,
        "zadd" => true,
        other => fail(&format!("a workload of sadd or zadd, not {other:?}")),
    };
    let n: u64 = args[4].parse().unwrap_or_else(|_| fail(&format!("a count, not {:?}", args[4])));
    match args[1].as_str() {
        "build" => build(path, zset, n),
        "run" => {
            let file = RegionFile::open(path).expect("open the region file");
            let mut s = Store::open(&file, MAX_RANGES).expect("open the store");
            let _ = s.take_resend();
            let key = if zset { ZSET_KEY } else { SET_KEY };
            let f = s.find(key).expect("find").expect("the collection exists");
            let len = if zset {
                s.zindex_of(&f).expect("a handle").expect("an index").len()
            } else {
                s.tree_of(&f).expect("a handle").expect("a tree").len
            };
            let [groups, ranges, bytes, raw_ranges, raw_bytes] = measured_ops(&mut s, zset, len, n);
            println!(
                "{n} ops on {len} members: {groups} groups, {:.1} ranges and {:.0} bytes per group \
                 ({:.1} ranges and {:.0} bytes stored before merging)",
                ranges as f64 / groups as f64,
                bytes as f64 / groups as f64,
                raw_ranges as f64 / groups as f64,
                raw_bytes as f64 / groups as f64,
            );
        }
        other => fail(&format!("build or run, not {other:?}")),
    }
}
