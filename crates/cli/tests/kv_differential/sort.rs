//! SORT and SORT_RO: of a list, a set (small, an intset, a table) and a sorted set, of a string,
//! a hash and a missing key, by the elements, `ALPHA`, `DESC`, `BY` a weight key (`w_*`) or a
//! hash field (`h_*->f`) or a constant (`nosort`: no sorting), `GET` of the element (`#`), of
//! weight keys and fields, `LIMIT` (negative, huge, not numbers), `STORE`.
//!
//! The sources are the `sort:*` keys, which only SORT steps write, with numbers and words (no
//! number in hexadecimal, which Redis's `strtod` reads and mojim kv refuses:
//! docs/COMPATIBILITY.md); the weights `w_*` and `h_*` too, with numbers, words and nothing. Not
//! the plain keys, which may hold small sorted sets: Redis's SORT converts one to a skiplist
//! (OBJECT ENCODING then differs: docs/COMPATIBILITY.md), reading its scores with `strtod`, which
//! may leave `errno` set (see [`Gen::sort`]).
//!
//! Where Redis leaves the order to its dictionary (a set under a constant `BY`, without `STORE`,
//! which makes Redis sort it), or ties to its sort (`ALPHA` by weights that are equal or
//! missing: Redis's comparison then answers 0, and the order is its sort's), the elements are
//! compared as a multiset, or by their number under a `LIMIT` (and not stored).

use super::super::compare::Cmp;
use super::{b, Arg, Cmd, Gen};

/// Elements of the `sort:*` keys, and the names the weight keys are made from.
const ELEMS: &[&str] =
    &["1", "2", "3", "10", "-5", "1.5", "1e3", " 7", "0", "a", "b", "m0", "m1", "e1", "e2", "10a", ""];

/// Weights: numbers, and what is not one.
const WEIGHTS: &[&str] = &["1", "2", "-1", "0.5", "100", "1e3", "-inf", "inf", "abc", "", "3"];

/// The keys sorted (the three collections more often), and `sort:big`, a set of many members.
const SOURCES: &[&str] = &[
    "sort:l",
    "sort:s",
    "sort:z",
    "sort:l",
    "sort:s",
    "sort:z",
    "sort:str",
    "sort:h",
    "sort:none",
    "sort:big",
];

impl Gen {
    /// SORT or SORT_RO (`which`), now and then after writes of its sources or its weights.
    pub(super) fn sort(&mut self, which: &'static str) -> Vec<Cmd> {
        let mut v = Vec::new();
        for _ in 0..self.rng.range(0, 2) {
            v.push(self.sort_setup());
        }
        let src = SOURCES[self.rng.range(0, SOURCES.len() as u64 - 1) as usize].as_bytes().to_vec();
        let mut opts: Vec<Vec<Arg>> = Vec::new();
        let by = match self.rng.range(0, 9) {
            0..=3 => None,
            4 | 8 => Some("w_*"),
            5 => Some("h_*->f"),
            6 => Some("nosort"),
            _ => Some(["w_*->f", "k", "*", "h_*->"][self.rng.range(0, 3) as usize]),
        };
        if let Some(by) = by {
            opts.push(vec![self.name("BY"), b(by.as_bytes())]);
        }
        let dontsort = by.is_some_and(|b| !b.contains('*'));
        let alpha = self.rng.chance(3);
        if alpha {
            opts.push(vec![self.name("ALPHA")]);
        }
        if self.rng.chance(3) {
            let order = if self.rng.chance(2) { "DESC" } else { "ASC" };
            opts.push(vec![self.name(order)]);
        }
        let limited = self.rng.chance(3);
        if limited {
            let ends: [&str; 2] = match self.rng.range(0, 9) {
                0 => ["-1", "2"],
                1 => ["0", "-1"],
                2 => ["abc", "1"],
                3 => ["9223372036854775807", "1"],
                4 => ["5", "100"],
                5 => ["0", "0"],
                _ => ["1", "2"],
            };
            let mut l = vec![self.name("LIMIT"), b(ends[0].as_bytes())];
            if !self.rng.chance(20) {
                l.push(b(ends[1].as_bytes()));
            }
            opts.push(l);
        }
        for _ in 0..self.rng.range(0, 3) {
            let g = ["#", "w_*", "h_*->f", "nosuch_*", "w_*->f", "#", "h_*->"][self.rng.range(0, 6) as usize];
            opts.push(vec![self.name("GET"), b(g.as_bytes())]);
        }
        // ALPHA by weights leaves ties (equal or missing weights) as Redis's sort leaves them:
        // in the order it loaded the elements (its dictionary's, for a set or a sorted set) under
        // a stable sort, in any under its partial quicksort (LIMIT); by numbers, ties go by the
        // elements.
        let ties = alpha && by.is_some_and(|b| b.contains('*')) && (src != b"sort:l" || limited);
        let mut keys = vec![src.clone()];
        if !ties && (which == "SORT" || self.rng.chance(20)) && self.rng.chance(3) {
            let p = self.pool();
            let dst = self.key(p);
            opts.push(vec![self.name("STORE"), b(&dst)]);
            keys.push(dst);
        }
        let store = keys.len() == 2;
        if self.rng.chance(30) {
            opts.push(vec![self.name("FOO")]);
        }
        self.shuffle(&mut opts);
        // Redis's SORT reads a number with `strtod` and checks `errno` without clearing it: after
        // any number that overflowed or underflowed before (`INCRBYFLOAT k 1e400`, a score of
        // 1e-320), it refuses every element. A ZADD's score clears it (`string2d`); XX of a key
        // that does not exist changes nothing.
        let reset = vec![self.name("ZADD"), b(b"sort:errno"), self.name("XX"), b(b"0"), b(b"x")];
        v.push(Cmd::new(reset, Cmp::Exact));
        let mut a = vec![self.name(which), b(&src)];
        a.extend(opts.into_iter().flatten());
        let cmp = Cmp::Sort { unordered: (dontsort && !store) || ties, limited };
        let c = self.maybe_arity(Cmd::new(a, cmp));
        v.push(self.finish(c, keys));
        v
    }

    /// A write of a `sort:*` source, or of weight keys or fields.
    fn sort_setup(&mut self) -> Cmd {
        let pick = |g: &mut Gen| ELEMS[g.rng.range(0, ELEMS.len() as u64 - 1) as usize].as_bytes().to_vec();
        let weight =
            |g: &mut Gen| WEIGHTS[g.rng.range(0, WEIGHTS.len() as u64 - 1) as usize].as_bytes().to_vec();
        let (a, key): (Vec<Arg>, &[u8]) = match self.rng.range(0, 14) {
            0 | 1 => (vec![self.name("RPUSH"), b(b"sort:l")], b"sort:l"),
            2 | 3 => (vec![self.name("SADD"), b(b"sort:s")], b"sort:s"),
            4 | 5 => (vec![self.name("ZADD"), b(b"sort:z")], b"sort:z"),
            6 => {
                let key = SOURCES[self.rng.range(0, SOURCES.len() as u64 - 1) as usize].as_bytes().to_vec();
                let c = Cmd::new(vec![self.name("DEL"), b(&key)], Cmp::Exact);
                return self.finish(c, vec![key]);
            }
            7 | 8 => {
                let f = if self.rng.chance(5) { "g" } else { "f" };
                let h = format!("h_{}", elem(self)).into_bytes();
                let c = Cmd::new(
                    vec![self.name("HSET"), b(&h), b(f.as_bytes()), Arg::B(weight(self))],
                    Cmp::Exact,
                );
                return self.finish(c, vec![h]);
            }
            9 => {
                let c = Cmd::new(vec![self.name("SET"), b(b"sort:str"), b(b"1")], Cmp::Exact);
                return self.finish(c, vec![b"sort:str".to_vec()]);
            }
            10 => {
                let c = Cmd::new(vec![self.name("HSET"), b(b"sort:h"), b(b"f"), b(b"1")], Cmp::Exact);
                return self.finish(c, vec![b"sort:h".to_vec()]);
            }
            // Integers past the intset's 512 at once or close to it, or words.
            11 => {
                let mut a = vec![self.name("SADD"), b(b"sort:big")];
                let ints = self.rng.chance(2);
                for _ in 0..self.rng.range(50, 600) {
                    let m = if ints {
                        (self.rng.range(0, 1000) as i64 - 100).to_string().into_bytes()
                    } else {
                        format!("r{}", self.rng.range(0, 800)).into_bytes()
                    };
                    a.push(Arg::B(m));
                }
                return self.finish(Cmd::new(a, Cmp::Exact), vec![b"sort:big".to_vec()]);
            }
            _ => {
                let mut a = vec![self.name("MSET")];
                let mut keys = Vec::new();
                for _ in 0..self.rng.range(1, 4) {
                    let w = format!("w_{}", elem(self)).into_bytes();
                    a.push(b(&w));
                    a.push(Arg::B(weight(self)));
                    keys.push(w);
                }
                return self.finish(Cmd::new(a, Cmp::Exact), keys);
            }
        };
        let mut a = a;
        for _ in 0..self.rng.range(1, 4) {
            if key == b"sort:z" {
                a.push(Arg::B(self.small_int(-3, 3)));
            }
            a.push(Arg::B(pick(self)));
        }
        self.finish(Cmd::new(a, Cmp::Exact), vec![key.to_vec()])
    }
}

/// The element-named part of a weight key: one of `ELEMS`, or of `sort:big`'s members.
fn elem(g: &mut Gen) -> String {
    if g.rng.chance(3) {
        return if g.rng.chance(2) {
            (g.rng.range(0, 1000) as i64 - 100).to_string()
        } else {
            format!("r{}", g.rng.range(0, 800))
        };
    }
    ELEMS[g.rng.range(0, ELEMS.len() as u64 - 1) as usize].to_string()
}
