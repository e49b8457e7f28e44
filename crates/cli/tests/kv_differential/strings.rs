//! The string commands beyond GET and SET, and the bitmaps: GETEX (every expiry option, and
//! bad ones), GETRANGE and SUBSTR, SETRANGE (offsets up to and past `MAX_BULK`), INCRBYFLOAT
//! (infinities, NaN, overflow, text that is not a number), LCS (every option), SETBIT, GETBIT,
//! BITCOUNT and BITPOS (BYTE and BIT ranges, huge and negative ends), BITOP (each operation,
//! NOT of two keys). They run on keys of every type, missing ones included.
//!
//! LCS builds a table of (len1 + 1) · (len2 + 1) counts, and the plain keys hold values up to
//! `MAX_BULK`: its two keys are the `lcs:*` keys, which only LCS steps write (with short
//! strings), or a plain key and `lcs:none`, which nothing writes (a table of one column).
//! Redis refuses a table past `proto-max-bulk-len` where mojim kv answers (`Cmp::Lcs`).

use super::super::compare::Cmp;
use super::{b, Arg, Cmd, Gen, Pool, MAX_BULK};

/// Increments for INCRBYFLOAT and HINCRBYFLOAT: numbers of every form, and not numbers.
pub(super) const FLOATS: &[&str] = &[
    "1.5",
    "-0.25",
    "10",
    "-3",
    "1e3",
    "3.0e-5",
    "0.1",
    "5.0e3",
    "1e308",
    "-1e308",
    "1e400",
    "inf",
    "-inf",
    "+inf",
    "nan",
    "abc",
    "",
    " 1",
    "1 ",
    "0x10",
    "1.2.3",
    "-0",
    "9223372036854775807",
    "17976931348623157e292",
    "1e-320",
];

/// Range ends for GETRANGE, SUBSTR, BITCOUNT and BITPOS.
fn range_end(g: &mut Gen) -> Vec<u8> {
    match g.rng.range(0, 19) {
        0 => [&b"9223372036854775807"[..], b"-9223372036854775808", b"abc", b"", b"1.5"]
            [g.rng.range(0, 4) as usize]
            .to_vec(),
        1..=3 => g.small_int(-100_000, 100_000),
        _ => g.small_int(-20, 20),
    }
}

/// A bit offset: small, within the largest string, at its end, past it, or not one.
fn bit_offset(g: &mut Gen) -> Vec<u8> {
    let last = 8 * MAX_BULK as i64 - 1;
    match g.rng.range(0, 29) {
        0 => [&b"-1"[..], b"abc", b"4294967296", b"9223372036854775807", b""][g.rng.range(0, 4) as usize]
            .to_vec(),
        1 => (last + g.rng.range(0, 1) as i64).to_string().into_bytes(),
        2..=4 => g.small_int(0, 8 * 70_000),
        _ => g.small_int(0, 200),
    }
}

/// A short string for the `lcs:*` keys: a small alphabet, so that the sequences share a lot.
fn lcs_value(g: &mut Gen) -> Vec<u8> {
    let n = g.rng.range(0, 120) as usize;
    if g.rng.chance(8) {
        return g.bytes(n);
    }
    (0..n).map(|_| b"ACGT"[g.rng.range(0, 3) as usize]).collect()
}

impl Gen {
    /// One string or bitmap command (`which`) on key `k` of pool `p`.
    pub(super) fn string(&mut self, which: &'static str, p: Pool, k: Vec<u8>) -> Vec<Cmd> {
        let n = |g: &mut Gen| g.name(which);
        let (args, cmp, keys): (Vec<Arg>, Cmp, Vec<Vec<u8>>) = match which {
            "GETEX" => {
                let mut a = vec![n(self), b(&k)];
                match self.rng.range(0, 12) {
                    0 => a.extend([self.name("EX"), self.span(1000)]),
                    1 => a.extend([self.name("PX"), self.span(1)]),
                    2 | 3 => a.extend([self.name("EXAT"), self.at(1000, p, true)]),
                    4 | 5 => a.extend([self.name("PXAT"), self.at(1, p, true)]),
                    6 => a.push(self.name("PERSIST")),
                    7 => a.extend([self.name("EX"), b(b"100"), self.name("PERSIST")]),
                    8 => a.extend([self.name("PERSIST"), self.name("PX"), b(b"100000")]),
                    9 => a.push(self.name("EX")),
                    10 => a.push(b(b"FOO")),
                    _ => {}
                }
                (a, Cmp::Exact, vec![k])
            }
            "GETRANGE" | "SUBSTR" => {
                (vec![n(self), b(&k), Arg::B(range_end(self)), Arg::B(range_end(self))], Cmp::Exact, vec![k])
            }
            "SETRANGE" => {
                let v = if self.rng.chance(10) {
                    self.value()
                } else {
                    let len = self.rng.range(0, 12) as usize;
                    self.bytes(len)
                };
                let off: Vec<u8> = match self.rng.range(0, 19) {
                    0 => [&b"-1"[..], b"abc", b"9223372036854775807", b"", b"1.5"]
                        [self.rng.range(0, 4) as usize]
                        .to_vec(),
                    // At the largest string's end: one byte more is refused.
                    1 | 2 => {
                        let end = MAX_BULK as i64 - v.len() as i64;
                        (end + self.rng.range(0, 2) as i64 - 1).max(0).to_string().into_bytes()
                    }
                    3..=5 => self.small_int(0, 70_000),
                    _ => self.small_int(0, 40),
                };
                (vec![n(self), b(&k), Arg::B(off), Arg::B(v)], Cmp::Exact, vec![k])
            }
            "INCRBYFLOAT" => {
                let by = if self.rng.chance(3) {
                    self.int_text()
                } else {
                    FLOATS[self.rng.range(0, FLOATS.len() as u64 - 1) as usize].as_bytes().to_vec()
                };
                (vec![n(self), b(&k), Arg::B(by)], Cmp::Exact, vec![k])
            }
            "LCS" => return self.lcs(k),
            "SETBIT" => {
                let v: &[u8] =
                    [&b"0"[..], b"1", b"1", b"0", b"2", b"-1", b"abc", b""][self.rng.range(0, 7) as usize];
                (vec![n(self), b(&k), Arg::B(bit_offset(self)), b(v)], Cmp::Exact, vec![k])
            }
            "GETBIT" => (vec![n(self), b(&k), Arg::B(bit_offset(self))], Cmp::Exact, vec![k]),
            "BITCOUNT" | "BITPOS" => {
                let mut a = vec![n(self), b(&k)];
                if which == "BITPOS" {
                    let bit: &[u8] =
                        [&b"0"[..], b"1", b"1", b"0", b"2", b"abc"][self.rng.range(0, 5) as usize];
                    a.push(b(bit));
                }
                let ends = match self.rng.range(0, 9) {
                    0..=2 => 0,
                    3 if which == "BITPOS" => 1,
                    3..=6 => 2,
                    _ => 3,
                };
                // `BUG_BITCOUNT_ARGUMENT_ORDER`: with a unit, ends that are numbers.
                let numbers = ends == 3 && which == "BITCOUNT" && self.gates.bitcount_argument_order;
                for _ in 0..ends.min(2) {
                    let end = if numbers { self.small_int(-20, 20) } else { range_end(self) };
                    a.push(Arg::B(end));
                }
                if ends == 3 {
                    let unit = ["BYTE", "BIT", "BIT", "FOO"][self.rng.range(0, 3) as usize];
                    a.push(self.name(unit));
                }
                (a, Cmp::Exact, vec![k])
            }
            "BITOP" => {
                let op = ["AND", "OR", "XOR", "NOT", "NOT", "FOO"][self.rng.range(0, 5) as usize];
                let dst = self.key(p);
                let srcs =
                    if op == "NOT" && !self.rng.chance(5) { vec![self.key(p)] } else { self.keys(p, 1, 3) };
                let mut a = vec![n(self), self.name(op), b(&dst)];
                a.extend(srcs.iter().map(|s| b(s)));
                let mut keys = vec![dst];
                keys.extend(srcs);
                (a, Cmp::Exact, keys)
            }
            other => unreachable!("{other} is not a string command of this module"),
        };
        let c = self.maybe_arity(Cmd::new(args, cmp));
        vec![self.finish(c, keys)]
    }

    /// LCS of two `lcs:*` keys (one of them written first, now and then), or of a plain key
    /// and the missing `lcs:none`, with its options.
    fn lcs(&mut self, k: Vec<u8>) -> Vec<Cmd> {
        let mut v = Vec::new();
        let lcs_key = |g: &mut Gen| format!("lcs:{}", g.rng.range(0, 2)).into_bytes();
        if self.rng.chance(2) {
            let key = lcs_key(self);
            let set = if self.rng.chance(15) {
                Cmd::new(vec![self.name("RPUSH"), b(&key), b(b"x")], Cmp::Exact)
            } else {
                Cmd::new(vec![self.name("SET"), b(&key), Arg::B(lcs_value(self))], Cmp::Exact)
            };
            v.push(self.finish(set, vec![key]));
        }
        let (x, y) = if self.rng.chance(4) {
            let none = b"lcs:none".to_vec();
            if self.rng.chance(2) {
                (k, none)
            } else {
                (none, k)
            }
        } else {
            (lcs_key(self), lcs_key(self))
        };
        let mut a = vec![self.name("LCS"), b(&x), b(&y)];
        let mut opts: Vec<Vec<Arg>> = Vec::new();
        match self.rng.range(0, 9) {
            0..=2 => {}
            3 => opts.push(vec![self.name("LEN")]),
            4 => opts.push(vec![self.name("LEN"), self.name("IDX")]),
            _ => opts.push(vec![self.name("IDX")]),
        }
        if self.rng.chance(3) {
            let m = ["0", "1", "2", "4", "-1", "abc", "9223372036854775807"][self.rng.range(0, 6) as usize];
            opts.push(vec![self.name("MINMATCHLEN"), b(m.as_bytes())]);
        }
        if self.rng.chance(3) {
            opts.push(vec![self.name("WITHMATCHLEN")]);
        }
        if self.rng.chance(25) {
            opts.push(vec![self.name("FOO")]);
        }
        self.shuffle(&mut opts);
        a.extend(opts.into_iter().flatten());
        let c = self.maybe_arity(Cmd::new(a, Cmp::Lcs));
        v.push(self.finish(c, vec![x, y]));
        v
    }
}
