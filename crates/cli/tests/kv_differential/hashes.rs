//! The hash commands beyond HSET and HGET: HINCRBYFLOAT, HSTRLEN, HRANDFIELD and HSCAN, on
//! keys of every type. Only what does not hang on a server's own draw or cursor is compared
//! exactly: HRANDFIELD of the whole hash (as a set of fields, or of field/value pairs), of
//! nothing, or refused; other counts by their number (`Cmp::Draw`). HSCAN from cursor 0 with a
//! COUNT past any hash here (one page, cursor 0, on both), or refused.

use super::super::compare::Cmp;
use super::strings::FLOATS;
use super::{b, Arg, Cmd, Gen};

impl Gen {
    /// One hash command (`which`) on key `k`.
    pub(super) fn hash(&mut self, which: &'static str, k: Vec<u8>) -> Vec<Cmd> {
        let n = |g: &mut Gen| g.name(which);
        let (args, cmp): (Vec<Arg>, Cmp) = match which {
            "HINCRBYFLOAT" => {
                let by = if self.rng.chance(3) {
                    self.int_text()
                } else {
                    FLOATS[self.rng.range(0, FLOATS.len() as u64 - 1) as usize].as_bytes().to_vec()
                };
                (vec![n(self), b(&k), Arg::B(self.field()), Arg::B(by)], Cmp::Exact)
            }
            "HSTRLEN" => (vec![n(self), b(&k), Arg::B(self.field())], Cmp::Exact),
            "HRANDFIELD" => {
                let mut a = vec![n(self), b(&k)];
                let with = self.rng.chance(2);
                let cmp = match self.rng.range(0, 9) {
                    // One field at random (or none, or an error).
                    0 => Cmp::Draw { distinct: true },
                    // A count within the hash: distinct fields (positive) or as many as asked.
                    1..=3 => {
                        let c = self.rng.range(0, 30) as i64 - 15;
                        a.push(Arg::B(c.to_string().into_bytes()));
                        Cmp::Draw { distinct: c > 0 && !with }
                    }
                    // The whole hash.
                    4..=6 => {
                        a.push(b(b"100000"));
                        if with {
                            Cmp::Pairs
                        } else {
                            Cmp::Unordered
                        }
                    }
                    // Refused, or nothing. (A count of -4611686018427387905 is refused only
                    // WITHVALUES; without, Redis would send that many fields.)
                    _ => {
                        let c = ["0", "abc", "", "-9223372036854775808", "-4611686018427387905", "1.5"]
                            [self.rng.range(0, 5) as usize];
                        a.push(b(c.as_bytes()));
                        if c == "-4611686018427387905" {
                            a.push(self.name("WITHVALUES"));
                        }
                        Cmp::Exact
                    }
                };
                if a.len() == 3 && with {
                    let w = if self.rng.chance(15) { "WITHVALUE" } else { "WITHVALUES" };
                    a.push(self.name(w));
                }
                (a, cmp)
            }
            "HSCAN" => {
                let cursor: &[u8] = match self.rng.range(0, 19) {
                    0 => b"abc",
                    1 => b"18446744073709551616",
                    2 => b"-1",
                    _ => b"0",
                };
                let mut a = vec![n(self), b(&k), b(cursor)];
                if self.rng.chance(3) {
                    let pat = ["*", "f*", "f[0-4]", "?", "r*", "", "\\*"][self.rng.range(0, 6) as usize];
                    a.extend([self.name("MATCH"), b(pat.as_bytes())]);
                }
                match self.rng.range(0, 19) {
                    0 => a.extend([self.name("COUNT"), b(b"0")]),
                    1 => a.extend([self.name("COUNT"), b(b"abc")]),
                    2 => a.push(self.name("COUNT")),
                    3 => a.extend([b(b"NOVALUES")]),
                    _ => a.extend([self.name("COUNT"), b(b"100000")]),
                }
                (a, Cmp::ScanPage)
            }
            other => unreachable!("{other} is not a hash command of this module"),
        };
        let c = self.maybe_arity(Cmd::new(args, cmp));
        vec![self.finish(c, vec![k])]
    }
}
