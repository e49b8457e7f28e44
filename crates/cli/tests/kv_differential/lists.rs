//! The blocking list commands: BLPOP, BRPOP, BRPOPLPUSH, BLMOVE and BLMPOP, on keys of every
//! type. No other client pushes, so a pop that finds nothing waits its timeout (10 ms) and
//! answers a null on both; timeouts that are refused (negative, not numbers) now and then.
//! Inside a transaction they do not wait, as in Redis.

use super::super::compare::Cmp;
use super::{b, Arg, Cmd, Gen, Pool};

impl Gen {
    /// One blocking list command (`which`) on keys of pool `p`, the first `k`.
    pub(super) fn blocking_list(&mut self, which: &'static str, p: Pool, k: Vec<u8>) -> Vec<Cmd> {
        let n = |g: &mut Gen| g.name(which);
        let side = |g: &mut Gen| {
            let s = if g.rng.chance(30) {
                "MIDDLE"
            } else if g.rng.chance(2) {
                "LEFT"
            } else {
                "RIGHT"
            };
            g.name(s)
        };
        let (args, keys): (Vec<Arg>, Vec<Vec<u8>>) = match which {
            "BLPOP" | "BRPOP" => {
                let mut keys = vec![k];
                keys.extend(self.keys(p, 0, 2));
                let mut a = vec![n(self)];
                a.extend(keys.iter().map(|k| b(k)));
                a.push(Arg::B(self.timeout()));
                (a, keys)
            }
            "BRPOPLPUSH" | "BLMOVE" => {
                let dst = self.key(p);
                let mut a = vec![n(self), b(&k), b(&dst)];
                if which == "BLMOVE" {
                    a.extend([side(self), side(self)]);
                }
                a.push(Arg::B(self.timeout()));
                (a, vec![k, dst])
            }
            "BLMPOP" => {
                let mut keys = vec![k];
                keys.extend(self.keys(p, 0, 2));
                let numkeys = match self.rng.range(0, 19) {
                    0 => b"0".to_vec(),
                    1 => b"-1".to_vec(),
                    2 => b"abc".to_vec(),
                    3 => (keys.len() + 1).to_string().into_bytes(),
                    _ => keys.len().to_string().into_bytes(),
                };
                let mut a = vec![n(self), Arg::B(self.timeout()), Arg::B(numkeys)];
                a.extend(keys.iter().map(|k| b(k)));
                a.push(side(self));
                if self.rng.chance(2) {
                    let c = ["1", "2", "5", "0", "-1", "abc"][self.rng.range(0, 5) as usize];
                    a.extend([self.name("COUNT"), b(c.as_bytes())]);
                }
                (a, keys)
            }
            other => unreachable!("{other} is not a blocking list command"),
        };
        let c = self.maybe_arity(Cmd::new(args, Cmp::Exact));
        vec![self.finish(c, keys)]
    }
}
