//! The sorted-set commands of the generator: every one of them, with options in any order, valid
//! and invalid (scores that are not numbers, NaN, overflowing or hexadecimal; range ends of
//! every form; bad LIMITs, WEIGHTS, AGGREGATEs, numkeys), on keys of every type, and half the
//! time on `z0`..`z3`, which only sorted-set commands write (so that sets grow). Members come
//! from a small set, so that commands collide, with a long one now and then (it moves a set to
//! the large encoding) and `big_zset` adds many at once (past the small encoding's 128 members,
//! or close to it). Only what both servers answer alike is sent: ZRANDMEMBER asks for the whole
//! set (compared as a multiset) or for nothing; ZSCAN only for its errors and for keys with
//! nothing to scan (a cursor is each server's own); the blocking pops wait 10 ms at most; a
//! member range (`[a`, `(b`) only over the sets `zlex:*`, whose members all have score 0 (over
//! scores that differ Redis leaves the answer unspecified: it depends on its skiplist's random
//! levels), other keys getting only `-` and `+` or a range that is refused.

use super::super::compare::Cmp;
use super::{b, Arg, Cmd, Gen, Pool};

/// Scores ZADD takes, and that print in interesting ways.
const SCORES: &[&str] = &[
    "0",
    "1",
    "-1",
    "2",
    "2.5",
    "-3.75",
    "10",
    "100",
    "1e10",
    "-1e10",
    "inf",
    "-inf",
    "+inf",
    "-Infinity",
    "-0",
    "0.1",
    "1e-320",
    "3.0000000000000004",
    "9007199254740993",
    "1e300",
    "123456789.123",
    "0x10",
    "4611686018427387904",
    "-4611686018427387905",
];

/// Scores ZADD refuses.
const BAD_SCORES: &[&str] =
    &["nan", "NaN", "abc", "", " 1", "1 ", "1e400", "-1e400", "0x", "--1", "1.2.3", "1e"];

/// Members: short ones most often, an empty one, binary, integers, one past 64 bytes.
const MEMBERS: &[&[u8]] = &[
    b"m0",
    b"m1",
    b"m2",
    b"m3",
    b"a",
    b"b",
    b"m4",
    b"m5",
    b"",
    b"\x00bin\r\n",
    b"12",
    b"-5",
    b"m6",
    b"m7",
    b"member with spaces",
];

/// WEIGHTS' values.
const WEIGHTS: &[&str] = &["1", "2", "0", "-1", "0.5", "inf", "-inf", "1e300", "abc", "nan", ""];

impl Gen {
    /// A key for a sorted-set command: half the time one of `z0`..`z3` (plain keys that only
    /// sorted-set commands, DEL, RENAME and the flushes reach), else `k`, of pool `p`.
    pub(super) fn zkey(&mut self, p: Pool, k: Vec<u8>) -> Vec<u8> {
        if p == Pool::Plain && self.rng.chance(2) {
            format!("z{}", self.rng.range(0, 3)).into_bytes()
        } else {
            k
        }
    }

    /// `lo ..= hi` keys of pool `p`, as [`Gen::zkey`] picks them.
    fn zkeys(&mut self, p: Pool, lo: u64, hi: u64) -> Vec<Vec<u8>> {
        (0..self.rng.range(lo, hi))
            .map(|_| {
                let k = self.key(p);
                self.zkey(p, k)
            })
            .collect()
    }

    fn zmember(&mut self) -> Vec<u8> {
        if self.rng.chance(25) {
            return [&b"long-member-"[..], &[b'x'; 60]].concat();
        }
        if self.rng.chance(12) {
            return format!("r{}", self.rng.range(0, 300)).into_bytes();
        }
        let n = if self.rng.chance(3) { MEMBERS.len() } else { 6 };
        MEMBERS[self.rng.range(0, n as u64 - 1) as usize].to_vec()
    }

    fn zmembers(&mut self, lo: u64, hi: u64) -> Vec<Arg> {
        (0..self.rng.range(lo, hi)).map(|_| Arg::B(self.zmember())).collect()
    }

    /// A score for ZADD, ZINCRBY: now and then one that is refused.
    fn score(&mut self) -> Vec<u8> {
        match self.rng.range(0, 29) {
            0 => BAD_SCORES[self.rng.range(0, BAD_SCORES.len() as u64 - 1) as usize].as_bytes().to_vec(),
            1..=10 => (self.rng.range(0, 40) as i64 - 20).to_string().into_bytes(),
            11..=13 => {
                format!("{}.{}", self.rng.range(0, 99) as i64 - 50, self.rng.range(0, 999)).into_bytes()
            }
            _ => SCORES[self.rng.range(0, SCORES.len() as u64 - 1) as usize].as_bytes().to_vec(),
        }
    }

    /// An end of a score range: a score, excluded with `(` or not, or something that is not one.
    fn score_end(&mut self) -> Vec<u8> {
        match self.rng.range(0, 29) {
            0 => [&b"(("[..], b"1", b"nan", b"abc", b"(", b"", b"(nan", b" 2", b"2 "]
                [self.rng.range(0, 8) as usize]
                .to_vec(),
            1..=4 => {
                [&b"-inf"[..], b"+inf", b"(-inf", b"(inf", b"inf"][self.rng.range(0, 4) as usize].to_vec()
            }
            n => {
                let s = if n < 20 {
                    (self.rng.range(0, 40) as i64 - 20).to_string().into_bytes()
                } else {
                    let mut s = self.score();
                    while BAD_SCORES.iter().any(|b| b.as_bytes() == s.as_slice()) {
                        s = self.score();
                    }
                    s
                };
                if self.rng.chance(3) {
                    [&b"("[..], &s].concat()
                } else {
                    s
                }
            }
        }
    }

    /// A key for a member range, and whether it may be any range: one of `zlex:*` (members of
    /// score 0 only), or `k` (only `-`, `+` or a range that is refused).
    fn lex_key(&mut self, k: Vec<u8>) -> (Vec<u8>, bool) {
        if self.rng.chance(3) {
            (k, false)
        } else {
            (format!("zlex:{}", self.rng.range(0, 2)).into_bytes(), true)
        }
    }

    /// The ends of a member range: any (`any`), or only `-`, `+` and refused ones.
    fn lex_ends(&mut self, any: bool) -> (Vec<u8>, Vec<u8>) {
        if any {
            return (self.lex_end(), self.lex_end());
        }
        match self.rng.range(0, 9) {
            0 => (self.lex_end(), b"m3".to_vec()),
            1 => (b"+".to_vec(), b"-".to_vec()),
            2 => (b"-".to_vec(), b"-".to_vec()),
            3 => (b"+".to_vec(), b"+".to_vec()),
            _ => (b"-".to_vec(), b"+".to_vec()),
        }
    }

    /// An end of a member range: `-`, `+`, `[m`, `(m`, or something that is not one.
    fn lex_end(&mut self) -> Vec<u8> {
        match self.rng.range(0, 19) {
            0 => [&b"m3"[..], b"", b"+x", b"-x", b"]m"][self.rng.range(0, 4) as usize].to_vec(),
            1..=3 => b"-".to_vec(),
            4..=6 => b"+".to_vec(),
            n => {
                let m = self.zmember();
                [if n % 2 == 0 { &b"["[..] } else { &b"("[..] }, &m].concat()
            }
        }
    }

    /// A rank: small, negative, out of range, or not a number.
    fn rank(&mut self) -> Vec<u8> {
        match self.rng.range(0, 29) {
            0 => [&b"abc"[..], b"9223372036854775807", b"-9223372036854775808", b"1.5", b""]
                [self.rng.range(0, 4) as usize]
                .to_vec(),
            _ => (self.rng.range(0, 24) as i64 - 12).to_string().into_bytes(),
        }
    }

    /// A count or offset: mostly small, sometimes negative or not a number.
    fn zint(&mut self) -> Vec<u8> {
        match self.rng.range(0, 19) {
            0 => b"abc".to_vec(),
            1 => b"-1".to_vec(),
            2 => b"-3".to_vec(),
            3 => b"9223372036854775807".to_vec(),
            _ => self.rng.range(0, 6).to_string().into_bytes(),
        }
    }

    fn limit(&mut self) -> Vec<Arg> {
        let mut v = vec![self.name("LIMIT"), Arg::B(self.zint())];
        if !self.rng.chance(15) {
            v.push(Arg::B(self.zint()));
        }
        v
    }

    /// `numkeys key ...`: the keys from `p` (a plain key's answer never hangs on an expiring
    /// one), and now and then a numkeys that does not say how many follow.
    fn numkeys(&mut self, p: Pool, lo: u64, hi: u64) -> (Vec<Arg>, Vec<Vec<u8>>) {
        let keys = self.zkeys(p, lo, hi);
        let n = match self.rng.range(0, 24) {
            0 => b"0".to_vec(),
            1 => b"abc".to_vec(),
            2 => b"-1".to_vec(),
            3 => (keys.len() + 1 + self.rng.range(0, 3) as usize).to_string().into_bytes(),
            _ => keys.len().to_string().into_bytes(),
        };
        let mut a = vec![Arg::B(n)];
        a.extend(keys.iter().map(|k| b(k)));
        (a, keys)
    }

    pub(super) fn shuffle(&mut self, opts: &mut [Vec<Arg>]) {
        for i in (1..opts.len()).rev() {
            let j = self.rng.range(0, i as u64) as usize;
            opts.swap(i, j);
        }
    }

    /// One sorted-set command (`which`, from the tables) on key `k` of pool `p`.
    pub(super) fn zset(&mut self, which: &'static str, p: Pool, k: Vec<u8>) -> Vec<Cmd> {
        let k = self.zkey(p, k);
        let n = |g: &mut Gen| g.name(which);
        let (args, cmp, keys): (Vec<Arg>, Cmp, Vec<Vec<u8>>) = match which {
            "ZADD" => {
                let mut opts: Vec<Vec<Arg>> = Vec::new();
                for o in ["NX", "XX", "GT", "LT", "CH", "INCR"] {
                    if self.rng.chance(7) {
                        opts.push(vec![self.name(o)]);
                    }
                }
                self.shuffle(&mut opts);
                let incr =
                    opts.iter().flatten().any(|a| matches!(a, Arg::B(x) if x.eq_ignore_ascii_case(b"INCR")));
                let pairs = if incr && !self.rng.chance(10) { 1 } else { self.rng.range(1, 5) };
                let mut a = vec![n(self), b(&k)];
                a.extend(opts.into_iter().flatten());
                for _ in 0..pairs {
                    a.push(Arg::B(self.score()));
                    a.push(Arg::B(self.zmember()));
                }
                if self.rng.chance(25) {
                    a.pop();
                }
                (a, Cmp::Exact, vec![k])
            }
            "ZINCRBY" => {
                (vec![n(self), b(&k), Arg::B(self.score()), Arg::B(self.zmember())], Cmp::Exact, vec![k])
            }
            "ZREM" | "ZMSCORE" => {
                let mut a = vec![n(self), b(&k)];
                a.extend(self.zmembers(1, 4));
                (a, Cmp::Exact, vec![k])
            }
            "ZCARD" => (vec![n(self), b(&k)], Cmp::Exact, vec![k]),
            "ZSCORE" | "ZRANK" | "ZREVRANK" => {
                (vec![n(self), b(&k), Arg::B(self.zmember())], Cmp::Exact, vec![k])
            }
            "ZCOUNT" | "ZREMRANGEBYSCORE" => (
                vec![n(self), b(&k), Arg::B(self.score_end()), Arg::B(self.score_end())],
                Cmp::Exact,
                vec![k],
            ),
            "ZLEXCOUNT" | "ZREMRANGEBYLEX" => {
                let (k, any) = self.lex_key(k);
                let (x, y) = self.lex_ends(any);
                (vec![n(self), b(&k), Arg::B(x), Arg::B(y)], Cmp::Exact, vec![k])
            }
            "ZADDLEX" => {
                // The sets of member ranges: score 0, or a member removed.
                let k = format!("zlex:{}", self.rng.range(0, 2)).into_bytes();
                if self.rng.chance(4) {
                    let mut a = vec![self.name("ZREM"), b(&k)];
                    a.extend(self.zmembers(1, 3));
                    (a, Cmp::Exact, vec![k])
                } else {
                    let mut a = vec![self.name("ZADD"), b(&k)];
                    for o in ["NX", "XX", "CH"] {
                        if self.rng.chance(8) {
                            a.push(self.name(o));
                        }
                    }
                    for _ in 0..self.rng.range(1, 5) {
                        a.push(b(b"0"));
                        a.push(Arg::B(self.zmember()));
                    }
                    (a, Cmp::Exact, vec![k])
                }
            }
            "ZREMRANGEBYRANK" => {
                (vec![n(self), b(&k), Arg::B(self.rank()), Arg::B(self.rank())], Cmp::Exact, vec![k])
            }
            "ZRANGE" | "ZRANGESTORE" => {
                let mut a = vec![n(self)];
                let mut keys = vec![];
                if which == "ZRANGESTORE" {
                    let dst = self.key(p);
                    let dst = self.zkey(p, dst);
                    a.push(b(&dst));
                    keys.push(dst);
                }
                let mut opts: Vec<Vec<Arg>> = Vec::new();
                let by = self.rng.range(0, 2);
                let (k, lo, hi) = match by {
                    0 => (k, self.rank(), self.rank()),
                    1 => {
                        opts.push(vec![self.name("BYSCORE")]);
                        (k, self.score_end(), self.score_end())
                    }
                    _ => {
                        opts.push(vec![self.name("BYLEX")]);
                        let (k, any) = self.lex_key(k);
                        let (x, y) = self.lex_ends(any);
                        (k, x, y)
                    }
                };
                a.push(b(&k));
                keys.push(k);
                a.push(Arg::B(lo));
                a.push(Arg::B(hi));
                if self.rng.chance(3) {
                    opts.push(vec![self.name("REV")]);
                }
                // LIMIT now and then where it is refused (by rank), WITHSCORES where it is
                // refused (BYLEX, ZRANGESTORE).
                if (by != 0 && self.rng.chance(2)) || self.rng.chance(15) {
                    opts.push(self.limit());
                }
                if (which == "ZRANGE" && by != 2 && self.rng.chance(2)) || self.rng.chance(15) {
                    opts.push(vec![self.name("WITHSCORES")]);
                }
                if self.rng.chance(25) {
                    let extra = ["BYSCORE", "BYLEX", "FOO"][self.rng.range(0, 2) as usize];
                    opts.push(vec![self.name(extra)]);
                }
                self.shuffle(&mut opts);
                a.extend(opts.into_iter().flatten());
                (a, Cmp::Exact, keys)
            }
            "ZRANGEBYSCORE" | "ZREVRANGEBYSCORE" | "ZRANGEBYLEX" | "ZREVRANGEBYLEX" => {
                let lex = which.ends_with("LEX");
                let (k, x, y) = if lex {
                    let (k, any) = self.lex_key(k);
                    let (x, y) = self.lex_ends(any);
                    (k, x, y)
                } else {
                    (k, self.score_end(), self.score_end())
                };
                let mut a = vec![n(self), b(&k), Arg::B(x), Arg::B(y)];
                let mut opts: Vec<Vec<Arg>> = Vec::new();
                if self.rng.chance(2) {
                    opts.push(self.limit());
                }
                if (!lex && self.rng.chance(2)) || self.rng.chance(20) {
                    opts.push(vec![self.name("WITHSCORES")]);
                }
                self.shuffle(&mut opts);
                a.extend(opts.into_iter().flatten());
                (a, Cmp::Exact, vec![k])
            }
            "ZREVRANGE" => {
                let mut a = vec![n(self), b(&k), Arg::B(self.rank()), Arg::B(self.rank())];
                if self.rng.chance(2) {
                    a.push(self.name("WITHSCORES"));
                }
                (a, Cmp::Exact, vec![k])
            }
            "ZPOPMIN" | "ZPOPMAX" => {
                let mut a = vec![n(self), b(&k)];
                if self.rng.chance(2) {
                    a.push(Arg::B(self.zint()));
                }
                (a, Cmp::Exact, vec![k])
            }
            "ZMPOP" | "BZMPOP" => {
                let mut a = vec![n(self)];
                if which == "BZMPOP" {
                    a.push(Arg::B(self.timeout()));
                }
                let (nk, keys) = self.numkeys(p, 1, 3);
                a.extend(nk);
                let side = match self.rng.range(0, 19) {
                    0 => "MIDDLE",
                    1..=9 => "MIN",
                    _ => "MAX",
                };
                a.push(self.name(side));
                if self.rng.chance(2) {
                    a.push(self.name("COUNT"));
                    a.push(Arg::B(self.zint()));
                }
                (a, Cmp::Exact, keys)
            }
            "BZPOPMIN" | "BZPOPMAX" => {
                let keys = self.zkeys(p, 1, 3);
                let mut a = vec![n(self)];
                a.extend(keys.iter().map(|k| b(k)));
                a.push(Arg::B(self.timeout()));
                (a, Cmp::Exact, keys)
            }
            "ZUNION" | "ZINTER" | "ZDIFF" | "ZUNIONSTORE" | "ZINTERSTORE" | "ZDIFFSTORE" | "ZINTERCARD" => {
                let mut a = vec![n(self)];
                let mut keys = Vec::new();
                if which.ends_with("STORE") {
                    let dst = self.key(p);
                    let dst = self.zkey(p, dst);
                    a.push(b(&dst));
                    keys.push(dst);
                }
                let (nk, srcs) = self.numkeys(p, 1, 3);
                let given = srcs.len();
                a.extend(nk);
                keys.extend(srcs);
                let mut opts: Vec<Vec<Arg>> = Vec::new();
                let setop = which != "ZINTERCARD";
                if (setop && self.rng.chance(3)) || self.rng.chance(30) {
                    let mut w = vec![self.name("WEIGHTS")];
                    let count = if self.rng.chance(15) { given + 1 } else { given };
                    for _ in 0..count {
                        let x = if self.rng.chance(3) {
                            WEIGHTS[self.rng.range(0, WEIGHTS.len() as u64 - 1) as usize]
                        } else {
                            WEIGHTS[self.rng.range(0, 4) as usize]
                        };
                        w.push(b(x.as_bytes()));
                    }
                    opts.push(w);
                }
                if (setop && self.rng.chance(3)) || self.rng.chance(30) {
                    let f = match self.rng.range(0, 19) {
                        0 => "AVG",
                        1..=6 => "SUM",
                        7..=12 => "MIN",
                        _ => "MAX",
                    };
                    opts.push(vec![self.name("AGGREGATE"), self.name(f)]);
                }
                if (!which.ends_with("STORE") && setop && self.rng.chance(2)) || self.rng.chance(30) {
                    opts.push(vec![self.name("WITHSCORES")]);
                }
                if (!setop && self.rng.chance(2)) || self.rng.chance(30) {
                    opts.push(vec![self.name("LIMIT"), Arg::B(self.zint())]);
                }
                self.shuffle(&mut opts);
                a.extend(opts.into_iter().flatten());
                // ZUNION's and ZINTER's members of equal scores come in the members' order on
                // both; ZINTERSTORE and the others answer a count.
                (a, Cmp::Exact, keys)
            }
            "ZRANDMEMBER" => {
                // Only what does not depend on the draw: the whole set, or nothing.
                let (count, cmp): (&[u8], Cmp) = match self.rng.range(0, 5) {
                    0 => (b"0", Cmp::Exact),
                    1 => (b"abc", Cmp::Exact),
                    2 => (b"-9223372036854775808", Cmp::Exact),
                    _ => (b"100000", Cmp::Unordered),
                };
                let mut a = vec![n(self), b(&k), b(count)];
                // WITHSCORES only on nothing (its pairs would be compared as members).
                if cmp == Cmp::Exact && self.rng.chance(2) {
                    a.push(self.name("WITHSCORES"));
                }
                (a, cmp, vec![k])
            }
            "ZSCAN" => {
                // Errors only, and keys with nothing to scan: a cursor is each server's own.
                let bad: Vec<Arg> = match self.rng.range(0, 3) {
                    0 => vec![b(b"abc")],
                    1 => vec![b(b"0"), self.name("COUNT"), b(b"0")],
                    2 => vec![b(b"0"), self.name("FOO")],
                    // (Only 0 of the cursors: the others are each server's own.)
                    _ => vec![b(b"0"), self.name("MATCH")],
                };
                let missing = format!("nozset:{}", self.rng.range(0, 3)).into_bytes();
                let key = if self.rng.chance(3) { missing.clone() } else { k };
                let mut a = vec![n(self), b(&key)];
                if key == missing && self.rng.chance(2) {
                    a.extend([b(b"0"), self.name("COUNT"), b(b"5")]);
                } else {
                    a.extend(bad);
                }
                (a, Cmp::Exact, vec![key])
            }
            other => unreachable!("{other} is not a sorted-set command"),
        };
        let c = self.maybe_arity(Cmd::new(args, cmp));
        vec![self.finish(c, keys)]
    }

    /// A blocking pop's timeout: 10 ms (a pop that finds nothing answers a null after it), or
    /// one that is refused.
    pub(super) fn timeout(&mut self) -> Vec<u8> {
        match self.rng.range(0, 9) {
            0 => [&b"-1"[..], b"abc", b"inf", b""][self.rng.range(0, 3) as usize].to_vec(),
            _ => b"0.01".to_vec(),
        }
    }

    /// A ZADD of many members: past the small encoding's 128 at once, or close to it.
    pub(super) fn big_zset(&mut self) -> Cmd {
        let p = self.pool();
        let k = self.key(p);
        let k = self.zkey(p, k);
        let mut a = vec![self.name("ZADD"), b(&k)];
        for _ in 0..self.rng.range(100, 300) {
            let s = if self.rng.chance(2) {
                self.rng.range(0, 50).to_string().into_bytes()
            } else {
                format!("{}.{}", self.rng.range(0, 50), self.rng.range(0, 99)).into_bytes()
            };
            a.push(Arg::B(s));
            let m = if self.rng.chance(30) {
                let n = self.rng.range(65, 200) as usize;
                self.bytes(n)
            } else {
                format!("r{}", self.rng.range(0, 400)).into_bytes()
            };
            a.push(Arg::B(m));
        }
        self.finish(Cmd::new(a, Cmp::Exact), vec![k])
    }
}
